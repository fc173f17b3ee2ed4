//! Execution: tensors and values, weights and inputs, the kernel interface every backend
//! implements, the reference implementation of every operator the interpreter supports,
//! programs with their memory plan, the reference interpreter, and the executor that runs
//! `@main` with kernels from the backends it is given.
//!
//! From the bottom up (each layer uses only those before it):
//!
//! * [`tensor`], [`value`]: tensors (dtype, static shape, row-major bytes) and tuples of them.
//! * [`kernel`]: the kernel interface: units and groups, backends, kernels and prepared
//!   kernels, what cannot be compiled ([`kernel::Unsupported`]) and what fails while running
//!   ([`kernel::RunError`]), the memory counter and reused storage a running kernel is given.
//! * [`ops`]: the reference operator implementations, one file per family as in
//!   [`crate::ops`].
//! * [`data`]: weights (metadata data, or pseudo-random data from a seed) and inputs.
//! * [`npy`]: reading and writing NumPy `.npy` files.
//! * [`program`]: a function body (or a group of expressions) lowered into steps over value
//!   slots, freed after their last use.
//! * [`reference`](mod@reference): the reference interpreter as a backend, the last resort of every unit.
//! * [`executor`]: `@main` compiled with the backends and run; the peak of live bytes.
//! * [`memory`]: the memory a model needs against what the machine has.
//! * [`compare`]: output summaries and comparisons with tolerances.
//!
//! The backends beyond the reference interpreter (generated code, oneDNN, OpenBLAS) are in
//! [`crate::runtime::backend`], above this module, which never refers to them: the executor is handed
//! them as [`kernel::Backends`].
//!
//! `docs/execution.md` describes all of it for users.

pub mod compare;
pub mod data;
pub mod executor;
pub mod kernel;
pub mod memory;
pub mod npy;
pub mod ops;
pub mod program;
pub mod reference;
pub mod tensor;
pub mod value;
