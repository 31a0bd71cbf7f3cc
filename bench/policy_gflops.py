"""GFLOP/s per policy, batch and engine from a bench_core.py result, next to the machine's fp32 peak.

FLOPs per sample are counted on each policy's ONNX export (shape-inferred at batch 1): 2 x the
multiply-adds of Conv, Gemm, MatMul, LSTM and GRU (everything else is a rounding error for these
policies). GFLOP/s = batch x FLOPs per sample / per-call time; at 1 thread the CPU-time columns
(time the process actually computed, not time preempted on a loaded machine) are used, at more
threads the wall-clock median. The peak is measured by bench/fp32_peak.cc (pass it with --peak).

    PYTHONPATH=python python bench/policy_gflops.py bench/results/dev-2core/core.json --peak 99.5
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import shape_inference

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import policies  # noqa: E402


def _dims(vi):
    return [d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim]


def flops_per_sample(name):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.onnx")
        policies.export_onnx(name, path)
        model = onnx.load(path)
    for vi in list(model.graph.input) + list(model.graph.output):
        for d in vi.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                d.dim_value = 1  # the batch (and any other symbolic dim) at 1
    model = shape_inference.infer_shapes(model)
    shapes = {vi.name: _dims(vi) for vi in
              list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)}
    shapes.update({i.name: list(i.dims) for i in model.graph.initializer})
    total = 0
    for n in model.graph.node:
        try:
            if n.op_type == "Conv":
                w, y = shapes[n.input[1]], shapes[n.output[0]]
                total += 2 * int(np.prod(y)) * int(np.prod(w[1:]))
            elif n.op_type == "Gemm":
                a, y = shapes[n.input[0]], shapes[n.output[0]]
                trans_a = any(at.name == "transA" and at.i for at in n.attribute)
                total += 2 * int(np.prod(y)) * (a[0] if trans_a else a[1])
            elif n.op_type == "MatMul":
                a, y = shapes[n.input[0]], shapes[n.output[0]]
                total += 2 * int(np.prod(y)) * a[-1]
            elif n.op_type in ("LSTM", "GRU"):
                x, w, r = shapes[n.input[0]], shapes[n.input[1]], shapes[n.input[2]]
                seq_batch = x[0] * x[1]
                total += 2 * seq_batch * w[0] * w[1] * (w[2] + r[2])
        except KeyError:
            pass  # a shape onnx could not infer: not counted
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("result", help="core.json written by bench_core.py")
    ap.add_argument("--peak", type=float, required=True, help="fp32 GFLOP/s of one core (fp32_peak)")
    ap.add_argument("--out", help="markdown file to write (default: print)")
    args = ap.parse_args()
    data = json.load(open(args.result))
    per_sample = {}
    lines = [f"# GFLOP/s per policy and batch ({os.path.basename(args.result)})", "",
             f"- machine: {data['machine'].get('model_name')}, SIMD {' '.join(data['machine'].get('simd', []))}",
             f"- fp32 peak of one core, measured (bench/fp32_peak.cc): **{args.peak:.1f} GFLOP/s**; "
             f"of n threads: n x that",
             "- FLOPs: 2 x multiply-adds of Conv/Gemm/MatMul/LSTM/GRU per sample (ONNX export, "
             "shape-inferred); 1 thread: per-call CPU time, 2+ threads: median wall time",
             f"- command: `{' '.join(sys.argv)}` on `{data['command']}` of {data['date']}", "",
             "| policy | MFLOP/sample | batch | threads | kaiwu GFLOP/s | ort GFLOP/s | kaiwu % of peak |"
             " ort % of peak |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in data["results"]:
        if r.get("status") != "ok":
            continue
        name = r["policy"]
        if name not in per_sample:
            per_sample[name] = flops_per_sample(name)
        f = per_sample[name] * r["batch"]
        key = "cpu_us" if r["threads"] == 1 else "median_us"
        g = {e: f / r["engines"][e][key] * 1e-3 for e in ("kaiwu", "ort")}
        peak = args.peak * r["threads"]
        lines.append(f"| {name} | {per_sample[name] / 1e6:.2f} | {r['batch']} | {r['threads']} | "
                     f"{g['kaiwu']:.1f} | {g['ort']:.1f} | {100 * g['kaiwu'] / peak:.0f}% | "
                     f"{100 * g['ort'] / peak:.0f}% |")
    text = "\n".join(lines) + "\n"
    if args.out:
        open(args.out, "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
