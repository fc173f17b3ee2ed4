//! `collage._collage`: the native module of the Python package (`python/collage/`).
//!
//! A thin layer over the library's front door ([`collage::pipeline`]): `load` goes through
//! `pipeline::load`, `partition` through the same phases `collage partition` chains, `compile`
//! through `pipeline::execute` (the backends and executable of `collage run`), `bench` is
//! `collage bench` with its JSON report returned, `backends` the registry's probe. Work runs
//! with the GIL released and its diagnostics captured (`errors`); arrays cross in `convert`.
//! docs/python.md describes the API.

mod convert;
mod errors;

use collage::diag::{self, Diagnostic};
use collage::frontend::relay::print::PrintOptions;
use collage::ir::Module;
use collage::pipeline::{self, execute, load, measuring::MeasureArgs, Inputs, Outcome, Targets};
use collage::planning::cost;
use collage::planning::enumerate::Limits;
use collage::planning::partition;
use collage::runtime::backend::native::Native;
use collage::runtime::exec::data::Weights;
use collage::runtime::exec::executor::{self, Executable, MAX_THREADS};
use collage::runtime::exec::tensor::{Shape, Tensor};
use collage::runtime::exec::value::{flat_shapes, Value};
use collage::runtime::simplify::Options as SimplifyOptions;
use collage::source::SourceMap;
use convert::{dtype_name, Feed};
use errors::{held, raise, work, CollageError, CollageWarning};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyTuple};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// A model loaded and type-checked, with the sources its diagnostics point into.
struct Loaded {
    module: Module,
    sources: SourceMap,
    /// How diagnostics name it: the path as given, or the name of a model given as bytes.
    name: String,
    /// The file it was read from.
    path: Option<PathBuf>,
    /// How it was read.
    options: load::ModelOptions,
}

/// A model: what `collage.load` returns.
#[pyclass(frozen, module = "collage")]
struct Model {
    inner: Arc<Loaded>,
}

/// (name, shape, dtype) of each parameter of `@main`.
fn params_of(m: &Module) -> Vec<(String, Shape)> {
    let Some(main) = m.main() else {
        return Vec::new();
    };
    m.func(main)
        .params
        .iter()
        .filter_map(|p| {
            let v = m.var(*p);
            match m.ty(v.expr) {
                Some(collage::ir::Type::Tensor(t)) => Shape::of(t).map(|s| (v.name.to_string(), s)),
                _ => None,
            }
        })
        .collect()
}

/// The shape of each output of `@main`, tuples flattened.
fn outputs_of(m: &Module) -> Vec<Shape> {
    m.main()
        .and_then(|f| m.ty(m.func(f).body))
        .and_then(flat_shapes)
        .unwrap_or_default()
}

fn described<'py>(py: Python<'py>, name: &str, s: &Shape) -> PyResult<Bound<'py, PyTuple>> {
    let dims = PyTuple::new(py, &s.dims)?;
    PyTuple::new(
        py,
        [
            name.into_pyobject(py)?.into_any(),
            dims.into_any(),
            dtype_name(s.dtype).into_pyobject(py)?.into_any(),
        ],
    )
}

#[pymethods]
impl Model {
    /// How the model is named: the path as given, or the name of a model loaded from bytes.
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// The file the model was read from (`None` for a model loaded from bytes).
    #[getter]
    fn path(&self) -> Option<PathBuf> {
        self.inner.path.clone()
    }

    /// The inputs of the model, in order, as `(name, shape, dtype)`.
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        params_of(&self.inner.module)
            .iter()
            .map(|(n, s)| described(py, n, s))
            .collect()
    }

    /// The outputs of the model, in order, as `(name, shape, dtype)`: `output0`, `output1`, ...
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        outputs_of(&self.inner.module)
            .iter()
            .enumerate()
            .map(|(i, s)| described(py, &format!("output{i}"), s))
            .collect()
    }

    /// The model in Relay text, as `collage parse` prints it.
    fn to_relay(&self) -> String {
        collage::frontend::relay::print::print_module_with(
            &self.inner.module,
            PrintOptions::default(),
        )
    }

    fn __repr__(&self) -> String {
        format!(
            "<collage.Model {:?}: {} input(s), {} output(s)>",
            self.inner.name,
            params_of(&self.inner.module).len(),
            outputs_of(&self.inner.module).len()
        )
    }
}

/// A non-negative size from Python.
fn size_of(v: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    v.extract::<u64>().map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be a non-negative integer, not {}",
            v.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ))
    })
}

/// The loading options of `load` and `bench`: `input_shapes` and `dims` as the command line's
/// `--input-shape NAME=1x3x224x224` and `--dim SYMBOL=N` texts, `format` `"relay"` or `"onnx"`.
fn load_options(
    input_shapes: Option<&Bound<'_, PyDict>>,
    dims: Option<&Bound<'_, PyDict>>,
    format: Option<&str>,
) -> PyResult<load::ModelOptions> {
    let mut opts = load::ModelOptions::default();
    if let Some(f) = format {
        opts.format = Some(load::FrontEnd::parse(f).ok_or_else(|| {
            PyValueError::new_err(format!("format must be \"relay\" or \"onnx\", not {f:?}"))
        })?);
    }
    if let Some(d) = input_shapes {
        for (k, v) in d.iter() {
            let name: String = k.extract().map_err(|_| {
                PyTypeError::new_err("input_shapes: the keys must be input names (str)")
            })?;
            if v.is_instance_of::<pyo3::types::PyString>() {
                return Err(PyTypeError::new_err(format!(
                    "input_shapes[{name:?}] must be a sequence of sizes, not a string"
                )));
            }
            let items: Vec<Bound<'_, PyAny>> = v
                .try_iter()
                .map_err(|_| {
                    PyTypeError::new_err(format!(
                        "input_shapes[{name:?}] must be a sequence of sizes"
                    ))
                })?
                .collect::<PyResult<_>>()?;
            let shape = items
                .iter()
                .map(|x| size_of(x, &format!("a size in input_shapes[{name:?}]")))
                .collect::<PyResult<Vec<u64>>>()?;
            let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
            opts.input_shapes.push(format!("{name}={}", dims.join("x")));
        }
    }
    if let Some(d) = dims {
        for (k, v) in d.iter() {
            let name: String = k.extract().map_err(|_| {
                PyTypeError::new_err("dims: the keys must be dimension names (str)")
            })?;
            let n = size_of(&v, &format!("dims[{name:?}]"))?;
            opts.dims.push(format!("{name}={n}"));
        }
    }
    Ok(opts)
}

/// Loads a model from a file (a path: `str` or `os.PathLike`) or from memory (`bytes`,
/// `bytearray`): parsed and type-checked. `input_shapes` (`{"x": (1, 3, 224, 224)}`) and `dims`
/// (`{"batch": 1}`) give sizes to input dimensions a model leaves unknown; `base_dir` is the
/// folder that files a model in memory refers to are relative to; `name` names a model in memory
/// in diagnostics.
#[pyfunction]
#[pyo3(name = "load")]
#[pyo3(signature = (source, input_shapes=None, dims=None, base_dir=None, name=None, *, format=None))]
fn py_load(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    input_shapes: Option<&Bound<'_, PyDict>>,
    dims: Option<&Bound<'_, PyDict>>,
    base_dir: Option<PathBuf>,
    name: Option<String>,
    format: Option<&str>,
) -> PyResult<Model> {
    let opts = load_options(input_shapes, dims, format)?;
    let bytes: Option<Vec<u8>> = if let Ok(b) = source.cast::<PyBytes>() {
        Some(b.as_bytes().to_vec())
    } else if let Ok(b) = source.cast::<PyByteArray>() {
        Some(b.to_vec())
    } else {
        None
    };
    let loaded = match bytes {
        Some(bytes) => {
            let name = name.unwrap_or_else(|| "<bytes>".to_string());
            work(py, || {
                let mut sources = SourceMap::new();
                let origin = load::Origin::Bytes {
                    bytes: &bytes,
                    name: &name,
                    base_dir: base_dir.as_deref(),
                };
                let module = load::model_from(&mut sources, origin, &opts)?;
                load::main_of(&module, Path::new(&name))?;
                Ok(Loaded {
                    module,
                    sources,
                    name: name.clone(),
                    path: None,
                    options: opts.clone(),
                })
            })?
        }
        None => {
            let path: PathBuf = source.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "load() takes a path (str or os.PathLike) or the model's bytes, not {}",
                    source
                        .get_type()
                        .name()
                        .map_or_else(|_| "?".into(), |n| n.to_string())
                ))
            })?;
            if base_dir.is_some() {
                return Err(PyValueError::new_err(
                    "base_dir is for models loaded from bytes; a file's own folder is used for a path",
                ));
            }
            work(py, || {
                let mut sources = SourceMap::new();
                let module = load::model_from(&mut sources, load::Origin::File(&path), &opts)?;
                load::main_of(&module, &path)?;
                Ok(Loaded {
                    module,
                    sources,
                    name: path.display().to_string(),
                    path: Some(path.clone()),
                    options: opts.clone(),
                })
            })?
        }
    };
    Ok(Model {
        inner: Arc::new(loaded),
    })
}

/// A thread count: `None` for all cores, else 1 to 256.
fn threads_of(threads: Option<i64>) -> PyResult<Option<usize>> {
    match threads {
        None => Ok(None),
        Some(n) if (1..=MAX_THREADS as i64).contains(&n) => Ok(Some(n as usize)),
        Some(n) => Err(PyValueError::new_err(format!(
            "threads must be between 1 and {MAX_THREADS}, not {n}"
        ))),
    }
}

fn positive_seconds(what: &str, v: Option<f64>) -> PyResult<Option<f64>> {
    match v {
        Some(s) if !(s.is_finite() && s > 0.0) => Err(PyValueError::new_err(format!(
            "{what} must be a positive number of seconds, not {s}"
        ))),
        v => Ok(v),
    }
}

fn costs_of(costs: &str) -> PyResult<cost::Spec> {
    cost::Spec::parse(costs)
        .map_err(|e| PyValueError::new_err(format!("invalid costs {costs:?}: {e}")))
}

/// A plan: the partitions `collage.partition` chose for a model.
#[pyclass(frozen, module = "collage")]
struct Plan {
    model: Py<Model>,
    /// The partitioned program (Relay text, as `collage partition -o` writes it).
    relay: String,
    /// The `--format json` report.
    report: serde_json::Value,
}

/// A JSON value as Python objects (through the `json` module, so numbers read back exactly).
fn to_python<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(v).map_err(|e| PyValueError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

#[pymethods]
impl Plan {
    /// The model the plan partitions.
    #[getter]
    fn model(&self, py: Python<'_>) -> Py<Model> {
        self.model.clone_ref(py)
    }

    /// The partitions of `@main`: dicts with `name`, `target`, `compiler`, `device`, `cost`
    /// (seconds), `depth`, `lines`, `nodes` and `composites`, as in the report.
    #[getter]
    fn partitions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.report["functions"][0]["partitions"])
    }

    /// The estimated cost of the plan, in seconds.
    #[getter]
    fn total_cost(&self) -> Option<f64> {
        self.report["functions"][0]["total_cost"].as_f64()
    }

    /// The estimated cost of each baseline placement (`None`: no cover), by name.
    #[getter]
    fn baselines<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.report["functions"][0]["baselines"])
    }

    /// The report of `collage partition --format json`, as a dict.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.report)
    }

    /// The partitioned program in Relay text (what `collage partition -o OUT.relay` writes);
    /// `collage run` runs it.
    fn to_relay(&self) -> &str {
        &self.relay
    }

    fn __repr__(&self) -> String {
        let n = self.report["functions"][0]["partitions"]
            .as_array()
            .map_or(0, Vec::len);
        format!(
            "<collage.Plan of {:?}: {n} partition(s), total cost {} s>",
            self.model.get().inner.name,
            self.total_cost().unwrap_or(f64::NAN)
        )
    }
}

/// Partitions a model across the targets of the rules, as `collage partition` does.
#[pyfunction]
#[pyo3(name = "partition")]
#[pyo3(signature = (
    model, targets=None, rules=Vec::new(), costs="analytic", *, baselines=true, lower_bound=true,
    prune=false, threads=None, seed=0, cache_dir=None, measure_budget=None, cost_timeout=60.0,
    tvm_compat=false, simplify=true, warm_candidates=false
))]
#[allow(clippy::too_many_arguments)]
fn py_partition(
    py: Python<'_>,
    model: Py<Model>,
    targets: Option<Vec<String>>,
    rules: Vec<PathBuf>,
    costs: &str,
    baselines: bool,
    lower_bound: bool,
    prune: bool,
    threads: Option<i64>,
    seed: u64,
    cache_dir: Option<PathBuf>,
    measure_budget: Option<f64>,
    cost_timeout: f64,
    tvm_compat: bool,
    simplify: bool,
    warm_candidates: bool,
) -> PyResult<Plan> {
    let spec = costs_of(costs)?;
    let threads = threads_of(threads)?;
    let measure_budget = positive_seconds("measure_budget", measure_budget)?;
    let cost_timeout = positive_seconds("cost_timeout", Some(cost_timeout))?.unwrap_or(60.0);
    let targets = targets.unwrap_or_default();
    let loaded = model.get().inner.clone();
    let (relay, report) = work(py, || {
        let start = Instant::now();
        let margs = MeasureArgs {
            threads,
            cache_dir: cache_dir.clone(),
            cache: None,
            budget: measure_budget,
            seed,
            warm: warm_candidates,
            cold: false,
            raise_priority: false,
        };
        margs.check()?;
        let mut sources = loaded.sources.clone();
        let name = PathBuf::from(&loaded.name);
        let model_options = load::ModelOptions {
            simplify: simplify.then_some(SimplifyOptions { seed }),
            ..loaded.options.clone()
        };
        let inputs = Inputs {
            model: &name,
            model_options: &model_options,
            rules: &rules,
            targets: Targets::Named(&targets),
            costs: &spec,
            cmd_timeout: std::time::Duration::from_secs_f64(cost_timeout.min(1e6)),
            measure: &margs,
        };
        let prepared = pipeline::prepare_loaded(&mut sources, &inputs, loaded.module.clone())?;
        let (m, program) = (&prepared.model.module, &prepared.program);
        let g = pipeline::graph(m)?;
        let popts = partition::Options {
            limits: Limits::default(),
            search: collage::planning::search::Options { lower_bound },
            baselines,
            prune,
        };
        let silent = partition::Silent;
        let plan = pipeline::search(&sources, &prepared, &g, &popts, &silent)?;
        let print = PrintOptions {
            type_comments: true,
            tvm_compat,
        };
        let text = pipeline::finalize(&sources, m, &g, program, &plan, print, &silent)?;
        let elapsed = start.elapsed().as_secs_f64() * 1e3;
        let mut report =
            collage::driver::partition::report_json(m, &g, &sources, program, &plan, elapsed, &[]);
        if let Some(r) = &prepared.model.simplified {
            report["simplify"] = serde_json::to_value(r).unwrap_or_default();
        }
        if let Some(mm) = prepared.estimator.measurer.as_deref() {
            report["stats"]["measure"] = collage::driver::render::summary_json(mm);
        }
        Ok((text, report))
    })?;
    Ok(Plan {
        model,
        relay,
        report,
    })
}

/// A compiled model, ready to run: what `collage.compile` returns.
#[pyclass(frozen, module = "collage")]
struct Session {
    exe: Arc<Executable>,
    inputs: Vec<(String, Shape)>,
    outputs: Vec<Shape>,
    /// The native backend the kernels were compiled by (kept with them).
    _native: Option<Arc<Native>>,
}

/// What `compile` compiles: a model, or a plan's partitioned program.
fn compiled_source(py: Python<'_>, what: &Bound<'_, PyAny>) -> PyResult<Arc<Loaded>> {
    if let Ok(m) = what.cast::<Model>() {
        return Ok(m.get().inner.clone());
    }
    let Ok(plan) = what.cast::<Plan>() else {
        return Err(PyTypeError::new_err(format!(
            "compile() takes a collage.Model or a collage.Plan, not {}",
            what.get_type().name()?
        )));
    };
    let plan = plan.get();
    let name = format!("{} (partitioned)", plan.model.get().inner.name);
    let relay = plan.relay.clone();
    let loaded = work(py, move || {
        let mut sources = SourceMap::new();
        let origin = load::Origin::Bytes {
            bytes: relay.as_bytes(),
            name: &name,
            base_dir: None,
        };
        let options = load::ModelOptions {
            format: Some(load::FrontEnd::Relay),
            ..load::ModelOptions::default()
        };
        let module = load::model_from(&mut sources, origin, &options)?;
        Ok(Loaded {
            module,
            sources,
            name,
            path: None,
            options,
        })
    })?;
    Ok(Arc::new(loaded))
}

/// Compiles a model or a plan for running, as `collage run` does: each partition on its
/// target's backend (`backend="auto"`) or everything on the reference interpreter
/// (`backend="reference"`), with the weights drawn from `seed`.
#[pyfunction]
#[pyo3(name = "compile")]
#[pyo3(signature = (model, threads=None, *, backend="auto", seed=0, cache_dir=None, compile_timeout=None, simplify=true))]
#[allow(clippy::too_many_arguments)]
fn py_compile(
    py: Python<'_>,
    model: &Bound<'_, PyAny>,
    threads: Option<i64>,
    backend: &str,
    seed: u64,
    cache_dir: Option<PathBuf>,
    compile_timeout: Option<f64>,
    simplify: bool,
) -> PyResult<Session> {
    let choice = match backend {
        "auto" => execute::BackendChoice::Auto,
        "reference" => execute::BackendChoice::Reference,
        other => {
            return Err(PyValueError::new_err(format!(
                "backend must be \"auto\" or \"reference\", not {other:?}"
            )))
        }
    };
    let threads = threads_of(threads)?.unwrap_or_else(executor::default_threads);
    let compile_timeout = positive_seconds("compile_timeout", compile_timeout)?;
    let loaded = compiled_source(py, model)?;
    let (exe, native) = work(py, || {
        let opts = simplify.then_some(SimplifyOptions { seed });
        let (module, _) = load::simplified(loaded.module.clone(), opts.as_ref());
        pipeline::checks::memory(&[&module], None)?;
        let native =
            execute::native_backend(choice, threads, cache_dir.as_deref(), compile_timeout)?;
        let weights = Weights::new(seed);
        let exe =
            execute::compile_model(&module, &weights, threads, native.as_ref(), &loaded.sources)?;
        Ok((exe, native))
    })?;
    Ok(Session {
        inputs: exe
            .inputs
            .iter()
            .map(|i| (i.name.clone(), i.shape.clone()))
            .collect(),
        outputs: flat_shapes(&exe.output_type).unwrap_or_default(),
        exe: Arc::new(exe),
        _native: native,
    })
}

/// A shape as Python writes a tuple: `(1, 3, 224, 224)`, `(3,)`, `()`.
fn py_shape(dims: &[usize]) -> String {
    match dims {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            dims.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The tensors of a result, tuples flattened, owned.
fn flatten(v: Value) -> Vec<Arc<Tensor>> {
    let mut out = Vec::new();
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Tensor(t) => out.push(t),
            Value::Tuple(fields) => stack.extend(fields.into_iter().rev()),
        }
    }
    out
}

impl Session {
    /// The feeds as one tensor per input, in order: names, dtypes and shapes checked.
    fn tensors(&self, py: Python<'_>, feeds: &Bound<'_, PyAny>) -> PyResult<Vec<Arc<Tensor>>> {
        let Ok(feeds) = feeds.cast::<PyDict>() else {
            return Err(PyTypeError::new_err(format!(
                "run() takes a dict of input name to numpy.ndarray, not {}",
                feeds.get_type().name()?
            )));
        };
        let mut given: Vec<Option<Arc<Tensor>>> = vec![None; self.inputs.len()];
        for (k, v) in feeds.iter() {
            let name: String = k.extract().map_err(|_| {
                PyTypeError::new_err("run(): the keys of the feeds must be input names (str)")
            })?;
            let Some(i) = self.inputs.iter().position(|(n, _)| *n == name) else {
                let names: Vec<String> =
                    self.inputs.iter().map(|(n, _)| format!("`{n}`")).collect();
                let list = if names.is_empty() {
                    "it has none".to_string()
                } else {
                    format!("its inputs are {}", names.join(", "))
                };
                return Err(raise(
                    py,
                    Diagnostic::error(
                        diag::E2305,
                        format!("the model has no input `{name}`; {list}"),
                    ),
                ));
            };
            let want = &self.inputs[i].1;
            let feed = Feed::new(&name, &v)?;
            let mismatch = || {
                raise(
                    py,
                    Diagnostic::error(
                        diag::E2304,
                        format!(
                            "input `{name}` must be a {} array of shape {}, found a {} array of shape {}",
                            dtype_name(want.dtype),
                            py_shape(&want.dims),
                            feed.dtype_name(),
                            py_shape(feed.shape()),
                        ),
                    ),
                )
            };
            if !feed.is_of(want.dtype) || feed.shape() != want.dims.as_slice() {
                return Err(mismatch());
            }
            let t = feed.to_tensor(want).map_err(|_| mismatch())?;
            given[i] = Some(Arc::new(t));
        }
        let missing: Vec<String> = self
            .inputs
            .iter()
            .zip(&given)
            .filter(|(_, g)| g.is_none())
            .map(|((n, s), _)| format!("`{n}` ({} {})", dtype_name(s.dtype), py_shape(&s.dims)))
            .collect();
        if !missing.is_empty() {
            return Err(raise(
                py,
                Diagnostic::error(
                    diag::E3900,
                    format!("no value for input {}", missing.join(", ")),
                )
                .with_note("run() takes one array per input of the model (Session.inputs)"),
            ));
        }
        Ok(given.into_iter().flatten().collect())
    }
}

#[pymethods]
impl Session {
    /// The inputs the session takes, in order, as `(name, shape, dtype)`.
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.inputs
            .iter()
            .map(|(n, s)| described(py, n, s))
            .collect()
    }

    /// The outputs the session returns, in order, as `(name, shape, dtype)`.
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.outputs
            .iter()
            .enumerate()
            .map(|(i, s)| described(py, &format!("output{i}"), s))
            .collect()
    }

    /// The worker threads the session runs on.
    #[getter]
    fn threads(&self) -> usize {
        self.exe.threads
    }

    /// Runs the model on `feeds` (a dict of input name to numpy.ndarray, one per input, of the
    /// input's dtype and shape) and returns the outputs as a list of arrays. The GIL is released
    /// while the model runs; a session may run from several threads at once.
    fn run<'py>(&self, py: Python<'py>, feeds: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let inputs = self.tensors(py, feeds)?;
        let exe = self.exe.clone();
        let value = py
            .detach(move || exe.run(&inputs))
            .map_err(|d| raise(py, d))?;
        let list = PyList::empty(py);
        for t in flatten(value.value) {
            match convert::to_numpy(py, t)? {
                Ok(a) => list.append(a)?,
                Err(ty) => {
                    return Err(raise(
                        py,
                        Diagnostic::error(
                            diag::E3901,
                            format!("an output is of type `{ty}`, which NumPy has no type for"),
                        ),
                    ))
                }
            }
        }
        Ok(list)
    }

    /// Runs the model `repeat` times on `feeds` in a loop inside collage (the feeds converted
    /// once, the outputs dropped) and returns the mean seconds per run: beside a Python loop of
    /// `run`, it measures what calling from Python costs.
    #[pyo3(signature = (feeds, repeat=100))]
    fn time_native(
        &self,
        py: Python<'_>,
        feeds: &Bound<'_, PyAny>,
        repeat: usize,
    ) -> PyResult<f64> {
        if repeat == 0 {
            return Err(PyValueError::new_err("repeat must be at least 1"));
        }
        let inputs = self.tensors(py, feeds)?;
        let exe = self.exe.clone();
        let r = py.detach(move || {
            let start = Instant::now();
            for _ in 0..repeat {
                let out = exe.run(&inputs)?;
                drop(out);
            }
            Ok::<f64, Diagnostic>(start.elapsed().as_secs_f64() / repeat as f64)
        });
        r.map_err(|d| raise(py, d))
    }

    fn __repr__(&self) -> String {
        format!(
            "<collage.Session: {} input(s), {} output(s), {} thread(s)>",
            self.inputs.len(),
            self.outputs.len(),
            self.exe.threads
        )
    }
}

/// Partitions a model with measured costs, then runs the Collage plan and every baseline
/// placement end to end on this machine, as `collage bench` does, and returns its JSON report.
#[pyfunction]
#[pyo3(name = "bench")]
#[pyo3(signature = (
    model, targets=None, rules=Vec::new(), costs="measure", *, threads=None, seed=0,
    cache_dir=None, measure_budget=None, run_budget=None, rtol=None, atol=None, cost_timeout=60.0,
    input_shapes=None, dims=None, format=None, simplify=true, warm_candidates=false
))]
#[allow(clippy::too_many_arguments)]
fn py_bench<'py>(
    py: Python<'py>,
    model: &Bound<'py, PyAny>,
    targets: Option<Vec<String>>,
    rules: Vec<PathBuf>,
    costs: &str,
    threads: Option<i64>,
    seed: u64,
    cache_dir: Option<PathBuf>,
    measure_budget: Option<f64>,
    run_budget: Option<f64>,
    rtol: Option<f64>,
    atol: Option<f64>,
    cost_timeout: f64,
    input_shapes: Option<&Bound<'py, PyDict>>,
    dims: Option<&Bound<'py, PyDict>>,
    format: Option<&str>,
    simplify: bool,
    warm_candidates: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let given = load_options(input_shapes, dims, format)?;
    let (path, model_options): (PathBuf, load::ModelOptions) = if let Ok(m) = model.cast::<Model>()
    {
        let inner = &m.get().inner;
        if given != load::ModelOptions::default() {
            return Err(PyValueError::new_err(
                "bench() reads a collage.Model as it was loaded: give input_shapes, dims and \
                     format to load(), or a path to bench()",
            ));
        }
        let path = inner.path.clone().ok_or_else(|| {
            PyValueError::new_err(
                "bench() needs a model read from a file; this one was loaded from bytes",
            )
        })?;
        (path, inner.options.clone())
    } else {
        let path = model.extract().map_err(|_| {
            PyTypeError::new_err("bench() takes a collage.Model or a path (str or os.PathLike)")
        })?;
        (path, given)
    };
    for (what, v) in [("rtol", rtol), ("atol", atol)] {
        if v.is_some_and(|t| !(t.is_finite() && t >= 0.0)) {
            return Err(PyValueError::new_err(format!(
                "{what} must be a non-negative number"
            )));
        }
    }
    let req = collage::driver::bench::Request {
        model: path,
        model_options: load::ModelOptions {
            simplify: simplify.then_some(SimplifyOptions { seed }),
            ..model_options
        },
        rules,
        targets: targets.unwrap_or_default(),
        costs: costs_of(costs)?,
        cmd_timeout: std::time::Duration::from_secs_f64(
            positive_seconds("cost_timeout", Some(cost_timeout))?
                .unwrap_or(60.0)
                .min(1e6),
        ),
        limits: Limits::default(),
        measure: MeasureArgs {
            threads: threads_of(threads)?,
            cache_dir,
            cache: None,
            budget: positive_seconds("measure_budget", measure_budget)?,
            seed,
            warm: warm_candidates,
            cold: false,
            raise_priority: false,
        },
        run_budget: positive_seconds("run_budget", run_budget)?,
        format: collage::driver::render::Format::Json,
        plot: None,
        processes: 1,
        profile: false,
        rtol,
        atol,
        progress: false,
        max_memory: None,
        // As the command's default: ONNX Runtime beside the placements for an ONNX model.
        onnxruntime: collage::pipeline::onnxruntime::When::Auto,
    };
    let (json, _) = work(py, || collage::driver::bench::bench_json(&req))?;
    to_python(py, &json)
}

/// The backends of this machine: dicts with `name`, `what`, `available`, `path`, `version` and
/// `error`, as `collage backends --format json` lists them.
#[pyfunction]
#[pyo3(name = "backends")]
fn py_backends(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let rows = held(py, || {
        Ok::<_, Outcome>(collage::runtime::backend::registry::probe_all())
    })?;
    to_python(py, &collage::driver::backends::json(&rows)["backends"])
}

#[pymodule]
fn _collage(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("CollageError", py.get_type::<CollageError>())?;
    m.add("CollageWarning", py.get_type::<CollageWarning>())?;
    m.add_class::<Model>()?;
    m.add_class::<Plan>()?;
    m.add_class::<Session>()?;
    m.add_function(wrap_pyfunction!(py_load, m)?)?;
    m.add_function(wrap_pyfunction!(py_partition, m)?)?;
    m.add_function(wrap_pyfunction!(py_compile, m)?)?;
    m.add_function(wrap_pyfunction!(py_bench, m)?)?;
    m.add_function(wrap_pyfunction!(py_backends, m)?)?;
    Ok(())
}
