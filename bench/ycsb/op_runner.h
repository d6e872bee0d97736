// The timed phase of one rkv-ycsb thread: the operations of a workload
// against one connection, closed loop or open loop, their latencies by
// kind of operation.
//
// Closed loop (ops_per_s == 0): each operation starts when the previous one
// ended; its latency is from its start to its end.
//
// Open loop (ops_per_s > 0): operation k is due at
// start + (k + phase) / ops_per_s (OpenLoopSchedule) whatever happened
// before it; the thread waits for that time when it is early, and sends at
// once when it is late. Latency counts from the due time, not from the
// send, so a stall of the store shows in the latency of every operation
// that fell due during it (no coordinated omission). With a deadline, no
// operation due at or after it is sent, and the ones due before it are
// still sent after it, for up to kOpenLoopDrain; those due before it but
// never sent (the store fell that far behind the schedule) are counted in
// ThreadResult::unsent.
//
// Thread safety: one RunThread call per thread, each with its own target,
// result and LiveCounters; the KeyChooser and InsertCounter are shared.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "bench/ycsb/histogram.h"
#include "bench/ycsb/insert_counter.h"
#include "bench/ycsb/key_chooser.h"
#include "bench/ycsb/kv_target.h"
#include "bench/ycsb/progress.h"
#include "bench/ycsb/run_clock.h"
#include "bench/ycsb/workload.h"

namespace rkv::bench {

// Values are slices of a per-thread random pool at a rotating offset, so
// consecutive PUTs do not store identical bytes: the pool holds
// value_bytes + kValueSlack bytes.
inline constexpr size_t kValueSlack = 64;
// Open loop: how long after the deadline operations due before it are
// still sent.
inline constexpr std::chrono::seconds kOpenLoopDrain{1};
// Error messages kept per thread to show what went wrong.
inline constexpr size_t kErrorSamples = 3;

std::string RandomPool(size_t bytes, std::mt19937_64& rng);
// The value of the n-th PUT from `pool`.
std::string_view ValueFor(const std::string& pool, uint64_t n, uint64_t value_bytes);

// Every error of one thread, by kind. A read-modify-write's read and
// compare-and-set count as a GET and a PUT here (those of its last try:
// conflicts retried are no error; running out of retries is a failed PUT).
struct Errors {
  uint64_t load_failed = 0;
  uint64_t get_failed = 0;
  uint64_t get_not_found = 0;
  uint64_t get_wrong_length = 0;
  uint64_t put_failed = 0;
  uint64_t insert_failed = 0;
  std::vector<std::string> samples;

  uint64_t Total() const {
    return load_failed + get_failed + get_not_found + get_wrong_length + put_failed + insert_failed;
  }
  void Sample(std::string message) {
    if (samples.size() < kErrorSamples) samples.push_back(std::move(message));
  }
  void Merge(const Errors& other);
};

// What one thread did in the timed phase. Histograms in nanoseconds, of
// the operations that succeeded.
struct ThreadResult {
  // Per operation kind; with --batch, a GET's or PUT's latency is that of
  // the MultiGet or MultiPut that carried it, and kBatch holds the whole
  // batches'.
  std::array<Histogram, kOpTypeCount> latency_ns;
  uint64_t ops = 0;
  // Open loop: operations due before the end but never sent.
  uint64_t unsent = 0;
  // Read-modify-writes: compare-and-sets that met a conflict and were
  // retried from the read (KvTarget::ReadModifyWrite), within the
  // operation's one latency.
  uint64_t rmw_conflicts = 0;
  Errors errors;

  Histogram& Of(OpType op) { return latency_ns[static_cast<size_t>(op)]; }
  const Histogram& Of(OpType op) const { return latency_ns[static_cast<size_t>(op)]; }
  void Merge(const ThreadResult& other);
};

// When each operation of an open loop is due.
class OpenLoopSchedule {
 public:
  using TimePoint = RunClock::TimePoint;

  // ops_per_s > 0; phase in [0, 1) staggers the threads' schedules.
  OpenLoopSchedule(TimePoint start, double ops_per_s, double phase);

  // Due time of operation k (0-based).
  TimePoint At(uint64_t k) const;
  // How many operations are due at or before t.
  uint64_t DueBy(TimePoint t) const;

 private:
  TimePoint start_;
  double interval_ns_;
  double phase_;
};

struct RunSettings {
  Workload workload;
  uint64_t value_bytes = 0;
  // Operations this thread may issue; UINT64_MAX: no cap.
  uint64_t budget = UINT64_MAX;
  // Operations per batch (1: none). Open loop needs batch == 1.
  int batch = 1;
  RunClock::TimePoint start;
  // Closed loop: stop at the first operation that ends at or after it.
  // Open loop: send no operation due at or after it, and stop at the first
  // that ends kOpenLoopDrain or more after it.
  std::optional<RunClock::TimePoint> deadline;
  // This thread's share of --target_ops_per_s; 0: closed loop.
  double ops_per_s = 0;
  double phase = 0;
  // Seeds the thread's draws of operations and keys.
  uint64_t seed = 1;
  // Distinguishes the threads' values (thread index).
  uint64_t value_offset = 0;
};

// Runs the timed phase of one thread. `inserts` is required when the
// workload inserts; `live` may be null.
void RunThread(const RunSettings& settings, KvTarget& target, const std::string& pool, const KeyChooser& chooser,
               InsertCounter* inserts, RunClock& clock, LiveCounters* live, ThreadResult& result);

}  // namespace rkv::bench
