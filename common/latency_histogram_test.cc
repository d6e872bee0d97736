#include "common/latency_histogram.h"

#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace rkv {
namespace latency_histogram_test {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

TEST(LatencyHistogramTest, ADurationFallsInTheFirstBucketWhoseBoundItDoesNotExceed) {
  EXPECT_EQ(LatencyHistogram::BucketOf(nanoseconds(-5)), 0u);
  EXPECT_EQ(LatencyHistogram::BucketOf(nanoseconds(0)), 0u);
  EXPECT_EQ(LatencyHistogram::BucketOf(microseconds(10)), 0u);           // on the bound: in it
  EXPECT_EQ(LatencyHistogram::BucketOf(microseconds(10) + nanoseconds(1)), 1u);
  EXPECT_EQ(LatencyHistogram::BucketOf(microseconds(400)), 5u);          // (250, 500]
  EXPECT_EQ(LatencyHistogram::BucketOf(std::chrono::seconds(10)), LatencyHistogram::kBuckets - 2);
  EXPECT_EQ(LatencyHistogram::BucketOf(std::chrono::seconds(11)), LatencyHistogram::kBuckets - 1);  // +Inf
}

TEST(LatencyHistogramTest, CountsAndSumAddUpAcrossThreads) {
  LatencyHistogram h;
  constexpr int kThreads = 4;
  constexpr int kEach = 10000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < kEach; ++i) h.Record(microseconds(t == 0 ? 5 : 300));
    });
  }
  for (std::thread& t : threads) t.join();
  const LatencyHistogram::Counts c = h.Read();
  EXPECT_EQ(c.count, uint64_t{kThreads} * kEach);
  EXPECT_EQ(c.buckets[0], uint64_t{kEach});
  EXPECT_EQ(c.buckets[5], uint64_t{kThreads - 1} * kEach);
  EXPECT_EQ(c.sum_ns, uint64_t{kEach} * 5'000 + uint64_t{kThreads - 1} * kEach * 300'000);
}

}  // namespace latency_histogram_test
}  // namespace rkv
