//! Extraction and rewriting of sub-graphs (docs/collage.md, "Extraction and rewriting").
//!
//! * [`extract`] turns a sub-graph into a standalone function: one parameter per input node
//!   (named `FunctionVar_<k>` and annotated with the input's type, numbered in TVM's first-use
//!   order, see [`walk`]), a body that recomputes the inside nodes, and as result the single exit
//!   or the tuple of the exits in increasing post-DFS order. Inlinable outside operands (scalar
//!   constants, operators, function literals) are copied in rather than passed. The nested
//!   sub-graphs become nested `fn` literals carrying their attributes (and parameters numbered
//!   the same way), called in place.
//! * [`rewrite`], [`rewrite_all`] and [`rewrite_nested`] replace nested sub-graphs in the
//!   function by calls of their extracted functions (projections of the call where there are
//!   several exits) and leave everything else untouched.
//!
//! Parameters are numbered as TVM's extractor numbers them (docs/collage.md), so that
//! structurally identical sub-graphs give identical functions whatever the order of their
//! operands in the graph (`add(%a, %b)` and `add(%b, %a)` both become
//! `add(%FunctionVar_0, %FunctionVar_1)`); for `{add(a,b) at 6, add(c,d) at 7}` the parameters
//! are `(c, d, a, b)`. Difference from TVM: every failure (overlapping or cyclic sub-graphs,
//! constructs we cannot move into a function) is an [`ExtractError`] instead of an abort.
//!
//! The result is a new [`Module`]: a copy of the graph's module with the new expressions
//! appended (the arena stays a post-order) and the function's body replaced; it is type-checked
//! before it is returned. Every traversal uses an explicit stack, so long chains cannot exhaust
//! the call stack; recursion happens only along the nesting of sub-graphs.

use super::graph::DataflowGraph;
use super::subgraph::{FnAttrs, SubGraph};
use crate::analysis::dataflow::{IndexSet, NodeRef};
use crate::ir::*;
use std::collections::{HashMap, HashSet};
use std::fmt;

/// Why a sub-graph cannot be extracted or rewritten.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExtractError {
    /// An index set was built for a graph of another size.
    WrongGraph,
    /// The sub-graph has no exit, so the function would have no result.
    NoExit,
    /// Two sub-graphs to rewrite at the same level overlap, or a nested sub-graph is not a
    /// subset of its parent.
    Overlap {
        /// A node in both (or in the nested one only).
        node: usize,
    },
    /// Data leaves a sub-graph and flows back into it, so no call can replace it.
    Cycle {
        /// A node on the cycle.
        node: usize,
    },
    /// A node that cannot be moved into a function (a variable, `let`, `if`, the function
    /// itself) or a rewrite inside a nested function literal or branch.
    Unsupported {
        /// The node.
        node: usize,
        /// What it is.
        what: String,
    },
    /// An input has no inferred type (the module was not type-checked).
    Untyped {
        /// The input node.
        node: usize,
    },
    /// The function does not belong to a `def` (standalone extraction needs its name).
    NotADefinition,
    /// The result does not type-check (a bug: the message is the first diagnostic).
    TypeCheck(String),
}

impl fmt::Display for ExtractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExtractError::WrongGraph => write!(f, "the sub-graph belongs to another graph"),
            ExtractError::NoExit => write!(f, "the sub-graph has no exit"),
            ExtractError::Overlap { node } => {
                write!(
                    f,
                    "sub-graphs overlap or are not nested properly at node {node}"
                )
            }
            ExtractError::Cycle { node } => {
                write!(
                    f,
                    "data leaves the sub-graph and flows back in at node {node}"
                )
            }
            ExtractError::Unsupported { node, what } => {
                write!(f, "node {node} ({what}) cannot be extracted or rewritten")
            }
            ExtractError::Untyped { node } => write!(f, "input node {node} has no type"),
            ExtractError::NotADefinition => write!(f, "the function is not a definition"),
            ExtractError::TypeCheck(msg) => write!(f, "the result does not type-check: {msg}"),
        }
    }
}

impl std::error::Error for ExtractError {}

type Result<T> = std::result::Result<T, ExtractError>;

/// TVM's extraction walk over a sub-graph (docs/collage.md, "Extraction and rewriting").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walk {
    /// The inside nodes in the order the walk first reaches them.
    pub members: Vec<usize>,
    /// The inputs in the order the walk first meets them: the parameters of the extracted
    /// function.
    pub params: Vec<usize>,
}

/// The walk TVM's extractor makes over `sub`: depth first from the inside node with the highest
/// post-DFS index, visiting each expression's operands in evaluation order (a call's callee, then
/// its arguments left to right), then again from the next lower inside node that the walk has
/// not reached yet. The first time the walk meets an input (an outside, non-inlinable operand),
/// that input becomes the next parameter. Function literals inside are copied whole, so the walk
/// does not enter them. The order depends only on the structure of the sub-graph, so two
/// structurally identical sub-graphs are extracted into identical functions.
pub fn walk(g: &DataflowGraph<'_>, sub: &SubGraph) -> Walk {
    let inside: Vec<usize> = sub.inside.iter().collect();
    let mut seen: HashSet<usize> = HashSet::with_capacity(inside.len() * 2);
    let mut out = Walk {
        members: Vec::with_capacity(inside.len()),
        params: Vec::with_capacity(sub.input.iter().count()),
    };
    let mut stack = Vec::new();
    for &start in inside.iter().rev() {
        stack.push(start);
        while let Some(n) = stack.pop() {
            if !seen.insert(n) {
                continue;
            }
            if !sub.inside.contains(n) {
                if sub.input.contains(n) {
                    out.params.push(n);
                }
                continue;
            }
            out.members.push(n);
            let Some(e) = g.expr(n) else { continue };
            if matches!(g.module.expr(e), Expr::Func(_)) {
                continue;
            }
            let operands = g.module.operands(e);
            stack.extend(operands.into_iter().rev().filter_map(|x| g.node(x)));
        }
    }
    // Every input feeds an inside node, so the walk meets it; keep any other in index order.
    for j in sub.input.iter() {
        if !seen.contains(&j) {
            out.params.push(j);
        }
    }
    out
}

/// The sub-graph as a standalone module whose only definition (named like the graph's function)
/// is the extracted function with attributes `attrs` (TVM's `ExtractAsFunction` when `attrs` is
/// empty). Nested sub-graphs become nested function literals called in place.
pub fn extract(g: &DataflowGraph<'_>, sg: &SubGraph, attrs: FnAttrs) -> Result<Module> {
    let global = g
        .module
        .defs
        .iter()
        .find(|(_, f)| *f == g.graph.func)
        .map(|&(gl, _)| gl)
        .ok_or(ExtractError::NotADefinition)?;
    check_nesting(g, std::slice::from_ref(sg))?;
    let mut b = Builder {
        g,
        out: g.module.clone(),
    };
    let (fid, _) = b.function(sg, attrs)?;
    let mut out = b.out;
    out.defs = vec![(global, fid)];
    out.globals[global.index()].def = Some(fid);
    finish(out)
}

/// TVM's `SubGraph::Rewrite`: every nested sub-graph of `sg` is replaced in the function by a
/// call of its extracted function (with the nested attributes); the nodes of `sg` that are in no
/// nested sub-graph stay in place. A sub-graph without nested ones leaves the function as it is.
pub fn rewrite(g: &DataflowGraph<'_>, sg: &SubGraph) -> Result<Module> {
    rewrite_all(g, std::slice::from_ref(sg))
}

/// TVM's `SubGraph::ParallelRewrite`: [`rewrite`] with several sub-graphs at once. Their nested
/// sub-graphs must be pairwise disjoint.
pub fn rewrite_all(g: &DataflowGraph<'_>, sgs: &[SubGraph]) -> Result<Module> {
    let groups: Vec<(SubGraph, FnAttrs)> = sgs.iter().flat_map(|s| s.nested.clone()).collect();
    rewrite_nested(g, &groups)
}

/// Replaces each sub-graph of `groups` (pairwise disjoint) by a call of its extracted function
/// with the given attributes.
pub fn rewrite_nested(g: &DataflowGraph<'_>, groups: &[(SubGraph, FnAttrs)]) -> Result<Module> {
    let subs: Vec<SubGraph> = groups.iter().map(|(s, _)| s.clone()).collect();
    check_nesting(g, &subs)?;
    // Top-level groups must be in the function's own basic block.
    for (s, _) in groups {
        for i in s.inside.iter() {
            if g.block[i] != Some(g.root) {
                return Err(ExtractError::Unsupported {
                    node: i,
                    what: "a node inside a nested function or branch".into(),
                });
            }
        }
    }
    let func = g.graph.func;
    let body = g.module.func(func).body;
    let body_node = g.node(body).ok_or(ExtractError::Unsupported {
        node: g.root as usize,
        what: "a function whose body is not in its graph".into(),
    })?;
    let mut b = Builder {
        g,
        out: g.module.clone(),
    };
    let mut scope = Scope::new(None, Vec::new(), groups);
    let item = scope.item(g, body_node).ok_or(ExtractError::Unsupported {
        node: body_node,
        what: "the function body".into(),
    })?;
    b.run(&mut scope, &[item])?;
    let new_body = scope.resolve(g, body_node)?;
    let mut out = b.out;
    out.funcs[func.index()].body = new_body;
    finish(out)
}

/// Type-checks the result.
fn finish(mut out: Module) -> Result<Module> {
    match crate::analysis::typeck::check(&mut out) {
        Ok(()) => Ok(out),
        Err(d) => Err(ExtractError::TypeCheck(
            d.iter()
                .next()
                .map_or_else(String::new, |x| x.message.clone()),
        )),
    }
}

/// Checks sizes, pairwise disjointness of siblings and that nested sub-graphs are subsets of
/// their parents, recursively.
fn check_nesting(g: &DataflowGraph<'_>, siblings: &[SubGraph]) -> Result<()> {
    let mut seen = IndexSet::new(g.len());
    for s in siblings {
        if s.inside.len() != g.len() {
            return Err(ExtractError::WrongGraph);
        }
        if let Some(node) = s.inside.intersection(&seen).first() {
            return Err(ExtractError::Overlap { node });
        }
        seen.union_with(&s.inside);
        let nested: Vec<SubGraph> = s.nested.iter().map(|(n, _)| n.clone()).collect();
        for n in &nested {
            if n.inside.len() != g.len() {
                return Err(ExtractError::WrongGraph);
            }
            if let Some(node) = n.inside.difference(&s.inside).first() {
                return Err(ExtractError::Overlap { node });
            }
        }
        check_nesting(g, &nested)?;
    }
    Ok(())
}

/// A unit of work: one node, or a whole nested sub-graph (replaced by one call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Item {
    Node(usize),
    Group(usize),
}

/// Where expressions are being built: the rewritten function (`region` is `None`) or the body of
/// an extracted function (`region` is its inside set, `params` its inputs' parameters).
struct Scope<'s> {
    region: Option<&'s IndexSet>,
    /// (input node, parameter expression), sorted by node.
    params: Vec<(usize, ExprId)>,
    groups: &'s [(SubGraph, FnAttrs)],
    /// The group each node belongs to (looked up, never iterated).
    group_of: HashMap<usize, usize>,
    /// The new expression of each node built so far.
    value: HashMap<usize, ExprId>,
    /// 0 new, 1 in progress, 2 done; per node and per group.
    node_state: HashMap<usize, u8>,
    group_state: Vec<u8>,
}

impl<'s> Scope<'s> {
    fn new(
        region: Option<&'s IndexSet>,
        params: Vec<(usize, ExprId)>,
        groups: &'s [(SubGraph, FnAttrs)],
    ) -> Scope<'s> {
        let mut group_of = HashMap::new();
        for (k, (s, _)) in groups.iter().enumerate() {
            for i in s.inside.iter() {
                group_of.insert(i, k);
            }
        }
        Scope {
            region,
            params,
            groups,
            group_of,
            value: HashMap::new(),
            node_state: HashMap::new(),
            group_state: vec![0; groups.len()],
        }
    }

    fn outside(&self, i: usize) -> bool {
        self.region.is_some_and(|r| !r.contains(i))
    }

    /// The work item that produces node `i`, if it must be built in this scope.
    fn item(&self, g: &DataflowGraph<'_>, i: usize) -> Option<Item> {
        if self.outside(i) || g.expr(i).is_none() {
            return None;
        }
        Some(match self.group_of.get(&i) {
            Some(&k) => Item::Group(k),
            None => Item::Node(i),
        })
    }

    /// The expression standing for node `i` in this scope (its dependencies are built).
    fn resolve(&self, g: &DataflowGraph<'_>, i: usize) -> Result<ExprId> {
        if self.outside(i) {
            if let Ok(p) = self.params.binary_search_by_key(&i, |&(n, _)| n) {
                return Ok(self.params[p].1);
            }
            return match g.expr(i) {
                Some(e) if g.inlinable[i] => Ok(e),
                _ => Err(ExtractError::Unsupported {
                    node: i,
                    what: "an outside operand that is neither an input nor inlinable".into(),
                }),
            };
        }
        self.value
            .get(&i)
            .copied()
            .ok_or_else(|| ExtractError::Unsupported {
                node: i,
                what: format!("a {} node", g.graph.kind_name(g.module, node_idx(i))),
            })
    }

    fn state(&self, item: Item) -> u8 {
        match item {
            Item::Node(i) => self.node_state.get(&i).copied().unwrap_or(0),
            Item::Group(k) => self.group_state[k],
        }
    }

    fn set_state(&mut self, item: Item, s: u8) {
        match item {
            Item::Node(i) => {
                self.node_state.insert(i, s);
            }
            Item::Group(k) => self.group_state[k] = s,
        }
    }
}

fn node_idx(i: usize) -> crate::analysis::dataflow::NodeIdx {
    crate::analysis::dataflow::NodeIdx(i as u32)
}

struct Builder<'a, 'm> {
    g: &'a DataflowGraph<'m>,
    out: Module,
}

impl Builder<'_, '_> {
    /// The items `item` needs before it can be built.
    fn deps(&self, scope: &Scope<'_>, item: Item) -> Vec<Item> {
        let g = self.g;
        let nodes: Vec<usize> = match item {
            Item::Node(i) => {
                // Inside an extracted function a function literal is copied as it is.
                let literal = g
                    .expr(i)
                    .is_some_and(|e| matches!(g.module.expr(e), Expr::Func(_)));
                if literal && scope.region.is_some() {
                    Vec::new()
                } else {
                    let e = g.expr(i);
                    e.map(|e| g.module.operands(e))
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|x| g.node(x))
                        .collect()
                }
            }
            Item::Group(k) => scope.groups[k].0.input.iter().collect(),
        };
        nodes
            .into_iter()
            .filter_map(|j| scope.item(g, j))
            .filter(|&d| d != item)
            .collect()
    }

    /// Builds `targets` and everything they depend on, depth first with an explicit stack.
    fn run(&mut self, scope: &mut Scope<'_>, targets: &[Item]) -> Result<()> {
        for (s, _) in scope.groups {
            if !s.exit.iter().any(|i| self.g.expr(i).is_some()) {
                return Err(ExtractError::NoExit);
            }
        }
        // A nested sub-graph that nothing demands has only inlinable exits (constants), which
        // its consumers copy: it is left out.
        self.visit(scope, targets)
    }

    fn visit(&mut self, scope: &mut Scope<'_>, targets: &[Item]) -> Result<()> {
        let mut stack: Vec<(Item, bool)> = targets.iter().rev().map(|&t| (t, false)).collect();
        while let Some((item, expanded)) = stack.pop() {
            if expanded {
                self.build(scope, item)?;
                scope.set_state(item, 2);
                continue;
            }
            match scope.state(item) {
                2 => continue,
                1 => {
                    let node = match item {
                        Item::Node(i) => i,
                        Item::Group(k) => scope.groups[k].0.inside.first().unwrap_or(0),
                    };
                    return Err(ExtractError::Cycle { node });
                }
                _ => {}
            }
            scope.set_state(item, 1);
            stack.push((item, true));
            for d in self.deps(scope, item).into_iter().rev() {
                if scope.state(d) != 2 {
                    stack.push((d, false));
                }
            }
        }
        Ok(())
    }

    fn build(&mut self, scope: &mut Scope<'_>, item: Item) -> Result<()> {
        match item {
            Item::Node(i) => {
                let e = self.node_expr(scope, i)?;
                scope.value.insert(i, e);
            }
            Item::Group(k) => {
                let groups = scope.groups;
                let (sub, attrs) = &groups[k];
                let mut args = Vec::new();
                for j in walk(self.g, sub).params {
                    let a = scope.resolve(self.g, j)?;
                    args.push(self.fresh_atom(scope, a));
                }
                let (fid, exits) = self.function(sub, attrs.clone())?;
                let span = self.out.func(fid).span;
                let callee = self.out.push(Expr::Func(fid), span);
                let call = self.out.push(
                    Expr::Call {
                        callee: Callee::Expr(callee),
                        args,
                        attrs: Attrs::default(),
                    },
                    span,
                );
                if exits.len() == 1 {
                    scope.value.insert(exits[0], call);
                } else {
                    for (n, &x) in exits.iter().enumerate() {
                        let p = self.out.push(
                            Expr::Proj {
                                tuple: call,
                                index: n as u32,
                            },
                            span,
                        );
                        scope.value.insert(x, p);
                    }
                }
            }
        }
        Ok(())
    }

    /// The extracted function of `sub` (not yet referenced by any expression) and its exits in
    /// increasing post-DFS order.
    fn function(&mut self, sub: &SubGraph, attrs: FnAttrs) -> Result<(FuncId, Vec<usize>)> {
        let g = self.g;
        for i in sub.inside.iter() {
            if let NodeRef::Func(_) = g.graph.nodes[i].what {
                return Err(ExtractError::Unsupported {
                    node: i,
                    what: "the function itself".into(),
                });
            }
        }
        let exits: Vec<usize> = sub.exit.iter().filter(|&i| g.expr(i).is_some()).collect();
        let span = match exits.last().and_then(|&x| g.expr(x)) {
            Some(e) => g.module.span(e),
            None => return Err(ExtractError::NoExit),
        };
        let first_expr = ExprId(self.out.exprs.len() as u32);
        let mut params = Vec::new();
        let mut param_vars = Vec::new();
        for (k, j) in walk(g, sub).params.into_iter().enumerate() {
            let e = g.expr(j).ok_or(ExtractError::Unsupported {
                node: j,
                what: "an input that is no expression".into(),
            })?;
            let ty = g
                .module
                .ty(e)
                .cloned()
                .ok_or(ExtractError::Untyped { node: j })?;
            let var = VarId(self.out.vars.len() as u32);
            let pspan = g.module.span(e);
            let x = ExprId(self.out.exprs.len() as u32);
            self.out.vars.push(Var {
                name: format!("FunctionVar_{k}"),
                annotation: Some(ty),
                device: VirtualDevice::default(),
                span: pspan,
                expr: x,
            });
            self.out.push(Expr::Var(var), pspan);
            params.push((j, x));
            param_vars.push(var);
        }
        params.sort_unstable_by_key(|&(j, _)| j);
        let mut scope = Scope::new(Some(&sub.inside), params, &sub.nested);
        let targets: Vec<Item> = exits.iter().filter_map(|&x| scope.item(g, x)).collect();
        self.run(&mut scope, &targets)?;
        let mut results = Vec::new();
        for &x in &exits {
            let r = scope.resolve(g, x)?;
            results.push(self.fresh_atom(&scope, r));
        }
        let body = if results.len() == 1 {
            results[0]
        } else {
            self.out.push(Expr::Tuple(results), span)
        };
        let fid = FuncId(self.out.funcs.len() as u32);
        self.out.funcs.push(Function {
            params: param_vars,
            ret_type: None,
            ret_span: None,
            attrs,
            result_device: VirtualDevice::default(),
            body,
            first_expr,
            span,
        });
        Ok((fid, exits))
    }

    /// The new expression of node `i` (not in a group), whose dependencies are built.
    fn node_expr(&mut self, scope: &Scope<'_>, i: usize) -> Result<ExprId> {
        let g = self.g;
        let unsupported = |what: &str| ExtractError::Unsupported {
            node: i,
            what: what.into(),
        };
        let e = g.expr(i).ok_or_else(|| unsupported("an operator node"))?;
        let in_function = scope.region.is_some();
        let map = |x: ExprId| -> Result<ExprId> {
            let n = g
                .node(x)
                .ok_or_else(|| unsupported("an operand outside the graph"))?;
            scope.resolve(g, n)
        };
        let span = g.module.span(e);
        let rebuilt = match g.module.expr(e) {
            Expr::Global(_) | Expr::Const(_) | Expr::Op(_) => return Ok(e),
            Expr::Var(_) if !in_function => return Ok(e),
            Expr::Var(_) => return Err(unsupported("a variable")),
            Expr::Func(_) if in_function => return Ok(e),
            Expr::Func(f) => {
                // Top level: a literal stays as it is unless something in its body changed.
                let body = g.module.func(*f).body;
                if map(body)? != body {
                    return Err(unsupported("a function literal whose body is rewritten"));
                }
                return Ok(e);
            }
            Expr::Let { .. } | Expr::If { .. } if in_function => {
                return Err(unsupported("a let or if"))
            }
            Expr::Let { var, value, body } => Expr::Let {
                var: *var,
                value: map(*value)?,
                body: map(*body)?,
            },
            Expr::If {
                cond,
                then_branch,
                else_branch,
            } => Expr::If {
                cond: map(*cond)?,
                then_branch: map(*then_branch)?,
                else_branch: map(*else_branch)?,
            },
            Expr::Call {
                callee,
                args,
                attrs,
            } => {
                let callee = match callee {
                    Callee::Op(op) => Callee::Op(*op),
                    Callee::Expr(c) => Callee::Expr(map(*c)?),
                };
                let args = args.iter().map(|&a| map(a)).collect::<Result<Vec<_>>>()?;
                Expr::Call {
                    callee,
                    args,
                    attrs: attrs.clone(),
                }
            }
            Expr::Tuple(fields) => {
                Expr::Tuple(fields.iter().map(|&a| map(a)).collect::<Result<Vec<_>>>()?)
            }
            Expr::Proj { tuple, index } => Expr::Proj {
                tuple: map(*tuple)?,
                index: *index,
            },
        };
        // Outside extracted functions an unchanged node keeps its identity (and binding).
        if !in_function && &rebuilt == g.module.expr(e) {
            return Ok(e);
        }
        let rebuilt = match rebuilt {
            Expr::Call {
                callee,
                args,
                attrs,
            } => Expr::Call {
                callee,
                args: args
                    .into_iter()
                    .map(|a| self.fresh_atom(scope, a))
                    .collect(),
                attrs,
            },
            Expr::Tuple(fields) => Expr::Tuple(
                fields
                    .into_iter()
                    .map(|a| self.fresh_atom(scope, a))
                    .collect(),
            ),
            other => other,
        };
        Ok(self.out.push(rebuilt, span))
    }

    /// In an extracted function, a scalar literal or operator value gets a copy per use: the
    /// parser makes one expression per written literal, so sharing one would not round-trip
    /// (tensor constants, which the parser shares by meta index, keep their identity).
    fn fresh_atom(&mut self, scope: &Scope<'_>, e: ExprId) -> ExprId {
        if scope.region.is_none() {
            return e;
        }
        match self.out.expr(e) {
            x @ (Expr::Const(Constant::Scalar { .. }) | Expr::Op(_)) => {
                let x = x.clone();
                let span = self.out.span(e);
                self.out.push(x, span)
            }
            _ => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::relay::print::print_module;

    use crate::frontend::relay::load_text as load;

    const MODEL: &str = "#[version = \"0.0.5\"]\n\
        def @main(%a: Tensor[(2, 2), float32], %b: Tensor[(2, 2), float32]) {\n  \
        %0 = add(%a, %b);\n  %1 = multiply(%0, 2f);\n  %2 = nn.relu(%1);\n  subtract(%2, %0)\n}\n";

    fn compiler() -> FnAttrs {
        vec![("Compiler".to_string(), AttrValue::Str("x".into()))]
    }

    #[test]
    fn rewrite_with_two_exits_projects_the_call() {
        let m = load(MODEL);
        let g = DataflowGraph::new(&m, m.main().unwrap());
        // Nodes: 0 %a, 1 %b, 2 `subtract, 3 `nn.relu, 4 `multiply, 5 `add, 6 add, 7 2f,
        // 8 multiply, 9 relu, 10 subtract, 11 fn.
        assert_eq!(g.label[6], "add");
        assert_eq!(g.label[9], "nn.relu");
        let inside = IndexSet::from_indices(g.len(), [6, 7, 8, 9]);
        let sg = SubGraph::new(&g, inside).with_attrs(&g, compiler());
        let out = rewrite(&g, &sg).unwrap();
        let text = print_module(&out);
        // The scalar is inside; the parameters are %a and %b; exits 6 and 9 become .0 and .1.
        assert!(text.contains("%FunctionVar_0: Tensor[(2, 2), float32], %FunctionVar_1"));
        assert!(text.contains("multiply(%0, 2f"), "{text}");
        assert!(text.contains("subtract(%"), "{text}");
        let body = out.func(out.main().unwrap()).body;
        match out.expr(body) {
            Expr::Call { args, .. } => {
                assert!(matches!(out.expr(args[0]), Expr::Proj { index: 1, .. }));
                assert!(matches!(out.expr(args[1]), Expr::Proj { index: 0, .. }));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn outside_scalars_are_copied_in() {
        let m = load(MODEL);
        let g = DataflowGraph::new(&m, m.main().unwrap());
        // {multiply, relu}: the scalar 2f (7) is inlinable, so %0 is the only input.
        let sg = SubGraph::new(&g, IndexSet::from_indices(g.len(), [8, 9]));
        assert_eq!(sg.input.iter().collect::<Vec<_>>(), [6]);
        let out = extract(&g, &sg, Vec::new()).unwrap();
        let f = out.func(out.main().unwrap());
        assert_eq!(f.params.len(), 1);
        assert!(f.attrs.is_empty());
        let text = print_module(&out);
        assert!(text.contains("multiply(%FunctionVar_0, 2f"), "{text}");
    }

    #[test]
    fn parameters_are_numbered_by_first_use() {
        // The two adds take their operands in opposite orders: both extract into
        // `add(%FunctionVar_0, %FunctionVar_1)`, called with the operands as written.
        let m = load(
            "#[version = \"0.0.5\"]\n\
             def @main(%a: Tensor[(2), float32], %b: Tensor[(2), float32]) {\n  \
             %0 = add(%a, %b);\n  %1 = add(%b, %a);\n  multiply(%0, %1)\n}\n",
        );
        let g = DataflowGraph::new(&m, m.main().unwrap());
        let adds: Vec<usize> = (0..g.len()).filter(|&i| g.label[i] == "add").collect();
        assert_eq!(adds.len(), 2);
        let subs: Vec<SubGraph> = adds
            .iter()
            .map(|&i| SubGraph::new(&g, IndexSet::from_indices(g.len(), [i])))
            .collect();
        let (a, b) = (g.node(m.var(VarId(0)).expr), g.node(m.var(VarId(1)).expr));
        assert_eq!(walk(&g, &subs[0]).params, vec![a.unwrap(), b.unwrap()]);
        assert_eq!(walk(&g, &subs[1]).params, vec![b.unwrap(), a.unwrap()]);
        let f0 = extract(&g, &subs[0], compiler()).unwrap();
        let f1 = extract(&g, &subs[1], compiler()).unwrap();
        let (m0, m1) = (f0.main().unwrap(), f1.main().unwrap());
        crate::ir::equal::functions_equal(&f0, m0, &f1, m1).unwrap();
        // The structural key used to share outlined functions agrees.
        let mut sigs = crate::planning::enumerate::key::Signatures::new(&g);
        let key = |sigs: &mut crate::planning::enumerate::key::Signatures, sg: &SubGraph| {
            let c = crate::planning::enumerate::Candidate {
                target: 0,
                sub_graph: sg.clone(),
                rule_name: String::new(),
            };
            sigs.function_key(&g, &c)
        };
        assert_eq!(key(&mut sigs, &subs[0]), key(&mut sigs, &subs[1]));
        // The rewrite calls each with its own operand order.
        let text = print_module(
            &rewrite_all(
                &g,
                &[
                    subs[0].clone().with_attrs(&g, compiler()),
                    subs[1].clone().with_attrs(&g, compiler()),
                ],
            )
            .unwrap(),
        );
        assert!(
            text.contains("(%a, %b)") && text.contains("(%b, %a)"),
            "{text}"
        );
    }

    #[test]
    fn cycles_and_overlaps_are_errors() {
        let m = load(MODEL);
        let g = DataflowGraph::new(&m, m.main().unwrap());
        // {add, relu} without the multiply between them: data leaves and comes back.
        let sg =
            SubGraph::new(&g, IndexSet::from_indices(g.len(), [6, 9])).with_attrs(&g, compiler());
        assert!(matches!(rewrite(&g, &sg), Err(ExtractError::Cycle { .. })));
        let a = SubGraph::new(&g, IndexSet::from_indices(g.len(), [6, 8]));
        let b = SubGraph::new(&g, IndexSet::from_indices(g.len(), [8, 9]));
        let groups = vec![(a, compiler()), (b, compiler())];
        assert_eq!(
            rewrite_nested(&g, &groups).unwrap_err(),
            ExtractError::Overlap { node: 8 }
        );
        // A nested sub-graph that sticks out of its parent.
        let inner = SubGraph::new(&g, IndexSet::from_indices(g.len(), [9, 10]));
        let outer = SubGraph::with(
            &g,
            IndexSet::from_indices(g.len(), [9]),
            crate::ops::OpPattern::Opaque,
            String::new(),
            vec![(inner, compiler())],
        );
        assert_eq!(
            extract(&g, &outer, Vec::new()).unwrap_err(),
            ExtractError::Overlap { node: 10 }
        );
    }
}
