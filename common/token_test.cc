#include "common/token.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <span>
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

std::string HexOf(const Sha256Digest& d, size_t n) { return Hex(d).substr(0, 2 * n); }

std::span<const uint8_t> Bytes(const std::string& s) {
  return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// RFC 4231's test cases 1 to 7 (case 5 compares the 128-bit truncation, as
// the RFC gives only that).
TEST(TokenTest, HmacSha256Rfc4231Vectors) {
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4.push_back(static_cast<char>(i));
  const std::string key_long(131, '\xaa');
  struct Case {
    std::string key, data, mac;
    size_t bytes;
  };
  const Case cases[] = {
      {std::string(20, '\x0b'), "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", 32},
      {"Jefe", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", 32},
      {std::string(20, '\xaa'), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe", 32},
      {key4, std::string(50, '\xcd'), "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b", 32},
      {std::string(20, '\x0c'), "Test With Truncation", "a3b6167473100ee06e0c796c2955552b", 16},
      {key_long, "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", 32},
      {key_long,
       "This is a test using a larger than block-size key and a larger than block-size data. The key needs to "
       "be hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2", 32},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    const Case& c = cases[i];
    EXPECT_EQ(HexOf(HmacSha256(Bytes(c.key), Bytes(c.data)), c.bytes), c.mac) << "RFC 4231 test case " << i + 1;
  }
}

// A key of exactly one block is used as it is; one byte more is hashed.
TEST(TokenTest, HmacSha256KeyAtTheBlockSize) {
  const std::string block(64, 'k');
  EXPECT_NE(HmacSha256(Bytes(block), Bytes("m")), HmacSha256(Bytes(block + "k"), Bytes("m")));
  const Sha256Digest hashed = Sha256(block + "k");
  EXPECT_EQ(HmacSha256(Bytes(block + "k"), Bytes("m")),
            HmacSha256(std::span<const uint8_t>(hashed.data(), hashed.size()), Bytes("m")));
  EXPECT_EQ(HmacSha256({}, {}), HmacSha256(Bytes(std::string(64, '\0')), {}));
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
