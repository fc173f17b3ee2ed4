//! Costs and cost estimators (docs/partition.md, "Costs"; TVM's in docs/collage.md, "Costs").
//!
//! A [`Cost`] is a number of seconds with two special values: [`Cost::INVALID`] (+∞: the target
//! cannot run the candidate) and [`Cost::UNKNOWN`] (NaN: this estimator cannot say). An
//! [`Estimator`] prices one candidate on its target. Estimators are chained ([`Chain`]): the first
//! one that knows the cost decides, so a `table` of measurements can fall back to the `analytic`
//! model for candidates it lacks. A `--costs` specification is parsed once into a [`Spec`]
//! ([`spec`]) and [`from_spec`] builds its chain; the measuring estimator that a `measure` item
//! stands for is handed in by the caller ([`SpecOptions::measure`]), so this module does not
//! know how candidates are measured.
//!
//! The estimator contract:
//! * The result depends only on the candidate's *structure* (operators, attributes, types,
//!   dataflow between its nodes and its nested functions) and its target, never on where the
//!   candidate sits in the model. [`cache::CostCache`] relies on this and asks once per
//!   structure and target.
//! * `UNKNOWN` means "ask the next estimator". `INVALID` means the candidate cannot run on the
//!   target; the search never takes it. Otherwise the value is finite, non-negative and at most
//!   [`MAX_SECONDS`]: [`cache::estimate_all`] turns a larger answer into `INVALID` (saying
//!   why), and costs read from files are checked against the same range when they are read.
//! * Estimators are `Sync`: the cache may call one estimator from several threads at once when
//!   it says [`Estimator::parallel`].
//! * Host candidates are never estimated; they cost zero.

pub mod analytic;
pub mod cache;
pub mod cmd;
pub mod mock;
pub mod spec;
pub mod table;

pub use spec::{Item, Spec};

use crate::planning::enumerate::{Candidate, DataflowGraph};
use crate::rules::ruletree::{Program, Target};
use std::fmt;
use std::sync::Arc;

/// The largest cost of one candidate, in seconds (10^4 s, close to three hours per call).
///
/// Costs above it are not costs of a kernel anyone would run; they come from broken measurers
/// or hand-edited files. Bounding them keeps the search's sums exact to a fine unit
/// (`docs/partition.md`, "Exact sums"): with one cost of 1e300 and the others of microseconds,
/// no common unit can hold both.
pub const MAX_SECONDS: f64 = 1e4;

/// `x` if it is a usable cost: finite, non-negative and at most [`MAX_SECONDS`]; otherwise why
/// not, as the end of a sentence (`is above the ceiling of 10000 s`).
pub fn check_seconds(x: f64) -> Result<f64, String> {
    if x.is_nan() {
        Err("is not a number".into())
    } else if x < 0.0 {
        Err("is negative".into())
    } else if x > MAX_SECONDS {
        Err(format!("is above the ceiling of {MAX_SECONDS} s per call"))
    } else {
        Ok(x)
    }
}

/// A cost in seconds, or one of the special values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost(pub f64);

impl Cost {
    /// Nothing to pay.
    pub const ZERO: Cost = Cost(0.0);
    /// The target cannot run the candidate.
    pub const INVALID: Cost = Cost(f64::INFINITY);
    /// The estimator does not know.
    pub const UNKNOWN: Cost = Cost(f64::NAN);

    /// A known cost; negative or non-finite values are not costs and give `INVALID`.
    pub fn value(v: f64) -> Cost {
        if v.is_finite() && v >= 0.0 {
            Cost(v)
        } else if v.is_nan() {
            Cost::UNKNOWN
        } else {
            Cost::INVALID
        }
    }

    /// Whether this is +∞.
    pub fn is_invalid(self) -> bool {
        self.0.is_infinite() && self.0 > 0.0
    }

    /// Whether this is NaN.
    pub fn is_unknown(self) -> bool {
        self.0.is_nan()
    }

    /// Whether this is a finite, usable cost.
    pub fn is_known(self) -> bool {
        self.0.is_finite()
    }

    /// The seconds.
    pub fn seconds(self) -> f64 {
        self.0
    }
}

impl std::ops::Add for Cost {
    type Output = Cost;
    /// Floating-point addition, except that two finite costs never sum to `INVALID`:
    /// `INVALID + x` is `INVALID`, `UNKNOWN + x` is `UNKNOWN` (see [`add_seconds`]).
    fn add(self, o: Cost) -> Cost {
        Cost(add_seconds(self.0, o.0))
    }
}

/// Adds two costs in seconds. A sum of finite costs too large for `f64` is the largest finite
/// value, not +∞: an astronomically expensive plan is still a plan, never an invalid one.
/// +∞ and NaN propagate as in plain addition.
pub fn add_seconds(a: f64, b: f64) -> f64 {
    let sum = a + b;
    if sum.is_infinite() && a.is_finite() && b.is_finite() {
        f64::MAX.copysign(sum)
    } else {
        sum
    }
}

impl fmt::Display for Cost {
    /// `invalid`, `unknown`, `0`, microseconds with six decimals (`12.500000us`), or, from a
    /// million seconds up, seconds in scientific notation (`1.800000e302s`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_invalid() {
            write!(f, "invalid")
        } else if self.is_unknown() {
            write!(f, "unknown")
        } else if self.0 == 0.0 {
            write!(f, "0")
        } else if self.0.abs() < 1e6 {
            write!(f, "{:.6}us", self.0 * 1e6)
        } else {
            write!(f, "{:.6e}s", self.0)
        }
    }
}

/// What an estimator is asked to price.
pub struct Request<'a, 'm> {
    /// The graph the candidate belongs to.
    pub graph: &'a DataflowGraph<'m>,
    /// The rules.
    pub program: &'a Program,
    /// The candidate.
    pub candidate: &'a Candidate,
}

impl Request<'_, '_> {
    /// The candidate's target.
    pub fn target(&self) -> &Target {
        &self.program.targets[self.candidate.target]
    }
}

/// An estimator's answer: the cost and, for an `INVALID` or `UNKNOWN` one, why (shown in E2101
/// when no usable candidate covers a node).
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// The cost.
    pub cost: Cost,
    /// Why the cost is not usable, prefixed with the estimator's name (`cmd: timed out after
    /// 60 s`); `None` for a usable cost, or when nothing more can be said.
    pub why: Option<String>,
}

impl Estimate {
    /// A cost with no reason attached.
    pub fn of(cost: Cost) -> Estimate {
        Estimate { cost, why: None }
    }

    /// An unusable cost and its reason.
    pub fn because(cost: Cost, why: impl Into<String>) -> Estimate {
        Estimate {
            cost,
            why: Some(why.into()),
        }
    }
}

impl From<Cost> for Estimate {
    fn from(cost: Cost) -> Estimate {
        Estimate::of(cost)
    }
}

/// Prices candidates. See the module documentation for the contract.
pub trait Estimator: Send + Sync {
    /// A short name for reports (`mock`, `analytic`, ...).
    fn name(&self) -> String;
    /// The cost of the request's candidate on its target; an `INVALID` or `UNKNOWN` cost
    /// should say why.
    fn estimate(&self, req: &Request<'_, '_>) -> Estimate;
    /// Whether the cache should estimate many candidates at once on several threads (for slow
    /// estimators such as external measurers).
    fn parallel(&self) -> bool {
        false
    }

    /// Prices several requests, each of a distinct structure, reporting `(done, total)` as it
    /// goes. The default asks [`Estimator::estimate`] for each, on several threads when the
    /// estimator is [`Estimator::parallel`]; an estimator that works better on a whole batch
    /// (compiling in parallel, then timing one at a time) overrides it.
    fn estimate_many(
        &self,
        reqs: &[Request<'_, '_>],
        progress: &dyn Fn(usize, usize),
    ) -> Vec<Estimate> {
        if self.parallel() && reqs.len() > 1 {
            cache::parallel_map(reqs.len(), &|k| self.estimate(&reqs[k]), progress)
        } else {
            reqs.iter()
                .enumerate()
                .map(|(n, r)| {
                    progress(n, reqs.len());
                    self.estimate(r)
                })
                .collect()
        }
    }
}

/// A shared estimator: the caller keeps a handle (to read what the estimator did afterwards)
/// while a chain asks it.
impl<E: Estimator + ?Sized> Estimator for Arc<E> {
    fn name(&self) -> String {
        (**self).name()
    }

    fn estimate(&self, req: &Request<'_, '_>) -> Estimate {
        (**self).estimate(req)
    }

    fn parallel(&self) -> bool {
        (**self).parallel()
    }

    fn estimate_many(
        &self,
        reqs: &[Request<'_, '_>],
        progress: &dyn Fn(usize, usize),
    ) -> Vec<Estimate> {
        (**self).estimate_many(reqs, progress)
    }
}

/// Estimators tried in order: the first cost that is not `UNKNOWN` wins. When every
/// estimator answers `UNKNOWN`, the cost stays `UNKNOWN`; the search treats that as unusable.
pub struct Chain(pub Vec<Box<dyn Estimator>>);

impl Estimator for Chain {
    fn name(&self) -> String {
        self.0
            .iter()
            .map(|e| e.name())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The first answer that is not `UNKNOWN`, its reason prefixed with the estimator's name;
    /// when all are `UNKNOWN`, every estimator's reason.
    fn estimate(&self, req: &Request<'_, '_>) -> Estimate {
        let mut unknown: Vec<String> = Vec::new();
        for e in &self.0 {
            let answer = e.estimate(req);
            let why = answer.why.map(|w| format!("{}: {w}", e.name()));
            if !answer.cost.is_unknown() {
                return Estimate {
                    cost: answer.cost,
                    why,
                };
            }
            unknown.push(why.unwrap_or_else(|| format!("{}: no estimate", e.name())));
        }
        Estimate::because(Cost::UNKNOWN, unknown.join("; "))
    }

    fn parallel(&self) -> bool {
        self.0.iter().any(|e| e.parallel())
    }

    /// Each estimator in turn prices, as one batch, the requests that every estimator before
    /// it answered `UNKNOWN`.
    fn estimate_many(
        &self,
        reqs: &[Request<'_, '_>],
        progress: &dyn Fn(usize, usize),
    ) -> Vec<Estimate> {
        let mut out: Vec<Option<Estimate>> = vec![None; reqs.len()];
        let mut unknown: Vec<Vec<String>> = vec![Vec::new(); reqs.len()];
        let mut open: Vec<usize> = (0..reqs.len()).collect();
        for e in &self.0 {
            if open.is_empty() {
                break;
            }
            let batch: Vec<Request<'_, '_>> = open
                .iter()
                .map(|&k| Request {
                    graph: reqs[k].graph,
                    program: reqs[k].program,
                    candidate: reqs[k].candidate,
                })
                .collect();
            let answers = e.estimate_many(&batch, progress);
            let mut still = Vec::new();
            for (&k, answer) in open.iter().zip(answers) {
                let why = answer.why.map(|w| format!("{}: {w}", e.name()));
                if answer.cost.is_unknown() {
                    unknown[k].push(why.unwrap_or_else(|| format!("{}: no estimate", e.name())));
                    still.push(k);
                } else {
                    out[k] = Some(Estimate {
                        cost: answer.cost,
                        why,
                    });
                }
            }
            open = still;
        }
        out.into_iter()
            .zip(unknown)
            .map(|(o, u)| o.unwrap_or_else(|| Estimate::because(Cost::UNKNOWN, u.join("; "))))
            .collect()
    }
}

/// A problem with a `--costs` specification or the files it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Options for building estimators from a specification.
#[derive(Clone)]
pub struct SpecOptions {
    /// Time limit for one run of a `cmd:` measurer.
    pub cmd_timeout: std::time::Duration,
    /// The measuring estimator that a `measure` item stands for, handed in by the caller (which
    /// opens it and reads its counters afterwards); `None`: `measure` is refused.
    pub measure: Option<Arc<dyn Estimator>>,
}

impl Default for SpecOptions {
    fn default() -> Self {
        SpecOptions {
            cmd_timeout: std::time::Duration::from_secs(60),
            measure: None,
        }
    }
}

impl fmt::Debug for SpecOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpecOptions")
            .field("cmd_timeout", &self.cmd_timeout)
            .field("measure", &self.measure.as_ref().map(|m| m.name()))
            .finish()
    }
}

/// Builds the estimator chain of a parsed `--costs` specification ([`Spec`]): its items, tried
/// in order. The files of `mock:` and `table:` items are read here.
pub fn from_spec(spec: &Spec, opts: &SpecOptions) -> Result<Chain, SpecError> {
    let mut out: Vec<Box<dyn Estimator>> = Vec::new();
    for item in spec.items() {
        match item {
            Item::Analytic => out.push(Box::new(analytic::Analytic)),
            Item::Measure => match &opts.measure {
                Some(m) => out.push(Box::new(m.clone())),
                None => {
                    return Err(SpecError(
                        "`measure` is not available to this command".to_string(),
                    ))
                }
            },
            Item::Mock(path) => out.push(Box::new(mock::Mock::from_file(path)?)),
            Item::Table(path) => out.push(Box::new(table::Table::from_file(path)?)),
            Item::Cmd(command) => out.push(Box::new(cmd::Command::new(command, opts.cmd_timeout))),
        }
    }
    Ok(Chain(out))
}

/// Reads a JSON file for an estimator.
fn read_json(path: &str) -> Result<serde_json::Value, SpecError> {
    let text = crate::source::read_text(std::path::Path::new(path))
        .map_err(|e| SpecError(format!("cannot read `{path}`: {e}")))?;
    serde_json::from_str(&text).map_err(|e| SpecError(format!("`{path}` is not valid JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_arithmetic_follows_ieee() {
        assert!((Cost::INVALID + Cost::value(1.0)).is_invalid());
        assert!((Cost::UNKNOWN + Cost::value(1.0)).is_unknown());
        assert!((Cost::INVALID + Cost::UNKNOWN).is_unknown());
        assert_eq!(Cost::value(-1.0), Cost::INVALID);
        assert!(Cost::value(f64::NAN).is_unknown());
        assert_eq!(Cost::value(3.0) + Cost::value(2.7), Cost(5.7));
    }

    #[test]
    fn costs_print_like_tvm() {
        assert_eq!(Cost::INVALID.to_string(), "invalid");
        assert_eq!(Cost::UNKNOWN.to_string(), "unknown");
        assert_eq!(Cost::ZERO.to_string(), "0");
        assert_eq!(Cost::value(12.5e-6).to_string(), "12.500000us");
        assert_eq!(Cost::value(999_999.0).to_string(), "999999000000.000000us");
        assert_eq!(Cost::value(1.8e302).to_string(), "1.800000e302s");
        assert_eq!(Cost::value(f64::MAX).to_string(), "1.797693e308s");
    }

    #[test]
    fn finite_costs_never_sum_to_invalid() {
        let big = Cost::value(1.5e308);
        assert_eq!(big + big, Cost(f64::MAX));
        assert!((big + big).is_known());
        assert!((big + Cost::INVALID).is_invalid());
        assert!((big + Cost::UNKNOWN).is_unknown());
        assert_eq!(add_seconds(1.0, 2.0), 3.0);
        assert_eq!(add_seconds(f64::MAX, f64::MAX), f64::MAX);
        assert_eq!(add_seconds(f64::INFINITY, 1.0), f64::INFINITY);
    }

    #[test]
    fn specs_parse_and_reject() {
        let o = SpecOptions::default();
        let from_spec = |s: &str, o: &SpecOptions| Spec::parse(s).and_then(|s| from_spec(&s, o));
        let spec_uses_measure = |s: &str| Spec::parse(s).unwrap().uses_measure();
        assert_eq!(
            from_spec("analytic", &o).map(|c| c.name()),
            Ok("analytic".into())
        );
        assert_eq!(
            from_spec("cmd:'echo 1 + 2'", &o).map(|c| c.name()),
            Ok("cmd".into())
        );
        assert!(from_spec("", &o).is_err());
        assert!(from_spec("mock", &o).is_err());
        assert!(from_spec("fast", &o).is_err());
        assert!(from_spec("cmd:", &o).is_err());
        assert!(from_spec("analytic+", &o).is_err());
        assert!(from_spec("+analytic", &o).is_err());
        assert!(from_spec("mock:/nonexistent.json", &o).is_err());
        // `measure` needs a measurer opened by the caller.
        assert!(from_spec("measure+analytic", &o).is_err());
        assert!(spec_uses_measure(" measure + analytic"));
        assert!(spec_uses_measure("analytic+measure"));
        assert!(!spec_uses_measure("analytic+cmd:measure"));
        assert!(Spec::parse("measured").is_err());
    }

    #[test]
    fn spec_files_are_the_mock_and_table_items() {
        let files = |s: &str| -> Vec<String> {
            Spec::parse(s)
                .unwrap()
                .files()
                .iter()
                .map(|p| p.display().to_string())
                .collect()
        };
        assert_eq!(
            files("table:t.json + analytic+mock:dir/m.json"),
            ["t.json", "dir/m.json"]
        );
        assert_eq!(files("mock:m.json+cmd:cat table:x.json"), ["m.json"]);
        assert!(files("analytic+measure").is_empty());
    }
}
