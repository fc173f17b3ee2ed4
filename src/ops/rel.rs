//! Shared type relations.

use super::{RelCall, RelError};
use crate::ir::{Dim, TensorType, Type};

/// The result has the type of argument 0.
pub fn identity(c: &RelCall<'_>) -> Result<Type, RelError> {
    Ok(Type::Tensor(c.tensor(0)?.clone()))
}

/// Numpy-style broadcasting of two tensors of the same dtype.
pub fn broadcast(c: &RelCall<'_>) -> Result<Type, RelError> {
    let a = c.tensor(0)?;
    let b = c.tensor(1)?;
    if a.dtype != b.dtype {
        return Err(RelError::at(
            1,
            format!(
                "`{}` needs operands of one dtype, found `{}` and `{}`",
                c.op.name, a.dtype, b.dtype
            ),
        ));
    }
    let shape = broadcast_shapes(&a.shape, &b.shape).ok_or_else(|| {
        RelError::new(format!(
            "shapes `{a}` and `{b}` of `{}` do not broadcast",
            c.op.name
        ))
    })?;
    Ok(Type::Tensor(TensorType {
        shape,
        dtype: a.dtype,
    }))
}

/// Broadcasts two shapes, aligning them at the innermost dimension.
pub fn broadcast_shapes(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let da = if i + a.len() >= n {
            &a[i + a.len() - n]
        } else {
            &Dim::Fixed(1)
        };
        let db = if i + b.len() >= n {
            &b[i + b.len() - n]
        } else {
            &Dim::Fixed(1)
        };
        out.push(match (da, db) {
            (Dim::Fixed(1), d) | (d, Dim::Fixed(1)) => d.clone(),
            (x, y) if x == y => x.clone(),
            (Dim::Any, d) | (d, Dim::Any) => d.clone(),
            _ => return None,
        });
    }
    Some(out)
}
