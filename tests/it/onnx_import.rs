//! ONNX import end to end: the exported fixtures of `tests/fixtures/onnx/` (made by
//! `tests/onnx/export.py` and `tests/onnx/make_weights.py`, with ONNX Runtime's outputs) import,
//! run and match ONNX Runtime; every command takes `.onnx` files; the printed module runs on the
//! model's own weights; errors name the node.

use crate::support::{collage, collage_in, root};
use collage::diag::{Code, Diagnostic};
use collage::frontend::onnx::builder as b;
use collage::frontend::onnx::import::{import, Imported};
use collage::frontend::onnx::{load_file, shapes::Bindings};
use collage::runtime::exec::compare::compare;
use collage::runtime::exec::data::Weights;
use collage::runtime::exec::executor::{self, Options};
use collage::runtime::exec::npy;
use collage::runtime::exec::tensor::Tensor;
use collage::source::SourceMap;
use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One exported fixture: its folder and manifest.
struct Fixture {
    dir: PathBuf,
    manifest: Json,
}

impl Fixture {
    fn name(&self) -> String {
        self.dir.file_name().unwrap().to_string_lossy().into_owned()
    }

    fn model(&self) -> PathBuf {
        self.dir.join(self.manifest["file"].as_str().unwrap())
    }

    /// `(name, shape, npy file)` of each input.
    fn inputs(&self) -> Vec<(String, Vec<u64>, PathBuf)> {
        self.manifest["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    i["name"].as_str().unwrap().to_string(),
                    i["shape"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|d| d.as_u64().unwrap())
                        .collect(),
                    self.dir.join(i["file"].as_str().unwrap()),
                )
            })
            .collect()
    }

    fn outputs(&self) -> Vec<(String, PathBuf)> {
        self.manifest["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["name"].as_str().unwrap().to_string(),
                    self.dir.join(o["file"].as_str().unwrap()),
                )
            })
            .collect()
    }

    /// `--input-shape` texts binding every input to the fixture's shape.
    fn shape_flags(&self) -> Vec<String> {
        self.inputs()
            .iter()
            .map(|(n, s, _)| {
                let dims: Vec<String> = s.iter().map(u64::to_string).collect();
                format!("{n}={}", dims.join("x"))
            })
            .collect()
    }
}

/// Every fixture that runs (its manifest lists outputs), by name.
fn fixtures() -> Vec<Fixture> {
    let out: Vec<Fixture> = all_fixtures()
        .into_iter()
        .filter(|f| f.manifest.get("expect").is_none())
        .collect();
    assert!(out.len() >= 18, "only {} fixtures", out.len());
    out
}

/// Every fixture with a manifest: those that run, and those the loader must refuse
/// (`"expect": "refused"`).
fn all_fixtures() -> Vec<Fixture> {
    let mut out = Vec::new();
    for dir in [
        root().join("tests/fixtures/onnx"),
        root().join("tests/fixtures/onnx/external"),
    ] {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("manifest.json").is_file())
            .collect();
        entries.sort();
        for d in entries {
            let manifest: Json =
                serde_json::from_slice(&std::fs::read(d.join("manifest.json")).unwrap()).unwrap();
            out.push(Fixture { dir: d, manifest });
        }
    }
    out
}

fn import_fixture(f: &Fixture) -> Imported {
    let model = load_file(&f.model()).unwrap_or_else(|d| panic!("{}: {d:?}", f.name()));
    let flags = f.shape_flags();
    let bindings = Bindings::parse(flags.iter().map(String::as_str), []).unwrap();
    let mut sources = SourceMap::new();
    match import(&model, &bindings, &mut sources) {
        Ok(i) => i,
        Err(ds) => panic!(
            "{}: {}",
            f.name(),
            ds.iter()
                .map(|d| collage::diag::render_plain(d, &sources))
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

fn read_npy(p: &Path) -> Tensor {
    npy::read(&std::fs::read(p).unwrap()).unwrap()
}

/// Checks `got` against ONNX Runtime's outputs at the issue's tolerances: rtol 1e-3, atol 1e-4
/// for floats, exact for integers and booleans.
fn check_outputs(f: &Fixture, got: &[Tensor], what: &str) {
    let want = f.outputs();
    assert_eq!(got.len(), want.len(), "{} ({what}): output count", f.name());
    for (g, (name, file)) in got.iter().zip(&want) {
        let w = read_npy(file);
        let (rtol, atol) = if w.dtype().is_float() {
            (1e-3, 1e-4)
        } else {
            (0.0, 0.0)
        };
        let diff = compare(g, &w, rtol, atol)
            .unwrap_or_else(|e| panic!("{} ({what}) output `{name}`: {e}", f.name()));
        assert!(
            diff.within(),
            "{} ({what}) output `{name}` differs from ONNX Runtime's: {diff:?}",
            f.name()
        );
    }
}

/// Every fixture imports, and its outputs on the reference interpreter match ONNX Runtime's.
#[test]
fn fixtures_match_onnx_runtime_on_the_interpreter() {
    for f in fixtures() {
        let imp = import_fixture(&f);
        let weights = Weights::new(0);
        let mw = weights.for_module(&imp.module);
        let x = executor::compile(&imp.module, &mw, &Options::default())
            .unwrap_or_else(|e| panic!("{}: {e:?}", f.name()));
        let inputs: Vec<Arc<Tensor>> = f
            .inputs()
            .iter()
            .map(|(_, _, p)| Arc::new(read_npy(p)))
            .collect();
        let out = x
            .run(&inputs)
            .unwrap_or_else(|e| panic!("{}: {e:?}", f.name()));
        let got: Vec<Tensor> = out
            .value
            .flatten()
            .into_iter()
            .map(|t| (**t).clone())
            .collect();
        check_outputs(&f, &got, "interpreter");
    }
}

/// `collage run` on the `.onnx` file: generated code for the native operators; inputs named by
/// their ONNX names.
fn cli_run(f: &Fixture, model: &Path, extra: &[String]) -> Vec<Tensor> {
    let dir = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = vec!["run".into(), model.display().to_string()];
    for (n, _, p) in f.inputs() {
        args.push("--input".into());
        args.push(format!("{n}={}", p.display()));
    }
    args.extend_from_slice(extra);
    args.push("--output-dir".into());
    args.push(dir.path().display().to_string());
    let out = collage(&args);
    assert!(
        out.status.success(),
        "{}: {args:?}\n{}",
        f.name(),
        String::from_utf8_lossy(&out.stderr)
    );
    (0..f.outputs().len())
        .map(|k| read_npy(&dir.path().join(format!("output{k}.npy"))))
        .collect()
}

fn shape_args(f: &Fixture) -> Vec<String> {
    f.shape_flags()
        .into_iter()
        .flat_map(|s| ["--input-shape".to_string(), s])
        .collect()
}

/// `collage run model.onnx` (native operators as generated code) matches ONNX Runtime on every
/// fixture.
#[test]
fn run_takes_onnx_files_and_matches_onnx_runtime() {
    for f in fixtures() {
        let got = cli_run(&f, &f.model(), &shape_args(&f));
        check_outputs(&f, &got, "collage run");
    }
}

/// Unrolled recurrent layers outgrow the candidate limits at the default depth (the elementwise
/// steps joined by the cell state, the masks and the sequence output, docs/onnx.md "Recurrent
/// operators"): without a depth flag enumeration lowers the depth with a warning (W2205), and
/// the plan on the CPU targets matches ONNX Runtime.
#[test]
fn recurrent_models_partition_at_a_lowered_depth_and_match() {
    for (name, depth) in [("recurrent-opset17", 4), ("rnn_options-opset14", 2)] {
        let f = fixtures().into_iter().find(|f| f.name() == name).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let plan = dir.path().join("plan.relay");
        let mut args = vec!["partition".to_string(), f.model().display().to_string()];
        args.extend(shape_args(&f));
        for a in [
            "--target", "tvm_cpu", "--target", "dnnl", "--target", "openblas", "--costs",
            "analytic", "-o",
        ] {
            args.push(a.to_string());
        }
        args.push(plan.display().to_string());
        let out = collage(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {err}");
        assert!(
            err.contains("warning[W2205]")
                && err.contains(&format!("enumerated again at depth {depth} instead of")),
            "{name}: {err}"
        );
        let got = cli_run(&f, &plan, &[]);
        check_outputs(&f, &got, "partitioned");
    }
}

/// The partitioned program (default targets, written with `-o`) carries the weights and, run on
/// the native and library backends, matches ONNX Runtime; the printed import (`parse`) runs to
/// the same bits as the `.onnx` file on the reference backend.
#[test]
fn partitioned_and_printed_models_run_on_the_models_weights() {
    let wanted = [
        "resnet_tiny_bn-opset13",
        "mobilenet_v3_small_tiny-opset17",
        "gpt2_tiny-opset13",
        "bert_tiny-opset17",
    ];
    for f in fixtures()
        .into_iter()
        .filter(|f| wanted.contains(&f.name().as_str()))
    {
        let dir = tempfile::tempdir().unwrap();
        let plan = dir.path().join("plan.relay");
        let mut args = vec!["partition".to_string(), f.model().display().to_string()];
        args.extend(shape_args(&f));
        args.extend(["-o".to_string(), plan.display().to_string()]);
        let out = collage(&args);
        assert!(
            out.status.success(),
            "{}: {}",
            f.name(),
            String::from_utf8_lossy(&out.stderr)
        );
        let got = cli_run(&f, &plan, &[]);
        check_outputs(&f, &got, "partitioned");

        let printed = dir.path().join("printed.relay");
        let mut args = vec!["parse".to_string(), f.model().display().to_string()];
        args.extend(shape_args(&f));
        let out = collage(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(&printed, &out.stdout).unwrap();
        let reference = ["--backend".to_string(), "reference".to_string()];
        let a = cli_run(&f, &printed, &reference);
        let mut with_shapes = shape_args(&f);
        with_shapes.extend(reference.iter().cloned());
        let b = cli_run(&f, &f.model(), &with_shapes);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.bytes(), y.bytes(), "{}: printed model differs", f.name());
        }
        // `run --compare-with` says the same, with the shapes taken from the input files.
        let mut args = vec!["run".to_string(), f.model().display().to_string()];
        for (n, _, p) in f.inputs() {
            args.extend(["--input".to_string(), format!("{n}={}", p.display())]);
        }
        args.extend(["--compare-with".to_string(), printed.display().to_string()]);
        args.extend(reference.iter().cloned());
        let out = collage(&args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("identical") && !text.contains("differ"),
            "{text}"
        );
    }
}

/// The other model commands take `.onnx` files too.
#[test]
fn every_model_command_takes_onnx() {
    let f = fixtures()
        .into_iter()
        .find(|f| f.name() == "resnet_tiny-opset13")
        .unwrap();
    let model = f.model().display().to_string();
    for cmd in [
        vec!["candidates"],
        vec!["fuse"],
        vec!["plan-devices"],
        vec!["parse", "--json"],
        vec!["partition", "--format", "json"],
    ] {
        let mut args: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
        args.push(model.clone());
        args.extend(["--dim".to_string(), "batch=1".to_string()]);
        let out = collage(&args);
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stdout.is_empty(), "{cmd:?} printed nothing");
    }
}

fn codes(ds: &[Diagnostic]) -> Vec<Code> {
    ds.iter().map(|d| d.code).collect()
}

fn import_proto(
    m: &collage::frontend::onnx::proto::ModelProto,
    bindings: &Bindings,
) -> Result<Imported, Vec<Diagnostic>> {
    let bytes = b::encode(m);
    let model = collage::frontend::onnx::load_bytes(bytes.into(), "m.onnx", None)?;
    import(&model, bindings, &mut SourceMap::new())
}

fn none() -> Bindings {
    Bindings::parse([], []).unwrap()
}

/// An operator collage does not import is E3022 naming the node, its operator and the opset.
#[test]
fn unsupported_operators_name_the_node() {
    let g = b::graph(
        vec![b::node("Unique", &["x", "x"], &["y"], vec![])],
        vec![b::value("x", b::code::FLOAT, &["2", "2"])],
        vec![b::value("y", b::code::FLOAT, &["2", "2"])],
        vec![],
    );
    let ds = import_proto(&b::model(13, g), &none()).unwrap_err();
    assert_eq!(codes(&ds), vec![collage::diag::E3022]);
    let text = collage::diag::render_plain(&ds[0], &SourceMap::new());
    for needle in ["Unique", "node #0", "Unique_y", "opset 13", "m.onnx"] {
        assert!(text.contains(needle), "{needle} missing from {text}");
    }
}

/// A failed node's readers are not reported again (they are counted in a note), but an
/// independent failure is, even on a node with an omitted optional input after a failed node
/// with an omitted output.
#[test]
fn one_error_per_failed_node_not_per_reader() {
    let g = b::graph(
        vec![
            b::node("Unique", &["x", "x"], &["a", ""], vec![]),
            b::node("Relu", &["a"], &["r"], vec![]),
            b::node("Neg", &["r"], &["n"], vec![]),
            b::node("Det", &["x", ""], &["d"], vec![]),
            b::node("Add", &["n", "d"], &["y"], vec![]),
        ],
        vec![b::value("x", b::code::FLOAT, &["2", "2"])],
        vec![b::value("y", b::code::FLOAT, &["2", "2"])],
        vec![],
    );
    let ds = import_proto(&b::model(13, g), &none()).unwrap_err();
    assert_eq!(codes(&ds), vec![collage::diag::E3022, collage::diag::E3022]);
    let text = collage::diag::render_plain(&ds[1], &SourceMap::new());
    assert!(text.contains("Det"), "{text}");
    assert!(text.contains("3 later node(s)"), "{text}");
}

/// A `Reshape` whose shape depends on the input's values cannot be imported: E3025.
#[test]
fn shapes_computed_from_input_values_are_e3025() {
    let g = b::graph(
        vec![
            b::node("Cast", &["s"], &["s64"], vec![b::attr_int("to", 7)]),
            b::node("Reshape", &["x", "s64"], &["y"], vec![]),
        ],
        vec![
            b::value("x", b::code::FLOAT, &["2", "3"]),
            b::value("s", b::code::INT32, &["2"]),
        ],
        vec![b::value("y", b::code::FLOAT, &["3", "2"])],
        vec![],
    );
    let ds = import_proto(&b::model(13, g), &none()).unwrap_err();
    assert_eq!(codes(&ds), vec![collage::diag::E3025]);
}

/// Operator misuse: a type error (E3024), an attribute value collage does not take (E3023),
/// strides that would overflow arithmetic (E3023); all name the node.
#[test]
fn operator_misuse_is_diagnosed() {
    let mm = b::graph(
        vec![b::node("MatMul", &["a", "w"], &["y"], vec![])],
        vec![b::value("a", b::code::FLOAT, &["2", "3"])],
        vec![b::value("y", b::code::FLOAT, &["2", "4"])],
        vec![b::f32s("w", &[4, 4], &[0.0; 16])],
    );
    let ds = import_proto(&b::model(13, mm), &none()).unwrap_err();
    assert_eq!(codes(&ds), vec![collage::diag::E3024]);
    assert!(ds[0].place.as_ref().unwrap().node.is_some());

    let conv = |attrs: Vec<collage::frontend::onnx::proto::AttributeProto>| {
        b::graph(
            vec![b::node("Conv", &["x", "w"], &["y"], attrs)],
            vec![b::value("x", b::code::FLOAT, &["1", "1", "5", "5"])],
            vec![b::value("y", b::code::FLOAT, &["?", "?", "?", "?"])],
            vec![b::f32s("w", &[1, 1, 3, 3], &[1.0; 9])],
        )
    };
    for attrs in [
        vec![b::attr_ints("strides", &[0, 1])],
        vec![b::attr_ints("strides", &[i64::MAX, 1])],
        vec![b::attr_ints("pads", &[-1, 0, 0, 0])],
        vec![b::attr_ints("dilations", &[1 << 40, 1])],
    ] {
        let ds = import_proto(&b::model(13, conv(attrs.clone())), &none()).unwrap_err();
        assert_eq!(codes(&ds), vec![collage::diag::E3023], "{attrs:?}");
    }
    // The same convolution with sound attributes imports.
    import_proto(
        &b::model(13, conv(vec![b::attr_ints("pads", &[1, 1, 1, 1])])),
        &none(),
    )
    .unwrap();
}

/// The recurrent operators are unrolled up to a bound on the steps, and refuse weights of the
/// wrong shape, unknown activations and coupled LSTM gates, naming the node (E3023).
#[test]
fn recurrent_operators_refuse_what_they_cannot_unroll() {
    let lstm =
        |steps: &str, w_rows: i64, attrs: Vec<collage::frontend::onnx::proto::AttributeProto>| {
            b::graph(
                vec![b::node("LSTM", &["x", "w", "r"], &["y"], attrs)],
                vec![b::value("x", b::code::FLOAT, &[steps, "1", "2"])],
                vec![b::value("y", b::code::FLOAT, &["?", "?", "?", "?"])],
                vec![
                    b::f32s("w", &[1, w_rows, 2], &vec![0.1; (w_rows * 2) as usize]),
                    b::f32s("r", &[1, 12, 3], &[0.1; 36]),
                ],
            )
        };
    let hidden = || b::attr_int("hidden_size", 3);
    let cases = [
        (lstm("5000", 12, vec![hidden()]), "5000 steps"),
        (lstm("4", 8, vec![hidden()]), "`W` of shape [1, 8, 2]"),
        (
            lstm("4", 12, vec![b::attr_int("hidden_size", i64::MAX)]),
            "hidden_size = 9223372036854775807",
        ),
        (
            lstm(
                "4",
                12,
                vec![
                    hidden(),
                    b::attr_strings("activations", &["Gauss", "Tanh", "Tanh"]),
                ],
            ),
            "activation \"Gauss\"",
        ),
        (
            lstm("4", 12, vec![hidden(), b::attr_int("input_forget", 1)]),
            "input_forget",
        ),
        (
            lstm(
                "4",
                12,
                vec![hidden(), b::attr_string("direction", "sideways")],
            ),
            "direction \"sideways\"",
        ),
    ];
    for (g, needle) in cases {
        let ds = import_proto(&b::model(14, g), &none()).unwrap_err();
        assert_eq!(codes(&ds), vec![collage::diag::E3023], "{needle}");
        assert!(ds[0].message.contains(needle), "{}", ds[0].message);
        assert!(ds[0].place.as_ref().unwrap().node.is_some());
    }
    // The same node with sound weights imports, unrolled.
    import_proto(&b::model(14, lstm("4", 12, vec![hidden()])), &none()).unwrap();
}

/// ONNX names that are not identifiers: the parameter gets the reversible identifier, and
/// `--input` takes the ONNX name.
#[test]
fn onnx_input_names_work_with_input() {
    let g = b::graph(
        vec![b::node("Relu", &["onnx::in.1"], &["/out:0"], vec![])],
        vec![b::value("onnx::in.1", b::code::FLOAT, &["2"])],
        vec![b::value("/out:0", b::code::FLOAT, &["2"])],
        vec![],
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.onnx"), b::encode(&b::model(13, g))).unwrap();
    let x = Tensor::from_slice(collage::ir::DType::F32, &[2], &[-1.0f32, 2.0]).unwrap();
    std::fs::write(dir.path().join("x.npy"), npy::write(&x).unwrap()).unwrap();
    let out = collage_in(
        dir.path(),
        [
            "run",
            "m.onnx",
            "--input",
            "onnx::in.1=x.npy",
            "--output-dir",
            ".",
            "--backend",
            "reference",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let y = read_npy(&dir.path().join("output0.npy"));
    assert_eq!(
        y.bytes(),
        Tensor::from_slice(collage::ir::DType::F32, &[2], &[0.0f32, 2.0])
            .unwrap()
            .bytes()
    );
    let out = collage_in(dir.path(), ["parse", "m.onnx"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let ident = collage::frontend::onnx::names::to_ident("onnx::in.1");
    assert!(text.contains(&format!("%{ident}")), "{text}");
    assert_eq!(
        collage::frontend::onnx::names::from_ident(&ident).as_deref(),
        Some("onnx::in.1")
    );
}

/// The model flags: the format forced for a file without the extension; `--input-shape` on a
/// Relay model is E0905; unbound dimensions on the command line are E3020 naming the flags.
#[test]
fn model_flags() {
    let f = fixtures()
        .into_iter()
        .find(|f| f.name() == "resnet_tiny-opset13")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("model.bin");
    std::fs::copy(f.model(), &copy).unwrap();
    let out = collage_in(
        dir.path(),
        [
            "parse",
            "model.bin",
            "--model-format",
            "onnx",
            "--dim",
            "batch=1",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = collage_in(dir.path(), ["parse", "model.bin"]);
    assert_eq!(out.status.code(), Some(1));
    let out = collage(["parse", "tests/models/mnist.relay", "--dim", "batch=1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("E0905"));
    let out = collage(["parse", f.model().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in ["E3020", "--input-shape", "--dim", "batch"] {
        assert!(err.contains(needle), "{needle} missing from {err}");
    }
}

/// Reports name ONNX nodes: the table's range column gives node positions, the JSON report
/// gives each operator's node (position, name, operator), and `--explain` takes an ONNX value
/// name and names the node.
#[test]
fn reports_name_onnx_nodes() {
    let f = fixtures()
        .into_iter()
        .find(|f| f.name() == "gpt2_tiny-opset13")
        .unwrap();
    let model = f.model().display().to_string();
    let base = ["--dim", "batch=1", "--dim", "sequence=8"];
    let value = "/model/transformer/h.0/attn/Add_output_0";
    // The model as imported: simplification folds this node's constant inputs away.
    let mut args = vec![
        "partition",
        &model,
        "--no-simplify",
        "--format",
        "json",
        "--explain",
        value,
    ];
    args.extend(base);
    let out = collage(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Json = serde_json::from_slice(&out.stdout).unwrap();
    let parts = v["functions"][0]["partitions"].as_array().unwrap();
    let named: Vec<&Json> = parts
        .iter()
        .flat_map(|p| p["nodes"].as_array().unwrap())
        .filter_map(|n| n.get("onnx_node"))
        .collect();
    assert!(named.len() > 20, "{named:?}");
    assert!(named
        .iter()
        .any(|n| n["op_type"] == "MatMul" && n["name"].as_str().unwrap().contains("attn")));
    assert!(parts.iter().any(|p| p["onnx_nodes"].is_array()));
    let e = &v["explain"][0];
    assert_eq!(e["onnx_node"]["op_type"], "Add", "{e}");
    assert_eq!(e["onnx_node"]["name"], "/model/transformer/h.0/attn/Add");

    let mut args = vec!["partition", &model, "--no-simplify", "--explain", value];
    args.extend(base);
    let out = collage(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ONNX node #"), "{text}");
    assert!(text.contains("  nodes  "), "{text}");
}

/// Bad files on the command line: each refused external-data fixture, garbage and truncated
/// bytes are a coded E30xx diagnostic naming the file, exit code 1, never a panic.
#[test]
fn bad_files_are_diagnosed_with_exit_code_1() {
    let refused: Vec<Fixture> = all_fixtures()
        .into_iter()
        .filter(|f| f.manifest["expect"] == "refused")
        .collect();
    assert!(refused.len() >= 5);
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.onnx");
    std::fs::write(&garbage, b"\x0a\xff\xff\xff\xff\x0fnot a model").unwrap();
    let good = std::fs::read(fixtures()[0].model()).unwrap();
    let truncated = dir.path().join("truncated.onnx");
    std::fs::write(&truncated, &good[..good.len() / 2]).unwrap();
    let mut paths: Vec<PathBuf> = refused.iter().map(Fixture::model).collect();
    paths.extend([garbage, truncated]);
    for p in paths {
        for cmd in ["parse", "run"] {
            let out = collage([cmd, p.to_str().unwrap(), "--dim", "batch=1"]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{cmd} {}: {err}", p.display());
            assert!(err.contains("error[E30"), "{cmd} {}: {err}", p.display());
            assert!(!err.contains("panicked"), "{err}");
            assert!(
                err.contains(&*p.file_name().unwrap().to_string_lossy())
                    || err.contains("model.onnx")
            );
        }
    }
}

/// Integers and booleans at run time: token ids through `Gather`, a mask from `Equal` on
/// integers through `Where`, a `Cast` of a boolean, an integer `ReduceSum`; on the interpreter
/// and on generated code.
#[test]
fn integer_and_boolean_tensors_run() {
    let g = b::graph(
        vec![
            b::node("Gather", &["emb", "ids"], &["h"], vec![]),
            b::node("Equal", &["ids", "pad"], &["is_pad"], vec![]),
            b::node("Unsqueeze", &["is_pad", "axis"], &["mask"], vec![]),
            b::node("Where", &["mask", "zero", "h"], &["y"], vec![]),
            b::node("Cast", &["is_pad"], &["pads"], vec![b::attr_int("to", 7)]),
            b::node(
                "ReduceSum",
                &["pads"],
                &["count"],
                vec![b::attr_int("keepdims", 0)],
            ),
        ],
        vec![b::value("ids", b::code::INT64, &["batch", "3"])],
        vec![
            b::value("y", b::code::FLOAT, &["batch", "3", "2"]),
            b::value("pads", b::code::INT64, &["batch", "3"]),
            b::value("count", b::code::INT64, &[]),
        ],
        vec![
            b::f32s("emb", &[4, 2], &[0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]),
            b::i64s("pad", &[], &[0]),
            b::i64s("axis", &[1], &[2]),
            b::f32s("zero", &[], &[-1.0]),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.onnx"), b::encode(&b::model(13, g))).unwrap();
    let ids =
        Tensor::from_slice(collage::ir::DType::I64, &[2, 3], &[1i64, 0, 3, -1, 2, 0]).unwrap();
    std::fs::write(dir.path().join("ids.npy"), npy::write(&ids).unwrap()).unwrap();
    for backend in ["reference", "auto"] {
        let out = collage_in(
            dir.path(),
            [
                "run",
                "m.onnx",
                "--input",
                "ids=ids.npy",
                "--output-dir",
                ".",
                "--backend",
                backend,
            ],
        );
        assert!(
            out.status.success(),
            "{backend}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let y = read_npy(&dir.path().join("output0.npy"));
        let want: [f32; 12] = [
            1.0, 1.5, -1.0, -1.0, 3.0, 3.5, 3.0, 3.5, 2.0, 2.5, -1.0, -1.0,
        ];
        let want = Tensor::from_slice(collage::ir::DType::F32, &[2, 3, 2], &want).unwrap();
        assert_eq!(y.bytes(), want.bytes(), "{backend}");
        let pads = read_npy(&dir.path().join("output1.npy"));
        let want = Tensor::from_slice(collage::ir::DType::I64, &[2, 3], &[0i64, 1, 0, 0, 0, 1]);
        assert_eq!(pads.bytes(), want.unwrap().bytes(), "{backend}");
        let count = read_npy(&dir.path().join("output2.npy"));
        assert_eq!(count.bytes(), 2i64.to_le_bytes(), "{backend}");
    }
}

/// Printed plans parse again whatever the importer made: scalars of dtypes the text format has
/// no literal for (here the int8 bounds of a Gather's negative-index wrap) and attribute
/// integers beyond int32 (a Reshape of a dimension of 2^31), and integer literals beyond their
/// dtype's range (`IsInf` of int32 compared with infinity). Each once made `partition` fail its
/// own check of the printed program (E2103, exit code 101).
#[test]
fn printed_plans_of_narrow_scalars_and_huge_dimensions_parse_again() {
    let dir = tempfile::tempdir().unwrap();
    let gather = b::graph(
        vec![b::node("Gather", &["emb", "ids"], &["y"], vec![])],
        vec![b::value("ids", 3, &["3"])],
        vec![b::value("y", b::code::FLOAT, &["3", "2"])],
        vec![b::f32s(
            "emb",
            &[4, 2],
            &[0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5],
        )],
    );
    std::fs::write(dir.path().join("g.onnx"), b::encode(&b::model(13, gather))).unwrap();
    let ids = Tensor::from_slice(collage::ir::DType::I8, &[3], &[-1i8, 0, 2]).unwrap();
    std::fs::write(dir.path().join("ids.npy"), npy::write(&ids).unwrap()).unwrap();
    let reshape = b::graph(
        vec![b::node("Reshape", &["x", "shape"], &["y"], vec![])],
        vec![b::value("x", b::code::FLOAT, &["batch", "4"])],
        vec![b::value("y", b::code::FLOAT, &["batch", "2", "2"])],
        vec![b::i64s("shape", &[3], &[-1, 2, 2])],
    );
    std::fs::write(dir.path().join("r.onnx"), b::encode(&b::model(13, reshape))).unwrap();
    // `IsInf` of integers: no infinity to compare with (once an int64-sized literal).
    let isinf = b::graph(
        vec![b::node("IsInf", &["x"], &["y"], vec![])],
        vec![b::value("x", b::code::INT32, &["3"])],
        vec![b::value("y", b::code::BOOL, &["3"])],
        vec![],
    );
    std::fs::write(dir.path().join("i.onnx"), b::encode(&b::model(13, isinf))).unwrap();
    for (model, extra) in [
        ("g.onnx", vec![]),
        ("r.onnx", vec!["--dim", "batch=2147483648"]),
        ("i.onnx", vec![]),
    ] {
        let mut args = vec!["partition", model, "--costs", "analytic", "-o", "out.relay"];
        args.extend(extra);
        let out = collage_in(dir.path(), &args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{model}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let parsed = collage_in(dir.path(), ["parse", "out.relay"]);
        assert!(
            parsed.status.success(),
            "{model}: {}",
            String::from_utf8_lossy(&parsed.stderr)
        );
    }
    let r = collage_in(
        dir.path(),
        [
            "partition",
            "r.onnx",
            "--costs",
            "analytic",
            "-o",
            "r.relay",
            "--dim",
            "batch=2147483648",
        ],
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let text = std::fs::read_to_string(dir.path().join("r.relay")).unwrap();
    assert!(text.contains("2147483648i64"), "{text}");
    // The int8 Gather runs, its negative index wrapping as ONNX says.
    let out = collage_in(
        dir.path(),
        [
            "run",
            "g.onnx",
            "--input",
            "ids=ids.npy",
            "--output-dir",
            ".",
            "--check-reference",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let y = read_npy(&dir.path().join("output0.npy"));
    let want = Tensor::from_slice(
        collage::ir::DType::F32,
        &[3, 2],
        &[3.0f32, 3.5, 0.0, 0.5, 2.0, 2.5],
    )
    .unwrap();
    assert_eq!(y.bytes(), want.bytes());
}

/// `Einsum` is contracted with batched products, sums and transposes: each equation gives the
/// same numbers as the operators that compute it directly (`MatMul`, `Transpose`, `ReduceSum`),
/// and a diagonal is E3023.
#[test]
fn einsum_matches_the_operators_it_stands_for() {
    let x: Vec<f32> = (0..24).map(|i| (i as f32 * 0.37).sin()).collect();
    let y: Vec<f32> = (0..40).map(|i| (i as f32 * 0.21).cos()).collect();
    let model = |node: collage::frontend::onnx::proto::NodeProto,
                 inits: Vec<collage::frontend::onnx::proto::TensorProto>| {
        b::model(
            13,
            b::graph(
                vec![node],
                vec![
                    b::value("x", b::code::FLOAT, &["2", "3", "4"]),
                    b::value("w", b::code::FLOAT, &["2", "4", "5"]),
                ],
                vec![b::value("y", b::code::FLOAT, &["?", "?", "?"])],
                inits,
            ),
        )
    };
    let eq = |e: &str| vec![b::attr_string("equation", e)];
    let run = |m| {
        run_proto(
            &m,
            vec![f32_tensor(&[2, 3, 4], &x), f32_tensor(&[2, 4, 5], &y)],
        )
    };
    let cases = [
        (
            b::node("Einsum", &["x", "w"], &["y"], eq("bij,bjk->bik")),
            b::node("MatMul", &["x", "w"], &["y"], vec![]),
        ),
        (
            b::node("Einsum", &["x"], &["y"], eq("bij->jbi")),
            b::node(
                "Transpose",
                &["x"],
                &["y"],
                vec![b::attr_ints("perm", &[2, 0, 1])],
            ),
        ),
        (
            b::node("Einsum", &["x"], &["y"], eq("bij -> bi")),
            b::node(
                "ReduceSum",
                &["x", "axes"],
                &["y"],
                vec![b::attr_int("keepdims", 0)],
            ),
        ),
    ];
    for (einsum, direct) in cases {
        let inits = || vec![b::i64s("axes", &[1], &[2])];
        let a = run(model(einsum, inits()));
        let d = run(model(direct, inits()));
        assert_eq!(a[0].shape(), d[0].shape());
        for (p, q) in a[0].f32_view().iter().zip(d[0].f32_view().iter()) {
            assert!((p - q).abs() <= 1e-5, "{p} against {q}");
        }
    }
    let ds = import_proto(
        &model(b::node("Einsum", &["x"], &["y"], eq("bii->bi")), vec![]),
        &none(),
    )
    .unwrap_err();
    assert_eq!(codes(&ds), vec![collage::diag::E3023]);
    assert!(ds[0].message.contains("a diagonal"), "{}", ds[0].message);
}

/// Runs a built model on the reference interpreter.
fn run_proto(m: &collage::frontend::onnx::proto::ModelProto, inputs: Vec<Tensor>) -> Vec<Tensor> {
    let imp = import_proto(m, &none()).unwrap_or_else(|d| panic!("{d:?}"));
    let weights = Weights::new(0);
    let mw = weights.for_module(&imp.module);
    let x = executor::compile(&imp.module, &mw, &Options::default()).unwrap();
    let inputs: Vec<Arc<Tensor>> = inputs.into_iter().map(Arc::new).collect();
    let out = x.run(&inputs).unwrap();
    out.value
        .flatten()
        .into_iter()
        .map(|t| (**t).clone())
        .collect()
}

fn f32_tensor(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_slice(collage::ir::DType::F32, shape, v).unwrap()
}

/// Slices as ONNX defines them: a negative step down past the first element, and bounds that
/// cross (an empty result); `Upsample` (opset 9) repeats pixels.
#[test]
fn slices_and_upsampling_follow_onnx() {
    let slice = |starts: &[i64], ends: &[i64], steps: &[i64], out: &str| {
        b::model(
            13,
            b::graph(
                vec![b::node("Slice", &["x", "s", "e", "a", "p"], &["y"], vec![])],
                vec![b::value("x", b::code::FLOAT, &["5"])],
                vec![b::value("y", b::code::FLOAT, &[out])],
                vec![
                    b::i64s("s", &[1], starts),
                    b::i64s("e", &[1], ends),
                    b::i64s("a", &[1], &[0]),
                    b::i64s("p", &[1], steps),
                ],
            ),
        )
    };
    let x = f32_tensor(&[5], &[0.0, 1.0, 2.0, 3.0, 4.0]);
    let y = run_proto(&slice(&[3], &[-100], &[-1], "4"), vec![x.clone()]);
    assert_eq!(
        y[0].bytes(),
        f32_tensor(&[4], &[3.0, 2.0, 1.0, 0.0]).bytes()
    );
    let y = run_proto(&slice(&[-1], &[i64::MIN], &[-2], "3"), vec![x.clone()]);
    assert_eq!(y[0].bytes(), f32_tensor(&[3], &[4.0, 2.0, 0.0]).bytes());
    let y = run_proto(&slice(&[3], &[1], &[1], "0"), vec![x]);
    assert_eq!(y[0].shape(), &[0]);

    let up = b::model(
        9,
        b::graph(
            vec![b::node("Upsample", &["x", "k"], &["y"], vec![])],
            vec![b::value("x", b::code::FLOAT, &["1", "1", "2", "2"])],
            vec![b::value("y", b::code::FLOAT, &["1", "1", "4", "6"])],
            vec![b::f32s("k", &[4], &[1.0, 1.0, 2.0, 3.0])],
        ),
    );
    let y = run_proto(&up, vec![f32_tensor(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0])]);
    let want: Vec<f32> = [
        [1.0f32, 1.0, 1.0, 2.0, 2.0, 2.0],
        [3.0, 3.0, 3.0, 4.0, 4.0, 4.0],
    ]
    .iter()
    .flat_map(|r| r.iter().chain(r.iter()).copied().collect::<Vec<_>>())
    .collect();
    let want: Vec<f32> = want[..6]
        .iter()
        .chain(&want[..6])
        .chain(&want[12..18])
        .chain(&want[12..18])
        .copied()
        .collect();
    assert_eq!(y[0].bytes(), f32_tensor(&[1, 1, 4, 6], &want).bytes());
}

/// Random one-operator models of the operators the importer writes out, with random ranks,
/// element types, extra inputs and attributes (including absurd ones): `partition` and `run
/// --check-reference` either succeed or report errors (exit code 0 or 1), never a panic or an
/// internal error (exit code 101) or a signal. Such models once made `partition` fail its
/// own check of the printed program.
mod written_operators {
    use super::*;
    use collage::frontend::onnx::proto::type_proto;
    use proptest::prelude::*;

    const OPS: &[&str] = &[
        "Round",
        "Sign",
        "IsNaN",
        "IsInf",
        "Tan",
        "Sinh",
        "Asin",
        "Acos",
        "Asinh",
        "Atanh",
        "Softsign",
        "ThresholdedRelu",
        "Shrink",
        "Celu",
        "Mish",
        "Swish",
        "DepthToSpace",
        "SpaceToDepth",
        "Trilu",
        "OneHot",
        "LRN",
        "DequantizeLinear",
        "QuantizeLinear",
        "Mod",
        "CumSum",
        "Hardmax",
        "LpNormalization",
        "MeanVarianceNormalization",
        "GroupNormalization",
        "RMSNormalization",
        "GatherND",
        "And",
        "Or",
        "Xor",
    ];
    const ELEMS: &[i32] = &[1, 1, 7, 6, 3, 2, 9, 10];
    const ATTRS: &[&str] = &[
        "axis",
        "blocksize",
        "upper",
        "size",
        "alpha",
        "p",
        "num_groups",
        "fmod",
        "exclusive",
        "reverse",
        "batch_dims",
        "detect_positive",
        "output_dtype",
        "block_size",
    ];
    const VALUES: &[i64] = &[-(1 << 40), -3, -1, 0, 1, 2, 3, 4, 1 << 20, 1 << 40];

    fn extra(
        i: usize,
        kind: usize,
    ) -> (String, Option<collage::frontend::onnx::proto::TensorProto>) {
        let n = format!("c{i}");
        let t = match kind {
            0 => b::i64s(&n, &[], &[2]),
            1 => b::i64s(&n, &[2], &[3, -1]),
            2 => b::f32s(&n, &[], &[0.5]),
            3 => b::f32s(&n, &[2], &[0.5, 2.0]),
            _ => return ("x".into(), None),
        };
        (n, Some(t))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn never_crash(
            op in 0..OPS.len(),
            shape in prop::collection::vec(prop::sample::select(vec![1i64, 2, 3, 4, 6]), 0..5),
            elem in prop::sample::select(ELEMS.to_vec()),
            extras in prop::collection::vec(0usize..5, 0..3),
            attrs in prop::collection::vec((0..ATTRS.len(), 0..VALUES.len()), 0..3),
        ) {
            let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            let dims: Vec<&str> = dims.iter().map(String::as_str).collect();
            let mut inputs = vec!["x".to_string()];
            let mut inits = Vec::new();
            for (i, &k) in extras.iter().enumerate() {
                let (name, t) = extra(i + 1, k);
                inputs.push(name);
                inits.extend(t);
            }
            let ins: Vec<&str> = inputs.iter().map(String::as_str).collect();
            let mut seen = std::collections::HashSet::new();
            let attrs: Vec<_> = attrs
                .into_iter()
                .filter(|(a, _)| seen.insert(*a))
                .map(|(a, v)| b::attr_int(ATTRS[a], VALUES[v]))
                .collect();
            // The output's type without a shape (the importer computes it).
            let mut y = b::value("y", elem, &[]);
            if let Some(type_proto::Value::TensorType(t)) =
                y.r#type.as_mut().and_then(|t| t.value.as_mut())
            {
                t.shape = None;
            }
            let g = b::graph(
                vec![b::node(OPS[op], &ins, &["y"], attrs)],
                vec![b::value("x", elem, &dims)],
                vec![y],
                inits,
            );
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("m.onnx"), b::encode(&b::model(18, g))).unwrap();
            for args in [
                vec!["partition", "m.onnx", "--costs", "analytic", "-o", "o.relay"],
                vec!["run", "m.onnx", "--check-reference", "--cache-dir", "kc"],
            ] {
                let out = collage_in(dir.path(), &args);
                prop_assert!(
                    matches!(out.status.code(), Some(0 | 1)),
                    "{} of {} {shape:?} type {elem}: {:?}\n{}",
                    args[0],
                    OPS[op],
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}
