#include "server/table/heap.h"

#include <set>

#include <gtest/gtest.h>

namespace rkv::server {
namespace {

using namespace std::chrono_literals;
using Clock = Heap::Clock;

TEST(HeapTest, ClassesCoverEveryBlockLengthTightly) {
  for (uint64_t bytes = layout::kBlockAlign; bytes <= layout::kMaxBlockBytes; bytes += layout::kBlockAlign) {
    const int c = Heap::ClassOf(bytes);
    ASSERT_GE(c, 0) << bytes;
    const uint64_t cls = Heap::ClassBytes(c);
    ASSERT_GE(cls, bytes);
    ASSERT_EQ(cls % layout::kBlockAlign, 0u);
    if (c > 0) {
      ASSERT_LT(Heap::ClassBytes(c - 1), bytes) << "not the smallest class for " << bytes;
    }
    if (bytes <= 1024) {
      ASSERT_EQ(cls, bytes) << "small blocks fit their class exactly";
    } else {
      // Documented bound: at most a fifth of the class is padding.
      ASSERT_LE((cls - bytes) * 5, cls) << bytes;
    }
  }
  EXPECT_EQ(Heap::ClassBytes(Heap::ClassCount() - 1), layout::kMaxBlockBytes);
  EXPECT_EQ(Heap::ClassOf(0), -1);
  EXPECT_EQ(Heap::ClassOf(layout::kMaxBlockBytes + 1), -1);
  EXPECT_EQ(Heap::ClassOf(1), 0);
}

TEST(HeapTest, AllocatesAlignedDisjointBlocks) {
  Heap heap(1 << 20, 100ms);
  const Clock::time_point now = Clock::now();
  std::set<std::pair<uint64_t, uint64_t>> blocks;
  for (uint64_t bytes : {64, 128, 64, 1088, 4096, 100, 64}) {
    auto off = heap.Allocate(bytes, now);
    ASSERT_TRUE(off.ok()) << off.status();
    EXPECT_EQ(*off % layout::kBlockAlign, 0u);
    const uint64_t len = Heap::ClassBytes(Heap::ClassOf(bytes));
    EXPECT_LE(*off + len, heap.capacity());
    for (const auto& [o, l] : blocks) {
      EXPECT_TRUE(*off + len <= o || o + l <= *off) << "overlap at " << *off;
    }
    blocks.insert({*off, len});
  }
  uint64_t total = 0;
  for (const auto& b : blocks) total += b.second;
  EXPECT_EQ(heap.stats().used_bytes, total);
  EXPECT_EQ(heap.stats().free_bytes, heap.capacity() - total);
}

TEST(HeapTest, RejectsSizesOutOfRange) {
  Heap heap(1 << 20, 100ms);
  EXPECT_EQ(heap.Allocate(0, Clock::now()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(heap.Allocate(layout::kMaxBlockBytes + 64, Clock::now()).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(HeapTest, RetiredBlockIsReusedOnlyAfterTheGracePeriod) {
  // Room for exactly two 1 KiB blocks.
  Heap heap(2048, 100ms);
  const Clock::time_point t0 = Clock::now();
  auto a = heap.Allocate(1024, t0);
  auto b = heap.Allocate(1024, t0);
  ASSERT_TRUE(a.ok() && b.ok());
  heap.Retire(*a, 1024, t0);
  EXPECT_EQ(heap.stats().quarantined_bytes, 1024u);
  EXPECT_EQ(heap.stats().used_bytes, 1024u);
  ASSERT_TRUE(heap.ReclaimableAt().has_value());
  EXPECT_EQ(*heap.ReclaimableAt(), t0 + 100ms);

  // Within the grace period: full, and the refusal changes nothing.
  auto c = heap.Allocate(1024, t0 + 99ms);
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(heap.stats().quarantined_bytes, 1024u);

  // At the end of it: the block comes back.
  auto d = heap.Allocate(1024, t0 + 100ms);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, *a);
  EXPECT_EQ(heap.stats().quarantined_bytes, 0u);
  EXPECT_FALSE(heap.ReclaimableAt().has_value());
}

TEST(HeapTest, QuarantineIsFifo) {
  Heap heap(1 << 16, 10ms);
  const Clock::time_point t0 = Clock::now();
  auto a = heap.Allocate(64, t0);
  auto b = heap.Allocate(64, t0);
  ASSERT_TRUE(a.ok() && b.ok());
  heap.Retire(*a, 64, t0);
  heap.Retire(*b, 64, t0 + 5ms);
  heap.ReclaimExpired(t0 + 12ms);
  EXPECT_EQ(heap.stats().quarantined_blocks, 1u);
  EXPECT_EQ(*heap.ReclaimableAt(), t0 + 15ms);
  EXPECT_EQ(heap.stats().free_list_bytes, 64u);
  heap.ReclaimExpired(t0 + 15ms);
  EXPECT_EQ(heap.stats().quarantined_blocks, 0u);
  EXPECT_EQ(heap.stats().free_list_bytes, 128u);
}

TEST(HeapTest, UnpublishedBlockIsReusableAtOnce) {
  Heap heap(64, 100ms);
  const Clock::time_point t0 = Clock::now();
  auto a = heap.Allocate(64, t0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(heap.Allocate(64, t0).status().code(), StatusCode::kResourceExhausted);
  heap.FreeUnpublished(*a, 64);
  auto b = heap.Allocate(64, t0);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, *a);
}

TEST(HeapTest, FreedBlocksStayInTheirClass) {
  // A freed 64-byte block does not serve a 128-byte request (documented).
  Heap heap(128, 1ms);
  const Clock::time_point t0 = Clock::now();
  auto a = heap.Allocate(64, t0);
  auto b = heap.Allocate(64, t0);
  ASSERT_TRUE(a.ok() && b.ok());
  heap.FreeUnpublished(*a, 64);
  EXPECT_EQ(heap.Allocate(128, t0).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(heap.Allocate(64, t0).ok());
}

TEST(HeapTest, CapacityIsRoundedToBlocks) {
  Heap heap(1000, 1ms);
  EXPECT_EQ(heap.capacity(), 960u);
  EXPECT_EQ(heap.stats().free_bytes, 960u);
}

}  // namespace
}  // namespace rkv::server
