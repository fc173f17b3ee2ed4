//! The persistent measurement cache: one SQLite database (`measurements.sqlite` in the cache
//! directory, or the file `--cache` names).
//!
//! One row per measured structure, keyed by the candidate's stable structural key, its target,
//! the identity and version of the backends that ran it, the thread count and the machine (CPU
//! model and instruction set); a row holds the median time and its spread, or the reason the
//! candidate is invalid. Rows are written one by one as measurements are made, each in its own
//! transaction, so a process killed in the middle keeps every measurement it finished.
//!
//! Safety with several processes: the database runs in WAL mode (readers never block the
//! writer) with a busy timeout, so two `collage` processes can read and write it at once. A file
//! that is not a database, fails SQLite's quick check, or is a database of something else
//! (checked before anything is written to it) is moved aside (to `FILE.corrupt`, or
//! `FILE.corrupt.N` when that name is taken: a backup is never replaced), under an exclusive
//! lock on `FILE.lock` so that two processes never both rebuild, and a fresh cache is created
//! in its place. A path that is not a regular file (a device, a FIFO) is refused.

use rusqlite::{params, Connection, ErrorCode, OptionalExtension};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The schema version stored in the database; a database of another version is rebuilt.
pub const SCHEMA: &str = "1";

/// How long a statement waits for another process's lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The file name of the database in the cache directory.
pub const FILE_NAME: &str = "measurements.sqlite";

/// What a row is keyed by.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    /// The candidate's stable structural key.
    pub structure: String,
    /// The target's name.
    pub target: String,
    /// The identity and version of the backends that run the target (and of the protocol).
    pub backend: String,
    /// Threads the measurement ran on.
    pub threads: u32,
    /// The machine's identity ([`super::machine::Machine::id`]).
    pub machine: String,
}

/// A cached result.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    /// A measured time.
    Timed {
        /// Median seconds per call.
        seconds: f64,
        /// Relative spread of the repeats.
        spread: f64,
        /// Repeats made.
        repeats: u32,
        /// Calls per repeat.
        number: u64,
    },
    /// The candidate cannot be compiled or run by its backend.
    Invalid {
        /// Why.
        reason: String,
    },
}

/// Counts for `collage cache stats`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Rows.
    pub entries: u64,
    /// Rows with a time.
    pub timed: u64,
    /// Rows of invalid candidates.
    pub invalid: u64,
    /// Rows per target, by target name.
    pub by_target: Vec<(String, u64)>,
    /// Rows per (machine, threads).
    pub by_machine: Vec<(String, u32, u64)>,
    /// Bytes of the database and its WAL.
    pub bytes: u64,
}

/// A failure of the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbError(pub String);

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> DbError {
        DbError(e.to_string())
    }
}

/// What opening found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opened {
    /// A usable cache (new or existing).
    Fine,
    /// The file was corrupt (or of another schema); it was moved to this path (`None`: it
    /// could not be kept and was removed) and a fresh cache was created.
    Rebuilt {
        /// Where the old file went.
        moved_to: Option<PathBuf>,
        /// What was wrong.
        why: String,
    },
}

/// An open measurement cache.
pub struct Db {
    conn: Connection,
    path: PathBuf,
}

/// Whether an error means the file is damaged (rather than busy or unwritable).
fn is_corruption(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
    )
}

/// Why opening failed.
enum OpenError {
    /// The file is damaged or of another schema.
    Damaged(String),
    /// Anything else (permissions, a directory in the way, a full disk, a lock held too long).
    Other(String),
    /// Another connection held a lock where SQLite does not wait for it (setting up a new
    /// database's write-ahead log while another process does the same): worth trying again.
    Busy(String),
}

impl From<rusqlite::Error> for OpenError {
    fn from(e: rusqlite::Error) -> OpenError {
        if is_corruption(&e) {
            OpenError::Damaged(e.to_string())
        } else if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) {
            OpenError::Busy(e.to_string())
        } else {
            OpenError::Other(e.to_string())
        }
    }
}

/// [`open_checked`], tried again while it meets a lock SQLite did not wait for, up to the busy
/// timeout.
fn open_waiting(path: &Path) -> Result<Connection, OpenError> {
    let start = std::time::Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match open_checked(path) {
            Err(OpenError::Busy(_)) if start.elapsed() < BUSY_TIMEOUT => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Err(OpenError::Busy(e)) => return Err(OpenError::Other(e)),
            r => return r,
        }
    }
}

const CREATE: &str = "
CREATE TABLE IF NOT EXISTS meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS measurements (
    structure TEXT    NOT NULL,
    target    TEXT    NOT NULL,
    backend   TEXT    NOT NULL,
    threads   INTEGER NOT NULL,
    machine   TEXT    NOT NULL,
    status    TEXT    NOT NULL CHECK (status IN ('timed', 'invalid')),
    seconds   REAL,
    spread    REAL,
    repeats   INTEGER,
    number    INTEGER,
    reason    TEXT,
    label     TEXT    NOT NULL,
    created   INTEGER NOT NULL,
    PRIMARY KEY (structure, target, backend, threads, machine)
);
CREATE TABLE IF NOT EXISTS machines (
    id    TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    flags TEXT NOT NULL
);
";

/// The tables (and their automatic indexes) of a collage measurement cache.
const OURS: &[&str] = &[
    "meta",
    "measurements",
    "machines",
    "sqlite_autoindex_meta_1",
    "sqlite_autoindex_measurements_1",
    "sqlite_autoindex_machines_1",
];

/// Whether a database is empty or collage's, read before anything is written to it: a
/// database holding anything else is left exactly as it is (`Damaged`, so that it is moved
/// aside) rather than given collage's tables or switched to write-ahead logging.
fn check_ours(conn: &Connection) -> Result<(), OpenError> {
    // Reading the header happens here: a file that is not a database fails now.
    let mut q = conn.prepare("SELECT name FROM sqlite_master ORDER BY name")?;
    let names: Vec<String> = q
        .query_map([], |r| r.get::<_, Option<String>>(0))?
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    let foreign: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !OURS.contains(n))
        .collect();
    if foreign.is_empty()
        && names.iter().any(|n| n == "meta")
        && names.iter().any(|n| n == "measurements")
    {
        return Ok(());
    }
    let shown: Vec<String> = foreign.iter().take(5).map(|n| format!("`{n}`")).collect();
    Err(OpenError::Damaged(if shown.is_empty() {
        "it is not a collage measurement cache (some of its tables are missing)".to_string()
    } else {
        format!(
            "it is not a collage measurement cache: it holds {}{}",
            shown.join(", "),
            if foreign.len() > 5 { ", ..." } else { "" }
        )
    }))
}

/// Refuses a path that exists and is not a regular file (a device, a FIFO, a socket): SQLite
/// would read and write it as if it were one.
pub fn check_file(path: &Path) -> Result<(), DbError> {
    let Ok(meta) = std::fs::metadata(path) else {
        // Absent (it is created as a regular file), or a link to nothing: SQLite says why.
        return Ok(());
    };
    if meta.is_file() {
        return Ok(());
    }
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let what = if t.is_dir() {
        return Err(DbError(format!("`{}` is a directory", path.display())));
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    };
    Err(DbError(format!(
        "`{}` is not a regular file ({what})",
        path.display()
    )))
}

/// Opens the database, creating the schema; `Damaged` when the file is not a usable cache.
fn open_checked(path: &Path) -> Result<Connection, OpenError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    check_ours(&conn)?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(OpenError::Other(format!(
            "the database cannot use write-ahead logging (journal mode `{mode}`)"
        )));
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let check: String = conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
    if check != "ok" {
        return Err(OpenError::Damaged(format!("integrity check: {check}")));
    }
    {
        // Taking the write lock at the start (waiting for it under the busy timeout): a
        // deferred transaction that read the schema first and then wrote would fail at once
        // with "database is locked" when another process opening the same cache had written
        // in between (SQLite cannot wait there without risking a deadlock).
        let tx =
            rusqlite::Transaction::new_unchecked(&conn, rusqlite::TransactionBehavior::Immediate)?;
        tx.execute_batch(CREATE)?;
        let version: Option<String> = tx
            .query_row("SELECT value FROM meta WHERE name = 'schema'", [], |r| {
                r.get(0)
            })
            .optional()?;
        match version.as_deref() {
            None => {
                tx.execute(
                    "INSERT INTO meta (name, value) VALUES ('schema', ?1)",
                    params![SCHEMA],
                )?;
            }
            Some(SCHEMA) => {}
            Some(other) => {
                return Err(OpenError::Damaged(format!(
                    "schema version {other}, expected {SCHEMA}"
                )))
            }
        }
        // A table of another shape (written by something else) is damage too.
        let columns: i64 = tx.query_row(
            "SELECT count(*) FROM pragma_table_info('measurements')",
            [],
            |r| r.get(0),
        )?;
        if columns != 13 {
            return Err(OpenError::Damaged(
                "the measurements table has another shape".to_string(),
            ));
        }
        tx.commit()?;
    }
    Ok(conn)
}

/// `path` with `suffix` appended to its file name.
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// Moves `path` (and its write-ahead log, if any) to a name not in use, never replacing a
/// file: `FILE.corrupt`, else `FILE.corrupt.1`, `FILE.corrupt.2`, ...; returns the name.
fn move_aside(path: &Path) -> std::io::Result<PathBuf> {
    let mut last = std::io::Error::other("no free name");
    for i in 0..1000 {
        let aside = if i == 0 {
            sibling(path, ".corrupt")
        } else {
            sibling(path, &format!(".corrupt.{i}"))
        };
        if std::fs::symlink_metadata(&aside).is_ok() {
            continue;
        }
        // A hard link fails when the name is taken: no backup is ever replaced.
        let moved = match std::fs::hard_link(path, &aside) {
            Ok(()) => std::fs::remove_file(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            // No hard links here: the name was free a moment ago, under the lock.
            Err(_) => std::fs::rename(path, &aside),
        };
        match moved {
            Ok(()) => {
                let wal = sibling(path, "-wal");
                if wal.exists() {
                    let _ = std::fs::rename(&wal, sibling(&aside, "-wal"));
                }
                let _ = std::fs::remove_file(sibling(path, "-shm"));
                return Ok(aside);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// An exclusive lock on `FILE.lock`, held until dropped (released by the system if the process
/// dies).
pub struct Lock(#[allow(dead_code)] std::fs::File);

/// Takes the exclusive lock beside the database (waiting for it).
pub fn lock(db: &Path) -> std::io::Result<Lock> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(sibling(db, ".lock"))?;
    f.lock()?;
    Ok(Lock(f))
}

impl Db {
    /// Opens (creating) the cache at `path`, creating its directory. A damaged file is moved
    /// aside and the cache rebuilt; any other failure is an error.
    pub fn open(path: &Path) -> Result<(Db, Opened), DbError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| DbError(format!("cannot create `{}`: {e}", dir.display())))?;
        }
        check_file(path)?;
        let describe = |e: String| DbError(format!("cannot open `{}`: {e}", path.display()));
        let db = |conn| Db {
            conn,
            path: path.to_path_buf(),
        };
        match open_waiting(path) {
            Ok(conn) => return Ok((db(conn), Opened::Fine)),
            Err(OpenError::Other(e) | OpenError::Busy(e)) => return Err(describe(e)),
            Err(OpenError::Damaged(_)) => {}
        }
        // Damaged: rebuild under the lock, unless another process did it meanwhile.
        let _guard = lock(path).map_err(|e| describe(format!("cannot lock it: {e}")))?;
        let why = match open_waiting(path) {
            Ok(conn) => return Ok((db(conn), Opened::Fine)),
            Err(OpenError::Other(e) | OpenError::Busy(e)) => return Err(describe(e)),
            Err(OpenError::Damaged(why)) => why,
        };
        let moved_to = match move_aside(path) {
            Ok(aside) => Some(aside),
            Err(_) => {
                std::fs::remove_file(path)
                    .map_err(|e| describe(format!("it is damaged and cannot be removed: {e}")))?;
                for s in ["-wal", "-shm"] {
                    let _ = std::fs::remove_file(sibling(path, s));
                }
                None
            }
        };
        match open_waiting(path) {
            Ok(conn) => Ok((db(conn), Opened::Rebuilt { moved_to, why })),
            Err(OpenError::Other(e) | OpenError::Damaged(e) | OpenError::Busy(e)) => {
                Err(describe(e))
            }
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The cached result for `key`, if any.
    pub fn get(&self, key: &Key) -> Result<Option<Entry>, DbError> {
        let row = self
            .conn
            .prepare_cached(
                "SELECT status, seconds, spread, repeats, number, reason FROM measurements
                 WHERE structure = ?1 AND target = ?2 AND backend = ?3 AND threads = ?4
                   AND machine = ?5",
            )?
            .query_row(
                params![
                    key.structure,
                    key.target,
                    key.backend,
                    key.threads,
                    key.machine
                ],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Option<f64>>(1)?,
                        r.get::<_, Option<f64>>(2)?,
                        r.get::<_, Option<i64>>(3)?,
                        r.get::<_, Option<i64>>(4)?,
                        r.get::<_, Option<String>>(5)?,
                    ))
                },
            )
            .optional()?;
        Ok(
            row.and_then(|(status, seconds, spread, repeats, number, reason)| {
                match status.as_str() {
                    "timed" => {
                        // Outside the range of costs: measured again.
                        let seconds =
                            seconds.filter(|&s| crate::planning::cost::check_seconds(s).is_ok())?;
                        Some(Entry::Timed {
                            seconds,
                            spread: spread.filter(|s| s.is_finite()).unwrap_or(0.0),
                            repeats: repeats.unwrap_or(0).clamp(0, u32::MAX as i64) as u32,
                            number: number.unwrap_or(0).max(0) as u64,
                        })
                    }
                    "invalid" => Some(Entry::Invalid {
                        reason: reason.unwrap_or_default(),
                    }),
                    _ => None,
                }
            }),
        )
    }

    /// Records a result (replacing any earlier one for the key), committed at once.
    pub fn put(&self, key: &Key, entry: &Entry, label: &str) -> Result<(), DbError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let (status, seconds, spread, repeats, number, reason) = match entry {
            Entry::Timed {
                seconds,
                spread,
                repeats,
                number,
            } => (
                "timed",
                Some(*seconds),
                Some(*spread),
                Some(i64::from(*repeats)),
                Some((*number).min(i64::MAX as u64) as i64),
                None,
            ),
            Entry::Invalid { reason } => ("invalid", None, None, None, None, Some(reason.as_str())),
        };
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO measurements
                 (structure, target, backend, threads, machine, status, seconds, spread, repeats,
                  number, reason, label, created)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            )?
            .execute(params![
                key.structure,
                key.target,
                key.backend,
                key.threads,
                key.machine,
                status,
                seconds,
                spread,
                repeats,
                number,
                reason,
                label,
                now
            ])?;
        Ok(())
    }

    /// Records a machine's model and flags (for inspection).
    pub fn note_machine(&self, id: &str, model: &str, flags: &str) -> Result<(), DbError> {
        self.conn.execute(
            "INSERT OR IGNORE INTO machines (id, model, flags) VALUES (?1, ?2, ?3)",
            params![id, model, flags],
        )?;
        Ok(())
    }

    /// Counts.
    pub fn stats(&self) -> Result<Stats, DbError> {
        let mut s = Stats::default();
        let (timed, invalid): (i64, i64) = self.conn.query_row(
            "SELECT count(*) FILTER (WHERE status = 'timed'),
                    count(*) FILTER (WHERE status = 'invalid') FROM measurements",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        s.timed = timed.max(0) as u64;
        s.invalid = invalid.max(0) as u64;
        s.entries = s.timed + s.invalid;
        let mut q = self
            .conn
            .prepare("SELECT target, count(*) FROM measurements GROUP BY target ORDER BY target")?;
        s.by_target = q
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .map(|(t, n)| (t, n.max(0) as u64))
            .collect();
        let mut q = self.conn.prepare(
            "SELECT machine, threads, count(*) FROM measurements GROUP BY machine, threads
             ORDER BY machine, threads",
        )?;
        s.by_machine = q
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .map(|(m, t, n)| (m, t.clamp(0, u32::MAX as i64) as u32, n.max(0) as u64))
            .collect();
        s.bytes = ["", "-wal"]
            .iter()
            .filter_map(|x| std::fs::metadata(sibling(&self.path, x)).ok())
            .map(|m| m.len())
            .sum();
        Ok(s)
    }

    /// Deletes every measurement; returns how many there were.
    pub fn clear(&self) -> Result<u64, DbError> {
        let n = self.conn.execute("DELETE FROM measurements", [])?;
        self.conn.execute("DELETE FROM machines", [])?;
        // Give the space back (outside a transaction; harmless if another process is busy).
        let _ = self
            .conn
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE); VACUUM;");
        Ok(n as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key {
            structure: s.to_string(),
            target: "tvm_cpu".into(),
            backend: "reference 0.1.0".into(),
            threads: 2,
            machine: "cpu [isa 0]".into(),
        }
    }

    fn timed(x: f64) -> Entry {
        Entry::Timed {
            seconds: x,
            spread: 0.01,
            repeats: 3,
            number: 10,
        }
    }

    #[test]
    fn results_round_trip_and_persist() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join(FILE_NAME);
        {
            let (db, opened) = Db::open(&path).unwrap();
            assert_eq!(opened, Opened::Fine);
            assert_eq!(db.get(&key("a")).unwrap(), None);
            db.put(&key("a"), &timed(1e-3), "nn.relu").unwrap();
            db.put(
                &key("b"),
                &Entry::Invalid {
                    reason: "unsupported".into(),
                },
                "nn.conv2d",
            )
            .unwrap();
            // Replacing keeps one row.
            db.put(&key("a"), &timed(2e-3), "nn.relu").unwrap();
        }
        let (db, _) = Db::open(&path).unwrap();
        assert_eq!(db.get(&key("a")).unwrap(), Some(timed(2e-3)));
        assert_eq!(
            db.get(&key("b")).unwrap(),
            Some(Entry::Invalid {
                reason: "unsupported".into()
            })
        );
        // Every part of the key matters.
        let mut other = key("a");
        other.threads = 1;
        assert_eq!(db.get(&other).unwrap(), None);
        let mut other = key("a");
        other.machine = "another".into();
        assert_eq!(db.get(&other).unwrap(), None);
        let s = db.stats().unwrap();
        assert_eq!((s.entries, s.timed, s.invalid), (2, 1, 1));
        assert_eq!(s.by_target, vec![("tvm_cpu".to_string(), 2)]);
        assert!(s.bytes > 0);
        assert_eq!(db.clear().unwrap(), 2);
        assert_eq!(db.get(&key("a")).unwrap(), None);
    }

    /// A cached time outside the range of costs (negative, NaN, above the ceiling) is no
    /// result: the candidate is measured again.
    #[test]
    fn times_outside_the_range_of_costs_are_measured_again() {
        let dir = tempfile::tempdir().unwrap();
        let (db, _) = Db::open(&dir.path().join(FILE_NAME)).unwrap();
        for (k, x) in [1e30, f32::MAX as f64, 1e300, -1.0, f64::NAN]
            .into_iter()
            .enumerate()
        {
            let key = key(&format!("bad{k}"));
            db.put(&key, &timed(x), "nn.relu").unwrap();
            assert_eq!(db.get(&key).unwrap(), None, "{x}");
        }
        let key = key("ceiling");
        db.put(&key, &timed(crate::planning::cost::MAX_SECONDS), "nn.relu")
            .unwrap();
        assert_eq!(
            db.get(&key).unwrap(),
            Some(timed(crate::planning::cost::MAX_SECONDS))
        );
    }

    #[test]
    fn a_damaged_file_is_moved_aside_and_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        std::fs::write(
            &path,
            b"this is not a database, just text that is long enough....",
        )
        .unwrap();
        let (db, opened) = Db::open(&path).unwrap();
        match opened {
            Opened::Rebuilt { moved_to, why } => {
                let aside = moved_to.unwrap();
                assert_eq!(aside, dir.path().join("measurements.sqlite.corrupt"));
                assert!(std::fs::read(&aside).unwrap().starts_with(b"this is not"));
                assert!(!why.is_empty());
            }
            o => panic!("{o:?}"),
        }
        db.put(&key("a"), &timed(1.0), "x").unwrap();
        assert_eq!(db.get(&key("a")).unwrap(), Some(timed(1.0)));
        // A database truncated in the middle of its pages.
        drop(db);
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(sibling(&path, "-wal"));
        let _ = std::fs::remove_file(sibling(&path, "-shm"));
        std::fs::write(&path, &bytes[..bytes.len().min(100)]).unwrap();
        let (db, opened) = Db::open(&path).unwrap();
        assert!(matches!(opened, Opened::Rebuilt { .. }), "{opened:?}");
        assert_eq!(db.get(&key("a")).unwrap(), None);
    }

    #[test]
    fn a_database_of_another_schema_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch("CREATE TABLE measurements (x INTEGER);")
                .unwrap();
        }
        let (_, opened) = Db::open(&path).unwrap();
        assert!(matches!(opened, Opened::Rebuilt { .. }), "{opened:?}");
    }

    #[test]
    fn two_connections_write_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        std::thread::scope(|s| {
            for who in ["a", "b"] {
                let path = &path;
                s.spawn(move || {
                    let (db, _) = Db::open(path).unwrap();
                    for i in 0..50 {
                        db.put(&key(&format!("{who}{i}")), &timed(1.0), "x")
                            .unwrap();
                        assert!(db.get(&key(&format!("{who}{i}"))).unwrap().is_some());
                    }
                });
            }
        });
        let (db, _) = Db::open(&path).unwrap();
        assert_eq!(db.stats().unwrap().entries, 100);
    }

    #[test]
    fn a_foreign_database_is_moved_aside_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch("CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('a');")
                .unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        let (db, opened) = Db::open(&path).unwrap();
        let Opened::Rebuilt { moved_to, why } = opened else {
            panic!("{opened:?}")
        };
        assert!(why.contains("`notes`"), "{why}");
        assert_eq!(std::fs::read(moved_to.unwrap()).unwrap(), before);
        db.put(&key("a"), &timed(1.0), "x").unwrap();
        // Damaged again: the first backup stays, the second gets a new name.
        drop(db);
        for s in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(sibling(&path, s));
        }
        std::fs::write(
            &path,
            b"junk junk junk junk junk junk junk junk junk junk junk",
        )
        .unwrap();
        let (_, opened) = Db::open(&path).unwrap();
        let Opened::Rebuilt { moved_to, .. } = opened else {
            panic!("{opened:?}")
        };
        assert_eq!(moved_to.unwrap(), sibling(&path, ".corrupt.1"));
        assert_eq!(std::fs::read(sibling(&path, ".corrupt")).unwrap(), before);
    }

    #[test]
    fn a_path_that_is_not_a_regular_file_is_refused() {
        let e = Db::open(Path::new("/dev/null")).err().unwrap();
        assert!(
            e.0.contains("not a regular file (a character device)"),
            "{e}"
        );
    }

    #[test]
    fn a_directory_in_the_way_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = Db::open(dir.path()).err().unwrap();
        assert!(e.0.contains("is a directory"), "{e}");
    }
}
