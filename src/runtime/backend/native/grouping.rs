//! How `collage run` groups the inline operator calls of `@main` for native code: TVM's FuseOps
//! ([`crate::analysis::fuse`]), as TVM's build does after its inference simplifications.
//!
//! TVM's `relay.build` runs `SimplifyInference` before `FuseOps`: `nn.batch_norm` becomes a
//! per-channel multiply and add, and its `.0` projection disappears, so a convolution, its batch
//! norm and the ReLU after it fuse into one kernel. [`FuseGrouping`] with `simplify_inference`
//! reproduces that grouping without rewriting the program: in the FuseOps graph, an
//! `nn.batch_norm` call is a broadcast operator and the projection of its first result is
//! elementwise. Without it, the groups are exactly `collage fuse`'s.

use crate::analysis::fuse::graph::ForwardGraph;
use crate::ir::{Expr, ExprId, FuncId, Module};
use crate::ops::{Op, OpPattern};
use crate::runtime::exec::executor::Grouping;

/// FuseOps groups as kernels.
#[derive(Clone, Copy, Debug)]
pub struct FuseGrouping {
    /// FuseOps' size limit (`collage fuse --max-depth`).
    pub max_depth: usize,
    /// Group `nn.batch_norm` as TVM's build does after `SimplifyInference`.
    pub simplify_inference: bool,
}

impl Default for FuseGrouping {
    fn default() -> FuseGrouping {
        FuseGrouping {
            max_depth: crate::analysis::fuse::DEFAULT_MAX_DEPTH,
            simplify_inference: true,
        }
    }
}

impl FuseGrouping {
    /// The forward graph FuseOps partitions.
    fn graph(&self, m: &Module, func: FuncId) -> ForwardGraph {
        let mut g = ForwardGraph::build(m, func);
        if !self.simplify_inference {
            return g;
        }
        let is_bn = |e: ExprId| m.called_op(e) == Op::BatchNorm.id();
        let n = g.nodes.len();
        for i in 0..n {
            let e = g.nodes[i].expr;
            let proj_of_bn = matches!(m.expr(e), Expr::Proj { tuple, index: 0 } if is_bn(*tuple));
            if is_bn(e) {
                g.nodes[i].pattern = OpPattern::Broadcast;
                for o in &mut g.nodes[i].outputs {
                    o.pattern = OpPattern::Broadcast;
                }
            } else if proj_of_bn {
                g.nodes[i].pattern = OpPattern::ElemWise;
            }
        }
        // Edges into a batch norm take its new kind (elementwise for its same-shaped data).
        for i in 0..n {
            let outs = g.nodes[i].outputs.clone();
            for (k, o) in outs.iter().enumerate() {
                let c = g.nodes[o.node as usize].expr;
                if is_bn(c) {
                    let same = m.ty(g.nodes[i].expr)
                        == m.ty(c).and_then(|t| match t {
                            crate::ir::Type::Tuple(fs) => fs.first(),
                            _ => None,
                        });
                    g.nodes[i].outputs[k].pattern = if same {
                        OpPattern::ElemWise
                    } else {
                        OpPattern::Broadcast
                    };
                }
                let proj0 = matches!(m.expr(c), Expr::Proj { tuple, index: 0 } if is_bn(*tuple));
                if proj0 {
                    g.nodes[i].outputs[k].pattern = OpPattern::ElemWise;
                }
            }
        }
        g
    }
}

impl Grouping for FuseGrouping {
    fn groups(&self, m: &Module, func: FuncId) -> Vec<Vec<ExprId>> {
        let g = self.graph(m, func);
        let r = crate::analysis::fuse::fuse_graph(&g, self.max_depth);
        r.groups
            .into_iter()
            .map(|grp| {
                grp.nodes
                    .into_iter()
                    .filter(|&e| {
                        m.is_op_call(e) || matches!(m.expr(e), Expr::Tuple(_) | Expr::Proj { .. })
                    })
                    .collect::<Vec<_>>()
            })
            .filter(|members| members.iter().any(|&e| m.is_op_call(e)))
            .collect()
    }
}
