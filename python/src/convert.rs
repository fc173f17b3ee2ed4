//! NumPy arrays to collage's tensors and back.
//!
//! An input is copied once, into the 64-byte aligned storage of whole cache lines that every
//! kernel expects (`collage::runtime::exec::tensor`); an array that is not C-contiguous or not
//! in the machine's byte order is first made so by NumPy. An output crosses without a copy: the
//! NumPy array views the tensor's storage, which a Python object owns for as long as the array
//! lives. Outputs the model shares with something else (an input or a constant returned as is)
//! are copied, so writing into the array never changes the model.

use collage::ir::DType;
use collage::runtime::exec::tensor::{Shape, Tensor, BF16, U16, U32, U64};
use numpy::ndarray::{ArrayViewD, IxDyn};
use numpy::{
    Element, PyArray, PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use std::sync::Arc;

/// The NumPy name of a dtype (`None`: NumPy has no such type).
pub fn numpy_name(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::F64 => "float64",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::BOOL => "bool",
        U16 => "uint16",
        U32 => "uint32",
        U64 => "uint64",
        _ => return None,
    })
}

/// How a type is shown to Python users: its NumPy name, else collage's.
pub fn dtype_name(d: DType) -> String {
    numpy_name(d).map_or_else(|| d.to_string(), str::to_string)
}

/// The NumPy dtype of a collage dtype (`None`: NumPy has no such type).
pub fn descr_of(py: Python<'_>, d: DType) -> Option<Bound<'_, PyArrayDescr>> {
    Some(match d {
        DType::F32 => numpy::dtype::<f32>(py),
        DType::F16 => numpy::dtype::<half::f16>(py),
        DType::F64 => numpy::dtype::<f64>(py),
        DType::I8 => numpy::dtype::<i8>(py),
        DType::I16 => numpy::dtype::<i16>(py),
        DType::I32 => numpy::dtype::<i32>(py),
        DType::I64 => numpy::dtype::<i64>(py),
        DType::U8 => numpy::dtype::<u8>(py),
        DType::BOOL => numpy::dtype::<bool>(py),
        U16 => numpy::dtype::<u16>(py),
        U32 => numpy::dtype::<u32>(py),
        U64 => numpy::dtype::<u64>(py),
        _ => return None,
    })
}

/// A feed's array, C-contiguous and in native byte order.
pub struct Feed<'py> {
    array: Bound<'py, PyUntypedArray>,
}

impl<'py> Feed<'py> {
    /// Checks that `value` is a NumPy array and makes it C-contiguous in native byte order
    /// (without a copy when it already is). A value of another kind is a `TypeError`.
    pub fn new(name: &str, value: &Bound<'py, PyAny>) -> PyResult<Feed<'py>> {
        let py = value.py();
        let Ok(array) = value.cast::<PyUntypedArray>() else {
            return Err(PyTypeError::new_err(format!(
                "the value of input `{name}` must be a numpy.ndarray, not {}",
                value.get_type().name()?
            )));
        };
        let descr = array.dtype();
        // `=` native, `|` not applicable (one byte), else the order the machine has or not.
        let native = match descr.byteorder() {
            b'=' | b'|' => true,
            b'<' => cfg!(target_endian = "little"),
            b'>' => cfg!(target_endian = "big"),
            _ => false,
        };
        let array = if array.is_c_contiguous() && native {
            array.clone()
        } else {
            let numpy = py.import("numpy")?;
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item("dtype", descr.call_method1("newbyteorder", ("=",))?)?;
            numpy
                .call_method("ascontiguousarray", (array,), Some(&kwargs))?
                .cast_into::<PyUntypedArray>()
                .map_err(PyErr::from)?
        };
        Ok(Feed { array })
    }

    /// Whether the array's elements are of `d`.
    pub fn is_of(&self, d: DType) -> bool {
        descr_of(self.array.py(), d).is_some_and(|want| self.array.dtype().is_equiv_to(&want))
    }

    /// The NumPy name of the array's dtype (`float64`, `complex64`, ...).
    pub fn dtype_name(&self) -> String {
        self.array
            .dtype()
            .getattr("name")
            .and_then(|n| n.extract())
            .unwrap_or_else(|_| "?".to_string())
    }

    /// The array's shape.
    pub fn shape(&self) -> &[usize] {
        self.array.shape()
    }

    /// The array as a tensor of `want`, which its dtype and shape must already match.
    pub fn to_tensor(&self, want: &Shape) -> Result<Tensor, String> {
        let n = want.numel();
        let size = collage::runtime::exec::tensor::elem_size(want.dtype)
            .ok_or_else(|| format!("`{}` cannot be stored", want.dtype))?;
        let itemsize = self.array.dtype().itemsize();
        if itemsize != size || self.shape() != want.dims.as_slice() {
            return Err(format!("the array does not hold a `{want}`"));
        }
        let len = n * size;
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: the array is C-contiguous, holds `n` elements of `size` bytes (checked
            // above), and is kept alive by `self` while the slice is read (under the GIL).
            unsafe {
                let data = (*self.array.as_array_ptr()).fields.data as *const u8;
                std::slice::from_raw_parts(data, len)
            }
        };
        Tensor::from_bytes(want.dtype, &want.dims, bytes).map_err(|e| e.to_string())
    }
}

/// Owns the tensor a NumPy output array views.
#[pyclass(frozen, module = "collage._collage")]
pub struct OutputBuffer {
    tensor: Tensor,
}

/// An output as a NumPy array: a view of the tensor when nothing else holds it, else a copy.
/// bfloat16 has no NumPy type: `Err` with the type's name.
pub fn to_numpy<'py>(
    py: Python<'py>,
    t: Arc<Tensor>,
) -> PyResult<Result<Bound<'py, PyAny>, String>> {
    let tensor = Arc::try_unwrap(t).unwrap_or_else(|shared| (*shared).clone());
    let dtype = tensor.dtype();
    if numpy_name(dtype).is_none() || dtype == BF16 {
        return Ok(Err(dtype.to_string()));
    }
    let holder = Bound::new(py, OutputBuffer { tensor })?;
    let array = match dtype {
        DType::F32 => view::<f32>(&holder)?,
        DType::F16 => view::<half::f16>(&holder)?,
        DType::F64 => view::<f64>(&holder)?,
        DType::I8 => view::<i8>(&holder)?,
        DType::I16 => view::<i16>(&holder)?,
        DType::I32 => view::<i32>(&holder)?,
        DType::I64 => view::<i64>(&holder)?,
        DType::U8 => view::<u8>(&holder)?,
        DType::BOOL => view_bool(&holder)?,
        U16 => view::<u16>(&holder)?,
        U32 => view::<u32>(&holder)?,
        U64 => view::<u64>(&holder)?,
        _ => return Ok(Err(dtype.to_string())),
    };
    Ok(Ok(array))
}

fn view<'py, T>(holder: &Bound<'py, OutputBuffer>) -> PyResult<Bound<'py, PyAny>>
where
    T: Element + collage::runtime::exec::tensor::Elem,
{
    let t = &holder.get().tensor;
    let v = ArrayViewD::from_shape(IxDyn(t.shape()), t.as_slice::<T>())
        .map_err(|e| PyTypeError::new_err(e.to_string()))?;
    // SAFETY: the array's base is `holder`, which owns the tensor and never changes or frees
    // its storage while it lives (the class is frozen and has no methods).
    Ok(unsafe { PyArray::borrow_from_array(&v, holder.clone().into_any()) }.into_any())
}

fn view_bool<'py>(holder: &Bound<'py, OutputBuffer>) -> PyResult<Bound<'py, PyAny>> {
    let t = &holder.get().tensor;
    let bytes = t.as_slice::<u8>();
    if bytes.iter().any(|&b| b > 1) {
        // Kernels store bools as 0 and 1; anything else is not a valid `bool` to view.
        let copy: Vec<bool> = bytes.iter().map(|&b| b != 0).collect();
        let v = ArrayViewD::from_shape(IxDyn(t.shape()), copy.as_slice())
            .map_err(|e| PyTypeError::new_err(e.to_string()))?;
        return Ok(PyArray::from_array(holder.py(), &v).into_any());
    }
    // SAFETY: every byte is 0 or 1 (checked above), the representation of `bool`.
    let flags: &[bool] = unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast(), bytes.len()) };
    let v = ArrayViewD::from_shape(IxDyn(t.shape()), flags)
        .map_err(|e| PyTypeError::new_err(e.to_string()))?;
    // SAFETY: as in `view`.
    Ok(unsafe { PyArray::borrow_from_array(&v, holder.clone().into_any()) }.into_any())
}
