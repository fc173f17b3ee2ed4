//! Pooling: windowed max/avg pooling in 2-D and 3-D, global pooling and adaptive pooling.
//!
//! The spatial axes are found by letter in the `layout` attribute (`H`, `W`, and `D` for 3-D), so
//! `NCHW`, `NHWC` and blocked layouts such as `NCHW16c` all work, as long as the spatial axes
//! themselves are not split.

use super::layout::Layout;
use super::rel::{self, def, tensor_type};
use super::{Op, OpDef, OpPattern, RelCall, RelError};
use crate::ir::attrs::field;
use crate::ir::{AttrDefault as D, AttrField, AttrType as T, Dim, TensorType, Type};

use OpPattern::OutEWiseFusable;

const DATA: &[&str] = &["data"];

const MAX_POOL2D_ATTRS: &[AttrField] = &[
    field("pool_size", T::Ints, D::Required),
    field("strides", T::Ints, D::Ints(&[1, 1])),
    field("dilation", T::Ints, D::Ints(&[1, 1])),
    field("padding", T::Ints, D::Ints(&[0, 0])),
    field("layout", T::Str, D::Str("NCHW")),
    field("out_layout", T::Str, D::Str("")),
    field("ceil_mode", T::Bool, D::Bool(false)),
];

const AVG_POOL2D_ATTRS: &[AttrField] = &[
    field("pool_size", T::Ints, D::Required),
    field("strides", T::Ints, D::Ints(&[1, 1])),
    field("dilation", T::Ints, D::Ints(&[1, 1])),
    field("padding", T::Ints, D::Ints(&[0, 0])),
    field("layout", T::Str, D::Str("NCHW")),
    field("out_layout", T::Str, D::Str("")),
    field("ceil_mode", T::Bool, D::Bool(false)),
    field("count_include_pad", T::Bool, D::Bool(false)),
];

const MAX_POOL3D_ATTRS: &[AttrField] = &[
    field("pool_size", T::Ints, D::Required),
    field("strides", T::Ints, D::Ints(&[1, 1, 1])),
    field("dilation", T::Ints, D::Ints(&[1, 1, 1])),
    field("padding", T::Ints, D::Ints(&[0, 0, 0])),
    field("layout", T::Str, D::Str("NCDHW")),
    field("out_layout", T::Str, D::Str("")),
    field("ceil_mode", T::Bool, D::Bool(false)),
];

const AVG_POOL3D_ATTRS: &[AttrField] = &[
    field("pool_size", T::Ints, D::Required),
    field("strides", T::Ints, D::Ints(&[1, 1, 1])),
    field("dilation", T::Ints, D::Ints(&[1, 1, 1])),
    field("padding", T::Ints, D::Ints(&[0, 0, 0])),
    field("layout", T::Str, D::Str("NCDHW")),
    field("out_layout", T::Str, D::Str("")),
    field("ceil_mode", T::Bool, D::Bool(false)),
    field("count_include_pad", T::Bool, D::Bool(false)),
];

const GLOBAL_POOL2D_ATTRS: &[AttrField] = &[
    field("layout", T::Str, D::Str("NCHW")),
    field("out_layout", T::Str, D::Str("")),
];

const ADAPTIVE_POOL2D_ATTRS: &[AttrField] = &[
    field("output_size", T::Ints, D::Ints(&[])),
    field("layout", T::Str, D::Str("NCHW")),
    field("out_layout", T::Str, D::Str("")),
];

pub(super) const OPS: &[OpDef] = &[
    def(
        Op::MaxPool2d,
        DATA,
        MAX_POOL2D_ATTRS,
        OutEWiseFusable,
        pool2d,
    ),
    def(
        Op::AvgPool2d,
        DATA,
        AVG_POOL2D_ATTRS,
        OutEWiseFusable,
        pool2d,
    ),
    def(
        Op::MaxPool3d,
        DATA,
        MAX_POOL3D_ATTRS,
        OutEWiseFusable,
        pool3d,
    ),
    def(
        Op::AvgPool3d,
        DATA,
        AVG_POOL3D_ATTRS,
        OutEWiseFusable,
        pool3d,
    ),
    def(
        Op::GlobalAvgPool2d,
        DATA,
        GLOBAL_POOL2D_ATTRS,
        OutEWiseFusable,
        global_pool2d,
    ),
    def(
        Op::GlobalMaxPool2d,
        DATA,
        GLOBAL_POOL2D_ATTRS,
        OutEWiseFusable,
        global_pool2d,
    ),
    def(
        Op::AdaptiveAvgPool2d,
        DATA,
        ADAPTIVE_POOL2D_ATTRS,
        OutEWiseFusable,
        adaptive_pool2d,
    ),
    def(
        Op::AdaptiveMaxPool2d,
        DATA,
        ADAPTIVE_POOL2D_ATTRS,
        OutEWiseFusable,
        adaptive_pool2d,
    ),
];

fn pool2d(c: &RelCall<'_>) -> Result<Type, RelError> {
    pool_nd(c, &['H', 'W'])
}

fn pool3d(c: &RelCall<'_>) -> Result<Type, RelError> {
    pool_nd(c, &['D', 'H', 'W'])
}

/// The data tensor, its layout, and the positions of the spatial axes `names` in it.
fn spatial_positions<'a>(
    c: &RelCall<'a>,
    names: &[char],
) -> Result<(&'a TensorType, Layout, Vec<usize>), RelError> {
    let (data, layout) = rel::data_with_layout(c)?;
    let positions = names
        .iter()
        .map(|&n| {
            layout.unsplit_position(n).map_err(|m| {
                RelError::new(format!(
                    "attribute `layout` of `{}` does not fit: {m}",
                    c.op.name
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((data, layout, positions))
}

/// Writes the result in `out_layout` when that is set and differs from `layout`.
fn finish(
    c: &RelCall<'_>,
    data: &TensorType,
    layout: &Layout,
    shape: Vec<Dim>,
) -> Result<Type, RelError> {
    let out = c.str("out_layout")?;
    let shape = if out.is_empty() || out == layout.as_str() {
        shape
    } else {
        let target = rel::layout_attr(c, "out_layout")?;
        layout.convert(&shape, &target).map_err(|m| {
            RelError::new(format!(
                "`{}` cannot produce its result in layout `{target}`: {m}",
                c.op.name
            ))
        })?
    };
    Ok(tensor_type(shape, data.dtype))
}

/// Windowed pooling over the spatial axes `names`.
fn pool_nd(c: &RelCall<'_>, names: &[char]) -> Result<Type, RelError> {
    let nd = names.len();
    let (data, layout, positions) = spatial_positions(c, names)?;
    let pool = rel::spatial_ints(c, "pool_size", nd)?;
    let strides = rel::spatial_ints(c, "strides", nd)?;
    let dilation = rel::spatial_ints(c, "dilation", nd)?;
    let pads = rel::padding_totals(c, "padding", nd)?;
    let ceil_mode = c.bool("ceil_mode")?;
    let mut shape = data.shape.clone();
    for (k, &pos) in positions.iter().enumerate() {
        shape[pos] = rel::window_extent(
            c,
            &data.shape[pos],
            pads[k],
            &Dim::Fixed(pool[k]),
            strides[k],
            dilation[k],
            ceil_mode,
        )?;
    }
    finish(c, data, &layout, shape)
}

/// Global pooling: every spatial extent becomes 1.
fn global_pool2d(c: &RelCall<'_>) -> Result<Type, RelError> {
    let (data, layout, positions) = spatial_positions(c, &['H', 'W'])?;
    let mut shape = data.shape.clone();
    for pos in positions {
        shape[pos] = Dim::Fixed(1);
    }
    finish(c, data, &layout, shape)
}

/// Adaptive pooling: the spatial extents become `output_size` (empty: unchanged; one value:
/// both axes).
fn adaptive_pool2d(c: &RelCall<'_>) -> Result<Type, RelError> {
    let (data, layout, positions) = spatial_positions(c, &['H', 'W'])?;
    let size = rel::ints_attr(c, "output_size")?;
    let extents: Vec<Dim> = match size.as_slice() {
        [] => positions.iter().map(|&p| data.shape[p].clone()).collect(),
        [n] => vec![Dim::Fixed(*n); 2],
        [h, w] => vec![Dim::Fixed(*h), Dim::Fixed(*w)],
        _ => {
            return Err(RelError::new(format!(
                "attribute `output_size` of `{}` needs at most 2 values, found {size:?}",
                c.op.name
            )))
        }
    };
    if let Some(bad) = size.iter().find(|&&n| n < 1) {
        return Err(RelError::new(format!(
            "attribute `output_size` of `{}` must hold positive values, found {bad}",
            c.op.name
        )));
    }
    let mut shape = data.shape.clone();
    for (pos, e) in positions.into_iter().zip(extents) {
        shape[pos] = e;
    }
    finish(c, data, &layout, shape)
}

#[cfg(test)]
mod tests {
    use super::super::rel::testing::*;
    use crate::ir::{AttrValue, Dim};

    #[test]
    fn max_pool2d_shapes() {
        // ResNet-50 stem.
        let got = ok(
            "nn.max_pool2d",
            vec![t(&[1, 64, 112, 112], "float32")],
            &[
                ("pool_size", ints(&[3, 3])),
                ("strides", ints(&[2, 2])),
                ("padding", ints(&[1, 1, 1, 1])),
            ],
        );
        assert_eq!(got, t(&[1, 64, 56, 56], "float32"));
        // MNIST: 3x3 windows with stride 3 on 14x14.
        let got = ok(
            "nn.max_pool2d",
            vec![t(&[1, 16, 14, 14], "float32")],
            &[
                ("pool_size", ints(&[3, 3])),
                ("strides", ints(&[3, 3])),
                ("padding", ints(&[0, 0, 0, 0])),
            ],
        );
        assert_eq!(got, t(&[1, 16, 4, 4], "float32"));
        let got = ok(
            "nn.max_pool2d",
            vec![t(&[1, 16, 14, 14], "float32")],
            &[
                ("pool_size", ints(&[3, 3])),
                ("strides", ints(&[3, 3])),
                ("ceil_mode", AttrValue::Bool(true)),
            ],
        );
        assert_eq!(got, t(&[1, 16, 5, 5], "float32"));
    }

    #[test]
    fn layouts_and_dynamic() {
        let got = ok(
            "nn.avg_pool2d",
            vec![t(&[2, 32, 32, 8], "float16")],
            &[
                ("pool_size", ints(&[2])),
                ("strides", ints(&[2, 2])),
                ("layout", s("NHWC")),
            ],
        );
        assert_eq!(got, t(&[2, 16, 16, 8], "float16"));
        let got = ok(
            "nn.max_pool2d",
            vec![t(&[1, 4, 8, 8, 16], "float32")],
            &[
                ("pool_size", ints(&[2, 2])),
                ("strides", ints(&[2, 2])),
                ("layout", s("NCHW16c")),
            ],
        );
        assert_eq!(got, t(&[1, 4, 4, 4, 16], "float32"));
        let got = ok(
            "nn.max_pool2d",
            vec![t(&[1, 64, 8, 8], "float32")],
            &[
                ("pool_size", ints(&[2, 2])),
                ("strides", ints(&[2, 2])),
                ("out_layout", s("NHWC")),
            ],
        );
        assert_eq!(got, t(&[1, 4, 4, 64], "float32"));
        let dynamic = td(
            vec![Dim::Any, Dim::Fixed(3), Dim::Any, Dim::Fixed(9)],
            "float32",
        );
        let got = ok(
            "nn.max_pool2d",
            vec![dynamic],
            &[("pool_size", ints(&[3, 3]))],
        );
        assert_eq!(
            got,
            td(
                vec![Dim::Any, Dim::Fixed(3), Dim::Any, Dim::Fixed(7)],
                "float32"
            )
        );
    }

    #[test]
    fn pool_errors() {
        let x = t(&[1, 3, 8, 8], "float32");
        assert!(err("nn.max_pool2d", vec![x.clone()], &[])
            .message
            .contains("pool_size"));
        let e = err(
            "nn.max_pool2d",
            vec![x.clone()],
            &[("pool_size", ints(&[9, 9]))],
        );
        assert!(e.message.contains("larger than"), "{}", e.message);
        let e = err(
            "nn.max_pool2d",
            vec![t(&[3, 8, 8], "float32")],
            &[("pool_size", ints(&[2, 2]))],
        );
        assert_eq!(e.arg, Some(0));
        let e = err(
            "nn.max_pool2d",
            vec![t(&[1, 3, 8, 8, 4], "float32")],
            &[("pool_size", ints(&[2, 2])), ("layout", s("NCHW4h"))],
        );
        assert!(e.message.contains("splits"), "{}", e.message);
        let e = err("nn.max_pool2d", vec![x], &[("pool_size", ints(&[2, 2, 2]))]);
        assert!(e.message.contains("pool_size"), "{}", e.message);
    }

    #[test]
    fn pool3d_global_adaptive() {
        let got = ok(
            "nn.max_pool3d",
            vec![t(&[1, 4, 8, 8, 8], "float32")],
            &[
                ("pool_size", ints(&[2, 2, 2])),
                ("strides", ints(&[2, 2, 2])),
                ("padding", ints(&[0, 0, 0, 1, 1, 1])),
            ],
        );
        assert_eq!(got, t(&[1, 4, 4, 4, 4], "float32"));
        let got = ok(
            "nn.avg_pool3d",
            vec![t(&[1, 4, 8, 8, 8], "float32")],
            &[("pool_size", ints(&[3]))],
        );
        assert_eq!(got, t(&[1, 4, 6, 6, 6], "float32"));
        let got = ok(
            "nn.global_avg_pool2d",
            vec![t(&[1, 2048, 7, 7], "float16")],
            &[],
        );
        assert_eq!(got, t(&[1, 2048, 1, 1], "float16"));
        let got = ok(
            "nn.global_max_pool2d",
            vec![t(&[1, 7, 7, 512], "float32")],
            &[("layout", s("NHWC"))],
        );
        assert_eq!(got, t(&[1, 1, 1, 512], "float32"));
        let got = ok(
            "nn.adaptive_avg_pool2d",
            vec![t(&[1, 512, 13, 13], "float32")],
            &[("output_size", ints(&[7]))],
        );
        assert_eq!(got, t(&[1, 512, 7, 7], "float32"));
        let got = ok(
            "nn.adaptive_max_pool2d",
            vec![t(&[1, 512, 13, 13], "float32")],
            &[],
        );
        assert_eq!(got, t(&[1, 512, 13, 13], "float32"));
        let e = err(
            "nn.adaptive_avg_pool2d",
            vec![t(&[1, 2, 3, 3], "float32")],
            &[("output_size", ints(&[1, 2, 3]))],
        );
        assert!(e.message.contains("output_size"));
    }
}
