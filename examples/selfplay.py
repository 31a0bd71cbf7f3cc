"""Self-play style training loop: a PPO learner in torch, actors through kaiwu_infer.

The actors step a gymnasium vector env (CartPole-v1, 16 envs by default) and pick
actions with a kaiwu_infer Session; after every learner update the session's weights
are replaced in place with ``sess.refit(policy.state_dict())`` (no re-export, no new
session). Stops when the mean return of the last 20 episodes reaches 475 or at the
time/iteration cap, prints where the time went (env, inference, refit, learning),
and saves the learning curve.

    PYTHONPATH=python python examples/selfplay.py --out selfplay_curve.png

At start it checks once that kaiwu_infer's outputs match onnxruntime's on the same
observations (when onnxruntime is installed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

try:  # running from a checkout without installing
    import kaiwu_infer  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import gymnasium as gym
import torch
import torch.nn as nn

import kaiwu_infer
import kaiwu_infer.torch as kt

SOLVED = 475.0
GAMMA = 0.98


class Policy(nn.Module):
    """Actor-critic MLP: obs -> (action logits, state value)."""

    def __init__(self, obs_dim: int = 4, n_actions: int = 2, hidden: int = 64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(),
                                  nn.Linear(hidden, hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, n_actions)
        self.v = nn.Linear(hidden, 1)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.orthogonal_(m.weight, np.sqrt(2))
                nn.init.zeros_(m.bias)
        nn.init.orthogonal_(self.pi.weight, 0.01)
        nn.init.orthogonal_(self.v.weight, 1.0)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h).squeeze(-1)


def make_session(policy: Policy, obs_dim: int, threads: int = 1):
    """Exports the policy once (with its refit map) and opens a kaiwu_infer session."""
    model = kt.export(policy, (torch.zeros(2, obs_dim),), input_names=["obs"],
                      output_names=["logits", "value"])
    return kt.load(model, threads=threads), model


def check_against_onnxruntime(sess, model, obs: np.ndarray) -> float | None:
    """Max abs difference between kaiwu_infer and onnxruntime outputs; raises if too large."""
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime not installed: skipping the parity check")
        return None
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = ref.run(None, {"obs": obs})
    got = sess.run({"obs": obs})
    worst = 0.0
    for name, w in zip(["logits", "value"], want):
        g = got[name]
        worst = max(worst, float(np.abs(g - w).max()))
        if not np.allclose(g, w, rtol=1e-5, atol=1e-6):
            raise SystemExit(f"kaiwu_infer and onnxruntime disagree on '{name}': max diff "
                             f"{np.abs(g - w).max():.3g}")
    return worst


@dataclass
class Timers:
    env: float = 0.0
    inference: float = 0.0
    refit: float = 0.0
    learn: float = 0.0
    refits: int = 0
    runs: int = 0


@dataclass
class Rollout:
    obs: np.ndarray
    actions: np.ndarray
    logp: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    next_value: np.ndarray


@dataclass
class Actors:
    """The vector env plus episode bookkeeping."""

    envs: gym.vector.VectorEnv
    obs: np.ndarray
    ep_return: np.ndarray
    episodes: list = field(default_factory=list)   # (env step, return)
    steps: int = 0


def make_actors(n_envs: int, seed: int) -> Actors:
    envs = gym.make_vec("CartPole-v1", num_envs=n_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    obs, _ = envs.reset(seed=seed)
    return Actors(envs, obs.astype(np.float32), np.zeros(n_envs))


def sample(logits: np.ndarray, rng: np.random.Generator):
    """Categorical sample and its log-probability (numpy, Gumbel-max)."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp_all = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    a = np.argmax(logits + rng.gumbel(size=logits.shape), axis=1)
    return a, logp_all[np.arange(len(a)), a]


def collect(sess, actors: Actors, horizon: int, gamma: float, rng, t: Timers) -> Rollout:
    n = actors.obs.shape[0]
    obs_d = actors.obs.shape[1]
    buf = Rollout(np.zeros((horizon, n, obs_d), np.float32), np.zeros((horizon, n), np.int64),
                  np.zeros((horizon, n), np.float32), np.zeros((horizon, n), np.float32),
                  np.zeros((horizon, n), np.float32), np.zeros((horizon, n), np.float32),
                  np.zeros(n, np.float32))
    for step in range(horizon):
        t0 = time.perf_counter()
        out = sess.run({"obs": actors.obs})
        t.inference += time.perf_counter() - t0
        t.runs += 1
        a, logp = sample(out["logits"], rng)
        buf.obs[step] = actors.obs
        buf.actions[step], buf.logp[step], buf.values[step] = a, logp, out["value"]
        t0 = time.perf_counter()
        obs, r, term, trunc, info = actors.envs.step(a)
        t.env += time.perf_counter() - t0
        r = r.astype(np.float32)
        actors.ep_return += r
        actors.steps += n
        if trunc.any():  # bootstrap time-limit truncations from the final observation
            idx = np.flatnonzero(trunc & ~term)
            if idx.size:
                final = np.stack([info["final_obs"][i] for i in idx]).astype(np.float32)
                t0 = time.perf_counter()
                v = sess.run({"obs": final})["value"]
                t.inference += time.perf_counter() - t0
                t.runs += 1
                r[idx] += gamma * v
        done = term | trunc
        for i in np.flatnonzero(done):
            actors.episodes.append((actors.steps, float(actors.ep_return[i])))
            actors.ep_return[i] = 0.0
        buf.rewards[step], buf.dones[step] = r, done
        actors.obs = obs.astype(np.float32)
    t0 = time.perf_counter()
    buf.next_value = sess.run({"obs": actors.obs})["value"]
    t.inference += time.perf_counter() - t0
    t.runs += 1
    return buf


def ppo_update(policy: Policy, opt, buf: Rollout, *, gamma=0.98, lam=0.8, epochs=20,
               minibatch=256, clip=0.2, vf_coef=0.5, ent_coef=0.0, rng=None):
    """GAE advantages, then PPO-clip epochs over shuffled minibatches."""
    horizon, n = buf.rewards.shape
    adv = np.zeros((horizon, n), np.float32)
    last = np.zeros(n, np.float32)
    next_v = buf.next_value
    for s in reversed(range(horizon)):
        nonterm = 1.0 - buf.dones[s]
        delta = buf.rewards[s] + gamma * next_v * nonterm - buf.values[s]
        last = delta + gamma * lam * nonterm * last
        adv[s] = last
        next_v = buf.values[s]
    ret = adv + buf.values
    obs = torch.from_numpy(buf.obs.reshape(horizon * n, -1))
    act = torch.from_numpy(buf.actions.reshape(-1))
    old_logp = torch.from_numpy(buf.logp.reshape(-1))
    adv_t = torch.from_numpy(adv.reshape(-1))
    ret_t = torch.from_numpy(ret.reshape(-1))
    total = horizon * n
    for _ in range(epochs):
        perm = torch.from_numpy(rng.permutation(total))
        for i in range(0, total, minibatch):
            idx = perm[i : i + minibatch]
            logits, v = policy(obs[idx])
            logp_all = torch.log_softmax(logits, dim=-1)
            logp = logp_all.gather(1, act[idx, None]).squeeze(1)
            a = adv_t[idx]
            a = (a - a.mean()) / (a.std() + 1e-8)
            ratio = torch.exp(logp - old_logp[idx])
            pg = -torch.min(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a).mean()
            vf = 0.5 * ((v - ret_t[idx]) ** 2).mean()
            ent = -(logp_all.exp() * logp_all).sum(-1).mean()
            loss = pg + vf_coef * vf - ent_coef * ent
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            opt.step()


def mean_last(episodes, k=20) -> float:
    if not episodes:
        return 0.0
    return float(np.mean([r for _, r in episodes[-k:]]))


def train(*, n_envs=16, horizon=32, max_seconds=180.0, max_iters=2000, seed=0, lr=1e-3,
          anneal_steps=150_000, minibatch=256, epochs=20, threads=1, progress=True, log=print):
    """Runs the loop; returns a dict with the episodes, timers and iteration records."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    policy = Policy()
    opt = torch.optim.Adam(policy.parameters(), lr=lr, eps=1e-5)
    sess, model = make_session(policy, 4, threads)
    actors = make_actors(n_envs, seed)

    diff = check_against_onnxruntime(sess, model, rng.normal(size=(64, 4)).astype(np.float32))
    if diff is not None:
        log(f"parity check: kaiwu_infer vs onnxruntime max abs diff {diff:.2e} (rtol 1e-5, atol 1e-6)")

    t = Timers()
    history = []  # (iteration, env steps, mean of last 20 returns, seconds)
    start = time.perf_counter()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=max_iters, desc="PPO", unit="it")
    solved = False
    it = 0
    try:
        for it in range(1, max_iters + 1):
            buf = collect(sess, actors, horizon, GAMMA, rng, t)
            t0 = time.perf_counter()
            frac = max(0.0, 1.0 - actors.steps / anneal_steps)
            for g in opt.param_groups:
                g["lr"] = lr * max(frac, 0.05)
            ppo_update(policy, opt, buf, rng=rng, gamma=GAMMA, minibatch=minibatch, epochs=epochs)
            t.learn += time.perf_counter() - t0
            t0 = time.perf_counter()
            sess.refit(policy.state_dict())
            t.refit += time.perf_counter() - t0
            t.refits += 1
            m = mean_last(actors.episodes)
            elapsed = time.perf_counter() - start
            history.append((it, actors.steps, m, elapsed))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(ret20=f"{m:.0f}", steps=actors.steps, v=sess.weights_version)
            if len(actors.episodes) >= 20 and m >= SOLVED:
                solved = True
                break
            if elapsed >= max_seconds:
                break
    finally:
        if bar is not None:
            bar.close()
        actors.envs.close()
    wall = time.perf_counter() - start
    return dict(policy=policy, sess=sess, model=model, episodes=actors.episodes,
                history=history, timers=t, solved=solved, iterations=it, wall=wall,
                steps=actors.steps)


def report(res, log=print):
    t: Timers = res["timers"]
    wall = res["wall"]
    other = wall - t.env - t.inference - t.refit - t.learn
    status = "solved" if res["solved"] else "NOT solved (cap reached)"
    log(f"{status} after {res['iterations']} updates, {res['steps']} env steps, "
        f"{len(res['episodes'])} episodes, {wall:.1f} s; mean return of last 20 episodes "
        f"{mean_last(res['episodes']):.1f}")
    log(f"  inference {t.inference:7.2f} s  ({t.runs} runs, {1e6 * t.inference / max(t.runs, 1):.0f} us/run)")
    log(f"  refit     {t.refit:7.2f} s  ({t.refits} refits, {1e6 * t.refit / max(t.refits, 1):.0f} us/refit)")
    log(f"  learning  {t.learn:7.2f} s")
    log(f"  env       {t.env:7.2f} s")
    log(f"  other     {other:7.2f} s  (sampling, bookkeeping)")


def plot(res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ep = np.array(res["episodes"]) if res["episodes"] else np.zeros((0, 2))
    fig, ax = plt.subplots(figsize=(7, 4))
    if len(ep):
        ax.plot(ep[:, 0], ep[:, 1], ".", alpha=0.25, ms=3, label="episode return")
    h = np.array(res["history"])
    if len(h):
        ax.plot(h[:, 1], h[:, 2], "-", lw=2, label="mean of last 20")
    ax.axhline(SOLVED, color="gray", ls="--", lw=1, label=f"solved ({SOLVED:.0f})")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return")
    ax.set_title("CartPole-v1: PPO learner, kaiwu_infer actors with refit after every update")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="selfplay_curve.png", help="learning curve PNG")
    p.add_argument("--envs", type=int, default=16)
    p.add_argument("--horizon", type=int, default=32, help="env steps per actor per update")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--minibatch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--max-seconds", type=float, default=180.0)
    p.add_argument("--max-iters", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="kaiwu_infer threads per run")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    print(f"kaiwu_infer {kaiwu_infer.__version__}, torch {torch.__version__}, "
          f"gymnasium {gym.__version__}")
    res = train(n_envs=a.envs, horizon=a.horizon, max_seconds=a.max_seconds,
                max_iters=a.max_iters, seed=a.seed, threads=a.threads, lr=a.lr,
                minibatch=a.minibatch, epochs=a.epochs,
                progress=not a.no_progress)
    report(res)
    plot(res, a.out)
    print(f"learning curve: {a.out}")
    return 0 if res["solved"] else 1


if __name__ == "__main__":
    sys.exit(main())
