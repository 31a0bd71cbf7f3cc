"""precision="fp16" / "bf16" (mixed precision on the CUDA backend).

On every machine: the option's errors (bad names, a CPU session, keep_fp32 names the model
lacks). On a CUDA device (kaiwu_infer.cuda_available()), the five exported policies in
float16 and bfloat16 against float32 onnxruntime:

- relative error ||got - ref|| / ||ref|| per output <= 1e-2 (fp16) and <= 3e-2 (bf16: 8
  mantissa bits against fp16's 11);
- the same greedy action (argmax over the last axis of each output with more than one
  column) on at least 99% of 256 rows (bf16: a pick within two bf16 steps of the
  reference's best score is a tie, not a different action);
- refit from float32 weights equals a fresh half session built from those weights, bit for
  bit (same conversions, same kernels);
- feeds and results keep the model's dtypes; describe() lists each node's precision.
"""

from __future__ import annotations

import numpy as np
import pytest

import kaiwu_infer as ki
import policies
from helpers import run_ort

gpu = pytest.mark.skipif(not ki.cuda_available(),
                         reason="kaiwu_infer built without CUDA, or no CUDA device")

POLICIES = ("mlp", "atari_cnn", "impala_lstm", "gru_seq", "multi_input", "unit_transformer")
RTOL = {"fp16": 1e-2, "bf16": 3e-2}
STATE_OUTPUTS = ("hn", "cn")
_CACHE: dict = {}


def _model(name):
    if name not in _CACHE:
        import onnx

        data = policies.export_bytes(name)
        _CACHE[name] = (data, onnx.load_from_string(data))
    return _CACHE[name]


def test_bad_precision_names_the_choices():
    data, _ = _model("mlp")
    with pytest.raises(ki.InputError, match="'fp32', 'fp16' or 'bf16'.*'half'"):
        ki.Session(data, precision="half")


def test_cpu_session_refuses_half_precision():
    data, _ = _model("mlp")
    with pytest.raises(ki.UnsupportedOpError, match="device='cuda'"):
        ki.Session(data, precision="fp16")
    # fp32 is the default and always accepted.
    assert "precision: fp32" in ki.Session(data, precision="fp32").describe()


def test_keep_fp32_names_must_exist_and_be_a_list():
    data, _ = _model("mlp")
    with pytest.raises(ki.InputError, match="keep_fp32: 'no_such_node'"):
        ki.Session(data, keep_fp32=["no_such_node"])
    with pytest.raises(ki.InputError, match="list of node names"):
        ki.Session(data, keep_fp32="Gemm")
    ki.Session(data, keep_fp32=["Gemm"])  # an op type of the model


def _rel(got, ref):
    return float(np.linalg.norm((got - ref).ravel()) / max(np.linalg.norm(ref.ravel()), 1e-30))


def _rel_floor(got, ref, floor=0.05):
    """_rel with the norm of ref floored at `floor` per element (RMS): an output of one
    value that happens to be near zero (a value head at batch 1: 0.002) is judged
    against the magnitude such outputs have, not against its own."""
    scale = max(float(np.linalg.norm(ref.ravel())), floor * np.sqrt(ref.size), 1e-30)
    return float(np.linalg.norm((got - ref).ravel()) / scale)


def _argmax_agreement(got, ref, precision):
    """Share of rows whose greedy action (argmax over the last axis) equals the float32
    reference's. bf16: a row also agrees where the reference's score of the action picked
    is within 2^-7 (two bf16 steps) of its best, relative to max(1, |best|): a tie at
    bfloat16's resolution (unit_transformer's unit_logits read 0.977-1.000 over eight
    seeds of 256 rows by exact argmax, with cuBLASLt's epilogues or without)."""
    pick, best = np.argmax(got, -1), np.argmax(ref, -1)
    same = pick == best
    if precision == "bf16":
        r = ref.reshape(-1, ref.shape[-1]).astype(np.float64)
        top = r[np.arange(len(r)), best.ravel()]
        at_pick = r[np.arange(len(r)), pick.ravel()]
        same = same | (top - at_pick <= 2.0 ** -7 * np.maximum(1.0, np.abs(top))).reshape(same.shape)
    return float(np.mean(same))


@gpu
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("batch", [1, 7, 256])
@pytest.mark.parametrize("name", POLICIES)
def test_policy_in_half_precision_matches_fp32_onnxruntime(name, batch, precision):
    data, model = _model(name)
    sess = ki.Session(data, device="cuda", precision=precision)
    feeds = policies.make_inputs(name, batch, seed=3000 + batch)
    want = run_ort(model, feeds)
    got = sess.run(feeds)
    for k, ref in want.items():
        assert got[k].dtype == ref.dtype, k
        assert got[k].shape == ref.shape, k
        err = _rel_floor(got[k].astype(np.float64), ref.astype(np.float64))
        assert err <= RTOL[precision], f"{name} b{batch} {precision} {k}: rel err {err:.2e}"
        # Argmax agreement for what picks actions (logits, unit_logits), not for
        # recurrent states (hn, cn), which the relative error above judges: an argmax
        # over 128 hidden units flips on near ties.
        if (batch == 256 and k not in STATE_OUTPUTS and ref.ndim >= 2 and ref.shape[-1] > 1
                and np.issubdtype(ref.dtype, np.floating)):
            assert _argmax_agreement(got[k], ref, precision) >= 0.99, (
                f"{name} {precision} {k}: argmax agrees on "
                f"{np.mean(np.argmax(got[k], -1) == np.argmax(ref, -1)):.3f} of rows")


@gpu
def test_describe_lists_half_and_fp32_nodes():
    data, _ = _model("impala_lstm")
    text = ki.Session(data, device="cuda", precision="fp16").describe()
    assert "precision: fp16" in text
    assert "Conv" in text and ": fp16" in text
    # The LSTM keeps float32 state and gates; its X (made by the half Linear) and W
    # go into the input projection in half and Y comes out in half.
    lstm = "fp32 (float32 by rule, GEMMs on tensor cores, X, W and Y in float16)"
    assert "LSTM" in text and lstm in text
    kept = ki.Session(data, device="cuda", precision="fp16", keep_fp32=["Conv", "LSTM"]).describe()
    assert "fp32 (keep_fp32)" in kept and "tensor cores" not in kept


def _with_weights(data: bytes, weights: dict) -> bytes:
    import onnx
    from onnx import numpy_helper

    model = onnx.load_from_string(data)
    for i, init in enumerate(model.graph.initializer):
        if init.name in weights:
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(weights[init.name], init.name))
    return model.SerializeToString()


@gpu
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_refit_in_half_precision_equals_a_fresh_half_session(precision):
    data, _ = _model("atari_cnn")
    sess = ki.Session(data, device="cuda", precision=precision)
    cpu = ki.Session(data)
    rng = np.random.default_rng(5)
    new = {k: (v + 0.05 * rng.standard_normal(v.shape)).astype(v.dtype)
           for k, v in cpu.get_weights().items()}
    feeds = policies.make_inputs("atari_cnn", 9, seed=4)
    before = {k: np.array(v) for k, v in sess.run(feeds).items()}
    sess.refit(new)
    after = sess.run(feeds)
    fresh = ki.Session(_with_weights(data, new), device="cuda", precision=precision)
    want = fresh.run(feeds)
    for k in want:
        np.testing.assert_array_equal(after[k], want[k], err_msg=k)
        assert not np.array_equal(after[k], before[k]), k
    # Weights read back are the float32 arrays given.
    got_w = sess.get_weights()
    for k, v in new.items():
        np.testing.assert_array_equal(got_w[k], v, err_msg=k)


@gpu
def test_server_in_fp16_equals_an_fp16_session():
    data, _ = _model("mlp")
    sess = ki.Session(data, device="cuda", precision="fp16")
    feeds = policies.make_inputs("mlp", 16, seed=8)
    want = sess.run(feeds)
    with ki.InferenceServer(data, device="cuda", precision="fp16", max_batch=16) as srv:
        assert "precision: fp16" in srv.session.describe()
        futs = [srv.submit(i, {k: v[i:i + 1] for k, v in feeds.items()}) for i in range(16)]
        rows = [f.result(timeout=30) for f in futs]
    for k, ref in want.items():
        got = np.concatenate([r[k] for r in rows])
        np.testing.assert_allclose(got, ref, rtol=1e-2, atol=1e-2 * float(np.abs(ref).max()), err_msg=k)


@gpu
def test_device_resident_fp16_run_moves_no_host_bytes():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    data, model = _model("mlp")
    sess = ki.Session(data, device="cuda", precision="fp16")
    feeds = policies.make_inputs("mlp", 32, seed=9)
    dev = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
    torch.cuda.synchronize()
    sess.io_stats(reset=True)
    out = sess.run(dev, output_device="cuda")
    got = {k: torch.from_dlpack(v).cpu().numpy() for k, v in out.items()}
    stats = sess.io_stats()
    assert stats["h2d_bytes"] == 0 and stats["d2h_bytes"] == 0 and stats["staging_bytes"] == 0
    want = run_ort(model, feeds)
    for k, ref in want.items():
        assert got[k].dtype == np.float32
        assert _rel(got[k], ref) <= RTOL["fp16"], k


def _channels_last_conv_model() -> "onnx.ModelProto":
    """NHWC float input -> Transpose -> Conv 3x3 + Relu -> MaxPool 3/2 ceil_mode -> residual
    Add with a Conv 2x2 SAME_UPPER (asymmetric pads: the im2col path) -> Conv 1x1 -> dilated
    Conv 3x3 -> Flatten; batch dynamic."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(21)

    def w(name, *shape):
        return numpy_helper.from_array((0.3 * rng.standard_normal(shape)).astype(np.float32), name)

    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["xt", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1], ceil_mode=1),
        helper.make_node("Relu", ["p"], ["pr"]),
        helper.make_node("Conv", ["pr", "w2", "b2"], ["c2"], auto_pad="SAME_UPPER"),
        helper.make_node("Add", ["p", "c2"], ["s"]),
        helper.make_node("Conv", ["s", "w3"], ["c3"]),
        helper.make_node("Conv", ["c3", "w4", "b4"], ["c4"], pads=[2, 2, 2, 2], dilations=[2, 2]),
        helper.make_node("Flatten", ["c4"], ["y"]),
    ]
    inits = [w("w1", 8, 3, 3, 3), w("b1", 8), w("w2", 8, 8, 2, 2), w("b2", 8), w("w3", 4, 8, 1, 1),
             w("w4", 6, 4, 3, 3), w("b4", 6)]
    graph = helper.make_graph(nodes, "channels_last", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 13, 11, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@gpu
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_convs_run_channels_last_and_match_onnxruntime(precision, monkeypatch):
    """Half-precision 2-D convs and max pools run NHWC (cuDNN, or the channels-last im2col for
    asymmetric pads), with transposes only at the edges; results match float32 onnxruntime and
    the NCHW kernels (KAIWU_CUDNN=0 turns the layout off)."""
    model = _channels_last_conv_model()
    data = model.SerializeToString()
    sess = ki.Session(data, device="cuda", precision=precision)
    text = sess.describe()
    if "layout_nhwc" not in text:
        pytest.skip("this build has no cuDNN: half convs stay NCHW")
    assert "NhwcConv: 4" in text and "NhwcMaxPool: 1" in text, text
    monkeypatch.setenv("KAIWU_CUDNN", "0")
    nchw = ki.Session(data, device="cuda", precision=precision)
    monkeypatch.delenv("KAIWU_CUDNN")
    assert "NhwcConv" not in nchw.describe()
    for batch in (1, 5, 64):
        feeds = {"x": np.random.default_rng(batch).standard_normal((batch, 13, 11, 3)).astype(np.float32)}
        ref = run_ort(model, feeds)["y"]
        got = sess.run(feeds)["y"]
        other = nchw.run(feeds)["y"]
        assert got.shape == ref.shape == other.shape
        assert _rel(got.astype(np.float64), ref) <= RTOL[precision], (batch, _rel(got, ref))
        assert _rel(got.astype(np.float64), other) <= RTOL[precision], (batch, _rel(got, other))


@gpu
def test_channels_last_session_refits_its_transposed_weights():
    """The NHWC weights are derived by static nodes: a refit re-derives them (equal to a fresh
    session) and runs in flight before it keep the old ones."""
    from onnx import numpy_helper

    model = _channels_last_conv_model()
    data = model.SerializeToString()
    sess = ki.Session(data, device="cuda", precision="fp16")
    if "layout_nhwc" not in sess.describe():
        pytest.skip("this build has no cuDNN: half convs stay NCHW")
    rng = np.random.default_rng(7)
    new = {i.name: (numpy_helper.to_array(i) + 0.1 * rng.standard_normal(numpy_helper.to_array(i).shape)
                    ).astype(np.float32) for i in model.graph.initializer}
    feeds = {"x": rng.standard_normal((9, 13, 11, 3)).astype(np.float32)}
    before = sess.run(feeds)["y"]
    sess.refit(new)
    after = sess.run(feeds)["y"]
    fresh = ki.Session(_with_weights(data, new), device="cuda", precision="fp16").run(feeds)["y"]
    np.testing.assert_array_equal(after, fresh)
    assert not np.array_equal(after, before)


@gpu
def test_server_warms_up_by_default_when_convs_run_channels_last():
    """warmup=None (the default) builds every padded batch size's plan at start when the session
    runs channels-last half convs on cuDNN (a new size's first run is slow there), not otherwise."""
    data, _ = _model("atari_cnn")
    with ki.InferenceServer(data, device="cuda", precision="fp16", max_batch=8) as srv:
        if "layout_nhwc" not in srv.session.describe():
            pytest.skip("this build has no cuDNN: half convs stay NCHW")
        assert srv.session.plans >= 4  # batch sizes 1, 2, 4, 8
    with ki.InferenceServer(data, device="cuda", max_batch=8) as srv:
        assert srv.session.plans == 0
    with ki.InferenceServer(data, device="cuda", precision="fp16", max_batch=8, warmup=False) as srv:
        assert srv.session.plans == 0


@gpu
@pytest.mark.parametrize("cluster", ["0", "2", "16", "4:2", None])
@pytest.mark.parametrize("batch", [1, 33, 300])
def test_policy_mlp_fused_kernels_agree_with_onnxruntime(cluster, batch, monkeypatch):
    """The mlp's FusedMlp through the one-block kernel (KAIWU_FUSED_MLP_CLUSTER=0), forced
    cluster sizes and the kernel's own choice (unset), fp16 against float32 onnxruntime."""
    data, model = _model("mlp")
    feeds = policies.make_inputs("mlp", batch, seed=11)
    ref = run_ort(model, feeds)
    monkeypatch.delenv("KAIWU_FUSED_MLP", raising=False)
    if cluster is None:
        monkeypatch.delenv("KAIWU_FUSED_MLP_CLUSTER", raising=False)
    else:
        monkeypatch.setenv("KAIWU_FUSED_MLP_CLUSTER", cluster)
    sess = ki.Session(data, device="cuda", precision="fp16")
    assert [r["op"] for r in sess.profile(feeds, runs=1)] == ["FusedMlp"]
    got = sess.run(feeds)
    for k, want in ref.items():
        err = np.linalg.norm(got[k].astype(np.float64) - want) / max(np.linalg.norm(want), 1e-30)
        assert err <= RTOL["fp16"], (k, err)


@gpu
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_policy_mlp_runs_as_one_fused_launch(precision, monkeypatch):
    """The MLP's body and heads (four Gemms) and its edge casts become one FusedMlp node;
    KAIWU_FUSED_MLP=0 keeps the Gemms; both agree with float32 onnxruntime."""
    data, model = _model("mlp")
    feeds = policies.make_inputs("mlp", 37, seed=5)
    ref = run_ort(model, feeds)
    monkeypatch.delenv("KAIWU_FUSED_MLP", raising=False)
    fused = ki.Session(data, device="cuda", precision=precision)
    ops = [r["op"] for r in fused.profile(feeds, runs=1)]
    assert ops == ["FusedMlp"], ops
    assert "fuse_mlp" in fused.describe()
    monkeypatch.setenv("KAIWU_FUSED_MLP", "0")
    plain = ki.Session(data, device="cuda", precision=precision)
    assert "FusedMlp" not in [r["op"] for r in plain.profile(feeds, runs=1)]
    for sess in (fused, plain):
        got = sess.run(feeds)
        for k, want in ref.items():
            assert got[k].dtype == want.dtype
            err = np.linalg.norm(got[k].astype(np.float64) - want) / max(np.linalg.norm(want), 1e-30)
            assert err <= RTOL[precision], (k, err)
