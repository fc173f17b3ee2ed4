//! Where the node tests are: `COLLAGE_ONNX_NODE_TESTS`, else the `onnx` package of the active
//! Python environment (the python of `VIRTUAL_ENV`, else `python3` on `PATH`, asked where the
//! package is without importing it). The `onnx` version comes from the package's
//! `onnx-VERSION.dist-info` folder beside it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The environment variable that names the node-test folder (`.../onnx/backend/test/data/node`).
pub const DATA_ENV: &str = "COLLAGE_ONNX_NODE_TESTS";

/// The folder of the node tests inside the `onnx` package.
pub const NODE_DIR: &str = "backend/test/data/node";

/// How long the Python interpreter may take to say where `onnx` is.
pub const PYTHON_TIMEOUT: Duration = Duration::from_secs(20);

/// The node tests found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The folder holding one folder per test.
    pub dir: PathBuf,
    /// The `onnx` version the folder belongs to, when it can be told.
    pub version: Option<String>,
    /// How it was found (`COLLAGE_ONNX_NODE_TESTS`, `the onnx package of /venv/bin/python`).
    pub how: String,
}

/// What the search looks at: the process environment, or a test's.
#[derive(Clone, Debug, Default)]
pub struct Search {
    /// `COLLAGE_ONNX_NODE_TESTS`.
    pub data: Option<OsString>,
    /// `VIRTUAL_ENV`.
    pub virtual_env: Option<OsString>,
    /// `PATH`, where `python3` is looked for.
    pub path: Option<OsString>,
}

impl Search {
    /// The search this process's environment describes.
    pub fn from_env() -> Search {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        Search {
            data: var(DATA_ENV),
            virtual_env: var("VIRTUAL_ENV"),
            path: var("PATH"),
        }
    }
}

/// Finds the node tests, or says why not (every way tried, in order).
pub fn locate(s: &Search) -> Result<Located, String> {
    if let Some(d) = &s.data {
        let dir = PathBuf::from(d);
        // The variable wins: nothing else is tried.
        return if has_test_folders(&dir) {
            Ok(Located {
                version: version_beside(&dir),
                dir,
                how: DATA_ENV.to_string(),
            })
        } else {
            Err(format!(
                "{DATA_ENV} names `{}`, which holds no node-test folders",
                dir.display()
            ))
        };
    }
    let mut why = vec![format!("{DATA_ENV} is not set")];
    let python =
        crate::util::python::interpreter(s.virtual_env.as_deref(), s.path.as_deref(), &mut why);
    match python {
        None => why.push("no `python3` on PATH".into()),
        Some(py) => match crate::util::python::package_dir(&py, "onnx", PYTHON_TIMEOUT) {
            Ok(pkg) => {
                let dir = pkg.join(NODE_DIR);
                if has_test_folders(&dir) {
                    return Ok(Located {
                        version: version_beside(&dir),
                        dir,
                        how: format!("the onnx package of {}", py.display()),
                    });
                }
                why.push(format!(
                    "the onnx package of {} has no node tests in `{}` (onnx 1.22.0 ships them)",
                    py.display(),
                    dir.display()
                ));
            }
            Err(e) => why.push(format!("`{}`: {e}", py.display())),
        },
    }
    Err(why.join("; "))
}

fn has_test_folders(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .is_ok_and(|mut it| it.any(|e| e.is_ok_and(|e| e.path().join("model.onnx").is_file())))
}

/// The `onnx` version of a node-test folder `.../site-packages/onnx/backend/test/data/node`:
/// the `onnx-VERSION.dist-info` folder next to the package.
pub fn version_beside(node_dir: &Path) -> Option<String> {
    let site = node_dir.ancestors().nth(5)?;
    let mut found: Vec<String> = std::fs::read_dir(site)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let v = name.strip_prefix("onnx-")?.strip_suffix(".dist-info")?;
            Some(v.to_string())
        })
        .collect();
    found.sort();
    // Two installed versions side by side cannot be told apart.
    (found.len() == 1).then(|| found.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_wins_and_must_name_test_folders() {
        let t = tempfile::tempdir().unwrap();
        let s = Search {
            data: Some(t.path().as_os_str().to_owned()),
            ..Search::default()
        };
        let e = locate(&s).unwrap_err();
        assert!(e.contains("holds no node-test folders"), "{e}");
        std::fs::create_dir_all(t.path().join("test_x")).unwrap();
        std::fs::write(t.path().join("test_x/model.onnx"), b"").unwrap();
        let l = locate(&s).unwrap();
        assert_eq!((l.dir.as_path(), l.how.as_str()), (t.path(), DATA_ENV));
    }

    #[test]
    fn the_version_comes_from_the_dist_info_folder() {
        let t = tempfile::tempdir().unwrap();
        let node = t.path().join("site/onnx").join(NODE_DIR);
        std::fs::create_dir_all(&node).unwrap();
        assert_eq!(version_beside(&node), None);
        std::fs::create_dir_all(t.path().join("site/onnx-1.22.0.dist-info")).unwrap();
        assert_eq!(version_beside(&node).as_deref(), Some("1.22.0"));
        std::fs::create_dir_all(t.path().join("site/onnx-1.17.0.dist-info")).unwrap();
        assert_eq!(version_beside(&node), None);
    }

    #[test]
    fn without_python_every_way_is_named() {
        let s = Search {
            path: Some(OsString::from("/nonexistent-dir")),
            ..Search::default()
        };
        let e = locate(&s).unwrap_err();
        assert!(
            e.contains(DATA_ENV) && e.contains("no `python3` on PATH"),
            "{e}"
        );
    }
}
