//! Candidate enumeration benchmarks: every shipped target on the corpus models.
//!
//! Run with `cargo bench --bench enumerate`.

use collage::planning::enumerate::{enumerate, DataflowGraph, Limits};
use collage::source::SourceMap;
use criterion::{criterion_group, criterion_main, Criterion};

fn bench_enumerate(c: &mut Criterion) {
    let mut sources = SourceMap::new();
    let program = collage::rules::sema::check_library().expect("the shipped library checks");
    for name in ["mnist", "resnet50", "gpt2"] {
        let path = format!("{}/tests/models/{name}.relay", env!("CARGO_MANIFEST_DIR"));
        let file = sources.add(&path, std::fs::read_to_string(&path).expect("model"));
        let m = collage::frontend::relay::load(&sources, file).expect("model loads");
        let main = m.main().expect("@main");
        c.bench_function(&format!("enumerate {name} (all shipped targets)"), |b| {
            b.iter(|| {
                let g = DataflowGraph::new(&m, main);
                enumerate(&g, &program, &Limits::default())
                    .expect("within the limits")
                    .candidates
                    .len()
            })
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench_enumerate
}
criterion_main!(benches);
