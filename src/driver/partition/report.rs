//! The reports of `collage partition`: the table, the JSON, the DOT picture and the
//! explanations of `--explain`.

use crate::analysis::dataflow::NodeIdx;
use crate::driver::render::{fmt_cost, node_name};
use crate::ir::Module;
use crate::pipeline::explain::Explanation;
use crate::planning::enumerate::DataflowGraph;
use crate::planning::partition::{Partition, Plan};
use crate::rules::ruletree::Program;
use crate::source::SourceMap;
use std::fmt::Write as _;

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

/// The ONNX node an operator node came from, for an imported model.
fn onnx_node<'s>(
    m: &Module,
    g: &DataflowGraph<'_>,
    sources: &'s SourceMap,
    i: usize,
) -> Option<&'s crate::source::ListedNode> {
    g.graph
        .span(m, NodeIdx(i as u32))
        .and_then(|s| sources.listed_node(s))
}

/// Whether the model is an imported one whose spans point into a node listing: its reports
/// name ONNX nodes (by position in the file) where a text model's name lines.
fn is_listing(sources: &SourceMap) -> bool {
    sources.files().any(|(_, f)| !f.nodes.is_empty())
}

/// The lowest and highest ONNX node position among a partition's operator calls.
fn onnx_range(
    m: &Module,
    g: &DataflowGraph<'_>,
    sources: &SourceMap,
    p: &Partition,
) -> Option<(usize, usize)> {
    op_nodes(m, g, p)
        .iter()
        .filter_map(|&(i, _)| onnx_node(m, g, sources, i).map(|n| n.index))
        .fold(None, |acc, k| {
            Some(acc.map_or((k, k), |(a, b): (usize, usize)| (a.min(k), b.max(k))))
        })
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
    let listing = is_listing(sources);
    let _ = writeln!(
        out,
        "  {:name_w$}  {:target_w$}  {:7}  {:>16}  {:>9}  operators",
        "partition",
        "target",
        "device",
        "cost",
        if listing { "nodes" } else { "lines" }
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
        let range = if listing {
            onnx_range(m, g, sources, p).map(|(a, b)| (format!("#{a}"), format!("#{b}")))
        } else {
            lines(m, g, sources, p).map(|(a, b)| (a.to_string(), b.to_string()))
        };
        let lines_text = match range {
            Some((a, b)) if a == b => a,
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
    explained: &[serde_json::Value],
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
                    let mut v = json!({
                        "index": i,
                        "op": g.graph.op_name(m, NodeIdx(i as u32)),
                        "binding": g.graph.binding(m, NodeIdx(i as u32)),
                    });
                    if let Some(n) = onnx_node(m, g, sources, i) {
                        v["onnx_node"] = listed_json(n);
                    }
                    v
                })
                .collect();
            let composites: Vec<serde_json::Value> = p
                .sub_graph
                .composites()
                .into_iter()
                .map(|(label, sub)| json!({"label": label, "nodes": sub.inside.iter().collect::<Vec<_>>()}))
                .collect();
            let mut v = json!({
                "name": p.name,
                "target": t.name,
                "compiler": t.compiler,
                "device": t.device.to_string(),
                "cost": p.cost,
                "depth": p.sub_graph.depth,
                "lines": lines(m, g, sources, p).map(|(a, b)| vec![a, b]),
                "nodes": nodes,
                "composites": composites,
            });
            if let Some((a, b)) = onnx_range(m, g, sources, p) {
                v["onnx_nodes"] = json!([a, b]);
            }
            v
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
        out["explain"] = serde_json::Value::Array(explained.to_vec());
    }
    out
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

/// An explanation for the table report.
pub fn explanation_text(
    m: &Module,
    g: &DataflowGraph<'_>,
    sources: &SourceMap,
    program: &Program,
    plan: &Plan,
    e: &Explanation,
) -> String {
    let mut text = String::new();
    let origin = match onnx_node(m, g, sources, e.node) {
        Some(n) if n.name.is_empty() => format!(", ONNX node #{} {}", n.index, n.op_type),
        Some(n) => format!(", ONNX node #{} `{}` {}", n.index, n.name, n.op_type),
        None => String::new(),
    };
    let _ = writeln!(
        text,
        "{} ({}{origin}) is covered by {} candidates; the best cover costs {}.",
        e.binding,
        g.label[e.node],
        e.covering.len(),
        fmt_cost(plan.total)
    );
    for c in &e.covering {
        let k = c.candidate;
        let cand = &plan.candidates[k];
        let nodes: Vec<String> = cand
            .sub_graph
            .inside
            .iter()
            .filter(|&i| g.must_lower[i])
            .map(|i| node_name(m, g, i))
            .collect();
        let verdict = if c.chosen {
            "chosen".to_string()
        } else if !plan.costs[k].is_known() {
            format!("not usable: cost {}", plan.costs[k])
        } else if !c.priced {
            "not priced further".to_string()
        } else {
            match c.best {
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
            program.targets[cand.target].name,
            cand.rule_name,
            nodes.join(" ")
        );
    }
    text
}

/// An explanation for the JSON report.
pub fn explanation_json(
    m: &Module,
    g: &DataflowGraph<'_>,
    sources: &SourceMap,
    program: &Program,
    plan: &Plan,
    e: &Explanation,
) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = e
        .covering
        .iter()
        .map(|c| {
            let k = c.candidate;
            let cand = &plan.candidates[k];
            serde_json::json!({
                "target": program.targets[cand.target].name,
                "rule": cand.rule_name,
                "nodes": cand.sub_graph.inside.iter().collect::<Vec<_>>(),
                "cost": plan.costs[k].is_known().then(|| plan.cost_of(k)),
                "chosen": c.chosen,
                "best_total_with_it": c.best,
            })
        })
        .collect();
    let mut v = serde_json::json!({"binding": e.binding, "node": e.node, "candidates": rows});
    if let Some(n) = onnx_node(m, g, sources, e.node) {
        v["onnx_node"] = listed_json(n);
    }
    v
}

/// An ONNX node in JSON reports: its position in the file, name and operator.
pub fn listed_json(n: &crate::source::ListedNode) -> serde_json::Value {
    serde_json::json!({"index": n.index, "name": n.name, "op_type": n.op_type})
}
