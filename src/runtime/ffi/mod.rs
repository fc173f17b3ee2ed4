//! Foreign-function layers for the CPU libraries the backends run on: oneDNN 2.x ([`dnnl`]),
//! OpenBLAS ([`openblas`]) and the OpenMP runtime they share ([`omp`]); and ONNX Runtime
//! ([`ort`]), the yardstick `collage bench` compares with, through the `ort` crate (found in the
//! `onnxruntime` Python package rather than a Debian package: see that module).
//!
//! Every library is loaded at run time with `libloading` (never linked when the crate is built,
//! no bindgen), from hand-written declarations of the C functions used, so the crate builds and
//! everything else runs on a machine without them. A library that is missing is a
//! [`LoadError`] naming the Debian package that provides it. An environment variable points
//! the loader at another file (`COLLAGE_DNNL_LIBRARY`, `COLLAGE_OPENBLAS_LIBRARY`,
//! `COLLAGE_OMP_LIBRARY`); pointing it at a file that does not exist simulates a machine
//! without the library.
//!
//! A loaded library stays loaded for the life of the process: oneDNN's JIT-compiled kernels and
//! the OpenMP thread pool outlive any one handle, and unloading them under running threads is
//! not safe.
//!
//! docs/backends.md describes the libraries, the thread settings and how a backend uses them.

pub mod dnnl;
pub mod omp;
pub mod openblas;
pub mod ort;

use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;
use std::mem::ManuallyDrop;
use std::path::PathBuf;

/// How to find one library.
#[derive(Clone, Copy, Debug)]
pub struct LibrarySpec {
    /// What it is, for messages: `oneDNN`.
    pub what: &'static str,
    /// The file the dynamic loader looks for by default: `libdnnl.so.2`.
    pub soname: &'static str,
    /// The environment variable that names another file instead.
    pub env: &'static str,
    /// The Debian package that provides the default file.
    pub package: &'static str,
    /// A symbol of the library, used to find where the loader found it.
    pub probe: &'static str,
    /// A directory under `/usr/lib/<multiarch>/` holding the preferred build, tried before
    /// the default name (`openblas-openmp`: Debian installs the OpenMP build of OpenBLAS
    /// there, while `libopenblas.so.0` may point at another build through alternatives).
    pub preferred_dir: Option<&'static str>,
}

/// Why a library could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    /// What was looked for: `oneDNN`.
    pub what: &'static str,
    /// The file asked for (the environment variable's value, or the default name).
    pub file: String,
    /// The Debian package that provides the default file.
    pub package: &'static str,
    /// The environment variable that names another file.
    pub env: &'static str,
    /// What went wrong (the loader's message, or the missing symbol).
    pub reason: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is not available ({}: {}); install the Debian package `{}` \
             (apt-get install {}), or set {} to the library's path",
            self.what, self.file, self.reason, self.package, self.package, self.env
        )
    }
}

impl std::error::Error for LoadError {}

/// A library opened for the life of the process, and where it was found.
pub struct Loaded {
    lib: ManuallyDrop<libloading::Library>,
    /// The file the loader opened (resolved through `dladdr`), or the name asked for when that
    /// cannot be told.
    pub path: PathBuf,
    spec: LibrarySpec,
    file: String,
}

impl Loaded {
    /// A function of the library, or a [`LoadError`] naming the missing symbol.
    ///
    /// # Safety
    /// `T` must be the function's exact C signature.
    pub unsafe fn function<T: Copy>(&self, name: &str) -> Result<T, LoadError> {
        match self.lib.get::<T>(name) {
            Ok(sym) => Ok(*sym),
            Err(e) => Err(LoadError {
                what: self.spec.what,
                file: self.file.clone(),
                package: self.spec.package,
                env: self.spec.env,
                reason: format!("it has no `{name}` ({})", error_chain(&e)),
            }),
        }
    }
}

/// The file to open for `spec`: its environment variable's value; else the preferred build
/// where it is installed; else its default name, for the dynamic loader to find.
pub fn file_for(spec: &LibrarySpec) -> String {
    if let Some(v) = std::env::var_os(spec.env).filter(|v| !v.is_empty()) {
        return v.to_string_lossy().into_owned();
    }
    if let Some(dir) = spec.preferred_dir {
        let p = format!(
            "/usr/lib/{}-linux-gnu/{dir}/{}",
            std::env::consts::ARCH,
            spec.soname
        );
        if std::path::Path::new(&p).exists() {
            return p;
        }
    }
    spec.soname.to_string()
}

/// Opens the library `spec` names (its environment variable first), for good.
pub fn open(spec: &LibrarySpec) -> Result<Loaded, LoadError> {
    open_file(spec, &file_for(spec))
}

/// Opens `file` as the library `spec` describes, for good.
pub fn open_file(spec: &LibrarySpec, file: &str) -> Result<Loaded, LoadError> {
    // SAFETY: loading runs the library's initialisers; the libraries opened here are the
    // system's oneDNN, OpenBLAS and OpenMP runtime (or files the user named instead).
    let lib = unsafe { libloading::Library::new(file) }.map_err(|e| LoadError {
        what: spec.what,
        file: file.to_string(),
        package: spec.package,
        env: spec.env,
        reason: error_chain(&e),
    })?;
    let mut loaded = Loaded {
        lib: ManuallyDrop::new(lib),
        path: PathBuf::from(file),
        spec: *spec,
        file: file.to_string(),
    };
    // SAFETY: the probe is only used for its address.
    if let Ok(sym) = unsafe { loaded.lib.get::<*const c_void>(spec.probe) } {
        if let Some(p) = object_path(*sym) {
            loaded.path = p;
        }
    }
    Ok(loaded)
}

/// An error and its sources, joined (libloading keeps the loader's message in the source).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        next = s.source();
    }
    text
}

/// `Dl_info` of glibc's `dladdr`.
#[repr(C)]
struct DlInfo {
    dli_fname: *const c_char,
    dli_fbase: *mut c_void,
    dli_sname: *const c_char,
    dli_saddr: *mut c_void,
}

extern "C" {
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
}

/// The file of the shared object that holds `addr`.
fn object_path(addr: *const c_void) -> Option<PathBuf> {
    let mut info = DlInfo {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: `dladdr` only writes `info`; the name it returns lives as long as the object,
    // which is never unloaded here.
    let ok = unsafe { dladdr(addr, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(name.to_string_lossy().into_owned());
    Some(std::fs::canonicalize(&path).unwrap_or(path))
}

/// A C string owned by a library, as a Rust string (`None` for a null pointer).
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string that stays valid during the call.
pub(crate) unsafe fn c_str(p: *const c_char) -> Option<String> {
    (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
}

/// One backend library's state on this machine, for `collage backends` and cache keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Availability {
    /// Whether it can be used.
    pub available: bool,
    /// Where it was found.
    pub path: Option<PathBuf>,
    /// Its version (and build configuration, for OpenBLAS).
    pub version: Option<String>,
    /// Why it cannot be used.
    pub error: Option<String>,
}

impl Availability {
    pub(crate) fn missing(e: &LoadError) -> Availability {
        Availability {
            available: false,
            path: None,
            version: None,
            error: Some(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOWHERE: LibrarySpec = LibrarySpec {
        what: "a test library",
        soname: "libcollage-test-nowhere.so.0",
        env: "COLLAGE_TEST_NOWHERE_LIBRARY",
        package: "libcollage-test0",
        probe: "collage_test_probe",
        preferred_dir: None,
    };

    #[test]
    fn a_missing_library_names_its_package() {
        let err = open_file(&NOWHERE, "/nonexistent/libcollage-test.so.0")
            .err()
            .expect("no such file");
        let text = err.to_string();
        assert!(text.contains("a test library is not available"), "{text}");
        assert!(text.contains("/nonexistent/libcollage-test.so.0"), "{text}");
        assert!(text.contains("apt-get install libcollage-test0"), "{text}");
        assert!(text.contains("COLLAGE_TEST_NOWHERE_LIBRARY"), "{text}");
    }

    #[test]
    fn a_library_is_found_with_its_path() {
        // glibc's math library is on every machine that runs the tests.
        let spec = LibrarySpec {
            what: "libm",
            soname: "libm.so.6",
            env: "COLLAGE_TEST_LIBM",
            package: "libc6",
            probe: "cos",
            preferred_dir: None,
        };
        let lib = open_file(&spec, spec.soname).expect("libm loads");
        assert!(lib.path.is_absolute(), "{}", lib.path.display());
        assert!(lib.path.exists());
        let cos: unsafe extern "C" fn(f64) -> f64 = unsafe { lib.function("cos") }.unwrap();
        assert_eq!(unsafe { cos(0.0) }, 1.0);
        let err = unsafe { lib.function::<unsafe extern "C" fn()>("no_such_function_here") }
            .expect_err("missing symbol");
        assert!(err.reason.contains("no_such_function_here"), "{err}");
    }
}
