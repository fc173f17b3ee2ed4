//! The executor: `@main` lowered once into a [`Program`] whose kernels come from the backends,
//! then run any number of times.
//!
//! Which backend compiles what:
//!
//! * a call of a function with `Compiler="X"`: the backends that handle `X`, in order, then the
//!   reference interpreter (oneDNN handles `dnnl` and OpenBLAS `openblas`; no backend handles
//!   the GPU targets' compilers, so their partitions run on the reference interpreter);
//! * a call of a `Primitive=1` function without `Compiler`, and each group of inline operator
//!   calls of `@main`: the backends that handle native code, then the reference interpreter;
//! * a call of any other function: the reference interpreter.
//!
//! A backend that reports a unit unsupported is skipped with a warning; the run goes on with the
//! next one. The inline operator calls of `@main` are grouped by a [`Grouping`]; without one
//! each operator call is its own kernel.

use crate::diag::{Diagnostic, Diagnostics};
use crate::ir::{ExprId, FuncId, Module, Type};
use crate::runtime::exec::kernel::{
    Backend, Backends, Buffers, ConstantSource, Group, MemCounter, RunCx, Unit, Unsupported,
};
use crate::runtime::exec::program::{Compiled, KernelRecord, Policy, Program, Region};
use crate::runtime::exec::reference::{self, Reference};
use crate::runtime::exec::tensor::{Shape, Tensor};
use crate::runtime::exec::value::{flat_shapes, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Groups the inline operator calls of a function into kernels (FuseOps does this for native
/// code generation).
pub trait Grouping: Send + Sync {
    /// Groups of expressions of `func`'s body (operator calls, tuples and projections); each
    /// group must be convex. Operator calls in no group run alone.
    fn groups(&self, m: &Module, func: FuncId) -> Vec<Vec<ExprId>>;
}

/// How to build an executable.
pub struct Options {
    /// Worker threads (at least 1).
    pub threads: usize,
    /// Backends tried before the reference interpreter.
    pub backends: Backends,
    /// How inline operator calls of `@main` are grouped (`None`: one kernel per call).
    pub grouping: Option<Box<dyn Grouping>>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            threads: default_threads(),
            backends: Backends::reference_only(),
            grouping: None,
        }
    }
}

/// The most threads a pool may have (`--threads`): each is started, so the count is bounded.
pub const MAX_THREADS: usize = 256;

/// All cores of the machine (at most [`MAX_THREADS`]).
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_THREADS)
}

/// A parameter of `@main`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// The name without `%`.
    pub name: String,
    /// Its type.
    pub shape: Shape,
}

/// A compiled `@main`, ready to run.
pub struct Executable {
    program: Program,
    pool: Arc<rayon::ThreadPool>,
    /// The parameters of `@main`.
    pub inputs: Vec<Input>,
    /// `@main`'s result type.
    pub output_type: Type,
    /// Bytes of the distinct constants the program holds (weights and literals).
    pub const_bytes: u64,
    /// Warnings from compilation (backends that fell back).
    pub warnings: Vec<Diagnostic>,
    /// Threads in the pool.
    pub threads: usize,
    /// Whether the program's kernels may open OpenMP regions (any backend besides the
    /// reference interpreter): the thread that runs them then sets the OpenMP thread count.
    openmp: bool,
    /// Storage of tensors freed by earlier steps and runs, for overwriting kernels' outputs.
    buffers: Buffers,
}

/// The result of one run.
pub struct RunOutput {
    /// `@main`'s result.
    pub value: Value,
    /// The largest number of bytes held by inputs, constants and live intermediate tensors at
    /// once (kernels' private scratch memory not included).
    pub peak_bytes: u64,
}

/// Records the constants handed out, to count their bytes once each.
struct Counting<'a> {
    inner: &'a dyn ConstantSource,
    seen: Mutex<BTreeMap<usize, usize>>,
}

impl ConstantSource for Counting<'_> {
    fn constant(&self, m: &Module, e: ExprId) -> Result<Arc<Tensor>, String> {
        let t = self.inner.constant(m, e)?;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.insert(Arc::as_ptr(&t) as usize, t.nbytes());
        // Keep the tensor alive while it is counted: the program holds it.
        Ok(t)
    }
}

struct TopPolicy<'a> {
    opts: &'a Options,
    consts: &'a dyn ConstantSource,
    warnings: Vec<Diagnostic>,
    functions: BTreeMap<FuncId, (Arc<dyn crate::runtime::exec::kernel::Kernel>, String)>,
}

impl TopPolicy<'_> {
    /// Tries `candidates` in order, then the reference interpreter.
    fn compile(
        &mut self,
        candidates: Vec<Arc<dyn Backend>>,
        unit: &Unit<'_>,
    ) -> Result<Compiled, Unsupported> {
        for b in candidates {
            match b.compile(unit, self.consts) {
                Ok(kernel) => {
                    return Ok(Compiled {
                        kernel,
                        backend: b.name().to_string(),
                    })
                }
                Err(u) => {
                    let mut d = Diagnostic::warning(
                        crate::diag::W2310,
                        format!(
                            "backend `{}` cannot run {}: {}; falling back",
                            b.name(),
                            unit.describe(),
                            u.message
                        ),
                    );
                    if let Some(s) = u.span {
                        d = d.with_primary(s, "runs on another backend");
                    }
                    self.warnings.push(d);
                }
            }
        }
        Ok(Compiled {
            kernel: Reference.compile(unit, self.consts)?,
            backend: reference::NAME.to_string(),
        })
    }
}

impl Policy for TopPolicy<'_> {
    fn grouping(&mut self, m: &Module, func: FuncId) -> Option<Vec<Vec<ExprId>>> {
        self.opts.grouping.as_ref().map(|g| g.groups(m, func))
    }

    fn compile_group(&mut self, m: &Module, group: &Group) -> Result<Compiled, Unsupported> {
        let candidates = self
            .opts
            .backends
            .for_compiler(None)
            .into_iter()
            .cloned()
            .collect();
        self.compile(candidates, &Unit::Group { module: m, group })
    }

    fn compile_function(
        &mut self,
        m: &Module,
        func: FuncId,
        _call: ExprId,
    ) -> Result<Compiled, Unsupported> {
        if let Some((k, b)) = self.functions.get(&func) {
            return Ok(Compiled {
                kernel: k.clone(),
                backend: b.clone(),
            });
        }
        let f = m.func(func);
        let compiler = f
            .attr("Compiler")
            .and_then(|v| v.as_str())
            .map(str::to_string);
        let primitive = f.attr("Primitive").and_then(|v| v.as_int()) == Some(1);
        let candidates: Vec<Arc<dyn Backend>> = match (&compiler, primitive) {
            (Some(c), _) => self
                .opts
                .backends
                .for_compiler(Some(c))
                .into_iter()
                .cloned()
                .collect(),
            (None, true) => self
                .opts
                .backends
                .for_compiler(None)
                .into_iter()
                .cloned()
                .collect(),
            (None, false) => Vec::new(),
        };
        let c = self.compile(candidates, &Unit::Function { module: m, func })?;
        self.functions
            .insert(func, (c.kernel.clone(), c.backend.clone()));
        Ok(c)
    }
}

/// A pool of `threads` worker threads for executables.
pub fn worker_pool(threads: usize) -> Result<rayon::ThreadPool, Diagnostic> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build()
        .map_err(|e| {
            Diagnostic::error(
                crate::diag::E2302,
                format!("cannot start {threads} worker threads: {e}"),
            )
        })
}

/// Runs `f` on the first worker thread of `pool`, whichever thread calls: every OpenMP region
/// that collage's kernels open then starts from that one thread. libgomp keeps a team per
/// thread that opens regions; with two of them (`ThreadPool::install` hands a job to whichever
/// worker is free) it manages more threads than there are cores and falls back to its short
/// "throttled" spin, so its threads sleep between kernels and every region after a pause pays
/// their wake-up (docs/performance.md, "What still wakes threads"). Inside `f`, rayon's
/// parallel iterators still use the whole pool.
pub fn on_first_worker<R: Send>(pool: &rayon::ThreadPool, f: impl FnOnce() -> R + Send) -> R {
    if pool.current_thread_index() == Some(0) {
        return f();
    }
    let job = Mutex::new(Some(f));
    let mut out = pool.broadcast(|ctx| {
        if ctx.index() != 0 {
            return None;
        }
        let f = job.lock().unwrap_or_else(|p| p.into_inner()).take();
        f.map(|f| f())
    });
    match out.swap_remove(0) {
        Some(r) => r,
        // A broadcast runs its operation once on every worker, the first included.
        None => unreachable!("the pool's first worker did not run the job"),
    }
}

/// Compiles `@main` of a type-checked module.
pub fn compile(
    m: &Module,
    consts: &dyn ConstantSource,
    opts: &Options,
) -> Result<Executable, Diagnostics> {
    compile_on(m, consts, opts, None)
}

/// Compiles `@main` to run on `pool` (`None`: a pool of its own with `opts.threads` threads).
/// Executables that share a pool share its threads, and the OpenMP teams of those threads:
/// timing several of them one after the other then runs each on the same threads.
pub fn compile_on(
    m: &Module,
    consts: &dyn ConstantSource,
    opts: &Options,
    pool: Option<Arc<rayon::ThreadPool>>,
) -> Result<Executable, Diagnostics> {
    let one = |d: Diagnostic| -> Diagnostics {
        let mut ds = Diagnostics::new();
        ds.push(d);
        ds
    };
    let main = m.main().ok_or_else(|| {
        one(Diagnostic::error(
            crate::diag::E2302,
            "the module has no `@main` function",
        ))
    })?;
    let f = m.func(main);
    let mut inputs = Vec::new();
    for &p in &f.params {
        let v = m.var(p);
        let ty = m.ty(v.expr).cloned();
        let shape = match ty.as_ref().and_then(|t| t.as_tensor()).and_then(Shape::of) {
            Some(s) if crate::runtime::exec::tensor::storable(s.dtype) => s,
            _ => {
                let shown = ty.map_or("an unknown type".to_string(), |t| format!("`{t}`"));
                return Err(one(
                    Diagnostic::error(
                        crate::diag::E2302,
                        format!(
                            "parameter `%{}` of `@main` has type {shown}; the interpreter takes tensors of static shape and a supported dtype",
                            v.name
                        ),
                    )
                    .with_primary(v.span, "this parameter"),
                ));
            }
        };
        inputs.push(Input {
            name: v.name.clone(),
            shape,
        });
    }
    let output_type = m.ty(f.body).cloned().unwrap_or(Type::Tuple(Vec::new()));
    if flat_shapes(&output_type).is_none() {
        return Err(one(Diagnostic::error(
            crate::diag::E2302,
            format!(
                "`@main` returns `{output_type}`, which is not made of tensors with static shapes"
            ),
        )
        .with_primary(m.span(f.body), "the result")));
    }
    let threads = opts.threads.max(1);
    let pool = match pool {
        Some(p) => p,
        None => Arc::new(worker_pool(threads).map_err(one)?),
    };
    let threads = pool.current_num_threads();
    let counting = Counting {
        inner: consts,
        seen: Mutex::new(BTreeMap::new()),
    };
    precompile(m, main, opts, &counting).map_err(|u| one(u.to_diagnostic()))?;
    let mut policy = TopPolicy {
        opts,
        consts: &counting,
        warnings: Vec::new(),
        functions: BTreeMap::new(),
    };
    // Constants are generated on the pool too (large weights are filled in parallel).
    let program = on_first_worker(&pool, || {
        Program::lower(m, &Region::function(m, main), &mut policy, &counting)
    })
    .map_err(|u| one(u.to_diagnostic()))?;
    let warnings = policy.warnings;
    let const_bytes = counting
        .seen
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .map(|&b| b as u64)
        .sum();
    Ok(Executable {
        pool,
        inputs,
        output_type,
        const_bytes,
        warnings,
        threads,
        openmp: !opts.backends.list.is_empty(),
        buffers: Buffers::for_sizes(program.reused_output_sizes()),
        program,
    })
}

/// Hands every native unit of `@main` (its groups and its calls of `Primitive=1` functions)
/// to the native backends at once, so that they can compile them together.
fn precompile(
    m: &Module,
    main: FuncId,
    opts: &Options,
    consts: &dyn ConstantSource,
) -> Result<(), Unsupported> {
    let natives = opts.backends.for_compiler(None);
    if natives.is_empty() {
        return Ok(());
    }
    let groups = match &opts.grouping {
        Some(g) => crate::runtime::exec::program::group_units(
            m,
            &Region::function(m, main),
            g.groups(m, main),
        )?,
        None => Vec::new(),
    };
    let mut funcs = std::collections::BTreeSet::new();
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![m.func(main).body];
    while let Some(e) = stack.pop() {
        if !seen.insert(e) {
            continue;
        }
        if let crate::ir::Expr::Call {
            callee: crate::ir::Callee::Expr(c),
            ..
        } = m.expr(e)
        {
            let f = match m.expr(*c) {
                crate::ir::Expr::Global(g) => m.globals[g.index()].def,
                crate::ir::Expr::Func(f) => Some(*f),
                _ => None,
            };
            if let Some(f) = f {
                let fun = m.func(f);
                if fun.attr("Compiler").is_none()
                    && fun.attr("Primitive").and_then(|v| v.as_int()) == Some(1)
                {
                    funcs.insert(f);
                }
            }
        }
        if matches!(m.expr(e), crate::ir::Expr::Func(_)) {
            continue;
        }
        m.for_each_operand(e, |o| stack.push(o));
    }
    let mut units: Vec<Unit<'_>> = groups
        .iter()
        .map(|group| Unit::Group { module: m, group })
        .collect();
    units.extend(
        funcs
            .into_iter()
            .map(|func| Unit::Function { module: m, func }),
    );
    for b in natives {
        b.precompile(&units, consts);
    }
    Ok(())
}

impl Executable {
    /// The kernels of `@main`, in order.
    pub fn kernels(&self) -> &[KernelRecord] {
        &self.program.kernels
    }

    /// Calls and wall time of each kernel of [`Executable::kernels`] over every run so far.
    pub fn kernel_times(&self) -> Vec<(u64, std::time::Duration)> {
        self.program.kernel_times()
    }

    /// Checks an input tensor against parameter `i`.
    pub fn check_input(&self, i: usize, t: &Tensor) -> Result<(), String> {
        let want = &self.inputs[i].shape;
        if t.dtype() != want.dtype || t.shape() != want.dims.as_slice() {
            return Err(format!(
                "input `{}` must be `{want}`, found `{}`",
                self.inputs[i].name,
                t.ty()
            ));
        }
        Ok(())
    }

    /// Calls `f` on every buffer the executable keeps between runs (constants, packed weights,
    /// kernels' working memory).
    pub fn resident(&self, f: &mut dyn FnMut(&[u8])) {
        self.program.resident(f)
    }

    /// Runs `f` on the first thread of the executable's worker pool ([`on_first_worker`]): runs
    /// made inside it start no job of their own on the pool, so a timing loop measures the
    /// program and not the hand-over to the pool.
    pub fn in_pool<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        on_first_worker(&self.pool, f)
    }

    /// Gives the storage of a run's result back for the outputs of later runs (tensors still
    /// shared elsewhere are left alone).
    pub fn recycle(&self, v: Value) {
        let mem = MemCounter::new(0);
        crate::runtime::exec::program::release(
            v,
            &RunCx {
                mem: &mem,
                buffers: Some(&self.buffers),
            },
        );
    }

    /// Runs `@main` on one tensor per parameter (in order).
    pub fn run(&self, inputs: &[Arc<Tensor>]) -> Result<RunOutput, Diagnostic> {
        if inputs.len() != self.inputs.len() {
            return Err(Diagnostic::error(
                crate::diag::E2304,
                format!(
                    "`@main` takes {} inputs, {} given",
                    self.inputs.len(),
                    inputs.len()
                ),
            ));
        }
        for (i, t) in inputs.iter().enumerate() {
            self.check_input(i, t)
                .map_err(|m| Diagnostic::error(crate::diag::E2304, m))?;
        }
        let base = self.const_bytes + inputs.iter().map(|t| t.nbytes() as u64).sum::<u64>();
        let mem = MemCounter::new(base);
        let values: Vec<Value> = inputs.iter().cloned().map(Value::Tensor).collect();
        let out = self
            .in_pool(|| {
                // OpenMP's thread count belongs to the calling thread: set it in the one that
                // runs the kernels, for every library on the shared pool (docs/backends.md).
                if self.openmp {
                    if let Ok(omp) = crate::runtime::ffi::omp::Omp::shared() {
                        omp.set_num_threads(self.threads);
                    }
                }
                self.program.run(
                    values,
                    &RunCx {
                        mem: &mem,
                        buffers: Some(&self.buffers),
                    },
                )
            })
            .map_err(|e| e.to_diagnostic())?;
        let value = out.into_iter().next().unwrap_or(Value::Tuple(Vec::new()));
        Ok(RunOutput {
            value,
            peak_bytes: mem.peak(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::exec::data::Weights;
    use crate::runtime::exec::program::release;

    #[test]
    fn jobs_run_on_the_pools_first_worker_from_any_thread() {
        let pool = worker_pool(3).unwrap();
        let first = pool.broadcast(|_| std::thread::current().id())[0];
        // From outside the pool, many times: the first worker every time.
        for _ in 0..50 {
            assert_eq!(
                on_first_worker(&pool, || std::thread::current().id()),
                first
            );
        }
        // From another worker of the pool, and nested on the first one (inline, no deadlock).
        let seen = pool.broadcast(|ctx| {
            let inner = on_first_worker(&pool, || {
                on_first_worker(&pool, || std::thread::current().id())
            });
            (ctx.index(), inner)
        });
        assert!(seen.iter().all(|&(_, id)| id == first), "{seen:?}");
        // A result borrowed from the caller's stack comes back.
        let v = [1, 2, 3];
        assert_eq!(on_first_worker(&pool, || v.iter().sum::<i32>()), 6);
    }

    /// A backend for inline operators whose kernels (the reference interpreter's) say they
    /// overwrite their outputs.
    struct Overwriting;

    struct OverwritingKernel(Arc<dyn crate::runtime::exec::kernel::Kernel>);

    struct OverwritingPrepared(Box<dyn crate::runtime::exec::kernel::Prepared>);

    impl crate::runtime::exec::kernel::Backend for Overwriting {
        fn name(&self) -> &str {
            "overwriting"
        }
        fn version(&self) -> String {
            "1".into()
        }
        fn handles(&self, compiler: Option<&str>) -> bool {
            compiler.is_none()
        }
        fn compile(
            &self,
            unit: &Unit<'_>,
            consts: &dyn ConstantSource,
        ) -> Result<
            Arc<dyn crate::runtime::exec::kernel::Kernel>,
            crate::runtime::exec::kernel::Unsupported,
        > {
            let k = crate::runtime::exec::reference::Reference.compile(unit, consts)?;
            Ok(Arc::new(OverwritingKernel(k)))
        }
    }

    impl crate::runtime::exec::kernel::Kernel for OverwritingKernel {
        fn prepare(
            &self,
            consts: &[Option<Arc<Tensor>>],
        ) -> Result<
            Box<dyn crate::runtime::exec::kernel::Prepared>,
            crate::runtime::exec::kernel::Unsupported,
        > {
            Ok(Box::new(OverwritingPrepared(self.0.prepare(consts)?)))
        }
    }

    impl crate::runtime::exec::kernel::Prepared for OverwritingPrepared {
        fn run(
            &self,
            inputs: &[Arc<Tensor>],
            outputs: &mut [Tensor],
            cx: &RunCx<'_>,
        ) -> Result<(), crate::runtime::exec::kernel::RunError> {
            self.0.run(inputs, outputs, cx)
        }
        fn overwrites_outputs(&self) -> bool {
            true
        }
    }

    /// Freed storage is kept only where a kernel would reuse it: an executable whose kernels
    /// all get zeroed outputs (the reference interpreter's) gives every freed tensor back to
    /// the allocator at once; one with overwriting kernels keeps storage of their outputs' size
    /// only.
    #[test]
    fn freed_storage_is_kept_only_for_kernels_that_reuse_it() {
        let m = crate::frontend::relay::load_text(
            r#"#[version = "0.0.5"]
def @main(%x: Tensor[(64, 64), float32]) {
  %0 = add(%x, 1f);
  %1 = multiply(%0, 0.5f);
  %2 = sum(%1, axis=[1]);
  %3 = multiply(%2, 2f);
  negative(%3)
}"#,
        );
        let w = Weights::new(1);
        let mw = w.for_module(&m);
        let reference = compile(&m, &mw, &Options::default()).unwrap();
        let input = Arc::new(mw.random_input("x", &reference.inputs[0].shape).unwrap());
        assert!(reference.program.reused_output_sizes().is_empty());
        let want = reference.run(std::slice::from_ref(&input)).unwrap().value;
        let again = reference.run(std::slice::from_ref(&input)).unwrap().value;
        reference.recycle(again);
        assert_eq!(reference.buffers.bytes(), 0);

        let opts = Options {
            backends: Backends {
                list: vec![Arc::new(Overwriting)],
            },
            ..Options::default()
        };
        let x = compile(&m, &mw, &opts).unwrap();
        let big = Tensor::lines_of(&Shape {
            dtype: crate::ir::DType::F32,
            dims: vec![64, 64],
        })
        .unwrap();
        let small = Tensor::lines_of(&Shape {
            dtype: crate::ir::DType::F32,
            dims: vec![64],
        })
        .unwrap();
        assert_eq!(
            x.program.reused_output_sizes(),
            [small, big].into_iter().collect()
        );
        for _ in 0..3 {
            let out = x.run(std::slice::from_ref(&input)).unwrap().value;
            assert_eq!(out.as_tensor().unwrap(), want.as_tensor().unwrap());
            x.recycle(out);
            // `%0` and `%1` are freed; `%2`, `%3` and the result are 64-element tensors.
            assert!(x.buffers.bytes() > 0);
            assert!(
                x.buffers.bytes() <= (2 * big + 3 * small) * crate::runtime::exec::tensor::ALIGN
            );
        }
    }

    /// A reshape whose operand nothing else reads relabels that tensor instead of copying it:
    /// the run never holds the operand and the reshaped copy at once. Where the operand is read
    /// again later, the reshape copies, and both results are still right.
    #[test]
    fn a_reshape_of_a_last_read_tensor_is_a_view() {
        let run = |text: &str| {
            let m = crate::frontend::relay::load_text(text);
            let w = Weights::new(3);
            let mw = w.for_module(&m);
            let x = compile(&m, &mw, &Options::default()).unwrap();
            let input = Arc::new(mw.random_input("x", &x.inputs[0].shape).unwrap());
            let out = x.run(std::slice::from_ref(&input)).unwrap();
            let v = out.value.as_tensor().unwrap().as_slice::<f32>().to_vec();
            let xs = input.as_slice::<f32>().to_vec();
            (v, xs, out.peak_bytes)
        };
        let big = 256 * 256 * 4;
        let (v, xs, peak) = run(r#"#[version = "0.0.5"]
def @main(%x: Tensor[(256, 256), float32]) {
  %0 = add(%x, 1f);
  %1 = reshape(%0, newshape=[65536]);
  sum(%1, axis=[0], keepdims=True)
}"#);
        let want: f32 = xs.iter().map(|a| a + 1.0).sum();
        assert!(
            (v[0] - want).abs() <= 1e-3 * want.abs(),
            "{} vs {want}",
            v[0]
        );
        // The peak counts the input too: the input and `%0` (and the 4-byte sum), not `%1`.
        assert!(peak < 3 * big, "peak {peak}: the reshape copied");

        let (v, xs, peak) = run(r#"#[version = "0.0.5"]
def @main(%x: Tensor[(256, 256), float32]) {
  %0 = add(%x, 1f);
  %1 = reshape(%0, newshape=[65536]);
  %2 = sum(%1, axis=[0], keepdims=True);
  %3 = sum(%0, axis=[0, 1], keepdims=False);
  %4 = reshape(%3, newshape=[1]);
  add(%2, %4)
}"#);
        assert!(
            (v[0] - 2.0 * want).abs() <= 1e-3 * want.abs(),
            "{} vs {}",
            v[0],
            2.0 * want
        );
        assert!(
            xs.len() == 65536 && peak >= 3 * big,
            "peak {peak}: the operand is read again"
        );
    }

    /// After a run and the release of its outputs, the memory counter is back at the inputs
    /// and constants: every tensor a step created (nested programs included) was counted once
    /// and freed once.
    #[test]
    fn memory_accounting_balances() {
        let m = crate::frontend::relay::load_text(
            r#"#[version = "0.0.5"]
def @f(%a: Tensor[(4, 8), float32], %w: Tensor[(6, 8), float32], Primitive=1, Compiler="x") -> (Tensor[(4, 6), float32], Tensor[(4, 8), float32]) {
  %0 = fn (%p: Tensor[(4, 8), float32], %q: Tensor[(6, 8), float32], Composite="x.dense") {
    nn.dense(%p, %q, units=6)
  };
  (%0(%a, %w), %a)
}
def @main(%x: Tensor[(4, 8), float32], %c: bool) {
  %1 = @f(%x, meta[relay.Constant][0] /* ty=Tensor[(6, 8), float32] */);
  %2 = %1.0;
  %3 = if (%c) { nn.relu(%2) } else { negative(%2) };
  (%3, %1.1, %2)
}"#,
        );
        let w = Weights::new(1);
        let mw = w.for_module(&m);
        let x = compile(&m, &mw, &Options::default()).unwrap();
        for cond in [0u8, 1] {
            let inputs = [
                Arc::new(mw.random_input("x", &x.inputs[0].shape).unwrap()),
                Arc::new(Tensor::from_bytes(crate::ir::DType::BOOL, &[], &[cond]).unwrap()),
            ];
            let base = x.const_bytes + inputs.iter().map(|t| t.nbytes() as u64).sum::<u64>();
            let mem = MemCounter::new(base);
            let values: Vec<Value> = inputs.iter().cloned().map(Value::Tensor).collect();
            let out = x
                .program
                .run(
                    values,
                    &RunCx {
                        mem: &mem,
                        buffers: None,
                    },
                )
                .unwrap();
            assert!(mem.peak() > base);
            let out_bytes: u64 = out
                .iter()
                .flat_map(|v| v.flatten())
                .map(|t| t.nbytes() as u64)
                .sum();
            // Only the outputs are left (the function's pass-through result is a copy of `%x`
            // in the kernel's output, so it counts too).
            assert_eq!(mem.live(), base + out_bytes, "cond {cond}");
            for v in out {
                release(
                    v,
                    &RunCx {
                        mem: &mem,
                        buffers: None,
                    },
                );
            }
            assert_eq!(mem.live(), base, "cond {cond}");
        }
    }
}
