"""Int8 (QDQ) policies on the CUDA backend: kaiwu int8 against kaiwu fp16 and fp32 on the
same GPU, same run, device-resident (torch CUDA tensors in, output_device="cuda", as
bench_cuda_precision.py times them).

Each policy (tests/python/policies.py) is exported in fp32 and quantized by
kaiwu_infer.quantize (onnxruntime.quantization quantize_static, QDQ, per-channel int8 weights,
uint8 activations, 4 x 16 random calibration observations). Sessions: fp32 and fp16 of the fp32
export, int8 of the QDQ model (fp32 session: the fused integer nodes on int8 tensor cores).
Per (policy, batch) the three run in rotated order, twice; the best rows/s of each is kept
(bench_cuda.rate: best of 3 blocks after warm-up). Accuracy of the int8 GPU run: max error
against onnxruntime running the QDQ graph literally and against kaiwu's CPU int8 run, in
quantization steps of the output, and the relative L2 error against fp32 onnxruntime.
--profile: torch.profiler's CUDA kernel times per run of int8 and fp16 for one (policy, batch).
The column "int8 no split" is a fourth int8 session whose plans are made under
KAIWU_INT8_SPLIT_K=0 (dense layers of small batches in one pass over k): the split-K A/B;
"int8 NCHW" a fifth, made under KAIWU_INT8_NHWC=0 (integer convs NCHW, the tap-table loads):
the channels-last A/B.

    PYTHONPATH=python python bench/bench_cuda_int8.py [--policies mlp,atari_cnn] [--batch 1,32,256,1024]
        [--seconds 0.3] [--out bench/results/h100] [--name cuda_int8] [--profile atari_cnn:256]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, HERE)
from bench_cuda import rate  # noqa: E402
from bench_server import env_prefix  # noqa: E402


def qdq_steps(path):
    import onnx
    from onnx import numpy_helper

    m = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    outs = {o.name for o in m.graph.output}
    return {n.output[0]: float(np.max(inits[n.input[1]])) for n in m.graph.node
            if n.op_type == "DequantizeLinear" and n.output[0] in outs}


def ort_run(data, feeds, literal):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if literal:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def profile(sess, dfeeds, runs=50):
    """CUDA kernel time per run (us) by kernel name, from torch.profiler over `runs` runs."""
    import torch
    from torch.profiler import ProfilerActivity, profile as tprofile

    for _ in range(5):
        sess.run(dfeeds, output_device="cuda")
    torch.cuda.synchronize()
    with tprofile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            sess.run(dfeeds, output_device="cuda")
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None)
        if t is None:
            t = getattr(e, "cuda_time_total", 0)
        if t > 0:
            rows.append((e.key[:110], t / runs, e.count / runs))
    rows.sort(key=lambda r: -r[1])
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="mlp,atari_cnn")
    ap.add_argument("--batch", default="1,32,256,1024")
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "h100"))
    ap.add_argument("--name", default="cuda_int8")
    ap.add_argument("--profile", default="", help="policy:batch to profile (kernel times), e.g. atari_cnn:256")
    args = ap.parse_args()

    import onnxruntime as ort
    import torch

    import kaiwu_infer as ki
    import policies

    if not ki.cuda_available():
        sys.exit("kaiwu_infer has no CUDA backend or device here")
    tmp = tempfile.mkdtemp()
    rows, profiles = [], {}
    prof_name, prof_batch = (args.profile.split(":") + [""])[:2] if args.profile else ("", "")
    for name in args.policies.split(","):
        fp32_path = policies.export_onnx(name, os.path.join(tmp, f"{name}.onnx"))
        data = open(fp32_path, "rb").read()
        obs = [policies.make_inputs(name, 16, seed=100 + i) for i in range(4)]
        q_path = ki.quantize(fp32_path, obs, os.path.join(tmp, f"{name}_int8.onnx"), progress=False)
        qdata = open(q_path, "rb").read()
        steps = qdq_steps(q_path)
        sess = {"fp32": ki.Session(data, device="cuda"), "fp16": ki.Session(data, device="cuda", precision="fp16"),
                "int8": ki.Session(qdata, device="cuda"), "int8_nosplit": ki.Session(qdata, device="cuda")}
        os.environ["KAIWU_INT8_NHWC"] = "0"  # read when the session is made
        sess["int8_nchw"] = ki.Session(qdata, device="cuda")
        os.environ.pop("KAIWU_INT8_NHWC")
        cpu8 = ki.Session(qdata)
        for b in [int(x) for x in args.batch.split(",")]:
            feeds = policies.make_inputs(name, b, seed=b)
            r = {"policy": name, "batch": b}
            lit = ort_run(qdata, feeds, literal=True)
            f32 = ort_run(data, feeds, literal=False)
            got = {k: np.array(v) for k, v in sess["int8"].run(feeds).items()}
            cpu = cpu8.run(feeds)
            r["int8_steps_vs_ort_qdq"] = max(float(np.abs(got[k] - lit[k]).max()) / steps[k] for k in lit)
            r["int8_steps_vs_cpu_int8"] = max(float(np.abs(got[k] - cpu[k]).max()) / steps[k] for k in lit)
            k0 = next(iter(f32))
            ref = f32[k0].astype(np.float64)
            r["int8_rel_err_vs_fp32"] = float(np.linalg.norm(got[k0] - ref) / max(np.linalg.norm(ref), 1e-30))
            if ref.ndim >= 2 and ref.shape[-1] > 1:
                r["int8_argmax_agree_fp32"] = float(np.mean(got[k0].argmax(-1) == ref.argmax(-1)))
            dfeeds = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
            torch.cuda.synchronize()
            order = ["fp32", "fp16", "int8", "int8_nosplit", "int8_nchw"]
            for rep in range(2):
                for p in order[rep:] + order[:rep]:
                    s = sess[p]
                    if p == "int8_nosplit":  # read when the plan for this batch is made (first run)
                        os.environ["KAIWU_INT8_SPLIT_K"] = "0"
                    v = rate(lambda: s.run(dfeeds, output_device="cuda"), b, args.seconds)
                    os.environ.pop("KAIWU_INT8_SPLIT_K", None)
                    r[f"kaiwu_{p}"] = max(r.get(f"kaiwu_{p}", 0.0), v)
            r["int8_over_fp16"] = r["kaiwu_int8"] / r["kaiwu_fp16"]
            r["int8_over_fp32"] = r["kaiwu_int8"] / r["kaiwu_fp32"]
            rows.append(r)
            print(json.dumps(r), flush=True)
            if name == prof_name and str(b) == prof_batch:
                for p in ("int8", "int8_nchw", "fp16"):
                    profiles[f"{name} batch {b} {p}"] = profile(sess[p], dfeeds)

    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip() or "n/a"
    except Exception:  # no git on the machine, or no .git in the copy
        rev = "n/a"
    meta = {"machine": f"{platform.node()} {platform.machine()} cores={os.cpu_count()}",
            "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "onnxruntime": ort.__version__,
            "cuda_runtime": torch.version.cuda, "tree": rev,
            "command": env_prefix() + "PYTHONPATH=python python bench/bench_cuda_int8.py " + " ".join(sys.argv[1:])}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, args.name + ".json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "profiles": profiles}, f, indent=1)
    lines = ["# Int8 (QDQ) policies on the CUDA backend: kaiwu int8 vs fp16 vs fp32", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items()]
    lines += ["", "Rows/s, device-resident (torch CUDA tensors in, output_device=\"cuda\"), same run. "
              "int8/fp16 = kaiwu int8 rows/s over kaiwu fp16 rows/s in that cell.", "",
              "| policy | batch | kaiwu fp32 | kaiwu fp16 | kaiwu int8 | int8/fp16 | int8/fp32 | int8 no split | "
              "split/no split | int8 NCHW | NHWC/NCHW |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['policy']} | {r['batch']} | {r['kaiwu_fp32']:.0f} | {r['kaiwu_fp16']:.0f} | "
                     f"{r['kaiwu_int8']:.0f} | **{r['int8_over_fp16']:.2f}** | {r['int8_over_fp32']:.2f} | "
                     f"{r['kaiwu_int8_nosplit']:.0f} | {r['kaiwu_int8'] / r['kaiwu_int8_nosplit']:.2f} | "
                     f"{r['kaiwu_int8_nchw']:.0f} | {r['kaiwu_int8'] / r['kaiwu_int8_nchw']:.2f} |")
    lines += ["", "## Accuracy of the int8 GPU run", "",
              "Max error in quantization steps of the output (the scale of the DequantizeLinear writing it) "
              "against onnxruntime running the QDQ graph literally and against kaiwu's CPU int8 run; "
              "relative L2 error and argmax agreement of the first output against fp32 onnxruntime.", "",
              "| policy | batch | steps vs ort QDQ | steps vs kaiwu CPU int8 | rel err vs fp32 | argmax agree |",
              "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['policy']} | {r['batch']} | {r['int8_steps_vs_ort_qdq']:.2f} | "
                     f"{r['int8_steps_vs_cpu_int8']:.2f} | {r['int8_rel_err_vs_fp32']:.1e} | "
                     f"{r.get('int8_argmax_agree_fp32', float('nan')):.3f} |")
    for title, prow in profiles.items():
        lines += ["", f"## CUDA kernel time per run: {title} (torch.profiler)", "",
                  "| kernel | us per run | launches per run |", "|---|---:|---:|"]
        lines += [f"| `{k}` | {t:.1f} | {c:.1f} |" for k, t, c in prow[:12]]
        lines.append(f"| total | {sum(t for _, t, _ in prow):.1f} | |")
    with open(os.path.join(args.out, args.name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
