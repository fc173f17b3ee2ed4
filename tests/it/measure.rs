//! Measured costs (`--costs measure`), the measurement cache (`collage cache`) and `collage
//! bench`, on small models with small time budgets. Every test uses its own temporary cache.

use crate::support::{collage, root};
use collage::runtime::measure::db::Db;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn small() -> PathBuf {
    root().join("tests/fixtures/measure/small.relay")
}

fn mnist() -> PathBuf {
    root().join("tests/models/mnist.relay")
}

/// `collage partition MODEL --costs SPEC --format json` with a cache directory, small budgets.
fn partition(model: &Path, cache_dir: &Path, extra: &[&str]) -> (Value, String, i32) {
    let out = dir_args(model, cache_dir, extra);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let code = out.status.code().unwrap_or(-1);
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (v, stderr, code)
}

fn dir_args(model: &Path, cache_dir: &Path, extra: &[&str]) -> std::process::Output {
    let mut args: Vec<String> = vec![
        "partition".into(),
        model.display().to_string(),
        "--format".into(),
        "json".into(),
        "--measure-budget".into(),
        "0.05".into(),
        "--cache-dir".into(),
        cache_dir.display().to_string(),
        "-o".into(),
        cache_dir.with_extension("relay").display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    collage(&args)
}

/// `collage partition MODEL` measuring its `tvm_cpu` candidates briefly into `cache_dir`, with
/// a JSON report, as a command to spawn.
fn measuring(model: &Path, cache_dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_collage"));
    c.arg("partition")
        .arg(model)
        .args(["--costs", "measure", "--target", "tvm_cpu"])
        .args([
            "--measure-budget",
            "0.05",
            "--format",
            "json",
            "--cache-dir",
        ])
        .arg(cache_dir);
    c
}

fn measure_stats(v: &Value) -> &Value {
    &v["stats"]["measure"]
}

fn n(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no `{key}` in {v}"))
}

#[test]
fn a_second_partition_measures_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let args = ["--costs", "measure", "--target", "tvm_cpu"];
    let (first, err, code) = partition(&small(), &cache, &args);
    assert_eq!(code, 0, "{err}");
    let m = measure_stats(&first);
    let timed = n(m, "measured");
    assert!(timed > 0, "{m}");
    assert_eq!(n(m, "cached"), 0);
    assert_eq!(n(m, "unknown"), 0);
    assert_eq!(
        timed + n(m, "invalid"),
        first["stats"]["estimates"].as_u64().unwrap()
    );
    let first_relay = std::fs::read_to_string(cache.with_extension("relay")).unwrap();

    let (second, err, code) = partition(&small(), &cache, &args);
    assert_eq!(code, 0, "{err}");
    let m2 = measure_stats(&second);
    assert_eq!(n(m2, "measured"), 0, "{m2}");
    assert_eq!(n(m2, "invalid"), 0, "{m2}");
    assert_eq!(n(m2, "cached"), timed + n(m, "invalid"));
    // The same costs, so the same plan.
    assert_eq!(first["functions"], second["functions"]);
    assert_eq!(
        std::fs::read_to_string(cache.with_extension("relay")).unwrap(),
        first_relay
    );

    // Another thread count is another measurement, and so is a warm one (TVM's loop, where
    // the default times each call after its kernels' buffers are evicted); naming the default
    // is the default.
    let default_threads = n(m, "threads");
    let tvm_cpu = |extra: &[&str]| {
        let mut args = vec!["--costs", "measure", "--target", "tvm_cpu"];
        args.extend_from_slice(extra);
        partition(&small(), &cache, &args)
    };
    let (named, err, code) = tvm_cpu(&["--cold-candidates"]);
    assert_eq!(code, 0, "{err}");
    // The two are exclusive.
    let (_, err, code) = tvm_cpu(&["--cold-candidates", "--warm-candidates"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    assert_eq!(n(measure_stats(&named), "measured"), 0, "{named}");
    let timing = if cfg!(target_arch = "x86_64") {
        "cold"
    } else {
        "warm"
    };
    assert_eq!(measure_stats(&named)["candidates"], timing, "{named}");
    let mut others = vec![(&["--threads", "1"][..], 1)];
    // Elsewhere than on x86-64 candidates are timed warm anyway.
    if cfg!(target_arch = "x86_64") {
        others.push((&["--warm-candidates"][..], default_threads));
    }
    for (extra, threads) in others {
        let (again, err, code) = tvm_cpu(extra);
        assert_eq!(code, 0, "{extra:?}: {err}");
        let m = measure_stats(&again);
        assert_eq!(n(m, "cached"), 0, "{extra:?}: {m}");
        assert_eq!(n(m, "threads"), threads, "{extra:?}: {m}");
        let warm = extra.contains(&"--warm-candidates");
        assert_eq!(m["candidates"], if warm { "warm" } else { timing }, "{m}");
    }
}

#[test]
fn targets_without_a_backend_here_go_to_the_next_estimator() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let (v, err, code) = partition(
        &small(),
        &cache,
        &[
            "--costs",
            "measure+analytic",
            "--target",
            "tvm_cpu",
            "--target",
            "cutlass",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let m = measure_stats(&v);
    assert!(n(m, "unknown") > 0, "{m}");
    // Nothing of the GPU target was measured or cached.
    let (db, _) = Db::open(&cache.join("measurements.sqlite")).unwrap();
    let s = db.stats().unwrap();
    assert_eq!(
        s.by_target,
        vec![("tvm_cpu".to_string(), n(m, "measured") + n(m, "invalid"))]
    );
    // Alone, `measure` leaves the GPU target's candidates unusable, and says why.
    let (_, err, code) = partition(&small(), &cache, &["--costs", "measure", "--target", "tvm"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[E2101]"), "{err}");
    assert!(err.contains("not on this machine's CPU"), "{err}");
}

#[test]
fn a_damaged_cache_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("costs.db");
    std::fs::write(
        &file,
        "not a database at all, but long enough to look like a header",
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let (v, err, code) = partition(
        &small(),
        &cache,
        &[
            "--costs",
            "measure",
            "--target",
            "tvm_cpu",
            "--cache",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning[W2402]"), "{err}");
    assert!(n(measure_stats(&v), "measured") > 0);
    assert!(dir.path().join("costs.db.corrupt").is_file());
    // The cache works again, and `--cache` kept it out of the cache directory.
    let (db, _) = Db::open(&file).unwrap();
    assert!(db.stats().unwrap().entries > 0);
    assert!(!cache.join("measurements.sqlite").exists());
}

#[test]
fn an_unusable_cache_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = collage([
        "partition",
        small().to_str().unwrap(),
        "--costs",
        "measure",
        "--cache",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error[E2401]"), "{err}");
    assert!(err.contains("is a directory"), "{err}");
    // Refused whether or not the costs are measured.
    for costs in ["measure", "analytic"] {
        for bad in [
            ["--threads", "0"],
            ["--measure-budget", "-1"],
            ["--measure-budget", "nan"],
        ] {
            let out = collage([
                "partition",
                small().to_str().unwrap(),
                "--costs",
                costs,
                "--cache-dir",
                dir.path().to_str().unwrap(),
                bad[0],
                bad[1],
            ]);
            assert_eq!(out.status.code(), Some(2), "{costs} {bad:?}");
            assert!(out.stdout.is_empty(), "{costs} {bad:?}");
        }
    }
}

/// Rows in the cache, or 0 while it does not exist yet.
fn rows(db: &Path) -> u64 {
    if !db.exists() {
        return 0;
    }
    Db::open(db).map_or(0, |(d, _)| d.stats().map_or(0, |s| s.entries))
}

#[test]
fn a_killed_measurement_keeps_what_it_committed() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let db = cache.join("measurements.sqlite");
    let mut child = measuring(&mnist(), &cache)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut committed = 0;
    while start.elapsed() < Duration::from_secs(60) {
        committed = rows(&db);
        if committed >= 3 || child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // SIGKILL: no destructor, no commit of anything in flight.
    child.kill().unwrap();
    child.wait().unwrap();
    let kept = rows(&db);
    assert!(kept >= committed && kept >= 3, "{kept} rows after the kill");
    let (v, err, code) = partition(
        &mnist(),
        &cache,
        &["--costs", "measure", "--target", "tvm_cpu"],
    );
    assert_eq!(code, 0, "{err}");
    let m = measure_stats(&v);
    let total = v["stats"]["estimates"].as_u64().unwrap();
    assert!(
        kept < total,
        "the process was not killed during measurement"
    );
    assert_eq!(n(m, "cached"), kept, "{m}");
    assert_eq!(n(m, "measured") + n(m, "invalid"), total - kept, "{m}");
    assert_eq!(rows(&db), total);
}

#[test]
fn two_processes_share_a_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let spawn = |out: &str| {
        measuring(&small(), &cache)
            .arg("-o")
            .arg(dir.path().join(out))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("a.relay"), spawn("b.relay"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    for o in [&a, &b] {
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let va: Value = serde_json::from_slice(&a.stdout).unwrap();
    let total = va["stats"]["estimates"].as_u64().unwrap();
    // Every structure is in the cache once, whoever measured it.
    assert_eq!(rows(&cache.join("measurements.sqlite")), total);
    let (v, err, code) = partition(
        &small(),
        &cache,
        &["--costs", "measure", "--target", "tvm_cpu"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(n(measure_stats(&v), "measured"), 0);
    assert_eq!(n(measure_stats(&v), "cached"), total);
}

#[test]
fn cache_stats_and_clear() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let (v, err, code) = partition(
        &small(),
        &cache,
        &["--costs", "measure", "--target", "tvm_cpu"],
    );
    assert_eq!(code, 0, "{err}");
    let total = v["stats"]["estimates"].as_u64().unwrap();
    // The native kernels compiled while measuring are in the cache directory too.
    let kernels = cache.join("kernels");
    let files = |sub: &str| std::fs::read_dir(kernels.join(sub)).unwrap().count() as u64;
    let c = cache.to_str().unwrap();
    let out = collage(["cache", "stats", "--cache-dir", c, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["measurements"]["entries"].as_u64(), Some(total));
    assert_eq!(
        s["measurements"]["by_target"]["tvm_cpu"].as_u64(),
        Some(total)
    );
    let entries = s["kernels"]["entries"].as_u64().unwrap();
    assert!(entries > 0, "{s}");
    assert_eq!(entries, files("entries"));
    assert!(s["kernels"]["libraries"].as_u64().unwrap() > 0, "{s}");
    let out = collage(["cache", "stats", "--cache-dir", c]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("{total} entries")), "{text}");
    // Clearing the measurements only keeps the kernels.
    let out = collage(["cache", "clear", "--cache-dir", c, "--measurements"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("cleared {total} measurement(s)")),
        "{text}"
    );
    assert_eq!(files("entries"), entries);
    let out = collage(["cache", "clear", "--cache-dir", c]);
    assert_eq!(out.status.code(), Some(0));
    assert!(!kernels.exists());
    let out = collage(["cache", "stats", "--cache-dir", c, "--json"]);
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["measurements"]["entries"].as_u64(), Some(0));
    assert_eq!(s["kernels"]["entries"].as_u64(), Some(0));
    // A damaged database is removed by `clear` too.
    let db = cache.join("measurements.sqlite");
    std::fs::write(
        &db,
        "garbage garbage garbage garbage garbage garbage garbage",
    )
    .unwrap();
    let out = collage(["cache", "clear", "--cache-dir", c]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bench_runs_and_checks_every_placement() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let svg = dir.path().join("chart.svg");
    let out = collage([
        "bench",
        small().to_str().unwrap(),
        "--target",
        "tvm_cpu",
        "--target",
        "cutlass",
        "--costs",
        "measure+analytic",
        "--measure-budget",
        "0.05",
        "--run-budget",
        "0.2",
        "--cache-dir",
        cache.to_str().unwrap(),
        "--format",
        "json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let placements = v["placements"].as_array().unwrap();
    let names: Vec<&str> = placements
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["collage", "tvm", "cutlass", "greedy:cutlass"]);
    // Whatever uses cutlass is skipped (it cannot run here) and says why; the rest ran, or has
    // the partitions of one that did, with the reference interpreter's outputs. (Which
    // placement the plan is depends on measured costs.)
    for p in placements {
        if p["partitions"].get("cutlass").is_some() {
            assert_eq!(p["status"], "skipped", "{p}");
            let reason = p["reason"].as_str().unwrap();
            assert!(reason.contains("not on this machine's CPU"), "{p}");
        } else {
            assert!(p["status"] == "ran" || p["status"] == "same", "{p}");
            assert_eq!(p["outputs_within_tolerance"], true, "{p}");
            assert!(p["latency_ms"]["median"].as_f64().unwrap() > 0.0, "{p}");
        }
        if p["status"] == "ran" {
            // One profile row per partition, each with its kernel's time inside the model.
            let rows = p["profile"].as_array().unwrap();
            let parts: u64 = p["partitions"]
                .as_object()
                .unwrap()
                .values()
                .map(|n| n.as_u64().unwrap())
                .sum();
            assert_eq!(rows.len() as u64, parts, "{p}");
            for r in rows {
                assert!(r["in_model_ms"].as_f64().unwrap() > 0.0, "{r}");
                assert!(r["estimated_ms"].as_f64().unwrap() > 0.0, "{r}");
                assert!(r["candidates"].as_u64().unwrap() >= 1, "{r}");
            }
        }
    }
    assert_eq!(placements[1]["partitions"].get("cutlass"), None);
    assert_eq!(placements[3]["status"], "skipped");
    // The placements that ran were timed together, in rounds: as many runs each.
    let repeats: Vec<u64> = placements
        .iter()
        .filter(|p| p["status"] == "ran")
        .map(|p| p["latency_ms"]["repeats"].as_u64().unwrap())
        .collect();
    assert!(!repeats.is_empty() && repeats.iter().all(|&r| r == repeats[0] && r >= 1));
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(chart.starts_with("<svg"), "{chart}");
    assert!(chart.contains("tvm_cpu alone"), "{chart}");
    // The table, from the cache: nothing measured again.
    let out = collage([
        "bench",
        small().to_str().unwrap(),
        "--target",
        "tvm_cpu",
        "--run-budget",
        "0.2",
        "--cache-dir",
        cache.to_str().unwrap(),
        "--profile",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("0 timed"), "{text}");
    assert!(text.contains("Collage plan"), "{text}");
    assert!(text.contains("speed-up  x1.00"), "{text}");
    assert!(text.contains("ok (max abs diff"), "{text}");
    assert!(
        text.contains("profile of Collage plan: 3 partitions"),
        "{text}"
    );
}

/// An imported ONNX `MatMul` of 3-d operands is several operators with the node's span (the
/// reshapes around a `batch_matmul`); when they land in different partitions, each partition
/// still gets its own kernel's time in the profile (none is left without one while another
/// is charged twice).
/// A model whose reference outputs are not finite on the drawn inputs gets a warning that
/// says the check is weak there; the run still succeeds.
#[test]
fn bench_warns_of_non_finite_reference_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("inf.relay");
    std::fs::write(
        &model,
        "#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(2, 8), float32]) {\n  \
         %0 = nn.relu(%x);\n  (divide(%0, 0f), add(%x, 1f))\n}\n",
    )
    .unwrap();
    let out = collage([
        "bench",
        model.to_str().unwrap(),
        "--target",
        "tvm_cpu",
        "--costs",
        "analytic",
        "--run-budget",
        "0.1",
        "--cache-dir",
        dir.path().join("cache").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("W2331"), "{err}");
    assert!(
        err.contains("output0 has 16 NaN or infinite value(s) of 16"),
        "{err}"
    );
    assert!(!err.contains("output1 has"), "{err}");
}

#[test]
fn the_profile_times_every_partition_of_an_onnx_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = root().join("tests/fixtures/onnx/gpt2_tiny-opset13/model.onnx");
    let out = collage([
        "bench",
        model.to_str().unwrap(),
        "--dim",
        "batch=2",
        "--dim",
        "sequence=8",
        "--target",
        "tvm_cpu",
        "--measure-budget",
        "0.05",
        "--run-budget",
        "0.2",
        "--onnxruntime",
        "never",
        "--cache-dir",
        dir.path().to_str().unwrap(),
        "--format",
        "json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut rows_seen = 0;
    for p in v["placements"].as_array().unwrap() {
        if p["status"] != "ran" {
            continue;
        }
        for r in p["profile"].as_array().unwrap() {
            rows_seen += 1;
            assert!(r["in_model_ms"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
        }
    }
    assert!(rows_seen > 20, "{v}");
}
