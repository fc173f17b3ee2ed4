//! The measuring options shared by `collage partition` and `collage bench` (`--threads`,
//! `--cache-dir`, `--cache`, `--measure-budget`), the cache directory, and opening the
//! measuring estimator.

use super::Outcome;
use crate::diag::{self, Diagnostic};
use crate::rules::ruletree::Target;
use crate::runtime::measure::{self, db::Opened, dir, Measure};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where and how `measure` measures.
#[derive(Clone, Debug, Default)]
pub struct MeasureArgs {
    /// Threads the candidates run on (`None`: all cores).
    pub threads: Option<usize>,
    /// The cache directory (`None`: `$COLLAGE_CACHE_DIR` or the user's cache directory).
    pub cache_dir: Option<PathBuf>,
    /// The measurement database alone.
    pub cache: Option<PathBuf>,
    /// The time budget of one candidate's measurement, in seconds (`None`: the default).
    pub budget: Option<f64>,
    /// The seed of random inputs and weights.
    pub seed: u64,
    /// Time candidates in TVM's warm loop instead of with their kernels' buffers evicted
    /// before each call (the default, where the processor allows it).
    pub warm: bool,
    /// Cold timing was asked for by name (a warning where it cannot be done).
    pub cold: bool,
    /// Raise the scheduling weight of this session's autogroup while the command runs.
    pub raise_priority: bool,
}

impl MeasureArgs {
    /// The thread count (checked by [`MeasureArgs::check`]).
    pub fn thread_count(&self) -> usize {
        self.threads
            .unwrap_or_else(crate::runtime::exec::executor::default_threads)
            .max(1)
    }

    /// Refuses nonsensical values (a usage error).
    pub fn check(&self) -> Result<(), Outcome> {
        super::checks::threads(self.threads)?;
        super::checks::seconds_flag("--measure-budget", self.budget)
    }

    /// The cache directory in use (given or from the environment).
    pub fn resolved_dir(&self) -> Option<PathBuf> {
        dir::resolve(self.cache_dir.as_deref())
    }
}

/// The cache directory of a command that compiles kernels or measures ([`dir::prepare`]):
/// E2410 (exit 2) when it is not the user's own or others can write to it; W2411 when it
/// cannot be used, and a temporary directory instead, for this command only.
pub fn cache_place(given: Option<&Path>) -> Result<dir::Place, Outcome> {
    match dir::prepare(given) {
        dir::Prepared::Ready(p) => Ok(p),
        dir::Prepared::Replaced { place, why } => {
            let shown = dir::resolve(given).map_or(String::new(), |d| d.display().to_string());
            let note = match place.dir() {
                Some(t) => format!(
                    "kernels and measurements are kept in `{}` until the command ends",
                    t.display()
                ),
                None => "no temporary directory can be made either".to_string(),
            };
            diag::emit_alone(
                Diagnostic::warning(
                    diag::W2411,
                    format!("cannot use the cache directory `{shown}`: {why}"),
                )
                .with_note(note),
            );
            Ok(place)
        }
        dir::Prepared::Refused(why) => {
            let shown = dir::resolve(given).map_or(String::new(), |d| d.display().to_string());
            diag::emit_alone(
                Diagnostic::error(
                    diag::E2410,
                    format!("the cache directory `{shown}` is refused: {why}"),
                )
                .with_note(
                    "collage loads compiled code from it; make it yours alone (`chmod go-w`), or give another with `--cache-dir DIR`",
                ),
            );
            Err(Outcome::Usage)
        }
    }
}

/// Refuses nonsensical measuring flags (a usage error, whether or not they are used), then opens
/// the measuring estimator for `targets` when `spec` uses it: E2401 (exit 2) when the
/// measurement cache cannot be opened, W2402 when a damaged one was rebuilt.
pub fn open(
    args: &MeasureArgs,
    spec: &crate::planning::cost::Spec,
    targets: &[Target],
) -> Result<Option<Arc<Measure>>, Outcome> {
    // A nonsensical value is refused whether or not it is used.
    args.check()?;
    if !spec.uses_measure() {
        return Ok(None);
    }
    set_openmp_wait_policy();
    let place = cache_place(args.cache_dir.as_deref())?;
    let cache_dir = place.dir().map(Path::to_path_buf);
    let database = dir::database(cache_dir.as_deref(), args.cache.as_deref()).map_err(|e| {
        diag::emit_alone(Diagnostic::error(diag::E2401, e.to_string()));
        Outcome::Usage
    })?;
    if args.cold && !args.warm && !measure::flush::EVICTS {
        diag::emit_alone(Diagnostic::warning(
            diag::W2407,
            "`--cold-candidates` evicts caches on x86-64 processors only; candidates are timed in the warm loop here",
        ));
    }
    let mut settings = if !args.warm && measure::flush::EVICTS {
        measure::protocol::Settings::candidates_cold()
    } else {
        measure::protocol::Settings::candidates()
    };
    if let Some(b) = args.budget {
        settings.budget = std::time::Duration::from_secs_f64(b.min(1e6));
    }
    let cfg = measure::Config {
        threads: args.thread_count(),
        cache_dir,
        place,
        database: database.clone(),
        settings,
        seed: args.seed,
    };
    let m = Measure::open(cfg, targets).map_err(|e| {
        diag::emit_alone(
            Diagnostic::error(diag::E2401, format!("cannot use the measurement cache: {e}"))
                .with_note(
                    "give another place with `--cache-dir DIR` or `--cache FILE`, or remove it with `collage cache clear`",
                ),
        );
        Outcome::Usage
    })?;
    if let Opened::Rebuilt { moved_to, why } = m.opened() {
        let kept = match moved_to {
            Some(p) => format!("the old file is kept as `{}`", p.display()),
            None => "the old file could not be kept".to_string(),
        };
        diag::emit_alone(Diagnostic::warning(diag::W2402, format!("the measurement cache `{}` could not be used ({why}) and has been rebuilt empty; {kept}", database.display())));
    }
    Ok(Some(Arc::new(m)))
}

/// The wait policy of libgomp's idle threads in a measuring process: `OMP_WAIT_POLICY=active`
/// with `GOMP_SPINCOUNT=5000`, unless the environment already says how they wait
/// (`OMP_WAIT_POLICY` or `GOMP_SPINCOUNT`). Called before any backend loads the OpenMP runtime,
/// which reads its environment once.
///
/// A thread at the end of a parallel region then spins for 5,000 rounds (about 100-250 µs on
/// the machine of docs/backends.md) before it sleeps, so the next region of a model, after the
/// executor's hand-over or a small kernel that runs on one thread, finds the team awake, where
/// a sleeping thread took 60-90 µs to wake (MobileNetV2's plan: 8.0 ms with sleeping threads,
/// 5.9 ms with a short spin). Every kernel runs from one thread
/// ([`crate::runtime::exec::executor::on_first_worker`]), so libgomp uses this count and not its
/// "throttled" one (1,000 rounds with `active`, 100 without). A core is kept busy for at most
/// that long after a placement's last kernel; `bench` lets it go idle before it times ONNX
/// Runtime (docs/backends.md, "Thread pools"). libgomp's default (300,000 rounds, several
/// milliseconds) would keep a core for that long after every placement and every candidate.
pub fn set_openmp_wait_policy() {
    let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    if !set("OMP_WAIT_POLICY") && !set("GOMP_SPINCOUNT") {
        // Only the command's own thread runs at this point: nothing reads the environment
        // concurrently.
        std::env::set_var("OMP_WAIT_POLICY", "active");
        std::env::set_var("GOMP_SPINCOUNT", "5000");
    }
}

/// With `--raise-priority`, raises this session's scheduling weight until the guard is dropped
/// (W2406 when it cannot).
pub fn raise_priority(args: &MeasureArgs) -> Option<measure::priority::Raised> {
    if !args.raise_priority {
        return None;
    }
    match measure::priority::raise(-20) {
        Ok(r) => Some(r),
        Err(e) => {
            diag::emit_alone(Diagnostic::warning(
                diag::W2406,
                format!("cannot raise the scheduling priority: {e}; measuring without it"),
            ));
            None
        }
    }
}

/// Prints the problems met while measuring (W2403).
pub fn report_notes(m: &Measure) {
    for n in m.take_notes() {
        diag::emit_alone(Diagnostic::warning(diag::W2403, n.to_string()));
    }
}
