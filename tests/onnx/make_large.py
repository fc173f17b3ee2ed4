#!/usr/bin/env python3
"""Write a GPT-2-sized ONNX model (GPT-2 small's shapes, ~500 MB of float32 initializers) for
collage's load-time and memory measurements, with numpy and the onnx package only (no PyTorch).

The graph is GPT-2's forward pass as PyTorch exports it at opset 17, written by hand:
  input_ids int64 [batch, sequence] (both dynamic)
  token embedding Gather (50257x768) + position embedding Gather (1024x768) of
    Range(0, Shape(input_ids)[1])
  12 layers of: LayerNormalization; attention: MatMul 768x2304 + bias, Split into q, k, v,
    Reshape [0, 0, 12, 64], Transpose, MatMul, Div by 8, causal mask (Slice of a 1024x1024 bool
    initializer, Where), Softmax, MatMul, Transpose, Reshape [0, 0, 768], MatMul 768x768 + bias,
    residual Add; LayerNormalization; MLP: MatMul 768x3072 + bias, GELU (tanh form: Mul, Pow,
    Add, Tanh), MatMul 3072x768 + bias, residual Add
  final LayerNormalization, logits: Gemm with the token embedding (transB=1, tied weights) over
    [batch * sequence, 768], Reshape to [batch, sequence, 50257]
Weights are random (normal, std 0.02; layer norms near 1 and 0) from --seed.

Usage (the environment of tests/onnx/setup-env.sh, or any Python with numpy and onnx):
    python tests/onnx/make_large.py OUT.onnx [--external-data] [--layers 12] [--seed 0] [--check]
The file is written outside the repository (refused inside it). With --external-data, the
initializers go to OUT.onnx.data beside it (one file; location, offset and length set).
"""

import argparse
import os
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VOCAB, POSITIONS, EMBD, HEADS, INNER = 50257, 1024, 768, 12, 3072
HEAD = EMBD // HEADS
OPSET = 17


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = 0

    def weight(self, name, shape, std=0.02, mean=0.0):
        a = self.rng.standard_normal(shape, dtype=np.float32)
        a *= np.float32(std)
        a += np.float32(mean)
        self.inits.append(numpy_helper.from_array(a, name))
        return name

    def const(self, name, value):
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op, inputs, name, n_out=1, **attrs):
        self.count += 1
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs


def build(layers, seed):
    b = Builder(seed)
    N = b.node

    wte = b.weight("transformer.wte.weight", (VOCAB, EMBD))
    wpe = b.weight("transformer.wpe.weight", (POSITIONS, EMBD), std=0.01)
    # GPT-2's causal mask buffer, lower triangle of a 1024x1024 bool matrix.
    mask = b.const("transformer.causal_mask", np.tril(np.ones((1, 1, POSITIONS, POSITIONS), bool)))
    zero = b.const("const_zero", np.array(0, np.int64))
    one = b.const("const_one", np.array(1, np.int64))
    zeros_2 = b.const("const_zeros_2", np.array([0, 0], np.int64))
    axes_23 = b.const("const_axes_23", np.array([2, 3], np.int64))
    axes_0 = b.const("const_axes_0", np.array([0], np.int64))
    split = b.const("const_split_qkv", np.array([EMBD] * 3, np.int64))
    heads_shape = b.const("const_heads_shape", np.array([0, 0, HEADS, HEAD], np.int64))
    merge_shape = b.const("const_merge_shape", np.array([0, 0, EMBD], np.int64))
    flat_shape = b.const("const_flat_shape", np.array([-1, EMBD], np.int64))
    vocab_1d = b.const("const_vocab_1d", np.array([VOCAB], np.int64))
    scale = b.const("const_sqrt_head", np.array(np.sqrt(HEAD), np.float32))
    neg = b.const("const_mask_value", np.array(np.finfo(np.float32).min, np.float32))
    half = b.const("const_half", np.array(0.5, np.float32))
    f_one = b.const("const_f_one", np.array(1.0, np.float32))
    three = b.const("const_three", np.array(3.0, np.float32))
    c_gelu = b.const("const_gelu_c", np.array(0.044715, np.float32))
    s_gelu = b.const("const_gelu_s", np.array(np.sqrt(2.0 / np.pi), np.float32))

    def layer_norm(x, prefix):
        g = b.weight(f"{prefix}.weight", (EMBD,), std=0.1, mean=1.0)
        beta = b.weight(f"{prefix}.bias", (EMBD,), std=0.02)
        return N("LayerNormalization", [x, g, beta], f"/{prefix}/LayerNormalization",
                 axis=-1, epsilon=1e-5)

    def linear(x, prefix, n_in, n_out):
        w = b.weight(f"{prefix}.weight", (n_in, n_out))
        bias = b.weight(f"{prefix}.bias", (n_out,))
        y = N("MatMul", [x, w], f"/{prefix}/MatMul")
        return N("Add", [y, bias], f"/{prefix}/Add")

    # Positions: Range(0, sequence) from the input's shape.
    shape = N("Shape", ["input_ids"], "/Shape")
    seq = N("Gather", [shape, one], "/Gather_seq", axis=0)
    pos = N("Range", [zero, seq, one], "/Range")
    pos = N("Unsqueeze", [pos, axes_0], "/Unsqueeze_pos")
    tok_emb = N("Gather", [wte, "input_ids"], "/wte/Gather")
    pos_emb = N("Gather", [wpe, pos], "/wpe/Gather")
    h = N("Add", [tok_emb, pos_emb], "/Add_embeddings")
    # The mask's [:sequence, :sequence] corner, as GPT-2 slices its buffer.
    seq_1d = N("Unsqueeze", [seq, axes_0], "/Unsqueeze_seq")
    ends = N("Concat", [seq_1d, seq_1d], "/Concat_mask_ends", axis=0)
    causal = N("Slice", [mask, zeros_2, ends, axes_23], "/Slice_mask")

    for i in range(layers):
        p = f"h.{i}"
        x = layer_norm(h, f"{p}.ln_1")
        qkv = linear(x, f"{p}.attn.c_attn", EMBD, 3 * EMBD)
        q, k, v = N("Split", [qkv, split], f"/{p}/attn/Split", n_out=3, axis=2)
        q = N("Reshape", [q, heads_shape], f"/{p}/attn/Reshape_q")
        k = N("Reshape", [k, heads_shape], f"/{p}/attn/Reshape_k")
        v = N("Reshape", [v, heads_shape], f"/{p}/attn/Reshape_v")
        q = N("Transpose", [q], f"/{p}/attn/Transpose_q", perm=[0, 2, 1, 3])
        k = N("Transpose", [k], f"/{p}/attn/Transpose_k", perm=[0, 2, 3, 1])
        v = N("Transpose", [v], f"/{p}/attn/Transpose_v", perm=[0, 2, 1, 3])
        s = N("MatMul", [q, k], f"/{p}/attn/MatMul_scores")
        s = N("Div", [s, scale], f"/{p}/attn/Div")
        s = N("Where", [causal, s, neg], f"/{p}/attn/Where")
        s = N("Softmax", [s], f"/{p}/attn/Softmax", axis=-1)
        a = N("MatMul", [s, v], f"/{p}/attn/MatMul_values")
        a = N("Transpose", [a], f"/{p}/attn/Transpose_merge", perm=[0, 2, 1, 3])
        a = N("Reshape", [a, merge_shape], f"/{p}/attn/Reshape_merge")
        a = linear(a, f"{p}.attn.c_proj", EMBD, EMBD)
        h = N("Add", [h, a], f"/{p}/Add_attn")
        x = layer_norm(h, f"{p}.ln_2")
        x = linear(x, f"{p}.mlp.c_fc", EMBD, INNER)
        # GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        c = N("Pow", [x, three], f"/{p}/mlp/Pow")
        c = N("Mul", [c, c_gelu], f"/{p}/mlp/Mul_c")
        c = N("Add", [x, c], f"/{p}/mlp/Add_inner")
        c = N("Mul", [c, s_gelu], f"/{p}/mlp/Mul_s")
        c = N("Tanh", [c], f"/{p}/mlp/Tanh")
        c = N("Add", [c, f_one], f"/{p}/mlp/Add_one")
        x2 = N("Mul", [x, half], f"/{p}/mlp/Mul_half")
        x = N("Mul", [x2, c], f"/{p}/mlp/Mul_gelu")
        x = linear(x, f"{p}.mlp.c_proj", INNER, EMBD)
        h = N("Add", [h, x], f"/{p}/Add_mlp")

    h = layer_norm(h, "ln_f")
    flat = N("Reshape", [h, flat_shape], "/lm_head/Reshape_flat")
    logits = N("Gemm", [flat, wte], "/lm_head/Gemm", transB=1)
    out_shape = N("Concat", [shape, vocab_1d], "/lm_head/Concat_shape", axis=0)
    b.nodes.append(helper.make_node("Reshape", [logits, out_shape], ["logits"],
                                    name="/lm_head/Reshape_out"))

    graph = helper.make_graph(
        b.nodes, "gpt2_sized",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                       ["batch", "sequence", VOCAB])],
        initializer=b.inits)
    model = helper.make_model(graph, producer_name="collage tests/onnx/make_large.py",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="the .onnx file to write (outside the repository)")
    ap.add_argument("--external-data", action="store_true",
                    help="initializers in OUT.data beside the model instead of inside it")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true",
                    help="run onnx.checker and ONNX Runtime on a 2x8 input after writing")
    a = ap.parse_args()

    out = os.path.abspath(a.out)
    if out == REPO or out.startswith(REPO + os.sep):
        sys.exit(f"make_large.py: {out} is inside the repository; write it elsewhere")
    t = time.time()
    model = build(a.layers, a.seed)
    n_params = sum(int(np.prod(i.dims)) for i in model.graph.initializer)
    init_bytes = sum(len(i.raw_data) for i in model.graph.initializer)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if a.external_data:
        data = os.path.basename(out) + ".data"
        if os.path.exists(os.path.join(os.path.dirname(out), data)):
            os.remove(os.path.join(os.path.dirname(out), data))
        onnx.save_model(model, out, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data, size_threshold=1024)
        os.chmod(os.path.join(os.path.dirname(out), data), 0o644)
    else:
        onnx.save_model(model, out)
    size = os.path.getsize(out)
    if a.external_data:
        size += os.path.getsize(out + ".data")
    print(f"{out}: {len(model.graph.node)} nodes, {len(model.graph.initializer)} initializers, "
          f"{n_params} parameters, {init_bytes} bytes of initializers, {size} bytes on disk "
          f"({time.time() - t:.1f} s)")

    if a.check:
        onnx.checker.check_model(out, full_check=True)
        import onnxruntime as ort

        sess = ort.InferenceSession(out, providers=["CPUExecutionProvider"])
        ids = np.random.default_rng(1).integers(0, VOCAB, (2, 8), dtype=np.int64)
        (logits,) = sess.run(None, {"input_ids": ids})
        assert logits.shape == (2, 8, VOCAB) and np.isfinite(logits).all(), logits.shape
        print(f"checked: onnx.checker and ONNX Runtime, logits {logits.shape}, "
              f"std {float(logits.std()):.3g}")


if __name__ == "__main__":
    main()
