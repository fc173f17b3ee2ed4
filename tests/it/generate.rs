//! The model generators (`collage::frontend::gen`) and `collage generate`: generated models load cleanly,
//! the 12-layer GPT-2 is the corpus model, and size grows linearly with depth.

use crate::support::{collage, load_ok, load_text_ok, root};
use collage::analysis::work::module_flops;
use collage::ir::{Callee, Expr, Module};
use std::collections::BTreeMap;

/// How many calls of each operator a module has.
fn op_multiset(m: &Module) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for e in &m.exprs {
        if let Expr::Call {
            callee: Callee::Op(o),
            ..
        } = e
        {
            *out.entry(collage::ops::op(*o).name).or_default() += 1;
        }
    }
    out
}

fn op_count(m: &Module) -> usize {
    op_multiset(m).values().sum()
}

#[test]
fn generated_models_load_without_diagnostics() {
    for layers in [1, 12, 48] {
        let m = load_text_ok(
            &format!("gpt2_{layers}"),
            &collage::frontend::gen::gpt2(layers),
        );
        assert_eq!(op_count(&m), 16 + 71 * layers, "gpt2({layers})");
    }
    let m = load_text_ok("bert_2_128", &collage::frontend::gen::bert_large(2, 128));
    assert_eq!(op_count(&m), 6 + 40 * 2);
    let last = m.ty(m.func(m.main().unwrap()).body).unwrap();
    assert_eq!(last.to_string(), "Tensor[(1, 128, 1024), float32]");
}

#[test]
fn twelve_layer_gpt2_is_the_corpus_model() {
    let corpus = load_ok(&root().join("tests/models/gpt2.relay"));
    let generated = load_text_ok("gpt2_12", &collage::frontend::gen::gpt2(12));
    assert_eq!(op_multiset(&generated), op_multiset(&corpus));
    if let Err(e) = collage::ir::equal::modules_equal(&generated, &corpus) {
        panic!("gpt2(12) differs from tests/models/gpt2.relay: {e}");
    }
}

#[test]
fn gpt2_grows_linearly_with_depth() {
    let ops = |layers| op_count(&load_text_ok("gpt2", &collage::frontend::gen::gpt2(layers)));
    let (one, twelve, forty_eight) = (ops(1), ops(12), ops(48));
    let per_layer = (twelve - one) / 11;
    let fixed = one - per_layer;
    assert_eq!((per_layer, fixed), (71, 16));
    assert_eq!(forty_eight - fixed, 4 * (twelve - fixed));
    // The work scales the same way: the fixed part (embeddings, final layer norm) is small.
    let flops = |layers| module_flops(&load_text_ok("gpt2", &collage::frontend::gen::gpt2(layers)));
    let ratio = flops(48) / flops(12);
    assert!(
        (ratio - 4.0).abs() < 0.01,
        "48 layers do {ratio}x the work of 12"
    );
}

#[test]
fn bert_large_does_the_known_work() {
    // Per layer: four 1024x1024 and two 1024x4096 dense layers over 128 tokens, and two
    // 128x128x64 products for each of 16 heads; the rest is under 1%.
    let m = load_text_ok("bert_24_128", &collage::frontend::gen::bert_large(24, 128));
    let dense = 2.0 * 128.0 * 1024.0 * (4.0 * 1024.0 + 2.0 * 4096.0);
    let attention = 2.0 * 2.0 * 16.0 * 128.0 * 128.0 * 64.0;
    let want = 24.0 * (dense + attention);
    let got = module_flops(&m);
    assert!(
        (got - want).abs() < 0.01 * want,
        "{got:.4e} FLOPs, expected {want:.4e}"
    );
}

#[test]
fn generate_command_prints_or_writes_the_model() {
    let out = collage(["generate", "gpt2", "--layers", "2"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text, collage::frontend::gen::gpt2(2));

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let file = dir.join("bert.relay");
    let out = collage([
        "generate",
        "bert",
        "--layers",
        "3",
        "--seq",
        "16",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{:?}", out);
    assert!(out.stdout.is_empty());
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        collage::frontend::gen::bert_large(3, 16)
    );
    // Only the output file is left behind.
    let names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["bert.relay"]);
}

#[test]
fn generate_rejects_bad_sizes_with_exit_two() {
    for args in [
        &["generate", "gpt2", "--layers", "0"][..],
        &["generate", "gpt2", "--layers", "100000"],
        &["generate", "bert", "--seq", "0"],
        &["generate", "bert", "--layers", "x"],
        &["generate", "llama"],
    ] {
        let out = collage(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
    let out = collage(["generate", "gpt2", "-o", "no/such/dir/out.relay"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("error[E0902]: cannot write"), "{err}");
}
