#include "client/location_cache.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

namespace rkv::client {

namespace {

// The largest power of two at most `n` (n >= 1).
uint32_t FloorPowerOfTwo(uint64_t n) {
  return static_cast<uint32_t>(std::bit_floor(std::min<uint64_t>(n, uint64_t{1} << 31)));
}

// Whether `s` may hold one more entry without passing 3/4 of its slots.
constexpr bool HasRoomFor(uint32_t entries, uint32_t slot_count) {
  return uint64_t{entries + 1} * 4 <= uint64_t{slot_count} * 3;
}

}  // namespace

LocationCache::LocationCache(uint64_t capacity_bytes)
    : capacity_bytes_(capacity_bytes),
      shard_capacity_(capacity_bytes / kShards),
      max_slots_(std::max(kMinSlots, FloorPowerOfTwo(std::max<uint64_t>(1, shard_capacity_ / sizeof(Slot))))),
      shards_(std::make_unique<Shard[]>(kShards)) {}

LocationCache::~LocationCache() {
  for (size_t i = 0; i < kShards; ++i) {
    Shard& s = shards_[i];
    MutexLock lock(s.mu);
    for (uint32_t j = 0; j < s.slot_count; ++j) {
      const Slot& slot = s.slots[j];
      if ((slot.state & kUsed) != 0 && slot.key_bytes > kInlineKeyBytes) delete[] slot.long_key;
    }
  }
}

uint64_t LocationCache::EntryBytes(size_t key_bytes) {
  // An upper estimate: a slot at the table's full load, and the key's
  // bytes (counted even when the slot holds them, so that a longer key
  // never costs less), with malloc's header (16 bytes) on a long key's own
  // allocation.
  return kSlotCharge + key_bytes + (key_bytes > kInlineKeyBytes ? 16 : 0);
}

uint64_t LocationCache::Mix(uint64_t key_hash, uint32_t server) {
  // MurmurHash3's 64-bit finalizer: a bijection, every input bit reaches
  // every output bit.
  uint64_t h = key_hash ^ (uint64_t{server} * 0x9E3779B97F4A7C15ULL);
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDULL;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ULL;
  h ^= h >> 33;
  return h;
}

uint32_t LocationCache::ServerTag(std::string_view identity) {
  MutexLock lock(tags_mu_);
  const auto it = tags_.find(identity);
  if (it != tags_.end()) return it->second;
  const auto tag = static_cast<uint32_t>(tags_.size());
  tags_.emplace(std::string(identity), tag);
  return tag;
}

int64_t LocationCache::Probe(const Shard& s, uint32_t hash, uint32_t server, std::string_view key) {
  if (s.slot_count == 0) return -1;
  const uint32_t mask = s.slot_count - 1;
  // Terminates: at least a quarter of the slots are free.
  for (uint32_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& slot = s.slots[i];
    if ((slot.state & kUsed) == 0) return -1;
    // (An empty key's data() may be null, which memcmp must not get.)
    if (slot.hash == hash && slot.server == server && slot.key_bytes == key.size() &&
        (key.empty() || std::memcmp(KeyOf(slot), key.data(), key.size()) == 0)) {
      return i;
    }
  }
}

std::optional<CachedLocation> LocationCache::Find(uint32_t server, std::string_view key, uint64_t key_hash,
                                                  uint64_t epoch) {
  const uint64_t mixed = Mix(key_hash, server);
  Shard& s = ShardOf(mixed);
  MutexLock lock(s.mu);
  const int64_t i = Probe(s, static_cast<uint32_t>(mixed), server, key);
  if (i >= 0) {
    Slot& slot = s.slots[i];
    if (slot.epoch == epoch) {
      slot.state |= kReferenced;
      return CachedLocation{slot.epoch, slot.heap_offset, slot.block_bytes, slot.version};
    }
    // A location in another incarnation's heap means nothing.
    RemoveAt(s, static_cast<uint32_t>(i));
  }
  ++s.misses;
  return std::nullopt;
}

void LocationCache::Insert(uint32_t server, std::string_view key, uint64_t key_hash,
                           const CachedLocation& location) {
  const uint64_t cost = EntryBytes(key.size());
  if (cost > shard_capacity_) return;
  if (location.bytes > std::numeric_limits<uint32_t>::max()) [[unlikely]] {
    Erase(server, key, key_hash);
    return;
  }
  const uint64_t mixed = Mix(key_hash, server);
  const auto hash = static_cast<uint32_t>(mixed);
  Shard& s = ShardOf(mixed);
  MutexLock lock(s.mu);
  if (const int64_t i = Probe(s, hash, server, key); i >= 0) {
    Slot& slot = s.slots[i];
    slot.epoch = location.epoch;
    slot.heap_offset = location.heap_offset;
    slot.block_bytes = static_cast<uint32_t>(location.bytes);
    slot.version = location.version;
    return;
  }
  while (s.bytes + cost > shard_capacity_) EvictOne(s);
  if (!HasRoomFor(s.entries, s.slot_count)) {
    if (s.slot_count < max_slots_) {
      Resize(s, s.slot_count == 0 ? std::min<uint32_t>(16, max_slots_) : s.slot_count * 2);
    } else {
      EvictOne(s);
    }
  }
  // The key's bytes first: nothing is changed if the allocation throws.
  char* long_key = nullptr;
  if (key.size() > kInlineKeyBytes) {
    long_key = new char[key.size()];
    std::memcpy(long_key, key.data(), key.size());
  }
  const uint32_t mask = s.slot_count - 1;
  uint32_t i = hash & mask;
  while ((s.slots[i].state & kUsed) != 0) i = (i + 1) & mask;
  Slot& slot = s.slots[i];
  slot.hash = hash;
  slot.server = server;
  slot.key_bytes = static_cast<uint16_t>(key.size());
  slot.state = kUsed;
  slot.block_bytes = static_cast<uint32_t>(location.bytes);
  slot.epoch = location.epoch;
  slot.heap_offset = location.heap_offset;
  slot.version = location.version;
  if (long_key != nullptr) {
    slot.long_key = long_key;
  } else if (!key.empty()) {
    std::memcpy(slot.inline_key, key.data(), key.size());
  }
  ++s.entries;
  s.bytes += cost;
}

void LocationCache::Erase(uint32_t server, std::string_view key, uint64_t key_hash) {
  const uint64_t mixed = Mix(key_hash, server);
  Shard& s = ShardOf(mixed);
  MutexLock lock(s.mu);
  if (const int64_t i = Probe(s, static_cast<uint32_t>(mixed), server, key); i >= 0) {
    RemoveAt(s, static_cast<uint32_t>(i));
  }
}

void LocationCache::RemoveAt(Shard& s, uint32_t i) {
  Slot* const slots = s.slots.get();
  s.bytes -= EntryBytes(slots[i].key_bytes);
  --s.entries;
  if (slots[i].key_bytes > kInlineKeyBytes) delete[] slots[i].long_key;
  // Backward shift (Knuth's Algorithm R): each later entry of the run
  // whose home is not cyclically in (i, j] may move into the gap, which
  // then moves to where it was; the run's end closes it.
  const uint32_t mask = s.slot_count - 1;
  for (uint32_t j = (i + 1) & mask; (slots[j].state & kUsed) != 0; j = (j + 1) & mask) {
    const uint32_t home = slots[j].hash & mask;
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    slots[i] = slots[j];
    i = j;
  }
  slots[i].state = 0;
}

void LocationCache::EvictOne(Shard& s) {
  // Terminates: the shard holds an entry, and one sweep clears every
  // reference bit, so the second sweep at the latest finds a clear one.
  for (;;) {
    if (s.hand >= s.slot_count) s.hand = 0;
    Slot& slot = s.slots[s.hand];
    const uint32_t pos = s.hand++;
    if ((slot.state & kUsed) == 0) continue;
    if ((slot.state & kReferenced) != 0) {
      slot.state &= static_cast<uint8_t>(~kReferenced);
      continue;
    }
    // An entry that the shift moves into `pos` waits for the next sweep.
    RemoveAt(s, pos);
    ++s.evictions;
    return;
  }
}

void LocationCache::Resize(Shard& s, uint32_t slot_count) {
  // Value-initialized: every slot free.
  auto slots = std::make_unique<Slot[]>(slot_count);
  const uint32_t mask = slot_count - 1;
  for (uint32_t j = 0; j < s.slot_count; ++j) {
    const Slot& slot = s.slots[j];
    if ((slot.state & kUsed) == 0) continue;
    uint32_t i = slot.hash & mask;
    while ((slots[i].state & kUsed) != 0) i = (i + 1) & mask;
    slots[i] = slot;  // the long key's ownership moves with it
  }
  s.slots = std::move(slots);
  s.slot_count = slot_count;
  s.hand = 0;
}

LocationCacheCounters LocationCache::counters() const {
  LocationCacheCounters c;
  for (size_t i = 0; i < kShards; ++i) {
    Shard& s = shards_[i];
    MutexLock lock(s.mu);
    c.entries += s.entries;
    c.bytes += s.bytes;
    c.misses += s.misses;
    c.evictions += s.evictions;
  }
  c.capacity_bytes = capacity_bytes_;
  c.hits = hits_.load(std::memory_order_relaxed);
  c.fallbacks = fallbacks_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace rkv::client
