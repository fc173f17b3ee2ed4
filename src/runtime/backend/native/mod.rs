//! Native code generation: the CPU target's partitions compiled to machine code.
//!
//! A unit (a FuseOps group of `@main`, a `Primitive=1` function, a native candidate) becomes one
//! C function:
//!
//! 1. [`graph`] turns the unit into primitive tensor nodes (composite operators decomposed);
//! 2. [`emit`] plans which nodes are materialized and writes one loop nest per materialized
//!    node, fusing elementwise and injective operators into their readers and epilogues into
//!    the anchors (GEMMs, convolutions, reductions, pooling), with [`index`] simplifying the
//!    coordinate arithmetic;
//! 3. [`compile`] runs the system C compiler (`$CC` or `cc`, [`compile::FLAGS`]) on
//!    translation units of several kernels, several compilers in parallel;
//! 4. [`cache`] keeps the libraries on disk, keyed by the kernel's source, the compiler and the
//!    flags; the libraries are loaded with `libloading` and never unloaded.
//!
//! Anything the generator does not support, and any failure of the compiler (missing, failing,
//! timing out), is reported as [`Unsupported`]: the executor warns (W2310, naming the unit and
//! the reason) and runs that unit on the reference interpreter.
//!
//! **Threads.** Kernels run their large loop nests on libgomp's persistent pool with
//! `num_threads(nt)`, `nt` being the backend's thread count (`--threads`); small nests stay on
//! the calling thread. Debian's oneDNN uses the same OpenMP runtime, so every CPU backend
//! shares one pool.
//!
//! **Numerics.** Kernels are compiled with IEEE semantics ([`compile::FLAGS`]: no
//! `-ffast-math`, so no reciprocal approximations, no finite-math or no-signed-zeros
//! assumptions, and no change of the process's floating-point environment). A single IEEE
//! operation (`/`, `floor`, `ceil`, `round`, casts, comparisons, `maximum`/`minimum`, `clip`)
//! gives the interpreter's bits, infinities, NaN (which `maximum`, `minimum` and max/min
//! reductions propagate as the interpreter does), signed zeros and denormals included.
//! Results of several operations may still differ in the last bits: kernels compute in
//! `float32` (`float16` and `bfloat16` are converted when loaded and rounded when stored into a
//! tensor, not after every operator as the interpreter does), `a * b + c` may be one fused
//! multiply-add, sums are split into vector lanes (`#pragma omp simd reduction`, the only
//! reassociation), and `exp`, `log`, `erf`, `tanh`, `power` in vectorised loops come from glibc's
//! vector math (within 4 ulps of the interpreter's). `COLLAGE_NATIVE_FLAGS=fast-math` selects the
//! previous `-ffast-math` flags, for measurements ([`compile::FlagSet`]).

pub mod cache;
pub mod compile;
pub(crate) mod emit;
pub(crate) mod graph;
pub mod grouping;
pub(crate) mod index;

use crate::runtime::exec::kernel::{
    Backend, ConstantSource, Kernel, Prepared, RunCx, RunError, Unit, Unsupported,
};
use crate::runtime::exec::tensor::{self, elem_size, Storage, Tensor};
use cache::Cache;
use compile::Compiler;
use emit::prelude::{prelude, Feature, Isa};
use libloading::Library;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The backend's name.
pub const NAME: &str = "native";

type RunFn = unsafe extern "C" fn(
    *const *mut c_void,
    *const *mut c_void,
    *const *mut c_void,
    *mut u8,
    i32,
) -> i32;
type PackFn = unsafe extern "C" fn(*const *mut c_void, *mut f32, i32);
/// Loaded kernels (or why not), by key.
type Results = Vec<(String, Result<Arc<Code>, String>)>;

/// How the backend compiles.
#[derive(Clone, Debug)]
pub struct Config {
    /// Threads of the OpenMP pool the kernels use.
    pub threads: usize,
    /// The cache directory (`None`: [`cache::default_dir`]; kernels are compiled into a
    /// temporary directory when there is none or it cannot be created).
    pub cache_dir: Option<PathBuf>,
    /// The temporary directory `cache_dir` lies in when one replaced an unusable cache
    /// directory: held, so that it stays, as long as the backend lives.
    pub temp_dir: Option<Arc<tempfile::TempDir>>,
    /// The compiler command (`None`: `$CC` or `cc`).
    pub compiler: Option<Vec<String>>,
    /// The time limit of one compiler run.
    pub timeout: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            threads: crate::runtime::exec::executor::default_threads(),
            cache_dir: None,
            temp_dir: None,
            compiler: None,
            timeout: compile::DEFAULT_TIMEOUT,
        }
    }
}

/// What the backend did, for reports and tests.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Units compiled into kernels (`compile` calls that succeeded).
    pub kernels: usize,
    /// Distinct kernels (by key) loaded.
    pub distinct: usize,
    /// Kernels compiled by the C compiler in this process.
    pub compiled: usize,
    /// Kernels found in the cache on disk.
    pub cached: usize,
    /// Compiler runs (successful or not).
    pub compiler_runs: usize,
    /// Wall time spent compiling (seconds).
    pub compile_seconds: f64,
    /// Units that fell back (unsupported, or the compiler failed).
    pub fallbacks: usize,
}

/// A loaded kernel: its entry points.
struct Code {
    run: RunFn,
    packs: Vec<PackFn>,
    /// Keeps the library mapped.
    _lib: Arc<Library>,
}

/// A generated, not yet loaded kernel.
#[derive(Clone)]
struct Pending {
    key: String,
    /// The kernel's functions with the symbol substituted.
    body: String,
    /// The prelude parts it needs.
    features: BTreeSet<Feature>,
    n_packs: usize,
}

/// The native backend.
pub struct Native {
    cfg: Config,
    isa: Isa,
    compiler: OnceLock<Result<Compiler, String>>,
    cache: OnceLock<Result<Cache, String>>,
    temp: OnceLock<Option<tempfile::TempDir>>,
    /// Loaded (or failed) kernels by key.
    loaded: Mutex<HashMap<String, Result<Arc<Code>, String>>>,
    /// Serialises compilations.
    building: Mutex<()>,
    stats: Mutex<Stats>,
    compiler_runs: AtomicUsize,
}

/// Libraries loaded by this process, by the SHA-256 of their bytes (never unloaded: kernels
/// may be running on the OpenMP pool's threads, and loading the same library twice would map
/// it twice).
fn libraries() -> &'static Mutex<BTreeMap<String, Arc<Library>>> {
    static L: OnceLock<Mutex<BTreeMap<String, Arc<Library>>>> = OnceLock::new();
    L.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Loads a library whose bytes were verified, from a private copy of those very bytes
/// ([`Cache::private_copy`]): what runs is what was hashed.
/// The library loaded in this process whose bytes hash to `sha256`, if any.
fn loaded_library(sha256: &str) -> Option<Arc<Library>> {
    let libs = libraries().lock().unwrap_or_else(|p| p.into_inner());
    libs.get(sha256).cloned()
}

fn load_verified(cache: &Cache, v: &cache::Verified) -> Result<Arc<Library>, String> {
    let mut libs = libraries().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(l) = libs.get(&v.sha256) {
        return Ok(l.clone());
    }
    let copy = cache
        .private_copy(v)
        .map_err(|e| format!("cannot write a private copy of a kernel library: {e}"))?;
    // SAFETY: the bytes are those of a library this backend compiled from generated C without
    // constructors (their hash was recorded when it was written and checked now); loading it
    // runs nothing.
    let lib = unsafe { Library::new(copy.path()) }
        .map_err(|e| format!("cannot load `{}`: {e}", copy.path().display()))?;
    drop(copy);
    let lib = Arc::new(lib);
    libs.insert(v.sha256.clone(), lib.clone());
    Ok(lib)
}

fn symbols(lib: &Arc<Library>, symbol: &str, n_packs: usize) -> Result<Code, String> {
    // SAFETY: the symbols are the generated functions with exactly these signatures.
    unsafe {
        let run = *lib
            .get::<RunFn>(symbol)
            .map_err(|e| format!("symbol `{symbol}`: {e}"))?;
        let mut packs = Vec::with_capacity(n_packs);
        for j in 0..n_packs {
            let name = format!("{symbol}_pack{j}");
            packs.push(
                *lib.get::<PackFn>(name.as_str())
                    .map_err(|e| format!("symbol `{name}`: {e}"))?,
            );
        }
        Ok(Code {
            run,
            packs,
            _lib: lib.clone(),
        })
    }
}

impl Native {
    /// A backend with this configuration.
    pub fn new(cfg: Config) -> Native {
        Native {
            cfg,
            isa: Isa::detect(),
            compiler: OnceLock::new(),
            cache: OnceLock::new(),
            temp: OnceLock::new(),
            loaded: Mutex::new(HashMap::new()),
            building: Mutex::new(()),
            stats: Mutex::new(Stats::default()),
            compiler_runs: AtomicUsize::new(0),
        }
    }

    /// What the backend did so far.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone();
        s.compiler_runs = self.compiler_runs.load(Ordering::Relaxed);
        s
    }

    /// The compiler, probed once.
    pub fn compiler(&self) -> Result<&Compiler, String> {
        self.compiler
            .get_or_init(|| {
                let cmd = self
                    .cfg
                    .compiler
                    .clone()
                    .unwrap_or_else(compile::command_from_env);
                Compiler::probe(cmd, self.cfg.timeout.min(Duration::from_secs(30)))
            })
            .as_ref()
            .map_err(|e| e.clone())
    }

    /// The kernel cache (the configured or default directory, else a temporary one when it
    /// cannot be used; an error when it is refused as untrusted).
    fn cache(&self) -> Result<&Cache, String> {
        self.cache
            .get_or_init(|| {
                let dir = self.cfg.cache_dir.clone().or_else(cache::default_dir);
                if let Some(d) = dir {
                    match Cache::open(&d) {
                        Ok(c) => return Ok(c),
                        // Code is never loaded from a directory others may have written.
                        Err(cache::DirError::Untrusted(m)) => {
                            return Err(format!("the kernel cache is refused: {m}"))
                        }
                        // The drivers warn about an unusable directory (W2411) before this.
                        Err(cache::DirError::Unusable(_)) => {}
                    }
                }
                let t = self
                    .temp
                    .get_or_init(|| tempfile::tempdir().ok())
                    .as_ref()
                    .ok_or_else(|| "no cache directory can be created".to_string())?;
                Cache::open(t.path()).map_err(|e| format!("cannot create a kernel cache: {e}"))
            })
            .as_ref()
            .map_err(|e| e.clone())
    }

    /// The directory kernels are cached in.
    pub fn cache_dir(&self) -> Option<PathBuf> {
        self.cache().ok().map(|c| c.dir().to_path_buf())
    }

    /// Builds the kernel text of a unit.
    fn generate(
        &self,
        unit: &Unit<'_>,
        consts: &dyn ConstantSource,
    ) -> Result<(Pending, graph::KGraph, emit::Generated), Unsupported> {
        let g = graph::build(unit, consts)?;
        let span = unit_span(unit);
        let gen = emit::generate(&g, self.isa)
            .map_err(|m| Unsupported::op(format!("native code generation failed: {m}"), span))?;
        let compiler = self.compiler().map_err(|m| Unsupported::op(m, span))?;
        let source = format!("{}{}", prelude(self.isa, &gen.features), gen.body);
        let flags = format!(
            "{} {}",
            compiler.flags.flags().join(" "),
            compile::LIBS.join(" ")
        );
        let key = cache::hash128(&[
            cache::GENERATOR.as_bytes(),
            compiler.identity.as_bytes(),
            flags.as_bytes(),
            source.as_bytes(),
        ]);
        let symbol = format!("ck_{key}");
        let body = gen.body.replace(emit::SYM, &symbol);
        Ok((
            Pending {
                key,
                body,
                features: gen.features.clone(),
                n_packs: gen.packs.len(),
            },
            g,
            gen,
        ))
    }

    /// Loads (from the cache) or compiles every kernel not loaded yet.
    fn ensure(&self, pending: Vec<Pending>) {
        let _guard = self.building.lock().unwrap_or_else(|p| p.into_inner());
        let mut todo: BTreeMap<String, Pending> = BTreeMap::new();
        {
            let loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
            for p in pending {
                if !loaded.contains_key(&p.key) {
                    todo.insert(p.key.clone(), p);
                }
            }
        }
        if todo.is_empty() {
            return;
        }
        let cache = match self.cache() {
            Ok(c) => c,
            Err(e) => {
                let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
                for k in todo.keys() {
                    loaded.insert(k.clone(), Err(e.clone()));
                }
                return;
            }
        };
        // The cache on disk.
        let mut results: Results = Vec::new();
        let mut missing: Vec<Pending> = Vec::new();
        for (k, p) in todo {
            // Only an entry with a recorded hash whose library's bytes hash to it is loaded;
            // anything else (unverified, damaged, not loading) is compiled again.
            let hit = match cache.entry(&k) {
                // A library with the recorded hash already loaded holds bytes that were
                // verified when it was loaded: no need to read and hash the file again (a
                // batch's kernels share one library).
                cache::Lookup::Found(e) => match loaded_library(&e.sha256) {
                    Some(lib) => symbols(&lib, &e.symbol, p.n_packs).ok(),
                    None => cache.verify(&e).ok().and_then(|v| {
                        let lib = load_verified(cache, &v).ok()?;
                        symbols(&lib, &e.symbol, p.n_packs).ok()
                    }),
                },
                cache::Lookup::Missing | cache::Lookup::Unverified => None,
            };
            match hit {
                Some(code) => {
                    self.stats.lock().unwrap_or_else(|x| x.into_inner()).cached += 1;
                    results.push((k, Ok(Arc::new(code))));
                }
                None => {
                    cache.forget(&k);
                    missing.push(p);
                }
            }
        }
        if !missing.is_empty() {
            let start = Instant::now();
            let n = missing.len();
            results.extend(self.compile_all(cache, missing));
            let mut st = self.stats.lock().unwrap_or_else(|x| x.into_inner());
            st.compile_seconds += start.elapsed().as_secs_f64();
            let _ = n;
        }
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = self.stats.lock().unwrap_or_else(|x| x.into_inner());
        for (k, r) in results {
            if r.is_ok() {
                st.distinct += 1;
            }
            loaded.insert(k, r);
        }
    }

    /// Compiles kernels in batches, several compilers at once.
    fn compile_all(&self, cache: &Cache, missing: Vec<Pending>) -> Results {
        let compiler = match self.compiler() {
            Ok(c) => c.clone(),
            Err(e) => {
                return missing
                    .into_iter()
                    .map(|p| (p.key, Err(e.clone())))
                    .collect()
            }
        };
        let cores = crate::runtime::exec::executor::default_threads().max(1);
        let nb = missing.len().min(2 * cores).max(1);
        let mut batches: Vec<Vec<Pending>> = vec![Vec::new(); nb];
        // Balance by text size, largest first.
        let mut order = missing;
        order.sort_by(|a, b| b.body.len().cmp(&a.body.len()).then(a.key.cmp(&b.key)));
        let mut sizes = vec![0usize; nb];
        for p in order {
            let i = (0..nb).min_by_key(|&i| (sizes[i], i)).unwrap_or(0);
            sizes[i] += p.body.len() + 2000;
            batches[i].push(p);
        }
        batches.retain(|b| !b.is_empty());
        let next = AtomicUsize::new(0);
        let out: Mutex<Results> = Mutex::new(Vec::new());
        let workers = cores.min(batches.len());
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(batch) = batches.get(i) else { break };
                    let r = self.compile_batch(&compiler, cache, batch);
                    out.lock().unwrap_or_else(|p| p.into_inner()).extend(r);
                });
            }
        });
        let mut v = out.into_inner().unwrap_or_else(|p| p.into_inner());
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Compiles one batch; when it fails for a reason other than the compiler being unusable,
    /// each kernel is compiled alone so that one bad kernel does not take the others down.
    fn compile_batch(&self, compiler: &Compiler, cache: &Cache, batch: &[Pending]) -> Results {
        match self.build(compiler, cache, batch) {
            Ok(codes) => batch
                .iter()
                .map(|p| p.key.clone())
                .zip(codes.into_iter().map(Ok))
                .collect(),
            Err((_, retry)) if retry && batch.len() > 1 => batch
                .iter()
                .map(|p| {
                    let r = self
                        .build(compiler, cache, std::slice::from_ref(p))
                        .map(|mut c| c.remove(0))
                        .map_err(|(e, _)| e);
                    (p.key.clone(), r)
                })
                .collect(),
            Err((e, _)) => batch
                .iter()
                .map(|p| (p.key.clone(), Err(e.clone())))
                .collect(),
        }
    }

    /// Compiles, installs and loads one translation unit. The error says whether compiling
    /// the kernels one by one may help (not after a timeout or when the compiler cannot run).
    fn build(
        &self,
        compiler: &Compiler,
        cache: &Cache,
        batch: &[Pending],
    ) -> Result<Vec<Arc<Code>>, (String, bool)> {
        let mut features = BTreeSet::new();
        for p in batch {
            features.extend(p.features.iter().copied());
        }
        let mut source = prelude(self.isa, &features);
        for p in batch {
            source.push('\n');
            source.push_str(&p.body);
        }
        let keys: Vec<&[u8]> = batch.iter().map(|p| p.key.as_bytes()).collect();
        let bkey = cache::hash128(&keys);
        let dir = cache
            .scratch()
            .map_err(|e| (format!("cannot create a build directory: {e}"), false))?;
        let src = dir.path().join("kernels.c");
        std::fs::write(&src, &source)
            .map_err(|e| (format!("cannot write `{}`: {e}", src.display()), false))?;
        let so = dir.path().join("kernels.so");
        self.compiler_runs.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = compiler.compile(&src, &so, self.cfg.timeout) {
            let retry = !(e.contains("timed out") || e.contains("cannot be started"));
            return Err((e, retry));
        }
        let (lib_path, verified) = cache
            .install(&bkey, &so, &source)
            .map_err(|e| (format!("cannot store a compiled kernel: {e}"), false))?;
        let lib = load_verified(cache, &verified).map_err(|e| (e, false))?;
        let mut codes = Vec::with_capacity(batch.len());
        for p in batch {
            let sym = format!("ck_{}", p.key);
            let code = symbols(&lib, &sym, p.n_packs).map_err(|e| (e, false))?;
            let _ = cache.record(&p.key, &lib_path, &sym, &verified.sha256);
            codes.push(Arc::new(code));
        }
        self.stats
            .lock()
            .unwrap_or_else(|x| x.into_inner())
            .compiled += batch.len();
        Ok(codes)
    }

    fn note_fallback(&self) {
        self.stats
            .lock()
            .unwrap_or_else(|x| x.into_inner())
            .fallbacks += 1;
    }
}

fn unit_span(unit: &Unit<'_>) -> Option<crate::source::Span> {
    match *unit {
        Unit::Function { module, func } => Some(module.func(func).span),
        Unit::Group { module, group } => group.members.last().map(|&e| module.span(e)),
    }
}

impl Backend for Native {
    fn name(&self) -> &str {
        NAME
    }

    fn version(&self) -> String {
        match self.compiler() {
            Ok(c) => format!(
                "{} ({}; {})",
                cache::GENERATOR,
                c.version,
                c.flags.flags().join(" ")
            ),
            Err(_) => format!("{} (no C compiler)", cache::GENERATOR),
        }
    }

    fn handles(&self, compiler: Option<&str>) -> bool {
        compiler.is_none()
    }

    fn precompile(&self, units: &[Unit<'_>], consts: &dyn ConstantSource) {
        let pending: Vec<Pending> = units
            .iter()
            .filter_map(|u| self.generate(u, consts).ok().map(|(p, _, _)| p))
            .collect();
        self.ensure(pending);
    }

    fn compile(
        &self,
        unit: &Unit<'_>,
        consts: &dyn ConstantSource,
    ) -> Result<Arc<dyn Kernel>, Unsupported> {
        let (p, g, gen) = match self.generate(unit, consts) {
            Ok(x) => x,
            Err(u) => {
                self.note_fallback();
                return Err(u);
            }
        };
        let key = p.key.clone();
        self.ensure(vec![p]);
        let code = {
            let loaded = self.loaded.lock().unwrap_or_else(|x| x.into_inner());
            loaded.get(&key).cloned()
        };
        let code = match code {
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                self.note_fallback();
                return Err(Unsupported::op(e, unit_span(unit)));
            }
            None => {
                self.note_fallback();
                return Err(Unsupported::op(
                    "internal error: a kernel was not compiled",
                    unit_span(unit),
                ));
            }
        };
        self.stats.lock().unwrap_or_else(|x| x.into_inner()).kernels += 1;
        // Flattened input counts per unit input.
        let m = unit.module();
        let arity: Vec<usize> = unit
            .input_exprs()
            .iter()
            .map(|&e| {
                m.ty(e)
                    .and_then(crate::runtime::exec::value::flat_shapes)
                    .map_or(1, |s| s.len())
            })
            .collect();
        let out_bytes = g
            .outputs
            .iter()
            .map(|&o| {
                let n = &g.nodes[o];
                (n.dtype, n.dims.clone())
            })
            .collect();
        Ok(Arc::new(NativeKernel {
            code,
            view_of: view_source(&g),
            args: g.args.clone(),
            n_inputs: g.n_inputs,
            arity,
            outputs: out_bytes,
            packs: gen.packs.clone(),
            scratch: gen.scratch,
            per_thread: gen.scratch_per_thread,
            threads: self.cfg.threads.max(1),
        }))
    }
}

/// The kernel argument whose data the graph's one output is under another shape (a chain of
/// reshapes of an input of the unit, same element type), if that is all the graph does.
fn view_source(g: &graph::KGraph) -> Option<usize> {
    let [o] = g.outputs[..] else { return None };
    let mut n = o;
    loop {
        match g.nodes[n].op {
            graph::NOp::Reshape(a) => n = a,
            graph::NOp::Arg(i) if i < g.n_inputs && g.nodes[n].dtype == g.nodes[o].dtype => {
                return Some(i)
            }
            _ => return None,
        }
    }
}

/// A compiled unit.
struct NativeKernel {
    code: Arc<Code>,
    /// The argument the output is a view of ([`view_source`]).
    view_of: Option<usize>,
    args: Vec<graph::ArgInfo>,
    n_inputs: usize,
    /// Flattened tensors per unit input.
    arity: Vec<usize>,
    outputs: Vec<(crate::ir::DType, Vec<usize>)>,
    packs: Vec<emit::Pack>,
    scratch: usize,
    per_thread: usize,
    threads: usize,
}

/// A zeroed buffer of at least `bytes` bytes on a cache line (tensor storage).
struct Aligned(Storage);

impl Aligned {
    fn new(bytes: usize) -> Aligned {
        Aligned(
            Storage::zeroed(bytes.div_ceil(tensor::ALIGN)).unwrap_or_else(|e| panic!("{}", e.0)),
        )
    }
    fn ptr(&mut self) -> *mut u8 {
        self.0.as_bytes_mut().as_mut_ptr()
    }
}

impl Kernel for NativeKernel {
    fn prepare(&self, consts: &[Option<Arc<Tensor>>]) -> Result<Box<dyn Prepared>, Unsupported> {
        let mut fixed: Vec<Option<Arc<Tensor>>> = vec![None; self.args.len()];
        let mut pos = 0;
        for (i, &n) in self.arity.iter().enumerate() {
            if let Some(Some(t)) = consts.get(i) {
                if n != 1 {
                    return Err(Unsupported::construct(
                        "internal error: a constant tuple input",
                        None,
                    ));
                }
                fixed[pos] = Some(t.clone());
            }
            pos += n;
        }
        if pos != self.n_inputs {
            return Err(Unsupported::construct(
                "internal error: kernel inputs do not match the unit",
                None,
            ));
        }
        for (i, a) in self.args.iter().enumerate().skip(self.n_inputs) {
            fixed[i] = a.inner.clone();
        }
        for (i, t) in fixed.iter().enumerate() {
            if let Some(t) = t {
                check(t, &self.args[i].shape).map_err(|m| Unsupported::construct(m, None))?;
            }
        }
        // Packs whose arguments are all constant here are computed now.
        let mut packed: Vec<Option<Aligned>> = Vec::with_capacity(self.packs.len());
        for (j, p) in self.packs.iter().enumerate() {
            if p.args.iter().all(|&i| fixed[i].is_some()) {
                let ptrs: Vec<*mut c_void> = fixed
                    .iter()
                    .map(|t| {
                        t.as_ref()
                            .map_or(std::ptr::null_mut(), |t| t.bytes().as_ptr() as *mut c_void)
                    })
                    .collect();
                let mut buf = Aligned::new(p.bytes);
                // SAFETY: the pack function reads the arguments it lists, all given, and writes
                // `p.bytes` bytes.
                unsafe {
                    (self.code.packs[j])(ptrs.as_ptr(), buf.ptr() as *mut f32, self.threads as i32)
                };
                packed.push(Some(buf));
            } else {
                packed.push(None);
            }
        }
        let per_call: usize = self
            .packs
            .iter()
            .zip(&packed)
            .filter(|(_, b)| b.is_none())
            .map(|(p, _)| p.bytes.next_multiple_of(64))
            .sum();
        let scratch = self.scratch + self.per_thread * self.threads + per_call;
        // A view of a non-constant argument: its index among the inputs `run` is given.
        let view_of = self
            .view_of
            .filter(|&i| fixed[i].is_none())
            .map(|i| fixed[..i].iter().filter(|t| t.is_none()).count());
        Ok(Box::new(PreparedNative {
            code: self.code.clone(),
            view_of,
            args: self.args.iter().map(|a| a.shape.clone()).collect(),
            fixed,
            packed: Mutex::new(packed),
            pack_info: self.packs.clone(),
            outputs: self.outputs.clone(),
            scratch_bytes: scratch,
            pack_base: self.scratch + self.per_thread * self.threads,
            scratch: Mutex::new(Aligned::new(scratch)),
            threads: self.threads,
        }))
    }
}

fn check(t: &Tensor, s: &crate::runtime::exec::tensor::Shape) -> Result<(), String> {
    if t.dtype() != s.dtype || t.shape() != s.dims.as_slice() {
        return Err(format!(
            "internal error: a kernel argument is `{}` where `{s}` was compiled",
            t.ty()
        ));
    }
    Ok(())
}

struct PreparedNative {
    code: Arc<Code>,
    /// The input (of `run`) the output is a view of.
    view_of: Option<usize>,
    args: Vec<crate::runtime::exec::tensor::Shape>,
    fixed: Vec<Option<Arc<Tensor>>>,
    packed: Mutex<Vec<Option<Aligned>>>,
    pack_info: Vec<emit::Pack>,
    outputs: Vec<(crate::ir::DType, Vec<usize>)>,
    scratch_bytes: usize,
    /// Where per-call packs start in the scratch buffer.
    pack_base: usize,
    scratch: Mutex<Aligned>,
    threads: usize,
}

// SAFETY: the raw pointers inside are only used during `run`, which holds the locks.
unsafe impl Send for PreparedNative {}
// SAFETY: as above; all interior state is behind mutexes.
unsafe impl Sync for PreparedNative {}

impl Prepared for PreparedNative {
    /// Every output is materialized by a loop nest over its whole shape.
    fn overwrites_outputs(&self) -> bool {
        true
    }

    fn output_is_view_of(&self) -> Option<usize> {
        self.view_of
    }

    fn resident(&self, f: &mut dyn FnMut(&[u8])) {
        crate::runtime::exec::kernel::constants_resident(&self.fixed, f);
        for p in self
            .packed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flatten()
        {
            f(p.0.as_bytes());
        }
        f(self
            .scratch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .as_bytes());
    }

    fn run(
        &self,
        inputs: &[Arc<Tensor>],
        outputs: &mut [Tensor],
        _cx: &RunCx<'_>,
    ) -> Result<(), RunError> {
        let mut it = inputs.iter();
        let mut ptrs: Vec<*mut c_void> = Vec::with_capacity(self.args.len());
        for (i, f) in self.fixed.iter().enumerate() {
            let t = match f {
                Some(t) => t,
                None => {
                    let t = it
                        .next()
                        .ok_or_else(|| RunError::new("internal error: too few kernel inputs"))?;
                    check(t, &self.args[i]).map_err(RunError::new)?;
                    t
                }
            };
            ptrs.push(t.bytes().as_ptr() as *mut c_void);
        }
        if it.next().is_some() {
            return Err(RunError::new("internal error: too many kernel inputs"));
        }
        if outputs.len() != self.outputs.len() {
            return Err(RunError::new(
                "internal error: wrong number of kernel outputs",
            ));
        }
        let mut outs: Vec<*mut c_void> = Vec::with_capacity(outputs.len());
        for (o, (d, dims)) in outputs.iter_mut().zip(&self.outputs) {
            if o.dtype() != *d || o.shape() != dims.as_slice() {
                return Err(RunError::new(
                    "internal error: a kernel output of the wrong type",
                ));
            }
            let _ = elem_size(*d);
            outs.push(o.bytes_mut().as_mut_ptr() as *mut c_void);
        }
        let mut own;
        let mut guard = self.scratch.try_lock().ok();
        let scratch: &mut Aligned = match guard.as_deref_mut() {
            Some(s) => s,
            None => {
                own = Aligned::new(self.scratch_bytes);
                &mut own
            }
        };
        let base = scratch.ptr();
        let mut packed = self.packed.lock().unwrap_or_else(|p| p.into_inner());
        let mut pks: Vec<*mut c_void> = Vec::with_capacity(packed.len());
        let mut off = self.pack_base;
        for (j, p) in packed.iter_mut().enumerate() {
            match p {
                Some(b) => pks.push(b.ptr() as *mut c_void),
                None => {
                    // SAFETY: the scratch buffer holds every per-call pack after the kernel's own
                    // scratch; the pack function reads only the arguments.
                    let dst = unsafe { base.add(off) };
                    unsafe {
                        (self.code.packs[j])(ptrs.as_ptr(), dst as *mut f32, self.threads as i32)
                    };
                    pks.push(dst as *mut c_void);
                    off += self.pack_info[j].bytes.next_multiple_of(64);
                }
            }
        }
        // SAFETY: the kernel reads the argument tensors, writes the output tensors (distinct
        // allocations of the compiled shapes, checked above) and its scratch buffer.
        let rc = unsafe {
            (self.code.run)(
                ptrs.as_ptr(),
                outs.as_ptr(),
                pks.as_ptr(),
                base,
                self.threads as i32,
            )
        };
        match rc {
            0 => Ok(()),
            1 => Err(RunError::new("integer division by zero")),
            2 => Err(RunError::new(
                "a `take` index is out of range (mode \"fast\")",
            )),
            c => Err(RunError::new(format!(
                "a native kernel failed with code {c}"
            ))),
        }
    }
}
