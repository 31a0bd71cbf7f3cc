"""Per-node time of whole optimized models: kaiwu_infer vs onnxruntime, same inputs.

Unlike ``bench_core.py --op-breakdown`` (every node alone as its own model), this
profiles each engine's own optimized graph as it runs end to end, so fused nodes
(onnxruntime's NCHWc convolutions with Add/Relu folded in, kaiwu_infer's fused
activations) show up as they execute. Both profiles are grouped by op type.

    PYTHONPATH=python python bench/profile_model.py --policy impala_lstm --batch 8 --threads 1

--quantize int8 (or int8_7b: 7-bit weights) profiles both engines on the policy quantized to QDQ
by kaiwu_infer.quantize (as bench_int8.py does) instead of the float32 export.
"""
import argparse
import collections
import json
import os
import sys
import tempfile
import time


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import onnxruntime as ort  # noqa: E402

import kaiwu_infer  # noqa: E402
import policies  # noqa: E402


def whole_us(run, reps):
    run()
    t0 = time.perf_counter()
    for _ in range(reps):
        run()
    return (time.perf_counter() - t0) / reps * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="impala_lstm")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--nodes", action="store_true", help="also list kaiwu_infer's nodes one by one")
    ap.add_argument("--device", default="cpu",
                    help="kaiwu_infer's device (cuda: each node is timed to its end on the GPU)")
    ap.add_argument("--quantize", choices=["none", "int8", "int8_7b"], default="none")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kaiwu_prof_")
    path = policies.export_onnx(args.policy, os.path.join(tmp, "m.onnx"))
    if args.quantize != "none":
        obs = [policies.make_inputs(args.policy, 16, 100 + i) for i in range(4)]
        path = kaiwu_infer.quantize(path, obs, os.path.join(tmp, "q.onnx"), progress=False,
                                    reduce_range=args.quantize == "int8_7b")
    feeds = policies.make_inputs(args.policy, args.batch, seed=0)

    ks = kaiwu_infer.Session(path, threads=args.threads, device=args.device)
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    os_plain = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tmp, "ort")
    os_prof = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    reps = max(5, args.runs)
    k_us = whole_us(lambda: ks.run(feeds), reps)
    o_us = whole_us(lambda: os_plain.run(None, feeds), reps)

    kprof = ks._profile(feeds, args.runs)
    kt = collections.defaultdict(lambda: [0.0, 0])
    for p in kprof:
        kt[p["op"]][0] += p["seconds"] * 1e6
        kt[p["op"]][1] += 1

    for _ in range(args.runs):
        os_prof.run(None, feeds)
    prof_file = os_prof.end_profiling()
    with open(prof_file) as f:
        events = json.load(f)
    ot = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        op = e["args"].get("op_name", "?")
        ot[op][0] += e["dur"] / args.runs
    nodes = collections.Counter(e["args"].get("op_name", "?") for e in events
                                if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"))
    for op, c in nodes.items():
        ot[op][1] = c // args.runs

    print(f"{args.policy} batch {args.batch}, {args.threads} thread(s), kaiwu_infer on {ks.device}: "
          f"whole run kaiwu {k_us:,.0f} us, "
          f"onnxruntime {o_us:,.0f} us (ort/kaiwu {o_us / k_us:.2f}x)")
    print(f"  sum of profiled nodes: kaiwu {sum(v[0] for v in kt.values()):,.0f} us, "
          f"onnxruntime {sum(v[0] for v in ot.values()):,.0f} us")
    print("  kaiwu_infer (optimized graph)            | onnxruntime (optimized graph)")
    ka = sorted(kt.items(), key=lambda x: -x[1][0])
    oa = sorted(ot.items(), key=lambda x: -x[1][0])
    for i in range(max(len(ka), len(oa))):
        left = f"{ka[i][0]:<22} x{ka[i][1][1]:<3} {ka[i][1][0]:>9,.0f} us" if i < len(ka) else ""
        right = f"{oa[i][0]:<22} x{oa[i][1][1]:<3} {oa[i][1][0]:>9,.0f} us" if i < len(oa) else ""
        print(f"  {left:<41}| {right}")
    if args.nodes:
        print("  kaiwu_infer nodes:")
        for p in kprof:
            print(f"    {p['op']:<12} {str(tuple(p['shape'])):<22} {p['seconds'] * 1e6:>9,.1f} us  {p['node']}")
    os.remove(prof_file)


if __name__ == "__main__":
    main()
