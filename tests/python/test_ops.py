"""Per-op conformance of kaiwu_infer against onnxruntime (CPU EP).

Every model is built with onnx.helper (opset 17 unless the case says 13/18/20/21), fed
fresh random data from the per-test seeded rng (see conftest.rng), and every output of
kaiwu_infer is compared with onnxruntime's:
  float32: rtol=1e-4, atol=1e-5 (helpers.F32_*), except where a case states why it needs
           more (contractions: atol grows with sqrt(K); RNNs: error accumulates over steps);
  ints/bools: exact; output dtype and shape: exact.
"""

from __future__ import annotations


import numpy as np
import pytest
from onnx import TensorProto, helper

from helpers import NP2ONNX, contraction_tol, make_model, rand, run_kaiwu, single_op_model

F32 = np.float32
I64 = np.int64
I32 = np.int32
U8 = np.uint8
BOOL = np.bool_


def _ids(vals):
    return [str(v).replace(" ", "") for v in vals]


# ===================================================================================
# Gemm / MatMul
# ===================================================================================
GEMM_CASES = [
    # M, K, N, transA, transB, alpha, beta, C shape ("none" | "N" | "1N" | "MN" | "M1" | "scalar")
    (1, 64, 256, 0, 1, 1.0, 1.0, "N"),
    (7, 33, 17, 0, 0, 1.0, 1.0, "MN"),
    (5, 16, 9, 1, 0, 0.5, 2.0, "1N"),
    (4, 8, 3, 1, 1, 1.5, 0.25, "M1"),
    (3, 20, 6, 0, 1, 1.0, 1.0, "none"),
    (6, 12, 10, 0, 0, 1.0, -1.0, "scalar"),
    (256, 256, 18, 0, 1, 1.0, 1.0, "N"),
]


@pytest.mark.parametrize("opset", [13, 17, 21])
@pytest.mark.parametrize("case", GEMM_CASES, ids=_ids(GEMM_CASES))
def test_gemm(check, rng, case, opset):
    M, K, N, ta, tb, alpha, beta, cshape = case
    a_shape = (K, M) if ta else (M, K)
    b_shape = (N, K) if tb else (K, N)
    c_shapes = {"N": (N,), "1N": (1, N), "MN": (M, N), "M1": (M, 1), "scalar": ()}
    inits = {"B": rand(rng, b_shape)}
    names = ["A", "B"]
    if cshape != "none":
        inits["C"] = rand(rng, c_shapes[cshape])
        names.append("C")
    # A's batch dim is symbolic when it is the row dim
    a_decl = ("M", K) if not ta else a_shape
    m = single_op_model("Gemm", [("A", F32, a_decl)], input_names=names, initializers=inits,
                        opset=opset, alpha=alpha, beta=beta, transA=ta, transB=tb)
    check(m, {"A": rand(rng, a_shape)}, **contraction_tol(K, scale=max(1.0, alpha)))


def test_gemm_b_as_input(check, rng):
    m = single_op_model("Gemm", [("A", F32, (4, 6)), ("B", F32, (5, 6)), ("C", F32, (5,))],
                        transB=1)
    check(m, {"A": rand(rng, (4, 6)), "B": rand(rng, (5, 6)), "C": rand(rng, (5,))})


MATMUL_CASES = [
    ((3, 4), (4, 5)),
    ((7, 64), (64, 32)),
    ((2, 3, 4, 5), (2, 3, 5, 6)),          # batched
    ((2, 1, 4, 5), (3, 5, 6)),             # broadcast batch dims
    ((4, 5), (2, 5, 3)),                   # 2-D x 3-D
    ((2, 3, 4), (4, 6)),                   # 3-D x 2-D (linear layer over a sequence)
    ((5,), (5, 3)),                        # 1-D lhs
    ((2, 3, 4), (4,)),                     # 1-D rhs
    ((6,), (6,)),                          # dot -> scalar
    ((1, 8, 16, 32), (1, 8, 32, 16)),      # attention-shaped
]


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("shapes", MATMUL_CASES, ids=_ids(MATMUL_CASES))
def test_matmul(check, rng, shapes, opset):
    sa, sb = shapes
    m = single_op_model("MatMul", [("a", F32, sa), ("b", F32, sb)], opset=opset)
    check(m, {"a": rand(rng, sa), "b": rand(rng, sb)}, **contraction_tol(sa[-1]))


def test_matmul_weight_initializer_dynamic_batch(check, rng):
    w = rand(rng, (48, 20))
    m = single_op_model("MatMul", [("x", F32, ("batch", "seq", 48))], input_names=["x", "W"],
                        initializers={"W": w})
    for b, t in [(1, 1), (3, 5)]:
        check(m, {"x": rand(rng, (b, t, 48))}, **contraction_tol(48))


def test_matmul_int(check, rng):
    m = single_op_model("MatMul", [("a", I64, (3, 4)), ("b", I64, (4, 2))])
    check(m, {"a": rand(rng, (3, 4), I64), "b": rand(rng, (4, 2), I64)})


# ===================================================================================
# Conv
# ===================================================================================
# (N, C, H, W, M, kernel, strides, pads, dilations, group, auto_pad, bias)
CONV2D_CASES = [
    (1, 3, 8, 8, 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, None, True),
    (2, 4, 84, 84, 32, (8, 8), (4, 4), (0, 0, 0, 0), (1, 1), 1, None, True),   # Atari conv1
    (2, 32, 20, 20, 64, (4, 4), (2, 2), (0, 0, 0, 0), (1, 1), 1, None, True),  # Atari conv2
    (3, 6, 9, 7, 4, (3, 2), (2, 1), (1, 0, 2, 1), (1, 1), 1, None, False),     # asymmetric pads
    (1, 4, 11, 11, 6, (3, 3), (1, 1), (0, 0, 0, 0), (2, 2), 1, None, True),    # dilation
    (2, 8, 10, 10, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8, None, True),    # depthwise
    (1, 6, 9, 9, 12, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 6, None, False),    # depthwise x2
    (2, 8, 7, 7, 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2, None, True),      # grouped
    (1, 5, 9, 10, 7, (3, 3), (2, 2), None, (1, 1), 1, "SAME_UPPER", True),
    (1, 5, 9, 10, 7, (4, 4), (2, 3), None, (1, 1), 1, "SAME_LOWER", True),
    (2, 3, 10, 9, 4, (3, 3), (2, 2), None, (1, 1), 1, "VALID", False),
    (4, 16, 16, 16, 16, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, None, True),  # 1x1
    (1, 16, 64, 64, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, None, True),  # IMPALA-sized
]


@pytest.mark.parametrize("opset", [17])
@pytest.mark.parametrize("case", CONV2D_CASES, ids=[f"c{i}" for i in range(len(CONV2D_CASES))])
def test_conv2d(check, rng, case, opset):
    N, C, H, W, M, k, s, p, d, g, auto_pad, bias = case
    w = rand(rng, (M, C // g) + tuple(k)) * np.float32(1.0 / np.sqrt(C // g * k[0] * k[1]))
    inits = {"W": w.astype(F32)}
    names = ["X", "W"]
    if bias:
        inits["B"] = rand(rng, (M,))
        names.append("B")
    attrs = dict(kernel_shape=list(k), strides=list(s), dilations=list(d), group=g)
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    else:
        attrs["pads"] = list(p)
    m = single_op_model("Conv", [("X", F32, ("N", C, H, W))], input_names=names,
                        initializers=inits, opset=opset, **attrs)
    check(m, {"X": rand(rng, (N, C, H, W))}, **contraction_tol(C // g * k[0] * k[1]))


# Stride-1 2-D convs with output rows of 16+ pixels, or as wide as their input
# (any width): the direct kernel on AVX-512 machines (row tails, strips across
# rows and images, pads past the kernel, channel counts off the 8-row tile,
# 1..81 taps; flat segments of 16 pixels that span several rows).
# (N, C, H, W, M, kernel, pads)
CONV2D_DIRECT_CASES = [
    (3, 5, 9, 21, 11, (3, 3), (1, 1, 1, 1)),     # 21 = 16 + 5 lanes; M = 8 + 3
    (2, 1, 4, 16, 3, (3, 3), (0, 2, 3, 0)),      # asymmetric pads, whole rows in padding
    (1, 7, 6, 33, 13, (5, 5), (2, 2, 2, 2)),
    (2, 16, 5, 40, 9, (1, 4), (0, 1, 0, 2)),
    (1, 3, 12, 17, 8, (7, 7), (3, 3, 3, 3)),     # 49 taps
    (4, 2, 1, 48, 16, (1, 3), (0, 0, 0, 0)),     # 1-row planes, 3 segments per row
    # W == OW < 16: flat segments across rows
    (3, 32, 8, 8, 32, (3, 3), (1, 1, 1, 1)),     # IMPALA's last stage: 2 rows per segment
    (2, 5, 7, 5, 11, (3, 3), (1, 1, 1, 1)),      # segments start mid-row; 35 = 2 x 16 + 3
    (2, 3, 6, 9, 4, (3, 3), (0, 2, 2, 0)),       # asymmetric pads, W == OW
    (5, 4, 1, 1, 9, (3, 3), (1, 1, 1, 1)),       # 1x1 planes: 8 of 9 taps in the padding
    (2, 6, 9, 9, 8, (9, 9), (4, 4, 4, 4)),       # 81 taps
    (3, 2, 4, 12, 5, (1, 1), (0, 0, 0, 0)),      # pointwise, 48 = 3 x 16
]


@pytest.mark.parametrize("act", [None, "Relu", "LeakyRelu", "Clip", "Sigmoid"])
@pytest.mark.parametrize("case", CONV2D_DIRECT_CASES, ids=[f"d{i}" for i in range(len(CONV2D_DIRECT_CASES))])
def test_conv2d_stride1_wide_rows(check, rng, case, act):
    N, C, H, W, M, k, p = case
    w = rand(rng, (M, C) + k) * np.float32(1.0 / np.sqrt(C * k[0] * k[1]))
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["y" if act else "Y"], kernel_shape=list(k), pads=list(p))]
    if act:  # fused into the conv by the optimizer
        attrs = {"LeakyRelu": {"alpha": 0.1}}.get(act, {})
        ins = ["y", "lo", "hi"] if act == "Clip" else ["y"]
        nodes.append(helper.make_node(act, ins, ["Y"], **attrs))
    m = make_model(nodes, [("X", F32, ("N", C, H, W))], ["Y"],
                   initializers={"W": w.astype(F32), "B": rand(rng, (M,)),
                                 "lo": np.array(-0.5, F32), "hi": np.array(0.5, F32)})
    check(m, {"X": rand(rng, (N, C, H, W))}, **contraction_tol(C * k[0] * k[1]))


@pytest.mark.parametrize("opset", [13, 21])
def test_conv2d_opsets(check, rng, opset):
    m = single_op_model("Conv", [("X", F32, (2, 3, 7, 7)), ("W", F32, (5, 3, 3, 3)), ("B", F32, (5,))],
                        opset=opset, pads=[1, 1, 1, 1], strides=[2, 2])
    check(m, {"X": rand(rng, (2, 3, 7, 7)), "W": rand(rng, (5, 3, 3, 3)), "B": rand(rng, (5,))},
          **contraction_tol(27))


def test_conv2d_default_attrs(check, rng):
    """No kernel_shape/strides/pads attributes: all inferred from W / defaults."""
    m = single_op_model("Conv", [("X", F32, (1, 2, 6, 5)), ("W", F32, (3, 2, 2, 3))])
    check(m, {"X": rand(rng, (1, 2, 6, 5)), "W": rand(rng, (3, 2, 2, 3))})


# (N, C, L, M, k, stride, pads, dilation, group, auto_pad)
CONV1D_CASES = [
    (2, 4, 16, 8, 3, 1, (1, 1), 1, 1, None),
    (1, 6, 20, 6, 5, 2, (2, 1), 1, 3, None),
    (3, 8, 13, 8, 3, 1, (0, 0), 2, 8, None),   # depthwise dilated
    (2, 3, 11, 5, 4, 3, None, 1, 1, "SAME_UPPER"),
    (2, 3, 11, 5, 4, 2, None, 1, 1, "VALID"),
]


@pytest.mark.parametrize("case", CONV1D_CASES, ids=[f"c{i}" for i in range(len(CONV1D_CASES))])
def test_conv1d(check, rng, case):
    N, C, L, M, k, s, p, d, g, auto_pad = case
    attrs = dict(kernel_shape=[k], strides=[s], dilations=[d], group=g)
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    else:
        attrs["pads"] = list(p)
    m = single_op_model("Conv", [("X", F32, (N, C, L))], input_names=["X", "W", "B"],
                        initializers={"W": rand(rng, (M, C // g, k)), "B": rand(rng, (M,))}, **attrs)
    check(m, {"X": rand(rng, (N, C, L))}, **contraction_tol(C // g * k))


# ===================================================================================
# Pooling
# ===================================================================================
# (shape, kernel, strides, pads, auto_pad, ceil_mode, extra)
POOL_CASES = [
    ((1, 3, 8, 8), (2, 2), (2, 2), (0, 0, 0, 0), None, 0),
    ((2, 16, 64, 64), (3, 3), (2, 2), (1, 1, 1, 1), None, 0),      # IMPALA maxpool
    ((1, 2, 9, 9), (3, 3), (2, 2), (0, 0, 0, 0), None, 1),         # ceil_mode
    ((2, 3, 7, 10), (3, 2), (1, 2), (1, 0, 1, 1), None, 0),        # asymmetric
    ((1, 4, 9, 8), (3, 3), (2, 2), None, "SAME_UPPER", 0),
    ((1, 4, 9, 8), (2, 3), (2, 2), None, "SAME_LOWER", 0),
    ((1, 4, 9, 8), (3, 3), (2, 2), None, "VALID", 0),
    ((2, 5, 17), (3,), (2,), (1, 1), None, 0),                     # 1-D
]


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("case", POOL_CASES, ids=[f"c{i}" for i in range(len(POOL_CASES))])
def test_pool(check, rng, op, case):
    shape, k, s, p, auto_pad, ceil_mode = case
    attrs = dict(kernel_shape=list(k), strides=list(s), ceil_mode=ceil_mode)
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    else:
        attrs["pads"] = list(p)
    m = single_op_model(op, [("X", F32, shape)], **attrs)
    check(m, {"X": rand(rng, shape)})


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool_count_include_pad(check, rng, count_include_pad):
    m = single_op_model("AveragePool", [("X", F32, (2, 3, 7, 7))], kernel_shape=[3, 3],
                        pads=[1, 1, 1, 1], strides=[2, 2], count_include_pad=count_include_pad)
    check(m, {"X": rand(rng, (2, 3, 7, 7))})


def test_maxpool_dilations(check, rng):
    m = single_op_model("MaxPool", [("X", F32, (1, 3, 10, 10))], kernel_shape=[2, 2],
                        dilations=[2, 2], strides=[1, 1])
    check(m, {"X": rand(rng, (1, 3, 10, 10))})


# float32 2-D MaxPool row kernel: widths around the vector lengths (8, 16), every
# kernel/stride pairing, pads with begin != end, ceil_mode. The data is mostly
# negative, so padding that were read as 0 rather than -inf would win at the edges.
MAXPOOL_WIDTHS = [5, 15, 16, 17, 31, 33, 64, 65, 100]
MAXPOOL_PADS = [(0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 1, 0), (2, 0, 1, 2), (1, 2, 2, 1)]


@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("kernel", [2, 3, 4])
@pytest.mark.parametrize("W", MAXPOOL_WIDTHS)
def test_maxpool_row_edges(check, rng, W, kernel, stride):
    H = 6 + W % 4
    shape = (2, 3, H, W)
    for pads in MAXPOOL_PADS:
        pads = [min(p, kernel - 1) for p in pads]  # onnxruntime needs pads < kernel
        for ceil_mode in (0, 1):
            m = single_op_model("MaxPool", [("X", F32, shape)], kernel_shape=[kernel, kernel],
                                strides=[stride, stride], pads=pads, ceil_mode=ceil_mode)
            check(m, {"X": rand(rng, shape) - 2}, rtol=0, atol=0,
                  context=f"pads={pads} ceil_mode={ceil_mode}")


@pytest.mark.parametrize("case", [
    ((2, 3, 9, 33), (3, 2), (2, 1), (1, 0, 0, 1)),   # kernel and stride differ per dim
    ((1, 4, 7, 40), (2, 5), (1, 2), (0, 2, 1, 4)),   # stride-2 window of 5 taps
    ((1, 2, 5, 26), (1, 3), (3, 3), (0, 1, 0, 0)),
    ((3, 2, 33), (3,), (2,), (1, 1)),                # 1-D
    ((1, 3, 70), (4,), (1,), (2, 3)),                # 1-D, stride 1
], ids=lambda c: "x".join(map(str, c[0])) + f"_k{c[1]}_s{c[2]}")
def test_maxpool_mixed_geometry(check, rng, case):
    shape, k, s, pads = case
    m = single_op_model("MaxPool", [("X", F32, shape)], kernel_shape=list(k), strides=list(s),
                        pads=list(pads))
    check(m, {"X": rand(rng, shape) - 2}, rtol=0, atol=0, threads=2)


@pytest.mark.parametrize("W", [4094, 4100])  # row buffer of 4096: the last to fit, the first not
def test_maxpool_long_rows(check, rng, W):
    shape = (1, 2, 3, W)
    m = single_op_model("MaxPool", [("X", F32, shape)], kernel_shape=[3, 3], strides=[2, 2],
                        pads=[1, 1, 1, 1])
    check(m, {"X": rand(rng, shape) - 2}, rtol=0, atol=0)


def _maxpool3x3s2p1(x):
    """MaxPool 3x3, stride 2, pads 1 in numpy; NaN inputs and the padding never win (fmax)."""
    padded = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=np.nan)
    win = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    return np.fmax.reduce(win.reshape(win.shape[:4] + (9,)), axis=-1)


def _maxpool3x3s2p1_model(x):
    return single_op_model("MaxPool", [("X", x.dtype.type, x.shape)], kernel_shape=[3, 3],
                           strides=[2, 2], pads=[1, 1, 1, 1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_maxpool_negative_infinity(engine, rng, dtype):
    """A window of -inf inputs (and padding) gives -inf. (onnxruntime gives -FLT_MAX for
    some such windows and -inf for others, so the reference is numpy.)"""
    x = rand(rng, (1, 2, 8, 20), dtype)
    x[0, 0, :3, :5] = -np.inf
    x[0, 1, 4:, :] = -np.inf
    got = run_kaiwu(engine, _maxpool3x3s2p1_model(x), {"X": x})["y0"]
    want = _maxpool3x3s2p1(x)
    assert np.isneginf(want).sum() >= 10
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_maxpool_skips_nan(engine, rng, dtype):
    """NaN inputs never win a window. (onnxruntime's result depends on the tap order, so
    the reference is numpy.)"""
    x = rand(rng, (2, 3, 10, 37), dtype) - 2
    x[rng.random(x.shape) < 0.2] = np.nan
    got = run_kaiwu(engine, _maxpool3x3s2p1_model(x), {"X": x})["y0"]
    want = _maxpool3x3s2p1(x)
    assert not np.isnan(want).any()
    np.testing.assert_array_equal(got, want)


def test_maxpool_indices(check, rng):
    m = single_op_model("MaxPool", [("X", F32, (2, 3, 6, 6))], n_out=2, kernel_shape=[2, 2],
                        strides=[2, 2])
    check(m, {"X": rand(rng, (2, 3, 6, 6))})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 8, 5, 7), (1, 32, 11, 11), (3, 4, 9), (1, 3, 2, 3, 4)],
                         ids=_ids([(2, 8, 5, 7), (1, 32, 11, 11), (3, 4, 9), (1, 3, 2, 3, 4)]))
def test_global_pool(check, rng, op, shape):
    m = single_op_model(op, [("X", F32, ("N",) + shape[1:])])
    check(m, {"X": rand(rng, shape)})


# ===================================================================================
# Normalization
# ===================================================================================
@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("shape", [(2, 3, 5, 5), (4, 7), (3, 6, 10)], ids=_ids([(2, 3, 5, 5), (4, 7), (3, 6, 10)]))
def test_batchnorm(check, rng, shape, opset):
    C = shape[1]
    inits = {"scale": rand(rng, (C,)), "bias": rand(rng, (C,)), "mean": rand(rng, (C,)),
             "var": rand(rng, (C,), positive=True)}
    m = single_op_model("BatchNormalization", [("X", F32, ("N",) + shape[1:])],
                        input_names=["X", "scale", "bias", "mean", "var"], initializers=inits,
                        opset=opset, epsilon=1e-3)
    check(m, {"X": rand(rng, shape)})


LN_CASES = [((4, 16), -1, True), ((2, 5, 32), -1, True), ((2, 5, 6), -2, True),
            ((3, 7, 64), -1, False), ((2, 3, 4, 5), 1, True)]


@pytest.mark.parametrize("case", LN_CASES, ids=_ids(LN_CASES))
def test_layernorm(check, rng, case):
    shape, axis, with_bias = case
    nshape = shape[axis:]
    inits = {"scale": rand(rng, nshape)}
    names = ["X", "scale"]
    if with_bias:
        inits["bias"] = rand(rng, nshape)
        names.append("bias")
    m = single_op_model("LayerNormalization", [("X", F32, shape)], input_names=names,
                        initializers=inits, axis=axis, epsilon=1e-5)
    x = rand(rng, shape) * F32(3.0) + F32(1.0)
    check(m, {"X": x})


def test_layernorm_dynamic_batch_opset21(check, rng):
    m = single_op_model("LayerNormalization", [("X", F32, ("B", 24))], input_names=["X", "s", "b"],
                        initializers={"s": rand(rng, (24,)), "b": rand(rng, (24,))}, opset=21)
    check(m, {"X": rand(rng, (5, 24))})


# ===================================================================================
# LSTM / GRU
# ===================================================================================
# Recurrent outputs are compared with atol=3e-5: the error of each step's gate
# pre-activations (sums over I+H products) feeds into the next step, so the absolute
# error grows with the number of steps; outputs are bounded in (-1, 1) by tanh/sigmoid.
RNN_TOL = dict(rtol=1e-4, atol=3e-5)
# (direction, seq_len, batch, input_size, hidden, with_bias, with_initial)
RNN_CASES = [
    ("forward", 1, 1, 8, 16, True, True),
    ("forward", 6, 3, 10, 12, True, False),
    ("reverse", 5, 2, 7, 9, True, True),
    ("bidirectional", 4, 3, 6, 8, True, True),
    ("bidirectional", 3, 1, 5, 4, False, False),
    ("forward", 8, 4, 32, 64, True, True),
]


def _rnn_inits(rng, gates, case, with_c):
    direction, T, Bt, I, H, with_bias, with_init = case
    nd = 2 if direction == "bidirectional" else 1
    sc = F32(1.0 / np.sqrt(H))
    inits = {"W": (rand(rng, (nd, gates * H, I)) * sc).astype(F32),
             "R": (rand(rng, (nd, gates * H, H)) * sc).astype(F32)}
    names = ["X", "W", "R"]
    if with_bias:
        inits["B"] = (rand(rng, (nd, 2 * gates * H)) * sc).astype(F32)
        names.append("B")
    else:
        names.append("")
    graph_inputs = [("X", F32, (T, "batch", I))]
    feeds = {"X": rand(rng, (T, Bt, I))}
    if with_init:
        names += ["", "initial_h"]
        graph_inputs.append(("initial_h", F32, (nd, "batch", H)))
        feeds["initial_h"] = (rand(rng, (nd, Bt, H)) * F32(0.5)).astype(F32)
        if with_c:
            names.append("initial_c")
            graph_inputs.append(("initial_c", F32, (nd, "batch", H)))
            feeds["initial_c"] = rand(rng, (nd, Bt, H))
    return inits, names, graph_inputs, feeds


@pytest.mark.parametrize("case", RNN_CASES, ids=_ids(RNN_CASES))
def test_lstm(check, rng, case):
    H = case[4]
    inits, names, graph_inputs, feeds = _rnn_inits(rng, 4, case, with_c=True)
    m = single_op_model("LSTM", graph_inputs, input_names=names, initializers=inits,
                        output_names=["Y", "Y_h", "Y_c"], hidden_size=H, direction=case[0])
    check(m, feeds, **RNN_TOL)


@pytest.mark.parametrize("case", RNN_CASES[:4], ids=_ids(RNN_CASES[:4]))
def test_lstm_opset13_only_yh(check, rng, case):
    """Only Y_h requested (Y and Y_c omitted) at opset 13."""
    H = case[4]
    inits, names, graph_inputs, feeds = _rnn_inits(rng, 4, case, with_c=True)
    m = single_op_model("LSTM", graph_inputs, input_names=names, initializers=inits, opset=13,
                        output_names=["", "Y_h"], hidden_size=H, direction=case[0])
    check(m, feeds, **RNN_TOL)


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("case", RNN_CASES, ids=_ids(RNN_CASES))
def test_gru(check, rng, case, lbr):
    H = case[4]
    inits, names, graph_inputs, feeds = _rnn_inits(rng, 3, case, with_c=False)
    m = single_op_model("GRU", graph_inputs, input_names=names, initializers=inits,
                        output_names=["Y", "Y_h"], hidden_size=H, direction=case[0],
                        linear_before_reset=lbr)
    check(m, feeds, **RNN_TOL)


def test_lstm_weights_as_inputs(check, rng):
    T, Bt, I, H = 3, 2, 5, 6
    m = single_op_model("LSTM", [("X", F32, (T, Bt, I)), ("W", F32, (1, 4 * H, I)),
                                 ("R", F32, (1, 4 * H, H)), ("B", F32, (1, 8 * H))],
                        output_names=["Y", "Y_h", "Y_c"], hidden_size=H)
    feeds = {"X": rand(rng, (T, Bt, I)), "W": rand(rng, (1, 4 * H, I)) * F32(0.3),
             "R": rand(rng, (1, 4 * H, H)) * F32(0.3), "B": rand(rng, (1, 8 * H)) * F32(0.3)}
    check(m, {k: v.astype(F32) for k, v in feeds.items()}, **RNN_TOL)


# ===================================================================================
# Elementwise
# ===================================================================================
BCAST = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((1,), (2, 5)),
         ((), (3, 2)), ((2, 3, 1, 5), (1, 3, 4, 1))]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [F32, I64, I32], ids=["f32", "i64", "i32"])
@pytest.mark.parametrize("shapes", BCAST, ids=_ids(BCAST))
def test_arith_binary(check, rng, op, dtype, shapes):
    sa, sb = shapes
    m = single_op_model(op, [("a", dtype, sa), ("b", dtype, sb)])
    nz = op == "Div"
    a = rand(rng, sa, dtype, low=-100 if dtype != F32 else None, high=100 if dtype != F32 else None)
    check(m, {"a": a, "b": rand(rng, sb, dtype, nonzero=nz)})


@pytest.mark.parametrize("opset", [13, 21])
def test_arith_opsets(check, rng, opset):
    nodes = [helper.make_node("Add", ["a", "b"], ["t0"]), helper.make_node("Mul", ["t0", "a"], ["t1"]),
             helper.make_node("Sub", ["t1", "b"], ["t2"]), helper.make_node("Div", ["t2", "c"], ["y"])]
    m = make_model(nodes, [("a", F32, ("B", 6)), ("b", F32, (6,)), ("c", F32, ("B", 1))], ["y"], opset=opset)
    check(m, {"a": rand(rng, (4, 6)), "b": rand(rng, (6,)), "c": rand(rng, (4, 1), nonzero=True)})


@pytest.mark.parametrize("shapes", BCAST[:4], ids=_ids(BCAST[:4]))
def test_pow(check, rng, shapes):
    sa, sb = shapes
    m = single_op_model("Pow", [("a", F32, sa), ("b", F32, sb)])
    check(m, {"a": rand(rng, sa, positive=True), "b": rand(rng, sb, low=-2.0, high=3.0)})


def test_pow_int_exponent_and_square(check, rng):
    m = make_model([helper.make_node("Pow", ["a", "e"], ["y0"]),
                    helper.make_node("Pow", ["a", "two"], ["y1"])],
                   [("a", F32, (3, 5)), ("e", I64, (5,))], ["y0", "y1"],
                   initializers={"two": np.array(2.0, F32)})
    # negative bases with integer exponents are well defined
    check(m, {"a": rand(rng, (3, 5)), "e": rand(rng, (5,), I64, low=0, high=4)})


@pytest.mark.parametrize("op", ["Min", "Max"])
@pytest.mark.parametrize("dtype", [F32, I64], ids=["f32", "i64"])
@pytest.mark.parametrize("n_in", [1, 2, 3])
def test_min_max(check, rng, op, dtype, n_in):
    shapes = [(2, 3, 4), (3, 1), (4,)][:n_in]
    ins = [(f"x{i}", dtype, s) for i, s in enumerate(shapes)]
    m = single_op_model(op, ins)
    check(m, {f"x{i}": rand(rng, s, dtype) for i, s in enumerate(shapes)})


# (op, attrs, data kind)
UNARY = [
    ("Neg", {}, "any"), ("Abs", {}, "any"), ("Sqrt", {}, "pos"), ("Exp", {}, "small"),
    ("Log", {}, "pos"), ("Reciprocal", {}, "nonzero"), ("Relu", {}, "any"),
    ("LeakyRelu", {}, "any"), ("LeakyRelu", {"alpha": 0.2}, "any"), ("Elu", {}, "any"),
    ("Elu", {"alpha": 0.7}, "any"), ("Sigmoid", {}, "wide"),
    ("HardSigmoid", {}, "wide"), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, "any"),
    ("Tanh", {}, "wide"), ("Softplus", {}, "wide"), ("Erf", {}, "any"),
    ("HardSwish", {}, "wide"), ("Floor", {}, "wide"), ("Ceil", {}, "wide"), ("Sign", {}, "signs"),
    ("Identity", {}, "any"),
]


@pytest.mark.parametrize("op,attrs,kind", UNARY, ids=[f"{o}{'_' + '_'.join(a) if a else ''}" for o, a, _ in UNARY])
def test_unary_f32(check, rng, op, attrs, kind):
    shape = (3, 17, 5)
    if kind == "pos":
        x = rand(rng, shape, positive=True) * F32(5)
    elif kind == "small":
        x = rand(rng, shape, low=-5.0, high=5.0)
    elif kind == "nonzero":
        x = rand(rng, shape, nonzero=True)
    elif kind == "wide":
        x = rand(rng, shape) * F32(6.0)
    elif kind == "signs":
        x = rand(rng, shape)
        x.flat[:7] = 0.0
    else:
        x = rand(rng, shape) * F32(2.0)
    m = single_op_model(op, [("x", F32, ("N", 17, 5))], **attrs)
    check(m, {"x": x.astype(F32)})


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Exp", "Abs"])
@pytest.mark.parametrize("opset", [13, 21])
def test_unary_opsets(check, rng, op, opset):
    m = single_op_model(op, [("x", F32, (4, 33))], opset=opset)
    check(m, {"x": rand(rng, (4, 33)) * F32(3)})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_opset20(check, rng, approximate):
    m = single_op_model("Gelu", [("x", F32, ("N", 64))], opset=20, approximate=approximate)
    check(m, {"x": rand(rng, (6, 64)) * F32(3)})


@pytest.mark.parametrize("op", ["Neg", "Abs", "Sign"])
@pytest.mark.parametrize("dtype", [I64, I32], ids=["i64", "i32"])
def test_unary_int(check, rng, op, dtype):
    m = single_op_model(op, [("x", dtype, (4, 9))])
    check(m, {"x": rand(rng, (4, 9), dtype)})


def test_not(check, rng):
    m = single_op_model("Not", [("x", BOOL, (5, 7))])
    check(m, {"x": rand(rng, (5, 7), BOOL)})


CLIP_CASES = [("both", F32), ("min_only", F32), ("max_only", F32), ("none", F32), ("both", I64)]


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("case", CLIP_CASES, ids=[f"{a}-{np.dtype(b).name}" for a, b in CLIP_CASES])
def test_clip(check, rng, case, opset):
    which, dtype = case
    lo = np.array(-1 if dtype == I64 else -0.5, dtype)
    hi = np.array(3 if dtype == I64 else 0.8, dtype)
    names = {"both": ["x", "lo", "hi"], "min_only": ["x", "lo"], "max_only": ["x", "", "hi"],
             "none": ["x"]}[which]
    inits = {k: v for k, v in {"lo": lo, "hi": hi}.items() if k in names}
    m = single_op_model("Clip", [("x", dtype, (3, 11))], input_names=names, initializers=inits,
                        opset=opset)
    check(m, {"x": rand(rng, (3, 11), dtype)})


def test_clip_bounds_as_inputs(check, rng):
    m = single_op_model("Clip", [("x", F32, (4, 6)), ("lo", F32, ()), ("hi", F32, ())])
    check(m, {"x": rand(rng, (4, 6)), "lo": np.array(-0.3, F32), "hi": np.array(0.6, F32)})


@pytest.mark.parametrize("op", ["And", "Or"])
@pytest.mark.parametrize("shapes", BCAST[:4], ids=_ids(BCAST[:4]))
def test_logical(check, rng, op, shapes):
    sa, sb = shapes
    m = single_op_model(op, [("a", BOOL, sa), ("b", BOOL, sb)])
    check(m, {"a": rand(rng, sa, BOOL), "b": rand(rng, sb, BOOL)})


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [F32, I64, I32], ids=["f32", "i64", "i32"])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1))],
                         ids=["same", "trail", "both"])
def test_compare(check, rng, op, dtype, shapes):
    sa, sb = shapes
    m = single_op_model(op, [("a", dtype, sa), ("b", dtype, sb)])
    # draw from a small set so that ties (equal elements) are frequent
    a = rng.integers(-3, 4, size=sa).astype(dtype)
    b = rng.integers(-3, 4, size=sb).astype(dtype)
    if dtype == F32:
        a = (a * F32(0.5)).astype(F32)
        b = (b * F32(0.5)).astype(F32)
    check(m, {"a": a, "b": b})


def test_equal_bool(check, rng):
    m = single_op_model("Equal", [("a", BOOL, (3, 4)), ("b", BOOL, (4,))])
    check(m, {"a": rand(rng, (3, 4), BOOL), "b": rand(rng, (4,), BOOL)})


WHERE_CASES = [((3, 4), (3, 4), (3, 4)), ((3, 4), (4,), ()), ((2, 1, 4), (3, 1), (2, 3, 1)),
               ((5,), (2, 5), (1, 5))]


@pytest.mark.parametrize("dtype", [F32, I64], ids=["f32", "i64"])
@pytest.mark.parametrize("shapes", WHERE_CASES, ids=_ids(WHERE_CASES))
def test_where(check, rng, dtype, shapes):
    sc, sx, sy = shapes
    m = single_op_model("Where", [("c", BOOL, sc), ("x", dtype, sx), ("y", dtype, sy)])
    check(m, {"c": rand(rng, sc, BOOL), "x": rand(rng, sx, dtype), "y": rand(rng, sy, dtype)})


CAST_CASES = [
    (F32, TensorProto.INT64, I64), (F32, TensorProto.INT32, I32), (F32, TensorProto.UINT8, U8),
    (F32, TensorProto.BOOL, BOOL), (F32, TensorProto.DOUBLE, np.float64),
    (np.float64, TensorProto.FLOAT, F32), (I64, TensorProto.FLOAT, F32),
    (I32, TensorProto.INT64, I64), (I64, TensorProto.INT32, I32), (U8, TensorProto.FLOAT, F32),
    (U8, TensorProto.INT64, I64), (BOOL, TensorProto.FLOAT, F32), (BOOL, TensorProto.INT64, I64),
    (I64, TensorProto.BOOL, BOOL), (F32, TensorProto.FLOAT, F32),
]


@pytest.mark.parametrize("opset", [13, 21])
@pytest.mark.parametrize("case", CAST_CASES,
                         ids=[f"{np.dtype(a).name}-{TensorProto.DataType.Name(t)}" for a, t, _ in CAST_CASES])
def test_cast(check, rng, case, opset):
    src, to, _ = case
    shape = (4, 7)
    if np.dtype(src).kind == "f":
        # avoid out-of-range float->int conversions (implementation defined);
        # non-negative for uint8; fractional parts exercise truncation toward zero
        lo = 0.0 if to == TensorProto.UINT8 else -100.0
        x = rand(rng, shape, src, low=lo, high=200.0)
        x.flat[:3] = 0.0
    else:
        x = rand(rng, shape, src)
        if np.dtype(src) != np.bool_:
            x.flat[:2] = 0
    m = single_op_model("Cast", [("x", src, shape)], opset=opset, to=to)
    check(m, {"x": x})


def test_uint8_frames_cast_in_graph(check, rng):
    """Atari-style preprocessing: uint8 frames -> float -> /255, with dynamic batch."""
    nodes = [helper.make_node("Cast", ["frames"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["f", "c255"], ["y"])]
    m = make_model(nodes, [("frames", U8, ("B", 4, 84, 84))], ["y"],
                   initializers={"c255": np.array(255.0, F32)})
    for b in (1, 3):
        check(m, {"frames": rand(rng, (b, 4, 84, 84), U8)})


def test_cast_broadcast_chain(check, rng):
    """Cast mixed with broadcasting: int64 ids -> float, added to a [B, N, D] tensor."""
    nodes = [helper.make_node("Cast", ["ids"], ["idf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["idf", "ax"], ["idu"]),
             helper.make_node("Add", ["x", "idu"], ["s"]),
             helper.make_node("Greater", ["s", "zero"], ["g"]),
             helper.make_node("Cast", ["g"], ["y"], to=TensorProto.INT32)]
    m = make_model(nodes, [("ids", I64, ("B", 5)), ("x", F32, ("B", 5, 3))], ["s", "y"],
                   initializers={"ax": np.array([-1], I64), "zero": np.array(0.0, F32)})
    check(m, {"ids": rand(rng, (2, 5), I64, low=-3, high=3), "x": rand(rng, (2, 5, 3))})


# ===================================================================================
# Softmax / reductions / arg
# ===================================================================================
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("shape,axis", [((4, 18), -1), ((2, 3, 5), 1), ((2, 3, 5), 0), ((3, 2, 4, 7), -1)],
                         ids=["2d", "mid", "first", "4d"])
def test_softmax(check, rng, op, opset, shape, axis):
    m = single_op_model(op, [("x", F32, shape)], opset=opset, axis=axis)
    check(m, {"x": rand(rng, shape) * F32(4)})


def test_softmax_default_axis_large_values(check, rng):
    """Default axis (-1); large logits must not overflow (max-subtraction)."""
    m = make_model([helper.make_node("Softmax", ["x"], ["y0"]), helper.make_node("LogSoftmax", ["x"], ["y1"])],
                   [("x", F32, (3, 10))], ["y0", "y1"])
    check(m, {"x": rand(rng, (3, 10)) * F32(30) + F32(60)})


REDUCE_OPS = ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"]
REDUCE_CASES = [((3, 4, 5), [1], 1), ((3, 4, 5), [0, 2], 0), ((3, 4, 5), [-1], 0),
                ((2, 3, 4, 5), [2, 3], 1), ((4, 6), None, 1), ((4, 6), None, 0)]


def _reduce_data(rng, op, shape, dtype=F32):
    if op == "ReduceProd":   # keep products O(1)
        if dtype == F32:
            return rand(rng, shape, low=0.7, high=1.3) * np.where(rng.random(shape) < 0.2, -1, 1).astype(F32)
        return rand(rng, shape, dtype, low=-2, high=3)
    return rand(rng, shape, dtype)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("case", REDUCE_CASES, ids=[f"{s}-{a}-k{k}".replace(" ", "") for s, a, k in REDUCE_CASES])
def test_reduce_opset13(check, rng, op, case):
    shape, axes, keepdims = case
    if op == "ReduceSum":   # ReduceSum takes axes as an input from opset 13
        if axes is None:
            m = single_op_model(op, [("x", F32, shape)], opset=13, keepdims=keepdims)
        else:
            m = single_op_model(op, [("x", F32, shape)], input_names=["x", "axes"], opset=13,
                                initializers={"axes": np.array(axes, I64)}, keepdims=keepdims)
    else:
        attrs = {"keepdims": keepdims}
        if axes is not None:
            attrs["axes"] = axes
        m = single_op_model(op, [("x", F32, shape)], opset=13, **attrs)
    check(m, {"x": _reduce_data(rng, op, shape)})


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("case", REDUCE_CASES, ids=[f"{s}-{a}-k{k}".replace(" ", "") for s, a, k in REDUCE_CASES])
def test_reduce_opset18(check, rng, op, case):
    shape, axes, keepdims = case
    if axes is None:
        m = single_op_model(op, [("x", F32, shape)], opset=18, keepdims=keepdims)
    else:
        m = single_op_model(op, [("x", F32, shape)], input_names=["x", "axes"], opset=18,
                            initializers={"axes": np.array(axes, I64)}, keepdims=keepdims)
    check(m, {"x": _reduce_data(rng, op, shape)})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"])
@pytest.mark.parametrize("dtype", [I64, I32], ids=["i64", "i32"])
def test_reduce_int(check, rng, op, dtype):
    m = single_op_model(op, [("x", dtype, (3, 4, 5))], input_names=["x", "axes"], opset=18,
                        initializers={"axes": np.array([1], I64)}, keepdims=0)
    check(m, {"x": _reduce_data(rng, op, (3, 4, 5), dtype)})


def test_reduce_axes_runtime_input_and_noop(check, rng):
    """axes fed at run time; and empty axes with noop_with_empty_axes=1 (identity)."""
    m = make_model([helper.make_node("ReduceMean", ["x", "axes"], ["y0"], keepdims=1),
                    helper.make_node("ReduceSum", ["x", "empty"], ["y1"], noop_with_empty_axes=1)],
                   [("x", F32, (2, 3, 4)), ("axes", I64, (1,))], [("y0", F32, (2, 1, 4)), ("y1", F32, (2, 3, 4))], opset=18,
                   initializers={"empty": np.zeros((0,), I64)})
    check(m, {"x": rand(rng, (2, 3, 4)), "axes": np.array([-2], I64)})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(0, 1, 0), (1, 0, 0), (-1, 1, 1), (2, 0, 1)])
@pytest.mark.parametrize("dtype", [F32, I64], ids=["f32", "i64"])
def test_arg(check, rng, op, axis, keepdims, last, dtype):
    shape = (3, 5, 6)
    # integer-valued data in a small range -> ties exercise select_last_index
    x = rng.integers(-3, 4, size=shape).astype(dtype)
    m = single_op_model(op, [("x", dtype, shape)], axis=axis, keepdims=keepdims, select_last_index=last)
    check(m, {"x": x})


# ===================================================================================
# Shape / data-movement ops
# ===================================================================================
RESHAPE_CASES = [((2, 3, 4), [6, 4]), ((2, 3, 4), [0, -1]), ((2, 3, 4), [-1]), ((2, 12), [2, 3, 2, 2]),
                 ((4, 1, 3), [0, 0, -1]), ((6,), [1, 6, 1])]


@pytest.mark.parametrize("opset", [13, 21])
@pytest.mark.parametrize("case", RESHAPE_CASES, ids=_ids(RESHAPE_CASES))
def test_reshape(check, rng, case, opset):
    shape, target = case
    m = single_op_model("Reshape", [("x", F32, shape)], input_names=["x", "shape"], opset=opset,
                        initializers={"shape": np.array(target, I64)})
    check(m, {"x": rand(rng, shape)})


def test_reshape_runtime_shape_and_dynamic_batch(check, rng):
    """Shape -> Gather -> Concat -> Reshape: the flatten pattern exported by torch."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "ax0"], ["bu"]),
             helper.make_node("Concat", ["bu", "minus1"], ["newshape"], axis=0),
             helper.make_node("Reshape", ["x", "newshape"], ["y"])]
    m = make_model(nodes, [("x", F32, ("B", 3, 4, 5))], ["y"],
                   initializers={"zero": np.array(0, I64), "ax0": np.array([0], I64),
                                 "minus1": np.array([-1], I64)})
    for b in (1, 4):
        check(m, {"x": rand(rng, (b, 3, 4, 5))})


def test_reshape_int_and_bool(check, rng):
    m = make_model([helper.make_node("Reshape", ["a", "s"], ["y0"]), helper.make_node("Reshape", ["m", "s"], ["y1"])],
                   [("a", I64, (3, 4)), ("m", BOOL, (3, 4))], ["y0", "y1"],
                   initializers={"s": np.array([2, 6], I64)})
    check(m, {"a": rand(rng, (3, 4), I64), "m": rand(rng, (3, 4), BOOL)})


@pytest.mark.parametrize("axis", [0, 1, 2, -1, 3])
def test_flatten(check, rng, axis):
    m = single_op_model("Flatten", [("x", F32, ("N", 3, 4, 5))], axis=axis)
    check(m, {"x": rand(rng, (2, 3, 4, 5))})


@pytest.mark.parametrize("shape,perm", [((3, 4), [1, 0]), ((2, 3, 4), [0, 2, 1]), ((2, 3, 4, 5), [0, 2, 3, 1]),
                                        ((2, 3, 4, 5), [3, 1, 0, 2]), ((2, 3, 4), None), ((1, 8, 1, 6), [0, 2, 1, 3])],
                         ids=["2d", "last2", "nchw2nhwc", "rand", "default", "trivial"])
@pytest.mark.parametrize("dtype", [F32, I64], ids=["f32", "i64"])
def test_transpose(check, rng, shape, perm, dtype):
    attrs = {"perm": perm} if perm is not None else {}
    m = single_op_model("Transpose", [("x", dtype, shape)], **attrs)
    check(m, {"x": rand(rng, shape, dtype)})


@pytest.mark.parametrize("opset", [13, 21])
@pytest.mark.parametrize("shape,axes", [((1, 3, 1, 4), [0]), ((1, 3, 1, 4), [-2, 0]), ((1, 3, 1, 4), None),
                                        ((2, 1), [1])], ids=["one", "neg", "all", "last"])
def test_squeeze(check, rng, shape, axes, opset):
    if axes is None:
        m = single_op_model("Squeeze", [("x", F32, shape)], opset=opset)
    else:
        m = single_op_model("Squeeze", [("x", F32, shape)], input_names=["x", "axes"], opset=opset,
                            initializers={"axes": np.array(axes, I64)})
    check(m, {"x": rand(rng, shape)})


@pytest.mark.parametrize("opset", [13, 21])
@pytest.mark.parametrize("shape,axes", [((3, 4), [0]), ((3, 4), [-1]), ((3, 4), [0, 3]), ((), [0]),
                                        ((2, 3), [1, -1])], ids=["front", "back", "two", "scalar", "mixed"])
def test_unsqueeze(check, rng, shape, axes, opset):
    m = single_op_model("Unsqueeze", [("x", F32, shape)], input_names=["x", "axes"], opset=opset,
                        initializers={"axes": np.array(axes, I64)})
    check(m, {"x": rand(rng, shape)})


@pytest.mark.parametrize("dtype", [F32, I64, BOOL], ids=["f32", "i64", "bool"])
@pytest.mark.parametrize("shapes,axis", [([(2, 3), (2, 5)], 1), ([(1, 4), (3, 4), (2, 4)], 0),
                                         ([(2, 3, 4), (2, 1, 4), (2, 2, 4)], -2), ([(3,), (1,)], 0)],
                         ids=["two", "three", "neg", "1d"])
def test_concat(check, rng, dtype, shapes, axis):
    ins = [(f"x{i}", dtype, s) for i, s in enumerate(shapes)]
    m = single_op_model("Concat", ins, axis=axis)
    check(m, {f"x{i}": rand(rng, s, dtype) for i, s in enumerate(shapes)})


def test_concat_with_initializer_dynamic_batch(check, rng):
    # broadcasting is not allowed in Concat, so the constant part is expanded first
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "z", "o"], ["b"]),
             helper.make_node("Concat", ["b", "two"], ["cs"], axis=0),
             helper.make_node("Expand", ["c", "cs"], ["ce"]),
             helper.make_node("Concat", ["x", "ce", "x"], ["y"], axis=1)]
    m = make_model(nodes, [("x", F32, ("B", 3))], ["y"],
                   initializers={"c": np.array([[0.5, -0.5]], F32), "z": np.array([0], I64),
                                 "o": np.array([1], I64), "two": np.array([2], I64)})
    check(m, {"x": rand(rng, (5, 3))})


@pytest.mark.parametrize("shape,axis,split", [((6, 4), 0, [2, 4]), ((2, 9), 1, [3, 3, 3]), ((2, 7, 3), -2, [1, 2, 4]),
                                              ((4, 6), 1, None)], ids=["two", "three", "neg", "equal"])
def test_split_opset13(check, rng, shape, axis, split):
    n = len(split) if split else 2
    if split:
        m = single_op_model("Split", [("x", F32, shape)], n_out=n, input_names=["x", "split"], opset=13,
                            initializers={"split": np.array(split, I64)}, axis=axis)
    else:
        m = single_op_model("Split", [("x", F32, shape)], n_out=n, opset=13, axis=axis)
    check(m, {"x": rand(rng, shape)})


@pytest.mark.parametrize("shape,axis,n", [((6, 4), 0, 3), ((2, 7), 1, 3), ((8, 3), 0, 4)], ids=["even", "uneven", "four"])
def test_split_opset18_num_outputs(check, rng, shape, axis, n):
    m = single_op_model("Split", [("x", F32, shape)], n_out=n, opset=18, axis=axis, num_outputs=n)
    check(m, {"x": rand(rng, shape)})


def test_split_lstm_gates_int(check, rng):
    m = single_op_model("Split", [("x", I64, (3, 8))], n_out=4, input_names=["x", "split"],
                        initializers={"split": np.array([2, 2, 2, 2], I64)}, axis=1)
    check(m, {"x": rand(rng, (3, 8), I64)})


SLICE_CASES = [
    ((5, 6), [1, 0], [4, 6], None, None),
    ((5, 6), [1], [-1], [1], None),
    ((5, 6), [-3], [100], [0], None),                       # clamping
    ((5, 6, 7), [0, 1], [7, 5], [2, 1], [2, 2]),            # steps
    ((5, 6), [4], [-100], [0], [-1]),                       # reverse whole axis
    ((5, 6), [-1, 4], [-7, 0], [1, 0], [-2, -1]),            # negative steps
    ((4, 10), [2], [9223372036854775807], [1], [3]),        # INT64_MAX end
    ((3, 4), [0], [0], [1], None),                          # empty slice
]


@pytest.mark.parametrize("idx_dtype", [I64, I32], ids=["i64", "i32"])
@pytest.mark.parametrize("case", SLICE_CASES, ids=[f"s{i}" for i in range(len(SLICE_CASES))])
def test_slice(check, rng, case, idx_dtype):
    shape, starts, ends, axes, steps = case
    names = ["x", "starts", "ends"]
    inits = {"starts": np.array(starts, idx_dtype), "ends": np.array(ends, np.int64).clip(
        np.iinfo(idx_dtype).min, np.iinfo(idx_dtype).max).astype(idx_dtype)}
    if axes is not None:
        names.append("axes")
        inits["axes"] = np.array(axes, idx_dtype)
    if steps is not None:
        if axes is None:
            names.append("")
        names.append("steps")
        inits["steps"] = np.array(steps, idx_dtype)
    m = single_op_model("Slice", [("x", F32, shape)], input_names=names, initializers=inits)
    check(m, {"x": rand(rng, shape)})


def test_slice_runtime_starts(check, rng):
    m = single_op_model("Slice", [("x", I64, (6, 5)), ("st", I64, (2,)), ("en", I64, (2,))])
    check(m, {"x": rand(rng, (6, 5), I64), "st": np.array([1, -4], I64), "en": np.array([5, 4], I64)})


GATHER_CASES = [((5, 4), 0, (3,)), ((5, 4), 1, (2, 3)), ((3, 5, 4), 1, ()), ((10, 8), 0, ("B", 32)),
                ((3, 5, 4), -1, (2,))]


@pytest.mark.parametrize("idx_dtype", [I64, I32], ids=["i64", "i32"])
@pytest.mark.parametrize("case", GATHER_CASES, ids=[f"g{i}" for i in range(len(GATHER_CASES))])
def test_gather(check, rng, case, idx_dtype):
    shape, axis, ishape = case
    n = shape[axis]
    concrete = tuple(3 if isinstance(d, str) else d for d in ishape)
    idx = rng.integers(-n, n, size=concrete).astype(idx_dtype)   # includes negative indices
    m = single_op_model("Gather", [("data", F32, shape), ("idx", idx_dtype, ishape)], axis=axis)
    check(m, {"data": rand(rng, shape), "idx": idx})


def test_gather_embedding_int64_table(check, rng):
    """Embedding lookup with an initializer table + gather on int64 data."""
    m = make_model([helper.make_node("Gather", ["table", "ids"], ["emb"]),
                    helper.make_node("Gather", ["ids", "col"], ["first"], axis=1)],
                   [("ids", I64, ("B", 32))], ["emb", "first"],
                   initializers={"table": rand(rng, (20, 16)), "col": np.array(0, I64)})
    check(m, {"ids": rng.integers(0, 20, size=(4, 32)).astype(I64)})


@pytest.mark.parametrize("shape,target", [((3, 1), [3, 4]), ((1,), [2, 3]), ((2, 1, 4), [3, 2, 5, 4]),
                                          ((3, 4), [1, 1]), ((1, 4), [2, 1, 4])],
                         ids=["col", "scalarish", "prepend", "noop_ones", "rank_up"])
@pytest.mark.parametrize("dtype", [F32, I64, BOOL], ids=["f32", "i64", "bool"])
def test_expand(check, rng, shape, target, dtype):
    m = single_op_model("Expand", [("x", dtype, shape)], input_names=["x", "shape"],
                        initializers={"shape": np.array(target, I64)})
    check(m, {"x": rand(rng, shape, dtype)})


@pytest.mark.parametrize("shape,reps", [((2, 3), [2, 1]), ((2, 3), [1, 3]), ((2, 1, 3), [2, 4, 1]), ((5,), [3])],
                         ids=_ids([[2, 1], [1, 3], [2, 4, 1], [3]]))
@pytest.mark.parametrize("dtype", [F32, I64], ids=["f32", "i64"])
def test_tile(check, rng, shape, reps, dtype):
    m = single_op_model("Tile", [("x", dtype, shape)], input_names=["x", "reps"],
                        initializers={"reps": np.array(reps, I64)})
    check(m, {"x": rand(rng, shape, dtype)})


PAD_CASES = [
    ((2, 3, 4, 5), [0, 0, 1, 1, 0, 0, 1, 1], "constant", 0.0),
    ((2, 3, 4, 5), [0, 0, 1, 2, 0, 0, 2, 1], "constant", 1.5),
    ((3, 4), [1, 2, 0, 1], "reflect", None),
    ((3, 4), [2, 0, 1, 3], "edge", None),
    ((2, 3, 5, 5), [0, 0, 2, 2, 0, 0, 2, 2], "reflect", None),
    ((3, 6), [0, -1, 1, -2], "constant", 0.0),                # negative pads crop
]


@pytest.mark.parametrize("opset", [13, 18, 21])
@pytest.mark.parametrize("case", PAD_CASES, ids=[f"p{i}" for i in range(len(PAD_CASES))])
def test_pad(check, rng, case, opset):
    shape, pads, mode, value = case
    names = ["x", "pads"]
    inits = {"pads": np.array(pads, I64)}
    if value is not None:
        names.append("v")
        inits["v"] = np.array(value, F32)
    m = single_op_model("Pad", [("x", F32, shape)], input_names=names, initializers=inits, opset=opset, mode=mode)
    check(m, {"x": rand(rng, shape)})


def test_pad_axes_opset18(check, rng):
    m = single_op_model("Pad", [("x", F32, (2, 3, 4))], input_names=["x", "pads", "", "axes"], opset=18,
                        initializers={"pads": np.array([1, 2, 0, 1], I64), "axes": np.array([1, -1], I64)})
    check(m, {"x": rand(rng, (2, 3, 4))})


def test_pad_int64(check, rng):
    m = single_op_model("Pad", [("x", I64, (3, 4))], input_names=["x", "pads", "v"],
                        initializers={"pads": np.array([1, 1, 1, 1], I64), "v": np.array(-7, I64)})
    check(m, {"x": rand(rng, (3, 4), I64)})


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-2, None), (0, -1), (1, 3), (-10, 10)])
def test_shape(check, rng, start, end):
    attrs = {}
    if start is not None:
        attrs["start"] = start
    if end is not None:
        attrs["end"] = end
    m = single_op_model("Shape", [("x", F32, ("N", 3, 4, 5))], opset=15 if attrs else 13, **attrs)
    check(m, {"x": rand(rng, (2, 3, 4, 5))})


@pytest.mark.parametrize("shape", [(2, 3, 4), (7,), ()], ids=["3d", "1d", "scalar"])
@pytest.mark.parametrize("dtype", [F32, I64, BOOL], ids=["f32", "i64", "bool"])
def test_size(check, rng, shape, dtype):
    m = single_op_model("Size", [("x", dtype, shape)])
    check(m, {"x": rand(rng, shape, dtype)})


@pytest.mark.parametrize("value", [None, np.array([1.25], F32), np.array([-3], I64), np.array([1], I32),
                                   np.array([True])], ids=["default", "f32", "i64", "i32", "bool"])
def test_constant_of_shape(check, rng, value):
    attrs = {}
    if value is not None:
        attrs["value"] = helper.make_tensor("value", NP2ONNX[value.dtype], [1], value.tolist())
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["y"], **attrs)]
    m = make_model(nodes, [("x", F32, ("N", 3))], ["y"])
    check(m, {"x": rand(rng, (4, 3))})


def test_constant_of_shape_from_initializer(check, rng):
    m = make_model([helper.make_node("ConstantOfShape", ["s"], ["z"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.0])),
                    helper.make_node("Add", ["z", "x"], ["y"])],
                   [("x", F32, (2, 3))], ["y"], initializers={"s": np.array([2, 3], I64)})
    check(m, {"x": rand(rng, (2, 3))})


@pytest.mark.parametrize("kind", ["tensor_f32", "tensor_i64", "value_float", "value_floats", "value_int",
                                  "value_ints", "scalar_tensor"])
def test_constant(check, rng, kind):
    if kind == "tensor_f32":
        attrs = {"value": helper.make_tensor("c", TensorProto.FLOAT, [2, 3], rand(rng, (2, 3)).ravel().tolist())}
        xs, xd = (2, 3), F32
    elif kind == "tensor_i64":
        attrs = {"value": helper.make_tensor("c", TensorProto.INT64, [3], [4, -5, 6])}
        xs, xd = (3,), I64
    elif kind == "value_float":
        attrs = {"value_float": 0.75}
        xs, xd = (4,), F32
    elif kind == "value_floats":
        attrs = {"value_floats": [0.5, -1.0, 2.0]}
        xs, xd = (3,), F32
    elif kind == "value_int":
        attrs = {"value_int": 3}
        xs, xd = (2,), I64
    elif kind == "value_ints":
        attrs = {"value_ints": [1, 2, 3, 4]}
        xs, xd = (4,), I64
    else:
        attrs = {"value": helper.make_tensor("c", TensorProto.FLOAT, [], [3.5])}
        xs, xd = (2, 2), F32
    nodes = [helper.make_node("Constant", [], ["c"], **attrs), helper.make_node("Mul", ["x", "c"], ["y"]),
             helper.make_node("Identity", ["c"], ["c_out"])]
    m = make_model(nodes, [("x", xd, xs)], ["y", "c_out"])
    check(m, {"x": rand(rng, xs, xd)})


@pytest.mark.parametrize("dtype", [F32, I64, BOOL, U8], ids=["f32", "i64", "bool", "u8"])
def test_identity(check, rng, dtype):
    m = single_op_model("Identity", [("x", dtype, ("N", 5))])
    check(m, {"x": rand(rng, (3, 5), dtype)})


def test_identity_of_initializer_and_passthrough(check, rng):
    """Graph output that is an Identity of an initializer and an input used as an output too."""
    nodes = [helper.make_node("Identity", ["w"], ["w_out"]), helper.make_node("Identity", ["x"], ["x_out"])]
    m = make_model(nodes, [("x", F32, (2, 2))], ["w_out", "x_out"], initializers={"w": rand(rng, (3, 2))})
    check(m, {"x": rand(rng, (2, 2))})


@pytest.mark.parametrize("variant", ["plain", "ratio", "mask", "opset12_training_false"])
def test_dropout_inference(check, rng, variant):
    if variant == "plain":
        m = single_op_model("Dropout", [("x", F32, (4, 6))])
    elif variant == "ratio":
        m = single_op_model("Dropout", [("x", F32, (4, 6))], input_names=["x", "r"],
                            initializers={"r": np.array(0.3, F32)})
    elif variant == "mask":
        m = single_op_model("Dropout", [("x", F32, (4, 6))], n_out=2)
    else:
        m = single_op_model("Dropout", [("x", F32, (4, 6))], input_names=["x", "r", "t"], n_out=2,
                            initializers={"r": np.array(0.5, F32), "t": np.array(False)})
    check(m, {"x": rand(rng, (4, 6))})


@pytest.mark.parametrize("dtype,start,limit,delta", [(F32, 0.0, 5.0, 1.0), (F32, 1.0, -2.0, -0.5), (F32, 0.5, 3.7, 0.4),
                                                     (I64, 0, 10, 3), (I64, 10, 2, -2), (I32, -3, 4, 1), (I64, 3, 3, 1)],
                         ids=["f_unit", "f_neg", "f_frac", "i64", "i64_neg", "i32", "empty"])
@pytest.mark.parametrize("operands", ["inputs", "initializers"])
def test_range(check, rng, dtype, start, limit, delta, operands):
    """Range with runtime scalar operands (output length depends on input *values*) and with
    the operands as initializers (what exporters produce for constant ranges)."""
    vals = {"s": np.array(start, dtype), "l": np.array(limit, dtype), "d": np.array(delta, dtype)}
    if operands == "inputs":
        m = single_op_model("Range", [("s", dtype, ()), ("l", dtype, ()), ("d", dtype, ())])
        check(m, vals)
    else:
        # an Add keeps one graph input so the model is not input-less
        nodes = [helper.make_node("Range", ["s", "l", "d"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])]
        m = make_model(nodes, [("x", dtype, (1,))], ["r", "y"], initializers=vals)
        check(m, {"x": np.array([1], dtype)})


def test_range_from_shape(check, rng):
    """Positions 0..T-1 from a dynamic dim (the torch.arange export pattern)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "one"], ["t"], axis=0),
             helper.make_node("Range", ["zero", "t", "one"], ["pos"]),
             helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "posf"], ["y"])]
    m = make_model(nodes, [("x", F32, (2, "T"))], ["pos", "y"],
                   initializers={"zero": np.array(0, I64), "one": np.array(1, I64)})
    check(m, {"x": rand(rng, (2, 7))})


EINSUM_CASES = [
    ("bhqd,bhkd->bhqk", [(2, 4, 5, 8), (2, 4, 6, 8)]),       # attention scores
    ("bhqk,bhkd->bhqd", [(2, 4, 5, 6), (2, 4, 6, 8)]),       # attention values
    ("bqd,bkd->bqk", [(3, 7, 16), (3, 9, 16)]),
    ("bi,ij,bj->b", [(4, 5), (5, 6), (4, 6)]),               # bilinear form
    ("bi,oij,bj->bo", [(4, 5), (3, 5, 6), (4, 6)]),          # nn.Bilinear
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij->bji", [(2, 3, 4)]),
    ("bnd,d->bn", [(2, 5, 6), (6,)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 2)]),
    ("ii->i", [(4, 4)]),
]


@pytest.mark.parametrize("eq,shapes", EINSUM_CASES, ids=[e for e, _ in EINSUM_CASES])
def test_einsum(check, rng, eq, shapes):
    ins = [(f"x{i}", F32, s) for i, s in enumerate(shapes)]
    m = single_op_model("Einsum", ins, equation=eq)
    check(m, {f"x{i}": rand(rng, s) for i, s in enumerate(shapes)}, **contraction_tol(64))


@pytest.mark.parametrize("opset", [13, 21])
def test_einsum_opsets(check, rng, opset):
    m = single_op_model("Einsum", [("q", F32, ("B", 5, 8)), ("k", F32, ("B", 6, 8))], opset=opset,
                        equation="bqd,bkd->bqk")
    check(m, {"q": rand(rng, (2, 5, 8)), "k": rand(rng, (2, 6, 8))})


# ===================================================================================
# Small multi-op graphs: masks, attention, dynamic batch
# ===================================================================================
def test_masked_attention_bool_mask(check, rng):
    """scores = q k^T / sqrt(d); masked by a bool padding mask via Where(-inf); softmax; @ v."""
    B, N, D = 3, 7, 8
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),
        helper.make_node("Div", ["s0", "sqrt_d"], ["s1"]),
        helper.make_node("Unsqueeze", ["pad", "ax1"], ["padu"]),         # [B,1,N]
        helper.make_node("Where", ["padu", "neg_inf", "s1"], ["s2"]),
        helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    m = make_model(nodes, [("q", F32, ("B", N, D)), ("k", F32, ("B", N, D)), ("v", F32, ("B", N, D)),
                           ("pad", BOOL, ("B", N))], ["y", "p"],
                   initializers={"sqrt_d": np.array(np.sqrt(D), F32), "ax1": np.array([1], I64),
                                 "neg_inf": np.array(-np.inf, F32)})
    pad = rng.random((B, N)) < 0.4
    pad[:, 0] = False  # at least one valid key per row
    check(m, {"q": rand(rng, (B, N, D)), "k": rand(rng, (B, N, D)), "v": rand(rng, (B, N, D)), "pad": pad})


def test_mask_from_comparison_and_logic(check, rng):
    """bool masks produced in-graph (Equal/Not/And/Or) and consumed by Where and Cast."""
    nodes = [helper.make_node("Equal", ["ids", "zero"], ["is_pad"]),
             helper.make_node("Not", ["is_pad"], ["valid"]),
             helper.make_node("Greater", ["x", "thr"], ["big"]),
             helper.make_node("And", ["valid", "big"], ["keep"]),
             helper.make_node("Or", ["is_pad", "keep"], ["any"]),
             helper.make_node("Where", ["keep", "x", "fill"], ["y"]),
             helper.make_node("Cast", ["any"], ["anyf"], to=TensorProto.FLOAT)]
    m = make_model(nodes, [("ids", I64, ("B", 9)), ("x", F32, ("B", 9))], ["y", "keep", "anyf"],
                   initializers={"zero": np.array(0, I64), "thr": np.array(-0.2, F32), "fill": np.array(-5.0, F32)})
    check(m, {"ids": rng.integers(0, 3, size=(4, 9)).astype(I64), "x": rand(rng, (4, 9))})


def test_mlp_dynamic_batch_multiple_batches(check, rng):
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], transB=1),
             helper.make_node("Relu", ["h1"], ["a1"]),
             helper.make_node("Gemm", ["a1", "w2", "b2"], ["logits"], transB=1),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
             helper.make_node("ArgMax", ["logits"], ["action"], axis=1, keepdims=0)]
    m = make_model(nodes, [("x", F32, ("batch", 32))], ["probs", "action"],
                   initializers={"w1": rand(rng, (64, 32)) * F32(0.2), "b1": rand(rng, (64,)),
                                 "w2": rand(rng, (6, 64)) * F32(0.2), "b2": rand(rng, (6,))})
    for b in (1, 2, 17):
        check(m, {"x": rand(rng, (b, 32))})


# ===================================================================================
# Randomized shapes / attributes (seeded: each seed is a fixed, reproducible case)
# ===================================================================================
FUZZ_SEEDS = list(range(8))


@pytest.mark.parametrize("seed", FUZZ_SEEDS)
def test_fuzz_conv2d(check, seed):
    r = np.random.default_rng(10_000 + seed)
    g = int(r.choice([1, 1, 2, 3]))
    C = g * int(r.integers(1, 5))
    M = g * int(r.integers(1, 5))
    k = tuple(int(v) for v in r.integers(1, 5, size=2))
    d = tuple(int(v) for v in r.integers(1, 3, size=2))
    s = tuple(int(v) for v in r.integers(1, 4, size=2))
    p = [int(v) for v in r.integers(0, 3, size=4)]
    # input big enough for at least one output position
    H = int(r.integers((k[0] - 1) * d[0] + 1, 20))
    W = int(r.integers((k[1] - 1) * d[1] + 1, 20))
    N = int(r.integers(1, 4))
    m = single_op_model("Conv", [("X", F32, ("N", C, H, W))], input_names=["X", "W", "B"],
                        initializers={"W": rand(r, (M, C // g) + k), "B": rand(r, (M,))},
                        kernel_shape=list(k), strides=list(s), dilations=list(d), pads=p, group=g)
    check(m, {"X": rand(r, (N, C, H, W))}, **contraction_tol(C // g * k[0] * k[1]),
          context=f"g={g} C={C} M={M} k={k} d={d} s={s} p={p} HW={(H, W)}")


@pytest.mark.parametrize("seed", FUZZ_SEEDS)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_fuzz_pool(check, op, seed):
    r = np.random.default_rng(20_000 + seed)
    k = [int(v) for v in r.integers(1, 4, size=2)]
    s = [int(v) for v in r.integers(1, 3, size=2)]
    p = [int(r.integers(0, k[0])), int(r.integers(0, k[1])), int(r.integers(0, k[0])), int(r.integers(0, k[1]))]
    H, W = int(r.integers(k[0], 16)), int(r.integers(k[1], 16))
    cm = int(r.integers(0, 2))
    m = single_op_model(op, [("X", F32, (2, 3, H, W))], kernel_shape=k, strides=s, pads=p, ceil_mode=cm)
    check(m, {"X": rand(r, (2, 3, H, W))}, context=f"k={k} s={s} p={p} HW={(H, W)} ceil={cm}")


def _rand_bcast_shapes(r):
    rank = int(r.integers(0, 5))
    full = [int(v) for v in r.integers(1, 6, size=rank)]
    def sub():
        rk = int(r.integers(0, rank + 1))
        sh = full[rank - rk:]
        return tuple(1 if r.random() < 0.3 else v for v in sh)
    a, b = sub(), sub()
    return (tuple(full), b) if r.random() < 0.5 else (a, tuple(full))


@pytest.mark.parametrize("seed", FUZZ_SEEDS)
@pytest.mark.parametrize("op", ["Add", "Mul", "Sub", "Div", "Max", "Pow", "Less", "Equal"])
def test_fuzz_broadcast(check, op, seed):
    r = np.random.default_rng(30_000 + seed)
    sa, sb = _rand_bcast_shapes(r)
    m = single_op_model(op, [("a", F32, sa), ("b", F32, sb)])
    if op == "Pow":
        feeds = {"a": rand(r, sa, positive=True), "b": rand(r, sb, low=-2.0, high=2.0)}
    elif op == "Equal":
        feeds = {"a": r.integers(0, 3, sa).astype(F32), "b": r.integers(0, 3, sb).astype(F32)}
    else:
        feeds = {"a": rand(r, sa), "b": rand(r, sb, nonzero=True)}
    check(m, feeds, context=f"{sa} vs {sb}")


@pytest.mark.parametrize("seed", FUZZ_SEEDS)
def test_fuzz_matmul(check, seed):
    r = np.random.default_rng(40_000 + seed)
    M, K, N = (int(v) for v in r.integers(1, 70, size=3))
    batch = tuple(int(v) for v in r.integers(1, 4, size=int(r.integers(0, 3))))
    bb = tuple(1 if r.random() < 0.4 else v for v in batch)
    sa, sb = batch + (M, K), bb + (K, N)
    m = single_op_model("MatMul", [("a", F32, sa), ("b", F32, sb)])
    check(m, {"a": rand(r, sa), "b": rand(r, sb)}, **contraction_tol(K), context=f"{sa} x {sb}")


@pytest.mark.parametrize("seed", FUZZ_SEEDS)
def test_fuzz_transpose_slice_reduce(check, seed):
    r = np.random.default_rng(50_000 + seed)
    rank = int(r.integers(2, 5))
    shape = tuple(int(v) for v in r.integers(1, 7, size=rank))
    perm = [int(v) for v in r.permutation(rank)]
    tshape = tuple(shape[p] for p in perm)
    ax = int(r.integers(0, rank))
    n = tshape[ax]
    st, en = int(r.integers(-n, n)), int(r.integers(-n - 1, n + 2))
    step = int(r.choice([1, 2, -1, -2]))
    raxes = sorted({int(v) for v in r.integers(0, rank, size=int(r.integers(1, rank + 1)))})
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=perm),
             helper.make_node("Slice", ["t", "st", "en", "ax", "sp"], ["s"]),
             helper.make_node("ReduceSum", ["t", "raxes"], ["rs"], keepdims=int(r.integers(0, 2))),
             helper.make_node("ReduceMax", ["t", "raxes"], ["rm"], keepdims=1)]
    m = make_model(nodes, [("x", F32, shape)], ["t", "s", "rs", "rm"], opset=18,
                   initializers={"st": np.array([st], I64), "en": np.array([en], I64), "ax": np.array([ax], I64),
                                 "sp": np.array([step], I64), "raxes": np.array(raxes, I64)})
    check(m, {"x": rand(r, shape)}, context=f"{shape} perm={perm} slice ax{ax} {st}:{en}:{step} reduce {raxes}")


# ===================================================================================
# Rewrite candidates: producer + activation chains, with and without graph optimization
# ===================================================================================
FUSE_ACTS = [("Relu", {}), ("Tanh", {}), ("Sigmoid", {}), ("LeakyRelu", {"alpha": 0.1}), ("Clip", None),
             ("HardSwish", {}), ("Elu", {}), ("HardSigmoid", {})]


@pytest.mark.parametrize("producer", ["Gemm", "Conv", "MatMulAdd", "ConvBN"])
@pytest.mark.parametrize("act,attrs", FUSE_ACTS, ids=[a for a, _ in FUSE_ACTS])
def test_producer_activation_chain(check, rng, producer, act, attrs):
    inits = {}
    if producer == "Gemm":
        x = ("x", F32, ("B", 12))
        nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1)]
        inits.update(w=rand(rng, (9, 12)) * F32(0.5), b=rand(rng, (9,)))
        xs = (5, 12)
    elif producer == "MatMulAdd":
        x = ("x", F32, ("B", 12))
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["h"])]
        inits.update(w=rand(rng, (12, 9)) * F32(0.5), b=rand(rng, (9,)))
        xs = (5, 12)
    else:
        x = ("x", F32, ("B", 3, 7, 7))
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h" if producer == "Conv" else "c"], pads=[1, 1, 1, 1])]
        inits.update(w=rand(rng, (4, 3, 3, 3)) * F32(0.4), b=rand(rng, (4,)))
        if producer == "ConvBN":
            nodes.append(helper.make_node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["h"]))
            inits.update(s=rand(rng, (4,)), bb=rand(rng, (4,)), mu=rand(rng, (4,)), var=rand(rng, (4,), positive=True))
        xs = (2, 3, 7, 7)
    if act == "Clip":
        nodes.append(helper.make_node("Clip", ["h", "lo", "hi"], ["y"]))
        inits.update(lo=np.array(-0.5, F32), hi=np.array(1.5, F32))
    else:
        nodes.append(helper.make_node(act, ["h"], ["y"], **attrs))
    m = make_model(nodes, [x], ["y"], initializers=inits)
    check(m, {"x": rand(rng, xs)}, optimize_modes=(True, False), atol=3e-5)


def test_sqrt_special_values(engine):
    """sqrt keeps IEEE semantics at the edges: +inf -> inf, -1 -> nan, -0 -> -0."""
    model = make_model([helper.make_node("Sqrt", ["x"], ["y"])], [("x", np.float32, (6,))], ["y"])
    x = np.array([np.inf, 0.0, -0.0, 4.0, -1.0, 2.25], np.float32)
    with np.errstate(invalid="ignore"):
        want = np.sqrt(x)
    got = engine.Session(model).run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[2])
