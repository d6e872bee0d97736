#include "common/net_address.h"

#include <gtest/gtest.h>

namespace rkv {
namespace {

TEST(NetAddressTest, SplitsHostAndPort) {
  std::string host;
  uint16_t port = 0;
  ASSERT_TRUE(ParseHostPort("127.0.0.1:7700", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 7700);
  ASSERT_TRUE(ParseHostPort("db-1.example:0", &host, &port).ok());
  EXPECT_EQ(host, "db-1.example");
  EXPECT_EQ(port, 0);
  ASSERT_TRUE(ParseHostPort("[::1]:65535", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 65535);
}

TEST(NetAddressTest, RejectsWhatIsNotHostColonPort) {
  std::string host = "unchanged";
  uint16_t port = 9;
  for (const char* bad : {"", "host", ":7700", "host:", "host:65536", "host:-1", "host:12x", "[::1]", "[::1]7700",
                          "[::1:7700", "host: 7700"}) {
    const Status s = ParseHostPort(bad, &host, &port);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
    EXPECT_NE(s.message().find("address"), std::string::npos) << s;
  }
  EXPECT_EQ(host, "unchanged");
  EXPECT_EQ(port, 9);
}

}  // namespace
}  // namespace rkv
