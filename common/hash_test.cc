#include "common/hash.h"

#include <algorithm>
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

TEST(HashTest, NeighborhoodIsInRangeAndStartsAtHome) {
  for (uint32_t log2 = 0; log2 <= 20; ++log2) {
    const uint64_t buckets = uint64_t{1} << log2;
    for (int i = 0; i < 1000; ++i) {
      const uint64_t h = TableHash(std::to_string(i), 99);
      const Neighborhood nb = NeighborhoodOf(h, log2);
      ASSERT_EQ(nb.count, std::min<uint64_t>(buckets, layout::kNeighborhoodBuckets));
      ASSERT_LE(nb.first + nb.count, buckets);
      ASSERT_EQ(nb.fingerprint, layout::FingerprintOf(h));
      // The home bucket is the first one, or inside the last neighbourhood.
      const uint64_t home = h & (buckets - 1);
      ASSERT_TRUE(nb.first == home || nb.first == buckets - nb.count) << log2 << " " << i;
      ASSERT_TRUE(nb.Contains(home));
      ASSERT_FALSE(nb.Contains(nb.first + nb.count));
      if (nb.first > 0) {
        ASSERT_FALSE(nb.Contains(nb.first - 1));
      }
    }
  }
  // One READ of a neighbourhood: 512 bytes.
  EXPECT_EQ(layout::kNeighborhoodBuckets * sizeof(layout::Bucket), 512u);
}

TEST(HashTest, HomesSpreadEvenly) {
  constexpr uint32_t kLog2 = 10;
  std::vector<int> hits(1 << kLog2, 0);
  constexpr int kKeys = 200000;
  for (int i = 0; i < kKeys; ++i) {
    ++hits[TableHash("k" + std::to_string(i), 42) & ((1 << kLog2) - 1)];
  }
  const double mean = static_cast<double>(kKeys) / hits.size();
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
    used.insert(TableHash(key, 7) & 63);
  }
  EXPECT_EQ(used.size(), 64u);
}

}  // namespace
}  // namespace rkv
