// The server's check of a connection request: the connect private data a
// client sends (protocol::ConnectRequestData, common/protocol.h), bytes
// from anyone who can reach the listening port, checked before anything is
// allocated for the connection.
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <span>

#include "common/protocol.h"
#include "common/status.h"
#include "common/token.h"

namespace rkv::server {

// Parses the connect private data (which rdmacm may pad with zeros beyond
// sizeof(ConnectRequestData)) and checks it: magic, protocol and layout
// versions, and a token digest equal to `token_digest` (compared in
// constant time). INVALID_ARGUMENT for data too short or a bad magic,
// FAILED_PRECONDITION for another protocol or layout version,
// UNAUTHENTICATED for a wrong token; each message is the reason the server
// sends back in its refusal.
StatusOr<protocol::ConnectRequestData> ParseConnectRequest(std::span<const uint8_t> data,
                                                           const Sha256Digest& token_digest);

}  // namespace rkv::server
