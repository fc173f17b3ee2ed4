//! The analytic (roofline) estimator, driven by each target's `cost { ... }` parameters.
//!
//! A candidate runs as one kernel, or, when it has nested `Composite` functions, as one kernel
//! per composite (plus one for any operator calls outside every composite). A kernel costs
//!
//! ```text
//! launch + max( Σ_op flops(op) / (peak × efficiency(op)),  bytes / bandwidth )
//! ```
//!
//! where `flops` comes from [`crate::analysis::work::call_flops`] and `bytes` counts each tensor that
//! enters the kernel (activations, weights) once and each tensor that leaves it once.
//! Intermediate tensors inside a kernel never touch memory. A kernel without operator calls
//! (tuples and projections only) is free. A target without `peak` or `bandwidth` gets
//! `UNKNOWN`, so the next estimator in the chain decides.

use super::{Cost, Estimate, Estimator, Request};
use crate::analysis::dataflow::IndexSet;
use crate::ir::Expr;
use crate::planning::enumerate::{DataflowGraph, SubGraph};
use crate::rules::ruletree::CostParams;

/// The analytic estimator.
pub struct Analytic;

impl Estimator for Analytic {
    fn name(&self) -> String {
        "analytic".into()
    }

    fn estimate(&self, req: &Request<'_, '_>) -> Estimate {
        let p = &req.target().cost;
        let (Some(peak), Some(bandwidth)) = (p.peak_flops, p.bandwidth) else {
            return Estimate::because(
                Cost::UNKNOWN,
                format!(
                    "target `{}` has no `cost {{ peak = ...; bandwidth = ...; }}` block",
                    req.target().name
                ),
            );
        };
        if peak <= 0.0 || bandwidth <= 0.0 {
            return Estimate::because(
                Cost::UNKNOWN,
                format!(
                    "target `{}` has a zero peak or bandwidth",
                    req.target().name
                ),
            );
        }
        let g = req.graph;
        let sg = &req.candidate.sub_graph;
        let mut total = 0.0;
        for kernel in kernels(g, sg) {
            total += kernel_seconds(g, &kernel, p, peak, bandwidth);
        }
        Cost::value(total).into()
    }
}

/// The kernels of a candidate: its composites, and the rest.
pub fn kernels(g: &DataflowGraph<'_>, sg: &SubGraph) -> Vec<IndexSet> {
    let mut composites: Vec<IndexSet> = sg
        .composites()
        .into_iter()
        .map(|(_, sub)| sub.inside.clone())
        .collect();
    if composites.is_empty() {
        return vec![sg.inside.clone()];
    }
    let mut rest = sg.inside.clone();
    for c in &composites {
        rest = rest.difference(c);
    }
    if rest.iter().any(|i| g.is_op_call(i)) {
        composites.push(rest);
    }
    composites
}

/// Bytes of a node's value.
pub fn node_bytes(g: &DataflowGraph<'_>, i: usize) -> f64 {
    g.expr(i)
        .and_then(|e| g.module.ty(e))
        .map_or(0.0, crate::analysis::work::tensor_bytes)
}

/// Bytes read and written by the nodes `inside`: every outside value feeding them once, and
/// every inside value used outside (or the function result) once.
pub fn boundary_bytes(g: &DataflowGraph<'_>, inside: &IndexSet) -> (f64, f64) {
    let mut inputs = IndexSet::new(g.len());
    let mut bytes_in = 0.0;
    let mut bytes_out = 0.0;
    for i in inside.iter() {
        for inp in g.inputs(i) {
            let j = inp.index();
            if !inside.contains(j) && !inputs.contains(j) && !is_glue(g, j) {
                inputs.insert(j);
                bytes_in += node_bytes(g, j);
            }
        }
        if !is_glue(g, i) && g.outputs(i).iter().any(|o| !inside.contains(o.index())) {
            bytes_out += node_bytes(g, i);
        }
    }
    (bytes_in, bytes_out)
}

/// Nodes that hold no tensor of their own: operators, function literals, the function node.
fn is_glue(g: &DataflowGraph<'_>, i: usize) -> bool {
    match g.expr(i) {
        None => true,
        Some(e) => matches!(g.module.expr(e), Expr::Op(_) | Expr::Func(_)),
    }
}

fn kernel_seconds(
    g: &DataflowGraph<'_>,
    kernel: &IndexSet,
    p: &CostParams,
    peak: f64,
    bandwidth: f64,
) -> f64 {
    let mut compute = 0.0;
    let mut calls = 0;
    for i in kernel.iter() {
        let (Some(e), Some(op)) = (g.expr(i), g.called_op(i)) else {
            continue;
        };
        calls += 1;
        let eff = p
            .efficiency
            .iter()
            .find(|(o, _)| *o == op)
            .map(|&(_, x)| x)
            .or(p.default_efficiency)
            .unwrap_or(1.0)
            .max(1e-6);
        compute += crate::analysis::work::call_flops(g.module, e) / (peak * eff);
    }
    if calls == 0 {
        return 0.0;
    }
    let (bytes_in, bytes_out) = boundary_bytes(g, kernel);
    let memory = (bytes_in + bytes_out) / bandwidth;
    p.launch.unwrap_or(0.0) + compute.max(memory)
}
