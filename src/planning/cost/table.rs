//! Measured costs from a file: `{"costs": {"<fingerprint>": <seconds> | "invalid", ...}}`,
//! keyed by [`crate::planning::enumerate::key::fingerprint`] (which includes the target's name).
//! `collage candidates --json` prints every candidate's `fingerprint`, which is how a measurement
//! harness finds the keys. Candidates the table lacks are `UNKNOWN`, so a chain such as
//! `table:m.json+analytic` prices them with the next estimator.

use super::{read_json, Cost, Estimate, Estimator, Request, SpecError};
use crate::planning::enumerate::key;
use std::collections::BTreeMap;

/// The table estimator.
pub struct Table {
    costs: BTreeMap<String, Cost>,
}

impl Table {
    /// Reads the table file.
    pub fn from_file(path: &str) -> Result<Table, SpecError> {
        Table::from_json(&read_json(path)?).map_err(|e| SpecError(format!("`{path}`: {e}")))
    }

    /// Builds the table from the JSON value.
    pub fn from_json(v: &serde_json::Value) -> Result<Table, SpecError> {
        let Some(entries) = v.get("costs").and_then(|t| t.as_object()) else {
            return Err(SpecError(
                "expected an object `{\"costs\": {\"<fingerprint>\": <seconds>, ...}}`".into(),
            ));
        };
        let mut costs = BTreeMap::new();
        for (fp, c) in entries {
            let cost = match c {
                serde_json::Value::String(s) if s == "invalid" => Cost::INVALID,
                _ => match c.as_f64().map(super::check_seconds) {
                    Some(Ok(x)) => Cost::value(x),
                    Some(Err(why)) => {
                        return Err(SpecError(format!(
                            "the cost of `{fp}` ({c}) {why}; a cost is seconds from 0 to {} \
                             or \"invalid\"",
                            super::MAX_SECONDS
                        )))
                    }
                    None => {
                        return Err(SpecError(format!(
                            "the cost of `{fp}` must be non-negative seconds or \"invalid\""
                        )))
                    }
                },
            };
            costs.insert(fp.clone(), cost);
        }
        Ok(Table { costs })
    }
}

impl Estimator for Table {
    fn name(&self) -> String {
        "table".into()
    }

    fn estimate(&self, req: &Request<'_, '_>) -> Estimate {
        let fp = key::fingerprint(req.graph, req.candidate, &req.target().name);
        match self.costs.get(&fp) {
            Some(&c) if c.is_known() => c.into(),
            Some(&c) => Estimate::because(c, format!("the table marks fingerprint {fp} {c}")),
            None => Estimate::because(Cost::UNKNOWN, format!("no entry for fingerprint {fp}")),
        }
    }
}
