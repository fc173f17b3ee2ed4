#!/usr/bin/env python3
"""Small ONNX fixtures for the ways an ONNX file can hold its weights, built with the onnx
helper API (no PyTorch), checked with onnx.checker and run by ONNX Runtime:

tests/fixtures/onnx/external/tiny_mlp/
    initializers in side files (external data: location, offset, length set): most in
    weights.bin at 64-byte-aligned offsets with gaps between them, one in data/more.bin (a
    subfolder), fc1.bias and the int64 Reshape shape kept inline in raw_data (onnx's shape
    inference and ONNX Runtime do not read a shape from external data).
tests/fixtures/onnx/external/bad_*/
    the same model with one tensor's external data made wrong, for the importer's refusals:
    an absolute location, a location leaving the model's folder (../tiny_mlp/weights.bin, a
    real file), a symbolic link leading out of the folder, an offset past the end of the file,
    a length past the end of the file, a length that disagrees with the tensor's shape. Each
    manifest.json says which tensor and what is wrong. (A link to /etc/passwd is left to the
    tests to make; the committed one leads to ../tiny_mlp/weights.bin.)
tests/fixtures/onnx/paddle_constants-opset13/
    every weight a Constant node, as Paddle exports keep them, through each value_* attribute:
    value (raw_data and typed float_data / int64_data), value_float, value_floats, value_int,
    value_ints; HardSigmoid; an input whose batch axis has no name or size and whose two spatial
    axes share one symbol (run here at 16x24).
tests/fixtures/onnx/ir3_initializer_inputs-opset7/
    IR version 3, opset 7: the initializers are also listed as graph inputs (with their types);
    Gemm, Relu, BatchNormalization-7, Softmax-1 (2-D coercion), Unsqueeze-1 (axes attribute).
tests/fixtures/onnx/ocr_like-opset14/
    a PaddleOCR-style detector head: ConvTranspose, Resize (nearest and linear), HardSigmoid,
    HardSwish, a depthwise convolution and squeeze-excitation.
tests/fixtures/onnx/rnn_options-opset14/
    the recurrent operators' options that PyTorch does not export: a run-time sequence_lens
    input, reverse and bidirectional directions, LSTM peepholes and clip, GRU with
    and without linear_before_reset, initial states, and named activations with parameters.

Usage: ~/.cache/collage/onnx-venv/bin/python tests/onnx/make_weights.py [--out tests/fixtures/onnx]
"""

import argparse
import json
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEED = 20240526
ALIGN = 64


def ort_run(path, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return names, sess.run(names, feeds)


def dims_json(vi):
    out = []
    for d in vi.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            out.append(d.dim_value)
        elif d.HasField("dim_param"):
            out.append(d.dim_param)
        else:
            out.append(None)
    return out


def write_case(folder, model, feeds, expected, notes, command):
    """Check, run with ONNX Runtime, compare with the numpy reference, write inputs, outputs
    and manifest.json. The model is already saved as folder/model.onnx."""
    path = os.path.join(folder, "model.onnx")
    # The file as it is (external data references checked), then with its external data loaded
    # (onnx's shape inference does not read external tensors, such as a Reshape's shape).
    onnx.checker.check_model(path)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    names, got = ort_run(path, feeds)
    for n, g, e in zip(names, got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6, err_msg=f"{folder}: {n}")
    ins, outs = [], []
    for k, v in feeds.items():
        np.save(os.path.join(folder, f"input_{k}.npy"), v)
        vi = next(i for i in model.graph.input if i.name == k)
        ins.append({"name": k, "dtype": v.dtype.name, "dims": dims_json(vi),
                    "file": f"input_{k}.npy", "shape": list(v.shape)})
    for n, g in zip(names, got):
        np.save(os.path.join(folder, f"output_{n}.npy"), g)
        vi = next(o for o in model.graph.output if o.name == n)
        outs.append({"name": n, "dtype": g.dtype.name, "dims": dims_json(vi),
                     "file": f"output_{n}.npy", "shape": list(g.shape)})
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    manifest = {
        "name": os.path.basename(folder),
        "file": "model.onnx",
        "opset": opset,
        "ir_version": model.ir_version,
        "inputs": ins,
        "outputs": outs,
        "tolerance": {"rtol": 1e-3, "atol": 1e-4},
        "onnxruntime": {"providers": ["CPUExecutionProvider"],
                        "graph_optimization_level": "ORT_ENABLE_ALL"},
        "weights": "random (fixed seed)",
        "seed": SEED,
        "notes": notes,
        "op_types": sorted({n.op_type for n in model.graph.node}),
        "versions": {"onnx": onnx.__version__, "onnxruntime": ort.__version__,
                     "numpy": np.__version__},
        "command": command,
    }
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"{folder}: {sorted(os.listdir(folder))}")


def fresh(folder):
    if os.path.lexists(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)


# --------------------------------------------------------------------------------------------
# External data


def set_external(tensor, location, offset, length):
    """Move a tensor's bytes out: data_location EXTERNAL with location, offset and length."""
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = tensor.external_data.add()
        e.key, e.value = k, v


def tiny_mlp(rng):
    """x [batch, 4] -> MatMul 4x8 + b -> Relu -> MatMul 8x6 + b -> Reshape [batch, 2, 3]
    (shape [-1, 2, 3] an int64 initializer) -> output."""
    w = {
        "fc1.weight": rng.standard_normal((4, 8)).astype(np.float32),
        "fc1.bias": rng.standard_normal(8).astype(np.float32),
        "fc2.weight": rng.standard_normal((8, 6)).astype(np.float32),
        "fc2.bias": rng.standard_normal(6).astype(np.float32),
        "reshape.shape": np.array([-1, 2, 3], np.int64),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "fc1.weight"], ["h1"], name="fc1/MatMul"),
        helper.make_node("Add", ["h1", "fc1.bias"], ["h2"], name="fc1/Add"),
        helper.make_node("Relu", ["h2"], ["h3"], name="Relu"),
        helper.make_node("MatMul", ["h3", "fc2.weight"], ["h4"], name="fc2/MatMul"),
        helper.make_node("Add", ["h4", "fc2.bias"], ["h5"], name="fc2/Add"),
        helper.make_node("Reshape", ["h5", "reshape.shape"], ["y"], name="Reshape"),
    ]
    graph = helper.make_graph(
        nodes, "tiny_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, 3])],
        initializer=[numpy_helper.from_array(v, k) for k, v in w.items()])
    model = helper.make_model(graph, producer_name="collage tests/onnx/make_weights.py",
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8

    def reference(x):
        h = np.maximum(x @ w["fc1.weight"] + w["fc1.bias"], 0)
        return (h @ w["fc2.weight"] + w["fc2.bias"]).reshape(-1, 2, 3)

    return model, w, reference


def externalise(model, w):
    """weights.bin: fc1.weight, fc2.weight at 64-byte-aligned offsets (the first at 64, gaps of
    zeros between); data/more.bin: fc2.bias at offset 0 without a length (to the end of the
    file); fc1.bias and reshape.shape stay inline. Returns {name: (location, offset, length)} and the
    files' bytes."""
    files = {"weights.bin": bytearray(), "data/more.bin": bytearray()}
    placed = {}
    for name, loc in (("fc1.weight", "weights.bin"), ("fc2.weight", "weights.bin"),
                      ("fc2.bias", "data/more.bin")):
        buf = files[loc]
        raw = w[name].tobytes()
        offset = 0 if loc == "data/more.bin" else (len(buf) // ALIGN + 1) * ALIGN
        buf.extend(b"\0" * (offset - len(buf)))
        buf.extend(raw)
        placed[name] = (loc, offset, len(raw))
    for t in model.graph.initializer:
        if t.name in placed:
            loc, offset, length = placed[t.name]
            set_external(t, loc, offset, length)
            if t.name == "fc2.bias":  # length is optional: the rest of the file
                del t.external_data[2]
    return placed, files


def save_with_files(folder, model, files):
    fresh(folder)
    for loc, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(folder, loc)), exist_ok=True)
        with open(os.path.join(folder, loc), "wb") as f:
            f.write(bytes(data))
    onnx.save_model(model, os.path.join(folder, "model.onnx"))


def external_cases(root, rng, command):
    ext = os.path.join(root, "external")
    os.makedirs(ext, exist_ok=True)
    model, w, reference = tiny_mlp(rng)
    placed, files = externalise(model, w)
    good = os.path.join(ext, "tiny_mlp")
    save_with_files(good, model, files)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    write_case(good, model, {"x": x}, [reference(x)], {
        "external_data": {k: {"location": l, "offset": o, "length": n if k != "fc2.bias" else None}
                          for k, (l, o, n) in placed.items()},
        "inline": ["fc1.bias", "reshape.shape"],
        "about": "initializers in weights.bin (aligned offsets, gaps) and data/more.bin "
                 "(no length: to the end of the file); fc1.bias and reshape.shape inline",
    }, command)

    size = len(files["weights.bin"])
    _, fc2_off, fc2_len = placed["fc2.weight"]
    bad = {
        "bad_absolute": ("fc2.weight", {"location": "/etc/passwd"}, "absolute location"),
        "bad_parent": ("fc2.weight", {"location": "../tiny_mlp/weights.bin"},
                       "location leaves the model's folder (to a real file with the right bytes)"),
        "bad_symlink": ("fc2.weight", {"location": "link.bin"},
                        "location is a symbolic link leading out of the model's folder "
                        "(link.bin -> ../tiny_mlp/weights.bin)"),
        "bad_offset": ("fc2.weight", {"offset": str(size + 64)},
                       f"offset {size + 64} past the end of weights.bin ({size} bytes)"),
        "bad_length": ("fc2.weight", {"length": str(size - fc2_off + 4)},
                       f"offset {fc2_off} + length {size - fc2_off + 4} past the end of "
                       f"weights.bin ({size} bytes)"),
        "bad_shape_length": ("fc2.weight", {"length": str(fc2_len - 4)},
                             f"length {fc2_len - 4} disagrees with the shape 8x6 float32 "
                             f"({fc2_len} bytes)"),
    }
    for case, (tensor, changes, what) in bad.items():
        m = onnx.ModelProto()
        m.CopyFrom(model)
        t = next(i for i in m.graph.initializer if i.name == tensor)
        for e in t.external_data:
            if e.key in changes:
                e.value = changes[e.key]
        folder = os.path.join(ext, case)
        save_with_files(folder, m, files)
        if case == "bad_symlink":
            os.symlink("../tiny_mlp/weights.bin", os.path.join(folder, "link.bin"))
        # What onnx's checker, then ONNX Runtime, make of it (recorded; the checker refuses all six).
        try:
            onnx.checker.check_model(os.path.join(folder, "model.onnx"), full_check=True)
            ort_run(os.path.join(folder, "model.onnx"), {"x": x})
            accepted = True
        except Exception:  # noqa: BLE001 - any refusal will do
            accepted = False
        manifest = {"name": case, "file": "model.onnx", "expect": "refused", "tensor": tensor,
                    "what": what,
                    "external_data": {e.key: e.value for e in t.external_data},
                    "onnx_checker_or_onnxruntime_refuses": not accepted, "command": command}
        with open(os.path.join(folder, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
        print(f"{folder}: {what}; onnx/onnxruntime {'ACCEPT' if accepted else 'refuse'} it")


# --------------------------------------------------------------------------------------------
# Paddle style: every weight a Constant node


def paddle_constants(root, rng, command):
    """x [?, 3, s, s] (batch with neither size nor name, both spatial axes the one symbol) ->
    Conv 3->8 3x3 (weight a Constant value with raw_data; bias value_floats) -> Mul by a
    Constant value_float -> x * HardSigmoid(x) -> GlobalAveragePool -> Reshape (shape
    value_ints) -> MatMul 8x5 (value with typed float_data, not raw) -> Add (value_floats) ->
    Softmax = probs. Also top_prob: ArgMax, Reshape (shape a value with int64_data),
    GatherElements; and first: Gather of class 0 (index a value_int)."""
    wconv = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    bconv = (rng.standard_normal(8) * 0.1).astype(np.float32)
    wfc = (rng.standard_normal((8, 5)) * 0.5).astype(np.float32)
    bfc = (rng.standard_normal(5) * 0.1).astype(np.float32)
    scale = np.float32(1.5)
    # onnx's helper makes raw_data by default; make_tensor(raw=False) keeps float_data.
    t_wconv = numpy_helper.from_array(wconv, "conv_w")
    t_wfc = helper.make_tensor("fc_w", TensorProto.FLOAT, wfc.shape, wfc.flatten().tolist())
    t_idx_shape = helper.make_tensor("idx_shape", TensorProto.INT64, [2], [-1, 1])
    C = helper.make_node
    nodes = [
        C("Constant", [], ["conv_w"], name="p2o.Constant.0", value=t_wconv),
        C("Constant", [], ["conv_b"], name="p2o.Constant.1", value_floats=bconv.tolist()),
        C("Conv", ["x", "conv_w", "conv_b"], ["c1"], name="p2o.Conv.0", pads=[1, 1, 1, 1],
          kernel_shape=[3, 3]),
        C("Constant", [], ["scale"], name="p2o.Constant.2", value_float=float(scale)),
        C("Mul", ["c1", "scale"], ["c2"], name="p2o.Mul.0"),
        C("HardSigmoid", ["c2"], ["c3"], name="p2o.HardSigmoid.0", alpha=0.2, beta=0.5),
        C("Mul", ["c2", "c3"], ["c4"], name="p2o.Mul.1"),
        C("GlobalAveragePool", ["c4"], ["c5"], name="p2o.GlobalAveragePool.0"),
        C("Constant", [], ["flat_shape"], name="p2o.Constant.3", value_ints=[-1, 8]),
        C("Reshape", ["c5", "flat_shape"], ["c6"], name="p2o.Reshape.0"),
        C("Constant", [], ["fc_w"], name="p2o.Constant.4", value=t_wfc),
        C("MatMul", ["c6", "fc_w"], ["c7"], name="p2o.MatMul.0"),
        C("Constant", [], ["fc_b"], name="p2o.Constant.5", value_floats=bfc.tolist()),
        C("Add", ["c7", "fc_b"], ["c8"], name="p2o.Add.0"),
        C("Softmax", ["c8"], ["probs"], name="p2o.Softmax.0", axis=1),
        C("ArgMax", ["probs"], ["top"], name="p2o.ArgMax.0", axis=1, keepdims=1),
        C("Constant", [], ["idx_shape"], name="p2o.Constant.6", value=t_idx_shape),
        C("Reshape", ["top", "idx_shape"], ["top2"], name="p2o.Reshape.1"),
        C("GatherElements", ["probs", "top2"], ["top_prob"], name="p2o.GatherElements.0",
          axis=1),
        C("Constant", [], ["k"], name="p2o.Constant.7", value_int=0),
        C("Gather", ["probs", "k"], ["first"], name="p2o.Gather.0", axis=1),
    ]
    x_type = helper.make_tensor_type_proto(TensorProto.FLOAT, [None, 3, "p2o.DynamicDimension.0",
                                                               "p2o.DynamicDimension.0"])
    graph = helper.make_graph(
        nodes, "paddle_constants",
        [helper.make_value_info("x", x_type)],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [None, 5]),
         helper.make_tensor_value_info("top_prob", TensorProto.FLOAT, [None, 1]),
         helper.make_tensor_value_info("first", TensorProto.FLOAT, [None])])
    model = helper.make_model(graph, producer_name="collage tests/onnx/make_weights.py "
                              "(Paddle style)", opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    assert not model.graph.initializer
    folder = os.path.join(root, "paddle_constants-opset13")
    fresh(folder)
    onnx.save_model(model, os.path.join(folder, "model.onnx"))

    x = rng.standard_normal((2, 3, 16, 24)).astype(np.float32)
    # numpy reference
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    c1 = np.zeros((2, 8, 16, 24), np.float32)
    for i in range(3):
        for j in range(3):
            c1 += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 16, j:j + 24], wconv[:, :, i, j])
    c1 += bconv[None, :, None, None]
    c2 = c1 * scale
    c4 = c2 * np.clip(0.2 * c2 + 0.5, 0, 1)
    c6 = c4.mean(axis=(2, 3))
    c8 = c6 @ wfc + bfc
    e = np.exp(c8 - c8.max(axis=1, keepdims=True))
    probs = e / e.sum(axis=1, keepdims=True)
    top_prob = probs.max(axis=1, keepdims=True)
    write_case(folder, model, {"x": x}, [probs, top_prob, probs[:, 0]], {
        "about": "no initializers: every weight is a Constant node",
        "constant_attributes": ["value (raw_data)", "value (float_data)", "value (int64_data)",
                                "value_float", "value_floats", "value_int", "value_ints"],
        "input_dims": "batch has neither size nor name; height and width share the symbol "
                      "p2o.DynamicDimension.0 and are run at 16 and 24",
    }, command)


# --------------------------------------------------------------------------------------------
# IR version 3: initializers also graph inputs


def ir3(root, rng, command):
    w1 = (rng.standard_normal((8, 4)) * 0.5).astype(np.float32)
    b1 = (rng.standard_normal(8) * 0.1).astype(np.float32)
    gamma = (rng.random(8) + 0.5).astype(np.float32)
    beta = (rng.standard_normal(8) * 0.2).astype(np.float32)
    mean = (rng.standard_normal(8) * 0.3).astype(np.float32)
    var = (rng.random(8) + 0.5).astype(np.float32)
    w2 = (rng.standard_normal((3, 8)) * 0.5).astype(np.float32)
    b2 = (rng.standard_normal(3) * 0.1).astype(np.float32)
    inits = {"fc1.weight": w1, "fc1.bias": b1, "bn.scale": gamma, "bn.bias": beta,
             "bn.mean": mean, "bn.var": var, "fc2.weight": w2, "fc2.bias": b2}
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h1"], name="fc1",
                         transB=1),
        helper.make_node("BatchNormalization",
                         ["h1", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["h2"], name="bn",
                         epsilon=1e-5),
        helper.make_node("Relu", ["h2"], ["h3"], name="relu"),
        helper.make_node("Gemm", ["h3", "fc2.weight", "fc2.bias"], ["h4"], name="fc2",
                         transB=1),
        helper.make_node("Softmax", ["h4"], ["h5"], name="softmax", axis=1),
        helper.make_node("Unsqueeze", ["h5"], ["y"], name="unsqueeze", axes=[1]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])] + [
        helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
        for k, v in inits.items()]
    graph = helper.make_graph(
        nodes, "ir3_initializer_inputs", inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, 3])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, producer_name="collage tests/onnx/make_weights.py (IR 3)",
                              opset_imports=[helper.make_opsetid("", 7)])
    model.ir_version = 3
    folder = os.path.join(root, "ir3_initializer_inputs-opset7")
    fresh(folder)
    onnx.save_model(model, os.path.join(folder, "model.onnx"))

    x = rng.standard_normal((3, 4)).astype(np.float32)
    h = x @ w1.T + b1
    h = (h - mean) / np.sqrt(var + 1e-5) * gamma + beta
    h = np.maximum(h, 0) @ w2.T + b2
    e = np.exp(h - h.max(axis=1, keepdims=True))
    y = (e / e.sum(axis=1, keepdims=True))[:, None, :]
    write_case(folder, model, {"x": x}, [y], {
        "about": "IR version 3: every initializer is also a graph input (its default value); "
                 "the inputs to feed are those without an initializer (x)",
        "initializers_as_inputs": list(inits),
    }, command)


# --------------------------------------------------------------------------------------------
# A PaddleOCR-style text detector head: transposed convolutions, Resize, HardSigmoid, HardSwish


def ocr_like(root, rng, command):
    """x [?, 3, h, w] -> Conv 3->8 stride 2 + BatchNormalization + HardSwish -> depthwise Conv
    3x3 -> squeeze-excitation (GlobalAveragePool, 1x1 Convs, Relu, HardSigmoid, Mul) -> two
    upsampling branches, Resize nearest (asymmetric, floor, as Paddle exports it) and Resize
    linear (half_pixel), concatenated -> Conv 16->4 -> Relu -> ConvTranspose 4->4 k2 s2 + Relu
    -> ConvTranspose 4->1 k2 s2 (output_padding 0, pads 0) -> Sigmoid. Opset 14 (HardSwish).
    The reference is ONNX Runtime's output (no numpy reference)."""
    def w(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    inits = {
        "c1.w": w(8, 3, 3, 3), "c1.b": w(8, scale=0.1),
        "bn.s": (rng.random(8) + 0.5).astype(np.float32), "bn.b": w(8, scale=0.2),
        "bn.m": w(8, scale=0.2), "bn.v": (rng.random(8) + 0.5).astype(np.float32),
        "dw.w": w(8, 1, 3, 3), "dw.b": w(8, scale=0.1),
        "se1.w": w(4, 8, 1, 1), "se1.b": w(4, scale=0.1),
        "se2.w": w(8, 4, 1, 1), "se2.b": w(8, scale=0.1),
        "c2.w": w(4, 16, 3, 3, scale=0.2), "c2.b": w(4, scale=0.1),
        "t1.w": w(4, 4, 2, 2), "t1.b": w(4, scale=0.1),
        "t2.w": w(4, 1, 2, 2), "t2.b": w(1, scale=0.1),
        "scales": np.array([1, 1, 2, 2], np.float32),
    }
    C = helper.make_node
    nodes = [
        C("Conv", ["x", "c1.w", "c1.b"], ["a1"], name="conv1", strides=[2, 2], pads=[1, 1, 1, 1]),
        C("BatchNormalization", ["a1", "bn.s", "bn.b", "bn.m", "bn.v"], ["a2"], name="bn1"),
        C("HardSwish", ["a2"], ["a3"], name="hswish1"),
        C("Conv", ["a3", "dw.w", "dw.b"], ["a4"], name="dwconv", group=8, pads=[1, 1, 1, 1]),
        C("GlobalAveragePool", ["a4"], ["s1"], name="se_pool"),
        C("Conv", ["s1", "se1.w", "se1.b"], ["s2"], name="se_conv1"),
        C("Relu", ["s2"], ["s3"], name="se_relu"),
        C("Conv", ["s3", "se2.w", "se2.b"], ["s4"], name="se_conv2"),
        C("HardSigmoid", ["s4"], ["s5"], name="se_hsigmoid", alpha=0.2, beta=0.5),
        C("Mul", ["a4", "s5"], ["a5"], name="se_mul"),
        C("Resize", ["a5", "", "scales"], ["u1"], name="up_nearest", mode="nearest",
          coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        C("Resize", ["a5", "", "scales"], ["u2"], name="up_linear", mode="linear",
          coordinate_transformation_mode="half_pixel"),
        C("Concat", ["u1", "u2"], ["u3"], name="concat", axis=1),
        C("Conv", ["u3", "c2.w", "c2.b"], ["b1"], name="conv2", pads=[1, 1, 1, 1]),
        C("Relu", ["b1"], ["b2"], name="relu2"),
        C("ConvTranspose", ["b2", "t1.w", "t1.b"], ["b3"], name="deconv1", strides=[2, 2],
          kernel_shape=[2, 2]),
        C("Relu", ["b3"], ["b4"], name="relu3"),
        C("ConvTranspose", ["b4", "t2.w", "t2.b"], ["b5"], name="deconv2", strides=[2, 2],
          kernel_shape=[2, 2]),
        C("Sigmoid", ["b5"], ["maps"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes, "ocr_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, "h", "w"])],
        [helper.make_tensor_value_info("maps", TensorProto.FLOAT, [None, 1, "H", "W"])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, producer_name="collage tests/onnx/make_weights.py "
                              "(PaddleOCR style)", opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 7
    folder = os.path.join(root, "ocr_like-opset14")
    fresh(folder)
    onnx.save_model(model, os.path.join(folder, "model.onnx"))
    x = rng.standard_normal((1, 3, 32, 48)).astype(np.float32)
    write_case(folder, model, {"x": x}, [], {
        "about": "a PaddleOCR-style detector head; the reference is ONNX Runtime's output",
        "input_dims": "batch has neither size nor name; run at 1x3x32x48",
    }, command)


def rnn_options(root, rng, command):
    """x [batch, steps, 4] and lens [batch] (int32, run time) -> Transpose to steps first ->
    GRU reverse with linear_before_reset and initial_h -> Reshape -> LSTM bidirectional with
    peepholes, clip 1.5 and initial_h/initial_c -> its Y, Y_h and Y_c; beside it a GRU without
    linear_before_reset (Y_h only) and an RNN with LeakyRelu (alpha 0.2) and no sequence_lens.
    Layout 0 throughout (ONNX Runtime refuses layout 1; the onnx node tests cover it). The
    reference is ONNX Runtime's output."""
    def w(*shape, scale=0.4):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    B, T, I, G, H = 3, 5, 4, 6, 5
    inits = {
        "g.W": w(1, 3 * G, I), "g.R": w(1, 3 * G, G), "g.B": w(1, 6 * G, scale=0.2),
        "g.h0": w(1, B, G, scale=0.5),
        "shape": np.array([T, B, G], np.int64),
        "l.W": w(2, 4 * H, G), "l.R": w(2, 4 * H, H), "l.B": w(2, 8 * H, scale=0.2),
        "l.h0": w(2, B, H, scale=0.5), "l.c0": w(2, B, H, scale=0.5), "l.P": w(2, 3 * H),
        "g2.W": w(1, 3 * H, I), "g2.R": w(1, 3 * H, H), "g2.B": w(1, 6 * H, scale=0.2),
        "r.W": w(1, H, I), "r.R": w(1, H, H), "r.B": w(1, 2 * H, scale=0.2),
    }
    C = helper.make_node
    nodes = [
        C("Transpose", ["x"], ["x_t"], name="to_steps_first", perm=[1, 0, 2]),
        C("GRU", ["x_t", "g.W", "g.R", "g.B", "lens", "g.h0"], ["g_y"], name="gru_reverse",
          hidden_size=G, direction="reverse", linear_before_reset=1),
        C("Reshape", ["g_y", "shape"], ["g_flat"], name="reshape"),
        C("LSTM", ["g_flat", "l.W", "l.R", "l.B", "lens", "l.h0", "l.c0", "l.P"],
          ["lstm_y", "lstm_h", "lstm_c"], name="lstm_bidirectional", hidden_size=H,
          direction="bidirectional", clip=1.5),
        C("GRU", ["x_t", "g2.W", "g2.R", "g2.B", "lens"], ["", "gru2_h"], name="gru_plain",
          hidden_size=H),
        C("RNN", ["x_t", "r.W", "r.R", "r.B"], ["rnn_y"], name="rnn_leaky",
          hidden_size=H, activations=["LeakyRelu"], activation_alpha=[0.2]),
    ]
    graph = helper.make_graph(
        nodes, "rnn_options",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, T, I]),
         helper.make_tensor_value_info("lens", TensorProto.INT32, [B])],
        [helper.make_tensor_value_info("lstm_y", TensorProto.FLOAT, [T, 2, B, H]),
         helper.make_tensor_value_info("lstm_h", TensorProto.FLOAT, [2, B, H]),
         helper.make_tensor_value_info("lstm_c", TensorProto.FLOAT, [2, B, H]),
         helper.make_tensor_value_info("gru2_h", TensorProto.FLOAT, [1, B, H]),
         helper.make_tensor_value_info("rnn_y", TensorProto.FLOAT, [T, 1, B, H])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, producer_name="collage tests/onnx/make_weights.py "
                              "(recurrent options)", opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 7
    folder = os.path.join(root, "rnn_options-opset14")
    fresh(folder)
    onnx.save_model(model, os.path.join(folder, "model.onnx"))
    x = rng.standard_normal((B, T, I)).astype(np.float32)
    lens = np.array([5, 3, 1], np.int32)
    write_case(folder, model, {"x": x, "lens": lens}, [], {
        "about": "recurrent options PyTorch does not export; the reference is ONNX Runtime's "
                 "output",
    }, command)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "onnx"))
    a = ap.parse_args()
    command = "python tests/onnx/make_weights.py"
    rng = np.random.default_rng(SEED)
    external_cases(a.out, rng, command)
    paddle_constants(a.out, rng, command)
    ir3(a.out, rng, command)
    ocr_like(a.out, rng, command)
    rnn_options(a.out, rng, command)


if __name__ == "__main__":
    main()
