//! Symbolic index expressions over loop variables, and the simplifications that make fused
//! injective operators cheap.
//!
//! An index is a sum of integer multiples of *atoms* plus a constant. Atoms are loop variables,
//! floor divisions and remainders of non-negative sums by constants, and opaque C expressions
//! with a known range (a gathered index, a reflected coordinate). Every variable has a range
//! `[0, extent)`, so the range of any index is known, and:
//!
//! * `(d·Q + R) / d = Q` and `(d·Q + R) % d = R` when `0 ≤ R < d` (the remainder part of the
//!   sum is found by splitting every coefficient by `d`);
//! * `(a·X + L) / d = X / (d/a)` and `(a·X + L) % d = a·(X % (d/a)) + L` when `a` divides `d`
//!   and `0 ≤ L < a`;
//! * `c·d·(S / d) + c·(S % d) = c·S` (a reshape undone by the next one).
//!
//! These turn the coordinate arithmetic of reshapes, transposes, splits and layout changes into
//! offsets that are affine in the innermost loop variable, which the C compiler vectorises.

use std::cmp::Ordering;
use std::fmt::Write as _;

/// An indivisible part of an index.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Atom {
    /// Loop variable `v`.
    Var(u32),
    /// `S / d` (floor division of a non-negative sum; `d > 1`).
    Div(Box<Ix>, i64),
    /// `S % d` (of a non-negative sum; `d > 1`).
    Mod(Box<Ix>, i64),
    /// A C expression of type `long` whose value lies in `[lo, hi]`.
    Opaque(String, i64, i64),
}

/// `Σ coefficient·atom + constant`, terms sorted by atom, no zero coefficient.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ix {
    terms: Vec<(Atom, i64)>,
    c: i64,
}

/// The loop variables in scope: C names and extents.
#[derive(Clone, Debug, Default)]
pub struct Vars {
    names: Vec<String>,
    extents: Vec<i64>,
}

impl Vars {
    /// A new variable named `name` ranging over `[0, extent)`.
    pub fn fresh(&mut self, name: impl Into<String>, extent: usize) -> u32 {
        self.names.push(name.into());
        self.extents.push(extent.max(1) as i64);
        (self.names.len() - 1) as u32
    }

    /// The C name of variable `v`.
    pub fn name(&self, v: u32) -> &str {
        &self.names[v as usize]
    }
}

impl Ix {
    /// A constant.
    pub fn konst(c: i64) -> Ix {
        Ix {
            terms: Vec::new(),
            c,
        }
    }

    /// A loop variable.
    pub fn var(v: u32) -> Ix {
        Ix::atom(Atom::Var(v))
    }

    /// An opaque C expression with its range.
    pub fn opaque(text: impl Into<String>, lo: i64, hi: i64) -> Ix {
        Ix::atom(Atom::Opaque(text.into(), lo, hi))
    }

    fn atom(a: Atom) -> Ix {
        Ix {
            terms: vec![(a, 1)],
            c: 0,
        }
    }

    /// The constant, when the index is one.
    pub fn as_const(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.c)
    }

    /// `self + o`.
    pub fn add(&self, o: &Ix) -> Ix {
        let mut terms = self.terms.clone();
        terms.extend(o.terms.iter().cloned());
        Ix::normal(terms, self.c + o.c)
    }

    /// `self + c`.
    pub fn plus(&self, c: i64) -> Ix {
        Ix {
            terms: self.terms.clone(),
            c: self.c + c,
        }
    }

    /// `k · self`.
    pub fn scale(&self, k: i64) -> Ix {
        if k == 0 {
            return Ix::konst(0);
        }
        Ix {
            terms: self.terms.iter().map(|(a, c)| (a.clone(), c * k)).collect(),
            c: self.c * k,
        }
    }

    /// Sorts and merges terms, drops zeros, and folds `c·d·(S/d) + c·(S%d)` into `c·S`.
    fn normal(mut terms: Vec<(Atom, i64)>, mut c: i64) -> Ix {
        loop {
            terms.sort_by(|a, b| a.0.cmp(&b.0));
            let mut merged: Vec<(Atom, i64)> = Vec::with_capacity(terms.len());
            for (a, k) in terms {
                match merged.last_mut() {
                    Some((b, kb)) if *b == a => *kb += k,
                    _ => merged.push((a, k)),
                }
            }
            merged.retain(|(_, k)| *k != 0);
            // Fold a constant atom (an opaque with a one-value range is left alone).
            // `k·m·(S / (a·m)) + k·((S / a) % m) = k·(S / a)` (with `S / 1 = S`).
            let mut changed = false;
            let mut i = 0;
            'outer: while i < merged.len() {
                if let Atom::Div(s, dd) = &merged[i].0 {
                    let kd = merged[i].1;
                    for j in 0..merged.len() {
                        let Atom::Mod(t, m) = &merged[j].0 else {
                            continue;
                        };
                        let km = merged[j].1;
                        if km * m != kd || dd % m != 0 {
                            continue;
                        }
                        let a = dd / m;
                        let inner: Option<Ix> = if a == 1 {
                            (**t == **s).then(|| (**t).clone())
                        } else {
                            match (t.terms.as_slice(), t.c) {
                                ([(Atom::Div(u, b), 1)], 0) if *b == a && **u == **s => {
                                    Some(Ix::atom(Atom::Div(u.clone(), a)))
                                }
                                _ => None,
                            }
                        };
                        if let Some(inner) = inner {
                            let (hi, lo) = if i > j { (i, j) } else { (j, i) };
                            merged.remove(hi);
                            merged.remove(lo);
                            for (at, k) in inner.terms {
                                merged.push((at, k * km));
                            }
                            c += inner.c * km;
                            changed = true;
                            break 'outer;
                        }
                    }
                }
                i += 1;
            }
            terms = merged;
            if !changed {
                return Ix { terms, c };
            }
        }
    }

    /// The range `[lo, hi]` of values.
    pub fn range(&self, vars: &Vars) -> (i64, i64) {
        let (mut lo, mut hi) = (self.c, self.c);
        for (a, k) in &self.terms {
            let (alo, ahi) = atom_range(a, vars);
            let (x, y) = (alo.saturating_mul(*k), ahi.saturating_mul(*k));
            lo = lo.saturating_add(x.min(y));
            hi = hi.saturating_add(x.max(y));
        }
        (lo, hi)
    }

    /// `self / d` (floor; `self` must be non-negative).
    pub fn div(&self, d: i64, vars: &Vars) -> Ix {
        if d == 1 {
            return self.clone();
        }
        if let Some(c) = self.as_const() {
            return Ix::konst(c.div_euclid(d));
        }
        let (lo, hi) = self.range(vars);
        if lo >= 0 && hi < d {
            return Ix::konst(0);
        }
        let (q, r) = self.split(d);
        let (rlo, rhi) = r.range(vars);
        if rlo >= 0 && rhi < d {
            return q;
        }
        if rlo < 0 {
            return Ix::atom(Atom::Div(Box::new(self.clone()), d));
        }
        // (d·Q + R) / d = Q + R / d for R ≥ 0.
        q.add(&r.div_rest(d, vars))
    }

    /// `self % d` (`self` must be non-negative).
    pub fn rem(&self, d: i64, vars: &Vars) -> Ix {
        if d == 1 {
            return Ix::konst(0);
        }
        if let Some(c) = self.as_const() {
            return Ix::konst(c.rem_euclid(d));
        }
        let (lo, hi) = self.range(vars);
        if lo >= 0 && hi < d {
            return self.clone();
        }
        let (_, r) = self.split(d);
        let (rlo, rhi) = r.range(vars);
        if rlo >= 0 && rhi < d {
            return r;
        }
        if rlo < 0 {
            return Ix::atom(Atom::Mod(Box::new(self.clone()), d));
        }
        r.rem_rest(d, vars)
    }

    /// Splits every coefficient (and the constant) by `d`: `self = d·Q + R`, `0 ≤` each
    /// coefficient of `R` `< d`.
    fn split(&self, d: i64) -> (Ix, Ix) {
        let (mut q, mut r) = (Vec::new(), Vec::new());
        for (a, k) in &self.terms {
            let (kq, kr) = (k.div_euclid(d), k.rem_euclid(d));
            if kq != 0 {
                q.push((a.clone(), kq));
            }
            if kr != 0 {
                r.push((a.clone(), kr));
            }
        }
        (
            Ix::normal(q, self.c.div_euclid(d)),
            Ix::normal(r, self.c.rem_euclid(d)),
        )
    }

    /// Splits into the terms whose coefficient is a multiple of `a` (divided by `a`) and the
    /// rest.
    fn split_multiple(&self, a: i64) -> (Ix, Ix) {
        let (mut h, mut l) = (Vec::new(), Vec::new());
        for (at, k) in &self.terms {
            if k % a == 0 {
                h.push((at.clone(), k / a));
            } else {
                l.push((at.clone(), *k));
            }
        }
        (Ix::normal(h, 0), Ix::normal(l, self.c))
    }

    /// Candidate factors `a` dividing `d` for the `(a·X + L)` rules, largest first.
    fn factors(&self, d: i64) -> Vec<i64> {
        let mut f: Vec<i64> = self
            .terms
            .iter()
            .map(|(_, k)| k.abs())
            .filter(|&k| k > 1 && d % k == 0)
            .collect();
        f.sort_unstable_by(|a, b| b.cmp(a));
        f.dedup();
        f
    }

    /// `self / d` for a non-negative `self` whose coefficients are all below `d`.
    fn div_rest(&self, d: i64, vars: &Vars) -> Ix {
        for a in self.factors(d) {
            let (h, l) = self.split_multiple(a);
            let (llo, lhi) = l.range(vars);
            if llo >= 0 && lhi < a && h.range(vars).0 >= 0 {
                return h.div(d / a, vars);
            }
        }
        // (X / a) / b = X / (a·b).
        if self.c == 0 && self.terms.len() == 1 && self.terms[0].1 == 1 {
            if let Atom::Div(s, a) = &self.terms[0].0 {
                return s.div(a * d, vars);
            }
        }
        Ix::atom(Atom::Div(Box::new(self.clone()), d))
    }

    /// `self % d` for a non-negative `self` whose coefficients are all below `d`.
    fn rem_rest(&self, d: i64, vars: &Vars) -> Ix {
        for a in self.factors(d) {
            let (h, l) = self.split_multiple(a);
            let (llo, lhi) = l.range(vars);
            if llo >= 0 && lhi < a && h.range(vars).0 >= 0 {
                return h.rem(d / a, vars).scale(a).add(&l);
            }
        }
        // (X % a) % d = X % d when d divides a.
        if self.c == 0 && self.terms.len() == 1 && self.terms[0].1 == 1 {
            if let Atom::Mod(s, a) = &self.terms[0].0 {
                if a % d == 0 {
                    return s.rem(d, vars);
                }
            }
        }
        Ix::atom(Atom::Mod(Box::new(self.clone()), d))
    }

    /// The coefficient of variable `v` when it occurs only as a plain term (`None` when it
    /// occurs inside a division, remainder or opaque expression).
    pub fn affine_coef(&self, v: u32) -> Option<i64> {
        let mut coef = 0;
        for (a, k) in &self.terms {
            match a {
                Atom::Var(w) if *w == v => coef = *k,
                Atom::Var(_) => {}
                Atom::Div(s, _) | Atom::Mod(s, _) => {
                    if s.mentions(v) {
                        return None;
                    }
                }
                Atom::Opaque(text, _, _) => {
                    // Opaque expressions are built from temporaries computed in the loop body;
                    // treat them as depending on everything.
                    let _ = text;
                    return None;
                }
            }
        }
        Some(coef)
    }

    /// Whether variable `v` occurs anywhere.
    pub fn mentions(&self, v: u32) -> bool {
        self.terms.iter().any(|(a, _)| match a {
            Atom::Var(w) => *w == v,
            Atom::Div(s, _) | Atom::Mod(s, _) => s.mentions(v),
            Atom::Opaque(..) => false,
        })
    }

    /// The C text (type `long`).
    pub fn c(&self, vars: &Vars) -> String {
        let mut s = String::new();
        for (a, k) in &self.terms {
            let at = atom_c(a, vars);
            match (s.is_empty(), k.cmp(&0)) {
                (true, _) if *k == 1 => s.push_str(&at),
                (true, _) if *k == -1 => {
                    let _ = write!(s, "-{at}");
                }
                (true, _) => {
                    let _ = write!(s, "{k}L*{at}");
                }
                (false, Ordering::Greater) if *k == 1 => {
                    let _ = write!(s, " + {at}");
                }
                (false, Ordering::Greater) => {
                    let _ = write!(s, " + {k}L*{at}");
                }
                (false, _) if *k == -1 => {
                    let _ = write!(s, " - {at}");
                }
                (false, _) => {
                    let _ = write!(s, " - {}L*{at}", -k);
                }
            }
        }
        match (s.is_empty(), self.c.cmp(&0)) {
            (true, _) => format!("{}L", self.c),
            (false, Ordering::Equal) => s,
            (false, Ordering::Greater) => format!("{s} + {}L", self.c),
            (false, Ordering::Less) => format!("{s} - {}L", -self.c),
        }
    }
}

fn atom_range(a: &Atom, vars: &Vars) -> (i64, i64) {
    match a {
        Atom::Var(v) => (0, vars.extents[*v as usize] - 1),
        Atom::Div(s, d) => {
            let (lo, hi) = s.range(vars);
            (lo.div_euclid(*d), hi.div_euclid(*d))
        }
        Atom::Mod(s, d) => {
            let (lo, hi) = s.range(vars);
            if lo >= 0 && hi < *d {
                (lo, hi)
            } else {
                (0, d - 1)
            }
        }
        Atom::Opaque(_, lo, hi) => (*lo, *hi),
    }
}

fn atom_c(a: &Atom, vars: &Vars) -> String {
    match a {
        Atom::Var(v) => vars.name(*v).to_string(),
        Atom::Div(s, d) => format!("(({}) / {d}L)", s.c(vars)),
        Atom::Mod(s, d) => format!("(({}) % {d}L)", s.c(vars)),
        Atom::Opaque(t, _, _) => format!("({t})"),
    }
}

/// Row-major strides of a shape.
pub fn strides(dims: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1] as i64;
    }
    s
}

/// The flat row-major offset of coordinates `ix` in a tensor of shape `dims`.
pub fn flat(ix: &[Ix], dims: &[usize]) -> Ix {
    let st = strides(dims);
    let mut out = Ix::konst(0);
    for (i, s) in ix.iter().zip(st) {
        out = out.add(&i.scale(s));
    }
    out
}

/// The coordinates in shape `dims` of the flat offset `f`.
pub fn unflat(f: &Ix, dims: &[usize], vars: &Vars) -> Vec<Ix> {
    let st = strides(dims);
    dims.iter()
        .zip(st)
        .enumerate()
        .map(|(k, (&d, s))| {
            let q = f.div(s, vars);
            if k == 0 {
                q
            } else {
                q.rem(d as i64, vars)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshape_round_trip_is_the_identity() {
        let mut v = Vars::default();
        let i = v.fresh("i", 1600);
        let j = v.fresh("j", 768);
        let f = flat(&[Ix::var(i), Ix::var(j)], &[1600, 768]);
        let c = unflat(&f, &[50, 32, 768], &v);
        assert_eq!(c[0].c(&v), "((i) / 32L)");
        assert_eq!(c[1].c(&v), "((i) % 32L)");
        assert_eq!(c[2].c(&v), "j");
        let back = flat(&c, &[50, 32, 768]);
        assert_eq!(back.c(&v), "768L*i + j");
    }

    #[test]
    fn attention_head_transpose_is_affine_in_the_inner_variable() {
        // [600, 32, 64] <- reshape <- transpose(0, 2, 1, 3) of [50, 32, 12, 64] <- reshape of
        // [50, 32, 768].
        let mut v = Vars::default();
        let a = v.fresh("a", 600);
        let b = v.fresh("b", 32);
        let c = v.fresh("c", 64);
        let f = flat(&[Ix::var(a), Ix::var(b), Ix::var(c)], &[600, 32, 64]);
        let t = unflat(&f, &[50, 12, 32, 64], &v);
        let x = [t[0].clone(), t[2].clone(), t[1].clone(), t[3].clone()];
        let g = flat(&x, &[50, 32, 12, 64]);
        let y = unflat(&g, &[50, 32, 768], &v);
        let off = flat(&y, &[50, 32, 768]);
        assert_eq!(off.affine_coef(c), Some(1));
        assert_eq!(off.affine_coef(b), Some(768));
        let s = off.c(&v);
        assert!(
            s.contains("((a) / 12L)") && s.contains("((a) % 12L)"),
            "{s}"
        );
    }

    #[test]
    fn a_flat_loop_over_a_reshape_reads_contiguously() {
        let mut v = Vars::default();
        let j = v.fresh("j", 50 * 32 * 3072);
        let c = unflat(&Ix::var(j), &[50, 32, 3072], &v);
        assert_eq!(flat(&c, &[50, 32, 3072]).c(&v), "j");
        let c = unflat(&Ix::var(j), &[1600, 3072], &v);
        let f = flat(&c, &[1600, 3072]);
        let back = unflat(&f, &[50, 32, 3072], &v);
        assert_eq!(flat(&back, &[50, 32, 3072]).c(&v), "j");
    }

    #[test]
    fn ranges_and_constants() {
        let mut v = Vars::default();
        let i = v.fresh("i", 10);
        let x = Ix::var(i).scale(3).plus(-2);
        assert_eq!(x.range(&v), (-2, 25));
        assert_eq!(Ix::konst(17).div(5, &v), Ix::konst(3));
        assert_eq!(Ix::konst(17).rem(5, &v), Ix::konst(2));
        assert_eq!(Ix::var(i).div(16, &v), Ix::konst(0));
        assert_eq!(Ix::var(i).rem(16, &v), Ix::var(i));
        // (4i + 3) / 2 = 2i + 1.
        assert_eq!(Ix::var(i).scale(4).plus(3).div(2, &v).c(&v), "2L*i + 1L");
        // Substitution re-simplifies.
        let k = v.fresh("k", 40);
        let e = Ix::var(i).rem(4, &v).add(&Ix::var(i).div(4, &v).scale(4));
        assert_eq!(e.c(&v), "i");
        assert_eq!(Ix::var(k).div(4, &v).div(2, &v).c(&v), "((k) / 8L)");
    }
}
