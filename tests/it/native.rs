//! Native code generation (`src/runtime/backend/native/`): generated kernels against NumPy's values
//! and the reference interpreter, the kernel cache, and the fallback to the interpreter.

use crate::exec_ops::{cases, tensor};
use crate::support::{cache_dir, collage_in, load_text_ok, root};
use collage::ir::{DType, ExprId, Module};
use collage::runtime::backend::native::grouping::FuseGrouping;
use collage::runtime::backend::native::{Config, Native};
use collage::runtime::exec::data::{ModuleWeights, Weights};
use collage::runtime::exec::executor::{self, Grouping, Options};
use collage::runtime::exec::kernel::{Backend, Backends, ConstantSource, Unit};
use collage::runtime::exec::program::{group_units, Region};
use collage::runtime::exec::tensor::Tensor;
use serde_json::Value as Json;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

/// A native backend on `threads` threads caching in the test process's cache directory.
fn native(threads: usize) -> Arc<Native> {
    Arc::new(Native::new(Config {
        threads,
        cache_dir: Some(cache_dir().to_path_buf()),
        ..Config::default()
    }))
}

/// Executor options that run native units on `n`, grouped as `collage run` groups them.
fn native_options(n: &Arc<Native>, threads: usize) -> Options {
    Options {
        threads,
        backends: Backends {
            list: vec![n.clone() as Arc<dyn Backend>],
        },
        grouping: Some(Box::new(FuseGrouping::default())),
    }
}

/// The tolerance of generated code against exact values: the case's own, widened to what
/// vectorised sums, fused multiply-adds, vector math and `float32` intermediates allow
/// (docs/native.md, "Numerics").
fn widened(dtype: DType, rtol: f64, atol: f64) -> (f64, f64) {
    if !dtype.is_float() {
        return (rtol, atol);
    }
    let t = if dtype == DType::F32 || dtype == DType::F64 {
        1e-4
    } else {
        5e-2
    };
    (rtol.max(t), atol.max(t))
}

/// The first element where `got` and `want` disagree, described.
fn mismatch(got: &Tensor, want: &Tensor, rtol: f64, atol: f64) -> Option<String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Some(format!("type {} where {} is expected", got.ty(), want.ty()));
    }
    for i in 0..want.numel() {
        let (g, w) = (got.get_f64(i), want.get_f64(i));
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        if !ok {
            return Some(format!(
                "element {i} is {g}, expected {w} (rtol {rtol}, atol {atol})"
            ));
        }
    }
    None
}

/// The constants of several modules, each from its own module's weights.
struct ByModule<'a>(Vec<(&'a Module, ModuleWeights<'a>)>);

impl ConstantSource for ByModule<'_> {
    fn constant(&self, m: &Module, e: ExprId) -> Result<Arc<Tensor>, String> {
        let (_, w) = self
            .0
            .iter()
            .find(|(k, _)| std::ptr::eq(*k, m))
            .ok_or("a module without weights")?;
        w.constant(m, e)
    }
}

/// Operators the reference interpreter implements that native code generation does not: every
/// case calling one falls back, with a warning naming it (docs/native.md, "What is not
/// compiled").
const NOT_NATIVE: &[&str] = &[
    "sin",
    "cos",
    "atan",
    "full",
    "zeros",
    "ones",
    "zeros_like",
    "ones_like",
    "cast_like",
    "nn.prelu",
    "nn.batch_flatten",
    "nn.matmul",
    "nn.instance_norm",
    "nn.conv2d_transpose",
    "nn.conv3d",
    "nn.max_pool3d",
    "nn.avg_pool3d",
    "tile",
    "stack",
    "prod",
    "argmax",
    "argmin",
    "image.resize2d",
];

/// Other cases native code generation leaves to the reference interpreter, with the reason
/// the warning gives.
const FALLBACKS: &[(&str, &str)] = &[
    (
        "reduce/sum-int32",
        "`sum` on `int32` tensors is not supported by native code generation",
    ),
    (
        "reduce/max-int8",
        "`max` on `int8` tensors is not supported by native code generation",
    ),
];

/// The reason a case is expected to fall back, if it is.
fn expected_fallback(name: &str, model: &str) -> Option<String> {
    if let Some((_, why)) = FALLBACKS.iter().find(|(n, _)| *n == name) {
        return Some(why.to_string());
    }
    // `op(` not preceded by a name character (so `add(` is not found in `nn.bias_add(`).
    let calls = |op: &str| {
        let call = format!("{op}(");
        model.match_indices(&call).any(|(i, _)| {
            model[..i]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '.'))
        })
    };
    NOT_NATIVE
        .iter()
        .find(|op| calls(op))
        .map(|op| format!("native code generation does not implement `{op}`"))
}

/// Every operator case of the reference interpreter (`tests/fixtures/exec/ops/`) compiled
/// natively, against NumPy's values. All cases' kernels are generated first and compiled
/// together (a few compiler runs instead of one per case); then each case is compiled and run
/// as `collage run` does. The cases that fall back are exactly those calling [`NOT_NATIVE`]
/// operators and [`FALLBACKS`].
#[test]
fn operator_cases_run_as_generated_code() {
    let cases = cases();
    let modules: Vec<Module> = cases
        .iter()
        .map(|(name, c)| load_text_ok(name, c["model"].as_str().unwrap()))
        .collect();
    let weights = Weights::new(0);
    let n = native(2);
    let grouping = FuseGrouping::default();
    let groups: Vec<Vec<collage::runtime::exec::kernel::Group>> = modules
        .iter()
        .map(|m| {
            let main = m.main().unwrap();
            group_units(m, &Region::function(m, main), grouping.groups(m, main)).unwrap()
        })
        .collect();
    let mut units = Vec::new();
    for (m, gs) in modules.iter().zip(&groups) {
        units.extend(gs.iter().map(|group| Unit::Group { module: m, group }));
    }
    let consts = ByModule(modules.iter().map(|m| (m, weights.for_module(m))).collect());
    n.precompile(&units, &consts);
    let runs_before = n.stats().compiler_runs;
    assert!(runs_before <= 8, "{runs_before} compiler runs");

    let mut failures = Vec::new();
    let mut fallbacks: Vec<(String, String)> = Vec::new();
    let mut native_kernels = 0;
    for ((name, c), m) in cases.iter().zip(&modules) {
        let mw = weights.for_module(m);
        let x = match executor::compile(m, &mw, &native_options(&n, 2)) {
            Ok(x) => x,
            Err(d) => {
                failures.push(format!("{name}: does not compile: {d:?}"));
                continue;
            }
        };
        for w in &x.warnings {
            fallbacks.push((name.clone(), w.message.clone()));
        }
        native_kernels += x.kernels().iter().filter(|k| k.backend == "native").count();
        let inputs: Vec<Arc<Tensor>> = c["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| Arc::new(tensor(i)))
            .collect();
        let out = match x.run(&inputs) {
            Ok(o) => o,
            Err(d) => {
                failures.push(format!("{name}: fails: {d:?}"));
                continue;
            }
        };
        let got = out.value.flatten();
        let want = c["outputs"].as_array().unwrap();
        if got.len() != want.len() {
            failures.push(format!("{name}: {} outputs", got.len()));
            continue;
        }
        let (rtol, atol) = (c["rtol"].as_f64().unwrap(), c["atol"].as_f64().unwrap());
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            let w = tensor(w);
            let (r, a) = widened(w.dtype(), rtol, atol);
            if let Some(e) = mismatch(g, &w, r, a) {
                failures.push(format!("{name} output {k}: {e}"));
            }
        }
    }
    // Running compiled nothing more: every kernel came from the batch above.
    assert_eq!(n.stats().compiler_runs, runs_before);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let expected: Vec<(String, String)> = cases
        .iter()
        .filter_map(|(name, c)| {
            expected_fallback(name, c["model"].as_str().unwrap()).map(|why| (name.clone(), why))
        })
        .collect();
    let got_names: Vec<&String> = fallbacks.iter().map(|(n, _)| n).collect();
    let want_names: Vec<&String> = expected.iter().map(|(n, _)| n).collect();
    assert_eq!(got_names, want_names, "the cases that fall back changed");
    for ((name, got), (_, why)) in fallbacks.iter().zip(&expected) {
        assert!(
            got.contains(why.as_str()),
            "{name} falls back with `{got}`, not `{why}`"
        );
    }
    assert!(native_kernels > 150, "{native_kernels} native kernels");
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &std::process::Output) -> Json {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            stderr(o)
        )
    })
}

/// Every corpus model, partitioned with `--target tvm_cpu` alone (its operators stay inline in
/// `@main`, grouped by FuseOps when run), runs entirely through generated code and matches the
/// reference interpreter (`--check-reference`: rtol = atol = 1e-4 for `float32`, 5e-2 for
/// `float16`); the original model, grouped the same way, gives the same outputs.
#[test]
fn corpus_models_run_as_generated_code_and_match_the_interpreter() {
    let dir = tempfile::tempdir().unwrap();
    let models = crate::support::corpus_names();
    assert_eq!(models.len(), 13);
    for name in &models {
        let model = root().join(format!("tests/models/{name}.relay"));
        let model = model.to_str().unwrap();
        let part = format!("{name}-tvm_cpu.relay");
        let o = collage_in(
            dir.path(),
            ["partition", model, "--target", "tvm_cpu", "-o", &part],
        );
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let o = collage_in(
            dir.path(),
            [
                "run",
                &part,
                "--check-reference",
                "--compare-with",
                model,
                "--threads",
                "2",
                "--format",
                "json",
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        assert!(!stderr(&o).contains("W2310"), "{name}: {}", stderr(&o));
        let v = json(&o);
        let total = v["kernels"]["total"].as_u64().unwrap();
        assert!(total > 0, "{name}");
        assert_eq!(
            v["kernels"]["by_backend"],
            serde_json::json!({ "native": total }),
            "{name}"
        );
        assert_eq!(v["native"]["fallbacks"], 0, "{name}");
        let comparisons = v["comparisons"].as_array().unwrap();
        assert_eq!(comparisons.len(), 2, "{name}");
        for c in comparisons {
            assert_eq!(c["within_tolerance"], true, "{name}: {c}");
        }
        assert_eq!(comparisons[1]["backend"], "reference", "{name}");
        for o in comparisons[1]["outputs"].as_array().unwrap() {
            assert!(
                o["max_abs_diff"].as_f64().unwrap().is_finite(),
                "{name}: {o}"
            );
        }
    }
}

/// `collage run` in `dir` with the cache in `cache` and the environment `env`.
fn run_with(dir: &Path, cache: &Path, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collage"));
    cmd.arg("run")
        .args(args)
        .arg("--cache-dir")
        .arg(cache)
        .current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the binary runs")
}

/// A second run of the same model compiles nothing: every kernel comes from the cache on disk.
#[test]
fn a_second_run_finds_every_kernel_in_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let model = root().join("tests/models/mnist.relay");
    let args = [
        model.to_str().unwrap(),
        "--format",
        "json",
        "--threads",
        "2",
    ];
    let first = run_with(dir.path(), &cache, &[], &args);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let a = json(&first);
    let distinct = a["native"]["distinct"].as_u64().unwrap();
    assert!(distinct >= 5, "{a}");
    assert_eq!(a["native"]["compiled"].as_u64(), Some(distinct));
    assert_eq!(a["native"]["cached"], 0);
    assert!(a["native"]["compiler_runs"].as_u64().unwrap() >= 1);
    assert!(cache.join("kernels/entries").read_dir().unwrap().count() >= distinct as usize);

    let second = run_with(dir.path(), &cache, &[], &args);
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    let b = json(&second);
    assert_eq!(b["native"]["compiled"], 0, "{b}");
    assert_eq!(b["native"]["compiler_runs"], 0, "{b}");
    assert_eq!(b["native"]["cached"].as_u64(), Some(distinct));
    assert_eq!(b["native"]["fallbacks"], 0);
    assert_eq!(a["outputs"], b["outputs"]);

    // `COLLAGE_CACHE_DIR` names the same directory when `--cache-dir` is not given.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collage"));
    let third = cmd
        .arg("run")
        .args(args)
        .env("COLLAGE_CACHE_DIR", &cache)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(third.status.code(), Some(0), "{}", stderr(&third));
    assert_eq!(json(&third)["native"]["compiled"], 0);
}

/// A compiler that fails (`CC=false`) or cannot be started makes every unit fall back to the
/// reference interpreter with W2310 naming the unit and the reason; the run succeeds with the
/// interpreter's outputs.
#[test]
fn a_broken_compiler_falls_back_to_the_interpreter() {
    let dir = tempfile::tempdir().unwrap();
    let model = root().join("tests/models/mnist.relay");
    let model = model.to_str().unwrap();
    let args = [
        model,
        "--no-simplify",
        "--format",
        "json",
        "--threads",
        "2",
        "--check-reference",
    ];
    for (cc, reason) in [
        ("false", "the C compiler `false` failed"),
        (
            "/nonexistent/cc",
            "the C compiler `/nonexistent/cc` cannot be started",
        ),
    ] {
        let cache = dir.path().join(format!("cache-{}", cc.len()));
        let o = run_with(dir.path(), &cache, &[("CC", cc)], &args);
        assert_eq!(o.status.code(), Some(0), "{cc}: {}", stderr(&o));
        let err = stderr(&o);
        let v = json(&o);
        let total = v["kernels"]["total"].as_u64().unwrap();
        assert_eq!(
            v["kernels"]["by_backend"],
            serde_json::json!({ "reference": total })
        );
        assert_eq!(v["native"]["fallbacks"].as_u64(), Some(total));
        assert_eq!(err.matches("warning[W2310]").count() as u64, total, "{err}");
        assert!(
            err.contains(
                "backend `native` cannot run a group of 3 operators (nn.conv2d, add, nn.relu): "
            ),
            "{err}"
        );
        assert!(err.contains(reason), "{cc}: {err}");
        assert!(
            err.contains("mnist.relay:"),
            "the warning points at the unit: {err}"
        );
        let c = &v["comparisons"][0];
        assert_eq!(c["backend"], "reference");
        assert_eq!(c["outputs"][0]["identical"], true, "{c}");
    }
}

/// A unit the generator does not compile (a `Primitive=1` function with an `if`) runs on the
/// interpreter with W2310 naming it and the reason; the rest of the model is still generated
/// code.
#[test]
fn an_unsupported_unit_falls_back_alone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("m.relay"),
        "#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(4, 8), float32], %c: bool) {\n  %0 = fn (%a: Tensor[(4, 8), float32], %b: bool, Primitive=1) {\n    if (%b) { exp(%a) } else { negative(%a) }\n  };\n  %1 = %0(%x, %c);\n  nn.softmax(%1)\n}\n",
    )
    .unwrap();
    let o = run_with(
        dir.path(),
        cache_dir(),
        &[],
        &["m.relay", "--format", "json", "--check-reference"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.matches("warning[W2310]").count(), 1, "{err}");
    assert!(
        err.contains("backend `native` cannot run a function literal: native code generation does not compile `if`; falling back"),
        "{err}"
    );
    assert!(err.contains("m.relay:4:5"), "{err}");
    let v = json(&o);
    assert_eq!(
        v["kernels"]["by_backend"],
        serde_json::json!({ "native": 1, "reference": 1 })
    );
    assert_eq!(v["native"]["fallbacks"], 1);
    assert_eq!(v["comparisons"][0]["within_tolerance"], true);
}

mod props {
    //! Random small graphs of elementwise, broadcasting, injective and reduction operators on
    //! random shapes: generated code against the reference interpreter (rtol = atol = 1e-4).

    use super::*;
    use proptest::prelude::*;

    /// A value of the program being built: its name and shape.
    #[derive(Clone, Debug)]
    struct Val {
        name: String,
        dims: Vec<usize>,
    }

    fn ty(dims: &[usize]) -> String {
        let d: Vec<String> = dims.iter().map(|x| x.to_string()).collect();
        format!("Tensor[({}), float32]", d.join(", "))
    }

    fn list(v: &[usize]) -> String {
        let d: Vec<String> = v.iter().map(|x| x.to_string()).collect();
        format!("[{}]", d.join(", "))
    }

    /// The broadcast of two shapes, if they broadcast.
    fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
        let r = a.len().max(b.len());
        let mut out = vec![0; r];
        for (i, o) in out.iter_mut().enumerate() {
            let x = if i + a.len() >= r {
                a[i + a.len() - r]
            } else {
                1
            };
            let y = if i + b.len() >= r {
                b[i + b.len() - r]
            } else {
                1
            };
            *o = match (x, y) {
                _ if x == y => x,
                (1, _) => y,
                (_, 1) => x,
                _ => return None,
            };
        }
        Some(out)
    }

    /// Builds a program from random choices: parameters broadcastable to `base`, then one step
    /// per choice, each reading earlier values (choices index into them modulo their count).
    fn program(base: &[usize], masks: &[(usize, u32)], steps: &[(u8, u32, u32)]) -> String {
        let mut vals: Vec<Val> = Vec::new();
        let mut params = Vec::new();
        for (i, &(drop, mask)) in masks.iter().enumerate() {
            let keep = base.len() - drop.min(base.len() - 1);
            let dims: Vec<usize> = base[base.len() - keep..]
                .iter()
                .enumerate()
                .map(|(k, &d)| if mask >> k & 1 == 1 { 1 } else { d })
                .collect();
            let name = format!("%p{i}");
            params.push(format!("{name}: {}", ty(&dims)));
            vals.push(Val { name, dims });
        }
        let mut body = Vec::new();
        for (k, &(op, a, b)) in steps.iter().enumerate() {
            let x = vals[a as usize % vals.len()].clone();
            let y = vals[b as usize % vals.len()].clone();
            let r = x.dims.len();
            let (expr, dims) = match op % 12 {
                0 => {
                    let f = ["tanh", "sigmoid", "negative", "abs", "nn.relu"][b as usize % 5];
                    (format!("{f}({})", x.name), x.dims.clone())
                }
                1 => (
                    format!("exp(clip({}, a_min=-4f, a_max=4f))", x.name),
                    x.dims.clone(),
                ),
                2 => (format!("sqrt(abs({}))", x.name), x.dims.clone()),
                3..=5 => match broadcast(&x.dims, &y.dims) {
                    Some(d) => {
                        let f = ["add", "subtract", "multiply", "maximum", "minimum"]
                            [(a ^ b) as usize % 5];
                        (format!("{f}({}, {})", x.name, y.name), d)
                    }
                    None => (format!("negative({})", x.name), x.dims.clone()),
                },
                6 => match broadcast(&x.dims, &y.dims) {
                    Some(d) => (format!("divide({}, add(abs({}), 1f))", x.name, y.name), d),
                    None => (format!("abs({})", x.name), x.dims.clone()),
                },
                7 => {
                    // A rotation of the axes.
                    let s = b as usize % r.max(1);
                    let perm: Vec<usize> = (0..r).map(|i| (i + s) % r).collect();
                    let dims = perm.iter().map(|&p| x.dims[p]).collect();
                    (format!("transpose({}, axes={})", x.name, list(&perm)), dims)
                }
                8 => {
                    let n: usize = x.dims.iter().product();
                    let dims = if b % 2 == 0 || r == 1 {
                        vec![n]
                    } else {
                        let mut d = x.dims.clone();
                        d.reverse();
                        d
                    };
                    (
                        format!("reshape({}, newshape={})", x.name, list(&dims)),
                        dims,
                    )
                }
                9 => {
                    let f = ["sum", "mean", "max", "min"][a as usize % 4];
                    let axis = b as usize % r;
                    let keep = r == 1 || b % 3 == 0;
                    let dims: Vec<usize> = if keep {
                        x.dims
                            .iter()
                            .enumerate()
                            .map(|(i, &d)| if i == axis { 1 } else { d })
                            .collect()
                    } else {
                        x.dims
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| *i != axis)
                            .map(|(_, &d)| d)
                            .collect()
                    };
                    let kd = if keep { "True" } else { "False" };
                    (
                        format!("{f}({}, axis=[{axis}], keepdims={kd})", x.name),
                        dims,
                    )
                }
                10 => (format!("nn.softmax({}, axis=-1)", x.name), x.dims.clone()),
                _ => {
                    if x.dims == y.dims {
                        let axis = b as usize % r;
                        let mut dims = x.dims.clone();
                        dims[axis] *= 2;
                        (
                            format!("concatenate(({}, {}), axis={axis})", x.name, y.name),
                            dims,
                        )
                    } else {
                        (format!("expand_dims({}, axis=0)", x.name), {
                            let mut d = vec![1];
                            d.extend(&x.dims);
                            d
                        })
                    }
                }
            };
            let name = format!("%{k}");
            body.push(format!("  {name} = {expr};"));
            vals.push(Val { name, dims });
        }
        // The last two values are the outputs.
        let outs: Vec<String> = vals.iter().rev().take(2).map(|v| v.name.clone()).collect();
        format!(
            "#[version = \"0.0.5\"]\ndef @main({}) {{\n{}\n  ({})\n}}\n",
            params.join(", "),
            body.join("\n"),
            outs.join(", ")
        )
    }

    fn cases() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(1usize..=5, 1..=3),
            prop::collection::vec((0usize..3, any::<u32>()), 1..=3),
            prop::collection::vec((any::<u8>(), any::<u32>(), any::<u32>()), 2..=7),
        )
            .prop_map(|(base, masks, steps)| program(&base, &masks, &steps))
    }

    proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 24,
            failure_persistence: None,
            ..Default::default()
        })]

        #[test]
        fn random_graphs_match_the_interpreter(text in cases()) {
            let m = load_text_ok("prop.relay", &text);
            let w = Weights::new(7);
            let mw = w.for_module(&m);
            let n = native(2);
            let x = executor::compile(&m, &mw, &native_options(&n, 2)).unwrap();
            prop_assert!(x.warnings.is_empty(), "{text}\n{:?}", x.warnings);
            let r = executor::compile(&m, &mw, &Options { threads: 1, ..Options::default() }).unwrap();
            let inputs: Vec<Arc<Tensor>> = x
                .inputs
                .iter()
                .map(|i| Arc::new(mw.random_input(&i.name, &i.shape).unwrap()))
                .collect();
            let got = x.run(&inputs).unwrap();
            let want = r.run(&inputs).unwrap();
            let (g, w) = (got.value.flatten(), want.value.flatten());
            prop_assert_eq!(g.len(), w.len());
            for (a, b) in g.iter().zip(&w) {
                let e = mismatch(a, b, 1e-4, 1e-4);
                prop_assert!(e.is_none(), "{}\n{}", text, e.unwrap_or_default());
            }
        }
    }
}

/// The inputs of `tests/fixtures/native/numerics.relay`, written as `.npy` files into `dir`:
/// `a` and `b` pair exact quotients (8 / 2), halves, ±0 divisors, values whose quotients or
/// products are denormal, overflow or beyond the integer ranges; `t` spans [-100, 100] and
/// starts with ±0 and ±denormals, for the transcendental functions.
fn numerics_inputs(dir: &Path) -> Vec<String> {
    let mut pairs: Vec<(f32, f32)> = vec![
        (8.0, 2.0),
        (10.0, 5.0),
        (7.0, 7.0),
        (1.0, 0.0),
        (-1.0, 0.0),
        (0.0, 0.0),
        (1.0, -0.0),
        (-3.0, -0.0),
        (1e-40, 1.0),
        (1e-38, 1e10),
        (3.0, 1e-40),
        (2.5, 1.0),
        (-2.5, 1.0),
        (0.5, 1.0),
        (1.5, 1.0),
        (-0.5, 1.0),
        (3e9, 1.0),
        (-3e9, 1.0),
        (1e19, 1.0),
        (1.0, 3.0),
        (2.0, 3.0),
        (1e30, 1e-30),
        (-1e30, 1e-30),
        (1e-20, 1e-20),
        (-1e-20, 1e-20),
        (f32::from_bits(1), 0.5),
        (-0.0, 2.0),
        (0.0, -5.0),
        (9.0, 3.0),
        (49.0, 7.0),
        (0.3, 0.1),
        (6.0, 0.2),
    ];
    while pairs.len() < 75 {
        let i = pairs.len();
        pairs.push((i as f32 * 0.7 - 20.0, (i % 7) as f32 - 3.0));
    }
    let mut t: Vec<f32> = (0..4099)
        .map(|i| -100.0 + 200.0 * i as f32 / 4098.0)
        .collect();
    // Zeros, subnormals, overflow, and arguments whose exponential is +0 or subnormal (softmax
    // over masked attention scores subtracts the row's maximum from -3.4e38).
    t[..11].copy_from_slice(&[
        0.0, -0.0, 1e-40, -1e-40, 88.8, -104.0, -103.9, -110.0, -1e4, -3.4e38, -1e30,
    ]);
    let a: Vec<f32> = pairs.iter().map(|p| p.0).collect();
    let b: Vec<f32> = pairs.iter().map(|p| p.1).collect();
    let mut args = Vec::new();
    for (name, v) in [("a", a), ("b", b), ("t", t)] {
        let x = Tensor::from_slice(DType::F32, &[v.len()], &v).unwrap();
        let file = dir.join(format!("{name}.npy"));
        std::fs::write(&file, collage::runtime::exec::npy::write(&x).unwrap()).unwrap();
        args.push("--input".to_string());
        args.push(format!("{name}={}", file.display()));
    }
    args
}

/// The outputs of `numerics.relay` that are single IEEE operations (`/`, `floor`, `ceil`,
/// `round`, casts, comparisons, `maximum`/`minimum` with infinities and NaN, denormal inputs
/// and outputs, `clip` with a -0 input on its lower bound, and max/min reductions over NaN and
/// over ties of -0 and +0, whose first zero decides the sign): these must be bit-identical to
/// the interpreter's. The rest are
/// transcendental (`exp`, `erf`, `tanh`, `sigmoid`, `log`).
const IEEE_OUTPUTS: usize = 25;

/// The documented bound of transcendental functions against the interpreter: 4 ulps
/// (docs/native.md, "Numerics"), checked as a relative difference of at most 4 · 2⁻²³.
const TRANSCENDENTAL_RTOL: f64 = 4.0 / 8388608.0;

/// The numerics model runs through generated code and the interpreter in one process
/// (`--check-reference`), twice with the same cache (compiled, then loaded from the cache by the
/// main thread): the IEEE operations are bit for bit the interpreter's both times, the
/// transcendental functions within their bound. `COLLAGE_NATIVE_FLAGS=fast-math` has kernels
/// of its own in the same cache; an unknown value makes every unit fall back (W2310).
#[test]
fn ieee_operations_match_the_interpreter_bit_for_bit_twice_with_one_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let model = root().join("tests/fixtures/native/numerics.relay");
    let rtol = TRANSCENDENTAL_RTOL.to_string();
    let mut args: Vec<String> = vec![
        model.to_str().unwrap().to_string(),
        "--format".into(),
        "json".into(),
        "--threads".into(),
        "2".into(),
        "--check-reference".into(),
        "--rtol".into(),
        rtol,
        "--atol".into(),
        "0".into(),
    ];
    args.extend(numerics_inputs(dir.path()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for round in 0..2 {
        let o = run_with(dir.path(), &cache, &[], &args);
        let j = json(&o);
        assert_eq!(o.status.code(), Some(0), "run {round}: {}\n{j}", stderr(&o));
        assert_eq!(j["native"]["fallbacks"], 0, "{j}");
        if round == 0 {
            assert_eq!(j["native"]["cached"], 0, "{j}");
        } else {
            assert_eq!(j["native"]["compiled"], 0, "{j}");
        }
        let outs = j["comparisons"][0]["outputs"].as_array().unwrap();
        assert_eq!(outs.len(), IEEE_OUTPUTS + 5);
        for (i, c) in outs.iter().enumerate() {
            if i < IEEE_OUTPUTS {
                assert_eq!(c["identical"], true, "run {round}, output{i}: {c}");
            } else {
                let rel = c["max_rel_diff"].as_f64().unwrap();
                assert!(rel <= TRANSCENDENTAL_RTOL, "run {round}, output{i}: {c}");
            }
        }
    }

    // The other flag set: its own kernels (none from the IEEE set's cache entries).
    let fast = run_with(
        dir.path(),
        &cache,
        &[("COLLAGE_NATIVE_FLAGS", "fast-math")],
        &args,
    );
    let j = json(&fast);
    assert_eq!(j["native"]["cached"], 0, "{j}");
    assert!(j["native"]["version"]
        .as_str()
        .unwrap()
        .contains("-ffast-math"));
    let bad = run_with(
        dir.path(),
        &cache,
        &[("COLLAGE_NATIVE_FLAGS", "fastest")],
        &args,
    );
    assert_eq!(bad.status.code(), Some(0), "{}", stderr(&bad));
    let e = stderr(&bad);
    assert!(
        e.contains("W2310") && e.contains("COLLAGE_NATIVE_FLAGS=fastest"),
        "{e}"
    );
}

/// The thread's MXCSR (rounding mode, flush-to-zero, denormals-are-zero).
#[cfg(target_arch = "x86_64")]
fn mxcsr() -> u32 {
    #[allow(deprecated)]
    // SAFETY: reads a register of this thread.
    unsafe {
        std::arch::x86_64::_mm_getcsr()
    }
}

/// Loading kernels from the cache, on the calling thread, leaves its floating-point environment
/// as it was: no flush-to-zero start-up code is linked into the libraries.
#[cfg(target_arch = "x86_64")]
#[test]
fn loading_cached_kernels_leaves_the_floating_point_environment_alone() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let path = root().join("tests/fixtures/native/numerics.relay");
    // Another process compiles the kernels into the cache.
    let o = run_with(dir.path(), &cache, &[], &[path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let m = crate::support::load_ok(&path);
    let n = Arc::new(Native::new(Config {
        threads: 1,
        cache_dir: Some(cache),
        ..Config::default()
    }));
    let before = mxcsr();
    let weights = Weights::new(0);
    let x = executor::compile(&m, &weights.for_module(&m), &native_options(&n, 1)).unwrap();
    let after = mxcsr();
    let s = n.stats();
    assert!(s.cached >= 1 && s.compiled == 0, "{s:?}");
    assert!(x.kernels().iter().any(|k| k.backend == "native"));
    assert_eq!(
        after, before,
        "MXCSR {after:#06x} after loading kernels, {before:#06x} before"
    );
}

/// A constant with no elements (here the zero-width padding a causal convolution of kernel
/// size one concatenates) compiles as generated code and computes what the interpreter does.
#[test]
fn an_empty_constant_compiles_natively() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("empty.relay");
    std::fs::write(&model, EMPTY_CONSTANT_MODEL).unwrap();
    let out = run_with(
        dir.path(),
        &dir.path().join("cache"),
        &[],
        &[
            model.to_str().unwrap(),
            "--check-reference",
            "--format",
            "json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let j = json(&out);
    // The concatenation with the empty constant is generated code (the convolution and
    // `zeros` are among the operators the interpreter runs).
    assert!(
        j["kernels"]["by_backend"]["native"].as_u64() >= Some(1),
        "{j}"
    );
    assert_eq!(j["comparisons"][0]["within_tolerance"], true, "{j}");
}

/// `collage parse` of the ONNX node test `test_causal_conv_with_state_kernel_size_one_expanded`.
const EMPTY_CONSTANT_MODEL: &str = r#"
#[version = "0.0.5"]
def @main(%input: Tensor[(2, 4, 8), float32], %weight: Tensor[(4, 1, 1), float32]) -> (Tensor[(2, 4, 8), float32], Tensor[(2, 4, 0), float32]) {
  %0 = (meta[relay.Constant][0] /* ty=Tensor[(2, 4, 0), float32] */, %input) /* ty=(Tensor[(2, 4, 0), float32], Tensor[(2, 4, 8), float32]) */;
  %1 = concatenate(%0, axis=2) /* ty=Tensor[(2, 4, 8), float32] */;
  %2 = nn.conv1d(%1, %weight, groups=4, channels=4, kernel_size=[1]) /* ty=Tensor[(2, 4, 8), float32] */;
  %3 = zeros(shape=[2, 4, 0], dtype="float32") /* ty=Tensor[(2, 4, 0), float32] */;
  (%2, %3) /* ty=(Tensor[(2, 4, 8), float32], Tensor[(2, 4, 0), float32]) */
}

#[metadata]
{
  "root": 1,
  "nodes": [
    {"type_key": ""},
    {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]},
    {"type_key": "Array", "data": [3]},
    {"type_key": "relay.Constant", "attrs": {"_checked_type_": "6", "data": "0", "span": "0", "virtual_device_": "4"}},
    {"type_key": "VirtualDevice", "attrs": {"device_type_int": "-1", "memory_scope": "5", "target": "0", "virtual_device_id": "-1"}},
    {"type_key": "runtime.String"},
    {"type_key": "relay.TensorType", "attrs": {"dtype": "float32", "shape": "7", "span": "0"}},
    {"type_key": "Array", "data": [8, 9, 10]},
    {"type_key": "IntImm", "attrs": {"dtype": "int32", "span": "0", "value": "2"}},
    {"type_key": "IntImm", "attrs": {"dtype": "int32", "span": "0", "value": "4"}},
    {"type_key": "IntImm", "attrs": {"dtype": "int32", "span": "0", "value": "0"}}
  ],
  "b64ndarrays": [
    "P6G0lvBAXt0AAAAAAAAAAAEAAAAAAAAAAwAAAAIgAQACAAAAAAAAAAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="
  ],
  "attrs": {"tvm_version": "0.19.0"}
}
"#;

/// Runs each of `texts` (Relay modules, random weights and inputs) as generated code (one
/// cache directory, 2 threads) and on the interpreter; every output must agree within rtol =
/// atol = 1e-4 and no unit may fall back. Returns the C sources of the kernels generated.
fn against_interpreter(texts: &[String]) -> Result<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let n = Arc::new(Native::new(Config {
        threads: 2,
        cache_dir: Some(dir.path().to_path_buf()),
        ..Config::default()
    }));
    for text in texts {
        let m = load_text_ok("case.relay", text);
        let w = Weights::new(11);
        let mw = w.for_module(&m);
        let x = executor::compile(&m, &mw, &native_options(&n, 2)).unwrap();
        if !x.warnings.is_empty() {
            return Err(format!("{text}\nfell back: {:?}", x.warnings));
        }
        let r = executor::compile(
            &m,
            &mw,
            &Options {
                threads: 1,
                ..Options::default()
            },
        )
        .unwrap();
        let inputs: Vec<Arc<Tensor>> = x
            .inputs
            .iter()
            .map(|i| Arc::new(mw.random_input(&i.name, &i.shape).unwrap()))
            .collect();
        let (got, want) = (x.run(&inputs).unwrap(), r.run(&inputs).unwrap());
        let (got, want) = (got.value.flatten(), want.value.flatten());
        for (a, b) in got.iter().zip(&want) {
            if let Some(e) = mismatch(a, b, 1e-4, 1e-4) {
                return Err(format!("{text}\n{e}"));
            }
        }
    }
    let mut sources = String::new();
    for e in std::fs::read_dir(dir.path().join("kernels/lib")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "c") {
            sources.push_str(&std::fs::read_to_string(p).unwrap());
        }
    }
    Ok(sources)
}

mod depthwise {
    //! Depthwise convolutions (`emit/depthwise.rs`, the phase-plane kernel) with the epilogues
    //! MobileNetV2 gives them (bias, clip, a residual add), against the reference interpreter,
    //! across shapes: odd sizes, strides 1 and 2, padding 0, 1 and asymmetric, channels that are
    //! not a multiple of the vector width, batches above 1, dilation, a channel multiplier.

    use proptest::prelude::*;

    /// One depthwise convolution and its epilogue.
    #[derive(Clone, Debug)]
    pub(super) struct Case {
        pub n: usize,
        pub c: usize,
        pub h: usize,
        pub w: usize,
        pub k: usize,
        pub stride: usize,
        /// Top, left, bottom, right.
        pub pad: [usize; 4],
        pub dilation: usize,
        /// Output channels per input channel.
        pub mult: usize,
        /// 0: none, 1: bias, 2: bias and clip(0, 6), 3: bias, clip and the input added back.
        pub epilogue: u8,
    }

    impl Case {
        fn out(&self) -> (usize, usize) {
            let span = self.dilation * (self.k - 1) + 1;
            (
                (self.h + self.pad[0] + self.pad[2] - span) / self.stride + 1,
                (self.w + self.pad[1] + self.pad[3] - span) / self.stride + 1,
            )
        }

        /// The case as a Relay module.
        pub(super) fn text(&self) -> String {
            let o = self.c * self.mult;
            let (oh, ow) = self.out();
            let mut params = format!(
                "%x: Tensor[({}, {}, {}, {}), float32], %w: Tensor[({o}, 1, {k}, {k}), float32]",
                self.n,
                self.c,
                self.h,
                self.w,
                k = self.k
            );
            if self.epilogue > 0 {
                params.push_str(&format!(", %b: Tensor[({o}, 1, 1), float32]"));
            }
            let [pt, pl, pb, pr] = self.pad;
            let mut body = format!(
                "  %0 = nn.conv2d(%x, %w, strides=[{s}, {s}], padding=[{pt}, {pl}, {pb}, {pr}], \
                 dilation=[{d}, {d}], groups={c}, channels={o}, kernel_size=[{k}, {k}]);\n",
                s = self.stride,
                d = self.dilation,
                c = self.c,
                k = self.k
            );
            let mut last = "%0".to_string();
            if self.epilogue >= 1 {
                body.push_str("  %1 = add(%0, %b);\n");
                last = "%1".into();
            }
            if self.epilogue >= 2 {
                body.push_str("  %2 = clip(%1, a_min=0f, a_max=6f);\n");
                last = "%2".into();
            }
            if self.epilogue >= 3 && (oh, ow, o) == (self.h, self.w, self.c) {
                body.push_str("  %3 = add(%2, %x);\n");
                last = "%3".into();
            }
            format!("#[version = \"0.0.5\"]\ndef @main({params}) {{\n{body}  {last}\n}}\n")
        }
    }

    /// Runs `cases` as generated code (one cache directory) and on the interpreter; every
    /// case's output must agree within rtol = atol = 1e-4, and (`phase`) every kernel must be
    /// the phase-plane one.
    pub(super) fn check(cases: &[Case], phase: bool) -> Result<(), String> {
        let texts: Vec<String> = cases.iter().map(Case::text).collect();
        let sources = super::against_interpreter(&texts)?;
        let marks = sources.matches("/* depthwise convolution over").count();
        if phase && marks != cases.len() {
            return Err(format!(
                "{marks} phase-plane kernels for {} cases",
                cases.len()
            ));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn case(
        n: usize,
        c: usize,
        h: usize,
        w: usize,
        k: usize,
        stride: usize,
        pad: usize,
        epilogue: u8,
    ) -> Case {
        Case {
            n,
            c,
            h,
            w,
            k,
            stride,
            pad: [pad; 4],
            dilation: 1,
            mult: 1,
            epilogue,
        }
    }

    #[test]
    fn depthwise_kernels_match_the_interpreter_across_shapes() {
        let mut cases = vec![
            // MobileNetV2's first depthwise layer and its first stride-2 one (channels cut).
            case(1, 32, 112, 112, 3, 1, 1, 2),
            case(1, 24, 112, 112, 3, 2, 1, 2),
            // Odd sizes, channels not a multiple of 16, batches above 1.
            case(1, 18, 17, 19, 3, 1, 1, 3),
            case(2, 20, 13, 11, 3, 2, 1, 2),
            case(3, 7, 5, 6, 3, 2, 1, 1),
            case(2, 9, 7, 7, 3, 1, 1, 3),
            // Padding 0, strides 1 and 2; a 1x1 plane.
            case(1, 24, 9, 9, 3, 1, 0, 2),
            case(1, 16, 10, 10, 3, 2, 0, 0),
            case(1, 5, 1, 1, 3, 1, 1, 2),
            // 5x5 windows (MobileNetV3), a 1x1 window.
            case(1, 8, 14, 14, 5, 1, 2, 2),
            case(1, 8, 15, 15, 5, 2, 2, 1),
            case(2, 3, 6, 5, 1, 1, 0, 1),
        ];
        // Asymmetric padding (TensorFlow's "same" at stride 2), dilation, a channel multiplier.
        let mut c = case(1, 17, 16, 16, 3, 2, 0, 2);
        c.pad = [0, 0, 1, 1];
        cases.push(c);
        let mut c = case(1, 12, 12, 13, 3, 1, 2, 2);
        c.dilation = 2;
        cases.push(c);
        let mut c = case(2, 6, 9, 8, 3, 1, 1, 1);
        c.mult = 2;
        cases.push(c);
        check(&cases, true).unwrap();
    }

    proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 8,
            failure_persistence: None,
            ..Default::default()
        })]

        #[test]
        fn random_depthwise_convolutions_match_the_interpreter(
            n in 1usize..=2,
            c in 1usize..=20,
            h in 1usize..=24,
            w in 1usize..=24,
            k in prop::sample::select(vec![1usize, 3, 5]),
            stride in 1usize..=2,
            pad in 0usize..=2,
            epilogue in 0u8..=3,
        ) {
            let cs = case(n, c, h + k, w + k, k, stride, pad, epilogue);
            // One channel is one group: an ordinary convolution, which the phase-plane kernel
            // is not for (its numbers are still checked).
            let r = check(std::slice::from_ref(&cs), c > 1);
            prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        }
    }
}

mod pointwise {
    //! Pointwise (1×1) convolutions (`emit/pointwise.rs`) with the epilogues of MobileNetV2 and
    //! ResNet-50 (bias, `clip(0, 6)`, `relu`, a residual add), against the reference
    //! interpreter: channel counts that leave a narrower last tile, planes that leave a
    //! narrower last panel, strides 2 and 3, padding, batches above 1, and an input computed by
    //! a fused operator (gathered before the product).

    use proptest::prelude::*;

    /// One pointwise convolution and its epilogue.
    #[derive(Clone, Debug)]
    struct Case {
        n: usize,
        c: usize,
        o: usize,
        h: usize,
        w: usize,
        stride: usize,
        pad: usize,
        /// 0: none, 1: bias, 2: bias and clip(0, 6), 3: bias, a residual add and relu.
        epilogue: u8,
        /// The input goes through `relu` first (fused into the convolution's reads).
        relu_in: bool,
    }

    impl Case {
        fn out(&self) -> (usize, usize) {
            (
                (self.h + 2 * self.pad - 1) / self.stride + 1,
                (self.w + 2 * self.pad - 1) / self.stride + 1,
            )
        }

        /// Whether every vector of the plane's pixels is full (16, 8 and 4 lanes alike), so
        /// the pointwise kernel is taken whatever the machine.
        fn full_lanes(&self) -> bool {
            let (oh, ow) = self.out();
            (oh * ow).is_multiple_of(16)
        }

        fn text(&self) -> String {
            let (n, c, o) = (self.n, self.c, self.o);
            let (oh, ow) = self.out();
            let mut params = format!(
                "%x: Tensor[({n}, {c}, {}, {}), float32], %w: Tensor[({o}, {c}, 1, 1), float32]",
                self.h, self.w
            );
            if self.epilogue > 0 {
                params.push_str(&format!(", %b: Tensor[({o}, 1, 1), float32]"));
            }
            if self.epilogue == 3 {
                params.push_str(&format!(", %r: Tensor[({n}, {o}, {oh}, {ow}), float32]"));
            }
            let input = if self.relu_in { "nn.relu(%x)" } else { "%x" };
            let p = self.pad;
            let mut body = format!(
                "  %0 = nn.conv2d({input}, %w, strides=[{s}, {s}], padding=[{p}, {p}, {p}, {p}], \
                 channels={o}, kernel_size=[1, 1]);\n",
                s = self.stride,
            );
            let last = match self.epilogue {
                0 => "%0",
                1 => {
                    body.push_str("  %1 = add(%0, %b);\n");
                    "%1"
                }
                2 => {
                    body.push_str("  %1 = add(%0, %b);\n  %2 = clip(%1, a_min=0f, a_max=6f);\n");
                    "%2"
                }
                _ => {
                    body.push_str(
                        "  %1 = add(%0, %b);\n  %2 = add(%1, %r);\n  %3 = nn.relu(%2);\n",
                    );
                    "%3"
                }
            };
            format!("#[version = \"0.0.5\"]\ndef @main({params}) {{\n{body}  {last}\n}}\n")
        }
    }

    /// Runs `cases` against the interpreter; the cases whose planes fill whole vectors must
    /// have taken the pointwise kernel.
    fn check(cases: &[Case]) -> Result<(), String> {
        let texts: Vec<String> = cases.iter().map(Case::text).collect();
        let sources = super::against_interpreter(&texts)?;
        let marks = sources.matches("/* pointwise convolution").count();
        let want = cases.iter().filter(|c| c.full_lanes()).count();
        if marks < want {
            return Err(format!("{marks} pointwise kernels for {want} cases"));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn case(
        n: usize,
        c: usize,
        o: usize,
        hw: usize,
        stride: usize,
        pad: usize,
        epilogue: u8,
    ) -> Case {
        Case {
            n,
            c,
            o,
            h: hw,
            w: hw,
            stride,
            pad,
            epilogue,
            relu_in: false,
        }
    }

    #[test]
    fn pointwise_kernels_match_the_interpreter_across_shapes() {
        let mut cases = vec![
            // MobileNetV2's first expansion and projection (channels as in the model).
            case(1, 16, 96, 112, 1, 0, 2),
            case(1, 32, 16, 112, 1, 0, 1),
            // 144 -> 24 at 56 x 56 with the block's input added back (as ResNet's relu).
            case(1, 144, 24, 56, 1, 0, 3),
            // Channels that leave a last tile of 4 and 8 (64, 160), a 14 x 14 plane (196 =
            // 6 * 32 + 4 pixels), a 7 x 7 one.
            case(1, 96, 64, 14, 1, 0, 2),
            case(1, 40, 160, 14, 1, 0, 3),
            case(1, 24, 8, 7, 1, 0, 1),
            // Fewer channels than a tile, odd planes, batches of 2 and 3.
            case(2, 3, 5, 9, 1, 0, 2),
            case(3, 17, 29, 13, 1, 0, 3),
            // Strides 2 and 3 (ResNet's downsampling), padding.
            case(1, 64, 128, 56, 2, 0, 1),
            case(2, 20, 36, 15, 2, 0, 3),
            case(1, 9, 30, 11, 3, 0, 2),
            case(1, 12, 24, 8, 1, 1, 2),
            case(1, 12, 20, 9, 2, 1, 0),
        ];
        let mut c = case(1, 24, 48, 16, 1, 0, 2);
        c.relu_in = true;
        cases.push(c);
        check(&cases).unwrap();
    }

    proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 8,
            failure_persistence: None,
            ..Default::default()
        })]

        #[test]
        fn random_pointwise_convolutions_match_the_interpreter(
            n in 1usize..=2,
            c in 1usize..=80,
            o in 1usize..=80,
            hw in 1usize..=40,
            stride in 1usize..=2,
            pad in 0usize..=1,
            epilogue in 0u8..=3,
            relu_in in any::<bool>(),
        ) {
            let cs = Case {
                n, c, o, h: hw, w: hw + 3, stride, pad, epilogue, relu_in,
            };
            let r = check(std::slice::from_ref(&cs));
            prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        }
    }
}

/// A partition of generated code that only reshapes hands its operand on as its result when
/// nothing else reads the operand (`Prepared::output_is_view_of`): the run never holds the
/// operand and a reshaped copy at once, and the result is the interpreter's.
#[test]
fn a_reshape_only_partition_relabels_its_operand() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(256, 256), float32]) -> Tensor[(1), float32] {
  %0 = fn (%p0: Tensor[(256, 256), float32], Primitive=1) -> Tensor[(256, 256), float32] {
    add(%p0, 1f)
  };
  %1 = %0(%x);
  %2 = fn (%p1: Tensor[(256, 256), float32], Primitive=1) -> Tensor[(65536), float32] {
    reshape(%p1, newshape=[65536])
  };
  %3 = %2(%1);
  %4 = fn (%p2: Tensor[(65536), float32], Primitive=1) -> Tensor[(1), float32] {
    sum(%p2, axis=[0], keepdims=True)
  };
  %4(%3)
}"#;
    let m = load_text_ok("reshape_view", text);
    let weights = Weights::new(5);
    let mw = weights.for_module(&m);
    let n = native(1);
    let x = executor::compile(&m, &mw, &native_options(&n, 1)).unwrap();
    assert!(x.warnings.is_empty(), "{:?}", x.warnings);
    assert_eq!(
        x.kernels().iter().filter(|k| k.backend == "native").count(),
        3
    );
    let input = Arc::new(mw.random_input("x", &x.inputs[0].shape).unwrap());
    let out = x.run(std::slice::from_ref(&input)).unwrap();
    let got = out.value.as_tensor().unwrap().as_slice::<f32>()[0];
    let want: f32 = input.as_slice::<f32>().iter().map(|a| a + 1.0).sum();
    assert!((got - want).abs() <= 1e-3 * want.abs(), "{got} vs {want}");
    // The input and `%1` (and the 4-byte sum), not a copy of `%1` as well.
    let big = 256 * 256 * 4;
    assert!(
        out.peak_bytes < 3 * big,
        "peak {}: the reshape copied",
        out.peak_bytes
    );
}

/// Dense layers through the blocked GEMM (`emit/gemm.rs`): rows split into blocks of equal
/// tiles (128 rows of 768), a constant weight matrix whose chunks of panels exceed 4 MiB (36
/// rows of 2048 by 4100 outputs: the blocks grow so that each chunk is read once, the last
/// panel partial), a long sum (40 rows of 3072: one block of all five tiles, the rows packed
/// once for the chunks of panels that share them), and a small product with edges on both
/// sides, with a bias, against the interpreter.
#[test]
fn dense_layers_of_every_blocking_match_the_interpreter() {
    let texts: Vec<String> = [
        (128, 768, 200),
        (36, 2048, 4100),
        (40, 3072, 96),
        (7, 33, 70),
    ]
    .iter()
    .map(|&(m, k, n)| {
        format!(
            "#[version = \"0.0.5\"]\ndef @main(%x: Tensor[({m}, {k}), float32], \
                 %w: Tensor[({n}, {k}), float32], %b: Tensor[({n}), float32]) {{\n  \
                 add(nn.dense(%x, %w, units={n}), %b)\n}}\n"
        )
    })
    .collect();
    let sources = against_interpreter(&texts).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        sources.contains("_pack0"),
        "the weights were not packed once"
    );
    assert!(
        sources.contains("float* restrict As = "),
        "no product packed its rows once for all its chunks of panels"
    );
}

/// An elementwise nest whose result has a leading axis of 1 that its operand lacks (GPT-2's
/// GELU after a reshape) is one loop shared by the pool, not a parallel loop of one iteration
/// around the whole work.
#[test]
fn a_leading_axis_of_one_does_not_serialise_an_elementwise_nest() {
    let text = "#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(128, 3072), float32]) {\n  \
                %0 = reshape(%x, newshape=[1, 128, 3072]);\n  \
                multiply(%0, tanh(%0))\n}\n";
    let sources = against_interpreter(&[text.to_string()]).unwrap_or_else(|e| panic!("{e}"));
    let lines: Vec<&str> = sources.lines().collect();
    let parallel: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains("#pragma omp parallel for"))
        .collect();
    assert!(!parallel.is_empty(), "no parallel loop:\n{sources}");
    for i in parallel {
        assert!(
            !lines[i + 1].contains(" < 1L;"),
            "a parallel loop of one iteration:\n{sources}"
        );
    }
}
