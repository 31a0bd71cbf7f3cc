"""Attention as one FusedAttention node on device sessions (passes/fuse_attention.cc,
backends/cuda/attention.cu): MatMul(Q, K) [+ mask] -> Softmax -> MatMul(., V) in one
launch. Device sessions fuse it by default in float16 / bfloat16 (the tensor-core kernel
where keys, head and value dims are <= 128, else the warp-a-row kernel) and in float32
only with KAIWU_FUSED_ATTENTION=1 (both read when a session is made). Against
onnxruntime (float32 CPU) and against the same session without it, in fp32, fp16 and
bf16:

- hand-made attention models (torch export): heads with a key padding mask of -inf
  entries [B, 1, 1, M] (every row keeps a key) and q scaled before the product, 40 keys,
  head dims 24 and 80 (padded to 32 and 96 in the tensor-core kernel), a rank-3 model
  without heads or mask whose scores are divided by sqrt(d) (the node's scale; in half
  sessions a half Cast of the constant), 7 tokens (one padded key tile) and 150 tokens
  (three groups of query rows; past 128 keys: the warp-a-row kernel), odd batches;
- the tensor-core kernel against the warp-a-row kernel (KAIWU_ATTENTION_MMA=0);
- Q, K and V read through views of their layout ops (the default) against the ops' own
  results (KAIWU_ATTENTION_VIEWS=0), with fewer steps a run;
- the policies with attention: unit_transformer (2 layers fused) and multi_input;
- what each precision fuses by default; fewer graph nodes a run than with the pass off;
  a NaN in one row stays in that row.

Tolerances: float32 rtol 1e-4 (atol 1e-5 * scale), fp16 rtol 2e-2 (atol 3e-3 * scale),
bf16 rtol 6e-2 (atol 2e-2 * scale), scale = max(1, max |ref|); the policies by relative
L2 error per output (1e-4 / 1e-2 / 3e-2; unit_logits holds -1e9 at padded units).
"""

from __future__ import annotations

import numpy as np
import pytest

import kaiwu_infer as ki
import policies
from attention_models import attention_model, model_feeds
from helpers import env_vars, run_ort

pytestmark = pytest.mark.skipif(not ki.cuda_available(),
                                reason="kaiwu_infer built without CUDA, or no CUDA device")

TOL = {"fp32": (1e-4, 1e-5), "fp16": (2e-2, 3e-3), "bf16": (6e-2, 2e-2)}
REL = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 3e-2}


def session(data, precision, fused=True):
    with env_vars(KAIWU_FUSED_ATTENTION="1" if fused else "0"):
        return ki.Session(data, device="cuda", precision=precision)


def check(got, want, precision, what):
    rtol, atol = TOL[precision]
    for k, w in want.items():
        assert got[k].shape == w.shape, (what, k)
        scale = max(1.0, float(np.nanmax(np.abs(w))))
        np.testing.assert_allclose(got[k], w, rtol=rtol, atol=atol * scale, err_msg=f"{what} {k}")


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("heads,head_dim,masked,tokens",
                         [(4, 24, True, 40), (2, 80, True, 40), (1, 16, False, 40), (2, 16, True, 7),
                          (1, 24, True, 150)])
def test_attention_models_match_onnxruntime_fused_and_not(heads, head_dim, masked, tokens, precision):
    data = attention_model(heads, head_dim, masked, tokens=tokens)
    import onnx

    model = onnx.load_from_string(data)
    fused, plain = session(data, precision), session(data, precision, fused=False)
    assert "fuse_attention: 1" in fused.describe()
    assert "fuse_attention" not in plain.describe()
    for batch in (1, 3, 37):
        feeds = model_feeds(data, heads, batch, seed=batch, tokens=tokens)
        want = run_ort(model, feeds)
        check(fused.run(feeds), want, precision, f"fused b{batch}")
        check(plain.run(feeds), want, precision, f"unfused b{batch}")


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_tensor_core_kernel_matches_the_row_kernel(precision):
    data = attention_model(4, 24, True)
    mma = session(data, precision)
    feeds = [model_feeds(data, 4, batch, seed=batch + 11) for batch in (2, 33)]
    # The kernel is chosen when a batch size's plan is made: at the first run.
    with env_vars(KAIWU_FUSED_ATTENTION="1", KAIWU_ATTENTION_MMA="0"):
        rows = ki.Session(data, device="cuda", precision=precision)
        want = [rows.run(f)["y"] for f in feeds]
    rtol, atol = TOL[precision]
    for f, w in zip(feeds, want):
        np.testing.assert_allclose(mma.run(f)["y"], w, rtol=rtol, atol=atol)


def test_device_sessions_fuse_half_attention_by_default():
    data = attention_model(4, 24, True)
    with env_vars(KAIWU_FUSED_ATTENTION=None):
        for precision, fused in (("fp32", False), ("fp16", True), ("bf16", True)):
            text = ki.Session(data, device="cuda", precision=precision).describe()
            assert ("fuse_attention: 1" in text) == fused, (precision, text)
    with env_vars(KAIWU_FUSED_ATTENTION="0"):
        assert "fuse_attention" not in ki.Session(data, device="cuda", precision="fp16").describe()


def rel_l2(got, ref, floor=0.05):
    """Relative L2 error, the norm of ref floored at `floor` per element (a value head
    at batch 1 is one number near zero); unit_logits' padded units (-1e9) left out."""
    ok = ref > -1e8
    g, r = got[ok].astype(np.float64), ref[ok].astype(np.float64)
    return float(np.linalg.norm(g - r) / max(np.linalg.norm(r), floor * np.sqrt(max(r.size, 1)), 1e-30))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name,count", [("unit_transformer", 2), ("multi_input", None)])
def test_policies_with_attention_match_onnxruntime(name, count, precision):
    """multi_input masks its scores with Where (masked_fill), which the pass leaves."""
    import onnx

    data = policies.export_bytes(name)
    model = onnx.load_from_string(data)
    fused, plain = session(data, precision), session(data, precision, fused=False)
    if count:
        assert f"fuse_attention: {count}" in fused.describe()
    for batch in (1, 9, 64):
        feeds = policies.make_inputs(name, batch, seed=batch + 5)
        want = run_ort(model, feeds)
        got = fused.run(feeds)
        for k, w in want.items():
            assert rel_l2(got[k], w) <= REL[precision], (name, batch, k, rel_l2(got[k], w))
        # fused and unfused agree as closely as each agrees with onnxruntime
        other = plain.run(feeds)
        for k in want:
            assert rel_l2(got[k], other[k]) <= REL[precision], (name, batch, k)


def test_fused_attention_runs_fewer_nodes_and_keeps_a_nan_in_its_row():
    data = attention_model(4, 24, True)
    fused, plain = session(data, "fp16"), session(data, "fp16", fused=False)
    feeds = model_feeds(data, 4, 5, seed=3)

    def nodes(s):
        s.io_stats(reset=True)
        s.run(feeds)
        s.run(feeds)
        st = s.io_stats()
        return st["graph_nodes"] // max(st["graph_launches"], 1)

    assert nodes(fused) < nodes(plain)
    bad = {k: v.copy() for k, v in feeds.items()}
    bad["x"][2, 7, 3] = np.nan
    got = fused.run(bad)["y"]
    assert np.isnan(got[2]).any()
    good = np.delete(np.arange(5), 2)
    want = plain.run(bad)["y"]
    np.testing.assert_allclose(got[good], want[good], rtol=2e-2, atol=3e-3)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_views_of_the_layout_ops_match_the_ops(precision):
    data = policies.export_bytes("unit_transformer")
    import onnx

    model = onnx.load_from_string(data)
    views = ki.Session(data, device="cuda", precision=precision)
    with env_vars(KAIWU_ATTENTION_VIEWS="0"):
        plain = ki.Session(data, device="cuda", precision=precision)
    for batch in (1, 9, 64):
        f = policies.make_inputs("unit_transformer", batch, seed=batch + 3)
        want = run_ort(model, f)
        got, other = views.run(f), plain.run(f)
        for k, w in want.items():
            assert rel_l2(got[k], w) <= REL[precision], (batch, k, rel_l2(got[k], w))
            assert rel_l2(got[k], other[k]) <= REL[precision], (batch, k)
        steps = [r["node"] for r in views.profile(f, runs=1)]
        plain_steps = [r["node"] for r in plain.profile(f, runs=1)]
        assert set(steps) < set(plain_steps), batch

