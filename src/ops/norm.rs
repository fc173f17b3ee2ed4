//! Normalisations (`nn.batch_norm`, `nn.layer_norm`, `nn.instance_norm`, `nn.group_norm`) and
//! `nn.dropout`.

use super::rel::{self, def, dims_agree, norm_axis, tensor, tensor_type};
use super::{Op, OpDef, OpPattern, RelCall, RelError};
use crate::ir::attrs::field;
use crate::ir::{AttrDefault as D, AttrField, AttrType as T, Dim, TensorType, Type};

use OpPattern::{Opaque, OutEWiseFusable};

const BATCH_NORM_ATTRS: &[AttrField] = &[
    field("axis", T::Int, D::Int(1)),
    field("epsilon", T::Float, D::Float(1e-5)),
    field("center", T::Bool, D::Bool(true)),
    field("scale", T::Bool, D::Bool(true)),
];

const LAYER_NORM_ATTRS: &[AttrField] = &[
    field("axis", T::Int, D::Int(-1)),
    field("epsilon", T::Float, D::Float(1e-5)),
    field("center", T::Bool, D::Bool(true)),
    field("scale", T::Bool, D::Bool(true)),
];

const INSTANCE_NORM_ATTRS: &[AttrField] = BATCH_NORM_ATTRS;

const GROUP_NORM_ATTRS: &[AttrField] = &[
    field("num_groups", T::Int, D::Int(0)),
    field("axis", T::Int, D::Int(1)),
    field("epsilon", T::Float, D::Float(1e-5)),
    field("center", T::Bool, D::Bool(true)),
    field("scale", T::Bool, D::Bool(true)),
];

const DROPOUT_ATTRS: &[AttrField] = &[field("rate", T::Float, D::Float(0.5))];

const NORM_ARGS: &[&str] = &["data", "gamma", "beta"];

pub(super) const OPS: &[OpDef] = &[
    def(
        Op::BatchNorm,
        &["data", "gamma", "beta", "moving_mean", "moving_var"],
        BATCH_NORM_ATTRS,
        OutEWiseFusable,
        batch_norm,
    ),
    def(
        Op::LayerNorm,
        NORM_ARGS,
        LAYER_NORM_ATTRS,
        Opaque,
        affine_norm,
    ),
    def(
        Op::InstanceNorm,
        NORM_ARGS,
        INSTANCE_NORM_ATTRS,
        Opaque,
        affine_norm,
    ),
    def(
        Op::GroupNorm,
        NORM_ARGS,
        GROUP_NORM_ATTRS,
        Opaque,
        group_norm,
    ),
    def(Op::Dropout, &["data"], DROPOUT_ATTRS, Opaque, dropout),
];

/// The data tensor, the normalised axis and its extent.
fn data_and_axis<'a>(c: &RelCall<'a>) -> Result<(&'a TensorType, usize, Dim), RelError> {
    let data = tensor(c, 0)?;
    let axis = norm_axis(c, c.int("axis")?, data.rank())?;
    let ch = data.shape[axis].clone();
    Ok((data, axis, ch))
}

/// Arguments `1..n` must be 1-d vectors of `ch` elements with the data's dtype.
fn check_vectors(
    c: &RelCall<'_>,
    data: &TensorType,
    axis: usize,
    ch: &Dim,
) -> Result<(), RelError> {
    for i in 1..c.op.arity() {
        let v = tensor(c, i)?;
        if v.rank() != 1 || !dims_agree(&v.shape[0], ch) || v.dtype != data.dtype {
            return Err(RelError::at(
                i,
                format!(
                    "`{}` expects argument `{}` to be a 1-d `{}` tensor of {ch} elements (axis {axis} of `{data}`), found `{v}`",
                    c.op.name,
                    c.arg_name(i),
                    data.dtype
                ),
            ));
        }
    }
    Ok(())
}

/// `nn.batch_norm`: the tuple `(normalised data, new mean, new variance)`.
fn batch_norm(c: &RelCall<'_>) -> Result<Type, RelError> {
    let (data, axis, ch) = data_and_axis(c)?;
    check_vectors(c, data, axis, &ch)?;
    let v = tensor_type(vec![ch], data.dtype);
    Ok(Type::Tuple(vec![Type::Tensor(data.clone()), v.clone(), v]))
}

/// `nn.layer_norm` / `nn.instance_norm`: gamma and beta match the normalised axis.
fn affine_norm(c: &RelCall<'_>) -> Result<Type, RelError> {
    let (data, axis, ch) = data_and_axis(c)?;
    check_vectors(c, data, axis, &ch)?;
    Ok(Type::Tensor(data.clone()))
}

/// `nn.group_norm`: like [`affine_norm`], and `num_groups` must divide the channel axis.
fn group_norm(c: &RelCall<'_>) -> Result<Type, RelError> {
    let (data, axis, ch) = data_and_axis(c)?;
    check_vectors(c, data, axis, &ch)?;
    let groups = c.int("num_groups")?;
    if groups < 1 {
        return Err(RelError::new(format!(
            "attribute `num_groups` of `nn.group_norm` must be positive, found {groups}"
        )));
    }
    if let Dim::Fixed(n) = ch {
        if n % groups != 0 {
            return Err(RelError::at(
                0,
                format!(
                    "`nn.group_norm` data `{data}` has {n} channels on axis {axis}, which num_groups={groups} does not divide"
                ),
            ));
        }
    }
    Ok(Type::Tensor(data.clone()))
}

/// `nn.dropout`: the tuple `(output, mask)`, both of the data's type.
fn dropout(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let rate = rel::float_attr(c, "rate")?;
    if !(0.0..=1.0).contains(&rate) {
        return Err(RelError::new(format!(
            "attribute `rate` of `nn.dropout` must lie in [0, 1], found {rate}"
        )));
    }
    let t = Type::Tensor(data.clone());
    Ok(Type::Tuple(vec![t.clone(), t]))
}

#[cfg(test)]
mod tests {
    use super::super::rel::testing::*;
    use crate::ir::{AttrValue, DType, Type};

    #[test]
    fn batch_norm_tuple() {
        let x = t(&[1, 32, 112, 112], "float32");
        let v = t(&[32], "float32");
        let got = ok(
            "nn.batch_norm",
            vec![x.clone(), v.clone(), v.clone(), v.clone(), v.clone()],
            &[],
        );
        assert_eq!(got, Type::Tuple(vec![x.clone(), v.clone(), v.clone()]));
        let e = err(
            "nn.batch_norm",
            vec![
                x.clone(),
                v.clone(),
                v.clone(),
                t(&[16], "float32"),
                v.clone(),
            ],
            &[],
        );
        assert_eq!(e.arg, Some(3));
        assert!(e.message.contains("moving_mean"), "{}", e.message);
        let e = err(
            "nn.batch_norm",
            vec![
                x.clone(),
                v.clone(),
                t(&[32], "float16"),
                v.clone(),
                v.clone(),
            ],
            &[],
        );
        assert_eq!(e.arg, Some(2));
        let nhwc = t(&[1, 7, 7, 32], "float32");
        let got = ok(
            "nn.batch_norm",
            vec![nhwc.clone(), v.clone(), v.clone(), v.clone(), v.clone()],
            &[("axis", int(3))],
        );
        assert_eq!(got, Type::Tuple(vec![nhwc, v.clone(), v.clone()]));
        let e = err(
            "nn.batch_norm",
            vec![x, v.clone(), v.clone(), v.clone(), v],
            &[("axis", int(4))],
        );
        assert!(e.message.contains("axis 4"), "{}", e.message);
    }

    #[test]
    fn other_norms_and_dropout() {
        let x = t(&[50, 32, 768], "float16");
        let g = t(&[768], "float16");
        assert_eq!(
            ok("nn.layer_norm", vec![x.clone(), g.clone(), g.clone()], &[]),
            x
        );
        assert_eq!(
            err(
                "nn.layer_norm",
                vec![x.clone(), t(&[32], "float16"), g.clone()],
                &[]
            )
            .arg,
            Some(1)
        );
        let img = t(&[2, 64, 8, 8], "float32");
        let c64 = t(&[64], "float32");
        assert_eq!(
            ok(
                "nn.instance_norm",
                vec![img.clone(), c64.clone(), c64.clone()],
                &[]
            ),
            img
        );
        assert_eq!(
            ok(
                "nn.group_norm",
                vec![img.clone(), c64.clone(), c64.clone()],
                &[("num_groups", int(32))]
            ),
            img
        );
        let e = err(
            "nn.group_norm",
            vec![img.clone(), c64.clone(), c64.clone()],
            &[("num_groups", int(7))],
        );
        assert!(e.message.contains("num_groups=7"), "{}", e.message);
        assert!(
            err("nn.group_norm", vec![img.clone(), c64.clone(), c64], &[])
                .message
                .contains("positive")
        );
        assert_eq!(
            ok("nn.dropout", vec![img.clone()], &[]),
            Type::Tuple(vec![img.clone(), img.clone()])
        );
        let e = err(
            "nn.dropout",
            vec![img],
            &[("rate", AttrValue::Float(1.5, DType::F64))],
        );
        assert!(e.message.contains("rate"), "{}", e.message);
    }
}
