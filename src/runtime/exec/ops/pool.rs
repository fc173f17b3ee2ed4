//! Pooling: `nn.max_pool2d`, `nn.avg_pool2d`, `nn.global_avg_pool2d` and
//! `nn.global_max_pool2d`, in any layout whose `H` and `W` axes are not split (the spatial axes
//! are found by letter; every other axis, blocked channels included, is carried along).

use super::conv::{padding4, pair};
use super::transform::{layout, LayoutConv};
use super::{op, Call, OpImpl, Reason};
use crate::ir::DType;
use crate::ops::geom::{self, PoolReduce, PoolWindow};
use crate::runtime::exec::kernel::RunError;
use crate::runtime::exec::tensor::{strides, Tensor};

#[derive(Clone, Debug)]
struct Window {
    size: (usize, usize),
    stride: (usize, usize),
    dilation: (usize, usize),
    /// Top, left, bottom, right.
    pad: [usize; 4],
    max: bool,
    count_include_pad: bool,
    /// Where max pooling starts: the lowest finite value of the dtype.
    lowest: f32,
}

pub(super) fn instantiate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let d = c.arg(0)?.clone();
    let o = c.out()?.clone();
    c.require_float(&[d.dtype])?;
    let lay = layout(c.str("layout")?)?;
    let hpos = lay.unsplit_position('H')?;
    let wpos = lay.unsplit_position('W')?;
    if lay.rank() != d.dims.len() {
        return Err(format!(
            "layout `{}` does not fit a rank-{} input",
            lay.as_str(),
            d.dims.len()
        ));
    }
    let kind =
        c.op.op
            .pool_kind()
            .filter(|k| k.spatial == 2 && k.window != PoolWindow::Adaptive)
            .ok_or_else(|| super::not_implemented(c))?;
    let global = kind.window == PoolWindow::Global;
    let max = kind.reduce == PoolReduce::Max;
    let lowest = -d.dtype.float_max().unwrap_or(f32::MAX);
    let win = if global {
        Window {
            size: (d.dims[hpos], d.dims[wpos]),
            stride: (1, 1),
            dilation: (1, 1),
            pad: [0; 4],
            max,
            count_include_pad: false,
            lowest,
        }
    } else {
        Window {
            size: pair(c, "pool_size")?,
            stride: pair(c, "strides")?,
            dilation: pair(c, "dilation")?,
            pad: padding4(&c.ints("padding")?)?,
            max,
            count_include_pad: !max && c.bool("count_include_pad")?,
            lowest,
        }
    };
    let ceil = !global && c.bool("ceil_mode")?;
    let extent = |n: usize, k: usize, p: usize, s: usize, dl: usize| -> Result<usize, Reason> {
        geom::window_out_usize(n, k.max(1), p, s, dl, ceil)
            .ok_or_else(|| "the pooling window is larger than the padded input".to_string())
    };
    let oh = extent(
        d.dims[hpos],
        win.size.0,
        win.pad[0] + win.pad[2],
        win.stride.0,
        win.dilation.0,
    )?;
    let ow = extent(
        d.dims[wpos],
        win.size.1,
        win.pad[1] + win.pad[3],
        win.stride.1,
        win.dilation.1,
    )?;
    let mut pooled = d.dims.clone();
    pooled[hpos] = oh;
    pooled[wpos] = ow;
    let out_layout = match c.str("out_layout")? {
        "" => lay.clone(),
        s => layout(s)?,
    };
    let to_out = LayoutConv::new(&lay, &out_layout, &pooled)?;
    if to_out.dims != o.dims {
        return Err(format!(
            "`{}` computes {:?} but its type says {:?}",
            c.op.name, to_out.dims, o.dims
        ));
    }
    op(move |args, outs| {
        let x = args[0].f32_view();
        let mut res = vec![0f32; pooled.iter().product()];
        pool(&x, &d.dims, hpos, wpos, &pooled, &win, &mut res);
        if to_out.is_identity() {
            outs[0].store_f32(&res);
        } else {
            let t =
                Tensor::from_slice(DType::F32, &pooled, &res).map_err(|e| RunError::new(e.0))?;
            let mut u = Tensor::zeros(DType::F32, &to_out.dims).map_err(|e| RunError::new(e.0))?;
            to_out.apply(&t, &mut u);
            outs[0].store_f32(u.as_slice::<f32>());
        }
        Ok(())
    })
}

/// Pools `x` (shape `dims`) into `out` (shape `pooled`, same layout). Window taps outside the
/// input are skipped for max pooling, which starts from the dtype's lowest finite value (as
/// TVM pads with it: an all-padding window gives that value, not `-inf`), and count as zeros
/// for average pooling only with `count_include_pad` (then the divisor is the number of taps
/// inside the padded input; otherwise the number inside the input).
fn pool(
    x: &[f32],
    dims: &[usize],
    hpos: usize,
    wpos: usize,
    pooled: &[usize],
    win: &Window,
    out: &mut [f32],
) {
    let st = strides(dims);
    let (h, w) = (dims[hpos] as isize, dims[wpos] as isize);
    let r = dims.len();
    let mut coord = vec![0usize; r];
    for o in out.iter_mut() {
        let base: usize = (0..r)
            .filter(|&k| k != hpos && k != wpos)
            .map(|k| coord[k] * st[k])
            .sum();
        let (oy, ox) = (coord[hpos], coord[wpos]);
        let mut acc = if win.max { win.lowest } else { 0.0 };
        let mut count = 0usize;
        for i in 0..win.size.0 {
            let iy = (oy * win.stride.0 + i * win.dilation.0) as isize - win.pad[0] as isize;
            for j in 0..win.size.1 {
                let ix = (ox * win.stride.1 + j * win.dilation.1) as isize - win.pad[1] as isize;
                let inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
                if inside {
                    let v = x[base + iy as usize * st[hpos] + ix as usize * st[wpos]];
                    if win.max {
                        if v > acc || v.is_nan() {
                            acc = v;
                        }
                    } else {
                        acc += v;
                    }
                    count += 1;
                } else if win.count_include_pad
                    && iy < h + win.pad[2] as isize
                    && ix < w + win.pad[3] as isize
                {
                    count += 1;
                }
            }
        }
        *o = if win.max {
            acc
        } else if count == 0 {
            0.0
        } else {
            acc / count as f32
        };
        for k in (0..r).rev() {
            coord[k] += 1;
            if coord[k] < pooled[k] {
                break;
            }
            coord[k] = 0;
        }
    }
}
