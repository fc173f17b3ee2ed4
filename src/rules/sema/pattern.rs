//! Checking and compiling patterns.
//!
//! Pattern uses (`dense_bias`, `bias(x)`) are expanded in place; their bodies were checked once
//! where they are defined, so expansion runs with diagnostics muted. Captures are numbered per
//! top-level pattern; a capture written twice means "the same node". Operator calls are checked
//! against the registry: existence, exact arity (a pattern whose argument count differs from its
//! operator's arity can never match), attribute names and value types. Contradictory dtype,
//! rank and shape constraints are errors too.

use super::names::{Checker, DefKind};
use crate::diag::*;
use crate::ir::{DType, OpId};
use crate::ops::registry;
use crate::rules::dsl::ast::{self, PatKind, TypeConstraint};
use crate::rules::ruletree::Pattern;
use crate::source::Span;
use std::collections::HashMap;

/// The captures of one top-level pattern.
#[derive(Clone, Debug, Default)]
pub(crate) struct Captures {
    /// Name (with `$`), the operators the capture is bound to (if a call), and first span.
    pub list: Vec<(String, Option<Vec<OpId>>, Span)>,
    /// Captures bound only in some alternatives of an alternation (or only inside an optional
    /// call): not usable outside them.
    pub partial: Vec<bool>,
}

impl Captures {
    pub fn id(&mut self, name: &str, ops: Option<Vec<OpId>>, span: Span) -> u32 {
        if let Some(i) = self.list.iter().position(|(n, _, _)| n == name) {
            if self.list[i].1.is_none() {
                self.list[i].1 = ops;
            }
            self.partial[i] = false;
            return i as u32;
        }
        self.list.push((name.to_string(), ops, span));
        self.partial.push(false);
        (self.list.len() - 1) as u32
    }

    /// Marks as partial the captures bound in some of `branches` but not all, unless they were
    /// bound before (`before` = number of captures then).
    fn mark_partial(&mut self, branches: &[&Pattern], before: usize) {
        let sets: Vec<Vec<u32>> = branches.iter().map(|b| b.capture_ids()).collect();
        for id in before..self.list.len() {
            let id32 = id as u32;
            let in_all = sets.iter().all(|s| s.contains(&id32));
            if !in_all {
                self.partial[id] = true;
            }
        }
    }

    pub fn find(&self, name: &str) -> Option<u32> {
        self.list
            .iter()
            .position(|(n, _, _)| n == name)
            .map(|i| i as u32)
    }
}

/// Pattern parameters in scope: name → the pattern substituted for it.
pub(crate) type Params = HashMap<String, Pattern>;

/// The operators a compiled pattern is a call of, if it is one.
pub(crate) fn ops_of(p: &Pattern) -> Option<Vec<OpId>> {
    match p {
        Pattern::Call { ops, .. } => Some(ops.clone()),
        Pattern::Capture(_, inner)
        | Pattern::Where(inner, _)
        | Pattern::DType(inner, _)
        | Pattern::Rank(inner, _)
        | Pattern::Shape(inner, _) => ops_of(inner),
        _ => None,
    }
}

impl Checker<'_> {
    /// Checks a pattern definition on its own (parameters stand for anything).
    pub fn check_pattern_def(&mut self, params: &[ast::Name], body: &ast::Pat) {
        let mut seen: Vec<&ast::Name> = Vec::new();
        for p in params {
            if let Some(prev) = seen.iter().find(|q| q.text == p.text) {
                let d =
                    Diagnostic::error(E1202, format!("parameter `{}` is declared twice", p.text))
                        .with_primary(p.span, "declared again here")
                        .with_secondary(prev.span, "first declared here");
                self.report(d);
            }
            seen.push(p);
        }
        let params: Params = params
            .iter()
            .map(|p| (p.text.clone(), Pattern::Wildcard))
            .collect();
        let mut caps = Captures::default();
        let _ = self.pattern(body, &mut caps, &params);
    }

    /// Compiles a top-level pattern (a fresh capture scope).
    pub fn top_pattern(&mut self, p: &ast::Pat) -> Option<(Pattern, Captures)> {
        let mut caps = Captures::default();
        let pat = self.pattern(p, &mut caps, &Params::new())?;
        Some((pat, caps))
    }

    /// Compiles a pattern in the given capture scope.
    pub fn pattern(
        &mut self,
        p: &ast::Pat,
        caps: &mut Captures,
        params: &Params,
    ) -> Option<Pattern> {
        match &p.kind {
            PatKind::Wildcard => Some(Pattern::Wildcard),
            PatKind::Const => Some(Pattern::Const),
            PatKind::AnyTuple => Some(Pattern::AnyTuple),
            PatKind::Capture(n) => Some(Pattern::Capture(
                caps.id(&n.text, None, n.span),
                Box::new(Pattern::Wildcard),
            )),
            PatKind::As(inner, n) => {
                let inner = self.pattern(inner, caps, params)?;
                let id = caps.id(&n.text, ops_of(&inner), n.span);
                Some(Pattern::Capture(id, Box::new(inner)))
            }
            PatKind::Alt(alts) => {
                let before = caps.list.len();
                let compiled: Vec<Option<Pattern>> =
                    alts.iter().map(|a| self.pattern(a, caps, params)).collect();
                let compiled = compiled.into_iter().collect::<Option<Vec<_>>>()?;
                caps.mark_partial(&compiled.iter().collect::<Vec<_>>(), before);
                Some(Pattern::Alt(compiled))
            }
            PatKind::Tuple(fields) => {
                let compiled: Vec<Option<Pattern>> = fields
                    .iter()
                    .map(|a| self.pattern(a, caps, params))
                    .collect();
                Some(Pattern::Tuple(
                    compiled.into_iter().collect::<Option<Vec<_>>>()?,
                ))
            }
            PatKind::Proj(inner, n) => Some(Pattern::Proj(
                Box::new(self.pattern(inner, caps, params)?),
                *n,
            )),
            PatKind::Constraint(inner, c, cspan) => {
                let inner = self.pattern(inner, caps, params)?;
                self.constraint(inner, c, *cspan, p.span)
            }
            PatKind::Where(inner, e) => {
                let inner = self.pattern(inner, caps, params)?;
                let pred = self.bool_pred(e, caps)?;
                Some(Pattern::Where(Box::new(inner), pred))
            }
            PatKind::Call {
                callee,
                optional,
                attrs,
                args,
            } => self.call_pattern(
                p.span,
                callee,
                *optional,
                attrs,
                args.as_deref(),
                caps,
                params,
            ),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn call_pattern(
        &mut self,
        span: Span,
        callee: &[ast::Name],
        optional: bool,
        attrs: &[ast::ConfigEntry],
        args: Option<&[ast::Pat]>,
        caps: &mut Captures,
        params: &Params,
    ) -> Option<Pattern> {
        // A single plain name may be a parameter or a pattern use.
        if let [name] = callee {
            if let Some(bound) = params.get(&name.text) {
                if args.is_some() || optional || !attrs.is_empty() {
                    let d = Diagnostic::error(
                        E1203,
                        format!(
                            "`{}` is a pattern parameter and cannot be called",
                            name.text
                        ),
                    )
                    .with_primary(span, "used as a call");
                    self.report(d);
                    return None;
                }
                return Some(bound.clone());
            }
            if registry().lookup(&name.text).is_none() {
                if let Some(d) = self.lookup(&name.text) {
                    return self
                        .expand_pattern_use(d, name, span, optional, attrs, args, caps, params);
                }
            }
        }
        let ops = self.resolve_ops(callee)?;
        let Some(args) = args else {
            let names: Vec<_> = callee.iter().map(|n| n.text.as_str()).collect();
            let def = registry().get(ops[0]);
            let d = Diagnostic::error(
                E1302,
                format!(
                    "operator `{}` needs its arguments in a pattern",
                    names.join(" | ")
                ),
            )
            .with_primary(
                span,
                format!(
                    "write `{}({})`",
                    def.name,
                    vec!["_"; def.arity()].join(", ")
                ),
            );
            self.report(d);
            return None;
        };
        let mut ok = true;
        for (op, name) in ops.iter().zip(callee) {
            let def = registry().get(*op);
            if def.arity() != args.len() {
                let d = Diagnostic::error(
                    E1302,
                    format!(
                        "pattern can never match: `{}` takes {} argument{} ({}), the pattern gives {}",
                        def.name,
                        def.arity(),
                        if def.arity() == 1 { "" } else { "s" },
                        def.args.join(", "),
                        args.len()
                    ),
                )
                .with_primary(span, "arity mismatch")
                .with_secondary(name.span, format!("`{}` takes {}", def.name, def.arity()));
                self.report(d);
                ok = false;
            }
        }
        let attrs = self.attr_constraints(&ops, callee, attrs)?;
        let before_call = caps.list.len();
        let compiled: Vec<Option<Pattern>> =
            args.iter().map(|a| self.pattern(a, caps, params)).collect();
        let compiled = compiled.into_iter().collect::<Option<Vec<_>>>()?;
        if !ok {
            return None;
        }
        let call = Pattern::Call {
            ops,
            attrs,
            args: compiled.clone(),
        };
        if optional {
            if compiled.is_empty() {
                let d = Diagnostic::error(
                    E1302,
                    "an optional operator needs at least one argument to pass through",
                )
                .with_primary(span, "nothing to pass through");
                self.report(d);
                return None;
            }
            let Pattern::Call { ops, attrs, args } = call else {
                return None;
            };
            // Captures bound only in the optional call's other arguments may be absent.
            let first_ids = args[0].capture_ids();
            for r in &args[1..] {
                for id in r.capture_ids() {
                    if !first_ids.contains(&id) && (id as usize) >= before_call {
                        caps.partial[id as usize] = true;
                    }
                }
            }
            let mut args = args.into_iter();
            let first = Box::new(args.next()?);
            return Some(Pattern::Optional {
                ops,
                attrs,
                first,
                rest: args.collect(),
            });
        }
        Some(call)
    }

    #[allow(clippy::too_many_arguments)]
    fn expand_pattern_use(
        &mut self,
        d: usize,
        name: &ast::Name,
        span: Span,
        optional: bool,
        attrs: &[ast::ConfigEntry],
        args: Option<&[ast::Pat]>,
        caps: &mut Captures,
        params: &Params,
    ) -> Option<Pattern> {
        if self.defs[d].kind != DefKind::Pattern {
            let other = self.defs[d].kind;
            let diag = Diagnostic::error(
                E1203,
                format!(
                    "`{}` is {}, not a pattern or operator",
                    name.text,
                    other.noun()
                ),
            )
            .with_primary(name.span, "expected a pattern or an operator")
            .with_secondary(
                self.defs[d].name_span,
                format!("defined here as {}", other.noun()),
            );
            self.report(diag);
            return None;
        }
        let item = self.item(self.defs[d].at);
        let ast::ItemKind::Pattern {
            params: formals,
            body,
            ..
        } = &item.kind
        else {
            return None;
        };
        if optional || !attrs.is_empty() {
            let diag = Diagnostic::error(
                E1203,
                format!(
                    "`{}` is a pattern; `?` and attribute constraints apply to operators only",
                    name.text
                ),
            )
            .with_primary(span, "not an operator");
            self.report(diag);
            return None;
        }
        let actuals = args.unwrap_or(&[]);
        if formals.len() != actuals.len() {
            let diag = Diagnostic::error(
                E1307,
                format!(
                    "pattern `{}` takes {} argument(s), {} given",
                    name.text,
                    formals.len(),
                    actuals.len()
                ),
            )
            .with_primary(span, "wrong number of pattern arguments")
            .with_secondary(self.defs[d].name_span, "defined here");
            self.report(diag);
            return None;
        }
        let compiled: Vec<Option<Pattern>> = actuals
            .iter()
            .map(|a| self.pattern(a, caps, params))
            .collect();
        let compiled = compiled.into_iter().collect::<Option<Vec<_>>>()?;
        if !self.enter_def(d, name.span) {
            return None;
        }
        let inner_params: Params = formals
            .iter()
            .map(|f| f.text.clone())
            .zip(compiled)
            .collect();
        let saved_file = std::mem::replace(&mut self.current_file, self.defs[d].at.0);
        let result = if formals.is_empty() {
            // Checked where it is defined; expanding it again would only repeat that.
            self.muted(|cx| cx.pattern(body, caps, &inner_params))
        } else {
            self.expanded.insert(d);
            self.expansions.push((span, name.text.clone()));
            let r = self.pattern(body, caps, &inner_params);
            self.expansions.pop();
            r
        };
        self.current_file = saved_file;
        self.leave_def();
        result
    }

    fn resolve_ops(&mut self, callee: &[ast::Name]) -> Option<Vec<OpId>> {
        let mut ops = Vec::new();
        let mut ok = true;
        for n in callee {
            let found = registry().lookup(&n.text).filter(|op| {
                !crate::ops::is_custom(*op)
                    || self.custom_in_scope[self.current_file].contains(&n.text)
            });
            match found {
                Some(op) => ops.push(op),
                None if self.unresolved_is_explained(&n.text) => ok = false,
                None => {
                    let mut d = Diagnostic::error(E1301, format!("unknown operator `{}`", n.text))
                        .with_primary(n.span, "not a registered operator, pattern or parameter");
                    if let Some(s) = registry().suggest(&n.text) {
                        d = d.with_note(format!("help: did you mean `{s}`?"));
                    }
                    self.report(d);
                    ok = false;
                }
            }
        }
        ok.then_some(ops)
    }

    fn attr_constraints(
        &mut self,
        ops: &[OpId],
        callee: &[ast::Name],
        attrs: &[ast::ConfigEntry],
    ) -> Option<Vec<(String, crate::ir::AttrValue)>> {
        let mut out: Vec<(String, crate::ir::AttrValue)> = Vec::new();
        let mut keys: Vec<&ast::Name> = Vec::new();
        let mut ok = true;
        for a in attrs {
            if let Some(prev) = keys.iter().find(|k| k.text == a.key.text) {
                let d = Diagnostic::error(
                    E1304,
                    format!("attribute `{}` is constrained twice", a.key.text),
                )
                .with_primary(a.key.span, "constrained again here")
                .with_secondary(prev.span, "first constrained here");
                self.report(d);
                ok = false;
                continue;
            }
            keys.push(&a.key);
            let mut value = None;
            for (op, name) in ops.iter().zip(callee) {
                let def = registry().get(*op);
                let Some(field) = def.attr_field(&a.key.text) else {
                    let mut d = Diagnostic::error(
                        E1303,
                        format!("`{}` has no attribute `{}`", def.name, a.key.text),
                    )
                    .with_primary(a.key.span, "unknown attribute")
                    .with_secondary(name.span, format!("for this `{}`", def.name));
                    if let Some(s) =
                        crate::util::closest(&a.key.text, def.attrs.iter().map(|f| f.name))
                    {
                        d = d.with_note(format!("help: did you mean `{s}`?"));
                    }
                    self.report(d);
                    ok = false;
                    break;
                };
                let Some(raw) = super::target::attr_value_of(&a.value) else {
                    let d = Diagnostic::error(
                        E1304,
                        format!("`{}` is not an attribute value", &a.key.text),
                    )
                    .with_primary(a.value.span, "expected a number, string, boolean or list");
                    self.report(d);
                    ok = false;
                    break;
                };
                match field.ty.coerce(raw) {
                    Ok(v) => value = Some(v),
                    Err(msg) => {
                        let d = Diagnostic::error(
                            E1304,
                            format!("attribute `{}` of `{}`: {msg}", a.key.text, def.name),
                        )
                        .with_primary(a.value.span, format!("expected {}", field.ty.describe()));
                        self.report(d);
                        ok = false;
                        break;
                    }
                }
            }
            if let Some(v) = value {
                out.push((a.key.text.clone(), v));
            }
        }
        ok.then_some(out)
    }

    fn constraint(
        &mut self,
        inner: Pattern,
        c: &TypeConstraint,
        cspan: Span,
        span: Span,
    ) -> Option<Pattern> {
        match c {
            TypeConstraint::DType(names) => {
                let mut dtypes = Vec::new();
                for n in names {
                    match DType::parse(&n.text) {
                        Some(d) => dtypes.push(d),
                        None => {
                            let d = Diagnostic::error(E1308, format!("unknown dtype `{}`", n.text))
                                .with_primary(n.span, "not a dtype")
                                .with_note("dtypes are written like `float32`, `float16`, `int8`, `uint8`, `bool`");
                            self.report(d);
                            return None;
                        }
                    }
                }
                if let Some(prev) = dtype_of(&inner) {
                    let common: Vec<DType> = prev
                        .iter()
                        .copied()
                        .filter(|d| dtypes.contains(d))
                        .collect();
                    if common.is_empty() {
                        self.never_matches(span, cspan, "the dtype constraints exclude each other");
                        return None;
                    }
                }
                Some(Pattern::DType(Box::new(inner), dtypes))
            }
            TypeConstraint::Rank(r) => {
                let Ok(r) = u32::try_from(*r) else {
                    self.never_matches(span, cspan, "a rank is never negative");
                    return None;
                };
                if let Some(prev) = rank_of(&inner) {
                    if prev != r {
                        self.never_matches(
                            span,
                            cspan,
                            &format!("the value is also required to have rank {prev}"),
                        );
                        return None;
                    }
                }
                Some(Pattern::Rank(Box::new(inner), r))
            }
            TypeConstraint::Shape(dims) => {
                if dims.iter().any(|d| d.is_some_and(|v| v < 0)) {
                    self.never_matches(span, cspan, "extents are never negative");
                    return None;
                }
                if let Some(prev) = rank_of(&inner) {
                    if prev as usize != dims.len() {
                        self.never_matches(
                            span,
                            cspan,
                            &format!("the value is also required to have rank {prev}"),
                        );
                        return None;
                    }
                }
                Some(Pattern::Shape(Box::new(inner), dims.clone()))
            }
        }
    }

    fn never_matches(&mut self, span: Span, cspan: Span, why: &str) {
        let d = Diagnostic::error(E1305, format!("pattern can never match: {why}"))
            .with_primary(cspan, "contradictory constraint")
            .with_secondary(span, "in this pattern");
        self.report(d);
    }
}

fn dtype_of(p: &Pattern) -> Option<Vec<DType>> {
    match p {
        Pattern::DType(inner, d) => {
            let inner_d = dtype_of(inner);
            Some(match inner_d {
                Some(i) => d.iter().copied().filter(|x| i.contains(x)).collect(),
                None => d.clone(),
            })
        }
        Pattern::Capture(_, inner)
        | Pattern::Rank(inner, _)
        | Pattern::Shape(inner, _)
        | Pattern::Where(inner, _) => dtype_of(inner),
        _ => None,
    }
}

fn rank_of(p: &Pattern) -> Option<u32> {
    match p {
        Pattern::Rank(_, r) => Some(*r),
        Pattern::Shape(_, dims) => Some(dims.len() as u32),
        Pattern::Capture(_, inner) | Pattern::DType(inner, _) | Pattern::Where(inner, _) => {
            rank_of(inner)
        }
        _ => None,
    }
}
