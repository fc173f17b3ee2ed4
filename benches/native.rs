//! Native code generation benchmarks: the reference note's kernels as generated code, on one and
//! two threads, and the GELU tail on the reference interpreter for comparison.
//!
//! * `gelu`: GPT-2's tanh GELU tail on 1600×3072 (`tests/fixtures/cpu-costs/e1.relay`), one
//!   FuseOps group, one generated kernel;
//! * `dense`: dense 1600×768→3072 (`d1.relay`);
//! * `conv`: conv2d 3×3 64→64 on 56×56, padding 1 (`c1.relay`).
//!
//! Each is compiled once (kernels cached in a temporary directory, never the user's) as
//! `collage run` compiles it; an iteration is one run of `@main` on the same inputs (output
//! allocation included). Run with `cargo bench --bench native` (`-- gelu` etc. to pick one).

use collage::backend::native::grouping::FuseGrouping;
use collage::backend::native::{Config, Native};
use collage::backend::{Backend, Backends};
use collage::exec::data::Weights;
use collage::exec::executor::{self, Executable, Options};
use collage::exec::tensor::Tensor;
use collage::source::SourceMap;
use criterion::{criterion_group, criterion_main, Criterion};
use std::sync::Arc;

fn load(name: &str) -> collage::ir::Module {
    let path = format!(
        "{}/tests/fixtures/cpu-costs/{name}.relay",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut sources = SourceMap::new();
    let file = sources.add(&path, std::fs::read_to_string(&path).expect("fixture"));
    collage::relay::load(&sources, file).expect("fixture loads")
}

/// The module compiled for `threads` threads, natively (`cache` set) or on the interpreter,
/// with its inputs.
fn build(
    m: &collage::ir::Module,
    threads: usize,
    cache: Option<&std::path::Path>,
) -> (Executable, Vec<Arc<Tensor>>) {
    let weights = Weights::new(0);
    let mw = weights.for_module(m);
    let opts = match cache {
        Some(dir) => {
            let native = Arc::new(Native::new(Config {
                threads,
                cache_dir: Some(dir.to_path_buf()),
                ..Config::default()
            }));
            Options {
                threads,
                backends: Backends {
                    list: vec![native as Arc<dyn Backend>],
                },
                grouping: Some(Box::new(FuseGrouping::default())),
            }
        }
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

fn bench_kernels(c: &mut Criterion) {
    let cache = tempfile::tempdir().expect("a temporary cache directory");
    for (label, file) in [("gelu", "e1"), ("dense", "d1"), ("conv", "c1")] {
        let m = load(file);
        for threads in [1, 2] {
            let (x, inputs) = build(&m, threads, Some(cache.path()));
            c.bench_function(&format!("{label} native {threads}T"), |b| {
                b.iter(|| x.run(&inputs).expect("runs").peak_bytes)
            });
            if label == "gelu" {
                let (x, inputs) = build(&m, threads, None);
                c.bench_function(&format!("{label} interpreter {threads}T"), |b| {
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
