//! Combining candidates to a fixed point (collage-semantics §7, with the corrections of BRIEF.md).
//!
//! Each round applies every combiner to the current list; pairs are tried whenever at least one
//! side was added in the previous round (TVM skipped every pair whose upstream side was old,
//! Q1). A union is kept only if its own depth is within the limit (TVM compared the sum of the
//! two depths, Q2). The tuple-argument combiner skips producers that overlap (TVM aborted, Q3).
//! The loop ends when a round adds nothing.

use super::subgraph::{union_labels, SubGraph};
use super::{Candidate, Eval};
use crate::dataflow::IndexSet;
use crate::ir::Expr;
use crate::ops::OpPattern;
use crate::ruletree::Combiner;
use std::collections::HashSet;

/// Grows `base` with `combiners` to a fixed point; returns the originals followed by every union
/// in the order found.
pub(super) fn combine(
    cx: &Eval<'_, '_>,
    base: Vec<Candidate>,
    combiners: &[Combiner],
    max_depth: u32,
) -> Vec<Candidate> {
    let g = cx.g;
    let mut all: Vec<Candidate> = Vec::new();
    let mut seen: HashSet<SubGraph> = HashSet::new();
    for c in base {
        if seen.insert(c.sub_graph.clone()) {
            all.push(c);
        }
    }
    let mut first_new = 0;
    loop {
        let mut added: Vec<Candidate> = Vec::new();
        // Which candidates have each node as an entry / exit.
        let mut by_entry: Vec<Vec<usize>> = vec![Vec::new(); g.len()];
        let mut by_exit: Vec<Vec<usize>> = vec![Vec::new(); g.len()];
        for (ci, c) in all.iter().enumerate() {
            for e in c.sub_graph.entry.iter() {
                by_entry[e].push(ci);
            }
            for e in c.sub_graph.exit.iter() {
                by_exit[e].push(ci);
            }
        }
        let mut push = |sg: SubGraph, name: String, added: &mut Vec<Candidate>| {
            if sg.depth <= max_depth && seen.insert(sg.clone()) {
                added.push(cx.candidate(sg, name));
            }
        };
        for comb in combiners {
            match comb {
                Combiner::ByKind(rules) => {
                    for (ui, up) in all.iter().enumerate() {
                        let mut downs: Vec<usize> = up
                            .sub_graph
                            .output
                            .iter()
                            .flat_map(|o| by_entry[o].iter().copied())
                            .collect();
                        downs.sort_unstable();
                        downs.dedup();
                        for di in downs {
                            if di == ui || (ui < first_new && di < first_new) {
                                continue;
                            }
                            let down = &all[di];
                            let fires = rules
                                .iter()
                                .any(|(a, b)| up.sub_graph.kind <= *a && down.sub_graph.kind <= *b);
                            if !fires || !up.sub_graph.touches(g, &down.sub_graph) {
                                continue;
                            }
                            if let Some(u) = up.sub_graph.disjoint_union(g, &down.sub_graph) {
                                push(u, union_labels(&up.rule_name, &down.rule_name), &mut added);
                            }
                        }
                    }
                }
                Combiner::TupleArg => tuple_arg(cx, &all, &by_exit, first_new, &mut |sg, name| {
                    push(sg, name, &mut added)
                }),
                Combiner::TupleProj => {
                    for c in &all[first_new..] {
                        for o in c.sub_graph.output.iter() {
                            let is_proj = g
                                .expr(o)
                                .is_some_and(|e| matches!(g.module.expr(e), Expr::Proj { .. }));
                            if !is_proj {
                                continue;
                            }
                            let proj = SubGraph::with(
                                g,
                                IndexSet::from_indices(g.len(), [o]),
                                OpPattern::Injective,
                                "proj".into(),
                                Vec::new(),
                            );
                            if let Some(u) = c.sub_graph.disjoint_union(g, &proj) {
                                push(u, c.rule_name.clone(), &mut added);
                            }
                        }
                    }
                }
                Combiner::Constant => {
                    for c in &all[first_new..] {
                        let consts: Vec<usize> = c
                            .sub_graph
                            .input
                            .iter()
                            .filter(|&i| {
                                g.expr(i)
                                    .is_some_and(|e| matches!(g.module.expr(e), Expr::Const(_)))
                            })
                            .collect();
                        if consts.is_empty() {
                            continue;
                        }
                        let k = SubGraph::with(
                            g,
                            IndexSet::from_indices(g.len(), consts),
                            OpPattern::ElemWise,
                            "const".into(),
                            Vec::new(),
                        );
                        if let Some(u) = c.sub_graph.disjoint_union(g, &k) {
                            push(u, c.rule_name.clone(), &mut added);
                        }
                    }
                }
            }
        }
        if added.is_empty() {
            break;
        }
        first_new = all.len();
        all.extend(added);
    }
    all
}

/// "I → tuple → I": an injective consumer of a tuple, the tuple, and a producer for every field.
fn tuple_arg(
    cx: &Eval<'_, '_>,
    all: &[Candidate],
    by_exit: &[Vec<usize>],
    first_new: usize,
    push: &mut dyn FnMut(SubGraph, String),
) {
    let g = cx.g;
    for (ci, consumer) in all.iter().enumerate() {
        if consumer.sub_graph.kind > OpPattern::Injective {
            continue;
        }
        for t in consumer.sub_graph.input.iter() {
            let is_tuple = g
                .expr(t)
                .is_some_and(|e| matches!(g.module.expr(e), Expr::Tuple(_)));
            if !is_tuple {
                continue;
            }
            let tuple = SubGraph::with(
                g,
                IndexSet::from_indices(g.len(), [t]),
                OpPattern::Injective,
                "tuple".into(),
                Vec::new(),
            );
            let mut partials: Vec<(Vec<usize>, SubGraph)> =
                match consumer.sub_graph.disjoint_union(g, &tuple) {
                    Some(u) => vec![(vec![ci], u)],
                    None => continue,
                };
            let mut ok = true;
            for field in g.inputs(t).iter().map(|f| f.index()) {
                let producers: Vec<usize> = by_exit[field]
                    .iter()
                    .copied()
                    .filter(|&p| p != ci && all[p].sub_graph.kind <= OpPattern::Injective)
                    .collect();
                if producers.is_empty() {
                    ok = false;
                    break;
                }
                let mut next = Vec::new();
                for &p in &producers {
                    for (members, acc) in &partials {
                        // Overlapping producers are skipped, not fatal.
                        if let Some(u) = acc.disjoint_union(g, &all[p].sub_graph) {
                            let mut m = members.clone();
                            m.push(p);
                            next.push((m, u));
                        }
                    }
                }
                partials = next;
                if partials.is_empty() {
                    ok = false;
                    break;
                }
            }
            if !ok {
                continue;
            }
            for (members, u) in partials {
                // A real fixed point: skip only combinations made entirely of old candidates.
                if members.iter().all(|&m| m < first_new) && first_new > 0 {
                    continue;
                }
                let name = members
                    .iter()
                    .map(|&m| all[m].rule_name.as_str())
                    .fold(String::new(), |acc, n| union_labels(&acc, n));
                push(u, name);
            }
        }
    }
}
