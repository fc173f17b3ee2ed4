//! ONNX Runtime through `collage::runtime::ffi::ort` (the library) and `collage::runtime::backend::ort` (its
//! sessions): the committed ONNX fixtures run and give the outputs ONNX Runtime gave when they
//! were made (`tests/onnx/README.md`); models ONNX Runtime refuses and inputs that do not fit
//! are diagnostics; without the library, `collage backends` says why and exits 0. `collage
//! bench` on an ONNX file runs ONNX Runtime as one more placement, checked and timed with the
//! others, and skips it with the reason where the library is missing.
//!
//! The tests that need the library find it as collage does (`COLLAGE_ORT_LIBRARY`, else the
//! `onnxruntime` package of `VIRTUAL_ENV`'s python or of `python3`). Where it is missing they
//! print that they skipped and pass, unless `COLLAGE_REQUIRE_ORT=1` (which `.ci/run` sets):
//! then they fail with the reason.

use crate::support::root;
use collage::runtime::backend::ort::{Session, Settings};
use collage::runtime::exec::tensor::Tensor;
use collage::runtime::ffi::ort::{self, OnnxRuntime};
use std::path::{Path, PathBuf};
use std::process::Command;

/// ONNX Runtime, or `None` after saying why the test is skipped; fails instead when
/// `COLLAGE_REQUIRE_ORT=1`.
fn runtime_or_skip(test: &str) -> Option<&'static OnnxRuntime> {
    match ort::runtime() {
        Ok(rt) => Some(rt),
        Err(why) => {
            let message = ort::unavailable_message(&why);
            if std::env::var("COLLAGE_REQUIRE_ORT").as_deref() == Ok("1") {
                panic!("{test}: COLLAGE_REQUIRE_ORT=1 but {message}");
            }
            eprintln!("{test}: skipped: {message}");
            None
        }
    }
}

fn npy(path: &Path) -> Tensor {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    collage::runtime::exec::npy::read(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every fixture folder with a `manifest.json`, sorted (the model folders and `external/*`).
fn fixtures() -> Vec<PathBuf> {
    let base = root().join("tests/fixtures/onnx");
    let mut out = Vec::new();
    let mut stack = vec![base];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.join("manifest.json").is_file() {
                    out.push(p.clone());
                }
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

/// The manifest's inputs, read from their `.npy` files.
fn inputs_of(dir: &Path, m: &serde_json::Value) -> Vec<(String, Tensor)> {
    m["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["name"].as_str().unwrap().to_string(),
                npy(&dir.join(i["file"].as_str().unwrap())),
            )
        })
        .collect()
}

/// The largest difference between two tensors of the same dtype and shape, relative to
/// 1 + |expected| (0 when they are equal bit for bit; integers must be equal).
fn difference(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.dtype(), want.dtype());
    assert_eq!(got.shape(), want.shape());
    if got.bytes() == want.bytes() {
        return 0.0;
    }
    (0..want.numel())
        .map(|i| {
            let (a, b) = (got.get_f64(i), want.get_f64(i));
            (a - b).abs() / (1.0 + b.abs())
        })
        .fold(0.0, f64::max)
}

/// Runs every fixture that has inputs and outputs; returns (fixture, output, difference).
fn run_fixtures(rt: &OnnxRuntime, threads: usize) -> Vec<(String, String, f64)> {
    let mut report = Vec::new();
    for dir in fixtures() {
        let m = manifest(&dir);
        if m["expect"] == "refused" || m["outputs"].as_array().is_none() {
            continue;
        }
        let name = dir.strip_prefix(root()).unwrap().display().to_string();
        let mut session = Session::open(rt, &dir.join("model.onnx"), Settings::threads(threads))
            .unwrap_or_else(|d| panic!("{name}: {d:?}"));
        let inputs = inputs_of(&dir, &m);
        let feed: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let outputs = session
            .run(&feed)
            .unwrap_or_else(|d| panic!("{name}: {d:?}"));
        let wanted = m["outputs"].as_array().unwrap();
        assert_eq!(outputs.len(), wanted.len(), "{name}");
        for w in wanted {
            let out = w["name"].as_str().unwrap();
            let (_, got) = outputs
                .iter()
                .find(|(n, _)| n == out)
                .unwrap_or_else(|| panic!("{name}: no output {out}"));
            let want = npy(&dir.join(w["file"].as_str().unwrap()));
            report.push((name.clone(), out.to_string(), difference(got, &want)));
        }
    }
    report
}

/// One thread, the settings the fixtures were made with: ONNX Runtime's outputs again, within
/// 1e-5 (relative to 1 + |expected|). ONNX Runtime picks its kernels by the CPU's vector
/// extensions: on the AVX-512 machine the fixtures were made on, the outputs come back exact or
/// within 1e-6; on an AVX2 machine the convolutions sum in another order and MobileNetV2's
/// outputs move by 1.1e-6.
#[test]
fn ort_runs_every_fixture_as_when_it_was_made() {
    let Some(rt) = runtime_or_skip("ort_runs_every_fixture_as_when_it_was_made") else {
        return;
    };
    let report = run_fixtures(rt, 1);
    assert!(report.len() >= 10, "only {} outputs compared", report.len());
    for (fixture, output, diff) in &report {
        eprintln!("{fixture} {output}: {diff:.3e}");
    }
    let bad: Vec<_> = report.iter().filter(|r| r.2 > 1e-5).collect();
    assert!(bad.is_empty(), "differ beyond 1e-5: {bad:?}");
}

/// Two intra-op threads split the work differently (sums in another order): still within 1e-4.
#[test]
fn ort_with_two_threads_agrees() {
    let Some(rt) = runtime_or_skip("ort_with_two_threads_agrees") else {
        return;
    };
    let report = run_fixtures(rt, 2);
    let bad: Vec<_> = report.iter().filter(|r| r.2 > 1e-4).collect();
    assert!(bad.is_empty(), "differ beyond 1e-4: {bad:?}");
}

/// Every refused external-data fixture is refused by `Session::open` before ONNX Runtime sees
/// it: collage's importer runs first. The three whose location leaves the model's folder
/// (`bad_absolute`, `bad_parent`, `bad_symlink`) are E3013: ONNX Runtime 1.23.2, opening a model
/// from its path, would read them (docs/backends.md, "ONNX Runtime"). Those whose data does not
/// fit are the importer's E3014/E3015.
#[test]
fn ort_refuses_bad_external_data_with_a_diagnostic() {
    let Some(rt) = runtime_or_skip("ort_refuses_bad_external_data_with_a_diagnostic") else {
        return;
    };
    for (name, codes) in [
        ("bad_absolute", &["E3013"][..]),
        ("bad_parent", &["E3013"][..]),
        ("bad_symlink", &["E3013"][..]),
        ("bad_length", &["E3014", "E3015"][..]),
        ("bad_offset", &["E3014", "E3015"][..]),
        ("bad_shape_length", &["E3012", "E3014", "E3015"][..]),
    ] {
        let dir = root().join("tests/fixtures/onnx/external").join(name);
        assert_eq!(manifest(&dir)["expect"], "refused", "{name}");
        let err = match Session::open(rt, &dir.join("model.onnx"), Settings::threads(1)) {
            Ok(_) => panic!("{name}: opened"),
            Err(d) => d,
        };
        assert!(codes.contains(&err.code.id), "{name}: {err:?}");
        assert!(
            err.notes.iter().any(|n| n.contains("importer accepts")),
            "{name}: {err:?}"
        );
    }
    // A symbolic link to a file outside the folder, made here (the committed one stays inside
    // the fixtures).
    let dir = tempfile::tempdir().unwrap();
    let src = root().join("tests/fixtures/onnx/external/bad_symlink");
    std::fs::create_dir(dir.path().join("data")).unwrap();
    for f in ["model.onnx", "weights.bin", "data/more.bin"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link.bin")).unwrap();
    let err = Session::open(rt, &dir.path().join("model.onnx"), Settings::threads(1))
        .err()
        .unwrap();
    assert_eq!(err.code.id, "E3013", "{err:?}");
    // Not an ONNX file at all: the importer's E3001.
    let junk = dir.path().join("junk.onnx");
    std::fs::write(&junk, b"not a protobuf").unwrap();
    let err = Session::open(rt, &junk, Settings::threads(1))
        .err()
        .unwrap();
    assert_eq!(err.code.id, "E3001", "{err:?}");
}

/// Inputs that do not fit the model are E2443, named.
#[test]
fn ort_checks_inputs() {
    let Some(rt) = runtime_or_skip("ort_checks_inputs") else {
        return;
    };
    let dir = root().join("tests/fixtures/onnx/external/tiny_mlp");
    let mut s = Session::open(rt, &dir.join("model.onnx"), Settings::threads(1)).unwrap();
    assert_eq!(s.inputs().len(), 1);
    assert_eq!(s.inputs()[0].name, "x");
    assert_eq!(s.inputs()[0].dtype, Some(collage::ir::DType::F32));
    assert_eq!(s.inputs()[0].dims, [None, Some(4)]);
    let x = npy(&dir.join("input_x.npy"));
    let expect = |r: Result<_, collage::diag::Diagnostic>, what: &str| {
        let d = r.err().unwrap_or_else(|| panic!("{what}: accepted"));
        assert_eq!(d.code.id, "E2443", "{what}: {d:?}");
        d.message
    };
    let m = expect(s.run(&[("y", &x)]), "unknown name");
    assert!(m.contains("no input `y`") && m.contains("x"), "{m}");
    let m = expect(s.run(&[]), "missing");
    assert!(m.contains("`x` is missing"), "{m}");
    let m = expect(s.run(&[("x", &x), ("x", &x)]), "twice");
    assert!(m.contains("twice"), "{m}");
    let ints = Tensor::zeros(collage::ir::DType::I64, x.shape()).unwrap();
    let m = expect(s.run(&[("x", &ints)]), "dtype");
    assert!(m.contains("int64") && m.contains("f32"), "{m}");
    let wide = Tensor::zeros(collage::ir::DType::F32, &[3, 5]).unwrap();
    let m = expect(s.run(&[("x", &wide)]), "extent");
    assert!(m.contains("[?, 4]"), "{m}");
    // Another batch than the fixture's is fine: the axis is symbolic.
    let batch = Tensor::zeros(collage::ir::DType::F32, &[7, 4]).unwrap();
    let out = s.run(&[("x", &batch)]).unwrap();
    assert_eq!(out[0].1.shape()[0], 7);
}

fn backends_json(cmd: &mut Command) -> serde_json::Value {
    let out = cmd
        .args(["backends", "--format", "json"])
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn onnxruntime_row(v: &serde_json::Value) -> serde_json::Value {
    v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "onnxruntime")
        .cloned()
        .unwrap_or_else(|| panic!("no onnxruntime row: {v}"))
}

/// Without the library, `collage backends` lists ONNX Runtime as unavailable with the reason
/// and still exits 0: once through `COLLAGE_ORT_LIBRARY` naming a missing file, once with no
/// variable, no virtual environment and no python on `PATH`.
#[test]
fn backends_says_why_onnx_runtime_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("libonnxruntime.so.1.23.2");
    let bin = env!("CARGO_BIN_EXE_collage");
    let v = backends_json(
        Command::new(bin)
            .current_dir(dir.path())
            .env("COLLAGE_ORT_LIBRARY", &missing),
    );
    let row = onnxruntime_row(&v);
    assert_eq!(row["available"], false, "{row}");
    let error = row["error"].as_str().unwrap();
    assert!(
        error.starts_with("ONNX Runtime is not available"),
        "{error}"
    );
    assert!(error.contains("COLLAGE_ORT_LIBRARY names"), "{error}");
    assert!(error.contains("pip install onnxruntime==1.23.2"), "{error}");

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = Command::new(bin)
        .arg("backends")
        .current_dir(dir.path())
        .env_remove("COLLAGE_ORT_LIBRARY")
        .env_remove("VIRTUAL_ENV")
        .env("PATH", &empty)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("onnxruntime: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("COLLAGE_ORT_LIBRARY is not set"), "{line}");
    assert!(line.contains("no `python3` on PATH"), "{line}");
    // The other backends are listed as before.
    assert!(text.contains("\nreference "), "{text}");
}

/// Where the library is found, `collage backends` gives its version (asked of the library)
/// and path, and says how it was found.
#[test]
fn backends_lists_onnx_runtime_with_its_version() {
    let Some(rt) = runtime_or_skip("backends_lists_onnx_runtime_with_its_version") else {
        return;
    };
    assert!(ort::parse_version(&rt.version).is_some_and(|(a, b)| a == 1 && b >= 17));
    assert!(
        rt.build_info.contains("ORT Build Info"),
        "{}",
        rt.build_info
    );
    let row = onnxruntime_row(&backends_json(&mut Command::new(env!(
        "CARGO_BIN_EXE_collage"
    ))));
    assert_eq!(row["available"], true, "{row}");
    let version = row["version"].as_str().unwrap();
    assert!(
        version.starts_with(&format!("{} (", rt.version)),
        "{version}"
    );
    assert!(version.contains(&rt.how), "{version}");
    let path = row["path"].as_str().unwrap();
    assert!(Path::new(path).is_file(), "{path}");
    assert_eq!(Path::new(path), rt.path);
}

/// `collage bench MODEL` on a small budget with analytic costs (nothing measured but the
/// placements), its cache in `dir`, `ort` as `COLLAGE_ORT_LIBRARY` (`None`: unset).
fn bench(dir: &Path, model: &str, ort: Option<&Path>, extra: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collage"));
    cmd.arg("bench")
        .arg(root().join(model))
        .args(["--target", "tvm_cpu", "--costs", "analytic"])
        .args(["--run-budget", "0.2", "--cache-dir"])
        .arg(dir.join("cache"))
        .args(extra)
        .current_dir(dir);
    match ort {
        Some(p) => cmd.env("COLLAGE_ORT_LIBRARY", p),
        None => cmd.env_remove("COLLAGE_ORT_LIBRARY"),
    };
    cmd.output().expect("the binary runs")
}

fn placement<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["placements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no placement {name}: {v}"))
}

const MOBILENET: &str = "tests/fixtures/onnx/mobilenet_v2_tiny-opset13/model.onnx";

/// A model collage imports but ONNX Runtime cannot open (1.23.2 has no `Trilu` kernel for
/// int32, which Mistral's sliding-window mask needs): `--onnxruntime always` says so before
/// partitioning (E2421, exit 1, no report); `auto` skips it with W2422 and benches the rest.
#[test]
fn a_model_onnx_runtime_cannot_open_is_said_before_partitioning() {
    let Some(rt) = runtime_or_skip("a_model_onnx_runtime_cannot_open_is_said_before_partitioning")
    else {
        return;
    };
    use collage::frontend::onnx::builder::{self as b, code};
    let dir = tempfile::tempdir().unwrap();
    let m = b::model(
        14,
        b::graph(
            vec![
                b::node("Cast", &["x"], &["i"], vec![b::attr_int("to", 6)]),
                b::node("Trilu", &["i"], &["t"], vec![b::attr_int("upper", 1)]),
                b::node("Cast", &["t"], &["y"], vec![b::attr_int("to", 1)]),
            ],
            vec![b::value("x", code::FLOAT, &["4", "4"])],
            vec![b::value("y", code::FLOAT, &["4", "4"])],
            vec![],
        ),
    );
    let model = dir.path().join("trilu.onnx");
    std::fs::write(&model, b::encode(&m)).unwrap();
    let model = model.display().to_string();
    let out = bench(
        dir.path(),
        &model,
        Some(&rt.path),
        &["--onnxruntime", "always"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("E2421") && err.contains("cannot open"),
        "{err}"
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = bench(
        dir.path(),
        &model,
        Some(&rt.path),
        &["--onnxruntime", "auto"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("W2422"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("Collage plan"));
}

/// `collage bench` on an ONNX file: ONNX Runtime's row ran on the same file with the bench's
/// threads, its outputs are within tolerance of the reference interpreter's, it was timed in
/// the same rounds as the other placements, and the speed-up over it is in the JSON (and the
/// table's speed-up lines). At zero tolerance its outputs differ (ONNX Runtime's fused kernels
/// round differently), which is E2404 and exit 1, as for any placement.
#[test]
fn bench_runs_onnx_runtime_beside_the_placements() {
    let Some(rt) = runtime_or_skip("bench_runs_onnx_runtime_beside_the_placements") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dims = ["--dim", "batch=1", "--threads", "2"];
    let out = bench(
        dir.path(),
        MOBILENET,
        Some(&rt.path),
        &[&dims[..], &["--format", "json"]].concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("W2422"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["placements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.last(), Some(&"onnxruntime"), "{names:?}");
    let o = placement(&v, "onnxruntime");
    assert_eq!(o["status"], "ran", "{o}");
    assert_eq!(o["label"], format!("ONNX Runtime {}", rt.version), "{o}");
    assert_eq!(o["outputs_within_tolerance"], true, "{o}");
    let outputs = o["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 1, "{o}");
    assert!(outputs[0]["max_abs_diff"].as_f64().unwrap() > 0.0, "{o}");
    assert_eq!(outputs[0]["rtol"], 1e-3, "{o}");
    let info = &o["onnxruntime"];
    assert_eq!(info["version"], rt.version.as_str(), "{info}");
    assert_eq!(info["intra_op_threads"], 2, "{info}");
    assert_eq!(info["inter_op_threads"], 1, "{info}");
    assert_eq!(info["allow_spinning"], true, "{info}");
    assert_eq!(Path::new(info["library"].as_str().unwrap()), rt.path);
    // The same rounds: as many runs as the Collage plan.
    let collage = placement(&v, "collage");
    assert_eq!(collage["status"], "ran", "{collage}");
    let repeats = |p: &serde_json::Value| p["latency_ms"]["repeats"].as_u64().unwrap();
    assert_eq!(repeats(o), repeats(collage));
    assert!(repeats(o) >= 1);
    let median = |p: &serde_json::Value| p["latency_ms"]["median"].as_f64().unwrap();
    let sp = &v["speedup"]["onnxruntime"];
    assert_eq!(sp["onnxruntime_ms"].as_f64().unwrap(), median(o), "{sp}");
    let value = sp["value"].as_f64().unwrap();
    assert!(
        (value - median(o) / median(collage)).abs() < 1e-9 * value,
        "{sp}"
    );

    // The table: the row and the second speed-up line.
    let out = bench(dir.path(), MOBILENET, Some(&rt.path), &dims);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("ONNX Runtime "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("ok (max abs diff"), "{row}");
    assert!(
        text.contains(&format!(
            ": the Collage plan over ONNX Runtime {} (",
            rt.version
        )),
        "{text}"
    );
    assert!(text.contains("2 intra-op thread(s))"), "{text}");

    // Checked like every placement: at zero tolerance ONNX Runtime's outputs differ.
    let out = bench(
        dir.path(),
        MOBILENET,
        Some(&rt.path),
        &[&dims[..], &["--rtol", "0", "--atol", "0"]].concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("E2404") && err.contains("of the onnxruntime placement differs"),
        "{err}"
    );
}

/// ONNX Runtime is given the very tensors the reference interpreter ran on: GPT-2's token ids
/// (int64, drawn from the seed as valid indices of its embeddings) give outputs within
/// tolerance; a Relay model has no ONNX Runtime row.
#[test]
fn bench_gives_onnx_runtime_the_same_token_ids() {
    let Some(rt) = runtime_or_skip("bench_gives_onnx_runtime_the_same_token_ids") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = bench(
        dir.path(),
        "tests/fixtures/onnx/gpt2_tiny-opset13/model.onnx",
        Some(&rt.path),
        &[
            "--dim",
            "batch=1",
            "--dim",
            "sequence=8",
            "--threads",
            "1",
            "--format",
            "json",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let o = placement(&v, "onnxruntime");
    assert_eq!(o["status"], "ran", "{o}");
    assert_eq!(o["outputs_within_tolerance"], true, "{o}");
    assert_eq!(o["onnxruntime"]["intra_op_threads"], 1, "{o}");
    // Never on a Relay model unless asked for.
    let out = bench(
        dir.path(),
        "tests/fixtures/measure/small.relay",
        Some(&rt.path),
        &["--format", "json"],
    );
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["placements"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["name"] != "onnxruntime"));
    assert!(v["speedup"]["onnxruntime"].is_null(), "{v}");
}

/// Without the library, bench on an ONNX file still runs the other placements and lists ONNX
/// Runtime as skipped with the reason (W2422, exit 0); asked for with `--onnxruntime always`,
/// it is E2440 (exit 2) before anything is partitioned; asked for on a Relay model, E2420;
/// `--onnxruntime never` leaves it out.
#[test]
fn bench_skips_onnx_runtime_without_the_library() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("libonnxruntime.so.1.23.2");
    let dims = ["--dim", "batch=1", "--threads", "1"];
    let out = bench(
        dir.path(),
        MOBILENET,
        Some(&missing),
        &[&dims[..], &["--format", "json"]].concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("W2422"), "{err}");
    assert!(err.contains("ONNX Runtime is skipped"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let o = placement(&v, "onnxruntime");
    assert_eq!(o["status"], "skipped", "{o}");
    let reason = o["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("ONNX Runtime is not available")
            && reason.contains("COLLAGE_ORT_LIBRARY names"),
        "{reason}"
    );
    assert!(o["latency_ms"].is_null(), "{o}");
    assert_eq!(placement(&v, "collage")["status"], "ran");
    assert!(v["speedup"]["value"].as_f64().is_some(), "{v}");
    assert!(v["speedup"]["onnxruntime"].is_null(), "{v}");

    // The table says so on the row.
    let out = bench(dir.path(), MOBILENET, Some(&missing), &dims);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("ONNX Runtime "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        row.contains("skipped") && row.contains("not available"),
        "{row}"
    );
    assert!(!text.contains("over ONNX Runtime"), "{text}");

    // Asked for: an error before partitioning.
    let out = bench(
        dir.path(),
        MOBILENET,
        Some(&missing),
        &[&dims[..], &["--onnxruntime", "always"]].concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("E2440"), "{err}");
    assert!(out.stdout.is_empty());
    let out = bench(
        dir.path(),
        "tests/fixtures/measure/small.relay",
        Some(&missing),
        &["--onnxruntime", "always"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("E2420"), "{err}");
    // Left out: no row, no warning.
    let out = bench(
        dir.path(),
        MOBILENET,
        Some(&missing),
        &[&dims[..], &["--onnxruntime", "never", "--format", "json"]].concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("W2422"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["placements"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["name"] != "onnxruntime"));
}

/// `collage bench --processes 2` on an ONNX file: the speed-up over ONNX Runtime of each process
/// and its spread; at zero tolerance each process reports (ONNX Runtime's outputs differ, E2404
/// in each) and the command ends with exit code 1 after the report.
#[test]
fn bench_processes_spread_the_ratio_against_onnx_runtime() {
    let Some(rt) = runtime_or_skip("bench_processes_spread_the_ratio_against_onnx_runtime") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let args = ["--dim", "batch=1", "--threads", "2", "--processes", "2"];
    let out = bench(
        dir.path(),
        MOBILENET,
        Some(&rt.path),
        &[&args[..], &["--format", "json"]].concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ort = &v["speedup"]["onnxruntime"];
    let values = ort["values"].as_array().unwrap();
    assert_eq!(values.len(), 2, "{ort}");
    for (x, r) in values.iter().zip(v["runs"].as_array().unwrap()) {
        assert_eq!(x, &r["report"]["speedup"]["onnxruntime"]["value"], "{ort}");
    }
    let row = placement(&v, "onnxruntime");
    assert_eq!(row["latency_ms"].as_array().unwrap().len(), 2, "{row}");

    let out = bench(
        dir.path(),
        MOBILENET,
        Some(&rt.path),
        &[&args[..], &["--rtol", "0", "--atol", "0"]].concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.matches("E2404").count() >= 2, "{err}");
    assert!(!err.contains("E2431"), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("over ONNX Runtime"), "{text}");
}
