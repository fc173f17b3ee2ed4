//! Compiling a model to run: the backends a run uses and the executable built on them, shared by
//! `collage run` and the Python API's `compile`, so that both run a model on the same kernels.

use super::{report, Outcome};
use crate::diag::Diagnostics;
use crate::ir::Module;
use crate::runtime::backend::native::grouping::FuseGrouping;
use crate::runtime::backend::native::{compile, Config, Native};
use crate::runtime::backend::registry;
use crate::runtime::exec::data::Weights;
use crate::runtime::exec::executor::{self, Executable, Options};
use crate::runtime::exec::kernel::{Backend, Backends};
use crate::source::SourceMap;
use std::path::Path;
use std::sync::Arc;

/// What runs the partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// Each partition on its target's backend: the native operators (the inline operators of
    /// `@main` and `Primitive=1` functions) as generated code (FuseOps groups compiled by the C
    /// compiler), `Compiler="dnnl"` and `Compiler="openblas"` functions on their libraries (a
    /// missing library is E2308), falling back to the interpreter unit by unit.
    Auto,
    /// The reference interpreter, one operator at a time (the oracle).
    Reference,
}

/// The native backend of [`BackendChoice::Auto`] (none for the reference interpreter), with its
/// kernel cache checked: refused (E2410) or replaced (W2411) before anything runs.
/// `compile_timeout` is the time limit of one C compiler run in seconds (`None`: the default).
pub fn native_backend(
    backend: BackendChoice,
    threads: usize,
    cache_dir: Option<&Path>,
    compile_timeout: Option<f64>,
) -> Result<Option<Arc<Native>>, Outcome> {
    let timeout = match compile_timeout {
        Some(t) => std::time::Duration::from_secs_f64(t.min(1e6)),
        None => compile::DEFAULT_TIMEOUT,
    };
    let place = match backend {
        BackendChoice::Auto => super::measuring::cache_place(cache_dir)?,
        BackendChoice::Reference => crate::runtime::measure::dir::Place::default(),
    };
    Ok((backend == BackendChoice::Auto).then(|| {
        registry::native(Config {
            threads,
            cache_dir: place.dir().map(Path::to_path_buf),
            temp_dir: place.temp_dir(),
            compiler: None,
            timeout,
        })
    }))
}

/// Compiles `m` with its weights drawn from `weights`: with `native`, on the CPU libraries the
/// plan's `Compiler=` partitions need (E2308 where one is missing) and generated code for the
/// native operators; without, on the reference interpreter. The warnings of compilation (units
/// that fell back) are reported.
pub fn compile_model(
    m: &Module,
    weights: &Weights,
    threads: usize,
    native: Option<&Arc<Native>>,
    sources: &SourceMap,
) -> Result<Executable, Outcome> {
    let mw = weights.for_module(m);
    let opts = match native {
        Some(n) => {
            let mut list = registry::libraries_for(m, threads).map_err(|errors| {
                let mut ds = Diagnostics::new();
                for d in errors {
                    ds.push(d);
                }
                report(&ds, sources);
                Outcome::InputErrors
            })?;
            list.push(n.clone() as Arc<dyn Backend>);
            Options {
                threads,
                backends: Backends { list },
                grouping: Some(Box::new(FuseGrouping::default())),
            }
        }
        None => Options {
            threads,
            ..Options::default()
        },
    };
    match executor::compile(m, &mw, &opts) {
        Ok(x) => {
            let mut w = Diagnostics::new();
            for d in &x.warnings {
                w.push(d.clone());
            }
            if !w.is_empty() {
                report(&w, sources);
            }
            Ok(x)
        }
        Err(d) => {
            report(&d, sources);
            Err(Outcome::InputErrors)
        }
    }
}
