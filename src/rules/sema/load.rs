//! Loading `.rules` files and their imports, with cycles diagnosed.

use crate::diag::{Diagnostic, Diagnostics, E1003, E1101, E1102};
use crate::rules::dsl::ast;
use crate::source::{SourceMap, Span};
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

/// Where files come from.
pub enum Provider<'a> {
    /// The file system; an import not found next to its importer falls back to the shipped
    /// library embedded in the binary ([`crate::rules::library::LIBRARY`]).
    Files,
    /// A fixed table of `(path, text)` (the shipped library embedded in the binary).
    Embedded(&'a [(&'a str, &'a str)]),
}

/// Where a loaded file lives. Two spellings of one file (a symlink, `../`, an absolute path)
/// have one origin, so the file is loaded once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Origin {
    /// On disk, by canonical path.
    Disk(PathBuf),
    /// In an embedded table, by its normalised key.
    Table(PathBuf),
}

/// A file found by the provider: its identity, the name it is shown under, and its text.
struct Found {
    origin: Origin,
    name: PathBuf,
    text: String,
}

/// Why a file could not be had.
enum Missing {
    /// Nothing at that place.
    NotFound(String),
    /// It is there but unusable (unreadable, too large); the reason.
    Unreadable(String),
    /// It is there but not UTF-8: its readable prefix and the offset of the first bad byte.
    NotUtf8(PathBuf, String, usize),
}

/// The directory of the embedded library's files (its keys start with it).
const LIBRARY_DIR: &str = "rules";

fn table_lookup(table: &[(&str, &str)], key: &Path) -> Option<String> {
    let key = key.to_string_lossy().replace('\\', "/");
    table
        .iter()
        .find(|(p, _)| *p == key)
        .map(|(_, t)| t.to_string())
}

fn from_table(table: &[(&str, &str)], key: PathBuf) -> Result<Found, Missing> {
    match table_lookup(table, &key) {
        Some(text) => Ok(Found {
            origin: Origin::Table(key.clone()),
            name: key,
            text,
        }),
        None => Err(Missing::NotFound(format!(
            "`{}` is not in the built-in library",
            key.display()
        ))),
    }
}

fn from_disk(path: PathBuf) -> Result<Found, Missing> {
    use crate::source::ReadError;
    match crate::source::read_text(&path) {
        Ok(text) => {
            let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            Ok(Found {
                origin: Origin::Disk(canonical),
                name: path,
                text,
            })
        }
        Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Err(
            Missing::NotFound(format!("`{}` does not exist", path.display())),
        ),
        Err(ReadError::NotUtf8 { text, at }) => Err(Missing::NotUtf8(path, text, at)),
        Err(e) => Err(Missing::Unreadable(format!("`{}`: {e}", path.display()))),
    }
}

impl Provider<'_> {
    /// A file named on the command line.
    fn root(&self, path: &Path) -> Result<Found, Missing> {
        match self {
            Provider::Files => from_disk(normalize(path)),
            Provider::Embedded(table) => from_table(table, normalize(path)),
        }
    }

    /// The file that `import "rel";` in `importer` names: next to the importer first; for a
    /// file on disk, then in the shipped library. The error lists every place looked at.
    fn import(&self, importer: &Found, rel: &str) -> Result<Found, Missing> {
        let base = importer
            .name
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let beside = normalize(&base.join(rel));
        match (&importer.origin, self) {
            (Origin::Table(_), Provider::Embedded(table)) => from_table(table, beside),
            (Origin::Table(_), Provider::Files) => {
                from_table(crate::rules::library::LIBRARY, beside)
            }
            (Origin::Disk(_), _) => match from_disk(beside) {
                Err(Missing::NotFound(first)) if Path::new(rel).is_relative() => {
                    let key = normalize(&Path::new(LIBRARY_DIR).join(rel));
                    from_table(crate::rules::library::LIBRARY, key).map_err(|_| {
                        Missing::NotFound(format!(
                            "{first}, and the shipped library has no `{rel}`"
                        ))
                    })
                }
                other => other,
            },
        }
    }
}

/// One loaded file.
pub struct Loaded {
    /// Whether one of its own imports could not be loaded.
    pub broken: bool,
    /// Its syntax tree.
    pub ast: ast::File,
    /// Files it imports directly (indices into [`Loaded`] list).
    pub imports: Vec<usize>,
    /// Whether it was named on the command line (not only imported).
    pub is_root: bool,
    /// Its path on disk (canonical), `None` for a file of an embedded table.
    pub disk_path: Option<PathBuf>,
}

/// Lexically normalises a path (`a/./b/../c` → `a/c`).
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Loads the root files and everything they import. Returns the files with imports before
/// importers (roots in the order given), plus diagnostics.
pub fn load(
    sources: &mut SourceMap,
    provider: &Provider<'_>,
    roots: &[PathBuf],
) -> (Vec<Loaded>, Diagnostics) {
    let mut cx = Loader {
        sources,
        provider,
        files: Vec::new(),
        index_of: HashMap::new(),
        diags: Diagnostics::new(),
    };
    for root in roots {
        let found = match provider.root(root) {
            Ok(f) => f,
            Err(missing) => {
                let d = cx.missing(missing, None);
                cx.diags.push(d);
                continue;
            }
        };
        if let Some(&i) = cx.index_of.get(&found.origin) {
            cx.files[i].is_root = true;
            continue;
        }
        cx.load_tree(found);
        if let Some(i) = cx.files.len().checked_sub(1) {
            cx.files[i].is_root = true;
        }
    }
    (cx.files, cx.diags)
}

struct Loader<'s, 'p> {
    sources: &'s mut SourceMap,
    provider: &'p Provider<'p>,
    files: Vec<Loaded>,
    index_of: HashMap<Origin, usize>,
    diags: Diagnostics,
}

/// A file whose imports are being loaded.
struct Frame {
    found: Found,
    broken: bool,
    ast: ast::File,
    /// (path, span) of each import still to resolve, last first.
    pending: Vec<(String, Span)>,
    done: Vec<usize>,
}

impl Loader<'_, '_> {
    /// The diagnostic for a file that could not be had; `import` is the import's text and span.
    fn missing(&mut self, missing: Missing, import: Option<(&str, Span)>) -> Diagnostic {
        let what = match import {
            Some((rel, _)) => format!("cannot import `{rel}`"),
            None => "cannot read a rules file".to_string(),
        };
        let (d, reason) = match missing {
            Missing::NotUtf8(path, text, at) => {
                let d = crate::diag::not_utf8(self.sources, &path, text, at, E1003);
                (d, None)
            }
            Missing::NotFound(r) | Missing::Unreadable(r) => {
                (Diagnostic::error(E1101, format!("{what}: {r}")), Some(()))
            }
        };
        match (import, reason) {
            (Some((_, span)), Some(())) => d.with_primary(span, "imported here"),
            (Some((_, span)), None) => d.with_secondary(span, "imported here"),
            (None, Some(())) => d.with_note("check the path given on the command line"),
            (None, None) => d,
        }
    }

    fn open(&mut self, found: Found) -> Frame {
        let file = self
            .sources
            .add(found.name.display().to_string(), found.text.clone());
        let (ast, d) = crate::rules::dsl::parse_file(self.sources.text(file), file);
        self.diags.extend(d);
        let mut pending: Vec<(String, Span)> = ast
            .items
            .iter()
            .filter_map(|it| match &it.kind {
                ast::ItemKind::Import(s) => Some((s.value.clone(), s.span)),
                _ => None,
            })
            .collect();
        pending.reverse();
        Frame {
            found,
            broken: false,
            ast,
            pending,
            done: Vec::new(),
        }
    }

    /// Depth-first load with an explicit stack: each frame is a file whose imports are being
    /// processed.
    fn load_tree(&mut self, root: Found) {
        let first = self.open(root);
        let mut stack = vec![first];
        while let Some(top) = stack.last_mut() {
            let Some((rel, span)) = top.pending.pop() else {
                let f = stack.pop().expect("non-empty stack");
                let idx = self.files.len();
                let disk_path = match &f.found.origin {
                    Origin::Disk(p) => Some(p.clone()),
                    Origin::Table(_) => None,
                };
                self.index_of.insert(f.found.origin, idx);
                self.files.push(Loaded {
                    broken: f.broken,
                    ast: f.ast,
                    imports: f.done,
                    is_root: false,
                    disk_path,
                });
                if let Some(parent) = stack.last_mut() {
                    parent.done.push(idx);
                }
                continue;
            };
            let found = match self.provider.import(&top.found, &rel) {
                Ok(f) => f,
                Err(missing) => {
                    top.broken = true;
                    let d = self.missing(missing, Some((&rel, span)));
                    self.diags.push(d);
                    continue;
                }
            };
            if let Some(&i) = self.index_of.get(&found.origin) {
                top.done.push(i);
                continue;
            }
            if let Some(pos) = stack.iter().position(|f| f.found.origin == found.origin) {
                let chain: Vec<String> = stack[pos..]
                    .iter()
                    .map(|f| f.found.name.display().to_string())
                    .collect();
                self.diags.push(
                    Diagnostic::error(
                        E1102,
                        format!("import cycle: `{}` imports itself", found.name.display()),
                    )
                    .with_primary(span, "this import closes the cycle")
                    .with_note(format!(
                        "cycle: {} -> {}",
                        chain.join(" -> "),
                        found.name.display()
                    )),
                );
                continue;
            }
            let frame = self.open(found);
            stack.push(frame);
        }
    }
}
