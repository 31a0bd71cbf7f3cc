"""Post-training int8 quantization of a policy for users without QAT.

``quantize(model, calibration_feeds)`` wraps onnxruntime.quantization (an optional
dependency: ``pip install 'kaiwu_infer[quantization]'``) and writes a QDQ model (int8
per-channel weights, uint8 activations by default) that onnxruntime and kaiwu_infer both
run; kaiwu_infer's optimizer fuses its DequantizeLinear -> Conv/Gemm/MatMul ->
QuantizeLinear chains into integer kernels (``Session.describe()`` lists ``fuse_qdq``).

What it adds for RL: calibration observations from a replay buffer (any object with
``sample(batch_size)``), an array of stacked observations, a dict of arrays, or any
iterable of feed dicts (an env rollout); nodes kept in float32 by name (e.g. the policy
head, or the graph output it writes); and a progress bar (tqdm when installed).
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

__all__ = ["quantize", "QuantizationUnavailableError"]


class QuantizationUnavailableError(ImportError):
    """onnxruntime (with onnxruntime.quantization) or onnx is not installed."""


def _require():
    try:
        import onnx  # noqa: F401
        import onnxruntime.quantization as quantization
    except ImportError as e:  # pragma: no cover - exercised with the extra missing
        raise QuantizationUnavailableError(
            "kaiwu_infer.quantize needs onnx and onnxruntime (onnxruntime.quantization); install "
            f"the extra: pip install 'kaiwu_infer[quantization]' ({e})") from e
    return quantization


def _load(model):
    import onnx
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    if isinstance(model, (str, os.PathLike)):
        return onnx.load(os.fspath(model))
    raise TypeError(f"model must be an onnx.ModelProto, bytes or a path, got {type(model).__name__}")


def _input_names(model) -> list[str]:
    inits = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def _batches(feeds: Any, names: Sequence[str], batch_size: int, num_batches: int | None) -> list[dict]:
    """Calibration feeds as a list of {input name: array} dicts."""
    def as_feed(x):
        if isinstance(x, Mapping):
            missing = [n for n in names if n not in x]
            if missing:
                raise ValueError(f"calibration feed lacks inputs {missing} (model inputs: {list(names)})")
            return {n: np.asarray(x[n]) for n in names}
        if len(names) != 1:
            raise ValueError(f"the model has inputs {list(names)}: give feeds as dicts name -> array")
        return {names[0]: np.asarray(x)}

    if hasattr(feeds, "sample") and callable(feeds.sample):  # a replay buffer
        n = num_batches or 16
        return [as_feed(feeds.sample(batch_size)) for _ in range(n)]
    if isinstance(feeds, np.ndarray) or (isinstance(feeds, Mapping) and all(
            isinstance(v, np.ndarray) for v in feeds.values())):
        whole = as_feed(feeds)
        total = len(next(iter(whole.values())))
        if total == 0:
            raise ValueError("calibration_feeds holds no observations")
        out = [{k: v[s:s + batch_size] for k, v in whole.items()} for s in range(0, total, batch_size)]
        return out[:num_batches] if num_batches else out
    out = []
    for x in feeds:  # iterable of feeds (a rollout)
        out.append(as_feed(x))
        if num_batches and len(out) >= num_batches:
            break
    if not out:
        raise ValueError("calibration_feeds yielded no observations")
    return out


class _Progress:
    def __init__(self, total: int, enabled: bool):
        self.bar = None
        self.total, self.done, self.enabled = total, 0, enabled
        if enabled:
            try:
                from tqdm.auto import tqdm
                self.bar = tqdm(total=total, desc="kaiwu_infer.quantize: calibrating", unit="batch")
            except ImportError:
                pass

    def step(self):
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.enabled and (self.done == self.total or self.done % max(1, self.total // 10) == 0):
            print(f"kaiwu_infer.quantize: calibrating {self.done}/{self.total}", file=sys.stderr)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _node_names(model, keep: Iterable[str]) -> list[str]:
    """Node names to keep in float32: node names, or the names of values they write."""
    by_output = {o: n.name for n in model.graph.node for o in n.output}
    names = {n.name for n in model.graph.node}
    out = []
    for k in keep:
        if k in names:
            out.append(k)
        elif k in by_output:
            out.append(by_output[k])
        else:
            raise ValueError(f"keep_fp32: no node or value named {k!r}")
    return out


def quantize(model, calibration_feeds: Any = None, output_path: str | os.PathLike | None = None, *,
             per_channel: bool = True, keep_fp32: Iterable[str] = (), dynamic: bool = False,
             batch_size: int = 32, num_batches: int | None = None, activation_type: str = "uint8",
             weight_type: str = "int8", method: str = "minmax", reduce_range: bool = False,
             progress: bool = True,
             extra_options: Mapping[str, Any] | None = None):
    """Quantize ``model`` (ModelProto, bytes or path) to int8 QDQ.

    calibration_feeds: observations for static quantization: a replay buffer (an object with
        ``sample(batch_size)`` returning an array or a dict name -> array; ``num_batches``
        samples, default 16), an array of stacked observations (single-input models) or a dict
        of such arrays (split into batches of ``batch_size``), or an iterable of arrays / feed
        dicts (e.g. an env rollout). Not needed with ``dynamic=True``.
    output_path: where to write the model; returns the path then, else the ModelProto.
    per_channel: per-output-channel weight scales (default), else per tensor.
    keep_fp32: node names (or names of the values they write, e.g. a graph output such as
        ``"logits"``) left in float32, e.g. the policy head.
    dynamic: onnxruntime's quantize_dynamic instead (int8 weights, activations quantized at run
        time by DynamicQuantizeLinear; MatMulInteger/ConvInteger operator form).
    activation_type / weight_type: "uint8" or "int8". method: "minmax", "entropy", "percentile".
    reduce_range: 7-bit weights ([-64, 63]). On CPUs without AVX-512 VNNI kaiwu_infer's exact
        int8 kernels then use vpmaddubsw (about 3x the int16-widening path they need for
        full-range weights, whose pair sums could saturate it); costs a bit of weight precision.
    """
    q = _require()
    import onnx
    proto = _load(model)
    qtype = {"uint8": q.QuantType.QUInt8, "int8": q.QuantType.QInt8}
    if activation_type not in qtype or weight_type not in qtype:
        raise ValueError("activation_type and weight_type must be 'uint8' or 'int8'")
    exclude = _node_names(proto, keep_fp32)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "model_fp32.onnx")
        dst = os.fspath(output_path) if output_path is not None else os.path.join(tmp, "model_int8.onnx")
        onnx.save(proto, src)
        if dynamic:
            q.quantize_dynamic(src, dst, per_channel=per_channel, weight_type=qtype[weight_type],
                               reduce_range=reduce_range,
                               nodes_to_exclude=exclude, extra_options=dict(extra_options or {}))
        else:
            if calibration_feeds is None:
                raise ValueError("static quantization needs calibration_feeds (or dynamic=True)")
            batches = _batches(calibration_feeds, _input_names(proto), batch_size, num_batches)
            bar = _Progress(len(batches), progress)

            class Reader(q.CalibrationDataReader):
                def __init__(self):
                    self.it = iter(batches)

                def get_next(self):
                    feed = next(self.it, None)
                    if feed is not None:
                        bar.step()
                    return feed

                def rewind(self):
                    self.it = iter(batches)

            methods = {"minmax": q.CalibrationMethod.MinMax, "entropy": q.CalibrationMethod.Entropy,
                       "percentile": q.CalibrationMethod.Percentile}
            if method not in methods:
                raise ValueError(f"method must be one of {sorted(methods)}, got {method!r}")
            try:
                q.quantize_static(src, dst, Reader(), quant_format=q.QuantFormat.QDQ,
                                  per_channel=per_channel, reduce_range=reduce_range,
                                  activation_type=qtype[activation_type],
                                  weight_type=qtype[weight_type], nodes_to_exclude=exclude,
                                  calibrate_method=methods[method],
                                  extra_options=dict(extra_options or {}))
            finally:
                bar.close()
        if output_path is not None:
            return dst
        return onnx.load(dst)
