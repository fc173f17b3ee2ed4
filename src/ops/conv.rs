//! Forward convolutions: `nn.conv1d/2d/3d` (and the shape logic `qnn.conv2d` shares). The
//! transposed convolutions and the weight gradient live in the sibling `deconv` module.
//!
//! Every relation converts the data and weight shapes to the canonical layouts (`NCHW`/`OIHW`
//! and their 1-D/3-D analogues, `IOHW` for transposed kernels), computes there, and converts the
//! result to `out_layout` (default: the data layout). Any permutation of the canonical axes works,
//! as do blocked layouts such as `NCHW16c` or `OIHW16i16o`.

use super::geom::{DATA_CANON, KERNEL_CANON};
use super::layout::Layout;
use super::rel::{self, def, dims_agree, tensor, tensor_type};
use super::{Op, OpDef, OpPattern, RelCall, RelError};
use crate::ir::attrs::field;
use crate::ir::{AttrDefault as D, AttrField, AttrType as T, DType, Dim, TensorType, Type};

use OpPattern::OutEWiseFusable;

pub(super) const ARGS: &[&str] = &["data", "weight"];

const CONV1D_ATTRS: &[AttrField] = &[
    field("strides", T::Ints, D::Ints(&[1])),
    field("padding", T::Ints, D::Ints(&[0, 0])),
    field("dilation", T::Ints, D::Ints(&[1])),
    field("groups", T::Int, D::Int(1)),
    field("channels", T::OptInt, D::None),
    field("kernel_size", T::OptInts, D::None),
    field("data_layout", T::Str, D::Str("NCW")),
    field("kernel_layout", T::Str, D::Str("OIW")),
    field("out_layout", T::Str, D::Str("")),
    field("out_dtype", T::DType, D::Str("")),
];

/// `Conv2DAttrs`, also used by `nn.conv2d_backward_weight`.
pub(super) const CONV2D_ATTRS: &[AttrField] = &[
    field("strides", T::Ints, D::Ints(&[1, 1])),
    field("padding", T::Ints, D::Ints(&[0, 0])),
    field("dilation", T::Ints, D::Ints(&[1, 1])),
    field("groups", T::Int, D::Int(1)),
    field("channels", T::OptInt, D::None),
    field("kernel_size", T::OptInts, D::None),
    field("data_layout", T::Str, D::Str("NCHW")),
    field("kernel_layout", T::Str, D::Str("OIHW")),
    field("out_layout", T::Str, D::Str("")),
    field("out_dtype", T::DType, D::Str("")),
];

const CONV3D_ATTRS: &[AttrField] = &[
    field("strides", T::Ints, D::Ints(&[1, 1, 1])),
    field("padding", T::Ints, D::Ints(&[0, 0, 0])),
    field("dilation", T::Ints, D::Ints(&[1, 1, 1])),
    field("groups", T::Int, D::Int(1)),
    field("channels", T::OptInt, D::None),
    field("kernel_size", T::OptInts, D::None),
    field("data_layout", T::Str, D::Str("NCDHW")),
    field("kernel_layout", T::Str, D::Str("OIDHW")),
    field("out_layout", T::Str, D::Str("")),
    field("out_dtype", T::DType, D::Str("")),
];

/// The `qnn.conv2d` attributes: `Conv2DAttrs` plus the requantisation hints.
pub(super) const QNN_CONV2D_ATTRS: &[AttrField] = &[
    field("strides", T::Ints, D::Ints(&[1, 1])),
    field("padding", T::Ints, D::Ints(&[0, 0])),
    field("dilation", T::Ints, D::Ints(&[1, 1])),
    field("groups", T::Int, D::Int(1)),
    field("channels", T::OptInt, D::None),
    field("kernel_size", T::OptInts, D::None),
    field("data_layout", T::Str, D::Str("NCHW")),
    field("kernel_layout", T::Str, D::Str("OIHW")),
    field("out_layout", T::Str, D::Str("")),
    field("out_dtype", T::DType, D::Str("")),
    field("axis", T::Int, D::Int(-1)),
    field("rq_out_dtype", T::DType, D::Str("")),
];

pub(super) const OPS: &[OpDef] = &[
    def(Op::Conv1d, ARGS, CONV1D_ATTRS, OutEWiseFusable, conv1d),
    def(Op::Conv2d, ARGS, CONV2D_ATTRS, OutEWiseFusable, conv2d),
    def(Op::Conv3d, ARGS, CONV3D_ATTRS, OutEWiseFusable, conv3d),
];

fn conv1d(c: &RelCall<'_>) -> Result<Type, RelError> {
    conv_nd(c, 1, None)
}

fn conv2d(c: &RelCall<'_>) -> Result<Type, RelError> {
    conv_nd(c, 2, None)
}

fn conv3d(c: &RelCall<'_>) -> Result<Type, RelError> {
    conv_nd(c, 3, None)
}

pub(super) fn canon_layout(s: &str) -> Result<Layout, RelError> {
    Layout::parse(s).map_err(RelError::new)
}

/// Argument `i` converted from the layout named by attribute `attr` (or `layout` if given) to
/// the canonical layout `canon`.
pub(super) fn to_canon(
    c: &RelCall<'_>,
    i: usize,
    t: &TensorType,
    from: &Layout,
    canon: &str,
) -> Result<Vec<Dim>, RelError> {
    from.convert(&t.shape, &canon_layout(canon)?).map_err(|m| {
        RelError::at(
            i,
            format!(
                "argument `{}` of `{}` is `{t}`, which does not fit its layout: {m}",
                c.arg_name(i),
                c.op.name
            ),
        )
    })
}

/// Converts a canonical result shape to `target`.
pub(super) fn from_canon(
    c: &RelCall<'_>,
    shape: &[Dim],
    canon: &str,
    target: &Layout,
) -> Result<Vec<Dim>, RelError> {
    canon_layout(canon)?.convert(shape, target).map_err(|m| {
        RelError::new(format!(
            "`{}` cannot produce its result {} in layout `{target}`: {m}",
            c.op.name,
            rel::show_shape(shape)
        ))
    })
}

/// `out_layout`, defaulting to `data_layout`.
pub(super) fn out_layout(c: &RelCall<'_>) -> Result<Layout, RelError> {
    if c.str("out_layout")?.is_empty() {
        rel::layout_attr(c, "data_layout")
    } else {
        rel::layout_attr(c, "out_layout")
    }
}

pub(super) fn groups(c: &RelCall<'_>) -> Result<i64, RelError> {
    let g = c.int("groups")?;
    if g < 1 {
        return Err(RelError::new(format!(
            "attribute `groups` of `{}` must be positive, found {g}",
            c.op.name
        )));
    }
    Ok(g)
}

/// Checks the `kernel_size` attribute, when given, against the weight's window extents.
pub(super) fn check_kernel_size(
    c: &RelCall<'_>,
    arg: usize,
    t: &TensorType,
    window: &[Dim],
) -> Result<(), RelError> {
    let Some(ks) = rel::opt_ints_attr(c, "kernel_size")? else {
        return Ok(());
    };
    if ks.len() != window.len() {
        return Err(RelError::new(format!(
            "attribute `kernel_size` of `{}` needs {} values, found {ks:?}",
            c.op.name,
            window.len()
        )));
    }
    if ks
        .iter()
        .zip(window)
        .any(|(&k, w)| !dims_agree(&Dim::Fixed(k), w))
    {
        return Err(RelError::at(
            arg,
            format!(
                "`{}` has kernel_size={ks:?}, but argument `{}` is `{t}` with window {}",
                c.op.name,
                c.arg_name(arg),
                rel::show_shape(window)
            ),
        ));
    }
    Ok(())
}

/// Checks the `channels` attribute, when given, against `expected` (derived from argument `arg`).
pub(super) fn check_channels(
    c: &RelCall<'_>,
    arg: usize,
    t: &TensorType,
    expected: &Dim,
    what: &str,
) -> Result<(), RelError> {
    if let Some(ch) = rel::opt_int_attr(c, "channels")? {
        if !dims_agree(&Dim::Fixed(ch), expected) {
            return Err(RelError::at(
                arg,
                format!(
                    "`{}` has channels={ch}, but argument `{}` is `{t}`, giving {expected} {what}",
                    c.op.name,
                    c.arg_name(arg)
                ),
            ));
        }
    }
    Ok(())
}

/// Requires the data channel count (when static) to split into `groups` groups of
/// `per_group` channels.
fn check_in_channels(
    c: &RelCall<'_>,
    data: &TensorType,
    channels: &Dim,
    groups: i64,
    weight: &TensorType,
    per_group: &Dim,
) -> Result<(), RelError> {
    let Dim::Fixed(ch) = *channels else {
        return Ok(());
    };
    if ch % groups != 0 {
        return Err(RelError::at(
            0,
            format!(
                "`{}` data `{data}` has {ch} channels, which groups={groups} does not divide",
                c.op.name
            ),
        ));
    }
    if !dims_agree(&Dim::Fixed(ch / groups), per_group) {
        return Err(RelError::at(
            1,
            format!(
                "`{}` weight `{weight}` takes {per_group} input channels per group, but data `{data}` has {ch} channels in {groups} group(s), i.e. {} per group",
                c.op.name,
                ch / groups
            ),
        ));
    }
    Ok(())
}

/// The forward convolution relation for `nd` spatial axes. `default_dtype` is the result dtype
/// when `out_dtype` is unset (the data dtype if `None`).
pub(super) fn conv_nd(
    c: &RelCall<'_>,
    nd: usize,
    default_dtype: Option<DType>,
) -> Result<Type, RelError> {
    let data = tensor(c, 0)?;
    let weight = tensor(c, 1)?;
    let data_layout = rel::layout_attr(c, "data_layout")?;
    let kernel_layout = rel::layout_attr(c, "kernel_layout")?;
    let d = to_canon(c, 0, data, &data_layout, DATA_CANON[nd - 1])?;
    let w = to_canon(c, 1, weight, &kernel_layout, KERNEL_CANON[nd - 1])?;
    let strides = rel::spatial_ints(c, "strides", nd)?;
    let dilation = rel::spatial_ints(c, "dilation", nd)?;
    let pads = rel::padding_totals(c, "padding", nd)?;
    let groups = groups(c)?;
    let (out_ch, per_group, window) = (&w[0], &w[1], &w[2..]);
    check_kernel_size(c, 1, weight, window)?;
    check_channels(c, 1, weight, out_ch, "output channels")?;
    check_in_channels(c, data, &d[1], groups, weight, per_group)?;
    if let Dim::Fixed(o) = *out_ch {
        if o % groups != 0 {
            return Err(RelError::at(
                1,
                format!(
                    "`{}` weight `{weight}` has {o} output channels, which groups={groups} does not divide",
                    c.op.name
                ),
            ));
        }
    }
    let mut oshape = vec![d[0].clone(), out_ch.clone()];
    for k in 0..nd {
        oshape.push(rel::window_extent(
            c,
            &d[2 + k],
            pads[k],
            &window[k],
            strides[k],
            dilation[k],
            false,
        )?);
    }
    let out = from_canon(c, &oshape, DATA_CANON[nd - 1], &out_layout(c)?)?;
    let dtype = rel::dtype_or(c, "out_dtype", default_dtype.unwrap_or(data.dtype))?;
    Ok(tensor_type(out, dtype))
}

#[cfg(test)]
mod tests {
    use super::super::rel::testing::*;
    use crate::ir::Dim;

    #[test]
    fn resnet_stem_conv() {
        let got = ok(
            "nn.conv2d",
            vec![
                t(&[1, 3, 224, 224], "float32"),
                t(&[64, 3, 7, 7], "float32"),
            ],
            &[
                ("strides", ints(&[2, 2])),
                ("padding", ints(&[3, 3, 3, 3])),
                ("channels", int(64)),
                ("kernel_size", ints(&[7, 7])),
            ],
        );
        assert_eq!(got, t(&[1, 64, 112, 112], "float32"));
    }

    #[test]
    fn grouped_and_depthwise() {
        // ResNeXt-50 32x4d: 128 channels in 32 groups of 4.
        let got = ok(
            "nn.conv2d",
            vec![
                t(&[1, 128, 56, 56], "float16"),
                t(&[128, 4, 3, 3], "float16"),
            ],
            &[
                ("padding", ints(&[1, 1, 1, 1])),
                ("groups", int(32)),
                ("channels", int(128)),
            ],
        );
        assert_eq!(got, t(&[1, 128, 56, 56], "float16"));
        // MobileNet depthwise: groups == channels, one input channel per group.
        let got = ok(
            "nn.conv2d",
            vec![
                t(&[1, 96, 112, 112], "float32"),
                t(&[96, 1, 3, 3], "float32"),
            ],
            &[
                ("strides", ints(&[2, 2])),
                ("padding", ints(&[1, 1, 1, 1])),
                ("groups", int(96)),
                ("channels", int(96)),
                ("kernel_size", ints(&[3, 3])),
            ],
        );
        assert_eq!(got, t(&[1, 96, 56, 56], "float32"));
        let e = err(
            "nn.conv2d",
            vec![t(&[1, 96, 8, 8], "float32"), t(&[96, 2, 3, 3], "float32")],
            &[("groups", int(96))],
        );
        assert_eq!(e.arg, Some(1));
        assert!(e.message.contains("per group"), "{}", e.message);
        let e = err(
            "nn.conv2d",
            vec![t(&[1, 30, 8, 8], "float32"), t(&[8, 7, 3, 3], "float32")],
            &[("groups", int(4))],
        );
        assert_eq!(e.arg, Some(0));
    }

    #[test]
    fn nhwc_and_other_layouts() {
        let nhwc = [("data_layout", s("NHWC")), ("kernel_layout", s("HWIO"))];
        let mut attrs = nhwc.to_vec();
        attrs.push(("strides", ints(&[2, 2])));
        attrs.push(("padding", ints(&[3, 3])));
        let got = ok(
            "nn.conv2d",
            vec![
                t(&[1, 224, 224, 3], "float32"),
                t(&[7, 7, 3, 64], "float32"),
            ],
            &attrs,
        );
        assert_eq!(got, t(&[1, 112, 112, 64], "float32"));
        let got = ok(
            "nn.conv2d",
            vec![
                t(&[8, 56, 56, 64], "float16"),
                t(&[128, 1, 1, 64], "float16"),
            ],
            &[
                ("data_layout", s("NHWC")),
                ("kernel_layout", s("OHWI")),
                ("out_dtype", s("float32")),
            ],
        );
        assert_eq!(got, t(&[8, 56, 56, 128], "float32"));
        let got = ok(
            "nn.conv2d",
            vec![
                t(&[1, 64, 56, 56], "float32"),
                t(&[64, 64, 3, 3], "float32"),
            ],
            &[("padding", ints(&[1])), ("out_layout", s("NCHW16c"))],
        );
        assert_eq!(got, t(&[1, 4, 56, 56, 16], "float32"));
        let got = ok(
            "nn.conv2d",
            vec![
                t(&[1, 4, 56, 56, 16], "float32"),
                t(&[4, 4, 3, 3, 16, 16], "float32"),
            ],
            &[
                ("data_layout", s("NCHW16c")),
                ("kernel_layout", s("OIHW16i16o")),
                ("padding", ints(&[1, 1])),
            ],
        );
        assert_eq!(got, t(&[1, 4, 56, 56, 16], "float32"));
        let dynamic = td(
            vec![Dim::Any, Dim::Fixed(3), Dim::Any, Dim::Fixed(32)],
            "float32",
        );
        let got = ok("nn.conv2d", vec![dynamic, t(&[8, 3, 3, 3], "float32")], &[]);
        assert_eq!(
            got,
            td(
                vec![Dim::Any, Dim::Fixed(8), Dim::Any, Dim::Fixed(30)],
                "float32"
            )
        );
    }

    #[test]
    fn conv_errors() {
        let x = t(&[1, 3, 32, 32], "float32");
        let w = t(&[16, 3, 5, 5], "float32");
        let e = err(
            "nn.conv2d",
            vec![x.clone(), w.clone()],
            &[("kernel_size", ints(&[3, 3]))],
        );
        assert_eq!(e.arg, Some(1));
        assert!(e.message.contains("kernel_size"), "{}", e.message);
        let e = err(
            "nn.conv2d",
            vec![x.clone(), w.clone()],
            &[("channels", int(8))],
        );
        assert!(e.message.contains("channels=8"), "{}", e.message);
        let e = err(
            "nn.conv2d",
            vec![x.clone(), w.clone()],
            &[("padding", ints(&[1, 1, 1]))],
        );
        assert!(e.message.contains("1, 2 or 4"), "{}", e.message);
        let e = err(
            "nn.conv2d",
            vec![x.clone(), t(&[16, 4, 5, 5], "float32")],
            &[],
        );
        assert_eq!(e.arg, Some(1));
        let e = err(
            "nn.conv2d",
            vec![t(&[1, 3, 4, 4], "float32"), w.clone()],
            &[],
        );
        assert!(e.message.contains("larger than"), "{}", e.message);
        let e = err("nn.conv2d", vec![t(&[1, 3, 32], "float32"), w.clone()], &[]);
        assert_eq!(e.arg, Some(0));
        let e = err(
            "nn.conv2d",
            vec![x.clone(), w.clone()],
            &[("strides", ints(&[0, 1]))],
        );
        assert!(e.message.contains("positive"), "{}", e.message);
        let e = err(
            "nn.conv2d",
            vec![x.clone(), w.clone()],
            &[("data_layout", s("NCHX"))],
        );
        assert!(e.message.contains("layout"), "{}", e.message);
        let e = err("nn.conv2d", vec![x, w], &[("padding", ints(&[i64::MAX]))]);
        assert!(e.message.contains("overflow"), "{}", e.message);
    }

    #[test]
    fn conv1d_and_conv3d() {
        let got = ok(
            "nn.conv1d",
            vec![t(&[4, 16, 100], "float32"), t(&[32, 16, 3], "float32")],
            &[("padding", ints(&[1, 1])), ("strides", ints(&[2]))],
        );
        assert_eq!(got, t(&[4, 32, 50], "float32"));
        let got = ok(
            "nn.conv3d",
            vec![
                t(&[1, 8, 16, 32, 32], "float32"),
                t(&[4, 8, 3, 3, 3], "float32"),
            ],
            &[
                ("padding", ints(&[1, 1, 1])),
                ("dilation", ints(&[1, 2, 2])),
            ],
        );
        assert_eq!(got, t(&[1, 4, 16, 30, 30], "float32"));
    }
}
