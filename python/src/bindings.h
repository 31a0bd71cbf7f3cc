// Shared pieces of the pybind11 module: one Bind* function per concept, and
// numpy <-> engine conversions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "kaiwu/session.h"
#include "kaiwu/status.h"
#include "kaiwu/tensor.h"

namespace kaiwu {

class DeviceBackend;

namespace python {

namespace py = pybind11;

void BindErrors(py::module_& m);
void BindSession(py::module_& m);
void BindServer(py::module_& m);
void BindOps(py::module_& m);
void BindDeviceArray(py::module_& m);

/// numpy dtype for an engine dtype, and back (kUndefined if none).
py::dtype ToNumpyDType(DType t);
DType FromNumpyDType(const py::dtype& d);


/// The engine session behind a kaiwu_infer.Session; raises InputError for other objects.
::kaiwu::Session* SessionFromPython(const py::handle& obj);

/// A numpy array (or torch tensor, or array-like) viewed as an engine tensor.
/// Non-contiguous inputs are copied (the copy is kept alive in `keep`);
/// `writable` (out= arrays) refuses non-contiguous and read-only arrays.
/// Problems raise the exception class of `code`, naming `what`.
TensorView ArrayView(const py::handle& obj, const std::string& what, py::array* keep,
                     StatusCode code = StatusCode::kInput, bool writable = false);
/// Reads a refit's weights (a dict or Mapping of names to numpy arrays, torch
/// tensors or array-likes) in place into `sources`; `keep` holds what must stay
/// alive while they are read. CUDA tensors on device `device_ordinal` (-1: none)
/// stay there; others are read through the host. Raises RefitError.
void ReadRefitSources(const py::handle& weights, int device_ordinal,
                      std::vector<RefitSource>* sources, std::vector<py::object>* keep);
/// torch.cuda.current_stream(device).cuda_stream (a cudaStream_t; 0 is the
/// legacy default stream) into `stream`; false when torch is not imported.
bool TorchCurrentStream(int device, uintptr_t* stream);
/// A numpy array over engine memory, kept alive by `owner` (no copy).
py::array WrapOwned(const TensorView& v, const std::shared_ptr<void>& owner);

/// Device memory handed to Python: the results of run(..., output_device="cuda").
struct DeviceArrayData {
  std::shared_ptr<void> owner;  ///< the engine block; reused once every holder lets go
  void* data = nullptr;
  DType dtype = DType::kUndefined;
  Shape shape;
  int ordinal = 0;
  const DeviceBackend* backend = nullptr;  ///< for numpy(); null: host memory (tests)
  std::function<void(uintptr_t)> add_reader;  ///< notes a consumer stream (may be empty)
};
/// A kaiwu_infer.DeviceArray over `d` (DLPack and __cuda_array_interface__ producer).
py::object WrapDevice(DeviceArrayData d);

/// A tensor in device memory from a __cuda_array_interface__ or CUDA __dlpack__
/// producer (torch, CuPy, JAX), read in place.
struct DeviceView {
  TensorView view;       ///< memory == kDevice
  py::object keep;       ///< keeps the producer's memory alive for the run
  bool has_stream = false;
  uintptr_t stream = 0;  ///< the producer's stream to wait for (CAI "stream", DLPack consumer)
};
/// Fills `out` when `obj` is a CUDA device-array producer and returns true;
/// returns false for anything else (numpy, CPU tensors). Non-contiguous
/// layouts, unsupported dtypes and read-only buffers (`writable`) raise
/// InputError naming `what`. `consumer_stream` is the stream the run orders
/// itself on (given to __dlpack__(stream=...)).
bool DeviceFeedView(const py::handle& obj, const std::string& what, uintptr_t consumer_stream,
                    bool writable, DeviceView* out);
/// Fills `out` from a kaiwu_infer.DeviceArray (read in place, no stream to
/// wait for) and returns true; false for anything else.
bool DeviceArrayFeed(const py::handle& obj, DeviceView* out);
/// A CUDA stream handle from an int, a torch.cuda.Stream (.cuda_stream) or a
/// CuPy stream (.ptr); InputError otherwise.
uintptr_t StreamHandle(const py::handle& stream);
/// The engine dtype of a numpy-style typestr ("<f4", "|u1"), or kUndefined.
DType DTypeFromTypestr(const std::string& typestr);

/// Raises the Python exception class for `code` with `message`.
[[noreturn]] void ThrowPython(StatusCode code, const std::string& message);

/// A Python str (or anything str() accepts) as UTF-8; characters UTF-8 cannot
/// hold (lone surrogates) are written as escapes instead of raising.
std::string TextFromPython(const py::handle& obj);
/// A file system path (str or bytes) as the OS's bytes (os.fsencode).
std::string PathFromPython(const py::handle& obj);
/// UTF-8 text as a Python str; malformed bytes are written as \xNN escapes.
py::str TextToPython(const std::string& text);
/// PyErr_SetObject(cls, message) with the message decoded as TextToPython does.
void SetPythonError(PyObject* cls, const std::string& message);

}  // namespace python
}  // namespace kaiwu
