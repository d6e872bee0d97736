// Status and StatusOr: the error type of every rkv module boundary.
//
// Codes are gRPC's canonical codes, so that a data-plane error and a
// control-plane error read the same to a caller. A Status is [[nodiscard]]:
// ignoring one fails the build under -Werror.
#pragma once
// A classic guard as well: this file is also installed as <rkv/status.h>,
// and a translation unit that sees both copies must get one definition.
#ifndef RKV_COMMON_STATUS_H_
#define RKV_COMMON_STATUS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

// Marks librkv's public API: the library is built with hidden visibility,
// so only what carries this is exported.
#ifndef RKV_EXPORT
#define RKV_EXPORT [[gnu::visibility("default")]]
#endif

namespace rkv {

enum class StatusCode : int32_t {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// Returns the canonical upper-case name of `code`, e.g. "NOT_FOUND".
RKV_EXPORT std::string_view StatusCodeName(StatusCode code);

// True when `raw` is one of the StatusCode values (used to validate codes
// that arrive over the wire).
RKV_EXPORT bool IsValidStatusCode(int32_t raw);

// A success carries nothing but its code: creating, moving and destroying
// an OK Status touch no string and call nothing (they run on every GET; the
// message of a failure lives on the heap).
class [[nodiscard]] RKV_EXPORT Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code),
        message_(message.empty() ? nullptr : std::make_unique<const std::string>(std::move(message))) {}
  Status(const Status& other)
      : code_(other.code_),
        message_(other.message_ ? std::make_unique<const std::string>(*other.message_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) *this = Status(other);
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;
  ~Status() = default;

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_ ? *message_ : EmptyMessage(); }

  // "NOT_FOUND: key not found" or "OK".
  std::string ToString() const;

  // Returns a copy with "context: " prepended to the message.
  Status WithContext(std::string_view context) const;

  // Explicitly discards a status whose failure is acceptable at this point.
  void IgnoreError() const {}

 private:
  static const std::string& EmptyMessage() {
    static const std::string empty;
    return empty;
  }

  StatusCode code_ = StatusCode::kOk;
  std::unique_ptr<const std::string> message_;  // null when empty
};

inline std::ostream& operator<<(std::ostream& os, const Status& s) {
  return os << s.ToString();
}

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unauthenticated(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }

// A failed system call, keeping the call and errno:
// PosixError("open(/data/x)", errno) -> "INTERNAL: open(/data/x): No such file".
// ENOENT maps to NOT_FOUND, EACCES/EPERM to PERMISSION_DENIED, ETIMEDOUT to
// DEADLINE_EXCEEDED, ECONNREFUSED/ECONNRESET/EPIPE/EHOSTUNREACH to
// UNAVAILABLE, ENOMEM/ENOSPC to RESOURCE_EXHAUSTED, everything else INTERNAL.
RKV_EXPORT Status PosixError(std::string_view context, int err);

// StatusOr<T>: a T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit
    if (status_.ok()) status_ = Internal("StatusOr built from an OK status without a value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

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

#endif  // RKV_COMMON_STATUS_H_
