//! The runtime: run-time loaded libraries (`ffi`), execution with the kernel interface and the
//! reference interpreter (`exec`), graph simplification before partitioning (`simplify`), the backends (`backend`) and measured costs (`measure`).
//!
//! `docs/overview.md` gives the layers and what each module does.

pub mod backend;
pub mod exec;
pub mod ffi;
pub mod measure;
pub mod simplify;
