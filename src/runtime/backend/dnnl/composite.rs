//! What a `dnnl.*` composite computes, read from its body: one anchor primitive (a convolution,
//! an inner product, a matmul, a normalization, a softmax, a pooling, an eltwise or a binary
//! operation) and the post-ops after it (a bias, a folded batch norm, a `sum`, binary operations
//! with another tensor, eltwise functions), in order.
//!
//! The body is read structurally, not from the composite's name, so TVM's entries and
//! collage's own map the same way (docs/backends.md gives the table). The literal constants of
//! the GELU, swish and mish chains and of GPT-2's layer norm are checked: a chain whose
//! constants are not the function oneDNN computes is unsupported. Everything must be float32
//! (oneDNN 2.6 has no float16 kernels on this CPU, and TVM's table entries check no dtypes).

use crate::ir::{AttrValue, Callee, DType, Expr, ExprId, FuncId, Module, Type, VarId};
use crate::ops::geom::{self, AxisError, ConvKind, PoolKind, PoolReduce, PoolWindow};
use crate::ops::Op;
use crate::runtime::backend::byoc::let_values;
use crate::runtime::exec::kernel::ConstantSource;
use crate::runtime::exec::tensor::Tensor;
use crate::runtime::ffi::dnnl::Alg;
use std::collections::HashMap;
use std::sync::Arc;

/// Why a composite cannot be mapped: lowercase, no trailing period.
pub type Reason = String;

/// A tensor read out of a dense buffer: its dims and its strides (in elements).
pub type View = (Vec<i64>, Vec<i64>);

/// An input of the anchor or of a post-op: a parameter of the composite, or a constant
/// written inside it.
#[derive(Clone, Debug)]
pub enum Operand {
    /// Parameter `i` of the composite function.
    Param(usize),
    /// A constant of the body.
    Const(Arc<Tensor>),
}

/// A convolution (or, `transposed`, a deconvolution) in oneDNN's terms.
#[derive(Clone, Debug)]
pub struct Conv {
    /// Whether it is a transposed convolution.
    pub transposed: bool,
    /// Groups (1: none).
    pub groups: usize,
    /// Strides per spatial axis.
    pub strides: Vec<i64>,
    /// Dilation per spatial axis, minus one (oneDNN's count).
    pub dilates: Vec<i64>,
    /// Padding before each spatial axis.
    pub pad_l: Vec<i64>,
    /// Padding after each spatial axis (for a transposed convolution, `output_padding` is
    /// already taken off).
    pub pad_r: Vec<i64>,
    /// The data, `[N, C, spatial...]`.
    pub data: Operand,
    /// The weight as Relay stores it: `[O, C/g, k...]`, transposed `[C, O/g, k...]`.
    pub weight: Operand,
    /// The data's shape.
    pub data_shape: Vec<usize>,
    /// The weight's shape.
    pub weight_shape: Vec<usize>,
    /// The result's shape `[N, O, spatial...]`.
    pub out_shape: Vec<usize>,
}

/// The primitive a composite runs.
#[derive(Clone, Debug)]
pub enum Anchor {
    /// `nn.conv1d/2d/3d`, `nn.conv2d/3d_transpose`.
    Conv(Conv),
    /// `nn.dense(x [..., K], W [N, K])`.
    Dense {
        /// x.
        data: Operand,
        /// W.
        weight: Operand,
        /// x's shape.
        data_shape: Vec<usize>,
        /// W's shape.
        weight_shape: Vec<usize>,
    },
    /// `nn.batch_matmul(A, B, transpose_a, transpose_b)` (3-D).
    BatchMatmul {
        /// A.
        a: Operand,
        /// B.
        b: Operand,
        /// Whether A is stored `[Bt, K, M]`.
        ta: bool,
        /// Whether B is stored `[Bt, N, K]`.
        tb: bool,
        /// A's shape as stored.
        a_shape: Vec<usize>,
        /// B's shape as stored.
        b_shape: Vec<usize>,
        /// Where reshapes and transposes inside the composite lead from the operand to A: A
        /// read out of the operand's dense buffer as (dims, strides in elements). The dims are
        /// A's shape, or A's batch axis split in several (a reshape that merged them is not a
        /// strided view). `None`: A is the operand, dense.
        a_view: Option<View>,
        /// B, likewise.
        b_view: Option<View>,
        /// The result's shape `[Bt, M, N]`.
        out_shape: Vec<usize>,
    },
    /// `nn.batch_norm(...).0` with its statistics (global statistics).
    BatchNorm {
        /// The data, channels on axis 1.
        data: Operand,
        /// γ (used only with `scale`).
        gamma: Operand,
        /// β (used only with `center`).
        beta: Operand,
        /// μ.
        mean: Operand,
        /// σ².
        var: Operand,
        /// ε.
        eps: f32,
        /// Whether β is added.
        center: bool,
        /// Whether γ multiplies.
        scale: bool,
        /// The data's shape.
        shape: Vec<usize>,
    },
    /// Layer normalization over the last axis (`nn.layer_norm`, or GPT-2's decomposed form).
    LayerNorm {
        /// The data.
        data: Operand,
        /// γ, if it scales.
        gamma: Option<Operand>,
        /// β, if it shifts.
        beta: Option<Operand>,
        /// ε.
        eps: f32,
        /// The data's shape.
        shape: Vec<usize>,
    },
    /// `nn.softmax` over `axis`.
    Softmax {
        /// The data.
        data: Operand,
        /// The axis, in `[0, rank)`.
        axis: usize,
        /// The data's shape.
        shape: Vec<usize>,
    },
    /// 2-D pooling, NCHW.
    Pool {
        /// Max or average (including or excluding the padding).
        alg: Alg,
        /// The data.
        data: Operand,
        /// Window.
        kernel: Vec<i64>,
        /// Strides.
        strides: Vec<i64>,
        /// Padding before.
        pad_l: Vec<i64>,
        /// Padding after.
        pad_r: Vec<i64>,
        /// The data's shape.
        in_shape: Vec<usize>,
        /// The result's shape.
        out_shape: Vec<usize>,
    },
    /// An elementwise function of one tensor.
    Eltwise {
        /// The data.
        data: Operand,
        /// The function.
        alg: Alg,
        /// Its alpha.
        alpha: f32,
        /// Its beta.
        beta: f32,
        /// The data's shape.
        shape: Vec<usize>,
    },
    /// An elementwise binary operation of two tensors (the second broadcasts).
    Binary {
        /// The operation.
        alg: Alg,
        /// The first operand.
        a: Operand,
        /// The second operand.
        b: Operand,
        /// The first operand's shape.
        a_shape: Vec<usize>,
        /// The second operand's shape.
        b_shape: Vec<usize>,
        /// The result's shape.
        out_shape: Vec<usize>,
    },
}

/// A step applied to the anchor's result.
#[derive(Clone, Debug)]
pub enum Post {
    /// The primitive's bias: one value per output channel.
    Bias(Operand),
    /// A batch norm folded into the convolution's weights and bias (constants only).
    FoldBn {
        /// γ.
        gamma: Arc<Tensor>,
        /// β.
        beta: Arc<Tensor>,
        /// μ.
        mean: Arc<Tensor>,
        /// σ².
        var: Arc<Tensor>,
        /// ε.
        eps: f64,
        /// Whether β is added.
        center: bool,
        /// Whether γ multiplies.
        scale: bool,
    },
    /// oneDNN's `sum`: a tensor of the result's full shape added (through the destination).
    Sum(Operand),
    /// A binary post-op with a broadcasting tensor; `shape` is its shape right-aligned to the
    /// result's rank.
    Binary(Alg, Operand, Vec<usize>),
    /// An eltwise post-op.
    Eltwise(Alg, f32, f32),
}

/// A composite read from its body.
#[derive(Clone, Debug)]
pub struct Composite {
    /// The primitive.
    pub anchor: Anchor,
    /// What follows it, in order.
    pub posts: Vec<Post>,
    /// The shape of the anchor's result in Relay's terms (`[..., N]` for a dense layer).
    pub anchor_shape: Vec<usize>,
    /// The composite's result shape (differs from `anchor_shape` after a reshape).
    pub out_shape: Vec<usize>,
}

/// A post-op before it is classified.
enum Raw {
    Elt(Alg, f32, f32),
    Bin(Alg, Operand, Vec<usize>),
    Bn {
        gamma: Operand,
        beta: Operand,
        mean: Operand,
        var: Operand,
        eps: f64,
        center: bool,
        scale: bool,
    },
    Reshape,
}

struct Cx<'a> {
    m: &'a Module,
    consts: &'a dyn ConstantSource,
    params: HashMap<VarId, usize>,
    lets: HashMap<VarId, ExprId>,
}

fn f32_dims(m: &Module, e: ExprId) -> Result<Vec<usize>, Reason> {
    match m.ty(e) {
        Some(Type::Tensor(t)) => {
            if t.dtype != DType::F32 {
                return Err(format!(
                    "the oneDNN backend runs float32 only, and a value here is `{}`",
                    t.dtype
                ));
            }
            t.shape
                .iter()
                .map(|d| d.fixed().and_then(|n| usize::try_from(n).ok()))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| format!("`{t}` has no static shape"))
        }
        Some(other) => Err(format!(
            "a value of type `{other}` where a tensor is expected"
        )),
        None => Err("internal error: an untyped expression".into()),
    }
}

impl Cx<'_> {
    fn resolve(&self, mut e: ExprId) -> ExprId {
        for _ in 0..=self.m.exprs.len() {
            match self.m.expr(e) {
                Expr::Var(v) => match self.lets.get(v) {
                    Some(&val) => e = val,
                    None => return e,
                },
                Expr::Let { body, .. } => e = *body,
                _ => return e,
            }
        }
        e
    }

    /// `e` as an operand (a parameter or a constant), if it is one.
    fn operand(&self, e: ExprId) -> Result<Option<Operand>, Reason> {
        let e = self.resolve(e);
        match self.m.expr(e) {
            Expr::Var(v) => Ok(self.params.get(v).map(|&i| Operand::Param(i))),
            Expr::Const(_) => {
                let t = self.consts.constant(self.m, e)?;
                if t.dtype() != DType::F32 {
                    return Err(format!(
                        "the oneDNN backend runs float32 only, and a constant here is `{}`",
                        t.dtype()
                    ));
                }
                Ok(Some(Operand::Const(t)))
            }
            _ => Ok(None),
        }
    }

    fn must_operand(&self, e: ExprId, what: &str) -> Result<Operand, Reason> {
        self.operand(e)?.ok_or_else(|| {
            format!("the {what} is computed inside the composite (one primitive per composite)")
        })
    }

    /// A scalar constant's value.
    fn scalar(&self, e: ExprId) -> Option<f64> {
        let e = self.resolve(e);
        if !matches!(self.m.expr(e), Expr::Const(_)) {
            return None;
        }
        let t = self.consts.constant(self.m, e).ok()?;
        (t.numel() == 1).then(|| t.get_f64(0))
    }

    /// The operator call at `e`: its operator, arguments (resolved) and the attribute lookup.
    fn call(&self, e: ExprId) -> Option<(Op, Vec<ExprId>, OpAttrs<'_>)> {
        let e = self.resolve(e);
        match self.m.expr(e) {
            Expr::Call {
                callee: Callee::Op(op),
                args,
                attrs,
            } => {
                let def = crate::ops::op(*op);
                Some((
                    def.op,
                    args.iter().map(|&a| self.resolve(a)).collect(),
                    OpAttrs {
                        def,
                        attrs,
                        span_of: e,
                    },
                ))
            }
            _ => None,
        }
    }

    /// The arguments of a call of `op` at `e`.
    fn args_of(&self, e: ExprId, op: Op) -> Option<Vec<ExprId>> {
        match self.call(e) {
            Some((called, args, _)) if called == op => Some(args),
            _ => None,
        }
    }

    /// The two operands of a commutative binary call of `op`, in both orders.
    fn pairs(&self, e: ExprId, op: Op) -> Vec<(ExprId, ExprId)> {
        match self.args_of(e, op).as_deref() {
            Some(&[a, b]) => vec![(a, b), (b, a)],
            _ => Vec::new(),
        }
    }

    fn same(&self, a: ExprId, b: ExprId) -> bool {
        self.resolve(a) == self.resolve(b)
    }

    fn scalar_is(&self, e: ExprId, lo: f64, hi: f64) -> bool {
        self.scalar(e).is_some_and(|v| v >= lo && v <= hi)
    }

    fn unary(&self, e: ExprId, op: Op) -> Option<ExprId> {
        match self.args_of(e, op).as_deref() {
            Some(&[x]) => Some(x),
            _ => None,
        }
    }

    /// GPT-2's tanh GELU: `(x · 0.5) · (tanh((x + x³ · 0.044715) · 0.797885) + 1)`, with its
    /// constants; returns x. `Err` when the shape matches but a constant does not.
    fn gelu_tanh(&self, e: ExprId) -> Result<Option<ExprId>, Reason> {
        for (half_x, rest) in self.pairs(e, Op::Multiply) {
            for (x, half) in self.pairs(half_x, Op::Multiply) {
                for (t, one) in self.pairs(rest, Op::Add) {
                    let Some(u) = self.unary(t, Op::Tanh) else {
                        continue;
                    };
                    for (v, s) in self.pairs(u, Op::Multiply) {
                        for (x2, w) in self.pairs(v, Op::Add) {
                            if !self.same(x, x2) {
                                continue;
                            }
                            for (pw, cubic) in self.pairs(w, Op::Multiply) {
                                let Some(pa) = self.args_of(pw, Op::Power) else {
                                    continue;
                                };
                                if pa.len() != 2 || !self.same(pa[0], x) {
                                    continue;
                                }
                                let ok = self.scalar_is(half, 0.5, 0.5)
                                    && self.scalar_is(one, 1.0, 1.0)
                                    && self.scalar_is(pa[1], 3.0, 3.0)
                                    && self.scalar_is(cubic, 0.044714, 0.044716)
                                    && self.scalar_is(s, 0.797874, 0.797895);
                                return if ok {
                                    Ok(Some(x))
                                } else {
                                    Err("the tanh GELU chain's constants are not GELU's \
                                         (0.5, 1, 3, 0.044715, sqrt(2/pi))"
                                        .into())
                                };
                            }
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// The erf GELU: `(x · (erf(x · 0.707107) + 1)) · 0.5` (the BERT generator) or
    /// `(x · (erf(x / 1.41421) + 1)) · 0.5` (TVM's table); returns x.
    fn gelu_erf(&self, e: ExprId) -> Result<Option<ExprId>, Reason> {
        for (a, half) in self.pairs(e, Op::Multiply) {
            for (x, s) in self.pairs(a, Op::Multiply) {
                for (er, one) in self.pairs(s, Op::Add) {
                    let Some(z) = self.unary(er, Op::Erf) else {
                        continue;
                    };
                    let mut scale_ok = None;
                    for (x2, c) in self.pairs(z, Op::Multiply) {
                        if self.same(x2, x) {
                            scale_ok = Some(self.scalar_is(c, 0.707097, 0.707117));
                        }
                    }
                    if let Some(d) = self.args_of(z, Op::Divide) {
                        if d.len() == 2 && self.same(d[0], x) {
                            scale_ok = Some(self.scalar_is(d[1], 1.414193, 1.414234));
                        }
                    }
                    let Some(scale_ok) = scale_ok else { continue };
                    let ok =
                        scale_ok && self.scalar_is(one, 1.0, 1.0) && self.scalar_is(half, 0.5, 0.5);
                    return if ok {
                        Ok(Some(x))
                    } else {
                        Err(
                            "the erf GELU chain's constants are not GELU's (1/sqrt(2), 1, 0.5)"
                                .into(),
                        )
                    };
                }
            }
        }
        Ok(None)
    }

    /// `x · sigmoid(x)`; returns x.
    fn swish(&self, e: ExprId) -> Option<ExprId> {
        self.pairs(e, Op::Multiply).into_iter().find_map(|(x, s)| {
            self.unary(s, Op::Sigmoid)
                .filter(|&y| self.same(x, y))
                .map(|_| x)
        })
    }

    /// `x · tanh(log(exp(x) + 1))`; returns x.
    fn mish(&self, e: ExprId) -> Result<Option<ExprId>, Reason> {
        for (x, t) in self.pairs(e, Op::Multiply) {
            let Some(l) = self.unary(t, Op::Tanh) else {
                continue;
            };
            let Some(a) = self.unary(l, Op::Log) else {
                continue;
            };
            for (ex, c) in self.pairs(a, Op::Add) {
                if self.unary(ex, Op::Exp).is_some_and(|y| self.same(x, y)) {
                    return if self.scalar_is(c, 1.0, 1.0) {
                        Ok(Some(x))
                    } else {
                        Err("the mish chain adds a constant other than 1 inside the log".into())
                    };
                }
            }
        }
        Ok(None)
    }

    /// A `mean` over the last axis of `x`, keeping it.
    fn last_axis_mean(&self, e: ExprId) -> Option<ExprId> {
        let (op, args, at) = self.call(e)?;
        if op != Op::Mean || args.len() != 1 {
            return None;
        }
        let rank = f32_dims(self.m, args[0]).ok()?.len() as i64;
        let axis = at.get("axis").as_ints()?;
        let ok = (axis == [-1] || axis == [rank - 1])
            && at.get("keepdims").as_bool() == Some(true)
            && at.get("exclude").as_bool() != Some(true);
        ok.then_some(args[0])
    }

    /// GPT-2's layer norm: `((x − mean(x)) / sqrt(mean((x − mean(x))²) + ε)) · γ + β` over
    /// the last axis, `· γ` and `+ β` each optional (simplification removes or folds them).
    fn decomposed_ln(&self, e: ExprId) -> Option<DecomposedLn> {
        if let Some((x, eps)) = self.ln_core(e) {
            return Some((x, None, None, eps));
        }
        for (norm, gamma) in self.pairs(e, Op::Multiply) {
            if let Some((x, eps)) = self.ln_core(norm) {
                return Some((x, Some(gamma), None, eps));
            }
        }
        for (shifted, beta) in self.pairs(e, Op::Add) {
            if let Some((x, eps)) = self.ln_core(shifted) {
                return Some((x, None, Some(beta), eps));
            }
            for (norm, gamma) in self.pairs(shifted, Op::Multiply) {
                if let Some((x, eps)) = self.ln_core(norm) {
                    return Some((x, Some(gamma), Some(beta), eps));
                }
            }
        }
        None
    }

    /// The normalising core at `e`, `(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps)` over
    /// the last axis: `x` and `eps`.
    fn ln_core(&self, e: ExprId) -> Option<(ExprId, f64)> {
        let d = self.args_of(e, Op::Divide)?;
        let [centred, root] = d[..] else { return None };
        let s = self.args_of(centred, Op::Subtract)?;
        let [x, mu] = s[..] else { return None };
        if !self.last_axis_mean(mu).is_some_and(|y| self.same(x, y)) {
            return None;
        }
        let inner = self.unary(root, Op::Sqrt)?;
        for (var, eps) in self.pairs(inner, Op::Add) {
            let Some(sq) = self.last_axis_mean(var) else {
                continue;
            };
            let Some(p) = self.args_of(sq, Op::Power) else {
                continue;
            };
            if p.len() == 2 && self.same(p[0], centred) && self.scalar_is(p[1], 2.0, 2.0) {
                if let Some(eps) = self.scalar(eps).filter(|&v| v > 0.0) {
                    return Some((x, eps));
                }
            }
        }
        None
    }
}

/// A decomposed layer norm: its data, γ and β if present, and ε.
type DecomposedLn = (ExprId, Option<ExprId>, Option<ExprId>, f64);

/// A matmul operand reached from a composite operand through reshapes and transposes (an
/// attention block's split into heads): the operand, and the dims and strides that read the
/// matmul's operand out of the operand's dense buffer, or `None` when there is no such chain.
/// The last reshape may merge the leading axes into the batch axis where their strides do not
/// allow it (heads of several sequences): then the dims keep those axes apart. Any other chain
/// whose result is not a strided view of the buffer cannot be a memory descriptor and is
/// unsupported.
fn strided_operand(cx: &Cx<'_>, e: ExprId, what: &str) -> Result<(Operand, Option<View>), Reason> {
    let m = cx.m;
    let mut chain = Vec::new();
    let mut root = cx.resolve(e);
    while let Some((op, args, at)) = cx.call(root) {
        let step = match op {
            Op::Reshape | Op::ExpandDims | Op::Squeeze => None,
            Op::Transpose => Some(at.get("axes").as_ints().unwrap_or_default()),
            _ => break,
        };
        if chain.len() >= 16 {
            return Err(format!(
                "the {what} is reached through more than 16 reshapes"
            ));
        }
        chain.push((step, f32_dims(m, root)?));
        root = args[0];
    }
    let operand = cx.must_operand(root, what)?;
    if chain.is_empty() {
        return Ok((operand, None));
    }
    let dims = f32_dims(m, root)?;
    let mut d: Vec<i64> = dims.iter().map(|&x| x as i64).collect();
    let mut st = dense_strides(&d);
    let steps = chain.len();
    for (k, (step, out)) in chain.into_iter().rev().enumerate() {
        let out: Vec<i64> = out.iter().map(|&x| x as i64).collect();
        match step {
            None => match view_strides(&d, &st, &out) {
                Some(s) => st = s,
                None if k + 1 == steps && merges_batch(&d, &out) => {
                    return Ok((operand, Some((d, st))))
                }
                None => {
                    return Err(format!(
                        "the {what}'s reshape to {out:?} is not a strided view of its operand"
                    ))
                }
            },
            Some(axes) => {
                let perm = crate::ops::transpose_perm(&axes, d.len())
                    .ok_or_else(|| format!("a transpose of the {what} with axes {axes:?}"))?;
                st = perm.iter().map(|&p| st[p]).collect();
                if perm.iter().map(|&p| d[p]).collect::<Vec<_>>() != out {
                    return Err(format!("a transpose of the {what} to {out:?}"));
                }
            }
        }
        d = out;
    }
    Ok((operand, Some((d, st))))
}

/// Whether reshaping `dims` to the 3-D `out` only merges the axes before the last two into
/// one batch axis.
fn merges_batch(dims: &[i64], out: &[i64]) -> bool {
    let r = dims.len();
    out.len() == 3
        && r >= 3
        && dims[r - 2..] == out[1..]
        && dims[..r - 2].iter().product::<i64>() == out[0]
}

/// Row-major strides of dense `dims`.
pub(crate) fn dense_strides(dims: &[i64]) -> Vec<i64> {
    let mut st = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * dims[i + 1];
    }
    st
}

/// The strides of `new` read from a tensor of `dims` and `strides` with the same elements in
/// the same (row-major) order, if there are such strides: each run of axes that are contiguous
/// with one another must be split into new axes whole.
pub(crate) fn view_strides(dims: &[i64], strides: &[i64], new: &[i64]) -> Option<Vec<i64>> {
    if dims.iter().product::<i64>() != new.iter().product::<i64>() || dims.contains(&0) {
        return None;
    }
    // The runs of axes that are contiguous with one another, innermost first: (size, stride of
    // the run's innermost axis). Axes of size 1 belong to any run.
    let mut runs: Vec<(i64, i64)> = Vec::new();
    for (&n, &s) in dims.iter().zip(strides).rev() {
        if n == 1 {
            continue;
        }
        match runs.last_mut() {
            Some((size, base)) if *base * *size == s => *size *= n,
            _ => runs.push((n, s)),
        }
    }
    let mut out = vec![0i64; new.len()];
    let mut axis = new.len();
    for &(size, base) in &runs {
        let mut have = 1i64;
        while have < size {
            axis = axis.checked_sub(1)?;
            out[axis] = base * have;
            have = have.checked_mul(new[axis])?;
        }
        if have != size {
            return None;
        }
    }
    // What is left are axes of size 1 (any stride will do).
    for a in (0..axis).rev() {
        if new[a] != 1 {
            return None;
        }
        out[a] = out.get(a + 1).map_or(1, |&s| s * new[a + 1]);
    }
    Some(out)
}

/// Attribute lookup of one call.
struct OpAttrs<'a> {
    def: &'static crate::ops::OpDef,
    attrs: &'a crate::ir::Attrs,
    #[allow(dead_code)]
    span_of: ExprId,
}

impl OpAttrs<'_> {
    fn get(&self, name: &str) -> &AttrValue {
        static NONE: AttrValue = AttrValue::None;
        self.attrs.get(self.def.attrs, name).unwrap_or(&NONE)
    }

    fn ints(&self, name: &str) -> Result<Vec<i64>, Reason> {
        self.get(name)
            .as_ints()
            .ok_or_else(|| format!("attribute `{name}` of `{}` is not a list", self.def.name))
    }

    fn str(&self, name: &str) -> &str {
        self.get(name).as_str().unwrap_or("")
    }

    fn bool(&self, name: &str, default: bool) -> bool {
        self.get(name).as_bool().unwrap_or(default)
    }

    fn float(&self, name: &str) -> Result<f64, Reason> {
        self.get(name)
            .as_f64()
            .ok_or_else(|| format!("attribute `{name}` of `{}` is not a number", self.def.name))
    }
}

/// One value per spatial axis from a 1- or n-value attribute.
fn per_axis(v: &[i64], n: usize, what: &str) -> Result<Vec<i64>, Reason> {
    geom::per_axis(v, n, false).map_err(|_| {
        let l = v.len();
        format!("{what} has {l} values for {n} spatial axes")
    })
}

/// TVM's padding: 1 value, one per axis (both sides), or `[before..., after...]`.
fn padding(v: &[i64], n: usize) -> Result<(Vec<i64>, Vec<i64>), Reason> {
    geom::padding(v, n).map_err(|e| match e {
        AxisError::Value(_) => format!("negative padding {v:?}"),
        AxisError::Count(l) => format!("padding has {l} values for {n} spatial axes"),
    })
}

fn conv(
    cx: &Cx<'_>,
    kind: ConvKind,
    e: ExprId,
    args: &[ExprId],
    at: &OpAttrs<'_>,
) -> Result<Anchor, Reason> {
    let name = at.def.name;
    let (nd, transposed) = (kind.spatial, kind.transposed);
    let data_layout = at.str("data_layout");
    let kernel_layout = at.str("kernel_layout");
    let want_kernel = kind.kernel_canon();
    if data_layout != kind.data_canon() || kernel_layout != want_kernel {
        return Err(format!(
            "`{name}` with data layout {data_layout} and kernel layout {kernel_layout} \
             (the backend takes {} and {want_kernel})",
            kind.data_canon()
        ));
    }
    let out_layout = at.str("out_layout");
    if !out_layout.is_empty() && out_layout != data_layout {
        return Err(format!("`{name}` with out_layout {out_layout}"));
    }
    let groups = at.get("groups").as_int().unwrap_or(1);
    if groups < 1 {
        return Err(format!("`{name}` with groups={groups}"));
    }
    let strides = per_axis(&at.ints("strides")?, nd, "strides")?;
    let dilation = per_axis(&at.ints("dilation")?, nd, "dilation")?;
    if strides.iter().chain(&dilation).any(|&v| v < 1) {
        return Err(format!(
            "`{name}` with strides {strides:?} and dilation {dilation:?}"
        ));
    }
    let (pad_l, mut pad_r) = padding(&at.ints("padding")?, nd)?;
    if transposed {
        let op = per_axis(&at.ints("output_padding")?, nd, "output_padding")?;
        for (r, o) in pad_r.iter_mut().zip(op) {
            *r -= o;
        }
    }
    Ok(Anchor::Conv(Conv {
        transposed,
        groups: groups as usize,
        strides,
        dilates: dilation.iter().map(|d| d - 1).collect(),
        pad_l,
        pad_r,
        data: cx.must_operand(args[0], "convolution's data")?,
        weight: cx.must_operand(args[1], "convolution's weight")?,
        data_shape: f32_dims(cx.m, args[0])?,
        weight_shape: f32_dims(cx.m, args[1])?,
        out_shape: f32_dims(cx.m, e)?,
    }))
}

fn pool(
    cx: &Cx<'_>,
    kind: PoolKind,
    e: ExprId,
    args: &[ExprId],
    at: &OpAttrs<'_>,
) -> Result<Anchor, Reason> {
    let name = at.def.name;
    if at.str("layout") != "NCHW" || !at.str("out_layout").is_empty() {
        return Err(format!(
            "`{name}` in layout {} (the backend takes NCHW)",
            at.str("layout")
        ));
    }
    let in_shape = f32_dims(cx.m, args[0])?;
    let out_shape = f32_dims(cx.m, e)?;
    let data = cx.must_operand(args[0], "pooling's data")?;
    if kind.window == PoolWindow::Global {
        let alg = if kind.reduce == PoolReduce::Avg {
            Alg::POOLING_AVG_EXCLUDE_PADDING
        } else {
            Alg::POOLING_MAX
        };
        return Ok(Anchor::Pool {
            alg,
            data,
            kernel: vec![in_shape[2] as i64, in_shape[3] as i64],
            strides: vec![1, 1],
            pad_l: vec![0, 0],
            pad_r: vec![0, 0],
            in_shape,
            out_shape,
        });
    }
    if at.bool("ceil_mode", false) {
        return Err(format!("`{name}` with ceil_mode"));
    }
    let dilation = per_axis(&at.ints("dilation")?, 2, "dilation")?;
    if dilation != [1, 1] {
        return Err(format!("`{name}` with dilation {dilation:?}"));
    }
    let kernel = per_axis(&at.ints("pool_size")?, 2, "pool_size")?;
    let strides = per_axis(&at.ints("strides")?, 2, "strides")?;
    let (pad_l, pad_r) = padding(&at.ints("padding")?, 2)?;
    // Windows made of padding only: oneDNN writes the lowest finite float for max pooling, as
    // TVM and the interpreter do (average pooling with them is rejected by oneDNN itself).
    let alg = if kind.reduce == PoolReduce::Max {
        Alg::POOLING_MAX
    } else if at.bool("count_include_pad", false) {
        Alg::POOLING_AVG_INCLUDE_PADDING
    } else {
        Alg::POOLING_AVG_EXCLUDE_PADDING
    };
    Ok(Anchor::Pool {
        alg,
        data,
        kernel,
        strides,
        pad_l,
        pad_r,
        in_shape,
        out_shape,
    })
}

/// The anchor at `e` (whose inputs must be operands), or `None` if `e` is not an anchor.
fn anchor(cx: &Cx<'_>, e: ExprId) -> Result<Option<Anchor>, Reason> {
    let m = cx.m;
    if let Some((x, gamma, beta, eps)) = cx.decomposed_ln(e) {
        return Ok(Some(Anchor::LayerNorm {
            data: cx.must_operand(x, "layer norm's data")?,
            gamma: gamma
                .map(|g| cx.must_operand(g, "layer norm's scale"))
                .transpose()?,
            beta: beta
                .map(|b| cx.must_operand(b, "layer norm's shift"))
                .transpose()?,
            eps: eps as f32,
            shape: f32_dims(m, x)?,
        }));
    }
    if let Expr::Proj { tuple, index } = m.expr(cx.resolve(e)) {
        let t = cx.resolve(*tuple);
        return match cx.call(t) {
            Some((Op::BatchNorm, args, at)) if *index == 0 && args.len() == 5 => {
                let Some(data) = cx.operand(args[0])? else {
                    return Ok(None);
                };
                let shape = f32_dims(m, args[0])?;
                if at.get("axis").as_int() != Some(1) || !(2..=5).contains(&shape.len()) {
                    return Err("`nn.batch_norm` not over axis 1 of a rank 2-5 tensor".into());
                }
                Ok(Some(Anchor::BatchNorm {
                    data,
                    gamma: cx.must_operand(args[1], "batch norm's γ")?,
                    beta: cx.must_operand(args[2], "batch norm's β")?,
                    mean: cx.must_operand(args[3], "batch norm's mean")?,
                    var: cx.must_operand(args[4], "batch norm's variance")?,
                    eps: at.float("epsilon")? as f32,
                    center: at.bool("center", true),
                    scale: at.bool("scale", true),
                    shape,
                }))
            }
            _ => Err("a tuple projection other than a batch norm's result".into()),
        };
    }
    let Some((op, args, at)) = cx.call(e) else {
        return Ok(None);
    };
    if let Some(kind) = op.conv_kind() {
        return conv(cx, kind, e, &args, &at).map(Some);
    }
    if let Some(kind) = op
        .pool_kind()
        .filter(|k| k.spatial == 2 && k.window != PoolWindow::Adaptive)
    {
        return pool(cx, kind, e, &args, &at).map(Some);
    }
    Ok(Some(match op {
        Op::Dense => Anchor::Dense {
            data: cx.must_operand(args[0], "dense layer's data")?,
            weight: cx.must_operand(args[1], "dense layer's weight")?,
            data_shape: f32_dims(m, args[0])?,
            weight_shape: f32_dims(m, args[1])?,
        },
        Op::BatchMatmul => {
            let a_shape = f32_dims(m, args[0])?;
            let b_shape = f32_dims(m, args[1])?;
            if a_shape.len() != 3 || b_shape.len() != 3 {
                return Err("`nn.batch_matmul` of tensors other than 3-D".into());
            }
            let (a, a_view) = strided_operand(cx, args[0], "batch_matmul's first operand")?;
            let (b, b_view) = strided_operand(cx, args[1], "batch_matmul's second operand")?;
            Anchor::BatchMatmul {
                a,
                b,
                ta: at.bool("transpose_a", false),
                tb: at.bool("transpose_b", false),
                a_shape,
                b_shape,
                a_view,
                b_view,
                out_shape: f32_dims(m, e)?,
            }
        }
        Op::LayerNorm => {
            let shape = f32_dims(m, args[0])?;
            let axis = at.get("axis").as_int().unwrap_or(-1);
            if axis != -1 && axis != shape.len() as i64 - 1 {
                return Err(format!("`nn.layer_norm` over axis {axis}, not the last"));
            }
            let scale = at.bool("scale", true);
            let center = at.bool("center", true);
            Anchor::LayerNorm {
                data: cx.must_operand(args[0], "layer norm's data")?,
                gamma: if scale {
                    Some(cx.must_operand(args[1], "layer norm's scale")?)
                } else {
                    None
                },
                beta: if center {
                    Some(cx.must_operand(args[2], "layer norm's shift")?)
                } else {
                    None
                },
                eps: at.float("epsilon")? as f32,
                shape,
            }
        }
        Op::Softmax => {
            let shape = f32_dims(m, args[0])?;
            let r = shape.len() as i64;
            let axis = at.get("axis").as_int().unwrap_or(-1);
            if axis < -r || axis >= r {
                return Err(format!("softmax axis {axis} of a rank {r} tensor"));
            }
            Anchor::Softmax {
                data: cx.must_operand(args[0], "softmax's data")?,
                axis: if axis < 0 { axis + r } else { axis } as usize,
                shape,
            }
        }
        _ => return Ok(None),
    }))
}

fn binary_alg(op: Op) -> Option<Alg> {
    Some(match op {
        Op::Add => Alg::BINARY_ADD,
        Op::Multiply => Alg::BINARY_MUL,
        Op::Subtract => Alg::BINARY_SUB,
        Op::Divide => Alg::BINARY_DIV,
        Op::Maximum => Alg::BINARY_MAX,
        Op::Minimum => Alg::BINARY_MIN,
        _ => return None,
    })
}

fn eltwise_alg(op: Op) -> Option<Alg> {
    Some(match op {
        Op::Relu => Alg::RELU,
        Op::Tanh => Alg::TANH,
        Op::Sigmoid => Alg::LOGISTIC,
        Op::Exp => Alg::EXP,
        Op::Sqrt => Alg::SQRT,
        Op::Abs => Alg::ABS,
        _ => return None,
    })
}

/// `shape` right-aligned to the rank of `full` (leading ones), if it broadcasts to `full`.
pub(super) fn aligned(shape: &[usize], full: &[usize]) -> Option<Vec<usize>> {
    if shape.len() > full.len() {
        return None;
    }
    let mut v = vec![1usize; full.len() - shape.len()];
    v.extend_from_slice(shape);
    v.iter()
        .zip(full)
        .all(|(&a, &b)| a == 1 || a == b)
        .then_some(v)
}

/// Reads composite function `f` of `m`.
pub fn read(m: &Module, f: FuncId, consts: &dyn ConstantSource) -> Result<Composite, Reason> {
    let func = m.func(f);
    let name = func
        .attr("Composite")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    if name.starts_with("dnnl.qnn.") || name.contains("qnn") {
        return Err(format!(
            "`{name}` is a quantized (int8) composite, which this backend does not map"
        ));
    }
    let cx = Cx {
        m,
        consts,
        params: func
            .params
            .iter()
            .enumerate()
            .map(|(i, &p)| (p, i))
            .collect(),
        lets: let_values(m),
    };
    for &p in &func.params {
        f32_dims(m, m.var(p).expr)?;
    }
    let out_shape = f32_dims(m, func.body)?;
    let (bottom, mut raws) = peel(&cx, func.body)?;
    raws.reverse();
    let mut raws = raws.into_iter();
    // An operand at the bottom: the first post-op becomes an eltwise anchor.
    let anchor = match bottom {
        Ok(a) => a,
        Err(data) => match raws.next() {
            Some((Raw::Elt(alg, alpha, beta), shape)) => Anchor::Eltwise {
                data,
                alg,
                alpha,
                beta,
                shape,
            },
            _ => return Err("a composite without a primitive to run".into()),
        },
    };
    let anchor_shape = anchor_shape(&anchor);
    let posts = posts(&anchor, &anchor_shape, raws)?;
    Ok(Composite {
        anchor,
        posts,
        anchor_shape,
        out_shape,
    })
}

/// Post-ops peeled off the composite's result, outermost first, each with the shape of the
/// value it applies to.
type Peeled = Vec<(Raw, Vec<usize>)>;

/// Peels post-ops from the result `body` down to the anchor (`Ok`), or down to an operand
/// (`Err`) when there is no anchor primitive.
#[allow(clippy::type_complexity)]
fn peel(cx: &Cx<'_>, body: ExprId) -> Result<(Result<Anchor, Operand>, Peeled), Reason> {
    let m = cx.m;
    let mut e = cx.resolve(body);
    let mut raws: Peeled = Vec::new();
    loop {
        if let Some(o) = cx.operand(e)? {
            return Ok((Err(o), raws));
        }
        if let Some(a) = anchor(cx, e)? {
            return Ok((Ok(a), raws));
        }
        if let Some((raw, x)) = activation_chain(cx, e)? {
            raws.push((raw, f32_dims(m, x)?));
            e = cx.resolve(x);
            continue;
        }
        if let Some(x) = batch_norm_post(cx, e, &mut raws)? {
            e = x;
            continue;
        }
        match call_post(cx, e, &mut raws)? {
            Ok(x) => e = x,
            Err(a) => return Ok((Ok(a), raws)),
        }
    }
}

/// The GELU, mish and swish chains at `e`: the eltwise post-op and the chain's input.
fn activation_chain(cx: &Cx<'_>, e: ExprId) -> Result<Option<(Raw, ExprId)>, Reason> {
    if let Some(x) = cx.gelu_tanh(e)? {
        return Ok(Some((Raw::Elt(Alg::GELU_TANH, 0.0, 0.0), x)));
    }
    if let Some(x) = cx.gelu_erf(e)? {
        return Ok(Some((Raw::Elt(Alg::GELU_ERF, 0.0, 0.0), x)));
    }
    if let Some(x) = cx.mish(e)? {
        return Ok(Some((Raw::Elt(Alg::MISH, 0.0, 0.0), x)));
    }
    Ok(cx.swish(e).map(|x| (Raw::Elt(Alg::SWISH, 1.0, 0.0), x)))
}

/// A batch norm's first result at `e` as a post-op; returns the batch norm's data.
fn batch_norm_post(cx: &Cx<'_>, e: ExprId, raws: &mut Peeled) -> Result<Option<ExprId>, Reason> {
    let Expr::Proj { tuple, index: 0 } = cx.m.expr(e) else {
        return Ok(None);
    };
    let Some((Op::BatchNorm, args, at)) = cx.call(*tuple) else {
        return Ok(None);
    };
    if args.len() != 5 {
        return Ok(None);
    }
    raws.push((
        Raw::Bn {
            gamma: cx.must_operand(args[1], "batch norm's γ")?,
            beta: cx.must_operand(args[2], "batch norm's β")?,
            mean: cx.must_operand(args[3], "batch norm's mean")?,
            var: cx.must_operand(args[4], "batch norm's variance")?,
            eps: at.float("epsilon")?,
            center: at.bool("center", true),
            scale: at.bool("scale", true),
        },
        f32_dims(cx.m, args[0])?,
    ));
    if at.get("axis").as_int() != Some(1) {
        return Err("a batch norm not over the channel axis".into());
    }
    Ok(Some(args[0]))
}

/// The operator call at `e` as a post-op (pushed; returns its input), or, for a binary
/// operation of two operands, the anchor.
fn call_post(cx: &Cx<'_>, e: ExprId, raws: &mut Peeled) -> Result<Result<ExprId, Anchor>, Reason> {
    let m = cx.m;
    let Some((op, args, at)) = cx.call(e) else {
        return Err(format!("a {} inside the composite", m.expr(e).kind_name()));
    };
    let raw = match op {
        _ if eltwise_alg(op).is_some() => eltwise_alg(op).map(|alg| Raw::Elt(alg, 0.0, 0.0)),
        Op::Clip => {
            let (lo, hi) = (at.float("a_min")?, at.float("a_max")?);
            Some(Raw::Elt(Alg::CLIP, lo as f32, hi as f32))
        }
        Op::LeakyRelu => Some(Raw::Elt(Alg::RELU, at.float("alpha")? as f32, 0.0)),
        Op::Reshape => Some(Raw::Reshape),
        _ => None,
    };
    if let Some(raw) = raw {
        raws.push((raw, f32_dims(m, args[0])?));
        return Ok(Ok(args[0]));
    }
    if let (Op::BiasAdd, [x, b]) = (op, args.as_slice()) {
        // A bias over `axis`: a per-channel add, its operand seen with the data's rank.
        let Some(ob) = cx.operand(*b)? else {
            return Err("a bias computed inside the composite".into());
        };
        let x_dims = f32_dims(m, *x)?;
        let b_dims = f32_dims(m, *b)?;
        let rank = x_dims.len() as i64;
        let axis = at.get("axis").as_int().unwrap_or(1);
        let axis = if axis < 0 { axis + rank } else { axis };
        if !(0..rank).contains(&axis) || b_dims.len() != 1 {
            return Err("a bias add whose axis or bias does not fit its data".into());
        }
        let mut seen = vec![1; x_dims.len()];
        seen[axis as usize] = b_dims[0];
        raws.push((Raw::Bin(Alg::BINARY_ADD, ob, seen), x_dims));
        return Ok(Ok(*x));
    }
    let name = at.def.name;
    let (Some(alg), [a, b]) = (binary_alg(op), args.as_slice()) else {
        return Err(format!("operator `{name}` has no oneDNN mapping here"));
    };
    let commutative = matches!(op, Op::Add | Op::Multiply | Op::Maximum | Op::Minimum);
    match (cx.operand(*a)?, cx.operand(*b)?) {
        (Some(oa), Some(ob)) => Ok(Err(Anchor::Binary {
            alg,
            a: oa,
            b: ob,
            a_shape: f32_dims(m, *a)?,
            b_shape: f32_dims(m, *b)?,
            out_shape: f32_dims(m, e)?,
        })),
        (None, Some(ob)) => {
            raws.push((Raw::Bin(alg, ob, f32_dims(m, *b)?), f32_dims(m, *a)?));
            Ok(Ok(*a))
        }
        (Some(oa), None) if commutative => {
            raws.push((Raw::Bin(alg, oa, f32_dims(m, *a)?), f32_dims(m, *b)?));
            Ok(Ok(*b))
        }
        _ => Err(format!(
            "`{name}` of two values computed inside the composite"
        )),
    }
}

/// The shape of the anchor's result in Relay's terms.
fn anchor_shape(anchor: &Anchor) -> Vec<usize> {
    match anchor {
        Anchor::Conv(c) => c.out_shape.clone(),
        Anchor::Dense {
            data_shape,
            weight_shape,
            ..
        } => {
            let mut s = data_shape.clone();
            if let (Some(l), Some(&n)) = (s.last_mut(), weight_shape.first()) {
                *l = n;
            }
            s
        }
        Anchor::BatchMatmul { out_shape, .. }
        | Anchor::Pool { out_shape, .. }
        | Anchor::Binary { out_shape, .. } => out_shape.clone(),
        Anchor::BatchNorm { shape, .. }
        | Anchor::LayerNorm { shape, .. }
        | Anchor::Softmax { shape, .. }
        | Anchor::Eltwise { shape, .. } => shape.clone(),
    }
}

fn has_sum(posts: &[Post]) -> bool {
    posts.iter().any(|p| matches!(p, Post::Sum(_)))
}

/// Classifies the peeled post-ops (innermost first) into oneDNN's post-ops.
fn posts(
    anchor: &Anchor,
    anchor_shape: &[usize],
    raws: impl Iterator<Item = (Raw, Vec<usize>)>,
) -> Result<Vec<Post>, Reason> {
    let bias_axis = match anchor {
        Anchor::Conv(_) => Some(1),
        Anchor::Dense { .. } | Anchor::BatchMatmul { .. } => Some(anchor_shape.len() - 1),
        _ => None,
    };
    let mut posts = Vec::new();
    let mut reshaped = false;
    for (raw, in_shape) in raws {
        let first = posts.is_empty();
        match raw {
            Raw::Reshape => reshaped = true,
            Raw::Elt(alg, alpha, beta) => posts.push(Post::Eltwise(alg, alpha, beta)),
            // A residual added to the reshaped result: the same bytes in the primitive's
            // destination, so still a `sum`.
            Raw::Bin(alg, o, shape)
                if reshaped && alg == Alg::BINARY_ADD && shape == in_shape && !has_sum(&posts) =>
            {
                posts.push(Post::Sum(o))
            }
            _ if reshaped => {
                return Err("a tensor operand after a reshape inside the composite".into())
            }
            Raw::Bn {
                gamma,
                beta,
                mean,
                var,
                eps,
                center,
                scale,
            } => {
                let conv_ok = matches!(anchor, Anchor::Conv(c) if !c.transposed);
                if !first || !conv_ok {
                    return Err("a batch norm that does not directly follow a convolution".into());
                }
                let c = |o: Operand, what: &str| match o {
                    Operand::Const(t) => Ok(t),
                    Operand::Param(_) => Err(format!(
                        "the batch norm's {what} is not a constant, so it cannot be folded"
                    )),
                };
                posts.push(Post::FoldBn {
                    gamma: c(gamma, "γ")?,
                    beta: c(beta, "β")?,
                    mean: c(mean, "mean")?,
                    var: c(var, "variance")?,
                    eps,
                    center,
                    scale,
                });
            }
            Raw::Bin(alg, o, shape) => {
                if in_shape != anchor_shape {
                    return Err("a post-op on a value of another shape than the primitive's".into());
                }
                let al = aligned(&shape, anchor_shape).ok_or_else(|| {
                    format!("a {shape:?} operand that does not broadcast to {anchor_shape:?}")
                })?;
                let per_channel = bias_axis.is_some_and(|ax| {
                    al.iter().enumerate().all(|(i, &d)| {
                        if i == ax {
                            d == anchor_shape[ax]
                        } else {
                            d == 1
                        }
                    })
                });
                if alg == Alg::BINARY_ADD && first && per_channel {
                    posts.push(Post::Bias(o));
                } else if alg == Alg::BINARY_ADD && al == anchor_shape && !has_sum(&posts) {
                    // oneDNN takes one `sum`; a second full-shape add is a binary post-op.
                    posts.push(Post::Sum(o));
                } else {
                    posts.push(Post::Binary(alg, o, al));
                }
            }
        }
    }
    Ok(posts)
}

#[cfg(test)]
mod tests {
    use super::{dense_strides, view_strides};
    use proptest::prelude::*;

    /// The offset of every element of `dims` (row-major order) read through `strides`.
    fn offsets(dims: &[i64], strides: &[i64]) -> Vec<i64> {
        let n: i64 = dims.iter().product();
        (0..n)
            .map(|mut k| {
                let mut off = 0;
                for (&d, &s) in dims.iter().zip(strides).rev() {
                    off += (k % d) * s;
                    k /= d;
                }
                off
            })
            .collect()
    }

    proptest! {
        /// A transposed tensor reshaped: where `view_strides` gives strides, they read the
        /// elements in the order the reshape of a copy would have them; a reshape that keeps
        /// each axis whole (only inserts axes of 1) always has strides.
        #[test]
        fn strides_of_a_reshaped_transpose_read_its_elements(
            dims in proptest::collection::vec(1i64..4, 1..5),
            seed in any::<u64>(),
            cut in any::<u64>(),
        ) {
            let r = dims.len();
            // A permutation from the seed.
            let mut perm: Vec<usize> = (0..r).collect();
            let mut x = seed;
            for i in (1..r).rev() {
                perm.swap(i, (x % (i as u64 + 1)) as usize);
                x /= i as u64 + 1;
            }
            let st = dense_strides(&dims);
            let tdims: Vec<i64> = perm.iter().map(|&p| dims[p]).collect();
            let tst: Vec<i64> = perm.iter().map(|&p| st[p]).collect();
            let want = offsets(&tdims, &tst);
            // A new shape: the transposed dims with one adjacent pair merged, or an axis of 1
            // inserted.
            let mut new = tdims.clone();
            let at = (cut % (r as u64 + 1)) as usize;
            let merged = r > 1 && cut % 2 == 0 && at + 1 < r;
            if merged {
                let m = new[at] * new[at + 1];
                new.splice(at..at + 2, [m]);
            } else {
                new.insert(at, 1);
            }
            match view_strides(&tdims, &tst, &new) {
                Some(ns) => prop_assert_eq!(offsets(&new, &ns), want),
                None => {
                    // Only a merge of two axes that are not contiguous with one another.
                    let mergeable = merged
                        && (tst[at] == tst[at + 1] * tdims[at + 1]
                            || tdims[at] == 1
                            || tdims[at + 1] == 1);
                    prop_assert!(
                        merged && !mergeable,
                        "no strides for {:?} from {:?} {:?}",
                        new,
                        tdims,
                        tst
                    )
                }
            }
        }
    }

    #[test]
    fn a_reshape_of_dense_data_keeps_it_dense() {
        let d = [2, 3, 4];
        assert_eq!(
            view_strides(&d, &dense_strides(&d), &[6, 4]),
            Some(vec![4, 1])
        );
        assert_eq!(
            view_strides(&d, &dense_strides(&d), &[2, 12]),
            Some(vec![12, 1])
        );
        assert_eq!(
            view_strides(&d, &dense_strides(&d), &[1, 2, 1, 12]),
            Some(vec![24, 12, 12, 1])
        );
        assert_eq!(view_strides(&d, &dense_strides(&d), &[5, 5]), None);
    }

    #[test]
    fn transposed_heads_split_but_do_not_merge() {
        // [1, 8, 3, 4] transposed to [1, 3, 8, 4]: strides [96, 4, 12, 1].
        let (d, st) = ([1, 3, 8, 4], [96, 4, 12, 1]);
        // Dropping the leading 1 is a view; so is splitting an axis.
        assert_eq!(view_strides(&d, &st, &[3, 8, 4]), Some(vec![4, 12, 1]));
        assert_eq!(
            view_strides(&d, &st, &[3, 2, 4, 4]),
            Some(vec![4, 48, 12, 1])
        );
        // Merging positions with the head dimension is not.
        assert_eq!(view_strides(&d, &st, &[3, 32]), None);
        // Two sequences: [2, 3, 8, 4] with strides [96, 4, 12, 1]; their heads cannot merge.
        let (d, st) = ([2, 3, 8, 4], [96, 4, 12, 1]);
        assert_eq!(view_strides(&d, &st, &[6, 8, 4]), None);
    }
}
