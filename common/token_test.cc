#include "common/token.h"

#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace rkv {
namespace {

std::string Hex(const Sha256Digest& d) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

TEST(TokenTest, Sha256KnownAnswers) {
  EXPECT_EQ(Hex(Sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex(Sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(Sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hex(Sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(TokenTest, DigestDiffersFromPlainHashAndPerToken) {
  EXPECT_NE(TokenDigest("secret"), Sha256("secret"));
  EXPECT_NE(TokenDigest("secret"), TokenDigest("secret2"));
  const auto a = TokenDigest("x");
  const auto b = TokenDigest("x");
  EXPECT_TRUE(DigestEqual(a.data(), b.data(), a.size()));
  const auto c = TokenDigest("y");
  EXPECT_FALSE(DigestEqual(a.data(), c.data(), a.size()));
}

TEST(TokenTest, ReadTokenFile) {
  const std::string path = ::testing::TempDir() + "/rkv_token_test";
  {
    std::ofstream(path) << "s3cret\n";
  }
  auto t = ReadTokenFile(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "s3cret");
  {
    std::ofstream(path) << "  \n";
  }
  EXPECT_EQ(ReadTokenFile(path).status().code(), StatusCode::kInvalidArgument);
  std::remove(path.c_str());
  EXPECT_EQ(ReadTokenFile(path).status().code(), StatusCode::kNotFound);
}

TEST(TokenTest, ReadTokenFileTakesAtMostTheLimit) {
  const std::string path = ::testing::TempDir() + "/rkv_token_limit_test";
  {
    std::ofstream(path) << std::string(kMaxTokenFileBytes, 'x');
  }
  auto t = ReadTokenFile(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), kMaxTokenFileBytes);
  {
    std::ofstream(path) << std::string(kMaxTokenFileBytes + 1, 'x');
  }
  t = ReadTokenFile(path);
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("holds more than 4096 bytes"), std::string::npos) << t.status();
  std::remove(path.c_str());
}

TEST(TokenTest, AnEndlessTokenFileIsRefusedAfterTheLimit) {
  // Read whole, /dev/zero would never end (or end the process's memory).
  const auto t = ReadTokenFile("/dev/zero");
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("/dev/zero holds more than 4096 bytes"), std::string::npos) << t.status();
}

TEST(TokenTest, ADirectoryIsNotATokenFile) {
  const std::string dir = ::testing::TempDir();
  const auto t = ReadTokenFile(dir);
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("is a directory"), std::string::npos) << t.status();
  EXPECT_EQ(t.status().message().find("empty"), std::string::npos) << t.status();
}

}  // namespace
}  // namespace rkv
