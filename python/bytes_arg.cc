#include "python/bytes_arg.h"

#include <string>

namespace py = pybind11;

namespace rkv::python {

BytesArg::BytesArg(py::handle object, const char* what) {
  if (PyBytes_Check(object.ptr())) {
    owner_ = py::reinterpret_borrow<py::object>(object);
    view_ = std::string_view(PyBytes_AS_STRING(object.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(object.ptr())));
    return;
  }
  if (PyUnicode_Check(object.ptr())) {
    Py_ssize_t size = 0;
    // The UTF-8 form is cached in the str object and lives as long as it.
    const char* data = PyUnicode_AsUTF8AndSize(object.ptr(), &size);
    if (data == nullptr) throw py::error_already_set();
    owner_ = py::reinterpret_borrow<py::object>(object);
    view_ = std::string_view(data, static_cast<size_t>(size));
    return;
  }
  if (PyObject_CheckBuffer(object.ptr())) {
    Py_buffer buffer;
    if (PyObject_GetBuffer(object.ptr(), &buffer, PyBUF_SIMPLE) != 0) throw py::error_already_set();
    copy_.assign(static_cast<const char*>(buffer.buf), static_cast<size_t>(buffer.len));
    PyBuffer_Release(&buffer);
    copied_ = true;
    return;
  }
  throw py::type_error(std::string(what) + " must be bytes, str or a bytes-like object, not " +
                       std::string(py::str(py::type::handle_of(object).attr("__name__"))));
}

}  // namespace rkv::python
