//! Building ONNX models in code, with prost's encoder: for tests, benches and model generators.
//! Each function makes one message with the fields an importer reads; fields are public, so a
//! test can break a message on purpose after building it.

use super::proto::*;
use bytes::Bytes;
use prost::Message;

/// ONNX data type codes, for [`value`] and typed tensors.
pub mod code {
    /// `FLOAT`.
    pub const FLOAT: i32 = 1;
    /// `UINT8`.
    pub const UINT8: i32 = 2;
    /// `INT32`.
    pub const INT32: i32 = 6;
    /// `INT64`.
    pub const INT64: i32 = 7;
    /// `STRING`.
    pub const STRING: i32 = 8;
    /// `BOOL`.
    pub const BOOL: i32 = 9;
    /// `FLOAT16`.
    pub const FLOAT16: i32 = 10;
    /// `COMPLEX64`.
    pub const COMPLEX64: i32 = 14;
}

/// A model of IR version 8 importing `opset` of the default domain.
pub fn model(opset: i64, graph: GraphProto) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        producer_name: Some("collage-test".into()),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(graph),
        ..Default::default()
    }
}

/// A graph named `g`.
pub fn graph(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    initializers: Vec<TensorProto>,
) -> GraphProto {
    GraphProto {
        node: nodes,
        name: Some("g".into()),
        initializer: initializers,
        input: inputs,
        output: outputs,
        ..Default::default()
    }
}

/// A node of the default domain, named after its first output.
pub fn node(
    op: &str,
    inputs: &[&str],
    outputs: &[&str],
    attributes: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: Some(format!("{op}_{}", outputs.first().copied().unwrap_or(""))),
        op_type: Some(op.into()),
        attribute: attributes,
        ..Default::default()
    }
}

/// A value of element type `elem` whose dimensions are written as text: a number is a fixed
/// size, `?` an unknown one, anything else a symbol.
pub fn value(name: &str, elem: i32, dims: &[&str]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            value: match *d {
                "?" => None,
                s => Some(match s.parse::<i64>() {
                    Ok(n) => tensor_shape_proto::dimension::Value::DimValue(n),
                    Err(_) => tensor_shape_proto::dimension::Value::DimParam(s.into()),
                }),
            },
            denotation: None,
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto { dim }),
            })),
            denotation: None,
        }),
        doc_string: None,
    }
}

/// A tensor with `raw_data`.
pub fn raw(name: &str, elem: i32, dims: &[i64], data: impl Into<Bytes>) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: Some(elem),
        name: Some(name.into()),
        raw_data: Some(data.into()),
        ..Default::default()
    }
}

/// A float32 tensor in `raw_data`.
pub fn f32s(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    raw(
        name,
        code::FLOAT,
        dims,
        data.iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>(),
    )
}

/// An int64 tensor in the typed field `int64_data`.
pub fn i64s(name: &str, dims: &[i64], data: &[i64]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: Some(code::INT64),
        name: Some(name.into()),
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

/// A tensor whose data live in an external file.
pub fn external(
    name: &str,
    elem: i32,
    dims: &[i64],
    location: &str,
    offset: Option<u64>,
    length: Option<u64>,
) -> TensorProto {
    let entry = |k: &str, v: String| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    let mut external_data = vec![entry("location", location.into())];
    if let Some(o) = offset {
        external_data.push(entry("offset", o.to_string()));
    }
    if let Some(l) = length {
        external_data.push(entry("length", l.to_string()));
    }
    TensorProto {
        dims: dims.to_vec(),
        data_type: Some(elem),
        name: Some(name.into()),
        external_data,
        data_location: Some(tensor_proto::DataLocation::External as i32),
        ..Default::default()
    }
}

fn attr(name: &str, ty: attribute_proto::AttributeType) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(ty as i32),
        ..Default::default()
    }
}

/// An integer attribute.
pub fn attr_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        i: Some(v),
        ..attr(name, attribute_proto::AttributeType::Int)
    }
}

/// A float attribute.
pub fn attr_float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        f: Some(v),
        ..attr(name, attribute_proto::AttributeType::Float)
    }
}

/// An integer-list attribute.
pub fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        ints: v.to_vec(),
        ..attr(name, attribute_proto::AttributeType::Ints)
    }
}

/// A float-list attribute.
pub fn attr_floats(name: &str, v: &[f32]) -> AttributeProto {
    AttributeProto {
        floats: v.to_vec(),
        ..attr(name, attribute_proto::AttributeType::Floats)
    }
}

/// A string attribute.
pub fn attr_string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        s: Some(v.as_bytes().to_vec().into()),
        ..attr(name, attribute_proto::AttributeType::String)
    }
}

/// A string-list attribute.
pub fn attr_strings(name: &str, v: &[&str]) -> AttributeProto {
    AttributeProto {
        strings: v.iter().map(|s| s.as_bytes().to_vec().into()).collect(),
        ..attr(name, attribute_proto::AttributeType::Strings)
    }
}

/// A tensor attribute.
pub fn attr_tensor(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        t: Some(t),
        ..attr(name, attribute_proto::AttributeType::Tensor)
    }
}

/// A graph attribute (as `If` and `Loop` carry).
pub fn attr_graph(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        g: Some(g),
        ..attr(name, attribute_proto::AttributeType::Graph)
    }
}

/// The model's bytes.
pub fn encode(m: &ModelProto) -> Vec<u8> {
    m.encode_to_vec()
}

/// Writes `model` with `count` more initializers, made one at a time by `tensor(i)`, without
/// holding them all (or the whole encoding) in memory: for generating models of hundreds of
/// megabytes. `tensor` is called twice per index (once to size the graph, once to write) and must
/// give the same tensor both times. The bytes are those `encode` gives for the model with the
/// initializers appended to its graph's.
pub fn write_streamed(
    w: &mut impl std::io::Write,
    model: &ModelProto,
    count: usize,
    tensor: impl Fn(usize) -> TensorProto,
) -> std::io::Result<()> {
    use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
    let mut head = model.clone();
    let graph = head.graph.take().unwrap_or_default();
    let rest = graph.encode_to_vec();
    let mut graph_len = rest.len();
    for i in 0..count {
        let n = tensor(i).encoded_len();
        graph_len += key_len(5) + encoded_len_varint(n as u64) + n;
    }
    let mut buf = head.encode_to_vec();
    encode_key(7, WireType::LengthDelimited, &mut buf);
    encode_varint(graph_len as u64, &mut buf);
    buf.extend_from_slice(&rest);
    w.write_all(&buf)?;
    for i in 0..count {
        let t = tensor(i);
        let mut buf = Vec::with_capacity(t.encoded_len() + 16);
        encode_key(5, WireType::LengthDelimited, &mut buf);
        encode_varint(t.encoded_len() as u64, &mut buf);
        t.encode(&mut buf).map_err(std::io::Error::other)?;
        w.write_all(&buf)?;
    }
    Ok(())
}

/// The initializers of a GPT-2-like model of `layers` layers (width 768, 50257 words, 1024
/// positions): names and dimensions, about 28 MB per layer plus 157 MB of embeddings.
pub fn gpt2_like_weights(layers: usize) -> Vec<(String, Vec<i64>)> {
    let (d, vocab, ctx) = (768i64, 50257i64, 1024i64);
    let mut t = vec![
        ("wte".to_string(), vec![vocab, d]),
        ("wpe".to_string(), vec![ctx, d]),
    ];
    for l in 0..layers {
        for (name, dims) in [
            ("ln_1.weight", vec![d]),
            ("ln_1.bias", vec![d]),
            ("attn.c_attn.weight", vec![d, 3 * d]),
            ("attn.c_attn.bias", vec![3 * d]),
            ("attn.c_proj.weight", vec![d, d]),
            ("attn.c_proj.bias", vec![d]),
            ("ln_2.weight", vec![d]),
            ("ln_2.bias", vec![d]),
            ("mlp.c_fc.weight", vec![d, 4 * d]),
            ("mlp.c_fc.bias", vec![4 * d]),
            ("mlp.c_proj.weight", vec![4 * d, d]),
            ("mlp.c_proj.bias", vec![d]),
        ] {
            t.push((format!("h.{l}.{name}"), dims));
        }
    }
    t
}

fn pattern_tensor(name: &str, dims: &[i64]) -> TensorProto {
    let n: i64 = dims.iter().product();
    let data: Vec<u8> = (0..n as usize * 4).map(|i| (i % 251) as u8).collect();
    raw(name, code::FLOAT, dims, data)
}

/// Writes a GPT-2-sized model of `layers` layers to `path` (float32 weights of a fixed pattern,
/// a chain of `MatMul` and `Add` nodes using each weight once: a model to time loading with, not
/// to run). Returns the file's size.
pub fn write_gpt2_like(path: &std::path::Path, layers: usize) -> std::io::Result<u64> {
    let ts = gpt2_like_weights(layers);
    let mut nodes = vec![node("Gather", &["wte", "ids"], &["h"], vec![])];
    let mut cur = "h".to_string();
    for (k, (name, _)) in ts.iter().enumerate().skip(1) {
        let out = format!("t{k}");
        let op = if name.ends_with("weight") && name.contains('.') && !name.contains("ln_") {
            "MatMul"
        } else {
            "Add"
        };
        nodes.push(node(op, &[&cur, name], &[&out], vec![]));
        cur = out;
    }
    let g = graph(
        nodes,
        vec![value("ids", code::INT64, &["batch", "seq"])],
        vec![value(&cur, code::FLOAT, &["batch", "seq", "?"])],
        vec![],
    );
    let m = model(13, g);
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    write_streamed(&mut w, &m, ts.len(), |i| pattern_tensor(&ts[i].0, &ts[i].1))?;
    std::io::Write::flush(&mut w)?;
    Ok(std::fs::metadata(path)?.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_writing_equals_encoding_the_whole_model() {
        let tensors = [f32s("a", &[2], &[1.0, 2.0]), i64s("b", &[3], &[4, 5, 6])];
        let mut g = graph(
            vec![node("Add", &["a", "x"], &["y"], vec![])],
            vec![value("x", code::FLOAT, &["2"])],
            vec![value("y", code::FLOAT, &["2"])],
            vec![],
        );
        let m = model(13, g.clone());
        let mut out = Vec::new();
        write_streamed(&mut out, &m, 2, |i| tensors[i].clone()).unwrap();
        g.initializer = tensors.to_vec();
        let whole = model(13, g);
        assert_eq!(ModelProto::decode(out.as_slice()).unwrap(), whole);
    }
}
