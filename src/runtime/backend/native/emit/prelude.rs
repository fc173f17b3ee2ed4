//! The C text every translation unit starts with: headers, the vector math declarations,
//! conversions, and the register-blocked GEMM micro-kernels the kernels of one unit need.
//!
//! The vector math declarations (`#pragma omp declare simd notinbranch` on `expf`, `logf`,
//! `erff`, `tanhf`, `powf`) are glibc's own for `-ffast-math` builds, written out because the
//! kernels are compiled with IEEE semantics: GCC then calls `libmvec`'s variants in vectorised
//! loops (scalar `libm` in loop remainders). glibc states a maximum error of 4 ulps for them
//! (docs/native.md, "Numerics").
//!
//! A micro-kernel computes an `MR × NR` tile of `C = A · B` over the whole `K` from packed
//! operands: `A` as `[K][MR]` (one column of the tile's rows per step) and `B` as `[K][NR]` (one
//! row of the tile's panel per step). It keeps the tile in `MR × NR/VL` vector accumulators
//! (GCC vector extensions, `VL` floats each; AVX-512 gives 16) and writes it to a small array
//! for the epilogue. Every step loads `NR/VL` vectors of `B` and broadcasts `MR` scalars of `A`
//! into fused multiply-adds.

use std::collections::BTreeSet;
use std::fmt::Write as _;

/// The vector shape of this machine's generated code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Isa {
    /// Floats per vector register (16 with AVX-512, 8 with AVX, 4 otherwise).
    pub vl: usize,
    /// Rows of the GEMM register tile.
    pub mr: usize,
    /// Columns of the GEMM register tile (a multiple of `vl`).
    pub nr: usize,
}

impl Isa {
    /// The vector shape of the machine running this process.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Isa {
                    vl: 16,
                    mr: 8,
                    nr: 32,
                };
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Isa {
                    vl: 8,
                    mr: 6,
                    nr: 16,
                };
            }
        }
        Isa {
            vl: 4,
            mr: 4,
            nr: 8,
        }
    }
}

/// Parts of the prelude a kernel needs beyond the always-present helpers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// The `mr × nr` micro-kernel.
    Ukr(usize, usize),
    /// The `mr × nr` indirect micro-kernel (rows of `A` read through pointers and offsets).
    Ukri(usize, usize),
    /// The `mr × nr` micro-kernel whose `B` is read in place, rows `ldb` floats apart, and
    /// whose tile is written with rows `ldc` floats apart (pointwise convolutions: `B` is the
    /// input image, pixels contiguous; the narrower tiles at the edges share one tile buffer).
    Ukrs(usize, usize),
}

const HEAD: &str = r#"#include <stdint.h>
#include <stddef.h>
#include <math.h>
#include <string.h>
#include <omp.h>

/* glibc's vector math (libmvec) declares its SIMD variants only under -ffast-math; the
   kernels are compiled without it, so they are declared here (the same declarations, so
   the same names and ABI: _ZGVeN16v_expf, _ZGVdN8v_expf, ...). */
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float logf(float);
#pragma omp declare simd notinbranch
float erff(float);
#pragma omp declare simd notinbranch
float tanhf(float);
#pragma omp declare simd notinbranch
float powf(float, float);

static inline float bf16_f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t f_bf16(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline int f_isnan(float f) { uint32_t u; memcpy(&u, &f, 4); return (u & 0x7fffffffu) > 0x7f800000u; }
static inline int d_isnan(double f) { uint64_t u; memcpy(&u, &f, 8); return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }
static inline int64_t f2i(float f) {
  if (f_isnan(f)) return 0;
  if (f >= 9.2233720e18f) return INT64_MAX;
  if (f <= -9.2233720e18f) return INT64_MIN;
  return (int64_t)f;
}
static inline int64_t d2i(double f) {
  if (d_isnan(f)) return 0;
  if (f >= 9.2233720368547758e18) return INT64_MAX;
  if (f <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)f;
}
static inline uint64_t d2u(double f) {
  if (d_isnan(f) || f <= 0.0) return 0;
  if (f >= 1.8446744073709552e19) return UINT64_MAX;
  return (uint64_t)f;
}
static inline long clampl(long x, long lo, long hi) { return x < lo ? lo : (x > hi ? hi : x); }
static inline long wrapl(long x, long n) { long r = x % n; return r < 0 ? r + n : r; }
static inline long reflectl(long x, long n) {
  if (n == 1) return 0;
  long p = 2 * (n - 1), r = x % p;
  if (r < 0) r += p;
  return r < n ? r : p - r;
}
"#;

/// The prelude with the given features (in a fixed order).
pub fn prelude(isa: Isa, features: &BTreeSet<Feature>) -> String {
    let mut s = String::from(HEAD);
    let _ = writeln!(
        s,
        "typedef float vf __attribute__((vector_size({})));",
        isa.vl * 4
    );
    let _ = writeln!(
        s,
        "typedef float vfu __attribute__((vector_size({}), aligned(4)));",
        isa.vl * 4
    );
    for f in features {
        match *f {
            Feature::Ukr(mr, nr) => ukr(&mut s, isa, mr, nr),
            Feature::Ukri(mr, nr) => ukri(&mut s, isa, mr, nr),
            Feature::Ukrs(mr, nr) => micro_kernel(&mut s, isa, mr, nr, Mode::Strided),
        }
    }
    s
}

/// The `mr × nr` micro-kernel: `C[mr][nr] = Σ_k A[k][mr] ⊗ B[k][nr]`.
fn ukr(s: &mut String, isa: Isa, mr: usize, nr: usize) {
    micro_kernel(s, isa, mr, nr, Mode::Packed)
}

/// The `mr × nr` indirect micro-kernel of implicit-GEMM convolutions:
/// `C[i][nr] = Σ_k X[i][off[k]] · B[k][nr]`, row `i` of `A` being the input pixels under the taps
/// of output pixel `i` (`X[i]` points at its window, `off[k]` is tap `k`'s offset).
fn ukri(s: &mut String, isa: Isa, mr: usize, nr: usize) {
    micro_kernel(s, isa, mr, nr, Mode::Indirect)
}

/// How a micro-kernel reads its operands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `A` and `B` packed.
    Packed,
    /// `A` through row pointers and tap offsets, `B` packed.
    Indirect,
    /// `A` packed, `B` in place with rows `ldb` floats apart (unaligned vector loads), `C`
    /// with rows `ldc` floats apart.
    Strided,
}

/// A micro-kernel: `mr × nr / vl` vector accumulators, one broadcast element of `A` and `nr /
/// vl` vectors of `B` per step of `k`. `A` is packed (`A[k * mr + i]`) or read through row
/// pointers and tap offsets ([`Mode::Indirect`]); `B` is packed (`B[k * nr + j]`) or read in
/// place (`B[k * ldb + j]`, [`Mode::Strided`], which also writes `C` with rows `ldc` apart).
fn micro_kernel(s: &mut String, isa: Isa, mr: usize, nr: usize, mode: Mode) {
    let nv = nr / isa.vl;
    let vl = isa.vl;
    let indirect = mode == Mode::Indirect;
    match mode {
        Mode::Indirect => {
            let _ = writeln!(
                s,
                "static inline void ukri_{mr}x{nr}(long K, const float* const* restrict X, const int* restrict off, const float* restrict B, float* restrict C) {{"
            );
        }
        Mode::Packed => {
            let _ = writeln!(
                s,
                "static inline void ukr_{mr}x{nr}(long K, const float* restrict A, const float* restrict B, float* restrict C) {{"
            );
        }
        Mode::Strided => {
            let _ = writeln!(
                s,
                "static inline void ukrs_{mr}x{nr}(long K, const float* restrict A, const float* restrict B, long ldb, float* restrict C, long ldc) {{"
            );
        }
    }
    for i in 0..mr {
        if indirect {
            let _ = writeln!(s, "  const float* restrict x{i} = X[{i}];");
        }
        for v in 0..nv {
            let _ = writeln!(s, "  vf c{i}_{v} = {{0}};");
        }
    }
    let _ = writeln!(s, "  for (long k = 0; k < K; k++) {{");
    if indirect {
        let _ = writeln!(s, "    const long o = off[k];");
    }
    let row = if mode == Mode::Strided {
        "ldb".to_string()
    } else {
        nr.to_string()
    };
    for v in 0..nv {
        let _ = writeln!(
            s,
            "    const vf b{v} = *(const vfu*)(B + k * {row} + {});",
            v * vl
        );
    }
    for i in 0..mr {
        if indirect {
            let _ = writeln!(s, "    {{ const float a = x{i}[o];");
        } else {
            let _ = writeln!(s, "    {{ const float a = A[k * {mr} + {i}];");
        }
        for v in 0..nv {
            let _ = writeln!(s, "      c{i}_{v} += a * b{v};");
        }
        let _ = writeln!(s, "    }}");
    }
    let _ = writeln!(s, "  }}");
    for i in 0..mr {
        for v in 0..nv {
            if mode == Mode::Strided {
                let _ = writeln!(s, "  *(vfu*)(C + {i} * ldc + {}) = c{i}_{v};", v * vl);
            } else {
                let _ = writeln!(s, "  *(vfu*)(C + {}) = c{i}_{v};", i * nr + v * vl);
            }
        }
    }
    let _ = writeln!(s, "}}");
}
