#!/usr/bin/env python3
"""Counts the floating-point work of an ONNX model's products: convolutions (by window: 1x1,
3x3, ..., and depthwise), `Gemm` and `MatMul` (by whether the right operand is a weight), as
2 x multiply-adds, from the shapes that ONNX Runtime's symbolic shape inference gives with
the symbolic extents set by `--dim NAME=N` (default 1). The other operators (elementwise,
normalisation, pooling, softmax) are not counted: on the models of docs/performance.md they
are a small part of the work.

This is the numerator of the roofline figures of docs/performance.md ("How close the products
run to the machine's peak"): a product's work divided by its time inside the model.

Example:
  python tests/onnx/flops.py gpt2.onnx --dim batch=1 --dim sequence=128
"""

import argparse
import math
import sys

import onnx
from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--dim", action="append", default=[], metavar="NAME=N")
    args = ap.parse_args()
    dims = {}
    for d in args.dim:
        name, _, value = d.partition("=")
        if not value.isdigit():
            sys.exit(f"--dim {d}: expected NAME=N")
        dims[name] = int(value)

    m = onnx.load(args.model)
    for i in m.graph.input:
        for d in i.type.tensor_type.shape.dim:
            if d.dim_param:
                d.dim_value = dims.get(d.dim_param, 1)
    m = SymbolicShapeInference.infer_shapes(m, auto_merge=True)
    shape = {}
    for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
        shape[v.name] = [d.dim_value for d in v.type.tensor_type.shape.dim]
    weights = {t.name for t in m.graph.initializer}
    for t in m.graph.initializer:
        shape[t.name] = list(t.dims)

    work = {}
    unknown = 0
    for n in m.graph.node:
        if n.op_type not in ("Conv", "Gemm", "MatMul"):
            continue
        a, b, y = (shape.get(n.input[0]), shape.get(n.input[1]), shape.get(n.output[0]))
        if not (a and b and y) or 0 in y:
            unknown += 1
            continue
        if n.op_type == "Conv":
            group = next((x.i for x in n.attribute if x.name == "group"), 1)
            window = "x".join(str(k) for k in b[2:])
            kind = "conv depthwise" if group > 1 and b[1] == 1 else f"conv {window}"
            macs = math.prod(y) * math.prod(b[1:])
        else:
            trans_a = any(x.name == "transA" and x.i for x in n.attribute)
            k = a[-2] if trans_a else a[-1]
            kind = f"{n.op_type} ({'weights' if n.input[1] in weights else 'activations'})"
            macs = math.prod(y) * k
        work[kind] = work.get(kind, 0) + 2 * macs
    total = sum(work.values())
    for kind, f in sorted(work.items(), key=lambda x: -x[1]):
        print(f"{kind:<26} {f / 1e9:8.3f} GFLOP  {100 * f / total:5.1f} %")
    print(f"{'all products':<26} {total / 1e9:8.3f} GFLOP")
    if unknown:
        print(f"({unknown} products without a known shape, not counted)")


if __name__ == "__main__":
    main()
