"""The fused integer Conv / Gemm kernels (fuse_qdq -> QLinearFused) on small QDQ graphs, against
onnxruntime running the same graph literally (optimizations off: float math on dequantized
values), within one quantization step of the output.

Sizes are odd on purpose: reduction lengths that are not a multiple of 4, output channels that
leave partial row tiles, pixel and row counts that leave partial lane tiles. Weights use the
full int8 range: [-127, 127] (the AVX2 shifted tiles: activations enter as x - 128) or with -128
present (the other tiles), activations saturate at both ends of their range, uint8 and int8
activations with nonzero zero points; 1 and 2 threads.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import run_ort

F32 = np.float32
IR = 9  # what onnxruntime 1.30 (the device machine's) reads; onnx >= 1.23 writes newer by default


def _qdq_model(kind, x_shape, w, bias, x_dt, x_zp, conv_attrs=None, relu=False, ys=None):
    """x -> Q -> DQ -> Conv/Gemm(DQ(w), bias) (-> Relu) -> Q -> DQ -> y, per-channel weights."""
    n = w.shape[0]
    rng = np.random.default_rng(n)
    ws = rng.uniform(0.002, 0.01, n).astype(F32)
    k = int(np.prod(w.shape[1:]))
    ys = np.float32(ys if ys is not None else 0.02 * np.sqrt(k))
    inits = [
        numpy_helper.from_array(np.float32(0.05), "xs"),
        numpy_helper.from_array(np.array(x_zp, dtype=x_dt), "xz"),
        numpy_helper.from_array(w.astype(np.int8), "wq"),
        numpy_helper.from_array(ws, "ws"),
        numpy_helper.from_array(np.zeros(n, np.int8), "wz"),
        numpy_helper.from_array(bias.astype(F32), "b"),
        numpy_helper.from_array(ys, "ys"),
        numpy_helper.from_array(np.uint8(128 if relu else 100), "yz"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
    ]
    if kind == "conv":
        nodes.append(helper.make_node("Conv", ["xd", "wd", "b"], ["h"], **(conv_attrs or {})))
    else:
        nodes.append(helper.make_node("Gemm", ["xd", "wd", "b"], ["h"], transB=1))
    last = "h"
    if relu:
        nodes.append(helper.make_node("Relu", ["h"], ["r"]))
        last = "r"
    nodes += [helper.make_node("QuantizeLinear", [last, "ys", "yz"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR), float(ys)


def _weights(rng, shape, with_min):
    w = rng.integers(-127, 128, shape)
    flat = w.reshape(shape[0], -1)
    flat[:, ::3] = np.where(rng.random(flat[:, ::3].shape) < 0.5, 127, -127)  # extreme pairs
    if with_min:
        flat[0, 0] = -128
    return w.astype(np.int8)


def _inputs(rng, shape):
    # xs = 0.05: values beyond +-13 saturate the 8-bit activations at both ends.
    x = rng.uniform(-8, 8, shape).astype(F32)
    m = rng.random(shape)
    x[m < 0.2] = -100.0
    x[m > 0.8] = 100.0
    return x


def _ort_literal(model, feeds):
    # onnxruntime running the QDQ graph as written (no fusions): its first output.
    return next(iter(run_ort(model, feeds, optimize=False).values()))


def _check(engine, model, step, x):
    ref = _ort_literal(model, {"x": x})
    for threads in (1, 2):
        sess = engine.Session(model.SerializeToString(), threads=threads)
        assert "QLinearFused" in sess.describe()
        got = sess.run({"x": x})["y"]
        err = np.abs(got - ref).max()
        assert err <= step * 1.001, f"threads={threads}: {err} > step {step}"


ACT = [(np.uint8, 0), (np.uint8, 37), (np.int8, -5)]

CONV_CASES = [
    # x shape, w shape, attrs
    ((2, 5, 11, 9), (13, 5, 3, 3), dict(pads=[1, 1, 1, 1])),               # k=45, P=99
    ((3, 3, 13, 13), (6, 3, 4, 4), dict(strides=[2, 2])),                  # k=48, n=6
    ((1, 7, 6, 5), (9, 7, 2, 2), dict(strides=[1, 1], pads=[0, 1, 1, 0])),  # k=28, P=42
    ((5, 16, 9, 9), (33, 16, 3, 3), {}),                                  # several lane tiles per image
    ((3, 8, 42, 42), (5, 8, 3, 3), dict(pads=[1, 1, 1, 1])),               # chunks of 2 images
    ((2, 4, 84, 84), (7, 4, 8, 8), dict(strides=[4, 4])),                  # 4-byte windows (atari)
    ((2, 6, 20, 20), (10, 6, 4, 4), dict(strides=[2, 2], pads=[1, 0, 2, 1])),  # 4-byte windows, padded
]


@pytest.mark.parametrize("x_dt,x_zp", ACT)
@pytest.mark.parametrize("with_min", [False, True])
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_fused_conv_full_range_weights(engine, rng, x_dt, x_zp, with_min, case):
    xs, wshape, attrs = CONV_CASES[case]
    w = _weights(rng, wshape, with_min)
    bias = rng.uniform(-1, 1, wshape[0]).astype(F32)
    model, step = _qdq_model("conv", xs, w, bias, x_dt, x_zp, attrs, relu=case % 2 == 0)
    _check(engine, model, step, _inputs(rng, xs))


@pytest.mark.parametrize("x_dt,x_zp", ACT)
@pytest.mark.parametrize("with_min", [False, True])
# n % 16 <= 8: the last block's channels are multiplied as row dots (value heads: n = 1);
# on AMX CPUs (33, 16, 3, 3) convs and (37, 200, 40) take AMX tiles with VNNI tails of K and rows
@pytest.mark.parametrize("rows,k,n", [(1, 37, 21), (7, 64, 16), (33, 129, 5), (6, 3, 40), (19, 301, 1),
                                      (64, 256, 18), (13, 100, 25),
                                      # AMX: whole 16-row tiles and a 5-row tail, K past the last 64
                                      (37, 200, 40)])
def test_fused_gemm_full_range_weights(engine, rng, x_dt, x_zp, with_min, rows, k, n):
    w = _weights(rng, (n, k), with_min)
    bias = rng.uniform(-1, 1, n).astype(F32)
    model, step = _qdq_model("gemm", (rows, k), w, bias, x_dt, x_zp, relu=rows % 2 == 1)
    _check(engine, model, step, _inputs(rng, (rows, k)))


def test_fused_conv_extreme_products(engine):
    """Every activation at 0 or 255 against weights of +-127 (x_zp 128: x - x_zp is -128 or
    127): the largest int16 pair sums of the shifted tiles, 2 * 128 * 127."""
    rng = np.random.default_rng(5)
    w = np.where(rng.random((8, 4, 3, 3)) < 0.5, 127, -127).astype(np.int8)
    x = np.where(rng.random((2, 4, 7, 7)) < 0.5, -100.0, 100.0).astype(F32)
    model, step = _qdq_model("conv", x.shape, w, np.zeros(8, F32), np.uint8, 128, ys=0.5)
    _check(engine, model, step, x)


def lookup_model(shape):
    """Q -> DQ -> Tanh -> Q -> DQ over x of `shape`: the DQ -> Tanh -> Q in the middle is a
    byte table (QLookup) for the engine; y is within one output step (1 / 127) of onnxruntime."""
    inits = [numpy_helper.from_array(np.float32(0.03), "xs"), numpy_helper.from_array(np.uint8(120), "xz"),
             numpy_helper.from_array(np.float32(1 / 127), "ys"), numpy_helper.from_array(np.int8(0), "yz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("Tanh", ["xd"], ["t"]),
             helper.make_node("QuantizeLinear", ["t", "ys", "yz"], ["tq"]),
             helper.make_node("DequantizeLinear", ["tq", "ys", "yz"], ["y"])]
    g = helper.make_graph(nodes, "lut", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR)


@pytest.mark.parametrize("shape", [(3, 37), (1001, 7), (5,)])
def test_lookup_odd_sizes(engine, rng, shape):
    """DQ -> Tanh -> Q becomes a byte table lookup (QLookup), read 8 bytes at a time: sizes with
    tails, split across 2 threads."""
    model = lookup_model(shape)
    x = rng.uniform(-5, 5, shape).astype(F32)
    ref = _ort_literal(model, {"x": x})
    for threads in (1, 2):
        sess = engine.Session(model.SerializeToString(), threads=threads)
        assert "QLookup" in sess.describe()
        got = sess.run({"x": x})["y"]
        assert np.abs(got - ref).max() <= (1 / 127) * 1.001


def test_lookup_when_the_dequantized_value_has_other_readers(engine, rng):
    """A residual block's pattern: DQ(x) feeds both Q(Relu(DQ(x))) and an Add. The Relu branch
    becomes a table lookup on x's bytes while the DequantizeLinear stays for the Add; both
    outputs equal onnxruntime's literal run (the lookup is exact)."""
    inits = [numpy_helper.from_array(np.float32(0.05), "s"), numpy_helper.from_array(np.uint8(128), "z"),
             numpy_helper.from_array(np.float32(0.03), "s2"), numpy_helper.from_array(np.uint8(3), "z2")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["d"]),
             helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s2", "z2"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "s2", "z2"], ["y"]),
             helper.make_node("Add", ["d", "y"], ["skip"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("skip", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR)
    x = rng.uniform(-7, 7, (3, 5, 7)).astype(F32)
    ref = list(run_ort(model, {"x": x}, optimize=False).values())
    sess = engine.Session(model.SerializeToString(), threads=1)
    d = sess.describe()
    # Per run: Q(x), the kept DQ, the lookup, DQ(y), Add (the Relu and its Q moved into the table's
    # static nodes)
    assert "fuse_qdq_lookup: 1" in d and "5 per run" in d, d
    got = sess.run({"x": x})
    np.testing.assert_array_equal(got["y"], ref[0])
    np.testing.assert_allclose(got["skip"], ref[1], rtol=0, atol=1e-6)


@pytest.mark.parametrize("op", ["Flatten", "Reshape"])
@pytest.mark.parametrize("same", [True, False])
def test_reshape_between_dq_and_q(engine, rng, op, same):
    """DQ -> Flatten/Reshape -> Q (the QDQ export of Conv -> Flatten -> Gemm): the Reshape moves
    above the DQ and DQ -> Q becomes a byte lookup (a copy when both have the same parameters);
    odd sizes, 1 and 2 threads, against onnxruntime running the graph literally."""
    ys, yz = (0.05, 37) if same else (0.031, 90)
    inits = [numpy_helper.from_array(np.float32(0.05), "xs"), numpy_helper.from_array(np.uint8(37), "xz"),
             numpy_helper.from_array(np.float32(ys), "ys"), numpy_helper.from_array(np.uint8(yz), "yz"),
             numpy_helper.from_array(np.array([3, -1], np.int64), "shape")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node(op, ["xd", "shape"] if op == "Reshape" else ["xd"], ["f"]),
             helper.make_node("QuantizeLinear", ["f", "ys", "yz"], ["fq"]),
             helper.make_node("DequantizeLinear", ["fq", "ys", "yz"], ["y"])]
    g = helper.make_graph(nodes, "flat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, 7, 11])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR)
    x = _inputs(rng, (3, 5, 7, 11))
    ref = _ort_literal(model, {"x": x})
    for threads in (1, 2):
        sess = engine.Session(model.SerializeToString(), threads=threads)
        d = sess.describe()
        assert "hoist_reshape_above_dq: 1" in d and "QLookup" in d, d
        got = sess.run({"x": x})["y"]
        assert got.shape == ref.shape == (3, 385)
        assert np.abs(got - ref).max() <= ys * 1.001


def _kaiwu_fused_conv_model(conv, channels_last, x_shape, gemm_layout=None, nhwc_weight=False):
    """QPackWeights -> QLinearFused written directly in the kaiwu domain (what the optimizer
    makes), a 3x3 conv of 3 channels into 4 (nhwc_weight: the weight as [M, KH, KW, C])."""
    w = np.random.default_rng(0).integers(-5, 5, (4, 3, 3, 3)).astype(np.int8)
    if nhwc_weight:
        w = np.ascontiguousarray(w.transpose(0, 2, 3, 1))
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(0.1), "s"),
             numpy_helper.from_array(np.uint8(3), "z")]
    pack_attrs = {} if gemm_layout is None else {"gemm_layout": gemm_layout}
    nodes = [helper.make_node("QPackWeights", ["w", "s", "", "s", "z", "", "s", "z"], ["p"], domain="kaiwu",
                              conv=conv, **pack_attrs),
             helper.make_node("QLinearFused", ["x", "p"], ["y"], domain="kaiwu", name="qf", conv=conv, k=27,
                              n=4, kernel_shape=[3, 3], channels_last=channels_last, y_dtype=2)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("kaiwu", 1)],
                             ir_version=IR).SerializeToString()


def test_channels_last_integer_conv_on_the_cpu_and_its_packing_checked(engine):
    """A channels-last integer conv (what passes/layout_nhwc.cc makes of CPU sessions' convs)
    equals the NCHW one; its packed weights must be in the Gemm blocks (gemm_layout=1), and
    a packing for the other product is refused naming the node, as are the shape checks."""
    x = np.random.default_rng(1).integers(0, 256, (2, 3, 5, 6)).astype(np.uint8)
    ref = engine.Session(_kaiwu_fused_conv_model(1, 0, [2, 3, 5, 6]), optimize=False).run({"x": x})["y"]
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    got = engine.Session(_kaiwu_fused_conv_model(1, 1, [2, 5, 6, 3], gemm_layout=1, nhwc_weight=True),
                         optimize=False).run({"x": xl})["y"]
    assert got.shape == (2, 3, 4, 4)
    np.testing.assert_array_equal(got, ref.transpose(0, 2, 3, 1))
    assert len(np.unique(ref)) > 10  # not saturated: the comparison can fail
    for conv, cl, gl, shape, xin in [(1, 1, None, [2, 5, 6, 3], xl), (1, 0, 1, [2, 3, 5, 6], x)]:
        with pytest.raises(engine.UnsupportedOpError, match="qf.*packed weights are in"):
            engine.Session(_kaiwu_fused_conv_model(conv, cl, shape, gemm_layout=gl), optimize=False).run({"x": xin})
    with pytest.raises(engine.InputError, match="qf.*channels_last needs conv=1"):
        engine.Session(_kaiwu_fused_conv_model(0, 1, [2, 27])).run({"x": np.zeros((2, 27), np.uint8)})
    with pytest.raises(engine.InputError, match=r"qf.*channels-last X must be \[N, H, W, C\]"):
        engine.Session(_kaiwu_fused_conv_model(1, 1, [2, 5, 6, 3, 1])).run({"x": xl[..., None]})


def test_int8_convs_run_channels_last_on_the_cpu_unless_switched_off(engine, rng, monkeypatch):
    """CPU sessions convert integer convs to channels-last (KAIWU_INT8_NHWC=0 keeps NCHW); both
    give the same bytes."""
    xs, wshape, attrs = CONV_CASES[0]
    w = _weights(rng, wshape, False)
    bias = rng.uniform(-1, 1, wshape[0]).astype(F32)
    model, _ = _qdq_model("conv", xs, w, bias, np.uint8, 37, attrs, relu=True)
    x = _inputs(rng, xs)
    outs = {}
    for env in ("1", "0"):
        monkeypatch.setenv("KAIWU_INT8_NHWC", env)
        sess = engine.Session(model.SerializeToString(), threads=2)
        assert ("layout_nhwc_int8: 1" in sess.describe()) == (env == "1"), sess.describe()
        outs[env] = sess.run({"x": x})["y"]
    np.testing.assert_array_equal(outs["1"], outs["0"])
