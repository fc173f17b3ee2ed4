//! Equality after inlining: do two modules' `@main` functions compute the same thing once every
//! call of a function (a literal, or a global definition) is replaced by the function's body?
//!
//! Both functions are evaluated symbolically into hash-consed terms: parameters by position,
//! constants by value and type, operator calls by operator, attributes and argument terms,
//! tuples by field terms, projections of tuples reduced to the field. The functions are equal
//! when their results are the same term and they evaluate the same multiset of operator calls
//! (so a partitioning can neither drop nor duplicate work). This is the invariant of
//! `collage partition`: its output, with the partition functions inlined, is the input.
//!
//! Evaluation inside one function uses an explicit stack; recursion happens only when a call
//! of a function is inlined, and is bounded.

use crate::ir::{Callee, Expr, ExprId, Module, VarId};
use std::collections::HashMap;

/// How deep inlined calls may nest before the check gives up.
const MAX_INLINE_DEPTH: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Term {
    Param(usize),
    Free(String),
    Const(String),
    Call(String, Vec<usize>),
    Tuple(Vec<usize>),
    Proj(usize, u32),
    If(usize, usize, usize),
    Opaque(String),
}

#[derive(Default)]
struct Terms {
    /// Globals that stay calls (the first module's own definitions).
    opaque: std::collections::HashSet<String>,
    ids: HashMap<Term, usize>,
    keys: Vec<Term>,
    calls: Vec<usize>,
}

impl Terms {
    fn intern(&mut self, t: Term) -> usize {
        if let Some(&id) = self.ids.get(&t) {
            return id;
        }
        self.keys.push(t.clone());
        self.ids.insert(t, self.keys.len() - 1);
        self.keys.len() - 1
    }

    /// The term of function `body` with its parameters bound to `env`.
    fn function(
        &mut self,
        m: &Module,
        body: ExprId,
        env: &HashMap<VarId, usize>,
        depth: usize,
    ) -> Result<usize, String> {
        if depth > MAX_INLINE_DEPTH {
            return Err("calls nest too deeply to inline".into());
        }
        // Let-bound variables evaluate to their values.
        let mut memo: HashMap<ExprId, usize> = HashMap::new();
        let mut let_value: HashMap<VarId, ExprId> = HashMap::new();
        let mut stack: Vec<(ExprId, bool)> = vec![(body, false)];
        while let Some((e, ready)) = stack.pop() {
            if memo.contains_key(&e) {
                continue;
            }
            if !ready {
                stack.push((e, true));
                let mut deps = Vec::new();
                match m.expr(e) {
                    Expr::Var(v) => {
                        if let Some(&val) = let_value.get(v) {
                            deps.push(val);
                        }
                    }
                    Expr::Let { var, value, body } => {
                        let_value.insert(*var, *value);
                        deps.extend([*value, *body]);
                    }
                    Expr::Call { callee, args, .. } => {
                        deps.extend(args.iter().copied());
                        if let Callee::Expr(c) = callee {
                            if !matches!(m.expr(*c), Expr::Func(_) | Expr::Global(_)) {
                                deps.push(*c);
                            }
                        }
                    }
                    Expr::Func(_) => {}
                    _ => m.for_each_operand(e, |o| deps.push(o)),
                }
                for d in deps.into_iter().rev() {
                    if !memo.contains_key(&d) {
                        stack.push((d, false));
                    }
                }
                continue;
            }
            let t = self.eval(m, e, env, &memo, &let_value, depth)?;
            memo.insert(e, t);
        }
        memo.get(&body).copied().ok_or_else(|| "no result".into())
    }

    fn eval(
        &mut self,
        m: &Module,
        e: ExprId,
        env: &HashMap<VarId, usize>,
        memo: &HashMap<ExprId, usize>,
        let_value: &HashMap<VarId, ExprId>,
        depth: usize,
    ) -> Result<usize, String> {
        let get = |x: &ExprId| memo.get(x).copied().ok_or("evaluation order");
        Ok(match m.expr(e) {
            Expr::Var(v) => match (env.get(v), let_value.get(v)) {
                (Some(&t), _) => t,
                (None, Some(val)) => get(val)?,
                (None, None) => self.intern(Term::Free(m.var(*v).name.clone())),
            },
            Expr::Const(c) => self.intern(Term::Const(format!("{c:?}"))),
            Expr::Call {
                callee,
                args,
                attrs,
            } => {
                let ts = args.iter().map(get).collect::<Result<Vec<_>, _>>()?;
                match callee {
                    Callee::Op(op) => {
                        let name = crate::ops::registry().get(*op).name;
                        let t = self.intern(Term::Call(format!("{name}{attrs:?}"), ts));
                        self.calls.push(t);
                        t
                    }
                    Callee::Expr(c) => {
                        let f = match m.expr(*c) {
                            Expr::Func(f) => Some(*f),
                            Expr::Global(g)
                                if !self.opaque.contains(&m.globals[g.index()].name) =>
                            {
                                m.globals[g.index()].def
                            }
                            _ => None,
                        };
                        match f {
                            Some(f) => {
                                let func = m.func(f);
                                if func.params.len() != ts.len() {
                                    return Err("a call with the wrong number of arguments".into());
                                }
                                let inner: HashMap<VarId, usize> =
                                    func.params.iter().copied().zip(ts).collect();
                                self.function(m, func.body, &inner, depth + 1)?
                            }
                            None => {
                                let callee = match m.expr(*c) {
                                    Expr::Global(g) => self.intern(Term::Opaque(format!(
                                        "@{}",
                                        m.globals[g.index()].name
                                    ))),
                                    _ => get(c)?,
                                };
                                let mut all = vec![callee];
                                all.extend(ts);
                                self.intern(Term::Call("<call>".into(), all))
                            }
                        }
                    }
                }
            }
            Expr::Tuple(fields) => {
                let ts = fields.iter().map(get).collect::<Result<Vec<_>, _>>()?;
                self.intern(Term::Tuple(ts))
            }
            Expr::Proj { tuple, index } => {
                let t = get(tuple)?;
                match &self.keys[t] {
                    Term::Tuple(ts) => {
                        *ts.get(*index as usize).ok_or("a projection out of range")?
                    }
                    _ => self.intern(Term::Proj(t, *index)),
                }
            }
            Expr::Let { body, .. } => get(body)?,
            Expr::If {
                cond,
                then_branch,
                else_branch,
            } => {
                let (c, t, f) = (get(cond)?, get(then_branch)?, get(else_branch)?);
                self.intern(Term::If(c, t, f))
            }
            Expr::Global(g) => self.intern(Term::Opaque(format!("@{}", m.globals[g.index()].name))),
            Expr::Op(op) => self.intern(Term::Opaque(crate::ops::registry().get(*op).name.into())),
            Expr::Func(_) => self.intern(Term::Opaque(format!("fn#{}", e.0))),
        })
    }
}

/// Checks that `a`'s and `b`'s `@main` compute the same term with the same operator calls once
/// every call of a function literal, and of a global that `a` does not define, is inlined.
/// Calls of `a`'s own globals stay calls (by name): they are the same in both modules, and
/// inlining them could recurse or blow up. Parameters correspond by position.
pub fn equal_after_inlining(a: &Module, b: &Module) -> Result<(), String> {
    let mut terms = Terms {
        opaque: a
            .defs
            .iter()
            .map(|(g, _)| a.globals[g.index()].name.clone())
            .collect(),
        ..Terms::default()
    };
    let mut run = |m: &Module| -> Result<(usize, Vec<usize>), String> {
        let main = m.main().ok_or("no @main")?;
        let f = m.func(main);
        let env: HashMap<VarId, usize> = f
            .params
            .iter()
            .enumerate()
            .map(|(k, &v)| (v, terms.intern(Term::Param(k))))
            .collect();
        terms.calls.clear();
        let t = terms.function(m, f.body, &env, 0)?;
        let mut calls = std::mem::take(&mut terms.calls);
        calls.sort_unstable();
        Ok((t, calls))
    };
    let (ta, ca) = run(a)?;
    let (tb, cb) = run(b)?;
    if ca.len() != cb.len() {
        return Err(format!(
            "{} operator calls before inlining the partitions, {} after",
            ca.len(),
            cb.len()
        ));
    }
    if ca != cb {
        return Err("the operator calls differ".into());
    }
    if ta != tb {
        return Err("the results differ".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::equal_after_inlining;

    use crate::frontend::relay::load_text as load;

    const ORIGINAL: &str = "#[version = \"0.0.5\"]
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %0 = subtract(%x, %y);
  nn.relu(%0)
}";

    #[test]
    fn inlined_functions_equal_the_original() {
        let outlined = load(
            "#[version = \"0.0.5\"]
def @f(%a: Tensor[(4), float32], %b: Tensor[(4), float32], Primitive=1) {
  %0 = fn (%p: Tensor[(4), float32], %q: Tensor[(4), float32], Composite=\"sub\") {
    subtract(%p, %q)
  };
  %0(%a, %b)
}
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %1 = @f(%x, %y);
  nn.relu(%1)
}",
        );
        assert_eq!(equal_after_inlining(&load(ORIGINAL), &outlined), Ok(()));
    }

    #[test]
    fn swapped_arguments_dropped_and_duplicated_calls_are_caught() {
        let original = load(ORIGINAL);
        for wrong in [
            // The arguments of the outlined call swapped.
            "#[version = \"0.0.5\"]
def @f(%a: Tensor[(4), float32], %b: Tensor[(4), float32]) { subtract(%a, %b) }
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %1 = @f(%y, %x);
  nn.relu(%1)
}",
            // A call dropped.
            "#[version = \"0.0.5\"]
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) { subtract(%x, %y) }",
            // A call duplicated: the same result term, but `subtract` evaluated twice where the
            // original shares one (checked against its own original below).
            "#[version = \"0.0.5\"]
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %0 = subtract(%x, %y);
  %1 = subtract(%x, %y);
  add(%0, %1)
}",
        ] {
            let shared = load(
                "#[version = \"0.0.5\"]
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %0 = subtract(%x, %y);
  add(%0, %0)
}",
            );
            let reference = if wrong.contains("add(") {
                &shared
            } else {
                &original
            };
            assert!(
                equal_after_inlining(reference, &load(wrong)).is_err(),
                "{wrong}"
            );
        }
    }
}
