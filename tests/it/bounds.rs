//! Bounded work and validated values at the edges of the runtime: costs far out of range (from
//! a table, a measurer or the cache), `.npy` headers built to make a parser hang or allocate,
//! flag values that ask for unbounded work, models that need more memory than there is, and
//! terminal escape sequences in user text. Each hostile run is bounded in time and address
//! space, so that a regression fails the test instead of the machine.

use crate::support::{cache_dir, collage, root};
use std::path::Path;
use std::process::{Command, Output};

const MNIST: &str = "tests/models/mnist.relay";

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `collage` at the repository root with at most `secs` seconds of wall time and `gib`
/// GiB of address space (`timeout` exits with 124 when the time is up).
fn bounded(args: &[&str], secs: u32, gib: u64) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {}; exec timeout -s KILL {secs} \"$0\" \"$@\"",
            gib << 20
        ))
        .arg(env!("CARGO_BIN_EXE_collage"))
        .args(args)
        .current_dir(root())
        .env("COLLAGE_CACHE_DIR", cache_dir())
        .output()
        .expect("sh runs")
}

/// The fingerprints of MNIST's candidates for `tvm_cpu` and `dnnl`, by target.
fn fingerprints() -> Vec<(String, String)> {
    let out = collage([
        "candidates",
        MNIST,
        "--target",
        "tvm_cpu",
        "--target",
        "dnnl",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut fps = Vec::new();
    for t in v["targets"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap_or("").to_string();
        for c in t["candidates"].as_array().unwrap() {
            fps.push((name.clone(), c["fingerprint"].as_str().unwrap().to_string()));
        }
    }
    fps
}

/// A table pricing every candidate at a few microseconds (dnnl cheaper than tvm_cpu), with
/// the first dnnl candidate (which a plan need not take) at `first`.
fn table(dir: &Path, first: &str) -> String {
    let fps = fingerprints();
    let dear = fps.iter().position(|(t, _)| t == "dnnl").unwrap();
    let mut costs = Vec::new();
    for (k, (target, fp)) in fps.iter().enumerate() {
        let c = if k == dear {
            first.to_string()
        } else if target == "dnnl" {
            format!("{}e-6", 1 + k % 3)
        } else {
            format!("{}e-6", 3 + k % 5)
        };
        costs.push(format!("\"{fp}\": {c}"));
    }
    let path = dir.join("table.json");
    std::fs::write(&path, format!("{{\"costs\": {{{}}}}}", costs.join(", "))).unwrap();
    format!("table:{}", path.display())
}

fn partition_json(spec: &str) -> Output {
    collage([
        "partition",
        MNIST,
        "--no-simplify",
        "--target",
        "tvm_cpu",
        "--target",
        "dnnl",
        "--costs",
        spec,
        "--format",
        "json",
    ])
}

/// One huge finite cost (1e30, FLT_MAX, 1e300) in a `table:` file, on a candidate no plan
/// needs, made every other cost zero in the search: with 1e300 a total of 0 and a native-only
/// plan, with 1e30 a total below the sum of its parts. Such a cost is refused where it enters;
/// within the ceiling, a total is never below any of its parts.
#[test]
fn a_huge_cost_is_refused_and_totals_are_never_below_their_parts() {
    let dir = tempfile::tempdir().unwrap();
    for huge in ["1e30", "3.4028234663852886e38", "1e300"] {
        let out = partition_json(&table(dir.path(), huge));
        let err = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{huge}: {err}\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            err.contains("error[E2104]") && err.contains("ceiling"),
            "{err}"
        );
    }
    // At the ceiling: an ordinary, very dear candidate.
    let out = partition_json(&table(dir.path(), "1e4"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = &v["functions"][0];
    let total = f["total_cost"].as_f64().unwrap();
    let parts: Vec<f64> = f["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["cost"].as_f64().unwrap())
        .collect();
    let sum: f64 = parts.iter().sum();
    assert!(total > 0.0);
    for p in &parts {
        assert!(total >= *p, "total {total} below a part {p}");
    }
    assert!(
        (total - sum).abs() <= 1e-9 * sum,
        "total {total}, parts {sum}"
    );
    for (name, b) in f["baselines"].as_object().unwrap() {
        if let Some(b) = b.as_f64() {
            assert!(total <= b, "total {total} above baseline {name} {b}");
        }
    }
    // A measurer's answer above the ceiling makes the candidate unusable, with the reason.
    let out = collage([
        "partition",
        MNIST,
        "--target",
        "tvm_cpu",
        "--costs",
        "cmd:echo 1e300",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error[E2101]") && err.contains("ceiling"),
        "{err}"
    );
    // A mock base cost whose candidates would pass the ceiling.
    let mock = dir.path().join("mock.json");
    std::fs::write(&mock, r#"{"targets": {"tvm_cpu": 1e300}}"#).unwrap();
    let out = partition_json(&format!("mock:{}", mock.display()));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("ceiling"), "{}", stderr(&out));
}

fn npy_file(dir: &Path, name: &str, major: u8, header: &[u8], data: &[u8]) -> String {
    let mut f = b"\x93NUMPY".to_vec();
    f.extend([major, 0]);
    if major == 1 {
        f.extend((header.len() as u16).to_le_bytes());
    } else {
        f.extend((header.len() as u32).to_le_bytes());
    }
    f.extend(header);
    f.extend(data);
    let path = dir.join(name);
    std::fs::write(&path, f).unwrap();
    format!("x={}", path.display())
}

/// A 30-byte `.npy` file whose header is twenty `{` never finished; a v2 header declaring
/// 4 GiB of data allocated 4 GiB. Both are located errors at once, in little memory.
#[test]
fn hostile_npy_headers_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let braces = npy_file(dir.path(), "braces.npy", 1, &[b'{'; 20], b"");
    assert_eq!(
        std::fs::metadata(dir.path().join("braces.npy"))
            .unwrap()
            .len(),
        30
    );
    let huge = npy_file(
        dir.path(),
        "huge.npy",
        2,
        b"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 32768, 32768), }",
        &[0; 64],
    );
    for (input, wanted) in [
        (&braces, "expected a string"),
        (&huge, "declares 4294967296 bytes"),
    ] {
        let out = bounded(
            &["run", MNIST, "--backend", "reference", "--input", input],
            20,
            3,
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{input}: {err}");
        assert!(
            err.contains("error[E2304]") && err.contains(wanted),
            "{err}"
        );
    }
}

/// `--repeat 100000000000` reserved its timings (abort), `--repeat` of u64::MAX panicked,
/// `--threads 100000` started that many threads: each is a coded usage error now, at once.
#[test]
fn unbounded_requests_are_refused() {
    let cases: [(&[&str], &str); 7] = [
        (&["run", MNIST, "--repeat", "100000000000"], "E0950"),
        (&["run", MNIST, "--repeat", "18446744073709551615"], "E0950"),
        (&["run", MNIST, "--warmup", "18446744073709551615"], "E0950"),
        (&["run", MNIST, "--threads", "100000"], "E0951"),
        (&["bench", MNIST, "--threads", "100000"], "E0951"),
        (
            &[
                "partition",
                MNIST,
                "--costs",
                "measure",
                "--threads",
                "100000",
            ],
            "E0951",
        ),
        (&["run", MNIST, "--max-memory", "lots"], "E0955"),
    ];
    for (args, code) in cases {
        let out = bounded(args, 20, 3);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&format!("error[{code}]")), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // The limits themselves are accepted.
    let out = collage(["run", MNIST, "--backend", "reference", "--threads", "256"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// Every flag check is a coded diagnostic (they printed `error: --X must be ...`).
#[test]
fn flag_checks_have_codes() {
    let cases: [(&[&str], &str); 14] = [
        (&["run", MNIST, "--repeat", "0"], "E0950"),
        (&["run", MNIST, "--threads", "0"], "E0951"),
        (&["run", MNIST, "--rtol", "-1"], "E0952"),
        (&["run", MNIST, "--atol", "nan"], "E0952"),
        (&["run", MNIST, "--compile-timeout", "0"], "E0953"),
        (&["partition", MNIST, "--cost-timeout", "-1"], "E0953"),
        (&["partition", MNIST, "--threads", "0"], "E0951"),
        (
            &[
                "partition",
                MNIST,
                "--costs",
                "measure",
                "--measure-budget",
                "0",
            ],
            "E0953",
        ),
        (&["bench", MNIST, "--run-budget", "inf"], "E0953"),
        (&["bench", MNIST, "--rtol", "-1"], "E0952"),
        (&["generate", "gpt2", "--layers", "0"], "E0954"),
        (&["generate", "bert", "--seq", "0"], "E0954"),
        (&["partition", MNIST, "--target", "nosuch"], "E0956"),
        (&["candidates", MNIST, "--target", "nosuch"], "E0956"),
    ];
    for (args, code) in cases {
        let out = collage(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with(&format!("error[{code}]: ")),
            "{args:?}: {err}"
        );
    }
}

/// A model with fifty 1 GiB constants (and a 1 GiB input) filled 3 GB before an error; the
/// memory it needs is computed from the types and refused before anything is allocated.
#[test]
fn a_model_larger_than_memory_is_refused_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let ty = "Tensor[(268435456), float32]";
    let mut text = format!("#[version = \"0.0.5\"]\ndef @main(%x: {ty}) {{\n");
    let mut last = "%x".to_string();
    for k in 0..50 {
        text += &format!("  %{k} = add({last}, meta[relay.Constant][{k}] /* ty={ty} */);\n");
        last = format!("%{k}");
    }
    text += &format!("  {last}\n}}\n");
    let model = dir.path().join("big.relay");
    std::fs::write(&model, text).unwrap();
    let model = model.to_str().unwrap();
    // Without `--max-memory` the bound is the memory available: the model needs more only on
    // a machine with less than 51 GiB available (MemAvailable bounds what collage sees).
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kib| kib.saturating_mul(1024));
    let small_machine = available.is_some_and(|b| b < 50 << 30);
    if !small_machine {
        eprintln!("the run without --max-memory is skipped: {available:?} bytes available");
    }
    let runs: &[&[&str]] = if small_machine {
        &[&["--max-memory", "1G"], &[]]
    } else {
        &[&["--max-memory", "1G"]]
    };
    for &extra in runs {
        let mut args = vec!["run", model, "--backend", "reference"];
        args.extend(extra);
        let out = bounded(&args, 20, 3);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains("error[E2330]"), "{err}");
        assert!(
            err.contains("constants 50.0 GiB") && err.contains("available"),
            "{err}"
        );
    }
    let out = bounded(&["run", MNIST, "--max-memory", "1K"], 20, 3);
    assert!(stderr(&out).contains("error[E2330]"), "{}", stderr(&out));
    let out = collage([
        "run",
        MNIST,
        "--backend",
        "reference",
        "--max-memory",
        "64M",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// Terminal escape sequences in user text (a Relay string attribute, a variable name, a rules
/// file's text, a target name on the command line) are shown escaped, never sent raw.
#[test]
fn escape_sequences_in_user_text_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let attr = dir.path().join("attr.relay");
    std::fs::write(
        &attr,
        "#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(2), float32]) {\n  cast(%x, dtype=\"\x1b[31mfloat32\")\n}\n",
    )
    .unwrap();
    let name = dir.path().join("name.relay");
    std::fs::write(
        &name,
        "#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(2), float32]) {\n  %y\x1b[2J\n}\n",
    )
    .unwrap();
    let rules = dir.path().join("esc.rules");
    std::fs::write(&rules, "target \"\x1b]0;title\x07\" {\n}\n").unwrap();
    let runs: [Vec<&str>; 4] = [
        vec!["parse", attr.to_str().unwrap()],
        vec!["parse", name.to_str().unwrap()],
        vec!["check", rules.to_str().unwrap()],
        vec!["partition", MNIST, "--target", "\x1b[31mred"],
    ];
    for args in runs {
        let out = collage(&args);
        let err = stderr(&out);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        assert!(err.contains("error["), "{args:?}: {err}");
        assert!(
            !err.bytes().any(|b| b == 0x1b || b == 0x07),
            "{args:?}: raw control in {err:?}"
        );
    }
    // A carriage return, a line feed or a bidirectional override in user text cannot
    // overwrite the line, fake a diagnostic of its own or reorder what is shown.
    let out = collage([
        "partition",
        MNIST,
        "--target",
        "x\rerror: ok\nerror[E0000]: fake \u{202e}der",
    ]);
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("x\\u{d}error: ok\\u{a}error[E0000]: fake"),
        "{err}"
    );
    assert!(!err.contains('\r') && !err.contains('\u{202e}'), "{err:?}");
    assert!(!err.lines().any(|l| l.starts_with("error[E0000]")), "{err}");
    let file = dir.path().join("cache\nwarning[W0000]: fake");
    std::fs::write(&file, "not a directory").unwrap();
    let out = collage(["run", MNIST, "--cache-dir", file.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("warning[W2411]"), "{err}");
    assert!(
        !err.lines().any(|l| l.starts_with("warning[W0000]")),
        "{err}"
    );
    // A cache directory named with a control character, unusable (a regular file): the
    // warning names it escaped, and the command goes on with a temporary directory.
    let file = dir.path().join("cache\x1b[31m");
    std::fs::write(&file, "not a directory").unwrap();
    let out = collage(["run", MNIST, "--cache-dir", file.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("warning[W2411]"), "{err}");
    assert!(!err.bytes().any(|b| b == 0x1b), "raw control in {err:?}");
    // The argument parser's own errors are coded and escaped too.
    let out = collage(["parse", MNIST, "--\x1b[31mbogus"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("error[E0957]"), "{err}");
    assert!(!err.bytes().any(|b| b == 0x1b), "raw control in {err:?}");
    let out = collage(["parse", attr.to_str().unwrap()]);
    assert!(
        stderr(&out).contains("`\\u{1b}[31mfloat32`"),
        "{}",
        stderr(&out)
    );
}
