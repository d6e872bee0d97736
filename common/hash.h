// Key hashing: which shard owns a key, and which buckets of a table may hold
// it.
//
// Two hashes, both XXH3-64:
//   - the shard hash, seed 0, is the same in every process of a cluster, so
//     any client routes a key to the same shard;
//   - the table hash uses the table's own seed (TableHeader::hash_seed): it
//     picks the key's neighbourhood and the slot fingerprint.
// (Deriving both from one hash would not do: with shard = h mod shards and
// bucket = h mod buckets on power-of-two counts, a server would only ever
// use 1/shards of its buckets. Separate seeds keep them independent.)
#pragma once

#include <cstdint>
#include <string_view>

#include "common/layout.h"

namespace rkv {

uint64_t ShardHash(std::string_view key);
uint64_t TableHash(std::string_view key, uint64_t table_seed);

// The buckets that may hold a key: layout::kNeighborhoodBuckets consecutive
// buckets (fewer only in a smaller table) starting at the key's home bucket,
// or ending at the last bucket when the home bucket is too near the end. A
// client fetches all of them with ONE READ (layout.h, "Neighbourhood").
struct Neighborhood {
  uint64_t first;  // first bucket
  uint32_t count;  // buckets
  uint16_t fingerprint;

  bool Contains(uint64_t b) const { return b >= first && b - first < count; }
};

// The neighbourhood of a key with table hash `h` in a table of
// 2^bucket_count_log2 buckets.
constexpr Neighborhood NeighborhoodOf(uint64_t h, uint32_t bucket_count_log2) {
  const uint64_t buckets = uint64_t{1} << bucket_count_log2;
  const uint64_t count = buckets < layout::kNeighborhoodBuckets ? buckets : layout::kNeighborhoodBuckets;
  const uint64_t home = h & (buckets - 1);
  const uint64_t first = home < buckets - count ? home : buckets - count;
  return Neighborhood{first, static_cast<uint32_t>(count), layout::FingerprintOf(h)};
}

// The shard of a key whose ShardHash is `shard_hash`: a caller that has
// the hash already (the client keeps it for its location cache) need not
// hash the key again.
inline uint32_t ShardOfHash(uint64_t shard_hash, uint32_t shard_count) {
  return static_cast<uint32_t>(shard_hash % shard_count);
}

inline uint32_t ShardOf(std::string_view key, uint32_t shard_count) {
  return ShardOfHash(ShardHash(key), shard_count);
}

}  // namespace rkv
