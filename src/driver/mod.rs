//! The commands: each reads its arguments, calls the pipeline ([`crate::pipeline`]) for the
//! work, renders what it returns, and decides the exit code. No command module uses another;
//! what several share lives below them: the pipeline, [`render`] (report formats and shared
//! pieces of reports), [`progress`] (the progress display) and [`output`] (output files).

use crate::analysis::dataflow::{Graph, NodeIdx};
use crate::diag::{self, Diagnostic};
use crate::frontend::relay;
use crate::ir::Module;
use crate::source::SourceMap;
use std::path::Path;

pub use crate::pipeline::{
    load::model as load_model, load::ModelOptions, main_of, read_source, report, rules_files,
    usage_error, Outcome,
};

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

/// `collage parse MODEL [--json] [--no-type-comments] [--tvm-compat]`.
pub fn parse_command(
    path: &Path,
    model_options: &ModelOptions,
    json: bool,
    opts: relay::print::PrintOptions,
) -> Outcome {
    let mut sources = SourceMap::new();
    let m = match load_model(&mut sources, path, model_options) {
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
                crate::analysis::dataflow::NodeRef::Expr(e) => m.ty(e).map(|t| t.to_string()),
                crate::analysis::dataflow::NodeRef::Func(f) => {
                    function_type(m, f).map(|t| t.to_string())
                }
                crate::analysis::dataflow::NodeRef::Op(_) => None,
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

/// `collage check FILE|DIR... [--print]`: checks rules files; with `--print`, prints the compiled
/// rule trees.
pub fn check_command(paths: &[std::path::PathBuf], print: bool) -> Outcome {
    let roots = match rules_files(paths) {
        Ok(r) => r,
        Err(o) => return o,
    };
    let mut sources = SourceMap::new();
    let checked =
        crate::rules::sema::check(&mut sources, &crate::rules::sema::Provider::Files, &roots);
    report(&checked.diags, &sources);
    match checked.program {
        Some(p) => {
            if print {
                written(out(&crate::rules::ruletree::print::print_program(&p)))
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
pub mod output;
pub mod partition;
pub mod progress;
pub mod render;
pub mod run;

pub use candidates::candidates_command;
pub use devices::{parse_device_arg, plan_devices_command, DeviceForm};
pub use fuse::{fuse_command, fuse_json, fuse_node_desc, fuse_node_name, fuse_text};
pub use generate::{generate_command, Generated};
