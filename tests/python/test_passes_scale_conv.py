"""fold_scale_into_conv: Div / Mul of a Conv's input by a static scalar becomes a
scaled weight (uint8 frames / 255 before the first Conv). Where it must fire and
where it must not; outputs equal with optimize=True vs optimize=False vs
onnxruntime, and refit of the weight or the scale equal to a fresh Session of the
updated model."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from helpers import make_model, rand
from test_passes import fired, refit_matches_fresh, run_all


def scaled_conv_model(rng, op="Div", order="xc", c=255.0, c_shape=(), reuse=False, uint8=False,
                      c_init=False):
    """[Cast ->] op(x, c) -> Conv(W, B, stride 2, pads 1) -> y (-> also `s` when reuse)."""
    nodes, inits = [], {"W": rand(rng, (5, 3, 3, 3)), "B": rand(rng, (5,))}
    x = "x"
    if uint8:
        nodes.append(helper.make_node("Cast", ["x"], ["xf"], to=1))
        x = "xf"
    cval = np.full(c_shape, c, np.float32)
    if c_init:
        inits["c"] = cval
    else:
        nodes.append(helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
            "cv", 1, list(c_shape), cval.ravel().tolist())))
    nodes.append(helper.make_node(op, [x, "c"] if order == "xc" else ["c", x], ["s"]))
    nodes.append(helper.make_node("Conv", ["s", "W", "B"], ["y"], strides=[2, 2], pads=[1] * 4))
    outs = ["y"]
    if reuse:  # the scaled input is also read by a Relu: the rule must leave it
        nodes.append(helper.make_node("Relu", ["s"], ["z"]))
        outs.append("z")
    dtype = np.uint8 if uint8 else np.float32
    return make_model(nodes, [("x", dtype, ["N", 3, 9, 11])], outs, initializers=inits)


def feed(rng, uint8=False, n=2, positive=False):
    if uint8:
        return {"x": rng.integers(0, 256, (n, 3, 9, 11)).astype(np.uint8)}
    return {"x": rand(rng, (n, 3, 9, 11), positive=positive)}


@pytest.mark.parametrize("op,order,c,c_shape", [("Div", "xc", 255.0, ()),
                                                 ("Div", "xc", -0.37, (1, 1, 1, 1)),
                                                 ("Mul", "xc", 1 / 255, (1,)),
                                                 ("Mul", "cx", 3.5, ())])
@pytest.mark.parametrize("uint8", [False, True])
def test_scale_into_conv_fires(engine, rng, op, order, c, c_shape, uint8):
    model = scaled_conv_model(rng, op, order, c, c_shape, uint8=uint8)
    for n in (1, 3):
        sess = run_all(engine, model, feed(rng, uint8, n), atol=1e-4)
    assert fired(sess).get("fold_scale_into_conv") == 1
    assert "(1 computed from weights at load and refit, " in sess.describe()
    assert [p["op"] for p in sess._profile(feed(rng, uint8), 1)] == ["Cast"] * uint8 + ["Conv"]


@pytest.mark.parametrize("case", ["reused", "divisor", "per_channel", "zero"])
def test_scale_into_conv_must_not_fire(engine, rng, case):
    kw = {"reused": dict(reuse=True), "divisor": dict(order="cx"),
          "per_channel": dict(c=2.0, c_shape=(1, 3, 1, 1)), "zero": dict(op="Mul", c=0.0)}[case]
    model = scaled_conv_model(rng, **kw)
    sess = run_all(engine, model, feed(rng, positive=case == "divisor"), atol=1e-4)
    assert "fold_scale_into_conv" not in fired(sess)


def test_scale_into_conv_refit(engine, rng):
    """The folded weight is a static node over W and c: a refit of either re-derives it."""
    model = scaled_conv_model(rng, c=4.0, c_init=True)
    feeds = feed(rng)
    sess = run_all(engine, model, feeds, atol=1e-4)
    assert fired(sess).get("fold_scale_into_conv") == 1
    refit_matches_fresh(engine, model, feeds, {"W"}, rng, atol=1e-4)
    refit_matches_fresh(engine, model, feeds, {"W", "B", "c"}, rng, atol=1e-4)
