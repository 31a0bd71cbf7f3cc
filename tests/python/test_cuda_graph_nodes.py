"""Fewer CUDA graph nodes per run: the batch-first recurrent layer without its two
transposes (passes/fold_rnn_batch_first.cc), LSTM/GRU kernels reading initial_h/c
and writing Y_h/Y_c themselves (KAIWU_RNN_FOLD_STATES), and io_stats()'s count of
recorded nodes that shows it. Every case against onnxruntime (float32 CPU) and
against the same session with both switched off (KAIWU_RNN_BATCH_FIRST=0,
KAIWU_RNN_FOLD_STATES=0, read when a session / plan is made).

Tolerances: float32 sessions rtol 1e-4 (atol 1e-5 * scale); fp16 sessions keep the
recurrence in float32 with TF32 / FP16 products: rtol 2e-2 (atol 3e-3 * scale), as the
C++ kernel tests of those products.
"""

from __future__ import annotations


import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kaiwu_infer as ki
import policies
from helpers import env_vars, run_ort

pytestmark = pytest.mark.skipif(not ki.cuda_available(),
                                reason="kaiwu_infer built without CUDA, or no CUDA device")

TOL = {"fp32": (1e-4, 1e-5), "fp16": (2e-2, 3e-3)}  # rtol, atol / scale


def _scale(ref):
    return max(1.0, float(np.abs(ref).max()))


def batch_first_model(op, seq, inp, hidden, lens=False, states=True, lbr=1, seed=0):
    """Transpose -> op (layout 0) -> Squeeze(1) -> Transpose, as torch batch_first exports."""
    rng = np.random.default_rng(seed)
    gates = 4 if op == "LSTM" else 3
    w = (rng.standard_normal((1, gates * hidden, inp)) / np.sqrt(inp)).astype(np.float32)
    r = (rng.standard_normal((1, gates * hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    b = (0.3 * rng.standard_normal((1, 2 * gates * hidden))).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R"),
             numpy_helper.from_array(b, "B"), numpy_helper.from_array(np.array([1], np.int64), "ax1")]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, inp])]
    rnn_in = ["xt", "W", "R", "B", "lens" if lens else ""]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", seq, hidden])]
    rnn_out = ["y4"]
    if lens:
        ins.append(helper.make_tensor_value_info("lens", TensorProto.INT32, ["batch"]))
    if states:
        names = ["h0", "c0"] if op == "LSTM" else ["h0"]
        for n in names:
            ins.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, "batch", hidden]))
            outs.append(helper.make_tensor_value_info(n[0] + "n", TensorProto.FLOAT, [1, "batch", hidden]))
            rnn_out.append(n[0] + "n")
        rnn_in += names
    attrs = {"hidden_size": hidden}
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             helper.make_node(op, rnn_in, rnn_out, **attrs),
             helper.make_node("Squeeze", ["y4", "ax1"], ["y3"]),
             helper.make_node("Transpose", ["y3"], ["y"], perm=[1, 0, 2])]
    graph = helper.make_graph(nodes, "batch_first", ins, outs, inits)
    # IR version as helpers.make_model sets it (onnxruntime reads <= 10 here).
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=min(onnx.IR_VERSION, 10))
    onnx.checker.check_model(model)
    return model


def feeds_for(model, batch, seq, inp, hidden, seed):
    rng = np.random.default_rng(seed)
    names = [i.name for i in model.graph.input]
    f = {"x": rng.standard_normal((batch, seq, inp)).astype(np.float32)}
    if "lens" in names:
        # Ended rows (onnxruntime refuses empty ones; the C++ kernel tests have them).
        f["lens"] = rng.integers(1, seq + 1, batch).astype(np.int32)
    for n in ("h0", "c0"):
        if n in names:
            f[n] = (0.5 * rng.standard_normal((1, batch, hidden))).astype(np.float32)
    return f


def nodes_per_run(sess, feeds):
    sess.io_stats(reset=True)
    sess.run(feeds)
    sess.run(feeds)
    st = sess.io_stats()
    assert st["graph_launches"] == 2, st
    return st["graph_nodes"] // st["graph_launches"]


def folds_off():
    """Both folds switched off: the batch-first rule (read when a session is made)
    and the state folds (read when a run's plan is made)."""
    return env_vars(KAIWU_RNN_BATCH_FIRST="0", KAIWU_RNN_FOLD_STATES="0")


class Off:
    """A session made and run with both folds off."""

    def __init__(self, data, precision):
        with folds_off():
            self.sess = ki.Session(data, device="cuda", precision=precision)

    def run(self, feeds):
        with folds_off():
            return self.sess.run(feeds)

    def io_stats(self, **kw):
        return self.sess.io_stats(**kw)

    def describe(self):
        return self.sess.describe()


def both(data, precision):
    """A session with the folds (default) and one with both switched off."""
    return ki.Session(data, device="cuda", precision=precision), Off(data, precision)


CASES = [  # op, seq, input, hidden, lens, states, linear_before_reset
    ("GRU", 8, 24, 128, False, True, 1),   # the sequence kernels (tensor cores in fp16)
    ("GRU", 5, 12, 48, True, True, 1),     # float32 / single-block kernels, ended rows
    ("GRU", 6, 10, 40, True, True, 0),     # per-step path: step 0 reads initial_h
    ("GRU", 4, 16, 32, False, False, 1),   # no states: zeros in, Y_h not produced
    ("LSTM", 1, 32, 64, False, True, 0),   # the IMPALA core's single step
    ("LSTM", 7, 20, 16, True, True, 0),    # per-step LSTM, ended and empty rows
]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-s{c[1]}-h{c[3]}-lens{int(c[4])}-st{int(c[5])}-lbr{c[6]}")
def test_batch_first_rnn_matches_onnxruntime_with_fewer_nodes(case, precision):
    op, seq, inp, hidden, lens, states, lbr = case
    model = batch_first_model(op, seq, inp, hidden, lens, states, lbr, seed=hidden + seq)
    data = model.SerializeToString()
    new, old = both(data, precision)
    assert "fold_rnn_batch_first: 1" in new.describe()
    assert "fold_rnn_batch_first" not in old.describe()
    rtol, atol_scale = TOL[precision]
    for batch in (1, 7, 300):
        feeds = feeds_for(model, batch, seq, inp, hidden, seed=batch)
        want = run_ort(model, feeds)
        got, ref = new.run(feeds), old.run(feeds)
        for k, w in want.items():
            atol = atol_scale * _scale(w)
            np.testing.assert_allclose(got[k], w, rtol=rtol, atol=atol, err_msg=f"{k} batch {batch}")
            np.testing.assert_allclose(ref[k], w, rtol=rtol, atol=atol, err_msg=f"{k} batch {batch} (off)")
        # Two transposes fewer, and the state load kernel and the store kernel (made
        # only where there is Y_h) where folded: always in the GRU sequence kernels,
        # with initial_h in the per-step path (its step 0 GEMM reads it).
        saved = nodes_per_run(old, feeds) - nodes_per_run(new, feeds)
        per_step = op == "LSTM" or lbr == 0
        folds = (1 + states) if (states or not per_step) else 0
        assert saved == 2 + folds, (batch, saved)


def test_gru_seq_policy_nodes_and_refit_equal_a_fresh_session(monkeypatch):
    data = policies.export_bytes("gru_seq")
    # The nodes the recurrent folds save, with the encoder and heads left as they were
    # (with them grouped, the encoder's output cast also folds once the transpose is gone:
    # tests/python/test_cuda_fused_mlp_rank3.py).
    monkeypatch.setenv("KAIWU_FUSED_MLP_RANK3", "0")
    new, old = both(data, "fp16")
    feeds = policies.make_inputs("gru_seq", 5, seed=4)
    assert nodes_per_run(old, feeds) - nodes_per_run(new, feeds) == 4
    # Refit reaches the folded GRU's weights: equal to a fresh session of them.
    rng = np.random.default_rng(9)
    cpu = ki.Session(data, threads=1)
    weights = {k: (v + 0.05 * rng.standard_normal(v.shape)).astype(v.dtype)
               for k, v in cpu.get_weights().items()}
    new.refit(weights)
    model = onnx.load_from_string(data)
    for init in model.graph.initializer:
        if init.name in weights:
            init.CopyFrom(numpy_helper.from_array(weights[init.name], init.name))
    fresh = ki.Session(model.SerializeToString(), device="cuda", precision="fp16")
    got, want = new.run(feeds), fresh.run(feeds)
    for k in want:  # same conversions, same kernels (as test_precision.py's refit check)
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    ref = run_ort(model, feeds)
    for k in ref:  # test_precision.py's measure: relative L2 error <= 1e-2 in fp16
        err = np.linalg.norm(got[k].astype(np.float64) - ref[k]) / max(np.linalg.norm(ref[k]), 1e-30)
        assert err <= 1e-2, (k, err)
