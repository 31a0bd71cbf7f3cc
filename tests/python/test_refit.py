"""Refit from a torch state_dict: correctness against torch, errors, atomicity, concurrency.

Every test goes through the intended API ``sess.refit(module.state_dict())``. Sessions
come from ``open_session``: ``kaiwu_infer.torch.load`` returns the Session itself once
Session.refit reads the model's "kaiwu.refit_map" natively, and until then wraps it
in ``kaiwu_infer.torch.Refitter`` (same interface).

Tolerances (stated once): against torch's forward, |kaiwu - torch| <= 1e-6 * scale +
1e-5 * |torch| elementwise, scale = max(1, max|torch|) (float32, different summation
order); a refitted session against a fresh session of the re-exported model:
|a - b| <= 1e-6 * (scale + |b|) (the same engine, same kernels).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
ki = pytest.importorskip("kaiwu_infer")
kt = pytest.importorskip("kaiwu_infer.torch")

pytestmark = [
    pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript"),
    pytest.mark.filterwarnings("ignore:Exporting a model to ONNX with a batch_size"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]

RTOL, ATOL = 1e-5, 1e-6          # vs torch
RTOL_ENGINE = 1e-6               # refitted vs fresh session


def open_session(model, **kw):
    """The final API: a session on which refit(state_dict) works."""
    return kt.load(model, **kw)


def assert_close(got, want, rtol, atol, what=""):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    scale = max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    err = np.abs(got - want)
    bound = atol * scale + rtol * np.abs(want)
    bad = err > bound
    assert not bad.any(), (
        f"{what}: {int(bad.sum())}/{bad.size} elements off, max err {err.max():.3g}, "
        f"worst at {np.unravel_index(np.argmax(err - bound), err.shape)}"
    )


# --------------------------------------------------------------------------- models


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
        self.pi = nn.Linear(64, 6)
        self.v = nn.Linear(64, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h)


class NatureCNN(nn.Module):
    def __init__(self, n_actions=6):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(),
            nn.Linear(3136, 512), nn.ReLU())
        self.pi = nn.Linear(512, n_actions)
        self.v = nn.Linear(512, 1)

    def forward(self, frames):
        h = self.conv(frames.float() / 255.0)
        return self.pi(h), self.v(h)


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Flatten(), nn.Linear(32 * 6 * 6, 32), nn.BatchNorm1d(32), nn.ReLU())
        self.pi = nn.Linear(32, 5)

    def forward(self, x):
        return (self.pi(self.net(x)),)


class LSTMPolicy(nn.Module):
    """batch_first LSTM, 2 layers, state inputs [layers, batch, H]."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 24)
        self.rnn = nn.LSTM(24, 32, num_layers=2, batch_first=True)
        self.pi = nn.Linear(32, 4)
        self.v = nn.Linear(32, 1)

    def forward(self, obs, h0, c0):
        y, (hn, cn) = self.rnn(torch.relu(self.enc(obs)), (h0, c0))
        return self.pi(y), self.v(y), hn, cn


class GRUPolicy(nn.Module):
    """time-major bidirectional GRU, 2 layers."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(10, 16)
        self.rnn = nn.GRU(16, 20, num_layers=2, bidirectional=True)
        self.pi = nn.Linear(40, 3)

    def forward(self, obs, h0):
        y, hn = self.rnn(torch.tanh(self.enc(obs)), h0)
        return self.pi(y), hn


class MultiInput(nn.Module):
    """token ids + features -> embedding, LSTM; output head tied to the embedding."""

    def __init__(self, vocab=40, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.feat = nn.Linear(6, d)
        self.rnn = nn.LSTM(2 * d, 24, batch_first=True)
        self.head = nn.Linear(24, d)
        self.out = nn.Linear(d, vocab, bias=False)
        self.out.weight = self.emb.weight  # tied
        self.v = nn.Linear(24, 1)

    def forward(self, ids, feats, h0, c0):
        x = torch.cat([self.emb(ids), torch.relu(self.feat(feats))], dim=-1)
        y, (hn, cn) = self.rnn(x, (h0, c0))
        return self.out(torch.tanh(self.head(y))), self.v(y), hn, cn


T = 5


def _f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


SPECS = {
    # name: (builder, input_names, output_names, dynamic_axes, make_inputs(rng, batch))
    "mlp": (MLP, ["obs"], ["logits", "value"], None,
            lambda rng, b: [_f32(rng, b, 16)]),
    "nature_cnn": (NatureCNN, ["frames"], ["logits", "value"], None,
                   lambda rng, b: [rng.integers(0, 256, (b, 4, 84, 84), dtype=np.uint8)]),
    "conv_bn": (ConvBN, ["x"], ["logits"], None, lambda rng, b: [_f32(rng, b, 3, 12, 12)]),
    "lstm": (LSTMPolicy, ["obs", "h0", "c0"], ["logits", "value", "hn", "cn"],
             {"h0": {1: "batch"}, "c0": {1: "batch"}, "hn": {1: "batch"}, "cn": {1: "batch"}},
             lambda rng, b: [_f32(rng, b, T, 8), _f32(rng, 2, b, 32, scale=0.5),
                             _f32(rng, 2, b, 32, scale=0.5)]),
    "gru": (GRUPolicy, ["obs", "h0"], ["logits", "hn"],
            {"obs": {1: "batch"}, "h0": {1: "batch"}, "logits": {1: "batch"}, "hn": {1: "batch"}},
            lambda rng, b: [_f32(rng, T, b, 10), _f32(rng, 4, b, 20, scale=0.5)]),
    "multi": (MultiInput, ["ids", "feats", "h0", "c0"], ["logits", "value", "hn", "cn"],
              {"h0": {1: "batch"}, "c0": {1: "batch"}, "hn": {1: "batch"}, "cn": {1: "batch"}},
              lambda rng, b: [rng.integers(0, 40, (b, T), dtype=np.int64), _f32(rng, b, T, 6),
                              _f32(rng, 1, b, 24, scale=0.5), _f32(rng, 1, b, 24, scale=0.5)]),
}


def build(name, seed=0, constant_folding=False):
    builder, ins, outs, dyn, make = SPECS[name]
    torch.manual_seed(seed)
    module = builder().eval()
    ex = [torch.from_numpy(a) for a in make(np.random.default_rng(seed), 2)]
    model = kt.export(module, tuple(ex), input_names=ins, output_names=outs,
                      dynamic_axes=dyn, constant_folding=constant_folding)
    return module, model, ins, outs, make


def torch_forward(module, arrays):
    with torch.no_grad():
        out = module(*[torch.from_numpy(a) for a in arrays])
    out = out if isinstance(out, tuple) else (out,)
    return [o.numpy() for o in out]


def run(sess, ins, outs, arrays):
    res = sess.run(dict(zip(ins, arrays)))
    return [np.array(res[o]) for o in outs]


def sgd_steps(module, make, rng, steps=3, lr=0.05):
    """A few SGD steps on a random regression target (BatchNorm in train mode updates
    its running statistics too)."""
    module.train()
    opt = torch.optim.SGD(module.parameters(), lr=lr)
    for _ in range(steps):
        xs = [torch.from_numpy(a) for a in make(rng, 8)]
        out = module(*xs)
        out = out if isinstance(out, tuple) else (out,)
        loss = sum(((o - torch.randn_like(o)) ** 2).mean() for o in out)
        opt.zero_grad()
        loss.backward()
        opt.step()
    module.eval()


# --------------------------------------------------------------------------- correctness


CASES = [(n, False) for n in SPECS] + [("mlp", True), ("lstm", True), ("gru", True),
                                       ("multi", True)]


@pytest.mark.parametrize("name,folding", CASES, ids=[f"{n}{'-folded' if f else ''}" for n, f in CASES])
def test_refit_from_state_dict_matches_torch(name, folding):
    rng = np.random.default_rng(1000 + list(SPECS).index(name) + 100 * folding)
    module, model, ins, outs, make = build(name, seed=7, constant_folding=folding)
    m = kt.RefitMap.from_model(model)
    if folding and name != "mlp":  # folded RNN weights are repacked, not copied
        assert any(e["op"] == "runs" for e in m.entries), [e["op"] for e in m.entries]
    sess = open_session(model)
    x0 = make(rng, 3)
    for o, got, want in zip(outs, run(sess, ins, outs, x0), torch_forward(module, x0)):
        assert_close(got, want, RTOL, ATOL, f"{name} before training, {o}")

    before = run(sess, ins, outs, x0)
    sgd_steps(module, make, rng)
    v0 = sess.weights_version
    report = sess.refit(module.state_dict())
    assert sess.weights_version == v0 + 1 == report.version
    assert sorted(report.updated) == sorted(m.onnx_names)

    x1 = make(rng, 5)  # fresh inputs, another batch size
    got = run(sess, ins, outs, x1)
    want = torch_forward(module, x1)
    for o, g, w in zip(outs, got, want):
        assert_close(g, w, RTOL, ATOL, f"{name} after refit, {o}")
    # the weights really changed: old outputs differ from new ones on the same inputs
    assert any(not np.allclose(a, b, rtol=1e-3, atol=1e-4)
               for a, b in zip(before, run(sess, ins, outs, x0)))

    # against a fresh session of the re-exported (trained) module
    fresh = ki.Session(kt.export(module, tuple(torch.from_numpy(a) for a in make(rng, 2)),
                                 input_names=ins, output_names=outs,
                                 dynamic_axes=SPECS[name][3], constant_folding=folding))
    for o, g, f in zip(outs, got, run(fresh, ins, outs, x1)):
        assert_close(g, f, RTOL_ENGINE, RTOL_ENGINE, f"{name} refit vs fresh session, {o}")


def test_conv_bn_folded_export_is_refused():
    """With constant folding the exporter fuses Conv+BatchNorm arithmetically; the map
    cannot express that and export says so instead of writing a wrong map."""
    with pytest.raises(kt.RefitMapError, match="constant_folding"):
        build("conv_bn", constant_folding=True)


def test_batchnorm_initializers_not_deduplicated():
    """torch.onnx.export merges initializers with equal values (a fresh BatchNorm's
    weight and running_var are both ones), which would make a later refit by ONNX names
    impossible; kaiwu_infer.torch.export keeps one initializer per state_dict tensor."""
    module, model, ins, outs, make = build("conv_bn")
    float_keys = [k for k, v in module.state_dict().items() if v.is_floating_point()]
    assert len(kt.RefitMap.from_model(model).entries) == len(float_keys)
    import io

    buf = io.BytesIO()
    torch.onnx.export(module, tuple(torch.from_numpy(a) for a in make(np.random.default_rng(0), 2)),
                      buf, input_names=ins, output_names=outs, dynamo=False,
                      do_constant_folding=False)
    plain = ki.Session(buf.getvalue())
    assert len(plain.weights_info) < len(float_keys)  # documents the torch behaviour


def test_tied_weights_and_aliases():
    rng = np.random.default_rng(5)
    module, model, ins, outs, make = build("multi", seed=3)
    m = kt.RefitMap.from_model(model)
    assert m.aliases == {"out.weight": "emb.weight"} or m.aliases == {"emb.weight": "out.weight"}
    sess = open_session(model)
    sgd_steps(module, make, rng)
    sd = module.state_dict()
    canonical = m.aliases[next(iter(m.aliases))]
    alias = next(iter(m.aliases))
    # only the alias given: still a complete strict refit
    sd_alias_only = {k: v for k, v in sd.items() if k != canonical}
    report = sess.refit(sd_alias_only)
    assert alias not in report.ignored
    x = make(rng, 4)
    for o, g, w in zip(outs, run(sess, ins, outs, x), torch_forward(module, x)):
        assert_close(g, w, RTOL, ATOL, f"alias-only refit, {o}")


# --------------------------------------------------------------------------- errors


@pytest.fixture
def mlp_case():
    rng = np.random.default_rng(11)
    module, model, ins, outs, make = build("mlp", seed=2)
    sess = open_session(model)
    sgd_steps(module, make, rng)  # module now differs from the session's weights
    x = make(rng, 7)
    return sess, module, ins, outs, x


def _refused(sess, ins, outs, x, bad, match, **kw):
    before = run(sess, ins, outs, x)
    v0 = sess.weights_version
    with pytest.raises(ki.RefitError, match=match):
        sess.refit(bad, **kw)
    assert sess.weights_version == v0
    for a, b in zip(before, run(sess, ins, outs, x)):
        assert np.array_equal(a, b)


def test_missing_key_strict(mlp_case):
    sess, module, ins, outs, x = mlp_case
    sd = dict(module.state_dict())
    del sd["pi.bias"]
    _refused(sess, ins, outs, x, sd, r"pi\.bias.*missing")


def test_unknown_key(mlp_case):
    sess, module, ins, outs, x = mlp_case
    sd = dict(module.state_dict())
    sd["pi.extra"] = torch.zeros(3)
    _refused(sess, ins, outs, x, sd, r"pi\.extra")
    v0 = sess.weights_version
    report = sess.refit(sd, strict=False)  # non-strict: ignored and reported
    assert "pi.extra" in report.ignored
    assert sess.weights_version == v0 + 1
    for o, g, w in zip(outs, run(sess, ins, outs, x), torch_forward(module, x)):
        assert_close(g, w, RTOL, ATOL, o)


def test_wrong_shape(mlp_case):
    sess, module, ins, outs, x = mlp_case
    sd = dict(module.state_dict())
    sd["body.0.weight"] = torch.zeros(64, 17)
    _refused(sess, ins, outs, x, sd, r"body\.0\.weight.*shape")
    sd = dict(module.state_dict())
    sd["v.bias"] = torch.zeros(())
    _refused(sess, ins, outs, x, sd, r"v\.bias.*shape")


def test_wrong_dtype(mlp_case):
    sess, module, ins, outs, x = mlp_case
    sd = dict(module.state_dict())
    sd["pi.weight"] = sd["pi.weight"].double()
    _refused(sess, ins, outs, x, sd, r"pi\.weight.*dtype")
    sd["pi.weight"] = sd["pi.weight"].to(torch.int32)
    _refused(sess, ins, outs, x, sd, r"pi\.weight.*dtype")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_with_check_finite(mlp_case, bad):
    sess, module, ins, outs, x = mlp_case
    sd = {k: v.clone() for k, v in module.state_dict().items()}
    sd["body.2.weight"][3, 5] = bad
    _refused(sess, ins, outs, x, sd, r"non-finite", check_finite=True)
    # without check_finite the engine takes the values as they are
    v0 = sess.weights_version
    sess.refit(sd, check_finite=False)
    assert sess.weights_version == v0 + 1
    w = sess.get_weights(["body.2.weight"])["body.2.weight"]
    assert np.array_equal(w[3, 5], np.float32(bad), equal_nan=True)


def test_several_problems_are_all_named(mlp_case):
    sess, module, ins, outs, x = mlp_case
    sd = dict(module.state_dict())
    del sd["v.weight"]
    sd["pi.bias"] = torch.zeros(7)
    sd["nope"] = torch.zeros(1)
    with pytest.raises(ki.RefitError) as e:
        sess.refit(sd)
    for name in ("v.weight", "pi.bias", "nope"):
        assert name in str(e.value)


def test_non_strict_partial(mlp_case):
    sess, module, ins, outs, x = mlp_case
    before = run(sess, ins, outs, x)
    report = sess.refit({"v.weight": module.v.weight, "v.bias": module.v.bias}, strict=False)
    assert sorted(report.updated) == ["v.bias", "v.weight"]
    logits, value = run(sess, ins, outs, x)
    assert np.array_equal(logits, before[0])  # the policy head was not touched
    assert not np.allclose(value, before[1])


def test_version_counts_successes_only(mlp_case):
    sess, module, ins, outs, x = mlp_case
    v0 = sess.weights_version
    good = module.state_dict()
    bad = dict(good)
    bad["pi.weight"] = torch.zeros(1)
    for i, sd in enumerate([good, bad, good, bad, bad, good]):
        try:
            sess.refit(sd)
        except ki.RefitError:
            pass
    assert sess.weights_version == v0 + 3


def test_onnx_names_still_work(mlp_case):
    """Weights given by ONNX initializer name pass through untouched, as does a plain
    torch.onnx.export file (no refit map)."""
    sess, module, ins, outs, x = mlp_case
    names = kt.state_dict_to_onnx(kt.RefitMap.from_model(build("mlp", seed=2)[1]),
                                  module.state_dict())
    new = {k: v * 0.5 for k, v in sess.get_weights().items()}
    sess.refit(new)
    got = sess.get_weights()
    for k, v in new.items():
        assert np.array_equal(got[k], v)

    import io

    buf = io.BytesIO()
    torch.onnx.export(module, (torch.from_numpy(x[0]),), buf, input_names=ins,
                      output_names=outs, dynamo=False, do_constant_folding=False,
                      dynamic_axes={n: {0: "b"} for n in ins + outs})
    plain = ki.Session(buf.getvalue())
    assert set(plain.weights_info) == set(names)
    with pytest.raises(ki.RefitError, match="refit_map"):
        kt.state_dict_to_onnx(buf.getvalue(), module.state_dict())
    plain.refit({k: v.detach().numpy() for k, v in module.state_dict().items()})
    for o, g, w in zip(outs, run(plain, ins, outs, x), torch_forward(module, x)):
        assert_close(g, w, RTOL, ATOL, o)


def test_map_roundtrip_and_key_detection():
    _, model, *_ = build("lstm", constant_folding=True)
    m = kt.RefitMap.from_model(model)
    again = kt.RefitMap.from_json(m.to_json())
    assert again.entries == m.entries and again.keys == m.keys
    onnx_names = m.onnx_names
    renamed = [n for n in onnx_names if not m.known(n)]  # onnx::LSTM_* names
    assert len(renamed) >= 4
    assert not m.looks_like_state_dict(renamed, onnx_names)
    assert m.looks_like_state_dict(["rnn.weight_ih_l0", "pi.bias"], onnx_names)


def test_import_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import kaiwu_infer, kaiwu_infer.torch\n"
            "assert 'torch' not in sys.modules or sys.modules['torch'] is None\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(ki.__file__))] + sys.path)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------------------- concurrency


def test_refit_while_running_is_atomic():
    """4 threads run continuously while the main thread refits alternately between two
    weight sets 50 times: every output tuple equals exactly one set's reference."""
    rng = np.random.default_rng(21)
    module, model, ins, outs, make = build("mlp", seed=4)
    sess = open_session(model)
    sd_a = {k: v.clone() for k, v in module.state_dict().items()}
    sgd_steps(module, make, rng, steps=2, lr=0.2)
    sd_b = {k: v.clone() for k, v in module.state_dict().items()}
    x = make(rng, 256)
    refs = []
    for sd in (sd_a, sd_b):
        sess.refit(sd)
        refs.append(run(sess, ins, outs, x))
    assert not np.array_equal(refs[0][0], refs[1][0])

    stop = threading.Event()
    counts = [0, 0]
    bad: list[str] = []
    done = [0]
    lock = threading.Lock()

    def runner():
        while not stop.is_set():
            got = run(sess, ins, outs, x)
            match = [all(np.array_equal(g, r) for g, r in zip(got, ref)) for ref in refs]
            with lock:
                done[0] += 1
                if match[0]:
                    counts[0] += 1
                elif match[1]:
                    counts[1] += 1
                else:
                    bad.append(f"run {done[0]} matches neither weight set")

    threads = [threading.Thread(target=runner) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for i in range(50):
            with lock:
                seen = done[0]
            sess.refit(sd_a if i % 2 == 0 else sd_b)
            deadline = time.monotonic() + 10
            while True:  # let a few runs finish on these weights before the next refit
                with lock:
                    if done[0] >= seen + 4:
                        break
                if time.monotonic() > deadline:
                    break
                time.sleep(0.0005)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not bad, bad[:5]
    assert counts[0] > 0 and counts[1] > 0, counts
    assert sum(counts) >= 200


def test_export_writes_file_with_map(tmp_path):
    """export(f=path) writes the model with its map; a session opened from the path
    refits from a state_dict like one opened from the ModelProto."""
    rng = np.random.default_rng(31)
    torch.manual_seed(9)
    module = MLP().eval()
    path = tmp_path / "mlp.onnx"
    proto = kt.export(module, (torch.zeros(2, 16),), path, input_names=["obs"],
                      output_names=["logits", "value"])
    assert path.is_file() and kt.RefitMap.from_model(str(path)).entries == \
        kt.RefitMap.from_model(proto).entries
    sess = kt.load(str(path))
    sgd_steps(module, SPECS["mlp"][4], rng)
    sess.refit(module.state_dict())
    x = SPECS["mlp"][4](rng, 3)
    for o, g, w in zip(["logits", "value"], run(sess, ["obs"], ["logits", "value"], x),
                       torch_forward(module, x)):
        assert_close(g, w, RTOL, ATOL, o)


class _DLPackOnly:
    """An array producer that speaks only DLPack (no __array__), like many frameworks' tensors."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_refit_accepts_dlpack_producers():
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(11)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", 1, ["b", 4])], [helper.make_tensor_value_info("y", 1, ["b", 3])],
        [numpy_helper.from_array(w, "w")])
    sess = ki.Session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    new_w = rng.standard_normal((4, 3)).astype(np.float32)
    report = sess.refit({"w": _DLPackOnly(new_w)})
    assert report.updated == ["w"]
    x = rng.standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(sess.run({"x": x})["y"], x @ new_w, rtol=1e-5, atol=1e-6)


# Export finds recurrent state axes: state inputs/outputs of LSTM/GRU get the batch on axis 1
# with no dynamic_axes (GRU's observation is time-major, so only obs/logits are given).
AUTO_AXES = {"lstm": None, "multi": None,
             "gru": {"obs": {1: "batch"}, "logits": {1: "batch"}}}


@pytest.mark.parametrize("name", sorted(AUTO_AXES))
def test_export_finds_recurrent_state_batch_axis(name):
    builder, ins, outs, _, make = SPECS[name]
    torch.manual_seed(3)
    module = builder().eval()
    ex = [torch.from_numpy(a) for a in make(np.random.default_rng(3), 2)]
    model = kt.export(module, tuple(ex), input_names=ins, output_names=outs,
                      dynamic_axes=AUTO_AXES[name])
    sess = ki.Session(model)
    shapes = {i.name: i.shape for i in sess.inputs}
    for state in ("h0", "c0"):
        if state in shapes:
            assert shapes[state][1] == "batch" and shapes[state][0] != "batch", shapes[state]
    rng = np.random.default_rng(4)
    for batch in (1, 7, 64):
        arrays = make(rng, batch)
        got = run(sess, ins, outs, arrays)
        want = torch_forward(module, arrays)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_export_explicit_dynamic_axes_win_over_state_detection():
    builder, ins, outs, _, make = SPECS["lstm"]
    torch.manual_seed(0)
    module = builder().eval()
    ex = [torch.from_numpy(a) for a in make(np.random.default_rng(0), 2)]
    model = kt.export(module, tuple(ex), input_names=ins, output_names=outs,
                      dynamic_axes={"h0": {0: "layers"}})
    shapes = {i.name: i.shape for i in ki.Session(model).inputs}
    assert shapes["h0"][0] == "layers" and shapes["c0"][1] == "batch"
