//! A unit (a FuseOps group, a `Primitive=1` function) as a graph of primitive tensor nodes: the
//! form the loop-nest builder works on.
//!
//! Every operator of the reference interpreter maps to one or more nodes:
//!
//! * elementwise and broadcasting operators (`Un`, `Bin`, `Cmp`, `Clip`, `LeakyRelu`, `Cast`,
//!   `Where`), NumPy broadcasting of any operand shapes;
//! * injective operators as index maps (`Reshape`, `Transpose`, `Broadcast`, `Slice`, `Concat`,
//!   `Take`, `Pad`, `Layout`); `copy`, `on_device` and `device_copy` are the identity;
//! * reductions (`Reduce`: sum, mean, max, min over any axes);
//! * the anchors (`Dense`, `BatchMatmul`, `Conv`, `Pool`).
//!
//! Composite operators are decomposed the way TVM's `SimplifyInference` and its compute
//! definitions do, with the reference interpreter's order of operations: `nn.batch_norm` into a
//! per-channel `(x - mean) / sqrt(var + eps) * gamma + beta`, `nn.layer_norm` into two mean
//! reductions and elementwise operators, softmax into a max, an exponential and a sum,
//! `nn.bias_add` into a broadcast add, global pooling into a mean or max reduction over the
//! spatial axes. Convolutions are made canonical (`NCHW` data, `OIHW` weights) by layout nodes
//! around them.

use crate::ir::{AttrValue, Attrs, Callee, Constant, DType, DTypeCode, Expr, ExprId, Module, Type};
use crate::ops::geom::{self, AxisError, PoolReduce, PoolWindow};
use crate::ops::layout::Layout;
use crate::ops::{Op, OpDef};
use crate::runtime::exec::kernel::{ConstantSource, Unit, Unsupported};
use crate::runtime::exec::tensor::{is_f32_family, is_i64_family, Shape, Tensor};
use crate::source::Span;
use std::collections::HashMap;
use std::sync::Arc;

/// A node index.
pub type NodeId = usize;

/// How values of a dtype are held while computing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// `float` (`float32`, `float16`, `bfloat16`).
    F,
    /// `int64_t` (signed and unsigned integers up to 32 bits, `int64`, `bool`).
    I,
    /// `double` (`float64`: moved, cast, never computed on).
    D,
    /// `uint64_t` (`uint64`: moved and cast only).
    U,
}

/// The class of a storable dtype.
pub fn class(d: DType) -> Class {
    if is_f32_family(d) {
        Class::F
    } else if d == DType::F64 {
        Class::D
    } else if d.code == DTypeCode::UInt && d.bits == 64 {
        Class::U
    } else {
        Class::I
    }
}

/// Unary elementwise operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Un {
    Sqrt,
    Rsqrt,
    Erf,
    Exp,
    Log,
    Sigmoid,
    Tanh,
    Floor,
    Ceil,
    Round,
    Abs,
    Neg,
    Relu,
}

/// Binary arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
}

/// Comparisons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cmp {
    Lt,
    Gt,
    Eq,
    Le,
    Ge,
    Ne,
}

/// Reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Red {
    Sum,
    Mean,
    Max,
    Min,
}

/// Out-of-range indices of `take`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TakeMode {
    Clip,
    Wrap,
    Fast,
}

/// Modes of `nn.pad`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PadMode {
    Constant,
    Edge,
    Reflect,
}

/// A canonical (`NCHW` / `OIHW`) 2-d convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvGeom {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub kh: usize,
    pub kw: usize,
    pub oh: usize,
    pub ow: usize,
    pub groups: usize,
    pub stride: (usize, usize),
    pub dilation: (usize, usize),
    /// Top and left padding.
    pub pad: (usize, usize),
}

/// A pooling window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolWin {
    pub size: (usize, usize),
    pub stride: (usize, usize),
    pub dilation: (usize, usize),
    /// Top, left, bottom, right.
    pub pad: [usize; 4],
    pub max: bool,
    pub count_include_pad: bool,
    /// Axis positions of `H` and `W`.
    pub hpos: usize,
    pub wpos: usize,
}

/// A literal baked into the code.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Lit {
    F(f64),
    I(i64),
}

/// What a node computes.
#[derive(Clone, Debug, PartialEq)]
pub enum NOp {
    /// Kernel argument `i`.
    Arg(usize),
    /// A literal scalar (any shape of one element).
    Lit(Lit),
    Un(Un, NodeId),
    Bin(Bin, NodeId, NodeId),
    Cmp(Cmp, NodeId, NodeId),
    Clip(NodeId, f64, f64),
    LeakyRelu(NodeId, f64),
    Cast(NodeId),
    Where(NodeId, NodeId, NodeId),
    /// Same elements, another shape.
    Reshape(NodeId),
    /// Output axis `k` is input axis `perm[k]`.
    Transpose(NodeId, Vec<usize>),
    /// NumPy broadcast to the node's shape.
    Broadcast(NodeId),
    /// The input from `begin` along `axis`.
    Slice(NodeId, usize, usize),
    /// `strided_slice`: output index `i` of axis `k` reads input index `start + step·i`
    /// (`(start, step)` per axis; a negative step walks backwards).
    Strided(NodeId, Vec<(i64, i64)>),
    Concat(Vec<NodeId>, usize),
    Take {
        data: NodeId,
        idx: NodeId,
        axis: usize,
        batch_dims: usize,
        mode: TakeMode,
    },
    Pad {
        data: NodeId,
        widths: Vec<(usize, usize)>,
        mode: PadMode,
        value: NodeId,
    },
    /// A layout change (`from` and `to` layout strings).
    Layout(NodeId, String, String),
    Reduce {
        arg: NodeId,
        kind: Red,
        /// Which input axes are reduced.
        reduced: Vec<bool>,
        keepdims: bool,
    },
    /// `data [.., K] · weight [N, K]ᵀ`.
    Dense(NodeId, NodeId),
    BatchMatmul {
        x: NodeId,
        y: NodeId,
        ta: bool,
        tb: bool,
    },
    Conv(NodeId, NodeId, ConvGeom),
    Pool(NodeId, PoolWin),
}

impl NOp {
    /// The operand nodes.
    pub fn operands(&self) -> Vec<NodeId> {
        match self {
            NOp::Arg(_) | NOp::Lit(_) => Vec::new(),
            NOp::Un(_, a)
            | NOp::Clip(a, _, _)
            | NOp::LeakyRelu(a, _)
            | NOp::Cast(a)
            | NOp::Reshape(a)
            | NOp::Transpose(a, _)
            | NOp::Broadcast(a)
            | NOp::Slice(a, _, _)
            | NOp::Strided(a, _)
            | NOp::Layout(a, _, _)
            | NOp::Reduce { arg: a, .. }
            | NOp::Pool(a, _) => vec![*a],
            NOp::Bin(_, a, b) | NOp::Cmp(_, a, b) | NOp::Dense(a, b) | NOp::Conv(a, b, _) => {
                vec![*a, *b]
            }
            NOp::BatchMatmul { x, y, .. } => vec![*x, *y],
            NOp::Where(a, b, c) => vec![*a, *b, *c],
            NOp::Concat(xs, _) => xs.clone(),
            NOp::Take { data, idx, .. } => vec![*data, *idx],
            NOp::Pad { data, value, .. } => vec![*data, *value],
        }
    }

    /// Elementwise (with broadcasting): the value at an index reads its operands at the
    /// broadcast index.
    pub fn is_map(&self) -> bool {
        matches!(
            self,
            NOp::Un(..)
                | NOp::Bin(..)
                | NOp::Cmp(..)
                | NOp::Clip(..)
                | NOp::LeakyRelu(..)
                | NOp::Cast(..)
                | NOp::Where(..)
        )
    }

    /// Computes into a buffer of its own with a loop nest of its own kind.
    pub fn is_anchor(&self) -> bool {
        matches!(
            self,
            NOp::Reduce { .. }
                | NOp::Dense(..)
                | NOp::BatchMatmul { .. }
                | NOp::Conv(..)
                | NOp::Pool(..)
        )
    }
}

/// One node: what it computes, its shape and dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: NOp,
    pub dims: Vec<usize>,
    pub dtype: DType,
}

impl Node {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }
}

/// A kernel argument.
#[derive(Clone, Debug)]
pub struct ArgInfo {
    pub shape: Shape,
    /// A constant of a function unit (passed by the kernel itself).
    pub inner: Option<Arc<Tensor>>,
}

/// A unit as nodes. Nodes are in topological order (operands first).
#[derive(Clone, Debug, Default)]
pub struct KGraph {
    pub nodes: Vec<Node>,
    /// The kernel arguments: the unit's flattened inputs, then the constants written inside a
    /// function unit.
    pub args: Vec<ArgInfo>,
    /// The number of the unit's own (flattened) inputs.
    pub n_inputs: usize,
    /// The node of each flattened output.
    pub outputs: Vec<NodeId>,
    /// Operator names, in order, for messages.
    pub ops: Vec<&'static str>,
}

/// A value of the unit: a tensor node or a tuple.
#[derive(Clone, Debug)]
enum Val {
    T(NodeId),
    Tuple(Vec<Val>),
}

impl Val {
    fn flatten(&self, out: &mut Vec<NodeId>) {
        match self {
            Val::T(n) => out.push(*n),
            Val::Tuple(vs) => vs.iter().for_each(|v| v.flatten(out)),
        }
    }
}

/// Largest tensor constant baked into the code as literals (elements).
const MAX_LITERAL: usize = 1;

struct Builder<'a> {
    m: &'a Module,
    consts: &'a dyn ConstantSource,
    g: KGraph,
    vals: HashMap<ExprId, Val>,
    lets: HashMap<crate::ir::VarId, ExprId>,
    /// Literal node per (bits, dtype), reused.
    lits: Vec<(Lit, DType, Vec<usize>, NodeId)>,
}

fn unsupported(msg: impl Into<String>, span: Span) -> Unsupported {
    Unsupported::op(msg, Some(span))
}

/// Builds the graph of a unit.
pub fn build(unit: &Unit<'_>, consts: &dyn ConstantSource) -> Result<KGraph, Unsupported> {
    let m = unit.module();
    let lets = m
        .exprs
        .iter()
        .filter_map(|e| match e {
            Expr::Let { var, value, .. } => Some((*var, *value)),
            _ => None,
        })
        .collect();
    let mut b = Builder {
        m,
        consts,
        g: KGraph::default(),
        vals: HashMap::new(),
        lets,
        lits: Vec::new(),
    };
    // Inputs.
    for e in unit.input_exprs() {
        let ty = m
            .ty(e)
            .cloned()
            .ok_or_else(|| Unsupported::construct("an untyped input", Some(m.span(e))))?;
        let v = b.input(e, &ty)?;
        b.vals.insert(e, v);
    }
    b.g.n_inputs = b.g.args.len();
    // Body.
    let mut outs = Vec::new();
    for o in unit.output_exprs() {
        let v = b.value(o)?;
        v.flatten(&mut outs);
    }
    b.g.outputs = outs;
    Ok(b.g)
}

impl Builder<'_> {
    fn push(&mut self, op: NOp, dims: Vec<usize>, dtype: DType) -> NodeId {
        self.g.nodes.push(Node { op, dims, dtype });
        self.g.nodes.len() - 1
    }

    fn shape_of_type(&self, ty: &Type, span: Span) -> Result<Vec<Shape>, Unsupported> {
        crate::runtime::exec::value::flat_shapes(ty).ok_or_else(|| {
            Unsupported::construct(
                format!("`{ty}` is not made of tensors with static shapes"),
                Some(span),
            )
        })
    }

    /// The value of a unit input: kernel arguments (literals for scalar constants).
    fn input(&mut self, e: ExprId, ty: &Type) -> Result<Val, Unsupported> {
        let shapes = self.shape_of_type(ty, self.m.span(e))?;
        let scalar_const = matches!(self.m.expr(e), Expr::Const(_))
            && shapes.len() == 1
            && shapes[0].numel() <= MAX_LITERAL;
        let mut leaves = Vec::new();
        for s in &shapes {
            let i = self.g.args.len();
            self.g.args.push(ArgInfo {
                shape: s.clone(),
                inner: None,
            });
            leaves.push(if scalar_const {
                self.literal(e, s)?
            } else {
                self.push(NOp::Arg(i), s.dims.clone(), s.dtype)
            });
        }
        Ok(rebuild(ty, &mut leaves.into_iter()))
    }

    /// A literal node for a constant of at most one element (an empty one reads as zero: no
    /// element of it is ever read).
    fn literal(&mut self, e: ExprId, s: &Shape) -> Result<NodeId, Unsupported> {
        let t = self
            .consts
            .constant(self.m, e)
            .map_err(|msg| Unsupported::construct(msg, Some(self.m.span(e))))?;
        let empty = t.numel() == 0;
        let lit = match class(s.dtype) {
            Class::F | Class::D => Lit::F(if empty { 0.0 } else { t.get_f64(0) }),
            Class::I | Class::U => Lit::I(if empty { 0 } else { t.get_i64(0) }),
        };
        Ok(self.lit_node(lit, s.dtype, s.dims.clone()))
    }

    fn lit_node(&mut self, lit: Lit, dtype: DType, dims: Vec<usize>) -> NodeId {
        if let Some(&(_, _, _, n)) = self
            .lits
            .iter()
            .find(|(l, d, s, _)| lit_eq(*l, lit) && *d == dtype && *s == dims)
        {
            return n;
        }
        let n = self.push(NOp::Lit(lit), dims.clone(), dtype);
        self.lits.push((lit, dtype, dims, n));
        n
    }

    /// The value of an expression inside the unit (an explicit stack: operands first).
    fn value(&mut self, root: ExprId) -> Result<Val, Unsupported> {
        let m = self.m;
        let mut stack = vec![(root, false)];
        while let Some((e, ready)) = stack.pop() {
            if self.vals.contains_key(&e) {
                continue;
            }
            let deps = self.deps(e)?;
            if !ready {
                stack.push((e, true));
                for d in deps.into_iter().rev() {
                    if !self.vals.contains_key(&d) {
                        stack.push((d, false));
                    }
                }
                continue;
            }
            let v = self.lower(e)?;
            self.vals.insert(e, v);
            if self.g.nodes.len() > 1 << 20 {
                return Err(Unsupported::construct(
                    "the unit is too large for native code generation",
                    Some(m.span(e)),
                ));
            }
        }
        Ok(self.vals[&root].clone())
    }

    fn deps(&self, e: ExprId) -> Result<Vec<ExprId>, Unsupported> {
        let m = self.m;
        Ok(match m.expr(e) {
            Expr::Var(v) => match self.lets.get(v) {
                Some(&val) => vec![val],
                None => {
                    return Err(Unsupported::construct(
                        format!(
                            "`%{}` is not an input of the unit (a captured variable)",
                            m.var(*v).name
                        ),
                        Some(m.span(e)),
                    ))
                }
            },
            Expr::Let { body, .. } => vec![*body],
            Expr::Call {
                callee: Callee::Op(_),
                args,
                ..
            } => args.clone(),
            Expr::Call { .. } => {
                return Err(unsupported(
                    "native code generation does not compile calls of functions",
                    m.span(e),
                ))
            }
            Expr::Tuple(fs) => fs.clone(),
            Expr::Proj { tuple, .. } => vec![*tuple],
            Expr::Const(_) => Vec::new(),
            Expr::If { .. } => {
                return Err(unsupported(
                    "native code generation does not compile `if`",
                    m.span(e),
                ))
            }
            Expr::Global(_) | Expr::Func(_) | Expr::Op(_) => {
                return Err(unsupported(
                    "a function or operator used as a value",
                    m.span(e),
                ))
            }
        })
    }

    fn lower(&mut self, e: ExprId) -> Result<Val, Unsupported> {
        let m = self.m;
        let span = m.span(e);
        match m.expr(e) {
            Expr::Var(v) => Ok(self.vals[&self.lets[v]].clone()),
            Expr::Let { body, .. } => Ok(self.vals[body].clone()),
            Expr::Tuple(fs) => Ok(Val::Tuple(
                fs.iter().map(|f| self.vals[f].clone()).collect(),
            )),
            Expr::Proj { tuple, index } => match &self.vals[tuple] {
                Val::Tuple(vs) => vs
                    .get(*index as usize)
                    .cloned()
                    .ok_or_else(|| unsupported("a projection out of range", span)),
                Val::T(_) => Err(unsupported("a projection of a tensor", span)),
            },
            Expr::Const(c) => {
                let tt = c.ty();
                let s = Shape::of(&tt).ok_or_else(|| {
                    Unsupported::construct("a constant of dynamic shape", Some(span))
                })?;
                if s.numel() <= MAX_LITERAL || matches!(c, Constant::Scalar { .. }) {
                    return Ok(Val::T(self.literal(e, &s)?));
                }
                let t = self
                    .consts
                    .constant(m, e)
                    .map_err(|msg| Unsupported::construct(msg, Some(span)))?;
                let i = self.g.args.len();
                self.g.args.push(ArgInfo {
                    shape: s.clone(),
                    inner: Some(t),
                });
                Ok(Val::T(self.push(NOp::Arg(i), s.dims, s.dtype)))
            }
            Expr::Call {
                callee: Callee::Op(op),
                args,
                attrs,
            } => {
                let def = crate::ops::op(*op);
                self.g.ops.push(def.name);
                let arg_vals: Vec<Val> = args.iter().map(|a| self.vals[a].clone()).collect();
                let ty = m
                    .ty(e)
                    .cloned()
                    .ok_or_else(|| Unsupported::construct("an untyped call", Some(span)))?;
                let outs = self.shape_of_type(&ty, span)?;
                let mut cx = OpCx {
                    b: self,
                    def,
                    attrs,
                    span,
                };
                let v = cx.lower(&arg_vals, &outs)?;
                Ok(v)
            }
            _ => Err(unsupported("unsupported expression", span)),
        }
    }
}

fn lit_eq(a: Lit, b: Lit) -> bool {
    match (a, b) {
        (Lit::F(x), Lit::F(y)) => x.to_bits() == y.to_bits(),
        (Lit::I(x), Lit::I(y)) => x == y,
        _ => false,
    }
}

/// Rebuilds a value of type `ty` from flattened leaves.
fn rebuild(ty: &Type, leaves: &mut impl Iterator<Item = NodeId>) -> Val {
    match ty {
        Type::Tuple(fs) => Val::Tuple(fs.iter().map(|f| rebuild(f, leaves)).collect()),
        _ => Val::T(leaves.next().unwrap_or(0)),
    }
}

/// Lowers one operator call.
struct OpCx<'b, 'a> {
    b: &'b mut Builder<'a>,
    def: &'static OpDef,
    attrs: &'b Attrs,
    span: Span,
}

impl OpCx<'_, '_> {
    fn err(&self, msg: impl Into<String>) -> Unsupported {
        unsupported(msg, self.span)
    }

    fn attr(&self, name: &str) -> &AttrValue {
        static NONE: AttrValue = AttrValue::None;
        self.attrs.get(self.def.attrs, name).unwrap_or(&NONE)
    }

    fn int(&self, name: &str) -> Result<i64, Unsupported> {
        self.attr(name).as_int().ok_or_else(|| {
            self.err(format!(
                "attribute `{name}` of `{}` must be an integer",
                self.def.name
            ))
        })
    }

    fn ints(&self, name: &str) -> Result<Vec<i64>, Unsupported> {
        self.attr(name).as_ints().ok_or_else(|| {
            self.err(format!(
                "attribute `{name}` of `{}` must be integers",
                self.def.name
            ))
        })
    }

    fn float(&self, name: &str) -> Result<f64, Unsupported> {
        self.attr(name).as_f64().ok_or_else(|| {
            self.err(format!(
                "attribute `{name}` of `{}` must be a number",
                self.def.name
            ))
        })
    }

    fn bool(&self, name: &str) -> Result<bool, Unsupported> {
        self.attr(name).as_bool().ok_or_else(|| {
            self.err(format!(
                "attribute `{name}` of `{}` must be a boolean",
                self.def.name
            ))
        })
    }

    fn str(&self, name: &str) -> Result<String, Unsupported> {
        self.attr(name).as_str().map(str::to_string).ok_or_else(|| {
            self.err(format!(
                "attribute `{name}` of `{}` must be a string",
                self.def.name
            ))
        })
    }

    fn axis(&self, a: i64, rank: usize) -> Result<usize, Unsupported> {
        let r = rank as i64;
        if a < -r || a >= r {
            return Err(self.err(format!(
                "axis {a} of `{}` is out of range for rank {rank}",
                self.def.name
            )));
        }
        Ok(if a < 0 { a + r } else { a } as usize)
    }

    fn node(&self, n: NodeId) -> &Node {
        &self.b.g.nodes[n]
    }

    fn push(&mut self, op: NOp, dims: Vec<usize>, dtype: DType) -> NodeId {
        self.b.push(op, dims, dtype)
    }

    fn tensor(&self, v: &Val) -> Result<NodeId, Unsupported> {
        match v {
            Val::T(n) => Ok(*n),
            Val::Tuple(_) => Err(self.err(format!(
                "`{}` takes a tensor where a tuple is given",
                self.def.name
            ))),
        }
    }

    fn arg(&self, args: &[Val], i: usize) -> Result<NodeId, Unsupported> {
        let v = args
            .get(i)
            .ok_or_else(|| self.err(format!("`{}` lacks argument {i}", self.def.name)))?;
        self.tensor(v)
    }

    fn require_float(&self, ns: &[NodeId]) -> Result<(), Unsupported> {
        for &n in ns {
            let d = self.node(n).dtype;
            if !is_f32_family(d) {
                return Err(self.err(format!(
                    "`{}` on `{d}` tensors is not supported by native code generation",
                    self.def.name
                )));
            }
        }
        Ok(())
    }

    /// A view of `n` with its extent `ext` along `axis` of a rank-`rank` tensor: `[ext, 1, ...]`
    /// for broadcasting against axis `axis`.
    fn along(&mut self, n: NodeId, axis: usize, rank: usize) -> NodeId {
        let ext = self.node(n).numel();
        let mut dims = vec![ext];
        dims.extend(std::iter::repeat_n(1, rank - axis - 1));
        let d = self.node(n).dtype;
        self.push(NOp::Reshape(n), dims, d)
    }

    /// Result `i` of the call.
    fn out(&self, outs: &[Shape], i: usize) -> Result<Shape, Unsupported> {
        outs.get(i)
            .cloned()
            .ok_or_else(|| self.err(format!("`{}` lacks a result", self.def.name)))
    }

    /// Lowers the call: one arm per operator, by family.
    fn lower(&mut self, args: &[Val], outs: &[Shape]) -> Result<Val, Unsupported> {
        let op = self.def.op;
        match op {
            // Identity operators (the argument may be a tuple).
            Op::Copy | Op::OnDevice | Op::DeviceCopy => args
                .first()
                .cloned()
                .ok_or_else(|| self.err(format!("`{}` lacks its argument", self.def.name))),
            Op::Sqrt
            | Op::Rsqrt
            | Op::Erf
            | Op::Exp
            | Op::Log
            | Op::Sigmoid
            | Op::Tanh
            | Op::Floor
            | Op::Ceil
            | Op::Round
            | Op::Abs
            | Op::Negative
            | Op::Relu
            | Op::Add
            | Op::Subtract
            | Op::Multiply
            | Op::Divide
            | Op::Power
            | Op::Maximum
            | Op::Minimum
            | Op::Less
            | Op::Greater
            | Op::Equal
            | Op::LessEqual
            | Op::GreaterEqual
            | Op::NotEqual
            | Op::Clip
            | Op::LeakyRelu
            | Op::Cast
            | Op::Where => self.elementwise(op, args, self.out(outs, 0)?),
            Op::Reshape
            | Op::ExpandDims
            | Op::Squeeze
            | Op::BroadcastTo
            | Op::Transpose
            | Op::LayoutTransform
            | Op::Concatenate
            | Op::Take
            | Op::StridedSlice
            | Op::Pad => self.injective(op, args, self.out(outs, 0)?),
            Op::Split => self.split(args, outs),
            Op::Sum | Op::Mean | Op::Max | Op::Min => self.reduce(op, args, self.out(outs, 0)?),
            Op::Softmax | Op::LogSoftmax => self.softmax(op, args, self.out(outs, 0)?),
            Op::LayerNorm => self.layer_norm(args, self.out(outs, 0)?),
            Op::BatchNorm => self.batch_norm(args, self.out(outs, 0)?),
            Op::BiasAdd => self.bias_add(args, self.out(outs, 0)?),
            Op::Dense => self.dense(args, self.out(outs, 0)?),
            Op::BatchMatmul => self.batch_matmul(args, self.out(outs, 0)?),
            Op::Conv2d => self.conv2d(args, self.out(outs, 0)?),
            Op::Conv1d => self.conv1d(args, self.out(outs, 0)?),
            Op::MaxPool2d | Op::AvgPool2d | Op::GlobalAvgPool2d | Op::GlobalMaxPool2d => {
                self.pool(args, self.out(outs, 0)?)
            }
            Op::Sin
            | Op::Cos
            | Op::Atan
            | Op::FastErf
            | Op::FastExp
            | Op::FastTanh
            | Op::ZerosLike
            | Op::OnesLike
            | Op::CastLike
            | Op::Full
            | Op::Zeros
            | Op::Ones
            | Op::Matmul
            | Op::Prelu
            | Op::FastSoftmax
            | Op::BatchFlatten
            | Op::Upsampling
            | Op::Upsampling3d
            | Op::InstanceNorm
            | Op::GroupNorm
            | Op::Dropout
            | Op::Conv3d
            | Op::Conv2dTranspose
            | Op::Conv3dTranspose
            | Op::Conv2dBackwardWeight
            | Op::MaxPool3d
            | Op::AvgPool3d
            | Op::AdaptiveAvgPool2d
            | Op::AdaptiveMaxPool2d
            | Op::Tile
            | Op::Resize1d
            | Op::Resize2d
            | Op::Stack
            | Op::Prod
            | Op::Variance
            | Op::Argmax
            | Op::Argmin
            | Op::QnnConv2d
            | Op::QnnDense
            | Op::QnnRequantize
            | Op::QnnAdd
            | Op::Custom => Err(self.err(format!(
                "native code generation does not implement `{}`",
                self.def.name
            ))),
        }
    }

    /// An error unless the class of dtype `d` is one the operator computes on.
    fn require_class(&self, d: DType, ok: bool) -> Result<(), Unsupported> {
        if ok {
            return Ok(());
        }
        Err(self.err(format!(
            "`{}` on `{d}` tensors is not supported by native code generation",
            self.def.name
        )))
    }

    /// Elementwise and broadcasting operators: one map node.
    fn elementwise(&mut self, op: Op, args: &[Val], o: Shape) -> Result<Val, Unsupported> {
        let node = if let Some(u) = unary(op) {
            let a = self.arg(args, 0)?;
            let float_only = !matches!(u, Un::Abs | Un::Neg | Un::Relu);
            let d = self.node(a).dtype;
            let ok = match class(d) {
                Class::F => true,
                Class::I => !float_only && is_i64_family(d),
                _ => false,
            };
            self.require_class(d, ok)?;
            NOp::Un(u, a)
        } else if let Some(bop) = binary(op) {
            let (a, b) = (self.arg(args, 0)?, self.arg(args, 1)?);
            let d = self.node(a).dtype;
            let ok = match class(d) {
                Class::F => true,
                Class::I => is_i64_family(d) && bop != Bin::Pow,
                _ => false,
            };
            self.require_class(d, ok)?;
            NOp::Bin(bop, a, b)
        } else if let Some(c) = compare(op) {
            let (a, b) = (self.arg(args, 0)?, self.arg(args, 1)?);
            let d = self.node(a).dtype;
            self.require_class(
                d,
                class(d) == Class::F || is_i64_family(d) || d == DType::BOOL,
            )?;
            NOp::Cmp(c, a, b)
        } else {
            match op {
                Op::Clip => {
                    let a = self.arg(args, 0)?;
                    self.require_float(&[a])?;
                    let (lo, hi) = (self.float("a_min")?, self.float("a_max")?);
                    NOp::Clip(a, lo as f32 as f64, hi as f32 as f64)
                }
                Op::LeakyRelu => {
                    let a = self.arg(args, 0)?;
                    self.require_float(&[a])?;
                    NOp::LeakyRelu(a, self.float("alpha")? as f32 as f64)
                }
                Op::Cast => NOp::Cast(self.arg(args, 0)?),
                _ => {
                    let (c, x, y) = (self.arg(args, 0)?, self.arg(args, 1)?, self.arg(args, 2)?);
                    if self.node(x).dtype != self.node(y).dtype {
                        return Err(self.err("`where` with branches of different dtypes"));
                    }
                    NOp::Where(c, x, y)
                }
            }
        };
        Ok(Val::T(self.push(node, o.dims, o.dtype)))
    }

    /// Injective operators with one result: index maps.
    fn injective(&mut self, op: Op, args: &[Val], o: Shape) -> Result<Val, Unsupported> {
        let node = match op {
            // One operand, the result's shape and dtype as inferred.
            Op::Reshape | Op::ExpandDims | Op::Squeeze => NOp::Reshape(self.arg(args, 0)?),
            Op::BroadcastTo => NOp::Broadcast(self.arg(args, 0)?),
            Op::Transpose => {
                let a = self.arg(args, 0)?;
                let r = self.node(a).dims.len();
                let axes = self.attr("axes").as_ints().unwrap_or_default();
                let perm = crate::ops::transpose_perm(&axes, r).ok_or_else(|| {
                    self.err(format!(
                        "`transpose` axes {axes:?} are not a permutation of {r} axes"
                    ))
                })?;
                NOp::Transpose(a, perm)
            }
            Op::LayoutTransform => {
                let a = self.arg(args, 0)?;
                let (from, to) = (self.str("src_layout")?, self.str("dst_layout")?);
                for l in [&from, &to] {
                    Layout::parse(l).map_err(|e| self.err(format!("invalid layout: {e}")))?;
                }
                NOp::Layout(a, from, to)
            }
            Op::Concatenate => {
                let parts: Vec<NodeId> = match args.first() {
                    Some(Val::Tuple(vs)) => vs
                        .iter()
                        .map(|v| self.tensor(v))
                        .collect::<Result<_, _>>()?,
                    Some(v) => vec![self.tensor(v)?],
                    None => return Err(self.err("`concatenate` lacks its argument")),
                };
                let axis = self.axis(self.int("axis")?, o.dims.len())?;
                NOp::Concat(parts, axis)
            }
            Op::Take => return self.take(args, o),
            Op::StridedSlice => self.strided_slice(args, &o)?,
            _ => return self.pad(args, o),
        };
        Ok(Val::T(self.push(node, o.dims, o.dtype)))
    }

    /// `strided_slice` as an index map, from the same per-axis plan the reference
    /// interpreter reads ([`crate::ops::strided_plan`]).
    fn strided_slice(&mut self, args: &[Val], o: &Shape) -> Result<NOp, Unsupported> {
        let a = self.arg(args, 0)?;
        let dims = self.node(a).dims.clone();
        let r = dims.len();
        let ints = |name: &str| self.attr(name).as_ints();
        let (Some(begin), Some(end)) = (ints("begin"), ints("end")) else {
            return Err(self.err("`strided_slice` needs `begin` and `end`"));
        };
        let strides = ints("strides").unwrap_or_default();
        let size_mode = match self.str("slice_mode")?.as_str() {
            "end" => false,
            "size" => true,
            m => return Err(self.err(format!("`strided_slice` with slice_mode \"{m}\""))),
        };
        let axes = match ints("axes") {
            Some(v) => Some(
                v.iter()
                    .map(|&x| self.axis(x, r))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => None,
        };
        let plan =
            crate::ops::strided_plan(&dims, &begin, &end, &strides, axes.as_deref(), size_mode)
                .map_err(|e| self.err(e))?;
        if plan
            .iter()
            .map(|s| s.len as usize)
            .ne(o.dims.iter().copied())
        {
            return Err(self.err("`strided_slice` reads another shape than its type says"));
        }
        // An axis read once needs no step (a huge one would only grow the index arithmetic).
        Ok(NOp::Strided(
            a,
            plan.iter()
                .map(|s| (s.start, if s.len <= 1 { 1 } else { s.stride }))
                .collect(),
        ))
    }

    fn split(&mut self, args: &[Val], outs: &[Shape]) -> Result<Val, Unsupported> {
        let a = self.arg(args, 0)?;
        let r = self.node(a).dims.len();
        let axis = self.axis(self.int("axis")?, r)?;
        let mut begin = 0;
        let mut vs = Vec::new();
        for s in outs {
            vs.push(Val::T(self.push(
                NOp::Slice(a, axis, begin),
                s.dims.clone(),
                s.dtype,
            )));
            begin += s.dims.get(axis).copied().unwrap_or(0);
        }
        if begin != self.node(a).dims[axis] {
            return Err(self.err("`split` results do not add up to the input"));
        }
        Ok(Val::Tuple(vs))
    }

    fn reduce(&mut self, op: Op, args: &[Val], o: Shape) -> Result<Val, Unsupported> {
        let a = self.arg(args, 0)?;
        self.require_float(&[a])?;
        let r = self.node(a).dims.len();
        let mut reduced = match self.attr("axis").as_ints() {
            None => vec![true; r],
            Some(axes) => {
                let mut m = vec![false; r];
                for x in axes {
                    m[self.axis(x, r)?] = true;
                }
                m
            }
        };
        if self.attr("axis").as_ints().is_some() && self.bool("exclude")? {
            reduced.iter_mut().for_each(|x| *x = !*x);
        }
        let kind = match op {
            Op::Sum => Red::Sum,
            Op::Mean => Red::Mean,
            Op::Max => Red::Max,
            _ => Red::Min,
        };
        let keepdims = o.dims.len() == r && r > 0;
        Ok(Val::T(self.push(
            NOp::Reduce {
                arg: a,
                kind,
                reduced,
                keepdims,
            },
            o.dims,
            o.dtype,
        )))
    }

    /// `nn.softmax` and `nn.log_softmax`: a max, an exponential and a sum.
    fn softmax(&mut self, op: Op, args: &[Val], o: Shape) -> Result<Val, Unsupported> {
        let x = self.arg(args, 0)?;
        self.require_float(&[x])?;
        let dims = self.node(x).dims.clone();
        let axis = self.axis(self.int("axis")?, dims.len())?;
        let mut kd = dims.clone();
        kd[axis] = 1;
        let mut reduced = vec![false; dims.len()];
        reduced[axis] = true;
        let f = DType::F32;
        let mx = self.push(
            NOp::Reduce {
                arg: x,
                kind: Red::Max,
                reduced: reduced.clone(),
                keepdims: true,
            },
            kd.clone(),
            f,
        );
        let d = self.push(NOp::Bin(Bin::Sub, x, mx), dims.clone(), f);
        let e = self.push(NOp::Un(Un::Exp, d), dims.clone(), f);
        let s = self.push(
            NOp::Reduce {
                arg: e,
                kind: Red::Sum,
                reduced,
                keepdims: true,
            },
            kd.clone(),
            f,
        );
        let r = if op == Op::Softmax {
            self.times_reciprocal(e, s, kd, o.dims, o.dtype)
        } else {
            let ls = self.push(NOp::Un(Un::Log, s), kd, f);
            self.push(NOp::Bin(Bin::Sub, d, ls), o.dims, o.dtype)
        };
        Ok(Val::T(r))
    }

    /// `y * gamma + beta` as the normalisation's `scale` and `center` say, `gamma` and `beta`
    /// along `axis`.
    fn scale_shift(
        &mut self,
        y: NodeId,
        g: NodeId,
        bt: NodeId,
        axis: usize,
    ) -> Result<NodeId, Unsupported> {
        let dims = self.node(y).dims.clone();
        let rank = dims.len();
        let f = DType::F32;
        let (center, scale) = (self.bool("center")?, self.bool("scale")?);
        let mut y = y;
        if scale {
            let gv = self.along(g, axis, rank);
            y = self.push(NOp::Bin(Bin::Mul, y, gv), dims.clone(), f);
        }
        if center {
            let bv = self.along(bt, axis, rank);
            y = self.push(NOp::Bin(Bin::Add, y, bv), dims, f);
        }
        Ok(y)
    }

    /// `x / d` for a divisor `d` that is constant along the axes `x` has and `d` keeps at 1
    /// (a row's sum, a row's deviation): `x * (1 / d)`. The reciprocal is invariant in the
    /// inner loop, so the compiler computes it once per row and the elements cost a multiply
    /// instead of a division; the result is at most one rounding away from `x / d` (these
    /// operators are not single IEEE operations, docs/native.md "Numerics").
    fn times_reciprocal(
        &mut self,
        x: NodeId,
        d: NodeId,
        d_dims: Vec<usize>,
        dims: Vec<usize>,
        dtype: DType,
    ) -> NodeId {
        let f = DType::F32;
        let one = self.b.lit_node(Lit::F(1.0), f, Vec::new());
        let inv = self.push(NOp::Bin(Bin::Div, one, d), d_dims, f);
        self.push(NOp::Bin(Bin::Mul, x, inv), dims, dtype)
    }

    /// `nn.layer_norm`: two mean reductions and elementwise operators.
    fn layer_norm(&mut self, args: &[Val], o: Shape) -> Result<Val, Unsupported> {
        let (x, g, bt) = (self.arg(args, 0)?, self.arg(args, 1)?, self.arg(args, 2)?);
        self.require_float(&[x, g, bt])?;
        let dims = self.node(x).dims.clone();
        let rank = dims.len();
        let axis = self.axis(self.int("axis")?, rank)?;
        let eps = self.float("epsilon")? as f32 as f64;
        self.bool("center")?;
        self.bool("scale")?;
        let mut kd = dims.clone();
        kd[axis] = 1;
        let mut reduced = vec![false; rank];
        reduced[axis] = true;
        let f = DType::F32;
        let mean = self.push(
            NOp::Reduce {
                arg: x,
                kind: Red::Mean,
                reduced: reduced.clone(),
                keepdims: true,
            },
            kd.clone(),
            f,
        );
        let dv = self.push(NOp::Bin(Bin::Sub, x, mean), dims.clone(), f);
        let sq = self.push(NOp::Bin(Bin::Mul, dv, dv), dims.clone(), f);
        let var = self.push(
            NOp::Reduce {
                arg: sq,
                kind: Red::Mean,
                reduced,
                keepdims: true,
            },
            kd.clone(),
            f,
        );
        let e = self.b.lit_node(Lit::F(eps), f, Vec::new());
        let ve = self.push(NOp::Bin(Bin::Add, var, e), kd.clone(), f);
        let den = self.push(NOp::Un(Un::Sqrt, ve), kd.clone(), f);
        let y = self.times_reciprocal(dv, den, kd, dims, f);
        let y = self.scale_shift(y, g, bt, axis)?;
        Ok(Val::T(self.retype(y, &o)))
    }

    /// `nn.batch_norm` (inference): `(x - mean) / sqrt(var + eps) * gamma + beta` per channel.
    fn batch_norm(&mut self, args: &[Val], o: Shape) -> Result<Val, Unsupported> {
        let x = self.arg(args, 0)?;
        let ps: Vec<NodeId> = (1..5)
            .map(|i| self.arg(args, i))
            .collect::<Result<_, _>>()?;
        let mut all = vec![x];
        all.extend(&ps);
        self.require_float(&all)?;
        let dims = self.node(x).dims.clone();
        let rank = dims.len();
        let axis = self.axis(self.int("axis")?, rank)?;
        let eps = self.float("epsilon")? as f32 as f64;
        self.bool("center")?;
        self.bool("scale")?;
        let f = DType::F32;
        let (g, bt, mean, var) = (ps[0], ps[1], ps[2], ps[3]);
        let e = self.b.lit_node(Lit::F(eps), f, Vec::new());
        let cd = self.node(var).dims.clone();
        let ve = self.push(NOp::Bin(Bin::Add, var, e), cd.clone(), f);
        let den = self.push(NOp::Un(Un::Sqrt, ve), cd.clone(), f);
        let one = self.b.lit_node(Lit::F(1.0), f, Vec::new());
        let inv = self.push(NOp::Bin(Bin::Div, one, den), cd, f);
        let mv = self.along(mean, axis, rank);
        let iv = self.along(inv, axis, rank);
        let c = self.push(NOp::Bin(Bin::Sub, x, mv), dims.clone(), f);
        let y = self.push(NOp::Bin(Bin::Mul, c, iv), dims, f);
        let y = self.scale_shift(y, g, bt, axis)?;
        let y = self.retype(y, &o);
        Ok(Val::Tuple(vec![Val::T(y), Val::T(mean), Val::T(var)]))
    }

    /// `nn.bias_add`: a broadcast add along `axis`.
    fn bias_add(&mut self, args: &[Val], o: Shape) -> Result<Val, Unsupported> {
        let (x, b) = (self.arg(args, 0)?, self.arg(args, 1)?);
        self.require_float(&[x, b])?;
        let rank = self.node(x).dims.len();
        let axis = self.axis(self.int("axis")?, rank)?;
        let bv = self.along(b, axis, rank);
        Ok(Val::T(self.push(
            NOp::Bin(Bin::Add, x, bv),
            o.dims,
            o.dtype,
        )))
    }

    fn dense(&mut self, args: &[Val], o: Shape) -> Result<Val, Unsupported> {
        let (d, w) = (self.arg(args, 0)?, self.arg(args, 1)?);
        self.require_float(&[d, w])?;
        self.require_out_float(&o)?;
        let (dd, wd) = (self.node(d).dims.clone(), self.node(w).dims.clone());
        if dd.is_empty() || wd.len() != 2 || wd[1] != dd[dd.len() - 1] {
            return Err(self.err("`nn.dense` with shapes it cannot multiply"));
        }
        Ok(Val::T(self.push(NOp::Dense(d, w), o.dims, o.dtype)))
    }

    fn batch_matmul(&mut self, args: &[Val], o: Shape) -> Result<Val, Unsupported> {
        let (x, y) = (self.arg(args, 0)?, self.arg(args, 1)?);
        self.require_float(&[x, y])?;
        self.require_out_float(&o)?;
        let (ta, tb) = (self.bool("transpose_a")?, self.bool("transpose_b")?);
        if self.node(x).dims.len() != 3 || self.node(y).dims.len() != 3 || o.dims.len() != 3 {
            return Err(self.err("`nn.batch_matmul` needs rank-3 operands"));
        }
        Ok(Val::T(self.push(
            NOp::BatchMatmul { x, y, ta, tb },
            o.dims,
            o.dtype,
        )))
    }

    fn require_out_float(&self, o: &Shape) -> Result<(), Unsupported> {
        if !is_f32_family(o.dtype) {
            return Err(self.err(format!(
                "`{}` producing `{}` is not supported by native code generation",
                self.def.name, o.dtype
            )));
        }
        Ok(())
    }

    /// `n` with the result's dtype (a cast node only when it differs).
    fn retype(&mut self, n: NodeId, o: &Shape) -> NodeId {
        if self.node(n).dtype == o.dtype && self.node(n).dims == o.dims {
            return n;
        }
        // Computed in float32; stored in the result's dtype. Rounding happens at the store, so
        // retyping the last node is enough.
        self.b.g.nodes[n].dtype = o.dtype;
        self.b.g.nodes[n].dims = o.dims.clone();
        n
    }

    fn take(&mut self, args: &[Val], o: Shape) -> Result<Val, Unsupported> {
        let (mut data, idx) = (self.arg(args, 0)?, self.arg(args, 1)?);
        let id = self.node(idx).dtype;
        if !id.is_int() || class(id) != Class::I {
            return Err(self.err("`take` needs integer indices"));
        }
        let mode = match self.str("mode")?.as_str() {
            "clip" => TakeMode::Clip,
            "wrap" => TakeMode::Wrap,
            "fast" => TakeMode::Fast,
            m => return Err(self.err(format!("`take` does not support mode \"{m}\""))),
        };
        let (axis, bd) = match self.attr("axis").as_int() {
            None => {
                let n = self.node(data).numel();
                let dt = self.node(data).dtype;
                data = self.push(NOp::Reshape(data), vec![n], dt);
                (0, 0)
            }
            Some(a) => {
                let r = self.node(data).dims.len();
                let axis = self.axis(a, r)?;
                let raw = match self.attrs.get(self.def.attrs, "batch_dims") {
                    Some(AttrValue::Int(v, _)) => *v,
                    _ => 0,
                };
                let il = self.node(idx).dims.len() as i64;
                let bd = if raw < 0 { raw + il } else { raw };
                let bd = usize::try_from(bd)
                    .ok()
                    .filter(|&b| b <= axis && b as i64 <= il)
                    .ok_or_else(|| self.err(format!("`take` has an invalid batch_dims {raw}")))?;
                (axis, bd)
            }
        };
        if self.node(data).dims[axis] == 0 {
            return Err(self.err("`take` from an empty axis"));
        }
        Ok(Val::T(self.push(
            NOp::Take {
                data,
                idx,
                axis,
                batch_dims: bd,
                mode,
            },
            o.dims,
            o.dtype,
        )))
    }

    fn pad(&mut self, args: &[Val], o: Shape) -> Result<Val, Unsupported> {
        let data = self.arg(args, 0)?;
        let value = self.arg(args, 1)?;
        let mode = match self.str("pad_mode")?.as_str() {
            "constant" => PadMode::Constant,
            "edge" => PadMode::Edge,
            "reflect" => PadMode::Reflect,
            m => return Err(self.err(format!("`nn.pad` does not support pad_mode \"{m}\""))),
        };
        let widths: Vec<(usize, usize)> = match self.attr("pad_width") {
            AttrValue::Array(rows) => rows
                .iter()
                .map(|r| match r.as_ints().as_deref() {
                    Some(&[b, a]) if b >= 0 && a >= 0 => Ok((b as usize, a as usize)),
                    _ => Err(self.err(format!("`nn.pad` has a bad pad_width entry {r}"))),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(self.err("`nn.pad` needs `pad_width`")),
        };
        let dims = self.node(data).dims.clone();
        if widths.len() != dims.len() {
            return Err(self.err("`nn.pad` needs one pad_width pair per axis"));
        }
        if mode != PadMode::Constant {
            for (k, (&n, &(b, a))) in dims.iter().zip(&widths).enumerate() {
                if n == 0 && b + a > 0 {
                    return Err(self.err(format!("`nn.pad` cannot pad the empty axis {k}")));
                }
            }
        }
        if self.node(value).numel() != 1 {
            return Err(self.err("`nn.pad` needs a scalar pad value"));
        }
        Ok(Val::T(self.push(
            NOp::Pad {
                data,
                widths,
                mode,
                value,
            },
            o.dims,
            o.dtype,
        )))
    }

    /// `(h, w)` from a 1- or 2-value attribute of positive values.
    fn pair(&self, name: &str) -> Result<(usize, usize), Unsupported> {
        let v = self.ints(name)?;
        if v.iter().any(|&x| x <= 0) {
            return Err(self.err(format!("attribute `{name}` must hold positive values")));
        }
        let v = geom::per_axis(&v, 2, true)
            .map_err(|_| self.err(format!("attribute `{name}` needs 1 or 2 values")))?;
        Ok((v[0] as usize, v[1] as usize))
    }

    /// `[top, left, bottom, right]` from TVM's 1-, 2- or 4-value padding.
    fn padding4(&self) -> Result<[usize; 4], Unsupported> {
        let (before, after) = geom::padding(&self.ints("padding")?, 2).map_err(|e| match e {
            AxisError::Value(x) => self.err(format!("negative padding {x}")),
            AxisError::Count(_) => self.err("padding needs 1, 2 or 4 values"),
        })?;
        let u = |x: i64| x as usize;
        Ok([u(before[0]), u(before[1]), u(after[0]), u(after[1])])
    }

    /// A layout conversion node when the layouts differ.
    fn relayout(&mut self, n: NodeId, from: &str, to: &str) -> Result<NodeId, Unsupported> {
        let lf = Layout::parse(from).map_err(|e| self.err(format!("invalid layout: {e}")))?;
        let lt = Layout::parse(to).map_err(|e| self.err(format!("invalid layout: {e}")))?;
        if lf == lt {
            return Ok(n);
        }
        let shape: Vec<crate::ir::Dim> = self
            .node(n)
            .dims
            .iter()
            .map(|&d| crate::ir::Dim::Fixed(d as i64))
            .collect();
        let dims: Vec<usize> = lf
            .convert(&shape, &lt)
            .map_err(|e| self.err(e))?
            .iter()
            .map(|d| d.fixed().unwrap_or(0) as usize)
            .collect();
        let dt = self.node(n).dtype;
        Ok(self.push(NOp::Layout(n, from.to_string(), to.to_string()), dims, dt))
    }

    fn conv2d(&mut self, args: &[Val], o: Shape) -> Result<Val, Unsupported> {
        let (dc, wc, ol, groups) = self.conv_operands(args, &o, "NCHW", "OIHW")?;
        let (dd, kd) = (self.node(dc).dims.clone(), self.node(wc).dims.clone());
        let stride = self.pair("strides")?;
        let dilation = self.pair("dilation")?;
        let [pt, pl, pb, pr] = self.padding4()?;
        if kd[2] == 0 || kd[3] == 0 {
            return Err(self.err("`nn.conv2d` with an empty kernel window"));
        }
        let span = |n: usize, k: usize, p: usize, s: usize, dl: usize| -> Option<usize> {
            geom::window_out_usize(n, k, p, s, dl, false)
        };
        let g = ConvGeom {
            n: dd[0],
            c: dd[1],
            h: dd[2],
            w: dd[3],
            o: kd[0],
            kh: kd[2],
            kw: kd[3],
            oh: span(dd[2], kd[2], pt + pb, stride.0, dilation.0)
                .ok_or_else(|| self.err("the convolution window is larger than the input"))?,
            ow: span(dd[3], kd[3], pl + pr, stride.1, dilation.1)
                .ok_or_else(|| self.err("the convolution window is larger than the input"))?,
            groups,
            stride,
            dilation,
            pad: (pt, pl),
        };
        let cdims = vec![g.n, g.o, g.oh, g.ow];
        let conv = self.push(NOp::Conv(dc, wc, g), cdims, o.dtype);
        let r = self.relayout(conv, "NCHW", &ol)?;
        if self.node(r).dims != o.dims {
            return Err(self.err(format!(
                "`nn.conv2d` computes {:?} but its type says {:?}",
                self.node(r).dims,
                o.dims
            )));
        }
        Ok(Val::T(r))
    }

    /// A convolution's data and weights in the layouts `data` and `kernel` (`NC..`, `OI..`), the
    /// result's layout, and its groups, checked against the channels.
    fn conv_operands(
        &mut self,
        args: &[Val],
        o: &Shape,
        data: &str,
        kernel: &str,
    ) -> Result<(NodeId, NodeId, String, usize), Unsupported> {
        let name = self.def.name;
        let (d, w) = (self.arg(args, 0)?, self.arg(args, 1)?);
        self.require_float(&[d, w])?;
        self.require_out_float(o)?;
        let dl = self.str("data_layout")?;
        let kl = self.str("kernel_layout")?;
        let ol = match self.str("out_layout")?.as_str() {
            "" => dl.clone(),
            s => s.to_string(),
        };
        let dc = self.relayout(d, &dl, data)?;
        let wc = self.relayout(w, &kl, kernel)?;
        let (dd, kd) = (&self.node(dc).dims, &self.node(wc).dims);
        if dd.len() != data.len() || kd.len() != kernel.len() {
            return Err(self.err(format!("`{name}` needs {}-d data and weights", data.len())));
        }
        let groups = usize::try_from(self.int("groups")?).unwrap_or(0);
        if groups == 0 || dd[1] % groups != 0 || kd[0] % groups != 0 || kd[1] * groups != dd[1] {
            return Err(self.err(format!(
                "`{name}` with groups={groups} does not fit data {dd:?} and weight {kd:?}"
            )));
        }
        Ok((dc, wc, ol, groups))
    }

    /// `nn.conv1d` as a convolution over a height of 1: the data `[N, C, W]` viewed as
    /// `[N, C, 1, W]`, the weights `[O, I, K]` as `[O, I, 1, K]`, the result viewed back.
    fn conv1d(&mut self, args: &[Val], o: Shape) -> Result<Val, Unsupported> {
        let (dc, wc, ol, groups) = self.conv_operands(args, &o, "NCW", "OIW")?;
        let (dd, kd) = (self.node(dc).dims.clone(), self.node(wc).dims.clone());
        let one = |name: &str| -> Result<usize, Unsupported> {
            match self.ints(name)?.as_slice() {
                [v] if *v > 0 => Ok(*v as usize),
                _ => Err(self.err(format!("attribute `{name}` needs one positive value"))),
            }
        };
        let (stride, dilation) = (one("strides")?, one("dilation")?);
        let (before, after) = geom::padding(&self.ints("padding")?, 1).map_err(|e| match e {
            AxisError::Value(x) => self.err(format!("negative padding {x}")),
            AxisError::Count(_) => self.err("padding needs 1 or 2 values"),
        })?;
        let (pl, pr) = (before[0] as usize, after[0] as usize);
        if kd[2] == 0 {
            return Err(self.err("`nn.conv1d` with an empty kernel window"));
        }
        let ow = geom::window_out_usize(dd[2], kd[2], pl + pr, stride, dilation, false)
            .ok_or_else(|| self.err("the convolution window is larger than the input"))?;
        let (dt, wt) = (self.node(dc).dtype, self.node(wc).dtype);
        let d4 = self.push(NOp::Reshape(dc), vec![dd[0], dd[1], 1, dd[2]], dt);
        let w4 = self.push(NOp::Reshape(wc), vec![kd[0], kd[1], 1, kd[2]], wt);
        let g = ConvGeom {
            n: dd[0],
            c: dd[1],
            h: 1,
            w: dd[2],
            o: kd[0],
            kh: 1,
            kw: kd[2],
            oh: 1,
            ow,
            groups,
            stride: (1, stride),
            dilation: (1, dilation),
            pad: (0, pl),
        };
        let conv = self.push(NOp::Conv(d4, w4, g), vec![g.n, g.o, 1, ow], o.dtype);
        let flat = self.push(NOp::Reshape(conv), vec![g.n, g.o, ow], o.dtype);
        let r = self.relayout(flat, "NCW", &ol)?;
        if self.node(r).dims != o.dims {
            return Err(self.err(format!(
                "`nn.conv1d` computes {:?} but its type says {:?}",
                self.node(r).dims,
                o.dims
            )));
        }
        Ok(Val::T(r))
    }

    fn pool(&mut self, args: &[Val], o: Shape) -> Result<Val, Unsupported> {
        let d = self.arg(args, 0)?;
        self.require_float(&[d])?;
        let name = self.def.name;
        let ls = self.str("layout")?;
        let lay = Layout::parse(&ls).map_err(|e| self.err(format!("invalid layout: {e}")))?;
        let hpos = lay.unsplit_position('H').map_err(|e| self.err(e))?;
        let wpos = lay.unsplit_position('W').map_err(|e| self.err(e))?;
        let dims = self.node(d).dims.clone();
        if lay.rank() != dims.len() {
            return Err(self.err(format!(
                "layout `{ls}` does not fit a rank-{} input",
                dims.len()
            )));
        }
        let out_layout = match self.str("out_layout")?.as_str() {
            "" => ls.clone(),
            s => s.to_string(),
        };
        let kind = self
            .def
            .op
            .pool_kind()
            .filter(|k| k.spatial == 2 && k.window != PoolWindow::Adaptive)
            .ok_or_else(|| {
                self.err(format!(
                    "native code generation does not implement `{name}`"
                ))
            })?;
        let global = kind.window == PoolWindow::Global;
        let max = kind.reduce == PoolReduce::Max;
        let mut pooled = dims.clone();
        let node = if global {
            pooled[hpos] = 1;
            pooled[wpos] = 1;
            let mut reduced = vec![false; dims.len()];
            reduced[hpos] = true;
            reduced[wpos] = true;
            let kind = if max { Red::Max } else { Red::Mean };
            if dims[hpos] * dims[wpos] == 0 {
                return Err(self.err("global pooling of an empty window"));
            }
            self.push(
                NOp::Reduce {
                    arg: d,
                    kind,
                    reduced,
                    keepdims: true,
                },
                pooled.clone(),
                o.dtype,
            )
        } else {
            let win = PoolWin {
                size: self.pair("pool_size")?,
                stride: self.pair("strides")?,
                dilation: self.pair("dilation")?,
                pad: self.padding4()?,
                max,
                count_include_pad: !max && self.bool("count_include_pad")?,
                hpos,
                wpos,
            };
            let ceil = self.bool("ceil_mode")?;
            let extent = |n: usize, k: usize, p: usize, s: usize, dl: usize| -> Option<usize> {
                geom::window_out_usize(n, k.max(1), p, s, dl, ceil)
            };
            pooled[hpos] = extent(
                dims[hpos],
                win.size.0,
                win.pad[0] + win.pad[2],
                win.stride.0,
                win.dilation.0,
            )
            .ok_or_else(|| self.err("the pooling window is larger than the padded input"))?;
            pooled[wpos] = extent(
                dims[wpos],
                win.size.1,
                win.pad[1] + win.pad[3],
                win.stride.1,
                win.dilation.1,
            )
            .ok_or_else(|| self.err("the pooling window is larger than the padded input"))?;
            self.push(NOp::Pool(d, win), pooled.clone(), o.dtype)
        };
        let r = self.relayout(node, &ls, &out_layout)?;
        if self.node(r).dims != o.dims {
            return Err(self.err(format!(
                "`{name}` computes {:?} but its type says {:?}",
                self.node(r).dims,
                o.dims
            )));
        }
        Ok(Val::T(r))
    }
}

/// The unary map of an elementwise operator.
fn unary(op: Op) -> Option<Un> {
    Some(match op {
        Op::Sqrt => Un::Sqrt,
        Op::Rsqrt => Un::Rsqrt,
        Op::Erf => Un::Erf,
        Op::Exp => Un::Exp,
        Op::Log => Un::Log,
        Op::Sigmoid => Un::Sigmoid,
        Op::Tanh => Un::Tanh,
        Op::Floor => Un::Floor,
        Op::Ceil => Un::Ceil,
        Op::Round => Un::Round,
        Op::Abs => Un::Abs,
        Op::Negative => Un::Neg,
        Op::Relu => Un::Relu,
        _ => return None,
    })
}

/// The binary map of an arithmetic operator.
fn binary(op: Op) -> Option<Bin> {
    Some(match op {
        Op::Add => Bin::Add,
        Op::Subtract => Bin::Sub,
        Op::Multiply => Bin::Mul,
        Op::Divide => Bin::Div,
        Op::Power => Bin::Pow,
        Op::Maximum => Bin::Max,
        Op::Minimum => Bin::Min,
        _ => return None,
    })
}

/// The comparison of a comparison operator.
fn compare(op: Op) -> Option<Cmp> {
    Some(match op {
        Op::Less => Cmp::Lt,
        Op::Greater => Cmp::Gt,
        Op::Equal => Cmp::Eq,
        Op::LessEqual => Cmp::Le,
        Op::GreaterEqual => Cmp::Ge,
        Op::NotEqual => Cmp::Ne,
        _ => return None,
    })
}
