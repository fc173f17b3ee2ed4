//! The post-dominator tree of a [`ForwardGraph`] (docs/fuse.md).
//!
//! One tree node per graph node. A node's parent is its immediate post-dominator (ipdom), the
//! nearest node every forward path from it passes through; its `pattern` (the *dom pattern*) is
//! the largest edge kind on any path from the node to that ipdom, edges into the ipdom included.
//! There is no virtual exit: extern nodes, nodes without outputs and nodes whose paths end at
//! different roots have no parent.
//!
//! The tree is built in one pass over the nodes in reverse post-DFS order, so every consumer's
//! entry exists before its producers are processed. The parent of a node is the least common
//! ancestor (LCA) of its consumers; while climbing towards it, the summary patterns of every
//! tree node passed are folded in with a plain maximum (TVM's dominator-tree `CombinePattern`,
//! which never fails). Climbing is a loop, so deep chains cost no stack.

use super::graph::ForwardGraph;
use crate::ops::OpPattern;

/// The post-dominator tree: per node (indexed like the graph), its parent, depth and pattern.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostDomTree {
    /// The immediate post-dominator's index, or `None` for a root.
    pub parent: Vec<Option<u32>>,
    /// Roots have depth 1; every other node its parent's depth + 1.
    pub depth: Vec<u32>,
    /// The dom pattern: the largest edge kind on the paths to the parent (Opaque for an extern
    /// node, ElemWise for a node without outputs).
    pub pattern: Vec<OpPattern>,
}

impl PostDomTree {
    /// Builds the tree of `g`.
    pub fn build(g: &ForwardGraph) -> PostDomTree {
        let n = g.len();
        let mut t = PostDomTree {
            parent: vec![None; n],
            depth: vec![1; n],
            pattern: vec![OpPattern::ElemWise; n],
        };
        for i in (0..n).rev() {
            let node = &g.nodes[i];
            if node.extern_ref {
                t.parent[i] = None;
                t.depth[i] = 1;
                t.pattern[i] = OpPattern::Opaque;
                continue;
            }
            let mut acc = OpPattern::ElemWise;
            let mut parent = None;
            if let Some((first, rest)) = node.outputs.split_first() {
                parent = Some(first.node);
                acc = acc.max(first.pattern);
                for e in rest {
                    parent = t.lca(parent, Some(e.node), &mut acc);
                    acc = acc.max(e.pattern);
                }
            }
            t.parent[i] = parent;
            t.depth[i] = parent.map_or(1, |p| t.depth[p as usize] + 1);
            t.pattern[i] = acc;
        }
        t
    }

    /// Number of tree nodes.
    pub fn len(&self) -> usize {
        self.parent.len()
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    /// The least common ancestor of two tree nodes, folding the summary pattern of every node
    /// climbed past into `acc`. `None` as soon as either side runs off a root.
    pub fn lca(&self, a: Option<u32>, b: Option<u32>, acc: &mut OpPattern) -> Option<u32> {
        let (mut a, mut b) = (a, b);
        while a != b {
            let (x, y) = match (a, b) {
                (Some(x), Some(y)) => (x as usize, y as usize),
                _ => return None,
            };
            if self.depth[x] < self.depth[y] {
                *acc = (*acc).max(self.pattern[y]);
                b = self.parent[y];
            } else if self.depth[y] < self.depth[x] {
                *acc = (*acc).max(self.pattern[x]);
                a = self.parent[x];
            } else {
                *acc = (*acc).max(self.pattern[x]).max(self.pattern[y]);
                a = self.parent[x];
                b = self.parent[y];
            }
        }
        a
    }
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

    #[test]
    fn diamond_meets_at_the_join() {
        // Example B: x -> relu -> (exp, sqrt) -> add.
        let g = graph(&[
            (Opaque, true, &[(1, ElemWise)]),
            (ElemWise, false, &[(2, ElemWise), (3, ElemWise)]),
            (ElemWise, false, &[(4, ElemWise)]),
            (ElemWise, false, &[(4, ElemWise)]),
            (Broadcast, true, &[]),
        ]);
        let t = PostDomTree::build(&g);
        assert_eq!(t.parent, vec![None, Some(4), Some(4), Some(4), None]);
        assert_eq!(t.depth, vec![1, 2, 2, 2, 1]);
        assert_eq!(
            t.pattern,
            vec![Opaque, ElemWise, ElemWise, ElemWise, Opaque]
        );
    }

    #[test]
    fn lca_folds_the_patterns_climbed_past() {
        // 0 feeds 1 (EW) and 3 (EW); 1 -> 2 (INJ) -> 3 (OEF edge); 3 is the sink.
        // Climbing from 1 passes 1 (pattern INJ) and 2 (pattern OEF).
        let g = graph(&[
            (ElemWise, false, &[(1, ElemWise), (3, ElemWise)]),
            (ElemWise, false, &[(2, Injective)]),
            (Injective, false, &[(3, OutEWiseFusable)]),
            (OutEWiseFusable, true, &[]),
        ]);
        let t = PostDomTree::build(&g);
        assert_eq!(t.parent[0], Some(3));
        assert_eq!(t.pattern[0], OutEWiseFusable);
        assert_eq!(t.depth[0], 2);
        assert_eq!(t.parent[1], Some(2));
        assert_eq!(t.pattern[1], Injective);
        assert_eq!(t.depth[1], 3);
        // The ipdom's own summary (paths beyond it) is not included.
        let mut acc = ElemWise;
        assert_eq!(t.lca(Some(1), Some(3), &mut acc), Some(3));
        assert_eq!(acc, OutEWiseFusable);
        let mut acc = ElemWise;
        assert_eq!(t.lca(Some(2), Some(2), &mut acc), Some(2));
        assert_eq!(acc, ElemWise);
    }

    #[test]
    fn equal_depths_fold_both_sides() {
        // 0 -> 1 (BC), 0 -> 2 (EW); 1 -> 3 (INJ), 2 -> 3 (EW). Both branches at depth 2.
        let g = graph(&[
            (ElemWise, false, &[(1, Broadcast), (2, ElemWise)]),
            (Broadcast, false, &[(3, Injective)]),
            (ElemWise, false, &[(3, ElemWise)]),
            (Injective, true, &[]),
        ]);
        let t = PostDomTree::build(&g);
        assert_eq!(t.parent[0], Some(3));
        assert_eq!(t.pattern[0], Injective);
        // The edge order does not change parent or pattern.
        let g2 = graph(&[
            (ElemWise, false, &[(2, ElemWise), (1, Broadcast)]),
            (Broadcast, false, &[(3, Injective)]),
            (ElemWise, false, &[(3, ElemWise)]),
            (Injective, true, &[]),
        ]);
        let t2 = PostDomTree::build(&g2);
        assert_eq!((t2.parent[0], t2.pattern[0]), (Some(3), Injective));
    }

    #[test]
    fn paths_to_different_roots_have_no_ipdom() {
        // 1 feeds the extern 2 and the extern 3: two roots, no common ancestor.
        let g = graph(&[
            (Opaque, true, &[(1, ElemWise)]),
            (ElemWise, false, &[(2, ElemWise), (3, ElemWise)]),
            (ElemWise, true, &[]),
            (ElemWise, true, &[]),
        ]);
        let t = PostDomTree::build(&g);
        assert_eq!(t.parent[1], None);
        assert_eq!(t.depth[1], 1);
        // A node without outputs: no parent, pattern ElemWise.
        let g = graph(&[(ElemWise, false, &[])]);
        let t = PostDomTree::build(&g);
        assert_eq!((t.parent[0], t.depth[0], t.pattern[0]), (None, 1, ElemWise));
    }

    #[test]
    fn an_extern_node_is_a_root_but_can_be_an_ipdom() {
        let g = graph(&[
            (ElemWise, false, &[(1, ElemWise)]),
            (ElemWise, true, &[(2, ElemWise)]),
            (ElemWise, true, &[]),
        ]);
        let t = PostDomTree::build(&g);
        assert_eq!(t.parent, vec![Some(1), None, None]);
        assert_eq!(t.pattern[1], Opaque);
        // Climbing through an extern node runs off its root.
        let g = graph(&[
            (ElemWise, false, &[(1, ElemWise), (2, ElemWise)]),
            (ElemWise, true, &[(2, ElemWise)]),
            (ElemWise, true, &[]),
        ]);
        let t = PostDomTree::build(&g);
        assert_eq!(t.parent[0], None);
    }

    #[test]
    fn long_chains_do_not_recurse() {
        let n = 200_000u32;
        let rows: Vec<Node> = (0..n)
            .map(|i| Node {
                expr: ExprId(i),
                pattern: ElemWise,
                extern_ref: i + 1 == n,
                outputs: if i + 1 < n {
                    vec![Edge {
                        node: i + 1,
                        pattern: ElemWise,
                    }]
                } else {
                    Vec::new()
                },
            })
            .collect();
        let t = PostDomTree::build(&ForwardGraph::from_nodes(rows));
        assert_eq!(t.depth[0], n);
    }
}
