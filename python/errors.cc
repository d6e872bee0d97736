#include "python/errors.h"

#include <array>
#include <string>
#include <string_view>

namespace py = pybind11;

namespace rkv::python {
namespace {

constexpr size_t kCodeCount = static_cast<size_t>(StatusCode::kUnauthenticated) + 1;

struct ErrorClassSpec {
  StatusCode code;
  const char* name;    // the class's name in module rkv
  PyObject* also;      // a built-in exception it derives from too, or null
  const char* doc;
};

// The classes live as long as the process: they are created once, at
// import, and never freed (a module's types outlive any interpreter
// teardown ordering this way, as pybind11 advises for static handles).
PyObject* g_error = nullptr;
std::array<PyObject*, kCodeCount> g_by_code{};
PyObject* g_buffer_too_small = nullptr;

PyObject* NewClass(const std::string& name, const char* doc, PyObject* bases) {
  const std::string qualified = "rkv." + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  return cls;
}

py::str Utf8OrReplaced(std::string_view text) {
  PyObject* s = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
  if (s == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

// An instance of `cls` with `message` and the attributes code and reason.
py::object NewInstance(PyObject* cls, std::string_view message, StatusCode code, Reason reason) {
  py::object instance = py::reinterpret_borrow<py::object>(cls)(Utf8OrReplaced(message));
  const std::string_view code_name = StatusCodeName(code);
  const std::string_view reason_name = ReasonName(reason);
  instance.attr("code") = py::str(code_name.data(), code_name.size());
  instance.attr("reason") = py::str(reason_name.data(), reason_name.size());
  return instance;
}

[[noreturn]] void Raise(PyObject* cls, const py::object& instance) {
  PyErr_SetObject(cls, instance.ptr());
  throw py::error_already_set();
}

}  // namespace

void RegisterErrors(py::module_& module) {
  if (g_error == nullptr) {
    g_error = NewClass("Error",
                       "Base of every error rkv reports. Attributes: code, the status code's name "
                       "(\"NOT_FOUND\"); reason, the typed reason (\"NONE\", \"OUTCOME_UNKNOWN\": a PUT "
                       "or DELETE that may or may not have been applied, ...). str() is the message.",
                       PyExc_Exception);
    PyObject_SetAttrString(g_error, "code", Py_None);
    PyObject_SetAttrString(g_error, "reason", Py_None);

    const ErrorClassSpec specs[] = {
        {StatusCode::kCancelled, "Cancelled", nullptr, "CANCELLED: the call was cancelled."},
        {StatusCode::kUnknown, "Unknown", nullptr, "UNKNOWN: an error of no other kind."},
        {StatusCode::kInvalidArgument, "InvalidArgument", PyExc_ValueError,
         "INVALID_ARGUMENT: a key outside 1..max_key_bytes bytes, a value over max_value_bytes, or a "
         "bad option. Also a ValueError."},
        {StatusCode::kDeadlineExceeded, "DeadlineExceeded", nullptr,
         "DEADLINE_EXCEEDED: the server is reachable but the call could not complete in time."},
        {StatusCode::kNotFound, "NotFound", PyExc_KeyError,
         "NOT_FOUND: the key is absent. Also a KeyError."},
        {StatusCode::kAlreadyExists, "AlreadyExists", nullptr, "ALREADY_EXISTS."},
        {StatusCode::kPermissionDenied, "PermissionDenied", nullptr,
         "PERMISSION_DENIED: the server refused the connection (wrong token, incompatible version)."},
        {StatusCode::kResourceExhausted, "ResourceExhausted", nullptr,
         "RESOURCE_EXHAUSTED: no connection slot left on the server, or its table or heap is full."},
        {StatusCode::kFailedPrecondition, "FailedPrecondition", nullptr,
         "FAILED_PRECONDITION: the call does not apply in this state (a cluster call on a client of "
         "one server, a closed Client, a server speaking another protocol version). Also named "
         "PreconditionFailed."},
        {StatusCode::kAborted, "Aborted", nullptr,
         "ABORTED: a resent PUT or DELETE the server could no longer check; the first attempt's "
         "outcome is unknown."},
        {StatusCode::kOutOfRange, "OutOfRange", nullptr, "OUT_OF_RANGE."},
        {StatusCode::kUnimplemented, "Unimplemented", nullptr, "UNIMPLEMENTED."},
        {StatusCode::kInternal, "Internal", nullptr, "INTERNAL: a bug in rkv."},
        {StatusCode::kUnavailable, "Unavailable", nullptr,
         "UNAVAILABLE: the server or coordinator could not be reached within the deadline."},
        {StatusCode::kDataLoss, "DataLoss", nullptr, "DATA_LOSS: the server's table is corrupt."},
        {StatusCode::kUnauthenticated, "Unauthenticated", nullptr,
         "UNAUTHENTICATED: the coordinator refused the token."},
    };
    for (const ErrorClassSpec& spec : specs) {
      py::tuple bases = spec.also != nullptr
                            ? py::make_tuple(py::handle(g_error), py::handle(spec.also))
                            : py::make_tuple(py::handle(g_error));
      PyObject* cls = NewClass(spec.name, spec.doc, bases.ptr());
      const std::string_view code = StatusCodeName(spec.code);
      py::handle(cls).attr("code") = py::str(code.data(), code.size());
      g_by_code[static_cast<size_t>(spec.code)] = cls;
    }
    PyObject* out_of_range = g_by_code[static_cast<size_t>(StatusCode::kOutOfRange)];
    g_buffer_too_small = NewClass("BufferTooSmall",
                                  "Client.get_into: the value does not fit the buffer, whose contents are "
                                  "then unspecified. Attribute needed: the value's size in bytes.",
                                  out_of_range);
    PyObject_SetAttrString(g_buffer_too_small, "needed", Py_None);
  }

  module.attr("Error") = py::handle(g_error);
  for (size_t code = 1; code < kCodeCount; ++code) {
    py::handle cls(g_by_code[code]);
    module.attr(cls.attr("__name__")) = cls;
  }
  module.attr("PreconditionFailed") = py::handle(g_by_code[static_cast<size_t>(StatusCode::kFailedPrecondition)]);
  module.attr("BufferTooSmall") = py::handle(g_buffer_too_small);
}

void ThrowStatus(const Status& status) {
  const auto index = static_cast<size_t>(status.code());
  PyObject* cls = index > 0 && index < kCodeCount ? g_by_code[index] : g_error;
  Raise(cls, NewInstance(cls, status.message(), status.code(), status.reason()));
}

void ThrowBufferTooSmall(size_t needed, size_t capacity) {
  const std::string message =
      "the value has " + std::to_string(needed) + " bytes; the buffer holds " + std::to_string(capacity);
  py::object instance = NewInstance(g_buffer_too_small, message, StatusCode::kOutOfRange, Reason::kNone);
  instance.attr("needed") = py::int_(needed);
  Raise(g_buffer_too_small, instance);
}

}  // namespace rkv::python
