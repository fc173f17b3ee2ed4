#!/usr/bin/env python3
"""Export the ONNX test models of collage's ONNX front end with torch.onnx.export.

Models (all randomly initialised from a fixed seed; no pretrained weights, no download):
  vision:  torchvision ResNet-50, MobileNetV2, MobileNetV3-Small (dynamic batch axis)
  text:    transformers GPT-2 (GPT2LMHeadModel) and BERT (BertModel) built from a config
           (int64 token ids, BERT also an attention mask; dynamic batch and sequence axes)
each at opsets 13 and 17.

Default: the small versions (few layers, narrow widths) are written as fixtures to
tests/fixtures/onnx/<name>-opset<N>/: model.onnx, the inputs and ONNX Runtime's outputs as .npy
(CPU provider, all graph optimisations), and manifest.json. ONNX Runtime's outputs are checked
against PyTorch's own before anything is written.

--full DIR: the full-size models instead, written to DIR (outside the repository; they are
hundreds of megabytes), with the same files and checks.

Run with the environment of tests/onnx/setup-env.sh:
    ~/.cache/collage/onnx-venv/bin/python tests/onnx/export.py [--only NAME ...] [--full DIR]
"""

import argparse
import collections
import json
import os
import shlex
import subprocess
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
from torchvision.models import mobilenetv3  # noqa: E402
from torchvision.models.resnet import Bottleneck, ResNet  # noqa: E402
import transformers  # noqa: E402
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "onnx")
OPSETS = (13, 17)
SEED = 20240526
# The acceptance tolerance for float32 (collage against ONNX Runtime); ONNX Runtime against
# PyTorch is held to the same.
RTOL, ATOL = 1e-3, 1e-4


# --------------------------------------------------------------------------------------------
# Models


def randomise_batch_norm(model, gen, image_size):
    """Give every batch norm non-trivial affine parameters and running statistics, so that the
    folding of batch norm into convolutions (or its import) is really exercised: gamma and beta
    are drawn at random, then the running mean and variance are measured over random images
    (train mode, cumulative average), as training would leave them. The activations stay of
    order one through the whole network, as in a trained one, instead of growing layer by layer
    as they would with statistics drawn at random."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    with torch.no_grad():
        for m in bns:
            c = m.num_features
            m.weight.copy_(torch.rand(c, generator=gen) * 1.0 + 0.5)
            m.bias.copy_(torch.randn(c, generator=gen) * 0.2)
            m.reset_running_stats()
            m.momentum = None
        model.train()
        for _ in range(4):
            model(torch.randn(8, 3, image_size, image_size, generator=gen))
        for m in bns:
            m.momentum = 0.1
    model.eval()
    return model


def resnet_tiny():
    """ResNet-50's structure (torchvision's ResNet class with Bottleneck blocks: 7x7 stem, max
    pool, four stages with a strided, projected first block, global average pool, Linear) with one
    block per stage and narrow widths: stem 8 channels, stage widths 4, 8, 16, 32 (outputs 16,
    32, 64, 128), 10 classes."""
    m = ResNet(Bottleneck, [1, 1, 1, 1], num_classes=10)
    m.inplanes = 8
    m.conv1 = torch.nn.Conv2d(3, 8, kernel_size=7, stride=2, padding=3, bias=False)
    m.bn1 = torch.nn.BatchNorm2d(8)
    m.layer1 = m._make_layer(Bottleneck, 4, 1)
    m.layer2 = m._make_layer(Bottleneck, 8, 1, stride=2)
    m.layer3 = m._make_layer(Bottleneck, 16, 1, stride=2)
    m.layer4 = m._make_layer(Bottleneck, 32, 1, stride=2)
    m.fc = torch.nn.Linear(32 * Bottleneck.expansion, 10)
    return m


def mobilenet_v2_tiny():
    """MobileNetV2 with width_mult 0.25, one or two inverted residual blocks per stage (the
    second of a stage has the residual Add), last channel 256 instead of 1280, 10 classes."""
    setting = [
        # t, c, n, s
        [1, 16, 1, 1],
        [6, 24, 2, 2],
        [6, 32, 2, 2],
        [6, 64, 1, 2],
        [6, 96, 1, 1],
        [6, 160, 2, 2],
        [6, 320, 1, 1],
    ]
    m = torchvision.models.MobileNetV2(
        num_classes=10, width_mult=0.25, inverted_residual_setting=setting
    )
    last = m.features[-1]
    m.features[-1] = torchvision.ops.Conv2dNormActivation(
        last[0].in_channels, 256, kernel_size=1, norm_layer=torch.nn.BatchNorm2d,
        activation_layer=torch.nn.ReLU6)
    m.classifier[1] = torch.nn.Linear(256, 10)
    return m


def mobilenet_v3_small_tiny():
    """MobileNetV3-Small's block kinds (ReLU and Hardswish, with and without squeeze-excitation,
    3x3 and 5x5 depthwise, strided and residual) in 7 blocks at width_mult 0.5, last channel 256,
    10 classes, the classifier's Linear layers with Kaiming's initialisation."""
    w = 0.5
    conf = lambda *a: mobilenetv3.InvertedResidualConfig(*a, width_mult=w)  # noqa: E731
    setting = [
        # input, kernel, expanded, out, use_se, activation, stride, dilation
        conf(16, 3, 16, 16, True, "RE", 2, 1),
        conf(16, 3, 72, 24, False, "RE", 2, 1),
        conf(24, 3, 88, 24, False, "RE", 1, 1),
        conf(24, 5, 96, 40, True, "HS", 2, 1),
        conf(40, 5, 240, 40, True, "HS", 1, 1),
        conf(40, 5, 120, 48, True, "HS", 1, 1),
        conf(48, 5, 288, 96, True, "HS", 2, 1),
    ]
    m = mobilenetv3.MobileNetV3(setting, last_channel=256, num_classes=10)
    # torchvision draws these from N(0, 0.01), which leaves outputs near 0.01, too small for an
    # absolute tolerance of 1e-4 to test much: Kaiming's initialisation instead, and a bias.
    for layer in m.classifier:
        if isinstance(layer, torch.nn.Linear):
            torch.nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            torch.nn.init.normal_(layer.bias, std=0.1)
    return m


class GPT2Logits(torch.nn.Module):
    """GPT2LMHeadModel returning the logits alone (no key/value cache)."""

    def __init__(self, config):
        super().__init__()
        self.model = GPT2LMHeadModel(config)

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False, return_dict=False)[0]


class BertOutputs(torch.nn.Module):
    """BertModel returning (last_hidden_state, pooler_output)."""

    def __init__(self, config):
        super().__init__()
        self.model = BertModel(config)

    def forward(self, input_ids, attention_mask):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)
        return out[0], out[1]


def gpt2(full):
    if full:
        cfg = GPT2Config()  # GPT-2 small: 12 layers, 768, 12 heads, vocabulary 50257
    else:
        cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=64)
    cfg.use_cache = False
    return GPT2Logits(cfg)


def bert(full):
    if full:
        cfg = BertConfig()  # BERT-base: 12 layers, 768, 12 heads, 3072, vocabulary 30522
    else:
        cfg = BertConfig(
            num_hidden_layers=2,
            hidden_size=64,
            num_attention_heads=2,
            intermediate_size=128,
            vocab_size=256,
            max_position_embeddings=64,
        )
    return BertOutputs(cfg)


def swin_tiny():
    """torchvision's Swin Transformer, one stage of two blocks: windows of 4 on a 10 x 10 grid
    of patches, so the export computes its padding with `Mod` of the grid's size and builds the
    shifted windows' mask with `ScatterND` (both folded at import)."""
    from torchvision.models.swin_transformer import SwinTransformer
    m = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2], num_heads=[2],
                        window_size=[4, 4], num_classes=10)
    return m


class ShiftPad(torch.nn.Module):
    """MobileBERT's embedding trick: the sequence shifted by one and padded with `F.pad`, which
    PyTorch exports as a chain of `ConstantOfShape`, `Concat`, `Reshape`, `Slice`, `Transpose`
    and `Cast` that must fold into `Pad`'s constant pads."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(24, 8)

    def forward(self, x):
        left = torch.nn.functional.pad(x[:, 1:], [0, 0, 0, 1], value=0.0)
        right = torch.nn.functional.pad(x[:, :-1], [0, 0, 1, 0], value=0.0)
        return self.proj(torch.cat([left, x, right], dim=2))


class Recurrent(torch.nn.Module):
    """A sequence tagger of PyTorch's recurrent layers: a two-layer bidirectional LSTM
    (batch first), a GRU (exported with `linear_before_reset = 1`) and an RNN with ReLU, so
    the export has all three ONNX operators, with their weights and biases as initializers."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(6, 8, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = torch.nn.GRU(16, 7, batch_first=True)
        self.rnn = torch.nn.RNN(7, 5, nonlinearity="relu", batch_first=True)
        self.head = torch.nn.Linear(5, 3)

    def forward(self, x):
        y, _ = self.lstm(x)
        y, _ = self.gru(y)
        y, _ = self.rnn(y)
        return self.head(y)


def image_input(gen, batch, size):
    return {"input": torch.randn(batch, 3, size, size, generator=gen)}


def token_inputs(gen, vocab, batch, seq, mask):
    ids = torch.randint(0, vocab, (batch, seq), generator=gen, dtype=torch.int64)
    inputs = {"input_ids": ids}
    if mask:
        am = torch.ones(batch, seq, dtype=torch.int64)
        am[1:, seq - seq // 3:] = 0  # padding at the end of every row after the first
        inputs["attention_mask"] = am
    return inputs


VISION_AXES = {"input": {0: "batch"}, "output": {0: "batch"}}


def specs(full):
    """name -> dict(ctor, inputs(gen), outputs (names), axes (dynamic), batch_norm, options (of
    torch.onnx.export))."""
    bs = {0: "batch", 1: "sequence"}
    v = {}
    if full:
        size = 224
        v["resnet50"] = lambda: torchvision.models.resnet50()
        v["mobilenet_v2"] = lambda: torchvision.models.mobilenet_v2()
        v["mobilenet_v3_small"] = lambda: torchvision.models.mobilenet_v3_small()
    else:
        size = 64
        v["resnet_tiny"] = resnet_tiny
        v["mobilenet_v2_tiny"] = mobilenet_v2_tiny
        v["mobilenet_v3_small_tiny"] = mobilenet_v3_small_tiny
    batch = 1 if full else 2
    out = {}
    for name, ctor in v.items():
        out[name] = dict(ctor=ctor, inputs=lambda g: image_input(g, batch, size),
                         outputs=["output"], axes=VISION_AXES, batch_norm=True,
                         image_size=size, options={})
    if not full:
        out["swin_tiny"] = dict(ctor=swin_tiny, inputs=lambda g: image_input(g, batch, 40),
                                outputs=["output"], axes=VISION_AXES, batch_norm=False,
                                image_size=40, options={})
        out["shift_pad"] = dict(
            ctor=ShiftPad, inputs=lambda g: {"x": torch.randn(2, 7, 8, generator=g)},
            outputs=["y"], axes={"x": {0: "batch", 1: "sequence"}, "y": {0: "batch", 1: "sequence"}},
            batch_norm=False, options={})
        out["recurrent"] = dict(
            ctor=Recurrent, inputs=lambda g: {"x": torch.randn(2, 9, 6, generator=g)},
            outputs=["y"], axes={"x": {0: "batch", 1: "sequence"}, "y": {0: "batch", 1: "sequence"}},
            batch_norm=False, options={})
        # The same tiny ResNet, exported without folding batch norm into the convolutions
        # (TrainingMode.PRESERVE on a model in eval mode), as TensorFlow and Paddle exports keep
        # it: BatchNormalization nodes with running statistics.
        out["resnet_tiny_bn"] = dict(out["resnet_tiny"],
                                     options={"training": torch.onnx.TrainingMode.PRESERVE})
    gpt_vocab = 50257 if full else 256
    bert_vocab = 30522 if full else 256
    seq = 16 if full else 8
    out["gpt2" if full else "gpt2_tiny"] = dict(
        ctor=lambda: gpt2(full),
        inputs=lambda g: token_inputs(g, gpt_vocab, 2, seq, mask=False),
        outputs=["logits"], axes={"input_ids": bs, "logits": bs}, batch_norm=False, options={})
    out["bert" if full else "bert_tiny"] = dict(
        ctor=lambda: bert(full),
        inputs=lambda g: token_inputs(g, bert_vocab, 2, seq, mask=True),
        outputs=["last_hidden_state", "pooler_output"],
        axes={"input_ids": bs, "attention_mask": bs, "last_hidden_state": bs,
              "pooler_output": {0: "batch"}},
        batch_norm=False, options={})
    return out


# --------------------------------------------------------------------------------------------
# Export and check


def debian_version(package):
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], check=True,
                              capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def versions():
    return {
        "torch": torch.__version__,
        "torch_debian": debian_version("python3-torch"),
        "torchvision": torchvision.__version__,
        "torchvision_debian": debian_version("python3-torchvision"),
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": ort.__version__,
        "numpy": np.__version__,
    }


def value_info_json(vi):
    t = vi.type.tensor_type
    dims = [d.dim_param if d.HasField("dim_param") else d.dim_value for d in t.shape.dim]
    return {"name": vi.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name,
            "dims": dims}


def ort_session(path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def export_one(name, spec, opset, out_dir, command):
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = spec["ctor"]()
    if spec["batch_norm"]:
        randomise_batch_norm(model, gen, spec["image_size"])
    model.eval()
    inputs = spec["inputs"](gen)
    input_names = list(inputs)
    args = tuple(inputs[k] for k in input_names)

    with torch.no_grad():
        expected = model(*args)
    if isinstance(expected, torch.Tensor):
        expected = (expected,)
    expected = [e.numpy() for e in expected]

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "model.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, path, input_names=input_names,
                          output_names=spec["outputs"], dynamic_axes=spec["axes"],
                          opset_version=opset, do_constant_folding=True, **spec["options"])

    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)

    sess = ort_session(path)
    feeds = {k: v.numpy() for k, v in inputs.items()}
    got = sess.run(spec["outputs"], feeds)
    for out_name, g, e in zip(spec["outputs"], got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, (name, out_name, g.shape, e.shape)
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL,
                                   err_msg=f"{name} opset {opset}: ONNX Runtime vs PyTorch, {out_name}")
    diff = max(float(np.max(np.abs(g - e))) for g, e in zip(got, expected))

    # Also once with a different batch (and sequence) to check the dynamic axes really are.
    alt = {}
    for k, v in feeds.items():
        a = v[:1]
        if v.ndim == 2:
            a = a[:, : max(1, v.shape[1] - 3)]
        alt[k] = a
    with torch.no_grad():
        alt_expected = model(*(torch.from_numpy(alt[k]) for k in input_names))
    if isinstance(alt_expected, torch.Tensor):
        alt_expected = (alt_expected,)
    for g, e in zip(sess.run(spec["outputs"], alt), alt_expected):
        np.testing.assert_allclose(g, e.numpy(), rtol=RTOL, atol=ATOL,
                                   err_msg=f"{name} opset {opset}: other batch/sequence")

    files_in, files_out = [], []
    for k, v in feeds.items():
        f = f"input_{k}.npy"
        np.save(os.path.join(out_dir, f), v)
        files_in.append({**value_info_json(next(i for i in m.graph.input if i.name == k)),
                         "file": f, "shape": list(v.shape)})
    for k, v in zip(spec["outputs"], got):
        f = f"output_{k}.npy"
        np.save(os.path.join(out_dir, f), v)
        files_out.append({**value_info_json(next(o for o in m.graph.output if o.name == k)),
                          "file": f, "shape": list(v.shape)})

    ops = collections.Counter(n.op_type for n in m.graph.node)
    manifest = {
        "name": name,
        "file": "model.onnx",
        "opset": opset,
        "ir_version": m.ir_version,
        "producer": f"{m.producer_name} {m.producer_version}",
        "inputs": files_in,
        "outputs": files_out,
        "tolerance": {"rtol": RTOL, "atol": ATOL},
        "max_abs_diff_onnxruntime_vs_torch": diff,
        "onnxruntime": {"providers": ["CPUExecutionProvider"],
                        "graph_optimization_level": "ORT_ENABLE_ALL"},
        "weights": "random (fixed seed), no pretrained weights",
        "seed": SEED,
        "initializers": len(m.graph.initializer),
        "parameters": int(sum(np.prod(t.dims) for t in m.graph.initializer)),
        "op_types": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "versions": versions(),
        "command": command,
    }
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    size = os.path.getsize(path)
    print(f"{name} opset {opset}: {size} bytes, {len(m.graph.node)} nodes, "
          f"max |ORT - torch| {diff:.3g}")
    print(f"  ops: {dict(manifest['op_types'])}")
    return manifest


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", metavar="DIR",
                    help="export the full-size models to DIR (outside the repository)")
    ap.add_argument("--only", nargs="*", help="export only these models (names as in the folders)")
    ap.add_argument("--opsets", nargs="*", type=int, default=list(OPSETS))
    ap.add_argument("--out", default=FIXTURES, help="folder of the small fixtures")
    a = ap.parse_args()

    if a.full:
        root = os.path.abspath(a.full)
        if root == REPO or root.startswith(REPO + os.sep):
            sys.exit(f"export.py: {root} is inside the repository; the full-size models stay out of it")
    else:
        root = a.out
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    command = "HF_HUB_OFFLINE=1 python tests/onnx/export.py" + (
        " " + " ".join(shlex.quote(x) for x in sys.argv[1:]) if sys.argv[1:] else "")
    summary = {}
    for name, spec in specs(bool(a.full)).items():
        if a.only and name not in a.only:
            continue
        for opset in a.opsets:
            folder = f"{name}-opset{opset}"
            mf = export_one(folder, spec, opset, os.path.join(root, folder), command)
            summary[folder] = {"bytes": os.path.getsize(os.path.join(root, folder, "model.onnx")),
                               "op_types": mf["op_types"]}
    # Sizes and operator counts of everything exported so far (README.md's tables).
    summary_path = os.path.join(root, "summary.json")
    if os.path.exists(summary_path):
        with open(summary_path) as f:
            summary = {**json.load(f), **summary}
    summary = dict(sorted(summary.items()))
    with open(summary_path, "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
