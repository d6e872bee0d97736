#include "server/table.h"

#include <atomic>
#include <cstring>
#include <string>

#include <glog/logging.h>

#include "common/hash.h"
#include "common/record.h"

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
  // Only the apply thread (holding the apply mutex) stores slots, so a
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

Table::Record Table::RecordAt(uint64_t slot) const {
  const uint8_t* p = heap_memory_.data() + layout::SlotBlockOffset(slot);
  layout::BlockHeader h;
  std::memcpy(&h, p, sizeof(h));
  const char* base = reinterpret_cast<const char*>(p) + layout::kBlockHeaderBytes;
  return Record{std::string_view(base, h.key_length), std::string_view(base + h.key_length, h.value_length),
                h.version};
}

bool Table::SlotHoldsKey(uint64_t slot, uint16_t fingerprint, std::string_view key) const {
  if (slot == layout::kEmptySlot || layout::SlotFingerprint(slot) != fingerprint) return false;
  return RecordAt(slot).key == key;
}

std::optional<Table::Entry> Table::Lookup(std::string_view key) const {
  const BucketChoice c = ChooseBuckets(TableHash(key, seed_), log2_);
  for (const uint64_t b : {c.b1, c.b2}) {
    layout::Bucket* bk = bucket(b);
    for (uint32_t i = 0; i < layout::kSlotsPerBucket; ++i) {
      const uint64_t s = LoadSlot(bk->slots[i]);
      if (SlotHoldsKey(s, c.fingerprint, key)) return Entry{b, i, s, RecordAt(s).version};
    }
    if (c.b2 == c.b1) break;
  }
  return std::nullopt;
}

bool Table::CanPlace(std::string_view key) const {
  if (Lookup(key)) return true;
  const BucketChoice c = ChooseBuckets(TableHash(key, seed_), log2_);
  for (const uint64_t b : {c.b1, c.b2}) {
    if (FreeSlotIn(b) >= 0) return true;
  }
  for (const uint64_t b : {c.b1, c.b2}) {
    if (const_cast<Table*>(this)->MakeRoom(b, kRelocationDepth, /*dry_run=*/true) >= 0) return true;
  }
  return false;
}

int Table::FreeSlotIn(uint64_t b) const {
  const layout::Bucket* bk = bucket(b);
  for (uint32_t i = 0; i < layout::kSlotsPerBucket; ++i) {
    if (LoadSlot(bk->slots[i]) == layout::kEmptySlot) return static_cast<int>(i);
  }
  return -1;
}

int Table::MakeRoom(uint64_t b, int depth, bool dry_run) {
  if (depth <= 0) return -1;
  layout::Bucket* bk = bucket(b);
  for (uint32_t i = 0; i < layout::kSlotsPerBucket; ++i) {
    const uint64_t s = LoadSlot(bk->slots[i]);
    if (s == layout::kEmptySlot) return static_cast<int>(i);
    // Only a key sitting in its first bucket may move, and only to its
    // second: see "Relocation" in table.h for why the direction matters.
    const BucketChoice kc = ChooseBuckets(TableHash(RecordAt(s).key, seed_), log2_);
    if (kc.b1 != b || kc.b2 == b) continue;
    int to = FreeSlotIn(kc.b2);
    if (to < 0) to = MakeRoom(kc.b2, depth - 1, dry_run);
    if (to < 0) continue;
    if (dry_run) return static_cast<int>(i);
    // Publish the key at its new place before clearing the old one, so a
    // reader that sees both finds the key twice, never not at all.
    PublishSlot(bucket(kc.b2)->slots[to], s);
    PublishSlot(bk->slots[i], layout::kEmptySlot);
    ++relocations_;
    return static_cast<int>(i);
  }
  return -1;
}

StatusOr<Table::Entry> Table::Upsert(std::string_view key, std::string_view value, uint64_t version,
                                     Heap::Clock::time_point now) {
  const BucketChoice c = ChooseBuckets(TableHash(key, seed_), log2_);
  std::optional<Entry> existing = Lookup(key);

  Entry target;
  if (existing) {
    target = *existing;
  } else {
    // The emptier candidate bucket, and its first free slot.
    int best_free = -1;
    for (const uint64_t b : {c.b1, c.b2}) {
      layout::Bucket* bk = bucket(b);
      int free_count = 0;
      int first_free = -1;
      for (uint32_t i = 0; i < layout::kSlotsPerBucket; ++i) {
        if (LoadSlot(bk->slots[i]) == layout::kEmptySlot) {
          if (first_free < 0) first_free = static_cast<int>(i);
          ++free_count;
        }
      }
      if (free_count > best_free) {
        best_free = free_count;
        target.bucket = b;
        target.slot_index = static_cast<uint32_t>(first_free);
      }
    }
    if (best_free <= 0) {
      // Both buckets full: move a key out of the way (b1 -> b2 moves only).
      // The moves are harmless if the heap refuses below: every key stays
      // reachable at its new place.
      for (const uint64_t b : {c.b1, c.b2}) {
        const int freed = MakeRoom(b, kRelocationDepth, /*dry_run=*/false);
        if (freed >= 0) {
          best_free = 1;
          target.bucket = b;
          target.slot_index = static_cast<uint32_t>(freed);
          break;
        }
      }
    }
    if (best_free <= 0) {
      return ResourceExhausted("table full: both candidate buckets of the key are full (" +
                               std::to_string(size_) + " keys in " + std::to_string(slot_count()) +
                               " slots; raise --max_keys)");
    }
  }

  const uint64_t block_bytes = layout::BlockBytes(key.size(), value.size());
  RKV_ASSIGN_OR_RETURN(const uint64_t offset, heap_->Allocate(block_bytes, now));
  // The block is private until published: plain stores are fine here.
  EncodeRecord(heap_memory_.subspan(offset, block_bytes), key, value, version, /*flags=*/0);
  const uint64_t slot = layout::MakeSlot(c.fingerprint, offset, block_bytes);
  PublishSlot(bucket(target.bucket)->slots[target.slot_index], slot);

  if (existing) {
    heap_->Retire(layout::SlotBlockOffset(existing->slot), layout::SlotBlockBytes(existing->slot), now);
  } else {
    ++size_;
  }
  target.slot = slot;
  target.version = version;
  return target;
}

StatusOr<uint64_t> Table::Delete(std::string_view key, Heap::Clock::time_point now) {
  const std::optional<Entry> e = Lookup(key);
  if (!e) return NotFound("key not found");
  PublishSlot(bucket(e->bucket)->slots[e->slot_index], layout::kEmptySlot);
  heap_->Retire(layout::SlotBlockOffset(e->slot), layout::SlotBlockBytes(e->slot), now);
  --size_;
  return e->version;
}

}  // namespace rkv::server
