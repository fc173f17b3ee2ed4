//! `collage fuse`: the FuseOps baseline as text or JSON.

use super::{load_model, Outcome};
use crate::ir::Module;
use crate::source::SourceMap;
use std::path::Path;

/// `collage fuse MODEL [--max-depth N] [--json]`: TVM's greedy FuseOps partition of `@main`.
pub fn fuse_command(
    path: &Path,
    model_options: &crate::pipeline::load::ModelOptions,
    max_depth: usize,
    json: bool,
) -> Outcome {
    let mut sources = SourceMap::new();
    let m = match load_model(&mut sources, path, model_options) {
        Ok(m) => m,
        Err(o) => return o,
    };
    let main = match super::main_of(&m, path) {
        Ok(f) => f,
        Err(o) => return o,
    };
    let result = crate::analysis::fuse::fuse(&m, main, max_depth);
    if json {
        let v = fuse_json(&m, main, max_depth, &result);
        super::written(super::out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&v).unwrap_or_default()
        )))
    } else {
        super::written(super::out(&fuse_text(&m, main, max_depth, &result)))
    }
}

/// The name of a FuseOps node in output: the source's `%N` binding or `%var` name, else `#i`
/// with its FuseOps post-DFS index.
pub fn fuse_node_name(m: &Module, e: crate::ir::ExprId, index: usize) -> String {
    match m.expr(e) {
        crate::ir::Expr::Var(v) => format!("%{}", m.var(*v).name),
        _ => match &m.bindings[e.index()] {
            Some(b) => format!("%{b}"),
            None => format!("#{index}"),
        },
    }
}

/// What a FuseOps node is, in one word: the operator of an operator call, else `call`, `var`,
/// `const`, `tuple`, `.N` (a projection), `let`, `if` or `fn`.
pub fn fuse_node_desc(m: &Module, e: crate::ir::ExprId) -> String {
    use crate::ir::{Callee, Expr};
    match m.expr(e) {
        Expr::Call {
            callee: Callee::Op(op),
            ..
        } => crate::ops::registry().get(*op).name.to_string(),
        Expr::Call { .. } => "call".into(),
        Expr::Var(_) => "var".into(),
        Expr::Const(_) => "const".into(),
        Expr::Tuple(_) => "tuple".into(),
        Expr::Proj { index, .. } => format!(".{index}"),
        Expr::Let { .. } => "let".into(),
        Expr::If { .. } => "if".into(),
        Expr::Func(_) => "fn".into(),
        Expr::Global(_) => "global".into(),
        Expr::Op(op) => crate::ops::registry().get(*op).name.to_string(),
    }
}

/// The post-DFS index of every expression in a FuseOps result (`usize::MAX` if it has none).
fn fuse_indices(m: &Module, r: &crate::analysis::fuse::FuseResult) -> Vec<usize> {
    let mut idx = vec![usize::MAX; m.exprs.len()];
    for (i, e) in r.order.iter().enumerate() {
        idx[e.index()] = i;
    }
    idx
}

/// The name of a function for output: `@name` of its definition, or `fn` for a literal.
fn function_name(m: &Module, f: crate::ir::FuncId) -> Option<String> {
    m.defs
        .iter()
        .find(|(_, d)| *d == f)
        .map(|(g, _)| m.globals[g.index()].name.clone())
}

/// The text report of a FuseOps result: one line per group that has more than one node or an
/// operator call, then a summary line.
///
/// ```text
/// group 1 [I]: #1 %0 (const, nn.pad)
/// group 4 [A] anchor %1: %1 %2 %3 (nn.conv2d, add, nn.relu)
/// @main: nodes 22, groups 15, operator calls 13, kernels 8, fused kernels 3, max depth 256
/// ```
///
/// A group line gives the group's index (as in `--json`), its kind letter (`E`lemwise,
/// `B`roadcast, `I`njective, comm `R`educe, `A`nchor-capable out-ewise-fusable, `T`uple,
/// `O`paque), its anchor if any, its members in post-DFS order (the last one is the group's
/// output) and what each member is (see [`fuse_node_name`] and [`fuse_node_desc`]). In the
/// summary, a kernel is a group with at least one operator call; a fused kernel has two or more.
pub fn fuse_text(
    m: &Module,
    func: crate::ir::FuncId,
    max_depth: usize,
    r: &crate::analysis::fuse::FuseResult,
) -> String {
    use std::fmt::Write as _;
    let idx = fuse_indices(m, r);
    let name = |e: crate::ir::ExprId| fuse_node_name(m, e, idx[e.index()]);
    let mut out = String::new();
    let (mut calls, mut kernels, mut fused) = (0usize, 0usize, 0usize);
    for (gi, g) in r.groups.iter().enumerate() {
        let n_calls = g.nodes.iter().filter(|&&e| m.is_op_call(e)).count();
        calls += n_calls;
        if n_calls > 0 {
            kernels += 1;
        }
        if n_calls > 1 {
            fused += 1;
        }
        if g.nodes.len() < 2 && n_calls == 0 {
            continue;
        }
        let _ = write!(out, "group {gi} [{}]", g.pattern.letter());
        if let Some(a) = g.anchor {
            let _ = write!(out, " anchor {}", name(a));
        }
        out.push(':');
        for &e in &g.nodes {
            let _ = write!(out, " {}", name(e));
        }
        let descs: Vec<String> = g.nodes.iter().map(|&e| fuse_node_desc(m, e)).collect();
        let _ = writeln!(out, " ({})", descs.join(", "));
    }
    let fname = function_name(m, func).map_or_else(|| "fn".to_string(), |n| format!("@{n}"));
    let _ = writeln!(
        out,
        "{fname}: nodes {}, groups {}, operator calls {calls}, kernels {kernels}, fused kernels \
         {fused}, max depth {max_depth}",
        r.order.len(),
        r.groups.len(),
    );
    out
}

/// The JSON report of a FuseOps result: `{"function", "max_depth", "groups": [{"index",
/// "pattern", "root", "anchor", "nodes": [{"index", "kind", "op", "binding", "span"}]}]}`. Every
/// group is listed, singletons included; `index`, `root` and `anchor` are FuseOps post-DFS
/// indices.
pub fn fuse_json(
    m: &Module,
    func: crate::ir::FuncId,
    max_depth: usize,
    r: &crate::analysis::fuse::FuseResult,
) -> serde_json::Value {
    use crate::ir::Expr;
    let idx = fuse_indices(m, r);
    let groups: Vec<serde_json::Value> = r
        .groups
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            let nodes: Vec<serde_json::Value> = g
                .nodes
                .iter()
                .map(|&e| {
                    let kind = m.expr(e).kind_name();
                    let op = m.is_op_call(e).then(|| fuse_node_desc(m, e));
                    let binding = match m.expr(e) {
                        Expr::Var(v) => Some(format!("%{}", m.var(*v).name)),
                        _ => m.bindings[e.index()].as_ref().map(|b| format!("%{b}")),
                    };
                    let s = m.span(e);
                    serde_json::json!({
                        "index": idx[e.index()],
                        "kind": kind,
                        "op": op,
                        "binding": binding,
                        "span": {"start": s.start, "end": s.end},
                    })
                })
                .collect();
            serde_json::json!({
                "index": gi,
                "pattern": g.pattern.name(),
                "root": idx[g.root.index()],
                "anchor": g.anchor.map(|a| idx[a.index()]),
                "nodes": nodes,
            })
        })
        .collect();
    serde_json::json!({
        "function": function_name(m, func),
        "max_depth": max_depth,
        "groups": groups,
    })
}
