"""Half precision on the CUDA backend: kaiwu_infer fp32 / fp16 / bf16 against PyTorch's
best CUDA-graph replay (fp32, and fp16 under torch.autocast; the faster of the two per
cell), device-resident and through pinned host memory, in one run.

    PYTHONPATH=python python bench/bench_cuda_precision.py [--policies ...] [--batch 1,32,256,1024]

- device-resident: CUDA tensors in and out (kaiwu_infer: torch CUDA feeds,
  output_device="cuda"; PyTorch: copy into the graph's static inputs, replay, wait);
- pinned host path: numpy in and out through page-locked memory (kaiwu_infer io_buffers and
  out=; PyTorch: memcpy into pinned staging, H2D, replay, D2H, wait);
- accuracy of each half session against float32 onnxruntime (relative L2 error of the
  first output, argmax agreement over rows);
- the PCIe floor of the host path: input + output bytes over the H2D / D2H bandwidth
  measured in the same run with torch pinned copies of 64 MB.
Writes <name>.md / <name>.json (default cuda_precision) in --out (default bench/results/h100).
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
from bench_cuda import rate, torch_graph_device_step, torch_graph_pinned_step  # noqa: E402
from bench_server import env_prefix  # noqa: E402


def pcie_bandwidth():
    import torch

    n = 64 << 20
    host = torch.empty(n, dtype=torch.uint8).pin_memory()
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    out = {}
    for name, fn in (("h2d", lambda: dev.copy_(host, non_blocking=True)),
                     ("d2h", lambda: host.copy_(dev, non_blocking=True))):
        fn()
        torch.cuda.synchronize()
        best = 0.0
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            best = max(best, n / (time.perf_counter() - t0))
        out[name] = best
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="mlp,atari_cnn,impala_lstm,gru_seq,multi_input,unit_transformer")
    ap.add_argument("--batch", default="1,32,256,1024")
    ap.add_argument("--seconds", type=float, default=0.6)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "h100"))
    ap.add_argument("--name", default="cuda_precision")
    ap.add_argument("--precisions", default="fp32,fp16,bf16",
                    help="kaiwu precisions to time (fp16 is the ratio's; others n/a when left out)")
    args = ap.parse_args()

    import onnxruntime as ort
    import torch

    import kaiwu_infer as ki
    import policies

    if not ki.cuda_available():
        sys.exit("kaiwu_infer has no CUDA backend or device here")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    bw = pcie_bandwidth()
    print(json.dumps({"pcie": bw}), flush=True)
    rows = []
    precisions = tuple(args.precisions.split(","))
    if "fp16" not in precisions:
        sys.exit("--precisions must include fp16 (the ratio's column)")
    for name in args.policies.split(","):
        data = policies.export_bytes(name)
        module, _, ins, outs, _ = policies.build(name)
        tmod = module.to("cuda").eval()
        so = ort.SessionOptions()
        so.log_severity_level = 3
        ort_s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        sess = {p: ki.Session(data, device="cuda", precision=p) for p in precisions}
        for b in [int(x) for x in args.batch.split(",")]:
            feeds = policies.make_inputs(name, b, seed=b)
            ref = ort_s.run(None, feeds)[0].astype(np.float64)
            r = {"policy": name, "batch": b}
            in_bytes = sum(v.nbytes for v in feeds.values())
            dfeeds = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
            torch.cuda.synchronize()
            for p, s in sess.items():
                got = s.run(feeds)[outs[0]].astype(np.float64)
                r[f"{p}_rel_err"] = float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))
                if ref.ndim >= 2 and ref.shape[-1] > 1:
                    r[f"{p}_argmax_agree"] = float(np.mean(got.argmax(-1) == ref.argmax(-1)))
                r[f"kaiwu_{p}_device"] = rate(lambda: s.run(dfeeds, output_device="cuda"), b, args.seconds)
                bufs = s.io_buffers(b)
                for k, v in feeds.items():
                    bufs.inputs[k][...] = v
                r[f"kaiwu_{p}_pinned"] = rate(lambda: s.run(bufs.inputs, out=bufs.outputs), b, args.seconds)
                if p == precisions[0]:
                    out_bytes = sum(v.nbytes for v in bufs.outputs.values())
            for half in (False, True):
                tag = "fp16" if half else "fp32"
                try:
                    r[f"torch_graph_{tag}_device"] = rate(torch_graph_device_step(tmod, ins, feeds, half), b, args.seconds)
                    r[f"torch_graph_{tag}_pinned"] = rate(torch_graph_pinned_step(tmod, ins, feeds, half), b, args.seconds)
                except Exception as e:  # a module autocast cannot capture
                    r[f"torch_graph_{tag}_error"] = repr(e)[:200]
            r["torch_best_device"] = max(r.get("torch_graph_fp32_device", 0), r.get("torch_graph_fp16_device", 0))
            r["torch_best_pinned"] = max(r.get("torch_graph_fp32_pinned", 0), r.get("torch_graph_fp16_pinned", 0))
            r["pcie_floor_rows_s"] = b / (in_bytes / bw["h2d"] + out_bytes / bw["d2h"])
            rows.append(r)
            print(json.dumps(r), flush=True)

    meta = {"machine": f"{platform.node()} {platform.machine()} cores={os.cpu_count()}",
            "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "onnxruntime": ort.__version__, "pcie_h2d_GBps": bw["h2d"] / 1e9, "pcie_d2h_GBps": bw["d2h"] / 1e9,
            "command": env_prefix() + "PYTHONPATH=python python bench/bench_cuda_precision.py " + " ".join(sys.argv[1:])}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, args.name + ".json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    lines = ["# CUDA backend in fp32 / fp16 / bf16 against PyTorch CUDA graphs", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items()]
    lines += ["", "Rows/s. torch best = the faster of fp32 and autocast-fp16 graph replay in that cell. "
              "ratio = kaiwu fp16 / torch best.", "",
              "## Device-resident (CUDA tensors in and out)", "",
              "| policy | batch | kaiwu fp32 | kaiwu fp16 | kaiwu bf16 | torch graph fp32 | torch graph fp16 | ratio fp16/best |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    f0 = lambda r, k: f"{r[k]:.0f}" if k in r else "n/a"  # noqa: E731
    for r in rows:
        lines.append(f"| {r['policy']} | {r['batch']} | {f0(r, 'kaiwu_fp32_device')} | {f0(r, 'kaiwu_fp16_device')} | "
                     f"{f0(r, 'kaiwu_bf16_device')} | {f0(r, 'torch_graph_fp32_device')} | "
                     f"{f0(r, 'torch_graph_fp16_device')} | **{r['kaiwu_fp16_device'] / r['torch_best_device']:.2f}** |")
    lines += ["", "## Pinned host path (numpy in and out)", "",
              "| policy | batch | kaiwu fp32 | kaiwu fp16 | torch graph fp32 | torch graph fp16 | ratio fp16/best | PCIe floor | fp16 / floor |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['policy']} | {r['batch']} | {f0(r, 'kaiwu_fp32_pinned')} | {f0(r, 'kaiwu_fp16_pinned')} | "
                     f"{f0(r, 'torch_graph_fp32_pinned')} | {f0(r, 'torch_graph_fp16_pinned')} | "
                     f"**{r['kaiwu_fp16_pinned'] / r['torch_best_pinned']:.2f}** | {r['pcie_floor_rows_s']:.0f} | "
                     f"{r['kaiwu_fp16_pinned'] / r['pcie_floor_rows_s']:.2f} |")
    lines += ["", "## Accuracy against float32 onnxruntime (first output)", "",
              "| policy | batch | fp16 rel err | fp16 argmax agree | bf16 rel err | bf16 argmax agree |",
              "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['policy']} | {r['batch']} | {r['fp16_rel_err']:.1e} | {r.get('fp16_argmax_agree', float('nan')):.3f} | "
                     f"{r.get('bf16_rel_err', float('nan')):.1e} | {r.get('bf16_argmax_agree', float('nan')):.3f} |")
    with open(os.path.join(args.out, args.name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
