//! `Einsum` as transposes, reshapes, sums and batched matrix products: each operand's labels
//! that appear nowhere else are summed away, then operands are contracted two at a time from
//! the left (batch labels, kept labels of each side, contracted labels) with `nn.batch_matmul`,
//! and the result is transposed to the output's order.

use super::{boolean, ints, Cx, R};
use crate::frontend::onnx::model::Node;
use crate::ir::ExprId;
use crate::ops::Op;

/// A parsed equation: the labels of each operand and of the output, ellipses expanded.
#[derive(Debug, PartialEq)]
struct Equation {
    inputs: Vec<Vec<char>>,
    output: Vec<char>,
}

/// Labels an ellipsis expands to (characters no equation may use).
fn ellipsis_labels(n: usize) -> Vec<char> {
    (0..n)
        .map(|i| char::from_u32(0x2460 + i as u32).unwrap_or('?'))
        .collect()
}

/// Parses `equation` for operands of the given ranks.
fn parse(equation: &str, ranks: &[usize]) -> Result<Equation, String> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        return Err(format!(
            "equation \"{equation}\" names {} operands for {} inputs",
            terms.len(),
            ranks.len()
        ));
    }
    let mut ellipsis = 0usize;
    let mut inputs = Vec::new();
    let term_labels =
        |t: &str, rank: Option<usize>, ell: &mut usize| -> Result<Vec<char>, String> {
            let (before, after, has) = match t.split_once("...") {
                Some((b, a)) => (b, a, true),
                None => (t, "", false),
            };
            for c in before.chars().chain(after.chars()) {
                if !c.is_ascii_alphabetic() {
                    return Err(format!("label '{c}' in \"{equation}\""));
                }
            }
            let named = before.len() + after.len();
            let mut out: Vec<char> = before.chars().collect();
            if has {
                let n = match rank {
                    Some(r) => r
                        .checked_sub(named)
                        .ok_or_else(|| format!("\"{t}\" names more axes than its operand's {r}"))?,
                    None => *ell,
                };
                *ell = (*ell).max(n);
                // Ellipsis axes align from the right, as numpy broadcasts them.
                let all = ellipsis_labels(*ell);
                out.extend_from_slice(&all[*ell - n..]);
            }
            out.extend(after.chars());
            if let Some(r) = rank {
                if out.len() != r {
                    return Err(format!(
                        "\"{t}\" names {} axes of an operand of rank {r}",
                        out.len()
                    ));
                }
            }
            Ok(out)
        };
    for (t, &r) in terms.iter().zip(ranks) {
        inputs.push(term_labels(t, Some(r), &mut ellipsis)?);
    }
    let output = match rhs {
        Some(r) => {
            let out = term_labels(r, None, &mut ellipsis)?;
            let mut seen = std::collections::HashSet::new();
            for c in &out {
                if !seen.insert(*c) {
                    return Err(format!("output label '{c}' repeated"));
                }
                if !inputs.iter().any(|i| i.contains(c)) {
                    return Err(format!("output label '{c}' names no input axis"));
                }
            }
            out
        }
        None => {
            // Implicit output: the ellipsis axes, then the labels used once, in order.
            let mut out = ellipsis_labels(ellipsis);
            let mut once: Vec<char> = inputs
                .iter()
                .flatten()
                .copied()
                .filter(|c| c.is_ascii_alphabetic())
                .collect();
            once.sort_unstable();
            let counts = |c: char| inputs.iter().flatten().filter(|&&d| d == c).count();
            once.dedup();
            out.extend(once.into_iter().filter(|&c| counts(c) == 1));
            out
        }
    };
    Ok(Equation { inputs, output })
}

/// An operand as it is contracted: the expression and the label of each of its axes.
struct Term {
    e: ExprId,
    labels: Vec<char>,
}

/// Sums away `t`'s labels that are in none of `keep`.
fn sum_unused(cx: &mut Cx<'_>, t: Term, keep: &[char]) -> R<Term> {
    let axes: Vec<i64> = (0..t.labels.len())
        .filter(|&i| !keep.contains(&t.labels[i]))
        .map(|i| i as i64)
        .collect();
    if axes.is_empty() {
        return Ok(t);
    }
    let e = cx.call(
        Op::Sum,
        &[t.e],
        &[("axis", ints(&axes)), ("keepdims", boolean(false))],
    )?;
    let labels = t.labels.into_iter().filter(|c| keep.contains(c)).collect();
    Ok(Term { e, labels })
}

fn permute(cx: &mut Cx<'_>, t: &Term, order: &[char]) -> R<ExprId> {
    let perm: Vec<i64> = order
        .iter()
        .map(|c| t.labels.iter().position(|l| l == c).unwrap_or(0) as i64)
        .collect();
    if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
        return Ok(t.e);
    }
    cx.call(Op::Transpose, &[t.e], &[("axes", ints(&perm))])
}

/// Contracts `a` and `b`, keeping the labels in `keep` (those of later operands and of the
/// output).
fn contract(cx: &mut Cx<'_>, a: Term, b: Term, keep: &[char]) -> R<Term> {
    let sa = cx.shape(a.e)?;
    let sb = cx.shape(b.e)?;
    let ext = |t: &Term, s: &[i64], c: char| s[t.labels.iter().position(|&l| l == c).unwrap()];
    let in_b = |c: &char| b.labels.contains(c);
    let batch: Vec<char> = a
        .labels
        .iter()
        .copied()
        .filter(|c| in_b(c) && keep.contains(c))
        .collect();
    let summed: Vec<char> = a
        .labels
        .iter()
        .copied()
        .filter(|c| in_b(c) && !keep.contains(c))
        .collect();
    let a_only: Vec<char> = a.labels.iter().copied().filter(|c| !in_b(c)).collect();
    let b_only: Vec<char> = b
        .labels
        .iter()
        .copied()
        .filter(|c| !a.labels.contains(c))
        .collect();
    for &c in batch.iter().chain(&summed) {
        let (x, y) = (ext(&a, &sa, c), ext(&b, &sb, c));
        if x != y {
            return Err(cx.unsupported(format_args!(
                "label '{c}' of extent {x} in one operand and {y} in the other (broadcast)"
            )));
        }
    }
    let prod = |t: &Term, s: &[i64], ls: &[char]| ls.iter().map(|&c| ext(t, s, c)).product::<i64>();
    let (nb, m, k, n) = (
        prod(&a, &sa, &batch),
        prod(&a, &sa, &a_only),
        prod(&a, &sa, &summed),
        prod(&b, &sb, &b_only),
    );
    let order_a: Vec<char> = batch
        .iter()
        .chain(&a_only)
        .chain(&summed)
        .copied()
        .collect();
    let order_b: Vec<char> = batch
        .iter()
        .chain(&summed)
        .chain(&b_only)
        .copied()
        .collect();
    let ta = permute(cx, &a, &order_a)?;
    let tb = permute(cx, &b, &order_b)?;
    let ta = cx.reshape(ta, &[nb, m, k])?;
    let tb = cx.reshape(tb, &[nb, k, n])?;
    let r = cx.call(
        Op::BatchMatmul,
        &[ta, tb],
        &[("transpose_b", boolean(false))],
    )?;
    let mut labels = batch.clone();
    labels.extend(&a_only);
    labels.extend(&b_only);
    let mut shape: Vec<i64> = batch.iter().map(|&c| ext(&a, &sa, c)).collect();
    shape.extend(a_only.iter().map(|&c| ext(&a, &sa, c)));
    shape.extend(b_only.iter().map(|&c| ext(&b, &sb, c)));
    let e = cx.reshape(r, &shape)?;
    Ok(Term { e, labels })
}

pub(super) fn convert(cx: &mut Cx<'_>, node: &Node) -> R<ExprId> {
    let equation = match node.attr("equation") {
        Some(crate::frontend::onnx::model::AttrValue::String(s)) => s.clone(),
        _ => return Err(cx.unsupported("no `equation`")),
    };
    let mut terms = Vec::new();
    let mut ranks = Vec::new();
    for i in 0..node.inputs.len() {
        let e = cx.input(i)?;
        ranks.push(cx.shape(e)?.len());
        terms.push(e);
    }
    if terms.is_empty() {
        return Err(cx.unsupported("no inputs"));
    }
    let eq = parse(&equation, &ranks).map_err(|m| cx.unsupported(m))?;
    for labels in &eq.inputs {
        let mut seen = std::collections::HashSet::new();
        if let Some(c) = labels.iter().find(|c| !seen.insert(**c)) {
            return Err(cx.unsupported(format_args!(
                "label '{c}' twice in one operand of \"{equation}\" (a diagonal)"
            )));
        }
    }
    let mut ops: Vec<Term> = terms
        .into_iter()
        .zip(eq.inputs.iter())
        .map(|(e, l)| Term {
            e,
            labels: l.clone(),
        })
        .collect();
    // Labels needed after operand i: those of later operands and of the output.
    let needed_after = |i: usize| -> Vec<char> {
        let mut v: Vec<char> = eq.output.clone();
        for l in &eq.inputs[i + 1..] {
            v.extend(l);
        }
        v
    };
    let first = ops.remove(0);
    let mut keep = needed_after(0);
    keep.extend(eq.inputs.get(1).into_iter().flatten());
    let mut acc = sum_unused(cx, first, &keep)?;
    for (i, t) in ops.into_iter().enumerate() {
        let i = i + 1;
        let after = needed_after(i);
        let mut keep_t = after.clone();
        keep_t.extend(&acc.labels);
        let t = sum_unused(cx, t, &keep_t)?;
        acc = contract(cx, acc, t, &after)?;
    }
    let acc = sum_unused(cx, acc, &eq.output)?;
    permute(cx, &acc, &eq.output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equations_parse_with_ellipses_and_implicit_outputs() {
        let e = parse("ij,jk->ik", &[2, 2]).unwrap();
        assert_eq!(e.inputs, vec![vec!['i', 'j'], vec!['j', 'k']]);
        assert_eq!(e.output, vec!['i', 'k']);
        // Implicit output: labels used once, sorted.
        let e = parse("ij,jk", &[2, 2]).unwrap();
        assert_eq!(e.output, vec!['i', 'k']);
        let e = parse("...ij,...jk->...ik", &[4, 3]).unwrap();
        let l = ellipsis_labels(2);
        assert_eq!(e.inputs[0], vec![l[0], l[1], 'i', 'j']);
        assert_eq!(e.inputs[1], vec![l[1], 'j', 'k']);
        assert_eq!(e.output, vec![l[0], l[1], 'i', 'k']);
        assert!(parse("ij,jk->iz", &[2, 2]).is_err());
        assert!(parse("ijk->i", &[2]).is_err());
        assert!(parse("ij->ii", &[2]).is_err());
        assert!(parse("i1->i", &[2]).is_err());
    }
}
