//! The OpenMP runtime (GNU libgomp, `libgomp.so.1`, Debian `libgomp1`): the thread pool that
//! Debian's oneDNN (built with `DNNL_CPU_RUNTIME=OMP`), the OpenMP build of OpenBLAS and the
//! generated code compiled with `-fopenmp` all share. The process has one libgomp, whichever
//! library loaded it first, so a thread count set here is the one they see.
//!
//! OpenMP's thread count is per calling thread: `omp_set_num_threads` sets the count for the
//! parallel regions that *this* thread opens afterwards, and oneDNN reads
//! `omp_get_max_threads()` in the thread that executes its primitives. A backend therefore
//! calls [`Omp::set_num_threads`] in the thread that runs the kernels, before it runs them
//! (docs/backends.md, "Threads").

use super::{LibrarySpec, LoadError, Loaded};
use std::ffi::{c_int, c_uint, c_void};
use std::sync::{Arc, OnceLock};

/// Where the OpenMP runtime is found.
pub const SPEC: LibrarySpec = LibrarySpec {
    what: "the OpenMP runtime",
    soname: "libgomp.so.1",
    env: "COLLAGE_OMP_LIBRARY",
    package: "libgomp1",
    probe: "omp_get_max_threads",
    preferred_dir: None,
};

/// libgomp's entry point for `#pragma omp parallel`: runs `f(data)` on a team of threads.
type GompParallel = unsafe extern "C" fn(extern "C" fn(*mut c_void), *mut c_void, c_uint, c_uint);

/// The OpenMP runtime's thread-count functions, and its parallel region.
pub struct Omp {
    lib: Loaded,
    set_num_threads: unsafe extern "C" fn(c_int),
    get_max_threads: unsafe extern "C" fn() -> c_int,
    get_thread_num: unsafe extern "C" fn() -> c_int,
    get_num_threads: unsafe extern "C" fn() -> c_int,
    parallel: GompParallel,
}

/// How libgomp's idle threads wait, as this process's environment tells it (libgomp reads
/// `OMP_WAIT_POLICY` and `GOMP_SPINCOUNT` once, when it is loaded): part of a measurement's
/// cache key, since a kernel whose team sleeps between regions pays for waking it.
pub fn wait_settings() -> String {
    let var = |k: &str| {
        std::env::var(k)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "-".to_string())
    };
    format!(
        "omp wait {} spin {}",
        var("OMP_WAIT_POLICY"),
        var("GOMP_SPINCOUNT")
    )
}

/// What one parallel region runs: the closure, the runtime, and the first panic of a thread.
struct Region<'a> {
    f: &'a (dyn Fn(usize, usize) + Sync),
    omp: &'a Omp,
    panic: std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

extern "C" fn region_body(data: *mut c_void) {
    // SAFETY: `data` is the `Region` that `Omp::parallel` passed, alive until the region ends.
    let region = unsafe { &*(data as *const Region<'_>) };
    // SAFETY: no arguments; inside a parallel region they describe the team.
    let (t, n) = unsafe {
        (
            (region.omp.get_thread_num)(),
            (region.omp.get_num_threads)(),
        )
    };
    let t = usize::try_from(t).unwrap_or(0);
    let n = usize::try_from(n).unwrap_or(1).max(1);
    // A panic must not unwind into C: keep the first one and re-raise it after the region.
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (region.f)(t, n))) {
        if let Ok(mut slot) = region.panic.lock() {
            slot.get_or_insert(p);
        }
    }
}

/// The calling thread's OpenMP count set for a scope ([`Omp::with_threads`]).
pub struct ThreadsGuard<'a> {
    omp: &'a Omp,
    previous: usize,
}

impl Drop for ThreadsGuard<'_> {
    fn drop(&mut self) {
        self.omp.set_num_threads(self.previous);
    }
}

impl Omp {
    /// Loads the runtime `COLLAGE_OMP_LIBRARY` names, else `libgomp.so.1`.
    pub fn load() -> Result<Omp, LoadError> {
        Omp::from(super::open(&SPEC)?)
    }

    /// Loads the runtime from `file`.
    pub fn load_file(file: &str) -> Result<Omp, LoadError> {
        Omp::from(super::open_file(&SPEC, file)?)
    }

    fn from(lib: Loaded) -> Result<Omp, LoadError> {
        // SAFETY: the OpenMP 4.5 signatures: `void omp_set_num_threads(int)`,
        // `int omp_get_max_threads(void)`.
        // `GOMP_parallel(fn, data, num_threads, flags)` is libgomp's ABI for a parallel
        // region since GCC 4.9.
        unsafe {
            Ok(Omp {
                set_num_threads: lib.function("omp_set_num_threads")?,
                get_max_threads: lib.function("omp_get_max_threads")?,
                get_thread_num: lib.function("omp_get_thread_num")?,
                get_num_threads: lib.function("omp_get_num_threads")?,
                parallel: lib.function("GOMP_parallel")?,
                lib,
            })
        }
    }

    /// The process's runtime, loaded once.
    pub fn shared() -> Result<Arc<Omp>, LoadError> {
        static SHARED: OnceLock<Result<Arc<Omp>, LoadError>> = OnceLock::new();
        SHARED.get_or_init(|| Omp::load().map(Arc::new)).clone()
    }

    /// Where the runtime was found.
    pub fn path(&self) -> &std::path::Path {
        &self.lib.path
    }

    /// Sets the number of threads of the parallel regions the calling thread opens from now on
    /// (at least 1).
    pub fn set_num_threads(&self, n: usize) {
        let n = c_int::try_from(n.max(1)).unwrap_or(c_int::MAX);
        // SAFETY: any positive count is valid.
        unsafe { (self.set_num_threads)(n) }
    }

    /// Sets the calling thread's count to `n` until the returned guard is dropped, when the
    /// previous count comes back. oneDNN fixes the work split of many primitives (GEMMs,
    /// convolutions, reorders) when they are created, from the creating thread's count, so
    /// primitives must be created under the count they will run with.
    pub fn with_threads(&self, n: usize) -> ThreadsGuard<'_> {
        let previous = self.max_threads();
        self.set_num_threads(n);
        ThreadsGuard {
            omp: self,
            previous,
        }
    }

    /// The number of threads a parallel region opened by the calling thread would get.
    pub fn max_threads(&self) -> usize {
        // SAFETY: no arguments, no preconditions.
        let n = unsafe { (self.get_max_threads)() };
        usize::try_from(n).unwrap_or(1).max(1)
    }

    /// Runs `f(thread, threads)` on every thread of an OpenMP parallel region of `threads`
    /// threads (0: the calling thread's setting), on the pool oneDNN and OpenBLAS use, and
    /// returns when all are done. A batched GEMM splits its batch this way, each thread making
    /// single-threaded library calls (OpenBLAS's OpenMP build runs on one thread inside a
    /// parallel region) instead of starting threads per call. A panic in `f` is raised again
    /// here once the region has ended.
    pub fn parallel(&self, threads: usize, f: &(dyn Fn(usize, usize) + Sync)) {
        let region = Region {
            f,
            omp: self,
            panic: std::sync::Mutex::new(None),
        };
        let n = c_uint::try_from(threads).unwrap_or(c_uint::MAX);
        // SAFETY: `region_body` only reads `region`, which outlives the call (GOMP_parallel
        // returns after every thread of the team has finished).
        unsafe {
            (self.parallel)(
                region_body,
                &region as *const Region<'_> as *mut c_void,
                n,
                0,
            )
        };
        if let Some(p) = region.panic.into_inner().ok().flatten() {
            std::panic::resume_unwind(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_count_is_per_calling_thread() {
        let omp = Omp::shared().unwrap_or_else(|e| panic!("{e}"));
        // A fresh thread, so the setting cannot leak into other tests.
        std::thread::spawn(move || {
            omp.set_num_threads(3);
            assert_eq!(omp.max_threads(), 3);
            omp.set_num_threads(1);
            assert_eq!(omp.max_threads(), 1);
            omp.set_num_threads(0);
            assert_eq!(omp.max_threads(), 1, "0 means 1");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn parallel_runs_every_thread_once() {
        let omp = Omp::shared().unwrap_or_else(|e| panic!("{e}"));
        for threads in [1, 2, 3] {
            let seen = std::sync::Mutex::new(Vec::new());
            omp.parallel(threads, &|t, n| seen.lock().unwrap().push((t, n)));
            let mut seen = seen.into_inner().unwrap();
            seen.sort();
            let want: Vec<(usize, usize)> = (0..threads).map(|t| (t, threads)).collect();
            assert_eq!(seen, want);
        }
        // A panic in a thread comes back to the caller.
        let r = std::panic::catch_unwind(|| {
            omp.parallel(2, &|t, _| assert!(t != 1, "thread 1 fails"));
        });
        assert!(r.is_err());
    }

    #[test]
    fn a_scoped_thread_count_comes_back() {
        let omp = Omp::shared().unwrap_or_else(|e| panic!("{e}"));
        std::thread::scope(|s| {
            s.spawn(|| {
                omp.set_num_threads(3);
                {
                    let _g = omp.with_threads(1);
                    assert_eq!(omp.max_threads(), 1);
                }
                assert_eq!(omp.max_threads(), 3);
            });
        });
    }

    #[test]
    fn a_missing_runtime_is_an_error() {
        let err = Omp::load_file("/nonexistent/libgomp.so.1").err().unwrap();
        assert!(err.to_string().contains("libgomp1"), "{err}");
    }
}
