"""Steady-state refit allocates no weight memory: after two weight versions exist, a refit
writes into the pooled buffers no run holds, so ``Session.weight_memory`` (buffers and bytes
of weight storage allocated so far) stays put while the weights keep changing. And it runs
no Python code per weight: the engine reads the state_dict's tensors (or numpy arrays) itself.

Counters, not timings. Outputs after the refits are compared with a fresh session of the
same weights (same engine and kernels: |a - b| <= 1e-6 * (scale + |b|)).
"""

from __future__ import annotations

import copy
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ki = pytest.importorskip("kaiwu_infer")
kt = pytest.importorskip("kaiwu_infer.torch")

from test_refit import SPECS, assert_close, build, run  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript"),
    pytest.mark.filterwarnings("ignore:Exporting a model to ONNX with a batch_size"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]


def perturbed(module, seed):
    """The module's state_dict with noise on every parameter (tied parameters stay tied)."""
    m = copy.deepcopy(module)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return {k: v.clone() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("name", list(SPECS))
def test_steady_state_refit_allocates_no_weight_memory(name):
    module, model, ins, outs, make = build(name, seed=11)
    sess = kt.load(model)
    sd_a = perturbed(module, 1)
    sd_b = perturbed(module, 2)
    start = sess.weight_memory  # the loaded weights live in the imported model's storage
    sess.refit(sd_a)
    after_one = sess.weight_memory
    # The counter is live: the first refitted version needs pooled storage of its own.
    assert after_one["host_bytes"] > start["host_bytes"], (start, after_one)
    assert after_one["host_buffers"] > start["host_buffers"], (start, after_one)
    sess.refit(sd_b)
    steady = sess.weight_memory
    rng = np.random.default_rng(5)
    x = make(rng, 3)
    for i in range(8):
        sess.refit(sd_a if i % 2 == 0 else sd_b)
        run(sess, ins, outs, x)
        assert sess.weight_memory == steady, (i, steady, sess.weight_memory)
    # The last refit was sd_b: the session computes what a fresh one of sd_b computes.
    module.load_state_dict(sd_b)
    fresh = ki.Session(kt.export(module, tuple(torch.from_numpy(a) for a in make(rng, 2)),
                                 input_names=ins, output_names=outs, dynamic_axes=SPECS[name][3]))
    for o, g, f in zip(outs, run(sess, ins, outs, x), run(fresh, ins, outs, x)):
        assert_close(g, f, 1e-6, 1e-6, f"{name} after 10 refits vs fresh session, {o}")



@pytest.mark.parametrize("name", list(SPECS))
def test_steady_state_refit_runs_no_python_code_per_weight(name):
    """A profile hook counts the Python functions entered during a refit from a torch
    state_dict and from numpy arrays of it: Session.refit and its report, whatever the
    number of weights, and nothing of kaiwu_infer.refit_map (the map is applied in the
    engine). With ``name_map`` (translated in Python) the same hook sees work per weight."""
    module, model, ins, outs, make = build(name, seed=11)
    sess = kt.load(model)
    sd = perturbed(module, 1)
    arrays = {k: v.numpy() for k, v in sd.items()}

    def entered(weights, **kw):
        calls = []

        def hook(frame, event, arg):
            if event == "call":
                calls.append(frame.f_code)

        sys.setprofile(hook)
        try:
            sess.refit(weights, **kw)
        finally:
            sys.setprofile(None)
        return calls

    for label, weights in (("state_dict", sd), ("numpy", arrays)):
        sess.refit(weights)  # the steady state: two versions exist
        calls = entered(weights)
        names = [f"{c.co_filename}:{c.co_name}" for c in calls]
        assert calls and calls[0].co_name == "refit", names  # the hook sees the call
        assert len(calls) <= 2, (label, len(sd), names)
        assert not any("refit_map" in c.co_filename for c in calls), (label, names)
    # The counter is live: a refit whose names Python translates enters code per weight.
    per_weight = entered(arrays, name_map=lambda k: k)
    assert len(per_weight) >= len(arrays), [c.co_name for c in per_weight]
