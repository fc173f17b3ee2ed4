//! Enumerates the candidates of one shipped target on one model, on one thread, for profiling
//! (`perf record`, `valgrind --tool=callgrind`) and for comparing outputs between versions.
//!
//! `cargo run --release --example enumerate_target -- MODEL.relay [TARGET] [REPEAT]`
//! (TARGET defaults to `tvm`, REPEAT to 1). Prints the number of candidates and a hash of their
//! sub-graphs, rule names and labels in output order.

use collage::planning::enumerate::{target_candidates, DataflowGraph, Limits};
use collage::source::SourceMap;
use std::hash::{Hash, Hasher};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: enumerate_target MODEL.relay [TARGET] [REPEAT]");
        std::process::exit(2);
    };
    let target = args.get(2).map_or("tvm", String::as_str);
    let repeat: usize = args.get(3).and_then(|r| r.parse().ok()).unwrap_or(1);
    let mut sources = SourceMap::new();
    let program = collage::rules::sema::check_library().expect("the shipped library checks");
    let t = program
        .targets
        .iter()
        .position(|t| t.name == target)
        .expect("a shipped target");
    let text = std::fs::read_to_string(path).expect("model");
    let file = sources.add(path, text);
    let m = collage::frontend::relay::load(&sources, file).expect("model loads");
    let main = m.main().expect("@main");
    let g = DataflowGraph::new(&m, main);
    for _ in 0..repeat {
        let cands =
            target_candidates(&g, &program, t, &Limits::default()).expect("within the limits");
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for c in &cands {
            c.sub_graph.hash(&mut h);
            c.rule_name.hash(&mut h);
            c.sub_graph.label.hash(&mut h);
        }
        println!("{} candidates, hash {:016x}", cands.len(), h.finish());
    }
}
