// Device tensors from other libraries, read in place: __cuda_array_interface__
// (version 2/3: torch, CuPy, Numba) and CUDA __dlpack__ producers (torch,
// CuPy, JAX). Only C-contiguous layouts are accepted (a device copy would hide
// a cost the caller should see); the producer's stream is reported so that
// the run waits for the work that wrote the tensor.
#include <memory>

#include <pybind11/stl.h>

#include "bindings.h"
#include "dlpack.h"

namespace kaiwu {
namespace python {

namespace {

namespace dl = dlpack;

std::string TypeName(const py::handle& obj) {
  return py::str(py::type::of(obj)).cast<std::string>();
}

DType FromDLPack(const dl::DLDataType& t) {
  if (t.lanes != 1) return DType::kUndefined;
  switch (t.code) {
    case dl::kDLFloat:
      return t.bits == 32 ? DType::kFloat32 : t.bits == 64 ? DType::kFloat64
                                          : t.bits == 16 ? DType::kFloat16 : DType::kUndefined;
    case dl::kDLInt:
      return t.bits == 8 ? DType::kInt8 : t.bits == 16 ? DType::kInt16
                                        : t.bits == 32 ? DType::kInt32
                                        : t.bits == 64 ? DType::kInt64 : DType::kUndefined;
    case dl::kDLUInt: return t.bits == 8 ? DType::kUInt8 : DType::kUndefined;
    case dl::kDLBool: return t.bits == 8 ? DType::kBool : DType::kUndefined;
    default: return DType::kUndefined;
  }
}

std::string DLPackTypeName(const dl::DLDataType& t) {
  static const char* codes[] = {"int", "uint", "float", "handle", "bfloat", "complex", "bool"};
  std::string s = t.code < 7 ? codes[t.code] : "code" + std::to_string(t.code);
  s += std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

// Compact row-major? `strides` in units of `unit` (bytes for CAI, elements for DLPack).
bool IsCContiguous(const Shape& shape, const std::vector<int64_t>& strides, int64_t unit) {
  if (NumElements(shape) == 0) return true;
  int64_t expected = unit;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

[[noreturn]] void NotContiguous(const std::string& what, const std::vector<int64_t>& strides,
                                const char* unit) {
  ThrowPython(StatusCode::kInput,
              what + ": the device tensor is not C-contiguous (strides " +
                  ShapeToString(strides) + " in " + unit +
                  "); make it contiguous first, e.g. tensor.contiguous()");
}

bool FromCudaArrayInterface(const py::handle& owner, const py::dict& cai, const std::string& what,
                            bool writable, DeviceView* out) {
  if (cai.contains("mask") && !cai["mask"].is_none())
    ThrowPython(StatusCode::kInput, what + ": masked device arrays are not supported");
  Shape shape;
  for (auto d : cai["shape"]) shape.push_back(d.cast<int64_t>());
  const std::string typestr = cai["typestr"].cast<std::string>();
  DType dt = DTypeFromTypestr(typestr);
  if (dt == DType::kUndefined)
    ThrowPython(StatusCode::kInput, what + ": device dtype '" + typestr + "' is not supported");
  py::tuple data = cai["data"];
  const auto ptr = data[0].cast<uintptr_t>();
  const bool read_only = data.size() > 1 && data[1].cast<bool>();
  if (writable && read_only) ThrowPython(StatusCode::kInput, what + ": the device array is read-only");
  if (cai.contains("strides") && !cai["strides"].is_none()) {
    std::vector<int64_t> strides;
    for (auto s : cai["strides"]) strides.push_back(s.cast<int64_t>());
    if (strides.size() != shape.size() ||
        !IsCContiguous(shape, strides, static_cast<int64_t>(DTypeSize(dt))))
      NotContiguous(what, strides, "bytes");
  }
  out->view = TensorView{dt, shape, reinterpret_cast<void*>(ptr), MemoryKind::kDevice};
  out->keep = py::reinterpret_borrow<py::object>(owner);
  out->has_stream = false;
  // Version 3: the stream the producer wrote on (1: legacy default, 2:
  // per-thread default; 0 is disallowed by the protocol and ignored).
  if (cai.contains("stream") && !cai["stream"].is_none()) {
    const auto s = cai["stream"].cast<int64_t>();
    if (s > 0) {
      out->has_stream = true;
      out->stream = static_cast<uintptr_t>(s);
    }
  }
  return true;
}

// Takes a consumed DLPack capsule: the tensor is read in place and the
// producer's deleter runs when the returned object goes.
template <typename Managed>
py::object Own(Managed* m) {
  return py::capsule(m, [](void* p) {
    auto* managed = static_cast<Managed*>(p);
    if (managed->deleter) managed->deleter(managed);
  });
}

bool FromDLPack(const py::handle& obj, const std::string& what, uintptr_t consumer_stream,
                bool writable, DeviceView* out) {
  py::object capsule;
  py::object stream = py::int_(consumer_stream);
  try {
    capsule = obj.attr("__dlpack__")(py::arg("stream") = stream,
                                     py::arg("max_version") = py::make_tuple(1, 0));
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) throw;  // an older producer without max_version
    capsule = obj.attr("__dlpack__")(py::arg("stream") = stream);
  }
  const dl::DLTensor* t = nullptr;
  py::object keep;
  bool read_only = false;
  if (PyCapsule_IsValid(capsule.ptr(), "dltensor_versioned")) {
    auto* m = static_cast<dl::DLManagedTensorVersioned*>(
        PyCapsule_GetPointer(capsule.ptr(), "dltensor_versioned"));
    if (m->version.major > dl::kMajorVersion)
      ThrowPython(StatusCode::kInput, what + ": DLPack version " + std::to_string(m->version.major) +
                                          " is newer than this build reads (1)");
    PyCapsule_SetName(capsule.ptr(), "used_dltensor_versioned");
    keep = Own(m);
    t = &m->dl_tensor;
    read_only = (m->flags & dl::kFlagReadOnly) != 0;
  } else if (PyCapsule_IsValid(capsule.ptr(), "dltensor")) {
    auto* m = static_cast<dl::DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
    PyCapsule_SetName(capsule.ptr(), "used_dltensor");
    keep = Own(m);
    t = &m->dl_tensor;
  } else {
    ThrowPython(StatusCode::kInput, what + ": __dlpack__ of " + TypeName(obj) +
                                        " returned no DLPack capsule");
  }
  if (writable && read_only) ThrowPython(StatusCode::kInput, what + ": the device array is read-only");
  DType dt = FromDLPack(t->dtype);
  if (dt == DType::kUndefined)
    ThrowPython(StatusCode::kInput, what + ": device dtype " + DLPackTypeName(t->dtype) +
                                        " is not supported");
  Shape shape(t->shape, t->shape + t->ndim);
  if (t->strides) {
    std::vector<int64_t> strides(t->strides, t->strides + t->ndim);
    if (!IsCContiguous(shape, strides, 1)) NotContiguous(what, strides, "elements");
  }
  void* data = static_cast<char*>(t->data) + t->byte_offset;
  out->view = TensorView{dt, shape, data, MemoryKind::kDevice};
  out->keep = keep;
  // The producer ordered its work before `consumer_stream`; the run waits for that stream.
  out->has_stream = true;
  out->stream = consumer_stream;
  return true;
}

// torch's side of a feed, looked up once torch is imported (no torch tensor
// exists before): torch.Tensor, torch.nn.Parameter, the dtypes the engine
// reads, and the function naming torch's current stream on a device.
struct TorchApi {
  PyTypeObject* tensor = nullptr;
  PyTypeObject* parameter = nullptr;
  PyObject* strided = nullptr;
  py::object current_stream;  // torch._C._cuda_getCurrentRawStream(device) -> int
  std::vector<std::pair<PyObject*, DType>> dtypes;
};

const TorchApi* Torch() {
  static TorchApi* api = nullptr;  // filled under the GIL; kept for the process
  if (api) return api;
  PyObject* mod = PyImport_GetModule(py::str("torch").ptr());
  if (!mod) {
    PyErr_Clear();
    return nullptr;
  }
  py::object torch = py::reinterpret_steal<py::object>(mod);
  // References kept for the life of the process (torch's types and dtypes are never freed).
  auto held = [](py::object o) { return o.release().ptr(); };
  try {
    auto a = std::make_unique<TorchApi>();
    // Absent from CPU-only builds of torch, which make no CUDA tensors.
    a->current_stream = py::getattr(torch.attr("_C"), "_cuda_getCurrentRawStream", py::none());
    a->tensor = reinterpret_cast<PyTypeObject*>(held(torch.attr("Tensor")));
    a->parameter = reinterpret_cast<PyTypeObject*>(held(torch.attr("nn").attr("Parameter")));
    a->strided = held(torch.attr("strided"));
    const std::pair<const char*, DType> names[] = {
        {"float32", DType::kFloat32}, {"float64", DType::kFloat64}, {"float16", DType::kFloat16},
        {"int8", DType::kInt8},       {"int16", DType::kInt16},     {"int32", DType::kInt32},
        {"int64", DType::kInt64},     {"uint8", DType::kUInt8},     {"bool", DType::kBool}};
    for (const auto& [name, dt] : names) a->dtypes.emplace_back(held(torch.attr(name)), dt);
    api = a.release();
  } catch (py::error_already_set&) {
    return nullptr;  // a torch without these names (or one still importing): the generic path
  }
  return api;
}

enum class Fast { kDevice, kHost, kOther };

// A torch.Tensor (or Parameter) read through its C methods: torch's
// __cuda_array_interface__ and __dlpack__ are Python code costing 10-20 us a
// call, more than a small policy's whole run on the GPU. The run waits for
// torch's current stream on the tensor's device, where torch queued the work
// that wrote it (or reads it still, for out=); __cuda_array_interface__
// version 2, which torch writes, names no stream. Anything unusual (another
// subclass, a sparse or non-contiguous tensor, a dtype the engine does not
// read) is left to the generic path and its errors.
Fast FromTorch(const py::handle& obj, DeviceView* out) {
  const TorchApi* api = Torch();
  if (!api || (Py_TYPE(obj.ptr()) != api->tensor && Py_TYPE(obj.ptr()) != api->parameter))
    return Fast::kOther;
  if (!obj.attr("is_cuda").cast<bool>()) return Fast::kHost;
  if (api->current_stream.is_none()) return Fast::kOther;
  if (obj.attr("layout").ptr() != api->strided || !obj.attr("is_contiguous")().cast<bool>())
    return Fast::kOther;
  py::object dtype = obj.attr("dtype");
  DType dt = DType::kUndefined;
  for (const auto& [t, d] : api->dtypes)
    if (dtype.ptr() == t) dt = d;
  if (dt == DType::kUndefined) return Fast::kOther;
  const int device = obj.attr("get_device")().cast<int>();
  Shape shape;
  for (auto d : py::tuple(obj.attr("shape"))) shape.push_back(d.cast<int64_t>());
  const auto ptr = obj.attr("data_ptr")().cast<uintptr_t>();
  const auto stream = api->current_stream(device).cast<uintptr_t>();
  out->view = TensorView{dt, shape, reinterpret_cast<void*>(ptr), MemoryKind::kDevice};
  out->keep = py::reinterpret_borrow<py::object>(obj);
  out->has_stream = true;
  out->stream = stream ? stream : 1;  // 0: torch's default stream, the legacy one (cudaStreamLegacy)
  return Fast::kDevice;
}

}  // namespace

DType DTypeFromTypestr(const std::string& typestr) {
  if (typestr.size() < 3) return DType::kUndefined;
  const char order = typestr[0];
  if (order == '>' && typestr.substr(1) != "u1" && typestr.substr(1) != "i1" &&
      typestr.substr(1) != "b1")
    return DType::kUndefined;  // big-endian data
  const std::string t = typestr.substr(1);
  if (t == "f4") return DType::kFloat32;
  if (t == "f8") return DType::kFloat64;
  if (t == "f2") return DType::kFloat16;
  if (t == "i1") return DType::kInt8;
  if (t == "i2") return DType::kInt16;
  if (t == "i4") return DType::kInt32;
  if (t == "i8") return DType::kInt64;
  if (t == "u1") return DType::kUInt8;
  if (t == "b1") return DType::kBool;
  return DType::kUndefined;
}

bool DeviceFeedView(const py::handle& obj_in, const std::string& what, uintptr_t consumer_stream,
                    bool writable, DeviceView* out) {
  if (py::isinstance<py::array>(obj_in)) return false;
  if (DeviceArrayFeed(obj_in, out)) return true;
  switch (FromTorch(obj_in, out)) {
    case Fast::kDevice: return true;
    case Fast::kHost: return false;
    case Fast::kOther: break;
  }
  py::object obj = py::reinterpret_borrow<py::object>(obj_in);
  // A torch tensor that requires grad exports nothing: read its data.
  if (py::hasattr(obj, "requires_grad") && py::hasattr(obj, "detach") &&
      py::bool_(obj.attr("requires_grad")))
    obj = obj.attr("detach")();
  if (py::hasattr(obj, "__cuda_array_interface__")) {
    py::object cai = obj.attr("__cuda_array_interface__");
    if (!py::isinstance<py::dict>(cai))
      ThrowPython(StatusCode::kInput, what + ": __cuda_array_interface__ of " + TypeName(obj) +
                                          " is not a dict");
    return FromCudaArrayInterface(obj, cai, what, writable, out);
  }
  if (py::hasattr(obj, "__dlpack__") && py::hasattr(obj, "__dlpack_device__")) {
    py::tuple dev = obj.attr("__dlpack_device__")();
    const int type = dev[0].cast<int>();
    if (type != dl::kDLCUDA && type != dl::kDLCUDAManaged) return false;  // host producers
    return FromDLPack(obj, what, consumer_stream, writable, out);
  }
  return false;
}

uintptr_t StreamHandle(const py::handle& stream) {
  py::object handle;
  if (py::isinstance<py::int_>(stream)) handle = py::reinterpret_borrow<py::object>(stream);
  else if (py::hasattr(stream, "cuda_stream")) handle = stream.attr("cuda_stream");  // torch
  else if (py::hasattr(stream, "ptr")) handle = stream.attr("ptr");                  // CuPy
  if (!handle || !py::isinstance<py::int_>(handle))
    ThrowPython(StatusCode::kInput,
                "stream: expected an int (cudaStream_t), a torch.cuda.Stream or an object with "
                ".cuda_stream or .ptr, got " + TypeName(stream));
  const auto v = handle.cast<int64_t>();
  if (v < 0) ThrowPython(StatusCode::kInput, "stream: invalid handle " + std::to_string(v));
  return static_cast<uintptr_t>(v);
}

}  // namespace python
}  // namespace kaiwu
