//! Device annotations (`on_device`, `device_copy`) and the quantized operators used by backend
//! pattern tables (`qnn.conv2d`, `qnn.dense`, `qnn.requantize`, `qnn.add`).
//!
//! TVM registers no `TOpPattern` for the QNN operators, so they are opaque.

use super::rel::{self, def, tensor, tensor_type};
use super::{conv, nn, Op, OpDef, OpPattern, RelCall, RelError};
use crate::ir::attrs::field;
use crate::ir::{AttrDefault as D, AttrField, AttrType as T, DType, Type};

use OpPattern::Opaque;

const ON_DEVICE_ATTRS: &[AttrField] = &[
    field("virtual_device", T::Device, D::Unconstrained),
    field("constrain_result", T::Bool, D::Bool(false)),
    field("constrain_body", T::Bool, D::Bool(true)),
];

const DEVICE_COPY_ATTRS: &[AttrField] = &[
    field("src_virtual_device", T::Device, D::Required),
    field("dst_virtual_device", T::Device, D::Required),
];

const REQUANTIZE_ATTRS: &[AttrField] = &[
    field("axis", T::Int, D::Int(-1)),
    field("rounding", T::Str, D::Str("None")),
    field("compute_dtype", T::Str, D::Str("None")),
    field("out_dtype", T::DType, D::Str("")),
];

const QNN_BINARY_ATTRS: &[AttrField] = &[
    field("lhs_axis", T::Int, D::Int(-1)),
    field("rhs_axis", T::Int, D::Int(-1)),
];

const QNN_MATMUL_ARGS: &[&str] = &[
    "data",
    "weight",
    "input_zero_point",
    "kernel_zero_point",
    "input_scale",
    "kernel_scale",
];

pub(super) const OPS: &[OpDef] = &[
    def(
        Op::OnDevice,
        &["data"],
        ON_DEVICE_ATTRS,
        Opaque,
        pass_through,
    ),
    def(
        Op::DeviceCopy,
        &["data"],
        DEVICE_COPY_ATTRS,
        Opaque,
        pass_through,
    ),
    def(
        Op::QnnConv2d,
        QNN_MATMUL_ARGS,
        conv::QNN_CONV2D_ATTRS,
        Opaque,
        qnn_conv2d,
    ),
    def(
        Op::QnnDense,
        QNN_MATMUL_ARGS,
        nn::QNN_DENSE_ATTRS,
        Opaque,
        qnn_dense,
    ),
    def(
        Op::QnnRequantize,
        &[
            "data",
            "input_scale",
            "input_zero_point",
            "output_scale",
            "output_zero_point",
        ],
        REQUANTIZE_ATTRS,
        Opaque,
        qnn_requantize,
    ),
    def(
        Op::QnnAdd,
        &[
            "lhs",
            "rhs",
            "lhs_scale",
            "lhs_zero_point",
            "rhs_scale",
            "rhs_zero_point",
            "output_scale",
            "output_zero_point",
        ],
        QNN_BINARY_ATTRS,
        Opaque,
        qnn_add,
    ),
];

/// `on_device` / `device_copy`: the result has the argument's type, whatever it is (a tensor, a
/// tuple or a function), as with TVM's identity relation.
fn pass_through(c: &RelCall<'_>) -> Result<Type, RelError> {
    match c.args.first() {
        Some(Type::Tensor(_)) => Ok(Type::Tensor(tensor(c, 0)?.clone())),
        Some(t) => Ok(t.clone()),
        None => Err(RelError::new(format!("`{}` lacks its argument", c.op.name))),
    }
}

/// Requires argument `i` to be a quantized tensor: one of `allowed`.
fn expect_one_of(c: &RelCall<'_>, i: usize, allowed: &[DType]) -> Result<(), RelError> {
    let t = tensor(c, i)?;
    if !allowed.contains(&t.dtype) {
        let names: Vec<String> = allowed.iter().map(|d| format!("`{d}`")).collect();
        return Err(RelError::at(
            i,
            format!(
                "`{}` expects argument `{}` of dtype {}, found `{t}`",
                c.op.name,
                c.arg_name(i),
                names.join(", ")
            ),
        ));
    }
    Ok(())
}

/// Requires argument `i` to be a rank-0 tensor of dtype `want`.
fn expect_scalar(c: &RelCall<'_>, i: usize, want: DType) -> Result<(), RelError> {
    let t = tensor(c, i)?;
    rel::expect_dtype(c, i, t, want)?;
    if t.rank() != 0 {
        return Err(RelError::at(
            i,
            format!(
                "`{}` expects argument `{}` to be a scalar, found `{t}`",
                c.op.name,
                c.arg_name(i)
            ),
        ));
    }
    Ok(())
}

const QUANT_INPUTS: &[DType] = &[DType::I8, DType::U8, DType::I16];

/// The four quantization parameters of `qnn.conv2d` / `qnn.dense`: the input's are scalars, the
/// kernel's may be per channel.
fn check_matmul_params(c: &RelCall<'_>) -> Result<(), RelError> {
    expect_one_of(c, 0, QUANT_INPUTS)?;
    expect_one_of(c, 1, QUANT_INPUTS)?;
    expect_scalar(c, 2, DType::I32)?;
    rel::expect_quant_param(c, 3, DType::I32)?;
    expect_scalar(c, 4, DType::F32)?;
    rel::expect_quant_param(c, 5, DType::F32)
}

fn qnn_conv2d(c: &RelCall<'_>) -> Result<Type, RelError> {
    check_matmul_params(c)?;
    conv::conv_nd(c, 2, Some(DType::I32))
}

fn qnn_dense(c: &RelCall<'_>) -> Result<Type, RelError> {
    check_matmul_params(c)?;
    nn::dense_core(c, Some(DType::I32))
}

/// `qnn.requantize`: the data's shape with `out_dtype` (default `int8`).
fn qnn_requantize(c: &RelCall<'_>) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    expect_one_of(
        c,
        0,
        &[
            DType::I8,
            DType::U8,
            DType::I16,
            DType::scalar(crate::ir::DTypeCode::UInt, 16),
            DType::I32,
        ],
    )?;
    rel::expect_quant_param(c, 1, DType::F32)?;
    rel::expect_quant_param(c, 2, DType::I32)?;
    rel::expect_quant_param(c, 3, DType::F32)?;
    rel::expect_quant_param(c, 4, DType::I32)?;
    let rounding = c.str("rounding")?;
    if !matches!(rounding, "None" | "UPWARD" | "TONEAREST") {
        return Err(RelError::new(format!(
            "attribute `rounding` of `qnn.requantize` must be \"None\", \"UPWARD\" or \"TONEAREST\", found \"{rounding}\""
        )));
    }
    let compute = c.str("compute_dtype")?;
    if !matches!(compute, "None" | "int64" | "float32" | "float64") {
        return Err(RelError::new(format!(
            "attribute `compute_dtype` of `qnn.requantize` must be \"None\", \"int64\", \"float32\" or \"float64\", found \"{compute}\""
        )));
    }
    let out = rel::dtype_or(c, "out_dtype", DType::I8)?;
    if ![DType::I8, DType::U8, DType::I16, DType::I32].contains(&out) {
        return Err(RelError::new(format!(
            "attribute `out_dtype` of `qnn.requantize` must be int8, uint8, int16 or int32, found {out}"
        )));
    }
    Ok(tensor_type(data.shape.clone(), out))
}

/// `qnn.add`: a broadcasting add of two quantized tensors of one dtype.
fn qnn_add(c: &RelCall<'_>) -> Result<Type, RelError> {
    expect_one_of(c, 0, &[DType::I8, DType::U8, DType::I16, DType::I32])?;
    let out = rel::broadcast_args(c, 0, 1)?;
    for i in (2..8).step_by(2) {
        rel::expect_quant_param(c, i, DType::F32)?;
        rel::expect_quant_param(c, i + 1, DType::I32)?;
    }
    Ok(Type::Tensor(out))
}

#[cfg(test)]
mod tests {
    use super::super::rel::testing::*;
    use crate::ir::{AttrValue, VirtualDevice};

    #[test]
    fn device_annotations() {
        let x = t(&[2, 3], "float32");
        assert_eq!(ok("on_device", vec![x.clone()], &[]), x);
        let pair = crate::ir::Type::Tuple(vec![x.clone(), t(&[], "int32")]);
        assert_eq!(ok("on_device", vec![pair.clone()], &[]), pair);
        let dev = AttrValue::Device(VirtualDevice::for_device(2, 0));
        let cpu = AttrValue::Device(VirtualDevice::for_device(1, 0));
        let got = ok(
            "device_copy",
            vec![x.clone()],
            &[("src_virtual_device", cpu), ("dst_virtual_device", dev)],
        );
        assert_eq!(got, x);
    }

    fn qparams() -> Vec<crate::ir::Type> {
        vec![
            t(&[], "int32"),
            t(&[], "int32"),
            t(&[], "float32"),
            t(&[], "float32"),
        ]
    }

    #[test]
    fn qnn_conv_and_dense() {
        let mut args = vec![t(&[1, 56, 56, 64], "uint8"), t(&[64, 3, 3, 64], "int8")];
        args.extend(qparams());
        let got = ok(
            "qnn.conv2d",
            args.clone(),
            &[
                ("padding", ints(&[1, 1])),
                ("data_layout", s("NHWC")),
                ("kernel_layout", s("OHWI")),
            ],
        );
        assert_eq!(got, t(&[1, 56, 56, 64], "int32"));
        args[5] = t(&[64], "float32");
        assert!(rel(
            "qnn.conv2d",
            args.clone(),
            &[("data_layout", s("NHWC")), ("kernel_layout", s("OHWI"))]
        )
        .is_ok());
        args[0] = t(&[1, 56, 56, 64], "float32");
        assert_eq!(err("qnn.conv2d", args, &[]).arg, Some(0));
        let mut args = vec![t(&[1, 256], "int8"), t(&[10, 256], "int8")];
        args.extend(qparams());
        assert_eq!(
            ok("qnn.dense", args.clone(), &[("units", int(10))]),
            t(&[1, 10], "int32")
        );
        args[2] = t(&[], "float32");
        assert_eq!(err("qnn.dense", args, &[]).arg, Some(2));
    }

    #[test]
    fn qnn_requantize_and_add() {
        let args = vec![
            t(&[1, 10], "int32"),
            t(&[], "float32"),
            t(&[], "int32"),
            t(&[], "float32"),
            t(&[], "int32"),
        ];
        assert_eq!(ok("qnn.requantize", args.clone(), &[]), t(&[1, 10], "int8"));
        assert_eq!(
            ok("qnn.requantize", args.clone(), &[("out_dtype", s("uint8"))]),
            t(&[1, 10], "uint8")
        );
        assert!(err(
            "qnn.requantize",
            args.clone(),
            &[("out_dtype", s("float32"))]
        )
        .message
        .contains("out_dtype"));
        assert!(err("qnn.requantize", args, &[("rounding", s("DOWN"))])
            .message
            .contains("rounding"));
        let mut args = vec![t(&[1, 8, 8, 4], "int8"), t(&[4], "int8")];
        for _ in 0..3 {
            args.push(t(&[], "float32"));
            args.push(t(&[], "int32"));
        }
        assert_eq!(ok("qnn.add", args.clone(), &[]), t(&[1, 8, 8, 4], "int8"));
        args[7] = t(&[], "float32");
        assert_eq!(err("qnn.add", args, &[]).arg, Some(7));
    }
}
