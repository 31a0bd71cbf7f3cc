"""Shared helpers for the kaiwu_infer Python test suites.

* build small ONNX models with onnx.helper (``make_model``),
* make random, never-all-zero feeds from a seeded ``np.random.Generator``,
* run onnxruntime (CPU EP) on the same model and feeds (``run_ort``),
* run kaiwu_infer (``run_kaiwu``) and compare (``assert_outputs_close``).

Tolerances (float32): rtol=1e-4, atol=1e-5 unless a test states otherwise
(``contraction_tol`` for ops whose outputs are sums of many products, where the
absolute error of a different-but-correct summation order grows with
sqrt(K) * |x| * |w|).  Integer and bool outputs must match exactly.  Output
dtypes and shapes must always match exactly.

Engine selection: by default the real ``kaiwu_infer`` module is used.  Setting
``KAIWU_TEST_BACKEND=ort`` swaps in ``OrtShimSession`` (onnxruntime behind the
kaiwu_infer Session API) -- only to validate the tests themselves before the
engine exists.  Never use it to claim engine results.
"""

from __future__ import annotations

import contextlib
import math
import os
import zlib
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

F32_RTOL = 1e-4
F32_ATOL = 1e-5
F64_RTOL = 1e-9
F64_ATOL = 1e-12

BACKEND = os.environ.get("KAIWU_TEST_BACKEND", "kaiwu")


# --------------------------------------------------------------------------
# engine access
# --------------------------------------------------------------------------
_ENGINE_IMPORT_ERROR: str | None = None


def load_engine():
    """Return the module providing ``Session`` (kaiwu_infer, or the ORT shim)."""
    global _ENGINE_IMPORT_ERROR
    if BACKEND == "ort":
        import types

        shim = types.SimpleNamespace(
            Session=OrtShimSession,
            KaiwuError=Exception,
            ModelError=Exception,
            UnsupportedOpError=Exception,
            InputError=Exception,
            RefitError=Exception,
            __shim__=True,
        )
        return shim
    try:
        import kaiwu_infer  # noqa: F401

        if not hasattr(kaiwu_infer, "Session"):
            raise ImportError("kaiwu_infer has no Session yet")
        return kaiwu_infer
    except Exception as e:  # noqa: BLE001
        _ENGINE_IMPORT_ERROR = f"{type(e).__name__}: {e}"
        return None


def engine_import_error() -> str | None:
    return _ENGINE_IMPORT_ERROR


@dataclass
class _Meta:
    name: str
    shape: tuple
    dtype: np.dtype


class OrtShimSession:
    """onnxruntime behind the kaiwu_infer.Session API (test-the-tests only)."""

    def __init__(self, model, *, threads=None, optimize=True):
        if isinstance(model, onnx.ModelProto):
            model = model.SerializeToString()
        elif not isinstance(model, (bytes, bytearray)):
            model = os.fspath(model)
        so = ort.SessionOptions()
        if threads:
            so.intra_op_num_threads = threads
        if not optimize:
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        self._s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])

        def meta(a):
            tmap = {
                "tensor(float)": np.float32,
                "tensor(double)": np.float64,
                "tensor(int64)": np.int64,
                "tensor(int32)": np.int32,
                "tensor(uint8)": np.uint8,
                "tensor(int8)": np.int8,
                "tensor(bool)": np.bool_,
            }
            return _Meta(a.name, tuple(a.shape), np.dtype(tmap.get(a.type, np.float32)))

        self.inputs = [meta(a) for a in self._s.get_inputs()]
        self.outputs = [meta(a) for a in self._s.get_outputs()]

    def run(self, *args, out=None):
        if len(args) == 1:
            names, feeds = None, args[0]
            as_dict = True
        else:
            names, feeds = args
            as_dict = False
        res = self._s.run(names, dict(feeds))
        names = names or [o.name for o in self.outputs]
        if out:
            for n, r in zip(names, res):
                if n in out:
                    out[n][...] = r
        if as_dict:
            return dict(zip(names, res))
        return res


# --------------------------------------------------------------------------
# random data
# --------------------------------------------------------------------------
def seed_for(name: str) -> int:
    """Stable per-test seed derived from the test id (crc32, not hash())."""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def rand(rng: np.random.Generator, shape, dtype=np.float32, *, low=None, high=None,
         positive=False, nonzero=False):
    """Random array that is never all zeros.

    float: standard normal (or uniform(low, high)); positive -> uniform(0.1, 2).
    int: uniform integers in [low, high) (default [-10, 10)).
    bool: Bernoulli(0.5) with at least one True.
    """
    shape = tuple(int(s) for s in shape)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        if positive:
            a = rng.uniform(0.1 if low is None else low, 2.0 if high is None else high, shape)
        elif low is not None or high is not None:
            a = rng.uniform(-1.0 if low is None else low, 1.0 if high is None else high, shape)
        else:
            a = rng.standard_normal(shape)
        if nonzero:
            a = np.where(np.abs(a) < 0.1, np.sign(a) * 0.1 + (a == 0) * 0.1, a)
        a = a.astype(dt)
    elif dt.kind in "iu":
        lo = (0 if dt.kind == "u" else -10) if low is None else low
        hi = (256 if dt == np.uint8 else 10) if high is None else high
        a = rng.integers(lo, hi, size=shape, dtype=np.int64).astype(dt)
        if nonzero:
            a[a == 0] = 1
    elif dt == np.bool_:
        a = rng.random(shape) < 0.5
        if a.size:
            a.flat[int(rng.integers(a.size))] = True
        return a
    else:
        raise TypeError(dt)
    if a.size and not np.any(a):
        a.flat[0] = 1
    return a


# --------------------------------------------------------------------------
# model building
# --------------------------------------------------------------------------
NP2ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.bool_): TensorProto.BOOL,
}


def vi(name: str, dtype, shape):
    """ValueInfo; shape entries may be int, str (symbolic) or None (unknown)."""
    return helper.make_tensor_value_info(name, NP2ONNX[np.dtype(dtype)], shape)


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[tuple], outputs: Sequence[str | tuple],
               *, initializers: Mapping[str, np.ndarray] | None = None, opset: int = 17,
               name: str = "test", check: bool = True) -> onnx.ModelProto:
    """Build a model.

    inputs:  (name, dtype, shape) tuples; shape entries may be str (symbolic).
    outputs: names (types filled by ONNX shape inference) or (name, dtype, shape).
    initializers: name -> numpy array.
    """
    g_inputs = [vi(n, d, s) for (n, d, s) in inputs]
    g_outputs = []
    for o in outputs:
        if isinstance(o, str):
            g_outputs.append(onnx.ValueInfoProto(name=o))
        else:
            g_outputs.append(vi(*o))
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()]
    graph = helper.make_graph(list(nodes), name, g_inputs, g_outputs, initializer=inits)
    ir = min(onnx.IR_VERSION, 10)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=ir, producer_name="kaiwu-tests")
    if any(not o.HasField("type") for o in model.graph.output):
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        model = inferred
        # keep only the graph outputs' inferred types, drop intermediate value_info
        del model.graph.value_info[:]
    if check:
        onnx.checker.check_model(model)  # strict shape inference already ran above
    return model


def single_op_model(op: str, inputs: Sequence[tuple], n_out: int = 1, *, opset: int = 17,
                    initializers: Mapping[str, np.ndarray] | None = None,
                    input_names: Sequence[str] | None = None,
                    output_names: Sequence[str] | None = None, **attrs) -> onnx.ModelProto:
    """One-node model.  ``input_names`` may include '' for omitted optional inputs and
    names of initializers; ``inputs`` lists the graph inputs only."""
    in_names = list(input_names) if input_names is not None else [i[0] for i in inputs]
    out_names = list(output_names) if output_names is not None else [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, in_names, out_names, **attrs)
    return make_model([node], inputs, [o for o in out_names if o], initializers=initializers,
                      opset=opset, name=op)


# --------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------
def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], *, optimize: bool = True
            ) -> dict[str, np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(names, dict(feeds))))


def run_kaiwu(engine, model, feeds: Mapping[str, np.ndarray], *, optimize: bool = True,
              threads=None) -> dict[str, np.ndarray]:
    sess = engine.Session(model, threads=threads, optimize=optimize)
    res = sess.run(dict(feeds))
    assert isinstance(res, dict), f"Session.run(feeds) must return a dict, got {type(res)}"
    return res


def default_tol(dtype) -> dict:
    dt = np.dtype(dtype)
    if dt == np.float32:
        return dict(rtol=F32_RTOL, atol=F32_ATOL)
    if dt == np.float64:
        return dict(rtol=F64_RTOL, atol=F64_ATOL)
    return dict(rtol=0, atol=0)


def contraction_tol(k: int, scale: float = 1.0) -> dict:
    """Tolerance for outputs that are sums of k products of O(scale) values.

    A different (but correct) float32 summation order / FMA use changes the result by
    about eps * sqrt(k) * scale^2 in absolute terms, so atol grows with sqrt(k)."""
    return dict(rtol=F32_RTOL, atol=max(F32_ATOL, 2e-6 * math.sqrt(k) * scale * scale))


def assert_outputs_close(got: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], *,
                         rtol: float | None = None, atol: float | None = None,
                         names: Iterable[str] | None = None, context: str = "") -> None:
    names = list(names) if names is not None else list(ref.keys())
    missing = [n for n in names if n not in got]
    assert not missing, f"{context}: outputs missing from kaiwu result: {missing} (got {list(got)})"
    for n in names:
        g = np.asarray(got[n])
        r = np.asarray(ref[n])
        assert g.dtype == r.dtype, f"{context}: output {n!r} dtype {g.dtype} != expected {r.dtype}"
        assert g.shape == r.shape, f"{context}: output {n!r} shape {g.shape} != expected {r.shape}"
        if r.dtype.kind in "fc":
            tol = default_tol(r.dtype)
            if rtol is not None:
                tol["rtol"] = rtol
            if atol is not None:
                tol["atol"] = atol
            np.testing.assert_allclose(g, r, err_msg=f"{context}: output {n!r}", equal_nan=True, **tol)
        else:
            np.testing.assert_array_equal(g, r, err_msg=f"{context}: output {n!r}")


def check_against_ort(engine, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], *,
                      rtol: float | None = None, atol: float | None = None,
                      optimize_modes: Sequence[bool] = (True,), context: str = "",
                      threads=None) -> dict[str, np.ndarray]:
    """Run onnxruntime and kaiwu_infer on the same model + feeds and compare all outputs."""
    feeds = {k: np.array(v, order="C") for k, v in feeds.items()}  # (ascontiguousarray would make 0-d arrays 1-d)
    ref = run_ort(model, feeds)
    for opt in optimize_modes:
        got = run_kaiwu(engine, model, {k: v.copy() for k, v in feeds.items()}, optimize=opt,
                        threads=threads)
        assert_outputs_close(got, ref, rtol=rtol, atol=atol,
                             context=f"{context} optimize={opt}")
    return ref


@contextlib.contextmanager
def env_vars(**kv):
    """Environment variables set for the block (a None value unsets one), then restored:
    the engine reads its KAIWU_* switches when a session or a run's plan is made."""
    saved = {k: os.environ.get(k) for k in kv}
    for k, v in kv.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class SwitchedSession:
    """A device session made and run under environment switches (env_vars: None unsets
    one), for A/B tests of a path against the one it replaced; nodes_per_run counts the
    CUDA graph nodes a run launches (io_stats)."""

    def __init__(self, model, precision: str, **switches):
        import kaiwu_infer as ki
        self.env = switches
        data = model if isinstance(model, (bytes, bytearray)) else model.SerializeToString()
        with env_vars(**self.env):
            self.sess = ki.Session(data, device="cuda", precision=precision)

    def run(self, feeds):
        with env_vars(**self.env):
            return self.sess.run(feeds)

    def nodes_per_run(self, feeds) -> int:
        self.sess.io_stats(reset=True)
        self.run(feeds)
        self.run(feeds)
        st = self.sess.io_stats()
        assert st["graph_launches"] == 2, st
        return st["graph_nodes"] // st["graph_launches"]


# Device-test tolerances by precision: rtol, atol as a multiple of max(1, max |ref|).
HALF_TOL = {"fp32": (1e-4, 1e-5), "fp16": (2e-2, 3e-3), "bf16": (5e-2, 2e-2)}


def assert_close_scaled(got: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], precision: str,
                        what: str = ""):
    """Each output within HALF_TOL[precision] of the reference (atol scaled by its magnitude)."""
    rtol, atol = HALF_TOL[precision]
    for k, want in ref.items():
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(np.asarray(got[k]).astype(np.float32), want, rtol=rtol, atol=atol * scale,
                                   err_msg=f"{what} {k}")
