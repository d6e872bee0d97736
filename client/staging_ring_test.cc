#include "client/staging_ring.h"

#include <gtest/gtest.h>

namespace rkv::client {
namespace {

TEST(StagingRingTest, AllocatesInOrderAndRoundsUpTo64) {
  StagingRing ring(1024);
  EXPECT_EQ(ring.Allocate(1), 0u);
  EXPECT_EQ(ring.Allocate(64), 64u);
  EXPECT_EQ(ring.Allocate(65), 128u);
  EXPECT_EQ(ring.Allocate(100), 256u);
  EXPECT_EQ(ring.live(), 4u);
}

TEST(StagingRingTest, RejectsZeroAndOversized) {
  StagingRing ring(1024);
  EXPECT_FALSE(ring.Allocate(0).has_value());
  EXPECT_FALSE(ring.Allocate(1025).has_value());
  EXPECT_EQ(ring.Allocate(1024), 0u);
}

TEST(StagingRingTest, FullUntilTheOldestIsReleased) {
  StagingRing ring(256);
  EXPECT_EQ(ring.Allocate(128), 0u);
  EXPECT_EQ(ring.Allocate(128), 128u);
  EXPECT_FALSE(ring.Allocate(64).has_value());
  ASSERT_TRUE(ring.ReleaseOldest());
  // Freed space at the start is reused by wrapping.
  EXPECT_EQ(ring.Allocate(64), 0u);
  EXPECT_EQ(ring.Allocate(64), 64u);
  EXPECT_FALSE(ring.Allocate(64).has_value());  // wrapped and full
}

TEST(StagingRingTest, WrapsWhenTheTailCannotHoldTheRecord) {
  StagingRing ring(512);
  EXPECT_EQ(ring.Allocate(192), 0u);
  EXPECT_EQ(ring.Allocate(192), 192u);
  ASSERT_TRUE(ring.ReleaseOldest());
  // 128 bytes left at the end: a 192-byte record goes to offset 0 instead
  // of straddling the end.
  EXPECT_EQ(ring.Allocate(192), 0u);
  // Between the wrapped tail (192) and the head (192): no room.
  EXPECT_FALSE(ring.Allocate(64).has_value());
  ASSERT_TRUE(ring.ReleaseOldest());  // frees [192, 384); head moves to 0
  // Not wrapped any more: the tail region [192, 512) is free again.
  EXPECT_EQ(ring.Allocate(320), 192u);
  EXPECT_FALSE(ring.Allocate(64).has_value());
}

TEST(StagingRingTest, ReleasesInFifoOrder) {
  StagingRing ring(256);
  EXPECT_EQ(ring.Allocate(64), 0u);
  EXPECT_EQ(ring.Allocate(64), 64u);
  EXPECT_EQ(ring.Allocate(128), 128u);
  ASSERT_TRUE(ring.ReleaseOldest());  // [0, 64)
  // Only the oldest went: 64 bytes free at the start, none at the end.
  EXPECT_FALSE(ring.Allocate(128).has_value());
  EXPECT_EQ(ring.Allocate(64), 0u);
  ASSERT_TRUE(ring.ReleaseOldest());  // [64, 128)
  ASSERT_TRUE(ring.ReleaseOldest());  // [128, 256)
  EXPECT_EQ(ring.live(), 1u);
  // Live is [0, 64): the rest of the ring is free after it.
  EXPECT_EQ(ring.Allocate(192), 64u);
}

TEST(StagingRingTest, EmptyRingRestartsAtZero) {
  StagingRing ring(256);
  EXPECT_EQ(ring.Allocate(64), 0u);
  EXPECT_EQ(ring.Allocate(64), 64u);
  ASSERT_TRUE(ring.ReleaseOldest());
  ASSERT_TRUE(ring.ReleaseOldest());
  EXPECT_FALSE(ring.ReleaseOldest());
  EXPECT_EQ(ring.Allocate(256), 0u);
}

TEST(StagingRingTest, LongRunNeverOverlapsLiveAllocations) {
  StagingRing ring(1024);
  struct Live {
    uint64_t offset;
    uint64_t bytes;
  };
  std::vector<Live> live;  // FIFO mirror
  uint64_t sizes[] = {64, 128, 320, 64, 448, 192, 64, 512};
  for (int i = 0; i < 2000; ++i) {
    const uint64_t bytes = sizes[i % 8];
    auto offset = ring.Allocate(bytes);
    if (!offset) {
      ASSERT_FALSE(live.empty()) << "an empty ring refused " << bytes;
      ASSERT_TRUE(ring.ReleaseOldest());
      live.erase(live.begin());
      continue;
    }
    ASSERT_EQ(*offset % 64, 0u);
    ASSERT_LE(*offset + bytes, 1024u);
    for (const Live& l : live) {
      ASSERT_TRUE(*offset + bytes <= l.offset || l.offset + l.bytes <= *offset)
          << "overlap at step " << i;
    }
    live.push_back({*offset, bytes});
  }
}

}  // namespace
}  // namespace rkv::client
