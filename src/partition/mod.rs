//! `collage partition`: enumerate candidates, price them, search for the cheapest cover,
//! coalesce and rewrite (collage-semantics §10–§16, with BRIEF's corrections).
//!
//! * Every BYOC target's greedy `partition_for_X`-style regions ([`greedy`]) are offered as
//!   candidates too, so the search space contains the greedy placement and the optimum is never
//!   worse than it (the RFC's success metric 3), even where greedy regions exceed the depth
//!   limits.
//! * Candidates are priced once per structure and target ([`crate::cost::cache`]); each
//!   candidate of a target with a `transition` block also pays that target's transition
//!   penalty ([`transition_penalty`]).
//! * The search ([`crate::search`]) is exact; baselines are searches over subsets of the same
//!   candidates with the same costs. Candidates with several exits (greedy regions) can need
//!   each other's values both ways; the search never chooses such a pair ([`Acyclic`]).
//! * Finalize ([`finalize`]): touching chosen partitions of the same BYOC target are coalesced
//!   while their union stays convex; the result is rewritten in TVM's encoding and checked to
//!   equal the input once the partition functions are inlined.

pub mod finalize;
pub mod greedy;

use crate::cost::{cache, Cost, Estimator};
use crate::dataflow::IndexSet;
use crate::enumerate::{Candidate, DataflowGraph, Limits, SubGraph};
use crate::ir::{Expr, Module};
use crate::ruletree::Program;
use crate::search::{self, Compatible, Item, SearchError};

/// Partitioning options.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Depth limits for candidates.
    pub limits: Limits,
    /// Search options.
    pub search: search::Options,
    /// Compute the baselines.
    pub baselines: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            limits: Limits::default(),
            search: search::Options::default(),
            baselines: true,
        }
    }
}

/// A chosen partition (after coalescing).
#[derive(Clone, Debug)]
pub struct Partition {
    /// Target index.
    pub target: usize,
    /// The nodes, with nested `Primitive`/`Composite` structure for BYOC targets.
    pub sub_graph: SubGraph,
    /// Cost, penalty included (the sum of its parts for coalesced partitions).
    pub cost: f64,
    /// The chosen candidates it is made of.
    pub parts: Vec<usize>,
    /// Name in the report and, for BYOC targets, of the global function.
    pub name: String,
}

/// A baseline placement and its cost (`None` when it cannot cover the function).
#[derive(Clone, Debug, PartialEq)]
pub struct Baseline {
    /// `tvm`, `<target>` (that target alone with the native targets and the host), or
    /// `greedy:<target>`.
    pub name: String,
    /// Its cost.
    pub cost: Option<f64>,
}

/// Counters for the report.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Candidates offered to the search.
    pub candidates: usize,
    /// Estimator calls.
    pub estimates: usize,
    /// States expanded by the main search.
    pub states_expanded: usize,
}

/// The result of partitioning one function.
pub struct Plan {
    /// All candidates (enumerated plus greedy regions).
    pub candidates: Vec<Candidate>,
    /// Estimated cost of each candidate, without penalty.
    pub costs: Vec<Cost>,
    /// Transition penalty of each candidate.
    pub penalties: Vec<f64>,
    /// Chosen candidates, in search order.
    pub chosen: Vec<usize>,
    /// The partitions after coalescing, in node order.
    pub partitions: Vec<Partition>,
    /// Total cost.
    pub total: f64,
    /// Baselines.
    pub baselines: Vec<Baseline>,
    /// Counters.
    pub stats: Stats,
}

impl Plan {
    /// Total cost of a candidate as the search sees it (+∞ when unusable).
    pub fn cost_of(&self, k: usize) -> f64 {
        search_cost(self.costs[k], self.penalties[k])
    }

    /// The search items of the candidates.
    pub fn items(&self) -> Vec<Item> {
        (0..self.candidates.len())
            .map(|k| Item {
                nodes: self.candidates[k].sub_graph.inside.iter().collect(),
                cost: self.cost_of(k),
            })
            .collect()
    }
}

/// The cost the search uses: estimate plus penalty, or +∞ when the estimate is not usable.
fn search_cost(cost: Cost, penalty: f64) -> f64 {
    if cost.is_known() {
        cost.seconds() + penalty
    } else {
        f64::INFINITY
    }
}

/// Why a function cannot be partitioned.
#[derive(Clone, Debug, PartialEq)]
pub enum PartitionError {
    /// No usable candidate covers the node.
    Uncovered {
        /// The node.
        node: usize,
        /// Candidates containing it whose cost is invalid or unknown: (target, cost).
        unusable: Vec<(usize, Cost)>,
    },
    /// No disjoint combination of candidates covers every node.
    NoCover {
        /// The lowest node no state could cover.
        node: usize,
    },
    /// Rewriting failed (a bug).
    Rewrite(String),
}

/// Phases reported to a progress display.
pub trait Progress {
    /// A phase starts (`total` steps, 0 if unknown).
    fn phase(&self, name: &str, total: usize);
    /// Steps done in the current phase.
    fn step(&self, done: usize);
}

/// A progress display that shows nothing.
pub struct Silent;

impl Progress for Silent {
    fn phase(&self, _: &str, _: usize) {}
    fn step(&self, _: usize) {}
}

/// Partitions the function of `g`.
pub fn partition(
    g: &DataflowGraph<'_>,
    program: &Program,
    estimator: &dyn Estimator,
    opts: &Options,
    progress: &dyn Progress,
) -> Result<Plan, PartitionError> {
    progress.phase("enumerating candidates", 0);
    let mut candidates = crate::enumerate::enumerate(g, program, &opts.limits).candidates;
    let mut greedy_regions: Vec<(usize, Vec<usize>)> = Vec::new();
    for t in 0..program.targets.len() {
        if program.targets[t].compiler.is_none() {
            continue;
        }
        let mut mine = Vec::new();
        for region in greedy::regions(g, &candidates, t) {
            let existing = candidates
                .iter()
                .position(|c| c.target == t && c.sub_graph == region.sub_graph);
            mine.push(existing.unwrap_or_else(|| {
                candidates.push(Candidate {
                    rule_name: format!("{}.greedy", program.targets[t].name),
                    ..region
                });
                candidates.len() - 1
            }));
        }
        greedy_regions.push((t, mine));
    }
    progress.phase("estimating costs", candidates.len());
    let est = cache::estimate_all(g, program, &candidates, estimator, &|d, _| progress.step(d));
    let penalties: Vec<f64> = candidates
        .iter()
        .map(|c| transition_penalty(g, program, c))
        .collect();
    let items: Vec<Item> = candidates
        .iter()
        .zip(&est.costs)
        .zip(&penalties)
        .map(|((c, &cost), &p)| Item {
            nodes: c.sub_graph.inside.iter().collect(),
            cost: search_cost(cost, p),
        })
        .collect();
    progress.phase("searching", 0);
    let acyclic = Acyclic::new(g, &candidates);
    let sol = match search::search_among(g.len(), &items, &|_| true, &acyclic, opts.search) {
        Ok(s) => s,
        Err(SearchError::Uncovered { node }) => {
            let unusable = candidates
                .iter()
                .zip(&est.costs)
                .filter(|(c, _)| c.sub_graph.inside.contains(node))
                .map(|(c, &cost)| (c.target, cost))
                .collect();
            return Err(PartitionError::Uncovered { node, unusable });
        }
        Err(SearchError::NoCover { node }) => return Err(PartitionError::NoCover { node }),
    };
    let mut baselines = Vec::new();
    if opts.baselines {
        progress.phase("baselines", 0);
        baselines = compute_baselines(
            g,
            program,
            &candidates,
            &greedy_regions,
            &items,
            &acyclic,
            opts,
        );
    }
    let stats = Stats {
        candidates: candidates.len(),
        estimates: est.calls,
        states_expanded: sol.states_expanded,
    };
    let mut plan = Plan {
        candidates,
        costs: est.costs,
        penalties,
        chosen: sol.chosen,
        partitions: Vec::new(),
        total: sol.total,
        baselines,
        stats,
    };
    plan.partitions = finalize::coalesce(g, program, &plan);
    Ok(plan)
}

/// The transition penalty of a candidate: its target's `transition` latency once, plus the
/// activations crossing its boundary (values entering from outside, constants excepted, and
/// values leaving it) at the transition bandwidth. Host candidates pay nothing.
pub fn transition_penalty(g: &DataflowGraph<'_>, program: &Program, c: &Candidate) -> f64 {
    let t = &program.targets[c.target];
    if t.is_host || (t.transition.latency.is_none() && t.transition.bandwidth.is_none()) {
        return 0.0;
    }
    let mut p = t.transition.latency.unwrap_or(0.0);
    if let Some(bw) = t.transition.bandwidth.filter(|&b| b > 0.0) {
        let inside = &c.sub_graph.inside;
        let mut bytes = 0.0;
        for i in c.sub_graph.input.iter() {
            let is_const = g
                .expr(i)
                .is_some_and(|e| matches!(g.module.expr(e), Expr::Const(_)));
            if !is_const {
                bytes += crate::cost::analytic::node_bytes(g, i);
            }
        }
        for i in c.sub_graph.exit.iter() {
            if inside.contains(i) && !g.is_external(i) {
                bytes += crate::cost::analytic::node_bytes(g, i);
            }
        }
        p += bytes / bw;
    }
    p
}

/// Which targets are native (not BYOC, not host).
fn is_native(program: &Program, t: usize) -> bool {
    let t = &program.targets[t];
    t.compiler.is_none() && !t.is_host
}

/// The cost of the best cover using only the candidates `keep` allows.
fn restricted(
    n: usize,
    items: &[Item],
    keep: &dyn Fn(usize) -> bool,
    compat: &dyn Compatible,
    opts: &Options,
) -> Option<f64> {
    search::search_among(n, items, keep, compat, opts.search)
        .ok()
        .map(|s| s.total)
}

/// The search constraint that chosen candidates can be rewritten one after the other: no
/// value may leave one candidate and flow, through others, back into it. Each candidate is
/// convex, and a candidate with one exit cannot be on such a cycle unless a candidate with
/// several exits is too (all its nodes lead to its exit), so only candidates with several
/// exits (greedy regions, rules with `max_exits` above 1) are constrained.
pub struct Acyclic<'a, 'g> {
    g: &'a DataflowGraph<'g>,
    candidates: &'a [Candidate],
    forward: bool,
}

impl<'a, 'g> Acyclic<'a, 'g> {
    /// The constraint for these candidates.
    pub fn new(g: &'a DataflowGraph<'g>, candidates: &'a [Candidate]) -> Self {
        Acyclic {
            g,
            candidates,
            forward: edges_go_forward(g),
        }
    }
}

/// Whether every edge goes from a lower to a higher index (true unless a recursive function
/// refers back to itself).
pub fn edges_go_forward(g: &DataflowGraph<'_>) -> bool {
    (0..g.len()).all(|i| g.outputs(i).iter().all(|o| o.index() > i))
}

impl Compatible for Acyclic<'_, '_> {
    fn constrained(&self, k: usize) -> bool {
        self.candidates[k].sub_graph.exit.count() > 1
    }

    fn compatible(&self, chosen: &[usize], k: usize) -> bool {
        let mut parts: Vec<&IndexSet> = chosen
            .iter()
            .map(|&j| &self.candidates[j].sub_graph.inside)
            .collect();
        parts.push(&self.candidates[k].sub_graph.inside);
        !returns_to(self.g, &parts, parts.len() - 1, self.forward)
    }
}

/// Whether, with each of the disjoint `parts` run as one unit (all its inputs before any of
/// its outputs) and every other node on its own, some path leaves `parts[from]` and comes back.
/// `forward`: [`edges_go_forward`], which allows pruning.
pub fn returns_to(g: &DataflowGraph<'_>, parts: &[&IndexSet], from: usize, forward: bool) -> bool {
    const ALONE: u32 = u32::MAX;
    let mut unit = vec![ALONE; g.len()];
    // When edges go from lower to higher indices, a node on its own above every part's nodes
    // cannot lead back into a part.
    let mut last = if forward { 0 } else { usize::MAX };
    for (p, s) in parts.iter().enumerate() {
        for i in s.iter() {
            unit[i] = p as u32;
            if forward {
                last = last.max(i);
            }
        }
    }
    let from_unit = from as u32;
    let mut seen = vec![false; g.len()];
    let mut part_done = vec![false; parts.len()];
    let mut stack: Vec<usize> = Vec::new();
    let push_outputs = |i: usize, own: u32, stack: &mut Vec<usize>, seen: &mut [bool]| {
        for o in g.outputs(i) {
            let o = o.index();
            if unit[o] != own && !seen[o] && (unit[o] != ALONE || o < last) {
                seen[o] = true;
                stack.push(o);
            }
        }
    };
    for i in parts[from].iter() {
        push_outputs(i, from_unit, &mut stack, &mut seen);
    }
    while let Some(v) = stack.pop() {
        let u = unit[v];
        if u == from_unit {
            return true;
        }
        if u == ALONE {
            push_outputs(v, ALONE, &mut stack, &mut seen);
        } else if !part_done[u as usize] {
            part_done[u as usize] = true;
            for i in parts[u as usize].iter() {
                push_outputs(i, u, &mut stack, &mut seen);
            }
        }
    }
    false
}

fn compute_baselines(
    g: &DataflowGraph<'_>,
    program: &Program,
    candidates: &[Candidate],
    greedy_regions: &[(usize, Vec<usize>)],
    items: &[Item],
    acyclic: &Acyclic<'_, '_>,
    opts: &Options,
) -> Vec<Baseline> {
    let n = g.len();
    let base = |t: usize| is_native(program, t) || program.targets[t].is_host;
    let mut out = vec![Baseline {
        name: "tvm".into(),
        cost: restricted(n, items, &|k| base(candidates[k].target), acyclic, opts),
    }];
    for (ti, t) in program.targets.iter().enumerate() {
        if t.compiler.is_none() {
            continue;
        }
        out.push(Baseline {
            name: t.name.clone(),
            cost: restricted(
                n,
                items,
                &|k| base(candidates[k].target) || candidates[k].target == ti,
                acyclic,
                opts,
            ),
        });
        // Greedy: the target's greedy regions, and the native targets and host elsewhere.
        let regions: &[usize] = greedy_regions
            .iter()
            .find(|(t, _)| *t == ti)
            .map_or(&[], |(_, r)| r.as_slice());
        let mut taken = IndexSet::new(n);
        for &k in regions {
            taken.union_with(&candidates[k].sub_graph.inside);
        }
        out.push(Baseline {
            name: format!("greedy:{}", t.name),
            cost: restricted(
                n,
                items,
                &|k| {
                    regions.contains(&k)
                        || (base(candidates[k].target)
                            && !candidates[k].sub_graph.inside.intersects(&taken))
                },
                acyclic,
                opts,
            ),
        });
    }
    out
}

/// The best total cost when candidate `k` is forced into the cover (for `--explain`).
pub fn best_with(g: &DataflowGraph<'_>, plan: &Plan, k: usize, opts: &Options) -> Option<f64> {
    let forced = &plan.candidates[k].sub_graph.inside;
    let items = plan.items();
    let keep = |j: usize| j == k || !plan.candidates[j].sub_graph.inside.intersects(forced);
    let acyclic = Acyclic::new(g, &plan.candidates);
    restricted(g.len(), &items, &keep, &acyclic, opts)
}

/// Rewrites the module's `@main` with the plan's partitions in TVM's encoding and checks that
/// inlining the partition functions gives the input back.
pub fn rewrite(
    g: &DataflowGraph<'_>,
    program: &Program,
    plan: &Plan,
) -> Result<Module, PartitionError> {
    finalize::rewrite(g, program, &plan.partitions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceMap;

    #[test]
    fn crossed_partitions_with_two_exits_form_a_cycle() {
        let text = "#[version = \"0.0.5\"]\n\
            def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {\n  \
            %0 = nn.relu(%x);\n  %1 = abs(%y);\n  %2 = add(%0, %1);\n  \
            %3 = subtract(%1, %0);\n  (%2, %3)\n}\n";
        let mut sources = SourceMap::new();
        let file = sources.add("t.relay", text);
        let m = match crate::relay::load(&sources, file) {
            Ok(m) => m,
            Err(d) => panic!("{}", d.render_plain(&sources)),
        };
        let g = DataflowGraph::new(&m, m.main().unwrap());
        let node = |label: &str| (0..g.len()).find(|&i| g.label[i] == label).unwrap();
        let (relu, abs, add, sub) = (node("nn.relu"), node("abs"), node("add"), node("subtract"));
        let set = |a: usize, b: usize| IndexSet::from_indices(g.len(), [a, b]);
        let single = |a: usize| IndexSet::from_indices(g.len(), [a]);
        let forward = edges_go_forward(&g);
        assert!(forward);
        for fwd in [forward, false] {
            let (p, q) = (set(relu, add), set(abs, sub));
            assert!(returns_to(&g, &[&p, &q], 1, fwd));
            assert!(returns_to(&g, &[&p, &q], 0, fwd));
            let (q1, q2) = (single(abs), single(sub));
            assert!(!returns_to(&g, &[&q1, &q2, &p], 2, fwd));
            assert!(!returns_to(&g, &[&p, &q1, &q2], 0, fwd));
        }
    }
}
