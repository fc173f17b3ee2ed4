//! The placements of a plan run end to end on this machine (`collage bench`): the Collage plan
//! and every baseline, each built as a runnable module
//! ([`crate::planning::partition::finalize::runnable`]), compiled by this machine's backends, checked
//! against the reference interpreter's outputs on the same weights and inputs, then timed
//! together in rounds ([`crate::runtime::measure::protocol::time_in_rounds`]).
//!
//! Placements: the Collage plan; the native targets alone (`tvm`); each library target with the
//! native targets (`<target>`); each library's greedy placement (`greedy:<target>`). A placement
//! whose partitions include a target with no backend here, or that has no cover, is skipped
//! with the reason; one identical to a placement already run is not run twice. For an ONNX
//! model, ONNX Runtime on the same file is one more placement (`onnxruntime`: see
//! [`super::onnxruntime`]), checked and timed with the others.

use super::onnxruntime;
use super::{report, Outcome, Progress};
use crate::diag::{self, Diagnostic, Diagnostics};
use crate::ir::Module;
use crate::planning::enumerate::{DataflowGraph, Limits};
use crate::planning::partition::{Partition, Plan};
use crate::rules::ruletree::Program;
use crate::runtime::backend::registry::Setup;
use crate::runtime::exec::compare::{self, Purpose};
use crate::runtime::exec::data::Weights;
use crate::runtime::exec::executor::Executable;
use crate::runtime::exec::program::KernelRecord;
use crate::runtime::exec::tensor::Tensor;
use crate::runtime::measure::protocol::{self, Settings, Timing};
use crate::source::SourceMap;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// For ONNX Runtime's placement: its version, library, settings and session opening time.
    pub onnxruntime: Option<onnxruntime::Info>,
    /// The group it was timed in (`Some(0)` for every placement that ran when all were built
    /// at once; see [`Grouping`]).
    pub group: Option<usize>,
    /// What it added to the resident memory, when it was measured (in groups only).
    pub footprint: Option<Footprint>,
    /// Its median latency over the anchor's in the same rounds, when timed in groups.
    pub relative: Option<f64>,
    /// When timed in groups: its latency for comparisons, [`Row::relative`] times the
    /// anchor's median latency in the first group (so two placements of different groups are
    /// compared through the anchor, each against it in its own rounds).
    pub compared: Option<f64>,
}

impl Row {
    /// Its timing, or the timing of the placement it is the same as.
    pub fn timing<'a>(&'a self, rows: &'a [Row]) -> Option<&'a Timing> {
        match &self.status {
            Status::Ran { timing, .. } => Some(timing),
            Status::Same(other) => rows.iter().find(|r| &r.name == other)?.timing(rows),
            Status::Skipped(_) => None,
        }
    }

    /// Its latency for comparisons (seconds): its median latency, or when the placements were
    /// timed in groups, its ratio to the anchor in its group times the anchor's median in the
    /// first group ([`Row::compared`]); that of the placement it is the same as.
    pub fn compared_seconds(&self, rows: &[Row]) -> Option<f64> {
        match &self.status {
            Status::Same(other) => rows
                .iter()
                .find(|r| &r.name == other)?
                .compared_seconds(rows),
            Status::Ran { timing, .. } => Some(self.compared.unwrap_or(timing.seconds)),
            Status::Skipped(_) => None,
        }
    }

    /// Whether its outputs (or those of the placement it is the same as) are within tolerance.
    pub fn outputs_ok<'a>(&'a self, rows: &'a [Row]) -> Option<bool> {
        match &self.status {
            Status::Ran { diffs, .. } => Some(diffs.iter().all(|d| d.0.within())),
            Status::Same(other) => rows.iter().find(|r| &r.name == other)?.outputs_ok(rows),
            Status::Skipped(_) => None,
        }
    }
}

/// The speed-up of the Collage plan over the best of native alone and the greedy placements,
/// and over ONNX Runtime when it ran.
#[derive(Clone, Debug)]
pub struct Speedup {
    /// The baseline placement.
    pub baseline: String,
    /// Its median latency (seconds).
    pub baseline_seconds: f64,
    /// The Collage plan's median latency (seconds).
    pub collage_seconds: f64,
    /// ONNX Runtime's median latency (seconds), when its placement ran.
    pub onnxruntime_seconds: Option<f64>,
}

/// What a placement is, for people (`native`: the native target's name).
pub fn label_of(name: &str, native: &str) -> String {
    match name.split_once(':') {
        _ if name == "collage" => "Collage plan".to_string(),
        _ if name == "tvm" => format!("{native} alone"),
        _ if name == onnxruntime::NAME => "ONNX Runtime".to_string(),
        Some(("greedy", t)) => format!("greedy {t} (partition_for_{t})"),
        _ => format!("{name} with {native}"),
    }
}

/// The native target that can run here (`native` when there is none).
pub fn native_name(program: &Program, setup: &Setup) -> String {
    program
        .targets
        .iter()
        .find(|t| t.compiler.is_none() && !t.is_host && setup.availability(t).is_ok())
        .map_or("native".to_string(), |t| t.name.clone())
}

/// The reference interpreter's run: the inputs every placement runs on and the outputs it is
/// checked against.
pub struct Reference {
    /// The names of `@main`'s parameters, in order.
    pub names: Vec<String>,
    /// The inputs (drawn from the seed), one per parameter.
    pub inputs: Vec<Arc<Tensor>>,
    /// The outputs.
    pub expected: Vec<Arc<Tensor>>,
    /// The run's wall time (ms).
    pub ms: f64,
}

/// Runs the model once on the reference interpreter, on random inputs drawn from `weights`'
/// seed.
pub fn reference(
    sources: &SourceMap,
    setup: &Setup,
    m: &Module,
    weights: &Weights,
    progress: &dyn Progress,
) -> Result<Reference, Outcome> {
    let reference = setup
        .compile_reference(m, &weights.for_module(m))
        .map_err(|d| {
            progress.finish();
            report(&d, sources);
            Outcome::InputErrors
        })?;
    let mw = weights.for_module(m);
    let mut inputs = Vec::with_capacity(reference.inputs.len());
    for p in &reference.inputs {
        let t = mw.random_input(&p.name, &p.shape).map_err(|e| {
            progress.finish();
            diag::emit_alone(Diagnostic::error(diag::E2304, e));
            Outcome::InputErrors
        })?;
        inputs.push(Arc::new(t));
    }
    let start = Instant::now();
    let expected: Vec<Arc<Tensor>> = match reference.run(&inputs) {
        Ok(o) => o.value.flatten().into_iter().cloned().collect(),
        Err(d) => {
            progress.finish();
            let mut ds = Diagnostics::new();
            ds.push(d);
            report(&ds, sources);
            return Err(Outcome::InputErrors);
        }
    };
    // Non-finite reference values check nothing there (a placement matches NaN with NaN), and
    // usually mean the drawn inputs are outside what the model expects: say so.
    for (i, t) in expected.iter().enumerate() {
        let n = crate::runtime::exec::compare::summarize(t).non_finite;
        if n > 0 {
            let d = Diagnostic::warning(
                diag::W2331,
                format!(
                    "the reference interpreter's output{i} has {n} NaN or infinite value(s) \
                     of {} on the inputs drawn from seed {}: the placements are checked there \
                     only for the same non-finite values; try another `--seed`, or check \
                     the model with real inputs (`collage run --input`)",
                    t.numel(),
                    weights.seed
                ),
            );
            progress.pause(&mut || diag::emit_alone(d.clone()));
        }
    }
    Ok(Reference {
        names: reference.inputs.iter().map(|p| p.name.clone()).collect(),
        inputs,
        expected,
        ms: start.elapsed().as_secs_f64() * 1e3,
    })
}

/// Where and how the placements run.
pub struct Bench<'a> {
    /// The model's graph.
    pub g: &'a DataflowGraph<'a>,
    /// The rules (the selected targets).
    pub program: &'a Program,
    /// The depth limits the plan was made with (coalescing keeps to them).
    pub limits: &'a Limits,
    /// This machine's backends.
    pub setup: &'a Setup,
    /// The weights.
    pub weights: &'a Weights,
    /// The reference run.
    pub reference: &'a Reference,
    /// `--rtol` and `--atol` (`None`: [`compare::tolerance`] for placements).
    pub tolerances: (Option<f64>, Option<f64>),
    /// The timing settings.
    pub settings: Settings,
    /// The measurement database, locked while the placements are timed (so measuring sessions
    /// do not time at once).
    pub lock: Option<&'a Path>,
    /// ONNX Runtime, when it is a placement ([`onnxruntime::decide`]).
    pub onnxruntime: Option<&'a onnxruntime::Plan>,
    /// The resident memory the placements are built under (bytes; `None`: all are built at
    /// once): when they may not all fit, they are built and timed in groups ([`Grouping`]).
    pub max_memory: Option<u64>,
}

/// The placements of a plan, by name, with their estimated costs and chosen candidates
/// (`None`: no cover).
pub fn of_plan(plan: &Plan) -> Vec<(String, Option<f64>, Option<Vec<usize>>)> {
    let mut placements = vec![(
        "collage".to_string(),
        Some(plan.total),
        Some(plan.chosen.clone()),
    )];
    for b in &plan.baselines {
        placements.push((b.name.clone(), b.cost, b.chosen.clone()));
    }
    placements
}

/// How the placements were built and timed when they did not all fit in memory at once
/// (`--max-memory`): in groups, each timed in its own rounds together with the anchor.
#[derive(Clone, Debug)]
pub struct Grouping {
    /// The limit (bytes).
    pub limit: u64,
    /// The resident memory before any placement was built (bytes): the model, its weights,
    /// the reference run's inputs and outputs, the libraries.
    pub base: u64,
    /// The anchor: built once and timed in every group (a placement name).
    pub anchor: String,
    /// The placements of each group, by name, in the order they were built (the anchor is in
    /// none: it is in all).
    pub groups: Vec<Vec<String>>,
}

/// The memory `collage bench` builds its placements under when `--max-memory` is not given
/// (or the memory available, if less): 1.75 GiB, which keeps GPT-2 (12 layers, 0.65 GB of
/// weights) with ONNX Runtime under 2 GB.
pub const DEFAULT_MAX_MEMORY: u64 = 1792 << 20;

/// What a placement adds to the resident memory, measured when it was built alone (bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Footprint {
    /// While it is kept, after its checked run.
    pub kept: u64,
    /// At most, while it was built and checked.
    pub peak: u64,
}

/// A placement to build: one of collage's, from its partitions, or ONNX Runtime's session.
#[derive(Clone)]
enum Todo {
    Collage(Vec<Partition>),
    OnnxRuntime,
}

/// A built placement.
enum Built {
    Collage(Ready),
    OnnxRuntime(onnxruntime::Ready),
}

impl Built {
    fn entry(&mut self) -> Entry<'_> {
        match self {
            Built::Collage(r) => Entry::Collage(r),
            Built::OnnxRuntime(r) => Entry::OnnxRuntime(r),
        }
    }

    /// The row's status from a timing.
    fn status(&self, program: &Program, t: Result<Timed, String>) -> Status {
        match (self, t) {
            (_, Err(why)) => Status::Skipped(why),
            (Built::Collage(r), Ok(t)) => r.status(program, t),
            (Built::OnnxRuntime(r), Ok(t)) => Status::Ran {
                timing: t.timing,
                kernels: BTreeMap::new(),
                fallbacks: 0,
                diffs: r.diffs.clone(),
                profile: Vec::new(),
            },
        }
    }
}

/// Builds (and checks) one placement.
fn make(bench: &Bench<'_>, todo: &Todo, row: &mut Row) -> Result<Built, String> {
    match todo {
        Todo::Collage(parts) => build(bench, parts.clone()).map(Built::Collage),
        Todo::OnnxRuntime => {
            let plan = bench
                .onnxruntime
                .ok_or("internal error: no ONNX Runtime plan")?;
            let rt = plan.runtime.as_ref().map_err(Clone::clone)?;
            let r = onnxruntime::open(rt, plan, bench.reference, &|a, b| check(bench, a, b))?;
            row.onnxruntime = Some(r.info.clone());
            Ok(Built::OnnxRuntime(r))
        }
    }
}

/// The resident memory once the heap's free memory is given back (`None`: unknown here).
fn settled() -> Option<u64> {
    crate::util::memory::trim();
    crate::util::memory::resident()
}

/// Room reserved per placement when deciding, before anything is built, whether all of them
/// fit at once: twice the weights (a backend's own copy of them, and its working memory).
fn worst_case(weights: u64) -> u64 {
    weights.saturating_mul(2).saturating_add(64 << 20)
}

/// Builds and checks each placement of `plan`, then times those that run, together: all at
/// once when they fit in `bench.max_memory` (or no limit is set), else in groups (see
/// [`Grouping`] and docs/measure.md, "Memory").
pub fn run(
    bench: &Bench<'_>,
    plan: &mut Plan,
    progress: &dyn Progress,
) -> (Vec<Row>, Option<Grouping>) {
    let placements = of_plan(plan);
    let native = native_name(bench.program, bench.setup);
    let mut rows: Vec<Row> = Vec::new();
    // The placements to build, by row.
    let mut todo: Vec<(usize, Todo)> = Vec::new();
    let mut seen: Vec<(Vec<usize>, String)> = Vec::new();
    for (name, estimated, chosen) in placements.iter() {
        let mut row = Row {
            name: name.clone(),
            label: label_of(name, &native),
            estimated: *estimated,
            partitions: BTreeMap::new(),
            status: Status::Skipped(String::new()),
            onnxruntime: None,
            group: None,
            footprint: None,
            relative: None,
            compared: None,
        };
        let Some(chosen) = chosen else {
            row.status = Status::Skipped("no cover by candidates with usable costs".into());
            rows.push(row);
            continue;
        };
        let mut sorted = chosen.clone();
        sorted.sort_unstable();
        let saved = std::mem::replace(&mut plan.chosen, chosen.clone());
        let parts = crate::planning::partition::finalize::coalesce(
            bench.g,
            bench.program,
            plan,
            bench.limits,
        );
        plan.chosen = saved;
        for p in &parts {
            let t = &bench.program.targets[p.target];
            if !t.is_host {
                *row.partitions.entry(t.name.clone()).or_default() += 1;
            }
        }
        let cannot = parts.iter().find_map(|p| {
            let t = &bench.program.targets[p.target];
            (!t.is_host)
                .then(|| bench.setup.availability(t).err())
                .flatten()
        });
        if let Some(why) = cannot {
            row.status = Status::Skipped(why);
        } else if let Some((_, first)) = seen.iter().find(|(c, _)| *c == sorted) {
            row.status = Status::Same(first.clone());
        } else {
            seen.push((sorted, name.clone()));
            todo.push((rows.len(), Todo::Collage(parts)));
        }
        rows.push(row);
    }
    // ONNX Runtime last: opened, run once and checked like the others.
    if let Some(plan) = bench.onnxruntime {
        let mut row = Row {
            name: onnxruntime::NAME.to_string(),
            label: label_of(onnxruntime::NAME, &native),
            estimated: None,
            partitions: BTreeMap::new(),
            status: Status::Skipped(String::new()),
            onnxruntime: None,
            group: None,
            footprint: None,
            relative: None,
            compared: None,
        };
        match &plan.runtime {
            Err(why) => row.status = Status::Skipped(why.clone()),
            Ok(rt) => {
                row.label = format!("ONNX Runtime {}", rt.version);
                todo.push((rows.len(), Todo::OnnxRuntime));
            }
        }
        rows.push(row);
    }
    let base = settled();
    let at_once = match (bench.max_memory, base) {
        (Some(limit), Some(base)) => {
            let each = worst_case(bench.weights.bytes());
            base.saturating_add(each.saturating_mul(todo.len() as u64)) <= limit
        }
        _ => true,
    };
    if at_once {
        let all: Vec<usize> = (0..todo.len()).collect();
        run_group(bench, &mut rows, &todo, None, &all, progress);
        for r in rows
            .iter_mut()
            .filter(|r| matches!(r.status, Status::Ran { .. }))
        {
            r.group = Some(0);
        }
        return (rows, None);
    }
    let (limit, base) = (bench.max_memory.unwrap_or(u64::MAX), base.unwrap_or(0));
    // Each placement built alone, checked and measured, then released.
    progress.phase("measuring placements' memory", todo.len());
    let mut sizes: Vec<Option<Footprint>> = Vec::with_capacity(todo.len());
    for (k, (row, t)) in todo.iter().enumerate() {
        progress.steps(k, todo.len());
        if matches!(t, Todo::OnnxRuntime) {
            progress.phase("opening ONNX Runtime", 0);
        }
        let before = settled().unwrap_or(base);
        crate::util::memory::reset_peak();
        match make(bench, t, &mut rows[*row]) {
            Ok(built) => {
                let kept = crate::util::memory::resident().unwrap_or(before);
                let peak = crate::util::memory::peak().unwrap_or(kept).max(kept);
                drop(built);
                let f = Footprint {
                    kept: kept.saturating_sub(before),
                    peak: peak.saturating_sub(before),
                };
                rows[*row].footprint = Some(f);
                sizes.push(Some(f));
            }
            Err(why) => {
                rows[*row].status = Status::Skipped(why);
                sizes.push(None);
            }
        }
    }
    let base = settled().unwrap_or(base).min(base);
    let names: Vec<&str> = todo.iter().map(|(r, _)| rows[*r].name.as_str()).collect();
    let Some((anchor, groups)) = group(&names, &sizes, base, limit) else {
        return (rows, None);
    };
    let grouping = Grouping {
        limit,
        base,
        anchor: rows[todo[anchor].0].name.clone(),
        groups: groups
            .iter()
            .map(|g| g.iter().map(|&k| rows[todo[k].0].name.clone()).collect())
            .collect(),
    };
    // The anchor, built once and timed with every group.
    progress.phase(&format!("building {}", rows[todo[anchor].0].name), 0);
    let (arow, atodo) = (todo[anchor].0, todo[anchor].1.clone());
    let mut a = match make(bench, &atodo, &mut rows[arow]) {
        Ok(a) => a,
        Err(why) => {
            rows[arow].status = Status::Skipped(why);
            return (rows, Some(grouping));
        }
    };
    for (gi, g) in groups.iter().enumerate() {
        run_group(
            bench,
            &mut rows,
            &todo,
            Some((anchor, &mut a, gi)),
            g,
            progress,
        );
        settled();
    }
    let anchor_seconds = rows[arow].timing(&rows).map(|t| t.seconds);
    for r in rows.iter_mut() {
        r.compared = r.relative.zip(anchor_seconds).map(|(x, a)| x * a);
    }
    (rows, Some(grouping))
}

/// Groups placements under a memory limit: the anchor, then groups of the others, in order,
/// each group as many as fit beside the anchor (first fit). `sizes[k]`: what placement `k`
/// needs (`None`: it did not build). The anchor is the Collage plan (`names[k] ==
/// "collage"`) when every other placement fits beside it alone, so that each is compared
/// with the plan in the same rounds; otherwise the placement that keeps the least memory.
/// A placement that fits with nothing but the anchor still gets a group of its own.
fn group(
    names: &[&str],
    sizes: &[Option<Footprint>],
    base: u64,
    limit: u64,
) -> Option<(usize, Vec<Vec<usize>>)> {
    let built: Vec<(usize, Footprint)> = sizes
        .iter()
        .enumerate()
        .filter_map(|(k, f)| f.map(|f| (k, f)))
        .collect();
    let fits_beside = |a: usize, fa: Footprint| {
        built
            .iter()
            .all(|&(k, f)| k == a || base + fa.kept + f.peak <= limit)
            && base + fa.peak <= limit
    };
    let collage = built
        .iter()
        .find(|(k, f)| names[*k] == "collage" && fits_beside(*k, *f));
    let (anchor, fa) = match collage {
        Some(&c) => c,
        None => *built.iter().min_by_key(|(k, f)| (f.kept, *k))?,
    };
    let mut groups: Vec<(u64, Vec<usize>)> = Vec::new();
    for &(k, f) in built.iter().filter(|(k, _)| *k != anchor) {
        let room = |used: u64| base + fa.kept + used + f.peak.max(f.kept) <= limit;
        match groups.iter_mut().find(|(used, _)| room(*used)) {
            Some((used, g)) => {
                *used += f.kept;
                g.push(k);
            }
            None => groups.push((f.kept, vec![k])),
        }
    }
    if groups.is_empty() {
        groups.push((0, Vec::new()));
    }
    Some((anchor, groups.into_iter().map(|(_, g)| g).collect()))
}

/// Builds the placements `members` (indices into `todo`), then times them in rounds with the
/// anchor (its index, the anchor built, and the group's number) when there is one, and sets
/// their rows; the members are released at the end.
fn run_group(
    bench: &Bench<'_>,
    rows: &mut [Row],
    todo: &[(usize, Todo)],
    anchor: Option<(usize, &mut Built, usize)>,
    members: &[usize],
    progress: &dyn Progress,
) {
    let label = anchor
        .as_ref()
        .map_or(String::new(), |(_, _, g)| format!(" (group {})", g + 1));
    progress.phase(&format!("building placements{label}"), members.len());
    let mut built: Vec<(usize, Built)> = Vec::new();
    for (k, &m) in members.iter().enumerate() {
        progress.steps(k, members.len());
        let (row, t) = (todo[m].0, &todo[m].1);
        if matches!(t, Todo::OnnxRuntime) {
            progress.phase("opening ONNX Runtime", 0);
        }
        match make(bench, t, &mut rows[row]) {
            Ok(b) => built.push((row, b)),
            Err(why) => rows[row].status = Status::Skipped(why),
        }
    }
    progress.steps(members.len(), members.len());
    progress.phase(
        &format!("timing placements{label}"),
        bench.settings.max_repeats,
    );
    let (anchor_row, group, mut anchor_built) = match anchor {
        Some((k, a, g)) => (Some(todo[k].0), Some(g), Some(a)),
        None => (None, None, None),
    };
    let timed = {
        let _guard = bench
            .lock
            .and_then(|p| crate::runtime::measure::db::lock(p).ok());
        let mut entries: Vec<Entry<'_>> = Vec::new();
        if let Some(a) = anchor_built.as_deref_mut() {
            entries.push(a.entry());
        }
        entries.extend(built.iter_mut().map(|(_, b)| b.entry()));
        time_together(
            &mut entries,
            &bench.reference.inputs,
            &bench.settings,
            &|done, total| progress.steps(done, total),
        )
    };
    let mut timed = timed.into_iter();
    let anchor_seconds = match (anchor_row, anchor_built) {
        (Some(ar), Some(a)) => {
            let t = timed
                .next()
                .unwrap_or_else(|| Err("internal error: the anchor was not timed".into()));
            let secs = t.as_ref().ok().map(|t| t.timing.seconds);
            // The anchor's row shows its timing in the first group.
            if group == Some(0) {
                rows[ar].status = a.status(bench.program, t);
                rows[ar].group = Some(0);
                rows[ar].relative = secs.map(|_| 1.0);
            }
            secs
        }
        _ => None,
    };
    let rest: Vec<Result<Timed, String>> = timed.collect();
    for ((row, b), t) in built.iter().zip(rest) {
        let secs = t.as_ref().ok().map(|t| t.timing.seconds);
        rows[*row].status = b.status(bench.program, t);
        rows[*row].group = group;
        rows[*row].relative = match (secs, anchor_seconds) {
            (Some(s), Some(a)) if a > 0.0 => Some(s / a),
            _ => None,
        };
    }
}

/// One output of a placement against the reference interpreter's: the difference and the
/// tolerances (`--rtol`/`--atol`, else [`compare::tolerance`] for placements).
fn check(
    bench: &Bench<'_>,
    got: &Tensor,
    expected: &Tensor,
) -> Result<(compare::Diff, f64, f64), String> {
    let (rtol, atol) = bench.tolerances;
    let (dr, da) = compare::tolerance(Purpose::Placement, expected.dtype());
    let (rt, at) = (rtol.unwrap_or(dr), atol.unwrap_or(da));
    let d = compare::compare(got, expected, rt, at).map_err(|e| format!("internal error: {e}"))?;
    Ok((d, rt, at))
}

/// A placement built and checked, ready to be timed.
struct Ready {
    parts: Vec<Partition>,
    x: Executable,
    /// The partition each kernel of `x` (same order as [`Executable::kernels`]) runs, if any.
    part_of: Vec<Option<usize>>,
    kernels: BTreeMap<String, usize>,
    fallbacks: usize,
    diffs: Vec<(compare::Diff, f64, f64)>,
    /// The first run's time (the checked run).
    first_call: f64,
}

/// Builds a placement and runs it once, checking its outputs against the reference's.
fn build(bench: &Bench<'_>, parts: Vec<Partition>) -> Result<Ready, String> {
    let (g, program) = (bench.g, bench.program);
    let m = crate::planning::partition::finalize::runnable(g, program, &parts)
        .map_err(|e| format!("internal error: the placement cannot be rewritten: {e}"))?;
    let x: Executable = bench
        .setup
        .compile(&m, &bench.weights.for_module(&m))
        .map_err(|d| {
            d.iter()
                .next()
                .map_or_else(|| "it cannot be compiled".into(), |d| d.message.clone())
        })?;
    let part_of = kernel_partitions(g, program, &parts, x.kernels());
    let mut kernels: BTreeMap<String, usize> = BTreeMap::new();
    for k in x.kernels() {
        *kernels.entry(k.backend.clone()).or_default() += 1;
    }
    let fallbacks = x.warnings.len();
    let start = Instant::now();
    let out = x
        .in_pool(|| x.run(&bench.reference.inputs))
        .map_err(|d| format!("it failed: {}", d.message))?;
    let first_call = start.elapsed().as_secs_f64();
    let got: Vec<Arc<Tensor>> = out.value.flatten().into_iter().cloned().collect();
    let expected = &bench.reference.expected;
    if got.len() != expected.len() {
        return Err(format!(
            "internal error: {} outputs instead of {}",
            got.len(),
            expected.len()
        ));
    }
    let mut diffs = Vec::new();
    for (a, b) in got.iter().zip(expected) {
        diffs.push(check(bench, a, b)?);
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

/// The partition each kernel runs (same order as `kernels`), found from the kernel's span. A
/// partition's call carries the span of its last exit; several partitions may carry the same
/// one (an imported ONNX node becomes several operators with the node's span, such as the
/// reshapes around a `MatMul`'s `batch_matmul`), and then the kernels with that span go to
/// those partitions in the order of their exits, which is the order they run in (each feeds
/// the next). A kernel whose span is no partition's exit (a partition lowered operator by
/// operator) goes to the first partition holding a node with its span.
fn kernel_partitions(
    g: &DataflowGraph<'_>,
    program: &Program,
    parts: &[Partition],
    kernels: &[KernelRecord],
) -> Vec<Option<usize>> {
    type Key = (u32, u32, u32);
    let key = |i: usize| {
        g.expr(i).map(|e| {
            let sp = g.module.span(e);
            (sp.file.0, sp.start, sp.end)
        })
    };
    let mut by_exit: BTreeMap<Key, Vec<(usize, usize)>> = BTreeMap::new();
    let mut by_inside: BTreeMap<Key, usize> = BTreeMap::new();
    for (k, p) in parts.iter().enumerate() {
        if program.targets[p.target].is_host {
            continue;
        }
        let last_exit = p
            .sub_graph
            .exit
            .iter()
            .filter_map(|i| Some((i, key(i)?)))
            .last();
        if let Some((i, sp)) = last_exit {
            by_exit.entry(sp).or_default().push((i, k));
        }
        for i in p.sub_graph.inside.iter() {
            if let Some(sp) = key(i) {
                by_inside.entry(sp).or_insert(k);
            }
        }
    }
    for v in by_exit.values_mut() {
        v.sort_unstable();
    }
    let mut seen: BTreeMap<Key, usize> = BTreeMap::new();
    kernels
        .iter()
        .map(|rec| {
            let sp = (rec.span.file.0, rec.span.start, rec.span.end);
            match by_exit.get(&sp) {
                Some(v) => {
                    let n = seen.entry(sp).or_default();
                    let k = v[(*n).min(v.len() - 1)].1;
                    *n += 1;
                    Some(k)
                }
                None => by_inside.get(&sp).copied(),
            }
        })
        .collect()
}

/// A placement to time: one of collage's, run on its executable's worker pool, or ONNX
/// Runtime's session, run from this thread (its own pool's threads do the work).
enum Entry<'a> {
    Collage(&'a Ready),
    OnnxRuntime(&'a mut onnxruntime::Ready),
}

impl Entry<'_> {
    fn run(&mut self, inputs: &[Arc<Tensor>]) -> Result<f64, String> {
        match self {
            Entry::Collage(r) => r.x.in_pool(|| {
                let s = Instant::now();
                // The result's storage serves the next run, as `collage run --repeat` does.
                let o =
                    r.x.run(inputs)
                        .map_err(|d| format!("it failed: {}", d.message))?;
                let t = s.elapsed().as_secs_f64();
                r.x.recycle(o.value);
                Ok(t)
            }),
            Entry::OnnxRuntime(r) => r.run(),
        }
    }

    /// Whether the placement runs on ONNX Runtime's thread pool rather than collage's (libgomp
    /// and the executor's workers). Idle threads of either spin for a while after a run (ONNX
    /// Runtime's, with spinning on, about 40 ms here; libgomp's 5,000 rounds, about 0.1-0.25
    /// ms: docs/backends.md, "Thread pools"), and would take a core from the other pool's next
    /// run; placements on the same pool share their threads and do not.
    fn on_onnxruntime_pool(&self) -> bool {
        matches!(self, Entry::OnnxRuntime(_))
    }

    fn first_call(&self) -> f64 {
        match self {
            Entry::Collage(r) => r.first_call,
            Entry::OnnxRuntime(r) => r.first_call,
        }
    }

    fn kernel_times(&self) -> Vec<(u64, Duration)> {
        match self {
            Entry::Collage(r) => r.x.kernel_times(),
            Entry::OnnxRuntime(_) => Vec::new(),
        }
    }
}

/// The window over which [`wait_until_idle`] watches the process's CPU time: longer than the
/// kernel's accounting tick (4 ms here), at which another thread's CPU time advances.
const IDLE_WINDOW: Duration = Duration::from_millis(10);

/// The longest [`wait_until_idle`] waits.
const IDLE_LIMIT: Duration = Duration::from_millis(250);

/// Waits until the process's threads are idle: until, over one `window` of sleep of the calling
/// thread, the process used less than a tenth of it in CPU time (a spinning thread uses all of
/// it), or `limit` has passed.
fn wait_until_idle(window: Duration, limit: Duration) {
    let start = Instant::now();
    while start.elapsed() < limit {
        let before = process_cpu_time();
        std::thread::sleep(window);
        // Without a CPU clock the wait lasts the whole limit, the safe side.
        if let (Some(a), Some(b)) = (before, process_cpu_time()) {
            if b.saturating_sub(a) < window / 10 {
                return;
            }
        }
    }
}

/// The CPU time of the whole process (`CLOCK_PROCESS_CPUTIME_ID`), or `None` where the clock
/// cannot be read.
fn process_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call writes only it.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return None;
    }
    Some(Duration::new(
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    ))
}

/// Times built placements end to end in rounds ([`protocol::time_in_rounds`]). Each placement
/// first runs once untimed (warm-up; the checked run was its first call); its kernels' times
/// are read after that, for the profile.
fn time_together(
    entries: &mut [Entry<'_>],
    inputs: &[Arc<Tensor>],
    settings: &Settings,
    progress: &dyn Fn(usize, usize),
) -> Vec<Result<Timed, String>> {
    let start = Instant::now();
    let warm: Vec<Option<String>> = entries.iter_mut().map(|e| e.run(inputs).err()).collect();
    let before: Vec<_> = entries.iter().map(Entry::kernel_times).collect();
    let clock = protocol::Monotonic::new();
    // The placement that ran last: when the next one runs on the other thread pool (ONNX
    // Runtime's or collage's), the process first waits, untimed and before the next one's
    // lead-in runs, until the idle threads of the last have stopped spinning.
    let on_ort: Vec<bool> = entries.iter().map(Entry::on_onnxruntime_pool).collect();
    let mut last: Option<usize> = None;
    let times = protocol::time_in_rounds(
        &warm,
        settings,
        &clock,
        &mut |k| {
            if last.is_some_and(|l| on_ort[l] != on_ort[k]) {
                wait_until_idle(IDLE_WINDOW, IDLE_LIMIT);
            }
            last = Some(k);
        },
        &mut |k| entries[k].run(inputs),
        progress,
    );
    let elapsed = start.elapsed().as_secs_f64();
    entries
        .iter()
        .zip(times)
        .zip(before)
        .map(|((e, t), before)| {
            let t = t?;
            Ok(Timed {
                timing: Timing {
                    seconds: protocol::median(&t),
                    spread: protocol::spread(&t),
                    number: 1,
                    first_call: e.first_call(),
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

/// A placement's timing, and its kernels' times when the timed runs began.
struct Timed {
    timing: Timing,
    before: Vec<(u64, Duration)>,
}

impl Ready {
    /// The row's status from the timing: the latency, and each partition's mean kernel time
    /// per timed run beside its estimate.
    fn status(&self, program: &Program, t: Timed) -> Status {
        let after = self.x.kernel_times();
        let mut per_part: Vec<Option<(u64, f64)>> = vec![None; self.parts.len()];
        for ((part, b), a) in self.part_of.iter().zip(&t.before).zip(&after) {
            if let Some(k) = *part {
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
            kernels: self.kernels.clone(),
            fallbacks: self.fallbacks,
            diffs: self.diffs.clone(),
            profile,
        }
    }
}

/// The Collage plan against the fastest of native alone and the greedy placements that ran,
/// and against ONNX Runtime when it ran.
pub fn speedup_of(rows: &[Row]) -> Option<Speedup> {
    let collage = rows
        .iter()
        .find(|r| r.name == "collage")?
        .compared_seconds(rows)?;
    let best = rows
        .iter()
        .filter(|r| r.name == "tvm" || r.name.starts_with("greedy:"))
        .filter_map(|r| r.compared_seconds(rows).map(|t| (r, t)))
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    let onnxruntime_seconds = rows
        .iter()
        .find(|r| r.name == onnxruntime::NAME && r.onnxruntime.is_some())
        .and_then(|r| r.compared_seconds(rows));
    Some(Speedup {
        baseline: best.0.name.clone(),
        baseline_seconds: best.1,
        collage_seconds: collage,
        onnxruntime_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(kept: u64, peak: u64) -> Option<Footprint> {
        Some(Footprint { kept, peak })
    }

    #[test]
    fn the_process_cpu_clock_counts_a_busy_thread_and_a_spinning_thread_holds_the_wait() {
        // Burn CPU on this thread until the process clock has advanced by 20 ms (bounded by
        // wall time, so a broken clock fails instead of hanging).
        let start = process_cpu_time().expect("the process CPU clock");
        let wall = Instant::now();
        let mut x = 0u64;
        while process_cpu_time().unwrap() < start + Duration::from_millis(20) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            assert!(
                wall.elapsed() < Duration::from_secs(30),
                "the clock does not advance"
            );
        }
        std::hint::black_box(x);
        // With a thread spinning until told to stop, the wait cannot see the process idle:
        // it returns at its limit, not before.
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
            let w = Instant::now();
            wait_until_idle(Duration::from_millis(10), Duration::from_millis(60));
            assert!(w.elapsed() >= Duration::from_millis(60));
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }

    #[test]
    fn the_collage_plan_anchors_when_everything_fits_beside_it() {
        let names = ["collage", "tvm", "greedy:dnnl", "onnxruntime"];
        let sizes = [f(5, 6), f(5, 6), f(3, 3), f(8, 9)];
        // 10 + 5 + 9 <= 24: each fits beside the plan; two at once do not.
        let (a, groups) = group(&names, &sizes, 10, 24).unwrap();
        assert_eq!(a, 0);
        assert_eq!(groups, vec![vec![1, 2], vec![3]]);
        // Everything in one group when the limit allows it.
        let (a, groups) = group(&names, &sizes, 10, 100).unwrap();
        assert_eq!((a, groups), (0, vec![vec![1, 2, 3]]));
    }

    #[test]
    fn the_smallest_placement_anchors_when_the_plan_leaves_no_room() {
        let names = ["collage", "tvm", "greedy:openblas", "onnxruntime"];
        let sizes = [f(5, 6), f(5, 6), f(1, 1), f(8, 9)];
        // 10 + 5 + 9 > 22: ONNX Runtime does not fit beside the plan, but beside the smallest.
        let (a, groups) = group(&names, &sizes, 10, 22).unwrap();
        assert_eq!(a, 2);
        assert_eq!(groups, vec![vec![0, 1], vec![3]]);
        // A placement that did not build is in no group; one too large still gets its own.
        let sizes = [f(5, 6), None, f(1, 1), f(50, 60)];
        let (a, groups) = group(&names, &sizes, 10, 22).unwrap();
        assert_eq!((a, groups), (2, vec![vec![0], vec![3]]));
        assert!(group(&names, &[None, None, None, None], 10, 22).is_none());
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
}
