"""Quantization ops against onnxruntime (CPU EP) and numpy references.

QuantizeLinear / DequantizeLinear (per tensor, per axis, opset 21 blocked; int8, uint8,
int32 DQ inputs; with and without zero points), DynamicQuantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv, on fresh random data from the per-test rng.

Tolerances: integer outputs of the integer ops (MatMulInteger, ConvInteger) and of
QuantizeLinear / DynamicQuantizeLinear are exact (round half to even is tested on exact
ties); DequantizeLinear float outputs within 1 float32 ulp-scale (rtol 1e-6); the QLinear
ops' quantized outputs within one quantization step (|diff| <= 1: the requantize multiplier
a_scale * b_scale / y_scale may round differently in float32), and at least 99% exact.

Integer products are checked exactly against numpy/torch int64 references, and against
onnxruntime on operands it computes exactly: on a CPU without AVX-512 VNNI onnxruntime's
u8 x s8 kernels use vpmaddubsw, whose int16 pair sums saturate when both products of a pair
are large (|a0*b0 + a1*b1| > 32767), so the onnxruntime comparisons draw int8 operands
from [-64, 64).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from helpers import make_model, rand, run_kaiwu, run_ort

F32, U8, I8, I32 = np.float32, np.uint8, np.int8, np.int32


def _range(dt):
    return (0, 255) if np.dtype(dt) == U8 else (-128, 127)


def _both(engine, model, feeds):
    ref = run_ort(model, feeds)
    got = run_kaiwu(engine, model, feeds)
    return got, ref


def _assert_within_one_step(got, ref, name="y"):
    g, r = np.asarray(got[name]), np.asarray(ref[name])
    assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, r.dtype, g.shape, r.shape)
    d = np.abs(g.astype(np.int64) - r.astype(np.int64))
    assert d.max() <= 1, f"max diff {d.max()} steps"
    assert (d == 0).mean() >= 0.99, f"only {(d == 0).mean():.4f} exact"


def _q_ref(x, scale, zp, dt, axis=None):
    lo, hi = _range(dt)
    s = np.asarray(scale, np.float32)
    z = np.asarray(zp).astype(np.float32)
    if axis is not None and s.ndim == 1:
        shape = [1] * x.ndim
        shape[axis] = -1
        s, z = s.reshape(shape), z.reshape(shape)
    return np.clip(np.rint(x / s) + z, lo, hi).astype(dt)


# ----------------------------------------------------------------------------- Q / DQ
@pytest.mark.parametrize("dt", [U8, I8])
@pytest.mark.parametrize("opset", [13, 21])
def test_quantize_per_tensor_ties_and_saturation(engine, rng, dt, opset):
    scale = np.float32(0.25)
    zp = np.array(3 if dt == U8 else -2, dt)
    ties = (np.arange(-40, 40) + 0.5).astype(F32) * scale  # exact halves: round to even
    x = np.concatenate([ties, rand(rng, (200,)) * 30, np.array([1e9, -1e9, 1e30], F32)]).astype(F32)
    model = make_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
                       [("x", F32, [x.size])], ["y"], initializers={"s": scale, "z": zp}, opset=opset)
    got, ref = _both(engine, model, {"x": x})
    np.testing.assert_array_equal(got["y"], ref["y"])
    np.testing.assert_array_equal(got["y"], _q_ref(x, scale, zp, dt))


def test_quantize_without_zero_point_is_uint8(engine, rng):
    x = rand(rng, (5, 7)) * 3
    model = make_model([helper.make_node("QuantizeLinear", ["x", "s"], ["y"])], [("x", F32, [5, 7])],
                       ["y"], initializers={"s": np.float32(0.05)}, opset=13)
    got, ref = _both(engine, model, {"x": x})
    assert got["y"].dtype == U8
    np.testing.assert_array_equal(got["y"], ref["y"])


@pytest.mark.parametrize("dt", [U8, I8])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_quantize_dequantize_per_axis(engine, rng, dt, axis):
    shape = (3, 5, 4)
    n = shape[axis]
    x = rand(rng, shape) * 4
    s = rng.uniform(0.01, 0.1, n).astype(F32)
    lo, hi = _range(dt)
    z = rng.integers(lo // 4, hi // 4, n).astype(dt)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=axis),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=axis)]
    model = make_model(nodes, [("x", F32, list(shape))], ["q", "y"], initializers={"s": s, "z": z},
                       opset=13)
    got, ref = _both(engine, model, {"x": x})
    np.testing.assert_array_equal(got["q"], ref["q"])
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-6, atol=0)


@pytest.mark.parametrize("dt", [U8, I8, I32])
def test_dequantize_per_tensor(engine, rng, dt):
    lo, hi = (-1000, 1000) if dt == I32 else _range(dt)
    x = rng.integers(lo, hi + 1, (6, 9)).astype(dt)
    zp = np.array(0 if dt == I32 else (lo + hi) // 3, dt)
    model = make_model([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])],
                       [("x", dt, [6, 9])], ["y"], initializers={"s": np.float32(0.037), "z": zp})
    got, ref = _both(engine, model, {"x": x})
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-6, atol=0)


@pytest.mark.parametrize("axis,block", [(1, 4), (0, 2), (1, 3)])
def test_blocked_quantize_dequantize_opset21(engine, rng, axis, block):
    """block_size (opset 21): the scale has the input's shape with ceil(len / block) along axis;
    checked against a numpy reference (and onnxruntime where it runs the blocked form)."""
    x = rand(rng, (4, 10)) * 2
    sshape = list(x.shape)
    sshape[axis] = -(-x.shape[axis] // block)
    s = rng.uniform(0.01, 0.05, sshape).astype(F32)
    z = rng.integers(-20, 20, sshape).astype(I8)
    rep = lambda a: np.repeat(a, block, axis=axis).take(range(x.shape[axis]), axis=axis)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=axis, block_size=block),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=axis, block_size=block)]
    model = make_model(nodes, [("x", F32, [4, 10])], ["q", "y"], initializers={"s": s, "z": z}, opset=21)
    got = run_kaiwu(engine, model, {"x": x})
    want_q = np.clip(np.rint(x / rep(s)) + rep(z), -128, 127).astype(I8)
    np.testing.assert_array_equal(got["q"], want_q)
    np.testing.assert_allclose(got["y"], (want_q.astype(F32) - rep(z)) * rep(s), rtol=1e-6)


@pytest.mark.parametrize("kind", ["normal", "positive", "zeros"])
def test_dynamic_quantize_linear(engine, rng, kind):
    x = {"normal": rand(rng, (7, 33)) * 2, "positive": rng.uniform(0.5, 3, (7, 33)).astype(F32),
         "zeros": np.zeros((7, 33), F32)}[kind]
    model = make_model([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
                       [("x", F32, [7, 33])], ["y", "s", "z"])
    got, ref = _both(engine, model, {"x": x})
    np.testing.assert_array_equal(got["z"], ref["z"])
    np.testing.assert_allclose(got["s"], ref["s"], rtol=1e-7)
    np.testing.assert_array_equal(got["y"], ref["y"])


# ----------------------------------------------------------------------------- integer ops
MATMUL_CASES = [  # a shape, b shape, a dtype, b dtype, zero points ("none" | "scalar" | "vector")
    ((5, 33), (33, 17), U8, I8, "scalar"),
    ((1, 64), (64, 256), U8, I8, "vector"),
    ((2, 3, 7, 20), (20, 9), U8, U8, "scalar"),
    ((4, 6, 11), (4, 11, 5), I8, I8, "none"),
    ((13, 300), (300, 40), U8, I8, "vector"),
]


@pytest.mark.parametrize("ashape,bshape,adt,bdt,zps", MATMUL_CASES)
def test_matmul_integer(engine, rng, ashape, bshape, adt, bdt, zps):
    a = rng.integers(*_range(adt), ashape, endpoint=True).astype(adt)
    b = rng.integers(*_range(bdt), bshape, endpoint=True).astype(bdt)
    if bdt == I8 and adt == U8:
        b = (b // 2).astype(I8)  # onnxruntime exact (see the module doc); full range vs numpy below
    inits, names = {}, ["a", "b"]
    if zps != "none":
        inits["az"] = rng.integers(*_range(adt), (), endpoint=True).astype(adt)
        bz_shape = (bshape[-1],) if zps == "vector" else ()
        inits["bz"] = rng.integers(*_range(bdt), bz_shape, endpoint=True).astype(bdt)
        names += ["az", "bz"]
    model = make_model([helper.make_node("MatMulInteger", names, ["y"])],
                       [("a", adt, list(ashape)), ("b", bdt, list(bshape))], ["y"], initializers=inits)
    got, ref = _both(engine, model, {"a": a, "b": b})
    np.testing.assert_array_equal(got["y"], ref["y"])
    # full-range operands against int64 numpy
    b = rng.integers(*_range(bdt), bshape, endpoint=True).astype(bdt)
    got = run_kaiwu(engine, model, {"a": a, "b": b})
    az = inits.get("az", np.array(0)).astype(np.int64)
    bz = inits.get("bz", np.array(0)).astype(np.int64)
    want = np.matmul(a.astype(np.int64) - az, b.astype(np.int64) - bz)
    np.testing.assert_array_equal(got["y"], want.astype(I32))


def _conv_ref(x, w, xz, wz, attrs):
    """ConvInteger in float64 torch (exact: |values| < 2^53)."""
    import torch
    import torch.nn.functional as F
    nd = x.ndim - 2
    pads = attrs.get("pads", [0] * 2 * nd)
    xs = torch.from_numpy(x.astype(np.float64) - float(xz))
    # asymmetric pads: pad explicitly (F.pad wants last dim first)
    fp = []
    for d in reversed(range(nd)):
        fp += [pads[d], pads[d + nd]]
    xs = F.pad(xs, fp)
    ws = torch.from_numpy(w.astype(np.float64) - np.asarray(wz, np.float64).reshape((-1,) + (1,) * (nd + 1)))
    conv = F.conv2d if nd == 2 else F.conv1d
    y = conv(xs, ws, stride=attrs.get("strides", 1), dilation=attrs.get("dilations", 1),
             groups=attrs.get("group", 1))
    return y.numpy().astype(np.int64)


CONV_CASES = [  # x shape, w shape, attrs, w_zp per channel
    ((2, 4, 9, 9), (6, 4, 3, 3), dict(pads=[1, 1, 1, 1]), True),
    ((1, 4, 84, 84), (32, 4, 8, 8), dict(strides=[4, 4]), False),
    ((3, 6, 7, 8), (4, 3, 2, 3), dict(group=2, strides=[2, 1], pads=[0, 1, 1, 0], dilations=[1, 2]), True),
    ((2, 5, 11), (3, 5, 3), dict(pads=[2, 0]), False),
]


@pytest.mark.parametrize("xs,ws,attrs,per", CONV_CASES)
def test_conv_integer(engine, rng, xs, ws, attrs, per):
    x = rng.integers(0, 256, xs).astype(U8)
    wdt = U8 if per else I8
    w = rng.integers(-64, 64, ws).astype(I8) if wdt == I8 else rng.integers(0, 256, ws).astype(U8)
    xz = np.array(rng.integers(0, 256), U8)
    # onnxruntime's ConvInteger takes a scalar w_zero_point: it is the oracle there
    wz = np.array(rng.integers(-30, 30) if wdt == I8 else rng.integers(0, 256), wdt)
    model = make_model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)],
                       [("x", U8, list(xs)), ("w", wdt, list(ws))], ["y"],
                       initializers={"xz": xz, "wz": wz})
    got, ref = _both(engine, model, {"x": x, "w": w})
    np.testing.assert_array_equal(got["y"], ref["y"])
    # full range, and a per-channel w_zero_point, against float64 torch
    w = rng.integers(*_range(wdt), ws, endpoint=True).astype(wdt)
    wzv = rng.integers(*_range(wdt), ws[0], endpoint=True).astype(wdt)
    model = make_model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)],
                       [("x", U8, list(xs)), ("w", wdt, list(ws))], ["y"],
                       initializers={"xz": xz, "wz": wzv})
    got = run_kaiwu(engine, model, {"x": x, "w": w})
    np.testing.assert_array_equal(got["y"], _conv_ref(x, w, xz, wzv, attrs).astype(I32))


@pytest.mark.parametrize("bdt", [I8, U8])
@pytest.mark.parametrize("per_col", [False, True])
def test_qlinear_matmul(engine, rng, bdt, per_col):
    m, k, n = 9, 70, 23
    a = rng.integers(0, 256, (m, k)).astype(U8)
    b = rng.integers(-64, 64, (k, n)).astype(bdt) if bdt == I8 else rng.integers(0, 256, (k, n)).astype(U8)
    nb = n if per_col else 1
    inits = {"as": np.float32(0.02), "az": np.array(121, U8),
             "bs": rng.uniform(0.002, 0.01, nb).astype(F32).reshape(() if nb == 1 else (n,)),
             "bz": (np.zeros(nb, bdt) + (0 if bdt == I8 else 128)).reshape(() if nb == 1 else (n,)),
             "ys": np.float32(0.9), "yz": np.array(100, U8)}
    model = make_model([helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])],
                       [("a", U8, [m, k]), ("b", bdt, [k, n])], ["y"], initializers=inits)
    got, ref = _both(engine, model, {"a": a, "b": b})
    _assert_within_one_step(got, ref)


@pytest.mark.parametrize("xs,ws,attrs,per", CONV_CASES[:3])
def test_qlinear_conv(engine, rng, xs, ws, attrs, per):
    x = rng.integers(0, 256, xs).astype(U8)
    w = rng.integers(-64, 64, ws).astype(I8)
    m = ws[0]
    fan_in = np.prod(ws[1:])
    inits = {"xs": np.float32(0.01), "xz": np.array(128, U8),
             "ws": (rng.uniform(0.5, 1.5, m) / fan_in).astype(F32) if per else np.float32(1.0 / fan_in),
             "wz": np.zeros(m, I8) if per else np.array(0, I8),
             "ys": np.float32(0.004), "yz": np.array(120, U8),
             "b": rng.integers(-5000, 5000, m).astype(I32)}
    model = make_model([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                                         ["y"], **attrs)],
                       [("x", U8, list(xs)), ("w", I8, list(ws))], ["y"], initializers=inits)
    got, ref = _both(engine, model, {"x": x, "w": w})
    _assert_within_one_step(got, ref)


def test_bad_quant_inputs_name_the_node(engine):
    """A per-axis scale of the wrong size is an error naming the node (found when the plan for
    the input shapes is built, so the engine raises InputError naming the shapes too)."""
    model = make_model([helper.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=1, name="dq_bad")],
                       [("x", U8, [2, 3])], [("y", F32, [2, 3])], initializers={"s": np.ones(4, F32)},
                       check=False)
    with pytest.raises(engine.InputError, match="dq_bad.*per-axis scale must be 1-D of size 3"):
        run_kaiwu(engine, model, {"x": np.zeros((2, 3), U8)})
