"""Self-play on Ray: env steps/s of env-worker actors getting actions from

  kaiwu       RayInferenceServerPool (``--servers`` actors of ``--server-threads`` threads;
              workers on their node use shared memory)
  kaiwu_ray   the same, every step a Ray actor call (what a worker on another node pays)
  kaiwu_gpu   one RayInferenceServer on the GPU (``device="cuda"``, ``--gpu-precision``):
              central GPU inference for CPU env workers, as in SEED RL (only if asked for)
  local       RLlib-style: each worker holds its own kaiwu Session (1 thread) and refits
              it from the broadcast ObjectRef
  local_ort   the same with an onnxruntime session (inference only: ORT has no refit)
  torchrl     torchrl's InferenceServer with its Ray backend, same policy in torch: torchrl >=
              0.14 ``service_backend="ray"``; 0.12-0.13 a server thread in the driver fed
              through ``RayTransport`` (Ray queues)

for an MLP and a conv policy, with synthetic envs (observations from a pre-drawn pool,
``--env-us`` of busy work per env step), a weight broadcast every ``--update-s``;
plus per-call costs of each transport, the broadcast time of a ~10 MB policy to 1/4/16
servers, and a paper estimate for 1,000 workers on 50 nodes. Writes
``<out-dir>/<name>.{md,json}``.

    PYTHONPATH=python python bench/bench_ray.py                        # 2-core defaults
    PYTHONPATH=python python bench/bench_ray.py --workers 8,32,64 --envs 16 --servers 2 \
        --server-threads 7 --out-dir bench/results/<machine>
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import ray  # noqa: E402
import torch  # noqa: E402

import kaiwu_infer as ki  # noqa: E402
import kaiwu_infer.ray as kr  # noqa: E402
import kaiwu_infer.torch as kt  # noqa: E402

N_ACT = 18


# ----------------------------------------------------------------- policies

class MLP(torch.nn.Module):
    def __init__(self, obs=64, hid=256):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(obs, hid), torch.nn.Tanh(),
                                        torch.nn.Linear(hid, hid), torch.nn.Tanh())
        self.pi, self.v = torch.nn.Linear(hid, N_ACT), torch.nn.Linear(hid, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h)


class Conv(torch.nn.Module):
    """Nature-DQN torso on 4x84x84 frames."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(4, 32, 8, 4), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 4, 2), torch.nn.ReLU(),
            torch.nn.Conv2d(64, 64, 3, 1), torch.nn.ReLU(), torch.nn.Flatten(),
            torch.nn.Linear(64 * 7 * 7, 512), torch.nn.ReLU())
        self.pi, self.v = torch.nn.Linear(512, N_ACT), torch.nn.Linear(512, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h)


class Big(torch.nn.Module):
    """~10 MB of float32 weights, for the broadcast timing."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Tanh(),
                                       torch.nn.Linear(1024, 1024), torch.nn.Tanh(),
                                       torch.nn.Linear(1024, 1024), torch.nn.Tanh(),
                                       torch.nn.Linear(1024, 256))

    def forward(self, obs):
        return self.net(obs)


POLICIES = {"mlp": (MLP, (64,)), "conv": (Conv, (4, 84, 84))}


def export(name):
    cls, shape = POLICIES[name] if name in POLICIES else (Big, (256,))
    torch.manual_seed(0)
    net = cls().eval()
    model = kt.export(net, (torch.zeros((2,) + shape),), input_names=["obs"],
                      output_names=["logits", "value"] if name in POLICIES else ["y"])
    return net, model, shape


# ----------------------------------------------------------------- workers

class BenchWorker:
    """Steps ``n_envs`` synthetic envs; actions from the mode's inference path."""

    def __init__(self, wid, n_envs, env_us):
        self.wid, self.n, self.env_us, self.shape = wid, n_envs, env_us, None

    def setup(self, mode, model_bytes=None, client=None, actor_id=None, shape=None) -> None:
        """Switches the inference path and, given ``shape``, the policy's observations (the
        process is reused across modes and policies: a Ray worker's start-up costs seconds
        of CPU, and 64 of them start in each worker count)."""
        import numpy as np

        if shape is not None and tuple(shape) != self.shape:
            self.shape = tuple(shape)
            rng = np.random.default_rng(self.wid)
            self.pool = [rng.standard_normal((self.n,) + self.shape).astype(np.float32) for _ in range(4)]
        self.mode, self.client, self.sess, self.refits = mode, client, None, 0
        self.aid = self.wid if actor_id is None else actor_id
        if mode == "local":
            import kaiwu_infer as ki

            self.sess = ki.Session(model_bytes, threads=1)
        elif mode == "local_ort":
            import onnxruntime as ort

            so = ort.SessionOptions()
            so.intra_op_num_threads = so.inter_op_num_threads = 1
            self.sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        elif mode == "torchrl":   # its imports (seconds of CPU a process) before the timed calls
            import tensordict  # noqa: F401
            import torch  # noqa: F401

    def set_weights(self, weights) -> None:
        """RLlib-style broadcast target (``weights`` arrives resolved from the ObjectRef)."""
        if self.mode == "local":
            self.sess.refit(weights, strict=False)
        self.refits += 1

    def _infer(self, obs):
        import numpy as np

        if self.mode in ("kaiwu", "kaiwu_ray", "kaiwu_gpu"):
            return self.client.infer(self.aid, {"obs": obs})["logits"]
        if self.mode == "local":
            return self.sess.run({"obs": obs})["logits"]
        if self.mode == "local_ort":
            return self.sess.run(["logits"], {"obs": obs})[0]
        import torch
        from tensordict import TensorDict

        # one request per vector env, as for kaiwu (the server stacks requests on a new
        # leading axis; the policy is wrapped to fold it; one request per env is ~n x slower)
        td = TensorDict({"obs": torch.from_numpy(obs)}, batch_size=[self.n])
        return self.client(td)["logits"].numpy()

    def run(self, seconds: float) -> dict:
        import time

        import numpy as np

        for k in range(3):   # warm: plans, connections
            self._infer(self.pool[k % 4])
        steps = calls = 0
        infer_s = 0.0
        t_end = time.perf_counter() + seconds
        t_start = time.perf_counter()
        while time.perf_counter() < t_end:
            obs = self.pool[calls % 4]
            t0 = time.perf_counter()
            a = np.argmax(self._infer(obs), axis=1)
            infer_s += time.perf_counter() - t0
            if self.env_us:
                busy = time.perf_counter() + self.env_us * 1e-6 * self.n
                while time.perf_counter() < busy:
                    pass
            steps += len(a)
            calls += 1
        return {"steps": steps, "calls": calls, "s": time.perf_counter() - t_start, "infer_s": infer_s,
                "refits": self.refits}


class Folded(torch.nn.Module):
    """Runs ``net`` on [requests, envs, *obs] by folding the leading axes."""

    def __init__(self, net, obs_dims):
        super().__init__()
        self.net, self.k = net, obs_dims

    def forward(self, obs):
        lead = obs.shape[:-self.k]
        outs = self.net(obs.reshape((-1,) + tuple(obs.shape[-self.k:])))
        return tuple(o.reshape(tuple(lead) + tuple(o.shape[1:])) for o in outs)


def torch_factory(name, threads=1):
    def make():
        import torch
        from tensordict.nn import TensorDictModule

        torch.set_num_threads(threads)
        net, _, _ = export(name)
        return TensorDictModule(Folded(net, len(POLICIES[name][1])), in_keys=["obs"],
                                out_keys=["logits", "value"])
    return make


# ----------------------------------------------------------------- runs

def server_cpus(a):
    """Ray CPUs held by the CPU servers of the kaiwu and torchrl modes."""
    return max(1, a.servers * a.server_threads)


def make_workers(workers, a):
    W = ray.remote(num_cpus=max(0.01, (a.cpus - server_cpus(a)) / workers), max_concurrency=2)(BenchWorker)
    return [W.remote(i, a.envs, a.env_us) for i in range(workers)]


def kaiwu_servers(mode, model, workers, a):
    """The kaiwu modes' pool: CPU servers as asked, or one server on the GPU."""
    rows = max(a.max_batch, a.envs)
    common = dict(max_wait_us=a.max_wait_us, shm_max_rows=a.envs, shm_max_clients=max(64, workers))
    if mode == "kaiwu_gpu":
        return kr.RayInferenceServer(model, num_cpus=1, num_gpus=1, threads=1, device="cuda",
                                     precision=a.gpu_precision, max_batch=max(rows, workers * a.envs),
                                     workers=a.gpu_workers, **common)
    return kr.RayInferenceServerPool(a.servers, model, num_cpus=a.server_threads, threads=a.server_threads,
                                     max_batch=rows, split_batches=not a.whole_batches, **common)


class TorchrlServer:
    """torchrl's InferenceServer on its Ray backend, whichever API the installed
    torchrl has: >= 0.14 runs the server in a Ray actor (``service_backend="ray"``);
    0.12-0.13 run it as a thread of this process, fed through ``RayTransport``."""

    def __init__(self, policy, workers, a, net):
        import inspect

        from tensordict.nn import TensorDictModule
        from torchrl.modules import inference_server as tis

        shape = POLICIES[policy][1]
        kw = dict(max_batch_size=max(a.max_batch, workers * a.envs), timeout=a.max_wait_us * 1e-6)
        self.actor_backend = "policy_factory" in inspect.signature(tis.InferenceServer).parameters
        if self.actor_backend:
            self.server = tis.InferenceServer(
                policy_factory=torch_factory(policy, server_cpus(a)), service_backend="ray",
                service_backend_options={"remote_config": {"num_cpus": server_cpus(a)}}, **kw)
        else:
            self.threads = torch.get_num_threads()
            torch.set_num_threads(server_cpus(a))
            transport, self.clients = warm_ray_transport(workers, shape)
            self.timed = TimedModel(torch_factory(policy, server_cpus(a))())
            self.server = tis.InferenceServer(self.timed, transport, **kw)
        self.server.start()
        self.td_module = TensorDictModule(Folded(net, len(shape)), in_keys=["obs"], out_keys=["logits", "value"])

    def client(self, i):
        """Worker i's client (< 0.14: the i-th of the warm transport's)."""
        return self.server.client() if self.actor_backend else self.clients[i]

    def update(self):
        """The learner's weights into the server: its own weight update (>= 0.14), or a
        load_state_dict under the server's model lock (the server shares this process)."""
        if self.actor_backend:
            self.server.update_policy_weights_(self.td_module)
        else:
            import contextlib

            with getattr(self.server, "_model_lock", contextlib.nullcontext()):
                self.timed.module.load_state_dict(self.td_module.state_dict())

    def stats(self):
        """< 0.14 (the server runs here): its batches, their env rows and run time."""
        if self.actor_backend:
            return None
        t = self.timed
        return {"batches": t.batches, "rows": t.rows, "run_mean_us": 1e6 * t.s / max(1, t.batches)}

    def close(self, clean=True):
        """Stops the server; ``clean=False`` (workers stuck in a call) also drops the
        shared transport, whose queues may hold stale requests or results."""
        self.server.shutdown()
        if not self.actor_backend:
            torch.set_num_threads(self.threads)
            if not clean:
                drop_ray_transport()


class TimedModel:
    """The torchrl server's model, counting its batches, env rows and run time."""

    def __init__(self, module):
        self.module, self.batches, self.rows, self.s = module, 0, 0, 0.0

    def __call__(self, td):
        t0 = time.perf_counter()
        out = self.module(td)
        self.s += time.perf_counter() - t0
        self.batches += 1
        self.rows += td.batch_size.numel()
        return out


_RAY_TRANSPORT = {}


def warm_ray_transport(n, shape):
    """torchrl < 0.14: the run's one ``RayTransport`` with at least ``n`` clients, whose Ray
    queue actors have each unpickled a TensorDict once.

    Each queue is an actor process, and its first TensorDict makes it import torch and
    tensordict (5-7 s on the 2-core machine). The server thread resolves a batch one
    blocking put per response queue, so cold queues cost the first batch that many imports
    in a row: 8 workers took ~50 s before their first results, past the config timeout at
    every worker count. Here they warm side by side, before the server starts (the request
    queue too), and are kept across configs (one per worker index; a config leaves every
    queue empty, each call having been answered)."""
    from concurrent.futures import ThreadPoolExecutor

    from tensordict import TensorDict
    from torchrl.modules import inference_server as tis

    st = _RAY_TRANSPORT
    cold = []
    if not st:
        st["transport"], st["clients"] = tis.RayTransport(), []
        cold.append(st["transport"]._request_queue)
    while len(st["clients"]) < n:
        st["clients"].append(st["transport"].client())
        cold.append(st["clients"][-1]._response_queue)
    td = TensorDict({"obs": torch.zeros((1,) + tuple(shape))}, batch_size=[1])

    def warm(q):
        q.put((-1, td), timeout=60)
        q.get(timeout=60)

    ex = ThreadPoolExecutor(max(1, min(len(cold), 64)))
    try:
        list(ex.map(warm, cold, timeout=90))
    except Exception:
        ex.shutdown(wait=False, cancel_futures=True)
        drop_ray_transport()
        raise
    ex.shutdown()
    return st["transport"], st["clients"][:n]


def drop_ray_transport():
    for c in _RAY_TRANSPORT.get("clients", []):
        c._response_queue.shutdown()
    if _RAY_TRANSPORT:
        _RAY_TRANSPORT["transport"]._request_queue.shutdown()
    _RAY_TRANSPORT.clear()


def balanced_ids(client, workers, servers):
    """Actor ids that the pool routes round-robin (worker i -> server i % servers): with
    few actors, hashing alone can put 6 of 8 on one of two servers."""
    ids, k = [], 0
    for i in range(workers):
        while client.server_of(k) != i % servers:
            k += 1
        ids.append(k)
        k += 1
    return ids


class ConfigTimeout(Exception):
    """A config whose workers did not finish in time (their processes are replaced)."""


def run_config(policy, mode, ws, a, net, model):
    t_cfg = time.perf_counter()
    server = None
    if mode.startswith("kaiwu"):
        server = kaiwu_servers(mode, model, len(ws), a)
    elif mode == "torchrl":
        server = TorchrlServer(policy, len(ws), a, net)
    clean = False
    try:
        out = _run_config(policy, mode, ws, a, net, model, server)
        clean = True
    finally:   # also on a timeout or a kill: torchrl's server thread would outlive Ray
        if isinstance(server, TorchrlServer):
            server.close(clean)
        elif server is not None:
            server.close()
    out["config_s"] = time.perf_counter() - t_cfg
    return out


def _run_config(policy, mode, ws, a, net, model, server):
    workers = len(ws)
    model_bytes = model.SerializeToString()
    w_cpus = max(0.01, (a.cpus - server_cpus(a)) / workers)
    client = None
    if mode.startswith("kaiwu"):
        client = server.client(transport="ray" if mode == "kaiwu_ray" else "auto")
    ids = balanced_ids(client, workers, server.num_servers) if client is not None else [None] * workers
    setup = [w.setup.remote(mode, model_bytes if mode.startswith("local") else None,
                            client if mode != "torchrl" else server.client(i), aid, POLICIES[policy][1])
             for i, (w, aid) in enumerate(zip(ws, ids))]
    ready, _ = ray.wait(setup, num_returns=len(setup), timeout=2 * a.config_timeout_s)
    if len(ready) < len(setup):
        raise ConfigTimeout(f"worker setup not done in {2 * a.config_timeout_s:g} s ({len(ready)} of {len(setup)})")
    ray.get(setup)
    refs = [w.run.remote(a.seconds) for w in ws]
    bcast = []
    t_next = time.perf_counter() + a.update_s
    deadline = time.perf_counter() + a.seconds + a.config_timeout_s
    while True:
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, t_next - time.perf_counter()))
        if len(ready) == len(refs):
            break
        if time.perf_counter() > deadline:
            raise ConfigTimeout(f"workers not done {a.seconds + a.config_timeout_s:g} s after the start "
                                f"({len(ready)} of {len(refs)}; warm-up calls included)")
        # a learner update: one put, pushed to the servers (kaiwu) or to every worker (local)
        with torch.no_grad():
            for p in net.parameters():
                p.mul_(1.0001)
        t0 = time.perf_counter()
        if mode.startswith("kaiwu"):
            server.refit(kr.put_weights(net.state_dict()))
        elif mode.startswith("local"):
            ref = kr.put_weights(_onnx_weights(model, net))
            ray.get([w.set_weights.remote(ref) for w in ws])
        else:
            server.update()
        bcast.append(time.perf_counter() - t0)
        t_next = time.perf_counter() + a.update_s
    res = ray.get(refs)
    stats = server.stats() if mode.startswith("kaiwu") or mode == "torchrl" else None
    ray.get([w.setup.remote(None) for w in ws])   # drop clients and sessions
    steps = sum(r["steps"] for r in res)
    span = max(r["s"] for r in res)
    out = {"policy": policy, "mode": mode, "workers": workers, "envs": a.envs,
           "env_steps_per_s": steps / span, "calls": sum(r["calls"] for r in res),
           "us_per_call": 1e6 * sum(r["infer_s"] for r in res) / max(1, sum(r["calls"] for r in res)),
           "broadcasts": len(bcast), "broadcast_ms": 1e3 * statistics.median(bcast) if bcast else None,
           "worker_cpus": w_cpus}
    if stats:
        per = stats.get("servers", [stats])
        batches = sum(s["batches"] for s in per)
        out.update(mean_batch_rows=sum(s["rows"] for s in per) / max(1, batches),
                   run_mean_us=sum(s["run_mean_us"] * s["batches"] for s in per) / max(1, batches))
    return out


_ONNX_W = {}


def _onnx_weights(model, net):
    """state_dict -> ONNX initializer names (for the local Sessions' refit)."""
    key = id(model)
    if key not in _ONNX_W:
        _ONNX_W[key] = ki.Session(model.SerializeToString()).refit_map
    arrays, _ = _ONNX_W[key].apply(net.state_dict(), strict=False)
    return arrays


def call_costs(policy, a, model):
    """One worker alone, 16 envs: us per call by transport, and the server's compute."""
    shape = POLICIES[policy][1]
    obs = np.random.default_rng(0).standard_normal((a.envs,) + shape).astype(np.float32)
    srv = kr.RayInferenceServer(model, num_cpus=a.server_threads, threads=a.server_threads, max_wait_us=0,
                                split_batches=not a.whole_batches,
                                shm_max_rows=a.envs)
    out = {}
    try:
        for tr in ("shm", "ray"):
            c = srv.client(transport=tr)
            for _ in range(5):
                c.infer(1, {"obs": obs})
            srv.reset_stats()
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < a.cost_s:
                c.infer(1, {"obs": obs})
                n += 1
            out[tr] = 1e6 * (time.perf_counter() - t0) / n
            st = srv.stats()
            out[f"{tr}_run_us"] = st["run_mean_us"]
            c.release(1)
        sess = ki.Session(model.SerializeToString(), threads=1)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < a.cost_s:
            sess.run({"obs": obs})
            n += 1
        out["session"] = 1e6 * (time.perf_counter() - t0) / n
        h = srv.handles[0]
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < a.cost_s:
            ray.get(h.ping.remote())
            n += 1
        out["ray_ping"] = 1e6 * (time.perf_counter() - t0) / n
    finally:
        srv.close()
    return out


def broadcast(a):
    net, model, _ = export("big")
    mb = sum(p.numel() * 4 for p in net.parameters()) / 1e6
    rows = []
    for n in a.broadcast_servers:
        pool = kr.RayInferenceServerPool(n, model, num_cpus=0.01, threads=1, shm=False, max_batch=8)
        times, puts = [], []
        for k in range(a.broadcast_reps + 1):
            with torch.no_grad():
                for p in net.parameters():
                    p.mul_(1.0001)
            t0 = time.perf_counter()
            ref = kr.put_weights(net.state_dict())
            t1 = time.perf_counter()
            pool.refit(ref)
            t2 = time.perf_counter()
            if k:   # the first refit also compiles the refit recipes
                puts.append(t1 - t0)
                times.append(t2 - t0)
        pool.close()
        rows.append({"servers": n, "mb": mb, "put_ms": 1e3 * statistics.median(puts),
                     "total_ms": 1e3 * statistics.median(times), "min_ms": 1e3 * min(times)})
        print(f"broadcast {mb:.1f} MB to {n:2d} servers: {rows[-1]['total_ms']:.1f} ms "
              f"(put {rows[-1]['put_ms']:.1f} ms)", flush=True)
    return rows


# ----------------------------------------------------------------- report

def estimate(costs, runs, bc, a):
    """1,000 env workers x envs on 50 nodes, from the measured per-call costs: the
    transport overheads from the MLP (whose run is short, so the rest of a call is
    transport), the compute per row from the conv policy's 1-thread Session and, where
    they ran, the conv servers' measured batches (CPU core-us per row, GPU rows/s)."""
    lines = []
    ncpu = getattr(a, "ncpu", None) or os.cpu_count() or 1
    envs = a.envs
    src = "mlp" if "mlp" in costs else next(iter(costs))
    mlp = costs[src]
    conv = costs.get("conv") or mlp
    shm_o = max(0.0, mlp["shm"] - mlp["shm_run_us"])
    ray_o = max(0.0, mlp["ray"] - mlp["ray_run_us"])
    row_us = conv["session"] / envs
    lines.append(f"Measured here (one worker alone, {envs} envs per call): with the " +
                 ("MLP, whose run is short," if src == "mlp" else f"{src} policy (no MLP run: the rest of "
                  "a call is transport and the copies of its rows)") +
                 f" a step through shared memory costs {mlp['shm']:.0f} us of which "
                 f"{mlp['shm_run_us']:.0f} us is the server's run, so **~{shm_o:.0f} us transport**; "
                 f"through a Ray call {mlp['ray']:.0f} us, **~{ray_o:,.0f} us transport** (a bare Ray "
                 f"actor call: {mlp['ray_ping']:,.0f} us). The conv policy costs {row_us:.0f} us per row "
                 f"on one core ({conv['session']:,.0f} us per {envs}-row Session run)." +
                 (" On this loaded small machine these are upper bounds: an idle host's Ray call is a "
                  "few hundred us." if ncpu <= 4 else ""))
    gpu_rps = None
    for mode in ("kaiwu", "kaiwu_gpu"):
        rs = [r for r in runs if r["mode"] == mode and r["policy"] == "conv" and r.get("run_mean_us")]
        if not rs:
            continue
        r = max(rs, key=lambda r: r["mean_batch_rows"])
        rows, run = r["mean_batch_rows"], r["run_mean_us"]
        if mode == "kaiwu":
            t = a.server_threads
            lines.append(f"Measured per batch (conv, {r['workers']} workers): a CPU server ran {rows:.0f}-row "
                         f"batches in {run:,.0f} us on {t} thread(s), {run * t / rows:.0f} core-us per row "
                         f"(a {envs}-row Session on one core: {row_us:.0f}).")
        else:
            gpu_rps = rows / run * 1e6
            lines.append(f"Measured per batch (conv, {r['workers']} workers): the GPU server ran {rows:.0f}-row "
                         f"batches in {run:,.0f} us ({getattr(a, 'gpu_precision', 'fp16')}), "
                         f"{gpu_rps:,.0f} rows/s per GPU at that batch size.")
    nodes, workers = 50, 1000
    per_node = workers // nodes
    lines.append("")
    lines.append(f"Paper estimate, {workers} env workers x {envs} envs on {nodes} nodes ({per_node} "
                 f"workers/node), conv policy at {row_us:.0f} us/row/core:")
    for env_us in (0, 100, 1000):
        for label, o in (("a server on every node, shared memory", shm_o),
                         ("servers on other nodes, Ray calls", ray_o)):
            # a worker's cycle: its envs, the transport, and the batch's run (~ its rows' share
            # when the server's cores keep up)
            cycle = envs * env_us + o + envs * row_us
            worker_fps = envs / (cycle * 1e-6)
            demand = worker_fps * workers
            cores = demand * row_us * 1e-6
            lines.append(f"- env {env_us} us/step, {label}: a worker {worker_fps:,.0f} frames/s "
                         f"(cycle {cycle:,.0f} us); {demand / 1e6:.2f} M frames/s in all if the servers "
                         f"keep up, which takes ~{cores:,.0f} inference cores ({cores / nodes:.1f} per "
                         f"node, i.e. servers with that many threads" +
                         (f", or ~{demand / gpu_rps:.1f} GPUs at the measured GPU batch rate)" if gpu_rps else
                          ", or GPUs)"))
    big = next((r for r in bc if r["servers"] == max(x["servers"] for x in bc)), None)
    if big:
        lines.append(f"- weight broadcast: {big['mb']:.1f} MB to {big['servers']} servers took "
                     f"{big['total_ms']:.0f} ms here, almost all of it the servers' refits sharing {ncpu} "
                     f"cores (the put: {big['put_ms']:.0f} ms). On 50 nodes each node pulls the object "
                     f"once (~{50 * big['mb'] / 1e3:.1f} GB in all per update; Ray's object transfer "
                     "fetches from any node holding a copy, so it fans out), and each server's refit "
                     "runs on its own cores: ~the 1-server time plus the transfer")
    lines.append("")
    lines.append("What bounds it: with a server on every node (shared memory), inference compute per "
                 "node and the envs; a Ray call costs a worker "
                 f"~{ray_o / 1e3:.1f} ms per step here (a cap of {envs / max(ray_o, 1) * 1e6:,.0f} "
                 "frames/s per worker before any env or inference time) and the server's event loop "
                 "one Ray task per step, so remote workers want larger vectors of envs per call. "
                 "The broadcast is bounded by the object transfer to each node, paid once per node, "
                 "not per server.")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", default="2,4,8")
    p.add_argument("--envs", type=int, default=16)
    p.add_argument("--policies", default="mlp,conv")
    p.add_argument("--modes", default="kaiwu,kaiwu_ray,local,local_ort,torchrl")
    p.add_argument("--seconds", type=float, default=4.0, help="stepping time per config")
    p.add_argument("--update-s", type=float, default=1.0, help="seconds between weight broadcasts")
    p.add_argument("--env-us", type=float, default=0.0, help="busy work per env step (us)")
    p.add_argument("--max-wait-us", type=int, default=300)
    p.add_argument("--server-threads", type=int, default=1, help="threads (and Ray CPUs) of each server")
    p.add_argument("--servers", type=int, default=1, help="kaiwu CPU server actors (a pool)")
    p.add_argument("--whole-batches", action="store_true",
                   help="kaiwu CPU servers run each batch whole on their threads (default: as row "
                        "slices side by side, InferenceServer's split_batches)")
    p.add_argument("--max-batch", type=int, default=256, help="most rows in one server run")
    p.add_argument("--gpu-precision", default="fp16", help="kaiwu_gpu: fp32, fp16 or bf16")
    p.add_argument("--gpu-workers", type=int, default=1,
                   help="kaiwu_gpu: batching threads of the GPU server (InferenceServer workers)")
    p.add_argument("--budget-s", type=float, default=0.0,
                   help="start no new config after this many seconds (0: no limit); skipped "
                        "configs are listed, the broadcast and the report still run")
    p.add_argument("--cost-s", type=float, default=1.5)
    p.add_argument("--config-timeout-s", type=float, default=60.0,
                   help="a config whose workers are not done this long after --seconds is dropped")
    p.add_argument("--broadcast-servers", default="1,4,16")
    p.add_argument("--broadcast-reps", type=int, default=5)
    p.add_argument("--cpus", type=int, default=os.cpu_count())
    p.add_argument("--out-dir", default=os.path.join(HERE, "results", "dev-2core"))
    p.add_argument("--name", default="ray")
    p.add_argument("--render", help="rewrite the .md from this .json (no runs)")
    a = p.parse_args(argv)
    if a.render:
        d = json.load(open(a.render))
        for k, v in d["args"].items():
            if k not in ("render",):
                setattr(a, k, v)
        a.out_dir, a.name = os.path.dirname(a.render), os.path.basename(a.render)[:-5]
        load = tuple(d.get("load", (float("nan"),) * 2))
        write(a, d["runs"], d["costs"], d["broadcast"], (load[0],), (load[1],), d["args"].get("argv"))
        return
    a.broadcast_servers = [int(x) for x in a.broadcast_servers.split(",") if x]
    worker_counts = [int(x) for x in a.workers.split(",")]
    modes = a.modes.split(",")
    if "torchrl" in modes:
        try:
            import tensordict  # noqa: F401
            import torchrl  # noqa: F401
            from torchrl.modules.inference_server import InferenceServer  # noqa: F401
        except Exception as e:  # noqa: BLE001
            print(f"torchrl unavailable ({e}); skipping it")
            modes.remove("torchrl")
    gpus = 0
    if "kaiwu_gpu" in modes:
        gpus = torch.cuda.device_count()
        if not gpus:
            print("no CUDA device; skipping kaiwu_gpu")
            modes.remove("kaiwu_gpu")
    # the workers import this checkout's kaiwu_infer, and whatever else PYTHONPATH holds
    path = os.pathsep.join([os.path.join(HERE, "..", "python")] +
                           [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])
    ray.init(num_cpus=a.cpus, num_gpus=gpus, include_dashboard=False, log_to_driver=False,
             object_store_memory=512 << 20, runtime_env={"env_vars": {"PYTHONPATH": path}})
    # a kill from outside (a time limit) still writes what was measured
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    a.argv = argv if argv is not None else sys.argv[1:]
    load0 = os.getloadavg()
    t_start = time.monotonic()
    runs, costs, bc = [], {}, []
    try:
        nets = {}
        for pol in a.policies.split(","):
            net, model, _ = nets[pol] = export(pol)
            costs[pol] = call_costs(pol, a, model)
            print(pol, "costs", {k: round(v) for k, v in costs[pol].items()}, flush=True)
        # the worker count outermost: one set of worker processes serves every policy
        for w in worker_counts:
            over = a.budget_s and time.monotonic() - t_start > a.budget_s
            ws = [] if over else make_workers(w, a)
            for pol in a.policies.split(","):
                net, model, _ = nets[pol]
                for mode in modes:
                    if a.budget_s and time.monotonic() - t_start > a.budget_s:
                        r = {"policy": pol, "mode": mode, "workers": w, "envs": a.envs,
                             "error": f"skipped: over --budget-s {a.budget_s:g}"}
                    else:
                        try:
                            r = run_config(pol, mode, ws, a, net, model)
                        except Exception as e:  # noqa: BLE001 - reported, the run goes on
                            r = {"policy": pol, "mode": mode, "workers": w, "envs": a.envs,
                                 "error": repr(e)[:300]}
                            if isinstance(e, ConfigTimeout):   # workers stuck in a call: new ones
                                for x in ws:
                                    ray.kill(x)
                                ws = make_workers(w, a)
                    runs.append(r)
                    print(f"[{time.monotonic() - t_start:.0f} s]",
                          json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()}),
                          flush=True)
                    # the rows so far on disk: a run killed from outside still leaves them
                    write(a, runs, costs, [], load0, os.getloadavg(), a.argv, quiet=True)
            for x in ws:
                ray.kill(x)
        bc = broadcast(a)
    finally:
        load1 = os.getloadavg()
        a.load = (load0[0], load1[0])
        write(a, runs, costs, bc, load0, load1, a.argv)
        ray.shutdown()


def servers_line(a):
    servers, threads = getattr(a, "servers", 1), a.server_threads
    split = ", whole batches" if getattr(a, "whole_batches", False) else ""
    return (f"kaiwu servers: {servers} actor(s) x {threads} thread(s) (as many Ray CPUs){split}, "
            f"max_batch {max(getattr(a, 'max_batch', 256), a.envs)}, max_wait_us {a.max_wait_us}; "
            f"kaiwu_gpu: 1 actor on the GPU ({getattr(a, 'gpu_precision', 'fp16')}, "
            f"{getattr(a, 'gpu_workers', 1)} batching thread(s)); torchrl's server: "
            f"{max(1, servers * threads)} torch thread(s); workers share the remaining CPUs")


def write(a, runs, costs, bc, load0, load1, argv, quiet=False):
    os.makedirs(a.out_dir, exist_ok=True)
    if not getattr(a, "date", None):
        a.date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    commit = getattr(a, "commit", None)
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=HERE).stdout.strip()
        except Exception:  # noqa: BLE001
            commit = "?"
        a.commit = commit
    cmd = "PYTHONPATH=python python bench/bench_ray.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if not getattr(a, "machine", None):   # kept in the .json, so that --render elsewhere keeps them
        try:
            import torchrl

            trl = torchrl.__version__
        except Exception:  # noqa: BLE001
            trl = "not installed"
        cpu = platform.processor() or platform.machine()
        try:
            cpu = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")][0]
        except Exception:  # noqa: BLE001
            pass
        a.ncpu = os.cpu_count()
        a.machine = f"{cpu}, {a.ncpu} logical CPUs"
        a.versions = (f"kaiwu_infer {ki.__version__} ({commit}), ray {ray.__version__}, torch "
                      f"{torch.__version__}, torchrl {trl}, python {platform.python_version()}")
    md = [f"# Self-play on Ray: env steps/s, broadcast, call costs ({a.name})", "",
          f"- machine: {a.machine}; Ray given {a.cpus} CPUs",
          f"- versions: {a.versions}",
          f"- command: `{cmd}`",
          f"- date: {a.date}; load "
          f"average {load0[0]:.1f} at start, {load1[0]:.1f} at end",
          f"- {a.envs} synthetic envs per worker (observations from a pre-drawn pool, {a.env_us:g} us "
          f"busy work per env step), {a.seconds:g} s per config, a weight broadcast every "
          f"{a.update_s:g} s; " + servers_line(a), ""]
    modes = list(dict.fromkeys(r["mode"] for r in runs))
    ratios = ["kaiwu / best local", "kaiwu / torchrl"] + (["kaiwu_gpu / best local"] if "kaiwu_gpu" in modes else [])
    md += ["## Env steps/s", "",
           "best local: the faster of local (kaiwu Session) and local_ort per row.", "",
           "| policy | workers | " + " | ".join(modes + ratios) + " |",
           "|---|---|" + "---|" * (len(modes) + len(ratios))]
    for pol in dict.fromkeys(r["policy"] for r in runs):
        for w in dict.fromkeys(r["workers"] for r in runs):
            by = {r["mode"]: r for r in runs if r["policy"] == pol and r["workers"] == w}
            cell = []
            for m in modes:
                r = by.get(m, {})
                if "env_steps_per_s" in r:
                    extra = f" ({r['us_per_call']:.0f} us/call"
                    if r.get("mean_batch_rows"):
                        extra += f", batch {r['mean_batch_rows']:.0f}"
                    cell.append(f"{r['env_steps_per_s']:,.0f}{extra})")
                else:
                    cell.append("error: " + r.get("error", "-")[:60])
            k, g, tr = (by.get(m, {}).get("env_steps_per_s") for m in ("kaiwu", "kaiwu_gpu", "torchrl"))
            lo = max([by.get(m, {}).get("env_steps_per_s") or 0 for m in ("local", "local_ort")])
            cell.append(f"{k / lo:.2f}x" if k and lo else "-")
            cell.append(f"{k / tr:.1f}x" if k and tr else "-")
            if "kaiwu_gpu" in modes:
                cell.append(f"{g / lo:.2f}x" if g and lo else "-")
            md.append(f"| {pol} | {w} | " + " | ".join(cell) + " |")
    asked = [(p, int(w), m) for p in str(a.policies).split(",") for w in str(a.workers).split(",")
             for m in str(a.modes).split(",")]
    done = {(r["policy"], r["workers"], r["mode"]) for r in runs}
    missing = [f"{p} {w} {m}" for p, w, m in asked if (p, w, m) not in done]
    if missing:
        md += ["", f"Not run ({len(missing)} of {len(asked)} configs asked for; time limit or kill): "
               + ", ".join(missing)]
    md += ["", "Per-call costs (one worker alone, us): " + "; ".join(
        f"{pol}: shm {c['shm']:.0f} (server run {c['shm_run_us']:.0f}), Ray call {c['ray']:.0f} "
        f"(run {c['ray_run_us']:.0f}), bare Ray ping {c['ray_ping']:.0f}, local Session {c['session']:.0f}"
        for pol, c in costs.items()), ""]
    md += ["## Weight broadcast (one ray.put, every server refits from the ObjectRef)", "",
           "| servers | MB | put ms | put + all refits ms (median) | min ms |", "|---|---|---|---|---|"]
    md += [f"| {r['servers']} | {r['mb']:.1f} | {r['put_ms']:.1f} | {r['total_ms']:.1f} | {r['min_ms']:.1f} |"
           for r in bc]
    if not bc:
        md += ["", "Not run (time limit or kill)."]
    if costs:
        md += ["", "## 1,000 workers on 50 nodes (paper estimate)", "", estimate(costs, runs, bc, a), ""]
    path = os.path.join(a.out_dir, a.name)
    with open(path + ".md", "w") as f:
        f.write("\n".join(md))
    with open(path + ".json", "w") as f:
        json.dump({"runs": runs, "costs": costs, "broadcast": bc, "args": vars(a),
                   "load": [load0[0], load1[0]]}, f, indent=1)
    if not quiet:
        print(f"wrote {path}.md and .json")


if __name__ == "__main__":
    main()
