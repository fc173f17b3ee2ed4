//! `collage`: partitions ML models written in TVM's Relay text format across backends.
//!
//! See `docs/overview.md` for the pipeline and module map.
#![deny(missing_docs)]

// Foundation.
pub mod diag;
pub mod ir;
pub mod ops;
pub mod source;
pub mod util;

// Phases, in pipeline order.
pub mod analysis;
pub mod frontend;
pub mod planning;
pub mod rules;
pub mod runtime;

// The front door and the commands.
pub mod driver;
pub mod pipeline;
