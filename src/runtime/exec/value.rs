//! Run-time values: tensors and (nested) tuples of them.
//!
//! Tensors are shared through `Arc`, so tuples, projections and let-bound variables never copy
//! data. Kernels see values flattened: a tuple is its fields' tensors in order, depth first
//! ([`Value::flatten`]), and results are rebuilt from flat tensors by their type
//! ([`Value::unflatten`]).

use super::tensor::{Shape, Tensor};
use crate::ir::Type;
use std::sync::Arc;

/// A run-time value.
#[derive(Clone, Debug)]
pub enum Value {
    /// A tensor.
    Tensor(Arc<Tensor>),
    /// A tuple.
    Tuple(Vec<Value>),
}

impl Value {
    /// A tensor value.
    pub fn tensor(t: Tensor) -> Value {
        Value::Tensor(Arc::new(t))
    }

    /// Appends the tensors of this value, depth first.
    pub fn flatten_into<'a>(&'a self, out: &mut Vec<&'a Arc<Tensor>>) {
        let mut stack = vec![self];
        // Fields are pushed in reverse so they pop in order.
        while let Some(v) = stack.pop() {
            match v {
                Value::Tensor(t) => out.push(t),
                Value::Tuple(fields) => stack.extend(fields.iter().rev()),
            }
        }
    }

    /// The tensors of this value, depth first.
    pub fn flatten(&self) -> Vec<&Arc<Tensor>> {
        let mut out = Vec::new();
        self.flatten_into(&mut out);
        out
    }

    /// Rebuilds a value of type `ty` from flat tensors (taken in order from `tensors`). Returns
    /// `None` if there are too few tensors or the type is not made of tensors and tuples.
    pub fn unflatten(ty: &Type, tensors: &mut impl Iterator<Item = Arc<Tensor>>) -> Option<Value> {
        match ty {
            Type::Tensor(_) => tensors.next().map(Value::Tensor),
            Type::Tuple(fields) => fields
                .iter()
                .map(|f| Value::unflatten(f, tensors))
                .collect::<Option<Vec<_>>>()
                .map(Value::Tuple),
            _ => None,
        }
    }

    /// The tensor, if this is one.
    pub fn as_tensor(&self) -> Option<&Arc<Tensor>> {
        match self {
            Value::Tensor(t) => Some(t),
            Value::Tuple(_) => None,
        }
    }
}

/// The static tensor types of a type, flattened depth first; `None` if some part is not a
/// tensor with a static shape.
pub fn flat_shapes(ty: &Type) -> Option<Vec<Shape>> {
    let mut out = Vec::new();
    let mut stack = vec![ty];
    while let Some(t) = stack.pop() {
        match t {
            Type::Tensor(tt) => out.push(Shape::of(tt)?),
            Type::Tuple(fields) => stack.extend(fields.iter().rev()),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, TensorType};

    #[test]
    fn flatten_and_rebuild_nested_tuples() {
        let t = |n: usize| Arc::new(Tensor::zeros(DType::F32, &[n]).unwrap());
        let v = Value::Tuple(vec![
            Value::Tensor(t(1)),
            Value::Tuple(vec![Value::Tensor(t(2)), Value::Tensor(t(3))]),
        ]);
        let sizes: Vec<usize> = v.flatten().iter().map(|x| x.numel()).collect();
        assert_eq!(sizes, vec![1, 2, 3]);
        let tt = |n: i64| Type::Tensor(TensorType::new(&[n], DType::F32));
        let ty = Type::Tuple(vec![tt(1), Type::Tuple(vec![tt(2), tt(3)])]);
        let shapes = flat_shapes(&ty).unwrap();
        assert_eq!(
            shapes.iter().map(|s| s.dims[0]).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        let flat: Vec<Arc<Tensor>> = v.flatten().into_iter().cloned().collect();
        let back = Value::unflatten(&ty, &mut flat.into_iter()).unwrap();
        assert_eq!(back.flatten().len(), 3);
    }
}
