//! The bounds of candidate enumeration (`--max-enodes`, `--max-egraph-iters`,
//! `--max-candidates`): rules files that check clean but make the e-graph or a target's
//! candidates grow without end stop with a diagnostic (exit 1) that names what grew, the limit
//! and the flag that raises it, for `collage candidates` and `collage partition` alike, never
//! with a silently smaller search space. The fixtures are in `tests/fixtures/limits/`; the
//! limits in the tests are small, so that each run takes milliseconds.
//!
//! The defaults must not trip on the shipped rules: every corpus model is enumerated elsewhere
//! (enumerate.rs, partition.rs) with them; here a generated 48-layer GPT-2 and a BERT-large
//! are enumerated with half the default limits.

use crate::support::{collage_in, root};
use collage::planning::enumerate::{Bound, LimitError, Limits};
use std::path::PathBuf;

fn dir() -> PathBuf {
    root().join("tests/fixtures/limits")
}

const MNIST: &str = "../../models/mnist.relay";

/// Runs `collage` in the fixture directory with `args`, expecting exit code 1, nothing on
/// standard output and the same diagnostics when repeated; returns standard error.
fn fails(args: &[&str]) -> String {
    let out = collage_in(&dir(), args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}\n{stderr}");
    assert!(out.stdout.is_empty(), "{args:?}: output on failure");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let again = collage_in(&dir(), args);
    assert_eq!(String::from_utf8_lossy(&again.stderr), stderr, "{args:?}");
    stderr
}

/// The same failure from `collage candidates` and `collage partition` (with `args` after the
/// model); returns the diagnostics of `candidates`.
fn fails_both(model: &str, args: &[&str]) -> String {
    let mut c = vec!["candidates", model];
    c.extend(args);
    let from_candidates = fails(&c);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.relay");
    let out = out.to_str().unwrap();
    // `candidates` shows the model as given; so does `partition` with `--no-simplify`.
    let mut p = vec!["partition", model, "--no-simplify", "-o", out];
    p.extend(args);
    let from_partition = fails(&p);
    assert_eq!(from_partition, from_candidates, "{args:?}");
    assert!(!tmp.path().join("out.relay").exists(), "written on failure");
    from_candidates
}

#[test]
fn a_rule_fusing_everything_stops_at_the_candidate_limit() {
    let err = fails_both(
        MNIST,
        &[
            "--rules",
            "fuse-everything.rules",
            "--tvm-max-depth",
            "1000",
            "--max-candidates",
            "1000",
        ],
    );
    insta::assert_snapshot!("candidate_limit", err);
    assert_mentions(
        &err,
        &[
            "error[E2203]",
            "target `everything` has more than 1000 candidates",
            "fuse-everything.rules:5:8",
            "the rule that grew: `combine [by_kind(O->O)] max_depth=1000`",
            "`--max-candidates N`",
            "`--tvm-max-depth`",
        ],
    );
}

#[test]
fn a_rule_fusing_everything_stops_at_the_pair_limit() {
    // Few candidates, but every one meets a great many partners: the work is bounded too.
    let err = fails_both(
        MNIST,
        &[
            "--rules",
            "fuse-everything.rules",
            "--tvm-max-depth",
            "1",
            "--max-candidates",
            "5000",
        ],
    );
    insta::assert_snapshot!("pair_limit", err);
    assert!(err.contains("error[E2203]"), "{err}");
    assert!(
        err.contains("visited more than 640000 pairs (128 × `--max-candidates` 5000)"),
        "{err}"
    );
}

#[test]
fn raising_the_candidate_limit_lets_enumeration_finish() {
    let out = collage_in(
        &dir(),
        [
            "candidates",
            MNIST,
            "--rules",
            "fuse-everything.rules",
            "--tvm-max-depth",
            "1",
            "--max-candidates",
            "20000",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("target everything (1887 candidates)"),
        "{text}"
    );
}

#[test]
fn the_default_limits_stop_a_rule_fusing_everything() {
    // At the default depth limit (8) the candidates of this rule grow exponentially; the
    // default limits stop it (within about a second in a release build). With the depth given,
    // that is an error.
    let err = fails(&[
        "candidates",
        MNIST,
        "--rules",
        "fuse-everything.rules",
        "--tvm-max-depth",
        "8",
    ]);
    assert!(err.contains("error[E2203]"), "{err}");
    assert!(err.contains("128 × `--max-candidates` 500000"), "{err}");
    // Without it, the default depth is halved until the candidates fit (W2205).
    let out = collage_in(
        &dir(),
        ["candidates", MNIST, "--rules", "fuse-everything.rules"],
    );
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning[W2205]: the candidates of target `everything` were enumerated again at depth 4 instead of 8"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("target everything (3553 candidates)"));
}

#[test]
fn associativity_stops_at_the_enode_limit() {
    let args = ["--rules", "associative.rules", "--max-enodes", "100"];
    let err = fails_both("adds.relay", &args);
    insta::assert_snapshot!("enode_limit", err);
    assert_mentions(
        &err,
        &[
            "error[E2201]",
            "more than 100 e-nodes",
            "associative.rules:15:1",
            "this equivalence keeps adding e-nodes",
            "`--max-enodes N`",
        ],
    );
    // At the default limit, matching it stops first (16 partial matches per e-node allowed).
    let err = fails(&["candidates", "adds.relay", "--rules", "associative.rules"]);
    assert!(err.contains("error[E2201]"), "{err}");
    assert!(err.contains("partial matches in one round"), "{err}");
}

#[test]
fn associativity_stops_at_the_iteration_limit() {
    let args = ["--rules", "associative.rules", "--max-egraph-iters", "1"];
    let err = fails_both("adds.relay", &args);
    insta::assert_snapshot!("iteration_limit", err);
    assert_mentions(
        &err,
        &[
            "error[E2202]",
            "after 1 round (`--max-egraph-iters`)",
            "associative.rules:15:1",
            "`--max-egraph-iters N`",
        ],
    );
}

#[test]
fn a_pattern_with_multiplying_alternatives_stops_at_the_match_limit() {
    let err = fails_both(
        "adds.relay",
        &["--rules", "alternatives.rules", "--max-candidates", "100"],
    );
    insta::assert_snapshot!("match_limit", err);
    assert!(err.contains("error[E2203]"), "{err}");
    assert!(err.contains("matching a pattern of target `wide`"), "{err}");
    // Within the default limits it finishes.
    let out = collage_in(
        &dir(),
        ["candidates", "adds.relay", "--rules", "alternatives.rules"],
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn limit_flags_refuse_zero() {
    for flag in ["--max-enodes", "--max-egraph-iters", "--max-candidates"] {
        let out = collage_in(&dir(), ["candidates", "adds.relay", flag, "0"]);
        assert_eq!(out.status.code(), Some(2), "{flag}");
    }
}

/// Half the default limits: enumeration must still succeed, so the defaults leave at least
/// twice the room these models need.
fn half_the_defaults() -> Limits {
    let d = Limits::default();
    Limits {
        max_enodes: d.max_enodes / 2,
        max_egraph_iters: d.max_egraph_iters / 2,
        max_candidates: d.max_candidates / 2,
        ..d
    }
}

#[test]
fn generated_models_enumerate_within_half_the_default_limits() {
    let program = collage::rules::sema::check_library().expect("the shipped library checks");
    for (name, text) in [
        ("gpt2 48 layers", collage::frontend::gen::gpt2(48)),
        (
            "bert 24 layers",
            collage::frontend::gen::bert_large(24, 128),
        ),
    ] {
        let m = crate::support::load_text_ok(name, &text);
        let g = collage::planning::enumerate::DataflowGraph::new(&m, m.main().unwrap());
        if let Err(e) = collage::planning::enumerate::enumerate(&g, &program, &half_the_defaults())
        {
            panic!("{name}: {e:?}");
        }
    }
}

#[test]
fn a_limit_error_names_the_bound_and_the_target() {
    // The library's side of the candidate limit, with the flag that raises it.
    let text = std::fs::read_to_string(dir().join("fuse-everything.rules")).unwrap();
    let (_, checked) = collage::rules::sema::check_text("fuse-everything.rules", &text);
    let program = checked.program.expect("the rules check");
    let m = crate::support::load_ok(&root().join("tests/models/mnist.relay"));
    let g = collage::planning::enumerate::DataflowGraph::new(&m, m.main().unwrap());
    let limits = Limits {
        max_candidates: 50,
        ..Limits::default()
    };
    match collage::planning::enumerate::enumerate(&g, &program, &limits) {
        Err(
            e @ LimitError::Target {
                bound: Bound::Candidates,
                target: 0,
                limit: 50,
                ..
            },
        ) => assert_eq!(e.flag(), "--max-candidates"),
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("no limit reached"),
    }
}

/// Asserts that the diagnostic `err` contains each of `wanted`.
fn assert_mentions(err: &str, wanted: &[&str]) {
    for s in wanted {
        assert!(err.contains(s), "lacks `{s}`:\n{err}");
    }
}
