//! A oneDNN partition compiled into a list of primitives over logical values, with the layout of
//! every value and a memory plan.
//!
//! * Every value has a memory descriptor. The partition's parameters and constants are plain
//!   row-major. Convolutions and the matmuls of dense layers are built
//!   with `any` source, weights and destination, so oneDNN picks its (blocked) layouts; the other
//!   primitives take their source in the layout it arrives in (their destination follows it).
//!   Where a primitive wants another layout than its input has, a reorder is inserted: at the
//!   partition's boundary (parameters), between primitives (rare), and for weights, whose
//!   reorders run once, when the kernel is prepared, if their source is a constant at the call
//!   site.
//! * A reshape (a dense layer's flattened rows, GPT-2's reshape after the bias) is a view: the
//!   same bytes with another descriptor.
//! * The `sum` post-op accumulates into the destination: the summand is copied (reordered) into
//!   the destination first, or, when nothing else reads it afterwards and its layout is the
//!   destination's, the destination simply is the summand's buffer (in place).
//! * Results are written straight into the output tensors where the producing primitive chose a
//!   plain layout; otherwise a final reorder writes them.
//! * Intermediate buffers are shared between values whose lifetimes do not overlap; one
//!   scratchpad (user mode) serves every primitive.

use super::composite::{self, Anchor, Composite, Conv, Operand, Post, View};
use crate::ir::{DType, Module};
use crate::runtime::backend::byoc::{Graph, Node};
use crate::runtime::exec::kernel::ConstantSource;
use crate::runtime::exec::tensor::Tensor;
use crate::runtime::ffi::dnnl::sys::MemoryDesc;
use crate::runtime::ffi::dnnl::{
    self as ffi, sys, Alg, Convolution, DataType, Dnnl, Engine, PrimitiveDesc, Tag,
};
use std::ffi::c_int;
use std::sync::Arc;

/// Why a partition cannot be compiled: lowercase, no trailing period.
pub type Reason = String;

/// Index of a logical value.
pub type ValueId = usize;

/// Where a value's bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// Parameter `i` of the partition.
    Param(usize),
    /// Constant `k` of the plan.
    Const(usize),
    /// Written by a step (its own buffer, or an output tensor).
    Produced,
    /// The bytes of another value, seen through another descriptor.
    View(ValueId),
    /// The destination of an in-place `sum`: the buffer of the summand, overwritten.
    InPlace(ValueId),
}

/// A logical value.
#[derive(Clone)]
pub struct Value {
    /// Its layout.
    pub md: MemoryDesc,
    /// Its logical extents.
    pub dims: Vec<i64>,
    /// Where its bytes are.
    pub base: Base,
}

/// What a step is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// A computing primitive.
    Compute,
    /// A reorder (`FROM` -> `TO`) into a value nothing overwrites: done once, when the kernel
    /// is prepared, if its source is a constant.
    Reorder,
    /// A reorder (`FROM` -> `TO`) whose destination is then accumulated into (a `sum`
    /// post-op) or is an output tensor: done on every run.
    Copy,
}

/// One primitive execution.
pub struct Step {
    /// The primitive.
    pub prim: ffi::Primitive,
    /// Its arguments.
    pub args: Vec<(c_int, ValueId)>,
    /// Its kind.
    pub kind: StepKind,
    /// The scratchpad descriptor, if the primitive needs one.
    pub scratch: Option<MemoryDesc>,
    /// What it computes, for messages: `convolution`, `reorder`.
    pub what: &'static str,
    /// The implementation oneDNN chose (`brg:avx512_core`, `jit:uni`, ...).
    pub impl_name: String,
}

/// Where the bytes of a root value live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// A partition parameter (the caller's tensor, or a constant of the call site).
    Param(usize),
    /// A constant of the plan.
    Const(usize),
    /// Buffer `b` of the prepared kernel.
    Buffer(usize),
    /// Output tensor `j`.
    Output(usize),
}

/// A compiled partition.
pub struct Plan {
    /// The engine the primitives run on.
    pub engine: Engine,
    /// Shapes of the parameters (float32, plain).
    pub n_params: usize,
    /// Every logical value.
    pub values: Vec<Value>,
    /// Every step, in execution order.
    pub steps: Vec<Step>,
    /// Constants the plan holds (from the body, or folded).
    pub consts: Vec<Arc<Tensor>>,
    /// Storage of every value (resolved through views).
    pub storage: Vec<Storage>,
    /// Sizes of the buffers, in bytes.
    pub buffers: Vec<usize>,
    /// The largest scratchpad any primitive needs, in bytes.
    pub scratch_bytes: usize,
    /// Byte sizes of the outputs.
    pub output_bytes: Vec<usize>,
}

impl Plan {
    /// The root value a value's bytes belong to.
    pub fn root(&self, mut v: ValueId) -> ValueId {
        loop {
            match self.values[v].base {
                Base::View(u) | Base::InPlace(u) => v = u,
                _ => return v,
            }
        }
    }

    /// Whether step `s` is a reorder whose source is a constant of the plan, or parameter `i`
    /// for which `is_const(i)` (a weight reorder, done once when the kernel is prepared).
    pub fn constant_reorder(&self, s: usize, is_const: &dyn Fn(usize) -> bool) -> bool {
        let step = &self.steps[s];
        if step.kind != StepKind::Reorder {
            return false;
        }
        let to = step
            .args
            .iter()
            .find(|(a, _)| *a == sys::ARG_TO)
            .map(|&(_, v)| v);
        if !matches!(to.map(|v| self.storage[v]), Some(Storage::Buffer(_))) {
            return false;
        }
        let from = step
            .args
            .iter()
            .find(|(a, _)| *a == sys::ARG_FROM)
            .map(|&(_, v)| v);
        match from.map(|v| self.storage[v]) {
            Some(Storage::Const(_)) => true,
            Some(Storage::Param(i)) => is_const(i),
            _ => false,
        }
    }
}

fn dims_i64(s: &[usize]) -> Vec<i64> {
    s.iter().map(|&d| d as i64).collect()
}

fn unsupported(e: ffi::Error, what: &str) -> Reason {
    if e.is_unsupported() {
        format!("oneDNN has no {what} for these shapes and attributes ({e})")
    } else {
        format!("{what}: {e}")
    }
}

/// Whether a convolution goes to oneDNN's Winograd algorithm (`docs/backends.md`, "Winograd
/// convolutions"): a 2-D 3 × 3 window at stride 1, undilated, ungrouped, not transposed, with
/// at least 64 input and 64 output channels and at least 2^21 multiply-adds per image and
/// tap. Measured with oneDNN 2.6 on AVX-512 (2 threads and 1), Winograd (F(2×2, 3×3), 2.25
/// times fewer multiplies) took 0.59-0.74 of the direct kernel's time on ResNet-50's 3 × 3
/// layers (64 to 512 channels, 56 × 56 to 7 × 7) and 0.5-0.7 on wider ones; it was slower with
/// 16 or 32 channels (1.2-3x) and on par at 64 channels on 14 × 14 planes, where its
/// transforms weigh as much as the products they save.
fn winograd_suits(c: &Conv) -> bool {
    let &[o, i, 3, 3] = c.weight_shape.as_slice() else {
        return false;
    };
    let plain = !c.transposed
        && c.groups == 1
        && c.strides.iter().all(|&s| s == 1)
        && c.dilates.iter().all(|&d| d == 0);
    let (o, i) = (o as i64, i as i64);
    let per_tap = dims_i64(&c.out_shape)
        .iter()
        .skip(2)
        .product::<i64>()
        .saturating_mul(i)
        .saturating_mul(o);
    plain && i >= 64 && o >= 64 && per_tap >= 1 << 21
}

/// Whether any convolution of the partition goes to Winograd's algorithm.
fn has_winograd(comps: &[Composite]) -> bool {
    comps.iter().any(|c| match &c.anchor {
        Anchor::Conv(conv) => winograd_suits(conv),
        _ => false,
    })
}

struct Builder<'a> {
    /// The partition has Winograd convolutions: the other 2-D convolutions whose channels
    /// are whole 16-channel blocks work in their layout (see `conv`).
    blocked_convs: bool,
    d: &'a Dnnl,
    engine: &'a Engine,
    values: Vec<Value>,
    steps: Vec<Step>,
    consts: Vec<Arc<Tensor>>,
    /// Reorders already made: (source value, destination descriptor, result).
    reorders: Vec<(ValueId, MemoryDesc, ValueId)>,
    /// Per graph node, the last node that reads its value (`None`: no node reads it).
    last_reader: Vec<Option<usize>>,
    /// The graph node being built.
    current: usize,
    node_of_value: Vec<Option<usize>>,
    outputs_nodes: Vec<usize>,
}

impl Builder<'_> {
    fn plain_md(&self, dims: &[i64]) -> Result<MemoryDesc, Reason> {
        let dims: Vec<i64> = if dims.is_empty() {
            vec![1]
        } else {
            dims.to_vec()
        };
        if dims.contains(&0) {
            return Err("a tensor with no elements".into());
        }
        let r = match Tag::plain(dims.len()) {
            Some(tag) => self.d.md(&dims, DataType::F32, tag),
            None => {
                let mut st = vec![1i64; dims.len()];
                for i in (0..dims.len() - 1).rev() {
                    st[i] = st[i + 1] * dims[i + 1];
                }
                self.d.md_strides(&dims, DataType::F32, &st)
            }
        };
        r.map_err(|e| format!("a tensor of rank {}: {e}", dims.len()))
    }

    fn any_md(&self, dims: &[i64]) -> Result<MemoryDesc, Reason> {
        self.d
            .md(dims, DataType::F32, Tag::ANY)
            .map_err(|e| format!("a tensor of rank {}: {e}", dims.len()))
    }

    fn push_value(&mut self, md: MemoryDesc, dims: Vec<i64>, base: Base) -> ValueId {
        self.values.push(Value { md, dims, base });
        self.node_of_value.push(None);
        self.values.len() - 1
    }

    fn is_plain(&self, v: ValueId) -> Result<bool, Reason> {
        let p = self.plain_md(&self.values[v].dims)?;
        Ok(self.d.md_equal(&p, &self.values[v].md))
    }

    /// The value in layout `want` (a reorder, made once per value and layout).
    fn in_layout(
        &mut self,
        v: ValueId,
        want: &MemoryDesc,
        dims: &[i64],
    ) -> Result<ValueId, Reason> {
        if self.d.md_equal(&self.values[v].md, want) {
            return Ok(v);
        }
        if let Some(&(_, _, r)) = self
            .reorders
            .iter()
            .find(|(s, md, _)| *s == v && self.d.md_equal(md, want))
        {
            return Ok(r);
        }
        let r = self.reorder_into(v, want, dims, StepKind::Reorder)?;
        self.reorders.push((v, *want, r));
        Ok(r)
    }

    /// A fresh value holding `v` reordered (or copied) into layout `want`.
    fn reorder_into(
        &mut self,
        v: ValueId,
        want: &MemoryDesc,
        dims: &[i64],
        kind: StepKind,
    ) -> Result<ValueId, Reason> {
        let from = self.values[v].md;
        let pd = PrimitiveDesc::reorder(self.engine, &from, want)
            .map_err(|e| unsupported(e, "reorder"))?;
        let prim = pd.primitive().map_err(|e| unsupported(e, "reorder"))?;
        let r = self.push_value(*want, dims.to_vec(), Base::Produced);
        self.steps.push(Step {
            prim,
            args: vec![(sys::ARG_FROM, v), (sys::ARG_TO, r)],
            kind,
            scratch: None,
            what: "reorder",
            impl_name: pd.impl_info(),
        });
        Ok(r)
    }

    /// `v` in its plain row-major layout.
    fn plain_of(&mut self, v: ValueId) -> Result<ValueId, Reason> {
        let dims = self.values[v].dims.clone();
        let p = self.plain_md(&dims)?;
        self.in_layout(v, &p, &dims)
    }

    /// `v` seen with other extents (the same element count, row-major): a view of its plain
    /// form.
    fn reshape(&mut self, v: ValueId, dims: &[i64]) -> Result<ValueId, Reason> {
        if self.values[v].dims == dims {
            return Ok(v);
        }
        let p = self.plain_of(v)?;
        let md = self.plain_md(dims)?;
        Ok(self.push_value(md, dims.to_vec(), Base::View(p)))
    }

    /// `v` (plain) seen through a descriptor that describes the same bytes differently.
    fn view(&mut self, v: ValueId, md: MemoryDesc, dims: Vec<i64>) -> Result<ValueId, Reason> {
        let p = self.plain_of(v)?;
        Ok(self.push_value(md, dims, Base::View(p)))
    }

    fn const_value(&mut self, t: &Arc<Tensor>) -> Result<ValueId, Reason> {
        let k = match self.consts.iter().position(|c| Arc::ptr_eq(c, t)) {
            Some(k) => k,
            None => {
                self.consts.push(t.clone());
                self.consts.len() - 1
            }
        };
        let dims = dims_i64(t.shape());
        let md = self.plain_md(&dims)?;
        Ok(self.push_value(md, dims, Base::Const(k)))
    }

    fn operand(&mut self, o: &Operand, args: &[ValueId]) -> Result<ValueId, Reason> {
        match o {
            Operand::Param(j) => args
                .get(*j)
                .copied()
                .ok_or_else(|| "internal error: a composite parameter without argument".into()),
            Operand::Const(t) => self.const_value(t),
        }
    }

    /// The buffer a `sum` destination in layout `dst` may take over in place, instead of a
    /// copy of the summand `s`: the summand itself, or the reorder of it into `dst` that an
    /// earlier primitive of this partition already read (a parameter entering the partition
    /// is reordered once, and its block's residual `sum` accumulates into that copy). Only when
    /// the composite being built is the last reader of the summand's node, the node is not an
    /// output, and none of the primitive's other arguments (`reads`) lives in that buffer.
    fn in_place(&mut self, s: ValueId, dst: &MemoryDesc, reads: &[ValueId]) -> Option<ValueId> {
        let node = self.node_of_value[s]?;
        if self.last_reader[node] != Some(self.current) || self.outputs_nodes.contains(&node) {
            return None;
        }
        let candidate = if self.d.md_equal(&self.values[s].md, dst) {
            s
        } else {
            self.reorders
                .iter()
                .find(|(from, md, _)| *from == s && self.d.md_equal(md, dst))
                .map(|&(_, _, r)| r)?
        };
        // The bytes it lives in: written by a step of this partition (not a parameter's or a
        // constant's), and read by no other argument of this primitive.
        let root = self.root(candidate);
        if self.values[root].base != Base::Produced || reads.iter().any(|&v| self.root(v) == root) {
            return None;
        }
        if candidate != s {
            // The reorder now fills a buffer that is overwritten: it runs on every call, even
            // where its source is a constant of the call site.
            let step = self.steps.iter_mut().find(|st| {
                st.kind == StepKind::Reorder
                    && st
                        .args
                        .iter()
                        .any(|&(a, v)| a == sys::ARG_TO && v == candidate)
            })?;
            step.kind = StepKind::Copy;
            self.reorders.retain(|&(_, _, r)| r != candidate);
        }
        Some(candidate)
    }

    /// The value whose bytes `v` are (through views and in-place destinations).
    fn root(&self, mut v: ValueId) -> ValueId {
        loop {
            match self.values[v].base {
                Base::View(u) | Base::InPlace(u) => v = u,
                _ => return v,
            }
        }
    }

    fn attr(&self, posts: &ffi::PostOps) -> Result<ffi::Attr, Reason> {
        let mut attr = self.d.attr().map_err(|e| e.to_string())?;
        attr.set_post_ops(posts)
            .map_err(|e| unsupported(e, "post-op list"))?;
        attr.set_user_scratchpad().map_err(|e| e.to_string())?;
        Ok(attr)
    }

    /// The attributes of a primitive that takes `posts` (no post-op list at all when there are
    /// none), with the values its `sum` and binary post-ops read ([`Builder::post_ops`]).
    #[allow(clippy::type_complexity)]
    fn attr_of(
        &mut self,
        posts: &[Post],
        args: &[ValueId],
        anchor_shape: &[usize],
        prim_dims: &[i64],
    ) -> Result<(ffi::Attr, Option<ValueId>, Vec<(c_int, ValueId)>), Reason> {
        let (po, sum, binaries) = self.post_ops(posts, args, anchor_shape, prim_dims)?;
        let attr = if posts.is_empty() {
            self.plain_attr()?
        } else {
            self.attr(&po)?
        };
        Ok((attr, sum, binaries))
    }

    fn plain_attr(&self) -> Result<ffi::Attr, Reason> {
        let mut attr = self.d.attr().map_err(|e| e.to_string())?;
        attr.set_user_scratchpad().map_err(|e| e.to_string())?;
        Ok(attr)
    }

    /// The post-ops (after a bias) as oneDNN post-ops, with the values their tensors come
    /// from: the summand, and each binary operand with its post-op index. `prim_dims` are the
    /// primitive's destination extents; `anchor_shape` the anchor's result in Relay's terms.
    #[allow(clippy::type_complexity)]
    fn post_ops(
        &mut self,
        posts: &[Post],
        args: &[ValueId],
        anchor_shape: &[usize],
        prim_dims: &[i64],
    ) -> Result<(ffi::PostOps, Option<ValueId>, Vec<(c_int, ValueId)>), Reason> {
        let mut po = self.d.post_ops().map_err(|e| e.to_string())?;
        let mut sum = None;
        let mut binaries = Vec::new();
        for (i, p) in posts.iter().enumerate() {
            match p {
                Post::Eltwise(alg, alpha, beta) => {
                    po.eltwise(*alg, *alpha, *beta)
                        .map_err(|e| unsupported(e, "eltwise post-op"))?;
                }
                Post::Sum(o) => {
                    if sum.is_some() {
                        return Err("two sum post-ops".into());
                    }
                    let v = self.operand(o, args)?;
                    sum = Some(self.reshape(v, prim_dims)?);
                    po.sum(1.0).map_err(|e| unsupported(e, "sum post-op"))?;
                }
                Post::Binary(alg, o, aligned) => {
                    let dims = operand_dims(aligned, anchor_shape, prim_dims).ok_or_else(|| {
                        format!("a {aligned:?} operand of a post-op does not fit the primitive")
                    })?;
                    let v = self.operand(o, args)?;
                    let md = self.plain_md(&dims)?;
                    let v = self.view(v, md, dims)?;
                    po.binary(*alg, &md)
                        .map_err(|e| unsupported(e, "binary post-op"))?;
                    binaries.push((sys::arg_post_op(i as c_int) | sys::ARG_SRC_1, v));
                }
                Post::Bias(_) | Post::FoldBn { .. } => {
                    return Err("a bias or batch norm after other post-ops".into())
                }
            }
        }
        Ok((po, sum, binaries))
    }

    /// Emits a computing step whose destination is a new value of layout `dst_md` (or, for a
    /// `sum`, the summand copied or taken over); returns the destination value.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        pd: &PrimitiveDesc,
        what: &'static str,
        mut args: Vec<(c_int, ValueId)>,
        dst_md: MemoryDesc,
        dst_dims: Vec<i64>,
        sum: Option<ValueId>,
        binaries: Vec<(c_int, ValueId)>,
    ) -> Result<ValueId, Reason> {
        let prim = pd.primitive().map_err(|e| unsupported(e, what))?;
        let reads: Vec<ValueId> = args.iter().chain(&binaries).map(|&(_, v)| v).collect();
        let dst = match sum {
            Some(s) => match self.in_place(s, &dst_md, &reads) {
                Some(b) => self.push_value(dst_md, dst_dims, Base::InPlace(b)),
                None => self.reorder_into(s, &dst_md, &dst_dims, StepKind::Copy)?,
            },
            None => self.push_value(dst_md, dst_dims, Base::Produced),
        };
        args.push((sys::ARG_DST, dst));
        args.extend(binaries);
        let scratch = pd.scratchpad_md().filter(|md| self.d.md_size(md) > 0);
        self.steps.push(Step {
            prim,
            args,
            kind: StepKind::Compute,
            scratch,
            what,
            impl_name: pd.impl_info(),
        });
        Ok(dst)
    }

    fn conv(
        &mut self,
        c: &Conv,
        posts: &[Post],
        args: &[ValueId],
        anchor_shape: &[usize],
    ) -> Result<ValueId, Reason> {
        let d = self.d;
        let nd = c.data_shape.len().saturating_sub(2);
        let g = c.groups as i64;
        let ws = dims_i64(&c.weight_shape);
        let src_dims = dims_i64(&c.data_shape);
        let dst_dims = dims_i64(&c.out_shape);
        if nd == 0 || ws.len() != nd + 2 {
            return Err("a convolution without spatial axes".into());
        }
        let (o, i_per_g) = if c.transposed {
            // Relay: [C, O/g, k...].
            (ws[1] * g, ws[0] / g)
        } else {
            (ws[0], ws[1])
        };
        if ws[0] % g != 0 || src_dims[1] % g != 0 || o % g != 0 {
            return Err(format!("groups={g} do not divide the channels"));
        }
        let kernel = &ws[2..];
        let mut wdims = if g > 1 {
            vec![g, o / g, i_per_g]
        } else {
            vec![o, i_per_g]
        };
        wdims.extend_from_slice(kernel);
        // The weight's bytes seen as oneDNN's weights.
        let weight_view = |b: &mut Self, w: ValueId| -> Result<ValueId, Reason> {
            if !c.transposed {
                let md = b.plain_md(&wdims)?;
                return b.view(w, md, wdims.clone());
            }
            let (stored, perm): (Vec<i64>, Vec<i32>) = if g > 1 {
                let mut s = vec![g, ws[0] / g, ws[1]];
                s.extend_from_slice(kernel);
                let mut p = vec![0, 2, 1];
                p.extend((3..3 + nd as i32).collect::<Vec<_>>());
                (s, p)
            } else {
                let mut p = vec![1, 0];
                p.extend((2..2 + nd as i32).collect::<Vec<_>>());
                (ws.clone(), p)
            };
            let md = b.plain_md(&stored)?;
            let md = d
                .md_permute(&md, &perm)
                .map_err(|e| format!("transposed convolution weights: {e}"))?;
            b.view(w, md, wdims.clone())
        };
        // Batch norm folded into constant weights and a bias.
        let mut posts: Vec<Post> = posts.to_vec();
        let mut folded: Option<(Arc<Tensor>, Arc<Tensor>)> = None;
        if let Some(Post::FoldBn {
            gamma,
            beta,
            mean,
            var,
            eps,
            center,
            scale,
        }) = posts.first()
        {
            let Operand::Const(w) = &c.weight else {
                return Err("the convolution's weight is not a constant, so a batch norm cannot be folded into it".into());
            };
            folded = Some(fold_bn(
                w, gamma, beta, mean, var, *eps, *center, *scale, o as usize,
            )?);
            posts.remove(0);
        }
        let w_val = match &folded {
            Some((w, _)) => self.const_value(w)?,
            None => self.operand(&c.weight, args)?,
        };
        let w_val = weight_view(self, w_val)?;
        let mut bias_val = match (&folded, posts.first()) {
            (Some((_, b)), _) => Some(self.const_value(b)?),
            (None, Some(Post::Bias(bo))) => {
                let v = self.operand(bo, args)?;
                posts.remove(0);
                Some(v)
            }
            _ => None,
        };
        if folded.is_some() {
            if let Some(Post::Bias(_)) = posts.first() {
                return Err("a bias after a folded batch norm".into());
            }
        }
        let bias_md = self.plain_md(&[o])?;
        if let Some(b) = bias_val {
            bias_val = Some(self.view(b, bias_md, vec![o])?);
        }
        let (po, sum, binaries) = self.post_ops(&posts, args, anchor_shape, &dst_dims)?;
        let attr = self.attr(&po)?;
        // In a partition with Winograd convolutions, which work on 16-channel blocks
        // (`nChw16c`), the others are asked for that layout too, instead of letting each
        // choose (oneDNN's direct kernels take `nhwc` then), so no reorder separates them.
        let blocked = self.blocked_convs
            && nd == 2
            && !c.transposed
            && g == 1
            && src_dims[1] % 16 == 0
            && o % 16 == 0;
        let act_md = |b: &Self, dims: &[i64]| {
            if blocked {
                b.d.md(dims, DataType::F32, Tag::A_B16_CD)
                    .map_err(|e| format!("a blocked tensor of shape {dims:?}: {e}"))
            } else {
                b.any_md(dims)
            }
        };
        let src_any = act_md(self, &src_dims)?;
        let w_any = self.any_md(&wdims)?;
        let dst_any = act_md(self, &dst_dims)?;
        let what = if c.transposed {
            "deconvolution"
        } else {
            "convolution"
        };
        let primitive = |winograd: bool| -> Result<PrimitiveDesc, Reason> {
            let op = d
                .convolution(&Convolution {
                    src: &src_any,
                    weights: &w_any,
                    bias: bias_val.map(|_| &bias_md),
                    dst: &dst_any,
                    strides: &c.strides,
                    dilates: &c.dilates,
                    pad_l: &c.pad_l,
                    pad_r: &c.pad_r,
                    transposed: c.transposed,
                    winograd,
                })
                .map_err(|e| unsupported(e, what))?;
            PrimitiveDesc::new(self.engine, &op, Some(&attr)).map_err(|e| unsupported(e, what))
        };
        // Winograd's algorithm where it pays, the direct one where oneDNN has no Winograd
        // implementation (no AVX-512, another data type, a post-op it does not take).
        let pd = match winograd_suits(c) {
            true => primitive(true).or_else(|_| primitive(false))?,
            false => primitive(false)?,
        };
        let data = self.operand(&c.data, args)?;
        let src = self.in_layout(data, &pd.src_md().ok_or("no source layout")?, &src_dims)?;
        let wt = self.in_layout(w_val, &pd.weights_md(0).ok_or("no weights layout")?, &wdims)?;
        let mut a = vec![(sys::ARG_SRC, src), (sys::ARG_WEIGHTS, wt)];
        if let Some(b) = bias_val {
            let want = pd.weights_md(1).ok_or("no bias layout")?;
            a.push((sys::ARG_BIAS, self.in_layout(b, &want, &[o])?));
        }
        let dst_md = pd.dst_md().ok_or("no destination layout")?;
        self.emit(&pd, what, a, dst_md, dst_dims, sum, binaries)
    }

    #[allow(clippy::too_many_arguments)]
    fn dense(
        &mut self,
        data: &Operand,
        weight: &Operand,
        data_shape: &[usize],
        weight_shape: &[usize],
        posts: &[Post],
        args: &[ValueId],
        anchor_shape: &[usize],
    ) -> Result<ValueId, Reason> {
        let d = self.d;
        let k = *data_shape.last().ok_or("a dense layer of a scalar")? as i64;
        let m: i64 = data_shape[..data_shape.len() - 1].iter().product::<usize>() as i64;
        let n = weight_shape[0] as i64;
        let mut posts = posts.to_vec();
        let bias = match posts.first() {
            Some(Post::Bias(b)) => {
                let v = self.operand(b, args)?;
                posts.remove(0);
                Some(v)
            }
            _ => None,
        };
        let dst_dims = vec![m, n];
        let (po, sum, binaries) = self.post_ops(&posts, args, anchor_shape, &dst_dims)?;
        let attr = self.attr(&po)?;
        let x = self.operand(data, args)?;
        let x = self.reshape(x, &[m, k])?;
        let w = self.operand(weight, args)?;
        // A matmul with the weight [N, K] seen as {K, N} (its bytes through transposed
        // strides; the weight reorder happens once). oneDNN's inner product is the other
        // choice: on the kernels of docs/backends.md the matmul took 4-7% less time on two threads
        // (D1-D3) and on one thread for D1, D2 and the one-row D4; the inner product 7% less
        // for D3 on one thread (docs/performance.md).
        let wmd = self.plain_md(&[n, k])?;
        let wmd = d.md_permute(&wmd, &[1, 0]).map_err(|e| e.to_string())?;
        let w_view = self.view(w, wmd, vec![k, n])?;
        let bias_md = self.plain_md(&[1, n])?;
        let op = d
            .matmul(
                &self.any_md(&[m, k])?,
                &self.any_md(&[k, n])?,
                bias.map(|_| &bias_md),
                &self.any_md(&dst_dims)?,
            )
            .map_err(|e| unsupported(e, "matmul"))?;
        let pd = PrimitiveDesc::new(self.engine, &op, Some(&attr))
            .map_err(|e| unsupported(e, "matmul"))?;
        let (wdims, bias_dims, what) = (vec![k, n], vec![1, n], "matmul");
        let src = self.in_layout(x, &pd.src_md().ok_or("no source layout")?, &[m, k])?;
        let wt = self.in_layout(
            w_view,
            &pd.weights_md(0).ok_or("no weights layout")?,
            &wdims,
        )?;
        let mut a = vec![(sys::ARG_SRC, src), (sys::ARG_WEIGHTS, wt)];
        if let Some(b) = bias {
            let md = self.plain_md(&bias_dims)?;
            let b = self.view(b, md, bias_dims.clone())?;
            let want = pd.weights_md(1).ok_or("no bias layout")?;
            a.push((sys::ARG_BIAS, self.in_layout(b, &want, &bias_dims)?));
        }
        let dst_md = pd.dst_md().ok_or("no destination layout")?;
        self.emit(&pd, what, a, dst_md, dst_dims, sum, binaries)
    }

    /// An operand of a batched matmul as the primitive sees it: `[batch..., rows, cols]`, the
    /// stored tensor read through its strides when transposed or reached through a chain of
    /// reshapes and transposes (`view`: its dims and strides in the operand's buffer). `batch`
    /// splits the batch axis of a 3-D operand in several, as the other operand's view has it.
    fn mm_operand(
        &mut self,
        v: ValueId,
        stored: &[usize],
        view: Option<&View>,
        batch: Option<&[i64]>,
        transposed: bool,
    ) -> Result<ValueId, Reason> {
        let (mut dims, mut strides) = match view {
            Some((d, s)) => (d.clone(), Some(s.clone())),
            None => (dims_i64(stored), None),
        };
        // The batch axes the primitive sees: `batch`, or one; an operand with a batch of one
        // broadcasts over all of them.
        let r = dims.len();
        let have: i64 = dims[..r - 2].iter().product();
        let want: Vec<i64> = match batch {
            Some(bd) if have == 1 => vec![1; bd.len()],
            Some(bd) => bd.to_vec(),
            None => vec![have],
        };
        if dims[..r - 2] != want[..] {
            let split: Vec<i64> = want.iter().chain(&dims[r - 2..]).copied().collect();
            let st = strides.unwrap_or_else(|| composite::dense_strides(&dims));
            strides = Some(
                composite::view_strides(&dims, &st, &split)
                    .ok_or("the operands' batch axes do not correspond")?,
            );
            dims = split;
        }
        let md = match &strides {
            Some(st) => self
                .d
                .md_strides(&dims, DataType::F32, st)
                .map_err(|e| e.to_string())?,
            None if !transposed => return self.plain_of(v),
            None => self.plain_md(&dims)?,
        };
        if !transposed {
            return self.view(v, md, dims);
        }
        let r = dims.len();
        let mut perm: Vec<i32> = (0..r as i32).collect();
        perm.swap(r - 2, r - 1);
        let md = self.d.md_permute(&md, &perm).map_err(|e| e.to_string())?;
        dims.swap(r - 2, r - 1);
        self.view(v, md, dims)
    }

    #[allow(clippy::too_many_arguments)]
    fn batch_matmul(
        &mut self,
        a: &Operand,
        b: &Operand,
        ta: bool,
        tb: bool,
        (a_shape, a_view): (&[usize], Option<&View>),
        (b_shape, b_view): (&[usize], Option<&View>),
        out_shape: &[usize],
        posts: &[Post],
        args: &[ValueId],
    ) -> Result<ValueId, Reason> {
        let d = self.d;
        // Operands whose batch axis stays split in several (heads of several sequences): the
        // matmul runs with those batch axes, on a destination of the same bytes.
        let split = |v: Option<&View>| {
            v.map(|(dims, _)| dims[..dims.len() - 2].to_vec())
                .filter(|bd| bd.len() > 1 && bd.iter().product::<i64>() > 1)
        };
        let batch = match (split(a_view), split(b_view)) {
            (Some(x), Some(y)) if x != y => {
                return Err("the two operands split the batch axis differently".into())
            }
            (x, y) => x.or(y),
        };
        let mut dst_dims = dims_i64(out_shape);
        if let Some(bd) = &batch {
            if !posts.is_empty() {
                return Err("a post-op after a matmul whose batch axis stays split".into());
            }
            dst_dims = bd.iter().chain(&dst_dims[1..]).copied().collect();
        }
        let n = dst_dims[dst_dims.len() - 1];
        let mut posts = posts.to_vec();
        let bias = match posts.first() {
            Some(Post::Bias(bo)) => {
                let v = self.operand(bo, args)?;
                posts.remove(0);
                Some(v)
            }
            _ => None,
        };
        let (po, sum, binaries) = self.post_ops(&posts, args, out_shape, &dst_dims)?;
        let attr = self.attr(&po)?;
        let av = self.operand(a, args)?;
        let av = self.mm_operand(av, a_shape, a_view, batch.as_deref(), ta)?;
        let bv = self.operand(b, args)?;
        // B is stored [Bt, K, N], or [Bt, N, K] when transposed: seen as {Bt, K, N}.
        let bv = self.mm_operand(bv, b_shape, b_view, batch.as_deref(), tb)?;
        let dst_md = self.plain_md(&dst_dims)?;
        let bias_md = self.plain_md(&[1, 1, n])?;
        let a_md = self.values[av].md;
        let b_md = self.values[bv].md;
        let op = d
            .matmul(&a_md, &b_md, bias.map(|_| &bias_md), &dst_md)
            .map_err(|e| unsupported(e, "matmul"))?;
        let pd = PrimitiveDesc::new(self.engine, &op, Some(&attr))
            .map_err(|e| unsupported(e, "matmul"))?;
        let mut args_v = vec![(sys::ARG_SRC, av), (sys::ARG_WEIGHTS, bv)];
        if let Some(bb) = bias {
            let bb = self.view(bb, bias_md, vec![1, 1, n])?;
            args_v.push((sys::ARG_BIAS, bb));
        }
        let out = self.emit(&pd, "matmul", args_v, dst_md, dst_dims, sum, binaries)?;
        if batch.is_none() {
            return Ok(out);
        }
        let dims = dims_i64(out_shape);
        let md = self.plain_md(&dims)?;
        self.view(out, md, dims)
    }

    /// A primitive that takes its source in the layout it arrives in: `make(src_md)` builds
    /// its descriptor; if oneDNN has no implementation for that layout, the source is
    /// reordered to its plain layout and tried again.
    fn same_layout(
        &mut self,
        data: ValueId,
        what: &'static str,
        make: &dyn Fn(&Builder<'_>, &MemoryDesc) -> Result<PrimitiveDesc, ffi::Error>,
    ) -> Result<(ValueId, PrimitiveDesc), Reason> {
        match make(self, &self.values[data].md) {
            Ok(pd) => Ok((data, pd)),
            Err(e) if e.is_unsupported() && !self.is_plain(data)? => {
                let p = self.plain_of(data)?;
                let pd = make(self, &self.values[p].md).map_err(|e| unsupported(e, what))?;
                Ok((p, pd))
            }
            Err(e) => Err(unsupported(e, what)),
        }
    }

    /// Per-channel vectors (scale, shift, statistics) as plain `{C}`.
    fn vector(&mut self, o: &Operand, args: &[ValueId], c: i64) -> Result<ValueId, Reason> {
        let v = self.operand(o, args)?;
        if self.values[v].dims.iter().product::<i64>() != c {
            return Err(format!("a per-channel operand without {c} values"));
        }
        let md = self.plain_md(&[c])?;
        self.view(v, md, vec![c])
    }

    fn composite(&mut self, comp: &Composite, args: &[ValueId]) -> Result<ValueId, Reason> {
        let d = self.d;
        let posts = comp.posts.as_slice();
        let shape = &comp.anchor_shape;
        let out = match &comp.anchor {
            Anchor::Conv(c) => self.conv(c, posts, args, shape)?,
            Anchor::Dense {
                data,
                weight,
                data_shape,
                weight_shape,
            } => self.dense(data, weight, data_shape, weight_shape, posts, args, shape)?,
            Anchor::BatchMatmul {
                a,
                b,
                ta,
                tb,
                a_shape,
                b_shape,
                a_view,
                b_view,
                out_shape,
            } => self.batch_matmul(
                a,
                b,
                *ta,
                *tb,
                (a_shape, a_view.as_ref()),
                (b_shape, b_view.as_ref()),
                out_shape,
                posts,
                args,
            )?,
            Anchor::BatchNorm {
                data,
                gamma,
                beta,
                mean,
                var,
                eps,
                center,
                scale,
                shape,
            } => {
                let c = shape[1] as i64;
                let mut posts = posts.to_vec();
                let mut flags = sys::USE_GLOBAL_STATS;
                if *scale {
                    flags |= sys::USE_SCALE;
                }
                if *center {
                    flags |= sys::USE_SHIFT;
                }
                if let [Post::Eltwise(a, alpha, _)] = posts.as_slice() {
                    if *a == Alg::RELU && *alpha == 0.0 {
                        flags |= sys::FUSE_NORM_RELU;
                        posts.clear();
                    }
                }
                let dims = dims_i64(shape);
                let (po, sum, binaries) = self.post_ops(&posts, args, shape, &dims)?;
                let attr = self.attr(&po)?;
                let x = self.operand(data, args)?;
                let eps = *eps;
                let (x, pd) = self.same_layout(x, "batch normalization", &|b, md| {
                    let op = b.d.batch_norm(md, eps, flags)?;
                    PrimitiveDesc::new(b.engine, &op, Some(&attr))
                })?;
                let mut a = vec![
                    (sys::ARG_SRC, x),
                    (sys::ARG_MEAN, self.vector(mean, args, c)?),
                    (sys::ARG_VARIANCE, self.vector(var, args, c)?),
                ];
                if *scale {
                    a.push((sys::ARG_SCALE, self.vector(gamma, args, c)?));
                }
                if *center {
                    a.push((sys::ARG_SHIFT, self.vector(beta, args, c)?));
                }
                let dst_md = pd.dst_md().ok_or("no destination layout")?;
                self.emit(&pd, "batch normalization", a, dst_md, dims, sum, binaries)?
            }
            Anchor::LayerNorm {
                data,
                gamma,
                beta,
                eps,
                shape,
            } => {
                let c = *shape.last().ok_or("a layer norm of a scalar")? as i64;
                let mut flags = 0;
                if gamma.is_some() {
                    flags |= sys::USE_SCALE;
                }
                if beta.is_some() {
                    flags |= sys::USE_SHIFT;
                }
                let dims = dims_i64(shape);
                let (attr, sum, binaries) = self.attr_of(posts, args, shape, &dims)?;
                let x = self.operand(data, args)?;
                let eps = *eps;
                let (x, pd) = self.same_layout(x, "layer normalization", &|b, md| {
                    let op = b.d.layer_norm(md, eps, flags)?;
                    PrimitiveDesc::new(b.engine, &op, Some(&attr))
                })?;
                let mut a = vec![(sys::ARG_SRC, x)];
                if let Some(g) = gamma {
                    a.push((sys::ARG_SCALE, self.vector(g, args, c)?));
                }
                if let Some(b) = beta {
                    a.push((sys::ARG_SHIFT, self.vector(b, args, c)?));
                }
                let dst_md = pd.dst_md().ok_or("no destination layout")?;
                self.emit(&pd, "layer normalization", a, dst_md, dims, sum, binaries)?
            }
            Anchor::Softmax { data, axis, shape } => {
                let dims = dims_i64(shape);
                let (attr, sum, binaries) = self.attr_of(posts, args, shape, &dims)?;
                let x = self.operand(data, args)?;
                let axis = *axis;
                let (x, pd) = self.same_layout(x, "softmax", &|b, md| {
                    let op = b.d.softmax(md, axis)?;
                    PrimitiveDesc::new(b.engine, &op, Some(&attr))
                })?;
                let dst_md = pd.dst_md().ok_or("no destination layout")?;
                self.emit(
                    &pd,
                    "softmax",
                    vec![(sys::ARG_SRC, x)],
                    dst_md,
                    dims,
                    sum,
                    binaries,
                )?
            }
            Anchor::Pool {
                alg,
                data,
                kernel,
                strides,
                pad_l,
                pad_r,
                in_shape: _,
                out_shape,
            } => {
                let dims = dims_i64(out_shape);
                let (attr, sum, binaries) = self.attr_of(posts, args, out_shape, &dims)?;
                let dst_any = self.any_md(&dims)?;
                let x = self.operand(data, args)?;
                let alg = *alg;
                let (x, pd) = self.same_layout(x, "pooling", &|b, md| {
                    let op =
                        b.d.pooling(alg, md, &dst_any, strides, kernel, pad_l, pad_r)?;
                    PrimitiveDesc::new(b.engine, &op, Some(&attr))
                })?;
                let dst_md = pd.dst_md().ok_or("no destination layout")?;
                self.emit(
                    &pd,
                    "pooling",
                    vec![(sys::ARG_SRC, x)],
                    dst_md,
                    dims,
                    sum,
                    binaries,
                )?
            }
            Anchor::Eltwise {
                data,
                alg,
                alpha,
                beta,
                shape,
            } => {
                let dims = dims_i64(shape);
                let (attr, sum, binaries) = self.attr_of(posts, args, shape, &dims)?;
                let x = self.operand(data, args)?;
                let (alg, alpha, beta) = (*alg, *alpha, *beta);
                let (x, pd) = self.same_layout(x, "eltwise", &|b, md| {
                    let op = b.d.eltwise(alg, md, alpha, beta)?;
                    PrimitiveDesc::new(b.engine, &op, Some(&attr))
                })?;
                let dst_md = pd.dst_md().ok_or("no destination layout")?;
                self.emit(
                    &pd,
                    "eltwise",
                    vec![(sys::ARG_SRC, x)],
                    dst_md,
                    dims,
                    sum,
                    binaries,
                )?
            }
            Anchor::Binary {
                alg,
                a,
                b,
                a_shape,
                b_shape,
                out_shape,
            } => {
                if a_shape != out_shape {
                    return Err(
                        "a binary operation whose first operand broadcasts (oneDNN broadcasts the second only)"
                            .into(),
                    );
                }
                let dims = dims_i64(out_shape);
                let b_al = dims_i64(
                    &composite::aligned(b_shape, out_shape)
                        .ok_or("a binary operation whose operands do not broadcast")?,
                );
                let (attr, sum, binaries) = self.attr_of(posts, args, out_shape, &dims)?;
                let av = self.operand(a, args)?;
                let bv = self.operand(b, args)?;
                let b_md = self.plain_md(&b_al)?;
                let bv = self.view(bv, b_md, b_al)?;
                let alg = *alg;
                let dst_any = self.any_md(&dims)?;
                let (av, pd) = self.same_layout(av, "binary", &|bl, md| {
                    let op = bl.d.binary(alg, md, &b_md, &dst_any)?;
                    PrimitiveDesc::new(bl.engine, &op, Some(&attr))
                })?;
                let dst_md = pd.dst_md().ok_or("no destination layout")?;
                self.emit(
                    &pd,
                    "binary",
                    vec![(sys::ARG_SRC, av), (sys::ARG_SRC_1, bv)],
                    dst_md,
                    dims,
                    sum,
                    binaries,
                )?
            }
        };
        let _ = d;
        self.reshape(out, &dims_i64(&comp.out_shape))
    }
}

/// A post-op operand's extents on the primitive's destination: the Relay shape (aligned to
/// the anchor's result `anchor_shape`) when the primitive's extents are those, or, for a dense
/// layer whose leading axes the primitive flattens into rows, the operand's leading axes
/// flattened the same way (all ones, or all the anchor's).
fn operand_dims(aligned: &[usize], anchor_shape: &[usize], prim: &[i64]) -> Option<Vec<i64>> {
    if dims_i64(anchor_shape) == prim {
        return Some(dims_i64(aligned));
    }
    if prim.len() != 2 || aligned.len() != anchor_shape.len() || aligned.is_empty() {
        return None;
    }
    let r = aligned.len();
    let last = aligned[r - 1] as i64;
    if aligned[..r - 1].iter().all(|&d| d == 1) {
        Some(vec![1, last])
    } else if aligned[..r - 1] == anchor_shape[..r - 1] {
        Some(vec![prim[0], last])
    } else {
        None
    }
}

/// Folds a batch norm into convolution weights `[O, ...]`: per output channel,
/// `s = γ / sqrt(σ² + ε)`, `W' = W · s`, `b' = β − μ · s` (γ = 1 without `scale`, β = 0
/// without `center`). Computed in float64, rounded once.
#[allow(clippy::too_many_arguments)]
fn fold_bn(
    w: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    mean: &Tensor,
    var: &Tensor,
    eps: f64,
    center: bool,
    scale: bool,
    o: usize,
) -> Result<(Arc<Tensor>, Arc<Tensor>), Reason> {
    for (t, what) in [(gamma, "γ"), (beta, "β"), (mean, "mean"), (var, "variance")] {
        if t.numel() != o || t.dtype() != DType::F32 {
            return Err(format!(
                "the batch norm's {what} does not hold {o} float32 values"
            ));
        }
    }
    let (g, b, mu, v) = (
        gamma.f32_view(),
        beta.f32_view(),
        mean.f32_view(),
        var.f32_view(),
    );
    let wv = w.f32_view();
    if o == 0 || !wv.len().is_multiple_of(o) {
        return Err("weights that do not split by output channel".into());
    }
    let per = wv.len() / o;
    let mut nw = vec![0f32; wv.len()];
    let mut nb = vec![0f32; o];
    for c in 0..o {
        let gc = if scale { g[c] as f64 } else { 1.0 };
        let s = gc / (v[c] as f64 + eps).sqrt();
        for (dst, &src) in nw[c * per..(c + 1) * per]
            .iter_mut()
            .zip(&wv[c * per..(c + 1) * per])
        {
            *dst = (src as f64 * s) as f32;
        }
        let bc = if center { b[c] as f64 } else { 0.0 };
        nb[c] = (bc - mu[c] as f64 * s) as f32;
    }
    let nw = Tensor::from_slice(DType::F32, w.shape(), &nw).map_err(|e| e.0)?;
    let nb = Tensor::from_slice(DType::F32, &[o], &nb).map_err(|e| e.0)?;
    Ok((Arc::new(nw), Arc::new(nb)))
}

/// Per node of `g`, the last node that reads it as an argument.
fn last_readers(g: &Graph) -> Vec<Option<usize>> {
    let mut last = vec![None; g.nodes.len()];
    for (n, node) in g.nodes.iter().enumerate() {
        if let Node::Call { args, .. } = node {
            for &a in args {
                last[a] = Some(n);
            }
        }
    }
    last
}

/// Compiles a partition graph.
pub fn build(
    d: &Dnnl,
    engine: &Engine,
    m: &Module,
    g: &Graph,
    consts: &dyn ConstantSource,
) -> Result<Plan, Reason> {
    // The composites, read first: how one convolution is laid out depends on the others.
    let mut comps = Vec::new();
    for node in &g.nodes {
        if let Node::Call { func, name, .. } = node {
            comps.push(composite::read(m, *func, consts).map_err(|r| format!("`{name}`: {r}"))?);
        }
    }
    let mut b = Builder {
        blocked_convs: has_winograd(&comps),
        d,
        engine,
        values: Vec::new(),
        steps: Vec::new(),
        consts: Vec::new(),
        reorders: Vec::new(),
        last_reader: last_readers(g),
        current: 0,
        node_of_value: Vec::new(),
        outputs_nodes: g.outputs.clone(),
    };
    for s in g.params.iter().chain(&g.shapes) {
        if s.dtype != DType::F32 {
            return Err(format!(
                "the oneDNN backend runs float32 only, and the partition has a `{}` tensor",
                s.dtype
            ));
        }
    }
    let mut node_value: Vec<ValueId> = Vec::with_capacity(g.nodes.len());
    let mut comps = comps.into_iter();
    for (n, node) in g.nodes.iter().enumerate() {
        b.current = n;
        let v = match node {
            Node::Param(i) => {
                let dims = dims_i64(&g.params[*i].dims);
                let md = b.plain_md(&dims)?;
                b.push_value(md, dims, Base::Param(*i))
            }
            Node::Const(t) => b.const_value(t)?,
            Node::Call { name, args, .. } => {
                let comp = comps
                    .next()
                    .ok_or("internal error: a composite was not read")?;
                let argv: Vec<ValueId> = args.iter().map(|&a| node_value[a]).collect();
                let v = b
                    .composite(&comp, &argv)
                    .map_err(|r| format!("`{name}`: {r}"))?;
                let want = dims_i64(&g.shapes[n].dims);
                if b.values[v].dims != want {
                    return Err(format!(
                        "`{name}`: internal error: the composite computes {:?}, its type says {want:?}",
                        b.values[v].dims
                    ));
                }
                v
            }
        };
        b.node_of_value[v] = Some(n);
        node_value.push(v);
    }
    // Outputs: straight into the output tensor where the layout is plain, else a reorder.
    let mut output_values = Vec::new();
    let mut output_bytes = Vec::new();
    for (j, &n) in g.outputs.iter().enumerate() {
        let v = node_value[n];
        let dims = dims_i64(&g.shapes[n].dims);
        let plain = b.plain_md(&dims)?;
        output_bytes.push(d.md_size(&plain));
        output_values.push((j, v, plain, dims));
    }
    // Roots and their storage.
    let root = |values: &[Value], mut v: ValueId| loop {
        match values[v].base {
            Base::View(u) | Base::InPlace(u) => v = u,
            _ => break v,
        }
    };
    let mut root_output: Vec<Option<usize>> = vec![None; b.values.len()];
    let mut copies = Vec::new();
    for (j, v, plain, dims) in output_values {
        let r = root(&b.values, v);
        let direct = b.values[r].base == Base::Produced
            && root_output[r].is_none()
            && d.md_equal(&b.values[v].md, &plain)
            && d.md_size(&b.values[r].md) == d.md_size(&plain);
        if direct {
            root_output[r] = Some(j);
        } else {
            copies.push((j, v, plain, dims));
        }
    }
    for (j, v, plain, dims) in copies {
        let o = b.reorder_into(v, &plain, &dims, StepKind::Copy)?;
        root_output.resize(b.values.len(), None);
        root_output[o] = Some(j);
    }
    let values = b.values;
    let steps = b.steps;
    // Persistent buffers: reorders of parameters and constants (weights; prepared once when
    // their source is constant at the call site).
    let n = values.len();
    let mut storage: Vec<Option<Storage>> = vec![None; n];
    let mut persistent = vec![false; n];
    for s in &steps {
        if s.kind == StepKind::Reorder {
            let from = s.args[0].1;
            let to = s.args[1].1;
            let fr = root(&values, from);
            if matches!(values[fr].base, Base::Param(_) | Base::Const(_)) {
                persistent[root(&values, to)] = true;
            }
        }
    }
    // Live ranges of roots: from the step that defines them to their last reader.
    let mut def_at: Vec<Option<usize>> = vec![None; n];
    let mut last_at: Vec<usize> = vec![0; n];
    for (i, s) in steps.iter().enumerate() {
        for &(arg, v) in &s.args {
            let r = root(&values, v);
            let writes = arg == sys::ARG_DST || arg == sys::ARG_TO;
            if writes && def_at[r].is_none() {
                def_at[r] = Some(i);
            }
            last_at[r] = last_at[r].max(i);
        }
    }
    let mut buffers: Vec<usize> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut owner: Vec<Option<usize>> = vec![None; n];
    let mut live: Vec<ValueId> = Vec::new();
    for i in 0..steps.len() {
        // Free the buffers of roots last read before this step.
        live.retain(|&r| {
            if last_at[r] < i {
                if let Some(bf) = owner[r] {
                    free.push(bf);
                }
                false
            } else {
                true
            }
        });
        for r in 0..n {
            if def_at[r] != Some(i) || storage[r].is_some() {
                continue;
            }
            if let Some(j) = root_output.get(r).copied().flatten() {
                storage[r] = Some(Storage::Output(j));
                continue;
            }
            let size = d.md_size(&values[r].md).max(1);
            let bf = if persistent[r] {
                buffers.push(size);
                buffers.len() - 1
            } else {
                let best = free
                    .iter()
                    .enumerate()
                    .filter(|(_, &bf)| buffers[bf] >= size)
                    .min_by_key(|(_, &bf)| buffers[bf])
                    .map(|(k, _)| k);
                match best {
                    Some(k) => free.swap_remove(k),
                    None => {
                        buffers.push(size);
                        buffers.len() - 1
                    }
                }
            };
            storage[r] = Some(Storage::Buffer(bf));
            if !persistent[r] {
                owner[r] = Some(bf);
                live.push(r);
            }
        }
    }
    let mut resolved = Vec::with_capacity(n);
    for v in 0..n {
        let r = root(&values, v);
        let s = match values[r].base {
            Base::Param(i) => Storage::Param(i),
            Base::Const(k) => Storage::Const(k),
            _ => match storage[r] {
                Some(s) => s,
                // A value no step writes and no one reads (cannot happen for a read value).
                None => Storage::Buffer(usize::MAX),
            },
        };
        resolved.push(s);
    }
    for s in &steps {
        for &(_, v) in &s.args {
            if resolved[v] == Storage::Buffer(usize::MAX) {
                return Err("internal error: a value is read before any step writes it".into());
            }
        }
    }
    let scratch_bytes = steps
        .iter()
        .filter_map(|s| s.scratch.as_ref().map(|md| d.md_size(md)))
        .max()
        .unwrap_or(0);
    Ok(Plan {
        engine: engine.clone(),
        n_params: g.params.len(),
        values,
        steps,
        consts: b.consts,
        storage: resolved,
        buffers,
        scratch_bytes,
        output_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A convolution of `i` → `o` channels on `hw` × `hw` planes (padded to keep the size).
    fn conv(i: usize, o: usize, hw: usize, k: usize, stride: i64, groups: usize) -> Conv {
        let out = (hw + 2 * (k / 2) - k) / stride as usize + 1;
        Conv {
            transposed: false,
            groups,
            strides: vec![stride; 2],
            dilates: vec![0; 2],
            pad_l: vec![(k / 2) as i64; 2],
            pad_r: vec![(k / 2) as i64; 2],
            data: Operand::Param(0),
            weight: Operand::Param(1),
            data_shape: vec![1, i, hw, hw],
            weight_shape: vec![o, i / groups, k, k],
            out_shape: vec![1, o, out, out],
        }
    }

    #[test]
    fn winograd_takes_resnet_sized_3x3_layers_only() {
        // ResNet-50's stride-1 3 × 3 layers.
        for (ch, hw) in [(64, 56), (128, 28), (256, 14), (512, 7)] {
            assert!(winograd_suits(&conv(ch, ch, hw, 3, 1, 1)), "{ch} {hw}");
        }
        // Few channels, small planes, other windows, strides, groups, dilation, transposed.
        assert!(!winograd_suits(&conv(32, 32, 112, 3, 1, 1)));
        assert!(!winograd_suits(&conv(64, 64, 14, 3, 1, 1)));
        assert!(!winograd_suits(&conv(64, 64, 56, 1, 1, 1)));
        assert!(!winograd_suits(&conv(64, 64, 56, 5, 1, 1)));
        assert!(!winograd_suits(&conv(128, 128, 56, 3, 2, 1)));
        assert!(!winograd_suits(&conv(128, 128, 56, 3, 1, 2)));
        assert!(!winograd_suits(&conv(128, 128, 56, 3, 1, 128)));
        let mut dilated = conv(128, 128, 56, 3, 1, 1);
        dilated.dilates = vec![1, 1];
        assert!(!winograd_suits(&dilated));
        let mut transposed = conv(128, 128, 56, 3, 1, 1);
        transposed.transposed = true;
        assert!(!winograd_suits(&transposed));
        // A 1-D or 3-D window is not one oneDNN's Winograd takes.
        let mut one_d = conv(128, 128, 56, 3, 1, 1);
        one_d.weight_shape = vec![128, 128, 3];
        assert!(!winograd_suits(&one_d));
    }
}
