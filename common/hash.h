// Key hashing: which shard owns a key, and which two buckets of a table may
// hold it.
//
// Two hashes, both XXH3-64:
//   - the shard hash, seed 0, is the same in every process of a cluster, so
//     any client routes a key to the same shard;
//   - the table hash uses the table's own seed (TableHeader::hash_seed): it
//     picks the two candidate buckets and the slot fingerprint.
// (DESIGN.md derives both from one hash; with shard = h mod shards and
// bucket = h mod buckets on power-of-two counts, a server would only ever
// use 1/shards of its buckets. Separate seeds keep them independent.)
#pragma once

#include <cstdint>
#include <string_view>

#include "common/layout.h"

namespace rkv {

uint64_t ShardHash(std::string_view key);
uint64_t TableHash(std::string_view key, uint64_t table_seed);

struct BucketChoice {
  uint64_t b1;
  uint64_t b2;  // != b1 whenever the table has more than one bucket
  uint16_t fingerprint;
};

// The two candidate buckets of a key with table hash `h` in a table of
// 2^bucket_count_log2 buckets.
constexpr BucketChoice ChooseBuckets(uint64_t h, uint32_t bucket_count_log2) {
  const uint64_t mask = (uint64_t{1} << bucket_count_log2) - 1;
  const uint64_t b1 = h & mask;
  // Mix the high half so b2 is independent of b1's bits.
  uint64_t b2 = ((h >> 32) * 0x9E3779B97F4A7C15ULL >> 17) & mask;
  if (b2 == b1) b2 = b1 ^ 1 ^ (mask == 0 ? 1 : 0);
  b2 &= mask;
  return BucketChoice{b1, b2, layout::FingerprintOf(h)};
}

inline uint32_t ShardOf(std::string_view key, uint32_t shard_count) {
  return static_cast<uint32_t>(ShardHash(key) % shard_count);
}

}  // namespace rkv
