// The connecting side of protocol version 6's handshake (docs/design.md
// §7.2), over any transport: a hello, the server's challenge in its
// refusal, then the proof for that challenge: the hello within the
// timeout, the proof within what is left of it or as long as the hello
// took, whichever is longer (so at most twice the timeout in all).
// Used by a client's connections and by a primary's replication
// connections alike.
//
// Thread safety: pure functions of their arguments (the transport is
// thread-safe).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/connect_proof.h"
#include "common/protocol.h"
#include "common/status.h"
#include "common/transport/transport.h"

namespace rkv::protocol {

// Connects to `address` as the client `params` names: sends a hello,
// reads the challenge from its refusal, and connects again with the proof
// (the timeouts above); returns the accepted connection.
// Errors: the transport's (UNAVAILABLE, DEADLINE_EXCEEDED); the refusal of
// the proof as Transport::Connect reports it (PERMISSION_DENIED "invalid
// token", "client credential NAME was revoked"; UNAVAILABLE or
// RESOURCE_EXHAUSTED when the server said so); a refusal of the hello that
// carries no challenge (a server of another version, one that is full)
// likewise, with the server's reason; UNAVAILABLE when a server accepted a
// hello (no server of this version does).
StatusOr<std::unique_ptr<transport::Connection>> ConnectAsClient(transport::Transport& transport,
                                                                 const std::string& address,
                                                                 const ClientConnectParams& params,
                                                                 std::chrono::milliseconds timeout);

// The same for a replication connection from the server `params` names.
StatusOr<std::unique_ptr<transport::Connection>> ConnectAsPeer(transport::Transport& transport,
                                                               const std::string& address,
                                                               const PeerConnectParams& params,
                                                               std::chrono::milliseconds timeout);

// The first step alone: sends a hello (`hello`: a request with a zero
// nonce and MAC) and returns the challenge of its refusal; the errors of
// ConnectAsClient for a refusal without one. For tests that send proofs of
// their own making.
StatusOr<Nonce> RequestChallenge(transport::Transport& transport, const std::string& address,
                                 std::span<const uint8_t> hello, std::chrono::milliseconds timeout);

}  // namespace rkv::protocol
