//! Cold weights for candidate timings (the default; `--warm-candidates` turns it off).
//!
//! A candidate timed in a loop keeps its weights, its packed weights and its working memory in
//! the processor's caches from one call to the next. Inside a whole model it does not: between
//! two calls of one partition run all the other kernels, and a model's weights (ResNet-50:
//! 100 MB, GPT-2: 500 MB) are far larger than the last-level cache. A warm loop therefore
//! favours the kernels that read the most memory, the ones the caches help most.
//!
//! Before each timed call, [`evict`] writes back and invalidates, line by line, the buffers
//! the caller lists: the weights the candidate's executable keeps between calls
//! ([`crate::runtime::exec::kernel::Prepared::resident`]; TVM's `cache_flush_cpu_non_first_arg`
//! does the same for the arguments of a tuned kernel), unless the whole model stays in the
//! last-level cache, and the candidate's inputs, which inside a model the kernels before it
//! have just written, partly on the other core ([`super::Measure`], docs/measure.md, "Why the
//! inputs, and when the weights stay"). The code and the executor's own data stay warm, as a
//! whole model keeps them warm too (evicting the whole cache instead made every small kernel
//! look 10 µs slower than it runs inside a model).
//!
//! The lines are evicted on the OpenMP pool the kernels use, each thread a share, so that the
//! pool's threads are awake when the timed call starts, as they are inside a model where the
//! kernels follow each other (letting them fall asleep would charge a small kernel their
//! wake-up).
//!
//! On processors other than x86-64 nothing is evicted: candidates are timed warm there.

use crate::runtime::ffi::omp::Omp;

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
        Some(omp) if ranges.iter().any(|r| r.len > 0) => omp.parallel(0, &share),
        _ => share(0, 1),
    }
}

/// Bytes of the largest cache of CPU 0 (the last level), from sysfs
/// (`/sys/devices/system/cpu/cpu0/cache/index*/size`); `None` where it cannot be read.
pub fn last_level_cache() -> Option<u64> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut best = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        if let Ok(text) = std::fs::read_to_string(e.path().join("size")) {
            if let Some(n) = parse_size(&text) {
                best = best.max(Some(n));
            }
        }
    }
    best
}

/// A sysfs cache size: `32768K`, `1M`, `512` (bytes).
fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let shift = match unit {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// What to evict before each timed call of a candidate whose kernels keep `ranges`
/// (distinct): all of them, unless together they are larger than the last-level cache
/// (`llc` bytes), and then nothing. A warm loop over more than the last-level cache holds
/// finds its buffers in memory already, as inside a model; evicting them there only adds the
/// write-back of their dirty lines and made such candidates (ResNet-50 as one oneDNN region)
/// look 25-30 % slower than they run inside the model.
pub fn to_evict(ranges: Vec<Range>, llc: Option<u64>) -> Vec<Range> {
    let total: u64 = ranges.iter().map(|r| r.len as u64).sum();
    match llc {
        Some(l) if total > l => Vec::new(),
        _ => ranges,
    }
}

/// The cache lines `r` touches: the address of the first, and how many.
fn lines_of(r: &Range) -> (usize, usize) {
    if r.len == 0 {
        return (r.start & !(LINE - 1), 0);
    }
    let first = r.start & !(LINE - 1);
    let last = (r.start + (r.len - 1)) & !(LINE - 1);
    (first, (last - first) / LINE + 1)
}

/// Calls `f` on the address of each cache line of the `t`-th of `n` nearly equal shares of the
/// lines of `ranges` (taken in order).
fn share_lines(ranges: &[Range], t: usize, n: usize, f: &mut dyn FnMut(usize)) {
    let total: usize = ranges.iter().map(|r| lines_of(r).1).sum();
    let n = n.max(1);
    let (from, to) = (total * t / n, total * (t + 1) / n);
    // `k`: the first line of the range, counted over all ranges.
    let mut k = 0;
    for r in ranges {
        let (first, lines) = lines_of(r);
        for l in from.max(k)..to.min(k + lines) {
            f(first + (l - k) * LINE);
        }
        k += lines;
    }
}

/// `ranges` sorted by address with repeats removed (a constant shared by several kernels of one
/// program is reported once by each).
pub fn distinct(mut ranges: Vec<Range>) -> Vec<Range> {
    ranges.sort_unstable_by_key(|r| (r.start, r.len));
    ranges.dedup();
    ranges
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
    fn cache_sizes_and_what_is_evicted() {
        assert_eq!(parse_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("12Q"), None);
        assert_eq!(parse_size(""), None);
        let r = |start, len| Range { start, len };
        let small = vec![r(0, 100), r(4096, 200)];
        assert_eq!(to_evict(small.clone(), Some(300)), small);
        assert_eq!(to_evict(small.clone(), Some(299)), Vec::new());
        assert_eq!(to_evict(small.clone(), None), small);
    }

    #[test]
    fn every_line_of_every_range_is_visited_once_whatever_the_split() {
        // Ranges at made-up addresses (only addresses are computed), aligned or not: a range
        // of 2 bytes across a line boundary touches two lines.
        let cases: Vec<Vec<(usize, usize)>> = vec![
            vec![],
            vec![(1 << 20, 0)],
            vec![(1 << 20, 1)],
            vec![(1 << 20, 64), (2 << 20, 65), (3 << 20, 1000)],
            vec![(1 << 20, 4096), (2 << 20, 3), (3 << 20, 0), (4 << 20, 130)],
            vec![(63, 2), (1000, 64), (4097, 127)],
        ];
        for case in cases {
            let ranges: Vec<Range> = case
                .iter()
                .map(|&(start, len)| Range { start, len })
                .collect();
            // Every line a range touches, once.
            let mut want: Vec<usize> = Vec::new();
            for r in &ranges {
                if r.len > 0 {
                    want.extend(r.start / LINE..=(r.start + r.len - 1) / LINE);
                }
            }
            for n in 1..=4 {
                let mut got: Vec<usize> = Vec::new();
                for t in 0..n {
                    share_lines(&ranges, t, n, &mut |a| {
                        assert_eq!(a % LINE, 0, "{a:#x} is not a line's address");
                        got.push(a / LINE);
                    });
                }
                assert_eq!(got, want, "{case:?} in {n}");
            }
        }
        assert_eq!(
            distinct(vec![
                Range { start: 64, len: 8 },
                Range { start: 0, len: 8 },
                Range { start: 64, len: 8 },
            ]),
            [Range { start: 0, len: 8 }, Range { start: 64, len: 8 }]
        );
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
