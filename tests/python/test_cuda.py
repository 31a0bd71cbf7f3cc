"""The CUDA backend (device="cuda"): the five exported policies against onnxruntime,
refit, bad data found on the device, Resize against the CPU, a variant a CUDA kernel
lacks, and the inference server on a GPU. Skipped unless kaiwu_infer was built with -DKAIWU_CUDA=ON and a CUDA device
is present (kaiwu_infer.cuda_available()).

Tolerances: policies as in test_policies.py (rtol 1e-4, atol 1e-5 * max(1, scale)):
the GPU sums in a different order than the CPU engines, at float32 (no TF32).
The server on the GPU must equal a GPU Session stepped by hand to rtol 1e-5 (the
same kernels, batched differently) and the CPU engine to rtol 1e-4.
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest

import kaiwu_infer as ki
import policies
from helpers import run_ort

sys.path.insert(0, os.path.dirname(__file__))
import test_server as srv_tests  # noqa: E402

pytestmark = pytest.mark.skipif(not ki.cuda_available(),
                                reason="kaiwu_infer built without CUDA, or no CUDA device")

POLICIES = ("mlp", "atari_cnn", "impala_lstm", "gru_seq", "multi_input")
_SESSIONS: dict[str, tuple] = {}


def _atol(ref: np.ndarray) -> float:
    a = np.abs(ref[np.isfinite(ref)])
    a = a[a < 1e6]
    return 1e-5 * max(1.0, float(a.max()) if a.size else 1.0)


def _session(name):
    if name not in _SESSIONS:
        import onnx

        data = policies.export_bytes(name)
        _SESSIONS[name] = (ki.Session(data, device="cuda"), onnx.load_from_string(data))
    return _SESSIONS[name]


@pytest.mark.parametrize("batch", [1, 7, 256])
@pytest.mark.parametrize("name", POLICIES)
def test_policy_on_cuda_matches_onnxruntime(name, batch):
    sess, model = _session(name)
    assert sess.device.startswith("cuda:")
    feeds = policies.make_inputs(name, batch, seed=2000 + batch)
    want = run_ort(model, feeds)
    got = sess.run(feeds)
    for k, ref in want.items():
        np.testing.assert_allclose(got[k], ref, rtol=1e-4, atol=_atol(ref),
                                   err_msg=f"{name} batch {batch} output {k}")
    # A second run reuses the plan's device buffers: same answer.
    again = sess.run(feeds)
    for k in want:
        np.testing.assert_array_equal(again[k], got[k])


def test_graph_replay_equals_direct_launches(monkeypatch):
    # Runs replay the plan's launches as a recorded CUDA graph; KAIWU_CUDA_GRAPHS=0
    # (read when a run context is made) launches every kernel directly.
    data = policies.export_bytes("impala_lstm")
    feeds = policies.make_inputs("impala_lstm", 9, seed=11)
    replayed = ki.Session(data, device="cuda")
    first = {k: np.array(v) for k, v in replayed.run(feeds).items()}
    again = replayed.run(feeds)  # a replay of the recording made by the first run
    monkeypatch.setenv("KAIWU_CUDA_GRAPHS", "0")
    direct = ki.Session(data, device="cuda").run(feeds)
    for k in first:
        np.testing.assert_array_equal(again[k], first[k])
        np.testing.assert_array_equal(direct[k], first[k])


def test_describe_names_the_device():
    sess, _ = _session("mlp")
    assert "device: cuda:" in sess.describe()


def test_refit_on_cuda_matches_a_cpu_session_and_failed_refit_keeps_weights():
    data = policies.export_bytes("impala_lstm")
    gpu = ki.Session(data, device="cuda")
    cpu = ki.Session(data, threads=2)
    rng = np.random.default_rng(7)
    new = {k: (v + 0.05 * rng.standard_normal(v.shape)).astype(v.dtype)
           for k, v in cpu.get_weights().items()}
    feeds = policies.make_inputs("impala_lstm", 5, seed=3)
    before = {k: np.array(v) for k, v in gpu.run(feeds).items()}
    gpu.refit(new)
    cpu.refit(new)
    after, ref = gpu.run(feeds), cpu.run(feeds)
    for k in ref:
        np.testing.assert_allclose(after[k], ref[k], rtol=1e-4, atol=_atol(ref[k]), err_msg=k)
    assert any(not np.allclose(after[k], before[k]) for k in ref)
    # A refused refit (one weight of the wrong shape) changes nothing on the device.
    bad = dict(new)
    name = next(iter(bad))
    bad[name] = np.zeros((3, 3), np.float32)
    with pytest.raises(ki.RefitError, match=name):
        gpu.refit(bad)
    again = gpu.run(feeds)
    for k in ref:
        np.testing.assert_array_equal(again[k], after[k])


def _gather_model(n=10):
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((n, 4)).astype(np.float32), "table")
    g = helper.make_graph(
        [helper.make_node("Gather", ["table", "idx"], ["y"], name="embed")], "g",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, ["b"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])], [table])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_bad_index_on_device_raises_naming_the_node_and_the_session_recovers():
    sess = ki.Session(_gather_model(), device="cuda")
    ref = ki.Session(_gather_model())
    good = np.array([0, 9, -1, 3], np.int64)
    np.testing.assert_array_equal(sess.run({"idx": good})["y"], ref.run({"idx": good})["y"])
    with pytest.raises(ki.ExecutionError, match="embed"):
        sess.run({"idx": np.array([1, 10], np.int64)})
    np.testing.assert_array_equal(sess.run({"idx": good})["y"], ref.run({"idx": good})["y"])


def _resize_model(mode):
    from onnx import TensorProto, helper, numpy_helper

    scales = numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "scales")
    g = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="upsample", mode=mode)],
        "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 6])], [scales])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_on_cuda_matches_the_cpu(mode):
    # Exact for nearest (a gather); linear and cubic sum in the CPU's order, with FMAs.
    x = np.random.default_rng(5).standard_normal((1, 2, 3, 4)).astype(np.float32)
    data = _resize_model(mode)
    got = ki.Session(data, device="cuda").run({"x": x})["y"]
    want = ki.Session(data).run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=0 if mode == "nearest" else 1e-5,
                               atol=0 if mode == "nearest" else 1e-5)


def test_variant_the_cuda_kernel_lacks_is_refused_naming_the_node():
    # TopK keeps at most 64 entries per line on the device.
    from onnx import TensorProto, helper, numpy_helper

    k = numpy_helper.from_array(np.array([100], np.int64), "k")
    g = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], name="best")],
        "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 200])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 100]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [2, 100])], [k])
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    x = np.random.default_rng(6).standard_normal((2, 200)).astype(np.float32)
    ki.Session(data).run({"x": x})  # the CPU runs it
    with pytest.raises(ki.UnsupportedOpError, match="TopK"):
        ki.Session(data, device="cuda").run({"x": x})


@pytest.mark.parametrize("actors", ["threads", "asyncio"])
def test_server_on_cuda_equals_per_actor_stepping(actors):
    data = srv_tests._lstm_policy_bytes()
    gpu = ki.Session(data, device="cuda")
    cpu = ki.Session(data, threads=1)
    steps = 20
    rows_of = {a: (1 if a % 3 else 3) for a in range(12)}
    # The asyncio run also warms every batch size first: graphs recorded on zeros
    # then replay real steps.
    with ki.InferenceServer(gpu, state=srv_tests.STATE, max_batch=16, max_wait_us=2000,
                            workers=2, warmup=actors == "asyncio") as srv:
        if actors == "threads":
            results, st = srv_tests._step_actors(srv, rows_of, steps)
        else:
            results, errors = {}, []
            srv_tests._run_loop_actors(srv, list(rows_of), rows_of, steps, results, errors)
            assert not errors, errors
            st = srv.stats()
    assert st["requests"] == steps * len(rows_of)
    assert st["mean_batch_rows"] > 1
    assert st["sliced_batches"] == 0  # a device runs batches whole
    for a, rows in rows_of.items():
        srv_tests._assert_same(results[a], srv_tests._reference(gpu, a, steps, rows))
        want = srv_tests._reference(cpu, a, steps, rows)
        for t, (g, w) in enumerate(zip(results[a], want)):
            for k in w:
                np.testing.assert_allclose(g[k], w[k], rtol=1e-4, atol=1e-5,
                                           err_msg=f"actor {a} step {t} {k} vs CPU")


def test_server_versions_on_cuda_match_sessions():
    data = srv_tests._lstm_policy_bytes()
    gpu = ki.Session(data, device="cuda")
    w1 = srv_tests._perturbed(gpu, 0.1, 1)
    ref = ki.Session(data, device="cuda")
    ref.refit(w1)
    out = {}
    with ki.InferenceServer(gpu, state=srv_tests.STATE, max_wait_us=1000) as srv:
        srv.add_version("v1", w1)

        def actor(a, tag):
            out[a] = [{k: np.array(v) for k, v in srv.infer(
                a, {"obs": srv_tests.proc.obs_for(a, t, 2, srv_tests.OBS)},
                done=srv_tests.proc.done_for(a, t, 2), version=tag).items()} for t in range(8)]

        ts = [threading.Thread(target=actor, args=(a, tag))
              for a, tag in {0: "base", 1: "v1", 2: "v1"}.items()]
        [t.start() for t in ts]
        [t.join() for t in ts]
    srv_tests._assert_same(out[0], srv_tests._reference(gpu, 0, 8, 2))
    srv_tests._assert_same(out[1], srv_tests._reference(ref, 1, 8, 2))
    srv_tests._assert_same(out[2], srv_tests._reference(ref, 2, 8, 2))
