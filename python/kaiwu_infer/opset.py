"""Old opsets on load: models below opset 13 are converted with onnx.version_converter.

The engine's importer runs default-domain opset 13 and newer. tf2onnx-era policies (opset
7-12) are common, so :class:`kaiwu_infer.Session` converts them on load: when the engine
refuses a model for its opset, the model is converted to opset 13 with
``onnx.version_converter`` and loaded again, and ``describe()`` says so. A model the converter
cannot handle raises :class:`ModelError` naming the opset and the converter's reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import _core

#: The oldest default-domain opset the engine imports; older models are converted to it.
TARGET_OPSET = 13


@dataclass(frozen=True)
class OpsetConversion:
    """A conversion done on load: from ``source`` to ``target`` with onnx.version_converter."""

    source: int
    target: int

    def describe(self) -> str:
        return (f"converted on load from opset {self.source} to {self.target} "
                f"with onnx.version_converter")


def default_opset(model) -> int | None:
    """The default-domain (ai.onnx) opset an ``onnx.ModelProto`` imports, or None."""
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return None


def convert_old_opset(data: bytes, refusal: Exception) -> tuple[bytes, OpsetConversion] | None:
    """Converts a model the engine refused; None when its opset was not the reason.

    ``refusal`` is the engine's ModelError; it is re-raised with a note when the model is
    old but onnx is not installed, and a failed conversion raises ModelError naming the
    opset and the converter's message.
    """
    try:
        import onnx
        from onnx import version_converter
    except ImportError:
        if "opset" in str(refusal):
            raise _core.ModelError(
                f"{refusal}; install onnx (pip install onnx) and kaiwu_infer converts it on load"
            ) from None
        return None
    try:
        model = onnx.load_from_string(data)
    except Exception:  # noqa: BLE001 - malformed bytes: the engine's own error stands
        return None
    source = default_opset(model)
    if source is None or source >= TARGET_OPSET:
        return None
    try:
        converted = version_converter.convert_version(model, TARGET_OPSET)
        out = converted.SerializeToString()
    except Exception as e:  # noqa: BLE001 - every converter failure is reported the same way
        reason = " ".join(str(e).split()) or type(e).__name__
        raise _core.ModelError(
            f"the model uses opset {source}; kaiwu_infer runs opset {TARGET_OPSET} and newer, "
            f"and converting it with onnx.version_converter failed: {reason}"
        ) from None
    return out, OpsetConversion(source, TARGET_OPSET)
