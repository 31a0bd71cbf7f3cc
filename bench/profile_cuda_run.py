"""Where the host time of one device-resident CUDA run goes: the recorded graph's nodes
(io_stats' graph_nodes per launch, and each node's kind / kernel from the recording as
Graphviz text), us per run, and torch.profiler over N runs of a kaiwu_infer session
(CUDA runtime API calls and kernels).

    PYTHONPATH=python python bench/profile_cuda_run.py [--policy mlp[,gru_seq]] [--batch 1[,32]]
        [--precision fp16] [--no-profile]
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))


def _demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                             timeout=10).stdout.splitlines()
        return out if len(out) == len(names) else names
    except (OSError, subprocess.SubprocessError):
        return names


def graph_listing(path):
    """One line per node of a cudaGraphDebugDotPrint file: its kind and kernel name."""
    text = open(path).read()
    kinds, names = [], []
    for label in re.findall(r'label="([^"]*)"', text):
        kind = re.search(r"\b([A-Z][A-Z_]{2,})\b", label)
        name = re.search(r"(_Z\w+|\b\w*(?:[Kk]ernel|gemm|Gemm|GEMM)\w*)", label)
        kinds.append(kind.group(1) if kind else "?")
        names.append(name.group(1) if name else "")
    names = _demangle(names)
    return [f"{k[:12]:12s} {re.sub(r'[(](?!anonymous).*', '', n)[:140]}" for k, n in zip(kinds, names)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="mlp", help="one policy or a comma-separated list")
    ap.add_argument("--batch", default="1", help="one batch or a comma-separated list")
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--no-profile", action="store_true", help="nodes and us/run only")
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    import kaiwu_infer as ki
    import policies

    dot_dir = tempfile.mkdtemp(prefix="kaiwu_graphs_")
    for name in args.policy.split(","):
        data = policies.export_bytes(name)
        sess = ki.Session(data, device="cuda", precision=args.precision)
        for batch in [int(b) for b in args.batch.split(",")]:
            feeds = policies.make_inputs(name, batch, seed=1)
            dfeeds = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
            torch.cuda.synchronize()
            prefix = os.path.join(dot_dir, f"{name}_b{batch}_")
            os.environ["KAIWU_CUDA_GRAPH_DOT"] = prefix
            sess.run(dfeeds, output_device="cuda")  # records the graph
            os.environ.pop("KAIWU_CUDA_GRAPH_DOT")
            for _ in range(20):
                sess.run(dfeeds, output_device="cuda")
            sess.io_stats(reset=True)
            t0 = time.perf_counter()
            for _ in range(args.runs):
                sess.run(dfeeds, output_device="cuda")
            us = 1e6 * (time.perf_counter() - t0) / args.runs
            st = sess.io_stats()
            nodes = st["graph_nodes"] / max(st["graph_launches"], 1)
            print(f"== {name} {args.precision} batch {batch}: {nodes:.0f} graph nodes per run, "
                  f"device feeds and outputs {us:.1f} us/run", flush=True)
            for path in sorted(glob.glob(prefix + "*.dot")):
                for line in graph_listing(path):
                    print("   ", line)
            if args.no_profile:
                continue
            t0 = time.perf_counter()
            for _ in range(args.runs):
                sess.run(dfeeds)
            print(f"device feeds, numpy outputs: {1e6 * (time.perf_counter() - t0) / args.runs:.1f} us/run")
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(args.runs):
                    sess.run(dfeeds, output_device="cuda")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
            print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15))


if __name__ == "__main__":
    main()
