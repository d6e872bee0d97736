// Conversions between rkv::Status and grpc::Status. Both use gRPC's
// canonical codes, so a conversion keeps code and message unchanged.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace rkv::control {

inline grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
}

// A code outside the canonical range (a misbehaving peer) reads as UNKNOWN.
inline Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return Status::Ok();
  const int32_t raw = static_cast<int32_t>(s.error_code());
  const StatusCode code = IsValidStatusCode(raw) && raw != 0 ? static_cast<StatusCode>(raw) : StatusCode::kUnknown;
  return Status(code, s.error_message());
}

}  // namespace rkv::control
