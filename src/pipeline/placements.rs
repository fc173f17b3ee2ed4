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

/// Builds and checks each placement of `plan`, then times those that run, together.
pub fn run(bench: &Bench<'_>, plan: &mut Plan, progress: &dyn Progress) -> Vec<Row> {
    let placements = of_plan(plan);
    let native = native_name(bench.program, bench.setup);
    let mut rows: Vec<Row> = Vec::new();
    // The placements that run, by row, timed together once all are built.
    let mut ready: Vec<(usize, Ready)> = Vec::new();
    let mut seen: Vec<(Vec<usize>, String)> = Vec::new();
    progress.phase("building placements", placements.len());
    for (k, (name, estimated, chosen)) in placements.iter().enumerate() {
        progress.steps(k, placements.len());
        let mut row = Row {
            name: name.clone(),
            label: label_of(name, &native),
            estimated: *estimated,
            partitions: BTreeMap::new(),
            status: Status::Skipped(String::new()),
            onnxruntime: None,
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
            match build(bench, parts) {
                Ok(r) => ready.push((rows.len(), r)),
                Err(why) => row.status = Status::Skipped(why),
            }
        }
        rows.push(row);
    }
    progress.steps(placements.len(), placements.len());
    // ONNX Runtime last: opened, run once and checked like the others.
    let mut ort: Option<(usize, onnxruntime::Ready)> = None;
    if let Some(plan) = bench.onnxruntime {
        let mut row = Row {
            name: onnxruntime::NAME.to_string(),
            label: label_of(onnxruntime::NAME, &native),
            estimated: None,
            partitions: BTreeMap::new(),
            status: Status::Skipped(String::new()),
            onnxruntime: None,
        };
        match &plan.runtime {
            Err(why) => row.status = Status::Skipped(why.clone()),
            Ok(rt) => {
                row.label = format!("ONNX Runtime {}", rt.version);
                progress.phase("opening ONNX Runtime", 0);
                match onnxruntime::open(rt, plan, bench.reference, &|a, b| check(bench, a, b)) {
                    Ok(r) => {
                        row.onnxruntime = Some(r.info.clone());
                        ort = Some((rows.len(), r));
                    }
                    Err(why) => row.status = Status::Skipped(why),
                }
            }
        }
        rows.push(row);
    }
    progress.phase("timing placements", bench.settings.max_repeats);
    let ort_row = ort.as_ref().map(|(k, _)| *k);
    let mut ort_ready = ort.map(|(_, r)| r);
    let timed = {
        let _guard = bench
            .lock
            .and_then(|p| crate::runtime::measure::db::lock(p).ok());
        let mut entries: Vec<Entry<'_>> = ready.iter().map(|(_, r)| Entry::Collage(r)).collect();
        if let Some(r) = ort_ready.as_mut() {
            entries.push(Entry::OnnxRuntime(r));
        }
        time_together(
            &mut entries,
            &bench.reference.inputs,
            &bench.settings,
            &|done, total| progress.steps(done, total),
        )
    };
    let mut timed = timed.into_iter();
    for ((k, r), t) in ready.into_iter().zip(timed.by_ref()) {
        rows[k].status = match t {
            Ok(timing) => r.finish(bench.program, timing),
            Err(why) => Status::Skipped(why),
        };
    }
    if let (Some(k), Some(r), Some(t)) = (ort_row, ort_ready, timed.next()) {
        rows[k].status = match t {
            Ok(t) => Status::Ran {
                timing: t.timing,
                kernels: BTreeMap::new(),
                fallbacks: 0,
                diffs: r.diffs,
                profile: Vec::new(),
            },
            Err(why) => Status::Skipped(why),
        };
    }
    rows
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
fn build(bench: &Bench<'_>, parts: Vec<Partition>) -> Result<Ready, String> {
    let (g, program) = (bench.g, bench.program);
    let m = crate::planning::partition::finalize::runnable(g, program, &parts)
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
    let x: Executable = bench
        .setup
        .compile(&m, &bench.weights.for_module(&m))
        .map_err(|d| {
            d.iter()
                .next()
                .map_or_else(|| "it cannot be compiled".into(), |d| d.message.clone())
        })?;
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
    let times = protocol::time_in_rounds(
        &warm,
        settings,
        &clock,
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

/// The Collage plan against the fastest of native alone and the greedy placements that ran,
/// and against ONNX Runtime when it ran.
pub fn speedup_of(rows: &[Row]) -> Option<Speedup> {
    let collage = rows.iter().find(|r| r.name == "collage")?.timing(rows)?;
    let best = rows
        .iter()
        .filter(|r| r.name == "tvm" || r.name.starts_with("greedy:"))
        .filter_map(|r| r.timing(rows).map(|t| (r, t)))
        .min_by(|a, b| a.1.seconds.total_cmp(&b.1.seconds))?;
    let onnxruntime_seconds = rows
        .iter()
        .find(|r| r.name == onnxruntime::NAME && r.onnxruntime.is_some())
        .and_then(|r| r.timing(rows))
        .map(|t| t.seconds);
    Some(Speedup {
        baseline: best.0.name.clone(),
        baseline_seconds: best.1.seconds,
        collage_seconds: collage.seconds,
        onnxruntime_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
