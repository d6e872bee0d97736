// Network addresses as rkv's flags and messages spell them: "HOST:PORT" or
// "[IPv6]:PORT". Shared by the data plane, the control plane and the
// command-line tools; knows nothing of either plane.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace rkv {

// Splits "HOST:PORT" ("[v6]:PORT" too) into `*host` and `*port`.
// INVALID_ARGUMENT with the reason when `address` is not of that form or
// the port is not 0-65535; the outputs are then left unchanged.
Status ParseHostPort(const std::string& address, std::string* host, uint16_t* port);

}  // namespace rkv
