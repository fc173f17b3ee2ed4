//! Loading `.rules` files and their imports, with cycles diagnosed.

use crate::diag::{Diagnostic, Diagnostics, E1101, E1102};
use crate::dsl::ast;
use crate::source::{SourceMap, Span};
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

/// Where files come from.
pub enum Provider<'a> {
    /// The file system.
    Files,
    /// A fixed table of `(path, text)` (the shipped library embedded in the binary).
    Embedded(&'a [(&'a str, &'a str)]),
}

impl Provider<'_> {
    fn read(&self, path: &Path) -> Result<String, String> {
        match self {
            Provider::Files => std::fs::read_to_string(path).map_err(|e| e.to_string()),
            Provider::Embedded(table) => {
                let key = path.to_string_lossy().replace('\\', "/");
                table
                    .iter()
                    .find(|(p, _)| *p == key)
                    .map(|(_, t)| t.to_string())
                    .ok_or_else(|| "no such file in the built-in library".to_string())
            }
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
    let mut diags = Diagnostics::new();
    let mut files: Vec<Loaded> = Vec::new();
    let mut index_of: HashMap<PathBuf, usize> = HashMap::new();
    // Files whose imports are still being loaded, for cycle detection: (index, import span).
    for root in roots {
        let root = normalize(root);
        if let Some(&i) = index_of.get(&root) {
            files[i].is_root = true;
            continue;
        }
        let text = match provider.read(&root) {
            Ok(t) => t,
            Err(e) => {
                diags.push(
                    Diagnostic::error(E1101, format!("cannot read `{}`: {e}", root.display()))
                        .with_note("check the path given on the command line"),
                );
                continue;
            }
        };
        load_tree(
            sources,
            provider,
            root,
            text,
            &mut files,
            &mut index_of,
            &mut diags,
        );
        if let Some(i) = files.len().checked_sub(1) {
            files[i].is_root = true;
        }
    }
    (files, diags)
}

/// Depth-first load with an explicit stack. Each stack frame is a file whose imports are
/// being processed.
fn load_tree(
    sources: &mut SourceMap,
    provider: &Provider<'_>,
    root: PathBuf,
    text: String,
    files: &mut Vec<Loaded>,
    index_of: &mut HashMap<PathBuf, usize>,
    diags: &mut Diagnostics,
) {
    struct Frame {
        path: PathBuf,
        broken: bool,
        ast: ast::File,
        /// (path, span) of each import still to resolve.
        pending: Vec<(String, Span)>,
        done: Vec<usize>,
    }
    let open = |sources: &mut SourceMap, path: PathBuf, text: String, diags: &mut Diagnostics| {
        let file = sources.add(path.display().to_string(), text);
        let (ast, d) = crate::dsl::parse_file(sources.text(file), file);
        diags.extend(d);
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
            path,
            broken: false,
            ast,
            pending,
            done: Vec::new(),
        }
    };
    let mut stack = vec![open(sources, root, text, diags)];
    while let Some(top) = stack.last_mut() {
        let Some((rel, span)) = top.pending.pop() else {
            let f = stack.pop().expect("non-empty stack");
            let idx = files.len();
            index_of.insert(f.path.clone(), idx);
            files.push(Loaded {
                broken: f.broken,
                ast: f.ast,
                imports: f.done,
                is_root: false,
            });
            if let Some(parent) = stack.last_mut() {
                parent.done.push(idx);
            }
            continue;
        };
        let base = top.path.parent().map(Path::to_path_buf).unwrap_or_default();
        let target = normalize(&base.join(&rel));
        if let Some(&i) = index_of.get(&target) {
            top.done.push(i);
            continue;
        }
        if let Some(pos) = stack.iter().position(|f| f.path == target) {
            let chain: Vec<String> = stack[pos..]
                .iter()
                .map(|f| f.path.display().to_string())
                .collect();
            diags.push(
                Diagnostic::error(
                    E1102,
                    format!("import cycle: `{}` imports itself", target.display()),
                )
                .with_primary(span, "this import closes the cycle")
                .with_note(format!(
                    "cycle: {} -> {}",
                    chain.join(" -> "),
                    target.display()
                )),
            );
            continue;
        }
        match provider.read(&target) {
            Ok(text) => {
                let frame = open(sources, target, text, diags);
                stack.push(frame);
            }
            Err(e) => {
                if let Some(top) = stack.last_mut() {
                    top.broken = true;
                }
                diags.push(
                    Diagnostic::error(E1101, format!("cannot import `{rel}`: {e}"))
                        .with_primary(span, format!("looked for `{}`", target.display())),
                )
            }
        }
    }
}
