// The record indices of a run's inserts (YCSB workload d), shared by every
// benchmark thread, as YCSB's AcknowledgedCounterGenerator: Issue() hands
// out the next index to insert, Acknowledge() says its insert completed,
// and Last() is the newest index below which every insert completed, the
// newest record a read may pick (a read never races an insert in flight).
//
// Thread safety: every method may be called from any thread.
// Invariants: limit_ <= next_; every index < limit_ was acknowledged (or
// loaded); pending_ holds the acknowledged indices >= limit_.
#pragma once

#include <atomic>
#include <cstdint>
#include <set>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace rkv::bench {

class InsertCounter {
 public:
  // Records [0, loaded) exist before the first insert; loaded >= 1.
  explicit InsertCounter(uint64_t loaded);
  InsertCounter(const InsertCounter&) = delete;
  InsertCounter& operator=(const InsertCounter&) = delete;

  // The index of a new record, each index once.
  uint64_t Issue() { return next_.fetch_add(1, std::memory_order_relaxed); }
  // The insert of `index` (from Issue) ended, successfully or not (as
  // YCSB's: a failed insert is counted as an error by the caller, not
  // retried).
  void Acknowledge(uint64_t index);
  // The newest index below which every record exists: loaded - 1 until
  // the first insert is acknowledged. Never decreases.
  uint64_t Last() const { return limit_.load(std::memory_order_acquire) - 1; }

 private:
  std::atomic<uint64_t> next_;
  // Published with release after pending_ was drained up to it, read with
  // acquire by Last().
  std::atomic<uint64_t> limit_;
  Mutex mu_;
  std::set<uint64_t> pending_ GUARDED_BY(mu_);
};

}  // namespace rkv::bench
