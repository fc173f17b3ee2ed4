//! The rules language: its grammar and lowering (`dsl`), name resolution and checks (`sema`),
//! the compiled rule trees (`ruletree`) and the shipped library's texts (`library`).
//!
//! `docs/overview.md` gives the layers and what each module does.

pub mod dsl;
pub mod library;
pub mod ruletree;
pub mod sema;
