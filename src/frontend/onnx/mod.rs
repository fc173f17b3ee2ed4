//! The ONNX front end's lower layer: decoding, weights, checks, shape binding and folding.
//!
//! - [`load_file`] / [`load_bytes`] decode a model (prost, over a memory map) into a checked
//!   [`Model`]: weights from initializers, `Constant` nodes and external data, as typed views
//!   ([`TensorData`]) that share the mapped bytes; nodes in topological order; every problem a
//!   coded diagnostic (`E30xx`) naming the file and the node or tensor.
//! - [`shapes`] binds the unknown dimensions of the inputs (`x=1x3x224x224`, `batch=1`) and
//!   inputs to constants.
//! - [`fold`] evaluates shape computations on known values, node by node.
//! - [`names`] maps ONNX value names to Relay identifiers and back.
//!
//! The mapping of ONNX operators onto collage's operators sits above this layer.
//! `docs/onnx.md` describes the rules and limits.

pub mod builder;
pub mod fold;
pub mod import;
mod model;
pub mod names;
pub mod proto;
pub mod shapes;
mod tensor;
mod weights;

pub use model::{
    load_bytes, load_file, AttrValue, Attribute, Dim, Graph, Model, Node, ValueInfo, Weight,
    MAX_ERRORS, MAX_IR_VERSION,
};
pub use tensor::{element_count, onnx_type_name, DType, TensorData, MAX_ELEMENTS};
