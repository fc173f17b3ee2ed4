//! End-to-end runs of the `collage` binary: exit codes and output streams.

use crate::support::collage;

#[test]
fn parse_prints_canonical_text_and_exits_zero() {
    let out = collage(["parse", "tests/models/mnist.relay"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("#[version = \"0.0.5\"]\ndef @main("));
    assert!(text
        .contains("nn.conv2d(%0, meta[relay.Constant][0] /* ty=Tensor[(8, 1, 5, 5), float32] */"));
}

#[test]
fn parse_json_lists_nodes() {
    let out = collage(["parse", "--json", "tests/models/gpt2_extract.relay"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let nodes = v["nodes"].as_array().unwrap();
    let dense = nodes.iter().find(|n| n["binding"] == "%46").unwrap();
    assert_eq!(dense["op"], "nn.dense");
    assert_eq!(dense["kind"], "Call");
    assert_eq!(dense["type"], "Tensor[(1600, 768), float32]");
    assert!(dense["span"]["start"].as_u64().unwrap() < dense["span"]["end"].as_u64().unwrap());
}

#[test]
fn parse_errors_exit_one_with_spanned_diagnostic() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("bad.relay");
    std::fs::write(
        &file,
        "#[version = \"0.0.5\"]\ndef @main(%x: float32) { nn.relu(%y) }\n",
    )
    .unwrap();
    let out = collage(["parse", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("error[E0301]: undefined variable `%y`"),
        "{err}"
    );
    assert!(err.contains("bad.relay:2:"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn missing_file_exits_two() {
    let out = collage(["parse", "no/such/file.relay"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("E0901"), "{err}");
}

#[test]
fn usage_error_exits_two() {
    let out = collage(["parse"]);
    assert_eq!(out.status.code(), Some(2));
}

/// Writes `text` to `name` in a new temporary directory, removed when the guard is dropped.
fn temp_model(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

#[test]
fn plan_devices_conflict_exits_one_with_both_spans() {
    let (_dir, file) = temp_model(
        "conflict.relay",
        "#[version = \"0.0.5\"]\n\
         def @main(%a {virtual_device=VirtualDevice(device=\"cpu\", id=0)}: Tensor[(4), float32]) {\n  \
         %0 = on_device(%a, virtual_device=VirtualDevice(device=\"cuda\", id=0), constrain_result=True);\n  \
         nn.relu(%0)\n}\n",
    );
    let out = collage(["plan-devices", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("error[E0701]: conflicting virtual devices"),
        "{err}"
    );
    assert!(err.contains("conflict.relay:3:"), "{err}");
    assert!(err.contains("2 │ def @main(%a"), "{err}");
    assert_eq!(err.matches("requires VirtualDevice(").count(), 2, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn plan_devices_prints_minimal_and_complete_forms() {
    let (_dir, file) = temp_model(
        "plan.relay",
        "#[version = \"0.0.5\"]\n\
         def @main(%a: Tensor[(4), float32]) {\n  \
         %0 = on_device(nn.relu(%a), virtual_device=VirtualDevice(device=\"cuda\", id=0));\n  \
         negative(%0)\n}\n",
    );
    let path = file.to_str().unwrap();
    let out = collage(["plan-devices", "--minimal", "--no-type-comments", path]);
    assert_eq!(out.status.code(), Some(0));
    let minimal = String::from_utf8(out.stdout).unwrap();
    let cuda = "VirtualDevice(device=\"cuda\", id=0)";
    let cpu = "VirtualDevice(device=\"cpu\", id=0)";
    assert!(
        minimal.contains(&format!(
            "def @main(%a {{virtual_device={cuda}}}: Tensor[(4), float32], virtual_device={cpu}) -> Tensor[(4), float32] {{"
        )),
        "{minimal}"
    );
    assert!(
        minimal.contains(&format!(
            "device_copy(%0, src_virtual_device={cuda}, dst_virtual_device={cpu})"
        )),
        "{minimal}"
    );
    assert!(!minimal.contains("on_device"), "{minimal}");
    let out = collage(["plan-devices", "--complete", path]);
    assert_eq!(out.status.code(), Some(0));
    let complete = String::from_utf8(out.stdout).unwrap();
    assert!(
        complete.contains(&format!(
            "nn.relu(%a) /* ty=Tensor[(4), float32], device={cuda} */"
        )),
        "{complete}"
    );
    let out = collage(["plan-devices", "--default-device", "tpu", path]);
    assert_eq!(out.status.code(), Some(2));
}

/// `--tvm-compat` on every command that prints a module it was given: `parse`, `plan-devices`
/// and `partition` write devices as TVM does, and what they write reads back and plans the same.
/// `generate` writes models with no devices and a return type on `@main`: nothing for the flag
/// to change.
#[test]
fn tvm_compat_on_every_command_that_prints_a_module() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.relay");
    std::fs::write(
        &model,
        "#[version = \"0.0.5\"]\n\
         def @main(%a {virtual_device=VirtualDevice(device=\"cuda\", id=0)}: Tensor[(4), float32]) {\n  \
         let %x {virtual_device=VirtualDevice(device=\"cuda\", id=0)} = nn.relu(%a);\n  \
         %0 = on_device(negative(%x), virtual_device=VirtualDevice(device=\"cpu\", id=0));\n  \
         add(%0, %0)\n}\n",
    )
    .unwrap();
    let model = model.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = collage(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let planned = run(&["plan-devices", model]);
    for (what, args) in [
        ("parse", vec!["parse", "--tvm-compat", model]),
        ("plan-devices", vec!["plan-devices", "--tvm-compat", model]),
    ] {
        let text = run(&args);
        crate::support::assert_tvm_device_syntax(what, &text);
        assert!(text.contains("on_device(nn.relu(%a)"), "{what}: {text}");
        assert!(text.contains("constrain_result=True"), "{what}: {text}");
        let file = dir.path().join(format!("{what}.relay"));
        std::fs::write(&file, &text).unwrap();
        let file = file.to_str().unwrap();
        run(&["parse", file]);
        assert_eq!(run(&["plan-devices", file]), planned, "{what}");
    }
    let out = dir.path().join("partitioned.relay");
    let out = out.to_str().unwrap();
    run(&[
        "partition",
        "tests/fixtures/partition-devices/two-devices.relay",
        "--tvm-compat",
        "-o",
        out,
    ]);
    let text = std::fs::read_to_string(out).unwrap();
    crate::support::assert_tvm_device_syntax("partition", &text);
    assert!(text.contains("#[metadata]"), "{text}");
    run(&["parse", out]);
    for (what, args) in [
        ("generate gpt2", vec!["generate", "gpt2", "--layers", "1"]),
        (
            "generate bert",
            vec!["generate", "bert", "--layers", "1", "--seq", "4"],
        ),
    ] {
        let text = run(&args);
        crate::support::assert_tvm_device_syntax(what, &text);
        assert!(!text.contains("virtual_device"), "{what}");
        let heads: Vec<&str> = text.lines().filter(|l| l.starts_with("def @")).collect();
        assert!(
            !heads.is_empty() && heads.iter().all(|h| h.contains(") -> ")),
            "{what}: {heads:?}"
        );
    }
}
