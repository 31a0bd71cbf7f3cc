"""The host-side parts of device-resident I/O, runnable without a GPU: DeviceArray's
exports (__cuda_array_interface__, DLPack capsules in the legacy and versioned ABI,
their deleters and the lifetime of the engine block behind them), the reading of device
feeds from __cuda_array_interface__ dicts and __dlpack__ producers (layouts, dtypes,
streams, errors), and the CPU session's answers to device options and io_buffers.
The GPU behaviour (no host round trip, streams, reuse) is in test_cuda.py.
"""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

import kaiwu_infer as ki
from kaiwu_infer import _core

# ---- the DLPack ABI through ctypes (dlpack.h, version 1.0)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))),
    ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _consume(capsule, versioned):
    """What a DLPack consumer does: take the tensor, rename the capsule, own the deleter."""
    name = b"dltensor_versioned" if versioned else b"dltensor"
    assert _api.PyCapsule_GetName(capsule) == name
    ptr = _api.PyCapsule_GetPointer(capsule, name)
    kind = DLManagedTensorVersioned if versioned else DLManagedTensor
    managed = ctypes.cast(ptr, ctypes.POINTER(kind))
    _api.PyCapsule_SetName(capsule, b"used_" + name)
    return managed


def _fresh(array):
    gc.collect()
    before = _core._test_blocks_alive()
    arr, readers = _core._device_array_for_test(array)
    assert _core._test_blocks_alive() == before + 1
    return arr, readers, before


def test_device_array_describes_itself_and_its_cuda_array_interface():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    arr, _, _ = _fresh(x)
    assert arr.shape == (3, 4) and arr.dtype == np.float32 and arr.ndim == 2
    assert arr.nbytes == 48 and arr.device == "cuda:0"
    assert arr.__dlpack_device__() == (2, 0)
    cai = arr.__cuda_array_interface__
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<f4" and cai["version"] == 3
    assert cai["data"] == (arr.data_ptr, False)
    assert cai["strides"] is None and cai["stream"] is None
    np.testing.assert_array_equal(arr.numpy(), x)
    assert "DeviceArray(shape=(3, 4), dtype=float32, device='cuda:0')" == repr(arr)


@pytest.mark.parametrize("versioned", [False, True])
@pytest.mark.parametrize("dtype,code,bits", [(np.float32, 2, 32), (np.uint8, 1, 8),
                                             (np.int64, 0, 64), (np.bool_, 6, 8),
                                             (np.float16, 2, 16)])
def test_dlpack_capsule_layout_and_consumer_deleter(versioned, dtype, code, bits):
    x = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
    arr, _, before = _fresh(x)
    cap = arr.__dlpack__(max_version=(1, 0)) if versioned else arr.__dlpack__()
    managed = _consume(cap, versioned)
    m = managed.contents
    if versioned:
        assert (m.version.major, m.version.minor) == (1, 0) and m.flags == 0
    t = m.dl_tensor
    assert t.data == arr.data_ptr and t.byte_offset == 0
    assert (t.device.device_type, t.device.device_id) == (2, 0)
    assert t.ndim == 2 and [t.shape[0], t.shape[1]] == [2, 3] and not t.strides
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (code, bits, 1)
    # The export keeps the block after the array goes; the consumer's deleter frees it.
    del arr, cap
    gc.collect()
    assert _core._test_blocks_alive() == before + 1
    m.deleter(managed)
    assert _core._test_blocks_alive() == before


def test_unconsumed_capsule_frees_its_export():
    arr, _, before = _fresh(np.ones(5, np.float32))
    caps = [arr.__dlpack__(), arr.__dlpack__(max_version=(1, 0))]
    del arr
    gc.collect()
    assert _core._test_blocks_alive() == before + 1
    del caps
    gc.collect()
    assert _core._test_blocks_alive() == before


def test_dlpack_stream_and_device_arguments():
    arr, readers, _ = _fresh(np.zeros(3, np.float32))
    arr.__dlpack__(stream=7)
    arr.__dlpack__(stream=-1)  # no synchronization asked
    arr.__dlpack__(stream=1)
    assert readers() == [7, 1]
    arr.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="another device"):
        arr.__dlpack__(dl_device=(2, 1))
    with pytest.raises(BufferError, match="copy"):
        arr.__dlpack__(copy=True)
    with pytest.raises(ValueError):
        arr.__dlpack__(stream=-5)


class FakeCAI:
    def __init__(self, **cai):
        base = {"shape": (2, 3), "typestr": "<f4", "data": (0x7F0000001000, False),
                "version": 3, "strides": None}
        base.update(cai)
        self.__cuda_array_interface__ = base


def test_cuda_array_interface_feeds_are_read_in_place():
    v = _core._device_view_for_test(FakeCAI())
    assert v["ptr"] == 0x7F0000001000 and v["shape"] == (2, 3) and v["dtype"] == np.float32
    assert v["stream"] is None
    # Explicit C-order strides, size-1 dims with any stride, and the producer's stream.
    v = _core._device_view_for_test(FakeCAI(shape=(2, 1, 3), strides=(12, 999, 4), stream=5))
    assert v["shape"] == (2, 1, 3) and v["stream"] == 5
    assert _core._device_view_for_test(FakeCAI(typestr="|u1", strides=(3, 1)))["dtype"] == np.uint8
    assert _core._device_view_for_test(FakeCAI(typestr="|b1"))["dtype"] == np.bool_
    assert _core._device_view_for_test(FakeCAI(stream=0))["stream"] is None


@pytest.mark.parametrize("cai,match", [
    ({"strides": (4, 8)}, "not C-contiguous"),
    ({"shape": (2, 3), "strides": (24, 8)}, "not C-contiguous"),
    ({"typestr": "<c8"}, "dtype '<c8' is not supported"),
    ({"typestr": ">f4"}, "dtype '>f4' is not supported"),
    ({"mask": object()}, "masked"),
])
def test_bad_cuda_array_interface_feeds_raise_input_error_naming_the_input(cai, match):
    with pytest.raises(ki.InputError, match=match) as e:
        _core._device_view_for_test(FakeCAI(**cai))
    assert "input 'x'" in str(e.value)


def test_read_only_device_buffers_are_refused_as_outputs():
    _core._device_view_for_test(FakeCAI(data=(0x1000, True)))  # fine as a feed
    with pytest.raises(ki.InputError, match="read-only"):
        _core._device_view_for_test(FakeCAI(data=(0x1000, True)), writable=True)


class DLPackOnly:
    """A producer with DLPack only (like JAX): wraps a test DeviceArray's export."""

    def __init__(self, arr, versioned_ok=True):
        self.arr, self.versioned_ok, self.calls = arr, versioned_ok, []

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()

    def __dlpack__(self, stream=None, **kw):
        if kw and not self.versioned_ok:
            raise TypeError("unexpected keyword max_version")
        self.calls.append((stream, kw.get("max_version")))
        return self.arr.__dlpack__(stream=stream, **kw)


@pytest.mark.parametrize("versioned_ok", [True, False])
def test_dlpack_feeds_are_read_in_place_and_released(versioned_ok):
    arr, readers, before = _fresh(np.arange(6, dtype=np.int64).reshape(3, 2))
    producer = DLPackOnly(arr, versioned_ok)
    v = _core._device_view_for_test(producer, consumer=9)
    assert v["ptr"] == arr.data_ptr and v["shape"] == (3, 2) and v["dtype"] == np.int64
    assert v["stream"] == 9  # the run waits for the stream the producer ordered itself on
    assert producer.calls[-1] == (9, (1, 0) if versioned_ok else None)
    assert readers() == [9]
    del arr, producer
    gc.collect()
    assert _core._test_blocks_alive() == before + 1  # the view holds the export
    del v
    gc.collect()
    assert _core._test_blocks_alive() == before


def test_host_objects_are_not_device_feeds():
    assert _core._device_view_for_test(np.zeros(3, np.float32)) is None

    class HostDLPack:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kw):
            raise AssertionError("not called for a host producer")

    assert _core._device_view_for_test(HostDLPack()) is None


def _identity_model():
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_cpu_session_refuses_device_options_and_counts_nothing():
    sess = ki.Session(_identity_model(), threads=1)
    x = np.array([[-1, 2, -3]], np.float32)
    with pytest.raises(ki.InputError, match="device session"):
        sess.run({"x": x}, output_device="cuda")
    with pytest.raises(ki.InputError, match="runs on the CPU"):
        sess.run({"x": x}, stream=0)
    with pytest.raises(ki.InputError, match="output_device"):
        sess.run({"x": x}, output_device="tpu")
    with pytest.raises(ki.InputError, match="stream"):
        sess.run({"x": x}, stream="s")
    np.testing.assert_array_equal(sess.run({"x": x}, output_device="cpu")["y"], [[0, 2, 0]])
    assert all(v == 0 for v in sess.io_stats().values())


def test_io_buffers_on_the_cpu_run_in_place():
    sess = ki.Session(_identity_model(), threads=1)
    bufs = sess.io_buffers(4)
    assert bufs.inputs["x"].shape == (4, 3) and bufs.inputs["x"].dtype == np.float32
    assert bufs.outputs["y"].shape == (4, 3) and not bufs.inputs["x"].any()
    bufs.inputs["x"][:] = np.arange(-6, 6, dtype=np.float32).reshape(4, 3)
    res = sess.run(bufs.inputs, out=bufs.outputs)
    assert res["y"] is bufs.outputs["y"]
    np.testing.assert_array_equal(bufs.outputs["y"], np.maximum(bufs.inputs["x"], 0))
    assert sess.io_buffers(2, shapes={"x": (2, 3)}).inputs["x"].shape == (2, 3)
    with pytest.raises(ki.InputError, match="unknown inputs"):
        sess.io_buffers(2, shapes={"nope": (1,)})
