"""Five exported PyTorch policies: kaiwu_infer vs onnxruntime and vs torch's own forward.

Each policy is exported once (TorchScript exporter, opset 17, dynamic batch) and run at
batch 1, 7 and 256, with optimize=True and optimize=False; one Session per
(policy, optimize) is reused across the batch sizes (so dynamic batch re-planning is
exercised).

Tolerance per output: assert_allclose(rtol=1e-4, atol=1e-5 * max(1, scale)) where scale
is the largest |reference| value among entries below 1e6 in magnitude (the pointer
logits of the multi-input policy hold -1e9 for padded units; those entries must match
to rtol 1e-4 like any other).  All outputs here are O(0.01..1.5), so atol is 1e-5:
100x the float32 differences measured between onnxruntime and torch (~1e-7).
"""

from __future__ import annotations

import numpy as np
import pytest

import policies
from helpers import run_ort

BATCHES = (1, 7, 256)
RTOL = 1e-4

_EXPORTS: dict[str, tuple] = {}
_SESSIONS: dict[tuple, object] = {}
_REFS: dict[tuple, tuple] = {}


def _export(name):
    if name not in _EXPORTS:
        import onnx

        module, ex, ins, outs, dyn = policies.build(name)
        data = policies.export_bytes(name)
        _EXPORTS[name] = (module, ins, outs, data, onnx.load_from_string(data))
    return _EXPORTS[name]


def _refs(name, batch):
    key = (name, batch)
    if key not in _REFS:
        module, ins, outs, data, model = _export(name)
        feeds = policies.make_inputs(name, batch, seed=1000 + batch)
        ort_out = run_ort(model, feeds)
        torch_out = dict(zip(outs, policies.torch_forward(module, feeds, ins)))
        _REFS[key] = (feeds, ort_out, torch_out)
    return _REFS[key]


def _atol(ref: np.ndarray) -> float:
    a = np.abs(ref[np.isfinite(ref)])
    a = a[a < 1e6]
    scale = float(a.max()) if a.size else 1.0
    return 1e-5 * max(1.0, scale)


def _compare(got, ref, outs, context):
    for n in outs:
        assert n in got, f"{context}: missing output {n}; got {sorted(got)}"
        g, r = np.asarray(got[n]), np.asarray(ref[n])
        assert g.dtype == r.dtype, f"{context}: {n} dtype {g.dtype} != {r.dtype}"
        assert g.shape == r.shape, f"{context}: {n} shape {g.shape} != {r.shape}"
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=_atol(r), err_msg=f"{context}: output {n}")


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("name", policies.ALL_NAMES)
def test_onnxruntime_matches_torch(name, batch):
    """Validates the export itself (no engine needed)."""
    _, _, outs, _, _ = _export(name)
    _, ort_out, torch_out = _refs(name, batch)
    _compare(ort_out, torch_out, outs, f"{name} B={batch} onnxruntime vs torch")


@pytest.mark.parametrize("optimize", [True, False], ids=["opt", "noopt"])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("name", policies.ALL_NAMES)
def test_policy(engine, name, batch, optimize):
    module, ins, outs, data, model = _export(name)
    key = (name, optimize)
    if key not in _SESSIONS:
        _SESSIONS[key] = engine.Session(data, optimize=optimize)
    sess = _SESSIONS[key]
    feeds, ort_out, torch_out = _refs(name, batch)
    feeds_copy = {k: v.copy() for k, v in feeds.items()}
    got = {k: np.array(v, copy=True) for k, v in sess.run(feeds_copy).items()}
    for k in feeds:
        np.testing.assert_array_equal(feeds_copy[k], feeds[k], err_msg=f"engine modified input {k}")
    _compare(got, ort_out, outs, f"{name} B={batch} optimize={optimize} kaiwu vs onnxruntime")
    _compare(got, torch_out, outs, f"{name} B={batch} optimize={optimize} kaiwu vs torch")


@pytest.mark.parametrize("name", policies.ALL_NAMES)
def test_policy_io_metadata(engine, name):
    """Session.inputs/outputs: names in graph order, numpy dtypes, symbolic batch dim."""
    module, ins, outs, data, model = _export(name)
    sess = engine.Session(data)
    assert [i.name for i in sess.inputs] == ins
    assert [o.name for o in sess.outputs] == outs
    feeds = policies.make_inputs(name, 2)
    for i in sess.inputs:
        assert np.dtype(i.dtype) == feeds[i.name].dtype, (i.name, i.dtype)
        assert len(i.shape) == feeds[i.name].ndim
        batch_axis = 1 if i.name in ("h0", "c0") else 0
        d = i.shape[batch_axis]
        assert d is None or isinstance(d, str), f"{i.name}: batch dim should be symbolic, got {d!r}"
        for ax, d in enumerate(i.shape):
            if ax != batch_axis:
                assert d == feeds[i.name].shape[ax], (i.name, i.shape)


def test_policy_from_path_and_modelproto(engine, tmp_path):
    """The same policy loaded from a file path (str and PathLike), bytes and ModelProto."""
    import onnx

    path = policies.export_onnx("mlp", tmp_path / "mlp.onnx")
    feeds = policies.make_inputs("mlp", 5, seed=7)
    ref = run_ort(onnx.load(path), feeds)
    for model in (path, tmp_path / "mlp.onnx", open(path, "rb").read(), onnx.load(path)):
        got = engine.Session(model).run(feeds)
        _compare({k: np.array(v) for k, v in got.items()}, ref, ["logits", "value"], f"mlp from {type(model).__name__}")
