//! The ONNX front end's lower layer on crafted models: decoding, weights, external data, the
//! bad-input cases (each a coded diagnostic naming the node or tensor), shape binding and
//! folding, and a mutation test over model bytes.

use bytes::Bytes;
use collage::diag::{Code, Diagnostic, *};
use collage::frontend::onnx::builder::{self as b, code};
use collage::frontend::onnx::fold::{fold, DeclaredShapes};
use collage::frontend::onnx::proto::ModelProto;
use collage::frontend::onnx::shapes::{bind_constants, bind_inputs, Bindings};
use collage::frontend::onnx::{load_bytes, load_file, DType, Dim, Model, TensorData};
use proptest::prelude::*;
use std::path::Path;

fn load(m: &ModelProto) -> Result<Model, Vec<Diagnostic>> {
    load_bytes(Bytes::from(b::encode(m)), "m.onnx", None)
}

fn codes(r: Result<Model, Vec<Diagnostic>>) -> Vec<Code> {
    match r {
        Ok(m) => panic!("loaded: {} nodes", m.graph.nodes.len()),
        Err(ds) => ds.iter().map(|d| d.code).collect(),
    }
}

fn rendered(d: &Diagnostic) -> String {
    render_plain(d, &collage::source::SourceMap::new())
}

/// `y = Relu(MatMul(x, w) + b)` with `x: [batch, 4]`.
fn mlp() -> ModelProto {
    b::model(
        13,
        b::graph(
            vec![
                b::node("MatMul", &["x", "w"], &["h"], vec![]),
                b::node("Add", &["h", "b"], &["s"], vec![]),
                b::node("Relu", &["s"], &["y"], vec![]),
            ],
            vec![b::value("x", code::FLOAT, &["batch", "4"])],
            vec![b::value("y", code::FLOAT, &["batch", "2"])],
            vec![
                b::f32s("w", &[4, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]),
                b::f32s("b", &[2], &[0.5, -0.5]),
            ],
        ),
    )
}

#[test]
fn a_small_model_decodes_with_its_weights_and_types() {
    let m = load(&mlp()).unwrap();
    assert_eq!(m.opset, 13);
    assert_eq!(m.ir_version, 8);
    let g = &m.graph;
    let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert_eq!(ops, ["MatMul", "Add", "Relu"]);
    assert_eq!(g.inputs.len(), 1);
    assert_eq!(
        g.inputs[0].shape,
        Some(vec![Dim::Symbol("batch".into()), Dim::Fixed(4)])
    );
    let w = m.weight("w").unwrap();
    assert_eq!(
        (w.data.dtype, w.data.shape.clone()),
        (DType::F32, vec![4, 2])
    );
    assert_eq!(w.data.to_f64(), [1., 2., 3., 4., 5., 6., 7., 8.]);
    assert!(m.warnings.is_empty());
}

#[test]
fn raw_data_is_a_view_into_the_input_bytes() {
    let bytes = Bytes::from(b::encode(&mlp()));
    let range = bytes.as_ptr() as usize..bytes.as_ptr() as usize + bytes.len();
    let m = load_bytes(bytes.clone(), "m.onnx", None).unwrap();
    let w = m.weight("w").unwrap().data.bytes().as_ptr() as usize;
    assert!(range.contains(&w), "the weight was copied out of the file");
}

#[test]
fn typed_fields_constants_and_ir3_inputs_become_weights() {
    let mut t32 = b::raw("small", code::UINT8, &[3], vec![]);
    t32.raw_data = None;
    t32.int32_data = vec![1, 200, 255];
    let mut f16 = b::raw("half", code::FLOAT16, &[2], vec![]);
    f16.raw_data = None;
    f16.int32_data = vec![0x3c00, 0xc000]; // 1.0, -2.0
    let mut flt = b::raw("fl", code::FLOAT, &[2], vec![]);
    flt.raw_data = None;
    flt.float_data = vec![0.25, 4.0];
    let mut model = b::model(
        11,
        b::graph(
            vec![
                b::node(
                    "Constant",
                    &[],
                    &["c1"],
                    vec![b::attr_tensor("value", b::i64s("", &[2], &[7, 8]))],
                ),
                b::node(
                    "Constant",
                    &[],
                    &["c2"],
                    vec![b::attr_float("value_float", 1.5)],
                ),
                b::node(
                    "Constant",
                    &[],
                    &["c3"],
                    vec![b::attr_ints("value_ints", &[1, 2, 3])],
                ),
                b::node(
                    "Sum",
                    &["x", "small", "half", "fl", "c1", "c2", "c3", "i64"],
                    &["y"],
                    vec![],
                ),
            ],
            // IR 3 style: the initializers are listed as inputs too.
            vec![
                b::value("x", code::FLOAT, &["2"]),
                b::value("small", code::UINT8, &["3"]),
                b::value("half", code::FLOAT16, &["2"]),
                b::value("fl", code::FLOAT, &["2"]),
            ],
            vec![b::value("y", code::FLOAT, &["2"])],
            vec![t32, f16, flt, b::i64s("i64", &[2], &[-1, i64::MAX])],
        ),
    );
    model.ir_version = Some(3);
    let m = load(&model).unwrap();
    let names: Vec<&str> = m.graph.inputs.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["x"], "initializers listed as inputs are weights");
    assert_eq!(m.graph.nodes.len(), 1, "constants are not nodes");
    let w = |n: &str| m.weight(n).unwrap().data.clone();
    assert_eq!(w("small").bytes(), [1, 200, 255]);
    assert_eq!(w("half").to_f64(), [1.0, -2.0]);
    assert_eq!(w("fl").to_f64(), [0.25, 4.0]);
    assert_eq!(w("i64").to_i64().unwrap(), [-1, i64::MAX]);
    assert_eq!(w("c1").to_i64().unwrap(), [7, 8]);
    assert_eq!(
        (w("c2").shape.clone(), w("c2").to_f64()),
        (vec![], vec![1.5])
    );
    assert_eq!(w("c3").to_i64().unwrap(), [1, 2, 3]);
    assert_eq!(m.weight("c1").unwrap().constant_node, Some(0));
}

fn expect(m: &ModelProto, code: Code, needles: &[&str]) {
    let r = load(m);
    let ds = match r {
        Ok(_) => panic!("expected {} but the model loaded", code.id),
        Err(ds) => ds,
    };
    let d = ds
        .iter()
        .find(|d| d.code == code)
        .unwrap_or_else(|| panic!("expected {}, got {ds:?}", code.id));
    let text = rendered(d);
    for n in needles {
        assert!(text.contains(n), "{n:?} not in:\n{text}");
    }
}

#[test]
fn truncated_and_garbage_bytes_are_e3001() {
    let bytes = b::encode(&mlp());
    for cut in [1, 7, bytes.len() / 2, bytes.len() - 1] {
        let r = load_bytes(Bytes::copy_from_slice(&bytes[..cut]), "m.onnx", None);
        let c = codes(r);
        assert!(
            c == [E3001] || c == [E3003] || c == [E3002],
            "cut {cut}: {c:?}"
        );
    }
    assert_eq!(
        codes(load_bytes(
            Bytes::from_static(b"\xff\xff\xff\xff garbage"),
            "m.onnx",
            None
        )),
        [E3001]
    );
    assert_eq!(codes(load_bytes(Bytes::new(), "m.onnx", None)), [E3001]);
}

#[test]
fn ir_versions_and_missing_parts() {
    let mut m = mlp();
    m.ir_version = Some(2);
    expect(&m, E3002, &["IR version 2", "in m.onnx"]);
    m.ir_version = Some(99);
    let loaded = load(&m).unwrap();
    assert_eq!(loaded.warnings[0].code, W3052);
    let mut m = mlp();
    m.opset_import.clear();
    expect(&m, E3003, &["default operator set"]);
    let mut m = mlp();
    m.graph = None;
    expect(&m, E3003, &["no graph"]);
}

#[test]
fn a_cycle_is_e3009_naming_a_node() {
    let m = b::model(
        13,
        b::graph(
            vec![
                b::node("Add", &["x", "q"], &["p"], vec![]),
                b::node("Relu", &["p"], &["q"], vec![]),
                b::node("Relu", &["p"], &["y"], vec![]),
            ],
            vec![b::value("x", code::FLOAT, &["2"])],
            vec![b::value("y", code::FLOAT, &["2"])],
            vec![],
        ),
    );
    expect(&m, E3009, &["cycle", "node #0 `Add_p` (Add)", "opset 13"]);
}

#[test]
fn unsorted_nodes_are_sorted_with_a_warning() {
    let m = b::model(
        13,
        b::graph(
            vec![
                b::node("Relu", &["h"], &["y"], vec![]),
                b::node("Neg", &["x"], &["h"], vec![]),
            ],
            vec![b::value("x", code::FLOAT, &["2"])],
            vec![b::value("y", code::FLOAT, &["2"])],
            vec![],
        ),
    );
    let m = load(&m).unwrap();
    let order: Vec<usize> = m.graph.nodes.iter().map(|n| n.index).collect();
    assert_eq!(order, [1, 0]);
    assert_eq!(m.warnings[0].code, W3051);
}

#[test]
fn duplicate_and_missing_names() {
    let mut m = mlp();
    let g = m.graph.as_mut().unwrap();
    g.node[1].output = vec!["h".into()];
    expect(&m, E3007, &["`h`", "node #1", "(Add)"]);
    let mut m = mlp();
    let g = m.graph.as_mut().unwrap();
    g.initializer.push(b::f32s("w", &[1], &[0.]));
    expect(&m, E3007, &["two initializers", "value `w`"]);
    let mut m = mlp();
    let g = m.graph.as_mut().unwrap();
    g.node[1].input[1] = "nothing".into();
    expect(
        &m,
        E3008,
        &["`nothing`", "node #1 `Add_s` (Add)", "opset 13"],
    );
    let mut m = mlp();
    m.graph.as_mut().unwrap().output[0].name = Some("zzz".into());
    expect(&m, E3008, &["graph output `zzz`"]);
    // A value used before its producer is not an error: the nodes are sorted.
    let mut m = mlp();
    m.graph.as_mut().unwrap().node.reverse();
    assert!(load(&m).is_ok());
}

#[test]
fn huge_dimensions_are_e3011() {
    let mut m = mlp();
    let g = m.graph.as_mut().unwrap();
    g.initializer[1] = b::f32s("b", &[1 << 62], &[]);
    expect(&m, E3011, &["tensor `b`", "4611686018427387904"]);
    let mut m = mlp();
    m.graph.as_mut().unwrap().input[0] = b::value("x", code::FLOAT, &["4611686018427387904", "4"]);
    expect(&m, E3011, &["value `x`"]);
    let mut m = mlp();
    m.graph.as_mut().unwrap().initializer[1] = b::f32s("b", &[1 << 31, 1 << 31, 1 << 31], &[]);
    expect(&m, E3011, &["tensor `b`"]);
    let mut m = mlp();
    m.graph.as_mut().unwrap().initializer[1] = b::f32s("b", &[-2], &[]);
    expect(&m, E3011, &["negative"]);
}

#[test]
fn data_that_disagree_with_the_shape_are_e3012() {
    let mut m = mlp();
    m.graph.as_mut().unwrap().initializer[0] = b::f32s("w", &[4, 3], &[1.; 8]);
    expect(&m, E3012, &["tensor `w`", "48 bytes", "32"]);
    let mut m = mlp();
    m.graph.as_mut().unwrap().initializer[0] = b::i64s("w", &[3], &[1, 2]);
    expect(&m, E3012, &["tensor `w`", "3 elements"]);
    // A typed tensor claiming a huge count with no data is refused before any allocation.
    let mut m = mlp();
    m.graph.as_mut().unwrap().initializer[0] = b::i64s("w", &[1 << 40], &[]);
    expect(&m, E3012, &["tensor `w`"]);
}

#[test]
fn unsupported_types_domains_control_flow_and_training() {
    let mut m = mlp();
    m.graph.as_mut().unwrap().initializer[1] = b::raw("b", code::STRING, &[1], vec![0u8]);
    expect(&m, E3010, &["tensor `b`", "string"]);
    let mut m = mlp();
    m.graph.as_mut().unwrap().input[0] = b::value("x", code::COMPLEX64, &["2"]);
    expect(&m, E3010, &["complex64"]);
    let mut m = mlp();
    m.graph.as_mut().unwrap().node[2].domain = Some("com.microsoft".into());
    expect(&m, E3004, &["com.microsoft", "node #2 `Relu_y` (Relu)"]);
    let mut m = mlp();
    m.graph.as_mut().unwrap().node[2].domain = Some("ai.onnx.preview.training".into());
    expect(&m, E3006, &["training"]);
    let mut m = mlp();
    m.graph.as_mut().unwrap().node[2].op_type = Some("Gradient".into());
    expect(&m, E3006, &["Gradient"]);
    for op in ["If", "Loop", "Scan"] {
        let mut m = mlp();
        m.graph.as_mut().unwrap().node[2].op_type = Some(op.into());
        expect(&m, E3005, &[op, "out of scope", "node #2"]);
    }
    // A refused node's readers are not reported again as reading a value without a producer.
    for k in [0, 1] {
        let mut m = mlp();
        m.graph.as_mut().unwrap().node[k].op_type = Some("If".into());
        let codes: Vec<&str> = load(&m).unwrap_err().iter().map(|d| d.code.id).collect();
        assert_eq!(codes, ["E3005"], "node {k}");
    }
    let mut m = mlp();
    let body = b::graph(vec![], vec![], vec![], vec![]);
    m.graph.as_mut().unwrap().node[2]
        .attribute
        .push(b::attr_graph("body", body));
    expect(&m, E3005, &["holds a graph"]);
    // `ai.onnx` is the default domain.
    let mut m = mlp();
    m.graph.as_mut().unwrap().node[2].domain = Some("ai.onnx".into());
    assert!(load(&m).is_ok());
}

#[test]
fn malformed_constants_and_sparse_tensors() {
    let mut m = mlp();
    let g = m.graph.as_mut().unwrap();
    g.node.insert(0, b::node("Constant", &[], &["k"], vec![]));
    expect(&m, E3016, &["Constant", "node #0"]);
    let mut m = mlp();
    let g = m.graph.as_mut().unwrap();
    g.sparse_initializer.push(Default::default());
    expect(&m, E3017, &["sparse"]);
}

// External data.

fn external_model(location: &str, offset: Option<u64>, length: Option<u64>) -> ModelProto {
    let mut m = mlp();
    m.graph.as_mut().unwrap().initializer[0] =
        b::external("w", code::FLOAT, &[4, 2], location, offset, length);
    m
}

fn write_model(dir: &Path, m: &ModelProto) -> std::path::PathBuf {
    let path = dir.join("model.onnx");
    std::fs::write(&path, b::encode(m)).unwrap();
    path
}

fn floats(xs: &[f32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn external_data_is_read_relative_to_the_model() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    let mut file = vec![0u8; 16];
    file.extend(floats(&[1., 2., 3., 4., 5., 6., 7., 8.]));
    file.extend([9u8; 4]);
    std::fs::write(dir.path().join("data/w.bin"), &file).unwrap();
    let path = write_model(
        dir.path(),
        &external_model("data/w.bin", Some(16), Some(32)),
    );
    let m = load_file(&path).unwrap();
    assert_eq!(
        m.weight("w").unwrap().data.to_f64(),
        [1., 2., 3., 4., 5., 6., 7., 8.]
    );
    // Without length: to the end of the file, which here is 4 bytes too long.
    let path = write_model(dir.path(), &external_model("./data/w.bin", Some(16), None));
    let e = load_file(&path).unwrap_err();
    assert_eq!(e[0].code, E3012, "{e:?}");
    // From bytes with the folder given.
    let bytes = Bytes::from(b::encode(&external_model("data/w.bin", Some(16), Some(32))));
    assert!(load_bytes(bytes.clone(), "mem", Some(dir.path())).is_ok());
    let e = load_bytes(bytes, "mem", None).unwrap_err();
    assert_eq!(e[0].code, E3015);
}

#[test]
fn external_data_outside_the_folder_is_refused() {
    let outer = tempfile::tempdir().unwrap();
    let dir = outer.path().join("model");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(outer.path().join("secret.bin"), floats(&[0.; 8])).unwrap();
    for loc in ["/etc/passwd", "../secret.bin", "data/../../secret.bin", ""] {
        let path = write_model(&dir, &external_model(loc, None, None));
        let e = load_file(&path).unwrap_err();
        assert_eq!(e[0].code, E3013, "{loc}: {e:?}");
        assert!(
            rendered(&e[0]).contains("tensor `w`"),
            "{}",
            rendered(&e[0])
        );
    }
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(outer.path().join("secret.bin"), dir.join("link.bin")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("passwd")).unwrap();
        for loc in ["link.bin", "passwd"] {
            let path = write_model(&dir, &external_model(loc, None, None));
            let e = load_file(&path).unwrap_err();
            assert_eq!(e[0].code, E3013, "{loc}: {e:?}");
            assert!(rendered(&e[0]).contains("link"), "{}", rendered(&e[0]));
        }
        // A link that stays inside the folder is fine.
        std::fs::write(dir.join("real.bin"), floats(&[1.; 8])).unwrap();
        std::os::unix::fs::symlink(dir.join("real.bin"), dir.join("inside.bin")).unwrap();
        let path = write_model(&dir, &external_model("inside.bin", None, None));
        assert!(load_file(&path).is_ok());
    }
}

#[test]
fn external_ranges_past_the_file_are_e3014() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.bin"), floats(&[1.; 8])).unwrap();
    for (off, len) in [
        (Some(33), None),
        (Some(8), Some(32)),
        (Some(u64::MAX), Some(2)),
        (Some(1), Some(u64::MAX)),
    ] {
        let path = write_model(dir.path(), &external_model("w.bin", off, len));
        let e = load_file(&path).unwrap_err();
        assert_eq!(e[0].code, E3014, "{off:?} {len:?}: {e:?}");
    }
    let path = write_model(dir.path(), &external_model("missing.bin", None, None));
    assert_eq!(load_file(&path).unwrap_err()[0].code, E3015);
    let path = write_model(dir.path(), &external_model(".", None, None));
    assert_eq!(
        load_file(&path).unwrap_err()[0].code,
        E3015,
        "a folder is not data"
    );
    let mut m = external_model("w.bin", None, None);
    m.graph.as_mut().unwrap().initializer[0].external_data[0].key = Some("offset".into());
    let path = write_model(dir.path(), &m);
    assert_eq!(load_file(&path).unwrap_err()[0].code, E3015);
}

// Shapes and folding.

/// What PyTorch writes for `x.reshape(x.shape[0], -1)` with a dynamic batch, plus a `Range`
/// over the sequence length.
fn dynamic() -> ModelProto {
    b::model(
        13,
        b::graph(
            vec![
                b::node("Shape", &["x"], &["s"], vec![]),
                b::node(
                    "Gather",
                    &["s", "zero"],
                    &["n"],
                    vec![b::attr_int("axis", 0)],
                ),
                b::node("Unsqueeze", &["n", "axes0"], &["n1"], vec![]),
                b::node(
                    "Concat",
                    &["n1", "minus1"],
                    &["shape"],
                    vec![b::attr_int("axis", 0)],
                ),
                b::node("Reshape", &["x", "shape"], &["flat"], vec![]),
                b::node(
                    "Gather",
                    &["s", "two"],
                    &["len"],
                    vec![b::attr_int("axis", 0)],
                ),
                b::node("Range", &["zero", "len", "one"], &["pos"], vec![]),
                b::node("Relu", &["flat"], &["y"], vec![]),
                b::node("Shape", &["y"], &["ys"], vec![]),
                b::node("Identity", &["pos"], &["p"], vec![]),
            ],
            vec![b::value("x", code::FLOAT, &["batch", "3", "seq"])],
            vec![
                b::value("y", code::FLOAT, &["batch", "?"]),
                b::value("p", code::INT64, &["seq"]),
                b::value("ys", code::INT64, &["2"]),
            ],
            vec![
                b::i64s("zero", &[], &[0]),
                b::i64s("one", &[], &[1]),
                b::i64s("two", &[], &[2]),
                b::i64s("axes0", &[1], &[0]),
                b::i64s("minus1", &[1], &[-1]),
            ],
        ),
    )
}

#[test]
fn unbound_dimensions_list_every_input_and_the_flags() {
    let m = load(&dynamic()).unwrap();
    let e = bind_inputs(&m, &Bindings::default()).unwrap_err();
    assert_eq!(e.len(), 1);
    let text = rendered(&e[0]);
    assert_eq!(e[0].code, E3020);
    for n in [
        "input `x`: float32 [batch, 3, seq] (unbound)",
        "--input-shape",
        "--dim",
    ] {
        assert!(text.contains(n), "{n:?} not in {text}");
    }
    let partly = Bindings::parse([], ["batch=2"]).unwrap();
    assert_eq!(bind_inputs(&m, &partly).unwrap_err()[0].code, E3020);
}

#[test]
fn shapes_bind_per_input_and_per_symbol_then_fold() {
    let m = load(&dynamic()).unwrap();
    let by_symbol = Bindings::parse([], ["batch=2", "seq=5", "unused=1"]).unwrap();
    let (inputs, warnings) = bind_inputs(&m, &by_symbol).unwrap();
    assert_eq!(inputs[0].shape, [2, 3, 5]);
    assert_eq!(warnings[0].code, W3053);
    let by_input = Bindings::parse(["x=2x3x5"], []).unwrap();
    assert_eq!(bind_inputs(&m, &by_input).unwrap().0, inputs);

    let f = fold(&m, &DeclaredShapes::new(&m, &inputs)).unwrap();
    let v = |n: &str| f.values[n].to_i64().unwrap();
    assert_eq!(v("s"), [2, 3, 5]);
    assert_eq!(v("shape"), [2, -1]);
    assert_eq!(v("pos"), [0, 1, 2, 3, 4]);
    assert_eq!(v("p"), [0, 1, 2, 3, 4]);
    // `Reshape` of the input itself does not fold (the input is not a known value), and `y`'s
    // shape is not declared, so `Shape(y)` stays; a shape oracle that knows it folds it.
    assert!(!f.values.contains_key("flat"));
    assert!(!f.values.contains_key("ys"));
    let oracle = |n: &str| match n {
        "x" => Some(vec![2, 3, 5]),
        "y" => Some(vec![2, 15]),
        _ => None,
    };
    let f = fold(&m, &oracle).unwrap();
    assert_eq!(f.values["ys"].to_i64().unwrap(), [2, 15]);
    assert_eq!(f.folded, [0, 1, 2, 3, 5, 6, 8, 9]);
}

#[test]
fn data_files_size_inputs_and_must_agree_with_dims_and_each_other() {
    let m = b::model(
        13,
        b::graph(
            vec![b::node("Add", &["x", "y"], &["z"], vec![])],
            vec![
                b::value("x", code::FLOAT, &["batch", "seq"]),
                b::value("y", code::FLOAT, &["batch", "seq"]),
            ],
            vec![b::value("z", code::FLOAT, &["?"])],
            vec![],
        ),
    );
    let m = load(&m).unwrap();
    let with = |dims: &[&str], files: &[(&str, &[u64])]| {
        let mut b = Bindings::parse([], dims.iter().copied()).unwrap();
        b.files = files
            .iter()
            .map(|(n, s)| (n.to_string(), s.to_vec()))
            .collect();
        bind_inputs(&m, &b)
    };
    // Files size the inputs, with or without a `--dim` that agrees.
    let (inputs, _) = with(&[], &[("x", &[2, 3]), ("y", &[2, 3])]).unwrap();
    assert_eq!(inputs[1].shape, [2, 3]);
    // `y` has no file: `--dim batch` sizes it with `seq`.
    let (inputs, _) = with(&["batch=2", "seq=3"], &[("x", &[2, 3])]).unwrap();
    assert_eq!(
        (inputs[0].shape.clone(), inputs[1].shape.clone()),
        (vec![2, 3], vec![2, 3])
    );
    // A file against `--dim`, and two files against each other.
    let e = with(&["seq=16"], &[("x", &[1, 8]), ("y", &[1, 16])]).unwrap_err();
    assert_eq!(e[0].code, E3019);
    let text = rendered(&e[0]);
    assert!(
        text.contains("`x` has size 8 on axis 1 (`seq`)") && text.contains("--dim seq=16"),
        "{text}"
    );
    let e = with(&[], &[("x", &[1, 16]), ("y", &[1, 8])]).unwrap_err();
    let text = rendered(&e[0]);
    assert!(text.contains("input `x` (seq = 16)"), "{text}");
    // `--input-shape` still wins over `--dim` on its input.
    let mut b = Bindings::parse(["x=1x8"], ["batch=1", "seq=16"]).unwrap();
    b.files = vec![("y".into(), vec![1, 16])];
    let (inputs, _) = bind_inputs(&m, &b).unwrap();
    assert_eq!(
        (inputs[0].shape.clone(), inputs[1].shape.clone()),
        (vec![1, 8], vec![1, 16])
    );
}

#[test]
fn input_bindings_survive_shared_and_missing_symbols() {
    // A Paddle-style input whose two spatial axes share one symbol, and one axis has none.
    let m = b::model(
        11,
        b::graph(
            vec![b::node("Relu", &["x"], &["y"], vec![])],
            vec![
                b::value("x", code::FLOAT, &["p2o.D.0", "3", "p2o.D.1", "p2o.D.1"]),
                b::value("z", code::FLOAT, &["?"]),
            ],
            vec![b::value("y", code::FLOAT, &["?"])],
            vec![],
        ),
    );
    let mut m = load(&m).unwrap();
    let bind = Bindings::parse(["x=1x3x48x192", "z=7"], []).unwrap();
    let (inputs, _) = bind_inputs(&m, &bind).unwrap();
    assert_eq!(inputs[0].shape, [1, 3, 48, 192]);
    assert_eq!(inputs[1].shape, [7]);
    for (bad, needle) in [
        ("x=1x4x48x192", "axis 1"),
        ("x=1x3x48", "rank 4"),
        ("nope=1", "no input `nope`"),
    ] {
        let e = bind_inputs(&m, &Bindings::parse([bad, "z=1"], []).unwrap()).unwrap_err();
        assert_eq!(e[0].code, E3019);
        assert!(rendered(&e[0]).contains(needle), "{}", rendered(&e[0]));
    }
    // Inputs bound to constants become weights.
    let seven = TensorData::new(DType::F32, vec![7], Bytes::from(vec![0u8; 28])).unwrap();
    bind_constants(&mut m, |n| (n == "z").then(|| seven.clone())).unwrap();
    assert_eq!(m.graph.inputs.len(), 1);
    assert_eq!(m.weight("z").unwrap().data, seven);
    let wrong = TensorData::new(DType::I64, vec![1], Bytes::from(vec![0u8; 8])).unwrap();
    let e = bind_constants(&mut m, |n| (n == "x").then(|| wrong.clone())).unwrap_err();
    assert_eq!(e[0].code, E3019);
}

#[test]
fn folding_errors_name_the_node_and_huge_results_stay_unfolded() {
    let m = b::model(
        13,
        b::graph(
            vec![
                b::node(
                    "Gather",
                    &["v", "nine"],
                    &["g"],
                    vec![b::attr_int("axis", 0)],
                ),
                b::node("ConstantOfShape", &["big"], &["c"], vec![]),
                b::node("Range", &["zero", "huge", "one"], &["r"], vec![]),
            ],
            vec![],
            vec![
                b::value("g", code::INT64, &[]),
                b::value("c", code::FLOAT, &["?"]),
                b::value("r", code::INT64, &["?"]),
            ],
            vec![
                b::i64s("v", &[3], &[1, 2, 3]),
                b::i64s("nine", &[], &[9]),
                b::i64s("big", &[2], &[1 << 40, 1 << 40]),
                b::i64s("zero", &[], &[0]),
                b::i64s("one", &[], &[1]),
                b::i64s("huge", &[], &[i64::MAX]),
            ],
        ),
    );
    let m = load(&m).unwrap();
    let e = fold(&m, &DeclaredShapes::default()).unwrap_err();
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].code, E3021);
    let text = rendered(&e[0]);
    assert!(
        text.contains("node #0 `Gather_g` (Gather)") && text.contains("index 9"),
        "{text}"
    );
    let mut m2 = m.clone();
    m2.graph.nodes.remove(0);
    let f = fold(&m2, &DeclaredShapes::default()).unwrap();
    assert!(f.values.is_empty());
    let warned: Vec<Code> = f.warnings.iter().map(|d| d.code).collect();
    assert_eq!(warned, [W3054, W3054]);
}

// Crafted inputs the mutation test cannot reach: high ranks, values with no elements whose other
// dimensions are huge, long `axes` inputs. Each must fold (or stay unfolded with W3054) quickly,
// without a panic, an overflow or an unbounded allocation.

const M: i64 = 1 << 20;

fn fold_quickly(m: &ModelProto) -> Option<collage::frontend::onnx::fold::Folding> {
    let t0 = std::time::Instant::now();
    let r = match load(m) {
        Ok(m) => Some(fold(&m, &DeclaredShapes::default()).expect("no E3021 here")),
        Err(ds) => {
            assert!(ds.iter().all(|d| d.code.id.starts_with("E30")), "{ds:?}");
            None
        }
    };
    assert!(t0.elapsed().as_secs() < 10, "took {:?}", t0.elapsed());
    r
}

#[test]
fn high_rank_and_empty_huge_values_fold_in_bounded_time() {
    // An initializer of rank 1001 with no elements, sliced; a ConstantOfShape from a
    // 1000-element shape; a Shape of the initializer.
    let mut dims = vec![M; 1001];
    dims[0] = 0;
    let m = b::model(
        13,
        b::graph(
            vec![
                b::node("Slice", &["big", "s0", "s1"], &["sl"], vec![]),
                b::node("ConstantOfShape", &["dims"], &["c"], vec![]),
                b::node("Shape", &["big"], &["sh"], vec![]),
                b::node("Add", &["c", "c"], &["cc"], vec![]),
            ],
            vec![],
            vec![b::value("cc", code::FLOAT, &["?"])],
            vec![
                b::i64s("big", &dims, &[]),
                b::i64s("dims", &[1000], &dims[..1000]),
                b::i64s("s0", &[1], &[0]),
                b::i64s("s1", &[1], &[1]),
            ],
        ),
    );
    if let Some(f) = fold_quickly(&m) {
        assert!(f.folded.is_empty(), "{:?}", f.folded);
        assert!(f.values.is_empty());
        let warned: Vec<Code> = f.warnings.iter().map(|d| d.code).collect();
        assert_eq!(warned, [W3054, W3054]);
        assert!(f.weights_read.iter().all(|w| w != "big"));
    }
}

#[test]
fn a_long_axes_input_is_refused_before_any_per_axis_work() {
    // Range(0, 2^20, 1) as the axes of Unsqueeze: a rank 2^20 value would make Squeeze and
    // Add quadratic. The Unsqueeze is left to run, and so is everything after it.
    let m = b::model(
        13,
        b::graph(
            vec![
                b::node("Range", &["zero", "n", "one"], &["axes"], vec![]),
                b::node("Unsqueeze", &["one", "axes"], &["u"], vec![]),
                b::node("Squeeze", &["u", "axes"], &["sq"], vec![]),
                b::node("Add", &["u", "u"], &["uu"], vec![]),
            ],
            vec![],
            vec![b::value("uu", code::INT64, &["?"])],
            vec![
                b::i64s("zero", &[], &[0]),
                b::i64s("one", &[], &[1]),
                b::i64s("n", &[], &[M]),
            ],
        ),
    );
    let f = fold_quickly(&m).expect("the model loads");
    assert_eq!(f.folded, [0]);
    let warned: Vec<Code> = f.warnings.iter().map(|d| d.code).collect();
    assert_eq!(warned, [W3054]);
    assert!(
        f.warnings[0].message.contains("rank 1048576"),
        "{:?}",
        f.warnings
    );
}

#[test]
fn zero_size_values_with_huge_extents_fold_without_overflow() {
    // [0, 2^20, 2^20, 2^20, 2^20]: its strides overflow 64 bits; it has no elements.
    let m = b::model(
        13,
        b::graph(
            vec![
                b::node("ConstantOfShape", &["dims"], &["c"], vec![]),
                b::node("Add", &["c", "c"], &["a"], vec![]),
                b::node("Slice", &["a", "s0", "s1", "ax"], &["sl"], vec![]),
                b::node("Expand", &["c", "dims"], &["e"], vec![]),
                b::node("Unsqueeze", &["sl", "ax"], &["u"], vec![]),
                b::node("Squeeze", &["u", "ax"], &["sq"], vec![]),
                b::node("Shape", &["sq"], &["sh"], vec![]),
            ],
            vec![],
            vec![b::value("sh", code::INT64, &["5"])],
            vec![
                b::i64s("dims", &[5], &[0, M, M, M, M]),
                b::i64s("s0", &[1], &[0]),
                b::i64s("s1", &[1], &[1]),
                b::i64s("ax", &[1], &[2]),
            ],
        ),
    );
    let f = fold_quickly(&m).expect("the model loads");
    assert_eq!(f.folded, [0, 1, 2, 3, 4, 5, 6]);
    assert!(f.warnings.is_empty(), "{:?}", f.warnings);
    assert_eq!(f.values["sh"].to_i64().unwrap(), [0, M, 1, M, M]);
    assert!(f.values["a"].shape == [0, M as u64, M as u64, M as u64, M as u64]);
}

// Mutation test: edited model bytes decode, check, bind and fold without a crash.

#[derive(Clone, Debug)]
enum Edit {
    Flip(prop::sample::Index, u8),
    Set(prop::sample::Index, u8),
    Insert(prop::sample::Index, Vec<u8>),
    Delete(prop::sample::Index, u8),
    Truncate(prop::sample::Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    let i = any::<prop::sample::Index>;
    prop_oneof![
        4 => (i(), 0u8..8).prop_map(|(p, b)| Edit::Flip(p, b)),
        3 => (i(), prop_oneof![Just(0u8), Just(0xff), Just(0x7f), Just(0x80), any::<u8>()]).prop_map(|(p, b)| Edit::Set(p, b)),
        2 => (i(), prop::collection::vec(any::<u8>(), 1..10)).prop_map(|(p, b)| Edit::Insert(p, b)),
        2 => (i(), 1u8..32).prop_map(|(p, n)| Edit::Delete(p, n)),
        1 => i().prop_map(Edit::Truncate),
    ]
}

fn apply(bytes: &mut Vec<u8>, e: &Edit) {
    let len = bytes.len();
    let at = |p: &prop::sample::Index| p.index(len + 1);
    match e {
        Edit::Flip(p, b) if len > 0 => bytes[p.index(len)] ^= 1 << b,
        Edit::Set(p, b) if len > 0 => bytes[p.index(len)] = *b,
        Edit::Insert(p, b) => {
            let k = at(p);
            bytes.splice(k..k, b.iter().copied());
        }
        Edit::Delete(p, n) => {
            let k = at(p);
            bytes.drain(k..(k + *n as usize).min(len));
        }
        Edit::Truncate(p) => bytes.truncate(at(p)),
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_models_never_crash(which in 0usize..4, edits in prop::collection::vec(edit(), 1..6)) {
        let mut bytes = match which {
            0..=2 => b::encode(&[mlp(), dynamic(), external_model("w.bin", Some(0), Some(32))][which]),
            // A real export: every operator of a small CNN goes through the importer.
            _ => std::fs::read(crate::support::root().join(
                "tests/fixtures/onnx/mobilenet_v3_small_tiny-opset13/model.onnx",
            ))
            .unwrap(),
        };
        for e in &edits {
            apply(&mut bytes, e);
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("w.bin"), floats(&[1.; 8])).unwrap();
        let path = dir.path().join("m.onnx");
        std::fs::write(&path, &bytes).unwrap();
        match load_file(&path) {
            Ok(m) => {
                let b = Bindings::parse([], ["batch=2", "seq=3"]).unwrap();
                if let Ok((inputs, _)) = bind_inputs(&m, &b) {
                    let _ = fold(&m, &DeclaredShapes::new(&m, &inputs));
                }
                // The importer: a module, or coded diagnostics naming the model.
                let mut sources = collage::source::SourceMap::new();
                if let Err(ds) = collage::frontend::onnx::import::import(&m, &b, &mut sources) {
                    prop_assert!(!ds.is_empty());
                    prop_assert!(ds.iter().all(|d| d.code.id.starts_with('E')));
                }
            }
            Err(ds) => {
                prop_assert!(!ds.is_empty());
                prop_assert!(ds.iter().all(|d| d.code.id.starts_with("E30") && d.place.is_some()));
            }
        }
    }
}

#[test]
fn a_model_path_that_is_not_a_regular_file_is_e0901_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let e = load_file(dir.path()).unwrap_err();
    assert_eq!(e[0].code, E0901);
    let e = load_file(&dir.path().join("missing.onnx")).unwrap_err();
    assert_eq!(e[0].code, E0901);
    #[cfg(unix)]
    {
        let fifo = dir.path().join("fifo.onnx");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo has no other preconditions.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = load_file(&fifo).unwrap_err();
        assert_eq!(e[0].code, E0901, "a FIFO is refused before it is opened");
    }
}
