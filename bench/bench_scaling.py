"""Engine throughput on many cores: what a batching server can reach, before any
queueing. For one policy, rows/s of

  - one Run over the whole batch with T intra-op threads ("intra-op"), and
  - T threads each running its own slice of the batch on a 1-thread engine
    ("data-parallel": kaiwu_infer shares one Session, onnxruntime has one
    session per thread),

for kaiwu_infer and onnxruntime, same inputs, same cores, same run. The
data-parallel rows at batch T (one row per thread) are the ceiling of
per-actor calls without any environment or Python in between.

    PYTHONPATH=python python bench/bench_scaling.py --policy impala_lstm --threads 16 \
        --batch 16,64,128 --seconds 1.5

Prints a markdown table (and writes it with --out FILE).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))


def _feeds(name, batch, seed):
    import policies

    return policies.make_inputs(name, batch, seed=seed)


def _timed(run_fns, seconds):
    """Runs each fn in its own thread (or inline if one) until `seconds` pass;
    returns calls per fn."""
    counts = [0] * len(run_fns)
    stop = [False]
    start = threading.Barrier(len(run_fns) + 1) if len(run_fns) > 1 else None

    def loop(i):
        if start:
            start.wait()
        f = run_fns[i]
        n = 0
        while not stop[0]:
            f()
            n += 1
        counts[i] = n

    if start is None:
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < seconds:
            run_fns[0]()
            n += 1
        return [n], time.perf_counter() - t0
    ts = [threading.Thread(target=loop, args=(i,)) for i in range(len(run_fns))]
    [t.start() for t in ts]
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop[0] = True
    [t.join() for t in ts]
    return counts, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="impala_lstm")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batch", default="16,64,128")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--engines", default="kaiwu,ort")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    import onnxruntime as ort

    import kaiwu_infer as ki
    import policies

    T = args.threads
    path = policies.export_onnx(args.policy, os.path.join(tempfile.mkdtemp(), args.policy + ".onnx"))
    engines = args.engines.split(",")

    def ort_session(threads):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    rows = []
    k_multi = ki.Session(path, threads=T) if "kaiwu" in engines else None
    k_one = ki.Session(path, threads=1) if "kaiwu" in engines else None
    o_multi = ort_session(T) if "ort" in engines else None
    o_ones = [ort_session(1) for _ in range(T)] if "ort" in engines else []
    for b in [int(x) for x in args.batch.split(",")]:
        feeds = _feeds(args.policy, b, 1)
        per = max(1, b // T)
        slices = [_feeds(args.policy, per, 10 + i) for i in range(T)]
        cases = []
        if k_multi:
            cases.append(("kaiwu", "intra-op", b, [lambda: k_multi.run(feeds)]))
            cases.append(("kaiwu", "data-parallel", per * T, [lambda s=s: k_one.run(s) for s in slices]))
        if o_multi:
            cases.append(("onnxruntime", "intra-op", b, [lambda: o_multi.run(None, feeds)]))
            cases.append(("onnxruntime", "data-parallel", per * T,
                          [lambda s=s, o=o: o.run(None, s) for s, o in zip(slices, o_ones)]))
        for eng, how, total, fns in cases:
            for f in fns[:1]:
                f()  # warm
            for f in fns:
                f()
            counts, wall = _timed(fns, args.seconds)
            rows_per_call = total if how == "intra-op" else per
            rps = sum(counts) * rows_per_call / wall
            rows.append((b, eng, how, rps))
            print(f"batch {b:4d} {eng:12s} {how:14s} {rps:10.0f} rows/s", flush=True)
    lines = [f"# Engine scaling: {args.policy}, {T} threads", "",
             f"- command: `PYTHONPATH=python python bench/bench_scaling.py {' '.join(sys.argv[1:])}`",
             f"- machine: {os.cpu_count()} logical CPUs", "",
             "| batch | engine | parallelism | rows/s |", "|---:|---|---|---:|"]
    lines += [f"| {b} | {e} | {h} | {r:.0f} |" for b, e, h, r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
