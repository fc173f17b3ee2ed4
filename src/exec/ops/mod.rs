//! The reference implementations of the operators, one file per family as in [`crate::ops`].
//!
//! [`instantiate`] checks one call (operator, attributes, argument and result types) and returns
//! an [`OpImpl`] that runs it, or says why the interpreter cannot: an operator it does not
//! implement, a dtype or an attribute value it does not support. This happens when a program is
//! lowered, before anything runs.
//!
//! Conventions shared by every implementation:
//!
//! * Shapes are static; the result shapes come from type inference and are trusted (the type
//!   relations have checked the attributes against them).
//! * Floating-point operators compute in `float32` (`float16` and `bfloat16` data is widened, and
//!   the result rounded once when stored); integer arithmetic computes in `int64` and wraps to
//!   the result's width. `float64` tensors can be moved (reshape, transpose, take, ...) but not
//!   computed on.
//! * Every reduction and dot product sums in a fixed order, so a call gives the same bits
//!   wherever it runs and however many threads the machine has. Parallel loops only split
//!   independent output elements.

mod conv;
pub mod gemm;
mod iter;
mod nn;
mod norm;
mod pool;
mod reduce;
mod slice;
mod tensor;
mod transform;

use crate::exec::kernel::RunError;
use crate::exec::tensor::{Shape, Tensor};
use crate::ir::{AttrValue, Attrs, DType};
use crate::ops::OpDef;

/// One operator call as the interpreter sees it.
pub struct Call<'a> {
    /// The operator.
    pub op: &'static OpDef,
    /// Its attributes (aligned with the operator's schema).
    pub attrs: &'a Attrs,
    /// The argument types, flattened (a tuple argument contributes its fields).
    pub args: Vec<Shape>,
    /// The result types, flattened.
    pub outs: Vec<Shape>,
}

/// Why a call cannot be run: lowercase, no trailing period.
pub type Reason = String;

impl Call<'_> {
    fn attr(&self, name: &str) -> &AttrValue {
        static NONE: AttrValue = AttrValue::None;
        self.attrs.get(self.op.attrs, name).unwrap_or(&NONE)
    }

    fn int(&self, name: &str) -> Result<i64, Reason> {
        self.attr(name).as_int().ok_or_else(|| {
            format!(
                "attribute `{name}` of `{}` must be an integer",
                self.op.name
            )
        })
    }

    fn opt_int(&self, name: &str) -> Option<i64> {
        self.attr(name).as_int()
    }

    fn ints(&self, name: &str) -> Result<Vec<i64>, Reason> {
        self.attr(name).as_ints().ok_or_else(|| {
            format!(
                "attribute `{name}` of `{}` must be an array of integers",
                self.op.name
            )
        })
    }

    fn opt_ints(&self, name: &str) -> Option<Vec<i64>> {
        self.attr(name).as_ints()
    }

    fn float(&self, name: &str) -> Result<f64, Reason> {
        self.attr(name)
            .as_f64()
            .ok_or_else(|| format!("attribute `{name}` of `{}` must be a number", self.op.name))
    }

    fn bool(&self, name: &str) -> Result<bool, Reason> {
        self.attr(name)
            .as_bool()
            .ok_or_else(|| format!("attribute `{name}` of `{}` must be a boolean", self.op.name))
    }

    fn str(&self, name: &str) -> Result<&str, Reason> {
        self.attr(name)
            .as_str()
            .ok_or_else(|| format!("attribute `{name}` of `{}` must be a string", self.op.name))
    }

    /// Argument `i`'s type.
    fn arg(&self, i: usize) -> Result<&Shape, Reason> {
        self.args
            .get(i)
            .ok_or_else(|| format!("`{}` lacks argument {i}", self.op.name))
    }

    /// The single result type.
    fn out(&self) -> Result<&Shape, Reason> {
        match self.outs.as_slice() {
            [o] => Ok(o),
            _ => Err(format!("`{}` must have one tensor result", self.op.name)),
        }
    }

    /// Normalises an axis in `[-rank, rank)`.
    fn axis(&self, axis: i64, rank: usize) -> Result<usize, Reason> {
        let r = rank as i64;
        if axis < -r || axis >= r {
            return Err(format!(
                "axis {axis} of `{}` is out of range for rank {rank}",
                self.op.name
            ));
        }
        Ok(if axis < 0 { axis + r } else { axis } as usize)
    }

    /// Requires argument `i` (and the result, when `out`) to be of the float family.
    fn require_float(&self, dtypes: &[DType]) -> Result<(), Reason> {
        for d in dtypes {
            if !crate::exec::tensor::is_f32_family(*d) {
                return Err(format!(
                    "`{}` on `{d}` tensors is not supported by the reference interpreter (it computes on float16, bfloat16 and float32)",
                    self.op.name
                ));
            }
        }
        Ok(())
    }
}

/// An operator call ready to run.
pub trait OpImpl: Send + Sync {
    /// Runs the call: `args` are the flattened arguments, `outs` the caller-allocated results.
    fn run(&self, args: &[&Tensor], outs: &mut [Tensor]) -> Result<(), RunError>;
}

/// A boxed closure as an [`OpImpl`].
struct FnOp<F>(F);

impl<F> OpImpl for FnOp<F>
where
    F: Fn(&[&Tensor], &mut [Tensor]) -> Result<(), RunError> + Send + Sync,
{
    fn run(&self, args: &[&Tensor], outs: &mut [Tensor]) -> Result<(), RunError> {
        (self.0)(args, outs)
    }
}

/// Wraps a closure as a boxed [`OpImpl`].
fn op<F>(f: F) -> Result<Box<dyn OpImpl>, Reason>
where
    F: Fn(&[&Tensor], &mut [Tensor]) -> Result<(), RunError> + Send + Sync + 'static,
{
    Ok(Box::new(FnOp(f)))
}

/// The tensor with its axes reversed (NumPy's `.T`).
pub fn transpose_reversed(t: &Tensor) -> Result<Tensor, String> {
    let dims: Vec<usize> = t.shape().iter().rev().copied().collect();
    let st: Vec<usize> = crate::exec::tensor::strides(t.shape())
        .into_iter()
        .rev()
        .collect();
    let mut out = Tensor::zeros(t.dtype(), &dims).map_err(|e| e.0)?;
    iter::strided_copy(t, 0, &st, &mut out);
    Ok(out)
}

/// The names of every operator the interpreter implements, in registry order.
pub fn supported() -> Vec<&'static str> {
    crate::ops::registry()
        .iter()
        .map(|(_, d)| d.name)
        .filter(|n| implements(n))
        .collect()
}

fn implements(name: &str) -> bool {
    tensor::implements(name)
        || nn::implements(name)
        || norm::implements(name)
        || conv::implements(name)
        || pool::implements(name)
        || transform::implements(name)
        || slice::implements(name)
        || reduce::implements(name)
}

/// Checks a call and returns its implementation.
pub fn instantiate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let name = c.op.name;
    for s in c.args.iter().chain(&c.outs) {
        if !crate::exec::tensor::storable(s.dtype) {
            return Err(format!(
                "`{name}` on `{}` tensors is not supported by the reference interpreter",
                s.dtype
            ));
        }
    }
    if tensor::implements(name) {
        tensor::instantiate(c)
    } else if nn::implements(name) {
        nn::instantiate(c)
    } else if norm::implements(name) {
        norm::instantiate(c)
    } else if conv::implements(name) {
        conv::instantiate(c)
    } else if pool::implements(name) {
        pool::instantiate(c)
    } else if transform::implements(name) {
        transform::instantiate(c)
    } else if slice::implements(name) {
        slice::instantiate(c)
    } else if reduce::implements(name) {
        reduce::instantiate(c)
    } else {
        Err(format!(
            "the reference interpreter does not implement `{name}`"
        ))
    }
}
