//! BYOC partitions as the library backends see them: a `Compiler="X"` function whose body is a
//! graph of calls of `Composite="X.name"` function literals, read into a small graph of
//! composite calls over the partition's parameters and constants.
//!
//! Both library backends ([`super::dnnl`], [`super::openblas`]) start from this graph: each
//! [`Node::Call`] is one composite, to be mapped onto library calls, and the function's result
//! (a tensor, or a tuple of them) lists the outputs.

use crate::ir::{Callee, Expr, ExprId, FuncId, Module, Type, VarId};
use crate::runtime::exec::kernel::{ConstantSource, Unsupported};
use crate::runtime::exec::tensor::{Shape, Tensor};
use std::collections::HashMap;
use std::sync::Arc;

/// A value of the partition.
#[derive(Clone)]
pub enum Node {
    /// Parameter `i` of the partition function.
    Param(usize),
    /// A constant written in the partition's body.
    Const(Arc<Tensor>),
    /// A call of a composite function literal with the given argument nodes.
    Call {
        /// The composite function.
        func: FuncId,
        /// Its `Composite` attribute.
        name: String,
        /// The nodes passed as arguments, in order.
        args: Vec<usize>,
        /// The call expression.
        expr: ExprId,
    },
}

/// A partition read as a graph of composite calls.
pub struct Graph {
    /// The static shape of every parameter.
    pub params: Vec<Shape>,
    /// The nodes; operands precede their users.
    pub nodes: Vec<Node>,
    /// The static shape of every node's value.
    pub shapes: Vec<Shape>,
    /// The nodes whose values are the function's results, in order (a tuple result lists its
    /// fields).
    pub outputs: Vec<usize>,
}

impl Graph {
    /// How many times each node is read (by calls and as an output).
    pub fn uses(&self) -> Vec<usize> {
        let mut uses = vec![0usize; self.nodes.len()];
        for n in &self.nodes {
            if let Node::Call { args, .. } = n {
                for &a in args {
                    uses[a] += 1;
                }
            }
        }
        for &o in &self.outputs {
            uses[o] += 1;
        }
        uses
    }
}

/// The static shape of a tensor type, or why there is none.
pub fn tensor_shape(m: &Module, e: ExprId) -> Result<Shape, Unsupported> {
    match m.ty(e) {
        Some(Type::Tensor(t)) => Shape::of(t).ok_or_else(|| {
            Unsupported::construct(format!("`{t}` has no static shape"), Some(m.span(e)))
        }),
        Some(other) => Err(Unsupported::construct(
            format!("a value of type `{other}` where a tensor is expected"),
            Some(m.span(e)),
        )),
        None => Err(Unsupported::construct(
            "internal error: an untyped expression",
            Some(m.span(e)),
        )),
    }
}

/// The values of let-bound variables of a module.
pub fn let_values(m: &Module) -> HashMap<VarId, ExprId> {
    m.exprs
        .iter()
        .filter_map(|e| match e {
            Expr::Let { var, value, .. } => Some((*var, *value)),
            _ => None,
        })
        .collect()
}

/// Follows let-bound variables and `let` bodies to the expression that computes a value.
fn resolve(m: &Module, lets: &HashMap<VarId, ExprId>, mut e: ExprId) -> ExprId {
    for _ in 0..=m.exprs.len() {
        match m.expr(e) {
            Expr::Var(v) => match lets.get(v) {
                Some(&val) => e = val,
                None => return e,
            },
            Expr::Let { body, .. } => e = *body,
            _ => return e,
        }
    }
    e
}

/// Reads the function `func` (a `Compiler=` partition) of `m` into a graph of composite calls.
/// Anything but composite calls, parameters, constants and a result tuple is unsupported.
pub fn read(m: &Module, func: FuncId, consts: &dyn ConstantSource) -> Result<Graph, Unsupported> {
    let f = m.func(func);
    let lets = let_values(m);
    let mut params = Vec::with_capacity(f.params.len());
    let mut param_index: HashMap<VarId, usize> = HashMap::new();
    for (i, &p) in f.params.iter().enumerate() {
        params.push(tensor_shape(m, m.var(p).expr)?);
        param_index.insert(p, i);
    }
    let body = resolve(m, &lets, f.body);
    let roots: Vec<ExprId> = match m.expr(body) {
        Expr::Tuple(fields) => fields.iter().map(|&e| resolve(m, &lets, e)).collect(),
        _ => vec![body],
    };
    let mut g = Graph {
        params,
        nodes: Vec::new(),
        shapes: Vec::new(),
        outputs: Vec::new(),
    };
    let mut memo: HashMap<ExprId, usize> = HashMap::new();
    // Post-order with an explicit stack: (expression, whether its operands are done).
    for &root in &roots {
        let mut stack: Vec<(ExprId, bool)> = vec![(root, false)];
        while let Some((e, ready)) = stack.pop() {
            if memo.contains_key(&e) {
                continue;
            }
            match m.expr(e) {
                Expr::Var(v) => {
                    let i = *param_index.get(v).ok_or_else(|| {
                        Unsupported::construct(
                            format!("`%{}` is not a parameter of the partition", m.var(*v).name),
                            Some(m.span(e)),
                        )
                    })?;
                    memo.insert(e, g.nodes.len());
                    g.shapes.push(g.params[i].clone());
                    g.nodes.push(Node::Param(i));
                }
                Expr::Const(_) => {
                    let t = consts
                        .constant(m, e)
                        .map_err(|msg| Unsupported::construct(msg, Some(m.span(e))))?;
                    memo.insert(e, g.nodes.len());
                    g.shapes.push(t.ty());
                    g.nodes.push(Node::Const(t));
                }
                Expr::Call {
                    callee: Callee::Expr(c),
                    args,
                    ..
                } => {
                    let args: Vec<ExprId> = args.iter().map(|&a| resolve(m, &lets, a)).collect();
                    if !ready {
                        stack.push((e, true));
                        for &a in args.iter().rev() {
                            if !memo.contains_key(&a) {
                                stack.push((a, false));
                            }
                        }
                        continue;
                    }
                    let callee = resolve(m, &lets, *c);
                    let Expr::Func(cf) = m.expr(callee) else {
                        return Err(Unsupported::construct(
                            "a call of something other than a composite function literal",
                            Some(m.span(e)),
                        ));
                    };
                    let name = m
                        .func(*cf)
                        .attr("Composite")
                        .and_then(|v| v.as_str())
                        .ok_or_else(|| {
                            Unsupported::construct(
                                "a call of a function literal without a `Composite` attribute",
                                Some(m.span(e)),
                            )
                        })?
                        .to_string();
                    let shape = tensor_shape(m, e)?;
                    let arg_nodes = args.iter().map(|a| memo[a]).collect();
                    memo.insert(e, g.nodes.len());
                    g.shapes.push(shape);
                    g.nodes.push(Node::Call {
                        func: *cf,
                        name,
                        args: arg_nodes,
                        expr: e,
                    });
                }
                Expr::Call {
                    callee: Callee::Op(op),
                    ..
                } => {
                    return Err(Unsupported::op(
                        format!(
                            "operator `{}` outside a composite",
                            crate::ops::op(*op).name
                        ),
                        Some(m.span(e)),
                    ))
                }
                other => {
                    return Err(Unsupported::construct(
                        format!(
                            "a {} inside the partition (only composite calls are run)",
                            other.kind_name()
                        ),
                        Some(m.span(e)),
                    ))
                }
            }
        }
        g.outputs.push(memo[&root]);
    }
    Ok(g)
}
