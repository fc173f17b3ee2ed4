//! Every operator of the reference interpreter against known values computed with NumPy
//! (`tests/fixtures/exec/ops/*.json`, made by `tests/fixtures/exec/gen.py`; `resize.json` with
//! ONNX Runtime by `tests/fixtures/exec/gen_resize.py`). Each case is a small
//! module whose tensors are all inputs; it is compiled and run like any model, and each output
//! is checked element by element within the case's tolerance (exactly when it is 0).

use crate::support::{load_text_ok, root};
use collage::ir::DType;
use collage::runtime::exec::data::Weights;
use collage::runtime::exec::executor::{self, Options};
use collage::runtime::exec::tensor::Tensor;
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
    "resize",
];

pub fn cases() -> Vec<(String, Json)> {
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

pub fn tensor(v: &Json) -> Tensor {
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

pub fn check(name: &str, got: &Tensor, want: &Tensor, rtol: f64, atol: f64) {
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
    let supported = collage::runtime::exec::ops::supported();
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

/// Every operator of the registry has an interpreter kernel or a row in the table of operators
/// without one in `docs/execution.md`, with its reason; no operator has both.
#[test]
fn every_operator_has_a_kernel_or_a_documented_reason() {
    let doc = std::fs::read_to_string(root().join("docs/execution.md")).unwrap();
    let section = doc
        .split("### Operators without a kernel")
        .nth(1)
        .expect("docs/execution.md lacks `### Operators without a kernel`");
    let section = section.split("\n#").next().unwrap_or(section);
    let mut documented: Vec<&str> = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`');
        assert!(
            cells.get(2).is_some_and(|r| !r.is_empty()),
            "`{name}` has no reason in docs/execution.md"
        );
        documented.push(name);
    }
    for (_, def) in collage::ops::registry().iter() {
        let kernel = collage::runtime::exec::ops::implements(def.op);
        let listed = documented.contains(&def.name);
        assert!(
            kernel || listed,
            "`{}` has no interpreter kernel and no reason in docs/execution.md",
            def.name
        );
        assert!(
            !(kernel && listed),
            "`{}` has an interpreter kernel but is listed in docs/execution.md as having none",
            def.name
        );
    }
    for name in documented {
        assert!(
            collage::ops::registry().lookup(name).is_some(),
            "docs/execution.md lists `{name}`, which is not an operator"
        );
    }
}

mod props {
    //! Broadcasting and transposition on random shapes against a naive evaluation in the test:
    //! `transpose(where(c, subtract(x, y), y), perm)` where `c` and `y` broadcast to `x`'s shape.

    use super::*;
    use proptest::prelude::*;

    fn ty(dims: &[usize], dtype: &str) -> String {
        if dims.is_empty() {
            return dtype.to_string();
        }
        let d: Vec<String> = dims.iter().map(|x| x.to_string()).collect();
        format!("Tensor[({}), {dtype}]", d.join(", "))
    }

    /// The flat index of `coord` (of the output shape) in an operand of shape `dims`,
    /// broadcast at the trailing axes.
    fn index(dims: &[usize], coord: &[usize]) -> usize {
        let off = coord.len() - dims.len();
        dims.iter().enumerate().fold(0, |acc, (k, &d)| {
            acc * d + if d == 1 { 0 } else { coord[off + k] }
        })
    }

    fn shapes() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>)> {
        (0usize..=4)
            .prop_flat_map(|r| {
                (
                    prop::collection::vec(0usize..=3, r),
                    prop::collection::vec(any::<bool>(), r),
                    0..=r,
                    prop::collection::vec(any::<bool>(), r),
                    0..=r,
                    Just((0..r).collect::<Vec<usize>>()).prop_shuffle(),
                )
            })
            .prop_map(|(out, cmask, cr, ymask, yr, perm)| {
                let r = out.len();
                let sub = |mask: &[bool], k: usize| -> Vec<usize> {
                    (r - k..r)
                        .map(|i| if mask[i] { out[i] } else { 1 })
                        .collect()
                };
                (sub(&cmask, cr), sub(&ymask, yr), out.clone(), perm)
            })
    }

    proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 128,
            failure_persistence: None,
            ..Default::default()
        })]

        #[test]
        fn broadcasting_and_transposes_match_a_naive_evaluation((cd, yd, xd, perm) in shapes()) {
            let axes: Vec<String> = perm.iter().map(|p| p.to_string()).collect();
            let text = format!(
                "#[version = \"0.0.5\"]\ndef @main(%c: {}, %x: {}, %y: {}) {{\n  %0 = subtract(%x, %y);\n  %1 = where(%c, %0, %y);\n  transpose(%1, axes=[{}])\n}}\n",
                ty(&cd, "bool"), ty(&xd, "float32"), ty(&yd, "float32"), axes.join(", ")
            );
            let m = load_text_ok("prop.relay", &text);
            let n = |d: &[usize]| d.iter().product::<usize>();
            let c: Vec<u8> = (0..n(&cd)).map(|i| (i * 5 % 3 == 0) as u8).collect();
            let x: Vec<f32> = (0..n(&xd)).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
            let y: Vec<f32> = (0..n(&yd)).map(|i| ((i * 3) % 7) as f32 - 3.0).collect();
            let inputs = vec![
                Arc::new(Tensor::from_bytes(DType::BOOL, &cd, &c).unwrap()),
                Arc::new(Tensor::from_slice(DType::F32, &xd, &x).unwrap()),
                Arc::new(Tensor::from_slice(DType::F32, &yd, &y).unwrap()),
            ];
            let w = Weights::new(0);
            let mw = w.for_module(&m);
            let ex = executor::compile(&m, &mw, &Options::default()).unwrap();
            let out = ex.run(&inputs).unwrap();
            let got = out.value.as_tensor().unwrap().clone();
            // Naive: the untransposed result at every coordinate, then permuted.
            let r = xd.len();
            let tdims: Vec<usize> = perm.iter().map(|&p| xd[p]).collect();
            prop_assert_eq!(got.shape(), tdims.as_slice());
            let total = n(&xd);
            let mut coord = vec![0usize; r];
            for _ in 0..total {
                let v = if c[index(&cd, &coord)] != 0 {
                    x[index(&xd, &coord)] - y[index(&yd, &coord)]
                } else {
                    y[index(&yd, &coord)]
                };
                let tcoord: Vec<usize> = perm.iter().map(|&p| coord[p]).collect();
                let at = index(&tdims, &tcoord);
                prop_assert_eq!(got.as_slice::<f32>()[at], v);
                for k in (0..r).rev() {
                    coord[k] += 1;
                    if coord[k] < xd[k] {
                        break;
                    }
                    coord[k] = 0;
                }
            }
        }
    }

    /// The indices Python's `slice(begin, end, step).indices(n)` selects: an independent
    /// statement of the clamping rules `strided_slice` follows.
    fn python_slice(n: i64, begin: i64, end: i64, step: i64) -> Vec<i64> {
        let fix = |v: i64, lo: i64, hi: i64| {
            let v = if v < 0 { v + n } else { v };
            v.clamp(lo, hi)
        };
        let (b, e) = if step > 0 {
            (fix(begin, 0, n), fix(end, 0, n))
        } else {
            (fix(begin, -1, n - 1), fix(end, -1, n - 1))
        };
        let mut out = Vec::new();
        let mut i = b;
        while (step > 0 && i < e) || (step < 0 && i > e) {
            out.push(i);
            i += step;
        }
        out
    }

    fn slices() -> impl Strategy<Value = (Vec<usize>, Vec<(i64, i64, i64)>)> {
        prop::collection::vec(0usize..=5, 1..=3).prop_flat_map(|dims| {
            let r = dims.len();
            let step = prop_oneof![-3i64..=-1, 1i64..=3];
            (
                Just(dims),
                prop::collection::vec((-8i64..=8, -8i64..=8, step), r),
            )
        })
    }

    proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 256,
            failure_persistence: None,
            ..Default::default()
        })]

        /// `strided_slice` on random bounds and steps selects what Python's slicing selects;
        /// where the type relation rejects the bounds (wrong order), Python selects nothing.
        #[test]
        fn strided_slice_matches_python_slicing((dims, s) in slices()) {
            let list = |f: &dyn Fn(&(i64, i64, i64)) -> i64| {
                s.iter().map(|x| f(x).to_string()).collect::<Vec<_>>().join(", ")
            };
            let text = format!(
                "#[version = \"0.0.5\"]\ndef @main(%x: {}) {{\n  strided_slice(%x, begin=[{}], end=[{}], strides=[{}])\n}}\n",
                ty(&dims, "int32"), list(&|x| x.0), list(&|x| x.1), list(&|x| x.2)
            );
            let want: Vec<Vec<i64>> = dims
                .iter()
                .zip(&s)
                .map(|(&n, &(b, e, st))| python_slice(n as i64, b, e, st))
                .collect();
            let (_, _, m) = crate::support::load_text("slice.relay", &text);
            let Ok(m) = m else {
                prop_assert!(want.iter().any(Vec::is_empty), "rejected {:?} on {:?}", s, dims);
                return Ok(());
            };
            let n: usize = dims.iter().product();
            let x: Vec<i32> = (0..n as i32).collect();
            let inputs = vec![Arc::new(Tensor::from_slice(DType::I32, &dims, &x).unwrap())];
            let w = Weights::new(0);
            let mw = w.for_module(&m);
            let ex = executor::compile(&m, &mw, &Options::default()).unwrap();
            let out = ex.run(&inputs).unwrap();
            let got = out.value.as_tensor().unwrap().clone();
            let shape: Vec<usize> = want.iter().map(Vec::len).collect();
            prop_assert_eq!(got.shape(), shape.as_slice());
            // The expected elements: every combination of selected indices, row-major.
            let st = collage::runtime::exec::tensor::strides(&dims);
            let mut expect = vec![0i64];
            for (k, idx) in want.iter().enumerate() {
                let sk = st[k] as i64;
                expect = expect
                    .iter()
                    .flat_map(|&b| idx.iter().map(move |&i| b + i * sk))
                    .collect();
            }
            let got: Vec<i64> = got.as_slice::<i32>().iter().map(|&v| v as i64).collect();
            prop_assert_eq!(got, expect);
        }
    }
}
