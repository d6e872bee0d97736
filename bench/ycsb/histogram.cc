#include "bench/ycsb/histogram.h"

#include <algorithm>
#include <cmath>

namespace rkv::bench {

uint64_t Histogram::BucketLow(size_t index) {
  if (index < kSubBuckets) return index;
  const uint64_t shift = (index - kSubBuckets) / kSubBuckets;
  const uint64_t sub = (index - kSubBuckets) % kSubBuckets;
  return (kSubBuckets + sub) << shift;
}

uint64_t Histogram::BucketWidth(size_t index) {
  if (index < kSubBuckets) return 1;
  return uint64_t{1} << ((index - kSubBuckets) / kSubBuckets);
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
  p = std::clamp(p, 0.0, 100.0);
  // Rank of the wanted value, 1-based: ceil(p% of count), at least 1.
  uint64_t rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_)));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  uint64_t seen = 0;
  for (size_t i = 0; i < kBucketCount; ++i) {
    seen += buckets_[i];
    if (seen >= rank) {
      const uint64_t mid = BucketLow(i) + BucketWidth(i) / 2;
      return std::clamp(mid, min(), max_);
    }
  }
  return max_;  // not reached: the buckets add up to count_
}

}  // namespace rkv::bench
