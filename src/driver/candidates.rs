//! `collage candidates`: the candidate partitions of every target, as text or JSON.

use super::render::node_name;
use super::Outcome;
use crate::ir::Module;
use crate::pipeline;
use crate::planning::enumerate::{Candidate, DataflowGraph, Enumeration, Limits};
use crate::rules::ruletree::Program;
use crate::source::SourceMap;
use std::path::{Path, PathBuf};

/// `collage candidates MODEL [--rules PATH...] [--target NAME...] [--json]`.
pub fn candidates_command(
    model: &Path,
    model_options: &crate::pipeline::load::ModelOptions,
    rules: &[PathBuf],
    targets: &[String],
    limits: Limits,
    json: bool,
) -> Outcome {
    match candidates_inner(model, model_options, rules, targets, limits, json) {
        Ok(o) | Err(o) => o,
    }
}

fn candidates_inner(
    model: &Path,
    model_options: &crate::pipeline::load::ModelOptions,
    rules: &[PathBuf],
    targets: &[String],
    limits: Limits,
    json: bool,
) -> Result<Outcome, Outcome> {
    let mut sources = SourceMap::new();
    let program = pipeline::load::rules(&mut sources, rules)?.program;
    pipeline::check_target_names(&program, targets)?;
    let (m, main) = pipeline::load::model_with_main(&mut sources, model, model_options)?;
    let g = DataflowGraph::new(&m, main);
    let e = pipeline::enumerate(&sources, &g, &program, &limits)?;
    let keep =
        |ti: usize| targets.is_empty() || targets.iter().any(|t| *t == program.targets[ti].name);
    Ok(if json {
        let v = candidates_json(&m, &g, &program, &e, &keep);
        super::written(super::out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&v).unwrap_or_default()
        )))
    } else {
        super::written(super::out(&candidates_text(&m, &g, &program, &e, &keep)))
    })
}

fn nodes_text(
    m: &Module,
    g: &DataflowGraph<'_>,
    inside: &crate::analysis::dataflow::IndexSet,
) -> String {
    inside
        .iter()
        .map(|i| {
            match g
                .graph
                .op_name(m, crate::analysis::dataflow::NodeIdx(i as u32))
            {
                Some(op) => format!("{}:{op}", node_name(m, g, i)),
                None => format!("{}:{}", node_name(m, g, i), g.label[i]),
            }
        })
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
    sg: &crate::planning::enumerate::SubGraph,
) -> Vec<(
    &crate::planning::enumerate::SubGraph,
    &crate::planning::enumerate::subgraph::FnAttrs,
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
            "op": g.graph.op_name(m, crate::analysis::dataflow::NodeIdx(i as u32)),
            "binding": g.graph.binding(m, crate::analysis::dataflow::NodeIdx(i as u32)),
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
                        "fingerprint": crate::planning::enumerate::key::fingerprint(g, c, &t.name),
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
