//! Matrix products: `nn.dense`, `nn.batch_matmul` and `nn.conv2d`, as packed, register-blocked
//! GEMMs with the epilogue applied to each output tile while it is hot; depthwise convolutions
//! over phase planes ([`super::depthwise`]), or, where that declines, as a direct loop;
//! pointwise (1×1) convolutions with pixels in the lanes ([`super::pointwise`]) where that
//! wastes no more lanes than the implicit GEMM here.
//!
//! Every product is a batch of `C[b] (M × N) = A[b] (M × K) · B[b] (K × N)`:
//!
//! | operator | batch | A | B | C |
//! |---|---|---|---|---|
//! | `nn.dense` | 1 | data rows | weightᵀ | result rows |
//! | `nn.batch_matmul` | batch | `x[b]` (or `x[b]ᵀ`) | `y[b]` (or `y[b]ᵀ`) | `out[b]` |
//! | `nn.conv2d` | images × groups | the group's weights `[O/g, C/g·KH·KW]` | im2col of the image | `out[n, group channels]` as `[O/g, OH·OW]` |
//!
//! Operands are packed before the micro-kernel runs: `A` into `[M/MR][K][MR]` row tiles, `B`
//! into `[N/NR][K][NR]` column panels, both padded with zeros, reading them through the value
//! emitter (so an operand may be any fused expression: a layout change, a pad, a transpose).
//! A constant operand whose expression reads only kernel arguments (the weights of a dense
//! layer or a convolution) is packed by a separate `KSYM_pack<j>` function that the backend
//! calls once, when the kernel is prepared for a call site whose argument is constant.
//!
//! Scheduling: with a batch of at least 4 each GEMM of the batch is one task (packing its own
//! operands in per-thread scratch); otherwise the result is cut into blocks of `MC` rows (the
//! packed rows of `A` stay in L2; the blocks hold equal numbers of tiles) and chunks of panels,
//! enough tasks to share, chunks outermost so that the pool's static schedule hands each
//! thread whole chunks, and a dynamic `B` (im2col) is packed in parallel first, as is a dynamic
//! `A` whose row blocks more than one chunk reads (else each task packs its own). Each task walks
//! its panels and, for each, its row tiles: the panel stays in L1/L2 while the tiles stream
//! past it. A constant `B` whose chunks would not stay in L3 from one block of rows to the next
//! (GPT-2's output projection, 154 MB) gets bigger blocks, so that it is read once per call.

use super::scalar::CV;
use super::{prelude::Feature, Cx};
use crate::runtime::backend::native::graph::{Class, ConvGeom, NOp, NodeId};
use crate::runtime::backend::native::index::{unflat, Ix};

/// Which product.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Dense(NodeId, NodeId),
    Bmm {
        x: NodeId,
        y: NodeId,
        ta: bool,
        tb: bool,
    },
    Conv(NodeId, NodeId, ConvGeom),
}

/// The shape of the batched product.
#[derive(Clone, Copy, Debug)]
struct Dims {
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    mr: usize,
    nr: usize,
}

impl Dims {
    fn mtiles(&self) -> usize {
        self.m.div_ceil(self.mr)
    }
    fn panels(&self) -> usize {
        self.n.div_ceil(self.nr)
    }
    /// Floats of one packed `A`.
    fn a_size(&self) -> usize {
        self.mtiles() * self.mr * self.k
    }
    /// Floats of one packed `B`.
    fn b_size(&self) -> usize {
        self.panels() * self.nr * self.k
    }
}

/// Emits the nest of anchor `a` (epilogue root `r`).
pub fn nest(cx: &mut Cx<'_>, a: NodeId, r: NodeId) {
    let node = cx.node(a).clone();
    let kind = match node.op {
        NOp::Dense(d, w) => Kind::Dense(d, w),
        NOp::BatchMatmul { x, y, ta, tb } => Kind::Bmm { x, y, ta, tb },
        NOp::Conv(d, w, g) => {
            if g.c / g.groups == 1 && g.groups > 1 {
                if super::depthwise::nest(cx, a, r, d, w, g) {
                    return;
                }
                return depthwise(cx, a, r, d, w, g);
            }
            if super::pointwise::nest(cx, a, r, d, w, g) {
                return;
            }
            if g.o / g.groups >= cx.isa.vl && conv_implicit(cx, a, r, d, w, g) {
                return;
            }
            Kind::Conv(d, w, g)
        }
        _ => {
            cx.fail("internal error: not a product");
            return;
        }
    };
    let (batch, m, n, k) = match kind {
        Kind::Dense(d, w) => {
            let dd = &cx.node(d).dims;
            let kk = *dd.last().unwrap_or(&1);
            let nn = cx.node(w).dims[0];
            (1, node.numel() / nn.max(1), nn, kk)
        }
        Kind::Bmm { x, ta, .. } => {
            let xd = &cx.node(x).dims;
            let kk = if ta { xd[1] } else { xd[2] };
            (node.dims[0], node.dims[1], node.dims[2], kk)
        }
        Kind::Conv(_, _, g) => (
            g.n * g.groups,
            g.o / g.groups,
            g.oh * g.ow,
            g.c / g.groups * g.kh * g.kw,
        ),
    };
    if batch * m * n == 0 {
        return;
    }
    let isa = cx.isa;
    let mr = if m >= isa.mr {
        isa.mr
    } else {
        m.next_power_of_two()
    };
    let dims = Dims {
        batch,
        m,
        n,
        k,
        mr,
        nr: isa.nr,
    };
    cx.features.insert(Feature::Ukr(dims.mr, dims.nr));
    if k == 0 {
        // An empty sum: the product is zero.
        zero_product(cx, a, r, kind, dims);
        return;
    }
    // Operands packed once per call site.
    let a_pre = match kind {
        Kind::Conv(_, w, _) => prepack(cx, w, kind, dims, Side::A),
        _ => None,
    };
    let b_pre = match kind {
        Kind::Dense(_, w) => prepack(cx, w, kind, dims, Side::B),
        _ => None,
    };
    let flops = 2 * batch * m * n * k;
    let par = cx.parallel_for(flops / 16);
    if batch >= 4 {
        batched(cx, a, r, kind, dims, a_pre, b_pre, par);
    } else {
        blocked(cx, a, r, kind, dims, a_pre, b_pre, par);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    A,
    B,
}

/// `A[b][i][kk]`.
fn a_at(cx: &mut Cx<'_>, kind: Kind, b: &Ix, i: &Ix, kk: &Ix) -> CV {
    match kind {
        Kind::Dense(d, _) => {
            let dd = cx.node(d).dims.clone();
            let mut ix = unflat(i, &dd[..dd.len() - 1], &cx.vars);
            ix.push(kk.clone());
            cx.val(d, &ix)
        }
        Kind::Bmm { x, ta, .. } => {
            let xb = if cx.node(x).dims[0] == 1 {
                Ix::konst(0)
            } else {
                b.clone()
            };
            let ix = if ta {
                vec![xb, kk.clone(), i.clone()]
            } else {
                vec![xb, i.clone(), kk.clone()]
            };
            cx.val(x, &ix)
        }
        Kind::Conv(_, w, g) => {
            let og = g.o / g.groups;
            let grp = b.rem(g.groups as i64, &cx.vars);
            let o = grp.scale(og as i64).add(i);
            let taps = (g.kh * g.kw) as i64;
            let c = kk.div(taps, &cx.vars);
            let ky = kk.div(g.kw as i64, &cx.vars).rem(g.kh as i64, &cx.vars);
            let kx = kk.rem(g.kw as i64, &cx.vars);
            cx.val(w, &[o, c, ky, kx])
        }
    }
}

/// `B[b][kk][j]` (not for convolutions: their `B` is packed by [`im2col`]).
fn b_at(cx: &mut Cx<'_>, kind: Kind, b: &Ix, kk: &Ix, j: &Ix) -> CV {
    match kind {
        Kind::Dense(_, w) => cx.val(w, &[j.clone(), kk.clone()]),
        Kind::Bmm { y, tb, .. } => {
            let yb = if cx.node(y).dims[0] == 1 {
                Ix::konst(0)
            } else {
                b.clone()
            };
            let ix = if tb {
                vec![yb, j.clone(), kk.clone()]
            } else {
                vec![yb, kk.clone(), j.clone()]
            };
            cx.val(y, &ix)
        }
        Kind::Conv(..) => {
            cx.fail("internal error: im2col read as a matrix");
            CV::new("0", Class::F)
        }
    }
}

/// Whether the source of `A` is contiguous along `k` (else along `i`).
fn a_k_inner(kind: Kind) -> bool {
    !matches!(kind, Kind::Bmm { ta: true, .. })
}

/// Whether the source of `B` is contiguous along `k` (else along `j`).
fn b_k_inner(kind: Kind) -> bool {
    matches!(kind, Kind::Dense(..) | Kind::Bmm { tb: true, .. })
}

/// The anchor's coordinates of `C[b][i][j]`.
fn out_coords(cx: &Cx<'_>, a: NodeId, kind: Kind, b: &Ix, i: &Ix, j: &Ix) -> Vec<Ix> {
    match kind {
        Kind::Dense(..) => {
            let od = &cx.node(a).dims;
            let mut ix = unflat(i, &od[..od.len() - 1], &cx.vars);
            ix.push(j.clone());
            ix
        }
        Kind::Bmm { .. } => vec![b.clone(), i.clone(), j.clone()],
        Kind::Conv(_, _, g) => {
            let og = g.o / g.groups;
            let img = b.div(g.groups as i64, &cx.vars);
            let grp = b.rem(g.groups as i64, &cx.vars);
            vec![
                img,
                grp.scale(og as i64).add(i),
                j.div(g.ow as i64, &cx.vars),
                j.rem(g.ow as i64, &cx.vars),
            ]
        }
    }
}

/// The kernel arguments an operand's expression reads, or `None` when it reads a buffer the
/// kernel computes.
fn operand_args(cx: &Cx<'_>, n: NodeId) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    let mut stack = vec![n];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(x) = stack.pop() {
        if !seen.insert(x) {
            continue;
        }
        match cx.node(x).op {
            NOp::Arg(i) => out.push(i),
            NOp::Lit(_) => {}
            _ if cx.plan.home[x].is_some() || cx.plan.fused[x] => return None,
            ref op => stack.extend(op.operands()),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Generates a pack function for a constant operand; returns the pack's index.
fn prepack(cx: &mut Cx<'_>, operand: NodeId, kind: Kind, d: Dims, side: Side) -> Option<usize> {
    let floats = d.batch
        * match side {
            Side::A => d.a_size(),
            Side::B => d.b_size(),
        };
    pack_fn(cx, operand, floats, |cx, par| {
        pack(cx, kind, d, side, "D", None, par)
    })
}

/// Generates a pack function (`SYM_packJ(A, D, nt)`: the kernel's arguments `A` packed into
/// `D`, `floats` floats, by `body`, told whether to run in parallel) for an operand that reads
/// only kernel arguments; returns the pack's index. `None` when the operand reads a buffer the
/// kernel computes, or literals alone (packed at run time).
pub(super) fn pack_fn(
    cx: &mut Cx<'_>,
    operand: NodeId,
    floats: usize,
    body: impl FnOnce(&mut Cx<'_>, bool),
) -> Option<usize> {
    let args = operand_args(cx, operand)?;
    if args.is_empty() {
        return None;
    }
    let j = cx.packs.len();
    cx.packs.push(super::Pack {
        args,
        bytes: floats * 4,
    });
    // Generate into a separate buffer.
    let saved_text = std::mem::take(&mut cx.text);
    let saved_indent = cx.indent;
    let saved_memo = std::mem::replace(&mut cx.memo, vec![Default::default()]);
    cx.in_pack = true;
    cx.indent = 0;
    cx.line(format!(
        "void {}_pack{j}(void* const* restrict A, float* restrict D, int nt) {{",
        super::SYM
    ));
    cx.indent = 1;
    cx.line("int err = 0; (void)err; (void)nt;");
    for (i, a) in cx.g().args.iter().enumerate() {
        let t = super::scalar::storage(a.shape.dtype);
        cx.line(format!(
            "const {t}* restrict {} = (const {t}*)A[{i}]; (void){};",
            Cx::arg_name(i),
            Cx::arg_name(i)
        ));
    }
    let par = cx.parallel_for(floats);
    body(cx, par);
    cx.indent = 0;
    cx.line("}");
    let text = std::mem::replace(&mut cx.text, saved_text);
    cx.pack_fns.push_str(&text);
    cx.indent = saved_indent;
    cx.memo = saved_memo;
    cx.in_pack = false;
    Some(j)
}

/// Packs one operand into `dst`: `A` as `[batch][tiles][K][MR]`, `B` as `[batch][panels][K][NR]`
/// (a convolution's `B` through [`im2col`]); every batch when `only` is `None`, else the one
/// batch `only` (a C expression) into `dst` directly. Rows past the operand's extent are zero.
fn pack(cx: &mut Cx<'_>, kind: Kind, d: Dims, side: Side, dst: &str, only: Option<&Ix>, par: bool) {
    if let (Side::B, Kind::Conv(data, _, g)) = (side, kind) {
        return im2col(cx, data, g, d, dst, only, par);
    }
    // Per side: rows of a tile, extent, tiles, floats per batch, whether the source is
    // contiguous along `k`, and the names of the tile, row-in-tile and row variables.
    let (r, extent, tiles, size, k_inner, names) = match side {
        Side::A => (
            d.mr,
            d.m,
            d.mtiles(),
            d.a_size(),
            a_k_inner(kind),
            ["pt", "pi", "r"],
        ),
        Side::B => (
            d.nr,
            d.n,
            d.panels(),
            d.b_size(),
            b_k_inner(kind),
            ["pp", "pj", "c"],
        ),
    };
    let k = d.k;
    let b: Ix = match only {
        Some(b) => b.clone(),
        None => {
            let name = cx.fresh("pb");
            let bv = cx.vars.fresh(name.clone(), d.batch);
            if par {
                cx.omp(2);
            }
            cx.open(format!(
                "for (long {name} = 0; {name} < {}L; {name}++)",
                d.batch
            ));
            Ix::var(bv)
        }
    };
    let base = match only {
        Some(_) => "0L".to_string(),
        None => format!("{size}L * {}", b.c(&cx.vars)),
    };
    let t = cx.fresh(names[0]);
    if par && only.is_some() {
        cx.omp(1);
    }
    cx.open(format!("for (long {t} = 0; {t} < {tiles}L; {t}++)"));
    let ii = cx.fresh(names[1]);
    let kk = cx.fresh("pk");
    let row = cx.fresh(names[2]);
    let dst_at = format!("{dst}[{base} + ({t} * {k}L + {kk}) * {r}L + {ii}]");
    let at = |cx: &mut Cx<'_>, rv, kv| {
        let (rv, kv) = (Ix::var(rv), Ix::var(kv));
        let v = match side {
            Side::A => a_at(cx, kind, &b, &rv, &kv),
            Side::B => b_at(cx, kind, &b, &kv, &rv),
        };
        format!("{dst_at} = {};", super::scalar::convert(&v, Class::F))
    };
    if k_inner {
        cx.open(format!("for (long {ii} = 0; {ii} < {r}L; {ii}++)"));
        cx.line(format!("const long {row} = {t} * {r}L + {ii};"));
        cx.open(format!("if ({row} < {extent}L)"));
        let rv = cx.vars.fresh(row.clone(), extent);
        cx.open(format!("for (long {kk} = 0; {kk} < {k}L; {kk}++)"));
        let kv = cx.vars.fresh(kk.clone(), k);
        let line = at(cx, rv, kv);
        cx.line(line);
        cx.close();
        cx.close();
        cx.open("else");
        cx.line(format!(
            "for (long {kk} = 0; {kk} < {k}L; {kk}++) {dst_at} = 0.0f;"
        ));
        cx.close();
        cx.close();
    } else {
        cx.open(format!("for (long {kk} = 0; {kk} < {k}L; {kk}++)"));
        let kv = cx.vars.fresh(kk.clone(), k);
        cx.open(format!("for (long {ii} = 0; {ii} < {r}L; {ii}++)"));
        cx.line(format!("const long {row} = {t} * {r}L + {ii};"));
        let rv = cx.vars.fresh(row.clone(), extent);
        cx.open(format!("if ({row} < {extent}L)"));
        let line = at(cx, rv, kv);
        cx.line(line);
        cx.close();
        cx.line(format!("else {dst_at} = 0.0f;"));
        cx.close();
        cx.close();
    }
    cx.close();
    if only.is_none() {
        cx.close();
    }
}

/// Packs the im2col matrix of batch `b` (image `b / groups`, group `b % groups`) into panels:
/// `dst[(p / NR · K + kk) · NR + p % NR]` is the input under tap `kk` of output pixel `p`.
fn im2col(
    cx: &mut Cx<'_>,
    data: NodeId,
    g: ConvGeom,
    d: Dims,
    dst: &str,
    only: Option<&Ix>,
    par: bool,
) {
    let (nr, k) = (d.nr, d.k);
    let Some(b) = only.cloned() else {
        cx.fail("internal error: im2col of every batch at once");
        return;
    };
    let cg = g.c / g.groups;
    let taps = g.kh * g.kw;
    let kk = cx.fresh("kk");
    if par {
        cx.omp(1);
    }
    cx.open(format!("for (long {kk} = 0; {kk} < {k}L; {kk}++)"));
    let kv = cx.vars.fresh(kk.clone(), k);
    let c = Ix::var(kv).div(taps as i64, &cx.vars);
    let ky = Ix::var(kv)
        .div(g.kw as i64, &cx.vars)
        .rem(g.kh as i64, &cx.vars);
    let kx = Ix::var(kv).rem(g.kw as i64, &cx.vars);
    let (cyn, cxn) = (cx.fresh("ky"), cx.fresh("kx"));
    cx.line(format!("const long {cyn} = {};", ky.c(&cx.vars)));
    cx.line(format!("const long {cxn} = {};", kx.c(&cx.vars)));
    let img = b.div(g.groups as i64, &cx.vars);
    let ch = b.rem(g.groups as i64, &cx.vars).scale(cg as i64).add(&c);
    let oy = cx.fresh("oy");
    cx.open(format!("for (long {oy} = 0; {oy} < {}L; {oy}++)", g.oh));
    let iy = cx.fresh("iy");
    cx.line(format!(
        "const long {iy} = {oy} * {}L + {cyn} * {}L - {}L;",
        g.stride.0, g.dilation.0, g.pad.0
    ));
    let ox = cx.fresh("ox");
    cx.open(format!("for (long {ox} = 0; {ox} < {}L; {ox}++)", g.ow));
    let ixn = cx.fresh("ix");
    cx.line(format!(
        "const long {ixn} = {ox} * {}L + {cxn} * {}L - {}L;",
        g.stride.1, g.dilation.1, g.pad.1
    ));
    let p = cx.fresh("p");
    cx.line(format!("const long {p} = {oy} * {}L + {ox};", g.ow));
    let v = cx.fresh("v");
    cx.line(format!("float {v} = 0.0f;"));
    cx.open(format!(
        "if ({iy} >= 0 && {iy} < {}L && {ixn} >= 0 && {ixn} < {}L)",
        g.h, g.w
    ));
    let ivy = Ix::opaque(iy.clone(), 0, g.h as i64 - 1);
    let ivx = Ix::opaque(ixn.clone(), 0, g.w as i64 - 1);
    let x = cx.val(data, &[img.clone(), ch.clone(), ivy, ivx]);
    cx.line(format!("{v} = {};", super::scalar::convert(&x, Class::F)));
    cx.close();
    cx.line(format!(
        "{dst}[(({p} / {nr}L) * {k}L + {kk}) * {nr}L + {p} % {nr}L] = {v};"
    ));
    cx.close();
    cx.close();
    let tail = d.panels() * nr;
    if tail > d.n {
        let p = cx.fresh("p");
        cx.line(format!(
            "for (long {p} = {}L; {p} < {tail}L; {p}++) {dst}[(({p} / {nr}L) * {k}L + {kk}) * {nr}L + {p} % {nr}L] = 0.0f;",
            d.n
        ));
    }
    cx.close();
}

/// Emits the micro-kernel call and the epilogue of one tile.
#[allow(clippy::too_many_arguments)]
fn tile(
    cx: &mut Cx<'_>,
    a: NodeId,
    r: NodeId,
    kind: Kind,
    d: Dims,
    b: &Ix,
    ap: &str,
    bp: &str,
    row0: &str,
    col0: &str,
) {
    let (mr, nr) = (d.mr, d.nr);
    cx.line(format!("ukr_{mr}x{nr}({}L, {ap}, {bp}, ct);", d.k));
    epilogue_tile(cx, a, r, kind, d, b, row0, col0, "ct");
}

/// The epilogue over a `MR × NR` tile `ct` whose first row and column are `row0`, `col0`.
#[allow(clippy::too_many_arguments)]
fn epilogue_tile(
    cx: &mut Cx<'_>,
    a: NodeId,
    r: NodeId,
    kind: Kind,
    d: Dims,
    b: &Ix,
    row0: &str,
    col0: &str,
    ct: &str,
) {
    let (mr, nr) = (d.mr, d.nr);
    let (mlim, nlim) = (cx.fresh("ml"), cx.fresh("nl"));
    cx.line(format!(
        "const long {mlim} = {}L - {row0} < {mr}L ? {}L - {row0} : {mr}L;",
        d.m, d.m
    ));
    cx.line(format!(
        "const long {nlim} = {}L - {col0} < {nr}L ? {}L - {col0} : {nr}L;",
        d.n, d.n
    ));
    tile_epilogue(
        cx,
        (a, r),
        (ct, nr),
        (row0, &mlim, d.m),
        (col0, &nlim, d.n),
        |cx, rv, cv| out_coords(cx, a, kind, b, &Ix::var(rv), &Ix::var(cv)),
    );
}

/// Sends a register tile (`ct`, `nr` floats per row) through the epilogue of `a` into `r`:
/// the tile's rows `row0 + i` for `i < rows` in an outer loop, its columns `col0 + j` for
/// `j < cols` in a vectorised inner loop (the C expressions `rows` and `cols` are the counts
/// left at the edges); `coords` maps the loop variables of the global row and column (extents
/// as given) to the result's coordinates.
pub(super) fn tile_epilogue(
    cx: &mut Cx<'_>,
    (a, r): (NodeId, NodeId),
    (ct, nr): (&str, usize),
    (row0, rows, row_extent): (&str, &str, usize),
    (col0, cols, col_extent): (&str, &str, usize),
    coords: impl FnOnce(&mut Cx<'_>, u32, u32) -> Vec<Ix>,
) {
    let (ii, jj) = (cx.fresh("ti"), cx.fresh("tj"));
    cx.open(format!("for (long {ii} = 0; {ii} < {rows}; {ii}++)"));
    let rn = cx.fresh("gr");
    cx.line(format!("const long {rn} = {row0} + {ii};"));
    let rv = cx.vars.fresh(rn.clone(), row_extent);
    let at = cx.mark();
    cx.open(format!("for (long {jj} = 0; {jj} < {cols}; {jj}++)"));
    let cn = cx.fresh("gc");
    cx.line(format!("const long {cn} = {col0} + {jj};"));
    let cv = cx.vars.fresh(cn.clone(), col_extent);
    let acc = cx.bind(CV::new(format!("{ct}[{ii} * {nr} + {jj}]"), Class::F));
    let oc = coords(cx, rv, cv);
    cx.epilogue(a, r, acc, &oc);
    cx.close();
    cx.simd_at(at);
    cx.close();
}

/// The loops a depthwise convolution runs its channels in: over images and output channels
/// (collapsed onto the pool when the work is large enough), each iteration with the scratch
/// pointer `scratch` of its thread. Returns the image and channel variables and the input
/// channel's index; the caller closes the two loops.
pub(super) fn depthwise_loops(cx: &mut Cx<'_>, g: &ConvGeom, scratch: &str) -> (u32, u32, Ix) {
    let og = g.o / g.groups;
    let work = g.n * g.o * g.oh * g.ow * g.kh * g.kw;
    let par = cx.parallel_for(work / 4);
    let (nn, oc) = (cx.fresh("n"), cx.fresh("oc"));
    let nv = cx.vars.fresh(nn.clone(), g.n);
    let ov = cx.vars.fresh(oc.clone(), g.o);
    if par {
        cx.omp(2);
    }
    cx.open(format!("for (long {nn} = 0; {nn} < {}L; {nn}++)", g.n));
    cx.open(format!("for (long {oc} = 0; {oc} < {}L; {oc}++)", g.o));
    thread_scratch(cx, scratch, 0);
    let ic = Ix::var(ov).div(og as i64, &cx.vars);
    (nv, ov, ic)
}

/// The per-thread scratch pointer (`float*`) at float offset `off` of this thread's area.
pub(super) fn thread_scratch(cx: &mut Cx<'_>, name: &str, off: usize) {
    cx.line(format!(
        "float* restrict {name} = (float*)(S + PT_BASE + (long)omp_get_thread_num() * PT_STRIDE) + {off}L;"
    ));
}

/// Declares `name`, a pointer to `elems` 4-byte elements of C type `ty` in the kernel's shared
/// scratch (one copy for all threads), 64-byte aligned after what is already taken.
pub(super) fn shared_scratch(cx: &mut Cx<'_>, ty: &str, name: &str, elems: usize) {
    let off = cx.scratch_total.next_multiple_of(64);
    cx.scratch_total = off + elems * 4;
    cx.line(format!("{ty}* restrict {name} = ({ty}*)(S + {off}L);"));
}

/// One GEMM per task over the batch.
#[allow(clippy::too_many_arguments)]
fn batched(
    cx: &mut Cx<'_>,
    a: NodeId,
    r: NodeId,
    kind: Kind,
    d: Dims,
    a_pre: Option<usize>,
    b_pre: Option<usize>,
    par: bool,
) {
    let bn = cx.fresh("bb");
    let bv = cx.vars.fresh(bn.clone(), d.batch);
    let b = Ix::var(bv);
    let mut per = 0usize;
    if par {
        cx.omp(1);
    }
    cx.open(format!("for (long {bn} = 0; {bn} < {}L; {bn}++)", d.batch));
    cx.line(format!(
        "float ct[{}] __attribute__((aligned(64)));",
        d.mr * d.nr
    ));
    let ap = match a_pre {
        Some(j) => format!("((const float*)P[{j}] + {}L * {bn})", d.a_size()),
        None => {
            thread_scratch(cx, "Ap", per);
            per += d.a_size();
            pack(cx, kind, d, Side::A, "Ap", Some(&b), false);
            "Ap".to_string()
        }
    };
    let bp = match b_pre {
        Some(j) => format!("((const float*)P[{j}] + {}L * {bn})", d.b_size()),
        None => {
            thread_scratch(cx, "Bq", per);
            per += d.b_size();
            pack(cx, kind, d, Side::B, "Bq", Some(&b), false);
            "Bq".to_string()
        }
    };
    let (np, t) = (cx.fresh("np"), cx.fresh("mt"));
    cx.open(format!(
        "for (long {np} = 0; {np} < {}L; {np}++)",
        d.panels()
    ));
    cx.open(format!("for (long {t} = 0; {t} < {}L; {t}++)", d.mtiles()));
    let (r0, c0) = (cx.fresh("r0"), cx.fresh("c0"));
    cx.line(format!("const long {r0} = {t} * {}L;", d.mr));
    cx.line(format!("const long {c0} = {np} * {}L;", d.nr));
    let apt = format!("{ap} + {t} * {}L", d.k * d.mr);
    let bpt = format!("{bp} + {np} * {}L", d.k * d.nr);
    tile(cx, a, r, kind, d, &b, &apt, &bpt, &r0, &c0);
    cx.close();
    cx.close();
    cx.close();
    cx.per_thread = cx.per_thread.max(per * 4);
}

/// Blocks of rows times chunks of panels, per GEMM of a small batch.
#[allow(clippy::too_many_arguments)]
fn blocked(
    cx: &mut Cx<'_>,
    a: NodeId,
    r: NodeId,
    kind: Kind,
    d: Dims,
    a_pre: Option<usize>,
    b_pre: Option<usize>,
    par: bool,
) {
    // Rows per block: the packed block of A stays within about 256 KiB, and the blocks have
    // equal numbers of tiles (but the last), so that tasks are of a size. A task walks a chunk
    // of panels once per block of rows; where a chunk of a constant B is beyond 4 MiB, it no
    // longer stays in L3 from one block to the next, and the blocks grow to 448 KiB (all of
    // GPT-2's 128 rows of 768: its output projection reads its 154 MB of weights once).
    // A long sum gets blocks of 8 tiles up to 768 KiB, so that each panel of B, itself long,
    // serves that many rows before the next is read (GPT-2's 128 × 3072 → 768: 2 tiles a
    // block at 256 KiB, every panel read eight times per call).
    let panels = d.panels();
    let split = |a_floats: usize| {
        let tiles_l2 = (a_floats / d.k.max(1) / d.mr).max(1);
        let nmb = d.mtiles().div_ceil(tiles_l2);
        let mc = d.mtiles().div_ceil(nmb) * d.mr;
        let nmb = d.m.div_ceil(mc);
        let nnc = if par {
            16usize.div_ceil(nmb).clamp(1, panels)
        } else {
            1
        };
        (nmb, mc, nnc)
    };
    let (nmb, mc, nnc) = match split((8 * d.mr * d.k).clamp(64 * 1024, 192 * 1024)) {
        (nmb, _, nnc)
            if b_pre.is_some() && nmb > 1 && panels.div_ceil(nnc) * d.k * d.nr * 4 > 4 << 20 =>
        {
            split(112 * 1024)
        }
        small => small,
    };
    let bn = cx.fresh("bb");
    let bv = cx.vars.fresh(bn.clone(), d.batch);
    let b = Ix::var(bv);
    cx.open(format!("for (long {bn} = 0; {bn} < {}L; {bn}++)", d.batch));
    // B: packed constant, or packed now into shared scratch.
    let bp = match b_pre {
        Some(j) => format!("((const float*)P[{j}] + {}L * {bn})", d.b_size()),
        None => {
            shared_scratch(cx, "float", "Bs", d.b_size());
            pack(cx, kind, d, Side::B, "Bs", Some(&b), par);
            "Bs".to_string()
        }
    };
    // A dynamic A that several chunks of panels read is packed once, by all threads, before
    // the tasks: packed per task it would be packed once per chunk (GPT-2's 128 × 3072 → 768
    // in 8 chunks packed its 1.5 MB of rows eight times, with strided stores).
    let shared_a = a_pre.is_none() && nnc > 1;
    if shared_a {
        shared_scratch(cx, "float", "As", d.a_size());
        pack(cx, kind, d, Side::A, "As", Some(&b), par);
    }
    let (mb, nc) = (cx.fresh("mb"), cx.fresh("nc"));
    if par {
        cx.omp(2);
    }
    // Chunks of panels outermost: the pool's static schedule gives each thread whole chunks
    // (all the row blocks of each), as even a split as the chunks allow.
    cx.open(format!("for (long {nc} = 0; {nc} < {nnc}L; {nc}++)"));
    cx.open(format!("for (long {mb} = 0; {mb} < {nmb}L; {mb}++)"));
    cx.line(format!(
        "float ct[{}] __attribute__((aligned(64)));",
        d.mr * d.nr
    ));
    let m0 = cx.fresh("m0");
    cx.line(format!("const long {m0} = {mb} * {mc}L;"));
    let tiles = cx.fresh("tn");
    cx.line(format!(
        "const long {tiles} = (({}L - {m0} < {mc}L ? {}L - {m0} : {mc}L) + {}L) / {}L;",
        d.m,
        d.m,
        d.mr - 1,
        d.mr
    ));
    let mut per = 0usize;
    let ap = match a_pre {
        Some(j) => format!(
            "((const float*)P[{j}] + {}L * {bn} + ({m0} / {}L) * {}L)",
            d.a_size(),
            d.mr,
            d.k * d.mr
        ),
        None if shared_a => format!("(As + ({m0} / {}L) * {}L)", d.mr, d.k * d.mr),
        None => {
            thread_scratch(cx, "Ap", 0);
            per += mc.div_ceil(d.mr) * d.mr * d.k;
            pack_a_block(cx, kind, d, "Ap", &b, &m0, &tiles);
            "Ap".to_string()
        }
    };
    let (np, t) = (cx.fresh("np"), cx.fresh("mt"));
    cx.open_block(&np, &nc, panels, nnc);
    cx.open(format!("for (long {t} = 0; {t} < {tiles}; {t}++)"));
    let (r0, c0) = (cx.fresh("r0"), cx.fresh("c0"));
    cx.line(format!("const long {r0} = {m0} + {t} * {}L;", d.mr));
    cx.line(format!("const long {c0} = {np} * {}L;", d.nr));
    let apt = format!("{ap} + {t} * {}L", d.k * d.mr);
    let bpt = format!("{bp} + {np} * {}L", d.k * d.nr);
    tile(cx, a, r, kind, d, &b, &apt, &bpt, &r0, &c0);
    cx.close();
    cx.close();
    cx.close();
    cx.close();
    cx.close();
    cx.per_thread = cx.per_thread.max(per * 4);
}

/// Packs rows `m0 ..` (`tiles` tiles) of `A[b]` into `dst` (`[tiles][K][MR]`).
fn pack_a_block(cx: &mut Cx<'_>, kind: Kind, d: Dims, dst: &str, b: &Ix, m0: &str, tiles: &str) {
    let (mr, k) = (d.mr, d.k);
    let t = cx.fresh("pt");
    cx.open(format!("for (long {t} = 0; {t} < {tiles}; {t}++)"));
    let ii = cx.fresh("pi");
    let kk = cx.fresh("pk");
    let rn = cx.fresh("r");
    let dst_at = format!("{dst}[({t} * {k}L + {kk}) * {mr}L + {ii}]");
    if a_k_inner(kind) {
        cx.open(format!("for (long {ii} = 0; {ii} < {mr}L; {ii}++)"));
        cx.line(format!("const long {rn} = {m0} + {t} * {mr}L + {ii};"));
        cx.open(format!("if ({rn} < {}L)", d.m));
        let rv = cx.vars.fresh(rn.clone(), d.m);
        cx.open(format!("for (long {kk} = 0; {kk} < {k}L; {kk}++)"));
        let kv = cx.vars.fresh(kk.clone(), k);
        let v = a_at(cx, kind, b, &Ix::var(rv), &Ix::var(kv));
        cx.line(format!(
            "{dst_at} = {};",
            super::scalar::convert(&v, Class::F)
        ));
        cx.close();
        cx.close();
        cx.open("else");
        cx.line(format!(
            "for (long {kk} = 0; {kk} < {k}L; {kk}++) {dst_at} = 0.0f;"
        ));
        cx.close();
        cx.close();
    } else {
        cx.open(format!("for (long {kk} = 0; {kk} < {k}L; {kk}++)"));
        let kv = cx.vars.fresh(kk.clone(), k);
        cx.open(format!("for (long {ii} = 0; {ii} < {mr}L; {ii}++)"));
        cx.line(format!("const long {rn} = {m0} + {t} * {mr}L + {ii};"));
        let rv = cx.vars.fresh(rn.clone(), d.m);
        cx.open(format!("if ({rn} < {}L)", d.m));
        let v = a_at(cx, kind, b, &Ix::var(rv), &Ix::var(kv));
        cx.line(format!(
            "{dst_at} = {};",
            super::scalar::convert(&v, Class::F)
        ));
        cx.close();
        cx.line(format!("else {dst_at} = 0.0f;"));
        cx.close();
        cx.close();
    }
    cx.close();
}

/// A product with `K = 0`: every element of the anchor is zero.
fn zero_product(cx: &mut Cx<'_>, a: NodeId, r: NodeId, kind: Kind, d: Dims) {
    let names: Vec<String> = ["zb", "zi", "zj"].iter().map(|p| cx.fresh(p)).collect();
    let ext = [d.batch, d.m, d.n];
    let mut vs = Vec::new();
    for (nme, &e) in names.iter().zip(&ext) {
        cx.open(format!("for (long {nme} = 0; {nme} < {e}L; {nme}++)"));
        vs.push(cx.vars.fresh(nme.clone(), e));
    }
    let oc = out_coords(
        cx,
        a,
        kind,
        &Ix::var(vs[0]),
        &Ix::var(vs[1]),
        &Ix::var(vs[2]),
    );
    cx.epilogue(a, r, CV::new("0.0f", Class::F), &oc);
    cx.close_n(3);
}

/// A depthwise convolution (one input channel per group) that [`super::depthwise`] declines:
/// for each output channel, the input channel is copied into a zero-padded plane, then every output row accumulates its
/// taps as vector operations along the row.
fn depthwise(cx: &mut Cx<'_>, a: NodeId, r: NodeId, data: NodeId, w: NodeId, g: ConvGeom) {
    if g.n * g.o * g.oh * g.ow == 0 {
        return;
    }
    let ph = (g.oh - 1) * g.stride.0 + (g.kh - 1) * g.dilation.0 + 1;
    let pw = (g.ow - 1) * g.stride.1 + (g.kw - 1) * g.dilation.1 + 1;
    let (nv, ov, ic) = depthwise_loops(cx, &g, "pl");
    // The padded plane.
    let (y, x) = (cx.fresh("y"), cx.fresh("x"));
    cx.open(format!("for (long {y} = 0; {y} < {ph}L; {y}++)"));
    let iy = cx.fresh("iy");
    cx.line(format!("const long {iy} = {y} - {}L;", g.pad.0));
    cx.open(format!("for (long {x} = 0; {x} < {pw}L; {x}++)"));
    let ix = cx.fresh("ix");
    cx.line(format!("const long {ix} = {x} - {}L;", g.pad.1));
    let v = cx.fresh("v");
    cx.line(format!("float {v} = 0.0f;"));
    cx.open(format!(
        "if ({iy} >= 0 && {iy} < {}L && {ix} >= 0 && {ix} < {}L)",
        g.h, g.w
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
    cx.line(format!("{v} = {};", super::scalar::convert(&xv, Class::F)));
    cx.close();
    cx.line(format!("pl[{y} * {pw}L + {x}] = {v};"));
    cx.close();
    cx.close();
    // The channel's taps.
    let taps = g.kh * g.kw;
    cx.line(format!("float wk[{taps}];"));
    let t = cx.fresh("t");
    cx.open(format!("for (long {t} = 0; {t} < {taps}L; {t}++)"));
    let tv = cx.vars.fresh(t.clone(), taps);
    let wv = cx.val(
        w,
        &[
            Ix::var(ov),
            Ix::konst(0),
            Ix::var(tv).div(g.kw as i64, &cx.vars),
            Ix::var(tv).rem(g.kw as i64, &cx.vars),
        ],
    );
    cx.line(format!(
        "wk[{t}] = {};",
        super::scalar::convert(&wv, Class::F)
    ));
    cx.close();
    // Rows.
    let oy = cx.fresh("oy");
    let oyv = cx.vars.fresh(oy.clone(), g.oh);
    cx.open(format!("for (long {oy} = 0; {oy} < {}L; {oy}++)", g.oh));
    cx.line(format!("float* restrict acc = pl + {}L;", ph * pw));
    cx.line(format!(
        "for (long q = 0; q < {}L; q++) acc[q] = 0.0f;",
        g.ow
    ));
    cx.open(format!("for (long ky = 0; ky < {}L; ky++)", g.kh));
    cx.open(format!("for (long kx = 0; kx < {}L; kx++)", g.kw));
    cx.line(format!("const float wt = wk[ky * {}L + kx];", g.kw));
    cx.line(format!(
        "const float* restrict src = pl + ({oy} * {}L + ky * {}L) * {pw}L + kx * {}L;",
        g.stride.0, g.dilation.0, g.dilation.1
    ));
    cx.line(format!(
        "for (long q = 0; q < {}L; q++) acc[q] += wt * src[q * {}L];",
        g.ow, g.stride.1
    ));
    cx.close();
    cx.close();
    let q = cx.fresh("q");
    let qv = cx.vars.fresh(q.clone(), g.ow);
    cx.open(format!("for (long {q} = 0; {q} < {}L; {q}++)", g.ow));
    let accv = cx.bind(CV::new(format!("acc[{q}]"), Class::F));
    let coords = [Ix::var(nv), Ix::var(ov), Ix::var(oyv), Ix::var(qv)];
    cx.epilogue(a, r, accv, &coords);
    cx.close();
    cx.close();
    cx.close();
    cx.close();
    cx.per_thread = cx.per_thread.max((ph * pw + g.ow + 16) * 4);
}

/// Declares a float holding `data[n][c][iy][ix]` for the image and channel loop variables
/// `nc` and the C expressions `iy`, `ix` (row and column in the input), zero where they fall in
/// the padding; returns its name.
pub(super) fn padded_read(
    cx: &mut Cx<'_>,
    data: NodeId,
    g: &ConvGeom,
    nc: (u32, u32),
    (iy, ix): (&str, &str),
) -> String {
    let v = cx.fresh("v");
    cx.line(format!("float {v} = 0.0f;"));
    cx.open(format!(
        "if ({iy} >= 0 && {iy} < {}L && {ix} >= 0 && {ix} < {}L)",
        g.h, g.w
    ));
    let xv = cx.val(
        data,
        &[
            Ix::var(nc.0),
            Ix::var(nc.1),
            Ix::opaque(iy.to_string(), 0, g.h as i64 - 1),
            Ix::opaque(ix.to_string(), 0, g.w as i64 - 1),
        ],
    );
    cx.line(format!("{v} = {};", super::scalar::convert(&xv, Class::F)));
    cx.close();
    v
}

/// A convolution as an implicit GEMM: `C (pixels × output channels) = A (pixels × taps) ·
/// W (taps × output channels)`, where row `p` of `A` is read straight from the (zero-padded)
/// input through a table of tap offsets, so no im2col matrix is built. Output channels are the
/// vector lanes (`NR` per panel, weights packed into `[group][panel][K][NR]`, once per call
/// site when they are constant); `MR` pixels are the rows of the register tile. Returns `false`
/// when the offsets do not fit in 32 bits (the im2col path is used instead).
fn conv_implicit(
    cx: &mut Cx<'_>,
    a: NodeId,
    r: NodeId,
    data: NodeId,
    w: NodeId,
    g: ConvGeom,
) -> bool {
    let isa = cx.isa;
    let (mr, nr) = (isa.mr, isa.nr);
    let og = g.o / g.groups;
    let cg = g.c / g.groups;
    let k = cg * g.kh * g.kw;
    let np_ = g.oh * g.ow;
    let tiles = np_.div_ceil(mr);
    let panels = og.div_ceil(nr);
    let batch = g.n * g.groups;
    if batch * np_ * og == 0 || k == 0 {
        return false;
    }
    let hp = (g.oh - 1) * g.stride.0 + (g.kh - 1) * g.dilation.0 + 1;
    let wp = (g.ow - 1) * g.stride.1 + (g.kw - 1) * g.dilation.1 + 1;
    // The input is read in place when it is a float32 buffer that needs no padding.
    let direct = match cx.buffer_of(data) {
        Some(b)
            if g.pad == (0, 0)
                && hp <= g.h
                && wp <= g.w
                && cx.node(data).dtype == crate::ir::DType::F32 =>
        {
            Some(b)
        }
        _ => None,
    };
    let (hh, ww) = if direct.is_some() {
        (g.h, g.w)
    } else {
        (hp, wp)
    };
    let plane = hh * ww;
    if (g.c * plane) as u64 >= i32::MAX as u64 {
        return false;
    }
    cx.features.insert(Feature::Ukri(mr, nr));
    let flops = 2 * batch * og * np_ * k;
    let par = cx.parallel_for(flops / 16);
    // The padded input.
    let xp = match direct {
        Some(b) => b,
        None => {
            let name = cx.fresh("Xp");
            shared_scratch(cx, "float", &name, g.n * g.c * plane);
            let (nn, cc) = (cx.fresh("n"), cx.fresh("c"));
            let nv = cx.vars.fresh(nn.clone(), g.n);
            let cv = cx.vars.fresh(cc.clone(), g.c);
            if cx.parallel_for(g.n * g.c * plane) {
                cx.omp(2);
            }
            cx.open(format!("for (long {nn} = 0; {nn} < {}L; {nn}++)", g.n));
            cx.open(format!("for (long {cc} = 0; {cc} < {}L; {cc}++)", g.c));
            let (y, x) = (cx.fresh("y"), cx.fresh("x"));
            cx.open(format!("for (long {y} = 0; {y} < {hh}L; {y}++)"));
            let iy = cx.fresh("iy");
            cx.line(format!("const long {iy} = {y} - {}L;", g.pad.0));
            cx.open(format!("for (long {x} = 0; {x} < {ww}L; {x}++)"));
            let ix = cx.fresh("ix");
            cx.line(format!("const long {ix} = {x} - {}L;", g.pad.1));
            let v = padded_read(cx, data, &g, (nv, cv), (&iy, &ix));
            cx.line(format!(
                "{name}[(({nn} * {}L + {cc}) * {hh}L + {y}) * {ww}L + {x}] = {v};",
                g.c
            ));
            cx.close();
            cx.close();
            cx.close();
            cx.close();
            name
        }
    };
    // Tap offsets.
    let offs = cx.fresh("off");
    shared_scratch(cx, "int", &offs, k);
    let kk = cx.fresh("kk");
    let taps = g.kh * g.kw;
    cx.line(format!(
        "for (long {kk} = 0; {kk} < {k}L; {kk}++) {offs}[{kk}] = (int)(({kk} / {taps}L) * {plane}L + (({kk} / {}L) % {}L) * {}L + ({kk} % {}L) * {}L);",
        g.kw,
        g.kh,
        g.dilation.0 * ww,
        g.kw,
        g.dilation.1
    ));
    // Weights.
    let wfloats = g.groups * panels * k * nr;
    let pre = pack_weights_fn(cx, w, g, nr, wfloats);
    let bp = match pre {
        Some(j) => format!("((const float*)P[{j}])"),
        None => {
            shared_scratch(cx, "float", "Wp", wfloats);
            pack_weights(cx, w, g, nr, "Wp", par);
            "Wp".to_string()
        }
    };
    // Tasks: blocks of pixel tiles times chunks of panels.
    const T: usize = 16;
    let (npb, ncb) = if tiles >= 2 * T || !par {
        (if par { T.min(tiles) } else { 1 }, 1)
    } else {
        let ncb = panels.min(T);
        (T.div_ceil(ncb).min(tiles), ncb)
    };
    let (npb, ncb) = (npb.clamp(1, tiles), ncb.clamp(1, panels));
    let (bn, pb, cb) = (cx.fresh("bb"), cx.fresh("pb"), cx.fresh("cb"));
    let bv = cx.vars.fresh(bn.clone(), batch);
    if par {
        cx.omp(3);
    }
    cx.open(format!("for (long {bn} = 0; {bn} < {batch}L; {bn}++)"));
    cx.open(format!("for (long {pb} = 0; {pb} < {npb}L; {pb}++)"));
    cx.open(format!("for (long {cb} = 0; {cb} < {ncb}L; {cb}++)"));
    cx.line(format!(
        "float ct[{}] __attribute__((aligned(64)));",
        mr * nr
    ));
    cx.line(format!("const float* xa[{mr}];"));
    let grp = cx.fresh("g");
    cx.line(format!("const long {grp} = {bn} % {}L;", g.groups));
    let xb = cx.fresh("xb");
    cx.line(format!(
        "const float* restrict {xb} = {xp} + (({bn} / {}L) * {}L + {grp} * {cg}L) * {plane}L;",
        g.groups, g.c
    ));
    let (pn, t) = (cx.fresh("pn"), cx.fresh("t"));
    cx.open_block(&pn, &cb, panels, ncb);
    cx.open_block(&t, &pb, tiles, npb);
    let p0 = cx.fresh("p0");
    cx.line(format!("const long {p0} = {t} * {mr}L;"));
    cx.open(format!("for (long i = 0; i < {mr}L; i++)"));
    cx.line(format!(
        "const long pp = {p0} + i < {np_}L ? {p0} + i : {}L;",
        np_ - 1
    ));
    cx.line(format!(
        "xa[i] = {xb} + (pp / {ow}L) * {}L + (pp % {ow}L) * {}L;",
        g.stride.0 * ww,
        g.stride.1,
        ow = g.ow
    ));
    cx.close();
    cx.line(format!(
        "ukri_{mr}x{nr}({k}L, xa, {offs}, {bp} + ({grp} * {panels}L + {pn}) * {}L, ct);",
        k * nr
    ));
    // Epilogue: pixel by pixel, channels contiguous in the tile (one vector loop per pixel;
    // the stores are strided).
    let (jl, il) = (cx.fresh("jl"), cx.fresh("il"));
    cx.line(format!(
        "const long {jl} = {og}L - {pn} * {nr}L < {nr}L ? {og}L - {pn} * {nr}L : {nr}L;"
    ));
    cx.line(format!(
        "const long {il} = {np_}L - {p0} < {mr}L ? {np_}L - {p0} : {mr}L;"
    ));
    let gcol = format!("{grp} * {og}L + {pn} * {nr}L");
    let groups = g.groups as i64;
    tile_epilogue(
        cx,
        (a, r),
        ("ct", nr),
        (&p0, &il, np_),
        (&gcol, &jl, g.o),
        |cx, pv, ocv| {
            vec![
                Ix::var(bv).div(groups, &cx.vars),
                Ix::var(ocv),
                Ix::var(pv).div(g.ow as i64, &cx.vars),
                Ix::var(pv).rem(g.ow as i64, &cx.vars),
            ]
        },
    );
    cx.close_n(5);
    true
}

/// Generates the pack function of an implicit convolution's weights when they read only
/// kernel arguments.
fn pack_weights_fn(
    cx: &mut Cx<'_>,
    w: NodeId,
    g: ConvGeom,
    nr: usize,
    floats: usize,
) -> Option<usize> {
    pack_fn(cx, w, floats, |cx, par| {
        pack_weights(cx, w, g, nr, "D", par)
    })
}

/// Packs convolution weights into `dst` as `[group][panel][K][NR]` (output channels in the
/// lanes, zero beyond the group's channels).
fn pack_weights(cx: &mut Cx<'_>, w: NodeId, g: ConvGeom, nr: usize, dst: &str, par: bool) {
    let og = g.o / g.groups;
    let cg = g.c / g.groups;
    let k = cg * g.kh * g.kw;
    let panels = og.div_ceil(nr);
    let (gn, pn, kk, j) = (
        cx.fresh("wg"),
        cx.fresh("wp"),
        cx.fresh("wk"),
        cx.fresh("wj"),
    );
    if par {
        cx.omp(2);
    }
    cx.open(format!("for (long {gn} = 0; {gn} < {}L; {gn}++)", g.groups));
    cx.open(format!("for (long {pn} = 0; {pn} < {panels}L; {pn}++)"));
    cx.open(format!("for (long {j} = 0; {j} < {nr}L; {j}++)"));
    let oc = cx.fresh("oc");
    cx.line(format!("const long {oc} = {pn} * {nr}L + {j};"));
    let dst_at = format!("{dst}[(({gn} * {panels}L + {pn}) * {k}L + {kk}) * {nr}L + {j}]");
    cx.open(format!("if ({oc} < {og}L)"));
    let gv = cx.vars.fresh(gn.clone(), g.groups);
    let ov = cx.vars.fresh(oc.clone(), og);
    cx.open(format!("for (long {kk} = 0; {kk} < {k}L; {kk}++)"));
    let kv = cx.vars.fresh(kk.clone(), k);
    let taps = (g.kh * g.kw) as i64;
    let coords = [
        Ix::var(gv).scale(og as i64).add(&Ix::var(ov)),
        Ix::var(kv).div(taps, &cx.vars),
        Ix::var(kv)
            .div(g.kw as i64, &cx.vars)
            .rem(g.kh as i64, &cx.vars),
        Ix::var(kv).rem(g.kw as i64, &cx.vars),
    ];
    let v = cx.val(w, &coords);
    cx.line(format!(
        "{dst_at} = {};",
        super::scalar::convert(&v, Class::F)
    ));
    cx.close();
    cx.close();
    cx.line(format!(
        "else for (long {kk} = 0; {kk} < {k}L; {kk}++) {dst_at} = 0.0f;"
    ));
    cx.close();
    cx.close();
    cx.close();
}
