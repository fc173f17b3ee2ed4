//! What the CPU library targets (`dnnl`, `openblas`) are offered on the corpus and the
//! generated models:
//! * every convolution of resnet50 and mobilenet and every dense and batch_matmul of gpt2 has a
//!   `dnnl` candidate, and every dense and batch_matmul of gpt2 an `openblas` one;
//! * GPT-2's tanh GELUs and decomposed layer norms, and the BERT generator's erf GELUs and
//!   `nn.layer_norm`s, are covered by the composites collage adds to oneDNN's table;
//! * the float16 models get no OpenBLAS candidate and none of collage's oneDNN composites (both
//!   are float32 only; TVM's own DNNL table, kept as it is, checks no dtypes);
//! * partitioning the models with the native CPU target and each library succeeds.

use crate::support::{collage, load_ok, load_text_ok, root};
use collage::ir::Module;
use collage::planning::enumerate::{target_candidates, Candidate, DataflowGraph, Limits};
use std::collections::BTreeSet;

/// The composites of one target's candidates covering each node: node -> composite names.
fn covering<'m>(m: &'m Module, target: &str) -> (DataflowGraph<'m>, Vec<BTreeSet<String>>) {
    let program = collage::rules::sema::check_library().expect("the shipped library checks");
    let g = DataflowGraph::new(m, m.main().unwrap());
    let t = program
        .targets
        .iter()
        .position(|t| t.name == target)
        .unwrap_or_else(|| panic!("no target {target}"));
    let cands: Vec<Candidate> =
        target_candidates(&g, &program, t, &Limits::default()).expect("within the default bounds");
    let mut cover = vec![BTreeSet::new(); g.len()];
    for c in &cands {
        for (name, sub) in c.sub_graph.composites() {
            for i in sub.inside.iter() {
                cover[i].insert(name.to_string());
            }
        }
    }
    (g, cover)
}

/// The op calls of `ops` that no candidate of `target` covers, as `%index op`.
fn uncovered(m: &Module, target: &str, ops: &[&str]) -> (usize, Vec<String>) {
    let (g, cover) = covering(m, target);
    let mut seen = 0;
    let mut missing = Vec::new();
    for (i, composites) in cover.iter().enumerate() {
        let Some(op) = g.called_op(i) else { continue };
        let name = collage::ops::registry().get(op).name;
        if ops.contains(&name) {
            seen += 1;
            if composites.is_empty() {
                missing.push(format!("#{i} {name}"));
            }
        }
    }
    (seen, missing)
}

fn model(name: &str) -> Module {
    load_ok(&root().join(format!("tests/models/{name}.relay")))
}

/// Every listed operator of the model has a candidate of the target (and the model has some).
fn assert_all_covered(name: &str, target: &str, ops: &[&str], expected: usize) {
    let (seen, missing) = uncovered(&model(name), target, ops);
    assert_eq!(seen, expected, "{name}: calls of {ops:?}");
    assert!(
        missing.is_empty(),
        "{name}: no {target} candidate for {missing:?}"
    );
}

#[test]
fn every_convolution_and_gemm_has_a_library_candidate() {
    assert_all_covered("resnet50", "dnnl", &["nn.conv2d"], 53);
    assert_all_covered("mobilenet", "dnnl", &["nn.conv2d"], 54);
    assert_all_covered("gpt2", "dnnl", &["nn.dense", "nn.batch_matmul"], 72);
    assert_all_covered("gpt2", "openblas", &["nn.dense", "nn.batch_matmul"], 72);
}

/// The composite names of collage's own section of `rules/dnnl.rules`.
fn collage_dnnl_composites() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("rules/dnnl.rules")).unwrap();
    let start = text
        .find("// Collage's entries (not in TVM's table")
        .expect("the section marker in rules/dnnl.rules");
    let section = &text[start..start + text[start..].find("];").unwrap()];
    let names: BTreeSet<String> = section
        .lines()
        .filter_map(|l| l.trim().strip_prefix('"'))
        .filter_map(|l| l.split('"').next())
        .map(str::to_string)
        .collect();
    assert!(names.len() >= 20, "{names:?}");
    names
}

/// Each call of `op` is covered by one of `composites` of the target.
fn assert_op_covered_by(m: &Module, what: &str, target: &str, op: &str, composites: &[&str]) {
    let (g, cover) = covering(m, target);
    let mut n = 0;
    for (i, found) in cover.iter().enumerate() {
        if g.called_op(i).map(|o| collage::ops::registry().get(o).name) == Some(op) {
            n += 1;
            assert!(
                composites.iter().any(|c| found.contains(*c)),
                "{what}: #{i} {op} is covered by {found:?}, not by any of {composites:?}"
            );
        }
    }
    assert!(n > 0, "{what} has no {op}");
}

#[test]
fn gelu_and_layer_norm_forms_map_to_onednn() {
    let gpt2 = model("gpt2");
    // The tanh of each GELU, and the sqrt of each decomposed layer norm (2 per layer, 1 final).
    assert_op_covered_by(
        &gpt2,
        "gpt2",
        "dnnl",
        "tanh",
        &["dnnl.gelu_tanh", "dnnl.dense_bias_gelu_tanh"],
    );
    assert_op_covered_by(
        &gpt2,
        "gpt2",
        "dnnl",
        "sqrt",
        &["dnnl.layer_norm_decomposed"],
    );
    let text = collage::frontend::gen::bert_large(2, 16);
    let bert = load_text_ok("bert", &text);
    assert_op_covered_by(
        &bert,
        "bert",
        "dnnl",
        "erf",
        &["dnnl.gelu_erf", "dnnl.dense_bias_gelu_erf"],
    );
    assert_op_covered_by(&bert, "bert", "dnnl", "nn.layer_norm", &["dnnl.layer_norm"]);
    // The dense layers feeding a GELU can take it as a post-op.
    assert_op_covered_by(
        &gpt2,
        "gpt2",
        "dnnl",
        "power",
        &[
            "dnnl.gelu_tanh",
            "dnnl.dense_bias_gelu_tanh",
            "dnnl.layer_norm_decomposed",
        ],
    );
}

/// A GELU whose constants are not GELU's is not oneDNN's gelu: no such composite.
#[test]
fn gelu_composites_check_their_constants() {
    let chain = |c: &str| {
        format!(
            "#[version = \"0.0.5\"]\n\
             def @main(%f: Tensor[(4, 8), float32]) {{\n  \
             %0 = power(%f, 3f);\n  %1 = multiply(%0, 0.044715f);\n  %2 = add(%f, %1);\n  \
             %3 = multiply(%2, {c});\n  %4 = tanh(%3);\n  %5 = multiply(%f, 0.5f);\n  \
             %6 = add(%4, 1f);\n  multiply(%5, %6)\n}}\n"
        )
    };
    let has_gelu = |c: &str| {
        let m = load_text_ok("gelu", &chain(c));
        let (_, cover) = covering(&m, "dnnl");
        cover.iter().any(|s| s.contains("dnnl.gelu_tanh"))
    };
    assert!(has_gelu("0.797885f"));
    assert!(has_gelu("0.7978846f"));
    assert!(!has_gelu("0.79f"));
    assert!(!has_gelu("0.8f"));
}

#[test]
fn float16_models_get_no_collage_library_composites() {
    let ours = collage_dnnl_composites();
    for name in ["resnet50_16", "mobilenet_16", "gpt2_16"] {
        let m = model(name);
        let (_, dnnl) = covering(&m, "dnnl");
        let found: BTreeSet<&String> = dnnl
            .iter()
            .flatten()
            .filter(|c| ours.contains(*c))
            .collect();
        assert!(found.is_empty(), "{name}: {found:?}");
        let (_, blas) = covering(&m, "openblas");
        assert!(
            blas.iter().all(|s| s.is_empty()),
            "{name} has openblas candidates"
        );
    }
    // The float32 models do get them: the check above is not vacuous.
    let (_, dnnl) = covering(&model("gpt2"), "dnnl");
    assert!(dnnl.iter().flatten().any(|c| ours.contains(c)));
}

/// Partitioning with the native CPU target and one library succeeds on the models the
/// libraries target (regression: two decomposed layer norms with different constants inside
/// their composites were once given one shared function, which the round-trip check caught).
#[test]
fn partition_with_each_cpu_library() {
    let dir = tempfile::tempdir().unwrap();
    let gpt2_2 = dir.path().join("gpt2_2.relay");
    std::fs::write(&gpt2_2, collage::frontend::gen::gpt2(2)).unwrap();
    let bert = dir.path().join("bert.relay");
    std::fs::write(&bert, collage::frontend::gen::bert_large(2, 16)).unwrap();
    // (model, the libraries to try, whether OpenBLAS should take part: the only GEMMs of the
    // CNNs are one-row classifiers, which cost the same on the native target). BERT's
    // `nn.layer_norm` is opaque to the native target, so only oneDNN (or TensorRT) can run it.
    for (m, libs, blas) in [
        (
            root().join("tests/models/resnet50.relay"),
            &["dnnl", "openblas"][..],
            false,
        ),
        (
            root().join("tests/models/mobilenet.relay"),
            &["dnnl", "openblas"][..],
            false,
        ),
        (
            root().join("tests/models/mnist.relay"),
            &["dnnl", "openblas"][..],
            false,
        ),
        (gpt2_2, &["dnnl", "openblas"][..], true),
        (bert, &["dnnl"][..], true),
    ] {
        for &lib in libs {
            let out = collage([
                "partition".as_ref(),
                m.as_os_str(),
                "--target".as_ref(),
                "tvm_cpu".as_ref(),
                "--target".as_ref(),
                lib.as_ref(),
                "--format".as_ref(),
                "json".as_ref(),
                "--no-baselines".as_ref(),
                "-o".as_ref(),
                dir.path().join("out.relay").as_os_str(),
            ]);
            assert!(
                out.status.success(),
                "{} with {lib}: {}",
                m.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let targets: BTreeSet<&str> = report["functions"][0]["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["target"].as_str().unwrap())
                .collect();
            assert!(
                targets.contains(lib) || (lib == "openblas" && !blas),
                "{} with {lib}: the library takes nothing ({targets:?})",
                m.display()
            );
        }
    }
}

/// Runs `collage` with extra environment variables.
fn collage_with_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_collage"));
    cmd.args(args).current_dir(root());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the binary runs")
}

/// `collage backends` as JSON: name -> (available, path, version, error).
fn backends_json(env: &[(&str, &str)]) -> serde_json::Value {
    let out = collage_with_env(&["backends", "--format", "json"], env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn backend<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .unwrap_or_else(|| panic!("no backend {name}: {v}"))
}

/// On the test machine (`.ci/run` installs the libraries) every backend is there, with its
/// library and version; the table lists them in order.
#[test]
fn backends_lists_every_backend_with_its_library() {
    let v = backends_json(&[]);
    let names: Vec<&str> = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["reference", "native", "dnnl", "openblas", "onnxruntime"]
    );
    for (name, package) in [("dnnl", "libdnnl2"), ("openblas", "libopenblas0-openmp")] {
        let b = backend(&v, name);
        assert_eq!(
            b["available"], true,
            "{name} is missing (install the Debian package {package}; .ci/run does): {b}"
        );
        let path = b["path"].as_str().unwrap();
        assert!(std::path::Path::new(path).is_file(), "{path}");
        assert!(b["error"].is_null());
    }
    assert!(backend(&v, "dnnl")["version"]
        .as_str()
        .unwrap()
        .starts_with("2."));
    assert!(backend(&v, "openblas")["version"]
        .as_str()
        .unwrap()
        .contains("USE_OPENMP"));
    assert_eq!(
        backend(&v, "native")["available"],
        true,
        "no C compiler `cc`"
    );
    let out = collage_with_env(&["backends"], &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert!(rows[0].starts_with("backend"), "{text}");
    assert!(
        rows[3].starts_with("dnnl ") && rows[3].contains(" yes "),
        "{text}"
    );
}

/// A missing library (simulated by pointing the loader at a file that does not exist) is
/// listed as unavailable with the package to install; partitioning, which needs no library,
/// still works.
#[test]
fn missing_libraries_are_reported_and_nothing_else_breaks() {
    let env = [
        ("COLLAGE_DNNL_LIBRARY", "/nonexistent/libdnnl.so.2"),
        ("COLLAGE_OPENBLAS_LIBRARY", "/nonexistent/libopenblas.so.0"),
        ("CC", "/nonexistent/cc"),
    ];
    let v = backends_json(&env);
    for (name, package) in [
        ("dnnl", "apt-get install libdnnl2"),
        ("openblas", "apt-get install libopenblas0-openmp"),
        ("native", "apt-get install gcc"),
    ] {
        let b = backend(&v, name);
        assert_eq!(b["available"], false, "{b}");
        let error = b["error"].as_str().unwrap();
        assert!(error.contains(package), "{error}");
    }
    assert_eq!(backend(&v, "reference")["available"], true);
    let out = collage_with_env(&["backends"], &env);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("dnnl: oneDNN is not available (/nonexistent/libdnnl.so.2"),
        "{text}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = collage_with_env(
        &[
            "partition",
            "tests/models/resnet50.relay",
            "-o",
            dir.path().join("out.relay").to_str().unwrap(),
        ],
        &env,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
