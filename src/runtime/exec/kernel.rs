//! The kernel interface: what every backend implements, and what the executor and the
//! measurements call.
//!
//! Every backend sits behind one interface, in three stages:
//!
//! 1. [`Backend::compile`] turns a [`Unit`] (a function of the module, such as a `Primitive=1`
//!    or `Compiler="..."` function called from `@main`, or a group of inline operator calls of a
//!    function body) into a [`Kernel`], once. A backend that cannot run the unit says so with
//!    [`Unsupported`]; the caller then falls back to the next backend (in the end the
//!    [reference](super::reference) interpreter, which runs everything the interpreter
//!    supports) and the run goes on.
//! 2. [`Kernel::prepare`] binds the constant inputs of one call site (weights, scalar literals)
//!    and returns a [`Prepared`] kernel. This is where a backend may repack or fold weights; it
//!    happens once, outside any timing.
//! 3. [`Prepared::run`] runs on tensors, any number of times. Inputs are the tensors of the
//!    non-constant inputs, flattened in order (a tuple is its fields, depth first); outputs are
//!    tensors of the unit's flattened output types, allocated by the caller, which the kernel
//!    overwrites (or replaces with tensors of the same type). A data-dependent failure is a
//!    [`RunError`]. Besides its tensors a running kernel gets a [`RunCx`]: the run's
//!    [`MemCounter`] of live bytes and, when the run reuses storage, its [`Buffers`].
//!
//! Backends, kernels and prepared kernels are `Send + Sync` trait objects, so an executor can
//! hold them in one list and a measurement can time them from any thread. Each backend has a
//! name and a version, for cache keys.
//!
//! This module sits between the tensors ([`super::tensor`], [`super::value`]) and what runs
//! kernels: programs ([`super::program`]), the executor ([`super::executor`]) and the reference
//! interpreter ([`super::reference`]). The other backends, which implement [`Backend`], are in
//! [`crate::runtime::backend`].

use super::tensor::{Storage, Tensor, ALIGN};
use crate::diag::{Code, Diagnostic};
use crate::ir::{ExprId, FuncId, Module, Type};
use crate::source::Span;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

/// A group of inline expressions of a function body (operator calls, and the tuples and
/// projections between them) compiled as one kernel. Its inputs are the values it reads from
/// outside (in order of first use, constants included); its outputs are the members whose
/// values are used outside the group (in expression order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The function whose body holds the group.
    pub func: FuncId,
    /// The members, in expression (post-) order.
    pub members: Vec<ExprId>,
    /// The expressions read from outside, in order of first use.
    pub inputs: Vec<ExprId>,
    /// The members used outside the group, in expression order.
    pub outputs: Vec<ExprId>,
}

/// What a backend compiles.
#[derive(Clone, Copy, Debug)]
pub enum Unit<'a> {
    /// A function (a global `def` or a `fn` literal): its parameters are the inputs, its result
    /// is the output.
    Function {
        /// The module.
        module: &'a Module,
        /// The function.
        func: FuncId,
    },
    /// A group of inline expressions of a function body.
    Group {
        /// The module.
        module: &'a Module,
        /// The group.
        group: &'a Group,
    },
}

impl<'a> Unit<'a> {
    /// The module the unit belongs to.
    pub fn module(&self) -> &'a Module {
        match *self {
            Unit::Function { module, .. } | Unit::Group { module, .. } => module,
        }
    }

    /// The expressions whose values are the inputs (parameters' variables for a function).
    pub fn input_exprs(&self) -> Vec<ExprId> {
        match *self {
            Unit::Function { module, func } => module
                .func(func)
                .params
                .iter()
                .map(|&p| module.var(p).expr)
                .collect(),
            Unit::Group { group, .. } => group.inputs.clone(),
        }
    }

    /// The expressions whose values are the outputs (the body for a function).
    pub fn output_exprs(&self) -> Vec<ExprId> {
        match *self {
            Unit::Function { module, func } => vec![module.func(func).body],
            Unit::Group { group, .. } => group.outputs.clone(),
        }
    }

    /// The types of the inputs (`None` where type inference left one out).
    pub fn input_types(&self) -> Vec<Option<Type>> {
        let m = self.module();
        self.input_exprs()
            .iter()
            .map(|&e| m.ty(e).cloned())
            .collect()
    }

    /// The types of the outputs.
    pub fn output_types(&self) -> Vec<Option<Type>> {
        let m = self.module();
        self.output_exprs()
            .iter()
            .map(|&e| m.ty(e).cloned())
            .collect()
    }

    /// A short description for messages: `function @name` or `operator nn.dense`.
    pub fn describe(&self) -> String {
        match *self {
            Unit::Function { module, func } => match function_name(module, func) {
                Some(n) => format!("function `@{n}`"),
                None => "a function literal".to_string(),
            },
            Unit::Group { module, group } => {
                let ops: Vec<&str> = group
                    .members
                    .iter()
                    .filter_map(|&e| module.called_op(e).map(|op| crate::ops::op(op).name))
                    .collect();
                match ops.as_slice() {
                    [one] => format!("operator `{one}`"),
                    _ => format!("a group of {} operators ({})", ops.len(), ops.join(", ")),
                }
            }
        }
    }
}

/// The name of a global function, if `func` is one.
pub fn function_name(m: &Module, func: FuncId) -> Option<&str> {
    m.defs
        .iter()
        .find(|(_, f)| *f == func)
        .map(|(g, _)| m.globals[g.index()].name.as_str())
}

/// Why a unit cannot be compiled (or a kernel not prepared) by a backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// The diagnostic code this becomes when no backend is left to fall back to.
    pub code: Code,
    /// Lowercase, no trailing period.
    pub message: String,
    /// Where the unsupported construct is written, when known.
    pub span: Option<Span>,
}

impl Unsupported {
    /// An unsupported operator, attribute or dtype (E2301).
    pub fn op(message: impl Into<String>, span: Option<Span>) -> Unsupported {
        Unsupported {
            code: crate::diag::E2301,
            message: message.into(),
            span,
        }
    }

    /// An unsupported construct of the program (E2302).
    pub fn construct(message: impl Into<String>, span: Option<Span>) -> Unsupported {
        Unsupported {
            code: crate::diag::E2302,
            message: message.into(),
            span,
        }
    }

    /// The diagnostic.
    pub fn to_diagnostic(&self) -> Diagnostic {
        let d = Diagnostic::error(self.code, self.message.clone());
        match self.span {
            Some(s) => d.with_primary(s, "cannot be executed"),
            None => d,
        }
    }
}

/// A failure while running a kernel (a data-dependent error such as an integer division by
/// zero).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunError {
    /// Lowercase, no trailing period.
    pub message: String,
    /// The call that failed, when known.
    pub span: Option<Span>,
}

impl RunError {
    /// An error without a location yet (the executor adds the call's span).
    pub fn new(message: impl Into<String>) -> RunError {
        RunError {
            message: message.into(),
            span: None,
        }
    }

    /// The diagnostic (E2303).
    pub fn to_diagnostic(&self) -> Diagnostic {
        let d = Diagnostic::error(crate::diag::E2303, self.message.clone());
        match self.span {
            Some(s) => d.with_primary(s, "failed here"),
            None => d,
        }
    }
}

/// Where constants come from: the module's meta table data or generated weights.
pub trait ConstantSource: Sync {
    /// The value of the constant expression `e` of `m`.
    fn constant(&self, m: &Module, e: ExprId) -> Result<Arc<Tensor>, String>;
}

/// What a running kernel may use besides its tensors.
pub struct RunCx<'a> {
    /// Bytes of live tensors, for the peak-memory report. Kernels that allocate tensors of their
    /// own through a nested program count them here.
    pub mem: &'a MemCounter,
    /// Storage of freed tensors to put the outputs of overwriting kernels on (`None`: every
    /// output is freshly zeroed).
    pub buffers: Option<&'a Buffers>,
}

/// Storage of freed tensors, by size in lines, for the outputs of kernels that overwrite them.
/// It keeps only storage of the sizes such outputs have ([`Buffers::for_sizes`]; none for
/// [`Buffers::default`]), so storage that nothing would reuse goes back to the allocator at
/// once, and at most [`Buffers::LIMIT`] bytes; an executable keeps one across its runs.
#[derive(Debug, Default)]
pub struct Buffers {
    free: Mutex<FreeList>,
    /// The sizes kept, in lines.
    wanted: BTreeSet<usize>,
}

/// Freed storage by size in lines, and the bytes it holds.
type FreeList = (BTreeMap<usize, Vec<Storage>>, usize);

impl Buffers {
    /// The most bytes kept.
    pub const LIMIT: usize = 1 << 30;

    /// Buffers that keep storage of `wanted` sizes (in lines) only.
    pub fn for_sizes(wanted: BTreeSet<usize>) -> Buffers {
        Buffers {
            free: Mutex::default(),
            wanted,
        }
    }

    /// Keeps `storage` for reuse (dropped when no output has its size, or when the limit would
    /// be passed).
    pub fn put(&self, storage: Storage) {
        let bytes = storage.as_bytes().len();
        if bytes == 0 || !self.wanted.contains(&storage.lines()) {
            return;
        }
        let mut g = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if g.1 + bytes > Buffers::LIMIT {
            return;
        }
        g.1 += bytes;
        g.0.entry(storage.lines()).or_default().push(storage);
    }

    /// Storage of exactly `n` lines, if some was freed.
    pub fn take(&self, n: usize) -> Option<Storage> {
        let mut g = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let list = g.0.get_mut(&n)?;
        let w = list.pop()?;
        if list.is_empty() {
            g.0.remove(&n);
        }
        g.1 -= n * ALIGN;
        Some(w)
    }

    /// Bytes kept.
    pub fn bytes(&self) -> usize {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).1
    }
}

/// Bytes of live tensors and their peak.
#[derive(Debug, Default)]
pub struct MemCounter {
    live: AtomicI64,
    peak: AtomicI64,
}

impl MemCounter {
    /// A counter starting at `base` bytes (inputs and weights).
    pub fn new(base: u64) -> MemCounter {
        let b = base as i64;
        MemCounter {
            live: AtomicI64::new(b),
            peak: AtomicI64::new(b),
        }
    }

    /// Counts `bytes` more live bytes.
    pub fn alloc(&self, bytes: usize) {
        let now = self.live.fetch_add(bytes as i64, Ordering::Relaxed) + bytes as i64;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Counts `bytes` fewer live bytes.
    pub fn free(&self, bytes: usize) {
        self.live.fetch_sub(bytes as i64, Ordering::Relaxed);
    }

    /// The largest number of live bytes seen.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed).max(0) as u64
    }

    /// The current number of live bytes.
    pub fn live(&self) -> u64 {
        self.live.load(Ordering::Relaxed).max(0) as u64
    }
}

/// A compiled unit.
pub trait Kernel: Send + Sync {
    /// Binds the constant inputs of one call site: `consts[i]` is the value of input `i` of the
    /// unit when it is a constant at this site. The prepared kernel takes the remaining inputs.
    fn prepare(&self, consts: &[Option<Arc<Tensor>>]) -> Result<Box<dyn Prepared>, Unsupported>;
}

/// A kernel bound to one call site.
pub trait Prepared: Send + Sync {
    /// Runs once. `inputs`: the tensors of the non-constant inputs, flattened in order (shared,
    /// so a backend that runs a nested program can pass them on without copying).
    /// `outputs`: caller-allocated tensors of the flattened output types.
    fn run(
        &self,
        inputs: &[Arc<Tensor>],
        outputs: &mut [Tensor],
        cx: &RunCx<'_>,
    ) -> Result<(), RunError>;

    /// Whether `run` writes every element of every output, so that the outputs may be given
    /// on reused storage holding stale values instead of zeros. The default is `false`.
    fn overwrites_outputs(&self) -> bool {
        false
    }

    /// `Some(i)` when the kernel's one output holds exactly the bytes of input `i` (an index
    /// into `run`'s `inputs`) under another shape, as a chain of `reshape`, `squeeze` and
    /// `expand_dims` does. A program may then hand that input's tensor on as the output, without
    /// running the kernel, when nothing else holds it (see `program`, "Views"). `run` must still
    /// compute the output when called. The default is `None`.
    fn output_is_view_of(&self) -> Option<usize> {
        None
    }

    /// Calls `f` on each buffer the kernel keeps from one call to the next: the call site's
    /// constants, weights it packed, its own working memory. Measurements evict these before a
    /// timed call, as inside a whole model the other kernels have evicted them (see
    /// `measure::flush`). The default keeps nothing.
    fn resident(&self, f: &mut dyn FnMut(&[u8])) {
        let _ = f;
    }
}

/// Calls `f` on the bytes of each constant of `consts` (a helper for [`Prepared::resident`]).
pub fn constants_resident(consts: &[Option<Arc<Tensor>>], f: &mut dyn FnMut(&[u8])) {
    for t in consts.iter().flatten() {
        f(t.bytes());
    }
}

/// A backend.
pub trait Backend: Send + Sync {
    /// Its name (`reference`, ...).
    fn name(&self) -> &str;
    /// Its version, for cache keys (the library's version where one is loaded).
    fn version(&self) -> String;
    /// Whether the backend is asked to compile units whose function has this `Compiler`
    /// attribute; `None` stands for native code: `Primitive=1` functions without `Compiler` and
    /// the groups of inline operator calls of `@main`.
    fn handles(&self, compiler: Option<&str>) -> bool;
    /// Called before the units of a program are compiled one by one, with all of them, so that
    /// the backend can compile them together (native code generation runs the C compiler on
    /// several kernels at once, several compilers in parallel). The default does nothing;
    /// `compile` must work without it.
    fn precompile(&self, _units: &[Unit<'_>], _consts: &dyn ConstantSource) {}

    /// Compiles a unit. `consts` gives the values of constants written inside it.
    fn compile(
        &self,
        unit: &Unit<'_>,
        consts: &dyn ConstantSource,
    ) -> Result<Arc<dyn Kernel>, Unsupported>;
}

/// The backends an executor may use, in order of preference. The reference interpreter is
/// always the last resort and is not listed.
#[derive(Clone, Default)]
pub struct Backends {
    /// Backends tried before the reference interpreter, in order.
    pub list: Vec<Arc<dyn Backend>>,
}

impl Backends {
    /// No backend but the reference interpreter.
    pub fn reference_only() -> Backends {
        Backends::default()
    }

    /// The backends to try for units with this `Compiler` attribute, in order.
    pub fn for_compiler(&self, compiler: Option<&str>) -> Vec<&Arc<dyn Backend>> {
        self.list.iter().filter(|b| b.handles(compiler)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_give_back_storage_of_the_size_asked_within_the_limit() {
        let filled = |lines: usize, v: u8| {
            let mut s = Storage::zeroed(lines).unwrap();
            s.as_bytes_mut().fill(v);
            s
        };
        let b = Buffers::for_sizes([4, 8, Buffers::LIMIT / 64, 1].into_iter().collect());
        b.put(filled(4, 1));
        b.put(filled(4, 2));
        b.put(filled(8, 3));
        b.put(Storage::zeroed(0).unwrap());
        assert_eq!(b.bytes(), 16 * 64);
        assert!(b.take(5).is_none());
        assert_eq!(b.take(8), Some(filled(8, 3)));
        assert!(b.take(4).is_some());
        assert!(b.take(4).is_some());
        assert!(b.take(4).is_none());
        assert_eq!(b.bytes(), 0);
        // Storage beyond the limit is dropped.
        b.put(Storage::zeroed(Buffers::LIMIT / 64).unwrap());
        b.put(filled(1, 0));
        assert_eq!(b.bytes(), Buffers::LIMIT);
    }

    #[test]
    fn buffers_keep_only_the_sizes_wanted() {
        let b = Buffers::for_sizes([4].into_iter().collect());
        b.put(Storage::zeroed(3).unwrap());
        b.put(Storage::zeroed(5).unwrap());
        assert_eq!(b.bytes(), 0);
        b.put(Storage::zeroed(4).unwrap());
        assert_eq!(b.bytes(), 4 * 64);
        let none = Buffers::default();
        none.put(Storage::zeroed(4).unwrap());
        assert_eq!(none.bytes(), 0);
    }
}
