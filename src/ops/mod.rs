//! The operator registry: every Relay operator the tool knows, with its arity, attribute schema
//! (names, types, defaults), pattern kind (TVM's `TOpPattern`) and type relation.
//!
//! Each operator is an [`Op`] (its identity, which consumers match on) and one entry in one of
//! the per-family tables (`tensor`, `nn`, `norm`, `conv`, `deconv`, `pool`, `transform`, `slice`,
//! `reduce`, `misc`): argument names, attribute schema, kind and relation. Relations are plain
//! functions from argument types and attributes to the result type; the shared ones live in
//! [`rel`], the window arithmetic of convolution and pooling in [`geom`].
//! `docs/overview.md` lists the steps of adding an operator.

mod conv;
mod deconv;
pub mod geom;
pub mod layout;
mod misc;
mod nn;
mod norm;
mod op;
mod pool;
mod reduce;
pub mod rel;
mod slice;
mod tensor;
mod transform;

use crate::ir::{AttrField, AttrValue, Attrs, DType, OpId, TensorType, Type};
pub use op::Op;
pub use slice::{slice_axis, strided_plan, SliceAxis};
use std::collections::HashMap;
use std::fmt;
use std::sync::OnceLock;
pub use transform::transpose_perm;

/// TVM's operator pattern kinds, ordered as TVM orders them (smaller fuses more readily).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpPattern {
    /// Elementwise (`E`).
    ElemWise = 0,
    /// Broadcasting (`B`).
    Broadcast = 1,
    /// Injective (`I`).
    Injective = 2,
    /// Commutative reduction (`R`).
    CommReduce = 3,
    /// Complex op whose output can take elementwise consumers (`A`).
    OutEWiseFusable = 4,
    /// A tuple node (`T`).
    Tuple = 7,
    /// Never fused (`O`).
    Opaque = 8,
}

impl OpPattern {
    /// The one-letter name TVM uses in logs.
    pub fn letter(self) -> char {
        match self {
            OpPattern::ElemWise => 'E',
            OpPattern::Broadcast => 'B',
            OpPattern::Injective => 'I',
            OpPattern::CommReduce => 'R',
            OpPattern::OutEWiseFusable => 'A',
            OpPattern::Tuple => 'T',
            OpPattern::Opaque => 'O',
        }
    }

    /// The lowercase name used in the rules language (`elemwise`, `broadcast`, ...).
    pub fn name(self) -> &'static str {
        match self {
            OpPattern::ElemWise => "elemwise",
            OpPattern::Broadcast => "broadcast",
            OpPattern::Injective => "injective",
            OpPattern::CommReduce => "comm_reduce",
            OpPattern::OutEWiseFusable => "out_ewise_fusable",
            OpPattern::Tuple => "tuple",
            OpPattern::Opaque => "opaque",
        }
    }

    /// Parses a lowercase kind name.
    pub fn from_name(s: &str) -> Option<OpPattern> {
        [
            OpPattern::ElemWise,
            OpPattern::Broadcast,
            OpPattern::Injective,
            OpPattern::CommReduce,
            OpPattern::OutEWiseFusable,
            OpPattern::Tuple,
            OpPattern::Opaque,
        ]
        .into_iter()
        .find(|k| k.name() == s)
    }
}

impl fmt::Display for OpPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a type relation rejected a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelError {
    /// What was expected and what was found, lowercase, no trailing period.
    pub message: String,
    /// The argument the problem is about, if one is to blame.
    pub arg: Option<usize>,
}

impl RelError {
    /// An error about the call as a whole.
    pub fn new(message: impl Into<String>) -> RelError {
        RelError {
            message: message.into(),
            arg: None,
        }
    }

    /// An error about argument `i`.
    pub fn at(i: usize, message: impl Into<String>) -> RelError {
        RelError {
            message: message.into(),
            arg: Some(i),
        }
    }
}

/// A type relation: computes the result type of a call from its argument types and attributes.
pub type TypeRel = fn(&RelCall<'_>) -> Result<Type, RelError>;

/// One registered operator.
#[derive(Clone, Copy, Debug)]
pub struct OpDef {
    /// The operator's identity, which consumers match on.
    pub op: Op,
    /// Registry name, e.g. `nn.conv2d`.
    pub name: &'static str,
    /// Names of the positional arguments; their number is the operator's arity.
    pub args: &'static [&'static str],
    /// Attribute schema in declaration (and printing) order.
    pub attrs: &'static [AttrField],
    /// Pattern kind.
    pub pattern: OpPattern,
    /// Type relation.
    pub rel: TypeRel,
}

impl OpDef {
    /// Number of positional arguments.
    pub fn arity(&self) -> usize {
        self.args.len()
    }

    /// The schema entry of an attribute.
    pub fn attr_field(&self, name: &str) -> Option<&'static AttrField> {
        self.attrs.iter().find(|f| f.name == name)
    }
}

/// The arguments of one type-relation evaluation, with typed accessors for attributes.
pub struct RelCall<'a> {
    /// The operator.
    pub op: &'a OpDef,
    /// Argument types (all complete).
    pub args: &'a [Type],
    /// Attribute values aligned with `op.attrs`.
    pub attrs: &'a Attrs,
}

impl<'a> RelCall<'a> {
    /// Argument `i` as a tensor type.
    pub fn tensor(&self, i: usize) -> Result<&'a TensorType, RelError> {
        match self.args.get(i) {
            Some(Type::Tensor(t)) => Ok(t),
            Some(other) => Err(RelError::at(
                i,
                format!(
                    "argument `{}` of `{}` must be a tensor, found `{other}`",
                    self.arg_name(i),
                    self.op.name
                ),
            )),
            None => Err(RelError::new(format!(
                "`{}` lacks argument {i}",
                self.op.name
            ))),
        }
    }

    /// Argument `i` as a tuple of tensor types.
    pub fn tensors_of_tuple(&self, i: usize) -> Result<Vec<&'a TensorType>, RelError> {
        match self.args.get(i) {
            Some(Type::Tuple(fields)) => fields
                .iter()
                .map(|f| {
                    f.as_tensor().ok_or_else(|| {
                        RelError::at(
                            i,
                            format!(
                                "fields of the tuple passed to `{}` must be tensors",
                                self.op.name
                            ),
                        )
                    })
                })
                .collect(),
            Some(other) => Err(RelError::at(
                i,
                format!(
                    "`{}` expects a tuple of tensors, found `{other}`",
                    self.op.name
                ),
            )),
            None => Err(RelError::new(format!(
                "`{}` lacks argument {i}",
                self.op.name
            ))),
        }
    }

    /// The name of argument `i`.
    pub fn arg_name(&self, i: usize) -> &'static str {
        self.op.args.get(i).copied().unwrap_or("?")
    }

    /// The raw value of an attribute (which must be in the schema).
    pub fn attr(&self, name: &str) -> &'a AttrValue {
        static NONE: AttrValue = AttrValue::None;
        self.attrs.get(self.op.attrs, name).unwrap_or(&NONE)
    }

    /// An integer attribute.
    pub fn int(&self, name: &str) -> Result<i64, RelError> {
        self.attr(name).as_int().ok_or_else(|| {
            RelError::new(format!(
                "attribute `{name}` of `{}` must be an integer",
                self.op.name
            ))
        })
    }

    /// An integer attribute that may be `None`.
    pub fn opt_int(&self, name: &str) -> Option<i64> {
        self.attr(name).as_int()
    }

    /// An integer-array attribute.
    pub fn ints(&self, name: &str) -> Result<Vec<i64>, RelError> {
        self.attr(name).as_ints().ok_or_else(|| {
            RelError::new(format!(
                "attribute `{name}` of `{}` must be an array of integers",
                self.op.name
            ))
        })
    }

    /// An integer-array attribute that may be `None`.
    pub fn opt_ints(&self, name: &str) -> Option<Vec<i64>> {
        self.attr(name).as_ints()
    }

    /// A float attribute.
    pub fn float(&self, name: &str) -> Result<f64, RelError> {
        self.attr(name).as_f64().ok_or_else(|| {
            RelError::new(format!(
                "attribute `{name}` of `{}` must be a number",
                self.op.name
            ))
        })
    }

    /// A boolean attribute.
    pub fn bool(&self, name: &str) -> Result<bool, RelError> {
        self.attr(name).as_bool().ok_or_else(|| {
            RelError::new(format!(
                "attribute `{name}` of `{}` must be a boolean",
                self.op.name
            ))
        })
    }

    /// A string attribute.
    pub fn str(&self, name: &str) -> Result<&'a str, RelError> {
        self.attr(name).as_str().ok_or_else(|| {
            RelError::new(format!(
                "attribute `{name}` of `{}` must be a string",
                self.op.name
            ))
        })
    }

    /// A dtype attribute; `None` when empty (unset).
    pub fn dtype(&self, name: &str) -> Result<Option<DType>, RelError> {
        match self.attr(name) {
            AttrValue::Str(s) if s.is_empty() => Ok(None),
            AttrValue::Str(s) => DType::parse(s)
                .map(Some)
                .ok_or_else(|| RelError::new(format!("`{s}` is not a dtype"))),
            AttrValue::None => Ok(None),
            _ => Err(RelError::new(format!(
                "attribute `{name}` of `{}` must be a dtype string",
                self.op.name
            ))),
        }
    }
}

/// All known operators, with lookup by name.
pub struct Registry {
    ops: Vec<OpDef>,
    by_name: HashMap<&'static str, OpId>,
}

impl Registry {
    /// Gathers the per-family tables and puts every definition at the index of its [`Op`].
    ///
    /// Panics when a built-in operator has no definition or more than one: the tables and the
    /// [`Op`] enum disagree, which every test then reports.
    fn build() -> Registry {
        let mut slots: Vec<Option<OpDef>> = vec![None; Op::BUILTIN.len()];
        for table in [
            tensor::OPS,
            nn::OPS,
            norm::OPS,
            conv::OPS,
            deconv::OPS,
            pool::OPS,
            transform::OPS,
            slice::OPS,
            reduce::OPS,
            misc::OPS,
        ] {
            for d in table {
                let slot = slots
                    .get_mut(d.op as usize)
                    .unwrap_or_else(|| panic!("`{}` is defined as a custom operator", d.name));
                assert!(slot.is_none(), "`{}` is defined twice", d.name);
                *slot = Some(*d);
            }
        }
        let ops: Vec<OpDef> = slots
            .into_iter()
            .zip(Op::BUILTIN)
            .map(|(d, op)| d.unwrap_or_else(|| panic!("`{op}` has no definition")))
            .collect();
        let by_name = ops
            .iter()
            .enumerate()
            .map(|(i, d)| (d.name, OpId(i as u16)))
            .collect();
        Registry { ops, by_name }
    }

    /// The operator with the given name (built-in or declared in a rules file).
    pub fn lookup(&self, name: &str) -> Option<OpId> {
        if let Some(id) = self.by_name.get(name) {
            return Some(*id);
        }
        let custom = CUSTOM.read().unwrap_or_else(|e| e.into_inner());
        custom
            .iter()
            .rposition(|d| d.name == name)
            .map(|i| OpId(CUSTOM_BASE + i as u16))
    }

    /// The definition of an operator.
    pub fn get(&self, id: OpId) -> &'static OpDef {
        if id.0 >= CUSTOM_BASE {
            let custom = CUSTOM.read().unwrap_or_else(|e| e.into_inner());
            if let Some(d) = custom.get((id.0 - CUSTOM_BASE) as usize) {
                return d;
            }
        }
        let reg: &'static Registry = registry();
        &reg.ops[(id.0 as usize).min(reg.ops.len() - 1)]
    }

    /// All operators in registration order.
    pub fn iter(&self) -> impl Iterator<Item = (OpId, &OpDef)> {
        self.ops
            .iter()
            .enumerate()
            .map(|(i, d)| (OpId(i as u16), d))
    }

    /// The registered name closest to `name` (for "did you mean" hints), if any is close.
    pub fn suggest(&self, name: &str) -> Option<&'static str> {
        crate::util::closest(name, self.ops.iter().map(|d| d.name))
    }
}

/// Whether an operator was declared in a rules file (rather than built in).
pub fn is_custom(op: OpId) -> bool {
    op.0 >= CUSTOM_BASE
}

/// Ids of custom operators start here.
const CUSTOM_BASE: u16 = 0x8000;

/// Custom operators declared by rules files, for the life of the process.
static CUSTOM: std::sync::RwLock<Vec<&'static OpDef>> = std::sync::RwLock::new(Vec::new());

/// Registers an operator declared in a rules file. Its type is that of its first argument (or
/// `float32` scalar if it has none). Declaring the same operator again with the same arguments
/// and kind returns the same id; a different declaration shadows the earlier one. Built-in
/// operators cannot be redeclared.
pub fn register_custom(name: &str, args: &[String], kind: OpPattern) -> Result<OpId, String> {
    let reg = registry();
    if reg.by_name.contains_key(name) {
        return Err("an operator of that name is built in".into());
    }
    let mut custom = CUSTOM.write().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = custom.iter().rposition(|d| d.name == name) {
        let d = custom[i];
        let same = d.pattern == kind
            && d.args.len() == args.len()
            && d.args.iter().zip(args).all(|(a, b)| *a == b);
        if same {
            return Ok(OpId(CUSTOM_BASE + i as u16));
        }
        // A different declaration (another rule set in this process) shadows the old one.
    }
    if custom.len() >= (u16::MAX - CUSTOM_BASE) as usize {
        return Err("too many custom operators".into());
    }
    let leaked_args: Vec<&'static str> = args
        .iter()
        .map(|a| &*Box::leak(a.clone().into_boxed_str()))
        .collect();
    let def: &'static OpDef = Box::leak(Box::new(OpDef {
        op: Op::Custom,
        name: Box::leak(name.to_string().into_boxed_str()),
        args: Box::leak(leaked_args.into_boxed_slice()),
        attrs: &[],
        pattern: kind,
        rel: custom_rel,
    }));
    custom.push(def);
    Ok(OpId(CUSTOM_BASE + (custom.len() - 1) as u16))
}

fn custom_rel(c: &RelCall<'_>) -> Result<Type, RelError> {
    match c.args.first() {
        Some(t) => Ok(t.clone()),
        None => Ok(Type::Tensor(TensorType::scalar(DType::F32))),
    }
}

/// The global registry.
pub fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(Registry::build)
}

/// The definition of an operator in the global registry.
pub fn op(id: OpId) -> &'static OpDef {
    registry().get(id)
}

/// The definition of a built-in operator (`None` for [`Op::Custom`]).
pub fn def_of(op: Op) -> Option<&'static OpDef> {
    op.id().map(|id| registry().get(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        let reg = registry();
        let mut names: Vec<_> = reg.iter().map(|(_, d)| d.name).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(n, names.len(), "duplicate operator name");
        for (id, d) in reg.iter() {
            assert_eq!(reg.lookup(d.name), Some(id));
        }
    }

    #[test]
    fn every_op_is_defined_once_at_its_own_id() {
        let reg = registry();
        assert_eq!(reg.iter().count(), Op::BUILTIN.len());
        for (id, d) in reg.iter() {
            assert_eq!(d.op.id(), Some(id), "`{}`", d.name);
            assert_eq!(d.op.name(), d.name);
            assert_eq!(def_of(d.op).map(|x| x.name), Some(d.name));
        }
        assert_eq!(def_of(Op::Custom).map(|d| d.name), None);
    }

    #[test]
    fn attribute_names_are_unique_per_operator() {
        for (_, d) in registry().iter() {
            let mut names: Vec<_> = d.attrs.iter().map(|f| f.name).collect();
            names.sort();
            let n = names.len();
            names.dedup();
            assert_eq!(n, names.len(), "duplicate attribute in {}", d.name);
        }
    }

    #[test]
    fn defaults_satisfy_their_own_field_types() {
        for (_, d) in registry().iter() {
            for f in d.attrs {
                let v = f.default.value();
                if matches!(
                    f.default,
                    crate::ir::AttrDefault::Required | crate::ir::AttrDefault::None
                ) {
                    continue;
                }
                assert!(
                    f.ty.coerce(v).is_ok(),
                    "{}.{} default does not fit",
                    d.name,
                    f.name
                );
            }
        }
    }
}
