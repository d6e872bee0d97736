// A log-linear latency histogram for the benchmark.
//
// Values (nanoseconds, any uint64_t) fall into buckets whose width is 1/128
// of their power-of-two range: values below 128 have one bucket each, and a
// value v >= 128 with floor(log2(v)) = e lands in one of 128 equal buckets
// covering [2^e, 2^(e+1)). A bucket is reported by its midpoint, so a
// reported percentile is within 1/256 (0.4%) of a value that was recorded
// at that rank. Count, minimum, maximum and sum are exact.
//
// Thread safety: none. Each benchmark thread records into its own
// histogram; Merge() combines them after the threads have been joined.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace rkv::bench {

class Histogram {
 public:
  // Sub-buckets per power of two (a power of two itself).
  static constexpr int kSubBucketBits = 7;
  static constexpr uint64_t kSubBuckets = uint64_t{1} << kSubBucketBits;
  // Values below kSubBuckets, then kSubBuckets buckets for each exponent
  // kSubBucketBits..63.
  static constexpr size_t kBucketCount = kSubBuckets + (64 - kSubBucketBits) * kSubBuckets;

  Histogram() = default;

  // Inline, like BucketIndex: it runs between two timed operations.
  void Record(uint64_t value) {
    ++buckets_[BucketIndex(value)];
    ++count_;
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
    sum_ += value;
  }
  // Adds every value recorded in `other`.
  void Merge(const Histogram& other);

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ == 0 ? 0 : min_; }
  uint64_t max() const { return max_; }
  double Mean() const;

  // The value at percentile `p` (0 < p <= 100): the smallest recorded value
  // v such that at least p% of the values are <= v, reported as the
  // midpoint of its bucket and clamped to [min, max]. 0 when empty.
  uint64_t Percentile(double p) const;

  // Bucket arithmetic, exposed so that its contract can be checked.
  static size_t BucketIndex(uint64_t value) {
    if (value < kSubBuckets) return static_cast<size_t>(value);
    const int exponent = 63 - std::countl_zero(value);  // >= kSubBucketBits
    const int shift = exponent - kSubBucketBits;
    // The top kSubBucketBits+1 bits of value, less the leading one.
    const uint64_t sub = (value >> shift) - kSubBuckets;
    return static_cast<size_t>(kSubBuckets + static_cast<uint64_t>(shift) * kSubBuckets + sub);
  }
  static uint64_t BucketLow(size_t index);
  static uint64_t BucketWidth(size_t index);

 private:
  std::array<uint64_t, kBucketCount> buckets_{};
  uint64_t count_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
  // The sum saturates near 1.8e19 ns (584 years of latency): not a concern.
  uint64_t sum_ = 0;
};

}  // namespace rkv::bench
