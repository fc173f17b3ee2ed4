//! Reductions: `sum`, `mean`, `max`, `min` and `prod` over `axis` (all axes when `None`; the
//! others with `exclude`), with `keepdims`, and the index reductions `argmax` and `argmin`.
//! Elements are visited in row-major order of the reduced axes. Empty reductions give the
//! identity: 0 for `sum`, 1 for `prod`, NaN for `mean` (0 / 0), and, as TVM's reducers start from
//! the dtype's `min_value`/`max_value`, the lowest finite value for `max` and the largest for
//! `min` (so the max of `-inf`s is the lowest finite value too).
//!
//! Floats reduce in `float32`; `sum`, `prod`, `max` and `min` also run on integers (in `int64`,
//! wrapping to the result's width). `argmax`/`argmin` work on every float and integer dtype
//! and on `bool`; they return the index within the reduced axes (flattened in row-major order
//! when there are several), the first of equal extremes (the last with `select_last_index`),
//! and, like NumPy, treat NaN as the extreme: the first NaN wins.

use super::{op, Call, OpImpl, Reason};
use crate::ir::{DType, DTypeCode};
use crate::ops::Op;
use crate::runtime::exec::tensor::{is_f32_family, is_i64_family, strides, Shape};
use rayon::prelude::*;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
}

/// Which elements each output reads.
struct Plan {
    /// Extent and stride of each kept axis.
    kept: Vec<(usize, usize)>,
    /// Extent and stride of each reduced axis.
    red: Vec<(usize, usize)>,
    /// Elements per output.
    count: usize,
    /// The reduced axes are the trailing axes: each output reads one contiguous run.
    trailing: bool,
}

impl Plan {
    fn new(c: &Call<'_>, d: &Shape) -> Result<Plan, Reason> {
        let r = d.dims.len();
        let axis = c.opt_ints("axis");
        let mut reduced = match &axis {
            None => vec![true; r],
            Some(axes) => {
                let mut m = vec![false; r];
                for &a in axes {
                    m[c.axis(a, r)?] = true;
                }
                m
            }
        };
        if axis.is_some() && c.bool("exclude")? {
            reduced.iter_mut().for_each(|x| *x = !*x);
        }
        let st = strides(&d.dims);
        let pick = |want: bool| -> Vec<(usize, usize)> {
            (0..r)
                .filter(|&k| reduced[k] == want)
                .map(|k| (d.dims[k], st[k]))
                .collect()
        };
        let red = pick(true);
        Ok(Plan {
            kept: pick(false),
            count: red.iter().map(|x| x.0).product(),
            red,
            trailing: (0..r).skip_while(|&k| !reduced[k]).all(|k| reduced[k]),
        })
    }

    /// The offset of output element `o`'s first input element.
    fn base(&self, o: usize) -> usize {
        let mut rest = o;
        let mut base = 0;
        for &(n, s) in self.kept.iter().rev() {
            base += (rest % n) * s;
            rest /= n;
        }
        base
    }

    /// Calls `f` with the offset of every element output `o` reads, in row-major order of the
    /// reduced axes.
    fn visit(&self, o: usize, mut f: impl FnMut(usize)) {
        let base = self.base(o);
        if self.trailing {
            (base..base + self.count).for_each(f);
            return;
        }
        let mut coord = vec![0usize; self.red.len()];
        let mut off = base;
        for _ in 0..self.count {
            f(off);
            for k in (0..self.red.len()).rev() {
                coord[k] += 1;
                off += self.red[k].1;
                if coord[k] < self.red[k].0 {
                    break;
                }
                off -= self.red[k].1 * self.red[k].0;
                coord[k] = 0;
            }
        }
    }

    /// Computes every output element with `one(index, &mut element)`, in parallel when the
    /// work is large.
    fn each<O: Send>(&self, out: &mut [O], one: impl Fn(usize, &mut O) + Sync) {
        if out.len().saturating_mul(self.count) >= super::iter::PAR_MIN && out.len() > 1 {
            out.par_iter_mut().enumerate().for_each(|(o, d)| one(o, d));
        } else {
            out.iter_mut().enumerate().for_each(|(o, d)| one(o, d));
        }
    }
}

pub(super) fn instantiate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let d = c.arg(0)?.clone();
    let plan = Plan::new(c, &d)?;
    let kind = match c.op.op {
        Op::Sum => Kind::Sum,
        Op::Mean => Kind::Mean,
        Op::Max => Kind::Max,
        Op::Min => Kind::Min,
        Op::Prod => Kind::Prod,
        Op::Argmax => return arg_reduce(c, &d, plan, true),
        Op::Argmin => return arg_reduce(c, &d, plan, false),
        _ => return Err(super::not_implemented(c)),
    };
    if is_i64_family(d.dtype) && kind != Kind::Mean {
        return int_reduce(d.dtype, plan, kind);
    }
    c.require_float(&[d.dtype])?;
    let big = d.dtype.float_max().unwrap_or(f32::MAX);
    op(move |args, outs| {
        let x = args[0].f32_view();
        outs[0].fill_f32(|out| {
            plan.each(out, |o, dst| {
                let mut acc = match kind {
                    Kind::Sum | Kind::Mean => 0f32,
                    Kind::Prod => 1f32,
                    Kind::Max => -big,
                    Kind::Min => big,
                };
                plan.visit(o, |i| {
                    let v = x[i];
                    match kind {
                        Kind::Sum | Kind::Mean => acc += v,
                        Kind::Prod => acc *= v,
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
                    }
                });
                *dst = if kind == Kind::Mean {
                    acc / plan.count as f32
                } else {
                    acc
                };
            });
        });
        Ok(())
    })
}

/// The smallest and largest values of an integer dtype.
fn int_range(d: DType) -> (i64, i64) {
    let bits = u32::from(d.bits).min(64);
    if d.code == DTypeCode::Int {
        let hi = if bits >= 64 {
            i64::MAX
        } else {
            (1i64 << (bits - 1)) - 1
        };
        (-hi - 1, hi)
    } else {
        (
            0,
            if bits >= 63 {
                i64::MAX
            } else {
                (1i64 << bits) - 1
            },
        )
    }
}

/// `sum`, `prod`, `max` and `min` on integers, in `int64`, wrapping to the result's width.
fn int_reduce(d: DType, plan: Plan, kind: Kind) -> Result<Box<dyn OpImpl>, Reason> {
    let (lo, hi) = int_range(d);
    op(move |args, outs| {
        let x = args[0].i64_view();
        outs[0].fill_i64(|out| {
            plan.each(out, |o, dst| {
                let mut acc = match kind {
                    Kind::Sum | Kind::Mean => 0i64,
                    Kind::Prod => 1,
                    Kind::Max => lo,
                    Kind::Min => hi,
                };
                plan.visit(o, |i| {
                    let v = x[i];
                    acc = match kind {
                        Kind::Sum | Kind::Mean => acc.wrapping_add(v),
                        Kind::Prod => acc.wrapping_mul(v),
                        Kind::Max => acc.max(v),
                        Kind::Min => acc.min(v),
                    }
                });
                *dst = acc;
            });
        });
        Ok(())
    })
}

/// A value `argmax`/`argmin` compares.
trait Key: Copy + PartialOrd + Send + Sync {
    fn nan(self) -> bool;
}

impl Key for f32 {
    fn nan(self) -> bool {
        self.is_nan()
    }
}

impl Key for f64 {
    fn nan(self) -> bool {
        self.is_nan()
    }
}

impl Key for i64 {
    fn nan(self) -> bool {
        false
    }
}

/// The index (within the reduced elements, in visiting order) of the extreme of output `o`.
fn arg_one<T: Key>(x: &[T], plan: &Plan, o: usize, max: bool, last: bool) -> i64 {
    let mut best: Option<T> = None;
    let mut arg = 0i64;
    let mut k = 0i64;
    plan.visit(o, |i| {
        let v = x[i];
        let take = match best {
            None => true,
            Some(b) => {
                let better = if b.nan() {
                    false
                } else if v.nan() {
                    true
                } else if max {
                    v > b
                } else {
                    v < b
                };
                let tie = (v.nan() && b.nan()) || v == b;
                better || (last && tie)
            }
        };
        if take {
            best = Some(v);
            arg = k;
        }
        k += 1;
    });
    arg
}

/// `argmax` / `argmin`.
fn arg_reduce(c: &Call<'_>, d: &Shape, plan: Plan, max: bool) -> Result<Box<dyn OpImpl>, Reason> {
    let last = c.bool("select_last_index")?;
    let out = c.out()?;
    if plan.count == 0 && out.numel() > 0 {
        return Err(format!("`{}` of an empty axis", c.op.name));
    }
    if !out.dtype.is_int() {
        return Err(format!("`{}` needs an integer result", c.op.name));
    }
    let dtype = d.dtype;
    let float64 = dtype == DType::F64;
    if !(is_f32_family(dtype) || float64 || is_i64_family(dtype) || dtype == DType::BOOL) {
        return Err(format!(
            "`{}` on `{dtype}` tensors is not supported by the reference interpreter",
            c.op.name
        ));
    }
    op(move |args, outs| {
        let a = args[0];
        outs[0].fill_i64(|out| {
            if is_f32_family(dtype) {
                let x = a.f32_view();
                plan.each(out, |o, dst| *dst = arg_one(&x, &plan, o, max, last));
            } else if float64 {
                let x = a.as_slice::<f64>();
                plan.each(out, |o, dst| *dst = arg_one(x, &plan, o, max, last));
            } else {
                let x = a.i64_view();
                plan.each(out, |o, dst| *dst = arg_one(&x, &plan, o, max, last));
            }
        });
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(dims: &[usize], red: &[usize]) -> Plan {
        let st = strides(dims);
        let pick = |want: bool| -> Vec<(usize, usize)> {
            (0..dims.len())
                .filter(|k| red.contains(k) == want)
                .map(|k| (dims[k], st[k]))
                .collect()
        };
        let r = pick(true);
        Plan {
            kept: pick(false),
            count: r.iter().map(|x| x.0).product(),
            red: r,
            trailing: false,
        }
    }

    #[test]
    fn arg_extremes_ties_and_nan() {
        let p = plan(&[6], &[0]);
        let x = [1.0f32, 3.0, 3.0, -1.0, -1.0, 0.0];
        assert_eq!(arg_one(&x, &p, 0, true, false), 1);
        assert_eq!(arg_one(&x, &p, 0, true, true), 2);
        assert_eq!(arg_one(&x, &p, 0, false, false), 3);
        assert_eq!(arg_one(&x, &p, 0, false, true), 4);
        // NaN is the extreme either way; the first NaN wins (the last with select_last_index).
        let n = [1.0f32, f32::NAN, 5.0, f32::NAN, -7.0, 0.0];
        assert_eq!(arg_one(&n, &p, 0, true, false), 1);
        assert_eq!(arg_one(&n, &p, 0, false, false), 1);
        assert_eq!(arg_one(&n, &p, 0, true, true), 3);
        let i = [3i64, -2, 9, 9, -2, 0];
        assert_eq!(arg_one(&i, &p, 0, true, false), 2);
        assert_eq!(arg_one(&i, &p, 0, false, true), 4);
    }

    #[test]
    fn arg_over_two_axes_is_a_flat_index() {
        // [2, 3, 2], reducing axes 0 and 2: output j reads x[a, j, b] in order (a, b).
        let p = plan(&[2, 3, 2], &[0, 2]);
        let x: Vec<f32> = vec![
            0.0, 1.0, 2.0, 3.0, 4.0, 5.0, //
            9.0, 0.5, -1.0, 8.0, 7.0, 6.0,
        ];
        // j = 0 reads [0, 1, 9, 0.5]: max at 2; j = 1 reads [2, 3, -1, 8]: max at 3, min at 2.
        assert_eq!(arg_one(&x, &p, 0, true, false), 2);
        assert_eq!(arg_one(&x, &p, 1, true, false), 3);
        assert_eq!(arg_one(&x, &p, 1, false, false), 2);
        assert_eq!(arg_one(&x, &p, 2, true, false), 2);
    }

    #[test]
    fn integer_ranges() {
        assert_eq!(int_range(DType::I8), (-128, 127));
        assert_eq!(int_range(DType::I64), (i64::MIN, i64::MAX));
        assert_eq!(int_range(DType::U8), (0, 255));
    }
}
