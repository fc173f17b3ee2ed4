//! The module graph of the library points one way: the layer table of `docs/overview.md` lists
//! every top-level module of `src/lib.rs`, bottom to top, and no module uses a module of a higher
//! row, nor is there a cycle between top-level modules (even inside a row).
//!
//! The graph is derived from the source text: every `crate::` and `super::` path in every `.rs`
//! file under `src/`, whether in a `use` declaration or inline (`crate::ops::registry()`), with
//! `super::` resolved against the module the path is written in (a `mod.rs` file is its
//! directory's module, `x.rs` is module `x`, and inline `mod x { }` blocks nest). Comments, doc
//! comments, string and character literals are skipped. Items under `#[cfg(test)]` (unit-test
//! modules, test-only helpers, the files of `#[cfg(test)] mod x;` and files that begin with
//! `#![cfg(test)]`) are exempt: a unit test may build its inputs with a higher layer without the
//! library depending on it. Other conditions (`cfg(all(test, ...))`, `cfg(unix)`) count as
//! library code.
//!
//! The scan is a small hand-written lexer rather than `syn`: a syntax tree does not look inside
//! macro invocations (`vec![crate::x()]`, `macro_rules!` bodies), which a token scan sees, and the
//! few things the scan must understand (comments, literals, `mod` blocks, `#[cfg(test)]` items)
//! are lexical.

use crate::support::root;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// The tokens of `src` with their 1-based lines; comments, literals, lifetimes and numbers are
/// dropped.
fn lex(src: &str) -> Vec<(Tok, usize)> {
    let s: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |i: usize| s.get(i).copied().unwrap_or('\0');
    // Skips a quoted literal whose opening quote is at `i`; returns the index after the closing
    // quote.
    let skip_quoted = |mut i: usize, quote: char, line: &mut usize| {
        i += 1;
        while i < s.len() && s[i] != quote {
            if s[i] == '\\' {
                i += 1;
            }
            if at(i) == '\n' {
                *line += 1;
            }
            i += 1;
        }
        i + 1
    };
    while i < s.len() {
        let c = s[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if s[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_quoted(i, '"', &mut line);
        } else if c == '\'' {
            if at(i + 1) == '\\' {
                i = skip_quoted(i, '\'', &mut line);
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // A lifetime or a label: the quote and the name that follows.
                i += 1;
                while at(i).is_alphanumeric() || at(i) == '_' {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() {
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            match (word.as_str(), at(i)) {
                ("b" | "c", '"') => i = skip_quoted(i, '"', &mut line),
                ("b", '\'') => i = skip_quoted(i, '\'', &mut line),
                ("r" | "br" | "cr", '"' | '#') => {
                    let mut hashes = 0;
                    while at(i + hashes) == '#' {
                        hashes += 1;
                    }
                    if word == "r" && hashes == 1 && at(i + 1) != '"' {
                        // A raw identifier, `r#type`.
                        let start = i + 1;
                        i = start;
                        while at(i).is_alphanumeric() || at(i) == '_' {
                            i += 1;
                        }
                        out.push((Tok::Ident(s[start..i].iter().collect()), line));
                        continue;
                    }
                    // A raw string: `"` then up to `"` followed by as many `#`.
                    i += hashes + 1;
                    while i < s.len() && !(s[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#')) {
                        if s[i] == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                    i += hashes + 1;
                }
                _ => out.push((Tok::Ident(word), line)),
            }
        } else if c == ':' && at(i + 1) == ':' {
            out.push((Tok::PathSep, line));
            i += 2;
        } else {
            out.push((Tok::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// What one file says about the module graph.
#[derive(Debug, Default, PartialEq)]
struct Scan {
    /// `(line, name)`: a path outside `#[cfg(test)]` items that resolves to the crate root and
    /// continues with `name` (a top-level module, or another item of the crate root).
    uses: Vec<(usize, String)>,
    /// `(line, path)`: every path outside `#[cfg(test)]` items that starts from `crate` or
    /// `super`, resolved from the crate root, cut after two segments (a group and its module).
    paths: Vec<(usize, Vec<String>)>,
    /// Modules declared by `#[cfg(test)] mod x;`: their files are test-only.
    test_modules: Vec<Vec<String>>,
}

/// Scans the source of the module at `module` (its path from the crate root).
fn scan(module: &[&str], src: &str) -> Scan {
    let toks = lex(src);
    let t = |i: usize| toks.get(i).map(|(t, _)| t);
    let ident = |i: usize, w: &str| matches!(t(i), Some(Tok::Ident(x)) if x == w);
    let punct = |i: usize, c: char| t(i) == Some(&Tok::Punct(c));
    let sep = |i: usize| t(i) == Some(&Tok::PathSep);
    let mut out = Scan::default();
    // The inline `mod` blocks open at this point, with the brace depth outside each.
    let mut path: Vec<String> = module.iter().map(|m| m.to_string()).collect();
    let mut blocks: Vec<usize> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        let line = toks[i].1;
        // `#[cfg(test)]`: skip the item it applies to. `#![cfg(test)]` at the top of a file
        // makes the whole file test-only.
        let inner = punct(i + 1, '!');
        let k = i + usize::from(inner);
        if punct(i, '#')
            && punct(k + 1, '[')
            && ident(k + 2, "cfg")
            && punct(k + 3, '(')
            && ident(k + 4, "test")
            && punct(k + 5, ')')
            && punct(k + 6, ']')
        {
            if inner && blocks.is_empty() {
                out.test_modules.push(path.clone());
                i = k + 7;
            } else {
                i = skip_item(&toks, k + 7, &path, &mut out.test_modules);
            }
            continue;
        }
        // `mod x {` opens an inline module.
        if ident(i, "mod") && punct(i + 2, '{') {
            if let Some(Tok::Ident(name)) = t(i + 1) {
                path.push(name.clone());
                blocks.push(depth);
                depth += 1;
                i += 3;
                continue;
            }
        }
        match t(i) {
            Some(Tok::Punct('{')) => depth += 1,
            Some(Tok::Punct('}')) => {
                depth = depth.saturating_sub(1);
                if blocks.last() == Some(&depth) {
                    blocks.pop();
                    path.pop();
                }
            }
            _ => {}
        }
        let after_sep = i > 0 && sep(i - 1);
        if !after_sep && sep(i + 1) && (ident(i, "crate") || ident(i, "super")) {
            // The module the path starts from, as the length of its prefix of `path` (0: the
            // crate root; `None`: more `super`s than the module is deep, which rustc rejects),
            // and `j`, the index of the segment after it.
            let mut j = i;
            let base = if ident(i, "crate") {
                j += 2;
                Some(0)
            } else {
                let mut len = Some(path.len());
                while ident(j, "super") && sep(j + 1) {
                    len = len.and_then(|l: usize| l.checked_sub(1));
                    j += 2;
                }
                len
            };
            if base == Some(0) {
                for name in first_segments(&toks, j) {
                    out.uses.push((line, name));
                }
            }
            if let Some(b) = base {
                for name in first_segments(&toks, j) {
                    let mut abs: Vec<String> = path[..b].to_vec();
                    abs.push(name);
                    // One more segment, when the path goes on with a name (`a::b`).
                    if abs.len() < 2 && sep(j + 1) {
                        if let Some(Tok::Ident(next)) = t(j + 2) {
                            abs.push(next.clone());
                        }
                    }
                    abs.truncate(2);
                    out.paths.push((line, abs));
                }
            }
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

/// The first segments of the path that continues at `j`: one name, or each name of a group
/// `{a::b, c}`.
fn first_segments(toks: &[(Tok, usize)], j: usize) -> Vec<String> {
    match toks.get(j).map(|(t, _)| t) {
        Some(Tok::Ident(name)) => vec![name.clone()],
        Some(Tok::Punct('{')) => {
            let mut names = Vec::new();
            let mut depth = 0;
            let mut expect = true;
            for (tok, _) in &toks[j..] {
                match tok {
                    Tok::Punct('{') => {
                        depth += 1;
                        expect = depth == 1;
                    }
                    Tok::Punct('}') => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    Tok::Punct(',') if depth == 1 => expect = true,
                    Tok::Ident(name) if expect && depth == 1 => {
                        if name != "self" {
                            names.push(name.clone());
                        }
                        expect = false;
                    }
                    _ => expect = false,
                }
            }
            names
        }
        _ => Vec::new(),
    }
}

/// Skips the item that starts at `i` (after its `#[cfg(test)]`): further attributes, then up to
/// its `;` or its closing `}` (or, for a field or an argument, up to its `,` or the bracket that
/// closes the list, which is not skipped). Records `mod x;` in `test_modules`.
fn skip_item(
    toks: &[(Tok, usize)],
    mut i: usize,
    path: &[String],
    test_modules: &mut Vec<Vec<String>>,
) -> usize {
    let t = |i: usize| toks.get(i).map(|(t, _)| t);
    let mut depth = 0;
    let mut words = Vec::new();
    while i < toks.len() {
        match t(i) {
            Some(Tok::Punct('(' | '[' | '{')) => depth += 1,
            Some(Tok::Punct(')' | ']' | '}')) if depth == 0 => return i,
            Some(Tok::Punct(',')) if depth == 0 => return i + 1,
            Some(Tok::Punct(')' | ']')) => depth -= 1,
            Some(Tok::Punct('}')) => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            Some(Tok::Punct(';')) if depth == 0 => {
                if let [.., Tok::Ident(m), Tok::Ident(name)] = words.as_slice() {
                    if m == "mod" {
                        let mut child = path.to_vec();
                        child.push(name.clone());
                        test_modules.push(child);
                    }
                }
                return i + 1;
            }
            Some(tok) if depth == 0 => words.push(tok.clone()),
            _ => {}
        }
        i += 1;
    }
    i
}

/// The module path of a file under `src/`: `ir/mod.rs` is `ir`, `ir/equal.rs` is `ir::equal`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// A use of one top-level module by another.
struct Edge {
    from: String,
    to: String,
    /// `src/...:line`
    at: String,
}

/// The edges between distinct top-level modules, from every file of the library.
fn edges(modules: &BTreeSet<String>) -> Vec<Edge> {
    let src = root().join("src");
    let mut files = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut scans = Vec::new();
    let mut test_only: Vec<Vec<String>> = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        // `main.rs` is the binary, a crate of its own that uses the library by name.
        if rel == Path::new("main.rs") {
            continue;
        }
        let module = module_of(rel);
        let text = std::fs::read_to_string(f).unwrap();
        let m: Vec<&str> = module.iter().map(String::as_str).collect();
        let s = scan(&m, &text);
        test_only.extend(s.test_modules.iter().cloned());
        scans.push((rel.to_path_buf(), module, s));
    }
    let mut out = Vec::new();
    for (rel, module, s) in scans {
        if test_only.iter().any(|t| module.starts_with(t)) {
            continue;
        }
        let Some(from) = unit_of(&module, modules) else {
            continue;
        };
        let mut seen = BTreeSet::new();
        for (line, path) in s.paths {
            let Some(to) = unit_of(&path, modules) else {
                continue;
            };
            if to != from && seen.insert((line, to.clone())) {
                out.push(Edge {
                    from: from.clone(),
                    to,
                    at: format!("src/{}:{line}", rel.display()),
                });
            }
        }
    }
    out
}

/// The unit a module path belongs to: the longest of its first one or two segments that is a
/// unit (`analysis::typeck` for `analysis::typeck::check`, `ir` for `ir::equal`).
fn unit_of(path: &[String], units: &BTreeSet<String>) -> Option<String> {
    (1..=path.len().min(2))
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|u| units.contains(u))
}

/// The modules a file declares with `mod x;`, and whether it declares nothing else (a group).
fn declared(text: &str) -> (Vec<String>, bool) {
    let toks: Vec<Tok> = lex(text).into_iter().map(|(t, _)| t).collect();
    let names: Vec<String> = toks
        .windows(3)
        .filter_map(|w| match w {
            [Tok::Ident(m), Tok::Ident(name), Tok::Punct(';')] if m == "mod" => Some(name.clone()),
            _ => None,
        })
        .collect();
    let only_mods = toks.len() == 4 * names.len()
        && toks.chunks(4).all(|c| {
            matches!(c, [Tok::Ident(p), Tok::Ident(m), Tok::Ident(_), Tok::Punct(';')]
                if p == "pub" && m == "mod")
        });
    (names, only_mods)
}

/// The units of the module graph: the top-level modules declared in `src/lib.rs`, except that a
/// group (a folder whose `mod.rs` only declares modules, such as `analysis`) stands for its
/// modules (`analysis::typeck`, ...).
fn lib_modules() -> BTreeSet<String> {
    let src = root().join("src");
    let (top, _) = declared(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut units = BTreeSet::new();
    for m in top {
        let group = std::fs::read_to_string(src.join(&m).join("mod.rs"))
            .map(|t| declared(&t))
            .ok()
            .filter(|(names, only)| *only && !names.is_empty());
        match group {
            Some((names, _)) => units.extend(names.into_iter().map(|n| format!("{m}::{n}"))),
            None => {
                units.insert(m);
            }
        }
    }
    units
}

/// One row of the layer table.
#[derive(Debug, PartialEq)]
struct Layer {
    number: usize,
    modules: Vec<String>,
    /// `rows a–b`: the only lower rows this row may use (besides its own).
    only: Option<(usize, usize)>,
}

/// The layer table of `docs/overview.md`: the table after the heading `## Layers`, with the
/// columns `layer`, `modules`, `may use`.
fn layers(doc: &str) -> Vec<Layer> {
    let mut lines = doc
        .lines()
        .skip_while(|l| l.trim() != "## Layers")
        .skip(1)
        .skip_while(|l| !l.starts_with('|'));
    let header = lines
        .next()
        .expect("docs/overview.md has no table under `## Layers`");
    let cols: Vec<&str> = header.split('|').map(str::trim).collect();
    let col = |name: &str| {
        cols.iter()
            .position(|c| *c == name)
            .unwrap_or_else(|| panic!("the layer table has no column `{name}`: {header}"))
    };
    let (number, modules, may_use) = (col("layer"), col("modules"), col("may use"));
    lines
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let names = cells[modules]
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            let only = cells[may_use].strip_prefix("rows ").map(|r| {
                let (a, b) = r
                    .split_once(['–', '-'])
                    .unwrap_or_else(|| panic!("`may use` reads `rows a–b`: {l}"));
                let n = |x: &str| x.trim().parse::<usize>().unwrap();
                (n(a), n(b.trim_end_matches(" only")))
            });
            Layer {
                number: cells[number]
                    .parse()
                    .unwrap_or_else(|_| panic!("no layer number: {l}")),
                modules: names,
                only,
            }
        })
        .collect()
}

fn layer_table() -> Vec<Layer> {
    layers(&std::fs::read_to_string(root().join("docs/overview.md")).unwrap())
}

#[test]
fn the_layer_table_lists_every_module_once() {
    let table = layer_table();
    let numbers: Vec<usize> = table.iter().map(|l| l.number).collect();
    assert_eq!(
        numbers,
        (1..=table.len()).collect::<Vec<_>>(),
        "the layers of docs/overview.md are numbered 1, 2, ... bottom to top"
    );
    let mut seen = BTreeSet::new();
    for name in table.iter().flat_map(|l| &l.modules) {
        assert!(
            seen.insert(name.clone()),
            "`{name}` is in two rows of the layer table"
        );
    }
    let lib = lib_modules();
    let missing: Vec<_> = lib.difference(&seen).collect();
    let extra: Vec<_> = seen.difference(&lib).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/overview.md's layer table and src/lib.rs disagree: \
         modules without a layer {missing:?}, layers naming no module {extra:?}"
    );
}

#[test]
fn no_module_uses_a_higher_layer() {
    let table = layer_table();
    let layer_of: BTreeMap<&str, &Layer> = table
        .iter()
        .flat_map(|l| l.modules.iter().map(move |m| (m.as_str(), l)))
        .collect();
    let mut bad = Vec::new();
    for e in edges(&lib_modules()) {
        let (Some(from), Some(to)) = (layer_of.get(e.from.as_str()), layer_of.get(e.to.as_str()))
        else {
            continue; // the table test reports it
        };
        let allowed = match from.only {
            Some((a, b)) => to.number == from.number || (a..=b).contains(&to.number),
            None => to.number <= from.number,
        };
        if !allowed {
            bad.push(format!(
                "  {}: `{}` (layer {}) uses `{}` (layer {})",
                e.at, e.from, from.number, e.to, to.number
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{} uses against the layer order of docs/overview.md:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn no_cycle_between_top_level_modules() {
    let edges = edges(&lib_modules());
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in &edges {
        graph.entry(&e.from).or_default().insert(&e.to);
    }
    // Each direction inside a cycle, with the places it is taken (the first few of many).
    const SHOWN: usize = 8;
    let mut report = Vec::new();
    for component in cycles(&graph) {
        report.push(format!("  cycle among {}:", component.join(", ")));
        let mut pairs: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
        for e in &edges {
            if component.contains(&e.from.as_str()) && component.contains(&e.to.as_str()) {
                pairs.entry((&e.from, &e.to)).or_default().push(&e.at);
            }
        }
        for ((from, to), places) in pairs {
            let n = places.len();
            let s = if n == 1 { "" } else { "s" };
            report.push(format!("    `{from}` uses `{to}` in {n} place{s}:"));
            for at in places.iter().take(SHOWN) {
                report.push(format!("      {at}"));
            }
            if places.len() > SHOWN {
                report.push(format!("      and {} more", places.len() - SHOWN));
            }
        }
    }
    assert!(
        report.is_empty(),
        "cycles between top-level modules:\n{}",
        report.join("\n")
    );
}

/// The strongly connected components of more than one module (Tarjan's algorithm, iterative).
fn cycles<'a>(graph: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<Vec<&'a str>> {
    let nodes: BTreeSet<&str> = graph
        .iter()
        .flat_map(|(a, bs)| std::iter::once(*a).chain(bs.iter().copied()))
        .collect();
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    let mut low: BTreeMap<&str, usize> = BTreeMap::new();
    let mut on_stack = BTreeSet::new();
    let mut stack = Vec::new();
    let mut out = Vec::new();
    let empty = BTreeSet::new();
    for &start in &nodes {
        if index.contains_key(start) {
            continue;
        }
        // (node, successors still to visit)
        let mut work: Vec<(&str, Vec<&str>)> = Vec::new();
        let enter = |n: &'a str,
                     index: &mut BTreeMap<&'a str, usize>,
                     low: &mut BTreeMap<&'a str, usize>,
                     work: &mut Vec<(&'a str, Vec<&'a str>)>| {
            let k = index.len();
            index.insert(n, k);
            low.insert(n, k);
            work.push((
                n,
                graph
                    .get(n)
                    .unwrap_or(&empty)
                    .iter()
                    .rev()
                    .copied()
                    .collect(),
            ));
        };
        enter(start, &mut index, &mut low, &mut work);
        stack.push(start);
        on_stack.insert(start);
        while let Some((n, succ)) = work.last_mut() {
            let n = *n;
            if let Some(m) = succ.pop() {
                if !index.contains_key(m) {
                    enter(m, &mut index, &mut low, &mut work);
                    stack.push(m);
                    on_stack.insert(m);
                } else if on_stack.contains(m) {
                    let l = low[n].min(index[m]);
                    low.insert(n, l);
                }
                continue;
            }
            work.pop();
            if let Some((parent, _)) = work.last() {
                let l = low[parent].min(low[n]);
                low.insert(parent, l);
            }
            if low[n] == index[n] {
                let mut component = Vec::new();
                while let Some(m) = stack.pop() {
                    on_stack.remove(m);
                    component.push(m);
                    if m == n {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    out.push(component);
                }
            }
        }
    }
    out
}

// The scan itself, on small sources, so that the tests above fail for the right reasons.

fn uses_of(module: &[&str], src: &str) -> Vec<(usize, String)> {
    scan(module, src).uses
}

fn u(line: usize, name: &str) -> (usize, String) {
    (line, name.to_string())
}

#[test]
fn scan_reads_imports_groups_and_inline_paths() {
    let src = "use crate::ir::{self, Module};\n\
               use crate::{ops::registry, typeck::{check, Error}, self};\n\
               fn f() { let r = crate::devices::plan(); vec![crate::util::x()] }\n\
               pub(crate) fn g() {}\n\
               pub(in crate::relay) fn h() {}\n";
    assert_eq!(
        uses_of(&["relay"], src),
        vec![
            u(1, "ir"),
            u(2, "ops"),
            u(2, "typeck"),
            u(3, "devices"),
            u(3, "util"),
            u(5, "relay"),
        ]
    );
}

#[test]
fn scan_resolves_super_by_the_kind_of_file_and_inline_modules() {
    // `ir/mod.rs`: `super` is the crate root.
    assert_eq!(uses_of(&["ir"], "use super::ops::Op;"), vec![u(1, "ops")]);
    // `ir/equal.rs`: `super` is `ir`, `super::super` the crate root.
    assert_eq!(uses_of(&["ir", "equal"], "use super::Module;"), vec![]);
    assert_eq!(
        uses_of(&["ir", "equal"], "use super::super::ops;"),
        vec![u(1, "ops")]
    );
    // An inline module one deeper: `super` inside it is the file's module; after it closes,
    // `super` is the crate root again.
    let src = "mod inner {\n use super::Thing;\n fn f() { if x { super::super::gen::go() } }\n}\n\
               use super::typeck;\n";
    assert_eq!(uses_of(&["ir"], src), vec![u(3, "gen"), u(5, "typeck")]);
    // `work.rs`, a plain top-level file.
    assert_eq!(uses_of(&["work"], "use super::ops;"), vec![u(1, "ops")]);
}

#[test]
fn scan_skips_comments_literals_and_test_items() {
    let src = r####"
// use crate::a;
/// Calls `crate::b::f`.
//! crate::c
/* crate::d /* nested crate::e */ crate::f */
let s = "crate::g \" crate::h";
let r = r#"crate::i " crate::j"#;
let b = b"crate::k"; let c = '"'; let q = '\''; let l: &'static str = "";
let raw = br##"crate::m"##;
fn life<'a>(x: &'a u8) -> &'a u8 { crate::ok::one(); x }
#[cfg(test)]
mod tests { use crate::n; fn f() { crate::o::p() } }
#[cfg(test)]
#[allow(dead_code)]
pub(crate) fn helper() -> [u8; 2] { crate::q::r() }
#[cfg(test)]
use crate::s;
#[cfg(test)]
mod testing;
#[cfg(unix)]
fn unix() { crate::ok::two() }
struct S { #[cfg(test)] a: crate::t::A, b: crate::ok::B }
"####;
    let s = scan(&["m"], src);
    assert_eq!(s.uses, vec![u(10, "ok"), u(21, "ok"), u(22, "ok")]);
    assert_eq!(
        s.test_modules,
        vec![vec!["m".to_string(), "testing".to_string()]]
    );
    let whole = scan(
        &["m", "t"],
        "//! Test helpers.\n#![cfg(test)]\nuse crate::x;\n",
    );
    assert_eq!(
        whole.test_modules,
        vec![vec!["m".to_string(), "t".to_string()]]
    );
}

#[test]
fn paths_resolve_to_groups_and_their_modules() {
    let s = scan(
        &["analysis", "devices"],
        "use crate::planning::cost::Cost;\nfn f() { super::typeck::check(); crate::ir::X; }\n",
    );
    let p = |l: usize, a: &[&str]| (l, a.iter().map(|x| x.to_string()).collect::<Vec<_>>());
    assert_eq!(
        s.paths,
        [
            p(1, &["planning", "cost"]),
            p(2, &["analysis", "typeck"]),
            p(2, &["ir", "X"])
        ]
    );
    let units: BTreeSet<String> = ["ir", "analysis::typeck", "planning::cost"]
        .into_iter()
        .map(String::from)
        .collect();
    let unit = |a: &[&str]| unit_of(&a.iter().map(|x| x.to_string()).collect::<Vec<_>>(), &units);
    assert_eq!(unit(&["ir", "X"]).as_deref(), Some("ir"));
    assert_eq!(
        unit(&["analysis", "typeck"]).as_deref(),
        Some("analysis::typeck")
    );
    assert_eq!(unit(&["analysis"]), None);
    assert_eq!(
        declared("//! d\npub mod a;\npub mod b;\n"),
        (vec!["a".into(), "b".into()], true)
    );
    assert!(!declared("pub mod a;\nfn f() {}\n").1);
}

#[test]
fn module_paths_follow_the_file_layout() {
    assert_eq!(module_of(Path::new("ir/mod.rs")), ["ir"]);
    assert_eq!(module_of(Path::new("ir/equal.rs")), ["ir", "equal"]);
    assert_eq!(module_of(Path::new("work.rs")), ["work"]);
    assert_eq!(module_of(Path::new("lib.rs")), Vec::<String>::new());
}

#[test]
fn layer_table_rows_are_read() {
    let doc =
        "# x\n\n## Layers\n\ntext\n\n| layer | modules | may use | role |\n|---|---|---|---|\n\
               | 1 | `util`, `source` | own row | foundation |\n\
               | 2 | `ffi` | rows 1–1 only | libraries |\n\nafter\n| 9 | `x` | | |\n";
    assert_eq!(
        layers(doc),
        vec![
            Layer {
                number: 1,
                modules: vec!["util".into(), "source".into()],
                only: None
            },
            Layer {
                number: 2,
                modules: vec!["ffi".into()],
                only: Some((1, 1))
            },
        ]
    );
}

#[test]
fn cycles_are_found() {
    let mut g: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (a, b) in [
        ("a", "b"),
        ("b", "c"),
        ("c", "a"),
        ("c", "d"),
        ("d", "e"),
        ("e", "d"),
        ("f", "a"),
    ] {
        g.entry(a).or_default().insert(b);
    }
    assert_eq!(cycles(&g), vec![vec!["d", "e"], vec!["a", "b", "c"]]);
}
