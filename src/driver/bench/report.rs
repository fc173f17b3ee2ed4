//! The reports of `collage bench`: the table (with `--profile`, each placement's partitions)
//! and the JSON.

use super::Request;
use crate::driver::render;
use crate::pipeline::placements::{label_of, Grouping, PartTime, Row, Speedup, Status};
use crate::planning::partition::Plan;
use crate::rules::ruletree::Program;
use crate::runtime::measure::Measure;
use std::fmt::Write as _;

/// Everything the reports show.
pub struct Report<'a> {
    pub(super) req: &'a Request,
    pub(super) program: &'a Program,
    pub(super) threads: usize,
    pub(super) rows: &'a [Row],
    pub(super) speedup: Option<&'a Speedup>,
    pub(super) grouping: Option<&'a Grouping>,
    pub(super) plan: &'a Plan,
    pub(super) partition_ms: f64,
    pub(super) reference_ms: f64,
    pub(super) measurer: Option<&'a Measure>,
    pub(super) elapsed_ms: f64,
}

/// A latency given in seconds, written in milliseconds (fewer decimals for larger values).
pub(super) fn ms(s: f64) -> String {
    let v = s * 1e3;
    if v >= 100.0 {
        format!("{v:.1} ms")
    } else if v >= 1.0 {
        format!("{v:.2} ms")
    } else {
        format!("{v:.4} ms")
    }
}

impl Report<'_> {
    fn targets(&self) -> Vec<String> {
        self.program
            .targets
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    pub(super) fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "model      {} (seed {}, {} thread(s))",
            self.req.model.display(),
            self.req.measure.seed,
            self.threads
        );
        let _ = writeln!(
            s,
            "targets    {}; costs {}",
            self.targets().join(", "),
            self.req.costs
        );
        let _ = writeln!(
            s,
            "partition  {:.1} s: {} candidates, {} distinct estimates",
            self.partition_ms / 1e3,
            self.plan.stats.candidates,
            self.plan.stats.estimates
        );
        if let Some(m) = self.measurer {
            let _ = writeln!(s, "           {}", render::summary_line(m));
        }
        let _ = writeln!(
            s,
            "reference  {} (reference interpreter, one run; every placement's outputs are checked against it)",
            ms(self.reference_ms / 1e3)
        );
        let head = [
            "placement",
            "partitions",
            "estimated",
            "latency",
            "spread",
            "est/meas",
            "speed-up",
            "outputs",
        ];
        let cells = self.cells();
        let mut width = head.map(str::len);
        for r in &cells {
            for (w, c) in width.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let right = [false, false, true, true, true, true, true, false];
        let line = |row: &[String]| {
            let mut l = String::new();
            for (i, c) in row.iter().enumerate() {
                if i > 0 {
                    l.push_str("  ");
                }
                let w = width[i];
                if right[i] {
                    let _ = write!(l, "{c:>w$}");
                } else {
                    let _ = write!(l, "{c:<w$}");
                }
            }
            l.trim_end().to_string()
        };
        let _ = writeln!(s);
        let _ = writeln!(s, "{}", line(&head.map(str::to_string)));
        for r in &cells {
            let _ = writeln!(s, "{}", line(r));
        }
        let _ = writeln!(s);
        if let Some(g) = self.grouping {
            let _ = writeln!(s, "{}", self.groups_line(g));
        }
        match self.speedup {
            Some(sp) => {
                let _ = writeln!(
                    s,
                    "speed-up  x{:.2}: the Collage plan ({}) over the best of native alone and the greedy placements ({}, {})",
                    sp.baseline_seconds / sp.collage_seconds,
                    ms(sp.collage_seconds),
                    label_of(&sp.baseline, &self.native()),
                    ms(sp.baseline_seconds)
                );
                if let (Some(o), Some(r)) = (sp.onnxruntime_seconds, self.onnxruntime_row()) {
                    let _ = writeln!(
                        s,
                        "          x{:.2}: the Collage plan over {} ({}, {} intra-op thread(s))",
                        o / sp.collage_seconds,
                        r.label,
                        ms(o),
                        r.onnxruntime
                            .as_ref()
                            .map_or(self.threads, |i| i.settings.intra_threads)
                    );
                }
            }
            None => {
                let _ = writeln!(
                    s,
                    "speed-up  - (the Collage plan or every baseline could not run)"
                );
            }
        }
        let _ = writeln!(s, "elapsed    {:.1} s", self.elapsed_ms / 1e3);
        if self.req.profile {
            for r in self.rows {
                self.profile_table(&mut s, r);
            }
        }
        s
    }

    /// How the placements were grouped under the memory limit, for people.
    fn groups_line(&self, g: &Grouping) -> String {
        let gb = |b: u64| format!("{:.2} GB", b as f64 / 1e9);
        let label = |n: &str| {
            self.rows
                .iter()
                .find(|r| r.name == n)
                .map_or(n.to_string(), |r| r.label.clone())
        };
        let groups: Vec<String> = g
            .groups
            .iter()
            .enumerate()
            .map(|(k, names)| {
                let names: Vec<String> = names.iter().map(|n| label(n)).collect();
                format!("{}: {}", k + 1, names.join(", "))
            })
            .collect();
        format!(
            "groups     built and timed in {} group(s) under --max-memory {} ({} before any placement), each with the anchor {}; ratios across groups go through the anchor\n           {}",
            g.groups.len(),
            gb(g.limit),
            gb(g.base),
            label(&g.anchor),
            groups.join("; ")
        )
    }

    /// The table's cells: one row per placement.
    fn cells(&self) -> Vec<[String; 8]> {
        let collage = self
            .rows
            .iter()
            .find(|r| r.name == "collage")
            .and_then(|r| r.compared_seconds(self.rows));
        let mut cells: Vec<[String; 8]> = Vec::new();
        for r in self.rows {
            let parts: Vec<String> = r
                .partitions
                .iter()
                .map(|(t, n)| format!("{t} {n}"))
                .collect();
            let est = r.estimated.map_or("-".into(), ms);
            let (lat, spread, ratio, speed, outputs) = match (&r.status, r.timing(self.rows)) {
                (Status::Skipped(why), _) => (
                    "skipped".to_string(),
                    String::new(),
                    String::new(),
                    String::new(),
                    why.clone(),
                ),
                (st, Some(t)) => {
                    let ratio = r
                        .estimated
                        .map_or("-".into(), |e| format!("{:.2}", e / t.seconds));
                    let speed = match collage {
                        Some(c) if r.name != "collage" => r
                            .compared_seconds(self.rows)
                            .map_or(String::new(), |x| format!("x{:.2}", x / c)),
                        _ => String::new(),
                    };
                    let outputs = match st {
                        Status::Same(o) => format!("same plan as {o}"),
                        Status::Ran {
                            diffs, fallbacks, ..
                        } => {
                            let worst = diffs.iter().map(|d| d.0.max_abs).fold(0.0, f64::max);
                            let ok = diffs.iter().all(|d| d.0.within());
                            let fb = if *fallbacks > 0 {
                                format!("; {fallbacks} unit(s) fell back")
                            } else {
                                String::new()
                            };
                            format!(
                                "{} (max abs diff {worst:.1e}){fb}",
                                if ok { "ok" } else { "DIFFER" }
                            )
                        }
                        Status::Skipped(_) => String::new(),
                    };
                    (
                        ms(t.seconds),
                        format!("±{:.1}%", t.spread * 100.0),
                        ratio,
                        speed,
                        outputs,
                    )
                }
                (_, None) => Default::default(),
            };
            cells.push([
                r.label.clone(),
                if parts.is_empty() {
                    "-".into()
                } else {
                    parts.join(", ")
                },
                est,
                lat,
                spread,
                ratio,
                speed,
                outputs,
            ]);
        }
        cells
    }

    /// ONNX Runtime's row, when it is a placement.
    fn onnxruntime_row(&self) -> Option<&Row> {
        self.rows.iter().find(|r| r.onnxruntime.is_some())
    }

    /// One placement's partitions: estimate beside time inside the model, dearest first.
    fn profile_table(&self, s: &mut String, r: &Row) {
        let Status::Ran {
            profile, timing, ..
        } = &r.status
        else {
            return;
        };
        if r.onnxruntime.is_some() {
            // One session: no partitions to profile.
            return;
        }
        let in_kernels: f64 = profile.iter().filter_map(|p| p.measured).sum();
        let estimated: f64 = profile.iter().map(|p| p.estimated).sum();
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "profile of {}: {} partitions estimated {}, {} in their kernels of {} per run",
            r.label,
            profile.len(),
            ms(estimated),
            ms(in_kernels),
            ms(timing.seconds)
        );
        let mut order: Vec<&PartTime> = profile.iter().collect();
        order.sort_by(|a, b| {
            b.measured
                .unwrap_or(0.0)
                .total_cmp(&a.measured.unwrap_or(0.0))
                .then(a.name.cmp(&b.name))
        });
        let _ = writeln!(
            s,
            "  {:<30} {:<9} {:>5} {:>11} {:>11} {:>8}  operators",
            "partition", "target", "cands", "estimated", "in model", "est/meas"
        );
        for p in order {
            let (meas, ratio) = match p.measured {
                Some(m) if m > 0.0 => (ms(m), format!("{:.2}", p.estimated / m)),
                _ => ("-".to_string(), "-".to_string()),
            };
            let ops: String = p.operators.chars().take(60).collect();
            let _ = writeln!(
                s,
                "  {:<30} {:<9} {:>5} {:>11} {:>11} {:>8}  {ops}",
                p.name,
                p.target,
                p.candidates,
                ms(p.estimated),
                meas,
                ratio
            );
        }
    }

    pub(super) fn native(&self) -> String {
        self.program
            .targets
            .iter()
            .find(|t| {
                t.compiler.is_none() && !t.is_host && crate::runtime::backend::registry::on_cpu(t)
            })
            .map_or("native".to_string(), |t| t.name.clone())
    }

    pub(super) fn json(&self) -> String {
        let v = self.json_value();
        format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
    }

    /// The JSON report as a value.
    pub(super) fn json_value(&self) -> serde_json::Value {
        use serde_json::json;
        let rows: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|r| {
                let timing = r.timing(self.rows);
                let (status, reason, same_as) = match &r.status {
                    Status::Ran { .. } => ("ran", None, None),
                    Status::Same(o) => ("same", None, Some(o.clone())),
                    Status::Skipped(w) => ("skipped", Some(w.clone()), None),
                };
                let mut v = json!({
                    "name": r.name,
                    "label": r.label,
                    "status": status,
                    "reason": reason,
                    "same_as": same_as,
                    "estimated_ms": r.estimated.map(|e| e * 1e3),
                    "partitions": r.partitions,
                    "latency_ms": timing.map(|t| json!({
                        "median": t.seconds * 1e3,
                        "spread": t.spread,
                        "min": t.repeats.iter().copied().fold(f64::INFINITY, f64::min) * 1e3,
                        "max": t.repeats.iter().copied().fold(0.0, f64::max) * 1e3,
                        "repeats": t.repeats.len(),
                        "first_call": t.first_call * 1e3,
                    })),
                    "estimate_ratio": match (r.estimated, timing) {
                        (Some(e), Some(t)) if t.seconds > 0.0 => Some(e / t.seconds),
                        _ => None,
                    },
                    "outputs_within_tolerance": r.outputs_ok(self.rows),
                    "group": r.group,
                    "relative_to_anchor": r.relative,
                    "memory": r.footprint.map(|f| json!({
                        "kept_bytes": f.kept,
                        "peak_bytes": f.peak,
                    })),
                });
                if let Some(i) = &r.onnxruntime {
                    v["onnxruntime"] = json!({
                        "version": i.version,
                        "library": i.library.display().to_string(),
                        "execution_provider": "CPU",
                        "graph_optimization": "all",
                        "intra_op_threads": i.settings.intra_threads,
                        "inter_op_threads": 1,
                        "execution_mode": "sequential",
                        "allow_spinning": i.settings.spinning,
                        "open_ms": i.open_seconds * 1e3,
                    });
                }
                if let Status::Ran {
                    kernels,
                    fallbacks,
                    diffs,
                    profile,
                    ..
                } = &r.status
                {
                    v["profile"] = json!(profile
                        .iter()
                        .map(|p| json!({
                            "partition": p.name,
                            "target": p.target,
                            "operators": p.operators,
                            "estimated_ms": p.estimated * 1e3,
                            "candidates": p.candidates,
                            "in_model_ms": p.measured.map(|m| m * 1e3),
                        }))
                        .collect::<Vec<_>>());
                    v["kernels"] = json!(kernels);
                    v["fallbacks"] = json!(fallbacks);
                    v["outputs"] = json!(diffs
                        .iter()
                        .enumerate()
                        .map(|(i, (d, rtol, atol))| render::output_diff_json(i, d, *rtol, *atol))
                        .collect::<Vec<_>>());
                }
                v
            })
            .collect();
        let mut partition = json!({
            "elapsed_ms": self.partition_ms,
            "candidates": self.plan.stats.candidates,
            "estimates": self.plan.stats.estimates,
            "total_cost": self.plan.total,
        });
        if let Some(m) = self.measurer {
            partition["measure"] = render::summary_json(m);
        }
        json!({
            "model": self.req.model.display().to_string(),
            "seed": self.req.measure.seed,
            "threads": self.threads,
            "costs": self.req.costs.as_str(),
            "targets": self.targets(),
            "partition": partition,
            "reference_ms": self.reference_ms,
            "placements": rows,
            "speedup": self.speedup.map(|sp| json!({
                "baseline": sp.baseline,
                "baseline_ms": sp.baseline_seconds * 1e3,
                "collage_ms": sp.collage_seconds * 1e3,
                "value": sp.baseline_seconds / sp.collage_seconds,
                "onnxruntime": sp.onnxruntime_seconds.map(|o| json!({
                    "onnxruntime_ms": o * 1e3,
                    "value": o / sp.collage_seconds,
                })),
            })),
            "grouping": self.grouping.map(|g| json!({
                "max_memory_bytes": g.limit,
                "base_bytes": g.base,
                "anchor": g.anchor,
                "groups": g.groups,
            })),
            "elapsed_ms": self.elapsed_ms,
        })
    }
}
