//! The reference backend: runs any unit by interpreting it, one operator at a time, with the
//! implementations of [`crate::runtime::exec::ops`]. It is the numeric oracle the other backends are
//! checked against and the fallback for what they cannot run.
//!
//! * A single operator call compiles to that operator's implementation; preparing binds its
//!   constant arguments.
//! * A function, or a group of several expressions, compiles to a nested [`Program`] whose
//!   operator calls are single-operator kernels of this backend; calls of functions inside it
//!   (composites, nested `fn` literals, other globals) compile recursively. Recursive
//!   functions and calls nested more than [`MAX_CALL_DEPTH`] deep are reported as unsupported.

use super::kernel::{
    Backend, ConstantSource, Group, Kernel, Prepared, RunCx, RunError, Unit, Unsupported,
};
use crate::ir::{Callee, Expr, ExprId, FuncId, Module, Type};
use crate::ops::Op;
use crate::runtime::exec::ops::{self, Call, OpImpl};
use crate::runtime::exec::program::{release, Compiled, Policy, Program, Region};
use crate::runtime::exec::tensor::{Shape, Tensor};
use crate::runtime::exec::value::{flat_shapes, Value};
use std::sync::Arc;

/// How deeply calls of functions may nest inside one compiled unit.
pub const MAX_CALL_DEPTH: usize = 64;

/// The reference interpreter as a backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reference;

/// The backend's name.
pub const NAME: &str = "reference";

impl Backend for Reference {
    fn name(&self) -> &str {
        NAME
    }

    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn handles(&self, _compiler: Option<&str>) -> bool {
        true
    }

    fn compile(
        &self,
        unit: &Unit<'_>,
        consts: &dyn ConstantSource,
    ) -> Result<Arc<dyn Kernel>, Unsupported> {
        compile_unit(unit, consts, &mut Vec::new())
    }
}

fn compile_unit(
    unit: &Unit<'_>,
    consts: &dyn ConstantSource,
    stack: &mut Vec<FuncId>,
) -> Result<Arc<dyn Kernel>, Unsupported> {
    match *unit {
        Unit::Group { module, group } if is_single_op(module, group) => {
            Ok(Arc::new(op_kernel(module, group.members[0])?))
        }
        Unit::Group { module, group } => {
            let region = Region {
                func: group.func,
                inputs: group.inputs.clone(),
                outputs: group.outputs.clone(),
            };
            program_kernel(module, &region, consts, stack)
        }
        Unit::Function { module, func } => {
            if stack.contains(&func) {
                return Err(Unsupported::construct(
                    "recursive functions cannot be executed",
                    Some(module.func(func).span),
                ));
            }
            if stack.len() >= MAX_CALL_DEPTH {
                return Err(Unsupported::construct(
                    format!(
                        "function calls nested more than {MAX_CALL_DEPTH} deep cannot be executed"
                    ),
                    Some(module.func(func).span),
                ));
            }
            stack.push(func);
            let r = program_kernel(module, &Region::function(module, func), consts, stack);
            stack.pop();
            r
        }
    }
}

/// Whether a group is one operator call with its arguments as inputs.
fn is_single_op(m: &Module, g: &Group) -> bool {
    match g.members.as_slice() {
        [e] => {
            matches!(m.expr(*e), Expr::Call { callee: Callee::Op(_), args, .. } if *args == g.inputs)
        }
        _ => false,
    }
}

/// The flattened static shapes of an expression's type.
fn shapes_of(m: &Module, e: ExprId) -> Result<Vec<Shape>, Unsupported> {
    let ty = m.ty(e).ok_or_else(|| {
        Unsupported::construct("internal error: an untyped expression", Some(m.span(e)))
    })?;
    flat_shapes(ty).ok_or_else(|| {
        Unsupported::construct(
            format!(
                "`{ty}` is not made of tensors with static shapes, which the interpreter needs"
            ),
            Some(m.span(e)),
        )
    })
}

/// One operator call.
struct OpKernel {
    imp: Arc<dyn OpImpl>,
    /// Flat tensors per argument.
    arg_sizes: Vec<usize>,
    /// Whether the result is the one argument under another shape.
    view: bool,
}

fn op_kernel(m: &Module, e: ExprId) -> Result<OpKernel, Unsupported> {
    let Expr::Call {
        callee: Callee::Op(op),
        args,
        attrs,
    } = m.expr(e)
    else {
        return Err(Unsupported::construct(
            "internal error: not an operator call",
            Some(m.span(e)),
        ));
    };
    let def = crate::ops::op(*op);
    let mut flat = Vec::new();
    let mut arg_sizes = Vec::new();
    for &a in args {
        let s = shapes_of(m, a)?;
        arg_sizes.push(s.len());
        flat.extend(s);
    }
    let call = Call {
        op: def,
        attrs,
        args: flat,
        outs: shapes_of(m, e)?,
    };
    // A reshape of one tensor relabels it (`Prepared::output_is_view_of`).
    let view = matches!(def.op, Op::Reshape | Op::ExpandDims | Op::Squeeze)
        && arg_sizes == [1]
        && call.outs.len() == 1
        && call.args[0].dtype == call.outs[0].dtype;
    let imp = ops::instantiate(&call).map_err(|reason| Unsupported::op(reason, Some(m.span(e))))?;
    Ok(OpKernel {
        imp: Arc::from(imp),
        arg_sizes,
        view,
    })
}

impl Kernel for OpKernel {
    fn prepare(&self, consts: &[Option<Arc<Tensor>>]) -> Result<Box<dyn Prepared>, Unsupported> {
        Ok(Box::new(PreparedOp {
            imp: self.imp.clone(),
            arg_sizes: self.arg_sizes.clone(),
            view: self.view && consts.first().is_none_or(Option::is_none),
            consts: consts.to_vec(),
        }))
    }
}

struct PreparedOp {
    imp: Arc<dyn OpImpl>,
    arg_sizes: Vec<usize>,
    /// Whether the output is input 0 under another shape (a reshape of a non-constant).
    view: bool,
    consts: Vec<Option<Arc<Tensor>>>,
}

impl Prepared for PreparedOp {
    fn output_is_view_of(&self) -> Option<usize> {
        self.view.then_some(0)
    }

    fn resident(&self, f: &mut dyn FnMut(&[u8])) {
        crate::runtime::exec::kernel::constants_resident(&self.consts, f);
    }

    fn run(
        &self,
        inputs: &[Arc<Tensor>],
        outputs: &mut [Tensor],
        _cx: &RunCx<'_>,
    ) -> Result<(), RunError> {
        let mut args: Vec<&Tensor> = Vec::with_capacity(inputs.len() + self.consts.len());
        let mut it = inputs.iter();
        for (i, &n) in self.arg_sizes.iter().enumerate() {
            match self.consts.get(i).and_then(Option::as_ref) {
                Some(c) => args.push(c),
                None => {
                    for _ in 0..n {
                        args.push(it.next().ok_or_else(|| {
                            RunError::new("internal error: too few kernel inputs")
                        })?);
                    }
                }
            }
        }
        self.imp.run(&args, outputs)
    }
}

/// Calls inside a nested program: every operator alone, functions compiled recursively.
struct ReferencePolicy<'a> {
    consts: &'a dyn ConstantSource,
    stack: &'a mut Vec<FuncId>,
}

impl Policy for ReferencePolicy<'_> {
    fn compile_group(&mut self, m: &Module, group: &Group) -> Result<Compiled, Unsupported> {
        Ok(Compiled {
            kernel: compile_unit(&Unit::Group { module: m, group }, self.consts, self.stack)?,
            backend: NAME.to_string(),
        })
    }

    fn compile_function(
        &mut self,
        m: &Module,
        func: FuncId,
        _call: ExprId,
    ) -> Result<Compiled, Unsupported> {
        Ok(Compiled {
            kernel: compile_unit(&Unit::Function { module: m, func }, self.consts, self.stack)?,
            backend: NAME.to_string(),
        })
    }
}

/// A nested program.
struct ProgramKernel {
    program: Arc<Program>,
    input_types: Vec<Type>,
}

fn program_kernel(
    m: &Module,
    region: &Region,
    consts: &dyn ConstantSource,
    stack: &mut Vec<FuncId>,
) -> Result<Arc<dyn Kernel>, Unsupported> {
    let input_types = region
        .inputs
        .iter()
        .map(|&e| {
            shapes_of(m, e)?;
            Ok(m.ty(e).cloned().unwrap_or(Type::Tuple(Vec::new())))
        })
        .collect::<Result<Vec<_>, Unsupported>>()?;
    for &o in &region.outputs {
        shapes_of(m, o)?;
    }
    let mut policy = ReferencePolicy { consts, stack };
    let program = Program::lower(m, region, &mut policy, consts)?;
    Ok(Arc::new(ProgramKernel {
        program: Arc::new(program),
        input_types,
    }))
}

impl Kernel for ProgramKernel {
    fn prepare(&self, consts: &[Option<Arc<Tensor>>]) -> Result<Box<dyn Prepared>, Unsupported> {
        Ok(Box::new(PreparedProgram {
            program: self.program.clone(),
            input_types: self.input_types.clone(),
            consts: consts.to_vec(),
        }))
    }
}

struct PreparedProgram {
    program: Arc<Program>,
    input_types: Vec<Type>,
    consts: Vec<Option<Arc<Tensor>>>,
}

impl Prepared for PreparedProgram {
    fn resident(&self, f: &mut dyn FnMut(&[u8])) {
        crate::runtime::exec::kernel::constants_resident(&self.consts, f);
        self.program.resident(f);
    }

    fn run(
        &self,
        inputs: &[Arc<Tensor>],
        outputs: &mut [Tensor],
        cx: &RunCx<'_>,
    ) -> Result<(), RunError> {
        let mut it = inputs.iter().cloned();
        let mut values = Vec::with_capacity(self.input_types.len());
        for (i, ty) in self.input_types.iter().enumerate() {
            let v = match self.consts.get(i).and_then(Option::as_ref) {
                Some(c) => Value::Tensor(c.clone()),
                None => Value::unflatten(ty, &mut it)
                    .ok_or_else(|| RunError::new("internal error: too few kernel inputs"))?,
            };
            values.push(v);
        }
        let results = self.program.run(values, cx)?;
        let mut flat: Vec<Arc<Tensor>> = Vec::with_capacity(outputs.len());
        for r in &results {
            flat.extend(r.flatten().into_iter().cloned());
        }
        drop(results);
        if flat.len() != outputs.len() {
            return Err(RunError::new(
                "internal error: a program produced the wrong number of results",
            ));
        }
        for (slot, t) in outputs.iter_mut().zip(flat) {
            match Arc::try_unwrap(t) {
                Ok(owned) => {
                    // The program's tensor replaces the caller's: one of the two is dropped.
                    cx.mem.free(owned.nbytes());
                    *slot = owned;
                }
                Err(shared) => {
                    slot.bytes_mut().copy_from_slice(shared.bytes());
                    release(Value::Tensor(shared), cx);
                }
            }
        }
        Ok(())
    }
}
