//! Greedy `partition_for_X`-style regions of one BYOC target: its candidates that hold at most
//! one composite function, largest first, taken while they do not overlap what is already
//! taken, then its unions of composites on what is left, then touching regions merged while
//! their union stays within the target's limits (TVM's `MergeCompilerRegions`, bounded as the
//! target's rules are: convex, in one basic block, within the depth limit and the exits and
//! taps of its `only_valid`; see [`crate::planning::enumerate::target_limits`]). The regions define the
//! `greedy:<target>` baseline and join the search as candidates.

use crate::analysis::dataflow::index_set::words_cmp;
use crate::planning::enumerate::{Candidate, DataflowGraph, SubGraph};
use crate::rules::ruletree::SubGraphConfig;
use std::borrow::Cow;

/// A greedy region: one of the target's candidates as it is, or the union of several.
#[derive(Debug)]
pub enum Region {
    /// The candidate at this index, taken alone.
    Candidate(usize),
    /// The union of several candidates, with their nested parts.
    Union(Box<SubGraph>),
}

/// What the greedy regions sort a target's candidates by.
struct Key {
    /// Whether the candidate is a union of several composites: such candidates are taken
    /// after the single ones.
    union: bool,
    /// Inside nodes.
    size: usize,
    /// The first inside node.
    first: usize,
    /// The inside set's words, in the sort's copy.
    words: std::ops::Range<usize>,
    /// The candidate.
    k: usize,
}

/// The greedy regions of one BYOC target, grown within its `limits`, in node order, from its
/// candidates `own` (indices into `candidates`).
pub fn regions(
    g: &DataflowGraph<'_>,
    candidates: &[Candidate],
    own: &[usize],
    limits: &SubGraphConfig,
) -> Vec<Region> {
    // Single composites before unions, largest first, then in node order. Each candidate's
    // size, first node and inside words are copied out in one pass over the candidates, so
    // that sorting and picking read this compact copy rather than the candidates themselves
    // (which grow past the caches on large models); only candidates with the same nodes are
    // compared through the candidates (by rule name).
    let mut words: Vec<(u32, u64)> = Vec::new();
    let mut mine: Vec<Key> = Vec::with_capacity(own.len());
    for &k in own {
        let inside = &candidates[k].sub_graph.inside;
        // (A candidate always has nodes; one without would take none.)
        let Some(first) = inside.first() else {
            continue;
        };
        let start = words.len();
        words.extend_from_slice(inside.words());
        mine.push(Key {
            union: candidates[k].sub_graph.composites().len() > 1,
            size: inside.count(),
            first,
            words: start..words.len(),
            k,
        });
    }
    // Single composites first, as TVM's `MergeComposite` matches them before the regions are
    // merged: a union taken first can end inside a fusable chain (a convolution and its bias,
    // without the clip after them) and leave a node that no composite of the target starts
    // with, which then splits the region (MobileNetV2's blocks on `dnnl`).
    mine.sort_by(|a, b| {
        a.union
            .cmp(&b.union)
            .then(b.size.cmp(&a.size))
            .then(a.first.cmp(&b.first))
            .then_with(|| words_cmp(&words[a.words.clone()], &words[b.words.clone()]))
            // Sets over one graph with the same words are the same set.
            .then_with(|| candidates[a.k].rule_name.cmp(&candidates[b.k].rule_name))
    });
    // Nodes taken so far, as words of flags: each candidate costs its own words to test and
    // take, however much is taken (a growing set would cost its size at every union).
    let mut taken = vec![0u64; g.len().div_ceil(64)];
    let mut picked: Vec<(usize, usize)> = Vec::new();
    for key in mine {
        let inside = &words[key.words];
        if inside
            .iter()
            .any(|&(w, bits)| taken[w as usize] & bits != 0)
        {
            continue;
        }
        for &(w, bits) in inside {
            taken[w as usize] |= bits;
        }
        picked.push((key.first, key.k));
    }
    // In node order: disjoint sub-graphs are ordered by their first nodes alone.
    picked.sort_unstable_by_key(|&(first, _)| first);
    let merged = merge_touching_by(
        g,
        picked
            .into_iter()
            .map(|(_, k)| (&candidates[k].sub_graph, k))
            .collect(),
        |_, _| true,
        |a, _| a,
        |_| *limits,
    );
    merged
        .into_iter()
        .map(|(sub_graph, k)| match sub_graph {
            Cow::Borrowed(_) => Region::Candidate(k),
            Cow::Owned(union) => Region::Union(Box::new(union)),
        })
        .collect()
}

/// Merges touching parts whose payloads `can_merge`, while the union is valid under the limits
/// `config` gives for its payload (convex and in one basic block, within the depth, exits and
/// taps) and, when it has several exits, no value leaves it and comes back through the other parts
/// (each part is rewritten as one unit, so such a union could not be called):
/// each part, in order, absorbs its touching neighbours (lowest first) until none is left, and
/// passes repeat until nothing changes. Neighbours are found through the nodes feeding and fed
/// by a part, so the work is proportional to the edges between parts. Payloads of merged parts
/// are combined with `combine`. The result is sorted in node order: a part that merged with
/// none is given back as it is (borrowed), a union of several is built with their nested parts.
pub fn merge_touching_by<'p, T>(
    g: &DataflowGraph<'_>,
    parts: Vec<(&'p SubGraph, T)>,
    can_merge: impl Fn(&T, &T) -> bool,
    combine: impl Fn(T, T) -> T,
    config: impl Fn(&T) -> SubGraphConfig,
) -> Vec<(Cow<'p, SubGraph>, T)> {
    let mut owner = vec![usize::MAX; g.len()];
    for (k, (p, _)) in parts.iter().enumerate() {
        for i in p.inside.iter() {
            owner[i] = k;
        }
    }
    // Each slot holds its part until the part's first merge, then the plain union (validity
    // and the cycle test depend on the nodes alone), with the parts it is made of: each whole
    // union, nested parts and all, is built once, at the end, rather than rebuilt at every merge
    // (which made merging quadratic in the size of the regions).
    let originals: Vec<&'p SubGraph> = parts.iter().map(|(p, _)| *p).collect();
    let mut slots: Vec<Option<(Cow<'p, SubGraph>, T)>> = parts
        .into_iter()
        .map(|(p, t)| Some((Cow::Borrowed(p), t)))
        .collect();
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
    let no_cycle = |slots: &[Option<(Cow<'_, SubGraph>, T)>],
                    owner: &[usize],
                    starts: &PrefixMax,
                    i,
                    j,
                    u: &SubGraph,
                    u_span: Option<(usize, usize)>,
                    reach: &mut super::Reach| {
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
            reach,
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
                    // Touching is adjacency plus neither part flowing back into the other; the
                    // flows are tested below with the union's convexity, in one search near the
                    // union ([`super::flows_back`]) rather than through the downstream sets.
                    if !can_merge(ta, tb)
                        || !(a.output.intersects(&b.entry) || b.output.intersects(&a.entry))
                    {
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
                    if plain.is_valid_but_convexity(g, &limits)
                        && !super::flows_back(g, a, b, &plain, rank.as_deref(), None, &mut reach)
                        && no_cycle(
                            &slots,
                            &owner,
                            &starts,
                            i,
                            j,
                            &plain,
                            joined(spans[i], spans[j]),
                            &mut reach,
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
                slots[i] = Some((Cow::Owned(u), combine(ta, tb)));
                changed = true;
            }
        }
    }
    // Each slot's whole sub-graph: the part itself, or the union of its parts in the order
    // they joined.
    let mut out: Vec<(Cow<'p, SubGraph>, T)> = slots
        .into_iter()
        .zip(members)
        .filter_map(|(slot, members)| {
            let (_, t) = slot?;
            let whole = match members[..] {
                [one] => Cow::Borrowed(originals[one]),
                _ => {
                    let parts: Vec<&SubGraph> = members.iter().map(|&m| originals[m]).collect();
                    Cow::Owned(SubGraph::union_all(g, &parts))
                }
            };
            Some((whole, t))
        })
        .collect();
    // Disjoint parts are in node order by their first nodes.
    out.sort_by_key(|(p, _)| p.inside.first());
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
