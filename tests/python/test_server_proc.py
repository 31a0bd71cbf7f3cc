"""Helpers run in child processes by test_server.py (kept free of torch so that
spawned children start fast). No tests here."""

from __future__ import annotations

import os
import time

import numpy as np


def obs_for(seed: int, step: int, rows: int, dim: int) -> np.ndarray:
    rng = np.random.default_rng(seed * 100003 + step)
    return rng.standard_normal((rows, dim)).astype(np.float32)


def done_for(seed: int, step: int, rows: int) -> np.ndarray:
    rng = np.random.default_rng(seed * 7919 + step + 1)
    return rng.random(rows) < 0.15


def client_actor(name: str, seed: int, steps: int, rows: int, dim: int, queue, version=None) -> None:
    """Steps `steps` times, sends (seed, list of per-step outputs) back."""
    import kaiwu_infer

    out = []
    with kaiwu_infer.connect(name, timeout=20) as c:
        for t in range(steps):
            r = c.infer({"obs": obs_for(seed, t, rows, dim)}, done=done_for(seed, t, rows), version=version)
            out.append({k: np.array(v) for k, v in r.items()})
    queue.put((seed, out))


def client_forever(name: str, rows: int, dim: int, started) -> None:
    """Steps until killed."""
    import kaiwu_infer

    c = kaiwu_infer.connect(name, timeout=20)
    t = 0
    while True:
        c.infer({"obs": obs_for(999, t, rows, dim)})
        if t == 3:
            started.set()
        t += 1


def client_connect_and_sleep(name: str, started) -> None:
    """Holds a slot without stepping (until killed)."""
    import kaiwu_infer

    c = kaiwu_infer.connect(name, timeout=20)  # noqa: F841 - held on purpose
    started.set()
    while True:
        time.sleep(0.05)


def env_worker_pid() -> int:
    return os.getpid()
