//! Constant data in the `#[metadata]` section survives every command that prints a module:
//! `collage parse`, `collage partition -o` (constants moved into outlined functions and their
//! Composite functions included) and `collage plan-devices`, with and without `--tvm-compat`.
//! The fixtures of `tests/fixtures/metadata/` are made by its `gen.py`: `conv-dense.relay`
//! carries the real data of a small network (float32, float16, int32, int64 and bool constants,
//! a scalar among them) and its outputs for `input.npy`, computed with NumPy.

use crate::support::{collage_in, load_text, load_text_ok, root};
use collage::ir::equal::{constant_data_equal, modules_equal};
use collage::ir::{Constant, DType, Expr, Module, TensorType};
use proptest::prelude::*;
use serde_json::Value as Json;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures/metadata").join(name)
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `collage` in `dir` and checks that it succeeds.
fn ok(dir: &Path, args: &[&str]) -> String {
    let o = collage_in(dir, args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn load_file(path: &Path) -> Module {
    let text = std::fs::read_to_string(path).unwrap();
    load_text_ok(&path.to_string_lossy(), &text)
}

/// The metadata section of a module text, parsed as JSON.
fn section(text: &str) -> Json {
    assert_eq!(text.matches("#[metadata]").count(), 1, "{text}");
    let json = &text[text.find("#[metadata]").unwrap() + "#[metadata]".len()..];
    serde_json::from_str(json).unwrap()
}

/// The base64 NDArrays of a module text's section.
fn blobs(text: &str) -> Vec<String> {
    section(text)["b64ndarrays"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap().to_string())
        .collect()
}

/// Checks that every constant `printed` refers to holds the data it holds in `original`.
fn same_data(original: &Module, printed: &Module) {
    let refs = printed
        .exprs
        .iter()
        .filter(|e| matches!(e, Expr::Const(Constant::Meta { .. })))
        .count();
    assert!(refs > 0);
    constant_data_equal(original, printed).unwrap();
}

/// `collage run` of `model` (on `input.npy`) with its outputs in `dir/out`, as JSON. The
/// reference backend runs it: the same operators in the same order on the same data give the
/// same bits, so a printed module that kept its constants runs identical to the original.
fn run(dir: &Path, model: &str, extra: &[&str]) -> Json {
    let input = format!("x={}", fixture("input.npy").display());
    let mut args = vec![
        "run",
        model,
        "--no-simplify",
        "--backend",
        "reference",
        "--input",
        &input,
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(dir, &args)).unwrap()
}

fn assert_identical(report: &Json, what: &str) {
    let comparisons = report["comparisons"].as_array().unwrap();
    assert!(!comparisons.is_empty(), "{what}");
    for c in comparisons {
        let outputs = c["outputs"].as_array().unwrap();
        assert_eq!(outputs.len(), 5, "{what}");
        for o in outputs {
            assert_eq!(o["identical"], true, "{what}: {o}");
        }
    }
}

/// The model computes its outputs from the section's data: they match NumPy's, and do not
/// depend on the seed of the pseudo-random weights.
#[test]
fn conv_dense_runs_on_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("conv-dense.relay");
    let model = model.to_str().unwrap();
    let a = run(dir.path(), model, &["--output-dir", "out"]);
    let b = run(dir.path(), model, &["--seed", "5"]);
    for k in 0..5 {
        let got = collage::runtime::exec::npy::read(
            &std::fs::read(dir.path().join(format!("out/output{k}.npy"))).unwrap(),
        )
        .unwrap();
        let want = collage::runtime::exec::npy::read(
            &std::fs::read(fixture(&format!("expected-output{k}.npy"))).unwrap(),
        )
        .unwrap();
        assert_eq!(got.dtype(), want.dtype(), "output{k}");
        assert_eq!(got.shape(), want.shape(), "output{k}");
        for i in 0..got.numel() {
            let (g, w) = (got.get_f64(i), want.get_f64(i));
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "output{k}[{i}]: {g} vs {w}"
            );
        }
        assert_eq!(
            a["outputs"][k]["checksum"], b["outputs"][k]["checksum"],
            "output{k} depends on the seed"
        );
    }
}

/// parse → print → parse gives the same module and the same bytes, and the printed NDArrays
/// are the input's, byte for byte (in TVM's encoding). Printing is a fixed point.
#[test]
fn printing_keeps_the_data_byte_for_byte() {
    for name in ["conv-dense.relay", "scalars.relay"] {
        let path = fixture(name);
        let text = std::fs::read_to_string(&path).unwrap();
        let m = load_file(&path);
        assert_eq!(
            m.meta.data.len(),
            if name == "scalars.relay" { 2 } else { 13 }
        );
        let printed = collage::frontend::relay::print::print_module(&m);
        assert_eq!(blobs(&printed), blobs(&text), "{name}");
        let again = load_text_ok(name, &printed);
        modules_equal(&m, &again).unwrap();
        same_data(&m, &again);
        assert_eq!(again.meta.data, m.meta.data, "{name}");
        assert_eq!(
            collage::frontend::relay::print::print_module(&again),
            printed,
            "{name}"
        );
        // The TVM-compatible form carries the same section.
        let opts = collage::frontend::relay::print::PrintOptions {
            tvm_compat: true,
            ..Default::default()
        };
        let tvm = collage::frontend::relay::print::print_module_with(&m, opts);
        assert_eq!(blobs(&tvm), blobs(&text), "{name}");
        let again = load_text_ok(name, &tvm);
        modules_equal(&m, &again).unwrap();
        assert_eq!(again.meta.data, m.meta.data, "{name}");
    }
}

/// `collage parse`, `collage plan-devices` (both forms, TVM-compatible too) and their outputs
/// run to the original's outputs bit for bit, and read back with the original's bytes.
#[test]
fn every_printing_command_keeps_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("conv-dense.relay");
    let model = model.to_str().unwrap();
    let original = load_file(Path::new(model));
    let commands: [&[&str]; 5] = [
        &["parse"],
        &["parse", "--tvm-compat", "--no-type-comments"],
        &["plan-devices"],
        &["plan-devices", "--complete"],
        &["plan-devices", "--tvm-compat"],
    ];
    let mut compare = Vec::new();
    for (k, cmd) in commands.iter().enumerate() {
        let mut args = cmd.to_vec();
        args.push(model);
        let text = ok(dir.path(), &args);
        let out = format!("printed{k}.relay");
        std::fs::write(dir.path().join(&out), &text).unwrap();
        let (_, _, again) = load_text(&out, &text);
        let again = again.unwrap_or_else(|d| panic!("{cmd:?} does not re-parse: {d:?}"));
        same_data(&original, &again);
        assert_eq!(again.meta.data, original.meta.data, "{cmd:?}");
        if cmd.contains(&"--tvm-compat") && cmd[0] == "plan-devices" {
            // Devices and constants in one section.
            let keys = section(&text)["nodes"][1]["keys"].clone();
            assert_eq!(
                keys,
                serde_json::json!(["VirtualDevice", "relay.Constant"]),
                "{text}"
            );
        }
        compare.push("--compare-with".to_string());
        compare.push(out);
    }
    let args: Vec<&str> = compare.iter().map(String::as_str).collect();
    let report = run(dir.path(), model, &args);
    assert_eq!(report["comparisons"].as_array().unwrap().len(), 5);
    assert_identical(&report, "printed forms");
}

/// `collage partition -o` moves constants into outlined functions and their Composite
/// functions; the written program carries their data under their original indices and runs to
/// the original's outputs bit for bit (on the data, not on seeded weights: another seed gives
/// the same bits). With `--tvm-compat` too.
#[test]
fn partitioned_programs_keep_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("conv-dense.relay");
    let model = model.to_str().unwrap();
    let rules = fixture("byoc.rules");
    let mock = format!("mock:{}", fixture("mock.json").display());
    let original = load_file(Path::new(model));
    for (out, extra) in [
        ("part.relay", None),
        ("part-tvm.relay", Some("--tvm-compat")),
    ] {
        let mut args = vec![
            "partition",
            model,
            "--no-simplify",
            "--rules",
            rules.to_str().unwrap(),
            "--costs",
            &mock,
            "-o",
            out,
        ];
        args.extend(extra);
        ok(dir.path(), &args);
        let text = std::fs::read_to_string(dir.path().join(out)).unwrap();
        // The weights of the convolution and its batch norm sit in the Composite function of
        // an outlined global; the scalar is copied into another.
        for needle in [
            "Composite=\"byoc.conv2d_bn\"",
            "Composite=\"byoc.dense_bias\"",
            "def @collage_byoc_conv2d_bn",
        ] {
            assert!(text.contains(needle), "{needle}\n{text}");
        }
        let composite = &text[text.find("Composite=\"byoc.conv2d_bn\"").unwrap()..];
        let composite = &composite[..composite.find('}').unwrap()];
        for i in 0..5 {
            assert!(
                composite.contains(&format!("meta[relay.Constant][{i}]")),
                "{composite}"
            );
        }
        assert_eq!(blobs(&text).len(), 13, "{out}");
        let again = load_text_ok(out, &text);
        same_data(&original, &again);
        assert_eq!(again.meta.data, original.meta.data, "{out}");
        let a = run(dir.path(), model, &["--compare-with", out]);
        assert_identical(&a, out);
        let b = run(dir.path(), out, &["--seed", "9"]);
        for k in 0..5 {
            assert_eq!(a["outputs"][k]["checksum"], b["outputs"][k]["checksum"]);
        }
    }
}

/// Two scalar constants with different data in the same structure, each in its own partition:
/// the partitions get a function each (one global for both would compute with one constant).
#[test]
fn equal_structures_with_different_scalar_constants_are_not_shared() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("scalars.relay");
    let model = model.to_str().unwrap();
    let rules = fixture("byoc.rules");
    let mock = format!("mock:{}", fixture("mock.json").display());
    let args = [
        "partition",
        model,
        "--no-simplify",
        "--rules",
        rules.to_str().unwrap(),
        "--costs",
        &mock,
        "-o",
        "part.relay",
    ];
    ok(dir.path(), &args);
    let text = std::fs::read_to_string(dir.path().join("part.relay")).unwrap();
    assert_eq!(
        text.matches("Composite=\"byoc.scale\"").count(),
        2,
        "{text}"
    );
    assert!(text.contains("meta[relay.Constant][0]"), "{text}");
    assert!(text.contains("meta[relay.Constant][1]"), "{text}");
    let o = collage_in(
        dir.path(),
        [
            "run",
            "part.relay",
            "--no-simplify",
            "--backend",
            "reference",
            "--compare-with",
            model,
            "--format",
            "json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Json = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["comparisons"][0]["outputs"][0]["identical"], true, "{v}");
}

/// A dtype of the property test.
const DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::I32, DType::I64, DType::BOOL];

/// The module `(c0, c1, ...)` of meta constants `meta[relay.Constant][index]` of the given
/// types, with data for those that have some.
fn constants_module(consts: &[(u32, TensorType, Option<Vec<u8>>)]) -> Module {
    let fields: Vec<String> = consts
        .iter()
        .map(|(i, ty, _)| format!("meta[relay.Constant][{i}] /* ty={ty} */"))
        .collect();
    let comma = if fields.len() == 1 { "," } else { "" };
    let text = format!(
        "#[version = \"0.0.5\"]\ndef @main() {{\n  ({}{comma})\n}}\n",
        fields.join(", ")
    );
    let mut m = load_text_ok("constants.relay", &text);
    for (i, _, data) in consts {
        if let Some(d) = data {
            m.meta.data.insert(
                ("relay.Constant".to_string(), *i),
                collage::ir::ConstData(d.clone().into()),
            );
        }
    }
    m
}

fn bytes_of(ty: &TensorType, seed: u64) -> Vec<u8> {
    let n: i64 = ty.shape.iter().map(|d| d.fixed().unwrap()).product();
    let size = n as usize * usize::from(ty.dtype.bits).div_ceil(8);
    let mut x = seed | 1;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if ty.dtype == DType::BOOL {
                (x & 1) as u8
            } else {
                x as u8
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(crate::enumerate_props::config())]

    /// Random constants (float32, float16, int32, int64, bool; scalars and zero-size shapes
    /// among them; any bytes, NaN payloads included), some with data and some without, at
    /// indices with gaps, survive print → parse: the same module, the same bytes, constants
    /// without data typed by their comments, and printing is a fixed point. Without any data
    /// no section is written.
    #[test]
    fn random_constants_survive_printing(
        specs in prop::collection::vec(
            (0usize..5, prop::collection::vec(0i64..4, 0..4), any::<bool>(), any::<u64>(), 0u32..3),
            1..7,
        ),
    ) {
        let mut index = 0u32;
        let mut consts = Vec::new();
        for (d, shape, with_data, seed, gap) in &specs {
            index += gap;
            let ty = TensorType::new(shape, DTYPES[*d]);
            let data = with_data.then(|| bytes_of(&ty, *seed));
            consts.push((index, ty, data));
            index += 1;
        }
        let m = constants_module(&consts);
        let printed = collage::frontend::relay::print::print_module(&m);
        let has_data = consts.iter().any(|c| c.2.is_some());
        prop_assert_eq!(printed.contains("#[metadata]"), has_data, "{}", printed);
        let again = load_text_ok("printed.relay", &printed);
        prop_assert!(modules_equal(&m, &again).is_ok());
        prop_assert_eq!(&again.meta.data, &m.meta.data);
        prop_assert_eq!(collage::frontend::relay::print::print_module(&again), printed);
    }
}
