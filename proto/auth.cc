#include "proto/auth.h"

#include <cstdint>
#include <iterator>
#include <optional>

#include "common/token.h"

namespace rkv::control {

std::string TokenDigestHex(std::string_view token) {
  static constexpr char kHex[] = "0123456789abcdef";
  const Sha256Digest digest = TokenDigest(token);
  std::string out;
  out.reserve(2 * digest.size());
  for (uint8_t b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xF]);
  }
  return out;
}

void AttachToken(grpc::ClientContext* context, std::string_view token) {
  AttachTokenDigest(context, TokenDigestHex(token));
}

void AttachTokenDigest(grpc::ClientContext* context, const std::string& digest_hex) {
  context->AddMetadata(kTokenMetadataKey, digest_hex);
}

grpc::Status CheckToken(const grpc::ServerContextBase* context, std::string_view expected_digest_hex) {
  const grpc::Status refused(grpc::StatusCode::UNAUTHENTICATED, "missing or invalid token");
  const auto& metadata = context->client_metadata();
  auto [begin, end] = metadata.equal_range(kTokenMetadataKey);
  if (begin == end || std::next(begin) != end) return refused;
  const grpc::string_ref presented = begin->second;
  // The length is public (always 64 for a well-formed digest); only the
  // content is compared in constant time.
  if (presented.size() != expected_digest_hex.size() || expected_digest_hex.empty()) return refused;
  if (!DigestEqual(reinterpret_cast<const uint8_t*>(presented.data()),
                   reinterpret_cast<const uint8_t*>(expected_digest_hex.data()), presented.size())) {
    return refused;
  }
  return grpc::Status::OK;
}

grpc::Status CheckClientCredential(const grpc::ServerContextBase* context, const ClientCredentials& credentials,
                                   std::string* name) {
  name->clear();
  const grpc::Status refused(grpc::StatusCode::UNAUTHENTICATED, "missing or invalid token");
  const auto& metadata = context->client_metadata();
  auto [begin, end] = metadata.equal_range(kTokenMetadataKey);
  if (begin == end || std::next(begin) != end) return refused;
  const grpc::string_ref presented = begin->second;
  if (presented.size() != kTokenDigestHexChars) return refused;
  Sha256Digest digest{};
  // The presented digest is the caller's own, no secret: only the
  // comparison with the credentials' digests must be constant time. A
  // character that is no lowercase hex digit refuses the whole digest.
  bool valid = true;
  const auto nibble = [&valid](char c) -> uint8_t {
    const bool digit = c >= '0' && c <= '9';
    const bool letter = c >= 'a' && c <= 'f';
    valid &= digit || letter;
    return static_cast<uint8_t>(digit ? c - '0' : c - 'a' + 10);
  };
  for (size_t i = 0; i < digest.size(); ++i) {
    digest[i] = static_cast<uint8_t>((nibble(presented.data()[2 * i]) << 4) | nibble(presented.data()[2 * i + 1]));
  }
  if (!valid) return refused;
  const std::optional<ClientCredentials::Match> match = credentials.Find(digest.data());
  if (!match) return refused;
  *name = match->name;
  if (match->revoked) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "client credential " + match->name + " was revoked");
  }
  return grpc::Status::OK;
}

}  // namespace rkv::control
