//! The kernel cache on disk.
//!
//! `collage` keeps everything it caches under one directory: `--cache-dir DIR`, else
//! `$COLLAGE_CACHE_DIR`, else `$XDG_CACHE_HOME/collage`, else `~/.cache/collage`. Kernels live
//! in `DIR/kernels/`:
//!
//! * `entries/<key>`: one small text file per kernel naming its library, its symbol and the
//!   SHA-256 of the library's bytes;
//! * `lib/<batch>.so` and `lib/<batch>.c`: a compiled translation unit (several kernels) and
//!   its source, kept for inspection;
//! * `tmp/`: compilations in progress (`build-<owner>-*`), files being written
//!   (`write-<owner>-*`) and verified copies being loaded (`load-<owner>-*`), `<owner>`
//!   naming the process (see [`owner_tag`]).
//!
//! A kernel's key is a 128-bit FNV-1a hash of the code generator's version, the compiler's
//! identity (its `--version` output), the flags and the kernel's complete C source (its own
//! prelude included). The source is a function of the unit's structure: operators,
//! attributes, shapes, dtypes and the values of scalar constants, never of where the unit sits
//! in a model, so the twelve layers of GPT-2 share their kernels.
//!
//! **What the cache trusts.** Loading a library runs code, so the cache refuses a directory
//! (the cache directory itself, `kernels/` and its three folders) that is not owned by the
//! user running collage or that the group or others can write to ([`DirError::Untrusted`]),
//! and creates its folders with mode 0700. A library is loaded only through an entry that
//! records its SHA-256, and only after the bytes read from the file hash to it: the file is
//! read into memory once, hashed, and the verified bytes are written to a new file of this
//! process in `tmp/` (created exclusively, mode 0600, in a folder only this user can write
//! to), which is what `dlopen` opens; it is unlinked as soon as it is loaded
//! ([`Cache::private_copy`]). Nothing that changes the cached file after the check changes
//! what is loaded, and a truncated library is never mapped (it crashed `dlopen` with SIGBUS). An entry without a recorded hash (written
//! by collage before hashes were recorded), of an unknown format, or whose library is missing,
//! too large or hashes to something else is never loaded: the kernel is compiled again and the
//! entry rewritten. A file in the cache that no entry names is never loaded.
//!
//! Writes are safe with concurrent processes: a library is compiled in a private temporary
//! directory and renamed into place, then its entries are written to temporary files and
//! renamed; a reader sees a complete file or none. Leftovers of killed processes (build
//! folders and half-written files in `tmp/`) are removed when a cache is opened, once their
//! owner is known to be dead or they are older than [`STALE_AFTER`].

use sha2::{Digest, Sha256};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The version of the code generator, part of every key: bump it when generated code changes
/// meaning.
pub const GENERATOR: &str = "collage-native-1";

/// The first line of an entry.
const ENTRY_HEADER: &str = "collage kernel 2";

/// The first line of every entry format collage has written (`collage kernel 1` had no hash).
const ENTRY_PREFIX: &str = "collage kernel ";

/// The largest library read (a translation unit of generated kernels is a few MiB).
pub const MAX_LIBRARY: u64 = 256 << 20;

/// Leftovers in `tmp/` older than this are removed whoever wrote them.
pub const STALE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Leftovers of the format written before owners were recorded (`build-XXXXXX`, `.tmpXXXXXX`)
/// older than this are removed.
const OLD_STALE_AFTER: Duration = Duration::from_secs(3600);

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

/// The SHA-256 of `bytes`, as 64 hex digits.
pub fn sha256(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Why a cache directory cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirError {
    /// It is not owned by this user, or others can write to it: refused, nothing in it is
    /// read or written (E2410).
    Untrusted(String),
    /// It cannot be used: not a directory, a link to nothing, cannot be created or written
    /// (W2411: a temporary directory is used instead).
    Unusable(String),
}

impl std::fmt::Display for DirError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirError::Untrusted(m) | DirError::Unusable(m) => f.write_str(m),
        }
    }
}

/// The effective user id.
fn uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether a directory with this owner and mode may hold code for user `me`: owned by `me`
/// and not writable by the group or others. The error says why not.
pub fn trusted(owner: u32, mode: u32, me: u32) -> Result<(), String> {
    if owner != me {
        return Err(format!(
            "it is owned by user {owner}, not by you (user {me})"
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "others can write to it (mode {:04o}), so anything in it may have been planted",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// Checks (creating it with mode 0700 when absent) one directory of the cache.
fn check_dir(path: &Path, follow: bool) -> Result<(), DirError> {
    let shown = path.display();
    let meta = if follow {
        std::fs::metadata(path)
    } else {
        std::fs::symlink_metadata(path)
    };
    let meta = match meta {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::fs::symlink_metadata(path).is_ok() {
                let to = std::fs::read_link(path)
                    .map(|t| t.display().to_string())
                    .unwrap_or_default();
                return Err(DirError::Unusable(format!(
                    "`{shown}` is a link to `{to}`, which does not exist"
                )));
            }
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(|e| DirError::Unusable(format!("cannot create `{shown}`: {e}")))?;
            std::fs::metadata(path)
                .map_err(|e| DirError::Unusable(format!("cannot read `{shown}`: {e}")))?
        }
        Err(e) => return Err(DirError::Unusable(format!("cannot read `{shown}`: {e}"))),
    };
    if meta.file_type().is_symlink() {
        return Err(DirError::Untrusted(format!(
            "`{shown}` is a symbolic link; collage does not follow links inside its cache"
        )));
    }
    if !meta.is_dir() {
        return Err(DirError::Unusable(format!("`{shown}` is not a directory")));
    }
    trusted(meta.uid(), meta.mode(), uid())
        .map_err(|why| DirError::Untrusted(format!("`{shown}`: {why}")))?;
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| DirError::Unusable(format!("`{shown}` has a NUL byte")))?;
    // SAFETY: access(2) on a NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(DirError::Unusable(format!(
            "`{shown}` cannot be written: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Checks the cache directory `root` and its kernel folders, creating what is missing (mode
/// 0700). The root may be a link (the user chose it); nothing inside may be.
pub fn check_root(root: &Path) -> Result<(), DirError> {
    check_dir(root, true)?;
    let k = root.join("kernels");
    check_dir(&k, false)?;
    for sub in ["entries", "lib", "tmp"] {
        check_dir(&k.join(sub), false)?;
    }
    Ok(())
}

/// Checks, without creating anything, that the parts of the cache directory `root` that exist
/// are trusted (for `collage cache clear`, which removes files there).
pub fn check_existing(root: &Path) -> Result<(), DirError> {
    let k = root.join("kernels");
    let mut dirs = vec![(root.to_path_buf(), true), (k.clone(), false)];
    dirs.extend(["entries", "lib", "tmp"].map(|s| (k.join(s), false)));
    for (d, follow) in dirs {
        let meta = if follow {
            std::fs::metadata(&d)
        } else {
            std::fs::symlink_metadata(&d)
        };
        let Ok(meta) = meta else { continue };
        if meta.is_dir() {
            trusted(meta.uid(), meta.mode(), uid())
                .map_err(|why| DirError::Untrusted(format!("`{}`: {why}", d.display())))?;
        }
    }
    Ok(())
}

/// The identity of this process in the names of its temporary files:
/// `<pid namespace>-<pid>-<start time>`, so that another process can tell whether the owner
/// still runs (a reused pid has another start time; another pid namespace cannot be judged).
pub fn owner_tag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        let pid = std::process::id();
        format!(
            "{}-{pid}-{}",
            pid_namespace().unwrap_or(0),
            start_time(pid).unwrap_or(0)
        )
    })
}

fn pid_namespace() -> Option<u64> {
    let l = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let s = l.to_str()?;
    s.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// Field 22 of `/proc/PID/stat`: the start time in clock ticks after boot.
fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = s.rsplit_once(')')?;
    // Fields after the name start at the third (state).
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the owner named by a tag (`ns-pid-start`) is known to be dead.
fn owner_dead(tag: &str) -> bool {
    let mut parts = tag.splitn(3, '-');
    let (Some(ns), Some(pid), Some(start)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let (Ok(ns), Ok(pid), Ok(start)) =
        (ns.parse::<u64>(), pid.parse::<u32>(), start.parse::<u64>())
    else {
        return false;
    };
    if ns == 0 || pid_namespace() != Some(ns) {
        // Another namespace (or unknown): only its age can tell.
        return false;
    }
    match start_time(pid) {
        Some(s) => s != start,
        None => std::fs::metadata("/proc/self/stat").is_ok(),
    }
}

/// How a leftover in `tmp/` is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leftover {
    /// Written by a process that runs: kept.
    Live,
    /// Collage's, and its writer is gone (or it is old): removed.
    Stale,
    /// Not a name collage gives: reported, kept.
    Foreign,
}

/// Judges an entry of `tmp/` by its name and age.
pub fn judge_leftover(name: &str, age: Option<Duration>) -> Leftover {
    let old = |bound: Duration| age.is_some_and(|a| a >= bound);
    for prefix in ["build-", "write-", "load-"] {
        if let Some(rest) = name.strip_prefix(prefix) {
            // New names: `<ns>-<pid>-<start>-<random>`; before them: `build-<random>`.
            let tag: Vec<&str> = rest.splitn(4, '-').collect();
            if tag.len() == 4
                && tag[..3]
                    .iter()
                    .all(|t| t.bytes().all(|b| b.is_ascii_digit()))
            {
                let t = format!("{}-{}-{}", tag[0], tag[1], tag[2]);
                return if old(STALE_AFTER) || owner_dead(&t) {
                    Leftover::Stale
                } else {
                    Leftover::Live
                };
            }
            if prefix == "build-" && old_random(rest) {
                return if old(OLD_STALE_AFTER) {
                    Leftover::Stale
                } else {
                    Leftover::Live
                };
            }
        }
    }
    if name.strip_prefix(".tmp").is_some_and(old_random) {
        return if old(OLD_STALE_AFTER) {
            Leftover::Stale
        } else {
            Leftover::Live
        };
    }
    Leftover::Foreign
}

/// The random part of the names older collages gave in `tmp/` (`build-XXXXXX`,
/// `.tmpXXXXXX`): tempfile's six alphanumerics.
fn old_random(rest: &str) -> bool {
    rest.len() == 6 && rest.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Whether a leftover with an old name (without its writer's tag) holds only what collage
/// wrote there: `.tmpXXXXXX` a regular file (an atomic write), `build-XXXXXX` a folder of
/// regular files named as a build names them (`kernels.c`, `kernels.so`). Anything else is
/// somebody else's and is kept.
fn old_leftover_is_ours(path: &Path, name: &str) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if name.starts_with(".tmp") {
        return meta.is_file();
    }
    if !meta.is_dir() {
        return false;
    }
    let Ok(rd) = std::fs::read_dir(path) else {
        return false;
    };
    rd.take(16).all(|e| {
        e.is_ok_and(|e| {
            matches!(e.file_name().to_str(), Some("kernels.c" | "kernels.so"))
                && e.file_type().is_ok_and(|t| t.is_file())
        })
    }) && std::fs::read_dir(path)
        .map(|rd| rd.count() <= 2)
        .unwrap_or(false)
}

/// Removes a file or folder of `tmp/` (no link is followed).
fn remove_leftover(path: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}

/// Removes the stale leftovers of `tmp/`; returns what was removed (paths and bytes) and what
/// was left (live or foreign).
fn sweep(tmp: &Path) -> (u64, Vec<(PathBuf, Leftover)>) {
    let mut removed = 0;
    let mut left = Vec::new();
    let Ok(rd) = std::fs::read_dir(tmp) else {
        return (removed, left);
    };
    for e in rd.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().to_string();
        let age = e
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok());
        let mut verdict = judge_leftover(&name, age);
        let old_name = name
            .strip_prefix("build-")
            .or_else(|| name.strip_prefix(".tmp"))
            .is_some_and(old_random);
        if verdict == Leftover::Stale && old_name && !old_leftover_is_ours(&e.path(), &name) {
            verdict = Leftover::Foreign;
        }
        if verdict == Leftover::Stale {
            let bytes = tree_bytes(&e.path());
            if remove_leftover(&e.path()).is_ok() {
                removed += bytes;
                continue;
            }
        }
        left.push((e.path(), verdict));
    }
    (removed, left)
}

/// Bytes of the regular files under `root` (no link followed; depth-limited).
pub fn tree_bytes(root: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&d) else {
            continue;
        };
        if meta.is_file() {
            total += meta.len();
            continue;
        }
        if !meta.is_dir() || depth > 16 {
            continue;
        }
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.filter_map(Result::ok) {
            stack.push((e.path(), depth + 1));
        }
    }
    total
}

/// Whether a file name is a kernel key (32 lowercase hex digits).
fn is_key(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// An opened kernel cache.
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
}

/// A cached kernel: its library, symbol and the library's hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The shared library.
    pub library: PathBuf,
    /// The kernel's entry point.
    pub symbol: String,
    /// The SHA-256 of the library's bytes, recorded when it was written.
    pub sha256: String,
}

/// What the cache holds for a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// No entry.
    Missing,
    /// An entry collage cannot vouch for: written before hashes were recorded, or of an
    /// unknown format. Never loaded.
    Unverified,
    /// A usable-looking entry (its library still to be verified).
    Found(Entry),
}

/// A library whose bytes hash to what its entry records.
pub struct Verified {
    /// The library's bytes.
    pub bytes: Vec<u8>,
    /// Their SHA-256.
    pub sha256: String,
}

/// Reads a regular file (no link followed) of at most [`MAX_LIBRARY`] bytes.
fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("cannot open `{}`: {e}", path.display()))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("`{}` is not a regular file", path.display()));
    }
    if meta.len() > MAX_LIBRARY {
        return Err(format!(
            "`{}` is larger than {} MiB",
            path.display(),
            MAX_LIBRARY >> 20
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(MAX_LIBRARY + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_LIBRARY {
        return Err(format!("`{}` grew while read", path.display()));
    }
    Ok(bytes)
}

/// Parses an entry's text.
fn parse_entry(text: &str) -> Option<(String, String, String)> {
    let mut lines = text.lines();
    if lines.next()? != ENTRY_HEADER {
        return None;
    }
    let lib = lines.next()?.strip_prefix("library ")?;
    let sym = lines.next()?.strip_prefix("symbol ")?;
    let hash = lines.next()?.strip_prefix("sha256 ")?;
    let lib_ok = lib.strip_suffix(".so").is_some_and(is_key);
    let hash_ok = hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit());
    (lib_ok && hash_ok && !sym.is_empty())
        .then(|| (lib.to_string(), sym.to_string(), hash.to_string()))
}

impl Cache {
    /// Opens (creating) `root/kernels` after checking that collage may trust it
    /// ([`check_root`]), and removes the leftovers of dead processes from `tmp/`.
    pub fn open(root: &Path) -> Result<Cache, DirError> {
        check_root(root)?;
        let dir = root.join("kernels");
        sweep(&dir.join("tmp"));
        Ok(Cache { dir })
    }

    /// The directory of the kernel cache (`DIR/kernels`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What is recorded for `key`.
    pub fn entry(&self, key: &str) -> Lookup {
        let path = self.dir.join("entries").join(key);
        let text = match read_bounded(&path) {
            Ok(b) if b.len() <= 4096 => String::from_utf8(b).unwrap_or_default(),
            Ok(_) => return Lookup::Unverified,
            Err(_) if std::fs::symlink_metadata(&path).is_err() => return Lookup::Missing,
            Err(_) => return Lookup::Unverified,
        };
        match parse_entry(&text) {
            Some((lib, symbol, sha256)) => Lookup::Found(Entry {
                library: self.dir.join("lib").join(lib),
                symbol,
                sha256,
            }),
            None => Lookup::Unverified,
        }
    }

    /// Reads an entry's library and checks its hash; the error says what is wrong.
    pub fn verify(&self, entry: &Entry) -> Result<Verified, String> {
        let bytes = read_bounded(&entry.library)?;
        let sha256 = sha256(&bytes);
        if sha256 != entry.sha256 {
            return Err(format!(
                "`{}` does not hash to what was recorded when it was written",
                entry.library.display()
            ));
        }
        Ok(Verified { bytes, sha256 })
    }

    /// Creates again, with the checks of [`check_root`] (mode 0700, owned by this user, no
    /// link), the cache's folders when one is missing: `collage cache clear` removes them once
    /// empty, also while another process has the cache open.
    fn folders(&self) -> std::io::Result<()> {
        let missing = ["entries", "lib", "tmp"].iter().any(|sub| {
            std::fs::symlink_metadata(self.dir.join(sub))
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        });
        if !missing {
            return Ok(());
        }
        let root = self.dir.parent().unwrap_or(Path::new("."));
        check_root(root).map_err(|e| std::io::Error::other(e.to_string()))
    }

    /// A private directory for one compilation (mode 0700, named after this process).
    pub fn scratch(&self) -> std::io::Result<tempfile::TempDir> {
        self.folders()?;
        tempfile::Builder::new()
            .prefix(&format!("build-{}-", owner_tag()))
            .tempdir_in(self.dir.join("tmp"))
    }

    /// Moves a compiled library into place as `lib/<batch>.so` (its source beside it); returns
    /// its path and its verified bytes (the bytes that were hashed are those loaded).
    pub fn install(
        &self,
        batch: &str,
        so: &Path,
        source: &str,
    ) -> std::io::Result<(PathBuf, Verified)> {
        let lib = self.dir.join("lib");
        let bytes = read_bounded(so).map_err(std::io::Error::other)?;
        let sha256 = sha256(&bytes);
        self.write_atomic(&lib.join(format!("{batch}.c")), source.as_bytes())?;
        let dest = lib.join(format!("{batch}.so"));
        // The build directory is private to this process: the file renamed is the one read.
        std::fs::rename(so, &dest)?;
        Ok((dest, Verified { bytes, sha256 }))
    }

    /// A new private file in `tmp/` holding verified bytes, for `dlopen` to open; it is
    /// removed when dropped. Its name holds the bytes' hash, so that a name the dynamic
    /// loader has seen (it does not open a name twice) always means the same bytes.
    pub fn private_copy(&self, v: &Verified) -> std::io::Result<tempfile::NamedTempFile> {
        self.folders()?;
        let mut f = tempfile::Builder::new()
            .prefix(&format!("load-{}-{}-", owner_tag(), v.sha256))
            .suffix(".so")
            .tempfile_in(self.dir.join("tmp"))?;
        f.write_all(&v.bytes)?;
        f.flush()?;
        Ok(f)
    }

    /// Records that kernel `key` is `symbol` in `library`, whose bytes hash to `sha256`.
    pub fn record(
        &self,
        key: &str,
        library: &Path,
        symbol: &str,
        sha256: &str,
    ) -> std::io::Result<()> {
        let name = library
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let text = format!("{ENTRY_HEADER}\nlibrary {name}\nsymbol {symbol}\nsha256 {sha256}\n");
        self.write_atomic(&self.dir.join("entries").join(key), text.as_bytes())
    }

    /// Forgets kernel `key` (its entry is unverified or its library damaged).
    pub fn forget(&self, key: &str) {
        let _ = std::fs::remove_file(self.dir.join("entries").join(key));
    }

    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        self.folders()?;
        let mut f = tempfile::Builder::new()
            .prefix(&format!("write-{}-", owner_tag()))
            .tempfile_in(self.dir.join("tmp"))?;
        f.write_all(bytes)?;
        f.flush()?;
        f.persist(path).map_err(|e| e.error)?;
        Ok(())
    }
}

/// What a kernel cache holds, for `collage cache stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Entries collage wrote (`entries/<key>`, any format).
    pub entries: u64,
    /// Compiled libraries (`lib/<batch>.so`).
    pub libraries: u64,
    /// Bytes of everything under `kernels/`.
    pub bytes: u64,
    /// Entries whose library is missing, unreadable or does not hash to what was recorded.
    pub damaged: u64,
    /// Entries without a recorded hash (written by an older collage) or of an unknown
    /// format: never loaded, rebuilt when needed.
    pub unverified: u64,
}

/// The first bytes of a regular file (no link followed), if it is one.
fn head(path: &Path) -> Option<Vec<u8>> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut b = Vec::new();
    f.take(4096).read_to_end(&mut b).ok()?;
    Some(b)
}

/// Whether `entries/<name>` is an entry collage wrote.
fn is_entry(dir: &Path, name: &str) -> Option<Vec<u8>> {
    if !is_key(name) {
        return None;
    }
    head(&dir.join(name)).filter(|b| b.starts_with(ENTRY_PREFIX.as_bytes()))
}

/// Whether `lib/<name>` is a library or source collage wrote.
fn is_library_file(dir: &Path, name: &str) -> bool {
    let stem = name.strip_suffix(".so").or_else(|| name.strip_suffix(".c"));
    stem.is_some_and(is_key) && std::fs::symlink_metadata(dir.join(name)).is_ok_and(|m| m.is_file())
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Counts the kernel cache `kernels` (the `DIR/kernels` folder), checking every entry's
/// library against its recorded hash. Nothing is created, changed or loaded.
pub fn scan(kernels: &Path) -> Scan {
    let mut s = Scan {
        bytes: tree_bytes(kernels),
        ..Scan::default()
    };
    let entries = kernels.join("entries");
    let lib = kernels.join("lib");
    let mut hashes: std::collections::HashMap<String, Option<String>> = Default::default();
    for name in names(&entries) {
        let Some(text) = is_entry(&entries, &name) else {
            continue;
        };
        s.entries += 1;
        let text = String::from_utf8_lossy(&text);
        let Some((library, _, sha)) = parse_entry(&text) else {
            s.unverified += 1;
            continue;
        };
        let actual = hashes
            .entry(library.clone())
            .or_insert_with(|| read_bounded(&lib.join(&library)).ok().map(|b| sha256(&b)));
        if actual.as_deref() != Some(sha.as_str()) {
            s.damaged += 1;
        }
    }
    s.libraries = names(&lib)
        .iter()
        .filter(|n| n.ends_with(".so") && is_library_file(&lib, n))
        .count() as u64;
    s
}

/// What [`clear`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleared {
    /// Entries removed.
    pub entries: u64,
    /// Libraries removed.
    pub libraries: u64,
    /// Bytes removed.
    pub bytes: u64,
    /// What was left, and why: files collage did not write, and the work of running
    /// processes.
    pub left: Vec<(PathBuf, &'static str)>,
}

const NOT_OURS: &str = "not written by collage";
const IN_USE: &str = "in use by a running collage";

/// Empties the kernel cache `kernels` (the `DIR/kernels` folder) of what collage wrote and
/// can recognise as its own: entries in its format under key names, libraries and sources
/// under batch names, and the leftovers of processes that are gone. Everything else, and the
/// build folders of running processes, is left where it is and listed; the folders are
/// removed once empty. The first removal that fails is the error.
pub fn clear(kernels: &Path) -> std::io::Result<Cleared> {
    let mut c = Cleared::default();
    match std::fs::symlink_metadata(kernels) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(c),
        Err(e) => return Err(e),
        Ok(m) if !m.is_dir() => {
            c.left.push((kernels.to_path_buf(), NOT_OURS));
            return Ok(c);
        }
        Ok(_) => {}
    }
    let mut first_error = None;
    let mut remove = |path: &Path, c: &mut Cleared| -> bool {
        let len = std::fs::symlink_metadata(path).map_or(0, |m| m.len());
        match std::fs::remove_file(path) {
            Ok(()) => {
                c.bytes += len;
                true
            }
            Err(e) => {
                first_error.get_or_insert(std::io::Error::new(
                    e.kind(),
                    format!("cannot remove `{}`: {e}", path.display()),
                ));
                false
            }
        }
    };
    for sub in names(kernels) {
        let path = kernels.join(&sub);
        let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        match sub.as_str() {
            "entries" if is_dir => {
                for name in names(&path) {
                    let p = path.join(&name);
                    if is_entry(&path, &name).is_some() {
                        if remove(&p, &mut c) {
                            c.entries += 1;
                        }
                    } else {
                        c.left.push((p, NOT_OURS));
                    }
                }
            }
            "lib" if is_dir => {
                for name in names(&path) {
                    let p = path.join(&name);
                    if is_library_file(&path, &name) {
                        if remove(&p, &mut c) && name.ends_with(".so") {
                            c.libraries += 1;
                        }
                    } else {
                        c.left.push((p, NOT_OURS));
                    }
                }
            }
            "tmp" if is_dir => {
                let (bytes, left) = sweep(&path);
                c.bytes += bytes;
                for (p, why) in left {
                    let why = if why == Leftover::Live {
                        IN_USE
                    } else {
                        NOT_OURS
                    };
                    c.left.push((p, why));
                }
            }
            _ => c.left.push((path.clone(), NOT_OURS)),
        }
        if is_dir && matches!(sub.as_str(), "entries" | "lib" | "tmp") {
            let _ = std::fs::remove_dir(&path);
        }
    }
    let _ = std::fs::remove_dir(kernels);
    match first_error {
        Some(e) => Err(e),
        None => Ok(c),
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
        assert_eq!(
            sha256(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    const KEY: &str = "0123456789abcdef0123456789abcdef";
    const BATCH: &str = "fedcba9876543210fedcba9876543210";

    #[test]
    fn entries_round_trip_and_their_library_is_verified() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cache::open(dir.path()).unwrap();
        assert_eq!(c.entry(KEY), Lookup::Missing);
        let build = c.scratch().unwrap();
        let so = build.path().join("kernels.so");
        std::fs::write(&so, b"not really a library").unwrap();
        let (lib, v) = c.install(BATCH, &so, "int x;").unwrap();
        assert_eq!(v.bytes, b"not really a library");
        c.record(KEY, &lib, "ck_k", &v.sha256).unwrap();
        let Lookup::Found(e) = c.entry(KEY) else {
            panic!("{:?}", c.entry(KEY))
        };
        assert_eq!((e.symbol.as_str(), &e.library), ("ck_k", &lib));
        assert_eq!(c.verify(&e).unwrap().bytes, b"not really a library");
        assert_eq!(scan(c.dir()).damaged, 0);
        // Changed, truncated or gone: damaged, never verified.
        std::fs::write(&lib, b"not really a librarY").unwrap();
        assert!(c.verify(&e).is_err());
        std::fs::write(&lib, b"not really").unwrap();
        assert!(c.verify(&e).is_err());
        let s = scan(c.dir());
        assert_eq!(
            (s.entries, s.libraries, s.damaged, s.unverified),
            (1, 1, 1, 0)
        );
        std::fs::remove_file(&lib).unwrap();
        assert!(c.verify(&e).is_err());
        // A link in place of the library is not followed.
        std::os::unix::fs::symlink(&so, &lib).unwrap_or(());
        assert!(c.verify(&e).is_err());
        // The format written before hashes were recorded is never trusted.
        std::fs::write(
            c.dir().join("entries").join(KEY),
            format!("collage kernel 1\nlibrary {BATCH}.so\nsymbol ck_k\n"),
        )
        .unwrap();
        assert_eq!(c.entry(KEY), Lookup::Unverified);
        assert_eq!(scan(c.dir()).unverified, 1);
        c.forget(KEY);
        assert_eq!(c.entry(KEY), Lookup::Missing);
    }

    #[test]
    fn a_directory_others_can_write_or_someone_else_owns_is_untrusted() {
        assert!(trusted(5, 0o40700, 5).is_ok());
        assert!(trusted(5, 0o40755, 5).is_ok());
        let e = trusted(6, 0o40700, 5).unwrap_err();
        assert!(e.contains("owned by user 6"), "{e}");
        for mode in [0o40770, 0o40702, 0o41777] {
            let e = trusted(5, mode, 5).unwrap_err();
            assert!(e.contains("others can write to it"), "{e}");
        }
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("c");
        check_root(&root).unwrap();
        let mode = std::fs::metadata(root.join("kernels/lib")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::set_permissions(
            root.join("kernels/tmp"),
            std::fs::Permissions::from_mode(0o733),
        )
        .unwrap();
        assert!(matches!(check_root(&root), Err(DirError::Untrusted(_))));
        // A link inside the cache is refused; a file in the way cannot be used.
        std::fs::remove_dir(root.join("kernels/tmp")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("kernels/tmp")).unwrap();
        assert!(matches!(check_root(&root), Err(DirError::Untrusted(_))));
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        assert!(matches!(
            check_root(&dir.path().join("f")),
            Err(DirError::Unusable(_))
        ));
    }

    #[test]
    fn leftovers_of_dead_processes_go_and_live_ones_stay() {
        let me = owner_tag();
        let hour = Some(Duration::from_secs(3600));
        assert_eq!(
            judge_leftover(&format!("build-{me}-abc"), hour),
            Leftover::Live
        );
        assert_eq!(
            judge_leftover(&format!("write-{me}-abc"), None),
            Leftover::Live
        );
        // The same pid started at another time is another process.
        let (ns_pid, _) = me.rsplit_once('-').unwrap();
        let dead = format!("build-{ns_pid}-1-abc");
        assert_eq!(judge_leftover(&dead, None), Leftover::Stale);
        // Old enough is stale whoever wrote it; before owners were named, an hour is enough.
        let day = Some(STALE_AFTER);
        assert_eq!(
            judge_leftover(&format!("build-{me}-abc"), day),
            Leftover::Stale
        );
        assert_eq!(
            judge_leftover("build-Xy12ab", Some(Duration::from_secs(60))),
            Leftover::Live
        );
        assert_eq!(judge_leftover("build-Xy12ab", hour), Leftover::Stale);
        assert_eq!(judge_leftover(".tmpQ1w2e3", hour), Leftover::Stale);
        assert_eq!(judge_leftover("notes", day), Leftover::Foreign);
        // Old names have tempfile's exact shape: six alphanumerics.
        assert_eq!(judge_leftover("build-notes", day), Leftover::Foreign);
        assert_eq!(judge_leftover("build-Xy12a", day), Leftover::Foreign);
        assert_eq!(judge_leftover(".tmp", day), Leftover::Foreign);
        assert_eq!(judge_leftover(".tmpfolders", day), Leftover::Foreign);
        assert_eq!(
            judge_leftover("build-notes-of-mine", day),
            Leftover::Foreign
        );

        let dir = tempfile::tempdir().unwrap();
        let c = Cache::open(dir.path()).unwrap();
        let live = c.scratch().unwrap();
        let tmp = c.dir().join("tmp");
        std::fs::create_dir(tmp.join(&dead)).unwrap();
        std::fs::write(tmp.join(&dead).join("kernels.c"), b"int x;").unwrap();
        std::fs::write(tmp.join("mine"), b"x").unwrap();
        let c = Cache::open(dir.path()).unwrap();
        assert!(live.path().is_dir());
        assert!(!tmp.join(&dead).exists());
        assert!(tmp.join("mine").exists());
        drop(c);
    }

    /// An old-style name (no writer's tag) is removed only when old and holding only what
    /// collage's build or write left: `mkdir tmp/build-notes` and the like stay.
    #[test]
    fn old_style_leftovers_go_only_when_they_hold_what_collage_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cache::open(dir.path()).unwrap();
        let tmp = c.dir().join("tmp");
        let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(7200);
        let age = |p: &Path| {
            std::fs::File::open(p)
                .unwrap()
                .set_modified(two_hours_ago)
                .unwrap();
        };
        for (name, files) in [
            ("build-abc123", &["kernels.c", "kernels.so"][..]),
            ("build-def456", &["notes.txt"][..]),
            ("build-notes", &["kernels.c"][..]),
            (".tmpQ1w2e3", &["kernels.c"][..]),
        ] {
            let d = tmp.join(name);
            std::fs::create_dir(&d).unwrap();
            for f in files {
                std::fs::write(d.join(f), b"x").unwrap();
            }
            age(&d);
        }
        std::fs::write(tmp.join(".tmpA1b2c3"), b"x").unwrap();
        age(&tmp.join(".tmpA1b2c3"));
        let (_, left) = sweep(&tmp);
        assert!(!tmp.join("build-abc123").exists());
        assert!(!tmp.join(".tmpA1b2c3").exists());
        for kept in ["build-def456", "build-notes", ".tmpQ1w2e3"] {
            assert!(tmp.join(kept).is_dir(), "{kept}");
            assert!(
                left.contains(&(tmp.join(kept), Leftover::Foreign)),
                "{kept}: {left:?}"
            );
        }
    }

    /// A cache cleared while it is open makes its folders again when it next writes.
    #[test]
    fn a_cache_cleared_under_an_open_one_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cache::open(dir.path()).unwrap();
        clear(c.dir()).unwrap();
        assert!(!c.dir().exists());
        let build = c.scratch().unwrap();
        let so = build.path().join("kernels.so");
        std::fs::write(&so, b"0123456789").unwrap();
        let (lib, v) = c.install(BATCH, &so, "int x;").unwrap();
        c.record(KEY, &lib, "ck_k", &v.sha256).unwrap();
        assert!(matches!(c.entry(KEY), Lookup::Found(_)));
        use std::os::unix::fs::PermissionsExt;
        for sub in ["entries", "lib", "tmp"] {
            let mode = std::fs::metadata(c.dir().join(sub))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{sub}");
        }
    }

    #[test]
    fn clearing_removes_only_what_collage_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cache::open(dir.path()).unwrap();
        let build = c.scratch().unwrap();
        let so = build.path().join("kernels.so");
        std::fs::write(&so, b"0123456789").unwrap();
        let (lib, v) = c.install(BATCH, &so, "int x;").unwrap();
        c.record(KEY, &lib, "ck_k", &v.sha256).unwrap();
        let k = c.dir().to_path_buf();
        std::fs::write(k.join("entries").join(BATCH), b"my own notes").unwrap();
        std::fs::create_dir(k.join("x")).unwrap();
        let cleared = clear(&k).unwrap();
        assert_eq!((cleared.entries, cleared.libraries), (1, 1));
        assert!(cleared.bytes >= 16, "{cleared:?}");
        let left: Vec<&Path> = cleared.left.iter().map(|(p, _)| p.as_path()).collect();
        assert_eq!(left.len(), 3, "{left:?}");
        assert!(left.contains(&k.join("entries").join(BATCH).as_path()));
        assert!(left.contains(&k.join("x").as_path()));
        assert!(left.contains(&build.path()), "a running build stays");
        assert!(k.join("entries").join(BATCH).exists() && k.join("x").is_dir());
        assert!(!lib.exists() && !k.join("lib").exists());
        drop(build);
        std::fs::remove_file(k.join("entries").join(BATCH)).unwrap();
        std::fs::remove_dir(k.join("x")).unwrap();
        assert!(clear(&k).unwrap().left.is_empty());
        assert!(!k.exists());
    }
}
