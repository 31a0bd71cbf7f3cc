// Shared pieces of the pybind11 module: one Bind* function per concept, and
// numpy <-> engine conversions.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "kaiwu/session.h"
#include "kaiwu/status.h"
#include "kaiwu/tensor.h"

namespace kaiwu {
namespace python {

namespace py = pybind11;

void BindErrors(py::module_& m);
void BindSession(py::module_& m);
void BindServer(py::module_& m);

/// numpy dtype for an engine dtype, and back (kUndefined if none).
py::dtype ToNumpyDType(DType t);
DType FromNumpyDType(const py::dtype& d);


/// The engine session behind a kaiwu_infer.Session; raises InputError for other objects.
::kaiwu::Session* SessionFromPython(const py::handle& obj);

/// Raises the Python exception class for `code` with `message`.
[[noreturn]] void ThrowPython(StatusCode code, const std::string& message);

}  // namespace python
}  // namespace kaiwu
