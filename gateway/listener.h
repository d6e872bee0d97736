// Listening sockets of rkv-gateway: "HOST:PORT" parsed, resolved, bound.
#pragma once

#include <string>

#include "rkv/status.h"

namespace rkv::gateway {

// A non-blocking, close-on-exec TCP socket listening on `host_port`
// ("HOST:PORT", "[v6]:PORT"; port 0 picks a free one), with SO_REUSEADDR
// and a backlog of `backlog`. Errors name the address: INVALID_ARGUMENT for
// a malformed one, NOT_FOUND when HOST does not resolve, UNAVAILABLE with
// the system's reason (e.g. "Address already in use") when it cannot be
// bound. The caller owns the descriptor.
rkv::StatusOr<int> Listen(const std::string& host_port, int backlog = 1024);

// "HOST:PORT" of a bound socket (the port a port-0 listener got), or an
// empty string when the system cannot say.
std::string BoundAddress(int fd);
// The port of a bound socket, or 0.
int BoundPort(int fd);

}  // namespace rkv::gateway
