//! Decoding an ONNX file into a checked [`Model`]: weights out of initializers, `Constant` nodes
//! and external data; inputs, outputs and declared value types; nodes in topological order.

use super::proto::{self, attribute_proto::AttributeType, tensor_shape_proto, type_proto};
use super::tensor::{element_count, onnx_type_name, DType, TensorData};
use super::weights::{map_file, shape_message, tensor_diagnostic, TensorReader};
use crate::diag::*;
use bytes::Bytes;
use prost::Message;
use rustc_hash::FxHashMap;
use std::path::{Path, PathBuf};

/// The newest ONNX IR version collage knows. Newer files are read as this version, with W3052.
pub const MAX_IR_VERSION: i64 = 11;

/// At most this many errors are reported for one model; the rest are summarised in a note.
pub const MAX_ERRORS: usize = 20;

/// A decoded and checked ONNX model.
#[derive(Clone, Debug)]
pub struct Model {
    /// The file as the user named it (`<bytes>` for a model read from memory).
    pub file: String,
    /// The IR version the file declares (3 or more).
    pub ir_version: i64,
    /// The producing tool and its version, such as `pytorch 1.13.1`.
    pub producer: String,
    /// The version of the default (`ai.onnx`) operator set.
    pub opset: i64,
    /// The main graph.
    pub graph: Graph,
    /// Warnings found while reading.
    pub warnings: Vec<Diagnostic>,
}

/// The main graph of a model.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// The graph's name.
    pub name: String,
    /// The inputs the caller supplies. Inputs that name an initializer (as IR 3 files list them)
    /// are weights, not inputs.
    pub inputs: Vec<ValueInfo>,
    /// The outputs.
    pub outputs: Vec<ValueInfo>,
    /// Types declared for intermediate values (`value_info`), when the exporter wrote them.
    pub value_info: Vec<ValueInfo>,
    /// The weights: initializers in file order, then the outputs of `Constant` nodes.
    pub weights: Vec<Weight>,
    /// The nodes other than `Constant`, in topological order (dependencies first).
    pub nodes: Vec<Node>,
}

/// A named weight.
#[derive(Clone, Debug, PartialEq)]
pub struct Weight {
    /// The value name nodes use.
    pub name: String,
    /// Its data.
    pub data: TensorData,
    /// For a `Constant` node's output, the node's position in the file.
    pub constant_node: Option<usize>,
}

/// A graph input, output or declared value: name, element type and shape when known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueInfo {
    /// The ONNX value name.
    pub name: String,
    /// The element type, when declared (inputs and outputs always have one).
    pub dtype: Option<DType>,
    /// The dimensions, when the rank is declared.
    pub shape: Option<Vec<Dim>>,
}

/// One dimension of a declared shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A fixed size.
    Fixed(u64),
    /// A named symbolic size (`batch`, `sequence`), bound with `symbol=N`.
    Symbol(String),
    /// A size without a name or value.
    Unknown,
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Symbol(s) => write!(f, "{s}"),
            Dim::Unknown => write!(f, "?"),
        }
    }
}

/// A node of the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Position in the file's node list (from 0), the index diagnostics name.
    pub index: usize,
    /// The node's name (optional in ONNX, so possibly empty).
    pub name: String,
    /// The operator, such as `MatMul`.
    pub op_type: String,
    /// Input value names; an empty name is an omitted optional input.
    pub inputs: Vec<String>,
    /// Output value names; an empty name is an omitted optional output.
    pub outputs: Vec<String>,
    /// Attributes in file order.
    pub attributes: Vec<Attribute>,
}

/// A node attribute.
#[derive(Clone, Debug, PartialEq)]
pub struct Attribute {
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: AttrValue,
}

/// An attribute value. Graph-valued attributes are refused (control flow is out of scope),
/// and so are sparse tensors.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// `f`.
    Float(f32),
    /// `i`.
    Int(i64),
    /// `s`, as text (invalid UTF-8 replaced).
    String(String),
    /// `t`.
    Tensor(TensorData),
    /// `floats`.
    Floats(Vec<f32>),
    /// `ints`.
    Ints(Vec<i64>),
    /// `strings`.
    Strings(Vec<String>),
    /// `tensors`.
    Tensors(Vec<TensorData>),
}

impl Node {
    /// The attribute called `name`.
    pub fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attributes
            .iter()
            .find(|a| a.name == name)
            .map(|a| &a.value)
    }

    /// The place of this node for diagnostics.
    pub fn place(&self, file: &str, opset: i64) -> ModelPlace {
        ModelPlace {
            file: file.to_string(),
            node: Some(NodePlace {
                index: self.index,
                name: self.name.clone(),
                op_type: self.op_type.clone(),
            }),
            tensor: None,
            opset: Some(opset),
        }
    }

    /// The inputs that are present (omitted optional inputs left out).
    pub fn present_inputs(&self) -> impl Iterator<Item = &str> {
        self.inputs
            .iter()
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }
}

impl Model {
    /// The place of a graph-level value or tensor for diagnostics.
    pub fn tensor_place(&self, name: &str) -> ModelPlace {
        tensor_place(&self.file, name)
    }
}

fn tensor_place(file: &str, name: &str) -> ModelPlace {
    ModelPlace {
        file: file.to_string(),
        node: None,
        tensor: Some(name.to_string()),
        opset: None,
    }
}

/// Loads the model at `path`: maps the file, decodes it, reads weights (external data relative
/// to the file's folder) and checks the graph. The file is named in diagnostics as given.
pub fn load_file(path: &Path) -> Result<Model, Vec<Diagnostic>> {
    let file = path.display().to_string();
    let bytes = map_file(path).map_err(|e| {
        vec![Diagnostic::error(E0901, format!("cannot read {file}: {e}"))
            .with_place(file_place(&file))]
    })?;
    let base = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    load_bytes(bytes, &file, Some(&base))
}

/// Loads a model from bytes (which may be a memory map). `file` names it in diagnostics;
/// `base_dir` is the folder external data locations are relative to (without one, a model with
/// external data is refused with E3015).
pub fn load_bytes(
    bytes: Bytes,
    file: &str,
    base_dir: Option<&Path>,
) -> Result<Model, Vec<Diagnostic>> {
    let fail = |code, msg: String| {
        Err(vec![
            Diagnostic::error(code, msg).with_place(file_place(file))
        ])
    };
    if bytes.is_empty() {
        return fail(E3001, "the file is empty".into());
    }
    let m = match proto::ModelProto::decode(bytes) {
        Ok(m) => m,
        Err(e) => return fail(E3001, format!("not a valid ONNX model: {e}")),
    };
    let mut warnings = Vec::new();
    let ir_version = m.ir_version.unwrap_or(0);
    if ir_version < 3 {
        return fail(
            E3002,
            format!("IR version {ir_version} is not supported; collage reads IR versions 3 to {MAX_IR_VERSION}"),
        );
    }
    if ir_version > MAX_IR_VERSION {
        warnings.push(
            Diagnostic::warning(
                W3052,
                format!("IR version {ir_version} is newer than {MAX_IR_VERSION}, the newest collage knows"),
            )
            .with_place(file_place(file)),
        );
    }
    let mut opsets: FxHashMap<String, i64> = FxHashMap::default();
    for o in &m.opset_import {
        let domain = normal_domain(o.domain.as_deref().unwrap_or(""));
        let v = opsets.entry(domain.to_string()).or_insert(0);
        *v = (*v).max(o.version.unwrap_or(0));
    }
    // Without the default operator set, the nodes of other domains are named first (E3004,
    // E3006): that is what such a model (an `ai.onnx.ml` or training model) is about.
    let default_opset = opsets.get("").copied().filter(|&v| v > 0);
    let no_default = || {
        fail(
            E3003,
            "the model imports no version of the default operator set (`ai.onnx`)".into(),
        )
    };
    let Some(g) = m.graph else {
        if default_opset.is_none() {
            return no_default();
        }
        return fail(E3003, "the model has no graph".into());
    };
    let opset = default_opset.unwrap_or(1);
    let producer = [m.producer_name, m.producer_version]
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let mut b = Builder {
        file,
        opsets: &opsets,
        errors: Vec::new(),
        warnings,
        reader: TensorReader::new(base_dir.map(Path::to_path_buf)),
    };
    let graph = b.graph(g);
    if !b.errors.is_empty() {
        return Err(b.errors);
    }
    if default_opset.is_none() {
        return no_default();
    }
    Ok(Model {
        file: file.to_string(),
        ir_version,
        producer,
        opset,
        graph,
        warnings: b.warnings,
    })
}

fn file_place(file: &str) -> ModelPlace {
    ModelPlace {
        file: file.to_string(),
        ..ModelPlace::default()
    }
}

/// `ai.onnx` and the empty domain are the same operator set.
fn normal_domain(d: &str) -> &str {
    if d == "ai.onnx" {
        ""
    } else {
        d
    }
}

/// Who produces a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Producer {
    Input,
    Weight,
    /// A node, by its position in the list of non-`Constant` nodes.
    Node(usize),
    /// A node refused with an error already reported (control flow, another domain, ...): its
    /// readers are not reported again as reading a value without a producer.
    Refused,
}

struct Builder<'a> {
    file: &'a str,
    opsets: &'a FxHashMap<String, i64>,
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
    reader: TensorReader,
}

impl Builder<'_> {
    fn error(&mut self, d: Diagnostic) {
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(d);
        } else if self.errors.len() == MAX_ERRORS {
            self.errors.push(
                Diagnostic::error(d.code, "further errors are not shown")
                    .with_place(file_place(self.file))
                    .with_note(format!(
                        "at most {MAX_ERRORS} errors are reported per model"
                    )),
            );
        }
    }

    fn full(&self) -> bool {
        self.errors.len() > MAX_ERRORS
    }

    fn graph(&mut self, g: proto::GraphProto) -> Graph {
        let mut weights: Vec<Weight> = Vec::new();
        let mut producers: FxHashMap<String, Producer> = FxHashMap::default();
        let file = self.file;
        if let Some(s) = g.sparse_initializer.first() {
            let name = s
                .values
                .as_ref()
                .and_then(|v| v.name.clone())
                .unwrap_or_default();
            self.error(
                Diagnostic::error(E3017, "sparse initializers are not supported")
                    .with_place(tensor_place(file, &name)),
            );
        }
        for t in &g.initializer {
            if self.full() {
                break;
            }
            let name = t.name.clone().unwrap_or_default();
            if name.is_empty() {
                self.error(
                    Diagnostic::error(E3016, "an initializer has no name")
                        .with_place(file_place(file)),
                );
                continue;
            }
            if producers.contains_key(&name) {
                self.error(
                    Diagnostic::error(E3007, format!("two initializers are called `{name}`"))
                        .with_place(tensor_place(file, &name)),
                );
                continue;
            }
            match self.reader.read(t) {
                Ok(data) => {
                    producers.insert(name.clone(), Producer::Weight);
                    weights.push(Weight {
                        name,
                        data,
                        constant_node: None,
                    });
                }
                Err(e) => {
                    // Still a producer, so that its users are not reported as well.
                    producers.insert(name.clone(), Producer::Weight);
                    let d = tensor_diagnostic(e, &name, tensor_place(file, &name));
                    self.error(d);
                }
            }
        }
        // Inputs: those that name an initializer are weights (IR 3 lists every initializer as
        // an input; later IRs allow it, making the initializer the input's default).
        let mut inputs = Vec::new();
        for v in &g.input {
            let info = self.value_info(v, true);
            match producers.get(&info.name) {
                Some(Producer::Weight) => continue,
                Some(_) => self.error(
                    Diagnostic::error(
                        E3007,
                        format!("two graph inputs are called `{}`", info.name),
                    )
                    .with_place(tensor_place(file, &info.name)),
                ),
                None => {
                    producers.insert(info.name.clone(), Producer::Input);
                }
            }
            inputs.push(info);
        }
        let outputs: Vec<ValueInfo> = g.output.iter().map(|v| self.value_info(v, true)).collect();
        let value_info: Vec<ValueInfo> = g
            .value_info
            .iter()
            .map(|v| self.value_info(v, false))
            .collect();

        // Nodes: `Constant`s become weights, the others are checked and kept.
        let mut nodes: Vec<Node> = Vec::new();
        for (index, n) in g.node.into_iter().enumerate() {
            if self.full() {
                break;
            }
            let before = self.errors.len();
            let outs = n.output.clone();
            match self.node(index, n, &mut weights, &mut producers) {
                Some(node) => nodes.push(node),
                None if self.errors.len() > before => {
                    for o in outs.into_iter().filter(|o| !o.is_empty()) {
                        producers.entry(o).or_insert(Producer::Refused);
                    }
                }
                None => {}
            }
        }
        let nodes = self.sort(nodes, &producers, &outputs);
        Graph {
            name: g.name.unwrap_or_default(),
            inputs,
            outputs,
            value_info,
            weights,
            nodes,
        }
    }

    /// A value's declared type. Graph inputs and outputs must be tensors of a supported type;
    /// for other values an unusable declaration is dropped.
    fn value_info(&mut self, v: &proto::ValueInfoProto, io: bool) -> ValueInfo {
        let name = v.name.clone().unwrap_or_default();
        let mut info = ValueInfo {
            name: name.clone(),
            dtype: None,
            shape: None,
        };
        let tensor = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(type_proto::Value::TensorType(t)) => t,
            None => {
                if io {
                    self.error(
                        Diagnostic::error(
                            E3010,
                            format!("graph input or output `{name}` is not a tensor"),
                        )
                        .with_place(tensor_place(self.file, &name))
                        .with_note("sequences, maps and optional values are not supported"),
                    );
                }
                return info;
            }
        };
        let code = tensor.elem_type.unwrap_or(0);
        info.dtype = DType::from_onnx(code);
        if info.dtype.is_none() && io {
            self.error(
                Diagnostic::error(
                    E3010,
                    format!(
                        "graph input or output `{name}` has type {}, which is not supported",
                        onnx_type_name(code)
                    ),
                )
                .with_place(tensor_place(self.file, &name)),
            );
        }
        if let Some(shape) = &tensor.shape {
            let mut dims = Vec::with_capacity(shape.dim.len());
            let mut fixed = Vec::new();
            for d in &shape.dim {
                dims.push(match &d.value {
                    Some(tensor_shape_proto::dimension::Value::DimValue(n)) if *n >= 0 => {
                        fixed.push(*n);
                        Dim::Fixed(*n as u64)
                    }
                    Some(tensor_shape_proto::dimension::Value::DimParam(s)) if !s.is_empty() => {
                        Dim::Symbol(s.clone())
                    }
                    // Some exporters write -1 or an empty name for an unknown size.
                    _ => Dim::Unknown,
                });
            }
            if element_count(&fixed).is_none() {
                self.error(
                    Diagnostic::error(E3011, format!("value `{name}`: {}", shape_message(&fixed)))
                        .with_place(tensor_place(self.file, &name)),
                );
                return info;
            }
            info.shape = Some(dims);
        }
        info
    }

    fn node(
        &mut self,
        index: usize,
        n: proto::NodeProto,
        weights: &mut Vec<Weight>,
        producers: &mut FxHashMap<String, Producer>,
    ) -> Option<Node> {
        let domain = normal_domain(n.domain.as_deref().unwrap_or("")).to_string();
        let opset = self.opsets.get(&domain).copied().unwrap_or(0);
        let place = ModelPlace {
            file: self.file.to_string(),
            node: Some(NodePlace {
                index,
                name: n.name.clone().unwrap_or_default(),
                op_type: n.op_type.clone().unwrap_or_default(),
            }),
            tensor: None,
            opset: (opset > 0).then_some(opset),
        };
        let op = n.op_type.clone().unwrap_or_default();
        if op.is_empty() {
            self.error(Diagnostic::error(E3016, "a node has no operator type").with_place(place));
            return None;
        }
        if domain == "ai.onnx.training" || domain == "ai.onnx.preview.training" {
            self.error(
                Diagnostic::error(
                    E3006,
                    format!("`{op}` is a training operator (domain `{domain}`); training is out of scope"),
                )
                .with_place(place),
            );
            return None;
        }
        if !domain.is_empty() {
            self.error(
                Diagnostic::error(
                    E3004,
                    format!("`{op}` is in domain `{domain}`; only the default ONNX domain (`ai.onnx`) is supported"),
                )
                .with_place(place),
            );
            return None;
        }
        if matches!(op.as_str(), "If" | "Loop" | "Scan") {
            self.error(
                Diagnostic::error(
                    E3005,
                    format!("`{op}` is control flow, which is out of scope"),
                )
                .with_place(place)
                .with_note("export the model with the control flow unrolled or removed"),
            );
            return None;
        }
        if matches!(op.as_str(), "Gradient" | "Momentum" | "Adagrad" | "Adam") {
            self.error(
                Diagnostic::error(
                    E3006,
                    format!("`{op}` is a training operator; training is out of scope"),
                )
                .with_place(place),
            );
            return None;
        }
        let mut attributes = Vec::with_capacity(n.attribute.len());
        for a in &n.attribute {
            match self.attribute(a) {
                Ok(value) => attributes.push(Attribute {
                    name: a.name.clone().unwrap_or_default(),
                    value,
                }),
                Err(d) => {
                    let d = d.with_place(place.clone());
                    self.error(d);
                    return None;
                }
            }
        }
        let node = Node {
            index,
            name: n.name.unwrap_or_default(),
            op_type: op,
            inputs: n.input,
            outputs: n.output,
            attributes,
        };
        if node.op_type == "Constant" {
            let data = match constant_value(&node) {
                Ok(d) => d,
                Err(d) => {
                    self.error(d.with_place(place));
                    return None;
                }
            };
            let [out] = node.outputs.as_slice() else {
                self.error(
                    Diagnostic::error(E3016, "a `Constant` node must have exactly one output")
                        .with_place(place),
                );
                return None;
            };
            if self.define(out, Producer::Weight, producers, &place) {
                weights.push(Weight {
                    name: out.clone(),
                    data,
                    constant_node: Some(index),
                });
            }
            return None;
        }
        Some(node)
    }

    /// Records the producer of `name`, reporting a duplicate. Returns whether it was new.
    fn define(
        &mut self,
        name: &str,
        p: Producer,
        producers: &mut FxHashMap<String, Producer>,
        place: &ModelPlace,
    ) -> bool {
        if name.is_empty() {
            return false;
        }
        if let Some(prev) = producers.get(name) {
            let what = match prev {
                Producer::Input => "a graph input",
                Producer::Weight => "a weight",
                Producer::Node(_) | Producer::Refused => "another node",
            };
            let mut place = place.clone();
            place.tensor = Some(name.to_string());
            self.error(
                Diagnostic::error(
                    E3007,
                    format!("value `{name}` is already produced by {what}"),
                )
                .with_place(place),
            );
            return false;
        }
        producers.insert(name.to_string(), p);
        true
    }

    fn attribute(&mut self, a: &proto::AttributeProto) -> Result<AttrValue, Diagnostic> {
        let name = a.name.as_deref().unwrap_or("");
        let ty = a
            .r#type
            .and_then(|t| AttributeType::try_from(t).ok())
            .unwrap_or_else(|| {
                // IR versions before 2 had no type field: infer it from the field present.
                if a.f.is_some() {
                    AttributeType::Float
                } else if a.i.is_some() {
                    AttributeType::Int
                } else if a.s.is_some() {
                    AttributeType::String
                } else if a.t.is_some() {
                    AttributeType::Tensor
                } else if a.g.is_some() {
                    AttributeType::Graph
                } else if !a.floats.is_empty() {
                    AttributeType::Floats
                } else if !a.ints.is_empty() {
                    AttributeType::Ints
                } else if !a.strings.is_empty() {
                    AttributeType::Strings
                } else if !a.tensors.is_empty() {
                    AttributeType::Tensors
                } else if !a.graphs.is_empty() {
                    AttributeType::Graphs
                } else {
                    AttributeType::Undefined
                }
            });
        let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
        let tensor = |r: &mut TensorReader, t: &proto::TensorProto| {
            r.read(t).map_err(|e| {
                let (code, msg) = e;
                Diagnostic::error(code, format!("attribute `{name}`: {msg}"))
            })
        };
        Ok(match ty {
            AttributeType::Float => AttrValue::Float(a.f.unwrap_or(0.0)),
            AttributeType::Int => AttrValue::Int(a.i.unwrap_or(0)),
            AttributeType::String => AttrValue::String(a.s.as_ref().map(text).unwrap_or_default()),
            AttributeType::Floats => AttrValue::Floats(a.floats.clone()),
            AttributeType::Ints => AttrValue::Ints(a.ints.clone()),
            AttributeType::Strings => AttrValue::Strings(a.strings.iter().map(text).collect()),
            AttributeType::Tensor => match &a.t {
                Some(t) => AttrValue::Tensor(tensor(&mut self.reader, t)?),
                None => {
                    return Err(Diagnostic::error(
                        E3016,
                        format!("attribute `{name}` is a tensor attribute without a tensor"),
                    ))
                }
            },
            AttributeType::Tensors => AttrValue::Tensors(
                a.tensors
                    .iter()
                    .map(|t| tensor(&mut self.reader, t))
                    .collect::<Result<_, _>>()?,
            ),
            AttributeType::Graph | AttributeType::Graphs => {
                return Err(Diagnostic::error(
                    E3005,
                    format!("attribute `{name}` holds a graph: control flow is out of scope"),
                ))
            }
            AttributeType::SparseTensor | AttributeType::SparseTensors => {
                return Err(Diagnostic::error(
                    E3017,
                    format!("attribute `{name}` holds a sparse tensor"),
                ))
            }
            AttributeType::TypeProto | AttributeType::TypeProtos | AttributeType::Undefined => {
                return Err(Diagnostic::error(
                    E3016,
                    format!("attribute `{name}` has no value collage can read"),
                ))
            }
        })
    }

    /// Sorts the nodes topologically (Kahn's algorithm, keeping file order among ready nodes),
    /// reporting values without a producer and cycles.
    fn sort(
        &mut self,
        nodes: Vec<Node>,
        producers: &FxHashMap<String, Producer>,
        outputs: &[ValueInfo],
    ) -> Vec<Node> {
        let mut producers = producers.clone();
        for (k, n) in nodes.iter().enumerate() {
            for o in &n.outputs {
                let place = n.place(self.file, self.opset_of(n));
                self.define(o, Producer::Node(k), &mut producers, &place);
            }
        }
        if self.full() {
            return nodes;
        }
        let mut pending = vec![0usize; nodes.len()];
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        let mut missing = false;
        for (k, n) in nodes.iter().enumerate() {
            for i in n.present_inputs() {
                match producers.get(i) {
                    Some(Producer::Node(p)) => {
                        pending[k] += 1;
                        users[*p].push(k);
                    }
                    Some(_) => {}
                    None => {
                        missing = true;
                        let mut place = n.place(self.file, self.opset_of(n));
                        place.tensor = Some(i.to_string());
                        self.error(
                            Diagnostic::error(
                                E3008,
                                format!("input `{i}` is not a graph input, a weight or the output of any node"),
                            )
                            .with_place(place),
                        );
                    }
                }
            }
        }
        for o in outputs {
            if !producers.contains_key(&o.name) {
                missing = true;
                self.error(
                    Diagnostic::error(E3008, format!("graph output `{}` has no producer", o.name))
                        .with_place(tensor_place(self.file, &o.name)),
                );
            }
        }
        if missing {
            return nodes;
        }
        // Ready nodes in file order: a min-heap over positions.
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = pending
            .iter()
            .enumerate()
            .filter(|(_, &p)| p == 0)
            .map(|(k, _)| std::cmp::Reverse(k))
            .collect();
        let mut order = Vec::with_capacity(nodes.len());
        while let Some(std::cmp::Reverse(k)) = ready.pop() {
            order.push(k);
            for &u in &users[k] {
                pending[u] -= 1;
                if pending[u] == 0 {
                    ready.push(std::cmp::Reverse(u));
                }
            }
        }
        if order.len() < nodes.len() {
            let stuck: Vec<&Node> = nodes
                .iter()
                .enumerate()
                .filter(|(k, _)| pending[*k] > 0)
                .map(|(_, n)| n)
                .collect();
            let first = stuck[0];
            let mut d = Diagnostic::error(
                E3009,
                format!(
                    "the graph has a cycle: {} nodes depend on each other's outputs",
                    stuck.len()
                ),
            )
            .with_place(first.place(self.file, self.opset_of(first)));
            let listed: Vec<String> = stuck
                .iter()
                .take(8)
                .map(|n| format!("#{} `{}` ({})", n.index, n.name, n.op_type))
                .collect();
            d = d.with_note(format!(
                "nodes in or after the cycle: {}",
                listed.join(", ")
            ));
            self.error(d);
            return nodes;
        }
        if order.windows(2).any(|w| w[0] > w[1]) {
            self.warnings.push(
                Diagnostic::warning(
                    W3051,
                    "the nodes are not in topological order; they were sorted",
                )
                .with_place(file_place(self.file)),
            );
        }
        let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
        order
            .into_iter()
            .map(|k| slots[k].take().unwrap())
            .collect()
    }

    fn opset_of(&self, _n: &Node) -> i64 {
        // Every kept node is in the default domain.
        self.opsets.get("").copied().unwrap_or(0)
    }
}

/// The tensor a `Constant` node holds: `value`, or `value_float(s)` / `value_int(s)`.
fn constant_value(node: &Node) -> Result<TensorData, Diagnostic> {
    let [a] = node.attributes.as_slice() else {
        return Err(Diagnostic::error(
            E3016,
            format!(
                "a `Constant` node must have exactly one attribute, not {}",
                node.attributes.len()
            ),
        ));
    };
    let le = |v: Vec<u8>, dtype, shape| {
        TensorData::new(dtype, shape, Bytes::from(v)).expect("length matches by construction")
    };
    Ok(match (a.name.as_str(), &a.value) {
        ("value", AttrValue::Tensor(t)) => t.clone(),
        ("value_float", AttrValue::Float(x)) => le(x.to_le_bytes().to_vec(), DType::F32, vec![]),
        ("value_int", AttrValue::Int(x)) => le(x.to_le_bytes().to_vec(), DType::I64, vec![]),
        ("value_floats", AttrValue::Floats(xs)) => le(
            xs.iter().flat_map(|x| x.to_le_bytes()).collect(),
            DType::F32,
            vec![xs.len() as u64],
        ),
        ("value_ints", AttrValue::Ints(xs)) => le(
            xs.iter().flat_map(|x| x.to_le_bytes()).collect(),
            DType::I64,
            vec![xs.len() as u64],
        ),
        ("value_string" | "value_strings", _) => {
            return Err(Diagnostic::error(
                E3010,
                "string constants are not supported",
            ))
        }
        (name, _) => {
            return Err(Diagnostic::error(
                E3016,
                format!("a `Constant` node's attribute `{name}` is not a constant value"),
            ))
        }
    })
}

impl Model {
    /// The weight called `name`.
    pub fn weight(&self, name: &str) -> Option<&Weight> {
        self.graph.weights.iter().find(|w| w.name == name)
    }
}
