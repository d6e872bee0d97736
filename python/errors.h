// The Python exceptions of module rkv: one class per rkv::StatusCode, all
// under rkv.Error.
//
//   rkv.Error                  base; .code names the status code
//                              ("NOT_FOUND"), .reason the typed Reason
//                              ("NONE", "OUTCOME_UNKNOWN", ...)
//   rkv.NotFound               NOT_FOUND, also a KeyError
//   rkv.InvalidArgument        INVALID_ARGUMENT, also a ValueError
//   rkv.FailedPrecondition     FAILED_PRECONDITION (alias PreconditionFailed)
//   rkv.BufferTooSmall         an rkv.OutOfRange raised by Client.get_into;
//                              .needed is the value's size in bytes
//   ... and Cancelled, Unknown, DeadlineExceeded, AlreadyExists,
//   PermissionDenied, ResourceExhausted, Aborted, OutOfRange,
//   Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated.
//
// A raised exception's message is the C++ status message.
//
// Thread safety: every function here needs the GIL.
#pragma once

#include <cstddef>

#include <pybind11/pybind11.h>

#include "rkv/status.h"

namespace rkv::python {

// Creates the exception classes and adds them to `module`. Called once,
// when the module is imported.
void RegisterErrors(pybind11::module_& module);

// Raises the exception class of `status.code()` (which is not OK) carrying
// its message, code and reason: sets the Python error and throws
// pybind11::error_already_set.
[[noreturn]] void ThrowStatus(const Status& status);

// Raises rkv.BufferTooSmall for a value of `needed` bytes that does not fit
// a buffer of `capacity` bytes.
[[noreturn]] void ThrowBufferTooSmall(size_t needed, size_t capacity);

}  // namespace rkv::python
