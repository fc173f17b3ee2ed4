//! The CPU backends on the micro-benchmark kernels (docs/backends.md, "The micro-benchmark
//! kernels"): dense layers D1-D4, batched matmuls B1-B2, convolutions C1-C4, GPT-2's GELU
//! tail E1 and layer norm E2; and GPT-2's dense layers for one sequence of 128, D5-D9, and its
//! GELU tail after a reshape, E3 (docs/performance.md, "Native GEMM scheduling and GPT-2's
//! shapes"); each through every backend that runs it (oneDNN, OpenBLAS, generated code), on
//! one thread and on two.
//!
//! Each kernel is one partition as the backends receive it (a `Compiler="dnnl"` function with
//! one composite, a `Compiler="openblas"` one, or a `Primitive=1` function for the native
//! backend), compiled and prepared once with its weights as constants of the call site
//! (oneDNN reorders them then, outside the timing). For oneDNN, `kernel` times the primitive
//! alone, its source and destination in the layouts it chose; `boundary` times the reorders
//! between those layouts and the plain row-major tensors at the partition's boundary (only
//! where there are any). OpenBLAS and generated code work on the plain tensors: their figure is
//! the whole call.
//!
//! GPT-2's dense layers (D5-D9) are also timed through OpenBLAS and generated code on cold
//! weights (`.../cold`): before each timed call the kernel's resident buffers (its weights and
//! packed weights) are evicted from the caches, as inside a whole model.
//!
//! Run with `cargo bench --bench libs` (`-- D1` etc. to pick kernels, `-- /dnnl/` a backend,
//! `-- /1T/` a thread count). On a shared machine, see docs/performance.md for how the figures
//! there were taken.

use collage::runtime::backend::dnnl::Part;
use collage::runtime::backend::native::{Config as NativeConfig, Native};
use collage::runtime::backend::openblas::OpenBlasBackend;
use collage::runtime::exec::data::Weights;
use collage::runtime::exec::kernel::MemCounter;
use collage::runtime::exec::kernel::{Backend, Prepared, Unit};
use collage::runtime::measure::flush;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

#[path = "common/kernels.rs"]
mod kernels;
use kernels::{lazy_bench, lazy_bench_with, load, run_prepared, tensors, Setup};

/// The kernel's parameters as the shared set-up takes them.
fn params(k: &KernelSpec) -> impl Iterator<Item = (&'static str, Vec<usize>, bool)> + '_ {
    k.params.iter().map(|q| (q.name, q.dims.clone(), q.weight))
}
use std::sync::Arc;
use std::time::Duration;

/// A parameter of a kernel: its name, its shape, and whether it is a weight (a constant of the
/// call site).
struct Param {
    name: &'static str,
    dims: Vec<usize>,
    weight: bool,
}

fn p(name: &'static str, dims: &[usize], weight: bool) -> Param {
    Param {
        name,
        dims: dims.to_vec(),
        weight,
    }
}

/// One kernel of the note: its parameters, its body in terms of the parameters' names, and the
/// composite each library runs it as (`None`: the library does not run it).
struct KernelSpec {
    name: &'static str,
    params: Vec<Param>,
    body: String,
    dnnl: Option<&'static str>,
    openblas: Option<&'static str>,
    /// Whether oneDNN's partition reorders at its boundary (the convolutions' blocked layouts);
    /// checked when it is prepared.
    reorders: bool,
    /// Whether OpenBLAS and generated code are also timed on cold weights (`cold`: before each
    /// call the weights, packed or not, are evicted from the caches, as inside a whole model
    /// whose weights are far larger than the last-level cache).
    cold: bool,
}

/// As [`lazy_bench`], each timed call after the kernel's resident buffers (its weights and
/// packed weights) are evicted from the caches (`measure::flush`, untimed).
fn lazy_bench_cold(
    c: &mut Criterion,
    id: &str,
    setup: impl FnOnce() -> Setup,
    mut run: impl FnMut(&mut Setup),
) {
    lazy_bench_with(c, id, setup, |bn, s| {
        let mut ranges = Vec::new();
        s.0.resident(&mut |b| ranges.push(flush::Range::of(b)));
        let ranges = flush::distinct(ranges);
        bn.iter_batched(
            || flush::evict(&ranges, None),
            |()| run(s),
            BatchSize::PerIteration,
        )
    });
}

fn ty(dims: &[usize]) -> String {
    let d: Vec<String> = dims.iter().map(|x| x.to_string()).collect();
    format!("Tensor[({}), float32]", d.join(", "))
}

/// The tanh GELU of `x` as GPT-2 writes it.
fn gelu_tanh(x: &str) -> String {
    format!(
        "multiply(multiply({x}, 0.5f), add(tanh(multiply(add({x}, multiply(power({x}, 3f), \
         0.044715f)), 0.797885f)), 1f))"
    )
}

fn dense(name: &'static str, m: usize, k: usize, n: usize) -> KernelSpec {
    KernelSpec {
        name,
        params: vec![p("x", &[m, k], false), p("w", &[n, k], true)],
        body: format!("nn.dense(%x, %w, units={n})"),
        dnnl: Some("dnnl.dense"),
        openblas: Some("openblas.dense"),
        reorders: false,
        cold: m == 128,
    }
}

fn batch_matmul(name: &'static str, b: usize, m: usize, k: usize, n: usize) -> KernelSpec {
    KernelSpec {
        name,
        params: vec![p("a", &[b, m, k], false), p("b", &[b, n, k], false)],
        body: "nn.batch_matmul(%a, %b, transpose_a=False, transpose_b=True)".into(),
        dnnl: Some("dnnl.batch_matmul"),
        openblas: Some("openblas.batch_matmul"),
        reorders: false,
        cold: false,
    }
}

fn conv(name: &'static str, x: &[usize], w: &[usize], attrs: &str) -> KernelSpec {
    KernelSpec {
        name,
        params: vec![p("x", x, false), p("w", w, true)],
        body: format!("nn.conv2d(%x, %w{attrs})"),
        dnnl: Some("dnnl.conv2d"),
        openblas: None,
        reorders: true,
        cold: false,
    }
}

fn kernels() -> Vec<KernelSpec> {
    vec![
        dense("D1 dense 1600x768-3072", 1600, 768, 3072),
        KernelSpec {
            name: "D1 dense+bias+GELU 1600x768-3072",
            params: vec![
                p("x", &[1600, 768], false),
                p("w", &[3072, 768], true),
                p("bias", &[3072], true),
            ],
            body: format!(
                "%0 = add(nn.dense(%x, %w, units=3072), %bias);\n    {}",
                gelu_tanh("%0")
            ),
            dnnl: Some("dnnl.dense_bias_gelu_tanh"),
            openblas: None,
            reorders: false,
            cold: false,
        },
        dense("D2 dense 1600x3072-768", 1600, 3072, 768),
        dense("D3 dense 1600x768-768", 1600, 768, 768),
        dense("D4 dense 1x2048-1000", 1, 2048, 1000),
        dense("D5 dense 128x768-3072", 128, 768, 3072),
        dense("D6 dense 128x3072-768", 128, 3072, 768),
        dense("D7 dense 128x768-2304", 128, 768, 2304),
        dense("D8 dense 128x768-768", 128, 768, 768),
        dense("D9 dense 128x768-50257", 128, 768, 50257),
        batch_matmul("B1 batch_matmul 600x32x64.(32x64)T", 600, 32, 64, 32),
        batch_matmul("B2 batch_matmul 600x32x32.(64x32)T", 600, 32, 32, 64),
        conv(
            "C1 conv 3x3 64-64 56x56",
            &[1, 64, 56, 56],
            &[64, 64, 3, 3],
            ", padding=[1, 1]",
        ),
        KernelSpec {
            name: "C1 conv+bias+relu 3x3 64-64 56x56",
            params: vec![
                p("x", &[1, 64, 56, 56], false),
                p("w", &[64, 64, 3, 3], true),
                p("bias", &[64, 1, 1], true),
            ],
            body: "nn.relu(add(nn.conv2d(%x, %w, padding=[1, 1]), %bias))".into(),
            dnnl: Some("dnnl.conv2d_bias_relu"),
            openblas: None,
            reorders: true,
            cold: false,
        },
        conv(
            "C2 conv 1x1 256-64 56x56",
            &[1, 256, 56, 56],
            &[64, 256, 1, 1],
            "",
        ),
        conv(
            "C3 conv 7x7s2 3-64 224x224",
            &[1, 3, 224, 224],
            &[64, 3, 7, 7],
            ", strides=[2, 2], padding=[3, 3]",
        ),
        conv(
            "C4 depthwise 3x3 32ch 112x112",
            &[1, 32, 112, 112],
            &[32, 1, 3, 3],
            ", padding=[1, 1], groups=32",
        ),
        KernelSpec {
            name: "E1 GELU tail 1600x3072",
            params: vec![p("x", &[1600, 3072], false)],
            body: gelu_tanh("%x"),
            dnnl: Some("dnnl.gelu_tanh"),
            openblas: None,
            reorders: false,
            cold: false,
        },
        KernelSpec {
            name: "E3 GELU tail 128x3072 as 1x128x3072",
            params: vec![p("x", &[128, 3072], false)],
            body: format!(
                "%0 = reshape(%x, newshape=[1, 128, 3072]);\n    {}",
                gelu_tanh("%0")
            ),
            dnnl: None,
            openblas: None,
            reorders: false,
            cold: false,
        },
        KernelSpec {
            name: "E2 layer norm 1600x768",
            params: vec![
                p("x", &[1600, 768], false),
                p("gamma", &[768], true),
                p("beta", &[768], true),
            ],
            body: "%0 = subtract(%x, mean(%x, axis=[-1], keepdims=True));\n    \
                   %1 = sqrt(add(mean(power(%0, 2f), axis=[-1], keepdims=True), 1e-05f));\n    \
                   add(multiply(divide(%0, %1), %gamma), %beta)"
                .into(),
            dnnl: Some("dnnl.layer_norm_decomposed"),
            openblas: None,
            reorders: false,
            cold: false,
        },
    ]
}

/// The kernel as a partition: `Compiler=compiler` with one composite, or (`None`) a
/// `Primitive=1` function for the native backend.
fn partition_text(k: &KernelSpec, compiler: Option<(&str, &str)>) -> String {
    let decl: Vec<String> = k
        .params
        .iter()
        .map(|q| format!("%{}: {}", q.name, ty(&q.dims)))
        .collect();
    let decl = decl.join(", ");
    match compiler {
        None => format!(
            "#[version = \"0.0.5\"]\ndef @part({decl}, Primitive=1) {{\n    {}\n}}\n",
            k.body
        ),
        Some((compiler, composite)) => {
            let uses: Vec<String> = k.params.iter().map(|q| format!("%{}", q.name)).collect();
            format!(
                "#[version = \"0.0.5\"]\n\
                 def @part({decl}, Primitive=1, Compiler=\"{compiler}\", global_symbol=\"part\") {{\n  \
                 %100 = fn ({decl}, Composite=\"{composite}\") {{\n    {}\n  }};\n  \
                 %100({})\n}}\n",
                k.body,
                uses.join(", ")
            )
        }
    }
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

fn bench_libs(c: &mut Criterion) {
    let omp = collage::runtime::ffi::omp::Omp::shared().unwrap_or_else(|e| panic!("{e}"));
    let cache = tempfile::tempdir().expect("a temporary kernel cache");
    let mem = MemCounter::new(0);
    for k in kernels() {
        for threads in [1usize, 2] {
            let tag = format!("{threads}T");
            // oneDNN: the primitive in its layouts, and the boundary reorders (where the
            // partition has any).
            if let Some(composite) = k.dnnl {
                let mut parts = vec![("kernel", Part::Compute)];
                if k.reorders {
                    parts.push(("boundary", Part::Boundary));
                }
                for (what, part) in parts {
                    lazy_bench(
                        c,
                        &format!("{}/dnnl/{tag}/{what}", k.name),
                        || {
                            let s = kernels::dnnl_setup(
                                &partition_text(&k, Some(("dnnl", composite))),
                                k.name,
                                params(&k),
                                threads,
                            );
                            assert_eq!(
                                s.0.step_counts().1 > 0,
                                k.reorders,
                                "{}: boundary reorders",
                                k.name
                            );
                            s
                        },
                        |(prepared, inputs, outputs)| {
                            prepared.run_part(inputs, outputs, part).expect("runs")
                        },
                    );
                }
            }
            // OpenBLAS and generated code: the whole call on plain tensors.
            let mut others: Vec<(&str, Option<&str>)> = Vec::new();
            if let Some(composite) = k.openblas {
                others.push(("openblas", Some(composite)));
            }
            others.push(("native", None));
            for (name, composite) in others {
                let setup = || {
                    let (b, text): (Arc<dyn Backend>, String) = match composite {
                        Some(composite) => (
                            Arc::new(
                                OpenBlasBackend::new(threads).unwrap_or_else(|e| panic!("{e}")),
                            ),
                            partition_text(&k, Some(("openblas", composite))),
                        ),
                        None => (
                            Arc::new(Native::new(NativeConfig {
                                threads,
                                cache_dir: Some(cache.path().to_path_buf()),
                                ..NativeConfig::default()
                            })),
                            partition_text(&k, None),
                        ),
                    };
                    let m = load(&text);
                    let weights = Weights::new(0);
                    let mw = weights.for_module(&m);
                    let unit = Unit::Function {
                        module: &m,
                        func: m.def("part").expect("@part"),
                    };
                    let kernel = b
                        .compile(&unit, &mw)
                        .unwrap_or_else(|u| panic!("{}: {name}: {}", k.name, u.message));
                    let (consts, inputs, outputs) = tensors(&m, params(&k));
                    let prepared: Box<dyn Prepared> = kernel.prepare(&consts).expect("prepares");
                    (prepared, inputs, outputs)
                };
                let run = |s: &mut Setup| run_prepared(s, &omp, threads, &mem);
                lazy_bench(c, &format!("{}/{name}/{tag}/call", k.name), setup, run);
                if k.cold {
                    lazy_bench_cold(c, &format!("{}/{name}/{tag}/cold", k.name), setup, run);
                }
            }
        }
    }
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_libs
}
criterion_main!(benches);
