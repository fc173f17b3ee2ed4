//! The system C compiler: its identity (for cache keys), the flags, and one invocation with a
//! time limit.
//!
//! The compiler is `$CC` when set (split at spaces, so `CC="ccache gcc"` works), else `cc`.
//! Every translation unit is compiled with [`FLAGS`] and linked with [`LIBS`] into a shared
//! library:
//!
//! * `-O3 -march=native`: vectorisation for this machine (AVX-512 here);
//! * `-ffast-math`: lets GCC call glibc's vector math (`libmvec`) for `expf`, `tanhf`, `erff`,
//!   ... and reassociate sums (reference note, P4);
//! * `-fopenmp`: the outer loops of large kernels run on libgomp's pool, the one oneDNN uses;
//! * `-fwrapv`: signed integer arithmetic wraps, as the reference interpreter's does;
//! * `-shared -fPIC`, and `-lmvec -lm` so that the library names the vector math it calls.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Compiler flags (part of every cache key).
pub const FLAGS: &[&str] = &[
    "-O3",
    "-march=native",
    "-ffast-math",
    "-fopenmp",
    "-fwrapv",
    "-shared",
    "-fPIC",
];

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

impl Compiler {
    /// Asks `command --version`; an error says why the compiler cannot be used.
    pub fn probe(command: Vec<String>, timeout: Duration) -> Result<Compiler, String> {
        let name = command.join(" ");
        let dir =
            tempfile::tempdir().map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        let out = dir.path().join("version.txt");
        let file = std::fs::File::create(&out)
            .map_err(|e| format!("cannot create a temporary file: {e}"))?;
        let mut cmd = Command::new(&command[0]);
        cmd.args(&command[1..])
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(Stdio::null());
        run(&mut cmd, timeout).map_err(|e| format!("the C compiler `{name}` {e}"))?;
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let version = text.lines().next().unwrap_or("").trim().to_string();
        if version.is_empty() {
            return Err(format!(
                "the C compiler `{name}` printed no version (`{name} --version`)"
            ));
        }
        Ok(Compiler {
            command,
            version,
            identity: text,
        })
    }

    /// Compiles `src` into the shared library `out`. Errors carry the first lines of the
    /// compiler's messages.
    pub fn compile(&self, src: &Path, out: &Path, timeout: Duration) -> Result<(), String> {
        let name = self.command.join(" ");
        let log = out.with_extension("log");
        let file = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create `{}`: {e}", log.display()))?;
        let mut cmd = Command::new(&self.command[0]);
        cmd.args(&self.command[1..])
            .args(FLAGS)
            .arg("-o")
            .arg(out)
            .arg(src)
            .args(LIBS)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file);
        match run(&mut cmd, timeout) {
            Ok(()) => Ok(()),
            Err(e) => {
                let msg = std::fs::read_to_string(&log).unwrap_or_default();
                let first: Vec<&str> = msg
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .take(3)
                    .collect();
                if first.is_empty() {
                    Err(format!("the C compiler `{name}` {e}"))
                } else {
                    Err(format!(
                        "the C compiler `{name}` {e}: {}",
                        first.join(" / ")
                    ))
                }
            }
        }
    }
}

/// Runs a command to completion within `timeout` (its whole process group is killed when the
/// time is up). The error completes "the C compiler `cc` ...".
fn run(cmd: &mut Command, timeout: Duration) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    let mut child = cmd.spawn().map_err(|e| format!("cannot be started: {e}"))?;
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => {
                return Err(match status.code() {
                    Some(c) => format!("failed with exit status {c}"),
                    None => "was killed by a signal".to_string(),
                })
            }
            Ok(None) => {}
            Err(e) => return Err(format!("cannot be waited for: {e}")),
        }
        if start.elapsed() >= timeout {
            let pid = child.id() as i32;
            // SAFETY: kill(2) on the process group we created; no memory is involved.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("timed out after {:.0} s", timeout.as_secs_f64()));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}
