//! `nn.max_pool2d` and `nn.avg_pool2d` in any layout whose `H` and `W` axes are not split: a
//! loop nest over the pooled shape, the window's taps inside, with the reference interpreter's
//! rules for padding (skipped by max pooling, which starts from the lowest finite value;
//! counted by average pooling only with `count_include_pad`, and then only inside the padded
//! input).

use super::scalar::CV;
use super::Cx;
use crate::runtime::backend::native::graph::{Class, NodeId, PoolWin};
use crate::runtime::backend::native::index::Ix;

/// Emits the nest of pooling anchor `a` (epilogue root `r`) reading `data`.
pub fn nest(cx: &mut Cx<'_>, a: NodeId, r: NodeId, data: NodeId, win: PoolWin) {
    let out = cx.node(a).dims.clone();
    let ind = cx.node(data).dims.clone();
    let total: usize = out.iter().product();
    if total == 0 {
        return;
    }
    let taps = win.size.0 * win.size.1;
    let par = if cx.parallel_for(total * taps.max(1)) {
        Cx::collapse_for(&out)
    } else {
        0
    };
    let vs = cx.loops(&out, par);
    let oix: Vec<Ix> = vs.iter().map(|&v| Ix::var(v)).collect();
    let (h, w) = (ind[win.hpos] as i64, ind[win.wpos] as i64);
    let acc = cx.fresh("acc");
    let cnt = cx.fresh("cnt");
    // Max pooling starts from the dtype's lowest finite value, as the interpreter does.
    let init = if win.max {
        let big = cx.node(data).dtype.float_max().unwrap_or(f32::MAX) as f64;
        super::scalar::float_lit(-big)
    } else {
        "0.0f".to_string()
    };
    cx.line(format!("float {acc} = {init};"));
    cx.line(format!("long {cnt} = 0;"));
    let (oy, ox) = (
        cx.vars.name(vs[win.hpos]).to_string(),
        cx.vars.name(vs[win.wpos]).to_string(),
    );
    let (ky, kx) = (cx.fresh("ky"), cx.fresh("kx"));
    cx.open(format!(
        "for (long {ky} = 0; {ky} < {}L; {ky}++)",
        win.size.0
    ));
    let iy = cx.fresh("iy");
    cx.line(format!(
        "const long {iy} = {oy} * {}L + {ky} * {}L - {}L;",
        win.stride.0, win.dilation.0, win.pad[0]
    ));
    cx.open(format!(
        "for (long {kx} = 0; {kx} < {}L; {kx}++)",
        win.size.1
    ));
    let ix = cx.fresh("ix");
    cx.line(format!(
        "const long {ix} = {ox} * {}L + {kx} * {}L - {}L;",
        win.stride.1, win.dilation.1, win.pad[1]
    ));
    cx.open(format!(
        "if ({iy} >= 0 && {iy} < {h}L && {ix} >= 0 && {ix} < {w}L)"
    ));
    let mut dix = oix.clone();
    dix[win.hpos] = Ix::opaque(iy.clone(), 0, h - 1);
    dix[win.wpos] = Ix::opaque(ix.clone(), 0, w - 1);
    let v = cx.val(data, &dix);
    let v = super::scalar::convert(&v, Class::F);
    if win.max {
        // As the interpreter: a NaN element replaces the accumulator.
        cx.line(format!("{acc} = {v} > {acc} || {v} != {v} ? {v} : {acc};"));
    } else {
        cx.line(format!("{acc} += {v};"));
    }
    cx.line(format!("{cnt}++;"));
    cx.close();
    if win.count_include_pad {
        cx.line(format!(
            "else if ({iy} < {}L && {ix} < {}L) {cnt}++;",
            h + win.pad[2] as i64,
            w + win.pad[3] as i64
        ));
    }
    cx.close();
    cx.close();
    let res = if win.max {
        CV::new(acc, Class::F)
    } else {
        CV::new(
            format!("({cnt} == 0 ? 0.0f : {acc} / (float){cnt})"),
            Class::F,
        )
    };
    let res = cx.bind(res);
    cx.epilogue(a, r, res, &oix);
    cx.close_n(out.len());
}
