//! An external measurer: `cmd:COMMAND` runs `sh -c COMMAND` once per distinct candidate, with
//! the candidate extracted as a RelayScript module (its function named like the model's) on
//! stdin and the environment variables `COLLAGE_TARGET` (the target's name) and
//! `COLLAGE_COMPILER` (its BYOC compiler, empty for native targets). The command prints the
//! measured seconds on stdout (`inf` or `invalid` when the target cannot run the candidate,
//! `nan` or `unknown` to defer to the next estimator). A non-zero exit, unreadable output (more
//! than [`MAX_ANSWER`] bytes among it: the rest is not read) or a run longer than the time limit
//! is an `INVALID` cost. Runs happen in parallel and the cache asks once per structure and
//! target.

use super::{Cost, Estimate, Estimator, Request};
use std::io::{Read, Write};
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

/// The most a measurer's standard output is read: its answer is one number. A command that
/// prints more is stopped there (its pipe closes), so an endless printer cannot fill memory.
pub const MAX_ANSWER: usize = 64 << 10;

/// The external measurer.
pub struct Command {
    command: String,
    timeout: Duration,
}

impl Command {
    /// A measurer running `command` with a time limit per run.
    pub fn new(command: &str, timeout: Duration) -> Command {
        Command {
            command: command.to_string(),
            timeout,
        }
    }

    /// Runs the command on `input`: its standard output, or why there is none (it could not
    /// start, timed out, failed, or its output never arrived).
    fn run(&self, input: String, target: &str, compiler: &str) -> Result<String, String> {
        use std::os::unix::process::CommandExt;
        // Its own process group, so that a timeout also stops whatever the command started.
        let mut child = Process::new("sh")
            .process_group(0)
            .arg("-c")
            .arg(&self.command)
            .env("COLLAGE_TARGET", target)
            .env("COLLAGE_COMPILER", compiler)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("could not be started: {e}"))?;
        // Feed stdin and drain stdout on their own threads so a chatty command cannot block; the
        // threads are never waited for, so a process that keeps a pipe open cannot stall us.
        let piped = || "could not be connected to pipes".to_string();
        let mut stdin = child.stdin.take().ok_or_else(piped)?;
        std::thread::spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
        });
        let mut stdout = child.stdout.take().ok_or_else(piped)?;
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // One byte past the limit tells an over-long answer from one that just fits. The
            // answer is sent before the pipe closes (when `stdout` drops at the end), so it is
            // there by the time a command that goes on printing dies of the closed pipe.
            let mut out = Vec::new();
            let _ = (&mut stdout)
                .take(MAX_ANSWER as u64 + 1)
                .read_to_end(&mut out);
            let _ = send.send(out);
        });
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if start.elapsed() < self.timeout => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                _ => break None,
            }
        };
        // Whatever the command left running in its group goes too (after a timeout, the command
        // itself). `kill -s KILL -- -PGID`: the `--` keeps the negative id from being read as an
        // option.
        let _ = Process::new("kill")
            .args(["-s", "KILL", "--"])
            .arg(format!("-{}", child.id()))
            .stderr(Stdio::null())
            .status();
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let too_long = || format!("printed more than {} KiB", MAX_ANSWER >> 10);
        let early = receive.try_recv().ok();
        if early.as_ref().is_some_and(|o| o.len() > MAX_ANSWER) {
            return Err(too_long());
        }
        let status = status.ok_or_else(|| {
            format!(
                "timed out after {} s (`--cost-timeout`)",
                self.timeout.as_secs_f64()
            )
        })?;
        if !status.success() {
            return Err(match status.code() {
                Some(code) => format!("exited with status {code}"),
                None => "was killed by a signal".to_string(),
            });
        }
        // The output, if the pipe closes within what is left of the time limit.
        let out = match early {
            Some(out) => out,
            None => {
                let left = self
                    .timeout
                    .saturating_sub(start.elapsed())
                    .max(Duration::from_millis(100));
                receive
                    .recv_timeout(left)
                    .map_err(|_| "did not close its output before the time limit".to_string())?
            }
        };
        if out.len() > MAX_ANSWER {
            return Err(too_long());
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

/// Reads the measurer's answer.
pub fn parse_seconds(out: &str) -> Cost {
    read_answer(out).cost
}

/// Reads the measurer's answer, saying why it is unusable where it is.
fn read_answer(out: &str) -> Estimate {
    let said = out.trim();
    let shown: String = said.chars().take(40).collect();
    match said.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "invalid" => {
            Estimate::because(Cost::INVALID, format!("the command answered `{shown}`"))
        }
        "nan" | "unknown" => {
            Estimate::because(Cost::UNKNOWN, format!("the command answered `{shown}`"))
        }
        s => match s.parse::<f64>() {
            Ok(x) if Cost::value(x).is_known() => match super::check_seconds(x) {
                Ok(x) => Cost::value(x).into(),
                Err(why) => Estimate::because(
                    Cost::INVALID,
                    format!("the command printed `{shown}`, which {why}"),
                ),
            },
            Ok(_) => Estimate::because(
                Cost::INVALID,
                format!("the command printed `{shown}`, not a non-negative number of seconds"),
            ),
            Err(_) if said.is_empty() => {
                Estimate::because(Cost::INVALID, "the command printed nothing")
            }
            Err(_) => Estimate::because(
                Cost::INVALID,
                format!("the command printed `{shown}`, not a number of seconds"),
            ),
        },
    }
}

impl Estimator for Command {
    fn name(&self) -> String {
        "cmd".into()
    }

    fn estimate(&self, req: &Request<'_, '_>) -> Estimate {
        let module = match crate::planning::enumerate::extract::extract(
            req.graph,
            &req.candidate.sub_graph,
            Vec::new(),
        ) {
            Ok(m) => m,
            Err(e) => {
                return Estimate::because(
                    Cost::INVALID,
                    format!("the candidate could not be extracted: {e}"),
                )
            }
        };
        let text = crate::frontend::relay::print::print_module(&module);
        let t = req.target();
        match self.run(text, &t.name, t.compiler.as_deref().unwrap_or("")) {
            Ok(out) => read_answer(&out),
            Err(why) => Estimate::because(Cost::INVALID, format!("the command {why}")),
        }
    }

    fn parallel(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read() {
        assert_eq!(parse_seconds(" 0.5\n"), Cost::value(0.5));
        assert!(parse_seconds("inf").is_invalid());
        assert!(parse_seconds("garbage").is_invalid());
        assert!(parse_seconds("-1").is_invalid());
        assert!(parse_seconds("nan").is_unknown());
        assert_eq!(
            read_answer("").why.as_deref(),
            Some("the command printed nothing")
        );
        assert_eq!(
            read_answer("-2").why.as_deref(),
            Some("the command printed `-2`, not a non-negative number of seconds")
        );
    }

    #[test]
    fn runs_time_out_and_fail() {
        let c = Command::new("sleep 5", Duration::from_millis(100));
        let start = Instant::now();
        assert_eq!(
            c.run(String::new(), "t", ""),
            Err("timed out after 0.1 s (`--cost-timeout`)".to_string())
        );
        assert!(start.elapsed() < Duration::from_secs(4));
        let c = Command::new("exit 3", Duration::from_secs(5));
        assert_eq!(
            c.run(String::new(), "t", ""),
            Err("exited with status 3".to_string())
        );
        let c = Command::new(": \"$(cat)\"; echo $COLLAGE_TARGET", Duration::from_secs(5));
        assert_eq!(
            c.run("x".repeat(1 << 20), "cutlass", "").as_deref(),
            Ok("cutlass\n")
        );
    }

    #[test]
    fn an_endless_answer_is_cut_short() {
        let c = Command::new("yes 1", Duration::from_secs(30));
        let start = Instant::now();
        assert_eq!(
            c.run(String::new(), "t", ""),
            Err("printed more than 64 KiB".to_string())
        );
        assert!(start.elapsed() < Duration::from_secs(20));
        // An answer of exactly the limit is read whole; one byte more is refused.
        let padded =
            |n: usize| Command::new(&format!("printf '%0{n}d' 7"), Duration::from_secs(10));
        let at = padded(MAX_ANSWER).run(String::new(), "t", "");
        assert_eq!(at.as_ref().map(|s| s.len()), Ok(MAX_ANSWER));
        assert_eq!(parse_seconds(&at.unwrap()), Cost::value(7.0));
        assert_eq!(
            padded(MAX_ANSWER + 1).run(String::new(), "t", ""),
            Err("printed more than 64 KiB".to_string())
        );
    }
}
