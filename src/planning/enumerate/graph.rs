//! The dataflow graph the partitioner works on: TVM's indexed graph plus, for every node, its
//! pattern kind and label, whether it can be inlined, whether it must be lowered, its basic
//! block, the set of nodes strictly downstream of it, and its immediate post-dominator.

use crate::analysis::dataflow::{Graph, IndexSet, NodeIdx, NodeRef};
use crate::ir::*;
use crate::ops::{registry, Op, OpPattern};

/// A function's dataflow graph with everything candidate enumeration needs.
pub struct DataflowGraph<'m> {
    /// The module.
    pub module: &'m Module,
    /// The indexed graph (post-DFS order, inputs and outputs).
    pub graph: Graph,
    /// Single-node kind (docs/collage.md, "Kinds and labels").
    pub kind: Vec<OpPattern>,
    /// Single-node label (`nn.relu`, `const`, `tuple`, `%x`, ...).
    pub label: Vec<String>,
    /// Whether the node is copied into extracted functions rather than becoming an input.
    pub inlinable: Vec<bool>,
    /// Whether the node needs a kernel (is an operator call, or a call of a primitive function).
    pub must_lower: Vec<bool>,
    /// The basic block (the nearest enclosing function or `if` node), per node.
    pub block: Vec<Option<u32>>,
    /// Nodes strictly downstream of each node.
    pub downstream: Vec<IndexSet>,
    /// Immediate post-dominator of each node.
    pub post_dom: Vec<Option<u32>>,
    /// The root (the function node).
    pub root: u32,
}

/// Whether a constant is a "simple scalar": rank 0 with a dtype TVM can write as a literal.
pub fn is_simple_scalar(t: &TensorType) -> bool {
    t.shape.is_empty()
        && [
            DType::I16,
            DType::I32,
            DType::I64,
            DType::F16,
            DType::F32,
            DType::F64,
            DType::BOOL,
        ]
        .contains(&t.dtype)
}

fn all_tensor_fields(t: Option<&Type>) -> bool {
    match t {
        Some(Type::Tuple(fields)) => fields.iter().all(|f| matches!(f, Type::Tensor(_))),
        _ => false,
    }
}

impl<'m> DataflowGraph<'m> {
    /// Builds the graph of a typed function.
    pub fn new(module: &'m Module, func: FuncId) -> DataflowGraph<'m> {
        let graph = Graph::build(module, func);
        let n = graph.len();
        let mut kind = Vec::with_capacity(n);
        let mut label = Vec::with_capacity(n);
        let mut inlinable = Vec::with_capacity(n);
        let mut must_lower = Vec::with_capacity(n);
        for node in &graph.nodes {
            let (k, l, inl, low) = node_facts(module, node.what);
            kind.push(k);
            label.push(l);
            inlinable.push(inl);
            must_lower.push(low);
        }
        let root = graph
            .node_of
            .get(&NodeRef::Func(func))
            .map_or(n.saturating_sub(1) as u32, |i| i.0);
        let block = blocks(module, &graph, root);
        let downstream = downstream_sets(&graph);
        let post_dom = post_dominators(&graph, root);
        DataflowGraph {
            module,
            graph,
            kind,
            label,
            inlinable,
            must_lower,
            block,
            downstream,
            post_dom,
            root,
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.graph.len()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.graph.is_empty()
    }

    /// Inputs of node `i`.
    pub fn inputs(&self, i: usize) -> &[NodeIdx] {
        &self.graph.nodes[i].inputs
    }

    /// Outputs of node `i`.
    pub fn outputs(&self, i: usize) -> &[NodeIdx] {
        &self.graph.nodes[i].outputs
    }

    /// The expression of node `i`, if it is one.
    pub fn expr(&self, i: usize) -> Option<ExprId> {
        match self.graph.nodes[i].what {
            NodeRef::Expr(e) => Some(e),
            _ => None,
        }
    }

    /// The node of an expression.
    pub fn node(&self, e: ExprId) -> Option<usize> {
        self.graph.index_of(e).map(NodeIdx::index)
    }

    /// Whether node `i` is a call of a registered operator.
    pub fn is_op_call(&self, i: usize) -> bool {
        self.called_op(i).is_some()
    }

    /// The registered operator node `i` calls, if it is such a call.
    pub fn called_op(&self, i: usize) -> Option<crate::ir::OpId> {
        self.expr(i).and_then(|e| self.module.called_op(e))
    }

    /// Whether node `i` is the external root.
    pub fn is_external(&self, i: usize) -> bool {
        i as u32 == self.root
    }

    /// An empty index set over this graph.
    pub fn empty_set(&self) -> IndexSet {
        IndexSet::new(self.len())
    }
}

/// Kind, label, inlinability and must-lower of one node.
fn node_facts(m: &Module, what: NodeRef) -> (OpPattern, String, bool, bool) {
    match what {
        NodeRef::Op(op) => (
            OpPattern::Opaque,
            format!("`{}", registry().get(op).name),
            true,
            false,
        ),
        NodeRef::Func(_) => (OpPattern::Opaque, "fn".into(), true, false),
        NodeRef::Expr(e) => match m.expr(e) {
            Expr::Var(v) => (
                OpPattern::Opaque,
                format!("%{}", m.var(*v).name),
                false,
                false,
            ),
            Expr::Global(g) => (
                OpPattern::Opaque,
                format!("@{}", m.globals[g.index()].name),
                false,
                false,
            ),
            Expr::Const(c) => {
                let simple = is_simple_scalar(&c.ty());
                let label = if simple { "scalar" } else { "const" };
                (OpPattern::ElemWise, label.into(), simple, false)
            }
            Expr::Op(op) => (
                OpPattern::Opaque,
                format!("`{}", registry().get(*op).name),
                true,
                false,
            ),
            Expr::Call {
                callee: Callee::Op(op),
                ..
            } => {
                let def = registry().get(*op);
                // `shape_of` and `vm.shape_of` are TVM operators the registry lacks; only a rules
                // file can declare them, so they are known by name.
                let special = matches!(def.op, Op::OnDevice | Op::DeviceCopy)
                    || matches!(def.name, "shape_of" | "vm.shape_of");
                (def.pattern, def.name.to_string(), false, !special)
            }
            Expr::Call {
                callee: Callee::Expr(c),
                ..
            } => match m.expr(*c) {
                Expr::Func(f) => {
                    let func = m.func(*f);
                    let primitive = func
                        .attr("Primitive")
                        .and_then(AttrValue::as_int)
                        .unwrap_or(0)
                        != 0;
                    match func.attr("TOpPattern").and_then(AttrValue::as_int) {
                        Some(k) => (kind_from_int(k), "call_prim".into(), false, primitive),
                        None => (OpPattern::Opaque, "call_fun".into(), false, primitive),
                    }
                }
                _ => (OpPattern::Opaque, "call_any".into(), false, false),
            },
            Expr::Tuple(_) => {
                let k = if all_tensor_fields(m.ty(e)) {
                    OpPattern::Injective
                } else {
                    OpPattern::Opaque
                };
                (k, "tuple".into(), false, false)
            }
            Expr::Proj { tuple, .. } => {
                let k = if all_tensor_fields(m.ty(*tuple)) {
                    OpPattern::Injective
                } else {
                    OpPattern::Opaque
                };
                (k, "proj".into(), false, false)
            }
            Expr::Let { .. } => (OpPattern::Opaque, "let".into(), false, false),
            Expr::If { .. } => (OpPattern::Opaque, "if".into(), false, false),
            Expr::Func(_) => (OpPattern::Opaque, "fn".into(), true, false),
        },
    }
}

fn kind_from_int(k: i64) -> OpPattern {
    match k {
        0 => OpPattern::ElemWise,
        1 => OpPattern::Broadcast,
        2 => OpPattern::Injective,
        3 => OpPattern::CommReduce,
        4 => OpPattern::OutEWiseFusable,
        7 => OpPattern::Tuple,
        _ => OpPattern::Opaque,
    }
}

/// Basic blocks: a function node is the block of its parameters and body, an `if` of its
/// branches; the condition stays in the outer block. The root function's own block is none.
fn blocks(m: &Module, g: &Graph, root: u32) -> Vec<Option<u32>> {
    let n = g.len();
    let mut block = vec![None; n];
    let mut seen = vec![false; n];
    let mut stack: Vec<(usize, Option<u32>)> = vec![(root as usize, None)];
    while let Some((i, b)) = stack.pop() {
        if i >= n || seen[i] {
            continue;
        }
        seen[i] = true;
        block[i] = b;
        let what = g.nodes[i].what;
        let idx = |e: ExprId| g.index_of(e).map(NodeIdx::index);
        match what {
            NodeRef::Func(f) => {
                let func = m.func(f);
                for p in &func.params {
                    if let Some(c) = idx(m.var(*p).expr) {
                        stack.push((c, Some(i as u32)));
                    }
                }
                if let Some(c) = idx(func.body) {
                    stack.push((c, Some(i as u32)));
                }
            }
            NodeRef::Expr(e) => match m.expr(e) {
                Expr::Func(f) => {
                    let func = m.func(*f);
                    for x in func
                        .params
                        .iter()
                        .map(|p| m.var(*p).expr)
                        .chain([func.body])
                    {
                        if let Some(c) = idx(x) {
                            stack.push((c, Some(i as u32)));
                        }
                    }
                }
                Expr::If {
                    cond,
                    then_branch,
                    else_branch,
                } => {
                    if let Some(c) = idx(*cond) {
                        stack.push((c, b));
                    }
                    for x in [*then_branch, *else_branch] {
                        if let Some(c) = idx(x) {
                            stack.push((c, Some(i as u32)));
                        }
                    }
                }
                _ => {
                    for inp in &g.nodes[i].inputs {
                        stack.push((inp.index(), b));
                    }
                    if let Expr::Let { var, .. } = m.expr(e) {
                        if let Some(c) = idx(m.var(*var).expr) {
                            stack.push((c, b));
                        }
                    }
                }
            },
            NodeRef::Op(_) => {}
        }
    }
    // Operator nodes are reached through no data edge; they belong to the root function.
    for i in 0..n {
        if !seen[i] && i as u32 != root {
            block[i] = Some(root);
        }
    }
    block
}

/// `downstream[i]`: nodes reachable from `i` by following outputs one or more steps.
fn downstream_sets(g: &Graph) -> Vec<IndexSet> {
    let n = g.len();
    let mut down: Vec<IndexSet> = (0..n).map(|_| IndexSet::new(n)).collect();
    for i in (0..n).rev() {
        let mut acc = IndexSet::new(n);
        for o in &g.nodes[i].outputs {
            let o = o.index();
            acc.insert(o);
            acc.union_with(&down[o]);
        }
        down[i] = acc;
    }
    down
}

/// Immediate post-dominators: the least common ancestor of a node's outputs in the tree built
/// from the highest index down (the external root and nodes without outputs have none).
fn post_dominators(g: &Graph, root: u32) -> Vec<Option<u32>> {
    let n = g.len();
    let mut parent: Vec<Option<u32>> = vec![None; n];
    let mut depth: Vec<u32> = vec![1; n];
    let lca = |parent: &[Option<u32>], depth: &[u32], mut a: u32, mut b: u32| -> Option<u32> {
        while a != b {
            let (da, db) = (depth[a as usize], depth[b as usize]);
            if da >= db {
                a = parent[a as usize]?;
            }
            if db >= da && a != b {
                b = parent[b as usize]?;
            }
        }
        Some(a)
    };
    for i in (0..n).rev() {
        if i as u32 == root {
            continue;
        }
        let mut outs = g.nodes[i].outputs.iter().map(|o| o.0);
        let Some(first) = outs.next() else { continue };
        let mut cur = Some(first);
        for o in outs {
            cur = cur.and_then(|c| lca(&parent, &depth, c, o));
        }
        if let Some(p) = cur {
            parent[i] = Some(p);
            depth[i] = depth[p as usize] + 1;
        }
    }
    parent
}
