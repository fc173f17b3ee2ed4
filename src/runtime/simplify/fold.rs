//! The rewrites of one pass: each looks at an expression of the module the pass reads (its
//! structure, its types, the number of users of its operands) and at the values of the
//! constants its operands became, and returns the expression of the new module that replaces
//! it, or `None` to keep it.

use super::{shape_of, Builder, Report, Values, MAX_RESULT_BYTES, SMALL_RESULT_BYTES};
use crate::ir::{AttrValue, Attrs, Callee, DType, Expr, ExprId, Module, OpId};
use crate::ops::layout::Layout;
use crate::ops::Op;
use crate::runtime::exec::tensor::{Shape, Tensor};
use crate::source::Span;
use std::sync::Arc;

/// A pass's state.
pub(super) struct Cx<'a, 'w> {
    /// The module the pass reads.
    pub m: &'a Module,
    pub values: &'a Values<'w>,
    /// Users of each live expression of `m` (the body counts as one for itself).
    pub users: &'a [u32],
    pub b: Builder,
    pub report: &'a mut Report,
}

/// A per-channel factor or term: one value for every channel, or one per channel of an axis.
struct Channel {
    axis: Option<usize>,
    values: Vec<f64>,
}

impl Channel {
    /// The values for `n` channels (a uniform value repeated).
    fn expand(&self, n: usize) -> Option<Vec<f64>> {
        match self.values.len() {
            1 => Some(vec![self.values[0]; n]),
            k if k == n => Some(self.values.clone()),
            _ => None,
        }
    }
}

fn op_of(m: &Module, e: ExprId) -> Option<Op> {
    m.called_op(e).map(|id| crate::ops::op(id).op)
}

fn call_parts(m: &Module, e: ExprId) -> Option<(OpId, &[ExprId], &Attrs)> {
    match m.expr(e) {
        Expr::Call {
            callee: Callee::Op(op),
            args,
            attrs,
        } => Some((*op, args.as_slice(), attrs)),
        _ => None,
    }
}

fn attr<'a>(m: &'a Module, e: ExprId, name: &str) -> Option<&'a AttrValue> {
    let (op, _, attrs) = call_parts(m, e)?;
    attrs.get(crate::ops::op(op).attrs, name)
}

fn f32_shape(m: &Module, e: ExprId) -> Option<Shape> {
    shape_of(m, e).filter(|s| s.dtype == DType::F32)
}

/// The attributes of a batch or layer norm that the rewrites use.
struct NormAttrs {
    /// The normalised axis, in `0..rank`.
    axis: usize,
    /// Added to the variance.
    epsilon: f64,
    /// Whether beta is added.
    center: bool,
    /// Whether gamma multiplies.
    scale: bool,
}

/// The `float32` shape of norm call `e`'s data `x`, and its `axis`, `epsilon` (default 1e-5),
/// `center` and `scale` (default true); `None` when `x` is not `float32` or the axis is out of
/// range.
fn norm_of(m: &Module, e: ExprId, x: ExprId) -> Option<(Shape, NormAttrs)> {
    let shape = f32_shape(m, x)?;
    let axis = attr(m, e, "axis")
        .and_then(AttrValue::as_int)
        .and_then(|a| normalize_axis(a, shape.dims.len()))?;
    let flag = |n: &str| attr(m, e, n).and_then(AttrValue::as_bool).unwrap_or(true);
    let norm = NormAttrs {
        axis,
        epsilon: attr(m, e, "epsilon")
            .and_then(AttrValue::as_f64)
            .unwrap_or(1e-5),
        center: flag("center"),
        scale: flag("scale"),
    };
    Some((shape, norm))
}

fn normalize_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

fn f32_tensor(dims: &[usize], v: &[f64]) -> Result<Tensor, String> {
    let data: Vec<f32> = v.iter().map(|&x| x as f32).collect();
    Tensor::from_slice(DType::F32, dims, &data).map_err(|e| e.0)
}

/// `w` with every slice along `axis` multiplied by `s[slice]`.
fn scale_along(w: &Tensor, axis: usize, s: &[f64]) -> Result<Tensor, String> {
    let dims = w.shape().to_vec();
    let inner: usize = dims[axis + 1..].iter().product();
    let n = dims[axis];
    let src = w.as_slice::<f32>();
    let mut out = w.clone();
    let dst = out.as_mut_slice::<f32>();
    for (i, (d, x)) in dst.iter_mut().zip(src).enumerate() {
        let c = (i / inner) % n;
        *d = (*x as f64 * s[c]) as f32;
    }
    Ok(out)
}

impl Cx<'_, '_> {
    /// The call `op(data, w)` with `attrs` in the new module: `data` from the old one, `w`
    /// already new (the scaled weight, or the old one carried over).
    fn with_weight(
        &mut self,
        op: OpId,
        data: ExprId,
        w: ExprId,
        attrs: Attrs,
        span: Span,
    ) -> Result<ExprId, String> {
        let data = self.new_of(data)?;
        Ok(self.b.push(
            Expr::Call {
                callee: Callee::Op(op),
                args: vec![data, w],
                attrs,
            },
            span,
        ))
    }

    fn new_of(&self, old: ExprId) -> Result<ExprId, String> {
        self.b.get(old)
    }

    /// The value of old expression `e`, when it became a constant.
    fn value(&self, e: ExprId) -> Option<Arc<Tensor>> {
        let n = self.b.get(e).ok()?;
        matches!(self.b.out.expr(n), Expr::Const(_))
            .then(|| self.values.of(&self.b.out, n))
            .flatten()
    }

    fn is_const(&self, e: ExprId) -> bool {
        self.b
            .get(e)
            .is_ok_and(|n| matches!(self.b.out.expr(n), Expr::Const(_)))
    }

    fn f32_values(&self, e: ExprId) -> Option<Vec<f64>> {
        let t = self.value(e)?;
        (t.dtype() == DType::F32).then(|| t.as_slice::<f32>().iter().map(|&v| v as f64).collect())
    }

    fn call(
        &mut self,
        op: Op,
        args: Vec<ExprId>,
        attrs: &[(&str, AttrValue)],
        span: Span,
    ) -> ExprId {
        let def = crate::ops::def_of(op).expect("a built-in operator");
        let mut a = Attrs::defaults(def.attrs);
        for (name, v) in attrs {
            a.set(def.attrs, name, v.clone());
        }
        let callee = Callee::Op(op.id().expect("a built-in operator"));
        self.b.push(
            Expr::Call {
                callee,
                args,
                attrs: a,
            },
            span,
        )
    }

    /// The new expression replacing old expression `e`.
    pub fn rewrite(&mut self, e: ExprId) -> Result<ExprId, String> {
        let span = self.m.span(e);
        match self.m.expr(e) {
            Expr::Const(c) => Ok(self.b.push(Expr::Const(c.clone()), span)),
            Expr::Tuple(fields) => {
                let fields = fields
                    .iter()
                    .map(|&f| self.new_of(f))
                    .collect::<Result<_, _>>()?;
                Ok(self.b.push(Expr::Tuple(fields), span))
            }
            Expr::Proj { tuple, index } => {
                let (tuple, index) = (*tuple, *index);
                if let Some(x) = self.projection(e, tuple, index)? {
                    return Ok(x);
                }
                let t = self.new_of(tuple)?;
                Ok(self.b.push(Expr::Proj { tuple: t, index }, span))
            }
            Expr::Call {
                callee: Callee::Op(op),
                args,
                attrs,
            } => {
                if let Some(x) = self.call_rewrite(e)? {
                    return Ok(x);
                }
                let args = args
                    .iter()
                    .map(|&a| self.new_of(a))
                    .collect::<Result<_, _>>()?;
                let (op, attrs) = (*op, attrs.clone());
                Ok(self.b.push(
                    Expr::Call {
                        callee: Callee::Op(op),
                        args,
                        attrs,
                    },
                    span,
                ))
            }
            other => Err(format!("unexpected `{}` in @main", other.kind_name())),
        }
    }

    fn projection(
        &mut self,
        e: ExprId,
        tuple: ExprId,
        index: u32,
    ) -> Result<Option<ExprId>, String> {
        match self.m.expr(tuple) {
            Expr::Tuple(fields) => {
                let f = fields[index as usize];
                self.report.identities_removed += 1;
                Ok(Some(self.new_of(f)?))
            }
            Expr::Call { args, .. } => match op_of(self.m, tuple) {
                Some(Op::Dropout) if index == 0 => {
                    self.report.identities_removed += 1;
                    Ok(Some(self.new_of(args[0])?))
                }
                Some(Op::BatchNorm) if index == 0 => self.batch_norm(e, tuple),
                _ => Ok(None),
            },
            _ => Ok(None),
        }
    }

    /// `nn.batch_norm(x, gamma, beta, mean, var).0` with constant parameters: into the
    /// preceding convolution, else `x * s + t`.
    fn batch_norm(&mut self, e: ExprId, bn: ExprId) -> Result<Option<ExprId>, String> {
        let m = self.m;
        let Some((_, args, _)) = call_parts(m, bn) else {
            return Ok(None);
        };
        let Some((x_shape, norm)) = norm_of(m, bn, args[0]) else {
            return Ok(None);
        };
        let rank = x_shape.dims.len();
        let (axis, eps, center, scale) = (norm.axis, norm.epsilon, norm.center, norm.scale);
        let n = x_shape.dims[axis];
        let params: Option<Vec<Vec<f64>>> =
            args[1..5].iter().map(|&a| self.f32_values(a)).collect();
        let Some(p) = params.filter(|p| p.iter().all(|v| v.len() == n)) else {
            return Ok(None);
        };
        let (gamma, beta, mean, var) = (&p[0], &p[1], &p[2], &p[3]);
        let s: Vec<f64> = (0..n)
            .map(|c| if scale { gamma[c] } else { 1.0 } / (var[c] + eps).sqrt())
            .collect();
        let t: Vec<f64> = (0..n)
            .map(|c| if center { beta[c] } else { 0.0 } - mean[c] * s[c])
            .collect();
        let span = m.span(e);
        let (sc, sh) = (
            Channel {
                axis: Some(axis),
                values: s.clone(),
            },
            Channel {
                axis: Some(axis),
                values: t.clone(),
            },
        );
        if let Some(x) = self.affine(args[0], Some(&sc), Some(&sh), span)? {
            self.report.batch_norm_into_conv += 1;
            return Ok(Some(x));
        }
        let mut dims = vec![n];
        dims.extend(std::iter::repeat_n(1, rank - axis - 1));
        let sc = self.b.constant(f32_tensor(&dims, &s)?, span);
        let sh = self.b.constant(f32_tensor(&dims, &t)?, span);
        let x = self.new_of(args[0])?;
        let mul = self.call(Op::Multiply, vec![x, sc], &[], span);
        let add = self.call(Op::Add, vec![mul, sh], &[], span);
        self.report.batch_norm_to_scale_shift += 1;
        Ok(Some(add))
    }

    /// The channel axis of the output of a convolution `conv` whose weight can be scaled per
    /// output channel, and that weight's output-channel axis.
    fn conv_axes(&self, conv: ExprId) -> Option<(usize, usize)> {
        let m = self.m;
        let op = op_of(m, conv)?;
        if !matches!(op, Op::Conv1d | Op::Conv2d | Op::Conv3d) {
            return None;
        }
        let s = |n: &str| attr(m, conv, n).and_then(AttrValue::as_str).unwrap_or("");
        let out_layout = if s("out_layout").is_empty() {
            s("data_layout")
        } else {
            s("out_layout")
        };
        let out = Layout::parse(out_layout).ok()?;
        let kernel = Layout::parse(s("kernel_layout")).ok()?;
        if out.split_factor('C').is_some() || kernel.split_factor('O').is_some() {
            return None;
        }
        let c = out.position('C')?;
        let o = kernel.position('O')?;
        let groups = attr(m, conv, "groups")
            .and_then(AttrValue::as_int)
            .unwrap_or(1);
        // A grouped kernel's `O` extent is the output channels only in the `OI...` layouts.
        if groups != 1 && o != 0 {
            return None;
        }
        Some((c, o))
    }

    /// `y * scale + shift` (per channel) folded into the producer of `y`: a convolution (with
    /// or without a `bias_add`) or a dense layer (with or without a bias `add`) whose weights
    /// (and bias) are constants and whose results have no other user.
    fn affine(
        &mut self,
        y: ExprId,
        scale: Option<&Channel>,
        shift: Option<&Channel>,
        span: Span,
    ) -> Result<Option<ExprId>, String> {
        let m = self.m;
        if self.users[y.index()] != 1 || f32_shape(m, y).is_none() {
            return Ok(None);
        }
        let y_shape = f32_shape(m, y).expect("checked");
        let axis_ok = |a: usize| {
            [scale, shift]
                .iter()
                .flatten()
                .all(|c| c.axis.is_none_or(|x| x == a))
        };
        match op_of(m, y) {
            Some(Op::Conv1d | Op::Conv2d | Op::Conv3d) => {
                let Some((c, o)) = self.conv_axes(y) else {
                    return Ok(None);
                };
                if !axis_ok(c) {
                    return Ok(None);
                }
                let n = y_shape.dims[c];
                let Some(conv) = self.scaled_conv(y, o, n, scale)? else {
                    return Ok(None);
                };
                match shift.and_then(|t| t.expand(n)) {
                    Some(t) => {
                        let bias = self.b.constant(f32_tensor(&[n], &t)?, span);
                        let axis = AttrValue::int(c as i64);
                        Ok(Some(self.call(
                            Op::BiasAdd,
                            vec![conv, bias],
                            &[("axis", axis)],
                            span,
                        )))
                    }
                    None if shift.is_some() => Ok(None),
                    None => Ok(Some(conv)),
                }
            }
            Some(Op::BiasAdd) => {
                let (_, args, _) = call_parts(m, y).expect("a call");
                let (conv, bias) = (args[0], args[1]);
                if self.users[conv.index()] != 1 {
                    return Ok(None);
                }
                let Some((c, o)) = self.conv_axes(conv) else {
                    return Ok(None);
                };
                let rank = y_shape.dims.len();
                let bias_axis = attr(m, y, "axis")
                    .and_then(AttrValue::as_int)
                    .and_then(|a| normalize_axis(a, rank));
                if bias_axis != Some(c) || !axis_ok(c) {
                    return Ok(None);
                }
                let n = y_shape.dims[c];
                let Some(b) = self.f32_values(bias).filter(|b| b.len() == n) else {
                    return Ok(None);
                };
                let s = scale.map(|s| s.expand(n)).unwrap_or(Some(vec![1.0; n]));
                let t = shift.map(|t| t.expand(n)).unwrap_or(Some(vec![0.0; n]));
                let (Some(s), Some(t)) = (s, t) else {
                    return Ok(None);
                };
                let Some(conv) = self.scaled_conv(conv, o, n, scale)? else {
                    return Ok(None);
                };
                let b: Vec<f64> = (0..n).map(|i| b[i] * s[i] + t[i]).collect();
                let bias = self.b.constant(f32_tensor(&[n], &b)?, span);
                let attrs = vec![("axis", AttrValue::int(c as i64))];
                Ok(Some(self.call(Op::BiasAdd, vec![conv, bias], &attrs, span)))
            }
            Some(Op::Dense) => {
                // A shift alone would only move the `add` that carries it.
                if scale.is_none() {
                    return Ok(None);
                }
                let last = y_shape.dims.len() - 1;
                if !axis_ok(last) {
                    return Ok(None);
                }
                let n = y_shape.dims[last];
                let Some(dense) = self.scaled_dense(y, n, scale)? else {
                    return Ok(None);
                };
                match shift.and_then(|t| t.expand(n)) {
                    Some(t) => {
                        let bias = self.b.constant(f32_tensor(&[n], &t)?, span);
                        Ok(Some(self.call(Op::Add, vec![dense, bias], &[], span)))
                    }
                    None if shift.is_some() => Ok(None),
                    None => Ok(Some(dense)),
                }
            }
            Some(Op::Add) => {
                let (_, args, _) = call_parts(m, y).expect("a call");
                let last = y_shape.dims.len().saturating_sub(1);
                let n = *y_shape.dims.last().unwrap_or(&0);
                for (dense, bias) in [(args[0], args[1]), (args[1], args[0])] {
                    if op_of(m, dense) != Some(Op::Dense)
                        || self.users[dense.index()] != 1
                        || shape_of(m, dense) != Some(y_shape.clone())
                        || !axis_ok(last)
                    {
                        continue;
                    }
                    let Some(bshape) = f32_shape(m, bias) else {
                        continue;
                    };
                    // A bias along the last axis: `[N]`, `[1, N]`, ...
                    let per_last = bshape.dims.last() == Some(&n)
                        && bshape.dims[..bshape.dims.len() - 1].iter().all(|&d| d == 1);
                    let Some(b) = self.f32_values(bias).filter(|_| per_last) else {
                        continue;
                    };
                    let s = scale.map(|s| s.expand(n)).unwrap_or(Some(vec![1.0; n]));
                    let t = shift.map(|t| t.expand(n)).unwrap_or(Some(vec![0.0; n]));
                    let (Some(s), Some(t)) = (s, t) else {
                        return Ok(None);
                    };
                    let Some(dense) = self.scaled_dense(dense, n, scale)? else {
                        return Ok(None);
                    };
                    let b: Vec<f64> = (0..n).map(|i| b[i] * s[i] + t[i]).collect();
                    let bias = self.b.constant(f32_tensor(&bshape.dims, &b)?, span);
                    return Ok(Some(self.call(Op::Add, vec![dense, bias], &[], span)));
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    /// The convolution `conv` with its constant weight scaled along `o` (unchanged when
    /// `scale` is `None`), as a new call.
    fn scaled_conv(
        &mut self,
        conv: ExprId,
        o: usize,
        n: usize,
        scale: Option<&Channel>,
    ) -> Result<Option<ExprId>, String> {
        let (op, args, attrs) = call_parts(self.m, conv).expect("a call");
        let (op, data, weight, attrs) = (op, args[0], args[1], attrs.clone());
        let Some(w) = self.value(weight).filter(|w| w.dtype() == DType::F32) else {
            return Ok(None);
        };
        if w.shape().get(o) != Some(&n) {
            return Ok(None);
        }
        let span = self.m.span(conv);
        let w = match scale {
            Some(s) => {
                let Some(s) = s.expand(n) else {
                    return Ok(None);
                };
                let w = scale_along(&w, o, &s)?;
                self.b.constant(w, span)
            }
            None => self.new_of(weight)?,
        };
        self.with_weight(op, data, w, attrs, span).map(Some)
    }

    /// The dense layer `dense` (weight `[N, K]`) with its constant weight's rows scaled.
    fn scaled_dense(
        &mut self,
        dense: ExprId,
        n: usize,
        scale: Option<&Channel>,
    ) -> Result<Option<ExprId>, String> {
        let (op, args, attrs) = call_parts(self.m, dense).expect("a call");
        let (op, data, weight, attrs) = (op, args[0], args[1], attrs.clone());
        let Some(w) = self.value(weight).filter(|w| w.dtype() == DType::F32) else {
            return Ok(None);
        };
        if w.shape().len() != 2 || w.shape()[0] != n {
            return Ok(None);
        }
        let span = self.m.span(dense);
        let w = match scale.map(|s| s.expand(n)) {
            Some(Some(s)) => {
                let w = scale_along(&w, 0, &s)?;
                self.b.constant(w, span)
            }
            Some(None) => return Ok(None),
            None => self.new_of(weight)?,
        };
        self.with_weight(op, data, w, attrs, span).map(Some)
    }

    /// The rewrites of an operator call.
    fn call_rewrite(&mut self, e: ExprId) -> Result<Option<ExprId>, String> {
        if let Some(x) = self.identity(e)? {
            self.report.identities_removed += 1;
            return Ok(Some(x));
        }
        if let Some(x) = self.fold_constant(e)? {
            self.report.constants_folded += 1;
            return Ok(Some(x));
        }
        if let Some(x) = self.layer_norm(e)? {
            self.report.layer_norms_expanded += 1;
            return Ok(Some(x));
        }
        self.channel_affine(e)
    }

    /// `nn.layer_norm` on float32, expanded as TVM's `SimplifyInference` does, into
    /// `(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * gamma + beta` over its axis: the
    /// operator has no fusion kind (it is opaque, as in TVM), so no native candidate covers it,
    /// while its expansion fuses into native kernels and is oneDNN's decomposed layer norm
    /// (`rules/dnnl.rules`). `gamma` and `beta` are moved onto the axis with `expand_dims` when
    /// it is not the last.
    fn layer_norm(&mut self, e: ExprId) -> Result<Option<ExprId>, String> {
        let m = self.m;
        let Some((op, args, _)) = call_parts(m, e) else {
            return Ok(None);
        };
        if crate::ops::op(op).op != Op::LayerNorm || args.len() != 3 {
            return Ok(None);
        }
        let Some((x_shape, norm)) = norm_of(m, e, args[0]) else {
            return Ok(None);
        };
        if f32_shape(m, args[1]).is_none() || f32_shape(m, args[2]).is_none() {
            return Ok(None);
        }
        let rank = x_shape.dims.len();
        let (axis, eps, center, scale) = (norm.axis, norm.epsilon, norm.center, norm.scale);
        let span = m.span(e);
        let axis_attr = if axis + 1 == rank { -1 } else { axis as i64 };
        let reduce = [
            (
                "axis",
                AttrValue::Array(vec![AttrValue::Int(axis_attr, DType::I32)]),
            ),
            ("keepdims", AttrValue::Bool(true)),
        ];
        let x = self.new_of(args[0])?;
        let mu = self.call(Op::Mean, vec![x], &reduce, span);
        let centred = self.call(Op::Subtract, vec![x, mu], &[], span);
        let two = self.b.constant(f32_tensor(&[], &[2.0])?, span);
        let sq = self.call(Op::Power, vec![centred, two], &[], span);
        let var = self.call(Op::Mean, vec![sq], &reduce, span);
        let eps = self.b.constant(f32_tensor(&[], &[eps])?, span);
        let shifted = self.call(Op::Add, vec![var, eps], &[], span);
        let root = self.call(Op::Sqrt, vec![shifted], &[], span);
        let mut out = self.call(Op::Divide, vec![centred, root], &[], span);
        // `gamma` and `beta` as `[C, 1, ..., 1]` when the axis is not the last.
        let trailing = rank - axis - 1;
        let on_axis = |this: &mut Self, v: ExprId| -> Result<ExprId, String> {
            let v = this.new_of(v)?;
            Ok(if trailing == 0 {
                v
            } else {
                this.call(
                    Op::ExpandDims,
                    vec![v],
                    &[
                        ("axis", AttrValue::Int(1, DType::I32)),
                        ("num_newaxis", AttrValue::Int(trailing as i64, DType::I32)),
                    ],
                    span,
                )
            })
        };
        if scale {
            let g = on_axis(self, args[1])?;
            out = self.call(Op::Multiply, vec![out, g], &[], span);
        }
        if center {
            let b = on_axis(self, args[2])?;
            out = self.call(Op::Add, vec![out, b], &[], span);
        }
        Ok(Some(out))
    }

    /// Whether old expression `c` became a constant whose elements all equal `v`.
    fn all_equal(&self, c: ExprId, v: f64) -> bool {
        self.value(c).is_some_and(|t| {
            let n = t.numel();
            n > 0 && (0..n).all(|i| t.get_f64(i) == v)
        })
    }

    /// An operand of `e` that `e` returns unchanged.
    fn identity(&mut self, e: ExprId) -> Result<Option<ExprId>, String> {
        let m = self.m;
        let Some((op, args, _)) = call_parts(m, e) else {
            return Ok(None);
        };
        let same = |x: ExprId| m.ty(x).is_some() && m.ty(x) == m.ty(e);
        let found = match crate::ops::op(op).op {
            Op::Copy => Some(args[0]),
            Op::Reshape | Op::Squeeze | Op::ExpandDims | Op::BatchFlatten | Op::Cast => {
                same(args[0]).then_some(args[0])
            }
            Op::CastLike => same(args[0]).then_some(args[0]),
            Op::Transpose => {
                let rank = shape_of(m, args[0]).map_or(usize::MAX, |s| s.dims.len());
                let axes = attr(m, e, "axes").and_then(AttrValue::as_ints);
                let identity = match axes {
                    Some(a) => a.iter().enumerate().all(|(i, &x)| x == i as i64),
                    None => rank <= 1,
                };
                (identity && same(args[0])).then_some(args[0])
            }
            Op::Multiply => [(args[0], args[1]), (args[1], args[0])]
                .into_iter()
                .find(|&(x, c)| same(x) && self.all_equal(c, 1.0))
                .map(|(x, _)| x),
            Op::Divide => (same(args[0]) && self.all_equal(args[1], 1.0)).then_some(args[0]),
            Op::Add => [(args[0], args[1]), (args[1], args[0])]
                .into_iter()
                .find(|&(x, c)| same(x) && self.all_equal(c, 0.0))
                .map(|(x, _)| x),
            Op::Subtract => (same(args[0]) && self.all_equal(args[1], 0.0)).then_some(args[0]),
            _ => None,
        };
        found.map(|x| self.new_of(x)).transpose()
    }

    /// A call whose arguments are all constants, evaluated by the reference interpreter, when
    /// its result is not much larger than they are.
    fn fold_constant(&mut self, e: ExprId) -> Result<Option<ExprId>, String> {
        let m = self.m;
        let Some((op, args, attrs)) = call_parts(m, e) else {
            return Ok(None);
        };
        let def = crate::ops::op(op);
        if matches!(def.op, Op::OnDevice | Op::DeviceCopy)
            || !crate::runtime::exec::ops::implements(def.op)
            || !args.iter().all(|&a| self.is_const(a))
        {
            return Ok(None);
        }
        let Some(out) = shape_of(m, e) else {
            return Ok(None);
        };
        let Some(arg_shapes) = args
            .iter()
            .map(|&a| shape_of(m, a))
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        let in_bytes: u64 = arg_shapes.iter().map(Shape::bytes).sum();
        if out.bytes() > in_bytes.max(SMALL_RESULT_BYTES) || out.bytes() > MAX_RESULT_BYTES {
            return Ok(None);
        }
        let call = crate::runtime::exec::ops::Call {
            op: def,
            attrs,
            args: arg_shapes,
            outs: vec![out.clone()],
        };
        let Ok(imp) = crate::runtime::exec::ops::instantiate(&call) else {
            return Ok(None);
        };
        let Some(vals) = args
            .iter()
            .map(|&a| self.value(a))
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        let refs: Vec<&Tensor> = vals.iter().map(|t| t.as_ref()).collect();
        let mut outs = vec![Tensor::zeros_of(&out).map_err(|e| e.0)?];
        if imp.run(&refs, &mut outs).is_err() {
            return Ok(None);
        }
        let Some(t) = outs.pop() else {
            return Ok(None);
        };
        Ok(Some(self.b.constant(t, m.span(e))))
    }

    /// `multiply`, `add` or `subtract` of a per-channel constant, folded into the producer of
    /// the other operand.
    fn channel_affine(&mut self, e: ExprId) -> Result<Option<ExprId>, String> {
        let m = self.m;
        let Some((op, args, _)) = call_parts(m, e) else {
            return Ok(None);
        };
        let op = crate::ops::op(op).op;
        let orders: &[(usize, usize)] = match op {
            Op::Multiply | Op::Add => &[(0, 1), (1, 0)],
            Op::Subtract => &[(0, 1)],
            _ => return Ok(None),
        };
        let span = m.span(e);
        for &(yi, ci) in orders {
            let (y, c) = (args[yi], args[ci]);
            let Some(y_shape) = f32_shape(m, y) else {
                continue;
            };
            if self.is_const(y) || shape_of(m, e) != Some(y_shape.clone()) {
                continue;
            }
            let Some(ch) = self.channel(c, &y_shape) else {
                continue;
            };
            let done = match op {
                Op::Multiply => self.affine(y, Some(&ch), None, span)?,
                Op::Add => self.affine(y, None, Some(&ch), span)?,
                _ => {
                    let neg = Channel {
                        axis: ch.axis,
                        values: ch.values.iter().map(|v| -v).collect(),
                    };
                    self.affine(y, None, Some(&neg), span)?
                }
            };
            if let Some(x) = done {
                if op == Op::Multiply {
                    self.report.scales_into_weights += 1;
                } else {
                    self.report.shifts_into_bias += 1;
                }
                return Ok(Some(x));
            }
        }
        Ok(None)
    }

    /// Constant `c` as a per-channel value of a tensor of shape `y`: its extents, aligned to
    /// the right, are all 1 but at most one, which equals `y`'s on that axis.
    fn channel(&self, c: ExprId, y: &Shape) -> Option<Channel> {
        let cs = f32_shape(self.m, c)?;
        if cs.dims.len() > y.dims.len() || cs.numel() == 0 {
            return None;
        }
        let off = y.dims.len() - cs.dims.len();
        let mut axis = None;
        for (i, &d) in cs.dims.iter().enumerate() {
            if d == 1 {
                continue;
            }
            if axis.is_some() || d != y.dims[off + i] {
                return None;
            }
            axis = Some(off + i);
        }
        Some(Channel {
            axis,
            values: self.f32_values(c)?,
        })
    }
}
