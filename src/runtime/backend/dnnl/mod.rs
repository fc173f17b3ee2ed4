//! The oneDNN backend: runs `Compiler="dnnl"` partitions with oneDNN 2.x primitives.
//!
//! * **Compile** ([`Backend::compile`]): the partition is read as a graph of composite calls
//!   ([`crate::runtime::backend::byoc`]); each composite's body is read as one primitive with its
//!   post-ops ([`composite`]); the primitives are created with `any` layouts where oneDNN
//!   chooses them, with reorders at the partition's boundary and where neighbours disagree, and
//!   a memory plan ([`plan`]). A composite or attribute oneDNN rejects makes the partition
//!   [`Unsupported`] (the executor falls back to the next backend, in the end the reference
//!   interpreter).
//! * **Prepare**: the buffers are allocated and every memory object created once; weights that
//!   are constants of the call site are reordered into the layouts their primitives chose, once.
//! * **Run**: the calling thread's OpenMP thread count is set (Debian's oneDNN runs its parallel
//!   loops on OpenMP in the thread that executes the primitive), the inputs and outputs are
//!   bound, and the primitives run in order on the kernel's stream.
//!
//! docs/backends.md gives the mapping of every composite.

pub mod composite;
pub mod plan;

use super::byoc;
use crate::runtime::exec::kernel::{
    Backend, ConstantSource, Kernel, Prepared, RunCx, RunError, Unit, Unsupported,
};
use crate::runtime::exec::tensor::Tensor;
use crate::runtime::ffi::dnnl::{sys, Dnnl, Engine, Memory, Stream};
use crate::runtime::ffi::omp::Omp;
use crate::runtime::ffi::LoadError;
use plan::{Plan, StepKind, Storage};
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

/// The backend's name, and the `Compiler` attribute it runs.
pub const NAME: &str = "dnnl";

/// oneDNN as a backend.
pub struct DnnlBackend {
    dnnl: Dnnl,
    engine: Engine,
    omp: Arc<Omp>,
    threads: usize,
}

impl DnnlBackend {
    /// The backend on the process's oneDNN (`COLLAGE_DNNL_LIBRARY`, else `libdnnl.so.2`),
    /// running with `threads` OpenMP threads.
    pub fn new(threads: usize) -> Result<DnnlBackend, LoadError> {
        let dnnl = Dnnl::shared()?;
        // oneDNN loads libgomp; this finds the same runtime.
        let omp = Omp::shared()?;
        let engine = dnnl.engine().map_err(|e| LoadError {
            what: crate::runtime::ffi::dnnl::SPEC.what,
            file: dnnl.path().display().to_string(),
            package: crate::runtime::ffi::dnnl::SPEC.package,
            env: crate::runtime::ffi::dnnl::SPEC.env,
            reason: format!("no CPU engine: {e}"),
        })?;
        Ok(DnnlBackend {
            dnnl,
            engine,
            omp,
            threads: threads.max(1),
        })
    }

    /// The thread count kernels run with.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

impl Backend for DnnlBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn version(&self) -> String {
        format!("oneDNN {}", self.dnnl.version())
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
                "the oneDNN backend runs `Compiler=\"dnnl\"` functions only",
                None,
            ));
        };
        Ok(Arc::new(self.compile_function(module, func, consts)?))
    }
}

impl DnnlBackend {
    /// Compiles the partition function `func` of `module` (what [`Backend::compile`] does, with
    /// the concrete kernel type, for measurements).
    pub fn compile_function(
        &self,
        module: &crate::ir::Module,
        func: crate::ir::FuncId,
        consts: &dyn ConstantSource,
    ) -> Result<DnnlKernel, Unsupported> {
        let span = Some(module.func(func).span);
        let g = byoc::read(module, func, consts)?;
        // oneDNN splits the work of a primitive when it is created, for the creating thread's
        // OpenMP count: create them for the count they run with.
        let _threads = self.omp.with_threads(self.threads);
        let plan = plan::build(&self.dnnl, &self.engine, module, &g, consts)
            .map_err(|r| Unsupported::op(r, span))?;
        Ok(DnnlKernel {
            plan: Arc::new(plan),
            omp: self.omp.clone(),
            threads: self.threads,
        })
    }
}

/// A compiled partition.
pub struct DnnlKernel {
    plan: Arc<Plan>,
    omp: Arc<Omp>,
    threads: usize,
}

impl DnnlKernel {
    /// The compiled plan (primitives, layouts, buffers).
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
}

/// A 64-byte aligned, zeroed buffer.
struct Buffer {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: a plain allocation, used by one thread at a time (behind the state's mutex).
unsafe impl Send for Buffer {}

impl Buffer {
    fn new(bytes: usize) -> Result<Buffer, String> {
        let layout = std::alloc::Layout::from_size_align(bytes.max(64), 64)
            .map_err(|e| format!("a buffer of {bytes} bytes: {e}"))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(format!("cannot allocate {bytes} bytes"));
        }
        Ok(Buffer { ptr, layout })
    }
}

impl Buffer {
    fn bytes(&self) -> &[u8] {
        // SAFETY: an allocation of `layout.size()` bytes, zeroed when made, alive with `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// Where a memory object's buffer comes from on each run.
#[derive(Clone, Copy)]
enum Rebind {
    /// Run input `k` (a parameter that is not a constant of the call site).
    Input(usize),
    /// Output tensor `j`.
    Output(usize),
}

/// What a prepared kernel mutates while it runs.
struct State {
    stream: Stream,
    /// One memory object per step argument.
    mems: Vec<Vec<Memory>>,
    /// The scratchpad memory of each step that needs one.
    scratch: Vec<Option<Memory>>,
    buffers_kept: Vec<Buffer>,
    /// The scratchpad's bytes (kept alive: the scratchpad memory objects point into them).
    _scratch_kept: Option<Buffer>,
}

/// Which of a prepared kernel's buffers hold weights: the destinations of the reorders done
/// once, when it was prepared (the others hold activations between its primitives).
fn weight_buffers(plan: &Plan, setup: &[usize]) -> Vec<usize> {
    let mut out: Vec<usize> = setup
        .iter()
        .flat_map(|&s| plan.steps[s].args.iter())
        .filter(|(a, _)| *a == sys::ARG_TO)
        .filter_map(|&(_, v)| match plan.storage[plan.root(v)] {
            Storage::Buffer(b) => Some(b),
            _ => None,
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A kernel bound to one call site.
pub struct DnnlPrepared {
    plan: Arc<Plan>,
    omp: Arc<Omp>,
    threads: usize,
    /// The constants of the call site (kept alive: memory objects point into them).
    _consts: Vec<Option<Arc<Tensor>>>,
    /// The steps that run on every call.
    run_steps: Vec<usize>,
    /// The buffers that hold weights reordered when the kernel was prepared.
    weights_kept: Vec<usize>,
    /// Memory objects rebound on every call: (step, argument, source).
    rebinds: Vec<(usize, usize, Rebind)>,
    state: Mutex<State>,
}

fn dnnl_failure(e: crate::runtime::ffi::dnnl::Error) -> Unsupported {
    Unsupported::op(format!("preparing the oneDNN kernel: {e}"), None)
}

impl Kernel for DnnlKernel {
    fn prepare(&self, consts: &[Option<Arc<Tensor>>]) -> Result<Box<dyn Prepared>, Unsupported> {
        Ok(Box::new(self.prepare_site(consts)?))
    }
}

impl DnnlKernel {
    /// [`Kernel::prepare`] with the concrete type, for measurements.
    pub fn prepare_site(
        &self,
        consts: &[Option<Arc<Tensor>>],
    ) -> Result<DnnlPrepared, Unsupported> {
        let plan = &self.plan;
        let engine = &plan.engine;
        let is_const = |i: usize| consts.get(i).is_some_and(Option::is_some);
        // Run inputs: the parameters that are not constants here, in order.
        let mut input_of = vec![usize::MAX; plan.n_params];
        let mut k = 0;
        for (i, slot) in input_of.iter_mut().enumerate() {
            if !is_const(i) {
                *slot = k;
                k += 1;
            }
        }
        let mut buffers = Vec::with_capacity(plan.buffers.len());
        for &b in &plan.buffers {
            buffers.push(Buffer::new(b).map_err(|m| Unsupported::op(m, None))?);
        }
        let scratch_buf = if plan.scratch_bytes > 0 {
            Some(Buffer::new(plan.scratch_bytes).map_err(|m| Unsupported::op(m, None))?)
        } else {
            None
        };
        let mut rebinds = Vec::new();
        let mut mems = Vec::with_capacity(plan.steps.len());
        let mut scratch = Vec::with_capacity(plan.steps.len());
        for (s, step) in plan.steps.iter().enumerate() {
            let mut ms = Vec::with_capacity(step.args.len());
            for (a, &(_, v)) in step.args.iter().enumerate() {
                let ptr: *mut c_void = match plan.storage[v] {
                    Storage::Param(i) => match consts.get(i).and_then(Option::as_ref) {
                        Some(t) => t.bytes().as_ptr() as *mut c_void,
                        None => {
                            rebinds.push((s, a, Rebind::Input(input_of[i])));
                            std::ptr::null_mut()
                        }
                    },
                    Storage::Const(c) => plan.consts[c].bytes().as_ptr() as *mut c_void,
                    Storage::Buffer(b) => buffers[b].ptr as *mut c_void,
                    Storage::Output(j) => {
                        rebinds.push((s, a, Rebind::Output(j)));
                        std::ptr::null_mut()
                    }
                };
                // SAFETY: the pointer is null (bound before each run) or points to a buffer or
                // tensor of the value's size that the prepared kernel keeps alive; parameters and
                // constants are only ever read by the primitives (sources, weights).
                let m = unsafe { Memory::with_handle(engine, &plan.values[v].md, ptr) }
                    .map_err(dnnl_failure)?;
                ms.push(m);
            }
            mems.push(ms);
            scratch.push(match (&step.scratch, &scratch_buf) {
                (Some(md), Some(b)) => Some(
                    // SAFETY: the scratchpad buffer is as large as the largest scratchpad.
                    unsafe { Memory::with_handle(engine, md, b.ptr as *mut c_void) }
                        .map_err(dnnl_failure)?,
                ),
                _ => None,
            });
        }
        let stream = engine.stream().map_err(dnnl_failure)?;
        // Weight reorders whose source is constant here: once, now.
        let mut run_steps = Vec::new();
        let setup: Vec<usize> = (0..plan.steps.len())
            .filter(|&s| plan.constant_reorder(s, &is_const))
            .collect();
        if !setup.is_empty() {
            let _threads = self.omp.with_threads(self.threads);
            for &s in &setup {
                execute(plan, s, &mems, &scratch, &stream).map_err(dnnl_failure)?;
            }
            stream.wait().map_err(dnnl_failure)?;
        }
        for s in 0..plan.steps.len() {
            if !setup.contains(&s) {
                run_steps.push(s);
            }
        }
        Ok(DnnlPrepared {
            plan: self.plan.clone(),
            omp: self.omp.clone(),
            threads: self.threads,
            _consts: consts.to_vec(),
            weights_kept: weight_buffers(plan, &setup),
            run_steps,
            rebinds,
            state: Mutex::new(State {
                stream,
                mems,
                scratch,
                buffers_kept: buffers,
                _scratch_kept: scratch_buf,
            }),
        })
    }
}

fn execute(
    plan: &Plan,
    s: usize,
    mems: &[Vec<Memory>],
    scratch: &[Option<Memory>],
    stream: &Stream,
) -> Result<(), crate::runtime::ffi::dnnl::Error> {
    let step = &plan.steps[s];
    let mut args: Vec<(c_int, &Memory)> = step
        .args
        .iter()
        .zip(&mems[s])
        .map(|(&(a, _), m)| (a, m))
        .collect();
    if let Some(m) = &scratch[s] {
        args.push((sys::ARG_SCRATCHPAD, m));
    }
    step.prim.execute(stream, &args)
}

/// Which of a prepared kernel's per-call steps [`DnnlPrepared::run_part`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Every step (what [`Prepared::run`] does).
    All,
    /// The primitives of the composites only: their sources, weights and destinations stay in
    /// the layouts the primitives chose (valid after one full run).
    Compute,
    /// The data movement only: reorders of the inputs into the primitives' layouts, results
    /// reordered into the output tensors, summands copied into a destination.
    Boundary,
}

impl DnnlPrepared {
    /// How many per-call steps of each part there are: (compute, boundary).
    pub fn step_counts(&self) -> (usize, usize) {
        let compute = self
            .run_steps
            .iter()
            .filter(|&&s| self.plan.steps[s].kind == StepKind::Compute)
            .count();
        (compute, self.run_steps.len() - compute)
    }

    /// Runs the steps of one part (see [`Part`]) on the given tensors.
    pub fn run_part(
        &self,
        inputs: &[Arc<Tensor>],
        outputs: &mut [Tensor],
        part: Part,
    ) -> Result<(), RunError> {
        let plan = &self.plan;
        for (j, o) in outputs.iter().enumerate() {
            if plan.output_bytes.get(j) != Some(&o.nbytes()) {
                return Err(RunError::new(
                    "internal error: an output tensor of the wrong size for the oneDNN kernel",
                ));
            }
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = &mut *state;
        for &(s, a, bind) in &self.rebinds {
            let ptr: *mut c_void = match bind {
                Rebind::Input(k) => match inputs.get(k) {
                    Some(t) => t.bytes().as_ptr() as *mut c_void,
                    None => {
                        return Err(RunError::new(
                            "internal error: too few inputs for the oneDNN kernel",
                        ))
                    }
                },
                Rebind::Output(j) => outputs[j].bytes_mut().as_mut_ptr() as *mut c_void,
            };
            if let Rebind::Input(k) = bind {
                let want = plan.steps[s].args[a].1;
                if inputs[k].nbytes() < plan.engine.dnnl().md_size(&plan.values[want].md) {
                    return Err(RunError::new(
                        "internal error: an input tensor too small for the oneDNN kernel",
                    ));
                }
            }
            // SAFETY: the tensors outlive this call; inputs are only read.
            unsafe { state.mems[s][a].set_handle(ptr) }
                .map_err(|e| RunError::new(e.to_string()))?;
        }
        self.omp.set_num_threads(self.threads);
        for &s in &self.run_steps {
            let compute = plan.steps[s].kind == StepKind::Compute;
            match part {
                Part::All => {}
                Part::Compute if compute => {}
                Part::Boundary if !compute => {}
                _ => continue,
            }
            execute(plan, s, &state.mems, &state.scratch, &state.stream).map_err(|e| {
                RunError::new(format!(
                    "oneDNN {} ({}) failed: {e}",
                    plan.steps[s].what, plan.steps[s].impl_name
                ))
            })?;
        }
        state
            .stream
            .wait()
            .map_err(|e| RunError::new(e.to_string()))?;
        Ok(())
    }
}

impl Prepared for DnnlPrepared {
    fn run(
        &self,
        inputs: &[Arc<Tensor>],
        outputs: &mut [Tensor],
        _cx: &RunCx<'_>,
    ) -> Result<(), RunError> {
        self.run_part(inputs, outputs, Part::All)
    }

    /// Every output is written whole: by its primitive, or by a reorder from the value
    /// computing it (a `sum` destination is filled with its summand first).
    fn overwrites_outputs(&self) -> bool {
        true
    }

    /// The call site's constants, the plan's own (folded) constants and the weights reordered
    /// once: what a whole model last touched a run ago. The buffers between the region's
    /// primitives and the scratchpad are not listed: every kernel of a model writes and reads
    /// such memory, so it is as warm inside a model as the activations between kernels.
    fn resident(&self, f: &mut dyn FnMut(&[u8])) {
        crate::runtime::exec::kernel::constants_resident(&self._consts, f);
        for c in &self.plan.consts {
            f(c.bytes());
        }
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for &b in &self.weights_kept {
            f(state.buffers_kept[b].bytes());
        }
    }
}
