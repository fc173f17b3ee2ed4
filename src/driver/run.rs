//! `collage run`: executes a model (partitioned or not) and reports its outputs, latency and
//! peak memory; with `--compare-with`, runs other models on the same inputs and weights and
//! compares their outputs.

use super::{load_model, main_of, out, report, Outcome};
use crate::backend::native::grouping::FuseGrouping;
use crate::backend::native::{compile, Config, Native, Stats};
use crate::backend::registry;
use crate::diag::{self, Diagnostic, Diagnostics};
use crate::exec::compare::{self, Diff, Summary};
use crate::exec::data::Weights;
use crate::exec::executor::{self, Executable, Options};
use crate::exec::kernel::{Backend, Backends};
use crate::exec::tensor::Tensor;
use crate::exec::value::Value;
use crate::ir::Module;
use crate::source::SourceMap;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Report formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A table for people.
    Table,
    /// JSON for programs.
    Json,
}

/// Everything `collage run` is asked to do.
#[derive(Clone, Debug)]
pub struct Request {
    /// The model.
    pub model: PathBuf,
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

/// Default tolerances of generated code against the reference interpreter (`--check-reference`):
/// kernels compute in `float32` with vectorised (reassociated) sums, fused multiply-adds and
/// vector math, and do not round `float16` intermediates.
pub fn reference_tolerance(d: crate::ir::DType) -> (f64, f64) {
    if d == crate::ir::DType::F32 {
        (1e-4, 1e-4)
    } else if crate::exec::tensor::is_f32_family(d) {
        (5e-2, 5e-2)
    } else {
        compare::default_tolerance(d)
    }
}

/// What runs the partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// Each partition on its target's backend: the native operators (the inline operators of
    /// `@main` and `Primitive=1` functions) as generated code (FuseOps groups compiled by the C
    /// compiler), `Compiler="dnnl"` and `Compiler="openblas"` functions on their libraries (a
    /// missing library is E2308), falling back to the interpreter unit by unit.
    Auto,
    /// The reference interpreter, one operator at a time (the oracle).
    Reference,
}

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

/// Refuses, before anything is allocated, models that together need more memory than
/// `--max-memory` (`max`) or, without it, than this process can get (E2330); a `max` that is
/// not a size is E0955.
pub fn check_memory(models: &[&Module], max: Option<&str>) -> Result<(), Outcome> {
    use crate::exec::memory;
    let limit = match max {
        Some(text) => memory::Limit {
            bytes: memory::parse_size(text).map_err(|e| usage(diag::E0955, e))?,
            source: format!("--max-memory {text}"),
        },
        None => match memory::available() {
            Some(l) => l,
            None => return Ok(()),
        },
    };
    let mut need = memory::Need::default();
    for m in models {
        let Some(main) = m.main() else { continue };
        let n = memory::need(m, main);
        need.constants = need.constants.saturating_add(n.constants);
        need.inputs = need.inputs.saturating_add(n.inputs);
        need.peak = need.peak.saturating_add(n.peak);
    }
    memory::check(&need, &limit).map_err(|e| {
        diag::emit_alone(
            diag::Diagnostic::error(diag::E2330, e)
                .with_note("`--max-memory SIZE` sets the limit (e.g. `--max-memory 8G`)"),
        );
        Outcome::Usage
    })
}

/// Refuses a thread count outside `1..=MAX_THREADS` (E0951).
pub fn check_threads(threads: Option<usize>) -> Result<(), Outcome> {
    match threads {
        Some(t) if t == 0 || t > executor::MAX_THREADS => Err(usage(
            diag::E0951,
            format!(
                "`--threads` must be between 1 and {}, found {t}",
                executor::MAX_THREADS
            ),
        )),
        _ => Ok(()),
    }
}

/// Refuses a tolerance that is not a non-negative number (E0952).
pub fn check_tolerances(rtol: Option<f64>, atol: Option<f64>) -> Result<(), Outcome> {
    for (flag, v) in [("--rtol", rtol), ("--atol", atol)] {
        if let Some(v) = v {
            if !(v.is_finite() && v >= 0.0) {
                return Err(usage(
                    diag::E0952,
                    format!("`{flag}` must be a non-negative number, found {v}"),
                ));
            }
        }
    }
    Ok(())
}

/// Refuses a time flag that is not a positive, finite number of seconds (E0953).
pub fn check_seconds_flag(flag: &str, v: Option<f64>) -> Result<(), Outcome> {
    match v {
        Some(v) if !(v.is_finite() && v > 0.0) => Err(usage(
            diag::E0953,
            format!("`{flag}` must be a positive number of seconds, found {v}"),
        )),
        _ => Ok(()),
    }
}

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

/// Peak resident memory of this process (Linux), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn compile_model(
    m: &Module,
    weights: &Weights,
    threads: usize,
    native: Option<&Arc<Native>>,
    sources: &SourceMap,
) -> Result<Executable, Outcome> {
    let mw = weights.for_module(m);
    let opts = match native {
        Some(n) => {
            // The CPU libraries the plan's `Compiler=` partitions need (E2308 where one is
            // missing), then generated code for the native operators.
            let mut list = registry::libraries_for(m, threads).map_err(|errors| {
                let mut ds = Diagnostics::new();
                for d in errors {
                    ds.push(d);
                }
                report(&ds, sources);
                Outcome::InputErrors
            })?;
            list.push(n.clone() as Arc<dyn Backend>);
            Options {
                threads,
                backends: Backends { list },
                grouping: Some(Box::new(FuseGrouping::default())),
            }
        }
        None => Options {
            threads,
            ..Options::default()
        },
    };
    match executor::compile(m, &mw, &opts) {
        Ok(x) => {
            let mut w = Diagnostics::new();
            for d in &x.warnings {
                w.push(d.clone());
            }
            if !w.is_empty() {
                report(&w, sources);
            }
            Ok(x)
        }
        Err(d) => {
            report(&d, sources);
            Err(Outcome::InputErrors)
        }
    }
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
    check_threads(req.threads)?;
    check_tolerances(req.rtol, req.atol)?;
    check_seconds_flag("--compile-timeout", req.compile_timeout)?;
    let given = parse_inputs(&req.inputs)?;
    let threads = req.threads.unwrap_or_else(executor::default_threads);

    let mut sources = SourceMap::new();
    let m = load_model(&mut sources, &req.model)?;
    main_of(&m, &req.model)?;
    let mut others = Vec::new();
    for p in &req.compare_with {
        let other = load_model(&mut sources, p)?;
        main_of(&other, p)?;
        others.push((p.clone(), other));
    }
    let mut all: Vec<&Module> = vec![&m];
    all.extend(others.iter().map(|(_, o)| o));
    check_memory(&all, req.max_memory.as_deref())?;

    let timeout = match req.compile_timeout {
        Some(t) => std::time::Duration::from_secs_f64(t.min(1e6)),
        None => compile::DEFAULT_TIMEOUT,
    };
    // The kernel cache, checked: refused (E2410) or replaced (W2411) before anything runs.
    let place = match req.backend {
        BackendChoice::Auto => super::measuring::cache_place(req.cache_dir.as_deref())?,
        _ => crate::measure::dir::Place::default(),
    };
    let native = (req.backend == BackendChoice::Auto).then(|| {
        registry::native(Config {
            threads,
            cache_dir: place.dir().map(std::path::Path::to_path_buf),
            compiler: None,
            timeout,
        })
    });
    let weights = Weights::new(req.seed);
    let compile_start = Instant::now();
    let x = compile_model(&m, &weights, threads, native.as_ref(), &sources)?;
    let compile_ms = compile_start.elapsed().as_secs_f64() * 1e3;
    // What the native backend did for this model (models compared with compile later).
    let native_report = native
        .as_ref()
        .map(|n| (n.stats(), n.cache_dir(), n.version()));

    // Inputs: files by name, the rest drawn from the seed.
    for (name, _) in &given {
        if !x.inputs.iter().any(|i| &i.name == name) {
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
    let mw = weights.for_module(&m);
    let mut inputs = Vec::with_capacity(x.inputs.len());
    let mut input_sources = Vec::new();
    for (i, p) in x.inputs.iter().enumerate() {
        let t = match given.iter().find(|(n, _)| *n == p.name) {
            Some((_, file)) => {
                let bytes = crate::source::read_bytes(file).map_err(|e| {
                    usage(
                        diag::E0901,
                        format!("cannot read `{}`: {e}", file.display()),
                    )
                })?;
                let t = crate::exec::npy::read(&bytes).map_err(|e| {
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

    // Output files: check before running that none of them is an input.
    let out_files: Vec<PathBuf> = match &req.output_dir {
        Some(dir) => {
            let n = crate::exec::value::flat_shapes(&x.output_type).map_or(0, |s| s.len());
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

    // Runs. The outputs of a run that are not kept give their storage back to the executable
    // before the next run, as an executor with preallocated outputs would reuse them.
    for _ in 0..req.warmup {
        let (v, _) = run_once(&x, &inputs, &sources)?;
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
        let (v, p) = run_once(&x, &inputs, &sources)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        peak = peak.max(p);
        result = Some(v);
    }
    let value = result.unwrap_or(Value::Tuple(Vec::new()));
    let outputs: Vec<Arc<Tensor>> = value.flatten().into_iter().cloned().collect();
    let summaries: Vec<Summary> = outputs.iter().map(|t| compare::summarize(t)).collect();

    // Comparisons.
    let mut comparisons = Vec::new();
    let mut checks: Vec<(&PathBuf, &Module, bool)> =
        others.iter().map(|(p, o)| (p, o, false)).collect();
    if req.check_reference {
        checks.push((&req.model, &m, true));
    }
    for (path, other, oracle) in checks {
        let backend = if oracle { None } else { native.as_ref() };
        let y = compile_model(other, &weights, threads, backend, &sources)?;
        if y.inputs != x.inputs {
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
                show(&x)
            )));
        }
        let (v, _) = run_once(&y, &inputs, &sources)?;
        let theirs: Vec<&Arc<Tensor>> = v.flatten();
        if theirs.len() != outputs.len() {
            return Err(not_comparable(format!(
                "`{}` has {} outputs but `{}` has {}",
                path.display(),
                theirs.len(),
                req.model.display(),
                outputs.len()
            )));
        }
        let mut diffs = Vec::new();
        for (i, (a, b)) in outputs.iter().zip(&theirs).enumerate() {
            let (dr, da) = if oracle {
                reference_tolerance(a.dtype())
            } else {
                compare::default_tolerance(a.dtype())
            };
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

    // Output files.
    if let Some(dir) = &req.output_dir {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return Err(usage(
                diag::E0902,
                format!("cannot create `{}`: {e}", dir.display()),
            ));
        }
        for (t, path) in outputs.iter().zip(&out_files) {
            let bytes = crate::exec::npy::write(t).map_err(|e| {
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
    let differ: Vec<String> = comparisons
        .iter()
        .flat_map(|c| {
            c.diffs.iter().enumerate().filter(|(_, d)| !d.0.within()).map(move |(i, d)| {
                format!(
                    "output{i} of `{}` differs: {} element(s) beyond rtol {} and atol {} (largest absolute difference {})",
                    c.label(),
                    d.0.mismatched,
                    d.1,
                    d.2,
                    d.0.max_abs
                )
            })
        })
        .collect();
    if !differ.is_empty() {
        let mut ds = Diagnostics::new();
        for m in differ {
            ds.push(Diagnostic::error(diag::E2306, m));
        }
        report(&ds, &sources);
        return Ok(Outcome::InputErrors);
    }
    Ok(Outcome::Ok)
}

struct RunReport<'a> {
    req: &'a Request,
    /// The native backend's statistics, cache directory and version.
    native: Option<(Stats, Option<PathBuf>, String)>,
    /// Wall time of compiling the model (ms).
    compile_ms: f64,
    x: &'a Executable,
    input_sources: &'a [String],
    summaries: &'a [Summary],
    times: &'a [f64],
    peak: u64,
    comparisons: &'a [Comparison],
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn shape_text(s: &[usize]) -> String {
    let parts: Vec<String> = s.iter().map(|d| d.to_string()).collect();
    if parts.len() == 1 {
        format!("({},)", parts[0])
    } else {
        format!("({})", parts.join(", "))
    }
}

fn num(v: Option<f64>) -> String {
    match v {
        Some(x) => format!("{x:.6}"),
        None => "-".to_string(),
    }
}

fn json_num(v: f64) -> serde_json::Value {
    if v.is_finite() {
        serde_json::json!(v)
    } else {
        serde_json::json!(v.to_string())
    }
}

impl RunReport<'_> {
    fn backends(&self) -> BTreeMap<String, usize> {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for k in self.x.kernels() {
            *by.entry(k.backend.clone()).or_default() += 1;
        }
        by
    }

    fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "model    {}", self.req.model.display());
        let by: Vec<String> = self
            .backends()
            .iter()
            .map(|(b, n)| format!("{b} {n}"))
            .collect();
        let _ = writeln!(
            s,
            "kernels  {} ({}); {} thread(s); seed {}",
            self.x.kernels().len(),
            by.join(", "),
            self.x.threads,
            self.req.seed
        );
        if let Some((st, dir, version)) = &self.native {
            let _ = writeln!(
                s,
                "native   {} unit(s) compiled to {} distinct kernel(s): {} compiled in {} compiler run(s), {} from the cache; {} fell back; compilation {:.0} ms (C compiler {:.0} ms)",
                st.kernels,
                st.distinct,
                st.compiled,
                st.compiler_runs,
                st.cached,
                st.fallbacks,
                self.compile_ms,
                st.compile_seconds * 1e3
            );
            let _ = writeln!(
                s,
                "         {version}; cache {}",
                dir.as_ref()
                    .map_or("none".to_string(), |d| d.display().to_string())
            );
        }
        for (i, p) in self.x.inputs.iter().enumerate() {
            let _ = writeln!(
                s,
                "input    %{}: {} ({})",
                p.name, p.shape, self.input_sources[i]
            );
        }
        let rows: Vec<[String; 7]> = self
            .summaries
            .iter()
            .enumerate()
            .map(|(i, o)| {
                [
                    format!("output{i}"),
                    shape_text(&o.shape),
                    o.dtype.to_string(),
                    num(o.min),
                    num(o.max),
                    num(o.mean),
                    o.checksum.clone(),
                ]
            })
            .collect();
        let head = ["output", "shape", "dtype", "min", "max", "mean", "crc32"];
        let mut width = head.map(str::len);
        for r in &rows {
            for (w, c) in width.iter_mut().zip(r) {
                *w = (*w).max(c.len());
            }
        }
        let line = |cells: &[String]| {
            let mut l = String::new();
            for (i, (c, w)) in cells.iter().zip(width).enumerate() {
                if i > 0 {
                    l.push_str("  ");
                }
                let _ = write!(l, "{c:<w$}");
            }
            l.trim_end().to_string()
        };
        let _ = writeln!(s, "{}", line(&head.map(str::to_string)));
        for r in &rows {
            let _ = writeln!(s, "{}", line(r));
        }
        let (lo, hi) = self
            .times
            .iter()
            .fold((f64::INFINITY, 0f64), |(a, b), &t| (a.min(t), b.max(t)));
        let _ = writeln!(
            s,
            "latency  {:.3} ms median, {:.3} ms min, {:.3} ms max ({} run(s) after {} warm-up)",
            median(self.times),
            lo,
            hi,
            self.times.len(),
            self.req.warmup
        );
        let rss = peak_rss().map_or(String::new(), |r| format!("; process peak RSS {}", mib(r)));
        let _ = writeln!(
            s,
            "memory   peak {} of live tensors ({} of constants){rss}",
            mib(self.peak),
            mib(self.x.const_bytes)
        );
        for c in self.comparisons {
            for (i, (d, rtol, atol)) in c.diffs.iter().enumerate() {
                let verdict = if d.identical {
                    "identical".to_string()
                } else if d.within() {
                    format!(
                        "within tolerance (max abs {:.3e}, max rel {:.3e}; rtol {rtol}, atol {atol})",
                        d.max_abs, d.max_rel
                    )
                } else {
                    format!(
                        "DIFFERS: {} element(s) beyond rtol {rtol}, atol {atol} (max abs {:.3e}, max rel {:.3e})",
                        d.mismatched, d.max_abs, d.max_rel
                    )
                };
                let _ = writeln!(s, "compare  {} output{i}: {verdict}", c.label());
            }
        }
        s
    }

    fn json(&self) -> String {
        let inputs: Vec<serde_json::Value> = self
            .x
            .inputs
            .iter()
            .zip(self.input_sources)
            .map(|(p, src)| {
                serde_json::json!({
                    "name": p.name,
                    "shape": p.shape.dims,
                    "dtype": p.shape.dtype.to_string(),
                    "source": src,
                })
            })
            .collect();
        let outputs: Vec<serde_json::Value> = self
            .summaries
            .iter()
            .enumerate()
            .map(|(i, o)| {
                serde_json::json!({
                    "name": format!("output{i}"),
                    "shape": o.shape,
                    "dtype": o.dtype.to_string(),
                    "min": o.min,
                    "max": o.max,
                    "mean": o.mean,
                    "checksum": o.checksum,
                    "non_finite": o.non_finite,
                })
            })
            .collect();
        let (lo, hi) = self
            .times
            .iter()
            .fold((f64::INFINITY, 0f64), |(a, b), &t| (a.min(t), b.max(t)));
        let comparisons: Vec<serde_json::Value> = self
            .comparisons
            .iter()
            .map(|c| {
                let outs: Vec<serde_json::Value> = c
                    .diffs
                    .iter()
                    .enumerate()
                    .map(|(i, (d, rtol, atol))| {
                        serde_json::json!({
                            "name": format!("output{i}"),
                            "identical": d.identical,
                            "within_tolerance": d.within(),
                            "max_abs_diff": json_num(d.max_abs),
                            "max_rel_diff": json_num(d.max_rel),
                            "mismatched": d.mismatched,
                            "rtol": rtol,
                            "atol": atol,
                        })
                    })
                    .collect();
                serde_json::json!({
                    "model": c.model.display().to_string(),
                    "backend": if c.reference { "reference" } else { "same" },
                    "within_tolerance": c.diffs.iter().all(|d| d.0.within()),
                    "outputs": outs,
                })
            })
            .collect();
        let v = serde_json::json!({
            "model": self.req.model.display().to_string(),
            "seed": self.req.seed,
            "threads": self.x.threads,
            "kernels": {"total": self.x.kernels().len(), "by_backend": self.backends()},
            "native": self.native.as_ref().map(|(st, dir, version)| serde_json::json!({
                "units": st.kernels,
                "distinct": st.distinct,
                "compiled": st.compiled,
                "compiler_runs": st.compiler_runs,
                "cached": st.cached,
                "fallbacks": st.fallbacks,
                "compile_ms": self.compile_ms,
                "compiler_ms": st.compile_seconds * 1e3,
                "version": version,
                "cache_dir": dir.as_ref().map(|d| d.display().to_string()),
            })),
            "inputs": inputs,
            "outputs": outputs,
            "latency_ms": {
                "median": median(self.times),
                "min": lo,
                "max": hi,
                "runs": self.times.len(),
                "warmup": self.req.warmup,
            },
            "memory": {
                "peak_bytes": self.peak,
                "constant_bytes": self.x.const_bytes,
                "peak_rss_bytes": peak_rss(),
            },
            "comparisons": comparisons,
        });
        format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
    }
}
