//! The kernel builder: from a unit's [`KGraph`] to one C function.
//!
//! **Plan.** Nodes are *materialized* (written to a buffer: an output, or scratch memory) or
//! *inline* (computed where they are read, as a C expression of the reader's loop indices).
//! Materialized are: the outputs, the anchors (reductions, dense, batch_matmul, conv2d,
//! pooling), concatenations, and inline nodes that are read by two loop nests and are not cheap
//! (an `exp`, a gather). Everything else (elementwise and injective operators) is fused into
//! the loops of its reader: one pass over memory.
//!
//! An anchor takes an **epilogue**: the largest chain of elementwise operators on its result
//! (same shape, read at the same index, used only inside the chain) ending in one node `R`;
//! `R` is written by the anchor's loop nest while each result tile is in registers or L1, and
//! the anchor's own result is never stored. Bias, batch-norm scale and shift, activations, a
//! residual add and GELU all become epilogues.
//!
//! **Loop nests**, one per materialized node, in dependency order: elementwise/injective nests
//! over the node's shape (adjacent axes that every access reads contiguously are merged into
//! one loop, so broadcasts over `[1, C, 7, 7]` run as long vector loops), reductions, and the
//! anchor nests of [`gemm`] and [`pool`]. Large nests run their outer loops on the OpenMP pool
//! (`num_threads(nt)`); small ones stay on the calling thread (a parallel region costs about
//! 2 µs).
//!
//! Values inside a loop body are common sub-expressions: each (node, index) is computed once
//! per body into a `const` temporary.

pub mod depthwise;
pub mod gemm;
pub mod pointwise;
pub mod pool;
pub mod prelude;
pub mod scalar;

use super::graph::{class, Class, KGraph, Lit, NOp, Node, NodeId, PadMode, Red, TakeMode};
use super::index::{flat, unflat, Ix, Vars};
use crate::ops::layout::Layout;
use crate::runtime::exec::tensor::elem_size;
use prelude::{Feature, Isa};
use scalar::{ctype, storage, CV};
use std::collections::{BTreeSet, HashMap};

/// The placeholder for the kernel's symbol in generated text (replaced once the text is
/// hashed, so the name is a function of the code).
pub const SYM: &str = "KSYM";

/// Nests with fewer element operations than this run on one thread: starting a parallel region
/// wakes sleeping threads, which costs as much as a copy of some 100,000 floats on one thread
/// (docs/native.md, "When a nest runs in parallel").
const PAR_MIN: usize = 1 << 18;

/// Where a materialized node lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Home {
    Out(usize),
    /// Byte offset in the shared scratch area.
    Scratch(usize),
}

/// One loop nest.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Nest {
    /// An elementwise or injective node over its own shape.
    Map(NodeId),
    /// A concatenation, one loop per part.
    Concat(NodeId),
    /// An anchor and the root of its epilogue (the anchor itself when it has none).
    Anchor(NodeId, NodeId),
    /// Output `j` is a copy of node `n` (an argument, a literal, or an output twice).
    Copy(NodeId, usize),
}

/// A packed constant operand: computed by `KSYM_pack<j>` from the arguments `args`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pack {
    /// The kernel arguments the packing reads.
    pub args: Vec<usize>,
    /// Its size in bytes.
    pub bytes: usize,
}

/// A generated kernel.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The kernel functions (with [`SYM`] as the name placeholder).
    pub body: String,
    /// Prelude parts it needs.
    pub features: BTreeSet<Feature>,
    /// Bytes of shared scratch memory.
    pub scratch: usize,
    /// Bytes of scratch memory per thread.
    pub scratch_per_thread: usize,
    /// Packed operands.
    pub packs: Vec<Pack>,
}

/// Materialization decisions.
struct Plan {
    home: Vec<Option<Home>>,
    /// The anchor whose nest computes a node's value without storing it (epilogue members and
    /// the anchor itself): the node is only readable inside that nest.
    fused: Vec<bool>,
    /// The anchor whose nest computes a fused node.
    fused_in: Vec<Option<NodeId>>,
    nests: Vec<Nest>,
    scratch: usize,
}

fn inline_cost(g: &KGraph, mat: &[bool], n: NodeId, memo: &mut HashMap<NodeId, u32>) -> u32 {
    // Iterative post-order over inline operands.
    let mut stack = vec![(n, false)];
    while let Some((x, done)) = stack.pop() {
        if memo.contains_key(&x) {
            continue;
        }
        let node = &g.nodes[x];
        let leaf = matches!(node.op, NOp::Arg(_) | NOp::Lit(_)) || (mat[x] && x != n);
        if leaf {
            memo.insert(x, if matches!(node.op, NOp::Lit(_)) { 0 } else { 1 });
            continue;
        }
        let ops = node.op.operands();
        if !done {
            stack.push((x, true));
            for o in ops {
                if !memo.contains_key(&o) {
                    stack.push((o, false));
                }
            }
            continue;
        }
        let own = match &node.op {
            NOp::Un(u, _) => scalar::unary_cost(*u),
            NOp::Bin(super::graph::Bin::Div, _, _) => 4,
            NOp::Bin(super::graph::Bin::Pow, _, _) => 10,
            NOp::Take { .. } => 3,
            NOp::Pad { .. } => 2,
            op if op.is_map() => 1,
            _ => 0,
        };
        let sum: u32 = ops.iter().map(|o| memo.get(o).copied().unwrap_or(1)).sum();
        memo.insert(x, own.saturating_add(sum));
    }
    memo.get(&n).copied().unwrap_or(1)
}

fn users(g: &KGraph) -> Vec<Vec<NodeId>> {
    let mut u = vec![Vec::new(); g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        let mut ops = n.op.operands();
        ops.sort_unstable();
        ops.dedup();
        for o in ops {
            u[o].push(i);
        }
    }
    u
}

/// The epilogue root of anchor `a` (`a` itself when no chain qualifies) and the chain's
/// members other than `a` (the root included): nodes after `a` only, so an operand computed
/// before the anchor is never taken into its nest, even when it has the anchor's shape.
fn epilogue(
    g: &KGraph,
    a: NodeId,
    users: &[Vec<NodeId>],
    is_out: &[bool],
) -> (NodeId, Vec<NodeId>) {
    let n = g.nodes.len();
    let dims = &g.nodes[a].dims;
    let mut in_s = vec![false; n];
    in_s[a] = true;
    let mut s = Vec::new();
    for x in a + 1..n {
        let node = &g.nodes[x];
        if !node.op.is_map() || node.dims != *dims {
            continue;
        }
        let ops = node.op.operands();
        let touches = ops.iter().any(|&o| in_s[o]);
        let identity = ops
            .iter()
            .all(|&o| !in_s[o] || g.nodes[o].dims == node.dims);
        if touches && identity {
            in_s[x] = true;
            s.push(x);
        }
    }
    if s.is_empty() {
        return (a, Vec::new());
    }
    // Descendants of `a`.
    let mut desc = vec![false; n];
    desc[a] = true;
    for x in a + 1..n {
        if g.nodes[x].op.operands().iter().any(|&o| desc[o]) {
            desc[x] = true;
        }
    }
    for &r in s.iter().rev() {
        // The chain: members of S reaching `r` through members of S.
        let mut chain = vec![false; n];
        let mut stack = vec![r];
        while let Some(x) = stack.pop() {
            if chain[x] || !in_s[x] || x == a {
                continue;
            }
            chain[x] = true;
            stack.extend(g.nodes[x].op.operands());
        }
        let mut ok = users[a].iter().all(|&u| chain[u]) && !is_out[a];
        for x in 0..n {
            if !ok {
                break;
            }
            if !chain[x] {
                continue;
            }
            if x != r && (is_out[x] || users[x].iter().any(|&u| !chain[u])) {
                ok = false;
            }
            for o in g.nodes[x].op.operands() {
                if !chain[o] && o != a && desc[o] {
                    ok = false;
                }
            }
        }
        if ok {
            return (r, (0..n).filter(|&x| chain[x]).collect());
        }
    }
    (a, Vec::new())
}

fn make_plan(g: &KGraph) -> Plan {
    let n = g.nodes.len();
    let us = users(g);
    let mut is_out = vec![false; n];
    for &o in &g.outputs {
        is_out[o] = true;
    }
    let mut mat = vec![false; n];
    let mut fused = vec![false; n];
    let mut fused_in: Vec<Option<NodeId>> = vec![None; n];
    let mut nests: Vec<Nest> = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        if is_out[i] && !matches!(node.op, NOp::Arg(_) | NOp::Lit(_)) {
            mat[i] = true;
        }
        if matches!(node.op, NOp::Concat(..)) {
            mat[i] = true;
        }
    }
    // Anchors and their epilogues.
    let mut root_of: Vec<Option<NodeId>> = vec![None; n];
    for a in 0..n {
        if !g.nodes[a].op.is_anchor() {
            continue;
        }
        let (r, chain) = epilogue(g, a, &us, &is_out);
        root_of[a] = Some(r);
        if r != a {
            // The chain's members are computed inside the anchor's nest.
            for x in chain {
                if x != r {
                    fused[x] = true;
                    fused_in[x] = Some(a);
                }
            }
            fused[a] = true;
            fused_in[a] = Some(a);
        }
        mat[r] = true;
    }
    // Operands read many times by an anchor (a convolution's taps, a pooling window): not
    // recomputed when they cost more than a load and an operation.
    let mut memo = HashMap::new();
    for node in &g.nodes {
        let reread = match node.op {
            NOp::Conv(d, _, geom) if geom.kh * geom.kw > 1 => Some(d),
            NOp::Pool(d, win) if win.size.0 * win.size.1 > 1 => Some(d),
            _ => None,
        };
        if let Some(d) = reread {
            if !matches!(g.nodes[d].op, NOp::Arg(_) | NOp::Lit(_))
                && !mat[d]
                && inline_cost(g, &mat, d, &mut memo) > 3
            {
                mat[d] = true;
                memo.clear();
            }
        }
    }
    // Shared inline nodes that are not cheap.
    let owner = |c: NodeId, mat: &[bool]| mat[c] || g.nodes[c].op.is_anchor();
    let mut owners: Vec<BTreeSet<NodeId>> = vec![BTreeSet::new(); n];
    for x in (0..n).rev() {
        if matches!(g.nodes[x].op, NOp::Arg(_) | NOp::Lit(_)) {
            continue;
        }
        if let Some(a) = fused_in[x] {
            owners[x] = [a].into_iter().collect();
            continue;
        }
        if mat[x] || g.nodes[x].op.is_anchor() {
            owners[x] = [x].into_iter().collect();
            continue;
        }
        let mut own = BTreeSet::new();
        for &c in &us[x] {
            if owner(c, &mat) {
                own.insert(c);
            } else {
                own.extend(owners[c].iter().copied());
            }
        }
        if own.len() >= 2 && inline_cost(g, &mat, x, &mut memo) >= 8 {
            mat[x] = true;
            memo.clear();
            owners[x] = [x].into_iter().collect();
        } else {
            owners[x] = own;
        }
    }
    // Homes.
    let mut home: Vec<Option<Home>> = vec![None; n];
    let mut first_out: HashMap<NodeId, usize> = HashMap::new();
    let mut copies = Vec::new();
    for (j, &o) in g.outputs.iter().enumerate() {
        let node = &g.nodes[o];
        if matches!(node.op, NOp::Arg(_) | NOp::Lit(_)) || first_out.contains_key(&o) {
            copies.push(Nest::Copy(o, j));
        } else {
            first_out.insert(o, j);
            home[o] = Some(Home::Out(j));
        }
    }
    let mut scratch = 0usize;
    for x in 0..n {
        if mat[x] && home[x].is_none() && !matches!(g.nodes[x].op, NOp::Arg(_) | NOp::Lit(_)) {
            let es = elem_size(g.nodes[x].dtype).unwrap_or(4);
            scratch = scratch.next_multiple_of(64);
            home[x] = Some(Home::Scratch(scratch));
            scratch += g.nodes[x].numel() * es;
        }
    }
    // Nests.
    let mut producer: HashMap<NodeId, usize> = HashMap::new();
    for (a, root) in root_of.iter().enumerate() {
        if let Some(r) = *root {
            producer.insert(r, nests.len());
            nests.push(Nest::Anchor(a, r));
        }
    }
    for (x, &m) in mat.iter().enumerate() {
        if m && !producer.contains_key(&x) {
            producer.insert(x, nests.len());
            nests.push(if matches!(g.nodes[x].op, NOp::Concat(..)) {
                Nest::Concat(x)
            } else {
                Nest::Map(x)
            });
        }
    }
    // Dependencies: materialized nodes read through inline trees.
    let reads = |nest: &Nest| -> Vec<NodeId> {
        let starts: Vec<NodeId> = match nest {
            Nest::Map(x) | Nest::Concat(x) => g.nodes[*x].op.operands(),
            Nest::Anchor(a, r) => {
                let mut v = g.nodes[*a].op.operands();
                v.push(*r);
                v
            }
            Nest::Copy(x, _) => vec![*x],
        };
        let mut out = Vec::new();
        let mut seen = vec![false; n];
        let mut stack = starts;
        let own = match nest {
            Nest::Anchor(a, r) => Some((*a, *r)),
            _ => None,
        };
        while let Some(x) = stack.pop() {
            if seen[x] {
                continue;
            }
            seen[x] = true;
            let inside = own.is_some_and(|(a, r)| x == r || (fused[x] && x != a));
            if inside {
                stack.extend(g.nodes[x].op.operands());
                continue;
            }
            if own.is_some_and(|(a, _)| x == a) {
                continue;
            }
            if mat[x] {
                out.push(x);
                continue;
            }
            if !matches!(g.nodes[x].op, NOp::Arg(_) | NOp::Lit(_)) {
                stack.extend(g.nodes[x].op.operands());
            }
        }
        out
    };
    let all: Vec<Nest> = nests.into_iter().chain(copies).collect();
    let deps: Vec<Vec<usize>> = all
        .iter()
        .map(|nest| {
            reads(nest)
                .into_iter()
                .filter_map(|x| producer.get(&x).copied())
                .collect()
        })
        .collect();
    // Kahn's algorithm, earliest nest first.
    let mut indeg: Vec<usize> = deps.iter().map(|d| d.len()).collect();
    let mut rdeps: Vec<Vec<usize>> = vec![Vec::new(); all.len()];
    for (i, d) in deps.iter().enumerate() {
        for &j in d {
            rdeps[j].push(i);
        }
    }
    let mut ready: BTreeSet<usize> = (0..all.len()).filter(|&i| indeg[i] == 0).collect();
    let mut order = Vec::with_capacity(all.len());
    while let Some(&i) = ready.iter().next() {
        ready.remove(&i);
        order.push(all[i].clone());
        for &k in &rdeps[i] {
            indeg[k] -= 1;
            if indeg[k] == 0 {
                ready.insert(k);
            }
        }
    }
    Plan {
        home,
        fused,
        fused_in,
        nests: order,
        scratch,
    }
}

/// Generates the kernel of a unit.
pub fn generate(g: &KGraph, isa: Isa) -> Result<Generated, String> {
    let plan = make_plan(g);
    if plan.nests.len() < plan.home.iter().filter(|h| h.is_some()).count() {
        return Err("internal error: a cycle among the loop nests".into());
    }
    let mut cx = Cx::new(g, &plan, isa);
    cx.kernel()?;
    Ok(Generated {
        body: cx.text,
        features: cx.features,
        scratch: cx.scratch_total,
        scratch_per_thread: cx.per_thread,
        packs: cx.packs,
    })
}

/// The code writer and value emitter of one kernel.
pub struct Cx<'a> {
    g: &'a KGraph,
    plan: &'a Plan,
    pub isa: Isa,
    pub vars: Vars,
    text: String,
    indent: usize,
    memo: Vec<HashMap<(NodeId, String), CV>>,
    tmp: usize,
    /// Values of nodes computed by the current anchor nest (the anchor's result).
    over: Vec<(NodeId, CV)>,
    /// The node a map nest is defining (read from its definition, not its home).
    defining: Option<NodeId>,
    /// The anchor whose nest is being generated.
    anchor: Option<NodeId>,
    pub features: BTreeSet<Feature>,
    /// Shared scratch bytes used so far (homes first, then anchors' buffers).
    pub scratch_total: usize,
    /// Per-thread scratch bytes (the maximum over nests).
    pub per_thread: usize,
    pub packs: Vec<Pack>,
    /// The text of the pack functions.
    pub pack_fns: String,
    /// Whether the code is inside a pack function (arguments only).
    pub in_pack: bool,
    pub parallel: bool,
    /// Accesses recorded while probing a nest for axes to merge.
    probe: Option<Vec<Ix>>,
    /// The first problem met (reported after generation).
    error: Option<String>,
}

impl<'a> Cx<'a> {
    fn new(g: &'a KGraph, plan: &'a Plan, isa: Isa) -> Cx<'a> {
        Cx {
            g,
            plan,
            isa,
            vars: Vars::default(),
            text: String::new(),
            indent: 0,
            memo: vec![HashMap::new()],
            tmp: 0,
            over: Vec::new(),
            defining: None,
            anchor: None,
            features: BTreeSet::new(),
            scratch_total: plan.scratch,
            per_thread: 0,
            packs: Vec::new(),
            pack_fns: String::new(),
            in_pack: false,
            parallel: false,
            probe: None,
            error: None,
        }
    }

    /// The graph.
    pub fn g(&self) -> &'a KGraph {
        self.g
    }

    /// Node `n`.
    pub fn node(&self, n: NodeId) -> &'a Node {
        &self.g.nodes[n]
    }

    /// Appends a line at the current indentation.
    pub fn line(&mut self, s: impl AsRef<str>) {
        for _ in 0..self.indent {
            self.text.push_str("  ");
        }
        self.text.push_str(s.as_ref());
        self.text.push('\n');
    }

    /// Opens a block (`header {`) with its own scope of values.
    pub fn open(&mut self, header: impl AsRef<str>) {
        self.line(format!("{} {{", header.as_ref()));
        self.indent += 1;
        self.memo.push(HashMap::new());
    }

    /// Closes the innermost block.
    pub fn close(&mut self) {
        self.memo.pop();
        self.indent -= 1;
        self.line("}");
    }

    /// A fresh temporary name.
    pub fn fresh(&mut self, prefix: &str) -> String {
        self.tmp += 1;
        format!("{prefix}{}", self.tmp)
    }

    /// Binds a value to a `const` temporary (literals and names are returned as they are).
    pub fn bind(&mut self, v: CV) -> CV {
        if is_simple(&v.text) {
            return v;
        }
        let t = self.fresh("t");
        self.line(format!("const {} {t} = {};", ctype(v.class), v.text));
        CV::new(t, v.class)
    }

    /// Records a problem; generation fails with the first one.
    pub fn fail(&mut self, msg: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(msg.into());
        }
    }

    /// Sets the value of node `n` inside the current anchor nest.
    pub fn set_override(&mut self, n: NodeId, v: CV) {
        self.over.retain(|(m, _)| *m != n);
        self.over.push((n, v));
    }

    /// Removes every override.
    pub fn clear_overrides(&mut self) {
        self.over.clear();
    }

    /// The C name of argument `i`.
    pub fn arg_name(i: usize) -> String {
        format!("a{i}")
    }

    /// The C name of node `x`'s home buffer.
    fn home_name(&self, x: NodeId) -> Option<String> {
        match self.plan.home[x]? {
            Home::Out(j) => Some(format!("o{j}")),
            Home::Scratch(_) => Some(format!("s{x}")),
        }
    }

    /// The C name of a buffer holding node `n`'s value in row-major order (an argument or a
    /// computed home), if there is one.
    pub fn buffer_of(&self, n: NodeId) -> Option<String> {
        match self.node(n).op {
            NOp::Arg(i) => Some(Cx::arg_name(i)),
            _ if self.plan.fused[n] || self.defining == Some(n) || self.in_pack => None,
            NOp::Reshape(a) => self.buffer_of(a),
            _ => self.home_name(n),
        }
    }

    /// Stores value `v` at coordinates `ix` of node `x`'s home.
    pub fn store(&mut self, x: NodeId, ix: &[Ix], v: &CV) {
        let Some(buf) = self.home_name(x) else {
            self.fail("internal error: a store to a node without a buffer");
            return;
        };
        self.store_to(&buf, x, ix, v);
    }

    /// Stores value `v` at coordinates `ix` of a buffer shaped like node `x`.
    pub fn store_to(&mut self, buf: &str, x: NodeId, ix: &[Ix], v: &CV) {
        let node = self.node(x);
        let off = flat(ix, &node.dims);
        if let Some(p) = &mut self.probe {
            p.push(off.clone());
        }
        let sv = scalar::store_value(v, node.dtype);
        let offc = off.c(&self.vars);
        self.line(format!("{buf}[{offc}] = {sv};"));
    }

    /// The value of node `n` at coordinates `ix` (of `n`'s shape).
    pub fn val(&mut self, n: NodeId, ix: &[Ix]) -> CV {
        if let Some((_, v)) = self.over.iter().find(|(m, _)| *m == n) {
            return v.clone();
        }
        let key: String = ix
            .iter()
            .map(|i| i.c(&self.vars))
            .collect::<Vec<_>>()
            .join(",");
        for scope in self.memo.iter().rev() {
            if let Some(v) = scope.get(&(n, key.clone())) {
                return v.clone();
            }
        }
        let node = self.node(n);
        let v = match (&node.op, self.plan.home[n]) {
            (NOp::Lit(l), _) => scalar::literal(*l, class(node.dtype)),
            (NOp::Arg(i), _) => {
                let off = flat(ix, &node.dims);
                self.load(&Cx::arg_name(*i), node.dtype, &off)
            }
            (_, Some(_)) if self.defining != Some(n) && !self.in_pack => {
                let off = flat(ix, &node.dims);
                let buf = self.home_name(n).unwrap_or_default();
                self.load(&buf, node.dtype, &off)
            }
            (_, Some(_)) if self.in_pack => {
                self.fail("internal error: a packed operand reads a computed buffer");
                CV::new("0", class(node.dtype))
            }
            _ if self.plan.fused[n] && self.plan.fused_in[n] != self.anchor => {
                self.fail("internal error: an epilogue value read outside its nest");
                CV::new("0", class(node.dtype))
            }
            _ => self.compute(n, ix),
        };
        let v = self.bind(v);
        if let Some(scope) = self.memo.last_mut() {
            scope.insert((n, key), v.clone());
        }
        v
    }

    fn load(&mut self, buf: &str, d: crate::ir::DType, off: &Ix) -> CV {
        if let Some(p) = &mut self.probe {
            p.push(off.clone());
        }
        let offc = off.c(&self.vars);
        scalar::load(buf, d, &offc)
    }

    /// Coordinates of operand `o` (broadcast NumPy-style against `out` dims).
    fn bcast(&self, ix: &[Ix], out: &[usize], o: NodeId) -> Vec<Ix> {
        let od = &self.node(o).dims;
        let off = out.len().saturating_sub(od.len());
        od.iter()
            .enumerate()
            .map(|(k, &d)| {
                if d == 1 {
                    Ix::konst(0)
                } else {
                    ix.get(k + off).cloned().unwrap_or_default()
                }
            })
            .collect()
    }

    fn operand(&mut self, n: NodeId, o: NodeId, ix: &[Ix]) -> CV {
        let dims = self.node(n).dims.clone();
        let oi = self.bcast(ix, &dims, o);
        self.val(o, &oi)
    }

    /// Computes an inline node from its definition.
    fn compute(&mut self, n: NodeId, ix: &[Ix]) -> CV {
        let node = self.node(n);
        let d = node.dtype;
        match &node.op {
            NOp::Arg(_) | NOp::Lit(_) => self.val(n, ix),
            NOp::Un(u, a) => {
                let x = self.operand(n, *a, ix);
                scalar::unary(*u, &x, d)
            }
            NOp::Bin(op, a, b) => {
                let x = self.operand(n, *a, ix);
                let y = self.operand(n, *b, ix);
                let c = if x.class == Class::F || y.class == Class::F {
                    Class::F
                } else {
                    Class::I
                };
                let x = CV::new(scalar::convert(&x, c), c);
                let y = CV::new(scalar::convert(&y, c), c);
                let exponent = match self.node(*b).op {
                    NOp::Lit(Lit::F(e)) => Some(e),
                    NOp::Lit(Lit::I(e)) => Some(e as f64),
                    _ => None,
                };
                scalar::binary(*op, &x, &y, d, exponent, "err")
            }
            NOp::Cmp(op, a, b) => {
                let x = self.operand(n, *a, ix);
                let y = self.operand(n, *b, ix);
                let c = if x.class == y.class {
                    x.class
                } else {
                    Class::F
                };
                let x = CV::new(scalar::convert(&x, c), c);
                let y = CV::new(scalar::convert(&y, c), c);
                scalar::compare(*op, &x, &y)
            }
            NOp::Clip(a, lo, hi) => {
                let x = self.operand(n, *a, ix);
                let x = self.bind(x);
                CV::new(
                    format!(
                        // The interpreter's `x.max(lo).min(hi)` (Rust's: on a tie the
                        // receiver, so clip(-0, 0, 6) is -0): `lo > x ? lo : x`, then
                        // `hi < t ? hi : t`; NaN passes through both selects. Compiles to
                        // maxps/minps with these operand orders (fmaxf/fminf are calls).
                        "({2} < ({1} > {0} ? {1} : {0}) ? {2} : ({1} > {0} ? {1} : {0}))",
                        x.text,
                        scalar::float_lit(*lo),
                        scalar::float_lit(*hi)
                    ),
                    Class::F,
                )
            }
            NOp::LeakyRelu(a, alpha) => {
                let x = self.operand(n, *a, ix);
                CV::new(
                    format!(
                        "({0} < 0.0f ? {1} * {0} : {0})",
                        x.text,
                        scalar::float_lit(*alpha)
                    ),
                    Class::F,
                )
            }
            NOp::Cast(a) => {
                let x = self.operand(n, *a, ix);
                scalar::cast(&x, d)
            }
            NOp::Where(c, a, b) => {
                let cv = self.operand(n, *c, ix);
                let x = self.operand(n, *a, ix);
                let y = self.operand(n, *b, ix);
                let cond = match cv.class {
                    Class::F | Class::D => format!("({} != 0)", cv.text),
                    _ => format!("({} != 0)", cv.text),
                };
                let k = class(d);
                CV::new(
                    format!(
                        "({cond} ? {} : {})",
                        scalar::convert(&x, k),
                        scalar::convert(&y, k)
                    ),
                    k,
                )
            }
            NOp::Reshape(a) => {
                let f = flat(ix, &node.dims);
                let ai = unflat(&f, &self.node(*a).dims, &self.vars);
                self.val(*a, &ai)
            }
            NOp::Transpose(a, perm) => {
                let mut ai = vec![Ix::konst(0); perm.len()];
                for (k, &p) in perm.iter().enumerate() {
                    ai[p] = ix[k].clone();
                }
                self.val(*a, &ai)
            }
            NOp::Broadcast(a) => self.operand(n, *a, ix),
            NOp::Slice(a, axis, begin) => {
                let mut ai = ix.to_vec();
                ai[*axis] = ai[*axis].plus(*begin as i64);
                self.val(*a, &ai)
            }
            NOp::Strided(a, plan) => {
                let ai: Vec<Ix> = ix
                    .iter()
                    .zip(plan)
                    .map(|(i, &(start, step))| i.scale(step).plus(start))
                    .collect();
                self.val(*a, &ai)
            }
            NOp::Take {
                data,
                idx,
                axis,
                batch_dims,
                mode,
            } => {
                let dd = self.node(*data).dims.clone();
                let il = self.node(*idx).dims.len();
                let (axis, bd) = (*axis, *batch_dims);
                let nidx = il - bd;
                let mut ii: Vec<Ix> = ix[..bd].to_vec();
                ii.extend(ix[axis..axis + nidx].iter().cloned());
                let raw = self.val(*idx, &ii);
                let raw = scalar::convert(&raw, Class::I);
                let ext = dd[axis] as i64;
                let t = self.fresh("g");
                match mode {
                    TakeMode::Clip => self.line(format!(
                        "const long {t} = clampl((long)({raw}), 0, {});",
                        ext - 1
                    )),
                    TakeMode::Wrap => {
                        self.line(format!("const long {t} = wrapl((long)({raw}), {ext});"))
                    }
                    TakeMode::Fast => {
                        self.line(format!("long {t} = (long)({raw});"));
                        self.line(format!(
                            "if ({t} < 0 || {t} >= {ext}) {{ __atomic_store_n(&err, 2, __ATOMIC_RELAXED); {t} = 0; }}"
                        ));
                    }
                }
                let mut di: Vec<Ix> = ix[..axis].to_vec();
                di.push(Ix::opaque(t, 0, ext - 1));
                di.extend(ix[axis + nidx..].iter().cloned());
                self.val(*data, &di)
            }
            NOp::Pad {
                data,
                widths,
                mode,
                value,
            } => {
                let dd = self.node(*data).dims.clone();
                let mut conds = Vec::new();
                let mut di = Vec::with_capacity(dd.len());
                for (k, (&(b, a), &ext)) in widths.iter().zip(&dd).enumerate() {
                    let x = ix[k].plus(-(b as i64));
                    if b == 0 && a == 0 {
                        di.push(x);
                        continue;
                    }
                    let xc = x.c(&self.vars);
                    let e = ext as i64;
                    match mode {
                        PadMode::Constant => {
                            conds.push(format!("({xc}) >= 0 && ({xc}) < {e}"));
                            if e == 0 {
                                di.push(Ix::konst(0));
                            } else {
                                di.push(Ix::opaque(
                                    format!("clampl({xc}, 0, {})", e - 1),
                                    0,
                                    e - 1,
                                ));
                            }
                        }
                        PadMode::Edge => {
                            di.push(Ix::opaque(format!("clampl({xc}, 0, {})", e - 1), 0, e - 1))
                        }
                        PadMode::Reflect => {
                            di.push(Ix::opaque(format!("reflectl({xc}, {e})"), 0, e - 1))
                        }
                    }
                }
                let k = class(d);
                if conds.is_empty() {
                    return self.val(*data, &di);
                }
                let pv = self.val(*value, &vec![Ix::konst(0); self.node(*value).dims.len()]);
                let empty = dd.contains(&0);
                if empty {
                    return CV::new(scalar::convert(&pv, k), k);
                }
                let x = self.val(*data, &di);
                CV::new(
                    format!(
                        "(({}) ? {} : {})",
                        conds.join(" && "),
                        scalar::convert(&x, k),
                        scalar::convert(&pv, k)
                    ),
                    k,
                )
            }
            NOp::Layout(a, from, to) => {
                let ai = self.layout_coords(ix, from, to, *a);
                self.val(*a, &ai)
            }
            NOp::Concat(..)
            | NOp::Reduce { .. }
            | NOp::Dense(..)
            | NOp::BatchMatmul { .. }
            | NOp::Conv(..)
            | NOp::Pool(..) => {
                self.fail("internal error: an anchor read inline");
                CV::new("0", class(d))
            }
        }
    }

    /// Source coordinates of a layout change, from the destination's.
    fn layout_coords(&mut self, ix: &[Ix], from: &str, to: &str, src: NodeId) -> Vec<Ix> {
        let (Ok(lf), Ok(lt)) = (Layout::parse(from), Layout::parse(to)) else {
            self.fail("invalid layout");
            return vec![Ix::konst(0); self.node(src).dims.len()];
        };
        // Primal coordinate of each letter.
        let mut primal: Vec<(char, Ix)> = Vec::new();
        for (k, a) in lt.axes().iter().enumerate() {
            let contrib = match a.factor {
                Some(_) => ix[k].clone(),
                None => ix[k].scale(lt.split_factor(a.name).unwrap_or(1)),
            };
            match primal.iter_mut().find(|(c, _)| *c == a.name) {
                Some((_, v)) => *v = v.add(&contrib),
                None => primal.push((a.name, contrib)),
            }
        }
        lf.axes()
            .iter()
            .map(|a| {
                let v = primal
                    .iter()
                    .find(|(c, _)| *c == a.name)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                match (a.factor, lf.split_factor(a.name)) {
                    (Some(f), _) => v.rem(f, &self.vars),
                    (None, Some(f)) => v.div(f, &self.vars),
                    (None, None) => v,
                }
            })
            .collect()
    }

    /// The prologue: argument, output and scratch pointers.
    fn pointers(&mut self) {
        for (i, a) in self.g.args.iter().enumerate() {
            let t = storage(a.shape.dtype);
            self.line(format!(
                "const {t}* restrict {} = (const {t}*)A[{i}];",
                Cx::arg_name(i)
            ));
        }
        for (j, &o) in self.g.outputs.iter().enumerate() {
            let t = storage(self.node(o).dtype);
            self.line(format!("{t}* restrict o{j} = ({t}*)O[{j}];"));
        }
        for (x, h) in self.plan.home.iter().enumerate() {
            if let Some(Home::Scratch(off)) = h {
                let t = storage(self.node(x).dtype);
                self.line(format!("{t}* restrict s{x} = ({t}*)(S + {off});"));
            }
        }
    }

    /// The whole kernel.
    fn kernel(&mut self) -> Result<(), String> {
        self.indent = 1;
        let nests = self.plan.nests.clone();
        let mut main = String::new();
        for nest in &nests {
            self.text = String::new();
            let d = self.describe(nest);
            self.line(format!("/* {d} */"));
            match nest {
                Nest::Map(x) => self.map_nest(*x),
                Nest::Concat(x) => self.concat_nest(*x),
                Nest::Copy(x, j) => self.copy_nest(*x, *j),
                Nest::Anchor(a, r) => self.anchor_nest(*a, *r),
            }
            main.push_str(&self.text);
            if let Some(e) = &self.error {
                return Err(e.clone());
            }
        }
        self.text = String::new();
        self.indent = 0;
        self.line(format!(
            "int {SYM}(void* const* restrict A, void* const* restrict O, void* const* restrict P, char* restrict S, int nt) {{"
        ));
        self.indent = 1;
        self.line("int err = 0;");
        self.line("(void)A; (void)O; (void)P; (void)S; (void)nt;");
        self.scratch_total = self.scratch_total.next_multiple_of(64);
        self.per_thread = self.per_thread.next_multiple_of(64);
        self.line(format!(
            "const long PT_BASE = {}L, PT_STRIDE = {}L; (void)PT_BASE; (void)PT_STRIDE;",
            self.scratch_total, self.per_thread
        ));
        self.pointers();
        self.text.push_str(&main);
        self.line("return err;");
        self.indent = 0;
        self.line("}");
        let packs = std::mem::take(&mut self.pack_fns);
        self.text.push_str(&packs);
        Ok(())
    }

    fn describe(&self, nest: &Nest) -> String {
        let name = |x: NodeId| {
            format!("{:?}", self.node(x).op)
                .chars()
                .take(40)
                .collect::<String>()
        };
        match nest {
            Nest::Map(x) => format!("node {x}: {}", name(*x).replace("*/", "")),
            Nest::Concat(x) => format!("node {x}: concatenate"),
            Nest::Copy(x, j) => format!("output {j}: copy of node {x}"),
            Nest::Anchor(a, r) => format!("node {a} with epilogue up to node {r}"),
        }
    }

    /// Whether a nest of `work` element operations runs in parallel.
    pub fn parallel_for(&self, work: usize) -> bool {
        work >= PAR_MIN
    }

    /// The pragma that runs the next loop on the pool.
    pub fn omp(&mut self, collapse: usize) {
        self.parallel = true;
        if collapse > 1 {
            self.line(format!(
                "#pragma omp parallel for num_threads(nt) if(nt > 1) schedule(static) collapse({collapse})"
            ));
        } else {
            self.line("#pragma omp parallel for num_threads(nt) if(nt > 1) schedule(static)");
        }
    }

    /// Opens loops over `dims` (with fresh variables) and returns the variables. The first
    /// `par` loops are collapsed onto the pool when `par > 0`.
    pub fn loops(&mut self, dims: &[usize], par: usize) -> Vec<u32> {
        let mut vs = Vec::new();
        for (k, &d) in dims.iter().enumerate() {
            let name = self.fresh("i");
            let v = self.vars.fresh(name.clone(), d);
            if k == 0 && par > 0 {
                self.omp(par);
            }
            self.open(format!("for (long {name} = 0; {name} < {d}L; {name}++)"));
            vs.push(v);
        }
        vs
    }

    /// Where the next line will go, for [`Cx::simd_at`].
    pub fn mark(&self) -> usize {
        self.text.len()
    }

    /// Puts `#pragma omp simd` before the loop whose header is the first line after `at` (a
    /// [`Cx::mark`]), once the loop is emitted. The loop's iterations must be independent (each
    /// writes its own output elements and only reads inputs) and it must not be collapsed into
    /// a parallel loop. Not when the body sets the error flag (an atomic store) or holds a loop
    /// of its own. The pragma is what vectorises these loops without `-ffast-math`: the
    /// kernel's pointers lose `restrict` in the function OpenMP outlines, so GCC otherwise keeps
    /// them scalar, recomputing loop-invariant square roots and divisors per element.
    pub fn simd_at(&mut self, at: usize) {
        let body = &self.text[at..];
        let Some(first) = body.find('\n') else {
            return;
        };
        let header = &body[..first];
        if !header.trim_start().starts_with("for (")
            || body.contains("__atomic")
            || body[first..].contains("for (")
        {
            return;
        }
        let pad: String = header.chars().take_while(|c| *c == ' ').collect();
        self.text
            .insert_str(at, &format!("{pad}#pragma omp simd\n"));
    }

    /// Opens `for ({var} = first; {var} < end; {var}++)` over block `block` (a C expression) of
    /// `n` items cut into `count` blocks whose sizes differ by at most one, so that the pool's
    /// static schedule gives every thread as even a share as the count allows (blocks of
    /// `ceil(n / count)` leave the last one short: 49 panels in 13 blocks of 4 share 28 : 21
    /// between two threads, in 16 blocks of 3 or 4, 24 : 25). `count` must be the extent of the
    /// caller's loop over `block`, between 1 and `n`: a larger one would give blocks past `n`.
    pub fn open_block(&mut self, var: &str, block: &str, n: usize, count: usize) {
        debug_assert!(
            (1..=n).contains(&count),
            "{count} blocks of {n} items: the caller's loop and the blocks disagree"
        );
        self.open(format!(
            "for (long {var} = {block} * {n}L / {count}L; {var} < ({block} + 1) * {n}L / {count}L; {var}++)"
        ));
    }

    /// Closes `n` loops.
    pub fn close_n(&mut self, n: usize) {
        for _ in 0..n {
            self.close();
        }
    }

    /// How many leading loops of `dims` to collapse for a parallel nest (never the last when
    /// there are several).
    pub fn collapse_for(dims: &[usize]) -> usize {
        if dims.len() <= 1 {
            return dims.len();
        }
        let mut p = 1usize;
        let mut c = 0;
        for &d in &dims[..dims.len() - 1] {
            p *= d;
            c += 1;
            if p >= 64 {
                break;
            }
        }
        c
    }

    fn map_nest(&mut self, x: NodeId) {
        let dims = self.node(x).dims.clone();
        let cost = {
            let mut memo = HashMap::new();
            let mat: Vec<bool> = self.plan.home.iter().map(|h| h.is_some()).collect();
            inline_cost(self.g, &mat, x, &mut memo).max(1) as usize
        };
        let total: usize = dims.iter().product();
        if total == 0 {
            return;
        }
        let body = |cx: &mut Cx<'a>, ix: &[Ix]| {
            cx.defining = Some(x);
            let v = cx.val(x, ix);
            cx.store(x, ix, &v);
            cx.defining = None;
        };
        let groups = self.merge_axes(&dims, body);
        self.nest_over(&dims, &groups, total * cost, body);
    }

    /// Groups of adjacent axes of `dims` (as counts of axes) whose every access, recorded by
    /// running `body` on a throwaway copy of the context, is affine with strides that merge.
    fn merge_axes(&mut self, dims: &[usize], body: impl Fn(&mut Cx<'a>, &[Ix])) -> Vec<usize> {
        let r = dims.len();
        if r <= 1 {
            return vec![r];
        }
        let saved_text = std::mem::take(&mut self.text);
        let saved_tmp = self.tmp;
        let saved_err = self.error.clone();
        let saved_vars = self.vars.clone();
        let saved_feat = self.features.clone();
        let saved_par = self.parallel;
        self.memo.push(HashMap::new());
        self.probe = Some(Vec::new());
        let vs: Vec<u32> = dims
            .iter()
            .map(|&d| {
                let name = self.fresh("m");
                self.vars.fresh(name, d)
            })
            .collect();
        let ix: Vec<Ix> = vs.iter().map(|&v| Ix::var(v)).collect();
        body(self, &ix);
        let accesses = self.probe.take().unwrap_or_default();
        self.memo.pop();
        self.text = saved_text;
        self.tmp = saved_tmp;
        self.error = saved_err;
        self.vars = saved_vars;
        self.features = saved_feat;
        self.parallel = saved_par;
        let mut groups: Vec<usize> = vec![1];
        for k in 1..r {
            // An axis of extent 1 merges with its neighbour whatever the accesses say: its
            // coordinate is always 0 (a `[1, N]` nest is one loop of N, not a parallel loop
            // of one iteration).
            let ok = dims[k - 1] == 1
                || dims[k] == 1
                || accesses.iter().all(|o| {
                    match (o.affine_coef(vs[k - 1]), o.affine_coef(vs[k])) {
                        (Some(a), Some(b)) => a == b * dims[k] as i64,
                        _ => false,
                    }
                });
            if ok {
                let last = groups.len() - 1;
                groups[last] += 1;
            } else {
                groups.push(1);
            }
        }
        groups
    }

    /// Emits loops over `dims` with the axes merged in `groups` (counts of adjacent axes) and
    /// runs `body` with the coordinates in `dims`. Parallel when `work` is large.
    fn nest_over(
        &mut self,
        dims: &[usize],
        groups: &[usize],
        work: usize,
        body: impl Fn(&mut Cx<'a>, &[Ix]),
    ) {
        let mut merged = Vec::with_capacity(groups.len());
        let mut k = 0;
        for &g in groups {
            merged.push(dims[k..k + g].iter().product::<usize>());
            k += g;
        }
        let par = self.parallel_for(work);
        let mvals: Vec<Ix>;
        let opened;
        if par && merged.len() == 1 && merged[0] > 8192 {
            // One long loop, shared in chunks.
            const CHUNK: usize = 4096;
            let n = merged[0];
            let c = self.fresh("c");
            let j = self.fresh("j");
            self.omp(1);
            self.open(format!(
                "for (long {c} = 0; {c} < {}L; {c}++)",
                n.div_ceil(CHUNK)
            ));
            self.open(format!(
                "for (long {j} = {c} * {CHUNK}L; {j} < ({c} * {CHUNK}L + {CHUNK}L < {n}L ? {c} * {CHUNK}L + {CHUNK}L : {n}L); {j}++)"
            ));
            let v = self.vars.fresh(j, n);
            mvals = vec![Ix::var(v)];
            opened = 2;
        } else {
            let collapse = if par { Cx::collapse_for(&merged) } else { 0 };
            let vs = self.loops(&merged, collapse);
            mvals = vs.iter().map(|&v| Ix::var(v)).collect();
            opened = merged.len();
        }
        let mut ix = Vec::with_capacity(dims.len());
        let mut k = 0;
        for (gi, &g) in groups.iter().enumerate() {
            ix.extend(unflat(&mvals[gi], &dims[k..k + g], &self.vars));
            k += g;
        }
        body(self, &ix);
        self.close_n(opened);
    }

    fn concat_nest(&mut self, x: NodeId) {
        let NOp::Concat(parts, axis) = self.node(x).op.clone() else {
            return;
        };
        let mut at = 0i64;
        for p in parts {
            let dims = self.node(p).dims.clone();
            let total: usize = dims.iter().product();
            if total > 0 {
                let par = if self.parallel_for(total) {
                    Cx::collapse_for(&dims)
                } else {
                    0
                };
                let vs = self.loops(&dims, par);
                let ix: Vec<Ix> = vs.iter().map(|&v| Ix::var(v)).collect();
                let v = self.val(p, &ix);
                let mut oi = ix.clone();
                oi[axis] = oi[axis].plus(at);
                self.store(x, &oi, &v);
                self.close_n(dims.len());
            }
            at += dims[axis] as i64;
        }
    }

    fn copy_nest(&mut self, x: NodeId, j: usize) {
        let dims = self.node(x).dims.clone();
        let total: usize = dims.iter().product();
        if total == 0 {
            return;
        }
        let groups = vec![dims.len()];
        let buf = format!("o{j}");
        self.nest_over(&dims, &groups, total, |cx, ix| {
            let v = cx.val(x, ix);
            cx.store_to(&buf, x, ix, &v);
        });
    }

    fn anchor_nest(&mut self, a: NodeId, r: NodeId) {
        self.anchor = Some(a);
        self.anchor_body(a, r);
        self.anchor = None;
    }

    fn anchor_body(&mut self, a: NodeId, r: NodeId) {
        match self.node(a).op.clone() {
            NOp::Reduce {
                arg,
                kind,
                reduced,
                keepdims,
            } => self.reduce_nest(a, r, arg, kind, &reduced, keepdims),
            NOp::Dense(..) | NOp::BatchMatmul { .. } | NOp::Conv(..) => gemm::nest(self, a, r),
            NOp::Pool(d, win) => pool::nest(self, a, r, d, win),
            _ => self.fail("internal error: not an anchor"),
        }
    }

    /// Writes the epilogue of anchor `a` for one element: `acc` is the anchor's value at
    /// coordinates `ix` (of the anchor's shape); the root `r`'s value is stored at `ix`.
    pub fn epilogue(&mut self, a: NodeId, r: NodeId, acc: CV, ix: &[Ix]) {
        self.set_override(a, acc);
        let v = if r == a {
            self.over
                .iter()
                .find(|(m, _)| *m == a)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| CV::new("0", Class::F))
        } else {
            self.defining = Some(r);
            let v = self.val(r, ix);
            self.defining = None;
            v
        };
        self.store(r, ix, &v);
        self.clear_overrides();
    }

    /// Opens the loops over the reduced axes (`red_dims`) and gives the reduced operand `arg`
    /// at the current coordinates, as a float.
    fn reduce_operand(
        &mut self,
        arg: NodeId,
        red_dims: &[usize],
        reduced: &[bool],
        keepdims: bool,
        oix: &[Ix],
    ) -> String {
        let rvs = self.loops(red_dims, 0);
        let mut ix = Vec::with_capacity(reduced.len());
        let (mut ko, mut kr) = (0usize, 0usize);
        for (k, &is_red) in reduced.iter().enumerate() {
            if is_red {
                ix.push(Ix::var(rvs[kr]));
                kr += 1;
                if keepdims {
                    ko += 1;
                }
            } else {
                ix.push(oix[if keepdims { k } else { ko }].clone());
                ko += 1;
            }
        }
        let v = self.val(arg, &ix);
        let v = scalar::convert(&v, Class::F);
        self.bind(CV::new(v, Class::F)).text
    }

    fn reduce_nest(
        &mut self,
        a: NodeId,
        r: NodeId,
        arg: NodeId,
        kind: Red,
        reduced: &[bool],
        keepdims: bool,
    ) {
        let in_dims = self.node(arg).dims.clone();
        let out_dims = self.node(a).dims.clone();
        let red_dims: Vec<usize> = in_dims
            .iter()
            .zip(reduced)
            .filter(|(_, &r)| r)
            .map(|(&d, _)| d)
            .collect();
        let count: usize = red_dims.iter().product();
        let total: usize = out_dims.iter().product();
        if total == 0 {
            return;
        }
        let par = if self.parallel_for(total * count.max(1)) && total > 1 {
            Cx::collapse_for(&[out_dims.clone(), vec![1]].concat()).min(out_dims.len())
        } else {
            0
        };
        let ovs = self.loops(&out_dims, par);
        let oix: Vec<Ix> = ovs.iter().map(|&v| Ix::var(v)).collect();
        let acc = self.fresh("acc");
        // Max and min start from the dtype's finite extremes, as the interpreter does.
        let big = self.node(arg).dtype.float_max().unwrap_or(f32::MAX) as f64;
        let init = match kind {
            Red::Sum | Red::Mean => "0.0f".to_string(),
            Red::Max => scalar::float_lit(-big),
            Red::Min => scalar::float_lit(big),
        };
        self.line(format!("float {acc} = {init};"));
        // Sums are the one place where additions may be reassociated: the loop asks for it.
        if matches!(kind, Red::Sum | Red::Mean) && !red_dims.is_empty() {
            self.line(simd_reduction(&acc, red_dims.len()));
        }
        let extreme = matches!(kind, Red::Max | Red::Min) && !red_dims.is_empty();
        let mut flagged = false;
        if extreme {
            // A vectorised pass first (lane-wise maxima combined by `maxps`), with a flag for
            // what it cannot get bit for bit: NaN (the interpreter keeps the last NaN) and a
            // zero result (which of -0 and +0 comes first). Then, only if flagged, the
            // interpreter's scan.
            let at = self.mark();
            let odd = self.fresh("odd");
            self.line(format!("int {odd} = 0;"));
            let op = if kind == Red::Max { "max" } else { "min" };
            let cmp = if kind == Red::Max { ">" } else { "<" };
            let mut pragma = format!("#pragma omp simd reduction({op}:{acc}) reduction(|:{odd})");
            if red_dims.len() > 1 {
                pragma.push_str(&format!(" collapse({})", red_dims.len()));
            }
            self.line(pragma);
            let v = self.reduce_operand(arg, &red_dims, reduced, keepdims, &oix);
            self.line(format!("{acc} = {v} {cmp} {acc} ? {v} : {acc};"));
            self.line(format!("{odd} |= {v} != {v};"));
            self.close_n(red_dims.len());
            if self.text[at..].contains("__atomic") {
                // The operand sets the error flag: the scan alone, once.
                self.text.truncate(at);
            } else {
                self.open(format!("if ({odd} || {acc} == 0.0f)"));
                self.line(format!("{acc} = {init};"));
                flagged = true;
            }
        }
        let v = self.reduce_operand(arg, &red_dims, reduced, keepdims, &oix);
        match kind {
            Red::Sum | Red::Mean => self.line(format!("{acc} += {v};")),
            // As the interpreter: a NaN element replaces the accumulator.
            Red::Max => self.line(format!("{acc} = {v} > {acc} || {v} != {v} ? {v} : {acc};")),
            Red::Min => self.line(format!("{acc} = {v} < {acc} || {v} != {v} ? {v} : {acc};")),
        }
        self.close_n(red_dims.len());
        if flagged {
            self.close();
        }
        if kind == Red::Mean {
            self.line(format!("{acc} = {acc} / {}.0f;", count));
        }
        self.epilogue(a, r, CV::new(acc, Class::F), &oix);
        self.close_n(out_dims.len());
    }
}

/// The pragma before the loops of a sum into `acc` over `depth` perfectly nested loops: the
/// compiler may split the sum into vector lanes (the only reassociation the kernels allow).
pub(crate) fn simd_reduction(acc: &str, depth: usize) -> String {
    if depth > 1 {
        format!("#pragma omp simd reduction(+:{acc}) collapse({depth})")
    } else {
        format!("#pragma omp simd reduction(+:{acc})")
    }
}

/// Whether a C expression is a name or a literal (no temporary needed).
fn is_simple(t: &str) -> bool {
    t.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' || c == '+')
        && !t.is_empty()
}
