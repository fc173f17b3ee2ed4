//! Capture: rewrites the module into the minimal representation of a solved plan.
//!
//! The input arena is rebuilt in order (operands before users), so the output is a valid arena
//! too. `on_device` calls disappear; a `device_copy` is inserted on every edge whose value lives
//! on another device than its user needs; binders and function results get their devices. Where
//! the lexical rules of [`super::expand`] could not recover an argument's device (an argument of a
//! call whose callee is not a known function, passed on another device than the call's), the
//! argument (even a variable or a copy) keeps a fixed `on_device`.

use super::analyze::Solution;
use super::{annotation, is_unplanned, known_func, primitive_callee, Annotation};
use crate::ir::*;
use crate::ops::{registry, Op};

struct Out<'a> {
    m: &'a Module,
    out: Module,
    devices: Vec<VirtualDevice>,
    map: Vec<ExprId>,
    input: &'a [VirtualDevice],
}

impl Out<'_> {
    fn push(&mut self, e: Expr, from: ExprId, device: VirtualDevice) -> ExprId {
        let id = self.out.push(e, self.m.span(from));
        self.out.types.push(self.m.ty(from).cloned());
        self.devices.push(device);
        id
    }

    fn annotation_call(
        &mut self,
        op: Op,
        child: ExprId,
        from: ExprId,
        set: &[(&str, AttrValue)],
    ) -> ExprId {
        let id = op.id().unwrap_or(OpId(0));
        let def = registry().get(id);
        let mut attrs = Attrs::defaults(def.attrs);
        for (k, v) in set {
            attrs.set(def.attrs, k, v.clone());
        }
        let device = match set.last() {
            Some((_, AttrValue::Device(d))) => d.clone(),
            _ => VirtualDevice::unconstrained(),
        };
        self.push(
            Expr::Call {
                callee: Callee::Op(id),
                args: vec![child],
                attrs,
            },
            from,
            device,
        )
    }

    /// The output operand for input operand `c` of a user that needs it on `expected`.
    fn edge(&mut self, c: ExprId, expected: &VirtualDevice) -> ExprId {
        let oc = self.map[c.index()];
        let is_function = self.is_function(c);
        let have = self.input[c.index()].clone();
        if is_function
            || have == *expected
            || have.is_unconstrained()
            || expected.is_unconstrained()
        {
            return oc;
        }
        self.annotation_call(
            Op::DeviceCopy,
            oc,
            c,
            &[
                ("src_virtual_device", AttrValue::Device(have)),
                ("dst_virtual_device", AttrValue::Device(expected.clone())),
            ],
        )
    }

    /// Whether an input expression is a function value (never copied or wrapped).
    fn is_function(&self, c: ExprId) -> bool {
        matches!(self.m.ty(c), Some(Type::Func(_)))
            || matches!(self.m.expr(c), Expr::Op(_) | Expr::Func(_))
    }
}

/// Builds the planned module and the device of each of its expressions.
pub(crate) fn capture(s: &mut Solution, input: &[VirtualDevice]) -> (Module, Vec<VirtualDevice>) {
    let m = s.m;
    let n = m.exprs.len();
    let mut o = Out {
        m,
        out: Module {
            globals: m.globals.clone(),
            defs: m.defs.clone(),
            vars: m.vars.clone(),
            funcs: m.funcs.clone(),
            meta: m.meta.clone(),
            ..Module::default()
        },
        devices: Vec::with_capacity(n),
        map: vec![ExprId(0); n],
        input,
    };
    let mut out_start = vec![0u32; n];
    for i in 0..n {
        out_start[i] = o.out.exprs.len() as u32;
        let e = ExprId(i as u32);
        let id = if s.shape.planned[i] {
            planned_expr(s, &mut o, e)
        } else {
            let x = remap(m.expr(e), &o.map);
            o.push(x, e, VirtualDevice::unconstrained())
        };
        o.map[i] = id;
        if let Some(b) = &m.bindings[i] {
            if o.out.bindings[id.index()].is_none() && o.out.exprs.len() == id.index() + 1 {
                o.out.bindings[id.index()] = Some(b.clone());
            }
        }
        if let Expr::Var(v) = m.expr(e) {
            o.out.vars[v.index()].expr = id;
            if s.shape.planned[i] {
                o.out.vars[v.index()].device = input[i].clone();
            }
        }
    }
    for (fi, func) in m.funcs.iter().enumerate() {
        let of = &mut o.out.funcs[fi];
        of.body = o.map[func.body.index()];
        of.first_expr = ExprId(out_start.get(func.first_expr.index()).copied().unwrap_or(0));
        if s.shape.planned[func.body.index()] && !is_unplanned(func) {
            of.result_device = input[func.body.index()].clone();
        }
    }
    // The inside of an unplanned function literal lives where the literal is.
    for i in 0..n {
        if let Expr::Func(f) = m.expr(ExprId(i as u32)) {
            if s.shape.planned[i] && is_unplanned(m.func(*f)) {
                let lit = o.map[i];
                let d = o.devices[lit.index()].clone();
                let first = o.out.func(*f).first_expr.index();
                for slot in o.devices.get_mut(first..lit.index()).into_iter().flatten() {
                    *slot = d.clone();
                }
            }
        }
    }
    (o.out, o.devices)
}

fn planned_expr(s: &mut Solution, o: &mut Out, e: ExprId) -> ExprId {
    let m = s.m;
    let here = o.input[e.index()].clone();
    match m.expr(e) {
        Expr::Call {
            callee,
            args,
            attrs,
        } => match annotation(m, e) {
            Some(Annotation::OnDevice { .. }) => o.edge(args[0], &here),
            Some(Annotation::Copy { .. }) => {
                let a = args[0];
                let src = o.input[a.index()].clone();
                if src == here || src.is_unconstrained() || here.is_unconstrained() {
                    return o.edge(a, &here);
                }
                let child = o.map[a.index()];
                o.annotation_call(
                    Op::DeviceCopy,
                    child,
                    e,
                    &[
                        ("src_virtual_device", AttrValue::Device(src)),
                        ("dst_virtual_device", AttrValue::Device(here)),
                    ],
                )
            }
            None => capture_call(s, o, e, callee, args, attrs),
        },
        Expr::Tuple(fields) => {
            let fields = fields.iter().map(|&f| o.edge(f, &here)).collect();
            o.push(Expr::Tuple(fields), e, here)
        }
        Expr::Proj { tuple, index } => {
            let tuple = o.edge(*tuple, &here);
            o.push(
                Expr::Proj {
                    tuple,
                    index: *index,
                },
                e,
                here,
            )
        }
        Expr::If {
            cond,
            then_branch,
            else_branch,
        } => {
            let x = Expr::If {
                cond: o.edge(*cond, &here),
                then_branch: o.edge(*then_branch, &here),
                else_branch: o.edge(*else_branch, &here),
            };
            o.push(x, e, here)
        }
        Expr::Let { var, value, body } => {
            let var_device = o.input[m.var(*var).expr.index()].clone();
            let x = Expr::Let {
                var: *var,
                value: o.edge(*value, &var_device),
                body: o.edge(*body, &here),
            };
            o.push(x, e, here)
        }
        other => {
            let x = remap(other, &o.map);
            o.push(x, e, here)
        }
    }
}

/// An ordinary call: each argument is copied to where its parameter is, and keeps a fixed
/// `on_device` when the lexical rules could not tell where that is.
fn capture_call(
    s: &mut Solution,
    o: &mut Out,
    e: ExprId,
    callee: &Callee,
    args: &[ExprId],
    attrs: &Attrs,
) -> ExprId {
    let m = s.m;
    let here = o.input[e.index()].clone();
    let (callee, known) = match callee {
        Callee::Op(op) => (Callee::Op(*op), None),
        Callee::Expr(c) => {
            let known = if primitive_callee(m, &s.shape, *c) {
                None
            } else {
                Some((*c, known_func(m, &s.shape, *c).is_some()))
            };
            (Callee::Expr(o.map[c.index()]), known)
        }
    };
    let mut new_args = Vec::with_capacity(args.len());
    for (i, &a) in args.iter().enumerate() {
        let (expected, lexical) = match known {
            Some((c, is_known)) => {
                let want = s.param_device(c, i).unwrap_or_else(|| here.clone());
                let lexical = if is_known { want.clone() } else { here.clone() };
                (want, lexical)
            }
            None => (here.clone(), here.clone()),
        };
        let mut child = o.edge(a, &expected);
        if expected != lexical && !expected.is_unconstrained() && !o.is_function(a) {
            child = o.annotation_call(
                Op::OnDevice,
                child,
                a,
                &[
                    ("constrain_result", AttrValue::Bool(true)),
                    ("virtual_device", AttrValue::Device(expected)),
                ],
            );
        }
        new_args.push(child);
    }
    let x = Expr::Call {
        callee,
        args: new_args,
        attrs: attrs.clone(),
    };
    o.push(x, e, here)
}

/// An expression with its operands renamed through `map` (function bodies are renamed later).
fn remap(e: &Expr, map: &[ExprId]) -> Expr {
    let r = |x: &ExprId| map[x.index()];
    match e {
        Expr::Call {
            callee,
            args,
            attrs,
        } => Expr::Call {
            callee: match callee {
                Callee::Op(op) => Callee::Op(*op),
                Callee::Expr(c) => Callee::Expr(r(c)),
            },
            args: args.iter().map(r).collect(),
            attrs: attrs.clone(),
        },
        Expr::Tuple(fields) => Expr::Tuple(fields.iter().map(r).collect()),
        Expr::Proj { tuple, index } => Expr::Proj {
            tuple: r(tuple),
            index: *index,
        },
        Expr::Let { var, value, body } => Expr::Let {
            var: *var,
            value: r(value),
            body: r(body),
        },
        Expr::If {
            cond,
            then_branch,
            else_branch,
        } => Expr::If {
            cond: r(cond),
            then_branch: r(then_branch),
            else_branch: r(else_branch),
        },
        other => other.clone(),
    }
}
