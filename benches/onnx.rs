//! Loading a GPT-2-sized ONNX model: decoding, weights as views of the mapped file, checks.
//!
//! The model (12 layers of width 768 and a 50257-word embedding by default: about 500 MB of
//! float32 initializers) is written into a temporary folder by prost's encoder, one initializer
//! at a time. `COLLAGE_ONNX_BENCH_LAYERS=N` sets the number of layers (0 keeps only the
//! embeddings). Run with `cargo bench --bench onnx`; the figures are in `docs/onnx.md`. The page
//! cache is warm after the first iteration, which is the case the target (≤ 1 s) is about.
//!
//! With `COLLAGE_ONNX_BENCH_MODEL=PATH` (a model made by `tests/onnx/make_large.py`, a real
//! GPT-2 graph of the same size), the whole import is timed too: decoding, shape binding
//! (`COLLAGE_ONNX_BENCH_DIMS`, default `batch=2,sequence=8`), folding, operator mapping and
//! type checking.

use collage::frontend::onnx::builder::{gpt2_like_weights, write_gpt2_like};
use collage::frontend::onnx::import::import;
use collage::frontend::onnx::load_file;
use collage::frontend::onnx::shapes::Bindings;
use criterion::{criterion_group, criterion_main, Criterion};

fn loading(c: &mut Criterion) {
    let layers = std::env::var("COLLAGE_ONNX_BENCH_LAYERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpt2.onnx");
    let size = write_gpt2_like(&path, layers).expect("the model is written");
    eprintln!("onnx bench: {layers} layers, {:.1} MB", size as f64 / 1e6);
    let mut g = c.benchmark_group("onnx");
    g.sample_size(10);
    g.bench_function(format!("load gpt2-like {layers} layers"), |bch| {
        bch.iter(|| {
            let m = load_file(&path).expect("loads");
            assert_eq!(m.graph.weights.len(), gpt2_like_weights(layers).len());
            m
        })
    });
    if let Ok(model) = std::env::var("COLLAGE_ONNX_BENCH_MODEL") {
        let dims = std::env::var("COLLAGE_ONNX_BENCH_DIMS")
            .unwrap_or_else(|_| "batch=2,sequence=8".to_string());
        let bindings = Bindings::parse([], dims.split(',')).expect("dimension bindings");
        let path = std::path::PathBuf::from(model);
        g.bench_function("import make_large.py model", |bch| {
            bch.iter(|| {
                let m = load_file(&path).expect("loads");
                let mut sources = collage::source::SourceMap::new();
                import(&m, &bindings, &mut sources).expect("imports")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, loading);
criterion_main!(benches);
