//! What several commands' reports share: the report format, how nodes and costs are written,
//! and the measuring estimator's lines.

use crate::ir::Module;
use crate::planning::cost::Cost;
use crate::planning::enumerate::DataflowGraph;
use crate::runtime::measure::Measure;

/// Report formats (`--format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table.
    Table,
    /// JSON.
    Json,
}

/// How a node is named in listings: its `%name` in the source, else `#index`.
pub fn node_name(m: &Module, g: &DataflowGraph<'_>, i: usize) -> String {
    g.graph
        .binding(m, crate::analysis::dataflow::NodeIdx(i as u32))
        .unwrap_or_else(|| format!("#{i}"))
}

/// A cost in seconds as costs are written.
pub fn fmt_cost(s: f64) -> String {
    Cost::value(s).to_string()
}

/// A number for JSON: finite numbers as numbers, others (NaN, infinities) as strings.
pub fn json_num(v: f64) -> serde_json::Value {
    if v.is_finite() {
        serde_json::json!(v)
    } else {
        serde_json::json!(v.to_string())
    }
}

/// One output's comparison for JSON reports: its name, whether it is within the tolerance, the
/// largest differences, the mismatched elements and the tolerance used.
pub fn output_diff_json(
    i: usize,
    d: &crate::runtime::exec::compare::Diff,
    rtol: f64,
    atol: f64,
) -> serde_json::Value {
    serde_json::json!({
        "name": format!("output{i}"),
        "within_tolerance": d.within(),
        "max_abs_diff": json_num(d.max_abs),
        "max_rel_diff": json_num(d.max_rel),
        "mismatched": d.mismatched,
        "rtol": rtol,
        "atol": atol,
    })
}

/// One line for table reports.
pub fn summary_line(m: &Measure) -> String {
    let c = m.counters();
    format!(
        "measure: {} timed, {} invalid, {} from the cache, {} left to the next estimator; compiling {:.1} s, timing {:.1} s; {} thread(s), {} candidates{}; cache `{}`",
        c.measured,
        c.invalid,
        c.cached,
        c.unknown,
        c.compile_seconds,
        c.measure_seconds,
        m.config().threads,
        m.candidate_timing(),
        match m.weights_kept() {
            Some(b) => format!(
                ", weights kept (the model's {:.1} MiB fit in half the last-level cache)",
                b as f64 / (1 << 20) as f64
            ),
            None => String::new(),
        },
        m.database().display()
    )
}

/// The `measure` object of JSON reports.
pub fn summary_json(m: &Measure) -> serde_json::Value {
    let c = m.counters();
    serde_json::json!({
        "measured": c.measured,
        "invalid": c.invalid,
        "cached": c.cached,
        "unknown": c.unknown,
        "compile_seconds": c.compile_seconds,
        "measure_seconds": c.measure_seconds,
        "threads": m.config().threads,
        "candidates": m.candidate_timing(),
        "weights_kept": m.weights_kept().is_some(),
        "database": m.database().display().to_string(),
        "backends": m.setup().names(),
    })
}
