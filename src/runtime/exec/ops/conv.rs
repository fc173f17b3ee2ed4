//! `nn.conv1d`, `nn.conv2d` and `nn.conv3d`: any data, kernel and output layout (converted to `NCHW`/`OIHW` and back),
//! strides, dilation, padding on each side and groups. Each group is an im2col matrix times the
//! group's weights through [`super::gemm`], so every output element sums its products in the
//! same fixed order.

use super::gemm::{sgemm, sgemm_serial};
use super::transform::{layout, LayoutConv};
use super::{op, Call, OpImpl, Reason};
use crate::ir::DType;
use crate::ops::geom::{self, AxisError};
use crate::runtime::exec::kernel::RunError;
use crate::runtime::exec::tensor::Tensor;
use rayon::prelude::*;

/// The geometry of one 2-d convolution in canonical layouts.
#[derive(Clone, Copy, Debug)]
struct Geom {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    o: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    groups: usize,
    stride: (usize, usize),
    dilation: (usize, usize),
    /// Top and left padding (bottom and right only bound the output size).
    pad: (usize, usize),
}

/// `[top, left, bottom, right]` from TVM's 1-, 2- or 4-value padding.
pub(super) fn padding4(p: &[i64]) -> Result<[usize; 4], Reason> {
    let (before, after) = geom::padding(p, 2).map_err(|e| match e {
        AxisError::Value(x) => format!("negative padding {x}"),
        AxisError::Count(n) => format!("padding needs 1, 2 or 4 values, found {n}"),
    })?;
    let u = |x: i64| x as usize;
    Ok([u(before[0]), u(before[1]), u(after[0]), u(after[1])])
}

/// `[h, w]` from a 1- or 2-value attribute.
pub(super) fn pair(c: &Call<'_>, name: &str) -> Result<(usize, usize), Reason> {
    let v = c.ints(name)?;
    if v.iter().any(|&x| x <= 0) {
        return Err(format!(
            "attribute `{name}` of `{}` must hold positive values",
            c.op.name
        ));
    }
    match geom::per_axis(&v, 2, true) {
        Ok(v) => Ok((v[0] as usize, v[1] as usize)),
        Err(_) => Err(format!(
            "attribute `{name}` of `{}` needs 1 or 2 values",
            c.op.name
        )),
    }
}

/// Strides, dilation (each `(h, w)`) and `[top, left, bottom, right]` padding.
type Window = ((usize, usize), (usize, usize), [usize; 4]);

/// `strides`, `dilation` and padding as a 2-d convolution sees them: a 1-d convolution is a 2-d
/// one over a height of 1.
fn window_attrs(c: &Call<'_>, spatial: usize) -> Result<Window, Reason> {
    if spatial == 2 {
        return Ok((
            pair(c, "strides")?,
            pair(c, "dilation")?,
            padding4(&c.ints("padding")?)?,
        ));
    }
    let one = |name: &str| -> Result<usize, Reason> {
        match geom::per_axis(&c.ints(name)?, 1, true) {
            Ok(v) => Ok(v[0] as usize),
            Err(_) => Err(format!(
                "attribute `{name}` of `{}` needs 1 positive value",
                c.op.name
            )),
        }
    };
    let (before, after) = geom::padding(&c.ints("padding")?, 1).map_err(|e| match e {
        AxisError::Value(x) => format!("negative padding {x}"),
        AxisError::Count(n) => format!("padding needs 1 or 2 values, found {n}"),
    })?;
    Ok((
        (1, one("strides")?),
        (1, one("dilation")?),
        [0, before[0] as usize, 0, after[0] as usize],
    ))
}

/// `nn.conv2d` and `nn.conv1d` (run as a 2-d convolution over a height of 1).
pub(super) fn instantiate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let (d, wt, o) = (c.arg(0)?.clone(), c.arg(1)?.clone(), c.out()?.clone());
    c.require_float(&[d.dtype, wt.dtype, o.dtype])?;
    let kind =
        c.op.op
            .conv_kind()
            .filter(|k| !k.transposed)
            .ok_or_else(|| super::not_implemented(c))?;
    if kind.spatial == 3 {
        return conv3d(c);
    }
    let data_layout = layout(c.str("data_layout")?)?;
    let kernel_layout = layout(c.str("kernel_layout")?)?;
    let out_layout = match c.str("out_layout")? {
        "" => data_layout.clone(),
        s => layout(s)?,
    };
    let data_canon = layout(kind.data_canon())?;
    let kernel_canon = layout(kind.kernel_canon())?;
    let to_data = LayoutConv::new(&data_layout, &data_canon, &d.dims)?;
    let to_kernel = LayoutConv::new(&kernel_layout, &kernel_canon, &wt.dims)?;
    // Canonical 4-d extents (a 1-d convolution gets a height of 1).
    let four = |v: &[usize]| -> Vec<usize> {
        if v.len() == 3 {
            vec![v[0], v[1], 1, v[2]]
        } else {
            v.to_vec()
        }
    };
    let (dd, kd) = (four(&to_data.dims), four(&to_kernel.dims));
    let groups = usize::try_from(c.int("groups")?).unwrap_or(0);
    if groups == 0 || dd[1] % groups != 0 || kd[0] % groups != 0 || kd[1] * groups != dd[1] {
        return Err(format!(
            "`{}` with groups={groups} does not fit data {:?} and weight {:?}",
            c.op.name, d.dims, wt.dims
        ));
    }
    let (stride, dilation, [pt, pl, pb, pr]) = window_attrs(c, kind.spatial)?;
    let span = |n: usize, k: usize, p: usize, s: usize, dl: usize| -> Result<usize, Reason> {
        geom::window_out_usize(n, k, p, s, dl, false)
            .ok_or_else(|| "the convolution window is larger than the padded input".to_string())
    };
    let g = Geom {
        n: dd[0],
        c: dd[1],
        h: dd[2],
        w: dd[3],
        o: kd[0],
        kh: kd[2],
        kw: kd[3],
        oh: span(dd[2], kd[2].max(1), pt + pb, stride.0, dilation.0)?,
        ow: span(dd[3], kd[3].max(1), pl + pr, stride.1, dilation.1)?,
        groups,
        stride,
        dilation,
        pad: (pt, pl),
    };
    if g.kh == 0 || g.kw == 0 {
        return Err(format!(
            "`{}` with an empty kernel window is not supported",
            c.op.name
        ));
    }
    let canon_out = if kind.spatial == 1 {
        vec![g.n, g.o, g.ow]
    } else {
        vec![g.n, g.o, g.oh, g.ow]
    };
    let from_out = LayoutConv::new(&data_canon, &out_layout, &canon_out)?;
    if from_out.dims != o.dims {
        return Err(format!(
            "`{}` computes {:?} but its type says {:?}",
            c.op.name, from_out.dims, o.dims
        ));
    }
    op(move |args, outs| {
        let data = convert(args[0], &to_data)?;
        let weight = convert(args[1], &to_kernel)?;
        let (x, w) = (data.f32_view(), weight.f32_view());
        let mut res = vec![0f32; g.n * g.o * g.oh * g.ow];
        conv2d_nchw(&g, &x, &w, &mut res);
        store_canonical(res, &canon_out, &from_out, &mut outs[0])
    })
}

/// Stores a result computed in the canonical layout (shape `canon`) into `out`, converting it
/// to the output layout.
pub(super) fn store_canonical(
    res: Vec<f32>,
    canon: &[usize],
    from_out: &LayoutConv,
    out: &mut Tensor,
) -> Result<(), RunError> {
    if from_out.is_identity() {
        out.store_f32(&res);
    } else {
        let canon = Tensor::from_slice(DType::F32, canon, &res).map_err(|e| RunError::new(e.0))?;
        let mut t = Tensor::zeros(DType::F32, &from_out.dims).map_err(|e| RunError::new(e.0))?;
        from_out.apply(&canon, &mut t);
        out.store_f32(t.as_slice::<f32>());
    }
    Ok(())
}

/// The tensor in the canonical layout (borrowed when it already is).
pub(super) fn convert<'t>(
    t: &'t Tensor,
    conv: &LayoutConv,
) -> Result<std::borrow::Cow<'t, Tensor>, RunError> {
    if conv.is_identity() {
        return Ok(std::borrow::Cow::Borrowed(t));
    }
    let mut out = Tensor::zeros(t.dtype(), &conv.dims).map_err(|e| RunError::new(e.0))?;
    conv.apply(t, &mut out);
    Ok(std::borrow::Cow::Owned(out))
}

/// Fills the im2col matrix of image `n`, group `grp`: row `(c * kh + i) * kw + j`, column
/// `oy * ow + ox` holds the input under kernel tap `(i, j)` of output `(oy, ox)`, 0 in the
/// padding.
fn im2col(g: &Geom, x: &[f32], n: usize, grp: usize, col: &mut [f32]) {
    let cg = g.c / g.groups;
    let cols = g.oh * g.ow;
    for ci in 0..cg {
        let chan = &x[((n * g.c) + grp * cg + ci) * g.h * g.w..][..g.h * g.w];
        for i in 0..g.kh {
            for j in 0..g.kw {
                let row = &mut col[((ci * g.kh + i) * g.kw + j) * cols..][..cols];
                for oy in 0..g.oh {
                    let iy = (oy * g.stride.0 + i * g.dilation.0) as isize - g.pad.0 as isize;
                    let dst = &mut row[oy * g.ow..(oy + 1) * g.ow];
                    if iy < 0 || iy as usize >= g.h {
                        dst.fill(0.0);
                        continue;
                    }
                    let src = &chan[iy as usize * g.w..(iy as usize + 1) * g.w];
                    for (ox, d) in dst.iter_mut().enumerate() {
                        let ix = (ox * g.stride.1 + j * g.dilation.1) as isize - g.pad.1 as isize;
                        *d = if ix < 0 || ix as usize >= g.w {
                            0.0
                        } else {
                            src[ix as usize]
                        };
                    }
                }
            }
        }
    }
}

/// The convolution in `NCHW`/`OIHW`, `out` in `NCHW`.
fn conv2d_nchw(g: &Geom, x: &[f32], w: &[f32], out: &mut [f32]) {
    let cg = g.c / g.groups;
    let og = g.o / g.groups;
    let kk = cg * g.kh * g.kw;
    let cols = g.oh * g.ow;
    if cols == 0 || og == 0 {
        return;
    }
    // A 1x1 kernel with unit strides and no padding reads the input as it is.
    let direct = g.kh == 1
        && g.kw == 1
        && g.stride == (1, 1)
        && g.pad == (0, 0)
        && g.oh == g.h
        && g.ow == g.w;
    let group = |n: usize, grp: usize, dst: &mut [f32], parallel: bool| {
        let wg = &w[grp * og * kk..(grp + 1) * og * kk];
        let mut owned = Vec::new();
        let col: &[f32] = if direct {
            &x[(n * g.c + grp * cg) * cols..(n * g.c + (grp + 1) * cg) * cols]
        } else {
            owned.resize(kk * cols, 0f32);
            im2col(g, x, n, grp, &mut owned);
            &owned
        };
        if parallel {
            sgemm(og, kk, cols, wg, kk as isize, 1, col, cols as isize, 1, dst);
        } else {
            sgemm_serial(og, kk, cols, wg, kk as isize, 1, col, cols as isize, 1, dst);
        }
    };
    let per_group = og * cols;
    let threads = rayon::current_num_threads();
    if g.groups >= threads && threads > 1 {
        out.par_chunks_mut(per_group)
            .enumerate()
            .for_each(|(i, dst)| group(i / g.groups, i % g.groups, dst, false));
    } else {
        for (i, dst) in out.chunks_mut(per_group).enumerate() {
            group(i / g.groups, i % g.groups, dst, true);
        }
    }
}

/// The geometry of one 3-d convolution in `NCDHW`/`OIDHW`; spatial triples are (d, h, w).
#[derive(Clone, Debug)]
struct Geom3 {
    n: usize,
    c: usize,
    o: usize,
    groups: usize,
    input: [usize; 3],
    kernel: [usize; 3],
    output: [usize; 3],
    stride: [usize; 3],
    dilation: [usize; 3],
    /// Padding before each spatial axis.
    pad: [usize; 3],
}

/// `nn.conv3d`: each group an im2col matrix (rows: input channel and kernel tap, columns:
/// output position) times the group's weights.
fn conv3d(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let (d, wt, o) = (c.arg(0)?.clone(), c.arg(1)?.clone(), c.out()?.clone());
    let data_layout = layout(c.str("data_layout")?)?;
    let kernel_layout = layout(c.str("kernel_layout")?)?;
    let out_layout = match c.str("out_layout")? {
        "" => data_layout.clone(),
        s => layout(s)?,
    };
    let ncdhw = layout("NCDHW")?;
    let to_data = LayoutConv::new(&data_layout, &ncdhw, &d.dims)?;
    let to_kernel = LayoutConv::new(&kernel_layout, &layout("OIDHW")?, &wt.dims)?;
    let (dd, kd) = (to_data.dims.clone(), to_kernel.dims.clone());
    let groups = usize::try_from(c.int("groups")?).unwrap_or(0);
    if groups == 0 || dd[1] % groups != 0 || kd[0] % groups != 0 || kd[1] * groups != dd[1] {
        return Err(format!(
            "`nn.conv3d` with groups={groups} does not fit data {:?} and weight {:?}",
            d.dims, wt.dims
        ));
    }
    let three = |name: &str| -> Result<[usize; 3], Reason> {
        match geom::per_axis(&c.ints(name)?, 3, true) {
            Ok(v) => Ok([v[0] as usize, v[1] as usize, v[2] as usize]),
            Err(_) => Err(format!(
                "attribute `{name}` of `nn.conv3d` needs 1 or 3 positive values"
            )),
        }
    };
    let (before, after) = geom::padding(&c.ints("padding")?, 3).map_err(|e| match e {
        AxisError::Value(x) => format!("negative padding {x}"),
        AxisError::Count(n) => format!("padding needs 1, 3 or 6 values, found {n}"),
    })?;
    let (stride, dilation) = (three("strides")?, three("dilation")?);
    let mut output = [0usize; 3];
    for k in 0..3 {
        if kd[2 + k] == 0 {
            return Err("`nn.conv3d` with an empty kernel window is not supported".into());
        }
        output[k] = geom::window_out_usize(
            dd[2 + k],
            kd[2 + k],
            (before[k] + after[k]) as usize,
            stride[k],
            dilation[k],
            false,
        )
        .ok_or("the convolution window is larger than the padded input")?;
    }
    let g = Geom3 {
        n: dd[0],
        c: dd[1],
        o: kd[0],
        groups,
        input: [dd[2], dd[3], dd[4]],
        kernel: [kd[2], kd[3], kd[4]],
        output,
        stride,
        dilation,
        pad: [before[0] as usize, before[1] as usize, before[2] as usize],
    };
    let canon_out = [g.n, g.o, output[0], output[1], output[2]];
    let from_out = LayoutConv::new(&ncdhw, &out_layout, &canon_out)?;
    if from_out.dims != o.dims {
        return Err(format!(
            "`nn.conv3d` computes {:?} but its type says {:?}",
            from_out.dims, o.dims
        ));
    }
    op(move |args, outs| {
        let data = convert(args[0], &to_data)?;
        let weight = convert(args[1], &to_kernel)?;
        let (x, w) = (data.f32_view(), weight.f32_view());
        let mut res = vec![0f32; canon_out.iter().product()];
        conv3d_ncdhw(&g, &x, &w, &mut res);
        store_canonical(res, &canon_out, &from_out, &mut outs[0])
    })
}

/// The 3-d convolution in `NCDHW`/`OIDHW`, `out` in `NCDHW`.
fn conv3d_ncdhw(g: &Geom3, x: &[f32], w: &[f32], out: &mut [f32]) {
    let cg = g.c / g.groups;
    let og = g.o / g.groups;
    let taps: usize = g.kernel.iter().product();
    let kk = cg * taps;
    let cols: usize = g.output.iter().product();
    let vol: usize = g.input.iter().product();
    if cols == 0 || og == 0 {
        return;
    }
    let [_, ih, iw] = g.input;
    let [kd, kh, kw] = g.kernel;
    let [od, oh, ow] = g.output;
    // The input index along axis `k` of output position `o` and tap `t`, if inside.
    let src = |k: usize, o: usize, t: usize| -> Option<usize> {
        let i = (o * g.stride[k] + t * g.dilation[k]) as isize - g.pad[k] as isize;
        (i >= 0 && (i as usize) < g.input[k]).then_some(i as usize)
    };
    let group = |n: usize, grp: usize, dst: &mut [f32]| {
        let mut col = vec![0f32; kk * cols];
        for ci in 0..cg {
            let chan = &x[(n * g.c + grp * cg + ci) * vol..][..vol];
            for a in 0..kd {
                for b in 0..kh {
                    for e in 0..kw {
                        let row = ((ci * kd + a) * kh + b) * kw + e;
                        let dst_row = &mut col[row * cols..(row + 1) * cols];
                        let mut at = 0;
                        for zd in 0..od {
                            let sd = src(0, zd, a);
                            for zh in 0..oh {
                                let sh = src(1, zh, b);
                                for zw in 0..ow {
                                    dst_row[at] = match (sd, sh, src(2, zw, e)) {
                                        (Some(p), Some(q), Some(r)) => chan[(p * ih + q) * iw + r],
                                        _ => 0.0,
                                    };
                                    at += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        let wg = &w[grp * og * kk..(grp + 1) * og * kk];
        sgemm(
            og,
            kk,
            cols,
            wg,
            kk as isize,
            1,
            &col,
            cols as isize,
            1,
            dst,
        );
    };
    for (i, dst) in out.chunks_mut(og * cols).enumerate() {
        group(i / g.groups, i % g.groups, dst);
    }
}
