//! Combiners, partition rule trees and equivalences.

use super::names::{Checker, DefId, DefKind};
use super::pattern::{ops_of, Captures};
use crate::diag::*;
use crate::ops::{registry, OpPattern};
use crate::rules::dsl::ast::{self, CombTerm, RuleKind};
use crate::rules::ruletree::{Combiner, Rule, SubGraphConfig};
use crate::source::Span;

/// Parses a kind name: a letter (`E B I R A T O`) or a long name (`elemwise`, ...).
pub(crate) fn kind_of(name: &str) -> Option<OpPattern> {
    let by_letter = match name {
        "E" => Some(OpPattern::ElemWise),
        "B" => Some(OpPattern::Broadcast),
        "I" => Some(OpPattern::Injective),
        "R" => Some(OpPattern::CommReduce),
        "A" => Some(OpPattern::OutEWiseFusable),
        "T" => Some(OpPattern::Tuple),
        "O" => Some(OpPattern::Opaque),
        _ => None,
    };
    by_letter.or_else(|| OpPattern::from_name(name))
}

impl Checker<'_> {
    pub fn kind_name(&mut self, n: &ast::Name) -> Option<OpPattern> {
        let k = kind_of(&n.text);
        if k.is_none() {
            let d = Diagnostic::error(E1501, format!("unknown operator kind `{}`", n.text))
                .with_primary(n.span, "not a kind")
                .with_note("kinds are E (elemwise), B (broadcast), I (injective), R (comm_reduce), A (out_ewise_fusable), T (tuple) and O (opaque)");
            self.report(d);
        }
        k
    }

    /// Compiles a combiner expression into its list of combiner rules.
    pub fn combiner(&mut self, c: &ast::Comb) -> Option<Vec<Combiner>> {
        let mut out = Vec::new();
        let mut ok = true;
        for t in &c.terms {
            match t {
                CombTerm::ByKind(pairs, _) => {
                    let mut compiled = Vec::new();
                    for (a, b) in pairs {
                        match (self.kind_name(a), self.kind_name(b)) {
                            (Some(x), Some(y)) => compiled.push((x, y)),
                            _ => ok = false,
                        }
                    }
                    out.push(Combiner::ByKind(compiled));
                }
                CombTerm::Named(n) => match n.text.as_str() {
                    "tuple_arg" => out.push(Combiner::TupleArg),
                    "tuple_proj" => out.push(Combiner::TupleProj),
                    "constant" => out.push(Combiner::Constant),
                    _ => match self.lookup_kind(n, DefKind::Combiner) {
                        Some(d) => match self.combiner_use(d, n) {
                            Some(cs) => out.extend(cs),
                            None => ok = false,
                        },
                        None => ok = false,
                    },
                },
            }
        }
        ok.then_some(out)
    }

    fn combiner_use(&mut self, d: DefId, n: &ast::Name) -> Option<Vec<Combiner>> {
        if let Some(memo) = self.combiner_memo.get(&d) {
            return memo.clone();
        }
        if !self.enter_def(d, n.span) {
            return None;
        }
        let r = self.combiner_body(d);
        self.leave_def();
        r
    }

    /// Compiles (once) the combiner defined by `d`.
    pub fn combiner_def(&mut self, d: DefId) -> Option<Vec<Combiner>> {
        if let Some(memo) = self.combiner_memo.get(&d) {
            return memo.clone();
        }
        self.in_progress.push(d);
        let r = self.combiner_body(d);
        self.in_progress.pop();
        r
    }

    fn combiner_body(&mut self, d: DefId) -> Option<Vec<Combiner>> {
        let item = self.item(self.defs[d].at);
        let ast::ItemKind::Combiner { body, .. } = &item.kind else {
            return None;
        };
        let saved = std::mem::replace(&mut self.current_file, self.defs[d].at.0);
        let r = self.combiner(body);
        self.current_file = saved;
        self.combiner_memo.insert(d, r.clone());
        r
    }

    /// Compiles (once) the rule defined by `d`.
    pub fn rule_def(&mut self, d: DefId) -> Option<Rule> {
        if let Some(memo) = self.rule_memo.get(&d) {
            return memo.clone();
        }
        self.in_progress.push(d);
        let r = self.rule_body(d);
        self.in_progress.pop();
        r
    }

    fn rule_body(&mut self, d: DefId) -> Option<Rule> {
        let item = self.item(self.defs[d].at);
        let ast::ItemKind::Rule { body, .. } = &item.kind else {
            return None;
        };
        let saved = std::mem::replace(&mut self.current_file, self.defs[d].at.0);
        let r = self.rule(body);
        self.current_file = saved;
        self.rule_memo.insert(d, r.clone());
        r
    }

    /// Compiles a partition rule.
    pub fn rule(&mut self, r: &ast::RuleExpr) -> Option<Rule> {
        match &r.kind {
            RuleKind::Pattern(p) => {
                let name = match &p.kind {
                    ast::PatKind::Call {
                        callee, args: None, ..
                    } if callee.len() == 1 => callee[0].text.clone(),
                    _ => String::new(),
                };
                let (pattern, _) = self.top_pattern(p)?;
                Some(Rule::Pattern { name, pattern })
            }
            RuleKind::Ops { entries, options } => self.ops_rule(entries, options, r.span),
            RuleKind::Composite(name, sub) => {
                if name.value.is_empty() {
                    let d = Diagnostic::error(E1601, "a composite needs a non-empty name")
                        .with_primary(name.span, "empty name");
                    self.report(d);
                }
                Some(Rule::Composite(
                    name.value.clone(),
                    Box::new(self.rule(sub)?),
                ))
            }
            RuleKind::Primitive(sub) => Some(Rule::Primitive(Box::new(self.rule(sub)?))),
            RuleKind::Union(subs) => {
                if subs.is_empty() {
                    let d = Diagnostic::error(E1601, "`union` needs at least one rule")
                        .with_primary(r.span, "empty union");
                    self.report(d);
                    return None;
                }
                let compiled: Vec<Option<Rule>> = subs.iter().map(|s| self.rule(s)).collect();
                Some(Rule::Union(
                    compiled.into_iter().collect::<Option<Vec<_>>>()?,
                ))
            }
            RuleKind::Combine(sub, comb, options) => {
                let sub = self.rule(sub);
                let combiners = self.combiner(comb);
                let mut max_depth = None;
                for o in options {
                    match o.key.text.as_str() {
                        "max_depth" => max_depth = self.positive(o),
                        _ => self.unknown_option(o, "`combine`", &["max_depth"]),
                    }
                }
                Some(Rule::Combine {
                    sub: Box::new(sub?),
                    combiners: combiners?,
                    max_depth,
                })
            }
            RuleKind::OnlyValid(sub, options) => {
                let sub = self.rule(sub);
                let config = self.subgraph_config(options);
                Some(Rule::OnlyValid(Box::new(sub?), config))
            }
            RuleKind::Ref(n) => match n.text.as_str() {
                "op_call_by_kind" => Some(Rule::OpCallByKind),
                "host" => Some(Rule::Host),
                _ => {
                    let d = self.lookup_kind(n, DefKind::Rule)?;
                    if let Some(memo) = self.rule_memo.get(&d) {
                        return memo.clone();
                    }
                    if !self.enter_def(d, n.span) {
                        return None;
                    }
                    let r = self.rule_body(d);
                    self.leave_def();
                    r
                }
            },
        }
    }

    fn ops_rule(
        &mut self,
        entries: &[(ast::Name, Option<ast::Expr>)],
        options: &[ast::ConfigEntry],
        span: crate::source::Span,
    ) -> Option<Rule> {
        let mut prefix = None;
        for o in options {
            match (o.key.text.as_str(), &o.value.kind) {
                ("prefix", ast::ValueKind::Str(_)) if prefix.is_some() => {
                    let d = Diagnostic::error(E1602, "option `prefix` is given twice")
                        .with_primary(o.key.span, "given again here");
                    self.report(d);
                }
                ("prefix", ast::ValueKind::Str(s)) => prefix = Some(s.clone()),
                ("prefix", _) => {
                    let d = Diagnostic::error(E1602, "`prefix` must be a string")
                        .with_primary(o.value.span, "expected a string such as \"tensorrt.\"");
                    self.report(d);
                }
                _ => self.unknown_option(o, "`ops`", &["prefix"]),
            }
        }
        if entries.is_empty() {
            let d = Diagnostic::error(E1601, "`ops` needs at least one operator")
                .with_primary(span, "no operators");
            self.report(d);
            return None;
        }
        let mut out = Vec::new();
        let mut listed: Vec<(crate::ir::OpId, crate::source::Span)> = Vec::new();
        let mut ok = true;
        for (name, guard) in entries {
            let Some(op) = registry().lookup(&name.text) else {
                let mut d = Diagnostic::error(E1301, format!("unknown operator `{}`", name.text))
                    .with_primary(name.span, "not a registered operator");
                if let Some(s) = registry().suggest(&name.text) {
                    d = d.with_note(format!("help: did you mean `{s}`?"));
                }
                self.report(d);
                ok = false;
                continue;
            };
            if let Some(prev) = listed.iter().find(|(o, _)| *o == op).map(|(_, s)| *s) {
                let d =
                    Diagnostic::error(E1601, format!("operator `{}` is listed twice", name.text))
                        .with_primary(name.span, "listed again here")
                        .with_secondary(prev, "first listed here");
                self.report(d);
                ok = false;
                continue;
            }
            listed.push((op, name.span));
            let pred = match guard {
                Some(e) => {
                    let mut caps = Captures::default();
                    caps.id("$call", Some(vec![op]), name.span);
                    match self.bool_pred(e, &caps) {
                        Some(p) => Some(p),
                        None => {
                            ok = false;
                            continue;
                        }
                    }
                }
                None => None,
            };
            out.push((op, pred));
        }
        ok.then_some(Rule::Ops {
            entries: out,
            prefix,
        })
    }

    fn positive(&mut self, o: &ast::ConfigEntry) -> Option<u32> {
        match &o.value.kind {
            ast::ValueKind::Int(v) if *v >= 1 && *v <= u32::MAX as i64 => Some(*v as u32),
            _ => {
                let d = Diagnostic::error(
                    E1602,
                    format!("`{}` must be a positive integer", o.key.text),
                )
                .with_primary(o.value.span, "expected an integer ≥ 1");
                self.report(d);
                None
            }
        }
    }

    pub fn unknown_option(&mut self, o: &ast::ConfigEntry, what: &str, known: &[&str]) {
        let mut d = Diagnostic::error(E1602, format!("{what} has no option `{}`", o.key.text))
            .with_primary(o.key.span, "unknown option");
        match crate::util::closest(&o.key.text, known.iter().copied()) {
            Some(s) => d = d.with_note(format!("help: did you mean `{s}`?")),
            None => d = d.with_note(format!("options: {}", known.join(", "))),
        }
        self.report(d);
    }

    /// `max_depth`, `max_exits`, `taps` of `only_valid`.
    pub fn subgraph_config(&mut self, options: &[ast::ConfigEntry]) -> SubGraphConfig {
        let mut cfg = SubGraphConfig {
            max_depth: None,
            max_exits: 0,
            allow_taps: false,
        };
        let mut seen: Vec<&ast::Name> = Vec::new();
        for o in options {
            if let Some(prev) = seen.iter().find(|n| n.text == o.key.text) {
                let d = Diagnostic::error(E1602, format!("option `{}` is given twice", o.key.text))
                    .with_primary(o.key.span, "given again here")
                    .with_secondary(prev.span, "first given here");
                self.report(d);
                continue;
            }
            seen.push(&o.key);
            match o.key.text.as_str() {
                "max_depth" => cfg.max_depth = self.positive(o),
                "max_exits" => match &o.value.kind {
                    ast::ValueKind::Int(v) if *v >= 0 && *v <= u32::MAX as i64 => {
                        cfg.max_exits = *v as u32
                    }
                    _ => {
                        let d = Diagnostic::error(
                            E1602,
                            "`max_exits` must be a non-negative integer (0 = unlimited)",
                        )
                        .with_primary(o.value.span, "expected an integer ≥ 0");
                        self.report(d);
                    }
                },
                "taps" => match &o.value.kind {
                    ast::ValueKind::Bool(b) => cfg.allow_taps = *b,
                    _ => {
                        let d = Diagnostic::error(E1602, "`taps` must be `true` or `false`")
                            .with_primary(o.value.span, "expected a boolean");
                        self.report(d);
                    }
                },
                _ => self.unknown_option(o, "`only_valid`", &["max_depth", "max_exits", "taps"]),
            }
        }
        cfg
    }

    /// `equiv L == R;` and `rewrite L => R;`: both sides share captures; every capture on the
    /// right must be bound on the left (and, for equivalences, the other way round).
    pub fn equivalence(&mut self, lhs: &ast::Pat, rhs: &ast::Pat, symmetric: bool, span: Span) {
        let mut caps = Captures::default();
        let params = super::pattern::Params::new();
        let Some(l) = self.pattern(lhs, &mut caps, &params) else {
            return;
        };
        let bound_left = caps.list.len();
        let Some(r) = self.pattern(rhs, &mut caps, &params) else {
            return;
        };
        if caps.list.len() > bound_left {
            let (name, _, span) = caps.list[bound_left].clone();
            let d = Diagnostic::error(
                E1306,
                format!("capture `{name}` on the right is not bound on the left"),
            )
            .with_primary(span, "unbound on the left side")
            .with_secondary(lhs.span, "the left side");
            self.report(d);
            return;
        }
        if symmetric {
            let mut right_caps = Captures::default();
            let _ = self.muted(|cx| cx.pattern(rhs, &mut right_caps, &params));
            if let Some((name, _, span)) = caps.list[..bound_left]
                .iter()
                .find(|(n, _, _)| right_caps.find(n).is_none())
                .cloned()
            {
                let d = Diagnostic::error(
                    E1306,
                    format!("capture `{name}` on the left is not bound on the right"),
                )
                .with_primary(span, "unbound on the right side")
                .with_secondary(rhs.span, "the right side");
                self.report(d);
                return;
            }
        }
        if ops_of(&l).is_none() {
            let d = Diagnostic::error(
                E1601,
                "the left side of an equivalence or rewrite must be an operator call",
            )
            .with_primary(lhs.span, "not a call");
            self.report(d);
            return;
        }
        let pair = (l, r);
        if symmetric {
            self.program.equivalences.push(pair);
            self.program.equivalence_spans.push(span);
        } else {
            self.program.rewrites.push(pair);
            self.program.rewrite_spans.push(span);
        }
    }
}
