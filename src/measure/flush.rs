//! Cold weights for candidate timings (`--cold-candidates`).
//!
//! A candidate timed in a loop keeps its weights, its packed weights and its working memory in
//! the processor's caches from one call to the next. Inside a whole model it does not: between
//! two calls of one partition run all the other kernels, and a model's weights (ResNet-50:
//! 100 MB, GPT-2: 500 MB) are far larger than the last-level cache. A warm loop therefore
//! favours the kernels that read the most memory, the ones the caches help most.
//!
//! Before each timed call, [`evict`] writes back and invalidates, line by line, every buffer
//! the candidate's executable keeps between calls ([`crate::backend::Prepared::resident`]):
//! TVM's `cache_flush_cpu_non_first_arg` does the same for the arguments of a tuned kernel
//! (all but its first, the input). Inputs stay warm, as inside a model an input has usually
//! just been written by the kernel before; so do the code and the executor's own data, which
//! a whole model keeps warm too (evicting the whole cache instead made every small kernel look
//! 10 µs slower than it runs inside a model).
//!
//! The lines are evicted on the OpenMP pool the kernels use, each thread a share, so that the
//! pool's threads are awake when the timed call starts, as they are inside a model where the
//! kernels follow each other (letting them fall asleep would charge a small kernel their
//! wake-up).
//!
//! On processors other than x86-64 nothing is evicted: candidates are timed warm there.

use crate::ffi::omp::Omp;

/// Bytes of one cache line.
const LINE: usize = 64;

/// Whether [`evict`] evicts anything on this processor.
pub const EVICTS: bool = cfg!(target_arch = "x86_64");

/// Memory by address: a buffer's first byte and its length. Addresses rather than slices,
/// because the buffers belong to kernels that guard them with locks; evicting a line neither
/// reads nor writes its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    start: usize,
    len: usize,
}

impl Range {
    /// The bytes of `b`.
    pub fn of(b: &[u8]) -> Range {
        Range {
            start: b.as_ptr() as usize,
            len: b.len(),
        }
    }
}

/// Writes back and invalidates every cache line of `ranges`, on `omp`'s pool (with the
/// calling thread's thread count) when given, else on the calling thread. Every range must be
/// memory that stays allocated during the call.
pub fn evict(ranges: &[Range], omp: Option<&Omp>) {
    let share = |t: usize, n: usize| {
        share_lines(ranges, t, n, &mut flush_line);
        fence();
    };
    match omp {
        Some(omp) if !ranges.iter().all(|r| r.len == 0) => omp.parallel(0, &share),
        _ => share(0, 1),
    }
}

/// Calls `f` on an address in each cache line of the `t`-th of `n` nearly equal shares of the
/// lines of `ranges` (taken in order).
fn share_lines(ranges: &[Range], t: usize, n: usize, f: &mut dyn FnMut(usize)) {
    let total: usize = ranges.iter().map(|r| r.len.div_ceil(LINE)).sum();
    let n = n.max(1);
    let (from, to) = (total * t / n, total * (t + 1) / n);
    // `k`: the first line of the range, counted over all ranges.
    let mut k = 0;
    for r in ranges {
        let lines = r.len.div_ceil(LINE);
        for l in from.max(k)..to.min(k + lines) {
            f(r.start + ((l - k) * LINE).min(r.len - 1));
        }
        k += lines;
    }
}

#[cfg(target_arch = "x86_64")]
fn flush_line(addr: usize) {
    // SAFETY: SSE2 is part of x86-64; `addr` lies in memory the caller keeps allocated
    // (`evict`'s contract), and flushing a line does not change its contents.
    unsafe { std::arch::x86_64::_mm_clflush(addr as *const u8) }
}

#[cfg(target_arch = "x86_64")]
fn fence() {
    // SAFETY: SSE2 is part of x86-64.
    unsafe { std::arch::x86_64::_mm_mfence() }
}

#[cfg(not(target_arch = "x86_64"))]
fn flush_line(_addr: usize) {}

#[cfg(not(target_arch = "x86_64"))]
fn fence() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_of_every_range_is_visited_once_whatever_the_split() {
        for lens in [
            vec![],
            vec![0],
            vec![1],
            vec![64, 65, 1000],
            vec![4096, 3, 0, 130],
        ] {
            // Ranges at made-up addresses 1 MiB apart (only addresses are computed).
            let ranges: Vec<Range> = lens
                .iter()
                .enumerate()
                .map(|(i, &len)| Range {
                    start: (i + 1) << 20,
                    len,
                })
                .collect();
            // The lines each range should see: one address inside each.
            let mut want: Vec<usize> = Vec::new();
            for r in &ranges {
                want.extend((0..r.len.div_ceil(LINE)).map(|l| (r.start + l * LINE) / LINE));
            }
            for n in 1..=4 {
                let mut got: Vec<usize> = Vec::new();
                for t in 0..n {
                    share_lines(&ranges, t, n, &mut |a| {
                        let r = ranges.iter().find(|r| r.start <= a && a < r.start + r.len);
                        assert!(r.is_some(), "{a:#x} outside the ranges");
                        got.push(a / LINE);
                    });
                }
                assert_eq!(got, want, "{lens:?} in {n}");
            }
        }
    }

    #[test]
    fn evicting_keeps_the_data() {
        let a: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let b = vec![7u8; 65];
        let before = (a.clone(), b.clone());
        let ranges = [Range::of(&a), Range::of(&[]), Range::of(&b)];
        evict(&ranges, None);
        if let Ok(omp) = Omp::shared() {
            evict(&ranges, Some(&omp));
            evict(&[], Some(&omp));
        }
        assert_eq!((a, b), before);
    }
}
