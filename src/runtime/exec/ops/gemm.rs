//! Matrix products through the `matrixmultiply` crate.
//!
//! `matrixmultiply` sums each dot product in blocks of a fixed number of `k` steps, in order,
//! with the same kernel for every tile; its result for an element depends only on the operands,
//! not on the matrix's other dimensions or on where the element falls in the tiling. Splitting
//! the rows of `C` across threads therefore gives the same bits as one call, whatever the
//! number of threads (the crate's own threading is not enabled).

use rayon::prelude::*;

/// Products with fewer multiply-adds than this run on one thread.
const PAR_MIN_FLOPS: usize = 1 << 20;

fn check(len: usize, rows: usize, cols: usize, rs: isize, cs: isize) -> bool {
    if rows == 0 || cols == 0 {
        return true;
    }
    rs >= 0
        && cs >= 0
        && (rows - 1)
            .checked_mul(rs as usize)
            .and_then(|x| {
                (cols - 1)
                    .checked_mul(cs as usize)
                    .and_then(|y| x.checked_add(y))
            })
            .is_some_and(|last| last < len)
}

/// `c[m×n] = a[m×k] · b[k×n]` on the calling thread. `a` and `b` are addressed through their
/// row and column strides (so transposed operands need no copy); `c` is row-major and
/// overwritten.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_serial(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    rsa: isize,
    csa: isize,
    b: &[f32],
    rsb: isize,
    csb: isize,
    c: &mut [f32],
) {
    assert!(
        check(a.len(), m, k, rsa, csa) && check(b.len(), k, n, rsb, csb) && c.len() >= m * n,
        "matrix operands out of bounds"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c[..m * n].fill(0.0);
        return;
    }
    // SAFETY: the checks above keep every element addressed by (m, k, rsa, csa), (k, n, rsb,
    // csb) and the row-major m×n output inside the slices.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            rsa,
            csa,
            b.as_ptr(),
            rsb,
            csb,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// [`sgemm_serial`], with the rows of `c` split across the current thread pool when the product
/// is large.
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    rsa: isize,
    csa: isize,
    b: &[f32],
    rsb: isize,
    csb: isize,
    c: &mut [f32],
) {
    let threads = rayon::current_num_threads();
    if threads <= 1 || m < 2 || m.saturating_mul(n).saturating_mul(k) < PAR_MIN_FLOPS {
        return sgemm_serial(m, k, n, a, rsa, csa, b, rsb, csb, c);
    }
    let per = m.div_ceil(threads * 2).max(1);
    c[..m * n]
        .par_chunks_mut(per * n)
        .enumerate()
        .for_each(|(i, chunk)| {
            let r0 = i * per;
            let rows = chunk.len() / n;
            let a_off = r0 as isize * rsa;
            sgemm_serial(
                rows,
                k,
                n,
                &a[a_off as usize..],
                rsa,
                csa,
                b,
                rsb,
                csb,
                chunk,
            );
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(m: usize, k: usize, n: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0f64;
                for p in 0..k {
                    s += a[i * k + p] as f64 * b[p * n + j] as f64;
                }
                c[i * n + j] = s as f32;
            }
        }
        c
    }

    #[test]
    fn matches_naive_and_is_independent_of_threads() {
        let (m, k, n) = (67, 300, 45);
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7919) % 13) as f32 / 7.0 - 0.9)
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i * 104729) % 17) as f32 / 9.0 - 0.8)
            .collect();
        let mut c1 = vec![0f32; m * n];
        sgemm_serial(m, k, n, &a, k as isize, 1, &b, n as isize, 1, &mut c1);
        for (x, y) in c1.iter().zip(naive(m, k, n, &a, &b)) {
            assert!((x - y).abs() <= 1e-4 * y.abs().max(1.0), "{x} vs {y}");
        }
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut c2 = vec![0f32; m * n];
            pool.install(|| {
                // Force the parallel path with a large enough product.
                let big_m = m;
                sgemm(big_m, k, n, &a, k as isize, 1, &b, n as isize, 1, &mut c2)
            });
            assert_eq!(c1, c2, "{threads} threads");
            // Rows computed in a smaller call give the same bits.
            let mut part = vec![0f32; 5 * n];
            sgemm_serial(
                5,
                k,
                n,
                &a[10 * k..],
                k as isize,
                1,
                &b,
                n as isize,
                1,
                &mut part,
            );
            assert_eq!(&c1[10 * n..15 * n], &part[..]);
        }
    }
}
