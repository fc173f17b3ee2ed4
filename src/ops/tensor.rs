//! Elementwise and broadcasting tensor operators.

use super::{rel, OpDef, OpPattern};

pub(super) const OPS: &[OpDef] = &[
    OpDef {
        name: "add",
        args: &["lhs", "rhs"],
        attrs: &[],
        pattern: OpPattern::Broadcast,
        rel: rel::broadcast,
    },
    OpDef {
        name: "nn.relu",
        args: &["data"],
        attrs: &[],
        pattern: OpPattern::ElemWise,
        rel: rel::identity,
    },
];
