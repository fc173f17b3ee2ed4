//! Where `collage` caches things: one directory, `--cache-dir DIR`, else `$COLLAGE_CACHE_DIR`,
//! else `$XDG_CACHE_HOME/collage`, else `~/.cache/collage`. It holds
//!
//! * `kernels/`: compiled native kernels (native code generation's cache);
//! * `measurements.sqlite` (with its `-wal`, `-shm` and `.lock` companions): measured costs
//!   ([`super::db`]). `--cache FILE` puts the measurements in `FILE` instead.

use crate::runtime::backend::native::cache::{self, DirError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The cache directory from the environment: `$COLLAGE_CACHE_DIR`, `$XDG_CACHE_HOME/collage`
/// or `~/.cache/collage` (`None` when none of them is set); the same as native code
/// generation's kernel cache uses.
pub fn default_dir() -> Option<PathBuf> {
    crate::runtime::backend::native::cache::default_dir()
}

/// The cache directory: the one given, else [`default_dir`].
pub fn resolve(given: Option<&Path>) -> Option<PathBuf> {
    given.map(Path::to_path_buf).or_else(default_dir)
}

/// The cache directory a command uses; holds the temporary directory that replaces an
/// unusable one for as long as the command runs.
#[derive(Clone, Debug, Default)]
pub struct Place {
    dir: Option<PathBuf>,
    temp: Option<Arc<tempfile::TempDir>>,
}

impl Place {
    /// The directory (`None`: there is none).
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The temporary directory that replaced an unusable one, for whoever must keep it.
    pub fn temp_dir(&self) -> Option<Arc<tempfile::TempDir>> {
        self.temp.clone()
    }
}

/// What [`prepare`] found.
#[derive(Debug)]
pub enum Prepared {
    /// The directory is usable (or there is none).
    Ready(Place),
    /// It cannot be used (not a directory, a link to nothing, cannot be created or written):
    /// replaced by a temporary directory that goes when the command ends (W2411).
    Replaced {
        /// The temporary directory (none when even that cannot be made).
        place: Place,
        /// Why the directory cannot be used.
        why: String,
    },
    /// It is not owned by this user or others can write to it (E2410): nothing is read
    /// from it or written to it.
    Refused(String),
}

/// Checks the cache directory (the given one, else [`default_dir`]) of a command that
/// compiles kernels or measures, creating its folders ([`cache::check_root`]).
pub fn prepare(given: Option<&Path>) -> Prepared {
    let Some(root) = resolve(given) else {
        return Prepared::Ready(Place::default());
    };
    match cache::check_root(&root) {
        Ok(()) => Prepared::Ready(Place {
            dir: Some(root),
            temp: None,
        }),
        Err(DirError::Untrusted(why)) => Prepared::Refused(why),
        Err(DirError::Unusable(why)) => {
            let place = tempfile::Builder::new()
                .prefix("collage-cache-")
                .tempdir()
                .ok()
                .map_or_else(Place::default, |t| Place {
                    dir: Some(t.path().to_path_buf()),
                    temp: Some(Arc::new(t)),
                });
            Prepared::Replaced { place, why }
        }
    }
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

/// What the kernel cache holds ([`crate::runtime::backend::native::cache::scan`]).
pub type KernelStats = crate::runtime::backend::native::cache::Scan;

/// Counts the kernel cache of `dir` (zeros when there is none), checking every kernel's
/// library against its recorded hash.
pub fn kernel_stats(dir: &Path) -> KernelStats {
    crate::runtime::backend::native::cache::scan(&kernels(dir))
}

/// Removes what collage wrote in the kernel cache of `dir`
/// ([`crate::runtime::backend::native::cache::clear`]); returns what it removed and what it left.
pub fn clear_kernels(
    dir: &Path,
) -> std::io::Result<crate::runtime::backend::native::cache::Cleared> {
    crate::runtime::backend::native::cache::clear(&kernels(dir))
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
    fn an_unusable_directory_is_replaced_and_an_untrusted_one_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good");
        match prepare(Some(&good)) {
            Prepared::Ready(p) => assert_eq!(p.dir(), Some(good.as_path())),
            p => panic!("{p:?}"),
        }
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let temp = match prepare(Some(&file)) {
            Prepared::Replaced { place, why } => {
                assert!(why.contains("is not a directory"), "{why}");
                let t = place.dir().unwrap().to_path_buf();
                assert!(t.join("kernels").is_dir() || t.is_dir());
                drop(place);
                t
            }
            p => panic!("{p:?}"),
        };
        assert!(
            !temp.exists(),
            "the temporary directory goes with its place"
        );
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o757)).unwrap();
        assert!(matches!(prepare(Some(&good)), Prepared::Refused(_)));
    }
}
