//! The backends of this machine as measuring and benchmarking use them, and which targets
//! they can run.
//!
//! A target can be measured here when it runs on the CPU and a backend handles its compiler:
//! a native target (no `Compiler`) always can (its partitions run on the native backends, in
//! the end on the reference interpreter); a BYOC target only when a backend for its compiler is
//! available on this machine. Everything else (the GPU targets, a library that is not
//! installed) has no backend here: its candidates are `unknown` to the measuring estimator and
//! its placements cannot be benchmarked.
//!
//! Backends plug in by name: [`Setup::new`] asks [`load`] for each compiler the rules mention.

use crate::exec::executor::Options;
use crate::exec::kernel::{Backend, Backends};
use crate::ruletree::Target;
use std::path::PathBuf;
use std::sync::Arc;

/// The device type of the CPU (TVM's `kDLCPU`).
const CPU: i32 = 1;

/// The backends a measurement or a benchmark runs on.
pub struct Setup {
    /// Worker threads of every backend.
    pub threads: usize,
    /// The cache directory (kernels of native code generation).
    pub cache_dir: Option<PathBuf>,
    /// Loaded backends, in order of preference.
    backends: Vec<Arc<dyn Backend>>,
    /// Compilers asked for that have no backend here, and why.
    missing: Vec<(String, String)>,
    /// The worker threads every executable of this setup runs on (`None` if they could not be
    /// started: each executable then starts its own).
    pool: Option<Arc<rayon::ThreadPool>>,
}

/// The backend for a compiler (`None`: native code), if this machine has one, or why not.
/// Backends register here by name.
pub fn load(
    compiler: Option<&str>,
    threads: usize,
    cache_dir: Option<&std::path::Path>,
) -> Option<Result<Arc<dyn Backend>, String>> {
    use crate::backend::native::{compile, Config, Native};
    match compiler {
        // Generated code; a unit it cannot compile (or a machine without a C compiler) falls
        // back to the reference interpreter, as in `collage run`.
        None => Some(Ok(Arc::new(Native::new(Config {
            threads,
            cache_dir: cache_dir.map(std::path::Path::to_path_buf),
            compiler: None,
            timeout: compile::DEFAULT_TIMEOUT,
        })))),
        // The CPU libraries, loaded at run time.
        Some(c) => crate::backend::cpu::load(c, threads).map(|r| r.map_err(|e| e.to_string())),
    }
}

impl Setup {
    /// The backends for the targets of `targets` that run on the CPU.
    pub fn new(targets: &[Target], threads: usize, cache_dir: Option<PathBuf>) -> Setup {
        let mut compilers: Vec<Option<String>> = Vec::new();
        for t in targets.iter().filter(|t| !t.is_host && on_cpu(t)) {
            if !compilers.contains(&t.compiler) {
                compilers.push(t.compiler.clone());
            }
        }
        // Native first, then the libraries by name: a fixed order.
        compilers.sort();
        let mut backends = Vec::new();
        let mut missing = Vec::new();
        for c in &compilers {
            match load(c.as_deref(), threads, cache_dir.as_deref()) {
                Some(Ok(b)) => backends.push(b),
                Some(Err(why)) => missing.push((c.clone().unwrap_or_default(), why)),
                None => {
                    if let Some(c) = c {
                        missing.push((c.clone(), format!("collage has no backend for `{c}`")));
                    }
                }
            }
        }
        Setup {
            threads: threads.max(1),
            cache_dir,
            backends,
            missing,
            pool: crate::exec::executor::worker_pool(threads)
                .ok()
                .map(Arc::new),
        }
    }

    /// Compiles a module to run on this setup's backends and threads. Every executable of the
    /// setup runs on the same worker threads, so candidates are timed on the threads (and
    /// OpenMP teams) the whole model runs on, one after the other.
    pub fn compile(
        &self,
        m: &crate::ir::Module,
        consts: &dyn crate::exec::kernel::ConstantSource,
    ) -> Result<crate::exec::executor::Executable, crate::diag::Diagnostics> {
        crate::exec::executor::compile_on(m, consts, &self.options(), self.pool.clone())
    }

    /// Compiles a module for the reference interpreter alone, on this setup's threads.
    pub fn compile_reference(
        &self,
        m: &crate::ir::Module,
        consts: &dyn crate::exec::kernel::ConstantSource,
    ) -> Result<crate::exec::executor::Executable, crate::diag::Diagnostics> {
        let opts = Options {
            threads: self.threads,
            ..Options::default()
        };
        crate::exec::executor::compile_on(m, consts, &opts, self.pool.clone())
    }

    /// Executor options: every loaded backend, then the reference interpreter.
    pub fn options(&self) -> Options {
        Options {
            threads: self.threads,
            backends: Backends {
                list: self.backends.clone(),
            },
            grouping: None,
        }
    }

    /// Whether the target can run here: the identity and versions of the backends that run it
    /// (for cache keys), or why it cannot.
    pub fn availability(&self, t: &Target) -> Result<String, String> {
        if !on_cpu(t) {
            let kind = t.device.device_type.map_or_else(String::new, |c| {
                crate::ir::device::device_type_name(c).map_or_else(|| c.to_string(), str::to_string)
            });
            let device = match t.device.virtual_device_id {
                Some(id) => format!("{kind}({id})"),
                None => kind,
            };
            return Err(format!(
                "target `{}` runs on {device}, not on this machine's CPU",
                t.name
            ));
        }
        let compiler = t.compiler.as_deref();
        let runs: Vec<&Arc<dyn Backend>> = self
            .backends
            .iter()
            .filter(|b| b.handles(compiler))
            .collect();
        if compiler.is_some() && runs.is_empty() {
            let c = compiler.unwrap_or_default();
            let why = self
                .missing
                .iter()
                .find(|(m, _)| m == c)
                .map_or_else(|| format!("no backend for `{c}`"), |(_, w)| w.clone());
            return Err(format!("no backend for target `{}` here: {why}", t.name));
        }
        let mut parts: Vec<String> = runs
            .iter()
            .map(|b| format!("{} {}", b.name(), b.version()))
            .collect();
        // Native code falls back to the reference interpreter unit by unit.
        if compiler.is_none() {
            parts.push(format!(
                "{} {}",
                crate::exec::reference::NAME,
                env!("CARGO_PKG_VERSION")
            ));
        }
        Ok(parts.join(" + "))
    }

    /// The loaded backends' names.
    pub fn names(&self) -> Vec<String> {
        self.backends.iter().map(|b| b.name().to_string()).collect()
    }

    /// The loaded backends that handle a compiler (`None`: native code).
    pub fn backends_for(&self, compiler: Option<&str>) -> Vec<&Arc<dyn Backend>> {
        self.backends
            .iter()
            .filter(|b| b.handles(compiler))
            .collect()
    }
}

/// Whether a target's device is this machine's CPU (or any device).
pub fn on_cpu(t: &Target) -> bool {
    t.device.device_type.is_none_or(|d| d == CPU)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_targets_and_missing_libraries_cannot_run_here() {
        let program = crate::library::program().unwrap();
        let setup = Setup::new(&program.targets, 2, None);
        let target = |n: &str| program.targets.iter().find(|t| t.name == n).unwrap();
        let native = setup.availability(target("tvm_cpu")).unwrap();
        assert!(native.starts_with("native collage-native-"), "{native}");
        assert!(native.ends_with(" + reference 0.1.0"), "{native}");
        let gpu = setup.availability(target("cutlass")).unwrap_err();
        assert!(gpu.contains("not on this machine's CPU"), "{gpu}");
        assert!(setup.availability(target("tvm")).is_err());
    }

    #[test]
    fn the_cpu_libraries_run_their_targets() {
        // The test command installs both libraries (docs/backends.md).
        let program = crate::library::program().unwrap();
        let setup = Setup::new(&program.targets, 1, None);
        let target = |n: &str| program.targets.iter().find(|t| t.name == n).unwrap();
        let dnnl = setup.availability(target("dnnl")).unwrap();
        assert!(dnnl.starts_with("dnnl "), "{dnnl}");
        let blas = setup.availability(target("openblas")).unwrap();
        assert!(blas.starts_with("openblas "), "{blas}");
        assert_eq!(setup.names(), ["native", "dnnl", "openblas"]);
        assert_eq!(setup.backends_for(Some("dnnl")).len(), 1);
    }
}
