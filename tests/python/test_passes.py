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
    # Random N(0, 1) weights push deep outputs to ~1e3, where a different but
    # correct float32 summation order differs by ~1e-4 near cancellations:
    # onnxruntime is compared with an absolute tolerance relative to each output's scale.
    got, ref = sess.run(dict(feeds)), run_ort(updated, feeds)
    for name, want in ref.items():
        scale = max(1.0, float(np.abs(want).max())) if np.size(want) else 1.0
        assert_outputs_close(got, {name: want}, rtol=TOL["rtol"], atol=TOL["atol"] * scale,
                             context="refit vs ort")


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


# ---------------------------------------------------------------------------------
# sink_transpose_below_matmul: Transpose(X, p) keeping X's last dim -> MatMul(W static
# 2-D) [-> Add(static bias)] becomes MatMul -> [Add ->] Transpose; Shape readers of the
# transposed tensor read Gather(Shape(X), p) instead.
# ---------------------------------------------------------------------------------
def sink_model(perm=(1, 0, 2), bias=True, shape_reader=True, w_static=True, extra_reader=False, rank=3):
    rng = np.random.default_rng(3)
    k, n = 6, 5
    dims = ["b", 4, k] if rank == 3 else ["b", 3, 2, k]
    x = vinfo("x", dims)
    inits = []
    inputs = [x]
    if w_static:
        inits.append(numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "W"))
    else:
        inputs.append(vinfo("W", [k, n]))
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=list(perm)),
             helper.make_node("MatMul", ["xt", "W"], ["m" if bias else "y"])]
    outputs = [vinfo("y", None)]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias"))
        nodes.append(helper.make_node("Add", ["m", "bias"], ["y"]))
    if shape_reader:  # torch's export: sizes read from the transposed tensor
        nodes.append(helper.make_node("Shape", ["xt"], ["s"]))
        nodes.append(helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT))
        outputs.append(vinfo("sf", None))
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["xt"], ["r"]))
        outputs.append(vinfo("r", None))
    graph = helper.make_graph(nodes, "sink", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=min(onnx.IR_VERSION, 10))


def _sink_feeds(model, rng, batch):
    feeds = {}
    for i in model.graph.input:
        dims = [batch if d.dim_param else d.dim_value for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = rand(rng, dims)
    return feeds


@pytest.mark.parametrize("perm,rank", [((1, 0, 2), 3), ((2, 0, 1, 3), 4), ((1, 2, 0, 3), 4)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape_reader", [True, False])
def test_sink_transpose_below_matmul_fires(engine, rng, perm, rank, bias, shape_reader):
    model = sink_model(perm, bias, shape_reader, rank=rank)
    for batch in (1, 5):
        feeds = _sink_feeds(model, rng, batch)
        sess = run_all(engine, model, feeds)
    assert fired(sess).get("sink_transpose_below_matmul") == 1, fired(sess)
    # The run's steps: the product reads X as it is, the transpose comes after it.
    ops = [r["op"] for r in sess.profile(feeds, runs=1)]
    product = min(i for i, op in enumerate(ops) if op in ("MatMul", "Gemm", "PackedGemm"))
    assert "Transpose" in ops[product:] and "Transpose" not in ops[:product], ops


@pytest.mark.parametrize("case", ["last_axis_moves", "weight_not_static", "other_reader"])
def test_sink_transpose_below_matmul_must_not_fire(engine, rng, case):
    model = {"last_axis_moves": lambda: sink_model(perm=(0, 2, 1)),
             "weight_not_static": lambda: sink_model(w_static=False),
             "other_reader": lambda: sink_model(extra_reader=True)}[case]()
    if case == "last_axis_moves":  # [b, 4, 6] -> [b, 6, 4]: MatMul by W [6, 5] would not fit
        model.graph.initializer[0].CopyFrom(numpy_helper.from_array(
            np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32), "W"))
    sess = run_all(engine, model, _sink_feeds(model, rng, 3))
    assert "sink_transpose_below_matmul" not in fired(sess), fired(sess)


def test_sink_transpose_refit_matches_fresh(engine, rng):
    model = sink_model()
    refit_matches_fresh(engine, model, _sink_feeds(model, rng, 3), {"W", "bias"}, rng)
