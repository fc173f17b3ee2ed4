//! The checker for the rules language: resolves names across imports, types patterns and
//! predicates against the operator registry, types rule trees and targets, and compiles
//! everything into a [`Program`].
//!
//! Input: root `.rules` files (and what they import). Output: the compiled program, or the
//! diagnostics that prevent it (every problem is reported, each with a stable code). Warnings
//! (unused definitions) do not prevent a result.

mod load;
mod names;
mod pattern;
mod pred;
mod rule;
mod target;

pub use load::{normalize, Provider};

use crate::diag::Diagnostics;
use crate::rules::ruletree::Program;
use crate::source::SourceMap;
use std::path::PathBuf;

/// The result of checking: a program when there are no errors, and all diagnostics.
pub struct Checked {
    /// The compiled program, if no error was found.
    pub program: Option<Program>,
    /// Errors and warnings, in file and position order.
    pub diags: Diagnostics,
    /// The files read from disk (canonical paths), imports included, in load order.
    pub disk_files: Vec<PathBuf>,
}

/// Loads and checks the given root files.
pub fn check(sources: &mut SourceMap, provider: &Provider<'_>, roots: &[PathBuf]) -> Checked {
    let (files, mut diags) = load::load(sources, provider, roots);
    let disk_files = files.iter().filter_map(|f| f.disk_path.clone()).collect();
    let mut cx = names::Checker::new(&files);
    cx.declare_all();
    let program = cx.compile_all();
    diags.extend(cx.take_diags());
    diags.sort_by_position();
    let program = if diags.has_errors() {
        None
    } else {
        Some(program)
    };
    Checked {
        program,
        diags,
        disk_files,
    }
}

/// The shipped library ([`crate::rules::library`]), checked into its compiled form. On failure (a bug
/// in the shipped files), the diagnostics rendered as text.
pub fn check_library() -> Result<Program, String> {
    let mut sources = SourceMap::new();
    let checked = check(
        &mut sources,
        &Provider::Embedded(crate::rules::library::LIBRARY),
        &crate::rules::library::roots(),
    );
    match checked.program {
        Some(p) if !checked.diags.has_errors() => Ok(p),
        _ => Err(checked.diags.render_plain(&sources)),
    }
}

/// Checks a single text (used by tests and fuzzing); imports are resolved in the file system
/// relative to `name`.
pub fn check_text(name: &str, text: &str) -> (SourceMap, Checked) {
    let mut sources = SourceMap::new();
    let table = [(name, text)];
    let provider = Provider::Embedded(&table);
    let checked = check(&mut sources, &provider, &[PathBuf::from(name)]);
    (sources, checked)
}
