//! Expressions: bindings and sequencing, infix operators, calls, primaries.

use super::{PResult, Parser};
use crate::diag::*;
use crate::frontend::relay::lexer::Tok;
use crate::frontend::relay::number::{parse_number, Number};
use crate::ir::*;
use crate::ops::{registry, Op};
use crate::source::Span;

/// Something waiting for the rest of its scope: `let %x = v;` or `a;`.
struct PendingLet {
    var: VarId,
    value: ExprId,
    start: Span,
}

/// A primary that may still turn out to be a callee.
enum Prim {
    Expr(ExprId),
    Op(OpId, Span),
}

impl<'s> Parser<'s> {
    /// A full expression: any number of `%N = e;`, `let` and `e;` items, then the result.
    pub(crate) fn expr(&mut self) -> PResult<ExprId> {
        self.enter()?;
        let locals_mark = self.locals.len();
        let mut pending: Vec<PendingLet> = Vec::new();
        let result = loop {
            match self.peek() {
                Tok::Graph if self.peek_at(1) == Tok::Eq => {
                    let t = self.bump();
                    self.bump();
                    let value = self.binop()?;
                    self.expect(Tok::Semi, "`;` after the binding")?;
                    let name = &self.text(t)[1..];
                    self.bind_graph(name, self.span(t), value);
                    continue;
                }
                Tok::Let => {
                    let start = self.here();
                    self.bump();
                    let t = self.expect(Tok::Local, "a variable such as `%x` after `let`")?;
                    let (ann, device) = self.binder_rest()?;
                    let var = self.new_var(t, ann, device);
                    self.expect(Tok::Eq, "`=` in the let binding")?;
                    let value = self.binop()?;
                    self.expect(Tok::Semi, "`;` after the let binding")?;
                    pending.push(PendingLet { var, value, start });
                    continue;
                }
                Tok::FreeVar => return Err(self.unsupported("free variables")),
                Tok::Match => return Err(self.unsupported("`match` expressions")),
                _ => {}
            }
            let start = self.here();
            let e = if self.peek() == Tok::LBrace {
                self.bump();
                let e = self.expr()?;
                self.expect(Tok::RBrace, "`}` to close the block")?;
                e
            } else {
                self.binop()?
            };
            if self.eat(Tok::Semi) {
                let var = self.new_named_var(String::new(), start, None, VirtualDevice::default());
                pending.push(PendingLet {
                    var,
                    value: e,
                    start,
                });
                continue;
            }
            break e;
        };
        let mut body = result;
        for p in pending.into_iter().rev() {
            let span = self.since(p.start);
            body = self.m.push(
                Expr::Let {
                    var: p.var,
                    value: p.value,
                    body,
                },
                span,
            );
        }
        self.locals.truncate(locals_mark);
        self.leave();
        Ok(body)
    }

    /// Infix expressions by precedence climbing (iterative, all operators left-associative).
    fn binop(&mut self) -> PResult<ExprId> {
        let mut operands = vec![self.call()?];
        let mut ops: Vec<(Op, u8, Span)> = Vec::new();
        while let Some((name, prec)) = infix(self.peek()) {
            let op_span = self.here();
            self.bump();
            while ops.last().is_some_and(|&(_, p, _)| p >= prec) {
                self.reduce_infix(&mut operands, &mut ops)?;
            }
            ops.push((name, prec, op_span));
            operands.push(self.call()?);
        }
        while !ops.is_empty() {
            self.reduce_infix(&mut operands, &mut ops)?;
        }
        Ok(operands.pop().unwrap_or(ExprId(0)))
    }

    fn reduce_infix(
        &mut self,
        operands: &mut Vec<ExprId>,
        ops: &mut Vec<(Op, u8, Span)>,
    ) -> PResult<()> {
        let (name, _, op_span) = ops.pop().ok_or(super::Fatal)?;
        let rhs = operands.pop().ok_or(super::Fatal)?;
        let lhs = operands.pop().ok_or(super::Fatal)?;
        let Some(op) = name.id() else {
            let d = Diagnostic::error(
                E0305,
                format!("infix operator needs `{name}`, which is not registered"),
            )
            .with_primary(op_span, "here");
            return Err(self.fatal(d));
        };
        let span = self.m.span(lhs).to(self.m.span(rhs));
        let def = registry().get(op);
        let e = self.m.push(
            Expr::Call {
                callee: Callee::Op(op),
                args: vec![lhs, rhs],
                attrs: Attrs::defaults(def.attrs),
            },
            span,
        );
        operands.push(e);
        Ok(())
    }

    /// A primary followed by any number of call argument lists and projections.
    fn call(&mut self) -> PResult<ExprId> {
        let start = self.here();
        let mut callee = self.primary()?;
        loop {
            match self.peek() {
                Tok::LParen => {
                    let e = self.call_args(callee, start)?;
                    callee = Prim::Expr(e);
                }
                Tok::Dot => {
                    let tuple = self.materialize(callee);
                    self.bump();
                    let t = self.expect(Tok::Number, "a field index after `.`")?;
                    let text = self.text(t);
                    let Ok(index) = text.parse::<u32>() else {
                        let d =
                            Diagnostic::error(E0201, format!("invalid projection index `{text}`"))
                                .with_primary(self.span(t), "expected a non-negative integer")
                                .with_note("a chain like `%t.0.1` must be written `(%t.0).1`");
                        return Err(self.fatal(d));
                    };
                    let span = self.since(start);
                    callee = Prim::Expr(self.m.push(Expr::Proj { tuple, index }, span));
                }
                _ => return Ok(self.materialize(callee)),
            }
        }
    }

    fn materialize(&mut self, p: Prim) -> ExprId {
        match p {
            Prim::Expr(e) => e,
            Prim::Op(op, span) => self.m.push(Expr::Op(op), span),
        }
    }

    /// `(args, key=value, ...)` after a callee.
    fn call_args(&mut self, callee: Prim, start: Span) -> PResult<ExprId> {
        self.bump();
        let mut args = Vec::new();
        let mut arg_spans = Vec::new();
        let mut attr_list = Vec::new();
        loop {
            if self.peek() == Tok::RParen {
                break;
            }
            if self.at_attr_start() {
                attr_list = self.attr_list(Tok::RParen)?;
                break;
            }
            let arg_start = self.here();
            args.push(self.expr()?);
            arg_spans.push(self.since(arg_start));
            if !self.eat(Tok::Comma) {
                break;
            }
        }
        self.expect(Tok::RParen, "`,` or `)` in the argument list")?;
        let span = self.since(start);
        let (callee, attrs) = match callee {
            Prim::Op(op, op_span) => {
                let def = registry().get(op);
                if args.len() != def.arity() {
                    let d = Diagnostic::error(
                        E0401,
                        format!(
                            "`{}` takes {} argument{}, but {} {} given",
                            def.name,
                            def.arity(),
                            if def.arity() == 1 { "" } else { "s" },
                            args.len(),
                            if args.len() == 1 { "was" } else { "were" }
                        ),
                    )
                    .with_primary(span, format!("expected {}", def.args.join(", ")))
                    .with_secondary(op_span, "operator called here");
                    self.report(d);
                }
                let attrs = self.op_attrs(def, attr_list);
                (Callee::Op(op), attrs)
            }
            Prim::Expr(e) => {
                if let Some(first) = attr_list.first() {
                    let d = Diagnostic::error(E0405, "only operator calls take attributes")
                        .with_primary(first.key_span, "attribute on a call of a non-operator")
                        .with_secondary(self.m.span(e), "this callee is not an operator");
                    self.report(d);
                }
                (Callee::Expr(e), Attrs::default())
            }
        };
        let call = self.m.push(
            Expr::Call {
                callee,
                args,
                attrs,
            },
            span,
        );
        self.record_use_spans(call, &arg_spans);
        Ok(call)
    }

    /// Remembers where each operand of `user` is written, where that is not its own span.
    fn record_use_spans(&mut self, user: ExprId, spans: &[Span]) {
        let operands = match self.m.expr(user) {
            Expr::Call { args, .. } => args.clone(),
            Expr::Tuple(fields) => fields.clone(),
            Expr::If {
                cond,
                then_branch,
                else_branch,
            } => vec![*cond, *then_branch, *else_branch],
            _ => return,
        };
        for (i, (&op, &s)) in operands.iter().zip(spans).enumerate() {
            if self.m.span(op) != s {
                self.m.use_spans.insert((user, i as u32), s);
            }
        }
    }

    fn primary(&mut self) -> PResult<Prim> {
        let t = self.tok();
        let span = self.span(t);
        match t.kind {
            Tok::Number => {
                self.bump();
                let c = match parse_number(self.text(t)) {
                    Ok(Number::Int(v, dtype)) => Constant::Scalar {
                        value: Scalar::Int(v),
                        dtype,
                    },
                    Ok(Number::Float(v, dtype)) => Constant::Scalar {
                        value: Scalar::Float(v),
                        dtype,
                    },
                    Err(e) => return Err(self.number_error(e, span)),
                };
                Ok(Prim::Expr(self.m.push(Expr::Const(c), span)))
            }
            Tok::True | Tok::False => {
                self.bump();
                let c = Constant::Scalar {
                    value: Scalar::Bool(t.kind == Tok::True),
                    dtype: DType::BOOL,
                };
                Ok(Prim::Expr(self.m.push(Expr::Const(c), span)))
            }
            Tok::Local => {
                self.bump();
                let name = &self.text(t)[1..];
                match self.lookup_local(name) {
                    Some(v) => Ok(Prim::Expr(self.m.var(v).expr)),
                    None => {
                        let mut d =
                            Diagnostic::error(E0301, format!("undefined variable `%{name}`"))
                                .with_primary(
                                    span,
                                    "not a parameter or let-bound variable in scope",
                                );
                        if let Some(s) = crate::util::closest(name, self.local_names()) {
                            d = d.with_note(format!(
                                "help: a variable with a similar name exists: `%{s}`"
                            ));
                        }
                        Err(self.fatal(d))
                    }
                }
            }
            Tok::Graph => {
                self.bump();
                let name = &self.text(t)[1..];
                match self.lookup_graph(name) {
                    Some(e) => Ok(Prim::Expr(e)),
                    None => {
                        let mut d = Diagnostic::error(
                            E0302,
                            format!("`%{name}` is used before it is bound"),
                        )
                        .with_primary(span, "no `%N = ...;` binding of this name precedes it");
                        let names = self.graph_names();
                        if let Some(s) = crate::util::closest(name, names.into_iter()) {
                            d = d.with_note(format!("help: `%{s}` is bound"));
                        }
                        Err(self.fatal(d))
                    }
                }
            }
            Tok::Global => {
                self.bump();
                let g = self.intern_global(&self.text(t)[1..], span);
                Ok(Prim::Expr(self.m.push(Expr::Global(g), span)))
            }
            Tok::Meta => {
                let index = self.pos();
                self.bump();
                self.meta_constant(t, index).map(Prim::Expr)
            }
            Tok::Ident => self.operator_name(),
            Tok::Fn => {
                self.bump();
                let f = self.function(span)?;
                let span = self.since(span);
                Ok(Prim::Expr(self.m.push(Expr::Func(f), span)))
            }
            Tok::If => self.if_expr().map(Prim::Expr),
            Tok::LParen => self.paren().map(Prim::Expr),
            Tok::Ref => Err(self.unsupported("references")),
            Tok::Match => Err(self.unsupported("`match` expressions")),
            _ => Err(self.unexpected("an expression")),
        }
    }

    /// A dotted operator name such as `nn.conv2d`.
    fn operator_name(&mut self) -> PResult<Prim> {
        let first = self.bump();
        let mut end = first.end;
        while self.peek() == Tok::Dot && self.peek_at(1) == Tok::Ident {
            self.bump();
            end = self.bump().end;
        }
        let span =
            crate::source::Span::new(self.span(first).file, first.start as usize, end as usize);
        let name = &self.src[first.start as usize..end as usize];
        match registry().lookup(name) {
            Some(op) => Ok(Prim::Op(op, span)),
            None => {
                let mut d = Diagnostic::error(E0305, format!("unknown operator `{name}`"))
                    .with_primary(span, "not a registered operator");
                if let Some(s) = registry().suggest(name) {
                    d = d.with_note(format!("help: did you mean `{s}`?"));
                }
                Err(self.fatal(d))
            }
        }
    }

    fn if_expr(&mut self) -> PResult<ExprId> {
        let start = self.here();
        self.bump();
        self.expect(Tok::LParen, "`(` after `if`")?;
        let s0 = self.here();
        let cond = self.expr()?;
        let cond_span = self.since(s0);
        self.expect(Tok::RParen, "`)` after the condition")?;
        self.expect(Tok::LBrace, "`{` to start the true branch")?;
        let s1 = self.here();
        let then_branch = self.expr()?;
        let then_span = self.since(s1);
        self.expect(Tok::RBrace, "`}` to end the true branch")?;
        self.expect(Tok::Else, "`else`")?;
        self.expect(Tok::LBrace, "`{` to start the false branch")?;
        let s2 = self.here();
        let else_branch = self.expr()?;
        let else_span = self.since(s2);
        self.expect(Tok::RBrace, "`}` to end the false branch")?;
        let span = self.since(start);
        let e = self.m.push(
            Expr::If {
                cond,
                then_branch,
                else_branch,
            },
            span,
        );
        self.record_use_spans(e, &[cond_span, then_span, else_span]);
        Ok(e)
    }

    /// `()`, `(e)`, `(e,)`, `(a, b, ...)`.
    fn paren(&mut self) -> PResult<ExprId> {
        let start = self.here();
        self.bump();
        if self.eat(Tok::RParen) {
            let span = self.since(start);
            return Ok(self.m.push(Expr::Tuple(Vec::new()), span));
        }
        let s0 = self.here();
        let first = self.expr()?;
        if self.eat(Tok::RParen) {
            return Ok(first);
        }
        let mut field_spans = vec![self.since(s0)];
        self.expect(Tok::Comma, "`,` or `)`")?;
        let mut fields = vec![first];
        while self.peek() != Tok::RParen {
            let s = self.here();
            fields.push(self.expr()?);
            field_spans.push(self.since(s));
            if !self.eat(Tok::Comma) {
                break;
            }
        }
        self.expect(Tok::RParen, "`,` or `)` in the tuple")?;
        let span = self.since(start);
        let e = self.m.push(Expr::Tuple(fields), span);
        self.record_use_spans(e, &field_spans);
        Ok(e)
    }

    /// `meta[relay.Constant][i]` in expression position, typed by the metadata section or by the
    /// `/* ty=... */` comment that follows it.
    fn meta_constant(
        &mut self,
        t: crate::frontend::relay::lexer::Token,
        tok_index: usize,
    ) -> PResult<ExprId> {
        let span = self.span(t);
        let (key, index) = split_meta(self.text(t));
        let Some(index) = index else {
            let d = Diagnostic::error(E0107, "meta reference index is too large")
                .with_primary(span, "index does not fit in 32 bits");
            return Err(self.fatal(d));
        };
        if key != "relay.Constant" {
            let d = Diagnostic::error(E0604, format!("`meta[{key}][{index}]` is not a constant"))
                .with_primary(
                    span,
                    "only `meta[relay.Constant][i]` can be used as an expression",
                );
            return Err(self.fatal(d));
        }
        let had_comment = self.type_comment_for(tok_index).is_some();
        let comment = self.type_comment_for(tok_index).and_then(|(s, e)| {
            let cspan = Span::new(self.file, s as usize, e as usize);
            match self.with_subtext(s + 2, e - 2, |p| {
                let ty_tok = p.expect(Tok::Ident, "`ty`")?;
                if p.text(ty_tok) != "ty" {
                    return Err(p.unexpected("`ty`"));
                }
                p.expect(Tok::Eq, "`=`")?;
                let ty = p.ty()?;
                // Anything after the type (such as `span=...`) is informational.
                while p.peek() != Tok::Eof {
                    p.bump();
                }
                Ok(ty)
            }) {
                Some(Type::Tensor(tt)) => Some((tt, cspan)),
                Some(other) => {
                    let d = Diagnostic::error(
                        E0206,
                        format!("constants are tensors, but the comment says `{other}`"),
                    )
                    .with_primary(cspan, "expected a tensor type");
                    self.report(d);
                    None
                }
                None => {
                    let d = Diagnostic::error(E0206, "malformed type comment")
                        .with_primary(cspan, "expected `/* ty=Tensor[(d0, d1, ...), dtype] */`");
                    self.report(d);
                    None
                }
            }
        });
        let key_index = (key.to_string(), index);
        if let Some((e, prev_comment)) = self.meta_consts.get(&key_index).cloned() {
            if let (Some((new_ty, new_span)), Some((old_ty, old_span))) = (&comment, &prev_comment)
            {
                if new_ty != old_ty {
                    let d = Diagnostic::error(
                        E0605,
                        format!("`meta[{key}][{index}]` is given two different types"),
                    )
                    .with_primary(*new_span, format!("says `{new_ty}`"))
                    .with_secondary(*old_span, format!("earlier said `{old_ty}`"));
                    self.report(d);
                }
            }
            return Ok(e);
        }
        // An entry without data or type (how constants without data are written) leaves the
        // type to the comment.
        let mut untyped_entry = false;
        let table_ty = match self.m.meta.get(key, index) {
            Some(MetaObject::Constant(tt)) => Some(tt.clone()),
            Some(MetaObject::UntypedConstant) => {
                untyped_entry = true;
                None
            }
            Some(_) => {
                let d = Diagnostic::error(
                    E0604,
                    format!("`meta[{key}][{index}]` is not a tensor constant"),
                )
                .with_primary(
                    span,
                    "the metadata section holds another kind of object here",
                );
                return Err(self.fatal(d));
            }
            // A section without constants leaves them to the caller's table, as TVM's parser
            // does (it appends the caller's entries per key): they are typed by their comments.
            None if self.m.meta.objects.contains_key(key) || self.metadata_failed => {
                if self.metadata_failed {
                    // The metadata section itself was reported; do not pile on.
                    return Ok(self.m.push(
                        Expr::Const(Constant::Meta {
                            key: key.to_string(),
                            index,
                            ty: comment
                                .map(|c| c.0)
                                .unwrap_or_else(|| TensorType::scalar(DType::F32)),
                        }),
                        span,
                    ));
                }
                let d = Diagnostic::error(
                    E0602,
                    format!("`meta[{key}][{index}]` is not in the metadata section"),
                )
                .with_primary(span, "unresolved meta reference");
                self.report(d);
                None
            }
            None => None,
        };
        let ty = match (table_ty, &comment) {
            (Some(t), Some((c, cspan))) => {
                if &t != c {
                    let d = Diagnostic::error(E0605, format!("type comment disagrees with the metadata section for `meta[{key}][{index}]`"))
                        .with_primary(*cspan, format!("says `{c}`"))
                        .with_secondary(span, format!("the metadata section says `{t}`"));
                    self.report(d);
                }
                t
            }
            (Some(t), None) => t,
            (None, Some((c, _))) => c.clone(),
            (None, None) => {
                if (untyped_entry || !self.m.meta.objects.contains_key(key)) && !had_comment {
                    let d = Diagnostic::error(E0603, format!("the type of `meta[{key}][{index}]` is unknown"))
                        .with_primary(span, "constant without a type")
                        .with_note("add a comment such as `/* ty=Tensor[(8, 16), float32] */` right after the reference, or the constant to the `#[metadata]` section");
                    self.report(d);
                }
                TensorType::scalar(DType::F32)
            }
        };
        let e = self.m.push(
            Expr::Const(Constant::Meta {
                key: key.to_string(),
                index,
                ty,
            }),
            span,
        );
        self.meta_consts.insert(key_index, (e, comment));
        Ok(e)
    }

    pub(crate) fn number_error(
        &mut self,
        e: crate::frontend::relay::number::NumberError,
        span: Span,
    ) -> super::Fatal {
        let mut d = Diagnostic::error(e.code, e.message).with_primary(span, "invalid literal");
        if let Some(h) = e.help {
            d = d.with_note(format!("help: {h}"));
        }
        self.fatal(d)
    }
}

/// Splits `meta[key][index]` into its key and index (`None` if the index overflows).
pub(crate) fn split_meta(text: &str) -> (&str, Option<u32>) {
    let inner = text.strip_prefix("meta[").unwrap_or(text);
    let (key, rest) = inner.split_once("][").unwrap_or((inner, "0]"));
    (key, rest.trim_end_matches(']').parse().ok())
}

/// The operator and precedence of an infix token.
fn infix(t: Tok) -> Option<(Op, u8)> {
    Some(match t {
        Tok::Star => (Op::Multiply, 12),
        Tok::Slash => (Op::Divide, 12),
        Tok::Plus => (Op::Add, 10),
        Tok::Minus => (Op::Subtract, 10),
        Tok::Lt => (Op::Less, 8),
        Tok::Le => (Op::LessEqual, 8),
        Tok::Gt => (Op::Greater, 8),
        Tok::Ge => (Op::GreaterEqual, 8),
        Tok::EqEq => (Op::Equal, 7),
        Tok::NotEq => (Op::NotEqual, 7),
        _ => return None,
    })
}
