// Control-plane authentication: the token digest in gRPC metadata.
//
// Every RPC of the Coordinator and Admin services carries the metadata
// entry kTokenMetadataKey = lowercase hex of TokenDigest(token) (64
// characters). The raw token never travels. Servers check it first in
// every handler with CheckToken.
//
// Thread safety: all functions are pure or touch only their arguments.
#pragma once

#include <string>
#include <string_view>

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include "common/client_credentials.h"

namespace rkv::control {

inline constexpr char kTokenMetadataKey[] = "rkv-token-digest";
inline constexpr size_t kTokenDigestHexChars = 64;

// Lowercase hex of TokenDigest(token).
std::string TokenDigestHex(std::string_view token);

// Adds the digest of `token` to `context`'s metadata. Call once per context,
// before the RPC starts.
void AttachToken(grpc::ClientContext* context, std::string_view token);
// Same, with a digest already computed by TokenDigestHex.
void AttachTokenDigest(grpc::ClientContext* context, const std::string& digest_hex);

// OK when `context` carries exactly one kTokenMetadataKey entry equal
// (constant time) to `expected_digest_hex`; UNAUTHENTICATED "missing or
// invalid token" otherwise. Works for sync and callback server contexts.
grpc::Status CheckToken(const grpc::ServerContextBase* context, std::string_view expected_digest_hex);

// The client credential `context` presents: OK with `*name` set to its
// name when the one kTokenMetadataKey entry is the digest of a credential
// of `credentials` (compared as ClientCredentials::Find does: each in
// constant time). UNAUTHENTICATED otherwise: "missing or invalid token",
// or "client credential NAME was revoked" (then `*name` is NAME, for the
// caller's log). `*name` is cleared first.
grpc::Status CheckClientCredential(const grpc::ServerContextBase* context, const ClientCredentials& credentials,
                                   std::string* name);

}  // namespace rkv::control
