//! `collage bench --max-memory`: placements that may not all fit in memory at once are built,
//! checked and timed in groups, each group with the anchor, and the report says how.

use crate::support::root;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const MNIST: &str = "tests/models/mnist.relay";

/// `collage bench` on MNIST with the native target and OpenBLAS, as JSON, its cache in `dir`.
fn bench(dir: &Path, extra: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_collage"))
        .arg("bench")
        .arg(root().join(MNIST))
        .args(["--target", "tvm_cpu", "--target", "openblas"])
        .args([
            "--costs",
            "analytic",
            "--run-budget",
            "0.2",
            "--threads",
            "1",
        ])
        .args(["--onnxruntime", "never", "--format", "json", "--cache-dir"])
        .arg(dir.join("cache"))
        .args(extra)
        .current_dir(dir)
        .output()
        .expect("the binary runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ran(v: &Value) -> Vec<&Value> {
    v["placements"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["status"] == "ran")
        .collect()
}

#[test]
fn a_tiny_limit_builds_in_groups_and_still_checks_and_times_every_placement() {
    let dir = tempfile::tempdir().unwrap();
    // Less than the process itself: no placement fits beside another.
    let v = bench(dir.path(), &["--max-memory", "1M"]);
    let g = &v["grouping"];
    assert_eq!(g["max_memory_bytes"], 1 << 20, "{g}");
    assert!(g["base_bytes"].as_u64().unwrap() > 0, "{g}");
    let anchor = g["anchor"].as_str().unwrap();
    let groups: Vec<Vec<&str>> = g["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m.as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap())
                .collect()
        })
        .collect();
    let ran = ran(&v);
    assert!(ran.len() >= 2, "{v}");
    // One placement per group beside the anchor, every placement that ran in one of them.
    assert_eq!(groups.len(), ran.len() - 1, "{g}");
    for p in &ran {
        let name = p["name"].as_str().unwrap();
        assert_eq!(p["outputs_within_tolerance"], true, "{p}");
        assert!(p["latency_ms"]["median"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["memory"]["kept_bytes"].is_u64(), "{p}");
        assert!(p["memory"]["peak_bytes"].is_u64(), "{p}");
        let group = p["group"].as_u64().unwrap() as usize;
        if name == anchor {
            assert_eq!(group, 0, "{p}");
            assert_eq!(p["relative_to_anchor"], 1.0, "{p}");
            assert!(groups.iter().all(|m| !m.contains(&name)), "{g}");
        } else {
            assert_eq!(groups[group], [name], "{g}");
            assert!(p["relative_to_anchor"].as_f64().unwrap() > 0.0, "{p}");
        }
    }
    let sp = &v["speedup"];
    assert!(sp["value"].as_f64().unwrap() > 0.0, "{sp}");
}

#[test]
fn a_model_that_fits_is_built_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let v = bench(dir.path(), &["--max-memory", "8G"]);
    assert!(v["grouping"].is_null(), "{}", v["grouping"]);
    let ran = ran(&v);
    assert!(!ran.is_empty(), "{v}");
    for p in ran {
        assert_eq!(p["group"], 0, "{p}");
        assert!(p["memory"].is_null(), "{p}");
    }
}
