//! Loading inputs: models through their front end, rules through the rules language, with the
//! problems reported as diagnostics.
//!
//! [`model`] is the one entry every command loads a model through (`parse`, `candidates`,
//! `fuse`, `partition`, `plan-devices`, `run`, `bench`): it picks the front end ([`FrontEnd`])
//! and returns a type-checked [`Module`]. A second front end plugs in here.

use super::{report, usage_error, Outcome};
use crate::diag::{self, Diagnostic, E0901};
use crate::ir::{FuncId, Module, VirtualDevice};
use crate::rules::ruletree::Program;
use crate::rules::sema::{self, Provider};
use crate::source::{FileId, ReadError, SourceMap};
use std::path::{Path, PathBuf};

/// The front ends that read a model file into a [`Module`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontEnd {
    /// TVM's Relay text format ([`crate::frontend::relay`]).
    Relay,
    /// ONNX files ([`crate::frontend::onnx`]).
    Onnx,
}

impl FrontEnd {
    /// The front end that reads `path`: ONNX for a `.onnx` file (any case), Relay text
    /// otherwise.
    pub fn of(path: &Path) -> FrontEnd {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("onnx") => FrontEnd::Onnx,
            _ => FrontEnd::Relay,
        }
    }

    /// The front end named `relay` or `onnx`.
    pub fn parse(name: &str) -> Option<FrontEnd> {
        match name {
            "relay" => Some(FrontEnd::Relay),
            "onnx" => Some(FrontEnd::Onnx),
            _ => None,
        }
    }

    /// The front end that reads a model given as bytes and named `name`: by the name's
    /// extension when it is `.onnx` or `.relay`, else by the bytes: Relay text starts with
    /// text (a `#[version]` line, a comment or a definition), an ONNX model with a protobuf
    /// field tag, never a printable character followed by more text.
    pub fn of_bytes(bytes: &[u8], name: &str) -> FrontEnd {
        match Path::new(name).extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("onnx") => return FrontEnd::Onnx,
            Some(e) if e.eq_ignore_ascii_case("relay") => return FrontEnd::Relay,
            _ => {}
        }
        let text = bytes.trim_ascii_start();
        let relay = [&b"#"[..], b"def", b"fn", b"type", b"//", b"/*", b"v0"]
            .iter()
            .any(|p| text.starts_with(p));
        if relay {
            FrontEnd::Relay
        } else {
            FrontEnd::Onnx
        }
    }
}

/// Where a model comes from.
#[derive(Clone, Copy, Debug)]
pub enum Origin<'a> {
    /// A file.
    File(&'a Path),
    /// Bytes in memory (the Python API loads models from `bytes`).
    Bytes {
        /// The model.
        bytes: &'a [u8],
        /// How diagnostics name it.
        name: &'a str,
        /// The folder that files the model refers to (ONNX external data) are relative to.
        base_dir: Option<&'a Path>,
    },
}

impl Origin<'_> {
    /// The model's path, or its name as a path for a model in memory.
    pub fn path(&self) -> &Path {
        match self {
            Origin::File(p) => p,
            Origin::Bytes { name, .. } => Path::new(name),
        }
    }
}

/// How a model file is read: its format when the extension does not say it, and the sizes of
/// the unknown dimensions of an ONNX model's inputs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelOptions {
    /// The front end to use (`None`: chosen by the file's extension).
    pub format: Option<FrontEnd>,
    /// `NAME=D1xD2x...` input shapes (`--input-shape`).
    pub input_shapes: Vec<String>,
    /// `SYMBOL=N` dimension sizes (`--dim`).
    pub dims: Vec<String>,
    /// `NAME=D1xD2x...` shapes of the `.npy` files given for inputs (`run --input`): they size
    /// an input `--input-shape` does not, and must agree with `--dim` and with each other.
    pub file_shapes: Vec<String>,
    /// Whether the model is simplified once loaded, with the seed of the constants it binds
    /// (`None`: shown as given; `docs/simplify.md`).
    pub simplify: Option<crate::runtime::simplify::Options>,
}

/// Reads a file into the source map, or prints an error: E0901 when it cannot be read (or is
/// larger than the input limit), a located E0101 at the first byte that is not UTF-8.
pub fn read_source(sources: &mut SourceMap, path: &Path) -> Result<FileId, Outcome> {
    match crate::source::read_text(path) {
        Ok(text) => Ok(sources.add(path.display().to_string(), text)),
        Err(ReadError::NotUtf8 { text, at }) => {
            let d = diag::not_utf8(sources, path, text, at, crate::diag::E0101);
            diag::emit_stderr(&d.into(), sources);
            Err(Outcome::InputErrors)
        }
        Err(e) => Err(usage_error(
            E0901,
            format!("cannot read `{}`: {e}", path.display()),
        )),
    }
}

impl ModelOptions {
    /// These options with the shapes of an ONNX model's inputs also taken from the `.npy` files
    /// given for them (`run --input NAME=FILE`), for every input `--input-shape` does not
    /// already size. `NAME` may be the ONNX name or its identifier. Files that cannot be read
    /// are left for the run to report.
    pub fn with_input_files(&self, path: &Path, given: &[(String, PathBuf)]) -> ModelOptions {
        let mut out = self.clone();
        if self.format.unwrap_or_else(|| FrontEnd::of(path)) != FrontEnd::Onnx {
            return out;
        }
        for (name, file) in given {
            let onnx = crate::frontend::onnx::names::from_ident(name).unwrap_or(name.clone());
            let sized = self.input_shapes.iter().any(|s| {
                crate::frontend::onnx::shapes::parse_input_shape(s)
                    .is_ok_and(|(n, _)| n == *name || n == onnx)
            });
            if sized {
                continue;
            }
            let Ok(bytes) = crate::source::read_bytes(file) else {
                continue;
            };
            if let Ok(t) = crate::runtime::exec::npy::read(&bytes) {
                let dims: Vec<String> = t.shape().iter().map(usize::to_string).collect();
                out.file_shapes.push(format!("{onnx}={}", dims.join("x")));
            }
        }
        out
    }
}

/// Adds a model's text held in memory to the source map, as [`read_source`] adds a file's: a
/// located E0101 at the first byte that is not UTF-8, E0901 beyond the input limit.
pub fn add_source(sources: &mut SourceMap, name: &str, bytes: &[u8]) -> Result<FileId, Outcome> {
    let limit = crate::source::max_input_bytes();
    if bytes.len() as u64 > limit {
        return Err(usage_error(
            E0901,
            format!("cannot read `{name}`: it is larger than the input limit of {limit} bytes"),
        ));
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(sources.add(name.to_string(), text.to_string())),
        Err(e) => {
            let at = e.valid_up_to();
            let mut text = String::from_utf8_lossy(bytes).into_owned();
            text.truncate(text.floor_char_boundary(at + 3));
            let d = diag::not_utf8(sources, Path::new(name), text, at, crate::diag::E0101);
            diag::emit_stderr(&d.into(), sources);
            Err(Outcome::InputErrors)
        }
    }
}

/// Loads a model file through its front end: parsed (or imported) and type-checked.
pub fn model(sources: &mut SourceMap, path: &Path, opts: &ModelOptions) -> Result<Module, Outcome> {
    model_from(sources, Origin::File(path), opts)
}

/// Loads a model from a file or from memory through its front end, as [`model`] does.
pub fn model_from(
    sources: &mut SourceMap,
    origin: Origin<'_>,
    opts: &ModelOptions,
) -> Result<Module, Outcome> {
    model_reported(sources, origin, opts).map(|(m, _)| m)
}

/// Loads a model as [`model_from`] does, with what simplification did when `opts` asks for it.
pub fn model_reported(
    sources: &mut SourceMap,
    origin: Origin<'_>,
    opts: &ModelOptions,
) -> Result<(Module, Option<Simplified>), Outcome> {
    let m = model_as_given(sources, origin, opts)?;
    Ok(simplified(m, opts.simplify.as_ref()))
}

/// What simplification did to a loaded model.
pub type Simplified = crate::runtime::simplify::Report;

/// `m` simplified when `opts` is given (`docs/simplify.md`), with what was done. A failure is a
/// bug: it is reported (W3100) and the model is kept as it is.
pub fn simplified(
    m: Module,
    opts: Option<&crate::runtime::simplify::Options>,
) -> (Module, Option<Simplified>) {
    let Some(opts) = opts else {
        return (m, None);
    };
    match crate::runtime::simplify::simplify(&m, opts) {
        Ok((out, report)) => (out, Some(report)),
        Err(e) => {
            diag::emit_alone(
                Diagnostic::warning(crate::diag::W3100, format!("internal error: {e}"))
                    .with_note("the model is used as given, unsimplified"),
            );
            (m, None)
        }
    }
}

fn model_as_given(
    sources: &mut SourceMap,
    origin: Origin<'_>,
    opts: &ModelOptions,
) -> Result<Module, Outcome> {
    let front = opts.format.unwrap_or_else(|| match origin {
        Origin::File(path) => FrontEnd::of(path),
        Origin::Bytes { bytes, name, .. } => FrontEnd::of_bytes(bytes, name),
    });
    if front == FrontEnd::Relay && !(opts.input_shapes.is_empty() && opts.dims.is_empty()) {
        return Err(usage_error(
            crate::diag::E0905,
            "`--input-shape` and `--dim` apply to ONNX models; a Relay model's shapes are \
             written in its text"
                .to_string(),
        ));
    }
    match front {
        FrontEnd::Relay => {
            let file = match origin {
                Origin::File(path) => read_source(sources, path)?,
                Origin::Bytes { bytes, name, .. } => add_source(sources, name, bytes)?,
            };
            crate::frontend::relay::load(sources, file).map_err(|diags| {
                report(&diags, sources);
                Outcome::InputErrors
            })
        }
        FrontEnd::Onnx => onnx_from(sources, origin, opts).map(|i| i.module),
    }
}

/// Imports an ONNX model: decoded, its inputs' shapes bound by `opts`, its operators mapped.
/// Warnings are printed; errors are printed and turned into the outcome.
pub fn onnx(
    sources: &mut SourceMap,
    path: &Path,
    opts: &ModelOptions,
) -> Result<crate::frontend::onnx::import::Imported, Outcome> {
    onnx_from(sources, Origin::File(path), opts)
}

/// Imports an ONNX model from a file or from memory, as [`onnx`] does.
pub fn onnx_from(
    sources: &mut SourceMap,
    origin: Origin<'_>,
    opts: &ModelOptions,
) -> Result<crate::frontend::onnx::import::Imported, Outcome> {
    use crate::frontend::onnx;
    let fail = |diags: Vec<Diagnostic>, sources: &SourceMap| {
        let mut all = crate::diag::Diagnostics::new();
        for d in diags {
            all.push(d);
        }
        report(&all, sources);
        Outcome::InputErrors
    };
    let mut bindings = onnx::shapes::Bindings::parse(
        opts.input_shapes.iter().map(String::as_str),
        opts.dims.iter().map(String::as_str),
    )
    .map_err(|d| fail(vec![d], sources))?;
    bindings.files = opts
        .file_shapes
        .iter()
        .map(|s| onnx::shapes::parse_input_shape(s))
        .collect::<Result<_, _>>()
        .map_err(|d| fail(vec![d], sources))?;
    let model = match origin {
        Origin::File(path) => onnx::load_file(path),
        Origin::Bytes {
            bytes,
            name,
            base_dir,
        } => onnx::load_bytes(::bytes::Bytes::copy_from_slice(bytes), name, base_dir),
    }
    .map_err(|d| fail(d, sources))?;
    let imported =
        onnx::import::import(&model, &bindings, sources).map_err(|d| fail(d, sources))?;
    if !imported.warnings.is_empty() {
        let mut all = crate::diag::Diagnostics::new();
        for d in &imported.warnings {
            all.push(d.clone());
        }
        report(&all, sources);
    }
    Ok(imported)
}

/// The `@main` function of a loaded model, or E0904 naming the file and the functions it does
/// define.
pub fn main_of(m: &Module, path: &Path) -> Result<FuncId, Outcome> {
    if let Some(f) = m.main() {
        return Ok(f);
    }
    let defined: Vec<String> = m
        .defs
        .iter()
        .map(|(g, _)| format!("`@{}`", m.globals[g.index()].name))
        .collect();
    let d = Diagnostic::error(
        crate::diag::E0904,
        format!("`{}` has no `@main` function", path.display()),
    );
    diag::emit_alone(if defined.is_empty() {
        d.with_note("the module defines no functions")
    } else {
        d.with_note(format!(
            "it defines {}; collage works on `@main`: name the entry function `@main`",
            defined.join(", ")
        ))
    });
    Err(Outcome::InputErrors)
}

/// A model and its `@main`.
pub fn model_with_main(
    sources: &mut SourceMap,
    path: &Path,
    opts: &ModelOptions,
) -> Result<(Module, FuncId), Outcome> {
    let m = model(sources, path, opts)?;
    let main = main_of(&m, path)?;
    Ok((m, main))
}

/// A model ready to be partitioned, with the device planned for each expression when the model
/// has device annotations.
pub struct Planned {
    /// The model (planned, with its device copies, when it has annotations).
    pub module: Module,
    /// The planned device of every expression, by expression index (`None`: no annotations).
    pub devices: Option<Vec<VirtualDevice>>,
    /// What simplification did (`None`: the model was not simplified).
    pub simplified: Option<Simplified>,
}

/// Loads a model for partitioning: models with device annotations are planned first (with
/// nothing defaulted), and the planned module, with its copies, is what gets partitioned; the
/// planned device of every expression comes along.
pub fn planned(
    sources: &mut SourceMap,
    path: &Path,
    opts: &ModelOptions,
) -> Result<Planned, Outcome> {
    let (m, simplified) = model_reported(sources, Origin::File(path), opts)?;
    let mut planned = plan(sources, m, path)?;
    planned.simplified = simplified;
    Ok(planned)
}

/// Plans a loaded model as [`planned`] does (`path` names it in diagnostics).
pub fn plan(sources: &SourceMap, m: Module, path: &Path) -> Result<Planned, Outcome> {
    main_of(&m, path)?;
    if !crate::analysis::devices::has_annotations(&m) {
        return Ok(Planned {
            module: m,
            devices: None,
            simplified: None,
        });
    }
    match crate::analysis::devices::plan_devices(&m, &VirtualDevice::unconstrained()) {
        Ok(plan) => {
            let mut planned = plan.module;
            if let Err(d) = crate::analysis::typeck::check(&mut planned) {
                report(&d, sources);
                return Err(Outcome::Internal);
            }
            Ok(Planned {
                module: planned,
                devices: Some(plan.devices),
                simplified: None,
            })
        }
        Err(d) => {
            report(&d, sources);
            Err(Outcome::InputErrors)
        }
    }
}

/// Expands directories into their `.rules` files (sorted); files are kept as given.
pub fn rules_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Outcome> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let entries = std::fs::read_dir(p).map_err(|e| {
                usage_error(
                    E0901,
                    format!("cannot read directory `{}`: {e}", p.display()),
                )
            })?;
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "rules"))
                .collect();
            files.sort();
            out.extend(files);
        } else if p.is_file() {
            out.push(p.clone());
        } else {
            return Err(usage_error(
                E0901,
                format!("cannot read `{}`: no such file or directory", p.display()),
            ));
        }
    }
    Ok(out)
}

/// Checked rules and the files they were read from.
pub struct Rules {
    /// The compiled targets and rule trees.
    pub program: Program,
    /// The files read from disk (canonical paths, imports included; none for the library).
    pub files: Vec<PathBuf>,
}

/// Loads rules: the given files and directories, or the embedded library when there are none.
pub fn rules(sources: &mut SourceMap, paths: &[PathBuf]) -> Result<Rules, Outcome> {
    let checked = if paths.is_empty() {
        sema::check(
            sources,
            &Provider::Embedded(crate::rules::library::LIBRARY),
            &crate::rules::library::roots(),
        )
    } else {
        let roots = rules_files(paths)?;
        sema::check(sources, &Provider::Files, &roots)
    };
    report(&checked.diags, sources);
    match checked.program {
        Some(program) => Ok(Rules {
            program,
            files: checked.disk_files,
        }),
        None => Err(Outcome::InputErrors),
    }
}
