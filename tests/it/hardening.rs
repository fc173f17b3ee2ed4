//! Bad and hostile inputs at the edges of the tool: input size limits, modules without `@main`,
//! rules files that are not UTF-8, imports spelled several ways or resolved from the shipped
//! library, costs at the ceiling, estimators that fail, and malformed flag values. Fixtures
//! are in `tests/fixtures/hardening/`; every file a test makes is in its own temporary directory.

use crate::support::{collage, collage_in, root};
use std::path::Path;
use std::process::Output;

const FIXTURES: &str = "tests/fixtures/hardening";
const MNIST: &str = "tests/models/mnist.relay";

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn fixture(name: &str) -> String {
    format!("{FIXTURES}/{name}")
}

#[test]
fn an_input_larger_than_the_limit_is_refused() {
    let out = collage(["parse", MNIST, "--max-input-size", "1K"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("error[E0901]") && err.contains("larger than the input limit of 1 KiB"),
        "{err}"
    );
    assert!(err.contains("mnist.relay"), "{err}");
    // The same file under a limit it fits in.
    let out = collage(["parse", MNIST, "--max-input-size", "64K"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Limits that are not sizes are usage errors.
    for bad in ["0", "4G", "12Q", "-1", ""] {
        let out = collage(["parse", MNIST, "--max-input-size", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
    }
}

/// A FIFO in `dir` fed with endless text by a thread until its reader goes away.
fn endless_fifo(dir: &Path, name: &str) -> std::path::PathBuf {
    let fifo = dir.join(name);
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let path = fifo.clone();
    std::thread::spawn(move || {
        use std::io::Write;
        let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(path) else {
            return;
        };
        let chunk = vec![b' '; 1 << 16];
        while f.write_all(&chunk).is_ok() {}
    });
    fifo
}

#[test]
fn an_endless_model_stops_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = endless_fifo(dir.path(), "model.relay");
    let out = collage(["parse", fifo.to_str().unwrap(), "--max-input-size", "256K"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("larger than the input limit of 256 KiB"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_endless_import_stops_at_the_limit_with_its_location() {
    let dir = tempfile::tempdir().unwrap();
    endless_fifo(dir.path(), "endless.rules");
    std::fs::write(dir.path().join("main.rules"), "import \"endless.rules\";\n").unwrap();
    let out = collage_in(
        dir.path(),
        ["check", "main.rules", "--max-input-size", "128K"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("error[E1101]: cannot import `endless.rules`"),
        "{err}"
    );
    assert!(
        err.contains("larger than the input limit of 128 KiB"),
        "{err}"
    );
    assert!(err.contains("main.rules:1:8"), "{err}");
}

#[test]
fn a_module_without_main_is_named_with_its_functions() {
    for args in [
        vec!["partition", "only-foo.relay"],
        vec!["candidates", "only-foo.relay"],
        vec!["fuse", "only-foo.relay"],
        vec!["parse", "--json", "only-foo.relay"],
        vec!["run", "only-foo.relay", "--backend", "reference"],
        vec![
            "run",
            "../../models/mnist.relay",
            "--backend",
            "reference",
            "--compare-with",
            "only-foo.relay",
        ],
        vec!["bench", "only-foo.relay", "--costs", "analytic"],
    ] {
        let out = collage_in(&root().join(FIXTURES), &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        assert!(
            err.contains("error[E0904]: `only-foo.relay` has no `@main` function"),
            "{args:?}: {err}"
        );
        assert!(err.contains("it defines `@foo`"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    let out = collage(["partition", &fixture("no-functions.relay")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("the module defines no functions"));
    // Printing needs no `@main`.
    let out = collage(["parse", &fixture("only-foo.relay")]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_rules_file_that_is_not_utf8_gets_a_located_diagnostic() {
    let out = collage(["check", "tests/fixtures/dsl/err/file-not-utf8.rules"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("error[E1003]: the file is not valid UTF-8"),
        "{err}"
    );
    assert!(err.contains("file-not-utf8.rules:3:7"), "{err}");
    // Imported, it is located too, with the import that named it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("tests/fixtures/dsl/err/file-not-utf8.rules"),
        dir.path().join("bad.rules"),
    )
    .unwrap();
    std::fs::write(dir.path().join("main.rules"), "import \"bad.rules\";\n").unwrap();
    let out = collage_in(dir.path(), ["check", "main.rules"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bad.rules:3:7"), "{err}");
    assert!(err.contains("imported here"), "{err}");
}

#[test]
fn one_file_imported_under_several_spellings_is_loaded_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("lib/sub")).unwrap();
    for f in ["prelude.rules", "tvm.rules"] {
        std::fs::copy(root().join("rules").join(f), d.join("lib").join(f)).unwrap();
    }
    std::os::unix::fs::symlink("lib/tvm.rules", d.join("alias.rules")).unwrap();
    let absolute = d.join("lib/tvm.rules");
    std::fs::write(
        d.join("lib/sub/user.rules"),
        format!(
            "import \"../tvm.rules\";\nimport \"../../alias.rules\";\nimport \"{}\";\n\
             import \"../sub/../tvm.rules\";\n",
            absolute.display()
        ),
    )
    .unwrap();
    let out = collage_in(
        d,
        [
            "check",
            "lib/sub/user.rules",
            "lib/tvm.rules",
            "alias.rules",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("E1202"), "{err}");
}

#[test]
fn a_users_rules_file_imports_the_shipped_library_from_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let mine = dir.path().join("mylib.rules");
    std::fs::copy(root().join(fixture("user-rules/mylib.rules")), &mine).unwrap();
    let model = root().join(MNIST);
    let out = collage_in(
        dir.path(),
        [
            "candidates",
            model.to_str().unwrap(),
            "--rules",
            "mylib.rules",
            "--target",
            "mylib",
            "--json",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mylib = &listing["targets"][0];
    assert_eq!(mylib["name"], "mylib");
    let composites: Vec<&str> = mylib["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["composites"].as_array().unwrap())
        .map(|c| c["label"].as_str().unwrap())
        .collect();
    // mnist has two `nn.relu`.
    assert_eq!(composites, ["mylib.relu", "mylib.relu"]);
    // The imported native targets are there as well: partitioning works.
    let out = collage_in(
        dir.path(),
        [
            "partition",
            model.to_str().unwrap(),
            "--rules",
            "mylib.rules",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The reference configuration works from any directory too.
    let reference = root().join("benches/reference.rules");
    let out = collage_in(dir.path(), ["check", reference.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A missing import says where it looked.
    let out = collage(["check", &fixture("user-rules/missing-import.rules")]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("user-rules/no-such-backend.rules` does not exist")
            && err.contains("the shipped library has no `no-such-backend.rules`"),
        "{err}"
    );
}

/// The first place an import is looked for is next to the importing file: a user's own
/// `tvm.rules` there is used instead of the shipped library's file of that name.
#[test]
fn an_import_next_to_the_importer_comes_before_the_shipped_library() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tvm.rules"),
        "target localtvm {\n    device = cuda(0);\n    rule = op_call_by_kind;\n}\n\
         target host {\n    host = true;\n    device = cpu;\n}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("user.rules"), "import \"tvm.rules\";\n").unwrap();
    let out = collage_in(dir.path(), ["check", "--print", "user.rules"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    let targets: Vec<&str> = printed
        .lines()
        .filter_map(|l| l.strip_prefix("target "))
        .collect();
    assert_eq!(targets, ["localtvm {", "host {"], "{printed}");
}

#[test]
fn a_target_without_costs_is_warned_about_under_the_analytic_estimator() {
    let rules = fixture("user-rules/no-cost.rules");
    let out = collage(["partition", MNIST, "--rules", &rules, "--format", "json"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning[W2107]: target `nocost` has no cost block"),
        "{err}"
    );
    assert!(err.contains("no-cost.rules:5:8"), "{err}");
    assert_eq!(err.matches("W2107").count(), 1, "{err}");
    // A mock estimator first prices it: the warning says only mock can.
    let dir = tempfile::tempdir().unwrap();
    let mock = dir.path().join("mock.json");
    std::fs::write(&mock, r#"{"targets": {"nocost": 1.0}}"#).unwrap();
    let spec = format!("mock:{}+analytic", mock.display());
    let out = collage(["partition", MNIST, "--rules", &rules, "--costs", &spec]);
    assert!(
        stderr(&out).contains("only mock can price"),
        "{}",
        stderr(&out)
    );
    // Without the analytic estimator there is nothing to warn about.
    let spec = format!("mock:{}", mock.display());
    let out = collage(["partition", MNIST, "--rules", &rules, "--costs", &spec]);
    assert!(!stderr(&out).contains("W2107"), "{}", stderr(&out));
}

/// Mock costs as large as the ceiling allows, summed over the whole model and its baselines,
/// stay finite and usable (larger ones are refused when the file is read: bounds.rs).
#[test]
fn costs_at_the_ceiling_stay_finite() {
    let dir = tempfile::tempdir().unwrap();
    let mock = dir.path().join("mock.json");
    std::fs::write(&mock, r#"{"targets": {"tvm_cpu": 1000, "dnnl": 1000}}"#).unwrap();
    let spec = format!("mock:{}", mock.display());
    let program = dir.path().join("out.relay");
    let out = collage([
        "partition",
        MNIST,
        "--costs",
        &spec,
        "--target",
        "tvm_cpu",
        "--target",
        "dnnl",
        "-o",
        program.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!text.contains("infus") && !text.contains("xinf"), "{text}");
    let baselines: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("baselines"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert!(
        baselines
            .iter()
            .any(|l| l.trim_start().starts_with("greedy:dnnl")),
        "{text}"
    );
    // Every baseline covers the model: dear candidates are still candidates.
    for line in baselines {
        assert!(
            !line.contains("invalid") && !line.contains("no cover"),
            "{line}"
        );
    }
    // Above the ceiling the file is refused.
    std::fs::write(&mock, r#"{"targets": {"tvm_cpu": 1.5e308}}"#).unwrap();
    let out = collage(["partition", MNIST, "--costs", &spec]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("error[E2104]"), "{}", stderr(&out));
}

#[test]
fn uncovered_nodes_say_why_the_estimator_refused() {
    let cases = [
        ("cmd:exit 3", "cmd: the command exited with status 3"),
        (
            "cmd:echo soon",
            "cmd: the command printed `soon`, not a number of seconds",
        ),
        ("cmd:sleep 5", "cmd: the command timed out after 0.2 s"),
        // An endless answer is cut at the limit rather than read into memory.
        ("cmd:yes 1", "cmd: the command printed more than 64 KiB"),
    ];
    for (spec, why) in cases {
        let out = collage([
            "partition",
            MNIST,
            "--target",
            "tvm_cpu",
            "--costs",
            spec,
            "--cost-timeout",
            "0.2",
        ]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{spec}: {err}");
        assert!(err.contains("error[E2101]"), "{spec}: {err}");
        assert!(
            err.contains(&format!("tvm_cpu is invalid: {why}")),
            "{spec}: {err}"
        );
        assert!(
            err.matches("tvm_cpu is invalid").count() <= 3,
            "{spec}: {err}"
        );
    }
}

#[test]
fn a_negative_timeout_is_an_invalid_value_not_an_unknown_flag() {
    let out = collage(["partition", MNIST, "--cost-timeout", "-1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("`--cost-timeout` must be a positive number of seconds"),
        "{err}"
    );
    assert!(!err.contains("unexpected argument"), "{err}");
    let out = collage(["partition", MNIST, "--tvm-max-depth", "-3"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("invalid value '-3' for '--tvm-max-depth"),
        "{err}"
    );
    // Every numeric flag: a negative value is a bad value of that flag (clap's message for a
    // type that cannot be negative, or the command's own check), never an unknown argument.
    let numeric: [&[&str]; 27] = [
        &["parse", MNIST, "--max-input-size"],
        &["candidates", MNIST, "--max-enodes"],
        &["candidates", MNIST, "--max-egraph-iters"],
        &["candidates", MNIST, "--max-candidates"],
        &["candidates", MNIST, "--byoc-max-depth"],
        &["partition", MNIST, "--max-candidates"],
        &["partition", MNIST, "--threads"],
        &["partition", MNIST, "--seed"],
        &["partition", MNIST, "--costs", "measure", "--measure-budget"],
        &["fuse", MNIST, "--max-depth"],
        &["run", MNIST, "--seed"],
        &["run", MNIST, "--repeat"],
        &["run", MNIST, "--warmup"],
        &["run", MNIST, "--threads"],
        &["run", MNIST, "--rtol"],
        &["run", MNIST, "--atol"],
        &["run", MNIST, "--compile-timeout"],
        &["bench", MNIST, "--cost-timeout"],
        &["bench", MNIST, "--run-budget"],
        &["bench", MNIST, "--rtol"],
        &["bench", MNIST, "--atol"],
        &["bench", MNIST, "--threads"],
        &["bench", MNIST, "--measure-budget"],
        &["bench", MNIST, "--max-enodes"],
        &["generate", "gpt2", "--layers"],
        &["generate", "bert", "--layers"],
        &["generate", "bert", "--seq"],
    ];
    for args in numeric {
        let flag = args[args.len() - 1];
        let mut args = args.to_vec();
        args.push("-1");
        let out = collage(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
