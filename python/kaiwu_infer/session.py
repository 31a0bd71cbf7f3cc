"""The Python Session: model loading from paths, bytes or onnx.ModelProto, and refit."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import _core
from .opset import OpsetConversion, convert_old_opset
from .refit_map import REFIT_MAP_KEY, RefitMap, _as_array, _engine_entries


@dataclass
class IOBuffers:
    """Feeds and results of one batch size in memory a run moves with one DMA each way.

    On a device session the arrays are page-locked (pinned) numpy arrays: write
    observations into ``inputs`` in place, then ``sess.run(bufs.inputs, out=bufs.outputs)``
    copies each input to the GPU and each result back with one DMA, without the
    staging memcpy that pageable arrays take. Reuse the same buffers every step.
    """

    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


@dataclass
class RefitReport:
    """What a refit did: engine weight names updated, and given names ignored."""

    updated: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    version: int = 0


def _model_bytes(model: Any) -> tuple[bytes, str]:
    """Returns (serialized model, directory for external data or '')."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), ""
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise _core.ModelFileNotFoundError(f"model file '{path}' does not exist")
        with open(path, "rb") as f:
            data = f.read()
        return data, os.fsencode(os.path.dirname(os.path.abspath(path)))
    if hasattr(model, "SerializeToString"):  # onnx.ModelProto
        return model.SerializeToString(), ""
    raise TypeError(
        f"model must be a file path, bytes or onnx.ModelProto, got {type(model).__name__}"
    )


def _names(names: Any) -> Any:
    # A list for the binding; a str is passed as is so that it is refused by name.
    return names if names is None or isinstance(names, str) else list(names)


class Session(_core._Session):
    """An ONNX model ready to run batches on the CPU or a CUDA GPU.

    Args:
        model: a file path, the model's bytes, or an ``onnx.ModelProto``.
        threads: worker threads for one run (default: the physical cores).
        optimize: apply graph rewrites (fusions, folding); False runs the graph as imported.
        device: ``"cpu"`` (default), or ``"cuda"`` / ``"cuda:N"`` in a build with the CUDA
            backend (``kaiwu_infer.cuda_available()``). Weights live on the device and refit
            uploads the weights that changed.
        memory_budget: the most bytes one tensor, the model's weights or one execution plan
            may take (default: ``$KAIWU_MEMORY_BUDGET``, else the machine's physical memory;
            see ``kaiwu_infer.default_memory_budget()``). Sizes declared by the model file and
            shapes that appear at plan time are checked against it before allocation:
            ``ModelError`` / ``InputError`` naming the tensor, node or input dimension.
        precision: ``"fp32"`` (default), or on a device session ``"fp16"`` / ``"bf16"``:
            convolutions, GEMMs, elementwise ops and pooling run on float16 (bfloat16)
            tensors on tensor cores with float32 accumulation; softmax, normalizations,
            reductions, LSTM/GRU cells and Exp/Log/Pow stay float32. Weights are converted at
            load and at every refit (refit still takes float32 arrays or a state_dict); feeds
            and results keep the model's dtypes. ``describe()`` lists each node's precision.
        keep_fp32: node names or op types to keep in float32 under fp16/bf16 (e.g. the
            policy head's ``Gemm``); a name the model does not have is an ``InputError``.

    Models below opset 13 (tf2onnx-era policies, opset 7-12) are converted to opset 13 with
    ``onnx.version_converter`` on load; ``opset_conversion`` and ``describe()`` say so.

    ``run(feeds)`` returns a dict; ``run(output_names, feeds)`` returns a list as in
    onnxruntime; ``run(feeds, out={name: array})`` writes into preallocated arrays.
    Inputs must have the model's dtype; C-contiguous arrays are read in place, other
    layouts are copied once. Outputs are numpy arrays over engine memory (no copy).
    The GIL is released while computing, and one session may be used from many threads.

    On a CUDA session:

    - feeds may also be device tensors on the session's GPU (torch CUDA tensors, or any
      ``__cuda_array_interface__`` / ``__dlpack__`` producer such as CuPy or JAX), read in
      place (copied device to device into the plan); host and device feeds may be mixed.
      They must be C-contiguous and have the model's dtype (InputError naming the input).
      The run starts after the work queued so far on torch's current stream (torch
      tensors, read through their C methods), on the stream a ``__cuda_array_interface__``
      version 3 producer names, or, for ``__dlpack__`` producers, on the run's stream.
    - ``run(feeds, output_device="cuda")`` returns :class:`DeviceArray` results
      (``torch.from_dlpack``, ``cupy.asarray`` work on them without a copy). Each holds its
      engine memory until dropped; later runs never overwrite results still referenced.
    - ``run(..., stream=s)`` (an int ``cudaStream_t``, a ``torch.cuda.Stream`` or anything
      with ``.cuda_stream`` / ``.ptr``) starts the run after the work already queued on ``s``
      and makes work queued on ``s`` afterwards wait for the run, with CUDA events; the
      device is never synchronized as a whole. ``run`` returns when the run is done.
    - host results come back in page-locked memory with one DMA; ``io_buffers(batch)``
      gives page-locked feeds and ``out=`` arrays, so inputs also skip the staging copy.
    - ``io_stats()`` counts the copies each way, staging memcpys and stream events, and
      the recorded launches (CUDA graphs) with their nodes (``graph_nodes / graph_launches``
      is a run's count of kernel and copy nodes; ``graph_updates``: replays that pointed a
      recorded feed/result copy at addresses other than the last run's).
    """

    def __init__(self, model: Any, *, threads: int | None = None, optimize: bool = True,
                 device: str = "cpu", memory_budget: int | None = None,
                 precision: str = "fp32", keep_fp32: Sequence[str] | None = None):
        data, base_dir = _model_bytes(model)
        #: The opset conversion done on load (an ``OpsetConversion``), or None.
        self.opset_conversion: OpsetConversion | None = None
        try:
            super().__init__(data, base_dir, threads, optimize, str(device), memory_budget,
                             str(precision), _names(keep_fp32))
        except _core.ModelError as e:
            if isinstance(e, (_core.UnsupportedOpError, _core.ModelFileNotFoundError)):
                raise
            converted = convert_old_opset(data, e)
            if converted is None:
                raise
            data, self.opset_conversion = converted
            super().__init__(data, base_dir, threads, optimize, str(device), memory_budget,
                             str(precision), _names(keep_fp32))
        self._weight_names = frozenset(self.weights_info)
        self.refit_map = None
        text = self.metadata.get(REFIT_MAP_KEY)
        if text is not None:
            self.refit_map = m = RefitMap.from_json(text)
            # The engine applies the map itself: a refit from a state_dict is one call.
            self._set_refit_map({k: (v["shape"], v["dtype"]) for k, v in m.keys.items()},
                                m.aliases, m.ignorable, _engine_entries(m))

    def describe(self) -> str:
        """Op counts before and after optimization, rewrite rules fired, threads, device,
        and the opset conversion done on load, if any."""
        text = super().describe()
        if self.opset_conversion is not None:
            head, _, rest = text.partition("\n")
            text = f"{head}\n{self.opset_conversion.describe()}\n{rest}"
        return text

    def io_buffers(self, batch: int, *, shapes: Mapping[str, Any] | None = None) -> IOBuffers:
        """Input and output arrays for a batch of ``batch`` rows, in page-locked memory.

        Each input's shape is the model's with its first dimension that is not fixed set to
        ``batch`` (the batch dimension, also of recurrent state shaped [layers, batch, h]);
        ``shapes`` gives the full shape of inputs with more than one dimension not fixed. Outputs are shaped for those inputs. Inputs start zeroed.
        On the CPU the arrays are ordinary aligned arrays (no pinning needed there).
        """
        shapes = dict(shapes or {})
        inputs: dict[str, np.ndarray] = {}
        for io in self.inputs:
            if io.name in shapes:
                shape = tuple(int(d) for d in shapes.pop(io.name))
            else:
                if io.shape is None:
                    raise _core.InputError(
                        f"io_buffers: input '{io.name}' has no declared shape; pass shapes=")
                dims = list(io.shape)
                free = [i for i, d in enumerate(dims) if not isinstance(d, int)]
                if free:
                    dims[free[0]] = int(batch)
                if len(free) > 1:
                    raise _core.InputError(
                        f"io_buffers: input '{io.name}' has shape {tuple(io.shape)}; "
                        "pass its full shape in shapes=")
                shape = tuple(dims)
            arr = self._host_buffer(list(shape), io.dtype)
            arr[...] = 0
            inputs[io.name] = arr
        if shapes:
            raise _core.InputError(f"io_buffers: unknown inputs in shapes=: {sorted(shapes)}")
        outputs = {io.name: self._host_buffer(list(shape), dtype)
                   for io, (shape, dtype) in zip(self.outputs, self._output_shapes(inputs))}
        return IOBuffers(inputs, outputs)

    def profile(self, feeds: Mapping[str, Any], *, runs: int = 10) -> list[dict]:
        """Per-node timings, like ``trtexec --dumpProfile``.

        Runs the model ``runs`` times on ``feeds`` and returns one dict per executed node,
        in execution order: node, op, shape (of its first output), seconds (mean per run)
        and share (of the total). Nodes folded at load or plan time do not appear.
        """
        rows = self._profile(dict(feeds), int(runs))
        total = sum(r["seconds"] for r in rows) or 1.0
        for r in rows:
            r["share"] = r["seconds"] / total
        return rows

    def refit(
        self,
        weights: Mapping[str, Any],
        *,
        strict: bool = True,
        check_finite: bool = False,
        name_map: Mapping[str, str] | Callable[[str], str | None] | None = None,
        stream: Any = None,
    ) -> RefitReport:
        """Replaces weights atomically; on any problem raises RefitError and changes nothing.

        weights maps names to arrays (numpy, torch tensors, anything with __array__).
        Names are the model's initializer names, or are translated by ``name_map``
        (a dict or a callable returning the engine name or None to skip). A model
        exported with ``kaiwu_infer.torch.export`` also takes a torch ``state_dict()``
        directly: its refit map repacks LSTM/GRU gates, transposes and tied weights.

        numpy arrays and torch tensors are read in place (CUDA tensors on this session's
        GPU are copied device to device). The new values go into weight storage no run
        holds (``weight_memory`` stays put once two versions exist); weights derived from
        them (folded BatchNorm, transposed or repacked matrices) are recomputed, and the
        new version is published at once: runs in flight finish on the old one.

        CUDA tensors are copied after the work already queued on ``stream`` (an int
        ``cudaStream_t``, a ``torch.cuda.Stream`` or anything with ``.cuda_stream`` /
        ``.ptr``; default: torch's current stream on their device), so a refit straight
        after ``optimizer.step()`` reads the stepped values; the device is never
        synchronized as a whole. ``refit`` returns when the copies are done, so the
        tensors may be changed again at once.
        """
        if name_map is None:
            # Names, arrays and the refit map are all read by the engine, in place.
            updated, ignored, version = self._refit(weights, strict, check_finite, stream)
            return RefitReport(updated, ignored, version)
        if not isinstance(weights, Mapping):
            raise _core.RefitError("weights must be a mapping of names to arrays")
        arrays: dict[str, np.ndarray] = {}
        skipped: list[str] = []
        for name, value in weights.items():
            target = name
            if callable(name_map):
                target = name_map(name)
            elif name_map is not None:
                target = name_map.get(name, name)
            if target is None:
                skipped.append(name)
                continue
            try:
                arrays[target] = _as_array(value)
            except Exception as e:  # noqa: BLE001 - reported as a refit error
                raise _core.RefitError(f"weight '{name}' cannot be read as an array: {e}") from e
        updated, ignored, version = self._refit(arrays, strict, check_finite, stream)
        return RefitReport(list(updated), list(ignored) + skipped, version)
