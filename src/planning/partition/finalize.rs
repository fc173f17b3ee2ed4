//! Finalize (docs/partition.md, "Finalize"): coalesce the chosen
//! partitions, name them, and rewrite the function in TVM's encoding.
//!
//! * Touching partitions of the same BYOC target are coalesced while their union stays within
//!   the target's limits (convex, in one basic block, within its depth limit, or its
//!   `region_depth` when it sets one, and the exits and taps of its `only_valid`:
//!   [`crate::planning::enumerate::region_limits`]), so no partition is one its target's rules
//!   could not produce, and the partitions can still run one after the other (a
//!   union with several exits could otherwise both feed and need another partition with
//!   several exits). TVM's prototype coalesced without checking validity and could produce
//!   overlapping partitions.
//!   Native partitions stay separate: each is one fused kernel. Host nodes form one report
//!   partition named `host`.
//! * A BYOC partition becomes a global function with `Primitive=1`, `Compiler="<compiler>"`
//!   and `global_symbol="<name>"`, containing its `Composite` functions, called from `@main`.
//!   Names are `collage_<compiler>_<first composite or operator>` with `_1`, `_2`, ... for
//!   further distinct structures; structurally equal partitions share one global (TVM's prototype
//!   named them by counters that depended on visiting order).
//! * The rewritten module is type-checked, printed, parsed back and compared with the input
//!   after inlining every partition function ([`crate::planning::partition::inline`]).
//! * To run a placement ([`runnable`]), every partition instead becomes a function literal
//!   called from `@main`: native ones `Primitive=1` (one kernel each), BYOC ones with their
//!   `Compiler` and composites, as the executor hands them to the backends.

use super::{PartitionError, Plan};
use crate::ir::{AttrValue, Callee, Expr, Global, GlobalId, Module};
use crate::planning::enumerate::key::Signatures;
use crate::planning::enumerate::{extract, Candidate, DataflowGraph, Limits, SubGraph};
use crate::rules::ruletree::Program;

/// Coalesces the plan's chosen candidates into partitions, named, in node order.
pub fn coalesce(
    g: &DataflowGraph<'_>,
    program: &Program,
    plan: &Plan,
    limits: &Limits,
) -> Vec<super::Partition> {
    // Host nodes form one partition, built once from all of them.
    let mut host_inside = g.empty_set();
    let mut host_cost = 0.0;
    let mut host_parts: Vec<usize> = Vec::new();
    // The others, each as its sub-graph with what merges along with it.
    let mut parts: Vec<(&SubGraph, Merged)> = Vec::new();
    for &k in &plan.chosen {
        let c = &plan.candidates[k];
        if program.targets[c.target].is_host {
            host_inside.union_with(&c.sub_graph.inside);
            host_cost = crate::planning::cost::add_seconds(host_cost, plan.cost_of(k));
            host_parts.push(k);
        } else {
            let payload = (c.target, plan.cost_of(k), vec![k]);
            parts.push((&c.sub_graph, payload));
        }
    }
    // One host candidate keeps its own sub-graph; several make one over all their nodes.
    let host = host_parts.first().copied().map(|first| super::Partition {
        target: plan.candidates[first].target,
        sub_graph: match host_parts[..] {
            [k] => plan.candidates[k].sub_graph.clone(),
            _ => SubGraph::new(g, host_inside),
        },
        cost: host_cost,
        parts: host_parts,
        name: "host".into(),
    });
    // Coalesce touching BYOC partitions of one target, within its limits.
    let byoc = |t: usize| program.targets[t].compiler.is_some();
    let configs: Vec<crate::rules::ruletree::SubGraphConfig> = program
        .targets
        .iter()
        .map(|t| crate::planning::enumerate::region_limits(t, limits))
        .collect();
    let merged = super::greedy::merge_touching_by(
        g,
        parts,
        |a, b| a.0 == b.0 && byoc(a.0),
        |mut a, b| {
            a.1 = crate::planning::cost::add_seconds(a.1, b.1);
            a.2.extend(b.2);
            a
        },
        |a| configs[a.0],
    );
    // In node order, as merging leaves them.
    let mut parts: Vec<super::Partition> = merged
        .into_iter()
        .map(|(sub_graph, (target, cost, parts))| super::Partition {
            target,
            sub_graph: sub_graph.into_owned(),
            cost,
            parts,
            name: String::new(),
        })
        .collect();
    name_partitions(g, program, &mut parts);
    parts.extend(host);
    parts
}

/// What merges along with a partition's sub-graph: its target, cost and candidates.
type Merged = (usize, f64, Vec<usize>);

/// Names: `collage_<compiler>_<what>` for BYOC partitions (shared by equal structures),
/// `<target>_<k>` for native ones.
fn name_partitions(g: &DataflowGraph<'_>, program: &Program, parts: &mut [super::Partition]) {
    let mut sigs = Signatures::new(g);
    // (key, name) of each BYOC structure named so far.
    let mut named: Vec<(Vec<u32>, String)> = Vec::new();
    let mut per_target = vec![0usize; program.targets.len()];
    for p in parts.iter_mut() {
        let t = &program.targets[p.target];
        let Some(compiler) = &t.compiler else {
            p.name = format!("{}_{}", sanitize(&t.name), per_target[p.target]);
            per_target[p.target] += 1;
            continue;
        };
        let key = sigs.function_key(
            g,
            &Candidate {
                target: p.target,
                sub_graph: p.sub_graph.clone(),
                rule_name: String::new(),
            },
        );
        if let Some((_, n)) = named.iter().find(|(k, _)| *k == key) {
            p.name = n.clone();
            continue;
        }
        let what = p
            .sub_graph
            .composites()
            .first()
            .map(|&(c, _)| {
                c.strip_prefix(&format!("{compiler}."))
                    .unwrap_or(c)
                    .to_string()
            })
            .unwrap_or_else(|| {
                p.sub_graph
                    .label
                    .split('+')
                    .next()
                    .unwrap_or("")
                    .to_string()
            });
        let base = format!("collage_{}_{}", sanitize(compiler), sanitize(&what));
        let base = base.trim_end_matches('_').to_string();
        let mut name = base.clone();
        let mut n = 0;
        // Never a name the module already uses for one of its own globals.
        while named.iter().any(|(_, x)| *x == name)
            || g.module.globals.iter().any(|gl| gl.name == name)
        {
            n += 1;
            name = format!("{base}_{n}");
        }
        named.push((key, name.clone()));
        p.name = name;
    }
}

/// Characters outside `[A-Za-z0-9_]` become `_`; a leading digit gets a `_` in front.
pub fn sanitize(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// Rewrites the graph's function with the BYOC partitions outlined into global functions.
pub fn rewrite(
    g: &DataflowGraph<'_>,
    program: &Program,
    parts: &[super::Partition],
) -> Result<Module, PartitionError> {
    let mut groups = Vec::new();
    for p in parts {
        if program.targets[p.target].compiler.is_none() {
            continue;
        }
        for (sub, attrs) in &p.sub_graph.nested {
            let mut attrs = attrs.clone();
            attrs.retain(|(k, _)| k != "global_symbol");
            attrs.push(("global_symbol".into(), AttrValue::Str(p.name.clone())));
            groups.push((sub.clone(), attrs));
        }
    }
    let mut m =
        extract::rewrite_nested(g, &groups).map_err(|e| PartitionError::Rewrite(e.to_string()))?;
    outline(&mut m);
    crate::analysis::typeck::check(&mut m).map_err(|d| {
        PartitionError::Rewrite(
            d.iter()
                .next()
                .map_or_else(String::new, |x| x.message.clone()),
        )
    })?;
    Ok(m)
}

/// The attributes of a native partition's function when it runs as one kernel.
pub fn native_attrs() -> crate::planning::enumerate::subgraph::FnAttrs {
    vec![("Primitive".to_string(), AttrValue::int(1))]
}

/// The module a placement runs, beside [`rewrite`]'s program in TVM's encoding: every partition
/// a function called from `@main` (native ones `Primitive=1`, library ones with their
/// `Compiler` and composites), type-checked, so that each backend compiles its partitions as
/// the executor meets them.
pub fn runnable(
    g: &DataflowGraph<'_>,
    program: &Program,
    parts: &[super::Partition],
) -> Result<Module, String> {
    let mut groups = Vec::new();
    for p in parts {
        let t = &program.targets[p.target];
        if t.is_host {
            continue;
        }
        if t.compiler.is_some() {
            groups.extend(p.sub_graph.nested.iter().cloned());
        } else {
            groups.push((p.sub_graph.clone(), native_attrs()));
        }
    }
    let mut m = extract::rewrite_nested(g, &groups).map_err(|e| e.to_string())?;
    crate::analysis::typeck::check(&mut m).map_err(|d| {
        d.iter()
            .next()
            .map_or_else(String::new, |x| x.message.clone())
    })?;
    Ok(m)
}

/// Turns every called function literal with `global_symbol` into a global definition of that
/// name (the first one of each name; later ones call it), called through `@name`.
fn outline(m: &mut Module) {
    let Some(main) = m.main() else { return };
    let span = m.func(main).span;
    let mut callees = Vec::new();
    for e in m.exprs.iter() {
        if let Expr::Call {
            callee: Callee::Expr(c),
            ..
        } = e
        {
            if let Expr::Func(f) = m.exprs[c.index()] {
                if let Some(AttrValue::Str(name)) = m.func(f).attr("global_symbol") {
                    callees.push((*c, f, name.clone()));
                }
            }
        }
    }
    // Globals created here, by name (the module's own globals are never reused).
    let mut created: std::collections::BTreeMap<String, GlobalId> = Default::default();
    for (c, f, name) in callees {
        let existing = created.get(&name).copied();
        let gid = existing.unwrap_or_else(|| {
            m.globals.push(Global {
                name: name.clone(),
                def: Some(f),
                span,
            });
            let gid = GlobalId((m.globals.len() - 1) as u32);
            m.defs.insert(0, (gid, f));
            created.insert(name.clone(), gid);
            gid
        });
        m.exprs[c.index()] = Expr::Global(gid);
    }
}

/// Prints the module, parses it back and checks that it equals `original` once the partition
/// functions are inlined, and that every constant holds the same data as in `original`.
pub fn check_round_trip(original: &Module, rewritten: &Module) -> Result<String, String> {
    let text = crate::frontend::relay::print::print_module(rewritten);
    let mut sources = crate::source::SourceMap::new();
    let file = sources.add("<partitioned>".to_string(), text.clone());
    let reparsed = crate::frontend::relay::load(&sources, file).map_err(|d| {
        format!(
            "the partitioned program does not parse: {}",
            d.iter()
                .next()
                .map_or_else(String::new, |x| x.message.clone())
        )
    })?;
    crate::planning::partition::inline::equal_after_inlining(original, &reparsed)
        .map_err(|e| format!("the partitioned program differs from the input: {e}"))?;
    crate::ir::equal::constant_data_equal(original, &reparsed)
        .map_err(|e| format!("the partitioned program lost constant data: {e}"))?;
    Ok(text)
}
