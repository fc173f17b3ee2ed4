//! The identity of every built-in operator as a value: [`Op`], one variant per operator of the
//! registry, and [`Op::Custom`] for the operators that rules files declare.
//!
//! Consumers (the interpreter, the native code generator, the oneDNN composite reader, the work
//! model, ...) match on `Op` rather than on the operator's name, so that adding a variant makes
//! the compiler list the matches that must decide what to do with it. The variants are declared
//! in registry order: `Op::X as u16` is the [`OpId`] of `X`, and the registry checks when it
//! is built that every variant has exactly one definition in the per-family tables.

use crate::ir::OpId;
use std::fmt;

macro_rules! operators {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// A built-in operator, or a custom one declared by a rules file.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Op {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
            /// An operator declared in a rules file (its name is in its definition).
            Custom,
        }

        impl Op {
            /// Every built-in operator, in registry order.
            pub const BUILTIN: &'static [Op] = &[$(Op::$variant,)*];

            /// The registry (Relay) name; `custom` for [`Op::Custom`], whose names are in
            /// their definitions.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Op::$variant => $name,)*
                    Op::Custom => "custom",
                }
            }
        }
    };
}

operators! {
    // The `tensor` table.
    Add = "add",
    Subtract = "subtract",
    Multiply = "multiply",
    Divide = "divide",
    Power = "power",
    Maximum = "maximum",
    Minimum = "minimum",
    Less = "less",
    Greater = "greater",
    Equal = "equal",
    LessEqual = "less_equal",
    GreaterEqual = "greater_equal",
    NotEqual = "not_equal",
    Sqrt = "sqrt",
    Rsqrt = "rsqrt",
    Erf = "erf",
    Exp = "exp",
    Log = "log",
    Sigmoid = "sigmoid",
    Tanh = "tanh",
    Abs = "abs",
    Negative = "negative",
    Floor = "floor",
    Ceil = "ceil",
    Round = "round",
    Sin = "sin",
    Cos = "cos",
    Atan = "atan",
    Copy = "copy",
    FastErf = "fast_erf",
    FastExp = "fast_exp",
    FastTanh = "fast_tanh",
    ZerosLike = "zeros_like",
    OnesLike = "ones_like",
    Clip = "clip",
    Cast = "cast",
    CastLike = "cast_like",
    Where = "where",
    Full = "full",
    Zeros = "zeros",
    Ones = "ones",
    // The `nn` table.
    Dense = "nn.dense",
    Matmul = "nn.matmul",
    BatchMatmul = "nn.batch_matmul",
    Relu = "nn.relu",
    LeakyRelu = "nn.leaky_relu",
    Prelu = "nn.prelu",
    BiasAdd = "nn.bias_add",
    Softmax = "nn.softmax",
    LogSoftmax = "nn.log_softmax",
    FastSoftmax = "nn.fast_softmax",
    Pad = "nn.pad",
    BatchFlatten = "nn.batch_flatten",
    Upsampling = "nn.upsampling",
    Upsampling3d = "nn.upsampling3d",
    // The `norm` table.
    BatchNorm = "nn.batch_norm",
    LayerNorm = "nn.layer_norm",
    InstanceNorm = "nn.instance_norm",
    GroupNorm = "nn.group_norm",
    Dropout = "nn.dropout",
    // The `conv` table.
    Conv1d = "nn.conv1d",
    Conv2d = "nn.conv2d",
    Conv3d = "nn.conv3d",
    // The `deconv` table.
    Conv2dTranspose = "nn.conv2d_transpose",
    Conv3dTranspose = "nn.conv3d_transpose",
    Conv2dBackwardWeight = "nn.conv2d_backward_weight",
    // The `pool` table.
    MaxPool2d = "nn.max_pool2d",
    AvgPool2d = "nn.avg_pool2d",
    MaxPool3d = "nn.max_pool3d",
    AvgPool3d = "nn.avg_pool3d",
    GlobalAvgPool2d = "nn.global_avg_pool2d",
    GlobalMaxPool2d = "nn.global_max_pool2d",
    AdaptiveAvgPool2d = "nn.adaptive_avg_pool2d",
    AdaptiveMaxPool2d = "nn.adaptive_max_pool2d",
    // The `transform` table.
    Reshape = "reshape",
    Transpose = "transpose",
    ExpandDims = "expand_dims",
    Squeeze = "squeeze",
    Tile = "tile",
    BroadcastTo = "broadcast_to",
    LayoutTransform = "layout_transform",
    Resize1d = "image.resize1d",
    Resize2d = "image.resize2d",
    // The `slice` table.
    Concatenate = "concatenate",
    Stack = "stack",
    Split = "split",
    Take = "take",
    StridedSlice = "strided_slice",
    // The `reduce` table.
    Sum = "sum",
    Max = "max",
    Min = "min",
    Prod = "prod",
    Mean = "mean",
    Variance = "variance",
    Argmax = "argmax",
    Argmin = "argmin",
    // The `misc` table.
    OnDevice = "on_device",
    DeviceCopy = "device_copy",
    QnnConv2d = "qnn.conv2d",
    QnnDense = "qnn.dense",
    QnnRequantize = "qnn.requantize",
    QnnAdd = "qnn.add",
}

impl Op {
    /// The id of a built-in operator in the registry; `None` for [`Op::Custom`] (each custom
    /// operator has an id of its own).
    pub const fn id(self) -> Option<OpId> {
        match self {
            Op::Custom => None,
            _ => Some(OpId(self as u16)),
        }
    }

    /// Whether the operator was declared in a rules file.
    pub const fn is_custom(self) -> bool {
        matches!(self, Op::Custom)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
