//! Formatting of numeric literals the way TVM's printer writes them.
//!
//! Floats are written like C++ streams do by default (`%g` with 6 significant digits: `1e-05`,
//! `0.797885`), with the suffix for their dtype (`f`, `f16`, `f64`). Where 6 digits would lose
//! information, more digits are written, just enough for the value to read back exactly, so that
//! printing never changes a module.

use super::types::{DType, DTypeCode};
use std::fmt;

/// Writes an integer literal: `int32` bare, other widths with an `i<bits>` suffix.
pub fn write_int(f: &mut dyn fmt::Write, v: i64, d: DType) -> fmt::Result {
    if d == DType::I32 {
        write!(f, "{v}")
    } else if d == DType::BOOL {
        f.write_str(if v != 0 { "True" } else { "False" })
    } else {
        let c = if d.code == DTypeCode::UInt { 'u' } else { 'i' };
        write!(f, "{v}{c}{}", d.bits)
    }
}

/// Whether the text format has a literal for a scalar of `d`: floats and signed integers of
/// 16, 32 or 64 bits, and booleans. Others (8-bit and unsigned integers, bfloat16) must be
/// metadata constants to print.
pub fn has_literal(d: DType) -> bool {
    match d.code {
        DTypeCode::Float | DTypeCode::Int => matches!(d.bits, 16 | 32 | 64),
        _ => d.is_bool(),
    }
}

/// The suffix of a float literal of the given dtype.
pub fn float_suffix(d: DType) -> &'static str {
    match d.bits {
        16 => "f16",
        64 => "f64",
        _ => "f",
    }
}

/// Writes a float literal with its dtype suffix.
pub fn write_float(f: &mut dyn fmt::Write, v: f64, d: DType) -> fmt::Result {
    let suffix = float_suffix(d);
    if v.is_nan() {
        let sign = if v.is_sign_negative() { "-" } else { "" };
        return write!(f, "{sign}nan{suffix}");
    }
    if v.is_infinite() {
        let sign = if v < 0.0 { "-" } else { "" };
        return write!(f, "{sign}inf{suffix}");
    }
    write!(f, "{}{suffix}", shortest_g(v))
}

/// The `%g` form of `v` with the fewest significant digits (at least 6) that reads back exactly.
pub fn shortest_g(v: f64) -> String {
    for prec in 6..=17 {
        let s = format_g(v, prec);
        if s.parse::<f64>().ok() == Some(v) {
            return s;
        }
    }
    format_g(v, 17)
}

/// C's `%.{prec}g`: fixed or scientific notation, trailing zeros removed, exponent of at least
/// two digits.
pub fn format_g(v: f64, prec: usize) -> String {
    let prec = prec.max(1);
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sci = format!("{:.*e}", prec - 1, v);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= prec as i32 {
        let m = strip_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (prec as i32 - 1 - exp).max(0) as usize;
        strip_zeros(&format!("{v:.decimals$}")).to_string()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(v: f64) -> String {
        format_g(v, 6)
    }

    #[test]
    fn percent_g_matches_c() {
        assert_eq!(g(1e-05), "1e-05");
        assert_eq!(g(0.7978845608), "0.797885");
        assert_eq!(g(0.044715), "0.044715");
        assert_eq!(g(2.0), "2");
        assert_eq!(g(0.5), "0.5");
        assert_eq!(g(123456.0), "123456");
        assert_eq!(g(1234567.0), "1.23457e+06");
        assert_eq!(g(3.40282e38), "3.40282e+38");
        assert_eq!(g(0.0001), "0.0001");
        assert_eq!(g(0.00001234), "1.234e-05");
        assert_eq!(g(-2.5), "-2.5");
        assert_eq!(g(9.9999999), "10");
    }

    #[test]
    fn shortest_g_is_lossless() {
        for v in [
            0.7978845608028654,
            1e-05,
            0.1,
            1.0 / 3.0,
            6.02214076e23,
            -0.0,
        ] {
            let s = shortest_g(v);
            assert_eq!(s.parse::<f64>().unwrap().to_bits(), v.to_bits(), "{s}");
        }
        assert_eq!(shortest_g(0.797885), "0.797885");
    }

    #[test]
    fn literal_suffixes() {
        let mut s = String::new();
        write_float(&mut s, 2.0, DType::F16).unwrap();
        write_int(&mut s, 50257, DType::I64).unwrap();
        write_int(&mut s, -1, DType::I32).unwrap();
        write_float(&mut s, f64::NEG_INFINITY, DType::F32).unwrap();
        assert_eq!(s, "2f1650257i64-1-inff");
    }
}
