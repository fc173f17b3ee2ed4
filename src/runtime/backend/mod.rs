//! Backends: what compiles a piece of a model into something that runs on this machine, beyond
//! the reference interpreter.
//!
//! Each backend implements the kernel interface of [`crate::runtime::exec::kernel`] (compile a unit
//! once, prepare it per call site, run it many times; a unit it cannot run is
//! [`Unsupported`](crate::runtime::exec::kernel::Unsupported) and falls back to the next backend, in the
//! end to the reference interpreter, [`crate::runtime::exec::reference`]):
//!
//! * [`native`]: C code generated for FuseOps groups and `Primitive=1` functions, compiled by
//!   the system C compiler, with a kernel cache;
//! * [`dnnl`] and [`openblas`]: `Compiler="dnnl"` and `Compiler="openblas"` partitions, read as
//!   graphs of composites ([`byoc`]) and run as oneDNN primitives and `cblas_sgemm` calls;
//! * [`registry`]: the one registry of this machine's backends: one probe per library with its
//!   version (`collage backends`), the one place each backend is constructed, the libraries a
//!   plan needs (`collage run`) and the backends of a set of targets (`collage bench`, the
//!   measuring estimator);
//! * [`ort`]: ONNX Runtime sessions running whole ONNX models on collage's tensors, the
//!   yardstick `collage bench` compares with.
//!
//! This layer sits above [`crate::runtime::exec`], which never refers to it: the executor is handed the
//! backends to use as [`Backends`](crate::runtime::exec::kernel::Backends).

pub mod byoc;
pub mod dnnl;
pub mod native;
pub mod openblas;
pub mod ort;
pub mod registry;
