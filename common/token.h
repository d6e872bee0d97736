// Client authentication tokens.
//
// The raw token never crosses the data plane: a client sends
// TokenDigest(token) = SHA-256("rkv-token-v1" || token) in its connect
// private data, and the server compares it in constant time with the digest
// of its own token.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rkv {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest Sha256(std::string_view data);
Sha256Digest TokenDigest(std::string_view token);

// Constant-time comparison.
bool DigestEqual(const uint8_t* a, const uint8_t* b, size_t n);

// Reads a token file: the whole file less trailing whitespace. Errors:
// NOT_FOUND / PERMISSION_DENIED from the file system, INVALID_ARGUMENT for
// an empty token or one over 4096 bytes.
StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace rkv
