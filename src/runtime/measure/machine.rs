//! The machine a measurement was made on: its CPU model and instruction set, from
//! `/proc/cpuinfo`. Measurements are only reused on a machine with the same identity.

/// What identifies this machine's CPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// The CPU model (`model name`, else `Processor`/`cpu model`, else `unknown`).
    pub model: String,
    /// The instruction set flags (`flags` on x86, `Features` on Arm), sorted, space-separated.
    pub flags: String,
    /// Logical CPUs listed.
    pub cpus: usize,
}

impl Machine {
    /// This machine (an `unknown` model and no flags where `/proc/cpuinfo` cannot be read).
    pub fn detect() -> Machine {
        let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let mut m = Machine::parse(&text);
        if m.cpus == 0 {
            m.cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        }
        m
    }

    /// Reads the text of `/proc/cpuinfo`: the first processor's model and flags.
    pub fn parse(text: &str) -> Machine {
        let mut model: Option<String> = None;
        let mut flags: Option<String> = None;
        let mut cpus = 0;
        for line in text.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let (k, v) = (k.trim(), v.trim());
            match k {
                "processor" => cpus += 1,
                "model name" | "Processor" | "cpu model" | "cpu"
                    if model.is_none() && !v.is_empty() =>
                {
                    model = Some(v.split_whitespace().collect::<Vec<_>>().join(" "));
                }
                "flags" | "Features" if flags.is_none() => {
                    let mut f: Vec<&str> = v.split_whitespace().collect();
                    f.sort_unstable();
                    f.dedup();
                    flags = Some(f.join(" "));
                }
                _ => {}
            }
        }
        Machine {
            model: model.unwrap_or_else(|| "unknown".to_string()),
            flags: flags.unwrap_or_default(),
            cpus,
        }
    }

    /// The identity used in cache keys: the model and a hash of the flags
    /// (`AMD EPYC 9R14 [isa 1f2e3d4c5b6a7988]`).
    pub fn id(&self) -> String {
        format!(
            "{} [isa {}]",
            self.model,
            &hash_hex(self.flags.as_bytes())[..16]
        )
    }
}

/// 128-bit FNV-1a of `bytes`, as 32 hex digits.
pub fn hash_hex(bytes: &[u8]) -> String {
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for &b in bytes {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000000001000000000000000000013B);
    }
    format!("{h:032x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC  9R14 96-Core Processor\n\
flags\t\t: fpu vme avx512f sse avx2\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 9R14 96-Core Processor\n\
flags\t\t: fpu vme avx512f sse avx2\n";

    #[test]
    fn cpuinfo_is_read() {
        let m = Machine::parse(X86);
        assert_eq!(m.model, "AMD EPYC 9R14 96-Core Processor");
        assert_eq!(m.flags, "avx2 avx512f fpu sse vme");
        assert_eq!(m.cpus, 2);
        // The flags' order does not matter; their set does.
        let reordered = X86.replace("fpu vme avx512f sse avx2", "avx2 sse avx512f vme fpu");
        assert_eq!(Machine::parse(&reordered).id(), m.id());
        let other = X86.replace("avx512f ", "");
        assert_ne!(Machine::parse(&other).id(), m.id());
        assert!(m.id().starts_with("AMD EPYC 9R14 96-Core Processor [isa "));
    }

    #[test]
    fn arm_and_nothing() {
        let m = Machine::parse("processor : 0\nFeatures : fp asimd\nCPU part : 0xd0c\n");
        assert_eq!(m.flags, "asimd fp");
        assert_eq!(m.model, "unknown");
        let m = Machine::parse("");
        assert_eq!(
            (m.model.as_str(), m.flags.as_str(), m.cpus),
            ("unknown", "", 0)
        );
    }
}
