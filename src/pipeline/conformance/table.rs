//! The conformance table of `docs/onnx.md`: a section between two markers, rendered from the
//! outcomes and replaced whole when regenerated; and the hand-written list of accepted numeric
//! mismatches that the same document keeps outside the generated section.

use super::{Missing, Outcome, Verdict};
use std::collections::BTreeMap;

/// The line that opens the generated section.
pub const BEGIN: &str = "<!-- conformance table: begin (generated; do not edit) -->";

/// The line that closes it.
pub const END: &str = "<!-- conformance table: end -->";

/// The line after which the accepted numeric mismatches are listed, as a table whose rows are
/// `` | `test_name` | reason | ``.
pub const ACCEPTED: &str = "<!-- conformance: accepted numeric mismatches -->";

/// The command that regenerates the table.
pub const BLESS: &str = "COLLAGE_BLESS=1 cargo test --release --test it onnx_node_tests";

/// The most characters of a detail shown in a row.
const MAX_DETAIL: usize = 240;

/// A test whose numeric mismatch is accepted, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The test's name.
    pub test: String,
    /// Why its outputs may differ.
    pub reason: String,
}

/// The accepted mismatches listed in `doc` (none when it has no such list). A row that does
/// not name a test in backquotes, or gives no reason, is an error.
pub fn accepted(doc: &str) -> Result<Vec<Accepted>, String> {
    let Some(at) = doc.find(ACCEPTED) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let rows = doc[at + ACCEPTED.len()..]
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.trim_start().starts_with('|'));
    for (k, row) in rows.enumerate() {
        if k < 2 {
            continue; // header and separator
        }
        let cells: Vec<&str> = row
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        let test = cells
            .first()
            .and_then(|c| c.strip_prefix('`'))
            .and_then(|c| c.strip_suffix('`'))
            .filter(|t| t.starts_with("test_"));
        match (test, cells.get(1)) {
            (Some(t), Some(r)) if !r.is_empty() => out.push(Accepted {
                test: t.to_string(),
                reason: r.to_string(),
            }),
            _ => {
                return Err(format!(
                    "the accepted mismatches of docs/onnx.md have a malformed row `{row}`: write | `test_name` | reason |"
                ))
            }
        }
    }
    Ok(out)
}

/// The generated section in `doc`, markers included.
pub fn section(doc: &str) -> Option<&str> {
    let start = doc.find(BEGIN)?;
    let end = doc[start..].find(END)? + start + END.len();
    Some(&doc[start..end])
}

/// `doc` with its generated section replaced by `new` (appended at the end when it has none).
pub fn replace(doc: &str, new: &str) -> String {
    match doc
        .find(BEGIN)
        .and_then(|s| Some((s, doc[s..].find(END)? + s + END.len())))
    {
        Some((s, e)) => format!("{}{new}{}", &doc[..s], &doc[e..]),
        None => format!("{}\n{new}\n", doc.trim_end()),
    }
}

fn cell(s: &str) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut shown: String = one_line.chars().take(MAX_DETAIL).collect();
    if one_line.chars().count() > MAX_DETAIL {
        shown.push('…');
    }
    shown.replace('|', "\\|")
}

/// The class a test counts in, with accepted mismatches apart.
fn class(o: &Outcome, accepted: &[Accepted]) -> &'static str {
    match &o.verdict {
        Verdict::Mismatch(_) if accepted.iter().any(|a| a.test == o.name) => "failed (accepted)",
        v => v.class(),
    }
}

/// Renders the section: counts, the missing operators and data types, and every test.
pub fn render(outcomes: &[Outcome], accepted: &[Accepted], version: &str) -> String {
    let classes = [
        "passed",
        "failed (accepted)",
        "failed",
        "unsupported",
        "error",
    ];
    let mut all: BTreeMap<&str, usize> = BTreeMap::new();
    let mut default: BTreeMap<&str, usize> = BTreeMap::new();
    for o in outcomes {
        let c = class(o, accepted);
        *all.entry(c).or_default() += 1;
        if o.domain.is_empty() {
            *default.entry(c).or_default() += 1;
        }
    }
    let n_default = outcomes.iter().filter(|o| o.domain.is_empty()).count();
    let mut s = String::new();
    s.push_str(BEGIN);
    s.push_str("\n\n## Conformance table\n\n");
    s.push_str(&format!(
        "The node tests of `onnx` {version} on the reference interpreter, compared at rtol {:e} and \
         atol {:e} (NaN equal to NaN; integers and bools exactly). Regenerate with `{BLESS}`.\n\n",
        super::RTOL,
        super::ATOL
    ));
    s.push_str("| result | tests | of the default domain |\n|---|---:|---:|\n");
    for c in classes {
        s.push_str(&format!(
            "| {c} | {} | {} |\n",
            all.get(c).copied().unwrap_or(0),
            default.get(c).copied().unwrap_or(0)
        ));
    }
    s.push_str(&format!("| total | {} | {n_default} |\n", outcomes.len()));

    // Missing operators and unsupported uses: the tests each alone blocks, and the tests
    // naming it.
    let mut dtypes: BTreeMap<&str, usize> = BTreeMap::new();
    for o in outcomes {
        if let Verdict::Unsupported(ms) = &o.verdict {
            for m in ms {
                if let Missing::DType(d) = m {
                    *dtypes.entry(d).or_default() += 1;
                }
            }
        }
    }
    let operators = ranking(outcomes, |m| match m {
        Missing::Operator { op, .. } => Some(op),
        _ => None,
    });
    if !operators.is_empty() {
        s.push_str(
            "\n### Missing operators\n\nOperators collage does not import, by the number of \
             tests in which the operator is the only thing missing (those it alone would make \
             run), then by the tests naming it.\n\n\
             | operator | tests it alone blocks | tests naming it |\n|---|---:|---:|\n",
        );
        for (op, a, n) in operators {
            s.push_str(&format!("| `{op}` | {a} | {n} |\n"));
        }
    }
    let uses = ranking(outcomes, |m| match m {
        Missing::Usage { op, .. } => Some(op),
        _ => None,
    });
    if !uses.is_empty() {
        s.push_str(
            "\n### Unsupported uses\n\nOperators that are imported, but not with the attributes \
             or inputs of these tests (E3023), or whose inputs must be known at import time \
             (E3025); ranked as above.\n\n\
             | operator | tests it alone blocks | tests naming it |\n|---|---:|---:|\n",
        );
        for (op, a, n) in uses {
            s.push_str(&format!("| `{op}` | {a} | {n} |\n"));
        }
    }
    let interpreter = ranking(outcomes, |m| match m {
        Missing::Interpreter { op, .. } => Some(op),
        _ => None,
    });
    if !interpreter.is_empty() {
        s.push_str(
            "\n### Not run by the interpreter\n\ncollage operators the importer emits but the \
             reference interpreter does not run (E2301), at all or on the tests' dtypes; ranked \
             as above.\n\n\
             | collage operator | tests it alone blocks | tests naming it |\n|---|---:|---:|\n",
        );
        for (op, a, n) in interpreter {
            s.push_str(&format!("| `{op}` | {a} | {n} |\n"));
        }
    }
    if !dtypes.is_empty() {
        s.push_str("\n### Missing data types\n\n| diagnostic | tests |\n|---|---:|\n");
        let mut ds: Vec<(&str, usize)> = dtypes.into_iter().collect();
        ds.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        for (d, n) in ds {
            s.push_str(&format!("| {} | {n} |\n", cell(d)));
        }
    }

    s.push_str("\n### Every test\n\n| test | result | detail |\n|---|---|---|\n");
    for o in outcomes {
        let mut detail = o.verdict.detail();
        if let Some(a) = accepted.iter().find(|a| a.test == o.name) {
            if matches!(o.verdict, Verdict::Mismatch(_)) {
                detail = format!("accepted ({}): {detail}", a.reason);
            }
        }
        if !o.bound.is_empty() {
            let names: Vec<String> = o.bound.iter().map(|n| format!("`{n}`")).collect();
            let note = format!("inputs bound to their data: {}", names.join(", "));
            detail = if detail.is_empty() {
                note
            } else {
                format!("{note}; {detail}")
            };
        }
        if !o.domain.is_empty() {
            detail = if detail.is_empty() {
                format!("domain `{}`", o.domain)
            } else {
                format!("domain `{}`: {detail}", o.domain)
            };
        }
        s.push_str(&format!(
            "| `{}` | {} | {} |\n",
            o.name,
            class(o, accepted),
            cell(&detail)
        ));
    }
    s.push('\n');
    s.push_str(END);
    s
}

/// The operators `key` picks out of the missing things of unsupported tests, with the number of
/// tests in which only that operator is missing and the number naming it; by the first count,
/// then the second, then name.
fn ranking<'a>(
    outcomes: &'a [Outcome],
    key: impl Fn(&'a Missing) -> Option<&'a String>,
) -> Vec<(&'a str, usize, usize)> {
    let mut alone: BTreeMap<&str, usize> = BTreeMap::new();
    let mut naming: BTreeMap<&str, usize> = BTreeMap::new();
    for o in outcomes {
        let Verdict::Unsupported(ms) = &o.verdict else {
            continue;
        };
        let mut ops: Vec<&str> = ms.iter().filter_map(&key).map(String::as_str).collect();
        ops.sort_unstable();
        ops.dedup();
        // Alone: nothing else of any kind is missing (several uses of one operator count once).
        let only = ops.len() == 1 && ms.iter().all(|m| key(m).is_some());
        for op in ops {
            *naming.entry(op).or_default() += 1;
            if only {
                *alone.entry(op).or_default() += 1;
            }
        }
    }
    let mut out: Vec<(&str, usize, usize)> = naming
        .iter()
        .map(|(op, &n)| (*op, alone.get(op).copied().unwrap_or(0), n))
        .collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(b.0)));
    out
}

/// What makes the run fail whatever the table says: panics, time-outs, tests not run,
/// mismatches not in the accepted list, and accepted tests that no longer mismatch (or that
/// do not exist).
pub fn problems(outcomes: &[Outcome], accepted: &[Accepted]) -> Vec<String> {
    let mut out = Vec::new();
    for o in outcomes {
        let listed = accepted.iter().any(|a| a.test == o.name);
        match &o.verdict {
            Verdict::Panicked(m) => out.push(format!("{}: panicked: {m}", o.name)),
            Verdict::TimedOut => out.push(format!("{}: timed out", o.name)),
            Verdict::NotRun => out.push(format!("{}: not run", o.name)),
            Verdict::Mismatch(m) if !listed => out.push(format!(
                "{}: numeric mismatch not in the accepted list of docs/onnx.md: {m}",
                o.name
            )),
            v if listed && !matches!(v, Verdict::Mismatch(_)) => out.push(format!(
                "{}: in the accepted mismatches of docs/onnx.md, but it is {}",
                o.name,
                v.class()
            )),
            _ => {}
        }
    }
    for a in accepted {
        if !outcomes.iter().any(|o| o.name == a.test) {
            out.push(format!(
                "{}: in the accepted mismatches of docs/onnx.md, but there is no such test",
                a.test
            ));
        }
    }
    out
}

/// The first line where two texts differ (1-based), with both versions, for a stale-table
/// message.
pub fn first_difference(old: &str, new: &str) -> Option<String> {
    let (mut a, mut b) = (old.lines(), new.lines());
    let mut line = 1;
    loop {
        match (a.next(), b.next()) {
            (None, None) => return None,
            (x, y) if x == y => line += 1,
            (x, y) => {
                return Some(format!(
                    "line {line} of the section: `{}` in docs/onnx.md, `{}` now",
                    x.unwrap_or("(end)"),
                    y.unwrap_or("(end)")
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn o(name: &str, domain: &str, verdict: Verdict) -> Outcome {
        Outcome {
            name: name.into(),
            domain: domain.into(),
            bound: Vec::new(),
            verdict,
            time: Duration::ZERO,
        }
    }

    fn op(op: &str) -> Missing {
        Missing::Operator {
            op: op.into(),
            code: "E3022",
        }
    }

    #[test]
    fn the_section_counts_and_ranks() {
        let outcomes = vec![
            o("test_a", "", Verdict::Passed),
            o("test_b", "", Verdict::Unsupported(vec![op("If")])),
            o(
                "test_c",
                "",
                Verdict::Unsupported(vec![op("If"), op("Loop")]),
            ),
            o("test_d", "", Verdict::Unsupported(vec![op("Loop")])),
            o("test_e", "", Verdict::Unsupported(vec![op("If")])),
            o("test_f", "", Verdict::Mismatch("a | b".into())),
            o("test_g", "ai.onnx.ml", Verdict::Error("E3004: x".into())),
        ];
        let acc = vec![Accepted {
            test: "test_f".into(),
            reason: "random".into(),
        }];
        let s = render(&outcomes, &acc, "1.22.0");
        assert!(s.starts_with(BEGIN) && s.ends_with(END));
        assert!(s.contains("| passed | 1 | 1 |\n| failed (accepted) | 1 | 1 |\n| failed | 0 | 0 |\n| unsupported | 4 | 4 |\n| error | 1 | 0 |\n| total | 7 | 6 |"), "{s}");
        assert!(s.contains("| `If` | 2 | 3 |\n| `Loop` | 1 | 2 |"), "{s}");
        assert!(
            s.contains("| `test_f` | failed (accepted) | accepted (random): a \\| b |"),
            "{s}"
        );
        assert!(
            s.contains("| `test_g` | error | domain `ai.onnx.ml`: E3004: x |"),
            "{s}"
        );
        assert!(problems(&outcomes, &acc).is_empty());
        assert_eq!(problems(&outcomes, &[]).len(), 1);
        let stale = vec![Accepted {
            test: "test_a".into(),
            reason: "r".into(),
        }];
        assert_eq!(
            problems(&outcomes, &stale),
            vec![
                "test_a: in the accepted mismatches of docs/onnx.md, but it is passed".to_string(),
                "test_f: numeric mismatch not in the accepted list of docs/onnx.md: a | b".into()
            ]
        );
    }

    #[test]
    fn the_section_is_replaced_or_appended() {
        let doc = "# T\n\ntext\n";
        let first = replace(doc, &format!("{BEGIN}\nold\n{END}"));
        assert_eq!(first, format!("# T\n\ntext\n{BEGIN}\nold\n{END}\n"));
        let second = replace(&first, &format!("{BEGIN}\nnew\n{END}"));
        assert_eq!(second, format!("# T\n\ntext\n{BEGIN}\nnew\n{END}\n"));
        assert_eq!(
            section(&second),
            Some(format!("{BEGIN}\nnew\n{END}").as_str())
        );
        assert_eq!(
            first_difference("a\nb\n", "a\nc\n").unwrap(),
            "line 2 of the section: `b` in docs/onnx.md, `c` now"
        );
        assert_eq!(first_difference("a", "a"), None);
    }

    #[test]
    fn accepted_rows_are_parsed_and_checked() {
        let doc = format!(
            "x\n{ACCEPTED}\n\n| test | reason |\n|---|---|\n| `test_dropout` | random masks |\n\nafter\n"
        );
        assert_eq!(
            accepted(&doc).unwrap(),
            vec![Accepted {
                test: "test_dropout".into(),
                reason: "random masks".into()
            }]
        );
        let empty = format!("{ACCEPTED}\n\n| test | reason |\n|---|---|\n\nafter");
        assert_eq!(accepted(&empty).unwrap(), vec![]);
        let bad = format!("{ACCEPTED}\n| test | reason |\n|---|---|\n| test_x | |\n");
        assert!(accepted(&bad).unwrap_err().contains("malformed row"));
        assert_eq!(accepted("nothing").unwrap(), vec![]);
    }
}
