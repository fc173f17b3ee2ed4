//! The system C compiler: its identity (for cache keys), the flags, and one invocation with a
//! time limit.
//!
//! The compiler is `$CC` when set (split at spaces, so `CC="ccache gcc"` works), else `cc`.
//! Every translation unit is compiled with the flags of a [`FlagSet`] and linked with [`LIBS`]
//! into a shared library. The default set, [`FLAGS`], keeps IEEE semantics:
//!
//! * `-O3 -march=native`: vectorisation for this machine (AVX-512 here);
//! * `-fno-math-errno -fno-trapping-math`: math functions need not set `errno` and floating
//!   point operations may be evaluated speculatively; neither changes a computed value;
//! * `-ffp-contract=fast` (GCC's default for GNU C, written out): `a * b + c` may become one
//!   fused multiply-add, rounded once (the GEMM micro-kernels depend on it);
//! * `-fopenmp`: the outer loops of large kernels run on libgomp's pool, the one oneDNN uses,
//!   and `#pragma omp simd` / `declare simd` work: reductions written with `#pragma omp simd
//!   reduction` may be reassociated, and the prelude declares glibc's vector math (`libmvec`)
//!   variants of `expf`, `logf`, `erff`, `tanhf` and `powf` so that loops calling them are
//!   vectorised (docs/native.md, "Numerics");
//! * `-fwrapv`: signed integer arithmetic wraps, as the reference interpreter's does;
//! * `-shared -fPIC`, and `-lmvec -lm` so that the library names the vector math it calls.
//!
//! No reciprocal approximations, no finite-math or no-signed-zeros assumptions, and no
//! `-ffast-math`: a shared object linked with `-ffast-math` also gets start-up code
//! (`crtfastmath.o`) that sets flush-to-zero and denormals-are-zero in the thread loading it.
//!
//! `COLLAGE_NATIVE_FLAGS=fast-math` selects the previous set, [`FAST_MATH_FLAGS`], to measure
//! the two side by side; the flags are part of every kernel's cache key, so the two sets never
//! share cached kernels.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The default compiler flags: IEEE arithmetic (part of every cache key).
pub const FLAGS: &[&str] = &[
    "-O3",
    "-march=native",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=fast",
    "-fopenmp",
    "-fwrapv",
    "-shared",
    "-fPIC",
];

/// The previous flags, with `-ffast-math` (`COLLAGE_NATIVE_FLAGS=fast-math`): reciprocal
/// divisions, finite-math and no-signed-zeros assumptions, reassociation everywhere, and
/// flush-to-zero start-up code. For measurements only.
pub const FAST_MATH_FLAGS: &[&str] = &[
    "-O3",
    "-march=native",
    "-ffast-math",
    "-fopenmp",
    "-fwrapv",
    "-shared",
    "-fPIC",
];

/// The environment variable choosing the [`FlagSet`].
pub const FLAGS_ENV: &str = "COLLAGE_NATIVE_FLAGS";

/// Which flags kernels are compiled with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FlagSet {
    /// [`FLAGS`] (`COLLAGE_NATIVE_FLAGS` unset, empty or `ieee`).
    #[default]
    Ieee,
    /// [`FAST_MATH_FLAGS`] (`COLLAGE_NATIVE_FLAGS=fast-math`).
    FastMath,
}

impl FlagSet {
    /// The set a value of `COLLAGE_NATIVE_FLAGS` names; the error says what is accepted.
    pub fn parse(value: &str) -> Result<FlagSet, String> {
        match value.trim() {
            "" | "ieee" => Ok(FlagSet::Ieee),
            "fast-math" => Ok(FlagSet::FastMath),
            v => Err(format!(
                "`{FLAGS_ENV}={v}` names no flag set (`ieee`, the default, or `fast-math`)"
            )),
        }
    }

    /// The set `$COLLAGE_NATIVE_FLAGS` names.
    pub fn from_env() -> Result<FlagSet, String> {
        match std::env::var(FLAGS_ENV) {
            Ok(v) => FlagSet::parse(&v),
            Err(std::env::VarError::NotPresent) => Ok(FlagSet::Ieee),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(format!("`{FLAGS_ENV}` is not valid UTF-8"))
            }
        }
    }

    /// The compiler flags of this set.
    pub fn flags(self) -> &'static [&'static str] {
        match self {
            FlagSet::Ieee => FLAGS,
            FlagSet::FastMath => FAST_MATH_FLAGS,
        }
    }
}

/// Libraries linked after the source.
pub const LIBS: &[&str] = &["-lmvec", "-lm"];

/// The default time limit of one compiler run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// A C compiler that answered `--version`.
#[derive(Clone, Debug)]
pub struct Compiler {
    /// The program and its leading arguments.
    pub command: Vec<String>,
    /// The first line of `--version`, for reports.
    pub version: String,
    /// The whole `--version` output, for cache keys.
    pub identity: String,
    /// The flags every compilation uses (`$COLLAGE_NATIVE_FLAGS`).
    pub flags: FlagSet,
}

/// The compiler command: `$CC` or `cc`.
pub fn command_from_env() -> Vec<String> {
    let cc = std::env::var("CC").unwrap_or_default();
    let parts: Vec<String> = cc.split_whitespace().map(str::to_string).collect();
    if parts.is_empty() {
        vec!["cc".to_string()]
    } else {
        parts
    }
}

/// Bytes of a compiler's standard output or error kept; the rest is read and dropped.
pub const CAPTURE: usize = 8 << 10;

/// Characters of one line of a compiler's output quoted in a message.
const LINE: usize = 300;

/// `line` cut to [`LINE`] characters.
fn cut(line: &str) -> String {
    match line.char_indices().nth(LINE) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line.to_string(),
    }
}

impl Compiler {
    /// Asks `command --version`; an error says why the compiler cannot be used (or that
    /// `$COLLAGE_NATIVE_FLAGS` names no flag set).
    pub fn probe(command: Vec<String>, timeout: Duration) -> Result<Compiler, String> {
        let flags = FlagSet::from_env()?;
        let name = command.join(" ");
        let mut cmd = Command::new(&command[0]);
        cmd.args(&command[1..]).arg("--version");
        let out = run(&mut cmd, timeout).map_err(|e| format!("the C compiler `{name}` {e}"))?;
        let version = cut(out.stdout.lines().next().unwrap_or("").trim());
        if version.is_empty() {
            return Err(format!(
                "the C compiler `{name}` printed no version (`{name} --version`)"
            ));
        }
        Ok(Compiler {
            command,
            version,
            identity: out.stdout,
            flags,
        })
    }

    /// Compiles `src` into the shared library `out`. Errors carry the first lines of the
    /// compiler's messages (each cut to a few hundred characters).
    pub fn compile(&self, src: &Path, out: &Path, timeout: Duration) -> Result<(), String> {
        let name = self.command.join(" ");
        let mut cmd = Command::new(&self.command[0]);
        cmd.args(&self.command[1..])
            .args(self.flags.flags())
            .arg("-o")
            .arg(out)
            .arg(src)
            .args(LIBS);
        match run(&mut cmd, timeout) {
            Ok(_) => Ok(()),
            Err(e) => {
                let first: Vec<String> = e
                    .stderr
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .take(3)
                    .map(cut)
                    .collect();
                if first.is_empty() {
                    Err(format!("the C compiler `{name}` {}", e.why))
                } else {
                    Err(format!(
                        "the C compiler `{name}` {}: {}",
                        e.why,
                        first.join(" / ")
                    ))
                }
            }
        }
    }
}

/// What a finished compiler printed (the first [`CAPTURE`] bytes of each stream).
pub(crate) struct Captured {
    pub(crate) stdout: String,
    #[allow(dead_code)] // read by the tests
    pub(crate) stderr: String,
}

/// Why a compiler run failed, and what it printed on its standard error.
pub(crate) struct Failed {
    /// Completes "the C compiler `cc` ..." (or "`python` ...").
    pub(crate) why: String,
    pub(crate) stderr: String,
    /// The time was up.
    pub(crate) timed_out: bool,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// A running compiler in its own process group; dropping it kills the group (every path out
/// of [`run`], a panic included, leaves no process behind).
struct Group {
    child: std::process::Child,
    reaped: bool,
}

impl Group {
    fn kill(&mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: kill(2) of the process group this process created for the child (its pid is
        // not reused before it is reaped, which happens only after this).
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Reads a stream to its end on a thread, keeping its first [`CAPTURE`] bytes.
fn drain(mut r: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let room = CAPTURE.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = tx.send(kept);
    });
    rx
}

/// Runs a command to completion within `timeout`, capturing the first [`CAPTURE`] bytes of
/// its standard output and error (the rest is read and dropped, never kept).
///
/// The child runs in its own process group, which is killed when the time is up, after the
/// child exits (taking any process it left behind) and when this function returns early or
/// unwinds. It is also given a parent-death signal (`PR_SET_PDEATHSIG`, SIGKILL), so that the
/// kernel kills it when collage dies, `kill -9` included. (The signal follows the thread that
/// started the child; this function waits for the child on that thread. Processes the child
/// started itself, such as gcc's `cc1`, are not covered by it when collage is killed with
/// SIGKILL; they end when their step ends.)
pub(crate) fn run(cmd: &mut Command, timeout: Duration) -> Result<Captured, Failed> {
    use std::os::unix::process::CommandExt;
    let fail = |why: String| Failed {
        why,
        stderr: String::new(),
        timed_out: false,
    };
    let parent = std::process::id() as libc::pid_t;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // async-signal-safe functions (prctl, getppid, raise).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // Collage died before the signal was armed.
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| fail(format!("cannot be started: {e}")))?;
    let mut group = Group {
        child,
        reaped: false,
    };
    let out = group.child.stdout.take().map(drain);
    let err = group.child.stderr.take().map(drain);
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    let mut timed_out = false;
    let status = loop {
        match group.child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) => {}
            Err(e) => break Err(format!("cannot be waited for: {e}")),
        }
        if start.elapsed() >= timeout {
            timed_out = true;
            break Err(format!("timed out after {:.0} s", timeout.as_secs_f64()));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    };
    // Whatever is left of the group goes, so that the pipes close.
    group.kill();
    if status.is_ok() {
        group.reaped = true;
    }
    drop(group);
    // A process that left the group may still hold a pipe: do not wait for it for long.
    let collect = |rx: Option<std::sync::mpsc::Receiver<Vec<u8>>>| {
        rx.and_then(|rx| rx.recv_timeout(Duration::from_secs(2)).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let stdout = collect(out);
    let stderr = collect(err);
    let status = status.map_err(|why| Failed {
        why,
        stderr: stderr.clone(),
        timed_out,
    })?;
    if status.success() {
        Ok(Captured { stdout, stderr })
    } else {
        Err(Failed {
            why: match status.code() {
                Some(c) => format!("failed with exit status {c}"),
                None => "was killed by a signal".to_string(),
            },
            stderr,
            timed_out: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(script);
        c
    }

    #[test]
    fn output_is_cut_while_read() {
        let out = run(
            &mut sh("head -c 3000000 /dev/zero | tr '\\0' x; echo; echo err >&2"),
            Duration::from_secs(60),
        )
        .ok()
        .unwrap();
        assert_eq!(out.stdout.len(), CAPTURE);
        assert_eq!(out.stderr, "err\n");
        let e = run(
            &mut sh("head -c 3000000 /dev/zero | tr '\\0' y >&2; exit 3"),
            Duration::from_secs(60),
        )
        .err()
        .unwrap();
        assert_eq!(e.why, "failed with exit status 3");
        assert_eq!(e.stderr.len(), CAPTURE);
        assert_eq!(cut(&"z".repeat(1000)).len(), LINE + 3);
    }

    #[test]
    fn a_timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("pid");
        let script = format!("sleep 600 & echo $! > {}; wait", pid.display());
        let start = Instant::now();
        let e = run(&mut sh(&script), Duration::from_millis(500))
            .err()
            .unwrap();
        assert!(e.why.starts_with("timed out"), "{}", e.why);
        assert!(start.elapsed() < Duration::from_secs(10));
        let pid: i32 = std::fs::read_to_string(&pid)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The background sleep, a grandchild, is gone too (or a zombie waiting for init).
        let gone = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
        };
        let t = Instant::now();
        while !gone() && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(gone(), "the grandchild survived");
    }

    #[test]
    fn flag_sets_by_name() {
        assert_eq!(FlagSet::parse(""), Ok(FlagSet::Ieee));
        assert_eq!(FlagSet::parse("ieee"), Ok(FlagSet::Ieee));
        assert_eq!(FlagSet::parse(" fast-math "), Ok(FlagSet::FastMath));
        let e = FlagSet::parse("fastmath").unwrap_err();
        assert!(
            e.contains("COLLAGE_NATIVE_FLAGS=fastmath") && e.contains("fast-math"),
            "{e}"
        );
        // The default set has IEEE semantics; the other is the previous -ffast-math set.
        for bad in [
            "-ffast-math",
            "-ffinite-math-only",
            "-freciprocal-math",
            "-Ofast",
        ] {
            assert!(!FlagSet::Ieee.flags().contains(&bad), "{bad}");
        }
        assert!(FlagSet::FastMath.flags().contains(&"-ffast-math"));
        assert_ne!(FlagSet::Ieee.flags(), FlagSet::FastMath.flags());
    }
}
