#include "server/table/heap.h"

#include <algorithm>
#include <array>
#include <string>

#include <glog/logging.h>

namespace rkv::server {
namespace {

constexpr int kSmallClasses = 16;      // 64 .. 1024 in 64-byte steps
constexpr int kFirstLargeLog2 = 10;    // large classes subdivide 2^10 .. 2^22
constexpr int kLastLargeLog2 = 21;
constexpr int kSubClasses = 4;
constexpr int kClassCount = kSmallClasses + (kLastLargeLog2 - kFirstLargeLog2 + 1) * kSubClasses;

constexpr std::array<uint64_t, kClassCount> MakeClasses() {
  std::array<uint64_t, kClassCount> c{};
  int i = 0;
  for (int s = 1; s <= kSmallClasses; ++s) c[i++] = uint64_t(s) * layout::kBlockAlign;
  for (int k = kFirstLargeLog2; k <= kLastLargeLog2; ++k) {
    const uint64_t base = uint64_t{1} << k;
    for (int q = 1; q <= kSubClasses; ++q) {
      c[i++] = std::min<uint64_t>(base + q * (base / kSubClasses), layout::kMaxBlockBytes);
    }
  }
  return c;
}

constexpr std::array<uint64_t, kClassCount> kClasses = MakeClasses();
static_assert(kClasses[kSmallClasses - 1] == 1024);
static_assert(kClasses[kSmallClasses] == 1280);
static_assert(kClasses[kClassCount - 1] == layout::kMaxBlockBytes);
static_assert(kClasses[kClassCount - 2] < layout::kMaxBlockBytes);

constexpr bool ClassesAreAlignedAndAscending() {
  for (int i = 0; i < kClassCount; ++i) {
    if (kClasses[i] % layout::kBlockAlign != 0) return false;
    if (i > 0 && kClasses[i] <= kClasses[i - 1]) return false;
  }
  return true;
}
static_assert(ClassesAreAlignedAndAscending());

}  // namespace

Heap::Heap(uint64_t capacity_bytes, Clock::duration grace_period)
    : capacity_(std::min(capacity_bytes, layout::kMaxHeapBytes) / layout::kBlockAlign *
                layout::kBlockAlign),
      grace_(grace_period),
      free_lists_(kClassCount) {}

int Heap::ClassCount() { return kClassCount; }

uint64_t Heap::ClassBytes(int c) { return kClasses[c]; }

int Heap::ClassOf(uint64_t bytes) {
  if (bytes == 0 || bytes > layout::kMaxBlockBytes) return -1;
  if (bytes <= 1024) return static_cast<int>((bytes + layout::kBlockAlign - 1) / layout::kBlockAlign) - 1;
  const auto it = std::lower_bound(kClasses.begin() + kSmallClasses, kClasses.end(), bytes);
  return static_cast<int>(it - kClasses.begin());
}

StatusOr<uint64_t> Heap::Allocate(uint64_t bytes, Clock::time_point now) {
  const int c = ClassOf(bytes);
  if (c < 0) {
    return InvalidArgument("heap block of " + std::to_string(bytes) + " bytes is out of range (1.." +
                           std::to_string(layout::kMaxBlockBytes) + ")");
  }
  ReclaimExpired(now);
  const uint64_t class_bytes = kClasses[c];
  auto& list = free_lists_[c];
  if (!list.empty()) {
    const uint64_t offset = list.back();
    list.pop_back();
    free_list_bytes_ -= class_bytes;
    used_bytes_ += class_bytes;
    return offset;
  }
  if (capacity_ - bump_ >= class_bytes) {
    const uint64_t offset = bump_;
    bump_ += class_bytes;
    used_bytes_ += class_bytes;
    return offset;
  }
  return ResourceExhausted("heap full: no free " + std::to_string(class_bytes) + "-byte block (" +
                           std::to_string(used_bytes_) + " bytes live, " +
                           std::to_string(quarantined_bytes_) + " in quarantine, " +
                           std::to_string(capacity_ - bump_) + " uncarved of " +
                           std::to_string(capacity_) + ")");
}

void Heap::FreeUnpublished(uint64_t offset, uint64_t bytes) {
  const int c = ClassOf(bytes);
  CHECK_GE(c, 0) << "block length " << bytes << " never came from Allocate";
  used_bytes_ -= kClasses[c];
  free_lists_[c].push_back(offset);
  free_list_bytes_ += kClasses[c];
}

void Heap::Retire(uint64_t offset, uint64_t bytes, Clock::time_point now) {
  const int c = ClassOf(bytes);
  CHECK_GE(c, 0) << "block length " << bytes << " never came from Allocate";
  used_bytes_ -= kClasses[c];
  quarantined_bytes_ += kClasses[c];
  // `now` comes from a steady clock, so reusable_at ascends along the FIFO.
  quarantine_.push_back(Quarantined{offset, c, now + grace_});
}

void Heap::ReclaimExpired(Clock::time_point now) {
  while (!quarantine_.empty() && quarantine_.front().reusable_at <= now) {
    const Quarantined q = quarantine_.front();
    quarantine_.pop_front();
    quarantined_bytes_ -= kClasses[q.size_class];
    free_lists_[q.size_class].push_back(q.offset);
    free_list_bytes_ += kClasses[q.size_class];
  }
}

std::optional<Heap::Clock::time_point> Heap::ReclaimableAt() const {
  if (quarantine_.empty()) return std::nullopt;
  return quarantine_.front().reusable_at;
}

Heap::Stats Heap::stats() const {
  Stats s;
  s.used_bytes = used_bytes_;
  s.quarantined_bytes = quarantined_bytes_;
  s.free_bytes = capacity_ - used_bytes_ - quarantined_bytes_;
  s.free_list_bytes = free_list_bytes_;
  s.quarantined_blocks = quarantine_.size();
  return s;
}

}  // namespace rkv::server
