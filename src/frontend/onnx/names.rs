//! ONNX value names as Relay identifiers, and back.
//!
//! A Relay identifier (after `%` or `@`) is `[A-Za-z_][A-Za-z0-9_/]*`. ONNX names are any
//! string: `onnx::Gemm_0`, `/h.0/attn/Add_output_0`, `input.1`, `123`. [`to_ident`] keeps every
//! character an identifier may hold and writes any other as the escape `_u` + lowercase hex code
//! point + `_` (`:` is `_u3a_`). A name that already is an identifier stays as it is, unless it
//! contains `_u`, whose `_` is then escaped (`_u5f_`) so that decoding is unambiguous. A leading
//! digit or `/` is escaped too, and the empty name is `_u_`. [`from_ident`] inverts it, so the
//! mapping is stable (it depends on the name alone) and injective.

/// The identifier for an ONNX value name.
pub fn to_ident(name: &str) -> String {
    if name.is_empty() {
        return "_u_".into();
    }
    let mut out = String::with_capacity(name.len() + 8);
    let mut chars = name.chars().peekable();
    let mut first = true;
    while let Some(c) = chars.next() {
        let plain = match c {
            'A'..='Z' | 'a'..='z' => true,
            '_' => chars.peek() != Some(&'u'),
            '0'..='9' | '/' => !first,
            _ => false,
        };
        if plain {
            out.push(c);
        } else {
            out.push_str(&format!("_u{:x}_", c as u32));
        }
        first = false;
    }
    out
}

/// The ONNX value name of an identifier made by [`to_ident`], or `None` for a string that
/// [`to_ident`] never produces.
pub fn from_ident(ident: &str) -> Option<String> {
    if ident == "_u_" {
        return Some(String::new());
    }
    let b = ident.as_bytes();
    let mut out = String::with_capacity(ident.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'_' && b.get(i + 1) == Some(&b'u') {
            let end = i + 2 + ident[i + 2..].find('_')?;
            let hex = &ident[i + 2..end];
            // Only the canonical spelling: lowercase, no leading zeros (`0` itself, for NUL,
            // is canonical), not empty.
            if hex.is_empty()
                || (hex.starts_with('0') && hex != "0")
                || !hex.bytes().all(|h| matches!(h, b'0'..=b'9' | b'a'..=b'f'))
                || hex.len() > 6
            {
                return None;
            }
            out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
            i = end + 1;
        } else {
            let c = b[i];
            let ok = match c {
                b'A'..=b'Z' | b'a'..=b'z' | b'_' => true,
                b'0'..=b'9' | b'/' => i > 0,
                _ => false,
            };
            if !ok {
                return None;
            }
            out.push(c as char);
            i += 1;
        }
    }
    // Reject spellings `to_ident` would not produce (an escape of a plain character).
    (to_ident(&out) == ident).then_some(out)
}

/// Whether `s` is a Relay identifier.
pub fn is_ident(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(b'A'..=b'Z' | b'a'..=b'z' | b'_'))
        && b.all(|c| matches!(c, b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn typical_exporter_names() {
        assert_eq!(to_ident("x"), "x");
        assert_eq!(to_ident("Gemm_0"), "Gemm_0");
        assert_eq!(to_ident("onnx::Gemm_0"), "onnx_u3a__u3a_Gemm_0");
        assert_eq!(
            to_ident("/h.0/attn/Add_output_0"),
            "_u2f_h_u2e_0/attn/Add_output_0"
        );
        assert_eq!(to_ident("123"), "_u31_23");
        assert_eq!(to_ident("_up"), "_u5f_up");
        assert_eq!(to_ident("a b"), "a_u20_b");
        assert_eq!(to_ident(""), "_u_");
        assert_eq!(from_ident("onnx_u3a__u3a_Gemm_0").unwrap(), "onnx::Gemm_0");
        assert_eq!(from_ident("a_u41_"), None, "non-canonical escape");
        assert_eq!(from_ident("a-b"), None);
        assert_eq!(from_ident("a_u"), None);
        // NUL is escaped as `_u0_`, the one canonical escape that starts with `0`.
        assert_eq!(to_ident("a\0b"), "a_u0_b");
        assert_eq!(from_ident("a_u0_b").unwrap(), "a\0b");
        assert_eq!(from_ident("a_u00_b"), None, "leading zero");
        assert_eq!(from_ident("_u0_").unwrap(), "\0");
    }

    fn names() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9_:./u-]{0,12}",
            any::<String>(),
            "(_u|u_|_|/|::|[0-9]|[a-f]){0,10}",
            "(\\x00|\\x01|a|_|0){0,8}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn identifiers_are_valid_and_decode_back(name in names()) {
            let id = to_ident(&name);
            prop_assert!(is_ident(&id), "{id:?} from {name:?}");
            prop_assert_eq!(from_ident(&id), Some(name.clone()));
            if is_ident(&name) && !name.contains("_u") {
                prop_assert_eq!(id, name);
            }
        }

        #[test]
        fn different_names_get_different_identifiers(a in names(), b in names()) {
            prop_assert_eq!(a == b, to_ident(&a) == to_ident(&b));
        }

        #[test]
        fn decoding_accepts_only_what_encoding_makes(s in "[a-z_/0-9u]{0,12}|(_u0_|_u|0|a|_){0,6}") {
            if let Some(name) = from_ident(&s) {
                prop_assert_eq!(to_ident(&name), s);
            }
        }
    }
}
