//! The dataflow graph of a function: TVM's `IndexedGraph` over one function.
//!
//! Every distinct expression reachable from the function becomes one node, plus one node per
//! distinct operator and one for the function itself. Nodes are numbered in TVM's post-DFS
//! order: a node comes after its children, a call's callee is visited before its arguments (so an
//! operator's node comes just before the first argument subtree of its first call), a function's
//! parameters come before its body, a let visits value, bound variable, then body. Edges follow
//! TVM's `IndexedGraph` (a function's only input is its body; a let's value feeds its variable).

pub mod index_set;

pub use index_set::IndexSet;

use crate::ir::*;
use crate::ops::registry;
use crate::source::Span;
use std::collections::HashMap;

/// What a dataflow node stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeRef {
    /// An expression of the module.
    Expr(ExprId),
    /// An operator (all calls of it share this node).
    Op(OpId),
    /// The function the graph was built for.
    Func(FuncId),
}

/// A post-DFS index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeIdx(pub u32);

impl NodeIdx {
    /// The index as `usize`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One node with its edges.
#[derive(Clone, Debug)]
pub struct Node {
    /// What the node stands for.
    pub what: NodeRef,
    /// Nodes this one reads, in order (a node read twice appears twice).
    pub inputs: Vec<NodeIdx>,
    /// Nodes that read this one, in order of the readers' indices.
    pub outputs: Vec<NodeIdx>,
}

/// The dataflow graph of one function.
#[derive(Clone, Debug)]
pub struct Graph {
    /// The function.
    pub func: FuncId,
    /// Nodes in post-DFS order.
    pub nodes: Vec<Node>,
    /// The node of each expression reachable from the function.
    pub node_of: HashMap<NodeRef, NodeIdx>,
}

impl Graph {
    /// Builds the graph of a function of `m`.
    pub fn build(m: &Module, func: FuncId) -> Graph {
        let mut g = Graph {
            func,
            nodes: Vec::new(),
            node_of: HashMap::new(),
        };
        let root = NodeRef::Func(func);
        let mut stack: Vec<(NodeRef, bool)> = vec![(root, false)];
        while let Some((r, expanded)) = stack.pop() {
            if g.node_of.contains_key(&r) {
                continue;
            }
            if expanded {
                let idx = NodeIdx(g.nodes.len() as u32);
                g.node_of.insert(r, idx);
                g.nodes.push(Node {
                    what: r,
                    inputs: Vec::new(),
                    outputs: Vec::new(),
                });
                continue;
            }
            stack.push((r, true));
            for c in children(m, r).into_iter().rev() {
                if !g.node_of.contains_key(&c) {
                    stack.push((c, false));
                }
            }
        }
        let let_values: HashMap<VarId, ExprId> = m
            .exprs
            .iter()
            .filter_map(|x| match x {
                Expr::Let { var, value, .. } => Some((*var, *value)),
                _ => None,
            })
            .collect();
        for i in 0..g.nodes.len() {
            let ins: Vec<NodeIdx> = inputs(m, &let_values, g.nodes[i].what)
                .into_iter()
                .filter_map(|c| g.node_of.get(&c).copied())
                .collect();
            for &c in &ins {
                g.nodes[c.index()].outputs.push(NodeIdx(i as u32));
            }
            g.nodes[i].inputs = ins;
        }
        g
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node of an expression, if reachable.
    pub fn index_of(&self, e: ExprId) -> Option<NodeIdx> {
        self.node_of.get(&NodeRef::Expr(e)).copied()
    }

    /// A short kind name for a node (`Call`, `Var`, `Constant`, `Op`, ...).
    pub fn kind_name(&self, m: &Module, i: NodeIdx) -> &'static str {
        match self.nodes[i.index()].what {
            NodeRef::Op(_) => "Op",
            NodeRef::Func(_) => "Function",
            NodeRef::Expr(e) => m.expr(e).kind_name(),
        }
    }

    /// The operator a node is, or calls.
    pub fn op_name(&self, m: &Module, i: NodeIdx) -> Option<&'static str> {
        match self.nodes[i.index()].what {
            NodeRef::Op(op) => Some(registry().get(op).name),
            NodeRef::Expr(e) => match m.expr(e) {
                Expr::Call {
                    callee: Callee::Op(op),
                    ..
                }
                | Expr::Op(op) => Some(registry().get(*op).name),
                _ => None,
            },
            NodeRef::Func(_) => None,
        }
    }

    /// The source span of a node.
    pub fn span(&self, m: &Module, i: NodeIdx) -> Option<Span> {
        match self.nodes[i.index()].what {
            NodeRef::Expr(e) => Some(m.span(e)),
            NodeRef::Func(f) => Some(m.func(f).span),
            NodeRef::Op(_) => None,
        }
    }

    /// The `%name` a node has in the source: graph binding or variable name.
    pub fn binding(&self, m: &Module, i: NodeIdx) -> Option<String> {
        match self.nodes[i.index()].what {
            NodeRef::Expr(e) => match m.expr(e) {
                Expr::Var(v) => Some(format!("%{}", m.var(*v).name)),
                _ => m.bindings[e.index()].as_ref().map(|b| format!("%{b}")),
            },
            _ => None,
        }
    }
}

/// Children in TVM's visiting order.
fn children(m: &Module, r: NodeRef) -> Vec<NodeRef> {
    match r {
        NodeRef::Op(_) => Vec::new(),
        NodeRef::Func(f) => {
            let func = m.func(f);
            let mut v: Vec<NodeRef> = func
                .params
                .iter()
                .map(|p| NodeRef::Expr(m.var(*p).expr))
                .collect();
            v.push(NodeRef::Expr(func.body));
            v
        }
        NodeRef::Expr(e) => match m.expr(e) {
            Expr::Call {
                callee: Callee::Op(op),
                args,
                ..
            } => std::iter::once(NodeRef::Op(*op))
                .chain(args.iter().map(|a| NodeRef::Expr(*a)))
                .collect(),
            Expr::Func(f) => children(m, NodeRef::Func(*f)),
            _ => m.operands(e).into_iter().map(NodeRef::Expr).collect(),
        },
    }
}

/// Inputs (data edges) in TVM's order.
fn inputs(m: &Module, let_values: &HashMap<VarId, ExprId>, r: NodeRef) -> Vec<NodeRef> {
    match r {
        NodeRef::Op(_) => Vec::new(),
        NodeRef::Func(f) => vec![NodeRef::Expr(m.func(f).body)],
        NodeRef::Expr(e) => match m.expr(e) {
            // A let-bound variable is fed by its value.
            Expr::Var(v) => let_values
                .get(v)
                .map(|&x| NodeRef::Expr(x))
                .into_iter()
                .collect(),
            Expr::Let { body, .. } => vec![NodeRef::Expr(*body)],
            Expr::Func(f) => vec![NodeRef::Expr(m.func(*f).body)],
            _ => children(m, r),
        },
    }
}
