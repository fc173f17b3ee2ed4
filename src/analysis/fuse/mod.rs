//! TVM's greedy operator fusion ("FuseOps") for Relay, reproduced faithfully: the baseline
//! `collage fuse` prints and the partitioner compares against (docs/fuse.md).
//!
//! Three stages, one submodule each:
//!
//! 1. [`graph`]: the Relay forward-graph builder. Nodes in TVM's post-DFS order, pattern
//!    kinds on nodes and edges, `extern_ref` flags. It is *not* [`crate::analysis::dataflow::Graph`].
//! 2. [`postdom`]: the post-dominator tree with its folded dom patterns.
//! 3. [`partition`]: the `GraphPartitioner` union–find with phases 0, 1 and 2, the path
//!    conditions, `CommitFuse`/`MergeFromTo` and the size limit with its quirks.
//!
//! Scope and choices:
//!
//! * The fusion level is TVM's default (`opt_level` ≥ 1); level 0 (no fusion) is not offered.
//! * The function-argument limit is not implemented: it only applies to targets that
//!   declare `max_function_args` > 0 (OpenCL, Metal), and the targets of interest declare 0.
//! * The result depends only on the post-DFS order, node and edge kinds and extern flags, all of
//!   which come from vectors; no hash map is iterated, so output is deterministic.
//! * All traversals use explicit stacks: a 96-layer GPT-2 has chains thousands of nodes deep.

pub mod graph;
pub mod partition;
pub mod postdom;

pub use partition::DEFAULT_MAX_DEPTH;

use crate::ir::{ExprId, FuncId, Module};
use crate::ops::OpPattern;
use graph::ForwardGraph;
use postdom::PostDomTree;

/// One fused group: the nodes that become one primitive function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuseGroup {
    /// Member expressions in post-DFS order of the FuseOps graph. The root is the last one.
    pub nodes: Vec<ExprId>,
    /// The group's output node (the root of its union–find tree); it post-dominates every member.
    pub root: ExprId,
    /// The group's kind: the kind of its root node, raised to OutEWiseFusable when an anchor was
    /// absorbed (TVM never raises it otherwise, e.g. for an injective member of an elementwise
    /// group).
    pub pattern: OpPattern,
    /// The group's OutEWiseFusable node, if any.
    pub anchor: Option<ExprId>,
}

/// The partition of one function.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FuseResult {
    /// Every node of the FuseOps graph is in exactly one group (singletons included). Groups are
    /// in order of their root's post-DFS index.
    pub groups: Vec<FuseGroup>,
    /// The FuseOps post-DFS order: the expression of each graph node.
    pub order: Vec<ExprId>,
}

impl FuseResult {
    /// The post-DFS index of each member expression, for looking nodes up by expression.
    pub fn index_of(&self) -> std::collections::BTreeMap<ExprId, usize> {
        self.order
            .iter()
            .enumerate()
            .map(|(i, &e)| (e, i))
            .collect()
    }
}

/// Runs FuseOps on function `func` of the type-checked module `m` with size limit `max_depth`
/// (TVM's `relay.FuseOps.max_depth`, default [`DEFAULT_MAX_DEPTH`]).
pub fn fuse(m: &Module, func: FuncId, max_depth: usize) -> FuseResult {
    let g = ForwardGraph::build(m, func);
    fuse_graph(&g, max_depth)
}

/// Runs the post-dominator tree and the partitioner on an already built graph.
pub fn fuse_graph(g: &ForwardGraph, max_depth: usize) -> FuseResult {
    let tree = PostDomTree::build(g);
    let mut groups = partition::partition(g, &tree, max_depth);
    let n = g.len();
    let mut members: Vec<Vec<ExprId>> = vec![Vec::new(); n];
    for i in 0..n {
        let r = groups.find(i as u32) as usize;
        members[r].push(g.nodes[i].expr);
    }
    let groups = members
        .into_iter()
        .enumerate()
        .filter(|(_, nodes)| !nodes.is_empty())
        .map(|(r, nodes)| {
            let e = &groups.elems[r];
            FuseGroup {
                nodes,
                root: g.nodes[r].expr,
                pattern: e.pattern,
                anchor: e.anchor.map(|a| g.nodes[a as usize].expr),
            }
        })
        .collect();
    FuseResult {
        groups,
        order: g.nodes.iter().map(|n| n.expr).collect(),
    }
}
