//! The forward graph FuseOps partitions: TVM's Relay `IndexedForwardGraph` builder
//! (`IndexedForwardGraphCreator` in `fuse_ops.cc`; docs/fuse.md, "The forward graph").
//!
//! This is **not** the Collage [`crate::analysis::dataflow::Graph`]: operators, globals and function
//! literals get no node, edges carry a pattern kind, and some values are marked `extern_ref`.
//!
//! The builder walks one function the way TVM's memoising `ExprVisitor` does, with an explicit
//! task stack instead of recursion:
//!
//! * *link(child, parent, kind)* records the edge child → parent with `kind`,
//!   or marks the child extern when there is no parent;
//! * *append(e)* gives `e` the next post-DFS index, once, after its
//!   operands were visited.
//!
//! | expression | node kind | links made before visiting the operands |
//! |---|---|---|
//! | `fn` literal with a `Compiler` attribute | — | none: nothing inside gets a node |
//! | other `fn` literal (not appended) | — | parameters and body extern; then parameters, body |
//! | variable | Opaque | — |
//! | constant | ElemWise if rank 0 with dtype int32/int64/float32/float64/bool, else Opaque | — |
//! | operator call | the registry kind (Opaque for a dynamic result of a data-dependent operator) | each argument → call with the call's kind, refined Broadcast → ElemWise when the argument's and the result's shapes are structurally equal |
//! | other call | Opaque | callee → call (Opaque); callee extern; arguments → call (Opaque) |
//! | tuple | Tuple | tensor fields → tuple (Injective); other fields extern |
//! | projection | Injective | tuple → projection (Injective); if the tuple has a non-tensor field: tuple extern, projection Opaque |
//! | `let` | Opaque | variable, value and body extern; chains visited iteratively |
//! | `if` | Opaque | condition and both branches extern |
//!
//! The function itself is linked with no parent and never appended; its parameters and body are
//! extern. Order: parameters first, then the post-order of the body, callee before arguments,
//! arguments left to right, a shared expression where its first visit completes.

use crate::ir::{Callee, Constant, DType, Dim, Expr, ExprId, FuncId, Module, Type};
use crate::ops::{registry, OpPattern};

/// An edge from a producer to one of its consumers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The consumer's post-DFS index.
    pub node: u32,
    /// The edge kind.
    pub pattern: OpPattern,
}

/// One node of the forward graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The expression the node stands for.
    pub expr: ExprId,
    /// The node's pattern kind.
    pub pattern: OpPattern,
    /// Whether the value is referenced from outside the analysed dataflow (it has no
    /// post-dominator and is never a source or an interior node of a fusion).
    pub extern_ref: bool,
    /// Output edges in creation order (a value used twice by one consumer gives two edges).
    pub outputs: Vec<Edge>,
}

/// The FuseOps forward graph of one function: nodes in post-DFS order.
#[derive(Clone, Debug, Default)]
pub struct ForwardGraph {
    /// Nodes; a node's index is its post-DFS index.
    pub nodes: Vec<Node>,
    /// For each expression of the module, its node index, or `u32::MAX` if it has none.
    index_of: Vec<u32>,
}

/// A test graph's node row: kind, extern flag, output edges `(consumer, kind)`.
#[cfg(test)]
pub(crate) type Row<'a> = (OpPattern, bool, &'a [(u32, OpPattern)]);

impl ForwardGraph {
    /// Builds the forward graph of function `func` of `m` (which must have been type-checked).
    pub fn build(m: &Module, func: FuncId) -> ForwardGraph {
        Builder::new(m).run(func)
    }

    /// Builds a graph directly from nodes (for tests and synthetic graphs). Edges must point
    /// forward, to nodes with a larger index.
    pub fn from_nodes(nodes: Vec<Node>) -> ForwardGraph {
        let len = nodes.iter().map(|n| n.expr.index() + 1).max().unwrap_or(0);
        let mut index_of = vec![u32::MAX; len];
        for (i, n) in nodes.iter().enumerate() {
            debug_assert!(n.outputs.iter().all(|e| e.node as usize > i));
            index_of[n.expr.index()] = i as u32;
        }
        ForwardGraph { nodes, index_of }
    }

    /// A graph from rows `(kind, extern flag, output edges (consumer, kind))`, node `i` standing
    /// for expression `i` (test graphs).
    #[cfg(test)]
    pub(crate) fn from_rows(rows: &[Row<'_>]) -> ForwardGraph {
        ForwardGraph::from_nodes(
            rows.iter()
                .enumerate()
                .map(|(i, (k, ext, outs))| Node {
                    expr: ExprId(i as u32),
                    pattern: *k,
                    extern_ref: *ext,
                    outputs: outs
                        .iter()
                        .map(|&(node, pattern)| Edge { node, pattern })
                        .collect(),
                })
                .collect(),
        )
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The post-DFS index of an expression, if it has a node.
    pub fn index(&self, e: ExprId) -> Option<usize> {
        match self.index_of.get(e.index()) {
            Some(&i) if i != u32::MAX => Some(i as usize),
            _ => None,
        }
    }
}

/// Whether an operator's shape function is data dependent (TVM's `TShapeDataDependent`): the
/// `dyn.*` operators, `arange` and `argwhere`. A call of such an operator with a dynamic result
/// type is Opaque.
pub fn is_data_dependent(op_name: &str) -> bool {
    op_name.starts_with("dyn.") || matches!(op_name, "arange" | "argwhere")
}

/// Whether a type mentions a dynamic (`?`) dimension (TVM's `IsDynamic`).
fn is_dynamic(ty: &Type) -> bool {
    let mut stack = vec![ty];
    while let Some(t) = stack.pop() {
        match t {
            Type::Tensor(t) => {
                if t.shape.contains(&Dim::Any) {
                    return true;
                }
            }
            Type::Tuple(fs) => stack.extend(fs),
            Type::Func(f) => {
                stack.extend(&f.params);
                stack.push(&f.ret);
            }
            Type::Incomplete => {}
        }
    }
    false
}

/// The kind of a constant: ElemWise for a rank-0 constant of a "simple" dtype, else Opaque.
fn constant_pattern(c: &Constant) -> OpPattern {
    let ty = c.ty();
    let simple = [DType::I32, DType::I64, DType::F32, DType::F64, DType::BOOL].contains(&ty.dtype);
    if ty.rank() == 0 && simple {
        OpPattern::ElemWise
    } else {
        OpPattern::Opaque
    }
}

/// One step of the iterative visitor.
#[derive(Clone, Copy, Debug)]
enum Task {
    /// `VisitExpr(e)`: skip if done, else link its operands and schedule their visits.
    Visit(ExprId),
    /// Append `e` and mark it visited.
    Append(ExprId),
    /// Mark `e` visited without appending it (function literals).
    Done(ExprId),
    /// The pre-visit links of a `let` in a chain.
    LetLinks(ExprId),
}

/// The state of one graph construction.
struct Builder<'m> {
    m: &'m Module,
    /// Per expression: visit completed.
    visited: Vec<bool>,
    /// Per expression: extern flag.
    extern_ref: Vec<bool>,
    /// Per expression: pattern kind (Opaque unless set).
    pattern: Vec<OpPattern>,
    /// Per expression: appended already.
    appended: Vec<bool>,
    /// All edges `(producer, consumer, kind)` in creation order.
    edges: Vec<(ExprId, ExprId, OpPattern)>,
    /// Appended expressions in post-DFS order.
    order: Vec<ExprId>,
    tasks: Vec<Task>,
}

impl<'m> Builder<'m> {
    /// A builder over the expressions of `m`.
    fn new(m: &'m Module) -> Builder<'m> {
        let n = m.exprs.len();
        Builder {
            m,
            visited: vec![false; n],
            extern_ref: vec![false; n],
            pattern: vec![OpPattern::Opaque; n],
            appended: vec![false; n],
            edges: Vec::new(),
            order: Vec::new(),
            tasks: Vec::new(),
        }
    }

    /// *link(child, parent, kind)*: an edge child → parent, or the extern flag without a parent.
    fn link(&mut self, child: ExprId, parent: Option<ExprId>, kind: OpPattern) {
        match parent {
            Some(p) => self.edges.push((child, p, kind)),
            None => self.extern_ref[child.index()] = true,
        }
    }

    /// *append(e)*: gives `e` the next post-DFS index.
    fn append(&mut self, e: ExprId) {
        debug_assert!(!self.appended[e.index()], "expression appended twice");
        if !self.appended[e.index()] {
            self.appended[e.index()] = true;
            self.order.push(e);
        }
    }

    /// Builds the graph of `func`.
    fn run(mut self, func: FuncId) -> ForwardGraph {
        // The function is linked with no parent, then visited like a literal (never appended).
        self.visit_function(func, None);
        self.drain();
        self.finish()
    }

    /// Links and schedules a function: skipped entirely with a `Compiler` attribute.
    fn visit_function(&mut self, func: FuncId, literal: Option<ExprId>) {
        let f = self.m.func(func);
        if f.attr("Compiler").is_some() {
            if let Some(e) = literal {
                self.visited[e.index()] = true;
            }
            return;
        }
        for &p in &f.params {
            self.link(self.m.var(p).expr, None, OpPattern::Opaque);
        }
        self.link(f.body, None, OpPattern::Opaque);
        if let Some(e) = literal {
            self.tasks.push(Task::Done(e));
        }
        self.tasks.push(Task::Visit(f.body));
        for &p in f.params.iter().rev() {
            self.tasks.push(Task::Visit(self.m.var(p).expr));
        }
    }

    fn tensor_shape(&self, e: ExprId) -> Option<&'m [Dim]> {
        match self.m.ty(e) {
            Some(Type::Tensor(t)) => Some(&t.shape),
            _ => None,
        }
    }

    fn is_tensor(&self, e: ExprId) -> bool {
        matches!(self.m.ty(e), Some(Type::Tensor(_)))
    }

    fn drain(&mut self) {
        let m = self.m;
        while let Some(task) = self.tasks.pop() {
            match task {
                Task::Append(e) => {
                    self.append(e);
                    self.visited[e.index()] = true;
                }
                Task::Done(e) => self.visited[e.index()] = true,
                Task::LetLinks(e) => {
                    if let Expr::Let { var, value, body } = m.expr(e) {
                        self.link(m.var(*var).expr, None, OpPattern::Opaque);
                        self.link(*value, None, OpPattern::Opaque);
                        self.link(*body, None, OpPattern::Opaque);
                    }
                }
                Task::Visit(e) => {
                    if !self.visited[e.index()] {
                        self.visit(e);
                    }
                }
            }
        }
    }

    /// `VisitExpr_` of one expression not visited yet.
    fn visit(&mut self, e: ExprId) {
        let m = self.m;
        match m.expr(e) {
            Expr::Var(_) => {
                self.append(e);
                self.visited[e.index()] = true;
            }
            Expr::Global(_) | Expr::Op(_) => self.visited[e.index()] = true,
            Expr::Const(c) => {
                self.append(e);
                self.pattern[e.index()] = constant_pattern(c);
                self.visited[e.index()] = true;
            }
            Expr::Call { callee, args, .. } => {
                let kind = match callee {
                    Callee::Op(op) => {
                        let def = registry().get(*op);
                        let dynamic = m.ty(e).is_some_and(is_dynamic);
                        if dynamic && is_data_dependent(def.name) {
                            OpPattern::Opaque
                        } else {
                            def.pattern
                        }
                    }
                    Callee::Expr(c) => {
                        self.link(*c, Some(e), OpPattern::Opaque);
                        OpPattern::Opaque
                    }
                };
                self.pattern[e.index()] = kind;
                if let Callee::Expr(c) = callee {
                    self.link(*c, None, OpPattern::Opaque);
                }
                let rshape = self.tensor_shape(e);
                for &a in args {
                    let mut edge = kind;
                    if edge == OpPattern::Broadcast {
                        if let (Some(r), Some(s)) = (rshape, self.tensor_shape(a)) {
                            if r == s {
                                edge = OpPattern::ElemWise;
                            }
                        }
                    }
                    self.link(a, Some(e), edge);
                }
                self.tasks.push(Task::Append(e));
                for &a in args.iter().rev() {
                    self.tasks.push(Task::Visit(a));
                }
                if let Callee::Expr(c) = callee {
                    self.tasks.push(Task::Visit(*c));
                }
            }
            Expr::Tuple(fields) => {
                self.pattern[e.index()] = OpPattern::Tuple;
                for &f in fields {
                    if self.is_tensor(f) {
                        self.link(f, Some(e), OpPattern::Injective);
                    } else {
                        self.link(f, None, OpPattern::Opaque);
                    }
                }
                self.tasks.push(Task::Append(e));
                for &f in fields.iter().rev() {
                    self.tasks.push(Task::Visit(f));
                }
            }
            Expr::Proj { tuple, .. } => {
                let has_non_tensor = match m.ty(*tuple) {
                    Some(Type::Tuple(fs)) => fs.iter().any(|t| !matches!(t, Type::Tensor(_))),
                    // TVM asserts a tuple type here; be conservative otherwise.
                    _ => true,
                };
                if has_non_tensor {
                    self.link(*tuple, None, OpPattern::Opaque);
                } else {
                    self.pattern[e.index()] = OpPattern::Injective;
                    self.link(*tuple, Some(e), OpPattern::Injective);
                }
                self.tasks.push(Task::Append(e));
                self.tasks.push(Task::Visit(*tuple));
            }
            Expr::If {
                cond,
                then_branch,
                else_branch,
            } => {
                for c in [*cond, *then_branch, *else_branch] {
                    self.link(c, None, OpPattern::Opaque);
                }
                self.tasks.push(Task::Append(e));
                for c in [*else_branch, *then_branch, *cond] {
                    self.tasks.push(Task::Visit(c));
                }
            }
            Expr::Func(f) => self.visit_function(*f, Some(e)),
            Expr::Let { .. } => self.visit_let_chain(e),
        }
    }

    /// TVM's `ExpandANormalForm`: pre-visit each let of the chain (links, variable, value), then
    /// visit the innermost body and append the lets from the inside out.
    fn visit_let_chain(&mut self, first: ExprId) {
        let m = self.m;
        let mut chain = vec![first];
        loop {
            let cur = *chain.last().unwrap_or(&first);
            match m.expr(cur) {
                Expr::Let { body, .. }
                    if matches!(m.expr(*body), Expr::Let { .. }) && !self.visited[body.index()] =>
                {
                    chain.push(*body)
                }
                _ => break,
            }
        }
        // The tasks in execution order, pushed in reverse.
        let mut seq = Vec::with_capacity(chain.len() * 4 + 1);
        for &l in &chain {
            if let Expr::Let { var, value, .. } = m.expr(l) {
                seq.push(Task::LetLinks(l));
                seq.push(Task::Visit(m.var(*var).expr));
                seq.push(Task::Visit(*value));
            }
        }
        if let Some(&last) = chain.last() {
            if let Expr::Let { body, .. } = m.expr(last) {
                seq.push(Task::Visit(*body));
            }
        }
        for &l in chain.iter().rev() {
            seq.push(Task::Append(l));
        }
        self.tasks.extend(seq.into_iter().rev());
    }

    fn finish(self) -> ForwardGraph {
        let mut index_of = vec![u32::MAX; self.m.exprs.len()];
        for (i, e) in self.order.iter().enumerate() {
            index_of[e.index()] = i as u32;
        }
        let mut nodes: Vec<Node> = self
            .order
            .iter()
            .map(|&e| Node {
                expr: e,
                pattern: self.pattern[e.index()],
                extern_ref: self.extern_ref[e.index()],
                outputs: Vec::new(),
            })
            .collect();
        for &(child, parent, kind) in &self.edges {
            let (c, p) = (index_of[child.index()], index_of[parent.index()]);
            // Edges out of operators, globals and function literals are dropped: they have no
            // node. Consumers are always appended.
            if c != u32::MAX && p != u32::MAX {
                nodes[c as usize].outputs.push(Edge {
                    node: p,
                    pattern: kind,
                });
            }
        }
        ForwardGraph { nodes, index_of }
    }
}
