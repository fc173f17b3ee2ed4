//! Collecting device constraints (unification over domains) and defaulting.

use super::domain::{Clash, DomId, Domains};
use super::{annotation, is_unplanned, primitive_callee, Annotation, Shape};
use crate::diag::{Diagnostic, Diagnostics, E0701, E0702};
use crate::ir::*;
use crate::source::Span;

/// The solved domains of a module.
pub(crate) struct Solution<'m> {
    pub m: &'m Module,
    pub shape: Shape,
    pub doms: Domains,
    expr_dom: Vec<Option<DomId>>,
    func_dom: Vec<Option<DomId>>,
    /// `on_device` calls treated as fixed (let-bound values and function bodies).
    pub fixed: Vec<bool>,
}

impl<'m> Solution<'m> {
    /// The domain of an expression (created on first use, shaped by its type).
    pub fn dom(&mut self, e: ExprId) -> DomId {
        if let Some(d) = self.expr_dom[e.index()] {
            return d;
        }
        let d = self.doms.for_type(self.m.ty(e));
        self.expr_dom[e.index()] = Some(d);
        d
    }

    /// The device of an expression.
    pub fn device(&mut self, e: ExprId) -> VirtualDevice {
        let d = self.dom(e);
        self.doms.device(d)
    }

    /// The domain of a planned function: `fn(params):body`.
    fn func_dom(&mut self, f: FuncId) -> Result<DomId, Clash> {
        if let Some(d) = self.func_dom[f.index()] {
            return Ok(d);
        }
        let func = self.m.func(f);
        let params: Vec<DomId> = func
            .params
            .iter()
            .map(|&p| self.dom(self.m.var(p).expr))
            .collect();
        let result = self.dom(func.body);
        let d = self.doms.func(params, result);
        self.func_dom[f.index()] = Some(d);
        if !func.result_device.is_unconstrained() {
            let r = self.doms.result_of(result);
            let a = self
                .doms
                .first(func.result_device.clone(), Some(head_span(self.m, f)));
            self.doms.unify(r, a)?;
        }
        Ok(d)
    }

    /// The device of parameter `i` of the callee's domain (`None` for a first-order callee).
    pub fn param_device(&mut self, callee: ExprId, i: usize) -> Option<VirtualDevice> {
        let d = self.dom(callee);
        let params = self.doms.params(d)?;
        let p = *params.get(i)?;
        Some(self.doms.device(p))
    }
}

/// The span of a function's head: from `fn`/`def` to the start of its body.
pub(crate) fn head_span(m: &Module, f: FuncId) -> Span {
    let func = m.func(f);
    let body = m.span(func.body);
    if body.start > func.span.start && body.start <= func.span.end {
        Span {
            file: func.span.file,
            start: func.span.start,
            end: body.start,
        }
    } else {
        func.span
    }
}

/// Collects the constraints of every planned expression and solves them; then defaults every
/// domain that is still open.
pub(crate) fn solve<'m>(
    m: &'m Module,
    default: &VirtualDevice,
) -> Result<Solution<'m>, Diagnostics> {
    let shape = Shape::compute(m);
    let mut s = Solution {
        m,
        shape,
        doms: Domains::default(),
        expr_dom: vec![None; m.exprs.len()],
        func_dom: vec![None; m.funcs.len()],
        fixed: vec![false; m.exprs.len()],
    };
    mark_fixed(&mut s);
    let mut diags = Diagnostics::new();
    for &(_, f) in &m.defs {
        if !is_unplanned(m.func(f)) {
            if let Err(c) = s.func_dom(f) {
                diags.push(clash(c, head_span(m, f)));
            }
        }
    }
    // Annotations first, then the rest of the structure, then the device-polymorphic calls: an
    // operand of such a call that everything else already places on another device is known to
    // clash with it, and gets a copy instead (see `constrain_call`).
    for phase in 0..3 {
        for i in 0..m.exprs.len() {
            let e = ExprId(i as u32);
            if s.shape.planned[i] && constraint_phase(m, &s.shape, e) == phase {
                if let Err((c, at)) = constrain(&mut s, e) {
                    diags.push(clash(c, at));
                }
            }
        }
    }
    if diags.has_errors() {
        return Err(diags);
    }
    set_defaults(&mut s, default);
    Ok(s)
}

/// When an expression's constraints are collected: 0 for annotations alone (a binder, a
/// function's result device, `on_device`, `device_copy`), 2 for device-polymorphic calls (whose
/// operands may be copied), 1 for the rest.
fn constraint_phase(m: &Module, shape: &Shape, e: ExprId) -> u8 {
    match m.expr(e) {
        Expr::Var(_) | Expr::Func(_) => 0,
        Expr::Call { .. } if annotation(m, e).is_some() => 0,
        Expr::Call {
            callee: Callee::Op(_),
            ..
        } => 2,
        Expr::Call {
            callee: Callee::Expr(c),
            ..
        } if primitive_callee(m, shape, *c) => 2,
        _ => 1,
    }
}

/// A normal `on_device` that is a let-bound value or a function body pins its context too.
fn mark_fixed(s: &mut Solution) {
    let m = s.m;
    let mark = |e: ExprId, fixed: &mut Vec<bool>| {
        if matches!(annotation(m, e), Some(Annotation::OnDevice { .. })) {
            fixed[e.index()] = true;
        }
    };
    for (i, e) in m.exprs.iter().enumerate() {
        if !s.shape.planned[i] {
            continue;
        }
        if let Expr::Let { value, .. } = e {
            mark(*value, &mut s.fixed);
        }
    }
    for f in &m.funcs {
        if !is_unplanned(f) {
            mark(f.body, &mut s.fixed);
        }
    }
}

fn constrain(s: &mut Solution, e: ExprId) -> Result<(), (Clash, Span)> {
    let m = s.m;
    let at = m.span(e);
    let here = |c| (c, at);
    let unify = |s: &mut Solution, a: ExprId, b: ExprId, at: Span| {
        let (da, db) = (s.dom(a), s.dom(b));
        s.doms.unify(da, db).map_err(|c| (c, at))
    };
    match m.expr(e) {
        Expr::Var(v) => {
            let var = m.var(*v);
            if !var.device.is_unconstrained() {
                let d = s.dom(e);
                let r = s.doms.result_of(d);
                let a = s.doms.first(var.device.clone(), Some(var.span));
                s.doms.unify(a, r).map_err(here)?;
            }
        }
        Expr::Global(g) => {
            if let Some(f) = m.globals[g.index()].def {
                if !is_unplanned(m.func(f)) {
                    let fd = s.func_dom(f).map_err(here)?;
                    let d = s.dom(e);
                    s.doms.unify(d, fd).map_err(here)?;
                }
            }
        }
        Expr::Const(_) | Expr::Op(_) => {}
        Expr::Call { callee, args, .. } => constrain_call(s, e, callee, args)?,
        Expr::Tuple(fields) => {
            for (i, &f) in fields.iter().enumerate() {
                unify(s, f, e, m.operand_span(e, i, f))?;
            }
        }
        Expr::Proj { tuple, .. } => unify(s, *tuple, e, at)?,
        Expr::Let { var, value, body } => {
            unify(s, m.var(*var).expr, *value, m.var(*var).span)?;
            unify(s, e, *body, at)?;
        }
        Expr::If {
            cond,
            then_branch,
            else_branch,
        } => {
            unify(s, *cond, e, m.operand_span(e, 0, *cond))?;
            unify(s, *then_branch, e, m.operand_span(e, 1, *then_branch))?;
            unify(s, *else_branch, e, m.operand_span(e, 2, *else_branch))?;
        }
        Expr::Func(f) => {
            if !is_unplanned(m.func(*f)) {
                let fd = s.func_dom(*f).map_err(here)?;
                let d = s.dom(e);
                s.doms.unify(d, fd).map_err(here)?;
            }
        }
    }
    Ok(())
}

/// A first-order requirement: `x` is on `device`, as the annotation at `origin` says.
fn require(s: &mut Solution, x: ExprId, device: VirtualDevice, origin: Span) -> Result<(), Clash> {
    require_as(s, x, device, origin, false)
}

/// [`require`], by a fixed annotation when `fixed` is set.
fn require_as(
    s: &mut Solution,
    x: ExprId,
    device: VirtualDevice,
    origin: Span,
    fixed: bool,
) -> Result<(), Clash> {
    let a = if fixed {
        s.doms.first_fixed(device, origin)
    } else {
        s.doms.first(device, Some(origin))
    };
    let d = s.dom(x);
    s.doms.unify(a, d)
}

fn constrain_call(
    s: &mut Solution,
    e: ExprId,
    callee: &Callee,
    args: &[ExprId],
) -> Result<(), (Clash, Span)> {
    let m = s.m;
    let at = m.span(e);
    let here = |c| (c, at);
    match (annotation(m, e), callee) {
        (
            Some(Annotation::OnDevice {
                device,
                body,
                result,
            }),
            _,
        ) => {
            let fixed = s.fixed[e.index()];
            let on_body = !device.is_unconstrained() && (body || fixed);
            let on_result = !device.is_unconstrained() && (result || fixed);
            // A fixed annotation's requirements are named in any conflict they meet.
            let pinned = on_body && on_result;
            if on_body {
                require_as(s, args[0], device.clone(), at, pinned).map_err(here)?;
            }
            if on_result {
                require_as(s, e, device, at, pinned).map_err(here)?;
            }
            // A fixed annotation's value does not move: its body and its result are on one
            // device, also where the annotation leaves fields open (a scope alone).
            if pinned {
                let (da, de) = (s.dom(args[0]), s.dom(e));
                s.doms.unify(da, de).map_err(here)?;
            }
        }
        (Some(Annotation::Copy { src, dst }), _) => {
            require(s, args[0], src, at).map_err(here)?;
            require(s, e, dst, at).map_err(here)?;
        }
        (None, Callee::Expr(c)) if !primitive_callee(m, &s.shape, *c) => {
            let params: Vec<DomId> = args.iter().map(|&a| s.dom(a)).collect();
            let result = s.dom(e);
            let want = s.doms.func(params, result);
            let have = s.dom(*c);
            s.doms.unify(have, want).map_err(here)?;
        }
        (None, _) => {
            // An argument that is a fixed annotation (an `on_device` constraining its result) is
            // used where it is computed: the call is on its device, and no copy moves it or any
            // other argument (an operator's arguments share its device). Such arguments are
            // unified first, so which requirement the call meets first does not matter.
            let fixed: Vec<bool> = args.iter().map(|&a| fixed_result(m, a)).collect();
            let pinned = fixed.contains(&true);
            let order = (0..args.len())
                .filter(|&i| fixed[i])
                .chain((0..args.len()).filter(|&i| !fixed[i]));
            for i in order {
                let a = args[i];
                let (da, de) = (s.dom(a), s.dom(e));
                let both_first = s.doms.params(da).is_none() && s.doms.params(de).is_none();
                match s.doms.unify(da, de) {
                    Ok(()) => {}
                    // Otherwise an argument already required on another device (by an earlier
                    // use) is copied to this call: capture puts a `device_copy` on the edge. A
                    // clash of two first-order roots leaves the store unchanged.
                    Err(Clash::Devices(_)) if both_first && !pinned => {}
                    Err(c) => return Err((c, m.operand_span(e, i, a))),
                }
            }
        }
    }
    Ok(())
}

/// Whether `e` is an `on_device` that constrains its result to a device (`constrain_result=True`):
/// its value stays where it is computed.
fn fixed_result(m: &Module, e: ExprId) -> bool {
    matches!(
        annotation(m, e),
        Some(Annotation::OnDevice { device, result: true, .. }) if !device.is_unconstrained()
    )
}

/// Turns a clash into a diagnostic that points at both requirements and where they meet.
fn clash(c: Clash, at: Span) -> Diagnostic {
    match c {
        Clash::Devices(pair) => {
            let [(a, sa), (b, sb)] = *pair;
            let (sa, sb) = (sa.unwrap_or(at), sb.unwrap_or(at));
            // The later annotation is the primary one.
            let ((first, fa), (second, fb)) = if sa <= sb {
                ((a, sa), (b, sb))
            } else {
                ((b, sb), (a, sa))
            };
            let mut d = Diagnostic::error(
                E0701,
                format!("conflicting virtual devices {first} and {second}"),
            )
            .with_primary(fb, format!("requires {second}"));
            if fa != fb {
                d = d.with_secondary(fa, format!("requires {first}"));
            }
            if at != fa && at != fb {
                d = d.with_secondary(at, "both requirements apply to this value");
            }
            d.with_note("change one of the annotations, or let the value move between the devices with a `device_copy` or a normal `on_device`")
        }
        Clash::Shape => Diagnostic::error(
            E0702,
            "a function value is used with another number of parameters",
        )
        .with_primary(
            at,
            "the device domains of these functions have different shapes",
        ),
    }
}

/// Defaulting: a function's result takes the default device, then its parameters take the
/// result's device; every other open expression takes the device of the context it appears in
/// (a let-bound variable that of its `let`, a call argument that of its parameter or call).
///
/// A later step may fill a field of a function's result after its parameters took their
/// defaults from it, so the whole procedure is repeated until nothing changes (it only ever fills
/// unset fields, so this ends).
fn set_defaults(s: &mut Solution, default: &VirtualDevice) {
    for _ in 0..16 {
        let before = s.doms.changes;
        default_pass(s, default);
        if s.doms.changes == before {
            break;
        }
    }
}

fn default_pass(s: &mut Solution, default: &VirtualDevice) {
    let m = s.m;
    let mut visited = vec![false; m.exprs.len()];
    let mut stack: Vec<(ExprId, VirtualDevice)> = Vec::new();
    for &(_, f) in &m.defs {
        if is_unplanned(m.func(f)) {
            continue;
        }
        let Ok(fd) = s.func_dom(f) else { continue };
        s.doms.set_default(fd, default);
        let rv = s.doms.device(fd);
        stack.push((m.func(f).body, rv));
    }
    stack.reverse();
    while let Some((e, ctx)) = stack.pop() {
        if std::mem::replace(&mut visited[e.index()], true) || !s.shape.planned[e.index()] {
            continue;
        }
        let mut children: Vec<(ExprId, VirtualDevice)> = Vec::new();
        match m.expr(e) {
            Expr::Func(f) => {
                let d = s.dom(e);
                if is_unplanned(m.func(*f)) {
                    s.doms.set_default(d, &ctx);
                } else {
                    s.doms.set_default(d, default);
                    let body = m.func(*f).body;
                    children.push((body, s.device(body)));
                }
            }
            Expr::Let { var, value, body } => {
                let d = s.dom(e);
                s.doms.set_default(d, &ctx);
                let let_vd = s.doms.device(d);
                let vd_dom = s.dom(m.var(*var).expr);
                s.doms.set_default(vd_dom, &let_vd);
                let var_vd = s.doms.device(vd_dom);
                children.push((*value, var_vd));
                children.push((*body, let_vd));
            }
            Expr::Call { callee, args, .. } => {
                let d = s.dom(e);
                s.doms.set_default(d, &ctx);
                let here = s.doms.device(d);
                // The argument of a copy or of a constraining `on_device` may live elsewhere: it
                // defaults from the annotation, not from the call's context.
                let copy_src = match annotation(m, e) {
                    Some(Annotation::Copy { src, .. }) => Some(src),
                    Some(Annotation::OnDevice { device, body, .. })
                        if (body || s.fixed[e.index()]) && !device.is_unconstrained() =>
                    {
                        Some(device)
                    }
                    _ => None,
                };
                if let Callee::Expr(c) = callee {
                    children.push((*c, here.clone()));
                }
                for (i, &a) in args.iter().enumerate() {
                    let want = match (&copy_src, callee) {
                        (Some(src), _) => src.clone(),
                        (None, Callee::Expr(c)) => {
                            s.param_device(*c, i).unwrap_or_else(|| here.clone())
                        }
                        (None, Callee::Op(_)) => here.clone(),
                    };
                    children.push((a, want));
                }
            }
            _ => {
                let d = s.dom(e);
                s.doms.set_default(d, &ctx);
                let here = s.doms.device(d);
                m.for_each_operand(e, |c| children.push((c, here.clone())));
            }
        }
        stack.extend(children.into_iter().rev());
    }
    // Expressions no walk reached (none in a well-formed module) take the default.
    for (i, seen) in visited.iter().enumerate() {
        if s.shape.planned[i] && !seen {
            let d = s.dom(ExprId(i as u32));
            s.doms.set_default(d, default);
        }
    }
}
