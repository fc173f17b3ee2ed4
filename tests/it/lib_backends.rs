//! The CPU library backends run their partitions for real and agree with the reference
//! interpreter:
//!
//! * every `dnnl` and `openblas` candidate of the corpus and of the generated models (each
//!   distinct composite, and partitions of up to three composites) compiled by its library and
//!   run against the reference interpreter on the same inputs;
//! * one hand-written partition per composite shape class: bias or not, each tail, groups,
//!   depthwise, strides, asymmetric padding, dilation, 1-D/3-D and transposed convolutions
//!   (against plain loops: the interpreter runs `nn.conv2d` only), batch norm folding, `sum`
//!   in place and copied, transposes, one-row dense layers, broadcast batches;
//! * every corpus model partitioned with `--target tvm_cpu --target dnnl` and with
//!   `--target tvm_cpu --target openblas`, run end to end (libraries, generated code for the
//!   native operators) against the original on the reference interpreter (one reference run
//!   per model serves both);
//! * what oneDNN or OpenBLAS cannot run (float16 entries of TVM's table, attribute values a
//!   primitive rejects) is unsupported, never a crash, and falls back with W2310;
//! * a machine without a library (simulated with `COLLAGE_DNNL_LIBRARY` pointing nowhere): a
//!   native-only plan runs, a `dnnl` plan is E2308 naming the package.
//!
//! The test command (`.ci/run`) installs the libraries; without them these tests fail with the
//! package's name.
//!
//! Tolerance (docs/backends.md, "Numerics"): float32 outputs agree within rtol 1e-4 and an
//! absolute 1e-4 times the largest magnitude of the expected tensor (at least 1e-4): the
//! libraries sum in other orders (blocked GEMMs, folded batch norms) and evaluate `tanh`, `erf`
//! and `exp` with their own vectorised approximations.

use crate::support::{collage_in, load_text_ok, root, run_model};
use collage::ir::{DType, Module};
use collage::planning::enumerate::{extract, target_candidates, DataflowGraph, Limits};
use collage::runtime::backend::dnnl::DnnlBackend;
use collage::runtime::backend::native::grouping::FuseGrouping;
use collage::runtime::backend::native::{Config as NativeConfig, Native};
use collage::runtime::backend::openblas::OpenBlasBackend;
use collage::runtime::exec::compare;
use collage::runtime::exec::data::Weights;
use collage::runtime::exec::executor::{self, Options};
use collage::runtime::exec::kernel::MemCounter;
use collage::runtime::exec::kernel::{Backend, Backends, ConstantSource, RunCx, Unit};
use collage::runtime::exec::reference::Reference;
use collage::runtime::exec::tensor::{Shape, Tensor};
use collage::runtime::exec::value::flat_shapes;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

fn dnnl(threads: usize) -> Arc<dyn Backend> {
    Arc::new(DnnlBackend::new(threads).unwrap_or_else(|e| panic!("{e}")))
}

fn blas(threads: usize) -> Arc<dyn Backend> {
    Arc::new(OpenBlasBackend::new(threads).unwrap_or_else(|e| panic!("{e}")))
}

/// `|got - want| <= rtol·|want| + atol·max(1, max|want|)` for float32, exact otherwise.
fn check_close(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtypes");
    let scale = want
        .f32_view()
        .iter()
        .filter(|v| v.is_finite())
        .fold(1f64, |a, &v| a.max((v as f64).abs()));
    let (rtol, atol) = if want.dtype() == DType::F32 {
        (1e-4, 1e-4 * scale)
    } else {
        (1e-2, 1e-2 * scale)
    };
    let d = compare::compare(got, want, rtol, atol).unwrap();
    assert!(
        d.within(),
        "{what}: {} element(s) differ beyond rtol {rtol}, atol {atol:.3e} (max abs {:.3e}, max rel {:.3e})",
        d.mismatched,
        d.max_abs,
        d.max_rel
    );
}

/// The outputs of a module's `@main` compiled with `backends` (empty: the reference
/// interpreter), on inputs drawn from seed 1 (or the given ones), and the backend of each
/// kernel with the warnings.
fn run_module(
    m: &Module,
    backends: Vec<Arc<dyn Backend>>,
    threads: usize,
    inputs: Option<&[Arc<Tensor>]>,
) -> (Vec<Tensor>, Vec<String>, Vec<String>) {
    run_with(m, backends, threads, inputs, None)
}

/// The outputs of a plan's `@main` run as `collage run --backend auto` runs it: `backends`
/// (the libraries and the native backend) with the inline operators grouped as FuseOps groups
/// them; inputs from seed 1. Also the backend of each kernel and the warnings.
fn run_plan(
    m: &Module,
    backends: Vec<Arc<dyn Backend>>,
    threads: usize,
) -> (Vec<Tensor>, Vec<String>, Vec<String>) {
    run_with(
        m,
        backends,
        threads,
        None,
        Some(Box::new(FuseGrouping::default())),
    )
}

fn run_with(
    m: &Module,
    backends: Vec<Arc<dyn Backend>>,
    threads: usize,
    inputs: Option<&[Arc<Tensor>]>,
    grouping: Option<Box<FuseGrouping>>,
) -> (Vec<Tensor>, Vec<String>, Vec<String>) {
    let opts = Options {
        threads,
        backends: Backends { list: backends },
        grouping: grouping.map(|g| g as _),
    };
    let (flat, x) = run_model(m, &Weights::new(1), &opts, inputs);
    let kernels = x.kernels().iter().map(|k| k.backend.clone()).collect();
    let warnings = x.warnings.iter().map(|d| d.message.clone()).collect();
    (flat, kernels, warnings)
}

/// Runs a module with a library and with the reference interpreter and compares; the module's
/// partitions must all have run on the library.
fn agree(what: &str, text: &str, lib: Arc<dyn Backend>, threads: usize) {
    let m = load_text_ok(what, text);
    let name = lib.name().to_string();
    let (got, kernels, warnings) = run_module(&m, vec![lib], threads, None);
    assert!(warnings.is_empty(), "{what}: {warnings:?}");
    assert!(kernels.contains(&name), "{what}: kernels {kernels:?}");
    let (want, _, _) = run_module(&m, Vec::new(), threads, None);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        check_close(&format!("{what} output{i}"), g, w);
    }
}

/// The oneDNN plan of the partition `@part` of a module in Relay text.
fn part_plan(what: &str, text: &str) -> collage::runtime::backend::dnnl::plan::Plan {
    let m = load_text_ok(what, text);
    let w = Weights::new(1);
    let mw = w.for_module(&m);
    let g = collage::runtime::backend::byoc::read(&m, m.def("part").unwrap(), &mw).unwrap();
    let d = collage::runtime::ffi::dnnl::Dnnl::shared().unwrap();
    collage::runtime::backend::dnnl::plan::build(&d, &d.engine().unwrap(), &m, &g, &mw).unwrap()
}

/// A partition of one composite called from `@main`: `params` are (type, whether `@main`
/// passes a constant); the composite's parameters are `%a0`, `%a1`, ... in the body.
fn partition(compiler: &str, composite: &str, params: &[(&str, bool)], body: &str) -> String {
    let p_decl: Vec<String> = params
        .iter()
        .enumerate()
        .map(|(i, (t, _))| format!("%p{i}: {t}"))
        .collect();
    let a_decl: Vec<String> = params
        .iter()
        .enumerate()
        .map(|(i, (t, _))| format!("%a{i}: {t}"))
        .collect();
    let p_use: Vec<String> = (0..params.len()).map(|i| format!("%p{i}")).collect();
    let mut main_params = Vec::new();
    let mut main_args = Vec::new();
    let mut k = 0;
    for (i, (t, constant)) in params.iter().enumerate() {
        if *constant {
            main_args.push(format!("meta[relay.Constant][{k}] /* ty={t} */"));
            k += 1;
        } else {
            main_params.push(format!("%x{i}: {t}"));
            main_args.push(format!("%x{i}"));
        }
    }
    format!(
        "#[version = \"0.0.5\"]\n\
         def @part({}, Primitive=1, Compiler=\"{compiler}\", global_symbol=\"part\") {{\n  \
         %0 = fn ({}, Composite=\"{composite}\") {{\n    {body}\n  }};\n  \
         %0({})\n}}\n\
         def @main({}) {{\n  @part({})\n}}\n",
        p_decl.join(", "),
        a_decl.join(", "),
        p_use.join(", "),
        main_params.join(", "),
        main_args.join(", "),
    )
}

fn t4(n: usize, c: usize, h: usize, w: usize) -> String {
    format!("Tensor[({n}, {c}, {h}, {w}), float32]")
}

// ---------------------------------------------------------------------------------------------
// Every candidate of the corpus and the generated models

/// `meta[relay.Constant][N]` with the index blanked, so that functions differing only in which
/// weights they hold are run once.
fn blank_meta(text: &str) -> String {
    let key = "meta[relay.Constant][";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(key) {
        out.push_str(&rest[..i + key.len()]);
        rest = &rest[i + key.len()..];
        rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        out.push('_');
    }
    out.push_str(rest);
    out
}

/// The outputs of the candidate's `Compiler=` function (the function literal an extracted
/// candidate wraps its composites in) compiled by `b` alone (no fallback), on inputs from
/// seed 3.
fn unit_outputs(m: &Module, b: &dyn Backend) -> Result<Vec<Tensor>, String> {
    let w = Weights::new(3);
    let mw = w.for_module(m);
    let func = (0..m.funcs.len())
        .map(|i| collage::ir::FuncId(i as u32))
        .find(|&f| m.func(f).attr("Compiler").is_some())
        .expect("a candidate wraps its composites in a Compiler function");
    let unit = Unit::Function { module: m, func };
    let kernel = b.compile(&unit, &mw).map_err(|u| u.message)?;
    let f = m.func(func);
    let mut inputs = Vec::new();
    for &p in &f.params {
        let v = m.var(p);
        let shape = Shape::of(m.ty(v.expr).unwrap().as_tensor().unwrap()).unwrap();
        inputs.push(Arc::new(mw.random_input(&v.name, &shape).unwrap()));
    }
    let prepared = kernel
        .prepare(&vec![None; inputs.len()])
        .map_err(|u| u.message)?;
    let mut outs: Vec<Tensor> = flat_shapes(m.ty(f.body).unwrap())
        .unwrap()
        .iter()
        .map(|s| Tensor::zeros_of(s).unwrap())
        .collect();
    let mem = MemCounter::new(0);
    prepared
        .run(
            &inputs,
            &mut outs,
            &RunCx {
                mem: &mem,
                buffers: None,
            },
        )
        .map_err(|e| e.message)?;
    Ok(outs)
}

/// Whether a corpus model is one of the float16 ones (`gpt2_16`, `gpt2_16_for_cutlass_extract`,
/// ...).
fn is_float16(name: &str) -> bool {
    name.contains("_16")
}

fn corpus_and_generated() -> Vec<(String, Module)> {
    let mut out = crate::support::corpus();
    out.push((
        "generated gpt2 (2 layers)".into(),
        load_text_ok("gpt2", &collage::frontend::gen::gpt2(2)),
    ));
    out.push((
        "generated bert (2 layers, 16 tokens)".into(),
        load_text_ok("bert", &collage::frontend::gen::bert_large(2, 16)),
    ));
    out
}

/// The candidates of `dnnl` and `openblas` on every corpus model and the generated models,
/// compiled by their library and run against the reference interpreter: every distinct
/// single-composite candidate (shapes and attributes included), and one candidate per sequence
/// of two or three composites. Float32 candidates must run; the others (TVM's dtype-blind
/// entries matching float16 models) must be unsupported because of their dtype.
#[test]
fn every_library_candidate_matches_the_reference() {
    let program = collage::rules::sema::check_library().expect("the shipped library checks");
    let libs: [(&str, Arc<dyn Backend>); 2] = [("dnnl", dnnl(2)), ("openblas", blas(2))];
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut ran: BTreeMap<String, usize> = BTreeMap::new();
    let mut refused = 0;
    let mut multi = 0;
    for (model, m) in corpus_and_generated() {
        let g = DataflowGraph::new(&m, m.main().unwrap());
        for (target, lib) in &libs {
            let t = program
                .targets
                .iter()
                .position(|x| x.name == *target)
                .unwrap();
            for c in target_candidates(&g, &program, t, &Limits::default()).unwrap() {
                let comps = c.sub_graph.composites();
                if comps.is_empty() || comps.len() > 3 {
                    continue;
                }
                let Ok(fm) = extract::extract(&g, &c.sub_graph, Vec::new()) else {
                    continue;
                };
                let names: Vec<&str> = comps.iter().map(|(n, _)| *n).collect();
                // Single composites: every distinct one (shapes and attributes included).
                // Several: one per target and sequence of composites (the shapes are the
                // single composites'; what is new is the values passing between them).
                let key = if names.len() == 1 {
                    blank_meta(&collage::frontend::relay::print::print_module(&fm))
                } else {
                    format!("{target} {names:?}")
                };
                if !seen.insert(key) {
                    continue;
                }
                let what = format!("{model}: {target} {names:?}");
                match unit_outputs(&fm, lib.as_ref()) {
                    Ok(got) => {
                        let want = unit_outputs(&fm, &Reference).unwrap();
                        for (g, w) in got.iter().zip(&want) {
                            check_close(&what, g, w);
                        }
                        for n in &names {
                            *ran.entry(n.to_string()).or_default() += 1;
                        }
                        if names.len() > 1 {
                            multi += 1;
                        }
                    }
                    Err(reason) => {
                        assert!(
                            is_float16(&model) && reason.contains("float32 only"),
                            "{what}: {reason}"
                        );
                        refused += 1;
                    }
                }
            }
        }
    }
    // Every composite the partitions of these models can use ran at least once.
    for name in [
        "dnnl.batch_norm",
        "dnnl.batch_norm_relu",
        "dnnl.conv2d",
        "dnnl.conv2d_bias",
        "dnnl.conv2d_bias_relu",
        "dnnl.conv2d_relu",
        "dnnl.conv2d_bn",
        "dnnl.conv2d_bn_relu",
        "dnnl.conv2d_bn_sum",
        "dnnl.conv2d_sum",
        "dnnl.conv2d_sum_relu",
        "dnnl.dense",
        "dnnl.dense_bias",
        "dnnl.dense_bias_gelu_tanh",
        "dnnl.dense_bias_gelu_erf",
        "dnnl.dense_bias_sum",
        "dnnl.gelu_tanh",
        "dnnl.gelu_erf",
        "dnnl.layer_norm_decomposed",
        "dnnl.layer_norm",
        "dnnl.softmax",
        "dnnl.max_pool2d",
        "dnnl.global_avg_pool2d",
        "dnnl.batch_matmul",
        "openblas.dense",
        "openblas.dense_bias",
        "openblas.batch_matmul",
    ] {
        assert!(ran.contains_key(name), "{name} never ran: {ran:?}");
    }
    eprintln!("{multi} multi-composite partitions ran");
    assert!(multi >= 20, "only {multi} multi-composite partitions ran");
    assert!(
        refused > 0,
        "the float16 models' TVM entries were not refused"
    );
}

// ---------------------------------------------------------------------------------------------
// Shape classes: convolutions against the reference interpreter

/// `nn.conv2d` with strides, asymmetric padding, dilation, groups and depthwise weights; with
/// and without a bias; weights constant at the call site and not.
#[test]
fn conv2d_shape_classes() {
    let lib = dnnl(2);
    let x = t4(2, 8, 11, 10);
    for (attrs, w, out, wconst) in [
        ("", t4(16, 8, 3, 3), t4(2, 16, 9, 8), true),
        (
            "strides=[2, 2], padding=[1, 0, 2, 1]",
            t4(16, 8, 3, 3),
            t4(2, 16, 6, 5),
            true,
        ),
        (
            "padding=[2, 2], dilation=[2, 2]",
            t4(16, 8, 3, 3),
            t4(2, 16, 11, 10),
            false,
        ),
        (
            "groups=2, padding=[1, 1]",
            t4(16, 4, 3, 3),
            t4(2, 16, 11, 10),
            true,
        ),
        (
            "groups=8, padding=[1, 1], strides=[2, 1]",
            t4(8, 1, 3, 3),
            t4(2, 8, 6, 10),
            true,
        ),
        ("strides=[2, 2]", t4(32, 8, 1, 1), t4(2, 32, 6, 5), false),
    ] {
        let call = if attrs.is_empty() {
            "nn.conv2d(%a0, %a1)".to_string()
        } else {
            format!("nn.conv2d(%a0, %a1, {attrs})")
        };
        let text = partition("dnnl", "dnnl.conv2d", &[(&x, false), (&w, wconst)], &call);
        agree(&format!("conv2d {attrs}"), &text, lib.clone(), 2);
        let _ = out;
        // With a bias [O, 1, 1] and a relu (TVM's entry).
        let o = w.trim_start_matches("Tensor[(").split(',').next().unwrap();
        let b = format!("Tensor[({o}, 1, 1), float32]");
        let text = partition(
            "dnnl",
            "dnnl.conv2d_bias_relu",
            &[(&x, false), (&w, wconst), (&b, true)],
            &format!("nn.relu(add({call}, %a2))"),
        );
        agree(&format!("conv2d_bias_relu {attrs}"), &text, lib.clone(), 2);
    }
}

/// A partition of several convolutions, one of them of the size that goes to oneDNN's
/// Winograd algorithm (3 × 3, 64 channels, 28 × 28: `dnnl::plan::winograd_suits`), the others
/// then laid out in its 16-channel blocks where their channels allow (a 1 × 1 convolution of
/// 64 channels, a 3 × 3 one at stride 2) and not where they do not (8 output channels, a
/// grouped one), with a residual sum: every layout change between them must keep the values.
/// Where oneDNN has no Winograd kernel (no AVX-512) the same partition runs direct.
#[test]
fn winograd_convolutions_among_blocked_and_plain_ones() {
    let lib = dnnl(2);
    let x = t4(1, 64, 28, 28);
    let text = format!(
        "#[version = \"0.0.5\"]\n\
         def @part(%p0: {x}, %p1: {w3}, %p2: {b64}, %p3: {w1}, %p4: {w3s}, %p5: {wg}, %p6: {w8}, \
         Primitive=1, Compiler=\"dnnl\", global_symbol=\"part\") {{\n  \
         %0 = fn (%a0: {x}, %a1: {w3}, %a2: {b64}, Composite=\"dnnl.conv2d_bias_relu\") {{\n    \
         nn.relu(add(nn.conv2d(%a0, %a1, padding=[1, 1, 1, 1]), %a2))\n  }};\n  \
         %1 = %0(%p0, %p1, %p2);\n  \
         %2 = fn (%a0: {x}, %a1: {w1}, %a2: {x}, Composite=\"dnnl.conv2d_bias_sum\") {{\n    \
         add(nn.conv2d(%a0, %a1), %a2)\n  }};\n  \
         %3 = %2(%1, %p3, %p0);\n  \
         %4 = fn (%a0: {x}, %a1: {w3s}, Composite=\"dnnl.conv2d\") {{\n    \
         nn.conv2d(%a0, %a1, strides=[2, 2], padding=[1, 1, 1, 1])\n  }};\n  \
         %5 = %4(%3, %p4);\n  \
         %6 = fn (%a0: {y}, %a1: {wg}, Composite=\"dnnl.conv2d\") {{\n    \
         nn.conv2d(%a0, %a1, padding=[1, 1, 1, 1], groups=4)\n  }};\n  \
         %7 = %6(%5, %p5);\n  \
         %8 = fn (%a0: {y}, %a1: {w8}, Composite=\"dnnl.conv2d\") {{\n    \
         nn.conv2d(%a0, %a1)\n  }};\n  \
         %8(%7, %p6)\n}}\n\
         def @main(%x: {x}) {{\n  @part(%x, meta[relay.Constant][0] /* ty={w3} */, \
         meta[relay.Constant][1] /* ty={b64} */, meta[relay.Constant][2] /* ty={w1} */, \
         meta[relay.Constant][3] /* ty={w3s} */, meta[relay.Constant][4] /* ty={wg} */, \
         meta[relay.Constant][5] /* ty={w8} */)\n}}\n",
        w3 = t4(64, 64, 3, 3),
        b64 = "Tensor[(64, 1, 1), float32]",
        w1 = t4(64, 64, 1, 1),
        w3s = t4(64, 64, 3, 3),
        y = t4(1, 64, 14, 14),
        wg = t4(64, 16, 3, 3),
        w8 = t4(8, 64, 1, 1),
    );
    agree(
        "winograd among blocked and plain convolutions",
        &text,
        lib,
        2,
    );
    // The first convolution, and only it, runs oneDNN's Winograd kernel where it has one.
    let p = part_plan("winograd", &text);
    let impls: Vec<&str> = p
        .steps
        .iter()
        .filter(|s| s.what == "convolution")
        .map(|s| s.impl_name.as_str())
        .collect();
    assert_eq!(impls.len(), 5, "{impls:?}");
    if std::arch::is_x86_feature_detected!("avx512f") {
        assert!(impls[0].contains("wino"), "{impls:?}");
    }
    assert!(impls[1..].iter().all(|i| !i.contains("wino")), "{impls:?}");
}

/// TVM's tails after a convolution with a bias, each as a post-op.
#[test]
fn conv2d_each_tail() {
    let lib = dnnl(2);
    let (x, w, b) = (
        t4(1, 4, 6, 6),
        t4(8, 4, 3, 3),
        "Tensor[(8, 1, 1), float32]".to_string(),
    );
    let conv = "add(nn.conv2d(%a0, %a1, padding=[1, 1]), %a2)";
    for (name, body) in [
        ("dnnl.conv2d_bias", conv.to_string()),
        ("dnnl.conv2d_bias_tanh", format!("tanh({conv})")),
        ("dnnl.conv2d_bias_sigmoid", format!("sigmoid({conv})")),
        (
            "dnnl.conv2d_bias_clip",
            format!("clip({conv}, a_min=-0.2f, a_max=0.3f)"),
        ),
        (
            "dnnl.conv2d_bias_gelu",
            format!(
                "%1 = {conv};\n    multiply(multiply(%1, add(erf(divide(%1, 1.41421f)), 1f)), 0.5f)"
            ),
        ),
        (
            "dnnl.conv2d_bias_swish",
            format!("%1 = {conv};\n    multiply(%1, sigmoid(%1))"),
        ),
        (
            "dnnl.conv2d_bias_mish",
            format!("%1 = {conv};\n    multiply(%1, tanh(log(add(exp(%1), 1f))))"),
        ),
        (
            "dnnl.conv2d_relu",
            "nn.relu(nn.conv2d(%a0, %a1))".to_string(),
        ),
    ] {
        let params: Vec<(&str, bool)> = if body.contains("%a2") {
            vec![(&x, false), (&w, true), (&b, true)]
        } else {
            vec![(&x, false), (&w, true)]
        };
        agree(
            name,
            &partition("dnnl", name, &params, &body),
            lib.clone(),
            1,
        );
    }
}

/// Biases written as `nn.bias_add` (as models imported from ONNX carry them) on the channel axis
/// of a convolution, a 1-d convolution and a dense layer, alone and under a tail; and one
/// reaching the matcher: a model with `nn.bias_add` partitioned for `dnnl` puts the biases in
/// the composites.
#[test]
fn bias_add_biases() {
    let lib = dnnl(2);
    let (x, w, b) = (
        t4(1, 4, 6, 6),
        t4(8, 4, 3, 3),
        "Tensor[(8), float32]".to_string(),
    );
    let conv = "nn.bias_add(nn.conv2d(%a0, %a1, padding=[1, 1]), %a2)";
    for (name, body) in [
        ("dnnl.conv2d_bias", conv.to_string()),
        (
            "dnnl.conv2d_bias_clip",
            format!("clip({conv}, a_min=0f, a_max=6f)"),
        ),
        ("dnnl.conv2d_bias_relu", format!("nn.relu({conv})")),
    ] {
        let params = vec![(x.as_str(), false), (w.as_str(), true), (b.as_str(), true)];
        agree(
            name,
            &partition("dnnl", name, &params, &body),
            lib.clone(),
            1,
        );
    }
    let (x1, w1) = ("Tensor[(2, 4, 9), float32]", "Tensor[(8, 4, 3), float32]");
    agree(
        "dnnl.conv1d_bias",
        &partition(
            "dnnl",
            "dnnl.conv1d_bias",
            &[(x1, false), (w1, true), (&b, true)],
            "nn.bias_add(nn.conv1d(%a0, %a1), %a2, axis=1)",
        ),
        lib.clone(),
        1,
    );
    let (xd, wd) = ("Tensor[(3, 5), float32]", "Tensor[(8, 5), float32]");
    agree(
        "dnnl.dense_bias",
        &partition(
            "dnnl",
            "dnnl.dense_bias",
            &[(xd, false), (wd, true), (&b, true)],
            "nn.bias_add(nn.dense(%a0, %a1), %a2)",
        ),
        lib.clone(),
        1,
    );
    // The matcher: `nn.bias_add` over the channels completes the biased composites.
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("bias_add.relay");
    std::fs::write(
        &model,
        "#[version = \"0.0.5\"]\n\
         def @main(%x: Tensor[(1, 4, 6, 6), float32], %w: Tensor[(8, 4, 3, 3), float32], \
         %b: Tensor[(8), float32]) {\n  \
         %0 = nn.conv2d(%x, %w, padding=[1, 1], channels=8, kernel_size=[3, 3]);\n  \
         clip(nn.bias_add(%0, %b), a_min=0f, a_max=6f)\n}\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_collage"))
        .args(["candidates", model.to_str().unwrap(), "--target", "dnnl"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for c in ["dnnl.conv2d_bias_clip", "dnnl.conv2d_bias\""] {
        assert!(
            text.contains(&format!("Composite=\"{c}")),
            "{c} missing:\n{text}"
        );
    }
}

/// Batch norms folded into the convolution (with relu, clip, and a `sum` with another tensor),
/// the `sum` of plain convolutions, and batch norms on their own.
#[test]
fn batch_norm_folding_and_sums() {
    let lib = dnnl(2);
    let x = t4(1, 8, 7, 7);
    let x = x.as_str();
    let y = t4(1, 16, 7, 7);
    let y = y.as_str();
    let w = "meta[relay.Constant][10] /* ty=Tensor[(16, 8, 3, 3), float32] */";
    let v = |i: usize| format!("meta[relay.Constant][{i}] /* ty=Tensor[(16), float32] */");
    let bn = |inner: &str, extra: &str| {
        format!(
            "%1 = nn.batch_norm(nn.conv2d({inner}, {w}, padding=[1, 1]), {}, {}, {}, {}{extra});\n    %1.0",
            v(11),
            v(12),
            v(13),
            v(14)
        )
    };
    for (name, body, params) in [
        ("dnnl.conv2d_bn", bn("%a0", ""), vec![(x, false)]),
        (
            "dnnl.conv2d_bn",
            bn("%a0", ", epsilon=0.001f, center=False"),
            vec![(x, false)],
        ),
        (
            "dnnl.conv2d_bn_relu",
            format!(
                "{};\n    nn.relu(%2)",
                bn("%a0", "").replace("%1.0", "%2 = %1.0")
            ),
            vec![(x, false)],
        ),
        (
            "dnnl.conv2d_bn_clip",
            format!(
                "{};\n    clip(%2, a_min=0f, a_max=6f)",
                bn("%a0", "").replace("%1.0", "%2 = %1.0")
            ),
            vec![(x, false)],
        ),
        (
            "dnnl.conv2d_bn_sum",
            format!(
                "{};\n    add(%2, %a1)",
                bn("%a0", "").replace("%1.0", "%2 = %1.0")
            ),
            vec![(x, false), (y, false)],
        ),
        (
            "dnnl.conv2d_bn_sum_relu",
            format!(
                "{};\n    nn.relu(add(%a1, %2))",
                bn("%a0", "").replace("%1.0", "%2 = %1.0")
            ),
            vec![(x, false), (y, false)],
        ),
        (
            "dnnl.conv2d_sum_relu",
            "nn.relu(add(nn.conv2d(%a0, %a2, padding=[1, 1]), %a1))".to_string(),
            vec![
                (x, false),
                (y, false),
                ("Tensor[(16, 8, 3, 3), float32]", true),
            ],
        ),
        (
            "dnnl.conv2d_bias_sum_relu",
            "nn.relu(add(add(nn.conv2d(%a0, %a2, padding=[1, 1]), %a3), %a1))".to_string(),
            vec![
                (x, false),
                (y, false),
                ("Tensor[(16, 8, 3, 3), float32]", true),
                ("Tensor[(16, 1, 1), float32]", true),
            ],
        ),
        (
            "dnnl.batch_norm_relu",
            format!(
                "%1 = nn.batch_norm(%a0, {}, {}, {}, {});\n    nn.relu(%1.0)",
                v(11).replace("16", "8"),
                v(12).replace("16", "8"),
                v(13).replace("16", "8"),
                v(14).replace("16", "8")
            ),
            vec![(x, false)],
        ),
        (
            "dnnl.batch_norm",
            format!(
                "%1 = nn.batch_norm(%a0, {}, {}, {}, {}, scale=False);\n    %1.0",
                v(11).replace("16", "8"),
                v(12).replace("16", "8"),
                v(13).replace("16", "8"),
                v(14).replace("16", "8")
            ),
            vec![(x, false)],
        ),
    ] {
        agree(
            name,
            &partition("dnnl", name, &params, &body),
            lib.clone(),
            2,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 1-D, 3-D and transposed convolutions against plain loops

/// A direct convolution (or transposed convolution) of any spatial rank, in float64.
#[allow(clippy::too_many_arguments)]
fn conv_loops(
    x: &[f32],
    xs: &[usize],
    w: &[f32],
    ws: &[usize],
    ys: &[usize],
    strides: &[usize],
    dilation: &[usize],
    pad: &[usize],
    groups: usize,
    transposed: bool,
) -> Vec<f32> {
    let nd = xs.len() - 2;
    let (n, c) = (xs[0], xs[1]);
    let o = ys[1];
    let (cg, og) = (c / groups, o / groups);
    let spatial = |s: &[usize]| s[2..].iter().product::<usize>();
    let unravel = |mut i: usize, dims: &[usize]| {
        let mut v = vec![0usize; dims.len()];
        for k in (0..dims.len()).rev() {
            v[k] = i % dims[k];
            i /= dims[k];
        }
        v
    };
    let ravel = |v: &[usize], dims: &[usize]| v.iter().zip(dims).fold(0, |a, (&i, &d)| a * d + i);
    let kdims = &ws[2..];
    let kn: usize = kdims.iter().product();
    let mut y = vec![0f64; n * o * spatial(ys)];
    for b in 0..n {
        for g in 0..groups {
            for ci in 0..cg {
                let ch = g * cg + ci;
                for oi in 0..og {
                    let oc = g * og + oi;
                    for kk in 0..kn {
                        let kv = unravel(kk, kdims);
                        let wv = if transposed {
                            // [C, O/g, k...]
                            w[(ch * og + oi) * kn + kk]
                        } else {
                            // [O, C/g, k...]
                            w[(oc * cg + ci) * kn + kk]
                        } as f64;
                        if transposed {
                            for xi in 0..spatial(xs) {
                                let iv = unravel(xi, &xs[2..]);
                                let mut ov = vec![0usize; nd];
                                let mut ok = true;
                                for d in 0..nd {
                                    let p = (iv[d] * strides[d] + kv[d] * dilation[d]) as i64
                                        - pad[d] as i64;
                                    if p < 0 || p as usize >= ys[2 + d] {
                                        ok = false;
                                        break;
                                    }
                                    ov[d] = p as usize;
                                }
                                if ok {
                                    y[(b * o + oc) * spatial(ys) + ravel(&ov, &ys[2..])] +=
                                        x[(b * c + ch) * spatial(xs) + xi] as f64 * wv;
                                }
                            }
                        } else {
                            for yi in 0..spatial(ys) {
                                let ov = unravel(yi, &ys[2..]);
                                let mut iv = vec![0usize; nd];
                                let mut ok = true;
                                for d in 0..nd {
                                    let p = (ov[d] * strides[d] + kv[d] * dilation[d]) as i64
                                        - pad[d] as i64;
                                    if p < 0 || p as usize >= xs[2 + d] {
                                        ok = false;
                                        break;
                                    }
                                    iv[d] = p as usize;
                                }
                                if ok {
                                    y[(b * o + oc) * spatial(ys) + yi] +=
                                        x[(b * c + ch) * spatial(xs) + ravel(&iv, &xs[2..])] as f64
                                            * wv;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    y.into_iter().map(|v| v as f32).collect()
}

fn dims_text(d: &[usize]) -> String {
    let v: Vec<String> = d.iter().map(|x| x.to_string()).collect();
    format!("Tensor[({}), float32]", v.join(", "))
}

/// conv1d, conv3d and the transposed convolutions (2-D and 3-D, grouped, strided, with output
/// padding) through oneDNN, against plain loops; data and weights are inputs of `@main`.
#[test]
fn conv1d_conv3d_and_transposed_convolutions() {
    let lib = dnnl(2);
    struct Case {
        op: &'static str,
        composite: &'static str,
        xs: Vec<usize>,
        ws: Vec<usize>,
        ys: Vec<usize>,
        attrs: &'static str,
        strides: Vec<usize>,
        dilation: Vec<usize>,
        pad: Vec<usize>,
        groups: usize,
    }
    let cases = [
        Case {
            op: "nn.conv1d",
            composite: "dnnl.conv1d",
            xs: vec![2, 4, 17],
            ws: vec![6, 2, 3],
            ys: vec![2, 6, 7],
            attrs: ", strides=[2], padding=[1, 0], dilation=[2], groups=2",
            strides: vec![2],
            dilation: vec![2],
            pad: vec![1],
            groups: 2,
        },
        Case {
            op: "nn.conv3d",
            composite: "dnnl.conv3d",
            xs: vec![1, 3, 5, 6, 7],
            ws: vec![8, 3, 3, 3, 3],
            ys: vec![1, 8, 5, 3, 7],
            attrs: ", strides=[1, 2, 1], padding=[1, 1, 1]",
            strides: vec![1, 2, 1],
            dilation: vec![1, 1, 1],
            pad: vec![1, 1, 1],
            groups: 1,
        },
        Case {
            op: "nn.conv2d_transpose",
            composite: "dnnl.deconv2d",
            xs: vec![1, 4, 5, 6],
            ws: vec![4, 3, 3, 3],
            ys: vec![1, 6, 10, 12],
            attrs: ", channels=6, kernel_size=[3, 3], strides=[2, 2], padding=[1, 1], output_padding=[1, 1], groups=2",
            strides: vec![2, 2],
            dilation: vec![1, 1],
            pad: vec![1, 1],
            groups: 2,
        },
        Case {
            op: "nn.conv3d_transpose",
            composite: "dnnl.deconv3d",
            xs: vec![1, 2, 3, 4, 3],
            ws: vec![2, 5, 2, 2, 2],
            ys: vec![1, 5, 4, 5, 4],
            attrs: ", channels=5, kernel_size=[2, 2, 2]",
            strides: vec![1, 1, 1],
            dilation: vec![1, 1, 1],
            pad: vec![0, 0, 0],
            groups: 1,
        },
    ];
    for c in cases {
        let (xt, wt) = (dims_text(&c.xs), dims_text(&c.ws));
        let body = format!("{}(%a0, %a1{})", c.op, c.attrs);
        let text = partition("dnnl", c.composite, &[(&xt, false), (&wt, false)], &body);
        let m = load_text_ok(c.composite, &text);
        let w = Weights::new(1);
        let mw = w.for_module(&m);
        let x = Arc::new(
            mw.random_input(
                "x0",
                &Shape {
                    dtype: DType::F32,
                    dims: c.xs.clone(),
                },
            )
            .unwrap(),
        );
        let wgt = Arc::new(
            mw.random_input(
                "x1",
                &Shape {
                    dtype: DType::F32,
                    dims: c.ws.clone(),
                },
            )
            .unwrap(),
        );
        let (got, kernels, warnings) =
            run_module(&m, vec![lib.clone()], 2, Some(&[x.clone(), wgt.clone()]));
        assert!(warnings.is_empty(), "{}: {warnings:?}", c.composite);
        assert_eq!(kernels, ["dnnl"], "{}", c.composite);
        let want = conv_loops(
            &x.f32_view(),
            &c.xs,
            &wgt.f32_view(),
            &c.ws,
            &c.ys,
            &c.strides,
            &c.dilation,
            &c.pad,
            c.groups,
            c.op.ends_with("transpose"),
        );
        let want = Tensor::from_slice(DType::F32, &c.ys, &want).unwrap();
        check_close(c.composite, &got[0], &want);
    }
}

// ---------------------------------------------------------------------------------------------
// GEMMs, normalisations, pooling

/// Dense layers: many rows and one row (a matmul), 3-D data, each TVM tail, GELU post-ops
/// after a reshape, a bias given first, a `sum` and a full-shape binary post-op.
#[test]
fn dense_shape_classes() {
    let lib = dnnl(2);
    let w = "Tensor[(24, 16), float32]";
    let b = "Tensor[(24), float32]";
    for (name, x, body, extra) in [
        ("dnnl.dense", "Tensor[(7, 16), float32]", "nn.dense(%a0, %a1, units=24)", vec![]),
        ("dnnl.dense", "Tensor[(1, 16), float32]", "nn.dense(%a0, %a1, units=24)", vec![]),
        ("dnnl.dense", "Tensor[(2, 3, 16), float32]", "nn.dense(%a0, %a1, units=24)", vec![]),
        ("dnnl.dense_bias", "Tensor[(5, 16), float32]", "add(%a2, nn.dense(%a0, %a1, units=24))", vec![b]),
        ("dnnl.dense_bias", "Tensor[(1, 16), float32]", "add(nn.dense(%a0, %a1, units=24), %a2)", vec!["Tensor[(1, 24), float32]"]),
        ("dnnl.dense_bias_relu", "Tensor[(5, 16), float32]", "nn.relu(add(nn.dense(%a0, %a1, units=24), %a2))", vec![b]),
        ("dnnl.dense_bias_tanh", "Tensor[(5, 16), float32]", "tanh(add(nn.dense(%a0, %a1, units=24), %a2))", vec![b]),
        ("dnnl.dense_bias_sigmoid", "Tensor[(5, 16), float32]", "sigmoid(add(nn.dense(%a0, %a1, units=24), %a2))", vec![b]),
        ("dnnl.dense_bias_clip", "Tensor[(5, 16), float32]", "clip(add(nn.dense(%a0, %a1, units=24), %a2), a_min=-0.1f, a_max=0.1f)", vec![b]),
        ("dnnl.dense_bias_gelu", "Tensor[(5, 16), float32]", "%1 = add(nn.dense(%a0, %a1, units=24), %a2);\n    multiply(multiply(%1, add(erf(divide(%1, 1.41421f)), 1f)), 0.5f)", vec![b]),
        ("dnnl.dense_bias_swish", "Tensor[(5, 16), float32]", "%1 = add(nn.dense(%a0, %a1, units=24), %a2);\n    multiply(%1, sigmoid(%1))", vec![b]),
        ("dnnl.dense_bias_mish", "Tensor[(5, 16), float32]", "%1 = add(nn.dense(%a0, %a1, units=24), %a2);\n    multiply(%1, tanh(log(add(exp(%1), 1f))))", vec![b]),
        ("dnnl.dense_relu", "Tensor[(5, 16), float32]", "nn.relu(nn.dense(%a0, %a1, units=24))", vec![]),
        (
            "dnnl.dense_bias_gelu_tanh",
            "Tensor[(6, 16), float32]",
            "%1 = reshape(add(nn.dense(%a0, %a1, units=24), %a2), newshape=[2, 3, 24]);\n    \
             multiply(multiply(%1, 0.5f), add(tanh(multiply(add(%1, multiply(power(%1, 3f), 0.044715f)), 0.797885f)), 1f))",
            vec![b],
        ),
        (
            "dnnl.dense_bias_gelu_erf",
            "Tensor[(6, 16), float32]",
            "%1 = add(nn.dense(%a0, %a1, units=24), %a2);\n    \
             multiply(multiply(%1, add(erf(multiply(%1, 0.707107f)), 1f)), 0.5f)",
            vec![b],
        ),
        // Without a bias (simplification drops a bias of zeros).
        (
            "dnnl.dense_gelu_tanh",
            "Tensor[(6, 16), float32]",
            "%1 = reshape(nn.dense(%a0, %a1, units=24), newshape=[2, 3, 24]);\n    \
             multiply(multiply(%1, 0.5f), add(tanh(multiply(add(%1, multiply(power(%1, 3f), 0.044715f)), 0.797885f)), 1f))",
            vec![],
        ),
        (
            "dnnl.dense_gelu_erf",
            "Tensor[(6, 16), float32]",
            "%1 = nn.dense(%a0, %a1, units=24);\n    \
             multiply(multiply(%1, add(erf(multiply(%1, 0.707107f)), 1f)), 0.5f)",
            vec![],
        ),
        (
            "dnnl.dense_bias_sum",
            "Tensor[(6, 16), float32]",
            "add(add(nn.dense(%a0, %a1, units=24), %a2), %a3)",
            vec![b, "Tensor[(6, 24), float32]"],
        ),
        // Two full-shape summands (Falcon's parallel residual): oneDNN takes one `sum`, the
        // second is a binary add.
        (
            "dnnl.dense_bias_sum",
            "Tensor[(6, 16), float32]",
            "add(add(nn.dense(%a0, %a1, units=24), %a2), %a3)",
            vec!["Tensor[(6, 24), float32]", "Tensor[(6, 24), float32]"],
        ),
        (
            "dnnl.dense_bias",
            "Tensor[(6, 16), float32]",
            "add(nn.dense(%a0, %a1, units=24), %a2)",
            vec!["Tensor[(6, 24), float32]"],
        ),
    ] {
        let mut params: Vec<(&str, bool)> = vec![(x, false), (w, true)];
        for (i, e) in extra.iter().enumerate() {
            // A bias is a constant; a summand is an input.
            params.push((e, i == 0 && !e.starts_with("Tensor[(6, 24)")));
        }
        agree(&format!("{name} {x} {body}"), &partition("dnnl", name, &params, body), lib.clone(), 2);
    }
}

/// `nn.batch_matmul` with every combination of transposes (as strides, not copies) and a batch
/// of one broadcast, on oneDNN and on OpenBLAS with 1 and 2 threads.
#[test]
fn batch_matmul_transposes_and_broadcast() {
    for (ta, tb, a, b, out) in [
        (
            false,
            false,
            "Tensor[(6, 5, 7), float32]",
            "Tensor[(6, 7, 3), float32]",
            (6, 5, 3),
        ),
        (
            false,
            true,
            "Tensor[(6, 5, 7), float32]",
            "Tensor[(6, 3, 7), float32]",
            (6, 5, 3),
        ),
        (
            true,
            false,
            "Tensor[(6, 7, 5), float32]",
            "Tensor[(6, 7, 3), float32]",
            (6, 5, 3),
        ),
        (
            true,
            true,
            "Tensor[(6, 7, 5), float32]",
            "Tensor[(6, 3, 7), float32]",
            (6, 5, 3),
        ),
        (
            false,
            true,
            "Tensor[(1, 5, 7), float32]",
            "Tensor[(6, 3, 7), float32]",
            (6, 5, 3),
        ),
        (
            false,
            false,
            "Tensor[(6, 1, 7), float32]",
            "Tensor[(1, 7, 3), float32]",
            (6, 1, 3),
        ),
    ] {
        let _ = out;
        let body = format!(
            "nn.batch_matmul(%a0, %a1, transpose_a={}, transpose_b={})",
            if ta { "True" } else { "False" },
            if tb { "True" } else { "False" }
        );
        let params = [(a, false), (b, false)];
        agree(
            &format!("dnnl {body} {a} {b}"),
            &partition("dnnl", "dnnl.batch_matmul", &params, &body),
            dnnl(2),
            2,
        );
        for threads in [1, 2] {
            agree(
                &format!("openblas {threads} {body} {a} {b}"),
                &partition("openblas", "openblas.batch_matmul", &params, &body),
                blas(threads),
                threads,
            );
        }
    }
}

/// `dnnl.batch_matmul` whose operands are an attention block's heads (reshape, transpose,
/// reshape inside the composite): oneDNN reads them through strides, for one sequence (a 3-D
/// view), for two (the batch axis stays split in two), beside a plain operand, transposed, and
/// broadcast. A chain that is no strided view falls back to the other backends, with the same
/// results.
#[test]
fn batch_matmul_reads_attention_heads_through_strides() {
    let heads = |x: &str, b: usize, perm: &str, out: &str| {
        format!("reshape(transpose(reshape({x}, newshape=[{b}, 8, 3, 8]), axes={perm}), newshape={out})")
    };
    let bmm =
        |a: String, b: String, tb: &str| format!("nn.batch_matmul({a}, {b}, transpose_b={tb})");
    let (seq1, seq2) = ("Tensor[(1, 8, 24), float32]", "Tensor[(2, 8, 24), float32]");
    let (q1, k1) = (
        heads("%a0", 1, "[0, 2, 1, 3]", "[3, 8, 8]"),
        heads("%a1", 1, "[0, 2, 3, 1]", "[3, 8, 8]"),
    );
    let q2 = heads("%a0", 2, "[0, 2, 1, 3]", "[6, 8, 8]");
    let k2 = heads("%a1", 2, "[0, 2, 3, 1]", "[6, 8, 8]");
    let v2 = heads("%a1", 2, "[0, 2, 1, 3]", "[6, 8, 8]");
    let cases = [
        // Queries times keys, one sequence ([1, 8, 24] = 8 positions of 3 heads of 8).
        (bmm(q1, k1, "False"), seq1, seq1),
        // Two sequences: the heads of both in one batch of 6.
        (bmm(q2.clone(), k2, "False"), seq2, seq2),
        // Attention weights (plain) times values (heads), and the keys transposed by the flag.
        (
            bmm("%a0".into(), v2.clone(), "False"),
            "Tensor[(6, 8, 8), float32]",
            seq2,
        ),
        (bmm(q2, v2.clone(), "True"), seq2, seq2),
        // One matrix broadcast over the heads of two sequences.
        (
            bmm("%a0".into(), v2, "False"),
            "Tensor[(1, 5, 8), float32]",
            seq2,
        ),
    ];
    for (body, a, b) in &cases {
        let params = [(*a, false), (*b, false)];
        agree(
            &format!("dnnl {body}"),
            &partition("dnnl", "dnnl.batch_matmul", &params, body),
            dnnl(2),
            2,
        );
    }
    // The last two axes of the transposed heads merged: not a strided view.
    let body = format!(
        "nn.batch_matmul({}, %a1, transpose_b=False)",
        heads("%a0", 1, "[0, 2, 1, 3]", "[1, 3, 64]")
    );
    let params = [
        ("Tensor[(1, 8, 24), float32]", false),
        ("Tensor[(1, 64, 4), float32]", false),
    ];
    let m = load_text_ok(
        "fallback",
        &partition("dnnl", "dnnl.batch_matmul", &params, &body),
    );
    let (got, _, warnings) = run_module(&m, vec![dnnl(2)], 2, None);
    assert!(
        warnings.iter().any(|w| w.contains("not a strided view")),
        "{warnings:?}"
    );
    let (want, _, _) = run_module(&m, Vec::new(), 2, None);
    check_close("fallback", &got[0], &want[0]);
}

/// A residual added to a dense layer's result, with and without a bias, reshaped first (as
/// GPT-2 writes it) or not: oneDNN's `sum` post-op on the same bytes.
#[test]
fn dense_with_a_residual_sum() {
    let x = "Tensor[(6, 8), float32]";
    let w = "Tensor[(16, 8), float32]";
    let b = "Tensor[(16), float32]";
    for (composite, body, params) in [
        (
            "dnnl.dense_bias_residual",
            "add(reshape(add(nn.dense(%a0, %a1), %a2), newshape=[1, 6, 16]), %a3)",
            vec![
                (x, false),
                (w, true),
                (b, true),
                ("Tensor[(1, 6, 16), float32]", false),
            ],
        ),
        (
            "dnnl.dense_residual",
            "add(reshape(nn.dense(%a0, %a1), newshape=[2, 3, 16]), %a2)",
            vec![
                (x, false),
                (w, true),
                ("Tensor[(2, 3, 16), float32]", false),
            ],
        ),
        (
            "dnnl.dense_residual",
            "add(nn.dense(%a0, %a1), %a2)",
            vec![(x, false), (w, true), ("Tensor[(6, 16), float32]", false)],
        ),
    ] {
        agree(
            &format!("{composite} {body}"),
            &partition("dnnl", composite, &params, body),
            dnnl(2),
            2,
        );
    }
}

/// OpenBLAS's dense layers (many rows, one row through sgemv, 3-D data), biases (`[N]`,
/// `[1, N]`, given first) and `nn.matmul` with every transpose.
#[test]
fn openblas_dense_and_matmul() {
    let w = "Tensor[(24, 16), float32]";
    for (name, x, body, extra) in [
        (
            "openblas.dense",
            "Tensor[(9, 16), float32]",
            "nn.dense(%a0, %a1, units=24)",
            None,
        ),
        (
            "openblas.dense",
            "Tensor[(1, 16), float32]",
            "nn.dense(%a0, %a1, units=24)",
            None,
        ),
        (
            "openblas.dense",
            "Tensor[(2, 4, 16), float32]",
            "nn.dense(%a0, %a1, units=24)",
            None,
        ),
        (
            "openblas.dense_bias",
            "Tensor[(9, 16), float32]",
            "add(nn.dense(%a0, %a1, units=24), %a2)",
            Some("Tensor[(24), float32]"),
        ),
        (
            "openblas.dense_bias",
            "Tensor[(1, 16), float32]",
            "add(%a2, nn.dense(%a0, %a1, units=24))",
            Some("Tensor[(1, 24), float32]"),
        ),
    ] {
        let mut params: Vec<(&str, bool)> = vec![(x, false), (w, true)];
        if let Some(e) = extra {
            params.push((e, true));
        }
        for threads in [1, 2] {
            agree(
                &format!("{name} {x} {body} {threads}"),
                &partition("openblas", name, &params, body),
                blas(threads),
                threads,
            );
        }
    }
    for (ta, tb, a, b) in [
        (
            false,
            false,
            "Tensor[(5, 7), float32]",
            "Tensor[(7, 3), float32]",
        ),
        (
            false,
            true,
            "Tensor[(5, 7), float32]",
            "Tensor[(3, 7), float32]",
        ),
        (
            true,
            false,
            "Tensor[(7, 5), float32]",
            "Tensor[(7, 3), float32]",
        ),
        (
            true,
            true,
            "Tensor[(2, 7, 5), float32]",
            "Tensor[(3, 7), float32]",
        ),
        (
            false,
            true,
            "Tensor[(1, 7), float32]",
            "Tensor[(3, 7), float32]",
        ),
        (
            false,
            false,
            "Tensor[(1, 7), float32]",
            "Tensor[(7, 3), float32]",
        ),
    ] {
        let body = format!(
            "nn.matmul(%a0, %a1, units=None, transpose_a={}, transpose_b={})",
            if ta { "True" } else { "False" },
            if tb { "True" } else { "False" }
        );
        let text = partition(
            "openblas",
            "openblas.matmul",
            &[(a, false), (b, true)],
            &body,
        );
        // Compared with the product written out here (B as [N, K]) after the transposes.
        let m = load_text_ok("matmul", &text);
        let (got, kernels, warnings) = run_module(&m, vec![blas(2)], 2, None);
        assert!(
            warnings.is_empty() && kernels == ["openblas"],
            "{body}: {kernels:?} {warnings:?}"
        );
        let w = Weights::new(1);
        let mw = w.for_module(&m);
        let dims = |t: &str| -> Vec<usize> {
            t.trim_start_matches("Tensor[(")
                .split(')')
                .next()
                .unwrap()
                .split(", ")
                .map(|d| d.parse().unwrap())
                .collect()
        };
        let (ad, bd) = (dims(a), dims(b));
        let av = mw
            .random_input(
                "x0",
                &Shape {
                    dtype: DType::F32,
                    dims: ad.clone(),
                },
            )
            .unwrap();
        let bm = m.main().unwrap();
        let bexpr = match m.expr(m.func(bm).body) {
            collage::ir::Expr::Call { args, .. } => args[1],
            _ => unreachable!(),
        };
        let bv = mw.constant(&m, bexpr).unwrap();
        let (af, bf) = (av.f32_view(), bv.f32_view());
        let r = ad.len();
        let (batch, mm, k) = if ta {
            (ad[..r - 2].iter().product::<usize>(), ad[r - 1], ad[r - 2])
        } else {
            (1, ad[..r - 1].iter().product::<usize>(), ad[r - 1])
        };
        let n = if tb { bd[0] } else { bd[1] };
        let mut want = vec![0f32; batch * mm * n];
        for p in 0..batch {
            for i in 0..mm {
                for j in 0..n {
                    let mut s = 0f64;
                    for q in 0..k {
                        let x = if ta {
                            af[p * k * mm + q * mm + i]
                        } else {
                            af[i * k + q]
                        };
                        let y = if tb { bf[j * k + q] } else { bf[q * n + j] };
                        s += x as f64 * y as f64;
                    }
                    want[(p * mm + i) * n + j] = s as f32;
                }
            }
        }
        let want = Tensor::from_slice(DType::F32, got[0].shape(), &want).unwrap();
        check_close(&body, &got[0], &want);
    }
}

/// Layer norms (`nn.layer_norm` with and without scale and shift, GPT-2's decomposed form),
/// softmax over the last and a middle axis, the GELU chains alone, pooling.
#[test]
fn normalisation_softmax_gelu_and_pooling() {
    let lib = dnnl(2);
    let x = "Tensor[(4, 6, 32), float32]";
    let v = "Tensor[(32), float32]";
    let img = t4(1, 16, 9, 9);
    for (name, body, params) in [
        ("dnnl.layer_norm", "nn.layer_norm(%a0, %a1, %a2)", vec![(x, false), (v, true), (v, true)]),
        ("dnnl.layer_norm", "nn.layer_norm(%a0, %a1, %a2, epsilon=0.001f, center=False)", vec![(x, false), (v, true), (v, true)]),
        ("dnnl.layer_norm", "nn.layer_norm(%a0, %a1, %a2, scale=False)", vec![(x, false), (v, true), (v, true)]),
        (
            "dnnl.layer_norm_decomposed",
            "%1 = subtract(%a0, mean(%a0, axis=[-1], keepdims=True));\n    \
             %2 = sqrt(add(mean(power(%1, 2f), axis=[-1], keepdims=True), 1e-05f));\n    \
             add(multiply(divide(%1, %2), meta[relay.Constant][5] /* ty=Tensor[(32), float32] */), meta[relay.Constant][6] /* ty=Tensor[(32), float32] */)",
            vec![(x, false)],
        ),
        // Without the scale and shift (simplification removes a gamma of ones and a beta of
        // zeros, or folds them into the next dense layer), or with one of them.
        (
            "dnnl.layer_norm_decomposed",
            "%1 = subtract(%a0, mean(%a0, axis=[-1], keepdims=True));\n    \
             %2 = sqrt(add(mean(power(%1, 2f), axis=[-1], keepdims=True), 1e-05f));\n    \
             divide(%1, %2)",
            vec![(x, false)],
        ),
        (
            "dnnl.layer_norm_decomposed",
            "%1 = subtract(%a0, mean(%a0, axis=[2], keepdims=True));\n    \
             %2 = sqrt(add(mean(power(%1, 2f), axis=[2], keepdims=True), 1e-05f));\n    \
             multiply(divide(%1, %2), meta[relay.Constant][5] /* ty=Tensor[(32), float32] */)",
            vec![(x, false)],
        ),
        (
            "dnnl.layer_norm_decomposed",
            "%1 = subtract(%a0, mean(%a0, axis=[-1], keepdims=True));\n    \
             %2 = sqrt(add(mean(power(%1, 2f), axis=[-1], keepdims=True), 1e-05f));\n    \
             add(divide(%1, %2), meta[relay.Constant][6] /* ty=Tensor[(32), float32] */)",
            vec![(x, false)],
        ),
        ("dnnl.softmax", "nn.softmax(%a0)", vec![(x, false)]),
        ("dnnl.softmax", "nn.softmax(%a0, axis=1)", vec![(x, false)]),
        (
            "dnnl.gelu_tanh",
            "multiply(multiply(%a0, 0.5f), add(tanh(multiply(add(%a0, multiply(power(%a0, 3f), 0.044715f)), 0.797885f)), 1f))",
            vec![(x, false)],
        ),
        ("dnnl.gelu_erf", "multiply(multiply(%a0, add(erf(multiply(%a0, 0.707107f)), 1f)), 0.5f)", vec![(x, false)]),
        ("dnnl.max_pool2d", "nn.max_pool2d(%a0, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])", vec![(&img, false)]),
        // Windows made of padding only: the lowest finite float, in oneDNN as in TVM and the
        // interpreter.
        ("dnnl.max_pool2d", "nn.max_pool2d(%a0, pool_size=[2, 2], padding=[0, 0, 2, 2])", vec![(&img, false)]),
        ("dnnl.avg_pool2d", "nn.avg_pool2d(%a0, pool_size=[3, 3], strides=[2, 2], padding=[1, 0, 1, 0])", vec![(&img, false)]),
        ("dnnl.avg_pool2d", "nn.avg_pool2d(%a0, pool_size=[2, 2], padding=[1, 1], count_include_pad=True)", vec![(&img, false)]),
        ("dnnl.global_avg_pool2d", "nn.global_avg_pool2d(%a0)", vec![(&img, false)]),
    ] {
        agree(&format!("{name}: {body}"), &partition("dnnl", name, &params, body), lib.clone(), 2);
    }
}

// ---------------------------------------------------------------------------------------------
// Partitions of several composites

/// A partition of several composites whose activations stay in oneDNN's layouts: convolutions
/// with a batch norm and relu, a `sum` taken over in place (its summand is read by nothing
/// else) and one copied (its summand is also the convolution's source and a result), pooling,
/// and two results (one of them also used inside). Reorders happen only at the boundary.
#[test]
fn multi_composite_partition() {
    let text = r#"#[version = "0.0.5"]
def @part(%p0: Tensor[(1, 16, 14, 14), float32], %p1: Tensor[(16, 16, 3, 3), float32], %p2: Tensor[(16, 16, 1, 1), float32], Primitive=1, Compiler="dnnl", global_symbol="part") {
  %0 = fn (%a0: Tensor[(1, 16, 14, 14), float32], Composite="dnnl.conv2d_bn_relu") {
    %10 = nn.conv2d(%a0, meta[relay.Constant][0] /* ty=Tensor[(16, 16, 3, 3), float32] */, padding=[1, 1]);
    %11 = nn.batch_norm(%10, meta[relay.Constant][1] /* ty=Tensor[(16), float32] */, meta[relay.Constant][2] /* ty=Tensor[(16), float32] */, meta[relay.Constant][3] /* ty=Tensor[(16), float32] */, meta[relay.Constant][4] /* ty=Tensor[(16), float32] */);
    nn.relu(%11.0)
  };
  %1 = fn (%b0: Tensor[(1, 16, 14, 14), float32], %b1: Tensor[(16, 16, 3, 3), float32], %b2: Tensor[(1, 16, 14, 14), float32], Composite="dnnl.conv2d_sum") {
    add(nn.conv2d(%b0, %b1, padding=[1, 1]), %b2)
  };
  %2 = fn (%c0: Tensor[(1, 16, 14, 14), float32], %c1: Tensor[(16, 16, 1, 1), float32], %c2: Tensor[(1, 16, 14, 14), float32], Composite="dnnl.conv2d_sum_relu") {
    nn.relu(add(nn.conv2d(%c0, %c1), %c2))
  };
  %3 = fn (%d0: Tensor[(1, 16, 14, 14), float32], Composite="dnnl.max_pool2d") {
    nn.max_pool2d(%d0, pool_size=[2, 2], strides=[2, 2])
  };
  %4 = %0(%p0);
  %5 = %1(%p0, %p1, %4);
  %6 = %2(%5, %p2, %5);
  %7 = %3(%6);
  (%7, %5)
}
def @main(%x: Tensor[(1, 16, 14, 14), float32]) {
  @part(%x, meta[relay.Constant][5] /* ty=Tensor[(16, 16, 3, 3), float32] */, meta[relay.Constant][6] /* ty=Tensor[(16, 16, 1, 1), float32] */)
}
"#;
    for threads in [1, 2] {
        agree("multi-composite partition", text, dnnl(threads), threads);
    }
    use collage::runtime::backend::dnnl::plan::{Base, StepKind, Storage};
    let p = part_plan("multi", text);
    let computes = p
        .steps
        .iter()
        .filter(|s| s.kind == StepKind::Compute)
        .count();
    assert_eq!(computes, 4, "one primitive per composite call");
    assert!(
        p.values.iter().any(|v| matches!(v.base, Base::InPlace(_))),
        "the first sum is taken over in place"
    );
    // Every reorder reads a parameter or a constant (the boundary, weights); copies are the
    // summands of `sum` post-ops and results.
    for s in &p.steps {
        let from = p.storage[s.args[0].1];
        match s.kind {
            StepKind::Reorder => assert!(
                matches!(from, Storage::Param(_) | Storage::Const(_)),
                "a reorder inside the partition: {from:?}"
            ),
            StepKind::Copy | StepKind::Compute => {}
        }
    }
    let copies = p.steps.iter().filter(|s| s.kind == StepKind::Copy).count();
    assert!(copies >= 1, "the second sum copies its summand");
}

/// What a cold candidate evicts before each call of a oneDNN partition
/// (`Prepared::resident`): its weights, as given and as reordered once, but not the
/// activations between its primitives, which every kernel of a model writes and reads and
/// which are as warm inside a model as the activations between kernels.
#[test]
fn a_partition_keeps_its_weights_resident_but_not_its_activations() {
    let c = |i: usize, t: &str| format!("meta[relay.Constant][{i}] /* ty=Tensor[{t}, float32] */");
    // 1 x 1 convolutions of 8 channels over 64 x 64 pixels: 256-byte weights, 128 KiB
    // activations.
    let text = format!(
        "#[version = \"0.0.5\"]\n\
         def @part(%p0: Tensor[(1, 8, 64, 64), float32], Primitive=1, Compiler=\"dnnl\", global_symbol=\"part\") {{\n  \
         %0 = fn (%a0: Tensor[(1, 8, 64, 64), float32], Composite=\"dnnl.conv2d_bias_relu\") {{\n    \
         nn.relu(nn.bias_add(nn.conv2d(%a0, {w0}, channels=8, kernel_size=[1, 1]), {b0}))\n  }};\n  \
         %1 = fn (%b0: Tensor[(1, 8, 64, 64), float32], Composite=\"dnnl.conv2d_bias_relu\") {{\n    \
         nn.relu(nn.bias_add(nn.conv2d(%b0, {w1}, channels=8, kernel_size=[1, 1]), {b1}))\n  }};\n  \
         %2 = fn (%c0: Tensor[(1, 8, 64, 64), float32], Composite=\"dnnl.conv2d_bias_relu\") {{\n    \
         nn.relu(nn.bias_add(nn.conv2d(%c0, {w2}, channels=8, kernel_size=[1, 1]), {b2}))\n  }};\n  \
         %2(%1(%0(%p0)))\n}}\n\
         def @main(%x: Tensor[(1, 8, 64, 64), float32]) {{\n  @part(%x)\n}}\n",
        w0 = c(0, "(8, 8, 1, 1)"),
        b0 = c(1, "(8)"),
        w1 = c(2, "(8, 8, 1, 1)"),
        b1 = c(3, "(8)"),
        w2 = c(4, "(8, 8, 1, 1)"),
        b2 = c(5, "(8)"),
    );
    agree("three convolutions", &text, dnnl(2), 2);
    let m = load_text_ok("resident", &text);
    let opts = Options {
        threads: 2,
        backends: Backends {
            list: vec![dnnl(2)],
        },
        grouping: None,
    };
    let (_, x) = run_model(&m, &Weights::new(1), &opts, None);
    assert_eq!(x.kernels().len(), 1, "one oneDNN kernel");
    let mut sizes = Vec::new();
    x.resident(&mut |b| sizes.push(b.len()));
    let total: usize = sizes.iter().sum();
    // Three weights and three biases (the constants), and at most the reordered copies of
    // the weights: a few KiB, and no buffer as large as an activation.
    assert!(sizes.len() >= 6, "resident buffers {sizes:?}");
    assert!(total < 16 << 10, "resident buffers {sizes:?}");
}

/// Two residual blocks in one partition, as a ResNet's identity blocks: the block's input
/// feeds its first convolution and the `sum` of its last. Once the first convolution has read
/// it, the `sum` accumulates into it in place instead of into a copy: into the reorder of the
/// partition's parameter in the first block (when the two primitives agree on the layout), and
/// into the first block's result in the second. With the parameter a constant of the call site,
/// that reorder is overwritten, so it runs on every call: two runs give the same outputs.
#[test]
fn residual_sums_accumulate_in_place() {
    let c = |i: usize, t: &str| format!("meta[relay.Constant][{i}] /* ty=Tensor[{t}, float32] */");
    let block = |k: usize, a: &str, base: usize| {
        format!(
            "  %{f0} = fn (%{a}0: Tensor[(1, 16, 14, 14), float32], Composite=\"dnnl.conv2d_bias_relu\") {{\n    \
             nn.relu(nn.bias_add(nn.conv2d(%{a}0, {w0}), {b0}))\n  }};\n  \
             %{f1} = fn (%{a}1: Tensor[(1, 8, 14, 14), float32], %{a}2: Tensor[(1, 16, 14, 14), float32], Composite=\"dnnl.conv2d_bias_sum_relu\") {{\n    \
             nn.relu(add(nn.bias_add(nn.conv2d(%{a}1, {w1}, padding=[1, 1]), {b1}), %{a}2))\n  }};\n",
            f0 = 2 * k,
            f1 = 2 * k + 1,
            w0 = c(base, "(8, 16, 1, 1)"),
            b0 = c(base + 1, "(8)"),
            w1 = c(base + 2, "(16, 8, 3, 3)"),
            b1 = c(base + 3, "(16)"),
        )
    };
    let body = format!(
        "{}{}  %4 = %0(%p0);\n  %5 = %1(%4, %p0);\n  %6 = %2(%5);\n  %7 = %3(%6, %5);\n  %7\n",
        block(0, "a", 0),
        block(1, "b", 4)
    );
    let part = format!(
        "def @part(%p0: Tensor[(1, 16, 14, 14), float32], Primitive=1, Compiler=\"dnnl\", global_symbol=\"part\") {{\n{body}}}\n"
    );
    let input = format!("#[version = \"0.0.5\"]\n{part}def @main(%x: Tensor[(1, 16, 14, 14), float32]) {{\n  @part(%x)\n}}\n");
    let constant = format!(
        "#[version = \"0.0.5\"]\n{part}def @main() {{\n  @part({})\n}}\n",
        c(8, "(1, 16, 14, 14)")
    );
    for threads in [1, 2] {
        agree("residual blocks", &input, dnnl(threads), threads);
    }
    use collage::runtime::backend::dnnl::plan::{Base, StepKind, Storage};
    let p = part_plan("residual", &input);
    let d = collage::runtime::ffi::dnnl::Dnnl::shared().unwrap();
    let w = Weights::new(1);
    let in_place = p
        .values
        .iter()
        .filter(|v| matches!(v.base, Base::InPlace(_)))
        .count();
    // Copies of summands: every other copy reads the parameter (the entry reorder taken over)
    // or writes the result.
    let copies = p
        .steps
        .iter()
        .filter(|s| {
            s.kind == StepKind::Copy
                && p.storage[s.args[0].1] != Storage::Param(0)
                && !matches!(p.storage[s.args[1].1], Storage::Output(_))
        })
        .count();
    // The reorder of the parameter into the first convolution's layout.
    let entry = p
        .steps
        .iter()
        .find(|s| s.what == "reorder" && p.storage[s.args[0].1] == Storage::Param(0));
    match entry {
        Some(s) => {
            let first_sum_dst = p
                .steps
                .iter()
                .filter(|s| s.kind == StepKind::Compute)
                .nth(1)
                .and_then(|s| s.args.iter().find(|(a, _)| *a == sys_dst()))
                .map(|&(_, v)| v)
                .unwrap();
            if d.md_equal(&p.values[s.args[1].1].md, &p.values[first_sum_dst].md) {
                assert_eq!(s.kind, StepKind::Copy, "the entry reorder is overwritten");
                assert_eq!((in_place, copies), (2, 0), "both sums in place");
            } else {
                assert_eq!((in_place, copies), (1, 1), "the second sum in place");
            }
        }
        // The primitives take the parameter's plain layout as it is: it cannot be overwritten.
        None => assert_eq!((in_place, copies), (1, 1), "the second sum in place"),
    }
    // A constant parameter: the overwritten reorder runs again on the second call.
    let mc = load_text_ok("residual, constant input", &constant);
    let (want, _, _) = run_module(&mc, Vec::new(), 2, None);
    let opts = Options {
        threads: 2,
        backends: Backends {
            list: vec![dnnl(2)],
        },
        grouping: None,
    };
    let mcw = w.for_module(&mc);
    let x = executor::compile(&mc, &mcw, &opts).unwrap_or_else(|d| panic!("{d:?}"));
    assert!(x.kernels().iter().any(|k| k.backend == "dnnl"));
    for run in 0..2 {
        let out = x.run(&[]).unwrap_or_else(|d| panic!("{d:?}"));
        let got: Vec<Tensor> = out
            .value
            .flatten()
            .into_iter()
            .map(|t| (**t).clone())
            .collect();
        check_close(&format!("constant input, run {run}"), &got[0], &want[0]);
    }
}

fn sys_dst() -> std::ffi::c_int {
    collage::runtime::ffi::dnnl::sys::ARG_DST
}

// ---------------------------------------------------------------------------------------------
// What cannot run

/// TVM's table checks no dtypes: its entries match float16 dense layers, which oneDNN 2.6 and
/// sgemm cannot run; a shape and an attribute value a primitive rejects (a rank-1 layer norm,
/// average pooling windows made of padding only); a GELU chain with other constants. Each is
/// unsupported with a reason, falls back to the interpreter with W2310,
/// and the run gives the interpreter's outputs, never a crash.
#[test]
fn unsupported_composites_fall_back() {
    let cases = [
        (
            partition(
                "dnnl",
                "dnnl.dense_bias",
                &[
                    ("Tensor[(4, 8), float16]", false),
                    ("Tensor[(6, 8), float16]", true),
                    ("Tensor[(6), float16]", true),
                ],
                "add(nn.dense(%a0, %a1, units=6), %a2)",
            ),
            "float32 only",
        ),
        (
            // oneDNN's layer normalization needs at least two axes.
            partition(
                "dnnl",
                "dnnl.layer_norm",
                &[
                    ("Tensor[(32), float32]", false),
                    ("Tensor[(32), float32]", true),
                    ("Tensor[(32), float32]", true),
                ],
                "nn.layer_norm(%a0, %a1, %a2)",
            ),
            "oneDNN has no layer normalization",
        ),
        (
            partition(
                "dnnl",
                "dnnl.conv2d_bias_gelu",
                &[(&t4(1, 4, 6, 6), false), (&t4(8, 4, 3, 3), true), ("Tensor[(8, 1, 1), float32]", true)],
                "%1 = add(nn.conv2d(%a0, %a1), %a2);\n    multiply(multiply(%1, add(erf(divide(%1, 2f)), 1f)), 0.5f)",
            ),
            "constants are not GELU's",
        ),
        (
            // An attribute value oneDNN's pooling rejects: windows made of padding only.
            partition(
                "dnnl",
                "dnnl.avg_pool2d",
                &[(&t4(1, 4, 9, 9), false)],
                "nn.avg_pool2d(%a0, pool_size=[2, 2], padding=[3, 3, 3, 3])",
            ),
            "oneDNN has no pooling for these shapes and attributes",
        ),
        (
            partition(
                "openblas",
                "openblas.dense",
                &[("Tensor[(4, 8), float16]", false), ("Tensor[(6, 8), float16]", true)],
                "nn.dense(%a0, %a1, units=6)",
            ),
            "float32 only",
        ),
    ];
    for (text, reason) in cases {
        let m = load_text_ok("unsupported", &text);
        let lib = if text.contains("Compiler=\"dnnl\"") {
            dnnl(1)
        } else {
            blas(1)
        };
        let (got, kernels, warnings) = run_module(&m, vec![lib], 1, None);
        assert_eq!(kernels, ["reference"], "{text}");
        assert!(
            warnings.len() == 1
                && warnings[0].contains(reason)
                && warnings[0].contains("falling back"),
            "{reason}: {warnings:?}"
        );
        let (want, _, _) = run_module(&m, Vec::new(), 1, None);
        assert_eq!(
            got.iter().map(|t| t.bytes().to_vec()).collect::<Vec<_>>(),
            want.iter().map(|t| t.bytes().to_vec()).collect::<Vec<_>>()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Whole models

/// The reference outputs of every corpus model (weights and inputs from seed 1), computed once
/// for the tests that compare against them.
fn reference_outputs(name: &str, m: &Module) -> Vec<Tensor> {
    static CACHE: OnceLock<std::sync::Mutex<BTreeMap<String, Vec<Tensor>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(v) = cache.lock().unwrap().get(name) {
        return v.clone();
    }
    let (v, _, _) = run_module(m, Vec::new(), 2, None);
    cache.lock().unwrap().insert(name.to_string(), v.clone());
    v
}

/// Every corpus model partitioned with `--target tvm_cpu --target dnnl` and with
/// `--target tvm_cpu --target openblas`, run end to end (the library partitions on the library,
/// the native operators as generated code, the rest on the interpreter) against the original
/// on the interpreter. Where the search gives
/// a library nothing (OpenBLAS on the CNNs, whose only GEMM is a one-row classifier that costs
/// the same natively), or the library refuses every partition (TVM's dtype-blind entries on the
/// float16 models), the plan runs on the interpreter only and is not run again here
/// (tests/it/exec.rs shows partitioning preserves meaning bit for bit).
#[test]
fn corpus_models_partitioned_for_each_library_run_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut ran = BTreeMap::new();
    let mut with_native = BTreeSet::new();
    for (name, m) in corpus_and_generated() {
        let file = dir.path().join("model.relay");
        std::fs::write(&file, collage::frontend::relay::print::print_module(&m)).unwrap();
        for lib in ["dnnl", "openblas"] {
            let out = dir.path().join(format!("{lib}.relay"));
            let o = collage_in(
                dir.path(),
                [
                    "partition",
                    file.to_str().unwrap(),
                    // The library composites of the models as written (batch norms included).
                    "--no-simplify",
                    "--target",
                    "tvm_cpu",
                    "--target",
                    lib,
                    "--no-baselines",
                    "-o",
                    out.to_str().unwrap(),
                ],
            );
            if name.starts_with("generated bert") && lib == "openblas" {
                // `nn.layer_norm` is opaque, so the native target has no candidate for it and
                // only oneDNN (of these targets) runs it: no plan without `dnnl`.
                let err = String::from_utf8_lossy(&o.stderr);
                assert!(
                    o.status.code() == Some(1)
                        && err.contains("E2101")
                        && err.contains("nn.layer_norm"),
                    "{name} {lib}: {err}"
                );
                continue;
            }
            assert!(
                o.status.success(),
                "{name} {lib}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let text = std::fs::read_to_string(&out).unwrap();
            if !text.contains(&format!("Compiler=\"{lib}\"")) {
                assert!(
                    lib == "openblas" || is_float16(&name),
                    "{name}: {lib} takes nothing"
                );
                continue;
            }
            let pm = load_text_ok(&name, &text);
            let backend = if lib == "dnnl" { dnnl(2) } else { blas(2) };
            if is_float16(&name) {
                // TVM's dtype-blind entries on float16: refused when the kernels are built, so
                // the whole plan runs on the interpreter (not run again here: tests/it/exec.rs
                // runs these plans and compares them bit for bit).
                let w = Weights::new(1);
                let mw = w.for_module(&pm);
                let opts = Options {
                    threads: 2,
                    backends: Backends {
                        list: vec![backend],
                    },
                    grouping: None,
                };
                let x = executor::compile(&pm, &mw, &opts).unwrap_or_else(|d| panic!("{d:?}"));
                assert!(
                    x.kernels().iter().all(|k| k.backend != lib),
                    "{name}: a float16 partition ran on {lib}"
                );
                assert!(
                    x.warnings
                        .iter()
                        .any(|d| d.message.contains("float32 only")),
                    "{name}: no fallback warning"
                );
                continue;
            }
            // The whole plan as `collage run` runs it: the library partitions on the library,
            // the native operators as generated code (FuseOps groups), the rest on the
            // interpreter.
            let native = Arc::new(Native::new(NativeConfig {
                threads: 2,
                cache_dir: Some(crate::support::cache_dir().to_path_buf()),
                ..NativeConfig::default()
            }));
            let (got, kernels, warnings) = run_plan(&pm, vec![backend, native], 2);
            let on_lib = kernels.iter().filter(|k| *k == lib).count();
            assert!(
                on_lib > 0 && warnings.is_empty(),
                "{name} {lib}: {kernels:?} {warnings:?}"
            );
            if kernels.iter().any(|k| k == "native") {
                with_native.insert(format!("{name} {lib}"));
            }
            let want = reference_outputs(&name, &m);
            assert_eq!(got.len(), want.len(), "{name}");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                check_close(&format!("{name} with {lib}: output{i}"), g, w);
            }
            ran.insert(format!("{name} {lib}"), on_lib);
        }
    }
    for must in [
        "resnet50 dnnl",
        "mobilenet dnnl",
        "gpt2 dnnl",
        "gpt2 openblas",
        "mnist dnnl",
    ] {
        assert!(ran.contains_key(must), "{must} did not run: {ran:?}");
    }
    // The plans mix the backends: native operators between the library partitions.
    for must in ["resnet50 dnnl", "gpt2 dnnl", "gpt2 openblas"] {
        assert!(
            with_native.contains(must),
            "{must}: no generated code ran: {with_native:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The command line

fn collage_env(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_collage"));
    cmd.args(args)
        .current_dir(dir)
        .env("COLLAGE_CACHE_DIR", crate::support::cache_dir());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the binary runs")
}

/// `collage run` reports the threads and which backend ran how many kernels; with oneDNN
/// missing (the loader pointed at a file that does not exist) a native-only plan still runs, a
/// `dnnl` plan is E2308 naming the package, and `--backend reference` runs it on the
/// interpreter.
#[test]
fn run_reports_backends_and_needs_its_libraries() {
    let dir = tempfile::tempdir().unwrap();
    let mnist = root().join("tests/models/mnist.relay");
    let mnist = mnist.to_str().unwrap();
    for (lib, out) in [("dnnl", "dnnl.relay"), ("tvm_cpu", "native.relay")] {
        let mut args = vec![
            "partition",
            mnist,
            "--target",
            "tvm_cpu",
            "--no-baselines",
            "-o",
            out,
        ];
        if lib != "tvm_cpu" {
            args.extend(["--target", lib]);
        }
        let o = collage_in(dir.path(), &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = collage_env(
        dir.path(),
        &[
            "run",
            "dnnl.relay",
            "--threads",
            "2",
            "--format",
            "json",
            "--compare-with",
            mnist,
        ],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["threads"], 2);
    assert!(
        v["kernels"]["by_backend"]["dnnl"].as_u64().unwrap() >= 1,
        "{v}"
    );
    assert_eq!(v["comparisons"][0]["within_tolerance"], true, "{v}");
    let o = collage_env(dir.path(), &["run", "dnnl.relay", "--threads", "1"], &[]);
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("1 thread(s)") && text.contains("dnnl "),
        "{text}"
    );

    let missing = [("COLLAGE_DNNL_LIBRARY", "/nonexistent/libdnnl.so.2")];
    let o = collage_env(dir.path(), &["run", "native.relay"], &missing);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = collage_env(dir.path(), &["run", "dnnl.relay"], &missing);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("error[E2308]"), "{err}");
    assert!(err.contains("apt-get install libdnnl2"), "{err}");
    assert!(err.contains("/nonexistent/libdnnl.so.2"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let o = collage_env(
        dir.path(),
        &["run", "dnnl.relay", "--backend", "reference"],
        &missing,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(!text.contains("dnnl "), "{text}");

    // The same for OpenBLAS.
    let text = partition(
        "openblas",
        "openblas.dense",
        &[
            ("Tensor[(8, 16), float32]", false),
            ("Tensor[(4, 16), float32]", true),
        ],
        "nn.dense(%a0, %a1, units=4)",
    );
    std::fs::write(dir.path().join("blas.relay"), text).unwrap();
    let o = collage_env(dir.path(), &["run", "blas.relay", "--threads", "2"], &[]);
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("(openblas 1)") && text.contains("2 thread(s)"),
        "{text}"
    );
    let missing = [("COLLAGE_OPENBLAS_LIBRARY", "/nonexistent/libopenblas.so.0")];
    let o = collage_env(dir.path(), &["run", "native.relay"], &missing);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = collage_env(dir.path(), &["run", "blas.relay"], &missing);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("error[E2308]"), "{err}");
    assert!(err.contains("apt-get install libopenblas0-openmp"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// The thread count a backend was built with is the calling thread's OpenMP count while its
/// kernels run (oneDNN and OpenBLAS's OpenMP build read it there), whatever it was before.
#[test]
fn kernels_run_with_the_requested_threads() {
    let omp = collage::runtime::ffi::omp::Omp::shared().unwrap();
    for lib in ["dnnl", "openblas"] {
        let text = partition(
            lib,
            &format!("{lib}.dense"),
            &[
                ("Tensor[(8, 16), float32]", false),
                ("Tensor[(4, 16), float32]", true),
            ],
            "nn.dense(%a0, %a1, units=4)",
        );
        let m = load_text_ok("threads", &text);
        for threads in [1, 3] {
            let m = &m;
            let omp = omp.clone();
            std::thread::scope(|s| {
                s.spawn(move || {
                    omp.set_num_threads(7);
                    let w = Weights::new(1);
                    let mw = w.for_module(m);
                    let b = if lib == "dnnl" {
                        dnnl(threads)
                    } else {
                        self::blas(threads)
                    };
                    let unit = Unit::Function {
                        module: m,
                        func: m.def("part").unwrap(),
                    };
                    let p = b
                        .compile(&unit, &mw)
                        .unwrap()
                        .prepare(&[None, None])
                        .unwrap();
                    let x = Arc::new(Tensor::zeros(DType::F32, &[8, 16]).unwrap());
                    let wt = Arc::new(Tensor::zeros(DType::F32, &[4, 16]).unwrap());
                    let mut out = [Tensor::zeros(DType::F32, &[8, 4]).unwrap()];
                    let mem = MemCounter::new(0);
                    p.run(
                        &[x, wt],
                        &mut out,
                        &RunCx {
                            mem: &mem,
                            buffers: None,
                        },
                    )
                    .unwrap();
                    // OpenBLAS's OpenMP build takes its count from the calling thread's
                    // OpenMP count (its own count is process-wide, so other tests move it).
                    assert_eq!(omp.max_threads(), threads, "{lib}");
                });
            });
        }
    }
}

/// OpenBLAS kernels run from several threads at once, with different thread counts, give the
/// results they give alone (OpenBLAS's process-wide state is held by one kernel at a time:
/// without that, 2-11 of these 800 calls came out wrong, in each of 4 runs here).
#[test]
fn openblas_kernels_run_safely_from_several_threads() {
    let n = 384;
    let ty = format!("Tensor[({n}, {n}), float32]");
    let text = partition(
        "openblas",
        "openblas.dense",
        &[(&ty, false), (&ty, false)],
        &format!("nn.dense(%a0, %a1, units={n})"),
    );
    let m = load_text_ok("concurrent", &text);
    let w = Weights::new(1);
    let mw = w.for_module(&m);
    let shape = Shape {
        dtype: DType::F32,
        dims: vec![n, n],
    };
    let inputs = [
        Arc::new(mw.random_input("x0", &shape).unwrap()),
        Arc::new(mw.random_input("x1", &shape).unwrap()),
    ];
    let unit = Unit::Function {
        module: &m,
        func: m.def("part").unwrap(),
    };
    let run = |p: &dyn collage::runtime::exec::kernel::Prepared| {
        let mut out = [Tensor::zeros(DType::F32, &[n, n]).unwrap()];
        let mem = MemCounter::new(0);
        let cx = RunCx {
            mem: &mem,
            buffers: None,
        };
        p.run(&inputs, &mut out, &cx).unwrap();
        let [o] = out;
        o
    };
    let prepared: Vec<Box<dyn collage::runtime::exec::kernel::Prepared>> = [1, 2]
        .iter()
        .map(|&t| {
            blas(t)
                .compile(&unit, &mw)
                .unwrap()
                .prepare(&[None, None])
                .unwrap()
        })
        .collect();
    let want: Vec<Tensor> = prepared.iter().map(|p| run(p.as_ref())).collect();
    let wrong = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for (p, want) in prepared.iter().zip(&want) {
            let (run, wrong) = (&run, &wrong);
            s.spawn(move || {
                for _ in 0..400 {
                    if run(p.as_ref()).bytes() != want.bytes() {
                        wrong.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(
        wrong.into_inner(),
        0,
        "results differ when run concurrently"
    );
}
