//! Every operator of the reference interpreter against known values computed with NumPy
//! (`tests/fixtures/exec/ops/*.json`, made by `tests/fixtures/exec/gen.py`). Each case is a small
//! module whose tensors are all inputs; it is compiled and run like any model, and each output
//! is checked element by element within the case's tolerance (exactly when it is 0).

use crate::support::{load_text_ok, root};
use collage::exec::data::Weights;
use collage::exec::executor::{self, Options};
use collage::exec::tensor::Tensor;
use collage::ir::DType;
use serde_json::Value as Json;
use std::sync::Arc;

const FAMILIES: &[&str] = &[
    "tensor",
    "nn",
    "norm",
    "conv",
    "pool",
    "transform",
    "slice",
    "reduce",
];

fn cases() -> Vec<(String, Json)> {
    let mut out = Vec::new();
    for f in FAMILIES {
        let path = root().join(format!("tests/fixtures/exec/ops/{f}.json"));
        let text = std::fs::read_to_string(&path).unwrap();
        let v: Json = serde_json::from_str(&text).unwrap();
        for c in v["cases"].as_array().unwrap() {
            out.push((format!("{f}/{}", c["name"].as_str().unwrap()), c.clone()));
        }
    }
    out
}

fn number(v: &Json) -> f64 {
    match v {
        Json::String(s) => match s.as_str() {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => panic!("bad number {other}"),
        },
        _ => v.as_f64().unwrap(),
    }
}

fn tensor(v: &Json) -> Tensor {
    let dtype = DType::parse(v["dtype"].as_str().unwrap()).unwrap();
    let shape: Vec<usize> = v["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    let mut t = Tensor::zeros(dtype, &shape).unwrap();
    for (i, x) in v["data"].as_array().unwrap().iter().enumerate() {
        if dtype.is_float() {
            t.set_from_f64(i, number(x));
        } else {
            t.set_from_i64(i, x.as_i64().unwrap());
        }
    }
    t
}

/// Element `i` as f64 for comparison.
fn at(t: &Tensor, i: usize) -> f64 {
    t.get_f64(i)
}

fn check(name: &str, got: &Tensor, want: &Tensor, rtol: f64, atol: f64) {
    assert_eq!(got.dtype(), want.dtype(), "{name}: dtype");
    assert_eq!(got.shape(), want.shape(), "{name}: shape");
    for i in 0..want.numel() {
        let (g, w) = (at(got, i), at(want, i));
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() || (rtol == 0.0 && atol == 0.0) {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        assert!(
            ok,
            "{name}: element {i} is {g}, expected {w} (rtol {rtol}, atol {atol})"
        );
    }
}

#[test]
fn operators_match_numpy() {
    let cases = cases();
    assert!(cases.len() > 150, "only {} cases", cases.len());
    let weights = Weights::new(0);
    for (name, c) in &cases {
        let m = load_text_ok(name, c["model"].as_str().unwrap());
        let mw = weights.for_module(&m);
        let opts = Options {
            threads: 2,
            ..Options::default()
        };
        let x = executor::compile(&m, &mw, &opts)
            .unwrap_or_else(|d| panic!("{name}: does not compile: {d:?}"));
        let inputs: Vec<Arc<Tensor>> = c["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| Arc::new(tensor(i)))
            .collect();
        let out = x
            .run(&inputs)
            .unwrap_or_else(|d| panic!("{name}: fails: {d:?}"));
        let got: Vec<&Arc<Tensor>> = out.value.flatten();
        let want = c["outputs"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{name}: number of outputs");
        let (rtol, atol) = (c["rtol"].as_f64().unwrap(), c["atol"].as_f64().unwrap());
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            check(&format!("{name} output {k}"), g, &tensor(w), rtol, atol);
        }
    }
}

/// Every operator the interpreter implements has at least one fixture case, and every corpus
/// operator is implemented.
#[test]
fn every_supported_operator_has_cases() {
    let cases = cases();
    let models: Vec<&str> = cases
        .iter()
        .map(|(_, c)| c["model"].as_str().unwrap())
        .collect();
    let supported = collage::exec::ops::supported();
    // `op(` not preceded by a name character (so `add(` is not found in `nn.bias_add(`).
    let calls = |m: &str, op: &str| {
        let call = format!("{op}(");
        m.match_indices(&call).any(|(i, _)| {
            m[..i]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '.'))
        })
    };
    for op in &supported {
        assert!(
            models.iter().any(|m| calls(m, op)),
            "no fixture case calls `{op}`"
        );
    }
    for (_, m) in crate::support::corpus() {
        for e in &m.exprs {
            if let collage::ir::Expr::Call {
                callee: collage::ir::Callee::Op(op),
                ..
            } = e
            {
                let name = collage::ops::op(*op).name;
                assert!(
                    supported.contains(&name),
                    "corpus operator `{name}` is not implemented"
                );
            }
        }
    }
}
