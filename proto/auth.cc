#include "proto/auth.h"

#include <cstdint>
#include <iterator>

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

}  // namespace rkv::control
