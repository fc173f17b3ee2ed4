//! The model corpus (`tests/models`): every model loads, type-checks and round-trips.

use crate::support::{load_ok, root, round_trip};

fn model(name: &str) -> std::path::PathBuf {
    root().join("tests/models").join(format!("{name}.relay"))
}

#[test]
fn every_corpus_model_round_trips() {
    let mut count = 0;
    for entry in std::fs::read_dir(root().join("tests/models")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "relay") {
            let m = load_ok(&path);
            round_trip(&path.display().to_string(), &m);
            count += 1;
        }
    }
    assert_eq!(count, 13, "the corpus has 13 models");
}

#[test]
fn printed_mnist() {
    let m = load_ok(&model("mnist"));
    insta::assert_snapshot!(collage::frontend::relay::print::print_module(&m));
}

#[test]
fn printed_gpt2_extract() {
    let m = load_ok(&model("gpt2_extract"));
    insta::assert_snapshot!(collage::frontend::relay::print::print_module(&m));
}

#[test]
fn printed_resnext50_32x4d() {
    let m = load_ok(&model("resnext50_32x4d"));
    insta::assert_snapshot!(collage::frontend::relay::print::print_module(&m));
}

#[test]
fn mnist_dataflow_json() {
    let m = load_ok(&model("mnist"));
    let json = collage::driver::dataflow_json(&m).unwrap();
    insta::assert_snapshot!(serde_json::to_string_pretty(&json).unwrap());
}
