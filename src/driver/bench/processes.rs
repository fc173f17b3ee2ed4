//! `collage bench --processes N`: the whole comparison repeated in N fresh processes, one after
//! the other, and the spread of its results across them.
//!
//! One process's conditions (where the allocator put the weights, which cores its threads got,
//! what else ran on the machine meanwhile) move every placement of that process alike, so the
//! rounds keep one process's comparison fair but cannot make two processes agree. This command
//! re-executes the same binary with the same arguments (less `--processes`, `--plot` and
//! `--format`, plus `--format json`) N times, sequentially, never two at once; each child's
//! standard error (its progress and diagnostics) goes to this process's, and its JSON report is
//! read from its standard output. The report gives, per placement, the median latency in each
//! process, and the speed-ups of each process (the Collage plan over that process's best
//! baseline, and over ONNX Runtime when it ran) with their median and range.

use super::Request;
use crate::diag::{self, Diagnostic};
use crate::driver::render::Format;
use crate::driver::Outcome;
use serde_json::{json, Value};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The most processes `--processes` takes.
pub const MAX_PROCESSES: usize = 100;

/// One child's run.
struct Run {
    /// Its exit code.
    code: i32,
    /// Its wall time (seconds).
    seconds: f64,
    /// Its JSON report.
    report: Value,
}

/// The arguments of a child: this process's, without `--processes`, `--plot` and `--format`
/// (with their values), then `--format json`. Everything after `--` is kept as it is.
pub fn child_args(args: &[OsString]) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "--" {
            out.push(a.clone());
            out.extend(it.by_ref().cloned());
            break;
        }
        if ["--processes", "--plot", "--format"].contains(&s.as_ref()) {
            it.next();
            continue;
        }
        if ["--processes=", "--plot=", "--format="]
            .iter()
            .any(|p| s.starts_with(p))
        {
            continue;
        }
        out.push(a.clone());
    }
    // Before a `--` (if any), so that it stays a flag.
    let at = out.iter().position(|a| a == "--").unwrap_or(out.len());
    out.splice(at..at, [OsString::from("--format"), OsString::from("json")]);
    out
}

/// Runs the comparison in `req.processes` fresh processes and reports them together.
pub fn run(req: &Request) -> Outcome {
    if req.plot.is_some() {
        diag::emit_alone(Diagnostic::error(
            diag::E2430,
            "`--plot` draws one process's comparison; it cannot be used with `--processes`",
        ));
        return Outcome::Usage;
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            diag::emit_alone(Diagnostic::error(
                diag::E2431,
                format!("cannot find this program to run it again: {e}"),
            ));
            return Outcome::Usage;
        }
    };
    let all: Vec<OsString> = std::env::args_os().skip(1).collect();
    let args = child_args(&all);
    let n = req.processes;
    let mut runs: Vec<Run> = Vec::with_capacity(n);
    for k in 1..=n {
        if req.progress || std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            eprintln!("process {k} of {n}");
        }
        let start = Instant::now();
        let out = Command::new(&exe)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .output();
        let seconds = start.elapsed().as_secs_f64();
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                diag::emit_alone(Diagnostic::error(
                    diag::E2431,
                    format!("process {k} of {n} could not be started: {e}"),
                ));
                return Outcome::InputErrors;
            }
        };
        let report = serde_json::from_slice::<Value>(&out.stdout).ok();
        let code = out.status.code();
        match (code, report) {
            // 1 with a report: a placement's outputs differ (E2404, said by the child).
            (Some(c @ (0 | 1)), Some(report)) if report["placements"].is_array() => {
                runs.push(Run {
                    code: c,
                    seconds,
                    report,
                })
            }
            (code, _) => {
                let how = match code {
                    Some(c) => format!("ended with exit code {c}"),
                    None => "was killed by a signal".to_string(),
                };
                diag::emit_alone(Diagnostic::error(
                    diag::E2431,
                    format!(
                        "process {k} of {n} {how} without a report (its diagnostics are above); the comparison is abandoned"
                    ),
                ));
                return match code {
                    Some(2) => Outcome::Usage,
                    Some(101) => Outcome::Internal,
                    _ => Outcome::InputErrors,
                };
            }
        }
    }
    let summary = Summary::of(&runs);
    let text = match req.format {
        Format::Table => summary.table(req, &runs),
        Format::Json => {
            let mut s =
                serde_json::to_string_pretty(&summary.json(&runs, &args)).unwrap_or_default();
            s.push('\n');
            s
        }
    };
    if let Err(o) = super::super::out(&text) {
        return o;
    }
    if runs.iter().any(|r| r.code != 0) {
        Outcome::InputErrors
    } else {
        Outcome::Ok
    }
}

/// A placement across the processes.
struct Placement {
    name: String,
    label: String,
    /// Its median latency in each process (ms; `None`: it did not run there).
    latency_ms: Vec<Option<f64>>,
}

/// Speed-ups across the processes.
struct Spread {
    /// Per process (`None`: not measured in that process).
    values: Vec<Option<f64>>,
}

impl Spread {
    fn present(&self) -> Vec<f64> {
        self.values.iter().flatten().copied().collect()
    }

    fn stats(&self) -> Option<(f64, f64, f64)> {
        let mut v = self.present();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some((v[0], median_sorted(&v), v[v.len() - 1]))
    }

    fn json(&self) -> Value {
        let s = self.stats();
        json!({
            "values": self.values,
            "min": s.map(|s| s.0),
            "median": s.map(|s| s.1),
            "max": s.map(|s| s.2),
        })
    }
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// What the processes found, side by side.
struct Summary {
    placements: Vec<Placement>,
    /// The Collage plan over each process's best baseline, with that baseline.
    speedup: Spread,
    baselines: Vec<Option<String>>,
    /// The Collage plan over ONNX Runtime (`None` when it ran in no process).
    onnxruntime: Option<Spread>,
}

impl Summary {
    fn of(runs: &[Run]) -> Summary {
        let mut placements: Vec<Placement> = Vec::new();
        for (k, r) in runs.iter().enumerate() {
            for p in r.report["placements"].as_array().into_iter().flatten() {
                let name = p["name"].as_str().unwrap_or("?").to_string();
                let at = match placements.iter().position(|q| q.name == name) {
                    Some(i) => i,
                    None => {
                        placements.push(Placement {
                            name,
                            label: p["label"].as_str().unwrap_or("").to_string(),
                            latency_ms: vec![None; runs.len()],
                        });
                        placements.len() - 1
                    }
                };
                placements[at].latency_ms[k] = p["latency_ms"]["median"].as_f64();
            }
        }
        let speedup = Spread {
            values: runs
                .iter()
                .map(|r| r.report["speedup"]["value"].as_f64())
                .collect(),
        };
        let baselines = runs
            .iter()
            .map(|r| r.report["speedup"]["baseline"].as_str().map(String::from))
            .collect();
        let ort = Spread {
            values: runs
                .iter()
                .map(|r| r.report["speedup"]["onnxruntime"]["value"].as_f64())
                .collect(),
        };
        Summary {
            placements,
            speedup,
            baselines,
            onnxruntime: (!ort.present().is_empty()).then_some(ort),
        }
    }

    fn json(&self, runs: &[Run], args: &[OsString]) -> Value {
        let mut speedup = self.speedup.json();
        speedup["baselines"] = json!(self.baselines);
        speedup["onnxruntime"] = self.onnxruntime.as_ref().map_or(Value::Null, Spread::json);
        json!({
            "processes": runs.len(),
            "arguments": args.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
            "runs": runs.iter().map(|r| json!({
                "exit_code": r.code,
                "elapsed_ms": r.seconds * 1e3,
                "report": r.report,
            })).collect::<Vec<_>>(),
            "placements": self.placements.iter().map(|p| {
                let mut v: Vec<f64> = p.latency_ms.iter().flatten().copied().collect();
                v.sort_by(f64::total_cmp);
                json!({
                    "name": p.name,
                    "label": p.label,
                    "latency_ms": p.latency_ms,
                    "median_ms": (!v.is_empty()).then(|| median_sorted(&v)),
                })
            }).collect::<Vec<_>>(),
            "speedup": speedup,
        })
    }

    fn table(&self, req: &Request, runs: &[Run]) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "model      {} ({} processes, one after the other)",
            req.model.display(),
            runs.len()
        );
        let times: Vec<String> = runs
            .iter()
            .enumerate()
            .map(|(k, r)| format!("{}: {:.2} s", k + 1, r.seconds))
            .collect();
        let _ = writeln!(s, "processes  {}", times.join(", "));
        let _ = writeln!(s);
        let mut head = vec!["placement".to_string()];
        head.extend((1..=runs.len()).map(|k| format!("process {k}")));
        head.push("median".into());
        let mut rows = vec![head];
        for p in &self.placements {
            let mut row = vec![p.label.clone()];
            row.extend(p.latency_ms.iter().map(|v| v.map_or("-".into(), ms)));
            let mut v: Vec<f64> = p.latency_ms.iter().flatten().copied().collect();
            v.sort_by(f64::total_cmp);
            row.push(if v.is_empty() {
                "-".into()
            } else {
                ms(median_sorted(&v))
            });
            rows.push(row);
        }
        let ratio = |v: &Option<f64>| v.map_or("-".into(), |x| format!("x{x:.2}"));
        let mut row = vec!["speed-up".to_string()];
        row.extend(self.speedup.values.iter().map(ratio));
        row.push(
            self.speedup
                .stats()
                .map_or("-".into(), |s| format!("x{:.2}", s.1)),
        );
        rows.push(row);
        if let Some(o) = &self.onnxruntime {
            let mut row = vec!["vs ONNX Runtime".to_string()];
            row.extend(o.values.iter().map(ratio));
            row.push(o.stats().map_or("-".into(), |s| format!("x{:.2}", s.1)));
            rows.push(row);
        }
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        for r in &rows {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                if c == 0 {
                    let _ = write!(line, "{cell:<w$}", w = widths[c]);
                } else {
                    let _ = write!(line, "  {cell:>w$}", w = widths[c]);
                }
            }
            let _ = writeln!(s, "{}", line.trim_end());
        }
        let _ = writeln!(s);
        if let Some((lo, med, hi)) = self.speedup.stats() {
            let mut names: Vec<&str> = self
                .baselines
                .iter()
                .flatten()
                .map(String::as_str)
                .collect();
            names.sort_unstable();
            names.dedup();
            let _ = writeln!(
                s,
                "speed-up   median x{med:.2}, from x{lo:.2} to x{hi:.2} over {} process(es): the Collage plan over each process's best of native alone and the greedy placements ({})",
                self.speedup.present().len(),
                names.join(", ")
            );
        } else {
            let _ = writeln!(
                s,
                "speed-up   - (no process timed the Collage plan and a baseline)"
            );
        }
        if let Some((lo, med, hi)) = self.onnxruntime.as_ref().and_then(Spread::stats) {
            let _ = writeln!(
                s,
                "           median x{med:.2}, from x{lo:.2} to x{hi:.2} over ONNX Runtime (below 1: ONNX Runtime is faster)"
            );
        }
        s
    }
}

/// A latency given in milliseconds, written as the single-process report writes it.
fn ms(v: f64) -> String {
    super::report::ms(v / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn child_arguments_drop_processes_plot_and_format() {
        assert_eq!(
            child_args(&os(&[
                "bench",
                "m.relay",
                "--processes",
                "3",
                "--format=table",
                "--plot",
                "a.svg",
                "--threads",
                "2"
            ])),
            os(&["bench", "m.relay", "--threads", "2", "--format", "json"])
        );
        assert_eq!(
            child_args(&os(&["bench", "--processes=2", "--", "--format"])),
            os(&["bench", "--format", "json", "--", "--format"])
        );
    }

    #[test]
    fn medians_and_ranges() {
        let s = Spread {
            values: vec![Some(1.6), None, Some(0.97), Some(1.71)],
        };
        assert_eq!(s.stats(), Some((0.97, 1.6, 1.71)));
        assert_eq!(median_sorted(&[1.0, 2.0]), 1.5);
        assert_eq!(Spread { values: vec![None] }.stats(), None);
    }
}
