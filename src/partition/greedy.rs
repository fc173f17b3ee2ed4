//! Greedy `partition_for_X`-style regions of one BYOC target: its candidates, largest first,
//! taken while they do not overlap what is already taken, then touching regions merged while
//! their union stays convex (TVM's `MergeCompilerRegions`). The regions may exceed the depth
//! limits and have several exits; they are offered to the search as candidates and define the
//! `greedy:<target>` baseline.

use crate::enumerate::{Candidate, DataflowGraph, SubGraph};
use crate::ruletree::SubGraphConfig;

/// Validity of merged regions: convex and in one basic block; any depth, exits and taps.
pub const MERGED: SubGraphConfig = SubGraphConfig {
    max_depth: None,
    max_exits: 0,
    allow_taps: true,
};

/// The greedy regions of target `t`, in node order.
pub fn regions(g: &DataflowGraph<'_>, candidates: &[Candidate], t: usize) -> Vec<Candidate> {
    let mut mine: Vec<&Candidate> = candidates.iter().filter(|c| c.target == t).collect();
    mine.sort_by(|a, b| {
        b.sub_graph
            .inside
            .count()
            .cmp(&a.sub_graph.inside.count())
            .then_with(|| a.sub_graph.order(&b.sub_graph))
            .then_with(|| a.rule_name.cmp(&b.rule_name))
    });
    let mut taken = g.empty_set();
    let mut picked: Vec<SubGraph> = Vec::new();
    for c in mine {
        if c.sub_graph.inside.intersects(&taken) {
            continue;
        }
        taken.union_with(&c.sub_graph.inside);
        picked.push(c.sub_graph.clone());
    }
    picked.sort_by(|a, b| a.order(b));
    let merged = merge_touching(g, picked);
    merged
        .into_iter()
        .map(|sub_graph| Candidate {
            target: t,
            sub_graph,
            rule_name: "greedy".into(),
        })
        .collect()
}

/// Merges touching sub-graphs while the union is valid under [`MERGED`]: each part absorbs
/// the later parts it can, in order, until nothing changes. The result is sorted in node order.
pub fn merge_touching(g: &DataflowGraph<'_>, mut parts: Vec<SubGraph>) -> Vec<SubGraph> {
    let mut changed = true;
    while changed {
        changed = false;
        let mut i = 0;
        while i < parts.len() {
            let mut j = i + 1;
            while j < parts.len() {
                let (a, b) = (&parts[i], &parts[j]);
                let union = if a.touches(g, b) || b.touches(g, a) {
                    a.disjoint_union(g, b).filter(|u| u.is_valid(g, &MERGED))
                } else {
                    None
                };
                match union {
                    Some(u) => {
                        parts[i] = u;
                        parts.remove(j);
                        changed = true;
                        j = i + 1;
                    }
                    None => j += 1,
                }
            }
            i += 1;
        }
    }
    parts.sort_by(|a, b| a.order(b));
    parts
}
