//! `collage bench`: partitions a model with measured costs, then runs the Collage plan and every
//! baseline placement end to end on this machine, on the same weights and inputs, checks their
//! outputs against the reference interpreter, and reports their latencies side by side (table,
//! JSON, an SVG chart).
//!
//! Placements: the Collage plan; the native targets alone (`tvm`); each library target with the
//! native targets (the exact search restricted to them, `<target>`); each library's greedy
//! placement (`greedy:<target>`, TVM's `partition_for_X`). Each runs as the executor runs a
//! partitioned model: every partition is a function (native partitions `Primitive=1`, library
//! partitions with their `Compiler`), compiled by its backend and called from `@main`. A
//! placement whose partitions include a target with no backend here, or that has no cover, is
//! skipped with the reason; one identical to a placement already run is not run twice.

use super::measuring::{self, MeasureArgs};
use super::partition::{Bar, Format};
use super::Outcome;
use crate::backend::registry::Setup;
use crate::cost;
use crate::diag;
use crate::enumerate::{extract, DataflowGraph, Limits};
use crate::exec::compare;
use crate::exec::data::Weights;
use crate::exec::executor::Executable;
use crate::exec::tensor::Tensor;
use crate::ir::Module;
use crate::measure::protocol::{self, Settings, Timing};
use crate::partition::Partition;
use crate::partition::{self, Plan, Progress as _};
use crate::ruletree::Program;
use crate::source::SourceMap;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Everything `collage bench` is asked to do.
#[derive(Clone, Debug)]
pub struct Request {
    /// The model.
    pub model: PathBuf,
    /// Rules files or directories (empty: the shipped library).
    pub rules: Vec<PathBuf>,
    /// Only these targets (empty: the targets that can run here; the host is always kept).
    pub targets: Vec<String>,
    /// The cost specification.
    pub costs: cost::Spec,
    /// Time limit of one `cmd:` measurement.
    pub cmd_timeout: std::time::Duration,
    /// Depth limits.
    pub limits: Limits,
    /// Threads, cache and candidate budget.
    pub measure: MeasureArgs,
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
}

/// Default tolerances of a whole model against the reference interpreter: `float32` 1e-3 (the
/// backends reassociate sums and use vector math; errors grow with depth), `float16` and
/// `bfloat16` 5e-2, exact for integers.
pub fn default_tolerance(d: crate::ir::DType) -> (f64, f64) {
    if d == crate::ir::DType::F32 || d == crate::ir::DType::F64 {
        (1e-3, 1e-3)
    } else if d.is_float() {
        (5e-2, 5e-2)
    } else {
        (0.0, 0.0)
    }
}

/// What happened to one placement.
#[derive(Clone, Debug)]
pub enum Status {
    /// It ran.
    Ran {
        /// Its end-to-end timing.
        timing: Timing,
        /// Kernels by backend.
        kernels: BTreeMap<String, usize>,
        /// Units that fell back to another backend.
        fallbacks: usize,
        /// Per output: the difference from the reference interpreter, and the tolerances.
        diffs: Vec<(compare::Diff, f64, f64)>,
        /// Each partition's estimate beside its kernel's time inside the model.
        profile: Vec<PartTime>,
    },
    /// The same partitions as an earlier placement (by name): its results stand.
    Same(String),
    /// It cannot run here.
    Skipped(String),
}

/// A partition of a placement: its estimated cost beside the time its kernel took inside the
/// whole model, over the runs of the end-to-end timing.
#[derive(Clone, Debug)]
pub struct PartTime {
    /// The partition's name.
    pub name: String,
    /// Its target.
    pub target: String,
    /// Its operators.
    pub operators: String,
    /// Its estimated cost (seconds, penalty included): the sum of its candidates' costs.
    pub estimated: f64,
    /// The candidates it is made of (several when adjacent chosen candidates of one target
    /// were coalesced into one partition, which then runs as one kernel).
    pub candidates: usize,
    /// Its kernel's mean wall time per run of the model (seconds; `None`: no kernel found).
    pub measured: Option<f64>,
}

/// One placement's row.
#[derive(Clone, Debug)]
pub struct Row {
    /// `collage`, `tvm`, `<target>` or `greedy:<target>`.
    pub name: String,
    /// What it is, for people.
    pub label: String,
    /// The sum of its estimated costs (seconds), penalties included.
    pub estimated: Option<f64>,
    /// Partitions per target (host excluded).
    pub partitions: BTreeMap<String, usize>,
    /// The outcome.
    pub status: Status,
}

impl Row {
    fn timing<'a>(&'a self, rows: &'a [Row]) -> Option<&'a Timing> {
        match &self.status {
            Status::Ran { timing, .. } => Some(timing),
            Status::Same(other) => rows.iter().find(|r| &r.name == other)?.timing(rows),
            Status::Skipped(_) => None,
        }
    }

    fn outputs_ok<'a>(&'a self, rows: &'a [Row]) -> Option<bool> {
        match &self.status {
            Status::Ran { diffs, .. } => Some(diffs.iter().all(|d| d.0.within())),
            Status::Same(other) => rows.iter().find(|r| &r.name == other)?.outputs_ok(rows),
            Status::Skipped(_) => None,
        }
    }
}

/// The speed-up of the Collage plan over the best of native alone and the greedy placements.
#[derive(Clone, Debug)]
pub struct Speedup {
    /// The baseline placement.
    pub baseline: String,
    /// Its median latency (seconds).
    pub baseline_seconds: f64,
    /// The Collage plan's median latency (seconds).
    pub collage_seconds: f64,
}

fn label_of(name: &str, native: &str) -> String {
    match name.split_once(':') {
        _ if name == "collage" => "Collage plan".to_string(),
        _ if name == "tvm" => format!("{native} alone"),
        Some(("greedy", t)) => format!("greedy {t} (partition_for_{t})"),
        _ => format!("{name} with {native}"),
    }
}

/// Runs `collage bench`.
pub fn bench_command(req: &Request) -> Outcome {
    match bench_inner(req) {
        Ok(o) | Err(o) => o,
    }
}

/// The default targets: the host and every target that can run on this machine.
fn runnable_targets(program: &Program, setup: &Setup) -> Vec<String> {
    program
        .targets
        .iter()
        .filter(|t| !t.is_host && setup.availability(t).is_ok())
        .map(|t| t.name.clone())
        .collect()
}

fn bench_inner(req: &Request) -> Result<Outcome, Outcome> {
    let start = Instant::now();
    req.measure.check()?;
    super::run::check_seconds_flag("--run-budget", req.run_budget)?;
    super::run::check_tolerances(req.rtol, req.atol)?;
    let mut outputs: Vec<(&str, &std::path::Path)> = Vec::new();
    if let Some(plot) = &req.plot {
        outputs.push(("--plot", plot));
    }
    if let Some(c) = req.measure.cache.as_deref() {
        if req.costs.uses_measure() {
            outputs.push(("--cache", c));
        }
    }
    let check_outputs = |rules_read: &[PathBuf]| {
        super::partition::check_output_paths(
            &outputs, &req.model, &req.rules, rules_read, &req.costs,
        )
    };
    check_outputs(&[])?;
    let threads = req.measure.thread_count();
    // The cache directory, checked once: refused (E2410) or replaced (W2411).
    let place = measuring::cache_place(req.measure.cache_dir.as_deref())?;
    let margs = measuring::MeasureArgs {
        cache_dir: place.dir().map(std::path::Path::to_path_buf),
        ..req.measure.clone()
    };
    measuring::quiet_openmp();
    let _priority = measuring::raise_priority(&req.measure);
    let bar = Bar::new(false, req.progress);
    let mut sources = SourceMap::new();
    let (program, rules_read) = super::candidates::load_rules_from(&mut sources, &req.rules)?;
    // Imported rules files are known only now; nothing has been written yet.
    check_outputs(&rules_read)?;
    // The targets: as asked, or those that can run here.
    let names = if req.targets.is_empty() {
        let probe = Setup::new(&program.targets, threads, margs.resolved_dir());
        runnable_targets(&program, &probe)
    } else {
        req.targets.clone()
    };
    let program = super::partition::select_targets(program, &names)?;
    if !program.targets.iter().any(|t| t.is_host) {
        eprintln!(
            "error[{}]: the rules declare no host target",
            diag::E2106.id
        );
        return Err(Outcome::InputErrors);
    }
    let measurer = measuring::open(&margs, &req.costs, &program.targets)?;
    let opts = cost::SpecOptions {
        cmd_timeout: req.cmd_timeout,
        measure: measurer.clone().map(|m| m as Arc<dyn cost::Estimator>),
    };
    let estimator = cost::from_spec(&req.costs, &opts).map_err(|e| {
        diag::emit_alone(diag::Diagnostic::error(
            diag::E2104,
            format!("invalid `--costs`: {e}"),
        ));
        Outcome::Usage
    })?;
    super::partition::warn_unpriced(&program, &estimator, &sources);
    let own_setup;
    let setup: &Setup = match &measurer {
        Some(m) => m.setup(),
        None => {
            own_setup = Setup::new(&program.targets, threads, margs.resolved_dir());
            &own_setup
        }
    };
    let (m, devices) = super::partition::load_planned(&mut sources, &req.model)?;
    let main = m.main().ok_or(Outcome::Internal)?;
    super::run::check_memory(&[&m], req.max_memory.as_deref())?;
    let g = DataflowGraph::new(&m, main);
    let popts = partition::Options {
        limits: req.limits,
        ..partition::Options::default()
    };
    bar.show();
    let partition_start = Instant::now();
    let plan =
        partition::partition_on_devices(&g, &program, &estimator, &popts, &bar, devices.as_deref());
    if let Some(mm) = &measurer {
        bar.hide_for(|| measuring::report_notes(mm));
    }
    let mut plan = match plan {
        Ok(p) => p,
        Err(e) => {
            bar.finish();
            let d = super::partition::error_diagnostic(&m, &g, &program, &e);
            diag::emit_stderr(&d.into(), &sources);
            return Err(Outcome::InputErrors);
        }
    };
    let partition_ms = partition_start.elapsed().as_secs_f64() * 1e3;

    // The placements.
    let native = program
        .targets
        .iter()
        .find(|t| t.compiler.is_none() && !t.is_host && setup.availability(t).is_ok())
        .map_or("native".to_string(), |t| t.name.clone());
    let mut placements: Vec<(String, Option<f64>, Option<Vec<usize>>)> = vec![(
        "collage".into(),
        Some(plan.total),
        Some(plan.chosen.clone()),
    )];
    for b in &plan.baselines {
        placements.push((b.name.clone(), b.cost, b.chosen.clone()));
    }

    // The reference interpreter's outputs.
    bar.phase("reference outputs", 0);
    let weights = Weights::new(req.measure.seed);
    let reference = setup
        .compile_reference(&m, &weights.for_module(&m))
        .map_err(|d| {
            bar.hide();
            super::report(&d, &sources);
            Outcome::InputErrors
        })?;
    let mw = weights.for_module(&m);
    let mut inputs = Vec::with_capacity(reference.inputs.len());
    for p in &reference.inputs {
        let t = mw.random_input(&p.name, &p.shape).map_err(|e| {
            bar.hide();
            eprintln!("error[{}]: {e}", diag::E2304.id);
            Outcome::InputErrors
        })?;
        inputs.push(Arc::new(t));
    }
    let reference_start = Instant::now();
    let expected: Vec<Arc<Tensor>> = match reference.run(&inputs) {
        Ok(o) => o.value.flatten().into_iter().cloned().collect(),
        Err(d) => {
            bar.hide();
            let mut ds = diag::Diagnostics::new();
            ds.push(d);
            super::report(&ds, &sources);
            return Err(Outcome::InputErrors);
        }
    };
    let reference_ms = reference_start.elapsed().as_secs_f64() * 1e3;
    drop(reference);

    // Build and check each placement, then time those that run, together.
    let mut settings = Settings::models();
    if let Some(b) = req.run_budget {
        settings.budget = std::time::Duration::from_secs_f64(b.min(1e6));
    }
    let lock_path = measurer.as_ref().map(|mm| mm.database().to_path_buf());
    let mut rows: Vec<Row> = Vec::new();
    // The placements that run, by row, timed together once all are built.
    let mut ready: Vec<(usize, Ready)> = Vec::new();
    let mut seen: Vec<(Vec<usize>, String)> = Vec::new();
    bar.phase("building placements", placements.len());
    for (k, (name, estimated, chosen)) in placements.iter().enumerate() {
        bar.steps(k, placements.len());
        let label = label_of(name, &native);
        let mut row = Row {
            name: name.clone(),
            label,
            estimated: *estimated,
            partitions: BTreeMap::new(),
            status: Status::Skipped(String::new()),
        };
        let Some(chosen) = chosen else {
            row.status = Status::Skipped("no cover by candidates with usable costs".into());
            rows.push(row);
            continue;
        };
        let mut sorted = chosen.clone();
        sorted.sort_unstable();
        let saved = std::mem::replace(&mut plan.chosen, chosen.clone());
        let parts = partition::finalize::coalesce(&g, &program, &plan, &popts.limits);
        plan.chosen = saved;
        for p in &parts {
            let t = &program.targets[p.target];
            if !t.is_host {
                *row.partitions.entry(t.name.clone()).or_default() += 1;
            }
        }
        let cannot = parts.iter().find_map(|p| {
            let t = &program.targets[p.target];
            (!t.is_host).then(|| setup.availability(t).err()).flatten()
        });
        if let Some(why) = cannot {
            row.status = Status::Skipped(why);
            rows.push(row);
            continue;
        }
        if let Some((_, first)) = seen.iter().find(|(c, _)| *c == sorted) {
            row.status = Status::Same(first.clone());
            rows.push(row);
            continue;
        }
        seen.push((sorted, name.clone()));
        match build_placement(
            &g,
            &program,
            parts,
            setup,
            &weights,
            &inputs,
            &expected,
            (req.rtol, req.atol),
        ) {
            Ok(r) => ready.push((rows.len(), r)),
            Err(why) => row.status = Status::Skipped(why),
        }
        rows.push(row);
    }
    bar.steps(placements.len(), placements.len());
    bar.phase("timing placements", settings.max_repeats);
    let timed = {
        let _guard = lock_path
            .as_deref()
            .and_then(|p| crate::measure::db::lock(p).ok());
        let built: Vec<&Ready> = ready.iter().map(|(_, r)| r).collect();
        time_together(&built, &inputs, &settings, &|done, total| {
            bar.steps(done, total)
        })
    };
    for ((k, r), t) in ready.into_iter().zip(timed) {
        rows[k].status = match t {
            Ok(timing) => r.finish(&program, timing),
            Err(why) => Status::Skipped(why),
        };
    }
    bar.finish();

    let speedup = speedup_of(&rows);
    let rep = Report {
        req,
        program: &program,
        threads,
        rows: &rows,
        speedup: speedup.as_ref(),
        plan: &plan,
        partition_ms,
        reference_ms,
        measurer: measurer.as_deref(),
        elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
    };
    if let Some(path) = &req.plot {
        super::write_output(path, &plot_svg(&rep))?;
    }
    let text = match req.format {
        Format::Table => rep.table(),
        Format::Json => rep.json(),
    };
    super::out(&text)?;
    let differ: Vec<&Row> = rows
        .iter()
        .filter(|r| matches!(r.status, Status::Ran { .. }) && r.outputs_ok(&rows) == Some(false))
        .collect();
    if differ.is_empty() {
        return Ok(Outcome::Ok);
    }
    for r in differ {
        if let Status::Ran { diffs, .. } = &r.status {
            for (i, (d, rtol, atol)) in diffs.iter().enumerate().filter(|(_, d)| !d.0.within()) {
                eprintln!(
                    "error[{}]: output{i} of the {} placement differs from the reference interpreter's: {} element(s) beyond rtol {rtol} and atol {atol} (largest absolute difference {:.3e})",
                    diag::E2404.id,
                    r.name,
                    d.mismatched,
                    d.max_abs
                );
            }
        }
    }
    Ok(Outcome::InputErrors)
}

/// The module a placement runs: every partition a function called from `@main` (native ones
/// `Primitive=1`, library ones with their `Compiler` and composites), type-checked.
pub fn execution_module(
    g: &DataflowGraph<'_>,
    program: &Program,
    parts: &[Partition],
) -> Result<Module, String> {
    let mut groups = Vec::new();
    for p in parts {
        let t = &program.targets[p.target];
        if t.is_host {
            continue;
        }
        if t.compiler.is_some() {
            groups.extend(p.sub_graph.nested.iter().cloned());
        } else {
            groups.push((
                p.sub_graph.clone(),
                crate::measure::candidate::native_attrs(),
            ));
        }
    }
    let mut m = extract::rewrite_nested(g, &groups).map_err(|e| e.to_string())?;
    crate::typeck::check(&mut m).map_err(|d| {
        d.iter()
            .next()
            .map_or_else(String::new, |x| x.message.clone())
    })?;
    Ok(m)
}

/// A placement built and checked, ready to be timed.
struct Ready {
    parts: Vec<Partition>,
    x: Executable,
    /// Which partition each call belongs to: a partition's call carries the span of one of its
    /// nodes (its last exit).
    part_of: BTreeMap<(u32, u32, u32), usize>,
    kernels: BTreeMap<String, usize>,
    fallbacks: usize,
    diffs: Vec<(compare::Diff, f64, f64)>,
    /// The first run's time (the checked run).
    first_call: f64,
}

/// Builds a placement and runs it once, checking its outputs against the reference's.
#[allow(clippy::too_many_arguments)]
fn build_placement(
    g: &DataflowGraph<'_>,
    program: &Program,
    parts: Vec<Partition>,
    setup: &Setup,
    weights: &Weights,
    inputs: &[Arc<Tensor>],
    expected: &[Arc<Tensor>],
    (rtol, atol): (Option<f64>, Option<f64>),
) -> Result<Ready, String> {
    let m = execution_module(g, program, &parts)
        .map_err(|e| format!("internal error: the placement cannot be rewritten: {e}"))?;
    let mut part_of: BTreeMap<(u32, u32, u32), usize> = BTreeMap::new();
    for (k, p) in parts.iter().enumerate() {
        if program.targets[p.target].is_host {
            continue;
        }
        for i in p.sub_graph.inside.iter() {
            if let Some(e) = g.expr(i) {
                let sp = g.module.span(e);
                part_of.entry((sp.file.0, sp.start, sp.end)).or_insert(k);
            }
        }
    }
    let x: Executable = setup.compile(&m, &weights.for_module(&m)).map_err(|d| {
        d.iter()
            .next()
            .map_or_else(|| "it cannot be compiled".into(), |d| d.message.clone())
    })?;
    let mut kernels: BTreeMap<String, usize> = BTreeMap::new();
    for k in x.kernels() {
        *kernels.entry(k.backend.clone()).or_default() += 1;
    }
    let fallbacks = x.warnings.len();
    let start = std::time::Instant::now();
    let out = x
        .in_pool(|| x.run(inputs))
        .map_err(|d| format!("it failed: {}", d.message))?;
    let first_call = start.elapsed().as_secs_f64();
    let got: Vec<Arc<Tensor>> = out.value.flatten().into_iter().cloned().collect();
    if got.len() != expected.len() {
        return Err(format!(
            "internal error: {} outputs instead of {}",
            got.len(),
            expected.len()
        ));
    }
    let mut diffs = Vec::new();
    for (a, b) in got.iter().zip(expected) {
        let (dr, da) = default_tolerance(b.dtype());
        let (rt, at) = (rtol.unwrap_or(dr), atol.unwrap_or(da));
        let d = compare::compare(a, b, rt, at).map_err(|e| format!("internal error: {e}"))?;
        diffs.push((d, rt, at));
    }
    Ok(Ready {
        parts,
        x,
        part_of,
        kernels,
        fallbacks,
        diffs,
        first_call,
    })
}

/// Times built placements end to end in rounds (see [`rounds`]), each run on the executables'
/// worker pool. Each placement first runs once untimed (warm-up; the checked run was
/// its first call); its kernels' times are read after that, for the profile.
fn time_together(
    ready: &[&Ready],
    inputs: &[Arc<Tensor>],
    settings: &Settings,
    progress: &dyn Fn(usize, usize),
) -> Vec<Result<Timed, String>> {
    let run = |r: &Ready| -> Result<f64, String> {
        r.x.in_pool(|| {
            let s = std::time::Instant::now();
            // The result's storage serves the next run, as `collage run --repeat` does.
            let o =
                r.x.run(inputs)
                    .map_err(|d| format!("it failed: {}", d.message))?;
            let t = s.elapsed().as_secs_f64();
            r.x.recycle(o.value);
            Ok(t)
        })
    };
    let start = std::time::Instant::now();
    let warm: Vec<Option<String>> = ready.iter().map(|r| run(r).err()).collect();
    let before: Vec<_> = ready.iter().map(|r| r.x.kernel_times()).collect();
    let clock = protocol::Monotonic::new();
    let times = rounds(&warm, settings, &clock, &mut |k| run(ready[k]), progress);
    let elapsed = start.elapsed().as_secs_f64();
    ready
        .iter()
        .zip(times)
        .zip(before)
        .map(|((r, t), before)| {
            let t = t?;
            Ok(Timed {
                timing: Timing {
                    seconds: protocol::median(&t),
                    spread: protocol::spread(&t),
                    number: 1,
                    first_call: r.first_call,
                    // The checked run, the warm-up run and the timed ones.
                    calls: 2 + t.len() as u64,
                    elapsed,
                    repeats: t,
                },
                before,
            })
        })
        .collect()
}

/// Runs placements **in rounds** and returns each one's run times (seconds): every round runs
/// each placement once (`run(k)` runs placement `k` and returns its time), so that a change of
/// the machine's load during the timing (a shared machine's usual state) falls on all of them
/// alike and their ratios stay fair, where timing them one after the other would let a busy
/// minute land on one placement only. A placement whose warm-up failed (`failed[k]`), or whose
/// run fails, leaves the rounds with that error. Rounds stop when every placement has
/// `min_repeats` runs and a spread within `max_spread`, after `max_repeats` rounds, or when
/// the next round (as long as the last) would overrun the budget, which is the budget of one
/// placement times their number; one round is always made.
fn rounds(
    failed: &[Option<String>],
    settings: &Settings,
    clock: &dyn protocol::Clock,
    run: &mut dyn FnMut(usize) -> Result<f64, String>,
    progress: &dyn Fn(usize, usize),
) -> Vec<Result<Vec<f64>, String>> {
    let start = clock.now();
    let n = failed.len();
    let budget = settings
        .budget
        .saturating_mul(u32::try_from(n.max(1)).unwrap_or(u32::MAX));
    let mut out: Vec<Result<Vec<f64>, String>> = failed
        .iter()
        .map(|f| f.clone().map_or(Ok(Vec::new()), Err))
        .collect();
    let max = settings.max_repeats.max(1);
    progress(0, max);
    for round in 1..=max {
        let round_start = clock.now();
        for (k, slot) in out.iter_mut().enumerate() {
            if let Ok(times) = slot {
                match run(k) {
                    Ok(t) => times.push(t),
                    Err(e) => *slot = Err(e),
                }
            }
        }
        progress(round, max);
        let settled = out.iter().all(|t| {
            t.as_ref().map_or(true, |t| {
                t.len() >= settings.min_repeats && protocol::spread(t) <= settings.max_spread
            })
        });
        let now = clock.now();
        if settled || (now - start) + (now - round_start) > budget {
            break;
        }
    }
    out
}

/// A placement's timing, and its kernels' times when the timed runs began.
struct Timed {
    timing: Timing,
    before: Vec<(u64, std::time::Duration)>,
}

impl Ready {
    /// The row's status from the timing: the latency, and each partition's mean kernel time
    /// per timed run beside its estimate.
    fn finish(self, program: &Program, t: Timed) -> Status {
        let after = self.x.kernel_times();
        let mut per_part: Vec<Option<(u64, f64)>> = vec![None; self.parts.len()];
        for ((rec, b), a) in self.x.kernels().iter().zip(&t.before).zip(&after) {
            let sp = rec.span;
            if let Some(&k) = self.part_of.get(&(sp.file.0, sp.start, sp.end)) {
                let slot = per_part[k].get_or_insert((0, 0.0));
                slot.0 = slot.0.max(a.0 - b.0);
                slot.1 += (a.1 - b.1).as_secs_f64();
            }
        }
        let profile = self
            .parts
            .iter()
            .zip(per_part)
            .filter(|(p, _)| !program.targets[p.target].is_host)
            .map(|(p, m)| PartTime {
                name: p.name.clone(),
                target: program.targets[p.target].name.clone(),
                operators: p.sub_graph.label.clone(),
                estimated: p.cost,
                candidates: p.parts.len(),
                measured: m.filter(|m| m.0 > 0).map(|(n, secs)| secs / n as f64),
            })
            .collect();
        Status::Ran {
            timing: t.timing,
            kernels: self.kernels,
            fallbacks: self.fallbacks,
            diffs: self.diffs,
            profile,
        }
    }
}

/// The Collage plan against the fastest of native alone and the greedy placements that ran.
fn speedup_of(rows: &[Row]) -> Option<Speedup> {
    let collage = rows.iter().find(|r| r.name == "collage")?.timing(rows)?;
    let best = rows
        .iter()
        .filter(|r| r.name == "tvm" || r.name.starts_with("greedy:"))
        .filter_map(|r| r.timing(rows).map(|t| (r, t)))
        .min_by(|a, b| a.1.seconds.total_cmp(&b.1.seconds))?;
    Some(Speedup {
        baseline: best.0.name.clone(),
        baseline_seconds: best.1.seconds,
        collage_seconds: collage.seconds,
    })
}

/// Everything the reports show.
pub struct Report<'a> {
    req: &'a Request,
    program: &'a Program,
    threads: usize,
    rows: &'a [Row],
    speedup: Option<&'a Speedup>,
    plan: &'a Plan,
    partition_ms: f64,
    reference_ms: f64,
    measurer: Option<&'a crate::measure::Measure>,
    elapsed_ms: f64,
}

fn ms(s: f64) -> String {
    let v = s * 1e3;
    if v >= 100.0 {
        format!("{v:.1} ms")
    } else if v >= 1.0 {
        format!("{v:.2} ms")
    } else {
        format!("{v:.4} ms")
    }
}

impl Report<'_> {
    fn targets(&self) -> Vec<String> {
        self.program
            .targets
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "model      {} (seed {}, {} thread(s))",
            self.req.model.display(),
            self.req.measure.seed,
            self.threads
        );
        let _ = writeln!(
            s,
            "targets    {}; costs {}",
            self.targets().join(", "),
            self.req.costs
        );
        let _ = writeln!(
            s,
            "partition  {:.1} s: {} candidates, {} distinct estimates",
            self.partition_ms / 1e3,
            self.plan.stats.candidates,
            self.plan.stats.estimates
        );
        if let Some(m) = self.measurer {
            let _ = writeln!(s, "           {}", measuring::summary_line(m));
        }
        let _ = writeln!(
            s,
            "reference  {} (reference interpreter, one run; every placement's outputs are checked against it)",
            ms(self.reference_ms / 1e3)
        );
        let head = [
            "placement",
            "partitions",
            "estimated",
            "latency",
            "spread",
            "est/meas",
            "speed-up",
            "outputs",
        ];
        let collage = self
            .rows
            .iter()
            .find(|r| r.name == "collage")
            .and_then(|r| r.timing(self.rows));
        let mut cells: Vec<[String; 8]> = Vec::new();
        for r in self.rows {
            let parts: Vec<String> = r
                .partitions
                .iter()
                .map(|(t, n)| format!("{t} {n}"))
                .collect();
            let est = r.estimated.map_or("-".into(), ms);
            let (lat, spread, ratio, speed, outputs) = match (&r.status, r.timing(self.rows)) {
                (Status::Skipped(why), _) => (
                    "skipped".to_string(),
                    String::new(),
                    String::new(),
                    String::new(),
                    why.clone(),
                ),
                (st, Some(t)) => {
                    let ratio = r
                        .estimated
                        .map_or("-".into(), |e| format!("{:.2}", e / t.seconds));
                    let speed = match collage {
                        Some(c) if r.name != "collage" => format!("x{:.2}", t.seconds / c.seconds),
                        _ => String::new(),
                    };
                    let outputs = match st {
                        Status::Same(o) => format!("same plan as {o}"),
                        Status::Ran {
                            diffs, fallbacks, ..
                        } => {
                            let worst = diffs.iter().map(|d| d.0.max_abs).fold(0.0, f64::max);
                            let ok = diffs.iter().all(|d| d.0.within());
                            let fb = if *fallbacks > 0 {
                                format!("; {fallbacks} unit(s) fell back")
                            } else {
                                String::new()
                            };
                            format!(
                                "{} (max abs diff {worst:.1e}){fb}",
                                if ok { "ok" } else { "DIFFER" }
                            )
                        }
                        Status::Skipped(_) => String::new(),
                    };
                    (
                        ms(t.seconds),
                        format!("±{:.1}%", t.spread * 100.0),
                        ratio,
                        speed,
                        outputs,
                    )
                }
                (_, None) => Default::default(),
            };
            cells.push([
                r.label.clone(),
                if parts.is_empty() {
                    "-".into()
                } else {
                    parts.join(", ")
                },
                est,
                lat,
                spread,
                ratio,
                speed,
                outputs,
            ]);
        }
        let mut width = head.map(str::len);
        for r in &cells {
            for (w, c) in width.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let right = [false, false, true, true, true, true, true, false];
        let line = |row: &[String]| {
            let mut l = String::new();
            for (i, c) in row.iter().enumerate() {
                if i > 0 {
                    l.push_str("  ");
                }
                let w = width[i];
                if right[i] {
                    let _ = write!(l, "{c:>w$}");
                } else {
                    let _ = write!(l, "{c:<w$}");
                }
            }
            l.trim_end().to_string()
        };
        let _ = writeln!(s);
        let _ = writeln!(s, "{}", line(&head.map(str::to_string)));
        for r in &cells {
            let _ = writeln!(s, "{}", line(r));
        }
        let _ = writeln!(s);
        match self.speedup {
            Some(sp) => {
                let _ = writeln!(
                    s,
                    "speed-up  x{:.2}: the Collage plan ({}) over the best of native alone and the greedy placements ({}, {})",
                    sp.baseline_seconds / sp.collage_seconds,
                    ms(sp.collage_seconds),
                    label_of(&sp.baseline, &self.native()),
                    ms(sp.baseline_seconds)
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "speed-up  - (the Collage plan or every baseline could not run)"
                );
            }
        }
        let _ = writeln!(s, "elapsed    {:.1} s", self.elapsed_ms / 1e3);
        if self.req.profile {
            for r in self.rows {
                self.profile_table(&mut s, r);
            }
        }
        s
    }

    /// One placement's partitions: estimate beside time inside the model, dearest first.
    fn profile_table(&self, s: &mut String, r: &Row) {
        let Status::Ran {
            profile, timing, ..
        } = &r.status
        else {
            return;
        };
        let in_kernels: f64 = profile.iter().filter_map(|p| p.measured).sum();
        let estimated: f64 = profile.iter().map(|p| p.estimated).sum();
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "profile of {}: {} partitions estimated {}, {} in their kernels of {} per run",
            r.label,
            profile.len(),
            ms(estimated),
            ms(in_kernels),
            ms(timing.seconds)
        );
        let mut order: Vec<&PartTime> = profile.iter().collect();
        order.sort_by(|a, b| {
            b.measured
                .unwrap_or(0.0)
                .total_cmp(&a.measured.unwrap_or(0.0))
                .then(a.name.cmp(&b.name))
        });
        let _ = writeln!(
            s,
            "  {:<30} {:<9} {:>5} {:>11} {:>11} {:>8}  operators",
            "partition", "target", "cands", "estimated", "in model", "est/meas"
        );
        for p in order {
            let (meas, ratio) = match p.measured {
                Some(m) if m > 0.0 => (ms(m), format!("{:.2}", p.estimated / m)),
                _ => ("-".to_string(), "-".to_string()),
            };
            let ops: String = p.operators.chars().take(60).collect();
            let _ = writeln!(
                s,
                "  {:<30} {:<9} {:>5} {:>11} {:>11} {:>8}  {ops}",
                p.name,
                p.target,
                p.candidates,
                ms(p.estimated),
                meas,
                ratio
            );
        }
    }

    fn native(&self) -> String {
        self.program
            .targets
            .iter()
            .find(|t| t.compiler.is_none() && !t.is_host && crate::backend::registry::on_cpu(t))
            .map_or("native".to_string(), |t| t.name.clone())
    }

    fn json(&self) -> String {
        use serde_json::json;
        let rows: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|r| {
                let timing = r.timing(self.rows);
                let (status, reason, same_as) = match &r.status {
                    Status::Ran { .. } => ("ran", None, None),
                    Status::Same(o) => ("same", None, Some(o.clone())),
                    Status::Skipped(w) => ("skipped", Some(w.clone()), None),
                };
                let mut v = json!({
                    "name": r.name,
                    "label": r.label,
                    "status": status,
                    "reason": reason,
                    "same_as": same_as,
                    "estimated_ms": r.estimated.map(|e| e * 1e3),
                    "partitions": r.partitions,
                    "latency_ms": timing.map(|t| json!({
                        "median": t.seconds * 1e3,
                        "spread": t.spread,
                        "min": t.repeats.iter().copied().fold(f64::INFINITY, f64::min) * 1e3,
                        "max": t.repeats.iter().copied().fold(0.0, f64::max) * 1e3,
                        "repeats": t.repeats.len(),
                        "first_call": t.first_call * 1e3,
                    })),
                    "estimate_ratio": match (r.estimated, timing) {
                        (Some(e), Some(t)) if t.seconds > 0.0 => Some(e / t.seconds),
                        _ => None,
                    },
                    "outputs_within_tolerance": r.outputs_ok(self.rows),
                });
                if let Status::Ran {
                    kernels,
                    fallbacks,
                    diffs,
                    profile,
                    ..
                } = &r.status
                {
                    v["profile"] = json!(profile
                        .iter()
                        .map(|p| json!({
                            "partition": p.name,
                            "target": p.target,
                            "operators": p.operators,
                            "estimated_ms": p.estimated * 1e3,
                            "candidates": p.candidates,
                            "in_model_ms": p.measured.map(|m| m * 1e3),
                        }))
                        .collect::<Vec<_>>());
                    v["kernels"] = json!(kernels);
                    v["fallbacks"] = json!(fallbacks);
                    v["outputs"] = json!(diffs
                        .iter()
                        .enumerate()
                        .map(|(i, (d, rtol, atol))| json!({
                            "name": format!("output{i}"),
                            "within_tolerance": d.within(),
                            "max_abs_diff": finite(d.max_abs),
                            "max_rel_diff": finite(d.max_rel),
                            "mismatched": d.mismatched,
                            "rtol": rtol,
                            "atol": atol,
                        }))
                        .collect::<Vec<_>>());
                }
                v
            })
            .collect();
        let mut partition = json!({
            "elapsed_ms": self.partition_ms,
            "candidates": self.plan.stats.candidates,
            "estimates": self.plan.stats.estimates,
            "total_cost": self.plan.total,
        });
        if let Some(m) = self.measurer {
            partition["measure"] = measuring::summary_json(m);
        }
        let v = json!({
            "model": self.req.model.display().to_string(),
            "seed": self.req.measure.seed,
            "threads": self.threads,
            "costs": self.req.costs.as_str(),
            "targets": self.targets(),
            "partition": partition,
            "reference_ms": self.reference_ms,
            "placements": rows,
            "speedup": self.speedup.map(|sp| json!({
                "baseline": sp.baseline,
                "baseline_ms": sp.baseline_seconds * 1e3,
                "collage_ms": sp.collage_seconds * 1e3,
                "value": sp.baseline_seconds / sp.collage_seconds,
            })),
            "elapsed_ms": self.elapsed_ms,
        });
        format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
    }
}

fn finite(v: f64) -> serde_json::Value {
    if v.is_finite() {
        serde_json::json!(v)
    } else {
        serde_json::json!(v.to_string())
    }
}

/// The comparison as an SVG bar chart: each placement's median latency with its spread, and its
/// estimated cost as a marker.
/// A placement's name on the chart (short enough to sit under its bar).
fn chart_label(name: &str, native: &str) -> String {
    match name.split_once(':') {
        _ if name == "collage" => "Collage plan".to_string(),
        _ if name == "tvm" => format!("{native} alone"),
        Some(("greedy", t)) => format!("greedy {t}"),
        _ => format!("{name} + {native}"),
    }
}

/// A latency in milliseconds with three significant digits or more.
fn value_label(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 10.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.2} ms")
    }
}

fn plot_svg(rep: &Report<'_>) -> String {
    use plotters::prelude::*;
    let bars: Vec<(String, f64, f64, Option<f64>, bool)> = rep
        .rows
        .iter()
        .filter_map(|r| {
            let t = r.timing(rep.rows)?;
            Some((
                chart_label(&r.name, &rep.native()),
                t.seconds * 1e3,
                t.spread * t.seconds * 1e3,
                r.estimated.map(|e| e * 1e3),
                r.name == "collage",
            ))
        })
        .collect();
    let model = rep
        .req
        .model
        .file_name()
        .map_or_else(String::new, |f| f.to_string_lossy().to_string());
    let title = match rep.speedup {
        Some(sp) => format!(
            "{model}, {} thread(s): Collage x{:.2} over the best baseline ({})",
            rep.threads,
            sp.baseline_seconds / sp.collage_seconds,
            label_of(&sp.baseline, &rep.native())
        ),
        None => format!("{model}, {} thread(s): end-to-end latency", rep.threads),
    };
    let mut svg = String::new();
    let top = bars
        .iter()
        .map(|b| (b.1 + b.2).max(b.3.unwrap_or(0.0)))
        .fold(0.0, f64::max)
        .max(1e-6)
        * 1.4;
    let n = bars.len().max(1);
    {
        let root =
            SVGBackend::with_string(&mut svg, (160 * n as u32 + 200, 560)).into_drawing_area();
        let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
            root.fill(&WHITE)?;
            let mut chart = ChartBuilder::on(&root)
                .caption(&title, ("sans-serif", 20))
                .margin(16)
                .x_label_area_size(60)
                .y_label_area_size(70)
                .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..top)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .y_desc("end-to-end latency (ms), lower is better")
                .x_labels(n)
                .x_label_formatter(&|v| match v {
                    SegmentValue::CenterOf(i) => {
                        bars.get(*i).map_or(String::new(), |b| b.0.clone())
                    }
                    _ => String::new(),
                })
                .draw()?;
            let collage = RGBColor(0x2a, 0x7a, 0xb9);
            let other = RGBColor(0xa0, 0xa0, 0xa0);
            chart
                .draw_series(bars.iter().enumerate().map(|(i, b)| {
                    let color = if b.4 { collage } else { other };
                    let mut r = Rectangle::new(
                        [
                            (SegmentValue::Exact(i), 0.0),
                            (SegmentValue::Exact(i + 1), b.1),
                        ],
                        color.filled(),
                    );
                    r.set_margin(0, 0, 20, 20);
                    r
                }))?
                .label("measured latency (median)")
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], other.filled())
                });
            // The spread: a whisker with caps (no marker in the middle).
            let whisker = BLACK.stroke_width(2);
            chart
                .draw_series(bars.iter().enumerate().map(|(i, b)| {
                    PathElement::new(
                        vec![
                            (SegmentValue::CenterOf(i), (b.1 - b.2).max(0.0)),
                            (SegmentValue::CenterOf(i), b.1 + b.2),
                        ],
                        whisker,
                    )
                }))?
                .label("spread (median absolute deviation)")
                .legend(|(x, y)| {
                    PathElement::new(vec![(x, y - 6), (x, y + 6)], BLACK.stroke_width(2))
                });
            for (i, b) in bars.iter().enumerate() {
                for v in [(b.1 - b.2).max(0.0), b.1 + b.2] {
                    chart.draw_series(std::iter::once(
                        EmptyElement::at((SegmentValue::CenterOf(i), v))
                            + PathElement::new(vec![(-6, 0), (6, 0)], whisker),
                    ))?;
                }
            }
            // The median above each bar.
            let value_style = ("sans-serif", 14).into_font().color(&BLACK).pos(
                plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Center,
                    plotters::style::text_anchor::VPos::Bottom,
                ),
            );
            // Above the whisker, or above the estimate's marker when that is higher.
            chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
                let (y, dy) = match b.3 {
                    Some(e) if e > b.1 + b.2 => (e, -14),
                    _ => (b.1 + b.2, -6),
                };
                EmptyElement::at((SegmentValue::CenterOf(i), y))
                    + Text::new(value_label(b.1), (0, dy), value_style.clone())
            }))?;
            chart
                .draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
                    b.3.map(|e| {
                        TriangleMarker::new((SegmentValue::CenterOf(i), e), 8, RED.filled())
                    })
                }))?
                .label("estimated (sum of measured candidate costs)")
                .legend(|(x, y)| TriangleMarker::new((x + 7, y), 6, RED.filled()));
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()?;
            root.present()?;
            Ok(())
        };
        if let Err(e) = draw() {
            drop(e);
        }
    }
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::time::Duration;

    /// A clock that runs only when a placement runs.
    struct Fake(Cell<Duration>);

    impl protocol::Clock for Fake {
        fn now(&self) -> Duration {
            self.0.get()
        }
    }

    #[test]
    fn placements_are_timed_in_rounds_so_a_busy_spell_falls_on_all() {
        // Two placements of 10 and 11 ms; the machine gets twice as slow from the 7th run on
        // (the fourth round). Timed one after the other, the first would have been timed
        // quiet and the second busy (10 against 22 ms).
        let clock = Fake(Cell::new(Duration::ZERO));
        let order = std::cell::RefCell::new(Vec::new());
        let mut run = |k: usize| -> Result<f64, String> {
            order.borrow_mut().push(k);
            let busy = if order.borrow().len() > 6 { 2.0 } else { 1.0 };
            let t = [10.0, 11.0][k] * busy / 1e3;
            clock.0.set(clock.0.get() + Duration::from_secs_f64(t));
            Ok(t)
        };
        let s = Settings::models();
        let t = rounds(&[None, None], &s, &clock, &mut run, &|_, _| {});
        let order = order.into_inner();
        // Alternating, the same number of runs each.
        assert_eq!(&order[..4], [0, 1, 0, 1]);
        let (a, b) = (t[0].as_ref().unwrap(), t[1].as_ref().unwrap());
        assert_eq!(a.len(), b.len());
        assert!(a.len() >= s.min_repeats);
        // The busy spell hit both: their medians keep the true 10:11 ratio.
        let ratio = protocol::median(b) / protocol::median(a);
        assert!((ratio - 1.1).abs() < 1e-9, "{ratio}");
    }

    #[test]
    fn rounds_stop_when_settled_or_out_of_budget_and_failures_leave() {
        let clock = Fake(Cell::new(Duration::ZERO));
        let tick = |ms: f64| {
            clock
                .0
                .set(clock.0.get() + Duration::from_secs_f64(ms / 1e3))
        };
        // Steady placements settle after the minimum number of rounds.
        let s = Settings::models();
        let t = rounds(
            &[None, None],
            &s,
            &clock,
            &mut |_| {
                tick(5.0);
                Ok(5e-3)
            },
            &|_, _| {},
        );
        assert_eq!(t[0].as_ref().unwrap().len(), s.min_repeats);
        // A placement whose warm-up failed is not run; one that fails later leaves the rounds
        // with its error, the others go on.
        let mut calls = [0usize; 3];
        let t = rounds(
            &[None, Some("no".into()), None],
            &s,
            &clock,
            &mut |k| {
                calls[k] += 1;
                tick(5.0);
                if k == 2 && calls[k] == 2 {
                    Err("broke".into())
                } else {
                    Ok(5e-3)
                }
            },
            &|_, _| {},
        );
        assert_eq!(calls, [s.min_repeats, 0, 2]);
        assert_eq!(t[1], Err("no".to_string()));
        assert_eq!(t[2], Err("broke".to_string()));
        // Runs that slow down round after round (never settling: round r takes r/2 s per
        // placement), against a budget of 2 x 20 s: after round 7 (28 s in all) the next
        // fits (36 s), after round 8 it would not (45 s).
        let mut runs = 0usize;
        let t = rounds(
            &[None, None],
            &s,
            &clock,
            &mut |_| {
                runs += 1;
                let secs = 0.5 * ((runs - 1) / 2 + 1) as f64;
                tick(secs * 1e3);
                Ok(secs)
            },
            &|_, _| {},
        );
        assert_eq!(t[0].as_ref().unwrap().len(), 8);
        assert_eq!(t[1].as_ref().unwrap().len(), 8);
        let short = Settings {
            budget: Duration::from_millis(1),
            ..s
        };
        let t = rounds(
            &[None],
            &short,
            &clock,
            &mut |_| {
                tick(3000.0);
                Ok(3.0)
            },
            &|_, _| {},
        );
        assert_eq!(t[0].as_ref().unwrap().len(), 1);
    }

    #[test]
    fn labels() {
        assert_eq!(label_of("collage", "tvm_cpu"), "Collage plan");
        assert_eq!(label_of("tvm", "tvm_cpu"), "tvm_cpu alone");
        assert_eq!(label_of("dnnl", "tvm_cpu"), "dnnl with tvm_cpu");
        assert_eq!(
            label_of("greedy:dnnl", "tvm_cpu"),
            "greedy dnnl (partition_for_dnnl)"
        );
    }

    #[test]
    fn tolerances() {
        assert_eq!(default_tolerance(crate::ir::DType::F32), (1e-3, 1e-3));
        assert_eq!(default_tolerance(crate::ir::DType::F16), (5e-2, 5e-2));
        assert_eq!(default_tolerance(crate::ir::DType::I64), (0.0, 0.0));
    }
}
