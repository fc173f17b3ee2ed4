//! The report of `collage run`: the table and the JSON.

use super::{Comparison, Request};
use crate::driver::render::output_diff_json;
use crate::runtime::backend::native::Stats;
use crate::runtime::exec::compare::Summary;
use crate::runtime::exec::executor::Executable;
use crate::runtime::measure::protocol::median;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Peak resident memory of this process (Linux), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Everything the report shows.
pub(super) struct RunReport<'a> {
    pub(super) req: &'a Request,
    /// The native backend's statistics, cache directory and version.
    pub(super) native: Option<(Stats, Option<PathBuf>, String)>,
    /// Wall time of compiling the model (ms).
    pub(super) compile_ms: f64,
    pub(super) x: &'a Executable,
    pub(super) input_sources: &'a [String],
    pub(super) summaries: &'a [Summary],
    pub(super) times: &'a [f64],
    pub(super) peak: u64,
    pub(super) comparisons: &'a [Comparison],
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn shape_text(s: &[usize]) -> String {
    let parts: Vec<String> = s.iter().map(|d| d.to_string()).collect();
    if parts.len() == 1 {
        format!("({},)", parts[0])
    } else {
        format!("({})", parts.join(", "))
    }
}

fn num(v: Option<f64>) -> String {
    match v {
        Some(x) => format!("{x:.6}"),
        None => "-".to_string(),
    }
}

impl RunReport<'_> {
    fn backends(&self) -> BTreeMap<String, usize> {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for k in self.x.kernels() {
            *by.entry(k.backend.clone()).or_default() += 1;
        }
        by
    }

    pub(super) fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "model    {}", self.req.model.display());
        let by: Vec<String> = self
            .backends()
            .iter()
            .map(|(b, n)| format!("{b} {n}"))
            .collect();
        let _ = writeln!(
            s,
            "kernels  {} ({}); {} thread(s); seed {}",
            self.x.kernels().len(),
            by.join(", "),
            self.x.threads,
            self.req.seed
        );
        if let Some((st, dir, version)) = &self.native {
            let _ = writeln!(
                s,
                "native   {} unit(s) compiled to {} distinct kernel(s): {} compiled in {} compiler run(s), {} from the cache; {} fell back; compilation {:.0} ms (C compiler {:.0} ms)",
                st.kernels,
                st.distinct,
                st.compiled,
                st.compiler_runs,
                st.cached,
                st.fallbacks,
                self.compile_ms,
                st.compile_seconds * 1e3
            );
            let _ = writeln!(
                s,
                "         {version}; cache {}",
                dir.as_ref()
                    .map_or("none".to_string(), |d| d.display().to_string())
            );
        }
        for (i, p) in self.x.inputs.iter().enumerate() {
            let _ = writeln!(
                s,
                "input    %{}: {} ({})",
                p.name, p.shape, self.input_sources[i]
            );
        }
        let rows: Vec<[String; 7]> = self
            .summaries
            .iter()
            .enumerate()
            .map(|(i, o)| {
                [
                    format!("output{i}"),
                    shape_text(&o.shape),
                    o.dtype.to_string(),
                    num(o.min),
                    num(o.max),
                    num(o.mean),
                    o.checksum.clone(),
                ]
            })
            .collect();
        let head = ["output", "shape", "dtype", "min", "max", "mean", "crc32"];
        let mut width = head.map(str::len);
        for r in &rows {
            for (w, c) in width.iter_mut().zip(r) {
                *w = (*w).max(c.len());
            }
        }
        let line = |cells: &[String]| {
            let mut l = String::new();
            for (i, (c, w)) in cells.iter().zip(width).enumerate() {
                if i > 0 {
                    l.push_str("  ");
                }
                let _ = write!(l, "{c:<w$}");
            }
            l.trim_end().to_string()
        };
        let _ = writeln!(s, "{}", line(&head.map(str::to_string)));
        for r in &rows {
            let _ = writeln!(s, "{}", line(r));
        }
        let (lo, hi) = self
            .times
            .iter()
            .fold((f64::INFINITY, 0f64), |(a, b), &t| (a.min(t), b.max(t)));
        let _ = writeln!(
            s,
            "latency  {:.3} ms median, {:.3} ms min, {:.3} ms max ({} run(s) after {} warm-up)",
            median(self.times),
            lo,
            hi,
            self.times.len(),
            self.req.warmup
        );
        let rss = peak_rss().map_or(String::new(), |r| format!("; process peak RSS {}", mib(r)));
        let _ = writeln!(
            s,
            "memory   peak {} of live tensors ({} of constants){rss}",
            mib(self.peak),
            mib(self.x.const_bytes)
        );
        for c in self.comparisons {
            for (i, (d, rtol, atol)) in c.diffs.iter().enumerate() {
                let verdict = if d.identical {
                    "identical".to_string()
                } else if d.within() {
                    format!(
                        "within tolerance (max abs {:.3e}, max rel {:.3e}; rtol {rtol}, atol {atol})",
                        d.max_abs, d.max_rel
                    )
                } else {
                    format!(
                        "DIFFERS: {} element(s) beyond rtol {rtol}, atol {atol} (max abs {:.3e}, max rel {:.3e})",
                        d.mismatched, d.max_abs, d.max_rel
                    )
                };
                let _ = writeln!(s, "compare  {} output{i}: {verdict}", c.label());
            }
        }
        s
    }

    pub(super) fn json(&self) -> String {
        let inputs: Vec<serde_json::Value> = self
            .x
            .inputs
            .iter()
            .zip(self.input_sources)
            .map(|(p, src)| {
                serde_json::json!({
                    "name": p.name,
                    "shape": p.shape.dims,
                    "dtype": p.shape.dtype.to_string(),
                    "source": src,
                })
            })
            .collect();
        let outputs: Vec<serde_json::Value> = self
            .summaries
            .iter()
            .enumerate()
            .map(|(i, o)| {
                serde_json::json!({
                    "name": format!("output{i}"),
                    "shape": o.shape,
                    "dtype": o.dtype.to_string(),
                    "min": o.min,
                    "max": o.max,
                    "mean": o.mean,
                    "checksum": o.checksum,
                    "non_finite": o.non_finite,
                })
            })
            .collect();
        let (lo, hi) = self
            .times
            .iter()
            .fold((f64::INFINITY, 0f64), |(a, b), &t| (a.min(t), b.max(t)));
        let comparisons: Vec<serde_json::Value> = self
            .comparisons
            .iter()
            .map(|c| {
                let outs: Vec<serde_json::Value> = c
                    .diffs
                    .iter()
                    .enumerate()
                    .map(|(i, (d, rtol, atol))| {
                        let mut v = output_diff_json(i, d, *rtol, *atol);
                        v["identical"] = serde_json::json!(d.identical);
                        v
                    })
                    .collect();
                serde_json::json!({
                    "model": c.model.display().to_string(),
                    "backend": if c.reference { "reference" } else { "same" },
                    "within_tolerance": c.diffs.iter().all(|d| d.0.within()),
                    "outputs": outs,
                })
            })
            .collect();
        let v = serde_json::json!({
            "model": self.req.model.display().to_string(),
            "seed": self.req.seed,
            "threads": self.x.threads,
            "kernels": {"total": self.x.kernels().len(), "by_backend": self.backends()},
            "native": self.native.as_ref().map(|(st, dir, version)| serde_json::json!({
                "units": st.kernels,
                "distinct": st.distinct,
                "compiled": st.compiled,
                "compiler_runs": st.compiler_runs,
                "cached": st.cached,
                "fallbacks": st.fallbacks,
                "compile_ms": self.compile_ms,
                "compiler_ms": st.compile_seconds * 1e3,
                "version": version,
                "cache_dir": dir.as_ref().map(|d| d.display().to_string()),
            })),
            "inputs": inputs,
            "outputs": outputs,
            "latency_ms": {
                "median": median(self.times),
                "min": lo,
                "max": hi,
                "runs": self.times.len(),
                "warmup": self.req.warmup,
            },
            "memory": {
                "peak_bytes": self.peak,
                "constant_bytes": self.x.const_bytes,
                "peak_rss_bytes": peak_rss(),
            },
            "comparisons": comparisons,
        });
        format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
    }
}
