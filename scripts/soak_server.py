#!/usr/bin/env python3
"""Server soak: an InferenceServer under churn for a long time, with its health over time.

    PYTHONPATH=python python scripts/soak_server.py --seconds 3600 --out bench/results/dev-2core

What runs (every period is a flag):
  * ``--actors`` actor threads in this process: each plays episodes of random length as a new
    actor id (joining), ``done=True`` at each episode's first step, rows 1-4, mostly the latest
    weights and sometimes the pinned ``base`` version, then ``release`` (leaving);
  * ``--shm-clients`` actor processes on the server's shared-memory segment, one of which is
    killed with SIGKILL mid-request every ``--kill-every`` s and replaced (the server must
    reclaim its slot and state);
  * an admin thread that refits the latest version every ``--refit-every`` s and adds a version
    every ``--version-every`` s, removing the oldest beyond three.
Every ``--sample-every`` s it records actor steps/s, rows/s, p50/p99 step latency (end to end,
measured by the actor threads), the server's queue-wait p99, RSS, connected actors, shared-memory
clients and versions.

It fails (exit 1) on any error in an actor, client or admin step; on leaked actor state (after
everyone leaves, the server must report no connected actors, shm clients, queued or running
requests); and on memory growth: the median RSS of the last tenth of the run over the median of
the tenth after warm-up (``--warmup-frac``) by more than ``--max-rss-growth-mb``.

Writes ``soak_server.csv`` (samples), ``soak_server.json`` (summary and verdict) and
``soak_server.png`` (steps/s, p99 latency and RSS over time) to ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
if os.path.isdir(os.path.join(ROOT, "python", "kaiwu_infer")):
    sys.path.insert(0, os.path.join(ROOT, "python"))

# Recurrent state of each test policy the soak can serve: {state input: (output, batch axis)}.
STATE = {"gru_seq": {"h0": ("hn", 1)}, "impala_lstm": {"h0": ("hn", 1), "c0": ("cn", 1)},
         "mlp": {}, "atari_cnn": {}}


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def feed_pool(name: str, state: dict, rows_choices, seed: int) -> dict:
    import policies

    pool = {}
    for rows in rows_choices:
        feeds = policies.make_inputs(name, rows, seed=seed + rows)
        pool[rows] = {k: v for k, v in feeds.items() if k not in state}
    return pool


# ------------------------------------------------------------------------------ client process
def client_main(args) -> int:
    """One actor process on the shared-memory segment, stepping until SIGTERM."""
    import kaiwu_infer

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    rng = random.Random(args.seed)
    steps = 0
    pool = None
    while not stop.is_set():
        # One connection plays a few episodes at a fixed row count, then leaves and rejoins.
        client = kaiwu_infer.connect(args.client, timeout=30)
        rows_choices = [r for r in (1, 2, 4) if r <= client.max_rows]
        if pool is None:
            pool = feed_pool(args.model, STATE[args.model], rows_choices, args.seed)
        rows = rng.choice(rows_choices)
        for _ in range(rng.randint(1, 4)):
            for t in range(rng.randint(5, 40)):
                if stop.is_set():
                    break
                out = client.infer(pool[rows], done=(t == 0))
                for k, v in out.items():
                    if not np.all(np.isfinite(v)):
                        print(f"client: non-finite output {k}", file=sys.stderr)
                        return 1
                steps += 1
        client.close()
    print(f"client steps {steps}", flush=True)
    return 0


# ------------------------------------------------------------------------------ the soak
class Soak:
    def __init__(self, args):
        import kaiwu_infer
        import policies

        self.args = args
        self.ki = kaiwu_infer
        self.state = STATE[args.model]
        model = policies.export_bytes(args.model)
        self.srv = kaiwu_infer.InferenceServer(
            model, state=self.state, max_batch=args.max_batch, max_wait_us=args.max_wait_us,
            threads=args.threads, workers=args.workers)
        self.shm_name = self.srv.serve_shm(max_clients=args.shm_clients + 2, max_rows=4,
                                           client_timeout=30.0)
        self.base_weights = self.srv.session.get_weights()
        self.pool = feed_pool(args.model, self.state, (1, 2, 4), args.seed)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.latencies: list[float] = []  # seconds, since the last sample
        self.steps = 0
        self.actor_ids = itertools.count(1)
        self.versions: list[str] = []
        self.counts = {"refits": 0, "versions_added": 0, "versions_removed": 0, "kills": 0,
                       "episodes": 0}
        self.clients: list[subprocess.Popen] = []
        self.samples: list[dict] = []

    def error(self, where: str) -> None:
        with self.lock:
            self.errors.append(f"{where}: {traceback.format_exc(limit=3)}")

    # ---- actors
    def actor_loop(self, index: int) -> None:
        rng = random.Random(self.args.seed * 1000 + index)
        while not self.stop.is_set():
            with self.lock:
                actor = next(self.actor_ids)
            rows = rng.choice((1, 1, 2, 4))
            feeds = self.pool[rows]
            try:
                for t in range(rng.randint(5, 60)):
                    if self.stop.is_set():
                        break
                    version = "base" if rng.random() < 0.2 else None
                    t0 = time.perf_counter()
                    out = self.srv.infer(actor, feeds, done=(t == 0), version=version)
                    dt = time.perf_counter() - t0
                    for k, v in out.items():
                        if not np.all(np.isfinite(v)):
                            raise AssertionError(f"non-finite output {k}")
                    with self.lock:
                        self.latencies.append(dt)
                        self.steps += 1
                self.srv.release(actor)
                with self.lock:
                    self.counts["episodes"] += 1
            except Exception:  # noqa: BLE001 - every failure is recorded and fails the soak
                self.error(f"actor {index}")
                time.sleep(0.1)

    # ---- weights
    def perturbed(self, rng: np.random.Generator) -> dict:
        return {k: (v + rng.standard_normal(v.shape).astype(v.dtype) * 0.01).astype(v.dtype)
                for k, v in self.base_weights.items() if v.dtype.kind == "f"}

    def admin_loop(self) -> None:
        rng = np.random.default_rng(self.args.seed)
        next_refit = time.monotonic() + self.args.refit_every
        next_version = time.monotonic() + self.args.version_every
        n = 0
        while not self.stop.wait(0.05):
            now = time.monotonic()
            try:
                if now >= next_refit:
                    self.srv.refit(self.perturbed(rng))
                    self.counts["refits"] += 1
                    next_refit = now + self.args.refit_every
                if now >= next_version:
                    n += 1
                    tag = f"v{n}"
                    self.srv.add_version(tag, self.perturbed(rng))
                    self.versions.append(tag)
                    self.counts["versions_added"] += 1
                    if len(self.versions) > 3:
                        self.srv.remove_version(self.versions.pop(0))
                        self.counts["versions_removed"] += 1
                    next_version = now + self.args.version_every
            except Exception:  # noqa: BLE001
                self.error("admin")

    # ---- shared-memory clients
    def spawn_client(self, k: int) -> subprocess.Popen:
        cmd = [sys.executable, os.path.abspath(__file__), "--client", self.shm_name,
               "--model", self.args.model, "--seed", str(self.args.seed * 7919 + k)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    # ---- samples
    def sample(self, t0: float, last: dict) -> dict:
        st = self.srv.stats()
        now = time.monotonic()
        with self.lock:
            lat = self.latencies
            self.latencies = []
            steps = self.steps
        dt = now - last["time"]
        row = {
            "t_s": round(now - t0, 2),
            "actor_steps_per_s": round((steps - last["steps"]) / dt, 1),
            "server_requests_per_s": round((st["requests"] - last["requests"]) / dt, 1),
            "server_rows_per_s": round((st["rows"] - last["rows"]) / dt, 1),
            "step_p50_ms": round(1e3 * float(np.percentile(lat, 50)), 3) if lat else None,
            "step_p99_ms": round(1e3 * float(np.percentile(lat, 99)), 3) if lat else None,
            "queue_wait_p99_us": round(st["queue_wait_p99_us"], 1),
            "rss_mb": round(rss_mb(), 1),
            "connected_actors": st["connected_actors"],
            "shm_clients": st["shm_clients"],
            "versions": len(self.srv.versions),
            "failed_requests": st["failed"],
            "errors": len(self.errors),
        }
        last.update(time=now, steps=steps, requests=st["requests"], rows=st["rows"])
        return row

    def run(self) -> dict:
        a = self.args
        t0 = time.monotonic()
        threads = [threading.Thread(target=self.actor_loop, args=(i,), daemon=True)
                   for i in range(a.actors)]
        threads.append(threading.Thread(target=self.admin_loop, daemon=True))
        for t in threads:
            t.start()
        self.clients = [self.spawn_client(k) for k in range(a.shm_clients)]
        spawned = a.shm_clients
        st = self.srv.stats()
        last = {"time": t0, "steps": 0, "requests": st["requests"], "rows": st["rows"]}
        next_sample = t0 + a.sample_every
        next_kill = t0 + a.kill_every
        deadline = t0 + a.seconds
        rng = random.Random(a.seed)
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = time.monotonic()
            for k, p in enumerate(self.clients):
                if p.poll() is not None and p.returncode != -signal.SIGKILL:
                    self.errors.append(f"shm client exited with {p.returncode}: {p.stderr.read()[-2000:]}")
                    self.clients[k] = self.spawn_client(spawned)
                    spawned += 1
            if a.shm_clients and now >= next_kill:
                k = rng.randrange(len(self.clients))
                self.clients[k].kill()  # mid-request: the clients step back to back
                self.clients[k].wait()
                self.counts["kills"] += 1
                self.clients[k] = self.spawn_client(spawned)
                spawned += 1
                next_kill = now + a.kill_every
            if now >= next_sample:
                row = self.sample(t0, last)
                self.samples.append(row)
                print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                next_sample = now + a.sample_every
        # Everyone leaves: actors finish their step and release, clients close.
        self.stop.set()
        for t in threads:
            t.join(timeout=30)
        for p in self.clients:
            p.send_signal(signal.SIGTERM)
        for p in self.clients:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                self.errors.append("shm client did not stop on SIGTERM")
            if p.returncode not in (0, -signal.SIGKILL):
                self.errors.append(f"shm client exited with {p.returncode}: {p.stderr.read()[-2000:]}")
        return self.verdict(t0)

    def verdict(self, t0: float) -> dict:
        a = self.args
        leaks = {}
        for _ in range(100):  # reclaiming a dead client takes ~0.1 s
            st = self.srv.stats()
            leaks = {k: st[k] for k in ("connected_actors", "shm_clients", "queued_requests",
                                        "running_requests") if st[k]}
            if not leaks:
                break
            time.sleep(0.1)
        rss = [s["rss_mb"] for s in self.samples]
        n = len(rss)
        growth = None
        if n >= 10:
            w = int(n * a.warmup_frac)
            tenth = max(1, n // 10)
            growth = statistics.median(rss[-tenth:]) - statistics.median(rss[w:w + tenth])
        failures = []
        if self.errors:
            failures.append(f"{len(self.errors)} errors")
        if leaks:
            failures.append(f"leaked actor state after everyone left: {leaks}")
        if growth is not None and growth > a.max_rss_growth_mb:
            failures.append(f"RSS grew by {growth:.1f} MB (bound {a.max_rss_growth_mb} MB)")
        steps = [s["actor_steps_per_s"] for s in self.samples]
        p99 = [s["step_p99_ms"] for s in self.samples if s["step_p99_ms"] is not None]
        st = self.srv.stats()
        summary = {
            "verdict": "fail" if failures else "pass",
            "failures": failures,
            "errors": self.errors[:20],
            "seconds": round(time.monotonic() - t0, 1),
            "model": a.model, "actors": a.actors, "shm_clients": a.shm_clients,
            "threads": a.threads, "workers": a.workers, "max_batch": a.max_batch,
            "periods_s": {"refit": a.refit_every, "version": a.version_every,
                          "kill": a.kill_every, "sample": a.sample_every},
            "counts": dict(self.counts, actor_steps=self.steps, server_requests=st["requests"],
                           server_rows=st["rows"], failed_requests=st["failed"]),
            "actor_steps_per_s": {"median": statistics.median(steps) if steps else None,
                                  "min": min(steps) if steps else None},
            "step_p99_ms": {"median": statistics.median(p99) if p99 else None,
                            "max": max(p99) if p99 else None},
            "rss_mb": {"first": rss[0] if rss else None, "last": rss[-1] if rss else None,
                       "max": max(rss) if rss else None, "growth_after_warmup": growth,
                       "bound": a.max_rss_growth_mb},
            "leaks": leaks,
            "machine": {"node": platform.node(), "cpus": os.cpu_count(),
                        "python": platform.python_version()},
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv),
        }
        self.srv.close()
        return summary


def write_outputs(out: str, samples: list[dict], summary: dict) -> None:
    os.makedirs(out, exist_ok=True)
    if samples:
        with open(os.path.join(out, "soak_server.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(samples[0]))
            w.writeheader()
            w.writerows(samples)
    with open(os.path.join(out, "soak_server.json"), "w") as f:
        json.dump(summary, f, indent=1)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    if not samples:
        return
    t = [s["t_s"] / 60 for s in samples]
    fig, ax = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    ax[0].plot(t, [s["actor_steps_per_s"] for s in samples], label="actor steps/s (threads)")
    ax[0].plot(t, [s["server_requests_per_s"] for s in samples], label="server requests/s (all)")
    ax[0].set_ylabel("steps/s")
    ax[0].legend(loc="lower right")
    ax[1].plot(t, [s["step_p99_ms"] for s in samples], label="step p99 (end to end)")
    ax[1].plot(t, [s["step_p50_ms"] for s in samples], label="step p50")
    ax[1].set_ylabel("ms")
    ax[1].legend(loc="upper right")
    ax[2].plot(t, [s["rss_mb"] for s in samples])
    ax[2].set_ylabel("RSS (MB)")
    ax[2].set_xlabel("minutes")
    fig.suptitle(f"server soak: {summary['model']}, {summary['actors']} actor threads, "
                 f"{summary['shm_clients']} shm clients: {summary['verdict']}")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "soak_server.png"), dpi=100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3600)
    ap.add_argument("--model", default="gru_seq", choices=sorted(STATE))
    ap.add_argument("--actors", type=int, default=8, help="actor threads in this process")
    ap.add_argument("--shm-clients", type=int, default=2, help="actor processes (shared memory)")
    ap.add_argument("--threads", type=int, default=1, help="session threads")
    ap.add_argument("--workers", type=int, default=1, help="server batch workers")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--max-wait-us", type=int, default=500)
    ap.add_argument("--refit-every", type=float, default=3.0)
    ap.add_argument("--version-every", type=float, default=5.0)
    ap.add_argument("--kill-every", type=float, default=7.0)
    ap.add_argument("--sample-every", type=float, default=10.0)
    ap.add_argument("--warmup-frac", type=float, default=0.1,
                    help="fraction of the samples before the RSS baseline")
    ap.add_argument("--max-rss-growth-mb", type=float, default=64.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="soak_out")
    ap.add_argument("--client", help=argparse.SUPPRESS)  # internal: run as a client process
    args = ap.parse_args()
    if args.client:
        return client_main(args)
    soak = Soak(args)
    summary = soak.run()
    write_outputs(args.out, soak.samples, summary)
    print(json.dumps({k: v for k, v in summary.items() if k != "errors"}, indent=1))
    for e in summary["errors"]:
        print(e, file=sys.stderr)
    return 0 if summary["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
