//! Elementwise and broadcasting operators: arithmetic, comparisons, unary math, `nn.relu`,
//! `clip`, `cast`, `cast_like`, `copy` and `where`, and the constant makers `full`, `zeros`,
//! `ones`, `zeros_like` and `ones_like` (any storable dtype).

use super::iter::{broadcast_strides, fill_bytes, map1, map2, map3};
use super::{op, Call, OpImpl, Reason};
use crate::ir::DType;
use crate::ops::Op;
use crate::runtime::exec::kernel::RunError;
use crate::runtime::exec::tensor::{is_f32_family, is_i64_family, Shape, Tensor};
use std::sync::atomic::{AtomicBool, Ordering};

pub(super) fn instantiate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let op = c.op.op;
    let out = c.out()?.clone();
    match op {
        Op::Sqrt
        | Op::Rsqrt
        | Op::Erf
        | Op::Exp
        | Op::Log
        | Op::Sigmoid
        | Op::Tanh
        | Op::Floor
        | Op::Ceil
        | Op::Round
        | Op::Sin
        | Op::Cos
        | Op::Atan => {
            c.require_float(&[c.arg(0)?.dtype, out.dtype])?;
            unary_float(c, op)
        }
        Op::Copy => super::op(|args, outs| {
            outs[0].bytes_mut().copy_from_slice(args[0].bytes());
            Ok(())
        }),
        Op::Abs | Op::Negative | Op::Relu => unary_any(c, op),
        Op::Add
        | Op::Subtract
        | Op::Multiply
        | Op::Divide
        | Op::Power
        | Op::Maximum
        | Op::Minimum => binary(c, op, out),
        Op::Less | Op::Greater | Op::Equal | Op::LessEqual | Op::GreaterEqual | Op::NotEqual => {
            compare(c, op, out)
        }
        Op::Clip => {
            c.require_float(&[c.arg(0)?.dtype])?;
            let lo = c.float("a_min")? as f32;
            let hi = c.float("a_max")? as f32;
            unary_f32(move |x: f32| if x.is_nan() { x } else { x.max(lo).min(hi) })
        }
        Op::Cast | Op::CastLike => cast(c.arg(0)?.dtype, out.dtype),
        Op::Zeros | Op::ZerosLike => constant(out.dtype, 0.0),
        Op::Ones | Op::OnesLike => constant(out.dtype, 1.0),
        Op::Full => full(c.arg(0)?.dtype, out.dtype),
        Op::Where => where_(c, out),
        _ => Err(super::not_implemented(c)),
    }
}

/// The unary operators computed on floats only.
fn unary_float(c: &Call<'_>, op: Op) -> Result<Box<dyn OpImpl>, Reason> {
    match op {
        Op::Sqrt => unary_f32(f32::sqrt),
        Op::Rsqrt => unary_f32(|x| 1.0 / x.sqrt()),
        Op::Erf => unary_f32(libm::erff),
        Op::Exp => unary_f32(f32::exp),
        Op::Log => unary_f32(f32::ln),
        Op::Sigmoid => unary_f32(|x| 1.0 / (1.0 + (-x).exp())),
        Op::Tanh => unary_f32(f32::tanh),
        Op::Floor => unary_f32(f32::floor),
        Op::Ceil => unary_f32(f32::ceil),
        // To the nearest integer, halves to even (NumPy's and TVM's `round`).
        Op::Round => unary_f32(f32::round_ties_even),
        Op::Sin => unary_f32(f32::sin),
        Op::Cos => unary_f32(f32::cos),
        Op::Atan => unary_f32(f32::atan),
        _ => Err(super::not_implemented(c)),
    }
}

/// `abs`, `negative` and `nn.relu`: on floats and on integers.
fn unary_any(c: &Call<'_>, op: Op) -> Result<Box<dyn OpImpl>, Reason> {
    let d = c.arg(0)?.dtype;
    if is_f32_family(d) {
        return match op {
            Op::Abs => unary_f32(f32::abs),
            Op::Negative => unary_f32(|x: f32| -x),
            _ => unary_f32(|x: f32| if x < 0.0 { 0.0 } else { x }),
        };
    }
    if is_i64_family(d) {
        return match op {
            Op::Abs => unary_i64(i64::wrapping_abs),
            Op::Negative => unary_i64(i64::wrapping_neg),
            _ => unary_i64(|x: i64| x.max(0)),
        };
    }
    Err(unsupported_dtype(c.op.name, d))
}

/// Binary arithmetic with broadcasting.
fn binary(c: &Call<'_>, op: Op, out: Shape) -> Result<Box<dyn OpImpl>, Reason> {
    let (a, b) = (c.arg(0)?.clone(), c.arg(1)?.clone());
    if is_f32_family(a.dtype) {
        return match op {
            Op::Add => binary_f32(a, b, out, |x, y| x + y),
            Op::Subtract => binary_f32(a, b, out, |x, y| x - y),
            Op::Multiply => binary_f32(a, b, out, |x, y| x * y),
            Op::Divide => binary_f32(a, b, out, |x, y| x / y),
            Op::Power => binary_f32(a, b, out, f32::powf),
            Op::Maximum => binary_f32(
                a,
                b,
                out,
                |x: f32, y: f32| if x >= y || x.is_nan() { x } else { y },
            ),
            _ => binary_f32(
                a,
                b,
                out,
                |x: f32, y: f32| if x <= y || x.is_nan() { x } else { y },
            ),
        };
    }
    if is_i64_family(a.dtype) {
        return match op {
            Op::Add => binary_i64(a, b, out, |x, y| Some(x.wrapping_add(y))),
            Op::Subtract => binary_i64(a, b, out, |x, y| Some(x.wrapping_sub(y))),
            Op::Multiply => binary_i64(a, b, out, |x, y| Some(x.wrapping_mul(y))),
            Op::Divide => binary_i64(a, b, out, |x, y| {
                if y == 0 {
                    None
                } else {
                    Some(x.wrapping_div(y))
                }
            }),
            Op::Maximum => binary_i64(a, b, out, |x, y| Some(x.max(y))),
            Op::Minimum => binary_i64(a, b, out, |x, y| Some(x.min(y))),
            _ => Err(format!(
                "`power` on integer tensors (`{}`) is not supported by the reference interpreter",
                a.dtype
            )),
        };
    }
    Err(unsupported_dtype(c.op.name, a.dtype))
}

/// Comparisons with broadcasting.
fn compare(c: &Call<'_>, op: Op, out: Shape) -> Result<Box<dyn OpImpl>, Reason> {
    let (a, b) = (c.arg(0)?.clone(), c.arg(1)?.clone());
    if is_f32_family(a.dtype) {
        return match op {
            Op::Less => compare_f32(a, b, out, |x, y| x < y),
            Op::Greater => compare_f32(a, b, out, |x, y| x > y),
            Op::Equal => compare_f32(a, b, out, |x, y| x == y),
            Op::LessEqual => compare_f32(a, b, out, |x, y| x <= y),
            Op::GreaterEqual => compare_f32(a, b, out, |x, y| x >= y),
            _ => compare_f32(a, b, out, |x, y| x != y),
        };
    }
    if is_i64_family(a.dtype) || a.dtype == DType::BOOL {
        return match op {
            Op::Less => compare_i64(a, b, out, |x, y| x < y),
            Op::Greater => compare_i64(a, b, out, |x, y| x > y),
            Op::Equal => compare_i64(a, b, out, |x, y| x == y),
            Op::LessEqual => compare_i64(a, b, out, |x, y| x <= y),
            Op::GreaterEqual => compare_i64(a, b, out, |x, y| x >= y),
            _ => compare_i64(a, b, out, |x, y| x != y),
        };
    }
    Err(unsupported_dtype(c.op.name, a.dtype))
}

fn unsupported_dtype(name: &str, d: DType) -> Reason {
    format!("`{name}` on `{d}` tensors is not supported by the reference interpreter")
}

pub(super) fn unary_f32<F: Fn(f32) -> f32 + Send + Sync + 'static>(
    f: F,
) -> Result<Box<dyn OpImpl>, Reason> {
    op(move |args, outs| {
        let a = args[0].f32_view();
        outs[0].fill_f32(|o| map1(&a, o, &f));
        Ok(())
    })
}

fn unary_i64<F: Fn(i64) -> i64 + Send + Sync + 'static>(f: F) -> Result<Box<dyn OpImpl>, Reason> {
    op(move |args, outs| {
        let a = args[0].i64_view();
        outs[0].fill_i64(|o| map1(&a, o, &f));
        Ok(())
    })
}

fn binary_f32<F: Fn(f32, f32) -> f32 + Send + Sync + 'static>(
    a: Shape,
    b: Shape,
    out: Shape,
    f: F,
) -> Result<Box<dyn OpImpl>, Reason> {
    let sa = broadcast_strides(&a.dims, &out.dims);
    let sb = broadcast_strides(&b.dims, &out.dims);
    op(move |args, outs| {
        let (x, y) = (args[0].f32_view(), args[1].f32_view());
        outs[0].fill_f32(|o| map2(&x, &sa, &y, &sb, o, &out.dims, &f));
        Ok(())
    })
}

fn binary_i64<F: Fn(i64, i64) -> Option<i64> + Send + Sync + 'static>(
    a: Shape,
    b: Shape,
    out: Shape,
    f: F,
) -> Result<Box<dyn OpImpl>, Reason> {
    let sa = broadcast_strides(&a.dims, &out.dims);
    let sb = broadcast_strides(&b.dims, &out.dims);
    op(move |args, outs| {
        let (x, y) = (args[0].i64_view(), args[1].i64_view());
        let failed = AtomicBool::new(false);
        outs[0].fill_i64(|o| {
            map2(&x, &sa, &y, &sb, o, &out.dims, |p, q| {
                f(p, q).unwrap_or_else(|| {
                    failed.store(true, Ordering::Relaxed);
                    0
                })
            })
        });
        if failed.load(Ordering::Relaxed) {
            return Err(RunError::new("integer division by zero"));
        }
        Ok(())
    })
}

fn compare_f32<F: Fn(f32, f32) -> bool + Send + Sync + 'static>(
    a: Shape,
    b: Shape,
    out: Shape,
    f: F,
) -> Result<Box<dyn OpImpl>, Reason> {
    let sa = broadcast_strides(&a.dims, &out.dims);
    let sb = broadcast_strides(&b.dims, &out.dims);
    op(move |args, outs| {
        let (x, y) = (args[0].f32_view(), args[1].f32_view());
        let o = outs[0].as_mut_slice::<u8>();
        map2(&x, &sa, &y, &sb, o, &out.dims, |p, q| f(p, q) as u8);
        Ok(())
    })
}

fn compare_i64<F: Fn(i64, i64) -> bool + Send + Sync + 'static>(
    a: Shape,
    b: Shape,
    out: Shape,
    f: F,
) -> Result<Box<dyn OpImpl>, Reason> {
    let sa = broadcast_strides(&a.dims, &out.dims);
    let sb = broadcast_strides(&b.dims, &out.dims);
    op(move |args, outs| {
        let (x, y) = (args[0].i64_view(), args[1].i64_view());
        let o = outs[0].as_mut_slice::<u8>();
        map2(&x, &sa, &y, &sb, o, &out.dims, |p, q| f(p, q) as u8);
        Ok(())
    })
}

/// `cast`: floats to integers truncate toward zero (NaN becomes 0, out-of-range values
/// saturate); integers wrap; anything to `bool` is `!= 0`.
fn cast(from: DType, to: DType) -> Result<Box<dyn OpImpl>, Reason> {
    if from == to {
        return op(|args, outs| {
            outs[0].bytes_mut().copy_from_slice(args[0].bytes());
            Ok(())
        });
    }
    if is_f32_family(from) && is_f32_family(to) {
        return op(|args, outs| {
            let a = args[0].f32_view();
            outs[0].store_f32(&a);
            Ok(())
        });
    }
    let int_like = |d: DType| is_i64_family(d) || d == DType::BOOL;
    if int_like(from) && int_like(to) {
        return op(|args, outs| {
            let a = args[0].i64_view();
            outs[0].fill_i64(|o| o.copy_from_slice(&a));
            Ok(())
        });
    }
    op(|args, outs| {
        let a = args[0];
        let o = &mut outs[0];
        for i in 0..a.numel() {
            let v = a.get_f64(i);
            if o.dtype().is_float() {
                o.set_from_f64(i, v);
            } else if o.dtype() == DType::BOOL {
                o.set_from_i64(i, (v != 0.0) as i64);
            } else {
                // `as` saturates and maps NaN to 0.
                o.set_from_i64(i, v as i64);
            }
        }
        Ok(())
    })
}

/// `zeros`, `ones`, `zeros_like`, `ones_like`: every element `value`.
fn constant(to: DType, value: f64) -> Result<Box<dyn OpImpl>, Reason> {
    let mut one = Tensor::zeros(to, &[]).map_err(|e| e.0)?;
    one.set_from_f64(0, value);
    let bytes = one.bytes().to_vec();
    op(move |_, outs| {
        fill_bytes(&mut outs[0], &bytes);
        Ok(())
    })
}

/// `full(fill_value)`: the scalar converted to the result dtype as `cast` converts, then
/// repeated.
fn full(from: DType, to: DType) -> Result<Box<dyn OpImpl>, Reason> {
    let conv = cast(from, to)?;
    op(move |args, outs| {
        let mut one = Tensor::zeros(to, &[]).map_err(|e| RunError::new(e.0))?;
        conv.run(&args[..1], std::slice::from_mut(&mut one))?;
        fill_bytes(&mut outs[0], one.bytes());
        Ok(())
    })
}

/// `where(condition, x, y)`: any condition dtype (non-zero is true; `-0.0` is false), `x` and `y`
/// of any dtype, all three broadcast together.
fn where_(c: &Call<'_>, out: Shape) -> Result<Box<dyn OpImpl>, Reason> {
    let (cd, x, y) = (c.arg(0)?.clone(), c.arg(1)?.clone(), c.arg(2)?.clone());
    let sc = broadcast_strides(&cd.dims, &out.dims);
    let sx = broadcast_strides(&x.dims, &out.dims);
    let sy = broadcast_strides(&y.dims, &out.dims);
    op(move |args, outs| {
        let cond: Vec<u8> = if args[0].dtype().is_float() {
            args[0]
                .f32_view()
                .iter()
                .map(|&v| (v != 0.0) as u8)
                .collect()
        } else {
            args[0].i64_view().iter().map(|&v| (v != 0) as u8).collect()
        };
        let es = outs[0].elem_size();
        let (xb, yb) = (args[1].bytes(), args[2].bytes());
        let ob = outs[0].bytes_mut();
        macro_rules! select {
            ($t:ty) => {{
                let xs: &[$t] = bytemuck::cast_slice(xb);
                let ys: &[$t] = bytemuck::cast_slice(yb);
                let os: &mut [$t] = bytemuck::cast_slice_mut(ob);
                map3(
                    (&cond, &sc),
                    (xs, &sx),
                    (ys, &sy),
                    os,
                    &out.dims,
                    |k, p, q| if k != 0 { p } else { q },
                );
            }};
        }
        match es {
            1 => select!(u8),
            2 => select!(u16),
            4 => select!(u32),
            _ => select!(u64),
        }
        Ok(())
    })
}
