//! The documentation stays in step with the code: every diagnostic code is documented, and every
//! code that RelayScript input can trigger has an err fixture; tests and benches name no path of
//! the machine they were written on; the repository cites only itself and published sources,
//! and every short label it uses (`quirk-N`, TVM's test cases, the micro-benchmark kernels) is
//! defined in `docs/`.

use crate::support::root;
use collage::diag::ALL_CODES;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn expected_codes_of_fixtures(dir: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(root().join(dir)) else {
        return out;
    };
    for e in entries {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap_or_default();
        if let Some(code) = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("// expect: "))
        {
            out.insert(code.trim().to_string());
        }
    }
    out
}

#[test]
fn every_code_is_documented() {
    let doc = std::fs::read_to_string(root().join("docs/diagnostics.md")).unwrap();
    for code in ALL_CODES {
        let heading = format!("### {} {}", code.id, code.title);
        assert!(
            doc.contains(&heading),
            "docs/diagnostics.md lacks `{heading}`"
        );
    }
}

#[test]
fn every_relay_code_has_an_err_fixture() {
    let covered = expected_codes_of_fixtures("tests/fixtures/relay/err");
    let missing: Vec<_> = ALL_CODES
        .iter()
        // `E07xx` come from device planning, whose scenarios live in tests/fixtures/devices.
        .filter(|c| c.id.starts_with("E0") && !c.id.starts_with("E09") && !c.id.starts_with("E07"))
        .filter(|c| !covered.contains(c.id))
        .map(|c| c.id)
        .collect();
    assert!(
        missing.is_empty(),
        "codes without an err fixture: {missing:?}"
    );
}

/// Tests and benches cite files relative to the repository, never by a path of the machine they
/// were written on.
#[test]
fn tests_cite_no_absolute_path_of_a_development_machine() {
    // Built here, so that this file does not name them itself.
    let prefixes: Vec<String> = ["work", "home", "Users", "root"]
        .iter()
        .map(|d| format!("/{d}/"))
        .collect();
    let mut stack = vec![root().join("tests"), root().join("benches")];
    let mut files = 0;
    let mut found = Vec::new();
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            // Binary files (npy data) are skipped.
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            files += 1;
            for (n, line) in text.lines().enumerate() {
                if prefixes.iter().any(|p| line.contains(p.as_str())) {
                    found.push(format!("{}:{}: {line}", path.display(), n + 1));
                }
            }
        }
    }
    assert!(files > 500, "{files} text files");
    assert!(found.is_empty(), "absolute paths:\n{}", found.join("\n"));
}

/// Every text file under `dirs` (relative to the repository; a file is taken as it is), with its
/// path relative to the repository, skipping `skip` (path prefixes) and binary files.
fn text_files(dirs: &[&str], skip: &[&str]) -> Vec<(String, String)> {
    let mut stack: Vec<PathBuf> = dirs.iter().map(|d| root().join(d)).collect();
    let mut out = Vec::new();
    while let Some(path) = stack.pop() {
        let rel = path
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if skip.iter().any(|s| rel.starts_with(s)) {
            continue;
        }
        if path.is_dir() {
            for e in std::fs::read_dir(&path).unwrap() {
                stack.push(e.unwrap().path());
            }
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(&path) {
            out.push((rel, text));
        }
    }
    out.sort();
    out
}

/// The places whose citations must stand alone: the code, tests, benches, shipped rules,
/// examples and docs. Model metadata fixtures are data, not prose.
fn cited_files() -> Vec<(String, String)> {
    let files = text_files(
        &[
            "src",
            "tests",
            "benches",
            "docs",
            "rules",
            "examples",
            "README.md",
        ],
        &["tests/fixtures/metadata"],
    );
    assert!(files.len() > 500, "{} text files", files.len());
    files
}

/// Whether `line` has a capital Q followed by digits and then no word character: the question
/// labels of notes that are not part of the repository.
fn has_question_label(line: &str) -> bool {
    let b = line.as_bytes();
    (0..b.len()).any(|i| {
        if b[i] != b'Q' {
            return false;
        }
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        let next = b.get(i + 1 + digits);
        digits > 0 && !next.is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
    })
}

/// The repository stands alone: no file cites a note a reader of the repository cannot get
/// (by name, by a path outside the repository, or by a bare section number or question label);
/// published papers, RFCs and public projects are cited by their public names, facts the code
/// relies on are written in `docs/`.
#[test]
fn the_repository_cites_only_itself_and_published_sources() {
    // Built here from pieces, so that this file does not hit its own check.
    let words: Vec<String> = [
        ["collage", "-semantics"],
        ["BRI", "EF"],
        ["reference", " note"],
        ["reference", "/"],
        ["shared", "/"],
        ["cpu", "-backends"],
        ["fuse", "-ops"],
        ["byoc", "-tables"],
        ["component", "-tests"],
        ["device", "-planning"],
        ["relay", "script"],
        ["rfc", "-"],
    ]
    .iter()
    .map(|p| p.concat())
    .collect();
    let mut found = Vec::new();
    for (path, text) in cited_files() {
        for (n, line) in text.lines().enumerate() {
            let word = words.iter().find(|w| line.contains(w.as_str()));
            // A section sign cites a section of a file of the repository named on the same line
            // (`docs/language.md §7`); a page of `docs/` may number its own sections.
            let bare_section = line
                .find('\u{a7}')
                .is_some_and(|at| !path.starts_with("docs/") && !line[..at].contains(".md"));
            if word.is_some() || bare_section || has_question_label(line) {
                found.push(format!("{path}:{}: {line}", n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "citations of notes outside the repository:\n{}",
        found.join("\n")
    );
}

/// The numbers `N` of every `<prefix>N` in `text` where `prefix` starts a word (case as given).
fn numbered(text: &str, prefix: &str) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(prefix) {
        let start = from + at;
        from = start + prefix.len();
        let word_start = text[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_');
        let digits: String = text[from..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        if word_start && !digits.is_empty() {
            out.insert(digits.parse().unwrap());
        }
    }
    out
}

/// Every quirk label the repository uses (`quirk-3` in prose, `quirk-3-...` fixtures,
/// `quirk3_...` and `QUIRK3_...` names) is defined in `docs/collage.md`, as a list item
/// starting with `**quirk-N**`, exactly once.
#[test]
fn every_quirk_label_is_defined_in_the_docs() {
    let doc = std::fs::read_to_string(root().join("docs/collage.md")).unwrap();
    let mut defined: BTreeMap<u32, usize> = BTreeMap::new();
    for line in doc.lines() {
        if let Some(rest) = line.trim_start().strip_prefix("* **quirk-") {
            let n: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            *defined.entry(n.parse().unwrap()).or_default() += 1;
        }
    }
    let twice: Vec<_> = defined.iter().filter(|(_, &c)| c > 1).collect();
    assert!(twice.is_empty(), "quirks defined twice: {twice:?}");
    let mut used: BTreeMap<u32, String> = BTreeMap::new();
    for (path, text) in cited_files() {
        let lower = text.to_lowercase();
        for n in numbered(&lower, "quirk-")
            .into_iter()
            .chain(numbered(&lower, "quirk"))
        {
            used.entry(n).or_insert(path.clone());
        }
    }
    for (path, _) in text_files(&["tests/fixtures"], &[]) {
        for n in numbered(&path, "quirk-") {
            used.entry(n).or_insert(path.clone());
        }
    }
    assert!(used.len() >= 10, "quirk labels found: {used:?}");
    let undefined: Vec<_> = used
        .iter()
        .filter(|(n, _)| !defined.contains_key(n))
        .collect();
    assert!(
        undefined.is_empty(),
        "quirk labels used but not defined in docs/collage.md: {undefined:?}"
    );
}

/// The labels of TVM's component tests our tests mirror (`B1`..`B9`, `C1`..`C14`, `D1`..`D5`:
/// fixtures `b1-...`, `c08-...`, tests `d4_...`) are rows of the tables in `docs/collage.md`,
/// and the micro-benchmark kernels (`tests/fixtures/cpu-costs/d1.relay`, ...) rows of the table
/// in `docs/backends.md`.
#[test]
fn test_case_and_kernel_labels_are_defined_in_the_docs() {
    let collage = std::fs::read_to_string(root().join("docs/collage.md")).unwrap();
    let backends = std::fs::read_to_string(root().join("docs/backends.md")).unwrap();
    // (label, where it is used)
    let mut tvm: BTreeSet<(String, String)> = BTreeSet::new();
    let label = |name: &str| -> Option<String> {
        let letter = name.chars().next()?;
        let digits: String = name[1..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        let n: u32 = digits.parse().ok()?;
        let rest = &name[1 + digits.len()..];
        (rest.starts_with('-') || rest.starts_with('_') || rest.starts_with('.'))
            .then(|| format!("{}{n}", letter.to_ascii_uppercase()))
    };
    for dir in ["tests/fixtures/enumerate", "tests/fixtures/extract"] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            if name.starts_with(['b', 'c']) {
                if let Some(l) = label(&name) {
                    tvm.insert((l, format!("{dir}/{name}")));
                }
            }
        }
    }
    for file in ["enumerate.rs", "extract.rs", "partition.rs"] {
        let text = std::fs::read_to_string(root().join("tests/it").join(file)).unwrap();
        for line in text.lines() {
            let Some(name) = line.trim_start().strip_prefix("fn ") else {
                continue;
            };
            if name.starts_with(['b', 'c', 'd']) {
                if let Some(l) = label(name) {
                    tvm.insert((l, format!("tests/it/{file}: {}", line.trim())));
                }
            }
        }
    }
    assert!(tvm.len() >= 28, "{tvm:?}");
    let row = |doc: &str, l: &str| doc.lines().any(|r| r.starts_with(&format!("| {l} |")));
    let mut undefined: Vec<_> = tvm.iter().filter(|(l, _)| !row(&collage, l)).collect();
    let mut kernels = BTreeSet::new();
    for e in std::fs::read_dir(root().join("tests/fixtures/cpu-costs")).unwrap() {
        let p = e.unwrap().path();
        let stem = p
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .to_ascii_uppercase();
        kernels.insert((
            stem,
            Path::new("tests/fixtures/cpu-costs")
                .join(p.file_name().unwrap())
                .display()
                .to_string(),
        ));
    }
    assert!(kernels.len() >= 12, "{kernels:?}");
    undefined.extend(kernels.iter().filter(|(l, _)| !row(&backends, l)));
    assert!(
        undefined.is_empty(),
        "labels without a row in docs/collage.md or docs/backends.md: {undefined:?}"
    );
}
