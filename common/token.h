// Client authentication tokens.
//
// The raw token never crosses the data plane, nor does its digest: the
// server stores TokenDigest(token) = SHA-256("rkv-token-v1" || token) per
// credential, and a client proves that it holds it with an HMAC keyed by
// it over a challenge the server issued (common/connect_proof.h,
// docs/design.md §7.2).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rkv {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest Sha256(std::string_view data);
Sha256Digest TokenDigest(std::string_view token);

// HMAC-SHA256 (RFC 2104) of `message` under `key` (any length: a key
// longer than SHA-256's 64-byte block is hashed first, as the RFC says).
// The connect proof's MAC (common/connect_proof.h) is made with it, keyed
// by a TokenDigest.
Sha256Digest HmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> message);

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
