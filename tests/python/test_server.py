"""InferenceServer: batched self-play stepping equals per-actor stepping, weight
versions, faults, shared-memory clients in other processes."""

from __future__ import annotations

import gc
import io
import multiprocessing as mp
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

import kaiwu_infer as ki

sys.path.insert(0, os.path.dirname(__file__))
import test_server_proc as proc  # noqa: E402

OBS, HID, ACT = 8, 16, 4
RTOL, ATOL = 1e-5, 1e-6


# ---------------------------------------------------------------- models

def _lstm_policy_bytes(seed: int = 0, layers: int = 1) -> bytes:
    torch = pytest.importorskip("torch")

    class Policy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.nn.Linear(OBS, HID)
            self.lstm = torch.nn.LSTM(HID, HID, num_layers=layers)
            self.pi = torch.nn.Linear(HID, ACT)
            self.v = torch.nn.Linear(HID, 1)

        def forward(self, obs, h0, c0):
            x = torch.relu(self.enc(obs)).unsqueeze(0)
            y, (hn, cn) = self.lstm(x, (h0, c0))
            y = y.squeeze(0)
            return self.pi(y), self.v(y), hn, cn

    torch.manual_seed(seed)
    m = Policy().eval()
    b = 3
    args = (torch.randn(b, OBS), torch.zeros(layers, b, HID), torch.zeros(layers, b, HID))
    f = io.BytesIO()
    torch.onnx.export(
        m, args, f, dynamo=False, input_names=["obs", "h0", "c0"],
        output_names=["logits", "value", "hn", "cn"], opset_version=17,
        dynamic_axes={"obs": {0: "batch"}, "h0": {1: "batch"}, "c0": {1: "batch"},
                      "logits": {0: "batch"}, "value": {0: "batch"}, "hn": {1: "batch"},
                      "cn": {1: "batch"}},
    )
    return f.getvalue()


def _mlp_bytes() -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((OBS, ACT)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal((ACT,)).astype(np.float32), "b")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["obs", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["y"])],
        "mlp", [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", OBS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", ACT])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.fixture(scope="module")
def lstm_bytes():
    try:
        data = _lstm_policy_bytes()
        ki.Session(data)
    except ki.UnsupportedOpError as e:
        pytest.skip(f"kernels not available yet: {e}")
    return data


@pytest.fixture(scope="module")
def mlp_bytes():
    data = _mlp_bytes()
    try:
        ki.Session(data)
    except ki.UnsupportedOpError as e:
        pytest.skip(f"kernels not available yet: {e}")
    return data


STATE = {"h0": "hn", "c0": "cn"}


def _reference(sess, seed, steps, rows, dim=OBS, layers=1):
    """One actor alone through a plain Session, state carried by hand."""
    h = np.zeros((layers, rows, HID), np.float32)
    c = np.zeros((layers, rows, HID), np.float32)
    outs = []
    for t in range(steps):
        d = proc.done_for(seed, t, rows)
        h[:, d] = 0
        c[:, d] = 0
        r = sess.run({"obs": proc.obs_for(seed, t, rows, dim), "h0": h, "c0": c})
        outs.append({k: np.array(v) for k, v in r.items()})
        h, c = outs[-1]["hn"].copy(), outs[-1]["cn"].copy()
    return outs


def _assert_same(got, want):
    assert len(got) == len(want)
    for t, (g, w) in enumerate(zip(got, want)):
        for k in w:
            np.testing.assert_allclose(g[k], w[k], rtol=RTOL, atol=ATOL, err_msg=f"step {t} output {k}")


# ---------------------------------------------------------------- stepping

def test_state_batch_axis_from_symbols(lstm_bytes):
    with ki.InferenceServer(lstm_bytes, state=STATE, threads=1) as srv:
        assert srv._server.state_batch_axes == [1, 1]
        assert srv.feed_inputs == ["obs"]


def _step_actors(srv, rows_of, steps):
    """Each actor in its own thread steps `steps` times (obs and episode ends
    from test_server_proc); returns {actor: [outputs per step]} and the stats."""
    results: dict[int, list] = {}
    errors = []

    def actor(a):
        try:
            outs = []
            for t in range(steps):
                d = proc.done_for(a, t, rows_of[a])
                r = srv.infer(a, {"obs": proc.obs_for(a, t, rows_of[a], OBS)}, done=d)
                outs.append({k: np.array(v) for k, v in r.items()})
            results[a] = outs
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=actor, args=(a,)) for a in rows_of]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors, errors
    return results, srv.stats()


@pytest.mark.parametrize("threads,split", [(1, True), (4, True), (4, False)],
                         ids=["1thread", "4threads-sliced", "4threads-whole"])
def test_many_thread_actors_equal_per_actor_sessions(lstm_bytes, threads, split):
    # With several threads a batch runs as slices side by side (split_batches),
    # each slice a separate Run over some actors' rows and state.
    sess = ki.Session(lstm_bytes, threads=threads)
    steps = 25
    rows_of = {a: (1 if a % 3 else 3) for a in range(12)}
    with ki.InferenceServer(sess, state=STATE, max_batch=16, max_wait_us=2000,
                            split_batches=split) as srv:
        results, st = _step_actors(srv, rows_of, steps)
    for a, rows in rows_of.items():
        _assert_same(results[a], _reference(sess, a, steps, rows))
    assert st["requests"] == steps * len(rows_of)
    assert st["mean_batch_rows"] > 1  # batching happened
    assert sum(st["batch_rows_hist"].values()) == st["batches"]
    if threads > 1 and split:
        assert st["sliced_batches"] > 0
    else:
        assert st["sliced_batches"] == 0


@pytest.mark.parametrize("pad", [True, False], ids=["padded", "unpadded"])
def test_sliced_batches_split_requests_and_layered_state(pad):
    # Slices cut through multi-row requests (rows of one actor land in two
    # slices) and the state has rows on axis 1 of [layers=2, batch, hidden].
    data = _lstm_policy_bytes(seed=3, layers=2)
    sess = ki.Session(data, threads=4)
    steps = 12
    rows_of = {a: [1, 3, 5, 2][a % 4] for a in range(10)}
    with ki.InferenceServer(sess, state=STATE, max_batch=64, max_wait_us=20000, pad_batches=pad,
                            min_slice_us=0) as srv:
        results, st = _step_actors(srv, rows_of, steps)
    for a, rows in rows_of.items():
        _assert_same(results[a], _reference(sess, a, steps, rows, layers=2))
    assert st["sliced_batches"] > 0
    assert st["mean_batch_rows"] > 5


@pytest.mark.parametrize("kw,match", [({"max_batch": 0}, "max_batch"), ({"workers": 0}, "workers"),
                                      ({"min_slice_us": -1.0}, "min_slice_us")])
def test_bad_server_options_raise_input_error(mlp_bytes, kw, match):
    with pytest.raises(ki.InputError, match=match):
        ki.InferenceServer(mlp_bytes, threads=1, **kw)


def test_submit_future_and_reset(lstm_bytes):
    sess = ki.Session(lstm_bytes, threads=1)
    with ki.InferenceServer(sess, state=STATE, max_wait_us=100) as srv:
        obs = proc.obs_for(1, 0, 2, OBS)
        f = srv.submit(7, {"obs": obs})
        seen, called = [], threading.Event()
        f.add_done_callback(lambda fut: (seen.append(fut.done()), called.set()))
        r1 = f.result(timeout=30)
        assert f.done() and f.exception() is None
        assert called.wait(30) and seen == [True]
        r2 = srv.infer(7, {"obs": obs})
        assert not np.allclose(r1["logits"], r2["logits"])  # state carried
        srv.reset(7)
        r3 = srv.infer(7, {"obs": obs})
        np.testing.assert_allclose(r3["logits"], r1["logits"], rtol=RTOL, atol=ATOL)
        r4 = srv.infer(7, {"obs": obs}, done=True)
        np.testing.assert_allclose(r4["logits"], r1["logits"], rtol=RTOL, atol=ATOL)
        # per-row done: only row 1 restarts
        r5 = srv.infer(7, {"obs": obs}, done=[False, True])
        np.testing.assert_allclose(r5["logits"][1], r1["logits"][1], rtol=RTOL, atol=ATOL)
        assert not np.allclose(r5["logits"][0], r1["logits"][0])


def test_requests_of_any_size_are_checked_through_the_warm_plans():
    """A request is checked against shape inference through the plan of the padded size its
    batch runs as: after warm-up, requests of 3, 5, 6 and 7 rows build no plan (a channels-last
    conv policy, whose plans are the costly ones), and their results equal a Session's. On the
    CPU the buckets are fine: every size up to 16 is one."""
    import policies

    model = policies.export_bytes("atari_cnn")
    ref = ki.Session(model, threads=1)
    with ki.InferenceServer(model, threads=1, max_batch=8) as srv:  # warm by default: NHWC convs
        assert srv.session.plans == 8  # 1 to 8
        for rows in (3, 5, 6, 7):
            frames = policies.make_inputs("atari_cnn", rows, seed=rows)["frames"]
            got = srv.infer(rows, {"frames": frames})
            want = ref.run({"frames": frames})
            for k in want:
                np.testing.assert_allclose(got[k], want[k], rtol=RTOL, atol=ATOL, err_msg=f"{rows} rows {k}")
            assert srv.session.plans == 8, rows
        with pytest.raises(ki.InputError, match="frames"):
            srv.infer(9, {"frames": np.zeros((3, 4, 84, 83), np.uint8)})


def test_warmup_builds_every_batch_size_and_leaves_actors_alone(lstm_bytes, mlp_bytes):
    # Padded batch sizes up to 64 on the CPU: 1 to 16, 18, 20, ..., 32, 36, 40, ..., 64.
    sess = ki.Session(mlp_bytes, threads=1)
    with ki.InferenceServer(sess, max_batch=64, warmup=True) as srv:
        assert sess.plans == 32
        assert srv.warmup() == 32 and sess.plans == 32  # again: the same plans
        st = srv.stats()
        assert st["requests"] == 0 and st["batches"] == 0 and st["connected_actors"] == 0
        x = proc.obs_for(3, 0, 2, OBS)
        np.testing.assert_allclose(srv.infer(1, {"obs": x})["y"], sess.run({"obs": x})["y"], rtol=RTOL, atol=ATOL)
    with ki.InferenceServer(mlp_bytes, threads=1, max_batch=64, pad_batches=False) as srv:
        assert srv.warmup() == 0  # unpadded sizes are unbounded: nothing to warm
    with pytest.raises(ki.ServerClosedError):
        srv.warmup()
    # A recurrent server: warm-up runs zero state at every size; actors then step as alone.
    lstm = ki.Session(lstm_bytes, threads=2)
    steps, rows_of = 8, {a: (1 if a % 2 else 3) for a in range(6)}
    with ki.InferenceServer(lstm, state=STATE, max_batch=16, max_wait_us=2000, workers=2, warmup=True) as srv:
        assert lstm.plans == 16  # 1 to 16
        results, _ = _step_actors(srv, rows_of, steps)
    for a, rows in rows_of.items():
        _assert_same(results[a], _reference(lstm, a, steps, rows))


# ---------------------------------------------------------------- versions

def _perturbed(sess, scale, seed):
    rng = np.random.default_rng(seed)
    return {k: (v + scale * rng.standard_normal(v.shape)).astype(v.dtype) for k, v in sess.get_weights().items()}


def test_versions_match_sessions_and_refit_at_step_boundary(lstm_bytes):
    base = ki.Session(lstm_bytes, threads=1)
    w1, w1b = _perturbed(base, 0.1, 1), _perturbed(base, 0.1, 2)
    ref_v1, ref_v1b = ki.Session(lstm_bytes, threads=1), ki.Session(lstm_bytes, threads=1)
    ref_v1.refit(w1)
    ref_v1b.refit(w1b)
    steps, switch = 12, 6
    actors = {0: "base", 1: "v1", 2: "base", 3: "v1"}
    barrier = threading.Barrier(len(actors) + 1)
    results = {}
    srv = ki.InferenceServer(base, state=STATE, max_wait_us=1000)
    srv.add_version("v1", w1)
    assert srv.versions == ["base", "v1"] and srv.latest == "v1"

    def actor(a):
        outs = []
        for t in range(steps):
            if t == switch:
                barrier.wait()  # main refits v1 here
                barrier.wait()
            r = srv.infer(a, {"obs": proc.obs_for(a, t, 2, OBS)}, done=proc.done_for(a, t, 2),
                          version=actors[a])
            outs.append({k: np.array(v) for k, v in r.items()})
        results[a] = outs

    ts = [threading.Thread(target=actor, args=(a,)) for a in actors]
    [t.start() for t in ts]
    barrier.wait()
    srv.refit(w1b, version="v1")
    barrier.wait()
    [t.join() for t in ts]
    st = srv.stats()
    srv.close()
    assert st["versions"]["v1"]["requests"] == 2 * steps
    for a, tag in actors.items():
        if tag == "base":
            want = _reference(base, a, steps, 2)
        else:  # v1 weights before the switch, the refitted ones after, state carried over
            pre = _reference(ref_v1, a, switch, 2)
            want = pre + _reference_from(ref_v1b, a, switch, steps, 2, pre[-1]["hn"], pre[-1]["cn"])
        _assert_same(results[a], want)


def _reference_from(sess, seed, t0, t1, rows, h, c):
    h, c = h.copy(), c.copy()
    outs = []
    for t in range(t0, t1):
        d = proc.done_for(seed, t, rows)
        h[:, d] = 0
        c[:, d] = 0
        r = sess.run({"obs": proc.obs_for(seed, t, rows, OBS), "h0": h, "c0": c})
        outs.append({k: np.array(v) for k, v in r.items()})
        h, c = outs[-1]["hn"].copy(), outs[-1]["cn"].copy()
    return outs


def test_version_errors(lstm_bytes):
    sess = ki.Session(lstm_bytes, threads=1)
    with ki.InferenceServer(sess, state=STATE) as srv:
        with pytest.raises(ki.InputError, match="unknown weight version"):
            srv.infer(0, {"obs": proc.obs_for(0, 0, 1, OBS)}, version="nope")
        srv.add_version("a", {})
        with pytest.raises(ki.InputError, match="exists"):
            srv.add_version("a", {})
        wname = next(iter(sess.weights_info))
        with pytest.raises(ki.RefitError):  # refused: version 'a' unchanged, others untouched
            srv.refit({wname: np.zeros((1,), np.float32)}, version="a")
        with pytest.raises(ki.RefitError, match="not a weight"):
            srv.refit({"nope": np.zeros((1,), np.float32)}, version="a", strict=True)
        with pytest.raises(ki.RefitError, match="unknown weight version"):
            srv.refit({}, version="zzz")
        srv.remove_version("a")
        assert srv.versions == ["base"]
        with pytest.raises(ki.InputError):
            srv.remove_version("base")


# ---------------------------------------------------------------- faults

def test_bad_feeds_fail_only_their_caller(lstm_bytes):
    sess = ki.Session(lstm_bytes, threads=1)
    with ki.InferenceServer(sess, state=STATE, max_wait_us=20000) as srv:
        good = srv.submit(1, {"obs": proc.obs_for(1, 0, 1, OBS)})
        with pytest.raises(ki.InputError, match="dtype"):
            srv.infer(2, {"obs": proc.obs_for(1, 0, 1, OBS).astype(np.float64)})
        with pytest.raises(ki.InputError, match="obs"):
            srv.infer(3, {"obs": np.zeros((1, OBS + 1), np.float32)})
        with pytest.raises(ki.InputError, match="unknown input"):
            srv.infer(4, {"obs": proc.obs_for(1, 0, 1, OBS), "x": np.zeros(1)})
        with pytest.raises(ki.InputError, match="recurrent state"):
            srv.infer(5, {"obs": proc.obs_for(1, 0, 1, OBS), "h0": np.zeros((1, 1, HID), np.float32)})
        with pytest.raises(ki.InputError, match="missing"):
            srv.infer(6, {})
        with pytest.raises(ki.InputError, match="max_batch"):
            srv.infer(7, {"obs": np.zeros((300, OBS), np.float32)})
        r = good.result(timeout=30)
        want = sess.run({"obs": proc.obs_for(1, 0, 1, OBS), "h0": np.zeros((1, 1, HID), np.float32),
                         "c0": np.zeros((1, 1, HID), np.float32)})
        np.testing.assert_allclose(r["logits"], want["logits"], rtol=RTOL, atol=ATOL)
        # a recurrent actor steps one request at a time; a row count is kept until release
        f = srv.submit(9, {"obs": proc.obs_for(1, 0, 1, OBS)})
        with pytest.raises(ki.InputError, match="in flight"):
            srv.infer(9, {"obs": proc.obs_for(1, 0, 1, OBS)})
        f.result(timeout=30)
        with pytest.raises(ki.InputError, match="rows"):
            srv.infer(9, {"obs": proc.obs_for(1, 0, 2, OBS)})
        srv.release(9)
        srv.infer(9, {"obs": proc.obs_for(1, 0, 2, OBS)})


def _stalled_server(mlp_bytes, **kw):
    """A stateless server whose batches wait 30 s unless full: actor 999 is
    connected but idle, so 'every actor waiting' never fires."""
    srv = ki.InferenceServer(mlp_bytes, threads=1, max_batch=8, max_wait_us=30_000_000, **kw)
    srv.infer(999, {"obs": np.zeros((8, OBS), np.float32)})  # runs at once (full batch)
    return srv


def test_queue_full_raise(mlp_bytes):
    srv = _stalled_server(mlp_bytes, max_queue_rows=8, queue_full="raise")
    obs = np.ones((3, OBS), np.float32)
    futs = [srv.submit(1, {"obs": obs}), srv.submit(2, {"obs": obs})]  # 6 rows queued
    with pytest.raises(ki.QueueFullError):
        srv.submit(3, {"obs": obs})
    assert isinstance(ki.QueueFullError("x"), ki.KaiwuError)
    f = srv.submit(4, {"obs": obs[:2]})  # 8 rows: a full batch runs now
    for x in futs + [f]:
        assert x.result(timeout=30)["y"].shape[0] in (2, 3)
    srv.close()


def test_queue_full_block(mlp_bytes):
    srv = _stalled_server(mlp_bytes, max_queue_rows=8, queue_full="block")
    obs = np.ones((3, OBS), np.float32)
    futs = [srv.submit(1, {"obs": obs}), srv.submit(2, {"obs": obs})]
    blocked = []

    def late():
        blocked.append(srv.submit(3, {"obs": obs}))  # blocks: 9 rows > 8

    t = threading.Thread(target=late)
    t.start()
    t.join(0.3)
    assert t.is_alive() and not blocked
    futs.append(srv.submit(4, {"obs": obs[:2]}))  # fills the batch; it runs, room frees
    t.join(30)
    assert not t.is_alive() and blocked
    srv.close()  # the blocked request was queued behind: it fails, cleanly
    for x in futs:
        x.result(timeout=30)
    exc = blocked[0].exception(timeout=30)
    assert exc is None or isinstance(exc, ki.ServerClosedError)


def test_close_fails_queued_and_later_requests(mlp_bytes):
    srv = _stalled_server(mlp_bytes)
    futs = [srv.submit(a, {"obs": np.ones((1, OBS), np.float32)}) for a in range(3)]
    waiter_err = []

    def waiter():
        try:
            srv.infer(50, {"obs": np.ones((1, OBS), np.float32)})
        except Exception as e:  # noqa: BLE001
            waiter_err.append(e)

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.1)
    with srv:
        pass  # __exit__ closes
    t.join(30)
    for f in futs:
        assert isinstance(f.exception(timeout=30), ki.ServerClosedError)
    assert len(waiter_err) == 1 and isinstance(waiter_err[0], ki.ServerClosedError)
    with pytest.raises(ki.ServerClosedError):
        srv.infer(1, {"obs": np.ones((1, OBS), np.float32)})
    assert issubclass(ki.ServerClosedError, ki.KaiwuError)


def _slow_bytes(dim=512, layers=6) -> bytes:
    """A chain of MatMuls: a 256-row run takes a noticeable time."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "obs"
    for i in range(layers):
        inits.append(numpy_helper.from_array((rng.standard_normal((dim, dim)) / dim**0.5).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"]))
        x = f"h{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    g = helper.make_graph(nodes, "slow", [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", dim])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", dim])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_requests_queued_behind_a_long_batch_wait_for_its_actors():
    """Actor 2 queues while actor 1's long batch runs. When the batch ends, actor 2's
    request has waited longer than max_wait_us, but it still waits (up to max_wait_us
    from then) for actor 1's next step, and both run as one batch instead of two
    batches of one (which would repeat: the actors would alternate)."""
    model = _slow_bytes(layers=24)
    probe = ki.Session(model, threads=1)
    big = np.ones((256, 512), np.float32)
    probe.run({"obs": big})
    t0 = time.perf_counter()
    probe.run({"obs": big})
    t_run = time.perf_counter() - t0
    # max_wait_us well under the long batch's run time, yet far above a thread's wake-up.
    wait_us = int(max(t_run / 2, 0.01) * 1e6)
    one = np.full((1, 512), 0.5, np.float32)
    with ki.InferenceServer(model, threads=1, max_batch=256, max_wait_us=wait_us) as srv:
        both = [srv.submit(a, {"obs": one}) for a in (1, 2)]  # connects both actors
        [f.result(timeout=60) for f in both]
        srv.reset_stats()
        long_batch = srv.submit(1, {"obs": big})  # 256 rows: runs at once
        deadline = time.time() + 60
        while srv.stats()["running_requests"] == 0 and time.time() < deadline:
            time.sleep(0.0005)
        late = srv.submit(2, {"obs": one})  # queues behind the running batch
        long_batch.result(timeout=60)
        again = srv.submit(1, {"obs": one})
        r2, r1 = late.result(timeout=60), again.result(timeout=60)
        hist = srv.stats()["batch_rows_hist"]
    ref = probe.run({"obs": one})["y"]
    np.testing.assert_allclose(r1["y"], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r2["y"], ref, rtol=1e-5, atol=1e-5)
    assert hist == {2: 1, 256: 1}, hist


def test_close_finishes_the_running_batch(mlp_bytes):
    srv = ki.InferenceServer(_slow_bytes(), threads=1, max_batch=256, max_wait_us=30_000_000)
    srv.infer(999, {"obs": np.zeros((256, 512), np.float32)})  # actor 999: connected, idle
    big = srv.submit(1, {"obs": np.ones((256, 512), np.float32)})  # a full batch: runs now
    deadline = time.time() + 30
    while srv.stats()["running_requests"] == 0 and not big.done() and time.time() < deadline:
        time.sleep(0.001)
    queued = [srv.submit(a, {"obs": np.ones((1, 512), np.float32)}) for a in (2, 3)]
    srv.close()  # the running batch finishes; the queued requests fail
    assert big.result(timeout=30)["y"].shape == (256, 512)
    for f in queued:
        assert isinstance(f.exception(timeout=30), ki.ServerClosedError)


# ---------------------------------------------------------------- asyncio actors

def _run_loop_actors(srv, actors, rows_of, steps, results, errors):
    """Runs `actors` as coroutines of one new event loop (in the calling thread)."""
    import asyncio

    async def actor(a):
        outs = []
        for t in range(steps):
            obs = proc.obs_for(a, t, rows_of[a], OBS)
            r = await srv.infer_async(a, {"obs": obs}, done=proc.done_for(a, t, rows_of[a]))
            outs.append({k: np.array(v) for k, v in r.items()})
        results[a] = outs

    async def main():
        await asyncio.gather(*[actor(a) for a in actors])

    try:
        asyncio.run(main())
    except Exception as e:  # noqa: BLE001
        errors.append(e)


def test_asyncio_actors_equal_per_actor_sessions(lstm_bytes):
    # Two event loops (one per thread) and a thread actor share one server: each
    # loop gets its completions through its own queue.
    sess = ki.Session(lstm_bytes, threads=2)
    steps = 25
    rows_of = {a: (1 if a % 3 else 3) for a in range(13)}
    results, errors = {}, []
    with ki.InferenceServer(sess, state=STATE, max_batch=16, max_wait_us=2000) as srv:
        loops = [threading.Thread(target=_run_loop_actors, args=(srv, group, rows_of, steps, results, errors))
                 for group in (range(0, 6), range(6, 12))]

        def thread_actor(a=12):
            outs = []
            for t in range(steps):
                r = srv.infer(a, {"obs": proc.obs_for(a, t, rows_of[a], OBS)},
                              done=proc.done_for(a, t, rows_of[a]))
                outs.append({k: np.array(v) for k, v in r.items()})
            results[a] = outs

        ts = loops + [threading.Thread(target=thread_actor)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        st = srv.stats()
    assert not errors, errors
    for a, rows in rows_of.items():
        _assert_same(results[a], _reference(sess, a, steps, rows))
    assert st["requests"] == steps * len(rows_of)
    assert st["mean_batch_rows"] > 1


def test_asyncio_errors_cancel_and_close(lstm_bytes):
    import asyncio

    sess = ki.Session(lstm_bytes, threads=1)
    obs = proc.obs_for(4, 0, 1, OBS)
    zeros = np.zeros((1, 1, HID), np.float32)
    first = sess.run({"obs": obs, "h0": zeros, "c0": zeros})
    second = sess.run({"obs": obs, "h0": first["hn"].copy(), "c0": first["cn"].copy()})

    async def main(srv):
        srv.reset(4)
        # bad feeds raise at once, naming the input, and fail only their caller
        with pytest.raises(ki.InputError, match="dtype"):
            await srv.infer_async(1, {"obs": obs.astype(np.float64)})
        with pytest.raises(ki.InputError, match="unknown input"):
            await srv.infer_async(1, {"obs": obs, "x": obs})
        # a cancelled await still steps: the actor's state advances
        task = asyncio.ensure_future(srv.infer_async(4, {"obs": obs}))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(3000):  # the cancelled step finishes in the server
            if srv.stats()["queued_requests"] + srv.stats()["running_requests"] == 0:
                break
            await asyncio.sleep(0.01)
        r = await srv.infer_async(4, {"obs": obs})
        np.testing.assert_allclose(r["logits"], second["logits"], rtol=RTOL, atol=ATOL)
        q = srv._loop_queues[asyncio.get_running_loop()]
        assert q._cq.pending == 0 and not q._reading  # nothing left registered with the loop

    with ki.InferenceServer(sess, state=STATE, max_wait_us=100) as srv:
        asyncio.run(main(srv))
        asyncio.run(main(srv))  # a second loop: the first one's queue went with it
        gc.collect()
        assert len(srv._loop_queues) == 0

    async def stalled(srv):
        # queued requests fail with ServerClosedError when the server closes
        pending = [asyncio.ensure_future(srv.infer_async(a, {"obs": np.ones((1, OBS), np.float32)}))
                   for a in range(3)]
        await asyncio.sleep(0.05)
        assert not any(p.done() for p in pending)
        srv.close()
        for p in pending:
            with pytest.raises(ki.ServerClosedError):
                await p
        with pytest.raises(ki.ServerClosedError):
            await srv.infer_async(1, {"obs": np.ones((1, OBS), np.float32)})

    asyncio.run(stalled(_stalled_server(_mlp_bytes())))


# ---------------------------------------------------------------- processes

def _ctx():
    return mp.get_context("spawn")


def test_process_clients_equal_per_actor_sessions(lstm_bytes):
    sess = ki.Session(lstm_bytes, threads=1)
    steps, rows = 15, 2
    ctx = _ctx()
    q = ctx.Queue()
    with ki.InferenceServer(sess, state=STATE, max_wait_us=2000) as srv:
        name = srv.serve_shm(max_clients=4, max_rows=4)
        ps = [ctx.Process(target=proc.client_actor, args=(name, s, steps, rows, OBS, q)) for s in (11, 12, 13)]
        [p.start() for p in ps]
        # in-process actors share the batches
        results_thread = {}

        def actor(a):
            results_thread[a] = [
                {k: np.array(v) for k, v in srv.infer(a, {"obs": proc.obs_for(a, t, 1, OBS)},
                                                      done=proc.done_for(a, t, 1)).items()}
                for t in range(steps)]

        th = [threading.Thread(target=actor, args=(a,)) for a in (0, 1)]
        [t.start() for t in th]
        got = dict(q.get(timeout=60) for _ in ps)
        [t.join() for t in th]
        [p.join(30) for p in ps]
        st = srv.stats()
    for s in (11, 12, 13):
        _assert_same(got[s], _reference(sess, s, steps, rows))
    for a in (0, 1):
        _assert_same(results_thread[a], _reference(sess, a, steps, 1))
    assert st["requests"] == steps * 5


def test_killed_client_is_reclaimed(lstm_bytes):
    sess = ki.Session(lstm_bytes, threads=1)
    ctx = _ctx()
    q = ctx.Queue()
    started = ctx.Event()
    with ki.InferenceServer(sess, state=STATE, max_wait_us=2000) as srv:
        name = srv.serve_shm(max_clients=3, max_rows=2)
        victim = ctx.Process(target=proc.client_forever, args=(name, 2, OBS, started))
        victim.start()
        assert started.wait(60)
        others = [ctx.Process(target=proc.client_actor, args=(name, s, 20, 1, OBS, q)) for s in (21, 22)]
        [p.start() for p in others]
        time.sleep(0.2)
        os.kill(victim.pid, signal.SIGKILL)  # mid-run, possibly with a request in flight
        got = dict(q.get(timeout=60) for _ in others)
        [p.join(30) for p in others]
        for s in (21, 22):
            _assert_same(got[s], _reference(sess, s, 20, 1))
        # the victim's slot and state are reclaimed (without joining it: it stays a zombie)
        deadline = time.time() + 20
        while srv.stats()["shm_clients"] > 0 and time.time() < deadline:
            time.sleep(0.05)
        assert srv.stats()["shm_clients"] == 0
        assert srv.stats()["connected_actors"] == 0
        clients = [ki.connect(name) for _ in range(3)]  # every slot is free again
        r = clients[2].infer({"obs": proc.obs_for(5, 0, 1, OBS)})
        assert r["logits"].shape == (1, ACT)
        for c in clients:
            c.close()
        victim.join(10)


def test_silent_client_is_reclaimed_and_closed_server_fails_clients(lstm_bytes):
    sess = ki.Session(lstm_bytes, threads=1)
    srv = ki.InferenceServer(sess, state=STATE)
    name = srv.serve_shm(max_clients=1, client_timeout=2.0)
    c = ki.connect(name)
    c.infer({"obs": proc.obs_for(5, 0, 1, OBS)})
    deadline = time.time() + 30  # silent longer than client_timeout: reclaimed
    while srv.stats()["shm_clients"] > 0 and time.time() < deadline:
        time.sleep(0.1)
    assert srv.stats()["shm_clients"] == 0
    with pytest.raises(ki.ServerClosedError, match="reclaimed"):
        c.infer({"obs": proc.obs_for(5, 0, 1, OBS)})
    c2 = ki.connect(name)
    with pytest.raises(ki.InputError):
        c2.infer({"obs": np.zeros((1, OBS), np.float64)})
    with pytest.raises(ki.InputError, match="rows"):
        c2.infer({"obs": np.zeros((65, OBS), np.float32)})  # more than max_rows (64)
    srv.close()
    with pytest.raises(ki.ServerClosedError):
        c2.infer({"obs": proc.obs_for(5, 0, 1, OBS)})
