//! The syntax tree of a `.rules` file. Syntax only: names are unresolved, every node has a span.

use crate::source::{FileId, Span};

/// A name as written, with its span.
#[derive(Clone, Debug, PartialEq)]
pub struct Name {
    /// The text (captures keep their `$`).
    pub text: String,
    /// Where it is written.
    pub span: Span,
}

/// A string literal with its span (escapes resolved).
#[derive(Clone, Debug, PartialEq)]
pub struct Str {
    /// The contents.
    pub value: String,
    /// The span of the literal, quotes included.
    pub span: Span,
}

/// A parsed file.
#[derive(Clone, Debug, PartialEq)]
pub struct File {
    /// The file.
    pub file: FileId,
    /// Items in order, including `Item::Bad` for those that did not parse.
    pub items: Vec<Item>,
}

/// A top-level item.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// What the item is.
    pub kind: ItemKind,
    /// The whole item.
    pub span: Span,
    /// The `///` documentation just above it.
    pub doc: Option<String>,
}

/// The kinds of items.
#[derive(Clone, Debug, PartialEq)]
pub enum ItemKind {
    /// `import "path";`
    Import(Str),
    /// `operator name(args) : kind;`
    Operator {
        /// Operator name.
        name: Name,
        /// Argument names.
        args: Vec<Name>,
        /// Pattern kind.
        kind: Name,
    },
    /// `pattern name(params) = body;`
    Pattern {
        /// Pattern name.
        name: Name,
        /// Pattern parameters.
        params: Vec<Name>,
        /// The pattern.
        body: Pat,
    },
    /// `predicate name($a, ...) = body;`
    Predicate {
        /// Predicate name.
        name: Name,
        /// Parameters (captures), each with the operators it must be a call of (may be empty).
        params: Vec<(Name, Vec<Name>)>,
        /// The body.
        body: Expr,
    },
    /// `combiner name = body;`
    Combiner {
        /// Combiner name.
        name: Name,
        /// The combiner.
        body: Comb,
    },
    /// `rule name = body;`
    Rule {
        /// Rule name.
        name: Name,
        /// The rule.
        body: RuleExpr,
    },
    /// `equiv lhs == rhs;`
    Equiv {
        /// Left side.
        lhs: Pat,
        /// Right side.
        rhs: Pat,
    },
    /// `rewrite lhs => rhs;`
    Rewrite {
        /// Left side.
        lhs: Pat,
        /// Right side.
        rhs: Pat,
    },
    /// `target name { entries }`
    Target {
        /// Target name.
        name: Name,
        /// Body entries.
        entries: Vec<TargetEntry>,
    },
    /// Text that did not parse (its diagnostic has been reported), with the name it seems to
    /// define, if any (uses of that name are then not reported as undefined).
    Bad(Option<Name>),
}

/// A pattern.
#[derive(Clone, Debug, PartialEq)]
pub struct Pat {
    /// The form.
    pub kind: PatKind,
    /// The span.
    pub span: Span,
}

/// Pattern forms.
#[derive(Clone, Debug, PartialEq)]
pub enum PatKind {
    /// `_`
    Wildcard,
    /// `const`
    Const,
    /// `$x`
    Capture(Name),
    /// `P as $x`
    As(Box<Pat>, Name),
    /// `name`, `name(args)`, `(op1 | op2)(args)`, with `?` and attribute constraints.
    Call {
        /// One name, or several operator alternatives.
        callee: Vec<Name>,
        /// `op?(...)`
        optional: bool,
        /// `[key = value, ...]`
        attrs: Vec<ConfigEntry>,
        /// The arguments, if written.
        args: Option<Vec<Pat>>,
    },
    /// `P | Q | ...`
    Alt(Vec<Pat>),
    /// `(P, Q)`
    Tuple(Vec<Pat>),
    /// `tuple(..)`
    AnyTuple,
    /// `P.N`
    Proj(Box<Pat>, u32),
    /// `P : constraint`
    Constraint(Box<Pat>, TypeConstraint, Span),
    /// `P where EXPR`
    Where(Box<Pat>, Expr),
}

/// A dtype, rank or shape constraint.
#[derive(Clone, Debug, PartialEq)]
pub enum TypeConstraint {
    /// `dtype(a | b)`
    DType(Vec<Name>),
    /// `rank(n)`
    Rank(i64),
    /// `shape(d, _, ...)`
    Shape(Vec<Option<i64>>),
}

/// A predicate expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    /// The form.
    pub kind: ExprKind,
    /// The span.
    pub span: Span,
}

/// Unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// `!`
    Not,
    /// `-`
    Neg,
}

/// Binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `||`
    Or,
    /// `&&`
    And,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `in`
    In,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
}

impl BinOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "||",
            BinOp::And => "&&",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::In => "in",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
        }
    }
}

/// Expression forms.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A boolean.
    Bool(bool),
    /// `$x`
    Capture(Name),
    /// A name: a dtype, a function or a predicate.
    Ident(Name),
    /// `[a, b]`
    List(Vec<Expr>),
    /// `e.field`
    Field(Box<Expr>, Name),
    /// `e[i]`
    Index(Box<Expr>, Box<Expr>),
    /// `f(args)`
    Call(Box<Expr>, Vec<Expr>),
    /// `!e`, `-e`
    Unary(UnOp, Box<Expr>),
    /// `a op b`
    Binary(BinOp, Box<Expr>, Box<Expr>),
}

/// A combiner: terms applied in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Comb {
    /// The terms.
    pub terms: Vec<CombTerm>,
    /// The span.
    pub span: Span,
}

/// One combiner term.
#[derive(Clone, Debug, PartialEq)]
pub enum CombTerm {
    /// `by_kind(A -> B, ...)` with its span.
    ByKind(Vec<(Name, Name)>, Span),
    /// `tuple_arg`, `tuple_proj`, `constant`, or a declared combiner.
    Named(Name),
}

/// A partition rule.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleExpr {
    /// The form.
    pub kind: RuleKind,
    /// The span.
    pub span: Span,
}

/// Partition rule forms.
#[derive(Clone, Debug, PartialEq)]
pub enum RuleKind {
    /// `pattern(P)`
    Pattern(Pat),
    /// `ops(op [where EXPR], ..., key = value)`
    Ops {
        /// The operators and their predicates.
        entries: Vec<(Name, Option<Expr>)>,
        /// Options such as `prefix = "tensorrt."`.
        options: Vec<ConfigEntry>,
    },
    /// `composite("name", R)`
    Composite(Str, Box<RuleExpr>),
    /// `primitive(R)`
    Primitive(Box<RuleExpr>),
    /// `union(R, ...)`
    Union(Vec<RuleExpr>),
    /// `combine(R, C, options)`
    Combine(Box<RuleExpr>, Comb, Vec<ConfigEntry>),
    /// `only_valid(R, options)`
    OnlyValid(Box<RuleExpr>, Vec<ConfigEntry>),
    /// A built-in (`op_call_by_kind`, `host`) or declared rule.
    Ref(Name),
}

/// `key = value`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigEntry {
    /// The key.
    pub key: Name,
    /// The value.
    pub value: Value,
}

/// A value in a field, option or attribute constraint.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// The form.
    pub kind: ValueKind,
    /// The span.
    pub span: Span,
}

/// Value forms.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueKind {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A number with a unit.
    Quantity(f64, Name),
    /// A string.
    Str(String),
    /// A boolean.
    Bool(bool),
    /// `VirtualDevice(key = value, ...)`
    Device(Vec<ConfigEntry>),
    /// `name(values)`
    Call(Name, Vec<Value>),
    /// `[values]`
    List(Vec<Value>),
    /// A bare (possibly dotted) name.
    Name(String),
}

/// One entry of a target body.
#[derive(Clone, Debug, PartialEq)]
pub enum TargetEntry {
    /// `key = value;`
    Field(ConfigEntry),
    /// `patterns = [ "name" = P, ... ];`
    Patterns(Vec<(Str, Pat)>, Span),
    /// `rule = R;`
    Rule(RuleExpr, Span),
    /// `cost { ... }`
    Cost {
        /// `key = value;` fields.
        fields: Vec<ConfigEntry>,
        /// `efficiency { op = v; }` entries.
        efficiency: Vec<(Name, Value)>,
        /// The block.
        span: Span,
    },
    /// `transition { ... }`
    Transition(Vec<ConfigEntry>, Span),
}
