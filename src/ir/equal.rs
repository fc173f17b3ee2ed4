//! Structural equality of modules, as TVM's `tvm.ir.structural_equal` defines it for the constructs
//! we support: definitions are matched by name, bound variables by position (names do not
//! matter), and expressions as DAGs, so sharing must correspond one to one. Types, attributes,
//! constants and virtual devices (on binders and function results) must be equal.

use super::*;
use std::collections::HashMap;

/// Checks two modules for structural equality; the error describes the first difference.
pub fn modules_equal(a: &Module, b: &Module) -> Result<(), String> {
    modules_correspondence(a, b).map(|_| ())
}

/// Checks two modules for structural equality and returns the pairs of corresponding
/// expressions (every expression reachable from a definition), sorted by the first module's ids.
pub fn modules_correspondence(a: &Module, b: &Module) -> Result<Vec<(ExprId, ExprId)>, String> {
    let names = |m: &Module| {
        let mut v: Vec<String> = m
            .defs
            .iter()
            .map(|(g, _)| m.globals[g.index()].name.clone())
            .collect();
        v.sort();
        v
    };
    let (na, nb) = (names(a), names(b));
    if na != nb {
        return Err(format!("definitions differ: {na:?} vs {nb:?}"));
    }
    let mut cx = Eq {
        a,
        b,
        exprs: HashMap::new(),
        exprs_rev: HashMap::new(),
        vars: HashMap::new(),
    };
    for name in &na {
        let fa = a.def(name).ok_or("missing def")?;
        let fb = b.def(name).ok_or("missing def")?;
        cx.func(fa, fb).map_err(|e| format!("in @{name}: {e}"))?;
    }
    let mut pairs: Vec<(ExprId, ExprId)> = cx.exprs.into_iter().collect();
    pairs.sort();
    Ok(pairs)
}

/// Checks two functions (of the same or different modules) for structural equality, with the
/// same rules as [`modules_equal`]; the error describes the first difference.
pub fn functions_equal(a: &Module, fa: FuncId, b: &Module, fb: FuncId) -> Result<(), String> {
    let mut cx = Eq {
        a,
        b,
        exprs: HashMap::new(),
        exprs_rev: HashMap::new(),
        vars: HashMap::new(),
    };
    cx.func(fa, fb)
}

/// Checks that every meta constant `b` refers to has the same data in both modules: the same
/// bytes, or no data in either. Structural equality compares constants by key, index and type;
/// this compares what they hold. The error names the first constant that differs.
pub fn constant_data_equal(a: &Module, b: &Module) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for e in &b.exprs {
        let Expr::Const(Constant::Meta { key, index, .. }) = e else {
            continue;
        };
        if !seen.insert((key, *index)) {
            continue;
        }
        let k = (key.clone(), *index);
        match (a.meta.data.get(&k), b.meta.data.get(&k)) {
            (None, None) => {}
            (Some(x), Some(y)) if x.0 == y.0 => {}
            (x, y) => {
                let describe = |d: Option<&ConstData>| {
                    d.map_or_else(|| "no data".to_string(), |d| format!("{} bytes", d.0.len()))
                };
                return Err(format!(
                    "the data of `meta[{key}][{index}]` differs: {} vs {}",
                    describe(x),
                    describe(y)
                ));
            }
        }
    }
    Ok(())
}

struct Eq<'a> {
    a: &'a Module,
    b: &'a Module,
    exprs: HashMap<ExprId, ExprId>,
    exprs_rev: HashMap<ExprId, ExprId>,
    vars: HashMap<VarId, VarId>,
}

impl Eq<'_> {
    fn bind_var(&mut self, va: VarId, vb: VarId) -> Result<(), String> {
        let (x, y) = (self.a.var(va), self.b.var(vb));
        if x.annotation != y.annotation {
            return Err(format!("annotations of %{} and %{} differ", x.name, y.name));
        }
        if x.device != y.device {
            return Err(format!(
                "devices of %{} and %{} differ: {} vs {}",
                x.name, y.name, x.device, y.device
            ));
        }
        self.vars.insert(va, vb);
        Ok(())
    }

    fn func(&mut self, fa: FuncId, fb: FuncId) -> Result<(), String> {
        let (x, y) = (self.a.func(fa), self.b.func(fb));
        if x.params.len() != y.params.len() {
            return Err("parameter counts differ".into());
        }
        for (&p, &q) in x.params.iter().zip(&y.params) {
            self.bind_var(p, q)?;
        }
        if x.ret_type != y.ret_type {
            return Err("result types differ".into());
        }
        if x.result_device != y.result_device {
            return Err(format!(
                "result devices differ: {} vs {}",
                x.result_device, y.result_device
            ));
        }
        let mut ax = x.attrs.clone();
        let mut ay = y.attrs.clone();
        ax.sort_by(|p, q| p.0.cmp(&q.0));
        ay.sort_by(|p, q| p.0.cmp(&q.0));
        if ax != ay {
            return Err("function attributes differ".into());
        }
        self.exprs_dag(x.body, y.body)
    }

    fn exprs_dag(&mut self, ra: ExprId, rb: ExprId) -> Result<(), String> {
        let mut work = vec![(ra, rb)];
        while let Some((ea, eb)) = work.pop() {
            match (self.exprs.get(&ea), self.exprs_rev.get(&eb)) {
                (Some(&m), _) if m == eb => continue,
                (None, None) => {}
                _ => {
                    return Err(format!(
                        "sharing differs at expression {} vs {}",
                        ea.0, eb.0
                    ))
                }
            }
            self.exprs.insert(ea, eb);
            self.exprs_rev.insert(eb, ea);
            self.node(ea, eb, &mut work)?;
        }
        Ok(())
    }

    fn node(
        &mut self,
        ea: ExprId,
        eb: ExprId,
        work: &mut Vec<(ExprId, ExprId)>,
    ) -> Result<(), String> {
        let (a, b) = (self.a, self.b);
        let differ = || {
            Err(format!(
                "expressions differ: {:?} vs {:?}",
                a.expr(ea),
                b.expr(eb)
            ))
        };
        match (a.expr(ea), b.expr(eb)) {
            (Expr::Var(x), Expr::Var(y)) => match self.vars.get(x) {
                Some(m) if m == y => Ok(()),
                _ => Err(format!(
                    "variables %{} and %{} do not correspond",
                    a.var(*x).name,
                    b.var(*y).name
                )),
            },
            (Expr::Global(x), Expr::Global(y)) => {
                if a.globals[x.index()].name == b.globals[y.index()].name {
                    Ok(())
                } else {
                    differ()
                }
            }
            (Expr::Const(x), Expr::Const(y)) => {
                if x == y {
                    Ok(())
                } else {
                    differ()
                }
            }
            (Expr::Op(x), Expr::Op(y)) => {
                if x == y {
                    Ok(())
                } else {
                    differ()
                }
            }
            (
                Expr::Call {
                    callee: ca,
                    args: aa,
                    attrs: ta,
                },
                Expr::Call {
                    callee: cb,
                    args: ab,
                    attrs: tb,
                },
            ) => {
                if aa.len() != ab.len() || ta != tb {
                    return differ();
                }
                match (ca, cb) {
                    (Callee::Op(x), Callee::Op(y)) if x == y => {}
                    (Callee::Expr(x), Callee::Expr(y)) => work.push((*x, *y)),
                    _ => return differ(),
                }
                work.extend(aa.iter().copied().zip(ab.iter().copied()));
                Ok(())
            }
            (Expr::Tuple(x), Expr::Tuple(y)) => {
                if x.len() != y.len() {
                    return differ();
                }
                work.extend(x.iter().copied().zip(y.iter().copied()));
                Ok(())
            }
            (Expr::Proj { tuple: x, index: i }, Expr::Proj { tuple: y, index: j }) => {
                if i != j {
                    return differ();
                }
                work.push((*x, *y));
                Ok(())
            }
            (
                Expr::Let {
                    var: vx,
                    value: x,
                    body: bx,
                },
                Expr::Let {
                    var: vy,
                    value: y,
                    body: by,
                },
            ) => {
                self.bind_var(*vx, *vy)?;
                work.push((*bx, *by));
                work.push((*x, *y));
                Ok(())
            }
            (
                Expr::If {
                    cond: c1,
                    then_branch: t1,
                    else_branch: e1,
                },
                Expr::If {
                    cond: c2,
                    then_branch: t2,
                    else_branch: e2,
                },
            ) => {
                work.extend([(*e1, *e2), (*t1, *t2), (*c1, *c2)]);
                Ok(())
            }
            (Expr::Func(fx), Expr::Func(fy)) => {
                let (x, y) = (a.func(*fx), b.func(*fy));
                if x.params.len() != y.params.len()
                    || x.ret_type != y.ret_type
                    || x.result_device != y.result_device
                {
                    return differ();
                }
                let mut ax = x.attrs.clone();
                let mut ay = y.attrs.clone();
                ax.sort_by(|p, q| p.0.cmp(&q.0));
                ay.sort_by(|p, q| p.0.cmp(&q.0));
                if ax != ay {
                    return differ();
                }
                for (&p, &q) in x.params.iter().zip(&y.params) {
                    self.bind_var(p, q)?;
                }
                work.push((x.body, y.body));
                Ok(())
            }
            _ => differ(),
        }
    }
}
