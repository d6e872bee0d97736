// Client authentication tokens.
//
// The raw token never crosses the data plane: a client sends
// TokenDigest(token) = SHA-256("rkv-token-v1" || token) in its connect
// private data, and the server compares it in constant time with the digest
// of its own token.
#pragma once

#include <array>
#include <cstddef>
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

// The most bytes a token file may hold, trailing whitespace included.
inline constexpr size_t kMaxTokenFileBytes = 4096;

// The first `limit` bytes of the file at `path` (all of it if shorter),
// read without looking further: the path may name /dev/zero or a pipe.
// `what` names the file in errors ("token file"). Errors: NOT_FOUND /
// PERMISSION_DENIED (or INTERNAL, with the errno text) from the file
// system; INVALID_ARGUMENT for a directory.
StatusOr<std::string> ReadFileAtMost(const std::string& path, size_t limit, std::string_view what);

// Reads a token file: the whole file less trailing whitespace. Reads at
// most kMaxTokenFileBytes + 1 bytes, whatever the path names (/dev/zero, a
// pipe). Errors: NOT_FOUND / PERMISSION_DENIED (or INTERNAL, with the
// errno text) from the file system; INVALID_ARGUMENT for a directory, a
// file over kMaxTokenFileBytes, or one that holds only whitespace.
StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace rkv
