"""Batched MatMuls of a few rows per batch item on the GPU (SkinnyBatchedMatMulKernel in
backends/cuda/gemm.cu): a single-query attention's scores and weighted sum over units,
with and without the transposed right operand, a broadcast left operand, a fused ReLU,
odd sizes. Every case against onnxruntime (float32 CPU) and against the same session with
the kernel off (KAIWU_SKINNY_MATMUL=0: cuBLAS's strided batched GEMM), and io_stats()'s
recorded graph nodes: the fused ReLU is applied in the kernel (at least one node fewer).

Tolerances: float32 rtol 1e-4 (atol 1e-5 * scale); fp16 / bf16 rtol 2e-2 / 5e-2 (atol
3e-3 / 2e-2 * scale), scale = max(1, max |ref|), as the other device tests.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import kaiwu_infer as ki
from helpers import SwitchedSession, assert_close_scaled, make_model, run_ort

pytestmark = pytest.mark.skipif(not ki.cuda_available(),
                                reason="kaiwu_infer built without CUDA, or no CUDA device")

def Sess(model, precision, skinny):
    """A device session with KAIWU_SKINNY_MATMUL as given (None: unset)."""
    return SwitchedSession(model, precision, KAIWU_SKINNY_MATMUL=skinny)


check = assert_close_scaled


def scores_model(m, d, units, relu):
    """y = [Relu](q @ k^T): q [B, 4, m, d], k [B, 4, units, d] (the Transpose folds into
    the MatMul as a transposed right operand)."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s" if relu else "y"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    return make_model(nodes, [("q", np.float32, ["batch", 4, m, d]), ("k", np.float32, ["batch", 4, units, d])],
                      ["y"])


def weighted_model(m, units, d, relu):
    """y = [Relu](p @ v): p [B, 4, m, units], v [B, 4, units, d]."""
    nodes = [helper.make_node("MatMul", ["p", "v"], ["s" if relu else "y"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    return make_model(nodes, [("p", np.float32, ["batch", 4, m, units]), ("v", np.float32, ["batch", 4, units, d])],
                      ["y"])


def broadcast_a_model(m, k, n):
    """y = a @ b with one a [m, k] (an initializer) for every b [B, k, n]."""
    a = np.random.default_rng(9).standard_normal((m, k)).astype(np.float32)
    return make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("b", np.float32, ["batch", k, n])],
                      ["y"], initializers={"a": a})


CASES = [
    ("scores", lambda relu: scores_model(1, 16, 32, relu)),
    ("scores_m3_odd", lambda relu: scores_model(3, 13, 37, relu)),
    ("weighted", lambda relu: weighted_model(1, 32, 16, relu)),
    ("weighted_m4_odd", lambda relu: weighted_model(4, 33, 19, relu)),
]


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("name,make", CASES, ids=[c[0] for c in CASES])
def test_skinny_batched_matmul_matches_onnxruntime(name, make, relu, precision):
    model = make(relu)
    on, off = Sess(model, precision, None), Sess(model, precision, "0")
    rng = np.random.default_rng(len(name) + relu)
    for batch in (1, 7, 300):
        feeds = {i.name: rng.standard_normal(
            [batch if d.dim_param else d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}
        ref = run_ort(model, feeds)
        check(on.run(feeds), ref, precision, f"{name} skinny b{batch}")
        check(off.run(feeds), ref, precision, f"{name} cuBLAS b{batch}")
        if relu:  # the ReLU in the kernel: no separate activation node (cuBLAS's batched
            # GEMM may itself record more than one node for some shapes)
            nodes_on, nodes_off = on.nodes_per_run(feeds), off.nodes_per_run(feeds)
            assert nodes_on <= nodes_off - 1, (batch, nodes_on, nodes_off)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_broadcast_left_operand(precision):
    model = broadcast_a_model(2, 24, 40)
    on, off = Sess(model, precision, None), Sess(model, precision, "0")
    rng = np.random.default_rng(4)
    for batch in (1, 5, 129):
        feeds = {"b": rng.standard_normal((batch, 24, 40)).astype(np.float32)}
        ref = run_ort(model, feeds)
        check(on.run(feeds), ref, precision, f"skinny b{batch}")
        check(off.run(feeds), ref, precision, f"cuBLAS b{batch}")
