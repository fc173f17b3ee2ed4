//! TVM's `MockCostEstimator` (docs/collage.md, "Costs"): a candidate with `n` operator calls
//! costs `c × Σ_{k<n} 0.9^k`, where `c` is its target's base cost. The sum is accumulated in
//! the same order and with the same `pow` as TVM, so costs compare bit for bit with its tests
//! (`3 + 3·0.9 == 5.7`).

use super::{read_json, Cost, Estimate, Estimator, Request, SpecError};

/// The largest base cost: a candidate costs `c × Σ_{k<n} 0.9^k < 10c`, so every mock cost is
/// within [`super::MAX_SECONDS`].
pub const MAX_BASE: f64 = super::MAX_SECONDS / 10.0;

/// The mock estimator: base cost per target name.
pub struct Mock {
    /// (target name, base cost), in file order.
    pub costs: Vec<(String, f64)>,
}

impl Mock {
    /// Reads `{"targets": {"<target>": <base cost>, ...}}`.
    pub fn from_file(path: &str) -> Result<Mock, SpecError> {
        Mock::from_json(&read_json(path)?).map_err(|e| SpecError(format!("`{path}`: {e}")))
    }

    /// Builds the estimator from the JSON value.
    pub fn from_json(v: &serde_json::Value) -> Result<Mock, SpecError> {
        let Some(targets) = v.get("targets").and_then(|t| t.as_object()) else {
            return Err(SpecError(
                "expected an object `{\"targets\": {\"<target>\": <cost>, ...}}`".into(),
            ));
        };
        let mut costs = Vec::new();
        for (name, c) in targets {
            match c.as_f64() {
                Some(x) if x > MAX_BASE => {
                    return Err(SpecError(format!(
                        "the cost of target `{name}` ({c}) is above the ceiling of {MAX_BASE} s \
                         (a candidate costs less than ten times its base cost, and at most {} s)",
                        super::MAX_SECONDS
                    )))
                }
                Some(x) if x.is_finite() && x >= 0.0 => costs.push((name.clone(), x)),
                _ => {
                    return Err(SpecError(format!(
                        "the cost of target `{name}` must be a non-negative number"
                    )))
                }
            }
        }
        Ok(Mock { costs })
    }

    /// TVM's formula for `n` operator calls at base cost `c`. A sum past the largest finite
    /// number saturates there ([`super::add_seconds`]): the candidate is very dear, not
    /// unusable.
    pub fn formula(c: f64, n: usize) -> f64 {
        let mut total = 0.0;
        for k in 0..n {
            total = super::add_seconds(total, c * 0.9f64.powf(k as f64));
        }
        total
    }
}

/// Number of operator calls among the candidate's nodes.
pub fn op_calls(req: &Request<'_, '_>) -> usize {
    let g = req.graph;
    req.candidate
        .sub_graph
        .inside
        .iter()
        .filter(|&i| g.is_op_call(i))
        .count()
}

impl Estimator for Mock {
    fn name(&self) -> String {
        "mock".into()
    }

    /// `UNKNOWN` for a target the file does not price.
    fn estimate(&self, req: &Request<'_, '_>) -> Estimate {
        let name = &req.target().name;
        match self.costs.iter().find(|(t, _)| t == name) {
            Some(&(_, c)) => Cost::value(Mock::formula(c, op_calls(req))).into(),
            None => Estimate::because(
                Cost::UNKNOWN,
                format!("the file gives no cost for target `{name}`"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Mock;

    #[test]
    fn formula_matches_tvm_bit_for_bit() {
        assert_eq!(Mock::formula(3.0, 2), 5.7);
        assert_eq!(Mock::formula(1.0, 0), 0.0);
        assert_eq!(Mock::formula(2.0, 1), 2.0);
        assert!((Mock::formula(1.0, 5) - 4.0951).abs() < 1e-12);
        // Finite base costs whose sum overflows saturate instead of becoming unusable.
        assert_eq!(Mock::formula(1.5e308, 3), f64::MAX);
    }

    #[test]
    fn json_is_checked() {
        let ok = serde_json::json!({"targets": {"tvm": 1, "cutlass": 0.5}});
        assert_eq!(Mock::from_json(&ok).map(|m| m.costs.len()), Ok(2));
        assert!(Mock::from_json(&serde_json::json!({"tvm": 1})).is_err());
        assert!(Mock::from_json(&serde_json::json!({"targets": {"tvm": -1}})).is_err());
        assert!(Mock::from_json(&serde_json::json!({"targets": {"tvm": "x"}})).is_err());
    }
}
