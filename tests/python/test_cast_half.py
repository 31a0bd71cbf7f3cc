"""Cast to and from float16 on the CPU, against onnxruntime (CPU EP) and numpy.

Every comparison is exact (rtol=0, atol=0; NaN equals NaN): a Cast is a rounding
(to nearest even, overflow to infinity) or a widening, fixed by IEEE. float64 ->
float16 is compared with numpy, which rounds once; onnxruntime goes through
float32 there and can round twice (the engine does not), so that pair is
checked against onnxruntime only on values where both roundings agree.
"""

from __future__ import annotations

import numpy as np
import pytest

# numpy warns on the overflow to infinity that these tests exercise on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
from onnx import TensorProto, helper

from helpers import rand, run_kaiwu, run_ort

F16 = np.float16
NP2TP = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
         np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.int64): TensorProto.INT64,
         np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int16): TensorProto.INT16,
         np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8,
         np.dtype(np.bool_): TensorProto.BOOL}


def _cast_model(src, dst, shape):
    tin, tout = NP2TP[np.dtype(src)], NP2TP[np.dtype(dst)]
    node = helper.make_node("Cast", ["x"], ["y"], to=tout)
    graph = helper.make_graph([node], "cast", [helper.make_tensor_value_info("x", tin, shape)],
                              [helper.make_tensor_value_info("y", tout, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _hard_floats(rng, n):
    """Random magnitudes across float16's normal, subnormal and overflow ranges, with
    ties, specials and -0."""
    x = np.concatenate([
        rng.uniform(-70000, 70000, n),
        rng.uniform(-1, 1, n) * np.exp2(rng.integers(-26, -13, n)),  # subnormal halves
        rng.uniform(-4, 4, n),
        (rng.integers(-2048, 2048, n) + 0.5) * np.exp2(-10.0),  # exact ties
    ]).astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.996, 65520, -65520,
                        2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 3e38, 1e-45], np.float32)
    return np.concatenate([special, x])


def _assert_same(got, want, ctx):
    assert got.dtype == want.dtype, f"{ctx}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, ctx
    np.testing.assert_array_equal(got, want, err_msg=ctx)  # NaN == NaN, -0 == 0
    if want.dtype.kind == "f":
        # Sign bits too (assert_array_equal treats -0 and 0 as equal).
        both = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[both]), np.signbit(want[both]), err_msg=ctx)


def test_float32_to_float16_and_back(engine, rng):
    x = _hard_floats(rng, 5000)
    m = _cast_model(np.float32, F16, [x.size])
    got = run_kaiwu(engine, m, {"x": x})["y"]
    _assert_same(got, run_ort(m, {"x": x})["y"], "float32->float16 vs onnxruntime")
    _assert_same(got, x.astype(F16), "float32->float16 vs numpy")
    back = _cast_model(F16, np.float32, [x.size])
    wide = run_kaiwu(engine, back, {"x": got})["y"]
    _assert_same(wide, run_ort(back, {"x": got})["y"], "float16->float32 vs onnxruntime")
    _assert_same(wide, got.astype(np.float32), "float16->float32 vs numpy")


def test_every_float16_pattern_widens(engine):
    h = np.arange(65536, dtype=np.uint16).view(F16)
    for dst in (np.float32, np.float64):
        m = _cast_model(F16, dst, [h.size])
        got = run_kaiwu(engine, m, {"x": h})["y"]
        _assert_same(got, run_ort(m, {"x": h})["y"], f"float16->{np.dtype(dst)} vs onnxruntime")
        _assert_same(got, h.astype(dst), f"float16->{np.dtype(dst)} vs numpy")


@pytest.mark.parametrize("dst", [np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_])
def test_float16_to_int_and_bool(engine, rng, dst):
    # In range of the target (float -> int out of range is implementation defined).
    info = np.iinfo(dst) if dst is not np.bool_ else None
    lo = max(-60000, info.min) if info else -3
    hi = min(60000, info.max) if info else 3
    x = rng.uniform(lo, hi, 4000).astype(F16)
    x[:4] = [0.0, -0.0, 0.5, -0.75]
    if dst is np.bool_:
        x[4] = np.nan
    m = _cast_model(F16, dst, [x.size])
    got = run_kaiwu(engine, m, {"x": x})["y"]
    _assert_same(got, run_ort(m, {"x": x})["y"], f"float16->{np.dtype(dst)} vs onnxruntime")


@pytest.mark.parametrize("src", [np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_])
def test_int_and_bool_to_float16(engine, rng, src):
    if src is np.bool_:
        x = rng.integers(0, 2, 3000).astype(np.bool_)
    else:
        info = np.iinfo(src)
        x = rng.integers(max(info.min, -100000), min(info.max, 100000), 3000, endpoint=True)
        x = x.astype(src)
    m = _cast_model(src, F16, [x.size])
    got = run_kaiwu(engine, m, {"x": x})["y"]
    _assert_same(got, run_ort(m, {"x": x})["y"], f"{np.dtype(src)}->float16 vs onnxruntime")
    _assert_same(got, x.astype(F16), f"{np.dtype(src)}->float16 vs numpy")


def test_float64_to_float16_rounds_once(engine, rng):
    x = np.concatenate([rng.uniform(-70000, 70000, 3000),
                        rng.uniform(-1, 1, 3000) * 1e-6,
                        [1 + 2.0 ** -11 + 2.0 ** -40, 1 + 2.0 ** -11, np.nan, -0.0, 1e300]])
    m = _cast_model(np.float64, F16, [x.size])
    got = run_kaiwu(engine, m, {"x": x})["y"]
    want = x.astype(F16)
    _assert_same(got, want, "float64->float16 vs numpy")
    assert got[-5] == F16(1 + 2.0 ** -10)  # one rounding: just above the tie rounds up
    # onnxruntime where rounding through float32 first gives the same half.
    agree = x.astype(np.float32).astype(F16)
    same = (agree == want) | (np.isnan(agree) & np.isnan(want))
    ort = run_ort(m, {"x": x})["y"]
    _assert_same(got[same], ort[same], "float64->float16 vs onnxruntime")


def test_float16_through_a_graph(engine, rng):
    """float16 in, float32 math, float16 out: Cast at both ends of a small graph."""
    nodes = [helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
             helper.make_node("Relu", ["xf"], ["r"]),
             helper.make_node("Add", ["r", "b"], ["s"]),
             helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT16)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["B", 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["B", 7])],
        initializer=[helper.make_tensor("b", TensorProto.FLOAT, [7],
                                        rand(rng, (7,)).tolist())])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    for batch in (1, 5):
        x = rand(rng, (batch, 7)).astype(F16)
        got = run_kaiwu(engine, m, {"x": x})["y"]
        _assert_same(got, run_ort(m, {"x": x})["y"], f"graph batch {batch}")
