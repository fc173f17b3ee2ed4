//! Shape transformations: `reshape`, `expand_dims`, `squeeze`, `transpose`, `broadcast_to`,
//! `tile` and `layout_transform`, the device annotations `on_device` and `device_copy` (copies: every
//! device is this CPU), and the layout conversion that convolutions and pooling share.

use super::iter::{broadcast_strides, strided_copy};
use super::{op, Call, OpImpl, Reason};
use crate::ir::Dim;
use crate::ops::layout::Layout;
use crate::ops::Op;
use crate::runtime::exec::tensor::{strides, Tensor};

pub(super) fn instantiate(c: &Call<'_>) -> Result<Box<dyn OpImpl>, Reason> {
    if matches!(c.op.op, Op::OnDevice | Op::DeviceCopy) {
        // The argument may be a tuple: copy every flattened tensor.
        return op(|args, outs| {
            for (a, o) in args.iter().zip(outs.iter_mut()) {
                o.bytes_mut().copy_from_slice(a.bytes());
            }
            Ok(())
        });
    }
    let d = c.arg(0)?.clone();
    let o = c.out()?.clone();
    match c.op.op {
        // The element order does not change: the result shape is the inferred type's.
        Op::Reshape | Op::ExpandDims | Op::Squeeze => op(|args, outs| {
            outs[0].bytes_mut().copy_from_slice(args[0].bytes());
            Ok(())
        }),
        Op::Transpose => {
            let r = d.dims.len();
            let axes = c.opt_ints("axes").unwrap_or_default();
            let perm = crate::ops::transpose_perm(&axes, r).ok_or_else(|| {
                format!("`transpose` axes {axes:?} are not a permutation of {r} axes")
            })?;
            let s = strides(&d.dims);
            let st: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
            op(move |args, outs| {
                strided_copy(args[0], 0, &st, &mut outs[0]);
                Ok(())
            })
        }
        Op::BroadcastTo => {
            let st = broadcast_strides(&d.dims, &o.dims);
            op(move |args, outs| {
                strided_copy(args[0], 0, &st, &mut outs[0]);
                Ok(())
            })
        }
        Op::Tile => {
            // The data seen with leading extents of 1 up to the result's rank; each result
            // coordinate reads the data at the coordinate modulo the data's extent.
            let r = o.dims.len();
            let mut dims = vec![1usize; r - d.dims.len().min(r)];
            dims.extend_from_slice(&d.dims);
            if dims.len() != r || dims.iter().zip(&o.dims).any(|(&i, &n)| i == 0 && n != 0) {
                return Err(format!("`tile` of {:?} cannot give {:?}", d.dims, o.dims));
            }
            let maps: Vec<Vec<usize>> = dims
                .iter()
                .zip(&o.dims)
                .map(|(&i, &n)| (0..n).map(|j| j % i).collect())
                .collect();
            let st = strides(&dims);
            op(move |args, outs| {
                super::nn::gather_by_maps(args[0], &mut outs[0], &maps, &st);
                Ok(())
            })
        }
        Op::LayoutTransform => {
            let from = layout(c.str("src_layout")?)?;
            let to = layout(c.str("dst_layout")?)?;
            let conv = LayoutConv::new(&from, &to, &d.dims)?;
            op(move |args, outs| {
                conv.apply(args[0], &mut outs[0]);
                Ok(())
            })
        }
        _ => Err(super::not_implemented(c)),
    }
}

/// Parses a layout attribute.
pub(super) fn layout(s: &str) -> Result<Layout, Reason> {
    Layout::parse(s).map_err(|m| format!("invalid layout: {m}"))
}

/// A conversion of tensors of one shape from one layout to another with the same axes
/// (`NHWC` → `NCHW`, `NCHW16c` → `NCHW`, ...). Pure permutations are strided copies; layouts
/// with split axes map every element.
pub(super) struct LayoutConv {
    /// The converted shape.
    pub dims: Vec<usize>,
    kind: ConvKind,
}

enum ConvKind {
    Identity,
    Permute(Vec<usize>),
    General(Box<General>),
}

/// A primal axis of the source layout: letter, stride, and the split factor and sub-axis
/// stride if it is split.
type SrcAxis = (char, usize, Option<(usize, usize)>);

struct General {
    /// For each output axis: its primal axis letter and the factor it is multiplied by in the
    /// primal coordinate (the sub-axis factor for an outer axis, 1 for a sub-axis).
    out_axes: Vec<(char, usize)>,
    /// For each primal letter in the source: (letter, source stride of the outer axis, split
    /// factor and stride of the sub-axis if split).
    src: Vec<SrcAxis>,
}

impl LayoutConv {
    /// Plans converting tensors of shape `dims` in layout `from` to layout `to`.
    pub fn new(from: &Layout, to: &Layout, dims: &[usize]) -> Result<LayoutConv, Reason> {
        let shape: Vec<Dim> = dims.iter().map(|&d| Dim::Fixed(d as i64)).collect();
        let out: Vec<usize> = from
            .convert(&shape, to)?
            .iter()
            .map(|d| d.fixed().unwrap_or(0) as usize)
            .collect();
        if from == to {
            return Ok(LayoutConv {
                dims: out,
                kind: ConvKind::Identity,
            });
        }
        let split = |l: &Layout| l.axes().iter().any(|a| a.factor.is_some());
        let st = strides(dims);
        if !split(from) && !split(to) {
            let perm: Vec<usize> = to
                .axes()
                .iter()
                .map(|a| from.position(a.name).unwrap_or(0))
                .map(|p| st[p])
                .collect();
            return Ok(LayoutConv {
                dims: out,
                kind: ConvKind::Permute(perm),
            });
        }
        let out_axes = to
            .axes()
            .iter()
            .map(|a| match a.factor {
                Some(_) => (a.name, 1),
                None => (a.name, to.split_factor(a.name).unwrap_or(1) as usize),
            })
            .collect();
        let src = from
            .axes()
            .iter()
            .enumerate()
            .filter(|(_, a)| a.factor.is_none())
            .map(|(i, a)| {
                let sub = from.split_factor(a.name).map(|f| {
                    let pos = from
                        .axes()
                        .iter()
                        .position(|b| b.name == a.name && b.factor.is_some())
                        .unwrap_or(0);
                    (f as usize, st[pos])
                });
                (a.name, st[i], sub)
            })
            .collect();
        Ok(LayoutConv {
            dims: out,
            kind: ConvKind::General(Box::new(General { out_axes, src })),
        })
    }

    /// Converts `src` into `dst` (of shape [`LayoutConv::dims`]).
    pub fn apply(&self, src: &Tensor, dst: &mut Tensor) {
        match &self.kind {
            ConvKind::Identity => dst.bytes_mut().copy_from_slice(src.bytes()),
            ConvKind::Permute(st) => strided_copy(src, 0, st, dst),
            ConvKind::General(g) => {
                let es = src.elem_size();
                let r = self.dims.len();
                let mut coord = vec![0usize; r];
                let sb = src.bytes();
                let total = dst.numel();
                let db = dst.bytes_mut();
                let mut full: Vec<(char, usize)> = Vec::with_capacity(g.src.len());
                for i in 0..total {
                    full.clear();
                    for (k, &(name, mul)) in g.out_axes.iter().enumerate() {
                        match full.iter_mut().find(|(n, _)| *n == name) {
                            Some((_, v)) => *v += coord[k] * mul,
                            None => full.push((name, coord[k] * mul)),
                        }
                    }
                    let mut off = 0usize;
                    for &(name, stride, sub) in &g.src {
                        let v = full.iter().find(|(n, _)| *n == name).map_or(0, |x| x.1);
                        off += match sub {
                            Some((f, sub_stride)) => (v / f) * stride + (v % f) * sub_stride,
                            None => v * stride,
                        };
                    }
                    db[i * es..(i + 1) * es].copy_from_slice(&sb[off * es..(off + 1) * es]);
                    for k in (0..r).rev() {
                        coord[k] += 1;
                        if coord[k] < self.dims[k] {
                            break;
                        }
                        coord[k] = 0;
                    }
                }
            }
        }
    }

    /// Whether the conversion changes nothing.
    pub fn is_identity(&self) -> bool {
        matches!(self.kind, ConvKind::Identity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    #[test]
    fn blocked_layout_round_trip() {
        // NCHW [1, 4, 1, 2] -> NCHW2c [1, 2, 1, 2, 2] -> NCHW.
        let x =
            Tensor::from_slice(DType::I32, &[1, 4, 1, 2], &[0i32, 1, 2, 3, 4, 5, 6, 7]).unwrap();
        let (a, b) = (
            Layout::parse("NCHW").unwrap(),
            Layout::parse("NCHW2c").unwrap(),
        );
        let fwd = LayoutConv::new(&a, &b, &[1, 4, 1, 2]).unwrap();
        assert_eq!(fwd.dims, vec![1, 2, 1, 2, 2]);
        let mut y = Tensor::zeros(DType::I32, &fwd.dims).unwrap();
        fwd.apply(&x, &mut y);
        // Block 0 holds channels 0 and 1: (w0: c0, c1), (w1: c0, c1).
        assert_eq!(y.as_slice::<i32>(), &[0, 2, 1, 3, 4, 6, 5, 7]);
        let back = LayoutConv::new(&b, &a, &fwd.dims).unwrap();
        let mut z = Tensor::zeros(DType::I32, &back.dims).unwrap();
        back.apply(&y, &mut z);
        assert_eq!(z, x);
        let nhwc = Layout::parse("NHWC").unwrap();
        let p = LayoutConv::new(&a, &nhwc, &[1, 4, 1, 2]).unwrap();
        let mut w = Tensor::zeros(DType::I32, &p.dims).unwrap();
        p.apply(&x, &mut w);
        assert_eq!(w.as_slice::<i32>(), &[0, 2, 4, 6, 1, 3, 5, 7]);
    }
}
