// A log-linear latency histogram for the benchmark, in the manner of
// HdrHistogram.
//
// Values (nanoseconds, any uint64_t) fall into buckets whose width is 1/128
// of their power-of-two range: values below 128 have one bucket each, and a
// value v >= 128 with floor(log2(v)) = e lands in one of 128 equal buckets
// covering [2^e, 2^(e+1)). A bucket is reported by its midpoint, so a
// reported percentile is within 1/256 (0.4%, kMaxRelativeError) of a value
// that was recorded at that rank. Count, minimum, maximum and sum are exact.
// Histograms of the same kind merge exactly (bucket by bucket).
//
// The bucket arithmetic is LogLinearBuckets<kSubBucketBits>, shared with
// the coarser counters of the progress line (bench/ycsb/progress.h).
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

// Log-linear bucket arithmetic: 2^SubBucketBits buckets per power of two,
// values below 2^SubBucketBits one bucket each. A bucket's midpoint is
// within 2^-(SubBucketBits+1) of any value in it, relatively.
template <int SubBucketBits>
struct LogLinearBuckets {
  static_assert(SubBucketBits >= 1 && SubBucketBits < 32);
  static constexpr uint64_t kSubBuckets = uint64_t{1} << SubBucketBits;
  // Values below kSubBuckets, then kSubBuckets buckets for each exponent
  // SubBucketBits..63.
  static constexpr size_t kCount = kSubBuckets + (64 - SubBucketBits) * kSubBuckets;
  static constexpr double kMaxRelativeError = 1.0 / static_cast<double>(2 * kSubBuckets);

  // Inline: it runs between two timed operations.
  static constexpr size_t Index(uint64_t value) {
    if (value < kSubBuckets) return static_cast<size_t>(value);
    const int exponent = 63 - std::countl_zero(value);  // >= SubBucketBits
    const int shift = exponent - SubBucketBits;
    // The top SubBucketBits+1 bits of value, less the leading one.
    const uint64_t sub = (value >> shift) - kSubBuckets;
    return static_cast<size_t>(kSubBuckets + static_cast<uint64_t>(shift) * kSubBuckets + sub);
  }
  static constexpr uint64_t Low(size_t index) {
    if (index < kSubBuckets) return index;
    const uint64_t shift = (index - kSubBuckets) / kSubBuckets;
    const uint64_t sub = (index - kSubBuckets) % kSubBuckets;
    return (kSubBuckets + sub) << shift;
  }
  static constexpr uint64_t Width(size_t index) {
    if (index < kSubBuckets) return 1;
    return uint64_t{1} << ((index - kSubBuckets) / kSubBuckets);
  }
  // The value a bucket is reported as: its midpoint.
  static constexpr uint64_t Mid(size_t index) { return Low(index) + Width(index) / 2; }
};

class Histogram {
 public:
  // Sub-buckets per power of two (a power of two itself).
  static constexpr int kSubBucketBits = 7;
  using Buckets = LogLinearBuckets<kSubBucketBits>;
  static constexpr uint64_t kSubBuckets = Buckets::kSubBuckets;
  static constexpr size_t kBucketCount = Buckets::kCount;
  // Bound on |reported - recorded| / recorded for a percentile (1/256).
  static constexpr double kMaxRelativeError = Buckets::kMaxRelativeError;

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
  // midpoint of its bucket and clamped to [min, max]; the largest rank is
  // max() itself. 0 when empty.
  uint64_t Percentile(double p) const;

  // Bucket arithmetic, exposed so that its contract can be checked.
  static size_t BucketIndex(uint64_t value) { return Buckets::Index(value); }
  static uint64_t BucketLow(size_t index) { return Buckets::Low(index); }
  static uint64_t BucketWidth(size_t index) { return Buckets::Width(index); }

 private:
  std::array<uint64_t, kBucketCount> buckets_{};
  uint64_t count_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
  // The sum saturates near 1.8e19 ns (584 years of latency): not a concern.
  uint64_t sum_ = 0;
};

// The rank (1-based) of percentile p among `count` values:
// ceil(p% of count), clamped to 1..count. Shared by every percentile the
// benchmark reports, so that they agree on what "p99" means.
uint64_t PercentileRank(double p, uint64_t count);

}  // namespace rkv::bench
