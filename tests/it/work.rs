//! The per-operator work model (`collage::analysis::work`) over the model corpus: totals against known
//! model sizes, and no corpus operator left to the fallback formula.

use crate::support::corpus;
use collage::analysis::work::{call_flops, module_flops, op_work, OpWork};
use collage::ir::{Callee, Expr, ExprId, Module};
use std::collections::BTreeSet;

/// Every operator call of a module: (expression, operator name).
fn op_calls(m: &Module) -> Vec<(ExprId, &'static str)> {
    (0..m.exprs.len())
        .map(|i| ExprId(i as u32))
        .filter_map(|e| match m.expr(e) {
            Expr::Call {
                callee: Callee::Op(o),
                ..
            } => Some((e, collage::ops::op(*o).name)),
            _ => None,
        })
        .collect()
}

fn assert_near(name: &str, got: f64, want: f64, tolerance: f64) {
    assert!(
        (got - want).abs() <= tolerance * want,
        "{name}: {got:.4e} FLOPs, expected {want:.4e} within {:.0}%",
        tolerance * 100.0
    );
}

#[test]
fn corpus_totals_match_known_model_sizes() {
    let totals: std::collections::BTreeMap<String, f64> = corpus()
        .into_iter()
        .map(|(name, m)| (name, module_flops(&m)))
        .collect();
    assert_eq!(totals.len(), 13);
    // ResNet-50 at 224x224: about 4.1 G multiply-adds.
    assert_near("resnet50", totals["resnet50"], 8.2e9, 0.15);
    // ResNeXt-50 32x4d without its stem (the model starts at 64x56x56): about 4.1 G
    // multiply-adds.
    assert_near("resnext50_32x4d", totals["resnext50_32x4d"], 8.2e9, 0.15);
    // GPT-2 on 50 sequences of 32 tokens: per layer, dense layers of 768x(2304 + 768 + 3072 +
    // 3072) over 1600 tokens and two 32x32x64 products for each of 600 heads.
    let gpt2 = 12.0 * (2.0 * 1600.0 * 768.0 * 9216.0 + 2.0 * 2.0 * 600.0 * 32.0 * 32.0 * 64.0);
    assert_near("gpt2", totals["gpt2"], gpt2, 0.02);
    // The MNIST network: two 5x5 convolutions (8 and 16 channels, same padding) and a dense
    // layer of 256x10.
    let mnist = 2.0 * (8.0 * 28.0 * 28.0 * 25.0 + 16.0 * 14.0 * 14.0 * 8.0 * 25.0 + 2560.0);
    assert_near("mnist", totals["mnist"], mnist, 0.05);
    // TVM's test MobileNet-V2 variant (its 64-channel stage runs at 28x28): 429 M
    // multiply-adds in its convolutions.
    assert_near("mobilenet", totals["mobilenet"], 0.9e9, 0.1);
    // One batch norm over 1x32x112x112: subtract, scale, gamma, beta per element.
    assert_eq!(totals["batch_norm_extract"], 4.0 * 32.0 * 112.0 * 112.0);
    // The float16 models do the same work as their float32 twins.
    for (name, &flops) in &totals {
        if let Some(base) = name.strip_suffix("_16") {
            assert_eq!(flops, totals[base], "{name}");
        }
    }
    assert_eq!(totals["gpt2_extract_16"], totals["gpt2_extract"]);
}

#[test]
fn no_corpus_operator_falls_back() {
    let mut seen = BTreeSet::new();
    let mut movement = BTreeSet::new();
    for (name, m) in corpus() {
        for (call, op) in op_calls(&m) {
            seen.insert(op);
            let work = op_work(op);
            assert_ne!(work, OpWork::Unknown, "{name}: `{op}` has no formula");
            let flops = call_flops(&m, call);
            if work == OpWork::Movement {
                movement.insert(op);
                assert_eq!(flops, 0.0, "{name}: `{op}` moves data only");
            } else {
                assert!(flops > 0.0, "{name}: `{op}` computes but counts 0 FLOPs");
            }
        }
    }
    // The corpus's pure data-movement operators, each deliberately 0 FLOPs.
    let expected: BTreeSet<&str> = [
        "concatenate",
        "expand_dims",
        "nn.pad",
        "reshape",
        "split",
        "take",
        "transpose",
    ]
    .into_iter()
    .collect();
    assert_eq!(movement, expected);
    assert_eq!(seen.len(), 25, "operators in the corpus: {seen:?}");
}
