// The hash index: a two-choice hash table of 8-slot buckets laid out in the
// index region exactly as common/layout.h says, with its records in the
// heap region. Clients read both regions with one-sided READs while the
// server changes them, so every change follows the layout's publication
// rules:
//
//   - A record is written completely into a freshly allocated heap block
//     before any slot references it; then ONE aligned 8-byte release store
//     publishes the slot word. That store is the linearization point of a
//     PUT or DELETE.
//   - A live key's slot never moves. Replacing a value rewrites the same
//     slot word (old block -> new block); it is never a delete followed by
//     an insert, so a concurrent GET always finds either version.
//   - A block that a slot stopped referencing is retired into the heap's
//     quarantine (server/heap.h), not freed.
//
// Insertion picks the emptier of the key's two candidate buckets
// (ChooseBuckets in common/hash.h) and keeps the key's fingerprint in the
// slot.
//
// Relocation. Without it, two-choice hashing refuses its first insert at a
// load of ~0.7 on large tables (the fullest bucket runs about
// log2(ln(buckets)) slots above the mean). When both candidate buckets of a
// new key are full, the table moves keys out of the way, up to
// kRelocationDepth moves deep, and reaches ~0.97 before a refusal
// (table_test measures it). A move is safe for lock-free readers because of
// two rules together:
//   - a key only ever moves from its FIRST candidate bucket (b1) to its
//     SECOND (b2), never back, publishing the new slot before clearing the
//     old one;
//   - a GET reads b1 and then b2 in one READ list on one connection, which
//     the responder executes in order.
// A reader whose READ of b1 ran after the clear therefore runs its READ of
// b2 after the publish, and sees the key there; one whose READ of b1 ran
// before the clear sees it in b1. A key in its b2 never moves.
//
// Thread safety: not thread-safe; mutations and Lookup are called under the
// apply mutex (server/apply.h). Remote readers need no lock: see above.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "common/layout.h"
#include "common/status.h"
#include "server/heap.h"

namespace rkv::server {

class TableTestPeer;

class Table {
 public:
  // Largest share of slots a table is sized to hold (see above).
  static constexpr double kTargetLoad = 0.85;
  // Longest chain of moves tried to make room for one insert.
  static constexpr int kRelocationDepth = 3;
  // Largest table: 2^30 buckets (64 GiB of index).
  static constexpr uint32_t kMaxBucketCountLog2 = 30;

  // The smallest log2(bucket count) whose table holds `max_keys` keys at a
  // load of at most kTargetLoad (at least 1 bucket). INVALID_ARGUMENT when
  // that exceeds kMaxBucketCountLog2 or max_keys is 0.
  static StatusOr<uint32_t> BucketCountLog2ForKeys(uint64_t max_keys);

  // `index` must hold layout::IndexBytes(1 << bucket_count_log2) bytes and
  // be 64-byte aligned; `heap_memory` is the heap region, of which `heap`
  // manages the offsets (heap->capacity() <= heap_memory.size()). All three
  // must outlive the table. The index is written by Init.
  Table(std::span<uint8_t> index, std::span<uint8_t> heap_memory, Heap* heap);

  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  // Writes the header and empties every bucket. `index` must be exactly
  // IndexBytes(1 << bucket_count_log2) long (INVALID_ARGUMENT otherwise).
  // Call before the regions are exposed to any reader.
  Status Init(uint32_t bucket_count_log2, uint64_t epoch, uint64_t hash_seed);

  // Where a key lives.
  struct Entry {
    uint64_t bucket = 0;
    uint32_t slot_index = 0;  // 0 .. kSlotsPerBucket-1
    uint64_t slot = 0;        // the slot word
    uint64_t version = 0;     // of the record the slot references
  };

  // Finds `key` (fingerprint match, then the key bytes of the block).
  std::optional<Entry> Lookup(std::string_view key) const;

  // True when Upsert(key, ...) would find a slot: the key is present or one
  // of its candidate buckets has a free slot (the heap may still refuse).
  bool CanPlace(std::string_view key) const;

  // Inserts or replaces `key` with a record {key, value, version} in a new
  // heap block, published with one release store into the key's existing
  // slot (replace, then the old block is retired at `now`) or into a free
  // slot of the emptier candidate bucket (insert). Sizes must have been
  // validated (key 1..kMaxKeyBytesLimit, block <= kMaxBlockBytes).
  // RESOURCE_EXHAUSTED when both candidate buckets are full (insert only)
  // or the heap has no block; nothing changed then and the old value, if
  // any, stays readable. Returns where the key now lives.
  StatusOr<Entry> Upsert(std::string_view key, std::string_view value, uint64_t version,
                         Heap::Clock::time_point now);

  // Removes `key`: stores kEmptySlot with release order, retires the block
  // at `now`. Returns the version of the removed record; NOT_FOUND when the
  // key is absent.
  StatusOr<uint64_t> Delete(std::string_view key, Heap::Clock::time_point now);

  // Rewrites the epoch in the header (before readers see the table).
  void SetEpoch(uint64_t epoch);

  // The record a slot word references (server memory: trusted). The view
  // points into the heap and stays valid until the block is retired.
  struct Record {
    std::string_view key;
    std::string_view value;
    uint64_t version;
  };
  Record RecordAt(uint64_t slot) const;

  uint64_t size() const { return size_; }
  uint64_t bucket_count() const { return uint64_t{1} << log2_; }
  uint64_t slot_count() const { return bucket_count() * layout::kSlotsPerBucket; }
  double load_factor() const { return static_cast<double>(size_) / static_cast<double>(slot_count()); }
  uint64_t hash_seed() const { return seed_; }
  // Keys moved b1 -> b2 to make room, since Init.
  uint64_t relocations() const { return relocations_; }
  const layout::TableHeader& header() const;

 private:
  friend class TableTestPeer;

  layout::Bucket* bucket(uint64_t b) const;
  // Slot word as last stored (only this thread writes slots).
  static uint64_t LoadSlot(const uint64_t& word);
  // The publication point: one aligned 8-byte release store.
  static void PublishSlot(uint64_t& word, uint64_t value);
  bool SlotHoldsKey(uint64_t slot, uint16_t fingerprint, std::string_view key) const;
  // Index of a free slot of bucket `b`, or -1.
  int FreeSlotIn(uint64_t b) const;
  // Frees a slot of bucket `b` by moving one of its keys from its b1 (== b)
  // to its b2, recursively freeing a slot there, at most `depth` moves
  // deep. Returns the freed slot's index or -1. With `dry_run` nothing is
  // changed and the answer says whether it would succeed.
  int MakeRoom(uint64_t b, int depth, bool dry_run);

  std::span<uint8_t> index_;
  std::span<uint8_t> heap_memory_;
  Heap* heap_;
  uint32_t log2_ = 0;
  uint64_t seed_ = 0;
  uint64_t size_ = 0;
  uint64_t relocations_ = 0;
};

}  // namespace rkv::server
