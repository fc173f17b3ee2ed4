//! Native code generation benchmarks: micro-benchmark kernels (docs/backends.md) as generated
//! code, on one and two threads, and the GELU tail on the reference interpreter for comparison.
//!
//! * `gelu`: GPT-2's tanh GELU tail on 1600×3072 (`tests/fixtures/cpu-costs/e1.relay`), one
//!   FuseOps group, one generated kernel;
//! * `dense`: dense 1600×768→3072 (`d1.relay`);
//! * `conv`: conv2d 3×3 64→64 on 56×56, padding 1 (`c1.relay`);
//! * `softmax`: softmax over the last axis of 12×512×512 (`tests/fixtures/native/softmax.relay`),
//!   a max, an `exp` and a sum per row.
//!
//! Each is compiled once (kernels cached in a temporary directory, never the user's), as
//! `collage run` compiles it. Two measurements per kernel and thread count:
//!
//! * `kernel`: the generated kernel alone, called on the same input and output tensors (what
//!   the micro-benchmarks' figures measure: no allocation);
//! * `run`: one run of `@main` through the executor, as `collage run --repeat` times it (the
//!   result of the previous run gives its storage back, `Executable::recycle`).
//!
//! Run with `cargo bench --bench native` (`-- gelu` etc. to pick one).

use collage::ir::Expr;
use collage::runtime::backend::native::grouping::FuseGrouping;
use collage::runtime::backend::native::{Config, Native};
use collage::runtime::exec::data::Weights;
use collage::runtime::exec::executor::{self, Executable, Grouping, Options};
use collage::runtime::exec::kernel::MemCounter;
use collage::runtime::exec::kernel::{Backend, Backends, ConstantSource, Prepared, RunCx, Unit};
use collage::runtime::exec::program::{group_units, Region};
use collage::runtime::exec::tensor::Tensor;
use collage::runtime::exec::value::flat_shapes;
use collage::source::SourceMap;
use criterion::{criterion_group, criterion_main, Criterion};
use std::path::Path;
use std::sync::Arc;

/// A model of `tests/fixtures/` (`name` without `.relay`).
fn load(name: &str) -> collage::ir::Module {
    let path = format!("{}/tests/fixtures/{name}.relay", env!("CARGO_MANIFEST_DIR"));
    let mut sources = SourceMap::new();
    let file = sources.add(&path, std::fs::read_to_string(&path).expect("fixture"));
    collage::frontend::relay::load(&sources, file).expect("fixture loads")
}

fn native(threads: usize, cache: &Path) -> Arc<Native> {
    Arc::new(Native::new(Config {
        threads,
        cache_dir: Some(cache.to_path_buf()),
        ..Config::default()
    }))
}

/// The module compiled for `threads` threads, natively (`cache` set) or on the interpreter,
/// with its inputs.
fn build(
    m: &collage::ir::Module,
    threads: usize,
    cache: Option<&Path>,
) -> (Executable, Vec<Arc<Tensor>>) {
    let weights = Weights::new(0);
    let mw = weights.for_module(m);
    let opts = match cache {
        Some(dir) => Options {
            threads,
            backends: Backends {
                list: vec![native(threads, dir) as Arc<dyn Backend>],
            },
            grouping: Some(Box::new(FuseGrouping::default())),
        },
        None => Options {
            threads,
            ..Options::default()
        },
    };
    let x = executor::compile(m, &mw, &opts).expect("compiles");
    assert!(
        x.warnings.is_empty(),
        "a kernel fell back: {:?}",
        x.warnings
    );
    let inputs = x
        .inputs
        .iter()
        .map(|i| Arc::new(mw.random_input(&i.name, &i.shape).expect("input")))
        .collect();
    (x, inputs)
}

/// The module's one FuseOps group as a prepared native kernel, with its non-constant inputs and
/// preallocated outputs.
fn kernel(
    m: &collage::ir::Module,
    threads: usize,
    cache: &Path,
) -> (Box<dyn Prepared>, Vec<Arc<Tensor>>, Vec<Tensor>) {
    let weights = Weights::new(0);
    let mw = weights.for_module(m);
    let main = m.main().expect("@main");
    let groups = group_units(
        m,
        &Region::function(m, main),
        FuseGrouping::default().groups(m, main),
    )
    .expect("groups");
    assert_eq!(groups.len(), 1, "one kernel");
    let unit = Unit::Group {
        module: m,
        group: &groups[0],
    };
    let k = native(threads, cache)
        .compile(&unit, &mw)
        .expect("compiles natively");
    let mut consts = Vec::new();
    let mut inputs = Vec::new();
    for e in unit.input_exprs() {
        match m.expr(e) {
            Expr::Const(_) => consts.push(Some(mw.constant(m, e).expect("constant"))),
            _ => {
                consts.push(None);
                let s = flat_shapes(m.ty(e).expect("typed")).expect("static")[0].clone();
                let name = match m.expr(e) {
                    Expr::Var(v) => m.var(*v).name.clone(),
                    _ => panic!("a group input that is neither a constant nor a parameter"),
                };
                inputs.push(Arc::new(mw.random_input(&name, &s).expect("input")));
            }
        }
    }
    let p = k.prepare(&consts).expect("prepared");
    let outputs = unit
        .output_types()
        .into_iter()
        .flat_map(|t| flat_shapes(&t.expect("typed")).expect("static"))
        .map(|s| Tensor::zeros_of(&s).expect("output"))
        .collect();
    (p, inputs, outputs)
}

fn bench_kernels(c: &mut Criterion) {
    let cache = tempfile::tempdir().expect("a temporary cache directory");
    for (label, file) in [
        ("gelu", "cpu-costs/e1"),
        ("dense", "cpu-costs/d1"),
        ("conv", "cpu-costs/c1"),
        ("softmax", "native/softmax"),
    ] {
        let m = load(file);
        for threads in [1, 2] {
            let (p, inputs, mut outputs) = kernel(&m, threads, cache.path());
            let mem = MemCounter::new(0);
            let cx = RunCx {
                mem: &mem,
                buffers: None,
            };
            // The kernel runs on the calling thread's OpenMP pool, as in the executor.
            if let Ok(omp) = collage::runtime::ffi::omp::Omp::shared() {
                omp.set_num_threads(threads);
            }
            c.bench_function(&format!("{label} kernel {threads}T"), |b| {
                b.iter(|| p.run(&inputs, &mut outputs, &cx).expect("runs"))
            });
            let (x, inputs) = build(&m, threads, Some(cache.path()));
            // As `collage run --repeat` does: the previous result's storage is reused.
            c.bench_function(&format!("{label} run {threads}T"), |b| {
                b.iter(|| x.recycle(x.run(&inputs).expect("runs").value))
            });
            if label == "gelu" {
                let (x, inputs) = build(&m, threads, None);
                c.bench_function(&format!("{label} interpreter run {threads}T"), |b| {
                    b.iter(|| x.run(&inputs).expect("runs").peak_bytes)
                });
            }
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench_kernels
}
criterion_main!(benches);
