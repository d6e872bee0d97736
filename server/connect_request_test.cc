#include "server/connect_request.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "common/layout.h"

namespace rkv::server {
namespace {

protocol::ConnectRequestData Valid(std::string_view token) {
  protocol::ConnectRequestData c{};
  c.magic = protocol::kConnectMagic;
  c.protocol_version = protocol::kProtocolVersion;
  c.layout_version = layout::kLayoutVersion;
  c.client_id = 77;
  const Sha256Digest d = TokenDigest(token);
  std::memcpy(c.token_digest, d.data(), d.size());
  return c;
}

std::vector<uint8_t> Bytes(const protocol::ConnectRequestData& c, size_t size = sizeof(protocol::ConnectRequestData)) {
  std::vector<uint8_t> out(size, 0);
  std::memcpy(out.data(), &c, std::min(size, sizeof(c)));
  return out;
}

TEST(ConnectRequestTest, AcceptsTheRightTokenAndPadding) {
  const Sha256Digest digest = TokenDigest("secret");
  auto r = ParseConnectRequest(Bytes(Valid("secret")), digest);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->client_id, 77u);
  EXPECT_TRUE(ParseConnectRequest(Bytes(Valid("secret"), protocol::kMaxConnectPrivateData), digest).ok());
}

TEST(ConnectRequestTest, RefusesEachMalformation) {
  const Sha256Digest digest = TokenDigest("secret");
  auto short_data = ParseConnectRequest(Bytes(Valid("secret"), 20), digest);
  EXPECT_EQ(short_data.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(short_data.status().message().find("20 bytes"), std::string::npos);

  protocol::ConnectRequestData c = Valid("secret");
  c.magic ^= 1;
  EXPECT_EQ(ParseConnectRequest(Bytes(c), digest).status().code(), StatusCode::kInvalidArgument);

  c = Valid("secret");
  c.layout_version += 1;
  EXPECT_EQ(ParseConnectRequest(Bytes(c), digest).status().code(), StatusCode::kFailedPrecondition);

  auto wrong = ParseConnectRequest(Bytes(Valid("other")), digest);
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong.status().message(), "invalid token");
}

}  // namespace
}  // namespace rkv::server
