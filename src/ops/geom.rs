//! Window geometry of convolution, transposed convolution and pooling, computed in one place:
//! the type relations, the reference interpreter, the native code generator and the oneDNN
//! composite reader all read the attributes and derive output extents through these functions.
//!
//! The functions take plain integers and report problems as values ([`AxisError`],
//! [`WindowError`]); each caller words its own message (a type error, an unsupported call).
//! All arithmetic is checked: attributes and shapes are untrusted input.

use super::Op;

/// The canonical data layouts of 1-, 2- and 3-d convolution and pooling (index: spatial rank - 1).
pub const DATA_CANON: [&str; 3] = ["NCW", "NCHW", "NCDHW"];
/// The canonical kernel layouts of forward convolutions.
pub const KERNEL_CANON: [&str; 3] = ["OIW", "OIHW", "OIDHW"];
/// The canonical kernel layouts of transposed convolutions (`I`: all input channels, `O`: output
/// channels per group).
pub const KERNEL_T_CANON: [&str; 3] = ["IOW", "IOHW", "IODHW"];

/// A convolution operator's shape: its number of spatial axes and whether it is transposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvKind {
    /// Spatial axes (1, 2 or 3).
    pub spatial: usize,
    /// A transposed convolution (`nn.conv*_transpose`).
    pub transposed: bool,
}

impl ConvKind {
    /// The canonical data layout (`NCHW` and its 1-d/3-d analogues).
    pub fn data_canon(self) -> &'static str {
        DATA_CANON[self.spatial - 1]
    }

    /// The canonical kernel layout (`OIHW`, or `IOHW` when transposed).
    pub fn kernel_canon(self) -> &'static str {
        if self.transposed {
            KERNEL_T_CANON[self.spatial - 1]
        } else {
            KERNEL_CANON[self.spatial - 1]
        }
    }
}

/// How a pooling operator combines a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolReduce {
    /// The largest value.
    Max,
    /// The mean.
    Avg,
}

/// Which windows a pooling operator takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolWindow {
    /// A sliding window given by `pool_size`, `strides`, `dilation`, `padding`, `ceil_mode`.
    Sliding,
    /// The whole spatial extent (`nn.global_*_pool2d`).
    Global,
    /// Windows that cover the input in `output_size` parts (`nn.adaptive_*_pool2d`).
    Adaptive,
}

/// A pooling operator's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolKind {
    /// Spatial axes (2 or 3).
    pub spatial: usize,
    /// Max or average.
    pub reduce: PoolReduce,
    /// Sliding, global or adaptive windows.
    pub window: PoolWindow,
}

impl Op {
    /// The convolution shape of `nn.conv1d/2d/3d` and `nn.conv2d/3d_transpose`; `None` for every
    /// other operator (`qnn.conv2d` shares the forward geometry but not the arguments).
    pub const fn conv_kind(self) -> Option<ConvKind> {
        let (spatial, transposed) = match self {
            Op::Conv1d => (1, false),
            Op::Conv2d => (2, false),
            Op::Conv3d => (3, false),
            Op::Conv2dTranspose => (2, true),
            Op::Conv3dTranspose => (3, true),
            _ => return None,
        };
        Some(ConvKind {
            spatial,
            transposed,
        })
    }

    /// The pooling shape of the pooling operators; `None` for every other operator.
    pub const fn pool_kind(self) -> Option<PoolKind> {
        use PoolReduce::{Avg, Max};
        use PoolWindow::{Adaptive, Global, Sliding};
        let (spatial, reduce, window) = match self {
            Op::MaxPool2d => (2, Max, Sliding),
            Op::AvgPool2d => (2, Avg, Sliding),
            Op::MaxPool3d => (3, Max, Sliding),
            Op::AvgPool3d => (3, Avg, Sliding),
            Op::GlobalMaxPool2d => (2, Max, Global),
            Op::GlobalAvgPool2d => (2, Avg, Global),
            Op::AdaptiveMaxPool2d => (2, Max, Adaptive),
            Op::AdaptiveAvgPool2d => (2, Avg, Adaptive),
            _ => return None,
        };
        Some(PoolKind {
            spatial,
            reduce,
            window,
        })
    }
}

/// Why a per-axis attribute does not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AxisError {
    /// The attribute holds this many values, which is not one of the accepted counts.
    Count(usize),
    /// A value out of range: not positive (strides, dilation, window sizes) or negative
    /// (padding).
    Value(i64),
}

/// One value per spatial axis from an attribute of 1 value (every axis) or `n` values. With
/// `positive`, every value must be at least 1.
pub fn per_axis(v: &[i64], n: usize, positive: bool) -> Result<Vec<i64>, AxisError> {
    let v = match v.len() {
        1 => vec![v[0]; n],
        len if len == n => v.to_vec(),
        len => return Err(AxisError::Count(len)),
    };
    match v.iter().find(|&&x| positive && x <= 0) {
        Some(&bad) => Err(AxisError::Value(bad)),
        None => Ok(v),
    }
}

/// Padding before and after each of `n` spatial axes from TVM's padding attribute: 1 value (all
/// sides), `n` values (both sides of each axis) or `2n` values (all befores, then all afters).
/// Negative values are rejected before the count is looked at.
pub fn padding(p: &[i64], n: usize) -> Result<(Vec<i64>, Vec<i64>), AxisError> {
    if let Some(&bad) = p.iter().find(|&&x| x < 0) {
        return Err(AxisError::Value(bad));
    }
    match p.len() {
        1 => Ok((vec![p[0]; n], vec![p[0]; n])),
        len if len == n => Ok((p.to_vec(), p.to_vec())),
        len if len == 2 * n => Ok((p[..n].to_vec(), p[n..].to_vec())),
        len => Err(AxisError::Count(len)),
    }
}

/// Why a window has no output extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowError {
    /// The arithmetic does not fit in 64 bits.
    Overflow,
    /// The dilated window (`dilated` taps) is larger than the padded input (`padded`).
    TooLarge {
        /// The window's extent after dilation.
        dilated: i64,
        /// The input's extent with both paddings.
        padded: i64,
    },
}

/// The extent of a window of `kernel` taps, `dilation` apart.
pub fn dilated(kernel: i64, dilation: i64) -> Option<i64> {
    (kernel - 1).checked_mul(dilation)?.checked_add(1)
}

/// The output extent of a sliding window (convolution, pooling) along one axis: `input` padded by
/// `pad` in total, a window of `kernel` taps `dilation` apart, moved by `stride`; with
/// `ceil_mode`, a last partial step counts. `kernel`, `stride` and `dilation` must be positive.
pub fn window_out(
    input: i64,
    kernel: i64,
    pad: i64,
    stride: i64,
    dilation: i64,
    ceil_mode: bool,
) -> Result<i64, WindowError> {
    let dilated = dilated(kernel, dilation).ok_or(WindowError::Overflow)?;
    let padded = input.checked_add(pad).ok_or(WindowError::Overflow)?;
    let span = padded - dilated;
    if span < 0 {
        return Err(WindowError::TooLarge { dilated, padded });
    }
    let steps = if ceil_mode {
        span.checked_add(stride - 1).ok_or(WindowError::Overflow)? / stride
    } else {
        span / stride
    };
    Ok(steps + 1)
}

/// The output extent of a transposed convolution along one axis:
/// `(input - 1) * stride + dilated(kernel) - pad + output_padding`, `pad` being the total of both
/// sides. `None` on overflow; the result may be below 1 when the padding is too large.
pub fn transposed_out(
    input: i64,
    kernel: i64,
    pad: i64,
    stride: i64,
    dilation: i64,
    output_padding: i64,
) -> Option<i64> {
    (input - 1)
        .checked_mul(stride)?
        .checked_add(dilated(kernel, dilation)?)?
        .checked_sub(pad)?
        .checked_add(output_padding)
}

/// [`window_out`] on `usize` extents (shapes of tensors that exist), `None` when the window is
/// larger than the padded input or the arithmetic overflows.
pub fn window_out_usize(
    input: usize,
    kernel: usize,
    pad: usize,
    stride: usize,
    dilation: usize,
    ceil_mode: bool,
) -> Option<usize> {
    let i = |x: usize| i64::try_from(x).ok();
    let out = window_out(
        i(input)?,
        i(kernel)?,
        i(pad)?,
        i(stride)?,
        i(dilation)?,
        ceil_mode,
    )
    .ok()?;
    usize::try_from(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_windows() {
        // ResNet's stem: 224 padded by 3 + 3, 7 taps, stride 2.
        assert_eq!(window_out(224, 7, 6, 2, 1, false), Ok(112));
        // Its max pool: 112 padded by 1 + 1, 3 taps, stride 2.
        assert_eq!(window_out(112, 3, 2, 2, 1, false), Ok(56));
        assert_eq!(window_out(6, 3, 0, 2, 1, false), Ok(2));
        assert_eq!(window_out(6, 3, 0, 2, 1, true), Ok(3));
        assert_eq!(window_out(32, 3, 0, 1, 2, false), Ok(28));
        assert_eq!(
            window_out(4, 5, 0, 1, 1, false),
            Err(WindowError::TooLarge {
                dilated: 5,
                padded: 4
            })
        );
        assert_eq!(
            window_out(4, 3, i64::MAX, 1, 1, false),
            Err(WindowError::Overflow)
        );
        assert_eq!(window_out_usize(224, 7, 6, 2, 1, false), Some(112));
        assert_eq!(window_out_usize(4, 5, 0, 1, 1, false), None);
    }

    #[test]
    fn transposed_windows() {
        // Doubling with a 4-tap kernel, stride 2 and padding 1 on each side.
        assert_eq!(transposed_out(16, 4, 2, 2, 1, 0), Some(32));
        assert_eq!(transposed_out(5, 3, 0, 1, 1, 0), Some(7));
        assert_eq!(transposed_out(5, 3, 0, 2, 1, 1), Some(12));
        assert_eq!(transposed_out(1, 1, 4, 1, 1, 0), Some(-3));
        assert_eq!(transposed_out(i64::MAX, 2, 0, 2, 1, 0), None);
    }

    #[test]
    fn attribute_forms() {
        assert_eq!(per_axis(&[2], 3, true), Ok(vec![2, 2, 2]));
        assert_eq!(per_axis(&[1, 2], 2, true), Ok(vec![1, 2]));
        assert_eq!(per_axis(&[1, 2, 3], 2, true), Err(AxisError::Count(3)));
        assert_eq!(per_axis(&[1, 0], 2, true), Err(AxisError::Value(0)));
        assert_eq!(per_axis(&[1, 0], 2, false), Ok(vec![1, 0]));
        assert_eq!(padding(&[1], 2), Ok((vec![1, 1], vec![1, 1])));
        assert_eq!(padding(&[1, 2], 2), Ok((vec![1, 2], vec![1, 2])));
        assert_eq!(padding(&[1, 2, 3, 4], 2), Ok((vec![1, 2], vec![3, 4])));
        assert_eq!(padding(&[1, 2, 3], 2), Err(AxisError::Count(3)));
        assert_eq!(padding(&[1, -2, 3], 2), Err(AxisError::Value(-2)));
    }

    #[test]
    fn kinds() {
        let k = Op::Conv3dTranspose.conv_kind().unwrap();
        assert_eq!((k.data_canon(), k.kernel_canon()), ("NCDHW", "IODHW"));
        assert_eq!(Op::Conv1d.conv_kind().unwrap().kernel_canon(), "OIW");
        assert_eq!(Op::Dense.conv_kind(), None);
        let p = Op::GlobalAvgPool2d.pool_kind().unwrap();
        assert_eq!((p.reduce, p.window), (PoolReduce::Avg, PoolWindow::Global));
        assert_eq!(Op::Conv2d.pool_kind(), None);
    }
}
