//! Typing and compiling predicate expressions.
//!
//! Types: booleans, integers, floats, strings, dtypes, lists and tensors (captures). A capture
//! bound to an operator call also exposes that operator's attributes, checked against its schema.
//! Named predicates are inlined with their parameters replaced by the arguments.

use super::names::{Checker, DefKind};
use super::pattern::Captures;
use crate::diag::*;
use crate::ir::{AttrType, DType, OpId};
use crate::ops::registry;
use crate::rules::dsl::ast::{self, BinOp, ExprKind, UnOp};
use crate::rules::ruletree::{Builtin, Lit, Pred, Prop};
use std::fmt;

/// The type of a predicate expression.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum PType {
    Bool,
    Int,
    Float,
    Str,
    DType,
    /// A tensor; with the operators it is a call of, when known.
    Tensor(Option<Vec<OpId>>),
    List(Box<PType>),
    /// `[]`, a list of anything.
    EmptyList,
}

impl fmt::Display for PType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PType::Bool => f.write_str("bool"),
            PType::Int => f.write_str("int"),
            PType::Float => f.write_str("float"),
            PType::Str => f.write_str("string"),
            PType::DType => f.write_str("dtype"),
            PType::Tensor(_) => f.write_str("tensor"),
            PType::List(t) => write!(f, "list of {t}"),
            PType::EmptyList => f.write_str("empty list"),
        }
    }
}

impl PType {
    /// The type's name with its article: "an int", "a list of int".
    fn with_article(&self) -> String {
        let name = self.to_string();
        let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        format!("{article} {name}")
    }

    fn is_num(&self) -> bool {
        matches!(self, PType::Int | PType::Float)
    }

    /// Whether values of the two types can be compared with `==`.
    fn comparable(&self, other: &PType) -> bool {
        match (self, other) {
            (a, b) if a.is_num() && b.is_num() => true,
            (PType::List(a), PType::List(b)) => a.comparable(b),
            (PType::List(_), PType::EmptyList) | (PType::EmptyList, PType::List(_)) => true,
            (PType::Tensor(_), PType::Tensor(_)) => true,
            (a, b) => a == b,
        }
    }
}

/// The predicate type of an attribute of the given declared type (`None`: not usable).
fn attr_ptype(t: AttrType) -> Option<PType> {
    Some(match t {
        AttrType::Int | AttrType::OptInt => PType::Int,
        AttrType::Float => PType::Float,
        AttrType::Bool => PType::Bool,
        AttrType::Str => PType::Str,
        AttrType::DType => PType::DType,
        AttrType::Ints | AttrType::OptInts | AttrType::IntOrInts => {
            PType::List(Box::new(PType::Int))
        }
        AttrType::IntsNested => PType::List(Box::new(PType::List(Box::new(PType::Int)))),
        AttrType::Floats => PType::List(Box::new(PType::Float)),
        AttrType::Device | AttrType::Any => return None,
    })
}

/// What a capture name stands for inside a predicate: a pattern capture, or an argument of an
/// inlined named predicate.
pub(crate) enum Env<'a> {
    Pattern(&'a Captures),
    Inlined(&'a [(String, Pred, PType)]),
}

impl Checker<'_> {
    /// Compiles a predicate that must be boolean.
    pub fn bool_pred(&mut self, e: &ast::Expr, caps: &Captures) -> Option<Pred> {
        let (p, t) = self.pred(e, &Env::Pattern(caps))?;
        if t != PType::Bool {
            let d = Diagnostic::error(
                E1401,
                format!(
                    "a predicate must be a boolean, this is {}",
                    t.with_article()
                ),
            )
            .with_primary(e.span, format!("has type {t}"));
            self.report(d);
            return None;
        }
        Some(p)
    }

    /// The operators a predicate parameter is declared to be a call of (`None` if untyped).
    fn param_ops(&mut self, ops: &[ast::Name]) -> Option<Option<Vec<OpId>>> {
        if ops.is_empty() {
            return Some(None);
        }
        let mut out = Vec::new();
        for n in ops {
            match registry().lookup(&n.text) {
                Some(op) => out.push(op),
                None => {
                    let mut d = Diagnostic::error(E1301, format!("unknown operator `{}`", n.text))
                        .with_primary(n.span, "not a registered operator");
                    if let Some(s) = registry().suggest(&n.text) {
                        d = d.with_note(format!("help: did you mean `{s}`?"));
                    }
                    self.report(d);
                    return None;
                }
            }
        }
        Some(Some(out))
    }

    /// Checks a named predicate on its own.
    pub fn check_predicate_def(
        &mut self,
        params: &[(ast::Name, Vec<ast::Name>)],
        body: &ast::Expr,
    ) {
        let mut args: Vec<(String, Pred, PType)> = Vec::new();
        for (i, (p, ops)) in params.iter().enumerate() {
            if let Some((prev, _)) = params[..i].iter().find(|(q, _)| q.text == p.text) {
                let d =
                    Diagnostic::error(E1202, format!("parameter `{}` is declared twice", p.text))
                        .with_primary(p.span, "declared again here")
                        .with_secondary(prev.span, "first declared here");
                self.report(d);
                return;
            }
            let Some(ops) = self.param_ops(ops) else {
                return;
            };
            args.push((p.text.clone(), Pred::Capture(i as u32), PType::Tensor(ops)));
        }
        if let Some((_, t)) = self.pred(body, &Env::Inlined(&args)) {
            if t != PType::Bool {
                let d = Diagnostic::error(
                    E1401,
                    format!(
                        "a predicate must be a boolean, this is {}",
                        t.with_article()
                    ),
                )
                .with_primary(body.span, format!("has type {t}"));
                self.report(d);
            }
        }
    }

    fn type_error(
        &mut self,
        span: crate::source::Span,
        msg: String,
        label: String,
    ) -> Option<(Pred, PType)> {
        self.report(Diagnostic::error(E1401, msg).with_primary(span, label));
        None
    }

    pub fn pred(&mut self, e: &ast::Expr, env: &Env<'_>) -> Option<(Pred, PType)> {
        match &e.kind {
            ExprKind::Int(v) => Some((Pred::Lit(Lit::Int(*v)), PType::Int)),
            ExprKind::Float(v) => Some((Pred::Lit(Lit::Float(*v)), PType::Float)),
            ExprKind::Str(s) => Some((Pred::Lit(Lit::Str(s.clone())), PType::Str)),
            ExprKind::Bool(b) => Some((Pred::Lit(Lit::Bool(*b)), PType::Bool)),
            ExprKind::Capture(n) => self.capture(n, env),
            ExprKind::Ident(n) => match DType::parse(&n.text) {
                Some(d) => Some((Pred::Lit(Lit::DType(d)), PType::DType)),
                None => {
                    let what = if Builtin::ALL.iter().any(|(_, b)| *b == n.text)
                        || self.is_predicate(&n.text)
                    {
                        "a value (functions and predicates must be called)"
                    } else {
                        "a dtype, a capture or a literal"
                    };
                    let d = Diagnostic::error(E1402, format!("`{}` is not a value here", n.text))
                        .with_primary(n.span, format!("expected {what}"));
                    self.report(d);
                    None
                }
            },
            ExprKind::List(items) => self.list(items, env, e.span),
            ExprKind::Field(base, field) => self.field(base, field, env),
            ExprKind::Index(base, index) => {
                if let ExprKind::Field(call, f) = &base.kind {
                    if f.text == "args" {
                        return self.arg_access(call, f, index, env);
                    }
                }
                let (b, bt) = self.pred(base, env)?;
                let (i, it) = self.pred(index, env)?;
                if it != PType::Int {
                    return self.type_error(
                        index.span,
                        format!("an index must be an int, this is {}", it.with_article()),
                        format!("has type {it}"),
                    );
                }
                match bt {
                    PType::List(t) => Some((Pred::Index(Box::new(b), Box::new(i)), *t)),
                    other => self.type_error(
                        base.span,
                        format!(
                            "only lists can be indexed, this is {}",
                            other.with_article()
                        ),
                        format!("has type {other}"),
                    ),
                }
            }
            ExprKind::Call(f, args) => self.call(f, args, env, e.span),
            ExprKind::Unary(op, x) => {
                let (p, t) = self.pred(x, env)?;
                match (op, &t) {
                    (UnOp::Not, PType::Bool) => Some((Pred::Unary(*op, Box::new(p)), t)),
                    (UnOp::Neg, PType::Int | PType::Float) => {
                        Some((Pred::Unary(*op, Box::new(p)), t))
                    }
                    (UnOp::Not, _) => self.type_error(
                        x.span,
                        format!("`!` needs a bool, this is {}", t.with_article()),
                        format!("has type {t}"),
                    ),
                    (UnOp::Neg, _) => self.type_error(
                        x.span,
                        format!("`-` needs a number, this is {}", t.with_article()),
                        format!("has type {t}"),
                    ),
                }
            }
            ExprKind::Binary(op, a, b) => self.binary(*op, a, b, env, e.span),
        }
    }

    fn is_predicate(&self, name: &str) -> bool {
        self.scopes
            .get(self.current_file)
            .and_then(|s| s.get(name))
            .is_some_and(|&d| self.defs[d].kind == DefKind::Predicate)
    }

    fn capture(&mut self, n: &ast::Name, env: &Env<'_>) -> Option<(Pred, PType)> {
        match env {
            Env::Pattern(caps) => match caps.find(&n.text) {
                Some(id) if caps.partial[id as usize] => {
                    let d = Diagnostic::error(E1306, format!("capture `{}` is bound only in some alternatives", n.text))
                        .with_primary(n.span, "may be unbound here")
                        .with_secondary(caps.list[id as usize].2, "bound here, in one alternative")
                        .with_note("bind it in every alternative, or move the condition into the alternative that binds it");
                    self.report(d);
                    None
                }
                Some(id) => {
                    let ops = caps.list[id as usize].1.clone();
                    Some((Pred::Capture(id), PType::Tensor(ops)))
                }
                None => {
                    self.unbound_capture(n, caps.list.iter().map(|(n, _, _)| n.as_str()).collect())
                }
            },
            Env::Inlined(args) => match args.iter().find(|(name, _, _)| *name == n.text) {
                Some((_, p, t)) => Some((p.clone(), t.clone())),
                None => self.unbound_capture(n, args.iter().map(|(n, _, _)| n.as_str()).collect()),
            },
        }
    }

    fn unbound_capture(&mut self, n: &ast::Name, known: Vec<&str>) -> Option<(Pred, PType)> {
        let mut d = Diagnostic::error(E1306, format!("capture `{}` is not bound", n.text))
            .with_primary(n.span, "not bound by the pattern");
        if let Some(s) = crate::util::closest(&n.text, known.iter().copied()) {
            d = d.with_note(format!("help: did you mean `{s}`?"));
        } else if !known.is_empty() {
            d = d.with_note(format!("bound captures: {}", known.join(", ")));
        }
        self.report(d);
        None
    }

    fn list(
        &mut self,
        items: &[ast::Expr],
        env: &Env<'_>,
        span: crate::source::Span,
    ) -> Option<(Pred, PType)> {
        let mut preds = Vec::new();
        let mut elem: Option<PType> = None;
        for it in items {
            let (p, t) = self.pred(it, env)?;
            match &elem {
                None => elem = Some(t),
                Some(e) if e.comparable(&t) => {
                    if *e == PType::Int && t == PType::Float {
                        elem = Some(PType::Float);
                    }
                }
                Some(e) => {
                    let e = e.clone();
                    return self.type_error(
                        it.span,
                        format!("list elements must have one type: {e} and {t}"),
                        format!("has type {t}"),
                    );
                }
            }
            preds.push(p);
        }
        let _ = span;
        let t = elem.map_or(PType::EmptyList, |e| PType::List(Box::new(e)));
        Some((Pred::List(preds), t))
    }

    fn field(
        &mut self,
        base: &ast::Expr,
        field: &ast::Name,
        env: &Env<'_>,
    ) -> Option<(Pred, PType)> {
        let (b, bt) = self.pred(base, env)?;
        let PType::Tensor(ops) = bt else {
            return self.type_error(
                field.span,
                format!(
                    "`.{}` needs a tensor, this is {}",
                    field.text,
                    bt.with_article()
                ),
                format!("has type {bt}"),
            );
        };
        let prop = match field.text.as_str() {
            "dtype" => Some((Prop::DType, PType::DType)),
            "shape" => Some((Prop::Shape, PType::List(Box::new(PType::Int)))),
            "rank" => Some((Prop::Rank, PType::Int)),
            "is_const" => Some((Prop::IsConst, PType::Bool)),
            "value" => Some((Prop::Value, PType::Float)),
            _ => None,
        };
        if let Some((p, t)) = prop {
            return Some((Pred::Prop(Box::new(b), p), t));
        }
        if field.text == "args" {
            let d = Diagnostic::error(E1402, "`.args` must be indexed: write `.args[0]`")
                .with_primary(field.span, "arguments are reached one at a time");
            self.report(d);
            return None;
        }
        let Some(ops) = ops else {
            let d = Diagnostic::error(E1403, format!("`.{}` is not a property of a tensor", field.text))
                .with_primary(field.span, "unknown field")
                .with_note("tensors have `dtype`, `shape`, `rank`, `is_const` and `value`; operator attributes need a capture bound to a call, as in `nn.conv2d(_, _) as $conv`");
            self.report(d);
            return None;
        };
        let mut ty: Option<(AttrType, &'static str)> = None;
        for op in &ops {
            let def = registry().get(*op);
            match def.attr_field(&field.text) {
                Some(f) => match ty {
                    Some((t, other)) if attr_ptype(t) != attr_ptype(f.ty) => {
                        let d = Diagnostic::error(
                            E1401,
                            format!(
                                "attribute `{}` has different types for `{other}` and `{}`",
                                field.text, def.name
                            ),
                        )
                        .with_primary(field.span, "the operators disagree on this attribute's type")
                        .with_note("split the alternatives, or compare the attribute only where the operator is known");
                        self.report(d);
                        return None;
                    }
                    _ => ty = Some((f.ty, def.name)),
                },
                None => {
                    let mut d = Diagnostic::error(
                        E1303,
                        format!("`{}` has no attribute `{}`", def.name, field.text),
                    )
                    .with_primary(field.span, "unknown attribute");
                    if let Some(s) =
                        crate::util::closest(&field.text, def.attrs.iter().map(|f| f.name))
                    {
                        d = d.with_note(format!("help: did you mean `{s}`?"));
                    }
                    self.report(d);
                    return None;
                }
            }
        }
        let t = match attr_ptype(ty?.0) {
            Some(t) => t,
            None => {
                let d = Diagnostic::error(
                    E1402,
                    format!("attribute `{}` cannot be used in predicates", field.text),
                )
                .with_primary(field.span, "not a number, string, boolean or list");
                self.report(d);
                return None;
            }
        };
        Some((Pred::Attr(Box::new(b), field.text.clone()), t))
    }

    fn call(
        &mut self,
        f: &ast::Expr,
        args: &[ast::Expr],
        env: &Env<'_>,
        span: crate::source::Span,
    ) -> Option<(Pred, PType)> {
        // `$x.args[i]` is written as an index of a field; `args(i)` is not a thing. Calls are of
        // built-ins and named predicates only.
        let ExprKind::Ident(name) = &f.kind else {
            return self.type_error(
                f.span,
                "only functions and predicates can be called".into(),
                "not callable".into(),
            );
        };
        if let Some(&(b, _)) = Builtin::ALL.iter().find(|(_, n)| *n == name.text) {
            return self.builtin(b, name, args, env, span);
        }
        let d = self.lookup_kind(name, DefKind::Predicate)?;
        let item = self.item(self.defs[d].at);
        let ast::ItemKind::Predicate { params, body, .. } = &item.kind else {
            return None;
        };
        if params.len() != args.len() {
            let diag = Diagnostic::error(
                E1401,
                format!(
                    "predicate `{}` takes {} argument(s), {} given",
                    name.text,
                    params.len(),
                    args.len()
                ),
            )
            .with_primary(span, "wrong number of arguments")
            .with_secondary(self.defs[d].name_span, "defined here");
            self.report(diag);
            return None;
        }
        let mut bound = Vec::new();
        for ((p, ops), a) in params.iter().zip(args) {
            let (ap, at) = self.pred(a, env)?;
            let PType::Tensor(arg_ops) = &at else {
                return self.type_error(
                    a.span,
                    format!(
                        "predicate arguments are tensors, this is {}",
                        at.with_article()
                    ),
                    format!("has type {at}"),
                );
            };
            let declared = self.muted(|cx| cx.param_ops(ops))?;
            if let Some(want) = &declared {
                let fits = arg_ops
                    .as_ref()
                    .is_some_and(|have| have.iter().all(|o| want.contains(o)));
                if !fits {
                    let names: Vec<&str> = want.iter().map(|o| registry().get(*o).name).collect();
                    let d = Diagnostic::error(
                        E1401,
                        format!("`{}` must be a call of {}", p.text, names.join(" or ")),
                    )
                    .with_primary(a.span, "not known to be such a call")
                    .with_secondary(p.span, "parameter declared here")
                    .with_note(
                        "bind the argument to a call pattern, as in `nn.conv2d(_, _) as $conv`",
                    );
                    self.report(d);
                    return None;
                }
            }
            let t = PType::Tensor(declared.or_else(|| arg_ops.clone()));
            bound.push((p.text.clone(), ap, t));
        }
        if !self.enter_def(d, name.span) {
            return None;
        }
        let saved_file = std::mem::replace(&mut self.current_file, self.defs[d].at.0);
        let result = self.muted(|cx| cx.pred(body, &Env::Inlined(&bound)));
        self.current_file = saved_file;
        self.leave_def();
        let (p, t) = result?;
        Some((p, t))
    }

    fn builtin(
        &mut self,
        b: Builtin,
        name: &ast::Name,
        args: &[ast::Expr],
        env: &Env<'_>,
        span: crate::source::Span,
    ) -> Option<(Pred, PType)> {
        if args.len() != 1 {
            let d = Diagnostic::error(
                E1401,
                format!(
                    "`{}` takes one list argument, {} given",
                    name.text,
                    args.len()
                ),
            )
            .with_primary(span, "wrong number of arguments");
            self.report(d);
            return None;
        }
        let (p, t) = self.pred(&args[0], env)?;
        let elem = match &t {
            PType::List(e) => (**e).clone(),
            PType::EmptyList => PType::Int,
            other => {
                return self.type_error(
                    args[0].span,
                    format!(
                        "`{}` needs a list, this is {}",
                        name.text,
                        other.with_article()
                    ),
                    format!("has type {other}"),
                )
            }
        };
        let out = match b {
            Builtin::Len => PType::Int,
            Builtin::All | Builtin::Any => {
                if elem != PType::Bool {
                    return self.type_error(
                        args[0].span,
                        format!(
                            "`{}` needs a list of bool, this is a list of {elem}",
                            name.text
                        ),
                        "wrong element type".into(),
                    );
                }
                PType::Bool
            }
            _ => {
                if !elem.is_num() {
                    return self.type_error(
                        args[0].span,
                        format!(
                            "`{}` needs a list of numbers, this is a list of {elem}",
                            name.text
                        ),
                        "wrong element type".into(),
                    );
                }
                elem
            }
        };
        Some((Pred::Call(b, vec![p]), out))
    }

    fn binary(
        &mut self,
        op: BinOp,
        a: &ast::Expr,
        b: &ast::Expr,
        env: &Env<'_>,
        span: crate::source::Span,
    ) -> Option<(Pred, PType)> {
        // `$x.args[i]`: an index of the pseudo-field `args`.
        let (pa, ta) = self.pred(a, env)?;
        let (pb, tb) = self.pred(b, env)?;
        let bad = |cx: &mut Self, what: &str| {
            cx.type_error(
                span,
                format!("`{}` {what}, found {ta} and {tb}", op.symbol()),
                format!("{ta} {} {tb}", op.symbol()),
            )
        };
        let t = match op {
            BinOp::And | BinOp::Or => {
                if ta != PType::Bool || tb != PType::Bool {
                    return bad(self, "needs two bools");
                }
                PType::Bool
            }
            BinOp::Eq | BinOp::Ne => {
                if !ta.comparable(&tb) {
                    return bad(self, "compares values of one type");
                }
                PType::Bool
            }
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                if !(ta.is_num() && tb.is_num()) {
                    return bad(self, "compares numbers");
                }
                PType::Bool
            }
            BinOp::In => match &tb {
                PType::List(e) if e.comparable(&ta) => PType::Bool,
                PType::EmptyList => PType::Bool,
                _ => return bad(self, "needs a value and a list of values of its type"),
            },
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => {
                if !(ta.is_num() && tb.is_num()) {
                    return bad(self, "needs two numbers");
                }
                if ta == PType::Float || tb == PType::Float {
                    PType::Float
                } else {
                    PType::Int
                }
            }
        };
        Some((Pred::Binary(op, Box::new(pa), Box::new(pb)), t))
    }

    /// `$x.args[i]`: argument `i` of the call bound to `$x`.
    fn arg_access(
        &mut self,
        call: &ast::Expr,
        field: &ast::Name,
        index: &ast::Expr,
        env: &Env<'_>,
    ) -> Option<(Pred, PType)> {
        let (c, ct) = self.pred(call, env)?;
        let (i, it) = self.pred(index, env)?;
        if it != PType::Int {
            return self.type_error(
                index.span,
                format!("an index must be an int, this is {}", it.with_article()),
                format!("has type {it}"),
            );
        }
        match ct {
            PType::Tensor(Some(_)) => {
                Some((Pred::Arg(Box::new(c), Box::new(i)), PType::Tensor(None)))
            }
            _ => {
                let d =
                    Diagnostic::error(E1403, "`.args` needs a capture bound to an operator call")
                        .with_primary(field.span, "not a call")
                        .with_note(
                            "bind the call, as in `nn.dense(_, _) as $d`, then write `$d.args[1]`",
                        );
                self.report(d);
                None
            }
        }
    }
}
