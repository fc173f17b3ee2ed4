//! The memory a model needs before it runs, and the memory this process can get.
//!
//! [`need`] adds up, from the types alone and before anything is allocated: the model's
//! constants (every constant expression), the parameters of the function that runs, and the
//! peak of the tensors its calls make under the memory plan of [`super::program`]: a value
//! lives from the expression that makes it to its last reader, a tuple or projection extends
//! the life of what it holds, a let-bound value lives as long as its variable is read.
//! Expressions are taken in the order of the arena (operands before their users), as the
//! program runs them; the calls inside function bodies count where the bodies are.
//!
//! [`available`] is what the machine can still give: `MemAvailable` of `/proc/meminfo`, or,
//! when smaller, the room left under the cgroup's memory limit (v2: `memory.max` less
//! `memory.current`; v1: `memory.limit_in_bytes` less `memory.usage_in_bytes`), over the
//! process's cgroup and its ancestors.

use crate::ir::{Dim, Expr, FuncId, Module, Type};

/// `n` bytes for a message: `1.5 GiB`, `12.0 MiB`, `3.2 KiB` or `100 bytes`.
pub fn approx_bytes(n: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift {
            return format!("{:.1} {unit}", n as f64 / (1u64 << shift) as f64);
        }
    }
    format!("{n} bytes")
}

/// What a model needs, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Need {
    /// The constants (weights).
    pub constants: u64,
    /// The parameters of the function that runs.
    pub inputs: u64,
    /// The peak of the tensors the calls make.
    pub peak: u64,
}

impl Need {
    /// All of it (saturating).
    pub fn total(&self) -> u64 {
        self.constants
            .saturating_add(self.inputs)
            .saturating_add(self.peak)
    }
}

/// Bytes of a value of type `ty` (dynamic extents count as 1, so the result is a lower bound).
pub fn type_bytes(ty: &Type) -> u64 {
    match ty {
        Type::Tensor(t) => t
            .shape
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => u64::try_from(*n).unwrap_or(0),
                _ => 1,
            })
            .fold(t.dtype.bytes(), u64::saturating_mul),
        Type::Tuple(fields) => fields.iter().map(type_bytes).fold(0, u64::saturating_add),
        _ => 0,
    }
}

/// What running `func` of the typed module `m` needs.
pub fn need(m: &Module, func: FuncId) -> Need {
    let n = m.exprs.len();
    let bytes = |e: usize| m.types[e].as_ref().map_or(0, type_bytes);
    let mut constants = 0u64;
    // The last reader of each expression.
    let mut last: Vec<usize> = (0..n).collect();
    for u in 0..n {
        let id = crate::ir::ExprId(u as u32);
        if let Expr::Const(_) = m.expr(id) {
            constants = constants.saturating_add(bytes(u));
        }
        if matches!(m.expr(id), Expr::Let { .. }) {
            continue;
        }
        m.for_each_operand(id, |o| {
            let o = o.index();
            last[o] = last[o].max(u);
        });
    }
    // Aliases: tuples and projections hold what they read, a variable its let-bound value.
    // Two passes in reverse reach values aliased through a chain of either.
    for _ in 0..2 {
        for u in (0..n).rev() {
            match m.expr(crate::ir::ExprId(u as u32)) {
                Expr::Tuple(fields) => {
                    for f in fields {
                        last[f.index()] = last[f.index()].max(last[u]);
                    }
                }
                Expr::Proj { tuple, .. } => {
                    last[tuple.index()] = last[tuple.index()].max(last[u]);
                }
                Expr::Let { var, value, body } => {
                    let v = m.var(*var).expr.index();
                    last[value.index()] = last[value.index()].max(last[v]);
                    last[body.index()] = last[body.index()].max(last[u]);
                }
                _ => {}
            }
        }
    }
    let mut freed = vec![0u64; n];
    let (mut live, mut peak) = (0u64, 0u64);
    for u in 0..n {
        if let Expr::Call { .. } = m.expr(crate::ir::ExprId(u as u32)) {
            let b = bytes(u);
            live = live.saturating_add(b);
            peak = peak.max(live);
            freed[last[u]] = freed[last[u]].saturating_add(b);
        }
        live = live.saturating_sub(freed[u]);
    }
    let inputs = m
        .func(func)
        .params
        .iter()
        .map(|&p| bytes(m.var(p).expr.index()))
        .fold(0, u64::saturating_add);
    Need {
        constants,
        inputs,
        peak,
    }
}

/// Where a memory limit comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Bytes.
    pub bytes: u64,
    /// What set it (`--max-memory`, `MemAvailable in /proc/meminfo`, a cgroup file).
    pub source: String,
}

/// The memory this process can still get, and where that figure comes from; `None` when
/// nothing says.
pub fn available() -> Option<Limit> {
    let mut best: Option<Limit> = meminfo_available().map(|bytes| Limit {
        bytes,
        source: "MemAvailable in /proc/meminfo".into(),
    });
    for l in cgroup_room() {
        if best.as_ref().is_none_or(|b| l.bytes < b.bytes) {
            best = Some(l);
        }
    }
    best
}

fn meminfo_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|kib| kib.saturating_mul(1024))
}

fn read_u64(path: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in the text of a cgroup's `memory.stat` (`key value` lines).
fn stat_field(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// A cgroup's working set: its usage without the inactive page cache (`inactive` of
/// `memory.stat`), which the kernel reclaims before it refuses memory. Usage as it is when
/// `memory.stat` has no such line.
fn working_set(used: u64, stat: &str, inactive: &str) -> u64 {
    used.saturating_sub(stat_field(stat, inactive).unwrap_or(0))
}

/// The room under each memory limit of the process's cgroups (and their ancestors), the
/// usage counted as the working set ([`working_set`]).
fn cgroup_room() -> Vec<Limit> {
    let mut out = Vec::new();
    let Ok(text) = std::fs::read_to_string("/proc/self/cgroup") else {
        return out;
    };
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (root, limit, usage, inactive) = if controllers.is_empty() {
            (
                "/sys/fs/cgroup",
                "memory.max",
                "memory.current",
                "inactive_file",
            )
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                "/sys/fs/cgroup/memory",
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
                "total_inactive_file",
            )
        } else {
            continue;
        };
        // The cgroup's own directory, each ancestor, and the mount's root (inside a container
        // the path may name a directory that is not mounted).
        let mut dir = std::path::PathBuf::from(root);
        dir.push(path.trim_start_matches('/'));
        let mut seen = 0;
        loop {
            if let (Some(max), Some(used)) =
                (read_u64(&dir.join(limit)), read_u64(&dir.join(usage)))
            {
                // cgroup v1 writes "no limit" as a huge number.
                if max < 1 << 60 {
                    let stat = std::fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
                    let used = working_set(used, &stat, inactive);
                    out.push(Limit {
                        bytes: max.saturating_sub(used),
                        source: format!("the cgroup limit in {}", dir.join(limit).display()),
                    });
                }
            }
            seen += 1;
            if dir.as_os_str() == root || !dir.pop() || seen > 64 {
                break;
            }
        }
    }
    out
}

/// Parses a size: bytes, or with a suffix `K`, `M`, `G` or `T` (powers of 1024, optionally
/// followed by `B` or `iB`); at least one byte.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let shift = match suffix.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("`{text}` is not a size (e.g. `512M`, `8G`)")),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size (e.g. `512M`, `8G`)"))?;
    let bytes = n
        .checked_shl(shift)
        .filter(|b| b >> shift == n)
        .ok_or_else(|| format!("`{text}` is too large"))?;
    if bytes == 0 {
        return Err(format!("`{text}` is not a size of at least one byte"));
    }
    Ok(bytes)
}

/// Refuses a model that needs more than `limit`: the message says how much it needs, of what,
/// and how much is available where.
pub fn check(need: &Need, limit: &Limit) -> Result<(), String> {
    if need.total() <= limit.bytes {
        return Ok(());
    }
    Err(format!(
        "the model needs {} (constants {}, inputs {}, intermediate tensors at their peak {}), \
         more than the {} available ({})",
        approx_bytes(need.total()),
        approx_bytes(need.constants),
        approx_bytes(need.inputs),
        approx_bytes(need.peak),
        approx_bytes(limit.bytes),
        limit.source
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page cache the kernel can reclaim is not counted against a cgroup's limit.
    #[test]
    fn the_working_set_leaves_out_inactive_page_cache() {
        let v2 = "anon 1048576\nfile 8388608\nactive_file 2097152\ninactive_file 6291456\n";
        assert_eq!(stat_field(v2, "inactive_file"), Some(6291456));
        assert_eq!(stat_field(v2, "file"), Some(8388608));
        assert_eq!(stat_field(v2, "active"), None);
        assert_eq!(
            working_set(10 << 20, v2, "inactive_file"),
            (10 << 20) - 6291456
        );
        let v1 = "cache 100\ninactive_file 7\ntotal_cache 100\ntotal_inactive_file 40\n";
        assert_eq!(working_set(1000, v1, "total_inactive_file"), 960);
        // No memory.stat, a malformed line, or more inactive than used.
        assert_eq!(working_set(1000, "", "inactive_file"), 1000);
        assert_eq!(
            working_set(1000, "inactive_file x\n", "inactive_file"),
            1000
        );
        assert_eq!(working_set(10, v2, "inactive_file"), 0);
    }

    fn load(text: &str) -> Module {
        let mut sm = crate::source::SourceMap::new();
        let f = sm.add("m.relay", text);
        crate::frontend::relay::load(&sm, f).unwrap()
    }

    #[test]
    fn a_chain_needs_two_tensors_at_a_time() {
        // Each relu reads the previous one only: at most two 4 KiB tensors live at once.
        let m = load(
            "#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(1024), float32]) {\n  \
             %0 = nn.relu(%x);\n  %1 = nn.relu(%0);\n  %2 = nn.relu(%1);\n  nn.relu(%2)\n}\n",
        );
        let n = need(&m, m.main().unwrap());
        assert_eq!(n.inputs, 4096);
        assert_eq!(n.constants, 0);
        assert_eq!(n.peak, 8192);
    }

    #[test]
    fn a_value_read_late_stays_live() {
        let m = load(
            "#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(1024), float32]) {\n  \
             %0 = nn.relu(%x);\n  %1 = nn.relu(%0);\n  %2 = nn.relu(%1);\n  add(%2, %0)\n}\n",
        );
        assert_eq!(need(&m, m.main().unwrap()).peak, 3 * 4096);
    }

    #[test]
    fn the_check_says_how_much() {
        let n = Need {
            constants: 50 << 30,
            inputs: 4,
            peak: 8,
        };
        let l = Limit {
            bytes: 1 << 30,
            source: "--max-memory".into(),
        };
        let e = check(&n, &l).unwrap_err();
        assert!(
            e.contains("50.0 GiB") && e.contains("1.0 GiB") && e.contains("--max-memory"),
            "{e}"
        );
        assert!(check(&Need::default(), &l).is_ok());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1t"), Ok(1 << 40));
        for bad in ["", "0", "-1", "1Q", "99999999999999999999", "16777216T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn this_machine_says_something() {
        // Linux has /proc/meminfo.
        let a = available().unwrap();
        assert!(a.bytes > 0, "{a:?}");
    }
}
