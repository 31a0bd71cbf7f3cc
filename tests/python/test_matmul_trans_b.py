"""MatMul reading B transposed (the node attribute "_kaiwu_trans_b", B given as [.., N, K]),
and the device-session pass that sets it (passes/fold_transpose_into_matmul.cc):
MatMul(A, Transpose(X, p)) with p sending X's innermost dim to B's second-to-last
becomes MatMul(A, Transpose(X, p'), trans_b) behind a transpose that keeps rows whole
(or none). Each case against numpy / onnxruntime on random data.

Tolerances: float32 rtol 1e-5 on the CPU (the same GEMM, B read transposed), 1e-4 on the
GPU (cuBLAS sums in another order); fp16 device sessions rtol 2e-2 (atol 3e-3 * scale).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import kaiwu_infer as ki
from helpers import run_ort

F32 = TensorProto.FLOAT


def _trans_b_model(a_shape, b_shape, dtype=F32):
    node = helper.make_node("MatMul", ["A", "B"], ["Y"], _kaiwu_trans_b=1)
    graph = helper.make_graph([node], "mm", [helper.make_tensor_value_info("A", dtype, a_shape),
                                             helper.make_tensor_value_info("B", dtype, b_shape)],
                              [helper.make_tensor_value_info("Y", dtype, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("a_shape,b_shape", [((3, 7), (5, 7)),              # one GEMM
                                             ((2, 4, 3, 7), (5, 7)),        # B broadcast: A's batch folds into M
                                             ((2, 4, 3, 7), (2, 4, 5, 7)),  # strided batch
                                             ((2, 1, 3, 7), (1, 4, 5, 7)),  # broadcast on both sides
                                             ((6, 1, 16), (6, 32, 16))])    # one row against many: dots
def test_cpu_matmul_reads_b_transposed(a_shape, b_shape):
    rng = np.random.default_rng(7)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    sess = ki.Session(_trans_b_model(a_shape, b_shape).SerializeToString(), threads=2)
    got = sess.run({"A": a, "B": b})["Y"]
    want = np.matmul(a.astype(np.float64), np.swapaxes(b, -1, -2).astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_trans_b_on_a_vector_or_a_non_float32_type_is_refused():
    with pytest.raises((ki.ModelError, ki.InputError), match="_kaiwu_trans_b needs B of rank >= 2"):
        ki.Session(_trans_b_model((3, 7), (7,)).SerializeToString()).run(
            {"A": np.ones((3, 7), np.float32), "B": np.ones(7, np.float32)})
    sess = ki.Session(_trans_b_model((3, 7), (5, 7), TensorProto.DOUBLE).SerializeToString())
    with pytest.raises(ki.UnsupportedOpError, match="float32 only"):
        sess.run({"A": np.ones((3, 7)), "B": np.ones((5, 7))})


def attention_scores_model(batch=None, n=32, heads=4, hd=16, seed=0):
    """q [B, H, 1, D] against keys split from k [B, N, H * D]: Reshape -> Transpose(0, 2, 3, 1)
    -> MatMul -> Softmax, as torch exports q @ k.transpose(1, 2).transpose(-1, -2) (the two
    transposes folded into one by the optimizer)."""
    b = batch or "batch"
    shape = helper.make_tensor("shape", TensorProto.INT64, [4], [0, n, heads, hd])
    nodes = [helper.make_node("Reshape", ["k", "shape"], ["k4"]),
             helper.make_node("Transpose", ["k4"], ["kh"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1)]
    graph = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("q", F32, [b, heads, 1, hd]),
                                              helper.make_tensor_value_info("k", F32, [b, n, heads * hd])],
                              [helper.make_tensor_value_info("p", F32, None)], initializer=[shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


cuda = pytest.mark.skipif(not ki.cuda_available(), reason="kaiwu_infer built without CUDA, or no CUDA device")


@cuda
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("batch", [1, 7, 300])
def test_device_attention_scores_read_keys_transposed(precision, batch, monkeypatch):
    model = attention_scores_model().SerializeToString()
    rng = np.random.default_rng(batch)
    feeds = {"q": rng.standard_normal((batch, 4, 1, 16)).astype(np.float32),
             "k": rng.standard_normal((batch, 32, 64)).astype(np.float32)}
    want = run_ort(onnx.load_from_string(model), feeds)["p"]
    sess = ki.Session(model, device="cuda", precision=precision)
    assert "fold_transpose_into_matmul: 1" in sess.describe()
    monkeypatch.setenv("KAIWU_MATMUL_TRANS_B", "0")
    off = ki.Session(model, device="cuda", precision=precision)
    assert "fold_transpose_into_matmul" not in off.describe()
    rtol, atol = (1e-4, 1e-5) if precision == "fp32" else (2e-2, 3e-3)
    for s in (sess, off):
        got = s.run(feeds)["p"]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    np.testing.assert_allclose(sess.run(feeds)["p"], off.run(feeds)["p"], rtol=rtol, atol=atol)


@cuda
def test_device_two_dim_transpose_disappears_into_the_gemm():
    # Transpose(perm [1, 0]) of a runtime matrix: the GEMM reads it as it is.
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
             helper.make_node("MatMul", ["a", "xt"], ["y"])]
    graph = helper.make_graph(nodes, "t2", [helper.make_tensor_value_info("a", F32, [5, 9]),
                                            helper.make_tensor_value_info("x", F32, [11, 9])],
                              [helper.make_tensor_value_info("y", F32, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    rng = np.random.default_rng(3)
    feeds = {"a": rng.standard_normal((5, 9)).astype(np.float32),
             "x": rng.standard_normal((11, 9)).astype(np.float32)}
    sess = ki.Session(model.SerializeToString(), device="cuda")
    assert "fold_transpose_into_matmul: 1" in sess.describe()
    np.testing.assert_allclose(sess.run(feeds)["y"], feeds["a"] @ feeds["x"].T, rtol=1e-4, atol=1e-5)
