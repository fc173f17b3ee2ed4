//! The ONNX messages, generated at build time from `grammar/onnx.proto` (a subset of ONNX's
//! schema with its published field numbers). `bytes` fields are `bytes::Bytes`.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
