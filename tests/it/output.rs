//! Output safety: what `-o` and `--dot` do to what is at the path, failed writes on standard
//! output, and paths that collide. Every file these tests make lives in a temporary directory of
//! their own; `/dev/full` is only ever standard output.

use crate::support::{cache_dir, collage, collage_in, root};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Command, Stdio};

const MODEL: &str = "tests/models/mnist.relay";

fn model() -> String {
    root().join(MODEL).to_string_lossy().into_owned()
}

fn run_tool(tool: &str, args: &[&str]) {
    let status = Command::new(tool).args(args).status().expect("tool runs");
    assert!(status.success(), "{tool} {args:?} failed");
}

#[test]
fn a_fifo_is_written_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("out.fifo");
    run_tool("mkfifo", &[fifo.to_str().unwrap()]);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let out = collage(["partition", MODEL, "-o", fifo.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let program = reader.join().unwrap();
    assert!(program.contains("def @main"), "{program}");
    let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(kind.is_fifo(), "the FIFO was replaced: {kind:?}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn a_character_device_is_written_in_place() {
    // The tests run as root; `c 1 3` is the null device, made inside the temporary directory.
    let dir = tempfile::tempdir().unwrap();
    let null = dir.path().join("null");
    run_tool("mknod", &[null.to_str().unwrap(), "c", "1", "3"]);
    let dot = dir.path().join("picture.dot");
    let out = collage([
        "partition",
        MODEL,
        "--format",
        "json",
        "-o",
        null.to_str().unwrap(),
        "--dot",
        dot.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["functions"][0]["total_cost"].is_number());
    let kind = std::fs::symlink_metadata(&null).unwrap().file_type();
    assert!(kind.is_char_device(), "the device was replaced: {kind:?}");
    assert!(std::fs::read_to_string(&dot)
        .unwrap()
        .starts_with("digraph"));
    // Both outputs may share a device: nothing is replaced.
    let out = collage([
        "partition",
        MODEL,
        "-o",
        null.to_str().unwrap(),
        "--dot",
        null.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert!(std::fs::symlink_metadata(&null)
        .unwrap()
        .file_type()
        .is_char_device());
}

#[test]
fn a_symlink_is_followed_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("real.relay");
    std::fs::write(&target, "old").unwrap();
    let link = dir.path().join("link.relay");
    std::os::unix::fs::symlink("real.relay", &link).unwrap();
    let out = collage_in(dir.path(), ["partition", &model(), "-o", "link.relay"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::read_to_string(&target)
        .unwrap()
        .contains("def @main"));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn a_regular_file_is_replaced_without_leftovers() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.relay");
    std::fs::write(&out_path, "old").unwrap();
    let out = collage(["partition", MODEL, "-o", out_path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(std::fs::read_to_string(&out_path)
        .unwrap()
        .contains("def @main"));
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["out.relay"]);
}

#[test]
fn planted_links_in_the_output_directory_are_left_alone() {
    // Links at every name of the old `.NAME.tmpPID` scheme for a range of process ids, and at
    // plausible prefixes: none may be written through.
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let mut planted = 0;
    for pid in std::process::id()..std::process::id() + 200 {
        let name = dir.path().join(format!(".out.relay.tmp{pid}"));
        std::os::unix::fs::symlink(&victim, name).unwrap();
        planted += 1;
    }
    let out_path = dir.path().join("out.relay");
    let out = collage(["partition", MODEL, "-o", out_path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        planted + 2,
        "a temporary file was left behind"
    );
}

#[test]
fn a_failed_output_write_is_reported_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("a-directory");
    std::fs::create_dir(&sub).unwrap();
    let out = collage(["partition", MODEL, "-o", sub.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error[E0902]: cannot write"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    assert_eq!(std::fs::read_dir(&sub).unwrap().count(), 0);
}

/// Runs the binary with standard output on `/dev/full`.
fn to_full_disk(args: &[&str]) -> std::process::Output {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full opens for writing");
    Command::new(env!("CARGO_BIN_EXE_collage"))
        .args(args)
        .current_dir(root())
        .env("COLLAGE_CACHE_DIR", cache_dir())
        .stdout(Stdio::from(full))
        .stderr(Stdio::piped())
        .output()
        .expect("the binary runs")
}

#[test]
fn every_command_reports_a_failed_write_on_standard_output() {
    let rules = "rules/tvm.rules";
    let commands: [&[&str]; 19] = [
        &["--help"],
        &["--version"],
        &["partition", "--help"],
        &["parse", MODEL],
        &["parse", MODEL, "--json"],
        &["partition", MODEL],
        &["partition", MODEL, "--format", "json"],
        &["fuse", MODEL],
        &["fuse", MODEL, "--json"],
        &["candidates", MODEL],
        &["plan-devices", MODEL],
        &["check", "--print", rules],
        &["generate", "gpt2", "--layers", "1"],
        &["run", MODEL, "--backend", "reference"],
        &["run", MODEL, "--backend", "reference", "--format", "json"],
        &["backends"],
        &["cache", "stats"],
        &["cache", "stats", "--json"],
        &[
            "bench",
            MODEL,
            "--costs",
            "analytic",
            "--target",
            "tvm_cpu",
            "--run-budget",
            "0.05",
        ],
    ];
    for args in commands {
        let out = to_full_disk(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("error[E0902]: cannot write standard output"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn help_and_version_print_on_standard_output_and_succeed() {
    let help = collage(["--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("Usage: collage"));
    assert!(help.stderr.is_empty());
    let version = collage(["--version"]);
    assert_eq!(version.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("collage {}", env!("CARGO_PKG_VERSION"))
    );
    // A usage error still goes to standard error, with exit code 2.
    let bad = collage(["--no-such-flag"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(bad.stdout.is_empty());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--no-such-flag"));
}

#[test]
fn a_closed_pipe_stays_quiet() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_collage"))
        .args(["generate", "gpt2", "--layers", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead;
        let stdout = child.stdout.take().unwrap();
        let mut first = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut first)
            .unwrap();
        assert!(!first.is_empty());
        // The reader goes away here, as `| head -1` does.
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn copy_into(dir: &Path, from: &str, name: &str) -> std::path::PathBuf {
    let to = dir.join(name);
    std::fs::copy(root().join(from), &to).unwrap();
    to
}

#[test]
fn outputs_that_collide_are_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = copy_into(d, MODEL, "model.relay");
    std::fs::create_dir(d.join("rules")).unwrap();
    for f in ["prelude.rules", "tvm.rules"] {
        copy_into(d, &format!("rules/{f}"), &format!("rules/{f}"));
    }
    std::fs::write(d.join("costs.json"), r#"{"targets": {"tvm_cpu": 1.0}}"#).unwrap();
    let original_costs = std::fs::read(d.join("costs.json")).unwrap();
    let original_tvm = std::fs::read(d.join("rules/tvm.rules")).unwrap();
    let original_model = std::fs::read(&model).unwrap();
    let original_prelude = std::fs::read(d.join("rules/prelude.rules")).unwrap();
    std::os::unix::fs::symlink("model.relay", d.join("alias.relay")).unwrap();
    let refused: [&[&str]; 12] = [
        &[
            "partition",
            "model.relay",
            "-o",
            "x.relay",
            "--dot",
            "x.relay",
        ],
        &[
            "partition",
            "model.relay",
            "-o",
            "x.relay",
            "--dot",
            "./x.relay",
        ],
        &["partition", "model.relay", "--dot", "model.relay"],
        &["partition", "model.relay", "-o", "rules/../alias.relay"],
        &[
            "partition",
            "model.relay",
            "--rules",
            "rules/tvm.rules",
            "-o",
            "rules/tvm.rules",
        ],
        // An imported file, reached through a directory given as --rules.
        &[
            "partition",
            "model.relay",
            "--rules",
            "rules/tvm.rules",
            "--dot",
            "rules/prelude.rules",
        ],
        // A cost file is an input too.
        &[
            "partition",
            "model.relay",
            "--costs",
            "mock:costs.json",
            "--dot",
            "costs.json",
        ],
        &[
            "partition",
            "model.relay",
            "--costs",
            "analytic+table:./costs.json",
            "-o",
            "costs.json",
        ],
        // The measurement database is written: it may name no input and no other output.
        &[
            "partition",
            "model.relay",
            "--costs",
            "measure",
            "--cache",
            "alias.relay",
        ],
        &[
            "partition",
            "model.relay",
            "--costs",
            "measure",
            "--cache",
            "x.relay",
            "-o",
            "x.relay",
        ],
        // `bench --plot` as well: a rules file, one it imports, the model.
        &[
            "bench",
            "model.relay",
            "--rules",
            "rules/tvm.rules",
            "--plot",
            "rules/tvm.rules",
        ],
        &[
            "bench",
            "model.relay",
            "--rules",
            "rules/tvm.rules",
            "--plot",
            "rules/prelude.rules",
        ],
    ];
    for args in refused {
        let out = collage_in(d, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("error[E0903]"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: work was done");
    }
    assert_eq!(std::fs::read(&model).unwrap(), original_model);
    assert_eq!(std::fs::read(d.join("costs.json")).unwrap(), original_costs);
    assert_eq!(
        std::fs::read(d.join("rules/tvm.rules")).unwrap(),
        original_tvm
    );
    assert!(!d.join("model.relay.corrupt").exists());
    assert_eq!(
        std::fs::read(d.join("rules/prelude.rules")).unwrap(),
        original_prelude
    );
    assert!(!d.join("x.relay").exists());
    let ok = collage_in(
        d,
        [
            "partition",
            "model.relay",
            "-o",
            "x.relay",
            "--dot",
            "x.dot",
        ],
    );
    assert_eq!(ok.status.code(), Some(0));
}
