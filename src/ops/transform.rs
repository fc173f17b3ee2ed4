//! Shape transformations: `reshape`, `transpose`, `expand_dims`, `squeeze`, `tile`,
//! `broadcast_to`, `layout_transform` and the image resizes.

use super::rel::{self, def, norm_axis, tensor, tensor_type, MAX_RANK};
use super::tensor::INIT_ATTRS;
use super::{Op, OpDef, OpPattern, RelCall, RelError};
use crate::ir::attrs::field;
use crate::ir::{AttrDefault as D, AttrField, AttrType as T, Dim, Type};

use OpPattern::{Broadcast, Injective};

const DATA: &[&str] = &["data"];

const RESHAPE_ATTRS: &[AttrField] = &[
    field("newshape", T::Ints, D::Required),
    field("allowzero", T::Bool, D::Bool(false)),
];

/// `TransposeAttrs`: `axes` has no declared default, so it is always printed.
const TRANSPOSE_ATTRS: &[AttrField] = &[field("axes", T::OptInts, D::Required)];

const EXPAND_DIMS_ATTRS: &[AttrField] = &[
    field("axis", T::Int, D::Required),
    field("num_newaxis", T::Int, D::Int(1)),
];

const SQUEEZE_ATTRS: &[AttrField] = &[field("axis", T::OptInts, D::None)];
const TILE_ATTRS: &[AttrField] = &[field("reps", T::Ints, D::Required)];

const LAYOUT_TRANSFORM_ATTRS: &[AttrField] = &[
    field("src_layout", T::Str, D::Required),
    field("dst_layout", T::Str, D::Required),
];

const RESIZE1D_ATTRS: &[AttrField] = &[
    field("size", T::OptInts, D::None),
    field("roi", T::Any, D::None),
    field("layout", T::Str, D::Str("NCW")),
    field("method", T::Str, D::Str("linear")),
    field(
        "coordinate_transformation_mode",
        T::Str,
        D::Str("half_pixel"),
    ),
    field("rounding_method", T::Str, D::Str("round")),
    field("cubic_alpha", T::Float, D::Float(-0.5)),
    field("cubic_exclude", T::Int, D::Int(0)),
    field("extrapolation_value", T::Float, D::Float(0.0)),
    field("out_dtype", T::DType, D::Str("")),
];

const RESIZE2D_ATTRS: &[AttrField] = &[
    field("size", T::OptInts, D::None),
    field("roi", T::Any, D::None),
    field("layout", T::Str, D::Str("NCHW")),
    field("method", T::Str, D::Str("linear")),
    field(
        "coordinate_transformation_mode",
        T::Str,
        D::Str("half_pixel"),
    ),
    field("rounding_method", T::Str, D::Str("round")),
    field("cubic_alpha", T::Float, D::Float(-0.5)),
    field("cubic_exclude", T::Int, D::Int(0)),
    field("extrapolation_value", T::Float, D::Float(0.0)),
    field("out_dtype", T::DType, D::Str("")),
];

pub(super) const OPS: &[OpDef] = &[
    def(Op::Reshape, DATA, RESHAPE_ATTRS, Injective, reshape),
    def(Op::Transpose, DATA, TRANSPOSE_ATTRS, Injective, transpose),
    def(
        Op::ExpandDims,
        DATA,
        EXPAND_DIMS_ATTRS,
        Broadcast,
        expand_dims,
    ),
    def(Op::Squeeze, DATA, SQUEEZE_ATTRS, Injective, squeeze),
    def(Op::Tile, DATA, TILE_ATTRS, Broadcast, tile),
    def(Op::BroadcastTo, DATA, INIT_ATTRS, Broadcast, broadcast_to),
    def(
        Op::LayoutTransform,
        DATA,
        LAYOUT_TRANSFORM_ATTRS,
        Injective,
        layout_transform,
    ),
    def(Op::Resize1d, DATA, RESIZE1D_ATTRS, Injective, resize1d),
    def(Op::Resize2d, DATA, RESIZE2D_ATTRS, Injective, resize2d),
];

fn reshape_err(
    c: &RelCall<'_>,
    data: &crate::ir::TensorType,
    newshape: &[i64],
    why: String,
) -> RelError {
    RelError::new(format!(
        "`{}` cannot reshape `{data}` to newshape={newshape:?}: {why}",
        c.op.name
    ))
}

/// `extent / part` for the `-4` split, exact when static.
fn split_extent(d: &Dim, part: i64, ns: &[i64]) -> Result<Dim, RelError> {
    match d.fixed() {
        Some(n) if n % part == 0 => Ok(Dim::Fixed(n / part)),
        Some(n) => Err(RelError::new(format!(
            "`reshape` cannot split extent {n} into parts of {part} (newshape={ns:?})"
        ))),
        None => Ok(Dim::Any),
    }
}

/// `reshape` with TVM's special values: `0` copies an input extent (unless `allowzero`), `-1`
/// infers one extent, `-2` copies all remaining extents, `-3` merges two input extents and `-4`
/// splits one input extent into the next two values (one of which may be `-1`).
fn reshape(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let ns = rel::ints_attr(c, "newshape")?;
    let allowzero = c.bool("allowzero")?;
    let ishape = &data.shape;
    let mut oshape: Vec<Dim> = Vec::new();
    let mut src = 0usize;
    let mut infer: Option<usize> = None;
    let mut i = 0usize;
    let input = |src: usize, what: &str| {
        ishape.get(src).cloned().ok_or_else(|| {
            reshape_err(
                c,
                data,
                &ns,
                format!("{what} refers to input axis {src}, which does not exist"),
            )
        })
    };
    while i < ns.len() {
        match ns[i] {
            v if v > 0 => {
                oshape.push(Dim::Fixed(v));
                src += 1;
            }
            0 if allowzero => {
                oshape.push(Dim::Fixed(0));
                src += 1;
            }
            0 => {
                oshape.push(input(src, "0")?);
                src += 1;
            }
            -1 => {
                if infer.is_some() {
                    return Err(reshape_err(
                        c,
                        data,
                        &ns,
                        "only one extent can be -1".into(),
                    ));
                }
                infer = Some(oshape.len());
                oshape.push(Dim::Fixed(1));
                src += 1;
            }
            -2 => {
                oshape.extend(ishape.iter().skip(src).cloned());
                src = src.max(ishape.len());
            }
            -3 => {
                let a = input(src, "-3")?;
                let b = input(src + 1, "-3")?;
                oshape.push(rel::mul_dims(c, &a, &b)?);
                src += 2;
            }
            -4 => {
                let (Some(&d1), Some(&d2)) = (ns.get(i + 1), ns.get(i + 2)) else {
                    return Err(reshape_err(
                        c,
                        data,
                        &ns,
                        "-4 must be followed by two values".into(),
                    ));
                };
                if d1 < -1 || d2 < -1 || d1 == 0 || d2 == 0 || (d1 == -1 && d2 == -1) {
                    return Err(reshape_err(
                        c,
                        data,
                        &ns,
                        format!("-4 must be followed by two positive extents, at most one of them -1, found {d1} and {d2}"),
                    ));
                }
                let d0 = input(src, "-4")?;
                src += 1;
                i += 2;
                let (a, b) = match (d1, d2) {
                    (-1, _) => (split_extent(&d0, d2, &ns)?, Dim::Fixed(d2)),
                    (_, -1) => (Dim::Fixed(d1), split_extent(&d0, d1, &ns)?),
                    _ => {
                        let prod = d1.checked_mul(d2).ok_or_else(|| rel::overflow(c))?;
                        if !rel::dims_agree(&d0, &Dim::Fixed(prod)) {
                            return Err(reshape_err(
                                c,
                                data,
                                &ns,
                                format!("-4 splits extent {d0} into {d1} x {d2}"),
                            ));
                        }
                        (Dim::Fixed(d1), Dim::Fixed(d2))
                    }
                };
                oshape.push(a);
                oshape.push(b);
            }
            v => {
                return Err(reshape_err(
                    c,
                    data,
                    &ns,
                    format!(
                    "{v} is not a valid value (expected a positive extent, 0, -1, -2, -3 or -4)"
                ),
                ))
            }
        }
        if oshape.len() > MAX_RANK {
            return Err(reshape_err(
                c,
                data,
                &ns,
                format!("the result has more than {MAX_RANK} axes"),
            ));
        }
        i += 1;
    }
    let total = rel::num_elements(c, ishape)?;
    if let Some(k) = infer {
        let others: Vec<Dim> = oshape
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != k)
            .map(|(_, d)| d.clone())
            .collect();
        oshape[k] = match (total, rel::num_elements(c, &others)?) {
            (Some(_), Some(0)) => {
                return Err(reshape_err(
                    c,
                    data,
                    &ns,
                    "-1 cannot be inferred next to a zero extent".into(),
                ))
            }
            (Some(t), Some(o)) if t % o == 0 => Dim::Fixed(t / o),
            (Some(t), Some(o)) => {
                return Err(reshape_err(
                    c,
                    data,
                    &ns,
                    format!("{t} elements do not divide into groups of {o}"),
                ))
            }
            _ => Dim::Any,
        };
    }
    if let (Some(a), Some(b)) = (total, rel::num_elements(c, &oshape)?) {
        if a != b {
            return Err(reshape_err(
                c,
                data,
                &ns,
                format!(
                    "{a} elements cannot become {} with {b}",
                    rel::show_shape(&oshape)
                ),
            ));
        }
    }
    Ok(tensor_type(oshape, data.dtype))
}

/// The permutation a `transpose` of a rank-`rank` tensor applies: result axis `i` is operand
/// axis `perm[i]`. Empty `axes` reverse the axes; negative ones count from the end. `None`
/// when `axes` is not a permutation of the operand's axes.
pub fn transpose_perm(axes: &[i64], rank: usize) -> Option<Vec<usize>> {
    if axes.is_empty() {
        return Some((0..rank).rev().collect());
    }
    if axes.len() != rank {
        return None;
    }
    let r = rank as i64;
    let mut seen = vec![false; rank];
    let mut perm = Vec::with_capacity(rank);
    for &a in axes {
        if a < -r || a >= r {
            return None;
        }
        let p = if a < 0 { a + r } else { a } as usize;
        if std::mem::replace(&mut seen[p], true) {
            return None;
        }
        perm.push(p);
    }
    Some(perm)
}

/// `transpose`: `axes` is a permutation; empty or `None` reverses the axes.
fn transpose(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let r = data.rank();
    let axes = rel::opt_ints_attr(c, "axes")?.unwrap_or_default();
    if axes.is_empty() {
        return Ok(tensor_type(
            data.shape.iter().rev().cloned().collect(),
            data.dtype,
        ));
    }
    if axes.len() != r {
        return Err(RelError::new(format!(
            "attribute `axes` of `transpose` needs {r} entries for `{data}`, found {axes:?}"
        )));
    }
    let mut seen = vec![false; r];
    let mut shape = Vec::with_capacity(r);
    for &a in &axes {
        let p = norm_axis(c, a, r)?;
        if std::mem::replace(&mut seen[p], true) {
            return Err(RelError::new(format!(
                "attribute `axes` of `transpose` is not a permutation: {axes:?} repeats axis {p}"
            )));
        }
        shape.push(data.shape[p].clone());
    }
    Ok(tensor_type(shape, data.dtype))
}

/// `expand_dims`: inserts `num_newaxis` unit axes at `axis` (in `[-rank-1, rank]`).
fn expand_dims(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let axis = rel::opt_int_attr(c, "axis")?
        .ok_or_else(|| RelError::new("`expand_dims` needs the attribute `axis`"))?;
    let n = c.int("num_newaxis")?;
    if n < 0 || (n as u64).saturating_add(data.rank() as u64) > MAX_RANK as u64 {
        return Err(RelError::new(format!(
            "attribute `num_newaxis` of `expand_dims` must lie in 0..={} for `{data}`, found {n}",
            MAX_RANK - data.rank()
        )));
    }
    let pivot = rel::norm_insert_axis(c, axis, data.rank())?;
    let mut shape = data.shape[..pivot].to_vec();
    shape.extend(std::iter::repeat_n(Dim::Fixed(1), n as usize));
    shape.extend_from_slice(&data.shape[pivot..]);
    Ok(tensor_type(shape, data.dtype))
}

/// `squeeze`: drops the named unit axes, or every static unit axis when `axis` is `None`.
fn squeeze(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let shape = match rel::opt_ints_attr(c, "axis")? {
        None => data
            .shape
            .iter()
            .filter(|d| **d != Dim::Fixed(1))
            .cloned()
            .collect(),
        Some(axes) => {
            let mut drop = vec![false; data.rank()];
            for &a in &axes {
                let p = norm_axis(c, a, data.rank())?;
                if let Dim::Fixed(n) = data.shape[p] {
                    if n != 1 {
                        return Err(RelError::at(
                            0,
                            format!("`squeeze` cannot remove axis {a} of `{data}`: its extent is {n}, not 1"),
                        ));
                    }
                }
                drop[p] = true;
            }
            data.shape
                .iter()
                .zip(drop)
                .filter(|(_, d)| !d)
                .map(|(s, _)| s.clone())
                .collect()
        }
    };
    Ok(tensor_type(shape, data.dtype))
}

/// `tile`: repeats the data `reps` times per axis; the shorter of shape and `reps` is padded with
/// leading ones.
fn tile(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let reps = rel::ints_attr(c, "reps")?;
    if let Some(bad) = reps.iter().find(|&&r| r < 1) {
        return Err(RelError::new(format!(
            "attribute `reps` of `tile` must hold positive values, found {bad}"
        )));
    }
    let n = data.rank().max(reps.len());
    if n > MAX_RANK {
        return Err(RelError::new(format!(
            "`tile` would produce more than {MAX_RANK} axes"
        )));
    }
    let mut shape = Vec::with_capacity(n);
    for i in 0..n {
        let d = (i + data.rank())
            .checked_sub(n)
            .map_or(Dim::Fixed(1), |j| data.shape[j].clone());
        let r = (i + reps.len()).checked_sub(n).map_or(1, |j| reps[j]);
        shape.push(rel::mul_dims(c, &d, &Dim::Fixed(r))?);
    }
    Ok(tensor_type(shape, data.dtype))
}

/// `broadcast_to`: the data must broadcast to the `shape` attribute, which is the result shape.
fn broadcast_to(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let target = rel::shape_attr(c, "shape")?;
    let fits = data.rank() <= target.len()
        && rel::broadcast_dims(&data.shape, &target)
            .is_ok_and(|s| s.iter().zip(&target).all(|(a, b)| rel::dims_agree(a, b)));
    if !fits {
        return Err(RelError::at(
            0,
            format!(
                "`broadcast_to` cannot broadcast `{data}` to {}",
                rel::show_shape(&target)
            ),
        ));
    }
    Ok(tensor_type(target, data.dtype))
}

/// `layout_transform`: converts between layouts with the same axes, splitting or merging blocks.
fn layout_transform(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let src = rel::layout_attr(c, "src_layout")?;
    let dst = rel::layout_attr(c, "dst_layout")?;
    let shape = src.convert(&data.shape, &dst).map_err(|m| {
        RelError::at(
            0,
            format!("`layout_transform` from `{src}` to `{dst}` does not apply to `{data}`: {m}"),
        )
    })?;
    Ok(tensor_type(shape, data.dtype))
}

/// Image resizes: the spatial axes `names` become the `size` attribute.
fn resize(c: &RelCall<'_>, names: &[char]) -> Result<Type, RelError> {
    let (data, layout) = rel::data_with_layout(c)?;
    let size = rel::opt_ints_attr(c, "size")?
        .ok_or_else(|| RelError::new(format!("`{}` needs the attribute `size`", c.op.name)))?;
    if size.len() != names.len() || size.iter().any(|&s| s < 1) {
        return Err(RelError::new(format!(
            "attribute `size` of `{}` needs {} positive value(s), found {size:?}",
            c.op.name,
            names.len()
        )));
    }
    let mut shape = data.shape.clone();
    for (&name, &s) in names.iter().zip(&size) {
        let pos = layout.unsplit_position(name).map_err(|m| {
            RelError::new(format!(
                "attribute `layout` of `{}` does not fit: {m}",
                c.op.name
            ))
        })?;
        shape[pos] = Dim::Fixed(s);
    }
    let dtype = rel::dtype_or(c, "out_dtype", data.dtype)?;
    Ok(tensor_type(shape, dtype))
}

fn resize1d(c: &RelCall<'_>) -> Result<Type, RelError> {
    resize(c, &['W'])
}

fn resize2d(c: &RelCall<'_>) -> Result<Type, RelError> {
    resize(c, &['H', 'W'])
}

#[cfg(test)]
mod tests {
    use super::super::rel::testing::*;
    use crate::ir::{AttrValue, Dim};

    fn reshape(shape: &[i64], ns: &[i64]) -> Result<crate::ir::Type, super::RelError> {
        rel(
            "reshape",
            vec![t(shape, "float32")],
            &[("newshape", ints(ns))],
        )
    }

    #[test]
    fn reshape_special_values() {
        let r = |s: &[i64], ns: &[i64]| reshape(s, ns).unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(r(&[1, 16, 4, 4], &[1, 256]), t(&[1, 256], "float32"));
        assert_eq!(r(&[2, 3, 4], &[0, -1]), t(&[2, 12], "float32"));
        assert_eq!(r(&[50, 32, 768], &[-1, 768]), t(&[1600, 768], "float32"));
        assert_eq!(
            r(&[1600, 2304], &[50, 32, 2304]),
            t(&[50, 32, 2304], "float32")
        );
        assert_eq!(r(&[2, 3, 4], &[-2]), t(&[2, 3, 4], "float32"));
        assert_eq!(r(&[2, 3, 4], &[2, -2]), t(&[2, 3, 4], "float32"));
        assert_eq!(r(&[2, 3, 4], &[-3, 4]), t(&[6, 4], "float32"));
        assert_eq!(r(&[2, 3, 4], &[0, -3]), t(&[2, 12], "float32"));
        assert_eq!(r(&[6, 4], &[-4, 2, 3, 4]), t(&[2, 3, 4], "float32"));
        assert_eq!(r(&[6, 4], &[-4, -1, 3, -2]), t(&[2, 3, 4], "float32"));
        assert_eq!(r(&[6, 4], &[-4, 2, -1, 0]), t(&[2, 3, 4], "float32"));
        let got = ok(
            "reshape",
            vec![t(&[0, 3], "float32")],
            &[
                ("newshape", ints(&[0, 3])),
                ("allowzero", AttrValue::Bool(true)),
            ],
        );
        assert_eq!(got, t(&[0, 3], "float32"));
        let dynamic = td(vec![Dim::Any, Dim::Fixed(768)], "float32");
        let got = ok(
            "reshape",
            vec![dynamic],
            &[("newshape", ints(&[-1, 32, 24]))],
        );
        assert_eq!(
            got,
            td(vec![Dim::Any, Dim::Fixed(32), Dim::Fixed(24)], "float32")
        );
    }

    #[test]
    fn reshape_errors() {
        let msg = |s: &[i64], ns: &[i64]| reshape(s, ns).unwrap_err().message;
        assert!(msg(&[2, 3, 4], &[-1, -1]).contains("only one"));
        assert!(msg(&[2, 3, 4], &[5, 5]).contains("24 elements"));
        assert!(msg(&[2, 3, 4], &[5, -1]).contains("do not divide"));
        assert!(msg(&[6, 4], &[-4, 4, -1, 0]).contains("cannot split"));
        assert!(msg(&[6, 4], &[-4, 2, 2, 0]).contains("-4 splits"));
        assert!(msg(&[6, 4], &[-4, 2]).contains("followed by two"));
        assert!(msg(&[6, 4], &[-5]).contains("not a valid value"));
        assert!(msg(&[6], &[0, 0]).contains("does not exist"));
        assert!(msg(&[6], &[-3]).contains("does not exist"));
        assert!(msg(&[0, 4], &[0, -1]).contains("zero extent"));
        assert!(msg(&[2], &[i64::MAX, 4]).contains("overflow"));
        assert!(err("reshape", vec![t(&[2], "float32")], &[])
            .message
            .contains("newshape"));
    }

    #[test]
    fn transpose_perm_reverses_by_default_and_refuses_non_permutations() {
        use super::transpose_perm;
        assert_eq!(transpose_perm(&[], 3), Some(vec![2, 1, 0]));
        assert_eq!(transpose_perm(&[0, -1, 1], 3), Some(vec![0, 2, 1]));
        assert_eq!(transpose_perm(&[0, 0, 1], 3), None);
        assert_eq!(transpose_perm(&[0, 3, 1], 3), None);
        assert_eq!(transpose_perm(&[1, 0], 3), None);
    }

    #[test]
    fn transpose_expand_squeeze() {
        let x = t(&[1, 50, 12, 64], "float32");
        let got = ok(
            "transpose",
            vec![x.clone()],
            &[("axes", ints(&[0, 2, 1, 3]))],
        );
        assert_eq!(got, t(&[1, 12, 50, 64], "float32"));
        assert_eq!(
            ok("transpose", vec![x.clone()], &[]),
            t(&[64, 12, 50, 1], "float32")
        );
        assert_eq!(
            ok(
                "transpose",
                vec![x.clone()],
                &[("axes", ints(&[0, -1, 1, 2]))]
            ),
            t(&[1, 64, 50, 12], "float32")
        );
        assert!(err(
            "transpose",
            vec![x.clone()],
            &[("axes", ints(&[0, 1, 1, 2]))]
        )
        .message
        .contains("permutation"));
        assert!(
            err("transpose", vec![x.clone()], &[("axes", ints(&[0, 1]))])
                .message
                .contains("4 entries")
        );
        assert!(err(
            "transpose",
            vec![x.clone()],
            &[("axes", ints(&[0, 1, 2, 4]))]
        )
        .message
        .contains("out of range"));
        let v = t(&[50, 32], "float32");
        assert_eq!(
            ok("expand_dims", vec![v.clone()], &[("axis", int(0))]),
            t(&[1, 50, 32], "float32")
        );
        assert_eq!(
            ok(
                "expand_dims",
                vec![v.clone()],
                &[("axis", int(-1)), ("num_newaxis", int(2))]
            ),
            t(&[50, 32, 1, 1], "float32")
        );
        assert_eq!(
            ok(
                "expand_dims",
                vec![v.clone()],
                &[("axis", int(1)), ("num_newaxis", int(0))]
            ),
            v
        );
        assert!(err("expand_dims", vec![v.clone()], &[("axis", int(3))])
            .message
            .contains("out of range"));
        assert!(err("expand_dims", vec![v.clone()], &[])
            .message
            .contains("axis"));
        assert!(err(
            "expand_dims",
            vec![v.clone()],
            &[("axis", int(0)), ("num_newaxis", int(1 << 40))]
        )
        .message
        .contains("num_newaxis"));
        let s = t(&[1, 3, 1, 2], "float32");
        assert_eq!(ok("squeeze", vec![s.clone()], &[]), t(&[3, 2], "float32"));
        assert_eq!(
            ok("squeeze", vec![s.clone()], &[("axis", ints(&[-2]))]),
            t(&[1, 3, 2], "float32")
        );
        let e = err("squeeze", vec![s.clone()], &[("axis", ints(&[1]))]);
        assert!(e.message.contains("not 1"), "{}", e.message);
        let dynamic = td(vec![Dim::Any, Dim::Fixed(1)], "float32");
        assert_eq!(
            ok("squeeze", vec![dynamic.clone()], &[]),
            td(vec![Dim::Any], "float32")
        );
        assert_eq!(
            ok("squeeze", vec![dynamic], &[("axis", ints(&[0]))]),
            t(&[1], "float32")
        );
    }

    #[test]
    fn tile_broadcast_layout_resize() {
        let x = t(&[2, 3], "float32");
        assert_eq!(
            ok("tile", vec![x.clone()], &[("reps", ints(&[2, 1, 2]))]),
            t(&[2, 2, 6], "float32")
        );
        assert_eq!(
            ok("tile", vec![x.clone()], &[("reps", ints(&[3]))]),
            t(&[2, 9], "float32")
        );
        assert!(err("tile", vec![x.clone()], &[("reps", ints(&[0]))])
            .message
            .contains("positive"));
        assert_eq!(
            ok(
                "broadcast_to",
                vec![t(&[3, 1], "int8")],
                &[("shape", ints(&[2, 3, 4]))]
            ),
            t(&[2, 3, 4], "int8")
        );
        assert_eq!(
            err("broadcast_to", vec![x.clone()], &[("shape", ints(&[2, 1]))]).arg,
            Some(0)
        );
        assert_eq!(
            err("broadcast_to", vec![x], &[("shape", ints(&[3]))]).arg,
            Some(0)
        );
        let lt = |src: &str, dst: &str| [("src_layout", s(src)), ("dst_layout", s(dst))];
        assert_eq!(
            ok(
                "layout_transform",
                vec![t(&[1, 64, 56, 56], "float32")],
                &lt("NCHW", "NCHW16c")
            ),
            t(&[1, 4, 56, 56, 16], "float32")
        );
        assert_eq!(
            ok(
                "layout_transform",
                vec![t(&[1, 56, 56, 64], "float32")],
                &lt("NHWC", "NCHW")
            ),
            t(&[1, 64, 56, 56], "float32")
        );
        let e = err(
            "layout_transform",
            vec![t(&[1, 3, 8, 8], "float32")],
            &lt("NCHW", "NCHW16c"),
        );
        assert!(e.message.contains("divisible"), "{}", e.message);
        assert_eq!(
            ok(
                "image.resize2d",
                vec![t(&[1, 3, 32, 32], "float32")],
                &[("size", ints(&[64, 48]))]
            ),
            t(&[1, 3, 64, 48], "float32")
        );
        assert_eq!(
            ok(
                "image.resize2d",
                vec![t(&[1, 32, 32, 3], "uint8")],
                &[
                    ("size", ints(&[16, 16])),
                    ("layout", s("NHWC")),
                    ("out_dtype", s("float32"))
                ]
            ),
            t(&[1, 16, 16, 3], "float32")
        );
        assert_eq!(
            ok(
                "image.resize1d",
                vec![t(&[1, 3, 10], "float32")],
                &[("size", ints(&[20]))]
            ),
            t(&[1, 3, 20], "float32")
        );
        assert!(
            err("image.resize2d", vec![t(&[1, 3, 32, 32], "float32")], &[])
                .message
                .contains("size")
        );
    }
}
