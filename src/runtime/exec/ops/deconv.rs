//! `nn.conv2d_transpose`: any data, kernel and output layout (converted to `NCHW`/`IOHW` and
//! back), strides, dilation, padding on each side, output padding and groups.
//!
//! By definition, input element `x[n, g·cg + c, iy, ix]` adds `x · w[g·cg + c, o, ky, kx]` to
//! output `y[n, g·og + o, iy·sh + ky·dh − top, ix·sw + kx·dw − left]` when that position exists.
//! Each (image, group) is computed as one matrix product, `col = W_gᵀ · X_g` (rows: output
//! channel and kernel tap, columns: input pixel), whose entries are then added into the output
//! in a fixed order (tap by tap, pixel by pixel), so the result does not depend on threads.

use super::conv::{convert, padding4, pair, store_canonical};
use super::gemm::{sgemm, sgemm_serial};
use super::transform::{layout, LayoutConv};
use super::{op, Call, OpImpl, Reason};
use crate::ops::geom;
use rayon::prelude::*;

/// The geometry of one transposed convolution in canonical layouts.
#[derive(Clone, Copy, Debug)]
struct Geom {
    n: usize,
    /// Input channels (all groups).
    c: usize,
    h: usize,
    w: usize,
    /// Output channels per group.
    og: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    groups: usize,
    stride: (usize, usize),
    dilation: (usize, usize),
    /// Top and left padding (bottom, right and the output padding only bound the output).
    pad: (usize, usize),
}

pub(super) fn instantiate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let (d, wt, o) = (c.arg(0)?.clone(), c.arg(1)?.clone(), c.out()?.clone());
    c.require_float(&[d.dtype, wt.dtype, o.dtype])?;
    let data_layout = layout(c.str("data_layout")?)?;
    let kernel_layout = layout(c.str("kernel_layout")?)?;
    let out_layout = match c.str("out_layout")? {
        "" => data_layout.clone(),
        s => layout(s)?,
    };
    let nchw = layout("NCHW")?;
    let to_data = LayoutConv::new(&data_layout, &nchw, &d.dims)?;
    let to_kernel = LayoutConv::new(&kernel_layout, &layout("IOHW")?, &wt.dims)?;
    let (dd, kd) = (to_data.dims.clone(), to_kernel.dims.clone());
    let groups = usize::try_from(c.int("groups")?).unwrap_or(0);
    if groups == 0 || dd[1] % groups != 0 || kd[0] != dd[1] {
        return Err(format!(
            "`nn.conv2d_transpose` with groups={groups} does not fit data {:?} and weight {:?}",
            d.dims, wt.dims
        ));
    }
    let stride = pair(c, "strides")?;
    let dilation = pair(c, "dilation")?;
    let [pt, pl, pb, pr] = padding4(&c.ints("padding")?)?;
    let op_ = c.ints("output_padding")?;
    let out_pad = match op_.len() {
        1 => (op_[0], op_[0]),
        n if n >= 2 => (op_[0], op_[1]),
        _ => return Err("`nn.conv2d_transpose` needs output_padding".into()),
    };
    let extent = |n: usize, k: usize, p: usize, s: usize, dl: usize, op: i64| {
        let i = |x: usize| x as i64;
        geom::transposed_out(i(n), i(k), i(p), i(s), i(dl), op)
            .and_then(|e| usize::try_from(e).ok())
            .filter(|&e| e >= 1)
            .ok_or_else(|| "`nn.conv2d_transpose` has no output extent".to_string())
    };
    let g = Geom {
        n: dd[0],
        c: dd[1],
        h: dd[2],
        w: dd[3],
        og: kd[1],
        kh: kd[2],
        kw: kd[3],
        oh: extent(dd[2], kd[2], pt + pb, stride.0, dilation.0, out_pad.0)?,
        ow: extent(dd[3], kd[3], pl + pr, stride.1, dilation.1, out_pad.1)?,
        groups,
        stride,
        dilation,
        pad: (pt, pl),
    };
    if g.kh == 0 || g.kw == 0 || g.h == 0 || g.w == 0 {
        return Err("`nn.conv2d_transpose` with an empty input or window is not supported".into());
    }
    let canon_out = [g.n, g.og * g.groups, g.oh, g.ow];
    let from_out = LayoutConv::new(&nchw, &out_layout, &canon_out)?;
    if from_out.dims != o.dims {
        return Err(format!(
            "`nn.conv2d_transpose` computes {:?} but its type says {:?}",
            from_out.dims, o.dims
        ));
    }
    op(move |args, outs| {
        let data = convert(args[0], &to_data)?;
        let weight = convert(args[1], &to_kernel)?;
        let (x, w) = (data.f32_view(), weight.f32_view());
        let mut res = vec![0f32; canon_out.iter().product()];
        conv2d_transpose_nchw(&g, &x, &w, &mut res);
        store_canonical(res, &canon_out, &from_out, &mut outs[0])
    })
}

/// The transposed convolution in `NCHW`/`IOHW`; `out` (`NCHW`) starts zeroed.
fn conv2d_transpose_nchw(g: &Geom, x: &[f32], w: &[f32], out: &mut [f32]) {
    let cg = g.c / g.groups;
    let rows = g.og * g.kh * g.kw;
    let pixels = g.h * g.w;
    let plane = g.oh * g.ow;
    let per_group = g.og * plane;
    if per_group == 0 {
        return;
    }
    let group = |n: usize, grp: usize, dst: &mut [f32], parallel: bool| {
        // W_g is [cg, og·kh·kw] row-major; its transpose is read through the strides.
        let wg = &w[grp * cg * rows..(grp + 1) * cg * rows];
        let xg = &x[(n * g.c + grp * cg) * pixels..(n * g.c + (grp + 1) * cg) * pixels];
        let mut col = vec![0f32; rows * pixels];
        if parallel {
            sgemm(
                rows,
                cg,
                pixels,
                wg,
                1,
                rows as isize,
                xg,
                pixels as isize,
                1,
                &mut col,
            );
        } else {
            sgemm_serial(
                rows,
                cg,
                pixels,
                wg,
                1,
                rows as isize,
                xg,
                pixels as isize,
                1,
                &mut col,
            );
        }
        for o in 0..g.og {
            let dplane = &mut dst[o * plane..(o + 1) * plane];
            for ky in 0..g.kh {
                for kx in 0..g.kw {
                    let src = &col[((o * g.kh + ky) * g.kw + kx) * pixels..][..pixels];
                    for iy in 0..g.h {
                        let oy = (iy * g.stride.0 + ky * g.dilation.0) as isize - g.pad.0 as isize;
                        if oy < 0 || oy as usize >= g.oh {
                            continue;
                        }
                        let drow = &mut dplane[oy as usize * g.ow..][..g.ow];
                        let srow = &src[iy * g.w..(iy + 1) * g.w];
                        for (ix, &v) in srow.iter().enumerate() {
                            let ox =
                                (ix * g.stride.1 + kx * g.dilation.1) as isize - g.pad.1 as isize;
                            if ox >= 0 && (ox as usize) < g.ow {
                                drow[ox as usize] += v;
                            }
                        }
                    }
                }
            }
        }
    };
    let threads = rayon::current_num_threads();
    let units = g.n * g.groups;
    if units >= threads && threads > 1 {
        out.par_chunks_mut(per_group)
            .enumerate()
            .for_each(|(i, dst)| group(i / g.groups, i % g.groups, dst, false));
    } else {
        for (i, dst) in out.chunks_mut(per_group).enumerate() {
            group(i / g.groups, i % g.groups, dst, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one input element and kernel tap at a time, summed in `f64`.
    fn direct(g: &Geom, x: &[f32], w: &[f32]) -> Vec<f64> {
        let cg = g.c / g.groups;
        let oc = g.og * g.groups;
        let mut y = vec![0f64; g.n * oc * g.oh * g.ow];
        for n in 0..g.n {
            for ci in 0..g.c {
                let grp = ci / cg;
                for iy in 0..g.h {
                    for ix in 0..g.w {
                        let v = x[((n * g.c + ci) * g.h + iy) * g.w + ix] as f64;
                        for o in 0..g.og {
                            for ky in 0..g.kh {
                                for kx in 0..g.kw {
                                    let oy = (iy * g.stride.0 + ky * g.dilation.0) as isize
                                        - g.pad.0 as isize;
                                    let ox = (ix * g.stride.1 + kx * g.dilation.1) as isize
                                        - g.pad.1 as isize;
                                    if oy < 0
                                        || ox < 0
                                        || oy as usize >= g.oh
                                        || ox as usize >= g.ow
                                    {
                                        continue;
                                    }
                                    let k = w[((ci * g.og + o) * g.kh + ky) * g.kw + kx] as f64;
                                    let at = ((n * oc + grp * g.og + o) * g.oh + oy as usize)
                                        * g.ow
                                        + ox as usize;
                                    y[at] += v * k;
                                }
                            }
                        }
                    }
                }
            }
        }
        y
    }

    #[test]
    fn matches_the_definition() {
        let val = |i: usize, m: usize| ((i * m) % 23) as f32 / 11.0 - 1.0;
        // (groups, stride, dilation, pad top/left, pad bottom/right, output padding)
        let cases = [
            (1, (1, 1), (1, 1), (0, 0), (0, 0), (0, 0)),
            (1, (2, 2), (1, 1), (1, 1), (1, 1), (1, 1)),
            (2, (2, 3), (1, 2), (0, 1), (2, 0), (1, 0)),
            (3, (3, 1), (2, 1), (2, 0), (1, 1), (2, 0)),
        ];
        for (groups, stride, dilation, pad, pad2, outp) in cases {
            let (n, c, h, w, og, kh, kw) = (2, 6, 4, 5, 2, 3, 2);
            let ext = |i: usize, k: usize, s: usize, d: usize, p: usize, op: usize| {
                (i - 1) * s + (k - 1) * d + 1 + op - p
            };
            let g = Geom {
                n,
                c,
                h,
                w,
                og,
                kh,
                kw,
                oh: ext(h, kh, stride.0, dilation.0, pad.0 + pad2.0, outp.0),
                ow: ext(w, kw, stride.1, dilation.1, pad.1 + pad2.1, outp.1),
                groups,
                stride,
                dilation,
                pad,
            };
            let x: Vec<f32> = (0..n * c * h * w).map(|i| val(i, 7)).collect();
            let wt: Vec<f32> = (0..c * og * kh * kw).map(|i| val(i, 5)).collect();
            let mut y = vec![0f32; n * og * groups * g.oh * g.ow];
            conv2d_transpose_nchw(&g, &x, &wt, &mut y);
            let want = direct(&g, &x, &wt);
            for (i, (&a, &b)) in y.iter().zip(&want).enumerate() {
                assert!(
                    (a as f64 - b).abs() <= 1e-5,
                    "{g:?}: element {i}: {a} vs {b}"
                );
            }
        }
    }
}
