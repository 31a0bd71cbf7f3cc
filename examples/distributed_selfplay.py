"""Distributed self-play on Ray: a PPO learner, N env-worker actors, RayInferenceServer(s).

The learning side is examples/selfplay.py's (same policy, GAE + PPO-clip update); what
changes is where the acting happens. N env-worker Ray actors each step a gymnasium
vector env (CartPole-v1) and get actions from a pool of kaiwu_infer InferenceServers
running as Ray actors: one call per vector env step carries all its observations
(rows on axis 0). A worker on a server's node talks to it through shared memory, one
on another node through Ray calls. After every update the learner broadcasts the new
weights: one ``ray.put`` of the state_dict, every server refits from that ObjectRef.

    PYTHONPATH=python python examples/distributed_selfplay.py            # local Ray
    python examples/distributed_selfplay.py --address auto --workers 64  # a cluster

On a cluster, kaiwu_infer (with its compiled module) and this directory are shipped to
the nodes through the job's runtime_env (py_modules / working_dir); the nodes need the
same Python and platform. Stops when the mean return of the last 20 episodes reaches
475 (or at --max-seconds) and prints throughput and where the time went.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
try:  # running from a checkout without installing
    import kaiwu_infer  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

import ray  # noqa: E402

import kaiwu_infer  # noqa: E402
import kaiwu_infer.ray as kr  # noqa: E402


class EnvWorker:
    """One env worker: a vector of CartPole envs stepped with actions from the
    inference servers (actor id = worker id: the whole vector is one actor). No torch."""

    def __init__(self, client, worker_id: int, n_envs: int, seed: int):
        import gymnasium as gym

        self.client, self.id = client, worker_id
        self.envs = gym.make_vec("CartPole-v1", num_envs=n_envs, vectorization_mode="sync",
                                 vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
        obs, _ = self.envs.reset(seed=seed)
        self.obs = obs.astype(np.float32)
        self.ret = np.zeros(n_envs)
        self.rng = np.random.default_rng(seed)
        self.infer_s = self.env_s = 0.0
        self.calls = 0

    def collect(self, horizon: int) -> dict:
        n, d = self.obs.shape
        buf = {k: np.zeros((horizon, n) + s, t) for k, s, t in (
            ("obs", (d,), np.float32), ("actions", (), np.int64), ("logp", (), np.float32),
            ("values", (), np.float32), ("rewards", (), np.float32), ("dones", (), np.float32))}
        final_obs, final_at, episodes = [], [], []
        self.infer_s = self.env_s = 0.0
        for t in range(horizon):
            t0 = time.perf_counter()
            out = self.client.infer(self.id, {"obs": self.obs})
            self.infer_s += time.perf_counter() - t0
            a, logp = _sample(out["logits"], self.rng)
            buf["obs"][t], buf["actions"][t], buf["logp"][t] = self.obs, a, logp
            buf["values"][t] = out["value"]
            t0 = time.perf_counter()
            obs, r, term, trunc, info = self.envs.step(a)
            self.env_s += time.perf_counter() - t0
            self.ret += r
            for i in np.flatnonzero(trunc & ~term):   # bootstrapped by the learner
                final_obs.append(info["final_obs"][i].astype(np.float32))
                final_at.append((t, i))
            done = term | trunc
            for i in np.flatnonzero(done):
                episodes.append(float(self.ret[i]))
                self.ret[i] = 0.0
            buf["rewards"][t], buf["dones"][t] = r, done
            self.obs = obs.astype(np.float32)
        out = self.client.infer(self.id, {"obs": self.obs})
        self.calls += horizon + 1
        buf.update(next_value=np.array(out["value"]), episodes=episodes, final_obs=final_obs,
                   final_at=final_at, infer_s=self.infer_s, env_s=self.env_s,
                   transport=out.transport)
        return buf


def _sample(logits: np.ndarray, rng: np.random.Generator):
    z = logits - logits.max(axis=1, keepdims=True)
    logp_all = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    a = np.argmax(logits + rng.gumbel(size=logits.shape), axis=1)
    return a, logp_all[np.arange(len(a)), a]


def _merge(parts: list, policy, gamma: float):
    """Worker rollouts -> one selfplay.Rollout (envs side by side), truncations bootstrapped."""
    import torch

    from selfplay import Rollout

    for p in parts:
        if p["final_obs"]:
            p["rewards"] = p["rewards"].copy()   # arrays from Ray's object store are read-only
            with torch.no_grad():
                v = policy(torch.from_numpy(np.stack(p["final_obs"])))[1].numpy()
            for (t, i), vi in zip(p["final_at"], v):
                p["rewards"][t, i] += gamma * vi
    cat = {k: np.concatenate([p[k] for p in parts], axis=1)
           for k in ("obs", "actions", "logp", "values", "rewards", "dones")}
    return Rollout(next_value=np.concatenate([p["next_value"] for p in parts]), **cat)


def train(a) -> int:
    import torch

    import kaiwu_infer.torch as kt
    from selfplay import GAMMA, SOLVED, Policy, ppo_update

    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    rng = np.random.default_rng(a.seed)
    policy = Policy()
    opt = torch.optim.Adam(policy.parameters(), lr=a.lr, eps=1e-5)
    model = kt.export(policy, (torch.zeros(2, 4),), input_names=["obs"], output_names=["logits", "value"])

    pool = kr.RayInferenceServerPool(a.servers, model, num_cpus=a.server_cpus, max_batch=256,
                                     max_wait_us=a.max_wait_us)
    client = pool.client()
    cpus = ray.cluster_resources().get("CPU", 1)
    if a.worker_cpus is None:   # share what the servers leave, so that every worker gets placed
        a.worker_cpus = min(1.0, max(0.01, (cpus - a.servers * a.server_cpus) / a.workers))
    if a.servers * a.server_cpus + a.workers * a.worker_cpus > cpus + 1e-9:
        raise SystemExit(f"{a.servers} x {a.server_cpus} server CPUs + {a.workers} x {a.worker_cpus} "
                         f"worker CPUs do not fit in the cluster's {cpus:g} CPUs")
    Worker = ray.remote(num_cpus=a.worker_cpus)(EnvWorker)
    workers = [Worker.remote(client, w, a.envs, a.seed * 1000 + w) for w in range(a.workers)]
    episodes: list = []
    steps = 0
    t_collect = t_learn = t_refit = infer_s = env_s = first_s = 0.0
    first_steps = 0
    start = time.perf_counter()
    solved = False
    it = 0
    try:
        for it in range(1, a.max_iters + 1):
            t0 = time.perf_counter()
            parts = ray.get([w.collect.remote(a.horizon) for w in workers])
            if it == 1:   # workers and plans start up during the first collect: not counted
                first_s, first_steps = time.perf_counter() - t0, a.horizon * a.envs * a.workers
            else:
                t_collect += time.perf_counter() - t0
            for p in parts:
                episodes += p["episodes"]
                infer_s += p["infer_s"] / len(parts)
                env_s += p["env_s"] / len(parts)
            steps += a.horizon * a.envs * a.workers
            t0 = time.perf_counter()
            buf = _merge(parts, policy, GAMMA)
            frac = max(0.0, 1.0 - steps / a.anneal_steps)
            for g in opt.param_groups:
                g["lr"] = a.lr * max(frac, 0.05)
            ppo_update(policy, opt, buf, rng=rng, gamma=GAMMA, minibatch=a.minibatch, epochs=a.epochs)
            t_learn += time.perf_counter() - t0
            t0 = time.perf_counter()
            pool.refit(policy.state_dict())          # one ray.put, every server refits from it
            t_refit += time.perf_counter() - t0
            m = float(np.mean(episodes[-20:])) if episodes else 0.0
            if it % a.log_every == 0:
                el = time.perf_counter() - start
                print(f"update {it:4d}  env steps {steps:8d}  return(20) {m:6.1f}  "
                      f"{(steps - first_steps) / max(t_collect, 1e-9):8.0f} env steps/s while acting  {el:6.1f} s", flush=True)
            if len(episodes) >= 20 and m >= SOLVED:
                solved = True
                break
            if time.perf_counter() - start >= a.max_seconds:
                break
        wall = time.perf_counter() - start
        st = pool.stats()
    finally:
        pool.close()
    m = float(np.mean(episodes[-20:])) if episodes else 0.0
    print(f"{'solved' if solved else 'NOT solved (cap reached)'} after {it} updates, {steps} env steps, "
          f"{len(episodes)} episodes, {wall:.1f} s; mean return of last 20 episodes {m:.1f}")
    print(f"  throughput: {steps / wall:.0f} env steps/s overall, "
          f"{(steps - first_steps) / max(t_collect, 1e-9):.0f} while acting (after the first update) "
          f"({a.workers} workers x {a.envs} envs, {a.servers} server(s), transport {parts[0]['transport']})")
    calls = it * (a.horizon + 1)
    print(f"  acting  {t_collect + first_s:7.2f} s  (first collect {first_s:.2f} s; per worker: inference {infer_s:.2f} s = "
          f"{1e6 * infer_s / max(calls, 1):.0f} us/call, env {env_s:.2f} s)")
    print(f"  learning{t_learn:7.2f} s")
    print(f"  refit   {t_refit:7.2f} s  ({it} broadcasts, {1e3 * t_refit / max(it, 1):.1f} ms each)")
    print(f"  servers: mean batch {np.mean([s['mean_batch_rows'] for s in st['servers']]):.1f} rows")
    return 0 if solved else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--address", default=None, help="Ray cluster address ('auto'); default: local Ray")
    p.add_argument("--workers", type=int, default=4, help="env-worker actors")
    p.add_argument("--envs", type=int, default=8, help="envs per worker")
    p.add_argument("--servers", type=int, default=1, help="inference server actors")
    p.add_argument("--server-cpus", type=float, default=1)
    p.add_argument("--worker-cpus", type=float, default=None,
                   help="CPUs per env worker (default: the cluster's CPUs left by the servers, shared)")
    p.add_argument("--max-wait-us", type=int, default=300)
    p.add_argument("--horizon", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--minibatch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--anneal-steps", type=int, default=150_000)
    p.add_argument("--max-seconds", type=float, default=300.0)
    p.add_argument("--max-iters", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=5)
    a = p.parse_args(argv)
    pkg = os.path.dirname(os.path.abspath(kaiwu_infer.__file__))
    env = {"working_dir": HERE, "py_modules": [pkg]}
    if a.address:
        ray.init(address=a.address, runtime_env=env)
    else:
        ray.init(runtime_env=env, include_dashboard=False)
    print(f"kaiwu_infer {kaiwu_infer.__version__}, ray {ray.__version__}, "
          f"{int(ray.cluster_resources().get('CPU', 0))} CPUs on {len(ray.nodes())} node(s)")
    try:
        return train(a)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
