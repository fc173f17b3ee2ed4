//! The ONNX node tests (`pipeline::conformance`): every test folder of the pinned `onnx` package
//! run through the library in this process, on the reference interpreter and, for a sample of
//! the tests that pass there, on generated code; the table in `docs/onnx.md` must be what the
//! run gives.
//!
//! The data come from `COLLAGE_ONNX_NODE_TESTS` or the `onnx` package of the active Python
//! environment (`.ci/run` installs onnx 1.22.0 into its environment). Without them the test says
//! that it did not run and passes, except in CI (`CI` set, or `COLLAGE_REQUIRE_ONNX_TESTS=1`,
//! which `.ci/run` sets), where it fails.
//!
//! Environment:
//! - `COLLAGE_BLESS=1` writes the table into `docs/onnx.md` instead of comparing;
//! - `COLLAGE_ONNX_NATIVE`: which passing tests run on generated code: `1/N` (default `1/8`),
//!   `all`, or `off`;
//! - `COLLAGE_ONNX_FILTER=TEXT`: only the tests whose names contain TEXT (the table is then
//!   neither compared nor written).

use crate::support::{cache_dir, root};
use collage::pipeline::conformance::locate::{locate, Search};
use collage::pipeline::conformance::native::{self, Sample};
use collage::pipeline::conformance::{self as conf, table, Limits, Outcome, Verdict};
use collage::runtime::backend::native::Config;
use std::collections::BTreeMap;
use std::time::Instant;

/// The sample of passing tests run on generated code when `COLLAGE_ONNX_NATIVE` is not set.
const DEFAULT_NATIVE_SAMPLE: Sample = Sample::OneIn(8);

fn required() -> bool {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    set("CI") || set("COLLAGE_REQUIRE_ONNX_TESTS")
}

fn counts(outcomes: &[Outcome]) -> String {
    let mut c: BTreeMap<&str, usize> = BTreeMap::new();
    for o in outcomes {
        *c.entry(o.verdict.class()).or_default() += 1;
    }
    c.iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn onnx_node_tests() {
    let located = match locate(&Search::from_env()) {
        Ok(l) => l,
        Err(why) if required() => panic!("the ONNX node tests are required here (CI) but: {why}"),
        Err(why) => {
            eprintln!(
                "onnx_node_tests: DID NOT RUN: no ONNX node tests: {why}. Install onnx=={} into \
                 the active Python environment, or set COLLAGE_ONNX_NODE_TESTS to its \
                 onnx/backend/test/data/node folder",
                conf::ONNX_VERSION
            );
            return;
        }
    };
    let version = located
        .version
        .clone()
        .unwrap_or_else(|| "(unknown)".into());
    let pinned = version == conf::ONNX_VERSION;
    if !pinned && required() {
        panic!(
            "the node tests found ({}, {}) are of onnx {version}; the table is for onnx {}",
            located.how,
            located.dir.display(),
            conf::ONNX_VERSION
        );
    }
    let filter = std::env::var("COLLAGE_ONNX_FILTER")
        .ok()
        .filter(|f| !f.is_empty());
    let mut cases = conf::cases(&located.dir).expect("the node-test folder can be listed");
    if let Some(f) = &filter {
        cases.retain(|c| c.name.contains(f.as_str()));
    }
    assert!(
        !cases.is_empty(),
        "no node tests in {}",
        located.dir.display()
    );

    let limits = Limits::default();
    let start = Instant::now();
    let outcomes = conf::run(&cases, &limits, &mut |_, _| {});
    let elapsed = start.elapsed();
    let mut slowest: Vec<&Outcome> = outcomes.iter().collect();
    slowest.sort_by_key(|o| std::cmp::Reverse(o.time));
    eprintln!(
        "onnx_node_tests: {} tests of onnx {version} ({}) on the reference interpreter in {:.2} s \
         on {} workers: {}; slowest: {}",
        outcomes.len(),
        located.how,
        elapsed.as_secs_f64(),
        limits.workers,
        counts(&outcomes),
        slowest
            .iter()
            .take(3)
            .map(|o| format!("{} {:.2} s", o.name, o.time.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    );

    let doc_path = root().join("docs/onnx.md");
    let doc = std::fs::read_to_string(&doc_path).expect("docs/onnx.md");
    let accepted = table::accepted(&doc).unwrap_or_else(|e| panic!("{e}"));
    let mut failures = table::problems(&outcomes, &accepted);
    if filter.is_some() {
        failures.retain(|f| !f.contains("there is no such test"));
    }

    // The table.
    let rendered = table::render(&outcomes, &accepted, &version);
    let bless = std::env::var("COLLAGE_BLESS").is_ok_and(|v| v == "1");
    if filter.is_some() {
        eprintln!("onnx_node_tests: COLLAGE_ONNX_FILTER is set: the table is not checked");
    } else if !pinned {
        eprintln!(
            "onnx_node_tests: the node tests are of onnx {version}, not {}: the table is not checked",
            conf::ONNX_VERSION
        );
    } else if bless {
        std::fs::write(&doc_path, table::replace(&doc, &rendered)).expect("docs/onnx.md written");
        eprintln!("onnx_node_tests: wrote the table into docs/onnx.md");
    } else {
        match table::section(&doc) {
            Some(old) if old == rendered => {}
            Some(old) => failures.push(format!(
                "the conformance table of docs/onnx.md is stale ({}); regenerate it with `{}`",
                table::first_difference(old, &rendered).unwrap_or_default(),
                table::BLESS
            )),
            None => failures.push(format!(
                "docs/onnx.md has no conformance table; generate it with `{}`",
                table::BLESS
            )),
        }
    }

    // Generated code.
    let sample = match std::env::var("COLLAGE_ONNX_NATIVE").ok().as_deref() {
        Some("off") => None,
        Some(s) => Some(
            Sample::parse(s)
                .unwrap_or_else(|| panic!("COLLAGE_ONNX_NATIVE is `{s}`: write 1/N, all or off")),
        ),
        None => Some(DEFAULT_NATIVE_SAMPLE),
    };
    if let Some(sample) = sample {
        let passing: Vec<conf::Case> = cases
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| o.verdict == Verdict::Passed)
            .map(|(c, _)| c.clone())
            .collect();
        let chosen = sample.of(&passing);
        let start = Instant::now();
        let report = native::run(
            &chosen,
            &limits,
            Config {
                cache_dir: Some(cache_dir().to_path_buf()),
                ..Config::default()
            },
        );
        let mut fully = 0;
        let mut passed = 0;
        for o in &report.outcomes {
            if o.verdict == Verdict::Passed {
                passed += 1;
                if o.fallbacks.is_empty() {
                    fully += 1;
                }
            }
        }
        eprintln!(
            "onnx_node_tests: generated code, {sample} of the {} passing tests: {} run in {:.2} s \
             (import {:.2} s, {} kernels compiled in {} compiler runs {:.2} s, run {:.2} s): \
             {passed} passed ({fully} without a fallback to the interpreter)",
            passing.len(),
            chosen.len(),
            start.elapsed().as_secs_f64(),
            report.prepare_time.as_secs_f64(),
            report.stats.compiled,
            report.stats.compiler_runs,
            report.compile_time.as_secs_f64(),
            report.run_time.as_secs_f64(),
        );
        for o in &report.outcomes {
            let listed = accepted.iter().any(|a| a.test == o.name);
            match &o.verdict {
                Verdict::Passed => {}
                Verdict::Mismatch(_) if listed => {}
                v => failures.push(format!(
                    "{} on generated code: {}: {}",
                    o.name,
                    v.class(),
                    v.detail()
                )),
            }
        }
    }

    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
