//! Execution: tensors and values, weights and inputs, the reference implementation of every
//! operator the interpreter supports, programs with their memory plan, and the executor that
//! runs `@main` with kernels from the backends ([`crate::backend`]).
//!
//! * [`tensor`], [`value`]: tensors (dtype, static shape, row-major bytes) and tuples of them.
//! * [`data`]: weights (metadata data, or pseudo-random data from a seed) and inputs.
//! * [`npy`]: reading and writing NumPy `.npy` files.
//! * [`ops`]: the reference operator implementations, one file per family as in
//!   [`crate::ops`].
//! * [`program`]: a function body (or a group of expressions) lowered into steps over value
//!   slots, freed after their last use.
//! * [`executor`]: `@main` compiled with the backends and run; the peak of live bytes.
//! * [`compare`]: output summaries and comparisons with tolerances.
//!
//! `docs/execution.md` describes all of it for users.

pub mod compare;
pub mod data;
pub mod executor;
pub mod memory;
pub mod npy;
pub mod ops;
pub mod program;
pub mod tensor;
pub mod value;
