"""Refit in one pass on the CPU: copy steps whose sources are all given (GEMM panels of a
Gemm's or an LSTM's weights, gate repacking) are computed straight from the given arrays,
and weights only those steps read are left unwritten until something asks for them.

Each case compares the refitted session with a fresh session built from the same weights
(same engine and kernels: |a - b| <= 1e-6 * (scale + |b|)) and ``get_weights`` with the
arrays given, after full refits (state_dict keys and ONNX names), partial refits
(``strict=False``: the steps whose other sources were left by an earlier refit read them
back), alternating weight sets, and runs in flight.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
ki = pytest.importorskip("kaiwu_infer")
kt = pytest.importorskip("kaiwu_infer.torch")
policies = pytest.importorskip("policies")

from onnx import numpy_helper  # noqa: E402
from test_refit import assert_close  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript"),
    pytest.mark.filterwarnings("ignore:Exporting a model to ONNX with a batch_size"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]

TOL = 1e-6


class Case:
    def __init__(self, name):
        module, ex, ins, outs, dyn = getattr(policies, f"build_{name}")()
        self.name, self.ins, self.outs, self.dyn = name, ins, outs, dyn
        self.args = tuple(ex[n] for n in ins)
        self.feeds = {n: a.numpy() for n, a in zip(ins, self.args)}
        self.model = kt.export(module, self.args, input_names=ins, output_names=outs,
                               dynamic_axes=dyn)
        self.map = kt.RefitMap.from_model(self.model)
        self.sds = [self.perturbed(module, s) for s in (1, 2, 3)]

    @staticmethod
    def perturbed(module, seed):
        g = torch.Generator().manual_seed(seed)
        return {k: (v + 0.05 * torch.randn(v.shape, generator=g)) if v.is_floating_point()
                else v.clone() for k, v in module.state_dict().items()}

    def onnx(self, sd):
        return {k: np.ascontiguousarray(v) for k, v in self.map.apply(sd)[0].items()}

    def fresh(self, sd):
        """Outputs of a fresh session of the model with `sd`'s values as initializers."""
        proto = onnx.ModelProto()
        proto.CopyFrom(self.model)
        arrays = self.onnx(sd)
        for init in proto.graph.initializer:
            if init.name in arrays:
                init.CopyFrom(numpy_helper.from_array(arrays[init.name], init.name))
        return self.run(ki.Session(proto))

    def run(self, sess):
        out = sess.run(self.feeds)
        return [np.array(out[o]) for o in self.outs]

    def check(self, sess, sd, what, weights=True):
        for o, got, want in zip(self.outs, self.run(sess), self.fresh(sd)):
            assert_close(got, want, TOL, TOL, f"{self.name} {what}, {o}")
        if not weights:  # get_weights() also restores what the runs never read
            return
        weights = sess.get_weights()
        for k, v in self.onnx(sd).items():
            assert np.array_equal(weights[k], v), f"{self.name} {what}: get_weights()['{k}']"


@pytest.fixture(scope="module", params=policies.ALL_NAMES)
def case(request):
    return Case(request.param)


def test_full_refits_alternating(case):
    sess = kt.load(case.model)
    for i in range(6):
        sd = case.sds[i % 2]
        sess.refit(sd)
        case.check(sess, sd, f"state_dict refit {i}")
    engine = getattr(sess, "session", sess)
    for i in range(4):
        sd = case.sds[(i + 1) % 3]
        engine.refit(case.onnx(sd), strict=False)
        case.check(sess, sd, f"ONNX-name refit {i}")


def test_partial_refits_read_back_stale_weights(case):
    """Full refit (weights left to their packed forms), then refits of one key at a time:
    the steps that also read other keys must read them as the full refit left them."""
    sess = kt.load(case.model)
    want = dict(case.sds[0])
    sess.refit(want)
    keys = [k for k, v in want.items() if v.is_floating_point()]
    # every LSTM/GRU key and a few others, one at a time
    recurrent = [k for k in keys if "core" in k or "gru" in k or "lstm" in k]
    picked = recurrent[:8] + keys[:2] + keys[-2:]
    for j, k in enumerate(dict.fromkeys(picked)):
        want[k] = case.sds[1 + j % 2][k]
        sess.refit({k: want[k]}, strict=False)
        case.check(sess, want, f"after partial refit of '{k}'", weights=False)
    case.check(sess, want, "after the partial refits")
    # and by ONNX names: half the weights
    engine = getattr(sess, "session", sess)
    target = case.onnx(case.sds[2])
    names = sorted(target)[::2]
    engine.refit({n: target[n] for n in names}, strict=False)
    got = sess.get_weights()
    before = case.onnx(want)
    for n in target:
        assert np.array_equal(got[n], target[n] if n in names else before[n]), n


def test_non_finite_in_a_packed_only_weight_is_named(case):
    """check_finite sees every element of a weight that is only written packed."""
    sess = kt.load(case.model)
    sess.refit(case.sds[0])
    key = max((k for k, v in case.sds[1].items() if v.is_floating_point() and v.dim() == 2),
              key=lambda k: case.sds[1][k].numel())
    bad = {k: v.clone() for k, v in case.sds[1].items()}
    flat = bad[key].view(-1)
    index = flat.numel() - 3
    flat[index] = float("nan")
    v0 = sess.weights_version
    message = rf"'{key}' holds a non-finite value at flat index {index}"
    with pytest.raises(ki.RefitError, match=message):
        sess.refit(bad, check_finite=True)
    assert sess.weights_version == v0
    case.check(sess, case.sds[0], "after a refused refit")


def test_runs_in_flight_see_one_version(case):
    """2 threads run while the main thread alternates between two weight sets: every
    output tuple equals one set's reference exactly."""
    sess = kt.load(case.model)
    refs = []
    for sd in case.sds[:2]:
        sess.refit(sd)
        refs.append(case.run(sess))
    stop = threading.Event()
    bad, counts = [], [0, 0]

    def runner():
        while not stop.is_set():
            got = case.run(sess)
            m = [all(np.array_equal(g, r) for g, r in zip(got, ref)) for ref in refs]
            if m[0]:
                counts[0] += 1
            elif m[1]:
                counts[1] += 1
            else:
                bad.append("matches neither weight set")

    threads = [threading.Thread(target=runner) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(40):
            sess.refit(case.sds[i % 2])
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not bad, bad[:3]
    assert sum(counts) > 0
