"""How far each device-resident cell of a cuda_precision run is from the GPU's floors.

Measures the machine's three ceilings on the device (torch, same GPU): fp16 tensor-core
GEMM rate (a large half matmul), device memory bandwidth (a large device-to-device copy,
bytes read plus written), and the fixed cost of one run (a CUDA graph of one empty kernel
launched and waited for, as a run is). Then, per policy and batch of the fp16
device-resident column of `cuda_precision.json`:

- compute floor = batch x FLOPs per row / GEMM rate (FLOPs: 2 x the multiply-adds of
  Conv, Gemm, MatMul, LSTM and GRU on the ONNX export, as bench/policy_gflops.py counts);
- memory floor = (fp16 weights, read once + the feeds and results of the batch at their
  model dtypes, each read or written once) / copy bandwidth;
- run floor = the larger of the two + the fixed cost of one launched, waited-for graph;
- measured us per run (kaiwu fp16 and PyTorch's best graph replay) and measured / floor.

    PYTHONPATH=python python bench/gpu_floors.py bench/results/h100/cuda_precision.json \
        --out bench/results/h100/cuda_floors.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
sys.path.insert(0, HERE)


def ceilings():
    """fp16 GEMM FLOP/s, device copy bytes/s and one graph launch + wait (s), measured."""
    import torch

    dev = torch.device("cuda")
    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.float16)
    b = torch.randn(n, n, device=dev, dtype=torch.float16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / 10)
    gemm = 2 * n ** 3 / best
    src = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(10):
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    copy = 2 * src.numel() / best
    x = torch.zeros(1, device=dev)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x.add_(1)
        with torch.cuda.graph(g, stream=s):
            x.add_(1)
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream()
    for _ in range(100):
        g.replay()
        stream.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(500):
            g.replay()
            stream.synchronize()
        best = min(best, (time.perf_counter() - t0) / 500)
    return gemm, copy, best


def policy_bytes(name):
    """fp16 weight bytes, and feed + result bytes per row at the model's dtypes."""
    import onnx

    import policies

    model = onnx.load_from_string(policies.export_bytes(name))
    weights = sum(int(np.prod(t.dims)) for t in model.graph.initializer
                  if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)) * 2
    feeds = policies.make_inputs(name, 2, seed=0)
    module, _, ins, outs, _ = policies.build(name)
    import torch

    with torch.no_grad():
        res = module(*[torch.from_numpy(feeds[k]) for k in ins])
    res = res if isinstance(res, (tuple, list)) else (res,)
    row = (sum(v.nbytes for v in feeds.values()) + sum(r.numel() * r.element_size() for r in res)) / 2
    return weights, row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("result", help="cuda_precision.json (bench/bench_cuda_precision.py)")
    ap.add_argument("--out", help="markdown file to write (default: print)")
    args = ap.parse_args()
    from policy_gflops import flops_per_sample

    import torch

    data = json.load(open(args.result))
    gemm, copy, launch = ceilings()
    lines = [f"# GPU floors of the device-resident fp16 cells ({os.path.basename(args.result)})", "",
             f"- device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}; cells from "
             f"`{data['meta']['command']}` ({data['meta'].get('tree', 'tree not recorded')})",
             f"- ceilings measured in this run: fp16 GEMM **{gemm / 1e12:.0f} TFLOP/s** (8192^3 half matmul), "
             f"device copy **{copy / 1e12:.2f} TB/s** (256 MB device-to-device, read + write), "
             f"one graph launch + wait **{launch * 1e6:.1f} us** (a one-kernel CUDA graph replayed and "
             "synchronized)",
             "- compute floor = batch x FLOPs/row / GEMM rate; memory floor = (fp16 weights + the batch's "
             "feeds and results) / copy rate; run floor = max of the two + one launch and wait",
             f"- command: `PYTHONPATH=python python bench/gpu_floors.py {' '.join(sys.argv[1:])}`", "",
             "| policy | batch | MFLOP/row | weights MB | compute floor us | memory floor us | run floor us | "
             "kaiwu fp16 us | kaiwu / floor | kaiwu TFLOP/s | torch best us | torch / floor |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    cache = {}
    for r in data["rows"]:
        name, b = r["policy"], r["batch"]
        if name not in cache:
            cache[name] = (flops_per_sample(name), *policy_bytes(name))
        flops, weights, row = cache[name]
        t_compute = b * flops / gemm
        t_memory = (weights + b * row) / copy
        floor = max(t_compute, t_memory) + launch
        kaiwu = b / r["kaiwu_fp16_device"]
        torch_best = b / r["torch_best_device"]
        lines.append(f"| {name} | {b} | {flops / 1e6:.2f} | {weights / 1e6:.2f} | {t_compute * 1e6:.2f} | "
                     f"{t_memory * 1e6:.2f} | {floor * 1e6:.1f} | {kaiwu * 1e6:.1f} | **{kaiwu / floor:.1f}** | "
                     f"{b * flops / kaiwu / 1e12:.2f} | {torch_best * 1e6:.1f} | {torch_best / floor:.1f} |")
    text = "\n".join(lines) + "\n"
    if args.out:
        open(args.out, "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
