//! Depthwise convolutions (one input channel per group, `NCHW`) as vector code over
//! **phase planes**.
//!
//! For each image and output channel, the input channel is copied once into `sy · sx` zero-padded
//! phase planes (`sy`, `sx` the strides): phase `(py, px)` holds the padded input's rows `py,
//! py + sy, ...` and columns `px, px + sx, ...`, each plane `WQ` floats wide. Output pixel `(oy,
//! ox)` then reads tap `(ky, kx)` at padded row `oy · sy + ky · dy` and column `ox · sx + kx · dx`,
//! which is phase `((ky · dy) % sy, (kx · dx) % sx)` at the flat offset `(oy + ky · dy / sy) · WQ +
//! ox + kx · dx / sx`: one constant offset per tap. So with `p = oy · WQ + ox` the whole plane is
//! one flat loop, `acc[p] = Σ_t w_t · phase_t[p + off_t]`, written with explicit vectors (GCC
//! vector extensions, 16 lanes with AVX-512): unaligned loads at constant offsets and fused
//! multiply-adds, no shuffles, no bounds tests. The `WQ - OW` columns past each output row are
//! computed and dropped (2 of 114 on a 112-wide 3×3 stride-1 plane; a stride of 2 leaves about
//! one). Rows are done in blocks of about 1024 flat outputs, so the block of `acc` stays in L1
//! while the epilogue (bias, clip, residual add, ...) writes it out row by row as
//! `#pragma omp simd` loops.
//!
//! Against the reference interpreter the taps are summed in another order (row by row, each
//! `w · x` fused into the running sum), which changes the last bits only (`docs/native.md`,
//! "Numerics").
//!
//! [`plan`] decides whether a convolution takes this kernel; the others (many taps, strides
//! beyond 4, planes too large for the per-thread scratch) keep the direct loop of
//! [`super::gemm`].

use super::scalar::CV;
use super::Cx;
use crate::runtime::backend::native::graph::{Class, ConvGeom, NodeId};
use crate::runtime::backend::native::index::Ix;

/// Taps at most (each is one vector load and multiply-add, unrolled in the loop body).
const MAX_TAPS: usize = 49;
/// Strides at most, per axis.
const MAX_STRIDE: usize = 4;
/// Per-thread scratch at most, bytes (the phase planes and one block of results).
const MAX_SCRATCH: usize = 8 << 20;
/// Flat outputs per block (the block of results stays in L1).
const BLOCK: usize = 1024;

/// How a depthwise convolution is laid out over phase planes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Strides (rows, columns): `sy · sx` phase planes.
    pub sy: usize,
    pub sx: usize,
    /// Rows and columns of each phase plane.
    pub hq: usize,
    pub wq: usize,
    /// Floats allocated per phase plane (the flat loop reads past `hq · wq` by up to a vector
    /// and the largest tap offset; those floats are zero).
    pub plen: usize,
    /// Per tap, row-major over the window: phase index and flat offset.
    pub taps: Vec<(usize, usize)>,
    /// Output rows per block.
    pub rows: usize,
    /// Floats of the block of results.
    pub acc: usize,
}

impl Plan {
    /// Per-thread scratch in bytes.
    pub fn scratch_bytes(&self) -> usize {
        (self.sy * self.sx * self.plen + self.acc) * 4
    }
}

/// Whether depthwise convolution `g` (one input channel per group) takes the phase-plane kernel
/// with vectors of `vl` floats, and how.
pub fn plan(g: &ConvGeom, vl: usize) -> Option<Plan> {
    let depthwise = g.groups > 1 && g.c == g.groups && g.o.is_multiple_of(g.groups);
    let (sy, sx) = g.stride;
    let (dy, dx) = g.dilation;
    if !depthwise
        || g.kh * g.kw > MAX_TAPS
        || sy == 0
        || sx == 0
        || sy > MAX_STRIDE
        || sx > MAX_STRIDE
        || g.oh == 0
        || g.ow == 0
        || vl == 0
    {
        return None;
    }
    // Padded extent actually read.
    let hp = (g.oh - 1) * sy + (g.kh - 1) * dy + 1;
    let wp = (g.ow - 1) * sx + (g.kw - 1) * dx + 1;
    let hq = hp.div_ceil(sy);
    let wq = wp.div_ceil(sx);
    let mut taps = Vec::with_capacity(g.kh * g.kw);
    let mut max_off = 0;
    for ky in 0..g.kh {
        for kx in 0..g.kw {
            let (ry, rx) = (ky * dy, kx * dx);
            let phase = (ry % sy) * sx + rx % sx;
            let off = (ry / sy) * wq + rx / sx;
            max_off = max_off.max(off);
            taps.push((phase, off));
        }
    }
    let rows = (BLOCK / wq).clamp(1, g.oh);
    let acc = (rows * wq).next_multiple_of(vl) + vl;
    // The last block reads up to its flat end rounded up to a vector, plus the largest offset.
    let plen = (g.oh * wq + vl + max_off).max(hq * wq).next_multiple_of(16);
    let p = Plan {
        sy,
        sx,
        hq,
        wq,
        plen,
        taps,
        rows,
        acc,
    };
    (p.scratch_bytes() <= MAX_SCRATCH).then_some(p)
}

/// Emits depthwise convolution `a` (epilogue root `r`) of `data` by `w` over phase planes;
/// `false` (nothing emitted) when [`plan`] declines it.
pub fn nest(cx: &mut Cx<'_>, a: NodeId, r: NodeId, data: NodeId, w: NodeId, g: ConvGeom) -> bool {
    let vl = cx.isa.vl;
    let Some(p) = plan(&g, vl) else {
        return false;
    };
    if g.n * g.o == 0 {
        return true;
    }
    let (hq, wq, plen) = (p.hq, p.wq, p.plen);
    let phases = p.sy * p.sx;
    cx.line(format!(
        "/* depthwise convolution over {phases} phase planes of {hq}x{wq} */"
    ));
    let (nv, ov, ic) = super::gemm::depthwise_loops(cx, &g, "ph");
    cx.line(format!("float* restrict acc = ph + {}L;", phases * plen));

    // The phase planes: padded row `y` is row `y / sy` of the planes of phase row `y % sy`.
    let y = cx.fresh("y");
    cx.open(format!("for (long {y} = 0; {y} < {}L; {y}++)", hq * p.sy));
    let iy = cx.fresh("iy");
    cx.line(format!("const long {iy} = {y} - {}L;", g.pad.0));
    let d = cx.fresh("d");
    cx.line(format!(
        "float* restrict {d} = ph + ({y} % {}L) * {}L + ({y} / {}L) * {wq}L;",
        p.sy,
        p.sx * plen,
        p.sy
    ));
    cx.open(format!("if ({iy} < 0 || {iy} >= {}L)", g.h));
    for px in 0..p.sx {
        cx.line(format!(
            "for (long j = 0; j < {wq}L; j++) {d}[{}L + j] = 0.0f;",
            px * plen
        ));
    }
    cx.line("continue;");
    cx.close();
    for px in 0..p.sx {
        // Column `j` of phase column `px` is padded column `j · sx + px`, input column
        // `j · sx + px - pad`: inside the input for `j` in `[lo, hi)`.
        let first = g.pad.1.saturating_sub(px).div_ceil(p.sx);
        let end = (g.w + g.pad.1).saturating_sub(px).div_ceil(p.sx);
        let (lo, hi) = (first.min(wq), end.clamp(first.min(wq), wq));
        let base = px * plen;
        if lo > 0 {
            cx.line(format!(
                "for (long j = 0; j < {lo}L; j++) {d}[{base}L + j] = 0.0f;"
            ));
        }
        if hi > lo {
            let j = cx.fresh("j");
            let at = cx.mark();
            cx.open(format!("for (long {j} = {lo}L; {j} < {hi}L; {j}++)"));
            let ix = cx.fresh("ix");
            cx.line(format!(
                "const long {ix} = {j} * {}L + {};",
                p.sx,
                px as i64 - g.pad.1 as i64
            ));
            let xv = cx.val(
                data,
                &[
                    Ix::var(nv),
                    ic.clone(),
                    Ix::opaque(iy.clone(), 0, g.h as i64 - 1),
                    Ix::opaque(ix.clone(), 0, g.w as i64 - 1),
                ],
            );
            cx.line(format!(
                "{d}[{base}L + {j}] = {};",
                super::scalar::convert(&xv, Class::F)
            ));
            cx.close();
            cx.simd_at(at);
        }
        if hi < wq {
            cx.line(format!(
                "for (long j = {hi}L; j < {wq}L; j++) {d}[{base}L + j] = 0.0f;"
            ));
        }
    }
    cx.close();
    // The floats past the planes that the last vectors read.
    if plen > hq * wq {
        for ph in 0..phases {
            cx.line(format!(
                "for (long q = {}L; q < {}L; q++) ph[q] = 0.0f;",
                ph * plen + hq * wq,
                (ph + 1) * plen
            ));
        }
    }

    // The channel's taps.
    let mut wn = Vec::with_capacity(g.kh * g.kw);
    for ky in 0..g.kh {
        for kx in 0..g.kw {
            let v = cx.val(
                w,
                &[
                    Ix::var(ov),
                    Ix::konst(0),
                    Ix::konst(ky as i64),
                    Ix::konst(kx as i64),
                ],
            );
            let name = cx.fresh("wt");
            cx.line(format!(
                "const float {name} = {};",
                super::scalar::convert(&v, Class::F)
            ));
            wn.push(name);
        }
    }

    // Blocks of rows: the flat vector loop, then the epilogue row by row.
    let r0 = cx.fresh("r0");
    cx.open(format!(
        "for (long {r0} = 0; {r0} < {}L; {r0} += {}L)",
        g.oh, p.rows
    ));
    let rn = cx.fresh("rn");
    cx.line(format!(
        "const long {rn} = {oh}L - {r0} < {rows}L ? {oh}L - {r0} : {rows}L;",
        oh = g.oh,
        rows = p.rows
    ));
    cx.line(format!("const float* restrict src = ph + {r0} * {wq}L;"));
    cx.open(format!("for (long q = 0; q < {rn} * {wq}L; q += {vl}L)"));
    for (t, (&(phase, off), wt)) in p.taps.iter().zip(&wn).enumerate() {
        let load = format!("*(const vfu*)(src + q + {}L)", phase * plen + off);
        if t == 0 {
            cx.line(format!("vf s = {wt} * {load};"));
        } else {
            cx.line(format!("s += {wt} * {load};"));
        }
    }
    cx.line("*(vfu*)(acc + q) = s;");
    cx.close();
    let ry = cx.fresh("ry");
    cx.open(format!("for (long {ry} = 0; {ry} < {rn}; {ry}++)"));
    let oy = cx.fresh("oy");
    cx.line(format!("const long {oy} = {r0} + {ry};"));
    let oyv = cx.vars.fresh(oy.clone(), g.oh);
    let q = cx.fresh("ox");
    let at = cx.mark();
    cx.open(format!("for (long {q} = 0; {q} < {}L; {q}++)", g.ow));
    let qv = cx.vars.fresh(q.clone(), g.ow);
    let accv = cx.bind(CV::new(format!("acc[{ry} * {wq}L + {q}]"), Class::F));
    let coords = [Ix::var(nv), Ix::var(ov), Ix::var(oyv), Ix::var(qv)];
    cx.epilogue(a, r, accv, &coords);
    cx.close();
    cx.simd_at(at);
    cx.close();
    cx.close();
    cx.close_n(2);
    cx.per_thread = cx.per_thread.max(p.scratch_bytes() + 64);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dw(c: usize, h: usize, w: usize, k: usize, s: usize, pad: usize) -> ConvGeom {
        let oh = (h + 2 * pad - k) / s + 1;
        let ow = (w + 2 * pad - k) / s + 1;
        ConvGeom {
            n: 1,
            c,
            h,
            w,
            o: c,
            kh: k,
            kw: k,
            oh,
            ow,
            groups: c,
            stride: (s, s),
            dilation: (1, 1),
            pad: (pad, pad),
        }
    }

    #[test]
    fn mobilenet_shapes_take_the_phase_kernel() {
        for (c, h, s) in [
            (32, 112, 1),
            (96, 112, 2),
            (144, 56, 1),
            (144, 56, 2),
            (192, 28, 1),
            (384, 14, 1),
            (576, 14, 2),
            (960, 7, 1),
        ] {
            let g = dw(c, h, h, 3, s, 1);
            let p = plan(&g, 16).unwrap_or_else(|| panic!("{c}x{h} s{s}"));
            assert_eq!((p.sy, p.sx), (s, s));
            assert_eq!(p.taps.len(), 9);
            // Every read of the last vector stays inside the phase plane.
            let max_off = p.taps.iter().map(|t| t.1).max().unwrap();
            assert!(g.oh * p.wq + 16 + max_off <= p.plen);
            assert!(p.hq * p.wq <= p.plen);
        }
    }

    #[test]
    fn stride_one_taps_are_row_and_column_offsets() {
        let p = plan(&dw(8, 112, 112, 3, 1, 1), 16).unwrap();
        assert_eq!(p.wq, 114);
        assert_eq!(p.hq, 114);
        let want: Vec<(usize, usize)> = (0..3)
            .flat_map(|ky| (0..3).map(move |kx| (0, ky * 114 + kx)))
            .collect();
        assert_eq!(p.taps, want);
        assert_eq!(p.rows, 1024 / 114);
    }

    #[test]
    fn stride_two_taps_use_four_phases() {
        // 112 wide, stride 2, pad 1: padded columns 0..113 read, 57 per phase.
        let p = plan(&dw(8, 112, 112, 3, 2, 1), 16).unwrap();
        assert_eq!((p.hq, p.wq), (57, 57));
        let phases: Vec<usize> = p.taps.iter().map(|t| t.0).collect();
        assert_eq!(phases, vec![0, 1, 0, 2, 3, 2, 0, 1, 0]);
        assert_eq!(p.taps[2].1, 1);
        assert_eq!(p.taps[6].1, 57);
        assert_eq!(p.taps[8].1, 58);
    }

    #[test]
    fn other_convolutions_are_declined() {
        // Not depthwise: a plain convolution and a grouped one with 2 channels per group.
        let mut g = dw(8, 10, 10, 3, 1, 1);
        g.groups = 1;
        assert!(plan(&g, 16).is_none());
        let mut g = dw(8, 10, 10, 3, 1, 1);
        g.groups = 4;
        assert!(plan(&g, 16).is_none());
        // Too many taps, too large a stride, too large a plane.
        assert!(plan(&dw(8, 20, 20, 9, 1, 4), 16).is_none());
        assert!(plan(&dw(8, 20, 20, 3, 5, 1), 16).is_none());
        assert!(plan(&dw(2, 2000, 2000, 3, 1, 1), 16).is_none());
        // A channel multiplier of 2 is still depthwise.
        let mut g = dw(8, 10, 10, 3, 1, 1);
        g.o = 16;
        assert!(plan(&g, 16).is_some());
    }
}
