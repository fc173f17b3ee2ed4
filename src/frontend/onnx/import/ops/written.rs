//! ONNX operators collage has no operator of its own for, written out in the ones it has:
//! the remaining elementwise functions, boolean logic, `Trilu`, `OneHot`, `DepthToSpace` and
//! `SpaceToDepth`, `LRN`, and `QuantizeLinear` / `DequantizeLinear`. Each computes the ONNX
//! definition (docs/onnx.md, "Operators", says how and how closely).

use super::{attr_float, attr_int, attr_str, boolean, float, ints, string, Cx, R};
use crate::diag::E3016;
use crate::frontend::onnx::model::Node;
use crate::ir::{DType, DTypeCode, ExprId};
use crate::ops::Op;

/// The longest axis `Trilu`, `OneHot` and `LRN` build an index constant for (2^24 elements).
const MAX_INDEX_EXTENT: i64 = 1 << 24;

/// Converts `node` when it is one of this module's operators; `None` otherwise.
pub(super) fn convert(cx: &mut Cx<'_>, node: &Node) -> R<Option<ExprId>> {
    let out = match node.op_type.as_str() {
        "Round" => cx.unary(Op::Round)?,
        "Sign" => {
            // 1 above zero, -1 below, the input itself otherwise (zeros and NaN).
            let x = cx.input(0)?;
            let d = cx.dtype_of_expr(x)?;
            let zero = cx.scalar(0.0, d);
            let one = cx.scalar(1.0, d);
            let minus = cx.scalar(-1.0, d);
            let pos = cx.call(Op::Greater, &[x, zero], &[])?;
            let neg = cx.call(Op::Less, &[x, zero], &[])?;
            let rest = cx.call(Op::Where, &[neg, minus, x], &[])?;
            cx.call(Op::Where, &[pos, one, rest], &[])?
        }
        "IsNaN" => {
            let x = cx.input(0)?;
            cx.call(Op::NotEqual, &[x, x], &[])?
        }
        "IsInf" => {
            let x = cx.input(0)?;
            let d = cx.dtype_of_expr(x)?;
            let pos = attr_int(node, "detect_positive", 1) != 0;
            let neg = attr_int(node, "detect_negative", 1) != 0;
            match (pos, neg) {
                // Integers are never infinite.
                _ if !d.is_float() => cx.call(Op::Less, &[x, x], &[])?,
                (true, true) => {
                    let a = cx.call(Op::Abs, &[x], &[])?;
                    let inf = cx.scalar(f64::INFINITY, d);
                    cx.call(Op::Equal, &[a, inf], &[])?
                }
                (true, false) | (false, true) => {
                    let v = if pos {
                        f64::INFINITY
                    } else {
                        f64::NEG_INFINITY
                    };
                    let inf = cx.scalar(v, d);
                    cx.call(Op::Equal, &[x, inf], &[])?
                }
                // Nothing is detected: `x < x` is false everywhere, NaN included.
                (false, false) => cx.call(Op::Less, &[x, x], &[])?,
            }
        }
        "And" | "Or" | "Xor" => {
            let a = cx.input(0)?;
            let b = cx.input(1)?;
            for e in [a, b] {
                if !cx.dtype_of_expr(e)?.is_bool() {
                    return Err(cx.unsupported("inputs that are not booleans"));
                }
            }
            match node.op_type.as_str() {
                "And" => {
                    let f = cx.scalar(0.0, DType::BOOL);
                    cx.call(Op::Where, &[a, b, f], &[])?
                }
                "Or" => {
                    let t = cx.scalar(1.0, DType::BOOL);
                    cx.call(Op::Where, &[a, t, b], &[])?
                }
                _ => cx.call(Op::NotEqual, &[a, b], &[])?,
            }
        }
        "Tan" => {
            let x = cx.input(0)?;
            let s = cx.call(Op::Sin, &[x], &[])?;
            let c = cx.call(Op::Cos, &[x], &[])?;
            cx.call(Op::Divide, &[s, c], &[])?
        }
        "Sinh" | "Cosh" => {
            // (exp(x) -/+ exp(-x)) / 2
            let x = cx.input(0)?;
            let e = cx.call(Op::Exp, &[x], &[])?;
            let nx = cx.call(Op::Negative, &[x], &[])?;
            let en = cx.call(Op::Exp, &[nx], &[])?;
            let op = if node.op_type == "Sinh" {
                Op::Subtract
            } else {
                Op::Add
            };
            let s = cx.call(op, &[e, en], &[])?;
            cx.scale(s, 0.5)?
        }
        "Asin" => {
            // atan(x / sqrt(1 - x^2)): ±1 divide by zero into ±inf, whose atan is ±pi/2.
            let x = cx.input(0)?;
            let r = one_minus_square_root(cx, x)?;
            let q = cx.call(Op::Divide, &[x, r], &[])?;
            cx.call(Op::Atan, &[q], &[])?
        }
        "Acos" => {
            // 2 atan(sqrt((1 - x) / (1 + x))), accurate near 1 where pi/2 - asin(x) is not.
            let x = cx.input(0)?;
            let d = cx.dtype_of_expr(x)?;
            let one = cx.scalar(1.0, d);
            let num = cx.call(Op::Subtract, &[one, x], &[])?;
            let den = cx.add_scalar(x, 1.0)?;
            let q = cx.call(Op::Divide, &[num, den], &[])?;
            let r = cx.call(Op::Sqrt, &[q], &[])?;
            let a = cx.call(Op::Atan, &[r], &[])?;
            cx.scale(a, 2.0)?
        }
        "Asinh" => {
            // sign(x) log(|x| + sqrt(x^2 + 1)), odd by construction.
            let x = cx.input(0)?;
            let d = cx.dtype_of_expr(x)?;
            let a = cx.call(Op::Abs, &[x], &[])?;
            let a2 = cx.call(Op::Multiply, &[a, a], &[])?;
            let a21 = cx.add_scalar(a2, 1.0)?;
            let r = cx.call(Op::Sqrt, &[a21], &[])?;
            let s = cx.call(Op::Add, &[a, r], &[])?;
            let l = cx.call(Op::Log, &[s], &[])?;
            let nl = cx.call(Op::Negative, &[l], &[])?;
            let zero = cx.scalar(0.0, d);
            let neg = cx.call(Op::Less, &[x, zero], &[])?;
            cx.call(Op::Where, &[neg, nl, l], &[])?
        }
        "Acosh" => {
            // log(x + sqrt(x^2 - 1))
            let x = cx.input(0)?;
            let x2 = cx.call(Op::Multiply, &[x, x], &[])?;
            let x21 = cx.add_scalar(x2, -1.0)?;
            let r = cx.call(Op::Sqrt, &[x21], &[])?;
            let s = cx.call(Op::Add, &[x, r], &[])?;
            cx.call(Op::Log, &[s], &[])?
        }
        "Atanh" => {
            // log((1 + x) / (1 - x)) / 2
            let x = cx.input(0)?;
            let d = cx.dtype_of_expr(x)?;
            let one = cx.scalar(1.0, d);
            let num = cx.add_scalar(x, 1.0)?;
            let den = cx.call(Op::Subtract, &[one, x], &[])?;
            let q = cx.call(Op::Divide, &[num, den], &[])?;
            let l = cx.call(Op::Log, &[q], &[])?;
            cx.scale(l, 0.5)?
        }
        "Softsign" => {
            // x / (1 + |x|)
            let x = cx.input(0)?;
            let a = cx.call(Op::Abs, &[x], &[])?;
            let a1 = cx.add_scalar(a, 1.0)?;
            cx.call(Op::Divide, &[x, a1], &[])?
        }
        "ThresholdedRelu" => {
            let x = cx.input(0)?;
            let d = cx.dtype_of_expr(x)?;
            let alpha = cx.scalar(attr_float(node, "alpha", 1.0) as f64, d);
            let zero = cx.scalar(0.0, d);
            let keep = cx.call(Op::Greater, &[x, alpha], &[])?;
            cx.call(Op::Where, &[keep, x, zero], &[])?
        }
        "Shrink" => {
            // x + bias below -lambd, x - bias above lambd, 0 between.
            let x = cx.input(0)?;
            let d = cx.dtype_of_expr(x)?;
            let lambd = attr_float(node, "lambd", 0.5) as f64;
            let bias = attr_float(node, "bias", 0.0) as f64;
            let lo = cx.scalar(-lambd, d);
            let hi = cx.scalar(lambd, d);
            let zero = cx.scalar(0.0, d);
            let below = cx.call(Op::Less, &[x, lo], &[])?;
            let above = cx.call(Op::Greater, &[x, hi], &[])?;
            let up = cx.add_scalar(x, bias)?;
            let down = cx.add_scalar(x, -bias)?;
            let inner = cx.call(Op::Where, &[above, down, zero], &[])?;
            cx.call(Op::Where, &[below, up, inner], &[])?
        }
        "Celu" => {
            // max(0, x) + min(0, alpha (exp(x / alpha) - 1))
            let x = cx.input(0)?;
            let d = cx.dtype_of_expr(x)?;
            let alpha = attr_float(node, "alpha", 1.0) as f64;
            let zero = cx.scalar(0.0, d);
            let xa = cx.scale(x, 1.0 / alpha)?;
            let e = cx.call(Op::Exp, &[xa], &[])?;
            let em1 = cx.add_scalar(e, -1.0)?;
            let neg = cx.scale(em1, alpha)?;
            let lo = cx.call(Op::Minimum, &[zero, neg], &[])?;
            let hi = cx.call(Op::Maximum, &[zero, x], &[])?;
            cx.call(Op::Add, &[hi, lo], &[])?
        }
        "Mish" => {
            // x tanh(log(1 + exp(x)))
            let x = cx.input(0)?;
            let e = cx.call(Op::Exp, &[x], &[])?;
            let e1 = cx.add_scalar(e, 1.0)?;
            let sp = cx.call(Op::Log, &[e1], &[])?;
            let t = cx.call(Op::Tanh, &[sp], &[])?;
            cx.call(Op::Multiply, &[x, t], &[])?
        }
        "Swish" => {
            // x sigmoid(alpha x)
            let x = cx.input(0)?;
            let ax = cx.scale(x, attr_float(node, "alpha", 1.0) as f64)?;
            let s = cx.call(Op::Sigmoid, &[ax], &[])?;
            cx.call(Op::Multiply, &[x, s], &[])?
        }
        "DepthToSpace" | "SpaceToDepth" => depth_space(cx, node)?,
        "Trilu" => trilu(cx, node)?,
        "OneHot" => one_hot(cx, node)?,
        "LRN" => lrn(cx, node)?,
        "Mod" => modulo(cx, node)?,
        "CumSum" => cumsum(cx, node)?,
        "Hardmax" => hardmax(cx, node)?,
        "LpNormalization" => {
            let x = cx.input(0)?;
            let rank = cx.shape(x)?.len();
            let axis = cx.axis(attr_int(node, "axis", -1), rank)? as i64;
            let norm = match attr_int(node, "p", 2) {
                1 => {
                    let a = cx.call(Op::Abs, &[x], &[])?;
                    reduce_keep(cx, Op::Sum, a, &[axis])?
                }
                2 => {
                    let x2 = cx.call(Op::Multiply, &[x, x], &[])?;
                    let s = reduce_keep(cx, Op::Sum, x2, &[axis])?;
                    cx.call(Op::Sqrt, &[s], &[])?
                }
                p => return Err(cx.unsupported(format_args!("p = {p}"))),
            };
            // A zero norm divides by one (its line is all zeros and stays so).
            let d = cx.dtype_of_expr(x)?;
            let zero = cx.scalar(0.0, d);
            let one = cx.scalar(1.0, d);
            let is_zero = cx.call(Op::Equal, &[norm, zero], &[])?;
            let norm = cx.call(Op::Where, &[is_zero, one, norm], &[])?;
            cx.call(Op::Divide, &[x, norm], &[])?
        }
        "MeanVarianceNormalization" => {
            // (x - mean) / (sqrt(variance) + 1e-9) over `axes` (default 0, 2, 3)
            let x = cx.input(0)?;
            let rank = cx.shape(x)?.len();
            let axes = super::attr_ints(node, "axes").unwrap_or_else(|| vec![0, 2, 3]);
            let axes = cx.axes(&axes, rank)?;
            let (centred, var) = centred_variance(cx, x, &axes)?;
            let sd = cx.call(Op::Sqrt, &[var], &[])?;
            let den = cx.add_scalar(sd, 1e-9)?;
            cx.call(Op::Divide, &[centred, den], &[])?
        }
        "GroupNormalization" => group_norm(cx, node)?,
        "RMSNormalization" => {
            // x / sqrt(mean(x²) + epsilon) · scale over the axes from `axis` on.
            let x = cx.input(0)?;
            let scale = cx.input(1)?;
            let rank = cx.shape(x)?.len();
            let axis = cx.axis(attr_int(node, "axis", -1), rank)?;
            let axes: Vec<i64> = (axis as i64..rank as i64).collect();
            let eps = attr_float(node, "epsilon", 1e-5) as f64;
            let x2 = cx.call(Op::Multiply, &[x, x], &[])?;
            let m = reduce_keep(cx, Op::Mean, x2, &axes)?;
            let me = cx.add_scalar(m, eps)?;
            let rms = cx.call(Op::Sqrt, &[me], &[])?;
            let y = cx.call(Op::Divide, &[x, rms], &[])?;
            cx.call(Op::Multiply, &[y, scale], &[])?
        }
        "GatherND" => gather_nd(cx, node)?,
        "DequantizeLinear" => dequantize(cx, node)?,
        "QuantizeLinear" => quantize(cx, node)?,
        _ => return Ok(None),
    };
    Ok(Some(out))
}

/// `sqrt(1 - x^2)`.
fn one_minus_square_root(cx: &mut Cx<'_>, x: ExprId) -> R<ExprId> {
    let d = cx.dtype_of_expr(x)?;
    let one = cx.scalar(1.0, d);
    let x2 = cx.call(Op::Multiply, &[x, x], &[])?;
    let r = cx.call(Op::Subtract, &[one, x2], &[])?;
    cx.call(Op::Sqrt, &[r], &[])
}

/// `DepthToSpace` (modes DCR and CRD) and `SpaceToDepth` of a 4-d input: a reshape to six
/// axes, a transpose and a reshape back.
fn depth_space(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let x = cx.input(0)?;
    let s = cx.shape(x)?;
    if s.len() != 4 {
        return Err(cx.unsupported(format_args!("an input of rank {}", s.len())));
    }
    let b = attr_int(node, "blocksize", 0);
    if !(1..=1 << 16).contains(&b) {
        return Err(cx.unsupported(format_args!("blocksize {b}")));
    }
    let (n, c, h, w) = (s[0], s[1], s[2], s[3]);
    let (six, perm, out) = if node.op_type == "DepthToSpace" {
        if c % (b * b) != 0 {
            return Err(cx.unsupported(format_args!(
                "{c} channels, not a multiple of blocksize² = {}",
                b * b
            )));
        }
        let c2 = c / (b * b);
        let out = vec![n, c2, h * b, w * b];
        match attr_str(node, "mode", "DCR") {
            "DCR" => (vec![n, b, b, c2, h, w], vec![0, 3, 4, 1, 5, 2], out),
            "CRD" => (vec![n, c2, b, b, h, w], vec![0, 1, 4, 2, 5, 3], out),
            m => return Err(cx.unsupported(format_args!("mode \"{m}\""))),
        }
    } else {
        if h % b != 0 || w % b != 0 {
            return Err(cx.unsupported(format_args!(
                "spatial extents {h}×{w}, not multiples of blocksize {b}"
            )));
        }
        (
            vec![n, c, h / b, b, w / b, b],
            vec![0, 3, 5, 1, 2, 4],
            vec![n, c * b * b, h / b, w / b],
        )
    };
    let r = cx.reshape(x, &six)?;
    let t = cx.call(Op::Transpose, &[r], &[("axes", ints(&perm))])?;
    cx.reshape(t, &out)
}

/// `arange(n)` as an int64 constant of `rank` axes, the values along `axis`.
fn arange_along(cx: &mut Cx<'_>, n: i64, axis: usize, rank: usize) -> R<ExprId> {
    if !(0..=MAX_INDEX_EXTENT).contains(&n) {
        return Err(cx.unsupported(format_args!(
            "an axis of {n} (collage takes up to {MAX_INDEX_EXTENT})"
        )));
    }
    let values: Vec<i64> = (0..n).collect();
    let c = cx.i64s(&values);
    let mut shape = vec![1; rank];
    shape[axis] = n;
    cx.reshape(c, &shape)
}

/// `Trilu`: `where(keep, x, 0)` with `keep` comparing column and row indices (`j - i >= k` for
/// the upper triangle, `j - i <= k` for the lower), built from two index constants.
fn trilu(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let x = cx.input(0)?;
    let s = cx.shape(x)?;
    let r = s.len();
    if r < 2 {
        return Err(cx.unsupported(format_args!("an input of rank {r}")));
    }
    let k = match cx.const_ints(1)? {
        Some(v) => *v
            .first()
            .ok_or_else(|| cx.error(E3016, "`Trilu`'s k is empty"))?,
        None => 0,
    };
    let k = k.clamp(-(1 << 40), 1 << 40);
    let rows = arange_along(cx, s[r - 2], 0, 2)?;
    let cols = arange_along(cx, s[r - 1], 1, 2)?;
    let shifted = cx.add_scalar(rows, k as f64)?;
    let op = if attr_int(node, "upper", 1) != 0 {
        Op::GreaterEqual
    } else {
        Op::LessEqual
    };
    let keep = cx.call(op, &[cols, shifted], &[])?;
    let d = cx.dtype_of_expr(x)?;
    let zero = cx.scalar(0.0, d);
    cx.call(Op::Where, &[keep, x, zero], &[])
}

/// `OneHot`: `where(index == arange(depth), on, off)` with the index (cast to int64, negative
/// ones counted from `depth`) given a new axis at `axis`. `depth` and `values` must be known.
fn one_hot(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let idx = cx.input(0)?;
    let values_in = cx.input(2)?;
    let depth = cx
        .const_floats(1)?
        .and_then(|v| v.first().copied())
        .ok_or_else(|| cx.error(E3016, "`OneHot` needs its depth"))?;
    let values = cx
        .const_floats(2)?
        .filter(|v| v.len() == 2)
        .ok_or_else(|| cx.unsupported("values that are not two known numbers"))?;
    if !depth.is_finite() || depth < 1.0 {
        return Err(cx.unsupported(format_args!("depth {depth}")));
    }
    let depth = depth as i64;
    let shape = cx.shape(idx)?;
    let rank = shape.len() + 1;
    let axis = cx.axis(attr_int(node, "axis", -1), rank)?;
    let i = cx.cast(idx, DType::I64)?;
    let zero = cx.scalar(0.0, DType::I64);
    let neg = cx.call(Op::Less, &[i, zero], &[])?;
    let wrapped = cx.add_scalar(i, depth as f64)?;
    let i = cx.call(Op::Where, &[neg, wrapped, i], &[])?;
    let mut with_axis = shape.clone();
    with_axis.insert(axis, 1);
    let i = cx.reshape(i, &with_axis)?;
    let ar = arange_along(cx, depth, axis, rank)?;
    let hot = cx.call(Op::Equal, &[i, ar], &[])?;
    let d = cx.dtype_of_expr(values_in)?;
    let off = cx.scalar(values[0], d);
    let on = cx.scalar(values[1], d);
    cx.call(Op::Where, &[hot, on, off], &[])
}

/// `LRN`: `x / (bias + alpha/size · Σ x²)^beta`, the sum over `size` neighbouring channels
/// (`floor((size-1)/2)` before, `ceil((size-1)/2)` after): an average pooling of `x²` over a
/// window of channels, with the padding counted, times `alpha`.
fn lrn(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let x = cx.input(0)?;
    let s = cx.shape(x)?;
    if s.len() < 3 {
        return Err(cx.unsupported(format_args!("an input of rank {}", s.len())));
    }
    let size = attr_int(node, "size", 0);
    if !(1..=MAX_INDEX_EXTENT).contains(&size) {
        return Err(cx.unsupported(format_args!("size {size}")));
    }
    let alpha = attr_float(node, "alpha", 1e-4) as f64;
    let beta = attr_float(node, "beta", 0.75) as f64;
    let bias = attr_float(node, "bias", 1.0) as f64;
    let (n, c) = (s[0], s[1]);
    let rest: i64 = s[2..].iter().product();
    let sq = cx.call(Op::Multiply, &[x, x], &[])?;
    let sq = cx.reshape(sq, &[n, 1, c, rest])?;
    let before = (size - 1) / 2;
    let after = size - 1 - before;
    let mean = cx.call(
        Op::AvgPool2d,
        &[sq],
        &[
            ("pool_size", ints(&[size, 1])),
            ("padding", ints(&[before, 0, after, 0])),
            ("count_include_pad", boolean(true)),
        ],
    )?;
    let mean = cx.reshape(mean, &s)?;
    let scaled = cx.scale(mean, alpha)?;
    let base = cx.add_scalar(scaled, bias)?;
    let d = cx.dtype_of_expr(x)?;
    let b = cx.scalar(beta, d);
    let den = cx.call(Op::Power, &[base, b], &[])?;
    cx.call(Op::Divide, &[x, den], &[])
}

/// A quantization parameter (scale or zero point) shaped to broadcast against an input of
/// shape `s`: a scalar as it is, a 1-d tensor along `axis`.
fn along_axis(cx: &mut Cx<'_>, p: ExprId, s: &[i64], node: &Node) -> R<ExprId> {
    let ps = cx.shape(p)?;
    if ps.iter().product::<i64>() == 1 && ps.len() <= 1 {
        return cx.reshape(p, &[]);
    }
    if attr_int(node, "block_size", 0) != 0 {
        return Err(cx.unsupported("blocked quantization (block_size)"));
    }
    let axis = cx.axis(attr_int(node, "axis", 1), s.len())?;
    if ps.len() != 1 || ps[0] != s[axis] {
        return Err(cx.unsupported(format_args!(
            "a parameter of shape {ps:?} for an input of shape {s:?} along axis {axis}"
        )));
    }
    let mut shape = vec![1; s.len()];
    shape[axis] = s[axis];
    cx.reshape(p, &shape)
}

/// `DequantizeLinear`: `(x - zero_point) · scale` in the scale's type.
fn dequantize(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let x = cx.input(0)?;
    let s = cx.shape(x)?;
    let scale = cx.input(1)?;
    let f = cx.dtype_of_expr(scale)?;
    let scale = along_axis(cx, scale, &s, node)?;
    let mut v = cx.cast(x, f)?;
    if let Some(zp) = cx.opt_input(2)? {
        let zp = along_axis(cx, zp, &s, node)?;
        let zp = cx.cast(zp, f)?;
        v = cx.call(Op::Subtract, &[v, zp], &[])?;
    }
    cx.call(Op::Multiply, &[v, scale], &[])
}

/// `QuantizeLinear`: `saturate(round(x / scale) + zero_point)` in the zero point's type
/// (`output_dtype`, else uint8 without a zero point), rounding halves to even.
fn quantize(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let x = cx.input(0)?;
    let s = cx.shape(x)?;
    let f = cx.dtype_of_expr(x)?;
    let scale = cx.input(1)?;
    let scale = along_axis(cx, scale, &s, node)?;
    let scale = cx.cast(scale, f)?;
    let zp = cx.opt_input(2)?;
    let to = match zp {
        Some(z) => cx.dtype_of_expr(z)?,
        None => match attr_int(node, "output_dtype", 0) {
            0 => DType::U8,
            code => crate::frontend::onnx::tensor::DType::from_onnx(code as i32)
                .map(crate::frontend::onnx::import::dtype_of)
                .ok_or_else(|| cx.unsupported(format_args!("output_dtype {code}")))?,
        },
    };
    let (lo, hi) = match (to.code, to.bits) {
        (DTypeCode::UInt, b @ (8 | 16)) => (0.0, ((1u64 << b) - 1) as f64),
        (DTypeCode::Int, b @ (8 | 16 | 32)) => {
            (-((1u64 << (b - 1)) as f64), ((1u64 << (b - 1)) - 1) as f64)
        }
        _ => return Err(cx.unsupported(format_args!("output type {to}"))),
    };
    let q = cx.call(Op::Divide, &[x, scale], &[])?;
    let mut q = cx.call(Op::Round, &[q], &[])?;
    if let Some(z) = zp {
        let z = along_axis(cx, z, &s, node)?;
        let z = cx.cast(z, f)?;
        q = cx.call(Op::Add, &[q, z], &[])?;
    }
    let q = cx.call(
        Op::Clip,
        &[q],
        &[("a_min", float(lo)), ("a_max", float(hi))],
    )?;
    cx.call(Op::Cast, &[q], &[("dtype", string(&to.to_string()))])
}

/// `op` (a reduction) over `axes`, keeping them.
fn reduce_keep(cx: &mut Cx<'_>, op: Op, x: ExprId, axes: &[i64]) -> R<ExprId> {
    cx.call(
        op,
        &[x],
        &[("axis", ints(axes)), ("keepdims", boolean(true))],
    )
}

/// `x - mean` and the variance (mean of its square) over `axes`.
fn centred_variance(cx: &mut Cx<'_>, x: ExprId, axes: &[i64]) -> R<(ExprId, ExprId)> {
    let m = reduce_keep(cx, Op::Mean, x, axes)?;
    let c = cx.call(Op::Subtract, &[x, m], &[])?;
    let c2 = cx.call(Op::Multiply, &[c, c], &[])?;
    let v = reduce_keep(cx, Op::Mean, c2, axes)?;
    Ok((c, v))
}

/// `Mod`: for floats (`fmod = 1`) `a - trunc(a / b) · b`, the sign of `a`; for integers the
/// truncated remainder with `fmod = 1`, else the floored one (the sign of `b`).
fn modulo(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let a = cx.input(0)?;
    let b = cx.input(1)?;
    let d = cx.dtype_of_expr(a)?;
    let fmod = attr_int(node, "fmod", 0) != 0;
    let zero = cx.scalar(0.0, d);
    if d.is_float() {
        if !fmod {
            return Err(cx.unsupported("floats and fmod = 0 (ONNX requires fmod = 1)"));
        }
        let q = cx.call(Op::Divide, &[a, b], &[])?;
        let neg = cx.call(Op::Less, &[q, zero], &[])?;
        let up = cx.call(Op::Ceil, &[q], &[])?;
        let down = cx.call(Op::Floor, &[q], &[])?;
        let t = cx.call(Op::Where, &[neg, up, down], &[])?;
        let tb = cx.call(Op::Multiply, &[t, b], &[])?;
        return cx.call(Op::Subtract, &[a, tb], &[]);
    }
    // Integer division truncates, so `a - (a / b) b` is the truncated remainder.
    let q = cx.call(Op::Divide, &[a, b], &[])?;
    let qb = cx.call(Op::Multiply, &[q, b], &[])?;
    let r = cx.call(Op::Subtract, &[a, qb], &[])?;
    if fmod {
        return Ok(r);
    }
    let nonzero = cx.call(Op::NotEqual, &[r, zero], &[])?;
    let rn = cx.call(Op::Less, &[r, zero], &[])?;
    let bn = cx.call(Op::Less, &[b, zero], &[])?;
    let signs = cx.call(Op::NotEqual, &[rn, bn], &[])?;
    let no = cx.scalar(0.0, DType::BOOL);
    let fix = cx.call(Op::Where, &[nonzero, signs, no], &[])?;
    let rb = cx.call(Op::Add, &[r, b], &[])?;
    cx.call(Op::Where, &[fix, rb, r], &[])
}

/// `CumSum` along a known axis: the input given a second copy of the axis, masked by which
/// positions each output sums (`exclusive`, `reverse`), and summed over the copy. This costs
/// n² per line of n, so the masked product may have at most 2^26 elements.
fn cumsum(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let x = cx.input(0)?;
    let s = cx.shape(x)?;
    let axis = cx
        .const_ints(1)?
        .and_then(|v| v.first().copied())
        .ok_or_else(|| cx.error(E3016, "`CumSum` needs its axis"))?;
    let rank = s.len();
    let axis = cx.axis(axis, rank)?;
    let n = s[axis];
    let total = s.iter().product::<i64>().saturating_mul(n.max(1));
    if total > 1 << 26 {
        return Err(cx.unsupported(format_args!(
            "{n} elements along the axis of an input of shape {s:?} (collage takes sums of up \
             to 2^26 products)"
        )));
    }
    let outs = arange_along(cx, n, 0, 2)?;
    let ins = arange_along(cx, n, 1, 2)?;
    let op = match (
        attr_int(node, "exclusive", 0) != 0,
        attr_int(node, "reverse", 0) != 0,
    ) {
        (false, false) => Op::LessEqual,
        (true, false) => Op::Less,
        (false, true) => Op::GreaterEqual,
        (true, true) => Op::Greater,
    };
    let mask = cx.call(op, &[ins, outs], &[])?;
    let mut mask_shape = vec![1; rank + 1];
    mask_shape[axis] = n;
    mask_shape[axis + 1] = n;
    let mask = cx.reshape(mask, &mask_shape)?;
    let mut xs = s.clone();
    xs.insert(axis, 1);
    let xe = cx.reshape(x, &xs)?;
    let d = cx.dtype_of_expr(x)?;
    let zero = cx.scalar(0.0, d);
    let terms = cx.call(Op::Where, &[mask, xe, zero], &[])?;
    cx.call(
        Op::Sum,
        &[terms],
        &[
            ("axis", ints(&[axis as i64 + 1])),
            ("keepdims", boolean(false)),
        ],
    )
}

/// `Hardmax`: 1 where the first maximum along `axis` is, else 0 (opset 13 and later, or a
/// 2-d input with the old default axis 1).
fn hardmax(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let x = cx.input(0)?;
    let s = cx.shape(x)?;
    let rank = s.len();
    let opset = cx.opset();
    let raw = attr_int(node, "axis", if opset < 13 { 1 } else { -1 });
    let axis = cx.axis(raw, rank)?;
    if opset < 13 && axis + 1 != rank {
        return Err(cx.unsupported("an axis other than the last before opset 13"));
    }
    let am = cx.call(
        Op::Argmax,
        &[x],
        &[("axis", ints(&[axis as i64])), ("keepdims", boolean(true))],
    )?;
    let am = cx.cast(am, DType::I64)?;
    let ar = arange_along(cx, s[axis], axis, rank)?;
    let hot = cx.call(Op::Equal, &[am, ar], &[])?;
    let d = cx.dtype_of_expr(x)?;
    cx.cast(hot, d)
}

/// `GroupNormalization`: the channels in `num_groups` groups, each normalised over its channels
/// and the spatial axes, then scaled and shifted per channel (opset 21) or per group (opset 18,
/// the group's value repeated over its channels).
fn group_norm(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let x = cx.input(0)?;
    let s = cx.shape(x)?;
    if s.len() < 2 {
        return Err(cx.unsupported(format_args!("an input of rank {}", s.len())));
    }
    let g = attr_int(node, "num_groups", 0);
    let (n, c) = (s[0], s[1]);
    if g < 1 || c % g != 0 {
        return Err(cx.unsupported(format_args!("{g} groups of {c} channels")));
    }
    let eps = attr_float(node, "epsilon", 1e-5) as f64;
    let rest: i64 = s[1..].iter().product::<i64>() / g;
    let xr = cx.reshape(x, &[n, g, rest])?;
    let (centred, var) = centred_variance(cx, xr, &[2])?;
    let ve = cx.add_scalar(var, eps)?;
    let sd = cx.call(Op::Sqrt, &[ve], &[])?;
    let y = cx.call(Op::Divide, &[centred, sd], &[])?;
    let y = cx.reshape(y, &s)?;
    let mut per = vec![1; s.len()];
    per[1] = c;
    let mut params = Vec::new();
    for i in [1, 2] {
        let p = cx.input(i)?;
        let len: i64 = cx.shape(p)?.iter().product();
        let p = if len == c {
            cx.reshape(p, &per)?
        } else if len == g {
            let col = cx.reshape(p, &[g, 1])?;
            let rep = cx.call(Op::BroadcastTo, &[col], &[("shape", ints(&[g, c / g]))])?;
            cx.reshape(rep, &per)?
        } else {
            return Err(cx.unsupported(format_args!(
                "a scale or bias of {len} values for {c} channels in {g} groups"
            )));
        };
        params.push(p);
    }
    let y = cx.call(Op::Multiply, &[y, params[0]], &[])?;
    cx.call(Op::Add, &[y, params[1]], &[])
}

/// `GatherND` with `batch_dims = 0`: each index tuple becomes a position in the data flattened
/// over the indexed axes (negative components counted from the axis's end), then `take`.
fn gather_nd(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    if attr_int(node, "batch_dims", 0) != 0 {
        return Err(cx.unsupported("batch_dims other than 0"));
    }
    let data = cx.input(0)?;
    let idx = cx.input(1)?;
    let ds = cx.shape(data)?;
    let is = cx.shape(idx)?;
    let k = *is
        .last()
        .ok_or_else(|| cx.unsupported("indices of rank 0"))?;
    if k < 1 || k as usize > ds.len() {
        return Err(cx.unsupported(format_args!(
            "index tuples of {k} for data of rank {}",
            ds.len()
        )));
    }
    let k = k as usize;
    let mut strides = vec![1i64; k];
    for j in (0..k.saturating_sub(1)).rev() {
        strides[j] = strides[j + 1] * ds[j + 1];
    }
    let outer: i64 = ds[..k].iter().product();
    let mut flat_shape = vec![outer];
    flat_shape.extend_from_slice(&ds[k..]);
    let flat_data = cx.reshape(data, &flat_shape)?;
    let i = cx.cast(idx, DType::I64)?;
    let extents = cx.i64s(&ds[..k]);
    let zero = cx.scalar(0.0, DType::I64);
    let neg = cx.call(Op::Less, &[i, zero], &[])?;
    let wrapped = cx.call(Op::Add, &[i, extents], &[])?;
    let i = cx.call(Op::Where, &[neg, wrapped, i], &[])?;
    let st = cx.i64s(&strides);
    let offs = cx.call(Op::Multiply, &[i, st], &[])?;
    let flat = cx.call(
        Op::Sum,
        &[offs],
        &[
            ("axis", ints(&[is.len() as i64 - 1])),
            ("keepdims", boolean(false)),
        ],
    )?;
    cx.call(
        Op::Take,
        &[flat_data, flat],
        &[("axis", super::int(0)), ("mode", string("clip"))],
    )
}
