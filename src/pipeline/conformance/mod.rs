//! ONNX conformance: the node tests of the `onnx` package run through the library, in one
//! process.
//!
//! Each node test is a folder with `model.onnx` and `test_data_set_0/input_N.pb` and
//! `output_N.pb` (serialized `TensorProto`s). For every folder the runner decodes the model and
//! the tensors, binds the inputs' shapes to those of the data, imports the model, runs `@main`
//! on the reference interpreter and compares the outputs with the expected ones at the suite's
//! tolerances ([`RTOL`], [`ATOL`]; NaN equals NaN; integers and bools exactly). Each test ends
//! in a [`Verdict`]: passed, a mismatch (with the worst element), unsupported (the operators,
//! their uses or data types that the importer or the interpreter lacks, from the diagnostics'
//! codes: [`Missing`]), an error (any other diagnostic), a panic or a time-out. Tests run on a few worker threads, each under a time bound and a panic guard
//! ([`bounded`]), and under a memory bound checked before anything is compiled.
//!
//! [`native`] runs the tests that pass on generated code as well, their kernels compiled
//! together in a few libraries; [`locate`] finds the data; [`table`] renders the table of
//! `docs/onnx.md`.

pub mod bounded;
pub mod locate;
pub mod native;
pub mod table;

use crate::diag::{Diagnostic, E2301, E3004, E3005, E3006, E3010, E3022, E3023, E3025};
use crate::frontend::onnx::shapes::{bind_constants, Bindings};
use crate::frontend::onnx::{self, names, proto, TensorData};
use crate::ir::Module;
use crate::runtime::exec::data::Weights;
use crate::runtime::exec::executor::{self, Options};
use crate::runtime::exec::kernel::Backends;
use crate::runtime::exec::tensor::{is_f32_family, Tensor};
use crate::source::SourceMap;
use bounded::{Done, Ended};
use prost::Message;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The `onnx` version whose node tests the table of `docs/onnx.md` describes.
pub const ONNX_VERSION: &str = "1.22.0";

/// The relative tolerance of the node tests (as ONNX's own runner compares).
pub const RTOL: f64 = 1e-3;

/// The absolute tolerance of the node tests.
pub const ATOL: f64 = 1e-7;

/// The default time bound of one test.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The default memory bound of one test: what its module needs (constants, inputs and the peak
/// of intermediate tensors), checked before it is compiled.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// One node test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// The folder's name, such as `test_abs`.
    pub name: String,
    /// The folder.
    pub dir: PathBuf,
}

/// The tests of a node-test folder: its subfolders holding a `model.onnx`, by name.
pub fn cases(root: &Path) -> Result<Vec<Case>, String> {
    let entries =
        std::fs::read_dir(root).map_err(|e| format!("cannot list `{}`: {e}", root.display()))?;
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|e| format!("cannot list `{}`: {e}", root.display()))?;
        let dir = e.path();
        if dir.join("model.onnx").is_file() {
            out.push(Case {
                name: e.file_name().to_string_lossy().into_owned(),
                dir,
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// What a test needs that collage does not have.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Missing {
    /// An operator: E3022 (not mapped yet), E3005 (control flow), E3006 (training) or E3004
    /// (another domain).
    Operator {
        /// The operator type.
        op: String,
        /// The diagnostic's code.
        code: &'static str,
    },
    /// An operator used in a way collage cannot express (E3023: an attribute value or an
    /// input), or with an input that must be known when the model is imported but depends on
    /// the inputs' values (E3025).
    Usage {
        /// The operator type.
        op: String,
        /// The diagnostic's code.
        code: &'static str,
        /// Its message.
        what: String,
    },
    /// A data type (E3010), as [`dtype_of_message`] names it.
    DType(String),
    /// An operator (or an operator on a dtype) that the reference interpreter does not run
    /// (E2301): collage's operator as the message names it first, and the message.
    Interpreter {
        /// The collage operator, such as `argmax`.
        op: String,
        /// The diagnostic's message.
        what: String,
    },
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::Operator { op, code } => write!(f, "`{op}` ({code})"),
            Missing::Usage { what, code, .. } => write!(f, "{what} ({code})"),
            Missing::DType(m) => write!(f, "{m} (E3010)"),
            Missing::Interpreter { what, .. } => write!(f, "{what} (E2301)"),
        }
    }
}

/// How a test ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every output within the tolerances.
    Passed,
    /// An output differs: wrong count, type or shape, or values (the worst element).
    Mismatch(String),
    /// Unsupported operators or data types (sorted, without repeats).
    Unsupported(Vec<Missing>),
    /// Anything else that stopped it: a diagnostic (its code and message) or unreadable data.
    Error(String),
    /// It panicked (the message and place).
    Panicked(String),
    /// It ran past the time bound.
    TimedOut,
    /// It was not run (too many tests hung before it).
    NotRun,
}

impl Verdict {
    /// The table's column: `passed`, `failed`, `unsupported` or `error`.
    pub fn class(&self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::Mismatch(_) | Verdict::Panicked(_) | Verdict::TimedOut => "failed",
            Verdict::Unsupported(_) => "unsupported",
            Verdict::Error(_) | Verdict::NotRun => "error",
        }
    }

    /// What the table says about it.
    pub fn detail(&self) -> String {
        match self {
            Verdict::Passed => String::new(),
            Verdict::Mismatch(m) => m.clone(),
            Verdict::Unsupported(ms) => ms
                .iter()
                .map(|m| m.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            Verdict::Error(m) => m.clone(),
            Verdict::Panicked(m) => format!("panicked: {m}"),
            Verdict::TimedOut => "timed out".into(),
            Verdict::NotRun => "not run: too many tests hung before it".into(),
        }
    }
}

/// A test's result.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The test's name.
    pub name: String,
    /// The domain of its nodes other than the default one (empty when all are default).
    pub domain: String,
    /// The graph inputs bound to their data as constants (see [`prepare`]).
    pub bound: Vec<String>,
    /// How it ended.
    pub verdict: Verdict,
    /// Its wall time.
    pub time: Duration,
}

/// The bounds and threads of a run.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Worker threads (tests run at once).
    pub workers: usize,
    /// The time bound of one test.
    pub timeout: Duration,
    /// The memory bound of one test (see [`DEFAULT_MAX_BYTES`]).
    pub max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            workers: executor::default_threads(),
            timeout: DEFAULT_TIMEOUT,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// Runs `cases` on the reference interpreter; the outcomes are in the order of `cases`.
/// `progress` is then told of each, with its position (from 1).
pub fn run(
    cases: &[Case],
    limits: &Limits,
    progress: &mut dyn FnMut(usize, &Outcome),
) -> Vec<Outcome> {
    let shared: Arc<Vec<Case>> = Arc::new(cases.to_vec());
    let jobs = shared.clone();
    let max_bytes = limits.max_bytes;
    let done = bounded::run(
        cases.len(),
        limits.workers,
        limits.timeout,
        move |i, pool| run_case(&jobs[i], pool, max_bytes),
        &mut |_, _| {},
    );
    let mut out = Vec::with_capacity(cases.len());
    for (k, (c, d)) in cases.iter().zip(done).enumerate() {
        let o = outcome(c, d);
        progress(k + 1, &o);
        out.push(o);
    }
    out
}

fn outcome(c: &Case, d: Done<CaseResult>) -> Outcome {
    let (domain, bound, verdict) = match d.ended {
        Ended::Returned(r) => r,
        Ended::Panicked(m) => (domain_of(&c.dir), Vec::new(), Verdict::Panicked(m)),
        Ended::TimedOut => (domain_of(&c.dir), Vec::new(), Verdict::TimedOut),
        Ended::NotRun => (domain_of(&c.dir), Vec::new(), Verdict::NotRun),
    };
    Outcome {
        name: c.name.clone(),
        domain,
        bound,
        verdict,
        time: d.time,
    }
}

/// The first domain other than the default one used by the nodes of the test's model (empty
/// when there is none or the file does not decode).
pub fn domain_of(dir: &Path) -> String {
    let Ok(bytes) = std::fs::read(dir.join("model.onnx")) else {
        return String::new();
    };
    let Ok(m) = proto::ModelProto::decode(bytes.as_slice()) else {
        return String::new();
    };
    m.graph
        .iter()
        .flat_map(|g| &g.node)
        .filter_map(|n| n.domain.as_deref())
        .find(|d| !d.is_empty() && *d != "ai.onnx")
        .unwrap_or("")
        .to_string()
}

/// A test made ready to run: its module, the inputs in `@main`'s order and the expected
/// outputs in the graph's order.
pub struct Prepared {
    /// The imported module.
    pub module: Module,
    /// One tensor per parameter of `@main`.
    pub inputs: Vec<Arc<Tensor>>,
    /// The expected outputs with their ONNX names.
    pub expected: Vec<(String, Tensor)>,
    /// The graph inputs bound to their data as constants.
    pub bound: Vec<String>,
}

/// What a job of the reference run returns: the domain, the inputs bound to their data, and
/// the verdict.
type CaseResult = (String, Vec<String>, Verdict);

fn run_case(c: &Case, pool: &Arc<rayon::ThreadPool>, max_bytes: u64) -> CaseResult {
    let domain = domain_of(&c.dir);
    match prepare(c, max_bytes) {
        Ok(p) => {
            let v = run_prepared(&p, Backends::reference_only(), None, pool).0;
            (domain, p.bound, v)
        }
        Err(v) => (domain, Vec::new(), v),
    }
}

/// Runs a prepared test with `backends` (and `grouping`) on `pool` and compares its outputs;
/// with the warnings of compilation (units a backend left to the interpreter).
pub fn run_prepared(
    p: &Prepared,
    backends: Backends,
    grouping: Option<Box<dyn executor::Grouping>>,
    pool: &Arc<rayon::ThreadPool>,
) -> (Verdict, Vec<Diagnostic>) {
    let weights = Weights::new(0);
    let mw = weights.for_module(&p.module);
    let opts = Options {
        threads: 1,
        backends,
        grouping,
    };
    let x = match executor::compile_on(&p.module, &mw, &opts, Some(pool.clone())) {
        Ok(x) => x,
        Err(ds) => return (from_diagnostics(ds.iter().cloned().collect()), Vec::new()),
    };
    let verdict = match x.run(&p.inputs) {
        Ok(out) => check_outputs(&out.value.flatten(), &p.expected),
        Err(d) => from_diagnostics(vec![d]),
    };
    (verdict, x.warnings.clone())
}

fn check_outputs(actual: &[&Arc<Tensor>], expected: &[(String, Tensor)]) -> Verdict {
    if actual.len() != expected.len() {
        return Verdict::Mismatch(format!(
            "{} outputs, {} expected",
            actual.len(),
            expected.len()
        ));
    }
    for (i, (a, (name, e))) in actual.iter().zip(expected).enumerate() {
        if let Err(m) = compare(a, e) {
            return Verdict::Mismatch(format!("output {i} (`{name}`): {m}"));
        }
    }
    Verdict::Passed
}

/// Loads, reads and imports a test, or says why it cannot run.
///
/// An input the importer needs as a value known at import time (E3025: the `axes` of a
/// reduction, the `shape` of a `Reshape`, the `sizes` of a `Resize`, the scalars of a `Range`;
/// node tests pass them as graph inputs) is bound to its test data as a constant
/// ([`bind_constants`]) and the model imported again; [`Prepared::bound`] names those inputs.
pub fn prepare(c: &Case, max_bytes: u64) -> Result<Prepared, Verdict> {
    let mut model = onnx::load_file(&c.dir.join("model.onnx")).map_err(from_diagnostics)?;
    let data = c.dir.join("test_data_set_0");
    let inputs: Vec<(String, TensorData)> = model
        .graph
        .inputs
        .iter()
        .map(|v| v.name.clone())
        .zip(read_numbered(&data, "input", model.graph.inputs.len())?)
        .collect();
    let outputs = read_numbered(&data, "output", model.graph.outputs.len())?;
    let data_of = |name: &str| inputs.iter().find(|(n, _)| n == name).map(|(_, t)| t);
    let mut bound: Vec<String> = Vec::new();
    let module = loop {
        let bindings = Bindings {
            inputs: model
                .graph
                .inputs
                .iter()
                .filter_map(|v| Some((v.name.clone(), data_of(&v.name)?.shape.clone())))
                .collect(),
            dims: Vec::new(),
            files: Vec::new(),
        };
        match onnx::import::import(&model, &bindings, &mut SourceMap::new()) {
            Ok(imported) => break imported.module,
            Err(ds) => {
                let wanted = needed_at_import(&model, &ds);
                if wanted.is_empty() {
                    return Err(from_diagnostics(ds));
                }
                bind_constants(&mut model, |name| {
                    wanted
                        .iter()
                        .any(|w| w == name)
                        .then(|| data_of(name))
                        .flatten()
                        .cloned()
                })
                .map_err(from_diagnostics)?;
                bound.extend(wanted);
            }
        }
    };
    let main = module
        .main()
        .ok_or_else(|| Verdict::Error("the imported module has no `@main`".into()))?;
    let need = crate::runtime::exec::memory::need(&module, main).total();
    if need > max_bytes {
        return Err(Verdict::Error(format!(
            "needs {}, more than the bound of {}",
            crate::runtime::exec::memory::approx_bytes(need),
            crate::runtime::exec::memory::approx_bytes(max_bytes)
        )));
    }
    // `@main`'s parameters by name: each is a graph input.
    let mut args = Vec::new();
    for &p in &module.func(main).params {
        let ident = &module.var(p).name;
        let t = inputs
            .iter()
            .find(|(n, _)| names::to_ident(n) == *ident)
            .map(|(_, t)| t)
            .ok_or_else(|| {
                Verdict::Error(format!(
                    "`@main` has a parameter `%{ident}` that is no graph input"
                ))
            })?;
        args.push(Arc::new(to_tensor(t).map_err(Verdict::Error)?));
    }
    let expected = model
        .graph
        .outputs
        .iter()
        .zip(&outputs)
        .map(|(v, t)| Ok((v.name.clone(), to_tensor(t)?)))
        .collect::<Result<Vec<_>, String>>()
        .map_err(Verdict::Error)?;
    Ok(Prepared {
        module,
        inputs: args,
        expected,
        bound,
    })
}

/// The graph inputs that E3025 diagnostics need known at import time: those their messages
/// name in backquotes, else the graph inputs of the node they are about.
fn needed_at_import(model: &onnx::Model, ds: &[Diagnostic]) -> Vec<String> {
    let is_input = |n: &str| model.graph.inputs.iter().any(|v| v.name == n);
    let mut out: Vec<String> = Vec::new();
    for d in ds.iter().filter(|d| d.code == E3025) {
        let mut named: Vec<String> = d
            .message
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|n| is_input(n))
            .map(str::to_string)
            .collect();
        if named.is_empty() {
            let node = d.place.as_ref().and_then(|p| p.node.as_ref());
            if let Some(node) =
                node.and_then(|p| model.graph.nodes.iter().find(|n| n.index == p.index))
            {
                named = node
                    .present_inputs()
                    .filter(|n| is_input(n))
                    .map(str::to_string)
                    .collect();
            }
        }
        for n in named {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

/// Reads `{what}_0.pb` ... `{what}_{n-1}.pb` from `dir`.
fn read_numbered(dir: &Path, what: &str, n: usize) -> Result<Vec<TensorData>, Verdict> {
    (0..n)
        .map(|i| read_tensor(&dir.join(format!("{what}_{i}.pb"))))
        .collect()
}

/// Reads a serialized `TensorProto`, converting its data as the model loader converts a weight
/// (raw bytes, or ONNX's typed fields): the tensor becomes the one initializer of a model made
/// for it, which [`onnx::load_bytes`] decodes.
pub fn read_tensor(path: &Path) -> Result<TensorData, Verdict> {
    let shown = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let bytes =
        std::fs::read(path).map_err(|e| Verdict::Error(format!("cannot read {shown}: {e}")))?;
    let mut t = proto::TensorProto::decode(bytes.as_slice())
        .map_err(|e| Verdict::Error(format!("{shown} is not a TensorProto: {e}")))?;
    const NAME: &str = "t";
    t.name = Some(NAME.into());
    let dims: Vec<String> = t.dims.iter().map(|d| d.to_string()).collect();
    let dims: Vec<&str> = dims.iter().map(String::as_str).collect();
    let elem = t.data_type.unwrap_or(0);
    let m = onnx::builder::model(
        13,
        onnx::builder::graph(
            Vec::new(),
            Vec::new(),
            vec![onnx::builder::value(NAME, elem, &dims)],
            vec![t],
        ),
    );
    let model = onnx::load_bytes(onnx::builder::encode(&m).into(), &shown, None)
        .map_err(from_diagnostics)?;
    model
        .graph
        .weights
        .into_iter()
        .find(|w| w.name == NAME)
        .map(|w| w.data)
        .ok_or_else(|| Verdict::Error(format!("{shown} holds no tensor")))
}

/// ONNX tensor data as an interpreter tensor.
pub fn to_tensor(t: &TensorData) -> Result<Tensor, String> {
    let shape: Vec<usize> = t
        .shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("dimension {d} is too large")))
        .collect::<Result<_, _>>()?;
    Tensor::from_bytes(onnx::import::dtype_of(t.dtype), &shape, t.bytes()).map_err(|e| e.0)
}

/// The verdict of a failed phase: unsupported when its errors name missing operators or data
/// types, an error otherwise.
pub fn from_diagnostics(ds: Vec<Diagnostic>) -> Verdict {
    let errors: Vec<&Diagnostic> = ds.iter().filter(|d| d.is_error()).collect();
    let mut missing = Vec::new();
    for d in &errors {
        let op = || {
            d.place
                .as_ref()
                .and_then(|p| p.node.as_ref())
                .map(|n| n.op_type.clone())
        };
        let code = d.code.id;
        if code == E3010.id {
            missing.push(Missing::DType(dtype_of_message(&d.message)));
        } else if let Some(code) = [E3022.id, E3004.id, E3005.id, E3006.id]
            .into_iter()
            .find(|c| *c == code)
        {
            // Without a node to name, it is an error like any other.
            if let Some(op) = op() {
                missing.push(Missing::Operator { op, code });
            }
        } else if code == E2301.id {
            let op = d.message.split('`').nth(1).unwrap_or("").to_string();
            missing.push(Missing::Interpreter {
                op,
                what: d.message.clone(),
            });
        } else if let Some(code) = [E3023.id, E3025.id].into_iter().find(|c| *c == code) {
            if let Some(op) = op() {
                missing.push(Missing::Usage {
                    op,
                    code,
                    what: d.message.clone(),
                });
            }
        }
    }
    if !missing.is_empty() {
        missing.sort();
        missing.dedup();
        return Verdict::Unsupported(missing);
    }
    match errors.first().copied().or(ds.first()) {
        Some(d) => Verdict::Error(format!("{}: {}", d.code.id, d.message)),
        None => Verdict::Error("failed without a diagnostic".into()),
    }
}

/// The data type an E3010 message names (`type string`, `float8e4m3fn`), the kind of a value
/// that is not a tensor, or else the message itself.
pub fn dtype_of_message(m: &str) -> String {
    if m.contains("is not a tensor") {
        return "a value that is not a tensor".into();
    }
    let after = |key: &str| {
        let rest = &m[m.find(key)? + key.len()..];
        let end = rest.find([',', ' ']).unwrap_or(rest.len());
        // Codes without a name (`data type code 25`).
        if let Some(code) = rest.strip_prefix("data type code ") {
            let code = code.split([',', ' ']).next()?;
            return Some(format!("type code {code}"));
        }
        Some(format!("type {}", &rest[..end]))
    };
    after("has type ")
        .or_else(|| after("tensors of type "))
        .unwrap_or_else(|| m.to_string())
}

/// Compares an output with the expected tensor: same dtype and shape; floats within
/// `ATOL + RTOL * |expected|` (NaN equals NaN, an infinity only itself); other types exactly.
/// The error names the worst element.
pub fn compare(actual: &Tensor, expected: &Tensor) -> Result<(), String> {
    if actual.dtype() != expected.dtype() || actual.shape() != expected.shape() {
        let ty = |t: &Tensor| format!("{}{:?}", t.dtype(), t.shape());
        return Err(format!("`{}`, expected `{}`", ty(actual), ty(expected)));
    }
    let n = expected.numel();
    let float = actual.dtype().is_float();
    let size = actual.elem_size();
    let (a, e) = (actual.bytes(), expected.bytes());
    let mut off = 0usize;
    // The worst element: its index and how far past its bound it lies.
    let mut worst: Option<(usize, f64)> = None;
    for i in 0..n {
        if a[i * size..(i + 1) * size] == e[i * size..(i + 1) * size] {
            continue;
        }
        let excess = if float {
            let (x, y) = (actual.get_f64(i), expected.get_f64(i));
            if x.is_nan() && y.is_nan() {
                continue;
            }
            if !x.is_finite() || !y.is_finite() {
                // A NaN or an infinity equals only itself (bit patterns that differ, such as
                // NaNs of two signs, were compared above).
                if x == y {
                    continue;
                }
                f64::INFINITY
            } else {
                let bound = ATOL + RTOL * y.abs();
                let d = (x - y).abs();
                if d <= bound {
                    continue;
                }
                d - bound
            }
        } else {
            f64::INFINITY
        };
        off += 1;
        if worst.is_none_or(|(_, w)| excess > w) {
            worst = Some((i, excess));
        }
    }
    let Some((i, _)) = worst else {
        return Ok(());
    };
    let at = index_of(i, expected.shape());
    let show = |t: &Tensor| {
        if is_f32_family(t.dtype()) {
            format!("{}", t.get_f64(i) as f32)
        } else if t.dtype().is_float() {
            format!("{}", t.get_f64(i))
        } else {
            format!("{}", t.get_i64(i))
        }
    };
    Err(format!(
        "{off} of {n} elements differ; the worst at {at:?}: {} against {}",
        show(actual),
        show(expected)
    ))
}

/// The coordinates of the `i`th element of a row-major tensor of `shape`.
fn index_of(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut at = vec![0; shape.len()];
    for (k, &d) in shape.iter().enumerate().rev() {
        if d > 0 {
            at[k] = i % d;
            i /= d;
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::{ModelPlace, NodePlace};
    use crate::ir::DType;

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_slice(DType::F32, shape, v).unwrap()
    }

    #[test]
    fn floats_compare_at_the_suites_tolerances() {
        let e = f32s(&[2, 2], &[1.0, 0.0, f32::NAN, f32::INFINITY]);
        assert_eq!(compare(&e, &e), Ok(()));
        // Within 1e-3 relative, and 1e-7 absolute near zero.
        let a = f32s(&[2, 2], &[1.0009, 5e-8, f32::NAN, f32::INFINITY]);
        assert_eq!(compare(&a, &e), Ok(()));
        let a = f32s(&[2, 2], &[1.0009, 2e-7, 0.0, f32::INFINITY]);
        let m = compare(&a, &e).unwrap_err();
        assert_eq!(
            m,
            "2 of 4 elements differ; the worst at [1, 0]: 0 against NaN"
        );
        let a = f32s(&[2, 2], &[1.002, 0.0, f32::NAN, f32::NEG_INFINITY]);
        let m = compare(&a, &e).unwrap_err();
        assert!(
            m.starts_with("2 of 4 elements differ; the worst at [1, 1]: -inf"),
            "{m}"
        );
        let a = f32s(&[4], &[1.0, 0.0, f32::NAN, f32::INFINITY]);
        assert_eq!(
            compare(&a, &e).unwrap_err(),
            "`float32[4]`, expected `float32[2, 2]`"
        );
    }

    #[test]
    fn integers_and_bools_compare_exactly() {
        let e = Tensor::from_slice(
            DType::scalar(crate::ir::DTypeCode::Int, 64),
            &[3],
            &[1i64, 2, 3],
        )
        .unwrap();
        let a = Tensor::from_slice(
            DType::scalar(crate::ir::DTypeCode::Int, 64),
            &[3],
            &[1i64, 2, 4],
        )
        .unwrap();
        assert_eq!(
            compare(&a, &e).unwrap_err(),
            "1 of 3 elements differ; the worst at [2]: 4 against 3"
        );
        let b = Tensor::from_slice(DType::BOOL, &[2], &[1u8, 0]).unwrap();
        let c = Tensor::from_slice(DType::BOOL, &[2], &[1u8, 1]).unwrap();
        assert!(compare(&b, &c).is_err());
        assert_eq!(compare(&b, &b), Ok(()));
    }

    fn at_node(d: Diagnostic, op: &str) -> Diagnostic {
        d.with_place(ModelPlace {
            file: "model.onnx".into(),
            node: Some(NodePlace {
                index: 0,
                name: String::new(),
                op_type: op.into(),
            }),
            tensor: None,
            opset: Some(13),
        })
    }

    #[test]
    fn diagnostics_are_classified_by_code() {
        let v = from_diagnostics(vec![
            at_node(Diagnostic::error(E3005, "control flow"), "If"),
            Diagnostic::error(E3010, "tensors of type string are not supported"),
            Diagnostic::error(
                E3010,
                "graph input or output `x` has type data type code 25, which is not supported",
            ),
            at_node(Diagnostic::error(E3005, "control flow"), "If"),
        ]);
        assert_eq!(v.class(), "unsupported");
        assert_eq!(
            v.detail(),
            "`If` (E3005), type code 25 (E3010), type string (E3010)"
        );
        let v = from_diagnostics(vec![Diagnostic::error(
            E2301,
            "the reference interpreter does not implement `argmax`",
        )]);
        assert_eq!(
            v,
            Verdict::Unsupported(vec![Missing::Interpreter {
                op: "argmax".into(),
                what: "the reference interpreter does not implement `argmax`".into()
            }])
        );
        let v = from_diagnostics(vec![Diagnostic::error(E3004, "a domain")]);
        assert_eq!(v, Verdict::Error("E3004: a domain".into()));
        let v = from_diagnostics(vec![Diagnostic::error(crate::diag::E3008, "no producer")]);
        assert_eq!(v, Verdict::Error("E3008: no producer".into()));
    }

    #[test]
    fn data_types_are_named_from_the_message() {
        let n = |m: &str| dtype_of_message(m);
        assert_eq!(
            n("graph input or output `x` has type string, which is not supported"),
            "type string"
        );
        assert_eq!(
            n("tensors of type float8e5m2 are not supported"),
            "type float8e5m2"
        );
        assert_eq!(
            n("graph input or output `x0` is not a tensor"),
            "a value that is not a tensor"
        );
        assert_eq!(n("something else"), "something else");
    }

    /// Writes a node-test folder: a `ReduceSum` over the `axes` input (a graph input, as node
    /// tests pass it), or `op` in its place, and `expected` as the output.
    fn write_case(root: &Path, name: &str, op: &str, expected: &[f32]) -> Case {
        use crate::frontend::onnx::builder as b;
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("test_data_set_0")).unwrap();
        let g = b::graph(
            vec![b::node(
                op,
                &["x", "axes"],
                &["y"],
                vec![b::attr_int("keepdims", 0)],
            )],
            vec![
                b::value("x", b::code::FLOAT, &["2", "3"]),
                b::value("axes", b::code::INT64, &["1"]),
            ],
            vec![b::value("y", b::code::FLOAT, &["2"])],
            Vec::new(),
        );
        std::fs::write(dir.join("model.onnx"), b::encode(&b::model(13, g))).unwrap();
        let pb = |t: proto::TensorProto, f: &str| {
            std::fs::write(dir.join("test_data_set_0").join(f), t.encode_to_vec()).unwrap()
        };
        pb(
            b::f32s("x", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            "input_0.pb",
        );
        pb(b::i64s("axes", &[1], &[1]), "input_1.pb");
        pb(b::f32s("y", &[2], expected), "output_0.pb");
        Case {
            name: name.into(),
            dir,
        }
    }

    #[test]
    fn test_folders_run_end_to_end() {
        let t = tempfile::tempdir().unwrap();
        write_case(t.path(), "test_sum", "ReduceSum", &[6.0, 15.0]);
        write_case(t.path(), "test_sum_wrong", "ReduceSum", &[6.0, 15.5]);
        write_case(t.path(), "test_unknown", "NoSuchOperator", &[6.0, 15.0]);
        std::fs::create_dir_all(t.path().join("test_garbage")).unwrap();
        std::fs::write(t.path().join("test_garbage/model.onnx"), b"not onnx").unwrap();
        std::fs::create_dir_all(t.path().join("not_a_test")).unwrap();
        let cs = cases(t.path()).unwrap();
        let names: Vec<&str> = cs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["test_garbage", "test_sum", "test_sum_wrong", "test_unknown"]
        );
        let mut told = Vec::new();
        let out = run(&cs, &Limits::default(), &mut |k, o| {
            told.push((k, o.name.clone()))
        });
        assert_eq!(told.len(), 4);
        assert!(
            matches!(&out[0].verdict, Verdict::Error(m) if m.starts_with("E3001")),
            "{:?}",
            out[0]
        );
        assert_eq!(out[1].verdict, Verdict::Passed);
        // The axes had to be known when importing: bound to their data.
        assert_eq!(out[1].bound, ["axes"]);
        assert_eq!(
            out[2].verdict,
            Verdict::Mismatch(
                "output 0 (`y`): 1 of 2 elements differ; the worst at [1]: 15 against 15.5".into()
            )
        );
        assert!(
            matches!(&out[3].verdict, Verdict::Unsupported(ms)
                if ms == &[Missing::Operator { op: "NoSuchOperator".into(), code: "E3022" }]),
            "{:?}",
            out[3]
        );
    }

    #[test]
    fn passing_tests_run_on_generated_code_too() {
        let t = tempfile::tempdir().unwrap();
        let cs = vec![
            write_case(t.path(), "test_sum", "ReduceSum", &[6.0, 15.0]),
            write_case(t.path(), "test_sum_wrong", "ReduceSum", &[6.0, 15.5]),
        ];
        let cache = tempfile::tempdir().unwrap();
        let r = native::run(
            &cs,
            &Limits::default(),
            crate::runtime::backend::native::Config {
                cache_dir: Some(cache.path().to_path_buf()),
                ..Default::default()
            },
        );
        assert_eq!(r.outcomes[0].verdict, Verdict::Passed);
        assert!(r.outcomes[0].fallbacks.is_empty(), "{:?}", r.outcomes[0]);
        assert!(matches!(r.outcomes[1].verdict, Verdict::Mismatch(_)));
        // One kernel for both tests (the same group), compiled in one compiler run.
        assert_eq!((r.stats.compiled, r.stats.compiler_runs), (1, 1));
    }

    #[test]
    fn indices_are_row_major() {
        assert_eq!(index_of(5, &[2, 3]), vec![1, 2]);
        assert_eq!(index_of(0, &[]), Vec::<usize>::new());
    }
}
