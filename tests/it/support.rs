//! Helpers shared by the integration tests.

use collage::diag::Diagnostics;
use collage::ir::Module;
use collage::source::{FileId, SourceMap};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the `collage` binary in `dir`.
pub fn collage_in<I, S>(dir: &Path, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_collage"))
        .args(args)
        .current_dir(dir)
        .env("COLLAGE_CACHE_DIR", cache_dir())
        .output()
        .expect("the binary runs")
}

/// The shared cache directory of [`cache_dir`].
static CACHE_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Removes [`CACHE_DIR`] when the test process exits (a static is never dropped).
extern "C" fn remove_cache_dir() {
    if let Some(d) = CACHE_DIR.get() {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// The cache directory every `collage` run of this test process shares (a temporary
/// directory, removed when the process exits: tests never touch the user's cache). Sharing it
/// means that each distinct kernel is compiled once per test process.
pub fn cache_dir() -> &'static Path {
    CACHE_DIR.get_or_init(|| {
        let d = tempfile::tempdir()
            .expect("a temporary cache directory")
            .keep();
        // SAFETY: registers a plain function without arguments, as `atexit` expects.
        let registered = unsafe { libc::atexit(remove_cache_dir) };
        assert_eq!(registered, 0, "atexit");
        d
    })
}

/// Runs the `collage` binary at the repository root.
pub fn collage<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    collage_in(root(), args)
}

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A path relative to the repository root, with forward slashes, for stable snapshot names.
pub fn rel(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// Parses and type-checks a text registered under `name`.
pub fn load_text(name: &str, text: &str) -> (SourceMap, FileId, Result<Module, Diagnostics>) {
    let mut sources = SourceMap::new();
    let file = sources.add(name, text);
    let result = collage::frontend::relay::load(&sources, file);
    (sources, file, result)
}

/// Parses and type-checks a file; panics with rendered diagnostics on failure.
pub fn load_ok(path: &Path) -> Module {
    let text = std::fs::read_to_string(path).expect("readable fixture");
    load_text_ok(&rel(path), &text)
}

/// Parses and type-checks text named `name`; panics with rendered diagnostics on failure.
pub fn load_text_ok(name: &str, text: &str) -> Module {
    let (sources, _, result) = load_text(name, text);
    result.unwrap_or_else(|d| panic!("{name} failed to load:\n{}", d.render_plain(&sources)))
}

/// Prints, re-parses and re-prints a module, checking structural equality and the fixed point.
/// Returns the printed text.
pub fn round_trip(name: &str, m: &Module) -> String {
    let printed = collage::frontend::relay::print::print_module(m);
    let (sources, _, again) = load_text(name, &printed);
    let again = match again {
        Ok(a) => a,
        Err(d) => panic!(
            "{name}: printed text does not re-parse:\n{}\n--- printed ---\n{printed}",
            d.render_plain(&sources)
        ),
    };
    if let Err(e) = collage::ir::equal::modules_equal(m, &again) {
        panic!("{name}: re-parsed module differs: {e}\n--- printed ---\n{printed}");
    }
    let reprinted = collage::frontend::relay::print::print_module(&again);
    assert_eq!(printed, reprinted, "{name}: printing is not a fixed point");
    printed
}

/// The file stems of the models of `tests/models/`, in name order.
pub fn corpus_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("tests/models"))
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            (p.extension()? == "relay").then(|| p.file_stem().unwrap().to_string_lossy().into())
        })
        .collect();
    names.sort();
    names
}

/// Every model of `tests/models/`, loaded, by file stem in name order.
pub fn corpus() -> Vec<(String, Module)> {
    corpus_names()
        .into_iter()
        .map(|n| {
            let m = load_ok(&root().join(format!("tests/models/{n}.relay")));
            (n, m)
        })
        .collect()
}

/// The rules of the reference configuration (`benches/reference.rules` with the shipped
/// prelude): the native target, the host and the BYOC target `example` (relu, add and
/// concatenate patterns).
pub fn reference_rules() -> collage::rules::ruletree::Program {
    let prelude = std::fs::read_to_string(root().join("rules/prelude.rules")).unwrap();
    let reference = std::fs::read_to_string(root().join("benches/reference.rules")).unwrap();
    let table = [
        ("rules/prelude.rules", prelude.as_str()),
        ("rules/reference.rules", reference.as_str()),
    ];
    let mut sources = SourceMap::new();
    let checked = collage::rules::sema::check(
        &mut sources,
        &collage::rules::sema::Provider::Embedded(&table),
        &[std::path::PathBuf::from("rules/reference.rules")],
    );
    match checked.program {
        Some(p) if !checked.diags.has_errors() => p,
        _ => panic!("{}", checked.diags.render_plain(&sources)),
    }
}

/// Checks that a module printed with `--tvm-compat` uses only syntax TVM 0.19's parser reads for
/// devices: outside comments and the metadata section, no inline `VirtualDevice(...)` literal and
/// no device on a `let` binder; a `meta[VirtualDevice][i]` only with a metadata section holding
/// devices.
pub fn assert_tvm_device_syntax(name: &str, text: &str) {
    let (code, metadata) = match text.split_once("\n#[metadata]\n") {
        Some((c, m)) => (c, Some(m)),
        None => (text, None),
    };
    let mut plain = String::with_capacity(code.len());
    let mut rest = code;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r);
        } else if let Some(after) = rest.strip_prefix("//") {
            rest = after.split_once('\n').map_or("", |(_, r)| r);
            plain.push('\n');
        } else {
            let c = rest.chars().next().unwrap();
            plain.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    assert!(
        !plain.contains("VirtualDevice("),
        "{name}: an inline device in TVM-compatible output:\n{text}"
    );
    for line in plain.lines() {
        let t = line.trim_start();
        if let Some(binder) = t.strip_prefix("let ") {
            let head = binder.split('=').next().unwrap_or("");
            assert!(
                !head.contains('{'),
                "{name}: a device on a let binder in TVM-compatible output: {line}"
            );
        }
    }
    // The section holds devices exactly when the code refers to some (it may hold constants).
    let section_devices = metadata.is_some_and(|m| {
        let v: serde_json::Value = serde_json::from_str(m).expect("the section is JSON");
        v["nodes"][1]["keys"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "VirtualDevice"))
    });
    assert_eq!(
        plain.contains("meta[VirtualDevice]"),
        section_devices,
        "{name}: device references and metadata section disagree:\n{text}"
    );
}

/// Compiles `@main` of `m` with `opts` and runs it once on `inputs`, or on inputs drawn from
/// `w`; the outputs, flattened, and the executable.
pub fn run_model(
    m: &Module,
    w: &collage::runtime::exec::data::Weights,
    opts: &collage::runtime::exec::executor::Options,
    inputs: Option<&[std::sync::Arc<collage::runtime::exec::tensor::Tensor>]>,
) -> (
    Vec<collage::runtime::exec::tensor::Tensor>,
    collage::runtime::exec::executor::Executable,
) {
    let mw = w.for_module(m);
    let x =
        collage::runtime::exec::executor::compile(m, &mw, opts).unwrap_or_else(|d| panic!("{d:?}"));
    let ins: Vec<_> = match inputs {
        Some(i) => i.to_vec(),
        None => x
            .inputs
            .iter()
            .map(|i| std::sync::Arc::new(mw.random_input(&i.name, &i.shape).unwrap()))
            .collect(),
    };
    let out = x.run(&ins).unwrap_or_else(|d| panic!("{d:?}"));
    let flat = out
        .value
        .flatten()
        .into_iter()
        .map(|t| (**t).clone())
        .collect();
    (flat, x)
}
