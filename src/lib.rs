//! `collage`: partitions ML models written in TVM's Relay text format across backends.
//!
//! See `docs/overview.md` for the pipeline and module map.
#![deny(missing_docs)]

pub mod backend;
pub mod cost;
pub mod dataflow;
pub mod devices;
pub mod diag;
pub mod driver;
pub mod dsl;
pub mod enumerate;
pub mod exec;
pub mod ffi;
pub mod fuse;
pub mod gen;
pub mod ir;
pub mod library;
pub mod measure;
pub mod onnx;
pub mod ops;
pub mod partition;
pub mod pipeline;
pub mod relay;
pub mod ruletree;
pub mod search;
pub mod sema;
pub mod source;
pub mod typeck;
pub mod util;
pub mod work;
