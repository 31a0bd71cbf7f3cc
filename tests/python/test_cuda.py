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


# ---- device-resident and page-locked I/O (counters prove the copies, never timings)

def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


def _host_run(name, feeds):
    sess, _ = _session(name)
    return {k: np.array(v) for k, v in sess.run(feeds).items()}


@pytest.mark.parametrize("name", ["mlp", "impala_lstm", "multi_input"])
def test_device_feeds_and_device_outputs_make_no_host_round_trip(name):
    torch = _torch_cuda()
    sess, _ = _session(name)
    feeds = policies.make_inputs(name, 33, seed=41)
    want = _host_run(name, feeds)
    dev = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
    torch.cuda.synchronize()
    sess.io_stats(reset=True)
    got = sess.run(dev, output_device="cuda")
    st = sess.io_stats()
    assert st["runs"] == 1
    assert st["h2d_copies"] == st["h2d_bytes"] == 0
    assert st["d2h_copies"] == st["d2h_bytes"] == 0
    assert st["staging_copies"] == st["staging_bytes"] == 0
    assert st["d2d_copies"] == len(feeds) + len(want)
    assert st["d2d_bytes"] == sum(v.nbytes for v in feeds.values()) + sum(v.nbytes for v in want.values())
    assert st["status_reads"] == 1  # the error flag, read from mapped memory (no copy)
    for k, ref in want.items():
        assert isinstance(got[k], ki.DeviceArray) and got[k].device == sess.device.split(" ")[0]
        t = torch.from_dlpack(got[k])
        assert t.is_cuda and tuple(t.shape) == ref.shape
        np.testing.assert_array_equal(t.cpu().numpy(), ref, err_msg=f"{name} {k}")
        np.testing.assert_array_equal(got[k].numpy(), ref)


def test_host_feeds_count_one_dma_each_and_pinned_buffers_skip_staging():
    name = "impala_lstm"
    sess, _ = _session(name)
    feeds = policies.make_inputs(name, 16, seed=5)
    want = _host_run(name, feeds)
    n_in, n_out = len(feeds), len(want)
    in_bytes = sum(v.nbytes for v in feeds.values())
    out_bytes = sum(v.nbytes for v in want.values())
    # Pageable feeds are staged; results come back into page-locked blocks directly.
    sess.io_stats(reset=True)
    sess.run(feeds)
    st = sess.io_stats(reset=True)
    assert (st["h2d_copies"], st["h2d_bytes"]) == (n_in, in_bytes)
    assert (st["d2h_copies"], st["d2h_bytes"]) == (n_out, out_bytes)
    assert (st["staging_copies"], st["staging_bytes"]) == (n_in, in_bytes)
    assert st["d2d_copies"] == 0
    # Pageable out= arrays are staged too.
    out = {k: np.empty_like(v) for k, v in want.items()}
    sess.run(feeds, out=out)
    assert sess.io_stats(reset=True)["staging_copies"] == n_in + n_out
    # io_buffers: one DMA each way, no staging memcpy at all.
    bufs = sess.io_buffers(16)
    for k, v in feeds.items():
        bufs.inputs[k][...] = v
    for _ in range(3):
        sess.run(bufs.inputs, out=bufs.outputs)
    st = sess.io_stats()
    assert st["staging_copies"] == st["staging_bytes"] == 0
    assert (st["h2d_copies"], st["h2d_bytes"]) == (3 * n_in, 3 * in_bytes)
    assert (st["d2h_copies"], st["d2h_bytes"]) == (3 * n_out, 3 * out_bytes)
    for k, ref in want.items():
        np.testing.assert_array_equal(bufs.outputs[k], ref)


def test_uint8_observations_cross_pcie_as_uint8():
    sess, _ = _session("atari_cnn")
    feeds = policies.make_inputs("atari_cnn", 8, seed=1)
    assert feeds["frames"].dtype == np.uint8
    sess.io_stats(reset=True)
    sess.run(feeds)
    assert sess.io_stats()["h2d_bytes"] == feeds["frames"].nbytes


def _mlp_sources(torch, count, batch, seed):
    """The mlp's session, its input name, `count` device batches with their host results, and
    a device buffer for them to be copied into before each run."""
    sess, _ = _session("mlp")
    (key,) = policies.make_inputs("mlp", 1).keys()
    hosts = [policies.make_inputs("mlp", batch, seed=seed + i)[key] for i in range(count)]
    wants = [_host_run("mlp", {key: h}) for h in hosts]
    srcs = [torch.from_numpy(h).cuda() for h in hosts]
    return sess, key, wants, srcs, torch.zeros_like(srcs[0])


@pytest.mark.parametrize("mapped", ["0", "1"])
def test_replays_copy_each_runs_own_device_feeds_and_outputs(monkeypatch, mapped):
    # A replay's feed and result copies take this run's addresses: the recorded copy
    # launches get new parameters where the tensors differ from the last run's (counted
    # as graph_updates), none when the same ones come again. KAIWU_RUN_COPY_MAPPED=1 (read
    # when a run context is made): the tables in mapped memory, same results, no updates.
    torch = _torch_cuda()
    monkeypatch.setenv("KAIWU_RUN_COPY_MAPPED", mapped)
    data = policies.export_bytes("mlp")
    sess = ki.Session(data, device="cuda")
    (key,) = policies.make_inputs("mlp", 1).keys()
    hosts = [policies.make_inputs("mlp", 16, seed=70 + i)[key] for i in range(5)]
    wants = [_host_run("mlp", {key: h}) for h in hosts]
    srcs = [torch.from_numpy(h).cuda() for h in hosts]
    outs = [{k: torch.empty(v.shape, dtype=torch.float32, device="cuda") for k, v in wants[0].items()}
            for _ in range(2)]
    torch.cuda.synchronize()
    sess.run({key: srcs[0]}, out=outs[0])  # recorded with these addresses
    sess.io_stats(reset=True)
    sess.run({key: srcs[0]}, out=outs[0])
    st = sess.io_stats()
    assert st["graph_launches"] == 1 and st["graph_updates"] == 0, st
    for k, ref in wants[0].items():
        np.testing.assert_array_equal(outs[0][k].cpu().numpy(), ref)
    updates = 0
    for i in range(1, 5):
        out = outs[i % 2]
        sess.io_stats(reset=True)
        res = sess.run({key: srcs[i]}, out=out)
        st = sess.io_stats()
        assert st["graph_launches"] == 1, st
        # the feed changed every time; the outputs alternate between two sets
        updates += st["graph_updates"]
        assert st["graph_updates"] == (0 if mapped == "1" else 2), (i, st)
        torch.cuda.synchronize()
        for k, ref in wants[i].items():
            assert res[k] is out[k]
            np.testing.assert_array_equal(out[k].cpu().numpy(), ref, err_msg=f"run {i} {k}")
    # The results of earlier runs stay where they were written.
    for k, ref in wants[3].items():
        np.testing.assert_array_equal(outs[1][k].cpu().numpy(), ref)
    # Device results from the engine's own blocks, feeds alternating.
    for i in (2, 0, 2):
        got = sess.run({key: srcs[i]}, output_device="cuda")
        for k, ref in wants[i].items():
            np.testing.assert_array_equal(got[k].numpy(), ref, err_msg=f"device results, run {i} {k}")
    assert updates == (0 if mapped == "1" else 8)


def test_user_stream_orders_the_run_between_the_callers_writes_and_reads():
    torch = _torch_cuda()
    sess, key, wants, srcs, x = _mlp_sources(torch, 40, 64, 100)
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    sess.io_stats(reset=True)
    results = []
    for i, src in enumerate(srcs):
        with torch.cuda.stream(s):
            torch.cuda._sleep(200_000)  # a slow producer: the run must wait for it
            x.copy_(src)
        out = sess.run({key: x}, output_device="cuda", stream=s)
        with torch.cuda.stream(s):
            # Read just after, on the caller's stream; then overwrite the input at once.
            results.append({k: torch.from_dlpack(v) * 1 for k, v in out.items()})
            x.zero_()
    s.synchronize()
    for i, (got, want) in enumerate(zip(results, wants)):
        for k in want:
            np.testing.assert_array_equal(got[k].cpu().numpy(), want[k], err_msg=f"iteration {i} {k}")
    st = sess.io_stats()
    assert st["stream_signals"] == len(srcs) and st["stream_waits"] >= len(srcs)
    assert st["h2d_bytes"] == st["d2h_bytes"] == 0


@pytest.mark.parametrize("side_stream", [False, True])
def test_torch_feeds_wait_for_torchs_current_stream(side_stream):
    # No stream= given: the run still starts after the work torch queued on its
    # current stream (the default one, or a side stream made current), which
    # writes the feed; one event wait a run, for all feeds on that stream.
    torch = _torch_cuda()
    import contextlib

    sess, key, wants, srcs, x = _mlp_sources(torch, 20, 48, 300)
    s = torch.cuda.Stream() if side_stream else torch.cuda.current_stream()
    torch.cuda.synchronize()
    sess.io_stats(reset=True)
    ctx = torch.cuda.stream(s) if side_stream else contextlib.nullcontext()
    with ctx:
        for i, (src, want) in enumerate(zip(srcs, wants)):
            torch.cuda._sleep(200_000)  # a slow producer on torch's current stream
            x.copy_(src)
            got = sess.run({key: x})
            for k in want:
                np.testing.assert_array_equal(got[k], want[k], err_msg=f"iteration {i} {k}")
    assert sess.io_stats()["stream_waits"] == len(srcs)


def test_torch_parameter_and_grad_tensors_feed_in_place():
    torch = _torch_cuda()
    name = "multi_input"
    sess, _ = _session(name)
    feeds = policies.make_inputs(name, 5, seed=12)
    want = _host_run(name, feeds)
    dev = {k: torch.nn.Parameter(torch.from_numpy(v).cuda(), requires_grad=v.dtype.kind == "f")
           for k, v in feeds.items()}
    torch.cuda.synchronize()
    sess.io_stats(reset=True)
    got = sess.run(dev, output_device="cuda")
    st = sess.io_stats()
    assert st["h2d_copies"] == 0 and st["d2d_copies"] == len(feeds) + len(want)
    assert st["stream_waits"] == 1  # every feed on torch's one current stream
    for k, ref in want.items():
        np.testing.assert_array_equal(got[k].numpy(), ref, err_msg=k)
    # DeviceArray results feed the next step in place (the recurrent state, no host round trip).
    want2 = _host_run(name, {**feeds, "h0": want["hn"], "c0": want["cn"]})
    sess.io_stats(reset=True)
    got2 = sess.run({**dev, "h0": got["hn"], "c0": got["cn"]})
    assert sess.io_stats()["h2d_copies"] == 0
    for k, ref in want2.items():
        np.testing.assert_array_equal(got2[k], ref, err_msg=f"step 2 {k}")


def test_torch_stream_object_int_handle_and_default_stream_are_accepted():
    torch = _torch_cuda()
    sess, _ = _session("mlp")
    feeds = policies.make_inputs("mlp", 4, seed=2)
    want = _host_run("mlp", feeds)
    dev = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
    s = torch.cuda.Stream()
    for stream in (s, s.cuda_stream, 0, torch.cuda.current_stream()):
        got = sess.run(dev, stream=stream)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


def test_device_results_live_until_dropped_then_their_memory_is_reused():
    torch = _torch_cuda()
    import gc

    name = "mlp"
    sess = ki.Session(policies.export_bytes(name), device="cuda")
    f1, f2 = (policies.make_inputs(name, 8, seed=s) for s in (1, 2))
    w1, w2 = _host_run(name, f1), _host_run(name, f2)
    r1 = sess.run(f1, output_device="cuda")
    r2 = sess.run(f2, output_device="cuda")
    k = next(iter(w1))
    p1, p2 = r1[k].data_ptr, r2[k].data_ptr
    assert p1 != p2  # r1 is still referenced: never reused
    for _ in range(5):
        sess.run(f2, output_device="cuda")  # dropped at once: these reuse one block
    np.testing.assert_array_equal(r1[k].numpy(), w1[k])
    np.testing.assert_array_equal(r2[k].numpy(), w2[k])
    # A torch view keeps the memory after the DeviceArray goes.
    t1 = torch.from_dlpack(r1[k])
    del r1
    gc.collect()
    for _ in range(5):
        sess.run(f2, output_device="cuda")
    np.testing.assert_array_equal(t1.cpu().numpy(), w1[k])
    assert t1.data_ptr() == p1
    del t1, r2
    gc.collect()
    reused = {sess.run(f1, output_device="cuda")[k].data_ptr for _ in range(3)}
    assert reused & {p1, p2}


def test_mixed_host_and_device_feeds_and_device_out_buffers():
    torch = _torch_cuda()
    name = "multi_input"
    sess, _ = _session(name)
    feeds = policies.make_inputs(name, 9, seed=8)
    want = _host_run(name, feeds)
    keys = list(feeds)
    mixed = {k: (torch.from_numpy(v).cuda() if i % 2 == 0 else v) for i, (k, v) in enumerate(feeds.items())}
    got = sess.run(mixed)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    out = {k: torch.empty(v.shape, dtype=getattr(torch, str(v.dtype)), device="cuda")
           for k, v in want.items()}
    sess.io_stats(reset=True)
    res = sess.run(mixed, out=out)
    assert sess.io_stats()["d2h_copies"] == 0
    torch.cuda.synchronize()
    for k in want:
        assert res[k] is out[k]
        np.testing.assert_array_equal(out[k].cpu().numpy(), want[k])
    assert len(keys) > 1


def test_dlpack_only_producer_feeds_in_place():
    torch = _torch_cuda()

    class DLPackOnly:  # like a JAX array: no __cuda_array_interface__
        def __init__(self, t):
            self.t = t

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

        def __dlpack__(self, **kw):
            return self.t.__dlpack__(**{k: v for k, v in kw.items() if k == "stream"})

    sess, _ = _session("mlp")
    feeds = policies.make_inputs("mlp", 5, seed=3)
    want = _host_run("mlp", feeds)
    got = sess.run({k: DLPackOnly(torch.from_numpy(v).cuda()) for k, v in feeds.items()})
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_cupy_arrays_feed_in_place():
    cp = pytest.importorskip("cupy")
    sess, _ = _session("mlp")
    feeds = policies.make_inputs("mlp", 5, seed=4)
    want = _host_run("mlp", feeds)
    got = sess.run({k: cp.asarray(v) for k, v in feeds.items()}, output_device="cuda")
    for k in want:
        np.testing.assert_array_equal(cp.asnumpy(cp.asarray(got[k])), want[k])


def test_bad_device_feeds_raise_input_error_naming_the_input_and_corrupt_nothing():
    torch = _torch_cuda()
    name = "mlp"
    sess, _ = _session(name)
    feeds = policies.make_inputs(name, 6, seed=9)
    want = _host_run(name, feeds)
    (key,) = feeds
    good = torch.from_numpy(feeds[key]).cuda()
    with pytest.raises(ki.InputError, match=f"input '{key}'.*dtype"):
        sess.run({key: good.double()})
    wide = torch.zeros((6, 2 * good.shape[1]), device="cuda")
    with pytest.raises(ki.InputError, match=f"input '{key}'.*not C-contiguous"):
        sess.run({key: wide[:, ::2]})
    with pytest.raises(ki.InputError, match=f"input '{key}'.*not C-contiguous"):
        sess.run({key: torch.zeros(good.shape[::-1], device="cuda").t()})
    with pytest.raises(ki.InputError, match="output_device"):
        sess.run({key: good}, output_device="cuda:7")
    with pytest.raises(ki.InputError, match="stream"):
        sess.run({key: good}, stream="nope")
    if torch.cuda.device_count() > 1:
        with pytest.raises(ki.InputError, match=f"input '{key}'.*cuda:1"):
            sess.run({key: good.to("cuda:1")})
    req = good.clone().requires_grad_(True)  # read through .detach()
    for got in (sess.run({key: good}), sess.run({key: req}), sess.run(feeds)):
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
