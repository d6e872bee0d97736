// At most one log line per interval for an event that can come in floods
// (a refused call or connection): a flood of bad requests cannot flood the
// log, and each line says how many events it stands for.
//
// Thread-safe: Note may be called from any thread; of the calls that find
// the interval over, exactly one gets the count.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>

#include "common/clock.h"

namespace rkv {

class LogThrottle {
 public:
  using Clock = std::chrono::steady_clock;

  explicit LogThrottle(std::chrono::nanoseconds interval = std::chrono::seconds(1)) : interval_ns_(interval.count()) {}

  // Counts one event at `now`. 0: do not log it; otherwise log it now,
  // and the result is the events since the last logged line, this one
  // included. The first event is always logged.
  uint64_t Note(Clock::time_point now = Clock::now()) {
    const uint64_t unlogged = unlogged_.fetch_add(1, std::memory_order_relaxed) + 1;
    const int64_t now_ns = SteadyNanos(now);
    int64_t last = last_ns_.load(std::memory_order_relaxed);
    if (now_ns - last < interval_ns_ || !last_ns_.compare_exchange_strong(last, now_ns, std::memory_order_relaxed)) {
      return 0;
    }
    unlogged_.fetch_sub(unlogged, std::memory_order_relaxed);
    return unlogged;
  }

 private:
  const int64_t interval_ns_;
  std::atomic<uint64_t> unlogged_{0};
  // Long before any steady time (which starts near 0): the first event
  // finds the interval over.
  std::atomic<int64_t> last_ns_{std::numeric_limits<int64_t>::min() / 2};
};

}  // namespace rkv
