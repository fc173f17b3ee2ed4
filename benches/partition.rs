//! `collage partition` benchmarks: the whole pipeline (enumerate, estimate, search, baselines,
//! rewrite and the round-trip check) as the command runs it.
//!
//! * `partition <model> (all shipped targets, analytic)`: the shipped library, analytic costs.
//! * `partition <model> (reference configuration, mock)`: the configuration TVM's own
//!   CollagePartition was measured with (docs/performance.md): native TVM plus one BYOC target
//!   with relu, add and concatenate patterns (`benches/reference.rules`), mock costs, depths 8
//!   and 8, no baselines.
//!
//! * `partition generated gpt2, <n> layers`: scaling (`collage::frontend::gen::gpt2`), all shipped targets,
//!   analytic costs, no baselines.
//! * `greedy regions, bert <n> layers`: the greedy regions of every shipped BYOC target on a
//!   generated BERT-large (`collage::frontend::gen::bert_large`, sequence 128), from candidates
//!   enumerated once, at the default limits: the phase `collage partition --timings` calls
//!   `greedy regions` (candidates grouped by target, then each target's regions), without
//!   matching the regions to the candidates. Run again and again on the same candidates, so
//!   on small models what it reads stays in the caches between runs.
//! * `greedy regions after enumeration/bert <n> layers`: the same, each run on candidates just
//!   enumerated (the untimed setup), as the command runs it.
//!
//! Run with `cargo bench --bench partition`.

use collage::ir::Module;
use collage::planning::cost::analytic::Analytic;
use collage::planning::cost::mock::Mock;
use collage::planning::cost::Estimator;
use collage::planning::enumerate::DataflowGraph;
use collage::planning::partition::{self, finalize, Options, Silent};
use collage::rules::ruletree::Program;
use collage::rules::sema::{check, Provider};
use collage::source::SourceMap;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode};

fn load(sources: &mut SourceMap, name: &str) -> Module {
    let path = format!("{}/tests/models/{name}.relay", env!("CARGO_MANIFEST_DIR"));
    let file = sources.add(&path, std::fs::read_to_string(&path).expect("model"));
    collage::frontend::relay::load(sources, file).expect("model loads")
}

fn run(m: &Module, program: &Program, est: &dyn Estimator, opts: &Options) -> f64 {
    let g = DataflowGraph::new(m, m.main().expect("@main"));
    let plan = partition::partition(&g, program, est, opts, &Silent).expect("partitions");
    let out = partition::rewrite(&g, program, &plan).expect("rewrites");
    finalize::check_round_trip(m, &out).expect("round trip");
    plan.total
}

fn bench_partition(c: &mut Criterion) {
    let mut sources = SourceMap::new();
    let library = collage::rules::sema::check_library().expect("the shipped library checks");
    let prelude = collage::rules::library::LIBRARY
        .iter()
        .find(|(n, _)| *n == "rules/prelude.rules")
        .map(|(_, t)| *t)
        .expect("prelude");
    let reference_text = include_str!("reference.rules");
    let table = [
        ("rules/prelude.rules", prelude),
        ("rules/reference.rules", reference_text),
    ];
    let reference = check(
        &mut sources,
        &Provider::Embedded(&table),
        &[std::path::PathBuf::from("rules/reference.rules")],
    )
    .program
    .expect("the reference rules check");
    let mock = Mock {
        costs: vec![("tvm".into(), 1.0), ("example".into(), 0.9)],
    };
    for name in ["mnist", "resnet50", "mobilenet", "gpt2"] {
        let m = load(&mut sources, name);
        c.bench_function(
            &format!("partition {name} (all shipped targets, analytic)"),
            |b| b.iter(|| run(&m, &library, &Analytic, &Options::default())),
        );
        let opts = Options {
            baselines: false,
            ..Options::default()
        };
        c.bench_function(
            &format!("partition {name} (reference configuration, mock)"),
            |b| b.iter(|| run(&m, &reference, &mock, &opts)),
        );
    }
}

fn bench_scaling(c: &mut Criterion) {
    let mut sources = SourceMap::new();
    let library = collage::rules::sema::check_library().expect("the shipped library checks");
    let opts = Options {
        baselines: false,
        ..Options::default()
    };
    for layers in [12, 48] {
        let file = sources.add(
            format!("gpt2_{layers}.relay"),
            collage::frontend::gen::gpt2(layers),
        );
        let m = collage::frontend::relay::load(&sources, file).expect("generated model loads");
        c.bench_function(&format!("partition generated gpt2, {layers} layers"), |b| {
            b.iter(|| run(&m, &library, &Analytic, &opts))
        });
    }
}

fn bench_greedy(c: &mut Criterion) {
    let mut sources = SourceMap::new();
    let library = collage::rules::sema::check_library().expect("the shipped library checks");
    let limits = collage::planning::enumerate::Limits::default();
    for layers in [24, 48, 96, 192, 384] {
        let file = sources.add(
            format!("bert_{layers}.relay"),
            collage::frontend::gen::bert_large(layers, 128),
        );
        let m = collage::frontend::relay::load(&sources, file).expect("generated model loads");
        let g = DataflowGraph::new(&m, m.main().expect("@main"));
        let candidates = collage::planning::enumerate::enumerate(&g, &library, &limits)
            .expect("within the limits")
            .candidates;
        let byoc: Vec<(usize, collage::rules::ruletree::SubGraphConfig)> = library
            .targets
            .iter()
            .enumerate()
            .filter(|(_, t)| t.compiler.is_some())
            .map(|(k, t)| (k, collage::planning::enumerate::target_limits(t, &limits)))
            .collect();
        // Grouped by target once, then each target's regions, as `collage partition` does
        // (which keeps the regions: they are dropped outside the timing).
        let greedy = |candidates: &[collage::planning::enumerate::Candidate]| {
            let mut own: Vec<Vec<usize>> = vec![Vec::new(); library.targets.len()];
            for (k, c) in candidates.iter().enumerate() {
                own[c.target].push(k);
            }
            byoc.iter()
                .map(|(t, config)| {
                    collage::planning::partition::greedy::regions(&g, candidates, &own[*t], config)
                })
                .collect::<Vec<_>>()
        };
        c.bench_function(&format!("greedy regions, bert {layers} layers"), |b| {
            b.iter_with_large_drop(|| greedy(&candidates))
        });
        // As in the pipeline: each time on candidates just enumerated (the setup, not timed),
        // so the caches hold what enumeration left rather than the previous run's data.
        let mut group = c.benchmark_group("greedy regions after enumeration");
        group.sampling_mode(SamplingMode::Flat);
        group.bench_function(format!("bert {layers} layers"), |b| {
            b.iter_batched_ref(
                || {
                    collage::planning::enumerate::enumerate(&g, &library, &limits)
                        .expect("within the limits")
                        .candidates
                },
                |candidates| greedy(candidates),
                BatchSize::PerIteration,
            )
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench_partition, bench_scaling, bench_greedy
}
criterion_main!(benches);
