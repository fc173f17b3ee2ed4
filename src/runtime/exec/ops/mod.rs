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
//!   the result's width. `float64` tensors can be moved (reshape, transpose, take, ...), made
//!   (`full`, `zeros`, ...), cast and compared by `argmax`/`argmin`, but not computed on.
//! * Every reduction and dot product sums in a fixed order, so a call gives the same bits
//!   wherever it runs and however many threads the machine has. Parallel loops only split
//!   independent output elements.

mod conv;
mod deconv;
pub mod gemm;
mod iter;
mod nn;
mod norm;
mod pool;
mod reduce;
mod resize;
mod slice;
mod tensor;
mod transform;

use crate::ir::{AttrValue, Attrs, DType};
use crate::ops::{Op, OpDef};
use crate::runtime::exec::kernel::RunError;
use crate::runtime::exec::tensor::{Shape, Tensor};

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
            if !crate::runtime::exec::tensor::is_f32_family(*d) {
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
    let st: Vec<usize> = crate::runtime::exec::tensor::strides(t.shape())
        .into_iter()
        .rev()
        .collect();
    let mut out = Tensor::zeros(t.dtype(), &dims).map_err(|e| e.0)?;
    iter::strided_copy(t, 0, &st, &mut out);
    Ok(out)
}

/// Instantiates the calls of one operator.
type Instantiate = fn(&Call<'_>) -> Result<Box<dyn OpImpl>, Reason>;

/// The kernel family of each operator, or `None` for the operators the interpreter does not
/// implement (`docs/execution.md` lists them, each with its reason; a test holds the list and
/// this table to each other).
fn kernel(op: Op) -> Option<Instantiate> {
    Some(match op {
        Op::Add
        | Op::Subtract
        | Op::Multiply
        | Op::Divide
        | Op::Power
        | Op::Maximum
        | Op::Minimum
        | Op::Less
        | Op::Greater
        | Op::Equal
        | Op::LessEqual
        | Op::GreaterEqual
        | Op::NotEqual
        | Op::Sqrt
        | Op::Rsqrt
        | Op::Erf
        | Op::Exp
        | Op::Log
        | Op::Sigmoid
        | Op::Tanh
        | Op::Abs
        | Op::Negative
        | Op::Floor
        | Op::Ceil
        | Op::Round
        | Op::Sin
        | Op::Cos
        | Op::Atan
        | Op::Copy
        | Op::Clip
        | Op::Cast
        | Op::CastLike
        | Op::Where
        | Op::Full
        | Op::Zeros
        | Op::Ones
        | Op::ZerosLike
        | Op::OnesLike
        | Op::Relu => tensor::instantiate,
        Op::Dense
        | Op::Matmul
        | Op::BatchMatmul
        | Op::LeakyRelu
        | Op::Prelu
        | Op::BiasAdd
        | Op::Softmax
        | Op::LogSoftmax
        | Op::BatchFlatten
        | Op::Pad => nn::instantiate,
        Op::BatchNorm | Op::LayerNorm | Op::InstanceNorm => norm::instantiate,
        Op::Conv1d | Op::Conv2d | Op::Conv3d => conv::instantiate,
        Op::Conv2dTranspose => deconv::instantiate,
        Op::MaxPool2d
        | Op::AvgPool2d
        | Op::MaxPool3d
        | Op::AvgPool3d
        | Op::GlobalAvgPool2d
        | Op::GlobalMaxPool2d => pool::instantiate,
        Op::Reshape
        | Op::Transpose
        | Op::ExpandDims
        | Op::Squeeze
        | Op::BroadcastTo
        | Op::Tile
        | Op::LayoutTransform
        | Op::OnDevice
        | Op::DeviceCopy => transform::instantiate,
        Op::Resize2d => resize::instantiate,
        Op::Concatenate | Op::Stack | Op::Split | Op::StridedSlice | Op::Take => slice::instantiate,
        Op::Sum | Op::Max | Op::Min | Op::Mean | Op::Prod | Op::Argmax | Op::Argmin => {
            reduce::instantiate
        }
        Op::FastErf
        | Op::FastExp
        | Op::FastTanh
        | Op::FastSoftmax
        | Op::Upsampling
        | Op::Upsampling3d
        | Op::GroupNorm
        | Op::Dropout
        | Op::Conv3dTranspose
        | Op::Conv2dBackwardWeight
        | Op::AdaptiveAvgPool2d
        | Op::AdaptiveMaxPool2d
        | Op::Resize1d
        | Op::Variance
        | Op::QnnConv2d
        | Op::QnnDense
        | Op::QnnRequantize
        | Op::QnnAdd
        | Op::Custom => return None,
    })
}

/// Whether the interpreter implements an operator.
pub fn implements(op: Op) -> bool {
    kernel(op).is_some()
}

/// The names of every operator the interpreter implements, in registry order.
pub fn supported() -> Vec<&'static str> {
    crate::ops::registry()
        .iter()
        .filter(|(_, d)| implements(d.op))
        .map(|(_, d)| d.name)
        .collect()
}

/// The error for a call of an operator the interpreter does not implement.
fn not_implemented(c: &Call<'_>) -> Reason {
    format!(
        "the reference interpreter does not implement `{}`",
        c.op.name
    )
}

/// Checks a call and returns its implementation.
pub fn instantiate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let name = c.op.name;
    for s in c.args.iter().chain(&c.outs) {
        if !crate::runtime::exec::tensor::storable(s.dtype) {
            return Err(format!(
                "`{name}` on `{}` tensors is not supported by the reference interpreter",
                s.dtype
            ));
        }
    }
    match kernel(c.op.op) {
        Some(instantiate) => instantiate(c),
        None => Err(not_implemented(c)),
    }
}
