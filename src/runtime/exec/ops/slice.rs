//! Joining, splitting, slicing and gathering: `concatenate`, `stack`, `split`,
//! `strided_slice` and `take`, for any dtype.

use super::nn::around;
use super::{op, Call, OpImpl, Reason};
use crate::ir::AttrValue;
use crate::ops::Op;
use crate::runtime::exec::kernel::RunError;

pub(super) fn instantiate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    match c.op.op {
        Op::Concatenate => concatenate(c),
        Op::Stack => stack(c),
        Op::StridedSlice => strided_slice(c),
        Op::Split => split(c),
        Op::Take => take(c),
        _ => Err(super::not_implemented(c)),
    }
}

/// Each input is `[outer, extent_i * inner]` bytes; the output interleaves them per outer index.
fn concatenate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let first = c.arg(0)?.clone();
    let axis = c.axis(c.int("axis")?, first.dims.len())?;
    let es = crate::runtime::exec::tensor::elem_size(first.dtype).unwrap_or(1);
    let (outer, _, inner) = around(&first.dims, axis);
    let widths: Vec<usize> = c.args.iter().map(|a| a.dims[axis] * inner * es).collect();
    let total: usize = widths.iter().sum();
    op(move |args, outs| {
        let out = outs[0].bytes_mut();
        let mut at = 0;
        for o in 0..outer {
            for (a, &wd) in args.iter().zip(&widths) {
                out[at..at + wd].copy_from_slice(&a.bytes()[o * wd..(o + 1) * wd]);
                at += wd;
            }
        }
        debug_assert_eq!(at, outer * total);
        Ok(())
    })
}

/// `stack`: like [`concatenate`] along a new axis, each input contributing one
/// `[inner]` block per outer index.
fn stack(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let first = c.arg(0)?.clone();
    let r = first.dims.len();
    let raw = c.int("axis")?;
    // The new axis may be at any of the rank + 1 positions.
    let axis = c.axis(raw, r + 1)?;
    if c.args.iter().any(|a| a.dims != first.dims) {
        return Err("`stack` needs tensors of one shape".into());
    }
    let es = crate::runtime::exec::tensor::elem_size(first.dtype).unwrap_or(1);
    let outer: usize = first.dims[..axis].iter().product();
    let width = first.dims[axis..].iter().product::<usize>() * es;
    op(move |args, outs| {
        let out = outs[0].bytes_mut();
        let mut at = 0;
        for o in 0..outer {
            for a in args {
                out[at..at + width].copy_from_slice(&a.bytes()[o * width..(o + 1) * width]);
                at += width;
            }
        }
        Ok(())
    })
}

/// `strided_slice`: each sliced axis reads `len` indices from `start` by `stride` (negative
/// walks backwards), computed by [`crate::ops::slice_axis`] exactly as the type relation does;
/// the copy is one strided gather.
fn strided_slice(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let d = c.arg(0)?.clone();
    let o = c.out()?.clone();
    let r = d.dims.len();
    let need = |name: &str| {
        c.opt_ints(name)
            .ok_or_else(|| format!("`strided_slice` needs the attribute `{name}`"))
    };
    let begin = need("begin")?;
    let end = need("end")?;
    let strides = c.opt_ints("strides").unwrap_or_default();
    let size_mode = match c.str("slice_mode")? {
        "end" => false,
        "size" => true,
        other => {
            return Err(format!(
                "`strided_slice` does not support slice_mode \"{other}\""
            ))
        }
    };
    let axes: Option<Vec<usize>> = match c.opt_ints("axes") {
        Some(a) => Some(a.iter().map(|&x| c.axis(x, r)).collect::<Result<_, _>>()?),
        None => None,
    };
    let plan =
        crate::ops::strided_plan(&d.dims, &begin, &end, &strides, axes.as_deref(), size_mode)?;
    let start: Vec<i64> = plan.iter().map(|s| s.start).collect();
    let step: Vec<i64> = plan.iter().map(|s| s.stride).collect();
    let len: Vec<i64> = plan.iter().map(|s| s.len).collect();
    if len.iter().map(|&l| l as usize).ne(o.dims.iter().copied()) {
        return Err(format!(
            "`strided_slice` reads {len:?} but its type says {:?}",
            o.dims
        ));
    }
    let st = crate::runtime::exec::tensor::strides(&d.dims);
    let empty = len.contains(&0);
    let base: i64 = if empty {
        0
    } else {
        (0..r).map(|k| start[k] * st[k] as i64).sum()
    };
    let signed: Vec<isize> = (0..r).map(|k| (step[k] * st[k] as i64) as isize).collect();
    op(move |args, outs| {
        if !empty {
            super::iter::strided_gather(args[0], base as usize, &signed, &mut outs[0]);
        }
        Ok(())
    })
}

/// The inverse of [`concatenate`]: the output extents come from the result types.
fn split(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let d = c.arg(0)?.clone();
    let axis = c.axis(c.int("axis")?, d.dims.len())?;
    let es = crate::runtime::exec::tensor::elem_size(d.dtype).unwrap_or(1);
    let (outer, ext, inner) = around(&d.dims, axis);
    let widths: Vec<usize> = c.outs.iter().map(|o| o.dims[axis] * inner * es).collect();
    if c.outs.iter().map(|o| o.dims[axis]).sum::<usize>() != ext {
        return Err("`split` results do not add up to the input".into());
    }
    op(move |args, outs| {
        let src = args[0].bytes();
        let row = ext * inner * es;
        for o in 0..outer {
            let mut at = o * row;
            for (t, &wd) in outs.iter_mut().zip(&widths) {
                t.bytes_mut()[o * wd..(o + 1) * wd].copy_from_slice(&src[at..at + wd]);
                at += wd;
            }
        }
        Ok(())
    })
}

/// `take(data, indices, axis, batch_dims, mode)`. Without `axis` the data is flattened.
/// Out-of-range indices: `clip` clamps to `[0, n)` (negative indices become 0, as in TVM and
/// NumPy), `wrap` wraps around, `fast` assumes they do not occur and reports an error if one
/// does.
fn take(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let d = c.arg(0)?.clone();
    let idx = c.arg(1)?.clone();
    if !idx.dtype.is_int() {
        return Err("`take` needs integer indices".into());
    }
    let mode = c.str("mode")?.to_string();
    if !matches!(mode.as_str(), "clip" | "wrap" | "fast") {
        return Err(format!("`take` does not support mode \"{mode}\""));
    }
    // Data viewed as [batch, pre, n, post], indices as [batch, k].
    let (dims, axis, bd) = match c.opt_int("axis") {
        None => (vec![d.numel()], 0usize, 0usize),
        Some(a) => {
            let axis = c.axis(a, d.dims.len())?;
            let raw = match c.attrs.get(c.op.attrs, "batch_dims") {
                Some(AttrValue::Int(v, _)) => *v,
                _ => 0,
            };
            let bd = if raw < 0 {
                raw + idx.dims.len() as i64
            } else {
                raw
            };
            let bd = usize::try_from(bd)
                .ok()
                .filter(|&b| b <= axis && b <= idx.dims.len())
                .ok_or_else(|| format!("`take` has an invalid batch_dims {raw}"))?;
            (d.dims.clone(), axis, bd)
        }
    };
    let batch: usize = dims[..bd].iter().product();
    let pre: usize = dims[bd..axis].iter().product();
    let n = dims[axis];
    let post: usize = dims[axis + 1..].iter().product();
    let k: usize = idx.dims[bd.min(idx.dims.len())..].iter().product();
    let es = crate::runtime::exec::tensor::elem_size(d.dtype).unwrap_or(1);
    op(move |args, outs| {
        let ix = args[1].i64_view();
        let src = args[0].bytes();
        let out = outs[0].bytes_mut();
        let row = post * es;
        let mut at = 0;
        for b in 0..batch {
            for p in 0..pre {
                for j in 0..k {
                    let raw = ix[b * k + j];
                    let i = if n == 0 {
                        return Err(RunError::new("`take` from an empty axis"));
                    } else {
                        match mode.as_str() {
                            "clip" => raw.clamp(0, n as i64 - 1) as usize,
                            "wrap" => raw.rem_euclid(n as i64) as usize,
                            _ => usize::try_from(raw).ok().filter(|&i| i < n).ok_or_else(|| {
                                RunError::new(format!(
                                    "`take` index {raw} is out of range for an axis of {n} (mode \"fast\")"
                                ))
                            })?,
                        }
                    };
                    let s = ((b * pre + p) * n + i) * row;
                    out[at..at + row].copy_from_slice(&src[s..s + row]);
                    at += row;
                }
            }
        }
        Ok(())
    })
}
