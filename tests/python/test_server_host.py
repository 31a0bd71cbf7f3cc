"""The server's host side for large observation rows: batches gathered on several
threads (copy_threads), padding cleared only where stale, uint8 observations crossing
shared memory as uint8, and on a device batches gathered into page-locked memory (no
staging copy). Results against float64 references on fresh random rows, at odd row
counts; counters (never timings) show which path ran."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kaiwu_infer as ki

OBS = (3, 40, 40)      # 19.2 KB a row in float32: 110 rows make a parallel gather (2 MB)
FRAMES = (4, 30, 30)   # 3.6 KB a row in uint8


def _linear_model(shape, dtype, n_out, seed):
    """obs [B, *shape] -> (Cast) -> Flatten -> Gemm: every byte of a row moves its outputs."""
    rng = np.random.default_rng(seed)
    k = int(np.prod(shape))
    w = (rng.standard_normal((k, n_out)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n_out).astype(np.float32)
    nodes, x = [], "obs"
    if dtype == TensorProto.UINT8:
        nodes.append(helper.make_node("Cast", ["obs"], ["obs_f"], to=TensorProto.FLOAT))
        x = "obs_f"
    nodes += [helper.make_node("Flatten", [x], ["flat"], axis=1),
              helper.make_node("Gemm", ["flat", "w", "b"], ["y"])]
    g = helper.make_graph(nodes, "large_rows",
                          [helper.make_tensor_value_info("obs", dtype, ["B", *shape])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", n_out])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m.SerializeToString(), w.astype(np.float64), b.astype(np.float64)


@pytest.fixture(scope="module")
def f32_model():
    return _linear_model(OBS, TensorProto.FLOAT, 5, seed=1)


@pytest.fixture(scope="module")
def u8_model():
    return _linear_model(FRAMES, TensorProto.UINT8, 6, seed=2)


def _ref(x, w, b):
    return x.reshape(len(x), -1).astype(np.float64) @ w + b


def _one_batch_round(srv, feeds_of):
    """Every actor steps once (so all are connected), then again: the second round
    queues whole before it runs (every actor waiting), as one batch."""
    for rnd in range(2):
        futs = {a: srv.submit(a, {"obs": x}) for a, x in feeds_of(rnd).items()}
        outs = {a: f.result(30)["y"] for a, f in futs.items()}
    return outs


ROWS = [1, 7, 16, 13, 31, 2, 16, 5, 29, 11, 3, 17]  # 151 rows: padded to 192


@pytest.mark.parametrize("copy_threads", [1, 2, 0])
def test_large_rows_gathered_on_threads_equal_float64_reference(f32_model, rng, copy_threads):
    data, w, b = f32_model
    feeds = [{a: rng.standard_normal((n, *OBS)).astype(np.float32) for a, n in enumerate(ROWS)}
             for _ in range(2)]
    with ki.InferenceServer(data, threads=2, max_batch=512, max_wait_us=1_000_000,
                            copy_threads=copy_threads) as srv:
        _one_batch_round(srv, lambda r: feeds[0])
        srv.reset_stats()
        outs = _one_batch_round(srv, lambda r: feeds[1])
        st = srv.stats()
    for a, x in feeds[1].items():
        np.testing.assert_allclose(outs[a], _ref(x, w, b), rtol=1e-4, atol=1e-4)
    assert st["batches"] == 2 and st["batch_rows_hist"] == {sum(ROWS): 2}
    assert st["gathered_bytes"] == 2 * sum(ROWS) * int(np.prod(OBS)) * 4  # padding not counted
    # 0: a CPU session's slice threads copy (2 here); 1: the batching thread alone.
    assert st["parallel_gathers"] == (0 if copy_threads == 1 else 2)
    assert st["pinned_inputs"] is False
    for k in ("gather_mean_us", "session_mean_us", "scatter_mean_us", "finish_mean_us"):
        assert st[k] > 0


def test_smaller_batches_after_a_large_one_see_zero_padding(f32_model, rng):
    # Batch sizes falling and rising reuse one buffer: stale rows of a larger batch
    # must not leak into a smaller one's padding (a model that mixes rows would see them).
    data, w, b = f32_model
    sess = ki.Session(data, threads=1)
    with ki.InferenceServer(sess, max_batch=512, max_wait_us=1_000_000, copy_threads=2) as srv:
        for rows in ([40, 40, 40, 31], [5, 2], [9, 3, 1], [60, 60, 17]):
            feeds = {a: rng.standard_normal((n, *OBS)).astype(np.float32) for a, n in enumerate(rows)}
            futs = {a: srv.submit(a, {"obs": x}) for a, x in feeds.items()}
            for a, x in feeds.items():
                np.testing.assert_allclose(futs[a].result(30)["y"], _ref(x, w, b), rtol=1e-4, atol=1e-4)
            for a in feeds:
                srv.release(a)


def test_uint8_frames_cross_shared_memory_as_uint8(u8_model, rng):
    data, w, b = u8_model
    n_clients, steps = 5, 4
    rows = [1, 9, 16, 7, 13]
    with ki.InferenceServer(data, threads=2, max_batch=256, max_wait_us=2000, copy_threads=2) as srv:
        name = srv.serve_shm(max_clients=n_clients, max_rows=16)
        frames = [[rng.integers(0, 256, (rows[i], *FRAMES), dtype=np.uint8) for _ in range(steps)]
                  for i in range(n_clients)]
        outs = [[None] * steps for _ in range(n_clients)]
        errors = []

        def client(i):
            try:
                with ki.connect(name) as c:
                    view = c.input_views()[0]
                    assert view.dtype == np.uint8 and view.shape == (16, *FRAMES)
                    for t in range(steps):
                        outs[i][t] = c.infer({"obs": frames[i][t]})["y"]
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        srv.reset_stats()
        ts = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
        [t.start() for t in ts]
        [t.join(60) for t in ts]
        st = srv.stats()
    assert not errors, errors
    for i in range(n_clients):
        for t in range(steps):
            np.testing.assert_allclose(outs[i][t], _ref(frames[i][t], w, b), rtol=1e-4, atol=1e-4)
    # one byte an element crossed and was gathered
    assert st["gathered_bytes"] == steps * sum(rows) * int(np.prod(FRAMES))


def test_bad_copy_threads_raise_input_error(f32_model):
    with pytest.raises(ki.InputError, match="copy_threads"):
        ki.InferenceServer(f32_model[0], threads=1, copy_threads=-1)


@pytest.mark.skipif(not ki.cuda_available(), reason="no CUDA device")
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "pageable"])
def test_device_server_gathers_into_page_locked_memory(f32_model, rng, pinned, monkeypatch):
    # Page-locked batches go to the device with one DMA each: no staging memcpy for
    # feeds (results come back page-locked already). KAIWU_SERVER_PINNED=0 restores
    # the pageable gather, whose feeds the run stages.
    if not pinned:
        monkeypatch.setenv("KAIWU_SERVER_PINNED", "0")
    data, w, b = f32_model
    sess = ki.Session(data, device="cuda")
    feeds = [{a: rng.standard_normal((n, *OBS)).astype(np.float32) for a, n in enumerate(ROWS)}
             for _ in range(2)]
    with ki.InferenceServer(sess, max_batch=512, max_wait_us=1_000_000, warmup=False) as srv:
        monkeypatch.delenv("KAIWU_SERVER_PINNED", raising=False)  # read once, at the start
        _one_batch_round(srv, lambda r: feeds[0])
        sess.io_stats(reset=True)
        srv.reset_stats()
        outs = _one_batch_round(srv, lambda r: feeds[1])
        io = sess.io_stats()
        st = srv.stats()
    # float32 on the GPU (no TF32): a different summation order than float64
    for a, x in feeds[1].items():
        np.testing.assert_allclose(outs[a], _ref(x, w, b), rtol=1e-4, atol=1e-4)
    assert st["pinned_inputs"] is pinned, st
    assert st["batch_rows_hist"] == {sum(ROWS): 2}, st
    assert st["parallel_gathers"] == 2 or (os.cpu_count() or 1) < 4, st
    padded = 2 * 192 * int(np.prod(OBS)) * 4  # 151 rows run as 192
    assert io["runs"] == 2 and io["h2d_bytes"] == padded, io
    assert io["staging_bytes"] == (0 if pinned else padded), io
