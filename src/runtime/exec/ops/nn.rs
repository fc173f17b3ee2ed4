//! Neural-network operators: `nn.dense`, `nn.matmul`, `nn.batch_matmul`, the softmax family,
//! `nn.pad`, `nn.bias_add`, `nn.leaky_relu`, `nn.prelu` and `nn.batch_flatten` (`nn.relu` is
//! with the other elementwise operators).

use super::gemm::{sgemm, sgemm_serial};
use super::{op, Call, OpImpl, Reason};
use crate::ops::Op;
use crate::runtime::exec::tensor::{strides, Tensor};
use rayon::prelude::*;

pub(super) fn instantiate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    match c.op.op {
        Op::Dense => dense(c),
        Op::BatchMatmul => batch_matmul(c),
        Op::Softmax => softmax(c, false),
        Op::LogSoftmax => softmax(c, true),
        Op::Pad => pad(c),
        Op::BiasAdd => bias_add(c),
        Op::Prelu => prelu(c),
        Op::Matmul => matmul(c),
        Op::BatchFlatten => op(|args, outs| {
            outs[0].bytes_mut().copy_from_slice(args[0].bytes());
            Ok(())
        }),
        Op::LeakyRelu => {
            c.require_float(&[c.arg(0)?.dtype])?;
            let alpha = c.float("alpha")? as f32;
            super::tensor::unary_f32(move |x: f32| if x < 0.0 { alpha * x } else { x })
        }
        _ => Err(super::not_implemented(c)),
    }
}

/// `nn.dense`: `data [.., K] · weight [N, K]ᵀ`, summed in `float32`, stored in the result dtype.
fn dense(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let (d, w, o) = (c.arg(0)?, c.arg(1)?, c.out()?);
    c.require_float(&[d.dtype, w.dtype, o.dtype])?;
    let k = *d
        .dims
        .last()
        .ok_or("`nn.dense` needs data of rank 1 or more")?;
    let n = w.dims[0];
    let m = d.numel().checked_div(k).unwrap_or(o.numel() / n.max(1));
    op(move |args, outs| {
        let (a, b) = (args[0].f32_view(), args[1].f32_view());
        outs[0].fill_f32(|out| sgemm(m, k, n, &a, k as isize, 1, &b, 1, k as isize, out));
        Ok(())
    })
}

/// `nn.matmul`: `tensor_a [.., M, K]` (`[.., K, M]` with `transpose_a`, then each matrix of
/// the leading axes is one product) times the 2-d `tensor_b [K, N]` (`[N, K]` with
/// `transpose_b`).
fn matmul(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let (a, b, o) = (c.arg(0)?.clone(), c.arg(1)?.clone(), c.out()?.clone());
    c.require_float(&[a.dtype, b.dtype, o.dtype])?;
    let ta = c.bool("transpose_a")?;
    let tb = c.bool("transpose_b")?;
    let r = a.dims.len();
    if b.dims.len() != 2 || r < if ta { 2 } else { 1 } {
        return Err("`nn.matmul` needs a 2-d second operand".into());
    }
    let (k, n) = if tb {
        (b.dims[1], b.dims[0])
    } else {
        (b.dims[0], b.dims[1])
    };
    let (rsb, csb) = if tb { (1, k as isize) } else { (n as isize, 1) };
    // Without transpose_a every leading axis is a row; with it, one product per matrix.
    let (batch, m) = if ta {
        (a.dims[..r - 2].iter().product::<usize>(), a.dims[r - 1])
    } else {
        (1, a.dims[..r - 1].iter().product::<usize>())
    };
    let ka = if ta { a.dims[r - 2] } else { a.dims[r - 1] };
    if ka != k || o.numel() != batch * m * n {
        return Err(format!(
            "`nn.matmul` of {:?} and {:?} does not give {:?}",
            a.dims, b.dims, o.dims
        ));
    }
    let (rsa, csa) = if ta { (1, m as isize) } else { (k as isize, 1) };
    op(move |args, outs| {
        let (x, y) = (args[0].f32_view(), args[1].f32_view());
        outs[0].fill_f32(|out| {
            if m * n == 0 {
                return;
            }
            for (i, chunk) in out.chunks_mut(m * n).enumerate() {
                sgemm(m, k, n, &x[i * m * k..], rsa, csa, &y, rsb, csb, chunk);
            }
        });
        Ok(())
    })
}

/// `nn.prelu`: `x` where it is positive, else `alpha[channel] * x`, `alpha` along `axis`.
fn prelu(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let (d, o) = (c.arg(0)?.clone(), c.out()?.clone());
    c.require_float(&[d.dtype, c.arg(1)?.dtype])?;
    let axis = c.axis(c.int("axis")?, d.dims.len())?;
    let sa = strides(&d.dims);
    let mut sb = vec![0usize; d.dims.len()];
    sb[axis] = 1;
    op(move |args, outs| {
        let (x, alpha) = (args[0].f32_view(), args[1].f32_view());
        outs[0].fill_f32(|out| {
            super::iter::map2(&x, &sa, &alpha, &sb, out, &o.dims, |v, a| {
                if v > 0.0 {
                    v
                } else {
                    a * v
                }
            })
        });
        Ok(())
    })
}

/// `nn.batch_matmul`: `x [B, M, K] · y [B, K, N]` (either transposed in its last two axes; a
/// batch of 1 broadcasts).
fn batch_matmul(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let (x, y, o) = (c.arg(0)?.clone(), c.arg(1)?.clone(), c.out()?.clone());
    c.require_float(&[x.dtype, y.dtype, o.dtype])?;
    let ta = c.bool("transpose_a")?;
    let tb = c.bool("transpose_b")?;
    let (b, m, n) = (o.dims[0], o.dims[1], o.dims[2]);
    let k = if ta { x.dims[1] } else { x.dims[2] };
    let (rsa, csa) = if ta { (1, m as isize) } else { (k as isize, 1) };
    let (rsb, csb) = if tb { (1, k as isize) } else { (n as isize, 1) };
    let xs = if x.dims[0] == 1 { 0 } else { m * k };
    let ys = if y.dims[0] == 1 { 0 } else { k * n };
    op(move |args, outs| {
        let (xa, yb) = (args[0].f32_view(), args[1].f32_view());
        outs[0].fill_f32(|out| {
            if m * n == 0 {
                return;
            }
            let one = |i: usize, chunk: &mut [f32]| {
                sgemm_serial(
                    m,
                    k,
                    n,
                    &xa[i * xs..],
                    rsa,
                    csa,
                    &yb[i * ys..],
                    rsb,
                    csb,
                    chunk,
                )
            };
            if b >= 2 && rayon::current_num_threads() > 1 {
                out.par_chunks_mut(m * n)
                    .enumerate()
                    .for_each(|(i, chunk)| one(i, chunk));
            } else if b == 1 {
                sgemm(m, k, n, &xa, rsa, csa, &yb, rsb, csb, out);
            } else {
                for (i, chunk) in out.chunks_mut(m * n).enumerate() {
                    one(i, chunk);
                }
            }
        });
        Ok(())
    })
}

/// Splits a shape at `axis` into `(outer, extent, inner)`.
pub(super) fn around(dims: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = dims[..axis].iter().product();
    let inner = dims[axis + 1..].iter().product();
    (outer, dims[axis], inner)
}

/// `nn.softmax` / `nn.log_softmax` along `axis`: the maximum is subtracted before `exp`, sums
/// run in order along the axis.
fn softmax(c: &Call<'_>, log: bool) -> Result<Box<dyn OpImpl>, Reason> {
    let d = c.arg(0)?.clone();
    c.require_float(&[d.dtype])?;
    let axis = c.axis(c.int("axis")?, d.dims.len())?;
    let (outer, ext, inner) = around(&d.dims, axis);
    op(move |args, outs| {
        let x = args[0].f32_view();
        outs[0].fill_f32(|out| {
            if ext == 0 || inner == 0 {
                return;
            }
            let per = ext * inner;
            let row = |(ob, xb): (&mut [f32], &[f32])| {
                for i in 0..inner {
                    let mut mx = f32::NEG_INFINITY;
                    for j in 0..ext {
                        mx = mx.max(xb[j * inner + i]);
                    }
                    let mut sum = 0f32;
                    for j in 0..ext {
                        let e = (xb[j * inner + i] - mx).exp();
                        ob[j * inner + i] = e;
                        sum += e;
                    }
                    if log {
                        let ls = sum.ln();
                        for j in 0..ext {
                            ob[j * inner + i] = xb[j * inner + i] - mx - ls;
                        }
                    } else {
                        for j in 0..ext {
                            ob[j * inner + i] /= sum;
                        }
                    }
                }
            };
            if outer * per >= super::iter::PAR_MIN {
                out.par_chunks_mut(per).zip(x.par_chunks(per)).for_each(row);
            } else {
                out.chunks_mut(per).zip(x.chunks(per)).for_each(row);
            }
        });
        Ok(())
    })
}

/// `nn.pad`: `constant` fills with the scalar `pad_value` argument; `edge` repeats the border
/// element; `reflect` mirrors without repeating it (NumPy's `reflect`).
fn pad(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let (d, o) = (c.arg(0)?.clone(), c.out()?.clone());
    let mode = c.str("pad_mode")?.to_string();
    let widths: Vec<(usize, usize)> = match c.attrs.get(c.op.attrs, "pad_width") {
        Some(crate::ir::AttrValue::Array(rows)) => rows
            .iter()
            .map(|r| match r.as_ints().as_deref() {
                Some(&[b, a]) if b >= 0 && a >= 0 => Ok((b as usize, a as usize)),
                _ => Err(format!("`nn.pad` has a bad pad_width entry {r}")),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err("`nn.pad` needs `pad_width`".into()),
    };
    if widths.len() != d.dims.len() {
        return Err("`nn.pad` needs one pad_width pair per axis".into());
    }
    if !matches!(mode.as_str(), "constant" | "edge" | "reflect") {
        return Err(format!("`nn.pad` does not support pad_mode \"{mode}\""));
    }
    if mode != "constant" {
        for (k, (&n, &(b, a))) in d.dims.iter().zip(&widths).enumerate() {
            if n == 0 && b + a > 0 {
                return Err(format!(
                    "`nn.pad` in \"{mode}\" mode cannot pad axis {k}, which is empty"
                ));
            }
        }
    }
    let src_strides = strides(&d.dims);
    op(move |args, outs| {
        let out = &mut outs[0];
        if mode == "constant" {
            let es = out.elem_size();
            let value = args[1].bytes()[..es].to_vec();
            for chunk in out.bytes_mut().chunks_mut(es) {
                chunk.copy_from_slice(&value);
            }
            // Copy the data into the interior: a view of the output written from the input.
            interior_copy(args[0], out, &widths, &o.dims);
            return Ok(());
        }
        // Per-axis source coordinate of every output coordinate.
        let maps: Vec<Vec<usize>> = d
            .dims
            .iter()
            .zip(&widths)
            .zip(&o.dims)
            .map(|((&n, &(b, _)), &on)| {
                (0..on)
                    .map(|i| {
                        let x = i as i64 - b as i64;
                        let n = n as i64;
                        let v = if mode == "edge" || n == 1 {
                            x.clamp(0, n - 1)
                        } else {
                            let period = 2 * (n - 1);
                            let r = x.rem_euclid(period);
                            if r < n {
                                r
                            } else {
                                period - r
                            }
                        };
                        v as usize
                    })
                    .collect()
            })
            .collect();
        gather_by_maps(args[0], out, &maps, &src_strides);
        Ok(())
    })
}

/// Copies `src` into the region of `dst` that starts at the `before` widths.
fn interior_copy(src: &Tensor, dst: &mut Tensor, widths: &[(usize, usize)], out_dims: &[usize]) {
    if src.numel() == 0 {
        return;
    }
    // Build a tensor view of the destination region: write through a scratch tensor of the
    // source's shape, then scatter rows.
    let ost = strides(out_dims);
    let base: usize = widths.iter().zip(&ost).map(|(&(b, _), s)| b * s).sum();
    let es = src.elem_size();
    let dims = src.shape().to_vec();
    let r = dims.len();
    if r == 0 {
        dst.bytes_mut()[..es].copy_from_slice(src.bytes());
        return;
    }
    let last = dims[r - 1];
    let rows = src.numel() / last.max(1);
    let sb = src.bytes();
    let db = dst.bytes_mut();
    let mut coord = vec![0usize; r - 1];
    for row in 0..rows {
        let off: usize = base + coord.iter().zip(&ost).map(|(c, s)| c * s).sum::<usize>();
        db[off * es..(off + last) * es]
            .copy_from_slice(&sb[row * last * es..(row + 1) * last * es]);
        for i in (0..r - 1).rev() {
            coord[i] += 1;
            if coord[i] < dims[i] {
                break;
            }
            coord[i] = 0;
        }
    }
}

/// `dst[o] = src[Σ maps[k][o_k] * strides[k]]` for every output coordinate `o`.
pub(super) fn gather_by_maps(
    src: &Tensor,
    dst: &mut Tensor,
    maps: &[Vec<usize>],
    src_strides: &[usize],
) {
    let es = src.elem_size();
    let r = maps.len();
    let out_dims: Vec<usize> = maps.iter().map(Vec::len).collect();
    let total: usize = out_dims.iter().product();
    if total == 0 {
        return;
    }
    if r == 0 {
        dst.bytes_mut()[..es].copy_from_slice(&src.bytes()[..es]);
        return;
    }
    let last = out_dims[r - 1];
    let rows = total / last;
    let sb = src.bytes();
    let db = dst.bytes_mut();
    let mut coord = vec![0usize; r - 1];
    for row in 0..rows {
        let base: usize = coord
            .iter()
            .enumerate()
            .map(|(k, &c)| maps[k][c] * src_strides[k])
            .sum();
        for (j, &m) in maps[r - 1].iter().enumerate() {
            let s = (base + m * src_strides[r - 1]) * es;
            let d = (row * last + j) * es;
            db[d..d + es].copy_from_slice(&sb[s..s + es]);
        }
        for i in (0..r - 1).rev() {
            coord[i] += 1;
            if coord[i] < out_dims[i] {
                break;
            }
            coord[i] = 0;
        }
    }
}

/// `nn.bias_add`: adds the 1-d bias along `axis`.
fn bias_add(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let (d, o) = (c.arg(0)?.clone(), c.out()?.clone());
    c.require_float(&[d.dtype])?;
    let axis = c.axis(c.int("axis")?, d.dims.len())?;
    let sa = strides(&d.dims);
    let mut sb = vec![0usize; d.dims.len()];
    sb[axis] = 1;
    op(move |args, outs| {
        let (x, b) = (args[0].f32_view(), args[1].f32_view());
        outs[0].fill_f32(|out| super::iter::map2(&x, &sa, &b, &sb, out, &o.dims, |p, q| p + q));
        Ok(())
    })
}
