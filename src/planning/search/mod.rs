//! The search for the cheapest partitioning (docs/partition.md, "The search"): exact by default,
//! where TVM's prototype could take invalid candidates.
//!
//! States are sets of covered nodes; an edge adds one candidate that is disjoint from the
//! state and contains its lowest uncovered node. Every exact cover of the nodes by disjoint
//! candidates is reachable this way (order its candidates by their first node), so the cheapest
//! path from the empty set to the full set is the cheapest partitioning.
//!
//! The search is A* with an admissible and consistent lower bound: every node is charged the
//! smallest share `⌊cost(c) / |c|⌋` over the candidates `c` containing it, and the bound of a
//! state is the sum over its uncovered nodes. A cover pays `Σ cost(c) ≥ Σ_c Σ_{v∈c} ⌊cost(c)/|c|⌋`,
//! which is at least the bound, and one edge lowers the bound by at most its own cost, so the
//! first time the full set is popped its cost is optimal. With [`Options::lower_bound`] off it
//! is plain Dijkstra. Either way:
//! * costs are added exactly, as integers ([`units`]), so the total of a cover does not depend
//!   on the order of its candidates, and a search among fewer candidates (a baseline) can never
//!   come out below the full search by a rounding;
//! * candidates with an `INVALID` or `UNKNOWN` cost are never taken (TVM's prototype could pick
//!   one whose cost was infinite), nor candidates dearer than [`crate::planning::cost::MAX_SECONDS`], which
//!   the estimators never give;
//! * costs are rounded up to the search's unit, so a total is never below any of its parts and
//!   exceeds their exact sum by less than one unit per candidate ([`units`]);
//! * ties are broken deterministically: by cost, then by the order in which states were first
//!   reached, and a state's best path changes only on a strictly cheaper one, so among equal
//!   candidates the one earlier in the candidate list wins;
//! * when no cover exists, the error names the lowest node no reachable state could cover;
//! * a [`Compatible`] constraint can forbid combinations of candidates that sets of covered
//!   nodes cannot express. The partitioner uses it for acyclicity: candidates with several
//!   exits can depend on each other both ways (each convex, neither rewritable before the
//!   other). The constraint is checked along each state's best path, so with it the search is
//!   exact among the covers it allows only when no state's best path rules out an extension
//!   that another, equally covering path would allow; without constrained items it is exact.

mod units;

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use units::Units;

/// Search options.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Use the lower bound (A*). Off: Dijkstra. The result is the same.
    pub lower_bound: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { lower_bound: true }
    }
}

/// A candidate as the search sees it: the nodes it covers and its cost.
#[derive(Clone, Debug)]
pub struct Item {
    /// Covered nodes, increasing.
    pub nodes: Vec<usize>,
    /// Its cost (costs that are not finite, negative or above [`crate::planning::cost::MAX_SECONDS`] are
    /// never taken).
    pub cost: f64,
}

/// The cheapest cover.
#[derive(Clone, Debug, PartialEq)]
pub struct Solution {
    /// The chosen items, in the order the search added them (by first node).
    pub chosen: Vec<usize>,
    /// Their total cost.
    pub total: f64,
    /// States taken off the queue.
    pub states_expanded: usize,
}

/// Why there is no cover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SearchError {
    /// Node `node` is in no usable candidate at all.
    Uncovered {
        /// The node.
        node: usize,
    },
    /// Every node is in some candidate, but no disjoint combination covers them all; `node` is
    /// the furthest lowest-uncovered node any state reached.
    NoCover {
        /// The node.
        node: usize,
    },
}

/// A constraint on which items may be chosen together.
pub trait Compatible {
    /// Whether item `k` is subject to the constraint at all.
    fn constrained(&self, k: usize) -> bool;
    /// Whether constrained item `k` may join the constrained items `chosen` (non-empty).
    fn compatible(&self, chosen: &[usize], k: usize) -> bool;
}

/// No constraint.
pub struct Unconstrained;

impl Compatible for Unconstrained {
    fn constrained(&self, _: usize) -> bool {
        false
    }

    fn compatible(&self, _: &[usize], _: usize) -> bool {
        true
    }
}

/// A candidate's nodes as (word, mask) pairs.
struct Mask(Vec<(u32, u64)>);

impl Mask {
    fn new(nodes: &[usize]) -> Mask {
        let mut out: Vec<(u32, u64)> = Vec::new();
        for &i in nodes {
            let w = (i / 64) as u32;
            let b = 1u64 << (i % 64);
            match out.last_mut() {
                Some((lw, m)) if *lw == w => *m |= b,
                _ => out.push((w, b)),
            }
        }
        Mask(out)
    }

    fn intersects(&self, covered: &[u64]) -> bool {
        self.0
            .iter()
            .any(|&(w, m)| covered_word(covered, w as usize) & m != 0)
    }
}

/// A covered set in compact form: `[base, words from word `base` on...]`, without trailing zero
/// words; every word before `base` is full. With `base = next / 64`, states differ only in a
/// short window after their lowest uncovered node, so keys stay small however large the graph.
fn covered_word(covered: &[u64], w: usize) -> u64 {
    let base = covered[0] as usize;
    if w < base {
        !0
    } else {
        covered.get(1 + w - base).copied().unwrap_or(0)
    }
}

struct State {
    /// The covered set in compact form (see [`covered_word`]).
    covered: Box<[u64]>,
    /// Lowest uncovered node (== n when everything is covered).
    next: usize,
    /// Cost so far and lower bound of the rest, in [`Units`].
    cost: u128,
    bound: u128,
    pred: u32,
    via: u32,
    /// Constrained items on the best path.
    constrained: u32,
    done: bool,
}

/// Heap entry: smallest (cost + bound), then the earliest-reached state.
#[derive(PartialEq)]
struct Entry(u128, u32);

impl Eq for Entry {}

impl Ord for Entry {
    fn cmp(&self, other: &Entry) -> Ordering {
        other.0.cmp(&self.0).then_with(|| other.1.cmp(&self.1))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Entry) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

const NONE: u32 = u32::MAX;

/// The cheapest cover of nodes `0..n` by pairwise-disjoint items.
pub fn search(n: usize, items: &[Item], opts: Options) -> Result<Solution, SearchError> {
    search_among(n, items, &|_| true, &Unconstrained, opts)
}

/// [`search`] using only the items `allowed` accepts, in combinations `compat` accepts.
pub fn search_among(
    n: usize,
    items: &[Item],
    allowed: &dyn Fn(usize) -> bool,
    compat: &dyn Compatible,
    opts: Options,
) -> Result<Solution, SearchError> {
    let usable_item =
        |it: &Item| crate::planning::cost::check_seconds(it.cost).is_ok() && !it.nodes.is_empty();
    let allowed: Vec<bool> = (0..items.len()).map(allowed).collect();
    let usable = |k: usize| allowed[k] && usable_item(&items[k]);
    let max_cost = (0..items.len())
        .filter(|&k| usable(k))
        .map(|k| items[k].cost)
        .fold(0.0, f64::max);
    let units = Units::new(max_cost, n);
    let cost_units: Vec<u128> = items
        .iter()
        .enumerate()
        .map(|(k, it)| if usable(k) { units.of(it.cost) } else { 0 })
        .collect();
    // Buckets by first node, in item order.
    let mut bucket: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut share: Vec<Option<u128>> = vec![None; n];
    for (k, it) in items.iter().enumerate() {
        if !usable(k) || it.nodes.iter().any(|&i| i >= n) {
            continue;
        }
        bucket[it.nodes[0]].push(k as u32);
        let s = cost_units[k] / it.nodes.len() as u128;
        for &i in &it.nodes {
            if share[i].is_none_or(|old| s < old) {
                share[i] = Some(s);
            }
        }
    }
    if let Some(node) = (0..n).find(|&i| share[i].is_none()) {
        return Err(SearchError::Uncovered { node });
    }
    let share: Vec<u128> = share
        .into_iter()
        .map(|s| if opts.lower_bound { s.unwrap_or(0) } else { 0 })
        .collect();
    let masks: Vec<Option<Mask>> = items
        .iter()
        .enumerate()
        .map(|(k, it)| usable(k).then(|| Mask::new(&it.nodes)))
        .collect();
    let constrained: Vec<bool> = (0..items.len()).map(|k| compat.constrained(k)).collect();
    let mut states: Vec<State> = Vec::new();
    let mut index: HashMap<Box<[u64]>, u32> = HashMap::new();
    let mut heap = BinaryHeap::new();
    let start: Box<[u64]> = vec![0u64].into_boxed_slice();
    let bound0: u128 = share.iter().sum();
    index.insert(start.clone(), 0);
    states.push(State {
        covered: start,
        next: 0,
        cost: 0,
        bound: bound0,
        pred: NONE,
        via: NONE,
        constrained: 0,
        done: false,
    });
    heap.push(Entry(bound0, 0));
    let mut expanded = 0;
    let mut furthest = 0;
    let mut scratch: Vec<u64> = Vec::new();
    let mut keybuf: Vec<u64> = Vec::new();
    while let Some(Entry(key, s)) = heap.pop() {
        let st = &states[s as usize];
        if st.done || key != st.cost + st.bound {
            continue;
        }
        states[s as usize].done = true;
        expanded += 1;
        let st = &states[s as usize];
        let next = st.next;
        furthest = furthest.max(next);
        if next == n {
            let total = units.seconds(st.cost);
            let mut chosen = Vec::new();
            let mut at = s;
            while states[at as usize].pred != NONE {
                chosen.push(states[at as usize].via as usize);
                at = states[at as usize].pred;
            }
            chosen.reverse();
            return Ok(Solution {
                chosen,
                total,
                states_expanded: expanded,
            });
        }
        let (base_cost, base_bound) = (st.cost, st.bound);
        for &k in &bucket[next] {
            let Some(mask) = &masks[k as usize] else {
                continue;
            };
            let st = &states[s as usize];
            if mask.intersects(&st.covered) {
                continue;
            }
            // The union, as words from `base` on (every mask word is at or after `base`, since
            // the item's first node is `next`).
            let base = st.covered[0] as usize;
            scratch.clear();
            scratch.extend_from_slice(&st.covered[1..]);
            for &(w, m) in &mask.0 {
                let i = w as usize - base;
                if scratch.len() <= i {
                    scratch.resize(i + 1, 0);
                }
                scratch[i] |= m;
            }
            let mut nx = next;
            while nx < n && scratch.get(nx / 64 - base).copied().unwrap_or(0) >> (nx % 64) & 1 == 1
            {
                nx += 1;
            }
            let new_base = nx / 64;
            keybuf.clear();
            keybuf.push(new_base as u64);
            keybuf.extend_from_slice(&scratch[(new_base - base).min(scratch.len())..]);
            while keybuf.len() > 1 && keybuf.last() == Some(&0) {
                keybuf.pop();
            }
            let item = &items[k as usize];
            let cost = base_cost + cost_units[k as usize];
            let existing = index.get(keybuf.as_slice()).copied();
            if let Some(t) = existing {
                let ts = &states[t as usize];
                if ts.done || cost >= ts.cost {
                    continue;
                }
            }
            let mut path_constrained = states[s as usize].constrained;
            if constrained[k as usize] {
                if path_constrained > 0 {
                    let mut chosen = Vec::new();
                    let mut at = s;
                    while states[at as usize].pred != NONE {
                        let v = states[at as usize].via as usize;
                        if constrained[v] {
                            chosen.push(v);
                        }
                        at = states[at as usize].pred;
                    }
                    if !compat.compatible(&chosen, k as usize) {
                        continue;
                    }
                }
                path_constrained += 1;
            }
            match existing {
                Some(t) => {
                    let ts = &mut states[t as usize];
                    ts.cost = cost;
                    ts.pred = s;
                    ts.via = k;
                    ts.constrained = path_constrained;
                    heap.push(Entry(cost + ts.bound, t));
                }
                None => {
                    // Exact: the item's nodes were uncovered, so their shares are in the bound.
                    let bound = base_bound - item.nodes.iter().map(|&i| share[i]).sum::<u128>();
                    let t = states.len() as u32;
                    let covered: Box<[u64]> = keybuf.clone().into_boxed_slice();
                    index.insert(covered.clone(), t);
                    states.push(State {
                        covered,
                        next: nx,
                        cost,
                        bound,
                        pred: s,
                        via: k,
                        constrained: path_constrained,
                        done: false,
                    });
                    heap.push(Entry(cost + bound, t));
                }
            }
        }
    }
    Err(SearchError::NoCover { node: furthest })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(nodes: &[usize], cost: f64) -> Item {
        Item {
            nodes: nodes.to_vec(),
            cost,
        }
    }

    #[test]
    fn picks_the_cheaper_cover() {
        let items = vec![
            item(&[0], 1.0),
            item(&[1], 1.0),
            item(&[0, 1], 1.5),
            item(&[2], 0.0),
        ];
        for lb in [false, true] {
            let s = search(3, &items, Options { lower_bound: lb }).unwrap();
            assert_eq!(s.chosen, vec![2, 3]);
            assert_eq!(s.total, 1.5);
        }
    }

    #[test]
    fn invalid_and_unknown_costs_are_never_taken() {
        let items = vec![
            item(&[0, 1], f64::INFINITY),
            item(&[0, 1], f64::NAN),
            item(&[0], 5.0),
            item(&[1], 5.0),
        ];
        let s = search(2, &items, Options::default()).unwrap();
        assert_eq!(s.chosen, vec![2, 3]);
        let only_bad = vec![item(&[0], f64::INFINITY)];
        assert_eq!(
            search(1, &only_bad, Options::default()),
            Err(SearchError::Uncovered { node: 0 })
        );
    }

    #[test]
    fn ties_go_to_the_earlier_candidate() {
        let items = vec![
            item(&[0, 1], 2.0),
            item(&[0, 1], 2.0),
            item(&[0], 1.0),
            item(&[1], 1.0),
        ];
        let s = search(2, &items, Options::default()).unwrap();
        assert_eq!(s.chosen, vec![0]);
    }

    #[test]
    fn incompatible_items_are_not_combined() {
        // Items 0 and 1 are cheapest together but may not be chosen together.
        struct NotBoth;
        impl Compatible for NotBoth {
            fn constrained(&self, k: usize) -> bool {
                k < 2
            }
            fn compatible(&self, chosen: &[usize], k: usize) -> bool {
                !(chosen.contains(&0) && k == 1 || chosen.contains(&1) && k == 0)
            }
        }
        let items = vec![
            item(&[0, 1], 1.0),
            item(&[2, 3], 1.0),
            item(&[0], 1.5),
            item(&[1], 1.5),
            item(&[2], 1.0),
            item(&[3], 1.25),
        ];
        for lb in [false, true] {
            let opts = Options { lower_bound: lb };
            let s = search_among(4, &items, &|_| true, &NotBoth, opts).unwrap();
            assert_eq!(s.chosen, vec![0, 4, 5]);
            assert_eq!(s.total, 3.25);
            assert_eq!(search(4, &items, opts).unwrap().total, 2.0);
        }
    }

    /// One cost far above the others (a broken measurement) used to set the unit of the whole
    /// search: 1e300 made every microsecond cost zero, the total 0 and the plan a tie-break.
    #[test]
    fn a_huge_cost_neither_hides_the_others_nor_is_taken() {
        for huge in [1e30, f32::MAX as f64, 1e300, f64::MAX] {
            let items = vec![
                item(&[0, 1], huge),
                item(&[0], 2e-6),
                item(&[1], 3e-6),
                item(&[0], 1e-6),
            ];
            for lb in [false, true] {
                let s = search(2, &items, Options { lower_bound: lb }).unwrap();
                assert_eq!(s.chosen, vec![3, 2], "{huge}");
                assert!(s.total >= 3e-6, "{huge}: {}", s.total);
                assert!((s.total - 4e-6).abs() < 1e-18, "{huge}: {}", s.total);
            }
        }
        // Within the ceiling the dear candidate is an ordinary one.
        let items = vec![
            item(&[0], crate::planning::cost::MAX_SECONDS),
            item(&[1], 1e-9),
        ];
        let s = search(2, &items, Options::default()).unwrap();
        assert!(s.total > crate::planning::cost::MAX_SECONDS, "{}", s.total);
    }

    #[test]
    fn no_cover_names_the_stuck_node() {
        // Every node is in two candidates, but any two of them overlap.
        let items = vec![item(&[0, 1], 1.0), item(&[1, 2], 1.0), item(&[0, 2], 1.0)];
        assert_eq!(
            search(3, &items, Options::default()),
            Err(SearchError::NoCover { node: 2 })
        );
    }
}
