//! TVM's `GraphPartitioner`: greedy fusion over the post-dominator tree
//! (docs/fuse.md, "The partitioner").
//!
//! Groups are a union–find forest with one element per graph node ([`Groups`]). Merging is
//! **directed**: the child's root goes under the target's root, never by rank or size, because
//! the root's pattern, anchor and identity are what the rules read. Path compression is used; it
//! changes nothing observable.
//!
//! [`Partitioner::run`] sweeps the nodes in post-DFS order three times (phases 0, 1, 2). For a
//! node `n` with ipdom `d` it applies, in this order: skip if `n`'s own element is Opaque; skip
//! if `n` has no ipdom; skip if the size count exceeds the limit; in phase 2 the tuple rule;
//! otherwise skip if already fused with `d` or if `d`'s own element is a Tuple, then branch on
//! `n`'s own element kind:
//!
//! | kind | phases | requirement | path condition |
//! |---|---|---|---|
//! | OutEWiseFusable | 0 | dom pattern = ElemWise | [`Cond::Out`] |
//! | ElemWise, Broadcast | 0, 1 | dom pattern ≤ Injective or = CommReduce | [`Cond::ElemWise`] |
//! | Injective, Tuple | 1 | — | [`Cond::Injective`] |
//! | CommReduce | — | — | — |
//!
//! Phase 2 fuses any node of kind ≤ Injective into its ipdom when that ipdom's own element is a
//! Tuple whose group has already joined a downstream group of kind ≤ Injective (and
//! [`Cond::Injective`] holds).
//!
//! The size limit (`max_fuse_depth`, a node count despite its name) is checked with
//! [`Partitioner::count_fused_nodes_with_new_child`], which reproduces TVM's quirks: it reads
//! each node's *own* element count (stale for absorbed nodes) and counts nodes already in the
//! ipdom's group twice. TVM's Relay argument limit (`max_function_args`) is not
//! implemented: it is disabled (0) for every target except OpenCL and Metal.
//!
//! Every graph search (path check, commit, size count) uses an explicit stack and a visited set
//! cleared in O(1) by a generation stamp.

use super::graph::ForwardGraph;
use super::postdom::PostDomTree;
use crate::ops::OpPattern;

/// TVM's default `relay.FuseOps.max_depth` (`kMaxFusedOps`).
pub const DEFAULT_MAX_DEPTH: usize = 256;

/// One union–find element (TVM's `GraphPartitioner::Group`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element {
    /// The parent element; `None` for a root.
    pub parent: Option<u32>,
    /// The group's kind (meaningful on a root).
    pub pattern: OpPattern,
    /// The group's OutEWiseFusable node, if any (meaningful on a root).
    pub anchor: Option<u32>,
    /// The node count (meaningful on a root; frozen once the element is absorbed).
    pub num_nodes: usize,
}

/// The union–find forest of groups, one element per graph node.
#[derive(Clone, Debug, Default)]
pub struct Groups {
    /// The elements, indexed like the graph's nodes; element `i` was created for node `i`.
    pub elems: Vec<Element>,
}

impl Groups {
    /// TVM's `InitGroups`: one group per node, with the node's kind, anchored on itself if it is
    /// OutEWiseFusable.
    pub fn new(g: &ForwardGraph) -> Groups {
        Groups {
            elems: g
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| Element {
                    parent: None,
                    pattern: n.pattern,
                    anchor: (n.pattern == OpPattern::OutEWiseFusable).then_some(i as u32),
                    num_nodes: 1,
                })
                .collect(),
        }
    }

    /// The root of `x`'s element, compressing the path.
    pub fn find(&mut self, x: u32) -> u32 {
        let mut root = x;
        while let Some(p) = self.elems[root as usize].parent {
            root = p;
        }
        let mut cur = x;
        while let Some(p) = self.elems[cur as usize].parent {
            if p != root {
                self.elems[cur as usize].parent = Some(root);
            }
            cur = p;
        }
        root
    }

    /// The root of `x`'s element, without modifying the forest.
    pub fn root(&self, x: u32) -> u32 {
        let mut root = x;
        while let Some(p) = self.elems[root as usize].parent {
            root = p;
        }
        root
    }

    /// TVM's `MergeFromTo`: puts `child`'s root under `parent`'s root. The counts add up; an
    /// anchor moves to the parent root, raising its kind; without an anchor the parent's kind is
    /// left unchanged, whatever the child's kind.
    pub fn merge_from_to(&mut self, child: u32, parent: u32) {
        let c = self.find(child);
        let p = self.find(parent);
        if c == p {
            return;
        }
        let (cn, canchor, cpat) = {
            let ce = &self.elems[c as usize];
            (ce.num_nodes, ce.anchor, ce.pattern)
        };
        let pe = &mut self.elems[p as usize];
        pe.num_nodes += cn;
        if let Some(a) = canchor {
            debug_assert!(pe.anchor.is_none(), "two anchors in one group");
            debug_assert!(
                cpat <= OpPattern::Broadcast || pe.pattern <= OpPattern::Broadcast,
                "cannot merge two complex groups"
            );
            pe.anchor = Some(a);
            pe.pattern = cpat.max(pe.pattern);
        }
        self.elems[c as usize].parent = Some(p);
    }
}

/// A CheckPath condition on the **group** kind of each node reached (docs/fuse.md, "The
/// partitioner").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    /// OutEWiseFusable source: every node, sink included, ≤ Broadcast.
    Out,
    /// ElemWise/Broadcast source: interior nodes ≤ Injective; the sink ≤ OutEWiseFusable.
    ElemWise,
    /// Injective/Tuple source (and phase 2): every node ≤ Injective.
    Injective,
}

impl Cond {
    /// Whether a node of group kind `k` passes.
    pub fn holds(self, k: OpPattern, is_sink: bool) -> bool {
        match self {
            Cond::Out => k <= OpPattern::Broadcast,
            Cond::ElemWise if is_sink => k <= OpPattern::OutEWiseFusable,
            Cond::ElemWise | Cond::Injective => k <= OpPattern::Injective,
        }
    }
}

/// The partitioner's state: the graph, its post-dominator tree, the groups and scratch space.
pub struct Partitioner<'g> {
    graph: &'g ForwardGraph,
    tree: &'g PostDomTree,
    /// The groups.
    pub groups: Groups,
    max_depth: usize,
    stamp: Vec<u32>,
    generation: u32,
    stack: Vec<u32>,
}

impl<'g> Partitioner<'g> {
    /// A partitioner with one group per node and the given size limit.
    pub fn new(graph: &'g ForwardGraph, tree: &'g PostDomTree, max_depth: usize) -> Self {
        Partitioner {
            graph,
            tree,
            groups: Groups::new(graph),
            max_depth,
            stamp: vec![0; graph.len()],
            generation: 0,
            stack: Vec::new(),
        }
    }

    /// Runs phases 0, 1 and 2 and returns the groups.
    pub fn run(mut self) -> Groups {
        for phase in 0..3 {
            self.run_phase(phase);
        }
        self.groups
    }

    fn clear_visited(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.stamp.iter_mut().for_each(|s| *s = 0);
            self.generation = 1;
        }
    }

    /// Marks `x` visited; false if it already was.
    fn visit(&mut self, x: u32) -> bool {
        let s = &mut self.stamp[x as usize];
        if *s == self.generation {
            false
        } else {
            *s = self.generation;
            true
        }
    }

    fn push_outputs(&mut self, x: u32) {
        let g = self.graph;
        self.stack
            .extend(g.nodes[x as usize].outputs.iter().rev().map(|e| e.node));
    }

    /// One sweep (TVM's `RunFuse`).
    pub fn run_phase(&mut self, phase: u8) {
        use OpPattern::*;
        for nid in 0..self.graph.len() {
            let n = nid as u32;
            let own = self.groups.elems[nid].pattern;
            if own == Opaque {
                continue;
            }
            let Some(d) = self.tree.parent[nid] else {
                continue;
            };
            debug_assert!(!self.graph.nodes[nid].extern_ref);
            if self.count_fused_nodes_with_new_child(n, d) > self.max_depth {
                continue;
            }
            if phase == 2 {
                if own > Injective {
                    continue;
                }
                let dom_own = self.groups.elems[d as usize].pattern;
                let dom_root = self.groups.find(d);
                let root_pattern = self.groups.elems[dom_root as usize].pattern;
                if root_pattern == Tuple {
                    continue;
                }
                if dom_own == Tuple
                    && root_pattern <= Injective
                    && self.check_path(n, d, Cond::Injective)
                {
                    self.commit_fuse(n, d);
                }
                continue;
            }
            if self.groups.find(n) == self.groups.find(d) {
                continue;
            }
            if self.groups.elems[d as usize].pattern == Tuple {
                continue;
            }
            let dom_pattern = self.tree.pattern[nid];
            match own {
                OutEWiseFusable => {
                    if phase == 0 && dom_pattern == ElemWise && self.check_path(n, d, Cond::Out) {
                        self.commit_fuse(n, d);
                    }
                }
                ElemWise | Broadcast => {
                    if (dom_pattern <= Injective || dom_pattern == CommReduce)
                        && self.check_path(n, d, Cond::ElemWise)
                    {
                        self.commit_fuse(n, d);
                    }
                }
                Injective | Tuple => {
                    if phase == 1 && self.check_path(n, d, Cond::Injective) {
                        self.commit_fuse(n, d);
                    }
                }
                CommReduce | Opaque => {}
            }
        }
    }

    /// TVM's `CheckPath`: every node reachable from `src`'s consumers without passing the sink
    /// (the sink included, `src` excluded) satisfies `cond` on its group kind.
    pub fn check_path(&mut self, src: u32, sink: u32, cond: Cond) -> bool {
        debug_assert!(src != sink);
        self.clear_visited();
        self.stack.clear();
        self.push_outputs(src);
        while let Some(m) = self.stack.pop() {
            if !self.visit(m) {
                continue;
            }
            let root = self.groups.find(m);
            if !cond.holds(self.groups.elems[root as usize].pattern, m == sink) {
                self.stack.clear();
                return false;
            }
            if m != sink {
                self.push_outputs(m);
            }
        }
        true
    }

    /// TVM's `CommitFuse`: merges `src` and every node on a path from it strictly before `sink`
    /// into the group of `sink`'s element.
    pub fn commit_fuse(&mut self, src: u32, sink: u32) {
        debug_assert!(src != sink);
        self.clear_visited();
        self.stack.clear();
        self.stack.push(src);
        while let Some(m) = self.stack.pop() {
            if m == sink || !self.visit(m) {
                continue;
            }
            self.groups.merge_from_to(m, sink);
            self.push_outputs(m);
        }
    }

    /// TVM's `CountFusedNodesWithNewChild`: the node count of `dom_parent`'s group plus the
    /// *own-element* counts of every node from `child` up to (not including) `dom_parent`.
    pub fn count_fused_nodes_with_new_child(&mut self, child: u32, dom_parent: u32) -> usize {
        debug_assert!(child != dom_parent);
        let root = self.groups.find(dom_parent);
        let mut sum = self.groups.elems[root as usize].num_nodes;
        self.clear_visited();
        self.stack.clear();
        self.stack.push(child);
        while let Some(m) = self.stack.pop() {
            if m == dom_parent || !self.visit(m) {
                continue;
            }
            sum += self.groups.elems[m as usize].num_nodes;
            self.push_outputs(m);
        }
        sum
    }
}

/// Partitions `g` with the given size limit: the final union–find forest.
pub fn partition(g: &ForwardGraph, tree: &PostDomTree, max_depth: usize) -> Groups {
    Partitioner::new(g, tree, max_depth).run()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::fuse::graph::{Edge, Node, Row};
    use crate::ir::ExprId;
    use OpPattern::*;

    fn graph(rows: &[Row<'_>]) -> ForwardGraph {
        ForwardGraph::from_rows(rows)
    }

    fn chain(kinds: &[OpPattern]) -> ForwardGraph {
        ForwardGraph::from_nodes(
            kinds
                .iter()
                .enumerate()
                .map(|(i, &k)| Node {
                    expr: ExprId(i as u32),
                    pattern: k,
                    extern_ref: i + 1 == kinds.len(),
                    outputs: if i + 1 < kinds.len() {
                        vec![Edge {
                            node: i as u32 + 1,
                            pattern: kinds[i + 1],
                        }]
                    } else {
                        Vec::new()
                    },
                })
                .collect(),
        )
    }

    #[test]
    fn merge_direction_is_fixed() {
        let g = chain(&[ElemWise; 6]);
        let mut gr = Groups::new(&g);
        // A big group {0, 1, 2} rooted at 2 merged into the singleton 3: the root is 3.
        gr.merge_from_to(0, 1);
        gr.merge_from_to(1, 2);
        assert_eq!(gr.elems[2].num_nodes, 3);
        gr.merge_from_to(0, 3);
        for i in 0..4 {
            assert_eq!(gr.find(i), 3);
        }
        assert_eq!(gr.elems[3].num_nodes, 4);
        // Stale counts: absorbed elements keep the count they had when absorbed.
        assert_eq!(gr.elems[2].num_nodes, 3);
        assert_eq!(gr.elems[1].num_nodes, 2);
        assert_eq!(gr.elems[0].num_nodes, 1);
        // Merging within one group is a no-op.
        gr.merge_from_to(2, 0);
        assert_eq!(gr.elems[3].num_nodes, 4);
        assert_eq!(gr.find(3), 3);
    }

    #[test]
    fn anchors_move_to_the_root_and_raise_its_kind() {
        let g = chain(&[OutEWiseFusable, Broadcast, Injective, ElemWise]);
        let mut gr = Groups::new(&g);
        assert_eq!(gr.elems[0].anchor, Some(0));
        assert_eq!(gr.elems[1].anchor, None);
        gr.merge_from_to(0, 1);
        assert_eq!(gr.elems[1].anchor, Some(0));
        assert_eq!(gr.elems[1].pattern, OutEWiseFusable);
        // Without an anchor the parent's kind is unchanged, even when the child's is higher.
        gr.merge_from_to(2, 3);
        assert_eq!(gr.elems[3].pattern, ElemWise);
        assert_eq!(gr.elems[3].anchor, None);
        gr.merge_from_to(1, 3);
        assert_eq!(gr.elems[3].pattern, OutEWiseFusable);
        assert_eq!(gr.elems[3].anchor, Some(0));
        assert_eq!(gr.elems[3].num_nodes, 4);
    }

    #[test]
    fn path_compression_keeps_roots() {
        let g = chain(&[ElemWise; 5]);
        let mut gr = Groups::new(&g);
        for i in 0..4 {
            gr.merge_from_to(i, i + 1);
        }
        assert_eq!(gr.root(0), 4);
        assert_eq!(gr.find(0), 4);
        assert_eq!(gr.elems[0].parent, Some(4));
        assert_eq!(gr.elems[4].num_nodes, 5);
    }

    #[test]
    fn chain_splits_at_the_size_limit() {
        // x -> exp * 20 with limit 10: groups of 10 and 10 (the first exp node is #1).
        let mut kinds = vec![Opaque];
        kinds.extend([ElemWise; 20]);
        let g = chain(&kinds);
        let t = PostDomTree::build(&g);
        let mut gr = partition(&g, &t, 10);
        let roots: Vec<u32> = (0..21).map(|i| gr.find(i)).collect();
        assert_eq!(roots[0], 0);
        assert!(roots[1..=10].iter().all(|&r| r == 10));
        assert!(roots[11..=20].iter().all(|&r| r == 20));
        assert_eq!(gr.elems[10].num_nodes, 10);
        assert_eq!(gr.elems[20].num_nodes, 10);
    }

    #[test]
    fn size_count_double_counts_members_of_the_target_group() {
        // Example B with max depth 3: relu is refused in phase 0 (4 > 3) and in phase 1
        // (3 + 3 = 6 > 3) although the real size would be 4.
        let g = graph(&[
            (Opaque, true, &[(1, ElemWise)]),
            (ElemWise, false, &[(2, ElemWise), (3, ElemWise)]),
            (ElemWise, false, &[(4, ElemWise)]),
            (ElemWise, false, &[(4, ElemWise)]),
            (Broadcast, true, &[]),
        ]);
        let t = PostDomTree::build(&g);
        let mut p = Partitioner::new(&g, &t, 3);
        assert_eq!(p.count_fused_nodes_with_new_child(1, 4), 4);
        p.run_phase(0);
        assert_eq!(p.count_fused_nodes_with_new_child(1, 4), 6);
        let mut gr = p.run();
        assert_eq!(gr.find(1), 1);
        assert_eq!(gr.find(2), 4);
        assert_eq!(gr.find(3), 4);
        assert_eq!(gr.elems[4].num_nodes, 3);
    }

    #[test]
    fn conditions_read_group_kinds() {
        assert!(Cond::Out.holds(Broadcast, true));
        assert!(!Cond::Out.holds(Injective, false));
        assert!(Cond::ElemWise.holds(Injective, false));
        assert!(!Cond::ElemWise.holds(CommReduce, false));
        assert!(Cond::ElemWise.holds(OutEWiseFusable, true));
        assert!(Cond::ElemWise.holds(CommReduce, true));
        assert!(!Cond::ElemWise.holds(Tuple, true));
        assert!(!Cond::Injective.holds(CommReduce, true));
        assert!(Cond::Injective.holds(Injective, true));
        // An elementwise node whose path passes a node already in an anchored group fails.
        let g = graph(&[
            (ElemWise, false, &[(1, ElemWise), (2, ElemWise)]),
            (ElemWise, false, &[(2, ElemWise)]),
            (Broadcast, true, &[]),
        ]);
        let t = PostDomTree::build(&g);
        let mut p = Partitioner::new(&g, &t, 256);
        p.groups.elems[1].pattern = OutEWiseFusable;
        assert!(!p.check_path(0, 2, Cond::ElemWise));
        p.groups.elems[1].pattern = Injective;
        assert!(p.check_path(0, 2, Cond::ElemWise));
        assert!(!p.check_path(0, 2, Cond::Out));
    }

    #[test]
    fn every_node_has_exactly_one_root_and_counts_add_up() {
        let g = graph(&[
            (Opaque, true, &[(1, OutEWiseFusable)]),
            (OutEWiseFusable, false, &[(2, ElemWise), (3, ElemWise)]),
            (ElemWise, false, &[(4, ElemWise)]),
            (ElemWise, false, &[(4, ElemWise)]),
            (Broadcast, false, &[(5, Injective)]),
            (Injective, true, &[]),
        ]);
        let t = PostDomTree::build(&g);
        let mut gr = partition(&g, &t, 256);
        let mut count = vec![0usize; g.len()];
        for i in 0..g.len() as u32 {
            count[gr.find(i) as usize] += 1;
        }
        for (i, e) in gr.elems.iter().enumerate() {
            if e.parent.is_none() {
                assert_eq!(e.num_nodes, count[i], "root {i}");
            }
        }
        // conv -> (relu, exp) -> add -> reshape: conv, relu, exp and add form one group rooted
        // at the add and anchored on the conv. The add's element is then OutEWiseFusable with
        // dom pattern Injective, so the reshape stays alone.
        assert_eq!(gr.find(1), 4);
        assert_eq!(gr.find(3), 4);
        assert_eq!(gr.elems[4].anchor, Some(1));
        assert_eq!(gr.elems[4].pattern, OutEWiseFusable);
        assert_eq!(gr.find(5), 5);
    }
}
