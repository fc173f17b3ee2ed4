#!/usr/bin/env python3
"""Compares ONNX Runtime's latency inside `collage bench` with the same file timed by the
`onnxruntime` Python package, in the same sitting (issue: within 5%).

It runs `collage bench MODEL --onnxruntime always --format json` with the given threads and
dims (and any further bench arguments after `--`), and times the file with `time_ort.py`'s
settings (the ones bench gives ONNX Runtime) in the same session, half of the runs right before
the bench and half right after, so that a drift of the machine's load during the bench weighs
on both sides alike; it prints both medians and their ratio. `--rounds K` repeats the pair K times and reports every pair, so a
change of the machine's load shows as a change between pairs rather than as a verdict.

Example:
  python tests/onnx/ort_in_bench.py target/release/collage MODEL.onnx --threads 2 \\
      --dim batch=1 --rounds 3

Exit status: 0 when every pair is within --tolerance (default 0.05), 1 otherwise, 2 when a
command fails.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import time_ort  # noqa: E402


def bench_ort_ms(args, extra):
    cmd = [args.collage, "bench", args.model, "--threads", str(args.threads),
           "--onnxruntime", "always", "--format", "json"]
    for d in args.dim:
        cmd += ["--dim", d]
    cmd += extra
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        sys.exit(f"ort_in_bench.py: {' '.join(cmd)} exited with {done.returncode}")
    report = json.loads(done.stdout)
    for p in report["placements"]:
        if p["name"] == "onnxruntime":
            return p["latency_ms"]["median"], p["latency_ms"]["spread"], report
    sys.exit("ort_in_bench.py: the report has no onnxruntime row")


def python_session(args, np, ort):
    so = time_ort.session_options(ort, args.threads, True)
    sess = ort.InferenceSession(args.model, sess_options=so, providers=["CPUExecutionProvider"])
    targs = time_ort.parse_args([args.model] + sum((["--dim", d] for d in args.dim), []))
    return sess, time_ort.inputs_for(np, sess, targs)


def main(argv):
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("collage", help="the collage binary")
    p.add_argument("model", help="the .onnx file")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dim", action="append", default=[], metavar="NAME=N")
    p.add_argument("--runs", type=int, default=20, help="timed runs of the Python package per pair (half before the bench, half after; at least)")
    p.add_argument("--seconds", type=float, default=1.0,
                   help="timed runs of the Python package last at least this long on each side of the bench (default 1; a small model's 10 runs would sample a few milliseconds of the machine's load)")
    p.add_argument("--rounds", type=int, default=1, help="bench/Python pairs (default 1)")
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    import numpy as np
    import onnxruntime as ort

    sess, feeds = python_session(args, np, ort)
    before = args.runs // 2
    pairs = []
    for _ in range(args.rounds):
        runs = time_ort.time_runs(sess, feeds, 3, before, args.seconds) if before else []
        in_bench, spread, report = bench_ort_ms(args, extra)
        runs += time_ort.time_runs(sess, feeds, 3, args.runs - before, args.seconds)
        alone = statistics.median(runs)
        collage = report["speedup"]["collage_ms"] if report.get("speedup") else None
        pairs.append({"bench_ms": in_bench, "bench_spread": spread, "python_ms": alone,
                      "ratio": in_bench / alone, "collage_ms": collage})
    ok = all(abs(q["ratio"] - 1) <= args.tolerance for q in pairs)
    if args.json:
        print(json.dumps({"model": args.model, "threads": args.threads,
                          "onnxruntime": ort.__version__, "pairs": pairs, "within": ok}))
    else:
        print(f"{args.model}: onnxruntime {ort.__version__}, {args.threads} thread(s)")
        for q in pairs:
            print(f"  in bench {q['bench_ms']:.3f} ms (spread {100 * q['bench_spread']:.1f}%)"
                  f"  python {q['python_ms']:.3f} ms  ratio {q['ratio']:.3f}")
        print("within" if ok else "NOT within", f"{100 * args.tolerance:.0f}%")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
