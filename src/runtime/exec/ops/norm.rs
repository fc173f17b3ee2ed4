//! Normalisations: `nn.batch_norm` (inference form), `nn.layer_norm` and `nn.instance_norm`.

use super::nn::around;
use super::{op, Call, OpImpl, Reason};
use crate::ops::Op;
use rayon::prelude::*;

pub(super) fn instantiate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let d = c.arg(0)?.clone();
    let dtypes: Vec<_> = c.args.iter().map(|a| a.dtype).collect();
    c.require_float(&dtypes)?;
    let axis = c.axis(c.int("axis")?, d.dims.len())?;
    let eps = c.float("epsilon")? as f32;
    let center = c.bool("center")?;
    let scale = c.bool("scale")?;
    let (outer, ext, inner) = around(&d.dims, axis);
    if c.op.op == Op::InstanceNorm {
        return instance_norm(&d.dims, axis, eps, center, scale);
    }
    if c.op.op == Op::BatchNorm {
        // y = (x - mean) / sqrt(var + eps) * gamma + beta, per channel; the second and third
        // results are the moving mean and variance, unchanged (inference).
        return op(move |args, outs| {
            let x = args[0].f32_view();
            let (g, b, m, v) = (
                args[1].f32_view(),
                args[2].f32_view(),
                args[3].f32_view(),
                args[4].f32_view(),
            );
            let denom: Vec<f32> = v.iter().map(|&v| (v + eps).sqrt()).collect();
            outs[0].fill_f32(|out| {
                let per = ext * inner;
                if per == 0 {
                    return;
                }
                let body = |(ob, xb): (&mut [f32], &[f32])| {
                    for ch in 0..ext {
                        let (mc, dc) = (m[ch], denom[ch]);
                        let gc = if scale { g[ch] } else { 1.0 };
                        let bc = if center { b[ch] } else { 0.0 };
                        let (o, xs) = (
                            &mut ob[ch * inner..(ch + 1) * inner],
                            &xb[ch * inner..(ch + 1) * inner],
                        );
                        for (o, &xv) in o.iter_mut().zip(xs) {
                            let mut y = (xv - mc) / dc;
                            if scale {
                                y *= gc;
                            }
                            if center {
                                y += bc;
                            }
                            *o = y;
                        }
                    }
                };
                if outer * per >= super::iter::PAR_MIN {
                    out.par_chunks_mut(per)
                        .zip(x.par_chunks(per))
                        .for_each(body);
                } else {
                    out.chunks_mut(per).zip(x.chunks(per)).for_each(body);
                }
            });
            let (mean, var) = outs.split_at_mut(2);
            mean[1].bytes_mut().copy_from_slice(args[3].bytes());
            var[0].bytes_mut().copy_from_slice(args[4].bytes());
            Ok(())
        });
    }
    // nn.layer_norm: mean and (biased) variance along the axis, summed in order.
    op(move |args, outs| {
        let x = args[0].f32_view();
        let (g, b) = (args[1].f32_view(), args[2].f32_view());
        outs[0].fill_f32(|out| {
            let per = ext * inner;
            if per == 0 {
                return;
            }
            let n = ext as f32;
            let body = |(ob, xb): (&mut [f32], &[f32])| {
                for i in 0..inner {
                    let mut sum = 0f32;
                    for j in 0..ext {
                        sum += xb[j * inner + i];
                    }
                    let mean = sum / n;
                    let mut sq = 0f32;
                    for j in 0..ext {
                        let dv = xb[j * inner + i] - mean;
                        sq += dv * dv;
                    }
                    let denom = (sq / n + eps).sqrt();
                    for j in 0..ext {
                        let mut y = (xb[j * inner + i] - mean) / denom;
                        if scale {
                            y *= g[j];
                        }
                        if center {
                            y += b[j];
                        }
                        ob[j * inner + i] = y;
                    }
                }
            };
            if outer * per >= super::iter::PAR_MIN {
                out.par_chunks_mut(per)
                    .zip(x.par_chunks(per))
                    .for_each(body);
            } else {
                out.chunks_mut(per).zip(x.chunks(per)).for_each(body);
            }
        });
        Ok(())
    })
}

/// `nn.instance_norm`: each (batch, channel) pair, the channel on `axis`, is normalised over
/// every other axis with its mean and biased variance, then scaled by `gamma[channel]` and
/// shifted by `beta[channel]`. The sums run over the pair's elements in row-major order.
fn instance_norm(
    dims: &[usize],
    axis: usize,
    eps: f32,
    center: bool,
    scale: bool,
) -> Result<Box<dyn OpImpl>, Reason> {
    let dims = dims.to_vec();
    let r = dims.len();
    let ext = dims[axis];
    let batch = if r == 0 { 1 } else { dims[0] };
    let groups = batch * ext;
    let total: usize = dims.iter().product();
    let per = total.checked_div(groups).unwrap_or(0) as f32;
    let st = crate::runtime::exec::tensor::strides(&dims);
    // The (batch, channel) group of element `i`.
    let group = move |i: usize| -> usize {
        let (n, ch) = if r == 0 {
            (0, 0)
        } else {
            (i / st[0] % dims[0], i / st[axis] % dims[axis])
        };
        n * ext + ch
    };
    op(move |args, outs| {
        let x = args[0].f32_view();
        let (g, b) = (args[1].f32_view(), args[2].f32_view());
        let mut sum = vec![0f32; groups];
        for (i, &v) in x.iter().enumerate() {
            sum[group(i)] += v;
        }
        let mean: Vec<f32> = sum.iter().map(|s| s / per).collect();
        let mut sq = vec![0f32; groups];
        for (i, &v) in x.iter().enumerate() {
            let k = group(i);
            let dv = v - mean[k];
            sq[k] += dv * dv;
        }
        let denom: Vec<f32> = sq.iter().map(|s| (s / per + eps).sqrt()).collect();
        outs[0].fill_f32(|out| {
            for (i, (o, &v)) in out.iter_mut().zip(x.iter()).enumerate() {
                let k = group(i);
                let ch = k % ext.max(1);
                let mut y = (v - mean[k]) / denom[k];
                if scale {
                    y *= g[ch];
                }
                if center {
                    y += b[ch];
                }
                *o = y;
            }
        });
        Ok(())
    })
}
