//! Analysis of a typed module: type inference, device planning, the dataflow graph, the
//! work of each operator and TVM's FuseOps grouping.
//!
//! `docs/overview.md` gives the layers and what each module does.

pub mod dataflow;
pub mod devices;
pub mod fuse;
pub mod typeck;
pub mod work;
