#include "common/hash.h"

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace rkv {
namespace {

TEST(HashTest, DeterministicAndSeeded) {
  EXPECT_EQ(TableHash("key", 1), TableHash("key", 1));
  EXPECT_NE(TableHash("key", 1), TableHash("key", 2));
  EXPECT_EQ(ShardHash("key"), TableHash("key", 0));
  // Binary keys hash all their bytes.
  const std::string a("a\0b", 3);
  const std::string b("a\0c", 3);
  EXPECT_NE(TableHash(a, 5), TableHash(b, 5));
}

TEST(HashTest, TwoDistinctBucketsInRange) {
  for (uint32_t log2 = 1; log2 <= 20; ++log2) {
    for (int i = 0; i < 1000; ++i) {
      const BucketChoice c = ChooseBuckets(TableHash(std::to_string(i), 99), log2);
      ASSERT_LT(c.b1, uint64_t{1} << log2);
      ASSERT_LT(c.b2, uint64_t{1} << log2);
      ASSERT_NE(c.b1, c.b2);
    }
  }
  const BucketChoice single = ChooseBuckets(12345, 0);
  EXPECT_EQ(single.b1, 0u);
  EXPECT_EQ(single.b2, 0u);
}

TEST(HashTest, BucketsSpreadEvenly) {
  constexpr uint32_t kLog2 = 10;
  std::vector<int> hits(1 << kLog2, 0);
  constexpr int kKeys = 200000;
  for (int i = 0; i < kKeys; ++i) {
    const BucketChoice c = ChooseBuckets(TableHash("k" + std::to_string(i), 42), kLog2);
    ++hits[c.b1];
    ++hits[c.b2];
  }
  const double mean = 2.0 * kKeys / hits.size();
  for (int h : hits) {
    EXPECT_GT(h, mean * 0.75);
    EXPECT_LT(h, mean * 1.25);
  }
}

TEST(HashTest, ShardsUseEveryBucket) {
  // Keys of one shard must still spread over the whole table.
  std::set<uint64_t> used;
  for (int i = 0; used.size() < 64 && i < 100000; ++i) {
    const std::string key = "k" + std::to_string(i);
    if (ShardOf(key, 16) != 3) continue;
    used.insert(ChooseBuckets(TableHash(key, 7), 6).b1);
  }
  EXPECT_EQ(used.size(), 64u);
}

}  // namespace
}  // namespace rkv
