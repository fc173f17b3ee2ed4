//! The node tests on generated code: the tests given (those that pass on the reference
//! interpreter, or a sample of them) are imported again, the FuseOps groups of all their
//! `@main`s are handed to the native backend at once, which compiles them together in a few
//! libraries (several C compilers in parallel), and then each test is compiled (its kernels
//! already loaded), run and compared as on the interpreter, under the same bounds. A group the
//! generator does not take runs on the interpreter (the executor's W2310); the outcome counts
//! those.

use super::bounded::{self, Ended};
use super::{prepare, run_prepared, Case, Limits, Prepared, Verdict};
use crate::diag::W2310;
use crate::ir::Module;
use crate::runtime::backend::native::grouping::FuseGrouping;
use crate::runtime::backend::native::{Config, Native, Stats};
use crate::runtime::exec::data::{ModuleWeights, Weights};
use crate::runtime::exec::executor::Grouping;
use crate::runtime::exec::kernel::{Backend, Backends, ConstantSource, Unit};
use crate::runtime::exec::program::{group_units, Region};
use crate::runtime::exec::tensor::Tensor;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which tests run on generated code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sample {
    /// All of them.
    All,
    /// Every `n`th (the first, the `n+1`th, ...), in name order.
    OneIn(usize),
}

impl Sample {
    /// Parses `all` or `1/N` (or `N`).
    pub fn parse(s: &str) -> Option<Sample> {
        let s = s.trim();
        if s == "all" {
            return Some(Sample::All);
        }
        let n: usize = s.strip_prefix("1/").unwrap_or(s).parse().ok()?;
        (n >= 1).then_some(Sample::OneIn(n))
    }

    /// The sample of `items` (kept in order).
    pub fn of<T: Clone>(self, items: &[T]) -> Vec<T> {
        match self {
            Sample::All => items.to_vec(),
            Sample::OneIn(n) => items.iter().step_by(n.max(1)).cloned().collect(),
        }
    }
}

impl std::fmt::Display for Sample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sample::All => f.write_str("all"),
            Sample::OneIn(n) => write!(f, "1/{n}"),
        }
    }
}

/// A test's result on generated code.
#[derive(Clone, Debug)]
pub struct NativeOutcome {
    /// The test's name.
    pub name: String,
    /// How it ended.
    pub verdict: Verdict,
    /// The units the native backend left to the interpreter, with its reasons.
    pub fallbacks: Vec<String>,
}

/// What a run on generated code did.
#[derive(Clone, Debug)]
pub struct NativeReport {
    /// One outcome per test, in the order given.
    pub outcomes: Vec<NativeOutcome>,
    /// The backend's counts (kernels, compiler runs, compile time).
    pub stats: Stats,
    /// Wall time importing the tests.
    pub prepare_time: Duration,
    /// Wall time generating and compiling every kernel together.
    pub compile_time: Duration,
    /// Wall time compiling the tests (their kernels loaded) and running them.
    pub run_time: Duration,
}

/// The constants of several modules: each module's from its own weights.
struct Consts<'w>(Vec<(usize, ModuleWeights<'w>)>);

impl ConstantSource for Consts<'_> {
    fn constant(&self, m: &Module, e: crate::ir::ExprId) -> Result<Arc<Tensor>, String> {
        let at = m as *const Module as usize;
        match self.0.iter().find(|(p, _)| *p == at) {
            Some((_, w)) => w.constant(m, e),
            None => Err("internal error: a constant of an unknown module".into()),
        }
    }
}

/// Runs `cases` on generated code compiled with `cfg` (its thread count is set to 1: tests run
/// on the workers of `limits`).
pub fn run(cases: &[Case], limits: &Limits, cfg: Config) -> NativeReport {
    let native = Arc::new(Native::new(Config { threads: 1, ..cfg }));
    let start = Instant::now();
    let shared: Arc<Vec<Case>> = Arc::new(cases.to_vec());
    let jobs = shared.clone();
    let max_bytes = limits.max_bytes;
    let prepared: Vec<Result<Prepared, Verdict>> = bounded::run(
        cases.len(),
        limits.workers,
        limits.timeout,
        move |i, _| prepare(&jobs[i], max_bytes),
        &mut |_, _| {},
    )
    .into_iter()
    .map(|d| match d.ended {
        Ended::Returned(r) => r,
        Ended::Panicked(m) => Err(Verdict::Panicked(m)),
        Ended::TimedOut => Err(Verdict::TimedOut),
        Ended::NotRun => Err(Verdict::NotRun),
    })
    .collect();
    let prepare_time = start.elapsed();

    // Every group of every module, compiled together.
    let start = Instant::now();
    let weights = Weights::new(0);
    {
        let ready: Vec<&Module> = prepared
            .iter()
            .filter_map(|p| p.as_ref().ok().map(|p| &p.module))
            .collect();
        let consts = Consts(
            ready
                .iter()
                .map(|m| (*m as *const Module as usize, weights.for_module(m)))
                .collect(),
        );
        let grouping = FuseGrouping::default();
        let groups: Vec<(&Module, Vec<crate::runtime::exec::kernel::Group>)> = ready
            .iter()
            .filter_map(|&m| {
                let main = m.main()?;
                let g = group_units(m, &Region::function(m, main), grouping.groups(m, main));
                g.ok().map(|g| (m, g))
            })
            .collect();
        let units: Vec<Unit<'_>> = groups
            .iter()
            .flat_map(|(m, gs)| gs.iter().map(|group| Unit::Group { module: m, group }))
            .collect();
        native.precompile(&units, &consts);
    }
    let compile_time = start.elapsed();

    let start = Instant::now();
    let ready: Arc<Vec<Result<Prepared, Verdict>>> = Arc::new(prepared);
    let jobs = ready.clone();
    let backend = native.clone();
    let done = bounded::run(
        cases.len(),
        limits.workers,
        limits.timeout,
        move |i, pool| match &jobs[i] {
            Ok(p) => {
                let backends = Backends {
                    list: vec![backend.clone() as Arc<dyn Backend>],
                };
                let grouping: Box<dyn Grouping> = Box::new(FuseGrouping::default());
                let (v, warnings) = run_prepared(p, backends, Some(grouping), pool);
                let fallbacks = warnings
                    .iter()
                    .filter(|w| w.code == W2310)
                    .map(|w| w.message.clone())
                    .collect();
                (v, fallbacks)
            }
            Err(v) => (v.clone(), Vec::new()),
        },
        &mut |_, _| {},
    );
    let outcomes = cases
        .iter()
        .zip(done)
        .map(|(c, d)| {
            let (verdict, fallbacks) = match d.ended {
                Ended::Returned(r) => r,
                Ended::Panicked(m) => (Verdict::Panicked(m), Vec::new()),
                Ended::TimedOut => (Verdict::TimedOut, Vec::new()),
                Ended::NotRun => (Verdict::NotRun, Vec::new()),
            };
            NativeOutcome {
                name: c.name.clone(),
                verdict,
                fallbacks,
            }
        })
        .collect();
    NativeReport {
        outcomes,
        stats: native.stats(),
        prepare_time,
        compile_time,
        run_time: start.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_parse_and_pick_every_nth() {
        assert_eq!(Sample::parse("all"), Some(Sample::All));
        assert_eq!(Sample::parse("1/8"), Some(Sample::OneIn(8)));
        assert_eq!(Sample::parse("3"), Some(Sample::OneIn(3)));
        assert_eq!(Sample::parse("0"), None);
        assert_eq!(Sample::parse("x"), None);
        let v: Vec<u32> = (0..10).collect();
        assert_eq!(Sample::OneIn(4).of(&v), vec![0, 4, 8]);
        assert_eq!(Sample::All.of(&v).len(), 10);
        assert_eq!(Sample::OneIn(8).to_string(), "1/8");
    }
}
