//! The rules-language fixture suite.
//!
//! * `tests/fixtures/dsl/ok/*.rules` check with no errors and no warnings; the compiled program
//!   (`print_program`) of each is snapshotted. Fixtures may import each other and the shipped
//!   library (`../../../../rules/prelude.rules`), so they are checked from the file system.
//! * `tests/fixtures/dsl/err/*.rules` start with `// expect: CODE` and must produce that code;
//!   every diagnostic has a primary span inside its file, and the rendered diagnostics are
//!   snapshotted. Helper files imported by err fixtures live in `err/support/` (not globbed).
//! * Every `E1xxx`/`W1xxx` code has an err fixture.
//! * The complete examples of `docs/language.md` are fixtures. Convention: a fenced block whose
//!   info string is `rules` is a complete rules text; it must check clean and be, byte for byte,
//!   the fixture `tests/fixtures/dsl/ok/language-example-N.rules` (N counts `rules` blocks from
//!   1). Syntax sketches and fragments are fenced as `text`; a bare fence is not allowed.
//! * Every shipped `rules/*.rules` file checks clean, and its compiled program is snapshotted.
//!
//! Files are checked under their path relative to the repository root (the working directory of
//! integration tests), so snapshot texts do not depend on where the repository lives.

use crate::support::{rel, root};
use collage::diag::{Diagnostics, ALL_CODES};
use collage::rules::ruletree::print::print_program;
use collage::rules::sema::{self, Checked, Provider};
use collage::source::SourceMap;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Checks a file (and what it imports) from the file system, under its repository-relative path.
pub fn check_file(path: &Path) -> (SourceMap, Checked) {
    let mut sources = SourceMap::new();
    let checked = sema::check(&mut sources, &Provider::Files, &[PathBuf::from(rel(path))]);
    (sources, checked)
}

/// The `.rules` files directly in a repository directory, sorted.
pub fn rules_files(dir: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().path())
                .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "rules"))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Every rules text of the repository: the shipped library and all fixtures (support files
/// included).
pub fn all_rules_files() -> Vec<PathBuf> {
    [
        "rules",
        "tests/fixtures/dsl/ok",
        "tests/fixtures/dsl/err",
        "tests/fixtures/dsl/err/support",
    ]
    .iter()
    .flat_map(|d| rules_files(d))
    .collect()
}

/// Custom operators (`operator ...;`) are registered process-wide by the checker, first
/// declaration wins. Checking every fixture and shipped file once, before anything else checks
/// rules texts, registers their declarations first, so that results do not depend on the order
/// in which tests run (and fuzzed variants of a declaration cannot pre-empt the real one).
pub fn prime_custom_operators() {
    static PRIMED: OnceLock<()> = OnceLock::new();
    PRIMED.get_or_init(|| {
        for path in all_rules_files() {
            let _ = check_file(&path);
        }
    });
}

/// `insta::glob!` counts snapshot failures on one process-wide stack, so globs running at the
/// same time in several test threads credit each other's failures. The glob tests of this module
/// take this lock to run one at a time.
fn glob_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The code named on the first line of an err fixture.
fn expected_code(text: &str) -> Option<String> {
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix("// expect: "))
        .map(|c| c.trim().to_string())
}

/// Problems with the spans of a set of diagnostics: every diagnostic needs a primary span, and
/// every label must lie inside its file, on character boundaries.
pub fn span_problems(sources: &SourceMap, diags: &Diagnostics) -> Vec<String> {
    let mut out = Vec::new();
    for d in diags {
        if d.primary_span().is_none() {
            out.push(format!("{}: no primary span: {}", d.code.id, d.message));
        }
        for l in &d.labels {
            let text = sources.text(l.span.file);
            let (s, e) = (l.span.start as usize, l.span.end as usize);
            if s > e || e > text.len() || !text.is_char_boundary(s) || !text.is_char_boundary(e) {
                out.push(format!(
                    "{}: label {s}..{e} outside its file ({} bytes): {}",
                    d.code.id,
                    text.len(),
                    d.message
                ));
            }
        }
    }
    out
}

/// Records a failure, and prints it at once: `insta::glob!` panics on snapshot mismatches
/// before the collected failures are asserted.
fn fail(failures: &mut Vec<String>, message: String) {
    eprintln!("{message}\n");
    failures.push(message);
}

/// Panics with all collected failures, if any.
fn assert_no_failures(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} {what}:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn ok_fixtures_check_clean() {
    prime_custom_operators();
    let _glob = glob_lock();
    let mut failures = Vec::new();
    insta::glob!("../fixtures/dsl", "ok/*.rules", |path| {
        let (sources, checked) = check_file(path);
        if !checked.diags.is_empty() {
            fail(
                &mut failures,
                format!(
                    "{} is not clean:\n{}",
                    rel(path),
                    checked.diags.render_plain(&sources)
                ),
            );
            return;
        }
        let Some(program) = checked.program else {
            fail(
                &mut failures,
                format!("{}: no program and no diagnostics", rel(path)),
            );
            return;
        };
        insta::assert_snapshot!(print_program(&program));
    });
    assert_no_failures("ok fixtures failed", &failures);
}

#[test]
fn err_fixtures_report_their_code() {
    prime_custom_operators();
    let _glob = glob_lock();
    let mut failures = Vec::new();
    insta::glob!("../fixtures/dsl", "err/*.rules", |path| {
        // Lossy: one fixture is not UTF-8 on purpose (E1003); its first line is.
        let text = String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
        let Some(expected) = expected_code(&text) else {
            fail(
                &mut failures,
                format!("{}: the first line must be `// expect: CODE`", rel(path)),
            );
            return;
        };
        let (sources, checked) = check_file(path);
        let rendered = checked.diags.render_plain(&sources);
        let codes: Vec<&str> = checked.diags.iter().map(|d| d.code.id).collect();
        if !codes.contains(&expected.as_str()) {
            fail(
                &mut failures,
                format!(
                    "{}: expected {expected}, got {codes:?}\n{rendered}",
                    rel(path)
                ),
            );
        }
        if checked.diags.has_errors() == checked.program.is_some() {
            fail(
                &mut failures,
                format!(
                    "{}: a program must be produced exactly when there are no errors",
                    rel(path)
                ),
            );
        }
        if expected.starts_with('W') && checked.diags.has_errors() {
            fail(
                &mut failures,
                format!(
                    "{}: a warning fixture must have no errors\n{rendered}",
                    rel(path)
                ),
            );
        }
        for p in span_problems(&sources, &checked.diags) {
            fail(&mut failures, format!("{}: {p}", rel(path)));
        }
        insta::assert_snapshot!(rendered);
    });
    assert_no_failures("err fixtures failed", &failures);
}

#[test]
fn every_rules_code_has_an_err_fixture() {
    let covered: BTreeSet<String> = rules_files("tests/fixtures/dsl/err")
        .iter()
        .filter_map(|p| expected_code(&String::from_utf8_lossy(&std::fs::read(p).unwrap())))
        .collect();
    let missing: Vec<&str> = ALL_CODES
        .iter()
        .map(|c| c.id)
        .filter(|id| id.starts_with("E1") || id.starts_with("W1"))
        .filter(|id| !covered.contains(*id))
        .collect();
    assert!(
        missing.is_empty(),
        "rules codes without an err fixture: {missing:?}"
    );
}

/// The fenced code blocks of a Markdown text: `(info string, body, line of the opening fence)`.
fn fenced_blocks(markdown: &str) -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String, usize)> = None;
    for (i, line) in markdown.split_inclusive('\n').enumerate() {
        let trimmed = line.trim_end();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some((info.trim().to_string(), String::new(), i + 1));
                }
            }
            Some((_, body, _)) => {
                if trimmed == "```" {
                    out.extend(open.take());
                } else {
                    body.push_str(line);
                }
            }
        }
    }
    assert!(open.is_none(), "an unclosed code fence");
    out
}

#[test]
fn language_reference_examples_are_fixtures() {
    prime_custom_operators();
    let doc = std::fs::read_to_string(root().join("docs/language.md")).unwrap();
    let blocks = fenced_blocks(&doc);
    let mut failures = Vec::new();
    let mut examples = 0;
    for (info, body, line) in &blocks {
        match info.as_str() {
            "text" => continue,
            "rules" => {}
            other => {
                fail(
                    &mut failures,
                    format!(
                    "docs/language.md:{line}: a code fence must be ```rules (a complete example) \
                     or ```text (a fragment), not ```{other}"
                ),
                );
                continue;
            }
        }
        examples += 1;
        let name = format!("language-example-{examples}.rules");
        let (sources, checked) = sema::check_text(&format!("docs/language.md:{line}"), body);
        if !checked.diags.is_empty() || checked.program.is_none() {
            fail(
                &mut failures,
                format!(
                    "docs/language.md:{line}: the example does not check clean:\n{}",
                    checked.diags.render_plain(&sources)
                ),
            );
        }
        let fixture = root().join("tests/fixtures/dsl/ok").join(&name);
        match std::fs::read_to_string(&fixture) {
            Ok(text) if text == *body => {}
            Ok(_) => fail(
                &mut failures,
                format!(
                    "docs/language.md:{line}: the example differs from {}",
                    rel(&fixture)
                ),
            ),
            Err(_) => fail(
                &mut failures,
                format!(
                    "docs/language.md:{line}: the example has no fixture {}",
                    rel(&fixture)
                ),
            ),
        }
    }
    assert!(examples > 0, "docs/language.md has no ```rules examples");
    // No stale example fixtures beyond the examples the reference has.
    for path in rules_files("tests/fixtures/dsl/ok") {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let n = file
            .strip_prefix("language-example-")
            .and_then(|r| r.strip_suffix(".rules"))
            .and_then(|n| n.parse::<usize>().ok());
        if n.is_some_and(|n| n == 0 || n > examples) {
            fail(
                &mut failures,
                format!("{} is not an example of docs/language.md", rel(&path)),
            );
        }
    }
    assert_no_failures("language reference problems", &failures);
}

#[test]
fn shipped_rules_check_clean_and_snapshot() {
    prime_custom_operators();
    let _glob = glob_lock();
    let mut failures = Vec::new();
    insta::glob!("../../rules", "*.rules", |path| {
        let (sources, checked) = check_file(path);
        if !checked.diags.is_empty() {
            fail(
                &mut failures,
                format!(
                    "{} is not clean:\n{}",
                    rel(path),
                    checked.diags.render_plain(&sources)
                ),
            );
            return;
        }
        let Some(program) = checked.program else {
            fail(
                &mut failures,
                format!("{}: no program and no diagnostics", rel(path)),
            );
            return;
        };
        insta::assert_snapshot!(print_program(&program));
    });
    assert_no_failures("shipped rules files failed", &failures);
}
