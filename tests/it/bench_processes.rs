//! `collage bench --processes N`: the comparison made in N fresh processes, one after the other,
//! reported side by side (each placement's latency per process, the spread of the speed-ups);
//! a process that fails stops the comparison with its own diagnostics and E2431.

use crate::support::root;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

const SMALL: &str = "tests/fixtures/measure/small.relay";

/// `collage bench MODEL --processes N` on a small budget, its cache in `dir`.
fn bench(dir: &Path, model: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_collage"))
        .arg("bench")
        .arg(model)
        .args(["--target", "tvm_cpu", "--costs", "analytic"])
        .args([
            "--run-budget",
            "0.2",
            "--onnxruntime",
            "never",
            "--cache-dir",
        ])
        .arg(dir.join("cache"))
        .args(extra)
        .current_dir(dir)
        .output()
        .expect("the binary runs")
}

#[test]
fn processes_report_each_process_and_the_spread() {
    let dir = tempfile::tempdir().unwrap();
    let model = root().join(SMALL);
    let out = bench(
        dir.path(),
        &model,
        &["--processes", "3", "--format", "json", "--threads", "1"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["processes"], 3, "{v}");
    // The children ran with the same arguments, less `--processes`, in JSON.
    let args: Vec<&str> = v["arguments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(!args.contains(&"--processes"), "{args:?}");
    assert_eq!(args.iter().filter(|a| **a == "--format").count(), 1);
    assert!(args.ends_with(&["--format", "json"]), "{args:?}");
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    let mut speedups = Vec::new();
    for r in runs {
        assert_eq!(r["exit_code"], 0, "{r}");
        assert!(r["elapsed_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["report"]["threads"], 1, "{r}");
        speedups.push(r["report"]["speedup"]["value"].as_f64().unwrap());
    }
    let placements = v["placements"].as_array().unwrap();
    let names: Vec<&str> = placements
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["collage", "tvm"]);
    for (k, p) in placements.iter().enumerate() {
        let per: Vec<f64> = p["latency_ms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(per.len(), 3, "{p}");
        // Each process's figure is that process's own median.
        for (x, r) in per.iter().zip(runs) {
            let own = r["report"]["placements"][k]["latency_ms"]["median"]
                .as_f64()
                .unwrap();
            assert_eq!(*x, own, "{p}");
        }
        let mut sorted = per.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(p["median_ms"].as_f64().unwrap(), sorted[1], "{p}");
    }
    let sp = &v["speedup"];
    let values: Vec<f64> = sp["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(values, speedups, "{sp}");
    let (lo, hi) = (sp["min"].as_f64().unwrap(), sp["max"].as_f64().unwrap());
    let med = sp["median"].as_f64().unwrap();
    assert!(lo <= med && med <= hi, "{sp}");
    assert_eq!(sp["baselines"].as_array().unwrap().len(), 3, "{sp}");
    assert_eq!(sp["onnxruntime"], Value::Null, "{sp}");

    // The table: a column per process and the speed-up line.
    let out = bench(dir.path(), &model, &["--processes", "2"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = text
        .lines()
        .find(|l| l.starts_with("placement"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        head.contains("process 1") && head.contains("process 2"),
        "{text}"
    );
    assert!(!head.contains("process 3"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("Collage plan")),
        "{text}"
    );
    assert!(text.contains("speed-up   median x"), "{text}");
}

#[test]
fn a_failing_process_stops_the_comparison() {
    let dir = tempfile::tempdir().unwrap();
    // The model cannot be read: the first child says why (its own diagnostic) and ends with
    // exit code 1; nothing is printed on standard output.
    let broken = dir.path().join("broken.relay");
    std::fs::write(&broken, "#[version = \"0.0.5\"]\ndef @main(%x) { %x + }\n").unwrap();
    let out = bench(dir.path(), &broken, &["--processes", "3"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains("E2431"), "{err}");
    assert!(
        err.contains("process 1 of 3 ended with exit code 1"),
        "{err}"
    );
    // The child's own diagnostic came first, once: the comparison was abandoned.
    let own = err.find("error[").unwrap();
    assert!(own < err.find("E2431").unwrap(), "{err}");
    assert!(!err.contains("process 2 of 3"), "{err}");

    // A usage error in the child (a model that does not exist) keeps its exit code 2.
    let out = bench(
        dir.path(),
        &dir.path().join("missing.relay"),
        &["--processes", "2"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("process 1 of 2 ended with exit code 2"),
        "{err}"
    );
}

#[test]
fn processes_out_of_range_or_with_a_plot_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = root().join(SMALL);
    for (extra, what) in [
        (&["--processes", "0"][..], "--processes is 0"),
        (&["--processes", "101"][..], "--processes is 101"),
        (&["--processes", "2", "--plot", "c.svg"][..], "--plot"),
    ] {
        let out = bench(dir.path(), &model, extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(
            err.contains("E2430") && err.contains(what),
            "{extra:?}: {err}"
        );
        assert!(out.stdout.is_empty());
    }
    assert!(!dir.path().join("c.svg").exists());
}
