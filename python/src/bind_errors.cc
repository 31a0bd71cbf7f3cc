#include <map>
#include <stdexcept>

#include "bindings.h"

namespace kaiwu {
namespace python {

namespace {
std::map<StatusCode, PyObject*>& Classes() {
  static std::map<StatusCode, PyObject*> classes;
  return classes;
}

PyObject* NewClass(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string qualified = std::string("kaiwu_infer.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (!cls) throw py::error_already_set();
  m.add_object(name, py::handle(cls));
  return cls;
}

py::tuple Bases(std::initializer_list<PyObject*> bases) {
  py::tuple t(bases.size());
  size_t i = 0;
  for (PyObject* b : bases) t[i++] = py::reinterpret_borrow<py::object>(b);
  return t;
}
}  // namespace

void ThrowPython(StatusCode code, const std::string& message) {
  auto it = Classes().find(code);
  PyObject* cls = it == Classes().end() ? Classes()[StatusCode::kInternal] : it->second;
  SetPythonError(cls, message);
  throw py::error_already_set();
}

void BindErrors(py::module_& m) {
  PyObject* base = NewClass(m, "KaiwuError", Bases({PyExc_Exception}).ptr(),
                            "Base class of every error kaiwu_infer raises.");
  PyObject* model = NewClass(m, "ModelError", Bases({base, PyExc_ValueError}).ptr(),
                             "The model is malformed, truncated or inconsistent.");
  PyObject* unsupported = NewClass(m, "UnsupportedOpError", Bases({model}).ptr(),
                                   "The model uses ops kaiwu_infer cannot run; the message lists "
                                   "every such node with its op type, name and opset.");
  PyObject* not_found = NewClass(m, "ModelFileNotFoundError",
                                 Bases({model, PyExc_FileNotFoundError}).ptr(),
                                 "A model or external-data file is missing.");
  PyObject* input = NewClass(m, "InputError", Bases({base, PyExc_ValueError}).ptr(),
                             "Feeds do not match the model: name, dtype, rank or dimension.");
  PyObject* refit = NewClass(m, "RefitError", Bases({base, PyExc_ValueError}).ptr(),
                             "A refit was refused; the session keeps its previous weights.");
  PyObject* runtime = NewClass(m, "ExecutionError", Bases({base, PyExc_RuntimeError}).ptr(),
                               "A kernel found bad data while running (e.g. an index out of "
                               "range); the message names the node.");
  PyObject* internal = NewClass(m, "InternalError", Bases({base, PyExc_RuntimeError}).ptr(),
                                "A bug in kaiwu_infer; please report it.");
  auto& c = Classes();
  c[StatusCode::kModel] = model;
  c[StatusCode::kUnsupported] = unsupported;
  c[StatusCode::kFileNotFound] = not_found;
  c[StatusCode::kInput] = input;
  c[StatusCode::kRefit] = refit;
  c[StatusCode::kRuntime] = runtime;
  c[StatusCode::kInternal] = internal;

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      SetPythonError(Classes()[e.code()], e.what());
    } catch (const std::logic_error& e) {
      // std::invalid_argument, out_of_range, length_error from the standard
      // library: every bad input is checked before these can happen, so one
      // reaching Python is a bug, reported as such rather than a plain ValueError.
      SetPythonError(Classes()[StatusCode::kInternal],
                     std::string("unexpected C++ exception (please report it): ") + e.what());
    }
  });
}

}  // namespace python
}  // namespace kaiwu
