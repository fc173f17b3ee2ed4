//! The documentation stays in step with the code: every diagnostic code is documented, and every
//! code that RelayScript input can trigger has an err fixture; tests and benches name no path of
//! the machine they were written on.

use crate::support::root;
use collage::diag::ALL_CODES;
use std::collections::BTreeSet;

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

/// Tests and benches cite files relative to the repository (the reference notes as
/// `../shared/reference/...`), never by a path of the machine they were written on.
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
