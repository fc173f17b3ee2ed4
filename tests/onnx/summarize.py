#!/usr/bin/env python3
"""Print the op-type tables of tests/onnx/README.md from the summary.json that export.py writes
beside its models (tests/fixtures/onnx/summary.json, or DIR/summary.json after --full DIR).

Usage: python tests/onnx/summarize.py SUMMARY.json [--sizes]
"""

import json
import sys


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    sizes = "--sizes" in sys.argv
    with open(args[0]) as f:
        summary = json.load(f)
    models = sorted({k.rsplit("-opset", 1)[0] for k in summary})
    opsets = sorted({int(k.rsplit("-opset", 1)[1]) for k in summary})
    for name in models:
        runs = {o: summary.get(f"{name}-opset{o}") for o in opsets}
        ops = sorted({op for r in runs.values() if r for op in r["op_types"]})
        head = " | ".join(f"opset {o}" for o in opsets)
        print(f"**{name}**" + ("  (" + ", ".join(
            f"opset {o}: {r['bytes']:,} bytes" for o, r in runs.items() if r) + ")"
            if sizes else ""))
        print()
        print(f"| op type | {head} |")
        print("| --- |" + " --- |" * len(opsets))
        for op in ops:
            cells = " | ".join(str(r["op_types"].get(op, "")) if r else "-" for r in runs.values())
            print(f"| {op} | {cells} |")
        total = " | ".join(str(sum(r["op_types"].values())) if r else "-" for r in runs.values())
        print(f"| *nodes* | {total} |")
        print()
    for o in opsets:
        ops = sorted({op for k, r in summary.items() if k.endswith(f"-opset{o}")
                      for op in r["op_types"]})
        print(f"All op types at opset {o} ({len(ops)}): {', '.join(ops)}")
        print()


if __name__ == "__main__":
    main()
