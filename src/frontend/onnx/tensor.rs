//! Data types and tensor data: the typed view of a weight that the importer turns into a
//! collage constant.

use bytes::Bytes;

/// The largest number of elements a tensor (weight, input, or declared value) may have: 2^40.
/// Element counts above it, and dimensions whose product overflows, are refused (E3011), so that
/// no size computed from a file can overflow or ask for an unbounded allocation.
pub const MAX_ELEMENTS: u64 = 1 << 40;

/// An element type collage takes from ONNX. ONNX's other types (strings, complex numbers, 8-bit
/// and 4-bit floats, 4-bit integers) are refused with E3010.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float (ONNX `FLOAT`, 1).
    F32,
    /// 8-bit unsigned integer (`UINT8`, 2).
    U8,
    /// 8-bit signed integer (`INT8`, 3).
    I8,
    /// 16-bit unsigned integer (`UINT16`, 4).
    U16,
    /// 16-bit signed integer (`INT16`, 5).
    I16,
    /// 32-bit signed integer (`INT32`, 6).
    I32,
    /// 64-bit signed integer (`INT64`, 7).
    I64,
    /// Boolean, one byte per element, 0 or 1 (`BOOL`, 9).
    Bool,
    /// 16-bit IEEE float (`FLOAT16`, 10).
    F16,
    /// 64-bit IEEE float (`DOUBLE`, 11).
    F64,
    /// 32-bit unsigned integer (`UINT32`, 12).
    U32,
    /// 64-bit unsigned integer (`UINT64`, 13).
    U64,
    /// bfloat16 (`BFLOAT16`, 16).
    BF16,
}

impl DType {
    /// The type of an ONNX `TensorProto.DataType` code, or `None` for one collage does not take.
    pub fn from_onnx(code: i32) -> Option<DType> {
        Some(match code {
            1 => DType::F32,
            2 => DType::U8,
            3 => DType::I8,
            4 => DType::U16,
            5 => DType::I16,
            6 => DType::I32,
            7 => DType::I64,
            9 => DType::Bool,
            10 => DType::F16,
            11 => DType::F64,
            12 => DType::U32,
            13 => DType::U64,
            16 => DType::BF16,
            _ => return None,
        })
    }

    /// The ONNX `TensorProto.DataType` code.
    pub fn onnx_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I8 => 3,
            DType::U16 => 4,
            DType::I16 => 5,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::F64 => 11,
            DType::U32 => 12,
            DType::U64 => 13,
            DType::BF16 => 16,
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 | DType::Bool => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// The dtype's name as collage (and TVM) writes it: `float32`, `int64`, `bool`, ...
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::U16 => "uint16",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::Bool => "bool",
            DType::F16 => "float16",
            DType::F64 => "float64",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::BF16 => "bfloat16",
        }
    }
}

/// The name of an ONNX data type code, for messages (`string`, `complex64`, `code 99`, ...).
pub fn onnx_type_name(code: i32) -> String {
    if let Some(d) = DType::from_onnx(code) {
        return d.name().to_string();
    }
    match code {
        0 => "undefined".into(),
        8 => "string".into(),
        14 => "complex64".into(),
        15 => "complex128".into(),
        17 => "float8e4m3fn".into(),
        18 => "float8e4m3fnuz".into(),
        19 => "float8e5m2".into(),
        20 => "float8e5m2fnuz".into(),
        21 => "uint4".into(),
        22 => "int4".into(),
        23 => "float4e2m1".into(),
        _ => format!("data type code {code}"),
    }
}

/// The element count of `dims`, or `None` when a dimension is negative, the product overflows,
/// or it exceeds [`MAX_ELEMENTS`].
pub fn element_count(dims: &[i64]) -> Option<u64> {
    let mut n: u64 = 1;
    for &d in dims {
        let d = u64::try_from(d).ok()?;
        n = n.checked_mul(d)?;
    }
    // A zero dimension makes the product zero, whatever the others; still refuse a huge one.
    if n > MAX_ELEMENTS || dims.iter().any(|&d| d as u64 > MAX_ELEMENTS) {
        return None;
    }
    Some(n)
}

/// A tensor's data: its type, shape and little-endian bytes. The bytes are a view into the
/// memory-mapped model or external data file when the file stores them raw, and an owned buffer
/// converted once from ONNX's typed fields otherwise; cloning shares them.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorData {
    /// Element type.
    pub dtype: DType,
    /// Dimensions (row-major). Their product is at most [`MAX_ELEMENTS`].
    pub shape: Vec<u64>,
    data: Bytes,
}

impl TensorData {
    /// Tensor data from bytes, checking that their length is the element count times the
    /// element size. Returns the expected length on a mismatch.
    pub fn new(dtype: DType, shape: Vec<u64>, data: Bytes) -> Result<TensorData, u64> {
        let expected = shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .and_then(|n| n.checked_mul(dtype.size() as u64))
            .unwrap_or(u64::MAX);
        if data.len() as u64 != expected {
            return Err(expected);
        }
        Ok(TensorData { dtype, shape, data })
    }

    /// The little-endian bytes of the elements, row-major.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The bytes as a shared buffer (cloning it does not copy).
    pub fn shared_bytes(&self) -> &Bytes {
        &self.data
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.len() / self.dtype.size()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The elements as `i64`, for integer and boolean tensors (`None` for floats).
    pub fn to_i64(&self) -> Option<Vec<i64>> {
        let b = self.bytes();
        let v = match self.dtype {
            DType::I64 => b
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            DType::U64 => b
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()) as i64)
                .collect(),
            DType::I32 => b
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64)
                .collect(),
            DType::U32 => b
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()) as i64)
                .collect(),
            DType::I16 => b
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes(c.try_into().unwrap()) as i64)
                .collect(),
            DType::U16 => b
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes(c.try_into().unwrap()) as i64)
                .collect(),
            DType::I8 => b.iter().map(|&x| x as i8 as i64).collect(),
            DType::U8 | DType::Bool => b.iter().map(|&x| x as i64).collect(),
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 => return None,
        };
        Some(v)
    }

    /// The elements as `f64`, for every type (16-bit floats widened).
    pub fn to_f64(&self) -> Vec<f64> {
        let b = self.bytes();
        match self.dtype {
            DType::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
                .collect(),
            DType::F64 => b
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            DType::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
                .collect(),
            DType::BF16 => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
                .collect(),
            _ => self
                .to_i64()
                .unwrap_or_default()
                .into_iter()
                .map(|x| x as f64)
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_counts_refuse_negative_overflowing_and_huge_shapes() {
        assert_eq!(element_count(&[2, 3, 4]), Some(24));
        assert_eq!(element_count(&[]), Some(1));
        assert_eq!(element_count(&[0, 7]), Some(0));
        assert_eq!(element_count(&[-1, 3]), None);
        assert_eq!(element_count(&[1 << 62]), None);
        assert_eq!(element_count(&[0, 1 << 62]), None);
        assert_eq!(element_count(&[1 << 32, 1 << 32]), None);
        assert_eq!(element_count(&[1 << 20, 1 << 20]), Some(1 << 40));
    }

    #[test]
    fn tensor_data_checks_its_length_and_reads_back() {
        let bytes: Vec<u8> = [1i64, -2, 3].iter().flat_map(|x| x.to_le_bytes()).collect();
        let t = TensorData::new(DType::I64, vec![3], Bytes::from(bytes.clone())).unwrap();
        assert_eq!(t.to_i64(), Some(vec![1, -2, 3]));
        assert_eq!(t.len(), 3);
        assert_eq!(
            TensorData::new(DType::I64, vec![4], Bytes::from(bytes)),
            Err(32)
        );
        let codes: Vec<i32> = (0..30).filter(|&c| DType::from_onnx(c).is_some()).collect();
        for c in codes {
            assert_eq!(DType::from_onnx(c).unwrap().onnx_code(), c);
        }
        assert_eq!(onnx_type_name(8), "string");
    }
}
