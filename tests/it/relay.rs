//! The RelayScript fixture suite: `tests/fixtures/relay/ok` must load and round-trip;
//! `tests/fixtures/relay/err` must fail with the code named in the fixture's first line
//! (`// expect: E0301`), and the rendered diagnostics are snapshotted.

use crate::support::{load_ok, load_text, rel, round_trip};

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
