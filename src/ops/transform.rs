//! Operators (to be filled in).

use super::OpDef;

pub(super) const OPS: &[OpDef] = &[];
