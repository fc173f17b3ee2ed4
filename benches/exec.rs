//! Execution benchmarks: whole models through the reference interpreter, as `collage run` runs
//! them (compiled once; each iteration is one run of `@main` on the same inputs, outputs
//! dropped). Weights and inputs are drawn from seed 0.
//!
//! Run with `cargo bench --bench exec` (`-- resnet50` etc. to pick one). Threads: all cores.

use collage::runtime::exec::data::Weights;
use collage::runtime::exec::executor::{self, Options};
use collage::runtime::exec::tensor::Tensor;
use collage::source::SourceMap;
use criterion::{criterion_group, criterion_main, Criterion};
use std::sync::Arc;

fn bench_models(c: &mut Criterion) {
    for name in ["mnist", "mobilenet", "resnet50", "gpt2"] {
        let path = format!("{}/tests/models/{name}.relay", env!("CARGO_MANIFEST_DIR"));
        let mut sources = SourceMap::new();
        let file = sources.add(&path, std::fs::read_to_string(&path).expect("model"));
        let m = collage::frontend::relay::load(&sources, file).expect("model loads");
        let weights = Weights::new(0);
        let mw = weights.for_module(&m);
        let x = executor::compile(&m, &mw, &Options::default()).expect("compiles");
        let inputs: Vec<Arc<Tensor>> = x
            .inputs
            .iter()
            .map(|i| Arc::new(mw.random_input(&i.name, &i.shape).expect("input")))
            .collect();
        c.bench_function(&format!("run {name} (reference interpreter)"), |b| {
            b.iter(|| x.run(&inputs).expect("runs").peak_bytes)
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench_models
}
criterion_main!(benches);
