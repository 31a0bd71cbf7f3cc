"""The refit map: how a torch state_dict becomes a model's ONNX initializers (numpy only).

Written into the ONNX metadata (key ``"kaiwu.refit_map"``) by ``kaiwu_infer.torch.export``
and read by ``Session`` so that ``sess.refit(module.state_dict())`` needs no name work.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from . import _core

REFIT_MAP_KEY = "kaiwu.refit_map"
MAP_FORMAT = 1

# Tag values are float32 bit patterns _TAG_BASE + i: 1.0000872..., then upwards; all
# finite and exactly representable in float32 and float64 for < ~1e9 elements.
_TAG_BASE = 0x3F800B6D
_TAG_LIMIT = 0x7F000000 - _TAG_BASE

RefitError = _core.RefitError


class RefitMapError(_core.KaiwuError, ValueError):
    """export could not build a refit map (an initializer mixes weights arithmetically)."""


# --------------------------------------------------------------------------- helpers


def _as_array(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # torch.Tensor
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        return t.numpy()
    if hasattr(value, "__dlpack__") and not hasattr(value, "__array__"):
        return np.from_dlpack(value)  # CPU DLPack producers, without a copy
    return np.asarray(value)


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")


def _unb64(s: str, dtype) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype=dtype)


def _load_model(model: Any):
    """onnx.ModelProto from a ModelProto, bytes or a path."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        return onnx.load_from_string(bytes(model))
    if isinstance(model, (str, os.PathLike)):
        return onnx.load(os.fspath(model), load_external_data=False)
    raise TypeError(f"expected an onnx.ModelProto, bytes or a path, got {type(model).__name__}")


# --------------------------------------------------------------------------- the map


@dataclass
class RefitMap:
    """How a torch state_dict becomes a model's initializers.

    entries: one per mapped initializer: {"onnx", "op", "shape", "dtype", ...}.
    keys: every floating-point state_dict key the map reads, with its shape and dtype.
    aliases: tied state_dict keys -> the key the map reads (same tensor in torch).
    ignorable: state_dict keys that exist in the module but feed no initializer
        (integer buffers such as num_batches_tracked, unused parameters).
    constants: initializers that do not come from the state_dict (never refitted).
    """

    entries: list[dict] = field(default_factory=list)
    keys: dict[str, dict] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    ignorable: list[str] = field(default_factory=list)
    constants: list[str] = field(default_factory=list)

    # ---- (de)serialization
    def to_json(self) -> str:
        return json.dumps(
            {
                "format": MAP_FORMAT,
                "producer": "kaiwu_infer.torch",
                "entries": self.entries,
                "keys": self.keys,
                "aliases": self.aliases,
                "ignorable": self.ignorable,
                "constants": self.constants,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> "RefitMap":
        d = json.loads(text)
        if d.get("format") != MAP_FORMAT:
            raise RefitError(f"unsupported {REFIT_MAP_KEY} format {d.get('format')!r}")
        return cls(d["entries"], d["keys"], d.get("aliases", {}), d.get("ignorable", []),
                   d.get("constants", []))

    @classmethod
    def from_model(cls, model: Any) -> "RefitMap | None":
        """The map stored in a model's metadata, or None (a plain torch.onnx.export file)."""
        if isinstance(model, RefitMap):
            return model
        proto = _load_model(model)
        for p in proto.metadata_props:
            if p.key == REFIT_MAP_KEY:
                return cls.from_json(p.value)
        return None

    # ---- queries
    @property
    def onnx_names(self) -> list[str]:
        return [e["onnx"] for e in self.entries]

    def known(self, key: str) -> bool:
        """Whether `key` is a state_dict key of the exported module."""
        return key in self.keys or key in self.aliases or key in self._ignorable_set

    @property
    def _ignorable_set(self) -> set:
        s = self.__dict__.get("_ign")
        if s is None:
            s = self.__dict__["_ign"] = set(self.ignorable)
        return s

    @property
    def _expected(self) -> dict:
        """key -> (numpy dtype, shape tuple), computed once."""
        e = self.__dict__.get("_exp")
        if e is None:
            e = self.__dict__["_exp"] = {
                k: (np.dtype(v["dtype"]), tuple(v["shape"])) for k, v in self.keys.items()
            }
        return e

    def looks_like_state_dict(self, names: Iterable[str], engine_names: Iterable[str] = ()) -> bool:
        """True when `names` should be translated by this map rather than used as ONNX names:
        all are state_dict keys, or more of them are state_dict keys than engine names."""
        names = list(names)
        if not names:
            return False
        engine = set(engine_names)
        n_known = sum(1 for k in names if self.known(k))
        n_engine = sum(1 for k in names if k in engine)
        return n_known == len(names) or n_known > n_engine

    # ---- application
    def apply(
        self, state_dict: Mapping[str, Any], *, strict: bool = True
    ) -> tuple[dict[str, np.ndarray], list[str]]:
        """Returns ({onnx name: array}, ignored state_dict keys).

        strict: every key the map reads must be given (directly or by a tied alias), and
        no unknown key. Non-strict: entries whose keys are missing are left out, unknown
        keys are ignored. Shapes and dtypes are checked per state_dict key. Raises
        RefitError listing every problem; nothing is returned half-done.
        """
        if not isinstance(state_dict, Mapping):
            raise RefitError("weights must be a mapping of state_dict keys to tensors")
        problems: list[str] = []
        ignored: list[str] = []
        arrays: dict[str, np.ndarray] = {}
        for name, value in state_dict.items():
            key = name
            if key not in self.keys:
                key = self.aliases.get(name)
                if key is None:
                    if name in self._ignorable_set:
                        ignored.append(name)
                    elif strict:
                        problems.append(f"'{name}' is not a key of the exported module's state_dict")
                    else:
                        ignored.append(name)
                    continue
                if key in arrays or key in state_dict:
                    ignored.append(name)  # tied: the canonical key is given too
                    continue
            try:
                a = _as_array(value)
            except Exception as e:  # noqa: BLE001
                problems.append(f"'{name}' cannot be read as an array: {e}")
                continue
            dtype, shape = self._expected[key]
            if a.dtype != dtype:
                problems.append(f"'{name}' has dtype {a.dtype}, expected {dtype}")
                continue
            if a.shape != shape:
                problems.append(f"'{name}' has shape {list(a.shape)}, expected {list(shape)}")
                continue
            arrays[key] = a
        if strict:
            for key in self.keys:
                if key not in arrays and not any(
                    a in state_dict for a, k in self.aliases.items() if k == key
                ):
                    problems.append(f"'{key}' is missing (strict=True)")
        if problems:
            raise RefitError("refit refused, weights unchanged:\n  " + "\n  ".join(problems))
        out: dict[str, np.ndarray] = {}
        for e in self.entries:
            srcs = _entry_keys(e)
            if not all(k in arrays for k in srcs):
                continue  # non-strict: left as is
            out[e["onnx"]] = _apply_entry(e, arrays)
        return out, ignored


def _entry_keys(e: dict) -> list[str]:
    if "key" in e:
        return [e["key"]]
    if e["op"] == "runs":
        return list(dict.fromkeys(r[0] for r in e["runs"]))
    return list(e["keys"])


def _apply_entry(e: dict, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    op = e["op"]
    shape = tuple(e["shape"])
    if op == "copy":
        return arrays[e["key"]]
    if op == "reshape":
        return arrays[e["key"]].reshape(shape)
    if op == "transpose":
        return np.ascontiguousarray(arrays[e["key"]].transpose(e["perm"])).reshape(shape)
    if op == "runs":
        parts = [arrays[k].reshape(-1)[s : s + n] for k, s, n in e["runs"]]
        return np.concatenate(parts).reshape(shape)
    if op == "gather":
        flat = np.concatenate([arrays[k].reshape(-1) for k in e["keys"]])
        return flat[_unb64(e["index"], np.int64)].reshape(shape)
    raise RefitError(f"unknown refit map op '{op}' for initializer '{e['onnx']}'")


def _engine_entries(m: RefitMap) -> list[tuple]:
    """The map's entries as the engine takes them (Session._set_refit_map):
    (initializer, op, keys, perm, runs, index) with op copy/transpose/runs/gather."""
    out = []
    for e in m.entries:
        op = e["op"]
        if op in ("copy", "reshape"):
            out.append((e["onnx"], "copy", [e["key"]], [], [], None))
        elif op == "transpose":
            out.append((e["onnx"], "transpose", [e["key"]], list(e["perm"]), [], None))
        elif op == "runs":
            out.append((e["onnx"], "runs", [], [], [tuple(r) for r in e["runs"]], None))
        elif op == "gather":
            out.append((e["onnx"], "gather", list(e["keys"]), [], [],
                        _unb64(e["index"], np.int64)))
        else:
            raise RefitError(f"unknown refit map op '{op}' for initializer '{e['onnx']}'")
    return out


def state_dict_to_onnx(
    model_or_map: Any, state_dict: Mapping[str, Any], *, strict: bool = True
) -> dict[str, np.ndarray]:
    """Applies the refit map of `model_or_map` (a model exported by :func:`export`, as
    ModelProto, bytes or path, or a RefitMap) to a torch state_dict."""
    m = RefitMap.from_model(model_or_map)
    if m is None:
        raise RefitError(
            f"the model has no '{REFIT_MAP_KEY}' metadata: export it with "
            "kaiwu_infer.torch.export, or refit with ONNX initializer names"
        )
    return m.apply(state_dict, strict=strict)[0]
