// ForEachRecord: one pass over every record a Table's index references,
// for the Applier's read-only passes (replica verification in
// apply_digest.cc, the catch-up snapshot in apply_catchup.cc).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/layout.h"
#include "server/table/table.h"

namespace rkv::server {

// As ForEachRecord, for the records of buckets [first, first + count) only
// (clipped to the table).
template <typename Fn>
void ForEachRecordIn(const Table& table, uint64_t first, uint64_t count, Fn&& fn) {
  const auto* index = reinterpret_cast<const uint8_t*>(&table.header());
  const uint64_t buckets = table.bucket_count();
  const uint64_t end = first >= buckets ? first : first + std::min(count, buckets - first);
  for (uint64_t b = first; b < end; ++b) {
    const auto* bucket = reinterpret_cast<const layout::Bucket*>(index + layout::BucketOffset(b));
    for (size_t i = 0; i < layout::kSlotsPerBucket; ++i) {
      // Only the apply path stores slots, under the mutex the caller holds.
      const uint64_t slot =
          std::atomic_ref<uint64_t>(const_cast<uint64_t&>(bucket->slots[i])).load(std::memory_order_relaxed);
      if (slot != layout::kEmptySlot) fn(table.RecordAt(slot));
    }
  }
}


// Calls fn(record) for every record the table's index references. The
// caller holds table_mu_: no slot changes during the pass, so every
// key is seen exactly once. The index is walked through the layout
// contract (common/layout.h) from the header's address, as a client would.
template <typename Fn>
void ForEachRecord(const Table& table, Fn&& fn) {
  ForEachRecordIn(table, 0, table.bucket_count(), fn);
}

}  // namespace rkv::server
