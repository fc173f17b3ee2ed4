//! `collage cache stats` and `collage cache clear`: what the cache directory holds (compiled
//! kernels and measurements), and emptying it.

use super::Outcome;
use crate::diag::{self, Diagnostic};
use crate::runtime::measure::db::{self, Db, Opened};
use crate::runtime::measure::dir;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Which cache and what to clear.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// `--cache-dir`.
    pub cache_dir: Option<PathBuf>,
    /// `--cache`: the measurement database alone.
    pub cache: Option<PathBuf>,
    /// Clear only the kernels.
    pub kernels_only: bool,
    /// Clear only the measurements.
    pub measurements_only: bool,
    /// JSON instead of text (`stats`).
    pub json: bool,
}

fn mib(b: u64) -> String {
    if b < 1 << 20 {
        format!("{:.1} KiB", b as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
    }
}

/// W2402 when opening rebuilt the database.
fn warn_rebuilt(path: &Path, opened: Opened) {
    if let Opened::Rebuilt { moved_to, why } = opened {
        diag::emit_alone(Diagnostic::warning(
            diag::W2402,
            format!(
                "the measurement cache `{}` could not be used ({why}) and has been rebuilt empty{}",
                path.display(),
                moved_to.map_or(String::new(), |p| format!(
                    "; the old file is kept as `{}`",
                    p.display()
                ))
            ),
        ));
    }
}

/// Opens an existing database (rebuilding a damaged one, with W2402); `None` when there is none.
fn open_existing(path: &Path) -> Result<Option<Db>, Outcome> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    match Db::open(path) {
        Ok((d, opened)) => {
            warn_rebuilt(path, opened);
            Ok(Some(d))
        }
        Err(e) => {
            diag::emit_alone(Diagnostic::error(
                diag::E2401,
                format!("cannot use the measurement cache: {e}"),
            ));
            Err(Outcome::Usage)
        }
    }
}

/// `collage cache stats`.
pub fn stats_command(req: &Request) -> Outcome {
    match stats_inner(req) {
        Ok(o) | Err(o) => o,
    }
}

fn stats_inner(req: &Request) -> Result<Outcome, Outcome> {
    let root = dir::resolve(req.cache_dir.as_deref());
    let database = dir::database(root.as_deref(), req.cache.as_deref()).map_err(|e| {
        diag::emit_alone(Diagnostic::error(diag::E2401, e.to_string()));
        Outcome::Usage
    })?;
    let stats = match open_existing(&database)? {
        Some(d) => Some(d.stats().map_err(|e| {
            diag::emit_alone(Diagnostic::error(
                diag::E2401,
                format!("cannot read `{}`: {e}", database.display()),
            ));
            Outcome::Usage
        })?),
        None => None,
    };
    let kernels = root.as_deref().map(dir::kernel_stats);
    let text = if req.json {
        let v = serde_json::json!({
            "cache_dir": root.as_ref().map(|d| d.display().to_string()),
            "measurements": {
                "database": database.display().to_string(),
                "exists": stats.is_some(),
                "entries": stats.as_ref().map_or(0, |s| s.entries),
                "timed": stats.as_ref().map_or(0, |s| s.timed),
                "invalid": stats.as_ref().map_or(0, |s| s.invalid),
                "bytes": stats.as_ref().map_or(0, |s| s.bytes),
                "by_target": stats.as_ref().map(|s| s.by_target.iter().cloned().collect::<std::collections::BTreeMap<_, _>>()),
                "by_machine": stats.as_ref().map(|s| s.by_machine.iter().map(|(m, t, n)| serde_json::json!({"machine": m, "threads": t, "entries": n})).collect::<Vec<_>>()),
            },
            "kernels": kernels.as_ref().map(|k| serde_json::json!({
                "entries": k.entries,
                "libraries": k.libraries,
                "damaged": k.damaged,
                "unverified": k.unverified,
                "bytes": k.bytes,
            })),
        });
        format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
    } else {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "cache directory  {}",
            root.as_ref()
                .map_or("(none)".to_string(), |d| d.display().to_string())
        );
        match &stats {
            None => {
                let _ = writeln!(s, "measurements     {}: none yet", database.display());
            }
            Some(st) => {
                let _ = writeln!(
                    s,
                    "measurements     {}: {} entries ({} timed, {} invalid), {}",
                    database.display(),
                    st.entries,
                    st.timed,
                    st.invalid,
                    mib(st.bytes)
                );
                if !st.by_target.is_empty() {
                    let parts: Vec<String> = st
                        .by_target
                        .iter()
                        .map(|(t, n)| format!("{t} {n}"))
                        .collect();
                    let _ = writeln!(s, "  by target      {}", parts.join(", "));
                }
                for (m, t, n) in &st.by_machine {
                    let _ = writeln!(s, "  by machine     {m}, {t} thread(s): {n}");
                }
            }
        }
        match (&root, &kernels) {
            (Some(d), Some(k)) => {
                let _ = writeln!(
                    s,
                    "kernels          {}: {} kernels in {} libraries ({} damaged, {} unverified), {}",
                    dir::kernels(d).display(),
                    k.entries,
                    k.libraries,
                    k.damaged,
                    k.unverified,
                    mib(k.bytes)
                );
            }
            _ => {
                let _ = writeln!(s, "kernels          (no cache directory)");
            }
        }
        s
    };
    super::out(&text)?;
    Ok(Outcome::Ok)
}

/// `collage cache clear`.
pub fn clear_command(req: &Request) -> Outcome {
    match clear_inner(req) {
        Ok(o) | Err(o) => o,
    }
}

fn clear_inner(req: &Request) -> Result<Outcome, Outcome> {
    let root = dir::resolve(req.cache_dir.as_deref());
    let mut lines = Vec::new();
    if !req.kernels_only {
        let database = dir::database(root.as_deref(), req.cache.as_deref()).map_err(|e| {
            diag::emit_alone(Diagnostic::error(diag::E2401, e.to_string()));
            Outcome::Usage
        })?;
        let cleared = if std::fs::symlink_metadata(&database).is_err() {
            Ok(0)
        } else if let Err(e) = db::check_file(&database) {
            // Not a file collage could have written: left alone.
            Err(e.to_string())
        } else {
            match Db::open(&database) {
                Ok((d, opened)) => {
                    warn_rebuilt(&database, opened);
                    d.clear().map_err(|e| e.to_string())
                }
                // Unusable: the files go.
                Err(e) => remove_database(&database)
                    .map(|()| 0)
                    .map_err(|r| format!("{e}; {r}")),
            }
        };
        match cleared {
            Ok(n) => lines.push(format!(
                "cleared {n} measurement(s) from `{}`",
                database.display()
            )),
            Err(e) => {
                diag::emit_alone(Diagnostic::error(
                    diag::E2405,
                    format!("cannot clear `{}`: {e}", database.display()),
                ));
                return Err(Outcome::Usage);
            }
        }
    }
    if !req.measurements_only {
        match &root {
            Some(d) => {
                let k = dir::kernels(d);
                if let Err(e) = crate::runtime::backend::native::cache::check_existing(d) {
                    diag::emit_alone(Diagnostic::error(
                        diag::E2410,
                        format!("the cache directory `{}` is refused: {e}", d.display()),
                    ));
                    return Err(Outcome::Usage);
                }
                match dir::clear_kernels(d) {
                    Ok(c) => {
                        lines.push(format!(
                            "cleared {} kernel(s) in {} librar{} ({}) from `{}`",
                            c.entries,
                            c.libraries,
                            if c.libraries == 1 { "y" } else { "ies" },
                            mib(c.bytes),
                            k.display()
                        ));
                        if !c.left.is_empty() {
                            let mut w = Diagnostic::warning(
                                diag::W2412,
                                format!(
                                    "left {} item(s) in `{}` that collage did not write or that a running collage uses",
                                    c.left.len(),
                                    k.display()
                                ),
                            );
                            for (p, why) in c.left.iter().take(10) {
                                let shown = p.strip_prefix(&k).unwrap_or(p);
                                w = w.with_note(format!("{} ({why})", shown.display()));
                            }
                            if c.left.len() > 10 {
                                w = w.with_note(format!("... and {} more", c.left.len() - 10));
                            }
                            diag::emit_alone(w);
                        }
                    }
                    Err(e) => {
                        diag::emit_alone(Diagnostic::error(
                            diag::E2405,
                            format!("cannot clear `{}`: {e}", k.display()),
                        ));
                        return Err(Outcome::Usage);
                    }
                }
            }
            None if req.kernels_only => {
                diag::emit_alone(Diagnostic::error(diag::E2405, "no cache directory: give `--cache-dir DIR` or set `COLLAGE_CACHE_DIR` or `HOME`"));
                return Err(Outcome::Usage);
            }
            None => {}
        }
    }
    let mut text = lines.join("\n");
    text.push('\n');
    super::out(&text)?;
    Ok(Outcome::Ok)
}

/// Removes a database and its companions.
fn remove_database(path: &Path) -> Result<(), String> {
    for s in ["", "-wal", "-shm"] {
        let p = db::sibling(path, s);
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot remove `{}`: {e}", p.display())),
        }
    }
    Ok(())
}
