//! The registry of this machine's backends: which ones there are, whether each is available here
//! and in which version, and the one place each is constructed.
//!
//! Every command that needs backends asks here:
//! * `collage backends` lists [`probe_all`]: the reference interpreter, native code through the
//!   system C compiler, oneDNN, OpenBLAS and ONNX Runtime, each probed once (the libraries by
//!   loading them, `crate::runtime::ffi`; the C compiler by asking its `--version`);
//! * `collage run` takes [`native`] for generated code and [`libraries_for`] the `Compiler=`
//!   partitions of its plan;
//! * `collage bench` and the measuring estimator take a [`Setup`]: the backends of the targets
//!   they run, with what each target can run on here ([`Setup::availability`]).
//!
//! A `Compiler="dnnl"` or `Compiler="openblas"` partition needs its library: where the library
//! is missing, running the plan is an error (E2308) naming the Debian package to install,
//! rather than a silent fall-back to the interpreter, whose results and speed would not be the
//! plan's. Partitions of other compilers (the GPU targets) have no backend on this machine and
//! run on the reference interpreter.
//!
//! A target can be measured or benchmarked here when it runs on the CPU and a backend handles its
//! compiler: a native target (no `Compiler`) always can (its partitions run on the native
//! backend, in the end on the reference interpreter); a BYOC target only when the library of its
//! compiler is available. Everything else (the GPU targets, a library that is not installed) has
//! no backend here: its candidates are `unknown` to the measuring estimator and its placements
//! cannot be benchmarked.

use super::dnnl::DnnlBackend;
use super::native::{compile, Config, Native};
use super::openblas::OpenBlasBackend;
use crate::diag::Diagnostic;
use crate::ir::Module;
use crate::rules::ruletree::Target;
use crate::runtime::exec::executor::Options;
use crate::runtime::exec::kernel::{Backend, Backends};
use crate::runtime::ffi::{Availability, LoadError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One backend this machine may have, as `collage backends` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// `reference`, `native`, `dnnl`, `openblas`, `onnxruntime`.
    pub name: &'static str,
    /// What runs it.
    pub what: &'static str,
    /// Whether, where and which version.
    pub state: Availability,
}

/// Every backend, in a fixed order: the reference interpreter, native code through the system
/// C compiler (`$CC`, else `cc`), oneDNN, OpenBLAS and ONNX Runtime (found in the `onnxruntime`
/// Python package: `ffi::ort`; not a placement target but the yardstick `collage bench`
/// compares with). Each is probed once.
pub fn probe_all() -> Vec<Entry> {
    vec![
        Entry {
            name: crate::runtime::exec::reference::NAME,
            what: "the reference interpreter (built in)",
            state: Availability {
                available: true,
                path: None,
                version: Some(format!("collage {}", env!("CARGO_PKG_VERSION"))),
                error: None,
            },
        },
        Entry {
            name: super::native::NAME,
            what: "generated C, compiled by the system C compiler",
            state: probe_compiler(),
        },
        Entry {
            name: super::dnnl::NAME,
            what: "oneDNN",
            state: crate::runtime::ffi::dnnl::availability(),
        },
        Entry {
            name: super::openblas::NAME,
            what: "OpenBLAS (cblas_sgemm)",
            state: crate::runtime::ffi::openblas::availability(),
        },
        Entry {
            name: "onnxruntime",
            what: "ONNX Runtime, CPU execution provider (the yardstick of `collage bench`)",
            state: crate::runtime::ffi::ort::availability(),
        },
    ]
}

/// The C compiler `$CC` (else `cc`) names: where it is and the first line of `--version`.
pub fn probe_compiler() -> Availability {
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

/// The native backend: generated code, compiled by the system C compiler (probed when the
/// first kernel is compiled; a unit it cannot compile falls back to the reference interpreter).
pub fn native(cfg: Config) -> Arc<Native> {
    Arc::new(Native::new(cfg))
}

/// The backend of a CPU library compiler (`None`: not a CPU library), or why its library cannot
/// be loaded.
pub fn library(compiler: &str, threads: usize) -> Option<Result<Arc<dyn Backend>, LoadError>> {
    Some(match compiler {
        super::dnnl::NAME => DnnlBackend::new(threads).map(|b| Arc::new(b) as Arc<dyn Backend>),
        super::openblas::NAME => {
            OpenBlasBackend::new(threads).map(|b| Arc::new(b) as Arc<dyn Backend>)
        }
        _ => return None,
    })
}

/// The backend for a compiler (`None`: native code), if this machine has one, or why not.
pub fn load(
    compiler: Option<&str>,
    threads: usize,
    cache_dir: Option<&Path>,
) -> Option<Result<Arc<dyn Backend>, String>> {
    match compiler {
        // Generated code; a unit it cannot compile (or a machine without a C compiler) falls
        // back to the reference interpreter, as in `collage run`.
        None => Some(Ok(native(Config {
            threads,
            cache_dir: cache_dir.map(Path::to_path_buf),
            compiler: None,
            timeout: compile::DEFAULT_TIMEOUT,
            // The caller keeps a temporary cache directory alive (the measurement's `Place`).
            temp_dir: None,
        }) as Arc<dyn Backend>)),
        // The CPU libraries, loaded at run time.
        Some(c) => library(c, threads).map(|r| r.map_err(|e| e.to_string())),
    }
}

/// The CPU library backends for the partitions of `m`, running on `threads` threads: one per
/// library some `Compiler` function of `m` needs, in a fixed order (oneDNN, then OpenBLAS). A
/// library that is needed but missing is an E2308 error per function naming its package.
pub fn libraries_for(m: &Module, threads: usize) -> Result<Vec<Arc<dyn Backend>>, Vec<Diagnostic>> {
    let mut needed: Vec<&'static str> = Vec::new();
    let mut users: Vec<(&'static str, String, crate::source::Span)> = Vec::new();
    for (g, f) in &m.defs {
        let func = m.func(*f);
        let Some(c) = func.attr("Compiler").and_then(|v| v.as_str()) else {
            continue;
        };
        let name = match c {
            super::dnnl::NAME => super::dnnl::NAME,
            super::openblas::NAME => super::openblas::NAME,
            _ => continue,
        };
        if !needed.contains(&name) {
            needed.push(name);
        }
        users.push((name, m.globals[g.index()].name.clone(), func.span));
    }
    needed.sort_by_key(|n| if *n == super::dnnl::NAME { 0 } else { 1 });
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for name in needed {
        match library(name, threads) {
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

/// The device type of the CPU (TVM's `kDLCPU`).
const CPU: i32 = 1;

/// The backends a measurement or a benchmark runs on: those of its targets that run on the CPU.
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

impl Setup {
    /// The backends for the targets of `targets` that run on the CPU ([`load`] for each
    /// compiler they name).
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
            pool: crate::runtime::exec::executor::worker_pool(threads)
                .ok()
                .map(Arc::new),
        }
    }

    /// Compiles a module to run on this setup's backends and threads. Every executable of the
    /// setup runs on the same worker threads, so candidates are timed on the threads (and
    /// OpenMP teams) the whole model runs on, one after the other.
    pub fn compile(
        &self,
        m: &Module,
        consts: &dyn crate::runtime::exec::kernel::ConstantSource,
    ) -> Result<crate::runtime::exec::executor::Executable, crate::diag::Diagnostics> {
        crate::runtime::exec::executor::compile_on(m, consts, &self.options(), self.pool.clone())
    }

    /// Compiles a module for the reference interpreter alone, on this setup's threads.
    pub fn compile_reference(
        &self,
        m: &Module,
        consts: &dyn crate::runtime::exec::kernel::ConstantSource,
    ) -> Result<crate::runtime::exec::executor::Executable, crate::diag::Diagnostics> {
        let opts = Options {
            threads: self.threads,
            ..Options::default()
        };
        crate::runtime::exec::executor::compile_on(m, consts, &opts, self.pool.clone())
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
                crate::runtime::exec::reference::NAME,
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
        let program = crate::rules::sema::check_library().unwrap();
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
        let program = crate::rules::sema::check_library().unwrap();
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
