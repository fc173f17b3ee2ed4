//! The caches under hostile conditions: a kernel cache holding files collage did not write,
//! planted or truncated libraries, a cache directory others can write to, one written by an
//! older collage, compilers that hang or print without end, measurement databases that are not
//! collage's (or not files), and cache directories that cannot be used. Fixtures are in
//! `tests/fixtures/hardening/cache/`; every file a test makes is in its own temporary directory.

use crate::support::root;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const FIXTURES: &str = "tests/fixtures/hardening/cache";

fn fixture(name: &str) -> PathBuf {
    root().join(FIXTURES).join(name)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `collage ARGS` in `dir`, with `COLLAGE_CACHE_DIR` pointing into `dir` and `env` added.
fn collage_env(dir: &Path, env: &[(&str, &Path)], args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collage"));
    cmd.args(args)
        .current_dir(dir)
        .env("COLLAGE_CACHE_DIR", dir.join("default-cache"))
        .env_remove("CC");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// `collage run` of the tiny model with its kernels cached in `cache`, as JSON.
fn run_tiny(dir: &Path, cache: &Path, env: &[(&str, &Path)]) -> Output {
    let model = fixture("tiny.relay");
    collage_env(
        dir,
        env,
        &[
            "run",
            model.to_str().unwrap(),
            "--format",
            "json",
            "--threads",
            "1",
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(out), stderr(out)))
}

/// A run that succeeded; its `native` section.
fn native(out: &Output) -> Value {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    json(out)["native"].clone()
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// The files of a directory (empty when there is none).
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn libraries(cache: &Path) -> Vec<PathBuf> {
    files(&cache.join("kernels/lib"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "so"))
        .collect()
}

/// A cache holding the tiny model's kernels; returns how many distinct kernels it has.
fn filled(dir: &Path, cache: &Path) -> u64 {
    let first = native(&run_tiny(dir, cache, &[]));
    let distinct = n(&first, "distinct");
    assert!(distinct >= 1, "{first}");
    assert_eq!(n(&first, "compiled"), distinct, "{first}");
    assert!(!libraries(cache).is_empty());
    distinct
}

#[test]
fn cache_clear_leaves_what_collage_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    // The case of the report: a folder named `kernels` that collage never wrote.
    let p = dir.path().join("p");
    std::fs::create_dir_all(p.join("kernels/x")).unwrap();
    std::fs::write(p.join("kernels/x/notes.txt"), "mine").unwrap();
    let clear = |cache: &Path| {
        collage_env(
            dir.path(),
            &[],
            &[
                "cache",
                "clear",
                "--kernels",
                "--cache-dir",
                cache.to_str().unwrap(),
            ],
        )
        .output()
        .unwrap()
    };
    let out = clear(&p);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("cleared 0 kernel(s)"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        std::fs::read_to_string(p.join("kernels/x/notes.txt")).unwrap(),
        "mine"
    );
    assert!(stderr(&out).contains("warning[W2412]"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("x (not written by collage)"),
        "{}",
        stderr(&out)
    );

    // A cache collage filled, with files of someone else's beside its own.
    let cache = dir.path().join("cache");
    let distinct = filled(dir.path(), &cache);
    let k = cache.join("kernels");
    std::fs::write(k.join("entries/README"), "someone's notes").unwrap();
    std::fs::write(k.join("lib/helper.so"), "someone's library").unwrap();
    std::fs::create_dir_all(k.join("tmp/theirs")).unwrap();
    std::fs::write(k.join("tmp/theirs/data"), "someone's data").unwrap();
    let out = clear(&cache);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("cleared {distinct} kernel(s)")),
        "{}",
        stdout(&out)
    );
    let err = stderr(&out);
    assert!(err.contains("warning[W2412]"), "{err}");
    for left in ["entries/README", "lib/helper.so", "tmp/theirs/data"] {
        assert!(k.join(left).is_file(), "{left} was removed");
    }
    for listed in ["entries/README", "lib/helper.so", "tmp/theirs"] {
        assert!(
            err.contains(&format!("= {listed} (not written by collage)")),
            "{err}"
        );
    }
    // Everything collage wrote is gone.
    assert_eq!(files(&k.join("entries")), vec![k.join("entries/README")]);
    assert_eq!(files(&k.join("lib")), vec![k.join("lib/helper.so")]);
    assert_eq!(files(&k.join("tmp")), vec![k.join("tmp/theirs")]);
    // Once only collage's files are there, the kernel directory goes too.
    for left in ["entries/README", "lib/helper.so"] {
        std::fs::remove_file(k.join(left)).unwrap();
    }
    std::fs::remove_dir_all(k.join("tmp/theirs")).unwrap();
    filled(dir.path(), &cache);
    let out = clear(&cache);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("W2412"), "{}", stderr(&out));
    assert!(!k.exists());
}

/// Compiles the planted library of the fixtures.
fn planted_library(dir: &Path) -> PathBuf {
    let so = dir.join("planted.so");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(fixture("planted.c"))
        .status()
        .unwrap();
    assert!(status.success());
    so
}

#[test]
fn a_library_planted_in_the_kernel_cache_is_never_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let distinct = filled(dir.path(), &cache);
    let planted = planted_library(dir.path());
    for lib in libraries(&cache) {
        std::fs::copy(&planted, &lib).unwrap();
    }
    let marker = dir.path().join("ran");
    let again = native(&run_tiny(
        dir.path(),
        &cache,
        &[("COLLAGE_TEST_MARKER", &marker)],
    ));
    assert!(!marker.exists(), "the planted library was loaded");
    // Rebuilt rather than loaded, and found in the cache from then on.
    assert_eq!(n(&again, "compiled"), distinct, "{again}");
    assert_eq!(n(&again, "cached"), 0, "{again}");
    let third = native(&run_tiny(
        dir.path(),
        &cache,
        &[("COLLAGE_TEST_MARKER", &marker)],
    ));
    assert_eq!(n(&third, "cached"), distinct, "{third}");
    assert!(!marker.exists());
}

fn stats_json(dir: &Path, cache: &Path) -> Value {
    let out = collage_env(
        dir,
        &[],
        &[
            "cache",
            "stats",
            "--json",
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    json(&out)["kernels"].clone()
}

#[test]
fn a_truncated_library_is_reported_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let distinct = filled(dir.path(), &cache);
    assert_eq!(n(&stats_json(dir.path(), &cache), "damaged"), 0);
    for lib in libraries(&cache) {
        let len = std::fs::metadata(&lib).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&lib).unwrap();
        f.set_len(len / 2).unwrap();
    }
    let k = stats_json(dir.path(), &cache);
    assert_eq!(n(&k, "damaged"), distinct, "{k}");
    // The text form says so too.
    let out = collage_env(
        dir.path(),
        &[],
        &["cache", "stats", "--cache-dir", cache.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert!(
        stdout(&out).contains(&format!("{distinct} damaged")),
        "{}",
        stdout(&out)
    );
    let again = native(&run_tiny(dir.path(), &cache, &[]));
    assert_eq!(n(&again, "compiled"), distinct, "{again}");
    assert_eq!(n(&stats_json(dir.path(), &cache), "damaged"), 0);
    assert_eq!(
        n(&native(&run_tiny(dir.path(), &cache, &[])), "cached"),
        distinct
    );
}

#[test]
fn a_cache_directory_others_can_write_to_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("shared");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = run_tiny(dir.path(), &cache, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("error[E2410]"), "{err}");
    assert!(err.contains("others can write to it"), "{err}");
    assert!(err.contains(cache.to_str().unwrap()), "{err}");
    assert!(files(&cache).is_empty(), "nothing is written into it");
    // The same for measuring.
    let out = collage_env(
        dir.path(),
        &[],
        &[
            "partition",
            root()
                .join("tests/fixtures/measure/small.relay")
                .to_str()
                .unwrap(),
            "--costs",
            "measure",
            "--target",
            "tvm_cpu",
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("error[E2410]"), "{}", stderr(&out));
    assert!(files(&cache).is_empty());
    // A kernel directory inside that others can write to is refused the same way.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir_all(cache.join("kernels/lib")).unwrap();
    std::fs::set_permissions(
        cache.join("kernels/lib"),
        std::fs::Permissions::from_mode(0o772),
    )
    .unwrap();
    let out = run_tiny(dir.path(), &cache, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("error[E2410]"), "{}", stderr(&out));
    assert!(stderr(&out).contains("kernels/lib"), "{}", stderr(&out));
    // One owned by another user (only root can make one to test with).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::os::unix::fs::chown(&other, Some(65534), Some(65534)).unwrap();
        let out = run_tiny(dir.path(), &other, &[]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("error[E2410]"), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("owned by user 65534"),
            "{}",
            stderr(&out)
        );
        assert!(files(&other).is_empty());
    }
}

/// A cache the commit before kernel hashes were recorded wrote: its entries name a library
/// and a symbol and nothing else. They are rebuilt, not loaded, without an error.
#[test]
fn a_cache_written_before_hashes_were_recorded_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let distinct = filled(dir.path(), &cache);
    let entries = files(&cache.join("kernels/entries"));
    assert_eq!(entries.len() as u64, distinct);
    for e in &entries {
        let text = std::fs::read_to_string(e).unwrap();
        let line = |p: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(p))
                .unwrap_or_else(|| panic!("{p} in {text}"))
                .to_string()
        };
        let old = format!(
            "collage kernel 1\nlibrary {}\nsymbol {}\n",
            line("library "),
            line("symbol ")
        );
        std::fs::write(e, old).unwrap();
    }
    let out = run_tiny(dir.path(), &cache, &[]);
    assert!(!stderr(&out).contains("error"), "{}", stderr(&out));
    let again = native(&out);
    assert_eq!(n(&again, "compiled"), distinct, "{again}");
    assert_eq!(n(&again, "fallbacks"), 0, "{again}");
    let third = native(&run_tiny(dir.path(), &cache, &[]));
    assert_eq!(n(&third, "cached"), distinct, "{third}");
}

/// A script standing in for the C compiler: `--version` answers `version`, anything else runs
/// `body`.
fn fake_compiler(dir: &Path, version: &str, body: &str) -> PathBuf {
    let path = dir.join("fake-cc");
    std::fs::write(
        &path,
        format!("#!/bin/sh\ncase \"$1\" in\n--version) {version}; exit 0;;\nesac\n{body}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Whether process `pid` is running (a zombie is not).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn a_hanging_compiler_dies_with_collage_and_its_build_folder_goes_next_time() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let pidfile = dir.path().join("cc.pid");
    let cc = fake_compiler(
        dir.path(),
        "echo 'hanging cc 1.0'",
        "echo $$ > \"$CC_PIDFILE\"\nexec sleep 600",
    );
    let model = fixture("tiny.relay");
    let mut child = collage_env(
        dir.path(),
        &[("CC", &cc), ("CC_PIDFILE", &pidfile)],
        &[
            "run",
            model.to_str().unwrap(),
            "--threads",
            "1",
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let start = Instant::now();
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            break p;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the compiler never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let start = Instant::now();
    while alive(pid) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let survived = alive(pid);
    if survived {
        // SAFETY: kill(2) of the test's own fake compiler.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    assert!(!survived, "the compiler outlived collage");
    // The killed process left its build folder; the next one removes it.
    let builds = |c: &Path| -> Vec<PathBuf> {
        files(&c.join("kernels/tmp"))
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .is_some_and(|f| f.to_string_lossy().starts_with("build-"))
            })
            .collect()
    };
    assert!(
        !builds(&cache).is_empty(),
        "{:?}",
        files(&cache.join("kernels/tmp"))
    );
    native(&run_tiny(dir.path(), &cache, &[]));
    assert!(builds(&cache).is_empty(), "{:?}", builds(&cache));
}

#[test]
fn compiler_output_is_cut_to_a_few_kib() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    // Two mebibytes on one line, from `--version` and from every compilation.
    let flood = "head -c 2000000 /dev/zero | tr '\\0' v; echo";
    let cc = fake_compiler(dir.path(), flood, &format!("{{ {flood}; }} >&2\nexit 1"));
    let out = run_tiny(dir.path(), &cache, &[("CC", &cc)]);
    let v = native(&out);
    assert!(n(&v, "fallbacks") >= 1, "{v}");
    let err = stderr(&out);
    assert!(
        err.contains("warning[W2310]"),
        "{}",
        &err[..err.len().min(2000)]
    );
    assert!(err.len() < 16 * 1024, "{} bytes of warnings", err.len());
    assert!(
        out.stdout.len() < 16 * 1024,
        "{} bytes of report",
        out.stdout.len()
    );
}

/// `collage cache ARGS --cache FILE`, killed after 30 s.
fn cache_command(dir: &Path, args: &[&str], file: &Path) -> Output {
    let mut child = collage_env(dir, &[], args)
        .arg("--cache")
        .arg(file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!("`collage cache {args:?}` hung: {}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_foreign_sqlite_database_is_moved_aside_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.db");
    {
        let c = rusqlite::Connection::open(&file).unwrap();
        c.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('keep me');")
            .unwrap();
    }
    let before = std::fs::read(&file).unwrap();
    let out = cache_command(dir.path(), &["cache", "stats"], &file);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("warning[W2402]"), "{err}");
    assert!(err.contains("not a collage measurement cache"), "{err}");
    let aside = dir.path().join("notes.db.corrupt");
    assert!(err.contains(aside.to_str().unwrap()), "{err}");
    // Moved aside byte for byte: no tables added, not switched to write-ahead logging.
    assert_eq!(std::fs::read(&aside).unwrap(), before);
    assert!(!dir.path().join("notes.db.corrupt-wal").exists());
    let c = rusqlite::Connection::open(&aside).unwrap();
    let body: String = c
        .query_row("SELECT body FROM notes", [], |r| r.get(0))
        .unwrap();
    assert_eq!(body, "keep me");
}

#[test]
fn a_cache_file_that_is_not_a_regular_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("costs.db");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    for args in [
        &["cache", "stats"][..],
        &["cache", "clear", "--measurements"][..],
    ] {
        let out = cache_command(dir.path(), args, &fifo);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("not a regular file"), "{args:?}: {err}");
        assert!(err.contains("error[E24"), "{args:?}: {err}");
        assert!(
            std::fs::symlink_metadata(&fifo)
                .unwrap()
                .file_type()
                .is_fifo(),
            "{args:?} removed it"
        );
    }
    let names: Vec<PathBuf> = files(dir.path());
    assert_eq!(names, vec![fifo.clone()], "nothing is made beside it");
}

use std::os::unix::fs::FileTypeExt;

#[test]
fn a_second_damage_keeps_the_first_backup() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("costs.db");
    let junk = |i: u32| format!("damage number {i}, long enough to look like a header ...");
    let mut kept = Vec::new();
    for i in 0..3 {
        std::fs::write(&file, junk(i)).unwrap();
        let out = cache_command(dir.path(), &["cache", "stats"], &file);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("warning[W2402]"), "{err}");
        let aside = if i == 0 {
            dir.path().join("costs.db.corrupt")
        } else {
            dir.path().join(format!("costs.db.corrupt.{i}"))
        };
        assert!(err.contains(aside.to_str().unwrap()), "{err}");
        kept.push(aside);
    }
    for (i, aside) in kept.iter().enumerate() {
        assert_eq!(std::fs::read_to_string(aside).unwrap(), junk(i as u32));
    }
}

#[test]
fn an_unusable_cache_directory_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
    let proc_dir = PathBuf::from("/proc/collage-cache");
    // The temporary directory that replaces it goes when the command ends.
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    for bad in [&file, &dangling, &proc_dir] {
        let out = run_tiny(dir.path(), bad, &[("TMPDIR", &tmp)]);
        let v = native(&out);
        let err = stderr(&out);
        assert!(err.contains("warning[W2411]"), "{}: {err}", bad.display());
        assert!(err.contains(tmp.to_str().unwrap()), "{err}");
        assert_eq!(files(&tmp), Vec::<PathBuf>::new(), "{}", bad.display());
        assert!(err.contains(bad.to_str().unwrap()), "{err}");
        assert!(
            !v["cache_dir"]
                .as_str()
                .unwrap()
                .starts_with(bad.to_str().unwrap()),
            "{v}"
        );
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a directory");
    assert!(!dir.path().join("nowhere").exists());
}
