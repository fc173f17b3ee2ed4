//! Elementwise and broadcasting tensor operators: arithmetic, comparisons, unary math, `clip`,
//! `cast`, `where` and the constant initialisers `full`, `zeros` and `ones`.

use super::rel::{self, def, tensor, tensor_type};
use super::{Op, OpDef, OpPattern, RelCall, RelError};
use crate::ir::attrs::field;
use crate::ir::{AttrDefault as D, AttrField, AttrType as T, DType, Type};

use OpPattern::{Broadcast, ElemWise};

const BIN: &[&str] = &["lhs", "rhs"];
const DATA: &[&str] = &["data"];

const CLIP_ATTRS: &[AttrField] = &[
    field("a_min", T::Float, D::Required),
    field("a_max", T::Float, D::Required),
];

const CAST_ATTRS: &[AttrField] = &[field("dtype", T::DType, D::Required)];

/// `InitOpAttrs`: shared by `full`, `zeros`, `ones` and `broadcast_to`.
pub(super) const INIT_ATTRS: &[AttrField] = &[
    field("shape", T::OptInts, D::Required),
    field("dtype", T::DType, D::Str("")),
];

pub(super) const OPS: &[OpDef] = &[
    def(Op::Add, BIN, &[], Broadcast, rel::broadcast),
    def(Op::Subtract, BIN, &[], Broadcast, rel::broadcast),
    def(Op::Multiply, BIN, &[], Broadcast, rel::broadcast),
    def(Op::Divide, BIN, &[], Broadcast, rel::broadcast),
    def(Op::Power, BIN, &[], Broadcast, rel::broadcast),
    def(Op::Maximum, BIN, &[], Broadcast, rel::broadcast),
    def(Op::Minimum, BIN, &[], Broadcast, rel::broadcast),
    def(Op::Less, BIN, &[], Broadcast, rel::compare),
    def(Op::Greater, BIN, &[], Broadcast, rel::compare),
    def(Op::Equal, BIN, &[], Broadcast, rel::compare),
    def(Op::LessEqual, BIN, &[], Broadcast, rel::compare),
    def(Op::GreaterEqual, BIN, &[], Broadcast, rel::compare),
    def(Op::NotEqual, BIN, &[], Broadcast, rel::compare),
    def(Op::Sqrt, DATA, &[], ElemWise, rel::identity),
    def(Op::Rsqrt, DATA, &[], ElemWise, rel::identity),
    def(Op::Erf, DATA, &[], ElemWise, rel::identity),
    def(Op::Exp, DATA, &[], ElemWise, rel::identity),
    def(Op::Log, DATA, &[], ElemWise, rel::identity),
    def(Op::Sigmoid, DATA, &[], ElemWise, rel::identity),
    def(Op::Tanh, DATA, &[], ElemWise, rel::identity),
    def(Op::Abs, DATA, &[], ElemWise, rel::identity),
    def(Op::Negative, DATA, &[], ElemWise, rel::identity),
    def(Op::Floor, DATA, &[], ElemWise, rel::identity),
    def(Op::Ceil, DATA, &[], ElemWise, rel::identity),
    def(Op::Round, DATA, &[], ElemWise, rel::identity),
    def(Op::Sin, DATA, &[], ElemWise, rel::identity),
    def(Op::Cos, DATA, &[], ElemWise, rel::identity),
    def(Op::Atan, DATA, &[], ElemWise, rel::identity),
    def(Op::Copy, DATA, &[], ElemWise, rel::identity),
    def(Op::FastErf, DATA, &[], ElemWise, rel::identity),
    def(Op::FastExp, DATA, &[], ElemWise, rel::identity),
    def(Op::FastTanh, DATA, &[], ElemWise, rel::identity),
    def(Op::ZerosLike, DATA, &[], ElemWise, rel::identity),
    def(Op::OnesLike, DATA, &[], ElemWise, rel::identity),
    def(Op::Clip, DATA, CLIP_ATTRS, ElemWise, clip),
    def(Op::Cast, DATA, CAST_ATTRS, ElemWise, cast),
    def(
        Op::CastLike,
        &["data", "dtype_like"],
        &[],
        ElemWise,
        cast_like,
    ),
    def(Op::Where, &["condition", "x", "y"], &[], Broadcast, where_),
    def(Op::Full, &["fill_value"], INIT_ATTRS, ElemWise, full),
    def(Op::Zeros, &[], INIT_ATTRS, ElemWise, zeros_ones),
    def(Op::Ones, &[], INIT_ATTRS, ElemWise, zeros_ones),
];

/// `clip`: identity; both bounds must be given.
fn clip(c: &RelCall<'_>) -> Result<Type, RelError> {
    rel::float_attr(c, "a_min")?;
    rel::float_attr(c, "a_max")?;
    rel::identity(c)
}

/// `cast`: the data's shape with the `dtype` attribute.
fn cast(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let dtype = c
        .dtype("dtype")?
        .ok_or_else(|| RelError::new("`cast` needs the attribute `dtype`, such as \"float16\""))?;
    Ok(tensor_type(data.shape.clone(), dtype))
}

/// `cast_like`: the shape of `data` with the dtype of `dtype_like`.
fn cast_like(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let like = tensor(c, 1)?;
    Ok(tensor_type(data.shape.clone(), like.dtype))
}

/// `where(condition, x, y)`: `x` and `y` share a dtype; all three broadcast together. Like TVM,
/// any condition dtype is accepted (non-zero means true).
fn where_(c: &RelCall<'_>) -> Result<Type, RelError> {
    let cond = tensor(c, 0)?;
    let xy = rel::broadcast_args(c, 1, 2)?;
    let shape = rel::broadcast_dims(&cond.shape, &xy.shape).map_err(|(a, b)| {
        RelError::at(
            0,
            format!(
                "`where` cannot broadcast the condition `{cond}` with the values' shape {}: extents {a} and {b} differ",
                rel::show_shape(&xy.shape)
            ),
        )
    })?;
    Ok(tensor_type(shape, xy.dtype))
}

/// `full(fill_value)`: a scalar fill value, the `shape` attribute and `dtype` (default: the fill
/// value's dtype).
fn full(c: &RelCall<'_>) -> Result<Type, RelError> {
    let fill = tensor(c, 0)?;
    if fill.rank() != 0 {
        return Err(RelError::at(
            0,
            format!("`full` needs a scalar fill value, found `{fill}`"),
        ));
    }
    let shape = rel::shape_attr(c, "shape")?;
    Ok(tensor_type(shape, rel::dtype_or(c, "dtype", fill.dtype)?))
}

/// `zeros` / `ones`: the `shape` and `dtype` attributes (dtype defaults to `float32`).
fn zeros_ones(c: &RelCall<'_>) -> Result<Type, RelError> {
    let shape = rel::shape_attr(c, "shape")?;
    Ok(tensor_type(shape, rel::dtype_or(c, "dtype", DType::F32)?))
}

#[cfg(test)]
mod tests {
    use super::super::rel::testing::*;
    use crate::ir::{AttrValue, Dim};

    #[test]
    fn unary_and_binary() {
        let x = t(&[1600, 768], "float16");
        assert_eq!(ok("tanh", vec![x.clone()], &[]), x);
        assert_eq!(ok("power", vec![x.clone(), t(&[], "float16")], &[]), x);
        assert_eq!(
            ok("not_equal", vec![x.clone(), x.clone()], &[]),
            t(&[1600, 768], "bool")
        );
        let e = err("power", vec![x, t(&[], "float32")], &[]);
        assert_eq!(e.arg, Some(1));
    }

    #[test]
    fn casts_and_clip() {
        let x = t(&[2, 3], "float32");
        let e = err("cast", vec![x.clone()], &[]);
        assert!(e.message.contains("dtype"), "{}", e.message);
        assert_eq!(
            ok("cast", vec![x.clone()], &[("dtype", s("float16"))]),
            t(&[2, 3], "float16")
        );
        assert_eq!(
            ok("cast_like", vec![x.clone(), t(&[7], "int8")], &[]),
            t(&[2, 3], "int8")
        );
        let lim = |a: f64, b: f64| {
            [
                ("a_min", AttrValue::Float(a, crate::ir::DType::F64)),
                ("a_max", AttrValue::Float(b, crate::ir::DType::F64)),
            ]
        };
        assert_eq!(ok("clip", vec![x.clone()], &lim(0.0, 6.0)), x);
        assert!(err("clip", vec![x], &[]).message.contains("a_min"));
    }

    #[test]
    fn where_broadcasts_three_ways() {
        let got = ok(
            "where",
            vec![
                t(&[1, 50, 32], "bool"),
                t(&[1, 50, 32], "int64"),
                t(&[], "int64"),
            ],
            &[],
        );
        assert_eq!(got, t(&[1, 50, 32], "int64"));
        let got = ok(
            "where",
            vec![
                t(&[4, 1], "bool"),
                t(&[3], "float32"),
                t(&[1, 3], "float32"),
            ],
            &[],
        );
        assert_eq!(got, t(&[4, 3], "float32"));
        let e = err(
            "where",
            vec![t(&[2], "bool"), t(&[3], "float32"), t(&[3], "float32")],
            &[],
        );
        assert_eq!(e.arg, Some(0));
        let e = err(
            "where",
            vec![t(&[3], "bool"), t(&[3], "float32"), t(&[3], "int32")],
            &[],
        );
        assert_eq!(e.arg, Some(2));
    }

    #[test]
    fn initialisers() {
        let got = ok("full", vec![t(&[], "float32")], &[("shape", ints(&[2, 3]))]);
        assert_eq!(got, t(&[2, 3], "float32"));
        let got = ok(
            "full",
            vec![t(&[], "float32")],
            &[("shape", ints(&[4])), ("dtype", s("int8"))],
        );
        assert_eq!(got, t(&[4], "int8"));
        assert_eq!(
            err("full", vec![t(&[2], "float32")], &[("shape", ints(&[2]))]).arg,
            Some(0)
        );
        assert!(err("full", vec![t(&[], "float32")], &[])
            .message
            .contains("shape"));
        assert_eq!(
            ok("zeros", vec![], &[("shape", ints(&[5]))]),
            t(&[5], "float32")
        );
        assert_eq!(
            ok(
                "ones",
                vec![],
                &[("shape", ints(&[])), ("dtype", s("int64"))]
            ),
            t(&[], "int64")
        );
        assert!(err("ones", vec![], &[("shape", ints(&[-1]))])
            .message
            .contains("non-negative"));
        let dynamic = td(vec![Dim::Any, Dim::Fixed(3)], "float32");
        assert_eq!(ok("sigmoid", vec![dynamic.clone()], &[]), dynamic);
    }
}
