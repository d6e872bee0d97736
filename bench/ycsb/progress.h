// The progress line of a long run (rkv-ycsb --progress): once a second, on
// stderr, the operations so far, the rate over the last second and the p99
// latency over the last second and so far, all operation kinds together.
//
// Each benchmark thread counts into its own LiveCounters; the reporter
// thread reads them all once a second. The counters are coarser than the
// final figures (LogLinearBuckets<4>: within 1/32, 3%), which stay those
// of the per-thread Histograms.
//
// Thread safety: LiveCounters has one writer (its benchmark thread) and
// any number of readers. The writer increments with a relaxed load and a
// relaxed store, not a read-modify-write: no locked instruction between
// two timed operations, and exact because no one else writes. A reader
// may see one bucket incremented before `ops`, or after: the line is a
// sample, not a figure.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bench/ycsb/histogram.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace rkv::bench {

class LiveCounters {
 public:
  using Buckets = LogLinearBuckets<4>;

  // One finished operation of `latency_ns`. Writer thread only.
  void Record(uint64_t latency_ns) {
    Bump(buckets_[Buckets::Index(latency_ns)]);
    Bump(ops_);
  }
  // Operations recorded so far.
  uint64_t ops() const { return ops_.load(std::memory_order_relaxed); }
  // Adds the bucket counts so far to `into` (Buckets::kCount entries).
  void AddTo(std::span<uint64_t> into) const;

 private:
  static void Bump(std::atomic<uint64_t>& counter) {
    counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  std::atomic<uint64_t> ops_{0};
  std::array<std::atomic<uint64_t>, Buckets::kCount> buckets_{};
};

// The value at percentile p of bucket counts (LiveCounters::Buckets), as a
// bucket midpoint; 0 when the counts are all 0.
uint64_t LiveCountsPercentile(std::span<const uint64_t> counts, double p);

// The line for one second: elapsed whole seconds, operations so far and in
// the last interval, the interval's length, p99 of the interval and so far
// (nanoseconds). No trailing newline.
std::string ProgressLine(uint64_t elapsed_s, uint64_t ops_total, uint64_t ops_interval, double interval_s,
                         uint64_t p99_interval_ns, uint64_t p99_total_ns);

// Prints ProgressLine to `out` once a second from its own thread, from the
// first whole second at or after `quiet_s` (a run shorter than that prints
// nothing), until Stop().
class ProgressReporter {
 public:
  // `counters` (one per benchmark thread) must outlive the reporter.
  ProgressReporter(std::span<const LiveCounters> counters, std::FILE* out, double quiet_s = 3.0);
  ~ProgressReporter();  // Stop()s
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // Starts the reporter thread; the run starts now.
  void Start();
  // Stops and joins the reporter thread (at once, without a last line).
  void Stop();

 private:
  void Loop();

  std::span<const LiveCounters> counters_;
  std::FILE* out_;
  double quiet_s_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace rkv::bench
