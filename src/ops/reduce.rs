//! Reductions: `sum`, `max`, `min`, `prod`, `mean`, `variance`, `argmax` and `argmin`.
//!
//! `axis` lists the reduced axes (negative counts from the end; `None` reduces every axis),
//! `exclude` reduces the complement instead, and `keepdims` keeps reduced axes with extent 1.

use super::rel::{self, def, norm_axis, tensor, tensor_type};
use super::{Op, OpDef, OpPattern, RelCall, RelError};
use crate::ir::attrs::field;
use crate::ir::{AttrDefault as D, AttrField, AttrType as T, DType, Dim, TensorType, Type};

use OpPattern::CommReduce;

const DATA: &[&str] = &["data"];

const REDUCE_ATTRS: &[AttrField] = &[
    field("axis", T::OptInts, D::None),
    field("keepdims", T::Bool, D::Bool(false)),
    field("exclude", T::Bool, D::Bool(false)),
];

const ARG_REDUCE_ATTRS: &[AttrField] = &[
    field("axis", T::OptInts, D::None),
    field("keepdims", T::Bool, D::Bool(false)),
    field("select_last_index", T::Bool, D::Bool(false)),
    field("exclude", T::Bool, D::Bool(false)),
];

const VARIANCE_ATTRS: &[AttrField] = &[
    field("axis", T::OptInts, D::None),
    field("keepdims", T::Bool, D::Bool(false)),
    field("exclude", T::Bool, D::Bool(false)),
    field("unbiased", T::Bool, D::Bool(false)),
];

pub(super) const OPS: &[OpDef] = &[
    def(Op::Sum, DATA, REDUCE_ATTRS, CommReduce, reduce),
    def(Op::Max, DATA, REDUCE_ATTRS, CommReduce, reduce),
    def(Op::Min, DATA, REDUCE_ATTRS, CommReduce, reduce),
    def(Op::Prod, DATA, REDUCE_ATTRS, CommReduce, reduce),
    def(Op::Mean, DATA, REDUCE_ATTRS, CommReduce, reduce),
    def(
        Op::Variance,
        &["data", "mean"],
        VARIANCE_ATTRS,
        CommReduce,
        variance,
    ),
    def(Op::Argmax, DATA, ARG_REDUCE_ATTRS, CommReduce, arg_reduce),
    def(Op::Argmin, DATA, ARG_REDUCE_ATTRS, CommReduce, arg_reduce),
];

/// The shape of `data` after reducing per the `axis`, `exclude` and `keepdims` attributes.
fn reduced_shape(c: &RelCall<'_>, data: &TensorType) -> Result<Vec<Dim>, RelError> {
    let r = data.rank();
    let keepdims = c.bool("keepdims")?;
    let exclude = c.bool("exclude")?;
    let reduced = match rel::opt_ints_attr(c, "axis")? {
        None => vec![true; r],
        Some(axes) => {
            let mut mark = vec![false; r];
            for &a in &axes {
                let p = norm_axis(c, a, r)?;
                if std::mem::replace(&mut mark[p], true) {
                    return Err(RelError::new(format!(
                        "attribute `axis` of `{}` repeats axis {p}: {axes:?}",
                        c.op.name
                    )));
                }
            }
            if exclude {
                mark.iter_mut().for_each(|m| *m = !*m);
            }
            mark
        }
    };
    Ok(data
        .shape
        .iter()
        .zip(reduced)
        .filter_map(|(d, red)| match (red, keepdims) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Dim::Fixed(1)),
            (true, false) => None,
        })
        .collect())
}

fn reduce(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    Ok(tensor_type(reduced_shape(c, data)?, data.dtype))
}

/// `argmax` / `argmin`: like a reduction, with `int32` indices as the result.
fn arg_reduce(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    Ok(tensor_type(reduced_shape(c, data)?, DType::I32))
}

/// `variance(data, mean)`: `mean` has the data's dtype and broadcasts against it.
fn variance(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = rel::tensor_of_min_rank(c, 0, 1)?;
    let mean = tensor(c, 1)?;
    if mean.dtype != data.dtype || rel::broadcast_dims(&data.shape, &mean.shape).is_err() {
        return Err(RelError::at(
            1,
            format!(
                "`variance` needs a mean of dtype `{}` that broadcasts against `{data}`, found `{mean}`",
                data.dtype
            ),
        ));
    }
    Ok(tensor_type(reduced_shape(c, data)?, data.dtype))
}

#[cfg(test)]
mod tests {
    use super::super::rel::testing::*;
    use crate::ir::{AttrValue, Dim};

    const T: AttrValue = AttrValue::Bool(true);

    #[test]
    fn reductions() {
        let x = t(&[50, 32, 768], "float16");
        let got = ok(
            "mean",
            vec![x.clone()],
            &[("axis", ints(&[-1])), ("keepdims", T)],
        );
        assert_eq!(got, t(&[50, 32, 1], "float16"));
        assert_eq!(ok("sum", vec![x.clone()], &[]), t(&[], "float16"));
        assert_eq!(
            ok("sum", vec![x.clone()], &[("keepdims", T)]),
            t(&[1, 1, 1], "float16")
        );
        assert_eq!(
            ok("max", vec![x.clone()], &[("axis", ints(&[0, 2]))]),
            t(&[32], "float16")
        );
        assert_eq!(
            ok(
                "min",
                vec![x.clone()],
                &[("axis", ints(&[0])), ("exclude", T)]
            ),
            t(&[50], "float16")
        );
        assert_eq!(ok("prod", vec![x.clone()], &[("axis", ints(&[]))]), x);
        assert_eq!(
            ok("argmax", vec![x.clone()], &[("axis", ints(&[1]))]),
            t(&[50, 768], "int32")
        );
        assert_eq!(
            ok(
                "argmin",
                vec![x.clone()],
                &[("axis", ints(&[1])), ("keepdims", T)]
            ),
            t(&[50, 1, 768], "int32")
        );
        let dynamic = td(vec![Dim::Any, Dim::Fixed(4)], "float32");
        assert_eq!(
            ok("mean", vec![dynamic], &[("axis", ints(&[1]))]),
            td(vec![Dim::Any], "float32")
        );
        assert_eq!(ok("sum", vec![t(&[], "int32")], &[]), t(&[], "int32"));
    }

    #[test]
    fn reduction_errors() {
        let x = t(&[2, 3], "float32");
        let e = err("mean", vec![x.clone()], &[("axis", ints(&[2]))]);
        assert!(e.message.contains("out of range"), "{}", e.message);
        let e = err("sum", vec![x.clone()], &[("axis", ints(&[1, -1]))]);
        assert!(e.message.contains("repeats"), "{}", e.message);
        let m = t(&[2, 1], "float32");
        assert_eq!(
            ok(
                "variance",
                vec![x.clone(), m.clone()],
                &[("axis", ints(&[1]))]
            ),
            t(&[2], "float32")
        );
        assert_eq!(
            err("variance", vec![x.clone(), t(&[2, 1], "float16")], &[]).arg,
            Some(1)
        );
        assert_eq!(
            err("variance", vec![x, t(&[4], "float32")], &[]).arg,
            Some(1)
        );
    }
}
