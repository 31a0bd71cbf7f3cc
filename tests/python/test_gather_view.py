"""Gather of one index known when the plan is made, on the outermost non-unit axis, runs as a
view: the planner points its output into the data at the slice's offset (ops/tensor_gather.cc,
plan/execution_plan.cc alias offsets) and the kernel skips the copy. Checked against
onnxruntime on fresh random data (exact: a view or a copy moves the same bits), CPU and GPU:

- q / k / v picked from one stacked tensor (indices 0, 1, 2 and -1, axis 0; one on axis 1
  behind a unit axis), read by later ops and also returned as graph outputs;
- a view of a graph input, a view of a view (Gather of a Gather), int32 and int64 indices;
- an index out of range is the kernel's ExecutionError naming it, as without the view;
- a Gather on an inner axis (a strided slice) still copies, and agrees.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import kaiwu_infer as ki
from helpers import run_ort


def gather(name, data, index, axis, dtype=TensorProto.INT64):
    c = helper.make_node("Constant", [], [name + "_i"],
                         value=helper.make_tensor(name + "_it", dtype, [], [index]))
    g = helper.make_node("Gather", [data, name + "_i"], [name], axis=axis)
    return [c, g]


def stacked_model(index_dtype=TensorProto.INT64, bad_index=None):
    """x [3, B, 8] (float) and y [B, 1, 4, 6]: q, k, v = x[0], x[1], x[-1] -> q * k + v; also
    v[0] through a second Gather (a view of a view), y[:, 0] on axis 1 (a copy where
    B > 1), and Transpose(x)[0] (a view of a computed tensor)."""
    nodes = []
    nodes += gather("q", "x", 0, 0, index_dtype)
    nodes += gather("k", "x", 1, 0, index_dtype)
    nodes += gather("v", "x", -1 if bad_index is None else bad_index, 0, index_dtype)
    nodes += [helper.make_node("Mul", ["q", "k"], ["qk"]), helper.make_node("Add", ["qk", "v"], ["out"])]
    nodes += gather("v2", "v", 0, 0, index_dtype)  # a row of the view
    nodes += gather("y1", "y", 0, 1)  # inner axis: a strided copy
    nodes += [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2])]
    nodes += gather("t1", "xt", 0, 0)
    nodes += [helper.make_node("Relu", ["t1"], ["t1r"])]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, "B", 8]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 1, 4, 6])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("out", "k", "v2", "y1", "t1r")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def feeds(batch, seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((3, batch, 8)).astype(np.float32),
            "y": rng.standard_normal((batch, 1, 4, 6)).astype(np.float32)}


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not ki.cuda_available(), reason="kaiwu_infer built without CUDA, or no CUDA device"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", [TensorProto.INT64, TensorProto.INT32])
def test_gather_views_match_onnxruntime(device, index_dtype):
    model = stacked_model(index_dtype)
    s = ki.Session(model.SerializeToString(), device=device)
    for batch in (1, 5, 64):
        f = feeds(batch, seed=batch)
        want = run_ort(model, f)
        got = s.run(f)
        for k, w in want.items():
            np.testing.assert_array_equal(got[k], w, err_msg=f"{device} b{batch} {k}")
        # the views did not write into the caller's input
        np.testing.assert_array_equal(f["x"], feeds(batch, seed=batch)["x"])


@pytest.mark.parametrize("device", DEVICES)
def test_gather_index_out_of_range_is_an_execution_error(device):
    bad = stacked_model(bad_index=3)
    s = ki.Session(bad.SerializeToString(), device=device)
    with pytest.raises(ki.ExecutionError, match="out of range"):
        s.run(feeds(4, seed=1))
    good = stacked_model()
    s2 = ki.Session(good.SerializeToString(), device=device)
    f = feeds(4, seed=2)
    np.testing.assert_array_equal(s2.run(f)["out"], run_ort(good, f)["out"])
