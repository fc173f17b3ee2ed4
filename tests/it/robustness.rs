//! Robustness of the RelayScript front end (lexer, parser, type inference, printer).
//!
//! Three kinds of checks:
//!
//! * **Mutation fuzzing** of the model corpus: random byte-level edits of the 13 models in
//!   `tests/models` must never make the front end panic; a rejected input gets at least one error
//!   whose primary span lies inside the text, and an accepted one prints and re-loads to an equal
//!   module.
//! * **Random well-formed modules**: generated DAGs of typed operator calls must load, have the
//!   type the generator computed, and round-trip through the printer (structural equality and a
//!   printing fixed point).
//! * **Deep nesting and huge inputs**: each must succeed or fail with a clean diagnostic, on the
//!   default 2 MiB test-thread stack, quickly.
//!
//! The number of cases is configurable: `COLLAGE_FUZZ_CASES` (mutation fuzzing, default 3000)
//! and `COLLAGE_GEN_CASES` (generated modules, default 500). A long run:
//!
//! ```text
//! COLLAGE_FUZZ_CASES=100000 cargo test --release --test it robustness::mutated_corpus
//! ```

use crate::mutate::{apply_byte_edit, byte_edit, mutate, ByteEdit, Weights};
use crate::support::{load_text, root, round_trip};
use collage::diag::Diagnostics;
use collage::frontend::relay::lexer::{lex, Tok};
use collage::ir::Module;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;
use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Shared helpers

/// A case count from the environment, or the default.
fn cases(var: &str, default: u32) -> u32 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn config(var: &str, default: u32) -> Config {
    Config {
        cases: cases(var, default),
        // Shrunk failures are printed in full; no regression files in the source tree.
        failure_persistence: None,
        ..Config::default()
    }
}

/// The corpus models, `(file name, text)`, sorted by name.
fn corpus() -> &'static [(String, String)] {
    static CORPUS: OnceLock<Vec<(String, String)>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(root().join("tests/models")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "relay") {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                out.push((name, std::fs::read_to_string(&path).unwrap()));
            }
        }
        out.sort();
        assert_eq!(out.len(), 13, "the corpus has 13 models");
        out
    })
}

/// Checks that a rejected input got a usable report: at least one error, every diagnostic with
/// a primary span inside the text (on character boundaries), and rendering that works.
fn check_diagnostics(text: &str, diags: &Diagnostics) -> Result<(), String> {
    if !diags.has_errors() {
        return Err("rejected without an error diagnostic".into());
    }
    for d in diags {
        let Some(span) = d.primary_span() else {
            return Err(format!("{}: no primary span: {}", d.code.id, d.message));
        };
        let (s, e) = (span.start as usize, span.end as usize);
        let boundaries = text.is_char_boundary(s) && text.is_char_boundary(e);
        if s > e || e > text.len() || !boundaries {
            return Err(format!(
                "{}: primary span {span} is not a valid range of the {}-byte text: {}",
                d.code.id,
                text.len(),
                d.message
            ));
        }
    }
    Ok(())
}

/// Loads a text; on success prints, re-loads, compares and checks the printing fixed point; on
/// failure checks the diagnostics. Returns whether the text loaded.
fn exercise_front_end(name: &str, text: &str) -> Result<bool, String> {
    let (sources, _, result) = load_text(name, text);
    match result {
        Ok(m) => {
            let printed = collage::frontend::relay::print::print_module(&m);
            let (sources2, _, again) = load_text("printed.relay", &printed);
            let again = again.map_err(|d| {
                format!(
                    "printed text does not re-load:\n{}\n--- printed ---\n{printed}",
                    d.render_plain(&sources2)
                )
            })?;
            collage::ir::equal::modules_equal(&m, &again).map_err(|e| {
                format!("re-loaded module differs: {e}\n--- printed ---\n{printed}")
            })?;
            let reprinted = collage::frontend::relay::print::print_module(&again);
            if reprinted != printed {
                return Err(format!(
                    "printing is not a fixed point\n--- printed ---\n{printed}\n--- reprinted ---\n{reprinted}"
                ));
            }
            exercise_device_planning(text, &m)?;
            Ok(true)
        }
        Err(diags) => {
            check_diagnostics(text, &diags)?;
            // Rendering must not panic either (codespan clamps, but check it end to end).
            let rendered = diags.render_plain(&sources);
            if rendered.is_empty() {
                return Err("diagnostics render to nothing".into());
            }
            Ok(false)
        }
    }
}

/// Device planning of a loaded module either succeeds, with a plan whose minimal representation
/// DPL expands without errors, or reports usable diagnostics.
fn exercise_device_planning(text: &str, m: &collage::ir::Module) -> Result<(), String> {
    let cpu = collage::ir::VirtualDevice::for_device(1, 0);
    match collage::analysis::devices::plan_devices(m, &cpu) {
        Ok(plan) => collage::analysis::devices::expand(&plan.module)
            .map(|_| ())
            .map_err(|d| format!("DPL rejects the planned module: {:?}", d.iter().next())),
        Err(diags) => check_diagnostics(text, &diags),
    }
}

// ---------------------------------------------------------------------------------------------
// a. Mutation fuzzing of the corpus

/// Byte strings that are likely to change how the text lexes or parses.
const INTERESTING: &[&[u8]] = &[
    b"(",
    b")",
    b"%",
    b"\"",
    b"/*",
    b"*/",
    b"//",
    b"meta[",
    b"meta[relay.Constant][",
    b"meta[relay.Constant][0]",
    b" /* ty=",
    b"/* ty=Tensor[(2, 3), float32] */",
    b"#[metadata]",
    b"#[",
    b"0",
    b"1",
    b"9",
    b"-",
    b"--",
    b"e",
    b"f",
    b"i",
    b"f16",
    b"i64",
    b"1e-05f",
    b"1e999f",
    b"99999999999999999999",
    b"-9223372036854775808",
    b"inff",
    b"nanf",
    b"4294967296",
    b".",
    b".0",
    b",",
    b";",
    b":",
    b"=",
    b"==",
    b"->",
    b"{",
    b"}",
    b"[",
    b"]",
    b"\\",
    b"\\x",
    b"\\u",
    b"\n",
    b"\t",
    b"\r",
    b" ",
    b"\0",
    b"\xc3\xa9",         // é
    b"\xe2\x80\xa6",     // …
    b"\xf0\x9f\x98\x80", // an emoji
    b"\xff",             // invalid UTF-8 (becomes U+FFFD)
    b"\xc3",             // a truncated sequence
    b"%0",
    b"%x",
    b"%0 = ",
    b"@main",
    b"@",
    b"def @f() { 0 }",
    b"fn ",
    b"fn (%p) { %p }",
    b"let ",
    b"let %v = ",
    b"if (True) { 1 } else { 2 }",
    b"free_var",
    b"match",
    b"ref",
    b"True",
    b"False",
    b"None",
    b"_",
    b"?",
    b"Tensor[",
    b"Tensor[(?), float32]",
    b"float32",
    b"float16",
    b"int64",
    b"bool",
    b"VirtualDevice(device=\"cuda\", id=0)",
    b"virtual_device=",
    b"axis=",
    b"units=",
    b"Primitive=1",
    b"(((((((((((",
    b")))))))))))",
    b"[[[[[[[[[[[",
    b"\"\\\"",
];

/// One edit of a text: a byte-level edit, or a token-level one.
#[derive(Clone, Debug)]
enum Mutation {
    Bytes(ByteEdit),
    /// Replaces one token with a token of the same kind seen in the corpus (another number,
    /// operator name, `%N`...), which keeps the text parsing further than a byte edit does.
    SwapToken(Index, Index),
    /// Deletes a run of whole tokens.
    DeleteTokens(Index, u8),
}

/// Distinct token texts of the corpus, by token kind.
fn token_dictionary() -> &'static std::collections::HashMap<Tok, Vec<String>> {
    static DICT: OnceLock<std::collections::HashMap<Tok, Vec<String>>> = OnceLock::new();
    DICT.get_or_init(|| {
        let mut sets: std::collections::HashMap<Tok, std::collections::BTreeSet<String>> =
            Default::default();
        for (_, text) in corpus() {
            for t in lex(text).tokens {
                let s = &text[t.start as usize..t.end as usize];
                sets.entry(t.kind).or_default().insert(s.to_string());
            }
        }
        sets.into_iter()
            .map(|(k, v)| (k, v.into_iter().collect()))
            .collect()
    })
}

/// The byte ranges of the tokens of a (mutated) text, if it is valid UTF-8.
fn token_ranges(bytes: &[u8]) -> Vec<(Tok, usize, usize)> {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Vec::new();
    };
    lex(text)
        .tokens
        .iter()
        .filter(|t| t.kind != Tok::Eof)
        .map(|t| (t.kind, t.start as usize, t.end as usize))
        .collect()
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let bytes = Weights {
        flip_bit: 3,
        replace_byte: 2,
        insert_bytes: 2,
        insert_interesting: 4,
        replace_interesting: 3,
        delete: 3,
        duplicate: 1,
        splice: 2,
        truncate: 1,
    };
    prop_oneof![
        bytes.total() => byte_edit(&bytes).prop_map(Mutation::Bytes),
        8 => (any::<Index>(), any::<Index>()).prop_map(|(i, r)| Mutation::SwapToken(i, r)),
        2 => (any::<Index>(), 1u8..4).prop_map(|(i, n)| Mutation::DeleteTokens(i, n)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    match m {
        Mutation::Bytes(e) => apply_byte_edit(bytes, e, INTERESTING, corpus()),
        Mutation::SwapToken(i, r) => {
            let toks = token_ranges(bytes);
            if toks.is_empty() {
                return;
            }
            let (kind, s, e) = *i.get(&toks);
            if let Some(choices) = token_dictionary().get(&kind) {
                bytes.splice(s..e, r.get(choices).bytes());
            }
        }
        Mutation::DeleteTokens(i, n) => {
            let toks = token_ranges(bytes);
            if toks.is_empty() {
                return;
            }
            let first = i.index(toks.len());
            let last = (first + *n as usize).min(toks.len()) - 1;
            bytes.drain(toks[first].1..toks[last].2);
        }
    }
}

/// An excerpt of a (possibly large) failing input, for failure messages.
fn excerpt(text: &str) -> String {
    if text.len() <= 4000 {
        return text.to_string();
    }
    let cut = text.floor_char_boundary(4000);
    format!("{}\n… ({} bytes in all)", &text[..cut], text.len())
}

proptest! {
    #![proptest_config(config("COLLAGE_FUZZ_CASES", 3000))]

    /// Random edits of corpus models never make the front end panic, and are either rejected
    /// with well-placed diagnostics or accepted and round-trip.
    #[test]
    fn mutated_corpus(
        file in any::<Index>(),
        muts in prop::collection::vec(mutation(), 1..5),
    ) {
        let (name, text) = mutate(corpus(), &file, &muts, apply);
        if let Err(e) = exercise_front_end(&name, &text) {
            return Err(TestCaseError::fail(format!(
                "{name} with {muts:?}: {e}\n--- input ---\n{}",
                excerpt(&text)
            )));
        }
    }
}

/// A few mutations that used to be interesting, run every time (cheap and deterministic).
#[test]
fn unmutated_corpus_and_fixed_edits() {
    for (name, text) in corpus() {
        assert_eq!(exercise_front_end(name, text), Ok(true), "{name}");
        for cut in [0, 1, text.len() / 3, text.len() / 2, text.len() - 1] {
            let cut = text.floor_char_boundary(cut);
            let r = exercise_front_end(name, &text[..cut]);
            assert!(r.is_ok(), "{name} cut at {cut}: {r:?}");
        }
        for inserted in ["\0", "é", "(", ")", "\"", "/*", "meta[", "%", "-", "9"] {
            let at = text.floor_char_boundary(text.len() / 2);
            let t = format!("{}{inserted}{}", &text[..at], &text[at..]);
            let r = exercise_front_end(name, &t);
            assert!(r.is_ok(), "{name} with {inserted:?} at {at}: {r:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// b. Random well-formed modules

/// A generated value's type.
#[derive(Clone, Debug, PartialEq)]
enum Ty {
    Tensor(Vec<i64>, &'static str),
    Tuple(Vec<Ty>),
}

impl std::fmt::Display for Ty {
    /// As the printer writes types.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ty::Tensor(s, d) if s.is_empty() => f.write_str(d),
            Ty::Tensor(s, d) => {
                let dims: Vec<String> = s.iter().map(i64::to_string).collect();
                write!(f, "Tensor[({}), {d}]", dims.join(", "))
            }
            Ty::Tuple(ts) => {
                let parts: Vec<String> = ts.iter().map(Ty::to_string).collect();
                let comma = if ts.len() == 1 { "," } else { "" };
                write!(f, "({}{comma})", parts.join(", "))
            }
        }
    }
}

const DTYPES: &[&str] = &["float32", "float32", "float16", "int32", "int64"];

fn is_float(d: &str) -> bool {
    d.starts_with("float")
}

/// Scalar literals of each dtype, in several spellings.
fn literals(d: &str) -> &'static [&'static str] {
    match d {
        "float32" => &[
            "2f",
            "0.5f",
            "1e-05f",
            "-1f",
            "3.25f",
            "--2f",
            "0f",
            "1.5e+10f",
            "0.797885f",
            "-inff",
            "nanf",
            "1f32",
        ],
        "float16" => &["2f16", "0.5f16", "-1f16", "1e-05f16", "65504f16", "inff16"],
        "int32" => &["3", "-2", "0", "7i32", "2147483647", "---4"],
        "int64" => &["3i64", "-1i64", "50257i64", "0i64"],
        _ => unreachable!(),
    }
}

/// One generator step; its fields are interpreted relative to the values available so far,
/// so every step sequence gives a well-typed program and shrinking keeps it well-typed.
#[derive(Clone, Debug)]
struct Step {
    kind: u8,
    /// Picks the main operand (scaled to the values in scope: 0 the oldest, `u16::MAX` the newest).
    a: u16,
    /// Picks a partner, a literal, an axis...
    b: u16,
    k: u8,
    bind: u8,
}

/// The index `raw` selects in `0..n` (`n > 0`), scaled like [`Index`].
fn ix(raw: u16, n: usize) -> usize {
    (raw as usize * n) >> 16
}

fn pick<T>(raw: u16, items: &[T]) -> &T {
    &items[ix(raw, items.len())]
}

fn step() -> impl Strategy<Value = Step> {
    (
        any::<u8>(),
        any::<u16>(),
        any::<u16>(),
        any::<u8>(),
        any::<u8>(),
    )
        .prop_map(|(kind, a, b, k, bind)| Step {
            kind,
            a,
            b,
            k,
            bind,
        })
}

/// A program description: parameters, steps, and how the result is formed.
#[derive(Clone, Debug)]
struct Plan {
    params: Vec<(Vec<i64>, usize)>,
    steps: Vec<Step>,
    output: Vec<Index>,
    annotate_ret: bool,
    keep_dead: bool,
}

fn plan() -> impl Strategy<Value = Plan> {
    (
        prop::collection::vec(
            (prop::collection::vec(1i64..=6, 1..=3), 0..DTYPES.len()),
            1..=3,
        ),
        prop::collection::vec(step(), 0..28),
        prop::collection::vec(any::<Index>(), 1..=4),
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(params, steps, output, annotate_ret, keep_dead)| Plan {
            params,
            steps,
            output,
            annotate_ret,
            keep_dead,
        })
}

/// A tensor value in scope: the text that refers to it and its type.
#[derive(Clone, Debug)]
struct Val {
    text: String,
    shape: Vec<i64>,
    dtype: &'static str,
}

/// A tuple value in scope.
#[derive(Clone, Debug)]
struct TupleVal {
    text: String,
    fields: Vec<Ty>,
}

struct Gen {
    /// Lines of the scope being generated.
    lines: Vec<String>,
    vals: Vec<Val>,
    tuples: Vec<TupleVal>,
    /// Helper definitions (`def @fN`), printed before `@main`.
    defs: Vec<String>,
    next_graph: usize,
    next_let: usize,
    next_fn_param: usize,
    /// Meta constants so far: their type (a constant index keeps one type).
    metas: Vec<(Vec<i64>, &'static str)>,
    /// `%N` bindings of the current scope and their types, to find unused ones.
    bound: Vec<(String, Ty)>,
    /// Leave unused bindings dead instead of adding them to the scope's result.
    keep_dead: bool,
    depth: usize,
}

const UNARY_FLOAT: &[&str] = &[
    "nn.relu", "tanh", "sigmoid", "exp", "negative", "abs", "sqrt", "erf", "floor", "copy",
];
const UNARY_ANY: &[&str] = &["nn.relu", "negative", "abs", "copy"];
const BINARY: &[&str] = &[
    "add", "multiply", "subtract", "divide", "maximum", "minimum", "power",
];
const INFIX: &[(&str, &str)] = &[
    ("add", "+"),
    ("subtract", "-"),
    ("multiply", "*"),
    ("divide", "/"),
];

fn ints(v: &[i64]) -> String {
    let parts: Vec<String> = v.iter().map(i64::to_string).collect();
    format!("[{}]", parts.join(", "))
}

/// Numpy broadcasting of two fixed shapes.
fn broadcast(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let da = (i + a.len()).checked_sub(n).map_or(1, |j| a[j]);
        let db = (i + b.len()).checked_sub(n).map_or(1, |j| b[j]);
        out.push(match (da, db) {
            (1, d) | (d, 1) => d,
            (x, y) if x == y => x,
            _ => return None,
        });
    }
    Some(out)
}

/// The `n`-th permutation of `0..r` (Lehmer code).
fn permutation(r: usize, mut n: usize) -> Vec<i64> {
    let mut pool: Vec<i64> = (0..r as i64).collect();
    let mut out = Vec::with_capacity(r);
    while !pool.is_empty() {
        let i = n % pool.len();
        n /= pool.len();
        out.push(pool.remove(i));
    }
    out
}

impl Gen {
    fn new() -> Gen {
        Gen {
            lines: Vec::new(),
            vals: Vec::new(),
            tuples: Vec::new(),
            defs: Vec::new(),
            next_graph: 0,
            next_let: 0,
            next_fn_param: 0,
            metas: Vec::new(),
            bound: Vec::new(),
            keep_dead: false,
            depth: 0,
        }
    }

    fn indent(&self) -> String {
        "  ".repeat(self.depth + 1)
    }

    /// Emits `%N = expr;` and returns `%N`; `ty` records it as a possible sink.
    fn bind_graph(&mut self, expr: &str, ty: Option<Ty>) -> String {
        let name = format!("%{}", self.next_graph);
        self.next_graph += 1;
        let pad = self.indent();
        self.lines.push(format!("{pad}{name} = {expr};"));
        if let Some(ty) = ty {
            self.bound.push((name.clone(), ty));
        }
        name
    }

    /// The `%N` bindings of the current scope that nothing refers to. The parser drops such
    /// dead bindings; unless dead code is wanted, the generator puts them in the scope's result
    /// so that every binding stays in the module.
    fn sinks(&self, result: &str) -> Vec<(String, Ty)> {
        if self.keep_dead {
            return Vec::new();
        }
        let mut used = std::collections::HashSet::new();
        let mut scan = |text: &str| {
            let b = text.as_bytes();
            for (i, _) in text.match_indices('%') {
                let n = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
                if n > 0 {
                    used.insert(text[i..i + 1 + n].to_string());
                }
            }
        };
        for l in &self.lines {
            // Skip the binder of `%N = ...;` lines.
            let t = l.trim_start();
            let body = match t.split_once(" = ") {
                Some((binder, rest)) if binder.starts_with('%') => rest,
                _ => t,
            };
            scan(body);
        }
        scan(result);
        self.bound
            .iter()
            .filter(|(n, _)| !used.contains(n))
            .cloned()
            .collect()
    }

    /// Makes a value of `expr`: bound to `%N`, bound by `let` (maybe annotated), or left inline.
    fn value(&mut self, expr: String, shape: Vec<i64>, dtype: &'static str, bind: u8) -> Val {
        let ty = Ty::Tensor(shape.clone(), dtype);
        let text = match bind % 8 {
            0..=3 => self.bind_graph(&expr, Some(ty)),
            4 | 5 => {
                let name = format!("%v{}", self.next_let);
                self.next_let += 1;
                let ann = if bind % 8 == 5 {
                    format!(": {ty}")
                } else {
                    String::new()
                };
                let pad = self.indent();
                self.lines.push(format!("{pad}let {name}{ann} = {expr};"));
                name
            }
            _ if expr.len() <= 100 => expr,
            _ => return self.value(expr, shape, dtype, 0),
        };
        let v = Val { text, shape, dtype };
        self.vals.push(v.clone());
        v
    }

    /// A `meta[relay.Constant][i] /* ty=... */` of the given type, reusing an index sometimes.
    fn meta(&mut self, shape: Vec<i64>, dtype: &'static str, reuse: bool) -> String {
        let found = self
            .metas
            .iter()
            .position(|(s, d)| *s == shape && *d == dtype);
        let i = match found {
            Some(i) if reuse => i,
            _ => {
                self.metas.push((shape.clone(), dtype));
                self.metas.len() - 1
            }
        };
        let ty = Ty::Tensor(shape, dtype);
        format!("meta[relay.Constant][{i}] /* ty={ty} */")
    }

    fn step(&mut self, s: &Step) {
        if self.vals.is_empty() {
            return;
        }
        let a = pick(s.a, &self.vals).clone();
        let k = s.k as usize;
        match s.kind % 13 {
            // Unary elementwise.
            0 | 1 => {
                let ops = if is_float(a.dtype) {
                    UNARY_FLOAT
                } else {
                    UNARY_ANY
                };
                let op = ops[k % ops.len()];
                self.value(format!("{op}({})", a.text), a.shape, a.dtype, s.bind);
            }
            // Binary with a broadcast-compatible value (possibly itself: shared operand).
            2 | 3 => {
                let partners: Vec<Val> = self
                    .vals
                    .iter()
                    .filter(|v| v.dtype == a.dtype && broadcast(&a.shape, &v.shape).is_some())
                    .cloned()
                    .collect();
                let b = pick(s.b, &partners).clone();
                let shape = broadcast(&a.shape, &b.shape).unwrap();
                let expr = if k.is_multiple_of(3) {
                    let (_, sym) = INFIX[(k / 3) % INFIX.len()];
                    format!("({} {sym} {})", a.text, b.text)
                } else {
                    let op = BINARY[k % BINARY.len()];
                    format!("{op}({}, {})", a.text, b.text)
                };
                self.value(expr, shape, a.dtype, s.bind);
            }
            // Binary with a scalar literal.
            4 => {
                let lits = literals(a.dtype);
                let lit = pick(s.b, lits);
                let op = BINARY[k % BINARY.len()];
                let expr = if k.is_multiple_of(2) {
                    format!("{op}({}, {lit})", a.text)
                } else {
                    format!("{op}({lit}, {})", a.text)
                };
                self.value(expr, a.shape, a.dtype, s.bind);
            }
            // Binary with a meta constant that broadcasts into `a`.
            5 => {
                let r = a.shape.len();
                let keep = 1 + ix(s.b, r);
                let mut cshape = a.shape[r - keep..].to_vec();
                if k % 4 == 1 {
                    cshape[0] = 1;
                }
                let c = self.meta(cshape, a.dtype, k.is_multiple_of(3));
                let op = BINARY[(k / 4) % BINARY.len()];
                let expr = if k.is_multiple_of(2) {
                    format!("{op}({}, {c})", a.text)
                } else {
                    format!("{op}({c}, {})", a.text)
                };
                self.value(expr, a.shape, a.dtype, s.bind);
            }
            // Reshape.
            6 => {
                let prod: i64 = a.shape.iter().product();
                let r = a.shape.len();
                let (newshape, shape) = match k % 5 {
                    0 => (vec![-1], vec![prod]),
                    1 => (vec![prod], vec![prod]),
                    2 => {
                        let p = ix(s.b, r + 1);
                        let mut ns = a.shape.clone();
                        ns.insert(p, 1);
                        (ns.clone(), ns)
                    }
                    3 if r >= 2 => {
                        let mut ns = vec![a.shape[0] * a.shape[1]];
                        ns.extend(&a.shape[2..]);
                        (ns.clone(), ns)
                    }
                    _ => {
                        let mut ns = vec![a.shape[0], -1];
                        let rest: i64 = a.shape[1..].iter().product();
                        let shape = vec![a.shape[0], rest];
                        ns.truncate(2);
                        (ns, shape)
                    }
                };
                let expr = format!("reshape({}, newshape={})", a.text, ints(&newshape));
                self.value(expr, shape, a.dtype, s.bind);
            }
            // Transpose.
            7 => {
                let r = a.shape.len();
                let (attr, shape) = if k.is_multiple_of(4) {
                    let shape: Vec<i64> = a.shape.iter().rev().copied().collect();
                    ("axes=None".to_string(), shape)
                } else {
                    let perm = permutation(r, s.b as usize);
                    let shape = perm.iter().map(|&p| a.shape[p as usize]).collect();
                    let written: Vec<i64> = perm
                        .iter()
                        .map(|&p| if k.is_multiple_of(3) { p - r as i64 } else { p })
                        .collect();
                    (format!("axes={}", ints(&written)), shape)
                };
                self.value(
                    format!("transpose({}, {attr})", a.text),
                    shape,
                    a.dtype,
                    s.bind,
                );
            }
            // Concatenate a tuple of values that agree except on the axis.
            8 => {
                let r = a.shape.len();
                let axis = ix(s.b, r);
                let partners: Vec<Val> = self
                    .vals
                    .iter()
                    .filter(|v| {
                        v.dtype == a.dtype
                            && v.shape.len() == r
                            && (0..r).all(|j| j == axis || v.shape[j] == a.shape[j])
                    })
                    .cloned()
                    .collect();
                let n = 1 + k % 3;
                let mut fields = vec![a.clone()];
                for j in 0..n {
                    fields.push(partners[(k / 3 + j * 7) % partners.len()].clone());
                }
                let mut shape = a.shape.clone();
                shape[axis] = fields.iter().map(|f| f.shape[axis]).sum();
                let texts: Vec<&str> = fields.iter().map(|f| f.text.as_str()).collect();
                let tuple = format!("({})", texts.join(", "));
                let tuple = if s.bind.is_multiple_of(3) {
                    let tys = fields
                        .iter()
                        .map(|f| Ty::Tensor(f.shape.clone(), f.dtype))
                        .collect();
                    self.bind_graph(&tuple, Some(Ty::Tuple(tys)))
                } else {
                    tuple
                };
                let axis_text = if k.is_multiple_of(2) {
                    axis as i64
                } else {
                    axis as i64 - r as i64
                };
                self.value(
                    format!("concatenate({tuple}, axis={axis_text})"),
                    shape,
                    a.dtype,
                    s.bind / 3,
                );
            }
            // Split, then project some fields.
            9 => {
                let r = a.shape.len();
                let axis = ix(s.b, r);
                let d = a.shape[axis];
                let (attr, extents): (String, Vec<i64>) = if k.is_multiple_of(2) || d == 1 {
                    let divisors: Vec<i64> = (1..=d.min(4)).filter(|n| d % n == 0).collect();
                    let n = divisors[(k / 2) % divisors.len()];
                    (n.to_string(), vec![d / n; n as usize])
                } else {
                    // Ascending indices strictly inside the axis.
                    let cut = 1 + (k / 2) as i64 % (d - 1);
                    if d > 2 && cut + 1 < d && k % 4 == 1 {
                        (ints(&[cut, cut + 1]), vec![cut, 1, d - cut - 1])
                    } else {
                        (ints(&[cut]), vec![cut, d - cut])
                    }
                };
                let axis_text = if k.is_multiple_of(3) {
                    axis as i64 - r as i64
                } else {
                    axis as i64
                };
                let fields: Vec<Ty> = extents
                    .iter()
                    .map(|&e| {
                        let mut sh = a.shape.clone();
                        sh[axis] = e;
                        Ty::Tensor(sh, a.dtype)
                    })
                    .collect();
                let call = format!(
                    "split({}, indices_or_sections={attr}, axis={axis_text})",
                    a.text
                );
                let name = self.bind_graph(&call, Some(Ty::Tuple(fields.clone())));
                self.tuples.push(TupleVal {
                    text: name.clone(),
                    fields: fields.clone(),
                });
                let first = (k / 6) % fields.len();
                for (i, f) in fields.iter().enumerate() {
                    if i != first && (i + k).is_multiple_of(2) {
                        continue;
                    }
                    let Ty::Tensor(sh, dt) = f else {
                        unreachable!()
                    };
                    self.value(
                        format!("{name}.{i}"),
                        sh.clone(),
                        dt,
                        s.bind.wrapping_add(i as u8),
                    );
                }
            }
            // Dense against a matching constant weight.
            10 => {
                if !is_float(a.dtype) {
                    return;
                }
                let kdim = *a.shape.last().unwrap();
                let units = 1 + (k % 8) as i64;
                let w = self.meta(vec![units, kdim], a.dtype, k.is_multiple_of(5));
                let units_attr = if k.is_multiple_of(3) {
                    "None".to_string()
                } else {
                    units.to_string()
                };
                let mut shape = a.shape.clone();
                *shape.last_mut().unwrap() = units;
                self.value(
                    format!("nn.dense({}, {w}, units={units_attr})", a.text),
                    shape,
                    a.dtype,
                    s.bind,
                );
            }
            // A function literal called once.
            11 => {
                if self.depth >= 2 {
                    return;
                }
                self.fn_literal(s, a);
            }
            // A helper definition called from here.
            12 => {
                if self.defs.len() >= 3 {
                    return;
                }
                let g = format!("@f{}", self.defs.len());
                let ty = Ty::Tensor(a.shape.clone(), a.dtype);
                let ops = if is_float(a.dtype) {
                    UNARY_FLOAT
                } else {
                    UNARY_ANY
                };
                let op = ops[k % ops.len()];
                let ret = if k.is_multiple_of(2) {
                    format!(" -> {ty}")
                } else {
                    String::new()
                };
                self.defs.push(format!(
                    "def {g}(%p: {ty}){ret} {{\n  %0 = {op}(%p);\n  add(%0, %p)\n}}\n"
                ));
                self.value(format!("{g}({})", a.text), a.shape, a.dtype, s.bind);
            }
            _ => unreachable!(),
        }
    }

    /// `fn (%p, ...) { ... }` applied to `a` (and maybe another value), with a body generated
    /// from a few derived steps; the body may also capture outer values.
    fn fn_literal(&mut self, s: &Step, a: Val) {
        let k = s.k as usize;
        let outer_lines = std::mem::take(&mut self.lines);
        let outer_vals = self.vals.clone();
        let outer_tuples = std::mem::take(&mut self.tuples);
        let outer_bound = std::mem::take(&mut self.bound);
        let mut args = vec![a];
        if k % 3 == 1 {
            args.push(pick(s.b, &outer_vals).clone());
        }
        let mut params = Vec::new();
        self.depth += 1;
        let captures = k % 4 == 3;
        if !captures {
            self.vals.clear();
        }
        for (j, arg) in args.iter().enumerate() {
            let name = format!("%p{}", self.next_fn_param);
            self.next_fn_param += 1;
            let ty = Ty::Tensor(arg.shape.clone(), arg.dtype);
            // With dead code, a literal's only call may be dead, and a dead call types nothing:
            // annotate its parameters (see `params_are_not_typed_by_a_dead_call`).
            let dead_call = self.keep_dead;
            params.push(if (k + j).is_multiple_of(2) || dead_call {
                format!("{name}: {ty}")
            } else {
                name.clone()
            });
            self.vals.push(Val {
                text: name,
                shape: arg.shape.clone(),
                dtype: arg.dtype,
            });
        }
        // Derived steps: unary and binary ops over the parameters (and captures).
        let n = 1 + k % 3;
        for j in 0..n {
            let derived = Step {
                kind: [0u8, 2, 4, 6, 5][(k + j) % 5],
                // The newest value: the previous derived step's result, or the last parameter.
                a: if j % 2 == 0 { u16::MAX } else { s.a },
                b: s.a,
                k: s.k.wrapping_add(j as u8 * 7),
                bind: s.bind.wrapping_add(j as u8),
            };
            self.step(&derived);
        }
        // The result is the newest value, or a tuple of the two newest, plus unused bindings.
        let n = if k % 5 == 4 { 2 } else { 1 }.min(self.vals.len());
        let mut items: Vec<(String, Ty)> = self.vals[self.vals.len() - n..]
            .iter()
            .map(|v| (v.text.clone(), Ty::Tensor(v.shape.clone(), v.dtype)))
            .collect();
        let texts: Vec<&str> = items.iter().map(|(t, _)| t.as_str()).collect();
        let sinks = self.sinks(&texts.join(" "));
        items.extend(sinks);
        let (result_text, result_ty) = if items.len() == 1 {
            items.pop().unwrap()
        } else {
            let texts: Vec<&str> = items.iter().map(|(t, _)| t.as_str()).collect();
            let tys = items.iter().map(|(_, t)| t.clone()).collect();
            (format!("({})", texts.join(", ")), Ty::Tuple(tys))
        };
        let pad = self.indent();
        let body_lines = std::mem::replace(&mut self.lines, outer_lines);
        self.depth -= 1;
        self.vals = outer_vals;
        self.tuples = outer_tuples;
        self.bound = outer_bound;
        let ret = if k % 2 == 1 {
            format!(" -> {result_ty}")
        } else {
            String::new()
        };
        let mut f = format!("fn ({}){ret} {{\n", params.join(", "));
        for l in &body_lines {
            f.push_str(l);
            f.push('\n');
        }
        let _ = writeln!(f, "{pad}{result_text}");
        f.push_str(&self.indent());
        f.push('}');
        let arg_texts: Vec<&str> = args.iter().map(|v| v.text.as_str()).collect();
        let call_args = arg_texts.join(", ");
        // Bind the literal (graph or let), or call it inline.
        let callee = match s.bind % 3 {
            0 => self.bind_graph(&f, None),
            1 => {
                let name = format!("%v{}", self.next_let);
                self.next_let += 1;
                let pad = self.indent();
                self.lines.push(format!("{pad}let {name} = {f};"));
                name
            }
            _ => f,
        };
        let call = format!("{callee}({call_args})");
        match result_ty {
            Ty::Tensor(shape, dtype) => {
                self.value(call, shape, dtype, s.bind / 3 % 6);
            }
            Ty::Tuple(fields) => {
                let name = self.bind_graph(&call, Some(Ty::Tuple(fields.clone())));
                for (i, f) in fields.iter().enumerate() {
                    if let Ty::Tensor(sh, dt) = f {
                        self.value(format!("{name}.{i}"), sh.clone(), dt, s.bind / 3);
                    }
                }
                self.tuples.push(TupleVal { text: name, fields });
            }
        }
    }
}

/// Renders a plan as RelayScript text and returns it with the expected type of `@main`'s body.
fn render(plan: &Plan) -> (String, Ty) {
    let mut g = Gen::new();
    g.keep_dead = plan.keep_dead;
    let mut params = Vec::new();
    for (i, (shape, d)) in plan.params.iter().enumerate() {
        let dtype = DTYPES[*d];
        let ty = Ty::Tensor(shape.clone(), dtype);
        params.push(format!("%x{i}: {ty}"));
        g.vals.push(Val {
            text: format!("%x{i}"),
            shape: shape.clone(),
            dtype,
        });
    }
    for s in &plan.steps {
        g.step(s);
    }
    // The output: one value, or a tuple of values (maybe with a split tuple), plus every
    // binding nothing uses.
    let mut items: Vec<(String, Ty)> = Vec::new();
    for (j, i) in plan.output.iter().enumerate() {
        if j == 3 && !g.tuples.is_empty() {
            let t = i.get(&g.tuples);
            items.push((t.text.clone(), Ty::Tuple(t.fields.clone())));
        } else {
            let v = i.get(&g.vals);
            items.push((v.text.clone(), Ty::Tensor(v.shape.clone(), v.dtype)));
        }
    }
    let texts: Vec<&str> = items.iter().map(|(t, _)| t.as_str()).collect();
    let sinks = g.sinks(&texts.join(" "));
    items.extend(sinks);
    let (out_text, out_ty) = if items.len() == 1 {
        items.pop().unwrap()
    } else {
        let texts: Vec<&str> = items.iter().map(|(t, _)| t.as_str()).collect();
        let tys = items.iter().map(|(_, t)| t.clone()).collect();
        (format!("({})", texts.join(", ")), Ty::Tuple(tys))
    };
    let mut text = String::from("#[version = \"0.0.5\"]\n");
    for d in &g.defs {
        text.push_str(d);
    }
    let ret = if plan.annotate_ret {
        format!(" -> {out_ty}")
    } else {
        String::new()
    };
    let _ = writeln!(text, "def @main({}){ret} {{", params.join(", "));
    for l in &g.lines {
        text.push_str(l);
        text.push('\n');
    }
    let _ = writeln!(text, "  {out_text}\n}}");
    (text, out_ty)
}

fn check_generated(text: &str, expected: &Ty) -> Result<(), String> {
    let (sources, _, result) = load_text("generated.relay", text);
    let m: Module = result.map_err(|d| {
        format!(
            "generated module does not load:\n{}\n--- text ---\n{text}",
            d.render_plain(&sources)
        )
    })?;
    let main = m.main().ok_or("no @main")?;
    let body = m.func(main).body;
    let got = m.ty(body).map(ToString::to_string).unwrap_or_default();
    if got != expected.to_string() {
        return Err(format!(
            "@main has type {got}, the generator expected {expected}\n--- text ---\n{text}"
        ));
    }
    let result = std::panic::catch_unwind(|| round_trip("generated.relay", &m));
    result.map(|_| ()).map_err(|e| {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("{msg}\n--- generated text ---\n{text}")
    })
}

proptest! {
    #![proptest_config(config("COLLAGE_GEN_CASES", 500))]

    /// Generated well-typed modules load with the expected type and round-trip.
    #[test]
    fn generated_modules_round_trip(plan in plan()) {
        let (text, ty) = render(&plan);
        if let Err(e) = check_generated(&text, &ty) {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// The generator covers each construct at least once over a modest number of plans (a guard
/// against a generator that silently stops producing some construct).
#[test]
fn generator_covers_every_construct() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut all = String::new();
    for _ in 0..200 {
        let plan = plan().new_tree(&mut runner).unwrap().current();
        let (text, ty) = render(&plan);
        check_generated(&text, &ty).unwrap();
        all.push_str(&text);
    }
    for needle in [
        "nn.relu(",
        "tanh(",
        "add(",
        " + ",
        "reshape(",
        "transpose(",
        "concatenate((",
        "split(",
        ".1",
        "nn.dense(",
        "meta[relay.Constant][",
        "let %v",
        "fn (",
        "def @f0",
        "@f0(",
        "axes=None",
        "units=None",
        "1e-05f",
        "i64",
        "f16",
        ") -> (",
    ] {
        assert!(
            all.contains(needle),
            "no generated module contains {needle:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// c. Deep nesting and huge inputs (default test-thread stack, no helper threads)

const DEEP: usize = 100_000;

/// Runs a step on a huge input and fails only if it hangs: the limit is a hang guard far above
/// the step's real cost (`limit_ms` is what it takes on an idle machine, for the log), so a
/// quadratic blow-up on these sizes (minutes) fails while a busy machine does not. Speed is
/// measured by the criterion benchmarks, not here.
fn timed<T>(what: &str, limit_ms: u64, f: impl FnOnce() -> T) -> T {
    const HANG_FACTOR: u64 = 30;
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    eprintln!("{what}: {took:?} (about {limit_ms} ms expected)");
    if !cfg!(debug_assertions) {
        assert!(
            took < Duration::from_millis(limit_ms * HANG_FACTOR),
            "{what} took {took:?}: it should take about {limit_ms} ms"
        );
    }
    out
}

/// Loads a text that must be rejected with `code`; checks the spans and rendering.
fn expect_error(what: &str, text: &str, code: &str) {
    let (sources, _, result) = timed(what, 1000, || load_text(what, text));
    let diags = match result {
        Ok(_) => panic!("{what}: loaded without errors"),
        Err(d) => d,
    };
    let codes: Vec<_> = diags.iter().map(|d| d.code.id).collect();
    assert!(
        codes.contains(&code),
        "{what}: expected {code}, got {codes:?}:\n{}",
        excerpt(&diags.render_plain(&sources))
    );
    check_diagnostics(text, &diags).unwrap_or_else(|e| panic!("{what}: {e}"));
    let rendered = diags.render_plain(&sources);
    assert!(rendered.contains(code), "{what}");
}

/// Loads a text that must be accepted, then round-trips it (print, re-load, equal, fixed point).
fn expect_round_trip(what: &str, text: &str, limit_ms: u64) -> Module {
    let (sources, _, result) = timed(&format!("{what}: load"), limit_ms, || load_text(what, text));
    let m = result.unwrap_or_else(|d| {
        panic!(
            "{what}: does not load:\n{}",
            excerpt(&d.render_plain(&sources))
        )
    });
    timed(
        &format!("{what}: print, re-load, compare, re-print"),
        4 * limit_ms,
        || round_trip(what, &m),
    );
    m
}

fn header(params: &str) -> String {
    format!("#[version = \"0.0.5\"]\ndef @main({params}) {{\n")
}

#[test]
fn deeply_nested_parentheses_are_rejected() {
    let mut text = header("%x: Tensor[(2), float32]");
    text.push_str(&"(".repeat(DEEP));
    text.push_str("%x");
    text.push_str(&")".repeat(DEEP));
    text.push_str("\n}\n");
    expect_error("nested parentheses", &text, "E0204");
}

#[test]
fn deeply_nested_calls_are_rejected() {
    let mut text = header("%x: Tensor[(2), float32]");
    text.push_str(&"nn.relu(".repeat(DEEP));
    text.push_str("%x");
    text.push_str(&")".repeat(DEEP));
    text.push_str("\n}\n");
    expect_error("nested calls", &text, "E0204");
}

#[test]
fn deeply_nested_tuple_types_are_rejected() {
    let ty = format!("{}float32{}", "(".repeat(DEEP), ")".repeat(DEEP));
    let text = format!("{}  %x\n}}\n", header(&format!("%x: {ty}")));
    expect_error("nested tuple types", &text, "E0204");
}

#[test]
fn deeply_nested_attribute_arrays_are_rejected() {
    let mut text = header("%x: Tensor[(2), float32]");
    text.push_str("reshape(%x, newshape=");
    text.push_str(&"[".repeat(DEEP));
    text.push('2');
    text.push_str(&"]".repeat(DEEP));
    text.push_str(")\n}\n");
    expect_error("nested attribute arrays", &text, "E0204");
}

#[test]
fn deeply_nested_function_literals_are_rejected() {
    let mut text = header("%x: Tensor[(2), float32]");
    for i in 0..DEEP {
        let _ = write!(text, "fn (%p{i}) {{ ");
    }
    text.push_str("%x");
    text.push_str(&" }".repeat(DEEP));
    text.push_str("\n}\n");
    expect_error("nested function literals", &text, "E0204");
}

#[test]
fn deeply_nested_blocks_and_ifs_are_rejected() {
    let mut text = header("%x: Tensor[(2), float32], %c: bool");
    text.push_str(&"if (%c) { ".repeat(DEEP));
    text.push_str("%x");
    text.push_str(&" } else { %x }".repeat(DEEP));
    text.push_str("\n}\n");
    expect_error("nested ifs", &text, "E0204");
}

#[test]
fn a_million_open_parentheses_are_rejected() {
    let text = "(".repeat(1_000_000);
    let (_, _, result) = timed("a million `(`", 1000, || load_text("parens", &text));
    let diags = result.expect_err("a million `(` is not a module");
    check_diagnostics(&text, &diags).unwrap();
    // Also inside a function body, where the parser actually nests.
    let mut text = header("%x: Tensor[(2), float32]");
    text.push_str(&"(".repeat(1_000_000));
    expect_error("a million `(` in a body", &text, "E0204");
}

#[test]
fn nesting_just_below_the_limit_loads_and_round_trips() {
    // Each construct nested as deep as the parser allows, minus a margin for the enclosing
    // function: the later passes (type inference, printer, equality) must cope too.
    let limit = collage::frontend::relay::MAX_DEPTH as usize;
    let n = limit - 8;
    let mut text = header("%x: Tensor[(2), float32]");
    text.push_str(&"nn.relu(".repeat(n));
    text.push_str("%x");
    text.push_str(&")".repeat(n));
    text.push_str("\n}\n");
    expect_round_trip("relu nested below the limit", &text, 1000);

    let mut text = header("%x: Tensor[(2), float32]");
    text.push_str(&"(".repeat(n));
    text.push_str("%x, %x");
    text.push_str(&")".repeat(n));
    text.push_str("\n}\n");
    expect_round_trip("tuples nested below the limit", &text, 1000);

    // A function literal costs two levels (the function and its body).
    let f = n / 2 - 2;
    let mut text = header("%x: Tensor[(2), float32]");
    for i in 0..f {
        let _ = write!(text, "fn (%p{i}: Tensor[(2), float32]) {{ ");
    }
    text.push_str("%x");
    text.push_str(&" }".repeat(f));
    text.push_str("\n}\n");
    expect_round_trip("fn literals nested below the limit", &text, 1000);

    // Three levels each: the function, its body and the call's argument.
    let c = n / 3 - 2;
    let mut text = header("%x: Tensor[(2), float32]");
    text.push_str(&"fn (%p: Tensor[(2), float32]) { nn.relu(".repeat(c));
    text.push_str("%x");
    text.push_str(&") }(%x)".repeat(c));
    text.push_str("\n}\n");
    expect_round_trip("called fn literals nested below the limit", &text, 1000);

    let b = n / 2 - 2;
    let mut text = header("%x: Tensor[(2), float32], %c: bool");
    text.push_str(&"if (%c) { ".repeat(b));
    text.push_str("%x");
    text.push_str(&" } else { nn.relu(%x) }".repeat(b));
    text.push_str("\n}\n");
    expect_round_trip("ifs nested below the limit", &text, 1000);

    let mut text = header("%x: Tensor[(2), float32]");
    text.push_str(&"let %y: Tensor[(2), float32] = (".repeat(n / 2));
    text.push_str("%x");
    text.push_str(&"); nn.relu(%y)".repeat(n / 2));
    text.push_str("\n}\n");
    expect_round_trip("lets in parentheses below the limit", &text, 1000);

    let ty = format!("{}Tensor[(2), float32]{}", "(".repeat(n), ",)".repeat(n));
    let text = format!("{}  %x\n}}\n", header(&format!("%x: {ty}")));
    expect_round_trip("tuple types nested below the limit", &text, 1000);

    let mut text = header("%x: Tensor[(2), float32]");
    text.push_str("%x\n}\n");
    text = text.replace(
        "def @main(%x: Tensor[(2), float32])",
        &format!(
            "def @main(%x: Tensor[(2), float32], Attr={}1{})",
            "[".repeat(n),
            "]".repeat(n)
        ),
    );
    expect_round_trip("attribute arrays nested below the limit", &text, 1000);
}

#[test]
fn a_long_chain_of_graph_bindings_round_trips() {
    let mut text = header("%x: Tensor[(2, 3), float32]");
    text.push_str("  %0 = nn.relu(%x);\n");
    for i in 1..DEEP {
        let _ = writeln!(text, "  %{i} = nn.relu(%{});", i - 1);
    }
    let _ = writeln!(text, "  %{}\n}}", DEEP - 1);
    let m = expect_round_trip("100 000 graph bindings", &text, 1000);
    assert!(m.exprs.len() > DEEP);
}

#[test]
fn a_long_chain_of_let_bindings_round_trips() {
    let mut text = header("%x: Tensor[(2, 3), float32]");
    text.push_str("  let %y0 = nn.relu(%x);\n");
    for i in 1..DEEP {
        let _ = writeln!(text, "  let %y{i} = nn.relu(%y{});", i - 1);
    }
    let _ = writeln!(text, "  %y{}\n}}", DEEP - 1);
    expect_round_trip("100 000 let bindings", &text, 1000);
}

#[test]
fn a_long_infix_chain_round_trips() {
    let mut text = header("%x: Tensor[(2, 3), float32]");
    text.push_str("  %x");
    for i in 0..DEEP {
        text.push_str(if i % 2 == 0 { " + %x" } else { " * 2f" });
    }
    text.push_str("\n}\n");
    expect_round_trip("100 000-operator infix chain", &text, 1000);
}

#[test]
fn a_long_chain_of_called_fn_literals_round_trips() {
    let mut text = header("%x: Tensor[(2, 3), float32]");
    text.push_str("  %0 = nn.relu(%x);\n");
    for i in 1..DEEP / 10 {
        let _ = writeln!(
            text,
            "  %{i} = fn (%p{i}) {{ nn.relu(%p{i}) }}(%{});",
            i - 1
        );
    }
    let _ = writeln!(text, "  %{}\n}}", DEEP / 10 - 1);
    expect_round_trip("10 000 called fn literals", &text, 1000);
}

#[test]
fn a_megabyte_string_literal() {
    let big = "a".repeat(1 << 20);
    // As a function attribute: accepted and printed back.
    let text = format!(
        "{}  %x\n}}\n",
        header(&format!("%x: Tensor[(2), float32], Compiler=\"{big}\""))
    );
    let m = expect_round_trip("1 MB function attribute string", &text, 1000);
    assert_eq!(
        m.func(m.main().unwrap())
            .attr("Compiler")
            .and_then(|v| v.as_str())
            .map(str::len),
        Some(1 << 20)
    );
    // With escapes, to exercise unescaping and escaping.
    let escaped = "a\\\"b\\\\c\\n".repeat((1 << 20) / 9);
    let text = format!(
        "{}  %x\n}}\n",
        header(&format!("%x: Tensor[(2), float32], Note=\"{escaped}\""))
    );
    expect_round_trip("1 MB escaped string", &text, 1000);
    // As an operator attribute of the wrong kind: rejected with a diagnostic.
    let text = format!(
        "{}  nn.dense(%x, %x, units=2, out_dtype=\"{big}\")\n}}\n",
        header("%x: Tensor[(2, 2), float32]")
    );
    let (sources, _, result) = timed("1 MB dtype string", 1000, || load_text("dtype", &text));
    if let Err(d) = result {
        check_diagnostics(&text, &d).unwrap();
        let _ = d.render_plain(&sources);
    }
    // Unterminated: the string runs to the end of the input.
    let text = format!(
        "{}  nn.dense(%x, %x, units=2, out_dtype=\"{big}",
        header("%x: Tensor[(2, 2), float32]")
    );
    expect_error("1 MB unterminated string", &text, "E0102");
}

#[test]
fn deeply_nested_block_comments() {
    let mut text = header("%x: Tensor[(2), float32]");
    text.push_str(&"/* ".repeat(DEEP));
    text.push_str(&"*/ ".repeat(DEEP));
    text.push_str("  %x\n}\n");
    expect_round_trip("100 000 nested block comments", &text, 1000);
    // One `*/` short: unterminated.
    let mut text = header("%x: Tensor[(2), float32]");
    text.push_str(&"/* ".repeat(DEEP));
    text.push_str(&"*/ ".repeat(DEEP - 1));
    text.push_str("  %x\n}\n");
    expect_error("unterminated nested comments", &text, "E0103");
}

#[test]
fn a_wide_tuple_round_trips() {
    let n = 50_000;
    let mut text = header("%x: Tensor[(2), float32]");
    text.push_str("  %0 = nn.relu(%x);\n  (");
    for i in 0..n {
        text.push_str(if i % 2 == 0 { "%0, " } else { "%x, " });
    }
    text.push_str(")\n}\n");
    expect_round_trip("50 000-element tuple", &text, 1000);
    // And a wide tuple type.
    let ty = format!("({})", vec!["float32"; n].join(", "));
    let text = format!("{}  %x\n}}\n", header(&format!("%x: {ty}")));
    expect_round_trip("50 000-element tuple type", &text, 1000);
}

#[test]
fn many_parameters_and_wide_calls() {
    // 10 000, not more: parameter handling is quadratic (the duplicate-parameter check and the
    // linear `lookup_local` scan); 20 000 parameters take about 0.7 s to load.
    let n = 10_000;
    let params: Vec<String> = (0..n).map(|i| format!("%a{i}: float32")).collect();
    let mut text = header(&params.join(", "));
    text.push_str("  concatenate((");
    for i in 0..n {
        let _ = write!(text, "expand_dims(%a{i}, axis=0), ");
    }
    text.push_str("))\n}\n");
    expect_round_trip("10 000 parameters", &text, 1000);
}

/// Regression (found by `generated_modules_round_trip`): an unannotated parameter of a
/// `let`-bound function literal is typed from the literal's call, like a `%N`-bound or inline
/// literal's (a `Let` node is allocated after its body, so the call comes first in the arena).
#[test]
fn let_bound_fn_literal_params_are_inferred() {
    let text = "#[version = \"0.0.5\"]\n\
                def @main(%x: Tensor[(1), float32]) {\n  \
                  let %f = fn (%p) { %p };\n  \
                  %f(%x)\n\
                }\n";
    expect_round_trip("let-bound fn literal", text, 1000);
}

/// Regression (found by `generated_modules_round_trip`): a dead `%N` binding does not change
/// the printed form. Uses used to be counted over the whole arena, so `%0` looked shared and
/// was bound, while the re-parsed module (without the dead `%1`) printed it inline.
#[test]
fn dead_bindings_do_not_change_the_printed_form() {
    let text = "#[version = \"0.0.5\"]\n\
                def @main(%x: Tensor[(2), float32]) {\n  \
                  %0 = nn.relu(%x);\n  \
                  %1 = add(%0, %0);\n  \
                  %0\n\
                }\n";
    expect_round_trip("dead binding", text, 1000);
}

/// A chain of `%N = fn () { %N-1 };` bindings is flat in the source, and each literal captures
/// the previous one. The printer never moves an expression into a literal it was written
/// outside of, so the printed form stays flat and re-loads within the parser's nesting limit.
#[test]
fn a_chain_of_fn_literal_bindings_round_trips() {
    let n = 200;
    let mut text = header("%x: Tensor[(2), float32]");
    text.push_str("  %0 = (%x,);\n");
    for i in 1..n {
        let _ = writeln!(text, "  %{i} = fn () {{ %{} }};", i - 1);
    }
    let _ = writeln!(text, "  %{}\n}}", n - 1);
    expect_round_trip("200 chained fn literal bindings", &text, 1000);
}

/// Types can nest without the source nesting: each `%N = (%N-1,);` wraps the previous tuple.
/// Type inference refuses types nested more than 256 deep (E0510) instead of building a
/// 100 000-deep one, so loading fails quickly with a diagnostic and nothing overflows.
#[test]
fn a_chain_of_tuple_wrappings_is_handled() {
    let mut text = header("%x: Tensor[(2), float32]");
    text.push_str("  %0 = (%x,);\n");
    for i in 1..DEEP {
        let _ = writeln!(text, "  %{i} = (%{},);", i - 1);
    }
    let _ = writeln!(text, "  %{}\n}}", DEEP - 1);
    let (sources, _, result) = timed("100 000 tuple wrappings", 1000, || {
        load_text("wrappings", &text)
    });
    let d = result.expect_err("a 100 000-deep tuple type is refused");
    check_diagnostics(&text, &d).unwrap();
    assert!(
        d.iter().any(|x| x.code.id == "E0510"),
        "{}",
        d.render_plain(&sources)
    );
}

/// Found by `generated_modules_round_trip`: the only call of a `let`-bound literal is dead
/// (`%0` is unused). A dead binding is not part of the program (TVM's parser drops it too, and
/// the printer does not print it), so it cannot type the unannotated `%p`: E0503, both for
/// this text and for what printing the module would have produced.
#[test]
fn params_are_not_typed_by_a_dead_call() {
    let text = "#[version = \"0.0.5\"]\n\
                def @main(%x: Tensor[(1), float32]) {\n  \
                  let %f = fn (%p) { %p };\n  \
                  %0 = %f(%x);\n  \
                  %x\n\
                }\n";
    let (sources, _, result) = load_text("dead call", text);
    let d = result.expect_err("a dead call types nothing");
    assert!(
        d.iter().any(|x| x.code.id == "E0503"),
        "{}",
        d.render_plain(&sources)
    );
}

/// Found by `mutated_corpus`: when the metadata JSON starts with a multi-byte character, the
/// E0601 span is `at..at + 1` and ends inside that character, so `&text[span.range()]` would
/// panic. Spans must be valid `str` ranges.
#[test]
fn metadata_error_spans_end_on_a_char_boundary() {
    for text in [
        "#[version = \"0.0.5\"]\n#[metadata]\u{e9}",
        "#[version = \"0.0.5\"]\ndef @main() { 0 }\n#[metadata]\n\u{2026}",
    ] {
        let (_, _, result) = load_text("metadata", text);
        let diags = result.expect_err("malformed metadata is an error");
        for d in &diags {
            let span = d.primary_span().unwrap();
            assert!(
                text.is_char_boundary(span.start as usize)
                    && text.is_char_boundary(span.end as usize),
                "{}: span {span} splits a character of {text:?}",
                d.code.id
            );
        }
    }
}
