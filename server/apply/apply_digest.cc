// The Applier's read-only passes over its table for replica verification
// (Admin.ShardChecksums and Admin.ListShard): see "Verifying replicas" in
// server/apply/apply.h.
#include <atomic>
#include <cstring>
#include <unordered_map>

// The state on the stack: no allocation per record.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "common/hash.h"
#include "common/layout.h"
#include "server/apply/apply.h"
#include "server/apply/for_each_record.h"

namespace rkv::server {

uint64_t Applier::RecordChecksum(std::string_view key, uint64_t version, std::string_view value,
                                 int64_t expires_at_ms) {
  XXH64_state_t state;
  XXH64_reset(&state, 0);
  XXH64_update(&state, key.data(), key.size());
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(version >> (8 * i));
  XXH64_update(&state, le, sizeof(le));
  XXH64_update(&state, value.data(), value.size());
  // A record with an expiry adds it, so replicas that disagree on one
  // differ; one without hashes as before expiry existed.
  if (expires_at_ms != 0) {
    for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(static_cast<uint64_t>(expires_at_ms) >> (8 * i));
    XXH64_update(&state, le, sizeof(le));
  }
  return XXH64_digest(&state);
}

std::vector<Applier::ShardDigest> Applier::DigestShards(uint32_t shard_count, std::span<const uint32_t> shards) const {
  std::vector<ShardDigest> out(shards.size());
  // shard -> the first entry of `out` for it; repeats are copied at the end.
  std::unordered_map<uint32_t, size_t> wanted;
  for (size_t i = 0; i < shards.size(); ++i) {
    out[i].shard = shards[i];
    wanted.emplace(shards[i], i);
  }
  if (shard_count == 0 || wanted.empty()) return out;
  {
    MutexLock lock(table_mu_);
    ForEachRecord(*table_, [&](const Table::Record& r) {
      const auto it = wanted.find(ShardOf(r.key, shard_count));
      if (it == wanted.end()) return;
      ShardDigest& d = out[it->second];
      ++d.keys;
      d.checksum += RecordChecksum(r.key, r.version, r.value, r.expires_at_ms);  // unsigned: wraps mod 2^64
      if (r.version > d.max_version) d.max_version = r.version;
    });
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    const size_t first = wanted.at(shards[i]);
    if (first != i) out[i] = out[first];
  }
  return out;
}

Applier::ShardListing Applier::ListShard(uint32_t shard_count, uint32_t shard) const {
  ShardListing out;
  if (shard_count == 0 || shard >= shard_count) return out;
  MutexLock lock(table_mu_);
  ForEachRecord(*table_, [&](const Table::Record& r) {
    if (ShardOf(r.key, shard_count) == shard) out.records.emplace_back(std::string(r.key), r.version);
  });
  out.snapshot_version = store_->version_high_water();
  return out;
}

}  // namespace rkv::server
