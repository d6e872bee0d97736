// The hash index: a hopscotch hash table of 8-slot buckets laid out in the
// index region exactly as common/layout.h says, with its records in the
// heap region. Clients read both regions with one-sided READs while the
// server changes them, so every change follows the layout's publication
// rules:
//
//   - A record is written completely into a freshly allocated heap block
//     before any slot references it; then ONE aligned 8-byte release store
//     publishes the slot word. That store is the linearization point of a
//     PUT or DELETE.
//   - Replacing a value rewrites the key's slot word in place (old block ->
//     new block); it is never a delete followed by an insert, so a
//     concurrent GET always finds either version. A slot word moves only to
//     make room for an insert ("Relocation" below).
//   - A replace or delete first marks the old block superseded (its
//     checksum word complemented, common/layout.h) and only then stores
//     the slot word that stops naming it; a relocation move keeps the
//     block and does not mark it. So a reader that READs a block from a
//     remembered location and sees the valid checksum knows the block was
//     its key's current one when that word was read.
//   - A block that a slot stopped referencing is retired into the heap's
//     quarantine (server/table/heap.h), not freed.
//
// A key lives in one of the 8 buckets of its neighbourhood (NeighborhoodOf
// in common/hash.h), which a client fetches with one READ. Insertion takes
// the first bucket with a free slot from the key's home bucket on, and
// keeps the key's fingerprint in the slot.
//
// Relocation (hopscotch). When every bucket of a new key's neighbourhood is
// full, the table finds the nearest free slot outside it (up to
// kMaxDisplacementBuckets away) and brings that slot in by moving keys into
// it, each from a bucket nearer the neighbourhood and within its own
// neighbourhood, until the free slot lands inside. First refusal comes at a
// load of ~0.92-0.98 (table_test measures it; the design asks >= 0.85). A
// move publishes the key's slot word at its new place before clearing the
// old one, so memory always holds the key somewhere, but one READ of a
// neighbourhood is not atomic: it may read the new place before the publish
// and the old one after the clear. The GET protocol closes that window with
// two rules together:
//   - a client that finds nothing reads the neighbourhood once more, after the first
//     READ completed and within its lease (half the grace period) from the
//     first READ's post, before it answers NOT_FOUND (client/
//     server_connection.h);
//   - once readers are present (ServeReaders), a key that moved does not
//     move again for one grace period (positions that received a moved key
//     are remembered until then, in server memory).
// A first READ that missed a present key overlapped its one move; that
// move's clear came after the first READ was posted, so the key cannot move
// again before the second READ completes: the second READ finds it.
// Before ServeReaders (rebuild on start) moves are unrestricted.
//
// Thread safety: not thread-safe; mutations and Lookup are called under the
// Applier's table_mu_ (server/apply/apply.h). Remote readers need no lock: see above.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "common/hash.h"
#include "common/layout.h"
#include "common/status.h"
#include "server/table/heap.h"

namespace rkv::server {

class TableTestPeer;

class Table {
 public:
  // Largest share of slots a table is sized to hold (see above).
  static constexpr double kTargetLoad = 0.85;
  // How far from a key's neighbourhood a free slot is looked for to make
  // room for it, and the most moves spent on one insert.
  static constexpr uint64_t kMaxDisplacementBuckets = 512;
  static constexpr uint64_t kMaxRelocationMoves = 256;
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

  // True when Upsert(key, ..., now) will find a slot: the key is present,
  // or its neighbourhood has a free slot, if need be after moving other
  // keys out of the way (harmless if no Upsert follows). The heap may still
  // refuse.
  bool PrepareInsert(std::string_view key, Heap::Clock::time_point now);

  // From now on remote readers may be reading: moved keys stay put for a
  // grace period (see "Relocation" above). Call once the table is exposed.
  void ServeReaders() { serving_readers_ = true; }

  // Inserts or replaces `key` with a record {key, value, version} in a new
  // heap block, published with one release store into the key's existing
  // slot (replace: the old block is marked superseded before that store
  // and retired at `now` after it) or into the
  // first free slot of its neighbourhood from its home bucket on (insert;
  // when every bucket of it is full, other keys are moved out of the way
  // first: see "Relocation"). Sizes must have been validated (key
  // 1..kMaxKeyBytesLimit, block <= kMaxBlockBytes). RESOURCE_EXHAUSTED when
  // no slot of the neighbourhood can be freed (insert only) or the heap has
  // no block; no key's value changed then (keys may have moved, each within
  // its own neighbourhood) and the old value, if any, stays readable.
  // Returns where the key now lives.
  // `expires_at_ms`: the block's expiry (layout::BlockHeader; 0: none).
  StatusOr<Entry> Upsert(std::string_view key, std::string_view value, uint64_t version,
                         Heap::Clock::time_point now, int64_t expires_at_ms = 0);

  // Rebuild only, before ServeReaders: inserts `key`, which must be absent
  // (the keys of one store scan are distinct), without looking it up; `hash`
  // is TableHash(key, hash_seed()). Otherwise as Upsert.
  StatusOr<Entry> InsertAbsent(std::string_view key, std::string_view value, uint64_t version, uint64_t hash,
                               Heap::Clock::time_point now, int64_t expires_at_ms = 0);
  // Asks the CPU to fetch the first buckets of the neighbourhood of `hash`
  // into its cache, so that inserts of many keys overlap their misses.
  void Prefetch(uint64_t hash) const;

  // Removes `key`: marks its block superseded, stores kEmptySlot with
  // release order, retires the block at `now`. Returns the version of the removed record; NOT_FOUND when the
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
    int64_t expires_at_ms;  // 0: never
  };
  Record RecordAt(uint64_t slot) const;

  uint64_t size() const { return size_; }
  // Records with an expiry (expired or not).
  uint64_t expiring() const { return expiring_; }
  uint64_t bucket_count() const { return uint64_t{1} << log2_; }
  uint64_t slot_count() const { return bucket_count() * layout::kSlotsPerBucket; }
  double load_factor() const { return static_cast<double>(size_) / static_cast<double>(slot_count()); }
  uint64_t hash_seed() const { return seed_; }
  // Moves of a key to another bucket of its neighbourhood to make room
  // (see "Relocation"), since Init.
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
  struct Position {
    uint64_t bucket;
    uint32_t slot_index;
  };
  // Index of a free slot of bucket `b`, or -1.
  int FreeSlotIn(uint64_t b) const;
  // The first free slot of `nb`, from its first bucket on.
  std::optional<Position> FirstFreeSlot(const Neighborhood& nb) const;
  // The neighbourhood of the key whose block slot word `s` references.
  Neighborhood NeighborhoodOfSlot(uint64_t s) const;
  // Whether the key at (b, i) may move at `now` (see "Relocation").
  bool MayMove(uint64_t b, uint32_t i, Heap::Clock::time_point now);
  // Frees a slot in neighbourhood `nb` (every bucket full) by moving keys
  // (see "Relocation"); false when none could be freed.
  bool MakeRoom(const Neighborhood& nb, Heap::Clock::time_point now);
  // One step of MakeRoom: moves a key that may live in `free_bucket` (which
  // has a free slot, outside `nb`) into it from a bucket nearer `nb`, and
  // sets `free_bucket` to that bucket. False when no key can.
  bool HopToward(const Neighborhood& nb, uint64_t& free_bucket, Heap::Clock::time_point now);
  // A free slot of `nb` (moving keys if need be), or RESOURCE_EXHAUSTED.
  StatusOr<Position> FreeSlotFor(const Neighborhood& nb, Heap::Clock::time_point now);
  // Allocates and writes the block of a record, marks the block of
  // `replaced` (the slot word at `at`, kEmptySlot for an insert) superseded,
  // then publishes the new block at `at`.
  StatusOr<uint64_t> PublishRecord(Position at, uint16_t fingerprint, std::string_view key, std::string_view value,
                                   uint64_t version, int64_t expires_at_ms, uint64_t replaced,
                                   Heap::Clock::time_point now);
  // Marks the block `slot` names superseded (common/layout.h), before the
  // slot store that stops naming it.
  void Supersede(uint64_t slot);
  // Moves the key at `from` to `to` (free): publish, then clear.
  void Move(Position from, Position to);

  std::span<uint8_t> index_;
  std::span<uint8_t> heap_memory_;
  Heap* heap_;
  uint32_t log2_ = 0;
  uint64_t seed_ = 0;
  uint64_t size_ = 0;
  uint64_t expiring_ = 0;
  uint64_t relocations_ = 0;
  bool serving_readers_ = false;
  // Positions (bucket * kSlotsPerBucket + slot) that received a moved key,
  // and when; the deque is in time order and drives expiry.
  std::unordered_map<uint64_t, Heap::Clock::time_point> moved_at_;
  std::deque<std::pair<uint64_t, Heap::Clock::time_point>> moved_order_;
};

}  // namespace rkv::server
