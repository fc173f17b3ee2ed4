//! Matching compiled patterns against the dataflow graph.
//!
//! Every match at every root is found, overlapping ones included. `add` and `multiply` match
//! their arguments in either order. A match covers the nodes its non-wildcard parts matched,
//! except inlinable ones (scalar constants), as TVM's `MatcherToIndexSet` does. A capture written
//! twice must bind the same node.

use super::graph::DataflowGraph;
use super::pred;
use super::subgraph::SubGraph;
use crate::dataflow::{IndexSet, NodeIdx};
use crate::ir::{Callee, Dim, Expr, Type};
use crate::ops::registry;
use crate::ruletree::Pattern;
use std::collections::HashSet;

/// One way a pattern matched: the nodes it covers and the node bound to each capture.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Match {
    pub cover: Vec<u32>,
    pub caps: Vec<Option<u32>>,
}

/// Upper bound on the matches kept per (pattern node, graph node); guards against patterns
/// whose alternatives multiply combinatorially.
const MAX_MATCHES: usize = 256;

/// The sub-graphs of every match of `p` in `g` (one per distinct cover, in root order).
pub(crate) fn pattern_candidates(g: &DataflowGraph<'_>, p: &Pattern) -> Vec<SubGraph> {
    let ncaps = capture_count(p);
    let mut out = Vec::new();
    let mut seen: HashSet<Vec<u32>> = HashSet::new();
    for root in 0..g.len() {
        if !plausible_root(g, p, root) {
            continue;
        }
        let start = Match {
            cover: Vec::new(),
            caps: vec![None; ncaps],
        };
        for m in match_at(g, p, root, start) {
            let mut cover = m.cover;
            cover.sort_unstable();
            cover.dedup();
            if cover.is_empty() || !seen.insert(cover.clone()) {
                continue;
            }
            let inside = IndexSet::from_indices(g.len(), cover.iter().map(|&i| i as usize));
            out.push(SubGraph::new(g, inside));
        }
    }
    out
}

fn capture_count(p: &Pattern) -> usize {
    let mut max = 0;
    let mut stack = vec![p];
    while let Some(x) = stack.pop() {
        match x {
            Pattern::Capture(id, inner) => {
                max = max.max(*id as usize + 1);
                stack.push(inner);
            }
            Pattern::Call { args, .. } | Pattern::Alt(args) | Pattern::Tuple(args) => {
                stack.extend(args.iter())
            }
            Pattern::Optional { first, rest, .. } => {
                stack.push(first);
                stack.extend(rest.iter());
            }
            Pattern::Proj(i, _)
            | Pattern::DType(i, _)
            | Pattern::Rank(i, _)
            | Pattern::Shape(i, _)
            | Pattern::Where(i, _) => stack.push(i),
            _ => {}
        }
    }
    max
}

/// A cheap test that the root node could match (avoids trying every pattern at every node).
fn plausible_root(g: &DataflowGraph<'_>, p: &Pattern, root: usize) -> bool {
    let Some(e) = g.expr(root) else { return false };
    match p {
        Pattern::Call { ops, .. } => {
            matches!(g.module.expr(e), Expr::Call { callee: Callee::Op(op), .. } if ops.contains(op))
        }
        Pattern::Capture(_, i)
        | Pattern::Where(i, _)
        | Pattern::DType(i, _)
        | Pattern::Rank(i, _)
        | Pattern::Shape(i, _) => plausible_root(g, i, root),
        _ => true,
    }
}

fn node_of(g: &DataflowGraph<'_>, e: crate::ir::ExprId) -> Option<usize> {
    g.graph.index_of(e).map(NodeIdx::index)
}

/// All matches of `p` rooted at node `n`, extending `m`.
fn match_at(g: &DataflowGraph<'_>, p: &Pattern, n: usize, m: Match) -> Vec<Match> {
    let Some(e) = g.expr(n) else {
        return Vec::new();
    };
    let module = g.module;
    let cover = |mut m: Match| {
        if !g.inlinable[n] {
            m.cover.push(n as u32);
        }
        m
    };
    match p {
        Pattern::Wildcard => vec![m],
        Pattern::Const => match module.expr(e) {
            Expr::Const(_) => vec![cover(m)],
            _ => Vec::new(),
        },
        Pattern::Capture(id, inner) => {
            let bound = m.caps[*id as usize];
            if bound.is_some_and(|b| b != n as u32) {
                return Vec::new();
            }
            match_at(g, inner, n, m)
                .into_iter()
                .filter_map(|mut x| match x.caps[*id as usize] {
                    Some(b) if b != n as u32 => None,
                    _ => {
                        x.caps[*id as usize] = Some(n as u32);
                        Some(x)
                    }
                })
                .collect()
        }
        Pattern::Call { ops, attrs, args } => call_matches(g, n, ops, attrs, args, m),
        Pattern::Optional {
            ops,
            attrs,
            first,
            rest,
        } => {
            let mut all_args = vec![(**first).clone()];
            all_args.extend(rest.iter().cloned());
            let mut out = call_matches(g, n, ops, attrs, &all_args, m.clone());
            out.extend(match_at(g, first, n, m));
            out
        }
        Pattern::Alt(alts) => {
            let mut out = Vec::new();
            for a in alts {
                out.extend(match_at(g, a, n, m.clone()));
            }
            out
        }
        Pattern::Tuple(fields) => match module.expr(e) {
            Expr::Tuple(items) if items.len() == fields.len() => {
                let nodes: Vec<Option<usize>> = items.iter().map(|&x| node_of(g, x)).collect();
                seq(g, fields, &nodes, cover(m))
            }
            _ => Vec::new(),
        },
        Pattern::AnyTuple => match module.expr(e) {
            Expr::Tuple(_) => vec![cover(m)],
            _ => Vec::new(),
        },
        Pattern::Proj(inner, i) => match module.expr(e) {
            Expr::Proj { tuple, index } if index == i => match node_of(g, *tuple) {
                Some(t) => match_at(g, inner, t, cover(m)),
                None => Vec::new(),
            },
            _ => Vec::new(),
        },
        Pattern::DType(inner, ds) => match module.ty(e) {
            Some(Type::Tensor(t)) if ds.contains(&t.dtype) => match_at(g, inner, n, m),
            _ => Vec::new(),
        },
        Pattern::Rank(inner, r) => match module.ty(e) {
            Some(Type::Tensor(t)) if t.rank() == *r as usize => match_at(g, inner, n, m),
            _ => Vec::new(),
        },
        Pattern::Shape(inner, dims) => match module.ty(e) {
            Some(Type::Tensor(t))
                if t.rank() == dims.len()
                    && t.shape
                        .iter()
                        .zip(dims)
                        .all(|(d, want)| want.is_none_or(|w| *d == Dim::Fixed(w))) =>
            {
                match_at(g, inner, n, m)
            }
            _ => Vec::new(),
        },
        Pattern::Where(inner, p) => match_at(g, inner, n, m)
            .into_iter()
            .filter(|x| {
                let caps: Vec<Option<usize>> =
                    x.caps.iter().map(|c| c.map(|v| v as usize)).collect();
                pred::holds(g, p, &caps)
            })
            .collect(),
    }
}

fn call_matches(
    g: &DataflowGraph<'_>,
    n: usize,
    ops: &[crate::ir::OpId],
    attrs: &[(String, crate::ir::AttrValue)],
    args: &[Pattern],
    m: Match,
) -> Vec<Match> {
    let Some(e) = g.expr(n) else {
        return Vec::new();
    };
    let Expr::Call {
        callee: Callee::Op(op),
        args: actual,
        attrs: values,
    } = g.module.expr(e)
    else {
        return Vec::new();
    };
    if !ops.contains(op) || actual.len() != args.len() {
        return Vec::new();
    }
    let def = registry().get(*op);
    if !attrs
        .iter()
        .all(|(k, v)| values.get(def.attrs, k) == Some(v))
    {
        return Vec::new();
    }
    let mut m = m;
    if !g.inlinable[n] {
        m.cover.push(n as u32);
    }
    let nodes: Vec<Option<usize>> = actual.iter().map(|&x| node_of(g, x)).collect();
    let mut out = seq(g, args, &nodes, m.clone());
    // `add` and `multiply` are commutative: also try the arguments swapped.
    if matches!(def.name, "add" | "multiply") && nodes.len() == 2 && nodes[0] != nodes[1] {
        let swapped = [nodes[1], nodes[0]];
        for x in seq(g, args, &swapped, m) {
            if !out.contains(&x) {
                out.push(x);
            }
        }
    }
    out
}

/// Matches each pattern against the corresponding node, threading the captures through.
fn seq(g: &DataflowGraph<'_>, pats: &[Pattern], nodes: &[Option<usize>], m: Match) -> Vec<Match> {
    let mut partial = vec![m];
    for (p, node) in pats.iter().zip(nodes) {
        let mut next = Vec::new();
        for x in partial {
            match (p, node) {
                (Pattern::Wildcard, _) => next.push(x),
                (_, Some(nd)) => next.extend(match_at(g, p, *nd, x)),
                (_, None) => {}
            }
            if next.len() > MAX_MATCHES {
                next.truncate(MAX_MATCHES);
                break;
            }
        }
        partial = next;
        if partial.is_empty() {
            break;
        }
    }
    partial
}
