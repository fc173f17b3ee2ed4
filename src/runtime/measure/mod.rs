//! Measured costs: the `measure` cost estimator (`--costs measure`) and its persistent cache.
//!
//! Each distinct candidate (by its stable structural key, [`crate::planning::enumerate::key::stable_key`]) is
//! extracted as a function ([`candidate`]), compiled by the backends of its target exactly as
//! `collage run` compiles a partition (the backends of this machine,
//! [`crate::runtime::backend::registry::Setup`]), and timed on random inputs by the
//! [`protocol`]. The result goes into the SQLite cache ([`db`]) at once, keyed by structure,
//! target, backend identity and version, thread count and machine ([`machine`]), so a second
//! partitioning of the same model (or of another model with the same layers) measures nothing,
//! and a killed process loses only the measurement it was making.
//!
//! * A candidate whose backend cannot compile or run it is `invalid` (and cached as such).
//! * A candidate of a target with no backend on this machine (the GPU targets, a library that
//!   is not installed) is `unknown`: the next estimator of the chain prices it
//!   (`--costs measure+analytic`), or it is unusable.
//! * Candidates are compiled in batches on all cores, then timed one at a time on the
//!   requested threads. While timing, the process holds an exclusive lock on the database's
//!   `.lock` file, so two `collage` processes sharing a cache never time at the same moment.

pub mod candidate;
pub mod db;
pub mod dir;
pub mod flush;
pub mod machine;
pub mod priority;
pub mod protocol;

use crate::ir::{Callee, Expr, ExprId, Module};
use crate::planning::cost::{Cost, Estimate, Estimator, Request};
use crate::planning::enumerate::DataflowGraph;
use crate::rules::ruletree::Target;
use crate::runtime::backend::registry::Setup;
use crate::runtime::exec::data::Weights;
use crate::runtime::exec::executor::{self, Executable};
use crate::runtime::exec::kernel::Unit;
use crate::runtime::exec::tensor::Tensor;
use db::{Db, Entry, Key, Opened};
use machine::Machine;
use protocol::Settings;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The version of the measuring harness, part of every cache key: bump it when what a
/// measurement means changes.
pub const HARNESS: &str = "measure-5";

/// A fingerprint of the code that compiles and runs candidates (the backends, the executor,
/// the library bindings), computed when collage is built; part of every cache key, so a cost
/// measured with other kernels (a changed code generator, say) is measured again rather than
/// read back.
pub const RUNTIME_CODE: &str = env!("COLLAGE_RUNTIME_CODE");

/// Candidates compiled together before they are timed one by one.
const BATCH: usize = 32;

/// How to measure.
#[derive(Clone, Debug)]
pub struct Config {
    /// Threads the candidates run on.
    pub threads: usize,
    /// The cache directory (native kernels), if there is one.
    pub cache_dir: Option<PathBuf>,
    /// Keeps a temporary cache directory (replacing an unusable one) while measuring.
    pub place: dir::Place,
    /// The measurement database.
    pub database: PathBuf,
    /// The timing protocol.
    pub settings: Settings,
    /// The seed of random inputs and weights.
    pub seed: u64,
}

/// What the estimator did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    /// Candidates timed in this process.
    pub measured: usize,
    /// Candidates found invalid in this process (compile or run failures).
    pub invalid: usize,
    /// Candidates answered from the cache.
    pub cached: usize,
    /// Candidates of targets without a backend here (left to the next estimator).
    pub unknown: usize,
    /// Wall time spent compiling candidates (seconds).
    pub compile_seconds: f64,
    /// Wall time spent timing candidates (seconds).
    pub measure_seconds: f64,
}

/// `cold` or `warm`: how [`Settings::cold`] names itself in cache keys and reports.
fn timing_word(cold: bool) -> &'static str {
    if cold {
        "cold"
    } else {
        "warm"
    }
}

/// The measuring estimator.
pub struct Measure {
    cfg: Config,
    machine: Machine,
    setup: Setup,
    /// What every cache key says after the backends' identity: the harness version, the code
    /// fingerprint, warm or cold timing and libgomp's wait settings (fixed for the process).
    protocol: String,
    /// The last-level cache's size, read once for cold timing (`None` when warm or unknown).
    llc: Option<u64>,
    /// The bytes of the last model measured for, when its weights stay in the last-level
    /// cache from one run to the next ([`weights_stay`]) and cold timing keeps them.
    kept: Mutex<Option<u64>>,
    db: Mutex<Option<Db>>,
    opened: Opened,
    counters: Mutex<Counters>,
    /// Problems met along the way (the cache became unusable), reported by the caller.
    notes: Mutex<Vec<String>>,
}

impl std::fmt::Debug for Measure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Measure")
            .field("database", &self.cfg.database)
            .field("threads", &self.cfg.threads)
            .finish()
    }
}

impl Measure {
    /// Opens the cache and loads the backends of `targets`. Fails when the database cannot be
    /// opened (a damaged one is rebuilt, see [`Measure::opened`]).
    pub fn open(cfg: Config, targets: &[Target]) -> Result<Measure, db::DbError> {
        let (db, opened) = Db::open(&cfg.database)?;
        let machine = Machine::detect();
        db.note_machine(&machine.id(), &machine.model, &machine.flags)?;
        let setup = Setup::new(targets, cfg.threads, cfg.cache_dir.clone());
        let protocol = format!(
            "{HARNESS}; code {RUNTIME_CODE}; {}; {}",
            timing_word(cfg.settings.cold),
            crate::runtime::ffi::omp::wait_settings()
        );
        let llc = cfg.settings.cold.then(flush::last_level_cache).flatten();
        Ok(Measure {
            cfg,
            machine,
            setup,
            protocol,
            llc,
            kept: Mutex::new(None),
            db: Mutex::new(Some(db)),
            opened,
            counters: Mutex::new(Counters::default()),
            notes: Mutex::new(Vec::new()),
        })
    }

    /// What opening the database found.
    pub fn opened(&self) -> &Opened {
        &self.opened
    }

    /// The database file.
    pub fn database(&self) -> &std::path::Path {
        &self.cfg.database
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// How candidates are timed, as the cache key and the reports say it: `cold` (their kept
    /// buffers evicted before each call, unless [`Measure::weights_kept`]) or `warm` (TVM's
    /// loop).
    pub fn candidate_timing(&self) -> &'static str {
        timing_word(self.cfg.settings.cold)
    }

    /// The bytes of the model last measured for, when cold timing kept its weights in the
    /// caches because they fit ([`weights_stay`]).
    pub fn weights_kept(&self) -> Option<u64> {
        *self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether cold timing keeps the weights of `g`'s candidates in the caches, and notes the
    /// model's size for [`Measure::weights_kept`].
    fn keeps_weights(&self, g: &DataflowGraph<'_>) -> bool {
        if !self.cfg.settings.cold {
            return false;
        }
        let bytes = model_bytes(g);
        let keep = weights_stay(bytes, self.llc);
        *self.kept.lock().unwrap_or_else(|p| p.into_inner()) = keep.then_some(bytes);
        keep
    }

    /// The backends in use.
    pub fn setup(&self) -> &Setup {
        &self.setup
    }

    /// What was done so far.
    pub fn counters(&self) -> Counters {
        self.counters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Problems met so far (taken).
    pub fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn count(&self, f: impl FnOnce(&mut Counters)) {
        f(&mut self.counters.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Runs `f` on the database; a failure disables the cache for the rest of the process
    /// (with a note), never the measurement.
    fn with_db<T>(&self, f: impl FnOnce(&Db) -> Result<T, db::DbError>) -> Option<T> {
        let mut guard = self.db.lock().unwrap_or_else(|p| p.into_inner());
        let db = guard.as_ref()?;
        match f(db) {
            Ok(v) => Some(v),
            Err(e) => {
                self.notes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(format!(
                        "the measurement cache `{}` failed ({e}); measuring on without it",
                        self.cfg.database.display()
                    ));
                *guard = None;
                None
            }
        }
    }

    /// The cache key of a request, or why its target cannot be measured here.
    fn key(&self, r: &Request<'_, '_>, keep_weights: bool) -> Result<Key, String> {
        let t = r.target();
        let identity = self.setup.availability(t)?;
        let kept = if keep_weights { "; weights kept" } else { "" };
        Ok(Key {
            structure: crate::planning::enumerate::key::stable_key(r.graph, r.candidate, &t.name),
            target: t.name.clone(),
            backend: format!("{identity}; {}{kept}", self.protocol),
            threads: self.cfg.threads as u32,
            machine: self.machine.id(),
        })
    }

    /// Hands the native functions of a batch of candidate modules to the native backends at
    /// once, so that they compile them together (several C compilers in parallel) before the
    /// candidates are compiled one by one.
    fn precompile(&self, modules: &[&Module], weights: &Weights) {
        let natives = self.setup.backends_for(None);
        if natives.is_empty() {
            return;
        }
        let sources = Consts(
            modules
                .iter()
                .map(|m| (*m as *const Module as usize, weights.for_module(m)))
                .collect(),
        );
        let mut units = Vec::new();
        for m in modules {
            let Some(main) = m.main() else { continue };
            // `@main` calls the candidate's function literal (after rebuilt tuples).
            for e in m.func(main).first_expr.index()..=m.func(main).body.index() {
                if let Expr::Call {
                    callee: Callee::Expr(c),
                    ..
                } = m.expr(ExprId(e as u32))
                {
                    if let Expr::Func(f) = m.expr(*c) {
                        let fun = m.func(*f);
                        if fun.attr("Compiler").is_none() && fun.attr("Primitive").is_some() {
                            units.push(Unit::Function {
                                module: m,
                                func: *f,
                            });
                        }
                    }
                }
            }
        }
        for b in natives {
            b.precompile(&units, &sources);
        }
    }

    /// Compiles one candidate.
    fn compile(
        &self,
        r: &Request<'_, '_>,
        m: &Module,
        weights: &Weights,
    ) -> Result<Compiled, String> {
        let mw = weights.for_module(m);
        let x = self.setup.compile(m, &mw).map_err(|d| {
            d.iter().next().map_or_else(
                || "it cannot be compiled".to_string(),
                |d| d.message.clone(),
            )
        })?;
        // A library target's candidate must run on its library, not on the interpreter.
        if r.target().compiler.is_some() {
            if let Some(w) = x.warnings.first() {
                return Err(w.message.clone());
            }
        }
        let mut inputs = Vec::with_capacity(x.inputs.len());
        for p in &x.inputs {
            inputs.push(Arc::new(mw.random_input(&p.name, &p.shape)?));
        }
        Ok(Compiled { x, inputs })
    }

    /// Times compiled candidates together, in rounds ([`protocol::measure_many`]), holding
    /// the measuring lock; each repeat runs on the executables' worker pool.
    fn time(
        &self,
        cs: &[&Compiled],
        keep_weights: bool,
        finished: &mut dyn FnMut(usize, &Result<protocol::Timing, String>),
    ) {
        let _lock = db::lock(&self.cfg.database).ok();
        let settings = self.cfg.settings;
        let omp = settings
            .cold
            .then(|| crate::runtime::ffi::omp::Omp::shared().ok())
            .flatten();
        // Each executable's buffers stay where they are while it lives. Cold timing evicts
        // the candidate's inputs, which inside a model the kernels before it have just written
        // (on both cores, or out to the last-level cache), and its weights unless the whole
        // model stays in the last-level cache (docs/measure.md, "Why the inputs, and when the
        // weights stay").
        let ranges: Vec<Vec<flush::Range>> = cs
            .iter()
            .map(|c| {
                let mut r = Vec::new();
                if settings.cold && !keep_weights {
                    c.x.resident(&mut |b| r.push(flush::Range::of(b)));
                }
                if settings.cold {
                    for t in &c.inputs {
                        r.push(flush::Range::of(t.bytes()));
                    }
                }
                flush::to_evict(flush::distinct(r), self.llc)
            })
            .collect();
        let clock = protocol::Monotonic::new();
        let mut repeat = |k: usize, number: u64, prepared: bool| {
            let c = cs[k];
            c.x.in_pool(|| {
                let clock = protocol::Monotonic::new();
                protocol::timed_calls(
                    &clock,
                    number,
                    prepared,
                    settings.lead_in_calls,
                    &mut || flush::evict(&ranges[k], omp.as_deref()),
                    // The result's storage serves the next call, as the storage of earlier
                    // results does inside a whole model; a freshly zeroed allocation per
                    // call (page faults on large outputs) is not what the partition pays
                    // there.
                    &mut || {
                        c.x.run(&c.inputs)
                            .map(|o| c.x.recycle(o.value))
                            .map_err(|d| d.message)
                    },
                )
            })
        };
        protocol::measure_many(&clock, &settings, cs.len(), &mut repeat, finished);
    }
}

/// The bytes of the tensors one run of `g`'s model touches: its parameters, constants and
/// every operator call's result (an upper bound: memory reused between results counts once per
/// result).
pub fn model_bytes(g: &DataflowGraph<'_>) -> u64 {
    (0..g.len())
        .map(|i| crate::planning::cost::analytic::node_bytes(g, i) as u64)
        .sum()
}

/// Whether a model of `bytes` (its [`model_bytes`]) finds its weights in the last-level cache
/// (`llc` bytes) at the next run: when the whole model fits in half of it. The other half
/// leaves room for what the cache's associativity and the machine's other programs (on a virtual
/// machine, other guests) take. Then cold timing evicts the inputs alone: evicting weights
/// that a run of the model finds in the cache charged MobileNetV2 as one oneDNN partition
/// 4.9-7.3 ms where it runs in 3.1-3.5 ms (docs/measure.md, "Why the inputs, and when the
/// weights stay").
pub fn weights_stay(bytes: u64, llc: Option<u64>) -> bool {
    llc.is_some_and(|l| bytes <= l / 2)
}

/// The constants of several modules, each from its own module's weights.
struct Consts<'w>(Vec<(usize, crate::runtime::exec::data::ModuleWeights<'w>)>);

impl crate::runtime::exec::kernel::ConstantSource for Consts<'_> {
    fn constant(&self, m: &Module, e: ExprId) -> Result<Arc<Tensor>, String> {
        let at = m as *const Module as usize;
        match self.0.iter().find(|(p, _)| *p == at) {
            Some((_, w)) => w.constant(m, e),
            None => Err("internal error: a constant of an unknown module".into()),
        }
    }
}

/// A compiled candidate and its inputs.
struct Compiled {
    x: Executable,
    inputs: Vec<Arc<Tensor>>,
}

/// A short description of a candidate for the cache: target and operators.
fn label(r: &Request<'_, '_>) -> String {
    let l = &r.candidate.sub_graph.label;
    let shown: String = l.chars().take(200).collect();
    format!("{}: {shown}", r.target().name)
}

fn estimate_of(e: &Entry) -> Estimate {
    match e {
        Entry::Timed { seconds, .. } => Estimate::of(Cost::value(*seconds)),
        Entry::Invalid { reason } => Estimate::because(Cost::INVALID, reason.clone()),
    }
}

impl Estimator for Measure {
    fn name(&self) -> String {
        "measure".into()
    }

    fn estimate(&self, req: &Request<'_, '_>) -> Estimate {
        self.estimate_many(std::slice::from_ref(req), &|_, _| {})
            .pop()
            .unwrap_or_else(|| Estimate::of(Cost::UNKNOWN))
    }

    fn estimate_many(
        &self,
        reqs: &[Request<'_, '_>],
        progress: &dyn Fn(usize, usize),
    ) -> Vec<Estimate> {
        let mut out: Vec<Option<Estimate>> = vec![None; reqs.len()];
        let mut todo: Vec<(usize, Key)> = Vec::new();
        let keep_weights = reqs.first().is_some_and(|r| self.keeps_weights(r.graph));
        for (i, r) in reqs.iter().enumerate() {
            match self.key(r, keep_weights) {
                Err(why) => {
                    self.count(|c| c.unknown += 1);
                    out[i] = Some(Estimate::because(Cost::UNKNOWN, why));
                }
                Ok(key) => match self.with_db(|db| db.get(&key)).flatten() {
                    Some(entry) => {
                        self.count(|c| c.cached += 1);
                        out[i] = Some(estimate_of(&entry));
                    }
                    None => todo.push((i, key)),
                },
            }
        }
        let total = todo.len();
        progress(0, total);
        let mut done = 0;
        let workers = executor::default_threads().max(1);
        for chunk in todo.chunks(BATCH) {
            let weights = Weights::new(self.cfg.seed);
            // Compile the batch on all cores: the native kernels together, then each candidate.
            let start = std::time::Instant::now();
            let modules: Vec<Result<Module, String>> = chunk
                .iter()
                .map(|(i, _)| {
                    let r = &reqs[*i];
                    candidate::module_for(r.graph, r.program, r.candidate)
                })
                .collect();
            let built: Vec<&Module> = modules.iter().filter_map(|m| m.as_ref().ok()).collect();
            self.precompile(&built, &weights);
            let slots: Vec<Mutex<Option<Result<Compiled, String>>>> =
                chunk.iter().map(|_| Mutex::new(None)).collect();
            let next = std::sync::atomic::AtomicUsize::new(0);
            std::thread::scope(|s| {
                for _ in 0..workers.min(chunk.len()) {
                    s.spawn(|| loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((i, _)) = chunk.get(k) else { break };
                        let c = match &modules[k] {
                            Ok(m) => self.compile(&reqs[*i], m, &weights),
                            Err(e) => Err(e.clone()),
                        };
                        *slots[k].lock().unwrap_or_else(|p| p.into_inner()) = Some(c);
                    });
                }
            });
            let compile_seconds = start.elapsed().as_secs_f64();
            self.count(|c| c.compile_seconds += compile_seconds);
            // Time them together, in rounds, keeping each measurement as soon as it ends
            // (a killed process loses only what was still being measured).
            let compiled: Vec<Result<Compiled, String>> = slots
                .into_iter()
                .map(|slot| {
                    slot.into_inner()
                        .unwrap_or_else(|p| p.into_inner())
                        .unwrap_or_else(|| Err("the compiler thread failed".to_string()))
                })
                .collect();
            let mut keep = |k: usize, timing: &Result<protocol::Timing, String>| {
                let (i, key) = &chunk[k];
                let entry = match timing {
                    Ok(t) => Entry::Timed {
                        seconds: t.seconds,
                        spread: t.spread,
                        repeats: t.repeats.len() as u32,
                        number: t.number,
                    },
                    Err(reason) => Entry::Invalid {
                        reason: reason.clone(),
                    },
                };
                let invalid = matches!(entry, Entry::Invalid { .. });
                self.count(|c| {
                    if invalid {
                        c.invalid += 1;
                    } else {
                        c.measured += 1;
                    }
                });
                let l = label(&reqs[*i]);
                self.with_db(|db| db.put(key, &entry, &l));
                out[*i] = Some(estimate_of(&entry));
                done += 1;
                progress(done, total);
            };
            // Candidates that did not compile first, then the others as they finish.
            let mut ok: Vec<(usize, &Compiled)> = Vec::new();
            for (k, c) in compiled.iter().enumerate() {
                match c {
                    Ok(c) => ok.push((k, c)),
                    Err(e) => keep(k, &Err(e.clone())),
                }
            }
            let start = std::time::Instant::now();
            let xs: Vec<&Compiled> = ok.iter().map(|(_, c)| *c).collect();
            self.time(&xs, keep_weights, &mut |j, t| keep(ok[j].0, t));
            let secs = start.elapsed().as_secs_f64();
            self.count(|c| c.measure_seconds += secs);
        }
        out.into_iter()
            .map(|o| o.unwrap_or_else(|| Estimate::of(Cost::UNKNOWN)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{model_bytes, weights_stay};
    use crate::planning::enumerate::DataflowGraph;

    #[test]
    fn a_model_counts_its_inputs_constants_and_results() {
        // %x: 4 x 8 floats (128 bytes), the scalar constant (4), the relu and the add (128
        // each).
        let m = crate::frontend::relay::load_text(
            "#[version = \"0.0.5\"]\n\
             def @main(%x: Tensor[(4, 8), float32]) {\n  \
             %0 = nn.relu(%x);\n  add(%0, 1f)\n}\n",
        );
        let g = DataflowGraph::new(&m, m.main().unwrap());
        assert_eq!(model_bytes(&g), 128 + 4 + 128 + 128);
    }

    #[test]
    fn weights_stay_when_the_model_fits_in_half_the_last_level_cache() {
        let mib = 1u64 << 20;
        assert!(weights_stay(89 * mib, Some(480 * mib)));
        assert!(weights_stay(240 * mib, Some(480 * mib)));
        assert!(!weights_stay(241 * mib, Some(480 * mib)));
        // A 32 MiB cache keeps nothing of a 20 MiB model's weights from run to run.
        assert!(!weights_stay(20 * mib, Some(32 * mib)));
        // Where the cache's size is unknown, weights are evicted.
        assert!(!weights_stay(1, None));
        assert!(!weights_stay(u64::MAX, Some(u64::MAX)));
    }
}
