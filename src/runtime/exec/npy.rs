//! NumPy `.npy` files for inputs and outputs.
//!
//! Read: `bool`, signed and unsigned integers of 8 to 64 bits, `float16`, `float32` and
//! `float64`, either byte order, C or Fortran order (a Fortran-ordered array is transposed into
//! row-major order). Written (through the `npyz` crate): the tensor's own dtype in
//! little-endian C order; `bfloat16`, which NumPy lacks, is written as `float32`.
//!
//! Headers are read by the bounded parser below, never by a general Python-literal parser:
//! the header is at most [`MAX_HEADER`] bytes, it is the dictionary NumPy writes (the keys
//! `descr`, `fortran_order` and `shape`, each once; string, boolean and tuple-of-integer values,
//! nothing nested deeper than the shape's tuple, at most [`MAX_RANK`] extents), and the data
//! size it declares must be exactly what follows it in the file before anything is allocated.
//! Parsing is one pass over the header, linear in its length.

use crate::ir::DType;
use crate::runtime::exec::ops::transpose_reversed;
use crate::runtime::exec::tensor::{Tensor, BF16, U16, U32, U64};
use half::f16;
use npyz::WriterBuilder;

/// The longest header read, in bytes (NumPy's own reader refuses longer ones by default too).
pub const MAX_HEADER: usize = 10_000;

/// The most extents a shape may have (NumPy 2's limit).
pub const MAX_RANK: usize = 64;

/// What a header says.
#[derive(Debug, PartialEq)]
struct Header {
    /// `<`, `>`, `|` or `=`.
    order: u8,
    /// `b`, `i`, `u` or `f`.
    kind: u8,
    /// Bytes per element.
    size: usize,
    fortran: bool,
    shape: Vec<usize>,
}

/// A value of the header dictionary.
enum Value<'a> {
    Str(&'a [u8]),
    Bool(bool),
    Tuple(Vec<u64>),
}

/// A one-pass reader of the header dictionary.
struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn ws(&mut self) {
        while self.at < self.s.len() && matches!(self.s[self.at], b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.at).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8, what: &str) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected {what} at byte {} of the header", self.at))
        }
    }

    fn string(&mut self) -> Result<&'a [u8], String> {
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => {
                return Err(format!(
                    "expected a string at byte {} of the header",
                    self.at
                ))
            }
        };
        let start = self.at + 1;
        let len = self.s[start..]
            .iter()
            .position(|&c| c == q || c == b'\\' || c == b'\n')
            .filter(|&n| self.s[start + n] == q)
            .ok_or_else(|| format!("unterminated or escaped string at byte {}", self.at))?;
        self.at = start + len + 1;
        Ok(&self.s[start..start + len])
    }

    fn int(&mut self) -> Result<u64, String> {
        self.ws();
        let start = self.at;
        let mut v: u64 = 0;
        while let Some(d) = self.s.get(self.at).filter(|c| c.is_ascii_digit()) {
            v = v
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(d - b'0')))
                .ok_or("an extent is too large")?;
            self.at += 1;
        }
        if self.at == start {
            return Err(format!(
                "expected an extent at byte {} of the header",
                self.at
            ));
        }
        // Python 2 wrote long integers with a suffix.
        if self.s.get(self.at) == Some(&b'L') {
            self.at += 1;
        }
        Ok(v)
    }

    fn value(&mut self) -> Result<Value<'a>, String> {
        match self.peek() {
            Some(b'\'' | b'"') => self.string().map(Value::Str),
            Some(b'(') => {
                self.at += 1;
                let mut dims = Vec::new();
                loop {
                    if self.eat(b')') {
                        break;
                    }
                    if dims.len() == MAX_RANK {
                        return Err(format!("the shape has more than {MAX_RANK} extents"));
                    }
                    dims.push(self.int()?);
                    if !self.eat(b',') {
                        self.expect(b')', "`,` or `)`")?;
                        break;
                    }
                }
                Ok(Value::Tuple(dims))
            }
            Some(b'T') if self.s[self.at..].starts_with(b"True") => {
                self.at += 4;
                Ok(Value::Bool(true))
            }
            Some(b'F') if self.s[self.at..].starts_with(b"False") => {
                self.at += 5;
                Ok(Value::Bool(false))
            }
            Some(b'[') => Err("structured (record) arrays are not supported".into()),
            _ => Err(format!(
                "expected a string, a boolean or a tuple of extents at byte {} of the header",
                self.at
            )),
        }
    }
}

/// Parses the header dictionary.
fn parse_header(text: &[u8]) -> Result<Header, String> {
    let mut c = Cursor { s: text, at: 0 };
    c.expect(b'{', "`{`")?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    while !c.eat(b'}') {
        let key = c.string()?;
        c.expect(b':', "`:`")?;
        let value = c.value()?;
        let slot_taken = match (key, value) {
            (b"descr", Value::Str(v)) => descr.replace(v).is_some(),
            (b"fortran_order", Value::Bool(v)) => fortran.replace(v).is_some(),
            (b"shape", Value::Tuple(v)) => shape.replace(v).is_some(),
            (b"descr" | b"fortran_order" | b"shape", _) => {
                return Err(format!(
                    "the value of `{}` has the wrong type",
                    String::from_utf8_lossy(key)
                ))
            }
            _ => {
                return Err(format!(
                    "unexpected key `{}` in the header",
                    String::from_utf8_lossy(key).escape_debug()
                ))
            }
        };
        if slot_taken {
            return Err(format!(
                "the key `{}` appears twice",
                String::from_utf8_lossy(key)
            ));
        }
        if !c.eat(b',') {
            c.expect(b'}', "`,` or `}`")?;
            break;
        }
    }
    if c.peek().is_some() {
        return Err(format!(
            "unexpected text after the header dictionary at byte {}",
            c.at
        ));
    }
    let (Some(descr), Some(fortran), Some(shape)) = (descr, fortran, shape) else {
        return Err("the header lacks `descr`, `fortran_order` or `shape`".into());
    };
    let shown = String::from_utf8_lossy(descr).escape_debug().to_string();
    let (order, rest) = match descr.first() {
        Some(&o @ (b'<' | b'>' | b'|' | b'=')) => (o, &descr[1..]),
        _ => (b'=', descr),
    };
    let (kind, size) = match rest {
        [k @ (b'b' | b'i' | b'u' | b'f'), n @ ..] if !n.is_empty() && n.len() <= 2 => {
            let size: usize = std::str::from_utf8(n)
                .ok()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("the dtype `{shown}` is not supported"))?;
            (*k, size)
        }
        _ => return Err(format!("the dtype `{shown}` is not supported")),
    };
    let shape = shape
        .into_iter()
        .map(|d| usize::try_from(d).map_err(|_| "an extent is too large".to_string()))
        .collect::<Result<_, _>>()?;
    Ok(Header {
        order,
        kind,
        size,
        fortran,
        shape,
    })
}

/// The dtype of a header's element kind and size.
fn dtype_of(kind: u8, size: usize) -> Option<DType> {
    Some(match (kind, size) {
        (b'b', 1) => DType::BOOL,
        (b'f', 2) => DType::F16,
        (b'f', 4) => DType::F32,
        (b'f', 8) => DType::F64,
        (b'i', 1) => DType::I8,
        (b'i', 2) => DType::I16,
        (b'i', 4) => DType::I32,
        (b'i', 8) => DType::I64,
        (b'u', 1) => DType::U8,
        (b'u', 2) => U16,
        (b'u', 4) => U32,
        (b'u', 8) => U64,
        _ => return None,
    })
}

/// Reads a `.npy` file's bytes into a tensor.
pub fn read(bytes: &[u8]) -> Result<Tensor, String> {
    const MAGIC: &[u8] = b"\x93NUMPY";
    let invalid = |why: &str| format!("not a valid .npy file: {why}");
    if !bytes.starts_with(MAGIC) || bytes.len() < MAGIC.len() + 4 {
        return Err(invalid("it does not start with the .npy magic string"));
    }
    let major = bytes[MAGIC.len()];
    let at = MAGIC.len() + 2;
    let (len, start) = match major {
        1 => (
            u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize,
            at + 2,
        ),
        2 | 3 => {
            let b = bytes
                .get(at..at + 4)
                .ok_or_else(|| invalid("the header length is cut off"))?;
            let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            (usize::try_from(len).unwrap_or(usize::MAX), at + 4)
        }
        v => return Err(invalid(&format!("format version {v} is not supported"))),
    };
    if len > MAX_HEADER {
        return Err(invalid(&format!(
            "the header is {len} bytes long, more than the {MAX_HEADER} read"
        )));
    }
    let text = bytes
        .get(start..start + len)
        .ok_or_else(|| invalid("the file ends inside its header"))?;
    let h = parse_header(text).map_err(|e| invalid(&e))?;
    let dtype = dtype_of(h.kind, h.size).ok_or_else(|| {
        format!(
            "the dtype `{}{}{}` is not supported",
            h.order as char, h.kind as char, h.size
        )
    })?;
    let data = &bytes[start + len..];
    // Every extent is bounded, also when another is 0 (no data): the strides of the shape,
    // products of extents, must fit.
    let spread = h
        .shape
        .iter()
        .try_fold(h.size.max(1), |n, &d| n.checked_mul(d.max(1)))
        .filter(|&n| n as u64 <= crate::runtime::exec::tensor::MAX_TENSOR_BYTES);
    if spread.is_none() {
        return Err(invalid(&format!(
            "the shape {:?} is too large (extents other than 0 multiply to more than {} bytes)",
            h.shape,
            crate::runtime::exec::tensor::MAX_TENSOR_BYTES
        )));
    }
    let declared = h
        .shape
        .iter()
        .try_fold(h.size, |n, &d| n.checked_mul(d))
        .filter(|&n| n as u64 <= crate::runtime::exec::tensor::MAX_TENSOR_BYTES);
    match declared {
        Some(n) if n == data.len() => {}
        Some(n) => {
            return Err(invalid(&format!(
                "the header declares {n} bytes of data (shape {:?}), the file holds {}",
                h.shape,
                data.len()
            )))
        }
        None => {
            return Err(invalid(&format!(
                "the shape {:?} is too large for the file's {} bytes of data",
                h.shape,
                data.len()
            )))
        }
    }
    // Fortran order: the data is the row-major array of the reversed shape.
    let fortran = h.fortran && h.shape.len() > 1;
    let stored: Vec<usize> = if fortran {
        h.shape.iter().rev().copied().collect()
    } else {
        h.shape.clone()
    };
    let swap = h.size > 1
        && match h.order {
            b'>' => cfg!(target_endian = "little"),
            b'<' => cfg!(target_endian = "big"),
            _ => false,
        };
    let t = if swap || dtype == DType::BOOL {
        let mut owned = data.to_vec();
        if swap {
            for e in owned.chunks_exact_mut(h.size) {
                e.reverse();
            }
        } else {
            for b in &mut owned {
                *b = u8::from(*b != 0);
            }
        }
        Tensor::from_bytes(dtype, &stored, &owned)
    } else {
        Tensor::from_bytes(dtype, &stored, data)
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

    /// A file of the given major version with the given header text and data.
    fn npy(major: u8, header: &[u8], data: &[u8]) -> Vec<u8> {
        let mut out = b"\x93NUMPY".to_vec();
        out.extend([major, 0]);
        if major == 1 {
            out.extend((header.len() as u16).to_le_bytes());
        } else {
            out.extend((header.len() as u32).to_le_bytes());
        }
        out.extend(header);
        out.extend(data);
        out
    }

    /// Twenty opening braces (30 bytes in all) sent the general literal parser into
    /// exponential time; deep nesting of any bracket is refused at once.
    #[test]
    fn nested_headers_are_refused_at_once() {
        for open in [b'{', b'(', b'['] {
            for n in [20, 5000] {
                let f = npy(1, &vec![open; n], b"");
                let start = std::time::Instant::now();
                let e = read(&f).unwrap_err();
                assert!(e.starts_with("not a valid .npy file"), "{e}");
                assert!(start.elapsed().as_secs() < 1);
            }
        }
        let deep = b"{'descr': '<f4', 'fortran_order': False, 'shape': ((1,),), }";
        assert!(read(&npy(1, deep, &[0; 4])).is_err());
    }

    /// A header that declares far more data than the file holds is refused before anything is
    /// allocated (a v2 header declaring 4 GiB allocated 4 GiB).
    #[test]
    fn the_declared_size_must_match_the_file() {
        let h = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824,), }";
        let e = read(&npy(2, h, &[0; 16])).unwrap_err();
        assert!(e.contains("declares 4294967296 bytes"), "{e}");
        let h = b"{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }";
        assert!(read(&npy(2, h, &[0; 16]))
            .unwrap_err()
            .contains("too large"));
        // An empty array whose other extents are huge: no data, but strides that would
        // overflow (in Fortran order, transposed).
        for order in ["True", "False"] {
            for shape in [
                "(1099511627776, 1099511627776, 1099511627776, 0)",
                "(0, 1099511627776, 1099511627776, 1099511627776)",
                "(0, 18446744073709551615)",
            ] {
                let h = format!("{{'descr': '<f4', 'fortran_order': {order}, 'shape': {shape}, }}");
                let e = read(&npy(2, h.as_bytes(), b"")).unwrap_err();
                assert!(e.contains("too large"), "{shape}: {e}");
            }
        }
        let h = b"{'descr': '<f4', 'fortran_order': True, 'shape': (3, 0, 2), }";
        assert_eq!(read(&npy(1, h, b"")).unwrap().shape(), &[3, 0, 2]);
        let h = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
        assert!(read(&npy(1, h, &[0; 7])).is_err());
        assert!(read(&npy(1, h, &[0; 9])).is_err());
        let t = read(&npy(3, h, &[0; 8])).unwrap();
        assert_eq!(t.shape(), &[2]);
        // A header longer than the limit is not read at all.
        let mut long = h.to_vec();
        long.resize(MAX_HEADER + 1, b' ');
        assert!(read(&npy(2, &long, &[0; 8]))
            .unwrap_err()
            .contains("more than"));
    }

    #[test]
    fn headers_as_numpy_writes_them() {
        let ok: &[&[u8]] = &[
            b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }   \n",
            b"{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(2L,)}",
            b"{'shape': (2,), 'fortran_order': True, 'descr': '<f4'}",
        ];
        for h in ok {
            assert_eq!(read(&npy(1, h, &[0; 8])).unwrap().shape(), &[2], "{h:?}");
        }
        let scalar = b"{'descr': '|u1', 'fortran_order': False, 'shape': (), }";
        assert_eq!(
            read(&npy(1, scalar, &[7])).unwrap().shape(),
            &[] as &[usize]
        );
        let bad: &[&[u8]] = &[
            b"{'descr': '<f4', 'fortran_order': False}",
            b"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
            b"{'descr': '<c8', 'fortran_order': False, 'shape': (2,)}",
            b"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}",
            b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",
            b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x",
            b"{'descr': '<f\\4', 'fortran_order': False, 'shape': (2,)}",
            b"{'descr': '<f4', 'fortran_order': Fals, 'shape': (2,)}",
        ];
        for h in bad {
            assert!(read(&npy(1, h, &[0; 8])).is_err(), "{h:?}");
        }
    }
}
