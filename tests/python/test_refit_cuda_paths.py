"""Device refit paths: copy jobs in the launch's parameters (tables of <= 24, <= 96 and
<= 384 jobs) or in device memory (more), copy steps of derived weights (a Concat of many
weights, a transposed matrix, LSTM/GRU gates repacked) run in the weights' own launch
reading the given CUDA tensors, the staged host arrays or unchanged weights; each against a float64 numpy reference or a fresh GPU session, and
the earlier paths (KAIWU_REFIT_LEGACY, runtime/refit_paths.h) in the same process. Counters
(KAIWU_REFIT_TRACE) check which path ran. Skipped unless kaiwu_infer has its CUDA backend and
a device, and torch has CUDA.

Tolerances: the Concat model adds float32 weights to a float32 input, correctly rounded on
both sides: equal bit for bit. Policies against a fresh GPU session of the same weights
(same kernels): |a - b| <= 1e-6 * (scale + |b|).
"""

from __future__ import annotations

import gc
import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

torch = pytest.importorskip("torch")
ki = pytest.importorskip("kaiwu_infer")
kt = pytest.importorskip("kaiwu_infer.torch")

from test_refit import assert_close  # noqa: E402
from test_refit_cuda import case, fresh_outputs, outputs, perturbed  # noqa: E402
from test_refit_cuda import pytestmark  # noqa: E402,F401  (the same skip and warning filters)

def concat_model(n, seed=0):
    """y = x + Concat(w0..w{n-1}) and z = x2 + Transpose(m): the Concat and the Transpose
    are copy steps of the static program (derived weights). Weights of odd sizes."""
    rng = np.random.default_rng(seed)
    ws = {f"w{i}": rng.standard_normal(5 + i % 4).astype(np.float32) for i in range(n)}
    ws["m"] = rng.standard_normal((5, 3)).astype(np.float32)
    total = sum(ws[f"w{i}"].size for i in range(n))
    nodes = [helper.make_node("Concat", [f"w{i}" for i in range(n)], ["c"], axis=0),
             helper.make_node("Add", ["x", "c"], ["y"]),
             helper.make_node("Transpose", ["m"], ["mt"], perm=[1, 0]),
             helper.make_node("Add", ["x2", "mt"], ["z"])]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "concat_refit",
        [helper.make_tensor_value_info("x", f, [total]), helper.make_tensor_value_info("x2", f, [3, 5])],
        [helper.make_tensor_value_info("y", f, [total]), helper.make_tensor_value_info("z", f, [3, 5])],
        initializer=[numpy_helper.from_array(v, k) for k, v in ws.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString(), ws


def new_weights(ws, seed):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in ws.items()}


def check_concat(sess, ws, n, what):
    rng = np.random.default_rng(99)
    x = rng.standard_normal(sum(ws[f"w{i}"].size for i in range(n))).astype(np.float32)
    x2 = rng.standard_normal((3, 5)).astype(np.float32)
    res = sess.run({"x": x, "x2": x2})
    want_y = (x.astype(np.float64) + np.concatenate([ws[f"w{i}"] for i in range(n)])).astype(np.float32)
    want_z = (x2.astype(np.float64) + ws["m"].T).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(res["y"]), want_y, err_msg=f"{what}: y")
    np.testing.assert_array_equal(np.asarray(res["z"]), want_z, err_msg=f"{what}: z")
    got = sess.get_weights(list(ws))
    for k, v in ws.items():
        np.testing.assert_array_equal(got[k], v, err_msg=f"{what}: get_weights {k}")


def as_source(ws, source):
    if source == "cuda":
        return {k: torch.from_numpy(v).cuda() for k, v in ws.items()}
    return ws


# 3 weights: ~10 jobs (the 24-job table); 30: ~62 (96); 150: ~302 (384); 400: ~802 (in memory).
@pytest.mark.parametrize("n", [3, 30, 150, 400])
@pytest.mark.parametrize("source", ["cuda", "numpy"])
@pytest.mark.parametrize("legacy", ["0", "all"])
def test_concat_of_many_weights_equals_reference(n, source, legacy, monkeypatch):
    monkeypatch.setenv("KAIWU_REFIT_LEGACY", legacy)
    data, ws = concat_model(n)
    sess = ki.Session(data, device="cuda", threads=4)
    check_concat(sess, ws, n, f"n={n} as loaded")
    current = dict(ws)
    for seed in (1, 2, 3):
        new = new_weights(ws, seed)
        sess.refit(as_source(new, source))
        torch.cuda.synchronize()
        current = new
        check_concat(sess, current, n, f"n={n} {source} legacy={legacy} refit {seed}")
    # Half of the weights: the Concat reads the others from the version before.
    half = {k: v for i, (k, v) in enumerate(new_weights(ws, 4).items()) if i % 2 == 0}
    sess.refit(as_source(half, source), strict=False)
    current = {**current, **half}
    check_concat(sess, current, n, f"n={n} {source} legacy={legacy} partial refit")


@pytest.mark.parametrize("legacy, early, late, launches", [("0", 2, 0, 1), ("steps", 0, 2, 2),
                                                           ("all", 0, 2, 2)])
@pytest.mark.parametrize("source", ["cuda", "numpy"])
def test_trace_counts_copy_steps_in_the_weights_launch(legacy, early, late, launches, source,
                                                        monkeypatch, capfd):
    monkeypatch.setenv("KAIWU_REFIT_TRACE", "1")
    monkeypatch.setenv("KAIWU_REFIT_LEGACY", legacy)
    data, ws = concat_model(7)
    sess = ki.Session(data, device="cuda")
    capfd.readouterr()
    for seed in (1, 2, 3, 4):
        sess.refit(as_source(new_weights(ws, seed), source))
    last = new_weights(ws, 4)
    check_concat(sess, last, 7, f"traced, legacy={legacy}")
    del sess
    gc.collect()
    err = capfd.readouterr().err
    line = next((ln for ln in err.splitlines() if ln.startswith("refit trace:")), None)
    assert line, err
    counts = dict((k, float(v)) for k, v in re.findall(r"(\w+) (-?[\d.]+)", line.split(";", 1)[1]))
    assert counts["early_steps"] == early, line
    assert counts["copy_steps"] == late, line
    assert counts["launches"] == launches, line
    assert counts["jobs"] >= 8 + early, line
    assert counts["staged_bytes" if source == "numpy" else "device_bytes"] >= 0, line


@pytest.mark.parametrize("source", ["cuda", "numpy"])
@pytest.mark.parametrize("legacy", ["0", "all"])
def test_refused_refit_with_early_steps_names_the_element_and_keeps_weights(source, legacy,
                                                                            monkeypatch):
    monkeypatch.setenv("KAIWU_REFIT_LEGACY", legacy)
    data, ws = concat_model(30)
    sess = ki.Session(data, device="cuda")
    good = new_weights(ws, 1)
    sess.refit(as_source(good, source))
    bad = new_weights(ws, 2)
    bad["w17"][3] = np.nan
    with pytest.raises(ki.RefitError, match=r"'w17' holds a non-finite value at flat index 3"):
        sess.refit(as_source(bad, source), check_finite=True)
    check_concat(sess, good, 30, f"after a refused refit ({source}, legacy={legacy})")
    # The check starts clean again: a finite refit passes, then another bad one is refused.
    good = new_weights(ws, 3)
    sess.refit(as_source(good, source), check_finite=True)
    check_concat(sess, good, 30, f"a checked refit after a refused one ({source}, legacy={legacy})")
    bad = new_weights(ws, 4)
    bad["w2"][5] = -np.inf
    bad["w29"][0] = np.nan
    with pytest.raises(ki.RefitError, match=r"'w2' holds a non-finite value at flat index 5"):
        sess.refit(as_source(bad, source), check_finite=True)
    check_concat(sess, good, 30, f"after a second refused refit ({source}, legacy={legacy})")


@pytest.mark.parametrize("name", ["gru_seq", "impala_lstm", "multi_input", "mlp"])
@pytest.mark.parametrize("legacy", ["0", "all"])
def test_policy_refit_paths_equal_fresh_session(name, legacy, monkeypatch):
    """State_dict keys through the refit map (gates repacked: the copy steps composed with
    the map's blocks read the CUDA tensors), then numpy of the same keys (staged)."""
    monkeypatch.setenv("KAIWU_REFIT_LEGACY", legacy)
    module, model, ins, outs = case(name)
    sess = kt.load(model, device="cuda", threads=16)
    sd_a = perturbed(module, 21, "cuda")
    sd_b = perturbed(module, 22, "cuda")
    for sd in (sd_a, sd_b, sd_a):
        sess.refit(sd)
    for o, g, f in zip(outs, outputs(sess, name, outs), fresh_outputs(module, sd_a, name, ins, outs)):
        assert_close(g, f, 1e-6, 1e-6, f"{name} legacy={legacy} from CUDA tensors, {o}")
    sess.refit({k: v.cpu().numpy() for k, v in sd_b.items()})
    for o, g, f in zip(outs, outputs(sess, name, outs), fresh_outputs(module, sd_b, name, ins, outs)):
        assert_close(g, f, 1e-6, 1e-6, f"{name} legacy={legacy} from numpy, {o}")
    engine = sess.refit_map.apply({k: v.cpu().numpy() for k, v in sd_b.items()})[0]
    got = sess.get_weights(list(engine))
    for k, v in engine.items():
        np.testing.assert_array_equal(got[k], v, err_msg=f"{name} legacy={legacy}: get_weights {k}")
