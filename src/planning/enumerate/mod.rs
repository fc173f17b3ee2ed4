//! Candidate enumeration: evaluates each target's partition rule tree over a function's
//! dataflow graph and returns its candidate partitions.
//!
//! Input: a typed module, a function, a compiled [`Program`]. Output: for each target, its
//! candidates (sub-graphs with nested function attributes), de-duplicated per target, in a
//! deterministic order. Differences from TVM (docs/collage.md, "Quirks of TVM's prototype"):
//! combining runs to a real fixed point (every new union is combined again, quirk-1), the depth
//! limit is the depth of the union (quirk-2), overlapping producers are skipped rather than
//! aborting (quirk-3), candidates carry their target and equality includes it and the nested
//! attributes (quirk-6).

mod combine;
mod egraph;
pub mod extract;
pub mod graph;
pub mod key;
mod matcher;
mod pred;
pub mod subgraph;

pub use egraph::{Grower, MATCH_WORK};
pub use graph::DataflowGraph;
pub use subgraph::SubGraph;

use crate::analysis::dataflow::IndexSet;
use crate::ir::{AttrValue, Expr};
use crate::rules::ruletree::{Combiner, Program, Rule, SubGraphConfig, Target};
use std::collections::HashSet;
use subgraph::nest_labels;

/// The bounds of enumeration: depth limits used where a rule or target does not set one
/// (TVM has none, docs/collage.md quirk-15; ours are 8 and 8), and limits on the e-graph and
/// on each target's candidates, so that no rules file can make enumeration grow without bound.
/// Reaching one of the latter is an error ([`LimitError`]), never a silently smaller search
/// space: with [`Limits::lower_depth`], a target whose candidates outgrow the limits at the
/// default depth is enumerated again at a lower one, and [`Enumeration::lowered`] says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Depth limit for native targets.
    pub tvm_max_depth: u32,
    /// Depth limit for BYOC targets.
    pub byoc_max_depth: u32,
    /// E-nodes the equivalences may add to the e-graph, beyond the one per value node of the
    /// function and the swapped form of each of its `add` and `multiply` calls
    /// (`--max-enodes`).
    pub max_enodes: usize,
    /// Rounds of equivalence application before the e-graph must be saturated
    /// (`--max-egraph-iters`).
    pub max_egraph_iters: usize,
    /// Candidates one rule of a target may hold, the unions a `combine` builds on the way to
    /// its fixed point included (`--max-candidates`). Combining may also visit at most
    /// [`PAIR_WORK`] times as many pairs, and matching one pattern rule may build at most
    /// [`MATCH_WORK`] times as many partial matches as there are e-nodes and allowed
    /// candidates together.
    pub max_candidates: usize,
    /// When a target whose rules set no depth of their own reaches the candidate or pair
    /// limit, halve the default depth of its kind (native or BYOC) and enumerate again, down to
    /// 1, instead of failing. Off when the depth limits were given on the command line.
    pub lower_depth: bool,
}

/// A default depth limit [`enumerate`] lowered because a target's candidates outgrew the
/// limits at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lowered {
    /// The target whose candidates grew.
    pub target: String,
    /// Whether the depth is BYOC targets' (`--byoc-max-depth`) or native targets'.
    pub byoc: bool,
    /// The depth limit that was reached, and the one used instead.
    pub from: u32,
    /// See `from`.
    pub to: u32,
    /// The limit reached.
    pub bound: Bound,
}

/// Default of [`Limits::max_enodes`].
pub const DEFAULT_MAX_ENODES: usize = 100_000;
/// Default of [`Limits::max_egraph_iters`].
pub const DEFAULT_MAX_EGRAPH_ITERS: usize = 30;
/// Default of [`Limits::max_candidates`].
pub const DEFAULT_MAX_CANDIDATES: usize = 500_000;
/// Pairs of candidates the combiner may visit per unit of [`Limits::max_candidates`].
pub const PAIR_WORK: u64 = 128;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            tvm_max_depth: 8,
            byoc_max_depth: 8,
            max_enodes: DEFAULT_MAX_ENODES,
            max_egraph_iters: DEFAULT_MAX_EGRAPH_ITERS,
            max_candidates: DEFAULT_MAX_CANDIDATES,
            lower_depth: true,
        }
    }
}

/// Which bound of enumeration was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// More e-nodes than [`Limits::max_enodes`].
    ENodes,
    /// Matching an equivalence in one round built more than `steps` = [`MATCH_WORK`] × (the
    /// e-nodes and [`Limits::max_enodes`]) partial matches.
    ENodeWork {
        /// The partial matches allowed.
        steps: u64,
    },
    /// Not saturated after [`Limits::max_egraph_iters`] rounds.
    EGraphIters,
    /// More candidates than [`Limits::max_candidates`].
    Candidates,
    /// Combining visited more than `steps` = [`PAIR_WORK`] × [`Limits::max_candidates`]
    /// pairs.
    PairWork {
        /// The pair visits allowed.
        steps: u64,
    },
    /// Matching a pattern rule built more than `steps` = [`MATCH_WORK`] × (the e-nodes and
    /// [`Limits::max_candidates`]) partial matches.
    MatchWork {
        /// The partial matches allowed.
        steps: u64,
    },
}

/// Enumeration reached one of its [`Limits`].
#[derive(Clone, Debug, PartialEq)]
pub enum LimitError {
    /// The e-graph, while equivalences were applied.
    EGraph {
        /// The bound reached.
        bound: Bound,
        /// What was growing it.
        grower: Grower,
        /// The limit in force.
        limit: usize,
    },
    /// A target's rules.
    Target {
        /// The bound reached.
        bound: Bound,
        /// The target, by index in [`Program::targets`].
        target: usize,
        /// The rule that grew, as `collage check --print` writes its head (`combine
        /// [by_kind(A->A)] max_depth=8`, `pattern "name"`, ...).
        rule: String,
        /// The limit in force.
        limit: usize,
    },
}

impl LimitError {
    /// The command-line flag that raises the limit reached.
    pub fn flag(&self) -> &'static str {
        match self {
            LimitError::EGraph {
                bound: Bound::EGraphIters,
                ..
            } => "--max-egraph-iters",
            LimitError::EGraph { .. } => "--max-enodes",
            LimitError::Target { .. } => "--max-candidates",
        }
    }
}

/// A candidate partition: a sub-graph to run on a target.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Index of the target in [`Program::targets`].
    pub target: usize,
    /// The nodes, with nested `Composite`/`Primitive` structure.
    pub sub_graph: SubGraph,
    /// Which rules produced it, e.g. `cutlass.cutlass.dense_bias.nn.dense+add`.
    pub rule_name: String,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Candidate) -> bool {
        self.target == other.target && self.sub_graph == other.sub_graph
    }
}

impl Eq for Candidate {}

impl std::hash::Hash for Candidate {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.target.hash(state);
        self.sub_graph.hash(state);
    }
}

/// The result of enumeration.
pub struct Enumeration {
    /// Candidates of every target, grouped by target in program order.
    pub candidates: Vec<Candidate>,
    /// Rounds of equivalence application until the e-graph was saturated.
    pub egraph_rounds: usize,
    /// Size of the e-graph after equivalences: (e-nodes, e-classes).
    pub egraph_size: (usize, usize),
    /// The limits the candidates were enumerated within: the given ones, with the depth limits
    /// in `lowered` lowered.
    pub limits: Limits,
    /// Default depth limits lowered because a target's candidates outgrew the limits.
    pub lowered: Vec<Lowered>,
}

/// The e-graph of `g` with the program's equivalences, within the limits.
fn match_graph(
    g: &DataflowGraph<'_>,
    program: &Program,
    limits: &Limits,
) -> Result<egraph::MatchGraph, LimitError> {
    let bounds = egraph::EGraphLimits {
        max_enodes: limits.max_enodes,
        max_iters: limits.max_egraph_iters,
    };
    egraph::MatchGraph::build(g, program, &bounds).map_err(|e| match e {
        egraph::EGraphOverflow::ENodes { grower, work } => LimitError::EGraph {
            bound: match work {
                Some(steps) => Bound::ENodeWork { steps },
                None => Bound::ENodes,
            },
            grower,
            limit: limits.max_enodes,
        },
        egraph::EGraphOverflow::Iterations { grower } => LimitError::EGraph {
            bound: Bound::EGraphIters,
            grower,
            limit: limits.max_egraph_iters,
        },
    })
}

/// Candidates of every target of `program` for one function. When a target reaches a limit,
/// the error of the first such target in program order is returned, unless
/// [`Limits::lower_depth`] lets the depth limit of its kind be halved and everything enumerated
/// again (at most three times per kind, 8 → 4 → 2 → 1 from the default).
pub fn enumerate(
    g: &DataflowGraph<'_>,
    program: &Program,
    limits: &Limits,
) -> Result<Enumeration, LimitError> {
    // The e-graph does not depend on the depth limits: built once for every attempt.
    let mg = match_graph(g, program, limits)?;
    let mut limits = *limits;
    let mut lowered = Vec::new();
    loop {
        let err = match enumerate_within(g, &mg, program, &limits) {
            Ok(mut e) => {
                e.limits = limits;
                e.lowered = lowered;
                return Ok(e);
            }
            Err(e) => e,
        };
        let LimitError::Target {
            bound: bound @ (Bound::Candidates | Bound::PairWork { .. }),
            target,
            ..
        } = &err
        else {
            return Err(err);
        };
        let t = &program.targets[*target];
        if !limits.lower_depth || t.max_depth.is_some() {
            return Err(err);
        }
        let byoc = t.compiler.is_some();
        let depth = if byoc {
            &mut limits.byoc_max_depth
        } else {
            &mut limits.tvm_max_depth
        };
        if *depth <= 1 {
            return Err(err);
        }
        let from = *depth;
        *depth = (from / 2).max(1);
        lowered.push(Lowered {
            target: t.name.clone(),
            byoc,
            from,
            to: *depth,
            bound: *bound,
        });
    }
}

fn enumerate_within(
    g: &DataflowGraph<'_>,
    mg: &egraph::MatchGraph,
    program: &Program,
    limits: &Limits,
) -> Result<Enumeration, LimitError> {
    // Targets with the same rule tree, compiler and depth limit (a native target on two
    // devices, say) have the same candidates: evaluate each such tree once.
    let n = program.targets.len();
    let same_as: Vec<usize> = (0..n)
        .map(|t| {
            (0..t)
                .find(|&u| {
                    let (a, b) = (&program.targets[u], &program.targets[t]);
                    a.rule == b.rule
                        && a.compiler == b.compiler
                        && default_depth(a, limits) == default_depth(b, limits)
                })
                .unwrap_or(t)
        })
        .collect();
    // The distinct trees are independent: evaluate them on all cores, each
    // result stored under its target's index so the output order does not depend on timing.
    let distinct: Vec<usize> = (0..n).filter(|&t| same_as[t] == t).collect();
    type Slot = std::sync::Mutex<Option<Result<Vec<Candidate>, LimitError>>>;
    let results: Vec<Slot> = (0..n).map(|_| std::sync::Mutex::new(None)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    // Set when a target reaches a limit: the other workers stop taking targets.
    let failed = std::sync::atomic::AtomicBool::new(false);
    let workers = std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(distinct.len());
    let work = || loop {
        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(&t) = distinct.get(k) else { break };
        if failed.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let cands = target_candidates_in(g, mg, program, t, limits);
        if cands.is_err() {
            failed.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if let Ok(mut slot) = results[t].lock() {
            *slot = Some(cands);
        }
    };
    if workers > 1 {
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(work);
            }
        });
    } else {
        work();
    }
    let mut per_target: Vec<Vec<Candidate>> = Vec::with_capacity(n);
    for m in results {
        // Targets not evaluated (shared trees, or skipped after an error) stay empty here.
        per_target.push(
            m.into_inner()
                .ok()
                .flatten()
                .transpose()?
                .unwrap_or_default(),
        );
    }
    for t in 0..n {
        let u = same_as[t];
        if u != t {
            per_target[t] = per_target[u]
                .iter()
                .map(|c| Candidate {
                    target: t,
                    sub_graph: c.sub_graph.clone(),
                    rule_name: retarget(
                        &c.rule_name,
                        &program.targets[u].name,
                        &program.targets[t].name,
                    ),
                })
                .collect();
        }
    }
    let candidates = per_target.into_iter().flatten().collect();
    Ok(Enumeration {
        candidates,
        egraph_rounds: mg.rounds,
        egraph_size: (
            mg.egraph.total_number_of_nodes(),
            mg.egraph.number_of_classes(),
        ),
        limits: *limits,
        lowered: Vec::new(),
    })
}

/// The candidates of one target, de-duplicated, sorted by sub-graph order then rule name.
pub fn target_candidates(
    g: &DataflowGraph<'_>,
    program: &Program,
    target: usize,
    limits: &Limits,
) -> Result<Vec<Candidate>, LimitError> {
    let mg = match_graph(g, program, limits)?;
    target_candidates_in(g, &mg, program, target, limits)
}

fn target_candidates_in(
    g: &DataflowGraph<'_>,
    mg: &egraph::MatchGraph,
    program: &Program,
    target: usize,
    limits: &Limits,
) -> Result<Vec<Candidate>, LimitError> {
    let t = &program.targets[target];
    let cx = Eval {
        g,
        mg,
        target,
        t,
        default_depth: default_depth(t, limits),
        max_candidates: limits.max_candidates,
    };
    let mut cands = cx.eval(&t.rule)?;
    for c in &mut cands {
        c.rule_name = nest_labels(&t.name, &c.rule_name);
    }
    let mut seen = HashSet::new();
    cands.retain(|c| seen.insert((c.sub_graph.inside.clone(), c.sub_graph.nested.clone())));
    cands.sort_by(|a, b| {
        a.sub_graph
            .order(&b.sub_graph)
            .then_with(|| a.rule_name.cmp(&b.rule_name))
    });
    Ok(cands)
}

/// The depth limit of a target's rules where they set none.
pub fn default_depth(t: &Target, limits: &Limits) -> u32 {
    match (t.max_depth, &t.compiler) {
        (Some(d), _) => d,
        (None, Some(_)) => limits.byoc_max_depth,
        (None, None) => limits.tvm_max_depth,
    }
}

/// The limits a target's rules put on the sub-graphs they produce, as far as validity can tell:
/// the depth limit in force for the target and, when its rule tree is wrapped in `only_valid`
/// (every `patterns` target, and the shipped native targets), that rule's exits and taps; the
/// depth limit of a `combine` directly inside it applies too. Greedy regions grow, and chosen
/// partitions coalesce, only within these limits, so a plan never holds a partition deeper or
/// with more exits than its target's rules allow.
pub fn target_limits(t: &Target, limits: &Limits) -> SubGraphConfig {
    rule_limits(&t.rule, default_depth(t, limits))
}

/// The limits within which a BYOC target's greedy regions grow and its chosen partitions
/// coalesce: [`target_limits`], with the target's `region_depth` (when it sets one) as the
/// depth limit. A library that keeps its own layouts inside a partition (oneDNN) sets it above
/// its candidates' limit, so that the regions the search may take span more than the combiner
/// can enumerate (docs/partition.md, "Layouts a library keeps inside a partition").
pub fn region_limits(t: &Target, limits: &Limits) -> SubGraphConfig {
    let mut c = target_limits(t, limits);
    if let Some(d) = t.region_depth {
        c.max_depth = Some(d);
    }
    c
}

fn rule_limits(rule: &Rule, default: u32) -> SubGraphConfig {
    let combine_depth = |r: &Rule| match r {
        Rule::Combine { max_depth, .. } => Some(max_depth.unwrap_or(default)),
        _ => None,
    };
    match rule {
        Rule::Primitive(sub) | Rule::Composite(_, sub) => rule_limits(sub, default),
        Rule::OnlyValid(sub, config) => {
            let own = config.max_depth.unwrap_or(default);
            SubGraphConfig {
                max_depth: Some(combine_depth(sub).map_or(own, |d| d.min(own))),
                ..*config
            }
        }
        Rule::Union(subs) => {
            // The loosest of its parts.
            let parts: Vec<SubGraphConfig> = subs.iter().map(|s| rule_limits(s, default)).collect();
            SubGraphConfig {
                max_depth: parts.iter().map(|c| c.max_depth).max().flatten(),
                max_exits: if parts.iter().any(|c| c.max_exits == 0) {
                    0
                } else {
                    parts.iter().map(|c| c.max_exits).max().unwrap_or(0)
                },
                allow_taps: parts.is_empty() || parts.iter().any(|c| c.allow_taps),
            }
        }
        _ => SubGraphConfig {
            max_depth: Some(combine_depth(rule).unwrap_or(default)),
            max_exits: 0,
            allow_taps: true,
        },
    }
}

/// Replaces the leading target name of a rule name.
fn retarget(rule_name: &str, from: &str, to: &str) -> String {
    match rule_name.strip_prefix(from) {
        Some(rest) if rest.is_empty() || rest.starts_with('.') => format!("{to}{rest}"),
        _ => rule_name.to_string(),
    }
}

/// Evaluation context for one target.
pub(crate) struct Eval<'a, 'm> {
    pub g: &'a DataflowGraph<'m>,
    pub mg: &'a egraph::MatchGraph,
    pub target: usize,
    pub t: &'a Target,
    pub default_depth: u32,
    pub max_candidates: usize,
}

impl Eval<'_, '_> {
    /// The error for `rule` of this target reaching `bound`.
    pub(crate) fn limit(&self, bound: Bound, rule: &Rule) -> LimitError {
        LimitError::Target {
            bound,
            target: self.target,
            rule: crate::rules::ruletree::print::rule_head(rule, self.default_depth),
            limit: self.max_candidates,
        }
    }

    /// Fails if `n` candidates of `rule` are more than allowed.
    fn within(&self, n: usize, rule: &Rule) -> Result<(), LimitError> {
        if n > self.max_candidates {
            return Err(self.limit(Bound::Candidates, rule));
        }
        Ok(())
    }

    fn candidate(&self, sub_graph: SubGraph, rule_name: String) -> Candidate {
        Candidate {
            target: self.target,
            sub_graph,
            rule_name,
        }
    }

    fn singleton(&self, i: usize) -> SubGraph {
        SubGraph::new(self.g, IndexSet::from_indices(self.g.len(), [i]))
    }

    /// Evaluates `combine(sub, combiners)` (the rule `rule`), keeping the candidates `keep`
    /// accepts.
    fn combine(
        &self,
        rule: &Rule,
        sub: &Rule,
        combiners: &[Combiner],
        max_depth: Option<u32>,
        keep: &dyn Fn(&SubGraph) -> bool,
    ) -> Result<Vec<Candidate>, LimitError> {
        let base = self.eval(sub)?;
        combine::combine(
            self,
            base,
            combiners,
            max_depth.unwrap_or(self.default_depth),
            keep,
        )
        .map_err(|bound| self.limit(bound, rule))
    }

    /// Evaluates a rule tree.
    pub fn eval(&self, rule: &Rule) -> Result<Vec<Candidate>, LimitError> {
        let g = self.g;
        Ok(match rule {
            Rule::Pattern { name, pattern } => {
                let steps = MATCH_WORK.saturating_mul(
                    (self.mg.size() as u64).saturating_add(self.max_candidates as u64),
                );
                let mut budget = matcher::Budget::new(steps);
                matcher::pattern_candidates(g, self.mg, pattern, &mut budget, self.max_candidates)
                    .map_err(|o| {
                        self.limit(
                            match o {
                                matcher::Overflow::Work => Bound::MatchWork { steps },
                                matcher::Overflow::Matches => Bound::Candidates,
                            },
                            rule,
                        )
                    })?
                    .into_iter()
                    .map(|sg| {
                        let label = if name.is_empty() {
                            sg.label.clone()
                        } else {
                            name.clone()
                        };
                        self.candidate(sg, label)
                    })
                    .collect()
            }
            Rule::Ops { entries, prefix } => {
                let mut out = Vec::new();
                for i in 0..g.len() {
                    let Some(op) = g.called_op(i) else { continue };
                    let Some((_, guard)) = entries.iter().find(|(o, _)| *o == op) else {
                        continue;
                    };
                    if let Some(p) = guard {
                        if !pred::holds(g, p, &[Some(i)]) {
                            continue;
                        }
                    }
                    let mut sg = self.singleton(i);
                    let label = sg.label.clone();
                    if let Some(prefix) = prefix {
                        let name = format!("{prefix}{label}");
                        sg = sg.with_attrs(
                            g,
                            vec![("Composite".into(), AttrValue::Str(name.clone()))],
                        );
                        out.push(self.candidate(sg, nest_labels(&name, &label)));
                    } else {
                        out.push(self.candidate(sg, label));
                    }
                }
                out
            }
            Rule::OpCallByKind => (0..g.len())
                .filter(|&i| {
                    g.expr(i)
                        .is_some_and(|e| matches!(g.module.expr(e), Expr::Call { .. }))
                        && g.kind[i] <= crate::ops::OpPattern::OutEWiseFusable
                })
                .map(|i| {
                    let sg = self.singleton(i);
                    let label = sg.label.clone();
                    self.candidate(sg, label)
                })
                .collect(),
            Rule::Host => (0..g.len())
                .filter(|&i| !g.must_lower[i])
                .map(|i| {
                    let sg = self.singleton(i);
                    let label = sg.label.clone();
                    self.candidate(sg, label)
                })
                .collect(),
            Rule::Composite(name, sub) => self
                .eval(sub)?
                .into_iter()
                .map(|c| {
                    let sg = c
                        .sub_graph
                        .with_attrs(g, vec![("Composite".into(), AttrValue::Str(name.clone()))]);
                    self.candidate(sg, nest_labels(name, &c.rule_name))
                })
                .collect(),
            Rule::Primitive(sub) => {
                let mut attrs = vec![("Primitive".to_string(), AttrValue::int(1))];
                if let Some(c) = &self.t.compiler {
                    attrs.push(("Compiler".to_string(), AttrValue::Str(c.clone())));
                }
                self.eval(sub)?
                    .into_iter()
                    .map(|c| {
                        let sg = c.sub_graph.with_attrs(g, attrs.clone());
                        self.candidate(sg, c.rule_name)
                    })
                    .collect()
            }
            Rule::Union(subs) => {
                let mut out = Vec::new();
                for s in subs {
                    out.extend(self.eval(s)?);
                    self.within(out.len(), rule)?;
                }
                out
            }
            Rule::Combine {
                sub,
                combiners,
                max_depth,
            } => self.combine(rule, sub, combiners, *max_depth, &|_| true)?,
            Rule::OnlyValid(sub, config) => {
                let config = SubGraphConfig {
                    max_depth: Some(config.max_depth.unwrap_or(self.default_depth)),
                    ..*config
                };
                let valid = |sg: &SubGraph| sg.is_valid(g, &config);
                match &**sub {
                    // Only the valid unions are wanted: the combination builds names for those
                    // alone.
                    Rule::Combine {
                        sub: inner,
                        combiners,
                        max_depth,
                    } => self.combine(sub, inner, combiners, *max_depth, &valid)?,
                    _ => self
                        .eval(sub)?
                        .into_iter()
                        .filter(|c| valid(&c.sub_graph))
                        .collect(),
                }
            }
        })
    }
}
