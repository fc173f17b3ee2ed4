//! `collage candidates`: the candidate partitions of every target, as text or JSON.

use super::{load_model, report, rules_files, Outcome};
use crate::diag::{self, Diagnostic};
use crate::enumerate::{Bound, Candidate, DataflowGraph, Enumeration, Grower, LimitError, Limits};
use crate::ir::Module;
use crate::ruletree::Program;
use crate::sema::{self, Provider};
use crate::source::SourceMap;
use std::path::{Path, PathBuf};

/// Loads rules: the given files and directories, or the embedded library when there are none.
pub fn load_rules(sources: &mut SourceMap, paths: &[PathBuf]) -> Result<Program, Outcome> {
    load_rules_from(sources, paths).map(|(p, _)| p)
}

/// [`load_rules`], also returning the files read from disk (canonical paths, imports included).
pub fn load_rules_from(
    sources: &mut SourceMap,
    paths: &[PathBuf],
) -> Result<(Program, Vec<PathBuf>), Outcome> {
    let checked = if paths.is_empty() {
        sema::check(
            sources,
            &Provider::Embedded(crate::library::LIBRARY),
            &crate::library::roots(),
        )
    } else {
        let roots = rules_files(paths)?;
        sema::check(sources, &Provider::Files, &roots)
    };
    report(&checked.diags, sources);
    match checked.program {
        Some(p) => Ok((p, checked.disk_files)),
        None => Err(Outcome::InputErrors),
    }
}

/// `collage candidates MODEL [--rules PATH...] [--target NAME...] [--json]`.
pub fn candidates_command(
    model: &Path,
    rules: &[PathBuf],
    targets: &[String],
    limits: Limits,
    json: bool,
) -> Outcome {
    let mut sources = SourceMap::new();
    let program = match load_rules(&mut sources, rules) {
        Ok(p) => p,
        Err(o) => return o,
    };
    for t in targets {
        if program.target(t).is_none() {
            let known: Vec<&str> = program.targets.iter().map(|t| t.name.as_str()).collect();
            return super::usage_error(
                crate::diag::E0956,
                format!("no target named `{t}`; targets: {}", known.join(", ")),
            );
        }
    }
    let m = match load_model(&mut sources, model) {
        Ok(m) => m,
        Err(o) => return o,
    };
    let main = match super::main_of(&m, model) {
        Ok(f) => f,
        Err(o) => return o,
    };
    let g = DataflowGraph::new(&m, main);
    let e = match crate::enumerate::enumerate(&g, &program, &limits) {
        Ok(e) => e,
        Err(e) => {
            diag::emit_stderr(&limit_diagnostic(&program, &e).into(), &sources);
            return Outcome::InputErrors;
        }
    };
    let keep =
        |ti: usize| targets.is_empty() || targets.iter().any(|t| *t == program.targets[ti].name);
    if json {
        let v = candidates_json(&m, &g, &program, &e, &keep);
        super::written(super::out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&v).unwrap_or_default()
        )))
    } else {
        super::written(super::out(&candidates_text(&m, &g, &program, &e, &keep)))
    }
}

/// How a node is named in listings: its `%name` in the source, else `#index`.
pub(super) fn node_name(m: &Module, g: &DataflowGraph<'_>, i: usize) -> String {
    g.graph
        .binding(m, crate::dataflow::NodeIdx(i as u32))
        .unwrap_or_else(|| format!("#{i}"))
}

fn nodes_text(m: &Module, g: &DataflowGraph<'_>, inside: &crate::dataflow::IndexSet) -> String {
    inside
        .iter()
        .map(
            |i| match g.graph.op_name(m, crate::dataflow::NodeIdx(i as u32)) {
                Some(op) => format!("{}:{op}", node_name(m, g, i)),
                None => format!("{}:{}", node_name(m, g, i), g.label[i]),
            },
        )
        .collect::<Vec<_>>()
        .join(" ")
}

/// The listing: one block per target, one line per candidate, composites indented below.
pub fn candidates_text(
    m: &Module,
    g: &DataflowGraph<'_>,
    program: &Program,
    e: &Enumeration,
    keep: &dyn Fn(usize) -> bool,
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for (ti, t) in program.targets.iter().enumerate() {
        if !keep(ti) {
            continue;
        }
        let cands: Vec<&Candidate> = e.candidates.iter().filter(|c| c.target == ti).collect();
        let _ = writeln!(out, "target {} ({} candidates)", t.name, cands.len());
        for c in cands {
            let sg = &c.sub_graph;
            let _ = writeln!(
                out,
                "  {} [{}] depth {}: {}  ({})",
                sg.inside,
                sg.kind.letter(),
                sg.depth,
                nodes_text(m, g, &sg.inside),
                c.rule_name
            );
            for (n, attrs) in nested_leaves(sg) {
                let label = attrs
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let _ = writeln!(out, "    {} {}", n.inside, label);
            }
        }
    }
    out
}

/// The composites (innermost nested sub-graphs with a `Composite` attribute) of a sub-graph.
fn nested_leaves(
    sg: &crate::enumerate::SubGraph,
) -> Vec<(
    &crate::enumerate::SubGraph,
    &crate::enumerate::subgraph::FnAttrs,
)> {
    let mut out = Vec::new();
    let mut stack = vec![sg];
    while let Some(s) = stack.pop() {
        for (n, attrs) in &s.nested {
            if attrs.iter().any(|(k, _)| k == "Composite") {
                out.push((n, attrs));
            } else {
                stack.push(n);
            }
        }
    }
    out.sort_by(|a, b| a.0.order(b.0));
    out
}

/// The JSON form: `{"function", "egraph": {...}, "targets": [{"name", "candidates": [...]}]}`.
pub fn candidates_json(
    m: &Module,
    g: &DataflowGraph<'_>,
    program: &Program,
    e: &Enumeration,
    keep: &dyn Fn(usize) -> bool,
) -> serde_json::Value {
    let node = |i: usize| {
        serde_json::json!({
            "index": i,
            "op": g.graph.op_name(m, crate::dataflow::NodeIdx(i as u32)),
            "binding": g.graph.binding(m, crate::dataflow::NodeIdx(i as u32)),
        })
    };
    let targets: Vec<serde_json::Value> = program
        .targets
        .iter()
        .enumerate()
        .filter(|(ti, _)| keep(*ti))
        .map(|(ti, t)| {
            let cands: Vec<serde_json::Value> = e
                .candidates
                .iter()
                .filter(|c| c.target == ti)
                .map(|c| {
                    let sg = &c.sub_graph;
                    let composites: Vec<serde_json::Value> = nested_leaves(sg)
                        .into_iter()
                        .map(|(n, attrs)| {
                            let label = attrs
                                .iter()
                                .find(|(k, _)| k == "Composite")
                                .and_then(|(_, v)| v.as_str().map(str::to_string));
                            serde_json::json!({"label": label, "nodes": n.inside.iter().collect::<Vec<_>>()})
                        })
                        .collect();
                    serde_json::json!({
                        "nodes": sg.inside.iter().map(node).collect::<Vec<_>>(),
                        "kind": sg.kind.name(),
                        "label": sg.label,
                        "depth": sg.depth,
                        "rule": c.rule_name,
                        "fingerprint": crate::enumerate::key::fingerprint(g, c, &t.name),
                        "composites": composites,
                    })
                })
                .collect();
            serde_json::json!({
                "name": t.name,
                "compiler": t.compiler,
                "device": t.device.to_string(),
                "candidates": cands,
            })
        })
        .collect();
    serde_json::json!({
        "function": "main",
        "egraph": {
            "nodes": e.egraph_size.0,
            "classes": e.egraph_size.1,
            "rounds": e.egraph_rounds,
        },
        "targets": targets,
    })
}

/// The diagnostic of an enumeration limit (E2201, E2202, E2203): what grew, where it is declared,
/// the limit, and the flag that raises it.
pub fn limit_diagnostic(program: &Program, e: &LimitError) -> Diagnostic {
    let defaults = Limits::default();
    match e {
        LimitError::EGraph {
            bound,
            grower,
            limit,
        } => {
            let (what, span) = match *grower {
                Grower::Commutativity => (
                    "the built-in commutativity of `add` and `multiply`".to_string(),
                    None,
                ),
                Grower::Equivalence(i) => (
                    "this equivalence".to_string(),
                    program.equivalence_spans.get(i).copied(),
                ),
                Grower::Rewrite(i) => (
                    "this rewrite".to_string(),
                    program.rewrite_spans.get(i).copied(),
                ),
            };
            let (code, message, label, default) = match bound {
                Bound::EGraphIters => (
                    diag::E2202,
                    format!(
                        "the equivalences still change the e-graph after {limit} round{} \
                         (`--max-egraph-iters`)",
                        if *limit == 1 { "" } else { "s" }
                    ),
                    format!("{what} still grew the e-graph in the last round"),
                    defaults.max_egraph_iters,
                ),
                Bound::ENodeWork { steps } => (
                    diag::E2201,
                    format!(
                        "matching the equivalences of the rules built more than {steps} partial \
                         matches in one round ({} per e-node and per unit of `--max-enodes` \
                         {limit})",
                        crate::enumerate::MATCH_WORK
                    ),
                    format!("{what} has too many matches"),
                    defaults.max_enodes,
                ),
                _ => (
                    diag::E2201,
                    format!(
                        "applying the equivalences of the rules added more than {limit} e-nodes \
                         to the e-graph (`--max-enodes`)"
                    ),
                    format!("{what} keeps adding e-nodes"),
                    defaults.max_enodes,
                ),
            };
            let mut d = Diagnostic::error(code, message);
            match span {
                Some(s) => d = d.with_primary(s, label),
                None => d = d.with_note(format!("what grew: {what}")),
            }
            d.with_note(format!(
                "raise the limit with `{} N` (default {default}), or remove the equivalence \
                 that grows without end (associativity, a rewrite whose right side matches \
                 its left side again)",
                e.flag()
            ))
        }
        LimitError::Target {
            bound,
            target,
            rule,
            limit,
        } => {
            let t = &program.targets[*target];
            let message = match bound {
                Bound::PairWork { steps } => format!(
                    "combining the candidates of target `{}` visited more than {steps} pairs \
                     ({} × `--max-candidates` {limit})",
                    t.name,
                    crate::enumerate::PAIR_WORK
                ),
                Bound::MatchWork { steps } => format!(
                    "matching a pattern of target `{}` built more than {steps} partial matches \
                     ({} per e-node and per unit of `--max-candidates` {limit})",
                    t.name,
                    crate::enumerate::MATCH_WORK
                ),
                _ => format!(
                    "target `{}` has more than {limit} candidates (`--max-candidates`)",
                    t.name
                ),
            };
            let mut d = Diagnostic::error(diag::E2203, message);
            let label = "its rules grow past the candidate limit";
            d = d.with_primary(t.span, label);
            let depth = match (t.max_depth, &t.compiler) {
                (Some(_), _) => "the target's `max_depth`",
                (None, Some(_)) => "`--byoc-max-depth`",
                (None, None) => "`--tvm-max-depth`",
            };
            let remedy = match bound {
                Bound::MatchWork { .. } => {
                    "simplify the pattern (fewer alternatives and optional parts)".to_string()
                }
                _ => format!(
                    "make the rule produce fewer candidates (a lower depth limit: {depth}; \
                     fewer combiners)"
                ),
            };
            d.with_note(format!("the rule that grew: `{rule}`"))
                .with_note(format!(
                    "raise the limit with `--max-candidates N` (default {}), or {remedy}",
                    defaults.max_candidates
                ))
        }
    }
}
