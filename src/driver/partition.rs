//! `collage partition`: the whole pipeline, its report (table or JSON), the partitioned
//! program, a DOT picture and explanations.

use super::candidates::{load_rules_from, node_name};
use super::{load_model, Outcome};
use crate::cost::{self, Cost};
use crate::dataflow::NodeIdx;
use crate::diag::{self, Diagnostic};
use crate::enumerate::{DataflowGraph, Limits};
use crate::ir::Module;
use crate::partition::{self, Partition, PartitionError, Plan, Progress as _};
use crate::ruletree::Program;
use crate::source::SourceMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

/// Report formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A table for people.
    Table,
    /// JSON for programs.
    Json,
}

/// Everything `collage partition` is asked to do.
#[derive(Clone, Debug)]
pub struct Request {
    /// The model.
    pub model: PathBuf,
    /// Rules files or directories (empty: the shipped library).
    pub rules: Vec<PathBuf>,
    /// Only these targets (the host is always kept).
    pub targets: Vec<String>,
    /// The cost specification.
    pub costs: cost::Spec,
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
    pub print: crate::relay::print::PrintOptions,
    /// Where and how `--costs measure` measures.
    pub measure: super::measuring::MeasureArgs,
    /// Show progress on stderr even when it is not a terminal.
    pub progress: bool,
}

/// Runs `collage partition`.
pub fn partition_command(req: &Request) -> Outcome {
    let start = Instant::now();
    let bar = Bar::new(req.timings, req.progress);
    bar.phase("loading", 0);
    let mut sources = SourceMap::new();
    if let Err(o) = check_outputs(req, &[]) {
        return o;
    }
    let (program, rules_read) = match load_rules_from(&mut sources, &req.rules) {
        Ok(p) => p,
        Err(o) => return o,
    };
    // Imported rules files are known only now; nothing has been written yet.
    if let Err(o) = check_outputs(req, &rules_read) {
        return o;
    }
    let program = match select_targets(program, &req.targets) {
        Ok(p) => p,
        Err(o) => return o,
    };
    if !program.targets.iter().any(|t| t.is_host) {
        let names: Vec<&str> = program.targets.iter().map(|t| t.name.as_str()).collect();
        eprintln!(
            "error[{}]: the rules declare no host target{}",
            diag::E2106.id,
            if names.is_empty() {
                " (no targets at all)".to_string()
            } else {
                format!(" (targets: {})", names.join(", "))
            }
        );
        eprintln!(
            "  = note: parameters, constants, tuples and projections run on the host; declare one \
             with `target host {{ host = true; device = cpu; }}`"
        );
        return Outcome::InputErrors;
    }
    let measurer = match super::measuring::open(&req.measure, &req.costs, &program.targets) {
        Ok(m) => m,
        Err(o) => return o,
    };
    let _priority = super::measuring::raise_priority(&req.measure);
    let opts = cost::SpecOptions {
        cmd_timeout: req.cmd_timeout,
        measure: measurer
            .clone()
            .map(|m| m as std::sync::Arc<dyn cost::Estimator>),
    };
    let estimator = match cost::from_spec(&req.costs, &opts) {
        Ok(e) => e,
        Err(e) => return super::usage_error(diag::E2104, format!("invalid `--costs`: {e}")),
    };
    warn_unpriced(&program, &estimator, &sources);
    let (m, devices) = match load_planned(&mut sources, &req.model) {
        Ok(x) => x,
        Err(o) => return o,
    };
    let Some(main) = m.main() else {
        return Outcome::Internal;
    };
    let g = DataflowGraph::new(&m, main);
    let popts = partition::Options {
        limits: req.limits,
        search: crate::search::Options {
            lower_bound: req.lower_bound,
        },
        baselines: req.baselines,
        prune: req.prune,
    };
    bar.show();
    let plan =
        partition::partition_on_devices(&g, &program, &estimator, &popts, &bar, devices.as_deref());
    if let Some(m) = &measurer {
        bar.hide_for(|| super::measuring::report_notes(m));
    }
    let plan = match plan {
        Ok(p) => p,
        Err(e) => {
            bar.finish();
            let mut d = error_diagnostic(&m, &g, &program, &e);
            if let (Some(devices), PartitionError::Uncovered { node, .. }) = (&devices, &e) {
                if let Some(dev) = g.expr(*node).and_then(|x| devices.get(x.index())) {
                    if !dev.is_unconstrained() {
                        d = d.with_note(format!(
                            "its planned device is {dev}; only targets whose device refines it may run it"
                        ));
                    }
                }
            }
            diag::emit_stderr(&d.into(), &sources);
            return match e {
                PartitionError::Rewrite(_) => Outcome::Internal,
                _ => Outcome::InputErrors,
            };
        }
    };
    bar.phase("rewriting", 0);
    let text = match partition::rewrite(&g, &program, &plan)
        .map_err(|e| match e {
            PartitionError::Rewrite(s) => s,
            _ => String::new(),
        })
        .and_then(|out| {
            let text = partition::finalize::check_round_trip(&m, &out)?;
            Ok(if req.print.tvm_compat {
                crate::relay::print::print_module_with(&out, req.print)
            } else {
                text
            })
        }) {
        Ok(t) => t,
        Err(msg) => {
            bar.finish();
            let d = Diagnostic::error(diag::E2103, format!("internal error: {msg}"))
                .with_primary(m.func(main).span, "while partitioning this function");
            diag::emit_stderr(&d.into(), &sources);
            return Outcome::Internal;
        }
    };
    let mut explained = Vec::new();
    if !req.explain.is_empty() {
        bar.phase("explaining", 0);
    }
    for b in &req.explain {
        match explain(&m, &g, &program, &plan, &popts, b) {
            Some(e) => explained.push(e),
            None => {
                bar.finish();
                return super::usage_error(
                    diag::E2105,
                    format!("`--explain {b}`: no node of @main is bound to `{b}`"),
                );
            }
        }
    }
    bar.phase("writing", 0);
    bar.hide();
    let elapsed = start.elapsed().as_secs_f64() * 1e3;
    if let Some(path) = &req.output {
        if let Err(o) = super::write_output(path, &text) {
            return o;
        }
    }
    if let Some(path) = &req.dot {
        if let Err(o) = super::write_output(path, &dot(&m, &g, &program, &plan)) {
            return o;
        }
    }
    let printed = match req.format {
        Format::Json => {
            let mut v = report_json(&m, &g, &sources, &program, &plan, elapsed, &explained);
            if let Some(mm) = &measurer {
                v["stats"]["measure"] = super::measuring::summary_json(mm);
            }
            super::out(&format!(
                "{}\n",
                serde_json::to_string_pretty(&v).unwrap_or_default()
            ))
        }
        Format::Table => {
            let mut text = if req.output.is_none() {
                format!("{text}\n")
            } else {
                String::new()
            };
            text.push_str(&report_table(&m, &g, &sources, &program, &plan, elapsed));
            if let Some(mm) = &measurer {
                text.push_str(&format!("{}\n", super::measuring::summary_line(mm)));
            }
            for e in &explained {
                text.push_str(&format!("\n{}", e.text));
            }
            super::out(&text)
        }
    };
    super::written(printed)
}

/// Loads a model for partitioning: models with device annotations are planned first (with
/// nothing defaulted), and the planned module, with its copies, is what gets partitioned; the
/// planned device of every expression comes along.
pub(crate) fn load_planned(
    sources: &mut SourceMap,
    path: &std::path::Path,
) -> Result<(Module, Option<Vec<crate::ir::VirtualDevice>>), Outcome> {
    let m = load_model(sources, path)?;
    super::main_of(&m, path)?;
    if !crate::devices::has_annotations(&m) {
        return Ok((m, None));
    }
    match crate::devices::plan_devices(&m, &crate::ir::VirtualDevice::unconstrained()) {
        Ok(plan) => {
            let mut planned = plan.module;
            if let Err(d) = crate::typeck::check(&mut planned) {
                super::report(&d, sources);
                return Err(Outcome::Internal);
            }
            Ok((planned, Some(plan.devices)))
        }
        Err(d) => {
            super::report(&d, sources);
            Err(Outcome::InputErrors)
        }
    }
}

/// Refuses `-o`, `--dot` and `--cache` (when measuring) naming each other or an input (see
/// [`check_output_paths`]); `rules_read` are the rules files read once loaded, imports included.
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
    check_output_paths(&outputs, &req.model, &req.rules, rules_read, &req.costs)
}

/// Refuses outputs (a role such as `-o` with a path) naming each other, the model, a rules file
/// given on the command line (`rules`, directories expanded) or one of `rules_read`, or a file
/// the cost specification `costs` reads (`mock:`, `table:`): E0903, a usage error.
pub(crate) fn check_output_paths(
    outputs: &[(&str, &std::path::Path)],
    model: &std::path::Path,
    rules: &[PathBuf],
    rules_read: &[PathBuf],
    costs: &cost::Spec,
) -> Result<(), Outcome> {
    if outputs.is_empty() {
        return Ok(());
    }
    // Directories expand to their `.rules` files; a missing path is reported by the loader.
    let roots: Vec<PathBuf> = rules
        .iter()
        .flat_map(|p| match std::fs::read_dir(p) {
            Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(_) => vec![p.clone()],
        })
        .collect();
    let cost_files = costs.files();
    let mut inputs: Vec<(&str, &std::path::Path)> = vec![("the model", model)];
    inputs.extend(roots.iter().map(|r| ("a rules file", r.as_path())));
    inputs.extend(rules_read.iter().map(|r| ("a rules file", r.as_path())));
    inputs.extend(cost_files.iter().map(|f| ("a cost file", f.as_path())));
    super::output::check_collisions(outputs, &inputs).map_err(|msg| {
        eprintln!("error[{}]: {msg}", diag::E0903.id);
        Outcome::Usage
    })
}

/// W2107 for each target that the analytic estimator will be asked to price but cannot: it has
/// no `cost { peak = ...; bandwidth = ...; }` block. Only estimators before `analytic` in the
/// chain could price its candidates.
pub(crate) fn warn_unpriced(program: &Program, estimator: &cost::Chain, sources: &SourceMap) {
    let names: Vec<String> = estimator.0.iter().map(|e| e.name()).collect();
    let Some(at) = names.iter().position(|n| n == "analytic") else {
        return;
    };
    let mut diags = diag::Diagnostics::new();
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
    super::report(&diags, sources);
}

/// Keeps the named targets (and every host target).
pub(crate) fn select_targets(program: Program, names: &[String]) -> Result<Program, Outcome> {
    if names.is_empty() {
        return Ok(program);
    }
    for n in names {
        if program.target(n).is_none() {
            let known: Vec<&str> = program.targets.iter().map(|t| t.name.as_str()).collect();
            return Err(super::usage_error(
                diag::E0956,
                format!("no target named `{n}`; targets: {}", known.join(", ")),
            ));
        }
    }
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

/// The diagnostic of a partitioning failure.
pub(crate) fn error_diagnostic(
    m: &Module,
    g: &DataflowGraph<'_>,
    program: &Program,
    e: &PartitionError,
) -> Diagnostic {
    let span_of = |node: usize| {
        g.graph
            .span(m, NodeIdx(node as u32))
            .unwrap_or_else(|| m.func(g.graph.func).span)
    };
    let what = |node: usize| {
        let op = g.graph.op_name(m, NodeIdx(node as u32));
        let b = g.graph.binding(m, NodeIdx(node as u32));
        match (op, b) {
            (Some(op), Some(b)) => format!("`{op}` ({b})"),
            (Some(op), None) => format!("`{op}`"),
            (None, Some(b)) => format!("{b} ({})", g.label[node]),
            (None, None) => format!("`{}`", g.label[node]),
        }
    };
    let tried: Vec<&str> = program.targets.iter().map(|t| t.name.as_str()).collect();
    match e {
        PartitionError::Uncovered { node, unusable } => {
            let mut d =
                Diagnostic::error(diag::E2101, format!("no target can run {}", what(*node)))
                    .with_primary(span_of(*node), "no candidate partition covers this")
                    .with_note(format!("targets tried: {}", tried.join(", ")));
            if !unusable.is_empty() {
                let list: Vec<String> = unusable
                    .iter()
                    .map(|(t, c, _)| format!("{} ({c})", program.targets[*t].name))
                    .collect();
                d = d.with_note(format!(
                    "candidates covering it have unusable costs: {}",
                    list.join(", ")
                ));
            }
            // Why, as the estimators said, for the first few.
            const SHOWN: usize = 3;
            let reasons: Vec<(&usize, &Cost, &String)> = unusable
                .iter()
                .filter_map(|(t, c, why)| why.as_ref().map(|w| (t, c, w)))
                .collect();
            for (t, c, why) in reasons.iter().take(SHOWN) {
                d = d.with_note(format!("{} is {c}: {why}", program.targets[**t].name));
            }
            if reasons.len() > SHOWN {
                d = d.with_note(format!(
                    "... and {} more with reasons",
                    reasons.len() - SHOWN
                ));
            }
            d
        }
        PartitionError::NoCover { node, pruned } => {
            let d = Diagnostic::error(
                diag::E2102,
                format!(
                    "the candidates cannot cover the function without overlapping; none fits at {}",
                    what(*node)
                ),
            )
            .with_primary(span_of(*node), "every candidate here overlaps a chosen one")
            .with_note(format!("targets tried: {}", tried.join(", ")));
            if *pruned {
                d.with_note("`--prune` removed candidates; without it the search is exact")
            } else {
                d
            }
        }
        PartitionError::Limit(e) => super::candidates::limit_diagnostic(program, e),
        PartitionError::Rewrite(msg) => Diagnostic::error(
            diag::E2103,
            format!("internal error: rewriting failed: {msg}"),
        )
        .with_primary(
            m.func(g.graph.func).span,
            "while partitioning this function",
        ),
    }
}

/// The operator calls of a partition: (node, operator name).
fn op_nodes<'a>(
    m: &'a Module,
    g: &'a DataflowGraph<'_>,
    p: &'a Partition,
) -> Vec<(usize, &'a str)> {
    p.sub_graph
        .inside
        .iter()
        .filter_map(|i| g.graph.op_name(m, NodeIdx(i as u32)).map(|op| (i, op)))
        .filter(|&(i, _)| g.must_lower[i])
        .collect()
}

/// First and last source line of a partition's operator calls.
fn lines(
    m: &Module,
    g: &DataflowGraph<'_>,
    sources: &SourceMap,
    p: &Partition,
) -> Option<(usize, usize)> {
    let mut out: Option<(usize, usize)> = None;
    for (i, _) in op_nodes(m, g, p) {
        if let Some(s) = g.graph.span(m, NodeIdx(i as u32)) {
            let l = sources.line_of(s);
            out = Some(out.map_or((l, l), |(a, b)| (a.min(l), b.max(l))));
        }
    }
    out
}

/// `cuda:0`, `cpu:0`, `cuda`, or `-` when unconstrained.
fn short_device(d: &crate::ir::VirtualDevice) -> String {
    let kind = d.device_type.map(|c| {
        crate::ir::device::device_type_name(c).map_or_else(|| c.to_string(), str::to_string)
    });
    match (kind, d.virtual_device_id) {
        (Some(k), Some(id)) => format!("{k}:{id}"),
        (Some(k), None) => k,
        (None, _) => "-".into(),
    }
}

fn fmt_cost(s: f64) -> String {
    Cost::value(s).to_string()
}

/// The table report.
pub fn report_table(
    m: &Module,
    g: &DataflowGraph<'_>,
    sources: &SourceMap,
    program: &Program,
    plan: &Plan,
    elapsed_ms: f64,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "partitions of @main:");
    let name_w = plan
        .partitions
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(4)
        .max(9);
    let target_w = plan
        .partitions
        .iter()
        .map(|p| program.targets[p.target].name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let _ = writeln!(
        out,
        "  {:name_w$}  {:target_w$}  {:7}  {:>16}  {:>9}  operators",
        "partition", "target", "device", "cost", "lines"
    );
    for p in &plan.partitions {
        let ops = op_nodes(m, g, p);
        let ops_text = if program.targets[p.target].is_host {
            format!("({} nodes without kernels)", p.sub_graph.inside.count())
        } else {
            let list: Vec<String> = ops
                .iter()
                .map(|&(i, op)| format!("{} {op}", node_name(m, g, i)))
                .collect();
            list.join(", ")
        };
        let lines_text = match lines(m, g, sources, p) {
            Some((a, b)) if a == b => a.to_string(),
            Some((a, b)) => format!("{a}-{b}"),
            None => "-".into(),
        };
        let _ = writeln!(
            out,
            "  {:name_w$}  {:target_w$}  {:7}  {:>16}  {:>9}  {ops_text}",
            p.name,
            program.targets[p.target].name,
            short_device(&program.targets[p.target].device),
            fmt_cost(p.cost),
            lines_text
        );
    }
    let _ = writeln!(out, "total: {}", fmt_cost(plan.total));
    if !plan.baselines.is_empty() {
        let _ = writeln!(out, "baselines:");
        let w = plan
            .baselines
            .iter()
            .map(|b| b.name.len())
            .max()
            .unwrap_or(4);
        for b in &plan.baselines {
            let desc = match b.name.split_once(':') {
                Some(("greedy", t)) => format!("greedy {t} regions, native and host elsewhere"),
                _ if b.name == "tvm" => "native targets and host only".to_string(),
                _ => format!("{} with the native targets and host", b.name),
            };
            match b.cost {
                Some(c) => {
                    let _ = writeln!(
                        out,
                        "  {:w$}  {:>16}  {:>7}  {desc}",
                        b.name,
                        fmt_cost(c),
                        speedup(c, plan.total)
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "  {:w$}  {:>16}  {:>7}  {desc}",
                        b.name, "no cover", ""
                    );
                }
            }
        }
    }
    let _ = writeln!(
        out,
        "stats: {} candidates, {} estimates, {} states expanded, {:.1} ms",
        plan.stats.candidates, plan.stats.estimates, plan.stats.states_expanded, elapsed_ms
    );
    out
}

/// `x1.23`: how much slower the baseline is than the result.
fn speedup(baseline: f64, total: f64) -> String {
    if total > 0.0 {
        format!("x{:.2}", baseline / total)
    } else {
        String::new()
    }
}

/// The JSON report (the schema in the README's command table and docs/partition.md, "Report",
/// with `lines`, `targets` and explanations).
pub fn report_json(
    m: &Module,
    g: &DataflowGraph<'_>,
    sources: &SourceMap,
    program: &Program,
    plan: &Plan,
    elapsed_ms: f64,
    explained: &[Explanation],
) -> serde_json::Value {
    use serde_json::json;
    let partitions: Vec<serde_json::Value> = plan
        .partitions
        .iter()
        .map(|p| {
            let t = &program.targets[p.target];
            let nodes: Vec<serde_json::Value> = p
                .sub_graph
                .inside
                .iter()
                .map(|i| {
                    json!({
                        "index": i,
                        "op": g.graph.op_name(m, NodeIdx(i as u32)),
                        "binding": g.graph.binding(m, NodeIdx(i as u32)),
                    })
                })
                .collect();
            let composites: Vec<serde_json::Value> = p
                .sub_graph
                .composites()
                .into_iter()
                .map(|(label, sub)| json!({"label": label, "nodes": sub.inside.iter().collect::<Vec<_>>()}))
                .collect();
            json!({
                "name": p.name,
                "target": t.name,
                "compiler": t.compiler,
                "device": t.device.to_string(),
                "cost": p.cost,
                "depth": p.sub_graph.depth,
                "lines": lines(m, g, sources, p).map(|(a, b)| vec![a, b]),
                "nodes": nodes,
                "composites": composites,
            })
        })
        .collect();
    let baselines: serde_json::Map<String, serde_json::Value> = plan
        .baselines
        .iter()
        .map(|b| (b.name.clone(), json!(b.cost)))
        .collect();
    let mut out = json!({
        "functions": [{
            "name": "main",
            "total_cost": plan.total,
            "partitions": partitions,
            "baselines": baselines,
        }],
        "stats": {
            "candidates": plan.stats.candidates,
            "estimates": plan.stats.estimates,
            "states_expanded": plan.stats.states_expanded,
            "elapsed_ms": elapsed_ms,
        },
    });
    if !explained.is_empty() {
        out["explain"] =
            serde_json::Value::Array(explained.iter().map(|e| e.json.clone()).collect());
    }
    out
}

/// An explanation of one node's placement.
pub struct Explanation {
    /// For the table report.
    pub text: String,
    /// For the JSON report.
    pub json: serde_json::Value,
}

/// How many alternatives `--explain` prices with a forced search.
const EXPLAIN_ALTERNATIVES: usize = 12;

/// Which candidates covered the node bound to `binding`, and why the chosen one won: for the
/// cheapest alternatives, the best total cost when that alternative is forced.
fn explain(
    m: &Module,
    g: &DataflowGraph<'_>,
    program: &Program,
    plan: &Plan,
    opts: &partition::Options,
    binding: &str,
) -> Option<Explanation> {
    let want = if binding.starts_with('%') {
        binding.to_string()
    } else {
        format!("%{binding}")
    };
    let node =
        (0..g.len()).find(|&i| g.graph.binding(m, NodeIdx(i as u32)).as_deref() == Some(&want))?;
    let chosen = plan
        .chosen
        .iter()
        .copied()
        .find(|&k| plan.candidates[k].sub_graph.inside.contains(node));
    let mut covering: Vec<usize> = (0..plan.candidates.len())
        .filter(|&k| plan.candidates[k].sub_graph.inside.contains(node))
        .collect();
    covering.sort_by(|&a, &b| plan.cost_of(a).total_cmp(&plan.cost_of(b)).then(a.cmp(&b)));
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{want} ({}) is covered by {} candidates; the best cover costs {}.",
        g.label[node],
        covering.len(),
        fmt_cost(plan.total)
    );
    let alternatives: Vec<usize> = covering
        .iter()
        .take(EXPLAIN_ALTERNATIVES)
        .copied()
        .filter(|&k| Some(k) != chosen)
        .collect();
    let best_alternative = partition::best_with(g, plan, &alternatives, opts);
    let mut rows = Vec::new();
    for (n, &k) in covering.iter().enumerate() {
        let c = &plan.candidates[k];
        let is_chosen = Some(k) == chosen;
        let best = if is_chosen {
            Some(plan.total)
        } else if n < EXPLAIN_ALTERNATIVES {
            alternatives
                .iter()
                .position(|&a| a == k)
                .and_then(|p| best_alternative[p])
        } else {
            None
        };
        let nodes: Vec<String> = c
            .sub_graph
            .inside
            .iter()
            .filter(|&i| g.must_lower[i])
            .map(|i| node_name(m, g, i))
            .collect();
        let verdict = if is_chosen {
            "chosen".to_string()
        } else if !plan.costs[k].is_known() {
            format!("not usable: cost {}", plan.costs[k])
        } else if n >= EXPLAIN_ALTERNATIVES {
            "not priced further".to_string()
        } else {
            match best {
                Some(b) => format!(
                    "best cover with it: {} (+{})",
                    fmt_cost(b),
                    fmt_cost((b - plan.total).max(0.0))
                ),
                None => "no cover contains it".to_string(),
            }
        };
        let _ = writeln!(
            text,
            "  {:>16}  {:10} {}  [{}]  {verdict}",
            if plan.costs[k].is_known() {
                fmt_cost(plan.cost_of(k))
            } else {
                plan.costs[k].to_string()
            },
            program.targets[c.target].name,
            c.rule_name,
            nodes.join(" ")
        );
        rows.push(serde_json::json!({
            "target": program.targets[c.target].name,
            "rule": c.rule_name,
            "nodes": c.sub_graph.inside.iter().collect::<Vec<_>>(),
            "cost": plan.costs[k].is_known().then(|| plan.cost_of(k)),
            "chosen": is_chosen,
            "best_total_with_it": best,
        }));
    }
    Some(Explanation {
        text,
        json: serde_json::json!({"binding": want, "node": node, "candidates": rows}),
    })
}

/// The partitioning as a DOT graph: one cluster per partition, coloured by target.
pub fn dot(m: &Module, g: &DataflowGraph<'_>, program: &Program, plan: &Plan) -> String {
    const COLORS: [&str; 8] = [
        "#8dd3c7", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5", "#bebada", "#ffffb3",
    ];
    let mut out = String::from("digraph partitioning {\n  rankdir=TB;\n  node [shape=box, style=filled, fontname=\"monospace\"];\n");
    let shown = |i: usize| {
        g.expr(i).is_some_and(|e| {
            !matches!(m.expr(e), crate::ir::Expr::Op(_) | crate::ir::Expr::Func(_))
        })
    };
    for (k, p) in plan.partitions.iter().enumerate() {
        let t = &program.targets[p.target];
        let color = if t.is_host {
            "#eeeeee"
        } else {
            COLORS[p.target % COLORS.len()]
        };
        let _ = writeln!(
            out,
            "  subgraph cluster_{k} {{\n    label=\"{} [{}] {}\";\n    style=filled; fillcolor=\"{color}40\";",
            p.name,
            t.name,
            fmt_cost(p.cost)
        );
        for i in p.sub_graph.inside.iter().filter(|&i| shown(i)) {
            let label = match g.graph.op_name(m, NodeIdx(i as u32)) {
                Some(op) => format!("{} {op}", node_name(m, g, i)),
                None => format!("{} {}", node_name(m, g, i), g.label[i]),
            };
            let _ = writeln!(
                out,
                "    n{i} [label=\"{}\", fillcolor=\"{color}\"];",
                label.replace('"', "\\\"")
            );
        }
        out.push_str("  }\n");
    }
    for i in (0..g.len()).filter(|&i| shown(i)) {
        for o in g.outputs(i) {
            if shown(o.index()) {
                let _ = writeln!(out, "  n{i} -> n{};", o.index());
            }
        }
    }
    out.push_str("}\n");
    out
}

/// The plain progress lines' state: the phase, when it began, when the last line was printed.
type Lines = (String, Instant, Option<Instant>);

/// A progress bar on stderr, shown (between [`Bar::show`] and [`Bar::hide`]) when stderr is a
/// terminal; with `--progress` on another stderr, a line every few seconds instead. With
/// `--timings`, the wall time of each phase on stderr as well.
pub(crate) struct Bar {
    bar: std::cell::RefCell<Option<indicatif::ProgressBar>>,
    /// With `--timings`: the current phase and when it began.
    timing: Option<std::cell::RefCell<Option<(String, Instant)>>>,
    /// `--progress` on a stderr that is not a terminal: (phase, its start, last line printed).
    lines_cell: std::cell::OnceCell<std::cell::RefCell<Lines>>,
    /// Progress is wanted even when stderr is not a terminal.
    forced: bool,
}

impl Bar {
    pub(crate) fn new(timings: bool, forced: bool) -> Bar {
        Bar {
            bar: Default::default(),
            timing: timings.then(Default::default),
            lines_cell: std::cell::OnceCell::new(),
            forced,
        }
    }

    /// Shows the bar, if stderr is a terminal (or lines, when forced).
    pub(crate) fn show(&self) {
        use std::io::IsTerminal;
        if !std::io::stderr().is_terminal() {
            if self.forced {
                let _ = self.lines_cell.set(std::cell::RefCell::new((
                    String::new(),
                    Instant::now(),
                    None,
                )));
            }
            return;
        }
        let b = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg:24} [{bar:30}] {pos}/{len} {elapsed_precise} (ETA {eta})",
        ) {
            b.set_style(style);
        }
        *self.bar.borrow_mut() = Some(b);
    }

    /// Clears the bar from the terminal (before output or diagnostics); timing goes on.
    pub(crate) fn hide(&self) {
        if let Some(b) = self.bar.borrow_mut().take() {
            b.finish_and_clear();
        }
    }

    /// Runs `f` (which prints to stderr) with the bar out of the way.
    pub(crate) fn hide_for(&self, f: impl FnOnce()) {
        match &*self.bar.borrow() {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    /// Ends the current phase: prints its time (with `--timings`) and starts `next`, if any.
    fn end_phase(&self, next: Option<&str>) {
        let Some(cell) = &self.timing else {
            return;
        };
        let mut current = cell.borrow_mut();
        if let Some((name, began)) = current.take() {
            let line = format!(
                "timing: {name:<24} {:>9.1} ms",
                began.elapsed().as_secs_f64() * 1e3
            );
            match &*self.bar.borrow() {
                Some(b) => b.println(line),
                None => eprintln!("{line}"),
            }
        }
        *current = next.map(|n| (n.to_string(), Instant::now()));
    }

    /// Clears the bar and ends the current phase.
    pub(crate) fn finish(&self) {
        self.hide();
        self.end_phase(None);
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.finish();
    }
}

impl partition::Progress for Bar {
    fn phase(&self, name: &str, total: usize) {
        self.end_phase(Some(name));
        if let Some(b) = &*self.bar.borrow() {
            b.set_message(name.to_string());
            b.set_length(total as u64);
            b.set_position(0);
            b.reset_eta();
        }
        if let Some(cell) = self.lines_cell.get() {
            let mut l = cell.borrow_mut();
            *l = (name.to_string(), Instant::now(), None);
        }
    }

    fn step(&self, done: usize) {
        if let Some(b) = &*self.bar.borrow() {
            b.set_position(done as u64);
        }
    }

    fn steps(&self, done: usize, total: usize) {
        if let Some(b) = &*self.bar.borrow() {
            if b.length() != Some(total as u64) {
                b.set_length(total as u64);
                b.reset_eta();
            }
            b.set_position(done as u64);
        }
        if let Some(cell) = self.lines_cell.get() {
            let mut l = cell.borrow_mut();
            let now = Instant::now();
            let due =
                l.2.is_none_or(|t| now.duration_since(t).as_secs_f64() >= 5.0);
            if total > 0 && (due || done == total) {
                let spent = now.duration_since(l.1).as_secs_f64();
                let eta = if done > 0 && done < total {
                    format!(
                        ", about {:.0} s left",
                        spent / done as f64 * (total - done) as f64
                    )
                } else {
                    String::new()
                };
                eprintln!("progress: {} {done}/{total} after {spent:.0} s{eta}", l.0);
                l.2 = Some(now);
            }
        }
    }
}
