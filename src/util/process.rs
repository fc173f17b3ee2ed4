//! Running a helper program (the C compiler, a Python interpreter asked where a package is)
//! to completion within a time limit, without letting it outlive collage or stall it.
//!
//! [`run`] starts the command in its own process group with a parent-death signal, reads its
//! standard output and error on threads while it runs (keeping the first [`CAPTURE`] bytes of
//! each), and kills the whole group when the time is up, when the command exits and when
//! [`run`] returns or unwinds.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Bytes of a command's standard output or error kept; the rest is read and dropped.
pub const CAPTURE: usize = 8 << 10;

/// What a finished command printed (the first [`CAPTURE`] bytes of each stream).
pub struct Captured {
    /// The standard output.
    pub stdout: String,
    /// The standard error.
    pub stderr: String,
}

/// Why a command failed, and what it printed on its standard error.
pub struct Failed {
    /// Completes "the C compiler `cc` ..." (or "`python` ...").
    pub why: String,
    /// The standard error.
    pub stderr: String,
    /// The time was up.
    pub timed_out: bool,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// A running command in its own process group; dropping it kills the group (every path out
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
pub fn run(cmd: &mut Command, timeout: Duration) -> Result<Captured, Failed> {
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
}
