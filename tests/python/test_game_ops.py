"""Game-policy ops of kaiwu_infer against onnxruntime (CPU EP).

Covers Resize (nearest with every nearest_mode, linear and cubic with every
coordinate_transformation_mode, upsample and downsample, scales and sizes, axes,
keep_aspect_ratio_policy, tf_crop_and_resize), OneHot, GatherND, ScatterND,
ScatterElements, TopK, CumSum, float64 / diagonal Einsum and MaxPool's Indices
output.  Shape operands (scales, sizes, roi, K, depth, CumSum's axis) are
initializers unless a case says otherwise.  Data is fresh per test (conftest.rng).

Tolerances: float32 rtol=1e-4, atol=1e-5 and float64 rtol=1e-9, atol=1e-12
(helpers defaults); ints, bools and indices exact.  Out-of-range indices must
raise kaiwu_infer.ExecutionError.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers import rand, run_ort, single_op_model

F32, F64, I64, I32, U8, BOOL = np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_


def _resize(x_shape, dtype=F32, *, scales=None, sizes=None, roi=None, opset=18, **attrs):
    inits, names = {}, ["X", "", "", ""]
    if roi is not None:
        inits["roi"] = np.asarray(roi, F32)
        names[1] = "roi"
    if scales is not None:
        inits["scales"] = np.asarray(scales, F32)
        names[2] = "scales"
    if sizes is not None:
        inits["sizes"] = np.asarray(sizes, I64)
        names[3] = "sizes"
    while names[-1] == "":
        names.pop()
    return single_op_model("Resize", [("X", dtype, x_shape)], input_names=names,
                           initializers=inits, opset=opset, **attrs)


# ===================================================================================
# Resize
# ===================================================================================
LINEAR_COORD = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]
# (input shape, sizes): upsample, downsample, mixed
SIZES = [((2, 3, 5, 7), (2, 3, 11, 13)), ((1, 4, 12, 9), (1, 4, 5, 4)), ((2, 2, 6, 6), (2, 2, 9, 4))]


@pytest.mark.parametrize("coord", LINEAR_COORD)
@pytest.mark.parametrize("shapes", SIZES, ids=["up", "down", "mixed"])
def test_resize_bilinear_sizes(check, rng, coord, shapes):
    x_shape, sizes = shapes
    m = _resize(x_shape, sizes=sizes, mode="linear", coordinate_transformation_mode=coord)
    check(m, {"X": rand(rng, x_shape)})


@pytest.mark.parametrize("coord", LINEAR_COORD + ["half_pixel_symmetric"])
@pytest.mark.parametrize("scales", [(1, 1, 2.0, 1.5), (1, 1, 0.5, 0.75), (1, 1, 0.6, 2.5)],
                         ids=["up", "down", "mixed"])
def test_resize_bilinear_scales(check, rng, coord, scales):
    m = _resize((2, 3, 8, 10), scales=scales, mode="linear", coordinate_transformation_mode=coord,
                opset=19)
    check(m, {"X": rand(rng, (2, 3, 8, 10))})


def _check_reference(engine, model, feeds, **tol):
    """onnx's reference evaluator, for dtypes onnxruntime's Resize lacks (float64, int64)."""
    from onnx.reference import ReferenceEvaluator

    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = engine.Session(model).run(feeds)["y0"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, **tol)


def test_resize_bilinear_float64_and_opset13(engine, rng):
    m = _resize((1, 2, 4, 5), F64, sizes=(1, 2, 7, 3), opset=13, mode="linear")
    # coordinates and weights are float32 in the engine (as in onnxruntime), float64 in the reference
    _check_reference(engine, m, {"X": rand(rng, (1, 2, 4, 5), F64)}, rtol=1e-6, atol=1e-6)


def test_resize_linear_other_ranks(check, rng):
    m = _resize((3, 7), sizes=(5, 12), mode="linear")  # plain 2-D
    check(m, {"X": rand(rng, (3, 7))})
    m = _resize((1, 2, 3, 4, 5), sizes=(1, 2, 5, 3, 8), mode="linear")  # trilinear
    check(m, {"X": rand(rng, (1, 2, 3, 4, 5))})


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric", "align_corners", "tf_half_pixel_for_nn",
                                   "pytorch_half_pixel"])
def test_resize_nearest(check, rng, nearest_mode, coord):
    for x_shape, sizes in SIZES[:2]:
        m = _resize(x_shape, sizes=sizes, mode="nearest", nearest_mode=nearest_mode,
                    coordinate_transformation_mode=coord)
        check(m, {"X": rand(rng, x_shape)})
    m = _resize((1, 2, 4, 6), scales=(1, 1, 2.0, 0.5), mode="nearest", nearest_mode=nearest_mode,
                coordinate_transformation_mode=coord)
    check(m, {"X": rand(rng, (1, 2, 4, 6))})


@pytest.mark.parametrize("dtype", [I32, U8])
def test_resize_nearest_int(check, rng, dtype):
    m = _resize((2, 3, 4, 5), dtype, scales=(1, 1, 2.0, 3.0), mode="nearest")
    check(m, {"X": rand(rng, (2, 3, 4, 5), dtype)})


def test_resize_nearest_int64(engine, rng):
    m = _resize((2, 3, 4, 5), I64, scales=(1, 1, 2.0, 0.5), mode="nearest")
    _check_reference(engine, m, {"X": rand(rng, (2, 3, 4, 5), I64)}, rtol=0, atol=0)


@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"])
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_resize_cubic(check, rng, coord, exclude_outside):
    for x_shape, sizes in SIZES[:2]:
        m = _resize(x_shape, sizes=sizes, mode="cubic", coordinate_transformation_mode=coord,
                    exclude_outside=exclude_outside, cubic_coeff_a=-0.5)
        check(m, {"X": rand(rng, x_shape)})


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_axes_and_aspect_policy(check, rng, policy):
    m = _resize((2, 3, 6, 9), sizes=(10, 12), mode="linear", axes=[2, 3],
                keep_aspect_ratio_policy=policy)
    check(m, {"X": rand(rng, (2, 3, 6, 9))})


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_resize_tf_crop_and_resize(check, rng, mode):
    m = _resize((1, 2, 6, 8), sizes=(1, 2, 5, 7), roi=(0, 0, -0.2, 0.3, 1, 1, 0.7, 1.2), mode=mode,
                coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.5)
    check(m, {"X": rand(rng, (1, 2, 6, 8))})


def test_resize_scales_from_graph_input(check, rng):
    """sizes fed at run time: a shape operand keyed by value, not an initializer."""
    m = single_op_model("Resize", [("X", F32, (1, 3, 4, 4)), ("sizes", I64, (4,))],
                        input_names=["X", "", "", "sizes"], mode="linear")
    check(m, {"X": rand(rng, (1, 3, 4, 4)), "sizes": np.array([1, 3, 7, 5], I64)})


def test_resize_antialias_refused(engine):
    """Refused when the plan is built, i.e. at the first run: the session reports plan-time
    model errors there as InputError ("the input shapes ... do not fit the model")."""
    m = _resize((1, 1, 8, 8), scales=(1, 1, 0.5, 0.5), mode="linear", antialias=1)
    with pytest.raises(engine.InputError, match="antialias=1 is not supported"):
        engine.Session(m).run({"X": np.ones((1, 1, 8, 8), F32)})


# ===================================================================================
# OneHot
# ===================================================================================
@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("idx_dtype,depth_dtype,val_dtype", [(I64, I64, F32), (I32, F32, F32),
                                                              (F32, F32, F32), (I64, I64, I64)])
def test_onehot(check, rng, axis, idx_dtype, depth_dtype, val_dtype):
    depth = 7
    idx = rng.integers(-depth, depth, size=(3, 5)).astype(idx_dtype)
    idx[0, 0], idx[1, 1] = depth, -depth - 3  # out of range: an all-off row, per the spec
    m = single_op_model("OneHot", [("idx", idx_dtype, (3, 5))], input_names=["idx", "depth", "values"],
                        initializers={"depth": np.array(depth, depth_dtype),
                                      "values": np.array([-2, 5], val_dtype)}, axis=axis, opset=13)
    check(m, {"idx": idx})


# ===================================================================================
# GatherND / ScatterND / ScatterElements
# ===================================================================================
GND_CASES = [  # data shape, indices shape, batch_dims
    ((5, 4, 3), (6, 1), 0), ((5, 4, 3), (2, 3, 2), 0), ((5, 4, 3), (7, 3), 0),
    ((3, 5, 4), (3, 2, 1), 1), ((2, 3, 5, 4), (2, 3, 6, 2), 2), ((4, 6), (4, 2, 1), 1),
]


@pytest.mark.parametrize("data_shape,idx_shape,b", GND_CASES, ids=[str(c) for c in range(len(GND_CASES))])
@pytest.mark.parametrize("idx_dtype", [I64])  # ONNX GatherND takes int64 indices only
def test_gather_nd(check, rng, data_shape, idx_shape, b, idx_dtype):
    k = idx_shape[-1]
    dims = np.array(data_shape[b:b + k])
    idx = rng.integers(-dims, dims, size=idx_shape).astype(idx_dtype)
    m = single_op_model("GatherND", [("x", F32, data_shape), ("i", idx_dtype, idx_shape)], batch_dims=b)
    check(m, {"x": rand(rng, data_shape), "i": idx})


def _unique_tuples(rng, dims, n):
    flat = rng.permutation(int(np.prod(dims)))[:n]
    return np.stack(np.unravel_index(flat, dims), axis=-1).astype(I64)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("data_shape,k", [((6, 5, 4), 1), ((6, 5, 4), 2), ((6, 5), 2)])
def test_scatter_nd(check, rng, reduction, data_shape, k):
    n = 4
    if reduction == "none":
        idx = _unique_tuples(rng, data_shape[:k], n)
    else:  # duplicates on purpose
        idx = rng.integers(0, np.array(data_shape[:k]), size=(n, k)).astype(I64)
        idx[1] = idx[0]
    upd_shape = (n,) + data_shape[k:]
    m = single_op_model("ScatterND", [("x", F32, data_shape), ("i", I64, (n, k)), ("u", F32, upd_shape)],
                        reduction=reduction, opset=18)
    check(m, {"x": rand(rng, data_shape), "i": idx, "u": rand(rng, upd_shape)})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(check, rng, reduction, axis):
    data_shape, idx_shape = (5, 6, 7), (3, 4, 5)
    ax = axis % 3
    if reduction == "none":  # distinct targets along the axis
        idx = np.argsort(rng.random(idx_shape[:ax] + (data_shape[ax],) + idx_shape[ax + 1:]), axis=ax)
        idx = np.take(idx, np.arange(idx_shape[ax]), axis=ax) - data_shape[ax] * (rng.random(idx_shape) < 0.3)
    else:
        idx = rng.integers(-data_shape[ax], data_shape[ax], size=idx_shape)
    m = single_op_model("ScatterElements", [("x", F32, data_shape), ("i", I64, idx_shape),
                                            ("u", F32, idx_shape)], axis=axis, reduction=reduction, opset=18)
    check(m, {"x": rand(rng, data_shape), "i": idx.astype(I64), "u": rand(rng, idx_shape)})


def test_scatter_elements_int(check, rng):
    m = single_op_model("ScatterElements", [("x", I32, (4, 5)), ("i", I32, (4, 3)), ("u", I32, (4, 3))],
                        axis=1, reduction="add", opset=18)
    check(m, {"x": rand(rng, (4, 5), I32), "i": rng.integers(0, 5, (4, 3)).astype(I32),
              "u": rand(rng, (4, 3), I32)})


def _runtime_error(engine, model, feeds):
    with pytest.raises(engine.ExecutionError, match="out of range"):
        engine.Session(model).run(feeds)


def test_out_of_range_indices_are_execution_errors(engine, rng):
    m = single_op_model("GatherND", [("x", F32, (4, 3)), ("i", I64, (2, 2))])
    _runtime_error(engine, m, {"x": rand(rng, (4, 3)), "i": np.array([[0, 0], [1, 3]], I64)})
    _runtime_error(engine, m, {"x": rand(rng, (4, 3)), "i": np.array([[-5, 0], [1, 1]], I64)})
    m = single_op_model("ScatterND", [("x", F32, (4, 3)), ("i", I64, (2, 1)), ("u", F32, (2, 3))])
    _runtime_error(engine, m, {"x": rand(rng, (4, 3)), "i": np.array([[1], [4]], I64),
                               "u": rand(rng, (2, 3))})
    m = single_op_model("ScatterElements", [("x", F32, (4, 3)), ("i", I64, (2, 2)), ("u", F32, (2, 2))],
                        axis=1)
    _runtime_error(engine, m, {"x": rand(rng, (4, 3)), "i": np.array([[0, 1], [2, -4]], I64),
                               "u": rand(rng, (2, 2))})


# ===================================================================================
# TopK / CumSum
# ===================================================================================
@pytest.mark.parametrize("shape,axis,k", [((4, 9), -1, 3), ((3, 8, 5), 1, 8), ((6, 4, 2), 0, 2),
                                          ((5, 20), 1, 0)])
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("dtype", [F32, I64, I32])
def test_topk(check, rng, shape, axis, k, largest, dtype):
    x = rng.integers(-3, 4, size=shape).astype(dtype)  # many ties: lower index first
    if dtype == F32:
        x = x + (rng.random(shape) < 0.5).astype(F32) * 0.5
    m = single_op_model("TopK", [("x", dtype, shape)], n_out=2, input_names=["x", "k"],
                        initializers={"k": np.array([k], I64)}, axis=axis, largest=largest)
    check(m, {"x": x})


def test_topk_unsorted_is_a_valid_topk(engine, rng):
    """sorted=0 leaves the order open: compare as sets of (index, value) per row."""
    m = single_op_model("TopK", [("x", F32, (5, 12))], n_out=2, input_names=["x", "k"],
                        initializers={"k": np.array([4], I64)}, sorted=0)
    x = rand(rng, (5, 12))
    ref = run_ort(m, {"x": x})
    got = engine.Session(m).run({"x": x})
    for r in range(5):
        assert sorted(got["y1"][r].tolist()) == sorted(ref["y1"][r].tolist())
        np.testing.assert_array_equal(np.take(x[r], got["y1"][r]), got["y0"][r])


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [F32, F64, I32, I64])
def test_cumsum(check, rng, exclusive, reverse, axis, dtype):
    shape = (4, 6, 300)
    m = single_op_model("CumSum", [("x", dtype, shape)], input_names=["x", "axis"],
                        initializers={"axis": np.array(axis, I32 if dtype == I32 else I64)},
                        exclusive=exclusive, reverse=reverse)
    check(m, {"x": rand(rng, shape, dtype)})


# ===================================================================================
# Einsum (float64, diagonals) and MaxPool Indices
# ===================================================================================
EINSUM = [("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 4)]), ("i,i", [(6,), (6,)]),
          ("ii->i", [(4, 4)]), ("ii", [(5, 5)]), ("bii->bi", [(3, 4, 4)]), ("bii", [(3, 4, 4)]),
          ("iij,jk->ik", [(3, 3, 4), (4, 2)]), ("ij,jj->i", [(3, 4), (4, 4)]),
          ("bij,bkj->bik", [(2, 3, 4), (2, 5, 4)]), ("...ii->...i", [(2, 3, 3)])]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("eq,shapes", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum_f64_and_diagonals(check, rng, eq, shapes, dtype):
    ins = [(f"x{i}", dtype, s) for i, s in enumerate(shapes)]
    m = single_op_model("Einsum", ins, equation=eq)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == F32 else {}
    check(m, {f"x{i}": rand(rng, s, dtype) for i, s in enumerate(shapes)}, **tol)


MAXPOOL = [  # input shape, attrs
    ((2, 3, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 6, 6), dict(kernel_shape=[2, 3], strides=[1, 2])),
    ((1, 2, 9, 7), dict(kernel_shape=[3, 2], dilations=[2, 1], ceil_mode=1, strides=[2, 2])),
    ((2, 3, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 2])),
    ((1, 2, 4, 5, 6), dict(kernel_shape=[2, 2, 3], strides=[2, 1, 2], pads=[0, 1, 1, 1, 0, 1])),
]


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("shape,attrs", MAXPOOL, ids=[str(i) for i in range(len(MAXPOOL))])
def test_maxpool_indices(check, rng, shape, attrs, storage_order):
    m = single_op_model("MaxPool", [("X", F32, shape)], n_out=2, storage_order=storage_order, **attrs)
    check(m, {"X": rand(rng, shape)})


def test_maxpool_indices_ties_take_first(check, rng):
    x = rng.integers(0, 3, size=(1, 2, 6, 6)).astype(F32)
    m = single_op_model("MaxPool", [("X", F32, (1, 2, 6, 6))], n_out=2, kernel_shape=[3, 3])
    check(m, {"X": x})


# ===================================================================================
# Several threads: the same results as onnxruntime (and so as one thread)
# ===================================================================================
def test_game_ops_with_threads(check, rng):
    m = _resize((4, 8, 9, 11), sizes=(4, 8, 20, 17), mode="linear")
    check(m, {"X": rand(rng, (4, 8, 9, 11))}, threads=3)
    m = _resize((4, 8, 9, 11), sizes=(4, 8, 20, 17), mode="cubic")
    check(m, {"X": rand(rng, (4, 8, 9, 11))}, threads=3)
    m = single_op_model("TopK", [("x", F32, (64, 50))], n_out=2, input_names=["x", "k"],
                        initializers={"k": np.array([40], I64)})  # the partial-sort path
    check(m, {"x": rng.integers(-5, 5, (64, 50)).astype(F32)}, threads=3)
    m = single_op_model("ScatterElements", [("x", F32, (16, 40)), ("i", I64, (16, 30)), ("u", F32, (16, 30))],
                        axis=1, reduction="add", opset=18)
    check(m, {"x": rand(rng, (16, 40)), "i": rng.integers(0, 40, (16, 30)).astype(I64),
              "u": rand(rng, (16, 30))}, threads=3)
    m = single_op_model("ScatterND", [("x", F32, (50, 600)), ("i", I64, (20, 1)), ("u", F32, (20, 600))],
                        reduction="add", opset=18)
    check(m, {"x": rand(rng, (50, 600)), "i": rng.integers(0, 50, (20, 1)).astype(I64),
              "u": rand(rng, (20, 600))}, threads=3)
    m = single_op_model("CumSum", [("x", F32, (3, 500, 700))], input_names=["x", "axis"],
                        initializers={"axis": np.array(1, I64)})
    check(m, {"x": rand(rng, (3, 500, 700))}, threads=3, rtol=1e-4, atol=1e-4)
