"""Rewrite rules of the optimizer: each fires where it should, stays put where it
must not, and never changes results (optimize=True vs optimize=False vs
onnxruntime, rtol 1e-4 / atol 1e-5 on float32). Rules that touch weights are
checked for refit safety: after a refit with new random weights the session
must match a fresh Session built from the updated model (1e-5)."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import game_policy as gp
from helpers import assert_outputs_close, make_model, rand, run_ort

TOL = dict(rtol=1e-4, atol=1e-5)


def fired(sess) -> dict[str, int]:
    """The "rewrite rules fired:" section of describe() as {rule: count}."""
    text = sess.describe()
    m = re.search(r"rewrite rules fired:(.*?)\n(?=\S)", text + "\nend", re.S)
    assert m, text
    return {k: int(v) for k, v in re.findall(r"^\s+(\w+): (\d+)$", m.group(1), re.M)}


def ops_after(sess) -> dict[str, int]:
    text = sess.describe()
    sect = text.split("nodes after optimization:")[1].split("rewrite rules fired:")[0]
    return {k: int(v) for k, v in re.findall(r"^\s+([\w.:]+): (\d+)$", sect, re.M)}


def run_all(engine, model, feeds, **tol):
    """Compare optimize=True, optimize=False and onnxruntime; return the optimized session."""
    ref = run_ort(model, feeds)
    opt = engine.Session(model, threads=1, optimize=True)
    plain = engine.Session(model, threads=1, optimize=False)
    t = dict(TOL, **tol)
    assert_outputs_close(opt.run(dict(feeds)), ref, context="optimize=True", **t)
    assert_outputs_close(plain.run(dict(feeds)), ref, context="optimize=False", **t)
    return opt


def refit_matches_fresh(engine, model, feeds, names, rng, atol=1e-5):
    """Refit `names` with new random weights; compare with a fresh session of the updated model."""
    sess = engine.Session(model, threads=1, optimize=True)
    sess.run(dict(feeds))
    all_weights = {i.name for i in model.graph.initializer if i.data_type == TensorProto.FLOAT}
    new = {}
    for init in model.graph.initializer:
        if init.name in names:
            old = numpy_helper.to_array(init)
            new[init.name] = rand(rng, old.shape).astype(old.dtype)
    assert set(new) == set(names)
    sess.refit(new, strict=set(new) == all_weights)
    updated = onnx.ModelProto()
    updated.CopyFrom(model)
    for init in updated.graph.initializer:
        if init.name in new:
            init.CopyFrom(numpy_helper.from_array(new[init.name], init.name))
    fresh = engine.Session(updated, threads=1, optimize=True)
    assert_outputs_close(sess.run(dict(feeds)), fresh.run(dict(feeds)), rtol=1e-5, atol=atol,
                         context="refit vs fresh")
    assert_outputs_close(sess.run(dict(feeds)), run_ort(updated, feeds), context="refit vs ort", **TOL)


def vinfo(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


# ----------------------------------------------------------------------------
# 1. dilated convolution
# ----------------------------------------------------------------------------
def dilated_model(layout="NHWC", rate=2, padding="SAME", hw=(15, 15), c_in=4, c_out=6, group=1,
                  neg_ends=True, mutate=None, extra_output=None, k=3):
    b = gp.GraphBuilder(3)
    shape = ["N", *hw, c_in] if layout == "NHWC" else ["N", c_in, *hw]
    y, _, w, _ = gp.dilated_conv(b, "x", c_in=c_in, c_out=c_out, hw=hw, k=k, rate=rate,
                                 padding=padding, layout=layout, group=group, neg_ends=neg_ends)
    outs = [vinfo(y, None)]
    if mutate:
        mutate(b)
    if extra_output:
        outs.append(vinfo(extra_output(b), None))
    return b.model([vinfo("x", shape)], outs), shape, w


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("rate", [2, 3, 4, (2, 3)])
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("hw", [(15, 15), (16, 13), (12, 9)])
def test_dilated_conv_fires(engine, rng, layout, rate, padding, hw):
    model, shape, _ = dilated_model(layout, rate, padding, hw, neg_ends=hw[0] % 2 == 1)
    x = rand(rng, [2] + shape[1:])
    sess = run_all(engine, model, {"x": x})
    assert fired(sess).get("fold_dilated_conv") == 1
    ops = ops_after(sess)
    assert ops.get("Reshape", 0) == 0 and ops.get("Pad", 0) == 0 and ops.get("Slice", 0) == 0, ops
    assert ops.get("Transpose", 0) == (2 if layout == "NHWC" else 0), ops


def test_dilated_depthwise_fires(engine, rng):
    model, shape, _ = dilated_model("NHWC", 3, "SAME", (14, 14), c_in=6, c_out=6, group=6)
    sess = run_all(engine, model, {"x": rand(rng, [3] + shape[1:])})
    assert fired(sess).get("fold_dilated_conv") == 1


def _node(b, op, k=0):
    return [n for n in b.nodes if n.op_type == op][k]


@pytest.mark.parametrize("case", ["used_twice", "graph_output", "conv_dilated", "conv_pads",
                                  "perm_mismatch", "pad_reflect", "pad_value"])
def test_dilated_conv_must_not_fire(engine, rng, case):
    """Every variant below is a valid model that the rule must leave alone."""
    extra, mutate, k = None, None, 3
    if case == "used_twice":  # the SpaceToBatch Transpose also feeds a ReduceSum
        extra = lambda b: b.op("ReduceSum", [_node(b, "Transpose").output[0]], keepdims=0)
    elif case == "graph_output":
        extra = lambda b: _node(b, "Conv").output[0]
    elif case in ("conv_dilated", "conv_pads"):  # 1x1 kernel: the attribute keeps sizes valid
        k = 1
        attr = helper.make_attribute("dilations", [2, 2]) if case == "conv_dilated" else \
            helper.make_attribute("pads", [0, 0, 0, 0])
        mutate = lambda b: _node(b, "Conv").attribute.append(attr)  # zero pads: must fire
    elif case == "perm_mismatch":  # swaps the two block axes on the way back
        def mutate(b):
            t = _node(b, "Transpose", 1)
            del t.attribute[:]
            t.attribute.append(helper.make_attribute("perm", [2, 3, 4, 1, 5, 0]))
    elif case == "pad_reflect":
        mutate = lambda b: _node(b, "Pad").attribute.append(helper.make_attribute("mode", "reflect"))
    elif case == "pad_value":
        mutate = lambda b: _node(b, "Pad").input.append(b.const(0.5, np.float32))
    model, shape, _ = dilated_model("NCHW", 2, "SAME", (13, 13), k=k, mutate=mutate, extra_output=extra)
    sess = run_all(engine, model, {"x": rand(rng, [2] + shape[1:])})
    expect_fire = case == "conv_pads"
    assert ("fold_dilated_conv" in fired(sess)) == expect_fire, fired(sess)


# ----------------------------------------------------------------------------
# 2. Split + Concat
# ----------------------------------------------------------------------------
def split_concat_model(split_axis, concat_axis, sizes, order=None, shape=(2, 6, 4, 5), reuse=False):
    k = len(sizes)
    pieces = [f"p{i}" for i in range(k)]
    order = order or list(range(k))
    nodes = [helper.make_node("Split", ["x", "sizes"], pieces, axis=split_axis),
             helper.make_node("Concat", [pieces[i] for i in order], ["y"], axis=concat_axis)]
    outs = ["y"]
    if reuse:
        nodes.append(helper.make_node("Relu", [pieces[0]], ["z"]))
        outs.append("z")
    return make_model(nodes, [("x", np.float32, list(shape))], outs,
                      initializers={"sizes": np.array(sizes, np.int64)})


@pytest.mark.parametrize("sa,ca,sizes", [(1, 1, [2, 4]), (1, -3, [3, 3]), (3, 3, [1, 1, 3]),
                                         (-1, 3, [2, 3])])
def test_split_concat_identity(engine, rng, sa, ca, sizes):
    model = split_concat_model(sa, ca, sizes)
    sess = run_all(engine, model, {"x": rand(rng, (2, 6, 4, 5))})
    assert fired(sess).get("fold_split_concat") == 1
    assert "Split" not in ops_after(sess) and "Concat" not in ops_after(sess)


@pytest.mark.parametrize("sa,ca,sizes", [(1, 2, [3, 3]), (1, 3, [2, 2, 2]), (2, 0, [2, 2]),
                                         (3, 1, [1] * 5), (0, 3, [1, 1])])
def test_split_concat_other_axis(engine, rng, sa, ca, sizes):
    model = split_concat_model(sa, ca, sizes)
    sess = run_all(engine, model, {"x": rand(rng, (2, 6, 4, 5))})
    assert fired(sess).get("fold_split_concat") == 1
    ops = ops_after(sess)
    assert "Split" not in ops and "Concat" not in ops and ops.get("Transpose") == 1, ops


@pytest.mark.parametrize("axis,sizes,order", [(1, [3, 3], [1, 0]), (3, [1] * 5, [4, 2, 0, 1, 3]),
                                               (-4, [1, 1], [1, 0])])
def test_split_concat_permuted(engine, rng, axis, sizes, order):
    model = split_concat_model(axis, axis, sizes, order=order)
    sess = run_all(engine, model, {"x": rand(rng, (2, 6, 4, 5))})
    assert fired(sess).get("fold_split_concat") == 1
    ops = ops_after(sess)
    assert "Split" not in ops and "Concat" not in ops and ops.get("Gather") == 1, ops


@pytest.mark.parametrize("case", ["reused", "permuted_unequal", "permuted_other_axis", "subset"])
def test_split_concat_must_not_fire(engine, rng, case):
    if case == "reused":
        model = split_concat_model(1, 1, [2, 4], reuse=True)
    elif case == "permuted_unequal":
        model = split_concat_model(1, 1, [2, 4], order=[1, 0])
    elif case == "permuted_other_axis":
        model = split_concat_model(1, 2, [3, 3], order=[1, 0])
    else:  # Concat of the first two of three pieces
        nodes = [helper.make_node("Split", ["x", "sizes"], ["p0", "p1", "p2"], axis=1),
                 helper.make_node("Concat", ["p0", "p1"], ["y"], axis=1)]
        model = make_model(nodes, [("x", np.float32, [2, 6, 4, 5])], ["y"],
                           initializers={"sizes": np.array([2, 2, 2], np.int64)})
    sess = run_all(engine, model, {"x": rand(rng, (2, 6, 4, 5))})
    assert "fold_split_concat" not in fired(sess)


# ----------------------------------------------------------------------------
# 3. constant fills
# ----------------------------------------------------------------------------
def test_fill_sub_self_int(engine, rng):
    nodes = [helper.make_node("Sub", ["x", "x"], ["z"]), helper.make_node("Add", ["z", "one"], ["y"])]
    model = make_model(nodes, [("x", np.int64, ["N", 7])], ["y"], initializers={"one": np.array(1, np.int64)})
    sess = run_all(engine, model, {"x": rand(rng, (3, 7), np.int64)})
    assert fired(sess).get("fold_constant_fill") == 2  # Sub -> fill 0, then Add(fill 0, 1) -> fill 1
    assert ops_after(sess).get("Sub", 0) == 0


def test_fill_mul_zero_int(engine, rng):
    nodes = [helper.make_node("Mul", ["zero", "x"], ["y"])]
    model = make_model(nodes, [("x", np.int32, [4, 5])], ["y"], initializers={"zero": np.array(0, np.int32)})
    sess = run_all(engine, model, {"x": rand(rng, (4, 5), np.int32)})
    assert fired(sess).get("fold_constant_fill") == 1


def test_fill_expand_constant(engine, rng):
    nodes = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.FLOAT, [], [2.5])),
             helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Expand", ["c", "s"], ["f"]),
             helper.make_node("Mul", ["x", "f"], ["y"])]
    model = make_model(nodes, [("x", np.float32, ["N", 3])], ["y"])
    sess = run_all(engine, model, {"x": rand(rng, (5, 3))})
    assert fired(sess).get("fold_constant_fill") == 1


@pytest.mark.parametrize("case", ["float_sub_self", "float_mul_zero", "expand_weight", "mul_nonzero"])
def test_fill_must_not_fire(engine, rng, case):
    inits = {}
    if case == "float_sub_self":  # inf - inf is NaN: must stay
        nodes = [helper.make_node("Sub", ["x", "x"], ["y"])]
    elif case == "float_mul_zero":
        nodes = [helper.make_node("Mul", ["x", "zero"], ["y"])]
        inits["zero"] = np.array(0, np.float32)
    elif case == "expand_weight":  # a float initializer is a refittable weight: no attribute copy
        nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Expand", ["c", "s"], ["y"])]
        inits["c"] = np.array(1.5, np.float32)
    else:
        nodes = [helper.make_node("Mul", ["x", "two"], ["y"])]
        inits["two"] = np.array(2, np.float32)
    model = make_model(nodes, [("x", np.float32, [3, 4])], ["y"], initializers=inits)
    x = rand(rng, (3, 4))
    x[0, 0], x[1, 1], x[2, 2] = np.inf, -np.inf, np.nan
    sess = run_all(engine, model, {"x": x})
    assert "fold_constant_fill" not in fired(sess)


def test_ones_like_shape_fill_folded_at_plan_time(engine, rng):
    """Shape -> ConstantOfShape needs no rule: the planner computes it per shape."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["o"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
             helper.make_node("Add", ["x", "o"], ["y"])]
    model = make_model(nodes, [("x", np.float32, ["N", 4])], ["y"])
    sess = run_all(engine, model, {"x": rand(rng, (6, 4))})
    assert "fold_constant_fill" not in fired(sess)


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
    assert ops.get("Gemm") == 1 and "MatMul" not in ops and "Relu" not in ops, ops
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
    assert ops.get("Gemm") == 1 and "MatMul" not in ops and "Relu" not in ops, ops
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
# 5. the game policy
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 5])
def test_game_policy(engine, batch):
    model = gp.build_game_policy(with_game_ops=gp.game_ops_available())
    sess = run_all(engine, model, gp.game_inputs(batch, seed=batch), rtol=1e-4, atol=1e-4)
    f = fired(sess)
    assert f.get("fold_dilated_conv") == 3, f
    assert f.get("fold_split_concat") == 1, f
    assert f.get("fuse_matmul_add") == 2, f
    assert f.get("fold_constant_fill") == 1, f
    assert f.get("fuse_elementwise", 0) >= 1, f


def test_game_policy_refit(engine, rng):
    model = gp.build_game_policy()
    weights = {i.name for i in model.graph.initializer if i.data_type == TensorProto.FLOAT}
    refit_matches_fresh(engine, model, gp.game_inputs(3), weights, rng, atol=1e-5)


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
