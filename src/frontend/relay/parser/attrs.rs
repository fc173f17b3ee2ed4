//! Attribute lists (`key=value, ...`), attribute values and the inline virtual device literal.

use super::{PResult, Parser};
use crate::diag::*;
use crate::frontend::relay::lexer::Tok;
use crate::frontend::relay::number::{parse_number, Number};
use crate::ir::device::{device_type_code, DEVICE_TYPES};
use crate::ir::*;
use crate::ops::OpDef;
use crate::source::Span;

/// One parsed `key=value`.
pub(crate) struct ParsedAttr {
    pub key: String,
    pub key_span: Span,
    pub value: AttrValue,
    pub value_span: Span,
}

impl<'s> Parser<'s> {
    /// Whether the next tokens are `key =` or `a.b.c =`.
    pub(crate) fn at_attr_start(&self) -> bool {
        if self.peek() != Tok::Ident {
            return false;
        }
        let mut i = 1;
        while self.peek_at(i) == Tok::Dot && self.peek_at(i + 1) == Tok::Ident {
            i += 2;
        }
        self.peek_at(i) == Tok::Eq
    }

    /// `key=value` items separated by commas, up to (not including) `close`.
    pub(crate) fn attr_list(&mut self, close: Tok) -> PResult<Vec<ParsedAttr>> {
        let mut out: Vec<ParsedAttr> = Vec::new();
        while self.peek() != close {
            if !self.at_attr_start() {
                return Err(self.unexpected("an attribute `name=value`"));
            }
            let first = self.bump();
            let mut end = first.end;
            while self.peek() == Tok::Dot {
                self.bump();
                end = self.bump().end;
            }
            let key_span = Span::new(self.span(first).file, first.start as usize, end as usize);
            let key = self.src[first.start as usize..end as usize].to_string();
            self.bump(); // `=`
            let vstart = self.here();
            let value = self.attr_value()?;
            let value_span = self.since(vstart);
            if let Some(prev) = out.iter().find(|a| a.key == key) {
                let d = Diagnostic::error(E0404, format!("attribute `{key}` is given twice"))
                    .with_primary(key_span, "given again here")
                    .with_secondary(prev.key_span, "first given here");
                self.report(d);
            } else {
                out.push(ParsedAttr {
                    key,
                    key_span,
                    value,
                    value_span,
                });
            }
            if !self.eat(Tok::Comma) {
                break;
            }
        }
        Ok(out)
    }

    /// An attribute value.
    fn attr_value(&mut self) -> PResult<AttrValue> {
        self.enter()?;
        let t = self.tok();
        let v = match t.kind {
            Tok::Number => {
                self.bump();
                match parse_number(self.text(t)) {
                    Ok(Number::Int(v, d)) => AttrValue::Int(v, d),
                    Ok(Number::Float(v, d)) => AttrValue::Float(v, d),
                    Err(e) => return Err(self.number_error(e, self.span(t))),
                }
            }
            Tok::True | Tok::False => {
                self.bump();
                AttrValue::Bool(t.kind == Tok::True)
            }
            Tok::Str => {
                self.bump();
                AttrValue::Str(self.unescape(t)?)
            }
            Tok::LBracket => {
                self.bump();
                let mut items = Vec::new();
                while self.peek() != Tok::RBracket {
                    items.push(self.attr_value()?);
                    if !self.eat(Tok::Comma) {
                        break;
                    }
                }
                self.expect(Tok::RBracket, "`,` or `]` in the array")?;
                AttrValue::Array(items)
            }
            Tok::LParen => {
                self.bump();
                let v = self.attr_value()?;
                self.expect(Tok::RParen, "`)`")?;
                v
            }
            Tok::Ident if matches!(self.text(t), "None" | "nullptr") => {
                self.bump();
                AttrValue::None
            }
            Tok::Ident if self.text(t) == "VirtualDevice" && self.peek_at(1) == Tok::LParen => {
                AttrValue::Device(self.device_literal()?)
            }
            Tok::Meta => {
                self.bump();
                let (key, index) = super::expr::split_meta(self.text(t));
                let Some(index) = index else {
                    let d = Diagnostic::error(E0107, "meta reference index is too large")
                        .with_primary(self.span(t), "index does not fit in 32 bits");
                    return Err(self.fatal(d));
                };
                match self.m.meta.get(key, index) {
                    Some(MetaObject::Device(d)) => AttrValue::Device(d.clone()),
                    None if key == "VirtualDevice" && self.metadata_failed => {
                        AttrValue::Device(VirtualDevice::unconstrained())
                    }
                    None if key == "VirtualDevice" => {
                        let msg = if self.m.meta.is_empty() {
                            format!("`meta[{key}][{index}]` cannot be resolved: the module has no metadata section")
                        } else {
                            format!("`meta[{key}][{index}]` is not in the metadata section")
                        };
                        let d = Diagnostic::error(E0602, msg)
                            .with_primary(self.span(t), "unresolved meta reference")
                            .with_note("write the device inline instead, e.g. `VirtualDevice(device=\"cuda\", id=0)`");
                        return Err(self.fatal(d));
                    }
                    _ => AttrValue::Meta(key.to_string(), index),
                }
            }
            _ => return Err(self.unexpected("an attribute value")),
        };
        self.leave();
        Ok(v)
    }

    /// `VirtualDevice(device="cuda", id=0, target="cuda", scope="global")`.
    fn device_literal(&mut self) -> PResult<VirtualDevice> {
        let start = self.here();
        self.bump();
        self.bump();
        let list = self.attr_list(Tok::RParen)?;
        self.expect(Tok::RParen, "`)` to close the virtual device")?;
        let mut vd = VirtualDevice::unconstrained();
        for a in list {
            let problem = match (a.key.as_str(), &a.value) {
                ("device" | "device_type", AttrValue::Str(s)) => match device_type_code(s) {
                    Some(c) => {
                        vd.device_type = Some(c);
                        None
                    }
                    None => Some(format!(
                        "unknown device `{s}`; known devices: {}",
                        DEVICE_TYPES.iter().map(|(_, n)| *n).collect::<Vec<_>>().join(", ")
                    )),
                },
                ("device" | "device_type", AttrValue::Int(c, _)) => {
                    vd.device_type = (*c > 0).then_some(*c as i32);
                    (*c == 0 || *c > i32::MAX as i64).then(|| format!("`{c}` is not a device type code"))
                }
                ("id" | "virtual_device_id", AttrValue::Int(c, _)) => {
                    vd.virtual_device_id = (*c >= 0).then_some(*c as i32);
                    (*c > i32::MAX as i64 || *c < -1).then(|| format!("`{c}` is not a device id"))
                }
                ("target", AttrValue::Str(s)) => {
                    vd.target = (!s.is_empty()).then(|| s.clone());
                    None
                }
                ("scope" | "memory_scope", AttrValue::Str(s)) => {
                    vd.memory_scope = (!s.is_empty()).then(|| s.clone());
                    None
                }
                ("device" | "device_type" | "id" | "virtual_device_id" | "target" | "scope" | "memory_scope", v) => {
                    Some(format!("`{}` cannot be {}", a.key, v.kind_name()))
                }
                (k, _) => Some(format!(
                    "unknown virtual device field `{k}`; fields are `device`, `id`, `target` and `scope`"
                )),
            };
            if let Some(msg) = problem {
                let d = Diagnostic::error(E0406, msg)
                    .with_primary(a.key_span.to(a.value_span), "invalid field")
                    .with_secondary(start, "in this virtual device");
                self.report(d);
            }
        }
        Ok(vd)
    }

    /// Checks that an attribute value is a virtual device.
    pub(crate) fn device_value(&mut self, v: AttrValue, span: Span) -> Option<VirtualDevice> {
        match v {
            AttrValue::Device(d) => Some(d),
            other => {
                let d = Diagnostic::error(
                    E0406,
                    format!("expected a virtual device, found {}", other.kind_name()),
                )
                .with_primary(span, "not a virtual device")
                .with_note(
                    "write `VirtualDevice(device=\"cuda\", id=0)` or `meta[VirtualDevice][i]`",
                );
                self.report(d);
                None
            }
        }
    }

    /// Converts parsed `key=value` items into an operator's attributes, reporting unknown
    /// names and ill-typed values.
    pub(crate) fn op_attrs(&mut self, def: &OpDef, list: Vec<ParsedAttr>) -> Attrs {
        let mut attrs = Attrs::defaults(def.attrs);
        for a in list {
            let Some(field) = def.attr_field(&a.key) else {
                let mut d = Diagnostic::error(
                    E0402,
                    format!("`{}` has no attribute `{}`", def.name, a.key),
                )
                .with_primary(a.key_span, "unknown attribute");
                if let Some(s) = crate::util::closest(&a.key, def.attrs.iter().map(|f| f.name)) {
                    d = d.with_note(format!("help: did you mean `{s}`?"));
                } else if def.attrs.is_empty() {
                    d = d.with_note(format!("`{}` takes no attributes", def.name));
                } else {
                    let names: Vec<_> = def.attrs.iter().map(|f| format!("`{}`", f.name)).collect();
                    d = d.with_note(format!("its attributes are {}", names.join(", ")));
                }
                self.report(d);
                continue;
            };
            match field.ty.coerce(a.value) {
                Ok(v) => {
                    attrs.set(def.attrs, field.name, v);
                }
                Err(msg) => {
                    let d = Diagnostic::error(
                        E0403,
                        format!("attribute `{}` of `{}`: {msg}", a.key, def.name),
                    )
                    .with_primary(a.value_span, format!("expected {}", field.ty.describe()));
                    self.report(d);
                }
            }
        }
        attrs
    }

    /// The contents of a string token with escapes resolved.
    fn unescape(&mut self, t: crate::frontend::relay::lexer::Token) -> PResult<String> {
        let raw = self.text(t);
        let inner = &raw[1..raw.len() - 1];
        if !inner.contains('\\') {
            return Ok(inner.to_string());
        }
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.char_indices();
        while let Some((i, c)) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            let esc = chars.next().map(|(_, e)| e);
            match esc {
                Some('"') => out.push('"'),
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some('0') => out.push('\0'),
                Some('x') => {
                    let hex: String = chars.by_ref().take(2).map(|(_, h)| h).collect();
                    match u8::from_str_radix(&hex, 16) {
                        Ok(b) if b < 0x80 && hex.len() == 2 => out.push(b as char),
                        _ => return Err(self.bad_escape(t, i, 2 + hex.len())),
                    }
                }
                other => {
                    let len = 1 + other.map_or(0, char::len_utf8);
                    return Err(self.bad_escape(t, i, len));
                }
            }
        }
        Ok(out)
    }

    fn bad_escape(
        &mut self,
        t: crate::frontend::relay::lexer::Token,
        offset: usize,
        len: usize,
    ) -> super::Fatal {
        let start = t.start as usize + 1 + offset;
        let span = Span::new(self.span(t).file, start, start + len);
        let d = Diagnostic::error(
            E0109,
            format!("invalid escape `{}` in string", &self.src[span.range()]),
        )
        .with_primary(span, "unknown escape")
        .with_note("valid escapes are \\\" \\\\ \\n \\t \\r \\0 and \\xHH (ASCII)");
        self.fatal(d)
    }
}
