// numpy <-> engine tensors, shared by the session and server bindings.
#include "bindings.h"

namespace kaiwu {
namespace python {

TensorView ArrayView(const py::handle& obj, const std::string& what, py::array* keep,
                     StatusCode code, bool writable) {
  py::array arr;
  if (py::isinstance<py::array>(obj)) {
    arr = py::reinterpret_borrow<py::array>(obj);
  } else {
    try {
      if (py::hasattr(obj, "detach") && py::hasattr(obj, "numpy"))  // torch.Tensor, no copy on CPU
        arr = obj.attr("detach")().attr("cpu")().attr("numpy")();
      else
        arr = py::array::ensure(obj);
    } catch (...) {
    }
    if (!arr) ThrowPython(code, what + ": expected a numpy array, got " +
                                    py::str(py::type::of(obj)).cast<std::string>());
  }
  if (!(arr.flags() & py::array::c_style)) {
    if (writable) ThrowPython(code, what + ": the out= array must be C-contiguous");
    arr = py::array::ensure(arr, py::array::c_style | py::array::forcecast);
  }
  if (writable && !arr.writeable()) ThrowPython(code, what + ": array is read-only");
  DType dt = FromNumpyDType(arr.dtype());
  if (dt == DType::kUndefined)
    ThrowPython(code, what + ": numpy dtype " + py::str(arr.dtype()).cast<std::string>() +
                          " is not supported");
  TensorView v;
  v.dtype = dt;
  v.shape.assign(arr.shape(), arr.shape() + arr.ndim());
  v.data = const_cast<void*>(arr.data());
  *keep = arr;
  return v;
}

py::array WrapOwned(const TensorView& v, const std::shared_ptr<void>& owner) {
  auto* holder = new std::shared_ptr<void>(owner);
  py::capsule base(holder, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
  return py::array(ToNumpyDType(v.dtype), std::vector<py::ssize_t>(v.shape.begin(), v.shape.end()),
                   v.data, base);
}

}  // namespace python
}  // namespace kaiwu
