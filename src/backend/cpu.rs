//! The CPU library backends `collage run` uses, and the check that a plan's library partitions
//! can run on this machine.
//!
//! A `Compiler="dnnl"` or `Compiler="openblas"` partition needs its library: where the library
//! is missing, running the plan is an error (E2308) naming the Debian package to install,
//! rather than a silent fall-back to the interpreter, whose results and speed would not be the
//! plan's. Partitions of other compilers (the GPU targets) have no backend on this machine and
//! run on the reference interpreter.

use super::dnnl::DnnlBackend;
use super::openblas::OpenBlasBackend;
use crate::diag::Diagnostic;
use crate::exec::kernel::Backend;
use crate::ffi::LoadError;
use crate::ir::Module;
use std::sync::Arc;

/// The backend a `Compiler` attribute needs, if it is one of the CPU libraries.
fn library_of(compiler: &str) -> Option<&'static str> {
    match compiler {
        super::dnnl::NAME => Some(super::dnnl::NAME),
        super::openblas::NAME => Some(super::openblas::NAME),
        _ => None,
    }
}

/// Loads the backend for a library compiler (`None`: not a CPU library).
pub fn load(compiler: &str, threads: usize) -> Option<Result<Arc<dyn Backend>, LoadError>> {
    Some(match compiler {
        super::dnnl::NAME => DnnlBackend::new(threads).map(|b| Arc::new(b) as Arc<dyn Backend>),
        super::openblas::NAME => {
            OpenBlasBackend::new(threads).map(|b| Arc::new(b) as Arc<dyn Backend>)
        }
        _ => return None,
    })
}

/// The CPU library backends for the partitions of `m`, running on `threads` threads: one per
/// library some `Compiler` function of `m` needs, in a fixed order (oneDNN, then OpenBLAS). A
/// library that is needed but missing is an E2308 error per function naming its package.
pub fn backends_for(m: &Module, threads: usize) -> Result<Vec<Arc<dyn Backend>>, Vec<Diagnostic>> {
    let mut needed: Vec<&'static str> = Vec::new();
    let mut users: Vec<(&'static str, String, crate::source::Span)> = Vec::new();
    for (g, f) in &m.defs {
        let func = m.func(*f);
        let Some(c) = func.attr("Compiler").and_then(|v| v.as_str()) else {
            continue;
        };
        let Some(name) = library_of(c) else { continue };
        if !needed.contains(&name) {
            needed.push(name);
        }
        users.push((name, m.globals[g.index()].name.clone(), func.span));
    }
    needed.sort_by_key(|n| if *n == super::dnnl::NAME { 0 } else { 1 });
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for name in needed {
        match load(name, threads) {
            Some(Ok(b)) => out.push(b),
            Some(Err(e)) => {
                for (n, global, span) in users.iter().filter(|u| u.0 == name) {
                    errors.push(
                        Diagnostic::error(
                            crate::diag::E2308,
                            format!("`@{global}` runs on `{n}` (Compiler=\"{n}\"), but {e}"),
                        )
                        .with_primary(*span, "this partition needs the library"),
                    );
                }
            }
            None => {}
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}
