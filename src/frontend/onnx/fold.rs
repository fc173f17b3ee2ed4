//! Folding shape computations on known values.
//!
//! PyTorch exports with dynamic axes compute shapes at run time: `Shape`, `Gather`, `Unsqueeze`,
//! `Concat` and `Reshape` chains on small integer tensors. Once the inputs' shapes are bound,
//! those values are known, and [`fold`] evaluates them, node by node in topological order: a
//! node of a supported operator whose inputs are all known (weights, folded values, or for
//! `Shape` and `Size` a value whose static shape is known) becomes a constant.
//!
//! Static shapes of values produced by operators that do not fold come from a [`ShapeOracle`]:
//! [`DeclaredShapes`] gives the bound inputs' and the graph's `value_info`; the importer will
//! give its type checker's.
//!
//! Supported: `Shape` (with `start`/`end` from opset 15), `Size`, `Gather`, `Concat`,
//! `Unsqueeze`/`Squeeze` (axes an attribute before opset 13, an input from 13), `Cast`, `Range`,
//! `ConstantOfShape`, `Expand`, `Where`, `Equal`, `Less`, `Greater`, `Not`, `Slice` (attributes
//! before opset 10, inputs from 10), `Reshape` (attribute before opset 5), `Add`, `Sub`, `Mul`,
//! `Div`, `Neg`, `Min`, `Max` and `Identity`, on int64, int32, float32 and bool tensors with
//! numpy broadcasting. Integer arithmetic wraps on overflow and integer division truncates
//! toward zero (division by zero is an error). A result of more than [`MAX_FOLD_ELEMENTS`]
//! elements, a dimension above it, or a rank above [`MAX_FOLD_RANK`] is not computed: the node
//! is left to run (W3054).
//!
//! Weights are read lazily: a weight is converted to a [`Value`] only when a node being folded
//! (all of whose inputs are known) consumes it, so the weights of the rest of the model stay in
//! the mapping and are never copied.

use super::model::{AttrValue, Dim, Model, Node};
use super::shapes::BoundInput;
use super::tensor::{DType, TensorData};
use crate::diag::{Diagnostic, E3021, W3054};
use bytes::Bytes;
use rustc_hash::FxHashMap;

/// The most elements a folded value may have (2^20). Its size is computed, and checked, before
/// any memory for it is taken.
pub const MAX_FOLD_ELEMENTS: usize = 1 << 20;

/// The most elements all folded values of one model may have together (2^24, 128 MiB of
/// int64): past it, further nodes are left unfolded (W3054), so that many nodes each under
/// [`MAX_FOLD_ELEMENTS`] cannot add up to an unbounded amount of memory either.
pub const MAX_FOLD_TOTAL: usize = 1 << 24;

/// The highest rank a folded value may have (64). With each dimension at most
/// [`MAX_FOLD_ELEMENTS`] and the rank bounded, every per-axis computation is bounded too, even
/// for a value with no elements (a zero dimension makes the element count 0 whatever the
/// other dimensions are).
pub const MAX_FOLD_RANK: usize = 64;

/// The static shape of a value, when known.
pub trait ShapeOracle {
    /// The shape of the value called `name`, or `None` when it is not known.
    fn shape(&self, name: &str) -> Option<Vec<u64>>;
}

impl<F: Fn(&str) -> Option<Vec<u64>>> ShapeOracle for F {
    fn shape(&self, name: &str) -> Option<Vec<u64>> {
        self(name)
    }
}

/// The shapes a model declares: its bound inputs, and the values of `value_info` and outputs
/// whose dimensions are all fixed.
///
/// Known limit: the declarations of `value_info` and graph outputs are trusted as they are
/// written, not checked against what the operators compute, so a `Shape` of a value whose
/// declaration is wrong folds to the declared (wrong) shape. The importer will supply shapes
/// from collage's type checker instead (another [`ShapeOracle`]); a declared shape is used only
/// until then.
#[derive(Clone, Debug, Default)]
pub struct DeclaredShapes {
    shapes: FxHashMap<String, Vec<u64>>,
}

impl DeclaredShapes {
    /// The declared shapes of `model` with its inputs bound as `inputs`.
    pub fn new(model: &Model, inputs: &[BoundInput]) -> DeclaredShapes {
        let mut shapes = FxHashMap::default();
        for v in model.graph.value_info.iter().chain(&model.graph.outputs) {
            if let Some(dims) = &v.shape {
                let fixed: Option<Vec<u64>> = dims
                    .iter()
                    .map(|d| match d {
                        Dim::Fixed(n) => Some(*n),
                        _ => None,
                    })
                    .collect();
                if let Some(f) = fixed {
                    shapes.insert(v.name.clone(), f);
                }
            }
        }
        for i in inputs {
            shapes.insert(i.name.clone(), i.shape.clone());
        }
        DeclaredShapes { shapes }
    }
}

impl ShapeOracle for DeclaredShapes {
    fn shape(&self, name: &str) -> Option<Vec<u64>> {
        self.shapes.get(name).cloned()
    }
}

/// The elements of a value the folder computes with.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// int64.
    I64(Vec<i64>),
    /// int32.
    I32(Vec<i32>),
    /// float32.
    F32(Vec<f32>),
    /// bool.
    Bool(Vec<bool>),
}

/// A known value: shape and elements (row-major).
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Elements; their count is the product of the dimensions.
    pub data: Data,
}

macro_rules! each {
    ($data:expr, $v:ident => $e:expr) => {
        match $data {
            Data::I64($v) => Data::I64($e),
            Data::I32($v) => Data::I32($e),
            Data::F32($v) => Data::F32($e),
            Data::Bool($v) => Data::Bool($e),
        }
    };
}

impl Data {
    fn len(&self) -> usize {
        match self {
            Data::I64(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::Bool(v) => v.len(),
        }
    }

    fn dtype(&self) -> DType {
        match self {
            Data::I64(_) => DType::I64,
            Data::I32(_) => DType::I32,
            Data::F32(_) => DType::F32,
            Data::Bool(_) => DType::Bool,
        }
    }

    /// The elements at the given flat positions.
    fn take(&self, idx: &[usize]) -> Data {
        each!(self, v => idx.iter().map(|&i| v[i]).collect())
    }

    fn as_i64(&self) -> Option<Vec<i64>> {
        match self {
            Data::I64(v) => Some(v.clone()),
            Data::I32(v) => Some(v.iter().map(|&x| x as i64).collect()),
            _ => None,
        }
    }
}

impl Value {
    /// A value from tensor data of type int64, int32, float32 or bool with at most
    /// [`MAX_FOLD_ELEMENTS`] elements.
    pub fn from_tensor(t: &TensorData) -> Option<Value> {
        if !Value::fits(t) {
            return None;
        }
        let b = t.bytes();
        let data = match t.dtype {
            DType::I64 => Data::I64(t.to_i64()?),
            DType::I32 => Data::I32(
                b.chunks_exact(4)
                    .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
            ),
            DType::F32 => Data::F32(
                b.chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
            ),
            DType::Bool => Data::Bool(b.iter().map(|&x| x != 0).collect()),
            _ => return None,
        };
        Some(Value {
            shape: t.shape.iter().map(|&d| d as usize).collect(),
            data,
        })
    }

    /// Whether [`Value::from_tensor`] takes `t`: one of the four types, at most
    /// [`MAX_FOLD_ELEMENTS`] elements, no dimension above it, rank at most [`MAX_FOLD_RANK`].
    /// Nothing is read or copied.
    pub fn fits(t: &TensorData) -> bool {
        matches!(t.dtype, DType::I64 | DType::I32 | DType::F32 | DType::Bool)
            && t.shape.len() <= MAX_FOLD_RANK
            && t.len() <= MAX_FOLD_ELEMENTS
            && t.shape.iter().all(|&d| d <= MAX_FOLD_ELEMENTS as u64)
    }

    /// The value as tensor data.
    pub fn to_tensor(&self) -> TensorData {
        let bytes: Vec<u8> = match &self.data {
            Data::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::Bool(v) => v.iter().map(|&x| u8::from(x)).collect(),
        };
        let shape = self.shape.iter().map(|&d| d as u64).collect();
        TensorData::new(self.data.dtype(), shape, Bytes::from(bytes))
            .expect("a value's length matches its shape")
    }

    fn scalar_i64(shape: Vec<usize>, v: Vec<i64>) -> Value {
        Value {
            shape,
            data: Data::I64(v),
        }
    }
}

/// What folding produced.
#[derive(Clone, Debug, Default)]
pub struct Folding {
    /// The values of the folded nodes' outputs, by value name.
    pub values: FxHashMap<String, TensorData>,
    /// The file positions ([`Node::index`]) of the folded nodes, in topological order.
    pub folded: Vec<usize>,
    /// Warnings (W3054 for results over the limit).
    pub warnings: Vec<Diagnostic>,
    /// The weights read (converted to values) because a node being folded consumed them, in
    /// the order read. No other weight was touched.
    pub weights_read: Vec<String>,
}

/// Why a node did not fold.
#[derive(Debug)]
enum Skip {
    /// Not an operator or type the folder evaluates: the node stays.
    Unsupported,
    /// The result would have this many elements, over the limit: the node stays, W3054.
    TooBig(u128),
    /// The result would have this rank, over [`MAX_FOLD_RANK`]: the node stays, W3054.
    TooHigh(usize),
    /// The inputs are known and the operation has no result: E3021.
    Fail(String),
}

type R<T> = Result<T, Skip>;

fn fail<T>(msg: impl Into<String>) -> R<T> {
    Err(Skip::Fail(msg.into()))
}

/// Folds the shape computations of `model` whose inputs are known: weights of the four folded
/// types, previously folded values, and shapes from `shapes`. Errors are E3021 diagnostics
/// naming the node.
pub fn fold(model: &Model, shapes: &dyn ShapeOracle) -> Result<Folding, Vec<Diagnostic>> {
    let mut folder = Folder::new(model);
    let mut errors = Vec::new();
    for node in &model.graph.nodes {
        if let Err(d) = folder.step(node, shapes) {
            errors.push(d);
        }
    }
    if errors.is_empty() {
        Ok(folder.finish())
    } else {
        Err(errors)
    }
}

/// Folding one node at a time, for an importer that learns the static shapes of the values it
/// does not fold as it goes (its [`ShapeOracle`] grows between steps).
pub struct Folder<'m> {
    model: &'m Model,
    /// Folded values, and the weights converted so far (only those a folded node consumed).
    known: FxHashMap<&'m str, Value>,
    /// The weights, not converted: a weight is read when a node being folded consumes it.
    weights: FxHashMap<&'m str, &'m TensorData>,
    total: usize,
    out: Folding,
}

impl<'m> Folder<'m> {
    /// A folder over `model`'s weights, with nothing folded yet.
    pub fn new(model: &'m Model) -> Folder<'m> {
        Folder {
            model,
            known: FxHashMap::default(),
            weights: model
                .graph
                .weights
                .iter()
                .map(|w| (w.name.as_str(), &w.data))
                .collect(),
            total: 0,
            out: Folding::default(),
        }
    }

    /// Folds `node` when it can (nodes must come in topological order): `Ok(true)` when its
    /// output is now a known value ([`Folder::value`]), `Ok(false)` when the node stays (a
    /// W3054 warning may have been recorded), E3021 when its inputs are known and the
    /// operation has no result.
    pub fn step(&mut self, node: &'m Node, shapes: &dyn ShapeOracle) -> Result<bool, Diagnostic> {
        let model = self.model;
        // `Some(result)` for `Shape` and `Size`, which need only a static shape; `None` when
        // the node's inputs are all known values and it is to be evaluated.
        let shaped = {
            let known = &self.known;
            let weights = &self.weights;
            let shape_of = |name: &str| -> Option<Vec<u64>> {
                if let Some(v) = known.get(name) {
                    return Some(v.shape.iter().map(|&d| d as u64).collect());
                }
                weights
                    .get(name)
                    .map(|t| t.shape.clone())
                    .or_else(|| shapes.shape(name))
            };
            match node.op_type.as_str() {
                "Shape" | "Size" => match node.present_inputs().next().and_then(shape_of) {
                    Some(s) => Some(eval_shape(node, model.opset, &s)),
                    None => return Ok(false),
                },
                _ => {
                    if !SUPPORTED.contains(&node.op_type.as_str()) {
                        return Ok(false);
                    }
                    // Every present input must be known, or a weight the folder takes; only
                    // then are the weights among them read.
                    // The operators that also apply to weights fold only small values: shape
                    // computations are small, and folding large weights would spend the
                    // folding budget they need.
                    let small_only = SMALL_ONLY.contains(&node.op_type.as_str());
                    let limit = if small_only { SMALL_VALUE } else { usize::MAX };
                    let available = node.inputs.iter().all(|i| {
                        i.is_empty()
                            || known.get(i.as_str()).is_some_and(|v| v.data.len() <= limit)
                            || weights
                                .get(i.as_str())
                                .is_some_and(|t| Value::fits(t) && t.len() <= limit)
                    });
                    if !available {
                        return Ok(false);
                    }
                    None
                }
            }
        };
        let result = match shaped {
            Some(result) => result,
            None => {
                for i in &node.inputs {
                    if !i.is_empty() && !self.known.contains_key(i.as_str()) {
                        if let Some(v) = self
                            .weights
                            .get(i.as_str())
                            .and_then(|t| Value::from_tensor(t))
                        {
                            self.known.insert(i.as_str(), v);
                            self.out.weights_read.push(i.clone());
                        }
                    }
                }
                let args: Vec<Option<&Value>> = node
                    .inputs
                    .iter()
                    .map(|i| {
                        if i.is_empty() {
                            None
                        } else {
                            self.known.get(i.as_str())
                        }
                    })
                    .collect();
                if args
                    .iter()
                    .zip(&node.inputs)
                    .any(|(a, i)| a.is_none() && !i.is_empty())
                {
                    return Ok(false);
                }
                eval(node, model.opset, &args).and_then(|v| {
                    // Every operator checks its result; this keeps the invariant whatever
                    // an operator does.
                    if v.shape.len() > MAX_FOLD_RANK {
                        Err(Skip::TooHigh(v.shape.len()))
                    } else {
                        Ok(v)
                    }
                })
            }
        };
        let place = || node.place(&model.file, model.opset);
        match result {
            Ok(v) => {
                let Some(o) = node.outputs.first().filter(|o| !o.is_empty()) else {
                    return Ok(false);
                };
                if self.total + v.data.len() > MAX_FOLD_TOTAL {
                    self.out.warnings.push(
                        Diagnostic::warning(
                            W3054,
                            format!(
                                "the values folded so far hold {} elements; this one would \
                                 pass the total limit of {MAX_FOLD_TOTAL}, so the node is left \
                                 to run",
                                self.total
                            ),
                        )
                        .with_place(place()),
                    );
                    return Ok(false);
                }
                self.total += v.data.len();
                self.out.values.insert(o.clone(), v.to_tensor());
                self.out.folded.push(node.index);
                self.known.insert(o.as_str(), v);
                Ok(true)
            }
            Err(Skip::Unsupported) => Ok(false),
            Err(Skip::TooBig(n)) => {
                self.out.warnings.push(
                    Diagnostic::warning(
                        W3054,
                        format!(
                            "the result would have {n} elements, more than the folding limit \
                             of {MAX_FOLD_ELEMENTS}; the node is left to run"
                        ),
                    )
                    .with_place(place()),
                );
                Ok(false)
            }
            Err(Skip::TooHigh(r)) => {
                self.out.warnings.push(
                    Diagnostic::warning(
                        W3054,
                        format!(
                            "the result would have rank {r}, more than the folding limit of \
                             {MAX_FOLD_RANK}; the node is left to run"
                        ),
                    )
                    .with_place(place()),
                );
                Ok(false)
            }
            Err(Skip::Fail(msg)) => Err(Diagnostic::error(
                E3021,
                format!("`{}` cannot be computed: {msg}", node.op_type),
            )
            .with_place(place())),
        }
    }

    /// The folded value called `name`, as a tensor.
    pub fn value(&self, name: &str) -> Option<&TensorData> {
        self.out.values.get(name)
    }

    /// What has been folded so far.
    pub fn finish(self) -> Folding {
        self.out
    }
}

/// Operators of [`SUPPORTED`] that fold only inputs of at most [`SMALL_VALUE`] elements.
const SMALL_ONLY: &[&str] = &["Transpose", "Abs", "Floor", "Ceil"];

/// The most elements an input of a [`SMALL_ONLY`] operator may have to fold.
const SMALL_VALUE: usize = 4096;

const SUPPORTED: &[&str] = &[
    "Gather",
    "Concat",
    "Unsqueeze",
    "Squeeze",
    "Cast",
    "Range",
    "ConstantOfShape",
    "Expand",
    "Where",
    "Equal",
    "Less",
    "Greater",
    "Not",
    "Slice",
    "Reshape",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Neg",
    "Abs",
    "Floor",
    "Ceil",
    "Mod",
    "Min",
    "Max",
    "Identity",
    "Transpose",
    "ScatterND",
];

fn attr_int(node: &Node, name: &str) -> Option<i64> {
    match node.attr(name) {
        Some(AttrValue::Int(i)) => Some(*i),
        _ => None,
    }
}

fn attr_ints(node: &Node, name: &str) -> Option<Vec<i64>> {
    match node.attr(name) {
        Some(AttrValue::Ints(v)) => Some(v.clone()),
        _ => None,
    }
}

/// `Shape` and `Size` of a value whose shape is known.
fn eval_shape(node: &Node, opset: i64, shape: &[u64]) -> R<Value> {
    if shape.len() > MAX_FOLD_RANK {
        return Err(Skip::TooHigh(shape.len()));
    }
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    if node.op_type == "Size" {
        let n = shape.iter().try_fold(1i64, |n, &d| n.checked_mul(d as i64));
        return match n {
            Some(n) => Ok(Value::scalar_i64(vec![], vec![n])),
            None => fail("the element count overflows"),
        };
    }
    let r = dims.len() as i64;
    let (mut start, mut end) = (0, r);
    if opset >= 15 {
        let clamp = |x: i64| if x < 0 { (x + r).max(0) } else { x.min(r) };
        start = clamp(attr_int(node, "start").unwrap_or(0));
        end = clamp(attr_int(node, "end").unwrap_or(r));
    }
    let v: Vec<i64> = if start < end {
        dims[start as usize..end as usize].to_vec()
    } else {
        Vec::new()
    };
    Ok(Value::scalar_i64(vec![v.len()], v))
}

/// The element count of a result, refused over the limit. A rank over [`MAX_FOLD_RANK`], or a
/// dimension over [`MAX_FOLD_ELEMENTS`], is refused even when another dimension is zero (and the
/// count 0), so that per-axis work is bounded too: at most [`MAX_FOLD_RANK`] axes of at most
/// [`MAX_FOLD_ELEMENTS`] each.
fn count(shape: &[usize]) -> R<usize> {
    if shape.len() > MAX_FOLD_RANK {
        return Err(Skip::TooHigh(shape.len()));
    }
    if let Some(&d) = shape.iter().find(|&&d| d > MAX_FOLD_ELEMENTS) {
        return Err(Skip::TooBig(d as u128));
    }
    if shape.contains(&0) {
        // Before the product, which could overflow even u128 ahead of the zero.
        return Ok(0);
    }
    let n = shape
        .iter()
        .try_fold(1u128, |n, &d| n.checked_mul(d as u128));
    match n {
        Some(n) if n <= MAX_FOLD_ELEMENTS as u128 => Ok(n as usize),
        Some(n) => Err(Skip::TooBig(n)),
        None => Err(Skip::TooBig(u128::MAX)),
    }
}

fn norm_axis(axis: i64, rank: usize) -> R<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return fail(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

/// The broadcast of two shapes (numpy rules).
fn broadcast(a: &[usize], b: &[usize]) -> R<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for (i, o) in out.iter_mut().enumerate() {
        let x = if i + a.len() >= r {
            a[i + a.len() - r]
        } else {
            1
        };
        let y = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            1
        };
        *o = if x == y || y == 1 {
            x
        } else if x == 1 {
            y
        } else {
            return fail(format!("shapes {a:?} and {b:?} do not broadcast"));
        };
    }
    Ok(out)
}

/// For each element of `out` (row-major), the position of the element of a value of shape
/// `shape` broadcast to it.
///
/// `out` has passed [`count`]: its rank and dimensions are bounded. With no elements nothing is
/// computed; strides saturate rather than overflow (they can only grow past `usize` when a
/// dimension is zero, and then no element uses them).
fn broadcast_index(shape: &[usize], out: &[usize], n: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let r = out.len();
    let mut strides = vec![0usize; r];
    let mut s: usize = 1;
    for i in (0..shape.len()).rev() {
        let j = i + r - shape.len();
        strides[j] = if shape[i] == 1 { 0 } else { s };
        s = s.saturating_mul(shape[i]);
    }
    positions(out, &strides, n)
}

/// The flat positions read by the first `n` elements of `shape` (row-major order) when axis
/// `k` advances `step[k]` positions.
fn positions(shape: &[usize], step: &[usize], n: usize) -> Vec<usize> {
    let mut idx = Vec::with_capacity(n);
    let mut pos = vec![0usize; shape.len()];
    for _ in 0..n {
        idx.push(pos.iter().zip(step).map(|(p, s)| p * s).sum());
        advance(&mut pos, shape);
    }
    idx
}

/// The row-major strides of `shape`. Callers have a result with elements, so every dimension
/// of the input is positive and the strides are at most its element count; saturating keeps
/// them from overflowing regardless.
fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1].saturating_mul(shape[k + 1]);
    }
    strides
}

/// `pos` moved to the next index of `shape` in row-major order (back to zeros after the last).
fn advance(pos: &mut [usize], shape: &[usize]) {
    for k in (0..pos.len()).rev() {
        pos[k] += 1;
        if pos[k] < shape[k] {
            return;
        }
        pos[k] = 0;
    }
}

fn arg<'a>(args: &[Option<&'a Value>], i: usize) -> R<&'a Value> {
    match args.get(i).copied().flatten() {
        Some(v) => Ok(v),
        None => fail(format!("input {i} is missing")),
    }
}

fn ints(v: &Value, what: &str) -> R<Vec<i64>> {
    match v.data.as_i64() {
        Some(x) => Ok(x),
        None => fail(format!("{what} must be integers")),
    }
}

fn scalar(v: &Value, what: &str) -> R<Data> {
    if v.data.len() != 1 {
        return fail(format!(
            "{what} must hold one element, not {}",
            v.data.len()
        ));
    }
    Ok(v.data.clone())
}

/// Evaluates a node on known inputs (`None` for an omitted optional input).
fn eval(node: &Node, opset: i64, args: &[Option<&Value>]) -> R<Value> {
    let op = node.op_type.as_str();
    match op {
        "Identity" => Ok(arg(args, 0)?.clone()),
        "Add" | "Sub" | "Mul" | "Div" | "Equal" | "Less" | "Greater" => {
            binary(op, arg(args, 0)?, arg(args, 1)?)
        }
        "Mod" => {
            // Integers take the divisor's sign unless `fmod` is 1 (C's `%`); floats need `fmod`.
            let op = match attr_int(node, "fmod").unwrap_or(0) {
                0 => "Mod",
                1 => "FMod",
                f => return fail(format!("`fmod` is {f}, not 0 or 1")),
            };
            binary(op, arg(args, 0)?, arg(args, 1)?)
        }
        "Min" | "Max" => {
            let mut acc = arg(args, 0)?.clone();
            for i in 1..args.len() {
                acc = binary(op, &acc, arg(args, i)?)?;
            }
            Ok(acc)
        }
        "Neg" => {
            let a = arg(args, 0)?;
            let data = match &a.data {
                Data::I64(v) => Data::I64(v.iter().map(|x| x.wrapping_neg()).collect()),
                Data::I32(v) => Data::I32(v.iter().map(|x| x.wrapping_neg()).collect()),
                Data::F32(v) => Data::F32(v.iter().map(|x| -x).collect()),
                Data::Bool(_) => return Err(Skip::Unsupported),
            };
            Ok(Value {
                shape: a.shape.clone(),
                data,
            })
        }
        "Abs" | "Floor" | "Ceil" => {
            let a = arg(args, 0)?;
            let data = match (&a.data, op) {
                (Data::I64(v), "Abs") => Data::I64(v.iter().map(|x| x.wrapping_abs()).collect()),
                (Data::I32(v), "Abs") => Data::I32(v.iter().map(|x| x.wrapping_abs()).collect()),
                (Data::F32(v), "Abs") => Data::F32(v.iter().map(|x| x.abs()).collect()),
                (Data::F32(v), "Floor") => Data::F32(v.iter().map(|x| x.floor()).collect()),
                (Data::F32(v), "Ceil") => Data::F32(v.iter().map(|x| x.ceil()).collect()),
                _ => return Err(Skip::Unsupported),
            };
            Ok(Value {
                shape: a.shape.clone(),
                data,
            })
        }
        "Transpose" => transpose(node, arg(args, 0)?),
        "Not" => {
            let a = arg(args, 0)?;
            match &a.data {
                Data::Bool(v) => Ok(Value {
                    shape: a.shape.clone(),
                    data: Data::Bool(v.iter().map(|x| !x).collect()),
                }),
                _ => fail("`Not` takes booleans"),
            }
        }
        "Where" => {
            let (c, x, y) = (arg(args, 0)?, arg(args, 1)?, arg(args, 2)?);
            let Data::Bool(cv) = &c.data else {
                return fail("the condition must be boolean");
            };
            if x.data.dtype() != y.data.dtype() {
                return fail("the two branches have different types");
            }
            let shape = broadcast(&broadcast(&c.shape, &x.shape)?, &y.shape)?;
            let n = count(&shape)?;
            let (ci, xi, yi) = (
                broadcast_index(&c.shape, &shape, n),
                broadcast_index(&x.shape, &shape, n),
                broadcast_index(&y.shape, &shape, n),
            );
            let pick: Vec<(bool, usize)> = (0..n)
                .map(|k| {
                    if cv[ci[k]] {
                        (true, xi[k])
                    } else {
                        (false, yi[k])
                    }
                })
                .collect();
            // One selection for every dtype the folder holds.
            macro_rules! select {
                ($($v:ident),*) => {
                    match (&x.data, &y.data) {
                        $((Data::$v(a), Data::$v(b)) => Data::$v(
                            pick.iter().map(|&(t, i)| if t { a[i] } else { b[i] }).collect(),
                        ),)*
                        _ => unreachable!("types compared above"),
                    }
                };
            }
            let data = select!(I64, I32, F32, Bool);
            Ok(Value { shape, data })
        }
        "Cast" => {
            let a = arg(args, 0)?;
            let to = attr_int(node, "to").ok_or(Skip::Fail("`to` is missing".into()))?;
            let data = match (DType::from_onnx(to as i32), &a.data) {
                (Some(DType::I64), d) => Data::I64(to_f64_or_i64(d, |x| x as i64, |x| x)),
                (Some(DType::I32), d) => Data::I32(to_f64_or_i64(d, |x| x as i32, |x| x as i32)),
                (Some(DType::F32), d) => Data::F32(to_f64_or_i64(d, |x| x as f32, |x| x as f32)),
                (Some(DType::Bool), d) => Data::Bool(to_f64_or_i64(d, |x| x != 0.0, |x| x != 0)),
                _ => return Err(Skip::Unsupported),
            };
            Ok(Value {
                shape: a.shape.clone(),
                data,
            })
        }
        "ScatterND" => scatter_nd(node, arg(args, 0)?, arg(args, 1)?, arg(args, 2)?),
        "Gather" => {
            let (d, i) = (arg(args, 0)?, arg(args, 1)?);
            let r = d.shape.len();
            if r == 0 {
                return fail("cannot gather from a scalar");
            }
            let axis = norm_axis(attr_int(node, "axis").unwrap_or(0), r)?;
            let idx = ints(i, "indices")?;
            let s = d.shape[axis];
            let mut shape = d.shape[..axis].to_vec();
            shape.extend_from_slice(&i.shape);
            shape.extend_from_slice(&d.shape[axis + 1..]);
            let n = count(&shape)?;
            if n == 0 {
                return Ok(Value {
                    shape,
                    data: d.data.take(&[]),
                });
            }
            let outer: usize = d.shape[..axis].iter().product();
            let inner: usize = d.shape[axis + 1..].iter().product();
            let mut pos = Vec::with_capacity(n);
            for o in 0..outer {
                for &k in &idx {
                    let k = if k < 0 { k + s as i64 } else { k };
                    if k < 0 || k >= s as i64 {
                        return fail(format!("index {k} is out of range for size {s}"));
                    }
                    let base = (o * s + k as usize) * inner;
                    pos.extend(base..base + inner);
                }
            }
            Ok(Value {
                shape,
                data: d.data.take(&pos),
            })
        }
        "Concat" => {
            let vals: Vec<&Value> = args.iter().flatten().copied().collect();
            let Some(first) = vals.first() else {
                return fail("no inputs");
            };
            let r = first.shape.len();
            if r == 0 {
                return fail("cannot concatenate scalars");
            }
            let axis = norm_axis(
                attr_int(node, "axis").ok_or(Skip::Fail("`axis` is missing".into()))?,
                r,
            )?;
            let mut shape = first.shape.clone();
            shape[axis] = 0;
            for v in &vals {
                let same = v.shape.len() == r
                    && (0..r).all(|k| k == axis || v.shape[k] == first.shape[k])
                    && v.data.dtype() == first.data.dtype();
                if !same {
                    return fail(format!(
                        "inputs of shapes {:?} and {:?} do not concatenate on axis {axis}",
                        first.shape, v.shape
                    ));
                }
                shape[axis] += v.shape[axis];
            }
            if count(&shape)? == 0 {
                return Ok(Value {
                    shape,
                    data: first.data.take(&[]),
                });
            }
            let outer: usize = first.shape[..axis].iter().product();
            let inner: usize = first.shape[axis + 1..].iter().product();
            // Concatenate the flat data, then pick positions from the joined vector.
            let mut offsets = Vec::with_capacity(vals.len());
            let mut total = 0;
            for v in &vals {
                offsets.push(total);
                total += v.data.len();
            }
            let joined = join(&vals);
            let mut pos = Vec::new();
            for o in 0..outer {
                for (v, off) in vals.iter().zip(&offsets) {
                    let chunk = v.shape[axis] * inner;
                    pos.extend(off + o * chunk..off + (o + 1) * chunk);
                }
            }
            Ok(Value {
                shape,
                data: joined.take(&pos),
            })
        }
        "Unsqueeze" => {
            let a = arg(args, 0)?;
            let axes = if opset >= 13 {
                ints(arg(args, 1)?, "axes")?
            } else {
                attr_ints(node, "axes").ok_or(Skip::Fail("`axes` is missing".into()))?
            };
            let r = a.shape.len() + axes.len();
            if r > MAX_FOLD_RANK {
                return Err(Skip::TooHigh(r));
            }
            let mut norm = axes
                .iter()
                .map(|&x| norm_axis(x, r))
                .collect::<R<Vec<_>>>()?;
            norm.sort_unstable();
            if norm.windows(2).any(|w| w[0] == w[1]) {
                return fail("an axis is repeated");
            }
            let mut shape = a.shape.clone();
            for &x in &norm {
                shape.insert(x, 1);
            }
            Ok(Value {
                shape,
                data: a.data.clone(),
            })
        }
        "Squeeze" => {
            let a = arg(args, 0)?;
            let axes = if opset >= 13 {
                match args.get(1).copied().flatten() {
                    Some(v) => Some(ints(v, "axes")?),
                    None => None,
                }
            } else {
                attr_ints(node, "axes")
            };
            let r = a.shape.len();
            let drop: Vec<usize> = match axes {
                Some(axes) => {
                    let mut v = axes
                        .iter()
                        .map(|&x| norm_axis(x, r))
                        .collect::<R<Vec<_>>>()?;
                    v.sort_unstable();
                    v.dedup();
                    if let Some(&k) = v.iter().find(|&&k| a.shape[k] != 1) {
                        return fail(format!("axis {k} has size {}, not 1", a.shape[k]));
                    }
                    v
                }
                None => (0..r).filter(|&k| a.shape[k] == 1).collect(),
            };
            let mut dropped = vec![false; r];
            for &k in &drop {
                dropped[k] = true;
            }
            let shape = (0..r)
                .filter(|&k| !dropped[k])
                .map(|k| a.shape[k])
                .collect();
            Ok(Value {
                shape,
                data: a.data.clone(),
            })
        }
        "Reshape" => {
            let a = arg(args, 0)?;
            let target = if opset >= 5 {
                ints(arg(args, 1)?, "the shape")?
            } else {
                attr_ints(node, "shape").ok_or(Skip::Fail("`shape` is missing".into()))?
            };
            let allowzero = attr_int(node, "allowzero").unwrap_or(0) != 0;
            let n = a.data.len();
            let mut shape = Vec::with_capacity(target.len());
            let mut infer = None;
            for (k, &d) in target.iter().enumerate() {
                match d {
                    -1 if infer.is_none() => {
                        infer = Some(k);
                        shape.push(1);
                    }
                    0 if !allowzero => match a.shape.get(k) {
                        Some(&s) => shape.push(s),
                        None => return fail(format!("0 at position {k} copies no dimension")),
                    },
                    d if d >= 0 => shape.push(d as usize),
                    d => return fail(format!("size {d} is not allowed")),
                }
            }
            let rest = shape
                .iter()
                .try_fold(1usize, |p, &d| p.checked_mul(d))
                .ok_or(Skip::Fail("the shape overflows".into()))?;
            if let Some(k) = infer {
                if rest == 0 || n % rest != 0 {
                    return fail(format!("{n} elements do not fit shape {target:?}"));
                }
                shape[k] = n / rest;
            } else if rest != n {
                return fail(format!("{n} elements do not fit shape {target:?}"));
            }
            count(&shape)?;
            Ok(Value {
                shape,
                data: a.data.clone(),
            })
        }
        "Expand" => {
            let (a, s) = (arg(args, 0)?, arg(args, 1)?);
            let want = ints(s, "the shape")?;
            if want.iter().any(|&d| d < 0) {
                return fail(format!("shape {want:?} has a negative size"));
            }
            let want: Vec<usize> = want.iter().map(|&d| d as usize).collect();
            let shape = broadcast(&a.shape, &want)?;
            let n = count(&shape)?;
            let pos = broadcast_index(&a.shape, &shape, n);
            Ok(Value {
                shape,
                data: a.data.take(&pos),
            })
        }
        "ConstantOfShape" => {
            let s = arg(args, 0)?;
            let dims = ints(s, "the shape")?;
            if dims.iter().any(|&d| d < 0) {
                return fail(format!("shape {dims:?} has a negative size"));
            }
            let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
            let n = count(&shape)?;
            let fill = match node.attr("value") {
                Some(AttrValue::Tensor(t)) => {
                    let v = Value::from_tensor(t).ok_or(Skip::Unsupported)?;
                    scalar(&v, "`value`")?
                }
                None => Data::F32(vec![0.0]),
                Some(_) => return fail("`value` is not a tensor"),
            };
            Ok(Value {
                shape,
                data: fill.take(&vec![0; n]),
            })
        }
        "Range" => range(arg(args, 0)?, arg(args, 1)?, arg(args, 2)?),
        "Slice" => slice(node, opset, args),
        _ => Err(Skip::Unsupported),
    }
}

fn to_f64_or_i64<T>(d: &Data, f: impl Fn(f64) -> T, i: impl Fn(i64) -> T) -> Vec<T> {
    match d {
        Data::F32(v) => v.iter().map(|&x| f(x as f64)).collect(),
        Data::I64(v) => v.iter().map(|&x| i(x)).collect(),
        Data::I32(v) => v.iter().map(|&x| i(x as i64)).collect(),
        Data::Bool(v) => v.iter().map(|&x| i(x as i64)).collect(),
    }
}

fn join(vals: &[&Value]) -> Data {
    let mut out = each!(&vals[0].data, _v => Vec::new());
    for v in vals {
        match (&mut out, &v.data) {
            (Data::I64(o), Data::I64(x)) => o.extend_from_slice(x),
            (Data::I32(o), Data::I32(x)) => o.extend_from_slice(x),
            (Data::F32(o), Data::F32(x)) => o.extend_from_slice(x),
            (Data::Bool(o), Data::Bool(x)) => o.extend_from_slice(x),
            _ => unreachable!("types checked by the caller"),
        }
    }
    out
}

fn binary(op: &str, a: &Value, b: &Value) -> R<Value> {
    let shape = broadcast(&a.shape, &b.shape)?;
    let n = count(&shape)?;
    let ia = broadcast_index(&a.shape, &shape, n);
    let ib = broadcast_index(&b.shape, &shape, n);
    macro_rules! zip {
        ($x:expr, $y:expr, $f:expr) => {
            ia.iter()
                .zip(&ib)
                .map(|(&i, &j)| $f($x[i], $y[j]))
                .collect()
        };
    }
    macro_rules! ints {
        ($x:expr, $y:expr, $ty:ident, $t:ty) => {{
            if matches!(op, "Div" | "Mod" | "FMod") && ib.iter().any(|&j| $y[j] == 0) {
                return fail("integer division by zero");
            }
            match op {
                "Add" => Data::$ty(zip!($x, $y, |p: $t, q: $t| p.wrapping_add(q))),
                "Sub" => Data::$ty(zip!($x, $y, |p: $t, q: $t| p.wrapping_sub(q))),
                "Mul" => Data::$ty(zip!($x, $y, |p: $t, q: $t| p.wrapping_mul(q))),
                "Div" => Data::$ty(zip!($x, $y, |p: $t, q: $t| p.wrapping_div(q))),
                "FMod" => Data::$ty(zip!($x, $y, |p: $t, q: $t| p.wrapping_rem(q))),
                "Mod" => Data::$ty(zip!($x, $y, |p: $t, q: $t| {
                    let r = p.wrapping_rem(q);
                    if r != 0 && (r < 0) != (q < 0) {
                        r + q
                    } else {
                        r
                    }
                })),
                "Min" => Data::$ty(zip!($x, $y, |p: $t, q: $t| p.min(q))),
                "Max" => Data::$ty(zip!($x, $y, |p: $t, q: $t| p.max(q))),
                "Equal" => Data::Bool(zip!($x, $y, |p: $t, q: $t| p == q)),
                "Less" => Data::Bool(zip!($x, $y, |p: $t, q: $t| p < q)),
                "Greater" => Data::Bool(zip!($x, $y, |p: $t, q: $t| p > q)),
                _ => return Err(Skip::Unsupported),
            }
        }};
    }
    let data = match (&a.data, &b.data) {
        (Data::I64(x), Data::I64(y)) => ints!(x, y, I64, i64),
        (Data::I32(x), Data::I32(y)) => ints!(x, y, I32, i32),
        (Data::F32(x), Data::F32(y)) => {
            let nan = |p: f32, q: f32, r: f32| {
                if p.is_nan() || q.is_nan() {
                    f32::NAN
                } else {
                    r
                }
            };
            match op {
                "Add" => Data::F32(zip!(x, y, |p: f32, q: f32| p + q)),
                "Sub" => Data::F32(zip!(x, y, |p: f32, q: f32| p - q)),
                "Mul" => Data::F32(zip!(x, y, |p: f32, q: f32| p * q)),
                "Div" => Data::F32(zip!(x, y, |p: f32, q: f32| p / q)),
                // C's `fmod`: the dividend's sign.
                "FMod" => Data::F32(zip!(x, y, |p: f32, q: f32| p % q)),
                "Min" => Data::F32(zip!(x, y, |p: f32, q: f32| nan(p, q, p.min(q)))),
                "Max" => Data::F32(zip!(x, y, |p: f32, q: f32| nan(p, q, p.max(q)))),
                "Equal" => Data::Bool(zip!(x, y, |p: f32, q: f32| p == q)),
                "Less" => Data::Bool(zip!(x, y, |p: f32, q: f32| p < q)),
                "Greater" => Data::Bool(zip!(x, y, |p: f32, q: f32| p > q)),
                _ => return Err(Skip::Unsupported),
            }
        }
        (Data::Bool(x), Data::Bool(y)) if op == "Equal" => {
            Data::Bool(zip!(x, y, |p: bool, q: bool| p == q))
        }
        (Data::Bool(_), Data::Bool(_)) => return Err(Skip::Unsupported),
        (x, y) => {
            return fail(format!(
                "operands of types {} and {} differ",
                x.dtype().name(),
                y.dtype().name()
            ))
        }
    };
    Ok(Value { shape, data })
}

/// `ScatterND` without a reduction: `data` with the slices that `indices` (`[..., k]`) name
/// replaced by those of `updates` (`indices.shape[..-1] + data.shape[k..]`), later ones last.
fn scatter_nd(node: &Node, data: &Value, indices: &Value, updates: &Value) -> R<Value> {
    match node.attr("reduction") {
        None => {}
        Some(AttrValue::String(s)) if s == "none" => {}
        Some(_) => return Err(Skip::Unsupported),
    }
    if data.data.dtype() != updates.data.dtype() {
        return fail("`data` and `updates` have different types");
    }
    let idx = ints(indices, "indices")?;
    let (r, q) = (data.shape.len(), indices.shape.len());
    let k = match indices.shape.last() {
        Some(&k) if k >= 1 && k <= r => k,
        _ => {
            return fail(format!(
                "indices of shape {:?} for data of rank {r}",
                indices.shape
            ))
        }
    };
    let mut want = indices.shape[..q - 1].to_vec();
    want.extend_from_slice(&data.shape[k..]);
    if updates.shape != want {
        return fail(format!(
            "updates of shape {:?}, not {want:?}",
            updates.shape
        ));
    }
    let inner: usize = data.shape[k..].iter().product();
    let n = data.data.len();
    // Positions into `data` followed by `updates`.
    let mut pos: Vec<usize> = (0..n).collect();
    for (t, tuple) in idx.chunks_exact(k).enumerate() {
        let mut base = 0usize;
        for (a, &i) in tuple.iter().enumerate() {
            let s = data.shape[a] as i64;
            let i = if i < 0 { i + s } else { i };
            if !(0..s).contains(&i) {
                return fail(format!("index {i} is out of range for size {s}"));
            }
            base = base * data.shape[a] + i as usize;
        }
        let base = base * inner;
        for j in 0..inner {
            pos[base + j] = n + t * inner + j;
        }
    }
    Ok(Value {
        shape: data.shape.clone(),
        data: join(&[data, updates]).take(&pos),
    })
}

/// `Transpose`: `perm` (default: the axes reversed) must name every axis once.
fn transpose(node: &Node, a: &Value) -> R<Value> {
    let r = a.shape.len();
    let perm: Vec<usize> = match attr_ints(node, "perm") {
        Some(p) => {
            if p.len() != r {
                return fail(format!("`perm` has {} axes, the input {r}", p.len()));
            }
            let mut seen = vec![false; r];
            let mut out = Vec::with_capacity(r);
            for &x in &p {
                match usize::try_from(x) {
                    Ok(k) if k < r && !seen[k] => {
                        seen[k] = true;
                        out.push(k);
                    }
                    _ => return fail(format!("`perm` {p:?} is not a permutation of the axes")),
                }
            }
            out
        }
        None => (0..r).rev().collect(),
    };
    let shape: Vec<usize> = perm.iter().map(|&k| a.shape[k]).collect();
    let n = count(&shape)?;
    if n == 0 {
        return Ok(Value {
            shape,
            data: a.data.take(&[]),
        });
    }
    // The input's strides, read in the output's axis order.
    let strides = row_major_strides(&a.shape);
    let step: Vec<usize> = perm.iter().map(|&k| strides[k]).collect();
    let idx = positions(&shape, &step, n);
    Ok(Value {
        shape,
        data: a.data.take(&idx),
    })
}

fn range(start: &Value, limit: &Value, delta: &Value) -> R<Value> {
    let (s, l, d) = (
        scalar(start, "`start`")?,
        scalar(limit, "`limit`")?,
        scalar(delta, "`delta`")?,
    );
    match (&s, &l, &d) {
        (Data::F32(s), Data::F32(l), Data::F32(d)) => {
            let (s, l, d) = (s[0], l[0], d[0]);
            let n = ((l - s) / d).ceil();
            if d == 0.0 || !n.is_finite() {
                return fail("the range has no finite length");
            }
            let n = n.max(0.0);
            if n > MAX_FOLD_ELEMENTS as f32 {
                return Err(Skip::TooBig(n as u128));
            }
            let n = n as usize;
            Ok(Value {
                shape: vec![n],
                data: Data::F32((0..n).map(|i| s + i as f32 * d).collect()),
            })
        }
        _ => {
            let (Some(s), Some(l), Some(d)) = (s.as_i64(), l.as_i64(), d.as_i64()) else {
                return fail("`start`, `limit` and `delta` must have one type");
            };
            if s.len() != 1
                || std::mem::discriminant(&start.data) != std::mem::discriminant(&delta.data)
                || std::mem::discriminant(&start.data) != std::mem::discriminant(&limit.data)
            {
                return fail("`start`, `limit` and `delta` must have one type");
            }
            let (s, l, d) = (s[0] as i128, l[0] as i128, d[0] as i128);
            if d == 0 {
                return fail("`delta` is zero");
            }
            let diff = l - s;
            let n: i128 = if diff == 0 || (diff > 0) != (d > 0) {
                0
            } else {
                (diff + d - d.signum()) / d
            };
            if n > MAX_FOLD_ELEMENTS as i128 {
                return Err(Skip::TooBig(n as u128));
            }
            let v: Vec<i64> = (0..n).map(|i| (s + i * d) as i64).collect();
            let data = match start.data {
                Data::I32(_) => Data::I32(v.iter().map(|&x| x as i32).collect()),
                _ => Data::I64(v),
            };
            Ok(Value {
                shape: vec![n as usize],
                data,
            })
        }
    }
}

fn slice(node: &Node, opset: i64, args: &[Option<&Value>]) -> R<Value> {
    let a = arg(args, 0)?;
    let r = a.shape.len();
    let (starts, ends, axes, steps) = if opset >= 10 {
        let opt = |i: usize, what: &str| -> R<Option<Vec<i64>>> {
            match args.get(i).copied().flatten() {
                Some(v) => Ok(Some(ints(v, what)?)),
                None => Ok(None),
            }
        };
        (
            ints(arg(args, 1)?, "`starts`")?,
            ints(arg(args, 2)?, "`ends`")?,
            opt(3, "`axes`")?,
            opt(4, "`steps`")?,
        )
    } else {
        (
            attr_ints(node, "starts").ok_or(Skip::Fail("`starts` is missing".into()))?,
            attr_ints(node, "ends").ok_or(Skip::Fail("`ends` is missing".into()))?,
            attr_ints(node, "axes"),
            None,
        )
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return fail("`starts`, `ends`, `axes` and `steps` differ in length");
    }
    // Per axis, the first position kept, the step and the count kept: arithmetic, no list of
    // positions (the rank is bounded, each axis is at most MAX_FOLD_ELEMENTS).
    if r > MAX_FOLD_RANK {
        return Err(Skip::TooHigh(r));
    }
    let mut first = vec![0usize; r];
    let mut stride = vec![1i128; r];
    let mut shape = a.shape.clone();
    let mut seen = vec![false; r];
    for k in 0..starts.len() {
        let axis = norm_axis(axes[k], r)?;
        if std::mem::replace(&mut seen[axis], true) {
            return fail(format!("axis {axis} is repeated"));
        }
        let dim = a.shape[axis] as i128;
        let step = steps[k] as i128;
        if step == 0 {
            return fail("a step is zero");
        }
        let adj = |x: i64| {
            let x = x as i128;
            if x < 0 {
                x + dim
            } else {
                x
            }
        };
        let (mut s, mut e) = (adj(starts[k]), adj(ends[k]));
        if step > 0 {
            s = s.clamp(0, dim);
            e = e.clamp(0, dim);
        } else {
            s = s.clamp(0, (dim - 1).max(0));
            e = e.clamp(-1, dim - 1);
        }
        let len = if dim == 0 {
            0
        } else if step > 0 && s < e {
            (e - s + step - 1) / step
        } else if step < 0 && s > e {
            (s - e - step - 1) / -step
        } else {
            0
        };
        first[axis] = s as usize;
        stride[axis] = step;
        shape[axis] = len as usize;
    }
    let n = count(&shape)?;
    if n == 0 {
        return Ok(Value {
            shape,
            data: a.data.take(&[]),
        });
    }
    let strides = row_major_strides(&a.shape);
    let mut pos = Vec::with_capacity(n);
    let mut cur = vec![0usize; r];
    for _ in 0..n {
        pos.push(
            (0..r)
                .map(|k| (first[k] as i128 + cur[k] as i128 * stride[k]) as usize * strides[k])
                .sum(),
        );
        advance(&mut cur, &shape);
    }
    Ok(Value {
        shape,
        data: a.data.take(&pos),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::onnx::model::Attribute;

    fn node(op: &str, inputs: usize, attrs: Vec<(&str, AttrValue)>) -> Node {
        Node {
            index: 0,
            name: String::new(),
            op_type: op.into(),
            inputs: (0..inputs).map(|i| format!("i{i}")).collect(),
            outputs: vec!["o".into()],
            attributes: attrs
                .into_iter()
                .map(|(n, v)| Attribute {
                    name: n.into(),
                    value: v,
                })
                .collect(),
        }
    }

    fn i64v(shape: &[usize], v: &[i64]) -> Value {
        Value {
            shape: shape.to_vec(),
            data: Data::I64(v.to_vec()),
        }
    }

    fn f32v(shape: &[usize], v: &[f32]) -> Value {
        Value {
            shape: shape.to_vec(),
            data: Data::F32(v.to_vec()),
        }
    }

    fn run(
        op: &str,
        opset: i64,
        attrs: Vec<(&str, AttrValue)>,
        args: &[Option<&Value>],
    ) -> R<Value> {
        eval(&node(op, args.len(), attrs), opset, args)
    }

    fn ok(op: &str, attrs: Vec<(&str, AttrValue)>, args: &[&Value]) -> Value {
        let args: Vec<Option<&Value>> = args.iter().map(|v| Some(*v)).collect();
        run(op, 13, attrs, &args).unwrap_or_else(|e| panic!("{op}: {e:?}"))
    }

    fn fails(r: R<Value>) -> String {
        match r {
            Err(Skip::Fail(m)) => m,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn shape_and_size_with_start_and_end() {
        let n = node(
            "Shape",
            1,
            vec![("start", AttrValue::Int(1)), ("end", AttrValue::Int(-1))],
        );
        assert_eq!(
            eval_shape(&n, 15, &[2, 3, 4, 5]).unwrap(),
            i64v(&[2], &[3, 4])
        );
        // Before opset 15 the attributes do not exist.
        assert_eq!(eval_shape(&n, 13, &[2, 3]).unwrap(), i64v(&[2], &[2, 3]));
        let n = node(
            "Shape",
            1,
            vec![("start", AttrValue::Int(-10)), ("end", AttrValue::Int(99))],
        );
        assert_eq!(eval_shape(&n, 15, &[2, 3]).unwrap(), i64v(&[2], &[2, 3]));
        let n = node(
            "Shape",
            1,
            vec![("start", AttrValue::Int(2)), ("end", AttrValue::Int(1))],
        );
        assert_eq!(eval_shape(&n, 15, &[2, 3]).unwrap(), i64v(&[0], &[]));
        let n = node("Size", 1, vec![]);
        assert_eq!(eval_shape(&n, 13, &[2, 3, 4]).unwrap(), i64v(&[], &[24]));
    }

    #[test]
    fn broadcasting_arithmetic_with_onnx_integer_division() {
        let a = i64v(&[2, 1], &[7, -7]);
        let b = i64v(&[3], &[2, -2, 3]);
        assert_eq!(
            ok("Add", vec![], &[&a, &b]),
            i64v(&[2, 3], &[9, 5, 10, -5, -9, -4])
        );
        assert_eq!(
            ok("Sub", vec![], &[&a, &b]),
            i64v(&[2, 3], &[5, 9, 4, -9, -5, -10])
        );
        assert_eq!(
            ok("Mul", vec![], &[&a, &b]),
            i64v(&[2, 3], &[14, -14, 21, -14, 14, -21])
        );
        // Truncation toward zero: -7 / 2 is -3, not numpy's -4.
        assert_eq!(
            ok("Div", vec![], &[&a, &b]),
            i64v(&[2, 3], &[3, -3, 2, -3, 3, -2])
        );
        assert_eq!(ok("Neg", vec![], &[&a]), i64v(&[2, 1], &[-7, 7]));
        assert_eq!(
            ok("Add", vec![], &[&i64v(&[], &[i64::MAX]), &i64v(&[], &[1])]),
            i64v(&[], &[i64::MIN])
        );
        let zero = i64v(&[1], &[0]);
        assert!(fails(run("Div", 13, vec![], &[Some(&a), Some(&zero)])).contains("zero"));
        let x = f32v(&[2], &[1.0, -3.0]);
        assert_eq!(
            ok("Div", vec![], &[&x, &f32v(&[], &[2.0])]),
            f32v(&[2], &[0.5, -1.5])
        );
        assert_eq!(
            ok(
                "Max",
                vec![],
                &[&x, &f32v(&[1], &[0.0]), &f32v(&[2], &[-5.0, -2.0])]
            ),
            f32v(&[2], &[1.0, 0.0])
        );
        assert_eq!(
            ok("Min", vec![], &[&a, &b]),
            i64v(&[2, 3], &[2, -2, 3, -7, -7, -7])
        );
        assert!(fails(run("Add", 13, vec![], &[Some(&a), Some(&x)])).contains("differ"));
        let bad = i64v(&[4], &[1, 2, 3, 4]);
        assert!(fails(run("Add", 13, vec![], &[Some(&b), Some(&bad)])).contains("broadcast"));
        let i32s = Value {
            shape: vec![2],
            data: Data::I32(vec![-9, 9]),
        };
        let two = Value {
            shape: vec![],
            data: Data::I32(vec![2]),
        };
        assert_eq!(
            ok("Div", vec![], &[&i32s, &two]).data,
            Data::I32(vec![-4, 4])
        );
    }

    #[test]
    fn comparisons_where_and_not() {
        let a = i64v(&[3], &[1, 5, 3]);
        let b = i64v(&[], &[3]);
        let bools = |v: &[bool]| Value {
            shape: vec![v.len()],
            data: Data::Bool(v.to_vec()),
        };
        assert_eq!(ok("Equal", vec![], &[&a, &b]), bools(&[false, false, true]));
        assert_eq!(ok("Less", vec![], &[&a, &b]), bools(&[true, false, false]));
        assert_eq!(
            ok("Greater", vec![], &[&a, &b]),
            bools(&[false, true, false])
        );
        let c = bools(&[true, false, true]);
        assert_eq!(ok("Not", vec![], &[&c]), bools(&[false, true, false]));
        assert_eq!(
            ok("Where", vec![], &[&c, &a, &i64v(&[1], &[-1])]),
            i64v(&[3], &[1, -1, 3])
        );
        assert!(
            fails(run("Where", 13, vec![], &[Some(&a), Some(&a), Some(&a)])).contains("boolean")
        );
    }

    #[test]
    fn gather_concat_unsqueeze_squeeze() {
        let m = i64v(&[2, 3], &[1, 2, 3, 4, 5, 6]);
        let idx = i64v(&[2], &[-1, 0]);
        assert_eq!(
            ok("Gather", vec![("axis", AttrValue::Int(1))], &[&m, &idx]),
            i64v(&[2, 2], &[3, 1, 6, 4])
        );
        assert_eq!(
            ok("Gather", vec![], &[&m, &i64v(&[], &[1])]),
            i64v(&[3], &[4, 5, 6])
        );
        let far = i64v(&[], &[2]);
        assert!(fails(run("Gather", 13, vec![], &[Some(&m), Some(&far)])).contains("out of range"));
        let c = ok(
            "Concat",
            vec![("axis", AttrValue::Int(-1))],
            &[&m, &i64v(&[2, 1], &[7, 8])],
        );
        assert_eq!(c, i64v(&[2, 4], &[1, 2, 3, 7, 4, 5, 6, 8]));
        let c = ok("Concat", vec![("axis", AttrValue::Int(0))], &[&m, &m]);
        assert_eq!(c.shape, [4, 3]);
        let s = i64v(&[], &[5]);
        let axes = i64v(&[2], &[0, -1]);
        let u = ok("Unsqueeze", vec![], &[&s, &axes]);
        assert_eq!(u, i64v(&[1, 1], &[5]));
        // Opset 11: axes as an attribute.
        let u11 = run(
            "Unsqueeze",
            11,
            vec![("axes", AttrValue::Ints(vec![1]))],
            &[Some(&m)],
        )
        .unwrap();
        assert_eq!(u11.shape, [2, 1, 3]);
        assert_eq!(
            run(
                "Squeeze",
                11,
                vec![("axes", AttrValue::Ints(vec![1]))],
                &[Some(&u11)]
            )
            .unwrap(),
            m
        );
        assert_eq!(run("Squeeze", 13, vec![], &[Some(&u), None]).unwrap(), s);
        let one = i64v(&[1], &[0]);
        assert!(fails(run("Squeeze", 13, vec![], &[Some(&m), Some(&one)])).contains("not 1"));
    }

    #[test]
    fn reshape_expand_cast_constant_of_shape_range() {
        let m = i64v(&[2, 3], &[1, 2, 3, 4, 5, 6]);
        let r = ok("Reshape", vec![], &[&m, &i64v(&[2], &[0, -1])]);
        assert_eq!(r.shape, [2, 3]);
        let r = ok("Reshape", vec![], &[&m, &i64v(&[3], &[-1, 1, 2])]);
        assert_eq!(r.shape, [3, 1, 2]);
        let r4 = run(
            "Reshape",
            4,
            vec![("shape", AttrValue::Ints(vec![6]))],
            &[Some(&m)],
        )
        .unwrap();
        assert_eq!(r4.shape, [6]);
        let bad = i64v(&[1], &[4]);
        assert!(fails(run("Reshape", 13, vec![], &[Some(&m), Some(&bad)])).contains("do not fit"));
        let e = ok(
            "Expand",
            vec![],
            &[&i64v(&[3, 1], &[1, 2, 3]), &i64v(&[2], &[1, 2])],
        );
        assert_eq!(e, i64v(&[3, 2], &[1, 1, 2, 2, 3, 3]));
        let f = f32v(&[3], &[1.7, -1.7, 0.0]);
        let to = |c: i32| vec![("to", AttrValue::Int(c as i64))];
        assert_eq!(ok("Cast", to(7), &[&f]), i64v(&[3], &[1, -1, 0]));
        assert_eq!(
            ok("Cast", to(9), &[&f]).data,
            Data::Bool(vec![true, true, false])
        );
        assert_eq!(
            ok("Cast", to(1), &[&m]).data,
            Data::F32(vec![1., 2., 3., 4., 5., 6.])
        );
        assert!(matches!(
            run("Cast", 13, to(10), &[Some(&f)]),
            Err(Skip::Unsupported)
        ));
        let c = ok("ConstantOfShape", vec![], &[&i64v(&[2], &[2, 1])]);
        assert_eq!(c, f32v(&[2, 1], &[0.0, 0.0]));
        let seven = TensorData::new(
            DType::I64,
            vec![1],
            Bytes::from(7i64.to_le_bytes().to_vec()),
        )
        .unwrap();
        let c = ok(
            "ConstantOfShape",
            vec![("value", AttrValue::Tensor(seven))],
            &[&i64v(&[1], &[3])],
        );
        assert_eq!(c, i64v(&[3], &[7, 7, 7]));
        let r = ok(
            "Range",
            vec![],
            &[&i64v(&[], &[10]), &i64v(&[], &[1]), &i64v(&[], &[-3])],
        );
        assert_eq!(r, i64v(&[3], &[10, 7, 4]));
        let r = ok(
            "Range",
            vec![],
            &[&i64v(&[], &[0]), &i64v(&[], &[-1]), &i64v(&[], &[1])],
        );
        assert_eq!(r, i64v(&[0], &[]));
        let r = ok(
            "Range",
            vec![],
            &[&f32v(&[], &[0.0]), &f32v(&[], &[1.0]), &f32v(&[], &[0.25])],
        );
        assert_eq!(r, f32v(&[4], &[0.0, 0.25, 0.5, 0.75]));
        let z = i64v(&[], &[0]);
        assert!(fails(run("Range", 13, vec![], &[Some(&z), Some(&z), Some(&z)])).contains("zero"));
        // Results over the limit are refused before they are allocated.
        let huge = i64v(&[], &[i64::MAX]);
        let one = i64v(&[], &[1]);
        assert!(matches!(
            run("Range", 13, vec![], &[Some(&z), Some(&huge), Some(&one)]),
            Err(Skip::TooBig(_))
        ));
        let big = i64v(&[3], &[0, 1 << 40, 1 << 40]);
        assert!(matches!(
            run("ConstantOfShape", 13, vec![], &[Some(&big)]),
            Err(Skip::TooBig(_))
        ));
        let wide = i64v(&[2], &[1 << 20, 1 << 20]);
        assert!(matches!(
            run("Expand", 13, vec![], &[Some(&one), Some(&wide)]),
            Err(Skip::TooBig(_))
        ));
    }

    #[test]
    fn folded_values_have_a_total_limit() {
        use crate::frontend::onnx::model::{Graph, Model, Weight};
        let shape = TensorData::new(
            DType::I64,
            vec![1],
            Bytes::from((MAX_FOLD_ELEMENTS as i64).to_le_bytes().to_vec()),
        )
        .unwrap();
        let per_node = MAX_FOLD_TOTAL / MAX_FOLD_ELEMENTS;
        let nodes = (0..per_node + 2)
            .map(|k| Node {
                index: k,
                name: format!("c{k}"),
                op_type: "ConstantOfShape".into(),
                inputs: vec!["shape".into()],
                outputs: vec![format!("o{k}")],
                attributes: vec![],
            })
            .collect();
        let model = Model {
            file: "m.onnx".into(),
            ir_version: 8,
            producer: String::new(),
            opset: 13,
            graph: Graph {
                weights: vec![Weight {
                    name: "shape".into(),
                    data: shape,
                    constant_node: None,
                }],
                nodes,
                ..Graph::default()
            },
            warnings: vec![],
        };
        let f = fold(&model, &DeclaredShapes::default()).unwrap();
        assert_eq!(f.folded.len(), per_node);
        let warned: Vec<_> = f.warnings.iter().map(|d| d.code).collect();
        assert_eq!(warned, [W3054, W3054]);
    }

    #[test]
    fn transpose_mod_and_rounding() {
        let m = i64v(&[2, 3], &[1, 2, 3, 4, 5, 6]);
        let t = ok("Transpose", vec![], &[&m]);
        assert_eq!(t, i64v(&[3, 2], &[1, 4, 2, 5, 3, 6]));
        let c = i64v(&[2, 1, 3], &[0, 1, 2, 3, 4, 5]);
        let perm = AttrValue::Ints(vec![2, 0, 1]);
        let t = ok("Transpose", vec![("perm", perm)], &[&c]);
        assert_eq!(t, i64v(&[3, 2, 1], &[0, 3, 1, 4, 2, 5]));
        // Empty, with extents whose product would overflow the strides.
        let big = 1 << 20;
        let e = ok("Transpose", vec![], &[&i64v(&[0, big, big, big, big], &[])]);
        assert_eq!(e.shape, [big, big, big, big, 0]);
        for bad in [vec![0, 0], vec![0], vec![0, 2], vec![-1, 0]] {
            let r = run(
                "Transpose",
                13,
                vec![("perm", AttrValue::Ints(bad))],
                &[Some(&m)],
            );
            assert!(fails(r).contains("perm"));
        }
        // Integers: the divisor's sign by default, the dividend's with `fmod`.
        let p = i64v(&[4], &[7, -7, 7, -7]);
        let q = i64v(&[4], &[3, 3, -3, -3]);
        assert_eq!(ok("Mod", vec![], &[&p, &q]), i64v(&[4], &[1, 2, -2, -1]));
        let fmod = || vec![("fmod", AttrValue::Int(1))];
        assert_eq!(ok("Mod", fmod(), &[&p, &q]), i64v(&[4], &[1, -1, 1, -1]));
        let zero = i64v(&[], &[0]);
        assert!(fails(run("Mod", 13, vec![], &[Some(&p), Some(&zero)])).contains("by zero"));
        let x = f32v(&[2], &[-7.5, 7.5]);
        let y = f32v(&[], &[2.0]);
        assert_eq!(ok("Mod", fmod(), &[&x, &y]), f32v(&[2], &[-1.5, 1.5]));
        assert_eq!(ok("Floor", vec![], &[&x]), f32v(&[2], &[-8.0, 7.0]));
        assert_eq!(ok("Ceil", vec![], &[&x]), f32v(&[2], &[-7.0, 8.0]));
        assert_eq!(ok("Abs", vec![], &[&p]), i64v(&[4], &[7, 7, 7, 7]));
    }

    #[test]
    fn scatter_nd_replaces_slices() {
        let data = f32v(&[2, 3], &[0.0; 6]);
        // Element (1, 2), then row 0, then element (0, 1) again: later writes win.
        let one = ok(
            "ScatterND",
            vec![],
            &[&data, &i64v(&[1, 2], &[1, -1]), &f32v(&[1], &[5.0])],
        );
        assert_eq!(one, f32v(&[2, 3], &[0.0, 0.0, 0.0, 0.0, 0.0, 5.0]));
        let rows = ok(
            "ScatterND",
            vec![],
            &[&one, &i64v(&[1, 1], &[0]), &f32v(&[1, 3], &[1.0, 2.0, 3.0])],
        );
        assert_eq!(rows, f32v(&[2, 3], &[1.0, 2.0, 3.0, 0.0, 0.0, 5.0]));
        let twice = ok(
            "ScatterND",
            vec![],
            &[
                &rows,
                &i64v(&[2, 2], &[0, 1, 0, 1]),
                &f32v(&[2], &[7.0, 8.0]),
            ],
        );
        assert_eq!(twice, f32v(&[2, 3], &[1.0, 8.0, 3.0, 0.0, 0.0, 5.0]));
        let far = run(
            "ScatterND",
            13,
            vec![],
            &[
                Some(&data),
                Some(&i64v(&[1, 1], &[2])),
                Some(&f32v(&[1, 3], &[0.0; 3])),
            ],
        );
        assert!(fails(far).contains("out of range"));
        let shape = run(
            "ScatterND",
            13,
            vec![],
            &[
                Some(&data),
                Some(&i64v(&[1, 1], &[0])),
                Some(&f32v(&[1], &[0.0])),
            ],
        );
        assert!(fails(shape).contains("updates of shape"));
        let add = run(
            "ScatterND",
            16,
            vec![("reduction", AttrValue::String("add".into()))],
            &[
                Some(&data),
                Some(&i64v(&[1, 1], &[0])),
                Some(&f32v(&[1, 3], &[0.0; 3])),
            ],
        );
        assert!(matches!(add, Err(Skip::Unsupported)));
    }

    #[test]
    fn slice_as_onnx_clamps_it() {
        let m = i64v(&[2, 4], &[0, 1, 2, 3, 4, 5, 6, 7]);
        let s = |starts: &[i64], ends: &[i64], axes: &[i64], steps: &[i64]| {
            let (a, b, c, d) = (
                i64v(&[starts.len()], starts),
                i64v(&[ends.len()], ends),
                i64v(&[axes.len()], axes),
                i64v(&[steps.len()], steps),
            );
            run(
                "Slice",
                13,
                vec![],
                &[Some(&m), Some(&a), Some(&b), Some(&c), Some(&d)],
            )
        };
        assert_eq!(
            s(&[1], &[i64::MAX], &[1], &[1]).unwrap(),
            i64v(&[2, 3], &[1, 2, 3, 5, 6, 7])
        );
        assert_eq!(
            s(&[-1], &[i64::MIN], &[1], &[-1]).unwrap(),
            i64v(&[2, 4], &[3, 2, 1, 0, 7, 6, 5, 4])
        );
        assert_eq!(
            s(&[0, 0], &[1, 4], &[0, 1], &[1, 2]).unwrap(),
            i64v(&[1, 2], &[0, 2])
        );
        assert_eq!(s(&[3], &[1], &[1], &[1]).unwrap().shape, [2, 0]);
        assert!(fails(s(&[0], &[1], &[1], &[0])).contains("zero"));
        assert!(fails(s(&[0, 0], &[1, 1], &[1, 1], &[1, 1])).contains("repeated"));
        // Opset 1: attributes, no steps.
        let v1 = run(
            "Slice",
            9,
            vec![
                ("starts", AttrValue::Ints(vec![1])),
                ("ends", AttrValue::Ints(vec![2])),
                ("axes", AttrValue::Ints(vec![0])),
            ],
            &[Some(&m)],
        )
        .unwrap();
        assert_eq!(v1, i64v(&[1, 4], &[4, 5, 6, 7]));
        // Optional axes and steps omitted.
        let (a, b) = (i64v(&[1], &[1]), i64v(&[1], &[2]));
        let v = run(
            "Slice",
            13,
            vec![],
            &[Some(&m), Some(&a), Some(&b), None, None],
        )
        .unwrap();
        assert_eq!(v, i64v(&[1, 4], &[4, 5, 6, 7]));
    }

    /// A value with no elements whose other dimensions are as large as allowed: the per-axis
    /// work on it must stay bounded, and nothing may overflow.
    fn empty(shape: &[usize]) -> Value {
        i64v(shape, &[])
    }

    fn too_high(r: R<Value>) -> usize {
        match r {
            Err(Skip::TooHigh(r)) => r,
            other => panic!("expected a refused rank, got {other:?}"),
        }
    }

    const M: usize = MAX_FOLD_ELEMENTS;

    #[test]
    fn ranks_are_limited_everywhere() {
        let t = |shape: Vec<u64>| TensorData::new(DType::I64, shape, Bytes::new()).unwrap();
        // A zero dimension makes the count 0 whatever the rest: the rank must still be refused.
        let mut dims = vec![M as u64; 1000];
        dims[0] = 0;
        assert!(Value::from_tensor(&t(dims)).is_none());
        let mut dims = vec![M as u64; MAX_FOLD_RANK];
        dims[0] = 0;
        assert_eq!(
            Value::from_tensor(&t(dims)).unwrap().shape.len(),
            MAX_FOLD_RANK
        );
        assert!(count(&vec![1; MAX_FOLD_RANK + 1]).is_err());
        let n = node("Shape", 1, vec![]);
        assert_eq!(too_high(eval_shape(&n, 13, &vec![1; 65])), 65);
        let n = node("Size", 1, vec![]);
        assert_eq!(too_high(eval_shape(&n, 13, &vec![0; 1 << 20])), 1 << 20);
        // ConstantOfShape and Expand from a long shape.
        let mut long = vec![M as i64; 1000];
        long[0] = 0;
        let long = i64v(&[1000], &long);
        assert_eq!(
            too_high(run("ConstantOfShape", 13, vec![], &[Some(&long)])),
            1000
        );
        let one = i64v(&[], &[1]);
        assert_eq!(
            too_high(run("Expand", 13, vec![], &[Some(&one), Some(&long)])),
            1000
        );
        // Reshape to a long shape of ones.
        let ones = i64v(&[M], &vec![1; M]);
        assert_eq!(
            too_high(run("Reshape", 13, vec![], &[Some(&one), Some(&ones)])),
            M
        );
        // Unsqueeze with 2^20 axes (a Range as the axes): refused before any per-axis work.
        let axes = ok(
            "Range",
            vec![],
            &[&i64v(&[], &[0]), &i64v(&[], &[M as i64]), &one],
        );
        let t0 = std::time::Instant::now();
        assert_eq!(
            too_high(run("Unsqueeze", 13, vec![], &[Some(&one), Some(&axes)])),
            M
        );
        assert!(t0.elapsed().as_secs() < 5);
        let axes65 = i64v(&[65], &(0..65).collect::<Vec<_>>());
        assert_eq!(
            too_high(run("Unsqueeze", 13, vec![], &[Some(&one), Some(&axes65)])),
            65
        );
        let axes64 = i64v(&[64], &(0..64).collect::<Vec<_>>());
        let u = ok("Unsqueeze", vec![], &[&one, &axes64]);
        assert_eq!(u.shape, vec![1; 64]);
        // Squeeze of the rank-64 value with 2^20 (repeated) axes.
        let zeros = i64v(&[M], &vec![0; M]);
        let sq = ok("Squeeze", vec![], &[&u, &zeros]);
        assert_eq!(sq.shape, vec![1; 63]);
        let axes63 = i64v(&[63], &(0..63).collect::<Vec<_>>());
        assert_eq!(ok("Squeeze", vec![], &[&sq, &axes63]).shape.len(), 0);
        // Gather whose result would pass the rank limit.
        let mut d = vec![1; 64];
        d[0] = 2;
        let data = i64v(&d, &[1, 2]);
        let idx = i64v(&[1; 2], &[0]);
        assert_eq!(
            too_high(run("Gather", 13, vec![], &[Some(&data), Some(&idx)])),
            65
        );
    }

    #[test]
    fn empty_values_with_huge_extents_stay_bounded() {
        // [0, 2^20, 2^20, 2^20, 2^20]: the strides overflow usize, the count is 0.
        let x = empty(&[0, M, M, M, M]);
        let t0 = std::time::Instant::now();
        assert_eq!(ok("Add", vec![], &[&x, &x]), x);
        assert_eq!(ok("Mul", vec![], &[&x, &i64v(&[1], &[3])]), x);
        let c = Value {
            shape: vec![0, M, M, M, M],
            data: Data::Bool(vec![]),
        };
        assert_eq!(ok("Where", vec![], &[&c, &x, &x]), x);
        let shape = i64v(&[5], &[0, M as i64, M as i64, M as i64, M as i64]);
        assert_eq!(ok("Expand", vec![], &[&x, &shape]), x);
        assert_eq!(
            ok("ConstantOfShape", vec![], &[&shape]).shape,
            vec![0, M, M, M, M]
        );
        // Slice: only the sliced axes are looked at, and an empty input returns at once.
        let (s0, e1, a1) = (i64v(&[1], &[0]), i64v(&[1], &[1]), i64v(&[1], &[1]));
        let sl = |a: &Value, axes: Option<&Value>| {
            run(
                "Slice",
                13,
                vec![],
                &[Some(a), Some(&s0), Some(&e1), axes, None],
            )
            .unwrap()
        };
        assert_eq!(sl(&x, None), x);
        assert_eq!(sl(&x, Some(&a1)).shape, [0, 1, M, M, M]);
        let mut wide = vec![M; MAX_FOLD_RANK];
        wide[MAX_FOLD_RANK - 1] = 0;
        let w = empty(&wide);
        let mut want = wide.clone();
        want[0] = 1;
        assert_eq!(sl(&w, None).shape, want);
        assert_eq!(ok("Add", vec![], &[&w, &w]), w);
        // A negative-step slice of an empty axis keeps nothing.
        let v = run(
            "Slice",
            13,
            vec![],
            &[
                Some(&x),
                Some(&i64v(&[1], &[-1])),
                Some(&i64v(&[1], &[i64::MIN])),
                Some(&i64v(&[1], &[0])),
                Some(&i64v(&[1], &[-1])),
            ],
        )
        .unwrap();
        assert_eq!(v, x);
        assert!(t0.elapsed().as_secs() < 5, "took {:?}", t0.elapsed());
    }

    #[test]
    fn only_the_weights_a_folded_node_consumes_are_read() {
        use crate::frontend::onnx::model::{Graph, Model, Weight};
        let w = |name: &str, dtype: DType, shape: Vec<u64>, bytes: Vec<u8>| Weight {
            name: name.into(),
            data: TensorData::new(dtype, shape, Bytes::from(bytes)).unwrap(),
            constant_node: None,
        };
        let n = |k: usize, op: &str, inputs: &[&str], out: &str| Node {
            index: k,
            name: format!("n{k}"),
            op_type: op.into(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![out.into()],
            attributes: vec![],
        };
        let model = Model {
            file: "m.onnx".into(),
            ir_version: 8,
            producer: String::new(),
            opset: 13,
            graph: Graph {
                weights: vec![
                    w(
                        "conv_w",
                        DType::F32,
                        vec![16, 3, 3, 3],
                        vec![0; 16 * 27 * 4],
                    ),
                    w("bias", DType::F32, vec![16], vec![0; 64]),
                    w("two", DType::I64, vec![1], 2i64.to_le_bytes().to_vec()),
                    w("unused", DType::I64, vec![1], 5i64.to_le_bytes().to_vec()),
                ],
                nodes: vec![
                    // `x` is unknown: the node does not fold, its weights are not read.
                    n(0, "Add", &["x", "bias"], "y"),
                    n(1, "Mul", &["x", "conv_w"], "z"),
                    n(2, "Add", &["two", "two"], "four"),
                ],
                ..Graph::default()
            },
            warnings: vec![],
        };
        let f = fold(&model, &DeclaredShapes::default()).unwrap();
        assert_eq!(f.weights_read, ["two"]);
        assert_eq!(f.folded, [2]);
        assert_eq!(f.values["four"].to_i64().unwrap(), [4]);
    }

    #[test]
    fn rank_limits_in_a_whole_model_warn_and_leave_nodes() {
        use crate::frontend::onnx::model::{Graph, Model, Weight};
        let mut dims = vec![M as i64; 1000];
        dims[0] = 0;
        let bytes: Vec<u8> = dims.iter().flat_map(|d| d.to_le_bytes()).collect();
        let mut big = vec![M as u64; 1000];
        big[0] = 0;
        let model = Model {
            file: "m.onnx".into(),
            ir_version: 8,
            producer: String::new(),
            opset: 13,
            graph: Graph {
                weights: vec![
                    Weight {
                        name: "dims".into(),
                        data: TensorData::new(DType::I64, vec![1000], Bytes::from(bytes)).unwrap(),
                        constant_node: None,
                    },
                    Weight {
                        name: "big".into(),
                        data: TensorData::new(DType::I64, big, Bytes::new()).unwrap(),
                        constant_node: None,
                    },
                    Weight {
                        name: "se".into(),
                        data: TensorData::new(DType::I64, vec![1], Bytes::from(vec![0u8; 8]))
                            .unwrap(),
                        constant_node: None,
                    },
                ],
                nodes: vec![
                    Node {
                        index: 0,
                        name: "c".into(),
                        op_type: "ConstantOfShape".into(),
                        inputs: vec!["dims".into()],
                        outputs: vec!["c".into()],
                        attributes: vec![],
                    },
                    Node {
                        index: 1,
                        name: "s".into(),
                        op_type: "Slice".into(),
                        inputs: vec!["big".into(), "se".into(), "se".into()],
                        outputs: vec!["s".into()],
                        attributes: vec![],
                    },
                    Node {
                        index: 2,
                        name: "sh".into(),
                        op_type: "Shape".into(),
                        inputs: vec!["big".into()],
                        outputs: vec!["sh".into()],
                        attributes: vec![],
                    },
                ],
                ..Graph::default()
            },
            warnings: vec![],
        };
        let t0 = std::time::Instant::now();
        let f = fold(&model, &DeclaredShapes::default()).unwrap();
        assert!(t0.elapsed().as_secs() < 5);
        assert!(f.folded.is_empty());
        assert!(!f.weights_read.contains(&"big".to_string()));
        let warned: Vec<_> = f.warnings.iter().map(|d| d.code).collect();
        assert_eq!(warned, [W3054, W3054]);
        assert!(
            f.warnings[0].message.contains("rank 1000"),
            "{:?}",
            f.warnings
        );
    }
}
