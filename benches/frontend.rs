//! Front-end benchmarks: lexing, parsing, type inference and printing of corpus models.
//!
//! Run with `cargo bench --bench frontend`; the numbers are recorded in `docs/performance.md`.

use collage::frontend::relay::{lexer::lex, load, parse, print::print_module};
use collage::source::SourceMap;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::path::Path;

fn model(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/models")
        .join(format!("{name}.relay"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn lexing(c: &mut Criterion) {
    let mut g = c.benchmark_group("lex");
    for name in ["gpt2", "resnet50"] {
        let text = model(name);
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function(name, |b| b.iter(|| lex(black_box(&text))));
    }
    g.finish();
}

fn parsing_and_checking(c: &mut Criterion) {
    for name in ["gpt2", "resnet50"] {
        let mut sources = SourceMap::new();
        let file = sources.add(format!("{name}.relay"), model(name));
        let mut g = c.benchmark_group(name);
        g.throughput(Throughput::Bytes(sources.text(file).len() as u64));
        // Parsing alone (lexing included), then parsing plus type inference.
        g.bench_function("parse", |b| {
            b.iter(|| parse(black_box(&sources), file).expect("parses"))
        });
        g.bench_function("parse+check", |b| {
            b.iter(|| load(black_box(&sources), file).expect("loads"))
        });
        let m = load(&sources, file).expect("loads");
        g.bench_function("print", |b| b.iter(|| print_module(black_box(&m))));
        g.finish();
    }
}

criterion_group!(benches, lexing, parsing_and_checking);
criterion_main!(benches);
