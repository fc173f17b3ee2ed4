//! Matching compiled patterns on the e-graph of a dataflow graph.
//!
//! Every match at every e-class is found, overlapping ones included, and so are matches modulo
//! the equivalences the e-graph holds (commutativity of `add` and `multiply`, declared `equiv`
//! and `rewrite`). A match covers the dataflow nodes of the e-nodes its non-wildcard parts
//! matched, except inlinable ones (scalar constants), as TVM's `MatcherToIndexSet` does. A
//! capture binds an e-class, so a capture written twice must match the same node.

use super::egraph::{MatchGraph, NodeOp};
use super::graph::DataflowGraph;
use super::pred;
use super::subgraph::SubGraph;
use crate::analysis::dataflow::IndexSet;
use crate::ir::{Dim, Type};
use crate::ops::registry;
use crate::rules::ruletree::Pattern;
use egg::Id;

/// One way a pattern matched: the dataflow nodes it covers and the class bound to each capture.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Match {
    pub cover: Vec<u32>,
    pub caps: Vec<Option<Id>>,
}

/// How many partial matches the matcher may still build. Patterns whose alternatives, optional
/// parts or equivalent forms multiply combinatorially exhaust it rather than the memory.
pub(crate) struct Budget {
    left: u64,
}

/// The matcher used up its [`Budget`], or found more distinct matches than allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Overflow {
    /// The budget of partial matches ran out.
    Work,
    /// More distinct matches than allowed.
    Matches,
}

impl Budget {
    pub fn new(steps: u64) -> Budget {
        Budget { left: steps }
    }

    /// Pays for one partial match.
    #[inline]
    fn spend(&mut self) -> Result<(), Overflow> {
        self.left = self.left.checked_sub(1).ok_or(Overflow::Work)?;
        Ok(())
    }
}

/// The sub-graphs of every match of `p` (one per distinct cover, in order of the root node); at
/// most `max` of them, built with at most `budget` partial matches.
pub(crate) fn pattern_candidates(
    g: &DataflowGraph<'_>,
    mg: &MatchGraph,
    p: &Pattern,
    budget: &mut Budget,
    max: usize,
) -> Result<Vec<SubGraph>, Overflow> {
    let mut out = Vec::new();
    let mut seen: rustc_hash::FxHashSet<Vec<u32>> = Default::default();
    let mut roots_seen: rustc_hash::FxHashSet<Id> = Default::default();
    let captures = capture_count(p);
    for node in 0..g.len() {
        let Some(class) = mg.class(node) else {
            continue;
        };
        if !roots_seen.insert(class) {
            continue;
        }
        let start = Match {
            cover: Vec::new(),
            caps: vec![None; captures],
        };
        for m in match_at(mg, g, p, mg.egraph.find(class), start, budget)? {
            let mut cover = m.cover;
            cover.sort_unstable();
            cover.dedup();
            if cover.is_empty() || !seen.insert(cover.clone()) {
                continue;
            }
            if out.len() == max {
                return Err(Overflow::Matches);
            }
            let inside = IndexSet::from_indices(g.len(), cover.iter().map(|&i| i as usize));
            out.push(SubGraph::new(g, inside));
        }
    }
    Ok(out)
}

/// All matches of `p` at `class` (fresh captures).
pub(crate) fn match_class(
    mg: &MatchGraph,
    g: &DataflowGraph<'_>,
    p: &Pattern,
    class: Id,
    budget: &mut Budget,
) -> Result<Vec<Match>, Overflow> {
    let start = Match {
        cover: Vec::new(),
        caps: vec![None; capture_count(p)],
    };
    match_at(mg, g, p, mg.egraph.find(class), start, budget)
}

fn capture_count(p: &Pattern) -> usize {
    let mut max = 0;
    let mut stack = vec![p];
    while let Some(x) = stack.pop() {
        if let Pattern::Capture(id, _) = x {
            max = max.max(*id as usize + 1);
        }
        stack.extend(x.children());
    }
    max
}

/// The type of a class: that of its representative dataflow node.
fn class_type<'a>(mg: &MatchGraph, g: &'a DataflowGraph<'_>, class: Id) -> Option<&'a Type> {
    let n = mg.representative(class)?;
    g.module.ty(g.expr(n)?)
}

fn add_cover(g: &DataflowGraph<'_>, m: &mut Match, cover: &[u32]) {
    m.cover
        .extend(cover.iter().copied().filter(|&i| !g.inlinable[i as usize]));
}

/// All matches of `p` at (canonical) `class`, extending `m`.
fn match_at(
    mg: &MatchGraph,
    g: &DataflowGraph<'_>,
    p: &Pattern,
    class: Id,
    m: Match,
    budget: &mut Budget,
) -> Result<Vec<Match>, Overflow> {
    let class = mg.egraph.find(class);
    let nodes = &mg.egraph[class].nodes;
    Ok(match p {
        Pattern::Wildcard => vec![m],
        Pattern::Const => match nodes.iter().find(|n| n.op == NodeOp::Const) {
            Some(n) => {
                budget.spend()?;
                let mut x = m.clone();
                add_cover(g, &mut x, &n.cover);
                vec![x]
            }
            None => Vec::new(),
        },
        Pattern::Capture(id, inner) => {
            let slot = *id as usize;
            if m.caps[slot].is_some_and(|b| mg.egraph.find(b) != class) {
                return Ok(Vec::new());
            }
            match_at(mg, g, inner, class, m, budget)?
                .into_iter()
                .filter_map(|mut x| match x.caps[slot] {
                    Some(b) if mg.egraph.find(b) != class => None,
                    _ => {
                        x.caps[slot] = Some(class);
                        Some(x)
                    }
                })
                .collect()
        }
        Pattern::Call { ops, attrs, args } => {
            call_matches(mg, g, class, ops, attrs, args, m, budget)?
        }
        Pattern::Optional {
            ops,
            attrs,
            first,
            rest,
        } => {
            let mut all_args = vec![(**first).clone()];
            all_args.extend(rest.iter().cloned());
            budget.spend()?;
            let mut out = call_matches(mg, g, class, ops, attrs, &all_args, m.clone(), budget)?;
            out.extend(match_at(mg, g, first, class, m, budget)?);
            out
        }
        Pattern::Alt(alts) => {
            let mut out = Vec::new();
            for a in alts {
                budget.spend()?;
                out.extend(match_at(mg, g, a, class, m.clone(), budget)?);
            }
            out
        }
        Pattern::Tuple(fields) => {
            let mut out = Vec::new();
            for n in nodes
                .iter()
                .filter(|n| n.op == NodeOp::Tuple && n.children.len() == fields.len())
            {
                budget.spend()?;
                let mut x = m.clone();
                add_cover(g, &mut x, &n.cover);
                out.extend(seq(mg, g, fields, &n.children, x, budget)?);
            }
            out
        }
        Pattern::AnyTuple => match nodes.iter().find(|n| n.op == NodeOp::Tuple) {
            Some(n) => {
                budget.spend()?;
                let mut x = m.clone();
                add_cover(g, &mut x, &n.cover);
                vec![x]
            }
            None => Vec::new(),
        },
        Pattern::Proj(inner, i) => {
            let mut out = Vec::new();
            for n in nodes.iter().filter(|n| n.op == NodeOp::Proj(*i)) {
                budget.spend()?;
                let mut x = m.clone();
                add_cover(g, &mut x, &n.cover);
                out.extend(match_at(mg, g, inner, n.children[0], x, budget)?);
            }
            out
        }
        Pattern::DType(inner, ds) => match class_type(mg, g, class) {
            Some(Type::Tensor(t)) if ds.contains(&t.dtype) => {
                match_at(mg, g, inner, class, m, budget)?
            }
            _ => Vec::new(),
        },
        Pattern::Rank(inner, r) => match class_type(mg, g, class) {
            Some(Type::Tensor(t)) if t.rank() == *r as usize => {
                match_at(mg, g, inner, class, m, budget)?
            }
            _ => Vec::new(),
        },
        Pattern::Shape(inner, dims) => match class_type(mg, g, class) {
            Some(Type::Tensor(t))
                if t.rank() == dims.len()
                    && t.shape
                        .iter()
                        .zip(dims)
                        .all(|(d, want)| want.is_none_or(|w| *d == Dim::Fixed(w))) =>
            {
                match_at(mg, g, inner, class, m, budget)?
            }
            _ => Vec::new(),
        },
        Pattern::Where(inner, p) => match_at(mg, g, inner, class, m, budget)?
            .into_iter()
            .filter(|x| {
                let caps: Vec<Option<usize>> = x
                    .caps
                    .iter()
                    .map(|c| c.and_then(|c| mg.representative(mg.egraph.find(c))))
                    .collect();
                pred::holds(g, p, &caps)
            })
            .collect(),
    })
}

#[allow(clippy::too_many_arguments)]
fn call_matches(
    mg: &MatchGraph,
    g: &DataflowGraph<'_>,
    class: Id,
    ops: &[crate::ir::OpId],
    attrs: &[(String, crate::ir::AttrValue)],
    args: &[Pattern],
    m: Match,
    budget: &mut Budget,
) -> Result<Vec<Match>, Overflow> {
    let mut out = Vec::new();
    // Matches found so far, hashed once there are more than a few (a linear scan is cheaper
    // for the usual handful).
    let mut found: Option<rustc_hash::FxHashSet<Match>> = None;
    for n in &mg.egraph[class].nodes {
        let NodeOp::Call(op, a) = n.op else { continue };
        if !ops.contains(&op) || n.children.len() != args.len() {
            continue;
        }
        let def = registry().get(op);
        let values = &mg.attrs[a as usize];
        if !attrs
            .iter()
            .all(|(k, v)| values.get(def.attrs, k) == Some(v))
        {
            continue;
        }
        budget.spend()?;
        let mut x = m.clone();
        add_cover(g, &mut x, &n.cover);
        for r in seq(mg, g, args, &n.children, x, budget)? {
            let fresh = if out.len() < 8 {
                !out.contains(&r)
            } else {
                found
                    .get_or_insert_with(|| out.iter().cloned().collect())
                    .insert(r.clone())
            };
            if fresh {
                out.push(r);
            }
        }
    }
    Ok(out)
}

/// Matches each pattern against the corresponding class, threading the captures through.
fn seq(
    mg: &MatchGraph,
    g: &DataflowGraph<'_>,
    pats: &[Pattern],
    classes: &[Id],
    m: Match,
    budget: &mut Budget,
) -> Result<Vec<Match>, Overflow> {
    let mut partial = vec![m];
    for (p, &c) in pats.iter().zip(classes) {
        let mut next = Vec::new();
        for x in partial {
            if matches!(p, Pattern::Wildcard) {
                next.push(x);
            } else {
                next.extend(match_at(mg, g, p, c, x, budget)?);
            }
        }
        partial = next;
        if partial.is_empty() {
            break;
        }
    }
    Ok(partial)
}
