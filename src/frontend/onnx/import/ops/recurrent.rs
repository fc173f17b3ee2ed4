//! `RNN`, `GRU` and `LSTM`, unrolled over their sequence, which is static once the inputs are
//! bound. The input products of every step are one `nn.dense` over the whole sequence; each step
//! adds its recurrent product, applies the gates and, when `sequence_lens` is given, keeps the
//! state of the batch entries whose sequence has ended (their outputs are zeros from there on),
//! as ONNX defines. docs/onnx.md, "Recurrent operators", lists what is and is not taken.

use super::{attr_int, attr_str, float, ints, slice_axis, string, zeros, Cx, R};
use crate::frontend::onnx::model::{AttrValue as A, Node};
use crate::ir::{AttrValue, DType, ExprId};
use crate::ops::Op;

/// The most steps (sequence length times directions) a node is unrolled to.
pub(super) const MAX_STEPS: i64 = 4096;

/// Which of the three operators.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rnn,
    Gru,
    Lstm,
}

impl Kind {
    fn gates(self) -> i64 {
        match self {
            Kind::Rnn => 1,
            Kind::Gru => 3,
            Kind::Lstm => 4,
        }
    }

    /// The activations of one direction when the node names none.
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Kind::Rnn => &["Tanh"],
            Kind::Gru => &["Sigmoid", "Tanh"],
            Kind::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// An activation function of the `activations` attribute with its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Act {
    Sigmoid,
    Tanh,
    Relu,
    Softsign,
    Softplus,
    LeakyRelu(f64),
    ThresholdedRelu(f64),
    Elu(f64),
    HardSigmoid(f64, f64),
    Affine(f64, f64),
    ScaledTanh(f64, f64),
}

/// Reads the activation names, taking `alpha` and `beta` values in order for the functions that
/// have them (ONNX's defaults where the lists run out), as ONNX Runtime does.
fn activations(names: &[String], alphas: &[f32], betas: &[f32]) -> Result<Vec<Act>, String> {
    let mut alpha = alphas.iter().map(|&v| v as f64);
    let mut beta = betas.iter().map(|&v| v as f64);
    names
        .iter()
        .map(|name| {
            let mut a = |d: f64| alpha.next().unwrap_or(d);
            Ok(match name.to_ascii_lowercase().as_str() {
                "sigmoid" => Act::Sigmoid,
                "tanh" => Act::Tanh,
                "relu" => Act::Relu,
                "softsign" => Act::Softsign,
                "softplus" => Act::Softplus,
                "leakyrelu" => Act::LeakyRelu(a(0.01)),
                "thresholdedrelu" => Act::ThresholdedRelu(a(1.0)),
                "elu" => Act::Elu(a(1.0)),
                "hardsigmoid" => {
                    let x = a(0.2);
                    Act::HardSigmoid(x, beta.next().unwrap_or(0.5))
                }
                "affine" => {
                    let x = a(1.0);
                    Act::Affine(x, beta.next().unwrap_or(0.0))
                }
                "scaledtanh" => {
                    let x = a(1.0);
                    Act::ScaledTanh(x, beta.next().unwrap_or(1.0))
                }
                _ => return Err(format!("activation \"{name}\"")),
            })
        })
        .collect()
}

fn activate(cx: &mut Cx<'_>, act: Act, x: ExprId) -> R<ExprId> {
    let d = cx.dtype_of_expr(x)?;
    match act {
        Act::Sigmoid => cx.call(Op::Sigmoid, &[x], &[]),
        Act::Tanh => cx.call(Op::Tanh, &[x], &[]),
        Act::Relu => cx.call(Op::Relu, &[x], &[]),
        Act::Softsign => {
            let a = cx.call(Op::Abs, &[x], &[])?;
            let a1 = cx.add_scalar(a, 1.0)?;
            cx.call(Op::Divide, &[x, a1], &[])
        }
        Act::Softplus => {
            let e = cx.call(Op::Exp, &[x], &[])?;
            let e1 = cx.add_scalar(e, 1.0)?;
            cx.call(Op::Log, &[e1], &[])
        }
        Act::LeakyRelu(alpha) => cx.call(Op::LeakyRelu, &[x], &[("alpha", float(alpha))]),
        Act::ThresholdedRelu(alpha) => {
            let t = cx.scalar(alpha, d);
            let zero = cx.scalar(0.0, d);
            let above = cx.call(Op::Greater, &[x, t], &[])?;
            cx.call(Op::Where, &[above, x, zero], &[])
        }
        Act::Elu(alpha) => super::elu(cx, x, alpha, 1.0),
        Act::HardSigmoid(alpha, beta) => super::hard_sigmoid(cx, x, alpha, beta),
        Act::Affine(alpha, beta) => {
            let ax = cx.scale(x, alpha)?;
            cx.add_scalar(ax, beta)
        }
        Act::ScaledTanh(alpha, beta) => {
            let bx = cx.scale(x, beta)?;
            let t = cx.call(Op::Tanh, &[bx], &[])?;
            cx.scale(t, alpha)
        }
    }
}

/// Row `i` of axis 0, with that axis dropped and the rest reshaped to `rest`.
fn row(cx: &mut Cx<'_>, e: ExprId, i: i64, rest: &[i64]) -> R<ExprId> {
    let r = slice_axis(cx, e, 0, i, i + 1)?;
    cx.reshape(r, rest)
}

/// `parts` concatenated along `axis`, two at a time in a balanced tree. One `concatenate` of
/// a tuple of every step would make candidate enumeration combine the tuple with every subset
/// of its fields.
fn concat(cx: &mut Cx<'_>, parts: &[ExprId], axis: i64) -> R<ExprId> {
    match parts {
        [one] => Ok(*one),
        [a, b] => {
            let t = cx.tuple(&[*a, *b])?;
            cx.call(Op::Concatenate, &[t], &[("axis", super::int(axis))])
        }
        _ => {
            let (l, r) = parts.split_at(parts.len() / 2);
            let l = concat(cx, l, axis)?;
            let r = concat(cx, r, axis)?;
            concat(cx, &[l, r], axis)
        }
    }
}

/// The parts of a `[batch, gates * hidden]` value, one per gate.
fn gate_parts(cx: &mut Cx<'_>, e: ExprId, gates: i64, hidden: i64) -> R<Vec<ExprId>> {
    (0..gates)
        .map(|g| slice_axis(cx, e, 1, g * hidden, (g + 1) * hidden))
        .collect()
}

/// One direction's weights, read from the node's inputs.
struct Weights {
    /// `[gates * hidden, input]`.
    w: ExprId,
    /// `[gates * hidden, hidden]`; for a GRU, its update and reset rows `[2 * hidden, hidden]`
    /// (the hidden gate's rows are in `r_h`).
    r: ExprId,
    /// GRU: the hidden gate's recurrent rows, `[hidden, hidden]`.
    r_h: Option<ExprId>,
    /// What is added to each step's input products, `[gates * hidden]`.
    bias: Option<ExprId>,
    /// GRU with `linear_before_reset`: the recurrent bias of the hidden gate, `[hidden]`.
    reset_bias: Option<ExprId>,
    /// LSTM peepholes `i`, `o`, `f`, each `[hidden]`.
    peep: Option<[ExprId; 3]>,
}

/// The settings shared by both directions.
struct Cell {
    kind: Kind,
    hidden: i64,
    dtype: DType,
    clip: Option<f64>,
    linear_before_reset: bool,
}

impl Cell {
    fn clip(&self, cx: &mut Cx<'_>, x: ExprId) -> R<ExprId> {
        match self.clip {
            Some(c) => cx.call(Op::Clip, &[x], &[("a_min", float(-c)), ("a_max", float(c))]),
            None => Ok(x),
        }
    }

    fn act(&self, cx: &mut Cx<'_>, act: Act, x: ExprId) -> R<ExprId> {
        let x = self.clip(cx, x)?;
        activate(cx, act, x)
    }

    fn recurrent(&self, cx: &mut Cx<'_>, h: ExprId, r: ExprId) -> R<ExprId> {
        let units = cx.shape(r)?[0];
        cx.call(Op::Dense, &[h, r], &[("units", super::int(units))])
    }

    /// The step's input products plus its biases.
    fn biased(&self, cx: &mut Cx<'_>, wt: &Weights, xt: ExprId) -> R<ExprId> {
        match wt.bias {
            Some(b) => cx.call(Op::Add, &[xt, b], &[]),
            None => Ok(xt),
        }
    }

    /// One step: the new hidden state (and cell state), from the step's input products `xt`
    /// (`[batch, gates * hidden]`, without biases) and the previous states.
    fn step(
        &self,
        cx: &mut Cx<'_>,
        wt: &Weights,
        acts: &[Act],
        xt: ExprId,
        h: ExprId,
        c: Option<ExprId>,
    ) -> R<(ExprId, Option<ExprId>)> {
        let hs = self.hidden;
        let xt = self.biased(cx, wt, xt)?;
        match self.kind {
            Kind::Rnn => {
                let hr = self.recurrent(cx, h, wt.r)?;
                let pre = cx.call(Op::Add, &[hr, xt], &[])?;
                Ok((self.act(cx, acts[0], pre)?, None))
            }
            Kind::Lstm => {
                let c = c.expect("an LSTM has a cell state");
                let hr = self.recurrent(cx, h, wt.r)?;
                let pre = cx.call(Op::Add, &[hr, xt], &[])?;
                let g = gate_parts(cx, pre, 4, hs)?;
                let (mut i, mut o, mut f, cand) = (g[0], g[1], g[2], g[3]);
                if let Some([pi, _, pf]) = wt.peep {
                    let ic = cx.call(Op::Multiply, &[pi, c], &[])?;
                    i = cx.call(Op::Add, &[i, ic], &[])?;
                    let fc = cx.call(Op::Multiply, &[pf, c], &[])?;
                    f = cx.call(Op::Add, &[f, fc], &[])?;
                }
                let i = self.act(cx, acts[0], i)?;
                let f = self.act(cx, acts[0], f)?;
                let cand = self.act(cx, acts[1], cand)?;
                let kept = cx.call(Op::Multiply, &[f, c], &[])?;
                let new = cx.call(Op::Multiply, &[i, cand], &[])?;
                let cn = cx.call(Op::Add, &[kept, new], &[])?;
                if let Some([_, po, _]) = wt.peep {
                    let oc = cx.call(Op::Multiply, &[po, cn], &[])?;
                    o = cx.call(Op::Add, &[o, oc], &[])?;
                }
                let o = self.act(cx, acts[0], o)?;
                let hc = activate(cx, acts[2], cn)?;
                let hn = cx.call(Op::Multiply, &[o, hc], &[])?;
                Ok((hn, Some(cn)))
            }
            Kind::Gru => {
                let x = gate_parts(cx, xt, 3, hs)?;
                let r_h = wt.r_h.expect("a GRU's hidden-gate rows");
                let hzr = self.recurrent(cx, h, wt.r)?;
                let hzr = gate_parts(cx, hzr, 2, hs)?;
                let z = cx.call(Op::Add, &[hzr[0], x[0]], &[])?;
                let z = self.act(cx, acts[0], z)?;
                let r = cx.call(Op::Add, &[hzr[1], x[1]], &[])?;
                let r = self.act(cx, acts[0], r)?;
                let cand = if self.linear_before_reset {
                    let mut hh = self.recurrent(cx, h, r_h)?;
                    if let Some(rb) = wt.reset_bias {
                        hh = cx.call(Op::Add, &[hh, rb], &[])?;
                    }
                    let rh = cx.call(Op::Multiply, &[r, hh], &[])?;
                    cx.call(Op::Add, &[rh, x[2]], &[])?
                } else {
                    let rh = cx.call(Op::Multiply, &[r, h], &[])?;
                    let hh = self.recurrent(cx, rh, r_h)?;
                    cx.call(Op::Add, &[hh, x[2]], &[])?
                };
                let cand = self.act(cx, acts[1], cand)?;
                // (1 - z) h~ + z h
                let one = cx.scalar(1.0, self.dtype);
                let zc = cx.call(Op::Subtract, &[one, z], &[])?;
                let a = cx.call(Op::Multiply, &[zc, cand], &[])?;
                let b = cx.call(Op::Multiply, &[z, h], &[])?;
                Ok((cx.call(Op::Add, &[a, b], &[])?, None))
            }
        }
    }
}

/// Converts an `RNN`, `GRU` or `LSTM` node, binding the outputs it has.
pub(super) fn convert(cx: &mut Cx<'_>, node: &Node) -> R<()> {
    let kind = match node.op_type.as_str() {
        "RNN" => Kind::Rnn,
        "GRU" => Kind::Gru,
        _ => Kind::Lstm,
    };
    let gates = kind.gates();
    let layout = attr_int(node, "layout", 0);
    if !(0..=1).contains(&layout) {
        return Err(cx.unsupported(format_args!("layout = {layout}")));
    }
    if kind == Kind::Lstm && attr_int(node, "input_forget", 0) != 0 {
        return Err(cx.unsupported("input_forget = 1 (coupled input and forget gates)"));
    }
    let x = cx.input(0)?;
    let dtype = cx.dtype_of_expr(x)?;
    if !dtype.is_float() {
        return Err(cx.unsupported(format_args!("an input of type {dtype}")));
    }
    let sx = cx.shape(x)?;
    if sx.len() != 3 {
        return Err(cx.unsupported(format_args!("an input of rank {}", sx.len())));
    }
    let x = if layout == 1 {
        cx.call(Op::Transpose, &[x], &[("axes", ints(&[1, 0, 2]))])?
    } else {
        x
    };
    let (steps, batch, input) = if layout == 1 {
        (sx[1], sx[0], sx[2])
    } else {
        (sx[0], sx[1], sx[2])
    };
    let reverse: Vec<bool> = match attr_str(node, "direction", "forward") {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        other => return Err(cx.unsupported(format_args!("direction \"{other}\""))),
    };
    let nd = reverse.len() as i64;
    let w = cx.input(1)?;
    let r = cx.input(2)?;
    let (sw, sr) = (cx.shape(w)?, cx.shape(r)?);
    let hidden = match node.attr("hidden_size") {
        Some(A::Int(h)) => *h,
        _ => sr.get(2).copied().unwrap_or(0),
    };
    if !(1..=1 << 40).contains(&hidden) {
        return Err(cx.unsupported(format_args!("hidden_size = {hidden}")));
    }
    let gh = gates * hidden;
    let expect = |cx: &Cx<'_>, what: &str, got: &[i64], want: &[i64]| -> R<()> {
        if got == want {
            Ok(())
        } else {
            Err(cx.unsupported(format_args!(
                "{what} of shape {got:?} (for {nd} direction(s), {gates} gate(s) of \
                 {hidden} units and {input} inputs it is {want:?})"
            )))
        }
    };
    expect(cx, "`W`", &sw, &[nd, gh, input])?;
    expect(cx, "`R`", &sr, &[nd, gh, hidden])?;
    if steps < 1 || batch < 1 {
        return Err(cx.unsupported(format_args!("a sequence of {steps} steps of batch {batch}")));
    }
    if steps.saturating_mul(nd) > MAX_STEPS {
        return Err(cx.unsupported(format_args!(
            "a sequence of {steps} steps in {nd} direction(s) (unrolled up to {MAX_STEPS})"
        )));
    }
    let b = cx.opt_input(3)?;
    if let Some(b) = b {
        expect(cx, "`B`", &cx.shape(b)?, &[nd, 2 * gh])?;
    }
    let lens = cx.opt_input(4)?;
    if let Some(l) = lens {
        expect(cx, "`sequence_lens`", &cx.shape(l)?, &[batch])?;
        let d = cx.dtype_of_expr(l)?;
        if d.is_float() || d == DType::BOOL {
            return Err(cx.unsupported(format_args!("`sequence_lens` of type {d}")));
        }
    }
    // Initial states, `[directions, batch, hidden]` whatever the layout.
    let mut initial = Vec::new();
    for (i, name) in [(5, "`initial_h`"), (6, "`initial_c`")] {
        let e = match cx.opt_input(i)? {
            Some(e) if i == 5 || kind == Kind::Lstm => {
                let want = if layout == 1 {
                    [batch, nd, hidden]
                } else {
                    [nd, batch, hidden]
                };
                expect(cx, name, &cx.shape(e)?, &want)?;
                Some(if layout == 1 {
                    cx.call(Op::Transpose, &[e], &[("axes", ints(&[1, 0, 2]))])?
                } else {
                    e
                })
            }
            _ => None,
        };
        initial.push(e);
    }
    let p = if kind == Kind::Lstm {
        cx.opt_input(7)?
    } else {
        None
    };
    if let Some(p) = p {
        expect(cx, "`P`", &cx.shape(p)?, &[nd, 3 * hidden])?;
    }
    let clip = match node.attr("clip") {
        Some(A::Float(c)) if *c > 0.0 => Some(*c as f64),
        Some(A::Float(c)) => return Err(cx.unsupported(format_args!("clip = {c}"))),
        _ => None,
    };
    let names: Vec<String> = match node.attr("activations") {
        Some(A::Strings(v)) => v.clone(),
        _ => kind
            .default_activations()
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    let floats = |name: &str| match node.attr(name) {
        Some(A::Floats(v)) => v.clone(),
        Some(A::Float(v)) => vec![*v],
        _ => Vec::new(),
    };
    let acts = activations(
        &names,
        &floats("activation_alpha"),
        &floats("activation_beta"),
    )
    .map_err(|what| cx.unsupported(what))?;
    let per = kind.default_activations().len();
    let acts: Vec<Vec<Act>> = if acts.len() == per * nd as usize {
        acts.chunks(per).map(<[Act]>::to_vec).collect()
    } else if acts.len() == per {
        vec![acts; nd as usize]
    } else {
        return Err(cx.unsupported(format_args!(
            "{} activations (an {} takes {per} per direction)",
            acts.len(),
            node.op_type
        )));
    };
    let cell = Cell {
        kind,
        hidden,
        dtype,
        clip,
        linear_before_reset: kind == Kind::Gru && attr_int(node, "linear_before_reset", 0) != 0,
    };
    let want = |i: usize| node.outputs.get(i).is_some_and(|o| !o.is_empty());
    let flat_x = cx.reshape(x, &[steps * batch, input])?;
    let mut ys = Vec::new();
    let mut hs = Vec::new();
    let mut cs = Vec::new();
    for (d, &rev) in reverse.iter().enumerate() {
        let d = d as i64;
        let wt = weights(cx, &cell, d, w, r, b, p, input)?;
        // The steps' input products, `[steps * batch, gates * hidden]`. Each step slices its
        // rows straight from the product: an elementwise or reshaping operator between the
        // product and the slices would have `steps` consumers, and candidate enumeration
        // combines an injective operator with every subset of its consumers.
        let units = super::int(gh);
        let xw = cx.call(Op::Dense, &[flat_x, wt.w], &[("units", units)])?;
        let state = |cx: &mut Cx<'_>, e: Option<ExprId>| match e {
            Some(e) => row(cx, e, d, &[batch, hidden]),
            None => zeros(cx, &[batch, hidden], dtype),
        };
        let mut h = state(cx, initial[0])?;
        let mut c = if kind == Kind::Lstm {
            Some(state(cx, initial[1])?)
        } else {
            None
        };
        let mut outs = vec![None; steps as usize];
        let order: Vec<i64> = if rev {
            (0..steps).rev().collect()
        } else {
            (0..steps).collect()
        };
        for t in order {
            let xt = slice_axis(cx, xw, 0, t * batch, (t + 1) * batch)?;
            let (hn, cn) = cell.step(cx, &wt, &acts[d as usize], xt, h, c)?;
            let y = match lens {
                Some(l) => {
                    // Entries whose sequence is over keep their state and output zeros. The
                    // mask is applied as `new * live + old * (1 - live)` with `live` 0 or 1,
                    // which is exact for finite values, rather than with `where`: the search
                    // covers operators in the order of a depth-first walk of their arguments,
                    // and a mask as `where`'s first argument would put every step's mask
                    // before the steps, which multiplies the states the search visits.
                    let ld = cx.dtype_of_expr(l)?;
                    let tt = cx.scalar(t as f64, ld);
                    let live = cx.call(Op::Less, &[tt, l], &[])?;
                    let live = cx.cast(live, dtype)?;
                    let live = cx.reshape(live, &[batch, 1])?;
                    let one = cx.scalar(1.0, dtype);
                    let keep = cx.call(Op::Subtract, &[one, live], &[])?;
                    let y = cx.call(Op::Multiply, &[hn, live], &[])?;
                    let old = cx.call(Op::Multiply, &[h, keep], &[])?;
                    h = cx.call(Op::Add, &[y, old], &[])?;
                    if let (Some(cn), Some(cp)) = (cn, c) {
                        let new = cx.call(Op::Multiply, &[cn, live], &[])?;
                        let old = cx.call(Op::Multiply, &[cp, keep], &[])?;
                        c = Some(cx.call(Op::Add, &[new, old], &[])?);
                    }
                    y
                }
                None => {
                    h = hn;
                    c = cn;
                    hn
                }
            };
            if want(0) {
                outs[t as usize] = Some(cx.reshape(y, &[1, 1, batch, hidden])?);
            }
        }
        if want(0) {
            let outs: Vec<ExprId> = outs.into_iter().flatten().collect();
            ys.push(concat(cx, &outs, 0)?);
        }
        hs.push(cx.reshape(h, &[1, batch, hidden])?);
        if let Some(c) = c {
            cs.push(cx.reshape(c, &[1, batch, hidden])?);
        }
    }
    if want(0) {
        let y = concat(cx, &ys, 1)?;
        let y = if layout == 1 {
            cx.call(Op::Transpose, &[y], &[("axes", ints(&[2, 0, 1, 3]))])?
        } else {
            y
        };
        cx.bind(0, y);
    }
    for (i, states) in [(1, hs), (2, cs)] {
        if want(i) && !states.is_empty() {
            let s = concat(cx, &states, 0)?;
            let s = if layout == 1 {
                cx.call(Op::Transpose, &[s], &[("axes", ints(&[1, 0, 2]))])?
            } else {
                s
            };
            cx.bind(i, s);
        }
    }
    Ok(())
}

/// Direction `d`'s weights and biases.
#[allow(clippy::too_many_arguments)]
fn weights(
    cx: &mut Cx<'_>,
    cell: &Cell,
    d: i64,
    w: ExprId,
    r: ExprId,
    b: Option<ExprId>,
    p: Option<ExprId>,
    input: i64,
) -> R<Weights> {
    let (hs, gh) = (cell.hidden, cell.kind.gates() * cell.hidden);
    let w = row(cx, w, d, &[gh, input])?;
    let mut r = row(cx, r, d, &[gh, hs])?;
    // A GRU's recurrent rows, split once for every step: the update and reset gates multiply
    // the previous state, the hidden gate (reset) applies to it or to its product.
    let mut r_h = None;
    if cell.kind == Kind::Gru {
        r_h = Some(slice_axis(cx, r, 0, 2 * hs, 3 * hs)?);
        r = slice_axis(cx, r, 0, 0, 2 * hs)?;
    }
    let mut bias = None;
    let mut reset_bias = None;
    if let Some(b) = b {
        let bd = row(cx, b, d, &[2 * gh])?;
        let wb = slice_axis(cx, bd, 0, 0, gh)?;
        let rb = slice_axis(cx, bd, 0, gh, 2 * gh)?;
        bias = Some(if cell.linear_before_reset {
            // The hidden gate's recurrent bias goes inside the reset product.
            let rb_zr = slice_axis(cx, rb, 0, 0, 2 * hs)?;
            reset_bias = Some(slice_axis(cx, rb, 0, 2 * hs, 3 * hs)?);
            // (Padded with zeros, not concatenated with them: simplification folds a pad
            // of a constant, so the sum becomes one constant.)
            let zero = cx.scalar(0.0, cell.dtype);
            let rb = cx.call(
                Op::Pad,
                &[rb_zr, zero],
                &[
                    ("pad_width", AttrValue::Array(vec![ints(&[0, hs])])),
                    ("pad_mode", string("constant")),
                ],
            )?;
            cx.call(Op::Add, &[wb, rb], &[])?
        } else {
            cx.call(Op::Add, &[wb, rb], &[])?
        });
    }
    let peep = match p {
        Some(p) => {
            let pd = row(cx, p, d, &[3 * hs])?;
            let part = |cx: &mut Cx<'_>, k: i64| slice_axis(cx, pd, 0, k * hs, (k + 1) * hs);
            Some([part(cx, 0)?, part(cx, 1)?, part(cx, 2)?])
        }
        None => None,
    };
    Ok(Weights {
        w,
        r,
        r_h,
        bias,
        reset_bias,
        peep,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_parameters_are_taken_in_order_by_the_functions_that_have_them() {
        let names: Vec<String> = ["HardSigmoid", "tanh", "LeakyRelu", "Affine"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let acts = activations(&names, &[0.3, 0.1], &[0.6]).unwrap();
        assert_eq!(
            acts,
            vec![
                Act::HardSigmoid(0.30000001192092896, 0.6000000238418579),
                Act::Tanh,
                Act::LeakyRelu(0.10000000149011612),
                Act::Affine(1.0, 0.0),
            ]
        );
        assert_eq!(
            activations(&["Gaussian".to_string()], &[], &[]),
            Err("activation \"Gaussian\"".to_string())
        );
    }
}
