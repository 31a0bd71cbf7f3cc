"""Refit of GPU sessions from torch CUDA tensors (device to device) and from numpy: equality
with a fresh GPU session of the same weights, many alternating refits with no new weight
memory, ordering after the producer's CUDA stream, and refused refits that change nothing.
Skipped unless kaiwu_infer has its CUDA backend and a device, and torch has CUDA.

Tolerances: a refitted GPU session against a fresh GPU session of the same weights, same
kernels: |a - b| <= 1e-6 * (scale + |b|).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ki = pytest.importorskip("kaiwu_infer")
kt = pytest.importorskip("kaiwu_infer.torch")

import policies  # noqa: E402
from test_refit import assert_close  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not (ki.cuda_available() and torch.cuda.is_available()),
                       reason="needs kaiwu_infer's CUDA backend, a CUDA device and torch with CUDA"),
    pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript"),
    pytest.mark.filterwarnings("ignore:Exporting a model to ONNX with a batch_size"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]


def case(name):
    module, ex, ins, outs, dyn = getattr(policies, f"build_{name}")()
    model = kt.export(module, tuple(ex[n] for n in ins), input_names=ins, output_names=outs,
                      dynamic_axes=dyn)
    return module, model, ins, outs


def perturbed(module, seed, device="cpu"):
    m = copy.deepcopy(module)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return {k: v.detach().clone().to(device) for k, v in m.state_dict().items()}


def outputs(sess, name, outs, batch=5, seed=9):
    res = sess.run(policies.make_inputs(name, batch, seed=seed))
    return [np.array(res[o]) for o in outs]


def fresh_outputs(module, sd, name, ins, outs):
    m = copy.deepcopy(module)
    m.load_state_dict({k: v.cpu() for k, v in sd.items()})
    _, ex, _, _, dyn = getattr(policies, f"build_{name}")()
    model = kt.export(m, tuple(ex[n] for n in ins), input_names=ins, output_names=outs, dynamic_axes=dyn)
    return outputs(kt.load(model, device="cuda"), name, outs)


@pytest.mark.parametrize("name", policies.ALL_NAMES)
def test_refit_from_cuda_tensors_equals_fresh_session(name):
    module, model, ins, outs = case(name)
    sess = kt.load(model, device="cuda")
    sd_a = perturbed(module, 1, "cuda")
    sd_b = perturbed(module, 2, "cuda")
    sess.refit(sd_a)
    sess.refit(sd_b)
    steady = sess.weight_memory
    assert steady["device_bytes"] > 0, steady
    for i in range(8):
        sess.refit(sd_a if i % 2 == 0 else sd_b)
        outputs(sess, name, outs)
        assert sess.weight_memory == steady, (i, steady, sess.weight_memory)
    for o, g, f in zip(outs, outputs(sess, name, outs), fresh_outputs(module, sd_b, name, ins, outs)):
        assert_close(g, f, 1e-6, 1e-6, f"{name} refit from CUDA tensors vs fresh session, {o}")
    # numpy weights into the same GPU session: the same result as the CUDA tensors gave
    sess.refit({k: v.cpu().numpy() for k, v in sd_a.items()})
    for o, g, f in zip(outs, outputs(sess, name, outs), fresh_outputs(module, sd_a, name, ins, outs)):
        assert_close(g, f, 1e-6, 1e-6, f"{name} refit from numpy vs fresh session, {o}")


@pytest.mark.parametrize("explicit", [True, False], ids=["stream=", "current stream"])
def test_refit_waits_for_the_producer_stream(explicit):
    """The new values are written on a side stream behind ~50 ms of GPU work; the refit must
    read them, not the old ones (stream= given, or torch's current stream inside the
    `with torch.cuda.stream(s)` block)."""
    name = "mlp"
    module, model, ins, outs = case(name)
    sess = kt.load(model, device="cuda")
    sd_a = perturbed(module, 3, "cuda")
    sd_b = perturbed(module, 4, "cuda")
    live = {k: v.clone() for k, v in sd_a.items()}
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(100_000_000)  # keeps the side stream busy before the writes
        for k, v in live.items():
            v.copy_(sd_b[k])
        if not explicit:
            sess.refit(live)
    if explicit:
        sess.refit(live, stream=s)
    for o, g, f in zip(outs, outputs(sess, name, outs), fresh_outputs(module, sd_b, name, ins, outs)):
        assert_close(g, f, 1e-6, 1e-6, f"refit after the producer stream, {o}")


def test_refused_refit_from_cuda_tensors_keeps_weights():
    name = "atari_cnn"
    module, model, ins, outs = case(name)
    sess = kt.load(model, device="cuda")
    sd_a = perturbed(module, 5, "cuda")
    sess.refit(sd_a)
    before = outputs(sess, name, outs)
    bad = perturbed(module, 6, "cuda")
    key = next(k for k, v in bad.items() if v.is_floating_point() and v.dim() == 4)
    bad[key][0, 0, 0, 0] = float("nan")
    with pytest.raises(ki.RefitError, match="non-finite|NaN|finite"):
        sess.refit(bad, check_finite=True)
    wrong = perturbed(module, 7, "cuda")
    wrong[key] = wrong[key][:1]
    with pytest.raises(ki.RefitError) as e:
        sess.refit(wrong)
    assert "shape" in str(e.value)
    for o, a, b in zip(outs, outputs(sess, name, outs), before):
        np.testing.assert_array_equal(a, b, err_msg=f"refused refits changed {o}")


def test_non_contiguous_cuda_tensors():
    name = "mlp"
    module, model, ins, outs = case(name)
    sess = kt.load(model, device="cuda")
    sd = perturbed(module, 8, "cuda")
    odd = {k: (v.t().contiguous().t() if v.dim() == 2 else v) for k, v in sd.items()}
    assert any(not v.is_contiguous() for v in odd.values())
    sess.refit(odd)
    for o, g, f in zip(outs, outputs(sess, name, outs), fresh_outputs(module, sd, name, ins, outs)):
        assert_close(g, f, 1e-6, 1e-6, f"non-contiguous CUDA weights, {o}")


@pytest.mark.parametrize("name", ["atari_cnn", "impala_lstm", "mlp"])
@pytest.mark.parametrize("threads", [1, 16])
@pytest.mark.parametrize("pipeline", ["1", "0"])
def test_refit_from_numpy_through_staging_equals_fresh_session(name, threads, pipeline, monkeypatch):
    """Host arrays go through the pool's page-locked staging in chunks copied on the session's
    threads (pipelined: each chunk's upload queued by the thread that copies its last piece;
    KAIWU_REFIT_PIPELINE=0: chunk by chunk): alternating refits allocate nothing once the
    staging exists, the result equals a fresh session, and the host copies read back
    (get_weights) are the new values."""
    monkeypatch.setenv("KAIWU_REFIT_PIPELINE", pipeline)
    module, model, ins, outs = case(name)
    sess = kt.load(model, device="cuda", threads=threads)
    sd_a = {k: v.numpy() for k, v in perturbed(module, 11).items()}
    sd_b = {k: v.numpy() for k, v in perturbed(module, 12).items()}
    sess.refit(sd_a)
    sess.refit(sd_b)
    steady = sess.weight_memory
    for i in range(6):
        sess.refit(sd_a if i % 2 == 0 else sd_b)
        outputs(sess, name, outs)
        assert sess.weight_memory == steady, (i, steady, sess.weight_memory)
    for o, g, f in zip(outs, outputs(sess, name, outs), fresh_outputs(
            module, {k: torch.from_numpy(v) for k, v in sd_b.items()}, name, ins, outs)):
        assert_close(g, f, 1e-6, 1e-6, f"{name} refit from numpy (threads={threads}) vs fresh, {o}")
    engine = sess.refit_map.apply(sd_b)[0]
    got = sess.get_weights(list(engine))
    for k, v in engine.items():
        np.testing.assert_array_equal(got[k], v, err_msg=f"get_weights after a staged refit: {k}")


@pytest.mark.parametrize("pipeline", ["1", "0"])
def test_refused_refit_from_numpy_names_the_element_and_keeps_weights(pipeline, monkeypatch):
    monkeypatch.setenv("KAIWU_REFIT_PIPELINE", pipeline)
    name = "atari_cnn"
    module, model, ins, outs = case(name)
    sess = kt.load(model, device="cuda", threads=16)
    sess.refit({k: v.numpy() for k, v in perturbed(module, 13).items()})
    before = outputs(sess, name, outs)
    bad = {k: v.numpy() for k, v in perturbed(module, 14).items()}
    key = max(bad, key=lambda k: bad[k].size)  # the largest weight: split over several chunks
    bad[key].reshape(-1)[bad[key].size - 3] = np.inf
    with pytest.raises(ki.RefitError, match=f"'{key}' holds a non-finite value at flat index "
                                            f"{bad[key].size - 3}"):
        sess.refit(bad, check_finite=True)
    for o, a, b in zip(outs, outputs(sess, name, outs), before):
        np.testing.assert_array_equal(a, b, err_msg=f"a refused refit changed {o}")
