//! ONNX Runtime (`libonnxruntime.so`), loaded at run time through the `ort` crate.
//!
//! The library comes from the `onnxruntime` Python wheel (version pinned in the tests: 1.23.2).
//! [`locate`] finds it: `COLLAGE_ORT_LIBRARY`, else the `onnxruntime` package of the active
//! Python environment (the python of `VIRTUAL_ENV`, else `python3` on `PATH`, asked where the
//! package is, with a timeout), else a scan of `VIRTUAL_ENV`'s `site-packages`. Every way that
//! fails adds to the reason given when it is not found, which `collage backends` prints (and
//! `collage bench` will print as the reason ONNX Runtime is skipped).
//!
//! [`runtime`] loads it once per process (ONNX Runtime, like `ort`, keeps one library and one
//! environment per process): the version is asked of the library itself
//! (`OrtGetApiBase()->GetVersionString`, and `GetBuildInfoString`), versions before 1.17 are
//! refused (the `ort` crate is built for C API version 17, its `api-17` feature, which any later
//! library serves), then `ort::init_from` takes the same file.
//!
//! Sessions, which open ONNX files and run them on collage's tensors, are built on the loaded
//! runtime's [environment](OnnxRuntime::environment) by `crate::runtime::backend::ort`, which checks
//! every file with collage's ONNX importer before ONNX Runtime opens it.
//!
//! Nothing here is linked or downloaded when the crate is built (`ort`'s `load-dynamic`
//! feature, default features off); without the library every function returns its reason.

use super::Availability;
use crate::diag::{self as codes, Diagnostic};
use std::ffi::{c_char, OsString};
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable that names the library file.
pub const LIBRARY_ENV: &str = "COLLAGE_ORT_LIBRARY";

/// The `onnxruntime` wheel the tests and `tests/onnx/time_ort.py` are pinned to.
pub const TESTED_VERSION: &str = "1.23.2";

/// The oldest ONNX Runtime accepted: 1.17, the C API version `ort` is built for.
pub const MIN_MINOR: u32 = 17;

/// How long the Python interpreter may take to say where `onnxruntime` is.
pub const PYTHON_TIMEOUT: Duration = Duration::from_secs(20);

/// What the search looks at: the process environment, or a test's.
#[derive(Clone, Debug)]
pub struct Search {
    /// `COLLAGE_ORT_LIBRARY`.
    pub library: Option<OsString>,
    /// `VIRTUAL_ENV`.
    pub virtual_env: Option<OsString>,
    /// `PATH`, where `python3` is looked for.
    pub path: Option<OsString>,
    /// How long the interpreter may take.
    pub timeout: Duration,
}

impl Search {
    /// The search this process's environment describes.
    pub fn from_env() -> Search {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        Search {
            library: var(LIBRARY_ENV),
            virtual_env: var("VIRTUAL_ENV"),
            path: var("PATH"),
            timeout: PYTHON_TIMEOUT,
        }
    }
}

/// Where the library was found, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The library file.
    pub path: PathBuf,
    /// How: `COLLAGE_ORT_LIBRARY`, `the onnxruntime package of /venv/bin/python`, ...
    pub how: String,
}

/// The advice that ends every "not available" message.
pub const ADVICE: &str = "install the onnxruntime Python package into the active environment \
     (pip install onnxruntime==1.23.2), or set COLLAGE_ORT_LIBRARY to the path of its \
     libonnxruntime.so";

/// Finds the library, or says why not (every way tried, in order).
pub fn locate(s: &Search) -> Result<Found, String> {
    if let Some(lib) = &s.library {
        let path = PathBuf::from(lib);
        // The variable wins: pointing it at a missing file is how a machine without the
        // library is simulated, so nothing else is tried.
        return if path.is_file() {
            Ok(Found {
                path: absolute(&path),
                how: LIBRARY_ENV.to_string(),
            })
        } else {
            Err(format!(
                "{LIBRARY_ENV} names `{}`, which is not a file",
                path.display()
            ))
        };
    }
    let mut why = vec![format!("{LIBRARY_ENV} is not set")];
    let venv = s.virtual_env.as_ref().map(PathBuf::from);
    let python =
        crate::util::python::interpreter(s.virtual_env.as_deref(), s.path.as_deref(), &mut why);
    match &python {
        None => why.push("no `python3` on PATH".to_string()),
        Some(py) => match crate::util::python::package_dir(py, "onnxruntime", s.timeout) {
            Ok(dir) => match library_in(&dir.join("capi")) {
                Ok(path) => {
                    return Ok(Found {
                        path,
                        how: format!("the onnxruntime package of {}", py.display()),
                    })
                }
                Err(e) => why.push(e),
            },
            Err(e) => why.push(format!("`{}`: {e}", py.display())),
        },
    }
    if let Some(v) = &venv {
        match scan_site_packages(v) {
            Ok(path) => {
                return Ok(Found {
                    path,
                    how: format!("the site-packages of {}", v.display()),
                })
            }
            Err(e) => why.push(e),
        }
    }
    Err(why.join("; "))
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    })
}

/// The library file in an `onnxruntime/capi` folder: `libonnxruntime.so.X.Y.Z` (the longest
/// versioned name), else `libonnxruntime.so`.
fn library_in(capi: &Path) -> Result<PathBuf, String> {
    let entries =
        std::fs::read_dir(capi).map_err(|e| format!("cannot list `{}` ({e})", capi.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n == "libonnxruntime.so" || n.starts_with("libonnxruntime.so."))
        .collect();
    names.sort_by_key(|n| (n.len(), n.clone()));
    match names.last() {
        Some(n) => Ok(capi.join(n)),
        None => Err(format!("`{}` holds no libonnxruntime.so*", capi.display())),
    }
}

/// `VENV/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so*`.
fn scan_site_packages(venv: &Path) -> Result<PathBuf, String> {
    let lib = venv.join("lib");
    let entries =
        std::fs::read_dir(&lib).map_err(|e| format!("cannot list `{}` ({e})", lib.display()))?;
    let mut pythons: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path())
        .collect();
    pythons.sort();
    for p in &pythons {
        let capi = p.join("site-packages/onnxruntime/capi");
        if capi.is_dir() {
            return library_in(&capi);
        }
    }
    Err(format!(
        "no site-packages/onnxruntime under `{}`",
        lib.display()
    ))
}

/// ONNX Runtime, loaded for the life of the process.
pub struct OnnxRuntime {
    /// The library file (links resolved).
    pub path: PathBuf,
    /// How it was found.
    pub how: String,
    /// `GetVersionString`: `1.23.2`.
    pub version: String,
    /// `GetBuildInfoString`: git branch and commit, build type, compiler flags.
    pub build_info: String,
    env: ort::environment::Environment,
    // Never unloaded: `ort` keeps its own handle to the same file, and the library's threads
    // may outlive any one session.
    _lib: ManuallyDrop<libloading::Library>,
}

impl OnnxRuntime {
    /// The `ort` environment sessions are built in.
    pub fn environment(&self) -> &ort::environment::Environment {
        &self.env
    }
}

impl std::fmt::Debug for OnnxRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnnxRuntime")
            .field("path", &self.path)
            .field("how", &self.how)
            .field("version", &self.version)
            .finish()
    }
}

/// `OrtGetApiBase`.
type GetApiBase = unsafe extern "C" fn() -> *const ort::sys::OrtApiBase;

/// The `(major, minor)` of a version string `1.23.2`.
pub fn parse_version(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Loads the library `found` names (once per process: see [`runtime`]).
fn load(found: &Found) -> Result<OnnxRuntime, String> {
    let file = &found.path;
    // SAFETY: loading runs the library's initialisers; the file is ONNX Runtime's (the
    // onnxruntime package's, or the one the user named).
    let lib = unsafe { libloading::Library::new(file) }
        .map_err(|e| format!("`{}` cannot be loaded ({})", file.display(), chain(&e)))?;
    let lib = ManuallyDrop::new(lib);
    // SAFETY: `OrtGetApiBase` has this signature in every ONNX Runtime (onnxruntime_c_api.h).
    let get_base: GetApiBase = *unsafe { lib.get::<GetApiBase>(b"OrtGetApiBase\0") }
        .map_err(|e| format!("`{}` has no OrtGetApiBase ({})", file.display(), chain(&e)))?;
    // SAFETY: `OrtGetApiBase` takes nothing and returns a pointer to a static table.
    let base = unsafe { get_base() };
    if base.is_null() {
        return Err(format!("`{}`: OrtGetApiBase returned null", file.display()));
    }
    // SAFETY: `base` is the library's static `OrtApiBase`, whose second entry returns a static
    // NUL-terminated string.
    let version = unsafe { super::c_str(((*base).GetVersionString)()) }.unwrap_or_default();
    match parse_version(&version) {
        Some((1, minor)) if minor >= MIN_MINOR => {}
        _ => {
            return Err(format!(
                "`{}` is ONNX Runtime `{version}`; collage needs 1.{MIN_MINOR} or later \
                 (tested with {TESTED_VERSION})",
                file.display()
            ))
        }
    }
    let path =
        super::object_path(get_base as *const std::ffi::c_void).unwrap_or_else(|| file.clone());
    let builder = ort::init_from(file)
        .map_err(|e| format!("`{}` cannot be loaded by ort ({e})", file.display()))?;
    let env = builder
        .with_name("collage")
        .with_telemetry(false)
        .build()
        .map_err(|e| format!("ONNX Runtime's environment cannot be created ({e})"))?;
    // SAFETY: the library is loaded (init_from above), so `ort::api()` returns its function
    // table; `GetBuildInfoString` returns a static NUL-terminated string.
    let info: *const c_char = unsafe { (ort::api().GetBuildInfoString)() };
    // SAFETY: as above.
    let build_info = unsafe { super::c_str(info) }.unwrap_or_default();
    Ok(OnnxRuntime {
        path,
        how: found.how.clone(),
        version,
        build_info,
        env,
        _lib: lib,
    })
}

fn chain(e: &dyn std::error::Error) -> String {
    super::error_chain(e)
}

static RUNTIME: OnceLock<Result<OnnxRuntime, String>> = OnceLock::new();

/// ONNX Runtime, found ([`Search::from_env`]) and loaded on first use, or why it is not
/// available (the text of a "not available" message, without the advice: see [`ADVICE`]).
pub fn runtime() -> Result<&'static OnnxRuntime, String> {
    RUNTIME
        .get_or_init(|| {
            let found = locate(&Search::from_env())?;
            load(&found)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The sentence `collage backends` and skipped placements print: "ONNX Runtime is not
/// available (REASON); install ...".
pub fn unavailable_message(reason: &str) -> String {
    format!("ONNX Runtime is not available ({reason}); {ADVICE}")
}

/// ONNX Runtime's state on this machine, for `collage backends`: version `1.23.2 (HOW)`.
pub fn availability() -> Availability {
    match runtime() {
        Ok(rt) => Availability {
            available: true,
            path: Some(rt.path.clone()),
            version: Some(format!("{} ({})", rt.version, rt.how)),
            error: None,
        },
        Err(reason) => Availability {
            available: false,
            path: None,
            version: None,
            error: Some(unavailable_message(&reason)),
        },
    }
}

/// The error for a session asked for without the library.
pub fn unavailable(reason: &str) -> Diagnostic {
    Diagnostic::error(codes::E2440, unavailable_message(reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn search(dir: &Path) -> Search {
        Search {
            library: None,
            virtual_env: None,
            path: Some(dir.join("bin").into_os_string()),
            timeout: Duration::from_secs(10),
        }
    }

    /// A fake `onnxruntime` package with `files` in its `capi/` folder.
    fn package(root: &Path, files: &[&str]) -> PathBuf {
        let pkg = root.join("site/onnxruntime");
        std::fs::create_dir_all(pkg.join("capi")).unwrap();
        for f in files {
            std::fs::write(pkg.join("capi").join(f), b"").unwrap();
        }
        pkg
    }

    /// An executable shell script at `dir/bin/name`.
    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn the_variable_wins_and_a_missing_file_is_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libonnxruntime.so.1.23.2");
        std::fs::write(&lib, b"").unwrap();
        let mut s = search(dir.path());
        s.library = Some(lib.clone().into_os_string());
        let found = locate(&s).unwrap();
        assert_eq!(found.how, "COLLAGE_ORT_LIBRARY");
        assert_eq!(found.path, std::fs::canonicalize(&lib).unwrap());
        // A python that would find a package is not asked when the variable is set.
        let pkg = package(dir.path(), &["libonnxruntime.so.1.23.2"]);
        script(dir.path(), "python3", &format!("echo {}", pkg.display()));
        s.library = Some(dir.path().join("missing.so").into_os_string());
        let why = locate(&s).unwrap_err();
        assert!(why.contains("COLLAGE_ORT_LIBRARY names"), "{why}");
        assert!(why.contains("missing.so"), "{why}");
    }

    #[test]
    fn python_says_where_the_package_is() {
        let dir = tempfile::tempdir().unwrap();
        let pkg = package(
            dir.path(),
            &[
                "libonnxruntime_providers_shared.so",
                "libonnxruntime.so",
                "libonnxruntime.so.1.23.2",
            ],
        );
        let py = script(dir.path(), "python3", &format!("echo {}", pkg.display()));
        let found = locate(&search(dir.path())).unwrap();
        assert_eq!(found.path, pkg.join("capi/libonnxruntime.so.1.23.2"));
        assert_eq!(
            found.how,
            format!("the onnxruntime package of {}", py.display())
        );
    }

    #[test]
    fn the_python_of_virtual_env_comes_first() {
        let dir = tempfile::tempdir().unwrap();
        let pkg = package(dir.path(), &["libonnxruntime.so"]);
        script(dir.path(), "python3", "exit 1");
        let venv = dir.path().join("venv");
        let py = script(&venv, "python", &format!("echo {}", pkg.display()));
        let mut s = search(dir.path());
        s.virtual_env = Some(venv.into_os_string());
        let found = locate(&s).unwrap();
        assert_eq!(found.path, pkg.join("capi/libonnxruntime.so"));
        assert!(found.how.ends_with(&py.display().to_string()), "{found:?}");
    }

    #[test]
    fn without_python_site_packages_are_scanned() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join("venv");
        let capi = venv.join("lib/python3.11/site-packages/onnxruntime/capi");
        std::fs::create_dir_all(&capi).unwrap();
        std::fs::write(capi.join("libonnxruntime.so.1.23.2"), b"").unwrap();
        let mut s = search(dir.path());
        s.virtual_env = Some(venv.clone().into_os_string());
        let found = locate(&s).unwrap();
        assert_eq!(found.path, capi.join("libonnxruntime.so.1.23.2"));
        assert!(found.how.contains("site-packages"), "{found:?}");
    }

    #[test]
    fn not_found_says_why_for_every_way_tried() {
        let dir = tempfile::tempdir().unwrap();
        // No python at all.
        let why = locate(&search(dir.path())).unwrap_err();
        assert!(why.contains("COLLAGE_ORT_LIBRARY is not set"), "{why}");
        assert!(why.contains("no `python3` on PATH"), "{why}");
        // A python without the package: its error is quoted.
        script(
            dir.path(),
            "python3",
            "echo \"ModuleNotFoundError: No module named 'onnxruntime'\" >&2; exit 1",
        );
        let why = locate(&search(dir.path())).unwrap_err();
        assert!(why.contains("No module named 'onnxruntime'"), "{why}");
        // A package without the library.
        let pkg = package(dir.path(), &["libonnxruntime_providers_shared.so"]);
        script(dir.path(), "python3", &format!("echo {}", pkg.display()));
        let why = locate(&search(dir.path())).unwrap_err();
        assert!(why.contains("holds no libonnxruntime.so"), "{why}");
        // A VIRTUAL_ENV without python or site-packages.
        let mut s = search(dir.path());
        s.virtual_env = Some(dir.path().join("novenv").into_os_string());
        let why = locate(&s).unwrap_err();
        assert!(why.contains("has no bin/python"), "{why}");
        assert!(why.contains("cannot list"), "{why}");
    }

    #[test]
    fn a_python_that_hangs_is_stopped() {
        let dir = tempfile::tempdir().unwrap();
        script(dir.path(), "python3", "exec sleep 30");
        let mut s = search(dir.path());
        s.timeout = Duration::from_millis(200);
        let start = std::time::Instant::now();
        let why = locate(&s).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(why.contains("within 0.2 s"), "{why}");
    }

    #[test]
    fn versions_are_parsed() {
        assert_eq!(parse_version("1.23.2"), Some((1, 23)));
        assert_eq!(parse_version("1.17.0-dev"), Some((1, 17)));
        assert_eq!(parse_version("garbage"), None);
        assert_eq!(parse_version(""), None);
    }
}
