"""A/B in one process: a policy's int8 (QDQ) model under the CPU defaults against a session made
with one environment switch set (default KAIWU_INT8_NHWC=0: integer convs NCHW; also
KAIWU_INT8_INPLACE=0: channels-last convs gathering their rows instead of reading them in
place), onnxruntime int8 alongside.

The policy is quantized as bench_int8.py does (kaiwu_infer.quantize, full-range per-channel
weights). Per (threads, batch): both kaiwu sessions must give the same bytes; then 5 repeats
of 0.1 s blocks per engine in rotated order, process CPU time per call, median.

    PYTHONPATH=python python bench/int8_layout_ab.py [policy] [--env NAME=VALUE]
        [--batch 32,256,1024] [--threads 1,2]       # default atari_cnn, KAIWU_INT8_NHWC=0
"""
import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "python"), HERE]

import numpy as np  # noqa: E402

import kaiwu_infer as ki  # noqa: E402
import policies  # noqa: E402
from bench_int8 import ort_session, time_block  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("policy", nargs="?", default="atari_cnn")
    ap.add_argument("--env", default="KAIWU_INT8_NHWC=0")
    ap.add_argument("--batch", default="32,256,1024")
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    name = args.policy
    var, val = args.env.split("=", 1)
    tmp = tempfile.mkdtemp()
    fp32 = policies.export_onnx(name, os.path.join(tmp, f"{name}.onnx"))
    obs = [policies.make_inputs(name, 16, 100 + i) for i in range(4)]
    q8 = ki.quantize(fp32, obs, os.path.join(tmp, f"{name}_int8.onnx"), progress=False)
    print("int8 kernels:", ki.int8_isa(), "| B:", args.env)
    for t in [int(v) for v in args.threads.split(",")]:
        os.environ.pop(var, None)
        base = ki.Session(q8, threads=t)
        os.environ[var] = val
        alt = ki.Session(q8, threads=t)
        os.environ.pop(var)
        o = ort_session(q8, t)
        for b in [int(v) for v in args.batch.split(",")]:
            feeds = policies.make_inputs(name, b, 1)
            a, c = base.run(feeds), alt.run(feeds)
            assert all(np.array_equal(a[k], c[k]) for k in a), f"the default and {args.env} differ"
            calls = {"A": lambda: base.run(feeds), "B": lambda: alt.run(feeds),
                     "ort": lambda: o.run(None, feeds)}
            for f in calls.values():
                time_block(f, 0.05)
            cpu = {k: [] for k in calls}
            keys = list(calls)
            for r in range(5):
                for k in keys[r % 3:] + keys[:r % 3]:
                    cpu[k].append(time_block(calls[k], 0.1)[1])
            m = {k: statistics.median(v) * 1e6 for k, v in cpu.items()}
            print(f"{name} t={t} b={b}: default {m['A']:.0f} us, {args.env} {m['B']:.0f} us, ort int8 {m['ort']:.0f} us"
                  f" | B/default {m['B'] / m['A']:.2f}, ort/default {m['ort'] / m['A']:.2f}", flush=True)


if __name__ == "__main__":
    main()
