//! ONNX operators as collage operator calls, per opset.
//!
//! Each converter reads the node's inputs and attributes (attributes that became inputs in a
//! later opset are read from wherever the model's opset keeps them), checks what collage cannot
//! express (E3023), and emits calls whose types the operators' relations compute. Inputs that
//! must be known at import time (a `Reshape`'s shape, a `Slice`'s bounds, a `Pad`'s widths, ...)
//! are weights or folded values; otherwise E3025.

use super::{Cx, R};
use crate::diag::{E3016, E3022, E3023, E3025};
use crate::frontend::onnx::model::{AttrValue as A, Node};
use crate::frontend::onnx::tensor::DType as OnnxDType;
use crate::ir::{AttrValue, DType, Dim, ExprId};
use crate::ops::{rel, Op};

mod einsum;
mod recurrent;
mod written;

/// The highest rank an axes list, shape or permutation may describe.
const MAX_RANK: usize = 64;
/// The largest stride or dilation taken.
const MAX_STRIDE: i64 = 1 << 16;
/// The largest padding taken.
const MAX_PAD: i64 = 1 << 32;

fn int(v: i64) -> AttrValue {
    AttrValue::int(v)
}

fn ints(v: &[i64]) -> AttrValue {
    AttrValue::ints(v)
}

fn float(v: f64) -> AttrValue {
    AttrValue::Float(v, DType::F32)
}

fn string(s: &str) -> AttrValue {
    AttrValue::Str(s.to_string())
}

fn boolean(b: bool) -> AttrValue {
    AttrValue::Bool(b)
}

fn attr_int(n: &Node, name: &str, default: i64) -> i64 {
    match n.attr(name) {
        Some(A::Int(v)) => *v,
        _ => default,
    }
}

fn attr_float(n: &Node, name: &str, default: f32) -> f32 {
    match n.attr(name) {
        Some(A::Float(v)) => *v,
        Some(A::Int(v)) => *v as f32,
        _ => default,
    }
}

fn attr_ints(n: &Node, name: &str) -> Option<Vec<i64>> {
    match n.attr(name) {
        Some(A::Ints(v)) => Some(v.clone()),
        Some(A::Int(v)) => Some(vec![*v]),
        _ => None,
    }
}

fn attr_str<'n>(n: &'n Node, name: &str, default: &'n str) -> &'n str {
    match n.attr(name) {
        Some(A::String(s)) => s,
        _ => default,
    }
}

impl Cx<'_> {
    /// Input `i` of the current node, which must be present.
    fn input(&mut self, i: usize) -> R<ExprId> {
        let node = self.node();
        match node.inputs.get(i).filter(|s| !s.is_empty()) {
            Some(name) => self.value(name),
            None => Err(self.error(
                E3016,
                format!("`{}` needs input {i}, which is missing", node.op_type),
            )),
        }
    }

    /// Input `i` of the current node, when present.
    fn opt_input(&mut self, i: usize) -> R<Option<ExprId>> {
        match self.node().inputs.get(i).filter(|s| !s.is_empty()) {
            Some(name) => self.value(name).map(Some),
            None => Ok(None),
        }
    }

    /// Whether input `i` is present.
    fn has_input(&self, i: usize) -> bool {
        self.node().inputs.get(i).is_some_and(|s| !s.is_empty())
    }

    /// Input `i` as integers known at import time, `None` when it is omitted.
    fn const_ints(&self, i: usize) -> R<Option<Vec<i64>>> {
        let node = self.node();
        let Some(name) = node.inputs.get(i).filter(|s| !s.is_empty()) else {
            return Ok(None);
        };
        match self.known(name) {
            Some(t) => t.to_i64().map(Some).ok_or_else(|| {
                self.error(
                    E3023,
                    format!(
                        "input {i} (`{name}`) must hold integers, not {}",
                        t.dtype.name()
                    ),
                )
            }),
            None => Err(self.not_known(i, name)),
        }
    }

    /// Input `i` as numbers known at import time, `None` when it is omitted.
    fn const_floats(&self, i: usize) -> R<Option<Vec<f64>>> {
        let node = self.node();
        let Some(name) = node.inputs.get(i).filter(|s| !s.is_empty()) else {
            return Ok(None);
        };
        match self.known(name) {
            Some(t) => Ok(Some(t.to_f64())),
            None => Err(self.not_known(i, name)),
        }
    }

    fn not_known(&self, i: usize, name: &str) -> crate::diag::Diagnostic {
        self.error(
            E3025,
            format!(
                "input {i} (`{name}`) of `{}` must be known when the model is imported \
                 (a weight, or computed from shapes), but it depends on the inputs' values",
                self.node().op_type
            ),
        )
    }

    fn unsupported(&self, what: impl std::fmt::Display) -> crate::diag::Diagnostic {
        self.error(
            E3023,
            format!("`{}` with {what} is not supported", self.node().op_type),
        )
    }

    /// `axis` (possibly negative) as an index below `rank`.
    fn axis(&self, axis: i64, rank: usize) -> R<usize> {
        let r = rank as i64;
        let a = if axis < 0 { axis + r } else { axis };
        if (0..r.max(1)).contains(&a) || (r == 0 && a == 0) {
            Ok(a as usize)
        } else {
            Err(self.error(
                E3023,
                format!("axis {axis} is out of range for rank {rank}"),
            ))
        }
    }

    fn axes(&self, axes: &[i64], rank: usize) -> R<Vec<i64>> {
        if axes.len() > MAX_RANK {
            return Err(self.unsupported(format_args!("{} axes", axes.len())));
        }
        axes.iter()
            .map(|&a| self.axis(a, rank).map(|a| a as i64))
            .collect()
    }

    /// Checks that every value of attribute `what` lies in `lo..=hi`, so that the arithmetic
    /// on it and on shapes (each extent at most 2^40) cannot overflow.
    fn within(&self, what: &str, v: &[i64], lo: i64, hi: i64) -> R<()> {
        match v.iter().find(|&&x| x < lo || x > hi) {
            Some(x) => {
                Err(self.unsupported(format_args!("{what} {x} (collage takes {lo} to {hi})")))
            }
            None => Ok(()),
        }
    }

    fn binary(&mut self, op: Op) -> R<ExprId> {
        let a = self.input(0)?;
        let b = self.input(1)?;
        self.call(op, &[a, b], &[])
    }

    fn unary(&mut self, op: Op) -> R<ExprId> {
        let a = self.input(0)?;
        self.call(op, &[a], &[])
    }

    /// `op` folded over all inputs (variadic `Sum`, `Max`, `Min`).
    fn variadic(&mut self, op: Op) -> R<ExprId> {
        let n = self.node().inputs.len();
        let mut acc = self.input(0)?;
        for i in 1..n {
            let b = self.input(i)?;
            acc = self.call(op, &[acc, b], &[])?;
        }
        Ok(acc)
    }

    fn dtype_of_expr(&self, e: ExprId) -> R<DType> {
        Ok(self.ty(e)?.dtype)
    }

    fn reshape(&mut self, x: ExprId, shape: &[i64]) -> R<ExprId> {
        if self.shape(x)? == shape {
            return Ok(x);
        }
        // The shapes are concrete: a 0 is an empty extent, not "copy the input's".
        let zero = shape.contains(&0);
        self.call(
            Op::Reshape,
            &[x],
            &[("newshape", ints(shape)), ("allowzero", boolean(zero))],
        )
    }

    fn cast(&mut self, x: ExprId, to: DType) -> R<ExprId> {
        if self.dtype_of_expr(x)? == to {
            return Ok(x);
        }
        self.call(Op::Cast, &[x], &[("dtype", string(&to.to_string()))])
    }

    /// `x * k` for a scalar `k` of `x`'s dtype (nothing when `k` is 1).
    fn scale(&mut self, x: ExprId, k: f64) -> R<ExprId> {
        if k == 1.0 {
            return Ok(x);
        }
        let d = self.dtype_of_expr(x)?;
        let s = self.scalar(k, d);
        self.call(Op::Multiply, &[x, s], &[])
    }

    fn add_scalar(&mut self, x: ExprId, k: f64) -> R<ExprId> {
        let d = self.dtype_of_expr(x)?;
        let s = self.scalar(k, d);
        self.call(Op::Add, &[x, s], &[])
    }
}

/// Converts the current node; its outputs are bound in `cx`.
pub(super) fn convert(cx: &mut Cx<'_>, node: &Node) -> R<()> {
    let opset = cx.opset();
    let out = match node.op_type.as_str() {
        "Add" => cx.binary(Op::Add)?,
        "Sub" => cx.binary(Op::Subtract)?,
        "Mul" => cx.binary(Op::Multiply)?,
        "Div" => cx.binary(Op::Divide)?,
        "Pow" => {
            let a = cx.input(0)?;
            let mut b = cx.input(1)?;
            let d = cx.dtype_of_expr(a)?;
            b = cx.cast(b, d)?;
            cx.call(Op::Power, &[a, b], &[])?
        }
        "Max" => cx.variadic(Op::Maximum)?,
        "Min" => cx.variadic(Op::Minimum)?,
        "Sum" => cx.variadic(Op::Add)?,
        "Mean" => {
            let s = cx.variadic(Op::Add)?;
            let n = node.present_inputs().count() as f64;
            let d = cx.dtype_of_expr(s)?;
            let k = cx.scalar(n, d);
            cx.call(Op::Divide, &[s, k], &[])?
        }
        "Equal" => cx.binary(Op::Equal)?,
        "Less" => cx.binary(Op::Less)?,
        "Greater" => cx.binary(Op::Greater)?,
        "LessOrEqual" => cx.binary(Op::LessEqual)?,
        "GreaterOrEqual" => cx.binary(Op::GreaterEqual)?,
        "Where" => {
            let c = cx.input(0)?;
            let a = cx.input(1)?;
            let b = cx.input(2)?;
            cx.call(Op::Where, &[c, a, b], &[])?
        }
        "Not" => {
            let x = cx.input(0)?;
            let f = cx.scalar(0.0, DType::BOOL);
            cx.call(Op::Equal, &[x, f], &[])?
        }
        "Relu" => cx.unary(Op::Relu)?,
        "Sigmoid" => cx.unary(Op::Sigmoid)?,
        "Tanh" => cx.unary(Op::Tanh)?,
        "Exp" => cx.unary(Op::Exp)?,
        "Log" => cx.unary(Op::Log)?,
        "Sqrt" => cx.unary(Op::Sqrt)?,
        "Erf" => cx.unary(Op::Erf)?,
        "Abs" => cx.unary(Op::Abs)?,
        "Neg" => cx.unary(Op::Negative)?,
        "Floor" => cx.unary(Op::Floor)?,
        "Ceil" => cx.unary(Op::Ceil)?,
        "Sin" => cx.unary(Op::Sin)?,
        "Cos" => cx.unary(Op::Cos)?,
        "Atan" => cx.unary(Op::Atan)?,
        "Reciprocal" => {
            let x = cx.input(0)?;
            let d = cx.dtype_of_expr(x)?;
            let one = cx.scalar(1.0, d);
            cx.call(Op::Divide, &[one, x], &[])?
        }
        "Identity" => cx.input(0)?,
        "Dropout" => {
            // From opset 12 `training_mode` is an input; dropping at random is out of scope,
            // but training with a ratio of 0 drops nothing.
            let training = match cx.const_floats(2)? {
                Some(v) => v.first().is_some_and(|&t| t != 0.0),
                None => false,
            };
            let drops = training
                && match cx.const_floats(1)? {
                    Some(v) => v.first().is_none_or(|&r| r != 0.0),
                    None => true,
                };
            if drops || attr_int(node, "is_test", 1) == 0 && opset < 7 {
                return Err(cx.unsupported("training mode (random dropping)"));
            }
            let x = cx.input(0)?;
            if node.outputs.get(1).is_some_and(|o| !o.is_empty()) {
                // In inference nothing is dropped: the mask keeps every element.
                // Boolean from opset 10; before, of the data's type.
                let shape = cx.shape(x)?;
                let dtype = if opset >= 10 {
                    "bool".to_string()
                } else {
                    cx.dtype_of_expr(x)?.to_string()
                };
                let keep = cx.call(
                    Op::Ones,
                    &[],
                    &[("shape", ints(&shape)), ("dtype", string(&dtype))],
                )?;
                cx.bind(1, keep);
            }
            x
        }
        "LeakyRelu" => {
            let x = cx.input(0)?;
            let alpha = attr_float(node, "alpha", 0.01);
            cx.call(Op::LeakyRelu, &[x], &[("alpha", float(alpha as f64))])?
        }
        "PRelu" => {
            // x if x >= 0 else slope * x, with the slope broadcast (unidirectionally).
            let x = cx.input(0)?;
            let slope = cx.input(1)?;
            let d = cx.dtype_of_expr(x)?;
            let zero = cx.scalar(0.0, d);
            let neg = cx.call(Op::Less, &[x, zero], &[])?;
            let scaled = cx.call(Op::Multiply, &[x, slope], &[])?;
            cx.call(Op::Where, &[neg, scaled, x], &[])?
        }
        "Elu" => {
            // x if x > 0 else alpha * (exp(x) - 1)
            let x = cx.input(0)?;
            let alpha = attr_float(node, "alpha", 1.0) as f64;
            elu(cx, x, alpha, 1.0)?
        }
        "Selu" => {
            let x = cx.input(0)?;
            let alpha = attr_float(node, "alpha", 1.673_263_2) as f64;
            let gamma = attr_float(node, "gamma", 1.050_701) as f64;
            elu(cx, x, alpha, gamma)?
        }
        "HardSigmoid" => {
            let x = cx.input(0)?;
            let alpha = attr_float(node, "alpha", 0.2) as f64;
            let beta = attr_float(node, "beta", 0.5) as f64;
            hard_sigmoid(cx, x, alpha, beta)?
        }
        "HardSwish" => {
            let x = cx.input(0)?;
            let h = hard_sigmoid(cx, x, 1.0 / 6.0, 0.5)?;
            cx.call(Op::Multiply, &[x, h], &[])?
        }
        "Gelu" => {
            let x = cx.input(0)?;
            gelu(cx, x, attr_str(node, "approximate", "none"))?
        }
        "Softplus" => {
            // log(exp(x) + 1)
            let x = cx.input(0)?;
            let e = cx.call(Op::Exp, &[x], &[])?;
            let e1 = cx.add_scalar(e, 1.0)?;
            cx.call(Op::Log, &[e1], &[])?
        }
        "Clip" => clip(cx, node, opset)?,
        "Cast" => {
            let x = cx.input(0)?;
            let to = attr_int(node, "to", 0) as i32;
            let Some(d) = OnnxDType::from_onnx(to) else {
                return Err(cx.unsupported(format_args!(
                    "`to` = {}",
                    crate::frontend::onnx::onnx_type_name(to)
                )));
            };
            cx.cast(x, super::dtype_of(d))?
        }
        "CastLike" => {
            let x = cx.input(0)?;
            let like = cx.input(1)?;
            let d = cx.dtype_of_expr(like)?;
            cx.cast(x, d)?
        }
        "MatMul" => matmul(cx)?,
        "Gemm" => gemm(cx, node)?,
        "Conv" => conv(cx, node)?,
        "ConvTranspose" => conv_transpose(cx, node)?,
        "MaxPool" | "AveragePool" => pool(cx, node)?,
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let x = cx.input(0)?;
            let rank = cx.ty(x)?.rank();
            let max = node.op_type == "GlobalMaxPool";
            if rank == 4 {
                let op = if max {
                    Op::GlobalMaxPool2d
                } else {
                    Op::GlobalAvgPool2d
                };
                cx.call(op, &[x], &[])?
            } else if rank >= 3 {
                let axes: Vec<i64> = (2..rank as i64).collect();
                let op = if max { Op::Max } else { Op::Mean };
                cx.call(
                    op,
                    &[x],
                    &[("axis", ints(&axes)), ("keepdims", boolean(true))],
                )?
            } else {
                return Err(cx.unsupported(format_args!("an input of rank {rank}")));
            }
        }
        "BatchNormalization" => {
            if node.outputs.iter().skip(1).any(|o| !o.is_empty())
                || attr_int(node, "training_mode", 0) != 0
            {
                return Err(cx.unsupported("training outputs"));
            }
            let args = (0..5).map(|i| cx.input(i)).collect::<R<Vec<_>>>()?;
            let eps = attr_float(node, "epsilon", 1e-5) as f64;
            let bn = cx.call(Op::BatchNorm, &args, &[("epsilon", float(eps))])?;
            cx.proj(bn, 0)?
        }
        "InstanceNormalization" => {
            let args = (0..3).map(|i| cx.input(i)).collect::<R<Vec<_>>>()?;
            let eps = attr_float(node, "epsilon", 1e-5) as f64;
            cx.call(Op::InstanceNorm, &args, &[("epsilon", float(eps))])?
        }
        "LayerNormalization" => layer_norm(cx, node)?,
        "Softmax" | "LogSoftmax" => softmax(cx, node, opset)?,
        "Flatten" => {
            let x = cx.input(0)?;
            let shape = cx.shape(x)?;
            // The axis may be the rank itself (everything in the outer extent).
            let rank = shape.len() as i64;
            let a = attr_int(node, "axis", 1);
            let a = if a < 0 { a + rank } else { a };
            if !(0..=rank).contains(&a) {
                return Err(cx.unsupported(format_args!("axis {a} for rank {rank}")));
            }
            let axis = a as usize;
            let outer: i64 = shape[..axis].iter().product();
            let inner: i64 = shape[axis..].iter().product();
            cx.reshape(x, &[outer, inner])?
        }
        "Reshape" => {
            let x = cx.input(0)?;
            let target = if opset < 5 {
                attr_ints(node, "shape").unwrap_or_default()
            } else {
                cx.const_ints(1)?
                    .ok_or_else(|| cx.error(E3016, "`Reshape` needs its shape input"))?
            };
            let shape = cx.shape(x)?;
            let allowzero = attr_int(node, "allowzero", 0) != 0;
            let out = reshape_target(cx, &shape, &target, allowzero)?;
            cx.reshape(x, &out)?
        }
        "Transpose" => {
            let x = cx.input(0)?;
            let rank = cx.ty(x)?.rank();
            let perm = match attr_ints(node, "perm") {
                Some(p) => cx.axes(&p, rank)?,
                None => (0..rank as i64).rev().collect(),
            };
            cx.call(Op::Transpose, &[x], &[("axes", ints(&perm))])?
        }
        "Squeeze" => {
            let x = cx.input(0)?;
            let shape = cx.shape(x)?;
            let axes = if opset < 13 {
                attr_ints(node, "axes")
            } else {
                cx.const_ints(1)?
            };
            let axes = match axes {
                Some(a) => cx.axes(&a, shape.len())?,
                None => (0..shape.len() as i64)
                    .filter(|&i| shape[i as usize] == 1)
                    .collect(),
            };
            let out: Vec<i64> = shape
                .iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(&(*i as i64)))
                .map(|(_, &d)| d)
                .collect();
            cx.reshape(x, &out)?
        }
        "Unsqueeze" => {
            let x = cx.input(0)?;
            let shape = cx.shape(x)?;
            let axes = if opset < 13 {
                attr_ints(node, "axes")
            } else {
                cx.const_ints(1)?
            }
            .ok_or_else(|| cx.error(E3016, "`Unsqueeze` needs axes"))?;
            let rank = shape.len() + axes.len();
            if rank > MAX_RANK {
                return Err(cx.unsupported(format_args!("a result of rank {rank}")));
            }
            let mut axes = cx.axes(&axes, rank)?;
            axes.sort_unstable();
            let mut out = Vec::with_capacity(rank);
            let mut it = shape.iter();
            for i in 0..rank as i64 {
                if axes.contains(&i) {
                    out.push(1);
                } else {
                    out.push(*it.next().unwrap_or(&1));
                }
            }
            cx.reshape(x, &out)?
        }
        "Concat" => {
            let present: Vec<usize> = (0..node.inputs.len())
                .filter(|&i| cx.has_input(i))
                .collect();
            let args = present
                .into_iter()
                .map(|i| cx.input(i))
                .collect::<R<Vec<_>>>()?;
            let rank = cx.ty(args[0])?.rank();
            let axis = cx.axis(attr_int(node, "axis", 0), rank)?;
            let t = cx.tuple(&args)?;
            cx.call(Op::Concatenate, &[t], &[("axis", int(axis as i64))])?
        }
        "Split" => return split(cx, node, opset),
        "Einsum" => einsum::convert(cx, node)?,
        "RNN" | "GRU" | "LSTM" => return recurrent::convert(cx, node),
        "Slice" => slice(cx, node, opset)?,
        "Gather" => gather(cx, node)?,
        "GatherElements" => gather_elements(cx, node)?,
        "Expand" => {
            let x = cx.input(0)?;
            let target = cx
                .const_ints(1)?
                .ok_or_else(|| cx.error(E3016, "`Expand` needs its shape input"))?;
            let shape = cx.shape(x)?;
            let out = broadcast_shapes(&shape, &target)
                .ok_or_else(|| cx.unsupported(format_args!("shape {target:?} for {shape:?}")))?;
            if out == shape {
                x
            } else {
                cx.call(Op::BroadcastTo, &[x], &[("shape", ints(&out))])?
            }
        }
        "Tile" => {
            let x = cx.input(0)?;
            let reps = cx
                .const_ints(1)?
                .ok_or_else(|| cx.error(E3016, "`Tile` needs its repeats input"))?;
            cx.call(Op::Tile, &[x], &[("reps", ints(&reps))])?
        }
        "Pad" => pad(cx, node, opset)?,
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd"
        | "ReduceSumSquare" | "ReduceL1" | "ReduceL2" | "ReduceLogSumExp" | "ReduceLogSum" => {
            reduce(cx, node, opset)?
        }
        "ArgMax" | "ArgMin" => {
            let x = cx.input(0)?;
            let rank = cx.ty(x)?.rank();
            let axis = cx.axis(attr_int(node, "axis", 0), rank)?;
            let op = if node.op_type == "ArgMax" {
                Op::Argmax
            } else {
                Op::Argmin
            };
            let r = cx.call(
                op,
                &[x],
                &[
                    ("axis", ints(&[axis as i64])),
                    ("keepdims", boolean(attr_int(node, "keepdims", 1) != 0)),
                    (
                        "select_last_index",
                        boolean(attr_int(node, "select_last_index", 0) != 0),
                    ),
                ],
            )?;
            cx.cast(r, DType::I64)?
        }
        "Resize" | "Upsample" => resize(cx, node, opset)?,
        "ConstantOfShape" => {
            let shape = cx
                .const_ints(0)?
                .ok_or_else(|| cx.error(E3016, "`ConstantOfShape` needs its shape input"))?;
            let (v, d) = match node.attr("value") {
                Some(A::Tensor(t)) => (
                    t.to_f64().first().copied().unwrap_or(0.0),
                    super::dtype_of(t.dtype),
                ),
                _ => (0.0, DType::F32),
            };
            let fill = cx.scalar(v, d);
            cx.call(
                Op::Full,
                &[fill],
                &[("shape", ints(&shape)), ("dtype", string(&d.to_string()))],
            )?
        }
        "Shape" | "Size" | "Range" => {
            return Err(cx.error(
                E3025,
                format!(
                    "`{}` could not be computed at import time: its input's shape or values \
                     are not known",
                    node.op_type
                ),
            ))
        }
        other => match written::convert(cx, node)? {
            Some(out) => out,
            None => {
                return Err(cx.error(
                    E3022,
                    format!("operator `{other}` (opset {opset}) is not supported"),
                ))
            }
        },
    };
    cx.bind(0, out);
    Ok(())
}

/// `gamma * (x if x > 0 else alpha * (exp(x) - 1))`.
fn elu(cx: &mut Cx<'_>, x: ExprId, alpha: f64, gamma: f64) -> R<ExprId> {
    let d = cx.dtype_of_expr(x)?;
    let zero = cx.scalar(0.0, d);
    let pos = cx.call(Op::Greater, &[x, zero], &[])?;
    let e = cx.call(Op::Exp, &[x], &[])?;
    let em1 = cx.add_scalar(e, -1.0)?;
    let neg = cx.scale(em1, alpha)?;
    let r = cx.call(Op::Where, &[pos, x, neg], &[])?;
    cx.scale(r, gamma)
}

/// `clip(alpha * x + beta, 0, 1)`.
fn hard_sigmoid(cx: &mut Cx<'_>, x: ExprId, alpha: f64, beta: f64) -> R<ExprId> {
    let ax = cx.scale(x, alpha)?;
    let axb = cx.add_scalar(ax, beta)?;
    cx.call(
        Op::Clip,
        &[axb],
        &[("a_min", float(0.0)), ("a_max", float(1.0))],
    )
}

/// `0.5 x (1 + erf(x / sqrt 2))`, or with `approximate = "tanh"`,
/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
fn gelu(cx: &mut Cx<'_>, x: ExprId, approximate: &str) -> R<ExprId> {
    let inner = match approximate {
        "none" => {
            let s = cx.scale(x, std::f64::consts::FRAC_1_SQRT_2)?;
            cx.call(Op::Erf, &[s], &[])?
        }
        "tanh" => {
            let x2 = cx.call(Op::Multiply, &[x, x], &[])?;
            let x3 = cx.call(Op::Multiply, &[x2, x], &[])?;
            let c = cx.scale(x3, 0.044715)?;
            let sum = cx.call(Op::Add, &[x, c], &[])?;
            let s = cx.scale(sum, (2.0 / std::f64::consts::PI).sqrt())?;
            cx.call(Op::Tanh, &[s], &[])?
        }
        other => return Err(cx.unsupported(format_args!("approximate = \"{other}\""))),
    };
    let one_plus = cx.add_scalar(inner, 1.0)?;
    let half_x = cx.scale(x, 0.5)?;
    cx.call(Op::Multiply, &[half_x, one_plus], &[])
}

fn clip(cx: &mut Cx<'_>, node: &Node, opset: i64) -> R<ExprId> {
    let x = cx.input(0)?;
    let d = cx.dtype_of_expr(x)?;
    let (lo, hi) = if opset < 11 {
        (
            Some(attr_float(node, "min", f32::MIN) as f64),
            Some(attr_float(node, "max", f32::MAX) as f64),
        )
    } else {
        let get = |cx: &Cx<'_>, i: usize| -> R<Option<Option<f64>>> {
            if !cx.has_input(i) {
                return Ok(Some(None));
            }
            match cx.const_floats(i) {
                Ok(v) => Ok(Some(v.and_then(|v| v.first().copied()))),
                Err(_) => Ok(None),
            }
        };
        match (get(cx, 1)?, get(cx, 2)?) {
            (Some(lo), Some(hi)) => (lo, hi),
            _ => {
                // Bounds computed at run time: maximum and minimum.
                let mut r = x;
                if let Some(lo) = cx.opt_input(1)? {
                    r = cx.call(Op::Maximum, &[r, lo], &[])?;
                }
                if let Some(hi) = cx.opt_input(2)? {
                    r = cx.call(Op::Minimum, &[r, hi], &[])?;
                }
                return Ok(r);
            }
        }
    };
    if d.is_float() {
        let lo = lo.unwrap_or(f64::NEG_INFINITY).max(f32::MIN as f64);
        let hi = hi.unwrap_or(f64::INFINITY).min(f32::MAX as f64);
        cx.call(
            Op::Clip,
            &[x],
            &[("a_min", float(lo)), ("a_max", float(hi))],
        )
    } else {
        let mut r = x;
        if let Some(lo) = lo {
            let s = cx.scalar(lo, d);
            r = cx.call(Op::Maximum, &[r, s], &[])?;
        }
        if let Some(hi) = hi {
            let s = cx.scalar(hi, d);
            r = cx.call(Op::Minimum, &[r, s], &[])?;
        }
        Ok(r)
    }
}

/// numpy's broadcast of two static shapes ([`rel::broadcast_shapes`] on fixed extents), or
/// `None` when they do not broadcast.
fn broadcast_shapes(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let dims = |v: &[i64]| v.iter().map(|&d| Dim::Fixed(d)).collect::<Vec<_>>();
    rel::broadcast_shapes(&dims(a), &dims(b))?
        .iter()
        .map(Dim::fixed)
        .collect()
}

/// The concrete shape of a `Reshape`: `0` copies the input's extent (unless `allowzero`), and
/// one `-1` takes what is left.
fn reshape_target(cx: &Cx<'_>, shape: &[i64], target: &[i64], allowzero: bool) -> R<Vec<i64>> {
    if target.len() > MAX_RANK {
        return Err(cx.unsupported(format_args!("a shape of rank {}", target.len())));
    }
    cx.within("an extent", target, -1, 1 << 40)?;
    let total: i64 = shape.iter().product();
    let mut out = Vec::with_capacity(target.len());
    let mut infer = None;
    for (i, &t) in target.iter().enumerate() {
        match t {
            0 if !allowzero => out.push(*shape.get(i).ok_or_else(|| {
                cx.unsupported(format_args!("a 0 at axis {i} beyond the input's rank"))
            })?),
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(1);
            }
            t if t >= 0 => out.push(t),
            _ => return Err(cx.unsupported(format_args!("shape {target:?}"))),
        }
    }
    let known = out
        .iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| cx.unsupported(format_args!("shape {target:?}")))?;
    if let Some(i) = infer {
        if known == 0 || total % known != 0 {
            return Err(cx.unsupported(format_args!("shape {target:?} for input {shape:?}")));
        }
        out[i] = total / known;
    } else if known != total {
        return Err(cx.unsupported(format_args!("shape {target:?} for input {shape:?}")));
    }
    Ok(out)
}

fn matmul(cx: &mut Cx<'_>) -> R<ExprId> {
    let a = cx.input(0)?;
    let b = cx.input(1)?;
    let sa = cx.shape(a)?;
    let sb = cx.shape(b)?;
    if sa.is_empty() || sb.is_empty() {
        return Err(cx.unsupported("a scalar operand"));
    }
    // Vectors become matrices, and the added axis goes again at the end.
    let (a2, sa2) = if sa.len() == 1 {
        (cx.reshape(a, &[1, sa[0]])?, vec![1, sa[0]])
    } else {
        (a, sa.clone())
    };
    let (b2, sb2) = if sb.len() == 1 {
        (cx.reshape(b, &[sb[0], 1])?, vec![sb[0], 1])
    } else {
        (b, sb.clone())
    };
    let m = sa2[sa2.len() - 2];
    let k = sa2[sa2.len() - 1];
    let n = sb2[sb2.len() - 1];
    let out = if sb2.len() == 2 {
        // [.., M, K] x [K, N]: a dense layer over the transposed right operand.
        let bt = cx.call(Op::Transpose, &[b2], &[("axes", ints(&[1, 0]))])?;
        cx.call(Op::Dense, &[a2, bt], &[("units", int(n))])?
    } else {
        let ba = &sa2[..sa2.len() - 2];
        let bb = &sb2[..sb2.len() - 2];
        let batch = broadcast_shapes(ba, bb)
            .ok_or_else(|| cx.unsupported(format_args!("shapes {sa:?} and {sb:?}")))?;
        let count: i64 = batch.iter().product();
        let expand = |cx: &mut Cx<'_>, x: ExprId, s: &[i64], rows: i64, cols: i64| -> R<ExprId> {
            let mut full = batch.clone();
            full.extend([rows, cols]);
            let x = if s != full.as_slice() {
                cx.call(Op::BroadcastTo, &[x], &[("shape", ints(&full))])?
            } else {
                x
            };
            cx.reshape(x, &[count, rows, cols])
        };
        let a3 = expand(cx, a2, &sa2, m, k)?;
        let b3 = expand(cx, b2, &sb2, k, n)?;
        let r = cx.call(
            Op::BatchMatmul,
            &[a3, b3],
            &[("transpose_b", boolean(false))],
        )?;
        let mut full = batch.clone();
        full.extend([m, n]);
        cx.reshape(r, &full)?
    };
    // The shape numpy's matmul gives.
    let mut want: Vec<i64> = cx.shape(out)?;
    if sb.len() == 1 {
        want.pop();
    }
    if sa.len() == 1 {
        let l = want.len();
        want.remove(l - if sb.len() == 1 { 1 } else { 2 });
    }
    cx.reshape(out, &want)
}

fn gemm(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let mut a = cx.input(0)?;
    let b = cx.input(1)?;
    let alpha = attr_float(node, "alpha", 1.0) as f64;
    let beta = attr_float(node, "beta", 1.0) as f64;
    if attr_int(node, "transA", 0) != 0 {
        a = cx.call(Op::Transpose, &[a], &[("axes", ints(&[1, 0]))])?;
    }
    let w = if attr_int(node, "transB", 0) != 0 {
        b
    } else {
        cx.call(Op::Transpose, &[b], &[("axes", ints(&[1, 0]))])?
    };
    let n = cx.shape(w)?[0];
    let mut y = cx.call(Op::Dense, &[a, w], &[("units", int(n))])?;
    y = cx.scale(y, alpha)?;
    if let Some(c) = cx.opt_input(2)? {
        let c = cx.scale(c, beta)?;
        y = cx.call(Op::Add, &[y, c], &[])?;
    }
    Ok(y)
}

/// The `strides` and `dilations` of a node over `n` spatial axes (default 1 each), checked
/// against `n` and against the input's rank `n + 2`.
fn spatial(cx: &Cx<'_>, node: &Node, n: usize, input: &[i64]) -> R<(Vec<i64>, Vec<i64>)> {
    let strides = attr_ints(node, "strides").unwrap_or_else(|| vec![1; n]);
    let dilations = attr_ints(node, "dilations").unwrap_or_else(|| vec![1; n]);
    if strides.len() != n || dilations.len() != n || input.len() != n + 2 {
        return Err(cx.unsupported("strides, dilations or input of another rank"));
    }
    Ok((strides, dilations))
}

/// `total` padding split between the beginning and the end of an axis as `auto_pad` says: the
/// odd one at the end (`SAME_UPPER`) or at the beginning (`SAME_LOWER`).
fn split_pad(total: i64, lower: bool) -> (i64, i64) {
    let small = total / 2;
    if lower {
        (total - small, small)
    } else {
        (small, total - small)
    }
}

/// Explicit padding per spatial axis, `[begin..., end...]`, from `pads` or `auto_pad`.
fn conv_pads(
    cx: &Cx<'_>,
    node: &Node,
    input: &[i64],
    kernel: &[i64],
    strides: &[i64],
    dilations: &[i64],
) -> R<Vec<i64>> {
    let n = kernel.len();
    cx.within("a stride", strides, 1, MAX_STRIDE)?;
    cx.within("a dilation", dilations, 1, MAX_STRIDE)?;
    cx.within("a kernel extent", kernel, 1, 1 << 40)?;
    match attr_str(node, "auto_pad", "NOTSET") {
        "NOTSET" => {
            let pads = attr_ints(node, "pads").unwrap_or_else(|| vec![0; 2 * n]);
            if pads.len() != 2 * n {
                return Err(cx.unsupported(format_args!("{} pads for {n} axes", pads.len())));
            }
            cx.within("a pad", &pads, 0, MAX_PAD)?;
            Ok(pads)
        }
        "VALID" => Ok(vec![0; 2 * n]),
        mode @ ("SAME_UPPER" | "SAME_LOWER") => {
            let mut begin = Vec::with_capacity(n);
            let mut end = Vec::with_capacity(n);
            for i in 0..n {
                let out = (input[i] + strides[i] - 1) / strides[i];
                let eff = (kernel[i] - 1) * dilations[i] + 1;
                let total = ((out - 1) * strides[i] + eff - input[i]).max(0);
                let (b, e) = split_pad(total, mode == "SAME_LOWER");
                begin.push(b);
                end.push(e);
            }
            begin.extend(end);
            Ok(begin)
        }
        other => Err(cx.unsupported(format_args!("auto_pad = \"{other}\""))),
    }
}

fn conv(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let x = cx.input(0)?;
    let w = cx.input(1)?;
    let sx = cx.shape(x)?;
    let sw = cx.shape(w)?;
    let n = sw.len().saturating_sub(2);
    let op = match n {
        1 => Op::Conv1d,
        2 => Op::Conv2d,
        3 => Op::Conv3d,
        _ => return Err(cx.unsupported(format_args!("a weight of rank {}", sw.len()))),
    };
    let kernel = sw[2..].to_vec();
    let (strides, dilations) = spatial(cx, node, n, &sx)?;
    let pads = conv_pads(cx, node, &sx[2..], &kernel, &strides, &dilations)?;
    let groups = attr_int(node, "group", 1);
    let mut y = cx.call(
        op,
        &[x, w],
        &[
            ("strides", ints(&strides)),
            ("padding", ints(&pads)),
            ("dilation", ints(&dilations)),
            ("groups", int(groups)),
            ("channels", int(sw[0])),
            ("kernel_size", ints(&kernel)),
        ],
    )?;
    if let Some(b) = cx.opt_input(2)? {
        y = cx.call(Op::BiasAdd, &[y, b], &[("axis", int(1))])?;
    }
    Ok(y)
}

fn conv_transpose(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let x = cx.input(0)?;
    let w = cx.input(1)?;
    let sx = cx.shape(x)?;
    let sw = cx.shape(w)?;
    let n = sw.len().saturating_sub(2);
    let op = match n {
        2 => Op::Conv2dTranspose,
        3 => Op::Conv3dTranspose,
        _ => return Err(cx.unsupported(format_args!("a weight of rank {}", sw.len()))),
    };
    let kernel = sw[2..].to_vec();
    let (strides, dilations) = spatial(cx, node, n, &sx)?;
    let mut out_pad = attr_ints(node, "output_padding").unwrap_or_else(|| vec![0; n]);
    if out_pad.len() != n {
        return Err(cx.unsupported("strides, dilations or input of another rank"));
    }
    cx.within("a stride", &strides, 1, MAX_STRIDE)?;
    cx.within("a dilation", &dilations, 1, MAX_STRIDE)?;
    cx.within("an output padding", &out_pad, 0, MAX_PAD)?;
    cx.within("a kernel extent", &kernel, 1, 1 << 40)?;
    let groups = attr_int(node, "group", 1);
    let full = |i: usize| (sx[i + 2] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1;
    let pads = if let Some(shape) = attr_ints(node, "output_shape") {
        let shape = &shape[shape.len().saturating_sub(n)..];
        if shape.len() != n {
            return Err(cx.unsupported(format_args!("output_shape {shape:?}")));
        }
        cx.within("an output extent", shape, 1, 1 << 40)?;
        let mut begin = Vec::new();
        let mut end = Vec::new();
        for i in 0..n {
            let total = full(i) + out_pad[i] - shape[i];
            if total < 0 {
                // Larger outputs than the kernel covers: the rest is output padding.
                out_pad[i] -= total;
                begin.push(0);
                end.push(0);
                continue;
            }
            let (b, e) = split_pad(total, attr_str(node, "auto_pad", "NOTSET") == "SAME_LOWER");
            begin.push(b);
            end.push(e);
        }
        begin.extend(end);
        begin
    } else {
        match attr_str(node, "auto_pad", "NOTSET") {
            "NOTSET" | "VALID" => {
                let pads = attr_ints(node, "pads").unwrap_or_else(|| vec![0; 2 * n]);
                if pads.len() != 2 * n {
                    return Err(cx.unsupported(format_args!("{} pads for {n} axes", pads.len())));
                }
                cx.within("a pad", &pads, 0, MAX_PAD)?;
                pads
            }
            mode => {
                let mut begin = Vec::new();
                let mut end = Vec::new();
                for i in 0..n {
                    let total = (full(i) + out_pad[i] - sx[i + 2] * strides[i]).max(0);
                    let (b, e) = split_pad(total, mode == "SAME_LOWER");
                    begin.push(b);
                    end.push(e);
                }
                begin.extend(end);
                begin
            }
        }
    };
    let mut y = cx.call(
        op,
        &[x, w],
        &[
            ("strides", ints(&strides)),
            ("padding", ints(&pads)),
            ("dilation", ints(&dilations)),
            ("output_padding", ints(&out_pad)),
            ("groups", int(groups)),
            ("channels", int(sw[1] * groups)),
            ("kernel_size", ints(&kernel)),
        ],
    )?;
    if let Some(b) = cx.opt_input(2)? {
        y = cx.call(Op::BiasAdd, &[y, b], &[("axis", int(1))])?;
    }
    Ok(y)
}

fn pool(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    if node.outputs.get(1).is_some_and(|o| !o.is_empty()) {
        return Err(cx.unsupported("its indices output"));
    }
    let x = cx.input(0)?;
    let sx = cx.shape(x)?;
    let kernel = attr_ints(node, "kernel_shape")
        .ok_or_else(|| cx.error(E3016, "a pooling node needs `kernel_shape`"))?;
    let n = kernel.len();
    let max = node.op_type == "MaxPool";
    let op = match (n, max) {
        (2, true) => Op::MaxPool2d,
        (2, false) => Op::AvgPool2d,
        (3, true) => Op::MaxPool3d,
        (3, false) => Op::AvgPool3d,
        _ => return Err(cx.unsupported(format_args!("{n} spatial axes"))),
    };
    let (strides, dilations) = spatial(cx, node, n, &sx)?;
    let pads = conv_pads(cx, node, &sx[2..], &kernel, &strides, &dilations)?;
    // With `ceil_mode`, ONNX (like PyTorch) drops a last window that would start in the end
    // padding; where every axis's would, the floor rule gives the same windows.
    let mut ceil = attr_int(node, "ceil_mode", 0) != 0;
    if ceil {
        // Per axis: whether ceil_mode adds a window, and whether that window starts in the
        // end padding (and so is dropped).
        let axes: Vec<(bool, bool)> = (0..n)
            .map(|i| {
                let eff = (kernel[i] - 1) * dilations[i] + 1;
                let span = sx[i + 2] + pads[i] + pads[i + n] - eff;
                let out = (span + strides[i] - 1) / strides[i] + 1;
                let partial = out != span / strides[i] + 1;
                (
                    partial,
                    partial && (out - 1) * strides[i] >= sx[i + 2] + pads[i],
                )
            })
            .collect();
        let drops = axes.iter().all(|&(partial, dropped)| !partial || dropped);
        let any_drop = axes.iter().any(|&(_, dropped)| dropped);
        if any_drop {
            if !drops {
                return Err(cx.unsupported(
                    "ceil_mode where one axis keeps its last partial window and another drops it",
                ));
            }
            ceil = false;
        }
    }
    let mut attrs = vec![
        ("pool_size", ints(&kernel)),
        ("strides", ints(&strides)),
        ("dilation", ints(&dilations)),
        ("padding", ints(&pads)),
        ("ceil_mode", boolean(ceil)),
    ];
    if !max {
        attrs.push((
            "count_include_pad",
            boolean(attr_int(node, "count_include_pad", 0) != 0),
        ));
    }
    cx.call(op, &[x], &attrs)
}

fn layer_norm(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let stats = node.outputs.iter().skip(1).any(|o| !o.is_empty());
    let x = cx.input(0)?;
    let gamma = cx.input(1)?;
    let shape = cx.shape(x)?;
    let d = cx.dtype_of_expr(x)?;
    if stats {
        // The mean and inverse deviation outputs have the stash type (float32 unless set),
        // and are computed in it: taken when that is the input's own type.
        let stash = match attr_int(node, "stash_type", 1) {
            1 => Some(DType::F32),
            11 => Some(DType::F64),
            10 => Some(DType::F16),
            _ => None,
        };
        if stash != Some(d) {
            return Err(cx.unsupported(format_args!(
                "mean and inverse deviation outputs of a stash type other than its input's \
                 ({d})"
            )));
        }
    }
    let axis = cx.axis(attr_int(node, "axis", -1), shape.len())?;
    let eps = attr_float(node, "epsilon", 1e-5) as f64;
    let sg = cx.shape(gamma)?;
    if axis + 1 == shape.len() && sg.len() == 1 && !stats {
        let beta = match cx.opt_input(2)? {
            Some(b) => b,
            None => cx.call(
                Op::Zeros,
                &[],
                &[("shape", ints(&sg)), ("dtype", string(&d.to_string()))],
            )?,
        };
        return cx.call(
            Op::LayerNorm,
            &[x, gamma, beta],
            &[("axis", int(-1)), ("epsilon", float(eps))],
        );
    }
    // Several normalised axes, or the statistics wanted: mean and variance written out.
    let axes: Vec<i64> = (axis as i64..shape.len() as i64).collect();
    let reduce = [("axis", ints(&axes)), ("keepdims", boolean(true))];
    let mean = cx.call(Op::Mean, &[x], &reduce)?;
    let centred = cx.call(Op::Subtract, &[x, mean], &[])?;
    let sq = cx.call(Op::Multiply, &[centred, centred], &[])?;
    let var = cx.call(Op::Mean, &[sq], &reduce)?;
    let ve = cx.add_scalar(var, eps)?;
    let sd = cx.call(Op::Sqrt, &[ve], &[])?;
    let normed = cx.call(Op::Divide, &[centred, sd], &[])?;
    if stats {
        cx.bind(1, mean);
        let one = cx.scalar(1.0, d);
        let inv = cx.call(Op::Divide, &[one, sd], &[])?;
        cx.bind(2, inv);
    }
    let mut y = cx.call(Op::Multiply, &[normed, gamma], &[])?;
    if let Some(b) = cx.opt_input(2)? {
        y = cx.call(Op::Add, &[y, b], &[])?;
    }
    Ok(y)
}

fn softmax(cx: &mut Cx<'_>, node: &Node, opset: i64) -> R<ExprId> {
    let x = cx.input(0)?;
    let shape = cx.shape(x)?;
    let op = if node.op_type == "Softmax" {
        Op::Softmax
    } else {
        Op::LogSoftmax
    };
    let rank = shape.len();
    if opset >= 13 {
        let axis = cx.axis(attr_int(node, "axis", -1), rank)?;
        return cx.call(op, &[x], &[("axis", int(axis as i64))]);
    }
    // Before opset 13 the input is seen as a matrix [outer, inner] split at `axis` (default 1),
    // normalised along its second axis.
    let axis = cx.axis(attr_int(node, "axis", 1), rank)?;
    if axis + 1 == rank {
        return cx.call(op, &[x], &[("axis", int(axis as i64))]);
    }
    let outer: i64 = shape[..axis].iter().product();
    let inner: i64 = shape[axis..].iter().product();
    let flat = cx.reshape(x, &[outer, inner])?;
    let y = cx.call(op, &[flat], &[("axis", int(1))])?;
    cx.reshape(y, &shape)
}

fn split(cx: &mut Cx<'_>, node: &Node, opset: i64) -> R<()> {
    let x = cx.input(0)?;
    let shape = cx.shape(x)?;
    let axis = cx.axis(attr_int(node, "axis", 0), shape.len())?;
    let n = node.outputs.len() as i64;
    let extent = shape[axis];
    let sizes = if opset < 13 {
        attr_ints(node, "split")
    } else {
        cx.const_ints(1)?
    };
    let sizes = match sizes {
        Some(s) => s,
        None => {
            let parts = if opset >= 18 {
                attr_int(node, "num_outputs", n)
            } else {
                n
            };
            if parts <= 0 || parts != n {
                return Err(cx.unsupported(format_args!("{parts} parts for {n} outputs")));
            }
            let chunk = (extent + parts - 1) / parts;
            (0..parts)
                .map(|i| (extent - i * chunk).clamp(0, chunk))
                .collect()
        }
    };
    if sizes.len() != node.outputs.len()
        || sizes.iter().any(|&s| !(0..=extent).contains(&s))
        || sizes.iter().sum::<i64>() != extent
    {
        return Err(cx.unsupported(format_args!("sizes {sizes:?} for extent {extent}")));
    }
    if sizes.contains(&0) {
        // Empty parts: collage's split takes strictly ascending inner indices, so each part
        // is a slice (an empty one a constant).
        let d = cx.dtype_of_expr(x)?;
        let mut at = 0;
        for (i, &n) in sizes.iter().enumerate() {
            let mut part = shape.clone();
            part[axis] = n;
            let e = if n == 0 {
                zeros(cx, &part, d)?
            } else {
                slice_axis(cx, x, axis, at, at + n)?
            };
            cx.bind(i, e);
            at += n;
        }
        return Ok(());
    }
    let mut indices = Vec::new();
    let mut at = 0;
    for s in &sizes[..sizes.len().saturating_sub(1)] {
        at += s;
        indices.push(at);
    }
    let t = cx.call(
        Op::Split,
        &[x],
        &[
            ("indices_or_sections", ints(&indices)),
            ("axis", int(axis as i64)),
        ],
    )?;
    for i in 0..sizes.len() {
        let p = cx.proj(t, i as u32)?;
        cx.bind(i, p);
    }
    Ok(())
}

/// `e[lo..hi]` along `axis`, the other axes whole.
fn slice_axis(cx: &mut Cx<'_>, e: ExprId, axis: usize, lo: i64, hi: i64) -> R<ExprId> {
    let s = cx.shape(e)?;
    let mut begin = vec![0; s.len()];
    let mut end = s.clone();
    begin[axis] = lo;
    end[axis] = hi;
    cx.call(
        Op::StridedSlice,
        &[e],
        &[
            ("begin", ints(&begin)),
            ("end", ints(&end)),
            ("strides", ints(&vec![1; s.len()])),
            ("axes", AttrValue::None),
        ],
    )
}

/// A constant of zeros.
fn zeros(cx: &mut Cx<'_>, shape: &[i64], d: DType) -> R<ExprId> {
    cx.call(
        Op::Zeros,
        &[],
        &[("shape", ints(shape)), ("dtype", string(&d.to_string()))],
    )
}

fn slice(cx: &mut Cx<'_>, node: &Node, opset: i64) -> R<ExprId> {
    let x = cx.input(0)?;
    let shape = cx.shape(x)?;
    let (starts, ends, axes, steps) = if opset < 10 {
        (
            attr_ints(node, "starts").unwrap_or_default(),
            attr_ints(node, "ends").unwrap_or_default(),
            attr_ints(node, "axes"),
            None,
        )
    } else {
        (
            cx.const_ints(1)?.unwrap_or_default(),
            cx.const_ints(2)?.unwrap_or_default(),
            cx.const_ints(3)?,
            cx.const_ints(4)?,
        )
    };
    let rank = shape.len();
    let axes = match axes {
        Some(a) => cx.axes(&a, rank)?,
        None => (0..starts.len() as i64).collect(),
    };
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(cx.error(
            E3016,
            "`Slice`'s starts, ends, axes and steps differ in length",
        ));
    }
    let mut begin: Vec<i64> = vec![0; rank];
    let mut end: Vec<i64> = shape.clone();
    let mut stride: Vec<i64> = vec![1; rank];
    let mut out_shape = shape.clone();
    let mut empty = shape.contains(&0);
    for i in 0..starts.len() {
        let a = axes[i] as usize;
        let dim = shape[a];
        let step = steps[i];
        if step == 0 {
            return Err(cx.unsupported("a step of 0"));
        }
        let clampi = |v: i64, lo: i64, hi: i64| v.clamp(lo, hi);
        let norm = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
        let (s, e) = if step > 0 {
            (
                clampi(norm(starts[i]), 0, dim),
                clampi(norm(ends[i]), 0, dim),
            )
        } else {
            (
                clampi(norm(starts[i]), 0, dim - 1),
                clampi(norm(ends[i]), -1, dim - 1),
            )
        };
        // A negative step running down past the first element ends "before the start":
        // collage's slice reads an end of -(dim + 1) so (it counts from the end, then clamps).
        let e = if step < 0 && e < 0 { -(dim + 1) } else { e };
        let count = if step > 0 {
            (e - s + step - 1).max(0) / step
        } else {
            (s - e.max(-1) + (-step) - 1).max(0) / (-step)
        };
        if count == 0 {
            empty = true;
        }
        out_shape[a] = count;
        begin[a] = s;
        end[a] = e;
        stride[a] = step;
    }
    if empty {
        // ONNX slices whose bounds cross are empty; collage's slice refuses crossed bounds,
        // so the (empty) result is a constant.
        let d = cx.dtype_of_expr(x)?;
        return cx.call(
            Op::Zeros,
            &[],
            &[
                ("shape", ints(&out_shape)),
                ("dtype", string(&d.to_string())),
            ],
        );
    }
    if begin.iter().all(|&b| b == 0) && end == shape && stride.iter().all(|&s| s == 1) {
        return Ok(x);
    }
    cx.call(
        Op::StridedSlice,
        &[x],
        &[
            ("begin", ints(&begin)),
            ("end", ints(&end)),
            ("strides", ints(&stride)),
            ("axes", AttrValue::None),
        ],
    )
}

fn gather(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let data = cx.input(0)?;
    let shape = cx.shape(data)?;
    let axis = cx.axis(attr_int(node, "axis", 0), shape.len())?;
    let dim = shape[axis];
    let name = node.inputs.get(1).cloned().unwrap_or_default();
    let indices = match cx
        .known(&name)
        .and_then(|t| t.to_i64().map(|v| (t.shape.clone(), v)))
    {
        Some((ishape, values)) if !cx.env.contains_key(&name) => {
            // Known indices: negative ones counted from the end, at import time.
            let fixed: Vec<i64> = values
                .iter()
                .map(|&v| if v < 0 { v + dim } else { v })
                .collect();
            if let Some(bad) = fixed.iter().find(|&&v| v < 0 || v >= dim) {
                return Err(
                    cx.unsupported(format_args!("index {bad} out of range for extent {dim}"))
                );
            }
            if ishape.is_empty() {
                cx.scalar(fixed[0] as f64, DType::I64)
            } else {
                let e = cx.i64s(&fixed);
                let s: Vec<i64> = ishape.iter().map(|&d| d as i64).collect();
                cx.reshape(e, &s)?
            }
        }
        _ => {
            // Indices known only at run time: `where(i < 0, i + dim, i)`.
            let i = cx.input(1)?;
            let d = cx.dtype_of_expr(i)?;
            let zero = cx.scalar(0.0, d);
            let neg = cx.call(Op::Less, &[i, zero], &[])?;
            let shifted = cx.add_scalar(i, dim as f64)?;
            cx.call(Op::Where, &[neg, shifted, i], &[])?
        }
    };
    cx.call(
        Op::Take,
        &[data, indices],
        &[("axis", int(axis as i64)), ("mode", string("clip"))],
    )
}

/// `GatherElements` written with `take` on the flattened data: the index of element `p` of the
/// result in the flattened data is `indices[p] * stride(axis)` plus the offset of `p`'s other
/// coordinates, a constant computed here from the static shapes.
fn gather_elements(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let data = cx.input(0)?;
    let indices = cx.input(1)?;
    let sd = cx.shape(data)?;
    let si = cx.shape(indices)?;
    if sd.len() != si.len() || sd.is_empty() {
        return Err(cx.unsupported(format_args!("data {sd:?} and indices {si:?}")));
    }
    let axis = cx.axis(attr_int(node, "axis", 0), sd.len())?;
    if si
        .iter()
        .zip(&sd)
        .enumerate()
        .any(|(i, (a, b))| i != axis && a > b)
    {
        return Err(cx.unsupported(format_args!("indices {si:?} larger than data {sd:?}")));
    }
    let count: i64 = si.iter().product();
    if count > 1 << 24 {
        return Err(cx.unsupported(format_args!("{count} indices")));
    }
    let mut strides = vec![1i64; sd.len()];
    for i in (0..sd.len() - 1).rev() {
        strides[i] = strides[i + 1] * sd[i + 1];
    }
    // The offset of every position of the result, its `axis` coordinate left out.
    let mut base = Vec::with_capacity(count as usize);
    let mut coord = vec![0i64; si.len()];
    for _ in 0..count {
        base.push(
            coord
                .iter()
                .zip(&strides)
                .enumerate()
                .filter(|(i, _)| *i != axis)
                .map(|(_, (c, s))| c * s)
                .sum::<i64>(),
        );
        for i in (0..si.len()).rev() {
            coord[i] += 1;
            if coord[i] < si[i] {
                break;
            }
            coord[i] = 0;
        }
    }
    let idx = cx.cast(indices, DType::I64)?;
    let zero = cx.scalar(0.0, DType::I64);
    let neg = cx.call(Op::Less, &[idx, zero], &[])?;
    let shifted = cx.add_scalar(idx, sd[axis] as f64)?;
    let idx = cx.call(Op::Where, &[neg, shifted, idx], &[])?;
    let scaled = cx.scale(idx, strides[axis] as f64)?;
    let base = cx.i64s(&base);
    let base = cx.reshape(base, &si)?;
    let flat_index = cx.call(Op::Add, &[scaled, base], &[])?;
    let total: i64 = sd.iter().product();
    let flat = cx.reshape(data, &[total])?;
    cx.call(
        Op::Take,
        &[flat, flat_index],
        &[("axis", int(0)), ("mode", string("clip"))],
    )
}

fn pad(cx: &mut Cx<'_>, node: &Node, opset: i64) -> R<ExprId> {
    let x = cx.input(0)?;
    let shape = cx.shape(x)?;
    let rank = shape.len();
    let d = cx.dtype_of_expr(x)?;
    let (pads, value) = if opset < 11 {
        (
            attr_ints(node, "pads").unwrap_or_default(),
            attr_float(node, "value", 0.0) as f64,
        )
    } else {
        let pads = cx.const_ints(1)?.unwrap_or_default();
        let value = cx
            .const_floats(2)?
            .and_then(|v| v.first().copied())
            .unwrap_or(0.0);
        (pads, value)
    };
    let axes = if opset >= 18 { cx.const_ints(3)? } else { None };
    let axes = match axes {
        Some(a) => cx.axes(&a, rank)?,
        None => (0..rank as i64).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(cx.error(
            E3016,
            format!("`Pad` has {} pads for {} axes", pads.len(), axes.len()),
        ));
    }
    let mut width = vec![vec![0i64, 0]; rank];
    for (i, &a) in axes.iter().enumerate() {
        width[a as usize] = vec![pads[i], pads[i + axes.len()]];
    }
    cx.within("a pad", &pads, 0, MAX_PAD)?;
    let mode = match attr_str(node, "mode", "constant") {
        "constant" => "constant",
        "reflect" => "reflect",
        "edge" => "edge",
        other => return Err(cx.unsupported(format_args!("mode \"{other}\""))),
    };
    let v = cx.scalar(value, d);
    let nested = AttrValue::Array(width.iter().map(|w| ints(w)).collect());
    cx.call(
        Op::Pad,
        &[x, v],
        &[("pad_width", nested), ("pad_mode", string(mode))],
    )
}

fn reduce(cx: &mut Cx<'_>, node: &Node, opset: i64) -> R<ExprId> {
    let x = cx.input(0)?;
    let rank = cx.ty(x)?.rank();
    // Axes are an input from opset 13 for ReduceSum and from 18 for the others.
    let axes_input = if node.op_type == "ReduceSum" {
        opset >= 13
    } else {
        opset >= 18
    };
    let axes = if axes_input {
        cx.const_ints(1)?
    } else {
        attr_ints(node, "axes")
    };
    let keepdims = attr_int(node, "keepdims", 1) != 0;
    let axes = match axes {
        Some(a) if !a.is_empty() => cx.axes(&a, rank)?,
        _ if axes_input && attr_int(node, "noop_with_empty_axes", 0) != 0 => return Ok(x),
        _ => (0..rank as i64).collect(),
    };
    let attrs = [("axis", ints(&axes)), ("keepdims", boolean(keepdims))];
    let shape = cx.shape(x)?;
    if axes.iter().any(|&a| shape[a as usize] == 0) {
        // A reduction over nothing is the operation's identity (ONNX: -inf for a maximum, inf
        // for a minimum, 0 for sums, 1 for a product; a log of 0 is -inf).
        let d = cx.dtype_of_expr(x)?;
        let value = match node.op_type.as_str() {
            "ReduceMax" if d.is_float() => f64::NEG_INFINITY,
            "ReduceMin" if d.is_float() => f64::INFINITY,
            "ReduceMax" | "ReduceMin" => {
                return Err(cx.unsupported("an integer maximum or minimum over nothing"))
            }
            "ReduceProd" => 1.0,
            "ReduceLogSum" | "ReduceLogSumExp" => f64::NEG_INFINITY,
            "ReduceMean" => f64::NAN,
            _ => 0.0,
        };
        let out: Vec<i64> = shape
            .iter()
            .enumerate()
            .filter_map(|(i, &e)| match (axes.contains(&(i as i64)), keepdims) {
                (false, _) => Some(e),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect();
        let fill = cx.scalar(value, d);
        return cx.call(
            Op::Full,
            &[fill],
            &[("shape", ints(&out)), ("dtype", string(&d.to_string()))],
        );
    }
    match node.op_type.as_str() {
        "ReduceMean" => cx.call(Op::Mean, &[x], &attrs),
        "ReduceSum" => cx.call(Op::Sum, &[x], &attrs),
        "ReduceMax" => cx.call(Op::Max, &[x], &attrs),
        "ReduceMin" => cx.call(Op::Min, &[x], &attrs),
        "ReduceProd" => cx.call(Op::Prod, &[x], &attrs),
        "ReduceSumSquare" => {
            let sq = cx.call(Op::Multiply, &[x, x], &[])?;
            cx.call(Op::Sum, &[sq], &attrs)
        }
        "ReduceL1" => {
            let a = cx.call(Op::Abs, &[x], &[])?;
            cx.call(Op::Sum, &[a], &attrs)
        }
        "ReduceL2" => {
            let sq = cx.call(Op::Multiply, &[x, x], &[])?;
            let s = cx.call(Op::Sum, &[sq], &attrs)?;
            cx.call(Op::Sqrt, &[s], &[])
        }
        "ReduceLogSum" => {
            let s = cx.call(Op::Sum, &[x], &attrs)?;
            cx.call(Op::Log, &[s], &[])
        }
        _ => {
            // ReduceLogSumExp: log(sum(exp(x - max))) + max, stable.
            let m = cx.call(
                Op::Max,
                &[x],
                &[("axis", ints(&axes)), ("keepdims", boolean(true))],
            )?;
            let c = cx.call(Op::Subtract, &[x, m], &[])?;
            let e = cx.call(Op::Exp, &[c], &[])?;
            let s = cx.call(Op::Sum, &[e], &attrs)?;
            let l = cx.call(Op::Log, &[s], &[])?;
            let m = if keepdims {
                m
            } else {
                cx.call(Op::Squeeze, &[m], &[("axis", ints(&axes))])?
            };
            cx.call(Op::Add, &[l, m], &[])
        }
    }
}

fn resize(cx: &mut Cx<'_>, node: &Node, opset: i64) -> R<ExprId> {
    let x = cx.input(0)?;
    let shape = cx.shape(x)?;
    if shape.len() != 4 {
        return Err(cx.unsupported(format_args!("an input of rank {}", shape.len())));
    }
    // Output size from `sizes`, or from `scales` (an attribute of Upsample before opset 9,
    // an input from then on; Resize's scales are input 2 from opset 11, input 1 before).
    let (scales, sizes) = if node.op_type == "Upsample" {
        let s = if opset < 9 {
            node.attr("scales").and_then(|a| match a {
                A::Floats(f) => Some(f.iter().map(|&v| v as f64).collect()),
                _ => None,
            })
        } else {
            cx.const_floats(1)?
        };
        (s, None)
    } else if opset < 11 {
        (cx.const_floats(1)?, None)
    } else {
        let sizes = cx.const_ints(3)?.filter(|s| !s.is_empty());
        let scales = if sizes.is_none() {
            cx.const_floats(2)?.filter(|s| !s.is_empty())
        } else {
            None
        };
        (scales, sizes)
    };
    let out: Vec<i64> = match (sizes, scales) {
        (Some(s), _) if s.len() == 4 => s,
        (_, Some(sc)) if sc.len() == 4 && sc.iter().all(|k| k.is_finite() && *k > 0.0) => {
            // collage's resize takes an output size and maps coordinates by output / input, which
            // is the given scale only when input × scale is a whole number.
            if let Some((d, k)) = shape
                .iter()
                .zip(&sc)
                .find(|(&d, &k)| (d as f64 * k).fract() != 0.0)
            {
                return Err(cx.unsupported(format_args!(
                    "scale {k} on an extent of {d} (not a whole output size)"
                )));
            }
            shape
                .iter()
                .zip(&sc)
                .map(|(&d, &k)| (d as f64 * k).min((1u64 << 40) as f64) as i64)
                .collect()
        }
        _ => return Err(cx.unsupported("neither scales nor sizes for every axis")),
    };
    cx.within("an output extent", &out, 1, 1 << 40)?;
    if out[0] != shape[0] || out[1] != shape[1] {
        return Err(cx.unsupported("resizing the batch or channel axis"));
    }
    let mode = attr_str(node, "mode", "nearest");
    let method = match mode {
        "nearest" => "nearest_neighbor",
        "linear" | "bilinear" => "linear",
        "cubic" => "cubic",
        other => return Err(cx.unsupported(format_args!("mode \"{other}\""))),
    };
    let default_coord = if node.op_type == "Upsample" || opset < 11 {
        "asymmetric"
    } else {
        "half_pixel"
    };
    let coord = attr_str(node, "coordinate_transformation_mode", default_coord);
    if coord == "tf_crop_and_resize" {
        return Err(cx.unsupported("coordinate_transformation_mode \"tf_crop_and_resize\""));
    }
    let old = node.op_type == "Upsample" || opset < 11;
    let rounding = if method == "nearest_neighbor" && old {
        // Before opset 11 the nearest pixel is the floor of the source coordinate when
        // enlarging and its ceiling when shrinking.
        if out[2] >= shape[2] && out[3] >= shape[3] {
            "floor"
        } else if out[2] <= shape[2] && out[3] <= shape[3] {
            "ceil"
        } else {
            return Err(cx.unsupported(
                "nearest resizing that enlarges one axis and shrinks the other before opset 11",
            ));
        }
    } else if method == "nearest_neighbor" {
        match attr_str(node, "nearest_mode", "round_prefer_floor") {
            "round_prefer_floor" => "round_prefer_floor",
            "round_prefer_ceil" => "round_prefer_ceil",
            "floor" => "floor",
            "ceil" => "ceil",
            other => return Err(cx.unsupported(format_args!("nearest_mode \"{other}\""))),
        }
    } else {
        ""
    };
    if node.attr("antialias").is_some_and(|a| *a != A::Int(0)) {
        return Err(cx.unsupported("antialias"));
    }
    cx.call(
        Op::Resize2d,
        &[x],
        &[
            ("size", ints(&out[2..])),
            ("method", string(method)),
            ("coordinate_transformation_mode", string(coord)),
            ("rounding_method", string(rounding)),
            (
                "cubic_alpha",
                float(attr_float(node, "cubic_coeff_a", -0.75) as f64),
            ),
            ("cubic_exclude", int(attr_int(node, "exclude_outside", 0))),
            (
                "extrapolation_value",
                float(attr_float(node, "extrapolation_value", 0.0) as f64),
            ),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_broadcast_like_numpy() {
        assert_eq!(broadcast_shapes(&[2, 1, 3], &[4, 1]), Some(vec![2, 4, 3]));
        assert_eq!(broadcast_shapes(&[], &[5]), Some(vec![5]));
        assert_eq!(broadcast_shapes(&[2], &[3]), None);
    }
}
