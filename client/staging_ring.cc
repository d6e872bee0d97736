#include "client/staging_ring.h"

#include "common/layout.h"

namespace rkv::client {

StagingRing::StagingRing(uint64_t capacity)
    : capacity_(capacity / layout::kBlockAlign * layout::kBlockAlign) {}

std::optional<uint64_t> StagingRing::Allocate(uint64_t bytes) {
  if (bytes == 0 || bytes > capacity_) return std::nullopt;
  bytes = (bytes + layout::kBlockAlign - 1) / layout::kBlockAlign * layout::kBlockAlign;
  uint64_t offset;
  if (live_.empty()) {
    head_ = 0;
    offset = 0;
  } else if (tail_ > head_) {
    // Not wrapped: room after the tail, else at the start before the head.
    if (capacity_ - tail_ >= bytes) {
      offset = tail_;
    } else if (head_ >= bytes) {
      offset = 0;
    } else {
      return std::nullopt;
    }
  } else {
    // Wrapped: the only room is between the tail and the head.
    if (head_ - tail_ < bytes) return std::nullopt;
    offset = tail_;
  }
  tail_ = offset + bytes;
  live_.push_back(Span{offset, bytes});
  return offset;
}

bool StagingRing::ReleaseOldest() {
  if (live_.empty()) return false;
  live_.pop_front();
  if (live_.empty()) {
    head_ = 0;
    tail_ = 0;
  } else {
    head_ = live_.front().offset;
  }
  return true;
}

}  // namespace rkv::client
