//! Pointwise convolutions (1×1 windows, one group, `NCHW`) as a GEMM over the image in place:
//! per image, `Y (O × P) = W (O × C) · X (C × P)` with `P = OH · OW` pixels, each row of `X` an
//! input channel's plane and each row of `Y` an output channel's.
//!
//! Pixels are the vector lanes: a register tile is `MR` output channels × `NR` pixels (12 × 32
//! with AVX-512: 24 accumulators of the 32 vector registers; 6 × 16 with AVX2), and each step
//! of the sum over input channels loads the two vectors of one row of `X` straight from the
//! image (unaligned loads, no packing) and broadcasts `MR` weights into fused multiply-adds.
//! The weights are packed into tiles of `MR` output channels, `[C][MR]` each, by a pack
//! function, once per call site when they are constants. The last tile has the remaining
//! channels (64 = 5 · 12 + 4) and the last panel the remaining pixels rounded up to a vector
//! (196 = 6 · 32 + 16, 4 of them used), each with a micro-kernel of its own size, so no more
//! than a vector's worth of lanes is wasted per output channel. The tile's results stay in L1
//! while the epilogue (bias, `clip`, a residual add, ...) writes each output channel's `NR`
//! pixels as one contiguous `#pragma omp simd` loop, so the stores are whole vectors into the
//! `NCHW` result, where the implicit GEMM of [`super::gemm`] (output channels in the lanes)
//! stores one float per plane.
//!
//! The last panel of pixels, when `P` is not a multiple of `NR`, is copied into a zero-padded
//! `[C][NRT]` block of the thread's scratch first (`NRT` its pixels rounded up to a vector; its
//! loads in place would read past the image). Strides above 1, padding, and inputs that are not a `float32` buffer (a fused
//! expression) are first gathered into a contiguous `[N][C][P]` copy.
//!
//! Scheduling: images × blocks of panels × blocks of channel tiles, about 16 tasks per image on
//! the pool when the convolution is large enough; each task walks its panels and, per panel,
//! its channel tiles, so the panel of `X` stays in L1/L2 while the weights stream past it.
//!
//! Against the reference interpreter the sum over input channels is in channel order, each
//! product fused into the running sum (`docs/native.md`, "Numerics").

use super::prelude::{Feature, Isa};
use super::Cx;
use crate::runtime::backend::native::graph::{Class, ConvGeom, NodeId};
use crate::runtime::backend::native::index::Ix;

/// Tasks per image a parallel convolution is cut into.
const TASKS: usize = 16;

/// The register tile of a pointwise convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Output channels per tile.
    pub mr: usize,
    /// Pixels per tile (a multiple of the vector width).
    pub nr: usize,
}

/// Whether convolution `g` takes the pointwise kernel on `isa`, and with which tile: a 1×1
/// window and one group, unless the implicit GEMM (output channels in the lanes, `isa.mr`
/// pixels a tile) would waste fewer lanes where that matters: the pointwise kernel pads the
/// pixels to whole vectors (49 pixels to 64, 196 to 208), the implicit GEMM the pixels to
/// `isa.mr` and the channels to `isa.nr`. It matters below 90 % of lanes used (planes of 7 × 7,
/// 10 × 10), and with 256 input channels or more, where the implicit GEMM's strided stores
/// of the results are a small part of the work (measured: 384 → 64 and 576 → 96 on 14 × 14
/// are 5-10 % faster as implicit GEMMs, 64 → 384 10 % slower).
pub fn plan(g: &ConvGeom, isa: Isa) -> Option<Plan> {
    let (p, o) = (g.oh * g.ow, g.o);
    if g.groups != 1
        || g.kh != 1
        || g.kw != 1
        || g.n * g.c * o * p == 0
        || isa.vl == 0
        || g.stride.0 == 0
        || g.stride.1 == 0
    {
        return None;
    }
    let pv = p.next_multiple_of(isa.vl);
    if o >= isa.vl && (10 * p < 9 * pv || (g.c >= 256 && pv > p)) {
        // Lanes used: p / pv here, p / pm · o / om there.
        let (pm, om) = (p.next_multiple_of(isa.mr), o.next_multiple_of(isa.nr));
        if o * pv > pm * om {
            return None;
        }
    }
    // 24 accumulators with 32 vector registers, 12 with 16; tiles at the edges are narrower.
    let mr = if isa.vl >= 16 { 12 } else { 6 };
    Some(Plan { mr, nr: 2 * isa.vl })
}

/// Emits pointwise convolution `a` (epilogue root `r`) of `data` by `w`; `false` (nothing
/// emitted) when [`plan`] declines it.
pub fn nest(cx: &mut Cx<'_>, a: NodeId, r: NodeId, data: NodeId, w: NodeId, g: ConvGeom) -> bool {
    let Some(Plan { mr, nr }) = plan(&g, cx.isa) else {
        return false;
    };
    let (c, o, vl) = (g.c, g.o, cx.isa.vl);
    let np_ = g.oh * g.ow;
    let tiles = o.div_ceil(mr);
    let panels = np_.div_ceil(nr);
    // The last tile's channels and the last panel's pixels in whole vectors (0: full).
    let rt = o % mr;
    let tail = np_ % nr;
    let nrt = tail.next_multiple_of(vl);
    for rows in [mr, rt] {
        for cols in [nr, nrt] {
            if rows > 0 && cols > 0 {
                cx.features.insert(Feature::Ukrs(rows, cols));
            }
        }
    }
    cx.line(format!(
        "/* pointwise convolution, {mr}x{nr} tiles of output channels x pixels */"
    ));
    let par = cx.parallel_for(2 * g.n * o * c * np_ / 16);

    // The input as [N][C][P] floats: in place, or gathered.
    let direct = match cx.buffer_of(data) {
        Some(b)
            if g.stride == (1, 1)
                && g.pad == (0, 0)
                && (g.h, g.w) == (g.oh, g.ow)
                && cx.node(data).dtype == crate::ir::DType::F32 =>
        {
            Some(b)
        }
        _ => None,
    };
    let xs = match direct {
        Some(b) => b,
        None => gather(cx, data, &g),
    };

    // The weights: tile `t` at `t · C · MR`, as [C][rows of the tile].
    let wfloats = o * c;
    let pre = super::gemm::pack_fn(cx, w, wfloats, |cx, par| {
        pack_weights(cx, w, &g, mr, "D", par)
    });
    let wp = match pre {
        Some(j) => format!("((const float*)P[{j}])"),
        None => {
            let name = cx.fresh("Wq");
            super::gemm::shared_scratch(cx, "float", &name, wfloats);
            pack_weights(cx, w, &g, mr, &name, par);
            name
        }
    };

    // Tasks: blocks of panels times blocks of channel tiles.
    let (npb, nob) = if !par {
        (1, 1)
    } else if panels >= 2 * TASKS {
        (TASKS, 1)
    } else {
        let nob = tiles.min(TASKS.div_ceil(panels));
        (TASKS.div_ceil(nob).min(panels), nob)
    };
    // From 2 · TASKS panels on, TASKS blocks of panels whose sizes differ by one at most (49
    // panels of a 28 × 28 plane: 24 and 25 per thread, where blocks of 4 gave 28 and 21;
    // measured 4-7 % faster); below, blocks of whole `ceil(panels / npb)` panels, the last
    // one short (13 panels of a 14 × 14 plane as 7 blocks of 2 and one: measured 15-20 %
    // faster than the even cut with 384 and 576 outputs).
    let even = panels >= 2 * TASKS;
    let ppb = panels.div_ceil(npb);
    let npb = if even { npb } else { panels.div_ceil(ppb) };
    let opb = tiles.div_ceil(nob);
    let nob = tiles.div_ceil(opb);
    let (bn, pb, ob) = (cx.fresh("bb"), cx.fresh("pb"), cx.fresh("ob"));
    let bv = cx.vars.fresh(bn.clone(), g.n);
    if par {
        cx.omp(3);
    }
    cx.open(format!("for (long {bn} = 0; {bn} < {}L; {bn}++)", g.n));
    cx.open(format!("for (long {pb} = 0; {pb} < {npb}L; {pb}++)"));
    cx.open(format!("for (long {ob} = 0; {ob} < {nob}L; {ob}++)"));
    cx.line(format!(
        "float ct[{}] __attribute__((aligned(64)));",
        mr * nr
    ));
    let xb = cx.fresh("xb");
    cx.line(format!("const float* {xb} = {xs} + {bn} * {}L;", c * np_));
    if tail != 0 {
        super::gemm::thread_scratch(cx, "xt", 0);
        cx.per_thread = cx.per_thread.max(c * nrt * 4 + 64);
    }
    let (pn, t) = (cx.fresh("pn"), cx.fresh("t"));
    if even {
        cx.open_block(&pn, &pb, panels, npb);
    } else {
        cx.open(format!(
            "for (long {pn} = {pb} * {ppb}L; {pn} < ({pb} + 1) * {ppb}L && {pn} < {panels}L; {pn}++)"
        ));
    }
    let (p0, pl) = (cx.fresh("p0"), cx.fresh("pl"));
    cx.line(format!("const long {p0} = {pn} * {nr}L;"));
    cx.line(format!(
        "const long {pl} = {np_}L - {p0} < {nr}L ? {np_}L - {p0} : {nr}L;"
    ));
    let xp = cx.fresh("xp");
    cx.line(format!("const float* {xp} = {xb} + {p0};"));
    if tail != 0 {
        // The last panel, its pixels zero-padded to whole vectors.
        cx.open(format!("if ({pl} < {nr}L)"));
        cx.open(format!("for (long k = 0; k < {c}L; k++)"));
        cx.line(format!(
            "for (long j = 0; j < {tail}L; j++) xt[k * {nrt}L + j] = {xp}[k * {np_}L + j];"
        ));
        if nrt > tail {
            cx.line(format!(
                "for (long j = {tail}L; j < {nrt}L; j++) xt[k * {nrt}L + j] = 0.0f;"
            ));
        }
        cx.close();
        cx.line(format!("{xp} = xt;"));
        cx.close();
    }
    cx.open(format!(
        "for (long {t} = {ob} * {opb}L; {t} < ({ob} + 1) * {opb}L && {t} < {tiles}L; {t}++)"
    ));
    let call = |rows: usize, cols: usize, ld: usize| {
        format!(
            "ukrs_{rows}x{cols}({c}L, {wp} + {t} * {}L, {xp}, {ld}L, ct, {nr}L);",
            c * mr
        )
    };
    let calls = |rows: usize| {
        if tail == 0 {
            call(rows, nr, np_)
        } else {
            format!(
                "if ({pl} < {nr}L) {} else {}",
                call(rows, nrt, nrt),
                call(rows, nr, np_)
            )
        }
    };
    if rt == 0 {
        cx.line(calls(mr));
    } else {
        cx.open(format!("if ({t} == {}L)", tiles - 1));
        cx.line(calls(rt));
        cx.close();
        cx.open("else");
        cx.line(calls(mr));
        cx.close();
    }
    // Epilogue: per output channel, its pixels contiguous in the tile and in the result.
    let (o0, ol) = (cx.fresh("o0"), cx.fresh("ol"));
    cx.line(format!("const long {o0} = {t} * {mr}L;"));
    cx.line(format!(
        "const long {ol} = {o}L - {o0} < {mr}L ? {o}L - {o0} : {mr}L;"
    ));
    super::gemm::tile_epilogue(
        cx,
        (a, r),
        ("ct", nr),
        (&o0, &ol, o),
        (&p0, &pl, np_),
        |cx, ocv, pv| {
            vec![
                Ix::var(bv),
                Ix::var(ocv),
                Ix::var(pv).div(g.ow as i64, &cx.vars),
                Ix::var(pv).rem(g.ow as i64, &cx.vars),
            ]
        },
    );
    cx.close_n(5);
    true
}

/// Gathers the pixels the convolution reads (`data[n][c][oy · sy - pt][ox · sx - pl]`, zero in
/// the padding) into a `[N][C][P]` block of the shared scratch; returns its name.
fn gather(cx: &mut Cx<'_>, data: NodeId, g: &ConvGeom) -> String {
    let np_ = g.oh * g.ow;
    let name = cx.fresh("Xg");
    super::gemm::shared_scratch(cx, "float", &name, g.n * g.c * np_);
    let (nn, cc, y, x) = (cx.fresh("n"), cx.fresh("c"), cx.fresh("y"), cx.fresh("x"));
    let nv = cx.vars.fresh(nn.clone(), g.n);
    let cv = cx.vars.fresh(cc.clone(), g.c);
    if cx.parallel_for(g.n * g.c * np_) {
        cx.omp(2);
    }
    cx.open(format!("for (long {nn} = 0; {nn} < {}L; {nn}++)", g.n));
    cx.open(format!("for (long {cc} = 0; {cc} < {}L; {cc}++)", g.c));
    cx.open(format!("for (long {y} = 0; {y} < {}L; {y}++)", g.oh));
    let yv = cx.vars.fresh(y.clone(), g.oh);
    let dst = format!(
        "{name}[(({nn} * {}L + {cc}) * {}L + {y}) * {}L + {x}]",
        g.c, g.oh, g.ow
    );
    let at = cx.mark();
    cx.open(format!("for (long {x} = 0; {x} < {}L; {x}++)", g.ow));
    let xv = cx.vars.fresh(x.clone(), g.ow);
    let inside = (g.oh - 1) * g.stride.0 < g.h && (g.ow - 1) * g.stride.1 < g.w;
    if g.pad == (0, 0) && inside {
        // Every pixel read is inside the input: affine coordinates.
        let v = cx.val(
            data,
            &[
                Ix::var(nv),
                Ix::var(cv),
                Ix::var(yv).scale(g.stride.0 as i64),
                Ix::var(xv).scale(g.stride.1 as i64),
            ],
        );
        cx.line(format!("{dst} = {};", super::scalar::convert(&v, Class::F)));
    } else {
        let (iy, ix) = (cx.fresh("iy"), cx.fresh("ix"));
        cx.line(format!(
            "const long {iy} = {y} * {}L - {}L;",
            g.stride.0, g.pad.0
        ));
        cx.line(format!(
            "const long {ix} = {x} * {}L - {}L;",
            g.stride.1, g.pad.1
        ));
        let v = super::gemm::padded_read(cx, data, g, (nv, cv), (&iy, &ix));
        cx.line(format!("{dst} = {v};"));
    }
    cx.close();
    cx.simd_at(at);
    cx.close_n(3);
    name
}

/// Packs the weights `w[o][c][0][0]` into `dst`: tile `t` (output channels `t · MR ..`) at
/// `t · C · MR`, as `[C][rows]` (`rows` = `MR`, fewer in the last tile).
fn pack_weights(cx: &mut Cx<'_>, w: NodeId, g: &ConvGeom, mr: usize, dst: &str, par: bool) {
    let tiles = g.o.div_ceil(mr);
    let last = g.o - (tiles - 1) * mr;
    let c = g.c;
    let (t, i, k) = (cx.fresh("wt"), cx.fresh("wi"), cx.fresh("wk"));
    if par {
        cx.omp(1);
    }
    cx.open(format!("for (long {t} = 0; {t} < {tiles}L; {t}++)"));
    let rows = cx.fresh("wr");
    cx.line(format!(
        "const long {rows} = {t} == {}L ? {last}L : {mr}L;",
        tiles - 1
    ));
    cx.open(format!("for (long {i} = 0; {i} < {rows}; {i}++)"));
    let oc = cx.fresh("oc");
    cx.line(format!("const long {oc} = {t} * {mr}L + {i};"));
    let ov = cx.vars.fresh(oc.clone(), g.o);
    cx.open(format!("for (long {k} = 0; {k} < {c}L; {k}++)"));
    let kv = cx.vars.fresh(k.clone(), c);
    let v = cx.val(w, &[Ix::var(ov), Ix::var(kv), Ix::konst(0), Ix::konst(0)]);
    cx.line(format!(
        "{dst}[{t} * {}L + {k} * {rows} + {i}] = {};",
        c * mr,
        super::scalar::convert(&v, Class::F)
    ));
    cx.close();
    cx.close();
    cx.close();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pw(c: usize, o: usize, hw: usize, s: usize) -> ConvGeom {
        let ohw = (hw - 1) / s + 1;
        ConvGeom {
            n: 1,
            c,
            h: hw,
            w: hw,
            o,
            kh: 1,
            kw: 1,
            oh: ohw,
            ow: ohw,
            groups: 1,
            stride: (s, s),
            dilation: (1, 1),
            pad: (0, 0),
        }
    }

    const AVX512: Isa = Isa {
        vl: 16,
        mr: 8,
        nr: 32,
    };

    #[test]
    fn mobilenet_and_resnet_planes_take_the_pointwise_kernel() {
        for (c, o, hw, s) in [
            (32, 16, 112, 1),
            (16, 96, 112, 1),
            (24, 144, 56, 1),
            (144, 24, 56, 1),
            (32, 192, 28, 1),
            (64, 384, 14, 1),
            (64, 256, 56, 1),
            (256, 512, 56, 2),
            (1024, 512, 28, 1),
        ] {
            assert_eq!(
                plan(&pw(c, o, hw, s), AVX512),
                Some(Plan { mr: 12, nr: 32 }),
                "{c}-{o} {hw}x{hw} s{s}"
            );
        }
    }

    #[test]
    fn small_planes_keep_the_implicit_gemm_where_it_wastes_less() {
        // 49 pixels fill 49 of 64 lanes here, 49 of 56 rows there (channels a multiple of 32).
        assert_eq!(plan(&pw(960, 160, 7, 1), AVX512), None);
        assert_eq!(plan(&pw(2048, 512, 7, 1), AVX512), None);
        assert_eq!(plan(&pw(1024, 2048, 14, 2), AVX512), None);
        // 196 pixels fill 196 of 208 lanes here, 196 of 200 rows there: with many input
        // channels the implicit GEMM, with few the pointwise kernel.
        assert_eq!(plan(&pw(384, 64, 14, 1), AVX512), None);
        assert!(plan(&pw(192, 64, 14, 1), AVX512).is_some());
        // With 8 output channels the implicit GEMM does not apply.
        assert!(plan(&pw(960, 8, 7, 1), AVX512).is_some());
        // 24 channels fill 24 of 32 lanes there: 0.66 against 0.77.
        assert!(plan(&pw(960, 24, 7, 1), AVX512).is_some());
    }

    #[test]
    fn other_convolutions_are_declined() {
        let mut g = pw(16, 16, 14, 1);
        g.kh = 3;
        g.kw = 3;
        assert!(plan(&g, AVX512).is_none());
        let mut g = pw(16, 16, 14, 1);
        g.groups = 2;
        assert!(plan(&g, AVX512).is_none());
        // A 6 x 6 plane: 36 of 48 lanes against 36 of 40 rows.
        assert!(plan(&pw(16, 64, 6, 1), AVX512).is_none());
        assert!(plan(&pw(0, 16, 14, 1), AVX512).is_none());
    }
}
