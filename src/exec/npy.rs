//! NumPy `.npy` files for inputs and outputs, through the `npyz` crate.
//!
//! Read: `bool`, signed and unsigned integers of 8 to 64 bits, `float16`, `float32` and
//! `float64`, either byte order, C or Fortran order (a Fortran-ordered array is transposed into
//! row-major order). Written: the tensor's own dtype in little-endian C order; `bfloat16`, which
//! NumPy lacks, is written as `float32`.

use crate::exec::ops::transpose_reversed;
use crate::exec::tensor::{Tensor, BF16, U16, U32, U64};
use crate::ir::DType;
use half::f16;
use npyz::{TypeChar, WriterBuilder};

/// Reads a `.npy` file's bytes into a tensor.
pub fn read(bytes: &[u8]) -> Result<Tensor, String> {
    let npy = npyz::NpyFile::new(bytes).map_err(|e| format!("not a valid .npy file: {e}"))?;
    let npyz::DType::Plain(ts) = npy.dtype() else {
        return Err("structured (record) arrays are not supported".into());
    };
    let shape: Vec<usize> = npy
        .shape()
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| "an extent is too large".to_string()))
        .collect::<Result<_, _>>()?;
    let fortran = npy.order() == npyz::Order::Fortran && shape.len() > 1;
    // Fortran order: the data is the row-major array of the reversed shape.
    let stored: Vec<usize> = if fortran {
        shape.iter().rev().copied().collect()
    } else {
        shape.clone()
    };
    let err = |e: std::io::Error| format!("cannot read the data: {e}");
    let t = match (ts.type_char(), ts.size_field()) {
        (TypeChar::Bool, 1) => {
            let v: Vec<bool> = npy.into_vec().map_err(err)?;
            let bytes: Vec<u8> = v.into_iter().map(u8::from).collect();
            Tensor::from_bytes(DType::BOOL, &stored, &bytes)
        }
        (TypeChar::Float, 2) => {
            Tensor::from_slice(DType::F16, &stored, &npy.into_vec::<f16>().map_err(err)?)
        }
        (TypeChar::Float, 4) => {
            Tensor::from_slice(DType::F32, &stored, &npy.into_vec::<f32>().map_err(err)?)
        }
        (TypeChar::Float, 8) => {
            Tensor::from_slice(DType::F64, &stored, &npy.into_vec::<f64>().map_err(err)?)
        }
        (TypeChar::Int, 1) => {
            Tensor::from_slice(DType::I8, &stored, &npy.into_vec::<i8>().map_err(err)?)
        }
        (TypeChar::Int, 2) => {
            Tensor::from_slice(DType::I16, &stored, &npy.into_vec::<i16>().map_err(err)?)
        }
        (TypeChar::Int, 4) => {
            Tensor::from_slice(DType::I32, &stored, &npy.into_vec::<i32>().map_err(err)?)
        }
        (TypeChar::Int, 8) => {
            Tensor::from_slice(DType::I64, &stored, &npy.into_vec::<i64>().map_err(err)?)
        }
        (TypeChar::Uint, 1) => {
            Tensor::from_slice(DType::U8, &stored, &npy.into_vec::<u8>().map_err(err)?)
        }
        (TypeChar::Uint, 2) => {
            Tensor::from_slice(U16, &stored, &npy.into_vec::<u16>().map_err(err)?)
        }
        (TypeChar::Uint, 4) => {
            Tensor::from_slice(U32, &stored, &npy.into_vec::<u32>().map_err(err)?)
        }
        (TypeChar::Uint, 8) => {
            Tensor::from_slice(U64, &stored, &npy.into_vec::<u64>().map_err(err)?)
        }
        _ => return Err(format!("the dtype `{ts}` is not supported")),
    }
    .map_err(|e| e.0)?;
    if fortran {
        transpose_reversed(&t)
    } else {
        Ok(t)
    }
}

/// The `.npy` bytes of a tensor.
pub fn write(t: &Tensor) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
    let err = |e: std::io::Error| format!("cannot encode the array: {e}");
    macro_rules! put {
        ($ty:ty, $iter:expr) => {{
            let mut w = npyz::WriteOptions::<$ty>::new()
                .default_dtype()
                .shape(&shape)
                .writer(&mut buf)
                .begin_nd()
                .map_err(err)?;
            w.extend($iter).map_err(err)?;
            w.finish().map_err(err)?;
        }};
    }
    let d = t.dtype();
    match d {
        _ if d == DType::BOOL => put!(bool, t.as_slice::<u8>().iter().map(|&b| b != 0)),
        _ if d == DType::F16 => put!(f16, t.as_slice::<f16>().iter().copied()),
        _ if d == DType::F32 => put!(f32, t.as_slice::<f32>().iter().copied()),
        _ if d == DType::F64 => put!(f64, t.as_slice::<f64>().iter().copied()),
        _ if d == BF16 => put!(f32, t.f32_view().iter().copied()),
        _ if d == DType::I8 => put!(i8, t.as_slice::<i8>().iter().copied()),
        _ if d == DType::I16 => put!(i16, t.as_slice::<i16>().iter().copied()),
        _ if d == DType::I32 => put!(i32, t.as_slice::<i32>().iter().copied()),
        _ if d == DType::I64 => put!(i64, t.as_slice::<i64>().iter().copied()),
        _ if d == DType::U8 => put!(u8, t.as_slice::<u8>().iter().copied()),
        _ if d == U16 => put!(u16, t.as_slice::<u16>().iter().copied()),
        _ if d == U32 => put!(u32, t.as_slice::<u32>().iter().copied()),
        _ if d == U64 => put!(u64, t.as_slice::<u64>().iter().copied()),
        _ => return Err(format!("tensors of dtype `{d}` cannot be written as .npy")),
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_dtype() {
        for d in [
            DType::BOOL,
            DType::F16,
            DType::F32,
            DType::F64,
            DType::I8,
            DType::I64,
            U16,
            U64,
        ] {
            let mut t = Tensor::zeros(d, &[2, 3]).unwrap();
            for i in 0..6 {
                t.set_from_f64(i, i as f64 - 1.0);
            }
            let back = read(&write(&t).unwrap()).unwrap();
            assert_eq!(back, t, "{d}");
        }
        assert!(read(b"not an npy file").is_err());
    }
}
