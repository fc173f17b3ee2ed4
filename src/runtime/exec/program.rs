//! Programs: a function body (or a group of expressions) lowered once into a flat list of steps
//! over value slots, with its memory plan, and run any number of times.
//!
//! Lowering walks the expressions of a region (from its outputs back to its inputs) with an
//! explicit stack and emits, in expression order:
//!
//! * a **kernel step** for each group of inline operator calls (by default every operator call
//!   is its own group; a [`Policy`] may group them, as FuseOps does) and for each call of a
//!   function (a global `def` or a `fn` literal). The kernel comes from the policy (a backend);
//!   constant arguments written at the call are bound when the kernel is prepared;
//! * a **tuple** or **projection** step (bookkeeping: no data is copied);
//! * an **if** step with one nested block per branch: expressions used only inside a branch
//!   are evaluated only when that branch is taken.
//!
//! Let-bound variables, `let` expressions and graph bindings are aliases of the slot of their
//! value; they produce no step.
//!
//! **Memory plan.** For each slot the last step that reads it is computed (a read inside a
//! branch counts as a read by the `if` step); the slot is emptied right after that step, so a
//! tensor is freed as soon as nothing reads it any more. Tensors are shared through `Arc`, so a
//! tensor lives until its last slot is emptied. The run's [`MemCounter`] counts the bytes of
//! tensors the steps create and frees them when their last slot is emptied; its peak is what
//! `collage run` reports (plus the inputs and weights).
//!
//! **Storage reuse.** A tensor freed by the memory plan gives its storage to the run's
//! [`Buffers`] (when the context has them); a kernel that writes every element of its outputs
//! ([`Prepared::overwrites_outputs`]) gets its outputs on reused storage of the same size
//! instead of freshly zeroed memory. Zeroing and first-touch page faults cost about a tenth of
//! resnet50's run time on generated code.
//!
//! **Views.** A kernel step whose output is one of its inputs under another shape
//! ([`Prepared::output_is_view_of`]: a partition of nothing but `reshape`s) takes that input's
//! tensor out of its slot and relabels its shape instead of running the kernel, when this step is
//! the input's last reader and nothing else shares the tensor; otherwise the kernel runs and
//! copies. On GPT-2 the reshapes between library partitions (a layer norm's result flattened for
//! the dense layer after it) each copied up to 1.5 MB per run.
//!
//! [`MemCounter`]: super::kernel::MemCounter
//! [`Buffers`]: super::kernel::Buffers

use crate::ir::{Callee, Expr, ExprId, FuncId, Module, Type, VarId};
use crate::runtime::exec::kernel::{
    function_name, ConstantSource, Group, Kernel, Prepared, RunCx, RunError, Unit, Unsupported,
};
use crate::runtime::exec::tensor::{numel, Shape, Tensor};
use crate::runtime::exec::value::{flat_shapes, Value};
use crate::source::Span;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// How deeply `if` expressions may nest in one function.
pub const MAX_IF_DEPTH: usize = 256;

/// A slot holding one value while a program runs.
pub type Slot = u32;

/// A compiled kernel together with the backend that compiled it.
pub struct Compiled {
    /// The kernel.
    pub kernel: Arc<dyn Kernel>,
    /// The name of the backend that compiled it.
    pub backend: String,
}

/// Decides how the calls of a region become kernels.
pub trait Policy {
    /// Groups of inline expressions of `func`'s body to compile as one kernel each (operator
    /// calls, and tuples and projections between them); operator calls in no group run alone.
    /// `None` (the default): every operator call is its own group.
    fn grouping(&mut self, _m: &Module, _func: FuncId) -> Option<Vec<Vec<ExprId>>> {
        None
    }

    /// Compiles a group of inline expressions.
    fn compile_group(&mut self, m: &Module, group: &Group) -> Result<Compiled, Unsupported>;

    /// Compiles a function called at `call`.
    fn compile_function(
        &mut self,
        m: &Module,
        func: FuncId,
        call: ExprId,
    ) -> Result<Compiled, Unsupported>;
}

/// What a region of a function computes: values of `inputs` given from outside, values of
/// `outputs` produced.
#[derive(Clone, Debug)]
pub struct Region {
    /// The function whose body holds the region.
    pub func: FuncId,
    /// Expressions whose values are given (parameters' variables, or a group's inputs).
    pub inputs: Vec<ExprId>,
    /// Expressions whose values are the results.
    pub outputs: Vec<ExprId>,
}

impl Region {
    /// The whole body of a function.
    pub fn function(m: &Module, func: FuncId) -> Region {
        let f = m.func(func);
        Region {
            func,
            inputs: f.params.iter().map(|&p| m.var(p).expr).collect(),
            outputs: vec![f.body],
        }
    }
}

enum StepKind {
    Kernel {
        kernel: Box<dyn Prepared>,
        inputs: Vec<Slot>,
        /// One slot per output expression, with its type.
        outs: Vec<(Slot, Type)>,
        /// The flattened output shapes, allocated before the kernel runs.
        flat: Vec<Shape>,
        /// Its entry in [`Program::kernels`].
        record: usize,
        /// Calls and wall time so far (output storage included), for profiles.
        time: KernelTime,
    },
    Tuple {
        fields: Vec<Slot>,
        out: Slot,
    },
    Proj {
        tuple: Slot,
        index: usize,
        out: Slot,
    },
    If {
        cond: Slot,
        branches: Box<[Block; 2]>,
        out: Slot,
    },
}

struct Step {
    kind: StepKind,
    span: Span,
    /// Slots emptied after this step.
    frees: Vec<Slot>,
}

struct Block {
    steps: Vec<Step>,
    result: Slot,
    /// Whether `result` is defined inside the block (and emptied once copied out).
    result_inner: bool,
}

/// A kernel step's parts, as [`Program::kernel_steps`] lists them.
struct KernelStep<'a> {
    kernel: &'a dyn Prepared,
    flat: &'a [Shape],
    record: usize,
    time: &'a KernelTime,
}

/// Calls of a kernel step and their total wall time (nanoseconds).
#[derive(Debug, Default)]
struct KernelTime {
    calls: std::sync::atomic::AtomicU64,
    nanos: std::sync::atomic::AtomicU64,
}

impl KernelTime {
    fn add(&self, d: std::time::Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        self.calls.fetch_add(1, Relaxed);
        self.nanos
            .fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }

    fn get(&self) -> (u64, std::time::Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.calls.load(Relaxed),
            std::time::Duration::from_nanos(self.nanos.load(Relaxed)),
        )
    }
}

/// One kernel of a program, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelRecord {
    /// What runs: `nn.dense`, `@collage_cutlass_dense`, ...
    pub label: String,
    /// The backend that compiled it.
    pub backend: String,
    /// The call.
    pub span: Span,
}

/// A lowered region.
pub struct Program {
    n_slots: usize,
    inputs: Vec<Slot>,
    consts: Vec<(Slot, Arc<Tensor>)>,
    body: Block,
    results: Vec<Slot>,
    /// Every kernel step (branches included), in order.
    pub kernels: Vec<KernelRecord>,
}

impl Program {
    /// Lowers a region. `consts` gives the values of constants the region reads.
    pub fn lower(
        m: &Module,
        region: &Region,
        policy: &mut dyn Policy,
        consts: &dyn ConstantSource,
    ) -> Result<Program, Unsupported> {
        let mut lw = Lowerer::new(m, region, policy, consts)?;
        let mut inputs = Vec::with_capacity(region.inputs.len());
        for &e in &region.inputs {
            let s = lw.fresh();
            lw.assign(e, s);
            inputs.push(s);
        }
        let steps = lw.lower_block(&region.outputs, 0)?;
        let mut results = Vec::new();
        for &o in &region.outputs {
            results.push(lw.slot_of(o, m.span(o))?);
        }
        let mut body = Block {
            steps,
            result: results.first().copied().unwrap_or(0),
            result_inner: false,
        };
        let mut keep: HashSet<Slot> = results.iter().copied().collect();
        let mut outer: HashSet<Slot> = inputs.iter().copied().collect();
        outer.extend(lw.consts.iter().map(|(s, _)| *s));
        plan_frees(&mut body, &mut keep, &outer);
        Ok(Program {
            n_slots: lw.n_slots as usize,
            inputs,
            consts: lw.consts,
            body,
            results,
            kernels: lw.kernels,
        })
    }

    /// The kernel steps, branches included.
    fn kernel_steps(&self) -> Vec<KernelStep<'_>> {
        let mut out = Vec::new();
        let mut stack = vec![&self.body];
        while let Some(b) = stack.pop() {
            for step in &b.steps {
                match &step.kind {
                    StepKind::Kernel {
                        kernel,
                        flat,
                        record,
                        time,
                        ..
                    } => out.push(KernelStep {
                        kernel: kernel.as_ref(),
                        flat,
                        record: *record,
                        time,
                    }),
                    StepKind::If { branches, .. } => stack.extend(branches.iter()),
                    _ => {}
                }
            }
        }
        out
    }

    /// Calls and wall time of each kernel of [`Program::kernels`] (same order) over every run
    /// so far: the time of a call covers its output storage and the kernel itself.
    pub fn kernel_times(&self) -> Vec<(u64, std::time::Duration)> {
        let mut out = vec![(0, std::time::Duration::ZERO); self.kernels.len()];
        for k in self.kernel_steps() {
            if let Some(o) = out.get_mut(k.record) {
                *o = k.time.get();
            }
        }
        out
    }

    /// Calls `f` on every buffer the program keeps between runs: its constants and what each
    /// prepared kernel keeps ([`Prepared::resident`]).
    pub fn resident(&self, f: &mut dyn FnMut(&[u8])) {
        for (_, t) in &self.consts {
            f(t.bytes());
        }
        for k in self.kernel_steps() {
            k.kernel.resident(f);
        }
    }

    /// The sizes (in lines) of the outputs of kernel steps that overwrite their outputs
    /// (branches included): the storage worth keeping for reuse ([`Buffers::for_sizes`](super::kernel::Buffers::for_sizes)).
    pub fn reused_output_sizes(&self) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        for k in self.kernel_steps() {
            if k.kernel.overwrites_outputs() {
                out.extend(k.flat.iter().filter_map(Tensor::lines_of));
            }
        }
        out
    }

    /// Number of kernel steps (branches included).
    pub fn kernel_count(&self) -> usize {
        self.kernels.len()
    }

    /// Runs the program on the values of its inputs; returns the values of its outputs.
    pub fn run(&self, inputs: Vec<Value>, cx: &RunCx<'_>) -> Result<Vec<Value>, RunError> {
        if inputs.len() != self.inputs.len() {
            return Err(RunError::new(format!(
                "internal error: a program of {} inputs was given {}",
                self.inputs.len(),
                inputs.len()
            )));
        }
        let mut slots: Vec<Option<Value>> = vec![None; self.n_slots];
        for (&s, v) in self.inputs.iter().zip(inputs) {
            slots[s as usize] = Some(v);
        }
        for (s, t) in &self.consts {
            slots[*s as usize] = Some(Value::Tensor(t.clone()));
        }
        let result = run_block(&self.body, &mut slots, cx);
        let out = match result {
            Ok(()) => self
                .results
                .iter()
                .map(|&s| {
                    slots[s as usize]
                        .clone()
                        .ok_or_else(|| RunError::new("internal error: a result was not computed"))
                })
                .collect::<Result<Vec<_>, _>>(),
            Err(e) => Err(e),
        };
        // Release what is left (results stay referenced by `out`).
        for s in slots.iter_mut() {
            if let Some(v) = s.take() {
                release(v, cx);
            }
        }
        out
    }
}

/// Drops a value, counting the tensors that nothing else holds as freed.
pub fn release(v: Value, cx: &RunCx<'_>) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Tuple(vs) => stack.extend(vs),
            Value::Tensor(t) => {
                if Arc::strong_count(&t) == 1 {
                    cx.mem.free(t.nbytes());
                    if let Some(b) = cx.buffers {
                        if let Ok(t) = Arc::try_unwrap(t) {
                            b.put(t.into_storage());
                        }
                    }
                }
            }
        }
    }
}

fn get(slots: &[Option<Value>], s: Slot) -> Result<&Value, RunError> {
    slots[s as usize]
        .as_ref()
        .ok_or_else(|| RunError::new(format!("internal error: slot {s} is empty when read")))
}

fn run_block(b: &Block, slots: &mut [Option<Value>], cx: &RunCx<'_>) -> Result<(), RunError> {
    for step in &b.steps {
        run_step(step, slots, cx).map_err(|mut e| {
            e.span.get_or_insert(step.span);
            e
        })?;
        for &s in &step.frees {
            if let Some(v) = slots[s as usize].take() {
                release(v, cx);
            }
        }
    }
    Ok(())
}

/// The output of a view step ([`Prepared::output_is_view_of`]) made from its input's tensor, taken
/// out of the input's slot, when this step is the slot's last reader, the slot appears once among
/// the step's inputs, and no other value shares the tensor. `None` (nothing taken) otherwise.
fn take_view(
    step: &Step,
    kernel: &dyn Prepared,
    inputs: &[Slot],
    flat: &[Shape],
    slots: &mut [Option<Value>],
) -> Option<Tensor> {
    let i = kernel.output_is_view_of()?;
    let [out] = flat else { return None };
    // The slot holding flattened input `i`.
    let mut seen = 0;
    let mut slot = None;
    for &s in inputs {
        let n = match slots[s as usize].as_ref()? {
            Value::Tensor(_) => 1,
            v => v.flatten().len(),
        };
        if (seen..seen + n).contains(&i) {
            if n != 1 {
                return None;
            }
            slot = Some(s);
        }
        seen += n;
    }
    let s = slot?;
    if inputs.iter().filter(|&&x| x == s).count() != 1 || !step.frees.contains(&s) {
        return None;
    }
    let Some(Value::Tensor(arc)) = slots[s as usize].take() else {
        return None;
    };
    match Arc::try_unwrap(arc) {
        Ok(t) if t.dtype() == out.dtype && Some(t.numel()) == numel(&out.dims) => {
            Some(t.reshaped(&out.dims))
        }
        Ok(t) => {
            slots[s as usize] = Some(Value::Tensor(Arc::new(t)));
            None
        }
        Err(arc) => {
            slots[s as usize] = Some(Value::Tensor(arc));
            None
        }
    }
}

fn run_step(step: &Step, slots: &mut [Option<Value>], cx: &RunCx<'_>) -> Result<(), RunError> {
    match &step.kind {
        StepKind::Kernel {
            kernel,
            inputs,
            outs,
            flat,
            time,
            ..
        } => {
            let start = std::time::Instant::now();
            if let Some(t) = take_view(step, kernel.as_ref(), inputs, flat, slots) {
                time.add(start.elapsed());
                if let [(slot, _)] = outs.as_slice() {
                    slots[*slot as usize] = Some(Value::Tensor(Arc::new(t)));
                    return Ok(());
                }
                return Err(RunError::new(
                    "internal error: a view step with several outputs",
                ));
            }
            let mut outputs = Vec::with_capacity(flat.len());
            let reuse = cx.buffers.filter(|_| kernel.overwrites_outputs());
            for s in flat {
                let old = reuse.and_then(|b| Some((b, b.take(Tensor::lines_of(s)?)?)));
                let t = match old {
                    Some((b, storage)) => match Tensor::on_storage(s, storage) {
                        Ok(t) => t,
                        Err(storage) => {
                            b.put(storage);
                            Tensor::zeros_of(s).map_err(|e| RunError::new(e.0))?
                        }
                    },
                    None => Tensor::zeros_of(s).map_err(|e| RunError::new(e.0))?,
                };
                cx.mem.alloc(t.nbytes());
                outputs.push(t);
            }
            {
                let mut args: Vec<&Arc<Tensor>> = Vec::new();
                for &s in inputs {
                    get(slots, s)?.flatten_into(&mut args);
                }
                let args: Vec<Arc<Tensor>> = args.into_iter().cloned().collect();
                kernel.run(&args, &mut outputs, cx)?;
            }
            time.add(start.elapsed());
            for (o, s) in outputs.iter().zip(flat) {
                if o.dtype() != s.dtype || o.shape() != s.dims.as_slice() {
                    return Err(RunError::new(format!(
                        "internal error: a kernel produced `{}` where `{s}` was expected",
                        o.ty()
                    )));
                }
            }
            let mut it = outputs.into_iter().map(Arc::new);
            for (slot, ty) in outs {
                let v = Value::unflatten(ty, &mut it)
                    .ok_or_else(|| RunError::new("internal error: too few kernel outputs"))?;
                slots[*slot as usize] = Some(v);
            }
        }
        StepKind::Tuple { fields, out } => {
            let v = fields
                .iter()
                .map(|&s| get(slots, s).cloned())
                .collect::<Result<Vec<_>, _>>()?;
            slots[*out as usize] = Some(Value::Tuple(v));
        }
        StepKind::Proj { tuple, index, out } => {
            let v = match get(slots, *tuple)? {
                Value::Tuple(fields) => fields.get(*index).cloned(),
                Value::Tensor(_) => None,
            }
            .ok_or_else(|| RunError::new("internal error: projection of a non-tuple"))?;
            slots[*out as usize] = Some(v);
        }
        StepKind::If {
            cond,
            branches,
            out,
        } => {
            let c = match get(slots, *cond)? {
                Value::Tensor(t) if t.numel() == 1 => t.get_f64(0) != 0.0,
                _ => {
                    return Err(RunError::new(
                        "the condition of `if` is not a scalar".to_string(),
                    ))
                }
            };
            let b = &branches[if c { 0 } else { 1 }];
            run_block(b, slots, cx)?;
            let v = get(slots, b.result)?.clone();
            if b.result_inner {
                if let Some(old) = slots[b.result as usize].take() {
                    release(old, cx);
                }
            }
            slots[*out as usize] = Some(v);
        }
    }
    Ok(())
}

/// Computes which slots each step empties. `keep`: slots never emptied in this block (results);
/// `outer`: slots defined before the block's first step that the block may empty (the
/// program's inputs and constants, for the top block).
fn plan_frees(b: &mut Block, keep: &mut HashSet<Slot>, outer: &HashSet<Slot>) {
    let n = b.steps.len();
    let mut defined: Vec<(Slot, usize)> = outer.iter().map(|&s| (s, 0)).collect();
    let mut last: HashMap<Slot, usize> = HashMap::new();
    for (i, step) in b.steps.iter_mut().enumerate() {
        let mut reads = Vec::new();
        step_reads(&step.kind, &mut reads);
        for r in reads {
            last.insert(r, i);
        }
        for d in step_defs(&step.kind) {
            defined.push((d, i));
        }
        if let StepKind::If { branches, .. } = &mut step.kind {
            for br in branches.iter_mut() {
                let mut inner_keep: HashSet<Slot> = [br.result].into_iter().collect();
                plan_frees(br, &mut inner_keep, &HashSet::new());
            }
        }
    }
    keep.insert(b.result);
    // Deterministic order: by slot number.
    let mut frees: BTreeMap<usize, Vec<Slot>> = BTreeMap::new();
    defined.sort_unstable();
    defined.dedup_by_key(|(s, _)| *s);
    for (s, def_at) in defined {
        if keep.contains(&s) {
            continue;
        }
        let at = last.get(&s).copied().unwrap_or(def_at);
        if at < n {
            frees.entry(at).or_default().push(s);
        }
    }
    for (i, mut fs) in frees {
        fs.sort_unstable();
        b.steps[i].frees = fs;
    }
}

fn step_reads(k: &StepKind, out: &mut Vec<Slot>) {
    match k {
        StepKind::Kernel { inputs, .. } => out.extend(inputs),
        StepKind::Tuple { fields, .. } => out.extend(fields),
        StepKind::Proj { tuple, .. } => out.push(*tuple),
        StepKind::If { cond, branches, .. } => {
            out.push(*cond);
            for b in branches.iter() {
                for s in &b.steps {
                    step_reads(&s.kind, out);
                }
                out.push(b.result);
            }
        }
    }
}

fn step_defs(k: &StepKind) -> Vec<Slot> {
    match k {
        StepKind::Kernel { outs, .. } => outs.iter().map(|(s, _)| *s).collect(),
        StepKind::Tuple { out, .. } | StepKind::Proj { out, .. } | StepKind::If { out, .. } => {
            vec![*out]
        }
    }
}

/// The groups of a region as kernel units: members sorted, inputs (values read from outside,
/// in order of first use) and outputs (members used outside, or results of the region). This
/// is exactly what lowering compiles, so a backend can compile the units ahead
/// ([`Backend::precompile`](super::kernel::Backend::precompile)).
pub fn group_units(
    m: &Module,
    region: &Region,
    groups: Vec<Vec<ExprId>>,
) -> Result<Vec<Group>, Unsupported> {
    let inputs_set: HashSet<ExprId> = region.inputs.iter().copied().collect();
    // Users of every expression of the region (operands, not entering function bodies).
    let mut users: HashMap<ExprId, Vec<ExprId>> = HashMap::new();
    let mut seen: HashSet<ExprId> = HashSet::new();
    let mut stack: Vec<ExprId> = region.outputs.clone();
    while let Some(e) = stack.pop() {
        if !seen.insert(e) || inputs_set.contains(&e) {
            continue;
        }
        if matches!(m.expr(e), Expr::Func(_)) {
            continue;
        }
        m.for_each_operand(e, |o| {
            users.entry(o).or_default().push(e);
            stack.push(o);
        });
    }
    let region_outputs: HashSet<ExprId> = region.outputs.iter().copied().collect();
    let mut out = Vec::new();
    for mut members in groups {
        members.sort_unstable();
        members.dedup();
        if members.is_empty() {
            continue;
        }
        let set: HashSet<ExprId> = members.iter().copied().collect();
        let mut inputs = Vec::new();
        let mut seen_in = HashSet::new();
        for &e in &members {
            if !matches!(
                m.expr(e),
                Expr::Call {
                    callee: Callee::Op(_),
                    ..
                } | Expr::Tuple(_)
                    | Expr::Proj { .. }
            ) {
                return Err(Unsupported::construct(
                    "internal error: a group holds something other than operator calls, tuples and projections",
                    Some(m.span(e)),
                ));
            }
            m.for_each_operand(e, |o| {
                if !set.contains(&o) && seen_in.insert(o) {
                    inputs.push(o);
                }
            });
        }
        let outputs: Vec<ExprId> = members
            .iter()
            .copied()
            .filter(|e| {
                region_outputs.contains(e)
                    || users
                        .get(e)
                        .is_some_and(|us| us.iter().any(|u| !set.contains(u)))
            })
            .collect();
        out.push(Group {
            func: region.func,
            members,
            inputs,
            outputs,
        });
    }
    Ok(out)
}

struct GroupInfo {
    group: Group,
    last: ExprId,
}

struct Lowerer<'a> {
    m: &'a Module,
    func: FuncId,
    policy: &'a mut dyn Policy,
    consts_src: &'a dyn ConstantSource,
    let_value: HashMap<VarId, ExprId>,
    inputs: HashSet<ExprId>,
    slots: HashMap<ExprId, Slot>,
    /// Expressions assigned a slot, in order, for scoping branch blocks.
    assigned: Vec<ExprId>,
    const_slots: HashMap<ExprId, Slot>,
    consts: Vec<(Slot, Arc<Tensor>)>,
    n_slots: u32,
    groups: Vec<GroupInfo>,
    group_of: HashMap<ExprId, usize>,
    kernels: Vec<KernelRecord>,
}

impl<'a> Lowerer<'a> {
    fn new(
        m: &'a Module,
        region: &Region,
        policy: &'a mut dyn Policy,
        consts_src: &'a dyn ConstantSource,
    ) -> Result<Lowerer<'a>, Unsupported> {
        let let_value = m
            .exprs
            .iter()
            .filter_map(|e| match e {
                Expr::Let { var, value, .. } => Some((*var, *value)),
                _ => None,
            })
            .collect();
        let mut lw = Lowerer {
            m,
            func: region.func,
            policy,
            consts_src,
            let_value,
            inputs: region.inputs.iter().copied().collect(),
            slots: HashMap::new(),
            assigned: Vec::new(),
            const_slots: HashMap::new(),
            consts: Vec::new(),
            n_slots: 0,
            groups: Vec::new(),
            group_of: HashMap::new(),
            kernels: Vec::new(),
        };
        if let Some(groups) = lw.policy.grouping(m, region.func) {
            lw.set_groups(region, groups)?;
        }
        Ok(lw)
    }

    /// Records explicit groups: their inputs (values read from outside, in order of first use)
    /// and outputs (members used outside, or results of the region).
    fn set_groups(&mut self, region: &Region, groups: Vec<Vec<ExprId>>) -> Result<(), Unsupported> {
        let m = self.m;
        for group in group_units(m, region, groups)? {
            let last = *group.members.last().unwrap_or(&ExprId(0));
            let idx = self.groups.len();
            for &e in &group.members {
                if self.group_of.insert(e, idx).is_some() {
                    return Err(Unsupported::construct(
                        "internal error: an expression is in two groups",
                        Some(m.span(e)),
                    ));
                }
            }
            self.groups.push(GroupInfo { group, last });
        }
        Ok(())
    }

    fn fresh(&mut self) -> Slot {
        self.n_slots += 1;
        self.n_slots - 1
    }

    fn assign(&mut self, e: ExprId, s: Slot) {
        self.slots.insert(e, s);
        self.assigned.push(e);
    }

    /// The slot holding the value of `e`, which must already be computed (or be a constant or
    /// an alias of a computed value).
    fn slot_of(&mut self, e: ExprId, use_span: Span) -> Result<Slot, Unsupported> {
        let m = self.m;
        let mut cur = e;
        for _ in 0..=m.exprs.len() {
            if let Some(&s) = self.slots.get(&cur) {
                return Ok(s);
            }
            match m.expr(cur) {
                Expr::Var(v) => match self.let_value.get(v) {
                    Some(&val) => cur = val,
                    None => {
                        return Err(Unsupported::construct(
                            format!(
                                "`%{}` is a variable of an enclosing function; functions that capture variables cannot be executed",
                                m.var(*v).name
                            ),
                            Some(use_span),
                        ))
                    }
                },
                Expr::Let { body, .. } => cur = *body,
                Expr::Const(_) => return self.const_slot(cur),
                Expr::Global(_) | Expr::Func(_) | Expr::Op(_) => {
                    return Err(Unsupported::construct(
                        "a function or operator used as a value (other than by calling it) cannot be executed",
                        Some(use_span),
                    ))
                }
                _ => {
                    return Err(Unsupported::construct(
                        "internal error: a value is used before it is computed (a group that is not convex?)",
                        Some(m.span(cur)),
                    ))
                }
            }
        }
        Err(Unsupported::construct(
            "internal error: a cycle of let aliases",
            Some(m.span(e)),
        ))
    }

    fn const_slot(&mut self, e: ExprId) -> Result<Slot, Unsupported> {
        if let Some(&s) = self.const_slots.get(&e) {
            return Ok(s);
        }
        let t = self.constant(e)?;
        let s = self.fresh();
        self.const_slots.insert(e, s);
        self.consts.push((s, t));
        Ok(s)
    }

    fn constant(&self, e: ExprId) -> Result<Arc<Tensor>, Unsupported> {
        self.consts_src
            .constant(self.m, e)
            .map_err(|msg| Unsupported::construct(msg, Some(self.m.span(e))))
    }

    /// The callee function of a call, through let-bound variables.
    fn callee_function(&self, callee: ExprId, call: ExprId) -> Result<FuncId, Unsupported> {
        let m = self.m;
        let mut cur = callee;
        for _ in 0..=m.exprs.len() {
            match m.expr(cur) {
                Expr::Func(f) => return Ok(*f),
                Expr::Global(g) => {
                    return m.globals[g.index()].def.ok_or_else(|| {
                        Unsupported::construct(
                            format!("`@{}` has no definition", m.globals[g.index()].name),
                            Some(m.span(cur)),
                        )
                    })
                }
                Expr::Var(v) => match self.let_value.get(v) {
                    Some(&val) => cur = val,
                    None => break,
                },
                _ => break,
            }
        }
        Err(Unsupported::construct(
            "only calls of global functions, function literals and operators can be executed (this callee is computed at run time)",
            Some(m.span(call)),
        ))
    }

    /// Collects and lowers the expressions needed for `roots` that are not yet available.
    fn lower_block(&mut self, roots: &[ExprId], depth: usize) -> Result<Vec<Step>, Unsupported> {
        let m = self.m;
        if depth > MAX_IF_DEPTH {
            return Err(Unsupported::construct(
                format!("`if` expressions nested more than {MAX_IF_DEPTH} deep"),
                roots.first().map(|&r| m.span(r)),
            ));
        }
        // Collect.
        let mut nodes: Vec<ExprId> = Vec::new();
        let mut seen: HashSet<ExprId> = HashSet::new();
        let mut stack: Vec<ExprId> = roots.to_vec();
        while let Some(e) = stack.pop() {
            if self.slots.contains_key(&e) || self.inputs.contains(&e) || !seen.insert(e) {
                continue;
            }
            nodes.push(e);
            if let Some(&g) = self.group_of.get(&e) {
                stack.extend(self.groups[g].group.members.iter().copied());
            }
            match m.expr(e) {
                Expr::Var(v) => {
                    if let Some(&val) = self.let_value.get(v) {
                        stack.push(val);
                    }
                }
                Expr::Const(_) | Expr::Global(_) | Expr::Op(_) | Expr::Func(_) => {}
                Expr::If { cond, .. } => stack.push(*cond),
                _ => m.for_each_operand(e, |o| stack.push(o)),
            }
        }
        nodes.sort_unstable();
        // Lower in expression order (operands precede users).
        let mut steps = Vec::new();
        for e in nodes {
            self.lower_node(e, depth, &mut steps)?;
        }
        Ok(steps)
    }

    fn lower_node(
        &mut self,
        e: ExprId,
        depth: usize,
        steps: &mut Vec<Step>,
    ) -> Result<(), Unsupported> {
        let m = self.m;
        let span = m.span(e);
        if let Some(&g) = self.group_of.get(&e) {
            if self.groups[g].last == e {
                let group = self.groups[g].group.clone();
                self.lower_group(&group, span, steps)?;
            }
            return Ok(());
        }
        match m.expr(e) {
            // A variable of an enclosing function is reported where it is used (`slot_of`).
            Expr::Var(_) => {}
            Expr::Const(_) | Expr::Global(_) | Expr::Op(_) | Expr::Func(_) => {}
            Expr::Let { body, .. } => {
                let s = self.slot_of(*body, span)?;
                self.assign(e, s);
            }
            Expr::Call {
                callee: Callee::Op(_),
                args,
                ..
            } => {
                let group = Group {
                    func: self.func,
                    members: vec![e],
                    inputs: args.clone(),
                    outputs: vec![e],
                };
                self.lower_group(&group, span, steps)?;
            }
            Expr::Call {
                callee: Callee::Expr(c),
                args,
                ..
            } => {
                let func = self.callee_function(*c, e)?;
                let compiled = self.policy.compile_function(m, func, e)?;
                let label = match function_name(m, func) {
                    Some(n) => format!("@{n}"),
                    None => "fn literal".to_string(),
                };
                self.kernel_step(e, &label, compiled, args, &[e], span, steps)?;
            }
            Expr::Tuple(fields) => {
                let fields = fields
                    .iter()
                    .enumerate()
                    .map(|(i, &f)| self.slot_of(f, m.operand_span(e, i, f)))
                    .collect::<Result<Vec<_>, _>>()?;
                let out = self.fresh();
                self.assign(e, out);
                steps.push(Step {
                    kind: StepKind::Tuple { fields, out },
                    span,
                    frees: Vec::new(),
                });
            }
            Expr::Proj { tuple, index } => {
                let t = self.slot_of(*tuple, m.operand_span(e, 0, *tuple))?;
                let out = self.fresh();
                self.assign(e, out);
                steps.push(Step {
                    kind: StepKind::Proj {
                        tuple: t,
                        index: *index as usize,
                        out,
                    },
                    span,
                    frees: Vec::new(),
                });
            }
            Expr::If {
                cond,
                then_branch,
                else_branch,
            } => {
                let c = self.slot_of(*cond, m.operand_span(e, 0, *cond))?;
                let then_block = self.lower_branch(*then_branch, depth)?;
                let else_block = self.lower_branch(*else_branch, depth)?;
                let out = self.fresh();
                self.assign(e, out);
                steps.push(Step {
                    kind: StepKind::If {
                        cond: c,
                        branches: Box::new([then_block, else_block]),
                        out,
                    },
                    span,
                    frees: Vec::new(),
                });
            }
        }
        Ok(())
    }

    /// Lowers one branch of an `if` into its own block. What the branch computes is not
    /// available after it.
    fn lower_branch(&mut self, br: ExprId, depth: usize) -> Result<Block, Unsupported> {
        let m = self.m;
        let mark = self.assigned.len();
        let steps = self.lower_block(&[br], depth + 1)?;
        let result = self.slot_of(br, m.span(br))?;
        let inner: Vec<ExprId> = self.assigned.drain(mark..).collect();
        for x in &inner {
            self.slots.remove(x);
        }
        let result_inner = !self.slots.values().any(|&s| s == result)
            && !self.const_slots.values().any(|&s| s == result);
        Ok(Block {
            steps,
            result,
            result_inner,
        })
    }

    fn lower_group(
        &mut self,
        group: &Group,
        span: Span,
        steps: &mut Vec<Step>,
    ) -> Result<(), Unsupported> {
        let m = self.m;
        let compiled = self.policy.compile_group(m, group)?;
        let label = Unit::Group { module: m, group }.describe();
        let label = label
            .strip_prefix("operator `")
            .and_then(|s| s.strip_suffix('`'))
            .map(str::to_string)
            .unwrap_or(label);
        let outputs = group.outputs.clone();
        self.kernel_step(
            group.members[group.members.len() - 1],
            &label,
            compiled,
            &group.inputs,
            &outputs,
            span,
            steps,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn kernel_step(
        &mut self,
        at: ExprId,
        label: &str,
        compiled: Compiled,
        inputs: &[ExprId],
        outputs: &[ExprId],
        span: Span,
        steps: &mut Vec<Step>,
    ) -> Result<(), Unsupported> {
        let m = self.m;
        let mut consts = Vec::with_capacity(inputs.len());
        let mut slots = Vec::new();
        for (i, &a) in inputs.iter().enumerate() {
            if matches!(m.expr(a), Expr::Const(_)) {
                consts.push(Some(self.constant(a)?));
            } else {
                consts.push(None);
                slots.push(self.slot_of(a, m.operand_span(at, i, a))?);
            }
        }
        let kernel = compiled.kernel.prepare(&consts)?;
        let mut outs = Vec::with_capacity(outputs.len());
        let mut flat = Vec::new();
        for &o in outputs {
            let ty = m.ty(o).cloned().ok_or_else(|| {
                Unsupported::construct("internal error: an untyped expression", Some(m.span(o)))
            })?;
            flat.extend(flat_shapes(&ty).ok_or_else(|| {
                Unsupported::construct(
                    format!("the result type `{ty}` is not made of tensors with static shapes"),
                    Some(m.span(o)),
                )
            })?);
            let s = self.fresh();
            self.assign(o, s);
            outs.push((s, ty));
        }
        let record = self.kernels.len();
        self.kernels.push(KernelRecord {
            label: label.to_string(),
            backend: compiled.backend,
            span,
        });
        steps.push(Step {
            kind: StepKind::Kernel {
                kernel,
                inputs: slots,
                outs,
                flat,
                record,
                time: KernelTime::default(),
            },
            span,
            frees: Vec::new(),
        });
        Ok(())
    }
}
