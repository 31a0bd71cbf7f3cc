#include "bindings.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "kaiwu_infer core: ONNX policy inference with in-place refit";
  kaiwu::python::BindErrors(m);
  kaiwu::python::BindSession(m);
  kaiwu::python::BindDeviceArray(m);
  kaiwu::python::BindServer(m);
  kaiwu::python::BindOps(m);
}
