"""Whole quantized policies: kaiwu_infer.quantize (onnxruntime.quantization, QDQ, per-channel
int8 weights, uint8 activations, random calibration observations) on the test policies, run by
kaiwu_infer with and without the optimizer's integer fusion (fuse_qdq), against onnxruntime.

Oracle: onnxruntime with graph optimizations off runs the QDQ graph literally (DequantizeLinear
-> float32 Conv/Gemm -> QuantizeLinear), the ONNX meaning of the model. Tolerance: each output
within one quantization step (the scale of the DequantizeLinear that writes it): the integer
path rounds the same real value once, possibly on the other side of a tie. onnxruntime's own
optimized QDQ kernels are not the oracle here: on CPUs without AVX-512 VNNI they multiply with
vpmaddubsw, whose int16 pair sums saturate on full-range int8 weights (see test_quant_ops.py).

Refit: int8 initializers (and their scales) by name, and fp32 weights behind a QuantizeLinear
(QAT export), each against a fresh session of the changed model. ISA paths: outputs of the
scalar, AVX2 (and AVX-512 VNNI where the CPU has it) integer kernels are bit-identical, each
forced by KAIWU_INT8_ISA and checked through kaiwu_infer.int8_isa(); unset, the best one runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn as nn
from onnx import helper, numpy_helper

import policies

HERE = os.path.dirname(os.path.abspath(__file__))


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Flatten(), nn.Linear(32 * 6 * 6, 32), nn.ReLU())
        self.pi = nn.Linear(32, 5)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        return self.pi(self.net(x))


def _export(name, path):
    if name == "conv_bn":
        m = ConvBN().eval()
        torch.onnx.export(m, (torch.randn(2, 3, 12, 12),), path, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "b"}, "logits": {0: "b"}}, opset_version=17, dynamo=False)
        return path
    return policies.export_onnx(name, path)


def _inputs(name, batch, seed):
    name = name.replace("_7bit", "")
    if name == "conv_bn":
        return {"x": np.random.default_rng(seed).standard_normal((batch, 3, 12, 12)).astype(np.float32)}
    return policies.make_inputs(name, batch, seed)


POLICIES = ["mlp", "atari_cnn", "conv_bn", "atari_cnn_7bit"]


@pytest.fixture(scope="module")
def qmodels(tmp_path_factory, engine):
    out = {}
    d = tmp_path_factory.mktemp("quant")
    for name in POLICIES:
        # *_7bit: reduce_range weights, which the AVX2 path multiplies with vpmaddubsw
        fp32 = _export(name.replace("_7bit", ""), str(d / f"{name}.onnx"))
        obs = [_inputs(name, 16, 100 + i) for i in range(4)]
        out[name] = engine.quantize(fp32, obs, str(d / f"{name}_int8.onnx"), progress=False,
                                    reduce_range=name.endswith("_7bit"))
    return out


def _steps(model_path):
    """Per graph output, the scale of the DequantizeLinear writing it (one quantization step)."""
    m = onnx.load(model_path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    steps = {}
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0] in {o.name for o in m.graph.output}:
            steps[n.output[0]] = float(np.max(inits[n.input[1]]))
    return steps


def _ort_literal(path, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


@pytest.mark.parametrize("name", POLICIES)
@pytest.mark.parametrize("batch", [1, 7, 64])
def test_qdq_policy_within_one_step(engine, qmodels, name, batch):
    path = qmodels[name]
    feeds = _inputs(name, batch, 7 + batch)
    ref = _ort_literal(path, feeds)
    steps = _steps(path)
    assert set(steps) == set(ref)
    for optimize in (False, True):
        sess = engine.Session(path, optimize=optimize, threads=2)
        got = sess.run(feeds)
        for k, r in ref.items():
            err = np.abs(got[k] - r).max()
            assert err <= steps[k] * 1.001, f"{name} optimize={optimize} {k}: {err} > step {steps[k]}"
        if optimize:
            d = sess.describe()
            assert "fuse_qdq" in d and "QLinearFused" in d, d
            if name == "mlp":  # DQ -> Tanh -> Q became a table lookup
                assert "fuse_qdq_lookup: 2" in d and "QLookup" in d, d
            if name.startswith("atari_cnn"):  # frames -> Cast -> Div(255) -> Q likewise, and the
                # Flatten between the last Conv and the Gemm moves above its DQ: DQ -> Q, a lookup
                assert "fuse_qdq_lookup: 2" in d and "hoist_reshape_above_dq: 1" in d, d


def test_impala_int8_runs_channels_last_through_its_float_sections(engine, tmp_path, monkeypatch):
    """IMPALA quantized: DequantizeLinear -> MaxPool / Add / Relu -> QuantizeLinear between the
    integer convs. CPU sessions run it all channels-last (NhwcMaxPool, transposes only at the
    edges), the max pools and the residual sums on bytes (the pool hoisted above its
    DequantizeLinear, Q(DQ(a) + DQ(b)) as QLinearAdd), the convs reading their rows in place.
    Each of those switched off (KAIWU_INT8_NHWC=0, KAIWU_INT8_BYTE_OPS=0, KAIWU_INT8_INPLACE=0)
    gives the same bytes; all within one step of onnxruntime's literal QDQ run on the quantized
    outputs, the LSTM state close in float."""
    fp32 = _export("impala_lstm", str(tmp_path / "impala.onnx"))
    obs = [_inputs("impala_lstm", 8, 100 + i) for i in range(2)]
    path = engine.quantize(fp32, obs, str(tmp_path / "impala_int8.onnx"), progress=False)
    feeds = _inputs("impala_lstm", 5, 3)
    ref = _ort_literal(path, feeds)
    steps = _steps(path)
    assert steps and set(steps) < set(ref)  # quantized heads, float state
    configs = {"default": {}, "nchw": {"KAIWU_INT8_NHWC": "0"}, "float_sections": {"KAIWU_INT8_BYTE_OPS": "0"},
               "gather": {"KAIWU_INT8_INPLACE": "0"}}
    outs = {}
    for name, env in configs.items():
        for var in ("KAIWU_INT8_NHWC", "KAIWU_INT8_BYTE_OPS", "KAIWU_INT8_INPLACE"):
            monkeypatch.delenv(var, raising=False)
        for var, val in env.items():
            monkeypatch.setenv(var, val)
        sess = engine.Session(path, threads=2)
        d = sess.describe()
        assert ("layout_nhwc_int8" in d) == (name != "nchw"), d
        assert ("QLinearAdd" in d) == (name != "float_sections"), d
        assert ("hoist_pool_above_dequantize: 3" in d) == (name != "float_sections"), d
        if name != "nchw":
            assert "NhwcMaxPool" in d, d
        outs[name] = sess.run(feeds)
    for k, r in ref.items():
        for name in configs:
            np.testing.assert_array_equal(outs[name][k], outs["default"][k], err_msg=f"{k} ({name})")
        err = np.abs(outs["default"][k] - r).max()
        if k in steps:
            assert err <= steps[k] * 1.001, f"{k}: {err} > step {steps[k]}"
        else:
            assert err <= 1e-3 * max(1.0, float(np.abs(r).max())), f"{k}: {err}"


def test_conv_bn_and_head_kept_fp32(engine, tmp_path):
    fp32 = _export("conv_bn", str(tmp_path / "cb.onnx"))
    obs = np.concatenate([_inputs("conv_bn", 16, i)["x"] for i in range(3)])  # one stacked array
    full = engine.quantize(fp32, obs, str(tmp_path / "a.onnx"), progress=False, batch_size=16)
    head = engine.quantize(fp32, obs, str(tmp_path / "b.onnx"), progress=False, batch_size=16,
                           keep_fp32=["logits"])
    fused = lambda p: int(engine.Session(p).describe().split("fuse_qdq: ")[1].split()[0])
    assert fused(head) == fused(full) - 1  # the head Gemm stays float
    feeds = _inputs("conv_bn", 5, 9)
    got = engine.Session(head).run(feeds)["logits"]
    ref = _ort_literal(head, feeds)["logits"]
    # the float head reads an input within one step of onnxruntime's: allow a few steps of it
    np.testing.assert_allclose(got, ref, atol=0.05, rtol=0)


class _ReplayBuffer:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.calls = 0

    def sample(self, n):
        self.calls += 1
        return self.rng.standard_normal((n, 64)).astype(np.float32)


def test_quantize_from_replay_buffer_returns_model(engine, tmp_path, capsys):
    fp32 = _export("mlp", str(tmp_path / "mlp.onnx"))
    buf = _ReplayBuffer(0)
    model = engine.quantize(fp32, buf, num_batches=5, batch_size=8)
    assert buf.calls == 5
    assert isinstance(model, onnx.ModelProto)
    ops = {n.op_type for n in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    sess = engine.Session(model.SerializeToString())
    assert sess.run({"obs": np.ones((2, 64), np.float32)})["logits"].shape == (2, 18)


def test_quantize_bad_feeds(engine, tmp_path):
    fp32 = _export("mlp", str(tmp_path / "mlp.onnx"))
    with pytest.raises(ValueError, match="lacks inputs"):
        engine.quantize(fp32, [{"nope": np.zeros((1, 64), np.float32)}], progress=False)
    with pytest.raises(ValueError, match="keep_fp32"):
        engine.quantize(fp32, [np.zeros((1, 64), np.float32)], keep_fp32=["no_such_node"], progress=False)


def test_quantize_without_onnxruntime_names_the_extra(engine, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime.quantization", None)
    with pytest.raises(engine.QuantizationUnavailableError, match=r"kaiwu_infer\[quantization\]"):
        engine.quantize(b"", [])
    assert issubclass(engine.QuantizationUnavailableError, ImportError)


def save_with_weights(m, new, path):
    """`m` with the initializers named in `new` replaced, written to `path` (for a fresh session
    to compare a refit against); returns `path`."""
    for i in m.graph.initializer:
        if i.name in new:
            i.CopyFrom(numpy_helper.from_array(new[i.name], i.name))
    onnx.save(m, path)
    return path


def test_refit_int8_initializers_by_name(engine, qmodels, tmp_path):
    path = qmodels["atari_cnn"]
    m = onnx.load(path)
    rng = np.random.default_rng(5)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    new = {}
    for name, a in inits.items():
        if name.endswith("weight_quantized"):
            new[name] = rng.integers(-127, 128, a.shape).astype(np.int8)
        elif name.endswith("weight_scale"):
            new[name] = (a * rng.uniform(0.5, 1.5, a.shape)).astype(np.float32)
    sess = engine.Session(path)
    feeds = _inputs("atari_cnn", 6, 3)
    before = sess.run(feeds)
    sess.refit(new, strict=False)
    p2 = save_with_weights(m, new, str(tmp_path / "changed.onnx"))
    fresh = engine.Session(p2).run(feeds)
    after = sess.run(feeds)
    for k in fresh:
        np.testing.assert_array_equal(after[k], fresh[k])
        assert not np.array_equal(after[k], before[k])


def _qat_model(w, b, ws):
    """x -> Q -> DQ -> Conv(DQ(Q(W fp32)), b) -> Relu -> Q -> DQ: fp32 weights behind a Q."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("QuantizeLinear", ["W", "ws", "wz"], ["wq"], axis=0),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in {
        "xs": np.float32(0.02), "xz": np.uint8(128), "W": w, "B": b,
        "ws": ws,
        "wz": np.zeros(w.shape[0], np.int8), "ys": np.float32(0.01), "yz": np.uint8(0)}.items()]
    g = helper.make_graph(nodes, "qat", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["b", 8, 10, 10])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_refit_qat_fp32_weights_requantizes(engine):
    rng = np.random.default_rng(11)
    w0 = (rng.standard_normal((12, 8, 3, 3)) * 0.1).astype(np.float32)
    b0 = (rng.standard_normal(12) * 0.1).astype(np.float32)
    w1 = (rng.standard_normal((12, 8, 3, 3)) * 0.1).astype(np.float32)
    b1 = (rng.standard_normal(12) * 0.1).astype(np.float32)
    ws = (np.abs(w0).reshape(12, -1).max(1) / 100).astype(np.float32)  # w1 saturates in places
    feeds = {"x": rng.standard_normal((3, 8, 10, 10)).astype(np.float32)}
    sess = engine.Session(_qat_model(w0, b0, ws).SerializeToString())
    assert "fuse_qdq: 1" in sess.describe()
    sess.refit({"W": w1, "B": b1}, strict=False)
    got = sess.run(feeds)["y"]
    fresh = engine.Session(_qat_model(w1, b1, ws).SerializeToString()).run(feeds)["y"]
    np.testing.assert_array_equal(got, fresh)
    ref = _ort_literal_bytes(_qat_model(w1, b1, ws), feeds)
    assert np.abs(got - ref).max() <= 0.01 * 1.001


def _ort_literal_bytes(model, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0]


_ISA_SCRIPT = r"""
import json, sys, numpy as np
sys.path[:0] = sys.argv[3:]
import kaiwu_infer as k
from test_quant_policies import _inputs
outs = {}
for name, path in json.loads(sys.argv[1]).items():
    sess = k.Session(path, threads=int(sys.argv[2]))
    # 9 rows: AMX's Gemm rows all in VNNI tails; 37: two whole 16-row tiles and a tail
    outs[name] = {f"{o}@{b}": v.tolist() for b in (9, 37) for o, v in sess.run(_inputs(name, b, 4)).items()}
print(json.dumps({"isa": k.int8_isa(), "outs": outs}))
"""

_ISAS = ["scalar", "avx2", "avx512vnni", "amx"]  # in order: each path the CPU has, up to its best


def _best_isa():
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if {"avx512f", "avx512bw", "avx512_vnni"} <= flags:
        # AMX also needs the kernel's grant (Linux >= 5.16 gives it on request)
        return "amx" if {"amx_tile", "amx_int8"} <= flags else "avx512vnni"
    return "avx2" if "avx2" in flags else "scalar"


def _isa_env(isa):
    env = dict(os.environ)
    env.pop("KAIWU_INT8_ISA", None)
    if isa is not None:
        env["KAIWU_INT8_ISA"] = isa
    return env


@pytest.mark.parametrize("threads", [1, 2])
def test_isa_paths_bit_identical(engine, qmodels, threads):
    """Each path forced by KAIWU_INT8_ISA (checked through int8_isa()) gives the same bytes."""
    import kaiwu_infer
    pkg = os.path.dirname(os.path.dirname(kaiwu_infer.__file__))
    best = _best_isa()
    results = {}
    for isa in _ISAS[:_ISAS.index(best) + 1] + [None]:
        r = subprocess.run([sys.executable, "-c", _ISA_SCRIPT, json.dumps(qmodels), str(threads), pkg, HERE],
                           env=_isa_env(isa), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["isa"] == (isa or best), (isa, got["isa"])  # unset: the best the CPU has
        results[isa] = got["outs"]
    for isa, outs in results.items():
        assert outs == results["scalar"], f"KAIWU_INT8_ISA={isa} differs from scalar"


def test_int8_isa_env_caps_and_refuses_unknown_names(engine, qmodels):
    import kaiwu_infer
    pkg = os.path.dirname(os.path.dirname(kaiwu_infer.__file__))
    best = _best_isa()
    for isa in _ISAS + ["best"]:
        r = subprocess.run([sys.executable, "-c", "import kaiwu_infer as k; print(k.int8_isa())"],
                           env=dict(_isa_env(isa), PYTHONPATH=pkg), capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        want = best if isa == "best" else _ISAS[min(_ISAS.index(isa), _ISAS.index(best))]
        assert r.stdout.strip() == want, (isa, r.stdout)
    script = ("import sys, numpy as np, kaiwu_infer as k\n"
              "try:\n    k.Session(sys.argv[1]).run({'obs': np.ones((3, 64), np.float32)})\n"
              "except k.UnsupportedOpError as e:\n    print('refused:', e)\n")
    r = subprocess.run([sys.executable, "-c", script, qmodels["mlp"]], env=dict(_isa_env("avx-512"), PYTHONPATH=pkg),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "refused:" in r.stdout and "KAIWU_INT8_ISA=avx-512" in r.stdout, r.stdout
