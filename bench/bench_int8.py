"""Int8 (QDQ) policies: kaiwu_infer vs onnxruntime on the same quantized model, and vs fp32.

For each policy (tests/python/policies.py) the fp32 export is quantized twice with
kaiwu_infer.quantize (onnxruntime.quantization quantize_static, QDQ, per-channel int8 weights,
uint8 activations, 4 x 16 random calibration observations): "int8" with full-range weights and
"int8/7b" with reduce_range=True (7-bit weights, which kaiwu_infer's AVX2 kernels multiply with
vpmaddubsw exactly). Per (threads, batch), six engines run interleaved blocks (order rotated per
repeat): kaiwu fp32, ort fp32, kaiwu int8, ort int8, kaiwu int8/7b, ort int8/7b. Reported per
engine: median per-call process CPU time (steadiest on a loaded machine; at 2 threads it includes
spinning) and median wall time, plus kaiwu's max error against onnxruntime running the QDQ graph
literally (optimizations off), in quantization steps of each output.

    PYTHONPATH=python python bench/bench_int8.py [--policies mlp,atari_cnn] [--batch 1,32,256]
        [--threads 1,2] [--repeats 5] [--block-s 0.2] [--out-dir bench/results/dev-2core] [--name int8]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import numpy_helper  # noqa: E402

import kaiwu_infer as kaiwu  # noqa: E402
import policies  # noqa: E402


def cpu_info():
    model, flags = "?", set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    simd = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8") if f in flags]
    return f"{model}, {os.cpu_count()} logical CPUs, SIMD {' '.join(simd)}"


def ort_session(path, threads, literal=False):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if literal:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def steps(path):
    m = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    outs = {o.name for o in m.graph.output}
    return {n.output[0]: float(np.max(inits[n.input[1]])) for n in m.graph.node
            if n.op_type == "DequantizeLinear" and n.output[0] in outs}


def time_block(fn, block_s):
    gc.disable()
    try:
        calls, t0, c0, walls = 0, time.perf_counter(), time.process_time(), []
        while True:
            s = time.perf_counter()
            fn()
            walls.append(time.perf_counter() - s)
            calls += 1
            if time.perf_counter() - t0 >= block_s and calls >= 1:
                break
        return statistics.median(walls), (time.process_time() - c0) / calls
    finally:
        gc.enable()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="mlp,atari_cnn")
    ap.add_argument("--batch", default="1,32,256")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--block-s", type=float, default=0.2)
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results", "dev-2core"))
    ap.add_argument("--name", default="int8")
    args = ap.parse_args()
    names = args.policies.split(",")
    batches = [int(b) for b in args.batch.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    tmp = tempfile.mkdtemp()
    rows, models = [], {}
    for name in names:
        fp32 = policies.export_onnx(name, os.path.join(tmp, f"{name}.onnx"))
        obs = [policies.make_inputs(name, 16, 100 + i) for i in range(4)]
        q8 = kaiwu.quantize(fp32, obs, os.path.join(tmp, f"{name}_int8.onnx"), progress=False)
        q7 = kaiwu.quantize(fp32, obs, os.path.join(tmp, f"{name}_int8_7b.onnx"), progress=False,
                            reduce_range=True)
        models[name] = {"fp32": fp32, "int8": q8, "int8/7b": q7}
    engines = ["kaiwu fp32", "ort fp32", "kaiwu int8", "ort int8", "kaiwu int8/7b", "ort int8/7b"]
    for name in names:
        m = models[name]
        for t in threads:
            sess = {}
            for var in ("fp32", "int8", "int8/7b"):
                sess[f"kaiwu {var}"] = kaiwu.Session(m[var], threads=t)
                sess[f"ort {var}"] = ort_session(m[var], t)
            for b in batches:
                feeds = policies.make_inputs(name, b, 1)
                err, err_float = {}, {}
                for var in ("int8", "int8/7b"):
                    ref = dict(zip([o.name for o in ort_session(m[var], 1, True).get_outputs()],
                                   ort_session(m[var], 1, True).run(None, feeds)))
                    got = sess[f"kaiwu {var}"].run(feeds)
                    st = steps(m[var])
                    # In steps where an output comes out of a DequantizeLinear; outputs left in
                    # float (a recurrent policy's state) as the largest error relative to the
                    # output's largest magnitude.
                    err[var] = max([float(np.abs(got[k] - r).max()) / st[k] for k, r in ref.items() if k in st],
                                   default=0.0)
                    err_float[var] = max([float(np.abs(got[k] - r).max()) / max(float(np.abs(r).max()), 1e-30)
                                          for k, r in ref.items() if k not in st], default=0.0)
                calls = {e: (lambda s=sess[e]: s.run(feeds)) if e.startswith("kaiwu") else
                         (lambda s=sess[e]: s.run(None, feeds)) for e in engines}
                for e in engines:
                    time_block(calls[e], 0.05)  # warm-up
                wall = {e: [] for e in engines}
                cpu = {e: [] for e in engines}
                for r in range(args.repeats):
                    order = engines[r % len(engines):] + engines[:r % len(engines)]
                    for e in order:
                        time.sleep(0.01)
                        w, c = time_block(calls[e], args.block_s)
                        wall[e].append(w)
                        cpu[e].append(c)
                row = {"policy": name, "threads": t, "batch": b, "err_steps": err, "err_float_rel": err_float,
                       "wall_us": {e: statistics.median(v) * 1e6 for e, v in wall.items()},
                       "cpu_us": {e: statistics.median(v) * 1e6 for e, v in cpu.items()}}
                rows.append(row)
                c = row["cpu_us"]
                print(f"{name} t={t} b={b}: " + ", ".join(f"{e} {c[e]:.0f}" for e in engines) +
                      f" | err steps {err}", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=HERE).stdout.strip()
    header = {"machine": cpu_info(), "platform": platform.platform(),
              "kaiwu_int8_isa": kaiwu.int8_isa(), "KAIWU_INT8_ISA": os.environ.get("KAIWU_INT8_ISA", "unset"),
              "versions": {"kaiwu_infer": f"{kaiwu.__version__} ({commit})", "onnxruntime": ort.__version__,
                           "numpy": np.__version__, "python": platform.python_version()},
              "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_avg": os.getloadavg()}
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, f"{args.name}.json"), "w") as f:
        json.dump({"header": header, "rows": rows}, f, indent=1)
    lines = [f"# Int8 QDQ policies: kaiwu_infer vs onnxruntime ({args.name})", "",
             f"- machine: {header['machine']} ({header['platform']})",
             f"- versions: {header['versions']}",
             f"- kaiwu int8 kernels: {header['kaiwu_int8_isa']} (KAIWU_INT8_ISA {header['KAIWU_INT8_ISA']}); "
             f"threads: {','.join(map(str, threads))} (the thr column)",
             f"- command: `{header['command']}`",
             f"- date: {header['date']}, load average at the end {tuple(round(x, 1) for x in header['load_avg'])}",
             "", "Per-call process CPU time, µs (median of repeats; at 2 threads it includes spinning),",
             "and ratios: **o8/k8** = ort int8 / kaiwu int8 (>1: kaiwu faster), **k32/k8** = kaiwu fp32 /",
             "kaiwu int8, likewise for the 7-bit-weight model. err: kaiwu's max error vs onnxruntime running",
             "the QDQ graph literally, in quantization steps of the output (outputs left in float, a",
             "recurrent policy's state, add their largest error relative to their largest magnitude).", "",
             "| policy | thr | batch | kaiwu fp32 | ort fp32 | kaiwu int8 | ort int8 | **o8/k8** | k32/k8 | kaiwu int8/7b | ort int8/7b | **o7/k7** | k32/k7 | err 8 / 7b |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["cpu_us"]
        lines.append(
            f"| {r['policy']} | {r['threads']} | {r['batch']} | {c['kaiwu fp32']:.0f} | {c['ort fp32']:.0f} | "
            f"{c['kaiwu int8']:.0f} | {c['ort int8']:.0f} | **{c['ort int8'] / c['kaiwu int8']:.2f}** | "
            f"{c['kaiwu fp32'] / c['kaiwu int8']:.2f} | {c['kaiwu int8/7b']:.0f} | {c['ort int8/7b']:.0f} | "
            f"**{c['ort int8/7b'] / c['kaiwu int8/7b']:.2f}** | {c['kaiwu fp32'] / c['kaiwu int8/7b']:.2f} | "
            f"{r['err_steps']['int8']:.2f} / {r['err_steps']['int8/7b']:.2f}"
            + ("".join(f" (float {r['err_float_rel'][v]:.1e})" if r['err_float_rel'][v] else "" for v in ("int8",))
               if any(r['err_float_rel'].values()) else "") + " |")
    gm = lambda xs: float(np.exp(np.mean(np.log(xs))))
    lines += ["", f"Geometric means: o8/k8 {gm([r['cpu_us']['ort int8'] / r['cpu_us']['kaiwu int8'] for r in rows]):.2f}, "
              f"k32/k8 {gm([r['cpu_us']['kaiwu fp32'] / r['cpu_us']['kaiwu int8'] for r in rows]):.2f}, "
              f"o7/k7 {gm([r['cpu_us']['ort int8/7b'] / r['cpu_us']['kaiwu int8/7b'] for r in rows]):.2f}, "
              f"k32/k7 {gm([r['cpu_us']['kaiwu fp32'] / r['cpu_us']['kaiwu int8/7b'] for r in rows]):.2f}."]
    with open(os.path.join(args.out_dir, f"{args.name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
