//! Joining and slicing: `concatenate`, `stack`, `split`, `take` and `strided_slice`.

use super::rel::{self, def, norm_axis, tensor, tensor_type, MAX_RANK};
use super::{Op, OpDef, OpPattern, RelCall, RelError};
use crate::ir::attrs::field;
use crate::ir::{AttrDefault as D, AttrField, AttrType as T, AttrValue, Dim, Type};

use OpPattern::Injective;

const AXIS_0: &[AttrField] = &[field("axis", T::Int, D::Int(0))];

const SPLIT_ATTRS: &[AttrField] = &[
    field("indices_or_sections", T::IntOrInts, D::Required),
    field("axis", T::Int, D::Int(0)),
];

const TAKE_ATTRS: &[AttrField] = &[
    field("batch_dims", T::Int, D::Int(0)),
    field("axis", T::OptInt, D::None),
    field("mode", T::Str, D::Str("clip")),
];

/// `StridedSliceAttrs`: only `slice_mode` has a declared default; the arrays are always printed.
const STRIDED_SLICE_ATTRS: &[AttrField] = &[
    field("begin", T::OptInts, D::Required),
    field("end", T::OptInts, D::Required),
    field("strides", T::OptInts, D::Required),
    field("slice_mode", T::Str, D::Str("end")),
    field("axes", T::OptInts, D::Required),
];

/// The most fields `split` will produce.
const MAX_SECTIONS: i64 = 1 << 16;

pub(super) const OPS: &[OpDef] = &[
    def(Op::Concatenate, &["data"], AXIS_0, Injective, concatenate),
    def(Op::Stack, &["data"], AXIS_0, Injective, stack),
    def(Op::Split, &["data"], SPLIT_ATTRS, Injective, split),
    def(Op::Take, &["data", "indices"], TAKE_ATTRS, Injective, take),
    def(
        Op::StridedSlice,
        &["data"],
        STRIDED_SLICE_ATTRS,
        Injective,
        strided_slice,
    ),
];

/// The fields of the tuple argument, at least one, all of the first field's dtype and rank.
fn fields<'a>(c: &RelCall<'a>) -> Result<Vec<&'a crate::ir::TensorType>, RelError> {
    let ts = rel::tuple_tensors(c, 0)?;
    let Some(first) = ts.first() else {
        return Err(RelError::at(
            0,
            format!("`{}` needs a tuple of at least one tensor", c.op.name),
        ));
    };
    for (k, t) in ts.iter().enumerate().skip(1) {
        if t.dtype != first.dtype || t.rank() != first.rank() {
            return Err(RelError::at(
                0,
                format!(
                    "`{}` needs tensors of one dtype and rank, but field {k} is `{t}` and field 0 is `{first}`",
                    c.op.name
                ),
            ));
        }
    }
    Ok(ts)
}

/// `concatenate`: extents add up along `axis` and agree elsewhere.
fn concatenate(c: &RelCall<'_>) -> Result<Type, RelError> {
    let ts = fields(c)?;
    let first = ts[0];
    if first.rank() == 0 {
        return Err(RelError::at(0, "`concatenate` cannot join scalars"));
    }
    let axis = norm_axis(c, c.int("axis")?, first.rank())?;
    let mut shape = first.shape.clone();
    for (k, t) in ts.iter().enumerate().skip(1) {
        for (j, d) in t.shape.iter().enumerate() {
            shape[j] = if j == axis {
                rel::add_dims(c, &shape[j], d)?
            } else {
                rel::unify_dims(&shape[j], d).ok_or_else(|| {
                    RelError::at(
                        0,
                        format!(
                            "`concatenate` along axis {axis} needs equal extents elsewhere, but field {k} `{t}` and field 0 `{first}` differ on axis {j}"
                        ),
                    )
                })?
            };
        }
    }
    Ok(tensor_type(shape, first.dtype))
}

/// `stack`: equal shapes, joined along a new axis.
fn stack(c: &RelCall<'_>) -> Result<Type, RelError> {
    let ts = fields(c)?;
    let first = ts[0];
    if first.rank() >= MAX_RANK {
        return Err(RelError::at(
            0,
            format!("`stack` would produce more than {MAX_RANK} axes"),
        ));
    }
    let mut shape = first.shape.clone();
    for (k, t) in ts.iter().enumerate().skip(1) {
        for (j, d) in t.shape.iter().enumerate() {
            shape[j] = rel::unify_dims(&shape[j], d).ok_or_else(|| {
                RelError::at(
                    0,
                    format!("`stack` needs equal shapes, but field {k} is `{t}` and field 0 is `{first}`"),
                )
            })?;
        }
    }
    let axis = rel::norm_insert_axis(c, c.int("axis")?, first.rank())?;
    shape.insert(axis, Dim::Fixed(ts.len() as i64));
    Ok(tensor_type(shape, first.dtype))
}

/// `split`: an integer splits `axis` into that many equal sections; an array gives the
/// (strictly ascending, in-range) split points. The result is a tuple.
fn split(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let axis = norm_axis(c, c.int("axis")?, data.rank())?;
    let d = &data.shape[axis];
    let piece = |extent: Dim| {
        let mut s = data.shape.clone();
        s[axis] = extent;
        tensor_type(s, data.dtype)
    };
    let pieces = match c.attr("indices_or_sections") {
        AttrValue::Int(n, _) => {
            let n = *n;
            if !(1..=MAX_SECTIONS).contains(&n) {
                return Err(RelError::new(format!(
                    "`split` needs between 1 and {MAX_SECTIONS} sections, found {n}"
                )));
            }
            let extent = match d.fixed() {
                Some(e) if e % n == 0 => Dim::Fixed(e / n),
                Some(e) => {
                    return Err(RelError::at(
                        0,
                        format!("`split` cannot divide axis {axis} of `{data}` (extent {e}) into {n} equal sections"),
                    ))
                }
                None => Dim::Any,
            };
            vec![piece(extent); n as usize]
        }
        AttrValue::Array(_) => {
            let idx = rel::ints_attr(c, "indices_or_sections")?;
            if idx.len() as i64 >= MAX_SECTIONS {
                return Err(RelError::new(format!("`split` needs fewer than {MAX_SECTIONS} indices")));
            }
            let mut out = Vec::with_capacity(idx.len() + 1);
            let mut begin = 0i64;
            for &i in &idx {
                if i <= begin {
                    return Err(RelError::new(format!(
                        "`split` indices must be positive and strictly ascending, found {idx:?}"
                    )));
                }
                out.push(piece(Dim::Fixed(i - begin)));
                begin = i;
            }
            let last = match d.fixed() {
                Some(e) if begin < e || idx.is_empty() => Dim::Fixed(e - begin),
                Some(e) => {
                    return Err(RelError::at(
                        0,
                        format!("`split` indices {idx:?} exceed axis {axis} of `{data}` (extent {e})"),
                    ))
                }
                None => Dim::Any,
            };
            out.push(piece(last));
            out
        }
        AttrValue::None => {
            return Err(RelError::new("`split` needs the attribute `indices_or_sections`"))
        }
        other => {
            return Err(RelError::new(format!(
                "attribute `indices_or_sections` of `split` must be an integer or an array of integers, found {other}"
            )))
        }
    };
    Ok(Type::Tuple(pieces))
}

/// `take`: without `axis`, gathers from the flattened data (the result has the indices' shape);
/// with `axis`, replaces that axis by the indices' axes after `batch_dims`.
fn take(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let indices = tensor(c, 1)?;
    if !indices.dtype.is_int() {
        return Err(RelError::at(
            1,
            format!("`take` needs integer indices, found `{indices}`"),
        ));
    }
    let mode = c.str("mode")?;
    if !matches!(mode, "clip" | "wrap" | "fast") {
        return Err(RelError::new(format!(
            "attribute `mode` of `take` must be \"clip\", \"wrap\" or \"fast\", found \"{mode}\""
        )));
    }
    let Some(axis) = rel::opt_int_attr(c, "axis")? else {
        return Ok(tensor_type(indices.shape.clone(), data.dtype));
    };
    let axis = norm_axis(c, axis, data.rank())?;
    let raw = c.int("batch_dims")?;
    let bd = if raw < 0 {
        raw + indices.rank() as i64
    } else {
        raw
    };
    if bd < 0 || bd as usize > indices.rank() || bd as usize > axis {
        return Err(RelError::new(format!(
            "attribute `batch_dims` of `take` must lie in 0..={} (the axis and the indices' rank), found {raw}",
            axis.min(indices.rank())
        )));
    }
    let bd = bd as usize;
    if let Some(j) = (0..bd).find(|&j| !rel::dims_agree(&data.shape[j], &indices.shape[j])) {
        return Err(RelError::at(
            1,
            format!("`take` with batch_dims={bd} needs equal leading extents, but `{data}` and `{indices}` differ on axis {j}"),
        ));
    }
    let mut shape = data.shape[..axis].to_vec();
    shape.extend_from_slice(&indices.shape[bd..]);
    shape.extend_from_slice(&data.shape[axis + 1..]);
    if shape.len() > MAX_RANK {
        return Err(RelError::new(format!(
            "`take` would produce more than {MAX_RANK} axes"
        )));
    }
    Ok(tensor_type(shape, data.dtype))
}

/// Clamps a slice index like TVM's `CanonicalizeIndex`.
fn canonical_index(index: i64, extent: i64, stride: i64) -> i64 {
    let (lo, hi) = if stride < 0 {
        (-1, extent - 1)
    } else {
        (0, extent)
    };
    let index = if index < 0 {
        index.saturating_add(extent)
    } else {
        index
    };
    index.clamp(lo, hi)
}

/// One sliced axis of `strided_slice`: the first index read, the step and the number of elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceAxis {
    /// The first index read (meaningless when `len` is 0).
    pub start: i64,
    /// The step between indices read (negative walks backwards).
    pub stride: i64,
    /// The number of indices read.
    pub len: i64,
}

/// The indices one axis of extent `n` reads under `strided_slice`'s rules: `begin` and `end`
/// (`None` when not given; in `size_mode`, `end` is a size, negative meaning "to the end")
/// are counted from the end when negative and clamped like TVM's `CanonicalizeIndex`; a missing
/// begin is the first element in the direction of `stride` (which must not be 0, and is 1 in
/// `size_mode`). The type relation and the reference interpreter both use this, so the kernel
/// reads exactly the elements the inferred shape promises. `Err((begin, end))` (the raw bounds)
/// when they are in the wrong order for the stride.
pub fn slice_axis(
    n: i64,
    begin: Option<i64>,
    end: Option<i64>,
    stride: i64,
    size_mode: bool,
) -> Result<SliceAxis, (i64, i64)> {
    let b_raw = begin.unwrap_or(if stride > 0 { 0 } else { i64::MAX });
    let e_raw = match end {
        Some(e) if size_mode => {
            if e < 0 {
                i64::MAX
            } else {
                b_raw.saturating_add(e)
            }
        }
        Some(e) => e,
        None if stride < 0 => 0,
        None => i64::MAX,
    };
    let bi = canonical_index(b_raw, n, stride);
    let ei = canonical_index(e_raw, n, stride);
    if (stride > 0 && bi > ei) || (stride < 0 && ei > bi) {
        return Err((b_raw, e_raw));
    }
    let span = (i128::from(ei) - i128::from(bi)).unsigned_abs();
    let step = u128::from(stride.unsigned_abs());
    // span <= n + 1, so the quotient fits.
    Ok(SliceAxis {
        start: bi,
        stride,
        len: span.div_ceil(step) as i64,
    })
}

/// What `strided_slice` reads from data of extents `dims`, per axis: the first index, the
/// step and the count (unsliced axes read everything by 1). `axes` are already normalised
/// (`None`: the entries apply to the leading axes). The reference interpreter and the native
/// code generator both take their indices from here.
pub fn strided_plan(
    dims: &[usize],
    begin: &[i64],
    end: &[i64],
    strides: &[i64],
    axes: Option<&[usize]>,
    size_mode: bool,
) -> Result<Vec<SliceAxis>, String> {
    let mut plan: Vec<SliceAxis> = dims
        .iter()
        .map(|&n| SliceAxis {
            start: 0,
            stride: 1,
            len: n as i64,
        })
        .collect();
    let leading: Vec<usize>;
    let axes = match axes {
        Some(a) => a,
        None => {
            leading = (0..dims.len()).collect();
            &leading
        }
    };
    for (k, &ax) in axes.iter().enumerate() {
        let Some(&n) = dims.get(ax) else {
            return Err(format!("`strided_slice` axis {ax} is out of range"));
        };
        let stride = if size_mode {
            1
        } else {
            strides.get(k).copied().unwrap_or(1)
        };
        if stride == 0 {
            return Err("`strided_slice` with a stride of 0".into());
        }
        plan[ax] = slice_axis(
            n as i64,
            begin.get(k).copied(),
            end.get(k).copied(),
            stride,
            size_mode,
        )
        .map_err(|(b, e)| {
            format!("`strided_slice` bounds {b} and {e} on axis {ax} are in the wrong order")
        })?;
    }
    Ok(plan)
}

/// `strided_slice`: per sliced axis, `begin`/`end` (negative counts from the end, clamped to the
/// extent) and `strides` (negative walks backwards; missing entries are 1). With `axes`, only
/// those axes are sliced; without, entries apply to the leading axes. In `slice_mode="size"`,
/// `end` holds sizes (negative: to the end) and strides are ignored.
fn strided_slice(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let r = data.rank();
    let need = |name: &str| {
        rel::opt_ints_attr(c, name)?
            .ok_or_else(|| RelError::new(format!("`strided_slice` needs the attribute `{name}`")))
    };
    let begin = need("begin")?;
    let end = need("end")?;
    let strides = rel::opt_ints_attr(c, "strides")?.unwrap_or_default();
    let size_mode = match c.str("slice_mode")? {
        "end" => false,
        "size" => true,
        other => {
            return Err(RelError::new(format!(
                "attribute `slice_mode` of `strided_slice` must be \"end\" or \"size\", found \"{other}\""
            )))
        }
    };
    let axes: Vec<usize> = match rel::opt_ints_attr(c, "axes")? {
        Some(axes) => {
            if begin.len() != axes.len() || end.len() != axes.len() || strides.len() > axes.len() {
                return Err(RelError::new(format!(
                    "`strided_slice` needs as many begin and end entries as axes, found begin={begin:?}, end={end:?}, axes={axes:?}"
                )));
            }
            let mut seen = vec![false; r];
            let mut out = Vec::with_capacity(axes.len());
            for &a in &axes {
                let p = norm_axis(c, a, r)?;
                if std::mem::replace(&mut seen[p], true) {
                    return Err(RelError::new(format!(
                        "`strided_slice` repeats axis {a} in axes={axes:?}"
                    )));
                }
                out.push(p);
            }
            out
        }
        None => {
            if begin.len() > r || end.len() > r || strides.len() > r {
                return Err(RelError::new(format!(
                    "`strided_slice` has more begin/end/strides entries than `{data}` has axes"
                )));
            }
            (0..r).collect()
        }
    };
    let mut shape = data.shape.clone();
    for (k, &ax) in axes.iter().enumerate() {
        let stride = if size_mode {
            1
        } else {
            strides.get(k).copied().unwrap_or(1)
        };
        if stride == 0 {
            return Err(RelError::new(format!(
                "`strided_slice` stride {k} must not be 0"
            )));
        }
        let (b, e) = (begin.get(k).copied(), end.get(k).copied());
        if b.is_none() && e.is_none() && stride == 1 {
            continue; // a full slice keeps the extent, dynamic or not
        }
        let Dim::Fixed(n) = data.shape[ax] else {
            shape[ax] = Dim::Any;
            continue;
        };
        let s = slice_axis(n, b, e, stride, size_mode).map_err(|(b_raw, e_raw)| {
            RelError::new(format!(
                "`strided_slice` on axis {ax} of `{data}`: begin {b_raw} and end {e_raw} are in the wrong order for stride {stride}"
            ))
        })?;
        shape[ax] = Dim::Fixed(s.len);
    }
    Ok(tensor_type(shape, data.dtype))
}

#[cfg(test)]
mod tests {
    use super::super::rel::testing::*;
    use crate::ir::{Dim, Type};

    fn tup(ts: Vec<Type>) -> Type {
        Type::Tuple(ts)
    }

    #[test]
    fn concatenate_and_stack() {
        let got = ok(
            "concatenate",
            vec![tup(vec![
                t(&[1, 12, 49, 64], "float32"),
                t(&[1, 12, 1, 64], "float32"),
            ])],
            &[("axis", int(-2))],
        );
        assert_eq!(got, t(&[1, 12, 50, 64], "float32"));
        let got = ok("concatenate", vec![tup(vec![t(&[2, 3], "float16")])], &[]);
        assert_eq!(got, t(&[2, 3], "float16"));
        let dyn_field = td(vec![Dim::Any, Dim::Fixed(3)], "float32");
        let got = ok(
            "concatenate",
            vec![tup(vec![dyn_field, t(&[2, 3], "float32")])],
            &[("axis", int(1))],
        );
        assert_eq!(got, t(&[2, 6], "float32"));
        let e = err(
            "concatenate",
            vec![tup(vec![t(&[2, 3], "float32"), t(&[2, 3], "float16")])],
            &[],
        );
        assert!(e.message.contains("field 1"), "{}", e.message);
        let e = err(
            "concatenate",
            vec![tup(vec![t(&[2, 3], "float32"), t(&[2, 4], "float32")])],
            &[],
        );
        assert!(e.message.contains("axis 1"), "{}", e.message);
        assert!(err("concatenate", vec![tup(vec![])], &[])
            .message
            .contains("at least one"));
        assert!(err("concatenate", vec![t(&[2], "float32")], &[])
            .message
            .contains("tuple"));
        assert!(err(
            "concatenate",
            vec![tup(vec![t(&[2], "float32")])],
            &[("axis", int(1))]
        )
        .message
        .contains("out of range"));
        let got = ok(
            "stack",
            vec![tup(vec![t(&[2, 3], "int32"); 4])],
            &[("axis", int(-1))],
        );
        assert_eq!(got, t(&[2, 3, 4], "int32"));
        assert!(err(
            "stack",
            vec![tup(vec![t(&[2, 3], "int32"), t(&[3, 2], "int32")])],
            &[]
        )
        .message
        .contains("equal shapes"));
    }

    #[test]
    fn split_by_indices_and_sections() {
        let x = t(&[50, 32, 2304], "float32");
        let got = ok(
            "split",
            vec![x.clone()],
            &[
                ("indices_or_sections", ints(&[768, 1536])),
                ("axis", int(2)),
            ],
        );
        assert_eq!(got, tup(vec![t(&[50, 32, 768], "float32"); 3]));
        let got = ok(
            "split",
            vec![x.clone()],
            &[("indices_or_sections", int(3)), ("axis", int(-1))],
        );
        assert_eq!(got, tup(vec![t(&[50, 32, 768], "float32"); 3]));
        let got = ok(
            "split",
            vec![x.clone()],
            &[("indices_or_sections", ints(&[10]))],
        );
        assert_eq!(
            got,
            tup(vec![
                t(&[10, 32, 2304], "float32"),
                t(&[40, 32, 2304], "float32")
            ])
        );
        let e = err(
            "split",
            vec![x.clone()],
            &[("indices_or_sections", int(5)), ("axis", int(2))],
        );
        assert!(e.message.contains("equal sections"), "{}", e.message);
        let e = err(
            "split",
            vec![x.clone()],
            &[
                ("indices_or_sections", ints(&[1536, 768])),
                ("axis", int(2)),
            ],
        );
        assert!(e.message.contains("ascending"), "{}", e.message);
        let e = err(
            "split",
            vec![x.clone()],
            &[("indices_or_sections", ints(&[2304])), ("axis", int(2))],
        );
        assert!(e.message.contains("exceed"), "{}", e.message);
        assert!(
            err("split", vec![x.clone()], &[("indices_or_sections", int(0))])
                .message
                .contains("sections")
        );
        assert!(err("split", vec![x.clone()], &[])
            .message
            .contains("indices_or_sections"));
        assert!(err(
            "split",
            vec![x],
            &[("indices_or_sections", int(2)), ("axis", int(3))]
        )
        .message
        .contains("out of range"));
        let dynamic = td(vec![Dim::Any, Dim::Fixed(4)], "float32");
        let got = ok("split", vec![dynamic], &[("indices_or_sections", int(2))]);
        assert_eq!(
            got,
            tup(vec![td(vec![Dim::Any, Dim::Fixed(4)], "float32"); 2])
        );
    }

    #[test]
    fn take_shapes() {
        let wte = t(&[50257, 768], "float32");
        let got = ok(
            "take",
            vec![wte.clone(), t(&[50, 32], "int64")],
            &[("axis", int(0))],
        );
        assert_eq!(got, t(&[50, 32, 768], "float32"));
        let got = ok("take", vec![wte.clone(), t(&[5], "int32")], &[]);
        assert_eq!(got, t(&[5], "float32"));
        let got = ok(
            "take",
            vec![t(&[4, 10, 3], "float32"), t(&[4, 7], "int32")],
            &[("axis", int(1)), ("batch_dims", int(1))],
        );
        assert_eq!(got, t(&[4, 7, 3], "float32"));
        let e = err(
            "take",
            vec![wte.clone(), t(&[50, 32], "float32")],
            &[("axis", int(0))],
        );
        assert_eq!(e.arg, Some(1));
        assert!(e.message.contains("integer"), "{}", e.message);
        assert!(err(
            "take",
            vec![wte.clone(), t(&[2], "int32")],
            &[("axis", int(2))]
        )
        .message
        .contains("out of range"));
        assert!(err(
            "take",
            vec![wte.clone(), t(&[2], "int32")],
            &[("axis", int(0)), ("batch_dims", int(1))]
        )
        .message
        .contains("batch_dims"));
        assert!(err(
            "take",
            vec![wte, t(&[2], "int32")],
            &[("mode", s("nearest"))]
        )
        .message
        .contains("mode"));
    }

    #[test]
    fn strided_slice_shapes() {
        let x = t(&[4, 5, 6], "float32");
        let sl = |b: &[i64], e: &[i64], st: &[i64]| {
            ok(
                "strided_slice",
                vec![x.clone()],
                &[("begin", ints(b)), ("end", ints(e)), ("strides", ints(st))],
            )
        };
        assert_eq!(sl(&[0, 1], &[2, 3], &[1]), t(&[2, 2, 6], "float32"));
        assert_eq!(
            sl(&[1, 0, 0], &[4, 5, 6], &[2, 2, 4]),
            t(&[2, 3, 2], "float32")
        );
        assert_eq!(sl(&[-2], &[100], &[1]), t(&[2, 5, 6], "float32"));
        assert_eq!(sl(&[3], &[-5], &[-1]), t(&[4, 5, 6], "float32"));
        assert_eq!(sl(&[-1], &[0], &[-2]), t(&[2, 5, 6], "float32"));
        assert_eq!(sl(&[2], &[2], &[1]), t(&[0, 5, 6], "float32"));
        let got = ok(
            "strided_slice",
            vec![x.clone()],
            &[
                ("begin", ints(&[1, 2])),
                ("end", ints(&[2, -1])),
                ("strides", ints(&[1])),
                ("slice_mode", s("size")),
            ],
        );
        assert_eq!(got, t(&[2, 3, 6], "float32"));
        let got = ok(
            "strided_slice",
            vec![x.clone()],
            &[
                ("begin", ints(&[1])),
                ("end", ints(&[3])),
                ("strides", ints(&[1])),
                ("axes", ints(&[-1])),
            ],
        );
        assert_eq!(got, t(&[4, 5, 2], "float32"));
        let dynamic = td(vec![Dim::Any, Dim::Fixed(8)], "float32");
        let got = ok(
            "strided_slice",
            vec![dynamic],
            &[
                ("begin", ints(&[0, 2])),
                ("end", ints(&[5, 8])),
                ("strides", ints(&[1, 3])),
            ],
        );
        assert_eq!(got, td(vec![Dim::Any, Dim::Fixed(2)], "float32"));
        let e = err(
            "strided_slice",
            vec![x.clone()],
            &[
                ("begin", ints(&[3])),
                ("end", ints(&[1])),
                ("strides", ints(&[1])),
            ],
        );
        assert!(e.message.contains("wrong order"), "{}", e.message);
        let e = err(
            "strided_slice",
            vec![x.clone()],
            &[
                ("begin", ints(&[0])),
                ("end", ints(&[1])),
                ("strides", ints(&[0])),
            ],
        );
        assert!(e.message.contains("must not be 0"), "{}", e.message);
        let e = err(
            "strided_slice",
            vec![x.clone()],
            &[
                ("begin", ints(&[0; 4])),
                ("end", ints(&[1; 4])),
                ("strides", ints(&[1])),
            ],
        );
        assert!(e.message.contains("more"), "{}", e.message);
        let e = err("strided_slice", vec![x.clone()], &[("end", ints(&[1]))]);
        assert!(e.message.contains("begin"), "{}", e.message);
        let huge = ok(
            "strided_slice",
            vec![x],
            &[
                ("begin", ints(&[i64::MIN])),
                ("end", ints(&[i64::MAX])),
                ("strides", ints(&[i64::MAX])),
            ],
        );
        assert_eq!(huge, t(&[1, 5, 6], "float32"));
    }
}
