//! End-to-end runs of the `collage` binary: exit codes and output streams.

use crate::support::root;
use std::process::Command;

fn collage(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_collage"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the binary runs")
}

#[test]
fn parse_prints_canonical_text_and_exits_zero() {
    let out = collage(&["parse", "tests/models/mnist.relay"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("#[version = \"0.0.5\"]\ndef @main("));
    assert!(text
        .contains("nn.conv2d(%0, meta[relay.Constant][0] /* ty=Tensor[(8, 1, 5, 5), float32] */"));
}

#[test]
fn parse_json_lists_nodes() {
    let out = collage(&["parse", "--json", "tests/models/gpt2_extract.relay"]);
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
    let dir = std::env::temp_dir().join(format!("collage-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.relay");
    std::fs::write(
        &file,
        "#[version = \"0.0.5\"]\ndef @main(%x: float32) { nn.relu(%y) }\n",
    )
    .unwrap();
    let out = collage(&["parse", file.to_str().unwrap()]);
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
    let out = collage(&["parse", "no/such/file.relay"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("E0901"), "{err}");
}

#[test]
fn usage_error_exits_two() {
    let out = collage(&["parse"]);
    assert_eq!(out.status.code(), Some(2));
}
