"""A/B in one process: a policy's int8 (QDQ) model with integer convs channels-last (the CPU
default) against NCHW (KAIWU_INT8_NHWC=0 when the session is made), onnxruntime int8 alongside.

The policy is quantized as bench_int8.py does (kaiwu_infer.quantize, full-range per-channel
weights). Per (threads, batch): both kaiwu sessions must give the same bytes; then 5 repeats
of 0.1 s blocks per engine in rotated order, process CPU time per call, median.

    PYTHONPATH=python python bench/int8_layout_ab.py [policy]      # default atari_cnn
"""
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
    name = sys.argv[1] if len(sys.argv) > 1 else "atari_cnn"
    tmp = tempfile.mkdtemp()
    fp32 = policies.export_onnx(name, os.path.join(tmp, f"{name}.onnx"))
    obs = [policies.make_inputs(name, 16, 100 + i) for i in range(4)]
    q8 = ki.quantize(fp32, obs, os.path.join(tmp, f"{name}_int8.onnx"), progress=False)
    print("int8 kernels:", ki.int8_isa())
    for t in (1, 2):
        os.environ["KAIWU_INT8_NHWC"] = "1"
        nhwc = ki.Session(q8, threads=t)
        os.environ["KAIWU_INT8_NHWC"] = "0"
        nchw = ki.Session(q8, threads=t)
        os.environ.pop("KAIWU_INT8_NHWC")
        o = ort_session(q8, t)
        for b in (32, 256, 1024):
            feeds = policies.make_inputs(name, b, 1)
            a, c = nhwc.run(feeds), nchw.run(feeds)
            assert all(np.array_equal(a[k], c[k]) for k in a), "NHWC and NCHW differ"
            calls = {"nhwc": lambda: nhwc.run(feeds), "nchw": lambda: nchw.run(feeds),
                     "ort": lambda: o.run(None, feeds)}
            for f in calls.values():
                time_block(f, 0.05)
            cpu = {k: [] for k in calls}
            keys = list(calls)
            for r in range(5):
                for k in keys[r % 3:] + keys[:r % 3]:
                    cpu[k].append(time_block(calls[k], 0.1)[1])
            m = {k: statistics.median(v) * 1e6 for k, v in cpu.items()}
            print(f"{name} t={t} b={b}: nhwc {m['nhwc']:.0f} us, nchw {m['nchw']:.0f} us, ort int8 {m['ort']:.0f} us"
                  f" | nchw/nhwc {m['nchw'] / m['nhwc']:.2f}, ort/nhwc {m['ort'] / m['nhwc']:.2f}", flush=True)


if __name__ == "__main__":
    main()
