//! `collage partition`: enumerate candidates, price them, search for the cheapest cover,
//! coalesce and rewrite (docs/partition.md; TVM's behaviour and where ours differs in
//! docs/collage.md).
//!
//! * Every BYOC target's greedy `partition_for_X`-style regions ([`greedy`]) are grown within
//!   the target's limits (depth, or its `region_depth`, exits, taps:
//!   [`crate::planning::enumerate::region_limits`]); they join the search as candidates. The search's cover is then
//!   never worse than any target's greedy placement (its regions and the cheapest native cover
//!   of the rest, the `greedy:<target>` baseline; the RFC's success metric 3), nor than any
//!   restricted baseline, which are searches over subsets of the same candidates.
//! * Candidates are priced once per structure and target ([`crate::planning::cost::cache`]); each
//!   candidate of a target with a `transition` block also pays that target's transition
//!   penalty ([`transition_penalty`]): its dispatch always, the crossing of devices only where
//!   its data may cross them ([`Crossings`]).
//! * The search ([`crate::planning::search`]) is exact; baselines are searches over subsets of the same
//!   candidates with the same costs.
//! * Finalize ([`finalize`]): touching chosen partitions of the same BYOC target are coalesced
//!   while their union stays convex; the result is rewritten in TVM's encoding and checked to
//!   equal the input once the partition functions are inlined.

pub mod finalize;
pub mod greedy;
pub mod inline;
pub mod prune;

use crate::analysis::dataflow::IndexSet;
use crate::ir::{Expr, Module, VirtualDevice};
use crate::planning::cost::{cache, Cost, Estimator};
use crate::planning::enumerate::{Candidate, DataflowGraph, Limits, SubGraph};
use crate::planning::search::{self, Compatible, Item, SearchError};
use crate::rules::ruletree::Program;

/// Partitioning options.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Depth limits for candidates.
    pub limits: Limits,
    /// Search options.
    pub search: search::Options,
    /// Compute the baselines.
    pub baselines: bool,
    /// Prune the candidates before the search (a heuristic; see [`prune`]).
    pub prune: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            limits: Limits::default(),
            search: search::Options::default(),
            baselines: true,
            prune: false,
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
    /// The candidates it is made of (`None` when it cannot cover the function).
    pub chosen: Option<Vec<usize>>,
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
    /// Each BYOC target's greedy placement: (target, its region candidates, its total cost;
    /// `None` without baselines or when it cannot cover the function).
    pub greedy: Vec<(usize, Vec<usize>, Option<f64>)>,
    /// Candidates before this index were enumerated; the rest are greedy regions that are not
    /// also enumerated candidates.
    pub enumerated: usize,
    /// Baselines.
    pub baselines: Vec<Baseline>,
    /// Counters.
    pub stats: Stats,
    /// Default depth limits lowered during enumeration (reported as W2205).
    pub lowered: Vec<crate::planning::enumerate::Lowered>,
}

impl Plan {
    /// Total cost of a candidate as the search sees it (+∞ when unusable).
    pub fn cost_of(&self, k: usize) -> f64 {
        search_cost(self.costs[k], self.penalties[k])
    }

    /// The search items of the candidates.
    pub fn items(&self) -> Vec<Item> {
        search_items(&self.candidates, &self.costs, &self.penalties)
    }
}

/// The search item of each candidate: its nodes, and its estimate plus penalty.
fn search_items(candidates: &[Candidate], costs: &[Cost], penalties: &[f64]) -> Vec<Item> {
    candidates
        .iter()
        .zip(costs)
        .zip(penalties)
        .map(|((c, &cost), &p)| Item {
            nodes: c.sub_graph.inside.iter().collect(),
            cost: search_cost(cost, p),
        })
        .collect()
}

/// The cost the search uses: estimate plus penalty, or +∞ when the estimate is not usable.
fn search_cost(cost: Cost, penalty: f64) -> f64 {
    if cost.is_known() {
        crate::planning::cost::add_seconds(cost.seconds(), penalty)
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
        /// Candidates containing it whose cost is invalid or unknown: (target, cost, why the
        /// estimator said so, where it did).
        unusable: Vec<(usize, Cost, Option<String>)>,
    },
    /// No disjoint combination of candidates covers every node.
    NoCover {
        /// The lowest node no state could cover.
        node: usize,
        /// Whether the candidates were pruned.
        pruned: bool,
    },
    /// Rewriting failed (a bug).
    Rewrite(String),
    /// Enumeration reached one of its limits.
    Limit(crate::planning::enumerate::LimitError),
}

/// Phases reported to a progress display.
pub trait Progress {
    /// A phase starts (`total` steps, 0 if unknown).
    fn phase(&self, name: &str, total: usize);
    /// Steps done in the current phase.
    fn step(&self, done: usize);
    /// Steps done in the current phase, out of a total that may have changed.
    fn steps(&self, done: usize, _total: usize) {
        self.step(done);
    }
}

/// A progress display that shows nothing.
pub struct Silent;

impl Progress for Silent {
    fn phase(&self, _: &str, _: usize) {}
    fn step(&self, _: usize) {}
}

/// Partitions the function of `g`, with no device constraints.
pub fn partition(
    g: &DataflowGraph<'_>,
    program: &Program,
    estimator: &dyn Estimator,
    opts: &Options,
    progress: &dyn Progress,
) -> Result<Plan, PartitionError> {
    partition_on_devices(g, program, estimator, opts, progress, None)
}

/// Whether a candidate may run where the devices were planned: the host runs no kernels and
/// may take anything; any other target's device must refine the planned device of every node
/// the candidate covers (docs/partition.md, step 2; docs/devices.md).
pub fn device_allows(
    g: &DataflowGraph<'_>,
    program: &Program,
    devices: &[VirtualDevice],
    c: &Candidate,
) -> bool {
    let t = &program.targets[c.target];
    t.is_host
        || c.sub_graph.inside.iter().all(|i| {
            g.expr(i)
                .and_then(|e| devices.get(e.index()))
                .is_none_or(|d| t.device.refines(d))
        })
}

/// Partitions the function of `g`. With `devices` (the planned device of every expression of
/// the graph's module), a candidate is kept only where [`device_allows`] it.
pub fn partition_on_devices(
    g: &DataflowGraph<'_>,
    program: &Program,
    estimator: &dyn Estimator,
    opts: &Options,
    progress: &dyn Progress,
    devices: Option<&[VirtualDevice]>,
) -> Result<Plan, PartitionError> {
    progress.phase("enumerating candidates", 0);
    let enumeration = crate::planning::enumerate::enumerate(g, program, &opts.limits)
        .map_err(PartitionError::Limit)?;
    // The limits the candidates were enumerated within (a default depth may have been
    // lowered): greedy regions and coalescing keep to the same ones.
    let limits = enumeration.limits;
    let lowered = enumeration.lowered;
    let mut candidates = enumeration.candidates;
    // BYOC partitions become functions called from the function body: their nodes must be in
    // the body's own block, not inside a branch or a nested function literal.
    candidates.retain(|c| {
        program.targets[c.target].compiler.is_none()
            || c.sub_graph
                .inside
                .iter()
                .all(|i| g.block[i] == Some(g.root))
    });
    if let Some(devices) = devices {
        candidates.retain(|c| device_allows(g, program, devices, c));
    }
    let enumerated = candidates.len();
    progress.phase("greedy regions", 0);
    // Each BYOC target's greedy regions, grown within its limits; a region that is not already
    // one of its target's candidates joins the candidates.
    let mut greedy_regions: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut by_target: Vec<Vec<usize>> = vec![Vec::new(); program.targets.len()];
    for (k, c) in candidates.iter().enumerate() {
        by_target[c.target].push(k);
    }
    for (t, own) in by_target.iter().enumerate() {
        if program.targets[t].compiler.is_none() {
            continue;
        }
        let config = crate::planning::enumerate::region_limits(&program.targets[t], &limits);
        let regions = greedy::regions(g, &candidates, own, &config);
        // A union may equal one of the target's candidates (a target's candidates are
        // distinct); a candidate taken alone is itself.
        let unions: rustc_hash::FxHashMap<&IndexSet, usize> = regions
            .iter()
            .enumerate()
            .filter_map(|(r, region)| match region {
                greedy::Region::Union(u) => Some((&u.inside, r)),
                greedy::Region::Candidate(_) => None,
            })
            .collect();
        let mut found: Vec<Option<usize>> = vec![None; regions.len()];
        if !unions.is_empty() {
            for &k in own {
                let c = &candidates[k];
                if let Some(&r) = unions.get(&c.sub_graph.inside) {
                    if matches!(&regions[r], greedy::Region::Union(u) if **u == c.sub_graph) {
                        found[r] = Some(k);
                    }
                }
            }
        }
        drop(unions);
        let mut mine = Vec::new();
        for (region, found) in regions.into_iter().zip(found) {
            mine.push(match (region, found) {
                (greedy::Region::Candidate(k), _) | (_, Some(k)) => k,
                (greedy::Region::Union(sub_graph), None) => {
                    candidates.push(Candidate {
                        target: t,
                        sub_graph: *sub_graph,
                        rule_name: format!("{}.greedy", program.targets[t].name),
                    });
                    candidates.len() - 1
                }
            });
        }
        greedy_regions.push((t, mine));
    }
    progress.phase("estimating costs", candidates.len());
    let est = cache::estimate_all(g, program, &candidates, estimator, &|d, t| {
        progress.steps(d, t)
    });
    let crossings = Crossings::new(g, program, &candidates, devices);
    let penalties: Vec<f64> = candidates
        .iter()
        .map(|c| transition_penalty(g, program, &crossings, c))
        .collect();
    let items = search_items(&candidates, &est.costs, &penalties);
    let pruned = opts
        .prune
        .then(|| prune::prune(g.len(), &candidates, &|_| true));
    let searchable = |k: usize| pruned.as_ref().is_none_or(|p| p[k]);
    progress.phase("searching", 0);
    let acyclic = Acyclic::new(g, &candidates);
    let best = match search::search_among(g.len(), &items, &searchable, &acyclic, opts.search) {
        Ok(s) => s,
        Err(SearchError::Uncovered { node }) => {
            let unusable = candidates
                .iter()
                .zip(est.costs.iter().zip(&est.why))
                .filter(|(c, _)| c.sub_graph.inside.contains(node))
                .map(|(c, (&cost, why))| (c.target, cost, why.clone()))
                .collect();
            return Err(PartitionError::Uncovered { node, unusable });
        }
        Err(SearchError::NoCover { node }) => {
            return Err(PartitionError::NoCover {
                node,
                pruned: opts.prune,
            })
        }
    };
    // The baselines, each BYOC target's greedy placement among them: its greedy regions, fixed,
    // and the cheapest cover of the rest by the native targets and the host. The search's cover
    // is never worse than any of them, since every candidate they use is a candidate of the
    // search too.
    let mut greedy_solutions: Vec<Option<search::Solution>> = vec![None; greedy_regions.len()];
    let mut baselines = Vec::new();
    if opts.baselines {
        progress.phase("baselines", 0);
        for ((_, regions), sol) in greedy_regions.iter().zip(&mut greedy_solutions) {
            *sol = greedy_placement(g, program, &candidates, regions, &items, &acyclic, opts);
        }
        baselines = compute_baselines(
            program,
            &greedy_regions,
            &greedy_solutions,
            &items,
            &acyclic,
            opts,
        );
    }
    let greedy_totals: Vec<Option<f64>> = greedy_solutions
        .iter()
        .map(|s| s.as_ref().map(|s| s.total))
        .collect();
    let stats = Stats {
        candidates: candidates.len(),
        estimates: est.calls,
        states_expanded: best.states_expanded,
    };
    let mut plan = Plan {
        candidates,
        costs: est.costs,
        penalties,
        chosen: best.chosen,
        partitions: Vec::new(),
        total: best.total,
        greedy: greedy_regions
            .into_iter()
            .zip(greedy_totals)
            .map(|((t, regions), total)| (t, regions, total))
            .collect(),
        enumerated,
        baselines,
        stats,
        lowered,
    };
    progress.phase("coalescing", 0);
    plan.partitions = finalize::coalesce(g, program, &plan, &limits);
    Ok(plan)
}

/// Where the values of a function may live, for pricing transitions: for every node, the
/// devices its value may be produced on and the devices it may be read on, as far as they can
/// be known before the search. A candidate's price cannot depend on which neighbours the search
/// picks, so a value counts as crossing devices when some target that may run the node on the
/// other side lives on another device: exact when every target that could be a neighbour shares
/// the candidate's device (the usual single-device case, where nothing is charged), an upper
/// bound otherwise.
///
/// Devices are compared by type and id (`cpu`, `cuda(0)`); a target without a device type may
/// live anywhere. The value of an operator call lives where the candidates covering it run;
/// tuples, projections, `on_device` and `device_copy` are looked through (a copy is a host
/// node: the partitions on both sides of it see each other's devices and pay for the crossing
/// through their transitions); parameters, constants and the function's result live on their
/// planned device where the model was planned, else on the host target's device.
pub struct Crossings {
    /// The devices in play, by (type, id); bit `k` of a mask is `devices[k]`.
    devices: Vec<(i32, Option<i32>)>,
    /// Per node: where its value may be produced.
    produced: Vec<u64>,
    /// Per node: where it may read its operands.
    reads: Vec<u64>,
}

/// A mask bit meaning "any device".
const ANYWHERE: u64 = 1 << 63;

impl Crossings {
    /// The crossings of a function's candidates. `planned` is the planned device of every
    /// expression, when the model was planned.
    pub fn new(
        g: &DataflowGraph<'_>,
        program: &Program,
        candidates: &[Candidate],
        planned: Option<&[VirtualDevice]>,
    ) -> Crossings {
        let mut x = Crossings {
            devices: Vec::new(),
            produced: vec![0; g.len()],
            reads: vec![0; g.len()],
        };
        let host = program
            .targets
            .iter()
            .find(|t| t.is_host)
            .map_or(ANYWHERE, |t| x.bit(&t.device));
        let target_bits: Vec<u64> = program.targets.iter().map(|t| x.bit(&t.device)).collect();
        // Where the kernels covering each node may run.
        let mut runs = vec![0u64; g.len()];
        for c in candidates {
            if !program.targets[c.target].is_host {
                for i in c.sub_graph.inside.iter() {
                    runs[i] |= target_bits[c.target];
                }
            }
        }
        let placed = |x: &mut Crossings, i: usize| -> u64 {
            let planned = g
                .expr(i)
                .and_then(|e| planned.and_then(|p| p.get(e.index())))
                .filter(|d| d.device_type.is_some());
            match planned {
                Some(d) => x.bit(d),
                None => host,
            }
        };
        let kernel = |i: usize| if runs[i] == 0 { ANYWHERE } else { runs[i] };
        // Producers first (post-DFS order puts operands before their users).
        for i in 0..g.len() {
            let inputs = || g.inputs(i).iter().map(|n| n.index());
            let look_through = |x: &Crossings| {
                inputs().fold(0, |m, j| m | if j < i { x.produced[j] } else { ANYWHERE })
            };
            x.produced[i] = match node_role(g, i) {
                Role::Glue => look_through(&x),
                Role::Kernel => kernel(i),
                Role::Leaf => placed(&mut x, i),
                Role::Root | Role::Other => ANYWHERE,
            };
        }
        // Readers last.
        for i in (0..g.len()).rev() {
            let look_through = |x: &Crossings| {
                let outs = g.outputs(i);
                if outs.is_empty() {
                    return host;
                }
                outs.iter().fold(0, |m, o| {
                    let o = o.index();
                    m | if o > i { x.reads[o] } else { ANYWHERE }
                })
            };
            x.reads[i] = match node_role(g, i) {
                Role::Glue => look_through(&x),
                Role::Kernel => kernel(i),
                Role::Root => {
                    let body = g.inputs(i).iter().map(|n| n.index()).max();
                    body.map_or(host, |b| placed(&mut x, b))
                }
                Role::Leaf | Role::Other => ANYWHERE,
            };
        }
        x
    }

    /// The mask bit of a device.
    fn bit(&mut self, d: &VirtualDevice) -> u64 {
        let Some(ty) = d.device_type else {
            return ANYWHERE;
        };
        let key = (ty, d.virtual_device_id);
        let k = match self.devices.iter().position(|&x| x == key) {
            Some(k) => k,
            None => {
                self.devices.push(key);
                self.devices.len() - 1
            }
        };
        if k < 63 {
            1 << k
        } else {
            ANYWHERE
        }
    }

    /// Whether a value that may be on the devices of `mask` crosses to or from `device`.
    fn crosses(&self, device: &VirtualDevice, mask: u64) -> bool {
        let Some(ty) = device.device_type else {
            return true;
        };
        match self
            .devices
            .iter()
            .position(|&x| x == (ty, device.virtual_device_id))
        {
            Some(k) if k < 63 => mask & !(1u64 << k) != 0,
            _ => true,
        }
    }
}

/// What a node is to the crossing analysis.
enum Role {
    /// A tuple, a projection, an `on_device` annotation or a `device_copy`: no data of its own
    /// (a copy's data comes from its operand's producer).
    Glue,
    /// A call a kernel runs.
    Kernel,
    /// A parameter or a constant.
    Leaf,
    /// The function node.
    Root,
    /// Anything else (function literals, lets, ifs, operator references).
    Other,
}

fn node_role(g: &DataflowGraph<'_>, i: usize) -> Role {
    if g.is_external(i) {
        return Role::Root;
    }
    let Some(e) = g.expr(i) else {
        return Role::Other;
    };
    match g.module.expr(e) {
        Expr::Tuple(_) | Expr::Proj { .. } => Role::Glue,
        Expr::Var(_) | Expr::Const(_) => Role::Leaf,
        Expr::Call {
            callee: crate::ir::Callee::Op(op),
            ..
        } => match crate::ops::registry().get(*op).op {
            crate::ops::Op::OnDevice | crate::ops::Op::DeviceCopy => Role::Glue,
            _ => Role::Kernel,
        },
        Expr::Call { .. } => Role::Kernel,
        _ => Role::Other,
    }
}

/// The transition penalty of a candidate. Its target's `dispatch` is paid by every partition;
/// where some of its activations cross devices ([`Crossings`]: values entering from another
/// device, constants excepted, and values read on another device), it also pays the
/// `latency` once and those activations' bytes at the transition `bandwidth`. Host candidates
/// pay nothing.
pub fn transition_penalty(
    g: &DataflowGraph<'_>,
    program: &Program,
    crossings: &Crossings,
    c: &Candidate,
) -> f64 {
    let t = &program.targets[c.target];
    let tr = &t.transition;
    if t.is_host || *tr == crate::rules::ruletree::Transition::default() {
        return 0.0;
    }
    let inside = &c.sub_graph.inside;
    let mut crossing = false;
    let mut bytes = 0.0;
    for i in c.sub_graph.input.iter() {
        let is_const = g
            .expr(i)
            .is_some_and(|e| matches!(g.module.expr(e), Expr::Const(_)));
        if !is_const && crossings.crosses(&t.device, crossings.produced[i]) {
            crossing = true;
            bytes += crate::planning::cost::analytic::node_bytes(g, i);
        }
    }
    for i in c.sub_graph.exit.iter() {
        if !inside.contains(i) || g.is_external(i) {
            continue;
        }
        let readers = g
            .outputs(i)
            .iter()
            .map(|o| o.index())
            .filter(|&o| !inside.contains(o))
            .fold(0, |m, o| m | crossings.reads[o]);
        if crossings.crosses(&t.device, readers) {
            crossing = true;
            bytes += crate::planning::cost::analytic::node_bytes(g, i);
        }
    }
    let mut p = tr.dispatch.unwrap_or(0.0);
    if crossing {
        p += tr.latency.unwrap_or(0.0);
        if let Some(bw) = tr.bandwidth.filter(|&b| b > 0.0) {
            p += bytes / bw;
        }
    }
    p
}

/// The search constraint that chosen candidates can be rewritten one after the other: no
/// value may leave one candidate and flow, through others, back into it. Each candidate is
/// convex, and a candidate with one exit cannot be on such a cycle unless a candidate with
/// several exits is too (all its nodes lead to its exit), so only candidates with several
/// exits (greedy regions, rules with `max_exits` above 1) are constrained.
pub struct Acyclic<'a, 'g> {
    g: &'a DataflowGraph<'g>,
    candidates: &'a [Candidate],
    /// With forward edges, node indices: the order the cycle test is bounded in.
    rank: Option<Vec<usize>>,
    /// Scratch for the cycle test: the part of each node (`usize::MAX` for none), kept clear
    /// between tests, and [`Reach`].
    scratch: std::cell::RefCell<(Vec<usize>, Reach)>,
}

impl<'a, 'g> Acyclic<'a, 'g> {
    /// The constraint for these candidates.
    pub fn new(g: &'a DataflowGraph<'g>, candidates: &'a [Candidate]) -> Self {
        Acyclic {
            g,
            candidates,
            rank: edges_go_forward(g).then(|| (0..g.len()).collect()),
            scratch: std::cell::RefCell::new((vec![usize::MAX; g.len()], Reach::default())),
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
        let parts: Vec<&IndexSet> = chosen
            .iter()
            .chain([&k])
            .map(|&j| &self.candidates[j].sub_graph.inside)
            .collect();
        let from = parts.len() - 1;
        let mut scratch = self.scratch.borrow_mut();
        let (owner, reach) = &mut *scratch;
        for (p, s) in parts.iter().enumerate() {
            for i in s.iter() {
                owner[i] = p;
            }
        }
        // No node above every part's nodes leads back into one.
        let last = parts.iter().filter_map(|s| s.last()).max().unwrap_or(0);
        let limit = self.rank.as_deref().map(|rank| (rank, last));
        let part = |p: usize| Some(parts[p]);
        let cycle = returns_to_among(
            self.g,
            owner,
            parts.len(),
            &part,
            parts[from],
            &[from],
            limit,
            reach,
        );
        for s in &parts {
            for i in s.iter() {
                owner[i] = usize::MAX;
            }
        }
        !cycle
    }
}

/// A topological order of a graph whose edges go forward ([`edges_go_forward`]) that keeps
/// nearby nodes near: `rank[v]` is `v`'s position when nodes are sorted by the length of the
/// longest path reaching them, then by index. (Post-order indices can put a node far from its
/// inputs, e.g. one that only feeds the final result.)
pub fn local_order(g: &DataflowGraph<'_>) -> Vec<usize> {
    let mut level = vec![0usize; g.len()];
    for v in 0..g.len() {
        for o in g.outputs(v) {
            level[o.index()] = level[o.index()].max(level[v] + 1);
        }
    }
    // Sorted by counting: the first rank of each level, then each node in index order.
    let levels = level.iter().max().map_or(0, |&l| l + 1);
    let mut next = vec![0usize; levels + 1];
    for &l in &level {
        next[l + 1] += 1;
    }
    for l in 0..levels {
        next[l + 1] += next[l];
    }
    level
        .iter()
        .map(|&l| {
            next[l] += 1;
            next[l] - 1
        })
        .collect()
}

/// Scratch space for [`returns_to_among`], reused between calls.
#[derive(Default)]
pub struct Reach {
    /// `node[v] == generation`: node `v` was reached in the current call; likewise for slots.
    node: Vec<u32>,
    slot: Vec<u32>,
    generation: u32,
    stack: Vec<usize>,
}

impl Reach {
    /// Starts a call over `nodes` nodes and `slots` slots.
    fn begin(&mut self, nodes: usize, slots: usize) {
        self.node.resize(self.node.len().max(nodes), 0);
        self.slot.resize(self.slot.len().max(slots), 0);
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.node.fill(0);
            self.slot.fill(0);
            self.generation = 1;
        }
        self.stack.clear();
    }
}

/// Whether, with each part run as one unit (all its inputs before any of its outputs) and
/// every other node on its own, some path leaves the unit `from` and comes back into it. The
/// parts are kept in slots (which may change as parts merge): `owner[v]` is the slot of node `v`
/// (`usize::MAX` for none) and `part(k)` the nodes of slot `k` (`None` once emptied), for
/// `k < slots`. `from` must be exactly the nodes of the slots in `from_slots`.
///
/// With `limit = Some((rank, bound))`, only nodes whose rank is at most `bound` are followed.
/// `rank` must be a topological order (every edge goes to a higher rank), and then any `bound`
/// at or above the ranks of `from` that no slot straddles (no slot has ranks both at or below it
/// and above it) gives the exact answer: from a node above such a bound, every edge and every
/// slot leads only further up, never back into `from`. With a rank that keeps nearby nodes near
/// ([`local_order`]) that keeps the work local to `from`. `None` is always exact.
#[allow(clippy::too_many_arguments)]
pub fn returns_to_among<'p>(
    g: &DataflowGraph<'_>,
    owner: &[usize],
    slots: usize,
    part: &dyn Fn(usize) -> Option<&'p IndexSet>,
    from: &IndexSet,
    from_slots: &[usize],
    limit: Option<(&[usize], usize)>,
    reach: &mut Reach,
) -> bool {
    const ALONE: usize = usize::MAX;
    const FROM: usize = usize::MAX - 1;
    reach.begin(g.len(), slots);
    let generation = reach.generation;
    let Reach {
        node, slot, stack, ..
    } = reach;
    let unit = |v: usize| match owner[v] {
        ALONE => ALONE,
        k if from_slots.contains(&k) => FROM,
        k => k,
    };
    let mut push_outputs = |i: usize, own: usize, stack: &mut Vec<usize>| {
        for o in g.outputs(i) {
            let o = o.index();
            let beyond = limit.is_some_and(|(rank, bound)| rank[o] > bound);
            if beyond || node[o] == generation || (own != ALONE && unit(o) == own) {
                continue;
            }
            node[o] = generation;
            stack.push(o);
        }
    };
    for i in from.iter() {
        push_outputs(i, FROM, stack);
    }
    while let Some(v) = stack.pop() {
        match unit(v) {
            FROM => return true,
            ALONE => push_outputs(v, ALONE, stack),
            k => {
                if slot[k] != generation {
                    slot[k] = generation;
                    if let Some(p) = part(k) {
                        for i in p.iter() {
                            push_outputs(i, k, stack);
                        }
                    }
                }
            }
        }
    }
    false
}

/// Whether data leaving `u`, the union of the disjoint sub-graphs `a` and `b`, comes back into
/// it: from `a` (outside `b`) into an entry of `b` or of `u`, or from `b` (outside `a`) into an
/// entry of `a` or of `u`. That is what touching (both ways, [`SubGraph::flows_into`]) and the
/// convexity of `u` ([`SubGraph::is_convex`]) rule out, found here by a search from the parts'
/// outputs rather than through the downstream sets, which grow with the whole graph. `rank`
/// must be a topological order; only nodes ranked at most the highest entry sought are
/// followed, so with a rank that keeps nearby nodes near ([`local_order`]) the work stays near
/// `u`. A search that would visit more than `budget` nodes (by default 256 plus four per output
/// of the parts: many outside nodes within `u`'s ranks) gives way to the downstream sets, so no
/// test costs more than theirs; so does having no rank.
pub fn flows_back(
    g: &DataflowGraph<'_>,
    a: &SubGraph,
    b: &SubGraph,
    u: &SubGraph,
    rank: Option<&[usize]>,
    budget: Option<usize>,
    reach: &mut Reach,
) -> bool {
    let downstream = || a.flows_into(g, b) || b.flows_into(g, a) || !u.is_convex(g);
    let Some(rank) = rank else {
        return downstream();
    };
    let mut left = budget.unwrap_or(256 + 4 * (a.output.count() + b.output.count()));
    // `Some(found)`, or `None` when the search ran out of budget.
    let mut from_into = |from: &SubGraph, other: &SubGraph| -> Option<bool> {
        let into = |v: usize| other.entry.contains(v) || u.entry.contains(v);
        let Some(bound) = other
            .entry
            .iter()
            .chain(u.entry.iter())
            .map(|e| rank[e])
            .max()
        else {
            return Some(false);
        };
        reach.begin(g.len(), 0);
        let generation = reach.generation;
        let Reach { node, stack, .. } = &mut *reach;
        for o in from.output.iter() {
            if rank[o] <= bound && !other.inside.contains(o) {
                node[o] = generation;
                stack.push(o);
            }
        }
        while let Some(v) = stack.pop() {
            left = left.checked_sub(1)?;
            for o in g.outputs(v) {
                let o = o.index();
                if rank[o] > bound || node[o] == generation {
                    continue;
                }
                if into(o) {
                    return Some(true);
                }
                node[o] = generation;
                stack.push(o);
            }
        }
        Some(false)
    };
    let searched = match from_into(a, b) {
        Some(true) => Some(true),
        Some(false) => from_into(b, a),
        None => None,
    };
    searched.unwrap_or_else(downstream)
}

/// The cost of the best cover using only the candidates `keep` allows.
fn restricted(
    n: usize,
    items: &[Item],
    keep: &dyn Fn(usize) -> bool,
    acyclic: &Acyclic<'_, '_>,
    opts: &Options,
) -> Option<f64> {
    restricted_solution(n, items, keep, acyclic, opts).map(|s| s.total)
}

/// The cheapest cover by the candidates `keep` accepts.
fn restricted_solution(
    n: usize,
    items: &[Item],
    keep: &dyn Fn(usize) -> bool,
    acyclic: &Acyclic<'_, '_>,
    opts: &Options,
) -> Option<search::Solution> {
    search::search_among(n, items, keep, acyclic, opts.search).ok()
}

/// The cheapest cover made of the given greedy regions and native and host candidates disjoint
/// from them.
fn greedy_placement(
    g: &DataflowGraph<'_>,
    program: &Program,
    candidates: &[Candidate],
    regions: &[usize],
    items: &[Item],
    acyclic: &Acyclic<'_, '_>,
    opts: &Options,
) -> Option<search::Solution> {
    let mut taken = IndexSet::new(g.len());
    let mut is_region = vec![false; candidates.len()];
    for &k in regions {
        taken.union_with(&candidates[k].sub_graph.inside);
        is_region[k] = true;
    }
    let keep = |k: usize| {
        is_region[k]
            || (is_base(program, candidates[k].target)
                && !candidates[k].sub_graph.inside.intersects(&taken))
    };
    search::search_among(g.len(), items, &keep, acyclic, opts.search).ok()
}

/// Native targets and the host: what every baseline may use.
fn is_base(program: &Program, t: usize) -> bool {
    let t = &program.targets[t];
    t.compiler.is_none() || t.is_host
}

/// The baselines; `acyclic` carries the graph and the candidates. `greedy_solutions` are the
/// greedy placements of the targets of `greedy_regions`, in order.
fn compute_baselines(
    program: &Program,
    greedy_regions: &[(usize, Vec<usize>)],
    greedy_solutions: &[Option<search::Solution>],
    items: &[Item],
    acyclic: &Acyclic<'_, '_>,
    opts: &Options,
) -> Vec<Baseline> {
    let (n, candidates) = (acyclic.g.len(), acyclic.candidates);
    let mut out = vec![Baseline::of(
        "tvm".into(),
        restricted_solution(
            n,
            items,
            &|k| is_base(program, candidates[k].target),
            acyclic,
            opts,
        ),
    )];
    for (ti, t) in program.targets.iter().enumerate() {
        if t.compiler.is_none() {
            continue;
        }
        // The target with the native targets and the host: its greedy regions included, so
        // this is never worse than its greedy placement.
        out.push(Baseline::of(
            t.name.clone(),
            restricted_solution(
                n,
                items,
                &|k| is_base(program, candidates[k].target) || candidates[k].target == ti,
                acyclic,
                opts,
            ),
        ));
        let greedy = greedy_regions
            .iter()
            .zip(greedy_solutions)
            .find(|((t, _), _)| *t == ti)
            .and_then(|(_, sol)| sol.clone());
        out.push(Baseline::of(format!("greedy:{}", t.name), greedy));
    }
    out
}

impl Baseline {
    fn of(name: String, sol: Option<search::Solution>) -> Baseline {
        Baseline {
            name,
            cost: sol.as_ref().map(|s| s.total),
            chosen: sol.map(|s| s.chosen),
        }
    }
}

/// For each candidate of `ks`, in order, the best total cost within the search space of a cover
/// that uses it (for `--explain`); the search items are built once for all of them.
pub fn best_with(
    g: &DataflowGraph<'_>,
    plan: &Plan,
    ks: &[usize],
    opts: &Options,
) -> Vec<Option<f64>> {
    let items = plan.items();
    let acyclic = Acyclic::new(g, &plan.candidates);
    ks.iter()
        .map(|&k| {
            let forced = &plan.candidates[k].sub_graph.inside;
            let keep = |j: usize| j == k || !plan.candidates[j].sub_graph.inside.intersects(forced);
            restricted(g.len(), &items, &keep, &acyclic, opts)
        })
        .collect()
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
