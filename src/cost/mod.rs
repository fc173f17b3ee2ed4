//! Costs and cost estimators (collage-semantics §12–§13).
//!
//! A [`Cost`] is a number of seconds with two special values: [`Cost::INVALID`] (+∞: the target
//! cannot run the candidate) and [`Cost::UNKNOWN`] (NaN: this estimator cannot say). An
//! [`Estimator`] prices one candidate on its target. Estimators are chained ([`Chain`]): the first
//! one that knows the cost decides, so a `table` of measurements can fall back to the `analytic`
//! model for candidates it lacks.
//!
//! The estimator contract:
//! * The result depends only on the candidate's *structure* (operators, attributes, types,
//!   dataflow between its nodes and its nested functions) and its target, never on where the
//!   candidate sits in the model. [`cache::CostCache`] relies on this and asks once per
//!   structure and target.
//! * `UNKNOWN` means "ask the next estimator". `INVALID` means the candidate cannot run on the
//!   target; the search never takes it. Otherwise the value is finite and non-negative.
//! * Estimators are `Sync`: the cache may call one estimator from several threads at once when
//!   it says [`Estimator::parallel`].
//! * Host candidates are never estimated; they cost zero.

pub mod analytic;
pub mod cache;
pub mod cmd;
pub mod key;
pub mod mock;
pub mod table;

use crate::enumerate::{Candidate, DataflowGraph};
use crate::ruletree::{Program, Target};
use std::fmt;

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
    /// Plain floating-point addition: `INVALID + x` is `INVALID`, `UNKNOWN + x` is `UNKNOWN`.
    fn add(self, o: Cost) -> Cost {
        Cost(self.0 + o.0)
    }
}

impl fmt::Display for Cost {
    /// `invalid`, `unknown`, `0`, or microseconds with six decimals (`12.500000us`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_invalid() {
            write!(f, "invalid")
        } else if self.is_unknown() {
            write!(f, "unknown")
        } else if self.0 == 0.0 {
            write!(f, "0")
        } else {
            write!(f, "{:.6}us", self.0 * 1e6)
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

/// Prices candidates. See the module documentation for the contract.
pub trait Estimator: Send + Sync {
    /// A short name for reports (`mock`, `analytic`, ...).
    fn name(&self) -> String;
    /// The cost of the request's candidate on its target.
    fn estimate(&self, req: &Request<'_, '_>) -> Cost;
    /// Whether the cache should estimate many candidates at once on several threads (for slow
    /// estimators such as external measurers).
    fn parallel(&self) -> bool {
        false
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

    fn estimate(&self, req: &Request<'_, '_>) -> Cost {
        for e in &self.0 {
            let c = e.estimate(req);
            if !c.is_unknown() {
                return c;
            }
        }
        Cost::UNKNOWN
    }

    fn parallel(&self) -> bool {
        self.0.iter().any(|e| e.parallel())
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
#[derive(Clone, Debug)]
pub struct SpecOptions {
    /// Time limit for one run of a `cmd:` measurer.
    pub cmd_timeout: std::time::Duration,
}

impl Default for SpecOptions {
    fn default() -> Self {
        SpecOptions {
            cmd_timeout: std::time::Duration::from_secs(60),
        }
    }
}

/// Builds the estimator chain of a `--costs` specification: comma-free items separated by
/// `+` are tried in order (`table:m.json+analytic`). Items: `analytic`, `mock:FILE.json`,
/// `table:FILE.json`, `cmd:COMMAND` (a `cmd:` item takes the rest of the specification).
pub fn from_spec(spec: &str, opts: &SpecOptions) -> Result<Chain, SpecError> {
    let mut out: Vec<Box<dyn Estimator>> = Vec::new();
    let mut rest = spec.trim();
    while !rest.is_empty() {
        if let Some(command) = rest.strip_prefix("cmd:") {
            let command = command.trim();
            let command = command
                .strip_prefix('\'')
                .and_then(|c| c.strip_suffix('\''))
                .unwrap_or(command);
            if command.trim().is_empty() {
                return Err(SpecError("`cmd:` needs a command".into()));
            }
            out.push(Box::new(cmd::Command::new(command, opts.cmd_timeout)));
            break;
        }
        let (item, tail) = match rest.find('+') {
            Some(p) => (&rest[..p], &rest[p + 1..]),
            None => (rest, ""),
        };
        let item = item.trim();
        if item.is_empty() || (rest.contains('+') && tail.trim().is_empty()) {
            return Err(SpecError(format!(
                "empty item in the cost specification `{spec}`"
            )));
        }
        rest = tail.trim();
        let (kind, arg) = match item.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (item, None),
        };
        match (kind, arg) {
            ("analytic", None) => out.push(Box::new(analytic::Analytic)),
            ("mock", Some(path)) => out.push(Box::new(mock::Mock::from_file(path)?)),
            ("table", Some(path)) => out.push(Box::new(table::Table::from_file(path)?)),
            ("mock" | "table", None) => {
                return Err(SpecError(format!(
                    "`{kind}` needs a file: `{kind}:FILE.json`"
                )))
            }
            _ => {
                return Err(SpecError(format!(
                    "unknown cost estimator `{item}`; expected `analytic`, `mock:FILE.json`, \
                     `table:FILE.json` or `cmd:COMMAND`"
                )))
            }
        }
    }
    if out.is_empty() {
        return Err(SpecError("the cost specification is empty".into()));
    }
    Ok(Chain(out))
}

/// Reads a JSON file for an estimator.
fn read_json(path: &str) -> Result<serde_json::Value, SpecError> {
    let text = std::fs::read_to_string(path)
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
    }

    #[test]
    fn specs_parse_and_reject() {
        let o = SpecOptions::default();
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
    }
}
