//! Type inference for a parsed [`Module`].
//!
//! Fills [`Module::types`] with the type of every expression, or reports why it cannot, and gives
//! every definition written without a return type its inferred one, as TVM's type inference does
//! (so printed definitions carry `-> T`, which TVM needs to type a call of a global function
//! before it has checked that function). Operator
//! calls are typed by the operator's type relation ([`crate::ops`]); function calls check their
//! arguments against the callee's parameter types; annotations are checked against inferred types.
//!
//! The traversal is demand-driven with an explicit stack, so arbitrarily long binding chains never
//! exhaust the call stack. A variable's type comes from its annotation, from its let-bound value,
//! or, for an unannotated parameter of a `fn` literal, from the first call of that literal. An
//! expression whose operands failed to type is left untyped without a second diagnostic.

use crate::diag::*;
use crate::ir::*;
use crate::ops::{registry, RelCall};
use std::collections::HashMap;

/// Maximum nesting of an inferred type (the parser limits written types the same way).
pub const MAX_TYPE_DEPTH: usize = 256;

/// Infers the types of all expressions of `m`. On success every expression has a type.
pub fn check(m: &mut Module) -> Result<(), Diagnostics> {
    let mut cx = Checker::new(m);
    cx.run();
    let Checker { types, diags, .. } = cx;
    m.types = types;
    if diags.has_errors() {
        return Err(diags);
    }
    for i in 0..m.defs.len() {
        let f = m.defs[i].1;
        if m.func(f).ret_type.is_some() {
            continue;
        }
        let inferred = m.ty(m.func(f).body).filter(|t| !t.is_incomplete()).cloned();
        m.funcs[f.index()].ret_type = inferred;
    }
    Ok(())
}

struct Checker<'m> {
    m: &'m Module,
    types: Vec<Option<Type>>,
    diags: Diagnostics,
    /// For let-bound variables: the bound value.
    let_value: HashMap<VarId, ExprId>,
    /// For parameters: the function and position.
    param_of: HashMap<VarId, (FuncId, usize)>,
    /// For `fn` literals: the first call of the literal, used to type unannotated parameters.
    first_call: HashMap<FuncId, ExprId>,
}

impl<'m> Checker<'m> {
    fn new(m: &'m Module) -> Checker<'m> {
        // Let nodes come after their bodies in the arena, so collect the bindings first.
        let let_value: HashMap<VarId, ExprId> = m
            .exprs
            .iter()
            .filter_map(|e| match e {
                Expr::Let { var, value, .. } => Some((*var, *value)),
                _ => None,
            })
            .collect();
        // Only calls that are part of the program (reachable from a definition) may type an
        // unannotated parameter: dead code is not printed, so it must not matter.
        let mut reachable = vec![false; m.exprs.len()];
        let mut stack: Vec<ExprId> = m.defs.iter().map(|(_, f)| m.func(*f).body).collect();
        while let Some(x) = stack.pop() {
            if std::mem::replace(&mut reachable[x.index()], true) {
                continue;
            }
            m.for_each_operand(x, |c| stack.push(c));
        }
        let mut first_call = HashMap::new();
        for (i, e) in m.exprs.iter().enumerate() {
            if !reachable[i] {
                continue;
            }
            if let Expr::Call {
                callee: Callee::Expr(c),
                ..
            } = e
            {
                let target = match m.expr(*c) {
                    Expr::Func(f) => Some(*f),
                    Expr::Var(v) => match let_value.get(v).map(|&x| m.expr(x)) {
                        Some(Expr::Func(f)) => Some(*f),
                        _ => None,
                    },
                    _ => None,
                };
                if let Some(f) = target {
                    first_call.entry(f).or_insert(ExprId(i as u32));
                }
            }
        }
        let mut param_of = HashMap::new();
        for (i, f) in m.funcs.iter().enumerate() {
            for (k, p) in f.params.iter().enumerate() {
                param_of.insert(*p, (FuncId(i as u32), k));
            }
        }
        Checker {
            m,
            types: vec![None; m.exprs.len()],
            diags: Diagnostics::new(),
            let_value,
            param_of,
            first_call,
        }
    }

    fn run(&mut self) {
        let n = self.m.exprs.len();
        let mut state = vec![0u8; n];
        let mut stack: Vec<(ExprId, bool)> = Vec::new();
        for root in 0..n {
            if state[root] != 0 {
                continue;
            }
            stack.push((ExprId(root as u32), false));
            while let Some((e, expanded)) = stack.pop() {
                let i = e.index();
                if expanded {
                    let mut t = self.compute(e);
                    if t.as_ref()
                        .is_some_and(|t| t.depth_up_to(MAX_TYPE_DEPTH) > MAX_TYPE_DEPTH)
                    {
                        let d = Diagnostic::error(E0510, format!("the type of this expression is nested more than {MAX_TYPE_DEPTH} levels deep"))
                            .with_primary(self.m.span(e), "type too deeply nested")
                            .with_note("flatten nested tuples or function values");
                        self.diags.push(d);
                        t = None;
                    }
                    self.types[i] = t;
                    state[i] = 2;
                    continue;
                }
                match state[i] {
                    2 => continue,
                    1 => {
                        self.report_cycle(e);
                        continue;
                    }
                    _ => {}
                }
                state[i] = 1;
                stack.push((e, true));
                for d in self.deps(e).into_iter().rev() {
                    if state[d.index()] != 2 {
                        stack.push((d, false));
                    }
                }
            }
        }
        self.check_defs();
        self.check_let_annotations();
    }

    /// A fully annotated let-bound variable takes its type from the annotation (so recursive
    /// functions can be bound), so its value is checked against the annotation here, once every
    /// expression has been typed.
    fn check_let_annotations(&mut self) {
        let m = self.m;
        for e in &m.exprs {
            let Expr::Let { var, value, .. } = e else {
                continue;
            };
            let v = m.var(*var);
            let Some(ann) = v.annotation.as_ref().filter(|t| !t.is_incomplete()) else {
                continue;
            };
            let Some(t) = self.types[value.index()].clone() else {
                continue;
            };
            if !ann.admits(&t) {
                let d = Diagnostic::error(
                    E0504,
                    format!(
                        "`%{}` is annotated `{ann}` but is bound to a value of type `{t}`",
                        v.name
                    ),
                )
                .with_primary(v.span, "annotation does not match")
                .with_secondary(m.span(*value), format!("this has type `{t}`"));
                self.diags.push(d);
            }
        }
    }

    /// The expressions whose types `e`'s type depends on.
    fn deps(&self, e: ExprId) -> Vec<ExprId> {
        match self.m.expr(e) {
            Expr::Var(v) => {
                let var = self.m.var(*v);
                if var.annotation.as_ref().is_some_and(|t| !t.is_incomplete()) {
                    return Vec::new();
                }
                if let Some(&value) = self.let_value.get(v) {
                    return vec![value];
                }
                match self.param_hint(*v) {
                    Some(arg) => vec![arg],
                    None => Vec::new(),
                }
            }
            Expr::Global(g) => match self.m.globals[g.index()].def {
                Some(f) if self.annotated_type(f).is_none() => {
                    let func = self.m.func(f);
                    let mut d: Vec<ExprId> =
                        func.params.iter().map(|p| self.m.var(*p).expr).collect();
                    d.push(func.body);
                    d
                }
                _ => Vec::new(),
            },
            Expr::Func(f) => {
                let func = self.m.func(*f);
                let mut d: Vec<ExprId> = func.params.iter().map(|p| self.m.var(*p).expr).collect();
                d.push(func.body);
                d
            }
            _ => self.m.operands(e),
        }
    }

    /// For an unannotated parameter of a `fn` literal, the argument of its first call.
    fn param_hint(&self, v: VarId) -> Option<ExprId> {
        let &(f, k) = self.param_of.get(&v)?;
        let call = *self.first_call.get(&f)?;
        match self.m.expr(call) {
            Expr::Call { args, .. } => args.get(k).copied(),
            _ => None,
        }
    }

    /// The function type given entirely by annotations, if every part is annotated.
    fn annotated_type(&self, f: FuncId) -> Option<Type> {
        let func = self.m.func(f);
        let params = func
            .params
            .iter()
            .map(|p| {
                self.m
                    .var(*p)
                    .annotation
                    .clone()
                    .filter(|t| !t.is_incomplete())
            })
            .collect::<Option<Vec<_>>>()?;
        let ret = func.ret_type.clone().filter(|t| !t.is_incomplete())?;
        Some(Type::Func(FuncType {
            params,
            ret: Box::new(ret),
        }))
    }

    fn ty(&self, e: ExprId) -> Option<&Type> {
        self.types[e.index()].as_ref()
    }

    fn error(&mut self, d: Diagnostic) -> Option<Type> {
        self.diags.push(d);
        None
    }

    fn report_cycle(&mut self, e: ExprId) {
        let span = self.m.span(e);
        let what = match self.m.expr(e) {
            Expr::Var(v) => format!("the type of `%{}` depends on itself", self.m.var(*v).name),
            Expr::Global(g) => format!(
                "the type of `@{}` depends on itself",
                self.m.globals[g.index()].name
            ),
            _ => "the type of this expression depends on itself".to_string(),
        };
        let d = Diagnostic::error(E0503, what)
            .with_primary(span, "recursive use without a type annotation")
            .with_note("annotate the recursive variable or function with its full type");
        self.diags.push(d);
    }

    fn compute(&mut self, e: ExprId) -> Option<Type> {
        let m = self.m;
        let span = m.span(e);
        match m.expr(e) {
            Expr::Const(c) => Some(Type::Tensor(c.ty())),
            Expr::Var(v) => self.var_type(*v),
            Expr::Op(op) => {
                let name = registry().get(*op).name;
                self.error(
                    Diagnostic::error(E0503, format!("operator `{name}` is used as a value"))
                        .with_primary(span, "operators must be called with arguments"),
                )
            }
            Expr::Call {
                callee,
                args,
                attrs,
            } => {
                let arg_types = args
                    .iter()
                    .map(|a| self.ty(*a).cloned())
                    .collect::<Option<Vec<_>>>()?;
                match callee {
                    Callee::Op(op) => self.op_call(e, *op, args, &arg_types, attrs, span),
                    Callee::Expr(c) => self.fn_call(e, *c, args, &arg_types, span),
                }
            }
            Expr::Tuple(fields) => fields
                .iter()
                .map(|f| self.ty(*f).cloned())
                .collect::<Option<Vec<_>>>()
                .map(Type::Tuple),
            Expr::Proj { tuple, index } => match self.ty(*tuple)?.clone() {
                Type::Tuple(fields) => match fields.get(*index as usize) {
                    Some(t) => Some(t.clone()),
                    None => self.error(
                        Diagnostic::error(
                            E0507,
                            format!(
                                "tuple has {} field(s); there is no field {index}",
                                fields.len()
                            ),
                        )
                        .with_primary(span, "projection out of range")
                        .with_secondary(
                            m.span(*tuple),
                            format!("this has type `{}`", Type::Tuple(fields.clone())),
                        ),
                    ),
                },
                other => self.error(
                    Diagnostic::error(
                        E0507,
                        format!("projection `.{index}` of a non-tuple of type `{other}`"),
                    )
                    .with_primary(span, "not a tuple")
                    .with_secondary(m.span(*tuple), "this is not a tuple"),
                ),
            },
            Expr::Let { body, .. } => self.ty(*body).cloned(),
            Expr::If {
                cond,
                then_branch,
                else_branch,
            } => self.if_type(e, *cond, *then_branch, *else_branch, span),
            Expr::Func(f) => self.func_type(*f),
            Expr::Global(g) => {
                let global = &m.globals[g.index()];
                match global.def {
                    None => self.error(
                        Diagnostic::error(E0306, format!("`@{}` is not defined", global.name))
                            .with_primary(span, "no `def` of this name"),
                    ),
                    Some(f) => self.annotated_type(f).or_else(|| self.func_type(f)),
                }
            }
        }
    }

    fn var_type(&mut self, v: VarId) -> Option<Type> {
        let var = self.m.var(v);
        if let Some(t) = var.annotation.as_ref().filter(|t| !t.is_incomplete()) {
            return Some(t.clone());
        }
        let source = self
            .let_value
            .get(&v)
            .copied()
            .or_else(|| self.param_hint(v));
        match source {
            Some(s) => {
                let t = self.ty(s)?.clone();
                if let Some(ann) = &var.annotation {
                    if !ann.admits(&t) {
                        return self.error(
                            Diagnostic::error(E0504, format!("`%{}` is annotated `{ann}` but is bound to a value of type `{t}`", var.name))
                                .with_primary(var.span, "annotation does not match")
                                .with_secondary(self.m.span(s), format!("this has type `{t}`")),
                        );
                    }
                }
                Some(t)
            }
            None => self.error(
                Diagnostic::error(E0503, format!("cannot infer the type of `%{}`", var.name))
                    .with_primary(
                        var.span,
                        "add a type annotation such as `: Tensor[(1, 16), float32]`",
                    ),
            ),
        }
    }

    fn op_call(
        &mut self,
        call_id: ExprId,
        op: OpId,
        args: &[ExprId],
        arg_types: &[Type],
        attrs: &Attrs,
        span: crate::source::Span,
    ) -> Option<Type> {
        let def = registry().get(op);
        if arg_types.len() != def.arity() {
            return None; // reported by the parser
        }
        let call = RelCall {
            op: def,
            args: arg_types,
            attrs,
        };
        match (def.rel)(&call) {
            Ok(t) => Some(t),
            Err(err) => {
                let mut d = Diagnostic::error(E0501, err.message.clone())
                    .with_primary(span, format!("in this call of `{}`", def.name));
                if let Some(i) = err.arg {
                    if let (Some(a), Some(t)) = (args.get(i), arg_types.get(i)) {
                        d = d.with_secondary(
                            self.m.operand_span(call_id, i, *a),
                            format!("`{}` has type `{t}`", call.arg_name(i)),
                        );
                    }
                }
                self.error(d)
            }
        }
    }

    fn fn_call(
        &mut self,
        call_id: ExprId,
        callee: ExprId,
        args: &[ExprId],
        arg_types: &[Type],
        span: crate::source::Span,
    ) -> Option<Type> {
        let ft = match self.ty(callee)?.clone() {
            Type::Func(ft) => ft,
            other => {
                return self.error(
                    Diagnostic::error(E0505, format!("cannot call a value of type `{other}`"))
                        .with_primary(span, "call of a non-function")
                        .with_secondary(self.m.span(callee), "this is not a function"),
                )
            }
        };
        if ft.params.len() != arg_types.len() {
            return self.error(
                Diagnostic::error(
                    E0506,
                    format!(
                        "function takes {} argument(s), but {} were given",
                        ft.params.len(),
                        arg_types.len()
                    ),
                )
                .with_primary(span, "wrong number of arguments")
                .with_secondary(
                    self.m.span(callee),
                    format!("callee has type `{}`", Type::Func(ft.clone())),
                ),
            );
        }
        for (i, (p, a)) in ft.params.iter().zip(arg_types).enumerate() {
            if !p.admits(a) {
                return self.error(
                    Diagnostic::error(
                        E0506,
                        format!("argument {i} has type `{a}`, but the function expects `{p}`"),
                    )
                    .with_primary(
                        self.m.operand_span(call_id, i, args[i]),
                        "mismatched argument",
                    )
                    .with_secondary(self.m.span(callee), "callee"),
                );
            }
        }
        Some(*ft.ret)
    }

    fn if_type(
        &mut self,
        if_id: ExprId,
        cond: ExprId,
        then_b: ExprId,
        else_b: ExprId,
        span: crate::source::Span,
    ) -> Option<Type> {
        let ct = self.ty(cond)?.clone();
        let ok_cond = matches!(&ct, Type::Tensor(t) if t.dtype.is_bool() && t.shape.is_empty());
        if !ok_cond {
            return self.error(
                Diagnostic::error(
                    E0508,
                    format!("the condition of `if` must be a `bool` scalar, found `{ct}`"),
                )
                .with_primary(self.m.operand_span(if_id, 0, cond), "not a boolean scalar")
                .with_secondary(span, "in this `if`"),
            );
        }
        let tt = self.ty(then_b)?.clone();
        let et = self.ty(else_b)?.clone();
        if tt != et {
            return self.error(
                Diagnostic::error(
                    E0508,
                    format!("the branches of `if` have different types, `{tt}` and `{et}`"),
                )
                .with_primary(
                    self.m.operand_span(if_id, 2, else_b),
                    format!("this has type `{et}`"),
                )
                .with_secondary(
                    self.m.operand_span(if_id, 1, then_b),
                    format!("this has type `{tt}`"),
                ),
            );
        }
        Some(tt)
    }

    fn func_type(&mut self, f: FuncId) -> Option<Type> {
        let func = self.m.func(f);
        let params = func
            .params
            .iter()
            .map(|p| self.ty(self.m.var(*p).expr).cloned())
            .collect::<Option<Vec<_>>>()?;
        let body = self.ty(func.body)?.clone();
        if let Some(ret) = &func.ret_type {
            if !ret.admits(&body) {
                return self.error(
                    Diagnostic::error(E0504, format!("the function is declared to return `{ret}` but its body has type `{body}`"))
                        .with_primary(self.m.span(func.body), format!("this has type `{body}`"))
                        .with_secondary(func.ret_span.unwrap_or(func.span), format!("declared to return `{ret}`")),
                );
            }
        }
        Some(Type::Func(FuncType {
            params,
            ret: Box::new(body),
        }))
    }

    /// `def`s are not expressions, so their result annotations are checked here.
    fn check_defs(&mut self) {
        for &(_, f) in &self.m.defs {
            if self.types[self.m.func(f).body.index()].is_some() {
                let _ = self.func_type(f);
            }
        }
    }
}
