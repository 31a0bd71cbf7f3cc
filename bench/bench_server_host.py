"""The inference server's host side for large observation rows, alone: a trivial model
with a [B, 4, 84, 84] float32 input (113 KB a row, a Nature-CNN Atari observation) and
two small outputs (mean over each frame -> 18 logits and a value), served by one
InferenceServer to N client processes through shared memory, each sending 16-row
requests back to back. The model costs next to nothing, so what is measured is the
transport: clients writing rows into their slots, the server gathering them into the
batch (and, on a GPU, moving it to the device), results back, clients woken.

Reports rows/s, us/row and GB/s of observation bytes, the server's own per-batch stage
times (stats: gather, session run, scatter, finish), the share of the wall time its
batching thread was busy, the client processes' CPU time per request (a client that
spun while waiting would show ~its wall time), and in the same run two peers: the
session alone on a ready batch of the mean batch size (from numpy, and from
page-locked memory on a device) and one-thread memcpy of that batch.

    PYTHONPATH=python python bench/bench_server_host.py [--procs 4] [--seconds 3]
        [--device cuda --precision fp16] [--configs serial,auto] [--out-dir DIR --name NAME]

Configs, words joined by '_': ``serial`` (copy_threads=1: the batching thread copies
every row; default copy_threads=0), ``tN`` (copy_threads=N), ``pageable``
(KAIWU_SERVER_PINNED=0: on a device the batch is gathered into pageable memory and the
run stages it, the copy the server made before gathering into page-locked memory),
``w2`` (workers=2: one batch's copies overlap another's run); ``auto`` alone is the
default server. ``pageable_serial`` is the path before page-locked and threaded gathers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

OBS = (4, 84, 84)
ROW_BYTES = int(np.prod(OBS)) * 4
N_ACT = 18


def build_model(path: str) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, N_ACT + 1)).astype(np.float32)
    b = rng.standard_normal((N_ACT + 1,)).astype(np.float32)
    nodes = [
        helper.make_node("ReduceMean", ["obs", "axes"], ["m"], keepdims=0),
        helper.make_node("Gemm", ["m", "w", "b"], ["y"]),
        helper.make_node("Split", ["y", "split"], ["logits", "value"], axis=1),
    ]
    g = helper.make_graph(
        nodes, "host_bench",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["B", *OBS])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", N_ACT]),
         helper.make_tensor_value_info("value", TensorProto.FLOAT, ["B", 1])],
        [numpy_helper.from_array(np.array([2, 3], np.int64), "axes"), numpy_helper.from_array(w, "w"),
         numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array([N_ACT, 1], np.int64), "split")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.save(m, path)


def client_main(name, rows, seconds, q, go, seed):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import kaiwu_infer as ki

    c = ki.connect(name, timeout=60)
    rng = np.random.default_rng(seed)
    pool = [rng.standard_normal((rows, *OBS)).astype(np.float32) for _ in range(4)]
    for k in range(3):
        c.infer({"obs": pool[k]}, copy=False)
    q.put(("ready", None))
    t0 = go.get()
    while time.perf_counter() < t0:
        pass
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    calls = 0
    t_end = t0 + seconds
    while time.perf_counter() < t_end:
        out = c.infer({"obs": pool[calls % 4]}, copy=False)
        int(np.argmax(out["logits"][0]))
        calls += 1
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    c.close()
    q.put(("done", (calls, cpu)))


def run_config(model, cfg, a):
    import kaiwu_infer as ki

    words = cfg.split("_")
    if "pageable" in words:
        os.environ["KAIWU_SERVER_PINNED"] = "0"
    else:
        os.environ.pop("KAIWU_SERVER_PINNED", None)
    copy_threads = 0
    for w in words:
        if w == "serial":
            copy_threads = 1
        elif w[:1] == "t" and w[1:].isdigit():
            copy_threads = int(w[1:])
    workers = 2 if "w2" in words else 1
    srv = ki.InferenceServer(model, threads=a.threads, device=a.device, precision=a.precision,
                             max_batch=a.max_batch, max_wait_us=a.max_wait_us, copy_threads=copy_threads,
                             workers=workers, warmup=True)
    os.environ.pop("KAIWU_SERVER_PINNED", None)
    name = srv.serve_shm(max_clients=a.procs, max_rows=a.rows)
    ctx = mp.get_context("spawn")
    q, gos = ctx.Queue(), [ctx.Queue() for _ in range(a.procs)]
    ps = [ctx.Process(target=client_main, args=(name, a.rows, a.seconds, q, gos[i], i)) for i in range(a.procs)]
    [p.start() for p in ps]
    for _ in ps:
        assert q.get(timeout=120)[0] == "ready"
    t0 = time.perf_counter() + 0.2
    for g in gos:
        g.put(t0)
    time.sleep(max(0.0, t0 - time.perf_counter()))
    srv.reset_stats()
    io0 = srv.session.io_stats() if a.device != "cpu" else None
    calls, cpu = 0, 0.0
    for _ in ps:
        kind, (n, c) = q.get(timeout=120 + a.seconds)
        calls += n
        cpu += c
    st = srv.stats()
    io1 = srv.session.io_stats() if a.device != "cpu" else None
    [p.join(30) for p in ps]
    srv.close()
    rows = calls * a.rows
    rps = rows / a.seconds
    batches = max(1, st["batches"])
    stages = {k: st[k] for k in ("gather_mean_us", "session_mean_us", "scatter_mean_us", "finish_mean_us")}
    busy = sum(stages.values()) * 1e-6 * st["batches"] / max(1e-9, st["elapsed_s"]) / workers
    r = {"config": cfg, "copy_threads": copy_threads, "workers": workers, "pinned_inputs": st["pinned_inputs"],
         "rows_per_s": rps, "us_per_row": 1e6 / max(rps, 1e-9), "gb_per_s": rps * ROW_BYTES / 1e9,
         "requests": calls, "mean_batch_rows": st["mean_batch_rows"], "batches": st["batches"],
         **stages, "gather_gb_per_s": st["gathered_bytes"] / batches / max(1e-9, stages["gather_mean_us"]) / 1e3,
         "server_busy": busy, "client_cpu_us_per_request": 1e6 * cpu / max(1, calls),
         "client_cpu_share": cpu / (a.procs * a.seconds),
         "queue_wait_p50_us": st["queue_wait_p50_us"]}
    if io0 is not None:
        d = {k: io1[k] - io0[k] for k in ("runs", "h2d_bytes", "staging_copies", "staging_bytes")}
        r["staging_bytes_per_row"] = d["staging_bytes"] / max(1, st["rows"])
        r["h2d_bytes_per_row"] = d["h2d_bytes"] / max(1, st["rows"])
    return r


def peers(model, a, rows):
    """The session alone on a ready batch of `rows` rows (numpy; page-locked on a device),
    and one-thread memcpy of that batch."""
    import kaiwu_infer as ki

    rows = max(1, int(round(rows)))
    s = ki.Session(model, threads=a.threads, device=a.device, precision=a.precision)
    x = np.random.default_rng(1).standard_normal((rows, *OBS)).astype(np.float32)

    def rate(fn, reps_s=0.5):
        fn()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < reps_s:
            fn()
            n += 1
        return (time.perf_counter() - t0) / n

    out = {"rows": rows}
    t = rate(lambda: s.run({"obs": x}))
    out["session_numpy_us"] = t * 1e6
    if a.device != "cpu":
        xp = s.io_buffers(rows).inputs["obs"]
        xp[...] = x
        out["session_pinned_us"] = rate(lambda: s.run({"obs": xp})) * 1e6
    dst = np.empty_like(x)
    t = rate(lambda: np.copyto(dst, x))
    out["memcpy_us"] = t * 1e6
    out["memcpy_gb_per_s"] = x.nbytes / t / 1e9
    return out


def versions():
    import kaiwu_infer as ki

    commit = os.environ.get("KAIWU_COMMIT", "")  # a copy of the tree without its .git
    if not commit:
        try:
            commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True, timeout=5).stdout.strip()
        except Exception:  # noqa: BLE001 - not a checkout
            commit = ""
    return f"kaiwu_infer {ki.__version__}{f' ({commit})' if commit else ''}, numpy {np.__version__}, python {platform.python_version()}"


def machine():
    name = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} logical CPUs"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--threads", type=int, default=1, help="session threads")
    ap.add_argument("--max-batch", type=int, default=1024)
    ap.add_argument("--max-wait-us", type=int, default=300)
    ap.add_argument("--configs", default="serial,auto")
    ap.add_argument("--out-dir", default="")
    ap.add_argument("--name", default="server_host")
    a = ap.parse_args()
    import kaiwu_infer as ki

    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "host_bench.onnx")
    build_model(model)
    load0 = os.getloadavg()[0]
    runs = []
    for cfg in a.configs.split(","):
        r = run_config(model, cfg, a)
        runs.append(r)
        print(json.dumps(r), flush=True)
    peer = peers(model, a, np.mean([r["mean_batch_rows"] for r in runs]))
    print(json.dumps(peer), flush=True)
    dev = a.device
    if a.device != "cpu":
        dev = ki.Session(model, device=a.device).device
    res = {"runs": runs, "peers": peer, "machine": machine(), "device": dev, "versions": versions(),
           "argv": sys.argv[1:], "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "load": [load0, os.getloadavg()[0]]}
    if a.out_dir:
        os.makedirs(a.out_dir, exist_ok=True)
        with open(os.path.join(a.out_dir, a.name + ".json"), "w") as f:
            json.dump(res, f, indent=1)
        with open(os.path.join(a.out_dir, a.name + ".md"), "w") as f:
            f.write(render(res, a))


def render(res, a):
    L = [f"# Server host side, large rows ({a.name})", "",
         f"- machine: {res['machine']}; device: {res['device']}",
         f"- versions: {res['versions']}",
         f"- command: `PYTHONPATH=python python bench/bench_server_host.py {' '.join(res['argv'])}`",
         f"- date: {res['date']}; load average {res['load'][0]:.1f} at start, {res['load'][1]:.1f} at end",
         f"- {a.procs} client processes (shared memory) x {a.rows} rows of float32 {OBS} ({ROW_BYTES / 1e3:.0f} KB a row) "
         f"per request, back to back, {a.seconds} s per config; trivial model (ReduceMean + Gemm), "
         f"session threads {a.threads}, precision {a.precision}, max_batch {a.max_batch}, max_wait_us {a.max_wait_us}",
         "",
         "| config | copy_threads | workers | pinned | rows/s | us/row | GB/s | batch rows | gather us | session us | scatter us | finish us | gather GB/s | server busy | client CPU us/request | staging B/row |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        L.append(f"| {r['config']} | {r['copy_threads']} | {r['workers']} | {r['pinned_inputs']} | {r['rows_per_s']:,.0f} | {r['us_per_row']:.1f} | "
                 f"{r['gb_per_s']:.2f} | {r['mean_batch_rows']:.0f} | {r['gather_mean_us']:,.0f} | {r['session_mean_us']:,.0f} | "
                 f"{r['scatter_mean_us']:,.0f} | {r['finish_mean_us']:,.0f} | {r['gather_gb_per_s']:.1f} | {r['server_busy']:.2f} | "
                 f"{r['client_cpu_us_per_request']:,.0f} | {r.get('staging_bytes_per_row', 0):,.0f} |")
    p = res["peers"]
    L += ["", f"Peers (same run, a ready batch of {p['rows']} rows): session alone from numpy {p['session_numpy_us']:,.0f} us"
          + (f", from page-locked memory {p['session_pinned_us']:,.0f} us" if "session_pinned_us" in p else "")
          + f"; one-thread memcpy of the batch {p['memcpy_us']:,.0f} us ({p['memcpy_gb_per_s']:.1f} GB/s).", "",
          "Stage times are the server's stats, means per batch: gather (rows copied from the slots into the batch "
          "input), session (the run, device copies included), scatter (rows handed to requests), finish (results "
          "copied into the slots, clients woken). server busy: the share of wall time each batching thread spent in "
          "them (1.0: the server bounds the rate). client CPU: user+sys time of the client processes per request "
          "(a client that spun while waiting would show about its whole wait)."]
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
