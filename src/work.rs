//! Work of operator calls, for the analytic cost model (provisional: elementwise counts only).

use crate::ir::{DType, Dim, ExprId, Module, Type};

/// Bytes per element of a dtype.
pub fn dtype_bytes(d: DType) -> f64 {
    d.bytes() as f64
}

/// Bytes of a value of the type (tuples summed; dynamic extents count as 1).
pub fn tensor_bytes(ty: &Type) -> f64 {
    match ty {
        Type::Tensor(t) => {
            let n: f64 = t
                .shape
                .iter()
                .map(|d| match d {
                    Dim::Fixed(x) => *x as f64,
                    _ => 1.0,
                })
                .product();
            n * dtype_bytes(t.dtype)
        }
        Type::Tuple(fs) => fs.iter().map(tensor_bytes).sum(),
        _ => 0.0,
    }
}

/// Floating-point operations of one call: one per output element.
pub fn call_flops(module: &Module, call: ExprId) -> f64 {
    match module.ty(call) {
        Some(Type::Tensor(t)) => t
            .shape
            .iter()
            .map(|d| match d {
                Dim::Fixed(x) => *x as f64,
                _ => 1.0,
            })
            .product(),
        _ => 0.0,
    }
}
