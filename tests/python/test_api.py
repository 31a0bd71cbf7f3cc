"""Session API contract: model sources, run() forms, out=, metadata, typed errors."""

from __future__ import annotations

import gc
import threading

import numpy as np
import onnx
import pytest
from onnx import helper

from helpers import make_model, rand, run_ort

F32 = np.float32


def _mlp_model(rng, din=16, dh=32, dout=5):
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["a"]),
             helper.make_node("Gemm", ["a", "w2", "b2"], ["logits"], transB=1),
             helper.make_node("ReduceMax", ["logits"], ["vmax"], axes=[1], keepdims=0)]
    return make_model(nodes, [("x", F32, ("batch", din))], ["logits", "vmax"], opset=13,
                      initializers={"w1": rand(rng, (dh, din)) * F32(0.3), "b1": rand(rng, (dh,)),
                                    "w2": rand(rng, (dout, dh)) * F32(0.3), "b2": rand(rng, (dout,))})


@pytest.fixture
def mlp(rng):
    return _mlp_model(rng)


def test_exception_hierarchy(engine):
    assert issubclass(engine.ModelError, engine.KaiwuError)
    assert issubclass(engine.UnsupportedOpError, engine.ModelError)
    assert issubclass(engine.InputError, engine.KaiwuError)
    assert issubclass(engine.RefitError, engine.KaiwuError)
    assert issubclass(engine.KaiwuError, Exception)


def test_model_sources(engine, rng, mlp, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(mlp, str(path))
    x = rand(rng, (3, 16))
    ref = run_ort(mlp, {"x": x})
    for src in (str(path), path, mlp.SerializeToString(), mlp):
        got = engine.Session(src).run({"x": x})
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-4, atol=1e-5, err_msg=f"{type(src).__name__}:{k}")


def test_bad_models(engine, tmp_path):
    with pytest.raises(engine.ModelError):
        engine.Session(str(tmp_path / "does_not_exist.onnx"))
    with pytest.raises(engine.ModelError):
        engine.Session(b"this is not an onnx model \x00\x01\x02")


def test_unsupported_op(engine):
    """Two unsupported nodes: both must be listed (README: lists every such node)."""
    m = make_model([helper.make_node("Det", ["a"], ["d"]), helper.make_node("Relu", ["d"], ["r"]),
                    helper.make_node("STFT", ["sig", "step"], ["y"], onesided=1)],
                   [("a", F32, (3, 3)), ("sig", F32, (1, 64, 1))], ["r", "y"],
                   initializers={"step": np.array(8, np.int64)}, check=False)
    with pytest.raises(engine.UnsupportedOpError) as ei:
        engine.Session(m)
    assert "Det" in str(ei.value) and "STFT" in str(ei.value)
    assert isinstance(ei.value, engine.ModelError)


def test_io_metadata(engine, mlp):
    s = engine.Session(mlp)
    assert [i.name for i in s.inputs] == ["x"]
    assert [o.name for o in s.outputs] == ["logits", "vmax"]
    x = s.inputs[0]
    assert np.dtype(x.dtype) == np.float32
    assert isinstance(x.shape, tuple) and len(x.shape) == 2
    assert x.shape[0] is None or isinstance(x.shape[0], str)
    assert x.shape[1] == 16
    assert np.dtype(s.outputs[0].dtype) == np.float32


def test_run_forms(engine, rng, mlp):
    s = engine.Session(mlp)
    x = rand(rng, (4, 16))
    ref = run_ort(mlp, {"x": x})
    d = s.run({"x": x})
    assert isinstance(d, dict) and set(d) == {"logits", "vmax"}
    d = {k: np.array(v) for k, v in d.items()}
    lst = s.run(None, {"x": x})
    assert isinstance(lst, list) and len(lst) == 2
    np.testing.assert_allclose(lst[0], ref["logits"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lst[1], ref["vmax"], rtol=1e-4, atol=1e-5)
    only = s.run(["vmax"], {"x": x})
    assert isinstance(only, list) and len(only) == 1
    np.testing.assert_allclose(only[0], ref["vmax"], rtol=1e-4, atol=1e-5)
    rev = s.run(["vmax", "logits"], {"x": x})
    np.testing.assert_allclose(rev[1], ref["logits"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(d["logits"], ref["logits"], rtol=1e-4, atol=1e-5)


def test_run_out_preallocated(engine, rng, mlp):
    s = engine.Session(mlp)
    x = rand(rng, (6, 16))
    ref = run_ort(mlp, {"x": x})
    out_logits = np.full((6, 5), np.nan, F32)
    out_vmax = np.full((6,), np.nan, F32)
    res = s.run({"x": x}, out={"logits": out_logits, "vmax": out_vmax})
    np.testing.assert_allclose(out_logits, ref["logits"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out_vmax, ref["vmax"], rtol=1e-4, atol=1e-5)
    if isinstance(res, dict) and "logits" in res:
        np.testing.assert_allclose(res["logits"], ref["logits"], rtol=1e-4, atol=1e-5)
    # partial out: only one output preallocated
    out2 = np.zeros((6, 5), F32)
    res2 = s.run({"x": x}, out={"logits": out2})
    np.testing.assert_allclose(out2, ref["logits"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res2["vmax"], ref["vmax"], rtol=1e-4, atol=1e-5)


def test_run_out_wrong_shape_raises(engine, rng, mlp):
    s = engine.Session(mlp)
    with pytest.raises((engine.InputError, ValueError)):
        s.run({"x": rand(rng, (6, 16))}, out={"logits": np.zeros((5, 5), F32)})


def test_input_errors(engine, rng, mlp):
    s = engine.Session(mlp)
    with pytest.raises(engine.InputError):
        s.run({})                                                    # missing feed
    with pytest.raises(engine.InputError):
        s.run({"x": rand(rng, (3, 16)).astype(np.float64)})         # wrong dtype
    with pytest.raises(engine.InputError):
        s.run({"x": rand(rng, (3, 15))})                             # wrong static dim
    with pytest.raises(engine.InputError):
        s.run({"x": rand(rng, (3, 16, 1))})                          # wrong rank
    # the session still works after errors
    x = rand(rng, (2, 16))
    np.testing.assert_allclose(s.run({"x": x})["logits"], run_ort(mlp, {"x": x})["logits"], rtol=1e-4, atol=1e-5)


def test_noncontiguous_and_readonly_inputs(engine, rng, mlp):
    s = engine.Session(mlp)
    big = rand(rng, (16, 8))
    x = big.T                     # (8, 16) Fortran-ordered view
    assert not x.flags.c_contiguous
    ref = run_ort(mlp, {"x": np.ascontiguousarray(x)})
    np.testing.assert_allclose(s.run({"x": x})["logits"], ref["logits"], rtol=1e-4, atol=1e-5)
    x2 = rand(rng, (20, 32))[::2, ::2]   # strided view
    ref2 = run_ort(mlp, {"x": np.ascontiguousarray(x2)})
    np.testing.assert_allclose(s.run({"x": x2})["logits"], ref2["logits"], rtol=1e-4, atol=1e-5)
    ro = rand(rng, (3, 16))
    ro.setflags(write=False)
    np.testing.assert_allclose(s.run({"x": ro})["logits"], run_ort(mlp, {"x": ro})["logits"], rtol=1e-4, atol=1e-5)


def test_outputs_outlive_session(engine, rng, mlp):
    x = rand(rng, (5, 16))
    ref = run_ort(mlp, {"x": x})
    s = engine.Session(mlp)
    res = s.run({"x": x})
    del s
    gc.collect()
    _ = [np.ones((1000, 1000), F32) for _ in range(4)]   # churn the allocator
    np.testing.assert_allclose(res["logits"], ref["logits"], rtol=1e-4, atol=1e-5)


def test_dynamic_batch_changes(engine, rng, mlp):
    s = engine.Session(mlp)
    for b in (1, 64, 3, 1, 200, 7):
        x = rand(rng, (b, 16))
        got = {k: np.array(v) for k, v in s.run({"x": x}).items()}
        ref = run_ort(mlp, {"x": x})
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-4, atol=1e-5, err_msg=f"B={b} {k}")


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_option(engine, rng, mlp, threads):
    x = rand(rng, (33, 16))
    ref = run_ort(mlp, {"x": x})
    got = engine.Session(mlp, threads=threads).run({"x": x})
    np.testing.assert_allclose(got["logits"], ref["logits"], rtol=1e-4, atol=1e-5)


def test_concurrent_runs_one_session(engine, rng, mlp):
    s = engine.Session(mlp)
    xs = [rand(rng, (b, 16)) for b in (1, 5, 9, 13)]
    refs = [run_ort(mlp, {"x": x})["logits"] for x in xs]
    errors = []

    def worker(i):
        try:
            for _ in range(20):
                got = np.array(s.run(["logits"], {"x": xs[i]})[0])
                np.testing.assert_allclose(got, refs[i], rtol=1e-4, atol=1e-5)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


def test_optimize_false_same_results(engine, rng):
    """Conv + BatchNorm + Relu (a fusion candidate) with and without graph optimization."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    m = make_model(nodes, [("x", F32, ("N", 3, 8, 8))], ["y"],
                   initializers={"w": rand(rng, (4, 3, 3, 3)), "b": rand(rng, (4,)), "s": rand(rng, (4,)),
                                 "bb": rand(rng, (4,)), "m": rand(rng, (4,)), "v": rand(rng, (4,), positive=True)})
    x = rand(rng, (2, 3, 8, 8))
    ref = run_ort(m, {"x": x})["y"]
    for opt in (True, False):
        got = engine.Session(m, optimize=opt).run({"x": x})["y"]
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=2e-5, err_msg=f"optimize={opt}")


def test_unknown_feed_name(engine, rng, mlp):
    s = engine.Session(mlp)
    with pytest.raises(engine.InputError):
        s.run({"x": rand(rng, (2, 16)), "not_an_input": rand(rng, (2, 16))})


def test_gather_index_out_of_range_is_execution_error(engine, rng):
    m = make_model([helper.make_node("Gather", ["data", "idx"], ["y"], axis=0)],
                   [("data", F32, (5, 3)), ("idx", np.int64, (2,))], ["y"])
    s = engine.Session(m)
    exc = getattr(engine, "ExecutionError", engine.KaiwuError)
    with pytest.raises(exc):
        s.run({"data": rand(rng, (5, 3)), "idx": np.array([1, 5], np.int64)})
    with pytest.raises(exc):
        s.run({"data": rand(rng, (5, 3)), "idx": np.array([-6, 0], np.int64)})


def test_previous_outputs_not_overwritten(engine, rng, mlp):
    """Outputs own their memory: a later run must not change an earlier result."""
    s = engine.Session(mlp)
    x1, x2 = rand(rng, (4, 16)), rand(rng, (4, 16))
    r1 = s.run({"x": x1})
    snap = np.array(r1["logits"], copy=True)
    s.run({"x": x2})
    s.run({"x": x2})
    np.testing.assert_array_equal(r1["logits"], snap)


def test_missing_file_is_file_not_found(engine, tmp_path):
    with pytest.raises(FileNotFoundError):
        engine.Session(tmp_path / "nope.onnx")
