"""Env-worker Ray actors and references for the kaiwu_infer.ray tests (imported by the
Ray workers too, so kept free of torch). No tests here."""

from __future__ import annotations

import os

import numpy as np

import test_server_proc as proc

OBS, HID = 8, 16


def ray_init(ray, **kw):
    """A local Ray with few CPUs whose workers import the kaiwu_infer under test."""
    import kaiwu_infer

    pkg = os.path.dirname(os.path.dirname(os.path.abspath(kaiwu_infer.__file__)))
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join([pkg, here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    kw.setdefault("include_dashboard", False)
    kw.setdefault("log_to_driver", False)
    return ray.init(runtime_env={"env_vars": {"PYTHONPATH": path}}, **kw)


def reference(sess, seed: int, steps: range, rows: int, zero_at=(), state=None):
    """One actor alone through a Session, LSTM state carried by hand; the state is
    zeroed before the steps in ``zero_at`` (a server restart) and on done rows."""
    h, c = state if state is not None else (np.zeros((1, rows, HID), np.float32),) * 2
    outs = []
    for t in steps:
        if t in zero_at:
            h, c = np.zeros_like(h), np.zeros_like(c)
        d = proc.done_for(seed, t, rows)
        h, c = h.copy(), c.copy()
        h[:, d] = 0
        c[:, d] = 0
        r = sess.run({"obs": proc.obs_for(seed, t, rows, OBS), "h0": h, "c0": c})
        outs.append({k: np.array(v) for k, v in r.items()})
        h, c = outs[-1]["hn"].copy(), outs[-1]["cn"].copy()
    return outs, (h, c)


class EnvWorker:
    """Steps a few actors (id -> rows) through a RayClient; ray.remote'd by the tests."""

    def __init__(self, client, actors: dict):
        self.client = client
        self.actors = dict(actors)

    def run(self, steps: list, version=None, submit: bool = False) -> dict:
        res = {aid: {"outs": [], "reset": [], "server": [], "transport": []} for aid in self.actors}
        for t in steps:
            if submit:
                futs = {aid: self.client.submit(aid, {"obs": proc.obs_for(aid, t, rows, OBS)},
                                                done=proc.done_for(aid, t, rows), version=version)
                        for aid, rows in self.actors.items()}
                outs = {aid: f.result(60) for aid, f in futs.items()}
            else:
                outs = {aid: self.client.infer(aid, {"obs": proc.obs_for(aid, t, rows, OBS)},
                                               done=proc.done_for(aid, t, rows), version=version)
                        for aid, rows in self.actors.items()}
            for aid, r in outs.items():
                res[aid]["outs"].append({k: np.array(v) for k, v in r.items()})
                res[aid]["reset"].append(r.state_reset)
                res[aid]["server"].append(r.server)
                res[aid]["transport"].append(r.transport)
        return res

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def pid(self) -> int:
        return os.getpid()
