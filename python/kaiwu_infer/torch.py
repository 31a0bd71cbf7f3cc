"""PyTorch interop: export a module to ONNX with a refit map, and refit from a state_dict.

``export(module, example_args, ...)`` writes an ONNX model whose metadata (key
``"kaiwu.refit_map"``, JSON) says how every entry of ``module.state_dict()`` becomes
the model's initializers. ``state_dict_to_onnx(model_or_map, state_dict)`` applies
that map and returns ``{onnx initializer name: numpy array}``, ready for
``Session.refit``. ``Refitter(sess, model)`` (or :func:`load`) makes
``sess.refit(module.state_dict())`` work with no name work at all.

How the map is found: the module is exported twice, once with its real weights (the
model returned) and once with every floating-point parameter and buffer element set
to a distinct tag value (float32 bit patterns ``_TAG_BASE + i``). Each initializer of
the tagged export is then decoded element by element, which tells for every
initializer element the state_dict key and flat index it came from, whatever name
torch gave the initializer (``fc.weight``, ``onnx::MatMul_123``, ...) and whatever
torch did to it on the way (transposed for MatMul, LSTM/GRU gates reordered and
biases concatenated, tied parameters shared). The element map is stored compactly:
``copy``, ``reshape``, ``transpose`` (with ``perm``), ``runs`` (a concatenation of
contiguous runs of one or more keys, which is what LSTM/GRU repacking is) or, as a
fallback, ``gather`` (an explicit index). Every entry is verified against the real
export before the map is written: initializers that do not come from the state_dict
must be identical in both exports, and every mapped initializer of the real export
must equal the map applied to the real state_dict, bit for bit. An initializer that
mixes weights arithmetically (which only happens with constant folding on, e.g. a
Conv+BatchNorm fused by the exporter) makes ``export`` raise ``RefitMapError``.

With the default ``do_constant_folding=False`` torch keeps parameters as initializers
under their state_dict names and leaves transposes and LSTM/GRU repacking as graph
nodes, which the engine recomputes after each refit; the map is then mostly ``copy``.
With ``constant_folding=True`` the map records the transforms instead.

torch and onnx are imported lazily: ``import kaiwu_infer`` never needs them.
"""

from __future__ import annotations

import io
import itertools
import os
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from .refit_map import (
    REFIT_MAP_KEY,
    RefitError,
    RefitMap,
    RefitMapError,
    _TAG_BASE,
    _TAG_LIMIT,
    _as_array,
    _b64,
    _entry_keys,
    state_dict_to_onnx,
)


# --------------------------------------------------------------------------- refit helper


class Refitter:
    """Makes ``refit(module.state_dict())`` work on a Session whose model has a refit map.

    Stands in for the session: every other attribute (run, inputs, weights_version...)
    is the session's. Weights given by ONNX names are passed through unchanged.
    """

    def __init__(self, sess: Any, model: Any = None, *, refit_map: RefitMap | None = None):
        self.session = sess
        self.refit_map = refit_map if refit_map is not None else (
            RefitMap.from_model(model) if model is not None else None
        )
        self._engine_names = frozenset(sess.weights_info)
        if self.refit_map is not None:
            info = self._engine_names
            missing = [n for n in self.refit_map.onnx_names if n not in info]
            if missing:
                raise RefitError(
                    "the refit map names initializers the session does not expose as weights: "
                    + ", ".join(missing[:10])
                )

    def __getattr__(self, name: str):
        return getattr(self.session, name)

    def refit(self, weights: Mapping[str, Any], *, strict: bool = True,
              check_finite: bool = False, name_map=None):
        from .session import RefitReport

        m = self.refit_map
        if m is None or name_map is not None or not m.looks_like_state_dict(
            weights.keys() if isinstance(weights, Mapping) else (), self._engine_names
        ):
            return self.session.refit(weights, strict=strict, check_finite=check_finite,
                                      name_map=name_map)
        arrays, ignored = m.apply(weights, strict=strict)
        # Our strictness was checked on state_dict keys; initializers the map does not
        # produce are constants of the export, so the engine call is non-strict.
        report = self.session.refit(arrays, strict=False, check_finite=check_finite)
        if report.ignored:  # cannot happen after the constructor's check
            raise RefitError(f"engine ignored {report.ignored}")
        return RefitReport(report.updated, ignored, report.version)


def load(model: Any, **session_kwargs) -> Any:
    """A Session for `model` on which ``refit(state_dict)`` works: the Session itself
    when it reads the refit map natively, else wrapped in a Refitter."""
    from .session import Session

    # a path goes to Session as a path, so that external data resolves next to it
    sess = Session(model, **session_kwargs)
    if getattr(sess, "refit_map", None) is not None:
        return sess
    return Refitter(sess, model)


# --------------------------------------------------------------------------- export


# Recurrent ops and the input / output positions of their state ([directions, batch, hidden]).
_STATE_INPUTS = {"LSTM": (5, 6), "GRU": (5,), "RNN": (5,)}
_STATE_OUTPUTS = {"LSTM": (1, 2), "GRU": (1,), "RNN": (1,)}
# Ops a state passes through on its way to or from a recurrent op without moving its batch axis
# (torch slices h0 per layer and concatenates the layers' Y_h).
_STATE_PASS = {"Identity", "Cast", "Slice", "Concat", "Split"}


def _recurrent_state_names(model) -> set[str]:
    """Graph inputs that reach an LSTM/GRU/RNN initial state, and graph outputs that come from
    its Y_h / Y_c, through _STATE_PASS ops only: their batch axis is 1, not 0."""
    consumers: dict[str, list] = {}
    producer: dict[str, Any] = {}
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, i))
        for o, name in enumerate(node.output):
            producer[name] = (node, o)

    def feeds_state(name: str, seen: set) -> bool:
        for node, i in consumers.get(name, []):
            if node.op_type in _STATE_INPUTS and i in _STATE_INPUTS[node.op_type]:
                return True
            if (node.op_type in _STATE_PASS and i == 0) or node.op_type == "Concat":
                for out in node.output:
                    if out and out not in seen and feeds_state(out, seen | {out}):
                        return True
        return False

    def from_state(name: str, seen: set) -> bool:
        if name not in producer:
            return False
        node, o = producer[name]
        if node.op_type in _STATE_OUTPUTS:
            return o in _STATE_OUTPUTS[node.op_type]
        if node.op_type not in _STATE_PASS:
            return False
        sources = list(node.input) if node.op_type == "Concat" else list(node.input[:1])
        return any(src and src not in seen and from_state(src, seen | {src}) for src in sources)

    names = {i.name for i in model.graph.input if feeds_state(i.name, {i.name})}
    names |= {o.name for o in model.graph.output if from_state(o.name, {o.name})}
    return names


def _default_dynamic_axes(input_names, output_names, dynamic_batch, dynamic_axes,
                          state_names=frozenset()):
    axes: dict[str, Any] = {}
    if dynamic_batch:
        for n in list(input_names) + list(output_names):
            axes[n] = {1 if n in state_names else 0: "batch"}
    if dynamic_axes:
        for n, a in dynamic_axes.items():
            axes[n] = a
    return axes or None


def _export_bytes(module, args, *, input_names, output_names, dynamic_axes, opset,
                  constant_folding, export_kwargs) -> bytes:
    import torch

    buf = io.BytesIO()
    with warnings.catch_warnings():
        # the TorchScript exporter is chosen on purpose (initializers keep their names)
        warnings.filterwarnings("ignore", message="You are using the legacy TorchScript")
        warnings.filterwarnings("ignore", message="Exporting a model to ONNX with a batch_size")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
        _torch_onnx_export(torch, module, args, buf, input_names, output_names, dynamic_axes,
                           opset, constant_folding, export_kwargs)
    return buf.getvalue()


def _torch_onnx_export(torch, module, args, buf, input_names, output_names, dynamic_axes,
                       opset, constant_folding, export_kwargs):
    torch.onnx.export(
        module,
        args,
        buf,
        input_names=list(input_names),
        output_names=list(output_names),
        dynamic_axes=dynamic_axes,
        opset_version=opset,
        do_constant_folding=constant_folding,
        keep_initializers_as_inputs=False,
        dynamo=False,
        **export_kwargs,
    )


def _rnn_note(mod, key_leaf: str) -> str | None:
    import torch.nn as nn

    if isinstance(mod, nn.LSTM):
        kind, torch_order, onnx_order = "LSTM", "i,f,g,o", "i,o,f,c"
    elif isinstance(mod, nn.GRU):
        kind, torch_order, onnx_order = "GRU", "r,z,n", "z,r,h"
    else:
        return None
    if key_leaf.startswith("bias"):
        return (f"{kind} bias: B = concat(b_ih, b_hh) per direction, gates {torch_order} "
                f"-> {onnx_order}")
    return f"{kind} weight: gates {torch_order} -> {onnx_order}, [num_directions, G*H, in]"


def _build_map(module, tagged_model, real_model, sd_keys, canon, key_shapes, key_dtypes,
               offsets, total) -> RefitMap:
    from onnx import numpy_helper

    # The real export only serves to verify: torch deduplicates initializers with equal
    # values (a fresh BatchNorm's running_var equals its weight), so its set of
    # initializers may be smaller than the tagged export's, whose values are all distinct.
    real_inits = {i.name: i for i in real_model.graph.initializer}
    tag_inits = {i.name: i for i in tagged_model.graph.initializer}
    keys = [k for k in sd_keys if canon[k] == k and k in offsets]
    starts = np.array([offsets[k] for k in keys], dtype=np.int64)
    order = np.argsort(starts)
    keys_sorted = [keys[i] for i in order]
    starts_sorted = starts[order]
    modules = dict(module.named_modules())

    entries: list[dict] = []
    constants: list[str] = []
    used_keys: set[str] = set()
    for name, tinit in tag_inits.items():
        t = numpy_helper.to_array(tinit)
        if t.dtype.kind != "f":
            continue
        if name in real_inits:
            r = numpy_helper.to_array(real_inits[name])
            if t.shape == r.shape and np.array_equal(t, r, equal_nan=True):
                constants.append(name)  # the same with real and tagged weights
                continue
        ids = None
        if t.dtype in (np.float32, np.float64) and t.size:
            t32 = t.astype(np.float32)
            if t.dtype == np.float32 or np.array_equal(t32.astype(np.float64), t):
                ids = t32.view(np.int32).astype(np.int64) - _TAG_BASE
                valid = (ids >= 0) & (ids < total)
                if not valid.any():
                    constants.append(name)  # no weight element in it
                    continue
                if not valid.all():
                    ids = None
        elif t.size == 0:
            constants.append(name)
            continue
        if ids is None:
            raise RefitMapError(
                f"initializer '{name}' {list(t.shape)} depends on the module's weights but is "
                "not a rearrangement of them (constant folding combined weights "
                "arithmetically?); export with constant_folding=False"
            )
        flat = ids.reshape(-1)
        which = np.searchsorted(starts_sorted, flat, side="right") - 1
        src = sorted(set(which.tolist()))
        e: dict[str, Any] = {"onnx": name, "shape": list(t.shape), "dtype": str(t.dtype)}
        if len(src) == 1:
            k = keys_sorted[src[0]]
            local = flat - starts_sorted[src[0]]
            kshape = key_shapes[k]
            ksize = int(np.prod(kshape, dtype=np.int64))
            e["key"] = k
            if local.size == ksize and np.array_equal(local, np.arange(ksize)):
                e["op"] = "copy" if list(t.shape) == list(kshape) else "reshape"
            else:
                e["op"] = None
                if local.size == ksize and 1 < len(kshape) <= 5:
                    base = np.arange(ksize).reshape(kshape)
                    for perm in itertools.permutations(range(len(kshape))):
                        if np.array_equal(base.transpose(perm).reshape(-1), local):
                            e["op"], e["perm"] = "transpose", list(perm)
                            break
                if e["op"] is None:
                    del e["key"]
        if e.get("op") is None:
            breaks = np.flatnonzero((np.diff(flat) != 1) | (np.diff(which) != 0)) + 1
            bounds = np.concatenate([[0], breaks, [flat.size]])
            if len(bounds) - 1 <= max(64, flat.size // 64):
                runs = []
                for a, b in zip(bounds[:-1], bounds[1:]):
                    ki = int(which[a])
                    runs.append([keys_sorted[ki], int(flat[a] - starts_sorted[ki]), int(b - a)])
                e["op"], e["runs"] = "runs", runs
            else:
                ks = [keys_sorted[i] for i in src]
                base_of = {i: 0 for i in src}
                acc = 0
                for i in src:
                    base_of[i] = acc
                    acc += int(np.prod(key_shapes[keys_sorted[i]], dtype=np.int64))
                remap = np.array([base_of.get(i, 0) for i in range(len(keys_sorted))], dtype=np.int64)
                index = flat - starts_sorted[which] + remap[which]
                e["op"], e["keys"], e["index"] = "gather", ks, _b64(index.astype(np.int64))
        for k in _entry_keys(e):
            used_keys.add(k)
        # a human-readable note for recurrent layers
        k0 = _entry_keys(e)[0]
        prefix, _, leaf = k0.rpartition(".")
        note = _rnn_note(modules.get(prefix), leaf) if prefix in modules else None
        if note and e["op"] != "copy":
            e["note"] = note
        entries.append(e)

    m = RefitMap(
        entries=entries,
        keys={k: {"shape": list(key_shapes[k]), "dtype": key_dtypes[k]}
              for k in keys if k in used_keys},
        aliases={k: canon[k] for k in sd_keys if canon.get(k, k) != k and canon[k] in used_keys},
        constants=constants,
    )
    m.ignorable = [k for k in sd_keys if k not in m.keys and k not in m.aliases]
    # Verify: the map applied to the real state_dict reproduces the real export exactly.
    real_sd = {k: _as_array(v) for k, v in module.state_dict().items() if k in m.keys}
    produced, _ = m.apply(real_sd, strict=True)
    for e in entries:
        if e["onnx"] not in real_inits:
            continue
        want = numpy_helper.to_array(real_inits[e["onnx"]])
        got = produced[e["onnx"]]
        if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(
            got, want, equal_nan=True
        ):
            raise RefitMapError(
                f"initializer '{e['onnx']}': the refit map does not reproduce the exported "
                "value; export with constant_folding=False"
            )
    m._produced = produced  # the real values, written into the tagged model by export
    return m


def export(
    module,
    example_args,
    f: str | os.PathLike | None = None,
    *,
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_batch: bool = True,
    dynamic_axes: Mapping[str, Any] | None = None,
    opset: int = 17,
    constant_folding: bool = False,
    **export_kwargs,
):
    """Exports `module` with torch.onnx.export (TorchScript exporter) and records a refit map.

    dynamic_batch marks the batch axis of every input and output as the symbolic "batch":
    axis 1 for recurrent state (inputs that feed an LSTM/GRU/RNN initial_h or initial_c, and
    outputs that carry its Y_h or Y_c, [layers, batch, H] as torch has them), axis 0 for
    everything else. `dynamic_axes` entries replace that per name (e.g. ``{"obs": {1: "batch"}}``
    for a time-major observation). constant_folding=False (default) keeps weights as
    initializers and leaves their transposes/repacking in the graph, where the engine
    recomputes them after each refit. Returns the onnx.ModelProto (also written to f).
    """
    import onnx
    import torch

    if not isinstance(example_args, tuple):
        example_args = (example_args,)
    axes = _default_dynamic_axes(input_names, output_names, dynamic_batch, dynamic_axes)
    kw = dict(input_names=input_names, output_names=output_names, dynamic_axes=axes,
              opset=opset, constant_folding=constant_folding, export_kwargs=export_kwargs)

    real = onnx.load_from_string(_export_bytes(module, example_args, **kw))
    state = _recurrent_state_names(real) - set(dynamic_axes or {})
    if dynamic_batch and state:
        # Recurrent state carries the batch on axis 1: export again with that axis symbolic.
        kw["dynamic_axes"] = _default_dynamic_axes(input_names, output_names, dynamic_batch,
                                                   dynamic_axes, state)
        real = onnx.load_from_string(_export_bytes(module, example_args, **kw))

    # Tag every floating-point parameter/buffer element with a distinct value.
    sd = module.state_dict(keep_vars=True)
    sd_keys = list(sd.keys())
    canon: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    offsets: dict[str, int] = {}
    key_shapes: dict[str, tuple] = {}
    key_dtypes: dict[str, str] = {}
    total = 0
    for k, t in sd.items():
        if not torch.is_tensor(t) or not t.is_floating_point():
            canon[k] = k
            continue
        ident = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride())
        if ident in seen and t.numel() > 0:
            canon[k] = seen[ident]
            continue
        seen[ident] = k
        canon[k] = k
        if t.dtype not in (torch.float32, torch.float64):
            raise RefitMapError(f"'{k}' has dtype {t.dtype}; refit maps support float32/float64")
        offsets[k] = total
        key_shapes[k] = tuple(t.shape)
        key_dtypes[k] = str(np.dtype(str(t.dtype).replace("torch.", "")))
        total += t.numel()
    if total > _TAG_LIMIT:
        raise RefitMapError(f"{total} weight elements are too many to tag")

    saved = {}
    try:
        with torch.no_grad():
            for k, off in offsets.items():
                t = sd[k]
                saved[k] = t.detach().clone()
                bits = np.arange(_TAG_BASE + off, _TAG_BASE + off + t.numel(), dtype=np.int64)
                tag = torch.from_numpy(bits.astype(np.int32).view(np.float32).copy())
                t.copy_(tag.to(t.dtype).view(t.shape))
        tagged = onnx.load_from_string(_export_bytes(module, example_args, **kw))
    finally:
        with torch.no_grad():
            for k, v in saved.items():
                sd[k].copy_(v)

    m = _build_map(module, tagged, real, sd_keys, canon, key_shapes, key_dtypes, offsets, total)
    # The model is the tagged export (no deduplicated initializers) holding the real values.
    from onnx import numpy_helper

    produced = m.__dict__.pop("_produced")
    for init in tagged.graph.initializer:
        if init.name in produced:
            init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(produced[init.name]), init.name))
    prop = next((p for p in tagged.metadata_props if p.key == REFIT_MAP_KEY), None)
    if prop is None:
        prop = tagged.metadata_props.add()
        prop.key = REFIT_MAP_KEY
    prop.value = m.to_json()
    if f is not None:
        onnx.save(tagged, os.fspath(f))
    return tagged


__all__ = [
    "export",
    "state_dict_to_onnx",
    "RefitMap",
    "RefitMapError",
    "Refitter",
    "load",
    "REFIT_MAP_KEY",
]
