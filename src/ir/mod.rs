//! The Relay IR: an arena of expressions with typed ids, spans kept beside the nodes.
//!
//! A [`Module`] owns every expression, variable and function of a parsed program. Expressions are
//! appended after their operands, so the arena order is a valid post-order: every operand has a
//! smaller [`ExprId`] than its user. Passes therefore walk the arena with plain loops and never
//! recurse on expression depth. Sharing is explicit: a `%N` graph binding used twice is one
//! expression with two users, exactly like TVM's graph normal form.

pub mod attrs;
pub mod device;
pub mod equal;
pub mod literal;
pub mod types;

pub use attrs::{AttrDefault, AttrField, AttrType, AttrValue, Attrs};
pub use device::VirtualDevice;
pub use types::{DType, DTypeCode, Dim, FuncType, TensorType, Type};

use crate::source::Span;
use std::collections::BTreeMap;
use std::fmt;

/// How deeply expressions, types and attribute values may nest. A front end never builds deeper
/// nesting (the RelayScript parser rejects it with E0204), so a pass may recurse on the
/// structure of a type within a bound derived from this one.
pub const MAX_DEPTH: u32 = 256;

macro_rules! define_id {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);
        impl $name {
            /// The id as an index.
            pub fn index(self) -> usize { self.0 as usize }
        }
    )*};
}

define_id! {
    /// An expression in [`Module::exprs`].
    ExprId;
    /// A variable in [`Module::vars`].
    VarId;
    /// A function (a `def` or a `fn` literal) in [`Module::funcs`].
    FuncId;
    /// A global name in [`Module::globals`].
    GlobalId;
}

/// An operator in the registry ([`crate::ops`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u16);

/// A scalar literal value.
#[derive(Clone, Copy, Debug)]
pub enum Scalar {
    /// An integer.
    Int(i64),
    /// A float, kept exactly as written (the dtype says how it will be stored).
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl PartialEq for Scalar {
    fn eq(&self, other: &Scalar) -> bool {
        match (self, other) {
            (Scalar::Int(a), Scalar::Int(b)) => a == b,
            (Scalar::Float(a), Scalar::Float(b)) => a.to_bits() == b.to_bits(),
            (Scalar::Bool(a), Scalar::Bool(b)) => a == b,
            _ => false,
        }
    }
}

/// A constant expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Constant {
    /// A literal such as `0f`, `2f16`, `50257i64` or `True`.
    Scalar {
        /// The value.
        value: Scalar,
        /// Its dtype, from the suffix.
        dtype: DType,
    },
    /// A tensor held in the meta table, `meta[relay.Constant][index]`.
    Meta {
        /// The meta table key, normally `relay.Constant`.
        key: String,
        /// Index within that key's list.
        index: u32,
        /// Its type, from the metadata section or a `/* ty=... */` comment.
        ty: TensorType,
    },
}

impl Constant {
    /// The constant's type.
    pub fn ty(&self) -> TensorType {
        match self {
            Constant::Scalar { dtype, .. } => TensorType::scalar(*dtype),
            Constant::Meta { ty, .. } => ty.clone(),
        }
    }
}

/// What a call calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Callee {
    /// A registered operator.
    Op(OpId),
    /// Any other expression: a function literal, a variable, a global, another call.
    Expr(ExprId),
}

/// One expression node. Operands are ids of earlier expressions.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A use of a parameter or let-bound variable. There is one such node per variable.
    Var(VarId),
    /// A reference to a global function `@name`.
    Global(GlobalId),
    /// A literal or meta-table constant.
    Const(Constant),
    /// A call with positional arguments and (for operators) attributes.
    Call {
        /// The callee.
        callee: Callee,
        /// Positional arguments.
        args: Vec<ExprId>,
        /// Attribute values aligned with the operator's schema (empty for non-operator calls).
        attrs: Attrs,
    },
    /// A tuple `(a, b, ...)`.
    Tuple(Vec<ExprId>),
    /// A projection `t.N`.
    Proj {
        /// The tuple.
        tuple: ExprId,
        /// The field index.
        index: u32,
    },
    /// `let %x = value; body`.
    Let {
        /// The bound variable.
        var: VarId,
        /// The bound value.
        value: ExprId,
        /// The body, in which the variable is in scope.
        body: ExprId,
    },
    /// `if (cond) { then } else { else }`.
    If {
        /// The condition (a boolean scalar).
        cond: ExprId,
        /// The true branch.
        then_branch: ExprId,
        /// The false branch.
        else_branch: ExprId,
    },
    /// A function literal `fn (...) { ... }`.
    Func(FuncId),
    /// An operator used as a value without being called.
    Op(OpId),
}

/// A parameter or let-bound variable.
#[derive(Clone, Debug)]
pub struct Var {
    /// The name without `%`.
    pub name: String,
    /// The annotated type, if any.
    pub annotation: Option<Type>,
    /// The variable's virtual device (unconstrained when not written).
    pub device: VirtualDevice,
    /// The span of the binder.
    pub span: Span,
    /// The one [`Expr::Var`] node that refers to this variable.
    pub expr: ExprId,
}

/// A function: a `def @name` body or a `fn` literal.
#[derive(Clone, Debug)]
pub struct Function {
    /// Parameters in order.
    pub params: Vec<VarId>,
    /// The annotated result type, if any.
    pub ret_type: Option<Type>,
    /// Where the result annotation (`-> T`) is written.
    pub ret_span: Option<Span>,
    /// Function attributes (`Primitive=1`, `Compiler="cutlass"`, ...) in source order.
    pub attrs: Vec<(String, AttrValue)>,
    /// The device of the function's result (unconstrained when not written).
    pub result_device: VirtualDevice,
    /// The body expression.
    pub body: ExprId,
    /// The first expression id allocated for this function (its parameters and body follow).
    pub first_expr: ExprId,
    /// The span of the whole function.
    pub span: Span,
}

impl Function {
    /// The value of a function attribute.
    pub fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
}

/// A global name: mentioned with `@name`, defined (at most once) by `def @name`.
#[derive(Clone, Debug)]
pub struct Global {
    /// The name without `@`.
    pub name: String,
    /// The function defining it, once its `def` has been seen.
    pub def: Option<FuncId>,
    /// The span of the definition's name, or of the first mention if undefined.
    pub span: Span,
}

/// An object in the meta table.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaObject {
    /// A tensor constant; only its type is kept (its data, if any, is in [`MetaTable::data`]).
    Constant(TensorType),
    /// A tensor constant whose entry has neither data nor a type (collage writes constants
    /// without data so): a reference to it is typed by its `/* ty=... */` comment.
    UntypedConstant,
    /// A virtual device.
    Device(VirtualDevice),
    /// Any other object; only its type key is kept.
    Other(String),
}

/// The data bytes of a metadata constant (row-major, little-endian). Shared, and possibly a view
/// of a memory-mapped model file (the ONNX front end's weights are), so cloning never copies.
#[derive(Clone, PartialEq, Eq)]
pub struct ConstData(pub bytes::Bytes);

impl fmt::Debug for ConstData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConstData({} bytes)", self.0.len())
    }
}

/// The `#[metadata]` section: objects by type key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetaTable {
    /// Objects by type key, in the order they appear.
    pub objects: BTreeMap<String, Vec<MetaObject>>,
    /// The data of constants that carry it, by type key and index.
    pub data: BTreeMap<(String, u32), ConstData>,
}

impl MetaTable {
    /// The object `meta[key][index]`.
    pub fn get(&self, key: &str, index: u32) -> Option<&MetaObject> {
        self.objects.get(key)?.get(index as usize)
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// A parsed program.
#[derive(Clone, Debug, Default)]
pub struct Module {
    /// Global names, in order of first mention.
    pub globals: Vec<Global>,
    /// Definitions in source order.
    pub defs: Vec<(GlobalId, FuncId)>,
    /// The expression arena.
    pub exprs: Vec<Expr>,
    /// The span of each expression.
    pub spans: Vec<Span>,
    /// For each expression, the graph binding name it was given in the source (`"12"` for `%12`).
    pub bindings: Vec<Option<Box<str>>>,
    /// Inferred types, one per expression (filled by [`crate::analysis::typeck`]).
    pub types: Vec<Option<Type>>,
    /// Variables.
    pub vars: Vec<Var>,
    /// Functions (defs and literals).
    pub funcs: Vec<Function>,
    /// The metadata section, if the text had one.
    pub meta: MetaTable,
    /// Where operand `i` of an expression is written, when that differs from the operand's own
    /// span (a variable or a `%N` used at a later place). Keyed by (user, operand index).
    pub use_spans: std::collections::HashMap<(ExprId, u32), Span>,
}

impl Expr {
    /// TVM's class name of the expression (`Call`, `Var`, `Constant`, `TupleGetItem`, ...).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Expr::Var(_) => "Var",
            Expr::Global(_) => "GlobalVar",
            Expr::Const(_) => "Constant",
            Expr::Call { .. } => "Call",
            Expr::Tuple(_) => "Tuple",
            Expr::Proj { .. } => "TupleGetItem",
            Expr::Let { .. } => "Let",
            Expr::If { .. } => "If",
            Expr::Func(_) => "Function",
            Expr::Op(_) => "Op",
        }
    }
}

impl Module {
    /// An empty module.
    pub fn new() -> Module {
        Module::default()
    }

    /// Appends an expression and returns its id.
    pub fn push(&mut self, e: Expr, span: Span) -> ExprId {
        let id = ExprId(self.exprs.len() as u32);
        self.exprs.push(e);
        self.spans.push(span);
        self.bindings.push(None);
        id
    }

    /// The expression with the given id.
    pub fn expr(&self, id: ExprId) -> &Expr {
        &self.exprs[id.index()]
    }

    /// The span of an expression.
    pub fn span(&self, id: ExprId) -> Span {
        self.spans[id.index()]
    }

    /// Where operand `i` of `user` is written (falls back to the operand's own span).
    pub fn operand_span(&self, user: ExprId, i: usize, operand: ExprId) -> Span {
        self.use_spans
            .get(&(user, i as u32))
            .copied()
            .unwrap_or_else(|| self.span(operand))
    }

    /// The inferred type of an expression, if type inference has run and succeeded for it.
    pub fn ty(&self, id: ExprId) -> Option<&Type> {
        self.types.get(id.index()).and_then(Option::as_ref)
    }

    /// The variable with the given id.
    pub fn var(&self, id: VarId) -> &Var {
        &self.vars[id.index()]
    }

    /// The function with the given id.
    pub fn func(&self, id: FuncId) -> &Function {
        &self.funcs[id.index()]
    }

    /// The function defined by `def @name`.
    pub fn def(&self, name: &str) -> Option<FuncId> {
        self.defs
            .iter()
            .find(|(g, _)| self.globals[g.index()].name == name)
            .map(|&(_, f)| f)
    }

    /// The `@main` function.
    pub fn main(&self) -> Option<FuncId> {
        self.def("main")
    }

    /// Whether an expression is a call of a registered operator.
    pub fn is_op_call(&self, id: ExprId) -> bool {
        self.called_op(id).is_some()
    }

    /// The registered operator an expression calls, if it is such a call.
    pub fn called_op(&self, id: ExprId) -> Option<OpId> {
        match self.expr(id) {
            Expr::Call {
                callee: Callee::Op(op),
                ..
            } => Some(*op),
            _ => None,
        }
    }

    /// The operand expressions of an expression, in order (callee first for non-operator calls).
    pub fn operands(&self, id: ExprId) -> Vec<ExprId> {
        let mut out = Vec::new();
        self.for_each_operand(id, |c| out.push(c));
        out
    }

    /// Calls `f` on each operand of an expression, in evaluation order. A function literal's
    /// operand is its body; a let's are its value and body.
    pub fn for_each_operand(&self, id: ExprId, mut f: impl FnMut(ExprId)) {
        match self.expr(id) {
            Expr::Var(_) | Expr::Global(_) | Expr::Const(_) | Expr::Op(_) => {}
            Expr::Call { callee, args, .. } => {
                if let Callee::Expr(c) = callee {
                    f(*c);
                }
                args.iter().for_each(|&a| f(a));
            }
            Expr::Tuple(fields) => fields.iter().for_each(|&a| f(a)),
            Expr::Proj { tuple, .. } => f(*tuple),
            Expr::Let { var, value, body } => {
                f(*value);
                f(self.var(*var).expr);
                f(*body);
            }
            Expr::If {
                cond,
                then_branch,
                else_branch,
            } => {
                f(*cond);
                f(*then_branch);
                f(*else_branch);
            }
            Expr::Func(fid) => f(self.func(*fid).body),
        }
    }
}

/// Writes a string literal with C-style escapes.
pub fn write_escaped(f: &mut dyn fmt::Write, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\t' => f.write_str("\\t")?,
            '\r' => f.write_str("\\r")?,
            c if (c as u32) < 0x20 => write!(f, "\\x{:02x}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}
