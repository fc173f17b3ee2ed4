//! `collage partition`: the pipeline up to the partitioned program, its report (table or
//! JSON), a DOT picture and explanations.

mod report;

pub use report::{dot, report_json, report_table};

use super::progress::Bar;
use super::render::{self, Format};
use super::Outcome;
use crate::pipeline::{self, measuring::MeasureArgs, Inputs, Targets};
use crate::planning::enumerate::Limits;
use crate::planning::partition::{self, Progress as _};
use crate::source::SourceMap;
use std::path::PathBuf;
use std::time::Instant;

/// Everything `collage partition` is asked to do.
#[derive(Clone, Debug)]
pub struct Request {
    /// The model.
    pub model: PathBuf,
    /// How the model is read.
    pub model_options: crate::pipeline::load::ModelOptions,
    /// Rules files or directories (empty: the shipped library).
    pub rules: Vec<PathBuf>,
    /// Only these targets (the host is always kept).
    pub targets: Vec<String>,
    /// The cost specification.
    pub costs: crate::planning::cost::Spec,
    /// Time limit of one `cmd:` measurement.
    pub cmd_timeout: std::time::Duration,
    /// Depth limits.
    pub limits: Limits,
    /// Where to write the partitioned program (`None`: print it before a table report).
    pub output: Option<PathBuf>,
    /// Report format.
    pub format: Format,
    /// Where to write the DOT picture.
    pub dot: Option<PathBuf>,
    /// Bindings to explain.
    pub explain: Vec<String>,
    /// Compute baselines.
    pub baselines: bool,
    /// Use the A* lower bound.
    pub lower_bound: bool,
    /// Prune candidates before searching.
    pub prune: bool,
    /// Print the wall time of each phase on stderr.
    pub timings: bool,
    /// How the partitioned program is printed (`--tvm-compat`).
    pub print: crate::frontend::relay::print::PrintOptions,
    /// Where and how `--costs measure` measures.
    pub measure: MeasureArgs,
    /// Show progress on stderr even when it is not a terminal.
    pub progress: bool,
}

/// Runs `collage partition`.
pub fn partition_command(req: &Request) -> Outcome {
    match partition_inner(req) {
        Ok(o) | Err(o) => o,
    }
}

fn partition_inner(req: &Request) -> Result<Outcome, Outcome> {
    let start = Instant::now();
    let bar = Bar::new(req.timings, req.progress);
    bar.phase("loading", 0);
    let mut sources = SourceMap::new();
    check_outputs(req, &[])?;
    let inputs = Inputs {
        model: &req.model,
        model_options: &req.model_options,
        rules: &req.rules,
        targets: Targets::Named(&req.targets),
        costs: &req.costs,
        cmd_timeout: req.cmd_timeout,
        measure: &req.measure,
    };
    let prepared = pipeline::prepare(&mut sources, &inputs, &|read| check_outputs(req, read))?;
    let (m, program) = (&prepared.model.module, &prepared.program);
    let g = pipeline::graph(m)?;
    let popts = partition::Options {
        limits: req.limits,
        search: crate::planning::search::Options {
            lower_bound: req.lower_bound,
        },
        baselines: req.baselines,
        prune: req.prune,
    };
    bar.show();
    let plan = pipeline::search(&sources, &prepared, &g, &popts, &bar)?;
    bar.phase("rewriting", 0);
    let text = pipeline::finalize(&sources, m, &g, program, &plan, req.print, &bar)?;
    if !req.explain.is_empty() {
        bar.phase("explaining", 0);
    }
    let explained = pipeline::explanations(m, &g, &plan, &popts, &req.explain, &bar)?;
    bar.phase("writing", 0);
    bar.hide();
    let elapsed = start.elapsed().as_secs_f64() * 1e3;
    if let Some(path) = &req.output {
        super::write_output(path, &text)?;
    }
    if let Some(path) = &req.dot {
        super::write_output(path, &dot(m, &g, program, &plan))?;
    }
    let measurer = prepared.estimator.measurer.as_deref();
    let printed = match req.format {
        Format::Json => {
            let explained: Vec<serde_json::Value> = explained
                .iter()
                .map(|e| report::explanation_json(m, &g, &sources, program, &plan, e))
                .collect();
            let mut v = report_json(m, &g, &sources, program, &plan, elapsed, &explained);
            if let Some(r) = &prepared.model.simplified {
                v["simplify"] = serde_json::to_value(r).unwrap_or_default();
            }
            if let Some(mm) = measurer {
                v["stats"]["measure"] = render::summary_json(mm);
            }
            super::out(&format!(
                "{}\n",
                serde_json::to_string_pretty(&v).unwrap_or_default()
            ))
        }
        Format::Table => {
            let mut out = if req.output.is_none() {
                format!("{text}\n")
            } else {
                String::new()
            };
            out.push_str(&report_table(m, &g, &sources, program, &plan, elapsed));
            if let Some(r) = &prepared.model.simplified {
                out.push_str(&format!("simplify: {}\n", r.summary()));
            }
            if let Some(mm) = measurer {
                out.push_str(&format!("{}\n", render::summary_line(mm)));
            }
            for e in &explained {
                let e = report::explanation_text(m, &g, &sources, program, &plan, e);
                out.push_str(&format!("\n{e}"));
            }
            super::out(&out)
        }
    };
    Ok(super::written(printed))
}

/// Refuses `-o`, `--dot` and `--cache` (when measuring) naming each other or an input (see
/// [`super::output::check_output_paths`]); `rules_read` are the rules files read once loaded,
/// imports included.
fn check_outputs(req: &Request, rules_read: &[PathBuf]) -> Result<(), Outcome> {
    let mut outputs: Vec<(&str, &std::path::Path)> = Vec::new();
    if let Some(o) = &req.output {
        outputs.push(("-o", o));
    }
    if let Some(d) = &req.dot {
        outputs.push(("--dot", d));
    }
    if let Some(c) = req.measure.cache.as_deref() {
        if req.costs.uses_measure() {
            outputs.push(("--cache", c));
        }
    }
    super::output::check_output_paths(&outputs, &req.model, &req.rules, rules_read, &req.costs)
}
