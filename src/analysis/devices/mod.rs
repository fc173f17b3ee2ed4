//! Device planning: which virtual device every expression lives on.
//!
//! Input: a type-checked [`Module`] whose annotations (`on_device`, `device_copy`, devices on
//! binders and function results) constrain some devices. Output: a [`DevicePlan`], holding
//!
//! * the planned module in its *minimal representation*: every `on_device` removed, a
//!   `device_copy` wherever a value moves between devices, and a device on every *critical*
//!   place (function parameters, let-bound variables and function results);
//! * the *complete representation*: the device of every expression of the planned module, and of
//!   every expression of the input module.
//!
//! [`plan_devices`] solves the constraints by unification over domains (see `docs/devices.md`),
//! defaults what is left open, and captures the result. [`expand`] ("device plan lite") is the
//! inverse direction: it recovers the complete representation from a minimal one with lexical
//! rules alone, and reports a missing critical device.
//!
//! Errors: conflicting requirements (`E0701`, pointing at both annotations), function domains of
//! different shapes (`E0702`), and, for [`expand`], a missing critical device (`E0703`) or a value
//! used on another device without a copy (`E0704`).
//!
//! Every walk is iterative (or bounded by the type nesting limit), and no output depends on hash
//! order.
//!
//! # Example
//! ```
//! use collage::analysis::devices::{plan_devices, VirtualDevice};
//! use collage::source::SourceMap;
//! let text = r#"#[version = "0.0.5"]
//! def @main(%x: Tensor[(4), float32]) {
//!   %0 = on_device(add(%x, %x), virtual_device=VirtualDevice(device="cuda", id=0));
//!   multiply(%0, %0)
//! }"#;
//! let mut sources = SourceMap::new();
//! let file = sources.add("m.relay", text);
//! let m = collage::frontend::relay::load(&sources, file).unwrap();
//! let plan = plan_devices(&m, &VirtualDevice::for_device(1, 0)).unwrap();
//! let printed = collage::frontend::relay::print::print_module(&plan.module);
//! assert!(printed.contains("device_copy("));
//! ```

mod analyze;
mod capture;
mod domain;
mod lexical;

pub use crate::ir::VirtualDevice;
pub use lexical::expand;

use crate::diag::Diagnostics;
use crate::ir::*;
use crate::ops::{registry, Op};

/// The result of device planning.
#[derive(Clone, Debug)]
pub struct DevicePlan {
    /// The planned module (minimal representation; print it with [`crate::frontend::relay::print`]).
    pub module: Module,
    /// The device of every expression of [`DevicePlan::module`], indexed by [`ExprId`].
    /// Expressions of functions that are not planned (`Primitive=1` bodies take the device of the
    /// place they appear in; `Compiler=`/`Extern=` definitions) and unreachable ones are
    /// unconstrained or lexical as `docs/devices.md` says.
    pub devices: Vec<VirtualDevice>,
    /// The device of every expression of the *input* module, indexed by its [`ExprId`].
    pub input_devices: Vec<VirtualDevice>,
}

impl DevicePlan {
    /// The planned device of an expression of the input module.
    pub fn device_of(&self, e: ExprId) -> &VirtualDevice {
        &self.input_devices[e.index()]
    }

    /// Whether a target whose device is `target` may run input expression `e`: its device must
    /// refine the planned one (set every field the plan sets, to the same value).
    pub fn allows(&self, e: ExprId, target: &VirtualDevice) -> bool {
        target.refines(self.device_of(e))
    }
}

/// Whether the model says anything about devices: `on_device` or `device_copy` calls, or
/// devices on parameters, let-bound variables or function results.
pub fn has_annotations(m: &Module) -> bool {
    m.exprs.iter().any(|e| match e {
        Expr::Call {
            callee: Callee::Op(op),
            ..
        } => matches!(registry().get(*op).op, Op::OnDevice | Op::DeviceCopy),
        _ => false,
    }) || m.vars.iter().any(|v| !v.device.is_unconstrained())
        || m.funcs.iter().any(|f| !f.result_device.is_unconstrained())
}

/// Plans the devices of every planned function of `module`. Open devices are defaulted from
/// `default` (pass [`VirtualDevice::unconstrained`] to leave unconstrained whatever no
/// annotation constrains). Functions with a `Primitive=1`, `Compiler=` or `Extern=` attribute are
/// not planned; calls to them are device-polymorphic like operator calls.
pub fn plan_devices(module: &Module, default: &VirtualDevice) -> Result<DevicePlan, Diagnostics> {
    let mut solution = analyze::solve(module, default)?;
    let input_devices = (0..module.exprs.len())
        .map(|i| {
            if solution.shape.planned[i] {
                solution.device(ExprId(i as u32))
            } else {
                VirtualDevice::unconstrained()
            }
        })
        .collect::<Vec<_>>();
    let (out, devices) = capture::capture(&mut solution, &input_devices);
    Ok(DevicePlan {
        module: out,
        devices,
        input_devices,
    })
}

/// The structure device planning needs: which expressions are planned, and what each
/// let-bound variable is bound to.
#[derive(Clone, Debug)]
pub(crate) struct Shape {
    /// Reachable from a planned definition without entering an unplanned function literal (the
    /// literal itself is planned).
    pub planned: Vec<bool>,
    /// For each variable bound by a `let`, the bound value.
    pub let_value: Vec<Option<ExprId>>,
}

impl Shape {
    pub fn compute(m: &Module) -> Shape {
        let mut planned = vec![false; m.exprs.len()];
        let mut let_value = vec![None; m.vars.len()];
        let mut stack = Vec::new();
        for &(_, f) in &m.defs {
            let func = m.func(f);
            if !is_unplanned(func) {
                stack.push(func.body);
                stack.extend(func.params.iter().map(|&p| m.var(p).expr));
            }
        }
        while let Some(e) = stack.pop() {
            if std::mem::replace(&mut planned[e.index()], true) {
                continue;
            }
            match m.expr(e) {
                Expr::Func(f) => {
                    let func = m.func(*f);
                    if !is_unplanned(func) {
                        stack.push(func.body);
                        stack.extend(func.params.iter().map(|&p| m.var(p).expr));
                    }
                }
                Expr::Let { var, value, .. } => {
                    let_value[var.index()] = Some(*value);
                    m.for_each_operand(e, |c| stack.push(c));
                }
                _ => m.for_each_operand(e, |c| stack.push(c)),
            }
        }
        Shape { planned, let_value }
    }
}

/// Whether a function is left alone by device planning.
pub(crate) fn is_unplanned(f: &Function) -> bool {
    f.attr("Primitive").is_some_and(|v| v.as_int() == Some(1))
        || f.attr("Compiler").is_some()
        || f.attr("Extern").is_some()
}

/// What a callee expression is, looking through let-bound variables.
fn callee_func(m: &Module, shape: &Shape, mut c: ExprId) -> Option<Result<FuncId, ()>> {
    for _ in 0..=m.vars.len() {
        match m.expr(c) {
            Expr::Func(f) => return Some(Ok(*f)),
            Expr::Global(g) => return Some(m.globals[g.index()].def.ok_or(())),
            Expr::Op(_) => return Some(Err(())),
            Expr::Var(v) => c = shape.let_value.get(v.index()).copied().flatten()?,
            _ => return None,
        }
    }
    None
}

/// Whether a call of `c` is device-polymorphic: `c` is an unplanned function (literal, global or
/// let-bound), an undefined global or an operator value.
pub(crate) fn primitive_callee(m: &Module, shape: &Shape, c: ExprId) -> bool {
    match callee_func(m, shape, c) {
        Some(Ok(f)) => is_unplanned(m.func(f)),
        Some(Err(())) => true,
        None => false,
    }
}

/// The planned function a callee lexically refers to, if any.
pub(crate) fn known_func(m: &Module, shape: &Shape, c: ExprId) -> Option<FuncId> {
    match callee_func(m, shape, c) {
        Some(Ok(f)) if !is_unplanned(m.func(f)) => Some(f),
        _ => None,
    }
}

/// A device annotation call.
pub(crate) enum Annotation {
    /// `on_device(e, virtual_device=D, constrain_body=B, constrain_result=R)`.
    OnDevice {
        device: VirtualDevice,
        body: bool,
        result: bool,
    },
    /// `device_copy(e, src_virtual_device=S, dst_virtual_device=D)`.
    Copy {
        src: VirtualDevice,
        dst: VirtualDevice,
    },
}

/// The annotation an expression is, if it is one (with exactly one argument).
pub(crate) fn annotation(m: &Module, e: ExprId) -> Option<Annotation> {
    let Expr::Call {
        callee: Callee::Op(op),
        args,
        attrs,
    } = m.expr(e)
    else {
        return None;
    };
    if args.len() != 1 {
        return None;
    }
    let def = registry().get(*op);
    let dev = |name| match attrs.get(def.attrs, name) {
        Some(AttrValue::Device(d)) => d.clone(),
        _ => VirtualDevice::unconstrained(),
    };
    let flag = |name, dflt| {
        attrs
            .get(def.attrs, name)
            .and_then(AttrValue::as_bool)
            .unwrap_or(dflt)
    };
    match def.op {
        Op::OnDevice => Some(Annotation::OnDevice {
            device: dev("virtual_device"),
            body: flag("constrain_body", true),
            result: flag("constrain_result", false),
        }),
        Op::DeviceCopy => Some(Annotation::Copy {
            src: dev("src_virtual_device"),
            dst: dev("dst_virtual_device"),
        }),
        _ => None,
    }
}
