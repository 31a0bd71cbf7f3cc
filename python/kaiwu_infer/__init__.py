"""kaiwu_infer: ONNX policy inference for reinforcement learning, with in-place refit."""

from ._core import (
    DeviceArray,
    ExecutionError,
    InputError,
    InternalError,
    IOInfo,
    KaiwuError,
    ModelError,
    ModelFileNotFoundError,
    QueueFullError,
    RefitError,
    ServerClosedError,
    UnsupportedOpError,
    cuda_available,
    default_memory_budget,
    int8_isa,
)
from .client import Client, connect
from .server import InferenceServer, ServerFuture
from .opset import OpsetConversion
from .session import IOBuffers, RefitReport, Session
from .quantize import QuantizationUnavailableError, quantize

__version__ = "0.1.0"

__all__ = [
    "Session",
    "RefitReport",
    "IOBuffers",
    "DeviceArray",
    "IOInfo",
    "InferenceServer",
    "ServerFuture",
    "Client",
    "connect",
    "KaiwuError",
    "ModelError",
    "ModelFileNotFoundError",
    "UnsupportedOpError",
    "InputError",
    "RefitError",
    "ExecutionError",
    "InternalError",
    "ServerClosedError",
    "QueueFullError",
    "cuda_available",
    "default_memory_budget",
    "int8_isa",
    "OpsetConversion",
    "quantize",
    "QuantizationUnavailableError",
]
