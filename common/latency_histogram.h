// LatencyHistogram: durations counted into fixed buckets, with relaxed
// atomic increments only, so that a hot path can record each of its
// operations while another thread reads the counts (a metrics scrape).
//
// The buckets are those of Prometheus histograms: bucket i counts the
// durations in (kUpperBoundsUs[i-1], kUpperBoundsUs[i]] microseconds, and
// one more bucket those above the last bound. The bounds go from 10 us to
// 10 s in steps of about 2.5x (1, 2.5, 5 per decade), fine enough to tell
// a tcp apply (tens of microseconds) from a WAL sync (milliseconds) from
// a stall (seconds).
//
// A Read() taken while Record() runs may count an operation in `count`
// but not yet in `sum_ns`, or the reverse: each number is exact on its
// own, and they agree once the recorders are idle. Prometheus tolerates
// this (every series is monotonic).
//
// Thread safety: Record and Read from any thread, no lock.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace rkv {

class LatencyHistogram {
 public:
  static constexpr std::array<uint64_t, 19> kUpperBoundsUs = {
      10,      25,      50,      100,     250,       500,       1'000,     2'500,     5'000,     10'000,
      25'000,  50'000,  100'000, 250'000, 500'000,   1'000'000, 2'500'000, 5'000'000, 10'000'000};
  static constexpr size_t kBuckets = kUpperBoundsUs.size() + 1;

  struct Counts {
    std::array<uint64_t, kBuckets> buckets{};  // not cumulative
    uint64_t count = 0;                        // the sum of buckets
    uint64_t sum_ns = 0;
  };

  LatencyHistogram() = default;
  LatencyHistogram(const LatencyHistogram&) = delete;
  LatencyHistogram& operator=(const LatencyHistogram&) = delete;

  // The bucket a duration falls in: the first whose bound it does not
  // exceed (a negative duration counts as zero).
  static size_t BucketOf(std::chrono::nanoseconds d) {
    const uint64_t ns = d.count() <= 0 ? 0 : static_cast<uint64_t>(d.count());
    size_t i = 0;
    while (i < kUpperBoundsUs.size() && ns > kUpperBoundsUs[i] * 1000) ++i;
    return i;
  }

  void Record(std::chrono::nanoseconds d) {
    buckets_[BucketOf(d)].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(d.count() <= 0 ? 0 : static_cast<uint64_t>(d.count()), std::memory_order_relaxed);
  }

  Counts Read() const {
    Counts c;
    for (size_t i = 0; i < kBuckets; ++i) {
      c.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
      c.count += c.buckets[i];
    }
    c.sum_ns = sum_ns_.load(std::memory_order_relaxed);
    return c;
  }

 private:
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace rkv
