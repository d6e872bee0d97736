#include "common/status.h"

#include <cerrno>
#include <cstring>

namespace rkv {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kCancelled: return "CANCELLED";
    case StatusCode::kUnknown: return "UNKNOWN";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied: return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kUnauthenticated: return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

bool IsValidStatusCode(int32_t raw) { return raw >= 0 && raw <= 16; }

std::string_view ReasonName(Reason reason) {
  switch (reason) {
    case Reason::kNone: return "NONE";
    case Reason::kNotPrimary: return "NOT_PRIMARY";
    case Reason::kHandover: return "HANDOVER";
    case Reason::kNoLease: return "NO_LEASE";
    case Reason::kOutcomeUnknown: return "OUTCOME_UNKNOWN";
    case Reason::kKeysMoved: return "KEYS_MOVED";
    case Reason::kConditionFailed: return "CONDITION_FAILED";
  }
  return "UNKNOWN";
}

bool IsValidReason(uint8_t raw) { return raw <= kMaxReason; }

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code_));
  if (!message().empty()) {
    out += ": ";
    out += message();
  }
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message(), reason(), map_version());
}

Status PosixError(std::string_view context, int err) {
  StatusCode code = StatusCode::kInternal;
  switch (err) {
    case ENOENT: code = StatusCode::kNotFound; break;
    case EACCES:
    case EPERM: code = StatusCode::kPermissionDenied; break;
    case ETIMEDOUT: code = StatusCode::kDeadlineExceeded; break;
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENOTCONN: code = StatusCode::kUnavailable; break;
    case ENOMEM:
    case ENOSPC: code = StatusCode::kResourceExhausted; break;
    case EINVAL: code = StatusCode::kInvalidArgument; break;
    default: break;
  }
  return Status(code, std::string(context) + ": " + std::strerror(err));
}

}  // namespace rkv
