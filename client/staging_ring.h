// StagingRing: the client's bookkeeping of its staging ring on the server
// (common/protocol.h). The ring itself is remote memory; this class only
// decides at which offset the next record goes.
//
// The server processes a connection's requests in order, so space is freed
// in allocation order: the ring is a FIFO. Allocations are 64-byte aligned
// (layout::kBlockAlign) and never straddle the end: when the tail cannot
// hold a record it wraps to offset 0, and the unused end stays free until
// the ring drains past it.
//
// Invariants: with no live allocation, head_ == tail_ == 0. Otherwise head_
// is the offset of the oldest live allocation and tail_ the end of the
// newest; the live bytes are [head_, tail_) when tail_ > head_ and
// [head_, end of the newest allocation before the wrap) + [0, tail_) when
// tail_ <= head_ (wrapped; tail_ == head_ means full).
//
// Thread safety: none; the owning connection serializes use.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>

namespace rkv::client {

class StagingRing {
 public:
  // `capacity` is the ring's length in bytes, a multiple of 64.
  explicit StagingRing(uint64_t capacity);

  // Reserves `bytes` (rounded up to 64) and returns its offset, or nullopt
  // when the ring has no contiguous room for it now (or ever: zero bytes or
  // more than the capacity).
  std::optional<uint64_t> Allocate(uint64_t bytes);
  // Frees the oldest live allocation. Returns false when there is none.
  bool ReleaseOldest();

  uint64_t capacity() const { return capacity_; }
  size_t live() const { return live_.size(); }

 private:
  struct Span {
    uint64_t offset;
    uint64_t bytes;
  };
  uint64_t capacity_;
  uint64_t head_ = 0;
  uint64_t tail_ = 0;
  std::deque<Span> live_;
};

}  // namespace rkv::client
