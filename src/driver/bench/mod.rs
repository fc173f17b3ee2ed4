//! `collage bench`: partitions a model with measured costs, then runs the Collage plan and every
//! baseline placement end to end on this machine, on the same weights and inputs, checks their
//! outputs against the reference interpreter, and reports their latencies side by side (table,
//! JSON, an SVG chart).
//!
//! The work is the pipeline's ([`crate::pipeline::prepare`], [`crate::pipeline::search`] and
//! [`crate::pipeline::placements`], which says what the placements are and how they run); this
//! module orders it and renders the results ([`report`], [`chart`]).

mod chart;
pub mod processes;
mod report;

use super::progress::Bar;
use super::render::Format;
use super::Outcome;
use crate::diag::{self, Diagnostic, Diagnostics};
use crate::pipeline::onnxruntime;
use crate::pipeline::placements::{self, Row, Status};
use crate::pipeline::{self, checks, measuring, Inputs, Targets};
use crate::planning::enumerate::Limits;
use crate::planning::partition::{self, Progress as _};
use crate::runtime::backend::registry::Setup;
use crate::runtime::exec::data::Weights;
use crate::runtime::measure::protocol::Settings;
use crate::source::SourceMap;
use std::path::PathBuf;
use std::time::Instant;

/// Everything `collage bench` is asked to do.
#[derive(Clone, Debug)]
pub struct Request {
    /// The model.
    pub model: PathBuf,
    /// How the model is read.
    pub model_options: crate::pipeline::load::ModelOptions,
    /// Rules files or directories (empty: the shipped library).
    pub rules: Vec<PathBuf>,
    /// Only these targets (empty: the targets that can run here; the host is always kept).
    pub targets: Vec<String>,
    /// The cost specification.
    pub costs: crate::planning::cost::Spec,
    /// Time limit of one `cmd:` measurement.
    pub cmd_timeout: std::time::Duration,
    /// Depth limits.
    pub limits: Limits,
    /// Threads, cache and candidate budget.
    pub measure: measuring::MeasureArgs,
    /// The time budget of one placement's end-to-end measurement, in seconds.
    pub run_budget: Option<f64>,
    /// Report format.
    pub format: Format,
    /// Where to write the SVG chart.
    pub plot: Option<PathBuf>,
    /// Print each placement's partitions with their estimates and times inside the model.
    pub profile: bool,
    /// Relative tolerance of the output check (default per dtype).
    pub rtol: Option<f64>,
    /// Absolute tolerance of the output check (default per dtype).
    pub atol: Option<f64>,
    /// Show progress on stderr even when it is not a terminal.
    pub progress: bool,
    /// `--max-memory`: the memory limit (default: what the machine has available).
    pub max_memory: Option<String>,
    /// `--onnxruntime`: when ONNX Runtime on the same file is one of the placements.
    pub onnxruntime: onnxruntime::When,
    /// `--processes`: the comparison is made in this many fresh processes, one after the other
    /// ([`processes`]; 1: in this process).
    pub processes: usize,
}

/// Runs `collage bench`.
pub fn bench_command(req: &Request) -> Outcome {
    if req.processes > 1 {
        return processes::run(req);
    }
    let mut show = |rep: &report::Report<'_>| {
        if let Some(path) = &req.plot {
            super::write_output(path, &chart::plot_svg(rep))?;
        }
        let text = match req.format {
            Format::Table => rep.table(),
            Format::Json => rep.json(),
        };
        super::out(&text)
    };
    match bench_inner(req, &mut show) {
        Ok(o) | Err(o) => o,
    }
}

/// Runs `collage bench` and returns its JSON report instead of printing it (the Python API's
/// `bench`), with how the command would end: [`Outcome::InputErrors`] when a placement's
/// outputs differ from the reference interpreter's (E2404, reported).
pub fn bench_json(req: &Request) -> Result<(serde_json::Value, Outcome), Outcome> {
    let mut json = serde_json::Value::Null;
    let outcome = bench_inner(req, &mut |rep: &report::Report<'_>| {
        json = rep.json_value();
        Ok(())
    })?;
    Ok((json, outcome))
}

fn bench_inner(
    req: &Request,
    show: &mut dyn FnMut(&report::Report<'_>) -> Result<(), Outcome>,
) -> Result<Outcome, Outcome> {
    let start = Instant::now();
    req.measure.check()?;
    checks::seconds_flag("--run-budget", req.run_budget)?;
    checks::tolerances(req.rtol, req.atol)?;
    let check_outputs = |rules_read: &[PathBuf]| check_outputs(req, rules_read);
    check_outputs(&[])?;
    let threads = req.measure.thread_count();
    // The cache directory, checked once: refused (E2410) or replaced (W2411).
    let place = measuring::cache_place(req.measure.cache_dir.as_deref())?;
    let margs = measuring::MeasureArgs {
        cache_dir: place.dir().map(std::path::Path::to_path_buf),
        ..req.measure.clone()
    };
    measuring::set_openmp_wait_policy();
    let bar = Bar::new(false, req.progress);
    let mut sources = SourceMap::new();
    let inputs = Inputs {
        model: &req.model,
        model_options: &req.model_options,
        rules: &req.rules,
        targets: if req.targets.is_empty() {
            Targets::RunnableHere
        } else {
            Targets::Named(&req.targets)
        },
        costs: &req.costs,
        cmd_timeout: req.cmd_timeout,
        measure: &margs,
    };
    let prepared = pipeline::prepare(&mut sources, &inputs, &check_outputs)?;
    // ONNX Runtime, decided once the model is read and before anything is measured.
    let front = req
        .model_options
        .format
        .unwrap_or_else(|| pipeline::load::FrontEnd::of(&req.model));
    let ort_plan = onnxruntime::decide(
        req.onnxruntime,
        &req.model,
        front == pipeline::load::FrontEnd::Onnx,
        threads,
    )?;
    let (m, program) = (&prepared.model.module, &prepared.program);
    let measurer = prepared.estimator.measurer.as_deref();
    let own_setup;
    let setup: &Setup = match measurer {
        Some(mm) => mm.setup(),
        None => {
            own_setup = Setup::new(&program.targets, threads, margs.resolved_dir());
            &own_setup
        }
    };
    checks::memory(&[m], req.max_memory.as_deref())?;
    let g = pipeline::graph(m)?;
    let popts = partition::Options {
        limits: req.limits,
        ..partition::Options::default()
    };
    bar.show();
    let partition_start = Instant::now();
    let mut plan = pipeline::search(&sources, &prepared, &g, &popts, &bar)?;
    let partition_ms = partition_start.elapsed().as_secs_f64() * 1e3;

    bar.phase("reference outputs", 0);
    let weights = Weights::new(req.measure.seed);
    let reference = placements::reference(&sources, setup, m, &weights, &bar)?;
    let mut settings = Settings::models();
    if let Some(b) = req.run_budget {
        settings.budget = std::time::Duration::from_secs_f64(b.min(1e6));
    }
    let bench = placements::Bench {
        g: &g,
        program,
        limits: &popts.limits,
        setup,
        weights: &weights,
        reference: &reference,
        tolerances: (req.rtol, req.atol),
        settings,
        lock: measurer.map(|mm| mm.database()),
        onnxruntime: ort_plan.as_ref(),
        max_memory: Some(group_limit(req.max_memory.as_deref())),
    };
    let (rows, grouping) = placements::run(&bench, &mut plan, &bar);
    bar.finish();

    let speedup = placements::speedup_of(&rows);
    let rep = report::Report {
        req,
        program,
        threads,
        rows: &rows,
        speedup: speedup.as_ref(),
        grouping: grouping.as_ref(),
        plan: &plan,
        partition_ms,
        reference_ms: reference.ms,
        measurer,
        elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
    };
    show(&rep)?;
    let mut differ = differences(&rows);
    let ort_failed = ort_plan.as_ref().and_then(|p| ort_failure(p, &rows));
    match ort_failed {
        Some(d) if d.severity == diag::Severity::Error => differ.push(d),
        Some(d) => diag::emit_alone(d),
        None => {}
    }
    if differ.is_empty() {
        return Ok(Outcome::Ok);
    }
    diag::emit_stderr(&differ, &sources);
    Ok(Outcome::InputErrors)
}

/// The memory the placements are built under: `--max-memory` (checked before), else
/// [`placements::DEFAULT_MAX_MEMORY`] or the memory available to this process if that is less.
fn group_limit(max: Option<&str>) -> u64 {
    use crate::runtime::exec::memory;
    match max.and_then(|t| memory::parse_size(t).ok()) {
        Some(b) => b,
        None => memory::available().map_or(placements::DEFAULT_MAX_MEMORY, |l| {
            l.bytes.min(placements::DEFAULT_MAX_MEMORY)
        }),
    }
}

/// ONNX Runtime's placement skipped although its library loaded (the model cannot be opened or
/// run by it, or its outputs cannot be matched): W2422, or E2421 when it was asked for. (A
/// missing library was said before partitioning.)
fn ort_failure(plan: &onnxruntime::Plan, rows: &[Row]) -> Option<Diagnostic> {
    plan.runtime.as_ref().ok()?;
    let row = rows.iter().find(|r| r.name == onnxruntime::NAME)?;
    let Status::Skipped(why) = &row.status else {
        return None;
    };
    Some(if plan.required {
        Diagnostic::error(
            diag::E2421,
            format!("ONNX Runtime's placement could not run: {why}"),
        )
    } else {
        Diagnostic::warning(diag::W2422, format!("ONNX Runtime is skipped: {why}"))
    })
}

/// Refuses `--plot` and `--cache` (when measuring) naming each other or an input (see
/// [`super::output::check_output_paths`]).
fn check_outputs(req: &Request, rules_read: &[PathBuf]) -> Result<(), Outcome> {
    let mut outputs: Vec<(&str, &std::path::Path)> = Vec::new();
    if let Some(plot) = &req.plot {
        outputs.push(("--plot", plot));
    }
    if let Some(c) = req.measure.cache.as_deref() {
        if req.costs.uses_measure() {
            outputs.push(("--cache", c));
        }
    }
    super::output::check_output_paths(&outputs, &req.model, &req.rules, rules_read, &req.costs)
}

/// E2404 for every output of a placement that ran and differs from the reference
/// interpreter's.
fn differences(rows: &[Row]) -> Diagnostics {
    let mut ds = Diagnostics::new();
    for r in rows {
        let Status::Ran { diffs, .. } = &r.status else {
            continue;
        };
        if r.outputs_ok(rows) != Some(false) {
            continue;
        }
        for (i, (d, rtol, atol)) in diffs.iter().enumerate().filter(|(_, d)| !d.0.within()) {
            ds.push(Diagnostic::error(
                diag::E2404,
                format!(
                    "output{i} of the {} placement differs from the reference interpreter's: {} element(s) beyond rtol {rtol} and atol {atol} (largest absolute difference {:.3e})",
                    r.name, d.mismatched, d.max_abs
                ),
            ));
        }
    }
    ds
}
