"""Self-play on Ray: env steps/s of env-worker actors getting actions from

  kaiwu       RayInferenceServer (1 server actor; workers on its node use shared memory)
  kaiwu_ray   the same, every step a Ray actor call (what a worker on another node pays)
  local       RLlib-style: each worker holds its own kaiwu Session (1 thread) and refits
              it from the broadcast ObjectRef
  local_ort   the same with an onnxruntime session (inference only: ORT has no refit)
  torchrl     torchrl's InferenceServer, service_backend="ray" (Ray queues), same policy in torch

for an MLP and a conv policy, with synthetic envs (observations from a pre-drawn pool,
``--env-us`` of busy work per env step), a weight broadcast every ``--update-s``;
plus per-call costs of each transport, the broadcast time of a ~10 MB policy to 1/4/16
servers, and a paper estimate for 1,000 workers on 50 nodes. Writes
``<out-dir>/<name>.{md,json}``.

    PYTHONPATH=python python bench/bench_ray.py                        # 2-core defaults
    PYTHONPATH=python python bench/bench_ray.py --workers 8,32,64 --envs 16 --out-dir bench/results/<machine>
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
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

    def __init__(self, wid, n_envs, shape, env_us):
        import numpy as np

        self.wid, self.n, self.env_us = wid, n_envs, env_us
        rng = np.random.default_rng(wid)
        self.pool = [rng.standard_normal((n_envs,) + tuple(shape)).astype(np.float32) for _ in range(4)]

    def setup(self, mode, model_bytes=None, client=None) -> None:
        """Switches the inference path (the process is reused across modes: Ray worker
        start-up is seconds per process on a loaded 2-core machine)."""
        self.mode, self.client, self.sess, self.refits = mode, client, None, 0
        if mode == "local":
            import kaiwu_infer as ki

            self.sess = ki.Session(model_bytes, threads=1)
        elif mode == "local_ort":
            import onnxruntime as ort

            so = ort.SessionOptions()
            so.intra_op_num_threads = so.inter_op_num_threads = 1
            self.sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])

    def set_weights(self, weights) -> None:
        """RLlib-style broadcast target (``weights`` arrives resolved from the ObjectRef)."""
        if self.mode == "local":
            self.sess.refit(weights, strict=False)
        self.refits += 1

    def _infer(self, obs):
        import numpy as np

        if self.mode in ("kaiwu", "kaiwu_ray"):
            return self.client.infer(self.wid, {"obs": obs})["logits"]
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


def torch_factory(name):
    def make():
        import torch
        from tensordict.nn import TensorDictModule

        torch.set_num_threads(1)
        net, _, _ = export(name)
        return TensorDictModule(Folded(net, len(POLICIES[name][1])), in_keys=["obs"],
                                out_keys=["logits", "value"])
    return make


# ----------------------------------------------------------------- runs

def make_workers(policy, workers, a):
    shape = POLICIES[policy][1]
    W = ray.remote(num_cpus=max(0.01, (a.cpus - 1) / workers), max_concurrency=2)(BenchWorker)
    ws = [W.remote(i, a.envs, shape, a.env_us) for i in range(workers)]
    return ws


def run_config(policy, mode, ws, a, net, model):
    workers = len(ws)
    cpus = a.cpus
    shape = POLICIES[policy][1]
    server = None
    client = None
    model_bytes = model.SerializeToString()
    srv_cpus = 1 if mode in ("kaiwu", "kaiwu_ray", "torchrl") else 0
    w_cpus = max(0.01, (cpus - 1) / workers)
    if mode in ("kaiwu", "kaiwu_ray"):
        server = kr.RayInferenceServer(model, num_cpus=srv_cpus, threads=a.server_threads,
                                       max_batch=max(256, a.envs), max_wait_us=a.max_wait_us,
                                       shm_max_rows=a.envs)
        client = server.client(transport="ray" if mode == "kaiwu_ray" else "auto")
    elif mode == "torchrl":
        from torchrl.modules.inference_server import InferenceServer

        server = InferenceServer(policy_factory=torch_factory(policy), service_backend="ray",
                                 max_batch_size=max(256, workers * a.envs), timeout=a.max_wait_us * 1e-6,
                                 service_backend_options={"remote_config": {"num_cpus": srv_cpus}})
        server.start()
        from tensordict.nn import TensorDictModule

        td_module = TensorDictModule(Folded(net, len(shape)), in_keys=["obs"], out_keys=["logits", "value"])
    ray.get([w.setup.remote(mode, model_bytes if mode.startswith("local") else None,
                            client if mode != "torchrl" else server.client()) for w in ws])
    refs = [w.run.remote(a.seconds) for w in ws]
    bcast = []
    t_next = time.perf_counter() + a.update_s
    while True:
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, t_next - time.perf_counter()))
        if len(ready) == len(refs):
            break
        # a learner update: one put, pushed to the servers (kaiwu) or to every worker (local)
        with torch.no_grad():
            for p in net.parameters():
                p.mul_(1.0001)
        t0 = time.perf_counter()
        if mode.startswith("kaiwu"):
            ref = kr.put_weights(net.state_dict())
        elif mode.startswith("local"):
            ref = kr.put_weights(_onnx_weights(model, net))
        if mode.startswith("kaiwu"):
            server.refit(ref)
        elif mode.startswith("local"):
            ray.get([w.set_weights.remote(ref) for w in ws])
        else:   # torchrl: its own weight update (TensorDict of the wrapped module)
            server.update_policy_weights_(td_module)
        bcast.append(time.perf_counter() - t0)
        t_next = time.perf_counter() + a.update_s
    res = ray.get(refs)
    stats = server.stats() if mode.startswith("kaiwu") else None
    ray.get([w.setup.remote(None) for w in ws])   # drop clients and sessions
    if server is not None:
        if mode == "torchrl":
            server.shutdown()
        else:
            server.close()
    steps = sum(r["steps"] for r in res)
    span = max(r["s"] for r in res)
    out = {"policy": policy, "mode": mode, "workers": workers, "envs": a.envs,
           "env_steps_per_s": steps / span, "calls": sum(r["calls"] for r in res),
           "us_per_call": 1e6 * sum(r["infer_s"] for r in res) / max(1, sum(r["calls"] for r in res)),
           "broadcasts": len(bcast), "broadcast_ms": 1e3 * statistics.median(bcast) if bcast else None,
           "worker_cpus": w_cpus}
    if stats:
        out.update(mean_batch_rows=stats["mean_batch_rows"], run_mean_us=stats["run_mean_us"])
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
    srv = kr.RayInferenceServer(model, num_cpus=1, threads=a.server_threads, max_wait_us=0,
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
    transport), the compute per row from the conv policy's 1-thread Session."""
    lines = []
    envs = a.envs
    mlp = costs.get("mlp") or next(iter(costs.values()))
    conv = costs.get("conv") or mlp
    shm_o = max(0.0, mlp["shm"] - mlp["shm_run_us"])
    ray_o = max(0.0, mlp["ray"] - mlp["ray_run_us"])
    row_us = conv["session"] / envs
    lines.append(f"Measured here (one worker alone, {envs} envs per call): with the MLP, whose run is "
                 f"short, a step through shared memory costs {mlp['shm']:.0f} us of which "
                 f"{mlp['shm_run_us']:.0f} us is the server's run, so **~{shm_o:.0f} us transport**; "
                 f"through a Ray call {mlp['ray']:.0f} us, **~{ray_o:,.0f} us transport** (a bare Ray "
                 f"actor call: {mlp['ray_ping']:,.0f} us). The conv policy costs {row_us:.0f} us per row "
                 f"on one core ({conv['session']:,.0f} us per {envs}-row Session run). On this loaded "
                 "2-core machine these are upper bounds: an idle host's Ray call is a few hundred us.")
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
                         f"node, i.e. servers with that many threads, or GPUs)")
    big = next((r for r in bc if r["servers"] == max(x["servers"] for x in bc)), None)
    if big:
        lines.append(f"- weight broadcast: {big['mb']:.1f} MB to {big['servers']} servers took "
                     f"{big['total_ms']:.0f} ms here, almost all of it the servers' refits sharing 2 "
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
    p.add_argument("--server-threads", type=int, default=1)
    p.add_argument("--cost-s", type=float, default=1.5)
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
    ray.init(num_cpus=a.cpus, include_dashboard=False, log_to_driver=False,
             object_store_memory=512 << 20,
             runtime_env={"env_vars": {"PYTHONPATH": os.path.join(HERE, "..", "python")}})
    load0 = os.getloadavg()
    runs, costs = [], {}
    for pol in a.policies.split(","):
        net, model, _ = export(pol)
        costs[pol] = call_costs(pol, a, model)
        print(pol, "costs", {k: round(v) for k, v in costs[pol].items()}, flush=True)
        for w in worker_counts:
            ws = make_workers(pol, w, a)
            for mode in modes:
                try:
                    r = run_config(pol, mode, ws, a, net, model)
                except Exception as e:  # noqa: BLE001 - reported, the run goes on
                    r = {"policy": pol, "mode": mode, "workers": w, "envs": a.envs, "error": repr(e)[:300]}
                runs.append(r)
                print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()}),
                      flush=True)
            for x in ws:
                ray.kill(x)
    bc = broadcast(a)
    load1 = os.getloadavg()
    ray.shutdown()
    a.argv = argv if argv is not None else sys.argv[1:]
    a.load = (load0[0], load1[0])
    write(a, runs, costs, bc, load0, load1, a.argv)


def write(a, runs, costs, bc, load0, load1, argv):
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
    md = [f"# Self-play on Ray: env steps/s, broadcast, call costs ({a.name})", "",
          f"- machine: {cpu}, {os.cpu_count()} logical CPUs; Ray given {a.cpus} CPUs",
          f"- versions: kaiwu_infer {ki.__version__} ({commit}), ray {ray.__version__}, torch "
          f"{torch.__version__}, torchrl {trl}, python {platform.python_version()}",
          f"- command: `{cmd}`",
          f"- date: {a.date}; load "
          f"average {load0[0]:.1f} at start, {load1[0]:.1f} at end",
          f"- {a.envs} synthetic envs per worker (observations from a pre-drawn pool, {a.env_us:g} us "
          f"busy work per env step), {a.seconds:g} s per config, a weight broadcast every "
          f"{a.update_s:g} s; servers: 1 actor, 1 CPU, {a.server_threads} thread(s), max_wait_us "
          f"{a.max_wait_us}; workers share the remaining CPUs", ""]
    md += ["## Env steps/s", "",
           "| policy | workers | " + " | ".join(m for m in dict.fromkeys(r["mode"] for r in runs)) + " | kaiwu / local | kaiwu / torchrl |",
           "|---|---|" + "---|" * (len(dict.fromkeys(r["mode"] for r in runs)) + 2)]
    modes = list(dict.fromkeys(r["mode"] for r in runs))
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
            k = by.get("kaiwu", {}).get("env_steps_per_s")
            lo = by.get("local", {}).get("env_steps_per_s")
            tr = by.get("torchrl", {}).get("env_steps_per_s")
            cell.append(f"{k / lo:.2f}x" if k and lo else "-")
            cell.append(f"{k / tr:.1f}x" if k and tr else "-")
            md.append(f"| {pol} | {w} | " + " | ".join(cell) + " |")
    md += ["", "Per-call costs (one worker alone, us): " + "; ".join(
        f"{pol}: shm {c['shm']:.0f} (server run {c['shm_run_us']:.0f}), Ray call {c['ray']:.0f} "
        f"(run {c['ray_run_us']:.0f}), bare Ray ping {c['ray_ping']:.0f}, local Session {c['session']:.0f}"
        for pol, c in costs.items()), ""]
    md += ["## Weight broadcast (one ray.put, every server refits from the ObjectRef)", "",
           "| servers | MB | put ms | put + all refits ms (median) | min ms |", "|---|---|---|---|---|"]
    md += [f"| {r['servers']} | {r['mb']:.1f} | {r['put_ms']:.1f} | {r['total_ms']:.1f} | {r['min_ms']:.1f} |"
           for r in bc]
    md += ["", "## 1,000 workers on 50 nodes (paper estimate)", "", estimate(costs, runs, bc, a), ""]
    path = os.path.join(a.out_dir, a.name)
    with open(path + ".md", "w") as f:
        f.write("\n".join(md))
    with open(path + ".json", "w") as f:
        json.dump({"runs": runs, "costs": costs, "broadcast": bc, "args": vars(a),
                   "load": [load0[0], load1[0]]}, f, indent=1)
    print(f"wrote {path}.md and .json")


if __name__ == "__main__":
    main()
