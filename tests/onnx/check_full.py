#!/usr/bin/env python3
"""Runs the full-size exports through collage and compares with ONNX Runtime's outputs.

For each folder made by `export.py --full DIR` (a model.onnx, its inputs and ONNX Runtime's
outputs as .npy, a manifest.json): `collage partition` with the default targets writes the
plan (`-o`), `collage run` runs it (native operators as generated code, oneDNN and OpenBLAS
partitions on their libraries) with the fixture's inputs, and the outputs are compared at
rtol 1e-3, atol 1e-4 (float32) or exactly (integers). Prints one Markdown table row per model
(the table of docs/onnx.md), with the wall time of each step.

    python3 tests/onnx/check_full.py DIR [--collage target/release/collage] [--threads 2]

Needs numpy. Writes plans and outputs into a temporary folder.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def run(cmd):
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p, time.monotonic() - t


def check(folder, collage, threads, tmp):
    m = json.load(open(os.path.join(folder, "manifest.json")))
    model = os.path.join(folder, m["file"])
    shapes, feeds = [], []
    for i in m["inputs"]:
        shapes += ["--input-shape", "%s=%s" % (i["name"], "x".join(map(str, i["shape"])))]
        feeds += ["--input", "%s=%s" % (i["name"], os.path.join(folder, i["file"]))]
    plan = os.path.join(tmp, m["name"] + ".relay")
    p, t_part = run([collage, "partition", model, *shapes, "-o", plan, "--format", "json"])
    if p.returncode != 0:
        return m["name"], "partition failed: " + p.stderr.strip().splitlines()[0], {}
    parts = json.loads(p.stdout)["functions"][0]["partitions"]
    libraries = sum(1 for q in parts if q.get("compiler") in ("dnnl", "openblas"))
    out_dir = os.path.join(tmp, m["name"] + "-out")
    p, t_run = run([collage, "run", plan, *feeds, "--threads", str(threads),
                    "--output-dir", out_dir, "--format", "json"])
    if p.returncode != 0:
        return m["name"], "run failed: " + p.stderr.strip().splitlines()[0], {}
    report = json.loads(p.stdout)
    worst = 0.0
    ok = True
    for k, o in enumerate(m["outputs"]):
        ref = np.load(os.path.join(folder, o["file"]))
        got = np.load(os.path.join(out_dir, "output%d.npy" % k))
        if ref.shape != got.shape:
            return m["name"], "shape %s, expected %s" % (got.shape, ref.shape), {}
        if ref.dtype.kind in "iub":
            ok &= bool((ref == got).all())
        else:
            err = np.abs(ref.astype(np.float64) - got.astype(np.float64))
            ok &= bool((err <= 1e-4 + 1e-3 * np.abs(ref)).all())
            worst = max(worst, float(err.max()))
    return m["name"], "match" if ok else "MISMATCH", {
        "max_abs_diff": worst,
        "partition_s": t_part,
        "run_s": t_run,
        "partitions": len(parts),
        "library_partitions": libraries,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--collage", default="target/release/collage")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    names = sorted(d for d in os.listdir(a.dir)
                   if os.path.isfile(os.path.join(a.dir, d, "manifest.json")))
    print("| model | result | max abs diff | partitions (oneDNN or OpenBLAS) | partition (s) | run (s) |")
    print("| --- | --- | --- | --- | --- | --- |")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n in names:
            name, result, info = check(os.path.join(a.dir, n), a.collage, a.threads, tmp)
            bad += result != "match"
            if info:
                print("| %s | %s | %.2g | %d (%d) | %.1f | %.1f |" % (
                    name, result, info["max_abs_diff"], info["partitions"],
                    info["library_partitions"],
                    info["partition_s"], info["run_s"]), flush=True)
            else:
                print("| %s | %s | | | | |" % (name, result), flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
