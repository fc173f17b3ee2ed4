//! Reductions: `sum`, `mean`, `max` and `min` over `axis` (all axes when `None`; the others
//! with `exclude`), with `keepdims`. Elements are visited in row-major order of the reduced
//! axes. Empty reductions give the identity: 0 for `sum`, NaN for `mean` (0 / 0), and, as TVM's
//! reducers start from the dtype's `min_value`/`max_value`, the lowest finite value for `max`
//! and the largest for `min` (so the max of `-inf`s is the lowest finite value too).

use super::{op, Call, OpImpl, Reason};
use crate::ops::Op;
use crate::runtime::exec::tensor::strides;
use rayon::prelude::*;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sum,
    Mean,
    Max,
    Min,
}

pub(super) fn instantiate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let d = c.arg(0)?.clone();
    c.require_float(&[d.dtype])?;
    let r = d.dims.len();
    let mut reduced = match c.opt_ints("axis") {
        None => vec![true; r],
        Some(axes) => {
            let mut m = vec![false; r];
            for a in axes {
                m[c.axis(a, r)?] = true;
            }
            m
        }
    };
    if c.opt_ints("axis").is_some() && c.bool("exclude")? {
        reduced.iter_mut().for_each(|x| *x = !*x);
    }
    let big = d.dtype.float_max().unwrap_or(f32::MAX);
    let kind = match c.op.op {
        Op::Sum => Kind::Sum,
        Op::Mean => Kind::Mean,
        Op::Max => Kind::Max,
        Op::Min => Kind::Min,
        _ => return Err(super::not_implemented(c)),
    };
    let st = strides(&d.dims);
    let kept: Vec<(usize, usize)> = (0..r)
        .filter(|&k| !reduced[k])
        .map(|k| (d.dims[k], st[k]))
        .collect();
    let red: Vec<(usize, usize)> = (0..r)
        .filter(|&k| reduced[k])
        .map(|k| (d.dims[k], st[k]))
        .collect();
    let count: usize = red.iter().map(|x| x.0).product();
    // The reduced axes are the trailing axes: each output reads one contiguous run.
    let trailing = (0..r).skip_while(|&k| !reduced[k]).all(|k| reduced[k]);
    op(move |args, outs| {
        let x = args[0].f32_view();
        outs[0].fill_f32(|out| {
            let one = |o: usize, dst: &mut f32| {
                // Offset of output element `o` from the kept axes.
                let mut rest = o;
                let mut base = 0;
                for &(n, s) in kept.iter().rev() {
                    base += (rest % n) * s;
                    rest /= n;
                }
                let mut acc = match kind {
                    Kind::Sum | Kind::Mean => 0f32,
                    Kind::Max => -big,
                    Kind::Min => big,
                };
                let mut add = |v: f32| match kind {
                    Kind::Sum | Kind::Mean => acc += v,
                    Kind::Max => {
                        if v > acc || v.is_nan() {
                            acc = v
                        }
                    }
                    Kind::Min => {
                        if v < acc || v.is_nan() {
                            acc = v
                        }
                    }
                };
                if trailing {
                    for &v in &x[base..base + count] {
                        add(v);
                    }
                } else {
                    let mut coord = vec![0usize; red.len()];
                    for _ in 0..count {
                        let off: usize = coord.iter().zip(&red).map(|(c, (_, s))| c * s).sum();
                        add(x[base + off]);
                        for k in (0..red.len()).rev() {
                            coord[k] += 1;
                            if coord[k] < red[k].0 {
                                break;
                            }
                            coord[k] = 0;
                        }
                    }
                }
                *dst = if kind == Kind::Mean {
                    acc / count as f32
                } else {
                    acc
                };
            };
            if out.len() * count >= super::iter::PAR_MIN && out.len() > 1 {
                out.par_iter_mut().enumerate().for_each(|(o, d)| one(o, d));
            } else {
                out.iter_mut().enumerate().for_each(|(o, d)| one(o, d));
            }
        });
        Ok(())
    })
}
