"""GEMMs with their bias / ReLU in cuBLASLt's epilogue (backends/cuda/gemm_lt.h): a
Gemm node with a column bias and/or ReLU, and the layers of a FusedMlp node run as
separate GEMMs (past its max_rows), are one cuBLASLt matmul each instead of a GEMM and
an epilogue kernel. Every case against onnxruntime (float32 CPU), with the path on and
off (KAIWU_CUBLASLT=0, read when a run's plan is made), and io_stats()'s count of
recorded graph nodes showing that the epilogue kernels are gone where cuBLASLt takes
them and kept where it cannot (rows of a 16-bit operand not a multiple of 16 bytes).

Tolerances: float32 rtol 1e-4 (atol 1e-5 * scale); fp16 / bf16 rtol 2e-2 / 5e-2
(atol 3e-3 / 2e-2 * scale), scale = max(1, max |ref|), as the other device tests.
"""

from __future__ import annotations

import numpy as np
import pytest

import kaiwu_infer as ki
from helpers import SwitchedSession, assert_close_scaled, env_vars, make_model, run_ort

pytestmark = pytest.mark.skipif(not ki.cuda_available(),
                                reason="kaiwu_infer built without CUDA, or no CUDA device")

def Sess(model, precision, lt, **extra):
    """A device session with KAIWU_CUBLASLT as given (None: unset) and `extra` switches."""
    return SwitchedSession(model, precision, KAIWU_CUBLASLT=lt, **extra)


check = assert_close_scaled


def gemm_model(k, n, bias, relu, seed):
    """y = [Relu](x @ W^T [+ b]) as one Gemm (transB) over x [batch, k]."""
    from onnx import helper
    rng = np.random.default_rng(seed)
    inits = {"W": (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)}
    ins = ["x", "W"]
    if bias:
        inits["b"] = rng.standard_normal(n).astype(np.float32)
        ins.append("b")
    nodes = [helper.make_node("Gemm", ins, ["g" if relu else "y"], transB=1)]
    if relu:
        nodes.append(helper.make_node("Relu", ["g"], ["y"]))
    return make_model(nodes, [("x", np.float32, ["batch", k])], ["y"], initializers=inits)


def rank3_model(k, h, n, seed, square=True):
    """A wide FusedMlp group over x [batch, 5, k]: MatMul + Add + Relu, then MatMul + Add,
    then the square of that (a 16-bit consumer: the second layer's rows stay in the
    weights' type) or, without `square`, the model's float32 output."""
    from onnx import helper
    rng = np.random.default_rng(seed)
    inits = {"W1": (rng.standard_normal((k, h)) / np.sqrt(k)).astype(np.float32),
             "b1": rng.standard_normal(h).astype(np.float32),
             "W2": (rng.standard_normal((h, n)) / np.sqrt(h)).astype(np.float32),
             "b2": rng.standard_normal(n).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]), helper.make_node("MatMul", ["r1", "W2"], ["m2"]),
             helper.make_node("Add", ["m2", "b2"], ["a2" if square else "y"])]
    if square:
        nodes.append(helper.make_node("Mul", ["a2", "a2"], ["y"]))
    return make_model(nodes, [("x", np.float32, ["batch", 5, k])], ["y"], initializers=inits)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("bias,relu", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("k,n", [(64, 48), (13, 7)])
def test_gemm_bias_relu_in_the_epilogue(precision, bias, relu, k, n):
    model = gemm_model(k, n, bias, relu, seed=k + n + 2 * bias + relu)
    on = Sess(model, precision, None)
    off = Sess(model, precision, "0")
    rng = np.random.default_rng(7)
    for batch in (1, 7, 300):
        feeds = {"x": rng.standard_normal((batch, k)).astype(np.float32)}
        ref = run_ort(model, feeds)
        check(on.run(feeds), ref, precision, f"cuBLASLt b{batch}")
        check(off.run(feeds), ref, precision, f"cuBLAS + epilogue b{batch}")
        nodes_on, nodes_off = on.nodes_per_run(feeds), off.nodes_per_run(feeds)
        # Rows of 13 or 7 elements are not 16-byte multiples: cuBLASLt is not asked.
        if (k, n) == (64, 48):
            assert nodes_on == nodes_off - 1, (batch, nodes_on, nodes_off)
        else:
            assert nodes_on == nodes_off, (batch, nodes_on, nodes_off)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("output", ["half", "float"])
def test_fused_mlp_gemm_layers_in_the_epilogue(precision, output):
    """Both layers' epilogue kernels go where the second writes 16 bits for a later op (the
    first kept for the second, the second into the Mul's input); where it writes the model's
    float32 output, cuBLASLt would want the bias in float32, so that layer keeps its GEMM
    and epilogue kernel (which writes float32) and only the first layer's epilogue goes."""
    model = rank3_model(32, 64, 24, seed=3, square=output == "half")
    rows = {"KAIWU_FUSED_MLP_ROWS": "1"}  # every batch through the separate GEMMs
    on = Sess(model, precision, None, **rows)
    off = Sess(model, precision, "0", **rows)
    rng = np.random.default_rng(11)
    for batch in (1, 9, 200):
        feeds = {"x": rng.standard_normal((batch, 5, 32)).astype(np.float32)}
        ref = run_ort(model, feeds)
        check(on.run(feeds), ref, precision, f"cuBLASLt b{batch}")
        check(off.run(feeds), ref, precision, f"cuBLAS + epilogue b{batch}")
        saved = 2 if output == "half" else 1
        assert on.nodes_per_run(feeds) == off.nodes_per_run(feeds) - saved, batch


def test_refit_reaches_the_epilogue_bias():
    """The bias cuBLASLt reads is the session's current weight after a refit."""
    model = gemm_model(64, 48, True, True, seed=5)
    sess = Sess(model, "fp16", None)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((33, 64)).astype(np.float32)}
    sess.run(feeds)
    new_b = rng.standard_normal(48).astype(np.float32)
    with env_vars(KAIWU_CUBLASLT=None):
        sess.sess.refit({"b": new_b}, strict=False)
    import onnx
    m2 = onnx.ModelProto()
    m2.CopyFrom(model)
    for init in m2.graph.initializer:
        if init.name == "b":
            init.CopyFrom(onnx.numpy_helper.from_array(new_b, "b"))
    check(sess.run(feeds), run_ort(m2, feeds), "fp16", "after refit")
