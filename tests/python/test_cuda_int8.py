"""Int8 (QDQ) models on the CUDA backend: QuantizeLinear / DequantizeLinear / QLookup kernels
and the fused integer Conv / Gemm (QLinearFused on int8 tensor cores, int32 accumulation, the
requantize epilogue on the device), each against the CPU backend's int8 run of the same model
and against onnxruntime running the QDQ graph literally (optimizations off: float math on
dequantized values).

Tolerance: one quantization step of the output (the scale of the DequantizeLinear that writes
it) against both oracles for single ops: the GPU and the CPU integer paths compute the same int32
sums, but the float epilogue (FMA contraction) may round a value at a tie to the other side.
Whole policies: within one step of the CPU int8 run; against onnxruntime at most 2 steps and
within one step for 99% of the elements (a tie flipped in an inner layer moves an output by more
than a step; kaiwu's CPU run shows the same). Q -> DQ and QLookup agree with the CPU exactly.

Sizes are odd on purpose (reduction lengths not a multiple of 4 or 16, channel counts that leave
partial tiles, 300 rows over several row tiles); weights use the full int8 range (with -128),
activations saturate at both ends, uint8 and int8 activations with nonzero zero points, weight
zero points, float outputs (no Q after the op). Policies (tests/python/policies.py quantized by
kaiwu_infer.quantize) at batch 1, 7, 64, 300; refit of a quantized GPU session against a fresh
one; CUDA graphs on and off; device-resident runs make no host round trip; channels-last integer
convs (the device default) equal to NCHW ones.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kaiwu_infer as ki
import policies
import test_quant_fused as tqf
import test_quant_policies as tqp

pytestmark = pytest.mark.skipif(not ki.cuda_available(), reason="no CUDA backend or device")

F32 = np.float32


def _runs(model, feeds):
    """(cuda session, its outputs, CPU outputs, onnxruntime literal outputs)."""
    data = model if isinstance(model, bytes) else model.SerializeToString()
    sess = ki.Session(data, device="cuda")
    got = {k: np.array(v) for k, v in sess.run(feeds).items()}
    cpu = ki.Session(data, threads=2).run(feeds)
    ref = tqf._ort_literal(onnx.load_from_string(data), feeds) if not isinstance(model, bytes) else None
    return sess, got, cpu, ref


def _check_fused(model, step, x):
    sess, got, cpu, _ = _runs(model, {"x": x})
    d = sess.describe()
    assert "QLinearFused" in d and "device: cuda" in d, d
    ref = tqf._ort_literal(model, {"x": x})
    err_ref = np.abs(got["y"] - ref).max()
    err_cpu = np.abs(got["y"] - cpu["y"]).max()
    assert err_ref <= step * 1.001, f"vs onnxruntime: {err_ref} > step {step}"
    assert err_cpu <= step * 1.001, f"vs CPU: {err_cpu} > step {step}"
    # Ties aside the integer paths agree: most elements are equal.
    assert np.mean(got["y"] == cpu["y"]) > 0.99


def _with_weight_zero_points(model, rng):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for i in m.graph.initializer:
        if i.name == "wz":
            n = numpy_helper.to_array(i).shape[0]
            i.CopyFrom(numpy_helper.from_array(rng.integers(-20, 21, n).astype(np.int8), "wz"))
    return m


def _float_output(model):
    """Drops the final Q -> DQ: the fused node writes float32."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes = list(m.graph.node)[:-2]
    last = nodes[-1].output[0]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    m.graph.output[0].name = last
    for n in m.graph.node:
        for k, o in enumerate(n.output):
            if o == last:
                n.output[k] = "y"
    m.graph.output[0].name = "y"
    return m


# Device sessions run integer convs channels-last (16-byte row pieces where C, W, stride and pad
# allow, else bytes): pieces of one pixel in the padding and dilated, of 4 pixels in the padding.
CONV_CASES = tqf.CONV_CASES + [
    ((2, 16, 9, 11), (20, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((3, 32, 7, 6), (9, 32, 3, 3), dict(pads=[2, 2, 2, 2], dilations=[2, 2])),
    ((2, 4, 20, 24), (6, 4, 8, 8), dict(strides=[4, 4], pads=[4, 4, 4, 4])),
    ((1, 8, 10, 12), (17, 8, 4, 2), dict(strides=[2, 2], pads=[2, 2, 1, 0])),
]


@pytest.mark.parametrize("x_dt,x_zp", tqf.ACT)
@pytest.mark.parametrize("with_min", [False, True])
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_fused_conv(rng, x_dt, x_zp, with_min, case):
    xs, wshape, attrs = CONV_CASES[case]
    w = tqf._weights(rng, wshape, with_min)
    bias = rng.uniform(-1, 1, wshape[0]).astype(F32)
    model, step = tqf._qdq_model("conv", xs, w, bias, x_dt, x_zp, attrs, relu=case % 2 == 0)
    _check_fused(model, step, tqf._inputs(rng, xs))


# k % 16 == 0: 16-byte loads of X, else bytes; few row tiles and k >= 4 tiles of 64: split k
GEMM_CASES = [(1, 37, 21), (7, 64, 16), (33, 129, 5), (6, 3, 40), (19, 301, 1), (64, 256, 18),
              (13, 100, 25), (300, 64, 70), (300, 96, 33), (300, 131, 64), (5, 2000, 70), (1, 3136, 512)]


@pytest.mark.parametrize("x_dt,x_zp", tqf.ACT)
@pytest.mark.parametrize("rows,k,n", GEMM_CASES)
def test_fused_gemm(rng, x_dt, x_zp, rows, k, n):
    w = tqf._weights(rng, (n, k), with_min=True)
    bias = rng.uniform(-1, 1, n).astype(F32)
    model, step = tqf._qdq_model("gemm", (rows, k), w, bias, x_dt, x_zp, relu=rows % 2 == 1)
    _check_fused(model, step, tqf._inputs(rng, (rows, k)))


WZP_CASES = [
    ("gemm", (70, 45), (19, 45), None),                      # one k tile
    ("gemm", (9, 1000), (19, 1000), None),                   # split k: row sums in scratch
    ("conv", (3, 5, 11, 9), (13, 5, 3, 3), dict(pads=[1, 2, 0, 1], strides=[1, 2])),  # tap table
    ("conv", (2, 520, 5, 4), (7, 520, 3, 3), dict(pads=[1, 1, 1, 1])),  # k = 4680: no table
]


@pytest.mark.parametrize("case", range(len(WZP_CASES)))
@pytest.mark.parametrize("x_dt,x_zp", [(np.uint8, 37), (np.int8, -5)])
def test_weight_zero_points_and_float_output(rng, case, x_dt, x_zp):
    """Nonzero per-channel weight zero points (the epilogue subtracts w_zp * sum(x) of the row,
    padding taps counted at the x zero point), then the same op with a float32 output."""
    kind, xs, wshape, attrs = WZP_CASES[case]
    w = tqf._weights(rng, wshape, with_min=False)
    bias = rng.uniform(-1, 1, wshape[0]).astype(F32)
    model, step = tqf._qdq_model(kind, xs, w, bias, x_dt, x_zp, attrs, relu=True)
    model = _with_weight_zero_points(model, rng)
    x = tqf._inputs(rng, xs)
    _check_fused(model, step, x)
    fm = _float_output(model)
    sess, got, cpu, _ = _runs(fm, {"x": x})
    assert "QLinearFused" in sess.describe()
    ref = tqf._ort_literal(fm, {"x": x})
    np.testing.assert_allclose(got["y"], cpu["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["y"], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("qdt", [np.uint8, np.int8])
@pytest.mark.parametrize("axis", [None, 1, -1])
@pytest.mark.parametrize("batch", [1, 7, 300])
def test_quantize_dequantize(rng, qdt, axis, batch):
    """x -> QuantizeLinear -> DequantizeLinear per tensor or per axis, saturating values and ties
    (x / scale = k + 0.5): bit-identical to the CPU kernels, within one step of onnxruntime."""
    shape = [batch, 5, 7]
    n = 1 if axis is None else shape[axis]
    scale = rng.uniform(0.02, 0.1, n).astype(F32)
    zp = rng.integers(-10, 10, n) + (0 if qdt == np.int8 else 128)
    if axis is None:
        scale, zp = scale[0], zp[0]
    inits = [numpy_helper.from_array(np.asarray(scale, F32), "s"),
             numpy_helper.from_array(np.asarray(zp).astype(qdt), "z")]
    kw = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **kw),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **kw)]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=tqf.IR)
    x = rng.uniform(-12, 12, shape).astype(F32)
    s_b = np.asarray(scale, F32) if axis is None else scale[:, None] if axis == 1 else scale
    x.flat[::5] = ((np.round(x / s_b) + 0.5) * s_b).astype(F32).flat[::5]  # ties
    sess, got, cpu, ref = _runs(model, {"x": x})
    assert "QuantizeLinear" in sess.describe()
    np.testing.assert_array_equal(got["y"], cpu["y"])
    assert np.abs(got["y"] - ref).max() <= np.max(scale) * 1.001


@pytest.mark.parametrize("shape", [(3, 37), (1001, 7), (5,), (2, 2)])
def test_lookup(rng, shape):
    """QLookup (DQ -> Tanh -> Q as a byte table): word and byte tails; equal to the CPU's."""
    model = tqf.lookup_model(shape)
    x = rng.uniform(-5, 5, shape).astype(F32)
    sess, got, cpu, ref = _runs(model, {"x": x})
    assert "QLookup" in sess.describe()
    np.testing.assert_array_equal(got["y"], cpu["y"])
    assert np.abs(got["y"] - ref).max() <= (1 / 127) * 1.001


# ---- whole quantized policies

QPOLICIES = ["mlp", "atari_cnn", "conv_bn"]


@pytest.fixture(scope="module")
def qmodels(tmp_path_factory):
    out = {}
    d = tmp_path_factory.mktemp("cuda_int8")
    for name in QPOLICIES:
        fp32 = tqp._export(name, str(d / f"{name}.onnx"))
        obs = [tqp._inputs(name, 16, 100 + i) for i in range(4)]
        for act in ("uint8", "int8"):
            out[name, act] = ki.quantize(fp32, obs, str(d / f"{name}_{act}.onnx"), progress=False,
                                         activation_type=act)
    return out


@pytest.mark.parametrize("name", QPOLICIES)
@pytest.mark.parametrize("act", ["uint8", "int8"])
@pytest.mark.parametrize("batch", [1, 7, 64, 300])
def test_policy_on_gpu_within_one_step(qmodels, name, act, batch):
    path = qmodels[name, act]
    feeds = tqp._inputs(name, batch, 7 + batch)
    ref = tqp._ort_literal(path, feeds)
    steps = tqp._steps(path)
    sess = ki.Session(path, device="cuda")
    d = sess.describe()
    assert "QLinearFused" in d and "device: cuda" in d, d
    got = sess.run(feeds)
    cpu = ki.Session(path, threads=2).run(feeds)
    for k, r in ref.items():
        g = np.array(got[k])
        # A tie rounded the other way in an inner layer moves an output by a step or two
        # (kaiwu's CPU int8 run does the same; the integer sums agree): at most 2 steps, and
        # within one step almost everywhere.
        err = np.abs(g - r)
        assert err.max() <= 2 * steps[k] * 1.001, f"{k} vs onnxruntime: {err.max() / steps[k]} steps"
        assert np.mean(err > steps[k] * 1.001) < 0.01, f"{k} vs onnxruntime"
        assert np.abs(g - cpu[k]).max() <= steps[k] * 1.001, f"{k} vs CPU"


@pytest.mark.parametrize("name", ["atari_cnn", "conv_bn"])
@pytest.mark.parametrize("act", ["uint8", "int8"])
def test_channels_last_integer_convs_equal_nchw(qmodels, monkeypatch, name, act):
    """Device sessions run the integer convs channels-last (transposes only at the edges of the
    conv stack); KAIWU_INT8_NHWC=0 keeps them NCHW: the same integer sums and epilogue, so the
    same bytes out."""
    path = qmodels[name, act]
    feeds = tqp._inputs(name, 5, 3)
    sess = ki.Session(path, device="cuda")
    assert "layout_nhwc_int8" in sess.describe()
    nhwc = {k: np.array(v) for k, v in sess.run(feeds).items()}
    monkeypatch.setenv("KAIWU_INT8_NHWC", "0")
    nchw_sess = ki.Session(path, device="cuda")
    assert "layout_nhwc_int8" not in nchw_sess.describe()
    nchw = nchw_sess.run(feeds)
    for k in nhwc:
        np.testing.assert_array_equal(nhwc[k], np.array(nchw[k]))


def test_split_k_equals_one_pass(qmodels, monkeypatch):
    """The dense layers of small batches split k over blocks (int32 partial sums in scratch, one
    epilogue kernel); KAIWU_INT8_SPLIT_K=0 runs them in one pass: the same integers, the same
    outputs."""
    path = qmodels["atari_cnn", "uint8"]
    feeds = tqp._inputs("atari_cnn", 3, 2)
    split = {k: np.array(v) for k, v in ki.Session(path, device="cuda").run(feeds).items()}
    monkeypatch.setenv("KAIWU_INT8_SPLIT_K", "0")
    whole = ki.Session(path, device="cuda").run(feeds)
    for k in split:
        np.testing.assert_array_equal(np.array(whole[k]), split[k])


def test_device_resident_run_makes_no_host_round_trip(qmodels):
    """Every node of the quantized policy runs on the device: torch CUDA feeds in, device
    outputs out, no host copy (a node left to the host would need one each way)."""
    import torch

    path = qmodels["atari_cnn", "uint8"]
    feeds = tqp._inputs("atari_cnn", 33, 41)
    sess = ki.Session(path, device="cuda")
    want = {k: np.array(v) for k, v in sess.run(feeds).items()}
    dev = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
    torch.cuda.synchronize()
    sess.io_stats(reset=True)
    got = sess.run(dev, output_device="cuda")
    st = sess.io_stats()
    assert st["runs"] == 1
    assert st["h2d_copies"] == st["d2h_copies"] == st["staging_copies"] == 0, st
    for k, ref in want.items():
        np.testing.assert_array_equal(torch.from_dlpack(got[k]).cpu().numpy(), ref)


def test_graph_replay_equals_direct_launches(qmodels, monkeypatch):
    path = qmodels["atari_cnn", "int8"]
    feeds = tqp._inputs("atari_cnn", 9, 11)
    replayed = ki.Session(path, device="cuda")
    first = {k: np.array(v) for k, v in replayed.run(feeds).items()}
    again = replayed.run(feeds)
    assert replayed.io_stats()["graph_launches"] >= 1
    monkeypatch.setenv("KAIWU_CUDA_GRAPHS", "0")
    direct_sess = ki.Session(path, device="cuda")
    direct = direct_sess.run(feeds)
    assert direct_sess.io_stats()["graph_launches"] == 0
    for k in first:
        np.testing.assert_array_equal(np.array(again[k]), first[k])
        np.testing.assert_array_equal(np.array(direct[k]), first[k])


@pytest.mark.parametrize("name", ["atari_cnn", "mlp"])
def test_refit_quantized_gpu_session_equals_fresh(qmodels, tmp_path, name):
    """New int8 weights and scales by name: the packed operands are rebuilt (on the host) and
    uploaded as one new weight version; the result equals a fresh session of the changed model."""
    path = qmodels[name, "uint8"]
    m = onnx.load(path)
    rng = np.random.default_rng(5)
    new = {}
    for i in m.graph.initializer:
        a = numpy_helper.to_array(i)
        if i.name.endswith("weight_quantized"):
            new[i.name] = rng.integers(-128, 128, a.shape).astype(np.int8)
        elif i.name.endswith("weight_scale"):
            new[i.name] = (a * rng.uniform(0.5, 1.5, a.shape)).astype(F32)
    assert new
    sess = ki.Session(path, device="cuda")
    feeds = tqp._inputs(name, 6, 3)
    before = {k: np.array(v) for k, v in sess.run(feeds).items()}
    sess.refit(new, strict=False)
    p2 = tqp.save_with_weights(m, new, str(tmp_path / "changed.onnx"))
    after = sess.run(feeds)
    fresh = ki.Session(p2, device="cuda").run(feeds)
    cpu = ki.Session(p2, threads=2).run(feeds)
    steps = tqp._steps(p2)
    changed = False
    for k in fresh:
        np.testing.assert_array_equal(np.array(after[k]), np.array(fresh[k]))
        assert np.abs(np.array(after[k]) - cpu[k]).max() <= steps[k] * 1.001
        changed = changed or not np.array_equal(np.array(after[k]), before[k])
    assert changed


def test_refused_refit_keeps_quantized_weights(qmodels):
    path = qmodels["mlp", "uint8"]
    m = onnx.load(path)
    name = next(i.name for i in m.graph.initializer if i.name.endswith("weight_quantized"))
    shape = numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == name)).shape
    sess = ki.Session(path, device="cuda")
    feeds = tqp._inputs("mlp", 5, 1)
    before = {k: np.array(v) for k, v in sess.run(feeds).items()}
    bad = np.zeros((shape[0] + 1,) + shape[1:], np.int8)
    with pytest.raises(ki.RefitError, match=name):
        sess.refit({name: bad}, strict=False)
    for k, v in sess.run(feeds).items():
        np.testing.assert_array_equal(np.array(v), before[k])


# ---- what the device does not run

def test_3d_integer_conv_is_refused_naming_the_node(rng):
    w = tqf._weights(rng, (4, 3, 2, 2, 2), with_min=False)
    model, _ = tqf._qdq_model("conv", (2, 3, 5, 5, 5), w, rng.uniform(-1, 1, 4).astype(F32), np.uint8, 0)
    with pytest.raises(ki.UnsupportedOpError, match="3-D integer convolution is not supported by the CUDA"):
        sess = ki.Session(model.SerializeToString(), device="cuda")
        assert "QLinearFused" in sess.describe()
        sess.run({"x": tqf._inputs(rng, (2, 3, 5, 5, 5))})
    # the CPU backend runs it
    assert ki.Session(model.SerializeToString()).run({"x": tqf._inputs(rng, (2, 3, 5, 5, 5))})["y"].shape == (2, 4, 4, 4, 4)


def test_dynamic_quantization_is_refused_with_the_cpu_hint(tmp_path):
    fp32 = tqp._export("mlp", str(tmp_path / "mlp.onnx"))
    dyn = ki.quantize(fp32, output_path=str(tmp_path / "dyn.onnx"), dynamic=True, progress=False)
    with pytest.raises(ki.UnsupportedOpError, match=r"DynamicQuantizeLinear.*device='cpu'"):
        ki.Session(dyn, device="cuda")
