#include "common/layout.h"

#include <gtest/gtest.h>

namespace rkv::layout {
namespace {

TEST(LayoutTest, SlotRoundTripsEveryField) {
  const uint64_t offsets[] = {0, 64, 64 * 12345, kMaxHeapBytes - kBlockAlign};
  const uint64_t lengths[] = {64, 128, kMaxBlockBytes};
  for (uint64_t off : offsets) {
    for (uint64_t len : lengths) {
      for (uint16_t fp : {uint16_t{0}, uint16_t{1}, uint16_t{0xFFFF}}) {
        const uint64_t s = MakeSlot(fp, off, len);
        EXPECT_NE(s, kEmptySlot);
        EXPECT_EQ(SlotFingerprint(s), fp);
        EXPECT_EQ(SlotBlockOffset(s), off);
        EXPECT_EQ(SlotBlockBytes(s), len);
      }
    }
  }
}

TEST(LayoutTest, BlockSizes) {
  EXPECT_EQ(BlockBytes(1, 0), 64u);
  EXPECT_EQ(BlockBytes(32, 0), 64u);
  EXPECT_EQ(BlockBytes(33, 0), 128u);
  EXPECT_EQ(RecordBytes(3, 5), kBlockHeaderBytes + 8);
  EXPECT_LE(BlockBytes(1024, 1 << 20), kMaxBlockBytes);
}

TEST(LayoutTest, IndexGeometry) {
  EXPECT_EQ(BucketOffset(0), 64u);
  EXPECT_EQ(BucketOffset(3), 64u + 3 * 64);
  EXPECT_EQ(IndexBytes(1024), 64u + 1024 * 64);
  EXPECT_EQ(BucketOffset(0) % kCacheLine, 0u);
}

}  // namespace
}  // namespace rkv::layout
