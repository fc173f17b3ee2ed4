//! How much work an operator call does: the bytes its tensors occupy and the floating-point
//! operations (FLOPs) it performs, computed from its inferred argument and result types and its
//! attributes. The analytic (roofline) cost model builds on these numbers.
//!
//! Conventions:
//! - One multiply-add counts as 2 FLOPs, so a matrix product of `M×K` by `K×N` is `2·M·N·K`.
//! - Integer arithmetic (the `qnn.*` operators, comparisons, index arithmetic) counts the same
//!   way: the numbers are "arithmetic operations" in the roofline sense.
//! - Extents that are not static (`?` or symbolic) count as 1, so a dynamic shape gives a lower
//!   bound instead of failing. Negative extents (which type checking never produces) count as 0.
//! - Pure data movement (reshapes, transposes, slicing, concatenation, gathers, padding, tuple
//!   plumbing, device annotations) performs no arithmetic: 0 FLOPs. Its cost is in the bytes it
//!   moves, which [`tensor_bytes`] measures.
//! - Anything without types (an untyped call, a missing argument, an operator declared in a rules
//!   file whose formula is unknown) never panics: it is 0, or for unknown operators the
//!   [`UNKNOWN_FLOPS_PER_ELEMENT`] fallback.
//!
//! Every built-in operator has an explicit entry in [`OpWork::of`], a match on [`Op`] without a
//! catch-all; only operators declared in rules files reach its fallback.

use crate::ir::{AttrValue, Attrs, Callee, DType, Dim, Expr, ExprId, Module, TensorType, Type};
use crate::ops::geom::ConvKind;
use crate::ops::layout::Layout;
use crate::ops::{self, Op, OpDef};

/// Bytes per element of a dtype: `bits × lanes / 8`, rounded up to whole bytes (so `bool`, which
/// TVM stores one per byte, is 1 byte, and `int4` is 1 byte as well).
pub fn dtype_bytes(d: DType) -> f64 {
    d.bytes() as f64
}

/// The extent of one dimension as a count: static extents as they are (negative ones as 0),
/// dynamic (`?`) and symbolic extents as 1.
pub fn dim_extent(d: &Dim) -> f64 {
    match d {
        Dim::Fixed(n) => (*n).max(0) as f64,
        Dim::Any | Dim::Sym(_) => 1.0,
    }
}

/// Number of elements of a tensor type: the product of its extents (see [`dim_extent`] for
/// dynamic extents); a scalar has 1.
pub fn elements(t: &TensorType) -> f64 {
    t.shape.iter().map(dim_extent).product()
}

/// Number of elements of a type: [`elements`] for a tensor, the sum over the fields for a tuple,
/// 0 for function types and `_`.
pub fn type_elements(ty: &Type) -> f64 {
    match ty {
        Type::Tensor(t) => elements(t),
        Type::Tuple(fields) => fields.iter().map(type_elements).sum(),
        Type::Func(_) | Type::Incomplete => 0.0,
    }
}

/// Bytes a value of type `ty` occupies: `elements × dtype_bytes` for a tensor, the sum over the
/// fields for a tuple, 0 for function types and `_`. Dynamic extents count as 1 (see
/// [`dim_extent`]).
pub fn tensor_bytes(ty: &Type) -> f64 {
    match ty {
        Type::Tensor(t) => elements(t) * dtype_bytes(t.dtype),
        Type::Tuple(fields) => fields.iter().map(tensor_bytes).sum(),
        Type::Func(_) | Type::Incomplete => 0.0,
    }
}

/// FLOPs per element for plain elementwise and broadcast arithmetic (`add`, `multiply`,
/// comparisons, `where`, `cast`, `nn.relu`, `sqrt`, ...): one operation per result element.
pub const ELEMWISE_FLOPS: f64 = 1.0;

/// FLOPs per element of `exp`, `fast_exp` and `log`: a range reduction (one multiply-add) and one
/// hardware or short-polynomial evaluation.
pub const EXP_FLOPS: f64 = 2.0;

/// FLOPs per element of `power`: `exp(log(x) · y)`, so one `log`, one multiply and one `exp`.
pub const POWER_FLOPS: f64 = 2.0 * EXP_FLOPS + 1.0;

/// FLOPs per element of `sin`, `cos` and `atan`: a short polynomial after range reduction.
pub const TRIG_FLOPS: f64 = 4.0;

/// FLOPs per element of `sigmoid`: `1 / (1 + exp(-x))`, one `exp`, one add, one divide.
pub const SIGMOID_FLOPS: f64 = EXP_FLOPS + 2.0;

/// FLOPs per element of `tanh` and `fast_tanh`: `1 - 2 / (exp(2x) + 1)`, one multiply, one `exp`,
/// one add, one divide and one subtract.
pub const TANH_FLOPS: f64 = EXP_FLOPS + 4.0;

/// FLOPs per element of `erf` and `fast_erf`: a rational approximation, about three multiply-adds
/// in the numerator and in the denominator, and the final divide.
pub const ERF_FLOPS: f64 = 8.0;

/// FLOPs per element of `nn.softmax`, `nn.fast_softmax` and `nn.log_softmax`: the running
/// maximum (1), the subtraction of the maximum (1), `exp` ([`EXP_FLOPS`]), the running sum (1) and
/// the final divide (or, for `log_softmax`, subtraction of the log-sum) (1). Per-row work (one
/// `log` or reciprocal per row) is ignored.
pub const SOFTMAX_FLOPS: f64 = 4.0 + EXP_FLOPS;

/// FLOPs per element of `nn.layer_norm`, `nn.instance_norm` and `nn.group_norm` before the affine
/// part: the sum for the mean (1), the subtraction of the mean (1), the square (1), the sum for
/// the variance (1) and the multiply by the reciprocal standard deviation (1). `scale=True` adds
/// one multiply and `center=True` one add per element, so the usual total is 7. The per-group
/// `sqrt`, divide and epsilon add are ignored.
pub const NORM_FLOPS: f64 = 5.0;

/// FLOPs per element of `nn.batch_norm` (inference form, with the given moving statistics) before
/// the affine part: the subtraction of the mean (1) and the multiply by the reciprocal standard
/// deviation (1). `scale=True` adds one multiply and `center=True` one add per element, so the
/// usual total is 4. The per-channel `sqrt(var + eps)` is ignored.
pub const BATCH_NORM_FLOPS: f64 = 2.0;

/// FLOPs per element of `qnn.requantize` and `qnn.add`: scale (multiply), round or shift, add the
/// zero point and saturate, about four operations per result element.
pub const QNN_ELEMWISE_FLOPS: f64 = 4.0;

/// FLOPs per result element charged for an operator whose formula is unknown (an operator
/// declared in a rules file): the cost of one elementwise operation.
pub const UNKNOWN_FLOPS_PER_ELEMENT: f64 = ELEMWISE_FLOPS;

/// Which formula gives an operator's FLOPs. See [`op_work`] for the assignment and
/// [`call_flops`] for how each formula reads the call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OpWork {
    /// No arithmetic (data movement, annotations, constant initialisers): 0.
    Movement,
    /// The given number of FLOPs per element of the result (all fields of a tuple result).
    PerOutput(f64),
    /// A reduction: one operation per input element, plus the given number per result element
    /// (`mean` divides each result by the count: 1).
    Reduce(f64),
    /// `variance(data, mean)`: subtract, square and accumulate per input element (3), and one
    /// divide per result element.
    Variance,
    /// `nn.softmax` and relatives: [`SOFTMAX_FLOPS`] per element.
    Softmax,
    /// `nn.layer_norm`, `nn.instance_norm`, `nn.group_norm`: [`NORM_FLOPS`] per element, plus 1
    /// each for `scale` and `center`.
    Norm,
    /// `nn.batch_norm`: [`BATCH_NORM_FLOPS`] per element, plus 1 each for `scale` and `center`.
    BatchNorm,
    /// Forward convolution of `nd` spatial dimensions (also `qnn.conv2d`):
    /// `2 · out_elements · (in_channels / groups) · kernel_spatial`.
    Conv(usize),
    /// Transposed convolution of `nd` spatial dimensions:
    /// `2 · in_elements · (out_channels / groups) · kernel_spatial`.
    ConvTranspose(usize),
    /// `nn.conv2d_backward_weight`: the forward convolution's count, with the gradient as the
    /// output: `2 · grad_elements · (in_channels / groups) · kernel_spatial`.
    ConvBackwardWeight,
    /// `nn.dense` and `qnn.dense`: `2 · out_elements · K` with `K` the data's last extent.
    Dense,
    /// `nn.matmul`: `2 · out_elements · K` with `K` read from `tensor_a` per `transpose_a`.
    Matmul,
    /// `nn.batch_matmul`: `2 · B · M · N · K`, i.e. `2 · out_elements · K` with `K` read from
    /// `x` per `transpose_a`.
    BatchMatmul,
    /// Windowed pooling of `nd` spatial dimensions: `out_elements · window` compares or adds,
    /// plus one divide per result element for average pooling.
    Pool {
        /// Number of spatial dimensions.
        nd: usize,
        /// Whether it averages.
        average: bool,
    },
    /// Global and adaptive pooling: one compare or add per input element (adaptive windows are
    /// taken not to overlap), plus one divide per result element for average pooling.
    GlobalPool {
        /// Whether it averages.
        average: bool,
    },
    /// Resizing of `nd` spatial dimensions by its `method` attribute: nearest neighbour is a
    /// gather (0); (bi/tri)linear blends `2^nd` inputs with `2^nd` multiplies and `2^nd - 1` adds
    /// per result element; cubic blends `4^nd` inputs the same way.
    Resize(usize),
    /// An operator without a formula: [`UNKNOWN_FLOPS_PER_ELEMENT`] per result element.
    Unknown,
}

/// The formula for an operator by its registry name: [`OpWork::of`] for a known operator,
/// [`OpWork::Unknown`] for a name the registry does not know.
pub fn op_work(name: &str) -> OpWork {
    ops::registry()
        .lookup(name)
        .map_or(OpWork::Unknown, |id| OpWork::of(ops::op(id).op))
}

impl OpWork {
    /// The formula for an operator. Every built-in operator has an explicit entry; operators
    /// declared in rules files get [`OpWork::Unknown`].
    pub fn of(op: Op) -> OpWork {
        use OpWork::*;
        match op {
            // Data movement, layout changes, gathers, padding, tuple plumbing.
            Op::Reshape
            | Op::Transpose
            | Op::Squeeze
            | Op::ExpandDims
            | Op::LayoutTransform
            | Op::StridedSlice
            | Op::Concatenate
            | Op::Stack
            | Op::Split
            | Op::Take
            | Op::Tile
            | Op::BroadcastTo
            | Op::Pad
            | Op::BatchFlatten
            | Op::Copy => Movement,
            // Constant initialisers write memory but compute nothing.
            Op::Full | Op::Zeros | Op::Ones | Op::ZerosLike | Op::OnesLike => Movement,
            // Device annotations and transfers (a transfer's cost is its bytes).
            Op::OnDevice | Op::DeviceCopy => Movement,
            // Dropout is the identity at inference.
            Op::Dropout => Movement,
            // One operation per result element.
            Op::Add
            | Op::Subtract
            | Op::Multiply
            | Op::Divide
            | Op::Maximum
            | Op::Minimum
            | Op::Less
            | Op::Greater
            | Op::Equal
            | Op::LessEqual
            | Op::GreaterEqual
            | Op::NotEqual
            | Op::Abs
            | Op::Negative
            | Op::Floor
            | Op::Ceil
            | Op::Round
            | Op::Sqrt
            | Op::Where
            | Op::Cast
            | Op::CastLike
            | Op::Relu
            | Op::BiasAdd => PerOutput(ELEMWISE_FLOPS),
            // A compare and a select or multiply.
            Op::Clip | Op::LeakyRelu | Op::Prelu => PerOutput(2.0),
            // `sqrt` and a reciprocal.
            Op::Rsqrt => PerOutput(2.0),
            Op::Exp | Op::FastExp | Op::Log => PerOutput(EXP_FLOPS),
            Op::Power => PerOutput(POWER_FLOPS),
            Op::Sin | Op::Cos | Op::Atan => PerOutput(TRIG_FLOPS),
            Op::Sigmoid => PerOutput(SIGMOID_FLOPS),
            Op::Tanh | Op::FastTanh => PerOutput(TANH_FLOPS),
            Op::Erf | Op::FastErf => PerOutput(ERF_FLOPS),
            Op::QnnRequantize | Op::QnnAdd => PerOutput(QNN_ELEMWISE_FLOPS),
            // Reductions.
            Op::Sum | Op::Max | Op::Min | Op::Prod | Op::Argmax | Op::Argmin => Reduce(0.0),
            Op::Mean => Reduce(1.0),
            Op::Variance => Variance,
            // Normalisations and softmax.
            Op::Softmax | Op::FastSoftmax | Op::LogSoftmax => Softmax,
            Op::LayerNorm | Op::InstanceNorm | Op::GroupNorm => Norm,
            Op::BatchNorm => BatchNorm,
            // Convolutions and matrix products.
            Op::Conv1d => Conv(1),
            Op::Conv2d | Op::QnnConv2d => Conv(2),
            Op::Conv3d => Conv(3),
            Op::Conv2dTranspose => ConvTranspose(2),
            Op::Conv3dTranspose => ConvTranspose(3),
            Op::Conv2dBackwardWeight => ConvBackwardWeight,
            Op::Dense | Op::QnnDense => Dense,
            Op::Matmul => Matmul,
            Op::BatchMatmul => BatchMatmul,
            // Pooling.
            Op::MaxPool2d => Pool {
                nd: 2,
                average: false,
            },
            Op::AvgPool2d => Pool {
                nd: 2,
                average: true,
            },
            Op::MaxPool3d => Pool {
                nd: 3,
                average: false,
            },
            Op::AvgPool3d => Pool {
                nd: 3,
                average: true,
            },
            Op::GlobalMaxPool2d | Op::AdaptiveMaxPool2d => GlobalPool { average: false },
            Op::GlobalAvgPool2d | Op::AdaptiveAvgPool2d => GlobalPool { average: true },
            // Resizing.
            Op::Resize1d => Resize(1),
            Op::Resize2d | Op::Upsampling => Resize(2),
            Op::Upsampling3d => Resize(3),
            Op::Custom => Unknown,
        }
    }
}

/// The floating-point operations of one operator call, from its inferred types and attributes
/// (the module must have been type-checked). The formula is chosen by [`op_work`]:
///
/// | formula | FLOPs |
/// |---|---|
/// | movement | 0 |
/// | per output | `k × result elements` (constants above) |
/// | reduction | `input elements + k × result elements` (`k = 1` for `mean`) |
/// | variance | `3 × input elements + result elements` |
/// | softmax | [`SOFTMAX_FLOPS`] `× elements` |
/// | layer/instance/group norm | `(5 + scale + center) × elements` |
/// | batch norm | `(2 + scale + center) × elements` |
/// | convolution | `2 × out elements × weight elements / O` = `2·N·outC·outSpatial·(inC/groups)·kernelSpatial` |
/// | transposed convolution | `2 × data elements × weight elements / I` = `2·N·inC·inSpatial·(outC/groups)·kernelSpatial` |
/// | conv2d weight gradient | `2 × grad elements × result elements / O` |
/// | dense, matmul, batch_matmul | `2 × out elements × K` = `2·M·N·K` (times the batch) |
/// | windowed pooling | `out elements × window` (`+ out elements` when averaging) |
/// | global/adaptive pooling | `input elements` (`+ out elements` when averaging) |
/// | resize | nearest 0; linear `(2^(nd+1) - 1) × out`; cubic `(2·4^nd - 1) × out` |
/// | unknown | [`UNKNOWN_FLOPS_PER_ELEMENT`] `× result elements` |
///
/// `O` and `I` are the kernel's output- and input-channel extents, found by converting the
/// kernel's shape from its `kernel_layout` to the canonical layout (`OIHW` or `IOHW` and their
/// 1-D and 3-D analogues), so `NHWC`/`HWIO`, depthwise `HWOI` and blocked layouts all count the
/// same work as `NCHW`/`OIHW`. Non-calls, calls of functions (their bodies' calls are counted on
/// their own) and calls with missing types are 0.
pub fn call_flops(module: &Module, call: ExprId) -> f64 {
    let Some(Expr::Call {
        callee: Callee::Op(op),
        args,
        attrs,
    }) = module.exprs.get(call.index())
    else {
        return 0.0;
    };
    let def = ops::op(*op);
    let cx = CallCx {
        module,
        def,
        args,
        attrs,
        result: module.types.get(call.index()).and_then(Option::as_ref),
    };
    let flops = cx.flops(OpWork::of(def.op));
    if flops.is_finite() && flops > 0.0 {
        flops
    } else {
        0.0
    }
}

/// The sum of [`call_flops`] over every expression of the module's arena.
pub fn module_flops(module: &Module) -> f64 {
    (0..module.exprs.len())
        .map(|i| call_flops(module, ExprId(i as u32)))
        .sum()
}

/// One call being measured.
struct CallCx<'a> {
    module: &'a Module,
    def: &'static OpDef,
    args: &'a [ExprId],
    attrs: &'a Attrs,
    result: Option<&'a Type>,
}

impl CallCx<'_> {
    fn flops(&self, work: OpWork) -> f64 {
        match work {
            OpWork::Movement => 0.0,
            OpWork::PerOutput(k) => k * self.out_elements(),
            OpWork::Unknown => UNKNOWN_FLOPS_PER_ELEMENT * self.out_elements(),
            OpWork::Reduce(k) => self.arg_elements(0) + k * self.out_elements(),
            OpWork::Variance => 3.0 * self.arg_elements(0) + self.out_elements(),
            OpWork::Softmax => SOFTMAX_FLOPS * self.arg_elements(0),
            OpWork::Norm => (NORM_FLOPS + self.affine()) * self.arg_elements(0),
            OpWork::BatchNorm => (BATCH_NORM_FLOPS + self.affine()) * self.arg_elements(0),
            OpWork::Conv(nd) => {
                let (Some(w), Some(out)) = (self.arg(1), self.result_tensor()) else {
                    return 0.0;
                };
                let o = self.kernel_extent(w, nd, false, 'O');
                2.0 * elements(out) * per_channel(elements(w), o)
            }
            OpWork::ConvTranspose(nd) => {
                let (Some(data), Some(w)) = (self.arg(0), self.arg(1)) else {
                    return 0.0;
                };
                let i = self.kernel_extent(w, nd, true, 'I');
                2.0 * elements(data) * per_channel(elements(w), i)
            }
            OpWork::ConvBackwardWeight => {
                let (Some(grad), Some(w)) = (self.arg(0), self.result_tensor()) else {
                    return 0.0;
                };
                let o = self.kernel_extent(w, 2, false, 'O');
                2.0 * elements(grad) * per_channel(elements(w), o)
            }
            OpWork::Dense => {
                let k = self.arg(0).and_then(|d| d.shape.last()).map(dim_extent);
                self.matmul_flops(k)
            }
            OpWork::Matmul => {
                let k = self.arg(0).and_then(|a| {
                    let r = a.rank();
                    let i = if self.flag("transpose_a") {
                        r.checked_sub(2)?
                    } else {
                        r.checked_sub(1)?
                    };
                    a.shape.get(i).map(dim_extent)
                });
                self.matmul_flops(k)
            }
            OpWork::BatchMatmul => {
                let i = if self.flag("transpose_a") { 1 } else { 2 };
                let k = self.arg(0).and_then(|x| x.shape.get(i)).map(dim_extent);
                self.matmul_flops(k)
            }
            OpWork::Pool { nd, average } => {
                let window: f64 = match self.attr("pool_size").and_then(AttrValue::as_ints) {
                    Some(p) if p.len() == 1 => (p[0].max(0) as f64).powi(nd as i32),
                    Some(p) => p.iter().map(|&x| x.max(0) as f64).product(),
                    None => 1.0,
                };
                let out = self.out_elements();
                out * window + if average { out } else { 0.0 }
            }
            OpWork::GlobalPool { average } => {
                self.arg_elements(0) + if average { self.out_elements() } else { 0.0 }
            }
            OpWork::Resize(nd) => {
                let method = self
                    .attr("method")
                    .and_then(AttrValue::as_str)
                    .unwrap_or("linear");
                let per = match method {
                    "nearest_neighbor" => 0.0,
                    "cubic" | "bicubic" | "tricubic" => 2.0 * 4f64.powi(nd as i32) - 1.0,
                    _ => 2f64.powi(nd as i32 + 1) - 1.0,
                };
                per * self.out_elements()
            }
        }
    }

    /// `2 · out_elements · K`.
    fn matmul_flops(&self, k: Option<f64>) -> f64 {
        match k {
            Some(k) => 2.0 * self.out_elements() * k,
            None => 0.0,
        }
    }

    fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attrs.get(self.def.attrs, name)
    }

    fn flag(&self, name: &str) -> bool {
        self.attr(name)
            .and_then(AttrValue::as_bool)
            .unwrap_or(false)
    }

    /// 1 for each of `scale` and `center` that is set (both default to true).
    fn affine(&self) -> f64 {
        let on = |n: &str| self.attr(n).and_then(AttrValue::as_bool).unwrap_or(true);
        on("scale") as u8 as f64 + on("center") as u8 as f64
    }

    /// Argument `i`'s tensor type, if it has one.
    fn arg(&self, i: usize) -> Option<&TensorType> {
        let a = *self.args.get(i)?;
        self.module.ty(a)?.as_tensor()
    }

    /// Elements of argument `i` (all fields of a tuple), 0 when untyped.
    fn arg_elements(&self, i: usize) -> f64 {
        self.args
            .get(i)
            .and_then(|&a| self.module.ty(a))
            .map_or(0.0, type_elements)
    }

    fn result_tensor(&self) -> Option<&TensorType> {
        self.result?.as_tensor()
    }

    /// Elements of the result (all fields of a tuple), 0 when untyped.
    fn out_elements(&self) -> f64 {
        self.result.map_or(0.0, type_elements)
    }

    /// The primal extent of axis `axis` of a convolution kernel, found by converting its shape
    /// from the `kernel_layout` attribute to the canonical kernel layout of an `nd`-d
    /// (`transposed`) convolution (`OIHW`, `IOHW`, ...). Falls back to the first extent when the
    /// layout does not fit.
    fn kernel_extent(&self, w: &TensorType, nd: usize, transposed: bool, axis: char) -> f64 {
        let canon = ConvKind {
            spatial: nd.clamp(1, 3),
            transposed,
        }
        .kernel_canon();
        let converted = self
            .attr("kernel_layout")
            .and_then(AttrValue::as_str)
            .and_then(|s| Layout::parse(s).ok())
            .zip(Layout::parse(canon).ok())
            .and_then(|(from, to)| from.convert(&w.shape, &to).ok());
        let at = canon.find(axis).unwrap_or(0);
        match converted {
            Some(shape) => shape.get(at).map_or(1.0, dim_extent),
            None => w.shape.first().map_or(1.0, dim_extent),
        }
    }
}

/// `total / channels`, 0 when there are no channels.
fn per_channel(total: f64, channels: f64) -> f64 {
    if channels > 0.0 {
        total / channels
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::frontend::relay::load_text as load;

    /// The FLOPs of the one operator call in `@main(params) { body }` whose operator is `op`.
    fn flops_of(params: &str, body: &str, op: &str) -> f64 {
        let m = load(&format!(
            "#[version = \"0.0.5\"]\ndef @main({params}) {{\n  {body}\n}}\n"
        ));
        let calls: Vec<ExprId> = (0..m.exprs.len())
            .map(|i| ExprId(i as u32))
            .filter(|&e| {
                matches!(m.expr(e), Expr::Call { callee: Callee::Op(o), .. } if ops::op(*o).name == op)
            })
            .collect();
        assert_eq!(calls.len(), 1, "one `{op}` call");
        call_flops(&m, calls[0])
    }

    #[test]
    fn bytes_of_dtypes_and_types() {
        assert_eq!(dtype_bytes(DType::F32), 4.0);
        assert_eq!(dtype_bytes(DType::F16), 2.0);
        assert_eq!(dtype_bytes(DType::BOOL), 1.0);
        assert_eq!(dtype_bytes(DType::parse("int8x4").unwrap()), 4.0);
        let t = |s: &[i64], d| Type::Tensor(TensorType::new(s, d));
        assert_eq!(tensor_bytes(&t(&[2, 3], DType::F32)), 24.0);
        assert_eq!(tensor_bytes(&t(&[], DType::I64)), 8.0);
        let tuple = Type::Tuple(vec![t(&[4], DType::F16), t(&[2, 2], DType::I8)]);
        assert_eq!(tensor_bytes(&tuple), 12.0);
        let dynamic = Type::Tensor(TensorType {
            shape: vec![Dim::Any, Dim::Fixed(5)],
            dtype: DType::F32,
        });
        assert_eq!(tensor_bytes(&dynamic), 20.0, "a dynamic extent counts as 1");
        assert_eq!(tensor_bytes(&Type::Incomplete), 0.0);
    }

    #[test]
    fn conv2d_nchw() {
        // 2 · N · outC · oh · ow · inC · kh · kw = 2 · 1 · 8 · 30 · 30 · 3 · 3 · 3.
        let f = flops_of(
            "%x: Tensor[(1, 3, 32, 32), float32], %w: Tensor[(8, 3, 3, 3), float32]",
            "nn.conv2d(%x, %w, channels=8, kernel_size=[3, 3])",
            "nn.conv2d",
        );
        assert_eq!(f, 2.0 * 8.0 * 30.0 * 30.0 * 3.0 * 9.0);
    }

    #[test]
    fn conv2d_nhwc_counts_like_nchw() {
        // Same convolution with padding 1 and stride 2, in NHWC / HWIO: out 16x16.
        let f = flops_of(
            "%x: Tensor[(2, 32, 32, 3), float32], %w: Tensor[(3, 3, 3, 8), float32]",
            "nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1], channels=8, \
             kernel_size=[3, 3], data_layout=\"NHWC\", kernel_layout=\"HWIO\")",
            "nn.conv2d",
        );
        assert_eq!(f, 2.0 * 2.0 * 8.0 * 16.0 * 16.0 * 3.0 * 9.0);
        let g = flops_of(
            "%x: Tensor[(2, 3, 32, 32), float32], %w: Tensor[(8, 3, 3, 3), float32]",
            "nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1], channels=8, \
             kernel_size=[3, 3])",
            "nn.conv2d",
        );
        assert_eq!(f, g);
    }

    #[test]
    fn grouped_and_depthwise_conv() {
        // ResNeXt-style: 128 channels in 32 groups of 4.
        let f = flops_of(
            "%x: Tensor[(1, 128, 56, 56), float32], %w: Tensor[(128, 4, 3, 3), float32]",
            "nn.conv2d(%x, %w, padding=[1, 1, 1, 1], groups=32, channels=128, kernel_size=[3, 3])",
            "nn.conv2d",
        );
        assert_eq!(f, 2.0 * 128.0 * 56.0 * 56.0 * 4.0 * 9.0);
        // Depthwise NHWC with an HWOI kernel: one input channel per output channel.
        let d = flops_of(
            "%x: Tensor[(1, 56, 56, 32), float32], %w: Tensor[(3, 3, 32, 1), float32]",
            "nn.conv2d(%x, %w, padding=[1, 1, 1, 1], groups=32, channels=32, kernel_size=[3, 3], \
             data_layout=\"NHWC\", kernel_layout=\"HWOI\")",
            "nn.conv2d",
        );
        assert_eq!(d, 2.0 * 32.0 * 56.0 * 56.0 * 9.0);
    }

    #[test]
    fn conv1d_conv3d_and_transpose() {
        let f = flops_of(
            "%x: Tensor[(1, 4, 10), float32], %w: Tensor[(6, 4, 3), float32]",
            "nn.conv1d(%x, %w)",
            "nn.conv1d",
        );
        assert_eq!(f, 2.0 * 6.0 * 8.0 * 4.0 * 3.0);
        let f = flops_of(
            "%x: Tensor[(1, 2, 4, 4, 4), float32], %w: Tensor[(3, 2, 1, 1, 1), float32]",
            "nn.conv3d(%x, %w)",
            "nn.conv3d",
        );
        assert_eq!(f, 2.0 * 3.0 * 64.0 * 2.0);
        // Each of the 1·4·5·5 inputs scatters into 6 output channels over a 3x3 window.
        let f = flops_of(
            "%x: Tensor[(1, 4, 5, 5), float32], %w: Tensor[(4, 6, 3, 3), float32]",
            "nn.conv2d_transpose(%x, %w, channels=6, kernel_size=[3, 3])",
            "nn.conv2d_transpose",
        );
        assert_eq!(f, 2.0 * 4.0 * 25.0 * 6.0 * 9.0);
    }

    #[test]
    fn dense_and_matmul() {
        let f = flops_of(
            "%x: Tensor[(1600, 768), float32], %w: Tensor[(3072, 768), float32]",
            "nn.dense(%x, %w, units=3072)",
            "nn.dense",
        );
        assert_eq!(f, 2.0 * 1600.0 * 3072.0 * 768.0);
        let f = flops_of(
            "%a: Tensor[(5, 7), float32], %b: Tensor[(9, 5), float32]",
            "nn.matmul(%a, %b, units=None, transpose_a=True, transpose_b=True)",
            "nn.matmul",
        );
        assert_eq!(f, 2.0 * 7.0 * 9.0 * 5.0);
    }

    #[test]
    fn batch_matmul_with_each_transpose() {
        // B=6, M=4, N=3, K=5 in all four spellings.
        let cases = [
            ("(6, 4, 5)", "(6, 5, 3)", "False", "False"),
            ("(6, 5, 4)", "(6, 5, 3)", "True", "False"),
            ("(6, 4, 5)", "(6, 3, 5)", "False", "True"),
            ("(6, 5, 4)", "(6, 3, 5)", "True", "True"),
        ];
        for (x, y, ta, tb) in cases {
            let f = flops_of(
                &format!("%x: Tensor[{x}, float32], %y: Tensor[{y}, float32]"),
                &format!("nn.batch_matmul(%x, %y, transpose_a={ta}, transpose_b={tb})"),
                "nn.batch_matmul",
            );
            assert_eq!(f, 2.0 * 6.0 * 4.0 * 3.0 * 5.0, "{ta} {tb}");
        }
        // A batch of 1 broadcasts against 6.
        let f = flops_of(
            "%x: Tensor[(1, 4, 5), float32], %y: Tensor[(6, 3, 5), float32]",
            "nn.batch_matmul(%x, %y, transpose_b=True)",
            "nn.batch_matmul",
        );
        assert_eq!(f, 2.0 * 6.0 * 4.0 * 3.0 * 5.0);
    }

    #[test]
    fn elementwise_and_movement() {
        let f = flops_of(
            "%x: Tensor[(4, 1, 8), float32], %y: Tensor[(3, 1), float32]",
            "add(%x, %y)",
            "add",
        );
        assert_eq!(f, 4.0 * 3.0 * 8.0, "broadcast result elements");
        let f = flops_of("%x: Tensor[(4, 8), float32]", "tanh(%x)", "tanh");
        assert_eq!(f, 32.0 * TANH_FLOPS);
        for (body, op) in [
            ("reshape(%x, newshape=[8, 4])", "reshape"),
            ("transpose(%x)", "transpose"),
            ("expand_dims(%x, axis=0)", "expand_dims"),
        ] {
            assert_eq!(flops_of("%x: Tensor[(4, 8), float32]", body, op), 0.0);
        }
    }

    #[test]
    fn reductions_norms_softmax_and_pooling() {
        let x = "%x: Tensor[(2, 3, 8, 8), float32]";
        assert_eq!(
            flops_of(x, "mean(%x, axis=[-1], keepdims=True)", "mean"),
            384.0 + 48.0
        );
        assert_eq!(flops_of(x, "sum(%x)", "sum"), 384.0);
        assert_eq!(
            flops_of(x, "nn.softmax(%x)", "nn.softmax"),
            384.0 * SOFTMAX_FLOPS
        );
        let ln = flops_of(
            "%x: Tensor[(4, 16), float32], %g: Tensor[(16), float32], %b: Tensor[(16), float32]",
            "nn.layer_norm(%x, %g, %b)",
            "nn.layer_norm",
        );
        assert_eq!(ln, 64.0 * 7.0);
        let bn = flops_of(
            "%x: Tensor[(1, 3, 4, 4), float32], %a: Tensor[(3), float32], \
             %b: Tensor[(3), float32], %c: Tensor[(3), float32], %d: Tensor[(3), float32]",
            "%0 = nn.batch_norm(%x, %a, %b, %c, %d, center=False); %0.0",
            "nn.batch_norm",
        );
        assert_eq!(bn, 48.0 * 3.0);
        // 3x3 window, stride 2, padding 1: out 4x4.
        let mp = flops_of(
            x,
            "nn.max_pool2d(%x, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])",
            "nn.max_pool2d",
        );
        assert_eq!(mp, 2.0 * 3.0 * 16.0 * 9.0);
        let gp = flops_of(x, "nn.global_avg_pool2d(%x)", "nn.global_avg_pool2d");
        assert_eq!(gp, 384.0 + 6.0);
    }

    #[test]
    fn non_calls_and_untyped_calls_are_zero() {
        let mut m = load(
            "#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(4), float32]) {\n  \
             %0 = (%x, %x);\n  %1 = %0.0;\n  nn.relu(%1)\n}\n",
        );
        let relu = (0..m.exprs.len())
            .map(|i| ExprId(i as u32))
            .find(|&e| matches!(m.expr(e), Expr::Call { .. }))
            .unwrap();
        assert_eq!(call_flops(&m, relu), 4.0);
        assert_eq!(module_flops(&m), 4.0);
        for i in 0..m.exprs.len() {
            let e = ExprId(i as u32);
            if e != relu {
                assert_eq!(call_flops(&m, e), 0.0);
            }
        }
        // Without types, and with an id out of range, nothing panics.
        m.types.clear();
        assert_eq!(call_flops(&m, relu), 0.0);
        assert_eq!(call_flops(&m, ExprId(9999)), 0.0);
    }

    #[test]
    fn every_builtin_operator_has_a_formula() {
        let unknown: Vec<&str> = ops::registry()
            .iter()
            .map(|(_, d)| d.name)
            .filter(|n| op_work(n) == OpWork::Unknown)
            .collect();
        assert!(
            unknown.is_empty(),
            "built-in operators without a formula: {unknown:?}"
        );
        assert_eq!(op_work("my.custom_op"), OpWork::Unknown);
    }
}
