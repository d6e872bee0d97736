#include "bench/ycsb/histogram.h"

#include <algorithm>
#include <cmath>

namespace rkv::bench {

uint64_t PercentileRank(double p, uint64_t count) {
  if (count == 0) return 0;
  p = std::clamp(p, 0.0, 100.0);
  // Less a rounding margin, so that 99.9% of 1000 is rank 999, not 1000
  // (0.999 * 1000 is 999.0000000000001 in doubles).
  const double exact = p / 100.0 * static_cast<double>(count);
  const uint64_t rank = static_cast<uint64_t>(std::ceil(exact - 1e-9 * std::max(exact, 1.0)));
  return std::clamp<uint64_t>(rank, 1, count);
}

void Histogram::Merge(const Histogram& other) {
  for (size_t i = 0; i < kBucketCount; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  sum_ += other.sum_;
}

double Histogram::Mean() const {
  return count_ == 0 ? 0.0 : static_cast<double>(sum_) / static_cast<double>(count_);
}

uint64_t Histogram::Percentile(double p) const {
  if (count_ == 0) return 0;
  const uint64_t rank = PercentileRank(p, count_);
  if (rank == count_) return max_;  // exact
  uint64_t seen = 0;
  for (size_t i = 0; i < kBucketCount; ++i) {
    seen += buckets_[i];
    if (seen >= rank) return std::clamp(Buckets::Mid(i), min(), max_);
  }
  return max_;  // not reached: the buckets add up to count_
}

}  // namespace rkv::bench
