//! Graph simplification before partitioning, in the spirit of TVM's `SimplifyInference`,
//! `FoldScaleAxis` and `FoldConstant` and of ONNX Runtime's load-time graph optimizations
//! (`docs/simplify.md`).
//!
//! [`simplify`] rewrites `@main` of a typed module whose body is a dataflow graph of operator
//! calls, constants, tuples and projections:
//!
//! * batch norm at inference folded into the preceding convolution's weights and bias (or into a
//!   `multiply` and an `add` when no convolution can take it),
//! * per-channel scales (`multiply`) and shifts (`add`) folded into the preceding convolution or
//!   dense layer,
//! * calls whose arguments are all constants evaluated with the reference interpreter (bounded:
//!   a result larger than its arguments and than [`SMALL_RESULT_BYTES`] stays a call),
//! * `nn.layer_norm` on float32 expanded into its reductions and elementwise operators, as
//!   TVM's `SimplifyInference` does (it has no fusion kind, so no native candidate covers it),
//! * identities dropped (`copy`, `nn.dropout`, reshapes to the same type, casts to the same
//!   dtype, multiplying by one, adding zero),
//! * dead code removed.
//!
//! Each pass rebuilds the function from its arena (operands first, so no recursion), with the
//! rewrites deciding from the structure and the number of users of the module it reads; passes
//! repeat until none fires. Folded values become metadata constants that carry their data, so
//! the printed model runs on the same numbers. Constants without data are drawn from the seed by
//! their metadata index and their role (`runtime::exec::data`): their values are taken from the
//! original module as it would draw them, and a constant whose role the rewrites change (a batch
//! norm's variance left to a `multiply`, say) is bound to the value the original drew.

mod fold;
#[cfg(test)]
mod tests;

use crate::ir::{
    Callee, ConstData, Constant, DType, Expr, ExprId, FuncId, Function, Global, GlobalId,
    MetaObject, Module, Scalar, TensorType, Type, Var, VarId,
};
use crate::runtime::exec::data::{ModuleWeights, Weights};
use crate::runtime::exec::kernel::ConstantSource;
use crate::runtime::exec::tensor::{Shape, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The metadata key of the constants simplification makes.
const CONSTANT_KEY: &str = "relay.Constant";

/// A folded constant may always be this large, even when larger than its arguments.
pub const SMALL_RESULT_BYTES: u64 = 64 << 10;

/// No folded constant is larger than this.
pub const MAX_RESULT_BYTES: u64 = 256 << 20;

/// Passes before simplification stops, even if a rewrite still fires.
const MAX_PASSES: usize = 8;

/// How simplification runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The seed that draws the constants without data (as `collage run --seed` does).
    pub seed: u64,
}

/// What simplification did: operator calls before and after, and how often each rewrite fired.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// Operator calls of `@main` before (unreachable ones included).
    pub ops_before: usize,
    /// Operator calls of `@main` after.
    pub ops_after: usize,
    /// Batch norms folded into a convolution's weights and bias.
    pub batch_norm_into_conv: usize,
    /// Batch norms turned into a `multiply` and an `add`.
    pub batch_norm_to_scale_shift: usize,
    /// Per-channel `multiply`s folded into weights.
    pub scales_into_weights: usize,
    /// Per-channel `add`s folded into a bias.
    pub shifts_into_bias: usize,
    /// Calls with constant arguments evaluated.
    pub constants_folded: usize,
    /// `nn.layer_norm` calls expanded into reductions and elementwise operators.
    pub layer_norms_expanded: usize,
    /// Identities dropped.
    pub identities_removed: usize,
    /// Unreachable operator calls removed.
    pub dead_removed: usize,
    /// Constants drawn from the seed whose value was bound, because their role changed.
    pub constants_bound: usize,
    /// Why the module was left as it is, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl Report {
    /// Whether any rewrite fired.
    pub fn changed(&self) -> bool {
        self.ops_before != self.ops_after
            || self.batch_norm_into_conv
                + self.batch_norm_to_scale_shift
                + self.scales_into_weights
                + self.shifts_into_bias
                + self.constants_folded
                + self.layer_norms_expanded
                + self.identities_removed
                + self.dead_removed
                > 0
    }

    /// The rewrites that fired, as `name count` pairs (for reports).
    pub fn rewrites(&self) -> Vec<(&'static str, usize)> {
        [
            ("batch norm into conv", self.batch_norm_into_conv),
            ("batch norm to scale+shift", self.batch_norm_to_scale_shift),
            ("scale into weights", self.scales_into_weights),
            ("shift into bias", self.shifts_into_bias),
            ("constant folded", self.constants_folded),
            ("layer norm expanded", self.layer_norms_expanded),
            ("identity removed", self.identities_removed),
            ("dead removed", self.dead_removed),
            ("constant bound", self.constants_bound),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect()
    }

    /// One line: `N → M operators (rewrite n, ...)`.
    pub fn summary(&self) -> String {
        if let Some(why) = &self.skipped {
            return format!("skipped: {why}");
        }
        let parts: Vec<String> = self
            .rewrites()
            .iter()
            .map(|(n, c)| format!("{n} {c}"))
            .collect();
        format!(
            "{} → {} operators{}",
            self.ops_before,
            self.ops_after,
            if parts.is_empty() {
                String::new()
            } else {
                format!(" ({})", parts.join(", "))
            }
        )
    }
}

/// Why a module is left as given, or `None` when simplification applies to it: `@main` must be
/// the only function, and its body a dataflow graph of operator calls, constants, variables,
/// tuples and projections, without device annotations.
fn unsupported(m: &Module) -> Option<String> {
    let Some(main) = m.main() else {
        return Some("the module has no `@main`".into());
    };
    if m.funcs.len() != 1 || m.defs.len() != 1 {
        return Some("the module has functions besides `@main`".into());
    }
    if crate::analysis::devices::has_annotations(m) {
        return Some("the module has device annotations".into());
    }
    for e in live(m, m.func(main).body)
        .iter()
        .enumerate()
        .filter(|(_, l)| **l)
        .map(|(i, _)| ExprId(i as u32))
    {
        match m.expr(e) {
            Expr::Var(_) | Expr::Const(_) | Expr::Tuple(_) | Expr::Proj { .. } => {}
            Expr::Call {
                callee: Callee::Op(op),
                ..
            } if !crate::ops::is_custom(*op) => {}
            other => return Some(format!("`@main` has a `{}` expression", other.kind_name())),
        }
        if m.ty(e).is_none() {
            return Some("the module is not typed".into());
        }
    }
    None
}

/// Which expressions the body reaches.
fn live(m: &Module, body: ExprId) -> Vec<bool> {
    let mut live = vec![false; m.exprs.len()];
    live[body.index()] = true;
    for i in (0..m.exprs.len()).rev() {
        if live[i] {
            m.for_each_operand(ExprId(i as u32), |o| live[o.index()] = true);
        }
    }
    live
}

/// The operator calls among the live expressions.
fn count_ops(m: &Module, live: &[bool]) -> usize {
    (0..m.exprs.len())
        .filter(|&i| live[i] && m.is_op_call(ExprId(i as u32)))
        .count()
}

/// Simplifies `m` (typed). Returns the simplified module and what was done; a module
/// simplification does not apply to, or on which no rewrite fires, comes back as it is (with
/// [`Report::skipped`] saying why, in the first case). An error is an internal one: a rewritten
/// module that does not type-check.
pub fn simplify(m: &Module, opts: &Options) -> Result<(Module, Report), String> {
    let mut report = Report::default();
    if let Some(why) = unsupported(m) {
        report.skipped = Some(why);
        return Ok((m.clone(), report));
    }
    let main = m.main().ok_or("no @main")?;
    let live0 = live(m, m.func(main).body);
    report.ops_before = count_ops(m, &(0..m.exprs.len()).map(|_| true).collect::<Vec<_>>());
    let weights = Weights::new(opts.seed);
    let values = Values::new(m, weights.for_module(m));
    let mut cur = m.clone();
    let mut first = true;
    for _ in 0..MAX_PASSES {
        let before = report.clone();
        let next = pass(&cur, &values, &mut report)?;
        let fired = report != before;
        if first {
            report.dead_removed = report.ops_before - count_ops(m, &live0);
            first = false;
        }
        cur = next;
        if !fired {
            break;
        }
    }
    let out_main = cur.main().ok_or("no @main after simplification")?;
    report.ops_after = count_ops(&cur, &live(&cur, cur.func(out_main).body));
    if !report.changed() {
        return Ok((m.clone(), report));
    }
    // Inputs are drawn by name and role; a rewrite that changed an input's role would change
    // its values, so such a simplification is not used.
    let new_weights = weights.for_module(&cur);
    for &p in &m.func(main).params {
        let name = &m.var(p).name;
        if values.weights.input_role(name) != new_weights.input_role(name) {
            let mut r = Report {
                ops_before: report.ops_before,
                ops_after: report.ops_before,
                ..Report::default()
            };
            r.skipped = Some(format!("it would change how input `{name}` is drawn"));
            return Ok((m.clone(), r));
        }
    }
    match bind_changed_roles(&mut cur, &values, &new_weights) {
        Ok(n) => report.constants_bound = n,
        Err(why) => {
            let r = Report {
                ops_before: report.ops_before,
                ops_after: report.ops_before,
                skipped: Some(why),
                ..Report::default()
            };
            return Ok((m.clone(), r));
        }
    }
    Ok((cur, report))
}

/// Binds every constant without data whose role differs from the original's to the value the
/// original drew for it; returns how many were bound.
fn bind_changed_roles(
    m: &mut Module,
    values: &Values<'_>,
    new_weights: &ModuleWeights<'_>,
) -> Result<usize, String> {
    let mut todo = BTreeMap::new();
    for e in &m.exprs {
        if let Expr::Const(Constant::Meta { key, index, .. }) = e {
            let k = (key.clone(), *index);
            if m.meta.data.contains_key(&k) {
                continue;
            }
            if values.weights.constant_role(key, *index) != new_weights.constant_role(key, *index) {
                todo.insert(k, ());
            }
        }
    }
    for (k, ()) in &todo {
        let big = m.exprs.iter().any(|e| match e {
            Expr::Const(c @ Constant::Meta { key, index, .. }) => {
                (key, *index) == (&k.0, k.1)
                    && Shape::of(&c.ty()).is_none_or(|s| s.bytes() > MAX_RESULT_BYTES)
            }
            _ => false,
        });
        if big {
            return Err(format!(
                "`meta[{}][{}]` would have to be bound, and it is larger than {MAX_RESULT_BYTES} bytes",
                k.0, k.1
            ));
        }
        let t = values.original(&k.0, k.1)?;
        m.meta.data.insert(
            k.clone(),
            ConstData(crate::runtime::exec::data::tensor_bytes(t)),
        );
    }
    Ok(todo.len())
}

/// The values of constants: those with data from their bytes, the others as the original module
/// draws them from the seed.
struct Values<'w> {
    original: &'w Module,
    weights: ModuleWeights<'w>,
    /// An expression of the original module for each metadata constant it refers to.
    exprs: HashMap<(String, u32), ExprId>,
}

impl<'w> Values<'w> {
    fn new(original: &'w Module, weights: ModuleWeights<'w>) -> Values<'w> {
        let mut exprs = HashMap::new();
        for (i, e) in original.exprs.iter().enumerate() {
            if let Expr::Const(Constant::Meta { key, index, .. }) = e {
                exprs
                    .entry((key.clone(), *index))
                    .or_insert(ExprId(i as u32));
            }
        }
        Values {
            original,
            weights,
            exprs,
        }
    }

    /// The value the original module gives `meta[key][index]`.
    fn original(&self, key: &str, index: u32) -> Result<Arc<Tensor>, String> {
        let e = self
            .exprs
            .get(&(key.to_string(), index))
            .ok_or_else(|| format!("`meta[{key}][{index}]` is not in the original module"))?;
        self.weights.constant(self.original, *e)
    }

    /// The value of constant expression `e` of `m`, if it is one and its value can be made
    /// (constants larger than [`MAX_RESULT_BYTES`] are never materialised: no rewrite uses them).
    fn of(&self, m: &Module, e: ExprId) -> Option<Arc<Tensor>> {
        if let Expr::Const(c) = m.expr(e) {
            if Shape::of(&c.ty()).is_none_or(|s| s.bytes() > MAX_RESULT_BYTES) {
                return None;
            }
        }
        match m.expr(e) {
            Expr::Const(Constant::Scalar { value, dtype }) => {
                crate::runtime::exec::data::scalar_tensor(*value, *dtype)
                    .ok()
                    .map(Arc::new)
            }
            Expr::Const(Constant::Meta { key, index, ty }) => {
                if let Some(d) = m.meta.data.get(&(key.clone(), *index)) {
                    let s = Shape::of(ty)?;
                    let t = Tensor::from_bytes(s.dtype, &s.dims, &d.0)
                        .ok()
                        .map(Arc::new);
                    // Pages of a mapped model file, once copied, leave the resident memory.
                    crate::util::memory::release(&d.0);
                    return t;
                }
                self.original(key, *index).ok()
            }
            _ => None,
        }
    }
}

/// One pass: rebuilds `@main` from its live expressions, applying the rewrites.
fn pass(m: &Module, values: &Values<'_>, report: &mut Report) -> Result<Module, String> {
    let main = m.main().ok_or("no @main")?;
    let f = m.func(main);
    let live = live(m, f.body);
    let mut users = vec![0u32; m.exprs.len()];
    users[f.body.index()] += 1;
    for i in (0..m.exprs.len()).filter(|&i| live[i]) {
        m.for_each_operand(ExprId(i as u32), |o| users[o.index()] += 1);
    }
    let mut b = Builder::new(m);
    let mut params = Vec::with_capacity(f.params.len());
    for &p in &f.params {
        let v = b.var(m.var(p));
        params.push(v);
        b.map[m.var(p).expr.index()] = Some(b.out.var(v).expr);
    }
    let mut cx = fold::Cx {
        m,
        values,
        users: &users,
        b,
        report,
    };
    for (i, _) in live.iter().enumerate().filter(|(_, l)| **l) {
        let e = ExprId(i as u32);
        if matches!(m.expr(e), Expr::Var(_)) {
            if cx.b.map[i].is_none() {
                return Err("a variable of @main is not a parameter".into());
            }
            continue;
        }
        let new = cx.rewrite(e)?;
        cx.b.map[i] = Some(new);
        // The binding names (`%12`, or an ONNX output name) go to the expression that now
        // computes the value, so `--explain` and the report still find them.
        if cx.b.out.bindings[new.index()].is_none() {
            cx.b.out.bindings[new.index()] = m.bindings[i].clone();
        }
    }
    let body = cx.b.get(f.body)?;
    let mut out = cx.b.out;
    let fid = FuncId(0);
    out.funcs.push(Function {
        params,
        ret_type: f.ret_type.clone(),
        ret_span: f.ret_span,
        attrs: f.attrs.clone(),
        result_device: f.result_device.clone(),
        body,
        first_expr: ExprId(0),
        span: f.span,
    });
    let g = GlobalId(0);
    out.globals.push(Global {
        name: "main".into(),
        def: Some(fid),
        span: m.globals.first().map_or(f.span, |g| g.span),
    });
    out.defs.push((g, fid));
    crate::analysis::typeck::check(&mut out).map_err(|d| {
        let msg: Vec<String> = d.iter().map(|d| d.message.clone()).collect();
        format!(
            "the simplified module does not type-check: {}",
            msg.join("; ")
        )
    })?;
    Ok(out)
}

/// The module being built by a pass: the new arena, and the expression each old one became.
pub(crate) struct Builder {
    out: Module,
    map: Vec<Option<ExprId>>,
    /// The next free index under [`CONSTANT_KEY`].
    next_index: u32,
}

impl Builder {
    fn new(m: &Module) -> Builder {
        let mut out = Module::new();
        out.meta = m.meta.clone();
        let mut next = out.meta.objects.get(CONSTANT_KEY).map_or(0, Vec::len) as u32;
        for e in &m.exprs {
            if let Expr::Const(Constant::Meta { key, index, .. }) = e {
                if key == CONSTANT_KEY {
                    next = next.max(index + 1);
                }
            }
        }
        Builder {
            out,
            map: vec![None; m.exprs.len()],
            next_index: next,
        }
    }

    fn var(&mut self, v: &Var) -> VarId {
        let id = VarId(self.out.vars.len() as u32);
        let expr = self.out.push(Expr::Var(id), v.span);
        self.out.vars.push(Var {
            name: v.name.clone(),
            annotation: v.annotation.clone(),
            device: v.device.clone(),
            span: v.span,
            expr,
        });
        id
    }

    /// The new expression of old expression `e`.
    fn get(&self, e: ExprId) -> Result<ExprId, String> {
        self.map[e.index()].ok_or_else(|| "an operand was not rebuilt".to_string())
    }

    fn push(&mut self, e: Expr, span: crate::source::Span) -> ExprId {
        self.out.push(e, span)
    }

    /// A constant holding `t`: a literal for a scalar of a common dtype, else a metadata
    /// constant carrying its data.
    fn constant(&mut self, t: Tensor, span: crate::source::Span) -> ExprId {
        let dtype = t.dtype();
        if t.shape().is_empty() {
            let value = if dtype == DType::F32 || dtype == DType::F64 {
                Some(Scalar::Float(t.get_f64(0)))
            } else if dtype == DType::I32 || dtype == DType::I64 {
                Some(Scalar::Int(t.get_i64(0)))
            } else if dtype == DType::BOOL {
                Some(Scalar::Bool(t.get_f64(0) != 0.0))
            } else {
                None
            };
            if let Some(value) = value {
                return self.push(Expr::Const(Constant::Scalar { value, dtype }), span);
            }
        }
        let dims: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
        let ty = TensorType::new(&dims, dtype);
        let index = self.next_index;
        self.next_index += 1;
        let list = self
            .out
            .meta
            .objects
            .entry(CONSTANT_KEY.into())
            .or_default();
        while list.len() < index as usize {
            list.push(MetaObject::UntypedConstant);
        }
        list.push(MetaObject::Constant(ty.clone()));
        // The metadata shares the tensor's storage, and so do the weights made from it
        // (`exec::data::tensor_bytes`): one copy of a folded constant.
        self.out.meta.data.insert(
            (CONSTANT_KEY.into(), index),
            ConstData(crate::runtime::exec::data::tensor_bytes(Arc::new(t))),
        );
        self.push(
            Expr::Const(Constant::Meta {
                key: CONSTANT_KEY.into(),
                index,
                ty,
            }),
            span,
        )
    }
}

/// The static tensor type of expression `e` of a typed module.
fn shape_of(m: &Module, e: ExprId) -> Option<Shape> {
    match m.ty(e)? {
        Type::Tensor(t) => Shape::of(t),
        _ => None,
    }
}
