//! Where the printer binds each expression.
//!
//! Every function body, `if` branch and parenthesised `let` is a scope. A shared expression is
//! bound (`%N = ...;`) in the innermost scope that contains all of its uses, the lowest common
//! ancestor of the scopes it is used from. Since the arena lists operands before their users, one
//! pass over it from the end computes this: when an expression is reached its users are final.

use crate::ir::{Expr, ExprId, Module};
use std::collections::HashMap;

/// A scope id.
pub(super) type ScopeId = u32;

/// The scope tree and the scope of each expression.
pub(super) struct Scopes {
    parent: Vec<Option<ScopeId>>,
    depth: Vec<u32>,
    /// For the body scope of a `fn` literal: the expressions the literal owns (`first_expr` up
    /// to the literal itself). Expressions written outside are never moved into it.
    func_range: Vec<Option<(u32, u32)>>,
    /// The expression each scope prints last (for a parenthesised `let`, the `let` itself).
    pub root: Vec<ExprId>,
    /// The scope each reachable expression is bound in.
    pub of_expr: Vec<Option<ScopeId>>,
    /// The scopes opened by an expression: `(user, 1)`/`(user, 2)` for `if` branches, `(user, 0)`
    /// for a function body or a parenthesised `let`.
    pub child: HashMap<(ExprId, u8), ScopeId>,
    /// `let`s printed as lines of their scope (rather than in parentheses).
    pub chain: Vec<bool>,
}

impl Scopes {
    /// Computes the scopes of a module, with one root scope per definition (in `roots`).
    pub fn compute(m: &Module, roots: &[ExprId]) -> (Scopes, Vec<ScopeId>) {
        let n = m.exprs.len();
        let mut s = Scopes {
            parent: Vec::new(),
            depth: Vec::new(),
            func_range: Vec::new(),
            root: Vec::new(),
            of_expr: vec![None; n],
            child: HashMap::new(),
            chain: vec![false; n],
        };
        // A `let` continues its scope's chain of lines when it is that scope's root or the body
        // of such a `let`, and is bound in that very scope.
        let mut chain_of: Vec<Option<ScopeId>> = vec![None; n];
        let mut root_scopes = Vec::new();
        for &r in roots {
            let sc = s.new_scope(None, r);
            root_scopes.push(sc);
            s.assign(r, sc);
            chain_of[r.index()] = Some(sc);
        }
        for i in (0..n).rev() {
            let e = ExprId(i as u32);
            let Some(sc) = s.of_expr[i] else { continue };
            match m.expr(e) {
                Expr::If {
                    cond,
                    then_branch,
                    else_branch,
                } => {
                    s.assign(*cond, sc);
                    for (slot, b) in [(1u8, *then_branch), (2u8, *else_branch)] {
                        let child = s.new_scope(Some(sc), b);
                        s.child.insert((e, slot), child);
                        s.assign(b, child);
                        chain_of[b.index()] = Some(child);
                    }
                }
                Expr::Func(f) => {
                    let body = m.func(*f).body;
                    let child = s.new_scope(Some(sc), body);
                    s.func_range[child as usize] = Some((m.func(*f).first_expr.0, e.0));
                    s.child.insert((e, 0), child);
                    s.assign(body, child);
                    chain_of[body.index()] = Some(child);
                }
                Expr::Let { value, body, .. } => {
                    let is_chain = chain_of[i] == Some(sc);
                    s.chain[i] = is_chain;
                    let inner = if is_chain {
                        sc
                    } else {
                        let child = s.new_scope(Some(sc), e);
                        s.child.insert((e, 0), child);
                        child
                    };
                    s.assign(*value, inner);
                    s.assign(*body, inner);
                    chain_of[body.index()] = Some(inner);
                }
                _ => m.for_each_operand(e, |c| s.assign(c, sc)),
            }
        }
        (s, root_scopes)
    }

    fn new_scope(&mut self, parent: Option<ScopeId>, root: ExprId) -> ScopeId {
        let id = self.parent.len() as ScopeId;
        self.depth
            .push(parent.map_or(0, |p| self.depth[p as usize] + 1));
        self.parent.push(parent);
        self.root.push(root);
        self.func_range.push(None);
        id
    }

    fn assign(&mut self, e: ExprId, sc: ScopeId) {
        let sc = self.outside_foreign_functions(e, sc);
        let merged = match self.of_expr[e.index()] {
            None => sc,
            Some(prev) => self.lca(prev, sc),
        };
        self.of_expr[e.index()] = Some(merged);
    }

    /// Moves `sc` out of every enclosing function literal that does not own `e`.
    fn outside_foreign_functions(&self, e: ExprId, mut sc: ScopeId) -> ScopeId {
        let mut cur = Some(sc);
        while let Some(c) = cur {
            if let Some((lo, hi)) = self.func_range[c as usize] {
                if e.0 < lo || e.0 >= hi {
                    // `e` was written outside this literal: bind it where the literal is.
                    match self.parent[c as usize] {
                        Some(p) => {
                            sc = p;
                            cur = Some(p);
                            continue;
                        }
                        None => return sc,
                    }
                }
            }
            cur = self.parent[c as usize];
        }
        sc
    }

    fn lca(&self, mut a: ScopeId, mut b: ScopeId) -> ScopeId {
        while a != b {
            let (da, db) = (self.depth[a as usize], self.depth[b as usize]);
            if da >= db {
                match self.parent[a as usize] {
                    Some(p) => a = p,
                    None => return a,
                }
            }
            if db > da {
                match self.parent[b as usize] {
                    Some(p) => b = p,
                    None => return b,
                }
            }
        }
        a
    }
}
