"""The float sections of a QDQ model that CPU sessions run on bytes (exact rewrites): a max pool
of a DequantizeLinear pools the bytes first (hoist_pool_above_dequantize, then the Q after it is
a byte table lookup), and Q(DQ(a) + DQ(b)) becomes one kaiwu QLinearAdd (fuse_qdq_add).

Each graph runs against onnxruntime running it literally (optimizations off: float math on the
dequantized values) and against the same session with KAIWU_INT8_BYTE_OPS=0 (the float nodes):
the bytes, hence the dequantized outputs, are identical. uint8 and int8 activations with nonzero
zero points, values saturating at both ends, broadcasting, odd sizes, 1 and 2 threads.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import run_ort

F32 = np.float32
IR = 9


def _model(x_shape, y_shape, dt, pool, pool_scale=0.05):
    """x -> Q -> DQ -> [MaxPool] -> Q -> DQ -> Add(DQ(Q(y))) -> Q -> DQ -> out."""
    zp = (lambda v: np.array(v, dtype=dt))
    inits = [numpy_helper.from_array(np.float32(pool_scale), "s0"), numpy_helper.from_array(zp(7), "z0"),
             numpy_helper.from_array(np.float32(0.043), "s1"), numpy_helper.from_array(zp(-3 if dt == np.int8 else 3), "z1"),
             numpy_helper.from_array(np.float32(0.031), "s2"), numpy_helper.from_array(zp(11), "z2"),
             numpy_helper.from_array(np.float32(0.07), "s3"), numpy_helper.from_array(zp(-9 if dt == np.int8 else 100), "z3")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s0", "z0"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s0", "z0"], ["xd"])]
    last = "xd"
    if pool:
        nodes.append(helper.make_node("MaxPool", ["xd"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                                      pads=[1, 1, 1, 1]))
        last = "p"
    nodes += [helper.make_node("QuantizeLinear", [last, "s1", "z1"], ["pq"]),
              helper.make_node("DequantizeLinear", ["pq", "s1", "z1"], ["pd"]),
              helper.make_node("QuantizeLinear", ["y", "s2", "z2"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "s2", "z2"], ["yd"]),
              helper.make_node("Add", ["pd", "yd"], ["sum"]),
              helper.make_node("QuantizeLinear", ["sum", "s3", "z3"], ["oq"]),
              helper.make_node("DequantizeLinear", ["oq", "s3", "z3"], ["out"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
                                       helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR).SerializeToString()


def _values(rng, shape):
    # A tenth of the values saturate each end (more would saturate the max pools' outputs).
    v = rng.uniform(-6, 6, shape).astype(F32)
    m = rng.random(shape)
    v[m < 0.1] = -100.0
    v[m > 0.9] = 100.0
    return v


def _literal(model, feeds):
    # onnxruntime running the QDQ graph as written (no fusions): its first output.
    return next(iter(run_ort(onnx.load_from_string(model), feeds, optimize=False).values()))


CASES = [
    # x shape, y shape (the pool halves H and W: 9x11 -> 5x6)
    ((2, 5, 9, 11), (2, 5, 5, 6)),
    ((3, 16, 9, 11), (1, 16, 1, 1)),   # y broadcast per channel
    ((1, 3, 9, 11), (6,)),             # y along the last axis
]


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("shapes", CASES)
def test_pool_and_add_on_bytes_equal_the_float_nodes(engine, rng, monkeypatch, dt, shapes):
    x_shape, y_shape = shapes
    model = _model(x_shape, y_shape, dt, pool=True)
    feeds = {"x": _values(rng, x_shape), "y": _values(rng, y_shape)}
    ref = _literal(model, feeds)
    assert len(np.unique(ref)) > 20, "saturated outputs: the comparison could not fail"
    for threads in (1, 2):
        sess = engine.Session(model, threads=threads)
        d = sess.describe()
        assert "hoist_pool_above_dequantize: 1" in d and "fuse_qdq_add: 1" in d, d
        after = d.split("after optimization")[1].split("rewrite rules")[0]
        assert "QLinearAdd: 1" in after and "MaxPool: 1" in after and "\n  Add:" not in after, d
        np.testing.assert_array_equal(sess.run(feeds)["out"], ref)
    monkeypatch.setenv("KAIWU_INT8_BYTE_OPS", "0")
    floats = engine.Session(model, threads=1)
    assert "QLinearAdd" not in floats.describe()
    np.testing.assert_array_equal(floats.run(feeds)["out"], ref)


def test_pool_of_a_negative_scale_stays_float(engine, rng):
    """A DequantizeLinear with a negative scale reverses the order of its bytes: the max pool
    stays on the floats (the Add still fuses), and the result is still onnxruntime's."""
    model = _model((2, 4, 9, 11), (2, 4, 5, 6), np.uint8, pool=True, pool_scale=-0.05)
    feeds = {"x": _values(rng, (2, 4, 9, 11)), "y": _values(rng, (2, 4, 5, 6))}
    sess = engine.Session(model, threads=1)
    d = sess.describe()
    assert "hoist_pool_above_dequantize" not in d and "fuse_qdq_add: 1" in d, d
    np.testing.assert_array_equal(sess.run(feeds)["out"], _literal(model, feeds))


def test_add_without_zero_points_and_mixed_dtypes(engine, rng):
    """QLinearAdd of an int8 and a uint8 operand, one of them without a zero point (0)."""
    inits = [numpy_helper.from_array(np.float32(0.05), "sa"), numpy_helper.from_array(np.int8(-4), "za"),
             numpy_helper.from_array(np.float32(0.02), "sb"),
             numpy_helper.from_array(np.float32(0.09), "sy"), numpy_helper.from_array(np.int8(5), "zy")]
    nodes = [helper.make_node("QuantizeLinear", ["a", "sa", "za"], ["aq"]),
             helper.make_node("DequantizeLinear", ["aq", "sa", "za"], ["ad"]),
             helper.make_node("QuantizeLinear", ["b", "sb"], ["bq"]),
             helper.make_node("DequantizeLinear", ["bq", "sb"], ["bd"]),
             helper.make_node("Add", ["ad", "bd"], ["s"]),
             helper.make_node("QuantizeLinear", ["s", "sy", "zy"], ["sq"]),
             helper.make_node("DequantizeLinear", ["sq", "sy", "zy"], ["out"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [7, 300]),
                                       helper.make_tensor_value_info("b", TensorProto.FLOAT, [7, 300])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR).SerializeToString()
    feeds = {"a": _values(rng, (7, 300)), "b": _values(rng, (7, 300))}
    sess = engine.Session(model, threads=2)
    assert "fuse_qdq_add: 1" in sess.describe()
    np.testing.assert_array_equal(sess.run(feeds)["out"], _literal(model, feeds))


@pytest.mark.parametrize("scales", [(0.1, 0.1, 0.2), (0.05, 0.15, 0.1), (0.3, 0.7, 0.2), (0.0625, 0.125, 0.25)])
def test_add_on_rounding_ties(engine, rng, scales):
    """Sums that land on (or next to) a half of y_scale, where multiplying by 1 / y_scale could
    round the other way than QuantizeLinear's division: the bytes are still onnxruntime's."""
    sa, sb, sy = scales
    inits = [numpy_helper.from_array(np.float32(sa), "sa"), numpy_helper.from_array(np.uint8(0), "za"),
             numpy_helper.from_array(np.float32(sb), "sb"), numpy_helper.from_array(np.uint8(0), "zb"),
             numpy_helper.from_array(np.float32(sy), "sy"), numpy_helper.from_array(np.uint8(17), "zy")]
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["ad"]),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bd"]),
             helper.make_node("Add", ["ad", "bd"], ["s"]),
             helper.make_node("QuantizeLinear", ["s", "sy", "zy"], ["out"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, [4096]),
                                       helper.make_tensor_value_info("b", TensorProto.UINT8, [4096])],
                          [helper.make_tensor_value_info("out", TensorProto.UINT8, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR).SerializeToString()
    # Small codes: sums within the output range, so that ties are not saturated away.
    feeds = {"a": rng.integers(0, 40, 4096).astype(np.uint8), "b": rng.integers(0, 40, 4096).astype(np.uint8)}
    sess = engine.Session(model, threads=1)
    assert "fuse_qdq_add: 1" in sess.describe()
    ref = _literal(model, feeds)
    assert len(np.unique(ref)) > 20
    np.testing.assert_array_equal(sess.run(feeds)["out"], ref)


def _block_model(c, hw, dt, relu_between):
    """A stem conv, then a residual block in QDQ form: d -> [Relu -> Q -> DQ] -> Conv3x3 -> Q -> DQ ->
    Conv3x3 -> Q -> DQ, + d -> Q -> DQ -> out; per-channel int8 weights, activations of dtype dt."""
    rng = np.random.default_rng(c + hw)
    zp = (lambda v: np.array(v, dtype=dt))
    inits = [numpy_helper.from_array(np.float32(0.05), "sx"), numpy_helper.from_array(zp(3), "zx"),
             numpy_helper.from_array(np.float32(0.04), "s1"), numpy_helper.from_array(zp(-2 if dt == np.int8 else 120), "z1"),
             numpy_helper.from_array(np.float32(0.06), "s2"), numpy_helper.from_array(zp(5), "z2"),
             numpy_helper.from_array(np.float32(0.08), "s3"), numpy_helper.from_array(zp(-7 if dt == np.int8 else 90), "z3")]
    for i in (1, 2):
        inits += [numpy_helper.from_array(rng.integers(-127, 128, (c, c, 3, 3)).astype(np.int8), f"w{i}"),
                  numpy_helper.from_array(rng.uniform(0.001, 0.004, c).astype(F32), f"ws{i}"),
                  numpy_helper.from_array(np.zeros(c, np.int8), f"wz{i}"),
                  numpy_helper.from_array(rng.uniform(-0.5, 0.5, c).astype(F32), f"b{i}")]
    # A stem conv first, so that the block reads channels-last bytes (IMPALA's blocks follow a conv).
    inits += [numpy_helper.from_array(rng.integers(-127, 128, (c, c, 3, 3)).astype(np.int8), "w0"),
              numpy_helper.from_array(rng.uniform(0.001, 0.004, c).astype(F32), "ws0"),
              numpy_helper.from_array(np.zeros(c, np.int8), "wz0"),
              numpy_helper.from_array(np.float32(0.05), "s0"), numpy_helper.from_array(zp(9), "z0")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xin"]),
             helper.make_node("DequantizeLinear", ["w0", "ws0", "wz0"], ["wd0"], axis=0),
             helper.make_node("Conv", ["xin", "wd0"], ["h0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["h0", "s0", "z0"], ["h0q"]),
             helper.make_node("DequantizeLinear", ["h0q", "s0", "z0"], ["xd"])]
    first = "xd"
    if relu_between:  # Relu -> Q -> DQ before the conv, as onnxruntime's quantizer writes it
        inits += [numpy_helper.from_array(np.float32(0.03), "sr"), numpy_helper.from_array(zp(0), "zr")]
        nodes += [helper.make_node("Relu", ["xd"], ["xr"]),
                  helper.make_node("QuantizeLinear", ["xr", "sr", "zr"], ["xrq"]),
                  helper.make_node("DequantizeLinear", ["xrq", "sr", "zr"], ["xrd"])]
        first = "xrd"
    for i, (src, s, z) in enumerate([(first, "s1", "z1"), ("h1d", "s2", "z2")], start=1):
        nodes += [helper.make_node("DequantizeLinear", [f"w{i}", f"ws{i}", f"wz{i}"], [f"wd{i}"], axis=0),
                  helper.make_node("Conv", [src, f"wd{i}", f"b{i}"], [f"h{i}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  helper.make_node("QuantizeLinear", [f"h{i}", s, z], [f"h{i}q"]),
                  helper.make_node("DequantizeLinear", [f"h{i}q", s, z], [f"h{i}d"])]
    nodes += [helper.make_node("Add", ["xd", "h2d"], ["sum"]),
              helper.make_node("QuantizeLinear", ["sum", "s3", "z3"], ["oq"]),
              helper.make_node("DequantizeLinear", ["oq", "s3", "z3"], ["out"])]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, c, hw, hw])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR).SerializeToString()


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("c,hw,relu", [(16, 11, True), (32, 9, False)])
def test_residual_block_sum_on_bytes(engine, rng, monkeypatch, dt, c, hw, relu):
    """A residual block after a stem conv (IMPALA's form): the integer convs read their rows in
    place and the sum runs as QLinearAdd over their bytes, with the bytes of the float nodes
    (KAIWU_INT8_BYTE_OPS=0) at 1 and 2 threads; within one step of onnxruntime's literal run."""
    model = _block_model(c, hw, dt, relu)
    feeds = {"x": _values(rng, (3, c, hw, hw))}
    outs = {}
    for name, env in {"bytes": {}, "floats": {"KAIWU_INT8_BYTE_OPS": "0"}}.items():
        monkeypatch.delenv("KAIWU_INT8_BYTE_OPS", raising=False)
        for var, val in env.items():
            monkeypatch.setenv(var, val)
        for threads in (1, 2):
            sess = engine.Session(model, threads=threads)
            d = sess.describe()
            assert ("fuse_qdq_add: 1" in d) == (name == "bytes") and "QLinearFused" in d, d
            out = sess.run(feeds)["out"]
            if name in outs:
                np.testing.assert_array_equal(out, outs[name])
            outs[name] = out
    np.testing.assert_array_equal(outs["bytes"], outs["floats"])
    ref = _literal(model, feeds)
    assert len(np.unique(ref)) > 20
    assert np.abs(outs["bytes"] - ref).max() <= 0.08 * 1.001  # one step of the output
