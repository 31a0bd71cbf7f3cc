// kaiwu_infer.DeviceArray: engine device memory handed to Python, exported
// through DLPack (__dlpack__, __dlpack_device__) and __cuda_array_interface__
// (version 3). The array owns its engine block: the block returns to the
// engine's pool only when the array and every DLPack export of it are gone,
// and a consumer stream named in __dlpack__(stream=...) is waited for before
// the engine writes the block again.
#include <atomic>
#include <cstring>

#include "backends/device.h"
#include <pybind11/stl.h>

#include "bindings.h"
#include "dlpack.h"

namespace kaiwu {
namespace python {

namespace {

namespace dl = dlpack;

dl::DLDataType ToDLPack(DType t) {
  switch (t) {
    case DType::kFloat32: return {dl::kDLFloat, 32, 1};
    case DType::kFloat64: return {dl::kDLFloat, 64, 1};
    case DType::kFloat16: return {dl::kDLFloat, 16, 1};
    case DType::kInt8: return {dl::kDLInt, 8, 1};
    case DType::kInt16: return {dl::kDLInt, 16, 1};
    case DType::kInt32: return {dl::kDLInt, 32, 1};
    case DType::kInt64: return {dl::kDLInt, 64, 1};
    case DType::kUInt8: return {dl::kDLUInt, 8, 1};
    case DType::kBool: return {dl::kDLBool, 8, 1};
    default: ThrowPython(StatusCode::kInternal, "no DLPack dtype for engine dtype");
  }
}

// What one export keeps alive: the block and the shape the DLTensor points to.
struct Export {
  std::shared_ptr<void> owner;
  std::vector<int64_t> shape;
  dl::DLManagedTensor legacy{};
  dl::DLManagedTensorVersioned versioned{};
};

constexpr const char kLegacyName[] = "dltensor";
constexpr const char kVersionedName[] = "dltensor_versioned";

// An unconsumed capsule frees its export; a consumer renamed it and calls the deleter itself.
template <typename Managed, const char* kName>
void DestroyCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kName)) return;
  PyObject *type, *value, *trace;
  PyErr_Fetch(&type, &value, &trace);
  auto* m = static_cast<Managed*>(PyCapsule_GetPointer(capsule, kName));
  if (m && m->deleter) m->deleter(m);
  PyErr_Restore(type, value, trace);
}

class PyDeviceArray {
 public:
  explicit PyDeviceArray(DeviceArrayData d) : d_(std::move(d)) {}

  py::tuple shape() const { return py::tuple(py::cast(d_.shape)); }
  py::dtype dtype() const { return ToNumpyDType(d_.dtype); }
  size_t nbytes() const { return static_cast<size_t>(NumElements(d_.shape)) * DTypeSize(d_.dtype); }
  std::string device() const { return "cuda:" + std::to_string(d_.ordinal); }
  uintptr_t data_ptr() const { return reinterpret_cast<uintptr_t>(d_.data); }

  py::dict CudaArrayInterface() const {
    py::dict d;
    d["shape"] = shape();
    d["typestr"] = dtype().attr("str");
    d["data"] = py::make_tuple(data_ptr(), false);
    d["version"] = 3;
    d["strides"] = py::none();
    // The run that made the array has finished on the device: nothing to wait for.
    d["stream"] = py::none();
    return d;
  }

  py::tuple DLPackDevice() const { return py::make_tuple(static_cast<int>(dl::kDLCUDA), d_.ordinal); }

  py::object DLPack(py::object stream, py::object max_version, py::object dl_device,
                    py::object copy) {
    if (!dl_device.is_none()) {
      auto dev = dl_device.cast<std::pair<int, int>>();
      if (dev.first != dl::kDLCUDA || dev.second != d_.ordinal)
        throw py::buffer_error("DeviceArray: cannot export to another device; it lives on " + device());
    }
    if (!copy.is_none() && copy.cast<bool>())
      throw py::buffer_error("DeviceArray: __dlpack__(copy=True) is not supported; copy on the consumer side");
    // The array's data is complete (its run has finished); a consumer stream
    // is noted so that the engine does not rewrite the block before it has read it.
    if (!stream.is_none()) {
      int64_t s = stream.cast<int64_t>();
      if (s < -1) throw py::value_error("DeviceArray: invalid stream " + std::to_string(s));
      if (s != -1 && d_.add_reader) d_.add_reader(static_cast<uintptr_t>(s));
    }
    bool versioned = false;
    if (!max_version.is_none()) {
      auto v = max_version.cast<std::pair<int, int>>();
      versioned = v.first >= 1;
    }
    auto* e = new Export{d_.owner, std::vector<int64_t>(d_.shape.begin(), d_.shape.end())};
    dl::DLTensor t{};
    t.data = d_.data;
    t.device = dl::DLDevice{dl::kDLCUDA, d_.ordinal};
    t.ndim = static_cast<int32_t>(e->shape.size());
    t.dtype = ToDLPack(d_.dtype);
    t.shape = e->shape.empty() ? nullptr : e->shape.data();
    t.strides = nullptr;
    t.byte_offset = 0;
    PyObject* capsule = nullptr;
    if (versioned) {
      e->versioned.version = {dl::kMajorVersion, dl::kMinorVersion};
      e->versioned.manager_ctx = e;
      e->versioned.deleter = [](dl::DLManagedTensorVersioned* m) {
        delete static_cast<Export*>(m->manager_ctx);
      };
      e->versioned.flags = 0;
      e->versioned.dl_tensor = t;
      capsule = PyCapsule_New(&e->versioned, kVersionedName,
                              &DestroyCapsule<dl::DLManagedTensorVersioned, kVersionedName>);
    } else {
      e->legacy.dl_tensor = t;
      e->legacy.manager_ctx = e;
      e->legacy.deleter = [](dl::DLManagedTensor* m) { delete static_cast<Export*>(m->manager_ctx); };
      capsule = PyCapsule_New(&e->legacy, kLegacyName,
                              &DestroyCapsule<dl::DLManagedTensor, kLegacyName>);
    }
    if (!capsule) {
      delete e;
      throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(capsule);
  }

  // A host copy (synchronous), for inspection and tests.
  py::array Numpy() const {
    py::array out(dtype(), std::vector<py::ssize_t>(d_.shape.begin(), d_.shape.end()));
    if (nbytes() == 0) return out;
    if (d_.backend) {
      py::gil_scoped_release release;
      d_.backend->Download(out.mutable_data(), d_.data, nbytes());
    } else {
      std::memcpy(out.mutable_data(), d_.data, nbytes());
    }
    return out;
  }

  const DeviceArrayData& data() const { return d_; }

  std::string Repr() const {
    return "DeviceArray(shape=" + py::repr(shape()).cast<std::string>() +
           ", dtype=" + py::str(dtype()).cast<std::string>() + ", device='" + device() + "')";
  }

 private:
  DeviceArrayData d_;
};

// Live test blocks (host memory posing as device memory), for the CPU tests of
// the DLPack lifetime rules.
std::atomic<int> test_blocks_alive{0};

}  // namespace

py::object WrapDevice(DeviceArrayData d) { return py::cast(PyDeviceArray(std::move(d))); }

bool DeviceArrayFeed(const py::handle& obj, DeviceView* out) {
  if (!py::isinstance<PyDeviceArray>(obj)) return false;
  const DeviceArrayData& d = obj.cast<const PyDeviceArray&>().data();
  out->view = TensorView{d.dtype, d.shape, d.data, MemoryKind::kDevice};
  out->keep = py::reinterpret_borrow<py::object>(obj);
  out->has_stream = false;  // its run has finished on the device
  return true;
}

void BindDeviceArray(py::module_& m) {
  py::class_<PyDeviceArray>(m, "DeviceArray",
                            "Engine device memory holding a result: a DLPack and "
                            "__cuda_array_interface__ producer (torch.from_dlpack works). Valid "
                            "until dropped; the engine reuses the memory only afterwards.")
      .def_property_readonly("shape", &PyDeviceArray::shape)
      .def_property_readonly("dtype", &PyDeviceArray::dtype)
      .def_property_readonly("ndim", [](const PyDeviceArray& a) { return py::len(a.shape()); })
      .def_property_readonly("nbytes", &PyDeviceArray::nbytes)
      .def_property_readonly("device", &PyDeviceArray::device)
      .def_property_readonly("data_ptr", &PyDeviceArray::data_ptr)
      .def_property_readonly("__cuda_array_interface__", &PyDeviceArray::CudaArrayInterface)
      .def("__dlpack_device__", &PyDeviceArray::DLPackDevice)
      .def("__dlpack__", &PyDeviceArray::DLPack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none())
      .def("numpy", &PyDeviceArray::Numpy, "A host copy (synchronous).")
      .def("__repr__", &PyDeviceArray::Repr);

  // Test hook: a DeviceArray over a host copy of `array`, posing as cuda:0
  // memory (never read by a device), to test the export rules without a GPU;
  // returns it with a function listing the consumer streams it was told of.
  m.def("_device_array_for_test", [](py::array array) {
    py::array c = py::array::ensure(array, py::array::c_style);
    DeviceArrayData d;
    d.dtype = FromNumpyDType(c.dtype());
    if (d.dtype == DType::kUndefined) ThrowPython(StatusCode::kInput, "unsupported dtype");
    d.shape.assign(c.shape(), c.shape() + c.ndim());
    const size_t bytes = static_cast<size_t>(c.nbytes());
    void* p = AlignedAlloc(bytes ? bytes : 64);
    std::memcpy(p, c.data(), bytes);
    ++test_blocks_alive;
    d.owner = std::shared_ptr<void>(p, [](void* q) {
      AlignedFree(q);
      --test_blocks_alive;
    });
    d.data = p;
    auto readers = std::make_shared<std::vector<uintptr_t>>();
    d.add_reader = [readers](uintptr_t s) { readers->push_back(s); };
    py::object obj = WrapDevice(std::move(d));
    return py::make_tuple(obj, py::cpp_function([readers]() { return *readers; }));
  });
  m.def("_test_blocks_alive", []() { return test_blocks_alive.load(); });
  // Test hook: what a device session reads from `obj` as a feed (None for host objects).
  m.def("_device_view_for_test", [](py::object obj, bool writable, uintptr_t consumer) -> py::object {
    DeviceView v;
    if (!DeviceFeedView(obj, "input 'x'", consumer, writable, &v)) return py::none();
    py::dict d;
    d["ptr"] = reinterpret_cast<uintptr_t>(v.view.data);
    d["dtype"] = ToNumpyDType(v.view.dtype);
    d["shape"] = py::tuple(py::cast(v.view.shape));
    d["stream"] = v.has_stream ? py::object(py::int_(v.stream)) : py::object(py::none());
    d["keep"] = v.keep;
    return d;
  }, py::arg("obj"), py::arg("writable") = false, py::arg("consumer") = 1);
}

}  // namespace python
}  // namespace kaiwu
