//! The e-graph patterns are matched on (see `docs/design/enumeration.md`).
//!
//! Every value node of the dataflow graph (variables, constants, operator calls, tuples,
//! projections) becomes one e-node whose children are the e-classes of its arguments. An e-node
//! carries the dataflow node it stands for, so hash-consing never merges two distinct calls that
//! happen to have identical operands. Equivalences then add e-nodes to existing classes: the
//! swapped form of every `add` and `multiply`, and the right-hand side of every declared
//! `equiv`/`rewrite` wherever its left-hand side matches. An added e-node keeps the identity of
//! the node it was derived from, and records in its *cover* which dataflow nodes it stands for,
//! so that every match maps back to exactly the nodes it covers.

use super::graph::DataflowGraph;
use crate::ir::{Attrs, Callee, Expr, OpId};
use crate::ops::registry;
use crate::ruletree::{Pattern, Program};
use egg::{EGraph, Id, Language};

/// What an e-node is, ignoring its children.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum NodeOp {
    /// A call of an operator; the attributes are `attrs[index]`.
    Call(OpId, u32),
    /// A tuple.
    Tuple,
    /// A projection.
    Proj(u32),
    /// A constant.
    Const,
    /// Anything else that is a value (a variable, a non-operator call, ...).
    Leaf,
}

/// An e-node: an operation, the dataflow nodes it stands for, and its children.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ENode {
    pub op: NodeOp,
    /// The dataflow nodes this e-node stands for (sorted). An original node covers itself; the
    /// root of a rewrite's right-hand side covers the nodes its left-hand side matched; other
    /// nodes built by a rewrite cover nothing (they exist only inside that shape).
    pub cover: Vec<u32>,
    pub children: Vec<Id>,
}

impl Language for ENode {
    type Discriminant = NodeOp;

    fn discriminant(&self) -> NodeOp {
        self.op.clone()
    }

    /// Operation and arity only: which dataflow node an e-node stands for does not matter to
    /// pattern matching.
    fn matches(&self, other: &ENode) -> bool {
        let same_op = match (&self.op, &other.op) {
            (NodeOp::Call(a, _), NodeOp::Call(b, _)) => a == b,
            (a, b) => a == b,
        };
        same_op && self.children.len() == other.children.len()
    }

    fn children(&self) -> &[Id] {
        &self.children
    }

    fn children_mut(&mut self) -> &mut [Id] {
        &mut self.children
    }
}

/// Why equivalence saturation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// No equivalence added anything new.
    Saturated,
    /// The round limit was reached.
    RoundLimit,
    /// The e-graph grew past its size limit.
    SizeLimit,
}

/// Rounds of equivalence application at most.
const MAX_ROUNDS: usize = 8;

/// The e-graph of one dataflow graph.
pub(crate) struct MatchGraph {
    pub egraph: EGraph<ENode, ()>,
    /// The class of each dataflow node (value nodes only).
    pub class_of: Vec<Option<Id>>,
    /// Attribute values referenced by `NodeOp::Call`.
    pub attrs: Vec<Attrs>,
    /// The representative dataflow node of each class (canonical ids), for captures.
    pub why_stopped: StopReason,
}

impl MatchGraph {
    /// Builds the e-graph of `g` and applies the built-in and declared equivalences.
    pub fn build(g: &DataflowGraph<'_>, program: &Program) -> MatchGraph {
        let mut mg = MatchGraph {
            egraph: EGraph::default(),
            class_of: vec![None; g.len()],
            attrs: Vec::new(),
            why_stopped: StopReason::Saturated,
        };
        for i in 0..g.len() {
            let Some(e) = g.expr(i) else { continue };
            let (op, args) = match g.module.expr(e) {
                Expr::Call {
                    callee: Callee::Op(op),
                    args,
                    attrs,
                } => {
                    mg.attrs.push(attrs.clone());
                    (NodeOp::Call(*op, (mg.attrs.len() - 1) as u32), args.clone())
                }
                Expr::Tuple(fields) => (NodeOp::Tuple, fields.clone()),
                Expr::Proj { tuple, index } => (NodeOp::Proj(*index), vec![*tuple]),
                Expr::Const(_) => (NodeOp::Const, Vec::new()),
                Expr::Var(_)
                | Expr::Call { .. }
                | Expr::Let { .. }
                | Expr::If { .. }
                | Expr::Global(_) => (NodeOp::Leaf, Vec::new()),
                Expr::Func(_) | Expr::Op(_) => continue,
            };
            let children: Option<Vec<Id>> = args
                .iter()
                .map(|a| g.node(*a).and_then(|n| mg.class_of[n]))
                .collect();
            let Some(children) = children else { continue };
            let id = mg.egraph.add(ENode {
                op,
                cover: vec![i as u32],
                children,
            });
            mg.class_of[i] = Some(id);
        }
        mg.saturate(g, program);
        mg
    }

    fn saturate(&mut self, g: &DataflowGraph<'_>, program: &Program) {
        let limit = 4 * self.egraph.total_number_of_nodes() + 64;
        for _ in 0..MAX_ROUNDS {
            let before = self.egraph.total_number_of_nodes();
            let unions_before = self.egraph.number_of_classes();
            self.commute();
            for (lhs, rhs) in program.equivalences.iter().chain(&program.rewrites) {
                self.apply(g, lhs, rhs);
            }
            for (lhs, rhs) in &program.equivalences {
                self.apply(g, rhs, lhs);
            }
            self.egraph.rebuild();
            let after = self.egraph.total_number_of_nodes();
            if after > limit {
                self.why_stopped = StopReason::SizeLimit;
                return;
            }
            if after == before && self.egraph.number_of_classes() == unions_before {
                self.why_stopped = StopReason::Saturated;
                return;
            }
        }
        self.why_stopped = StopReason::RoundLimit;
    }

    /// Adds the swapped form of every two-argument `add` and `multiply`.
    fn commute(&mut self) {
        let mut new = Vec::new();
        for class in self.egraph.classes() {
            for n in &class.nodes {
                if let NodeOp::Call(op, _) = n.op {
                    let name = registry().get(op).name;
                    if matches!(name, "add" | "multiply") && n.children.len() == 2 {
                        let mut swapped = n.clone();
                        swapped.children.swap(0, 1);
                        new.push((class.id, swapped));
                    }
                }
            }
        }
        new.sort();
        for (id, n) in new {
            let added = self.egraph.add(n);
            self.egraph.union(id, added);
        }
    }

    /// Wherever `lhs` matches, adds `rhs` (with the captures' classes) to the matched class.
    fn apply(&mut self, g: &DataflowGraph<'_>, lhs: &Pattern, rhs: &Pattern) {
        let mut work = Vec::new();
        let classes: Vec<Id> = self.egraph.classes().map(|c| c.id).collect();
        for class in classes {
            for m in super::matcher::match_class(self, g, lhs, class) {
                work.push((class, m));
            }
        }
        for (class, m) in work {
            let mut cover = m.cover.clone();
            cover.sort_unstable();
            cover.dedup();
            if let Some(id) = self.instantiate(rhs, &m.caps, Some(cover)) {
                self.egraph.union(class, id);
            }
        }
    }

    /// Builds the e-nodes of a right-hand side; the root covers `root_cover`.
    fn instantiate(
        &mut self,
        p: &Pattern,
        caps: &[Option<Id>],
        root_cover: Option<Vec<u32>>,
    ) -> Option<Id> {
        match p {
            Pattern::Capture(id, _) => caps.get(*id as usize).copied().flatten(),
            Pattern::Call { ops, args, .. } => {
                let op = *ops.first()?;
                let children = args
                    .iter()
                    .map(|a| self.instantiate(a, caps, None))
                    .collect::<Option<Vec<_>>>()?;
                self.attrs.push(Attrs::defaults(registry().get(op).attrs));
                let attrs = (self.attrs.len() - 1) as u32;
                Some(self.egraph.add(ENode {
                    op: NodeOp::Call(op, attrs),
                    cover: root_cover.unwrap_or_default(),
                    children,
                }))
            }
            Pattern::Tuple(fields) => {
                let children = fields
                    .iter()
                    .map(|a| self.instantiate(a, caps, None))
                    .collect::<Option<Vec<_>>>()?;
                Some(self.egraph.add(ENode {
                    op: NodeOp::Tuple,
                    cover: root_cover.unwrap_or_default(),
                    children,
                }))
            }
            Pattern::Proj(inner, i) => {
                let child = self.instantiate(inner, caps, None)?;
                Some(self.egraph.add(ENode {
                    op: NodeOp::Proj(*i),
                    cover: root_cover.unwrap_or_default(),
                    children: vec![child],
                }))
            }
            // Other forms cannot be built; such right-hand sides add nothing.
            _ => None,
        }
    }

    /// The canonical class of a dataflow node.
    pub fn class(&self, node: usize) -> Option<Id> {
        self.class_of
            .get(node)
            .copied()
            .flatten()
            .map(|id| self.egraph.find(id))
    }

    /// The dataflow node a class stands for: the smallest original node in it.
    pub fn representative(&self, class: Id) -> Option<usize> {
        self.egraph[class]
            .nodes
            .iter()
            .filter(|n| n.cover.len() == 1)
            .filter_map(|n| n.cover.first())
            .min()
            .map(|&i| i as usize)
    }
}
