"""kaiwu_infer: ONNX policy inference for reinforcement learning, with in-place refit."""

from ._core import (
    ExecutionError,
    InputError,
    InternalError,
    IOInfo,
    KaiwuError,
    ModelError,
    ModelFileNotFoundError,
    RefitError,
    UnsupportedOpError,
)
from .session import RefitReport, Session
from ._core import QueueFullError, ServerClosedError
from .server import InferenceServer, ServerFuture
from .client import Client, connect

__version__ = "0.1.0"

__all__ = [
    "Session",
    "RefitReport",
    "IOInfo",
    "KaiwuError",
    "ModelError",
    "ModelFileNotFoundError",
    "UnsupportedOpError",
    "InputError",
    "RefitError",
    "ExecutionError",
    "InternalError",
    "InferenceServer", "ServerFuture", "Client", "connect", "ServerClosedError", "QueueFullError",
]
