//! The RelayScript fixture suite: `tests/fixtures/relay/ok` must load and round-trip;
//! `tests/fixtures/relay/err` must fail with the code named in the fixture's first line
//! (`// expect: E0301`), and the rendered diagnostics are snapshotted. The printed form of a
//! partitioned model pins the return types of outlined functions.

use crate::support::{load_ok, load_text, reference_rules, rel, root, round_trip};

#[test]
fn ok_fixtures_load_and_round_trip() {
    insta::glob!("../fixtures/relay", "ok/*.relay", |path| {
        let m = load_ok(path);
        let printed = round_trip(&rel(path), &m);
        insta::assert_snapshot!(printed);
    });
}

#[test]
fn err_fixtures_report_their_code() {
    insta::glob!("../fixtures/relay", "err/*.relay", |path| {
        let text = std::fs::read_to_string(path).unwrap();
        let expected = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("// expect: "))
            .unwrap_or_else(|| panic!("{}: first line must be `// expect: EXXXX`", rel(path)))
            .trim()
            .to_string();
        let (sources, _, result) = load_text(&rel(path), &text);
        let diags = match result {
            Ok(_) => panic!("{} loaded without errors", rel(path)),
            Err(d) => d,
        };
        let codes: Vec<_> = diags.iter().map(|d| d.code.id).collect();
        assert!(
            codes.contains(&expected.as_str()),
            "{}: expected {expected}, got {codes:?}\n{}",
            rel(path),
            diags.render_plain(&sources)
        );
        for d in &diags {
            let span = d
                .primary_span()
                .expect("every diagnostic has a primary span");
            assert!(
                span.end as usize <= text.len(),
                "span past the end of the file"
            );
        }
        insta::assert_snapshot!(diags.render_plain(&sources));
    });
}

/// Every outlined global function is printed with its return type (`-> T` after the
/// parameters, as TVM's printer writes it), and reads back to the same module.
#[test]
fn outlined_functions_print_their_return_types() {
    use collage::enumerate::DataflowGraph;
    use collage::partition;
    let m = load_ok(&root().join("tests/models/mnist.relay"));
    let program = reference_rules();
    let est = collage::cost::mock::Mock {
        costs: vec![("tvm".into(), 3.0), ("example".into(), 2.0)],
    };
    let opts = partition::Options {
        baselines: false,
        ..Default::default()
    };
    let g = DataflowGraph::new(&m, m.main().unwrap());
    let plan = partition::partition(&g, &program, &est, &opts, &partition::Silent).unwrap();
    let out = partition::rewrite(&g, &program, &plan).unwrap();
    let printed = round_trip("partitioned mnist", &out);
    let heads: Vec<&str> = printed.lines().filter(|l| l.starts_with("def @")).collect();
    assert!(heads.len() >= 3, "{printed}");
    for h in &heads {
        assert!(h.contains(") -> Tensor["), "no return type: {h}");
    }
    insta::assert_snapshot!(printed);
}
