//! Validation of numeric literal tokens (`0`, `-1`, `1e-05f`, `2f16`, `50257i64`, `inff`).
//!
//! Follows TVM's rules: a leading run of `-` folds into the sign by parity; `f`/`fN` makes a
//! float of N bits (16, 32 or 64; 32 when omitted); `i`/`iN` an integer of N bits (16, 32 or 64);
//! no suffix means `int32`, or `int64` when the value does not fit. Floats need a suffix.

use crate::diag::{Code, E0104, E0105, E0106};
use crate::ir::{DType, DTypeCode};

/// A validated numeric literal.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    /// An integer and its dtype.
    Int(i64, DType),
    /// A float (exactly as written) and its dtype.
    Float(f64, DType),
}

/// Why a numeric token is not a valid literal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumberError {
    /// Diagnostic code.
    pub code: Code,
    /// Message.
    pub message: String,
    /// A hint for the fix, if there is an obvious one.
    pub help: Option<String>,
}

fn err(code: Code, message: String, help: Option<&str>) -> NumberError {
    NumberError {
        code,
        message,
        help: help.map(str::to_string),
    }
}

/// Parses the text of a [`super::lexer::Tok::Number`] token.
pub fn parse_number(text: &str) -> Result<Number, NumberError> {
    let dashes = text.bytes().take_while(|&b| b == b'-').count();
    let negative = dashes % 2 == 1;
    let body = &text[dashes..];
    if body.starts_with("inff") || body.starts_with("nanf") {
        let bits = float_bits(&body[4..], text)?;
        let v = if body.starts_with("inf") {
            f64::INFINITY
        } else {
            f64::NAN
        };
        let v = if negative { -v } else { v };
        return Ok(Number::Float(v, DType::scalar(DTypeCode::Float, bits)));
    }
    let (digits, suffix) = match body.find(['f', 'i']) {
        Some(i) => (&body[..i], Some((&body[i..i + 1], &body[i + 1..]))),
        None => (body, None),
    };
    match suffix {
        Some(("f", bits_text)) => {
            let bits = float_bits(bits_text, text)?;
            let v: f64 = digits
                .parse()
                .map_err(|_| err(E0104, format!("malformed float literal `{text}`"), None))?;
            let v = if negative { -v } else { v };
            let max = match bits {
                16 => 65504.0,
                32 => f32::MAX as f64,
                _ => f64::MAX,
            };
            if v.abs() > max {
                return Err(err(
                    E0105,
                    format!("`{text}` is too large for float{bits}"),
                    None,
                ));
            }
            Ok(Number::Float(v, DType::scalar(DTypeCode::Float, bits)))
        }
        Some((_, bits_text)) => {
            let bits = int_bits(bits_text, text)?;
            let v = parse_int(digits, negative, text)?;
            let (lo, hi) = match bits {
                16 => (i16::MIN as i64, i16::MAX as i64),
                32 => (i32::MIN as i64, i32::MAX as i64),
                _ => (i64::MIN, i64::MAX),
            };
            if v < lo || v > hi {
                return Err(err(
                    E0105,
                    format!("`{text}` does not fit in int{bits}"),
                    None,
                ));
            }
            Ok(Number::Int(v, DType::scalar(DTypeCode::Int, bits)))
        }
        None => {
            let v = parse_int(digits, negative, text)?;
            let dtype = if i32::try_from(v).is_ok() {
                DType::I32
            } else {
                DType::I64
            };
            Ok(Number::Int(v, dtype))
        }
    }
}

fn parse_int(digits: &str, negative: bool, text: &str) -> Result<i64, NumberError> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        let inner_sign = digits
            .char_indices()
            .any(|(i, c)| (c == '-' || c == '+') && i > 0 && !digits[..i].ends_with(['e', 'E']));
        let help = if inner_sign {
            Some("a `-` or `+` right after a digit continues the number; write `subtract(2, 1)`, or put spaces around the operator")
        } else if digits
            .bytes()
            .all(|b| b.is_ascii_digit() || b"eE.+-".contains(&b))
        {
            Some("float literals need an `f` suffix, as in `0.5f` or `1e-05f`")
        } else {
            None
        };
        return Err(err(
            E0104,
            format!("malformed numeric literal `{text}`"),
            help,
        ));
    }
    let magnitude: u64 = digits
        .parse()
        .map_err(|_| err(E0105, format!("`{text}` does not fit in int64"), None))?;
    if negative {
        if magnitude > i64::MAX as u64 + 1 {
            return Err(err(E0105, format!("`{text}` does not fit in int64"), None));
        }
        Ok((magnitude as i128).wrapping_neg() as i64)
    } else {
        i64::try_from(magnitude)
            .map_err(|_| err(E0105, format!("`{text}` does not fit in int64"), None))
    }
}

fn float_bits(bits: &str, text: &str) -> Result<u16, NumberError> {
    match bits {
        "" | "32" => Ok(32),
        "16" => Ok(16),
        "64" => Ok(64),
        b if b.bytes().all(|c| c.is_ascii_digit()) => Err(err(
            E0106,
            format!("float literals can be 16, 32 or 64 bits wide, not {b} (`{text}`)"),
            None,
        )),
        _ => Err(err(
            E0104,
            format!("malformed float literal `{text}`"),
            None,
        )),
    }
}

fn int_bits(bits: &str, text: &str) -> Result<u16, NumberError> {
    match bits {
        "" | "32" => Ok(32),
        "16" => Ok(16),
        "64" => Ok(64),
        b if b.bytes().all(|c| c.is_ascii_digit()) => Err(err(
            E0106,
            format!("integer literals can be 16, 32 or 64 bits wide, not {b} (`{text}`)"),
            Some("write narrower constants as a meta reference with a type comment"),
        )),
        _ => Err(err(
            E0104,
            format!("malformed integer literal `{text}`"),
            None,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_literals() {
        assert_eq!(parse_number("0f"), Ok(Number::Float(0.0, DType::F32)));
        assert_eq!(parse_number("1e-05f"), Ok(Number::Float(1e-05, DType::F32)));
        assert_eq!(parse_number("2f16"), Ok(Number::Float(2.0, DType::F16)));
        assert_eq!(parse_number("3f64"), Ok(Number::Float(3.0, DType::F64)));
        assert_eq!(parse_number("1.f"), Ok(Number::Float(1.0, DType::F32)));
        assert_eq!(parse_number("50257i64"), Ok(Number::Int(50257, DType::I64)));
        assert_eq!(parse_number("42i16"), Ok(Number::Int(42, DType::I16)));
        assert_eq!(parse_number("7i"), Ok(Number::Int(7, DType::I32)));
        assert_eq!(parse_number("-1"), Ok(Number::Int(-1, DType::I32)));
        assert_eq!(parse_number("--10"), Ok(Number::Int(10, DType::I32)));
        assert_eq!(parse_number("---10"), Ok(Number::Int(-10, DType::I32)));
        assert_eq!(
            parse_number("2147483648"),
            Ok(Number::Int(2147483648, DType::I64))
        );
        assert_eq!(
            parse_number("-9223372036854775808"),
            Ok(Number::Int(i64::MIN, DType::I64))
        );
        assert_eq!(
            parse_number("-inff"),
            Ok(Number::Float(f64::NEG_INFINITY, DType::F32))
        );
        assert!(matches!(parse_number("nanf16"), Ok(Number::Float(v, DType::F16)) if v.is_nan()));
    }

    #[test]
    fn invalid_literals() {
        let code = |s: &str| parse_number(s).unwrap_err().code;
        assert_eq!(code("0.5"), E0104);
        assert_eq!(code("1e-5"), E0104);
        assert_eq!(code("2-1"), E0104);
        assert_eq!(code("1i8"), E0106);
        assert_eq!(code("1f8"), E0106);
        assert_eq!(code("65505f16"), E0105);
        assert_eq!(code("3.40283e+38f32"), E0105);
        assert_eq!(code("2147483648i32"), E0105);
        assert_eq!(code("99999999999999999999"), E0105);
        assert_eq!(code("1e5f3x"), E0104);
        assert!(parse_number("0.5")
            .unwrap_err()
            .help
            .unwrap()
            .contains("suffix"));
        assert!(parse_number("2-1")
            .unwrap_err()
            .help
            .unwrap()
            .contains("subtract"));
    }
}
