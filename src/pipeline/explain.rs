//! `--explain`: which candidates covered a node, and for the cheapest alternatives to the one
//! chosen, the best total cost of a cover forced to use each.

use crate::analysis::dataflow::NodeIdx;
use crate::ir::Module;
use crate::planning::enumerate::DataflowGraph;
use crate::planning::partition::{self, Plan};

/// How many alternatives `--explain` prices with a forced search.
pub const ALTERNATIVES: usize = 12;

/// Why one node is placed as it is.
pub struct Explanation {
    /// The node's binding, with its `%`.
    pub binding: String,
    /// The node.
    pub node: usize,
    /// The candidates covering it, cheapest first.
    pub covering: Vec<Covering>,
}

/// A candidate covering the explained node.
pub struct Covering {
    /// The candidate (an index into the plan's candidates).
    pub candidate: usize,
    /// Whether the plan chose it.
    pub chosen: bool,
    /// Whether it is among the [`ALTERNATIVES`] cheapest, which are priced with a forced search.
    pub priced: bool,
    /// The best total cost of a cover with it (the plan's total for the chosen one; `None`:
    /// no cover contains it, or it was not priced).
    pub best: Option<f64>,
}

/// Explains the node bound to `binding` (with or without its `%`); `None` when no node is.
pub fn explain(
    m: &Module,
    g: &DataflowGraph<'_>,
    plan: &Plan,
    opts: &partition::Options,
    binding: &str,
) -> Option<Explanation> {
    let want = if binding.starts_with('%') {
        binding.to_string()
    } else {
        format!("%{binding}")
    };
    // An imported ONNX model's nodes are bound to their outputs' identifiers, so an ONNX
    // value name works too.
    let onnx = format!("%{}", crate::frontend::onnx::names::to_ident(binding));
    let node = (0..g.len())
        .find(|&i| g.graph.binding(m, NodeIdx(i as u32)).as_deref() == Some(&want))
        .or_else(|| {
            (0..g.len()).find(|&i| g.graph.binding(m, NodeIdx(i as u32)).as_deref() == Some(&onnx))
        })?;
    let chosen = plan
        .chosen
        .iter()
        .copied()
        .find(|&k| plan.candidates[k].sub_graph.inside.contains(node));
    let mut covering: Vec<usize> = (0..plan.candidates.len())
        .filter(|&k| plan.candidates[k].sub_graph.inside.contains(node))
        .collect();
    covering.sort_by(|&a, &b| plan.cost_of(a).total_cmp(&plan.cost_of(b)).then(a.cmp(&b)));
    let alternatives: Vec<usize> = covering
        .iter()
        .take(ALTERNATIVES)
        .copied()
        .filter(|&k| Some(k) != chosen)
        .collect();
    let best_alternative = partition::best_with(g, plan, &alternatives, opts);
    let covering = covering
        .iter()
        .enumerate()
        .map(|(n, &k)| {
            let is_chosen = Some(k) == chosen;
            let best = if is_chosen {
                Some(plan.total)
            } else if n < ALTERNATIVES {
                alternatives
                    .iter()
                    .position(|&a| a == k)
                    .and_then(|p| best_alternative[p])
            } else {
                None
            };
            Covering {
                candidate: k,
                chosen: is_chosen,
                priced: n < ALTERNATIVES,
                best,
            }
        })
        .collect();
    Some(Explanation {
        binding: want,
        node,
        covering,
    })
}
