//! OpenBLAS (the OpenMP build from Debian `libopenblas0-openmp`, loaded at run time from
//! `/usr/lib/<multiarch>/openblas-openmp/libopenblas.so.0` where it is installed, else from
//! `libopenblas.so.0`, which Debian's alternatives may point at another build):
//! `cblas_sgemm` and `cblas_sgemv` with the library's thread count and build
//! description. The declarations are the CBLAS ones with OpenBLAS's default 32-bit `blasint`
//! (a 64-bit-integer build, whose configuration says `USE64BITINT`, is refused).
//!
//! [`OpenBlas::sgemm`] and [`OpenBlas::sgemv`] check every dimension, leading dimension and
//! slice length before calling, so a mistake is an [`BlasError`], never an out-of-bounds
//! access by the library.

use super::{Availability, LibrarySpec, LoadError, Loaded};
use std::ffi::{c_char, c_int};
use std::fmt;
use std::sync::{Arc, OnceLock};

/// Where OpenBLAS is found.
pub const SPEC: LibrarySpec = LibrarySpec {
    what: "OpenBLAS",
    soname: "libopenblas.so.0",
    env: "COLLAGE_OPENBLAS_LIBRARY",
    package: "libopenblas0-openmp",
    probe: "cblas_sgemm",
    preferred_dir: Some("openblas-openmp"),
};

/// CBLAS's `CblasRowMajor`.
const ROW_MAJOR: c_int = 101;
/// CBLAS's `CblasNoTrans`.
const NO_TRANS: c_int = 111;
/// CBLAS's `CblasTrans`.
const TRANS: c_int = 112;

type SgemmFn = unsafe extern "C" fn(
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    f32,
    *const f32,
    c_int,
    *const f32,
    c_int,
    f32,
    *mut f32,
    c_int,
);

type SgemvFn = unsafe extern "C" fn(
    c_int,
    c_int,
    c_int,
    c_int,
    f32,
    *const f32,
    c_int,
    *const f32,
    c_int,
    f32,
    *mut f32,
    c_int,
);

/// The loaded library.
pub struct OpenBlas {
    lib: Loaded,
    sgemm: SgemmFn,
    sgemv: SgemvFn,
    set_num_threads: unsafe extern "C" fn(c_int),
    get_num_threads: unsafe extern "C" fn() -> c_int,
    get_config: unsafe extern "C" fn() -> *const c_char,
    get_corename: unsafe extern "C" fn() -> *const c_char,
}

/// A GEMM or GEMV whose arguments do not describe valid matrices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlasError(pub String);

impl fmt::Display for BlasError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpenBLAS: {}", self.0)
    }
}

impl std::error::Error for BlasError {}

/// A row-major matrix operand: its slice, rows × columns as stored, and leading dimension.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    /// The elements.
    pub data: &'a [f32],
    /// Rows as stored.
    pub rows: usize,
    /// Columns as stored.
    pub cols: usize,
    /// Distance between the starts of two rows (at least `cols`).
    pub ld: usize,
}

impl<'a> Matrix<'a> {
    /// A densely stored `rows × cols` matrix.
    pub fn dense(data: &'a [f32], rows: usize, cols: usize) -> Matrix<'a> {
        Matrix {
            data,
            rows,
            cols,
            ld: cols,
        }
    }
}

/// The elements a row-major `rows × cols` matrix with leading dimension `ld` spans.
fn span(rows: usize, cols: usize, ld: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1).checked_mul(ld)?.checked_add(cols)
}

fn int(what: &str, v: usize) -> Result<c_int, BlasError> {
    c_int::try_from(v)
        .map_err(|_| BlasError(format!("{what} = {v} exceeds OpenBLAS's 32-bit integers")))
}

fn check(what: &str, rows: usize, cols: usize, ld: usize, len: usize) -> Result<(), BlasError> {
    if ld < cols.max(1) {
        return Err(BlasError(format!(
            "{what}: leading dimension {ld} is below its {cols} columns"
        )));
    }
    match span(rows, cols, ld) {
        Some(n) if n <= len => Ok(()),
        _ => Err(BlasError(format!(
            "{what}: {rows}×{cols} with leading dimension {ld} needs more than its {len} elements"
        ))),
    }
}

impl OpenBlas {
    /// Loads the library `COLLAGE_OPENBLAS_LIBRARY` names, else `libopenblas.so.0`.
    pub fn load() -> Result<OpenBlas, LoadError> {
        OpenBlas::from(super::open(&SPEC)?)
    }

    /// Loads the library from `file`.
    pub fn load_file(file: &str) -> Result<OpenBlas, LoadError> {
        OpenBlas::from(super::open_file(&SPEC, file)?)
    }

    /// The process's OpenBLAS (from `COLLAGE_OPENBLAS_LIBRARY` or the default name), loaded
    /// once.
    pub fn shared() -> Result<Arc<OpenBlas>, LoadError> {
        static SHARED: OnceLock<Result<Arc<OpenBlas>, LoadError>> = OnceLock::new();
        SHARED
            .get_or_init(|| OpenBlas::load().map(Arc::new))
            .clone()
    }

    fn from(lib: Loaded) -> Result<OpenBlas, LoadError> {
        // SAFETY: the signatures of OpenBLAS's cblas.h (blasint = int) and its extensions.
        let blas = unsafe {
            OpenBlas {
                sgemm: lib.function("cblas_sgemm")?,
                sgemv: lib.function("cblas_sgemv")?,
                set_num_threads: lib.function("openblas_set_num_threads")?,
                get_num_threads: lib.function("openblas_get_num_threads")?,
                get_config: lib.function("openblas_get_config")?,
                get_corename: lib.function("openblas_get_corename")?,
                lib,
            }
        };
        if blas.config().contains("USE64BITINT") {
            return Err(LoadError {
                what: SPEC.what,
                file: blas.lib.path.display().to_string(),
                package: SPEC.package,
                env: SPEC.env,
                reason: "it is a 64-bit-integer build (`USE64BITINT`); the declarations here \
                         are for 32-bit integers"
                    .into(),
            });
        }
        Ok(blas)
    }

    /// Where the library was found.
    pub fn path(&self) -> &std::path::Path {
        &self.lib.path
    }

    /// The build description: `OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY USE_OPENMP
    /// Cooperlake MAX_THREADS=64`.
    pub fn config(&self) -> String {
        // SAFETY: returns a static string owned by the library.
        unsafe { super::c_str((self.get_config)()) }.unwrap_or_default()
    }

    /// The kernel set chosen for this CPU: `Cooperlake`.
    pub fn corename(&self) -> String {
        // SAFETY: returns a static string owned by the library.
        unsafe { super::c_str((self.get_corename)()) }.unwrap_or_default()
    }

    /// Holds OpenBLAS for the calling thread until the guard is dropped. OpenBLAS keeps one
    /// process-wide thread count and one set of buffers for its threads: two calls made at once
    /// from different threads with different counts, outside an OpenMP region, corrupted each
    /// other's results here. Every user holds this around its calls; calls made inside an
    /// OpenMP region opened while it is held (a batch split across the pool) run
    /// single-threaded on their own buffers and need no lock of their own.
    pub fn serial(&self) -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        SERIAL.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the build runs on the OpenMP runtime (and so shares oneDNN's thread pool).
    pub fn uses_openmp(&self) -> bool {
        self.config().split_whitespace().any(|w| w == "USE_OPENMP")
    }

    /// Sets the number of threads OpenBLAS uses (at least 1). In the OpenMP build this also
    /// sets the calling thread's OpenMP count (`omp_set_num_threads` does not set OpenBLAS's);
    /// a call made inside an OpenMP parallel region runs on one thread whatever the setting
    /// (libgomp runs nested regions on one thread).
    pub fn set_num_threads(&self, n: usize) {
        let n = c_int::try_from(n.max(1)).unwrap_or(c_int::MAX);
        // SAFETY: any positive count is valid.
        unsafe { (self.set_num_threads)(n) }
    }

    /// The number of threads OpenBLAS uses.
    pub fn num_threads(&self) -> usize {
        // SAFETY: no arguments.
        usize::try_from(unsafe { (self.get_num_threads)() })
            .unwrap_or(1)
            .max(1)
    }

    /// `C ← alpha · op(A) · op(B) + beta · C`, all row-major, where `op(X)` is `X` or, with its
    /// flag, `Xᵀ`: `op(A)` is `m × k`, `op(B)` is `k × n` and `C` is `m × n` with leading
    /// dimension `ldc`. `a` and `b` are given as stored (`A` is `k × m` when transposed).
    #[allow(clippy::too_many_arguments)]
    pub fn sgemm(
        &self,
        a: Matrix<'_>,
        trans_a: bool,
        b: Matrix<'_>,
        trans_b: bool,
        alpha: f32,
        beta: f32,
        c: &mut [f32],
        ldc: usize,
    ) -> Result<(), BlasError> {
        let (m, k) = if trans_a {
            (a.cols, a.rows)
        } else {
            (a.rows, a.cols)
        };
        let (kb, n) = if trans_b {
            (b.cols, b.rows)
        } else {
            (b.rows, b.cols)
        };
        if k != kb {
            return Err(BlasError(format!(
                "inner dimensions differ: op(A) is {m}×{k}, op(B) is {kb}×{n}"
            )));
        }
        check("A", a.rows, a.cols, a.ld, a.data.len())?;
        check("B", b.rows, b.cols, b.ld, b.data.len())?;
        check("C", m, n, ldc, c.len())?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let (mi, ni, ki) = (int("M", m)?, int("N", n)?, int("K", k)?);
        let (lda, ldb, ldc) = (int("lda", a.ld)?, int("ldb", b.ld)?, int("ldc", ldc)?);
        let t = |x: bool| if x { TRANS } else { NO_TRANS };
        // SAFETY: every operand spans its slice (checked above); K = 0 only scales C.
        unsafe {
            (self.sgemm)(
                ROW_MAJOR,
                t(trans_a),
                t(trans_b),
                mi,
                ni,
                ki,
                alpha,
                a.data.as_ptr(),
                lda,
                b.data.as_ptr(),
                ldb,
                beta,
                c.as_mut_ptr(),
                ldc,
            )
        }
        Ok(())
    }

    /// `y ← alpha · op(A) · x + beta · y` for a row-major `A` (`op(A)` is `A`, or `Aᵀ` with
    /// `trans`), contiguous `x` and `y`. A one-row dense layer is this with `A` its weight
    /// (OpenBLAS 0.3.21's sgemm is many times slower on one row).
    pub fn sgemv(
        &self,
        a: Matrix<'_>,
        trans: bool,
        x: &[f32],
        alpha: f32,
        beta: f32,
        y: &mut [f32],
    ) -> Result<(), BlasError> {
        check("A", a.rows, a.cols, a.ld, a.data.len())?;
        let (rows, cols) = if trans {
            (a.cols, a.rows)
        } else {
            (a.rows, a.cols)
        };
        if x.len() < cols || y.len() < rows {
            return Err(BlasError(format!(
                "op(A) is {rows}×{cols}: x has {} elements, y {}",
                x.len(),
                y.len()
            )));
        }
        if rows == 0 {
            return Ok(());
        }
        let (m, n, lda) = (int("M", a.rows)?, int("N", a.cols)?, int("lda", a.ld)?);
        // SAFETY: A spans its slice, x and y are long enough (checked above).
        unsafe {
            (self.sgemv)(
                ROW_MAJOR,
                if trans { TRANS } else { NO_TRANS },
                m,
                n,
                alpha,
                a.data.as_ptr(),
                lda,
                x.as_ptr(),
                1,
                beta,
                y.as_mut_ptr(),
                1,
            )
        }
        Ok(())
    }
}

/// OpenBLAS on this machine: found or not, where, and its build description.
pub fn availability() -> Availability {
    match OpenBlas::shared() {
        Ok(b) => Availability {
            available: true,
            path: Some(b.path().to_path_buf()),
            version: Some(b.config()),
            error: None,
        },
        Err(e) => Availability::missing(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blas() -> Arc<OpenBlas> {
        // The test command (.ci/run) installs libopenblas0-openmp; a machine without it fails
        // here with the package's name.
        OpenBlas::shared().unwrap_or_else(|e| panic!("{e}"))
    }

    /// A deterministic matrix of small integers (exact in float32 sums).
    fn matrix(rows: usize, cols: usize, seed: usize) -> Vec<f32> {
        (0..rows * cols)
            .map(|i| ((i * 7 + seed * 13) % 11) as f32 - 5.0)
            .collect()
    }

    /// Plain `op(A) · op(B)` with `A`, `B` as stored.
    fn reference(
        a: &[f32],
        (ar, ac): (usize, usize),
        ta: bool,
        b: &[f32],
        (br, bc): (usize, usize),
        tb: bool,
    ) -> Vec<f32> {
        let at = |i: usize, p: usize| if ta { a[p * ac + i] } else { a[i * ac + p] };
        let bt = |p: usize, j: usize| if tb { b[j * bc + p] } else { b[p * bc + j] };
        let (m, k) = if ta { (ac, ar) } else { (ar, ac) };
        let n = if tb { br } else { bc };
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
            }
        }
        c
    }

    #[test]
    fn build_is_the_openmp_one() {
        let b = blas();
        assert!(b.config().starts_with("OpenBLAS "), "{}", b.config());
        assert!(b.uses_openmp(), "{}: not the OpenMP build", b.config());
        assert!(!b.corename().is_empty());
        assert!(b.path().is_absolute());
    }

    #[test]
    fn sgemm_matches_a_plain_loop_with_every_transpose() {
        let b = blas();
        let _serial = b.serial();
        let (m, n, k) = (5, 7, 3);
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let (ar, ac) = if ta { (k, m) } else { (m, k) };
            let (br, bc) = if tb { (n, k) } else { (k, n) };
            let a = matrix(ar, ac, 1);
            let bm = matrix(br, bc, 2);
            let mut c = vec![0.0; m * n];
            b.sgemm(
                Matrix::dense(&a, ar, ac),
                ta,
                Matrix::dense(&bm, br, bc),
                tb,
                1.0,
                0.0,
                &mut c,
                n,
            )
            .unwrap();
            assert_eq!(
                c,
                reference(&a, (ar, ac), ta, &bm, (br, bc), tb),
                "{ta} {tb}"
            );
        }
    }

    #[test]
    fn sgemm_with_a_bias_through_beta_and_one_row() {
        let b = blas();
        let _serial = b.serial();
        // A dense layer Y = X·Wᵀ + bias with M = 1: the bias broadcast into C, beta = 1.
        let (m, n, k) = (1, 6, 4);
        let x = matrix(m, k, 3);
        let w = matrix(n, k, 4);
        let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.5).collect();
        let mut y: Vec<f32> = (0..m).flat_map(|_| bias.iter().copied()).collect();
        b.sgemm(
            Matrix::dense(&x, m, k),
            false,
            Matrix::dense(&w, n, k),
            true,
            1.0,
            1.0,
            &mut y,
            n,
        )
        .unwrap();
        let mut want = reference(&x, (m, k), false, &w, (n, k), true);
        for (j, v) in want.iter_mut().enumerate() {
            *v += bias[j % n];
        }
        assert_eq!(y, want);
        // The same row through sgemv: y = W·x.
        let mut y2 = vec![0.0; n];
        b.sgemv(Matrix::dense(&w, n, k), false, &x, 1.0, 0.0, &mut y2)
            .unwrap();
        assert_eq!(y2, reference(&x, (m, k), false, &w, (n, k), true));
    }

    #[test]
    fn sgemm_with_leading_dimensions() {
        let b = blas();
        let _serial = b.serial();
        // A 2×3 block of a 2×5 buffer, times a 3×2 block of a 3×4 buffer, into a 2×2 block of a
        // 2×3 buffer whose third column stays untouched.
        let a = matrix(2, 5, 5);
        let bm = matrix(3, 4, 6);
        let mut c = vec![9.0; 6];
        b.sgemm(
            Matrix {
                data: &a,
                rows: 2,
                cols: 3,
                ld: 5,
            },
            false,
            Matrix {
                data: &bm,
                rows: 3,
                cols: 2,
                ld: 4,
            },
            false,
            1.0,
            0.0,
            &mut c,
            3,
        )
        .unwrap();
        for i in 0..2 {
            for j in 0..2 {
                let want: f32 = (0..3).map(|p| a[i * 5 + p] * bm[p * 4 + j]).sum();
                assert_eq!(c[i * 3 + j], want);
            }
            assert_eq!(c[i * 3 + 2], 9.0);
        }
    }

    #[test]
    fn bad_shapes_are_errors_not_calls() {
        let b = blas();
        let _serial = b.serial();
        let a = vec![0.0; 6];
        let mut c = vec![0.0; 4];
        let m23 = Matrix::dense(&a, 2, 3);
        // Inner dimensions differ.
        let e = b.sgemm(m23, false, m23, false, 1.0, 0.0, &mut c, 2);
        assert!(e.unwrap_err().0.contains("inner dimensions"));
        // C too short for 2×2 with ldc 3.
        let e = b.sgemm(m23, false, m23, true, 1.0, 0.0, &mut c, 3);
        assert!(e.unwrap_err().0.contains("C:"));
        // A leading dimension below the columns.
        let bad = Matrix {
            data: &a,
            rows: 2,
            cols: 3,
            ld: 2,
        };
        assert!(b.sgemm(bad, false, m23, true, 1.0, 0.0, &mut c, 2).is_err());
        // A slice shorter than the matrix.
        let short = Matrix::dense(&a[..5], 2, 3);
        assert!(b
            .sgemm(short, false, m23, true, 1.0, 0.0, &mut c, 2)
            .is_err());
        // sgemv with a short x.
        let mut y = vec![0.0; 2];
        assert!(b.sgemv(m23, false, &[1.0, 2.0], 1.0, 0.0, &mut y).is_err());
    }

    #[test]
    fn thread_count_round_trips() {
        let b = blas();
        std::thread::spawn(move || {
            let _serial = b.serial();
            b.set_num_threads(1);
            assert_eq!(b.num_threads(), 1);
            b.set_num_threads(2);
            assert_eq!(b.num_threads(), 2);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn missing_library_names_the_package() {
        let err = OpenBlas::load_file("/nonexistent/libopenblas.so.0")
            .err()
            .unwrap();
        let text = err.to_string();
        assert!(text.contains("libopenblas0-openmp"), "{text}");
        assert!(text.contains("COLLAGE_OPENBLAS_LIBRARY"), "{text}");
    }
}
