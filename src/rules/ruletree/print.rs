//! The canonical text of a compiled [`Program`] (`collage check --print`): targets with their
//! fields and rule trees, one node per line, with patterns and predicates fully expanded.

use super::*;
use crate::ir::literal::shortest_g;
use crate::ops::registry;
use std::fmt::Write;

/// Prints a compiled program.
pub fn print_program(p: &Program) -> String {
    let mut out = String::new();
    for op in &p.custom_ops {
        let _ = writeln!(
            out,
            "operator {}({}) : {}",
            op.name,
            op.args.join(", "),
            op.kind
        );
    }
    for (l, r) in &p.equivalences {
        let _ = writeln!(out, "equiv {} == {}", pattern(l), pattern(r));
    }
    for (l, r) in &p.rewrites {
        let _ = writeln!(out, "rewrite {} => {}", pattern(l), pattern(r));
    }
    for t in &p.targets {
        target(&mut out, p, t);
    }
    out
}

fn opt_secs(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |x| format!("{} s", shortest_g(x)))
}

fn opt_num(v: Option<f64>, unit: &str) -> String {
    v.map_or("-".to_string(), |x| format!("{} {unit}", shortest_g(x)))
}

fn target(out: &mut String, p: &Program, t: &Target) {
    let _ = writeln!(out, "target {} {{", t.name);
    let kind = if t.is_host {
        "host"
    } else if t.compiler.is_some() {
        "byoc"
    } else {
        "native"
    };
    let _ = writeln!(out, "  kind = {kind}");
    if let Some(c) = &t.compiler {
        let _ = writeln!(out, "  compiler = {c:?}");
    }
    let _ = writeln!(out, "  device = {}", t.device);
    if let Some(f) = t.fusion {
        let _ = writeln!(out, "  fusion = {}", f.name());
    }
    let _ = writeln!(
        out,
        "  max_depth = {}",
        t.max_depth.map_or("default".to_string(), |d| d.to_string())
    );
    match t.region_depth {
        Some(u32::MAX) => {
            let _ = writeln!(out, "  region_depth = unlimited");
        }
        Some(d) => {
            let _ = writeln!(out, "  region_depth = {d}");
        }
        None => {}
    }
    if let Some(r) = t.refines {
        let _ = writeln!(
            out,
            "  refines = {}",
            p.targets.get(r).map_or("?", |x| x.name.as_str())
        );
    }
    let c = &t.cost;
    let _ = writeln!(
        out,
        "  cost = peak {}, bandwidth {}, launch {}",
        opt_num(c.peak_flops, "flop/s"),
        opt_num(c.bandwidth, "B/s"),
        opt_secs(c.launch)
    );
    if !c.efficiency.is_empty() || c.default_efficiency.is_some() {
        let mut parts: Vec<String> = c
            .efficiency
            .iter()
            .map(|(op, v)| format!("{} {}", registry().get(*op).name, shortest_g(*v)))
            .collect();
        if let Some(d) = c.default_efficiency {
            parts.push(format!("default {}", shortest_g(d)));
        }
        let _ = writeln!(out, "  efficiency = {}", parts.join(", "));
    }
    if t.transition != Transition::default() {
        let _ = writeln!(
            out,
            "  transition = dispatch {}, latency {}, bandwidth {}",
            opt_secs(t.transition.dispatch),
            opt_secs(t.transition.latency),
            opt_num(t.transition.bandwidth, "B/s")
        );
    }
    let _ = writeln!(out, "  rule =");
    rule(out, &t.rule, 2);
    let _ = writeln!(out, "}}");
}

/// One line naming a rule of a tree, as [`print_program`] writes its head (`combine
/// [by_kind(A->A)] max_depth=8`), with `default_depth` for a depth limit the rule leaves to the
/// target or the command line.
pub fn rule_head(r: &Rule, default_depth: u32) -> String {
    match r {
        Rule::Combine {
            combiners,
            max_depth,
            ..
        } => {
            let cs: Vec<String> = combiners.iter().map(combiner).collect();
            format!(
                "combine [{}] max_depth={}",
                cs.join(", "),
                max_depth.unwrap_or(default_depth)
            )
        }
        Rule::Union(subs) => format!("union of {} rules", subs.len()),
        _ => {
            let mut out = String::new();
            rule(&mut out, r, 0);
            out.lines().next().unwrap_or("").trim().to_string()
        }
    }
}

fn rule(out: &mut String, r: &Rule, depth: usize) {
    let pad = "  ".repeat(depth);
    match r {
        Rule::Pattern { name, pattern: p } => {
            let label = if name.is_empty() {
                String::new()
            } else {
                format!(" {name}")
            };
            let _ = writeln!(out, "{pad}pattern{label}: {}", pattern(p));
        }
        Rule::Ops { entries, prefix } => {
            let pre = prefix
                .as_ref()
                .map_or(String::new(), |p| format!(" prefix={p:?}"));
            let _ = writeln!(out, "{pad}ops{pre}");
            for (op, pred) in entries {
                let name = registry().get(*op).name;
                match pred {
                    Some(x) => {
                        let _ = writeln!(out, "{pad}  {name} where {}", pred_text(x));
                    }
                    None => {
                        let _ = writeln!(out, "{pad}  {name}");
                    }
                }
            }
        }
        Rule::OpCallByKind => {
            let _ = writeln!(out, "{pad}op_call_by_kind");
        }
        Rule::Host => {
            let _ = writeln!(out, "{pad}host");
        }
        Rule::Composite(name, sub) => {
            let _ = writeln!(out, "{pad}composite {name:?}");
            rule(out, sub, depth + 1);
        }
        Rule::Primitive(sub) => {
            let _ = writeln!(out, "{pad}primitive");
            rule(out, sub, depth + 1);
        }
        Rule::Union(subs) => {
            let _ = writeln!(out, "{pad}union");
            for s in subs {
                rule(out, s, depth + 1);
            }
        }
        Rule::Combine {
            sub,
            combiners,
            max_depth,
        } => {
            let cs: Vec<String> = combiners.iter().map(combiner).collect();
            let md = max_depth.map_or("default".to_string(), |d| d.to_string());
            let _ = writeln!(out, "{pad}combine [{}] max_depth={md}", cs.join(", "));
            rule(out, sub, depth + 1);
        }
        Rule::OnlyValid(sub, cfg) => {
            let md = cfg
                .max_depth
                .map_or("default".to_string(), |d| d.to_string());
            let _ = writeln!(
                out,
                "{pad}only_valid max_depth={md} max_exits={} taps={}",
                cfg.max_exits, cfg.allow_taps
            );
            rule(out, sub, depth + 1);
        }
    }
}

fn combiner(c: &Combiner) -> String {
    match c {
        Combiner::ByKind(pairs) => {
            let ps: Vec<String> = pairs
                .iter()
                .map(|(a, b)| format!("{}->{}", a.letter(), b.letter()))
                .collect();
            format!("by_kind({})", ps.join(", "))
        }
        Combiner::TupleArg => "tuple_arg".into(),
        Combiner::TupleProj => "tuple_proj".into(),
        Combiner::Constant => "constant".into(),
    }
}

/// A pattern in the rules syntax, captures written `$0`, `$1`, ...
pub fn pattern(p: &Pattern) -> String {
    match p {
        Pattern::Wildcard => "_".into(),
        Pattern::Const => "const".into(),
        Pattern::Capture(id, inner) => match **inner {
            Pattern::Wildcard => format!("${id}"),
            _ => format!("{} as ${id}", pattern(inner)),
        },
        Pattern::Call { ops, attrs, args } => {
            let names: Vec<&str> = ops.iter().map(|o| registry().get(*o).name).collect();
            let callee = if names.len() == 1 {
                names[0].to_string()
            } else {
                format!("({})", names.join(" | "))
            };
            let attrs = if attrs.is_empty() {
                String::new()
            } else {
                let parts: Vec<String> = attrs.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                format!("[{}]", parts.join(", "))
            };
            let args: Vec<String> = args.iter().map(pattern).collect();
            format!("{callee}{attrs}({})", args.join(", "))
        }
        Pattern::Optional {
            ops,
            attrs,
            first,
            rest,
        } => {
            let call = pattern(&Pattern::Call {
                ops: ops.clone(),
                attrs: attrs.clone(),
                args: std::iter::once((**first).clone())
                    .chain(rest.iter().cloned())
                    .collect(),
            });
            // `op[attrs](args)` -> `op?[attrs](args)`: the `?` goes right after the callee.
            let at = call
                .find(['[', '('])
                .filter(|_| ops.len() == 1)
                .unwrap_or(0);
            if ops.len() == 1 {
                format!("{}?{}", &call[..at], &call[at..])
            } else {
                let close = call.find(')').map_or(0, |i| i + 1);
                format!("{}?{}", &call[..close], &call[close..])
            }
        }
        Pattern::Alt(alts) => {
            let parts: Vec<String> = alts.iter().map(pattern).collect();
            format!("({})", parts.join(" | "))
        }
        Pattern::Tuple(fields) => {
            let parts: Vec<String> = fields.iter().map(pattern).collect();
            let comma = if parts.len() == 1 { "," } else { "" };
            format!("({}{comma})", parts.join(", "))
        }
        Pattern::AnyTuple => "tuple(..)".into(),
        Pattern::Proj(inner, i) => format!("{}.{i}", postfix_operand(inner)),
        Pattern::DType(inner, ds) => {
            let names: Vec<String> = ds.iter().map(|d| d.to_string()).collect();
            format!("{} : dtype({})", postfix_operand(inner), names.join(" | "))
        }
        Pattern::Rank(inner, r) => format!("{} : rank({r})", postfix_operand(inner)),
        Pattern::Shape(inner, dims) => {
            let ds: Vec<String> = dims
                .iter()
                .map(|d| d.map_or("_".to_string(), |v| v.to_string()))
                .collect();
            format!("{} : shape({})", postfix_operand(inner), ds.join(", "))
        }
        Pattern::Where(inner, pred) => format!("({} where {})", pattern(inner), pred_text(pred)),
    }
}

/// A pattern as the operand of `.N` or `:`: parenthesised when it ends in `as $n`.
fn postfix_operand(p: &Pattern) -> String {
    match p {
        Pattern::Capture(_, inner) if !matches!(**inner, Pattern::Wildcard) => {
            format!("({})", pattern(p))
        }
        _ => pattern(p),
    }
}

/// A predicate in the rules syntax, fully parenthesised.
pub fn pred_text(p: &Pred) -> String {
    match p {
        Pred::Lit(l) => match l {
            Lit::Int(v) => v.to_string(),
            Lit::Float(v) => {
                let t = shortest_g(*v);
                if t.contains(['.', 'e', 'n', 'i']) {
                    t
                } else {
                    format!("{t}.0")
                }
            }
            Lit::Str(s) => format!("{s:?}"),
            Lit::Bool(b) => b.to_string(),
            Lit::DType(d) => d.to_string(),
        },
        Pred::Capture(i) => format!("${i}"),
        Pred::Prop(b, prop) => format!("{}.{}", pred_text(b), prop.name()),
        Pred::Attr(b, a) => format!("{}.{a}", pred_text(b), a = a),
        Pred::Arg(b, i) => format!("{}.args[{}]", pred_text(b), pred_text(i)),
        Pred::Index(b, i) => format!("{}[{}]", pred_text(b), pred_text(i)),
        Pred::List(items) => {
            let parts: Vec<String> = items.iter().map(pred_text).collect();
            format!("[{}]", parts.join(", "))
        }
        Pred::Unary(op, x) => {
            let sym = match op {
                crate::rules::dsl::ast::UnOp::Not => "!",
                crate::rules::dsl::ast::UnOp::Neg => "-",
            };
            format!("{sym}{}", pred_text(x))
        }
        Pred::Binary(op, a, b) => format!("({} {} {})", pred_text(a), op.symbol(), pred_text(b)),
        Pred::Call(f, args) => {
            let parts: Vec<String> = args.iter().map(pred_text).collect();
            format!("{}({})", f.name(), parts.join(", "))
        }
    }
}
