"""Self-play stepping throughput and latency: one kaiwu_infer InferenceServer vs
every actor running onnxruntime itself vs a kaiwu_infer Session per actor.

Actors step a cheap fake environment with an IMPALA-style ResNet+LSTM policy and
an MLP policy: 64 and 256 in-process actors (as threads, and as asyncio coroutines
on one thread; one env each) and 4 processes x 32 envs. All modes run on the same cores in the same run. Also
measures the MLP-policy queries/s ceiling of one server.

    PYTHONPATH=python python bench/bench_server.py [--seconds 3] [--quick]

Writes server.md and server.json in --out (default bench/results/dev-2core; on another
machine pass bench/results/<machine>, see bench/results/README.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))



# ------------------------------------------------------------------ policies

def build_policies(outdir: str) -> dict:
    """Exports the two policies to ONNX; returns {name: Policy}. Uses
    tests/python/policies.py (impala_lstm: uint8 frames [B, 64, 64, 3] -> IMPALA ResNet
    -> LSTM 256; mlp: obs [B, 64] -> 256 -> 256 -> 18 actions + value)."""
    import policies

    out = {}
    for name in ("impala_lstm", "mlp"):
        path = policies.export_onnx(name, os.path.join(outdir, name + ".onnx"))
        feeds = policies.make_inputs(name, 1)
        obs_name = "frames" if name == "impala_lstm" else "obs"
        obs = feeds[obs_name]
        hid = feeds["h0"].shape[-1] if "h0" in feeds else 0
        out[name] = Policy(path, obs_name, obs.shape[1:], obs.dtype, hid > 0, hid)
    return out


class Policy:
    def __init__(self, path, obs_name, obs_shape, dtype, stateful, hidden):
        self.path, self.obs_name, self.obs_shape, self.dtype = path, obs_name, tuple(obs_shape), dtype
        self.stateful, self.hidden = stateful, hidden


# ------------------------------------------------------------------ fake env

class FakeEnv:
    """n envs; a step costs a few microseconds of numpy."""

    def __init__(self, n, policy, seed):
        self.rng = np.random.default_rng(seed)
        if policy.dtype == np.uint8:
            self.obs = self.rng.integers(0, 256, (n, *policy.obs_shape)).astype(np.uint8)
        else:
            self.obs = self.rng.standard_normal((n, *policy.obs_shape)).astype(policy.dtype)
        self.t = np.zeros(n, np.int64)

    def step(self, logits):
        a = logits.argmax(-1).reshape(-1, *([1] * (self.obs.ndim - 1)))
        if self.obs.dtype == np.uint8:
            self.obs[:, :1] += a.astype(np.uint8)  # wraps; touches one image row
        else:
            self.obs *= 0.9
            self.obs += 0.01 * a.astype(self.obs.dtype)
        self.t += 1
        return self.rng.random(len(self.t)) < 0.01


# ------------------------------------------------------------------ actors

def _lat_stats(lat):
    lat = np.asarray(lat) * 1e6
    return float(np.percentile(lat, 50)), float(np.percentile(lat, 99))


def actor_loop(step_fn, env, seconds, lat, counts, start_evt, stop_at):
    start_evt.wait()
    done = np.zeros(len(env.t), bool)
    n = 0
    while True:
        t0 = time.perf_counter()
        if t0 >= stop_at[0]:
            break
        logits = step_fn(env.obs, done)
        t1 = time.perf_counter()
        if t0 >= stop_at[1]:  # after warm-up
            lat.append(t1 - t0)
            n += len(env.t)
        done = env.step(logits)
    counts.append(n)


WORKERS = [1]
MAX_WAIT = [500]
SPLIT = [True]
PAD = [True]
DEVICE = ["cpu"]  # where the server's session runs (--device)
PRECISION = ["fp32"]  # the server session's precision (--precision)


def run_threads(mode, policy, n_actors, seconds, threads):
    import kaiwu_infer as ki

    path, stateful, on = policy.path, policy.stateful, policy.obs_name
    if mode == "server":
        srv = ki.InferenceServer(path, threads=threads, workers=WORKERS[0], max_wait_us=MAX_WAIT[0],
                                 split_batches=SPLIT[0], pad_batches=PAD[0], device=DEVICE[0], precision=PRECISION[0],
                                 state={"h0": "hn", "c0": "cn"} if stateful else None)

        def make(a):
            def f(obs, done):
                return srv.infer(a, {on: obs}, done=done)["logits"]
            return f
    elif mode == "kaiwu_per_actor":
        sessions = [ki.Session(path, threads=1) for _ in range(n_actors)]
        make = lambda a: _session_step(sessions[a].run, policy, 1)  # noqa: E731
    elif mode == "no_engine":
        # The harness alone: each policy call only releases and retakes the GIL
        # (as any engine call must) and returns fixed logits. The steps/s of any
        # engine with Python-thread actors is bounded by this.
        fixed = np.random.default_rng(0).standard_normal((1, 18)).astype(np.float32)

        def make(a):
            def f(obs, done):
                time.sleep(0)
                return fixed
            return f
    else:  # onnxruntime, one session per actor
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        sessions = [ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]) for _ in range(n_actors)]
        make = lambda a: _session_step(lambda feeds, s=sessions[a]: dict(zip(["logits", "value", "hn", "cn"], s.run(None, feeds))), policy, 1)  # noqa: E731
    envs = [FakeEnv(1, policy, a) for a in range(n_actors)]
    lats = [[] for _ in range(n_actors)]
    counts = []
    start = threading.Event()
    now = time.perf_counter()
    warm = 0.5
    stop_at = [0.0, 0.0]
    ts = [threading.Thread(target=actor_loop, args=(make(a), envs[a], seconds, lats[a], counts, start, stop_at))
          for a in range(n_actors)]
    [t.start() for t in ts]
    now = time.perf_counter()
    stop_at[1] = now + warm
    stop_at[0] = now + warm + seconds
    if mode == "server":
        srv.reset_stats()
    start.set()
    [t.join() for t in ts]
    res = _summarize(counts, lats, seconds)
    if mode == "server":
        st = srv.stats()
        res["server"] = {k: st[k] for k in ("mean_batch_rows", "queue_wait_p50_us", "queue_wait_p99_us",
                                            "run_mean_us", "gather_mean_us", "session_mean_us",
                                            "scatter_mean_us", "batches", "sliced_batches",
                                            "batch_rows_hist")}
        srv.close()
    return res


def run_async(mode, policy, n_actors, seconds, threads):
    """n_actors asyncio coroutines on one thread, each stepping its own env through
    ``InferenceServer.infer_async`` (mode "server") or only yielding to the loop
    (mode "no_engine": the bound of this harness)."""
    import asyncio

    import kaiwu_infer as ki

    on = policy.obs_name
    srv = None
    if mode == "server":
        srv = ki.InferenceServer(policy.path, threads=threads, workers=WORKERS[0], max_wait_us=MAX_WAIT[0],
                                 split_batches=SPLIT[0], pad_batches=PAD[0], device=DEVICE[0], precision=PRECISION[0],
                                 state={"h0": "hn", "c0": "cn"} if policy.stateful else None)
    fixed = np.random.default_rng(0).standard_normal((1, 18)).astype(np.float32)
    envs = [FakeEnv(1, policy, a) for a in range(n_actors)]
    lats = [[] for _ in range(n_actors)]
    counts = []
    stop_at = [0.0, 0.0]

    async def actor(a):
        env, lat, n = envs[a], lats[a], 0
        done = np.zeros(1, bool)
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at[0]:
                break
            if srv is not None:
                logits = (await srv.infer_async(a, {on: env.obs}, done=done))["logits"]
            else:
                await asyncio.sleep(0)
                logits = fixed
            t1 = time.perf_counter()
            if t0 >= stop_at[1]:
                lat.append(t1 - t0)
                n += 1
            done = env.step(logits)
        counts.append(n)

    async def main():
        now = time.perf_counter()
        stop_at[1] = now + 0.5
        stop_at[0] = now + 0.5 + seconds
        if srv is not None:
            srv.reset_stats()
        await asyncio.gather(*[actor(a) for a in range(n_actors)])

    asyncio.run(main())
    res = _summarize(counts, lats, seconds)
    if srv is not None:
        st = srv.stats()
        res["server"] = {k: st[k] for k in ("mean_batch_rows", "queue_wait_p50_us", "queue_wait_p99_us",
                                            "run_mean_us", "gather_mean_us", "session_mean_us",
                                            "scatter_mean_us", "batches", "sliced_batches",
                                            "batch_rows_hist")}
        srv.close()
    return res


def _session_step(run, policy, rows):
    on = policy.obs_name
    if not policy.stateful:
        return lambda obs, done: run({on: obs})["logits"]
    h = np.zeros((1, rows, policy.hidden), np.float32)
    c = np.zeros((1, rows, policy.hidden), np.float32)
    st = [h, c]

    def f(obs, done):
        if done.any():
            st[0][:, done] = 0
            st[1][:, done] = 0
        r = run({on: obs, "h0": st[0], "c0": st[1]})
        st[0], st[1] = np.ascontiguousarray(r["hn"]), np.ascontiguousarray(r["cn"])
        return r["logits"]
    return f


def _summarize(counts, lats, seconds):
    all_lat = [x for l in lats for x in l]
    p50, p99 = _lat_stats(all_lat) if all_lat else (0.0, 0.0)
    return {"steps_per_s": sum(counts) / seconds, "p50_us": p50, "p99_us": p99}


# ------------------------------------------------------------------ processes

def proc_main(mode, policy, rows, seconds, shm_name, q, go, seed):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import kaiwu_infer as ki

    path, on = policy.path, policy.obs_name
    if mode == "server":
        c = ki.connect(shm_name, timeout=60)
        step = lambda obs, done: c.infer({on: obs}, done=done, copy=False)["logits"]  # noqa: E731
    elif mode == "kaiwu_per_actor":
        s = ki.Session(path, threads=1)
        step = _session_step(s.run, policy, rows)
    else:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        names = [o.name for o in s.get_outputs()]
        step = _session_step(lambda feeds: dict(zip(names, s.run(None, feeds))), policy, rows)
    env = FakeEnv(rows, policy, seed)
    step(env.obs, np.zeros(rows, bool))  # warm
    q.put(("ready", None))
    t_start = go.get()
    lat, counts = [], []
    ev = threading.Event()
    ev.set()
    actor_loop(step, env, seconds, lat, counts, ev, [t_start + 0.5 + seconds, t_start + 0.5])
    q.put(("done", (counts[0], lat)))


def run_procs(mode, policy, n_procs, rows, seconds, threads, shm_name_out=None):
    import kaiwu_infer as ki

    path, stateful = policy.path, policy.stateful
    ctx = mp.get_context("spawn")
    q, gos = ctx.Queue(), [ctx.Queue() for _ in range(n_procs)]
    srv, name = None, None
    if mode == "server":
        srv = ki.InferenceServer(path, threads=threads, workers=WORKERS[0], max_wait_us=MAX_WAIT[0],
                                 split_batches=SPLIT[0], pad_batches=PAD[0], device=DEVICE[0], precision=PRECISION[0],
                                 state={"h0": "hn", "c0": "cn"} if stateful else None)
        name = srv.serve_shm(max_clients=n_procs, max_rows=rows)
    ps = [ctx.Process(target=proc_main, args=(mode, policy, rows, seconds, name, q, gos[i], i))
          for i in range(n_procs)]
    [p.start() for p in ps]
    for _ in ps:
        assert q.get(timeout=120)[0] == "ready"
    if srv:
        srv.reset_stats()
    t0 = time.perf_counter()
    # perf_counter is CLOCK_MONOTONIC on Linux: comparable across processes
    for g in gos:
        g.put(t0)
    counts, lats = [], []
    for _ in ps:
        kind, (n, lat) = q.get(timeout=120 + seconds)
        counts.append(n)
        lats.append(lat)
    [p.join(30) for p in ps]
    res = _summarize(counts, lats, seconds)
    if srv:
        st = srv.stats()
        res["server"] = {k: st[k] for k in ("mean_batch_rows", "queue_wait_p50_us", "queue_wait_p99_us",
                                            "run_mean_us", "gather_mean_us", "session_mean_us",
                                            "scatter_mean_us", "batches", "sliced_batches",
                                            "batch_rows_hist")}
        srv.close()
    return res


# ------------------------------------------------------------------ main

def env_prefix() -> str:
    """The engine switches set for this run (every KAIWU_* variable: KAIWU_CUDNN,
    KAIWU_FUSED_ATTENTION, ...), as a command prefix."""
    return "".join(f"{k}={os.environ[k]} " for k in sorted(os.environ) if k.startswith("KAIWU_"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--quick", action="store_true", help="MLP only, 64 actors")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "dev-2core"))
    ap.add_argument("--server-threads", type=int, default=0, help="server session threads (0: all cores)")
    ap.add_argument("--ceiling-only", action="store_true", help="only the MLP queries/s ceiling")
    ap.add_argument("--workers", type=int, default=1, help="server batch workers")
    ap.add_argument("--max-wait-us", type=int, default=500, help="server max_wait_us")
    ap.add_argument("--sweep", action="store_true", help="server only: impala_lstm 64 threads and 4x32")
    ap.add_argument("--policies", default="impala_lstm,mlp", help="comma list of policies to run")
    ap.add_argument("--actors", default="64,256,64async,256async,procs",
                    help="comma list of actor setups: thread counts (N), asyncio actor counts (Nasync: "
                         "N coroutines on one thread; server and no_engine modes only) and/or 'procs' "
                         "(4 processes x 32 envs)")
    ap.add_argument("--no-ceiling", action="store_true", help="skip the MLP queries/s ceiling runs")
    ap.add_argument("--name", default="", help="output file stem (default server)")
    ap.add_argument("--device", default="cpu", help="where the server's session runs: cpu or cuda")
    ap.add_argument("--precision", default="fp32", help="the server session's precision: fp32, fp16 or bf16 (GPU)")
    ap.add_argument("--modes", default="server,kaiwu_per_actor,onnxruntime_per_actor,no_engine",
                    help="comma list of modes to run (no_engine: threads only, the harness's own bound)")
    ap.add_argument("--no-split", action="store_true",
                    help="server runs each batch whole with intra-op threads (split_batches=False)")
    ap.add_argument("--no-pad", action="store_true",
                    help="server runs batches and slices at their own row counts (pad_batches=False)")
    args = ap.parse_args()
    import tempfile

    import kaiwu_infer as ki

    cores = os.cpu_count()
    threads = args.server_threads or cores  # server session threads (default: every core)
    WORKERS[0] = args.workers
    MAX_WAIT[0] = args.max_wait_us
    SPLIT[0] = not args.no_split
    PAD[0] = not args.no_pad
    DEVICE[0] = args.device
    PRECISION[0] = args.precision
    if args.sweep:
        policies = build_policies(tempfile.mkdtemp())
        for n in (64,):
            r = run_threads("server", policies["impala_lstm"], n, args.seconds, threads)
            print(f"SWEEP threads={threads} workers={args.workers} max_wait_us={args.max_wait_us} split={SPLIT[0]} impala {n} threads: {r}", flush=True)
        r = run_procs("server", policies["impala_lstm"], 4, 32, args.seconds, threads)
        print(f"SWEEP threads={threads} workers={args.workers} max_wait_us={args.max_wait_us} split={SPLIT[0]} impala 4x32: {r}", flush=True)
        return
    tmp = tempfile.mkdtemp()
    policies = build_policies(tmp)
    modes = args.modes.split(",")
    known = ("server", "kaiwu_per_actor", "onnxruntime_per_actor", "no_engine")
    if any(m not in known for m in modes):
        ap.error(f"--modes: each of {', '.join(known)}")
    results = []
    configs = []
    setups = ["64"] if args.quick else args.actors.split(",")
    for pname in (["mlp"] if args.quick else args.policies.split(",")):
        for a in setups:
            if a == "procs":
                configs.append((pname, "4 processes x 32 envs", ("procs", 4, 32)))
            elif a.endswith("async"):
                n = int(a[:-len("async")])
                configs.append((pname, f"{n} asyncio actors x 1 env", ("async", n)))
            else:
                configs.append((pname, f"{int(a)} threads x 1 env", ("threads", int(a))))
    for pname, label, cfg in ([] if args.ceiling_only else configs):
        for mode in modes:
            if mode == "no_engine" and cfg[0] == "procs":
                continue
            if cfg[0] == "async" and mode not in ("server", "no_engine"):
                continue  # per-actor sessions block: their in-process form is threads
            t = time.time()
            if cfg[0] == "threads":
                r = run_threads(mode, policies[pname], cfg[1], args.seconds, threads)
            elif cfg[0] == "async":
                r = run_async(mode, policies[pname], cfg[1], args.seconds, threads)
            else:
                r = run_procs(mode, policies[pname], cfg[1], cfg[2], args.seconds, threads)
            r.update(policy=pname, actors=label, mode=mode, wall_s=time.time() - t)
            results.append(r)
            print(json.dumps(r), flush=True)

    # MLP queries/s ceiling: 1-row requests from many shm client processes and from threads.
    ceiling = []
    ceiling_runs = [] if args.no_ceiling else [(4, 1)] if args.quick else [(8, 1), (32, 1), (16, 16), (32, 32)]
    for n_procs, rows in ceiling_runs:
        r = run_procs("server", policies["mlp"], n_procs, rows, args.seconds, threads)
        r.update(what=f"{n_procs} processes x {rows} row{'s' if rows > 1 else ''} (shm)",
                 queries_per_s=r["steps_per_s"] / rows)
        ceiling.append(r)
        print(json.dumps(r), flush=True)
    if not args.no_ceiling:
        r = run_threads("server", policies["mlp"], 64, args.seconds, threads)
        r.update(what="64 threads x 1 row (in-process)", queries_per_s=r["steps_per_s"])
        ceiling.append(r)
        print(json.dumps(r), flush=True)
    # Raw engine time per batch of 256 (what batching alone could reach).
    s = ki.Session(policies["mlp"].path, threads=threads, device=args.device)
    x = np.random.default_rng(0).standard_normal((256, *policies["mlp"].obs_shape)).astype(np.float32)
    for _ in range(20):
        s.run({"obs": x})
    t0 = time.perf_counter()
    reps = 200
    for _ in range(reps):
        s.run({"obs": x})
    engine_rows_s = reps * 256 / (time.perf_counter() - t0)

    meta = {
        "machine": f"{platform.node()} {platform.machine()} {platform.processor() or ''} cores={cores}",
        "python": sys.version.split()[0],
        "command": env_prefix() + "PYTHONPATH=python python bench/bench_server.py " + " ".join(sys.argv[1:]),
        "server_threads": threads,
        "server_precision": PRECISION[0],
        "server_device": ki.Session(policies["mlp"].path, threads=1, device=args.device).device,
        "baseline_threads": "1 per actor session (intra_op=inter_op=1 for onnxruntime)",
        "seconds_per_run": args.seconds,
        "server_options": f"max_batch=256, max_wait_us={args.max_wait_us}, workers={args.workers}, "
                          f"pad_batches={PAD[0]}, split_batches={SPLIT[0]}",
        "mlp_engine_rows_per_s_batch256": engine_rows_s,
    }
    os.makedirs(args.out, exist_ok=True)
    stem = args.name or ("server" if not args.ceiling_only else f"server_ceiling_t{threads}")
    with open(os.path.join(args.out, stem + ".json"), "w") as f:
        json.dump({"meta": meta, "results": results, "ceiling": ceiling}, f, indent=1)
    lines = ["# InferenceServer benchmark", ""]
    for k, v in meta.items():
        lines.append(f"- {k}: {v}")
    lines += ["", "Steps/s = env steps (rows) per second over all actors; latency = one actor's",
              "policy call (queueing included), p50/p99 over all calls. no_engine: the in-process",
              "harness alone (each call only releases and retakes the GIL; for asyncio actors, only",
              "yields to the loop), the bound for any engine. x ort: steps/s over onnxruntime per",
              "actor with the same policy and actor count, in this run (asyncio actors: against",
              "the threads row, the in-process form of blocking per-actor sessions).", "",
              "| policy | actors | mode | steps/s | x ort | p50 us | p99 us | server mean batch | "
              "server queue wait p50/p99 us |",
              "|---|---|---|---:|---:|---:|---:|---:|---|"]

    def ort_rate(r):
        label = r["actors"].replace("asyncio actors", "threads")
        for o in results:
            if o["policy"] == r["policy"] and o["actors"] == label and o["mode"] == "onnxruntime_per_actor":
                return o["steps_per_s"]
        return None

    for r in results:
        s = r.get("server")
        base = ort_rate(r)
        ratio = f"{r['steps_per_s'] / base:.2f}" if base else "-"
        batch = f"{s['mean_batch_rows']:.1f}" if s else "-"
        wait = f"{s['queue_wait_p50_us']:.0f} / {s['queue_wait_p99_us']:.0f}" if s else "-"
        lines.append(f"| {r['policy']} | {r['actors']} | {r['mode']} | {r['steps_per_s']:.0f} | {ratio} | "
                     f"{r['p50_us']:.0f} | {r['p99_us']:.0f} | {batch} | {wait} |")
    if ceiling:
        lines += ["", "## MLP queries/s ceiling of one server", "",
                  "| clients | queries/s | rows/s | p50 us | p99 us | mean batch rows | batch run mean us |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
    for r in ceiling:
        s = r["server"]
        lines.append(f"| {r['what']} | {r['queries_per_s']:.0f} | {r['steps_per_s']:.0f} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | "
                     f"{s['mean_batch_rows']:.1f} | {s['run_mean_us']:.0f} |")
    lines.append(f"\nEngine alone ({args.device}), MLP batch 256: {engine_rows_s:.0f} rows/s.")
    with open(os.path.join(args.out, stem + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
