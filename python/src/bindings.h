// Shared pieces of the pybind11 module: one Bind* function per concept, and
// numpy <-> engine conversions.
#pragma once

#include <memory>
#include <string>

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
void BindOps(py::module_& m);

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
/// A numpy array over engine memory, kept alive by `owner` (no copy).
py::array WrapOwned(const TensorView& v, const std::shared_ptr<void>& owner);

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
