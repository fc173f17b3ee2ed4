//! The OpenBLAS backend: runs `Compiler="openblas"` partitions with `cblas_sgemm` and
//! `cblas_sgemv` (docs/backends.md):
//!
//! * `nn.dense(x [..., K], W [N, K])`: one `sgemm(NoTrans, Trans)` over the flattened rows of
//!   `x`, or `sgemv` when there is one row (OpenBLAS 0.3.21's sgemm is many times slower on one
//!   row); with a bias (`add(nn.dense(x, W), b)`, `b` of `N` values), the bias is copied into
//!   every row of the result and the call made with beta = 1;
//! * `nn.matmul(A, B)`: one call, the transposes as BLAS flags (a transposed `A` of rank above
//!   2 is one call per leading index);
//! * `nn.batch_matmul(A, B)`: one single-threaded sgemm per batch element, the batch split
//!   across the threads of one OpenMP parallel region (the pool oneDNN and generated code use;
//!   OpenBLAS's OpenMP build runs single-threaded inside a parallel region), an operand with
//!   batch 1 reused for every element.
//!
//! `--threads N` sets OpenBLAS's thread count (`openblas_set_num_threads`, which in the OpenMP
//! build also sets the calling thread's OpenMP count) before every call. Runs of OpenBLAS
//! kernels are serialised across the process (`OpenBlas::serial`): Debian's build keeps one
//! set of buffers for its threads.

use super::byoc::{self, Node};
use crate::ir::{Callee, DType, Expr, ExprId, FuncId, Module, Type, VarId};
use crate::ops::Op;
use crate::runtime::exec::kernel::{
    Backend, ConstantSource, Kernel, Prepared, RunCx, RunError, Unit, Unsupported,
};
use crate::runtime::exec::tensor::Tensor;
use crate::runtime::ffi::omp::Omp;
use crate::runtime::ffi::openblas::{BlasError, Matrix, OpenBlas};
use crate::runtime::ffi::LoadError;
use std::collections::HashMap;
use std::sync::Arc;

/// The backend's name, and the `Compiler` attribute it runs.
pub const NAME: &str = "openblas";

/// OpenBLAS as a backend.
pub struct OpenBlasBackend {
    blas: Arc<OpenBlas>,
    omp: Arc<Omp>,
    threads: usize,
}

impl OpenBlasBackend {
    /// The backend on the process's OpenBLAS (`COLLAGE_OPENBLAS_LIBRARY`, else the OpenMP
    /// build), running with `threads` threads.
    pub fn new(threads: usize) -> Result<OpenBlasBackend, LoadError> {
        let blas = OpenBlas::shared()?;
        let omp = Omp::shared()?;
        Ok(OpenBlasBackend {
            blas,
            omp,
            threads: threads.max(1),
        })
    }
}

impl Backend for OpenBlasBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn version(&self) -> String {
        self.blas.config()
    }

    fn handles(&self, compiler: Option<&str>) -> bool {
        compiler == Some(NAME)
    }

    fn compile(
        &self,
        unit: &Unit<'_>,
        consts: &dyn ConstantSource,
    ) -> Result<Arc<dyn Kernel>, Unsupported> {
        let Unit::Function { module, func } = *unit else {
            return Err(Unsupported::construct(
                "the OpenBLAS backend runs `Compiler=\"openblas\"` functions only",
                None,
            ));
        };
        let g = byoc::read(module, func, consts)?;
        for s in g.params.iter().chain(&g.shapes) {
            if s.dtype != DType::F32 {
                return Err(Unsupported::op(
                    format!(
                        "the OpenBLAS backend runs float32 only (sgemm), and the partition has a `{}` tensor",
                        s.dtype
                    ),
                    Some(module.func(func).span),
                ));
            }
        }
        let mut nodes = Vec::with_capacity(g.nodes.len());
        let mut consts_out: Vec<Arc<Tensor>> = Vec::new();
        let mut temps = 0usize;
        let mut first_output: HashMap<usize, usize> = HashMap::new();
        for (j, &o) in g.outputs.iter().enumerate() {
            first_output.entry(o).or_insert(j);
        }
        for (n, node) in g.nodes.iter().enumerate() {
            nodes.push(match node {
                Node::Param(i) => Src::Param(*i),
                Node::Const(t) => {
                    consts_out.push(t.clone());
                    Src::Const(consts_out.len() - 1)
                }
                Node::Call {
                    func: cf,
                    name,
                    args,
                    expr,
                } => {
                    let op = read_composite(module, *cf, consts, &mut consts_out).map_err(|r| {
                        Unsupported::op(format!("`{name}`: {r}"), Some(module.span(*expr)))
                    })?;
                    let dst = match first_output.get(&n) {
                        Some(&j) => Dst::Output(j),
                        None => {
                            temps += 1;
                            Dst::Temp(temps - 1, g.shapes[n].numel())
                        }
                    };
                    let args = args.clone();
                    Src::Call { op, args, dst }
                }
            });
        }
        let outputs = g.outputs.iter().enumerate().map(|(j, &o)| (j, o)).collect();
        Ok(Arc::new(BlasKernel {
            plan: Arc::new(BlasPlan {
                nodes,
                consts: consts_out,
                outputs,
                n_params: g.params.len(),
                temps,
                out_sizes: g.outputs.iter().map(|&o| g.shapes[o].numel()).collect(),
            }),
            blas: self.blas.clone(),
            omp: self.omp.clone(),
            threads: self.threads,
        }))
    }
}

/// An input of a composite: its parameter `i` (the call's argument `i`) or a constant of the
/// plan.
#[derive(Clone, Copy, Debug)]
enum Operand {
    Arg(usize),
    Const(usize),
}

/// What one composite computes.
#[derive(Clone, Debug)]
enum BlasOp {
    /// `y[M, N] = x[M, K] · W[N, K]ᵀ (+ b[N])`.
    Dense {
        x: Operand,
        w: Operand,
        bias: Option<Operand>,
        m: usize,
        n: usize,
        k: usize,
    },
    /// `nn.matmul`: `batch` products `op(A_i) · op(B)` of `m × k` by `k × n` (`batch` > 1 only
    /// for a transposed A of rank above 2).
    Matmul {
        a: Operand,
        b: Operand,
        ta: bool,
        tb: bool,
        batch: usize,
        m: usize,
        n: usize,
        k: usize,
    },
    /// `nn.batch_matmul`.
    BatchMatmul {
        a: Operand,
        b: Operand,
        ta: bool,
        tb: bool,
        ba: usize,
        bb: usize,
        m: usize,
        n: usize,
        k: usize,
    },
}

#[derive(Clone, Copy, Debug)]
enum Dst {
    Output(usize),
    /// Temporary `t` of so many elements.
    Temp(usize, usize),
}

#[derive(Clone, Debug)]
enum Src {
    Param(usize),
    Const(usize),
    Call {
        op: BlasOp,
        args: Vec<usize>,
        dst: Dst,
    },
}

struct BlasPlan {
    nodes: Vec<Src>,
    consts: Vec<Arc<Tensor>>,
    /// (output index, node).
    outputs: Vec<(usize, usize)>,
    n_params: usize,
    temps: usize,
    out_sizes: Vec<usize>,
}

fn shape_f32(m: &Module, e: ExprId) -> Result<Vec<usize>, String> {
    match m.ty(e) {
        Some(Type::Tensor(t)) if t.dtype == DType::F32 => t
            .shape
            .iter()
            .map(|d| d.fixed().and_then(|n| usize::try_from(n).ok()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| format!("`{t}` has no static shape")),
        Some(Type::Tensor(t)) => Err(format!(
            "the OpenBLAS backend runs float32 only (sgemm), and a value here is `{}`",
            t.dtype
        )),
        _ => Err("a value that is not a tensor".into()),
    }
}

/// Reads a composite: `nn.dense` (with an added bias of `N` values), `nn.matmul`,
/// `nn.batch_matmul`.
fn read_composite(
    m: &Module,
    f: FuncId,
    consts: &dyn ConstantSource,
    pool: &mut Vec<Arc<Tensor>>,
) -> Result<BlasOp, String> {
    let func = m.func(f);
    let params: HashMap<VarId, usize> = func
        .params
        .iter()
        .enumerate()
        .map(|(i, &p)| (p, i))
        .collect();
    let lets = byoc::let_values(m);
    let resolve = |mut e: ExprId| {
        for _ in 0..=m.exprs.len() {
            match m.expr(e) {
                Expr::Var(v) if lets.contains_key(v) => e = lets[v],
                Expr::Let { body, .. } => e = *body,
                _ => break,
            }
        }
        e
    };
    let mut operand = |e: ExprId| -> Result<Operand, String> {
        let e = resolve(e);
        match m.expr(e) {
            Expr::Var(v) => params
                .get(v)
                .map(|&i| Operand::Arg(i))
                .ok_or_else(|| "a variable that is not a parameter".to_string()),
            Expr::Const(_) => {
                let t = consts.constant(m, e)?;
                if t.dtype() != DType::F32 {
                    return Err(format!(
                        "the OpenBLAS backend runs float32 only, and a constant here is `{}`",
                        t.dtype()
                    ));
                }
                pool.push(t);
                Ok(Operand::Const(pool.len() - 1))
            }
            _ => Err("an operand computed inside the composite (one GEMM per composite)".into()),
        }
    };
    let call = |e: ExprId| match m.expr(resolve(e)) {
        Expr::Call {
            callee: Callee::Op(op),
            args,
            attrs,
        } => Some((crate::ops::op(*op), args.clone(), attrs)),
        _ => None,
    };
    let body = resolve(func.body);
    let out = shape_f32(m, body)?;
    let Some((def, args, attrs)) = call(body) else {
        return Err("a composite that is not an operator call".into());
    };
    let bool_attr = |name: &str| {
        attrs
            .get(def.attrs, name)
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    };
    match def.op {
        Op::Dense | Op::Add => {
            let (dense, bias) = if def.op == Op::Add {
                let is_dense = |e: ExprId| call(e).is_some_and(|(d, _, _)| d.op == Op::Dense);
                match (is_dense(args[0]), is_dense(args[1])) {
                    (true, false) => (args[0], Some(args[1])),
                    (false, true) => (args[1], Some(args[0])),
                    _ => return Err("an `add` that is not a dense layer plus a bias".into()),
                }
            } else {
                (body, None)
            };
            let (_, dargs, _) = call(dense).ok_or("no dense layer")?;
            let xs = shape_f32(m, dargs[0])?;
            let ws = shape_f32(m, dargs[1])?;
            if ws.len() != 2 || xs.is_empty() || xs[xs.len() - 1] != ws[1] {
                return Err(format!("a dense layer of {xs:?} by {ws:?}"));
            }
            let (n, k) = (ws[0], ws[1]);
            let mrows = xs[..xs.len() - 1].iter().product();
            let bias = match bias {
                Some(b) => {
                    let bs = shape_f32(m, b)?;
                    if bs.iter().product::<usize>() != n || bs.last() != Some(&n) || bs.len() > 2 {
                        return Err(format!("a bias of shape {bs:?} for {n} columns"));
                    }
                    if out.iter().product::<usize>() != mrows * n {
                        return Err("a bias that broadcasts the result".into());
                    }
                    Some(operand(b)?)
                }
                None => None,
            };
            Ok(BlasOp::Dense {
                x: operand(dargs[0])?,
                w: operand(dargs[1])?,
                bias,
                m: mrows,
                n,
                k,
            })
        }
        Op::Matmul => {
            let (ta, tb) = (bool_attr("transpose_a"), bool_attr("transpose_b"));
            let a_s = shape_f32(m, args[0])?;
            let b_s = shape_f32(m, args[1])?;
            if b_s.len() != 2 || a_s.is_empty() || (ta && a_s.len() < 2) {
                return Err(format!("`nn.matmul` of {a_s:?} by {b_s:?}"));
            }
            let (k, n) = if tb {
                (b_s[1], b_s[0])
            } else {
                (b_s[0], b_s[1])
            };
            let r = a_s.len();
            let (batch, mm, ka) = if ta {
                (a_s[..r - 2].iter().product(), a_s[r - 1], a_s[r - 2])
            } else {
                (1, a_s[..r - 1].iter().product(), a_s[r - 1])
            };
            if ka != k {
                return Err(format!("`nn.matmul` of {a_s:?} by {b_s:?}"));
            }
            Ok(BlasOp::Matmul {
                a: operand(args[0])?,
                b: operand(args[1])?,
                ta,
                tb,
                batch,
                m: mm,
                n,
                k,
            })
        }
        Op::BatchMatmul => {
            let (ta, tb) = (bool_attr("transpose_a"), bool_attr("transpose_b"));
            let a_s = shape_f32(m, args[0])?;
            let b_s = shape_f32(m, args[1])?;
            if a_s.len() != 3 || b_s.len() != 3 || out.len() != 3 {
                return Err("`nn.batch_matmul` of tensors other than 3-D".into());
            }
            let (mm, k) = if ta {
                (a_s[2], a_s[1])
            } else {
                (a_s[1], a_s[2])
            };
            let (kb, n) = if tb {
                (b_s[2], b_s[1])
            } else {
                (b_s[1], b_s[2])
            };
            let (ba, bb) = (a_s[0], b_s[0]);
            if k != kb || (ba != bb && ba != 1 && bb != 1) || out != [ba.max(bb), mm, n] {
                return Err(format!("`nn.batch_matmul` of {a_s:?} by {b_s:?}"));
            }
            Ok(BlasOp::BatchMatmul {
                a: operand(args[0])?,
                b: operand(args[1])?,
                ta,
                tb,
                ba,
                bb,
                m: mm,
                n,
                k,
            })
        }
        other => Err(format!("operator `{other}` has no OpenBLAS mapping")),
    }
}

struct BlasKernel {
    plan: Arc<BlasPlan>,
    blas: Arc<OpenBlas>,
    omp: Arc<Omp>,
    threads: usize,
}

impl Kernel for BlasKernel {
    fn prepare(&self, consts: &[Option<Arc<Tensor>>]) -> Result<Box<dyn Prepared>, Unsupported> {
        let mut input_of = vec![None; self.plan.n_params];
        let mut k = 0;
        for (i, slot) in input_of.iter_mut().enumerate() {
            if consts.get(i).is_some_and(Option::is_some) {
                continue;
            }
            *slot = Some(k);
            k += 1;
        }
        Ok(Box::new(BlasPrepared {
            plan: self.plan.clone(),
            blas: self.blas.clone(),
            omp: self.omp.clone(),
            threads: self.threads,
            consts: consts.to_vec(),
            input_of,
        }))
    }
}

struct BlasPrepared {
    plan: Arc<BlasPlan>,
    blas: Arc<OpenBlas>,
    omp: Arc<Omp>,
    threads: usize,
    consts: Vec<Option<Arc<Tensor>>>,
    input_of: Vec<Option<usize>>,
}

/// A read-only float32 slice by address (shared with the threads of a parallel region).
#[derive(Clone, Copy)]
struct RawSlice {
    ptr: *const f32,
    len: usize,
}

/// A writable float32 slice by address.
#[derive(Clone, Copy)]
struct RawMut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: the slices point into tensors that outlive the parallel region; the threads write
// disjoint parts of the destination and only read the sources.
unsafe impl Send for RawSlice {}
// SAFETY: as above.
unsafe impl Sync for RawSlice {}
// SAFETY: as above.
unsafe impl Send for RawMut {}
// SAFETY: as above.
unsafe impl Sync for RawMut {}

impl RawSlice {
    /// # Safety
    /// The memory must be valid for reads while the slice is used.
    unsafe fn get<'a>(self) -> &'a [f32] {
        std::slice::from_raw_parts(self.ptr, self.len)
    }
}

impl RawMut {
    /// Elements `off..off + len`.
    ///
    /// # Safety
    /// As for [`RawMut::get`], for that range; `off + len` must not exceed the length.
    unsafe fn part<'a>(self, off: usize, len: usize) -> &'a mut [f32] {
        std::slice::from_raw_parts_mut(self.ptr.add(off), len)
    }

    /// # Safety
    /// The memory must be valid for writes, and not otherwise accessed, while the slice is
    /// used.
    unsafe fn get<'a>(self) -> &'a mut [f32] {
        std::slice::from_raw_parts_mut(self.ptr, self.len)
    }
}

fn blas_err(e: BlasError) -> RunError {
    RunError::new(e.to_string())
}

impl BlasPrepared {
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        a: &[f32],
        ta: bool,
        b: &[f32],
        tb: bool,
        m: usize,
        n: usize,
        k: usize,
        beta: f32,
        c: &mut [f32],
    ) -> Result<(), BlasError> {
        let am = if ta {
            Matrix::dense(a, k, m)
        } else {
            Matrix::dense(a, m, k)
        };
        let bm = if tb {
            Matrix::dense(b, n, k)
        } else {
            Matrix::dense(b, k, n)
        };
        if m == 1 && !ta {
            // y[N] = op(B)ᵀ-contracted with x: B stored [N, K] (transposed) is y = B·x, B
            // stored [K, N] is y = Bᵀ·x.
            return self.blas.sgemv(bm, !tb, &a[..k], 1.0, beta, &mut c[..n]);
        }
        self.blas.sgemm(am, ta, bm, tb, 1.0, beta, c, n)
    }

    fn run_op(
        &self,
        op: &BlasOp,
        src: &dyn Fn(Operand) -> RawSlice,
        dst: RawMut,
    ) -> Result<(), RunError> {
        // SAFETY (every `get` below): the sources point into live tensors or temporaries of
        // this run, distinct from the destination.
        match *op {
            BlasOp::Dense {
                x,
                w,
                bias,
                m,
                n,
                k,
            } => {
                let c = unsafe { dst.get() };
                let beta = match bias {
                    Some(b) => {
                        let b = unsafe { src(b).get() };
                        for row in c.chunks_exact_mut(n) {
                            row.copy_from_slice(&b[..n]);
                        }
                        1.0
                    }
                    None => 0.0,
                };
                let (xs, ws) = unsafe { (src(x).get(), src(w).get()) };
                self.gemm(xs, false, ws, true, m, n, k, beta, c)
                    .map_err(blas_err)
            }
            BlasOp::Matmul {
                a,
                b,
                ta,
                tb,
                batch,
                m,
                n,
                k,
            } => {
                let c = unsafe { dst.get() };
                let (asl, bsl) = unsafe { (src(a).get(), src(b).get()) };
                for i in 0..batch {
                    self.gemm(
                        &asl[i * m * k..(i + 1) * m * k],
                        ta,
                        bsl,
                        tb,
                        m,
                        n,
                        k,
                        0.0,
                        &mut c[i * m * n..(i + 1) * m * n],
                    )
                    .map_err(blas_err)?;
                }
                Ok(())
            }
            BlasOp::BatchMatmul {
                a,
                b,
                ta,
                tb,
                ba,
                bb,
                m,
                n,
                k,
            } => {
                let batch = ba.max(bb);
                let (asl, bsl) = (src(a), src(b));
                let one = |i: usize| -> Result<(), BlasError> {
                    let ia = if ba == 1 { 0 } else { i };
                    let ib = if bb == 1 { 0 } else { i };
                    // SAFETY: element `i` of the destination is written by one thread only.
                    let c = unsafe { dst.part(i * m * n, m * n) };
                    let (av, bv) = unsafe { (asl.get(), bsl.get()) };
                    self.gemm(
                        &av[ia * m * k..(ia + 1) * m * k],
                        ta,
                        &bv[ib * k * n..(ib + 1) * k * n],
                        tb,
                        m,
                        n,
                        k,
                        0.0,
                        c,
                    )
                };
                if dst.len < batch * m * n {
                    return Err(RunError::new(
                        "internal error: a batch_matmul result too small",
                    ));
                }
                let threads = self.threads.min(batch);
                if threads <= 1 {
                    for i in 0..batch {
                        one(i).map_err(blas_err)?;
                    }
                    return Ok(());
                }
                let failure: std::sync::Mutex<Option<BlasError>> = std::sync::Mutex::new(None);
                self.omp.parallel(threads, &|t, nt| {
                    let lo = batch * t / nt;
                    let hi = batch * (t + 1) / nt;
                    for i in lo..hi {
                        if let Err(e) = one(i) {
                            if let Ok(mut f) = failure.lock() {
                                f.get_or_insert(e);
                            }
                            return;
                        }
                    }
                });
                match failure.into_inner().ok().flatten() {
                    Some(e) => Err(blas_err(e)),
                    None => Ok(()),
                }
            }
        }
    }
}

impl Prepared for BlasPrepared {
    fn resident(&self, f: &mut dyn FnMut(&[u8])) {
        crate::runtime::exec::kernel::constants_resident(&self.consts, f);
    }

    fn run(
        &self,
        inputs: &[Arc<Tensor>],
        outputs: &mut [Tensor],
        _cx: &RunCx<'_>,
    ) -> Result<(), RunError> {
        let plan = &*self.plan;
        for (j, o) in outputs.iter().enumerate() {
            if o.dtype() != DType::F32 || plan.out_sizes.get(j) != Some(&o.numel()) {
                return Err(RunError::new(
                    "internal error: an output tensor of the wrong type for the OpenBLAS kernel",
                ));
            }
        }
        let param = |i: usize| -> Result<&Tensor, RunError> {
            match (
                self.consts.get(i).and_then(Option::as_ref),
                self.input_of.get(i).copied().flatten(),
            ) {
                (Some(c), _) => Ok(c),
                (None, Some(k)) => inputs.get(k).map(|t| &**t).ok_or_else(|| {
                    RunError::new("internal error: too few inputs for the OpenBLAS kernel")
                }),
                _ => Err(RunError::new("internal error: a parameter without a value")),
            }
        };
        let ro = |t: &Tensor| -> Result<RawSlice, RunError> {
            if t.dtype() != DType::F32 {
                return Err(RunError::new("internal error: a non-float32 BLAS operand"));
            }
            let s = t.as_slice::<f32>();
            Ok(RawSlice {
                ptr: s.as_ptr(),
                len: s.len(),
            })
        };
        let out_raw: Vec<RawMut> = outputs
            .iter_mut()
            .map(|t| {
                let s = t.as_mut_slice::<f32>();
                RawMut {
                    ptr: s.as_mut_ptr(),
                    len: s.len(),
                }
            })
            .collect();
        let mut temps: Vec<Vec<f32>> = vec![Vec::new(); plan.temps];
        for node in &plan.nodes {
            if let Src::Call {
                dst: Dst::Temp(t, n),
                ..
            } = node
            {
                temps[*t] = vec![0f32; *n];
            }
        }
        let temp_raw: Vec<RawMut> = temps
            .iter_mut()
            .map(|v| RawMut {
                ptr: v.as_mut_ptr(),
                len: v.len(),
            })
            .collect();
        let dst_raw = |d: Dst| match d {
            Dst::Output(j) => out_raw[j],
            Dst::Temp(t, _) => temp_raw[t],
        };
        let mut node_raw: Vec<RawSlice> = Vec::with_capacity(plan.nodes.len());
        // One kernel in OpenBLAS at a time in the process (`OpenBlas::serial`); the batch's
        // parallel region runs under this hold.
        let _serial = self.blas.serial();
        self.blas.set_num_threads(self.threads);
        for node in &plan.nodes {
            let r = match node {
                Src::Param(i) => ro(param(*i)?)?,
                Src::Const(c) => ro(&plan.consts[*c])?,
                Src::Call { op, args, dst } => {
                    let d = dst_raw(*dst);
                    let src = |o: Operand| match o {
                        Operand::Arg(j) => node_raw[args[j]],
                        Operand::Const(c) => {
                            let s = plan.consts[c].as_slice::<f32>();
                            RawSlice {
                                ptr: s.as_ptr(),
                                len: s.len(),
                            }
                        }
                    };
                    self.run_op(op, &src, d)?;
                    RawSlice {
                        ptr: d.ptr,
                        len: d.len,
                    }
                }
            };
            node_raw.push(r);
        }
        // Outputs not written in place (parameters, constants, repeated results).
        for &(j, n) in &plan.outputs {
            let direct = matches!(&plan.nodes[n], Src::Call { dst: Dst::Output(k), .. } if *k == j);
            if !direct {
                let s = node_raw[n];
                // SAFETY: the source is a live tensor or temporary, distinct from output j.
                let (from, to) = unsafe { (s.get(), out_raw[j].get()) };
                if from.len() != to.len() {
                    return Err(RunError::new("internal error: an output of the wrong size"));
                }
                to.copy_from_slice(from);
            }
        }
        Ok(())
    }

    /// Every output is written whole: by its GEMM (beta = 0, or beta = 1 after the bias was
    /// copied into every row), or copied from the value computing it.
    fn overwrites_outputs(&self) -> bool {
        true
    }
}
