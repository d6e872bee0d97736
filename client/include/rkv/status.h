// rkv::Status and rkv::StatusOr: what every librkv call returns, and the
// error type of every rkv module boundary inside rkv too.
//
// Codes are gRPC's canonical codes, so that a data-plane error and a
// control-plane error read the same to a caller. A Status is [[nodiscard]]:
// ignoring one fails the build under -Werror.
//
// This is the one definition of these types. rkv's own code includes
// common/status.h, which adds what only rkv's code uses (errno mapping,
// the validation of a code read off the wire, the early-return macros).
#pragma once
#ifndef RKV_STATUS_H_
#define RKV_STATUS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

// Marks librkv's exported API: librkv and the static libraries it embeds are
// built with hidden visibility, so only what carries this is exported.
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

// Why an operation was refused, beside its code: a typed reason that code
// decides on (whether a write may be resent, whether a batch must be
// grouped again), where the message is for people and may be reworded.
// An application may read it too: Reason::kOutcomeUnknown on a failed PUT
// or DELETE says that the write may or may not have been applied. The
// values travel on the wire: none is ever renumbered.
enum class Reason : uint8_t {
  kNone = 0,
  // The server is not the primary of the key's shard in the cluster map
  // version the status names (or has no role in any map yet): it refused
  // before writing anything.
  kNotPrimary = 1,
  // The key's shard is being handed over between two primaries in the map
  // version named: neither accepts writes, and nothing was written.
  kHandover = 2,
  // The server holds no lease on its cluster map and refused before
  // writing anything.
  kNoLease = 3,
  // The write may or may not have been applied (a lease or map change
  // during the write, a reply lost on its way, a backup failure the
  // coordinator was not told of, a request too old for the replay check).
  kOutcomeUnknown = 4,
  // The keys of one call belong to several servers in a newer map. librkv
  // groups them again itself; a caller sees it only if the deadline passes
  // first.
  kKeysMoved = 5,
  // A conditional PUT (Client::Put with a PutCondition) found the key not
  // as the condition asked: nothing was written. The status's code is
  // FAILED_PRECONDITION and its message names the key's version.
  kConditionFailed = 6,
};
inline constexpr uint8_t kMaxReason = static_cast<uint8_t>(Reason::kConditionFailed);

// Returns the upper-case name of `reason`, e.g. "NOT_PRIMARY".
RKV_EXPORT std::string_view ReasonName(Reason reason);

// A success carries nothing but its code: creating, moving and destroying
// an OK Status touch no string and call nothing (they run on every GET; the
// message and reason of a failure live on the heap).
//
// A failure may carry a typed Reason and the cluster map version that
// reason speaks of; code decides on those, never on the message.
class [[nodiscard]] RKV_EXPORT Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : Status(code, std::move(message), Reason::kNone, 0) {}
  Status(StatusCode code, std::string message, Reason reason, uint64_t map_version = 0)
      : code_(code),
        rep_(message.empty() && reason == Reason::kNone && map_version == 0
                 ? nullptr
                 : std::make_unique<const Rep>(Rep{std::move(message), reason, map_version})) {}
  Status(const Status& other)
      : code_(other.code_), rep_(other.rep_ ? std::make_unique<const Rep>(*other.rep_) : nullptr) {}
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
  const std::string& message() const { return rep_ ? rep_->message : EmptyMessage(); }
  // Why the operation was refused (Reason::kNone when no reason applies).
  Reason reason() const { return rep_ ? rep_->reason : Reason::kNone; }
  // The cluster map version reason() speaks of; 0 when none.
  uint64_t map_version() const { return rep_ ? rep_->map_version : 0; }

  // "NOT_FOUND: key not found" or "OK".
  std::string ToString() const;

  // Returns a copy with "context: " prepended to the message; the reason
  // and map version are kept.
  Status WithContext(std::string_view context) const;

  // Returns a copy with another message; the code, reason and map version
  // are kept.
  Status WithMessage(std::string message) const { return Status(code_, std::move(message), reason(), map_version()); }

  // Explicitly discards a status whose failure is acceptable at this point.
  void IgnoreError() const {}

 private:
  struct Rep {
    std::string message;
    Reason reason = Reason::kNone;
    uint64_t map_version = 0;
  };
  static const std::string& EmptyMessage() {
    static const std::string empty;
    return empty;
  }

  StatusCode code_ = StatusCode::kOk;
  std::unique_ptr<const Rep> rep_;  // null when there is no message, reason or map version
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

#endif  // RKV_STATUS_H_
