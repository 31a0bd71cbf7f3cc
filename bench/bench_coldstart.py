"""Cold start of the GPU path: what the first run of a new batch size costs, in a
Session and in an InferenceServer stepped by many thread actors.

    KAIWU_CUDNN=1 PYTHONPATH=python python bench/bench_coldstart.py [--actors 256] [--precision fp16]

Part 1: a fresh Session of the IMPALA+LSTM policy runs batch sizes 1..256 once
(the run that builds the plan) and again (warm). Part 2: one server is stepped by
N thread actors for two rounds of `--seconds` each: round 0 meets every batch size
for the first time (unless `--warmup` ran them all at start), round 1 reuses the
plans. Prints one line per measurement.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_server as bs  # noqa: E402


def first_runs(ki, policy, device, precision="fp32"):
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    s = ki.Session(policy.path, device=device, precision=precision)
    line = [f"session load {1e3 * (time.perf_counter() - t0):.0f} ms; first/second run (ms):"]
    for b in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        feeds = {policy.obs_name: rng.integers(0, 256, (b, *policy.obs_shape)).astype(policy.dtype),
                 "h0": np.zeros((1, b, policy.hidden), np.float32),
                 "c0": np.zeros((1, b, policy.hidden), np.float32)}
        t = time.perf_counter()
        s.run(feeds)
        first = time.perf_counter() - t
        t = time.perf_counter()
        s.run(feeds)
        line.append(f"b{b} {1e3 * first:.0f}/{1e3 * (time.perf_counter() - t):.1f}")
    return " ".join(line)


def server_rounds(ki, policy, device, actors, seconds, workers, warmup, precision="fp32"):
    t0 = time.perf_counter()
    srv = ki.InferenceServer(policy.path, device=device, workers=workers, state={"h0": "hn", "c0": "cn"},
                             warmup=warmup, precision=precision)
    on = policy.obs_name
    out = [f"server start{' with warmup' if warmup else ''}: {1e3 * (time.perf_counter() - t0):.0f} ms"]
    for rnd in range(2):
        envs = [bs.FakeEnv(1, policy, a) for a in range(actors)]
        lats = [[] for _ in range(actors)]
        counts, start, stop_at = [], threading.Event(), [0.0, 0.0]

        def make(a):
            return lambda obs, done: srv.infer(a, {on: obs}, done=done)["logits"]

        ts = [threading.Thread(target=bs.actor_loop, args=(make(a), envs[a], seconds, lats[a], counts, start, stop_at))
              for a in range(actors)]
        [t.start() for t in ts]
        now = time.perf_counter()
        stop_at[1], stop_at[0] = now + 0.5, now + 0.5 + seconds
        srv.reset_stats()
        start.set()
        [t.join() for t in ts]
        st = srv.stats()
        out.append(f"server, {actors} threads, round {rnd}: {sum(counts) / seconds:.0f} steps/s, {st['batches']} batches "
                   f"(mean {st['mean_batch_rows']:.1f} rows, run mean {st['run_mean_us']:.0f} us), queue wait "
                   f"p50/p99 {st['queue_wait_p50_us']:.0f}/{st['queue_wait_p99_us']:.0f} us")
    srv.close()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--actors", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--warmup", action="store_true", help="start the server with warmup=True")
    ap.add_argument("--precision", default="fp32", help="fp32, fp16 or bf16 (fp16/bf16: channels-last convs)")
    args = ap.parse_args()
    import kaiwu_infer as ki

    policy = bs.build_policies(tempfile.mkdtemp())["impala_lstm"]
    tag = (bs.env_prefix() or "(defaults) ") + f"precision={args.precision} "
    print(tag + first_runs(ki, policy, args.device, args.precision), flush=True)
    for line in server_rounds(ki, policy, args.device, args.actors, args.seconds, args.workers, args.warmup,
                              args.precision):
        print(tag + line, flush=True)


if __name__ == "__main__":
    main()
