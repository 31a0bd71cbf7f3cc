"""kaiwu_infer.ray on a local Ray (4 logical CPUs): results equal per-actor Sessions
across servers and env workers, routing, weight broadcast and versions, typed errors,
a server killed mid-run, dead env workers dropped."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'kaiwu_infer[ray]')")

import kaiwu_infer as ki  # noqa: E402
import kaiwu_infer.ray as kr  # noqa: E402
import ray_workers as rw  # noqa: E402
import test_server_proc as proc  # noqa: E402
from test_server import _lstm_policy_bytes, _mlp_bytes  # noqa: E402

STATE = {"h0": "hn", "c0": "cn"}
RTOL, ATOL = 1e-5, 1e-6
SMALL = dict(num_cpus=0.25, max_wait_us=200)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    if ray.is_initialized():
        ray.shutdown()
    rw.ray_init(ray, num_cpus=4, object_store_memory=150 * 1024 * 1024)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def lstm():
    return _lstm_policy_bytes()


def _same(got, want, what=""):
    assert len(got) == len(want)
    for t, (g, w) in enumerate(zip(got, want)):
        for k in w:
            np.testing.assert_allclose(g[k], w[k], rtol=RTOL, atol=ATOL, err_msg=f"{what} step {t} {k}")


def _random_weights(sess, seed):
    rng = np.random.default_rng(seed)
    return {n: (0.3 * rng.standard_normal(shape)).astype(dt) for n, (shape, dt) in sess.weights_info.items()}


def _workers(pool, groups, transports):
    Worker = ray.remote(num_cpus=0)(rw.EnvWorker)
    return [Worker.remote(pool.client(transport=tr), g) for g, tr in zip(groups, transports)]


# ------------------------------------------------------------------ results

def test_two_servers_four_workers_equal_per_actor_sessions(lstm):
    """4 env workers (2 through shared memory, 2 through Ray calls), 2 actors each with
    3-5 rows, on 2 servers: every step equals a Session with the LSTM state carried by
    hand, dones included, and each actor always lands on the same server."""
    groups = [{10 * w + j: 3 + (w + j) % 3 for j in range(2)} for w in range(4)]
    with kr.RayInferenceServerPool(2, lstm, state=STATE, **SMALL) as pool:
        workers = _workers(pool, groups, ["auto", "ray", "auto", "ray"])
        w1 = _random_weights(ki.Session(lstm), 1)
        pool.refit(w1)
        res = ray.get([w.run.remote(list(range(6)), submit=(i % 2 == 0)) for i, w in enumerate(workers)])
        sess = ki.Session(lstm)
        sess.refit(w1)
        servers = set()
        c = pool.client()
        for g, r, tr in zip(groups, res, ["shm", "ray", "shm", "ray"]):
            for aid, rows in g.items():
                want, _ = rw.reference(sess, aid, range(6), rows)
                _same(r[aid]["outs"], want, f"actor {aid}")
                assert set(r[aid]["server"]) == {c.server_of(aid)}
                assert set(r[aid]["transport"]) == {tr}
                assert not any(r[aid]["reset"])
                servers.add(c.server_of(aid))
        assert servers == {0, 1}
        st = pool.stats()["servers"]
        assert [s["server"] for s in st] == [0, 1] and sum(s["remote_actors"] for s in st) == 4


def test_routing_is_stable_and_spread():
    counts = np.bincount([kr.route(a, 4) for a in range(4000)], minlength=4)
    assert counts.min() > 850, counts
    assert all(kr.route(a, 4) == kr.route(a, 4) for a in range(100))
    # highest-random-weight: a 5th server takes actors only for itself
    moved = [a for a in range(4000) if kr.route(a, 4) != kr.route(a, 5)]
    assert all(kr.route(a, 5) == 4 for a in moved) and 500 < len(moved) < 1100


def test_gpu_servers_default_to_two_batching_threads():
    from kaiwu_infer.ray._pool import _server_options

    cpu = _server_options({"max_batch": 64}, 2, "base", None)
    assert "workers" not in cpu and cpu["threads"] == 2 and cpu["max_batch"] == 64
    assert _server_options({"device": "cuda"}, 1, "base", None)["workers"] == 2
    assert _server_options({"device": "cuda:1"}, 1, "base", None)["workers"] == 2
    assert _server_options({"device": "cuda", "workers": 1}, 1, "base", None)["workers"] == 1
    assert _server_options({"device": "cpu", "workers": 3}, 1, "v0", False) == {
        "device": "cpu", "workers": 3, "threads": 1, "base_version": "v0", "warmup": False}


def test_warmup_follows_inference_server():
    """warmup=None (the default) builds every padded batch size's plan at start where an
    InferenceServer would (a channels-last conv session), not for an MLP. The servers' stats
    count the plans their sessions built."""
    import policies

    plans = lambda pool: pool.stats()["servers"][0]["plans"]  # noqa: E731
    counts = {}
    for name, model in (("mlp", _mlp_bytes()), ("conv", policies.export_bytes("atari_cnn"))):
        for warm in (None, False):
            with kr.RayInferenceServerPool(1, model, max_batch=8, warmup=warm, **SMALL) as pool:
                counts[name, warm] = plans(pool)
                if name == "conv" and warm is None:
                    frames = policies.make_inputs("atari_cnn", 3, seed=5)["frames"]
                    got = pool.client().infer(7, {"frames": frames})
                    want = ki.Session(model).run({"frames": frames})
                    for k in want:
                        np.testing.assert_allclose(got[k], want[k], rtol=RTOL, atol=ATOL)
    assert "layout_nhwc" in ki.Session(policies.export_bytes("atari_cnn")).describe()
    assert "layout_nhwc" not in ki.Session(_mlp_bytes()).describe()
    assert counts["mlp", None] == counts["mlp", False]
    assert counts["conv", None] >= counts["conv", False] + 2 and counts["conv", None] >= 4  # sizes 1, 2, 4, 8


# ------------------------------------------------------------------ weights

def test_refit_broadcast_reaches_every_server():
    """One put, three servers: dicts, ObjectRefs and torch state_dicts all reach every
    server (actors routed to each of them see the new weights); full refits compact the
    weight log to one entry."""
    torch = pytest.importorskip("torch")
    import kaiwu_infer.torch as kt

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    model = kt.export(net, (torch.zeros(2, 6),), input_names=["obs"], output_names=["y"])
    ids = {}
    for a in range(100):
        ids.setdefault(kr.route(a, 3), a)
    assert len(ids) == 3
    obs = np.random.default_rng(3).standard_normal((5, 6)).astype(np.float32)
    with kr.RayInferenceServerPool(3, model, **SMALL) as pool:
        c = pool.client(transport="ray")
        sess = kt.load(model)
        for k in range(3):
            with torch.no_grad():
                for p in net.parameters():
                    p.add_(torch.randn_like(p))
            sd = net.state_dict()
            if k == 0:
                rep = pool.refit(sd)                       # torch state_dict
            elif k == 1:
                rep = pool.refit(kr.put_weights(sd))       # ObjectRef of a state_dict
            else:
                arrays, _ = sess.refit_map.apply(sd)     # dict of initializer names
                rep = pool.refit(arrays)
            assert rep.updated
            sess.refit(sd)
            want = sess.run({"obs": obs})["y"]
            with torch.no_grad():
                np.testing.assert_allclose(want, net(torch.from_numpy(obs)).numpy(), rtol=1e-5, atol=1e-5)
            for srv, aid in ids.items():
                r = c.infer(aid, {"obs": obs})
                assert r.server == srv
                np.testing.assert_allclose(r["y"], want, rtol=RTOL, atol=ATOL, err_msg=f"server {srv}")
        assert pool.stats()["log_entries"] == 1


def test_versions_and_typed_errors(lstm):
    sess = ki.Session(lstm)
    w1, w2 = _random_weights(sess, 1), _random_weights(sess, 2)
    pool = kr.RayInferenceServerPool(2, lstm, state=STATE, **SMALL)
    try:
        pool.add_version("league_07", kr.put_weights(w1))
        pool.refit(w2, version="base")
        assert pool.versions == ["base", "league_07"] and pool.latest == "league_07"
        s1, s2 = ki.Session(lstm), ki.Session(lstm)
        s1.refit(w1)
        s2.refit(w2)
        for tr in ("shm", "ray"):
            c = pool.client(transport=tr)
            for v, s in ((None, s1), ("league_07", s1), ("base", s2)):
                aid = {"shm": 100, "ray": 200}[tr] + (0 if v is None else len(v))
                got = rw.EnvWorker(c, {aid: 4}).run([0, 1], version=v)[aid]["outs"]
                _same(got, rw.reference(s, aid, range(2), 4)[0], f"{tr} {v}")
            with pytest.raises(ki.InputError, match="version"):
                c.infer(7, {"obs": proc.obs_for(7, 0, 2, rw.OBS)}, version="missing")
            with pytest.raises(ki.InputError, match="obs"):
                c.infer(8, {"obs": np.zeros((2, rw.OBS + 1), np.float32)})
            c.close()
        with pytest.raises(ki.RefitError, match="shape"):
            pool.refit({next(iter(w1)): np.zeros((1, 1), np.float32)})
        pool.remove_version("league_07")
        assert pool.versions == ["base"]
        c = pool.client(transport="ray")
        with pytest.raises(ki.InputError, match="league_07"):
            c.infer(9, {"obs": proc.obs_for(9, 0, 2, rw.OBS)}, version="league_07")
    finally:
        pool.close()
    for tr in ("shm", "ray"):
        with pytest.raises(ki.ServerClosedError):
            pool.client(transport="auto" if tr == "shm" else tr).infer(1, {"obs": proc.obs_for(1, 0, 2, rw.OBS)})
    with pytest.raises(ki.ServerClosedError):
        pool.refit(w1)


def test_bad_model_raises_typed_error():
    with pytest.raises(ki.ModelError):
        kr.RayInferenceServer(b"not an onnx model", max_restarts=0, num_cpus=0.25)
    with pytest.raises(ki.ModelFileNotFoundError):
        kr.RayInferenceServer("/nonexistent/model.onnx")


# ------------------------------------------------------------------ faults

def _kill_now(pid):
    """SIGKILL a server process and wait until it is gone (ray.kill is asynchronous)."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} still alive")


def _wait_restart(pool, i, old):
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            inc = ray.get(pool.handles[i].ping.remote(), timeout=5)
            if inc != old:
                return inc
        except Exception:  # noqa: BLE001 - restarting
            pass
        time.sleep(0.1)
    raise AssertionError("server did not restart")


def test_killed_server_restarts_with_latest_weights_and_flags_state(lstm):
    """SIGKILL one of two servers between steps 3 and 4 and keep stepping at once: the
    workers' calls retry through the restart; the restarted server runs the latest
    weights (replayed from the object store) and its actors' state restarts from zeros
    with ``state_reset`` set on that step only; the other server's actors go on."""
    groups = [{1: 3, 2: 4, 3: 2}, {4: 3, 5: 2, 6: 4}]
    sess = ki.Session(lstm)
    w1 = _random_weights(sess, 5)
    sess.refit(w1)
    with kr.RayInferenceServerPool(2, lstm, state=STATE, max_restarts=2, **SMALL) as pool:
        pool.add_version("old", w1)
        pool.refit(_random_weights(sess, 6), version="base")
        pool.remove_version("old")
        pool.refit(w1)                      # the latest: must come back after the restart
        workers = _workers(pool, groups, ["auto", "ray"])
        first = ray.get([w.run.remote([0, 1, 2, 3]) for w in workers])
        victim = pool.client().server_of(1)
        old = ray.get(pool.handles[victim].ping.remote())
        _kill_now(ray.get(pool.handles[victim].info.remote())["pid"])
        second = ray.get([w.run.remote([4, 5, 6]) for w in workers], timeout=120)
        _wait_restart(pool, victim, old)
        c = pool.client()
        for g, a, b in zip(groups, first, second):
            for aid, rows in g.items():
                hit = c.server_of(aid) == victim
                want, _ = rw.reference(sess, aid, range(7), rows, zero_at={4} if hit else ())
                _same(a[aid]["outs"] + b[aid]["outs"], want, f"actor {aid}")
                assert b[aid]["reset"] == [hit, False, False], (aid, b[aid]["reset"])
                assert not any(a[aid]["reset"])
        st = pool.stats()["servers"]
        assert st[victim]["restarted"] and not st[1 - victim]["restarted"]
        assert st[victim]["version_tags"] == ["base"] and st[victim]["log_entries_replayed"] >= 1


def test_dead_env_worker_dropped_after_timeout(lstm):
    """An env worker killed mid-run: its Ray-call actors are dropped after
    actor_timeout, its shared-memory actors when its process is gone; an actor that
    comes back after being dropped sees state_reset."""
    with kr.RayInferenceServer(lstm, state=STATE, actor_timeout=1.0, **SMALL) as srv:
        Worker = ray.remote(num_cpus=0)(rw.EnvWorker)
        wr = Worker.remote(srv.client(transport="ray"), {1: 2, 2: 2})
        ws = Worker.remote(srv.client(transport="shm"), {3: 2})
        ray.get([wr.run.remote([0, 1]), ws.run.remote([0, 1])])
        st = srv.stats()
        assert st["remote_actors"] + st["dropped_actors"] == 2, st  # dropped if 1 s went by
        assert st["shm_clients"] == 1, st
        ray.kill(wr)
        ray.kill(ws)
        deadline = time.time() + 20
        while time.time() < deadline:
            st = srv.stats()
            if st["remote_actors"] == 0 and st["connected_actors"] == 0:
                break
            time.sleep(0.1)
        assert st["remote_actors"] == 0 and st["dropped_actors"] == 2, st
        assert st["connected_actors"] == 0, st
        c = srv.client(transport="ray")
        r = rw.EnvWorker(c, {7: 2}).run([0])[7]
        time.sleep(2.0)
        again = rw.EnvWorker(c, {7: 2}).run([1])[7]
        assert r["reset"] == [False] and again["reset"] == [True]


# ------------------------------------------------------------------ weight log

def test_weight_log_compaction_replays_to_the_same_versions():
    """Random refit / add_version / remove_version sequences on a model of dicts: replaying
    the compacted log gives the same versions and weights as applying every operation."""
    from kaiwu_infer.ray._log import WeightLog

    names = ["a", "b", "c"]

    def apply(state, e, w):
        versions, latest = state
        if e.op == "remove":
            del versions[e.tag]
            return versions, (latest if latest != e.tag else list(versions)[-1])
        if e.op == "refit":
            versions[e.tag] = {**versions[e.tag], **w}
            return versions, latest
        versions[e.tag] = {**versions[e.base or latest], **w}
        return versions, e.tag

    rng = np.random.default_rng(0)
    compacted = 0
    for trial in range(200):
        log, state, weights = WeightLog(), ({"base": dict.fromkeys(names, 0)}, "base"), {}
        for k in range(int(rng.integers(1, 14))):
            versions, latest = state
            op = rng.choice(["refit", "refit", "add", "remove"])
            full = rng.random() < 0.6
            w = {n: k + 1 for n in (names if full else rng.choice(names, 2, replace=False))}
            if op == "remove":
                cands = [v for v in versions if v != "base"]
                if not cands:
                    continue
                e = log.append("remove", str(rng.choice(cands)), None, None)
            elif op == "add":
                base = str(rng.choice(list(versions))) if rng.random() < 0.5 else None
                e = log.append("add", f"v{k}", base, [k])
            else:
                tag = str(rng.choice(list(versions))) if rng.random() < 0.5 else None
                e = log.append("refit", tag, None, [k])
            weights[k] = w
            state = apply(state, e, w if e.op != "remove" else None)
            log.set_latest(state[1])
            if e.op != "remove" and full:
                log.mark_full(e.seq)
        replay = ({"base": dict.fromkeys(names, 0)}, "base")
        for e in log.entries():
            replay = apply(replay, e, weights[e.box[0]] if e.box else None)
        assert replay[0] == state[0], (trial, log)
        compacted += len(log.entries()) < len(weights)
    assert compacted > 50  # the log did drop entries
