//! Writing output files without destroying what is not ours.
//!
//! * A destination that exists and is not a regular file (a character device such as
//!   `/dev/null`, a FIFO, a socket) is opened and written in place: it is never replaced.
//! * A symlink is followed to the file it names (through any chain of links); that file is then
//!   treated by the rules here, and the link itself stays.
//! * A regular file, or a path that does not exist yet, is written to a temporary file created
//!   exclusively, under an unpredictable name, in the same directory, and renamed over the
//!   destination, so readers see either the old file or the complete new one. The temporary
//!   file is removed on every error path.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// How many links are followed before giving up (the kernel's own limit is 40).
const MAX_LINKS: usize = 40;

/// Follows `path` through symlinks (the last component only, repeatedly) to the path that is not
/// a link, or that does not exist yet. Directories along the way are left as spelled, so a
/// relative link resolves against the directory of the link, as the kernel does.
pub fn resolve_links(path: &Path) -> io::Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::read_link(&current)?;
                current = match current.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            Ok(_) => return Ok(current),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(current),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!(
        "more than {MAX_LINKS} levels of symbolic links"
    )))
}

/// Writes `bytes` to `path` under the rules of the module documentation.
pub fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dest = resolve_links(path)?;
    match std::fs::metadata(&dest) {
        Ok(meta) if meta.is_dir() => Err(io::Error::other("it is a directory")),
        Ok(meta) if !meta.is_file() => write_in_place(&dest, bytes),
        Ok(meta) => replace(&dest, bytes, Some(meta.permissions())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => replace(&dest, bytes, None),
        Err(e) => Err(e),
    }
}

/// Writes to an existing special file (device, FIFO) without creating or truncating anything.
fn write_in_place(dest: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(dest)?;
    f.write_all(bytes)?;
    f.flush()
}

/// Writes a fresh temporary file next to `dest` and renames it over `dest`.
fn replace(dest: &Path, bytes: &[u8], keep: Option<std::fs::Permissions>) -> io::Result<()> {
    let name = dest
        .file_name()
        .ok_or_else(|| io::Error::other("the output path names no file"))?;
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    #[cfg(unix)]
    {
        // A new file gets the mode `File::create` would give it (0666 less the umask, which
        // open(2) applies); a replaced file keeps its mode.
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    // `tempfile_in` creates the file with O_EXCL under a random name: a planted file or link
    // cannot be opened through. The file is deleted when `tmp` drops on an error path.
    let mut tmp = builder.tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    if let Some(perms) = keep {
        tmp.as_file().set_permissions(perms)?;
    }
    tmp.persist(dest).map_err(|e| e.error)?;
    Ok(())
}

/// The file a path names, for comparing paths: links followed, `.`, `..` and relative spellings
/// resolved. A path that does not exist yet is its directory's canonical path joined with its
/// name. `None` when neither can be resolved (then it cannot name an existing input either).
pub fn identity(path: &Path) -> Option<PathBuf> {
    if let Ok(c) = std::fs::canonicalize(path) {
        return Some(c);
    }
    let dest = resolve_links(path).ok()?;
    let name = dest.file_name()?;
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(dir).ok()?.join(name))
}

/// Checks that no output names an input or another output. `outputs` and `inputs` pair a role
/// (`-o`, `--dot`, `the model`, ...) with a path. Outputs that exist and are not regular files
/// (`/dev/null`, a FIFO) are written in place, so they may be shared. Returns the message of the
/// first collision.
pub fn check_collisions(outputs: &[(&str, &Path)], inputs: &[(&str, &Path)]) -> Result<(), String> {
    let special = |p: &Path| std::fs::metadata(p).is_ok_and(|m| !m.is_file() && !m.is_dir());
    let outs: Vec<(&str, &Path, PathBuf)> = outputs
        .iter()
        .filter(|(_, p)| !special(p))
        .filter_map(|&(role, p)| identity(p).map(|id| (role, p, id)))
        .collect();
    for (i, (role, path, id)) in outs.iter().enumerate() {
        if let Some((other, _, _)) = outs[..i].iter().find(|(_, _, o)| o == id) {
            return Err(format!(
                "`{role}` and `{other}` both name `{}`: one would replace the other",
                path.display()
            ));
        }
        for &(what, input) in inputs {
            if std::fs::canonicalize(input).ok().as_ref() == Some(id) {
                return Err(format!(
                    "`{role} {}` names {what} (`{}`): writing it would destroy an input",
                    path.display(),
                    input.display()
                ));
            }
        }
    }
    Ok(())
}

/// Refuses outputs (a role such as `-o` with a path) naming each other, the model, a rules file
/// given on the command line (`rules`, directories expanded) or one of `rules_read`, or a file
/// the cost specification `costs` reads (`mock:`, `table:`): E0903, a usage error.
pub fn check_output_paths(
    outputs: &[(&str, &Path)],
    model: &Path,
    rules: &[PathBuf],
    rules_read: &[PathBuf],
    costs: &crate::planning::cost::Spec,
) -> Result<(), super::Outcome> {
    if outputs.is_empty() {
        return Ok(());
    }
    // Directories expand to their `.rules` files; a missing path is reported by the loader.
    let roots: Vec<PathBuf> = rules
        .iter()
        .flat_map(|p| match std::fs::read_dir(p) {
            Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(_) => vec![p.clone()],
        })
        .collect();
    let cost_files = costs.files();
    let mut inputs: Vec<(&str, &Path)> = vec![("the model", model)];
    inputs.extend(roots.iter().map(|r| ("a rules file", r.as_path())));
    inputs.extend(rules_read.iter().map(|r| ("a rules file", r.as_path())));
    inputs.extend(cost_files.iter().map(|f| ("a cost file", f.as_path())));
    check_collisions(outputs, &inputs).map_err(|msg| super::usage_error(crate::diag::E0903, msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_new_file_is_created_and_no_temporary_file_remains() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.relay");
        write_file(&out, b"one").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"one");
        write_file(&out, b"two").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"two");
        assert_eq!(entries(dir.path()), ["out.relay"]);
    }

    #[cfg(unix)]
    #[test]
    fn a_replaced_file_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.relay");
        std::fs::write(&out, "old").unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_file(&out, b"new").unwrap();
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_is_followed_and_stays_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.relay");
        std::fs::write(&real, "old").unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        // A relative link, resolved against the link's own directory, through a second link.
        let first = sub.join("first");
        std::os::unix::fs::symlink("../real.relay", &first).unwrap();
        let link = dir.path().join("link.relay");
        std::os::unix::fs::symlink("sub/first", &link).unwrap();
        write_file(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(std::fs::symlink_metadata(&first)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        assert_eq!(entries(dir.path()), ["link.relay", "real.relay", "sub"]);
    }

    #[cfg(unix)]
    #[test]
    fn a_dangling_symlink_creates_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link.relay");
        std::os::unix::fs::symlink("made.relay", &link).unwrap();
        write_file(&link, b"new").unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("made.relay")).unwrap(),
            b"new"
        );
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_loop_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::os::unix::fs::symlink("b", &a).unwrap();
        std::os::unix::fs::symlink("a", &b).unwrap();
        assert!(write_file(&a, b"x").is_err());
        assert_eq!(entries(dir.path()), ["a", "b"]);
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_link_at_the_old_predictable_name_is_not_followed() {
        // The old scheme wrote `.NAME.tmpPID` with a plain create, so a link planted there made
        // the write land in the link's target.
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let planted = dir
            .path()
            .join(format!(".out.relay.tmp{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let out = dir.path().join("out.relay");
        write_file(&out, b"program").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&out).unwrap(), b"program");
        let names = entries(dir.path());
        assert_eq!(names.len(), 3, "{names:?}");
    }

    #[test]
    fn a_directory_is_refused_and_nothing_is_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("out");
        std::fs::create_dir(&sub).unwrap();
        assert!(write_file(&sub, b"x").is_err());
        assert_eq!(entries(dir.path()), ["out"]);
        assert!(entries(&sub).is_empty());
    }

    #[test]
    fn a_failed_rename_removes_the_temporary_file() {
        // Renaming a file over a non-empty directory fails after the temporary file was
        // written; reached through a dangling link whose target is created in between is racy,
        // so `replace` is called directly.
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("out");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("inside"), "x").unwrap();
        assert!(replace(&sub, b"x", None).is_err());
        assert_eq!(entries(dir.path()), ["out"]);
    }

    #[cfg(unix)]
    #[test]
    fn collisions_are_found_through_links_and_spellings() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("model.relay"), "").unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::os::unix::fs::symlink("model.relay", d.join("alias")).unwrap();
        let model = d.join("model.relay");
        let inputs = [("the model", model.as_path())];
        let via_dots = d.join("sub/../model.relay");
        let alias = d.join("alias");
        assert!(check_collisions(&[("-o", &via_dots)], &inputs).is_err());
        assert!(check_collisions(&[("--dot", &alias)], &inputs).is_err());
        let new = d.join("sub/new.relay");
        let new_again = d.join("sub/./new.relay");
        let err = check_collisions(&[("-o", &new), ("--dot", &new_again)], &inputs).unwrap_err();
        assert!(err.contains("`--dot` and `-o`"), "{err}");
        let other = d.join("other.dot");
        assert!(check_collisions(&[("-o", &new), ("--dot", &other)], &inputs).is_ok());
    }

    #[test]
    fn a_missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("no/such/dir/out.relay");
        assert!(write_file(&out, b"x").is_err());
        assert!(entries(dir.path()).is_empty());
    }
}
