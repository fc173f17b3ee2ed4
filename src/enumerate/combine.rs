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
    // Keys of unions already formed: the inside set and the inside sets of the nested parts.
    // Checked before a union is built, since most unions are reached from several pairs.
    let mut keys: HashSet<(IndexSet, Vec<IndexSet>)> = HashSet::new();
    for c in base {
        keys.insert(key_of(&c.sub_graph));
        if seen.insert(c.sub_graph.clone()) {
            all.push(c);
        }
    }
    // Which candidates have each node as an entry, an exit or an output (kept up to date).
    let mut by_entry: Vec<Vec<usize>> = vec![Vec::new(); g.len()];
    let mut by_exit: Vec<Vec<usize>> = vec![Vec::new(); g.len()];
    let mut by_output: Vec<Vec<usize>> = vec![Vec::new(); g.len()];
    let index = |ci: usize,
                 c: &Candidate,
                 by_entry: &mut Vec<Vec<usize>>,
                 by_exit: &mut Vec<Vec<usize>>,
                 by_output: &mut Vec<Vec<usize>>| {
        for e in c.sub_graph.entry.iter() {
            by_entry[e].push(ci);
        }
        for e in c.sub_graph.exit.iter() {
            by_exit[e].push(ci);
        }
        for o in c.sub_graph.output.iter() {
            by_output[o].push(ci);
        }
    };
    for (ci, c) in all.iter().enumerate() {
        index(ci, c, &mut by_entry, &mut by_exit, &mut by_output);
    }
    let mut first_new = 0;
    loop {
        let mut added: Vec<Candidate> = Vec::new();
        let mut push = |sg: SubGraph, name: String, added: &mut Vec<Candidate>| {
            if sg.depth <= max_depth && seen.insert(sg.clone()) {
                added.push(cx.candidate(sg, name));
            }
        };
        for comb in combiners {
            match comb {
                Combiner::ByKind(rules) => {
                    // Pairs with at least one side from the last round: new upstreams with any
                    // downstream, then old upstreams with new downstreams.
                    let mut pairs: Vec<(usize, usize)> = Vec::new();
                    for (ui, up) in all.iter().enumerate().skip(first_new) {
                        for o in up.sub_graph.output.iter() {
                            pairs.extend(by_entry[o].iter().map(|&di| (ui, di)));
                        }
                    }
                    for (di, down) in all.iter().enumerate().skip(first_new) {
                        for e in down.sub_graph.entry.iter() {
                            pairs.extend(
                                by_output[e]
                                    .iter()
                                    .filter(|&&ui| ui < first_new)
                                    .map(|&ui| (ui, di)),
                            );
                        }
                    }
                    pairs.sort_unstable();
                    pairs.dedup();
                    for (ui, di) in pairs {
                        if ui == di {
                            continue;
                        }
                        let (up, down) = (&all[ui], &all[di]);
                        let fires = rules
                            .iter()
                            .any(|(a, b)| up.sub_graph.kind <= *a && down.sub_graph.kind <= *b);
                        if !fires || !up.sub_graph.touches(g, &down.sub_graph) {
                            continue;
                        }
                        if !keys.insert(union_key(&up.sub_graph, &down.sub_graph)) {
                            continue;
                        }
                        if let Some(u) = up.sub_graph.disjoint_union(g, &down.sub_graph) {
                            push(u, union_labels(&up.rule_name, &down.rule_name), &mut added);
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
        for c in added {
            let ci = all.len();
            index(ci, &c, &mut by_entry, &mut by_exit, &mut by_output);
            all.push(c);
        }
    }
    all
}

/// The dedup key of a sub-graph: its inside set and its nested inside sets, sorted.
fn key_of(sg: &SubGraph) -> (IndexSet, Vec<IndexSet>) {
    let mut nested: Vec<IndexSet> = sg.nested.iter().map(|(n, _)| n.inside.clone()).collect();
    nested.sort();
    (sg.inside.clone(), nested)
}

/// The dedup key of the union of two disjoint sub-graphs (nested parts side by side).
fn union_key(a: &SubGraph, b: &SubGraph) -> (IndexSet, Vec<IndexSet>) {
    let mut nested: Vec<IndexSet> = a
        .nested
        .iter()
        .chain(&b.nested)
        .map(|(n, _)| n.inside.clone())
        .collect();
    nested.sort();
    (a.inside.union(&b.inside), nested)
}

/// "I → tuple → I": an injective consumer of a tuple, the tuple, and a producer for every field.
/// Combinations are built on inside sets; one made only of candidates from earlier rounds was
/// already tried, so it is pruned as soon as no later field can bring a new member.
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
            if !is_tuple || consumer.sub_graph.inside.contains(t) {
                continue;
            }
            let fields: Vec<usize> = g.inputs(t).iter().map(|f| f.index()).collect();
            let producers: Vec<Vec<usize>> = fields
                .iter()
                .map(|&field| {
                    by_exit[field]
                        .iter()
                        .copied()
                        .filter(|&p| p != ci && all[p].sub_graph.kind <= OpPattern::Injective)
                        .collect()
                })
                .collect();
            if producers.iter().any(Vec::is_empty) {
                continue;
            }
            // suffix_new[j]: some field at or after j has a producer from the last round.
            let mut suffix_new = vec![false; producers.len() + 1];
            for j in (0..producers.len()).rev() {
                suffix_new[j] = suffix_new[j + 1] || producers[j].iter().any(|&p| p >= first_new);
            }
            let mut start = IndexSet::from_indices(g.len(), [t]);
            start.union_with(&consumer.sub_graph.inside);
            let mut partials: Vec<(bool, IndexSet, Vec<usize>)> =
                vec![(ci >= first_new, start, vec![ci])];
            for (j, ps) in producers.iter().enumerate() {
                let mut next: Vec<(bool, IndexSet, Vec<usize>)> = Vec::new();
                let mut seen: HashSet<IndexSet> = HashSet::new();
                for (has_new, acc, members) in &partials {
                    for &p in ps {
                        let is_new = *has_new || p >= first_new;
                        if !is_new && !suffix_new[j + 1] {
                            continue;
                        }
                        // Overlapping producers are skipped, not fatal.
                        if acc.intersects(&all[p].sub_graph.inside) {
                            continue;
                        }
                        let inside = acc.union(&all[p].sub_graph.inside);
                        if !seen.insert(inside.clone()) {
                            continue;
                        }
                        let mut m = members.clone();
                        m.push(p);
                        next.push((is_new, inside, m));
                    }
                }
                partials = next;
                if partials.is_empty() {
                    break;
                }
            }
            for (has_new, _, members) in partials {
                if !has_new {
                    continue;
                }
                // Fold the union in TVM's order: consumer, tuple, producers.
                let tuple = SubGraph::with(
                    g,
                    IndexSet::from_indices(g.len(), [t]),
                    OpPattern::Injective,
                    "tuple".into(),
                    Vec::new(),
                );
                let mut acc = match consumer.sub_graph.disjoint_union(g, &tuple) {
                    Some(u) => u,
                    None => continue,
                };
                let mut ok = true;
                for &p in &members[1..] {
                    match acc.disjoint_union(g, &all[p].sub_graph) {
                        Some(u) => acc = u,
                        None => {
                            ok = false;
                            break;
                        }
                    }
                }
                if !ok {
                    continue;
                }
                let name = members
                    .iter()
                    .map(|&m| all[m].rule_name.as_str())
                    .fold(String::new(), |acc, n| union_labels(&acc, n));
                push(acc, name);
            }
        }
    }
}
