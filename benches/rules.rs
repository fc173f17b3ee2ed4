//! Rules-language benchmarks: parsing, and checking the whole shipped library (`rules/*.rules`).
//!
//! Run with `cargo bench --bench rules`; the numbers are recorded in `docs/performance.md`.
//! The target for checking the whole library is 20 ms.

use collage::rules::dsl::parse_file;
use collage::rules::sema::{check, Provider};
use collage::source::{FileId, SourceMap};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::path::{Path, PathBuf};

/// The shipped library files, sorted, as repository-relative paths (the embedded-table keys and
/// import resolution both work on these).
fn library() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("rules"))
        .expect("rules/ exists")
        .map(|e| e.expect("readable directory").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rules"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, text)
        })
        .collect()
}

fn rules(c: &mut Criterion) {
    let files = library();
    let bytes: usize = files.iter().map(|(_, t)| t.len()).sum();
    let roots: Vec<PathBuf> = files.iter().map(|(p, _)| p.clone()).collect();

    // The library must check clean, or the numbers mean nothing.
    let mut sources = SourceMap::new();
    let checked = check(&mut sources, &Provider::Files, &roots);
    assert!(
        checked.program.is_some() && !checked.diags.has_errors(),
        "the library does not check:\n{}",
        checked.diags.render_plain(&sources)
    );

    let mut g = c.benchmark_group("rules");
    g.throughput(Throughput::Bytes(bytes as u64));
    // Parsing alone (pest and lowering to the syntax tree), every file.
    g.bench_function("parse library", |b| {
        b.iter(|| {
            for (i, (_, text)) in files.iter().enumerate() {
                black_box(parse_file(black_box(text), FileId(i as u32)));
            }
        })
    });
    // Loading, parsing and checking every file from the file system, as `collage check rules/`.
    g.bench_function("check library (files)", |b| {
        b.iter(|| {
            let mut sources = SourceMap::new();
            black_box(check(&mut sources, &Provider::Files, black_box(&roots)))
        })
    });
    // The same without file I/O: the texts come from an in-memory table.
    let table: Vec<(String, String)> = files
        .iter()
        .map(|(p, t)| (p.to_string_lossy().replace('\\', "/"), t.clone()))
        .collect();
    let table: Vec<(&str, &str)> = table
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    g.bench_function("check library (embedded)", |b| {
        b.iter(|| {
            let mut sources = SourceMap::new();
            black_box(check(
                &mut sources,
                &Provider::Embedded(&table),
                black_box(&roots),
            ))
        })
    });
    g.finish();
}

criterion_group!(benches, rules);
criterion_main!(benches);
