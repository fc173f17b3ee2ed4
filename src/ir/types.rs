//! Relay types: dtypes, shapes, tensor, tuple and function types.

use std::fmt;

/// The kind of a scalar element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DTypeCode {
    /// Signed integer.
    Int,
    /// Unsigned integer (`uint1` is printed as `bool`).
    UInt,
    /// IEEE float.
    Float,
    /// bfloat.
    BFloat,
}

/// A TVM dtype: element kind, bit width and vector lanes, e.g. `float32`, `int8x4`, `bool`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DType {
    /// Element kind.
    pub code: DTypeCode,
    /// Bits per lane.
    pub bits: u16,
    /// Number of lanes (1 for scalars).
    pub lanes: u16,
}

impl DType {
    /// `float32`.
    pub const F32: DType = DType::scalar(DTypeCode::Float, 32);
    /// `float16`.
    pub const F16: DType = DType::scalar(DTypeCode::Float, 16);
    /// `float64`.
    pub const F64: DType = DType::scalar(DTypeCode::Float, 64);
    /// `int32`.
    pub const I32: DType = DType::scalar(DTypeCode::Int, 32);
    /// `int64`.
    pub const I64: DType = DType::scalar(DTypeCode::Int, 64);
    /// `int16`.
    pub const I16: DType = DType::scalar(DTypeCode::Int, 16);
    /// `int8`.
    pub const I8: DType = DType::scalar(DTypeCode::Int, 8);
    /// `uint8`.
    pub const U8: DType = DType::scalar(DTypeCode::UInt, 8);
    /// `bool` (a one-bit unsigned integer).
    pub const BOOL: DType = DType::scalar(DTypeCode::UInt, 1);

    /// A one-lane dtype.
    pub const fn scalar(code: DTypeCode, bits: u16) -> DType {
        DType {
            code,
            bits,
            lanes: 1,
        }
    }

    /// Parses a TVM dtype name (`float32`, `int8x4`, `uint1`, `bool`, `bfloat16`).
    /// Returns `None` for anything else.
    pub fn parse(s: &str) -> Option<DType> {
        if s == "bool" {
            return Some(DType::BOOL);
        }
        let (code, rest) = if let Some(r) = s.strip_prefix("bfloat") {
            (DTypeCode::BFloat, r)
        } else if let Some(r) = s.strip_prefix("float") {
            (DTypeCode::Float, r)
        } else if let Some(r) = s.strip_prefix("uint") {
            (DTypeCode::UInt, r)
        } else if let Some(r) = s.strip_prefix("int") {
            (DTypeCode::Int, r)
        } else {
            return None;
        };
        let (bits_s, lanes_s) = match rest.split_once('x') {
            Some((b, l)) => (b, Some(l)),
            None => (rest, None),
        };
        let bits: u16 = if bits_s.is_empty() {
            32
        } else {
            parse_small(bits_s)?
        };
        let lanes: u16 = match lanes_s {
            Some(l) => parse_small(l)?,
            None => 1,
        };
        let valid_bits = match code {
            DTypeCode::Float => matches!(bits, 16 | 32 | 64),
            DTypeCode::BFloat => bits == 16,
            DTypeCode::Int => matches!(bits, 1 | 4 | 8 | 16 | 32 | 64),
            DTypeCode::UInt => matches!(bits, 1 | 4 | 8 | 16 | 32 | 64),
        };
        if !valid_bits || lanes == 0 {
            return None;
        }
        Some(DType { code, bits, lanes })
    }

    /// Whether this is a float or bfloat dtype.
    pub fn is_float(self) -> bool {
        matches!(self.code, DTypeCode::Float | DTypeCode::BFloat)
    }

    /// Whether this is a signed or unsigned integer dtype (bool included).
    pub fn is_int(self) -> bool {
        matches!(self.code, DTypeCode::Int | DTypeCode::UInt)
    }

    /// Whether this is `bool`.
    pub fn is_bool(self) -> bool {
        self == DType::BOOL
    }

    /// The largest finite value of a float dtype, as an `f32` (float64's saturates to
    /// `f32::MAX`, as values computed in float32 do); `None` for other dtypes. Max reductions
    /// and max pooling start from its negation and min reductions from it, as TVM's
    /// `min_value`/`max_value` identities do, so an empty window or a window holding only
    /// padding or `-inf` gives the lowest finite value, not `-inf`.
    pub fn float_max(self) -> Option<f32> {
        match (self.code, self.bits) {
            (DTypeCode::Float, 16) => Some(65504.0),
            (DTypeCode::BFloat, 16) => Some(f32::from_bits(0x7f7f_0000)),
            (DTypeCode::Float, 32 | 64) => Some(f32::MAX),
            _ => None,
        }
    }

    /// Bytes per element (lanes included), rounding bits up to whole bytes.
    pub fn bytes(self) -> u64 {
        (self.bits as u64 * self.lanes as u64).div_ceil(8)
    }
}

fn parse_small(s: &str) -> Option<u16> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 5 {
        return None;
    }
    s.parse().ok()
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == DType::BOOL {
            return f.write_str("bool");
        }
        let name = match self.code {
            DTypeCode::Int => "int",
            DTypeCode::UInt => "uint",
            DTypeCode::Float => "float",
            DTypeCode::BFloat => "bfloat",
        };
        write!(f, "{name}{}", self.bits)?;
        if self.lanes != 1 {
            write!(f, "x{}", self.lanes)?;
        }
        Ok(())
    }
}

/// One dimension of a shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    /// A static extent.
    Fixed(i64),
    /// `?`, a dynamic extent.
    Any,
    /// A symbolic extent written as a meta reference, e.g. `meta[tir.SizeVar][0]`.
    Sym(String),
}

impl Dim {
    /// The static extent, if known.
    pub fn fixed(&self) -> Option<i64> {
        match self {
            Dim::Fixed(n) => Some(*n),
            _ => None,
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Any => f.write_str("?"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

/// A tensor type: shape and dtype. Rank 0 is a scalar.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorType {
    /// Extents, outermost first.
    pub shape: Vec<Dim>,
    /// Element type.
    pub dtype: DType,
}

impl TensorType {
    /// A tensor type with static extents.
    pub fn new(shape: &[i64], dtype: DType) -> TensorType {
        TensorType {
            shape: shape.iter().map(|&d| Dim::Fixed(d)).collect(),
            dtype,
        }
    }

    /// A rank-0 tensor type.
    pub fn scalar(dtype: DType) -> TensorType {
        TensorType {
            shape: Vec::new(),
            dtype,
        }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The static extents, or `None` if any is dynamic or symbolic.
    pub fn static_shape(&self) -> Option<Vec<i64>> {
        self.shape.iter().map(Dim::fixed).collect()
    }

    /// Number of elements if the shape is static.
    pub fn num_elements(&self) -> Option<u64> {
        self.shape.iter().try_fold(1u64, |acc, d| {
            d.fixed()
                .and_then(|n| u64::try_from(n).ok())
                .and_then(|n| acc.checked_mul(n))
        })
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.shape.is_empty() {
            return write!(f, "{}", self.dtype);
        }
        f.write_str("Tensor[(")?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "), {}]", self.dtype)
    }
}

/// A function type `fn (A, B) -> R`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FuncType {
    /// Parameter types.
    pub params: Vec<Type>,
    /// Result type.
    pub ret: Box<Type>,
}

/// A Relay type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Type {
    /// A tensor (or scalar) type.
    Tensor(TensorType),
    /// A tuple type; `()` is the unit type.
    Tuple(Vec<Type>),
    /// A function type.
    Func(FuncType),
    /// `_`: a type to be inferred.
    Incomplete,
}

impl Type {
    /// The tensor type, if this is one.
    pub fn as_tensor(&self) -> Option<&TensorType> {
        match self {
            Type::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// Nesting depth: 1 for tensors and `_`, one more than the deepest part for tuples and
    /// functions. Stops counting at `limit + 1`, so its cost is bounded by the limit.
    pub fn depth_up_to(&self, limit: usize) -> usize {
        if limit == 0 {
            return 1;
        }
        match self {
            Type::Tensor(_) | Type::Incomplete => 1,
            Type::Tuple(ts) => {
                1 + ts
                    .iter()
                    .map(|t| t.depth_up_to(limit - 1))
                    .max()
                    .unwrap_or(0)
            }
            Type::Func(f) => {
                1 + f
                    .params
                    .iter()
                    .chain(std::iter::once(&*f.ret))
                    .map(|t| t.depth_up_to(limit - 1))
                    .max()
                    .unwrap_or(0)
            }
        }
    }

    /// Whether the type contains `_` anywhere.
    pub fn is_incomplete(&self) -> bool {
        match self {
            Type::Incomplete => true,
            Type::Tensor(_) => false,
            Type::Tuple(ts) => ts.iter().any(Type::is_incomplete),
            Type::Func(f) => f.params.iter().any(Type::is_incomplete) || f.ret.is_incomplete(),
        }
    }

    /// Whether `self` (a possibly incomplete annotation) admits the complete type `actual`.
    pub fn admits(&self, actual: &Type) -> bool {
        match (self, actual) {
            (Type::Incomplete, _) => true,
            (Type::Tensor(a), Type::Tensor(b)) => {
                a.dtype == b.dtype
                    && a.shape.len() == b.shape.len()
                    && a.shape
                        .iter()
                        .zip(&b.shape)
                        .all(|(x, y)| x == y || *x == Dim::Any || *y == Dim::Any)
            }
            (Type::Tuple(a), Type::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.admits(y))
            }
            (Type::Func(a), Type::Func(b)) => {
                a.params.len() == b.params.len()
                    && a.params.iter().zip(&b.params).all(|(x, y)| x.admits(y))
                    && a.ret.admits(&b.ret)
            }
            _ => false,
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Tensor(t) => write!(f, "{t}"),
            Type::Tuple(ts) => {
                f.write_str("(")?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                if ts.len() == 1 {
                    f.write_str(",")?;
                }
                f.write_str(")")
            }
            Type::Func(ft) => {
                f.write_str("fn (")?;
                for (i, t) in ft.params.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                write!(f, ") -> {}", ft.ret)
            }
            Type::Incomplete => f.write_str("_"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_names_round_trip() {
        for s in [
            "float32",
            "float16",
            "float64",
            "int8",
            "int64",
            "uint8",
            "bool",
            "int8x4",
            "float16x4",
            "uint1x4",
            "bfloat16",
            "int1",
        ] {
            let d = DType::parse(s).unwrap_or_else(|| panic!("{s}"));
            assert_eq!(d.to_string(), s);
        }
        assert_eq!(DType::parse("int"), Some(DType::I32));
        for bad in ["float8", "foo", "int7", "floatx", "float32x", "", "int8x0"] {
            assert_eq!(DType::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn tensor_types_print_like_tvm() {
        assert_eq!(
            TensorType::new(&[1, 3], DType::F32).to_string(),
            "Tensor[(1, 3), float32]"
        );
        assert_eq!(
            TensorType::new(&[768], DType::F16).to_string(),
            "Tensor[(768), float16]"
        );
        assert_eq!(TensorType::scalar(DType::F32).to_string(), "float32");
        let t = Type::Tuple(vec![Type::Tensor(TensorType::scalar(DType::I32))]);
        assert_eq!(t.to_string(), "(int32,)");
    }
}
