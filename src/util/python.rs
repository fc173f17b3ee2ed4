//! Finding a Python package of the active environment: the interpreter (`VIRTUAL_ENV`'s, else
//! `python3` on `PATH`) and the folder it imports a package from. ONNX Runtime's library
//! (`runtime::ffi::ort`) and the ONNX node tests (`pipeline::conformance`) are found this way.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The interpreter of the active environment: `VIRTUAL_ENV/bin/python` when `virtual_env` is
/// set and has one, else `python3` on `path`. Why a set `VIRTUAL_ENV` was passed over goes into
/// `why`.
pub fn interpreter(
    virtual_env: Option<&OsStr>,
    path: Option<&OsStr>,
    why: &mut Vec<String>,
) -> Option<PathBuf> {
    if let Some(v) = virtual_env.map(Path::new) {
        let py = v.join("bin/python");
        if py.is_file() {
            return Some(py);
        }
        why.push(format!("VIRTUAL_ENV `{}` has no bin/python", v.display()));
    }
    find_on_path("python3", path)
}

/// The first file `name` in the folders of `path` (a `PATH`-style list).
pub fn find_on_path(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The folder `python` imports `package` from, found without importing it (a few tens of
/// milliseconds), in at most `timeout`. The interpreter runs as the C compiler does
/// ([`super::process::run`]): in its own process group, killed whole when the time is up or
/// collage dies, its outputs read while it runs and capped, so neither a hung interpreter nor
/// a process it left holding a pipe can stall collage.
pub fn package_dir(python: &Path, package: &str, timeout: Duration) -> Result<PathBuf, String> {
    let script = format!(
        "import importlib.util, sys\n\
         s = importlib.util.find_spec('{package}')\n\
         if s is None or not s.submodule_search_locations:\n    \
         sys.exit(\"No module named '{package}'\")\n\
         print(list(s.submodule_search_locations)[0])\n"
    );
    let mut cmd = Command::new(python);
    cmd.args(["-c", &script]);
    let out = match super::process::run(&mut cmd, timeout) {
        Ok(c) => c.stdout,
        Err(f) if f.timed_out => {
            return Err(format!(
                "did not say where {package} is within {} s",
                timeout.as_secs_f64()
            ))
        }
        Err(f) if f.why.starts_with("cannot be started") => {
            return Err(f.why.replacen("cannot be started: ", "cannot be run (", 1) + ")")
        }
        Err(f) => {
            let last = f
                .stderr
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| !l.is_empty());
            return Err(format!(
                "no {package} package ({})",
                last.map_or(f.why.clone(), str::to_string)
            ));
        }
    };
    let dir = out.trim();
    if dir.is_empty() {
        return Err(format!("printed no folder for {package}"));
    }
    Ok(PathBuf::from(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_virtual_environment_without_python_is_passed_over_and_said() {
        let t = tempfile::tempdir().unwrap();
        let mut why = Vec::new();
        let none = OsStr::new("/nonexistent-dir");
        assert_eq!(
            interpreter(Some(t.path().as_os_str()), Some(none), &mut why),
            None
        );
        assert_eq!(why.len(), 1);
        assert!(why[0].contains("has no bin/python"), "{why:?}");
        std::fs::create_dir_all(t.path().join("bin")).unwrap();
        std::fs::write(t.path().join("bin/python"), b"").unwrap();
        let mut why = Vec::new();
        assert_eq!(
            interpreter(Some(t.path().as_os_str()), Some(none), &mut why),
            Some(t.path().join("bin/python"))
        );
        assert!(why.is_empty());
    }

    #[test]
    fn a_missing_interpreter_cannot_be_run() {
        let e = package_dir(
            Path::new("/nonexistent/python"),
            "onnx",
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert!(e.contains("cannot be run"), "{e}");
    }
}
