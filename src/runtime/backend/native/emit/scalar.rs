//! C expressions for elementwise operators, loads and stores, and conversions between the value
//! classes ([`Class`]).
//!
//! Floating-point operators compute in `float` with IEEE semantics, as the reference
//! interpreter does: `/`, `floor`, `ceil`, `round`, comparisons, `maximum`/`minimum` (NaN in
//! either operand gives NaN, as the interpreter's) and conversions give the interpreter's bits;
//! vectorised loops call glibc's vector math for `expf`, `tanhf`, `erff`, `logf`, `powf` (within
//! 4 ulps, [`super::prelude`]); `power` by a constant small integer or one half becomes
//! multiplies or a square root (docs/native.md: exponents 2, 3, 4 and one half). Integer
//! operators compute in `int64_t` and wrap to the result's width after every operator, as the
//! reference interpreter does; integer division by zero sets the kernel's error code.

use crate::ir::{DType, DTypeCode};
use crate::runtime::backend::native::graph::{class, Bin, Class, Cmp, Lit, Un};

/// A C value: its text (a temporary or a literal) and class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CV {
    pub text: String,
    pub class: Class,
}

impl CV {
    pub fn new(text: impl Into<String>, class: Class) -> CV {
        CV {
            text: text.into(),
            class,
        }
    }
}

/// The C type of a class.
pub fn ctype(c: Class) -> &'static str {
    match c {
        Class::F => "float",
        Class::I => "int64_t",
        Class::D => "double",
        Class::U => "uint64_t",
    }
}

/// The C element type a tensor of `d` is stored as.
pub fn storage(d: DType) -> &'static str {
    match (d.code, d.bits) {
        (DTypeCode::Float, 32) => "float",
        (DTypeCode::Float, 16) => "_Float16",
        (DTypeCode::BFloat, 16) => "uint16_t",
        (DTypeCode::Float, 64) => "double",
        (DTypeCode::Int, 8) => "int8_t",
        (DTypeCode::Int, 16) => "int16_t",
        (DTypeCode::Int, 32) => "int32_t",
        (DTypeCode::Int, 64) => "int64_t",
        (DTypeCode::UInt, 1 | 8) => "uint8_t",
        (DTypeCode::UInt, 16) => "uint16_t",
        (DTypeCode::UInt, 32) => "uint32_t",
        _ => "uint64_t",
    }
}

/// A load of element `off` of buffer `buf` (declared with [`storage`]).
pub fn load(buf: &str, d: DType, off: &str) -> CV {
    let e = format!("{buf}[{off}]");
    let c = class(d);
    let text = match (c, d.code, d.bits) {
        (Class::F, DTypeCode::BFloat, _) => format!("bf16_f({e})"),
        (Class::F, _, 16) => format!("(float){e}"),
        (Class::I, _, 64) => e,
        (Class::I, _, _) => format!("(int64_t){e}"),
        _ => e,
    };
    CV::new(text, c)
}

/// The C expression storing value `v` into an element of dtype `d`.
pub fn store_value(v: &CV, d: DType) -> String {
    let x = convert(v, class(d));
    match (d.code, d.bits) {
        (DTypeCode::BFloat, 16) => format!("f_bf16({x})"),
        (DTypeCode::Float, 16) => format!("(_Float16)({x})"),
        (DTypeCode::UInt, 1) => format!("(uint8_t)(({x}) != 0)"),
        (DTypeCode::Float, 32) | (DTypeCode::Float, 64) | (DTypeCode::Int, 64) => x,
        (DTypeCode::UInt, 64) => x,
        _ => format!("({})({x})", storage(d)),
    }
}

/// Converts a value to another class (C conversions; floats to integers through `f2i`, which
/// truncates toward zero, saturates and maps NaN to 0).
pub fn convert(v: &CV, to: Class) -> String {
    let t = &v.text;
    match (v.class, to) {
        (a, b) if a == b => t.clone(),
        (Class::F, Class::I) => format!("f2i({t})"),
        (Class::D, Class::I) => format!("d2i({t})"),
        (Class::F, Class::U) => format!("(uint64_t)f2i({t})"),
        (Class::D, Class::U) => format!("d2u({t})"),
        (Class::I | Class::U, Class::F) => format!("(float)({t})"),
        (Class::I | Class::U, Class::D) => format!("(double)({t})"),
        (Class::F, Class::D) => format!("(double)({t})"),
        (Class::D, Class::F) => format!("(float)({t})"),
        (Class::I, Class::U) => format!("(uint64_t)({t})"),
        (Class::U, Class::I) => format!("(int64_t)({t})"),
        _ => t.clone(),
    }
}

/// `cast` to dtype `d`: the value as it reads back after being stored in `d`.
pub fn cast(v: &CV, d: DType) -> CV {
    let c = class(d);
    let x = convert(v, c);
    let text = match (d.code, d.bits) {
        (DTypeCode::Float, 16) => format!("(float)(_Float16)({x})"),
        (DTypeCode::BFloat, 16) => format!("bf16_f(f_bf16({x}))"),
        (DTypeCode::UInt, 1) => {
            let z = if v.class == Class::F || v.class == Class::D {
                format!("(int64_t)(({}) != 0)", v.text)
            } else {
                format!("(int64_t)(({x}) != 0)")
            };
            return CV::new(z, c);
        }
        _ if c == Class::I => wrap(&x, d),
        _ => x,
    };
    CV::new(text, c)
}

/// Wraps an `int64_t` to the width of `d`.
pub fn wrap(x: &str, d: DType) -> String {
    match (d.code, d.bits) {
        (DTypeCode::Int, 64) => x.to_string(),
        (DTypeCode::UInt, 1) => format!("(int64_t)(({x}) != 0)"),
        _ => format!("(int64_t)({})({x})", storage(d)),
    }
}

/// A literal of class `c`.
pub fn literal(l: Lit, c: Class) -> CV {
    match (l, c) {
        (Lit::F(v), Class::F) => CV::new(float_lit(v), Class::F),
        (Lit::F(v), Class::D) => CV::new(double_lit(v), Class::D),
        (Lit::F(v), Class::I) => CV::new(format!("{}L", v.trunc() as i64), Class::I),
        (Lit::F(v), Class::U) => CV::new(format!("{}UL", v.max(0.0).trunc() as u64), Class::U),
        (Lit::I(v), Class::I) => CV::new(int_lit(v), Class::I),
        (Lit::I(v), Class::U) => CV::new(format!("{}UL", v as u64), Class::U),
        (Lit::I(v), Class::F) => CV::new(float_lit(v as f64), Class::F),
        (Lit::I(v), Class::D) => CV::new(double_lit(v as f64), Class::D),
    }
}

fn int_lit(v: i64) -> String {
    if v == i64::MIN {
        "INT64_MIN".to_string()
    } else {
        format!("{v}L")
    }
}

/// A `float` literal that reads back exactly.
pub fn float_lit(v: f64) -> String {
    let f = v as f32;
    if f.is_nan() {
        "NAN".into()
    } else if f.is_infinite() {
        if f > 0.0 {
            "INFINITY".into()
        } else {
            "(-INFINITY)".into()
        }
    } else {
        format!("{f:e}f")
    }
}

fn double_lit(v: f64) -> String {
    if v.is_nan() {
        "((double)NAN)".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "((double)INFINITY)".into()
        } else {
            "(-(double)INFINITY)".into()
        }
    } else {
        format!("{v:e}")
    }
}

/// A unary operator on a value of class `F` or `I`, result dtype `d`.
pub fn unary(u: Un, a: &CV, d: DType) -> CV {
    let x = &a.text;
    if a.class == Class::I {
        let t = match u {
            Un::Abs => format!("({x} < 0 ? -{x} : {x})"),
            Un::Neg => format!("(-{x})"),
            _ => format!("({x} < 0 ? 0L : {x})"),
        };
        return CV::new(wrap(&t, d), Class::I);
    }
    let t = match u {
        Un::Sqrt => format!("sqrtf({x})"),
        Un::Rsqrt => format!("(1.0f / sqrtf({x}))"),
        Un::Erf => format!("erff({x})"),
        Un::Exp => format!("expf({x})"),
        Un::Log => format!("logf({x})"),
        Un::Sigmoid => format!("(1.0f / (1.0f + expf(-{x})))"),
        Un::Tanh => format!("tanhf({x})"),
        Un::Floor => format!("floorf({x})"),
        Un::Ceil => format!("ceilf({x})"),
        Un::Round => format!("nearbyintf({x})"),
        Un::Abs => format!("fabsf({x})"),
        Un::Neg => format!("(-{x})"),
        Un::Relu => format!("({x} < 0.0f ? 0.0f : {x})"),
    };
    CV::new(t, Class::F)
}

/// Whether a unary operator calls a transcendental function (for cost estimates).
pub fn unary_cost(u: Un) -> u32 {
    match u {
        Un::Erf | Un::Exp | Un::Log | Un::Sigmoid | Un::Tanh => 10,
        Un::Sqrt | Un::Rsqrt => 4,
        _ => 1,
    }
}

/// A binary operator. `exponent` is the constant second operand of `power`, when known.
/// Integer division needs the error flag: the caller passes the name of the kernel's error
/// variable.
pub fn binary(op: Bin, a: &CV, b: &CV, d: DType, exponent: Option<f64>, err: &str) -> CV {
    let (x, y) = (&a.text, &b.text);
    if a.class == Class::I {
        let t = match op {
            Bin::Add => format!("({x} + {y})"),
            Bin::Sub => format!("({x} - {y})"),
            Bin::Mul => format!("({x} * {y})"),
            Bin::Div => format!(
                "({y} == 0 ? (__atomic_store_n(&{err}, 1, __ATOMIC_RELAXED), 0L) : {y} == -1 ? -{x} : {x} / {y})"
            ),
            Bin::Max => format!("({x} > {y} ? {x} : {y})"),
            Bin::Min => format!("({x} < {y} ? {x} : {y})"),
            Bin::Pow => format!("({x} * {y})"),
        };
        return CV::new(wrap(&t, d), Class::I);
    }
    let t = match op {
        Bin::Add => format!("({x} + {y})"),
        Bin::Sub => format!("({x} - {y})"),
        Bin::Mul => format!("({x} * {y})"),
        Bin::Div => format!("({x} / {y})"),
        // The interpreter's: the first operand when it is NaN or not smaller (not larger),
        // else the second (so NaN in either gives NaN).
        Bin::Max => format!("(({x}) >= ({y}) || ({x}) != ({x}) ? ({x}) : ({y}))"),
        Bin::Min => format!("(({x}) <= ({y}) || ({x}) != ({x}) ? ({x}) : ({y}))"),
        Bin::Pow => match exponent {
            Some(1.0) => x.clone(),
            Some(2.0) => format!("({x} * {x})"),
            Some(3.0) => format!("({x} * {x} * {x})"),
            Some(4.0) => format!("(({x} * {x}) * ({x} * {x}))"),
            Some(0.5) => format!("sqrtf({x})"),
            Some(-1.0) => format!("(1.0f / {x})"),
            Some(0.0) => "1.0f".to_string(),
            _ => format!("powf({x}, {y})"),
        },
    };
    CV::new(t, Class::F)
}

/// A comparison (result class `I`, 0 or 1). Operands of mixed classes compare as `F`.
pub fn compare(op: Cmp, a: &CV, b: &CV) -> CV {
    let (x, y) = (&a.text, &b.text);
    let o = match op {
        Cmp::Lt => "<",
        Cmp::Gt => ">",
        Cmp::Eq => "==",
        Cmp::Le => "<=",
        Cmp::Ge => ">=",
        Cmp::Ne => "!=",
    };
    CV::new(format!("(int64_t)({x} {o} {y})"), Class::I)
}
