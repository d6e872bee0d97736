// Status and StatusOr as rkv's own code uses them: the public types of
// <rkv/status.h> (their one definition, installed with librkv), plus what
// only rkv's code needs: errno mapping, the check of a code read off the
// wire, and the early-return macros.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

#include "rkv/status.h"

namespace rkv {

// True when `raw` is one of the StatusCode values (used to validate codes
// that arrive over the wire).
RKV_EXPORT bool IsValidStatusCode(int32_t raw);

// True when `raw` is one of the Reason values (used to validate reasons
// that arrive over the wire).
RKV_EXPORT bool IsValidReason(uint8_t raw);

// A failed system call, keeping the call and errno:
// PosixError("open(/data/x)", errno) -> "INTERNAL: open(/data/x): No such file".
// ENOENT maps to NOT_FOUND, EACCES/EPERM to PERMISSION_DENIED, ETIMEDOUT to
// DEADLINE_EXCEEDED, ECONNREFUSED/ECONNRESET/EPIPE/EHOSTUNREACH to
// UNAVAILABLE, ENOMEM/ENOSPC to RESOURCE_EXHAUSTED, everything else INTERNAL.
//
// librkv exports both (RKV_EXPORT) for rkv's own programs that link it, such
// as the suites' process helpers (tests/server_process.cc); no installed
// header declares them.
RKV_EXPORT Status PosixError(std::string_view context, int err);

}  // namespace rkv

#define RKV_CONCAT_INNER_(a, b) a##b
#define RKV_CONCAT_(a, b) RKV_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (a Status) is not OK.
#define RKV_RETURN_IF_ERROR(expr)          \
  do {                                     \
    ::rkv::Status rkv_status_ = (expr);    \
    if (!rkv_status_.ok()) return rkv_status_; \
  } while (0)

// `lhs = value of expr` (a StatusOr), or returns its status from the
// enclosing function.
#define RKV_ASSIGN_OR_RETURN(lhs, expr) \
  RKV_ASSIGN_OR_RETURN_IMPL_(RKV_CONCAT_(rkv_statusor_, __LINE__), lhs, expr)
#define RKV_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
