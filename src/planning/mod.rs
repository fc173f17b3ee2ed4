//! Planning: candidate enumeration, cost estimation, the exact search and the partitioned
//! program.
//!
//! `docs/overview.md` gives the layers and what each module does.

pub mod cost;
pub mod enumerate;
pub mod partition;
pub mod search;
