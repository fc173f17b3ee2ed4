//! Transposed convolutions (`nn.conv2d_transpose`, `nn.conv3d_transpose`) and the weight
//! gradient `nn.conv2d_backward_weight`, built on the layout helpers of the `conv` module.

use super::conv::{
    canon_layout, check_channels, check_kernel_size, from_canon, groups, out_layout, to_canon,
    ARGS, CONV2D_ATTRS,
};
use super::geom::{self, DATA_CANON, KERNEL_T_CANON};
use super::rel::{self, def, dims_agree, tensor, tensor_type};
use super::{Op, OpDef, OpPattern, RelCall, RelError};
use crate::ir::attrs::field;
use crate::ir::{AttrDefault as D, AttrField, AttrType as T, Dim, Type};

use OpPattern::OutEWiseFusable;

const CONV2D_T_ATTRS: &[AttrField] = &[
    field("channels", T::OptInt, D::None),
    field("kernel_size", T::OptInts, D::None),
    field("strides", T::Ints, D::Ints(&[1, 1])),
    field("output_padding", T::Ints, D::Ints(&[0, 0])),
    field("padding", T::Ints, D::Ints(&[0, 0])),
    field("dilation", T::Ints, D::Ints(&[1, 1])),
    field("groups", T::Int, D::Int(1)),
    field("data_layout", T::Str, D::Str("NCHW")),
    field("kernel_layout", T::Str, D::Str("IOHW")),
    field("out_layout", T::Str, D::Str("")),
    field("out_dtype", T::DType, D::Str("")),
];

const CONV3D_T_ATTRS: &[AttrField] = &[
    field("channels", T::OptInt, D::None),
    field("kernel_size", T::OptInts, D::None),
    field("strides", T::Ints, D::Ints(&[1, 1, 1])),
    field("output_padding", T::Ints, D::Ints(&[0, 0, 0])),
    field("padding", T::Ints, D::Ints(&[0, 0, 0])),
    field("dilation", T::Ints, D::Ints(&[1, 1, 1])),
    field("groups", T::Int, D::Int(1)),
    field("data_layout", T::Str, D::Str("NCDHW")),
    field("kernel_layout", T::Str, D::Str("IODHW")),
    field("out_layout", T::Str, D::Str("")),
    field("out_dtype", T::DType, D::Str("")),
];

pub(super) const OPS: &[OpDef] = &[
    def(
        Op::Conv2dTranspose,
        ARGS,
        CONV2D_T_ATTRS,
        OutEWiseFusable,
        conv2d_transpose,
    ),
    def(
        Op::Conv3dTranspose,
        ARGS,
        CONV3D_T_ATTRS,
        OutEWiseFusable,
        conv3d_transpose,
    ),
    def(
        Op::Conv2dBackwardWeight,
        &["grad", "data"],
        CONV2D_ATTRS,
        OutEWiseFusable,
        conv2d_backward_weight,
    ),
];

fn conv2d_transpose(c: &RelCall<'_>) -> Result<Type, RelError> {
    conv_transpose_nd(c, 2)
}

fn conv3d_transpose(c: &RelCall<'_>) -> Result<Type, RelError> {
    conv_transpose_nd(c, 3)
}

/// `output_padding`: 1 value for every axis, or one per axis (extra trailing values are ignored,
/// as TVM reads only the first `nd`).
fn output_padding(c: &RelCall<'_>, nd: usize) -> Result<Vec<i64>, RelError> {
    let v = rel::ints_attr(c, "output_padding")?;
    let v = match v.len() {
        1 => vec![v[0]; nd],
        n if n >= nd => v[..nd].to_vec(),
        n => {
            return Err(RelError::new(format!(
                "attribute `output_padding` of `{}` needs {nd} values, found {n}",
                c.op.name
            )))
        }
    };
    if let Some(bad) = v.iter().find(|&&x| x < 0) {
        return Err(RelError::new(format!(
            "attribute `output_padding` of `{}` must not be negative, found {bad}",
            c.op.name
        )));
    }
    Ok(v)
}

/// The transposed convolution relation: the weight is `IOHW` canonically, with `I` the full
/// input channel count and `O` the output channels per group.
fn conv_transpose_nd(c: &RelCall<'_>, nd: usize) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let weight = tensor(c, 1)?;
    let data_layout = rel::layout_attr(c, "data_layout")?;
    let kernel_layout = rel::layout_attr(c, "kernel_layout")?;
    let d = to_canon(c, 0, data, &data_layout, DATA_CANON[nd - 1])?;
    let w = to_canon(c, 1, weight, &kernel_layout, KERNEL_T_CANON[nd - 1])?;
    let strides = rel::spatial_ints(c, "strides", nd)?;
    let dilation = rel::spatial_ints(c, "dilation", nd)?;
    let pads = rel::padding_totals(c, "padding", nd)?;
    let out_pads = output_padding(c, nd)?;
    let groups = groups(c)?;
    let (in_ch, per_group, window) = (&w[0], &w[1], &w[2..]);
    check_kernel_size(c, 1, weight, window)?;
    if !dims_agree(&d[1], in_ch) {
        return Err(RelError::at(
            1,
            format!(
                "`{}` weight `{weight}` takes {in_ch} input channels, but data `{data}` has {}",
                c.op.name, d[1]
            ),
        ));
    }
    let out_ch = rel::mul_dims(c, per_group, &Dim::Fixed(groups))?;
    check_channels(c, 1, weight, &out_ch, "output channels")?;
    let mut oshape = vec![d[0].clone(), out_ch];
    for k in 0..nd {
        let extent = match (d[2 + k].fixed(), window[k].fixed()) {
            (Some(n), Some(kw)) if n >= 1 && kw >= 1 => {
                let e = geom::transposed_out(n, kw, pads[k], strides[k], dilation[k], out_pads[k])
                    .ok_or_else(|| rel::overflow(c))?;
                if e < 1 {
                    return Err(RelError::new(format!(
                        "`{}` would produce the extent {e} on spatial axis {k}; the padding is too large",
                        c.op.name
                    )));
                }
                Dim::Fixed(e)
            }
            (Some(_), Some(_)) => {
                return Err(RelError::new(format!(
                    "`{}` needs non-empty input and window extents on spatial axis {k}",
                    c.op.name
                )))
            }
            _ => Dim::Any,
        };
        oshape.push(extent);
    }
    let out = from_canon(c, &oshape, DATA_CANON[nd - 1], &out_layout(c)?)?;
    let dtype = rel::dtype_or(c, "out_dtype", data.dtype)?;
    Ok(tensor_type(out, dtype))
}

/// `nn.conv2d_backward_weight(grad, data)`: the weight gradient. As in TVM, the attribute
/// `data_layout` holds the layout of `grad`, `kernel_layout` the layout of `data`, and
/// `out_layout` the layout of the resulting weight. `kernel_size` is required.
fn conv2d_backward_weight(c: &RelCall<'_>) -> Result<Type, RelError> {
    let grad = tensor(c, 0)?;
    let data = tensor(c, 1)?;
    let grad_layout = rel::layout_attr(c, "data_layout")?;
    // `OIHW` is the Conv2DAttrs default, i.e. the data layout was left unset: use `NCHW`.
    let data_layout = match c.str("kernel_layout")? {
        "OIHW" => canon_layout("NCHW")?,
        _ => rel::layout_attr(c, "kernel_layout")?,
    };
    let weight_layout = match c.str("out_layout")? {
        "" => canon_layout("OIHW")?,
        _ => rel::layout_attr(c, "out_layout")?,
    };
    let g = to_canon(c, 0, grad, &grad_layout, "NCHW")?;
    let d = to_canon(c, 1, data, &data_layout, "NCHW")?;
    let ks = rel::spatial_ints(c, "kernel_size", 2)?;
    let strides = rel::spatial_ints(c, "strides", 2)?;
    let dilation = rel::spatial_ints(c, "dilation", 2)?;
    let pads = rel::padding_totals(c, "padding", 2)?;
    let groups = groups(c)?;
    if !dims_agree(&g[0], &d[0]) {
        return Err(RelError::at(
            0,
            format!(
                "`{}` gradient `{grad}` and data `{data}` have different batch sizes",
                c.op.name
            ),
        ));
    }
    check_channels(c, 0, grad, &g[1], "output channels")?;
    let per_group = match d[1] {
        Dim::Fixed(ch) if ch % groups != 0 => {
            return Err(RelError::at(
                1,
                format!(
                    "`{}` data `{data}` has {ch} channels, which groups={groups} does not divide",
                    c.op.name
                ),
            ))
        }
        Dim::Fixed(ch) => Dim::Fixed(ch / groups),
        _ => Dim::Any,
    };
    for k in 0..2 {
        let expected = rel::window_extent(
            c,
            &d[2 + k],
            pads[k],
            &Dim::Fixed(ks[k]),
            strides[k],
            dilation[k],
            false,
        )?;
        if !dims_agree(&expected, &g[2 + k]) {
            return Err(RelError::at(
                0,
                format!(
                    "`{}` gradient `{grad}` has spatial extent {} on axis {k}, but convolving data `{data}` gives {expected}",
                    c.op.name,
                    g[2 + k]
                ),
            ));
        }
    }
    let wshape = vec![
        g[1].clone(),
        per_group,
        Dim::Fixed(ks[0]),
        Dim::Fixed(ks[1]),
    ];
    let out = from_canon(c, &wshape, "OIHW", &weight_layout)?;
    let dtype = rel::dtype_or(c, "out_dtype", data.dtype)?;
    Ok(tensor_type(out, dtype))
}

#[cfg(test)]
mod tests {
    use super::super::rel::testing::*;

    #[test]
    fn transposed() {
        let got = ok(
            "nn.conv2d_transpose",
            vec![
                t(&[1, 64, 14, 14], "float32"),
                t(&[64, 32, 4, 4], "float32"),
            ],
            &[
                ("strides", ints(&[2, 2])),
                ("padding", ints(&[1, 1])),
                ("channels", int(32)),
            ],
        );
        assert_eq!(got, t(&[1, 32, 28, 28], "float32"));
        let got = ok(
            "nn.conv2d_transpose",
            vec![t(&[1, 14, 14, 64], "float32"), t(&[64, 4, 4, 8], "float32")],
            &[
                ("strides", ints(&[2, 2])),
                ("output_padding", ints(&[1, 1])),
                ("groups", int(2)),
                ("data_layout", s("NHWC")),
                ("kernel_layout", s("IHWO")),
            ],
        );
        assert_eq!(got, t(&[1, 31, 31, 16], "float32"));
        let e = err(
            "nn.conv2d_transpose",
            vec![
                t(&[1, 64, 14, 14], "float32"),
                t(&[32, 32, 4, 4], "float32"),
            ],
            &[],
        );
        assert_eq!(e.arg, Some(1));
        let got = ok(
            "nn.conv3d_transpose",
            vec![
                t(&[1, 8, 4, 4, 4], "float32"),
                t(&[8, 2, 3, 3, 3], "float32"),
            ],
            &[("strides", ints(&[2, 2, 2]))],
        );
        assert_eq!(got, t(&[1, 2, 9, 9, 9], "float32"));
    }

    #[test]
    fn backward_weight() {
        let got = ok(
            "nn.conv2d_backward_weight",
            vec![
                t(&[1, 64, 112, 112], "float32"),
                t(&[1, 3, 224, 224], "float32"),
            ],
            &[
                ("strides", ints(&[2, 2])),
                ("padding", ints(&[3, 3, 3, 3])),
                ("kernel_size", ints(&[7, 7])),
                ("kernel_layout", s("NCHW")),
                ("out_layout", s("OIHW")),
            ],
        );
        assert_eq!(got, t(&[64, 3, 7, 7], "float32"));
        let got = ok(
            "nn.conv2d_backward_weight",
            vec![
                t(&[2, 56, 56, 32], "float16"),
                t(&[2, 56, 56, 16], "float16"),
            ],
            &[
                ("padding", ints(&[1, 1])),
                ("kernel_size", ints(&[3, 3])),
                ("data_layout", s("NHWC")),
                ("kernel_layout", s("NHWC")),
                ("out_layout", s("OHWI")),
            ],
        );
        assert_eq!(got, t(&[32, 3, 3, 16], "float16"));
        let e = err(
            "nn.conv2d_backward_weight",
            vec![
                t(&[1, 64, 100, 100], "float32"),
                t(&[1, 3, 224, 224], "float32"),
            ],
            &[("kernel_size", ints(&[7, 7]))],
        );
        assert_eq!(e.arg, Some(0));
        let e = err(
            "nn.conv2d_backward_weight",
            vec![
                t(&[1, 64, 218, 218], "float32"),
                t(&[1, 3, 224, 224], "float32"),
            ],
            &[],
        );
        assert!(e.message.contains("kernel_size"), "{}", e.message);
    }
}
