//! "Device plan lite": the complete representation from the minimal one, by lexical rules.

use super::analyze::head_span;
use super::{annotation, is_unplanned, known_func, primitive_callee, Annotation, Shape};
use crate::diag::{Diagnostic, Diagnostics, E0703, E0704};
use crate::ir::*;

/// Expands a module in the minimal representation into the device of every expression (indexed
/// by [`ExprId`]), with lexical rules only:
///
/// * a variable is on its binder's device, a planned function (literal or global) on its result
///   device, a `device_copy` on its destination, a fixed `on_device` on its device;
/// * a function body is on the function's result device; a let-bound value on its variable's
///   device, the let body on the let's device; the argument of a `device_copy` on its source;
///   an argument of a call of a known planned function on that parameter's device;
/// * everything else, and the whole inside of a `Primitive=1` function, on the device of the
///   context it appears in.
///
/// A function parameter, let-bound variable or function result without a device is a missing
/// critical device (`E0703`); an expression whose own device differs from the one its context
/// needs, with no `device_copy` between them, is `E0704`.
pub fn expand(m: &Module) -> Result<Vec<VirtualDevice>, Diagnostics> {
    let shape = Shape::compute(m);
    let mut diags = Diagnostics::new();
    check_critical(m, &shape, &mut diags);
    let n = m.exprs.len();
    let mut dev: Vec<Option<VirtualDevice>> = vec![None; n];
    let mut stack: Vec<(ExprId, VirtualDevice)> = Vec::new();
    for &(_, f) in m.defs.iter().rev() {
        let func = m.func(f);
        if !is_unplanned(func) {
            stack.push((func.body, func.result_device.clone()));
        }
    }
    while let Some((e, ctx)) = stack.pop() {
        let own = intrinsic(m, e);
        let d = own.clone().unwrap_or_else(|| ctx.clone());
        // A fixed `on_device` states its device where no lexical rule could recover it.
        let stated = matches!(annotation(m, e), Some(Annotation::OnDevice { .. }));
        if own.is_some() && !stated && differ(&d, &ctx) {
            diags.push(mismatch(m, e, &d, &ctx));
        }
        if let Some(prev) = &dev[e.index()] {
            if differ(prev, &d) {
                diags.push(mismatch(m, e, prev, &d));
            }
            continue;
        }
        dev[e.index()] = Some(d.clone());
        let mut children: Vec<(ExprId, VirtualDevice)> = Vec::new();
        match m.expr(e) {
            Expr::Func(f) => {
                let func = m.func(*f);
                if is_unplanned(func) {
                    let inside = dev.get_mut(func.first_expr.index()..e.index());
                    for slot in inside.into_iter().flatten() {
                        slot.get_or_insert_with(|| d.clone());
                    }
                } else {
                    children.push((func.body, func.result_device.clone()));
                }
            }
            Expr::Let { var, value, body } => {
                children.push((*value, m.var(*var).device.clone()));
                children.push((*body, d.clone()));
            }
            Expr::Call { callee, args, .. } => match (annotation(m, e), callee) {
                (Some(Annotation::Copy { src, .. }), _) => children.push((args[0], src)),
                (Some(Annotation::OnDevice { device, body, .. }), _) => {
                    let want = if body { device } else { d.clone() };
                    children.push((args[0], want));
                }
                (None, Callee::Expr(c)) => {
                    // A device-polymorphic callee (an unplanned function) may live anywhere.
                    let callee_ctx = match primitive_callee(m, &shape, *c) {
                        true => intrinsic(m, *c).unwrap_or_else(|| d.clone()),
                        false => d.clone(),
                    };
                    children.push((*c, callee_ctx));
                    let params = known_func(m, &shape, *c).map(|f| &m.func(f).params);
                    for (i, &a) in args.iter().enumerate() {
                        let want = params
                            .and_then(|ps| ps.get(i))
                            .map_or_else(|| d.clone(), |&p| m.var(p).device.clone());
                        children.push((a, want));
                    }
                }
                (None, Callee::Op(_)) => children.extend(args.iter().map(|&a| (a, d.clone()))),
            },
            _ => m.for_each_operand(e, |c| children.push((c, d.clone()))),
        }
        stack.extend(children.into_iter().rev());
    }
    if diags.has_errors() {
        return Err(diags);
    }
    Ok((0..n)
        .map(|i| match (&dev[i], m.expr(ExprId(i as u32))) {
            (Some(d), _) => d.clone(),
            (None, Expr::Var(v)) if shape.planned[i] => m.var(*v).device.clone(),
            _ => VirtualDevice::unconstrained(),
        })
        .collect())
}

fn differ(a: &VirtualDevice, b: &VirtualDevice) -> bool {
    a != b && !a.is_unconstrained() && !b.is_unconstrained()
}

/// The device an expression has whatever its context.
fn intrinsic(m: &Module, e: ExprId) -> Option<VirtualDevice> {
    match m.expr(e) {
        Expr::Var(v) => Some(m.var(*v).device.clone()),
        Expr::Global(g) => {
            let f = m.globals[g.index()].def?;
            (!is_unplanned(m.func(f))).then(|| m.func(f).result_device.clone())
        }
        Expr::Func(f) => (!is_unplanned(m.func(*f))).then(|| m.func(*f).result_device.clone()),
        Expr::Call { .. } => match annotation(m, e)? {
            Annotation::Copy { dst, .. } => Some(dst),
            Annotation::OnDevice {
                device,
                result: true,
                ..
            } => Some(device),
            Annotation::OnDevice { .. } => None,
        },
        _ => None,
    }
}

fn mismatch(m: &Module, e: ExprId, have: &VirtualDevice, want: &VirtualDevice) -> Diagnostic {
    Diagnostic::error(
        E0704,
        format!("value on {have} is used where {want} is needed"),
    )
    .with_primary(m.span(e), format!("this value is on {have}"))
    .with_note("a value moves between devices only through `device_copy`")
}

/// Reports every planned parameter, let-bound variable and function result without a device.
fn check_critical(m: &Module, shape: &Shape, diags: &mut Diagnostics) {
    let missing = |what: &str, span, diags: &mut Diagnostics| {
        diags.push(
            Diagnostic::error(E0703, format!("{what} has no virtual device"))
                .with_primary(span, "a virtual device is required here")
                .with_note("in the minimal representation every function parameter, let-bound variable and function result carries `virtual_device=...`"),
        );
    };
    let check_func = |f: FuncId, diags: &mut Diagnostics| {
        let func = m.func(f);
        if is_unplanned(func) {
            return;
        }
        for &p in &func.params {
            if m.var(p).device.is_unconstrained() {
                let name = format!("parameter `%{}`", m.var(p).name);
                missing(&name, m.var(p).span, diags);
            }
        }
        if func.result_device.is_unconstrained() {
            missing("the function result", head_span(m, f), diags);
        }
    };
    for &(_, f) in &m.defs {
        check_func(f, diags);
    }
    for (i, e) in m.exprs.iter().enumerate() {
        if !shape.planned[i] {
            continue;
        }
        match e {
            Expr::Func(f) => check_func(*f, diags),
            Expr::Let { var, .. } if m.var(*var).device.is_unconstrained() => {
                let v = m.var(*var);
                let name = if v.name.is_empty() {
                    "a sequenced value".to_string()
                } else {
                    format!("let-bound variable `%{}`", v.name)
                };
                missing(&name, v.span, diags);
            }
            _ => {}
        }
    }
}
