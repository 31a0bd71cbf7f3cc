// What a refit is given, read in place: numpy arrays through the numpy API,
// torch tensors (CPU or CUDA) through their data pointer, dtype and shape, with
// no copy and no Python-side work per weight; anything else through
// kaiwu_infer.refit_map._as_array.
#include <Python.h>

#include <string>
#include <utility>

#include "bindings.h"

namespace kaiwu {
namespace python {

namespace {

// torch, once it is imported: the tensor type and the dtypes we read.
struct Torch {
  PyObject* tensor = nullptr;
  std::vector<std::pair<PyObject*, DType>> dtypes;
};

const Torch* FindTorch() {
  static Torch torch;
  static bool found = false;
  if (found) return &torch;
  PyObject* modules = PyImport_GetModuleDict();
  PyObject* mod = PyDict_GetItemString(modules, "torch");  // borrowed
  if (!mod || mod == Py_None) return nullptr;              // not imported: no torch tensors
  py::module_ t = py::reinterpret_borrow<py::module_>(mod);
  if (!py::hasattr(t, "Tensor")) return nullptr;  // being imported
  torch.tensor = py::object(t.attr("Tensor")).release().ptr();
  const std::pair<const char*, DType> names[] = {
      {"float32", DType::kFloat32}, {"float64", DType::kFloat64}, {"float16", DType::kFloat16},
      {"int8", DType::kInt8},       {"uint8", DType::kUInt8},     {"int16", DType::kInt16},
      {"int32", DType::kInt32},     {"int64", DType::kInt64},     {"bool", DType::kBool}};
  for (const auto& [name, dt] : names)
    if (py::hasattr(t, name)) torch.dtypes.emplace_back(py::object(t.attr(name)).release().ptr(), dt);
  found = true;
  return &torch;
}

// Interned attribute names.
struct Names {
  py::str is_cuda{"is_cuda"}, dtype{"dtype"}, shape{"shape"}, is_contiguous{"is_contiguous"},
      contiguous{"contiguous"}, data_ptr{"data_ptr"}, get_device{"get_device"}, detach{"detach"},
      cpu{"cpu"};
};
const Names& N() {
  static const Names* names = new Names();  // never freed: outlives the interpreter's teardown
  return *names;
}

// obj.method() through vectorcall: no bound method object is made per call.
py::object Call(const py::handle& obj, const py::str& method) {
  PyObject* args[] = {obj.ptr()};
  PyObject* r = PyObject_VectorcallMethod(method.ptr(), args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                          nullptr);
  if (!r) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(r);
}

// A weight the engine cannot take (raised as RefitError by the caller).
struct Refused {
  std::string message;
};

[[noreturn]] void Refuse(const std::string& name, const std::string& why) {
  throw Refused{"refit refused, weights unchanged:\n  '" + name + "' " + why};
}

// A torch tensor: true when read (on the host or on device `device_ordinal`).
bool ReadTorch(const Torch& torch, py::object obj, const std::string_view name, int device_ordinal,
               RefitSource* out, std::vector<py::object>* keep) {
  const Names& n = N();
  bool cuda = obj.attr(n.is_cuda).ptr() == Py_True;
  if (cuda && (device_ordinal < 0 || Call(obj, n.get_device).cast<int>() != device_ordinal)) {
    obj = Call(Call(obj, n.detach), n.cpu);  // another device: through the host
    cuda = false;
  }
  PyObject* dt = obj.attr(n.dtype).ptr();
  out->view.dtype = DType::kUndefined;
  for (const auto& [p, d] : torch.dtypes)
    if (p == dt) out->view.dtype = d;
  if (out->view.dtype == DType::kUndefined)
    Refuse(std::string(name), "has dtype " + py::str(dt).cast<std::string>() + ", which the engine does not store");
  if (Call(obj, n.is_contiguous).ptr() != Py_True) obj = Call(obj, n.contiguous);
  py::object shape = obj.attr(n.shape);
  const Py_ssize_t rank = PyTuple_GET_SIZE(shape.ptr());  // torch.Size is a tuple
  out->view.shape.resize(static_cast<size_t>(rank));
  for (Py_ssize_t i = 0; i < rank; ++i)
    out->view.shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), i));
  py::object ptr = Call(obj, n.data_ptr);
  out->view.data = PyLong_AsVoidPtr(ptr.ptr());
  if (PyErr_Occurred()) throw py::error_already_set();
  out->device = cuda ? device_ordinal : -1;  // contiguous() keeps the device
  keep->push_back(std::move(obj));
  return true;
}

void ReadNumpy(py::array arr, std::string_view name, RefitSource* out,
               std::vector<py::object>* keep) {
  if (!(arr.flags() & py::array::c_style))
    arr = py::array::ensure(arr, py::array::c_style | py::array::forcecast);
  out->view.dtype = FromNumpyDType(arr.dtype());
  if (out->view.dtype == DType::kUndefined)
    Refuse(std::string(name), "has numpy dtype " + py::str(arr.dtype()).cast<std::string>() +
                                  ", which the engine does not store");
  out->view.shape.assign(arr.shape(), arr.shape() + arr.ndim());
  out->view.data = const_cast<void*>(arr.data());
  out->device = -1;
  keep->push_back(std::move(arr));
}

}  // namespace

void ReadRefitSources(const py::handle& weights, int device_ordinal,
                      std::vector<RefitSource>* sources, std::vector<py::object>* keep) {
  py::dict dict;
  if (PyDict_Check(weights.ptr())) {
    dict = py::reinterpret_borrow<py::dict>(weights);
  } else if (py::hasattr(weights, "items") && py::hasattr(weights, "keys")) {
    dict = py::dict(py::reinterpret_borrow<py::object>(weights));  // any Mapping
  } else {
    ThrowPython(StatusCode::kRefit, "weights must be a mapping of names to arrays");
  }
  keep->push_back(dict);
  const Torch* torch = FindTorch();
  sources->resize(static_cast<size_t>(PyDict_Size(dict.ptr())));
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  size_t i = 0;
  while (PyDict_Next(dict.ptr(), &pos, &key, &value)) {
    RefitSource& s = (*sources)[i++];
    if (!PyUnicode_Check(key)) ThrowPython(StatusCode::kRefit, "weight names must be strings");
    Py_ssize_t len = 0;
    const char* chars = PyUnicode_AsUTF8AndSize(key, &len);  // cached in the key, which `dict` keeps
    if (!chars) {  // a lone surrogate: no model name can match it
      PyErr_Clear();
      ThrowPython(StatusCode::kRefit, "refit refused, weights unchanged: weight name " +
                                          TextFromPython(py::repr(key)) + " is not valid UTF-8");
    }
    s.name = std::string_view(chars, static_cast<size_t>(len));
    py::handle obj(value);
    if (py::isinstance<py::array>(obj)) {
      try {
        ReadNumpy(py::reinterpret_borrow<py::array>(obj), s.name, &s, keep);
      } catch (const Refused& r) {
        ThrowPython(StatusCode::kRefit, r.message);
      }
      continue;
    }
    try {
      if (torch && PyObject_IsInstance(value, torch->tensor) == 1 &&
          ReadTorch(*torch, py::reinterpret_borrow<py::object>(obj), s.name, device_ordinal, &s, keep))
        continue;
      static PyObject* as_array =  // never freed: outlives the interpreter's teardown
          py::object(py::module_::import("kaiwu_infer.refit_map").attr("_as_array")).release().ptr();
      py::object arr = py::reinterpret_borrow<py::object>(as_array)(obj);
      if (!py::isinstance<py::array>(arr)) arr = py::array::ensure(arr);
      if (!arr) throw py::value_error("not an array");
      ReadNumpy(py::reinterpret_borrow<py::array>(arr), s.name, &s, keep);
    } catch (const Refused& r) {
      ThrowPython(StatusCode::kRefit, r.message);
    } catch (py::error_already_set& e) {
      if (e.matches(PyExc_KeyboardInterrupt)) throw;
      ThrowPython(StatusCode::kRefit, "refit refused, weights unchanged:\n  '" +
                                          std::string(s.name) + "' cannot be read as an array: " +
                                          e.what());
    }
  }
}

bool TorchCurrentStream(int device, uintptr_t* stream) {
  PyObject* mod = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
  if (!mod || mod == Py_None) return false;
  py::object torch = py::reinterpret_borrow<py::object>(mod);
  // torch._C._cuda_getCurrentRawStream gives the handle itself (what Triton
  // asks torch for); current_stream() makes a Stream object per call.
  static PyObject* raw = [&]() -> PyObject* {  // never freed, like as_array
    py::object c = py::getattr(torch, "_C", py::none());
    py::object f = c.is_none() ? c : py::getattr(c, "_cuda_getCurrentRawStream", py::none());
    return f.is_none() ? nullptr : f.release().ptr();
  }();
  if (raw) {
    *stream = static_cast<uintptr_t>(py::reinterpret_borrow<py::object>(raw)(device).cast<int64_t>());
    return true;
  }
  py::object s = torch.attr("cuda").attr("current_stream")(device);
  *stream = static_cast<uintptr_t>(s.attr("cuda_stream").cast<int64_t>());
  return true;
}

}  // namespace python
}  // namespace kaiwu
