//! `collage backends`: which backends this machine has, with their library and version, as the
//! registry of this machine's backends ([`crate::runtime::backend::registry`]) probes them.

use super::Outcome;
use crate::runtime::backend::registry::{self, Entry};
use std::path::{Path, PathBuf};

fn shown(p: &Option<PathBuf>) -> String {
    p.as_deref()
        .map_or_else(|| "-".to_string(), |p: &Path| p.display().to_string())
}

/// The table: one row per backend, then why each missing one is missing.
pub fn table(rows: &[Entry]) -> String {
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
pub fn json(rows: &[Entry]) -> serde_json::Value {
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
    let rows = registry::probe_all();
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
