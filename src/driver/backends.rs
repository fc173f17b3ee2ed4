//! `collage backends`: which backends this machine has, with their library and version.

use super::Outcome;
use crate::ffi::Availability;
use std::path::{Path, PathBuf};

/// One backend's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    /// `reference`, `native`, `dnnl`, `openblas`, `onnxruntime`.
    pub name: &'static str,
    /// What runs it.
    pub what: &'static str,
    /// Whether, where and which version.
    pub state: Availability,
}

/// Every backend, in a fixed order: the reference interpreter, native code through the system
/// C compiler (`$CC`, else `cc`), oneDNN, OpenBLAS and ONNX Runtime (found in the `onnxruntime`
/// Python package: `ffi::ort`).
pub fn backends() -> Vec<Backend> {
    vec![
        Backend {
            name: "reference",
            what: "the reference interpreter (built in)",
            state: Availability {
                available: true,
                path: None,
                version: Some(format!("collage {}", env!("CARGO_PKG_VERSION"))),
                error: None,
            },
        },
        Backend {
            name: "native",
            what: "generated C, compiled by the system C compiler",
            state: compiler(),
        },
        Backend {
            name: "dnnl",
            what: "oneDNN",
            state: crate::ffi::dnnl::availability(),
        },
        Backend {
            name: "openblas",
            what: "OpenBLAS (cblas_sgemm)",
            state: crate::ffi::openblas::availability(),
        },
        Backend {
            name: "onnxruntime",
            what: "ONNX Runtime, CPU execution provider (the yardstick of `collage bench`)",
            state: crate::ffi::ort::availability(),
        },
    ]
}

/// The C compiler `$CC` (else `cc`) names: where it is and the first line of `--version`.
pub fn compiler() -> Availability {
    let cc = std::env::var("CC")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "cc".into());
    let path = find_program(&cc);
    let run = std::process::Command::new(&cc)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output();
    match run {
        Ok(out) if out.status.success() => Availability {
            available: true,
            path,
            version: String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .map(|l| l.trim().to_string()),
            error: None,
        },
        Ok(out) => Availability {
            available: false,
            path,
            version: None,
            error: Some(format!(
                "`{cc} --version` failed ({}); install a C compiler (apt-get install gcc) or set \
                 CC",
                out.status
            )),
        },
        Err(e) => Availability {
            available: false,
            path,
            version: None,
            error: Some(format!(
                "the C compiler `{cc}` cannot be run ({e}); install one (apt-get install gcc) \
                 or set CC"
            )),
        },
    }
}

/// Where `PATH` finds a program (links resolved), or the program itself if it has a `/`.
fn find_program(name: &str) -> Option<PathBuf> {
    let found = if name.contains('/') {
        Some(PathBuf::from(name)).filter(|p| p.is_file())
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
    };
    found.map(|p| std::fs::canonicalize(&p).unwrap_or(p))
}

fn shown(p: &Option<PathBuf>) -> String {
    p.as_deref()
        .map_or_else(|| "-".to_string(), |p: &Path| p.display().to_string())
}

/// The table: one row per backend, then why each missing one is missing.
pub fn table(rows: &[Backend]) -> String {
    let cells: Vec<[String; 4]> = rows
        .iter()
        .map(|b| {
            [
                b.name.to_string(),
                if b.state.available { "yes" } else { "no" }.to_string(),
                match (&b.state.path, b.name) {
                    (None, "reference") => "(built in)".to_string(),
                    (p, _) => shown(p),
                },
                b.state.version.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let head = ["backend", "available", "library", "version"];
    let width = |k: usize| {
        cells
            .iter()
            .map(|c| c[k].chars().count())
            .chain([head[k].len()])
            .max()
            .unwrap_or(0)
    };
    let w: Vec<usize> = (0..3).map(width).collect();
    let mut out = String::new();
    let mut line = |c: [&str; 4]| {
        out.push_str(&format!(
            "{:<w0$}  {:<w1$}  {:<w2$}  {}\n",
            c[0],
            c[1],
            c[2],
            c[3],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2]
        ));
    };
    line(head);
    for c in &cells {
        line([&c[0], &c[1], &c[2], &c[3]]);
    }
    for b in rows {
        if let Some(e) = &b.state.error {
            out.push_str(&format!("{}: {e}\n", b.name));
        }
    }
    out
}

/// The JSON form: `{"backends": [{"name", "what", "available", "path", "version", "error"}]}`.
pub fn json(rows: &[Backend]) -> serde_json::Value {
    serde_json::json!({
        "backends": rows.iter().map(|b| serde_json::json!({
            "name": b.name,
            "what": b.what,
            "available": b.state.available,
            "path": b.state.path.as_ref().map(|p| p.display().to_string()),
            "version": b.state.version,
            "error": b.state.error,
        })).collect::<Vec<_>>(),
    })
}

/// `collage backends [--format table|json]`.
pub fn backends_command(as_json: bool) -> Outcome {
    let rows = backends();
    let text = if as_json {
        format!(
            "{}\n",
            serde_json::to_string_pretty(&json(&rows)).unwrap_or_default()
        )
    } else {
        table(&rows)
    };
    super::written(super::out(&text))
}
