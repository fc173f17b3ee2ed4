//! Robustness of the rules-language front end (`sema::check_text`: parser, lowering, checker)
//! and of what it feeds (diagnostic rendering, `print_program`).
//!
//! * **Mutation fuzzing**: random byte-level edits (bit flips, inserted bytes and grammar tokens,
//!   deletions, duplications, splices of other files, truncation) of the shipped `rules/*.rules`
//!   and of every fixture. Each mutant is checked on its own (`check_text`, imports unresolved)
//!   and in place among the unmodified library and fixtures (imports resolved), and must never
//!   panic; an error-free check yields a program, which prints; every diagnostic has a primary
//!   span and all labels lie inside their file, on character boundaries; each check is quick.
//! * **Token soups**: random sequences drawn from the grammar's vocabulary, same properties.
//! * **Deep nesting and huge inputs**: each case runs in a child process (a stack overflow
//!   aborts the process) on a thread with the default 2 MiB test-thread stack, and must return
//!   (errors are fine) within a time limit. Cases that used to overflow the stack or take too
//!   long are kept among them as regression tests.
//!
//! Case counts: `COLLAGE_FUZZ_CASES` (default 2000) for each fuzzing property. A long run:
//!
//! ```text
//! COLLAGE_FUZZ_CASES=100000 cargo test --release --test it robustness_dsl
//! ```

use crate::dsl::{all_rules_files, prime_custom_operators, span_problems};
use crate::mutate::{apply_byte_edit, byte_edit, mutate, ByteEdit, Weights};
use crate::support::rel;
use collage::rules::ruletree::print::print_program;
use collage::rules::sema::{self, Checked, Provider};
use collage::source::SourceMap;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Shared helpers

fn config() -> Config {
    let cases = std::env::var("COLLAGE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(2000);
    Config {
        cases,
        // Shrunk failures are printed in full; no regression files in the source tree.
        failure_persistence: None,
        ..Config::default()
    }
}

/// Every rules text of the repository, `(repository-relative path, text)`: the shipped library
/// and all fixtures.
fn corpus() -> &'static [(String, String)] {
    static CORPUS: OnceLock<Vec<(String, String)>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let out: Vec<(String, String)> = all_rules_files()
            .iter()
            // Lossy: one error fixture is not UTF-8 on purpose.
            .map(|p| {
                (
                    rel(p),
                    String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned(),
                )
            })
            .collect();
        assert!(out.len() > 80, "the rules corpus has {} files", out.len());
        out
    })
}

/// The longest a single check of a fuzzed input may take.
const CHECK_LIMIT: Duration = Duration::from_secs(5);

/// Validates the result of one check.
fn validate(sources: &SourceMap, checked: &Checked) -> Result<(), String> {
    if checked.diags.has_errors() == checked.program.is_some() {
        return Err(format!(
            "errors: {}, program: {}",
            checked.diags.has_errors(),
            checked.program.is_some()
        ));
    }
    let problems = span_problems(sources, &checked.diags);
    if !problems.is_empty() {
        return Err(problems.join("\n"));
    }
    let rendered = checked.diags.render_plain(sources);
    if rendered.is_empty() != checked.diags.is_empty() {
        return Err("diagnostics render to nothing".into());
    }
    if let Some(p) = &checked.program {
        let _ = print_program(p);
    }
    Ok(())
}

/// Checks a text on its own (`check_text`: imports are not found) and validates the result.
fn check_alone(name: &str, text: &str) -> Result<(), String> {
    let start = Instant::now();
    let (sources, checked) = sema::check_text(name, text);
    let elapsed = start.elapsed();
    validate(&sources, &checked)?;
    if elapsed > CHECK_LIMIT {
        return Err(format!("checking took {elapsed:?}"));
    }
    Ok(())
}

/// Checks a text as the file `name` among the unmodified corpus (so its imports resolve).
fn check_in_place(name: &str, text: &str) -> Result<(), String> {
    let table: Vec<(&str, &str)> = corpus()
        .iter()
        .filter(|(n, _)| n != name)
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .chain(std::iter::once((name, text)))
        .collect();
    let start = Instant::now();
    let mut sources = SourceMap::new();
    let checked = sema::check(
        &mut sources,
        &Provider::Embedded(&table),
        &[PathBuf::from(name)],
    );
    let elapsed = start.elapsed();
    validate(&sources, &checked)?;
    if elapsed > CHECK_LIMIT {
        return Err(format!("checking took {elapsed:?}"));
    }
    Ok(())
}

/// An excerpt of a (possibly large) failing input, for failure messages.
fn excerpt(text: &str) -> String {
    if text.len() <= 4000 {
        return text.to_string();
    }
    let cut = text.floor_char_boundary(4000);
    format!("{}\n… ({} bytes in all)", &text[..cut], text.len())
}

// ---------------------------------------------------------------------------------------------
// a. Mutation fuzzing

/// Byte strings likely to change how a rules text parses or checks.
const INTERESTING: &[&str] = &[
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "$",
    ";",
    "|",
    "?",
    ",",
    ".",
    "..",
    ":",
    "=",
    "==",
    "=>",
    "->",
    "!",
    "&&",
    "||",
    "+",
    "-",
    "*",
    "/",
    "%",
    "_",
    "\\",
    "\\q",
    "//",
    "///",
    "\n",
    "\t",
    " ",
    "\0",
    "é",
    "…",
    "😀",
    "\u{feff}",
    "import",
    "import \"prelude.rules\";",
    "import \"missing.rules\";",
    "operator",
    "operator fuzz.op(data) : elemwise;",
    "pattern",
    "predicate",
    "combiner",
    "rule",
    "equiv",
    "rewrite",
    "target",
    "where",
    "as",
    "in",
    "const",
    "true",
    "false",
    "tuple(..)",
    "dtype(",
    "rank(",
    "shape(",
    " : dtype(float16)",
    " : rank(4)",
    " : shape(1, _)",
    ".0",
    "$x",
    "$call",
    "$call.args[0]",
    ".args[",
    ".dtype",
    ".shape",
    ".rank",
    ".is_const",
    ".groups",
    "[-1]",
    "len(",
    "product(",
    "all(",
    "by_kind(",
    "A -> B",
    "tuple_arg",
    "ops(",
    "composite(",
    "primitive(",
    "union(",
    "combine(",
    "only_valid(",
    "op_call_by_kind",
    "host",
    "max_depth = ",
    "max_exits = ",
    "taps = ",
    "prefix = ",
    "patterns = [",
    "rule = ",
    "device = ",
    "cuda(0)",
    "VirtualDevice(",
    "refines = ",
    "fusion = ",
    "compiler = ",
    "cost {",
    "efficiency {",
    "transition {",
    "tflops",
    "gbps",
    "us",
    "nn.conv2d",
    "nn.pad",
    "add",
    "float16",
    "int8",
    "0",
    "-1",
    "1e-5",
    "1e999",
    "99999999999999999999",
    "4294967296",
    "((((((((",
    "))))))))",
    "[[[[[[[[",
];

fn mutation() -> impl Strategy<Value = ByteEdit> {
    byte_edit(&Weights {
        flip_bit: 3,
        replace_byte: 2,
        insert_bytes: 2,
        insert_interesting: 6,
        replace_interesting: 3,
        delete: 3,
        duplicate: 1,
        splice: 2,
        truncate: 1,
    })
}

fn apply(bytes: &mut Vec<u8>, e: &ByteEdit) {
    apply_byte_edit(bytes, e, INTERESTING, corpus());
}

proptest! {
    #![proptest_config(config())]

    /// Random edits of the library and the fixtures never make the checker panic, and every
    /// outcome is well-formed.
    #[test]
    fn mutated_rules_never_panic(
        file in any::<Index>(),
        muts in prop::collection::vec(mutation(), 1..6),
    ) {
        prime_custom_operators();
        let (name, text) = mutate(corpus(), &file, &muts, apply);
        if let Err(e) = check_alone(&name, &text) {
            prop_assert!(false, "{name} alone: {e}\n--- input ---\n{}", excerpt(&text));
        }
        if let Err(e) = check_in_place(&name, &text) {
            prop_assert!(false, "{name} in place: {e}\n--- input ---\n{}", excerpt(&text));
        }
    }
}

#[test]
fn unmutated_corpus_checks_in_both_modes() {
    prime_custom_operators();
    for (name, text) in corpus() {
        check_alone(name, text).unwrap_or_else(|e| panic!("{name} alone: {e}"));
        check_in_place(name, text).unwrap_or_else(|e| panic!("{name} in place: {e}"));
    }
}

// ---------------------------------------------------------------------------------------------
// b. Token soups

/// The vocabulary of the rules grammar, with names the checker knows and names it does not.
#[rustfmt::skip]
const VOCABULARY: &[&str] = &[
    // Item keywords and other reserved words.
    "import", "operator", "pattern", "predicate", "combiner", "rule", "equiv", "rewrite", "target",
    "where", "as", "in", "const", "true", "false",
    // Contextual words.
    "tuple", "dtype", "rank", "shape", "by_kind", "ops", "composite", "primitive", "union",
    "combine", "only_valid", "op_call_by_kind", "host", "tuple_arg", "tuple_proj", "constant",
    "patterns", "cost", "efficiency", "transition", "VirtualDevice", "len", "product", "sum", "min",
    "max", "all", "any", "compiler", "device", "fusion", "max_depth", "refines", "peak",
    "bandwidth", "launch", "latency", "default", "max_exits", "taps", "prefix", "none", "tvm",
    "arbitrary", "cpu", "cuda", "id", "scope", "None",
    // Operators, dtypes and kinds.
    "nn.conv2d", "nn.dense", "nn.relu", "nn.pad", "nn.bias_add", "nn.batch_norm", "add", "multiply",
    "concatenate", "cast", "clip", "sigmoid", "fuzz.op", "nn.nope", "float16", "float32", "int8",
    "bool", "float17", "A", "B", "I", "E", "R", "T", "O", "elemwise", "injective", "X",
    // Names and captures.
    "x", "y", "p", "q", "t", "c", "bias", "dense", "gelu_erf", "fuse_ops", "tvm_fusion",
    "same_gemm_dtype", "data_layout", "groups", "units", "$x", "$y", "$conv", "$call", "$a", "$b",
    "$", ".dtype", ".shape", ".rank", ".is_const", ".args", ".groups", ".0", ".1",
    // Literals.
    "0", "1", "-1", "8", "0.5", "1e-5", "19.5", "99999999999999999999", "1e999", "\"NHWC\"", "\"\"",
    "\"a\\\"b\"", "\"\\q\"", "\"unterminated", "\"cutlass\"", "\"prelude.rules\"", "tflops",
    "gflops", "gbps", "tbps", "ns", "us", "ms", "s",
    // Punctuation.
    ";", ",", "=", "==", "=>", "->", "(", ")", "[", "]", "{", "}", ":", ".", "..", "|", "?", "+",
    "!", "&&", "||", "<", "<=", ">", ">=", "!=", "-", "*", "/", "%", "_",
    // Trivia.
    "// comment\n", "/// doc\n", "\n",
];

/// Item openings, to start soups where the grammar goes deep.
const OPENINGS: &[&str] = &[
    "",
    "pattern p = ",
    "pattern p(x) = ",
    "predicate q($a, $b: nn.conv2d) = ",
    "combiner c = ",
    "rule r = ",
    "equiv ",
    "rewrite ",
    "target t { device = cuda(0); rule = ",
    "target t { compiler = \"t\"; device = cpu; patterns = [ \"t.p\" = ",
    "target t { device = cpu; rule = host; cost { ",
    "pattern p = nn.relu($x) where ",
    "import \"prelude.rules\"; pattern p = ",
];

fn soup() -> impl Strategy<Value = String> {
    (
        any::<Index>(),
        prop::collection::vec((any::<Index>(), 0u8..4), 0..120),
    )
        .prop_map(|(opening, tokens)| {
            let mut s = opening.get(OPENINGS).to_string();
            for (t, sep) in tokens {
                let token = t.get::<&str>(VOCABULARY);
                s.push_str(token);
                s.push_str(match sep {
                    0 => "",
                    3 => "\n",
                    _ => " ",
                });
            }
            s
        })
}

proptest! {
    #![proptest_config(config())]

    /// Random sequences of the grammar's tokens never make the checker panic.
    #[test]
    fn token_soups_never_panic(text in soup()) {
        prime_custom_operators();
        if let Err(e) = check_alone("soup.rules", &text) {
            prop_assert!(false, "{e}\n--- input ---\n{}", excerpt(&text));
        }
        if let Err(e) = check_in_place("rules/soup.rules", &text) {
            prop_assert!(false, "in place: {e}\n--- input ---\n{}", excerpt(&text));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// c. Deep nesting and huge inputs

/// Builds the text of a deep case.
type Builder = fn() -> String;

/// Deep and huge inputs that return: `(name, builder)`.
const DEEP_CASES: &[(&str, Builder)] = &[
    // Stopped by the parser's stack guard with E1001 ("stack limit reached").
    ("parentheses-100000", || {
        nested("pattern p = ", "(", "_", ")", ";", 100_000)
    }),
    ("unclosed-parentheses-100000", || {
        format!("pattern p = {}_;", "(".repeat(100_000))
    }),
    ("union-50000", || {
        nested("rule r = ", "union(", "op_call_by_kind", ")", ";", 50_000)
    }),
    // Accepted.
    ("string-1mb", || {
        format!(
            "target t {{ compiler = \"{}\"; device = cpu; patterns = [\"t.p\" = nn.relu(_)]; }}",
            "x".repeat(1 << 20)
        )
    }),
    ("alternatives-100000", || {
        format!("pattern p = _{};", " | _".repeat(100_000))
    }),
    ("items-10000", || items(10_000)),
    // Formerly overflowed the stack or took too long: now each is refused with a diagnostic
    // (nesting limits in the lowering) or checked in linear time.
    // Stack overflow in `Checker::pred` (src/rules/sema/pred.rs), which recurses once per `!` or `-`,
    // and in the recursive drop of the `ast::Expr` chain.
    ("not-100000", || {
        format!("pattern p = nn.relu($x) where {}true;", "!".repeat(100_000))
    }),
    ("minus-100000", || {
        format!(
            "pattern p = nn.relu($x) where {}1 == 1;",
            "-".repeat(100_000)
        )
    }),
    // Stack overflow in `Checker::pred`/`Checker::binary`: a left-nested chain is one level per
    // operator.
    ("and-chain-10000", || {
        format!(
            "pattern p = nn.relu($x) where true{};",
            " && true".repeat(10_000)
        )
    }),
    // Stack overflow in lowering (src/rules/dsl/lower.rs) below the parser's stack guard:
    // `Lowerer::rule_expr`, the pattern chain `pattern -> pat_alt -> pat_as -> pat_postfix ->
    // pat_primary -> call_pat`, and the expression chain `expr -> binary_chain -> ... -> atom`.
    ("union-2000", || {
        nested("rule r = ", "union(", "op_call_by_kind", ")", ";", 2000)
    }),
    ("calls-1000", || {
        nested("pattern p = ", "nn.relu(", "_", ")", ";", 1000)
    }),
    ("tuples-1000", || {
        nested("pattern p = ", "(_, ", "_", ")", ";", 1000)
    }),
    ("expression-parentheses-1000", || {
        nested(
            "pattern p = nn.relu($x) where ",
            "(",
            "true",
            ")",
            ";",
            1000,
        )
    }),
    ("lists-1000", || {
        nested(
            "pattern p = nn.relu($x) where 1 in ",
            "[",
            "1",
            "]",
            ";",
            1000,
        )
    }),
    // Exponential backtracking in the grammar: `pat_primary` tries `tuple_pat` and then
    // `group_pat`, each re-parsing the whole inner pattern (20 levels: about 3 s, 22: 10 s).
    ("parentheses-32", || {
        nested("pattern p = ", "(", "_", ")", ";", 32)
    }),
    // Quadratic in the number of definitions (`Checker::warn_unused` rescans the file's items
    // for every definition): 100 000 one-line patterns (2.6 MB) take about 20 s.
    ("items-100000", || items(100_000)),
];

/// `prefix open^n inner close^n suffix`.
fn nested(prefix: &str, open: &str, inner: &str, close: &str, suffix: &str, n: usize) -> String {
    let mut s = String::with_capacity(prefix.len() + n * (open.len() + close.len()) + 64);
    s.push_str(prefix);
    s.push_str(&open.repeat(n));
    s.push_str(inner);
    s.push_str(&close.repeat(n));
    s.push_str(suffix);
    s
}

/// `n` one-line pattern definitions.
fn items(n: usize) -> String {
    (0..n)
        .map(|i| format!("pattern p{i} = nn.relu(_);\n"))
        .collect()
}

/// How long one deep case may take in its child process.
const DEEP_LIMIT: Duration = Duration::from_secs(10);

/// The marker the child prints when a case has returned.
const DONE: &str = "DEEP CASE RETURNED";

/// Runs in a child process started by [`run_deep_cases`]: checks the case named by
/// `COLLAGE_DEEP_CASE` on a thread with the default 2 MiB test-thread stack.
#[test]
#[ignore = "run in a child process by deep_nesting_and_huge_inputs_return"]
fn deep_case_child() {
    let Ok(name) = std::env::var("COLLAGE_DEEP_CASE") else {
        return;
    };
    let build = DEEP_CASES
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no deep case `{name}`"))
        .1;
    let text = build();
    let worker = std::thread::Builder::new()
        .name(name.clone())
        .stack_size(2 << 20)
        .spawn(move || {
            let start = Instant::now();
            let (sources, checked) = sema::check_text("deep.rules", &text);
            validate(&sources, &checked)?;
            let codes: Vec<&str> = checked.diags.iter().map(|d| d.code.id).collect();
            Ok::<String, String>(format!("{:?} {codes:?}", start.elapsed()))
        })
        .unwrap();
    match worker.join() {
        Ok(Ok(summary)) => println!("{DONE}: {name}: {summary}"),
        Ok(Err(e)) => panic!("{name}: {e}"),
        Err(_) => panic!("{name}: the check panicked"),
    }
}

/// Runs each case in a child process (this test binary, running [`deep_case_child`]) and
/// returns the failures.
fn run_deep_cases(cases: &[(&str, Builder)]) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let mut failures = Vec::new();
    for (name, _) in cases {
        let start = Instant::now();
        let mut child = Command::new(&exe)
            .args([
                "robustness_dsl::deep_case_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("COLLAGE_DEEP_CASE", name)
            .env_remove("RUST_MIN_STACK")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if start.elapsed() > DEEP_LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let returned = stdout.lines().find(|l| l.contains(DONE));
        match (status, returned) {
            (Some(s), Some(line)) if s.success() => {
                let summary = &line[line.find(DONE).unwrap_or(0)..];
                eprintln!("{summary}");
            }
            (None, _) => failures.push(format!("{name}: no result after {DEEP_LIMIT:?}")),
            (Some(s), _) => {
                let why = stderr
                    .lines()
                    .chain(stdout.lines())
                    .filter(|l| {
                        l.contains("overflow") || l.contains("panicked") || l.contains(name)
                    })
                    .take(4)
                    .collect::<Vec<_>>()
                    .join(" | ");
                failures.push(format!("{name}: child exited with {s}: {why}"));
            }
        }
    }
    failures
}

#[test]
fn deep_nesting_and_huge_inputs_return() {
    let failures = run_deep_cases(DEEP_CASES);
    assert!(
        failures.is_empty(),
        "{} deep cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
