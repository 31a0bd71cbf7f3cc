"""Attention as one FusedAttention node on CPU sessions (passes/fuse_attention.cc,
backends/cpu/attention_kernel.cc): MatMul(Q, K) [x scale] [+ mask] -> Softmax ->
MatMul(., V) in one pass a row. Against onnxruntime and against the same session with
the pass off (KAIWU_FUSED_ATTENTION=0, read when a session is made), float32:

- hand-made attention models (attention_models.py): heads with a key padding mask of
  -inf entries (every row keeps a key), 40 keys, head dims 24 and 80, a rank-3 model
  without heads or mask whose scores are divided by sqrt(d) (the node's scale);
- unit_transformer (its two attention blocks fused), batch 1 / 7 / 33;
- the same bits with 1 and 2 threads; a NaN in one item stays in that item;
- Q, K and V read through views of the tensors their layout ops start from, those ops'
  steps dropped (the default; KAIWU_ATTENTION_VIEWS=0 keeps the ops).

Tolerance: rtol 1e-5, atol 1e-6 * max(1, max |ref|) (float32 sums in another order).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import kaiwu_infer as ki
import policies
from attention_models import attention_model, model_feeds
from helpers import env_vars, run_ort

MODELS = [(4, 24, True), (2, 80, True), (1, 16, False)]


def session(data, fused=True, threads=None):
    with env_vars(KAIWU_FUSED_ATTENTION=None if fused else "0"):
        return ki.Session(data, threads=threads)


def close(got, want, what):
    for k, w in want.items():
        assert got[k].shape == w.shape, (what, k)
        scale = max(1.0, float(np.nanmax(np.abs(w))))
        np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-6 * scale, err_msg=f"{what} {k}")


@pytest.mark.parametrize("heads,head_dim,masked", MODELS)
def test_attention_models_match_onnxruntime_fused_and_not(heads, head_dim, masked):
    data = attention_model(heads, head_dim, masked)
    model = onnx.load_from_string(data)
    fused, plain = session(data), session(data, fused=False)
    assert "fuse_attention: 1" in fused.describe()
    assert "FusedAttention" not in plain.describe()
    for batch in (1, 3, 37):
        feeds = model_feeds(data, heads, batch, seed=batch)
        want = run_ort(model, feeds)
        close(fused.run(feeds), want, f"fused b{batch}")
        close(plain.run(feeds), want, f"unfused b{batch}")


def test_an_activation_on_the_output_keeps_the_ops():
    """A ReLU after the attention is folded into its last MatMul by the optimizer; the
    pass must leave that MatMul (FusedAttention has no activation)."""
    data = attention_model(4, 24, True, relu=True)
    model = onnx.load_from_string(data)
    s = session(data)
    assert "fuse_attention" not in s.describe()
    for batch in (1, 5):
        feeds = model_feeds(data, 4, batch, seed=batch)
        close(s.run(feeds), run_ort(model, feeds), f"relu b{batch}")


def test_unit_transformer_fuses_both_blocks_and_matches_onnxruntime():
    data = policies.export_bytes("unit_transformer")
    model = onnx.load_from_string(data)
    fused = session(data)
    assert "fuse_attention: 2" in fused.describe()
    for batch in (1, 7, 33):
        feeds = policies.make_inputs("unit_transformer", batch, seed=batch + 40)
        want = run_ort(model, feeds)
        got = fused.run(feeds)
        for k, w in want.items():
            np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-5, err_msg=f"b{batch} {k}")


def test_same_bits_with_one_and_two_threads_and_a_nan_stays_in_its_item():
    data = attention_model(4, 24, True)
    feeds = model_feeds(data, 4, 9, seed=5)
    one, two = session(data, threads=1), session(data, threads=2)
    np.testing.assert_array_equal(one.run(feeds)["y"], two.run(feeds)["y"])
    bad = {k: v.copy() for k, v in feeds.items()}
    bad["x"][4, 11, 2] = np.nan
    got = one.run(bad)["y"]
    assert np.isnan(got[4]).all()  # key 11 is read by every query of item 4 (or masked: NaN + -inf)
    rest = np.delete(np.arange(9), 4)
    np.testing.assert_array_equal(got[rest], one.run(feeds)["y"][rest])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", ["heads", "unit_transformer"])
def test_views_of_the_layout_ops_match_onnxruntime_and_skip_them(name, threads):
    """By default the node reads Q, K and V through views of the tensor their Reshape /
    Transpose / Gather chains start from, and the plan drops those ops' steps (profile
    lists the steps that ran); KAIWU_ATTENTION_VIEWS=0 keeps the ops."""
    if name == "heads":
        data = attention_model(4, 24, True)
        feeds_of = lambda b: model_feeds(data, 4, b, seed=b)  # noqa: E731
    else:
        data = policies.export_bytes(name)
        feeds_of = lambda b: policies.make_inputs(name, b, seed=b)  # noqa: E731
    model = onnx.load_from_string(data)
    views = ki.Session(data, threads=threads)
    with env_vars(KAIWU_ATTENTION_VIEWS="0"):
        plain = ki.Session(data, threads=threads)
    for batch in (1, 5, 33):
        f = feeds_of(batch)
        close(views.run(f), run_ort(model, f), f"views b{batch}")
        steps = [r["node"] for r in views.profile(f, runs=1)]
        plain_steps = [r["node"] for r in plain.profile(f, runs=1)]
        assert set(steps) < set(plain_steps), (batch, set(steps) - set(plain_steps))
