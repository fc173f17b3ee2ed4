//! Summaries of output tensors and comparisons of two runs.

use crate::ir::DType;
use crate::runtime::exec::tensor::{is_f32_family, Tensor};

/// A short description of a tensor: its type and statistics of its values.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Extents.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// Smallest finite value (`None` if there is none).
    pub min: Option<f64>,
    /// Largest finite value.
    pub max: Option<f64>,
    /// Mean of the finite values.
    pub mean: Option<f64>,
    /// CRC-32 of the data bytes (little-endian, row-major), as 8 hex digits.
    pub checksum: String,
    /// Number of NaN and infinite elements.
    pub non_finite: usize,
}

/// Summarises a tensor.
pub fn summarize(t: &Tensor) -> Summary {
    let (mut min, mut max, mut sum, mut n) = (f64::INFINITY, f64::NEG_INFINITY, 0f64, 0usize);
    let mut visit = |v: f64| {
        if v.is_finite() {
            min = min.min(v);
            max = max.max(v);
            sum += v;
            n += 1;
        }
    };
    if is_f32_family(t.dtype()) {
        t.f32_view().iter().for_each(|&v| visit(v as f64));
    } else {
        (0..t.numel()).for_each(|i| visit(t.get_f64(i)));
    }
    let some = |v: f64| (n > 0).then_some(v);
    Summary {
        shape: t.shape().to_vec(),
        dtype: t.dtype(),
        min: some(min),
        max: some(max),
        mean: some(sum / n.max(1) as f64),
        checksum: format!("{:08x}", crc32fast::hash(t.bytes())),
        non_finite: t.count_non_finite(),
    }
}

/// Why two runs are compared, which sets how far apart their outputs may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Two models meant to compute the same thing (`collage run --compare-with`).
    Models,
    /// Generated code against the reference interpreter (`collage run --check-reference`):
    /// kernels compute in `float32` with vectorised (reassociated) sums, fused multiply-adds
    /// and vector math, and do not round `float16` intermediates.
    GeneratedCode,
    /// A whole placement of a model against the reference interpreter (`collage bench`): the
    /// backends reassociate sums and use vector math, and errors grow with depth.
    Placement,
}

/// The one tolerance table: the default `(rtol, atol)` for comparing outputs of a dtype, by
/// purpose (a flag such as `--rtol` overrides it). Integers and bools are always exact.
///
/// | purpose          | `float32`    | `float64`      | `float16`, `bfloat16` | other floats |
/// |------------------|--------------|----------------|-----------------------|--------------|
/// | `Models`         | 1e-5, 1e-5   | 1e-9, 1e-12    | 1e-2, 1e-2            | 1e-2, 1e-2   |
/// | `GeneratedCode`  | 1e-4, 1e-4   | 1e-9, 1e-12    | 5e-2, 5e-2            | 1e-2, 1e-2   |
/// | `Placement`      | 1e-3, 1e-3   | 1e-3, 1e-3     | 5e-2, 5e-2            | 5e-2, 5e-2   |
pub fn tolerance(purpose: Purpose, d: DType) -> (f64, f64) {
    use Purpose::{GeneratedCode, Models, Placement};
    enum Kind {
        F32,
        F64,
        Half,
        OtherFloat,
        Exact,
    }
    let kind = if d == DType::F32 {
        Kind::F32
    } else if d == DType::F64 {
        Kind::F64
    } else if is_f32_family(d) {
        Kind::Half
    } else if d.is_float() {
        Kind::OtherFloat
    } else {
        Kind::Exact
    };
    match (purpose, kind) {
        (_, Kind::Exact) => (0.0, 0.0),
        (Models, Kind::F32) => (1e-5, 1e-5),
        (Models | GeneratedCode, Kind::F64) => (1e-9, 1e-12),
        (Models | GeneratedCode, Kind::OtherFloat) | (Models, Kind::Half) => (1e-2, 1e-2),
        (GeneratedCode, Kind::F32) => (1e-4, 1e-4),
        (GeneratedCode, Kind::Half) => (5e-2, 5e-2),
        (Placement, Kind::F32 | Kind::F64) => (1e-3, 1e-3),
        (Placement, Kind::Half | Kind::OtherFloat) => (5e-2, 5e-2),
    }
}

/// How one tensor differs from another.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    /// Largest `|actual - expected|` (infinite where one is NaN or infinite and the other not).
    pub max_abs: f64,
    /// Largest `|actual - expected| / |expected|` (infinite where `expected` is 0 and they
    /// differ).
    pub max_rel: f64,
    /// Elements with `|actual - expected| > atol + rtol * |expected|`.
    pub mismatched: usize,
    /// Whether the two are bit for bit the same.
    pub identical: bool,
}

impl Diff {
    /// Whether every element is within the tolerance.
    pub fn within(&self) -> bool {
        self.mismatched == 0
    }
}

/// Compares `actual` with `expected` (same shape and dtype, or an error saying how they differ).
/// Elements that are bit-identical, or both NaN, count as equal.
pub fn compare(actual: &Tensor, expected: &Tensor, rtol: f64, atol: f64) -> Result<Diff, String> {
    if actual.dtype() != expected.dtype() || actual.shape() != expected.shape() {
        return Err(format!("`{}` against `{}`", actual.ty(), expected.ty()));
    }
    let identical = actual.bytes() == expected.bytes();
    let mut d = Diff {
        max_abs: 0.0,
        max_rel: 0.0,
        mismatched: 0,
        identical,
    };
    if identical {
        return Ok(d);
    }
    let (a, e): (Vec<f64>, Vec<f64>) = if is_f32_family(actual.dtype()) {
        (
            actual.f32_view().iter().map(|&v| v as f64).collect(),
            expected.f32_view().iter().map(|&v| v as f64).collect(),
        )
    } else {
        (
            (0..actual.numel()).map(|i| actual.get_f64(i)).collect(),
            (0..expected.numel()).map(|i| expected.get_f64(i)).collect(),
        )
    };
    for (&x, &y) in a.iter().zip(&e) {
        if x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()) {
            continue;
        }
        let abs = if x.is_finite() && y.is_finite() {
            (x - y).abs()
        } else if x == y {
            0.0
        } else {
            f64::INFINITY
        };
        let rel = if abs == 0.0 {
            0.0
        } else if y == 0.0 {
            f64::INFINITY
        } else {
            abs / y.abs()
        };
        d.max_abs = d.max_abs.max(abs);
        d.max_rel = d.max_rel.max(rel);
        let bound = atol + rtol * y.abs();
        if abs > bound || bound.is_nan() {
            d.mismatched += 1;
        }
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_tolerances() {
        let t = Tensor::from_slice(DType::F32, &[4], &[1.0f32, -2.0, f32::NAN, 4.0]).unwrap();
        let s = summarize(&t);
        assert_eq!(
            (s.min, s.max, s.mean, s.non_finite),
            (Some(-2.0), Some(4.0), Some(1.0), 1)
        );
        assert_eq!(s.checksum.len(), 8);
        let u = Tensor::from_slice(DType::F32, &[4], &[1.0f32, -2.0, f32::NAN, 4.00001]).unwrap();
        let d = compare(&u, &t, 1e-5, 1e-5).unwrap();
        assert!(!d.identical && d.within() && d.max_abs > 0.0);
        let d = compare(&u, &t, 0.0, 0.0).unwrap();
        assert_eq!(d.mismatched, 1);
        let v = Tensor::from_slice(DType::F32, &[4], &[1.0f32, -2.0, 3.0, 4.0]).unwrap();
        assert_eq!(compare(&v, &t, 1.0, 1.0).unwrap().max_abs, f64::INFINITY);
        assert!(compare(&t, &t, 0.0, 0.0).unwrap().identical);
        let w = Tensor::zeros(DType::F16, &[4]).unwrap();
        assert!(compare(&w, &t, 0.0, 0.0).is_err());
    }

    #[test]
    fn tolerances() {
        let default_tolerance = |d| tolerance(Purpose::Placement, d);
        assert_eq!(default_tolerance(crate::ir::DType::F32), (1e-3, 1e-3));
        assert_eq!(default_tolerance(crate::ir::DType::F16), (5e-2, 5e-2));
        assert_eq!(default_tolerance(crate::ir::DType::I64), (0.0, 0.0));
    }
}
