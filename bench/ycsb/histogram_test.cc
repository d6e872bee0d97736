#include "bench/ycsb/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace rkv::bench {
namespace {

constexpr double kPercentiles[] = {1, 10, 50, 90, 99, 99.9, 99.99, 100};

// Latencies from 50 ns to about 100 ms, log-uniform (every bucket size in
// play), with a fixed seed.
std::vector<uint64_t> Samples(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> exponent(std::log(50.0), std::log(1e8));
  std::vector<uint64_t> out(n);
  for (uint64_t& v : out) v = static_cast<uint64_t>(std::exp(exponent(rng)));
  return out;
}

void ExpectWithinBound(const Histogram& h, std::vector<uint64_t> values) {
  std::sort(values.begin(), values.end());
  for (double p : kPercentiles) {
    const uint64_t want = values[PercentileRank(p, values.size()) - 1];
    const double got = static_cast<double>(h.Percentile(p));
    EXPECT_LE(std::abs(got - static_cast<double>(want)), static_cast<double>(want) * Histogram::kMaxRelativeError)
        << "p" << p << ": got " << got << ", sorted reference " << want;
  }
  EXPECT_EQ(h.min(), values.front());
  EXPECT_EQ(h.max(), values.back());
  EXPECT_EQ(h.Percentile(100), values.back());
}

TEST(HistogramTest, PercentilesMatchSortedReferenceWithinStatedError) {
  EXPECT_LT(Histogram::kMaxRelativeError, 0.01);
  const std::vector<uint64_t> values = Samples(100'000, 7);
  Histogram h;
  for (uint64_t v : values) h.Record(v);
  EXPECT_EQ(h.count(), values.size());
  ExpectWithinBound(h, values);
  double sum = 0;
  for (uint64_t v : values) sum += static_cast<double>(v);
  EXPECT_NEAR(h.Mean(), sum / static_cast<double>(values.size()), 1e-6 * h.Mean());
}

TEST(HistogramTest, PercentileRankIsTheCeilingOfTheShare) {
  EXPECT_EQ(PercentileRank(50, 1000), 500u);
  EXPECT_EQ(PercentileRank(99, 1000), 990u);
  EXPECT_EQ(PercentileRank(99.9, 1000), 999u);  // not 1000: no rounding up past it
  EXPECT_EQ(PercentileRank(99.99, 1000), 1000u);
  EXPECT_EQ(PercentileRank(100, 1000), 1000u);
  EXPECT_EQ(PercentileRank(0.001, 10), 1u);
  EXPECT_EQ(PercentileRank(99, 1), 1u);
  EXPECT_EQ(PercentileRank(50, 0), 0u);
}

TEST(HistogramTest, SmallValuesAreExact) {
  Histogram h;
  for (uint64_t v = 1; v <= 100; ++v) h.Record(v);
  EXPECT_EQ(h.Percentile(50), 50u);
  EXPECT_EQ(h.Percentile(99), 99u);
  EXPECT_EQ(h.Percentile(100), 100u);
}

TEST(HistogramTest, MergeEqualsRecordingEverythingInOne) {
  const std::vector<uint64_t> values = Samples(40'000, 11);
  Histogram all;
  Histogram parts[4];
  for (size_t i = 0; i < values.size(); ++i) {
    all.Record(values[i]);
    parts[i % 4].Record(values[i]);
  }
  Histogram merged;
  for (const Histogram& part : parts) merged.Merge(part);
  EXPECT_EQ(merged.count(), all.count());
  EXPECT_EQ(merged.min(), all.min());
  EXPECT_EQ(merged.max(), all.max());
  EXPECT_DOUBLE_EQ(merged.Mean(), all.Mean());
  for (double p : kPercentiles) EXPECT_EQ(merged.Percentile(p), all.Percentile(p)) << "p" << p;
  ExpectWithinBound(merged, values);
}

TEST(HistogramTest, MergeWithEmptyChangesNothing) {
  Histogram h;
  h.Record(1000);
  h.Record(3000);
  Histogram empty;
  h.Merge(empty);
  EXPECT_EQ(h.count(), 2u);
  EXPECT_EQ(h.min(), 1000u);
  empty.Merge(h);
  EXPECT_EQ(empty.Percentile(100), 3000u);
  EXPECT_EQ(Histogram().Percentile(50), 0u);
}

TEST(HistogramTest, EveryValueLiesInItsBucketAndTheMidpointIsWithinBound) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 100'000; ++i) {
    const uint64_t v = rng() >> (rng() % 64);
    const size_t index = Histogram::BucketIndex(v);
    ASSERT_LT(index, Histogram::kBucketCount);
    const uint64_t low = Histogram::BucketLow(index);
    const uint64_t width = Histogram::BucketWidth(index);
    ASSERT_LE(low, v);
    ASSERT_LE(v - low, width - 1);
    const uint64_t mid = LogLinearBuckets<Histogram::kSubBucketBits>::Mid(index);
    ASSERT_LE(std::abs(static_cast<double>(mid) - static_cast<double>(v)),
              static_cast<double>(v) * Histogram::kMaxRelativeError)
        << v;
  }
}

}  // namespace
}  // namespace rkv::bench
