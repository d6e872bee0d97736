#include "server/table/table.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include <glog/logging.h>

#include "common/hash.h"
#include "common/record.h"
#include "common/sanitizers.h"

namespace rkv::server {

StatusOr<uint32_t> Table::BucketCountLog2ForKeys(uint64_t max_keys) {
  if (max_keys == 0) return InvalidArgument("max_keys must be at least 1");
  // Slots needed at kTargetLoad = 17/20, kept in integers.
  static_assert(kTargetLoad == 0.85);
  constexpr uint64_t kMaxSlots = (uint64_t{1} << kMaxBucketCountLog2) * layout::kSlotsPerBucket;
  if (max_keys > kMaxSlots / 20 * 17) {
    return InvalidArgument("max_keys " + std::to_string(max_keys) + " needs a table over 2^" +
                           std::to_string(kMaxBucketCountLog2) + " buckets");
  }
  const uint64_t slots = (max_keys * 20 + 16) / 17;
  const uint64_t buckets = (slots + layout::kSlotsPerBucket - 1) / layout::kSlotsPerBucket;
  uint32_t log2 = 1;
  while ((uint64_t{1} << log2) < buckets) ++log2;
  return log2;
}

Table::Table(std::span<uint8_t> index, std::span<uint8_t> heap_memory, Heap* heap)
    : index_(index), heap_memory_(heap_memory), heap_(heap) {
  CHECK_LE(heap_->capacity(), heap_memory_.size());
  CHECK_EQ(reinterpret_cast<uintptr_t>(index_.data()) % layout::kCacheLine, 0u);
}

Status Table::Init(uint32_t bucket_count_log2, uint64_t epoch, uint64_t hash_seed) {
  if (bucket_count_log2 > kMaxBucketCountLog2) {
    return InvalidArgument("bucket_count_log2 " + std::to_string(bucket_count_log2) + " is over " +
                           std::to_string(kMaxBucketCountLog2));
  }
  const uint64_t buckets = uint64_t{1} << bucket_count_log2;
  if (index_.size() != layout::IndexBytes(buckets)) {
    return InvalidArgument("index region of " + std::to_string(index_.size()) + " bytes does not fit " +
                           std::to_string(buckets) + " buckets (" +
                           std::to_string(layout::IndexBytes(buckets)) + " bytes)");
  }
  log2_ = bucket_count_log2;
  seed_ = hash_seed;
  size_ = 0;
  layout::TableHeader h{};
  h.magic = layout::kTableMagic;
  h.layout_version = layout::kLayoutVersion;
  h.bucket_count_log2 = bucket_count_log2;
  h.epoch = epoch;
  h.bucket_count = buckets;
  h.hash_seed = hash_seed;
  h.heap_size = heap_->capacity();
  std::memcpy(index_.data(), &h, sizeof(h));
  std::memset(index_.data() + layout::kIndexHeaderBytes, 0, index_.size() - layout::kIndexHeaderBytes);
  return Status::Ok();
}

void Table::SetEpoch(uint64_t epoch) {
  layout::TableHeader h;
  std::memcpy(&h, index_.data(), sizeof(h));
  h.epoch = epoch;
  std::memcpy(index_.data(), &h, sizeof(h));
}

const layout::TableHeader& Table::header() const {
  return *reinterpret_cast<const layout::TableHeader*>(index_.data());
}

layout::Bucket* Table::bucket(uint64_t b) const {
  return reinterpret_cast<layout::Bucket*>(index_.data() + layout::BucketOffset(b));
}

uint64_t Table::LoadSlot(const uint64_t& word) {
  // Only the apply thread (holding Applier::table_mu_) stores slots, so a
  // relaxed load sees its own last store.
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(word)).load(std::memory_order_relaxed);
}

void Table::PublishSlot(uint64_t& word, uint64_t value) {
  // The linearization point of a PUT (value = new block) or DELETE
  // (value = kEmptySlot): one aligned 8-byte store. Release order makes
  // every byte of the block written before it visible no later than the
  // slot word, to local threads and to the NIC that serves remote READs.
  std::atomic_ref<uint64_t>(word).store(value, std::memory_order_release);
}

void Table::Supersede(uint64_t slot) {
  // Called just before the slot store that stops naming the block: the
  // complement of the checksum tells a reader of a remembered location
  // (the client's location cache) that the block is no longer current
  // (common/layout.h, "Superseded form"). Release order keeps it visible
  // no later than the slot store that follows it, which is itself a
  // release store: a reader that sees the new slot word, or anything
  // published after it, sees the marker. The other bytes are untouched, so
  // a reader that found the block through the old slot word still decodes
  // it.
  uint8_t* p = heap_memory_.data() + layout::SlotBlockOffset(slot);
  auto& word = *reinterpret_cast<uint64_t*>(p);
  std::atomic_ref<uint64_t> checksum(word);
  checksum.store(layout::SupersededChecksum(checksum.load(std::memory_order_relaxed)),
                 std::memory_order_release);
}

Table::Record Table::RecordAt(uint64_t slot) const {
  const uint8_t* p = heap_memory_.data() + layout::SlotBlockOffset(slot);
  layout::BlockHeader h;
  std::memcpy(&h, p, sizeof(h));
  const char* base = reinterpret_cast<const char*>(p) + layout::kBlockHeaderBytes;
  return Record{std::string_view(base, h.key_length), std::string_view(base + h.key_length, h.value_length),
                h.version, h.expires_at_ms};
}

bool Table::SlotHoldsKey(uint64_t slot, uint16_t fingerprint, std::string_view key) const {
  if (slot == layout::kEmptySlot || layout::SlotFingerprint(slot) != fingerprint) return false;
  return RecordAt(slot).key == key;
}

std::optional<Table::Entry> Table::Lookup(std::string_view key) const {
  const Neighborhood nb = NeighborhoodOf(TableHash(key, seed_), log2_);
  for (uint64_t b = nb.first; b < nb.first + nb.count; ++b) {
    const layout::Bucket* bk = bucket(b);
    for (uint32_t i = 0; i < layout::kSlotsPerBucket; ++i) {
      const uint64_t s = LoadSlot(bk->slots[i]);
      if (SlotHoldsKey(s, nb.fingerprint, key)) return Entry{b, i, s, RecordAt(s).version};
    }
  }
  return std::nullopt;
}

bool Table::PrepareInsert(std::string_view key, Heap::Clock::time_point now) {
  if (Lookup(key)) return true;
  const Neighborhood nb = NeighborhoodOf(TableHash(key, seed_), log2_);
  return FirstFreeSlot(nb).has_value() || MakeRoom(nb, now);
}

int Table::FreeSlotIn(uint64_t b) const {
  const layout::Bucket* bk = bucket(b);
  for (uint32_t i = 0; i < layout::kSlotsPerBucket; ++i) {
    if (LoadSlot(bk->slots[i]) == layout::kEmptySlot) return static_cast<int>(i);
  }
  return -1;
}

std::optional<Table::Position> Table::FirstFreeSlot(const Neighborhood& nb) const {
  for (uint64_t b = nb.first; b < nb.first + nb.count; ++b) {
    if (const int i = FreeSlotIn(b); i >= 0) return Position{b, static_cast<uint32_t>(i)};
  }
  return std::nullopt;
}

Neighborhood Table::NeighborhoodOfSlot(uint64_t s) const {
  return NeighborhoodOf(TableHash(RecordAt(s).key, seed_), log2_);
}

bool Table::MayMove(uint64_t b, uint32_t i, Heap::Clock::time_point now) {
  if (!serving_readers_) return true;
  const auto it = moved_at_.find(b * layout::kSlotsPerBucket + i);
  return it == moved_at_.end() || now - it->second >= heap_->grace_period();
}

void Table::Move(Position from, Position to) {
  uint64_t& from_word = bucket(from.bucket)->slots[from.slot_index];
  const uint64_t s = LoadSlot(from_word);
  // Publish the key at its new place before clearing the old one, so that
  // at every moment memory holds the key somewhere.
  PublishSlot(bucket(to.bucket)->slots[to.slot_index], s);
  PublishSlot(from_word, layout::kEmptySlot);
  ++relocations_;
  if (serving_readers_) {
    // Taken after the clear: the key stays put for a grace period from a
    // moment no earlier than any READ that could have missed it.
    const Heap::Clock::time_point at = Heap::Clock::now();
    const uint64_t position = to.bucket * layout::kSlotsPerBucket + to.slot_index;
    moved_at_[position] = at;
    moved_order_.emplace_back(position, at);
  }
}

bool Table::HopToward(const Neighborhood& nb, uint64_t& free_bucket, Heap::Clock::time_point now) {
  const uint64_t last = nb.first + nb.count - 1;
  const bool after = free_bucket > last;
  const int free_slot = FreeSlotIn(free_bucket);
  if (free_slot < 0) return false;
  // Candidates, farthest from free_bucket first: buckets up to
  // kNeighborhoodBuckets - 1 away from it (no key can reach further), on
  // the neighbourhood's side, and not beyond the neighbourhood.
  const uint64_t reach = layout::kNeighborhoodBuckets - 1;
  uint64_t b = after ? std::max(free_bucket - std::min(free_bucket, reach), nb.first)
                     : std::min(free_bucket + reach, last);
  for (;; b = after ? b + 1 : b - 1) {
    if (b == free_bucket) return false;
    const layout::Bucket* bk = bucket(b);
    for (uint32_t i = 0; i < layout::kSlotsPerBucket; ++i) {
      const uint64_t s = LoadSlot(bk->slots[i]);
      if (s == layout::kEmptySlot || !MayMove(b, i, now)) continue;
      if (!NeighborhoodOfSlot(s).Contains(free_bucket)) continue;
      Move(Position{b, i}, Position{free_bucket, static_cast<uint32_t>(free_slot)});
      free_bucket = b;
      return true;
    }
  }
}

bool Table::MakeRoom(const Neighborhood& nb, Heap::Clock::time_point now) {
  // Forget moves older than a grace period.
  while (!moved_order_.empty() && now - moved_order_.front().second >= heap_->grace_period()) {
    const auto it = moved_at_.find(moved_order_.front().first);
    if (it != moved_at_.end() && it->second == moved_order_.front().second) moved_at_.erase(it);
    moved_order_.pop_front();
  }
  // Hopscotch-style: find a free slot outside the neighbourhood, nearest
  // first on either side, and bring it in by moving keys into it, each
  // from a bucket nearer the neighbourhood, until it lands inside. A chain
  // that gets stuck leaves every key in its own neighbourhood; the search
  // then goes on further out.
  const uint64_t buckets = bucket_count();
  const uint64_t last = nb.first + nb.count - 1;
  uint64_t moves = 0;
  for (uint64_t distance = 1; distance <= kMaxDisplacementBuckets; ++distance) {
    for (const bool after : {true, false}) {
      if (after ? last + distance >= buckets : distance > nb.first) continue;
      uint64_t free_bucket = after ? last + distance : nb.first - distance;
      if (FreeSlotIn(free_bucket) < 0) continue;
      while (!nb.Contains(free_bucket) && moves < kMaxRelocationMoves &&
             HopToward(nb, free_bucket, now)) {
        ++moves;
      }
      if (nb.Contains(free_bucket)) return true;
      if (moves >= kMaxRelocationMoves) return false;
    }
  }
  return false;
}

StatusOr<Table::Position> Table::FreeSlotFor(const Neighborhood& nb, Heap::Clock::time_point now) {
  // The first free slot of the neighbourhood, from the key's home bucket
  // on: keys stay near home, which leaves the buckets after them free for
  // keys displaced from earlier homes (hopscotch). When every bucket is
  // full, keys move out of the way first; the moves are harmless if the
  // heap refuses later: every key stays reachable.
  std::optional<Position> free_slot = FirstFreeSlot(nb);
  if (!free_slot && MakeRoom(nb, now)) free_slot = FirstFreeSlot(nb);
  if (!free_slot) {
    return ResourceExhausted("table full: every bucket of the key's neighbourhood is full (" +
                             std::to_string(size_) + " keys in " + std::to_string(slot_count()) +
                             " slots; raise --max_keys)");
  }
  return *free_slot;
}

StatusOr<uint64_t> Table::PublishRecord(Position at, uint16_t fingerprint, std::string_view key,
                                        std::string_view value, uint64_t version, int64_t expires_at_ms,
                                        uint64_t replaced, Heap::Clock::time_point now) {
  const uint64_t block_bytes = layout::BlockBytes(key.size(), value.size());
  RKV_ASSIGN_OR_RETURN(const uint64_t offset, heap_->Allocate(block_bytes, now));
  // The block is private until published: plain stores are fine here. A
  // READ through a location a client remembered from the block's previous
  // life may still copy it (RacyByDesign: its checksum and key refuse what
  // it got).
  {
    RacyByDesign racy;
    EncodeRecord(heap_memory_.subspan(offset, block_bytes), key, value, version, /*flags=*/0, expires_at_ms);
  }
  const uint64_t slot = layout::MakeSlot(fingerprint, offset, block_bytes);
  // Only once nothing can fail any more: a refused replace leaves the old
  // block current, and so unmarked.
  if (replaced != layout::kEmptySlot) Supersede(replaced);
  PublishSlot(bucket(at.bucket)->slots[at.slot_index], slot);
  return slot;
}

StatusOr<Table::Entry> Table::Upsert(std::string_view key, std::string_view value, uint64_t version,
                                     Heap::Clock::time_point now, int64_t expires_at_ms) {
  const Neighborhood nb = NeighborhoodOf(TableHash(key, seed_), log2_);
  const std::optional<Entry> existing = Lookup(key);
  Position at;
  if (existing) {
    at = Position{existing->bucket, existing->slot_index};
  } else {
    RKV_ASSIGN_OR_RETURN(at, FreeSlotFor(nb, now));
  }
  const bool had_expiry = existing && RecordAt(existing->slot).expires_at_ms != 0;
  RKV_ASSIGN_OR_RETURN(const uint64_t slot,
                       PublishRecord(at, nb.fingerprint, key, value, version, expires_at_ms,
                                     existing ? existing->slot : layout::kEmptySlot, now));
  expiring_ += (expires_at_ms != 0 ? 1 : 0);
  expiring_ -= (had_expiry ? 1 : 0);
  if (existing) {
    heap_->Retire(layout::SlotBlockOffset(existing->slot), layout::SlotBlockBytes(existing->slot), now);
  } else {
    ++size_;
  }
  return Entry{at.bucket, at.slot_index, slot, version};
}

StatusOr<Table::Entry> Table::InsertAbsent(std::string_view key, std::string_view value, uint64_t version,
                                           uint64_t hash, Heap::Clock::time_point now, int64_t expires_at_ms) {
  const Neighborhood nb = NeighborhoodOf(hash, log2_);
  RKV_ASSIGN_OR_RETURN(const Position at, FreeSlotFor(nb, now));
  RKV_ASSIGN_OR_RETURN(const uint64_t slot,
                       PublishRecord(at, nb.fingerprint, key, value, version, expires_at_ms, layout::kEmptySlot, now));
  ++size_;
  if (expires_at_ms != 0) ++expiring_;
  return Entry{at.bucket, at.slot_index, slot, version};
}

void Table::Prefetch(uint64_t hash) const {
  const Neighborhood nb = NeighborhoodOf(hash, log2_);
  // A key lands in its home bucket or close after it: the first two buckets
  // cover nearly every insert at the loads the table is sized for.
  __builtin_prefetch(bucket(nb.first), /*rw=*/1);
  if (nb.count > 1) __builtin_prefetch(bucket(nb.first + 1), /*rw=*/1);
}

StatusOr<uint64_t> Table::Delete(std::string_view key, Heap::Clock::time_point now) {
  const std::optional<Entry> e = Lookup(key);
  if (!e) return NotFound("key not found");
  if (RecordAt(e->slot).expires_at_ms != 0) --expiring_;
  Supersede(e->slot);
  PublishSlot(bucket(e->bucket)->slots[e->slot_index], layout::kEmptySlot);
  heap_->Retire(layout::SlotBlockOffset(e->slot), layout::SlotBlockBytes(e->slot), now);
  --size_;
  return e->version;
}

}  // namespace rkv::server
