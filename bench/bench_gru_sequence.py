"""A/B of the CUDA GRU's one-launch sequence kernel (GruSequenceKernel) against a GEMM and a gate
kernel per step, on the gru_seq policy (GRU 128 over 8 steps), device-resident feeds and results,
per batch size: `KAIWU_GRU_SEQUENCE_MAX_BATCH=0` (per-step path) vs a large limit (sequence kernel
at every batch). Each configuration runs in its own process; the table gives us/run.

    PYTHONPATH=python python bench/bench_gru_sequence.py --batch 1,8,32,64,256,1024 \
        [--precision fp32] [--out bench/results/h100/gru_sequence_ab.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def child(batches, precision, seconds):
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))
    import torch

    import kaiwu_infer as ki
    import policies

    sess = ki.Session(policies.export_bytes("gru_seq"), device="cuda", precision=precision)
    out = {}
    for b in batches:
        feeds = {k: torch.from_numpy(v).cuda() for k, v in policies.make_inputs("gru_seq", b, seed=b).items()}
        for _ in range(20):
            sess.run(feeds, output_device="cuda")
        torch.cuda.synchronize()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            sess.run(feeds, output_device="cuda")
            n += 1
        torch.cuda.synchronize()
        out[b] = 1e6 * (time.perf_counter() - t0) / n
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="1,8,32,64,256,1024")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--out", default="")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    batches = [int(x) for x in args.batch.split(",")]
    if args.child:
        child(batches, args.precision, args.seconds)
        return
    res = {}
    for name, limit in (("per-step", "0"), ("sequence", "1000000")):
        env = dict(os.environ, KAIWU_GRU_SEQUENCE_MAX_BATCH=limit)
        p = subprocess.run([sys.executable, __file__, "--child", "--batch", args.batch, "--precision",
                            args.precision, "--seconds", str(args.seconds)],
                           env=env, capture_output=True, text=True, check=True)
        res[name] = {int(k): v for k, v in json.loads(p.stdout.strip().splitlines()[-1]).items()}
    import torch

    lines = ["# GRU sequence kernel A/B (gru_seq, device-resident, us/run)", "",
             f"- device: {torch.cuda.get_device_name(0)}, precision {args.precision}",
             f"- command: PYTHONPATH=python python bench/bench_gru_sequence.py {' '.join(sys.argv[1:])}", "",
             "| batch | per-step us | sequence kernel us | per-step / sequence |", "|---:|---:|---:|---:|"]
    for b in batches:
        a, s = res["per-step"][b], res["sequence"][b]
        lines.append(f"| {b} | {a:.1f} | {s:.1f} | **{a / s:.2f}** |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
