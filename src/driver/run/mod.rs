//! `collage run`: executes a model (partitioned or not) and reports its outputs, latency and
//! peak memory; with `--compare-with`, runs other models on the same inputs and weights and
//! compares their outputs.

mod report;

use super::render::Format;
use super::{load_model, main_of, out, report, Outcome};
use crate::diag::{self, Diagnostic, Diagnostics};
use crate::ir::Module;
use crate::pipeline::{checks, execute};
use crate::runtime::backend::native::Native;
use crate::runtime::exec::compare::{self, Diff, Purpose, Summary};
use crate::runtime::exec::data::Weights;
use crate::runtime::exec::executor::{self, Executable};
use crate::runtime::exec::kernel::Backend as _;
use crate::runtime::exec::tensor::Tensor;
use crate::runtime::exec::value::Value;
use crate::source::SourceMap;
use report::RunReport;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Everything `collage run` is asked to do.
#[derive(Clone, Debug)]
pub struct Request {
    /// The model.
    pub model: PathBuf,
    /// How the model (and the compared models) are read.
    pub model_options: crate::pipeline::load::ModelOptions,
    /// The seed of weights and random inputs.
    pub seed: u64,
    /// `NAME=FILE.npy` input specifications.
    pub inputs: Vec<String>,
    /// Where to write `output<i>.npy`.
    pub output_dir: Option<PathBuf>,
    /// Timed runs (at least 1).
    pub repeat: usize,
    /// Untimed runs before them.
    pub warmup: usize,
    /// Worker threads (`None`: all cores).
    pub threads: Option<usize>,
    /// Report format.
    pub format: Format,
    /// Models to compare with.
    pub compare_with: Vec<PathBuf>,
    /// Relative tolerance (`None`: per dtype).
    pub rtol: Option<f64>,
    /// Absolute tolerance (`None`: per dtype).
    pub atol: Option<f64>,
    /// What runs the partitions.
    pub backend: BackendChoice,
    /// The cache directory (`None`: `$COLLAGE_CACHE_DIR` or the user's cache directory).
    pub cache_dir: Option<PathBuf>,
    /// The time limit of one C compiler run, in seconds (`None`: the default).
    pub compile_timeout: Option<f64>,
    /// Also run the model on the reference interpreter and compare the outputs.
    pub check_reference: bool,
    /// `--max-memory`: the memory limit (default: what the machine has available).
    pub max_memory: Option<String>,
}

pub use crate::pipeline::execute::BackendChoice;

fn usage(code: diag::Code, msg: String) -> Outcome {
    super::usage_error(code, msg)
}

fn not_comparable(msg: String) -> Outcome {
    diag::emit_alone(diag::Diagnostic::error(diag::E2307, msg));
    Outcome::InputErrors
}

fn input_error(msg: String) -> Outcome {
    diag::emit_alone(diag::Diagnostic::error(diag::E2304, msg));
    Outcome::InputErrors
}

/// The most timed runs (`--repeat`) and untimed ones (`--warmup`).
pub const MAX_REPEAT: usize = 1_000_000;

/// Parses `NAME=FILE` specifications.
fn parse_inputs(specs: &[String]) -> Result<Vec<(String, PathBuf)>, Outcome> {
    let mut out: Vec<(String, PathBuf)> = Vec::new();
    for s in specs {
        let malformed = || {
            usage(
                diag::E2309,
                format!("`--input {s}` is not of the form NAME=FILE.npy"),
            )
        };
        let (name, file) = s.split_once('=').ok_or_else(malformed)?;
        let name = name.strip_prefix('%').unwrap_or(name);
        if name.is_empty() || file.is_empty() {
            return Err(malformed());
        }
        if out.iter().any(|(n, _)| n == name) {
            return Err(usage(diag::E2305, format!("input `{name}` is given twice")));
        }
        out.push((name.to_string(), PathBuf::from(file)));
    }
    Ok(out)
}

fn run_once(
    x: &Executable,
    inputs: &[Arc<Tensor>],
    sources: &SourceMap,
) -> Result<(Value, u64), Outcome> {
    match x.run(inputs) {
        Ok(o) => Ok((o.value, o.peak_bytes)),
        Err(d) => {
            let mut ds = Diagnostics::new();
            ds.push(d);
            report(&ds, sources);
            Err(Outcome::InputErrors)
        }
    }
}

/// One comparison with another model.
struct Comparison {
    model: PathBuf,
    /// Whether this is the model itself on the reference interpreter.
    reference: bool,
    /// Per output: the diff and the tolerances used.
    diffs: Vec<(Diff, f64, f64)>,
}

impl Comparison {
    fn label(&self) -> String {
        if self.reference {
            format!("{} (reference interpreter)", self.model.display())
        } else {
            self.model.display().to_string()
        }
    }
}

/// Runs `collage run`.
pub fn run_command(req: &Request) -> Outcome {
    match run_inner(req) {
        Ok(o) | Err(o) => o,
    }
}

fn run_inner(req: &Request) -> Result<Outcome, Outcome> {
    let given = check_flags(req)?;
    let threads = req.threads.unwrap_or_else(executor::default_threads);

    let mut sources = SourceMap::new();
    let model_options = req.model_options.with_input_files(&req.model, &given);
    let m = load_model(&mut sources, &req.model, &model_options)?;
    main_of(&m, &req.model)?;
    let mut others = Vec::new();
    for p in &req.compare_with {
        let other = load_model(
            &mut sources,
            p,
            &req.model_options.with_input_files(p, &given),
        )?;
        main_of(&other, p)?;
        others.push((p.clone(), other));
    }
    let mut all: Vec<&Module> = vec![&m];
    all.extend(others.iter().map(|(_, o)| o));
    checks::memory(&all, req.max_memory.as_deref())?;

    let native = native_backend(req, threads)?;
    let weights = Weights::new(req.seed);
    let compile_start = Instant::now();
    let x = execute::compile_model(&m, &weights, threads, native.as_ref(), &sources)?;
    let compile_ms = compile_start.elapsed().as_secs_f64() * 1e3;
    // What the native backend did for this model (models compared with compile later).
    let native_report = native
        .as_ref()
        .map(|n| (n.stats(), n.cache_dir(), n.version()));
    let (inputs, input_sources) = read_inputs(&x, &given, &weights.for_module(&m))?;
    let out_files = output_files(req, &x, &given)?;
    let (value, times, peak) = time_runs(req, &x, &inputs, &sources)?;
    let outputs: Vec<Arc<Tensor>> = value.flatten().into_iter().cloned().collect();
    let summaries: Vec<Summary> = outputs.iter().map(|t| compare::summarize(t)).collect();
    let run = Run {
        m: &m,
        x: &x,
        inputs: &inputs,
        outputs: &outputs,
        weights: &weights,
        threads,
        native: native.as_ref(),
        sources: &sources,
    };
    let comparisons = compare_all(req, &run, &others)?;
    write_outputs(req, &outputs, &out_files)?;
    for (i, s) in summaries.iter().enumerate() {
        if s.non_finite > 0 {
            diag::emit_alone(diag::Diagnostic::warning(
                diag::W2331,
                format!("output{i} has {} NaN or infinite value(s)", s.non_finite),
            ));
        }
    }

    let rep = RunReport {
        req,
        native: native_report,
        compile_ms,
        x: &x,
        input_sources: &input_sources,
        summaries: &summaries,
        times: &times,
        peak,
        comparisons: &comparisons,
    };
    let text = match req.format {
        Format::Table => rep.table(),
        Format::Json => rep.json(),
    };
    out(&text)?;
    let differ = differences(&comparisons);
    if !differ.is_empty() {
        report(&differ, &sources);
        return Ok(Outcome::InputErrors);
    }
    Ok(Outcome::Ok)
}

/// Refuses nonsensical flags (usage errors) and returns the `--input` files by name.
fn check_flags(req: &Request) -> Result<Vec<(String, PathBuf)>, Outcome> {
    if req.repeat == 0 || req.repeat > MAX_REPEAT {
        return Err(usage(
            diag::E0950,
            format!(
                "`--repeat` must be between 1 and {MAX_REPEAT}, found {}",
                req.repeat
            ),
        ));
    }
    if req.warmup > MAX_REPEAT {
        return Err(usage(
            diag::E0950,
            format!(
                "`--warmup` must be at most {MAX_REPEAT}, found {}",
                req.warmup
            ),
        ));
    }
    checks::threads(req.threads)?;
    checks::tolerances(req.rtol, req.atol)?;
    checks::seconds_flag("--compile-timeout", req.compile_timeout)?;
    parse_inputs(&req.inputs)
}

/// The native backend of `--backend auto` (none for the reference interpreter).
fn native_backend(req: &Request, threads: usize) -> Result<Option<Arc<Native>>, Outcome> {
    execute::native_backend(
        req.backend,
        threads,
        req.cache_dir.as_deref(),
        req.compile_timeout,
    )
}

/// The inputs: files by name (checked against `@main`'s parameters), the rest drawn from the
/// seed; and where each came from.
fn read_inputs(
    x: &Executable,
    given: &[(String, PathBuf)],
    mw: &crate::runtime::exec::data::ModuleWeights<'_>,
) -> Result<(Vec<Arc<Tensor>>, Vec<String>), Outcome> {
    // A parameter is named as in the model text, or (for an imported ONNX model) by its ONNX
    // input name, which the importer maps to an identifier.
    let names_param = |given: &str, param: &str| {
        given == param || crate::frontend::onnx::names::to_ident(given) == param
    };
    for (name, _) in given {
        if !x.inputs.iter().any(|i| names_param(name, &i.name)) {
            let names: Vec<String> = x.inputs.iter().map(|i| format!("`{}`", i.name)).collect();
            let list = if names.is_empty() {
                "it has none".to_string()
            } else {
                format!("its parameters are {}", names.join(", "))
            };
            return Err(usage(
                diag::E2305,
                format!("`@main` has no parameter `%{name}`; {list}"),
            ));
        }
    }
    let mut inputs = Vec::with_capacity(x.inputs.len());
    let mut input_sources = Vec::new();
    for (i, p) in x.inputs.iter().enumerate() {
        let t = match given.iter().find(|(n, _)| names_param(n, &p.name)) {
            Some((_, file)) => {
                let bytes = crate::source::read_bytes(file).map_err(|e| {
                    usage(
                        diag::E0901,
                        format!("cannot read `{}`: {e}", file.display()),
                    )
                })?;
                let t = crate::runtime::exec::npy::read(&bytes).map_err(|e| {
                    input_error(format!("input `{}` (`{}`): {e}", p.name, file.display()))
                })?;
                x.check_input(i, &t)
                    .map_err(|e| input_error(format!("{e} (`{}`)", file.display())))?;
                let bad = t.count_non_finite();
                if bad > 0 {
                    return Err(input_error(format!(
                        "input `{}` (`{}`) has {bad} NaN or infinite value(s)",
                        p.name,
                        file.display()
                    )));
                }
                input_sources.push(file.display().to_string());
                t
            }
            None => {
                input_sources.push("random".to_string());
                mw.random_input(&p.name, &p.shape).map_err(input_error)?
            }
        };
        inputs.push(Arc::new(t));
    }

    Ok((inputs, input_sources))
}

/// The output files of `--output-dir`, checked before running that none of them is an input.
fn output_files(
    req: &Request,
    x: &Executable,
    given: &[(String, PathBuf)],
) -> Result<Vec<PathBuf>, Outcome> {
    let out_files: Vec<PathBuf> = match &req.output_dir {
        Some(dir) => {
            let n = crate::runtime::exec::value::flat_shapes(&x.output_type).map_or(0, |s| s.len());
            (0..n).map(|i| dir.join(format!("output{i}.npy"))).collect()
        }
        None => Vec::new(),
    };
    if !out_files.is_empty() {
        let outs: Vec<(&str, &Path)> = out_files
            .iter()
            .map(|p| ("--output-dir", p.as_path()))
            .collect();
        let mut ins: Vec<(&str, &Path)> = vec![("the model", req.model.as_path())];
        ins.extend(
            req.compare_with
                .iter()
                .map(|p| ("a compared model", p.as_path())),
        );
        ins.extend(given.iter().map(|(_, f)| ("an input file", f.as_path())));
        if let Err(msg) = super::output::check_collisions(&outs, &ins) {
            return Err(usage(diag::E0903, msg));
        }
    }

    Ok(out_files)
}

/// The warm-up runs and the timed ones: the last run's value, the times (ms) and the peak of
/// live tensors. The outputs of a run that are not kept give their storage back to the
/// executable before the next run, as an executor with preallocated outputs would reuse them.
fn time_runs(
    req: &Request,
    x: &Executable,
    inputs: &[Arc<Tensor>],
    sources: &SourceMap,
) -> Result<(Value, Vec<f64>, u64), Outcome> {
    for _ in 0..req.warmup {
        let (v, _) = run_once(x, inputs, sources)?;
        x.recycle(v);
    }
    // Grown as the runs come: nothing is reserved for a large `--repeat` up front.
    let mut times = Vec::new();
    let mut result: Option<Value> = None;
    let mut peak = 0u64;
    for _ in 0..req.repeat {
        if let Some(v) = result.take() {
            x.recycle(v);
        }
        let start = Instant::now();
        let (v, p) = run_once(x, inputs, sources)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        peak = peak.max(p);
        result = Some(v);
    }
    let value = result.unwrap_or(Value::Tuple(Vec::new()));
    Ok((value, times, peak))
}

/// The model's run, which the compared models are checked against.
struct Run<'a> {
    m: &'a Module,
    x: &'a Executable,
    inputs: &'a [Arc<Tensor>],
    outputs: &'a [Arc<Tensor>],
    weights: &'a Weights,
    threads: usize,
    native: Option<&'a Arc<Native>>,
    sources: &'a SourceMap,
}

/// Runs each model of `--compare-with` (on the same backends) and, with `--check-reference`,
/// the model on the reference interpreter, and compares their outputs with the run's.
fn compare_all(
    req: &Request,
    run: &Run<'_>,
    others: &[(PathBuf, Module)],
) -> Result<Vec<Comparison>, Outcome> {
    let mut comparisons = Vec::new();
    let mut checks: Vec<(&PathBuf, &Module, bool)> =
        others.iter().map(|(p, o)| (p, o, false)).collect();
    if req.check_reference {
        checks.push((&req.model, run.m, true));
    }
    for (path, other, oracle) in checks {
        let backend = if oracle { None } else { run.native };
        let y = execute::compile_model(other, run.weights, run.threads, backend, run.sources)?;
        if y.inputs != run.x.inputs {
            let show = |e: &Executable| {
                e.inputs
                    .iter()
                    .map(|i| format!("%{}: {}", i.name, i.shape))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(not_comparable(format!(
                "`{}` takes ({}) but `{}` takes ({})",
                path.display(),
                show(&y),
                req.model.display(),
                show(run.x)
            )));
        }
        let (v, _) = run_once(&y, run.inputs, run.sources)?;
        let theirs: Vec<&Arc<Tensor>> = v.flatten();
        if theirs.len() != run.outputs.len() {
            return Err(not_comparable(format!(
                "`{}` has {} outputs but `{}` has {}",
                path.display(),
                theirs.len(),
                req.model.display(),
                run.outputs.len()
            )));
        }
        let mut diffs = Vec::new();
        for (i, (a, b)) in run.outputs.iter().zip(&theirs).enumerate() {
            let purpose = if oracle {
                Purpose::GeneratedCode
            } else {
                Purpose::Models
            };
            let (dr, da) = compare::tolerance(purpose, a.dtype());
            let (rtol, atol) = (req.rtol.unwrap_or(dr), req.atol.unwrap_or(da));
            match compare::compare(b, a, rtol, atol) {
                Ok(d) => diffs.push((d, rtol, atol)),
                Err(e) => {
                    return Err(not_comparable(format!(
                        "output{i} of `{}` cannot be compared: {e}",
                        path.display()
                    )));
                }
            }
        }
        comparisons.push(Comparison {
            model: path.clone(),
            reference: oracle,
            diffs,
        });
    }
    Ok(comparisons)
}

/// Writes the outputs to `--output-dir`.
fn write_outputs(
    req: &Request,
    outputs: &[Arc<Tensor>],
    out_files: &[PathBuf],
) -> Result<(), Outcome> {
    // Output files.
    if let Some(dir) = &req.output_dir {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return Err(usage(
                diag::E0902,
                format!("cannot create `{}`: {e}", dir.display()),
            ));
        }
        for (t, path) in outputs.iter().zip(out_files) {
            let bytes = crate::runtime::exec::npy::write(t).map_err(|e| {
                usage(
                    diag::E0902,
                    format!("cannot write `{}`: {e}", path.display()),
                )
            })?;
            super::output::write_file(path, &bytes).map_err(|e| {
                usage(
                    diag::E0902,
                    format!("cannot write `{}`: {e}", path.display()),
                )
            })?;
        }
    }

    Ok(())
}

/// E2306 for each output of a compared model beyond the tolerances.
fn differences(comparisons: &[Comparison]) -> Diagnostics {
    let mut ds = Diagnostics::new();
    for c in comparisons {
        for (i, d) in c.diffs.iter().enumerate().filter(|(_, d)| !d.0.within()) {
            ds.push(Diagnostic::error(
                diag::E2306,
                format!(
                    "output{i} of `{}` differs: {} element(s) beyond rtol {} and atol {} (largest absolute difference {})",
                    c.label(),
                    d.0.mismatched,
                    d.1,
                    d.2,
                    d.0.max_abs
                ),
            ));
        }
    }
    ds
}
