#include "client/location_cache.h"

#include <utility>

namespace rkv::client {

LocationCache::LocationCache(uint64_t capacity_bytes)
    : capacity_bytes_(capacity_bytes),
      shard_capacity_(capacity_bytes / kShards),
      shards_(std::make_unique<Shard[]>(kShards)) {}

uint64_t LocationCache::EntryBytes(size_t key_bytes) {
  // An upper estimate, not malloc's exact bill: the hash node (next
  // pointer, cached hash, the pair) and one bucket pointer, the key's own
  // allocation with its NUL (counted even when the string stores it
  // inline), malloc's header on each of the two allocations, the CLOCK slot
  // and its free-list entry.
  constexpr uint64_t kNode = 2 * sizeof(void*) + sizeof(std::pair<const Key, uint32_t>);
  constexpr uint64_t kOverhead = kNode + sizeof(void*) + 1 + 2 * 16 + sizeof(RingSlot) + sizeof(uint32_t);
  return key_bytes + kOverhead;
}

uint32_t LocationCache::ServerTag(std::string_view identity) {
  MutexLock lock(tags_mu_);
  const auto it = tags_.find(identity);
  if (it != tags_.end()) return it->second;
  const auto tag = static_cast<uint32_t>(tags_.size());
  tags_.emplace(std::string(identity), tag);
  return tag;
}

std::optional<CachedLocation> LocationCache::Find(uint32_t server, std::string_view key, uint64_t epoch) {
  const KeyRef ref{server, key};
  Shard& s = ShardOf(ref);
  {
    MutexLock lock(s.mu);
    const auto it = s.index.find(ref);
    if (it != s.index.end()) {
      RingSlot& slot = s.ring[it->second];
      if (slot.location.epoch == epoch) {
        slot.referenced = true;
        return slot.location;
      }
      // A location in another incarnation's heap means nothing.
      Remove(s, it->second);
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  return std::nullopt;
}

void LocationCache::Insert(uint32_t server, std::string_view key, const CachedLocation& location) {
  const uint64_t cost = EntryBytes(key.size());
  if (cost > shard_capacity_) return;
  const KeyRef ref{server, key};
  Shard& s = ShardOf(ref);
  MutexLock lock(s.mu);
  if (const auto it = s.index.find(ref); it != s.index.end()) {
    s.ring[it->second].location = location;
    return;
  }
  while (s.bytes + cost > shard_capacity_) EvictOne(s);
  uint32_t pos;
  if (!s.free.empty()) {
    pos = s.free.back();
    s.free.pop_back();
  } else {
    pos = static_cast<uint32_t>(s.ring.size());
    s.ring.emplace_back();
  }
  const auto [it, inserted] = s.index.emplace(Key{server, std::string(key)}, pos);
  s.ring[pos] = RingSlot{&it->first, location, /*referenced=*/false};
  s.bytes += cost;
}

void LocationCache::Erase(uint32_t server, std::string_view key) {
  const KeyRef ref{server, key};
  Shard& s = ShardOf(ref);
  MutexLock lock(s.mu);
  const auto it = s.index.find(ref);
  if (it != s.index.end()) Remove(s, it->second);
}

void LocationCache::Remove(Shard& s, uint32_t pos) {
  RingSlot& slot = s.ring[pos];
  s.bytes -= EntryBytes(slot.key->key.size());
  s.index.erase(s.index.find(KeyRef{slot.key->server, slot.key->key}));
  slot = RingSlot{};
  s.free.push_back(pos);
}

void LocationCache::EvictOne(Shard& s) {
  // Terminates: the shard holds an entry, and one sweep clears every
  // reference bit, so the second sweep at the latest finds a clear one.
  for (;;) {
    if (s.hand >= s.ring.size()) s.hand = 0;
    RingSlot& slot = s.ring[s.hand];
    const uint32_t pos = static_cast<uint32_t>(s.hand++);
    if (slot.key == nullptr) continue;
    if (slot.referenced) {
      slot.referenced = false;
      continue;
    }
    Remove(s, pos);
    evictions_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
}

LocationCacheCounters LocationCache::counters() const {
  LocationCacheCounters c;
  for (size_t i = 0; i < kShards; ++i) {
    Shard& s = shards_[i];
    MutexLock lock(s.mu);
    c.entries += s.index.size();
    c.bytes += s.bytes;
  }
  c.capacity_bytes = capacity_bytes_;
  c.hits = hits_.load(std::memory_order_relaxed);
  c.misses = misses_.load(std::memory_order_relaxed);
  c.fallbacks = fallbacks_.load(std::memory_order_relaxed);
  c.evictions = evictions_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace rkv::client
