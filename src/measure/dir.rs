//! Where `collage` caches things: one directory, `--cache-dir DIR`, else `$COLLAGE_CACHE_DIR`,
//! else `$XDG_CACHE_HOME/collage`, else `~/.cache/collage`. It holds
//!
//! * `kernels/`: compiled native kernels (native code generation's cache);
//! * `measurements.sqlite` (with its `-wal`, `-shm` and `.lock` companions): measured costs
//!   ([`super::db`]). `--cache FILE` puts the measurements in `FILE` instead.

use std::path::{Path, PathBuf};

/// The cache directory from the environment: `$COLLAGE_CACHE_DIR`, `$XDG_CACHE_HOME/collage`
/// or `~/.cache/collage` (`None` when none of them is set); the same as native code
/// generation's kernel cache uses.
pub fn default_dir() -> Option<PathBuf> {
    crate::backend::native::cache::default_dir()
}

/// The cache directory: the one given, else [`default_dir`].
pub fn resolve(given: Option<&Path>) -> Option<PathBuf> {
    given.map(Path::to_path_buf).or_else(default_dir)
}

/// The measurement database: `--cache FILE` if given, else `measurements.sqlite` in the cache
/// directory; an error when there is neither.
pub fn database(dir: Option<&Path>, file: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(f) = file {
        return Ok(f.to_path_buf());
    }
    match dir {
        Some(d) => Ok(d.join(super::db::FILE_NAME)),
        None => Err(
            "no cache directory: give `--cache-dir DIR` or `--cache FILE`, or set \
             `COLLAGE_CACHE_DIR` or `HOME`"
                .to_string(),
        ),
    }
}

/// The kernel cache inside a cache directory.
pub fn kernels(dir: &Path) -> PathBuf {
    dir.join("kernels")
}

/// What the kernel cache holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Kernels recorded (`kernels/entries/*`).
    pub entries: u64,
    /// Compiled libraries (`kernels/lib/*.so`).
    pub libraries: u64,
    /// Bytes of everything under `kernels/`.
    pub bytes: u64,
}

/// Counts the kernel cache of `dir` (zeros when there is none).
pub fn kernel_stats(dir: &Path) -> KernelStats {
    let k = kernels(dir);
    let count = |sub: &str, ext: Option<&str>| -> u64 {
        std::fs::read_dir(k.join(sub)).map_or(0, |rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .filter(|e| ext.is_none_or(|x| e.path().extension().is_some_and(|y| y == x)))
                .count() as u64
        })
    };
    KernelStats {
        entries: count("entries", None),
        libraries: count("lib", Some("so")),
        bytes: tree_bytes(&k),
    }
}

/// Bytes of the regular files under `root` (no symlinks followed; depth-limited).
fn tree_bytes(root: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.filter_map(Result::ok) {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() && depth < 16 {
                stack.push((e.path(), depth + 1));
            } else if t.is_file() {
                total += e.metadata().map_or(0, |m| m.len());
            }
        }
    }
    total
}

/// Removes the kernel cache of `dir`; returns what it held.
pub fn clear_kernels(dir: &Path) -> std::io::Result<KernelStats> {
    let stats = kernel_stats(dir);
    let k = kernels(dir);
    match std::fs::remove_dir_all(&k) {
        Ok(()) => Ok(stats),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(stats),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_is_in_the_directory_unless_named() {
        let d = Path::new("/c");
        assert_eq!(
            database(Some(d), None).unwrap(),
            Path::new("/c/measurements.sqlite")
        );
        assert_eq!(
            database(Some(d), Some(Path::new("/x.db"))).unwrap(),
            Path::new("/x.db")
        );
        assert!(database(None, None).is_err());
        assert_eq!(resolve(Some(d)).unwrap(), d);
    }

    #[test]
    fn kernels_are_counted_and_cleared() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(kernel_stats(dir.path()), KernelStats::default());
        let k = kernels(dir.path());
        std::fs::create_dir_all(k.join("entries")).unwrap();
        std::fs::create_dir_all(k.join("lib")).unwrap();
        std::fs::write(k.join("entries").join("a"), b"x").unwrap();
        std::fs::write(k.join("entries").join("b"), b"x").unwrap();
        std::fs::write(k.join("lib").join("b1.so"), b"0123456789").unwrap();
        std::fs::write(k.join("lib").join("b1.c"), b"int x;").unwrap();
        let s = kernel_stats(dir.path());
        assert_eq!((s.entries, s.libraries, s.bytes), (2, 1, 18));
        assert_eq!(clear_kernels(dir.path()).unwrap(), s);
        assert!(!k.exists());
        assert_eq!(clear_kernels(dir.path()).unwrap(), KernelStats::default());
    }
}
