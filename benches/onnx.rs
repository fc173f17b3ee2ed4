//! Loading a GPT-2-sized ONNX model: decoding, weights as views of the mapped file, checks.
//!
//! The model (12 layers of width 768 and a 50257-word embedding by default: about 500 MB of
//! float32 initializers) is written into a temporary folder by prost's encoder, one initializer
//! at a time. `COLLAGE_ONNX_BENCH_LAYERS=N` sets the number of layers (0 keeps only the
//! embeddings). Run with `cargo bench --bench onnx`; the figures are in `docs/onnx.md`. The page
//! cache is warm after the first iteration, which is the case the target (≤ 1 s) is about.

use collage::frontend::onnx::builder::{gpt2_like_weights, write_gpt2_like};
use collage::frontend::onnx::load_file;
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
    g.finish();
}

criterion_group!(benches, loading);
criterion_main!(benches);
