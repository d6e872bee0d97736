// The value heap: a size-class allocator over the heap region
// (common/layout.h). It hands out 64-byte aligned blocks by offset and never
// touches the memory itself; the table writes the blocks.
//
// Size classes (every block length is a multiple of layout::kBlockAlign):
//   - 64 B steps up to 1 KiB: 64, 128, ..., 1024 (16 classes). A block
//     length (already a multiple of 64) fits its class exactly: no waste.
//   - above 1 KiB, 4 classes per power of two: 2^k * {1.25, 1.5, 1.75, 2}
//     for k = 10 .. 21, the last one capped at layout::kMaxBlockBytes. A
//     block is rounded up to the next class, so the waste is under a quarter
//     of the block and at most a fifth of the class (e.g. a 1088-byte block
//     takes a 1280-byte class: 192 bytes, 15%).
// Memory is carved from the bottom of the heap by a bump pointer and, once
// carved for a class, stays in that class: a freed block goes back to its
// class's free list, and blocks are never split or merged. A workload whose
// value sizes shift a lot can therefore run out of bump space while other
// classes still hold free blocks (Allocate then fails; the stats show it).
//
// Retire and the quarantine: a block that a slot stopped referencing may
// still be read by a client that fetched the old slot word. Retire(offset,
// bytes, now) puts it in a FIFO quarantine; it joins its free list only
// once `now` has passed the retire time plus the grace period. Clients
// accept a block only within a lease of half the grace period since they
// read the slot, so a reused block is never accepted as the old value.
//
// Full heap: Allocate first reclaims every expired quarantined block, then
// tries the class's free list, then the bump pointer; when all fail it
// returns RESOURCE_EXHAUSTED and changes nothing. When quarantined blocks
// are pending (ReclaimableAt() has a value), waiting until that time and
// retrying may succeed: the apply path does so once (server/apply/apply.h), so a
// heap that is full only because of recent replaces delays a PUT by at
// most one grace period instead of refusing it.
//
// Thread safety: not thread-safe. The server calls it only under the apply
// mutex (server/apply/apply.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "common/layout.h"
#include "common/status.h"

namespace rkv::server {

class Heap {
 public:
  using Clock = std::chrono::steady_clock;

  struct Stats {
    uint64_t used_bytes = 0;         // class bytes of live (allocated) blocks
    uint64_t quarantined_bytes = 0;  // class bytes retired, grace not yet over
    uint64_t free_bytes = 0;         // capacity - used - quarantined
    uint64_t free_list_bytes = 0;    // part of free_bytes already carved into classes
    uint64_t quarantined_blocks = 0;
  };

  // Manages offsets [0, capacity_bytes). capacity_bytes is rounded down to
  // a multiple of layout::kBlockAlign and must be <= layout::kMaxHeapBytes.
  Heap(uint64_t capacity_bytes, Clock::duration grace_period);

  Heap(const Heap&) = delete;
  Heap& operator=(const Heap&) = delete;

  // Number of size classes, and the bytes of class `c`.
  static int ClassCount();
  static uint64_t ClassBytes(int c);
  // The class that holds a block of `bytes` (1 .. layout::kMaxBlockBytes),
  // or -1 when `bytes` is 0 or over kMaxBlockBytes.
  static int ClassOf(uint64_t bytes);

  // Allocates a block able to hold `bytes` (1 .. layout::kMaxBlockBytes);
  // returns its offset (a multiple of 64). INVALID_ARGUMENT for a size out
  // of range, RESOURCE_EXHAUSTED when no block is available (nothing
  // changed then, apart from reclaiming expired quarantine).
  StatusOr<uint64_t> Allocate(uint64_t bytes, Clock::time_point now);

  // Returns a block that no slot ever published (e.g. a write that was
  // undone) straight to its free list: no reader can hold it.
  void FreeUnpublished(uint64_t offset, uint64_t bytes);

  // Quarantines a block that a slot referenced until now; it is reused only
  // after now + grace period. `bytes` is the length given to Allocate (or
  // any length of the same class, e.g. the slot's block length).
  void Retire(uint64_t offset, uint64_t bytes, Clock::time_point now);

  // Moves every quarantined block whose grace period is over at `now` to
  // its free list. Allocate calls it; exposed for tests and stats.
  void ReclaimExpired(Clock::time_point now);

  // When the oldest quarantined block becomes reusable; nullopt when the
  // quarantine is empty.
  std::optional<Clock::time_point> ReclaimableAt() const;

  Stats stats() const;
  uint64_t capacity() const { return capacity_; }
  Clock::duration grace_period() const { return grace_; }

 private:
  struct Quarantined {
    uint64_t offset;
    int size_class;
    Clock::time_point reusable_at;
  };

  uint64_t capacity_;
  Clock::duration grace_;
  uint64_t bump_ = 0;  // bytes [0, bump_) are carved into blocks
  std::vector<std::vector<uint64_t>> free_lists_;  // per class: offsets
  std::deque<Quarantined> quarantine_;             // FIFO: reusable_at ascends
  uint64_t used_bytes_ = 0;
  uint64_t quarantined_bytes_ = 0;
  uint64_t free_list_bytes_ = 0;
};

}  // namespace rkv::server
