//! `image.resize2d` with the semantics of ONNX `Resize` (which TVM's attributes mirror), in any
//! layout whose `H` and `W` axes are not split.
//!
//! Each spatial axis is resized on its own: output index `x` maps to a source coordinate by
//! `coordinate_transformation_mode` (with the scale taken as `output / input` extent, computed
//! exactly in `float64`):
//!
//! | mode | source coordinate |
//! |---|---|
//! | `half_pixel` | `(x + 0.5) · in / out − 0.5` |
//! | `pytorch_half_pixel` | as `half_pixel`, but 0 when `out` is 1 |
//! | `align_corners` | `x · (in − 1) / (out − 1)`, 0 when `out` is 1 |
//! | `asymmetric` | `x · in / out` |
//! | `tf_half_pixel_for_nn` | `(x + 0.5) · in / out` |
//! | `tf_crop_and_resize` | `start · (in − 1) + x · (end − start) · (in − 1) / (out − 1)` from `roi`; outside `[0, in − 1]` the result is `extrapolation_value` |
//!
//! `nearest_neighbor` rounds the coordinate by `rounding_method` (`round`: halves to even;
//! `round_prefer_floor`, `round_prefer_ceil`, `floor`, `ceil`; empty: `round` with
//! `align_corners`, else `floor`, as TVM chooses) and clamps it into the input. `linear` blends
//! the two neighbours `floor(c)` and `floor(c) + 1`, `cubic` the four from `floor(c) − 1` with
//! Keys' kernel of parameter `cubic_alpha`; neighbours outside the input take the edge value,
//! or with `cubic_exclude` get weight 0 and the others are scaled to sum to 1. The 2-d result is
//! the product of the two axes' weights. Nearest-neighbour resizing moves data of any dtype;
//! `linear` and `cubic` compute in `float32`.

use super::nn::gather_by_maps;
use super::transform::layout;
use super::{op, Call, OpImpl, Reason};
use crate::runtime::exec::tensor::{is_f32_family, strides};

/// How one output index of one axis reads the input: `(input index, weight)` pairs, or `None`
/// for a point outside the region of interest (`extrapolation_value`).
type Taps = Option<Vec<(usize, f32)>>;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Method {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Rounding {
    HalfEven,
    PreferFloor,
    PreferCeil,
    Floor,
    Ceil,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Coord {
    HalfPixel,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    /// The region of interest along this axis, normalised: start and end.
    TfCropAndResize(f64, f64),
}

/// The source coordinate of output index `x`.
fn source(x: usize, n_in: usize, n_out: usize, mode: Coord) -> f64 {
    let (x, i, o) = (x as f64, n_in as f64, n_out as f64);
    match mode {
        Coord::HalfPixel => (x + 0.5) * i / o - 0.5,
        Coord::PytorchHalfPixel if n_out > 1 => (x + 0.5) * i / o - 0.5,
        Coord::PytorchHalfPixel => 0.0,
        Coord::AlignCorners if n_out > 1 => x * (i - 1.0) / (o - 1.0),
        Coord::AlignCorners => 0.0,
        Coord::Asymmetric => x * i / o,
        Coord::TfHalfPixelForNn => (x + 0.5) * i / o,
        Coord::TfCropAndResize(s, e) if n_out > 1 => {
            s * (i - 1.0) + x * (e - s) * (i - 1.0) / (o - 1.0)
        }
        Coord::TfCropAndResize(s, e) => 0.5 * (s + e) * (i - 1.0),
    }
}

/// Keys' cubic convolution weights of the four neighbours `floor(c) − 1 .. floor(c) + 2` for
/// the fraction `t` (as ONNX writes them).
fn cubic_weights(t: f64, a: f64) -> [f64; 4] {
    let u = 1.0 - t;
    [
        ((a * (t + 1.0) - 5.0 * a) * (t + 1.0) + 8.0 * a) * (t + 1.0) - 4.0 * a,
        ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0,
        ((a + 2.0) * u - (a + 3.0)) * u * u + 1.0,
        ((a * (u + 1.0) - 5.0 * a) * (u + 1.0) + 8.0 * a) * (u + 1.0) - 4.0 * a,
    ]
}

/// The taps of every output index of one axis.
fn axis_taps(
    n_in: usize,
    n_out: usize,
    mode: Coord,
    method: Method,
    rounding: Rounding,
    alpha: f64,
    exclude: bool,
) -> Vec<Taps> {
    let last = n_in as i64 - 1;
    let clamp = |i: i64| i.clamp(0, last) as usize;
    (0..n_out)
        .map(|x| {
            let c = source(x, n_in, n_out, mode);
            if matches!(mode, Coord::TfCropAndResize(..)) && !(0.0..=last as f64).contains(&c) {
                return None;
            }
            Some(match method {
                Method::Nearest => {
                    let r = match rounding {
                        Rounding::HalfEven => c.round_ties_even(),
                        Rounding::PreferFloor => (c - 0.5).ceil(),
                        Rounding::PreferCeil => (c + 0.5).floor(),
                        Rounding::Floor => c.floor(),
                        Rounding::Ceil => c.ceil(),
                    };
                    vec![(clamp(r as i64), 1.0)]
                }
                Method::Linear => {
                    let f = c.floor();
                    let t = c - f;
                    let i0 = f as i64;
                    vec![(clamp(i0), (1.0 - t) as f32), (clamp(i0 + 1), t as f32)]
                }
                Method::Cubic => {
                    let f = c.floor();
                    let i0 = f as i64;
                    let mut w = cubic_weights(c - f, alpha);
                    let idx = [i0 - 1, i0, i0 + 1, i0 + 2];
                    if exclude {
                        for (wk, &i) in w.iter_mut().zip(&idx) {
                            if i < 0 || i > last {
                                *wk = 0.0;
                            }
                        }
                        let sum: f64 = w.iter().sum();
                        if sum != 0.0 {
                            w.iter_mut().for_each(|wk| *wk /= sum);
                        }
                    }
                    idx.iter()
                        .zip(&w)
                        .map(|(&i, &wk)| (clamp(i), wk as f32))
                        .collect()
                }
            })
        })
        .collect()
}

/// The normalised region of interest `[start_h, start_w, end_h, end_w]`.
fn roi(c: &Call<'_>) -> Result<[f64; 4], Reason> {
    let bad = || "`image.resize2d` with tf_crop_and_resize needs `roi` of 4 numbers".to_string();
    let v = c.attr("roi").as_array().ok_or_else(bad)?;
    let f: Vec<f64> = v.iter().filter_map(|x| x.as_f64()).collect();
    match f[..] {
        [a, b, cc, d] if v.len() == 4 => Ok([a, b, cc, d]),
        _ => Err(bad()),
    }
}

pub(super) fn instantiate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    let d = c.arg(0)?.clone();
    let o = c.out()?.clone();
    let lay = layout(c.str("layout")?)?;
    if lay.rank() != d.dims.len() || o.dims.len() != d.dims.len() {
        return Err(format!(
            "layout `{}` does not fit a rank-{} input",
            lay.as_str(),
            d.dims.len()
        ));
    }
    let hpos = lay.unsplit_position('H')?;
    let wpos = lay.unsplit_position('W')?;
    let method = match c.str("method")? {
        "nearest_neighbor" => Method::Nearest,
        "linear" => Method::Linear,
        "cubic" => Method::Cubic,
        m => return Err(format!("`image.resize2d` does not support method \"{m}\"")),
    };
    let mode_name = c.str("coordinate_transformation_mode")?;
    let rounding = match c.str("rounding_method")? {
        "round" => Rounding::HalfEven,
        "round_prefer_floor" => Rounding::PreferFloor,
        "round_prefer_ceil" => Rounding::PreferCeil,
        "floor" => Rounding::Floor,
        "ceil" => Rounding::Ceil,
        "" if mode_name == "align_corners" => Rounding::HalfEven,
        "" => Rounding::Floor,
        r => {
            return Err(format!(
                "`image.resize2d` does not support rounding_method \"{r}\""
            ))
        }
    };
    let coord = |axis: usize| -> Result<Coord, Reason> {
        Ok(match mode_name {
            "half_pixel" => Coord::HalfPixel,
            "pytorch_half_pixel" => Coord::PytorchHalfPixel,
            "align_corners" => Coord::AlignCorners,
            "asymmetric" => Coord::Asymmetric,
            "tf_half_pixel_for_nn" => Coord::TfHalfPixelForNn,
            "tf_crop_and_resize" => {
                let r = roi(c)?;
                Coord::TfCropAndResize(r[axis], r[axis + 2])
            }
            m => {
                return Err(format!(
                    "`image.resize2d` does not support coordinate_transformation_mode \"{m}\""
                ))
            }
        })
    };
    let alpha = c.float("cubic_alpha")?;
    let exclude = c.int("cubic_exclude")? != 0;
    let extrapolation = c.float("extrapolation_value")? as f32;
    for k in 0..d.dims.len() {
        if k != hpos && k != wpos && d.dims[k] != o.dims[k] {
            return Err(format!(
                "`image.resize2d` of {:?} cannot give {:?}",
                d.dims, o.dims
            ));
        }
    }
    if o.numel() > 0 && (d.dims[hpos] == 0 || d.dims[wpos] == 0) {
        return Err("`image.resize2d` of an empty image".into());
    }
    let taps = |axis: usize, pos: usize| -> Result<Vec<Taps>, Reason> {
        Ok(axis_taps(
            d.dims[pos],
            o.dims[pos],
            coord(axis)?,
            method,
            rounding,
            alpha,
            exclude,
        ))
    };
    let (th, tw) = (taps(0, hpos)?, taps(1, wpos)?);
    let st = strides(&d.dims);
    let inside = th.iter().chain(&tw).all(Option::is_some);
    if method == Method::Nearest && inside && d.dtype == o.dtype {
        // Pure data movement: a gather by per-axis index maps, for any dtype.
        let pick = |t: &[Taps]| -> Vec<usize> {
            t.iter().map(|x| x.as_ref().map_or(0, |v| v[0].0)).collect()
        };
        let maps: Vec<Vec<usize>> = (0..d.dims.len())
            .map(|k| match k {
                _ if k == hpos => pick(&th),
                _ if k == wpos => pick(&tw),
                _ => (0..d.dims[k]).collect(),
            })
            .collect();
        return op(move |args, outs| {
            gather_by_maps(args[0], &mut outs[0], &maps, &st);
            Ok(())
        });
    }
    if !is_f32_family(d.dtype) || !is_f32_family(o.dtype) {
        return Err(format!(
            "`image.resize2d` with method \"{}\" on `{}` tensors is not supported by the reference interpreter (it computes on float16, bfloat16 and float32)",
            c.str("method")?,
            d.dtype
        ));
    }
    let odims = o.dims.clone();
    op(move |args, outs| {
        let x = args[0].f32_view();
        outs[0].fill_f32(|out| {
            let r = odims.len();
            let mut coord = vec![0usize; r];
            for v in out.iter_mut() {
                let base: usize = (0..r)
                    .filter(|&k| k != hpos && k != wpos)
                    .map(|k| coord[k] * st[k])
                    .sum();
                *v = match (&th[coord[hpos]], &tw[coord[wpos]]) {
                    (Some(ys), Some(xs)) => {
                        let mut acc = 0f32;
                        for &(iy, wy) in ys {
                            let row = base + iy * st[hpos];
                            let mut s = 0f32;
                            for &(ix, wx) in xs {
                                s += wx * x[row + ix * st[wpos]];
                            }
                            acc += wy * s;
                        }
                        acc
                    }
                    _ => extrapolation,
                };
                for k in (0..r).rev() {
                    coord[k] += 1;
                    if coord[k] < odims[k] {
                        break;
                    }
                    coord[k] = 0;
                }
            }
        });
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(t: &[Taps]) -> Vec<usize> {
        t.iter().map(|x| x.as_ref().unwrap()[0].0).collect()
    }

    #[test]
    fn nearest_indices_by_mode() {
        use Coord::*;
        use Rounding::*;
        let n = |i, o, m, r| idx(&axis_taps(i, o, m, Method::Nearest, r, -0.75, false));
        // Upsampling 2 -> 4, asymmetric: x / 2.
        assert_eq!(n(2, 4, Asymmetric, Floor), vec![0, 0, 1, 1]);
        // half_pixel 2 -> 4: -0.25, 0.25, 0.75, 1.25.
        assert_eq!(n(2, 4, HalfPixel, PreferFloor), vec![0, 0, 1, 1]);
        assert_eq!(n(2, 4, HalfPixel, PreferCeil), vec![0, 0, 1, 1]);
        assert_eq!(n(2, 4, HalfPixel, Ceil), vec![0, 1, 1, 1]);
        // 3 -> 2 half_pixel: 0.25, 1.75; 4 -> 2: exactly 0.5 and 2.5.
        assert_eq!(n(4, 2, HalfPixel, PreferFloor), vec![0, 2]);
        assert_eq!(n(4, 2, HalfPixel, PreferCeil), vec![1, 3]);
        assert_eq!(n(4, 2, HalfPixel, HalfEven), vec![0, 2]);
        // align_corners 3 -> 5: 0, 0.5, 1, 1.5, 2.
        assert_eq!(n(3, 5, AlignCorners, PreferCeil), vec![0, 1, 1, 2, 2]);
        assert_eq!(n(3, 1, AlignCorners, Floor), vec![0]);
        // tf_half_pixel_for_nn 2 -> 3: 1/3, 1, 5/3.
        assert_eq!(n(2, 3, TfHalfPixelForNn, Floor), vec![0, 1, 1]);
        assert_eq!(n(4, 1, PytorchHalfPixel, Floor), vec![0]);
    }

    #[test]
    fn linear_and_cubic_weights() {
        // 2 -> 4 half_pixel, linear: -0.25 is the edge, 0.25 blends 3/4 and 1/4.
        let t = axis_taps(
            2,
            4,
            Coord::HalfPixel,
            Method::Linear,
            Rounding::Floor,
            0.0,
            false,
        );
        assert_eq!(t[0], Some(vec![(0, 0.25), (0, 0.75)]));
        assert_eq!(t[1], Some(vec![(0, 0.75), (1, 0.25)]));
        // Keys' weights sum to 1 and interpolate at integers.
        for &tt in &[0.0, 0.25, 0.5, 0.9] {
            let w = cubic_weights(tt, -0.75);
            assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
        assert_eq!(cubic_weights(0.0, -0.5), [0.0, 1.0, 0.0, 0.0]);
        // At t = 0.5 with a = -0.5: [-1/16, 9/16, 9/16, -1/16].
        let w = cubic_weights(0.5, -0.5);
        for (a, b) in w.iter().zip([-0.0625, 0.5625, 0.5625, -0.0625]) {
            assert!((a - b).abs() < 1e-12);
        }
        // Excluding outside neighbours renormalises the rest.
        let t = axis_taps(
            4,
            8,
            Coord::HalfPixel,
            Method::Cubic,
            Rounding::Floor,
            -0.75,
            true,
        );
        let first = t[0].as_ref().unwrap();
        let sum: f32 = first.iter().map(|x| x.1).sum();
        assert!((sum - 1.0).abs() < 1e-6);
        assert_eq!(first[0].1, 0.0);
        // tf_crop_and_resize outside the region extrapolates.
        let t = axis_taps(
            4,
            3,
            Coord::TfCropAndResize(0.5, 1.5),
            Method::Linear,
            Rounding::Floor,
            0.0,
            false,
        );
        assert!(t[0].is_some() && t[2].is_none());
    }
}
