//! Candidate enumeration: evaluates each target's partition rule tree over a function's
//! dataflow graph and returns its candidate partitions.
//!
//! Input: a typed module, a function, a compiled [`Program`]. Output: for each target, its
//! candidates (sub-graphs with nested function attributes), de-duplicated per target, in a
//! deterministic order. Differences from TVM (collage-semantics §7, §21): combining runs to a
//! real fixed point (every new union is combined again, Q1), the depth limit is the depth of
//! the union (Q2), overlapping producers are skipped rather than aborting (Q3), candidates carry
//! their target and equality includes it and the nested attributes (Q6).

mod combine;
mod egraph;
pub mod extract;
pub mod graph;
mod matcher;
mod pred;
pub mod subgraph;

pub use egraph::StopReason;
pub use graph::DataflowGraph;
pub use subgraph::SubGraph;

use crate::dataflow::IndexSet;
use crate::ir::{AttrValue, Expr};
use crate::ruletree::{Combiner, Program, Rule, SubGraphConfig, Target};
use std::collections::HashSet;
use subgraph::nest_labels;

/// Depth limits used where a rule or target does not set one (collage-semantics Q15: TVM has no
/// defaults; ours are 8 and 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Depth limit for native targets.
    pub tvm_max_depth: u32,
    /// Depth limit for BYOC targets.
    pub byoc_max_depth: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            tvm_max_depth: 8,
            byoc_max_depth: 8,
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
    /// Why applying equivalences to the e-graph stopped.
    pub equivalences: StopReason,
    /// Size of the e-graph after equivalences: (e-nodes, e-classes).
    pub egraph_size: (usize, usize),
}

/// Candidates of every target of `program` for one function.
pub fn enumerate(g: &DataflowGraph<'_>, program: &Program, limits: &Limits) -> Enumeration {
    let mg = egraph::MatchGraph::build(g, program);
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
    let results: Vec<std::sync::Mutex<Option<Vec<Candidate>>>> =
        (0..n).map(|_| std::sync::Mutex::new(None)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(distinct.len());
    let work = || loop {
        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(&t) = distinct.get(k) else { break };
        let cands = target_candidates_in(g, &mg, program, t, limits);
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
    let mut per_target: Vec<Vec<Candidate>> = results
        .into_iter()
        .map(|m| m.into_inner().ok().flatten().unwrap_or_default())
        .collect();
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
    Enumeration {
        candidates,
        equivalences: mg.why_stopped,
        egraph_size: (
            mg.egraph.total_number_of_nodes(),
            mg.egraph.number_of_classes(),
        ),
    }
}

/// The candidates of one target, de-duplicated, sorted by sub-graph order then rule name.
pub fn target_candidates(
    g: &DataflowGraph<'_>,
    program: &Program,
    target: usize,
    limits: &Limits,
) -> Vec<Candidate> {
    let mg = egraph::MatchGraph::build(g, program);
    target_candidates_in(g, &mg, program, target, limits)
}

fn target_candidates_in(
    g: &DataflowGraph<'_>,
    mg: &egraph::MatchGraph,
    program: &Program,
    target: usize,
    limits: &Limits,
) -> Vec<Candidate> {
    let t = &program.targets[target];
    let cx = Eval {
        g,
        mg,
        target,
        t,
        default_depth: default_depth(t, limits),
    };
    let mut cands = cx.eval(&t.rule);
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
    cands
}

/// The depth limit of a target's rules where they set none.
fn default_depth(t: &Target, limits: &Limits) -> u32 {
    match (t.max_depth, &t.compiler) {
        (Some(d), _) => d,
        (None, Some(_)) => limits.byoc_max_depth,
        (None, None) => limits.tvm_max_depth,
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
}

impl Eval<'_, '_> {
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

    /// Evaluates `combine(sub, combiners)`, keeping the candidates `keep` accepts.
    fn combine(
        &self,
        sub: &Rule,
        combiners: &[Combiner],
        max_depth: Option<u32>,
        keep: &dyn Fn(&SubGraph) -> bool,
    ) -> Vec<Candidate> {
        let base = self.eval(sub);
        combine::combine(
            self,
            base,
            combiners,
            max_depth.unwrap_or(self.default_depth),
            keep,
        )
    }

    /// Evaluates a rule tree.
    pub fn eval(&self, rule: &Rule) -> Vec<Candidate> {
        let g = self.g;
        match rule {
            Rule::Pattern { name, pattern } => matcher::pattern_candidates(g, self.mg, pattern)
                .into_iter()
                .map(|sg| {
                    let label = if name.is_empty() {
                        sg.label.clone()
                    } else {
                        name.clone()
                    };
                    self.candidate(sg, label)
                })
                .collect(),
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
                .eval(sub)
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
                self.eval(sub)
                    .into_iter()
                    .map(|c| {
                        let sg = c.sub_graph.with_attrs(g, attrs.clone());
                        self.candidate(sg, c.rule_name)
                    })
                    .collect()
            }
            Rule::Union(subs) => subs.iter().flat_map(|s| self.eval(s)).collect(),
            Rule::Combine {
                sub,
                combiners,
                max_depth,
            } => self.combine(sub, combiners, *max_depth, &|_| true),
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
                        sub,
                        combiners,
                        max_depth,
                    } => self.combine(sub, combiners, *max_depth, &valid),
                    _ => self
                        .eval(sub)
                        .into_iter()
                        .filter(|c| valid(&c.sub_graph))
                        .collect(),
                }
            }
        }
    }
}
