//! The kernel cache on disk.
//!
//! `collage` keeps everything it caches under one directory: `--cache-dir DIR`, else
//! `$COLLAGE_CACHE_DIR`, else `$XDG_CACHE_HOME/collage`, else `~/.cache/collage`. Kernels live
//! in `DIR/kernels/`:
//!
//! * `entries/<key>`: one small text file per kernel naming its library and symbol;
//! * `lib/<batch>.so` and `lib/<batch>.c`: a compiled translation unit (several kernels) and
//!   its source, kept for inspection;
//! * `tmp/`: compilations in progress.
//!
//! A kernel's key is a 128-bit FNV-1a hash of the code generator's version, the compiler's
//! identity (its whole `--version` output), the flags and the kernel's complete C source (its
//! own prelude included). The source is a function of the unit's structure: operators,
//! attributes, shapes, dtypes and the values of scalar constants, never of where the unit sits
//! in a model, so the twelve layers of GPT-2 share their kernels.
//!
//! Writes are safe with concurrent processes: a library is compiled in a private temporary
//! directory and renamed into place, then its entries are written to temporary files and
//! renamed; a reader sees a complete file or none. An entry whose library is missing or does
//! not load counts as absent and is rewritten.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The version of the code generator, part of every key: bump it when generated code changes
/// meaning.
pub const GENERATOR: &str = "collage-native-1";

/// The cache directory from the environment: `$COLLAGE_CACHE_DIR`, `$XDG_CACHE_HOME/collage`
/// or `~/.cache/collage`.
pub fn default_dir() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = env("COLLAGE_CACHE_DIR") {
        return Some(d);
    }
    if let Some(d) = env("XDG_CACHE_HOME") {
        return Some(d.join("collage"));
    }
    env("HOME").map(|h| h.join(".cache").join("collage"))
}

/// 128-bit FNV-1a over length-prefixed parts, as 32 hex digits.
pub fn hash128(parts: &[&[u8]]) -> String {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut h = OFFSET;
    let mut eat = |b: u8| {
        h ^= b as u128;
        h = h.wrapping_mul(PRIME);
    };
    for p in parts {
        for b in (p.len() as u64).to_le_bytes() {
            eat(b);
        }
        for &b in *p {
            eat(b);
        }
    }
    format!("{h:032x}")
}

/// An opened kernel cache.
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
}

/// A cached kernel: its library and symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The shared library.
    pub library: PathBuf,
    /// The kernel's entry point.
    pub symbol: String,
}

impl Cache {
    /// Opens (creating) `root/kernels`.
    pub fn open(root: &Path) -> std::io::Result<Cache> {
        let dir = root.join("kernels");
        for sub in ["entries", "lib", "tmp"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        Ok(Cache { dir })
    }

    /// The directory of the kernel cache (`DIR/kernels`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry of `key`, if recorded and its library exists.
    pub fn entry(&self, key: &str) -> Option<Entry> {
        let text = std::fs::read_to_string(self.dir.join("entries").join(key)).ok()?;
        let mut lines = text.lines();
        if lines.next()? != "collage kernel 1" {
            return None;
        }
        let lib = lines.next()?.strip_prefix("library ")?;
        let sym = lines.next()?.strip_prefix("symbol ")?;
        if lib.contains('/') || lib.contains("..") {
            return None;
        }
        let library = self.dir.join("lib").join(lib);
        library.is_file().then(|| Entry {
            library,
            symbol: sym.to_string(),
        })
    }

    /// A private directory for one compilation.
    pub fn scratch(&self) -> std::io::Result<tempfile::TempDir> {
        tempfile::Builder::new()
            .prefix("build-")
            .tempdir_in(self.dir.join("tmp"))
    }

    /// Moves a compiled library into place as `lib/<batch>.so` (its source beside it) and
    /// returns its path.
    pub fn install(&self, batch: &str, so: &Path, source: &str) -> std::io::Result<PathBuf> {
        let lib = self.dir.join("lib");
        self.write_atomic(&lib.join(format!("{batch}.c")), source.as_bytes())?;
        let dest = lib.join(format!("{batch}.so"));
        std::fs::rename(so, &dest)?;
        Ok(dest)
    }

    /// Records that kernel `key` is `symbol` in `library`.
    pub fn record(&self, key: &str, library: &Path, symbol: &str) -> std::io::Result<()> {
        let name = library
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let text = format!("collage kernel 1\nlibrary {name}\nsymbol {symbol}\n");
        self.write_atomic(&self.dir.join("entries").join(key), text.as_bytes())
    }

    /// Forgets kernel `key` (its entry pointed at a library that does not load).
    pub fn forget(&self, key: &str) {
        let _ = std::fs::remove_file(self.dir.join("entries").join(key));
    }

    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let mut f = tempfile::NamedTempFile::new_in(self.dir.join("tmp"))?;
        f.write_all(bytes)?;
        f.flush()?;
        f.persist(path).map_err(|e| e.error)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_stable_and_separate_parts() {
        assert_eq!(hash128(&[b"ab", b"c"]), hash128(&[b"ab", b"c"]));
        assert_ne!(hash128(&[b"ab", b"c"]), hash128(&[b"a", b"bc"]));
        assert_eq!(hash128(&[]).len(), 32);
    }

    #[test]
    fn entries_round_trip_and_need_their_library() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cache::open(dir.path()).unwrap();
        assert_eq!(c.entry("k"), None);
        let so = c.dir().join("tmp").join("x.so");
        std::fs::write(&so, b"not really").unwrap();
        let lib = c.install("b1", &so, "int x;").unwrap();
        c.record("k", &lib, "ck_k").unwrap();
        let e = c.entry("k").unwrap();
        assert_eq!(e.symbol, "ck_k");
        assert_eq!(e.library, lib);
        std::fs::remove_file(&lib).unwrap();
        assert_eq!(c.entry("k"), None);
        c.forget("k");
        assert!(!c.dir().join("entries").join("k").exists());
    }
}
