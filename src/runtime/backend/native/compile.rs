//! The system C compiler: its identity (for cache keys), the flags, and one invocation with a
//! time limit.
//!
//! The compiler is `$CC` when set (split at spaces, so `CC="ccache gcc"` works), else `cc`.
//! Every translation unit is compiled with the flags of a [`FlagSet`] and linked with [`LIBS`]
//! into a shared library. The default set, [`FLAGS`], keeps IEEE semantics:
//!
//! * `-O3 -march=native`: vectorisation for this machine (AVX-512 here);
//! * `-fno-math-errno -fno-trapping-math`: math functions need not set `errno` and floating
//!   point operations may be evaluated speculatively; neither changes a computed value;
//! * `-ffp-contract=fast` (GCC's default for GNU C, written out): `a * b + c` may become one
//!   fused multiply-add, rounded once (the GEMM micro-kernels depend on it);
//! * `-fopenmp`: the outer loops of large kernels run on libgomp's pool, the one oneDNN uses,
//!   and `#pragma omp simd` / `declare simd` work: reductions written with `#pragma omp simd
//!   reduction` may be reassociated, and the prelude declares glibc's vector math (`libmvec`)
//!   variants of `expf`, `logf`, `erff`, `tanhf` and `powf` so that loops calling them are
//!   vectorised (docs/native.md, "Numerics");
//! * `-fwrapv`: signed integer arithmetic wraps, as the reference interpreter's does;
//! * `-shared -fPIC`, and `-lmvec -lm` so that the library names the vector math it calls.
//!
//! No reciprocal approximations, no finite-math or no-signed-zeros assumptions, and no
//! `-ffast-math`: a shared object linked with `-ffast-math` also gets start-up code
//! (`crtfastmath.o`) that sets flush-to-zero and denormals-are-zero in the thread loading it.
//!
//! `COLLAGE_NATIVE_FLAGS=fast-math` selects the previous set, [`FAST_MATH_FLAGS`], to measure
//! the two side by side; the flags are part of every kernel's cache key, so the two sets never
//! share cached kernels.

use crate::util::process::run;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The default compiler flags: IEEE arithmetic (part of every cache key).
pub const FLAGS: &[&str] = &[
    "-O3",
    "-march=native",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=fast",
    "-fopenmp",
    "-fwrapv",
    "-shared",
    "-fPIC",
];

/// The previous flags, with `-ffast-math` (`COLLAGE_NATIVE_FLAGS=fast-math`): reciprocal
/// divisions, finite-math and no-signed-zeros assumptions, reassociation everywhere, and
/// flush-to-zero start-up code. For measurements only.
pub const FAST_MATH_FLAGS: &[&str] = &[
    "-O3",
    "-march=native",
    "-ffast-math",
    "-fopenmp",
    "-fwrapv",
    "-shared",
    "-fPIC",
];

/// The environment variable choosing the [`FlagSet`].
pub const FLAGS_ENV: &str = "COLLAGE_NATIVE_FLAGS";

/// Which flags kernels are compiled with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FlagSet {
    /// [`FLAGS`] (`COLLAGE_NATIVE_FLAGS` unset, empty or `ieee`).
    #[default]
    Ieee,
    /// [`FAST_MATH_FLAGS`] (`COLLAGE_NATIVE_FLAGS=fast-math`).
    FastMath,
}

impl FlagSet {
    /// The set a value of `COLLAGE_NATIVE_FLAGS` names; the error says what is accepted.
    pub fn parse(value: &str) -> Result<FlagSet, String> {
        match value.trim() {
            "" | "ieee" => Ok(FlagSet::Ieee),
            "fast-math" => Ok(FlagSet::FastMath),
            v => Err(format!(
                "`{FLAGS_ENV}={v}` names no flag set (`ieee`, the default, or `fast-math`)"
            )),
        }
    }

    /// The set `$COLLAGE_NATIVE_FLAGS` names.
    pub fn from_env() -> Result<FlagSet, String> {
        match std::env::var(FLAGS_ENV) {
            Ok(v) => FlagSet::parse(&v),
            Err(std::env::VarError::NotPresent) => Ok(FlagSet::Ieee),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(format!("`{FLAGS_ENV}` is not valid UTF-8"))
            }
        }
    }

    /// The compiler flags of this set.
    pub fn flags(self) -> &'static [&'static str] {
        match self {
            FlagSet::Ieee => FLAGS,
            FlagSet::FastMath => FAST_MATH_FLAGS,
        }
    }
}

/// Libraries linked after the source.
pub const LIBS: &[&str] = &["-lmvec", "-lm"];

/// The default time limit of one compiler run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// A C compiler that answered `--version`.
#[derive(Clone, Debug)]
pub struct Compiler {
    /// The program and its leading arguments.
    pub command: Vec<String>,
    /// The first line of `--version`, for reports.
    pub version: String,
    /// The whole `--version` output, for cache keys.
    pub identity: String,
    /// The flags every compilation uses (`$COLLAGE_NATIVE_FLAGS`).
    pub flags: FlagSet,
}

/// The compiler command: `$CC` or `cc`.
pub fn command_from_env() -> Vec<String> {
    let cc = std::env::var("CC").unwrap_or_default();
    let parts: Vec<String> = cc.split_whitespace().map(str::to_string).collect();
    if parts.is_empty() {
        vec!["cc".to_string()]
    } else {
        parts
    }
}

/// Characters of one line of a compiler's output quoted in a message.
const LINE: usize = 300;

/// `line` cut to [`LINE`] characters.
fn cut(line: &str) -> String {
    match line.char_indices().nth(LINE) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line.to_string(),
    }
}

impl Compiler {
    /// Asks `command --version`; an error says why the compiler cannot be used (or that
    /// `$COLLAGE_NATIVE_FLAGS` names no flag set).
    pub fn probe(command: Vec<String>, timeout: Duration) -> Result<Compiler, String> {
        let flags = FlagSet::from_env()?;
        let name = command.join(" ");
        let mut cmd = Command::new(&command[0]);
        cmd.args(&command[1..]).arg("--version");
        let out = run(&mut cmd, timeout).map_err(|e| format!("the C compiler `{name}` {e}"))?;
        let version = cut(out.stdout.lines().next().unwrap_or("").trim());
        if version.is_empty() {
            return Err(format!(
                "the C compiler `{name}` printed no version (`{name} --version`)"
            ));
        }
        Ok(Compiler {
            command,
            version,
            identity: out.stdout,
            flags,
        })
    }

    /// Compiles `src` into the shared library `out`. Errors carry the first lines of the
    /// compiler's messages (each cut to a few hundred characters).
    pub fn compile(&self, src: &Path, out: &Path, timeout: Duration) -> Result<(), String> {
        let name = self.command.join(" ");
        let mut cmd = Command::new(&self.command[0]);
        cmd.args(&self.command[1..])
            .args(self.flags.flags())
            .arg("-o")
            .arg(out)
            .arg(src)
            .args(LIBS);
        match run(&mut cmd, timeout) {
            Ok(_) => Ok(()),
            Err(e) => {
                let first: Vec<String> = e
                    .stderr
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .take(3)
                    .map(cut)
                    .collect();
                if first.is_empty() {
                    Err(format!("the C compiler `{name}` {}", e.why))
                } else {
                    Err(format!(
                        "the C compiler `{name}` {}: {}",
                        e.why,
                        first.join(" / ")
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut() {
        assert_eq!(cut(&"z".repeat(1000)).len(), LINE + 3);
    }

    #[test]
    fn flag_sets_by_name() {
        assert_eq!(FlagSet::parse(""), Ok(FlagSet::Ieee));
        assert_eq!(FlagSet::parse("ieee"), Ok(FlagSet::Ieee));
        assert_eq!(FlagSet::parse(" fast-math "), Ok(FlagSet::FastMath));
        let e = FlagSet::parse("fastmath").unwrap_err();
        assert!(
            e.contains("COLLAGE_NATIVE_FLAGS=fastmath") && e.contains("fast-math"),
            "{e}"
        );
        // The default set has IEEE semantics; the other is the previous -ffast-math set.
        for bad in [
            "-ffast-math",
            "-ffinite-math-only",
            "-freciprocal-math",
            "-Ofast",
        ] {
            assert!(!FlagSet::Ieee.flags().contains(&bad), "{bad}");
        }
        assert!(FlagSet::FastMath.flags().contains(&"-ffast-math"));
        assert_ne!(FlagSet::Ieee.flags(), FlagSet::FastMath.flags());
    }
}
