//! This process's resident memory, and read-only file mappings whose pages can be handed back.
//!
//! * [`resident`] and [`peak`] read `/proc/self/status` (`VmRSS`, `VmHWM`); [`reset_peak`]
//!   starts the peak again from the current resident size (`/proc/self/clear_refs`, `5`).
//!   `collage bench` measures what each placement adds with them (docs/measure.md, "Memory").
//! * [`map_file`] maps a file read-only and remembers the range, so that [`release`] can give
//!   the pages of a part of it back to the kernel (`MADV_DONTNEED`) once that part has been
//!   copied: the pages leave this process's resident memory, and are read again from the page
//!   cache or the file if anything reads them later, so nothing is lost. Memory that is not a
//!   mapped file (the heap) is never released: `MADV_DONTNEED` would zero it.
//!
//! Elsewhere than on Linux, sizes are unknown (`None`) and nothing is released.

use std::sync::Mutex;

/// The mapped files' address ranges (start, end), while mapped.
static MAPPED: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

fn mapped() -> std::sync::MutexGuard<'static, Vec<(usize, usize)>> {
    MAPPED.lock().unwrap_or_else(|p| p.into_inner())
}

/// A read-only mapping of a whole file, known to [`release`] until it is dropped.
pub struct Mapping(memmap2::Mmap);

impl Mapping {
    fn range(&self) -> (usize, usize) {
        let p = self.0.as_ptr() as usize;
        (p, p + self.0.len())
    }
}

impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let r = self.range();
        let mut m = mapped();
        if let Some(k) = m.iter().position(|&x| x == r) {
            m.swap_remove(k);
        }
    }
}

/// Maps an opened file read-only, as shared bytes (an empty file gives empty bytes).
///
/// # Safety
/// As with every memory-mapped reader: the file must not be truncated or rewritten while the
/// bytes live.
pub unsafe fn map_file(file: &std::fs::File) -> std::io::Result<bytes::Bytes> {
    if file.metadata()?.len() == 0 {
        return Ok(bytes::Bytes::new());
    }
    // SAFETY: the caller's promise.
    let map = Mapping(unsafe { memmap2::Mmap::map(file)? });
    mapped().push(map.range());
    Ok(bytes::Bytes::from_owner(map))
}

/// Whether `bytes` lie inside a file mapped by [`map_file`].
pub fn is_mapped(bytes: &[u8]) -> bool {
    let (s, e) = (
        bytes.as_ptr() as usize,
        bytes.as_ptr() as usize + bytes.len(),
    );
    mapped().iter().any(|&(a, b)| a <= s && e <= b)
}

/// Gives the whole pages inside `bytes` back to the kernel when `bytes` lie in a file mapped by
/// [`map_file`] (they are read again from the file if they are read again); anything else is
/// left alone. Returns whether pages were released.
pub fn release(bytes: &[u8]) -> bool {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let guard = mapped();
        let (s, e) = (
            bytes.as_ptr() as usize,
            bytes.as_ptr() as usize + bytes.len(),
        );
        if !guard.iter().any(|&(a, b)| a <= s && e <= b) {
            return false;
        }
        let start = s.next_multiple_of(PAGE);
        let end = e / PAGE * PAGE;
        if end <= start {
            return false;
        }
        // SAFETY: the range lies inside a read-only file mapping that stays mapped while the
        // lock is held (a `Mapping` unregisters itself before it is unmapped); dropping the
        // pages of a file mapping changes no contents, the next read faults them in from the
        // page cache or the file.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = bytes;
        false
    }
}

/// A `/proc/self/status` field in bytes.
fn status(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// This process's resident memory now (bytes).
pub fn resident() -> Option<u64> {
    status("VmRSS:")
}

/// This process's largest resident memory since it started or since [`reset_peak`] (bytes).
pub fn peak() -> Option<u64> {
    status("VmHWM:")
}

/// Gives the heap's free memory back to the kernel (glibc's `malloc_trim`), so that the
/// resident size measures what is allocated; nothing elsewhere.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only returns free memory of the allocator to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Starts [`peak`] again from the current resident memory; whether it could.
pub fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn mapped_pages_are_released_and_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        let f = std::fs::File::open(&path).unwrap();
        // SAFETY: the file is this test's own and is not changed.
        let b = unsafe { map_file(&f) }.unwrap();
        assert!(is_mapped(&b[10..20]));
        let sum: u64 = b.iter().map(|&x| x as u64).sum();
        if cfg!(target_os = "linux") {
            assert!(release(&b[..]));
        }
        // The contents are read again from the file.
        assert_eq!(b.iter().map(|&x| x as u64).sum::<u64>(), sum);
        assert_eq!(&b[..], &data[..]);
        let range = (b.as_ptr() as usize, b.len());
        drop(b);
        assert!(!mapped().iter().any(|&(a, _)| a == range.0));
    }

    #[test]
    fn heap_memory_is_never_released() {
        let v = vec![7u8; 1 << 20];
        assert!(!is_mapped(&v));
        assert!(!release(&v));
        assert!(v.iter().all(|&x| x == 7));
    }

    #[test]
    fn resident_sizes_are_read() {
        if cfg!(target_os = "linux") {
            let r = resident().unwrap();
            assert!(r > 0 && peak().unwrap() >= r);
        }
    }
}
