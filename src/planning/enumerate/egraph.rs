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
use crate::ops::{registry, Op};
use crate::rules::ruletree::{Pattern, Program};
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

/// What adds e-nodes to the e-graph: the built-in commutativity of `add` and `multiply`, or a
/// declared equivalence or rewrite (by index in [`Program::equivalences`] or
/// [`Program::rewrites`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grower {
    /// Commutativity of `add` and `multiply`.
    Commutativity,
    /// `equiv` number `i`.
    Equivalence(usize),
    /// `rewrite` number `i`.
    Rewrite(usize),
}

/// The e-graph outgrew one of its limits ([`EGraphLimits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EGraphOverflow {
    /// More than `max_enodes` e-nodes were added, or matching one equivalence in one round built
    /// more than [`MATCH_WORK`] × (the e-nodes and `max_enodes`) partial matches (`work`).
    ENodes {
        /// What was growing.
        grower: Grower,
        /// The partial matches allowed, when the matching work rather than the e-nodes passed
        /// the bound.
        work: Option<u64>,
    },
    /// The equivalences still changed the e-graph after `max_iters` rounds.
    Iterations {
        /// What changed it most in the last round.
        grower: Grower,
    },
}

/// The bounds of equivalence saturation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EGraphLimits {
    /// E-nodes that equivalences may add beyond the one per value node of the graph and the
    /// swapped form of each of its `add` and `multiply` calls.
    pub max_enodes: usize,
    /// Rounds of equivalence application.
    pub max_iters: usize,
}

/// Partial matches the matcher may build per e-node and per unit of a limit: matching one
/// equivalence in one round may build `MATCH_WORK × (e-nodes + max_enodes)` of them, and one
/// pattern rule of a target `MATCH_WORK × (e-nodes + max_candidates)`. Matching on the shipped
/// rules needs at most about 8 per e-node (a BERT-large of 384 layers).
pub const MATCH_WORK: u64 = 4;

/// The e-graph of one dataflow graph.
pub(crate) struct MatchGraph {
    pub egraph: EGraph<ENode, ()>,
    /// The class of each dataflow node (value nodes only).
    pub class_of: Vec<Option<Id>>,
    /// Attribute values referenced by `NodeOp::Call`.
    pub attrs: Vec<Attrs>,
    /// Rounds of equivalence application until nothing changed (the last one included).
    pub rounds: usize,
    /// The most e-nodes the e-graph may hold.
    cap: usize,
}

impl MatchGraph {
    /// Builds the e-graph of `g` and applies the built-in and declared equivalences to a fixed
    /// point, within `limits`.
    pub fn build(
        g: &DataflowGraph<'_>,
        program: &Program,
        limits: &EGraphLimits,
    ) -> Result<MatchGraph, EGraphOverflow> {
        let mut mg = MatchGraph {
            egraph: EGraph::default(),
            class_of: vec![None; g.len()],
            attrs: Vec::new(),
            rounds: 0,
            cap: usize::MAX,
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
        mg.saturate(g, program, limits)?;
        Ok(mg)
    }

    /// E-nodes in the e-graph (each distinct e-node once, merged ones included).
    pub fn size(&self) -> usize {
        self.added()
    }

    /// E-nodes added so far (each distinct e-node once; `EGraph::nodes` only grows).
    fn added(&self) -> usize {
        self.egraph.nodes().len()
    }

    fn check_size(&self, grower: Grower) -> Result<(), EGraphOverflow> {
        if self.added() > self.cap {
            return Err(EGraphOverflow::ENodes { grower, work: None });
        }
        Ok(())
    }

    /// Rounds of commutativity and every declared equivalence (both ways) and rewrite, until a
    /// round changes nothing.
    fn saturate(
        &mut self,
        g: &DataflowGraph<'_>,
        program: &Program,
        limits: &EGraphLimits,
    ) -> Result<(), EGraphOverflow> {
        // What added the most e-nodes (or, failing that, merged the most classes) in the last
        // round: blamed when a later step, or the round limit, reports the growth.
        let mut blamed = Grower::Commutativity;
        loop {
            if self.rounds == limits.max_iters {
                return Err(EGraphOverflow::Iterations { grower: blamed });
            }
            self.rounds += 1;
            let before = (self.added(), self.egraph.number_of_classes());
            let mut most = (0usize, 0usize, Grower::Commutativity);
            let mut track = |mg: &MatchGraph, at: (usize, usize), grower: Grower| {
                let grew = (
                    mg.added() - at.0,
                    at.1.saturating_sub(mg.egraph.number_of_classes()),
                );
                if (grew.0, grew.1) > (most.0, most.1) {
                    most = (grew.0, grew.1, grower);
                }
            };
            let at = (self.added(), self.egraph.number_of_classes());
            // Commutativity adds one e-node per `add` and `multiply`: growth seen here comes
            // from what the declared equivalences built.
            self.commute(blamed)?;
            if self.rounds == 1 {
                // The graph's own e-nodes and their swapped forms (one per `add` and
                // `multiply`): what the equivalences add is counted from here.
                self.cap = self.added().saturating_add(limits.max_enodes);
            }
            track(self, at, Grower::Commutativity);
            let declared = program
                .equivalences
                .iter()
                .enumerate()
                .map(|(i, (l, r))| (l, r, Grower::Equivalence(i)))
                .chain(
                    program
                        .rewrites
                        .iter()
                        .enumerate()
                        .map(|(i, (l, r))| (l, r, Grower::Rewrite(i))),
                )
                .chain(
                    program
                        .equivalences
                        .iter()
                        .enumerate()
                        .map(|(i, (l, r))| (r, l, Grower::Equivalence(i))),
                );
            for (lhs, rhs, grower) in declared {
                let at = (self.added(), self.egraph.number_of_classes());
                self.apply(g, lhs, rhs, grower, limits)?;
                track(self, at, grower);
            }
            self.egraph.rebuild();
            if most.0 > 0 || most.1 > 0 {
                blamed = most.2;
            }
            if (self.added(), self.egraph.number_of_classes()) == before {
                return Ok(());
            }
        }
    }

    /// Adds the swapped form of every two-argument `add` and `multiply`; past the size limit,
    /// `blamed` is reported.
    fn commute(&mut self, blamed: Grower) -> Result<(), EGraphOverflow> {
        let mut new = Vec::new();
        for class in self.egraph.classes() {
            for n in &class.nodes {
                if let NodeOp::Call(op, _) = n.op {
                    let commutes = matches!(registry().get(op).op, Op::Add | Op::Multiply);
                    if commutes && n.children.len() == 2 {
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
            self.check_size(blamed)?;
        }
        Ok(())
    }

    /// Wherever `lhs` matches, adds `rhs` (with the captures' classes) to the matched class.
    fn apply(
        &mut self,
        g: &DataflowGraph<'_>,
        lhs: &Pattern,
        rhs: &Pattern,
        grower: Grower,
        limits: &EGraphLimits,
    ) -> Result<(), EGraphOverflow> {
        let steps = MATCH_WORK
            .saturating_mul((self.added() as u64).saturating_add(limits.max_enodes as u64));
        let too_much = EGraphOverflow::ENodes {
            grower,
            work: Some(steps),
        };
        let mut budget = super::matcher::Budget::new(steps);
        let mut work = Vec::new();
        let classes: Vec<Id> = self.egraph.classes().map(|c| c.id).collect();
        for class in classes {
            let found = super::matcher::match_class(self, g, lhs, class, &mut budget)
                .map_err(|_| too_much)?;
            for m in found {
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
            self.check_size(grower)?;
        }
        Ok(())
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
