//! Generators of large transformer models as RelayScript, for scaling benchmarks.
//!
//! [`gpt2`] writes a GPT-2 of any depth whose layers are exactly those of the corpus model
//! `tests/models/gpt2.relay` (50 sequences of 32 tokens, hidden size 768, 12 heads, float32);
//! with 12 layers it is that model. [`bert_large`] writes a BERT-large-style encoder (hidden size
//! 1024, 16 heads, feed-forward size 4096, erf GELU, `nn.layer_norm`) of any depth and sequence
//! length.
//!
//! Weights are typed constants written the way the corpus writes them,
//! `meta[relay.Constant][i] /* ty=Tensor[...] */`, with no metadata section: the type comment is
//! all the front end needs, so a 96-layer model stays a few hundred kilobytes of text.

use std::fmt::Write;

/// Writes one function body in graph form: `%N = expr;` lines numbered from 0, and constants
/// numbered from 0 in order of first use.
struct Body {
    text: String,
    next_binding: usize,
    next_const: usize,
}

impl Body {
    fn new() -> Body {
        Body {
            text: String::new(),
            next_binding: 0,
            next_const: 0,
        }
    }

    /// Binds `expr` to the next `%N` and returns `%N`.
    fn bind(&mut self, expr: impl std::fmt::Display) -> String {
        let name = format!("%{}", self.next_binding);
        self.next_binding += 1;
        let _ = writeln!(self.text, "  {name} = {expr};");
        name
    }

    /// A new float32 constant of the given shape.
    fn constant(&mut self, shape: &[usize]) -> String {
        let i = self.next_const;
        self.next_const += 1;
        format!(
            "meta[relay.Constant][{i}] /* ty={} */",
            tensor_type(shape, "float32")
        )
    }

    /// The finished module: `def @main(params) -> ret { body result }`.
    fn finish(self, params: &str, ret: &str, result: &str) -> String {
        format!(
            "#[version = \"0.0.5\"]\ndef @main({params}) -> {ret} {{\n{}  {result}\n}}\n",
            self.text
        )
    }
}

/// `Tensor[(a, b, ...), dtype]` (a rank-1 shape is written `(n)`, as TVM prints it).
fn tensor_type(shape: &[usize], dtype: &str) -> String {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    format!("Tensor[({}), {dtype}]", dims.join(", "))
}

/// A tuple expression or type: `(a, b)`, with the trailing comma a one-field tuple needs.
fn tuple(fields: &[String]) -> String {
    if fields.len() == 1 {
        format!("({},)", fields[0])
    } else {
        format!("({})", fields.join(", "))
    }
}

/// The corpus GPT-2's fixed dimensions.
mod gpt2_dims {
    /// Sequences per batch (the model's input is `[1, BATCH, SEQ]`).
    pub const BATCH: usize = 50;
    /// Tokens per sequence.
    pub const SEQ: usize = 32;
    /// Hidden size.
    pub const HIDDEN: usize = 768;
    /// Attention heads.
    pub const HEADS: usize = 12;
    /// Size of one head.
    pub const HEAD: usize = HIDDEN / HEADS;
    /// Feed-forward size.
    pub const FFN: usize = 4 * HIDDEN;
    /// Vocabulary size.
    pub const VOCAB: usize = 50257;
}

/// A GPT-2 with `layers` transformer layers, as RelayScript. Each layer is built exactly like the
/// layers of `tests/models/gpt2.relay` (50 sequences of 32 tokens, hidden size 768, 12 heads,
/// float32), with the same operators, attributes, shapes and order, and the same prologue
/// (token and position embeddings) and epilogue (final layer norm, and each layer's key and value
/// stacked into a `[2, 50, 12, 32, 64]` "present" output). `gpt2(12)` is structurally equal to
/// that model. Each layer adds 67 operator calls and 14 constants; the prologue, the final layer
/// norm and the output reshape add 16 calls and 4 constants, and each layer's present output 4
/// more calls.
///
/// `layers = 0` gives the embeddings and the final layer norm only.
pub fn gpt2(layers: usize) -> String {
    use gpt2_dims::*;
    let mut b = Body::new();
    let tokens = b.bind(format!("reshape(%x, newshape=[-1, {SEQ}])"));
    let negative = b.bind(format!("less({tokens}, 0i64)"));
    let wrapped = b.bind(format!("add({tokens}, {VOCAB}i64)"));
    let ids = b.bind(format!("where({negative}, {wrapped}, {tokens})"));
    let wte = b.constant(&[VOCAB, HIDDEN]);
    let embedded = b.bind(format!("take({wte}, {ids}, axis=0)"));
    let wpe = b.constant(&[1, SEQ, HIDDEN]);
    let mut h = b.bind(format!("add({embedded}, {wpe})"));
    let mut presents = Vec::with_capacity(layers);
    for _ in 0..layers {
        let (next, key, value) = gpt2_layer(&mut b, &h);
        presents.push((key, value));
        h = next;
    }
    let last = gpt2_layer_norm(&mut b, &h);
    let mut stacked = Vec::with_capacity(layers);
    for (key, value) in &presents {
        let k = b.bind(format!("transpose({key}, axes=[0, 2, 1, 3])"));
        let k = b.bind(format!("expand_dims({k}, axis=0)"));
        let v = b.bind(format!("expand_dims({value}, axis=0)"));
        stacked.push(b.bind(tuple(&[k, v])));
    }
    let mut outputs = vec![b.bind(format!(
        "reshape({last}, newshape=[1, {BATCH}, {SEQ}, {HIDDEN}])"
    ))];
    for s in &stacked {
        outputs.push(b.bind(format!("concatenate({s})")));
    }
    let mut types = vec![tensor_type(&[1, BATCH, SEQ, HIDDEN], "float32")];
    let present = tensor_type(&[2, BATCH, HEADS, SEQ, HEAD], "float32");
    types.extend(std::iter::repeat_n(present, layers));
    let params = format!("%x: {}", tensor_type(&[1, BATCH, SEQ], "int64"));
    b.finish(&params, &tuple(&types), &tuple(&outputs))
}

/// GPT-2's layer norm written out in primitive operators, as the corpus model has it:
/// `(x - mean) / sqrt(var + 1e-5) * gamma + beta` over the last axis.
fn gpt2_layer_norm(b: &mut Body, x: &str) -> String {
    use gpt2_dims::*;
    let mean = b.bind(format!("mean({x}, axis=[-1], keepdims=True)"));
    let centred = b.bind(format!("subtract({x}, {mean})"));
    let squared = b.bind(format!("power({centred}, 2f)"));
    let var = b.bind(format!("mean({squared}, axis=[-1], keepdims=True)"));
    let var = b.bind(format!("add({var}, 1e-05f)"));
    let std = b.bind(format!("sqrt({var})"));
    let normed = b.bind(format!("divide({centred}, {std})"));
    let gamma = b.constant(&[HIDDEN]);
    let scaled = b.bind(format!("multiply({normed}, {gamma})"));
    let beta = b.constant(&[HIDDEN]);
    b.bind(format!("add({scaled}, {beta})"))
}

/// `x [.., in] · W^T + bias` over a `[-1, in]` view of `x`, reshaped to `[BATCH, SEQ, out]`.
fn gpt2_linear(b: &mut Body, x: &str, inp: usize, out: usize) -> String {
    use gpt2_dims::*;
    let flat = b.bind(format!("reshape({x}, newshape=[-1, {inp}])"));
    let w = b.constant(&[out, inp]);
    let y = b.bind(format!("nn.dense({flat}, {w}, units={out})"));
    let bias = b.constant(&[out]);
    let y = b.bind(format!("add({y}, {bias})"));
    b.bind(format!("reshape({y}, newshape=[{BATCH}, {SEQ}, {out}])"))
}

/// One GPT-2 layer over `h` (`[BATCH, SEQ, HIDDEN]`). Returns the layer's output, its key
/// (`[BATCH, SEQ, HEADS, HEAD]`) and its value (`[BATCH, HEADS, SEQ, HEAD]`) for the present
/// outputs.
fn gpt2_layer(b: &mut Body, h: &str) -> (String, String, String) {
    use gpt2_dims::*;
    let heads4 = format!("[{BATCH}, {SEQ}, {HEADS}, {HEAD}]");
    // Attention.
    let x = gpt2_layer_norm(b, h);
    let qkv = gpt2_linear(b, &x, HIDDEN, 3 * HIDDEN);
    let split = b.bind(format!(
        "split({qkv}, indices_or_sections=[{HIDDEN}, {}], axis=2)",
        2 * HIDDEN
    ));
    let q = b.bind(format!("{split}.0"));
    let q = b.bind(format!("reshape({q}, newshape={heads4})"));
    let q = b.bind(format!("transpose({q}, axes=[0, 2, 1, 3])"));
    let k = b.bind(format!("{split}.1"));
    let key = b.bind(format!("reshape({k}, newshape={heads4})"));
    let k = b.bind(format!("transpose({key}, axes=[0, 2, 3, 1])"));
    let k = b.bind(format!("reshape({k}, newshape=[-1, {HEAD}, {SEQ}])"));
    let q = b.bind(format!("reshape({q}, newshape=[-1, {SEQ}, {HEAD}])"));
    let k = b.bind(format!("transpose({k}, axes=[0, 2, 1])"));
    let scores = b.bind(format!(
        "nn.batch_matmul({q}, {k}, out_dtype=\"float32\", transpose_b=True)"
    ));
    let scores = b.bind(format!(
        "reshape({scores}, newshape=[{BATCH}, {HEADS}, {SEQ}, {SEQ}])"
    ));
    let scores = b.bind(format!("divide({scores}, 8f)"));
    let mask = b.constant(&[1, 1, SEQ, SEQ]);
    let scores = b.bind(format!("multiply({scores}, {mask})"));
    let bias = b.constant(&[1, 1, SEQ, SEQ]);
    let scores = b.bind(format!("subtract({scores}, {bias})"));
    let probs = b.bind(format!("nn.softmax({scores}, axis=3)"));
    let v = b.bind(format!("{split}.2"));
    let v = b.bind(format!("reshape({v}, newshape={heads4})"));
    let value = b.bind(format!("transpose({v}, axes=[0, 2, 1, 3])"));
    let v = b.bind(format!("reshape({value}, newshape=[-1, {SEQ}, {HEAD}])"));
    let probs = b.bind(format!("reshape({probs}, newshape=[-1, {SEQ}, {SEQ}])"));
    let v = b.bind(format!("transpose({v}, axes=[0, 2, 1])"));
    let ctx = b.bind(format!(
        "nn.batch_matmul({probs}, {v}, out_dtype=\"float32\", transpose_b=True)"
    ));
    let ctx = b.bind(format!(
        "reshape({ctx}, newshape=[{BATCH}, {HEADS}, {SEQ}, {HEAD}])"
    ));
    let ctx = b.bind(format!("transpose({ctx}, axes=[0, 2, 1, 3])"));
    let ctx = b.bind(format!(
        "reshape({ctx}, newshape=[{BATCH}, {SEQ}, {HIDDEN}])"
    ));
    let attn = gpt2_linear(b, &ctx, HIDDEN, HIDDEN);
    let h = b.bind(format!("add({h}, {attn})"));
    // Feed-forward with the tanh approximation of GELU.
    let x = gpt2_layer_norm(b, &h);
    let f = gpt2_linear(b, &x, HIDDEN, FFN);
    let cube = b.bind(format!("power({f}, 3f)"));
    let cube = b.bind(format!("multiply({cube}, 0.044715f)"));
    let inner = b.bind(format!("add({f}, {cube})"));
    let inner = b.bind(format!("multiply({inner}, 0.797885f)"));
    let t = b.bind(format!("tanh({inner})"));
    let half = b.bind(format!("multiply({f}, 0.5f)"));
    let t = b.bind(format!("add({t}, 1f)"));
    let gelu = b.bind(format!("multiply({half}, {t})"));
    let out = gpt2_linear(b, &gelu, FFN, HIDDEN);
    let h = b.bind(format!("add({h}, {out})"));
    (h, key, value)
}

/// BERT-large's fixed dimensions.
mod bert_dims {
    /// Hidden size.
    pub const HIDDEN: usize = 1024;
    /// Attention heads.
    pub const HEADS: usize = 16;
    /// Size of one head.
    pub const HEAD: usize = HIDDEN / HEADS;
    /// Feed-forward size.
    pub const FFN: usize = 4 * HIDDEN;
    /// Vocabulary size (BERT's uncased WordPiece vocabulary).
    pub const VOCAB: usize = 30522;
}

/// The number of layers of BERT-large.
pub const BERT_LARGE_LAYERS: usize = 24;

/// A BERT-large-style encoder with `layers` layers over one sequence of `seq` tokens, as
/// RelayScript: hidden size 1024, 16 heads of 64, feed-forward size 4096 with the erf form of
/// GELU, post-attention and post-feed-forward `nn.layer_norm` (epsilon 1e-12), attention through
/// `nn.batch_matmul` and `nn.softmax` with an additive mask, float32 throughout. The input is
/// `%input_ids: Tensor[(1, seq), int64]`; the output is the last hidden state
/// `[1, seq, 1024]`. BERT-large has 24 layers ([`BERT_LARGE_LAYERS`]). Each layer adds 40
/// operator calls and 17 constants; the embeddings and the output reshape add 6 calls and 5
/// constants. `seq = 0` is treated as 1.
pub fn bert_large(layers: usize, seq: usize) -> String {
    use bert_dims::*;
    let seq = seq.max(1);
    let mut b = Body::new();
    let wte = b.constant(&[VOCAB, HIDDEN]);
    let x = b.bind(format!("take({wte}, %input_ids, axis=0)"));
    let wpe = b.constant(&[1, seq, HIDDEN]);
    let x = b.bind(format!("add({x}, {wpe})"));
    let token_type = b.constant(&[HIDDEN]);
    let x = b.bind(format!("add({x}, {token_type})"));
    let x = bert_layer_norm(&mut b, &x);
    let mut h = b.bind(format!("reshape({x}, newshape=[-1, {HIDDEN}])"));
    for _ in 0..layers {
        h = bert_layer(&mut b, &h, seq);
    }
    let out = b.bind(format!("reshape({h}, newshape=[1, {seq}, {HIDDEN}])"));
    let params = format!("%input_ids: {}", tensor_type(&[1, seq], "int64"));
    b.finish(&params, &tensor_type(&[1, seq, HIDDEN], "float32"), &out)
}

/// `nn.layer_norm` over the last axis with BERT's epsilon.
fn bert_layer_norm(b: &mut Body, x: &str) -> String {
    use bert_dims::*;
    let gamma = b.constant(&[HIDDEN]);
    let beta = b.constant(&[HIDDEN]);
    b.bind(format!(
        "nn.layer_norm({x}, {gamma}, {beta}, epsilon=1e-12f)"
    ))
}

/// `x [seq, in] · W^T + bias`.
fn bert_linear(b: &mut Body, x: &str, inp: usize, out: usize) -> String {
    let w = b.constant(&[out, inp]);
    let y = b.bind(format!("nn.dense({x}, {w}, units={out})"));
    let bias = b.constant(&[out]);
    b.bind(format!("add({y}, {bias})"))
}

/// One BERT layer over `h` (`[seq, HIDDEN]`); returns its output of the same shape.
fn bert_layer(b: &mut Body, h: &str, seq: usize) -> String {
    use bert_dims::*;
    let heads4 = format!("[1, {seq}, {HEADS}, {HEAD}]");
    // Queries and keys as [HEADS, seq, HEAD]; values as [HEADS, HEAD, seq].
    let per_head = |b: &mut Body, axes: &str, shape: &str| {
        let x = bert_linear(b, h, HIDDEN, HIDDEN);
        let x = b.bind(format!("reshape({x}, newshape={heads4})"));
        let x = b.bind(format!("transpose({x}, axes={axes})"));
        b.bind(format!("reshape({x}, newshape={shape})"))
    };
    let by_token = format!("[-1, {seq}, {HEAD}]");
    let by_feature = format!("[-1, {HEAD}, {seq}]");
    let q = per_head(b, "[0, 2, 1, 3]", &by_token);
    let k = per_head(b, "[0, 2, 1, 3]", &by_token);
    let v = per_head(b, "[0, 2, 3, 1]", &by_feature);
    let scores = b.bind(format!(
        "nn.batch_matmul({q}, {k}, out_dtype=\"float32\", transpose_b=True)"
    ));
    let scores = b.bind(format!(
        "reshape({scores}, newshape=[1, {HEADS}, {seq}, {seq}])"
    ));
    let scores = b.bind(format!("divide({scores}, 8f)"));
    let mask = b.constant(&[1, 1, 1, seq]);
    let scores = b.bind(format!("add({scores}, {mask})"));
    let probs = b.bind(format!("nn.softmax({scores}, axis=3)"));
    let probs = b.bind(format!("reshape({probs}, newshape=[-1, {seq}, {seq}])"));
    let ctx = b.bind(format!(
        "nn.batch_matmul({probs}, {v}, out_dtype=\"float32\", transpose_b=True)"
    ));
    let ctx = b.bind(format!(
        "reshape({ctx}, newshape=[1, {HEADS}, {seq}, {HEAD}])"
    ));
    let ctx = b.bind(format!("transpose({ctx}, axes=[0, 2, 1, 3])"));
    let ctx = b.bind(format!("reshape({ctx}, newshape=[-1, {HIDDEN}])"));
    let attn = bert_linear(b, &ctx, HIDDEN, HIDDEN);
    let h = b.bind(format!("add({attn}, {h})"));
    let h = bert_layer_norm(b, &h);
    // Feed-forward: GELU(x) = x · (1 + erf(x / sqrt 2)) / 2.
    let f = bert_linear(b, &h, HIDDEN, FFN);
    let scaled = b.bind(format!("multiply({f}, 0.707107f)"));
    let e = b.bind(format!("erf({scaled})"));
    let e = b.bind(format!("add({e}, 1f)"));
    let g = b.bind(format!("multiply({f}, {e})"));
    let g = b.bind(format!("multiply({g}, 0.5f)"));
    let out = bert_linear(b, &g, FFN, HIDDEN);
    let h2 = b.bind(format!("add({out}, {h})"));
    bert_layer_norm(b, &h2)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::frontend::relay::load_text as load;

    fn op_calls(m: &crate::ir::Module) -> usize {
        m.exprs
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    crate::ir::Expr::Call {
                        callee: crate::ir::Callee::Op(_),
                        ..
                    }
                )
            })
            .count()
    }

    #[test]
    fn small_models_type_check() {
        for layers in [0, 1, 2] {
            let m = load(&gpt2(layers));
            assert_eq!(op_calls(&m), 16 + 71 * layers, "gpt2({layers})");
        }
        for (layers, seq) in [(0, 1), (1, 8), (2, 5)] {
            let m = load(&bert_large(layers, seq));
            assert_eq!(op_calls(&m), 6 + 40 * layers, "bert_large({layers}, {seq})");
        }
    }

    #[test]
    fn one_field_tuples_keep_their_comma() {
        assert_eq!(tuple(&["a".into()]), "(a,)");
        assert_eq!(tuple(&["a".into(), "b".into()]), "(a, b)");
        assert!(gpt2(0).contains("-> (Tensor[(1, 50, 32, 768), float32],)"));
    }
}
