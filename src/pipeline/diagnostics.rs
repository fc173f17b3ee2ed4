//! The diagnostics of the pipeline's failures: enumeration limits and partitioning errors.

use crate::analysis::dataflow::NodeIdx;
use crate::diag::{self, Diagnostic};
use crate::ir::{Module, VirtualDevice};
use crate::planning::cost::Cost;
use crate::planning::enumerate::{Bound, DataflowGraph, Grower, LimitError, Limits};
use crate::planning::partition::PartitionError;
use crate::rules::ruletree::Program;

/// [`partition_error`], with the planned device of an uncovered node when it constrains which
/// targets may run it.
pub fn partition_error_on_devices(
    m: &Module,
    g: &DataflowGraph<'_>,
    program: &Program,
    e: &PartitionError,
    devices: Option<&[VirtualDevice]>,
) -> Diagnostic {
    let mut d = partition_error(m, g, program, e);
    if let (Some(devices), PartitionError::Uncovered { node, .. }) = (devices, e) {
        if let Some(dev) = g.expr(*node).and_then(|x| devices.get(x.index())) {
            if !dev.is_unconstrained() {
                d = d.with_note(format!(
                    "its planned device is {dev}; only targets whose device refines it may run it"
                ));
            }
        }
    }
    d
}

/// The diagnostic of a partitioning failure.
pub fn partition_error(
    m: &Module,
    g: &DataflowGraph<'_>,
    program: &Program,
    e: &PartitionError,
) -> Diagnostic {
    let span_of = |node: usize| {
        g.graph
            .span(m, NodeIdx(node as u32))
            .unwrap_or_else(|| m.func(g.graph.func).span)
    };
    let what = |node: usize| {
        let op = g.graph.op_name(m, NodeIdx(node as u32));
        let b = g.graph.binding(m, NodeIdx(node as u32));
        match (op, b) {
            (Some(op), Some(b)) => format!("`{op}` ({b})"),
            (Some(op), None) => format!("`{op}`"),
            (None, Some(b)) => format!("{b} ({})", g.label[node]),
            (None, None) => format!("`{}`", g.label[node]),
        }
    };
    let tried: Vec<&str> = program.targets.iter().map(|t| t.name.as_str()).collect();
    match e {
        PartitionError::Uncovered { node, unusable } => {
            let mut d =
                Diagnostic::error(diag::E2101, format!("no target can run {}", what(*node)))
                    .with_primary(span_of(*node), "no candidate partition covers this")
                    .with_note(format!("targets tried: {}", tried.join(", ")));
            if !unusable.is_empty() {
                let list: Vec<String> = unusable
                    .iter()
                    .map(|(t, c, _)| format!("{} ({c})", program.targets[*t].name))
                    .collect();
                d = d.with_note(format!(
                    "candidates covering it have unusable costs: {}",
                    list.join(", ")
                ));
            }
            // Why, as the estimators said, for the first few.
            const SHOWN: usize = 3;
            let reasons: Vec<(&usize, &Cost, &String)> = unusable
                .iter()
                .filter_map(|(t, c, why)| why.as_ref().map(|w| (t, c, w)))
                .collect();
            for (t, c, why) in reasons.iter().take(SHOWN) {
                d = d.with_note(format!("{} is {c}: {why}", program.targets[**t].name));
            }
            if reasons.len() > SHOWN {
                d = d.with_note(format!(
                    "... and {} more with reasons",
                    reasons.len() - SHOWN
                ));
            }
            d
        }
        PartitionError::NoCover { node, pruned } => {
            let d = Diagnostic::error(
                diag::E2102,
                format!(
                    "the candidates cannot cover the function without overlapping; none fits at {}",
                    what(*node)
                ),
            )
            .with_primary(span_of(*node), "every candidate here overlaps a chosen one")
            .with_note(format!("targets tried: {}", tried.join(", ")));
            if *pruned {
                d.with_note("`--prune` removed candidates; without it the search is exact")
            } else {
                d
            }
        }
        PartitionError::Limit(e) => limit_diagnostic(program, e),
        PartitionError::Rewrite(msg) => Diagnostic::error(
            diag::E2103,
            format!("internal error: rewriting failed: {msg}"),
        )
        .with_primary(
            m.func(g.graph.func).span,
            "while partitioning this function",
        ),
    }
}

/// The diagnostic of an enumeration limit (E2201, E2202, E2203): what grew, where it is declared,
/// the limit, and the flag that raises it.
pub fn limit_diagnostic(program: &Program, e: &LimitError) -> Diagnostic {
    let defaults = Limits::default();
    match e {
        LimitError::EGraph {
            bound,
            grower,
            limit,
        } => {
            let (what, span) = match *grower {
                Grower::Commutativity => (
                    "the built-in commutativity of `add` and `multiply`".to_string(),
                    None,
                ),
                Grower::Equivalence(i) => (
                    "this equivalence".to_string(),
                    program.equivalence_spans.get(i).copied(),
                ),
                Grower::Rewrite(i) => (
                    "this rewrite".to_string(),
                    program.rewrite_spans.get(i).copied(),
                ),
            };
            let (code, message, label, default) = match bound {
                Bound::EGraphIters => (
                    diag::E2202,
                    format!(
                        "the equivalences still change the e-graph after {limit} round{} \
                         (`--max-egraph-iters`)",
                        if *limit == 1 { "" } else { "s" }
                    ),
                    format!("{what} still grew the e-graph in the last round"),
                    defaults.max_egraph_iters,
                ),
                Bound::ENodeWork { steps } => (
                    diag::E2201,
                    format!(
                        "matching the equivalences of the rules built more than {steps} partial \
                         matches in one round ({} per e-node and per unit of `--max-enodes` \
                         {limit})",
                        crate::planning::enumerate::MATCH_WORK
                    ),
                    format!("{what} has too many matches"),
                    defaults.max_enodes,
                ),
                _ => (
                    diag::E2201,
                    format!(
                        "applying the equivalences of the rules added more than {limit} e-nodes \
                         to the e-graph (`--max-enodes`)"
                    ),
                    format!("{what} keeps adding e-nodes"),
                    defaults.max_enodes,
                ),
            };
            let mut d = Diagnostic::error(code, message);
            match span {
                Some(s) => d = d.with_primary(s, label),
                None => d = d.with_note(format!("what grew: {what}")),
            }
            d.with_note(format!(
                "raise the limit with `{} N` (default {default}), or remove the equivalence \
                 that grows without end (associativity, a rewrite whose right side matches \
                 its left side again)",
                e.flag()
            ))
        }
        LimitError::Target {
            bound,
            target,
            rule,
            limit,
        } => {
            let t = &program.targets[*target];
            let message = match bound {
                Bound::PairWork { steps } => format!(
                    "combining the candidates of target `{}` visited more than {steps} pairs \
                     ({} × `--max-candidates` {limit})",
                    t.name,
                    crate::planning::enumerate::PAIR_WORK
                ),
                Bound::MatchWork { steps } => format!(
                    "matching a pattern of target `{}` built more than {steps} partial matches \
                     ({} per e-node and per unit of `--max-candidates` {limit})",
                    t.name,
                    crate::planning::enumerate::MATCH_WORK
                ),
                _ => format!(
                    "target `{}` has more than {limit} candidates (`--max-candidates`)",
                    t.name
                ),
            };
            let mut d = Diagnostic::error(diag::E2203, message);
            let label = "its rules grow past the candidate limit";
            d = d.with_primary(t.span, label);
            let depth = match (t.max_depth, &t.compiler) {
                (Some(_), _) => "the target's `max_depth`",
                (None, Some(_)) => "`--byoc-max-depth`",
                (None, None) => "`--tvm-max-depth`",
            };
            let remedy = match bound {
                Bound::MatchWork { .. } => {
                    "simplify the pattern (fewer alternatives and optional parts)".to_string()
                }
                _ => format!(
                    "make the rule produce fewer candidates (a lower depth limit: {depth}; \
                     fewer combiners)"
                ),
            };
            d.with_note(format!("the rule that grew: `{rule}`"))
                .with_note(format!(
                    "raise the limit with `--max-candidates N` (default {}), or {remedy}",
                    defaults.max_candidates
                ))
        }
    }
}

/// Prints a W2205 warning for every default depth limit enumeration lowered.
pub fn report_lowered(lowered: &[crate::planning::enumerate::Lowered]) {
    for l in lowered {
        let what = match l.bound {
            Bound::PairWork { steps } => format!("combining them visited more than {steps} pairs"),
            _ => "they outgrew `--max-candidates`".to_string(),
        };
        let flag = if l.byoc {
            "--byoc-max-depth"
        } else {
            "--tvm-max-depth"
        };
        let mut d = Diagnostic::warning(
            diag::W2205,
            format!(
                "the candidates of target `{}` were enumerated again at depth {} instead of {}: \
                 at depth {} {what}",
                l.target, l.to, l.from, l.from
            ),
        );
        d.notes.push(format!(
            "every {} target's candidates are limited to depth {}; give `{flag} N` to choose \
             the depth (reaching the limit is then an error), or raise `--max-candidates`",
            if l.byoc { "BYOC" } else { "native" },
            l.to
        ));
        diag::emit_alone(d);
    }
}
