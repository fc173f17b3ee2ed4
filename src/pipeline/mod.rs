//! The front door of the pipeline: from a model, rules and a cost specification to a plan, one
//! phase per function, each returning a result so that a command chains them with `?` (in the
//! spirit of Cranelift ISLE's `compile.rs`):
//!
//! 1. load the model and the rules ([`load`]: the one entry through which every command loads
//!    a model, where a second front end plugs in),
//! 2. select the targets ([`select_targets`], [`require_host`]),
//! 3. build the estimator ([`estimator`]),
//! 4. enumerate ([`enumerate`]) and search ([`search`]),
//! 5. finalize: rewrite and check the partitioned program ([`finalize`]), explain placements
//!    ([`explanations`]).
//!
//! [`prepare`] chains phases 1 to 3 for `collage partition` and `collage bench`;
//! [`placements`] runs a plan's placements end to end for `collage bench`. The commands
//! (`crate::driver`) call these and only render what they return.
//!
//! Each phase reports the problems it meets as diagnostics on standard error as it meets them
//! (so warnings and errors come out in the order the work found them); its error value is how
//! the command ends ([`Outcome`]).

pub mod checks;
pub mod conformance;
pub mod diagnostics;
pub mod execute;
pub mod explain;
pub mod load;
pub mod measuring;
pub mod onnxruntime;
pub mod placements;

pub use load::{main_of, read_source, rules_files};

use crate::diag::{self, Diagnostic, Diagnostics};
use crate::ir::Module;
use crate::planning::cost;
use crate::planning::enumerate::{DataflowGraph, Enumeration, Limits};
use crate::planning::partition::{self, PartitionError, Plan};
use crate::rules::ruletree::Program;
use crate::runtime::measure::Measure;
use crate::source::SourceMap;
use measuring::MeasureArgs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// Prints diagnostics to standard error in source order.
pub fn report(diags: &Diagnostics, sources: &SourceMap) {
    let mut sorted = diags.clone();
    sorted.sort_by_position();
    diag::emit_stderr(&sorted, sources);
}

/// A progress display the pipeline drives: the partitioning phases, and room for diagnostics.
pub trait Progress: partition::Progress {
    /// Runs `f` (which prints to standard error) with the display out of the way.
    fn pause(&self, f: &mut dyn FnMut());
    /// Takes the display down for good (before an error is reported).
    fn finish(&self);
}

impl Progress for partition::Silent {
    fn pause(&self, f: &mut dyn FnMut()) {
        f()
    }
    fn finish(&self) {}
}

/// Which targets of the rules take part.
#[derive(Clone, Copy, Debug)]
pub enum Targets<'a> {
    /// These (all when empty), and every host target.
    Named(&'a [String]),
    /// The host and every target that can run on this machine.
    RunnableHere,
}

/// What the pipeline is asked to do, up to a plan.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// The model.
    pub model: &'a Path,
    /// How the model is read.
    pub model_options: &'a load::ModelOptions,
    /// Rules files or directories (empty: the shipped library).
    pub rules: &'a [PathBuf],
    /// The targets.
    pub targets: Targets<'a>,
    /// The cost specification (`--costs`).
    pub costs: &'a cost::Spec,
    /// Time limit of one `cmd:` measurement.
    pub cmd_timeout: std::time::Duration,
    /// Where and how `measure` measures.
    pub measure: &'a MeasureArgs,
}

/// The cost estimator of a run, with the measuring estimator when the specification uses it.
pub struct Estimator {
    /// The chain of estimators, tried in order.
    pub chain: cost::Chain,
    /// The measuring estimator (its counters and notes are read after partitioning).
    pub measurer: Option<Arc<Measure>>,
    /// The raised scheduling priority, held while the estimator lives.
    _priority: Option<crate::runtime::measure::priority::Raised>,
}

/// Everything loaded and built before partitioning.
pub struct Prepared {
    /// The rules, with the selected targets.
    pub program: Program,
    /// The estimator.
    pub estimator: Estimator,
    /// The model, planned.
    pub model: load::Planned,
}

/// Phases 1 to 3: loads the rules, lets `check_outputs` see the rules files read (so a command
/// can refuse outputs naming them before anything is written), selects the targets, builds the
/// estimator and loads the model.
pub fn prepare(
    sources: &mut SourceMap,
    inputs: &Inputs<'_>,
    check_outputs: &dyn Fn(&[PathBuf]) -> Result<(), Outcome>,
) -> Result<Prepared, Outcome> {
    prepare_with(sources, inputs, check_outputs, &mut |sources| {
        load::planned(sources, inputs.model, inputs.model_options)
    })
}

/// Phases 1 to 3 as [`prepare`], for a model already loaded (the Python API's `partition`);
/// `inputs.model` names it in diagnostics. The model is simplified when
/// `inputs.model_options` asks for it.
pub fn prepare_loaded(
    sources: &mut SourceMap,
    inputs: &Inputs<'_>,
    m: Module,
) -> Result<Prepared, Outcome> {
    let mut m = Some(m);
    prepare_with(sources, inputs, &|_| Ok(()), &mut |sources| {
        let m = m.take().ok_or(Outcome::Internal)?;
        let (m, simplified) = load::simplified(m, inputs.model_options.simplify.as_ref());
        let mut planned = load::plan(sources, m, inputs.model)?;
        planned.simplified = simplified;
        Ok(planned)
    })
}

fn prepare_with(
    sources: &mut SourceMap,
    inputs: &Inputs<'_>,
    check_outputs: &dyn Fn(&[PathBuf]) -> Result<(), Outcome>,
    model: &mut dyn FnMut(&mut SourceMap) -> Result<load::Planned, Outcome>,
) -> Result<Prepared, Outcome> {
    let rules = load::rules(sources, inputs.rules)?;
    // Imported rules files are known only now; nothing has been written yet.
    check_outputs(&rules.files)?;
    let program = select(rules.program, inputs)?;
    require_host(&program)?;
    let estimator = estimator(sources, &program, inputs)?;
    let model = model(sources)?;
    Ok(Prepared {
        program,
        estimator,
        model,
    })
}

/// The targets of `inputs.targets`.
fn select(program: Program, inputs: &Inputs<'_>) -> Result<Program, Outcome> {
    match inputs.targets {
        Targets::Named(names) => select_targets(program, names),
        Targets::RunnableHere => {
            let probe = crate::runtime::backend::registry::Setup::new(
                &program.targets,
                inputs.measure.thread_count(),
                inputs.measure.resolved_dir(),
            );
            let names: Vec<String> = program
                .targets
                .iter()
                .filter(|t| !t.is_host && probe.availability(t).is_ok())
                .map(|t| t.name.clone())
                .collect();
            select_targets(program, &names)
        }
    }
}

/// Refuses target names the rules do not declare (E0956, a usage error).
pub fn check_target_names(program: &Program, names: &[String]) -> Result<(), Outcome> {
    for n in names {
        if program.target(n).is_none() {
            let known: Vec<&str> = program.targets.iter().map(|t| t.name.as_str()).collect();
            return Err(usage_error(
                diag::E0956,
                format!("no target named `{n}`; targets: {}", known.join(", ")),
            ));
        }
    }
    Ok(())
}

/// Keeps the named targets (and every host target); all of them when `names` is empty.
pub fn select_targets(program: Program, names: &[String]) -> Result<Program, Outcome> {
    if names.is_empty() {
        return Ok(program);
    }
    check_target_names(&program, names)?;
    let keep: Vec<bool> = program
        .targets
        .iter()
        .map(|t| t.is_host || names.contains(&t.name))
        .collect();
    let new_index: Vec<Option<usize>> = keep
        .iter()
        .scan(0, |n, &k| {
            let r = k.then_some(*n);
            *n += usize::from(k);
            Some(r)
        })
        .collect();
    let mut out = program.clone();
    out.targets = program
        .targets
        .into_iter()
        .zip(&keep)
        .filter(|(_, &k)| k)
        .map(|(mut t, _)| {
            t.refines = t.refines.and_then(|r| new_index[r]);
            t
        })
        .collect();
    Ok(out)
}

/// Refuses rules without a host target (E2106): parameters, constants, tuples and projections
/// need one.
pub fn require_host(program: &Program) -> Result<(), Outcome> {
    if program.targets.iter().any(|t| t.is_host) {
        return Ok(());
    }
    let names: Vec<&str> = program.targets.iter().map(|t| t.name.as_str()).collect();
    diag::emit_alone(
        Diagnostic::error(
            diag::E2106,
            format!(
                "the rules declare no host target{}",
                if names.is_empty() {
                    " (no targets at all)".to_string()
                } else {
                    format!(" (targets: {})", names.join(", "))
                }
            ),
        )
        .with_note(
            "parameters, constants, tuples and projections run on the host; declare one \
             with `target host { host = true; device = cpu; }`",
        ),
    );
    Err(Outcome::InputErrors)
}

/// Phase 3: opens the measuring estimator when the specification uses it (raising the
/// session's priority with `--raise-priority`), builds the chain of estimators, and warns of
/// targets the analytic estimator cannot price (W2107).
pub fn estimator(
    sources: &SourceMap,
    program: &Program,
    inputs: &Inputs<'_>,
) -> Result<Estimator, Outcome> {
    let measurer = measuring::open(inputs.measure, inputs.costs, &program.targets)?;
    let priority = measuring::raise_priority(inputs.measure);
    let opts = cost::SpecOptions {
        cmd_timeout: inputs.cmd_timeout,
        measure: measurer.clone().map(|m| m as Arc<dyn cost::Estimator>),
    };
    let chain = cost::from_spec(inputs.costs, &opts)
        .map_err(|e| usage_error(diag::E2104, format!("invalid `--costs`: {e}")))?;
    warn_unpriced(program, &chain, sources);
    Ok(Estimator {
        chain,
        measurer,
        _priority: priority,
    })
}

/// W2107 for each target that the analytic estimator will be asked to price but cannot: it has
/// no `cost { peak = ...; bandwidth = ...; }` block. Only estimators before `analytic` in the
/// chain could price its candidates.
fn warn_unpriced(program: &Program, estimator: &cost::Chain, sources: &SourceMap) {
    let names: Vec<String> = estimator.0.iter().map(|e| e.name()).collect();
    let Some(at) = names.iter().position(|n| n == "analytic") else {
        return;
    };
    let mut diags = Diagnostics::new();
    for t in program.targets.iter().filter(|t| !t.is_host) {
        if t.cost.peak_flops.is_some_and(|p| p > 0.0) && t.cost.bandwidth.is_some_and(|b| b > 0.0) {
            continue;
        }
        let mut d = Diagnostic::warning(
            diag::W2107,
            format!(
                "target `{}` has no cost block: the analytic estimator cannot price its candidates",
                t.name
            ),
        )
        .with_primary(
            t.span,
            "declared here without `cost { peak = ...; bandwidth = ...; }`",
        );
        d = if at == 0 {
            d.with_note(
                "its candidates are unusable unless another estimator comes first in `--costs`",
            )
        } else {
            d.with_note(format!(
                "only {} can price its candidates",
                names[..at].join(" or ")
            ))
        };
        diags.push(d.with_note(
            "add `cost { peak = ...; bandwidth = ...; }` to the target (docs/language.md)",
        ));
    }
    report(&diags, sources);
}

/// The dataflow graph of the model's `@main` (loaded models always have one).
pub fn graph(m: &Module) -> Result<DataflowGraph<'_>, Outcome> {
    let main = m.main().ok_or(Outcome::Internal)?;
    Ok(DataflowGraph::new(m, main))
}

/// Phase 4 on its own (`collage candidates`): the candidates of every target, or the
/// diagnostic of the enumeration limit reached (E2201-E2203).
pub fn enumerate(
    sources: &SourceMap,
    g: &DataflowGraph<'_>,
    program: &Program,
    limits: &Limits,
) -> Result<Enumeration, Outcome> {
    let e = crate::planning::enumerate::enumerate(g, program, limits).map_err(|e| {
        diag::emit_stderr(&diagnostics::limit_diagnostic(program, &e).into(), sources);
        Outcome::InputErrors
    })?;
    diagnostics::report_lowered(&e.lowered);
    Ok(e)
}

/// Phase 4: enumerates, prices and searches for the cheapest cover of `g` (with the baselines
/// `opts` asks for), within the planned devices. The measuring estimator's notes (W2403) are
/// reported; a failure is reported with its diagnostic (E2101-E2103, E2201-E2203).
pub fn search(
    sources: &SourceMap,
    prepared: &Prepared,
    g: &DataflowGraph<'_>,
    opts: &partition::Options,
    progress: &dyn Progress,
) -> Result<Plan, Outcome> {
    let devices = prepared.model.devices.as_deref();
    let plan = partition::partition_on_devices(
        g,
        &prepared.program,
        &prepared.estimator.chain,
        opts,
        progress,
        devices,
    );
    if let Some(m) = &prepared.estimator.measurer {
        progress.pause(&mut || measuring::report_notes(m));
    }
    if let Ok(p) = &plan {
        progress.pause(&mut || diagnostics::report_lowered(&p.lowered));
    }
    plan.map_err(|e| {
        progress.finish();
        let d = diagnostics::partition_error_on_devices(
            &prepared.model.module,
            g,
            &prepared.program,
            &e,
            devices,
        );
        diag::emit_stderr(&d.into(), sources);
        match e {
            PartitionError::Rewrite(_) => Outcome::Internal,
            _ => Outcome::InputErrors,
        }
    })
}

/// Phase 5: the partitioned program in TVM's encoding, checked to give the model back once the
/// partition functions are inlined, printed as `print` says (E2103, an internal error, when it
/// cannot be).
pub fn finalize(
    sources: &SourceMap,
    m: &Module,
    g: &DataflowGraph<'_>,
    program: &Program,
    plan: &Plan,
    print: crate::frontend::relay::print::PrintOptions,
    progress: &dyn Progress,
) -> Result<String, Outcome> {
    partition::rewrite(g, program, plan)
        .map_err(|e| match e {
            PartitionError::Rewrite(s) => s,
            _ => String::new(),
        })
        .and_then(|out| {
            let text = partition::finalize::check_round_trip(m, &out)?;
            Ok(if print.tvm_compat {
                crate::frontend::relay::print::print_module_with(&out, print)
            } else {
                text
            })
        })
        .map_err(|msg| {
            progress.finish();
            let d = Diagnostic::error(diag::E2103, format!("internal error: {msg}")).with_primary(
                m.func(g.graph.func).span,
                "while partitioning this function",
            );
            diag::emit_stderr(&d.into(), sources);
            Outcome::Internal
        })
}

/// Phase 5, `--explain`: why each of `bindings` is placed as it is; E2105 (a usage error) for a
/// binding no node of `@main` has.
pub fn explanations(
    m: &Module,
    g: &DataflowGraph<'_>,
    plan: &Plan,
    opts: &partition::Options,
    bindings: &[String],
    progress: &dyn Progress,
) -> Result<Vec<explain::Explanation>, Outcome> {
    let mut out = Vec::new();
    for b in bindings {
        match explain::explain(m, g, plan, opts, b) {
            Some(e) => out.push(e),
            None => {
                progress.finish();
                return Err(usage_error(
                    diag::E2105,
                    format!("`--explain {b}`: no node of @main is bound to `{b}`"),
                ));
            }
        }
    }
    Ok(out)
}
