"""Per-node time (Session.profile) of int8 (QDQ) policies and their fp32 models, 1 thread.

Quantized as bench_int8.py does. Prints each node's op, output shape and time per run.

    PYTHONPATH=python python bench/profile_int8.py          # mlp b256/b1024, atari_cnn b32/b256
    PYTHONPATH=python python bench/profile_int8.py impala_lstm:32 gru_seq:32,256
"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import kaiwu_infer as ki  # noqa: E402
import policies  # noqa: E402

CASES = [("mlp", [256, 1024]), ("atari_cnn", [32, 256])]


def main():
    cases = CASES
    if len(sys.argv) > 1:  # name:batch[,batch...] ...
        cases = [(a.split(":")[0], [int(b) for b in a.split(":")[1].split(",")]) for a in sys.argv[1:]]
    tmp = tempfile.mkdtemp()
    print("int8 kernels:", ki.int8_isa())
    for name, batches in cases:
        fp32 = policies.export_onnx(name, os.path.join(tmp, f"{name}.onnx"))
        obs = [policies.make_inputs(name, 16, 100 + i) for i in range(4)]
        q8 = ki.quantize(fp32, obs, os.path.join(tmp, f"{name}_int8.onnx"), progress=False)
        for m in (q8, fp32):
            s = ki.Session(m, threads=1)
            for b in batches:
                feeds = policies.make_inputs(name, b, 1)
                s.profile(feeds, runs=30)  # warm-up
                rows = s.profile(feeds, runs=30)
                tot = sum(r["seconds"] for r in rows)
                print(os.path.basename(m), "batch", b, "total us", round(tot * 1e6))
                for r in rows:
                    if r["seconds"] >= 1e-6:
                        print(f"  {r['op']:18s} {str(r['shape']):22s} {r['seconds'] * 1e6:9.1f} us  "
                              f"{r['share'] * 100:5.1f}%")


if __name__ == "__main__":
    main()
