//! The pipeline behind each command, in one place: load inputs, run the phases, render results
//! and diagnostics, and decide the exit code.

use crate::dataflow::{Graph, NodeIdx};
use crate::diag::{self, Diagnostic, Diagnostics, E0901};
use crate::ir::Module;
use crate::relay;
use crate::source::{ReadError, SourceMap};
use std::path::Path;

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Success.
    Ok,
    /// The input has errors (diagnostics were printed).
    InputErrors,
    /// Usage or I/O problem.
    Usage,
    /// A bug in collage itself.
    Internal,
}

impl Outcome {
    /// The process exit code: 0, 1 for input errors, 2 for usage or I/O errors, 101 for bugs.
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Ok => 0,
            Outcome::InputErrors => 1,
            Outcome::Usage => 2,
            Outcome::Internal => 101,
        }
    }
}

/// Reports an error that points at no source (a flag, a file as a whole, the machine) as a
/// diagnostic, with user text escaped as in every diagnostic; usage errors exit with code 2.
pub fn usage_error(code: diag::Code, msg: impl Into<String>) -> Outcome {
    diag::emit_alone(Diagnostic::error(code, msg));
    Outcome::Usage
}

/// Writes command output to standard output. A closed pipe (`collage ... | head`) is not an
/// error worth a message: the rest of the output is dropped. Any other failed write (a full
/// disk, `/dev/full`) is E0902 and exit code 2, so a truncated output never passes for success.
pub fn out(text: &str) -> Result<(), Outcome> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout_written(
        stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush()),
    )
}

/// The outcome of a write to standard output, reported as [`out`] reports it.
pub fn stdout_written(result: std::io::Result<()>) -> Result<(), Outcome> {
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => {
            diag::emit_alone(Diagnostic::error(
                diag::E0902,
                format!("cannot write standard output: {e}"),
            ));
            Err(Outcome::Usage)
        }
    }
}

/// The outcome of a command whose last step is writing: `Ok` or the write's failure.
pub fn written(result: Result<(), Outcome>) -> Outcome {
    result.err().unwrap_or(Outcome::Ok)
}

/// Writes an output file (see [`output`] for what is replaced and what is written in place), or
/// reports why it cannot.
pub fn write_output(path: &Path, text: &str) -> Result<(), Outcome> {
    output::write_file(path, text.as_bytes()).map_err(|e| {
        usage_error(
            crate::diag::E0902,
            format!("cannot write `{}`: {e}", path.display()),
        )
    })
}

/// Reads a file into the source map, or prints an error: E0901 when it cannot be read (or is
/// larger than the input limit), a located E0101 at the first byte that is not UTF-8.
pub fn read_source(sources: &mut SourceMap, path: &Path) -> Result<crate::source::FileId, Outcome> {
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

/// Loads (parses and type-checks) a model file.
pub fn load_model(sources: &mut SourceMap, path: &Path) -> Result<Module, Outcome> {
    let file = read_source(sources, path)?;
    relay::load(sources, file).map_err(|diags| {
        report(&diags, sources);
        Outcome::InputErrors
    })
}

/// The `@main` function of a loaded model, or E0904 naming the file and the functions it does
/// define.
pub fn main_of(m: &Module, path: &Path) -> Result<crate::ir::FuncId, Outcome> {
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

/// Prints diagnostics to standard error in source order.
pub fn report(diags: &Diagnostics, sources: &SourceMap) {
    let mut sorted = diags.clone();
    sorted.sort_by_position();
    diag::emit_stderr(&sorted, sources);
}

/// `collage parse MODEL [--json] [--no-type-comments] [--tvm-compat]`.
pub fn parse_command(path: &Path, json: bool, opts: relay::print::PrintOptions) -> Outcome {
    let mut sources = SourceMap::new();
    let m = match load_model(&mut sources, path) {
        Ok(m) => m,
        Err(o) => return o,
    };
    if json {
        if let Err(o) = main_of(&m, path) {
            return o;
        }
        let v = dataflow_json(&m).unwrap_or_default();
        written(out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&v).unwrap_or_default()
        )))
    } else {
        written(out(&relay::print::print_module_with(&m, opts)))
    }
}

/// The dataflow graph of `@main` as JSON: `{"function", "nodes": [{index, kind, op, type,
/// binding, span, inputs}]}`.
pub fn dataflow_json(m: &Module) -> Option<serde_json::Value> {
    let main = m.main()?;
    let g = Graph::build(m, main);
    let nodes: Vec<serde_json::Value> = (0..g.len())
        .map(|i| {
            let idx = NodeIdx(i as u32);
            let ty = match g.nodes[i].what {
                crate::dataflow::NodeRef::Expr(e) => m.ty(e).map(|t| t.to_string()),
                crate::dataflow::NodeRef::Func(f) => function_type(m, f).map(|t| t.to_string()),
                crate::dataflow::NodeRef::Op(_) => None,
            };
            let span = g
                .span(m, idx)
                .map(|s| serde_json::json!({"start": s.start, "end": s.end}));
            serde_json::json!({
                "index": i,
                "kind": g.kind_name(m, idx),
                "op": g.op_name(m, idx),
                "type": ty,
                "binding": g.binding(m, idx),
                "span": span,
                "inputs": g.nodes[i].inputs.iter().map(|x| x.0).collect::<Vec<_>>(),
            })
        })
        .collect();
    let name = m
        .defs
        .iter()
        .find(|(_, f)| *f == main)
        .map(|(g, _)| m.globals[g.index()].name.clone());
    Some(serde_json::json!({"function": name, "nodes": nodes}))
}

/// The type of a function from its parameters' and body's inferred types.
pub fn function_type(m: &Module, f: crate::ir::FuncId) -> Option<crate::ir::Type> {
    let func = m.func(f);
    let params = func
        .params
        .iter()
        .map(|p| m.ty(m.var(*p).expr).cloned())
        .collect::<Option<Vec<_>>>()?;
    let ret = m.ty(func.body)?.clone();
    Some(crate::ir::Type::Func(crate::ir::FuncType {
        params,
        ret: Box::new(ret),
    }))
}

/// Expands directories into their `.rules` files (sorted); files are kept as given.
pub fn rules_files(paths: &[std::path::PathBuf]) -> Result<Vec<std::path::PathBuf>, Outcome> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let entries = std::fs::read_dir(p).map_err(|e| {
                usage_error(
                    E0901,
                    format!("cannot read directory `{}`: {e}", p.display()),
                )
            })?;
            let mut files: Vec<std::path::PathBuf> = entries
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

/// `collage check FILE|DIR... [--print]`: checks rules files; with `--print`, prints the compiled
/// rule trees.
pub fn check_command(paths: &[std::path::PathBuf], print: bool) -> Outcome {
    let roots = match rules_files(paths) {
        Ok(r) => r,
        Err(o) => return o,
    };
    let mut sources = SourceMap::new();
    let checked = crate::sema::check(&mut sources, &crate::sema::Provider::Files, &roots);
    report(&checked.diags, &sources);
    match checked.program {
        Some(p) => {
            if print {
                written(out(&crate::ruletree::print::print_program(&p)))
            } else {
                Outcome::Ok
            }
        }
        None => Outcome::InputErrors,
    }
}

pub mod backends;
pub mod bench;
pub mod cache;
mod candidates;
mod devices;
mod fuse;
mod generate;
pub mod measuring;
pub mod output;
pub mod partition;
pub mod run;

pub use candidates::candidates_command;
pub use devices::{parse_device_arg, plan_devices_command, DeviceForm};
pub use fuse::{fuse_command, fuse_json, fuse_node_desc, fuse_node_name, fuse_text};
pub use generate::{generate_command, Generated};
