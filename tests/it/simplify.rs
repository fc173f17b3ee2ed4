//! Graph simplification end to end (`docs/simplify.md`): the flags of each command, the report,
//! and partitioned programs written with `-o` computing what the unsimplified model computes,
//! on a Relay corpus model (weights drawn from the seed) and on ONNX fixtures (weights in the
//! file, compared with ONNX Runtime's outputs).

use crate::support::{collage, root};
use collage::runtime::exec::tensor::Tensor;
use std::path::Path;

fn text(o: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn npy(path: &Path) -> Tensor {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    collage::runtime::exec::npy::read(&bytes).unwrap()
}

fn assert_close(got: &Tensor, want: &Tensor, rtol: f64, atol: f64) {
    assert_eq!(got.shape(), want.shape());
    for i in 0..got.numel() {
        let (a, b) = (got.get_f64(i), want.get_f64(i));
        assert!(
            (a - b).abs() <= atol + rtol * b.abs(),
            "element {i}: {a} against {b}"
        );
    }
}

#[test]
fn parse_shows_the_model_as_given_unless_asked() {
    let model = "tests/models/mobilenet.relay";
    let (given, _) = text(&collage(["parse", model]));
    assert!(given.contains("nn.batch_norm"));
    let o = collage(["parse", model, "--simplify"]);
    assert!(o.status.success(), "{:?}", text(&o));
    let (simplified, _) = text(&o);
    assert!(!simplified.contains("nn.batch_norm"));
    assert!(
        simplified.contains("#[metadata]"),
        "folded weights carry data"
    );
    let o = collage(["parse", model, "--simplify", "--no-simplify"]);
    assert_eq!(o.status.code(), Some(2), "{:?}", text(&o));
}

#[test]
fn partition_simplifies_by_default_and_reports_it() {
    let model = "tests/models/mobilenet.relay";
    let args = ["partition", model, "--no-baselines", "--format", "json"];
    let o = collage(args);
    assert!(o.status.success(), "{:?}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = &v["simplify"];
    // Every batch norm follows a convolution: each becomes the convolution's bias.
    assert_eq!(s["batch_norm_into_conv"], 53, "{s}");
    assert!(s["ops_after"].as_u64() <= s["ops_before"].as_u64(), "{s}");
    let o = collage(args.iter().chain(&["--no-simplify"]));
    assert!(o.status.success(), "{:?}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v.get("simplify").is_none());
    let o = collage(["partition", model, "--no-baselines"]);
    let (out, _) = text(&o);
    assert!(out.contains("simplify: "), "{out}");
}

/// The partitioned program of a model whose weights are drawn from the seed runs on the
/// folded values: it computes what the original computes with the same seed.
#[test]
fn printed_plan_of_a_seeded_model_matches_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.relay");
    let model = root().join("tests/models/mobilenet.relay");
    for seed in ["0", "5"] {
        let o = collage([
            "partition".as_ref(),
            model.as_os_str(),
            "--no-baselines".as_ref(),
            "--seed".as_ref(),
            seed.as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        assert!(o.status.success(), "{:?}", text(&o));
        let o = collage([
            "run".as_ref(),
            out.as_os_str(),
            "--backend".as_ref(),
            "reference".as_ref(),
            "--seed".as_ref(),
            seed.as_ref(),
            "--no-simplify".as_ref(),
            "--compare-with".as_ref(),
            model.as_os_str(),
        ]);
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{stdout}\n{stderr}");
        assert!(stdout.contains("within tolerance"), "{stdout}");
    }
}

/// ONNX fixtures: the printed plan (batch norms folded in `resnet_tiny_bn`, the dense layer's
/// transpose in BERT's) gives ONNX Runtime's outputs on the fixture's inputs.
#[test]
fn printed_plans_of_onnx_fixtures_match_onnx_runtime() {
    let cases: &[(&str, &[&str])] = &[
        ("resnet_tiny_bn-opset17", &["input"]),
        ("mobilenet_v2_tiny-opset13", &["input"]),
        ("bert_tiny-opset17", &["input_ids", "attention_mask"]),
    ];
    for (name, inputs) in cases {
        let fx = root().join("tests/fixtures/onnx").join(name);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.relay");
        let mut args: Vec<std::ffi::OsString> =
            vec!["partition".into(), fx.join("model.onnx").into()];
        for i in *inputs {
            args.push("--input-shape".into());
            let t = npy(&fx.join(format!("input_{i}.npy")));
            let dims: Vec<String> = t.shape().iter().map(usize::to_string).collect();
            args.push(format!("{i}={}", dims.join("x")).into());
        }
        args.extend([
            "--no-baselines".into(),
            "-o".into(),
            out.clone().into_os_string(),
        ]);
        let o = collage(&args);
        assert!(o.status.success(), "{name}: {:?}", text(&o));
        let results = dir.path().join("results");
        let mut run: Vec<std::ffi::OsString> = vec!["run".into(), out.into_os_string()];
        for i in *inputs {
            run.push("--input".into());
            run.push(format!("{i}={}", fx.join(format!("input_{i}.npy")).display()).into());
        }
        run.extend([
            "--backend".into(),
            "reference".into(),
            "--output-dir".into(),
            results.clone().into_os_string(),
        ]);
        let o = collage(&run);
        assert!(o.status.success(), "{name}: {:?}", text(&o));
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fx.join("manifest.json")).unwrap()).unwrap();
        let outputs = manifest["outputs"].as_array().unwrap();
        for (k, output) in outputs.iter().enumerate() {
            let oname = output["name"].as_str().unwrap();
            let want = npy(&fx.join(format!("output_{oname}.npy")));
            let got = npy(&results.join(format!("output{k}.npy")));
            assert_close(&got, &want, 1e-3, 1e-4);
        }
    }
}
