//! ONNX Runtime as a placement of `collage bench`: the model's own `.onnx` file, opened by ONNX
//! Runtime (CPU execution provider, all graph optimizations, `--threads` intra-op threads, one
//! inter-op thread, sequential execution, spinning on: [`crate::runtime::backend::ort`]), run
//! on the very tensors the reference interpreter ran on, its outputs checked against the
//! reference interpreter's with the tolerances of every other placement, and timed in the same
//! rounds ([`super::placements`]).
//!
//! [`decide`] says, before anything is partitioned, whether the placement is part of the bench
//! ([`When`]): only for ONNX models, skipped with W2422 when the library is missing, unless it
//! was asked for (`--onnxruntime always`: E2440 without the library, E2420 for a model that is
//! not an ONNX file). [`open`] builds and checks it once the reference outputs are known.

use super::placements::Reference;
use super::Outcome;
use crate::diag::{self, Diagnostic};
use crate::runtime::backend::ort::{Inputs, Session, Settings};
use crate::runtime::exec::compare;
use crate::runtime::exec::tensor::Tensor;
use crate::runtime::ffi::ort::{self as ffi, OnnxRuntime};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The placement's name in the report.
pub const NAME: &str = "onnxruntime";

/// When ONNX Runtime is a placement (`--onnxruntime`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum When {
    /// For ONNX models; skipped with a warning where the library is missing.
    #[default]
    Auto,
    /// Required: an error where it cannot be (not an ONNX model, no library).
    Always,
    /// Never.
    Never,
}

impl When {
    /// `auto`, `always` or `never`.
    pub fn parse(s: &str) -> Option<When> {
        match s {
            "auto" => Some(When::Auto),
            "always" => Some(When::Always),
            "never" => Some(When::Never),
            _ => None,
        }
    }
}

/// What `collage bench` does about ONNX Runtime, decided before partitioning.
#[derive(Debug)]
pub struct Plan {
    /// The model file ONNX Runtime opens.
    pub model: PathBuf,
    /// Its intra-op threads (`--threads`).
    pub threads: usize,
    /// Whether it was asked for (`--onnxruntime always`): a failure is then an error.
    pub required: bool,
    /// The loaded library, or why it is not available (the message of a skipped row).
    pub runtime: Result<&'static OnnxRuntime, String>,
}

/// Whether ONNX Runtime is a placement of this bench (`None`: it is not, and nothing is said).
/// A missing library is W2422 (the row says why), or E2440 (exit 2) when it was asked for;
/// asking for it on a model that is not an ONNX file is E2420 (exit 2).
pub fn decide(
    when: When,
    model: &Path,
    is_onnx: bool,
    threads: usize,
) -> Result<Option<Plan>, Outcome> {
    match when {
        When::Never => return Ok(None),
        When::Auto if !is_onnx => return Ok(None),
        When::Always if !is_onnx => {
            diag::emit_alone(
                Diagnostic::error(
                    diag::E2420,
                    format!(
                        "`--onnxruntime always` needs an ONNX model; `{}` is not read as one",
                        model.display()
                    ),
                )
                .with_note("ONNX Runtime runs the model's own .onnx file; give one, or `--model-format onnx`"),
            );
            return Err(Outcome::Usage);
        }
        _ => {}
    }
    let required = when == When::Always;
    let runtime = ffi::runtime();
    if let Err(why) = &runtime {
        if required {
            diag::emit_alone(ffi::unavailable(why).with_note(
                "asked for by `--onnxruntime always`; without it, `--onnxruntime auto` skips ONNX Runtime with a warning",
            ));
            return Err(Outcome::Usage);
        }
        diag::emit_alone(Diagnostic::warning(
            diag::W2422,
            format!("ONNX Runtime is skipped: {}", ffi::unavailable_message(why)),
        ));
    }
    if let (true, Ok(rt)) = (required, &runtime) {
        // Asked for: a model ONNX Runtime cannot open is said now, not after partitioning
        // and timing everything else.
        if let Err(d) = Session::open(rt, model, Settings::threads(threads.max(1))) {
            diag::emit_alone(
                Diagnostic::error(diag::E2421, with_notes(d.message.clone(), &d))
                .with_note("asked for by `--onnxruntime always`; `--onnxruntime auto` skips it with a warning"),
            );
            return Err(Outcome::InputErrors);
        }
    }
    Ok(Some(Plan {
        model: model.to_path_buf(),
        threads: threads.max(1),
        required,
        runtime: runtime.map_err(|why| ffi::unavailable_message(&why)),
    }))
}

/// One output's check: the difference from the reference interpreter's, and the relative and
/// absolute tolerances.
pub type Checked = (compare::Diff, f64, f64);

/// What the report says about the session, beside its row.
#[derive(Clone, Debug, PartialEq)]
pub struct Info {
    /// The library's version (`1.23.2`).
    pub version: String,
    /// The library file.
    pub library: PathBuf,
    /// The session's settings.
    pub settings: Settings,
    /// Opening the session (ONNX Runtime's graph optimizations included), in seconds.
    pub open_seconds: f64,
}

/// ONNX Runtime's session, built and checked, ready to be timed.
pub struct Ready {
    session: Session,
    inputs: Inputs,
    /// Per output: the difference from the reference interpreter, and the tolerances.
    pub diffs: Vec<Checked>,
    /// The checked run's time (seconds).
    pub first_call: f64,
    /// About the session.
    pub info: Info,
}

impl Ready {
    /// Runs the model once on the prepared inputs: ONNX Runtime's run and the copy of its
    /// outputs into collage tensors, as the Python package's `run` copies them into arrays (the
    /// outputs are dropped after the clock stops).
    pub fn run(&mut self) -> Result<f64, String> {
        let s = Instant::now();
        let out = self
            .session
            .run_prepared(&self.inputs)
            .map_err(|d| failure(&d))?;
        let t = s.elapsed().as_secs_f64();
        drop(out);
        Ok(t)
    }
}

/// A diagnostic as a row's reason: its message and notes.
fn failure(d: &Diagnostic) -> String {
    with_notes(format!("it failed: {}", d.message), d)
}

/// `s`, then the diagnostic's notes in parentheses.
fn with_notes(mut s: String, d: &Diagnostic) -> String {
    for n in &d.notes {
        s.push_str(&format!(" ({n})"));
    }
    s
}

/// Opens the model with ONNX Runtime, feeds it the reference run's inputs (by the ONNX name each
/// `@main` parameter was imported from) and checks its outputs, in order, against the reference
/// interpreter's (`check`: the difference and tolerances of one output, as for every placement).
/// The reason it cannot run otherwise.
pub fn open(
    rt: &OnnxRuntime,
    plan: &Plan,
    reference: &Reference,
    check: &dyn Fn(&Tensor, &Tensor) -> Result<Checked, String>,
) -> Result<Ready, String> {
    let settings = Settings::threads(plan.threads);
    let start = Instant::now();
    let mut session =
        Session::open(rt, &plan.model, settings).map_err(|d| with_notes(d.message.clone(), &d))?;
    let open_seconds = start.elapsed().as_secs_f64();
    let mut feed: Vec<(String, &Tensor)> = Vec::with_capacity(session.inputs().len());
    for port in session.inputs() {
        let ident = crate::frontend::onnx::names::to_ident(&port.name);
        let k = reference
            .names
            .iter()
            .position(|n| *n == ident || *n == port.name)
            .ok_or_else(|| {
                format!(
                    "ONNX Runtime's input `{}` is no parameter of the imported model",
                    port.name
                )
            })?;
        feed.push((port.name.clone(), &*reference.inputs[k]));
    }
    let named: Vec<(&str, &Tensor)> = feed.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    let inputs = session.prepare(&named).map_err(|d| failure(&d))?;
    let s = Instant::now();
    let got = session.run_prepared(&inputs).map_err(|d| failure(&d))?;
    let first_call = s.elapsed().as_secs_f64();
    let expected = &reference.expected;
    if got.len() != expected.len() {
        return Err(format!(
            "ONNX Runtime gives {} output(s), the imported model {}",
            got.len(),
            expected.len()
        ));
    }
    let mut diffs = Vec::with_capacity(got.len());
    for ((name, a), b) in got.iter().zip(expected) {
        diffs.push(check(a, b).map_err(|e| format!("the output `{name}`: {e}"))?);
    }
    Ok(Ready {
        session,
        inputs,
        diffs,
        first_call,
        info: Info {
            version: rt.version.clone(),
            library: rt.path.clone(),
            settings,
            open_seconds,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_parses_its_three_values() {
        assert_eq!(When::parse("auto"), Some(When::Auto));
        assert_eq!(When::parse("always"), Some(When::Always));
        assert_eq!(When::parse("never"), Some(When::Never));
        assert_eq!(When::parse("yes"), None);
        assert_eq!(When::default(), When::Auto);
    }

    #[test]
    fn a_relay_model_has_no_onnxruntime_row_unless_asked() {
        let m = Path::new("m.relay");
        assert!(matches!(decide(When::Auto, m, false, 2), Ok(None)));
        assert!(matches!(decide(When::Never, m, false, 2), Ok(None)));
        assert!(matches!(
            decide(When::Always, m, false, 2),
            Err(Outcome::Usage)
        ));
    }
}
