#include "common/crc32c.h"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace rkv {
namespace {

TEST(Crc32cTest, StandardCheckValue) {
  // The check value of CRC-32C (RFC 3720 / the CRC catalogue).
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32cExtendPortable(0, "123456789", 9), 0xE3069283u);
}

TEST(Crc32cTest, Rfc3720Vectors) {
  std::vector<uint8_t> zeros(32, 0x00);
  std::vector<uint8_t> ones(32, 0xFF);
  std::vector<uint8_t> inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(inc.data(), inc.size()), 0x46DD794Eu);
}

TEST(Crc32cTest, ImplementationsAgreeAtEveryLengthAndAlignment) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> buf(4096 + 16);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  // A byte at a time, straight from the definition: the reference.
  const auto bitwise = [](const uint8_t* p, size_t n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
  };
  for (size_t align = 0; align < 8; ++align) {
    for (size_t len : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 1088, 4096}) {
      const uint8_t* p = buf.data() + align;
      const uint32_t want = bitwise(p, len);
      EXPECT_EQ(Crc32c(p, len), want) << "align " << align << " len " << len;
      EXPECT_EQ(Crc32cExtendPortable(0, p, len), want) << "align " << align << " len " << len;
      if (Crc32cHardwareAvailable()) {
        EXPECT_EQ(Crc32cExtendHardware(0, p, len), want) << "align " << align << " len " << len;
      }
    }
  }
  const std::string impl = Crc32cImplementation();
  EXPECT_TRUE(impl == "sse4.2" || impl == "slicing-by-8") << impl;
  if (!Crc32cHardwareAvailable()) {
    EXPECT_EQ(impl, "slicing-by-8");
  }
}

TEST(Crc32cTest, ExtendIsIncremental) {
  const std::string s = "the quick brown fox jumps over the lazy dog";
  const uint32_t whole = Crc32c(s.data(), s.size());
  const uint32_t part = Crc32cExtend(Crc32c(s.data(), 10), s.data() + 10, s.size() - 10);
  EXPECT_EQ(whole, part);
}

}  // namespace
}  // namespace rkv
