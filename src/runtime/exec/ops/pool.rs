//! Pooling: `nn.max_pool2d`, `nn.avg_pool2d`, `nn.max_pool3d`, `nn.avg_pool3d`,
//! `nn.global_avg_pool2d` and `nn.global_max_pool2d`, in any layout whose spatial axes (`H`,
//! `W`, and `D` in 3-d) are not split (they are found by letter; every other axis, blocked
//! channels included, is carried along).

use super::transform::{layout, LayoutConv};
use super::{op, Call, OpImpl, Reason};
use crate::ir::DType;
use crate::ops::geom::{self, PoolReduce, PoolWindow};
use crate::runtime::exec::kernel::RunError;
use crate::runtime::exec::tensor::{strides, Tensor};

#[derive(Clone, Debug)]
struct Window {
    /// Per spatial axis: taps, stride, dilation, padding before and after.
    size: Vec<usize>,
    stride: Vec<usize>,
    dilation: Vec<usize>,
    before: Vec<usize>,
    after: Vec<usize>,
    max: bool,
    count_include_pad: bool,
    /// Where max pooling starts: the lowest finite value of the dtype.
    lowest: f32,
}

/// One value per spatial axis from a 1- or `n`-value attribute of positive values.
fn per_axis(c: &Call<'_>, name: &str, n: usize) -> Result<Vec<usize>, Reason> {
    geom::per_axis(&c.ints(name)?, n, true)
        .map(|v| v.into_iter().map(|x| x as usize).collect())
        .map_err(|_| {
            format!(
                "attribute `{name}` of `{}` needs 1 or {n} positive values",
                c.op.name
            )
        })
}

pub(super) fn instantiate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let d = c.arg(0)?.clone();
    let o = c.out()?.clone();
    c.require_float(&[d.dtype])?;
    let lay = layout(c.str("layout")?)?;
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
            .filter(|k| k.window != PoolWindow::Adaptive)
            .ok_or_else(|| super::not_implemented(c))?;
    let names: &[char] = if kind.spatial == 3 {
        &['D', 'H', 'W']
    } else {
        &['H', 'W']
    };
    let pos: Vec<usize> = names
        .iter()
        .map(|&n| lay.unsplit_position(n))
        .collect::<Result<_, _>>()?;
    let n = pos.len();
    let global = kind.window == PoolWindow::Global;
    let max = kind.reduce == PoolReduce::Max;
    let lowest = -d.dtype.float_max().unwrap_or(f32::MAX);
    let win = if global {
        Window {
            size: pos.iter().map(|&p| d.dims[p]).collect(),
            stride: vec![1; n],
            dilation: vec![1; n],
            before: vec![0; n],
            after: vec![0; n],
            max,
            count_include_pad: false,
            lowest,
        }
    } else {
        let (before, after) = geom::padding(&c.ints("padding")?, n).map_err(|e| match e {
            geom::AxisError::Value(x) => format!("negative padding {x}"),
            geom::AxisError::Count(k) => {
                format!("padding needs 1, {n} or {} values, found {k}", 2 * n)
            }
        })?;
        Window {
            size: per_axis(c, "pool_size", n)?,
            stride: per_axis(c, "strides", n)?,
            dilation: per_axis(c, "dilation", n)?,
            before: before.iter().map(|&x| x as usize).collect(),
            after: after.iter().map(|&x| x as usize).collect(),
            max,
            count_include_pad: !max && c.bool("count_include_pad")?,
            lowest,
        }
    };
    let ceil = !global && c.bool("ceil_mode")?;
    let mut pooled = d.dims.clone();
    for (k, &p) in pos.iter().enumerate() {
        pooled[p] = geom::window_out_usize(
            d.dims[p],
            win.size[k].max(1),
            win.before[k] + win.after[k],
            win.stride[k],
            win.dilation[k],
            ceil,
        )
        .ok_or_else(|| "the pooling window is larger than the padded input".to_string())?;
    }
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
        pool(&x, &d.dims, &pos, &pooled, &win, &mut res);
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

/// Pools `x` (shape `dims`, spatial axes at `pos`) into `out` (shape `pooled`, same layout).
/// Window taps outside the input are skipped for max pooling, which starts from the dtype's
/// lowest finite value (as TVM pads with it: an all-padding window gives that value, not
/// `-inf`), and count as zeros for average pooling only with `count_include_pad` (then the
/// divisor is the number of taps inside the padded input; otherwise the number inside the
/// input). Taps are visited in row-major order of the window.
fn pool(x: &[f32], dims: &[usize], pos: &[usize], pooled: &[usize], win: &Window, out: &mut [f32]) {
    let st = strides(dims);
    let r = dims.len();
    let n = pos.len();
    let taps: usize = win.size.iter().product();
    let mut coord = vec![0usize; r];
    let mut tap = vec![0usize; n];
    for o in out.iter_mut() {
        let base: usize = (0..r)
            .filter(|k| !pos.contains(k))
            .map(|k| coord[k] * st[k])
            .sum();
        let mut acc = if win.max { win.lowest } else { 0.0 };
        let mut count = 0usize;
        tap.fill(0);
        for _ in 0..taps {
            let mut off = base;
            let mut inside = true;
            let mut padded = true;
            for k in 0..n {
                let i = (coord[pos[k]] * win.stride[k] + tap[k] * win.dilation[k]) as isize
                    - win.before[k] as isize;
                let ext = dims[pos[k]] as isize;
                if i < 0 || i >= ext {
                    inside = false;
                    padded &= i < ext + win.after[k] as isize;
                } else {
                    off += i as usize * st[pos[k]];
                }
            }
            if inside {
                let v = x[off];
                if win.max {
                    if v > acc || v.is_nan() {
                        acc = v;
                    }
                } else {
                    acc += v;
                }
                count += 1;
            } else if win.count_include_pad && padded {
                count += 1;
            }
            for k in (0..n).rev() {
                tap[k] += 1;
                if tap[k] < win.size[k] {
                    break;
                }
                tap[k] = 0;
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
