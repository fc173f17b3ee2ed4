//! Tensors: a dtype, a static shape and contiguous row-major storage.
//!
//! The storage is a byte buffer of whole 64-byte lines starting on a cache line ([`Storage`]), so
//! any element type can be viewed in place with `bytemuck`, and vector loads and stores of the
//! data do not straddle cache lines. `bool` is one byte per element (0 or 1), as in
//! NumPy and TVM. Floating-point work on `float16` and `bfloat16` tensors goes through `float32`
//! views ([`Tensor::f32_view`], [`Tensor::fill_f32`]): every operator computes in `float32` and
//! rounds its result once, to nearest even, when it is stored.

use crate::ir::{DType, DTypeCode, TensorType};
use half::{bf16, f16};
use std::borrow::Cow;
use std::fmt;
use std::ptr::NonNull;

/// The largest single tensor the interpreter allocates (bytes). Larger shapes are an error
/// instead of an allocation failure that would abort the process.
pub const MAX_TENSOR_BYTES: u64 = 1 << 36;

/// An element type that can be viewed in a tensor's storage.
pub trait Elem: bytemuck::Pod + Send + Sync + 'static {
    /// Whether tensors of `dtype` store elements of this type.
    fn stores(dtype: DType) -> bool;
}

macro_rules! elem {
    ($($t:ty => $($d:expr),+;)*) => {$(
        impl Elem for $t {
            fn stores(dtype: DType) -> bool {
                $(dtype == $d)||+
            }
        }
    )*};
}

/// `bfloat16`.
pub const BF16: DType = DType::scalar(DTypeCode::BFloat, 16);
/// `uint16`.
pub const U16: DType = DType::scalar(DTypeCode::UInt, 16);
/// `uint32`.
pub const U32: DType = DType::scalar(DTypeCode::UInt, 32);
/// `uint64`.
pub const U64: DType = DType::scalar(DTypeCode::UInt, 64);

elem! {
    f32 => DType::F32;
    f64 => DType::F64;
    f16 => DType::F16;
    bf16 => BF16;
    i8 => DType::I8;
    i16 => DType::I16;
    i32 => DType::I32;
    i64 => DType::I64;
    u8 => DType::U8, DType::BOOL;
    u16 => U16;
    u32 => U32;
    u64 => U64;
}

/// Whether tensors of this dtype can be stored and moved (every operator that only moves data
/// accepts them).
pub fn storable(d: DType) -> bool {
    elem_size(d).is_some()
}

/// Bytes per element of a storable dtype.
pub fn elem_size(d: DType) -> Option<usize> {
    if d.lanes != 1 {
        return None;
    }
    match (d.code, d.bits) {
        (DTypeCode::Float, 16 | 32 | 64) | (DTypeCode::BFloat, 16) => Some(d.bits as usize / 8),
        (DTypeCode::Int | DTypeCode::UInt, 8 | 16 | 32 | 64) => Some(d.bits as usize / 8),
        (DTypeCode::UInt, 1) => Some(1),
        _ => None,
    }
}

/// Whether float operators run on this dtype (through `float32`): `float16`, `bfloat16` and
/// `float32`.
pub fn is_f32_family(d: DType) -> bool {
    d == DType::F32 || d == DType::F16 || d == BF16
}

/// Whether integer arithmetic runs on this dtype (through `int64`): signed integers and unsigned
/// integers narrower than 64 bits.
pub fn is_i64_family(d: DType) -> bool {
    matches!(
        (d.code, d.bits, d.lanes),
        (DTypeCode::Int, 8 | 16 | 32 | 64, 1) | (DTypeCode::UInt, 8 | 16 | 32, 1)
    )
}

/// Why a tensor could not be created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorError(pub String);

impl fmt::Display for TensorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Number of elements of a shape, checked against overflow.
pub fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// Row-major strides (in elements) of a shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// A static tensor type: dtype and extents.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shape {
    /// Element type.
    pub dtype: DType,
    /// Extents, outermost first.
    pub dims: Vec<usize>,
}

impl Shape {
    /// The static form of a tensor type, if every extent is static and non-negative.
    pub fn of(t: &TensorType) -> Option<Shape> {
        let dims = t
            .shape
            .iter()
            .map(|d| d.fixed().and_then(|n| usize::try_from(n).ok()))
            .collect::<Option<Vec<_>>>()?;
        Some(Shape {
            dtype: t.dtype,
            dims,
        })
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        numel(&self.dims).unwrap_or(usize::MAX)
    }

    /// Size in bytes (saturating).
    pub fn bytes(&self) -> u64 {
        (self.numel() as u64).saturating_mul(elem_size(self.dtype).unwrap_or(1) as u64)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.dims.is_empty() {
            return write!(f, "{}", self.dtype);
        }
        f.write_str("Tensor[(")?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "), {}]", self.dtype)
    }
}

/// A tensor value.
#[derive(Clone, PartialEq)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    /// The first `len` bytes of the storage are the data; the rest is zero.
    storage: Storage,
    len: usize,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({}, {} bytes)", self.ty(), self.len)
    }
}

/// Alignment of tensor storage in bytes: a cache line. Measured here: oneDNN's GELU eltwise on
/// 1600×3072 (one thread) took 22% longer with its source and destination 16 bytes off a line
/// (where `malloc` puts large blocks) than on line boundaries.
pub const ALIGN: usize = 64;

/// Zero-initialised storage of whole [`ALIGN`]-byte lines, starting on a line boundary.
///
/// Allocated with `calloc` and aligned within the block: for large blocks `calloc` hands out
/// fresh pages without writing them (an aligned allocation through Rust's allocator would
/// write every byte with zeros first, one more pass over the memory of every new tensor).
pub struct Storage {
    /// The block as `calloc` returned it (`None`: no lines, nothing allocated).
    base: Option<NonNull<u8>>,
    /// The first line.
    data: NonNull<u8>,
    lines: usize,
}

// SAFETY: `Storage` owns its block exclusively, like a `Vec<u8>`.
unsafe impl Send for Storage {}
// SAFETY: shared references only read.
unsafe impl Sync for Storage {}

impl Storage {
    /// `lines` zeroed lines, or an error when they cannot be allocated (never an abort).
    pub fn zeroed(lines: usize) -> Result<Storage, TensorError> {
        let too_large = || {
            TensorError(format!(
                "cannot allocate {lines} × {ALIGN} bytes for a tensor"
            ))
        };
        if lines == 0 {
            return Ok(Storage {
                base: None,
                // A dangling pointer on a line boundary: empty slices of any element type.
                data: NonNull::new(ALIGN as *mut u8).expect("non-null"),
                lines: 0,
            });
        }
        let bytes = lines
            .checked_mul(ALIGN)
            .and_then(|b| b.checked_add(ALIGN))
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(too_large)?;
        // SAFETY: a plain allocation, checked for null below.
        let base =
            NonNull::new(unsafe { libc::calloc(bytes, 1) } as *mut u8).ok_or_else(too_large)?;
        let off = base.as_ptr().align_offset(ALIGN);
        // SAFETY: `off < ALIGN`, so `lines * ALIGN` bytes from `data` lie inside the block.
        let data = unsafe { NonNull::new_unchecked(base.as_ptr().add(off)) };
        Ok(Storage {
            base: Some(base),
            data,
            lines,
        })
    }

    /// The number of lines.
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// Every byte (`lines × ALIGN`).
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `data` points at `lines * ALIGN` initialised bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.lines * ALIGN) }
    }

    /// Every byte, mutably.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr(), self.lines * ALIGN) }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Some(base) = self.base {
            // SAFETY: `base` came from `calloc` and is freed once.
            unsafe { libc::free(base.as_ptr() as *mut libc::c_void) }
        }
    }
}

impl Clone for Storage {
    fn clone(&self) -> Storage {
        let mut s = Storage::zeroed(self.lines).unwrap_or_else(|e| panic!("{}", e.0));
        s.as_bytes_mut().copy_from_slice(self.as_bytes());
        s
    }
}

impl PartialEq for Storage {
    fn eq(&self, other: &Storage) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Storage({} lines)", self.lines)
    }
}

impl Tensor {
    /// A zero-filled tensor.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Result<Tensor, TensorError> {
        let es = elem_size(dtype)
            .ok_or_else(|| TensorError(format!("tensors of dtype `{dtype}` are not supported")))?;
        let n = numel(shape)
            .and_then(|n| n.checked_mul(es))
            .filter(|&b| b as u64 <= MAX_TENSOR_BYTES)
            .ok_or_else(|| {
                TensorError(format!(
                    "a tensor of shape {shape:?} and dtype `{dtype}` is larger than the {} GiB the interpreter allocates at once",
                    MAX_TENSOR_BYTES >> 30
                ))
            })?;
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            storage: Storage::zeroed(n.div_ceil(ALIGN))?,
            len: n,
        })
    }

    /// A zero-filled tensor of a static type.
    pub fn zeros_of(s: &Shape) -> Result<Tensor, TensorError> {
        Tensor::zeros(s.dtype, &s.dims)
    }

    /// The number of storage lines a tensor of this type holds (`None` when the dtype is not
    /// supported or the size overflows).
    pub fn lines_of(s: &Shape) -> Option<usize> {
        let es = elem_size(s.dtype)?;
        numel(&s.dims)?.checked_mul(es).map(|n| n.div_ceil(ALIGN))
    }

    /// A tensor of a static type on the storage of a released tensor (`storage` must be
    /// exactly [`Tensor::lines_of`] long; it is returned otherwise). Its elements are whatever
    /// the storage held (the bytes after the data are cleared, as equality needs): for kernels
    /// that write every element.
    pub fn on_storage(s: &Shape, mut storage: Storage) -> Result<Tensor, Storage> {
        let Some(es) = elem_size(s.dtype) else {
            return Err(storage);
        };
        let Some(n) = numel(&s.dims).and_then(|n| n.checked_mul(es)) else {
            return Err(storage);
        };
        if storage.lines() != n.div_ceil(ALIGN) || n as u64 > MAX_TENSOR_BYTES {
            return Err(storage);
        }
        storage.as_bytes_mut()[n..].fill(0);
        Ok(Tensor {
            dtype: s.dtype,
            shape: s.dims.clone(),
            storage,
            len: n,
        })
    }

    /// The tensor's storage, for reuse ([`Tensor::on_storage`]).
    pub fn into_storage(self) -> Storage {
        self.storage
    }

    /// A tensor holding the given elements (which must match the dtype and the shape).
    pub fn from_slice<T: Elem>(
        dtype: DType,
        shape: &[usize],
        data: &[T],
    ) -> Result<Tensor, TensorError> {
        if !T::stores(dtype) {
            return Err(TensorError(format!(
                "elements of this kind cannot be stored as `{dtype}`"
            )));
        }
        if numel(shape) != Some(data.len()) {
            return Err(TensorError(format!(
                "{} elements do not fill shape {shape:?}",
                data.len()
            )));
        }
        let mut t = Tensor::zeros(dtype, shape)?;
        t.as_mut_slice::<T>().copy_from_slice(data);
        Ok(t)
    }

    /// A tensor from raw little-endian bytes (bools as 0/1 bytes).
    pub fn from_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Tensor, TensorError> {
        let mut t = Tensor::zeros(dtype, shape)?;
        if bytes.len() != t.len {
            return Err(TensorError(format!(
                "{} bytes do not fill a `{}` ({} bytes)",
                bytes.len(),
                t.ty(),
                t.len
            )));
        }
        t.bytes_mut().copy_from_slice(bytes);
        if dtype == DType::BOOL {
            for b in t.bytes_mut() {
                *b = (*b != 0) as u8;
            }
        }
        Ok(t)
    }

    /// A rank-0 tensor holding `v` converted to `dtype` (floats rounded, integers wrapped).
    pub fn scalar(dtype: DType, v: f64) -> Result<Tensor, TensorError> {
        let mut t = Tensor::zeros(dtype, &[])?;
        t.set_from_f64(0, v);
        Ok(t)
    }

    /// A rank-0 integer tensor holding `v` (wrapped to the dtype's width).
    pub fn scalar_int(dtype: DType, v: i64) -> Result<Tensor, TensorError> {
        let mut t = Tensor::zeros(dtype, &[])?;
        t.set_from_i64(0, v);
        Ok(t)
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The extents.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The static type.
    pub fn ty(&self) -> Shape {
        Shape {
            dtype: self.dtype,
            dims: self.shape.clone(),
        }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.len / self.elem_size()
    }

    /// Bytes per element.
    pub fn elem_size(&self) -> usize {
        elem_size(self.dtype).unwrap_or(1)
    }

    /// Size of the data in bytes.
    pub fn nbytes(&self) -> usize {
        self.len
    }

    /// The data as bytes (little-endian, row-major).
    pub fn bytes(&self) -> &[u8] {
        &self.storage.as_bytes()[..self.len]
    }

    /// The data as mutable bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.storage.as_bytes_mut()[..len]
    }

    /// The elements as a slice of `T`, which must be the dtype's storage type.
    pub fn as_slice<T: Elem>(&self) -> &[T] {
        assert!(
            T::stores(self.dtype),
            "typed view of the wrong element type"
        );
        bytemuck::cast_slice(self.bytes())
    }

    /// The elements as a mutable slice of `T`.
    pub fn as_mut_slice<T: Elem>(&mut self) -> &mut [T] {
        assert!(
            T::stores(self.dtype),
            "typed view of the wrong element type"
        );
        bytemuck::cast_slice_mut(self.bytes_mut())
    }

    /// The same data with another shape of the same element count.
    pub fn reshaped(mut self, shape: &[usize]) -> Tensor {
        debug_assert_eq!(numel(shape), Some(self.numel()));
        self.shape = shape.to_vec();
        self
    }

    /// Float elements as `f32` (borrowed for `float32`, converted for `float16`/`bfloat16`).
    pub fn f32_view(&self) -> Cow<'_, [f32]> {
        match self.dtype {
            d if d == DType::F32 => Cow::Borrowed(self.as_slice::<f32>()),
            d if d == DType::F16 => {
                let src = self.as_slice::<f16>();
                let mut v = vec![0f32; src.len()];
                half::slice::HalfFloatSliceExt::convert_to_f32_slice(src, &mut v);
                Cow::Owned(v)
            }
            d if d == BF16 => {
                Cow::Owned(self.as_slice::<bf16>().iter().map(|x| x.to_f32()).collect())
            }
            _ => Cow::Owned((0..self.numel()).map(|i| self.get_f64(i) as f32).collect()),
        }
    }

    /// Writes `float32` values into a float tensor, rounding to its dtype.
    pub fn store_f32(&mut self, values: &[f32]) {
        match self.dtype {
            d if d == DType::F32 => self.as_mut_slice::<f32>().copy_from_slice(values),
            d if d == DType::F16 => half::slice::HalfFloatSliceExt::convert_from_f32_slice(
                self.as_mut_slice::<f16>(),
                values,
            ),
            d if d == BF16 => {
                for (o, &v) in self.as_mut_slice::<bf16>().iter_mut().zip(values) {
                    *o = bf16::from_f32(v);
                }
            }
            _ => {
                for (i, &v) in values.iter().enumerate() {
                    self.set_from_f64(i, v as f64);
                }
            }
        }
    }

    /// Runs `f` on the elements as a mutable `f32` slice: in place for `float32`, otherwise on a
    /// zeroed scratch buffer whose values are rounded into the tensor afterwards.
    pub fn fill_f32<R>(&mut self, f: impl FnOnce(&mut [f32]) -> R) -> R {
        if self.dtype == DType::F32 {
            f(self.as_mut_slice::<f32>())
        } else {
            let mut tmp = vec![0f32; self.numel()];
            let r = f(&mut tmp);
            self.store_f32(&tmp);
            r
        }
    }

    /// Integer (or bool) elements as `i64` (borrowed for `int64`).
    pub fn i64_view(&self) -> Cow<'_, [i64]> {
        if self.dtype == DType::I64 {
            Cow::Borrowed(self.as_slice::<i64>())
        } else {
            Cow::Owned((0..self.numel()).map(|i| self.get_i64(i)).collect())
        }
    }

    /// Runs `f` on the elements as a mutable `i64` slice, wrapping the results to the dtype.
    pub fn fill_i64<R>(&mut self, f: impl FnOnce(&mut [i64]) -> R) -> R {
        if self.dtype == DType::I64 {
            f(self.as_mut_slice::<i64>())
        } else {
            let mut tmp = vec![0i64; self.numel()];
            let r = f(&mut tmp);
            for (i, &v) in tmp.iter().enumerate() {
                self.set_from_i64(i, v);
            }
            r
        }
    }

    /// Element `i` as `f64` (integers converted, bools 0/1).
    pub fn get_f64(&self, i: usize) -> f64 {
        let d = self.dtype;
        match (d.code, d.bits) {
            (DTypeCode::Float, 16) => self.as_slice::<f16>()[i].to_f64(),
            (DTypeCode::Float, 32) => self.as_slice::<f32>()[i] as f64,
            (DTypeCode::Float, 64) => self.as_slice::<f64>()[i],
            (DTypeCode::BFloat, 16) => self.as_slice::<bf16>()[i].to_f64(),
            (DTypeCode::UInt, 64) => self.as_slice::<u64>()[i] as f64,
            _ => self.get_i64(i) as f64,
        }
    }

    /// Element `i` of an integer or bool tensor as `i64` (floats truncated toward zero, `u64`
    /// reinterpreted).
    pub fn get_i64(&self, i: usize) -> i64 {
        let d = self.dtype;
        match (d.code, d.bits) {
            (DTypeCode::Int, 8) => self.as_slice::<i8>()[i] as i64,
            (DTypeCode::Int, 16) => self.as_slice::<i16>()[i] as i64,
            (DTypeCode::Int, 32) => self.as_slice::<i32>()[i] as i64,
            (DTypeCode::Int, 64) => self.as_slice::<i64>()[i],
            (DTypeCode::UInt, 1 | 8) => self.as_slice::<u8>()[i] as i64,
            (DTypeCode::UInt, 16) => self.as_slice::<u16>()[i] as i64,
            (DTypeCode::UInt, 32) => self.as_slice::<u32>()[i] as i64,
            (DTypeCode::UInt, 64) => self.as_slice::<u64>()[i] as i64,
            _ => self.get_f64(i) as i64,
        }
    }

    /// Sets element `i` from an `f64`: rounded to nearest for floats, truncated (saturating)
    /// for integers, `!= 0` for bool.
    pub fn set_from_f64(&mut self, i: usize, v: f64) {
        let d = self.dtype;
        match (d.code, d.bits) {
            (DTypeCode::Float, 16) => self.as_mut_slice::<f16>()[i] = f16::from_f64(v),
            (DTypeCode::Float, 32) => self.as_mut_slice::<f32>()[i] = v as f32,
            (DTypeCode::Float, 64) => self.as_mut_slice::<f64>()[i] = v,
            (DTypeCode::BFloat, 16) => self.as_mut_slice::<bf16>()[i] = bf16::from_f64(v),
            (DTypeCode::UInt, 1) => self.as_mut_slice::<u8>()[i] = (v != 0.0) as u8,
            (DTypeCode::UInt, 64) => self.as_mut_slice::<u64>()[i] = v as u64,
            _ => self.set_from_i64(i, v as i64),
        }
    }

    /// Sets element `i` from an `i64`, wrapping to the dtype's width (`!= 0` for bool; floats
    /// converted).
    pub fn set_from_i64(&mut self, i: usize, v: i64) {
        let d = self.dtype;
        match (d.code, d.bits) {
            (DTypeCode::Int, 8) => self.as_mut_slice::<i8>()[i] = v as i8,
            (DTypeCode::Int, 16) => self.as_mut_slice::<i16>()[i] = v as i16,
            (DTypeCode::Int, 32) => self.as_mut_slice::<i32>()[i] = v as i32,
            (DTypeCode::Int, 64) => self.as_mut_slice::<i64>()[i] = v,
            (DTypeCode::UInt, 1) => self.as_mut_slice::<u8>()[i] = (v != 0) as u8,
            (DTypeCode::UInt, 8) => self.as_mut_slice::<u8>()[i] = v as u8,
            (DTypeCode::UInt, 16) => self.as_mut_slice::<u16>()[i] = v as u16,
            (DTypeCode::UInt, 32) => self.as_mut_slice::<u32>()[i] = v as u32,
            (DTypeCode::UInt, 64) => self.as_mut_slice::<u64>()[i] = v as u64,
            _ => self.set_from_f64(i, v as f64),
        }
    }

    /// Whether every element is finite (always true for integer and bool tensors).
    pub fn all_finite(&self) -> bool {
        self.count_non_finite() == 0
    }

    /// Number of NaN or infinite elements.
    pub fn count_non_finite(&self) -> usize {
        if !self.dtype.is_float() {
            return 0;
        }
        match self.dtype {
            d if d == DType::F32 => self
                .as_slice::<f32>()
                .iter()
                .filter(|x| !x.is_finite())
                .count(),
            d if d == DType::F16 => self
                .as_slice::<f16>()
                .iter()
                .filter(|x| !x.is_finite())
                .count(),
            _ => (0..self.numel())
                .filter(|&i| !self.get_f64(i).is_finite())
                .count(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reused_storage_keeps_its_values_and_zeroes_the_padding() {
        let s = Shape {
            dtype: DType::F16,
            dims: vec![3],
        };
        assert_eq!(Tensor::lines_of(&s), Some(1));
        let mut st = Storage::zeroed(1).unwrap();
        st.as_bytes_mut().fill(0xff);
        let t = Tensor::on_storage(&s, st).unwrap();
        assert_eq!(t.nbytes(), 6);
        assert_eq!(t.shape(), &[3]);
        // The data keeps what the storage held; the bytes after it are cleared.
        assert_eq!(t.bytes(), &[0xff; 6]);
        let st = t.into_storage();
        assert_eq!(&st.as_bytes()[..6], &[0xff; 6]);
        assert!(st.as_bytes()[6..].iter().all(|&b| b == 0));
        let s = Shape {
            dtype: DType::F32,
            dims: vec![20],
        };
        assert_eq!(Tensor::lines_of(&s), Some(2));
        // The wrong size is given back.
        let st = Tensor::on_storage(&s, Storage::zeroed(3).unwrap()).unwrap_err();
        assert_eq!(st.lines(), 3);
    }

    #[test]
    fn storage_is_aligned_zeroed_and_cloned() {
        for lines in [0, 1, 3, 5000] {
            let mut st = Storage::zeroed(lines).unwrap();
            assert_eq!(st.as_bytes().as_ptr() as usize % ALIGN, 0);
            assert_eq!(st.as_bytes().len(), lines * ALIGN);
            assert!(st.as_bytes().iter().all(|&b| b == 0));
            if lines > 0 {
                st.as_bytes_mut()[lines * ALIGN - 1] = 7;
            }
            let c = st.clone();
            assert_eq!(c.as_bytes().as_ptr() as usize % ALIGN, 0);
            assert_eq!(c, st);
        }
        let t = Tensor::zeros(DType::F32, &[3, 5]).unwrap();
        assert_eq!(t.bytes().as_ptr() as usize % ALIGN, 0);
        assert!(Storage::zeroed(usize::MAX / 2).is_err());
    }

    #[test]
    fn zeros_views_and_rounding() {
        let mut t = Tensor::zeros(DType::F16, &[2, 3]).unwrap();
        assert_eq!(t.nbytes(), 12);
        t.fill_f32(|v| {
            for (i, x) in v.iter_mut().enumerate() {
                *x = i as f32 + 0.1;
            }
        });
        let back = t.f32_view();
        assert_eq!(back[1], f16::from_f32(1.1).to_f32());
        let b = Tensor::from_bytes(DType::BOOL, &[3], &[0, 2, 1]).unwrap();
        assert_eq!(b.as_slice::<u8>(), &[0, 1, 1]);
        assert_eq!(
            Tensor::scalar_int(DType::I32, 1 << 33).unwrap().get_i64(0),
            0
        );
        assert!(Tensor::zeros(DType::F32, &[usize::MAX, 2]).is_err());
        assert!(Tensor::zeros(DType::parse("int4").unwrap(), &[2]).is_err());
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        let mut nan = Tensor::zeros(DType::F32, &[2]).unwrap();
        nan.as_mut_slice::<f32>()[1] = f32::NAN;
        assert_eq!(nan.count_non_finite(), 1);
    }
}
