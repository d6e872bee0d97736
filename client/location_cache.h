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
// Bounded: capacity_bytes covers every entry's EntryBytes (its key bytes
// plus kEntryOverheadBytes, an upper estimate of the memory an entry takes:
// map node, key object and its allocation, CLOCK slot). The cache is split
// into kShards shards, each with capacity_bytes / kShards; a full shard
// evicts by CLOCK (second chance): a lookup sets an entry's reference bit,
// the hand clears set bits and evicts the first entry it finds clear.
//
// Thread safety: thread-safe; every shard has its own mutex, the counters
// are relaxed atomics (statistics, ordered with nothing).
//
// Invariants (per shard, under its mutex): bytes == sum of EntryBytes of
// the entries in `index`; bytes <= shard capacity; every used ring slot is
// named by exactly one index entry and vice versa.
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
#include <unordered_map>
#include <vector>

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

  // `capacity_bytes` >= 1 (the client validates its option; a capacity
  // below kShards * EntryBytes(1) keeps nothing).
  explicit LocationCache(uint64_t capacity_bytes);
  LocationCache(const LocationCache&) = delete;
  LocationCache& operator=(const LocationCache&) = delete;

  // What an entry for a key of `key_bytes` bytes is charged.
  static uint64_t EntryBytes(size_t key_bytes);

  // The number naming server `identity` (the cluster map's server id, or
  // the address of a standalone server) in this cache: the same for the
  // same identity, different for different ones. Cheap but takes a lock:
  // call it once per connection, not per GET.
  uint32_t ServerTag(std::string_view identity) EXCLUDES(tags_mu_);

  // The entry of `key` on `server`, for incarnation `epoch`; sets its
  // reference bit. An entry of another epoch is dropped. Counts a miss when
  // none is returned.
  std::optional<CachedLocation> Find(uint32_t server, std::string_view key, uint64_t epoch);

  // Remembers `location` for `key` on `server`, replacing any entry,
  // evicting others if its shard is full. A key whose entry alone exceeds a
  // shard's capacity is not remembered.
  void Insert(uint32_t server, std::string_view key, const CachedLocation& location);

  // Forgets `key` on `server` (a no-op when absent).
  void Erase(uint32_t server, std::string_view key);

  // Outcome of a cached READ (see LocationCacheCounters).
  void NoteHit() { hits_.fetch_add(1, std::memory_order_relaxed); }
  void NoteFallback() { fallbacks_.fetch_add(1, std::memory_order_relaxed); }

  uint64_t capacity_bytes() const { return capacity_bytes_; }
  LocationCacheCounters counters() const;

 private:
  struct Key {
    uint32_t server;
    std::string key;
  };
  struct KeyRef {
    uint32_t server;
    std::string_view key;
  };
  // Transparent, so that Find and Erase look up a string_view without
  // building a string.
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(const KeyRef& k) const {
      return std::hash<std::string_view>()(k.key) ^ (size_t{k.server} * 0x9E3779B97F4A7C15ULL);
    }
    size_t operator()(const Key& k) const { return (*this)(KeyRef{k.server, k.key}); }
  };
  struct KeyEq {
    using is_transparent = void;
    static KeyRef Ref(const Key& k) { return KeyRef{k.server, k.key}; }
    static KeyRef Ref(const KeyRef& k) { return k; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      const KeyRef x = Ref(a);
      const KeyRef y = Ref(b);
      return x.server == y.server && x.key == y.key;
    }
  };
  // A CLOCK position. `key` points at the index node's key (node-based
  // map: stable until erased); null when the position is free.
  struct RingSlot {
    const Key* key = nullptr;
    CachedLocation location;
    bool referenced = false;
  };
  using Index = std::unordered_map<Key, uint32_t, KeyHash, KeyEq>;
  struct Shard {
    Mutex mu;
    Index index GUARDED_BY(mu);  // key -> ring position
    std::vector<RingSlot> ring GUARDED_BY(mu);
    std::vector<uint32_t> free GUARDED_BY(mu);  // free ring positions
    size_t hand GUARDED_BY(mu) = 0;
    uint64_t bytes GUARDED_BY(mu) = 0;
  };

  Shard& ShardOf(const KeyRef& k) { return shards_[KeyHash()(k) % kShards]; }
  // Removes the entry at ring position `pos` (used).
  static void Remove(Shard& s, uint32_t pos) REQUIRES(s.mu);
  // Evicts one entry by CLOCK; the shard holds at least one.
  void EvictOne(Shard& s) REQUIRES(s.mu);

  const uint64_t capacity_bytes_;
  const uint64_t shard_capacity_;
  std::unique_ptr<Shard[]> shards_;

  Mutex tags_mu_;
  std::map<std::string, uint32_t, std::less<>> tags_ GUARDED_BY(tags_mu_);

  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> fallbacks_{0};
  std::atomic<uint64_t> evictions_{0};
};

}  // namespace rkv::client
