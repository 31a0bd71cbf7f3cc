"""The CUDA backend alone: policy throughput by batch size and refit time, against
PyTorch on the same GPU (float32; TF32 off, then on, for reference) and onnxruntime on
every CPU core, in one run.

    PYTHONPATH=python python bench/bench_cuda.py [--policies impala_lstm,mlp,atari_cnn]
        [--batch 1,32,128,256] [--seconds 1]

Rows/s counts the whole call as an actor sees it: numpy feeds in, numpy results out
(host <-> device copies included, for kaiwu_infer and for PyTorch). Two more pairs of
columns, same run:
- pinned host path: kaiwu_infer run on page-locked ``io_buffers`` (feeds already written
  there by the env, results DMA'd into pinned out= arrays) against PyTorch replaying a CUDA
  graph on static buffers with pinned staging (numpy -> pinned memcpy, H2D, replay, D2H);
- device-resident: CUDA tensors in and out (kaiwu_infer: torch CUDA feeds,
  output_device="cuda"; PyTorch: copy into the graph's static inputs on the GPU, replay).
Every call waits for its results (kaiwu_infer's run returns when done; PyTorch synchronizes
its stream). Writes <name>.md and
<name>.json (default cuda) in --out (default bench/results/h100, the GPU machine's folder;
on another machine pass bench/results/<machine>).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, HERE)
from bench_server import env_prefix  # noqa: E402


def rate(fn, rows, seconds):
    """Rows per second of fn() over about `seconds` (after warm-up), best of 3 blocks."""
    for _ in range(3):
        fn()
    best = 0.0
    for _ in range(3):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 3:
            fn()
            n += 1
        best = max(best, n * rows / (time.perf_counter() - t0))
    return best


def torch_step(module, names, dev):
    import torch

    def f(feeds):
        with torch.no_grad():
            outs = module(*[torch.from_numpy(feeds[n]).to(dev, non_blocking=False) for n in names])
            return [o.cpu().numpy() for o in outs]
    return f



def torch_graph(module, names, feeds, half=False):
    """A CUDA graph of `module` on static GPU inputs (under torch.autocast to float16 when
    `half`); returns (static inputs, outputs, graph)."""
    import contextlib

    import torch

    def mode():
        return torch.autocast("cuda", dtype=torch.float16) if half else contextlib.nullcontext()

    static = [torch.from_numpy(feeds[n]).cuda() for n in names]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s), mode():
        for _ in range(3):
            module(*static)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g), mode():
        outs = module(*static)
    return static, list(outs), g


def torch_graph_device_step(module, names, feeds, half=False):
    """Inputs already on the GPU: copy into the static inputs, replay, wait."""
    import torch

    static, outs, g = torch_graph(module, names, feeds, half)
    dev = [torch.from_numpy(feeds[n]).cuda() for n in names]
    stream = torch.cuda.current_stream()

    def f():
        for s_, d in zip(static, dev):
            s_.copy_(d)
        g.replay()
        stream.synchronize()
        return outs
    return f


def torch_graph_pinned_step(module, names, feeds, half=False):
    """numpy in and out through pinned staging: memcpy, H2D, replay, D2H, wait (float
    results come back as float32, as the model's outputs are declared)."""
    import torch

    static, outs, g = torch_graph(module, names, feeds, half)
    pin_in = [torch.from_numpy(feeds[n]).pin_memory() for n in names]
    pin_out = [torch.empty(o.shape, dtype=torch.float32 if o.is_floating_point() else o.dtype).pin_memory()
               for o in outs]
    np_in = [p.numpy() for p in pin_in]
    stream = torch.cuda.current_stream()

    def f():
        for n, a in zip(names, np_in):
            np.copyto(a, feeds[n])
        for s_, p in zip(static, pin_in):
            s_.copy_(p, non_blocking=True)
        g.replay()
        for p, o in zip(pin_out, outs):
            p.copy_(o, non_blocking=True)
        stream.synchronize()
        return [p.numpy() for p in pin_out]
    return f


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="impala_lstm,mlp,atari_cnn")
    ap.add_argument("--batch", default="1,32,128,256")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "h100"))
    ap.add_argument("--name", default="cuda")
    args = ap.parse_args()

    import onnxruntime as ort
    import torch

    import kaiwu_infer as ki
    import policies

    if not ki.cuda_available():
        sys.exit("kaiwu_infer has no CUDA backend or device here (build with -DKAIWU_CUDA=ON)")
    cores = os.cpu_count()
    rows_out, refit_out = [], []
    for name in args.policies.split(","):
        data = policies.export_bytes(name)
        module, _, ins, outs, _ = policies.build(name)
        gpu = ki.Session(data, device="cuda")
        cpu = ort.SessionOptions()
        cpu.intra_op_num_threads = cores
        cpu.log_severity_level = 3
        ort_s = ort.InferenceSession(data, cpu, providers=["CPUExecutionProvider"])
        tmod = module.to("cuda").eval()
        tstep = torch_step(tmod, ins, "cuda")
        for b in [int(x) for x in args.batch.split(",")]:
            feeds = policies.make_inputs(name, b, seed=b)
            got, want = gpu.run(feeds), dict(zip(outs, tstep(feeds)))
            err = max(float(np.max(np.abs(got[k] - want[k]))) for k in outs)
            r = {"policy": name, "batch": b, "max_abs_diff_vs_torch": err,
                 "kaiwu_cuda": rate(lambda: gpu.run(feeds), b, args.seconds)}
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            r["torch_cuda_fp32"] = rate(lambda: tstep(feeds), b, args.seconds)
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
            r["torch_cuda_tf32"] = rate(lambda: tstep(feeds), b, args.seconds)
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            r["ort_cpu_all_cores"] = rate(lambda: ort_s.run(None, feeds), b, args.seconds)
            # Pinned host path: the env writes into io_buffers; one DMA each way.
            bufs = gpu.io_buffers(b)
            for k, v in feeds.items():
                bufs.inputs[k][...] = v
            r["kaiwu_cuda_pinned"] = rate(lambda: gpu.run(bufs.inputs, out=bufs.outputs), b,
                                          args.seconds)
            r["torch_graph_pinned"] = rate(torch_graph_pinned_step(tmod, ins, feeds), b, args.seconds)
            # Device-resident: CUDA tensors in and out.
            dfeeds = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
            torch.cuda.synchronize()
            dev_out = gpu.run(dfeeds, output_device="cuda")
            r["max_abs_diff_device_vs_host"] = max(
                float(np.max(np.abs(dev_out[k].numpy() - got[k]))) for k in outs)
            gpu.io_stats(reset=True)
            r["kaiwu_cuda_device"] = rate(lambda: gpu.run(dfeeds, output_device="cuda"), b,
                                          args.seconds)
            st = gpu.io_stats()
            r["device_run_h2d_d2h_bytes"] = st["h2d_bytes"] + st["d2h_bytes"]
            r["torch_graph_device"] = rate(torch_graph_device_step(tmod, ins, feeds), b, args.seconds)
            rows_out.append(r)
            print(json.dumps(r), flush=True)
        # Refit: all weights replaced, new values uploaded; the next run uses them.
        w = gpu.get_weights()
        nbytes = sum(v.nbytes for v in w.values())
        rng = np.random.default_rng(0)
        new = [{k: (v + 0.01 * rng.standard_normal(v.shape)).astype(v.dtype) for k, v in w.items()}
               for _ in range(2)]
        times = []
        for i in range(10):
            t0 = time.perf_counter()
            gpu.refit(new[i % 2])
            times.append(time.perf_counter() - t0)
        refit_out.append({"policy": name, "weight_bytes": nbytes,
                          "refit_ms_median": 1e3 * float(np.median(times)),
                          "refit_ms_min": 1e3 * float(np.min(times))})
        print(json.dumps(refit_out[-1]), flush=True)

    dev = ki.Session(policies.export_bytes("mlp"), device="cuda").device
    meta = {"machine": f"{platform.node()} {platform.machine()} cores={cores}", "device": dev,
            "torch": torch.__version__, "onnxruntime": ort.__version__,
            "command": env_prefix() + "PYTHONPATH=python python bench/bench_cuda.py " + " ".join(sys.argv[1:]),
            "ort_threads": cores}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, args.name + ".json"), "w") as f:
        json.dump({"meta": meta, "rows": rows_out, "refit": refit_out}, f, indent=1)
    lines = ["# CUDA backend: engine throughput and refit", ""] + [f"- {k}: {v}" for k, v in meta.items()]
    lines += ["", "Rows/s, numpy in and out (copies included); ratio = kaiwu_infer / peer.", "",
              "| policy | batch | kaiwu cuda | torch cuda fp32 | ratio | torch cuda tf32 | ort cpu (all cores) | ratio | max abs diff vs torch |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows_out:
        lines.append(f"| {r['policy']} | {r['batch']} | {r['kaiwu_cuda']:.0f} | {r['torch_cuda_fp32']:.0f} | "
                     f"{r['kaiwu_cuda'] / r['torch_cuda_fp32']:.2f} | {r['torch_cuda_tf32']:.0f} | "
                     f"{r['ort_cpu_all_cores']:.0f} | {r['kaiwu_cuda'] / r['ort_cpu_all_cores']:.2f} | "
                     f"{r['max_abs_diff_vs_torch']:.1e} |")
    lines += ["", "| policy | weight bytes | refit ms (median) | refit ms (min) |", "|---|---:|---:|---:|"]
    for r in refit_out:
        lines.append(f"| {r['policy']} | {r['weight_bytes']} | {r['refit_ms_median']:.2f} | {r['refit_ms_min']:.2f} |")
    lines += ["", "Pinned host path and device-resident I/O, rows/s (same run); ratio = kaiwu_infer / "
              "PyTorch CUDA-graph replay.", "",
              "| policy | batch | kaiwu pinned io_buffers | torch graph, pinned staging | ratio | "
              "kaiwu device (CUDA tensors in/out) | torch graph replay, inputs on GPU | ratio | "
              "host bytes moved by device runs |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows_out:
        lines.append(f"| {r['policy']} | {r['batch']} | {r['kaiwu_cuda_pinned']:.0f} | "
                     f"{r['torch_graph_pinned']:.0f} | {r['kaiwu_cuda_pinned'] / r['torch_graph_pinned']:.2f} | "
                     f"{r['kaiwu_cuda_device']:.0f} | {r['torch_graph_device']:.0f} | "
                     f"{r['kaiwu_cuda_device'] / r['torch_graph_device']:.2f} | "
                     f"{r['device_run_h2d_d2h_bytes']} |")
    with open(os.path.join(args.out, args.name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
