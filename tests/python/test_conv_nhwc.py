"""CPU sessions run float32 2-D convs (group 1, no dilation) and max pools channels-last
(passes/layout_nhwc.cc with backends/cpu/conv_nhwc.*): kaiwu NhwcConv over the weight packed
into GEMM panels by static nodes (PrepackNhwcConvWeights), NhwcMaxPool, transposes only at
the edges. Against a float64 reference and onnxruntime at odd sizes (channel tails inside a
16-wide panel, pixel tails of every tile height, asymmetric pads, strides, rectangular
kernels), every fused epilogue, 1 and several threads (bit-identical), both instruction-set
paths, refit after prepacking equal to a fresh session, and where it must not fire."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from helpers import assert_outputs_close, make_model, rand, run_ort
from test_passes import fired, ops_after, refit_matches_fresh

TOL = dict(rtol=1e-4, atol=1e-4)


def conv_ref(x, w, b, stride, pads):
    """float64 NCHW conv: x [N, C, H, W], w [M, C, KH, KW], pads [top, left, bottom, right]."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    cols = np.empty((n, c, kh, kw, oh, ow))
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = x[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
    y = np.einsum("nckloq,mckl->nmoq", cols, w.astype(np.float64))
    return y + (0 if b is None else b.astype(np.float64)[None, :, None, None])


ACTS = {None: lambda v: v, "Relu": lambda v: np.maximum(v, 0), "Tanh": np.tanh,
        "Sigmoid": lambda v: 1 / (1 + np.exp(-v)), "LeakyRelu": lambda v: np.where(v > 0, v, 0.01 * v)}


def conv_model(c, m, kh, kw, stride, pads, act, bias=True, seed=0):
    """The conv under test (W, B, `act`) as output "y", then a second conv (3x3, pad 1, 8
    channels, Relu) as output "z": CPU sessions convert chains of two or more convs."""
    rng = np.random.default_rng(seed)
    inits = {"W": (rng.standard_normal((m, c, kh, kw)) / np.sqrt(c * kh * kw)).astype(np.float32),
             "W2": (rng.standard_normal((8, m, 3, 3)) / np.sqrt(9 * m)).astype(np.float32)}
    if bias:
        inits["B"] = rng.standard_normal(m).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "W"] + (["B"] if bias else []), ["c"],
                              kernel_shape=[kh, kw], strides=[stride, stride], pads=pads)]
    out = "c"
    if act:
        nodes.append(helper.make_node(act, ["c"], ["y"]))
        out = "y"
    nodes += [helper.make_node("Conv", [out, "W2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c2"], ["z"])]
    model = make_model(nodes, [("x", np.float32, ["N", c, "H", "W"])], [out, "z"],
                       initializers=inits)
    return model, inits, out


def second_conv(y, inits):
    return np.maximum(conv_ref(y, inits["W2"], None, 1, [1, 1, 1, 1]), 0)


# (C, M, H, W, KH, KW, stride, pads [t, l, b, r], activation)
CASES = [
    (3, 16, 13, 11, 3, 3, 1, [1, 1, 1, 1], "Relu"),      # IMPALA stem, odd image
    (4, 32, 21, 20, 8, 8, 4, [0, 0, 0, 0], "Relu"),      # Nature CNN first layer
    (5, 13, 9, 10, 3, 2, 2, [1, 0, 2, 1], None),         # channel tail, asymmetric pads
    (16, 40, 7, 5, 1, 1, 1, [0, 0, 0, 0], "LeakyRelu"),  # pointwise, 2.5 panels
    (7, 24, 12, 9, 5, 3, 3, [2, 1, 2, 1], "Tanh"),
    (32, 64, 9, 9, 3, 3, 1, [0, 0, 0, 0], "Sigmoid"),
    (2, 1, 6, 7, 2, 2, 1, [0, 1, 1, 0], "Relu"),         # one output channel
]


@pytest.mark.parametrize("case", CASES, ids=[f"c{c[0]}m{c[1]}k{c[4]}x{c[5]}s{c[6]}" for c in CASES])
@pytest.mark.parametrize("batch", [1, 5])
def test_nhwc_conv_matches_references(engine, rng, case, batch):
    c, m, h, w, kh, kw, stride, pads, act = case
    model, inits, out = conv_model(c, m, kh, kw, stride, pads, act, seed=c * 100 + m)
    feeds = {"x": rand(rng, (batch, c, h, w))}
    want = ACTS[act](conv_ref(feeds["x"], inits["W"], inits["B"], stride, pads))
    ort_ref = run_ort(model, feeds)
    outs = []
    for threads in (1, 2, 3):
        sess = engine.Session(model, threads=threads, optimize=True)
        assert fired(sess).get("layout_nhwc") == 2, fired(sess)
        assert fired(sess).get("prepack_nhwc_conv_weights") == 2
        ops = ops_after(sess)
        assert ops.get("NhwcConv") == 2 and "Conv" not in ops, ops
        got = sess.run(dict(feeds))
        np.testing.assert_allclose(got[out], want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"float64 reference, threads={threads}")
        np.testing.assert_allclose(got["z"], second_conv(want, inits), rtol=1e-4, atol=1e-4,
                                   err_msg=f"float64 reference, threads={threads}")
        assert_outputs_close(got, ort_ref, context=f"threads={threads}", **TOL)
        outs.append(got)
    for o in outs[1:]:
        for name in (out, "z"):  # the same summation order with any split
            np.testing.assert_array_equal(o[name], outs[0][name])


def test_nhwc_conv_without_bias(engine, rng):
    model, inits, out = conv_model(6, 20, 3, 3, 1, [1, 1, 1, 1], "Relu", bias=False)
    feeds = {"x": rand(rng, (3, 6, 10, 8))}
    want = np.maximum(conv_ref(feeds["x"], inits["W"], None, 1, [1, 1, 1, 1]), 0)
    sess = engine.Session(model, threads=2, optimize=True)
    assert ops_after(sess).get("NhwcConv") == 2
    got = sess.run(dict(feeds))
    np.testing.assert_allclose(got[out], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got["z"], second_conv(want, inits), rtol=1e-4, atol=1e-4)


def maxpool_ref(x, k, s, pads, dil=1, ceil=False):
    n, c, h, w = x.shape
    def size(i, p0, p1):
        span = i + p0 + p1 - dil * (k - 1) - 1
        out = (-(-span // s) if ceil else span // s) + 1
        # ceil_mode: a last window starting in the end padding is dropped.
        return out - 1 if ceil and (out - 1) * s >= i + p0 else out
    oh, ow = size(h, pads[0], pads[2]), size(w, pads[1], pads[3])
    y = np.full((n, c, oh, ow), -np.inf)
    for i in range(oh):
        for j in range(ow):
            for a in range(k):
                for b in range(k):
                    hh, ww = i * s - pads[0] + a * dil, j * s - pads[1] + b * dil
                    if 0 <= hh < h and 0 <= ww < w:
                        y[:, :, i, j] = np.maximum(y[:, :, i, j], x[:, :, hh, ww])
    return y


@pytest.mark.parametrize("k,s,pads,dil,ceil", [(3, 2, [1, 1, 1, 1], 1, 0), (2, 2, [0, 0, 0, 0], 1, 1),
                                               (3, 1, [0, 1, 2, 0], 2, 0), (3, 3, [1, 0, 1, 0], 1, 1)])
def test_nhwc_maxpool_after_conv(engine, rng, k, s, pads, dil, ceil):
    """Conv -> MaxPool -> Relu: the pool runs channels-last between the conv and the edge."""
    w = (rng.standard_normal((12, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((5, 12, 1, 1)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[k, k], strides=[s, s],
                              pads=pads, dilations=[dil, dil], ceil_mode=ceil),
             helper.make_node("Relu", ["p"], ["y"]),
             helper.make_node("Conv", ["y", "W2"], ["z"], kernel_shape=[1, 1])]
    model = make_model(nodes, [("x", np.float32, ["N", 3, 11, 13])], ["y", "z"],
                       initializers={"W": w, "W2": w2})
    feeds = {"x": rand(rng, (4, 3, 11, 13))}
    want = np.maximum(maxpool_ref(conv_ref(feeds["x"], w, None, 1, [1, 1, 1, 1]), k, s, pads, dil,
                                  bool(ceil)), 0)
    for threads in (1, 2):
        sess = engine.Session(model, threads=threads, optimize=True)
        assert fired(sess).get("layout_nhwc") == 3
        assert ops_after(sess).get("NhwcMaxPool") == 1
        got = sess.run(dict(feeds))
        np.testing.assert_allclose(got["y"], want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got["z"], conv_ref(want, w2, None, 1, [0, 0, 0, 0]), rtol=1e-4,
                                   atol=1e-4)
        assert_outputs_close(got, run_ort(model, feeds), **TOL)


def residual_model(seed=0):
    """IMPALA-style stack over NHWC uint8 frames: Transpose, Cast, Div, conv, pool, residual."""
    rng = np.random.default_rng(seed)
    def wt(m, c):
        return (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    inits = {"W0": wt(16, 3), "B0": rng.standard_normal(16).astype(np.float32),
             "W1": wt(16, 16), "B1": rng.standard_normal(16).astype(np.float32),
             "W2": wt(16, 16), "B2": rng.standard_normal(16).astype(np.float32),
             "s": np.array(255.0, np.float32)}
    nodes = [helper.make_node("Transpose", ["frames"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Cast", ["t"], ["f"], to=1),
             helper.make_node("Div", ["f", "s"], ["x"]),
             helper.make_node("Conv", ["x", "W0", "B0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c0"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["p"], ["r0"]),
             helper.make_node("Conv", ["r0", "W1", "B1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["p", "c2"], ["y"])]
    return make_model(nodes, [("frames", np.uint8, ["N", 15, 17, 3])], ["y"], initializers=inits)


def test_residual_stack_transposes_only_at_edges(engine, rng):
    model = residual_model()
    feeds = {"frames": rng.integers(0, 256, (3, 15, 17, 3), dtype=np.uint8)}
    sess = engine.Session(model, threads=2, optimize=True)
    assert fired(sess).get("layout_nhwc") == 4
    ops = ops_after(sess)
    assert ops.get("NhwcConv") == 3 and ops.get("NhwcMaxPool") == 1 and "Conv" not in ops, ops
    # The residual Add runs in the last conv's epilogue (fuse_nhwc_conv_add).
    assert fired(sess).get("fuse_nhwc_conv_add") == 1 and "Add" not in ops, ops
    # The frames' own Transpose cancels against the conversion: only the output one runs
    # (the other Transposes pack weights, computed once by the static program).
    run_ops = [p["op"] for p in sess._profile(dict(feeds), 1)]
    assert run_ops.count("Transpose") == 1, run_ops
    assert_outputs_close(sess.run(dict(feeds)), run_ort(model, feeds), **TOL)


def test_refit_after_prepack_equals_fresh(engine, rng):
    model, _, _ = conv_model(5, 21, 3, 3, 2, [1, 1, 0, 0], "Relu")
    feeds = {"x": rand(rng, (3, 5, 9, 12))}
    refit_matches_fresh(engine, model, feeds, {"W"}, rng)
    refit_matches_fresh(engine, model, feeds, {"W", "B"}, rng)
    refit_matches_fresh(engine, residual_model(), {"frames": rng.integers(0, 256, (2, 15, 17, 3),
                                                                          dtype=np.uint8)},
                        {"W0", "W2", "B1"}, rng, atol=1e-4)


@pytest.mark.parametrize("case", ["dilated", "grouped", "conv1d", "lone", "weight_input"])
def test_nhwc_must_not_fire(engine, rng, case):
    """Chains of dilated or grouped 2-D convs, 1-D convs or convs over a weight fed at run time
    keep the NCHW kernel, and so does a lone conv (its transposes would cost more)."""
    c = 4
    shape = [2, c, 11] if case == "conv1d" else [2, c, 11, 12]
    inputs, inits, nodes, x = [("x", np.float32, shape)], {}, [], "x"
    for i in range(1 if case == "lone" else 2):
        if case == "conv1d":
            w, attrs = rand(rng, (c, c, 3)), dict(kernel_shape=[3], pads=[1, 1])
        else:
            group = 2 if case == "grouped" else 1
            w = rand(rng, (c, c // group, 3, 3))
            attrs = dict(kernel_shape=[3, 3], group=group, pads=[2, 2, 2, 2],
                         dilations=[2, 2] if case == "dilated" else [1, 1])
        if case == "weight_input":
            inputs.append((f"W{i}", np.float32, list(w.shape)))
        else:
            inits[f"W{i}"] = w
        nodes.append(helper.make_node("Conv", [x, f"W{i}"], [f"y{i}"], **attrs))
        x = f"y{i}"
    model = make_model(nodes, inputs, [x], initializers=inits)
    feeds = {"x": rand(rng, shape)}
    if case == "weight_input":
        feeds.update(W0=rand(rng, (c, c, 3, 3)), W1=rand(rng, (c, c, 3, 3)))
    sess = engine.Session(model, threads=1, optimize=True)
    assert "layout_nhwc" not in fired(sess)
    assert_outputs_close(sess.run(dict(feeds)), run_ort(model, feeds), **TOL)


@pytest.mark.parametrize("isa", ["avx2", "scalar"])
def test_forced_instruction_set_conv_policies(engine, tmp_path, isa):
    """KAIWU_CPU_ISA caps the conv tiles' variant too (read once per process): a child process
    with the cap runs the two conv policies and matches onnxruntime."""
    import os
    import subprocess
    import sys
    code = f"""
import sys, numpy as np, onnxruntime as ort
sys.path.insert(0, {os.path.dirname(__file__)!r})
import policies, kaiwu_infer
for name in ("atari_cnn", "impala_lstm"):
    path = {str(tmp_path)!r} + "/" + name + ".onnx"
    policies.export_onnx(name, path)
    feeds = policies.make_inputs(name, 3, 5)
    sess = kaiwu_infer.Session(path, threads=2)
    assert "NhwcConv" in sess.describe()
    got = sess.run(feeds)
    got = list(got.values()) if isinstance(got, dict) else got
    ref = ort.InferenceSession(path).run(None, feeds)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-4, atol=1e-4)
print("ok")
"""
    env = dict(os.environ, KAIWU_CPU_ISA=isa)
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]


def test_weight_of_unknown_shape_packed_per_run(engine, rng):
    """A static weight whose dims the prepack cannot see (derived by a Neg node) runs NhwcConv
    without the prepacked input: the kernel packs it into scratch each run."""
    w0 = rand(rng, (6, 3, 3, 3))
    w1 = rand(rng, (4, 6, 1, 1))
    nodes = [helper.make_node("Neg", ["W0"], ["Wn"]),
             helper.make_node("Conv", ["x", "Wn"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"]),
             helper.make_node("Conv", ["y", "W1"], ["z"], kernel_shape=[1, 1])]
    model = make_model(nodes, [("x", np.float32, ["N", 3, 7, 9])], ["y", "z"],
                       initializers={"W0": w0, "W1": w1})
    feeds = {"x": rand(rng, (2, 3, 7, 9))}
    sess = engine.Session(model, threads=2, optimize=True)
    assert fired(sess).get("layout_nhwc") == 2
    assert fired(sess).get("prepack_nhwc_conv_weights") == 1, fired(sess)
    want = np.maximum(conv_ref(feeds["x"], -w0, None, 1, [1, 1, 1, 1]), 0)
    got = sess.run(dict(feeds))
    np.testing.assert_allclose(got["y"], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got["z"], conv_ref(want, w1, None, 1, [0, 0, 0, 0]), rtol=1e-4,
                               atol=1e-4)
    assert_outputs_close(got, run_ort(model, feeds), **TOL)


def test_frame_stack_transpose_hoisted_above_cast(engine, rng):
    """NCHW uint8 frames -> Cast -> Div -> two convs: the conversion's Transpose moves above the
    Cast (hoist_transpose_above_cast) and transposes the bytes."""
    w0 = (rng.standard_normal((8, 4, 4, 4)) * 0.2).astype(np.float32)
    w1 = (rng.standard_normal((6, 8, 3, 3)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("Cast", ["frames"], ["f"], to=1),
             helper.make_node("Div", ["f", "s"], ["x"]),
             helper.make_node("Conv", ["x", "W0"], ["c0"], kernel_shape=[4, 4], strides=[2, 2]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "W1"], ["y"], kernel_shape=[3, 3])]
    model = make_model(nodes, [("frames", np.uint8, ["N", 4, 21, 19])], ["y"],
                       initializers={"W0": w0, "W1": w1, "s": np.array(255.0, np.float32)})
    for n in (1, 3):
        feeds = {"frames": rng.integers(0, 256, (n, 4, 21, 19), dtype=np.uint8)}
        sess = engine.Session(model, threads=2, optimize=True)
        assert fired(sess).get("hoist_transpose_above_cast") == 1, fired(sess)
        assert_outputs_close(sess.run(dict(feeds)), run_ort(model, feeds), **TOL)


@pytest.mark.parametrize("case", ["unpadded", "padded", "no_scale", "cast_read_twice", "int8"])
def test_uint8_frames_cast_fused_into_conv(engine, rng, case):
    """Cast(uint8 -> float32) read only by the first NhwcConv: the conv reads the bytes and
    widens them as it copies each image into its buffer (fuse_cast_into_nhwc_conv); not for a
    Cast read elsewhere too or from int8. Against a float64 reference and onnxruntime, batch 1
    (one image split across the pool) and 5, 1 and 2 threads bit-identical, refit of W0."""
    src = np.int8 if case == "int8" else np.uint8
    w0 = (rng.standard_normal((19, 4, 4, 4)) * 0.2).astype(np.float32)
    b0 = rng.standard_normal(19).astype(np.float32)
    w1 = (rng.standard_normal((6, 19, 3, 3)) * 0.2).astype(np.float32)
    pads = [1, 2, 0, 1] if case == "padded" else [0, 0, 0, 0]
    scale = case != "no_scale"
    nodes = [helper.make_node("Cast", ["frames"], ["f"], to=1)]
    if scale:
        nodes.append(helper.make_node("Div", ["f", "s"], ["x"]))
    nodes += [helper.make_node("Conv", ["x" if scale else "f", "W0", "B0"], ["c0"],
                               kernel_shape=[4, 4], strides=[2, 2], pads=pads),
              helper.make_node("Relu", ["c0"], ["r0"]),
              helper.make_node("Conv", ["r0", "W1"], ["y"], kernel_shape=[3, 3])]
    outs = ["y"] + (["f"] if case == "cast_read_twice" else [])
    inits = {"W0": w0, "B0": b0, "W1": w1}
    if scale:
        inits["s"] = np.array(255.0, np.float32)
    model = make_model(nodes, [("frames", src, ["N", 4, 21, 19])], outs, initializers=inits)
    fuses = case in ("unpadded", "padded", "no_scale")
    for n in (1, 5):
        if src == np.uint8:
            frames = rng.integers(0, 256, (n, 4, 21, 19), dtype=np.uint8)
        else:
            frames = rng.integers(-128, 128, (n, 4, 21, 19), dtype=np.int8)
        feeds = {"frames": frames}
        x = frames.astype(np.float64) / (255.0 if scale else 1.0)
        r0 = np.maximum(conv_ref(x, w0, b0, 2, pads), 0)
        want = conv_ref(r0, w1, None, 1, [0, 0, 0, 0])
        got = []
        for threads in (1, 2):
            sess = engine.Session(model, threads=threads, optimize=True)
            assert fired(sess).get("fuse_cast_into_nhwc_conv", 0) == (1 if fuses else 0), fired(sess)
            assert ("Cast" in ops_after(sess)) == (not fuses)
            out = sess.run(dict(feeds))
            np.testing.assert_allclose(out["y"], want, rtol=1e-4, atol=1e-3)
            assert_outputs_close(out, run_ort(model, feeds), rtol=1e-4, atol=1e-3)
            got.append(out)
        np.testing.assert_array_equal(got[0]["y"], got[1]["y"])
    if fuses:
        refit_matches_fresh(engine, model, feeds, {"W0", "B0"}, rng, atol=1e-3)


@pytest.mark.parametrize("shape", [(1, 4, 3, 5), (2, 4, 7, 9), (3, 4, 84, 84), (2, 5, 6, 7)])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_transpose_to_channels_last(engine, rng, shape, dtype):
    """NCHW -> NHWC transposes of few channels (the 4-channel register paths and their tails)."""
    x = (rng.integers(0, 256, shape).astype(dtype) if dtype == np.uint8 else rand(rng, shape))
    model = make_model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])],
                       [("x", dtype, list(shape))], ["y"])
    got = engine.Session(model, threads=2, optimize=True).run({"x": x})
    np.testing.assert_array_equal(got["y"], x.transpose(0, 2, 3, 1))


def block_model(case, seed=0):
    """x -> Relu -> conv a (+Relu) -> conv b -> Add(x-side operand, conv b): a residual block
    when `case` is "fuses", else a variant the Add fusion must leave alone."""
    rng = np.random.default_rng(seed)
    c = 8
    def wt(m, k=3):
        return (rng.standard_normal((m, c, k, k)) / np.sqrt(9 * c)).astype(np.float32)
    inits = {"Wi": wt(c), "Wa": wt(c), "Wb": wt(c), "Bb": rng.standard_normal(c).astype(np.float32)}
    b_attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    other = "x"
    nodes = [helper.make_node("Conv", ["inp", "Wi"], ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Conv", ["r", "Wa"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"])]
    outs = ["y"]
    if case == "strided":  # conv b halves the image: its output is not x's shape
        b_attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
        nodes.append(helper.make_node("MaxPool", ["x"], ["xp"], kernel_shape=[3, 3], strides=[2, 2],
                                      pads=[1, 1, 1, 1]))
        other = "xp"
    if case == "constant":
        inits["k"] = rng.standard_normal((c, 1, 1)).astype(np.float32)
        other = "k"
    nodes.append(helper.make_node("Conv", ["ar", "Wb", "Bb"], ["b"], **b_attrs))
    last = "b"
    if case == "activation":
        nodes.append(helper.make_node("Relu", ["b"], ["br"]))
        last = "br"
    if case == "shared":
        outs.append("b")
    nodes.append(helper.make_node("Add", [other, last] if seed % 2 == 0 else [last, other], ["y"]))
    model = make_model(nodes, [("inp", np.float32, ["N", c, 9, 11])], outs, initializers=inits)
    return model


@pytest.mark.parametrize("case", ["fuses", "strided", "constant", "activation", "shared"])
@pytest.mark.parametrize("seed", [0, 1])
def test_residual_add_fused_into_conv(engine, rng, case, seed):
    model = block_model(case, seed)
    feeds = {"inp": rand(rng, (3, 8, 9, 11))}
    ref = run_ort(model, feeds)
    outs = []
    for threads in (1, 2):
        sess = engine.Session(model, threads=threads, optimize=True)
        assert ops_after(sess).get("NhwcConv") == 3
        assert fired(sess).get("fuse_nhwc_conv_add", 0) == (1 if case == "fuses" else 0), fired(sess)
        got = sess.run(dict(feeds))
        assert_outputs_close(got, ref, context=f"threads={threads}", **TOL)
        outs.append(got)
    for name in outs[0]:
        np.testing.assert_array_equal(outs[0][name], outs[1][name])
    if case == "fuses":
        refit_matches_fresh(engine, model, feeds, {"Wb", "Bb", "Wi"}, rng, atol=1e-4)


@pytest.mark.parametrize("case", ["fuses", "unpadded", "relu_read_twice"])
def test_input_relu_fused_into_padded_conv(engine, rng, case):
    """Relu(x) read only by a padded NhwcConv is applied while the conv copies x into its
    zero-bordered buffer (fuse_relu_into_nhwc_conv); x itself stays for the other readers."""
    c = 6
    w = {f"W{i}": (rng.standard_normal((c, c, 3, 3)) * 0.3).astype(np.float32) for i in range(3)}
    pads = [0, 0, 0, 0] if case == "unpadded" else [1, 1, 1, 1]
    nodes = [helper.make_node("Conv", ["inp", "W0"], ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Conv", ["r", "W1"], ["a"], kernel_shape=[3, 3], pads=pads),
             helper.make_node("Conv", ["x", "W2"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    outs = ["a", "b"] + (["r"] if case == "relu_read_twice" else [])
    model = make_model(nodes, [("inp", np.float32, ["N", c, 8, 7])], outs, initializers=w)
    feeds = {"inp": rand(rng, (3, c, 8, 7))}
    ref = run_ort(model, feeds)
    for threads in (1, 2):
        sess = engine.Session(model, threads=threads, optimize=True)
        assert fired(sess).get("fuse_relu_into_nhwc_conv", 0) == (1 if case == "fuses" else 0)
        assert ("Relu" in ops_after(sess)) == (case != "fuses")
        assert_outputs_close(sess.run(dict(feeds)), ref, context=f"threads={threads}", **TOL)


def impala_block_model(cin, c, h, w, seed=0):
    """IMPALA's stack at odd sizes: conv (cin -> c, 3x3, pad 1), max pool 3x3 / 2, one residual
    block (Relu, conv, Relu, conv, Add): rows of channels-last pixels for the run tiles."""
    rng = np.random.default_rng(seed)
    def wt(m, k):
        return (rng.standard_normal((m, k, 3, 3)) / np.sqrt(9 * k)).astype(np.float32)
    inits = {"W0": wt(c, cin), "B0": rng.standard_normal(c).astype(np.float32),
             "W1": wt(c, c), "B1": rng.standard_normal(c).astype(np.float32),
             "W2": wt(c, c), "B2": rng.standard_normal(c).astype(np.float32)}
    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    nodes = [helper.make_node("Conv", ["x", "W0", "B0"], ["c0"], **conv),
             helper.make_node("MaxPool", ["c0"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["p"], ["r0"]),
             helper.make_node("Conv", ["r0", "W1", "B1"], ["c1"], **conv),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], **conv),
             helper.make_node("Add", ["p", "c2"], ["y"])]
    model = make_model(nodes, [("x", np.float32, ["N", cin, h, w])], ["c0", "y"],
                       initializers=inits)
    return model, inits


def impala_block_ref(x, inits):
    pad = [1, 1, 1, 1]
    c0 = conv_ref(x, inits["W0"], inits["B0"], 1, pad)
    p = maxpool_ref(c0, 3, 2, pad)
    c1 = conv_ref(np.maximum(p, 0), inits["W1"], inits["B1"], 1, pad)
    return c0, p + conv_ref(np.maximum(c1, 0), inits["W2"], inits["B2"], 1, pad)


# (Cin, C, H, W): the stem (3 -> 16), 16 -> 32 and 32 -> 32 at rows longer and shorter than a
# run tile, none a multiple of a tile height.
IMPALA_BLOCKS = [(3, 16, 37, 53), (16, 32, 19, 29), (32, 32, 9, 17), (16, 16, 13, 35)]


@pytest.mark.parametrize("cin,c,h,w", IMPALA_BLOCKS)
def test_impala_block_matches_references(engine, rng, cin, c, h, w):
    model, inits = impala_block_model(cin, c, h, w, seed=cin + c + h)
    feeds = {"x": rand(rng, (3, cin, h, w))}
    want_c0, want_y = impala_block_ref(feeds["x"], inits)
    ort_ref = run_ort(model, feeds)
    outs = []
    for threads in (1, 2, 3):
        sess = engine.Session(model, threads=threads, optimize=True)
        ops = ops_after(sess)
        assert ops.get("NhwcConv") == 3 and "Conv" not in ops and "Add" not in ops, ops
        got = sess.run(dict(feeds))
        np.testing.assert_allclose(got["c0"], want_c0, rtol=1e-4, atol=1e-4,
                                   err_msg=f"float64 reference, threads={threads}")
        np.testing.assert_allclose(got["y"], want_y, rtol=1e-4, atol=1e-4,
                                   err_msg=f"float64 reference, threads={threads}")
        assert_outputs_close(got, ort_ref, context=f"threads={threads}", **TOL)
        outs.append(got)
    for o in outs[1:]:
        for name in ("c0", "y"):
            np.testing.assert_array_equal(o[name], outs[0][name])


@pytest.mark.parametrize("isa", ["", "avx2"])
def test_run_tiles_switch_bit_identical(engine, rng, tmp_path, isa):
    """KAIWU_CONV_RUN_TILES=0 (every tile reads its rows through their offsets) gives the very
    same outputs as the run tiles, under each instruction-set cap (child processes: both are read
    once per process)."""
    import os
    import subprocess
    import sys
    model, _ = impala_block_model(16, 16, 19, 29, seed=4)  # one panel: run tiles on AVX-512
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    np.save(tmp_path / "x.npy", rand(rng, (2, 16, 19, 29)))
    code = f"""
import sys, numpy as np, kaiwu_infer
sess = kaiwu_infer.Session({str(path)!r}, threads=2)
got = sess.run({{"x": np.load({str(tmp_path / "x.npy")!r})}})
np.save(sys.argv[1], got["y"])
"""
    outs = []
    for runs in ("1", "0"):
        env = dict(os.environ, KAIWU_CONV_RUN_TILES=runs, KAIWU_CPU_ISA=isa)
        out = str(tmp_path / f"y{runs}.npy")
        res = subprocess.run([sys.executable, "-c", code, out], env=env, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        outs.append(np.load(out))
    np.testing.assert_array_equal(outs[0], outs[1])
