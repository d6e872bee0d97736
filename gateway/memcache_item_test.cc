#include "gateway/memcache_item.h"

#include <gtest/gtest.h>

#include <string>

namespace rkv::gateway {
namespace {

TEST(MemcacheItemTest, EncodeDecode) {
  const std::string data("a\0b\r\n", 5);
  const std::string v = EncodeItem(0xdeadbeef, 1'700'000'000'123, data);
  ASSERT_EQ(v.size(), kItemHeaderBytes + data.size());
  auto item = DecodeItem(v);
  ASSERT_TRUE(item.has_value());
  EXPECT_EQ(item->flags, 0xdeadbeefu);
  EXPECT_EQ(item->stored_unix_ms, 1'700'000'000'123);
  EXPECT_EQ(item->data, data);
  EXPECT_EQ(DecodeItem(EncodeItem(1, 2, "ab", "cd"))->data, "abcd");
  EXPECT_EQ(DecodeItem(EncodeItem(0, 0, ""))->data, "");
}

TEST(MemcacheItemTest, OtherValuesAreNotItems) {
  EXPECT_FALSE(DecodeItem("").has_value());
  EXPECT_FALSE(DecodeItem("hello world, a plain value").has_value());
  std::string v = EncodeItem(1, 2, "x");
  EXPECT_FALSE(DecodeItem(std::string_view(v).substr(0, kItemHeaderBytes - 1)).has_value());
  v[2] = 2;  // another format version
  EXPECT_FALSE(DecodeItem(v).has_value());
}

TEST(MemcacheItemTest, ExptimeRules) {
  const int64_t now = 1'700'000'000'000;
  EXPECT_EQ(ExptimeToDeadlineMs(0, now), 0);
  EXPECT_EQ(ExptimeToDeadlineMs(-1, now), 1);
  EXPECT_EQ(ExptimeToDeadlineMs(INT64_MIN, now), 1);
  EXPECT_EQ(ExptimeToDeadlineMs(1, now), now + 1000);
  EXPECT_EQ(ExptimeToDeadlineMs(kRelativeExptimeMaxSeconds, now), now + kRelativeExptimeMaxSeconds * 1000);
  // Beyond 30 days: an absolute Unix time; in the past, expired.
  EXPECT_EQ(ExptimeToDeadlineMs(kRelativeExptimeMaxSeconds + 1, now), 1);
  EXPECT_EQ(ExptimeToDeadlineMs(1'800'000'000, now), int64_t{1'800'000'000} * 1000);
  EXPECT_EQ(ExptimeToDeadlineMs(1'600'000'000, now), 1);
  EXPECT_GT(ExptimeToDeadlineMs(INT64_MAX, now), now);
}

TEST(MemcacheItemTest, CounterAsMemcachedReadsIt) {
  EXPECT_EQ(ParseCounter("10"), 10u);
  EXPECT_EQ(ParseCounter(" 12"), 12u);
  EXPECT_EQ(ParseCounter("+12"), 12u);
  EXPECT_EQ(ParseCounter("999 "), 999u);
  EXPECT_EQ(ParseCounter("12 3"), 12u);
  EXPECT_EQ(ParseCounter("18446744073709551615"), 18446744073709551615u);
  EXPECT_FALSE(ParseCounter("").has_value());
  EXPECT_FALSE(ParseCounter("abc").has_value());
  EXPECT_FALSE(ParseCounter("12a").has_value());
  EXPECT_FALSE(ParseCounter("-1").has_value());
  EXPECT_FALSE(ParseCounter("18446744073709551616").has_value());
  EXPECT_FALSE(ParseCounter(" ").has_value());
}

TEST(MemcacheItemTest, DeltaWrapsAndStops) {
  EXPECT_EQ(ApplyDelta(10, 5, true), 15u);
  EXPECT_EQ(ApplyDelta(18446744073709551615u, 1, true), 0u);
  EXPECT_EQ(ApplyDelta(18446744073709551615u, 2, true), 1u);
  EXPECT_EQ(ApplyDelta(10, 100, false), 0u);
  EXPECT_EQ(ApplyDelta(10, 3, false), 7u);
}

TEST(MemcacheItemTest, CounterDataIsPaddedInPlace) {
  EXPECT_EQ(CounterData(999, 4), "999 ");
  EXPECT_EQ(CounterData(0, 20), "0" + std::string(19, ' '));
  EXPECT_EQ(CounterData(100, 2), "100");
  EXPECT_EQ(CounterData(15, 2), "15");
}

TEST(MemcacheItemTest, FlushTimesRoundTrip) {
  const FlushTimes t{1, 2, 3};
  auto parsed = ParseFlushTimes(FormatFlushTimes(t));
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->applied, 1);
  EXPECT_EQ(parsed->pending, 2);
  EXPECT_EQ(parsed->pending_from, 3);
  EXPECT_FALSE(ParseFlushTimes("").has_value());
  EXPECT_FALSE(ParseFlushTimes("1 2").has_value());
  EXPECT_FALSE(ParseFlushTimes("1 2 x").has_value());
  EXPECT_FALSE(ParseFlushTimes("1 2 3 4").has_value());
}

TEST(MemcacheItemTest, ImmediateFlushHidesEverythingStoredBeforeItEvenInItsMillisecond) {
  const int64_t now = 1'000'000;
  FlushTimes t;
  EXPECT_EQ(FlushCutoff(t, now), 0);
  const int64_t before = StampAfter(now, FlushCutoff(t, now));
  EXPECT_FALSE(Flushed(before, FlushCutoff(t, now)));
  t = NextFlush(t, now, 0);
  const int64_t cutoff = FlushCutoff(t, now);
  EXPECT_TRUE(Flushed(before, cutoff));
  // Stored after the flush, in the same millisecond: seen.
  const int64_t after = StampAfter(now, cutoff);
  EXPECT_FALSE(Flushed(after, cutoff));
  // A second flush in that millisecond hides it in turn, at once.
  t = NextFlush(t, now, 0);
  EXPECT_TRUE(Flushed(after, FlushCutoff(t, now)));
  EXPECT_GT(FlushCutoff(t, now), cutoff);
  const int64_t third = StampAfter(now, FlushCutoff(t, now));
  EXPECT_FALSE(Flushed(third, FlushCutoff(t, now)));
  EXPECT_FALSE(Flushed(third, FlushCutoff(t, now + 5000)));
}

TEST(MemcacheItemTest, DelayedFlushTakesEffectAtItsTime) {
  const int64_t now = 1'000'000;
  FlushTimes t = NextFlush(FlushTimes{}, now, 0);  // an immediate one first
  const int64_t first = FlushCutoff(t, now);
  const int64_t stored = StampAfter(now + 10, first);
  t = NextFlush(t, now + 20, now + 60'000);
  // Until its time the first flush stays in force, and the item is seen.
  EXPECT_EQ(FlushCutoff(t, now + 20), first);
  EXPECT_FALSE(Flushed(stored, FlushCutoff(t, now + 59'999)));
  // From its time, every item stored before it is flushed.
  EXPECT_TRUE(Flushed(stored, FlushCutoff(t, now + 60'000)));
  EXPECT_TRUE(Flushed(StampAfter(now + 59'999, FlushCutoff(t, now + 59'999)), FlushCutoff(t, now + 60'000)));
  EXPECT_FALSE(Flushed(StampAfter(now + 60'001, FlushCutoff(t, now + 60'001)), FlushCutoff(t, now + 60'001)));
}

}  // namespace
}  // namespace rkv::gateway
