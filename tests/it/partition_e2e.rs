//! End-to-end runs of `collage partition` with the mock estimator, driven by the scenarios in
//! `tests/fixtures/partition/<scenario>/`.
//!
//! A scenario directory holds `model.relay`, its rules (`*.rules`, importing the shared native
//! target and host of `tests/fixtures/partition/native.rules`), one or more mock cost files
//! (`{"targets": {"<target>": <base cost>}}`, `mock.json` by default) and `expected.txt`, which
//! lists runs of the binary and what each must produce. Its syntax, one item per line (`#`
//! starts a comment line):
//!
//! ```text
//! run NAME                          a run: `collage partition model.relay --rules .
//!                                   --costs mock:<costs> --format json -o <tmp>` plus `args`
//! args ARG...                       extra arguments
//! costs FILE                        the mock file (default `mock.json`); it follows `mock:`,
//!                                   so `a.json+mock:b.json` chains two estimators
//! exit N                            expected exit code (default 0)
//! total X                           total_cost, compared exactly as an f64
//! partition NAME TARGET: CALL...    one partition and its operator calls, `%binding:op` or
//!                                   `#index:op`; the list of partitions must be complete
//! baselines NAME=X...               the exact baselines (none at all when empty)
//! program TEXT                      the partitioned program contains TEXT
//! program-lacks TEXT                the partitioned program does not contain TEXT
//! stderr TEXT                       standard error contains TEXT
//! explain %BINDING TARGET           `--explain %BINDING` says the chosen candidate covering it
//!                                   is on TARGET, and that no alternative gives a cheaper cover
//! ```
//!
//! Every successful run is also checked for:
//! * every node of `@main` in exactly one partition (operator calls included);
//! * no partition deeper than its target's depth limit (`--byoc-max-depth` for BYOC targets,
//!   `--tvm-max-depth` for the native one; 8 when not given);
//! * the total no larger than any baseline, and every BYOC target's restricted baseline (that
//!   target with the native targets and the host) no larger than its greedy baseline;
//! * the partitioned program (`-o`) parsing with `collage parse`, and carrying `Primitive=1`,
//!   `Compiler="..."` and `global_symbol="..."` for each BYOC partition and `Composite="..."`
//!   for each of its composites, one definition of each BYOC function and one call per
//!   partition using it, and no `Compiler=` when no partition is BYOC;
//! * determinism: a second run prints the same report (timing aside) and the same program;
//! * `--dijkstra` giving the same total as the default A* search.
//!
//! Failing runs must not panic, must print nothing on stdout, must not write the program and
//! must print the same diagnostics when repeated.

use crate::support::{collage_in, root};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One expected run.
#[derive(Debug, Default)]
struct Run {
    name: String,
    args: Vec<String>,
    costs: String,
    exit: i32,
    total: Option<f64>,
    partitions: Option<Vec<String>>,
    baselines: Option<BTreeMap<String, Option<f64>>>,
    program: Vec<String>,
    program_lacks: Vec<String>,
    stderr: Vec<String>,
    explain: Vec<(String, String)>,
}

fn parse_expected(path: &Path) -> Vec<Run> {
    let text = std::fs::read_to_string(path).expect("readable expected.txt");
    let mut runs: Vec<Run> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        let rest = rest.trim();
        let where_ = || format!("{}:{}", path.display(), n + 1);
        if key == "run" {
            runs.push(Run {
                name: rest.to_string(),
                costs: "mock.json".into(),
                ..Run::default()
            });
            continue;
        }
        let run = runs
            .last_mut()
            .unwrap_or_else(|| panic!("{}: `{key}` before any `run`", where_()));
        let float = |s: &str| -> f64 {
            s.parse()
                .unwrap_or_else(|_| panic!("{}: `{s}` is not a number", where_()))
        };
        match key {
            "args" => run.args.extend(rest.split_whitespace().map(String::from)),
            "costs" => run.costs = rest.to_string(),
            "exit" => run.exit = rest.parse().expect("an exit code"),
            "total" => run.total = Some(float(rest)),
            "partition" => run
                .partitions
                .get_or_insert_with(Vec::new)
                .push(normalise_line(rest)),
            "baselines" => {
                let mut map = BTreeMap::new();
                for item in rest.split_whitespace() {
                    let (k, v) = item
                        .rsplit_once('=')
                        .unwrap_or_else(|| panic!("{}: expected NAME=COST", where_()));
                    let v = (v != "none").then(|| float(v));
                    map.insert(k.to_string(), v);
                }
                run.baselines = Some(map);
            }
            "program" => run.program.push(rest.to_string()),
            "program-lacks" => run.program_lacks.push(rest.to_string()),
            "stderr" => run.stderr.push(rest.to_string()),
            "explain" => {
                let (b, t) = rest
                    .split_once(' ')
                    .unwrap_or_else(|| panic!("{}: expected `explain %BINDING TARGET`", where_()));
                run.explain.push((b.to_string(), t.trim().to_string()));
            }
            _ => panic!("{}: unknown item `{key}`", where_()),
        }
    }
    runs
}

/// `NAME TARGET: a b c` with single spaces and the calls sorted.
fn normalise_line(s: &str) -> String {
    let (head, calls) = s.split_once(':').unwrap_or((s, ""));
    let head: Vec<&str> = head.split_whitespace().collect();
    let mut calls: Vec<&str> = calls.split_whitespace().collect();
    calls.sort();
    format!("{}: {}", head.join(" "), calls.join(" "))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A node of `collage parse --json`.
struct Node {
    kind: String,
    op: Option<String>,
    binding: Option<String>,
}

fn model_nodes(dir: &Path) -> Vec<Node> {
    let out = collage_in(dir, ["parse", "--json", "model.relay"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    v["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .enumerate()
        .map(|(i, n)| {
            assert_eq!(n["index"].as_u64(), Some(i as u64));
            Node {
                kind: n["kind"].as_str().unwrap_or("").to_string(),
                op: n["op"].as_str().map(String::from),
                binding: n["binding"].as_str().map(String::from),
            }
        })
        .collect()
}

/// `%binding:op` or `#index:op`.
fn call_name(nodes: &[Node], i: usize) -> String {
    let n = &nodes[i];
    let at = n.binding.clone().unwrap_or_else(|| format!("#{i}"));
    format!("{at}:{}", n.op.as_deref().unwrap_or("?"))
}

fn is_call(n: &Node) -> bool {
    n.kind == "Call" && n.op.is_some()
}

/// The report without its timing.
fn untimed(stdout: &[u8]) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_slice(stdout).expect("a JSON report");
    v["stats"]["elapsed_ms"] = serde_json::Value::Null;
    v
}

struct Ctx<'a> {
    dir: &'a Path,
    scenario: String,
    tmp: PathBuf,
}

impl Ctx<'_> {
    fn base_args(&self, run: &Run, out: &Path) -> Vec<String> {
        // TVM's mock configurations are compared on the models as written.
        let mut args: Vec<String> = [
            "partition",
            "model.relay",
            "--no-simplify",
            "--rules",
            ".",
            "--costs",
            &format!("mock:{}", run.costs),
            "--format",
            "json",
            "-o",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(out.to_string_lossy().into_owned());
        args.extend(run.args.iter().cloned());
        args
    }

    fn out_path(&self, run: &Run, what: &str) -> PathBuf {
        self.tmp
            .join(format!("{}-{}-{what}.relay", self.scenario, run.name))
    }

    fn check(&self, run: &Run, nodes: &[Node]) {
        let ctx = format!("{} / {}", self.scenario, run.name);
        let out_file = self.out_path(run, "a");
        let _ = std::fs::remove_file(&out_file);
        let out = collage_in(self.dir, self.base_args(run, &out_file));
        let stderr = text(&out.stderr);
        assert!(!stderr.contains("panicked"), "{ctx}: panic\n{stderr}");
        assert_eq!(
            out.status.code(),
            Some(run.exit),
            "{ctx}: exit code\n{stderr}\n{}",
            text(&out.stdout)
        );
        for s in &run.stderr {
            assert!(
                stderr.contains(s.as_str()),
                "{ctx}: stderr lacks `{s}`\n{stderr}"
            );
        }
        if run.exit != 0 {
            assert!(out.stdout.is_empty(), "{ctx}: stdout on failure");
            assert!(!out_file.exists(), "{ctx}: program written on failure");
            // Failures are deterministic too.
            let again = collage_in(self.dir, self.base_args(run, &out_file));
            assert_eq!(
                text(&again.stderr),
                stderr,
                "{ctx}: stderr differs between runs"
            );
            return;
        }
        let report = untimed(&out.stdout);
        let f = &report["functions"][0];
        let total = f["total_cost"].as_f64().expect("total_cost");
        let partitions = f["partitions"].as_array().expect("partitions");

        // Every node in exactly one partition; the normalised view.
        let mut owner: Vec<Option<String>> = vec![None; nodes.len()];
        let mut actual: Vec<String> = Vec::new();
        let mut part_sum = 0.0;
        for p in partitions {
            let name = p["name"].as_str().expect("name").to_string();
            let target = p["target"].as_str().expect("target").to_string();
            part_sum += p["cost"].as_f64().expect("cost");
            let mut calls = Vec::new();
            for n in p["nodes"].as_array().expect("nodes") {
                let i = n["index"].as_u64().expect("index") as usize;
                assert!(i < nodes.len(), "{ctx}: node {i} out of range");
                if let Some(other) = &owner[i] {
                    panic!("{ctx}: node {i} is in {other} and in {name}");
                }
                owner[i] = Some(name.clone());
                if is_call(&nodes[i]) {
                    calls.push(call_name(nodes, i));
                }
            }
            actual.push(normalise_line(&format!(
                "{name} {target}: {}",
                calls.join(" ")
            )));
        }
        for (i, o) in owner.iter().enumerate() {
            assert!(
                o.is_some(),
                "{ctx}: node {i} ({}) is in no partition",
                nodes[i].kind
            );
        }
        actual.sort();
        // Depth limits.
        let limit = |flag: &str| {
            run.args
                .iter()
                .position(|a| a == flag)
                .and_then(|k| run.args.get(k + 1))
                .map_or(8, |v| v.parse::<u64>().expect("a depth limit"))
        };
        let (byoc_limit, tvm_limit) = (limit("--byoc-max-depth"), limit("--tvm-max-depth"));
        for p in partitions {
            let depth = p["depth"].as_u64().expect("depth");
            let name = &p["name"];
            if p["compiler"].is_string() {
                assert!(
                    depth <= byoc_limit,
                    "{ctx}: {name} has depth {depth}, above --byoc-max-depth {byoc_limit}"
                );
            } else if p["target"] != "host" {
                assert!(
                    depth <= tvm_limit,
                    "{ctx}: {name} has depth {depth}, above --tvm-max-depth {tvm_limit}"
                );
            }
        }
        if let Some(expected) = &run.partitions {
            let mut expected = expected.clone();
            expected.sort();
            assert_eq!(
                actual.join("\n"),
                expected.join("\n"),
                "{ctx}: partitions (left: actual)"
            );
        }
        if let Some(t) = run.total {
            assert!(
                total == t,
                "{ctx}: total_cost {total:?} (bits {:#x}), expected {t:?} (bits {:#x})",
                total.to_bits(),
                t.to_bits()
            );
        }
        assert!(
            (part_sum - total).abs() <= 1e-9 * total.max(1.0),
            "{ctx}: partition costs add up to {part_sum}, total is {total}"
        );

        // Baselines.
        let baselines = f["baselines"].as_object().expect("baselines");
        for (name, cost) in baselines {
            if let Some(c) = cost.as_f64() {
                assert!(
                    total <= c,
                    "{ctx}: total {total} above baseline {name} = {c}"
                );
            }
            if let (Some(target), Some(greedy)) = (name.strip_prefix("greedy:"), cost.as_f64()) {
                let restricted = baselines.get(target).and_then(|v| v.as_f64());
                assert!(
                    restricted.is_some_and(|r| r <= greedy),
                    "{ctx}: baseline {target} = {restricted:?} above greedy:{target} = {greedy}"
                );
            }
        }
        if let Some(expected) = &run.baselines {
            let actual: BTreeMap<String, Option<f64>> = baselines
                .iter()
                .map(|(k, v)| (k.clone(), v.as_f64()))
                .collect();
            assert_eq!(&actual, expected, "{ctx}: baselines (left: actual)");
        }

        // The partitioned program.
        let program = std::fs::read_to_string(&out_file).expect("the program was written");
        let parsed = collage_in(self.dir, ["parse".as_ref(), out_file.as_os_str()]);
        assert_eq!(
            parsed.status.code(),
            Some(0),
            "{ctx}: the partitioned program does not parse\n{}\n{program}",
            text(&parsed.stderr)
        );
        let mut any_byoc = false;
        for p in partitions {
            let Some(compiler) = p["compiler"].as_str() else {
                continue;
            };
            any_byoc = true;
            let name = p["name"].as_str().unwrap_or("");
            let mut wanted = vec![
                format!("def @{name}("),
                "Primitive=1".to_string(),
                format!("Compiler=\"{compiler}\""),
                format!("global_symbol=\"{name}\""),
                format!("@{name}("),
            ];
            for c in p["composites"].as_array().expect("composites") {
                wanted.push(format!(
                    "Composite=\"{}\"",
                    c["label"].as_str().unwrap_or("")
                ));
            }
            for w in wanted {
                assert!(
                    program.contains(&w),
                    "{ctx}: program lacks `{w}`\n{program}"
                );
            }
            // One definition, and one call per partition of that name.
            let uses = partitions.iter().filter(|q| q["name"] == name).count();
            assert_eq!(
                program.matches(&format!("@{name}(")).count(),
                1 + uses,
                "{ctx}: definitions and calls of @{name}\n{program}"
            );
        }
        if !any_byoc {
            assert!(
                !program.contains("Compiler="),
                "{ctx}: a BYOC function\n{program}"
            );
        }
        for s in &run.program {
            assert!(
                program.contains(s.as_str()),
                "{ctx}: program lacks `{s}`\n{program}"
            );
        }
        for s in &run.program_lacks {
            assert!(
                !program.contains(s.as_str()),
                "{ctx}: program has `{s}`\n{program}"
            );
        }

        // Determinism.
        let out_b = self.out_path(run, "b");
        let again = collage_in(self.dir, self.base_args(run, &out_b));
        assert_eq!(again.status.code(), Some(0), "{ctx}: second run");
        assert_eq!(
            untimed(&again.stdout),
            report,
            "{ctx}: reports differ between runs"
        );
        let program_b = std::fs::read_to_string(&out_b).expect("the program was written");
        assert_eq!(program_b, program, "{ctx}: programs differ between runs");

        // Dijkstra.
        let mut args = self.base_args(run, &out_b);
        if !args.iter().any(|a| a == "--dijkstra") {
            args.push("--dijkstra".into());
        }
        let dj = collage_in(self.dir, &args);
        assert_eq!(dj.status.code(), Some(0), "{ctx}: --dijkstra");
        let dj_total = untimed(&dj.stdout)["functions"][0]["total_cost"].as_f64();
        assert_eq!(
            dj_total,
            Some(total),
            "{ctx}: --dijkstra total differs from A*"
        );

        // Explanations.
        for (binding, target) in &run.explain {
            self.check_explain(run, binding, target, total, nodes);
        }
        let _ = std::fs::remove_file(&out_file);
        let _ = std::fs::remove_file(&out_b);
    }

    fn check_explain(&self, run: &Run, binding: &str, target: &str, total: f64, nodes: &[Node]) {
        let ctx = format!("{} / {} / --explain {binding}", self.scenario, run.name);
        let out_file = self.out_path(run, "x");
        let mut args = self.base_args(run, &out_file);
        args.extend(["--explain".to_string(), binding.to_string()]);
        let out = collage_in(self.dir, &args);
        assert_eq!(out.status.code(), Some(0), "{ctx}\n{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let e = &v["explain"][0];
        assert_eq!(e["binding"], binding, "{ctx}");
        let node = e["node"].as_u64().expect("node") as usize;
        assert_eq!(nodes[node].binding.as_deref(), Some(binding), "{ctx}");
        let cands = e["candidates"].as_array().expect("candidates");
        let chosen: Vec<&serde_json::Value> =
            cands.iter().filter(|c| c["chosen"] == true).collect();
        assert_eq!(chosen.len(), 1, "{ctx}: one chosen candidate\n{e:#}");
        assert_eq!(chosen[0]["target"], target, "{ctx}: chosen target\n{e:#}");
        assert_eq!(
            chosen[0]["best_total_with_it"].as_f64(),
            Some(total),
            "{ctx}"
        );
        for c in cands {
            let covers = c["nodes"]
                .as_array()
                .is_some_and(|ns| ns.iter().any(|n| n.as_u64() == Some(node as u64)));
            assert!(
                covers,
                "{ctx}: a listed candidate does not cover the node\n{c:#}"
            );
            if let Some(b) = c["best_total_with_it"].as_f64() {
                assert!(
                    b >= total,
                    "{ctx}: an alternative is cheaper than the result\n{c:#}"
                );
            }
        }
        // The table form names the chosen candidate too.
        let mut args = self.base_args(run, &out_file);
        args.retain(|a| a != "--format" && a != "json");
        args.extend(["--explain".to_string(), binding.to_string()]);
        let out = collage_in(self.dir, &args);
        assert_eq!(out.status.code(), Some(0), "{ctx}");
        let table = text(&out.stdout);
        let line = table
            .lines()
            .find(|l| l.trim_end().ends_with("chosen"))
            .unwrap_or_else(|| panic!("{ctx}: no `chosen` line\n{table}"));
        assert!(line.contains(target), "{ctx}: chosen line `{line}`");
        assert!(table.contains(&format!("{binding} (")), "{ctx}\n{table}");
        let _ = std::fs::remove_file(&out_file);
    }
}

#[test]
fn partition_scenarios() {
    let base = root().join("tests/fixtures/partition");
    let tmp_dir = tempfile::tempdir().expect("a temporary directory");
    let tmp = tmp_dir.path().to_path_buf();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&base)
        .expect("the fixture directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("expected.txt").is_file())
        .collect();
    dirs.sort();
    let mut runs = 0;
    let mut failed = Vec::new();
    for dir in &dirs {
        let scenario = dir.file_name().unwrap().to_string_lossy().into_owned();
        let nodes = model_nodes(dir);
        let ctx = Ctx {
            dir,
            scenario: scenario.clone(),
            tmp: tmp.clone(),
        };
        let expected = parse_expected(&dir.join("expected.txt"));
        assert!(!expected.is_empty(), "{scenario}: no runs");
        for run in &expected {
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.check(run, &nodes)));
            if r.is_err() {
                failed.push(format!("{scenario} / {}", run.name));
            }
            runs += 1;
        }
    }
    assert!(
        failed.is_empty(),
        "failed runs (see the panics above): {failed:#?}"
    );
    assert!(dirs.len() >= 10, "scenarios: {dirs:?}");
    assert!(runs >= dirs.len());
}
