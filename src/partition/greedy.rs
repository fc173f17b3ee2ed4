//! Greedy `partition_for_X`-style regions of one BYOC target: its candidates, largest first,
//! taken while they do not overlap what is already taken, then touching regions merged while
//! their union stays within the target's limits (TVM's `MergeCompilerRegions`, bounded as the
//! target's rules are: convex, in one basic block, within the depth limit and the exits and
//! taps of its `only_valid`; see [`crate::enumerate::target_limits`]). The regions define the
//! `greedy:<target>` baseline and join the search as candidates.

use crate::enumerate::{Candidate, DataflowGraph, SubGraph};
use crate::ruletree::SubGraphConfig;

/// The greedy regions of target `t`, grown within `limits`, in node order.
pub fn regions(
    g: &DataflowGraph<'_>,
    candidates: &[Candidate],
    t: usize,
    limits: &SubGraphConfig,
) -> Vec<Candidate> {
    // Largest first (sizes counted once, not at every comparison).
    let mut mine: Vec<(usize, &Candidate)> = candidates
        .iter()
        .filter(|c| c.target == t)
        .map(|c| (c.sub_graph.inside.count(), c))
        .collect();
    mine.sort_by(|(na, a), (nb, b)| {
        nb.cmp(na)
            .then_with(|| a.sub_graph.order(&b.sub_graph))
            .then_with(|| a.rule_name.cmp(&b.rule_name))
    });
    // Nodes taken so far, one flag per node: each candidate costs its own size to test and
    // take, however much is taken (a growing set would cost its size at every union).
    let mut taken = vec![false; g.len()];
    let mut picked: Vec<SubGraph> = Vec::new();
    for (_, c) in mine {
        if c.sub_graph.inside.iter().any(|i| taken[i]) {
            continue;
        }
        for i in c.sub_graph.inside.iter() {
            taken[i] = true;
        }
        picked.push(c.sub_graph.clone());
    }
    picked.sort_by(|a, b| a.order(b));
    let merged = merge_touching(g, picked, limits);
    merged
        .into_iter()
        .map(|sub_graph| Candidate {
            target: t,
            sub_graph,
            rule_name: "greedy".into(),
        })
        .collect()
}

/// Merges touching sub-graphs while the union is valid under `limits`. The result is sorted
/// in node order.
pub fn merge_touching(
    g: &DataflowGraph<'_>,
    parts: Vec<SubGraph>,
    limits: &SubGraphConfig,
) -> Vec<SubGraph> {
    merge_touching_by(
        g,
        parts.into_iter().map(|p| (p, ())).collect(),
        |_, _| true,
        |_, _| (),
        |_| *limits,
    )
    .into_iter()
    .map(|(p, ())| p)
    .collect()
}

/// Merges touching parts whose payloads `can_merge`, while the union is valid under the limits
/// `config` gives for its payload (convex and in one basic block, within the depth, exits and
/// taps) and, when it has several exits, no value leaves it and comes back through the other parts
/// (each part is rewritten as one unit, so such a union could not be called):
/// each part, in order, absorbs its touching neighbours (lowest first) until none is left, and
/// passes repeat until nothing changes. Neighbours are found through the nodes feeding and fed
/// by a part, so the work is proportional to the edges between parts. Payloads of merged parts
/// are combined with `combine`. The result is sorted in node order.
pub fn merge_touching_by<T>(
    g: &DataflowGraph<'_>,
    parts: Vec<(SubGraph, T)>,
    can_merge: impl Fn(&T, &T) -> bool,
    combine: impl Fn(T, T) -> T,
    config: impl Fn(&T) -> SubGraphConfig,
) -> Vec<(SubGraph, T)> {
    let mut owner = vec![usize::MAX; g.len()];
    for (k, (p, _)) in parts.iter().enumerate() {
        for i in p.inside.iter() {
            owner[i] = k;
        }
    }
    // The slots hold plain sub-graphs (validity and the cycle test depend on the nodes alone)
    // and the parts each is made of: each whole union, nested parts and all, is built once, at
    // the end, rather than rebuilt at every merge (which made merging quadratic in the size of
    // the regions).
    let mut originals: Vec<SubGraph> = Vec::with_capacity(parts.len());
    let mut slots: Vec<Option<(SubGraph, T)>> = Vec::with_capacity(parts.len());
    for (p, t) in parts {
        let plain = SubGraph {
            inside: p.inside.clone(),
            entry: p.entry.clone(),
            exit: p.exit.clone(),
            input: p.input.clone(),
            output: p.output.clone(),
            depth: p.depth,
            kind: p.kind,
            label: String::new(),
            nested: Vec::new(),
        };
        slots.push(Some((plain, t)));
        originals.push(p);
    }
    let mut members: Vec<Vec<usize>> = (0..slots.len()).map(|k| vec![k]).collect();
    // The cycle test is bounded in a topological order that keeps nearby nodes near (see
    // `returns_to_among`); without forward edges there is none, and the test is unbounded.
    let rank = super::edges_go_forward(g).then(|| super::local_order(g));
    let span = |p: &SubGraph| -> Option<(usize, usize)> {
        let rank = rank.as_ref()?;
        let mut ranks = p.inside.iter().map(|i| rank[i]);
        let first = ranks.next()?;
        Some(ranks.fold((first, first), |(lo, hi), r| (lo.min(r), hi.max(r))))
    };
    // The first and last rank of each slot, and the largest last rank of the slots starting at
    // or before each rank.
    let mut spans: Vec<Option<(usize, usize)>> = slots
        .iter()
        .map(|s| s.as_ref().and_then(|(p, _)| span(p)))
        .collect();
    let mut starts = PrefixMax::new(g.len());
    for &(a, b) in spans.iter().flatten() {
        starts.set(a, b);
    }
    // The span of the union of two slots.
    let joined = |a: Option<(usize, usize)>, b: Option<(usize, usize)>| match (a, b) {
        (Some((f1, l1)), Some((f2, l2))) => Some((f1.min(f2), l1.max(l2))),
        (s, None) | (None, s) => s,
    };
    let mut reach = super::Reach::default();
    let mut no_cycle = |slots: &[Option<(SubGraph, T)>],
                        owner: &[usize],
                        starts: &PrefixMax,
                        i,
                        j,
                        u: &SubGraph,
                        u_span: Option<(usize, usize)>| {
        if u.exit.count() < 2 {
            return true;
        }
        // The first rank at or after `u`'s last that no slot straddles.
        let limit = rank.as_deref().zip(u_span).map(|(rank, (_, mut bound))| {
            while let Some(b) = starts.prefix(bound).filter(|&b| b > bound) {
                bound = b;
            }
            (rank, bound)
        });
        !super::returns_to_among(
            g,
            owner,
            slots.len(),
            &|k| slots[k].as_ref().map(|(p, _)| &p.inside),
            &u.inside,
            &[i, j],
            limit,
            &mut reach,
        )
    };
    let mut changed = true;
    while changed {
        changed = false;
        for i in 0..slots.len() {
            while let Some((a, ta)) = &slots[i] {
                let mut neighbours: Vec<usize> = a
                    .output
                    .iter()
                    .chain(a.input.iter())
                    .map(|o| owner[o])
                    .filter(|&j| j != i && j != usize::MAX)
                    .collect();
                neighbours.sort_unstable();
                neighbours.dedup();
                let mut merged = None;
                for j in neighbours {
                    let Some((b, tb)) = &slots[j] else { continue };
                    if !can_merge(ta, tb) || !(a.touches(g, b) || b.touches(g, a)) {
                        continue;
                    }
                    // Validity and the cycle test depend on the union's nodes alone (the nested
                    // parts of two disjoint parts stay disjoint), so they are tested on the
                    // plain union, and the whole union is built only for a merge, from the
                    // growing part itself: no copy of everything it holds at every step.
                    let limits = config(ta);
                    let (na, nb) = (a.inside.count(), b.inside.count());
                    // Within a depth limit no smaller than the union's size, the depth need not
                    // be known, and the union's boundary follows from the parts' with work in
                    // the smaller part only: growing a large region stays near-linear.
                    let plain = if limits.max_depth.is_none_or(|d| d as usize >= na + nb) {
                        let (big, small) = if na >= nb { (a, b) } else { (b, a) };
                        big.plain_union_shallow(g, small)
                    } else {
                        SubGraph::with(
                            g,
                            a.inside.union(&b.inside),
                            a.kind.max(b.kind),
                            String::new(),
                            Vec::new(),
                        )
                    };
                    if plain.is_valid(g, &limits)
                        && no_cycle(
                            &slots,
                            &owner,
                            &starts,
                            i,
                            j,
                            &plain,
                            joined(spans[i], spans[j]),
                        )
                    {
                        merged = Some((j, plain));
                        break;
                    }
                }
                let Some((j, u)) = merged else { break };
                let (b, tb) = slots[j].take().expect("neighbour present");
                let (_, ta) = slots[i].take().expect("part present");
                let (a_span, b_span) = (spans[i], spans[j].take());
                for (f, _) in [a_span, b_span].into_iter().flatten() {
                    starts.clear(f);
                }
                // The union's span, from its parts' (not from all its nodes again).
                spans[i] = joined(a_span, b_span);
                if let Some((f, l)) = spans[i] {
                    starts.set(f, l);
                }
                for n in b.inside.iter() {
                    owner[n] = i;
                }
                let absorbed = std::mem::take(&mut members[j]);
                members[i].extend(absorbed);
                slots[i] = Some((u, combine(ta, tb)));
                changed = true;
            }
        }
    }
    // Each slot's whole sub-graph: the part itself, or the union of its parts in the order
    // they joined.
    let mut originals: Vec<Option<SubGraph>> = originals.into_iter().map(Some).collect();
    let mut out: Vec<(SubGraph, T)> = slots
        .into_iter()
        .zip(members)
        .filter_map(|(slot, members)| {
            let (_, t) = slot?;
            let mut parts: Vec<SubGraph> = members
                .iter()
                .filter_map(|&m| originals[m].take())
                .collect();
            let whole = if parts.len() == 1 {
                parts.pop().expect("one part")
            } else {
                SubGraph::union_all(g, parts)
            };
            Some((whole, t))
        })
        .collect();
    out.sort_by(|a, b| a.0.order(&b.0));
    out
}

/// The largest value set at or before a position, with positions set and cleared one at a time
/// (a segment tree over the positions).
struct PrefixMax {
    size: usize,
    /// Leaves at `size..2 * size`, each inner node the largest of its two children; `None` for
    /// nothing set.
    tree: Vec<Option<usize>>,
}

impl PrefixMax {
    fn new(positions: usize) -> PrefixMax {
        let size = positions.max(1);
        PrefixMax {
            size,
            tree: vec![None; 2 * size],
        }
    }

    fn update(&mut self, pos: usize, value: Option<usize>) {
        let mut p = pos + self.size;
        self.tree[p] = value;
        while p > 1 {
            p /= 2;
            self.tree[p] = self.tree[2 * p].max(self.tree[2 * p + 1]);
        }
    }

    fn set(&mut self, pos: usize, value: usize) {
        self.update(pos, Some(value));
    }

    fn clear(&mut self, pos: usize) {
        self.update(pos, None);
    }

    /// The largest value set at positions `0..=pos`.
    fn prefix(&self, pos: usize) -> Option<usize> {
        let (mut l, mut r) = (self.size, (pos + 1).min(self.size) + self.size);
        let mut best = None;
        while l < r {
            if l % 2 == 1 {
                best = best.max(self.tree[l]);
                l += 1;
            }
            if r % 2 == 1 {
                r -= 1;
                best = best.max(self.tree[r]);
            }
            l /= 2;
            r /= 2;
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::PrefixMax;

    #[test]
    fn prefix_max_matches_a_scan() {
        for size in [1, 2, 3, 7, 64, 100] {
            let mut tree = PrefixMax::new(size);
            let mut plain: Vec<Option<usize>> = vec![None; size];
            let mut x: u64 = 12345 + size as u64;
            for _ in 0..500 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let pos = (x >> 33) as usize % size;
                let value = (x >> 13) as usize % 1000;
                if x.is_multiple_of(3) {
                    tree.clear(pos);
                    plain[pos] = None;
                } else {
                    tree.set(pos, value);
                    plain[pos] = Some(value);
                }
                for q in 0..size + 2 {
                    let expected = plain[..(q + 1).min(size)].iter().flatten().max().copied();
                    assert_eq!(tree.prefix(q), expected, "size {size}, prefix {q}");
                }
            }
        }
    }
}
