#!/usr/bin/env python
"""Core benchmark: kaiwu_infer vs onnxruntime on the five test policies.

For every (policy, threads, batch) config it
  1. builds one kaiwu_infer Session and one onnxruntime InferenceSession with the
     same thread count (sessions are shared by the batches of a policy/threads pair),
  2. draws a small pool of fresh random inputs of the right dtypes
     (``policies.make_inputs(name, batch, seed)``) and cycles through it,
  3. checks once that kaiwu_infer (both ``run(feeds)`` and ``run(feeds, out=...)``)
     agrees with onnxruntime (rtol 1e-3, atol 1e-4); a mismatch is reported instead
     of a timing,
  4. warms each engine up, then times R repeats; in each repeat the three engines
     (kaiwu ``run``, kaiwu ``run(out=)``, ort ``run``) each run a block of calls, in
     an order rotated per repeat, so machine noise hits all of them alike,
  5. reports per engine the median over repeats of the per-call median and p90 wall
     time (µs), and the median over repeats of throughput (samples/s).

Outputs (in --out-dir, default bench/results/dev-2core; on another machine pass
bench/results/<machine>, see bench/results/README.md): core.json (everything, incl. per-repeat
numbers and the graph summaries), core.md (table), core.png (ort/kaiwu speedup).
--quick writes core_quick.* instead so that it never overwrites a full run.

    PYTHONPATH=python python bench/bench_core.py                 # full (~10-15 min on 2 cores)
    PYTHONPATH=python python bench/bench_core.py --quick         # < 2 min
    PYTHONPATH=python python bench/bench_core.py --policies mlp,gru --batch 1,32 --threads 1
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import importlib.util
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_POLICIES_FILE = os.path.join(ROOT, "tests", "python", "policies.py")

POLICY_ORDER = ("mlp", "atari_cnn", "impala_lstm", "gru_seq", "multi_input")
ALIASES = {"gru": "gru_seq", "cnn": "atari_cnn", "atari": "atari_cnn", "impala": "impala_lstm",
           "multi": "multi_input", "lstm": "impala_lstm"}
ENGINES = ("kaiwu", "kaiwu_out", "ort")
ENGINE_LABEL = {"kaiwu": "kaiwu_infer run()", "kaiwu_out": "kaiwu_infer run(out=)",
                "ort": "onnxruntime"}

# Run-size presets: repeats, seconds per timed block, warmup seconds, batches, time budget.
PRESETS = {
    "full": dict(repeats=5, block_s=0.25, warmup_s=0.2, batches=[1, 32, 256, 1024], budget_s=14 * 60),
    "quick": dict(repeats=3, block_s=0.06, warmup_s=0.05, batches=[1, 32], budget_s=75),
}
MAX_CALLS_PER_BLOCK = 2000
POOL_BYTES = 48 << 20  # input pool: at most this much memory per config (but >= 2 sets)


# ------------------------------------------------------------------ helpers
def load_policies(path: str):
    if not os.path.isfile(path):
        sys.exit(f"bench_core: policies file not found: {path} "
                 "(it comes with tests/python; merge main, or pass --policies-file)")
    spec = importlib.util.spec_from_file_location("kaiwu_bench_policies", path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(path))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.pop(0)
    return mod


def parse_list(text: str, conv=str):
    return [conv(t.strip()) for t in text.split(",") if t.strip()]


def parse_threads(text: str) -> list[int]:
    ncpu = os.cpu_count() or 1
    out = []
    for t in parse_list(text):
        n = ncpu if t.lower() in ("all", "max") else int(t)
        if n < 1:
            raise SystemExit(f"bad thread count {t!r}")
        if n not in out:
            out.append(n)
    return out


def lscpu_info() -> dict:
    info = {"model_name": platform.processor() or platform.machine(), "logical_cpus": os.cpu_count()}
    try:
        txt = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        kv = {}
        for line in txt.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                kv[k.strip()] = v.strip()
        info["model_name"] = kv.get("Model name", info["model_name"])
        cores = int(kv.get("Core(s) per socket", 0)) * int(kv.get("Socket(s)", 0))
        if cores:
            info["physical_cores"] = cores
        for key in ("Thread(s) per core", "Hypervisor vendor", "L2 cache", "L3 cache"):
            if key in kv:
                info[key.lower().replace("(s)", "s").replace(" ", "_")] = kv[key]
        flags = kv.get("Flags", "").split()
        info["simd"] = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "amx_tile") if f in flags]
    except Exception:  # noqa: BLE001 - machine info is best effort
        pass
    return info


def versions(kaiwu_infer, ort) -> dict:
    v = {"python": platform.python_version(), "kaiwu_infer": getattr(kaiwu_infer, "__version__", "?"),
         "onnxruntime": ort.__version__, "numpy": np.__version__}
    try:
        import torch
        v["torch"] = torch.__version__
    except Exception:  # noqa: BLE001
        v["torch"] = None
    try:
        v["kaiwu_infer_git"] = subprocess.run(
            ["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True, text=True,
            timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001
        pass
    return v


def pct(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q))


def compare(name: str, ref: dict, got: dict, rtol: float, atol: float) -> str | None:
    """None when every output agrees, else a description of the first disagreement."""
    for k, r in ref.items():
        if k not in got:
            return f"{name}: output '{k}' missing"
        g = np.asarray(got[k])
        if g.shape != r.shape:
            return f"{name}: output '{k}' shape {g.shape} != ort {r.shape}"
        if g.dtype != r.dtype:
            return f"{name}: output '{k}' dtype {g.dtype} != ort {r.dtype}"
        if not np.allclose(g, r, rtol=rtol, atol=atol, equal_nan=True):
            rr, gg = r.astype(np.float64), g.astype(np.float64)
            fin = np.isfinite(rr) & np.isfinite(gg)
            err = np.abs(gg - rr)
            bad = ~np.isclose(gg, rr, rtol=rtol, atol=atol, equal_nan=True)
            max_abs = float(err[fin].max()) if fin.any() else float("nan")
            return (f"{name}: output '{k}' differs at {int(bad.sum())}/{bad.size} elements, "
                    f"max abs err {max_abs:.3g} (max |ref| {float(np.abs(rr[fin]).max()) if fin.any() else 0:.3g})")
    return None


def max_errors(ref: dict, got: dict) -> dict:
    out = {}
    for k, r in ref.items():
        g = np.asarray(got[k]).astype(np.float64)
        rr = r.astype(np.float64)
        fin = np.isfinite(rr) & np.isfinite(g)
        if fin.any():
            d = np.abs(g[fin] - rr[fin])
            out[k] = {"max_abs": float(d.max()),
                      "max_rel": float((d / np.maximum(np.abs(rr[fin]), 1e-6)).max())}
    return out


# ------------------------------------------------------------------ the engines
class Runner:
    """One engine's call for a pool of feeds: call(i) runs on pool[i % len(pool)]."""

    def __init__(self, name, fn, pool):
        self.name, self.fn, self.pool, self.i = name, fn, pool, 0

    def block(self, n: int) -> tuple[np.ndarray, float]:
        """n calls; per-call ns and the block's wall seconds (process CPU seconds in self.cpu)."""
        fn, pool, k = self.fn, self.pool, len(self.pool)
        ts = np.empty(n, dtype=np.int64)
        clock = time.perf_counter_ns
        i = self.i
        c_start = time.process_time()
        t_start = clock()
        for j in range(n):
            feeds = pool[i % k]
            i += 1
            t0 = clock()
            fn(feeds)
            ts[j] = clock() - t0
        wall = (clock() - t_start) * 1e-9
        self.cpu = time.process_time() - c_start
        self.i = i
        return ts, wall


def make_runners(ksess, osess, pool, ort_outputs, out_bufs):
    ort_names = list(ort_outputs)

    def kaiwu(feeds):
        return ksess.run(feeds)

    def kaiwu_out(feeds):
        return ksess.run(feeds, out=out_bufs)

    def ort_run(feeds):
        return osess.run(ort_names, feeds)

    return {"kaiwu": Runner("kaiwu", kaiwu, pool), "kaiwu_out": Runner("kaiwu_out", kaiwu_out, pool),
            "ort": Runner("ort", ort_run, pool)}


def time_config(runners: dict, batch: int, preset: dict, deadline: float, gap_s: float,
                first_call_s: dict | None = None) -> dict:
    """Warmup then interleaved repeats. Returns per-engine stats.

    first_call_s: seconds of each engine's first (correctness check) call; engines slower
    than 1 s per call skip the warmup: that call already built the plan and touched the weights.
    """
    # warmup: >= 2 calls and >= warmup_s per engine; also estimates the per-call cost
    est = {}
    for name, r in runners.items():
        first = (first_call_s or {}).get(name)
        if first is not None and first > 1.0:
            est[name] = first
            continue
        t_end = time.perf_counter() + preset["warmup_s"]
        wt = []
        while not wt or (len(wt) < 2 and wt[0] < 0.5) or (time.perf_counter() < t_end and len(wt) < 200):
            wt.append(r.block(1)[1])
        # the later half of the warmup estimates the cost
        est[name] = max(float(np.median(wt[len(wt) // 2:])), 1e-7)
    allowance_s = max(deadline - time.perf_counter(), 0.0)
    per_round = sum(est.values())
    repeats = preset["repeats"]
    block_s = preset["block_s"]
    # shrink to the allowance: each repeat costs >= one call per engine
    if repeats * max(per_round, block_s * len(runners)) > allowance_s:
        block_s = max(allowance_s / (repeats * len(runners)), 0.0)
        if repeats * per_round > allowance_s:
            repeats = max(3, int(allowance_s // max(per_round, 1e-9)))
    ncalls = {n: int(min(MAX_CALLS_PER_BLOCK, max(1, round(block_s / est[n])))) for n in runners}

    samples = {n: [] for n in runners}
    walls = {n: [] for n in runners}
    cpus = {n: [] for n in runners}
    names = list(runners)
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for rep in range(repeats):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for n in order:
                if gap_s:
                    time.sleep(gap_s)  # lets the other engine's pool threads stop spinning
                ts, wall = runners[n].block(ncalls[n])
                samples[n].append(ts)
                walls[n].append(wall)
                cpus[n].append(runners[n].cpu / len(ts))
    finally:
        if gc_was:
            gc.enable()

    stats = {}
    for n in runners:
        med = [float(np.median(s)) * 1e-3 for s in samples[n]]
        p90 = [pct(s, 90) * 1e-3 for s in samples[n]]
        thr = [batch * len(s) / w for s, w in zip(samples[n], walls[n])]
        allv = np.concatenate(samples[n]) * 1e-3
        stats[n] = {
            "median_us": float(np.median(med)),
            "p90_us": float(np.median(p90)),
            "min_us": float(allv.min()),
            "throughput": float(np.median(thr)),
            # process CPU time per call (all threads, spinning included): insensitive to
            # preemption by other processes; with 1 thread it is the compute cost itself
            "cpu_us": float(np.median(cpus[n])) * 1e6,
            "repeat_median_us": med,
            "calls_per_repeat": ncalls[n],
            "repeats": repeats,
        }
    return stats


# ------------------------------------------------------------------ main loop
def run(args) -> dict:
    import onnxruntime as ort
    import kaiwu_infer

    ort.set_default_logger_severity(3)
    preset = dict(PRESETS["quick" if args.quick else "full"])
    if args.repeats:
        preset["repeats"] = args.repeats
    if args.block_s:
        preset["block_s"] = args.block_s
    batches = parse_list(args.batch, int) if args.batch else preset["batches"]
    threads = parse_threads(args.threads)
    budget_s = args.budget_s if args.budget_s else preset["budget_s"]

    policies = load_policies(args.policies_file)
    default = list(getattr(policies, "NAMES", POLICY_ORDER))
    known = list(getattr(policies, "ALL_NAMES", default))  # more policies by name (unit_transformer)
    names = []
    for p in parse_list(args.policies) if args.policies else default:
        p = ALIASES.get(p, p)
        if p not in known:
            sys.exit(f"unknown policy {p!r}; known: {', '.join(known)}")
        if p not in names:
            names.append(p)

    try:  # torch is only needed to export; keep it from competing for cores afterwards
        import torch
        torch.set_num_threads(1)
    except Exception:  # noqa: BLE001
        pass

    result = {
        "command": "".join(f"{k}={os.environ[k]} " for k in sorted(os.environ) if k.startswith("KAIWU_"))
        + "PYTHONPATH=python python " + " ".join(shlex.quote(a) for a in sys.argv),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "machine": lscpu_info(),
        "versions": versions(kaiwu_infer, ort),
        "settings": {"threads": threads, "batches": batches, "policies": names,
                     "repeats": preset["repeats"], "block_s": preset["block_s"],
                     "warmup_s": preset["warmup_s"], "rtol": args.rtol, "atol": args.atol,
                     "budget_s": budget_s, "gap_s": args.gap_s,
                     "ort_graph_optimization": "ORT_ENABLE_ALL", "ort_inter_op_threads": 1,
                     "kaiwu_optimize": not args.no_optimize},
        "loadavg_start": list(os.getloadavg()),
        "describe": {},
        "results": [],
    }

    tmp = tempfile.mkdtemp(prefix="kaiwu_bench_")
    paths = {}
    for p in names:
        t0 = time.perf_counter()
        paths[p] = policies.export_onnx(p, os.path.join(tmp, f"{p}.onnx")) or os.path.join(tmp, f"{p}.onnx")
        log(args, f"exported {p} ({time.perf_counter() - t0:.1f}s, {os.path.getsize(paths[p]) / 1e6:.2f} MB)")
    gc.collect()

    n_configs = len(names) * len(threads) * len(batches)
    t_begin = time.perf_counter()
    done = 0
    for p in names:
        for nt in threads:
            so = ort.SessionOptions()
            so.intra_op_num_threads = nt
            so.inter_op_num_threads = 1
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            osess = ort.InferenceSession(paths[p], so, providers=["CPUExecutionProvider"])
            ksess, kerr = None, None
            try:
                ksess = kaiwu_infer.Session(paths[p], threads=nt, optimize=not args.no_optimize)
                if p not in result["describe"]:
                    try:
                        result["describe"][p] = ksess.describe()
                    except Exception as e:  # noqa: BLE001
                        result["describe"][p] = f"describe() failed: {e}"
            except Exception as e:  # noqa: BLE001 - reported in the table
                kerr = f"{type(e).__name__}: {e}"
            for b in batches:
                rec = {"policy": p, "batch": b, "threads": nt, "status": "ok"}
                elapsed = time.perf_counter() - t_begin
                left = n_configs - done
                allowance = max((budget_s - elapsed) / max(left, 1), 0.5)
                try:
                    if kerr:
                        raise RuntimeError(kerr)
                    rec.update(bench_one(args, policies, p, b, ksess, osess, preset, allowance))
                except Exception as e:  # noqa: BLE001
                    rec["status"] = "error"
                    rec["error"] = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
                    if args.verbose:
                        traceback.print_exc()
                done += 1
                result["results"].append(rec)
                log(args, fmt_row(rec) + f"   [{done}/{n_configs}, {time.perf_counter() - t_begin:.0f}s]")
                write_outputs(result, args, final=False)
            del ksess, osess
            gc.collect()
    result["loadavg_end"] = list(os.getloadavg())
    result["elapsed_s"] = round(time.perf_counter() - t_begin, 1)
    return result


def bench_one(args, policies, p, batch, ksess, osess, preset, allowance) -> dict:
    deadline = time.perf_counter() + allowance
    # input pool: fresh random inputs, several sets so that caches see new data
    one = policies.make_inputs(p, batch, seed=0)
    set_bytes = sum(a.nbytes for a in one.values())
    npool = int(min(8, max(2, POOL_BYTES // max(set_bytes, 1))))
    pool = [one] + [policies.make_inputs(p, batch, seed=s) for s in range(1, npool)]
    for feeds in pool:  # the engines get exactly the C-contiguous arrays they expect
        for k in feeds:
            feeds[k] = np.ascontiguousarray(feeds[k])

    # correctness, once per config, before timing
    onames = [o.name for o in osess.get_outputs()]
    first = {}
    t0 = time.perf_counter()
    ref = dict(zip(onames, osess.run(onames, pool[0])))
    first["ort"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = {k: np.array(v) for k, v in ksess.run(pool[0]).items()}
    first["kaiwu"] = time.perf_counter() - t0
    out_bufs = {k: np.empty_like(v) for k, v in ref.items()}
    for v in out_bufs.values():
        v.fill(np.nan) if v.dtype.kind == "f" else None
    t0 = time.perf_counter()
    ksess.run(pool[0], out=out_bufs)
    first["kaiwu_out"] = time.perf_counter() - t0
    rec = {"pool": npool, "input_bytes": set_bytes, "max_err": max_errors(ref, got),
           "first_call_us": {k: v * 1e6 for k, v in first.items()}}
    bad = compare("run()", ref, got, args.rtol, args.atol) or \
        compare("run(out=)", ref, out_bufs, args.rtol, args.atol)
    if bad:
        rec["status"] = "mismatch"
        rec["error"] = bad
        return rec

    runners = make_runners(ksess, osess, pool, onames, out_bufs)
    stats = time_config(runners, batch, preset, deadline, args.gap_s, first)
    rec["engines"] = stats
    k, ko, o = stats["kaiwu"]["median_us"], stats["kaiwu_out"]["median_us"], stats["ort"]["median_us"]
    rec["ratio"] = o / k
    rec["ratio_out"] = o / ko
    rec["ratio_cpu"] = stats["ort"]["cpu_us"] / max(stats["kaiwu"]["cpu_us"], 1e-9)
    return rec


# ------------------------------------------------------------------ per-op breakdown
def op_breakdown(args) -> dict:
    """Times every node of each policy as a one-node model on both engines.

    Intermediate values come from one onnxruntime run of the unoptimized graph with every
    tensor exposed as an output; each node is then a model whose inputs are its activations
    and whose initializers are its weights. Sums by op type show where each engine spends its
    time (fusions across nodes are not captured; each node also pays one call's overhead).
    """
    import onnx
    from onnx import helper, numpy_helper
    import onnxruntime as ort
    import kaiwu_infer

    ort.set_default_logger_severity(3)
    policies = load_policies(args.policies_file)
    names = [ALIASES.get(p, p) for p in (parse_list(args.policies) if args.policies else POLICY_ORDER)]
    batch = (parse_list(args.batch, int) if args.batch else [32])[0]
    nt = parse_threads(args.threads)[0]
    tmp = tempfile.mkdtemp(prefix="kaiwu_ops_")
    out = {"command": "".join(f"{k}={os.environ[k]} " for k in sorted(os.environ) if k.startswith("KAIWU_"))
        + "PYTHONPATH=python python " + " ".join(shlex.quote(a) for a in sys.argv),
           "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "batch": batch, "threads": nt, "machine": lscpu_info(),
           "loadavg_start": list(os.getloadavg()), "policies": {}}
    preset = dict(repeats=args.repeats or 3, block_s=args.block_s or 0.05, warmup_s=0.03)

    def sess_pair(model_bytes):
        so = ort.SessionOptions()
        so.intra_op_num_threads = nt
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        o = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        return kaiwu_infer.Session(model_bytes, threads=nt), o

    for p in names:
        path = policies.export_onnx(p, os.path.join(tmp, f"{p}.onnx"))
        model = onnx.load(path)
        g = model.graph
        inits = {t.name: t for t in g.initializer}
        feeds = policies.make_inputs(p, batch, seed=0)
        # every intermediate as an output of an unoptimized ort session
        full = onnx.ModelProto()
        full.CopyFrom(model)
        have = {o.name for o in full.graph.output}
        for node in full.graph.node:
            for t in node.output:
                if t and t not in have:
                    full.graph.output.append(onnx.ValueInfoProto(name=t))
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        fs = ort.InferenceSession(full.SerializeToString(), so, providers=["CPUExecutionProvider"])
        onames = [o.name for o in fs.get_outputs()]
        values = dict(feeds)
        values.update(zip(onames, fs.run(onames, feeds)))
        rows = []
        for i, node in enumerate(g.node):
            if node.op_type == "Constant":
                continue
            ins, inis, nfeeds = [], [], {}
            for t in node.input:
                if not t:
                    continue
                if t in inits:
                    inis.append(inits[t])
                elif t in values and t not in nfeeds:
                    v = np.ascontiguousarray(values[t])
                    if t not in feeds and v.dtype.kind in "iu" and v.ndim <= 1 and v.size <= 8:
                        inis.append(numpy_helper.from_array(v, t))  # computed shapes/axes stay constant
                        continue
                    nfeeds[t] = v
                    ins.append(helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape))
            outs = [helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(np.asarray(values[t]).dtype),
                                                  np.asarray(values[t]).shape) for t in node.output if t]
            sub = helper.make_model(helper.make_graph([node], f"n{i}", ins, outs, inis),
                                    opset_imports=model.opset_import, ir_version=model.ir_version)
            row = {"node": node.name or f"#{i}", "op": node.op_type,
                   "in_shapes": [list(v.shape) for v in nfeeds.values()]}
            try:
                ks, os_ = sess_pair(sub.SerializeToString())
                onm = [o.name for o in os_.get_outputs()]
                bufs = {k: np.empty_like(v) for k, v in zip(onm, os_.run(onm, nfeeds))}
                runners = make_runners(ks, os_, [nfeeds], onm, bufs)
                del runners["kaiwu_out"]
                st = time_config(runners, batch, preset, time.perf_counter() + 2.0, 0.002)
                row["kaiwu_us"] = st["kaiwu"]["median_us"]
                row["ort_us"] = st["ort"]["median_us"]
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
            rows.append(row)
        by_op = {}
        for r in rows:
            if "error" in r:
                continue
            d = by_op.setdefault(r["op"], {"count": 0, "kaiwu_us": 0.0, "ort_us": 0.0})
            d["count"] += 1
            d["kaiwu_us"] += r["kaiwu_us"]
            d["ort_us"] += r["ort_us"]
        out["policies"][p] = {"nodes": rows, "by_op": by_op}
        tk = sum(d["kaiwu_us"] for d in by_op.values())
        to = sum(d["ort_us"] for d in by_op.values())
        log(args, f"\n{p} (batch {batch}, {nt} thread(s)): sum of nodes kaiwu {fmt_us(tk)}us, ort {fmt_us(to)}us")
        for op, d in sorted(by_op.items(), key=lambda kv: -kv[1]["kaiwu_us"]):
            log(args, f"  {op:<20} x{d['count']:<3} kaiwu {fmt_us(d['kaiwu_us']):>9}us ({100 * d['kaiwu_us'] / max(tk, 1e-9):4.1f}%)"
                      f"  ort {fmt_us(d['ort_us']):>9}us  ort/kaiwu {d['ort_us'] / max(d['kaiwu_us'], 1e-9):.2f}")
        for r in rows:
            if "error" in r:
                log(args, f"  node {r['node']} ({r['op']}): {r['error']}")
    out["loadavg_end"] = list(os.getloadavg())
    return out


def ops_markdown(res: dict) -> str:
    lines = [f"# Per-op breakdown: kaiwu_infer vs onnxruntime (batch {res['batch']}, {res['threads']} thread(s))", "",
             f"- date: {res['date']}; machine: {res['machine'].get('model_name')}; load average "
             f"{fmt_load(res.get('loadavg_start'))} / {fmt_load(res.get('loadavg_end'))}",
             f"- command: `{res['command']}`",
             "- each node timed alone as a one-node model (median µs per call, including one call's "
             "overhead); fusions are not captured.", ""]
    for p, d in res["policies"].items():
        tk = sum(v["kaiwu_us"] for v in d["by_op"].values())
        to = sum(v["ort_us"] for v in d["by_op"].values())
        lines += [f"## {p}: sum kaiwu {fmt_us(tk)} µs, ort {fmt_us(to)} µs", "",
                  "| op | nodes | kaiwu µs | kaiwu share | ort µs | ratio ort/kaiwu |", "|---|---:|---:|---:|---:|---:|"]
        for op, v in sorted(d["by_op"].items(), key=lambda kv: -kv[1]["kaiwu_us"]):
            lines.append(f"| {op} | {v['count']} | {fmt_us(v['kaiwu_us'])} | {100 * v['kaiwu_us'] / max(tk, 1e-9):.0f}% | "
                         f"{fmt_us(v['ort_us'])} | {v['ort_us'] / max(v['kaiwu_us'], 1e-9):.2f} |")
        errs = [r for r in d["nodes"] if "error" in r]
        for r in errs:
            lines.append(f"\n- node {r['node']} ({r['op']}) not timed: {md_escape(r['error'])}")
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------ output
def log(args, msg):
    if not args.silent:
        print(msg, flush=True)


def fmt_us(x: float) -> str:
    if x >= 1000:
        return f"{x:,.0f}"
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.1f}"


def fmt_thr(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def fmt_row(r: dict) -> str:
    head = f"{r['policy']:<12} b={r['batch']:<5} t={r['threads']}"
    if r["status"] != "ok":
        return f"{head}  {r['status'].upper()}: {r.get('error', '')}"
    e = r["engines"]
    return (f"{head}  kaiwu {fmt_us(e['kaiwu']['median_us']):>7}us  out= {fmt_us(e['kaiwu_out']['median_us']):>7}us"
            f"  ort {fmt_us(e['ort']['median_us']):>7}us  ort/kaiwu {r['ratio']:.2f}x")


def markdown(result: dict) -> str:
    m, v, s = result["machine"], result["versions"], result["settings"]
    lines = [
        f"# kaiwu_infer vs onnxruntime: core benchmark ({result['mode']})",
        "",
        f"- date: {result['date']}",
        f"- machine: {m.get('model_name')}, {m.get('physical_cores', '?')} cores / "
        f"{m.get('logical_cpus')} logical CPUs{', ' + m['hypervisor_vendor'] + ' VM' if m.get('hypervisor_vendor') else ''}"
        f"{', SIMD ' + ' '.join(m['simd']) if m.get('simd') else ''}",
        f"- versions: kaiwu_infer {v.get('kaiwu_infer')} ({v.get('kaiwu_infer_git', '?')}), onnxruntime "
        f"{v.get('onnxruntime')}, numpy {v.get('numpy')}, torch {v.get('torch')}, python {v.get('python')}",
        f"- command: `{result['command']}`",
        *(["- **kaiwu_infer ran with optimize=False** (graph as imported)"] if not s.get("kaiwu_optimize", True) else []),
        f"- method: per config {s['repeats']} interleaved repeats x ~{s['block_s']}s blocks per engine after "
        f"warmup; µs = median over repeats of the per-call median (p90 likewise); samples/s = batch x "
        f"calls / block wall time (median over repeats). Outputs checked against onnxruntime first "
        f"(rtol {s['rtol']}, atol {s['atol']}).",
        f"- load average at start/end: {fmt_load(result.get('loadavg_start'))} / {fmt_load(result.get('loadavg_end'))}"
        + (f"; elapsed {result['elapsed_s']} s" if "elapsed_s" in result else ""),
        "",
        "ratio = ort µs / kaiwu µs (> 1: kaiwu_infer is faster). `out=` is kaiwu_infer writing into "
        "preallocated outputs. CPU µs = process CPU time per call (all threads, spin-waiting included); "
        "it ignores time preempted by other processes, so on a loaded machine the 1-thread CPU ratio is "
        "the most trustworthy compute comparison.",
        "",
        "| policy | batch | threads | kaiwu µs | kaiwu p90 | kaiwu out= µs | ort µs | ort p90 | ratio ort/kaiwu "
        "| ratio ort/kaiwu(out=) | kaiwu samples/s | ort samples/s | kaiwu CPU µs | ort CPU µs | CPU ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["results"]:
        if r["status"] != "ok":
            lines.append(f"| {r['policy']} | {r['batch']} | {r['threads']} | **{r['status']}** | "
                         f"{md_escape(r.get('error', ''))} | | | | | | | | | | |")
            continue
        e = r["engines"]
        k, ko, o = e["kaiwu"], e["kaiwu_out"], e["ort"]
        lines.append(
            f"| {r['policy']} | {r['batch']} | {r['threads']} | {fmt_us(k['median_us'])} | {fmt_us(k['p90_us'])} | "
            f"{fmt_us(ko['median_us'])} | {fmt_us(o['median_us'])} | {fmt_us(o['p90_us'])} | "
            f"**{r['ratio']:.2f}** | {r['ratio_out']:.2f} | {fmt_thr(k['throughput'])} | {fmt_thr(o['throughput'])} | "
            + (f"{fmt_us(k['cpu_us'])} | {fmt_us(o['cpu_us'])} | {r['ratio_cpu']:.2f} |" if "cpu_us" in k else "| | |"))
    ok = [r for r in result["results"] if r["status"] == "ok"]
    if ok:
        g = float(np.exp(np.mean([np.log(r["ratio"]) for r in ok])))
        lines += ["", f"Geometric mean of ort/kaiwu over {len(ok)} configs: **{g:.2f}x**."]
    lines.append("")
    return "\n".join(lines)


def md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def fmt_load(x) -> str:
    return "?" if not x else ", ".join(f"{v:.2f}" for v in x)


def write_outputs(result: dict, args, final: bool):
    os.makedirs(args.out_dir, exist_ok=True)
    stem = os.path.join(args.out_dir, args.name or ("core_quick" if args.quick else "core"))
    with open(stem + ".json", "w") as f:
        json.dump(result, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(markdown(result))
    if final and not args.no_plot:
        try:
            sys.path.insert(0, HERE)
            from plot_core import plot
            plot(result, stem + ".png")
        except Exception as e:  # noqa: BLE001 - the numbers matter more than the picture
            print(f"plot failed: {e}", file=sys.stderr)
    return stem


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", default="", help="comma list (default all five): "
                    + ",".join(POLICY_ORDER) + " (gru = gru_seq); also unit_transformer by name")
    ap.add_argument("--batch", "--batches", dest="batch", default="",
                    help="comma list of batch sizes (default 1,32,256,1024; --quick: 1,32)")
    ap.add_argument("--threads", default="1,2,all", help="comma list; 'all' = every logical CPU (default 1,2,all)")
    ap.add_argument("--quick", action="store_true", help="short run (< 2 min): batches 1,32, 3 short repeats, writes core_quick.*")
    ap.add_argument("--repeats", type=int, default=0, help="interleaved repeats per config (default 5, quick 3)")
    ap.add_argument("--block-s", type=float, default=0.0, help="seconds per timed block per engine")
    ap.add_argument("--budget-s", type=float, default=0.0,
                    help="whole-run time budget; slow configs get fewer/shorter repeats (default 840, quick 75)")
    ap.add_argument("--gap-s", type=float, default=0.01, help="pause before each block (default 0.01)")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--policies-file", default=DEFAULT_POLICIES_FILE)
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results", "dev-2core"))
    ap.add_argument("--name", default="", help="output file stem (default core, or core_quick with --quick)")
    ap.add_argument("--no-optimize", action="store_true",
                    help="kaiwu_infer Session(optimize=False): the graph as imported (diagnostics)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--silent", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="print tracebacks of failing configs")
    ap.add_argument("--op-breakdown", action="store_true",
                    help="instead: time every node alone on both engines at the first --batch (default 32) "
                         "and --threads value; writes <out-dir>/core_ops_b<batch>_t<threads>.{json,md}")
    args = ap.parse_args(argv)
    if args.op_breakdown:
        res = op_breakdown(args)
        os.makedirs(args.out_dir, exist_ok=True)
        stem = os.path.join(args.out_dir, args.name or f"core_ops_b{res['batch']}_t{res['threads']}")
        with open(stem + ".json", "w") as f:
            json.dump(res, f, indent=1)
        with open(stem + ".md", "w") as f:
            f.write(ops_markdown(res))
        log(args, f"\nwrote {stem}.json, {stem}.md")
        return res
    result = run(args)
    stem = write_outputs(result, args, final=True)
    log(args, f"\nwrote {stem}.json, {stem}.md" + ("" if args.no_plot else f", {stem}.png")
        + f" ({result['elapsed_s']} s)")
    return result


if __name__ == "__main__":
    main()
