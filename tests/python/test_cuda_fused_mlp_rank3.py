"""Dense layers over rank-3 inputs as one FusedMlp node on device sessions
(passes/fuse_mlp.cc, wide layers: gru_seq's encoder and heads, multi_input's unit MLP
and k/v projections), with the node's row limit (max_rows: more rows run as cuBLAS
GEMMs with a bias epilogue, backends/cuda/fused_mlp_gemms.cu). Every case against
onnxruntime (float32 CPU), with the rule on and off (KAIWU_FUSED_MLP_RANK3=0, read when
a session is made) and with each path forced (KAIWU_FUSED_MLP_ROWS, read when a run's
plan is made: 1 always the GEMMs, 0 always the fused kernel).

Tolerances: the hand-made model rtol 1e-4 (atol 1e-5 * scale) in float32 and rtol 2e-2
(atol 3e-3 * scale) in fp16, scale = max(1, max |ref|); whole policies in fp16 by
test_precision.py's measure (relative L2 error per output <= 1e-2: unit_logits holds
-1e9 at padded units, which makes an elementwise scaled atol meaningless), in float32
rtol 1e-4 (atol 1e-4 * scale).
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kaiwu_infer as ki
import policies
from helpers import SwitchedSession, run_ort

pytestmark = pytest.mark.skipif(not ki.cuda_available(),
                                reason="kaiwu_infer built without CUDA, or no CUDA device")

KEYS = ("KAIWU_FUSED_MLP_RANK3", "KAIWU_FUSED_MLP_ROWS")


def Sess(data, precision, **kw):
    """A device session made and run with every switch in KEYS unset but those given."""
    return SwitchedSession(data, precision, **{**{k: None for k in KEYS}, **kw})


@functools.lru_cache(maxsize=None)
def policy_bytes(name):
    return policies.export_bytes(name)


def rel_l2(got, ref):
    ref = ref.astype(np.float64)
    return np.linalg.norm(got.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-30)


def check_policy(got, want, precision, what):
    for k, w in want.items():
        if precision == "fp16":
            assert rel_l2(got[k], w) <= 1e-2, (what, k, rel_l2(got[k], w))
        else:
            np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())),
                                       err_msg=f"{what} {k}")


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
@pytest.mark.parametrize("name", ["gru_seq", "multi_input"])
def test_policies_match_onnxruntime_with_the_rule_on_and_off(name, precision):
    data = policy_bytes(name)
    model = onnx.load_from_string(data)
    on, off = Sess(data, precision), Sess(data, precision, KAIWU_FUSED_MLP_RANK3="0")
    if precision == "fp32":  # float32 sessions never group dense layers
        assert "fuse_mlp" not in on.sess.describe()
    for batch in (1, 7, 300):
        feeds = policies.make_inputs(name, batch, seed=batch + 11)
        want = run_ort(model, feeds)
        check_policy(on.run(feeds), want, precision, f"on batch {batch}")
        check_policy(off.run(feeds), want, precision, f"off batch {batch}")


# Rows per run: gru_seq batch * 8, multi_input batch * 32 (the unit MLP and k/v). gru_seq's
# encoder is one layer: fused up to kFusedMlpWideSingleMaxRows (16) rows, batch 1 only.
@pytest.mark.parametrize("name,groups,fused_batches", [("gru_seq", 2, (1,)), ("multi_input", 2, (1,))])
def test_policy_nodes_saved_where_the_rows_fit_the_fused_kernel(name, groups, fused_batches):
    data = policy_bytes(name)
    on, off = Sess(data, "fp16"), Sess(data, "fp16", KAIWU_FUSED_MLP_RANK3="0")
    fired = lambda s: int(s.sess.describe().split("fuse_mlp: ")[1].split()[0]) if "fuse_mlp: " in s.sess.describe() else 0
    assert fired(on) - fired(off) == groups
    for batch in (1, 7, 300):
        feeds = policies.make_inputs(name, batch, seed=batch)
        saved = off.nodes_per_run(feeds) - on.nodes_per_run(feeds)
        if batch in fused_batches:
            # gru_seq: Cast, GEMM with its bias/ReLU (cuBLASLt's epilogue; a GEMM and a
            # bias/ReLU kernel under KAIWU_CUBLASLT=0) -> 1 (enc); 2 GEMMs, 2 Adds, the
            # logits Cast -> 1 (heads): 5 (the GRU reads the encoder's half result and
            # writes half Y itself, so neither side has a Cast to fold). multi_input: Cast,
            # GEMM, bias/ReLU, GEMM, Add -> 1 (unit MLP); 2 GEMMs, 2 Adds -> 1 (k/v, reading
            # the LayerNorm's half output): 7. Each GEMM is at least one node.
            assert saved >= (5 if name == "gru_seq" else 7), (batch, saved)
        else:
            assert saved >= 0, (batch, saved)  # past max_rows: GEMMs with one epilogue each


@pytest.mark.parametrize("rows", ["1", "0"])
@pytest.mark.parametrize("name", ["gru_seq", "multi_input"])
def test_each_path_forced_matches_onnxruntime(name, rows):
    data = policy_bytes(name)
    model = onnx.load_from_string(data)
    s = Sess(data, "fp16", KAIWU_FUSED_MLP_ROWS=rows)
    for batch in (1, 7, 300):
        feeds = policies.make_inputs(name, batch, seed=batch + 5)
        check_policy(s.run(feeds), run_ort(model, feeds), "fp16", f"rows {rows} batch {batch}")


def dense_model(seq, k, hidden, n, act, seed):
    """x [batch, seq, k] -> MatMul + Add -> act -> MatMul + Add (bias first) -> y, and a
    second head MatMul + Add -> z over the same hidden rows (float32 model)."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((k, hidden)) / np.sqrt(k)).astype(np.float32)
    b1 = (0.3 * rng.standard_normal(hidden)).astype(np.float32)
    w2 = (rng.standard_normal((hidden, n)) / np.sqrt(hidden)).astype(np.float32)
    b2 = (0.3 * rng.standard_normal(n)).astype(np.float32)
    w3 = (rng.standard_normal((hidden, 1)) / np.sqrt(hidden)).astype(np.float32)
    b3 = (0.3 * rng.standard_normal(1)).astype(np.float32)
    inits = [numpy_helper.from_array(a, nm) for a, nm in
             ((w1, "W1"), (b1, "B1"), (w2, "W2"), (b2, "B2"), (w3, "W3"), (b3, "B3"))]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["m1"]),
             helper.make_node("Add", ["m1", "B1"], ["a1"]),
             helper.make_node(act, ["a1"], ["h"]),
             helper.make_node("MatMul", ["h", "W2"], ["m2"]),
             helper.make_node("Add", ["B2", "m2"], ["y"]),
             helper.make_node("MatMul", ["h", "W3"], ["m3"]),
             helper.make_node("Add", ["m3", "B3"], ["z"])]
    graph = helper.make_graph(
        nodes, "dense3", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", seq, n]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", seq, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=min(onnx.IR_VERSION, 10))
    onnx.checker.check_model(model)
    return model


TOL = {"fp32": (1e-4, 1e-5), "fp16": (2e-2, 3e-3)}


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
@pytest.mark.parametrize("case", [(5, 37, 19, 7, "Relu"), (3, 48, 128, 10, "Tanh"), (1, 12, 64, 33, "Sigmoid")],
                         ids=lambda c: f"s{c[0]}-k{c[1]}-h{c[2]}-n{c[3]}-{c[4]}")
def test_dense_layers_over_a_sequence_match_onnxruntime(case, precision):
    seq, k, hidden, n, act = case
    model = dense_model(seq, k, hidden, n, act, seed=k + hidden)
    data = model.SerializeToString()
    sessions = {"on": Sess(data, precision), "off": Sess(data, precision, KAIWU_FUSED_MLP_RANK3="0"),
                "gemms": Sess(data, precision, KAIWU_FUSED_MLP_ROWS="1"),
                "fused": Sess(data, precision, KAIWU_FUSED_MLP_ROWS="0")}
    if precision == "fp16":
        assert "fuse_mlp: 1" in sessions["on"].sess.describe()
        assert "fuse_mlp" not in sessions["off"].sess.describe()
    rtol, atol_scale = TOL[precision]
    for batch in (1, 7, 300):
        rng = np.random.default_rng(batch)
        feeds = {"x": rng.standard_normal((batch, seq, k)).astype(np.float32)}
        want = run_ort(model, feeds)
        for what, s in sessions.items():
            got = s.run(feeds)
            for key, w in want.items():
                assert got[key].shape == w.shape, (what, key)
                np.testing.assert_allclose(got[key], w, rtol=rtol, atol=atol_scale * max(1.0, float(np.abs(w).max())),
                                           err_msg=f"{what} {key} batch {batch}")
    if precision == "fp16":
        # One node for the three layers where the rows fit (rows = batch * seq <= kFusedMlpWideMaxRows, 256).
        feeds = {"x": np.random.default_rng(3).standard_normal((1, seq, k)).astype(np.float32)}
        assert sessions["off"].nodes_per_run(feeds) - sessions["on"].nodes_per_run(feeds) >= 7


def test_refit_reaches_the_fused_layers_equal_to_a_fresh_session():
    data = policy_bytes("gru_seq")
    s = Sess(data, "fp16")
    rng = np.random.default_rng(9)
    cpu = ki.Session(data, threads=1)
    weights = {k: (v + 0.05 * rng.standard_normal(v.shape)).astype(v.dtype)
               for k, v in cpu.get_weights().items()}
    s.sess.refit(weights)
    model = onnx.load_from_string(data)
    for init in model.graph.initializer:
        if init.name in weights:
            init.CopyFrom(numpy_helper.from_array(weights[init.name], init.name))
    fresh = Sess(model.SerializeToString(), "fp16")
    for batch in (1, 300):  # the fused kernel and the GEMMs
        feeds = policies.make_inputs("gru_seq", batch, seed=4)
        got, want = s.run(feeds), fresh.run(feeds)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"{k} batch {batch}")
        check_policy(got, run_ort(model, feeds), "fp16", f"refit batch {batch}")
