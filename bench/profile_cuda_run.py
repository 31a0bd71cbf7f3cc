"""Where the host time of one device-resident CUDA run goes: torch.profiler over N runs of
a kaiwu_infer session (CUDA runtime API calls and kernels), next to a PyTorch CUDA-graph
replay of the same policy.

    PYTHONPATH=python python bench/profile_cuda_run.py [--policy mlp] [--batch 1] [--precision fp16]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="mlp")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    import kaiwu_infer as ki
    import policies

    data = policies.export_bytes(args.policy)
    sess = ki.Session(data, device="cuda", precision=args.precision)
    feeds = policies.make_inputs(args.policy, args.batch, seed=1)
    dfeeds = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
    torch.cuda.synchronize()
    for _ in range(20):
        sess.run(dfeeds, output_device="cuda")
    for label, fn in (("device feeds, device outputs", lambda: sess.run(dfeeds, output_device="cuda")),
                      ("device feeds, numpy outputs", lambda: sess.run(dfeeds))):
        t0 = time.perf_counter()
        for _ in range(args.runs):
            fn()
        print(f"{label}: {1e6 * (time.perf_counter() - t0) / args.runs:.1f} us/run")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.runs):
            sess.run(dfeeds, output_device="cuda")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15))


if __name__ == "__main__":
    main()
