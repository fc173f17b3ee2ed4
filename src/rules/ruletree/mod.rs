//! The compiled form of a rule set: targets with their partition rule trees, resolved patterns
//! and typed predicates, ready for enumeration.
//!
//! Everything here is resolved: operators are registry ids, pattern uses are expanded, captures
//! are numbered, predicates are typed, combiners are flattened. Built by [`crate::rules::sema::check`];
//! printed canonically by [`print::print_program`] (`collage check --print`).

pub mod print;

use crate::ir::{AttrValue, DType, OpId, VirtualDevice};
use crate::ops::OpPattern;
use crate::source::Span;

/// A compiled pattern.
#[derive(Clone, Debug, PartialEq)]
pub enum Pattern {
    /// Matches anything.
    Wildcard,
    /// Matches a constant.
    Const,
    /// Matches what the inner pattern matches and records it as capture `n`.
    Capture(u32, Box<Pattern>),
    /// A call of one of `ops` with exactly `args.len()` arguments.
    Call {
        /// Acceptable operators (at least one).
        ops: Vec<OpId>,
        /// Required attribute values, by attribute name.
        attrs: Vec<(String, AttrValue)>,
        /// Argument patterns.
        args: Vec<Pattern>,
    },
    /// `op?(first, rest...)`: either `first` alone, or a call of one of `ops` whose first
    /// argument matches `first` and whose other arguments match `rest` (the call is tried first).
    Optional {
        /// Acceptable operators of the optional call.
        ops: Vec<OpId>,
        /// Required attribute values of the optional call.
        attrs: Vec<(String, AttrValue)>,
        /// The pattern passed through.
        first: Box<Pattern>,
        /// The optional call's other arguments.
        rest: Vec<Pattern>,
    },
    /// The first alternative that matches.
    Alt(Vec<Pattern>),
    /// A tuple with exactly these fields.
    Tuple(Vec<Pattern>),
    /// Any tuple.
    AnyTuple,
    /// Field `n` of a tuple.
    Proj(Box<Pattern>, u32),
    /// A value with one of the dtypes.
    DType(Box<Pattern>, Vec<DType>),
    /// A value of the given rank.
    Rank(Box<Pattern>, u32),
    /// A value whose shape matches (`None` = any extent).
    Shape(Box<Pattern>, Vec<Option<i64>>),
    /// A match on which the predicate holds.
    Where(Box<Pattern>, Pred),
}

impl Pattern {
    /// The sub-patterns, in order (without allocating: the matcher walks patterns often).
    pub fn children(&self) -> impl Iterator<Item = &Pattern> {
        let (one, many): (Option<&Pattern>, &[Pattern]) = match self {
            Pattern::Call { args, .. } | Pattern::Alt(args) | Pattern::Tuple(args) => (None, args),
            Pattern::Optional { first, rest, .. } => (Some(first), rest),
            Pattern::Capture(_, i)
            | Pattern::Proj(i, _)
            | Pattern::DType(i, _)
            | Pattern::Rank(i, _)
            | Pattern::Shape(i, _)
            | Pattern::Where(i, _) => (Some(i), &[]),
            Pattern::Wildcard | Pattern::Const | Pattern::AnyTuple => (None, &[]),
        };
        one.into_iter().chain(many)
    }

    /// The capture ids bound anywhere in the pattern (with repetitions).
    pub fn capture_ids(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(x) = stack.pop() {
            if let Pattern::Capture(id, _) = x {
                out.push(*id);
            }
            stack.extend(x.children());
        }
        out
    }
}

/// A typed predicate expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Pred {
    /// A constant.
    Lit(Lit),
    /// The value bound to capture `n`.
    Capture(u32),
    /// A property of a tensor-valued expression.
    Prop(Box<Pred>, Prop),
    /// Attribute `name` of the call bound to a capture.
    Attr(Box<Pred>, String),
    /// Argument `i` of the call bound to a capture.
    Arg(Box<Pred>, Box<Pred>),
    /// `xs[i]`
    Index(Box<Pred>, Box<Pred>),
    /// `[a, b]`
    List(Vec<Pred>),
    /// A unary operation.
    Unary(crate::rules::dsl::ast::UnOp, Box<Pred>),
    /// A binary operation.
    Binary(crate::rules::dsl::ast::BinOp, Box<Pred>, Box<Pred>),
    /// A built-in function.
    Call(Builtin, Vec<Pred>),
}

/// Literal values in predicates.
#[derive(Clone, Debug, PartialEq)]
pub enum Lit {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A boolean.
    Bool(bool),
    /// A dtype.
    DType(DType),
}

/// Properties of tensors in predicates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prop {
    /// `.dtype`
    DType,
    /// `.shape`
    Shape,
    /// `.rank`
    Rank,
    /// `.is_const`
    IsConst,
    /// `.value`: the value of a scalar literal constant (`0.5f`, `3i64`)
    Value,
}

impl Prop {
    /// The name as written.
    pub fn name(self) -> &'static str {
        match self {
            Prop::DType => "dtype",
            Prop::Shape => "shape",
            Prop::Rank => "rank",
            Prop::IsConst => "is_const",
            Prop::Value => "value",
        }
    }
}

/// Built-in predicate functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    /// `len(xs)`
    Len,
    /// `product(xs)`
    Product,
    /// `sum(xs)`
    Sum,
    /// `min(xs)`
    Min,
    /// `max(xs)`
    Max,
    /// `all(xs)`
    All,
    /// `any(xs)`
    Any,
}

impl Builtin {
    /// All built-ins with their names.
    pub const ALL: &'static [(Builtin, &'static str)] = &[
        (Builtin::Len, "len"),
        (Builtin::Product, "product"),
        (Builtin::Sum, "sum"),
        (Builtin::Min, "min"),
        (Builtin::Max, "max"),
        (Builtin::All, "all"),
        (Builtin::Any, "any"),
    ];

    /// The name as written.
    pub fn name(self) -> &'static str {
        Builtin::ALL
            .iter()
            .find(|(b, _)| *b == self)
            .map_or("?", |(_, n)| n)
    }
}

/// One combiner rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Combiner {
    /// Joins upstream ≤ first kind with downstream ≤ second kind, for each pair.
    ByKind(Vec<(OpPattern, OpPattern)>),
    /// I → tuple → I.
    TupleArg,
    /// A candidate with its tuple projections.
    TupleProj,
    /// A candidate with the tensor constants it reads.
    Constant,
}

/// Sub-graph validity limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubGraphConfig {
    /// Maximum depth (`None` = the target's or the command line's default).
    pub max_depth: Option<u32>,
    /// Maximum number of exits (0 = unlimited).
    pub max_exits: u32,
    /// Whether an exit may also feed a node inside.
    pub allow_taps: bool,
}

/// A partition rule tree.
#[derive(Clone, Debug, PartialEq)]
pub enum Rule {
    /// Every match of a pattern; `name` is the pattern's name for labels.
    Pattern {
        /// The pattern's name (or empty for inline patterns).
        name: String,
        /// The pattern.
        pattern: Pattern,
    },
    /// A singleton for each call of a listed operator whose predicate holds.
    Ops {
        /// The operators and their predicates (over capture 0, the call).
        entries: Vec<(OpId, Option<Pred>)>,
        /// Composite-name prefix: each candidate is wrapped in `Composite=prefix+opname`.
        prefix: Option<String>,
    },
    /// A singleton for each operator call of kind ≤ out_ewise_fusable.
    OpCallByKind,
    /// A singleton (cost zero) for each node that need not be lowered.
    Host,
    /// Wraps candidates in a `Composite` function.
    Composite(String, Box<Rule>),
    /// Wraps candidates in a `Primitive` function.
    Primitive(Box<Rule>),
    /// All candidates of all sub-rules.
    Union(Vec<Rule>),
    /// Grows candidates with combiners to a fixed point.
    Combine {
        /// The candidates to grow.
        sub: Box<Rule>,
        /// The combiners, in order.
        combiners: Vec<Combiner>,
        /// Depth limit of a union (`None` = default).
        max_depth: Option<u32>,
    },
    /// Keeps only valid candidates.
    OnlyValid(Box<Rule>, SubGraphConfig),
}

/// How a BYOC target's composites may be fused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FusionStyle {
    /// Each composite is its own partition.
    None,
    /// FuseOps-like: A->B, B->R, I->I.
    Tvm,
    /// Any touching pair of non-opaque candidates.
    Arbitrary,
}

impl FusionStyle {
    /// The name as written.
    pub fn name(self) -> &'static str {
        match self {
            FusionStyle::None => "none",
            FusionStyle::Tvm => "tvm",
            FusionStyle::Arbitrary => "arbitrary",
        }
    }
}

/// Cost parameters for the analytic estimator (SI units).
#[derive(Clone, Debug, PartialEq)]
pub struct CostParams {
    /// Peak arithmetic throughput in FLOP/s.
    pub peak_flops: Option<f64>,
    /// Memory bandwidth in bytes/s.
    pub bandwidth: Option<f64>,
    /// Fixed cost per kernel in seconds.
    pub launch: Option<f64>,
    /// Achieved fraction of peak, per operator.
    pub efficiency: Vec<(OpId, f64)>,
    /// Achieved fraction of peak for other operators.
    pub default_efficiency: Option<f64>,
}

/// The cost of entering a target's partitions and of moving data into or out of them
/// (docs/partition.md, "Transition penalties").
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transition {
    /// Seconds every partition pays to enter and leave the target's runtime, wherever its
    /// data comes from.
    pub dispatch: Option<f64>,
    /// Seconds a partition pays once when some of its data crosses to or from another device.
    pub latency: Option<f64>,
    /// Bytes/s at which the data crossing devices moves.
    pub bandwidth: Option<f64>,
}

/// A compiled target.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// Target name.
    pub name: String,
    /// BYOC compiler name (`None` for native and host targets).
    pub compiler: Option<String>,
    /// Whether this is the host target.
    pub is_host: bool,
    /// Where it runs.
    pub device: VirtualDevice,
    /// Fusion style (BYOC targets).
    pub fusion: Option<FusionStyle>,
    /// Depth limit for this target's candidates (`None` = the command-line default).
    pub max_depth: Option<u32>,
    /// Depth limit for this target's greedy regions and for the coalescing of its chosen
    /// partitions (`None` = the limit its candidates have; `Some(u32::MAX)` for `unlimited`).
    pub region_depth: Option<u32>,
    /// The target this one refines, by index in [`Program::targets`].
    pub refines: Option<usize>,
    /// Cost parameters.
    pub cost: CostParams,
    /// Transition penalty.
    pub transition: Transition,
    /// The partition rule tree.
    pub rule: Rule,
    /// Where the target is declared (its name), for diagnostics about it.
    pub span: crate::source::Span,
}

/// A declared custom operator.
#[derive(Clone, Debug, PartialEq)]
pub struct CustomOp {
    /// Name.
    pub name: String,
    /// Argument names.
    pub args: Vec<String>,
    /// Pattern kind.
    pub kind: OpPattern,
}

/// A checked, compiled rule set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    /// Targets in declaration order (files in load order).
    pub targets: Vec<Target>,
    /// Declared equivalences.
    pub equivalences: Vec<(Pattern, Pattern)>,
    /// Declared rewrites.
    pub rewrites: Vec<(Pattern, Pattern)>,
    /// Where each equivalence is declared (for diagnostics).
    pub equivalence_spans: Vec<Span>,
    /// Where each rewrite is declared.
    pub rewrite_spans: Vec<Span>,
    /// Declared custom operators.
    pub custom_ops: Vec<CustomOp>,
}

impl Program {
    /// The target with the given name.
    pub fn target(&self, name: &str) -> Option<&Target> {
        self.targets.iter().find(|t| t.name == name)
    }
}
