//! Front ends: models in (Relay text, ONNX files) and generated models, each producing an
//! `ir::Module`.
//!
//! `docs/overview.md` gives the layers and what each module does.

pub mod gen;
pub mod onnx;
pub mod relay;
