//! Neural-network operators: `nn.dense`, `nn.matmul`, `nn.batch_matmul`, activations and the
//! softmax family, `nn.bias_add`, `nn.pad`, `nn.batch_flatten` and upsampling.

use super::rel::{self, def, dims_agree, norm_axis, tensor, tensor_type};
use super::{Op, OpDef, OpPattern, RelCall, RelError};
use crate::ir::attrs::field;
use crate::ir::{AttrDefault as D, AttrField, AttrType as T, AttrValue, DType, Dim, Type};

use OpPattern::{Broadcast, ElemWise, Injective, OutEWiseFusable};

const DATA: &[&str] = &["data"];

/// `DenseAttrs`: `units` has no declared default, so it is always printed.
const DENSE_ATTRS: &[AttrField] = &[
    field("units", T::OptInt, D::Required),
    field("out_dtype", T::DType, D::Str("")),
];

/// `qnn.dense` attributes: `DenseAttrs` plus the requantisation hints.
pub(super) const QNN_DENSE_ATTRS: &[AttrField] = &[
    field("units", T::OptInt, D::Required),
    field("out_dtype", T::DType, D::Str("")),
    field("axis", T::Int, D::Int(-1)),
    field("rq_out_dtype", T::DType, D::Str("")),
];

const MATMUL_ATTRS: &[AttrField] = &[
    field("units", T::OptInt, D::Required),
    field("out_dtype", T::DType, D::Str("")),
    field("transpose_a", T::Bool, D::Bool(false)),
    field("transpose_b", T::Bool, D::Bool(false)),
];

/// `BatchMatmulAttrs`. TVM declares `transpose_b` false (the Python wrapper passes true, which is
/// why printed models spell out `transpose_b=True`).
const BATCH_MATMUL_ATTRS: &[AttrField] = &[
    field("out_dtype", T::DType, D::Str("")),
    field("transpose_a", T::Bool, D::Bool(false)),
    field("transpose_b", T::Bool, D::Bool(false)),
];

const AXIS_1: &[AttrField] = &[field("axis", T::Int, D::Int(1))];
const SOFTMAX_ATTRS: &[AttrField] = &[field("axis", T::Int, D::Int(-1))];
const LEAKY_RELU_ATTRS: &[AttrField] = &[field("alpha", T::Float, D::Float(0.25))];

const PAD_ATTRS: &[AttrField] = &[
    field("pad_width", T::IntsNested, D::Required),
    field("pad_mode", T::Str, D::Str("constant")),
];

const UPSAMPLING_ATTRS: &[AttrField] = &[
    field("scale_h", T::Float, D::Required),
    field("scale_w", T::Float, D::Required),
    field("layout", T::Str, D::Str("NCHW")),
    field("method", T::Str, D::Str("nearest_neighbor")),
    field("align_corners", T::Bool, D::Bool(false)),
];

const UPSAMPLING3D_ATTRS: &[AttrField] = &[
    field("scale_d", T::Float, D::Required),
    field("scale_h", T::Float, D::Required),
    field("scale_w", T::Float, D::Required),
    field("layout", T::Str, D::Str("NCDHW")),
    field("method", T::Str, D::Str("nearest_neighbor")),
    field(
        "coordinate_transformation_mode",
        T::Str,
        D::Str("half_pixel"),
    ),
];

pub(super) const OPS: &[OpDef] = &[
    def(
        Op::Dense,
        &["data", "weight"],
        DENSE_ATTRS,
        OutEWiseFusable,
        dense,
    ),
    def(
        Op::Matmul,
        &["tensor_a", "tensor_b"],
        MATMUL_ATTRS,
        OutEWiseFusable,
        matmul,
    ),
    def(
        Op::BatchMatmul,
        &["x", "y"],
        BATCH_MATMUL_ATTRS,
        OutEWiseFusable,
        batch_matmul,
    ),
    def(Op::Relu, DATA, &[], ElemWise, rel::identity),
    def(
        Op::LeakyRelu,
        DATA,
        LEAKY_RELU_ATTRS,
        ElemWise,
        rel::identity,
    ),
    def(
        Op::Prelu,
        &["data", "alpha"],
        AXIS_1,
        Broadcast,
        per_channel,
    ),
    def(
        Op::BiasAdd,
        &["data", "bias"],
        AXIS_1,
        Broadcast,
        per_channel,
    ),
    def(Op::Softmax, DATA, SOFTMAX_ATTRS, OutEWiseFusable, softmax),
    def(
        Op::LogSoftmax,
        DATA,
        SOFTMAX_ATTRS,
        OutEWiseFusable,
        softmax,
    ),
    def(
        Op::FastSoftmax,
        DATA,
        SOFTMAX_ATTRS,
        OutEWiseFusable,
        softmax,
    ),
    def(Op::Pad, &["data", "pad_value"], PAD_ATTRS, Injective, pad),
    def(Op::BatchFlatten, DATA, &[], Injective, batch_flatten),
    def(
        Op::Upsampling,
        DATA,
        UPSAMPLING_ATTRS,
        Injective,
        upsampling,
    ),
    def(
        Op::Upsampling3d,
        DATA,
        UPSAMPLING3D_ATTRS,
        Injective,
        upsampling3d,
    ),
];

fn dense(c: &RelCall<'_>) -> Result<Type, RelError> {
    dense_core(c, None)
}

/// Checks the `units` attribute, when given, against the weight-derived output extent.
fn check_units(c: &RelCall<'_>, weight: &crate::ir::TensorType, n: &Dim) -> Result<(), RelError> {
    if let Some(u) = rel::opt_int_attr(c, "units")? {
        if !dims_agree(&Dim::Fixed(u), n) {
            return Err(RelError::at(
                1,
                format!(
                    "`{}` has units={u}, but weight `{weight}` gives {n} output units",
                    c.op.name
                ),
            ));
        }
    }
    Ok(())
}

/// `data [.., K] x weight [units, K] -> [.., units]`; `default_dtype` is the result dtype when
/// `out_dtype` is unset (the data dtype if `None`).
pub(super) fn dense_core(c: &RelCall<'_>, default_dtype: Option<DType>) -> Result<Type, RelError> {
    let data = rel::tensor_of_min_rank(c, 0, 1)?;
    let weight = rel::tensor_of_rank(c, 1, 2)?;
    let k = &data.shape[data.rank() - 1];
    if !dims_agree(k, &weight.shape[1]) {
        return Err(RelError::at(
            1,
            format!(
                "`{}` contracts the last axis of data `{data}` ({k}) with axis 1 of weight `{weight}` ({}), which differ",
                c.op.name, weight.shape[1]
            ),
        ));
    }
    check_units(c, weight, &weight.shape[0])?;
    let mut shape = data.shape.clone();
    shape[data.rank() - 1] = weight.shape[0].clone();
    let dtype = rel::dtype_or(c, "out_dtype", default_dtype.unwrap_or(data.dtype))?;
    Ok(tensor_type(shape, dtype))
}

/// `nn.matmul`: `tensor_a [.., M, K]` (or `[.., K, M]` with `transpose_a`) times the 2-d
/// `tensor_b [K, N]` (or `[N, K]` with `transpose_b`).
fn matmul(c: &RelCall<'_>) -> Result<Type, RelError> {
    let ta = c.bool("transpose_a")?;
    let tb = c.bool("transpose_b")?;
    let a = rel::tensor_of_min_rank(c, 0, if ta { 2 } else { 1 })?;
    let b = rel::tensor_of_rank(c, 1, 2)?;
    let r = a.rank();
    let ka = if ta { &a.shape[r - 2] } else { &a.shape[r - 1] };
    let (kb, n) = if tb {
        (&b.shape[1], &b.shape[0])
    } else {
        (&b.shape[0], &b.shape[1])
    };
    if !dims_agree(ka, kb) {
        return Err(RelError::at(
            1,
            format!(
                "`nn.matmul` contracts `{a}` (extent {ka}) with `{b}` (extent {kb}), which differ"
            ),
        ));
    }
    check_units(c, b, n)?;
    let mut shape = a.shape.clone();
    if ta {
        shape[r - 2] = a.shape[r - 1].clone();
    }
    shape[r - 1] = n.clone();
    let dtype = rel::dtype_or(c, "out_dtype", a.dtype)?;
    Ok(tensor_type(shape, dtype))
}

/// `nn.batch_matmul`: `x [B, M, K] x y [B, K, N]` (each optionally transposed in its last two
/// axes); a batch of 1 broadcasts.
fn batch_matmul(c: &RelCall<'_>) -> Result<Type, RelError> {
    let x = rel::tensor_of_rank(c, 0, 3)?;
    let y = rel::tensor_of_rank(c, 1, 3)?;
    let ta = c.bool("transpose_a")?;
    let tb = c.bool("transpose_b")?;
    let (m, kx) = if ta {
        (&x.shape[2], &x.shape[1])
    } else {
        (&x.shape[1], &x.shape[2])
    };
    let (ky, n) = if tb {
        (&y.shape[2], &y.shape[1])
    } else {
        (&y.shape[1], &y.shape[2])
    };
    if !dims_agree(kx, ky) {
        return Err(RelError::at(
            1,
            format!(
                "`nn.batch_matmul` contracts `{x}` (extent {kx}) with `{y}` (extent {ky}), which differ (transpose_a={ta}, transpose_b={tb})"
            ),
        ));
    }
    let (bx, by) = (&x.shape[0], &y.shape[0]);
    let batch = match (bx.fixed(), by.fixed()) {
        (Some(a), Some(b)) if a == b || b == 1 => bx.clone(),
        (Some(1), Some(_)) => by.clone(),
        (Some(_), Some(_)) => {
            return Err(RelError::at(
                1,
                format!("`nn.batch_matmul` batch sizes of `{x}` and `{y}` differ and neither is 1"),
            ))
        }
        (Some(1), None) => by.clone(),
        (None, Some(1)) => bx.clone(),
        (Some(_), None) => bx.clone(),
        (None, Some(_)) => by.clone(),
        (None, None) => Dim::Any,
    };
    let dtype = rel::dtype_or(c, "out_dtype", x.dtype)?;
    Ok(tensor_type(vec![batch, m.clone(), n.clone()], dtype))
}

/// `nn.bias_add` / `nn.prelu`: argument 1 is a 1-d vector matching `data.shape[axis]`, with the
/// data's dtype. The result has the data's type.
fn per_channel(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let axis = norm_axis(c, c.int("axis")?, data.rank())?;
    let v = tensor(c, 1)?;
    let ch = &data.shape[axis];
    if v.rank() != 1 || !dims_agree(&v.shape[0], ch) || v.dtype != data.dtype {
        return Err(RelError::at(
            1,
            format!(
                "`{}` expects argument `{}` to be a 1-d `{}` tensor of {ch} elements (axis {axis} of `{data}`), found `{v}`",
                c.op.name,
                c.arg_name(1),
                data.dtype
            ),
        ));
    }
    Ok(Type::Tensor(data.clone()))
}

/// The softmax family: the axis must exist; the result has the data's type.
fn softmax(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    norm_axis(c, c.int("axis")?, data.rank())?;
    Ok(Type::Tensor(data.clone()))
}

/// `nn.pad`: one `[before, after]` pair of non-negative widths per axis; a scalar pad value.
fn pad(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let value = tensor(c, 1)?;
    if value.rank() != 0 {
        return Err(RelError::at(
            1,
            format!("`nn.pad` needs a scalar pad value, found `{value}`"),
        ));
    }
    let mode = c.str("pad_mode")?;
    if !matches!(mode, "constant" | "edge" | "reflect") {
        return Err(RelError::new(format!(
            "attribute `pad_mode` of `nn.pad` must be \"constant\", \"edge\" or \"reflect\", found \"{mode}\""
        )));
    }
    let rows = match c.attr("pad_width") {
        AttrValue::Array(rows) => rows,
        AttrValue::None => return Err(RelError::new("`nn.pad` needs the attribute `pad_width`")),
        other => {
            return Err(RelError::new(format!(
                "attribute `pad_width` of `nn.pad` must be an array of [before, after] pairs, found {other}"
            )))
        }
    };
    if rows.len() != data.rank() {
        return Err(RelError::new(format!(
            "attribute `pad_width` of `nn.pad` has {} pairs, but data `{data}` has {} axes",
            rows.len(),
            data.rank()
        )));
    }
    let mut shape = Vec::with_capacity(data.rank());
    for (i, (row, d)) in rows.iter().zip(&data.shape).enumerate() {
        let pair = row.as_ints().unwrap_or_default();
        let [before, after] = pair[..] else {
            return Err(RelError::new(format!(
                "entry {i} of `pad_width` of `nn.pad` must be a [before, after] pair, found {row}"
            )));
        };
        if before < 0 || after < 0 {
            return Err(RelError::new(format!(
                "entry {i} of `pad_width` of `nn.pad` must not be negative, found {row}"
            )));
        }
        let extra = before.checked_add(after).ok_or_else(|| rel::overflow(c))?;
        shape.push(rel::add_dims(c, d, &Dim::Fixed(extra))?);
    }
    Ok(tensor_type(shape, data.dtype))
}

/// `nn.batch_flatten`: `[N, d1, d2, ..] -> [N, d1 * d2 * ..]`.
fn batch_flatten(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = rel::tensor_of_min_rank(c, 0, 1)?;
    let rest = match rel::num_elements(c, &data.shape[1..])? {
        Some(n) => Dim::Fixed(n),
        None => Dim::Any,
    };
    Ok(tensor_type(vec![data.shape[0].clone(), rest], data.dtype))
}

/// Scales the spatial axes named in `scales` (axis letter, attribute name) by rounding
/// `extent * scale`, as TVM does.
fn upsample(c: &RelCall<'_>, scales: &[(char, &str)]) -> Result<Type, RelError> {
    let (data, layout) = rel::data_with_layout(c)?;
    let mut shape = data.shape.clone();
    for &(axis, name) in scales {
        let pos = layout.unsplit_position(axis).map_err(|m| {
            RelError::new(format!(
                "attribute `layout` of `{}` does not fit: {m}",
                c.op.name
            ))
        })?;
        let scale = rel::float_attr(c, name)?;
        if !(scale.is_finite() && scale > 0.0) {
            return Err(RelError::new(format!(
                "attribute `{name}` of `{}` must be a positive number, found {scale}",
                c.op.name
            )));
        }
        if let Dim::Fixed(n) = shape[pos] {
            let v = (n as f64 * scale).round();
            if !(0.0..9.0e15).contains(&v) {
                return Err(rel::overflow(c));
            }
            shape[pos] = Dim::Fixed(v as i64);
        } else {
            shape[pos] = Dim::Any;
        }
    }
    Ok(tensor_type(shape, data.dtype))
}

fn upsampling(c: &RelCall<'_>) -> Result<Type, RelError> {
    upsample(c, &[('H', "scale_h"), ('W', "scale_w")])
}

fn upsampling3d(c: &RelCall<'_>) -> Result<Type, RelError> {
    upsample(c, &[('D', "scale_d"), ('H', "scale_h"), ('W', "scale_w")])
}

#[cfg(test)]
mod tests {
    use super::super::rel::testing::*;
    use crate::ir::{AttrValue, DType, Dim};

    fn f(v: f64) -> AttrValue {
        AttrValue::Float(v, DType::F64)
    }

    #[test]
    fn dense_shapes() {
        let got = ok(
            "nn.dense",
            vec![t(&[1600, 768], "float32"), t(&[2304, 768], "float32")],
            &[("units", int(2304))],
        );
        assert_eq!(got, t(&[1600, 2304], "float32"));
        let got = ok(
            "nn.dense",
            vec![t(&[1, 256], "float16"), t(&[10, 256], "float16")],
            &[("out_dtype", s("float32"))],
        );
        assert_eq!(got, t(&[1, 10], "float32"));
        let got = ok(
            "nn.dense",
            vec![t(&[2, 5, 8], "float32"), t(&[3, 8], "float32")],
            &[],
        );
        assert_eq!(got, t(&[2, 5, 3], "float32"));
        let e = err(
            "nn.dense",
            vec![t(&[1, 256], "float32"), t(&[10, 255], "float32")],
            &[],
        );
        assert_eq!(e.arg, Some(1));
        assert!(
            e.message.contains("256") && e.message.contains("255"),
            "{}",
            e.message
        );
        let e = err(
            "nn.dense",
            vec![t(&[1, 256], "float32"), t(&[10, 256], "float32")],
            &[("units", int(11))],
        );
        assert!(e.message.contains("units=11"), "{}", e.message);
        let e = err(
            "nn.dense",
            vec![t(&[1, 256], "float32"), t(&[256], "float32")],
            &[],
        );
        assert!(e.message.contains("2-d"), "{}", e.message);
    }

    #[test]
    fn matmul_and_batch_matmul() {
        let got = ok(
            "nn.matmul",
            vec![t(&[4, 8], "float32"), t(&[16, 8], "float32")],
            &[("transpose_b", AttrValue::Bool(true))],
        );
        assert_eq!(got, t(&[4, 16], "float32"));
        let got = ok(
            "nn.matmul",
            vec![t(&[8, 4], "float32"), t(&[8, 16], "float32")],
            &[("transpose_a", AttrValue::Bool(true))],
        );
        assert_eq!(got, t(&[4, 16], "float32"));
        assert_eq!(
            err(
                "nn.matmul",
                vec![t(&[4, 8], "float32"), t(&[16, 8], "float32")],
                &[]
            )
            .arg,
            Some(1)
        );
        // GPT-2 attention scores: q [600, 32, 64] x k [600, 32, 64]^T.
        let got = ok(
            "nn.batch_matmul",
            vec![t(&[600, 32, 64], "float16"), t(&[600, 32, 64], "float16")],
            &[
                ("out_dtype", s("float16")),
                ("transpose_b", AttrValue::Bool(true)),
            ],
        );
        assert_eq!(got, t(&[600, 32, 32], "float16"));
        let got = ok(
            "nn.batch_matmul",
            vec![t(&[1, 32, 64], "float32"), t(&[12, 64, 16], "float32")],
            &[],
        );
        assert_eq!(got, t(&[12, 32, 16], "float32"));
        let e = err(
            "nn.batch_matmul",
            vec![t(&[2, 32, 64], "float32"), t(&[3, 64, 16], "float32")],
            &[],
        );
        assert!(e.message.contains("batch"), "{}", e.message);
        let e = err(
            "nn.batch_matmul",
            vec![t(&[2, 32, 64], "float32"), t(&[2, 64, 16], "float32")],
            &[("transpose_b", AttrValue::Bool(true))],
        );
        assert_eq!(e.arg, Some(1));
        let dynamic = td(vec![Dim::Any, Dim::Fixed(5), Dim::Fixed(4)], "float32");
        let got = ok(
            "nn.batch_matmul",
            vec![dynamic, t(&[1, 4, 3], "float32")],
            &[],
        );
        assert_eq!(
            got,
            td(vec![Dim::Any, Dim::Fixed(5), Dim::Fixed(3)], "float32")
        );
    }

    #[test]
    fn per_channel_and_softmax() {
        let x = t(&[1, 64, 8, 8], "float32");
        assert_eq!(
            ok("nn.bias_add", vec![x.clone(), t(&[64], "float32")], &[]),
            x
        );
        let nhwc = t(&[1, 8, 8, 64], "float32");
        assert_eq!(
            ok(
                "nn.bias_add",
                vec![nhwc.clone(), t(&[64], "float32")],
                &[("axis", int(-1))]
            ),
            nhwc
        );
        assert_eq!(
            err("nn.bias_add", vec![x.clone(), t(&[32], "float32")], &[]).arg,
            Some(1)
        );
        assert_eq!(
            err("nn.prelu", vec![x.clone(), t(&[64], "float16")], &[]).arg,
            Some(1)
        );
        assert_eq!(ok("nn.prelu", vec![x.clone(), t(&[64], "float32")], &[]), x);
        assert_eq!(ok("nn.softmax", vec![x.clone()], &[("axis", int(3))]), x);
        let e = err("nn.log_softmax", vec![x.clone()], &[("axis", int(4))]);
        assert!(e.message.contains("out of range"), "{}", e.message);
        assert_eq!(
            ok("nn.leaky_relu", vec![x.clone()], &[("alpha", f(0.1))]),
            x
        );
    }

    #[test]
    fn pad_flatten_upsampling() {
        let widths = AttrValue::Array(vec![
            ints(&[0, 0]),
            ints(&[0, 0]),
            ints(&[2, 2]),
            ints(&[2, 2]),
        ]);
        let got = ok(
            "nn.pad",
            vec![t(&[1, 1, 28, 28], "float32"), t(&[], "float32")],
            &[("pad_width", widths.clone())],
        );
        assert_eq!(got, t(&[1, 1, 32, 32], "float32"));
        let e = err(
            "nn.pad",
            vec![t(&[1, 28, 28], "float32"), t(&[], "float32")],
            &[("pad_width", widths.clone())],
        );
        assert!(e.message.contains("pairs"), "{}", e.message);
        let e = err(
            "nn.pad",
            vec![t(&[1, 1, 28, 28], "float32"), t(&[1], "float32")],
            &[("pad_width", widths)],
        );
        assert_eq!(e.arg, Some(1));
        let neg = AttrValue::Array(vec![ints(&[-1, 0])]);
        assert!(err(
            "nn.pad",
            vec![t(&[3], "float32"), t(&[], "float32")],
            &[("pad_width", neg)]
        )
        .message
        .contains("negative"));
        assert_eq!(
            ok("nn.batch_flatten", vec![t(&[2, 512, 1, 1], "float32")], &[]),
            t(&[2, 512], "float32")
        );
        let got = ok(
            "nn.batch_flatten",
            vec![td(vec![Dim::Fixed(2), Dim::Any, Dim::Fixed(3)], "float32")],
            &[],
        );
        assert_eq!(got, td(vec![Dim::Fixed(2), Dim::Any], "float32"));
        let got = ok(
            "nn.upsampling",
            vec![t(&[1, 16, 7, 9], "float32")],
            &[("scale_h", f(2.0)), ("scale_w", f(1.5))],
        );
        assert_eq!(got, t(&[1, 16, 14, 14], "float32"));
        let got = ok(
            "nn.upsampling3d",
            vec![t(&[1, 2, 3, 4, 5], "float32")],
            &[
                ("scale_d", f(2.0)),
                ("scale_h", f(2.0)),
                ("scale_w", f(2.0)),
                ("layout", s("NDHWC")),
            ],
        );
        assert_eq!(got, t(&[1, 4, 6, 8, 5], "float32"));
        assert!(err(
            "nn.upsampling",
            vec![t(&[1, 16, 7, 9], "float32")],
            &[("scale_h", f(2.0))]
        )
        .message
        .contains("scale_w"));
        let e = err(
            "nn.upsampling",
            vec![t(&[1, 16, 7, 9], "float32")],
            &[("scale_h", f(-1.0)), ("scale_w", f(1.0))],
        );
        assert!(e.message.contains("positive"), "{}", e.message);
    }
}
