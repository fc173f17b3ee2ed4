//! Attribute values and operator attribute schemas.
//!
//! A call's attributes are stored as [`Attrs`]: one [`AttrValue`] per field of the operator's
//! schema, in declaration order, with omitted fields holding their default. The printer writes
//! only fields that differ from their default (and fields that have none), as TVM's does.

use super::device::VirtualDevice;
use super::types::DType;
use std::fmt;
use std::hash::{Hash, Hasher};

/// A typed attribute value.
#[derive(Clone, Debug)]
pub enum AttrValue {
    /// An integer literal and its dtype (`int32` unless suffixed).
    Int(i64, DType),
    /// A float literal and its dtype (`float32` for `f`, else the suffix width). The value is
    /// kept exactly as written. Fields declared as `double` are tagged `float32`, so they print
    /// with a plain `f` suffix as TVM's printer writes them, but keep full precision.
    Float(f64, DType),
    /// `True` or `False`.
    Bool(bool),
    /// A string (dtype fields and layouts are strings too).
    Str(String),
    /// `[a, b, ...]`.
    Array(Vec<AttrValue>),
    /// `None` / `nullptr`: an unset object field.
    None,
    /// A virtual device.
    Device(VirtualDevice),
    /// An unresolved `meta[key][index]` reference to an object with no literal form.
    Meta(String, u32),
}

impl PartialEq for AttrValue {
    fn eq(&self, other: &AttrValue) -> bool {
        use AttrValue::*;
        match (self, other) {
            (Int(a, da), Int(b, db)) => a == b && da == db,
            (Float(a, da), Float(b, db)) => a.to_bits() == b.to_bits() && da == db,
            (Bool(a), Bool(b)) => a == b,
            (Str(a), Str(b)) => a == b,
            (Array(a), Array(b)) => a == b,
            (None, None) => true,
            (Device(a), Device(b)) => a == b,
            (Meta(ka, ia), Meta(kb, ib)) => ka == kb && ia == ib,
            _ => false,
        }
    }
}

impl Eq for AttrValue {}

impl Hash for AttrValue {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            AttrValue::Int(v, d) => (v, d).hash(state),
            AttrValue::Float(v, d) => (v.to_bits(), d).hash(state),
            AttrValue::Bool(b) => b.hash(state),
            AttrValue::Str(s) => s.hash(state),
            AttrValue::Array(a) => a.hash(state),
            AttrValue::None => {}
            AttrValue::Device(d) => d.hash(state),
            AttrValue::Meta(k, i) => (k, i).hash(state),
        }
    }
}

impl AttrValue {
    /// An integer: `int32`, or `int64` when it does not fit (as the text format reads an
    /// unsuffixed integer, so that printing and parsing it again gives the same value).
    pub fn int(v: i64) -> AttrValue {
        let dtype = if i32::try_from(v).is_ok() {
            DType::I32
        } else {
            DType::I64
        };
        AttrValue::Int(v, dtype)
    }

    /// An array of integers, each as [`AttrValue::int`] makes it.
    pub fn ints(vs: &[i64]) -> AttrValue {
        AttrValue::Array(vs.iter().map(|&v| AttrValue::int(v)).collect())
    }

    /// The integer, if this is one (booleans count as 0/1).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            AttrValue::Int(v, _) => Some(*v),
            AttrValue::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    /// The float value of a float or integer.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            AttrValue::Float(v, _) => Some(*v),
            AttrValue::Int(v, _) => Some(*v as f64),
            _ => None,
        }
    }

    /// The boolean value of a bool or 0/1 integer.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            AttrValue::Bool(b) => Some(*b),
            AttrValue::Int(0, _) => Some(false),
            AttrValue::Int(1, _) => Some(true),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integers of an integer array.
    pub fn as_ints(&self) -> Option<Vec<i64>> {
        match self {
            AttrValue::Array(a) => a.iter().map(AttrValue::as_int).collect(),
            _ => None,
        }
    }

    /// The array elements, if this is an array.
    pub fn as_array(&self) -> Option<&[AttrValue]> {
        match self {
            AttrValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// Whether this is `None`.
    pub fn is_none(&self) -> bool {
        matches!(self, AttrValue::None)
    }

    /// A short description of the value's kind, for messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            AttrValue::Int(..) => "an integer",
            AttrValue::Float(..) => "a float",
            AttrValue::Bool(_) => "a boolean",
            AttrValue::Str(_) => "a string",
            AttrValue::Array(_) => "an array",
            AttrValue::None => "None",
            AttrValue::Device(_) => "a virtual device",
            AttrValue::Meta(..) => "a meta reference",
        }
    }
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Int(v, d) => super::literal::write_int(f, *v, *d),
            AttrValue::Float(v, d) => super::literal::write_float(f, *v, *d),
            AttrValue::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
            AttrValue::Str(s) => super::write_escaped(f, s),
            AttrValue::Array(a) => {
                f.write_str("[")?;
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            AttrValue::None => f.write_str("None"),
            AttrValue::Device(d) => write!(f, "{d}"),
            AttrValue::Meta(k, i) => write!(f, "meta[{k}][{i}]"),
        }
    }
}

/// The declared type of an attribute field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrType {
    /// An integer (`int`, `IntImm`, `IndexExpr`).
    Int,
    /// An integer or `None` (an optional `IndexExpr` such as `channels` or `units`).
    OptInt,
    /// A floating-point number (`double`); integers are accepted and converted.
    Float,
    /// A boolean; `0`/`1` are accepted.
    Bool,
    /// A string such as a layout or a mode.
    Str,
    /// A dtype name as a string; `""` means unset.
    DType,
    /// An array of integers.
    Ints,
    /// An array of integers, or `None`.
    OptInts,
    /// An array of arrays of integers (`pad_width`).
    IntsNested,
    /// An integer or an array of integers (`indices_or_sections`).
    IntOrInts,
    /// An array of floats or integers.
    Floats,
    /// A virtual device.
    Device,
    /// Anything; no conversion.
    Any,
}

impl AttrType {
    /// What the field expects, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            AttrType::Int => "an integer",
            AttrType::OptInt => "an integer or None",
            AttrType::Float => "a number",
            AttrType::Bool => "a boolean",
            AttrType::Str => "a string",
            AttrType::DType => "a dtype string such as \"float32\"",
            AttrType::Ints => "an array of integers",
            AttrType::OptInts => "an array of integers or None",
            AttrType::IntsNested => "an array of integer arrays",
            AttrType::IntOrInts => "an integer or an array of integers",
            AttrType::Floats => "an array of numbers",
            AttrType::Device => "a virtual device",
            AttrType::Any => "a value",
        }
    }

    /// Converts a parsed value to this field type, or explains why it cannot.
    pub fn coerce(self, v: AttrValue) -> Result<AttrValue, String> {
        let bad = |v: &AttrValue| {
            Err(format!(
                "expected {}, found {}",
                self.describe(),
                v.kind_name()
            ))
        };
        let is_int = |v: &AttrValue| matches!(v, AttrValue::Int(..));
        let is_num = |v: &AttrValue| matches!(v, AttrValue::Int(..) | AttrValue::Float(..));
        match self {
            AttrType::Any => Ok(v),
            AttrType::Int => match v {
                AttrValue::Int(..) => Ok(v),
                AttrValue::Bool(b) => Ok(AttrValue::int(b as i64)),
                _ => bad(&v),
            },
            AttrType::OptInt => match v {
                AttrValue::Int(..) | AttrValue::None => Ok(v),
                _ => bad(&v),
            },
            AttrType::Float => match v {
                AttrValue::Float(x, _) => Ok(AttrValue::Float(x, DType::F32)),
                AttrValue::Int(x, _) => Ok(AttrValue::Float(x as f64, DType::F32)),
                _ => bad(&v),
            },
            AttrType::Bool => match v.as_bool() {
                Some(b) => Ok(AttrValue::Bool(b)),
                None => bad(&v),
            },
            AttrType::Str => match v {
                AttrValue::Str(_) => Ok(v),
                _ => bad(&v),
            },
            AttrType::DType => match &v {
                AttrValue::Str(s) if s.is_empty() || DType::parse(s).is_some() => Ok(v),
                AttrValue::Str(s) => Err(format!("`{s}` is not a dtype")),
                AttrValue::None => Ok(AttrValue::Str(String::new())),
                _ => bad(&v),
            },
            AttrType::Ints | AttrType::OptInts | AttrType::IntOrInts => match &v {
                AttrValue::Array(a) if a.iter().all(is_int) => Ok(v),
                AttrValue::None if self == AttrType::OptInts => Ok(v),
                AttrValue::Int(..) if self == AttrType::IntOrInts => Ok(v),
                _ => bad(&v),
            },
            AttrType::IntsNested => match &v {
                AttrValue::Array(a)
                    if a.iter()
                        .all(|e| matches!(e, AttrValue::Array(x) if x.iter().all(is_int))) =>
                {
                    Ok(v)
                }
                _ => bad(&v),
            },
            AttrType::Floats => match &v {
                AttrValue::Array(a) if a.iter().all(is_num) => Ok(v),
                _ => bad(&v),
            },
            AttrType::Device => match v {
                AttrValue::Device(_) => Ok(v),
                AttrValue::None => Ok(AttrValue::Device(VirtualDevice::unconstrained())),
                _ => bad(&v),
            },
        }
    }
}

/// A field's default value, in a form that can live in a `static` table.
#[derive(Clone, Copy, Debug)]
pub enum AttrDefault {
    /// An `int32` integer.
    Int(i64),
    /// A `double`.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A string.
    Str(&'static str),
    /// An array of `int32` integers.
    Ints(&'static [i64]),
    /// `None`.
    None,
    /// The unconstrained virtual device.
    Unconstrained,
    /// No declared default: omitted means `None`, and the field is always printed.
    Required,
}

impl AttrDefault {
    /// The default as a value.
    pub fn value(self) -> AttrValue {
        match self {
            AttrDefault::Int(v) => AttrValue::int(v),
            AttrDefault::Float(v) => AttrValue::Float(v, DType::F32),
            AttrDefault::Bool(b) => AttrValue::Bool(b),
            AttrDefault::Str(s) => AttrValue::Str(s.to_string()),
            AttrDefault::Ints(v) => AttrValue::ints(v),
            AttrDefault::None | AttrDefault::Required => AttrValue::None,
            AttrDefault::Unconstrained => AttrValue::Device(VirtualDevice::unconstrained()),
        }
    }
}

/// One declared attribute field of an operator.
#[derive(Clone, Copy, Debug)]
pub struct AttrField {
    /// Field name as written in calls.
    pub name: &'static str,
    /// Declared type.
    pub ty: AttrType,
    /// Declared default.
    pub default: AttrDefault,
}

/// Shorthand for building schema tables: `field("axis", AttrType::Int, AttrDefault::Int(0))`.
pub const fn field(name: &'static str, ty: AttrType, default: AttrDefault) -> AttrField {
    AttrField { name, ty, default }
}

/// A call's attribute values, one per schema field, in declaration order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Attrs {
    /// The values, aligned with the operator's schema.
    pub values: Vec<AttrValue>,
}

impl Attrs {
    /// All fields at their defaults.
    pub fn defaults(schema: &[AttrField]) -> Attrs {
        Attrs {
            values: schema.iter().map(|f| f.default.value()).collect(),
        }
    }

    /// The value of a named field.
    pub fn get<'a>(&'a self, schema: &[AttrField], name: &str) -> Option<&'a AttrValue> {
        schema
            .iter()
            .position(|f| f.name == name)
            .and_then(|i| self.values.get(i))
    }

    /// Sets a named field (which must be in the schema); returns whether it was found.
    pub fn set(&mut self, schema: &[AttrField], name: &str, v: AttrValue) -> bool {
        match schema.iter().position(|f| f.name == name) {
            Some(i) if i < self.values.len() => {
                self.values[i] = v;
                true
            }
            _ => false,
        }
    }

    /// The fields to print: those differing from their default, and those without one.
    pub fn non_default<'a>(
        &'a self,
        schema: &'a [AttrField],
    ) -> impl Iterator<Item = (&'static str, &'a AttrValue)> + 'a {
        schema
            .iter()
            .zip(&self.values)
            .filter(|(f, v)| matches!(f.default, AttrDefault::Required) || f.default.value() != **v)
            .map(|(f, v)| (f.name, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coercion_accepts_and_rejects() {
        assert_eq!(
            AttrType::Bool.coerce(AttrValue::int(1)),
            Ok(AttrValue::Bool(true))
        );
        assert!(AttrType::Ints.coerce(AttrValue::Str("x".into())).is_err());
        assert_eq!(
            AttrType::Float.coerce(AttrValue::int(2)),
            Ok(AttrValue::Float(2.0, DType::F32))
        );
        assert!(AttrType::DType
            .coerce(AttrValue::Str("floaty".into()))
            .is_err());
        let nested = AttrValue::Array(vec![AttrValue::ints(&[0, 0]), AttrValue::ints(&[1, 1])]);
        assert!(AttrType::IntsNested.coerce(nested).is_ok());
    }

    #[test]
    fn non_default_skips_defaults_but_keeps_required() {
        let schema = [
            field("units", AttrType::OptInt, AttrDefault::Required),
            field("out_dtype", AttrType::DType, AttrDefault::Str("")),
            field("padding", AttrType::Ints, AttrDefault::Ints(&[0, 0])),
        ];
        let mut a = Attrs::defaults(&schema);
        assert_eq!(
            a.non_default(&schema).map(|x| x.0).collect::<Vec<_>>(),
            ["units"]
        );
        a.set(&schema, "padding", AttrValue::ints(&[0, 0, 0, 0]));
        assert_eq!(
            a.non_default(&schema).map(|x| x.0).collect::<Vec<_>>(),
            ["units", "padding"]
        );
    }
}
