//! Shared type relations and the helpers the per-family relations are built from.
//!
//! Shapes and attributes are untrusted input: every extent computation uses checked arithmetic
//! and reports overflow, negative extents or out-of-range axes as a [`RelError`] instead of
//! panicking. Dynamic (`?`) and symbolic extents propagate as [`Dim::Any`] wherever a static value
//! would be needed to compute a result extent.

use super::geom::{self, AxisError, WindowError};
use super::layout::Layout;
use super::{Op, OpDef, OpPattern, RelCall, RelError, TypeRel};
use crate::ir::{AttrField, AttrValue, DType, Dim, TensorType, Type};

/// The largest rank a relation accepts or produces.
pub const MAX_RANK: usize = 256;

/// Builds an [`OpDef`]; shorthand used by the per-family tables.
pub const fn def(
    op: Op,
    args: &'static [&'static str],
    attrs: &'static [AttrField],
    pattern: OpPattern,
    rel: TypeRel,
) -> OpDef {
    OpDef {
        op,
        name: op.name(),
        args,
        attrs,
        pattern,
        rel,
    }
}

// ---------------------------------------------------------------------------------------------
// Results and formatting

/// A tensor result type.
pub fn tensor_type(shape: Vec<Dim>, dtype: DType) -> Type {
    Type::Tensor(TensorType { shape, dtype })
}

/// Formats a shape as `(1, 3, 224, 224)`.
pub fn show_shape(shape: &[Dim]) -> String {
    let parts: Vec<String> = shape.iter().map(Dim::to_string).collect();
    format!("({})", parts.join(", "))
}

/// The error for extent arithmetic that does not fit in 64 bits.
pub fn overflow(c: &RelCall<'_>) -> RelError {
    RelError::new(format!(
        "extent arithmetic of `{}` overflows 64-bit integers",
        c.op.name
    ))
}

// ---------------------------------------------------------------------------------------------
// Arguments

fn check_extents(c: &RelCall<'_>, i: usize, t: &TensorType) -> Result<(), RelError> {
    if t.rank() > MAX_RANK {
        return Err(RelError::at(
            i,
            format!(
                "argument `{}` of `{}` has rank {}, more than the supported {MAX_RANK}",
                c.arg_name(i),
                c.op.name,
                t.rank()
            ),
        ));
    }
    if let Some(n) = t.shape.iter().find_map(|d| d.fixed().filter(|&n| n < 0)) {
        return Err(RelError::at(
            i,
            format!(
                "argument `{}` of `{}` has the negative extent {n} in `{t}`",
                c.arg_name(i),
                c.op.name
            ),
        ));
    }
    Ok(())
}

/// Argument `i` as a tensor whose static extents are all non-negative.
pub fn tensor<'a>(c: &RelCall<'a>, i: usize) -> Result<&'a TensorType, RelError> {
    let t = c.tensor(i)?;
    check_extents(c, i, t)?;
    Ok(t)
}

/// Argument `i` as a tensor of exactly `rank` dimensions.
pub fn tensor_of_rank<'a>(
    c: &RelCall<'a>,
    i: usize,
    rank: usize,
) -> Result<&'a TensorType, RelError> {
    let t = tensor(c, i)?;
    if t.rank() != rank {
        return Err(RelError::at(
            i,
            format!(
                "`{}` expects argument `{}` to be a {rank}-d tensor, found `{t}`",
                c.op.name,
                c.arg_name(i)
            ),
        ));
    }
    Ok(t)
}

/// Argument `i` as a tensor of at least `rank` dimensions.
pub fn tensor_of_min_rank<'a>(
    c: &RelCall<'a>,
    i: usize,
    rank: usize,
) -> Result<&'a TensorType, RelError> {
    let t = tensor(c, i)?;
    if t.rank() < rank {
        return Err(RelError::at(
            i,
            format!(
                "`{}` expects argument `{}` to have at least {rank} dimension(s), found `{t}`",
                c.op.name,
                c.arg_name(i)
            ),
        ));
    }
    Ok(t)
}

/// Argument `i` as a tuple of tensors, each validated like [`tensor`].
pub fn tuple_tensors<'a>(c: &RelCall<'a>, i: usize) -> Result<Vec<&'a TensorType>, RelError> {
    let ts = c.tensors_of_tuple(i)?;
    for t in &ts {
        check_extents(c, i, t)?;
    }
    Ok(ts)
}

/// Requires argument `i` to have dtype `want`.
pub fn expect_dtype(
    c: &RelCall<'_>,
    i: usize,
    t: &TensorType,
    want: DType,
) -> Result<(), RelError> {
    if t.dtype != want {
        return Err(RelError::at(
            i,
            format!(
                "`{}` expects argument `{}` of dtype `{want}`, found `{t}`",
                c.op.name,
                c.arg_name(i)
            ),
        ));
    }
    Ok(())
}

/// Requires argument `i` to be a scalar or a 1-d tensor (a per-tensor or per-channel
/// quantization parameter) of dtype `want`.
pub fn expect_quant_param(c: &RelCall<'_>, i: usize, want: DType) -> Result<(), RelError> {
    let t = tensor(c, i)?;
    expect_dtype(c, i, t, want)?;
    if t.rank() > 1 {
        return Err(RelError::at(
            i,
            format!(
                "`{}` expects argument `{}` to be a scalar or a 1-d tensor, found `{t}`",
                c.op.name,
                c.arg_name(i)
            ),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Attributes

fn attr_err(c: &RelCall<'_>, name: &str, want: &str, found: &AttrValue) -> RelError {
    RelError::new(format!(
        "attribute `{name}` of `{}` must be {want}, found {found}",
        c.op.name
    ))
}

/// A required integer-array attribute.
pub fn ints_attr(c: &RelCall<'_>, name: &str) -> Result<Vec<i64>, RelError> {
    match c.attr(name) {
        AttrValue::None => Err(RelError::new(format!(
            "`{}` needs the attribute `{name}`",
            c.op.name
        ))),
        v => v
            .as_ints()
            .ok_or_else(|| attr_err(c, name, "an array of integers", v)),
    }
}

/// An integer-array attribute that may be `None`.
pub fn opt_ints_attr(c: &RelCall<'_>, name: &str) -> Result<Option<Vec<i64>>, RelError> {
    match c.attr(name) {
        AttrValue::None => Ok(None),
        v => v
            .as_ints()
            .map(Some)
            .ok_or_else(|| attr_err(c, name, "an array of integers or None", v)),
    }
}

/// An integer attribute that may be `None`.
pub fn opt_int_attr(c: &RelCall<'_>, name: &str) -> Result<Option<i64>, RelError> {
    match c.attr(name) {
        AttrValue::None => Ok(None),
        v => v
            .as_int()
            .map(Some)
            .ok_or_else(|| attr_err(c, name, "an integer or None", v)),
    }
}

/// A required float attribute.
pub fn float_attr(c: &RelCall<'_>, name: &str) -> Result<f64, RelError> {
    match c.attr(name) {
        AttrValue::None => Err(RelError::new(format!(
            "`{}` needs the attribute `{name}`",
            c.op.name
        ))),
        _ => c.float(name),
    }
}

/// The dtype attribute `name`, or `default` when it is unset (`""`).
pub fn dtype_or(c: &RelCall<'_>, name: &str, default: DType) -> Result<DType, RelError> {
    Ok(c.dtype(name)?.unwrap_or(default))
}

/// A layout attribute, parsed.
pub fn layout_attr(c: &RelCall<'_>, name: &str) -> Result<Layout, RelError> {
    let s = c.str(name)?;
    Layout::parse(s).map_err(|m| {
        RelError::new(format!(
            "attribute `{name}` of `{}` is not a valid layout: {m}",
            c.op.name
        ))
    })
}

/// Argument 0 and its `layout` attribute, which must have the argument's rank.
pub fn data_with_layout<'a>(c: &RelCall<'a>) -> Result<(&'a TensorType, Layout), RelError> {
    let data = tensor(c, 0)?;
    let layout = layout_attr(c, "layout")?;
    if layout.rank() != data.rank() {
        return Err(RelError::at(
            0,
            format!(
                "`{}` with layout `{layout}` needs a {}-d input, found `{data}`",
                c.op.name,
                layout.rank()
            ),
        ));
    }
    Ok((data, layout))
}

/// A per-spatial-axis attribute (`strides`, `dilation`, `pool_size`, `kernel_size`): `n` positive
/// integers, or a single one applied to every axis.
pub fn spatial_ints(c: &RelCall<'_>, name: &str, n: usize) -> Result<Vec<i64>, RelError> {
    geom::per_axis(&ints_attr(c, name)?, n, true).map_err(|e| match e {
        AxisError::Count(len) => RelError::new(format!(
            "attribute `{name}` of `{}` needs {n} value(s), found {len}",
            c.op.name
        )),
        AxisError::Value(bad) => RelError::new(format!(
            "attribute `{name}` of `{}` must hold positive values, found {bad}",
            c.op.name
        )),
    })
}

/// The total padding per spatial axis from a TVM padding attribute: one value (all sides), `n`
/// values (both sides of each axis) or `2n` values (all befores, then all afters).
pub fn padding_totals(c: &RelCall<'_>, name: &str, n: usize) -> Result<Vec<i64>, RelError> {
    let (before, after) = geom::padding(&ints_attr(c, name)?, n).map_err(|e| match e {
        AxisError::Value(bad) => RelError::new(format!(
            "attribute `{name}` of `{}` must not be negative, found {bad}",
            c.op.name
        )),
        AxisError::Count(len) => {
            let forms = if n == 1 {
                "1 or 2".to_string()
            } else {
                format!("1, {n} or {}", 2 * n)
            };
            RelError::new(format!(
                "attribute `{name}` of `{}` needs {forms} values, found {len}",
                c.op.name
            ))
        }
    })?;
    before
        .iter()
        .zip(&after)
        .map(|(b, a)| b.checked_add(*a).ok_or_else(|| overflow(c)))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Axes

/// A `shape` attribute (`full`, `zeros`, `broadcast_to`, ...): required, with non-negative extents.
pub fn shape_attr(c: &RelCall<'_>, name: &str) -> Result<Vec<Dim>, RelError> {
    let v = ints_attr(c, name)?;
    if v.len() > MAX_RANK {
        return Err(RelError::new(format!(
            "attribute `{name}` of `{}` has {} extents, more than the supported {MAX_RANK}",
            c.op.name,
            v.len()
        )));
    }
    if let Some(bad) = v.iter().find(|&&x| x < 0) {
        return Err(RelError::new(format!(
            "attribute `{name}` of `{}` must hold non-negative extents, found {bad}",
            c.op.name
        )));
    }
    Ok(v.into_iter().map(Dim::Fixed).collect())
}

/// Normalises `axis` for a rank-`rank` tensor: it must lie in `[-rank, rank)`.
pub fn norm_axis(c: &RelCall<'_>, axis: i64, rank: usize) -> Result<usize, RelError> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(RelError::new(format!(
            "axis {axis} of `{}` is out of range for a rank-{rank} tensor (expected {} to {})",
            c.op.name,
            -r,
            r - 1
        )));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

/// Normalises an insertion position (`expand_dims`, `stack`): it must lie in `[-rank-1, rank]`.
pub fn norm_insert_axis(c: &RelCall<'_>, axis: i64, rank: usize) -> Result<usize, RelError> {
    let r = rank as i64;
    if axis < -r - 1 || axis > r {
        return Err(RelError::new(format!(
            "axis {axis} of `{}` is out of range for inserting into a rank-{rank} tensor (expected {} to {r})",
            c.op.name,
            -r - 1
        )));
    }
    Ok(if axis < 0 { axis + r + 1 } else { axis } as usize)
}

// ---------------------------------------------------------------------------------------------
// Extent arithmetic

/// Whether two extents can be equal (dynamic and symbolic extents match anything).
pub fn dims_agree(a: &Dim, b: &Dim) -> bool {
    match (a, b) {
        (Dim::Fixed(x), Dim::Fixed(y)) => x == y,
        _ => true,
    }
}

/// The more informative of two agreeing extents (static beats dynamic), or `None` if they differ.
pub fn unify_dims(a: &Dim, b: &Dim) -> Option<Dim> {
    match (a, b) {
        (Dim::Fixed(x), Dim::Fixed(y)) => (x == y).then(|| a.clone()),
        (Dim::Fixed(_), _) => Some(a.clone()),
        (_, Dim::Fixed(_)) => Some(b.clone()),
        _ if a == b => Some(a.clone()),
        _ => Some(Dim::Any),
    }
}

/// `a * b`, dynamic if either is.
pub fn mul_dims(c: &RelCall<'_>, a: &Dim, b: &Dim) -> Result<Dim, RelError> {
    match (a.fixed(), b.fixed()) {
        (Some(x), Some(y)) => x.checked_mul(y).map(Dim::Fixed).ok_or_else(|| overflow(c)),
        _ => Ok(Dim::Any),
    }
}

/// `a + b`, dynamic if either is.
pub fn add_dims(c: &RelCall<'_>, a: &Dim, b: &Dim) -> Result<Dim, RelError> {
    match (a.fixed(), b.fixed()) {
        (Some(x), Some(y)) => x.checked_add(y).map(Dim::Fixed).ok_or_else(|| overflow(c)),
        _ => Ok(Dim::Any),
    }
}

/// The number of elements of a shape, `None` if any extent is not static.
pub fn num_elements(c: &RelCall<'_>, shape: &[Dim]) -> Result<Option<i64>, RelError> {
    let mut n: i64 = 1;
    for d in shape {
        match d.fixed() {
            Some(x) => n = n.checked_mul(x).ok_or_else(|| overflow(c))?,
            None => return Ok(None),
        }
    }
    Ok(Some(n))
}

/// The output extent of a sliding window (convolution, pooling) along one axis.
///
/// `pad` is the total padding of the axis. The result is dynamic when the input or the kernel
/// extent is; it is an error when the dilated window does not fit in the padded input.
pub fn window_extent(
    c: &RelCall<'_>,
    input: &Dim,
    pad: i64,
    kernel: &Dim,
    stride: i64,
    dilation: i64,
    ceil_mode: bool,
) -> Result<Dim, RelError> {
    let (Some(n), Some(k)) = (input.fixed(), kernel.fixed()) else {
        return Ok(Dim::Any);
    };
    if k < 1 || stride < 1 || dilation < 1 {
        return Err(RelError::new(format!(
            "`{}` needs a positive window, stride and dilation, found {k}, {stride} and {dilation}",
            c.op.name
        )));
    }
    match geom::window_out(n, k, pad, stride, dilation, ceil_mode) {
        Ok(e) => Ok(Dim::Fixed(e)),
        Err(WindowError::Overflow) => Err(overflow(c)),
        Err(WindowError::TooLarge { dilated, padded }) => Err(RelError::new(format!(
            "the window of `{}` ({dilated} after dilation) is larger than the padded input extent {padded}",
            c.op.name
        ))),
    }
}

// ---------------------------------------------------------------------------------------------
// Broadcasting

/// Numpy-style broadcasting of two shapes, aligned at the innermost dimension. On failure returns
/// the two extents that clash.
pub fn broadcast_dims(a: &[Dim], b: &[Dim]) -> Result<Vec<Dim>, (Dim, Dim)> {
    let n = a.len().max(b.len());
    let one = Dim::Fixed(1);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let da = (i + a.len()).checked_sub(n).map_or(&one, |j| &a[j]);
        let db = (i + b.len()).checked_sub(n).map_or(&one, |j| &b[j]);
        out.push(match (da, db) {
            (Dim::Fixed(1), d) | (d, Dim::Fixed(1)) => d.clone(),
            (x, y) if x == y => x.clone(),
            (Dim::Fixed(_), Dim::Fixed(_)) => return Err((da.clone(), db.clone())),
            (Dim::Fixed(_), _) => da.clone(),
            (_, Dim::Fixed(_)) => db.clone(),
            _ => Dim::Any,
        });
    }
    Ok(out)
}

/// Numpy-style broadcasting of two shapes; `None` if they do not broadcast.
pub fn broadcast_shapes(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    broadcast_dims(a, b).ok()
}

/// Broadcasts arguments `i` and `j`, which must share a dtype.
pub fn broadcast_args(c: &RelCall<'_>, i: usize, j: usize) -> Result<TensorType, RelError> {
    let a = tensor(c, i)?;
    let b = tensor(c, j)?;
    if a.dtype != b.dtype {
        return Err(RelError::at(
            j,
            format!(
                "`{}` needs operands of one dtype, found `{}` and `{}`",
                c.op.name, a.dtype, b.dtype
            ),
        ));
    }
    let shape = broadcast_dims(&a.shape, &b.shape).map_err(|(x, y)| {
        RelError::at(
            j,
            format!(
                "`{}` cannot broadcast `{a}` with `{b}`: extents {x} and {y} differ and neither is 1",
                c.op.name
            ),
        )
    })?;
    Ok(TensorType {
        shape,
        dtype: a.dtype,
    })
}

// ---------------------------------------------------------------------------------------------
// Relations shared by several families

/// The result has the type of argument 0.
pub fn identity(c: &RelCall<'_>) -> Result<Type, RelError> {
    Ok(Type::Tensor(tensor(c, 0)?.clone()))
}

/// Numpy-style broadcasting of two tensors of the same dtype.
pub fn broadcast(c: &RelCall<'_>) -> Result<Type, RelError> {
    Ok(Type::Tensor(broadcast_args(c, 0, 1)?))
}

/// A broadcasting comparison: like [`broadcast`], with a `bool` result.
pub fn compare(c: &RelCall<'_>) -> Result<Type, RelError> {
    let t = broadcast_args(c, 0, 1)?;
    Ok(tensor_type(t.shape, DType::BOOL))
}

/// Test helpers shared by the per-family test modules.
#[cfg(test)]
pub(crate) mod testing {
    use super::super::{registry, RelCall, RelError};
    use crate::ir::{AttrValue, Attrs, DType, Dim, TensorType, Type};

    /// A static tensor type.
    pub fn t(shape: &[i64], dtype: &str) -> Type {
        Type::Tensor(TensorType::new(shape, DType::parse(dtype).unwrap()))
    }

    /// A tensor type with explicit dims.
    pub fn td(shape: Vec<Dim>, dtype: &str) -> Type {
        Type::Tensor(TensorType {
            shape,
            dtype: DType::parse(dtype).unwrap(),
        })
    }

    /// An integer array attribute value.
    pub fn ints(v: &[i64]) -> AttrValue {
        AttrValue::ints(v)
    }

    /// An integer attribute value.
    pub fn int(v: i64) -> AttrValue {
        AttrValue::int(v)
    }

    /// A string attribute value.
    pub fn s(v: &str) -> AttrValue {
        AttrValue::Str(v.to_string())
    }

    /// Runs the relation of `name` on `args` with the given attributes (coerced like the parser).
    pub fn rel(name: &str, args: Vec<Type>, attrs: &[(&str, AttrValue)]) -> Result<Type, RelError> {
        let reg = registry();
        let def = reg.get(reg.lookup(name).unwrap_or_else(|| panic!("no op {name}")));
        assert_eq!(args.len(), def.arity(), "arity of {name}");
        let mut a = Attrs::defaults(def.attrs);
        for (k, v) in attrs {
            let f = def
                .attr_field(k)
                .unwrap_or_else(|| panic!("{name} has no attr {k}"));
            let v = f.ty.coerce(v.clone()).unwrap();
            assert!(a.set(def.attrs, k, v));
        }
        (def.rel)(&RelCall {
            op: def,
            args: &args,
            attrs: &a,
        })
    }

    /// Runs a relation that must succeed with a tensor result; returns its type.
    pub fn ok(name: &str, args: Vec<Type>, attrs: &[(&str, AttrValue)]) -> Type {
        rel(name, args, attrs).unwrap_or_else(|e| panic!("{name}: {}", e.message))
    }

    /// Runs a relation that must fail; returns the error.
    pub fn err(name: &str, args: Vec<Type>, attrs: &[(&str, AttrValue)]) -> RelError {
        match rel(name, args, attrs) {
            Ok(t) => panic!("{name} unexpectedly gave {t}"),
            Err(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn broadcasting_rules() {
        let d = |v: &[i64]| v.iter().map(|&n| Dim::Fixed(n)).collect::<Vec<_>>();
        assert_eq!(
            broadcast_shapes(&d(&[8, 1, 3]), &d(&[4, 1])),
            Some(d(&[8, 4, 3]))
        );
        assert_eq!(broadcast_shapes(&d(&[]), &d(&[2, 2])), Some(d(&[2, 2])));
        assert_eq!(broadcast_shapes(&d(&[2]), &d(&[3])), None);
        let any = vec![Dim::Any, Dim::Fixed(1)];
        assert_eq!(broadcast_shapes(&any, &d(&[5, 7])), Some(d(&[5, 7])));
        assert_eq!(broadcast_shapes(&any, &d(&[1])), Some(any.clone()));
    }

    #[test]
    fn binary_relations() {
        assert_eq!(
            ok(
                "add",
                vec![t(&[1, 50, 32, 768], "float32"), t(&[768], "float32")],
                &[]
            ),
            t(&[1, 50, 32, 768], "float32")
        );
        assert_eq!(
            ok("less", vec![t(&[1, 50], "int64"), t(&[], "int64")], &[]),
            t(&[1, 50], "bool")
        );
        let e = err("add", vec![t(&[2, 3], "float32"), t(&[3], "float16")], &[]);
        assert_eq!(e.arg, Some(1));
        assert!(
            e.message.contains("float32") && e.message.contains("float16"),
            "{}",
            e.message
        );
        let e = err(
            "multiply",
            vec![t(&[2, 3], "float32"), t(&[4], "float32")],
            &[],
        );
        assert!(e.message.contains("cannot broadcast"), "{}", e.message);
        let e = err("add", vec![t(&[-2, 3], "float32"), t(&[3], "float32")], &[]);
        assert_eq!(e.arg, Some(0));
        assert!(e.message.contains("negative"));
    }

    /// Every relation, fed random (often nonsensical) argument types and attribute values, must
    /// return `Ok` or `Err` without panicking.
    #[test]
    fn random_calls_never_panic() {
        use crate::ir::{AttrType, Attrs};
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |n: usize| -> usize {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        const INTS: [i64; 12] = [-5, -2, -1, 0, 1, 2, 3, 4, 16, 768, i64::MAX, i64::MIN];
        const DIMS: [i64; 8] = [0, 1, 2, 3, 4, 16, 768, i64::MAX];
        const STRS: [&str; 14] = [
            "", "NCHW", "NHWC", "NCHW16c", "OIHW", "HWIO", "IOHW", "NCDHW", "NCW", "end", "size",
            "constant", "clip", "x",
        ];
        const DTYPES: [&str; 7] = [
            "float32", "float16", "int32", "int64", "int8", "uint8", "bool",
        ];
        let reg = super::super::registry();
        for (_, def) in reg.iter() {
            for _ in 0..3000 {
                let rand_ints = |next: &mut dyn FnMut(usize) -> usize| {
                    let n = next(6);
                    AttrValue::ints(&(0..n).map(|_| INTS[next(INTS.len())]).collect::<Vec<_>>())
                };
                let mut attrs = Attrs::defaults(def.attrs);
                for f in def.attrs {
                    if next(3) == 0 {
                        continue;
                    }
                    let v = match f.ty {
                        AttrType::Int => AttrValue::int(INTS[next(INTS.len())]),
                        AttrType::OptInt if next(4) == 0 => AttrValue::None,
                        AttrType::OptInt => AttrValue::int(INTS[next(INTS.len())]),
                        AttrType::Float => AttrValue::Float(
                            [0.0, 1.5, -1.0, f64::NAN, f64::INFINITY, 1e300][next(6)],
                            DType::F64,
                        ),
                        AttrType::Bool => AttrValue::Bool(next(2) == 0),
                        AttrType::Str => AttrValue::Str(STRS[next(STRS.len())].into()),
                        AttrType::DType => AttrValue::Str(["", "float32", "int8"][next(3)].into()),
                        AttrType::OptInts if next(4) == 0 => AttrValue::None,
                        AttrType::Ints | AttrType::OptInts => rand_ints(&mut next),
                        AttrType::IntOrInts if next(2) == 0 => {
                            AttrValue::int(INTS[next(INTS.len())])
                        }
                        AttrType::IntOrInts => rand_ints(&mut next),
                        AttrType::IntsNested => {
                            AttrValue::Array((0..next(5)).map(|_| rand_ints(&mut next)).collect())
                        }
                        _ => continue,
                    };
                    attrs.set(def.attrs, f.name, v);
                }
                let rand_tensor = |next: &mut dyn FnMut(usize) -> usize| {
                    let shape = (0..next(7))
                        .map(|_| match next(10) {
                            0 => Dim::Any,
                            _ => Dim::Fixed(DIMS[next(DIMS.len())]),
                        })
                        .collect();
                    Type::Tensor(TensorType {
                        shape,
                        dtype: DType::parse(DTYPES[next(DTYPES.len())]).unwrap(),
                    })
                };
                let n_args = if next(10) == 0 { next(9) } else { def.arity() };
                let args: Vec<Type> = (0..n_args)
                    .map(|_| match next(8) {
                        0 => Type::Tuple((0..next(4)).map(|_| rand_tensor(&mut next)).collect()),
                        _ => rand_tensor(&mut next),
                    })
                    .collect();
                let _ = (def.rel)(&RelCall {
                    op: def,
                    args: &args,
                    attrs: &attrs,
                });
            }
        }
    }

    #[test]
    fn window_arithmetic() {
        let reg = super::super::registry();
        let def = reg.get(reg.lookup("add").unwrap());
        let attrs = crate::ir::Attrs::defaults(def.attrs);
        let c = RelCall {
            op: def,
            args: &[],
            attrs: &attrs,
        };
        let w =
            |n, p, k, s, d, ceil| window_extent(&c, &Dim::Fixed(n), p, &Dim::Fixed(k), s, d, ceil);
        assert_eq!(w(224, 6, 7, 2, 1, false).unwrap(), Dim::Fixed(112));
        assert_eq!(w(112, 2, 3, 2, 1, false).unwrap(), Dim::Fixed(56));
        assert_eq!(w(10, 0, 3, 2, 1, true).unwrap(), Dim::Fixed(5));
        assert_eq!(w(10, 0, 3, 2, 1, false).unwrap(), Dim::Fixed(4));
        assert_eq!(w(10, 0, 3, 1, 2, false).unwrap(), Dim::Fixed(6));
        assert!(w(2, 0, 3, 1, 1, false).is_err());
        assert!(w(i64::MAX, 1, 1, 1, 1, false).is_err());
        assert!(w(10, 0, i64::MAX, 1, 2, false).is_err());
        assert_eq!(
            window_extent(&c, &Dim::Any, 0, &Dim::Fixed(3), 1, 1, false).unwrap(),
            Dim::Any
        );
    }
}
