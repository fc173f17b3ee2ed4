#!/usr/bin/env python3
"""Times an ONNX file with the onnxruntime Python package, with the settings `collage bench`
gives ONNX Runtime (src/runtime/backend/ort.rs, docs/backends.md "ONNX Runtime"):

  CPU execution provider, graph optimization ORT_ENABLE_ALL, intra-op threads N, inter-op
  threads 1, sequential execution, session.intra_op.allow_spinning = 1 and
  session.inter_op.allow_spinning = 1, ONNX Runtime's default (--no-spinning turns both off).

It prints the median latency over R timed runs after W warm-up runs, and the spread: minimum,
maximum, the interquartile range and the median absolute deviation. This is the yardstick that
ONNX Runtime's latency inside `collage bench` is compared with (issue: within 5% in the same
sitting).

Inputs: `--input NAME=FILE.npy` for each input, or `--fixture DIR` (a folder of
tests/fixtures/onnx with its manifest.json and input_*.npy), or else random data drawn from a
fixed seed in the shapes the model declares, symbolic extents set with `--dim NAME=N` (default 1).

Example:
  python tests/onnx/time_ort.py tests/fixtures/onnx/resnet_tiny-opset17/model.onnx \\
      --fixture tests/fixtures/onnx/resnet_tiny-opset17 --threads 2 --runs 50
"""

import argparse
import json
import os
import statistics
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="the .onnx file")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    p.add_argument("--runs", type=int, default=20, help="timed runs R (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up runs W (default 3)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    p.add_argument("--fixture", metavar="DIR", help="a fixture folder with manifest.json")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                   help="the size of a symbolic extent for random inputs (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of random inputs (default 0)")
    p.add_argument("--no-spinning", dest="spinning", action="store_false",
                   help="keep ONNX Runtime's idle threads from spinning (spinning is its default,"
                        " and collage's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    if args.threads < 1 or args.runs < 1 or args.warmup < 0:
        p.error("--threads and --runs must be at least 1, --warmup at least 0")
    return args


def session_options(ort, threads, spinning):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    value = "1" if spinning else "0"
    so.add_session_config_entry("session.intra_op.allow_spinning", value)
    so.add_session_config_entry("session.inter_op.allow_spinning", value)
    return so


NUMPY_OF_ORT = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(int16)": "int16",
    "tensor(uint16)": "uint16", "tensor(int32)": "int32", "tensor(uint32)": "uint32",
    "tensor(int64)": "int64", "tensor(uint64)": "uint64", "tensor(bool)": "bool",
}


def inputs_for(np, sess, args):
    feeds = {}
    if args.fixture:
        with open(os.path.join(args.fixture, "manifest.json")) as f:
            manifest = json.load(f)
        for i in manifest["inputs"]:
            feeds[i["name"]] = np.load(os.path.join(args.fixture, i["file"]))
    for spec in args.input:
        name, sep, path = spec.partition("=")
        if not sep:
            sys.exit(f"time_ort.py: --input {spec!r} is not NAME=FILE.npy")
        feeds[name] = np.load(path)
    dims = {}
    for spec in args.dim:
        name, sep, n = spec.partition("=")
        if not sep or not n.isdigit():
            sys.exit(f"time_ort.py: --dim {spec!r} is not NAME=N")
        dims[name] = int(n)
    rng = np.random.default_rng(args.seed)
    for i in sess.get_inputs():
        if i.name in feeds:
            continue
        dtype = NUMPY_OF_ORT.get(i.type)
        if dtype is None:
            sys.exit(f"time_ort.py: input {i.name} of type {i.type}: give it with --input")
        shape = [d if isinstance(d, int) and d >= 0 else dims.get(d, 1) for d in i.shape]
        if dtype.startswith("float"):
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == "bool":
            feeds[i.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            # Small non-negative integers: token ids and masks stay in range.
            feeds[i.name] = rng.integers(0, 2 if "mask" in i.name else 100, shape).astype(dtype)
    known = {i.name for i in sess.get_inputs()}
    unknown = sorted(set(feeds) - known)
    if unknown:
        sys.exit(f"time_ort.py: the model has no input {', '.join(unknown)}")
    return feeds


def quantile(sorted_values, q):
    """Linear interpolation between closest ranks (NumPy's default)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def time_runs(sess, feeds, warmup, runs, min_seconds=0.0):
    """The times in ms of `runs` runs of `sess` on `feeds`, after `warmup` untimed runs, and
    of more runs until `min_seconds` of timed runs have passed."""
    for _ in range(warmup):
        sess.run(None, feeds)
    times, total = [], 0.0
    while len(times) < runs or total < 1e3 * min_seconds:
        start = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
        total += times[-1]
    return times


def main(argv):
    args = parse_args(argv)
    import numpy as np
    import onnxruntime as ort

    so = session_options(ort, args.threads, args.spinning)
    sess = ort.InferenceSession(args.model, sess_options=so, providers=["CPUExecutionProvider"])
    feeds = inputs_for(np, sess, args)
    ordered = sorted(time_runs(sess, feeds, args.warmup, args.runs))
    median = statistics.median(ordered)
    result = {
        "model": args.model,
        "onnxruntime": ort.__version__,
        "threads": args.threads,
        "spinning": args.spinning,
        "warmup": args.warmup,
        "runs": args.runs,
        "median_ms": median,
        "min_ms": ordered[0],
        "max_ms": ordered[-1],
        "q1_ms": quantile(ordered, 0.25),
        "q3_ms": quantile(ordered, 0.75),
        "mad_ms": statistics.median(abs(t - median) for t in ordered),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.model}: onnxruntime {result['onnxruntime']}, {args.threads} intra-op "
              f"thread(s), spinning {'on' if args.spinning else 'off'}, "
              f"{args.runs} runs after {args.warmup} warm-up")
        print(f"median {median:.3f} ms  (min {result['min_ms']:.3f}, "
              f"q1 {result['q1_ms']:.3f}, q3 {result['q3_ms']:.3f}, max {result['max_ms']:.3f}, "
              f"MAD {result['mad_ms']:.3f} ms, IQR {100 * (result['q3_ms'] - result['q1_ms']) / median:.1f}% "
              f"of the median)")


if __name__ == "__main__":
    main(sys.argv[1:])
