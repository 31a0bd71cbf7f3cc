"""The CPU prepack rewrite (passes/prepack_gemm.cc): Gemm/MatMul against a static float32
matrix run as kaiwu PackedGemm on weights packed by static nodes. Against onnxruntime at
odd sizes (column tails inside a 16-wide panel, k across cache blocks, row tails of every
tile height), bias and fused activations, 1 and 2 threads (bit-identical), and refit after
prepacking equal to a fresh session; where it must not fire."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from helpers import assert_outputs_close, make_model, rand, run_ort
from test_passes import fired, ops_after, refit_matches_fresh


def gemm_model(k, n, *, trans_b=True, bias=True, act="Relu", alpha=1.0, beta=1.0, trans_a=False,
               bias_shape=None):
    rng = np.random.default_rng(k * 1000 + n)
    w_shape = (n, k) if trans_b else (k, n)
    inits = {"W": (rng.standard_normal(w_shape) / np.sqrt(k)).astype(np.float32)}
    inputs = ["x", "W"]
    if bias:
        inits["B"] = rng.standard_normal(bias_shape or (n,)).astype(np.float32)
        inputs.append("B")
    nodes = [helper.make_node("Gemm", inputs, ["g"], transB=int(trans_b), transA=int(trans_a),
                              alpha=alpha, beta=beta)]
    out = "g"
    if act:
        nodes.append(helper.make_node(act, ["g"], ["y"]))
        out = "y"
    x_shape = [k, "N"] if trans_a else ["N", k]
    return make_model(nodes, [("x", np.float32, x_shape)], [out], initializers=inits)


def matmul_model(k, n, x_shape):
    rng = np.random.default_rng(n)
    inits = {"W": (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])]
    return make_model(nodes, [("x", np.float32, list(x_shape))], ["y"], initializers=inits)


TOL = dict(rtol=1e-4, atol=1e-5)


def assert_same(a, b):
    a = list(a.values()) if isinstance(a, dict) else list(a)
    b = list(b.values()) if isinstance(b, dict) else list(b)
    assert len(a) == len(b) and a
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("k,n,trans_b,act", [(7, 21, True, "Relu"), (300, 16, False, None),
                                             (600, 130, True, "Tanh"), (64, 1, False, "Relu"),
                                             (257, 47, True, None)])
@pytest.mark.parametrize("batch", [1, 5, 13, 64])
def test_gemm_prepacked_matches_onnxruntime(engine, rng, k, n, trans_b, act, batch):
    model = gemm_model(k, n, trans_b=trans_b, act=act)
    feeds = {"x": rand(rng, (batch, k))}
    ref = run_ort(model, feeds)
    outs = []
    for threads in (1, 2):
        sess = engine.Session(model, threads=threads, optimize=True)
        assert fired(sess).get("prepack_gemm_weights") == 1
        ops = ops_after(sess)
        assert ops.get("PackedGemm") == 1 and "Gemm" not in ops, ops
        out = sess.run(dict(feeds))
        assert_outputs_close(out, ref, context=f"threads={threads}", **TOL)
        outs.append(out)
    assert_same(outs[0], outs[1])  # the same summation order with any split


@pytest.mark.parametrize("bias_shape", [(21,), (1, 21)])
def test_gemm_prepacked_refit_equals_fresh(engine, rng, bias_shape):
    model = gemm_model(33, 21, bias_shape=bias_shape)
    feeds = {"x": rand(rng, (9, 33))}
    refit_matches_fresh(engine, model, feeds, {"W"}, rng)
    refit_matches_fresh(engine, model, feeds, {"W", "B"}, rng)


def test_refit_repacks_weights(engine, rng):
    """After a refit the session computes with the new weights (onnxruntime on the new model)."""
    model = gemm_model(40, 19)
    feeds = {"x": rand(rng, (6, 40))}
    sess = engine.Session(model, threads=2, optimize=True)
    sess.run(dict(feeds))  # packed once
    new_w = rand(rng, (19, 40))
    sess.refit({"W": new_w}, strict=False)
    for init in model.graph.initializer:
        if init.name == "W":
            from onnx import numpy_helper
            init.CopyFrom(numpy_helper.from_array(new_w, "W"))
    assert_outputs_close(sess.run(dict(feeds)), run_ort(model, feeds), context="refit", **TOL)


@pytest.mark.parametrize("x_shape", [("N", 3, 24), ("N", 24)])
def test_matmul_prepacked(engine, rng, x_shape):
    model = matmul_model(24, 17, x_shape)
    shape = tuple(4 if isinstance(d, str) else d for d in x_shape)
    feeds = {"x": rand(rng, shape)}
    sess = engine.Session(model, threads=1, optimize=True)
    assert fired(sess).get("prepack_gemm_weights") == 1
    assert_outputs_close(sess.run(dict(feeds)), run_ort(model, feeds), **TOL)
    refit_matches_fresh(engine, model, feeds, {"W"}, rng)


def matmul_add_model(k, n, x_shape, bias_shape):
    """Tanh(x) -> MatMul(., W) -> Add(., B): the MatMul's A has no declared shape, so its rank
    is unknown to the optimizer's MatMul+Add fusion; prepacking takes it at any rank."""
    rng = np.random.default_rng(k + n)
    inits = {"W": (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32),
             "B": rng.standard_normal(bias_shape).astype(np.float32)}
    nodes = [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("MatMul", ["t", "W"], ["m"]),
             helper.make_node("Add", ["m", "B"], ["y"])]
    return make_model(nodes, [("x", np.float32, list(x_shape))], ["y"], initializers=inits)


@pytest.mark.parametrize("x_shape,bias_shape,folds", [
    (("N", 7, 24), (40,), True),        # 3-D A, bias per column: PackedGemm with bias
    (("N", 3, 5, 24), (1, 40), True),   # 4-D A, [1, N] bias
    ((24,), (40,), True),               # 1-D A: MatMul drops the row dim, PackedGemm too
    (("N", 7, 24), (7, 40), False),     # a per-row bias is not a column bias: Add stays
    (("N", 7, 24), (1,), False),        # a broadcast scalar: Add stays
])
def test_matmul_any_rank_and_bias_fold(engine, rng, x_shape, bias_shape, folds):
    k, n = 24, 40
    model = matmul_add_model(k, n, x_shape, bias_shape)
    shape = tuple(3 if d == "N" else d for d in x_shape)
    feeds = {"x": rand(rng, shape)}
    sess = engine.Session(model, threads=2, optimize=True)
    ops = ops_after(sess)
    assert ops.get("PackedGemm") == 1 and "MatMul" not in ops, ops
    assert ("Add" not in ops) == folds, ops
    assert_outputs_close(sess.run(dict(feeds)), run_ort(model, feeds), **TOL)
    refit_matches_fresh(engine, model, feeds, {"W", "B"}, rng)


@pytest.mark.parametrize("case", ["trans_a", "alpha", "beta", "bias_per_row"])
def test_prepack_must_not_fire(engine, rng, case):
    k, n = 12, 10
    kwargs = {"trans_a": dict(trans_a=True), "alpha": dict(alpha=0.5), "beta": dict(beta=2.0),
              "bias_per_row": dict(bias_shape=(6, n))}[case]
    model = gemm_model(k, n, **kwargs)
    feeds = {"x": rand(rng, (k, 6) if case == "trans_a" else (6, k))}
    sess = engine.Session(model, threads=1, optimize=True)
    assert "prepack_gemm_weights" not in fired(sess)
    assert_outputs_close(sess.run(dict(feeds)), run_ort(model, feeds), **TOL)


@pytest.mark.parametrize("isa", ["avx2", "scalar"])
def test_forced_instruction_set_matches_onnxruntime(engine, tmp_path, isa):
    """KAIWU_CPU_ISA caps the packed GEMM's variant (read once per process): a child process
    with the cap runs a policy with prepacked Gemms and matches onnxruntime."""
    import os
    import subprocess
    import sys
    code = f"""
import sys, numpy as np, onnxruntime as ort
sys.path.insert(0, {os.path.dirname(__file__)!r})
import policies, kaiwu_infer
policies.export_onnx("mlp", {str(tmp_path / 'mlp.onnx')!r})
feeds = policies.make_inputs("mlp", 37, 5)
sess = kaiwu_infer.Session({str(tmp_path / 'mlp.onnx')!r}, threads=2)
assert "PackedGemm" in sess.describe()
got = sess.run(feeds)
got = list(got.values()) if isinstance(got, dict) else got
ref = ort.InferenceSession({str(tmp_path / 'mlp.onnx')!r}).run(None, feeds)
for g, r in zip(got, ref):
    np.testing.assert_allclose(np.asarray(g), r, rtol=1e-4, atol=1e-5)
print("ok")
"""
    env = dict(os.environ, KAIWU_CPU_ISA=isa)
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]


def check_rnn_prepacked(engine, rng, model, feeds):
    """W and R packed once, results as onnxruntime's with 1 and 2 threads (bit-identical to each
    other), and a refit of W and R equal to a fresh session."""
    ref = run_ort(model, feeds)
    outs = []
    for threads in (1, 2):
        sess = engine.Session(model, threads=threads, optimize=True)
        assert fired(sess).get("prepack_gemm_weights") == 1
        out = sess.run(dict(feeds))
        assert_outputs_close(out, ref, context=f"threads={threads}", **TOL)
        outs.append(out)
    assert_same(outs[0], outs[1])  # the same summation order with any split
    refit_matches_fresh(engine, model, feeds, {"W", "R"}, rng)


def lstm_model(seq, inp, hidden, direction):
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(hidden)
    inits = {"W": (rng.standard_normal((dirs, 4 * hidden, inp)) * 0.3).astype(np.float32),
             "R": (rng.standard_normal((dirs, 4 * hidden, hidden)) * 0.3).astype(np.float32),
             "B": (rng.standard_normal((dirs, 8 * hidden)) * 0.3).astype(np.float32)}
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["y", "yh", "yc"],
                            hidden_size=hidden, direction=direction)
    return make_model([node], [("x", np.float32, [seq, "N", inp]),
                               ("h0", np.float32, [dirs, "N", hidden]),
                               ("c0", np.float32, [dirs, "N", hidden])],
                      ["y", "yh", "yc"], initializers=inits)


@pytest.mark.parametrize("seq,inp,hidden,direction", [(1, 24, 16, "forward"),
                                                      (5, 7, 5, "bidirectional"),
                                                      (3, 33, 9, "reverse")])
@pytest.mark.parametrize("batch", [1, 7])
def test_lstm_prepacked(engine, rng, seq, inp, hidden, direction, batch):
    """LSTM W and R packed by static nodes (4 * hidden not a multiple of 16 pads the panels)."""
    model = lstm_model(seq, inp, hidden, direction)
    dirs = 2 if direction == "bidirectional" else 1
    feeds = {"x": rand(rng, (seq, batch, inp)), "h0": rand(rng, (dirs, batch, hidden)),
             "c0": rand(rng, (dirs, batch, hidden))}
    check_rnn_prepacked(engine, rng, model, feeds)


def gru_model(seq, inp, hidden, direction, lbr):
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(hidden + 100 * lbr)
    inits = {"W": (rng.standard_normal((dirs, 3 * hidden, inp)) * 0.3).astype(np.float32),
             "R": (rng.standard_normal((dirs, 3 * hidden, hidden)) * 0.3).astype(np.float32),
             "B": (rng.standard_normal((dirs, 6 * hidden)) * 0.3).astype(np.float32)}
    node = helper.make_node("GRU", ["x", "W", "R", "B", "", "h0"], ["y", "yh"], hidden_size=hidden,
                            direction=direction, linear_before_reset=lbr)
    return make_model([node], [("x", np.float32, [seq, "N", inp]),
                               ("h0", np.float32, [dirs, "N", hidden])],
                      ["y", "yh"], initializers=inits)


@pytest.mark.parametrize("seq,inp,hidden,direction", [(1, 24, 16, "forward"),
                                                      (5, 7, 5, "bidirectional"),
                                                      (4, 33, 8, "reverse"),
                                                      (3, 20, 12, "forward")])
@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("batch", [1, 7])
def test_gru_prepacked(engine, rng, seq, inp, hidden, direction, lbr, batch):
    """GRU W and R packed by static nodes: 3 * hidden not a multiple of 16 pads the panels; with
    linear_before_reset = 0, Rh starts on a panel for hidden 8 and 16 (packed) and not for 5 and
    12 (R read unpacked)."""
    model = gru_model(seq, inp, hidden, direction, lbr)
    dirs = 2 if direction == "bidirectional" else 1
    feeds = {"x": rand(rng, (seq, batch, inp)), "h0": rand(rng, (dirs, batch, hidden))}
    check_rnn_prepacked(engine, rng, model, feeds)


def test_shared_weight_packed_once(engine, rng):
    """Two Gemms reading one weight the same way share one packed copy."""
    rng0 = np.random.default_rng(4)
    inits = {"W": rng0.standard_normal((20, 12)).astype(np.float32)}
    nodes = [helper.make_node("Gemm", ["x", "W"], ["a"], transB=1),
             helper.make_node("Gemm", ["y", "W"], ["b"], transB=1)]
    model = make_model(nodes, [("x", np.float32, ["N", 12]), ("y", np.float32, ["N", 12])],
                       ["a", "b"], initializers=inits)
    feeds = {"x": rand(rng, (3, 12)), "y": rand(rng, (3, 12))}
    sess = engine.Session(model, threads=1, optimize=True)
    assert fired(sess).get("prepack_gemm_weights") == 2
    ops = ops_after(sess)
    assert ops.get("PackedGemm") == 2 and ops.get("Transpose") == 1, ops
    assert_outputs_close(sess.run(dict(feeds)), run_ort(model, feeds), **TOL)
    refit_matches_fresh(engine, model, feeds, {"W"}, rng)
