// Text across the boundary. Python decodes and encodes UTF-8 strictly, so a
// stray byte in a message or a lone surrogate in a feed name would surface as
// UnicodeDecodeError / UnicodeEncodeError instead of the engine's own error.
// The importer refuses names that are not UTF-8; these keep the boundary
// itself from ever raising on text.
#include "bindings.h"

namespace kaiwu {
namespace python {

std::string TextFromPython(const py::handle& obj) {
  py::object s = py::isinstance<py::str>(obj) ? py::reinterpret_borrow<py::object>(obj)
                                              : py::object(py::str(obj));
  PyObject* bytes = PyUnicode_AsEncodedString(s.ptr(), "utf-8", "backslashreplace");
  if (!bytes) throw py::error_already_set();
  py::bytes owned = py::reinterpret_steal<py::bytes>(bytes);
  return std::string(owned);
}

py::str TextToPython(const std::string& text) {
  PyObject* s =
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace");
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

std::string PathFromPython(const py::handle& obj) {
  if (py::isinstance<py::bytes>(obj)) return std::string(py::reinterpret_borrow<py::bytes>(obj));
  PyObject* bytes = PyUnicode_EncodeFSDefault(py::str(obj).ptr());
  if (!bytes) throw py::error_already_set();
  py::bytes owned = py::reinterpret_steal<py::bytes>(bytes);
  return std::string(owned);
}

void SetPythonError(PyObject* cls, const std::string& message) {
  PyObject* s = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()),
                                     "backslashreplace");
  if (!s) {
    PyErr_Clear();
    PyErr_SetString(cls, "(message not decodable)");
    return;
  }
  PyErr_SetObject(cls, s);
  Py_DECREF(s);
}

}  // namespace python
}  // namespace kaiwu
