//! Diagnostics as Python exceptions and warnings.
//!
//! Every call into collage runs inside [`collage::diag::capture`], so the diagnostics the
//! pipeline emits come back here instead of going to standard error: errors become one
//! [`CollageError`] (the first error's code, every error's rendered text), warnings become
//! [`CollageWarning`]s. A panic inside collage is caught and raised as a `CollageError` without
//! a code, so no input can take the interpreter down.

use collage::diag::{self, Diagnostic, Emitted, Severity};
use collage::pipeline::Outcome;
use pyo3::exceptions::{PyException, PyUserWarning};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::ffi::CString;
use std::panic::AssertUnwindSafe;

pyo3::create_exception!(
    collage,
    CollageError,
    PyException,
    "An error collage reported: `code` is its diagnostic code (such as `E0901`, `None` for an \
     internal error), `message` its message, `rendered` the text the command line would print \
     (every error of the call), `diagnostics` each error as a dict."
);

pyo3::create_exception!(
    collage,
    CollageWarning,
    PyUserWarning,
    "A warning collage reported; the message is the rendered diagnostic, code included."
);

/// What a call into collage gives back: its result, or how it ended, or the panic that stopped it.
type Caught<R> = std::thread::Result<Result<R, Outcome>>;

/// Runs `f` with the GIL released and its diagnostics captured, then raises or warns them.
pub fn work<R: Send>(py: Python<'_>, f: impl FnOnce() -> Result<R, Outcome> + Send) -> PyResult<R> {
    let (r, emitted) = py.detach(|| diag::capture(|| caught(f)));
    finish(py, r, emitted)
}

/// Runs `f` with its diagnostics captured, holding the GIL (short checks).
pub fn held<R>(py: Python<'_>, f: impl FnOnce() -> Result<R, Outcome>) -> PyResult<R> {
    let (r, emitted) = diag::capture(|| caught(f));
    finish(py, r, emitted)
}

fn caught<R>(f: impl FnOnce() -> Result<R, Outcome>) -> Caught<R> {
    std::panic::catch_unwind(AssertUnwindSafe(f))
}

/// Issues the warnings, then returns the result or raises the errors. Errors emitted by a call
/// that still returned a result (outputs beyond a tolerance in `bench`) are issued as warnings.
fn finish<R>(py: Python<'_>, r: Caught<R>, emitted: Vec<Emitted>) -> PyResult<R> {
    let (errors, warnings): (Vec<Emitted>, Vec<Emitted>) = emitted
        .into_iter()
        .partition(|e| e.severity == Severity::Error);
    for w in &warnings {
        warn(py, w)?;
    }
    match r {
        Ok(Ok(v)) => {
            for e in &errors {
                warn(py, e)?;
            }
            Ok(v)
        }
        Ok(Err(outcome)) => Err(error(py, &errors, outcome)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(bare(
                py,
                None,
                format!("internal error: collage panicked: {what}"),
            ))
        }
    }
}

fn warn(py: Python<'_>, e: &Emitted) -> PyResult<()> {
    let text = CString::new(e.rendered.trim_end().replace('\0', "\\0")).unwrap_or_default();
    PyErr::warn(py, &py.get_type::<CollageWarning>(), &text, 2)
}

/// A [`CollageError`] for the errors a call emitted before it ended with `outcome`.
fn error(py: Python<'_>, errors: &[Emitted], outcome: Outcome) -> PyErr {
    let Some(first) = errors.first() else {
        let msg = match outcome {
            Outcome::Internal => "internal error: collage stopped without a diagnostic",
            _ => "collage stopped without a diagnostic",
        };
        return bare(py, None, msg.to_string());
    };
    let rendered: String = errors.iter().map(|e| e.rendered.as_str()).collect();
    let err = CollageError::new_err(rendered.trim_end().to_string());
    let value = err.value(py);
    let list = PyList::empty(py);
    for e in errors {
        let d = PyDict::new(py);
        let _ = d.set_item("code", e.code.id);
        let _ = d.set_item("severity", "error");
        let _ = d.set_item("message", &e.message);
        let _ = d.set_item("rendered", &e.rendered);
        let _ = list.append(d);
    }
    let _ = value.setattr("code", first.code.id);
    let _ = value.setattr("message", &first.message);
    let _ = value.setattr("rendered", rendered);
    let _ = value.setattr("diagnostics", list);
    err
}

/// A [`CollageError`] from a message alone.
fn bare(py: Python<'_>, code: Option<&str>, message: String) -> PyErr {
    let err = CollageError::new_err(message.clone());
    let value = err.value(py);
    let _ = value.setattr("code", code);
    let _ = value.setattr("message", &message);
    let _ = value.setattr("rendered", &message);
    let _ = value.setattr("diagnostics", PyList::empty(py));
    err
}

/// A [`CollageError`] for one diagnostic that points at no source.
pub fn raise(py: Python<'_>, d: Diagnostic) -> PyErr {
    let ((), emitted) = diag::capture(|| diag::emit_alone(d));
    error(py, &emitted, Outcome::InputErrors)
}
