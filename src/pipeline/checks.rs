//! Checks of settings shared by several commands, made before any work: thread counts,
//! tolerances, time flags, and whether the models fit in memory.

use super::{usage_error, Outcome};
use crate::diag;
use crate::ir::Module;
use crate::runtime::exec::executor;

/// Refuses, before anything is allocated, models that together need more memory than
/// `--max-memory` (`max`) or, without it, than this process can get (E2330); a `max` that is
/// not a size is E0955.
pub fn memory(models: &[&Module], max: Option<&str>) -> Result<(), Outcome> {
    use crate::runtime::exec::memory;
    let limit = match max {
        Some(text) => memory::Limit {
            bytes: memory::parse_size(text).map_err(|e| usage_error(diag::E0955, e))?,
            source: format!("--max-memory {text}"),
        },
        None => match memory::available() {
            Some(l) => l,
            None => return Ok(()),
        },
    };
    let mut need = memory::Need::default();
    for m in models {
        let Some(main) = m.main() else { continue };
        let n = memory::need(m, main);
        need.constants = need.constants.saturating_add(n.constants);
        need.inputs = need.inputs.saturating_add(n.inputs);
        need.peak = need.peak.saturating_add(n.peak);
    }
    memory::check(&need, &limit).map_err(|e| {
        diag::emit_alone(
            diag::Diagnostic::error(diag::E2330, e)
                .with_note("`--max-memory SIZE` sets the limit (e.g. `--max-memory 8G`)"),
        );
        Outcome::Usage
    })
}

/// Refuses a thread count outside `1..=MAX_THREADS` (E0951).
pub fn threads(threads: Option<usize>) -> Result<(), Outcome> {
    match threads {
        Some(t) if t == 0 || t > executor::MAX_THREADS => Err(usage_error(
            diag::E0951,
            format!(
                "`--threads` must be between 1 and {}, found {t}",
                executor::MAX_THREADS
            ),
        )),
        _ => Ok(()),
    }
}

/// Refuses a tolerance that is not a non-negative number (E0952).
pub fn tolerances(rtol: Option<f64>, atol: Option<f64>) -> Result<(), Outcome> {
    for (flag, v) in [("--rtol", rtol), ("--atol", atol)] {
        if let Some(v) = v {
            if !(v.is_finite() && v >= 0.0) {
                return Err(usage_error(
                    diag::E0952,
                    format!("`{flag}` must be a non-negative number, found {v}"),
                ));
            }
        }
    }
    Ok(())
}

/// Refuses a time flag that is not a positive, finite number of seconds (E0953).
pub fn seconds_flag(flag: &str, v: Option<f64>) -> Result<(), Outcome> {
    match v {
        Some(v) if !(v.is_finite() && v > 0.0) => Err(usage_error(
            diag::E0953,
            format!("`{flag}` must be a positive number of seconds, found {v}"),
        )),
        _ => Ok(()),
    }
}
