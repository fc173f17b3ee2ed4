//! What the kernel benchmarks (`libs.rs`, `mobilenet.rs`) share: loading a one-partition
//! module, its random inputs and weights, oneDNN's prepared partition, and benchmarks whose
//! set-up runs only when criterion's filter selects them.

use collage::ir::{DType, Module};
use collage::runtime::backend::dnnl::{DnnlBackend, DnnlPrepared, Part};
use collage::runtime::exec::data::Weights;
use collage::runtime::exec::kernel::{MemCounter, Prepared, RunCx};
use collage::runtime::exec::tensor::{Shape, Tensor};
use collage::runtime::ffi::omp::Omp;
use collage::source::SourceMap;
use criterion::{Bencher, Criterion};
use std::sync::Arc;

/// The module of a benchmark's Relay text (a bug of the benchmark if it does not load).
pub fn load(text: &str) -> Module {
    let mut sources = SourceMap::new();
    let file = sources.add("kernel.relay", text.to_string());
    collage::frontend::relay::load(&sources, file).unwrap_or_else(|d| panic!("{text}\n{d:?}"))
}

/// The constants (`Some`: the weights, for `prepare`), the inputs and the output tensor of the
/// partition `@part` of `m`, whose `float32` parameters are `params` (name, extents, whether it
/// is a weight), drawn from seed 0.
#[allow(clippy::type_complexity)]
pub fn tensors<'a>(
    m: &Module,
    params: impl IntoIterator<Item = (&'a str, Vec<usize>, bool)>,
) -> (Vec<Option<Arc<Tensor>>>, Vec<Arc<Tensor>>, Vec<Tensor>) {
    let weights = Weights::new(0);
    let mw = weights.for_module(m);
    let mut consts = Vec::new();
    let mut inputs = Vec::new();
    for (name, dims, weight) in params {
        let shape = Shape {
            dtype: DType::F32,
            dims,
        };
        let t = Arc::new(mw.random_input(name, &shape).expect("a random tensor"));
        if weight {
            consts.push(Some(t));
        } else {
            consts.push(None);
            inputs.push(t);
        }
    }
    let f = m.func(m.def("part").expect("@part"));
    let out = match m.ty(f.body) {
        Some(collage::ir::Type::Tensor(t)) => Shape::of(t).expect("a static shape"),
        other => panic!("the kernel's result is {other:?}"),
    };
    (
        consts,
        inputs,
        vec![Tensor::zeros_of(&out).expect("an output")],
    )
}

/// The oneDNN partition `@part` of `text` (named `name` in panics), compiled for `threads` and
/// prepared, run once whole (so that the primitives' sources hold the inputs), with its inputs
/// and outputs.
pub fn dnnl_setup<'a>(
    text: &str,
    name: &str,
    params: impl IntoIterator<Item = (&'a str, Vec<usize>, bool)>,
    threads: usize,
) -> (DnnlPrepared, Vec<Arc<Tensor>>, Vec<Tensor>) {
    let m = load(text);
    let weights = Weights::new(0);
    let mw = weights.for_module(&m);
    let b = DnnlBackend::new(threads).unwrap_or_else(|e| panic!("{e}"));
    let kernel = b
        .compile_function(&m, m.def("part").expect("@part"), &mw)
        .unwrap_or_else(|u| panic!("{name}: {}", u.message));
    let (consts, inputs, mut outputs) = tensors(&m, params);
    let prepared = kernel.prepare_site(&consts).expect("prepares");
    prepared
        .run_part(&inputs, &mut outputs, Part::All)
        .expect("runs");
    (prepared, inputs, outputs)
}

/// Registers a benchmark whose set-up (compiling and preparing the kernel) runs only when
/// criterion's filter selects it, once: a filtered run does not pay for the other kernels.
pub fn lazy_bench<S>(
    c: &mut Criterion,
    id: &str,
    setup: impl FnOnce() -> S,
    mut run: impl FnMut(&mut S),
) {
    lazy_bench_with(c, id, setup, |bn, s| bn.iter(|| run(s)));
}

/// As [`lazy_bench`], with the timing loop given: `body` gets criterion's bencher and the
/// state the set-up made.
pub fn lazy_bench_with<S>(
    c: &mut Criterion,
    id: &str,
    setup: impl FnOnce() -> S,
    mut body: impl FnMut(&mut Bencher<'_>, &mut S),
) {
    let mut setup = Some(setup);
    let mut state: Option<S> = None;
    c.bench_function(id, |bn| {
        let s = state.get_or_insert_with(|| setup.take().expect("set up once")());
        body(bn, s)
    });
}

/// A prepared kernel with its inputs and outputs.
pub type Setup = (Box<dyn Prepared>, Vec<Arc<Tensor>>, Vec<Tensor>);

/// Runs a prepared kernel once on `threads` OpenMP threads (the executor sets the calling
/// thread's OpenMP count before a run).
pub fn run_prepared(
    (prepared, inputs, outputs): &mut Setup,
    omp: &Omp,
    threads: usize,
    mem: &MemCounter,
) {
    omp.set_num_threads(threads);
    prepared
        .run(inputs, outputs, &RunCx { mem, buffers: None })
        .expect("runs")
}
