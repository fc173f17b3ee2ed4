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
}

impl FrontEnd {
    /// The front end that reads `path`. Every model is read as Relay text for now.
    pub fn of(_path: &Path) -> FrontEnd {
        FrontEnd::Relay
    }

    /// The front end that reads a model given as bytes, named `name`. Every model is read as
    /// Relay text for now.
    pub fn of_bytes(_bytes: &[u8], name: &str) -> FrontEnd {
        FrontEnd::of(Path::new(name))
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
    /// How diagnostics name the model.
    pub fn name(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Origin::File(p) => p.display().to_string().into(),
            Origin::Bytes { name, .. } => (*name).into(),
        }
    }

    /// The model's path, or its name as a path for a model in memory.
    pub fn path(&self) -> &Path {
        match self {
            Origin::File(p) => p,
            Origin::Bytes { name, .. } => Path::new(name),
        }
    }
}

/// Options of loading that only some front ends use: sizes for the dimensions of a model's
/// inputs that the model leaves unknown (`--input-shape NAME=1x3x224x224`, `--dim SYMBOL=N`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Whole shapes of inputs, by input name.
    pub input_shapes: Vec<(String, Vec<u64>)>,
    /// Sizes of named dimensions.
    pub dims: Vec<(String, u64)>,
}

impl Options {
    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        self.input_shapes.is_empty() && self.dims.is_empty()
    }
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

/// Loads a model file through its front end: parsed and type-checked.
pub fn model(sources: &mut SourceMap, path: &Path) -> Result<Module, Outcome> {
    model_from(sources, Origin::File(path), &Options::default())
}

/// Loads a model from a file or from memory through its front end, with the options of loading:
/// parsed and type-checked. Relay models have no unknown dimensions: options for them are E3900.
pub fn model_from(
    sources: &mut SourceMap,
    origin: Origin<'_>,
    opts: &Options,
) -> Result<Module, Outcome> {
    let front_end = match origin {
        Origin::File(path) => FrontEnd::of(path),
        Origin::Bytes { bytes, name, .. } => FrontEnd::of_bytes(bytes, name),
    };
    match front_end {
        FrontEnd::Relay => {
            if !opts.is_empty() {
                return Err(usage_error(
                    diag::E3900,
                    format!(
                        "`{}` is a Relay model: its inputs have fixed shapes, so input shapes and \
                         dimension sizes do not apply",
                        origin.name()
                    ),
                ));
            }
            let file = match origin {
                Origin::File(path) => read_source(sources, path)?,
                Origin::Bytes { bytes, name, .. } => add_source(sources, name, bytes)?,
            };
            crate::frontend::relay::load(sources, file).map_err(|diags| {
                report(&diags, sources);
                Outcome::InputErrors
            })
        }
    }
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
pub fn model_with_main(sources: &mut SourceMap, path: &Path) -> Result<(Module, FuncId), Outcome> {
    let m = model(sources, path)?;
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
}

/// Loads a model for partitioning: models with device annotations are planned first (with
/// nothing defaulted), and the planned module, with its copies, is what gets partitioned; the
/// planned device of every expression comes along.
pub fn planned(sources: &mut SourceMap, path: &Path) -> Result<Planned, Outcome> {
    let m = model(sources, path)?;
    plan(sources, m, path)
}

/// Plans a loaded model as [`planned`] does (`path` names it in diagnostics).
pub fn plan(sources: &SourceMap, m: Module, path: &Path) -> Result<Planned, Outcome> {
    main_of(&m, path)?;
    if !crate::analysis::devices::has_annotations(&m) {
        return Ok(Planned {
            module: m,
            devices: None,
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
