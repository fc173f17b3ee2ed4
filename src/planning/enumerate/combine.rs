//! Combining candidates to a fixed point (docs/collage.md, "Combining", with our corrections).
//!
//! Each round applies every combiner to the current list; pairs are tried whenever at least one
//! side was added in the previous round (TVM skipped every pair whose upstream side was old,
//! quirk-1). A union is kept only if its own depth is within the limit (TVM compared the sum of
//! the two depths, quirk-2). The tuple-argument combiner skips producers that overlap (TVM
//! aborted, quirk-3).
//! The loop ends when a round adds nothing.

use super::subgraph::{union_labels, SubGraph};
use super::{Bound, Candidate, Eval, PAIR_WORK};
use crate::analysis::dataflow::index_set::words_subset;
use crate::analysis::dataflow::IndexSet;
use crate::ir::Expr;
use crate::ops::OpPattern;
use crate::rules::ruletree::Combiner;
use rustc_hash::FxHashSet as HashSet;
use std::borrow::Cow;

/// Grows `base` with `combiners` to a fixed point; returns the originals followed by every union
/// in the order found, keeping only those (originals and unions alike) that `keep` accepts.
///
/// Bounded by the context's candidate limit: more candidates held (unions not kept included),
/// or more than [`PAIR_WORK`] times that many pair visits (partners looked at, partial
/// tuple-argument combinations built), is an error, checked as the unions are found, so that
/// neither memory nor time can run away before the fixed point.
///
/// Most unions are only stepping stones to others (they have several exits, say, and `keep` is
/// a validity test): the label and rule name of a union of two plain sub-graphs are built only
/// if it is kept, from the pair that made it (`origin`).
pub(super) fn combine(
    cx: &Eval<'_, '_>,
    base: Vec<Candidate>,
    combiners: &[Combiner],
    max_depth: u32,
    keep: &dyn Fn(&SubGraph) -> bool,
) -> Result<Vec<Candidate>, Bound> {
    let g = cx.g;
    let max = cx.max_candidates;
    let steps = PAIR_WORK.saturating_mul(max as u64);
    let mut work_left = steps;
    if base.len() > max {
        return Err(Bound::Candidates);
    }
    let mut all = Rounds::default();
    // Per candidate: the pair it is the union of, when its label and rule name are deferred
    // (both are empty until then).
    let mut origin: Vec<Option<(u32, u32)>> = Vec::new();
    // Every sub-graph seen so far, kept or rejected as too deep: checked before a union is
    // built, since most unions are reached from several pairs; this is also the de-duplication.
    let mut seen = Seen::new(g.len());
    let base: Vec<Candidate> = base
        .into_iter()
        .filter(|c| seen.insert(&c.sub_graph))
        .collect();
    origin.resize(base.len(), None);
    all.push_round(base);
    // Which candidates have each node as an entry, an exit or an output (kept up to date).
    // Entries and outputs are bucketed by the candidate's kind, so that a pair search only
    // visits partners whose kind some combiner rule accepts.
    let mut by_entry: Vec<Buckets> = (0..g.len()).map(|_| Default::default()).collect();
    let mut by_exit: Vec<Vec<usize>> = vec![Vec::new(); g.len()];
    let mut by_output: Vec<Buckets> = (0..g.len()).map(|_| Default::default()).collect();
    let index = |ci: usize,
                 c: &Candidate,
                 by_entry: &mut [Buckets],
                 by_exit: &mut [Vec<usize>],
                 by_output: &mut [Buckets]| {
        let k = c.sub_graph.kind as usize;
        for e in c.sub_graph.entry.iter() {
            by_entry[e][k].push(Member::new(ci, &c.sub_graph.inside));
        }
        for e in c.sub_graph.exit.iter() {
            by_exit[e].push(ci);
        }
        for o in c.sub_graph.output.iter() {
            by_output[o][k].push(Member::new(ci, &c.sub_graph.inside));
        }
    };
    for (ci, c) in all.iter_from(0) {
        index(ci, c, &mut by_entry, &mut by_exit, &mut by_output);
    }
    // The candidates that may consume a tuple (see `tuple_arg`), in index order: found once, so
    // that each round does not look at every candidate's inputs again.
    let is_tuple = |t: usize| {
        g.expr(t)
            .is_some_and(|e| matches!(g.module.expr(e), Expr::Tuple(_)))
    };
    let consumes_tuple = |c: &Candidate| {
        c.sub_graph.kind <= OpPattern::Injective && c.sub_graph.input.iter().any(is_tuple)
    };
    let mut tuple_consumers: Vec<usize> = (0..all.len())
        .filter(|&ci| consumes_tuple(&all[ci]))
        .collect();
    // The pair search gathers partners through the indexes above; most of them overlap the
    // other side. They are rejected before anything else, on compact copies of the inside
    // sets, and the rest are sorted so that pairs are tried in index order.
    let mut insides = Insides::default();
    // The fingerprint of each candidate's inside set (see `Seen`).
    let mut fps: Vec<u64> = Vec::with_capacity(all.len());
    // Each candidate's kind, and whether it has no nested parts: with these and `insides`, the
    // pair search settles most pairs (those whose union was already seen) without reading the
    // candidates themselves, which are scattered over far more memory.
    let mut kinds: Vec<(OpPattern, bool)> = Vec::with_capacity(all.len());
    for (_, c) in all.iter_from(0) {
        insides.push(&c.sub_graph.inside);
        fps.push(seen.fingerprint(&c.sub_graph.inside));
        kinds.push((c.sub_graph.kind, c.sub_graph.nested.is_empty()));
    }
    let mut marks = Marks {
        mark: vec![0; all.len()],
        query: 0,
    };
    let mut first_new = 0;
    loop {
        let mut added = Added::default();
        let held = all.len();
        // Adds a union unless it is too deep or already known; `name` labels a kept union and
        // gives its rule name.
        let push = |seen: &mut Seen,
                    mut sg: SubGraph,
                    name: &mut dyn FnMut(&mut SubGraph) -> String,
                    added: &mut Added|
         -> Result<(), Bound> {
            if sg.depth <= max_depth && seen.insert(&sg) {
                let rule_name = name(&mut sg);
                added.push(cx.candidate(sg, rule_name), None);
                if held + added.candidates.len() > max {
                    return Err(Bound::Candidates);
                }
            }
            Ok(())
        };
        let over = |added: &Added| held + added.candidates.len() > max;
        for comb in combiners {
            match comb {
                Combiner::ByKind(rules) => {
                    // Pairs with at least one side from the last round: new upstreams with any
                    // downstream, then old upstreams with new downstreams.
                    let mut try_pair =
                        |insides: &Insides, ui: usize, di: usize, added: &mut Added| {
                            if ui == di {
                                return;
                            }
                            let ((ku, plain_u), (kd, plain_d)) = (kinds[ui], kinds[di]);
                            let fires = rules.iter().any(|(a, b)| ku <= *a && kd <= *b);
                            if !fires {
                                return;
                            }
                            if plain_u && plain_d {
                                // Settled on the compact copies first, without the candidates.
                                let fp = fps[ui].wrapping_add(fps[di]);
                                if seen.knows_plain_union(insides.get(ui), insides.get(di), fp) {
                                    return;
                                }
                                let (a, b) = (&all[ui].sub_graph, &all[di].sub_graph);
                                // Partners are gathered only if they do not overlap the other side.
                                debug_assert!(a.inside.is_disjoint(&b.inside));
                                if !a.touches(g, b) {
                                    return;
                                }
                                // Labelled at the end, if kept.
                                let u = SubGraph::with(
                                    g,
                                    a.inside.union(&b.inside),
                                    a.kind.max(b.kind),
                                    String::new(),
                                    Vec::new(),
                                );
                                // Not seen (just looked up). Recorded even if too deep: a union too
                                // deep now is too deep from every other pair too.
                                seen.record_plain(fp, u.inside.words());
                                if u.depth <= max_depth {
                                    added.push(
                                        cx.candidate(u, String::new()),
                                        Some((ui as u32, di as u32)),
                                    );
                                }
                            } else {
                                let (a, b) = (&all[ui].sub_graph, &all[di].sub_graph);
                                if seen.knows_nested_union(a, b) || !a.touches(g, b) {
                                    return;
                                }
                                let up = resolved(&all, &origin, ui);
                                let down = resolved(&all, &origin, di);
                                if let Some(u) = up.sub_graph.disjoint_union(g, &down.sub_graph) {
                                    if seen.insert(&u) && u.depth <= max_depth {
                                        added.push(
                                            cx.candidate(
                                                u,
                                                union_labels(&up.rule_name, &down.rule_name),
                                            ),
                                            None,
                                        );
                                    }
                                }
                            }
                        };
                    // The largest downstream kind each upstream kind may join, and vice versa.
                    let max_down = |k: OpPattern| {
                        rules
                            .iter()
                            .filter(|(a, _)| k <= *a)
                            .map(|(_, b)| *b as usize)
                            .max()
                    };
                    let max_up = |k: OpPattern| {
                        rules
                            .iter()
                            .filter(|(_, b)| k <= *b)
                            .map(|(a, _)| *a as usize)
                            .max()
                    };
                    let mut partners: Vec<usize> = Vec::new();
                    for (ui, up) in all.iter_from(first_new) {
                        let Some(limit) = max_down(up.sub_graph.kind) else {
                            continue;
                        };
                        let side = &up.sub_graph;
                        let at = (&by_entry[..], limit, usize::MAX);
                        let visits = gather(
                            &mut insides,
                            &mut marks,
                            side,
                            side.output.iter(),
                            at,
                            &mut partners,
                        );
                        work_left = work_left
                            .checked_sub(visits)
                            .ok_or(Bound::PairWork { steps })?;
                        for &di in &partners {
                            try_pair(&insides, ui, di, &mut added);
                        }
                        if over(&added) {
                            return Err(Bound::Candidates);
                        }
                    }
                    for (di, down) in all.iter_from(first_new) {
                        let Some(limit) = max_up(down.sub_graph.kind) else {
                            continue;
                        };
                        // Only old upstreams: pairs of two new ones were tried above.
                        let side = &down.sub_graph;
                        let at = (&by_output[..], limit, first_new);
                        let visits = gather(
                            &mut insides,
                            &mut marks,
                            side,
                            side.entry.iter(),
                            at,
                            &mut partners,
                        );
                        work_left = work_left
                            .checked_sub(visits)
                            .ok_or(Bound::PairWork { steps })?;
                        for &ui in &partners {
                            try_pair(&insides, ui, di, &mut added);
                        }
                        if over(&added) {
                            return Err(Bound::Candidates);
                        }
                    }
                }
                Combiner::TupleArg => tuple_arg(
                    cx,
                    Named {
                        all: &all,
                        origin: &origin,
                    },
                    &tuple_consumers,
                    &by_exit,
                    first_new,
                    &mut |seen: &mut Seen, sg, name| push(seen, sg, name, &mut added),
                    &mut seen,
                    &mut work_left,
                )
                .map_err(|b| match b {
                    Bound::PairWork { .. } => Bound::PairWork { steps },
                    b => b,
                })?,
                Combiner::TupleProj => {
                    for (ci, c) in all.iter_from(first_new) {
                        for o in c.sub_graph.output.iter() {
                            let is_proj = g
                                .expr(o)
                                .is_some_and(|e| matches!(g.module.expr(e), Expr::Proj { .. }));
                            if !is_proj {
                                continue;
                            }
                            if c.sub_graph.nested.is_empty()
                                && seen.knows_plus(fps[ci], &c.sub_graph.inside, o)
                            {
                                continue;
                            }
                            let proj = SubGraph::with(
                                g,
                                IndexSet::from_indices(g.len(), [o]),
                                OpPattern::Injective,
                                "proj".into(),
                                Vec::new(),
                            );
                            let c = resolved(&all, &origin, ci);
                            if let Some(u) = c.sub_graph.disjoint_union(g, &proj) {
                                push(&mut seen, u, &mut |_| c.rule_name.clone(), &mut added)?;
                            }
                        }
                    }
                }
                Combiner::Constant => {
                    for (ci, c) in all.iter_from(first_new) {
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
                        let c = resolved(&all, &origin, ci);
                        if let Some(u) = c.sub_graph.disjoint_union(g, &k) {
                            push(&mut seen, u, &mut |_| c.rule_name.clone(), &mut added)?;
                        }
                    }
                }
            }
        }
        if added.candidates.is_empty() {
            break;
        }
        first_new = all.len();
        for (k, c) in added.candidates.iter().enumerate() {
            let ci = first_new + k;
            index(ci, c, &mut by_entry, &mut by_exit, &mut by_output);
            if consumes_tuple(c) {
                tuple_consumers.push(ci);
            }
            insides.push(&c.sub_graph.inside);
            fps.push(seen.fingerprint(&c.sub_graph.inside));
            kinds.push((c.sub_graph.kind, c.sub_graph.nested.is_empty()));
            marks.mark.push(0);
        }
        origin.extend(added.origin);
        all.push_round(added.candidates);
    }
    let kept: Vec<bool> = all.iter_from(0).map(|(_, c)| keep(&c.sub_graph)).collect();
    // Names of the kept deferred unions, built while every part is still there.
    let mut names: Vec<(String, String)> = (0..all.len())
        .filter(|&k| kept[k] && origin[k].is_some())
        .map(|k| names_of(&all, &origin, k))
        .collect();
    names.reverse();
    Ok(all
        .chunks
        .into_iter()
        .flatten()
        .zip(kept)
        .zip(origin)
        .filter(|((_, kept), _)| *kept)
        .map(|((mut c, _), from)| {
            if from.is_some() {
                if let Some((label, name)) = names.pop() {
                    c.sub_graph.label = label;
                    c.rule_name = name;
                }
            }
            c
        })
        .collect())
}

/// The candidates so far, one array per round: a round's new candidates are moved in as they
/// are, never copied again, and no single array grows to hold them all.
#[derive(Default)]
struct Rounds {
    chunks: Vec<Vec<Candidate>>,
    /// The index of each chunk's first candidate.
    starts: Vec<usize>,
    len: usize,
}

impl Rounds {
    fn len(&self) -> usize {
        self.len
    }

    fn push_round(&mut self, chunk: Vec<Candidate>) {
        if !chunk.is_empty() {
            self.starts.push(self.len);
            self.len += chunk.len();
            self.chunks.push(chunk);
        }
    }

    /// The candidates from index `first` on, with their indices.
    fn iter_from(&self, first: usize) -> impl Iterator<Item = (usize, &Candidate)> + '_ {
        self.chunks
            .iter()
            .zip(&self.starts)
            .flat_map(move |(chunk, &start)| {
                let skip = first.saturating_sub(start).min(chunk.len());
                chunk[skip..]
                    .iter()
                    .enumerate()
                    .map(move |(k, c)| (start + skip + k, c))
            })
    }
}

impl std::ops::Index<usize> for Rounds {
    type Output = Candidate;

    fn index(&self, k: usize) -> &Candidate {
        let c = self.starts.partition_point(|&s| s <= k) - 1;
        &self.chunks[c][k - self.starts[c]]
    }
}

/// The unions found in one round, with the pairs their deferred names come from.
#[derive(Default)]
struct Added {
    candidates: Vec<Candidate>,
    origin: Vec<Option<(u32, u32)>>,
}

impl Added {
    fn push(&mut self, c: Candidate, origin: Option<(u32, u32)>) {
        self.candidates.push(c);
        self.origin.push(origin);
    }
}

/// Candidate `k` with its label and rule name (built, if they were deferred).
fn resolved<'a>(all: &'a Rounds, origin: &[Option<(u32, u32)>], k: usize) -> Cow<'a, Candidate> {
    if origin[k].is_none() {
        return Cow::Borrowed(&all[k]);
    }
    let (label, rule_name) = names_of(all, origin, k);
    let c = &all[k];
    Cow::Owned(Candidate {
        target: c.target,
        sub_graph: SubGraph {
            label,
            ..c.sub_graph.clone()
        },
        rule_name,
    })
}

/// The candidates with the pairs their deferred names come from.
#[derive(Clone, Copy)]
struct Named<'a> {
    all: &'a Rounds,
    origin: &'a [Option<(u32, u32)>],
}

impl<'a> Named<'a> {
    /// Candidate `k` with its names.
    fn get(&self, k: usize) -> Cow<'a, Candidate> {
        resolved(self.all, self.origin, k)
    }

    /// The label and rule name of candidate `k`.
    fn names(&self, k: usize) -> (String, String) {
        match self.origin[k] {
            None => {
                let c = &self.all[k];
                (c.sub_graph.label.clone(), c.rule_name.clone())
            }
            Some(_) => names_of(self.all, self.origin, k),
        }
    }
}

/// The label and rule name of candidate `k`: for a union whose names were deferred, those of the
/// parts it was made from, in order, joined as [`union_labels`] joins them (it skips empty
/// sides, so joining the non-empty names of the original parts, left to right, is the same).
fn names_of(all: &Rounds, origin: &[Option<(u32, u32)>], k: usize) -> (String, String) {
    fn join(acc: &mut String, part: &str) {
        if !part.is_empty() {
            if !acc.is_empty() {
                acc.push('+');
            }
            acc.push_str(part);
        }
    }
    let (mut label, mut name) = (String::new(), String::new());
    let mut stack = vec![k];
    while let Some(j) = stack.pop() {
        match origin[j] {
            Some((u, d)) => {
                stack.push(d as usize);
                stack.push(u as usize);
            }
            None => {
                join(&mut label, &all[j].sub_graph.label);
                join(&mut name, &all[j].rule_name);
            }
        }
    }
    (label, name)
}

/// Copies of inside sets, each as its non-zero words, in one array, and one more set loaded
/// word by word to test them against.
#[derive(Default)]
struct Insides {
    words: Vec<(u32, u64)>,
    /// Per set: start in `words`, number of words.
    spans: Vec<(u32, u32)>,
    /// The loaded set's words, indexed by word; zero elsewhere.
    dense: Vec<u64>,
}

impl Insides {
    fn push(&mut self, s: &IndexSet) {
        self.spans
            .push((self.words.len() as u32, s.words().len() as u32));
        self.words.extend_from_slice(s.words());
    }

    /// Loads `s` to test sets against with [`Insides::overlaps`]; pass it to
    /// [`Insides::unload`] afterwards.
    fn load(&mut self, s: &IndexSet) {
        let end = s.words().last().map_or(0, |p| p.0 as usize + 1);
        if self.dense.len() < end {
            self.dense.resize(end, 0);
        }
        for &(i, w) in s.words() {
            self.dense[i as usize] = w;
        }
    }

    fn unload(&mut self, s: &IndexSet) {
        for &(i, _) in s.words() {
            self.dense[i as usize] = 0;
        }
    }

    /// Whether the first word of an indexed candidate meets the loaded set (if not, the rest of
    /// it still may).
    #[inline]
    fn meets_first_word(&self, m: &Member) -> bool {
        self.dense
            .get(m.word as usize)
            .is_some_and(|&w| w & m.bits != 0)
    }

    /// The words of set `k`.
    #[inline]
    fn get(&self, k: usize) -> &[(u32, u64)] {
        let (start, n) = self.spans[k];
        &self.words[start as usize..][..n as usize]
    }

    /// Whether set `k` meets the loaded set.
    #[inline]
    fn overlaps(&self, k: usize) -> bool {
        let (start, n) = self.spans[k];
        self.words[start as usize..][..n as usize]
            .iter()
            .any(|&(i, w)| self.dense.get(i as usize).is_some_and(|&d| d & w != 0))
    }
}

/// Which candidates were already gathered for the current side of the pair search:
/// `mark[c] == query` for those.
struct Marks {
    mark: Vec<u32>,
    query: u32,
}

/// The partners of `side` for the pair search, into `partners` in index order: the candidates
/// listed in `index` (by entry or by output) at `nodes` (its outputs or entries), with kinds up
/// to `limit` and indices below `below`, each once, leaving out those that overlap `side`.
/// Returns the number of index entries visited (the work done).
fn gather(
    insides: &mut Insides,
    marks: &mut Marks,
    side: &SubGraph,
    nodes: impl Iterator<Item = usize>,
    (index, limit, below): (&[Buckets], usize, usize),
    partners: &mut Vec<usize>,
) -> u64 {
    marks.query += 1;
    let query = marks.query;
    insides.load(&side.inside);
    partners.clear();
    let mut visits = 0u64;
    for n in nodes {
        for bucket in &index[n][..=limit.min(KINDS - 1)] {
            visits += bucket.len() as u64;
            for m in bucket {
                let k = m.index as usize;
                if k >= below {
                    // Buckets are in index order.
                    break;
                }
                if marks.mark[k] == query {
                    continue;
                }
                marks.mark[k] = query;
                if !insides.meets_first_word(m) && !insides.overlaps(k) {
                    partners.push(k);
                }
            }
        }
    }
    insides.unload(&side.inside);
    partners.sort_unstable();
    visits
}

/// Number of distinct kind values (`OpPattern` discriminants 0..=8).
const KINDS: usize = 9;

/// Candidate indices bucketed by candidate kind.
type Buckets = [Vec<Member>; KINDS];

/// A candidate in an index, with the first word of its inside set: sets that overlap mostly
/// share their most upstream node (a node whose outputs fan out), so this word settles most
/// overlap tests without looking the set up.
#[derive(Clone, Copy)]
struct Member {
    index: u32,
    /// Index of the first non-zero word of the inside set, and that word.
    word: u32,
    bits: u64,
}

impl Member {
    fn new(index: usize, inside: &IndexSet) -> Member {
        let (word, bits) = inside.words().first().copied().unwrap_or((0, 0));
        Member {
            index: index as u32,
            word,
            bits,
        }
    }
}

/// Whether `c` is exactly the union of `a` and `b`, which are disjoint (sets given by their
/// non-zero words, as [`IndexSet::words`]).
fn is_union_of(c: &[(u32, u64)], a: &[(u32, u64)], b: &[(u32, u64)]) -> bool {
    c.len() <= a.len() + b.len()
        && words_subset(a, c)
        && words_subset(b, c)
        && words_count(c) == words_count(a) + words_count(b)
}

/// The number of members of a set given by its non-zero words.
fn words_count(s: &[(u32, u64)]) -> usize {
    s.iter().map(|p| p.1.count_ones() as usize).sum()
}

/// A candidate's identity for de-duplication: its inside set, and each nested part's inside set
/// with the attributes' `Composite` name (nested parts are sorted).
type Key = (IndexSet, Vec<(IndexSet, Option<String>)>);

/// The sub-graphs seen so far. Those without nested parts (nearly all) are found by a fingerprint
/// of their inside set, so that a pair's union is looked up without building anything. The
/// fingerprint of a set is the sum of a fixed pseudo-random number per member, so that of the
/// union of two disjoint sets is the sum of theirs.
struct Seen {
    /// Sub-graphs with nested parts.
    keys: HashSet<Key>,
    /// The positions in `sets` of the plain sub-graphs' inside sets, hashed by fingerprint (a
    /// table of 4-byte positions, small enough to stay in cache on large models).
    plain: hashbrown::HashTable<u32>,
    /// Inside sets of plain sub-graphs, each as its fingerprint, and its start and number of
    /// words in `words`.
    sets: Vec<(u64, u32, u32)>,
    /// The words of the recorded inside sets, one after the other (one array rather than one
    /// allocation per set).
    words: Vec<(u32, u64)>,
    /// The number of each node.
    node_hash: Vec<u64>,
}

impl Seen {
    fn new(nodes: usize) -> Seen {
        Seen {
            keys: HashSet::default(),
            plain: hashbrown::HashTable::new(),
            sets: Vec::new(),
            words: Vec::new(),
            node_hash: (0..nodes as u64).map(splitmix64).collect(),
        }
    }

    /// The fingerprint of a set.
    fn fingerprint(&self, s: &IndexSet) -> u64 {
        s.iter()
            .fold(0u64, |h, i| h.wrapping_add(self.node_hash[i]))
    }

    /// Records a sub-graph; false if it was already seen.
    fn insert(&mut self, sg: &SubGraph) -> bool {
        if !sg.nested.is_empty() {
            return self.keys.insert(key_of(sg));
        }
        let fp = self.fingerprint(&sg.inside);
        let w = sg.inside.words();
        if self.any_with(fp, |s| s == w) {
            return false;
        }
        self.record_plain(fp, w);
        true
    }

    /// Records a plain inside set (given by its words, with fingerprint `fp`) not seen before.
    fn record_plain(&mut self, fp: u64, w: &[(u32, u64)]) {
        let k = self.sets.len() as u32;
        self.sets
            .push((fp, self.words.len() as u32, w.len() as u32));
        self.words.extend_from_slice(w);
        let sets = &self.sets;
        self.plain.insert_unique(fp, k, |&j| sets[j as usize].0);
    }

    /// Whether some recorded plain inside set with fingerprint `fp` satisfies `pred` (given its
    /// words).
    fn any_with(&self, fp: u64, mut pred: impl FnMut(&[(u32, u64)]) -> bool) -> bool {
        self.plain
            .find(fp, |&k| {
                let (f, start, n) = self.sets[k as usize];
                f == fp && pred(&self.words[start as usize..][..n as usize])
            })
            .is_some()
    }

    /// Whether a sub-graph without nested parts and with this inside set was already seen.
    fn knows(&self, inside: &IndexSet) -> bool {
        self.any_with(self.fingerprint(inside), |s| s == inside.words())
    }

    /// Whether a sub-graph without nested parts whose inside set is `inside` (with fingerprint
    /// `fp`) plus node `o` (outside it) was already seen.
    fn knows_plus(&self, fp: u64, inside: &IndexSet, o: usize) -> bool {
        let node = [((o / 64) as u32, 1u64 << (o % 64))];
        self.knows_plain_union(inside.words(), &node, fp.wrapping_add(self.node_hash[o]))
    }

    /// Whether a sub-graph without nested parts whose inside set is the union of the disjoint
    /// sets `a` and `b` (given by their words), with fingerprint `fp`, was already seen.
    fn knows_plain_union(&self, a: &[(u32, u64)], b: &[(u32, u64)], fp: u64) -> bool {
        self.any_with(fp, |s| is_union_of(s, a, b))
    }

    /// Whether the union of two disjoint sub-graphs, at least one with nested parts, was
    /// already seen.
    fn knows_nested_union(&self, a: &SubGraph, b: &SubGraph) -> bool {
        self.keys.contains(&union_key(a, b))
    }
}

/// A well-mixed 64-bit number for each input (Steele, Lea and Flood's SplitMix64 finaliser).
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn nested_key(n: &(SubGraph, super::subgraph::FnAttrs)) -> (IndexSet, Option<String>) {
    let composite =
        n.1.iter()
            .find(|(k, _)| k == "Composite")
            .and_then(|(_, v)| v.as_str().map(str::to_string));
    (n.0.inside.clone(), composite)
}

/// The key of a sub-graph.
fn key_of(sg: &SubGraph) -> Key {
    let mut nested: Vec<_> = sg.nested.iter().map(nested_key).collect();
    nested.sort();
    (sg.inside.clone(), nested)
}

/// The key of the union of two disjoint sub-graphs (nested parts side by side).
fn union_key(a: &SubGraph, b: &SubGraph) -> Key {
    let mut nested: Vec<_> = a.nested.iter().chain(&b.nested).map(nested_key).collect();
    nested.sort();
    (a.inside.union(&b.inside), nested)
}

/// Labels a kept union and gives its rule name (called only for unions that are kept).
type Namer<'a> = dyn FnMut(&mut SubGraph) -> String + 'a;

/// Adds a union (see `combine`); an error once more candidates are held than allowed.
type Push<'a> = dyn FnMut(&mut Seen, SubGraph, &mut Namer<'_>) -> Result<(), Bound> + 'a;

/// "I → tuple → I": an injective consumer of a tuple, the tuple, and a producer for every field.
/// `consumers` are the candidates of kind at most injective with a tuple among their inputs, in
/// index order.
/// Combinations are built on inside sets; one made only of candidates from earlier rounds was
/// already tried, so it is pruned as soon as no later field can bring a new member. Each
/// partial combination built costs one unit of `work_left`.
#[allow(clippy::too_many_arguments)]
fn tuple_arg(
    cx: &Eval<'_, '_>,
    parts: Named<'_>,
    consumers: &[usize],
    by_exit: &[Vec<usize>],
    first_new: usize,
    push: &mut Push<'_>,
    seen: &mut Seen,
    work_left: &mut u64,
) -> Result<(), Bound> {
    let g = cx.g;
    let all = parts.all;
    let mut contain: Vec<u64> = Vec::new();
    let mut overlapping: Vec<u64> = Vec::new();
    for &ci in consumers {
        let consumer = &all[ci];
        for t in consumer.sub_graph.input.iter() {
            let is_tuple = g
                .expr(t)
                .is_some_and(|e| matches!(g.module.expr(e), Expr::Tuple(_)));
            if !is_tuple || consumer.sub_graph.inside.contains(t) {
                continue;
            }
            let fields: Vec<usize> = g.inputs(t).iter().map(|f| f.index()).collect();
            // `by_exit` lists are in index order: without any candidate from the last round
            // among the fields' producers, an old consumer has nothing new to combine.
            let any_new = || {
                fields
                    .iter()
                    .any(|&f| by_exit[f].last().is_some_and(|&p| p >= first_new))
            };
            if ci < first_new && !any_new() {
                continue;
            }
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
            if ci < first_new && !suffix_new[0] {
                // Nothing new can take part.
                continue;
            }
            let mut start = IndexSet::from_indices(g.len(), [t]);
            start.union_with(&consumer.sub_graph.inside);
            let mut partials: Vec<(bool, IndexSet, Vec<usize>)> =
                vec![(ci >= first_new, start, vec![ci])];
            for (j, ps) in producers.iter().enumerate() {
                let mut next: Vec<(bool, IndexSet, Vec<usize>)> = Vec::new();
                let mut seen: HashSet<IndexSet> = HashSet::default();
                // Producers are in index order: those from the last round come last.
                let new_from = ps.partition_point(|&p| p < first_new);
                // Row `x` of `contain`: which producers (bit `k` for `ps[k]`) contain node `x`,
                // so that those overlapping a partial are found from its nodes.
                let words = ps.len().div_ceil(64);
                contain.resize(g.len() * words, 0);
                for (k, &p) in ps.iter().enumerate() {
                    for x in all[p].sub_graph.inside.iter() {
                        contain[x * words + k / 64] |= 1 << (k % 64);
                    }
                }
                for (has_new, acc, members) in &partials {
                    // With nothing new so far and no new producer in later fields, only new
                    // producers here can make a combination not tried before.
                    let from = if *has_new || suffix_new[j + 1] {
                        0
                    } else {
                        new_from
                    };
                    // Overlapping producers are skipped, not fatal.
                    overlapping.clear();
                    overlapping.resize(words, 0);
                    for x in acc.iter() {
                        for (m, &c) in overlapping.iter_mut().zip(&contain[x * words..][..words]) {
                            *m |= c;
                        }
                    }
                    for (w, &over) in overlapping.iter().enumerate() {
                        let mut free = !over;
                        if w == from / 64 {
                            free &= !0 << (from % 64);
                        } else if w < from / 64 {
                            continue;
                        }
                        while free != 0 {
                            let k = w * 64 + free.trailing_zeros() as usize;
                            free &= free - 1;
                            if k >= ps.len() {
                                break;
                            }
                            let p = ps[k];
                            let is_new = *has_new || p >= first_new;
                            let inside = acc.union(&all[p].sub_graph.inside);
                            if !seen.insert(inside.clone()) {
                                continue;
                            }
                            *work_left = work_left
                                .checked_sub(1)
                                .ok_or(Bound::PairWork { steps: 0 })?;
                            let mut m = members.clone();
                            m.push(p);
                            next.push((is_new, inside, m));
                        }
                    }
                }
                for &p in ps {
                    for x in all[p].sub_graph.inside.iter() {
                        contain[x * words..][..words].fill(0);
                    }
                }
                partials = next;
                if partials.is_empty() {
                    break;
                }
            }
            for (has_new, inside, members) in partials {
                if !has_new {
                    continue;
                }
                let plain = members.iter().all(|&m| all[m].sub_graph.nested.is_empty());
                if plain && seen.knows(&inside) {
                    // Without nested parts the union is `inside`: nothing needs building if it
                    // was seen already.
                    continue;
                }
                // The label of a plain union (the consumer's, `tuple`, the producers') and the
                // rule names of the parts joined in order: built only if the union is kept.
                let names = || {
                    let named: Vec<(String, String)> =
                        members.iter().map(|&m| parts.names(m)).collect();
                    let label = named[1..]
                        .iter()
                        .fold(union_labels(&named[0].0, "tuple"), |acc, (l, _)| {
                            union_labels(&acc, l)
                        });
                    let name = named
                        .iter()
                        .fold(String::new(), |acc, (_, n)| union_labels(&acc, n));
                    (label, name)
                };
                if plain {
                    // The union is `inside` with the parts' kinds.
                    let kind = members[1..].iter().map(|&p| all[p].sub_graph.kind).fold(
                        all[ci].sub_graph.kind.max(OpPattern::Injective),
                        OpPattern::max,
                    );
                    let sg = SubGraph::with(g, inside, kind, String::new(), Vec::new());
                    push(seen, sg, &mut |sg| {
                        let (label, name) = names();
                        sg.label = label;
                        name
                    })?;
                    continue;
                }
                let resolved: Vec<Cow<'_, Candidate>> =
                    members.iter().map(|&m| parts.get(m)).collect();
                let consumer = &resolved[0];
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
                for p in &resolved[1..] {
                    match acc.disjoint_union(g, &p.sub_graph) {
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
                push(seen, acc, &mut |_| names().1)?;
            }
        }
    }
    Ok(())
}
