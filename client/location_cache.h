// LocationCache: where a key's block was on a server when a GET last found
// it, so that the next GET of the key can READ that block alone (one READ
// instead of a neighbourhood READ and a block READ). A remembered location
// is a hint, never an answer: the GET accepts the block only if it proves
// current (valid, not superseded checksum, same key, same version; see
// docs/design.md §4.4) and otherwise takes the ordinary path.
//
// Entries are keyed by (server, key): `server` is a small number the cache
// hands out per server identity (ServerTag), so that two servers never
// share an entry. Each entry carries the epoch of the server incarnation
// whose heap it names; a lookup under another epoch drops it.
//
// Every call names the key with its hash as well, `key_hash`, which must be
// ShardHash(key) (common/hash.h): the hash the client routes the key by,
// computed once per key and call by the client, not again here. The hash
// only places an entry; a lookup compares the server and the whole key, so
// two keys of one hash never see each other's entry (they share a probe
// sequence, nothing more).
//
// Layout: kShards shards, each a flat open-addressing table (linear
// probing, deletion by backward shift, no tombstones) of 64-byte slots,
// one cache line each, that hold an entry whole: hash, server, location,
// and the key itself when it has at most kInlineKeyBytes bytes (a longer
// key has an allocation of its own). A lookup of a short key reads one
// line for each slot it probes and nothing else; at most 3/4 of the slots
// are used, and a shard's table doubles, up to its capacity, as it fills.
//
// Bounded: capacity_bytes covers every entry's EntryBytes (kSlotCharge, a
// slot at the table's full load, plus the key's bytes and a long key's
// allocation).
// Each shard has capacity_bytes / kShards; its slot array never passes
// that (nor, for a tiny capacity, kMinSlots slots). A full shard evicts by
// CLOCK (second chance) over its slots: a lookup sets an entry's reference
// bit, the hand clears set bits and evicts the first entry it finds clear.
//
// Thread safety: thread-safe; every shard has its own mutex, the hit and
// fallback counters are relaxed atomics (statistics, ordered with
// nothing).
//
// Invariants (per shard, under its mutex): entries == the used slots;
// bytes == sum of EntryBytes of the used slots' keys; bytes <= shard
// capacity; entries <= 3/4 of slot_count (so a probe always meets an empty
// slot); every used slot lies on the probe path from its home slot with no
// empty slot between (what backward shift keeps).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace rkv::client {

// One remembered location: the block of `version` of the key, as the slot
// word named it.
struct CachedLocation {
  uint64_t epoch = 0;        // server incarnation whose heap holds it
  uint64_t heap_offset = 0;  // of the block in the heap region
  uint64_t bytes = 0;        // block length
  uint64_t version = 0;      // of the record the block held
};

struct LocationCacheCounters {
  uint64_t entries = 0;
  uint64_t bytes = 0;           // sum of EntryBytes
  uint64_t capacity_bytes = 0;
  uint64_t hits = 0;       // cached READs accepted: the GET cost one READ
  uint64_t misses = 0;     // lookups that found no usable entry
  uint64_t fallbacks = 0;  // cached READs rejected: the ordinary path ran
  uint64_t evictions = 0;
};

class LocationCache {
 public:
  static constexpr size_t kShards = 16;
  // Keys of at most this many bytes are held in their slot.
  static constexpr size_t kInlineKeyBytes = 24;
  // The smallest table a shard grows to (a capacity below a shard's worth
  // of them still gets these).
  static constexpr uint32_t kMinSlots = 8;

  // `capacity_bytes` >= 1 (the client validates its option; a capacity
  // below kShards * EntryBytes(1) keeps nothing).
  explicit LocationCache(uint64_t capacity_bytes);
  ~LocationCache();
  LocationCache(const LocationCache&) = delete;
  LocationCache& operator=(const LocationCache&) = delete;

  // What an entry for a key of `key_bytes` bytes is charged.
  static uint64_t EntryBytes(size_t key_bytes);

  // The number naming server `identity` (the cluster map's server id, or
  // the address of a standalone server) in this cache: the same for the
  // same identity, different for different ones. Cheap but takes a lock:
  // call it once per connection, not per GET.
  uint32_t ServerTag(std::string_view identity) EXCLUDES(tags_mu_);

  // The entry of `key` (hash `key_hash`, see above) on `server`, for
  // incarnation `epoch`; sets its reference bit. An entry of another epoch
  // is dropped. Counts a miss when none is returned.
  std::optional<CachedLocation> Find(uint32_t server, std::string_view key, uint64_t key_hash, uint64_t epoch);

  // Remembers `location` for `key` on `server`, replacing any entry,
  // evicting others if its shard is full. A key whose entry alone exceeds a
  // shard's capacity is not remembered, nor a location of more than 2^32 - 1
  // bytes (no block is that long: layout::kMaxBlockBytes), which drops the
  // key's entry instead.
  void Insert(uint32_t server, std::string_view key, uint64_t key_hash, const CachedLocation& location);

  // Forgets `key` on `server` (a no-op when absent).
  void Erase(uint32_t server, std::string_view key, uint64_t key_hash);

  // Outcome of cached READs (see LocationCacheCounters); a caller that
  // counts a batch's outcomes notes them once.
  void NoteHits(uint64_t n) {
    if (n != 0) hits_.fetch_add(n, std::memory_order_relaxed);
  }
  void NoteFallbacks(uint64_t n) {
    if (n != 0) fallbacks_.fetch_add(n, std::memory_order_relaxed);
  }
  void NoteHit() { NoteHits(1); }
  void NoteFallback() { NoteFallbacks(1); }

  uint64_t capacity_bytes() const { return capacity_bytes_; }
  LocationCacheCounters counters() const;

 private:
  // One entry, one cache line. `state` 0: the slot is free (a zeroed
  // array is all free).
  struct alignas(64) Slot {
    uint32_t hash;         // low 32 bits of the entry's Mix(); its home slot
    uint32_t server;
    uint16_t key_bytes;    // <= layout::kMaxKeyBytesLimit
    uint8_t state;         // kUsed | kReferenced
    uint8_t unused;
    uint32_t block_bytes;  // CachedLocation::bytes
    uint64_t epoch;
    uint64_t heap_offset;
    uint64_t version;
    union {
      char inline_key[kInlineKeyBytes];  // key_bytes <= kInlineKeyBytes
      char* long_key;                    // otherwise: new char[key_bytes], owned
    };
  };
  static_assert(sizeof(Slot) == 64);
  static constexpr uint8_t kUsed = 1;
  static constexpr uint8_t kReferenced = 2;
  // A slot's share at the table's full load (3/4), rounded up.
  static constexpr uint64_t kSlotCharge = (sizeof(Slot) * 4 + 2) / 3;
  struct alignas(64) Shard {
    Mutex mu;
    std::unique_ptr<Slot[]> slots GUARDED_BY(mu);  // slot_count of them
    uint32_t slot_count GUARDED_BY(mu) = 0;        // 0 or a power of two
    uint32_t entries GUARDED_BY(mu) = 0;
    uint32_t hand GUARDED_BY(mu) = 0;
    uint64_t bytes GUARDED_BY(mu) = 0;
    uint64_t misses GUARDED_BY(mu) = 0;
    uint64_t evictions GUARDED_BY(mu) = 0;
  };

  // The hash an entry is placed by: key and server mixed (a server holds
  // only some shards of the cluster, so ShardHash's low bits alone would
  // gather its keys in few places).
  static uint64_t Mix(uint64_t key_hash, uint32_t server);
  Shard& ShardOf(uint64_t mixed) { return shards_[(mixed >> 32) % kShards]; }
  static const char* KeyOf(const Slot& slot) {
    return slot.key_bytes <= kInlineKeyBytes ? slot.inline_key : slot.long_key;
  }
  // The slot holding (server, key), or -1.
  static int64_t Probe(const Shard& s, uint32_t hash, uint32_t server, std::string_view key) REQUIRES(s.mu);
  // Frees the entry at slot `i` (used) and closes the gap behind it.
  static void RemoveAt(Shard& s, uint32_t i) REQUIRES(s.mu);
  // Evicts one entry by CLOCK; the shard holds at least one.
  static void EvictOne(Shard& s) REQUIRES(s.mu);
  // Moves every entry into a table of `slot_count` slots.
  static void Resize(Shard& s, uint32_t slot_count) REQUIRES(s.mu);

  const uint64_t capacity_bytes_;
  const uint64_t shard_capacity_;
  // The most slots a shard's table grows to: the largest power of two
  // whose slots fit the shard's capacity, at least kMinSlots.
  const uint32_t max_slots_;
  std::unique_ptr<Shard[]> shards_;

  Mutex tags_mu_;
  std::map<std::string, uint32_t, std::less<>> tags_ GUARDED_BY(tags_mu_);

  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> fallbacks_{0};
};

}  // namespace rkv::client
