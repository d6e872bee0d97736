#include "server/store/write_back_buffer.h"

#include <xxhash.h>

#include <algorithm>
#include <utility>

#include <glog/logging.h>

namespace rkv::server {

namespace {

constexpr uint64_t kIndexBits = 0xffffffffULL;

uint64_t SlotOf(uint64_t hash, size_t index) { return (hash & ~kIndexBits) | (static_cast<uint64_t>(index) + 1); }

}  // namespace

uint64_t BufferKeyHash(std::string_view key) { return XXH3_64bits(key.data(), key.size()); }

size_t WriteBackBuffer::Probe(std::string_view key, uint64_t hash) const {
  const size_t mask = slots_.size() - 1;
  const uint64_t tag = hash & ~kIndexBits;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const uint64_t slot = slots_[i];
    if (slot == 0) return i;
    if ((slot & ~kIndexBits) == tag && entries_[(slot & kIndexBits) - 1].key == key) return i;
  }
}

void WriteBackBuffer::Grow() {
  const size_t slot_count = std::max(kMinSlots, 2 * slots_.size());
  slots_.assign(slot_count, 0);
  const size_t mask = slot_count - 1;
  for (size_t e = 0; e < size_; ++e) {
    size_t i = entries_[e].hash & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = SlotOf(entries_[e].hash, e);
  }
}

WriteBackBuffer::Entry& WriteBackBuffer::Upsert(std::string_view key, bool* existed) {
  const uint64_t hash = BufferKeyHash(key);
  size_t slot = 0;
  if (!slots_.empty()) {
    slot = Probe(key, hash);
    if (slots_[slot] != 0) {
      *existed = true;
      return entries_[(slots_[slot] & kIndexBits) - 1];
    }
  }
  // Entry positions must fit the slot's 32 bits (Store holds at most
  // background_queue, a uint32_t, of them).
  CHECK_LT(size_, kIndexBits) << "write-back buffer full";
  // The empty slot the lookup ended at is the new key's, unless the index
  // grows: then every slot moves and the key is placed anew.
  if (2 * (size_ + 1) > slots_.size()) {
    Grow();
    slot = Probe(key, hash);
  }
  if (size_ == entries_.size()) entries_.emplace_back();
  Entry& entry = entries_[size_];
  entry.key.assign(key);
  entry.hash = hash;
  slots_[slot] = SlotOf(hash, size_);
  ++size_;
  *existed = false;
  return entry;
}

const WriteBackBuffer::Entry* WriteBackBuffer::Find(std::string_view key) const {
  if (slots_.empty()) return nullptr;
  const uint64_t slot = slots_[Probe(key, BufferKeyHash(key))];
  return slot == 0 ? nullptr : &entries_[(slot & kIndexBits) - 1];
}

void WriteBackBuffer::Clear() {
  if (size_ > 0) std::fill(slots_.begin(), slots_.end(), 0);
  size_ = 0;
  // Keep buffers for reuse up to the budget; an oversized entry's are
  // freed, and every entry past the budget goes.
  uint64_t kept = 0;
  size_t keep = 0;
  for (; keep < entries_.size(); ++keep) {
    Entry& e = entries_[keep];
    uint64_t bytes = e.key.capacity() + e.value.capacity();
    if (bytes > kKeptEntryBytes) {
      std::string().swap(e.key);
      std::string().swap(e.value);
      bytes = e.key.capacity() + e.value.capacity();
    }
    if (kept + bytes > kSpareBytes) break;
    kept += bytes;
  }
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(keep), entries_.end());
}

void WriteBackBuffer::swap(WriteBackBuffer& other) noexcept {
  entries_.swap(other.entries_);
  std::swap(size_, other.size_);
  slots_.swap(other.slots_);
}

uint64_t WriteBackBuffer::MemoryBytes() const {
  uint64_t bytes = entries_.capacity() * sizeof(Entry) + slots_.capacity() * sizeof(uint64_t);
  for (const Entry& e : entries_) bytes += e.key.capacity() + e.value.capacity();
  return bytes;
}

}  // namespace rkv::server
