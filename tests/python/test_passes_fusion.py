"""Fusion rules of the optimizer (Gemm fusions, CSE, FusedElementwise chains,
Transpose pairs, activation hoisting): where each must fire and where it must
not; outputs equal with optimize=True vs optimize=False vs onnxruntime, and
refit of fused weights equal to a fresh Session of the updated model (1e-5).
Helpers are shared with test_passes.py."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from helpers import assert_outputs_close, make_model, rand, run_ort
from test_passes import TOL, fired, ops_after, refit_matches_fresh, run_all


# ----------------------------------------------------------------------------
# 4. Gemm fusions, CSE, elementwise chains
# ----------------------------------------------------------------------------
def mlp_model(x_shape=("N", 8), add_first=False, reuse=False, b_shape=(5,)):
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]),
             helper.make_node("Add", ["B", "m"] if add_first else ["m", "B"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    outs = ["y"]
    if reuse:
        nodes.append(helper.make_node("Sigmoid", ["m"], ["z"]))
        outs.append("z")
    rng = np.random.default_rng(1)
    inits = {"W": rng.standard_normal((8, 5)).astype(np.float32),
             "B": rng.standard_normal(b_shape).astype(np.float32)}
    return make_model(nodes, [("x", np.float32, list(x_shape) if x_shape else None)], outs,
                      initializers=inits, check=x_shape is not None)


@pytest.mark.parametrize("add_first", [False, True])
def test_matmul_add_to_gemm(engine, rng, add_first):
    model = mlp_model(add_first=add_first)
    feeds = {"x": rand(rng, (4, 8))}
    sess = run_all(engine, model, feeds)
    assert fired(sess).get("fuse_matmul_add") == 1
    ops = ops_after(sess)
    # CPU sessions then prepack the weight: the Gemm runs as kaiwu PackedGemm.
    assert ops.get("Gemm", 0) + ops.get("PackedGemm", 0) == 1, ops
    assert "MatMul" not in ops and "Relu" not in ops, ops
    refit_matches_fresh(engine, model, feeds, {"W", "B"}, rng)


@pytest.mark.parametrize("x_shape,b_shape", [(("N", 3, 8), (5,)), (("N", 2, 3, 8), (1, 5)),
                                             (("N", "T", 8), (1,))])
def test_matmul_add_nd_to_gemm(engine, rng, x_shape, b_shape):
    """X of rank > 2: Gemm over X viewed as [-1, K], result viewed back."""
    model = mlp_model(x_shape=x_shape, b_shape=b_shape)
    shape = tuple(4 if isinstance(d, str) else d for d in x_shape)
    feeds = {"x": rand(rng, shape)}
    sess = run_all(engine, model, feeds)
    assert fired(sess).get("fuse_matmul_add") == 1
    ops = ops_after(sess)
    # CPU sessions then prepack the weight: the Gemm runs as kaiwu PackedGemm.
    assert ops.get("Gemm", 0) + ops.get("PackedGemm", 0) == 1, ops
    assert "MatMul" not in ops and "Relu" not in ops, ops
    sess.run({"x": rand(rng, (7,) + shape[1:])})  # another batch: a new plan, same graph
    refit_matches_fresh(engine, model, feeds, {"W", "B"}, rng)


@pytest.mark.parametrize("case", ["bias_per_row", "reused", "x_rank_unknown"])
def test_matmul_add_must_not_fire(engine, rng, case):
    if case == "bias_per_row":  # [3, 5] bias on [N, 3, 5]: indexes rows of the 3-D result
        model, shape = mlp_model(x_shape=("N", 3, 8), b_shape=(3, 5)), (2, 3, 8)
    elif case == "reused":
        model, shape = mlp_model(reuse=True), (4, 8)
    else:
        model, shape = mlp_model(x_shape=None), (4, 8)
    sess = run_all(engine, model, {"x": rand(rng, shape)})
    assert "fuse_matmul_add" not in fired(sess)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_transpose_into_gemm(engine, rng, trans_b):
    w_shape = (5, 8) if trans_b == 0 else (8, 5)
    nodes = [helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
             helper.make_node("Gemm", ["x", "Wt", "B"], ["y"], transB=trans_b, alpha=0.5)]
    inits = {"W": rand(rng, w_shape), "B": rand(rng, (5,))}
    model = make_model(nodes, [("x", np.float32, ["N", 8])], ["y"], initializers=inits)
    feeds = {"x": rand(rng, (3, 8))}
    sess = run_all(engine, model, feeds)
    assert fired(sess).get("fold_transpose_into_gemm") == 1
    assert "Transpose" not in ops_after(sess)
    refit_matches_fresh(engine, model, feeds, {"W", "B"}, rng)


def test_transpose_into_gemm_must_not_fire_runtime(engine, rng):
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
             helper.make_node("Gemm", ["xt", "W"], ["y"])]
    model = make_model(nodes, [("x", np.float32, [8, 3])], ["y"], initializers={"W": rand(rng, (8, 5))})
    sess = run_all(engine, model, {"x": rand(rng, (8, 3))})
    assert "fold_transpose_into_gemm" not in fired(sess)


def test_cse(engine, rng):
    nodes = [helper.make_node("Shape", ["x"], ["s1"]), helper.make_node("Shape", ["x"], ["s2"]),
             helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.2),
             helper.make_node("LeakyRelu", ["x"], ["b"], alpha=0.2),
             helper.make_node("LeakyRelu", ["x"], ["c"], alpha=0.3),  # other attribute: stays
             helper.make_node("Sum", ["a", "b", "c"], ["t"]),
             helper.make_node("Reshape", ["t", "s1"], ["u"]), helper.make_node("Reshape", ["t", "s2"], ["v"]),
             helper.make_node("Sub", ["u", "v"], ["w"]), helper.make_node("Add", ["w", "t"], ["y"])]
    model = make_model(nodes, [("x", np.float32, ["N", 6])], ["y"])
    sess = run_all(engine, model, {"x": rand(rng, (4, 6))})
    assert fired(sess).get("eliminate_common_subexpr") == 3  # Shape, LeakyRelu, then Reshape
    assert ops_after(sess).get("LeakyRelu") == 2


def chain_model(shape=("N", 4, 5, 5), reuse=False, rng=None):
    rng = rng or np.random.default_rng(2)
    nodes = [helper.make_node("Constant", [], ["lo"], value_float=-0.8),  # Clip bounds: structural
             helper.make_node("Constant", [], ["hi"], value_float=0.9),
             helper.make_node("Mul", ["x", "scale"], ["a"]),       # per-channel weight
             helper.make_node("Add", ["a", "shift"], ["b"]),
             helper.make_node("Relu", ["b"], ["c"]),
             helper.make_node("Sub", ["one", "c"], ["d"]),         # swapped: 1 - c
             helper.make_node("Div", ["d", "two"], ["e"]),
             helper.make_node("Clip", ["e", "lo", "hi"], ["f"]),
             helper.make_node("Tanh", ["f"], ["g"]),
             helper.make_node("Exp", ["g"], ["h"]),
             helper.make_node("Div", ["two", "h"], ["i"]),         # swapped: 2 / h
             helper.make_node("Neg", ["i"], ["j"]),
             helper.make_node("Abs", ["j"], ["k"]),
             helper.make_node("Sqrt", ["k"], ["l"]),
             helper.make_node("LeakyRelu", ["l"], ["m"], alpha=0.3),
             helper.make_node("Sigmoid", ["m"], ["y"])]
    outs = ["y"]
    if reuse:
        nodes.append(helper.make_node("Exp", ["d"], ["z"]))
        outs.append("z")
    inits = {"scale": rand(rng, (4, 1, 1)), "shift": rand(rng, (1,)),
             "one": np.array(1, np.float32), "two": np.array([2], np.float32)}
    return make_model(nodes, [("x", np.float32, list(shape))], outs, initializers=inits)


def test_fuse_elementwise_chain(engine, rng):
    model = chain_model()
    feeds = {"x": rand(rng, (3, 4, 5, 5))}
    sess = run_all(engine, model, feeds)
    assert fired(sess).get("fuse_elementwise") == 1
    assert sum(ops_after(sess).values()) == 1, ops_after(sess)
    refit_matches_fresh(engine, model, feeds, {"scale", "shift"}, rng)
    refit_matches_fresh(engine, model, feeds, {"scale", "shift", "one", "two"}, rng)


def test_fuse_elementwise_nonfinite(engine, rng):
    """inf/NaN flow through the fused chain as through onnxruntime's separate ops.
    (Compared with onnxruntime only: the engine's own Sqrt kernel returns NaN for
    +inf today, so optimize=False differs there.)"""
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"]), helper.make_node("Sqrt", ["a"], ["b"]),
             helper.make_node("Exp", ["b"], ["c"]), helper.make_node("Sigmoid", ["c"], ["y"])]
    model = make_model(nodes, [("x", np.float32, [2, 4])], ["y"], initializers={"two": np.array(2, np.float32)})
    x = np.array([[np.inf, -np.inf, np.nan, 0.0], [1e30, -1.0, 3.0, 80.0]], np.float32)
    sess = engine.Session(model, threads=1, optimize=True)
    assert fired(sess).get("fuse_elementwise") == 1
    assert_outputs_close(sess.run({"x": x}), run_ort(model, {"x": x}), **TOL)


def test_fuse_elementwise_broadcasting_operand(engine, rng):
    """An operand that broadcasts x to a larger shape: the chain runs in the output shape."""
    nodes = [helper.make_node("Add", ["x", "c"], ["a"]), helper.make_node("Tanh", ["a"], ["y"])]
    model = make_model(nodes, [("x", np.float32, [3, 1, 5])], ["y"], initializers={"c": rand(rng, (4, 1))})
    sess = run_all(engine, model, {"x": rand(rng, (3, 1, 5))})
    assert fired(sess).get("fuse_elementwise") == 1


def test_fuse_elementwise_large(engine, rng):
    model = chain_model(shape=("N", 4, 64, 64))
    run_all(engine, model, {"x": rand(rng, (9, 4, 64, 64))})


def test_fuse_elementwise_stops_at_shared_value(engine, rng):
    model = chain_model(reuse=True)
    sess = run_all(engine, model, {"x": rand(rng, (2, 4, 5, 5))})
    assert fired(sess).get("fuse_elementwise") == 2  # Mul..Sub, then Div..Sigmoid
    assert ops_after(sess).get("Exp") == 1


@pytest.mark.parametrize("case", ["int_chain", "single_op", "runtime_operand"])
def test_fuse_elementwise_must_not_fire(engine, rng, case):
    if case == "int_chain":
        nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Abs", ["a"], ["y"])]
        model = make_model(nodes, [("x", np.int64, [3, 4])], ["y"])
        feeds = {"x": rand(rng, (3, 4), np.int64)}
    elif case == "single_op":
        model = make_model([helper.make_node("Exp", ["x"], ["y"])], [("x", np.float32, [3, 4])], ["y"])
        feeds = {"x": rand(rng, (3, 4))}
    else:
        nodes = [helper.make_node("Mul", ["x", "s"], ["a"]), helper.make_node("Tanh", ["a"], ["y"])]
        model = make_model(nodes, [("x", np.float32, [3, 4]), ("s", np.float32, [3, 4])], ["y"])
        feeds = {"x": rand(rng, (3, 4)), "s": rand(rng, (3, 4))}
    sess = run_all(engine, model, feeds)
    assert "fuse_elementwise" not in fired(sess)


# ----------------------------------------------------------------------------
# Transpose pairs (channels-last exports)
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("p1,p2,unary", [([0, 2, 3, 1], [0, 3, 1, 2], None),
                                         ([0, 2, 3, 1], [0, 3, 1, 2], "Relu"),
                                         ([1, 0, 2, 3], [0, 2, 1, 3], "Tanh"),
                                         ([3, 2, 1, 0], [2, 0, 3, 1], None)])
def test_transpose_pair(engine, rng, p1, p2, unary):
    nodes = [helper.make_node("Transpose", ["x"], ["a"], perm=p1)]
    last = "a"
    if unary:
        nodes.append(helper.make_node(unary, ["a"], ["u"]))
        last = "u"
    nodes.append(helper.make_node("Transpose", [last], ["y"], perm=p2))
    model = make_model(nodes, [("x", np.float32, [2, 3, 4, 5])], ["y"])
    sess = run_all(engine, model, {"x": rand(rng, (2, 3, 4, 5))})
    assert fired(sess).get("fold_transpose_pair") == 1
    composed = [p1[i] for i in p2]
    assert ops_after(sess).get("Transpose", 0) == (0 if composed == [0, 1, 2, 3] else 1)


@pytest.mark.parametrize("case", ["shared", "binary_between", "graph_output"])
def test_transpose_pair_must_not_fire(engine, rng, case):
    nodes = [helper.make_node("Transpose", ["x"], ["a"], perm=[0, 2, 3, 1])]
    outs = ["y"]
    if case == "binary_between":
        nodes.append(helper.make_node("Add", ["a", "a"], ["u"]))
        nodes.append(helper.make_node("Transpose", ["u"], ["y"], perm=[0, 3, 1, 2]))
    else:
        nodes.append(helper.make_node("Relu", ["a"], ["u"]))
        nodes.append(helper.make_node("Transpose", ["u"], ["y"], perm=[0, 3, 1, 2]))
        outs.append("a" if case == "shared" else "u")
    model = make_model(nodes, [("x", np.float32, [2, 3, 4, 5])], outs)
    sess = run_all(engine, model, {"x": rand(rng, (2, 3, 4, 5))})
    assert "fold_transpose_pair" not in fired(sess)


@pytest.mark.parametrize("shared", [False, True])
def test_hoist_activation_above_reshape(engine, rng, shared):
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"]),
             helper.make_node("Reshape", ["c", "flat"], ["r"]),
             helper.make_node("Tanh", ["r"], ["y"])]
    outs = ["y"]
    if shared:  # the reshaped value is also an output: the rule must leave it
        outs.append("r")
    inits = {"W": rand(rng, (4, 3, 3, 3)), "B": rand(rng, (4,)), "flat": np.array([0, -1], np.int64)}
    model = make_model(nodes, [("x", np.float32, ["N", 3, 6, 6])], outs, initializers=inits)
    sess = run_all(engine, model, {"x": rand(rng, (2, 3, 6, 6))}, atol=1e-4)
    f = fired(sess)
    if shared:
        assert "hoist_activation_above_reshape" not in f
    else:
        assert f.get("hoist_activation_above_reshape") == 1 and f.get("fuse_activation") == 1, f
        assert "Tanh" not in ops_after(sess)
