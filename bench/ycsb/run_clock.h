// The clock of the timed phase, behind an interface so that the
// scheduling of the open loop (bench/ycsb/op_runner.h) can be tested with
// a fake clock.
//
// Thread safety: SteadyRunClock has no state and may be shared; a fake
// clock is whatever its test makes it.
#pragma once

#include <chrono>
#include <thread>

#include "common/clock.h"

namespace rkv::bench {

class RunClock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  virtual ~RunClock() = default;
  virtual TimePoint Now() = 0;
  // Returns at `t` or soon after; at once when `t` has passed.
  virtual void SleepUntil(TimePoint t) = 0;
};

// The steady clock. SleepUntil sleeps until shortly before `t` and spins
// the rest, so that a request leaves on time rather than a scheduler tick
// late (the spin is at most kSpin).
class SteadyRunClock final : public RunClock {
 public:
  static constexpr std::chrono::microseconds kSpin{100};

  TimePoint Now() override { return SteadyNow(); }
  void SleepUntil(TimePoint t) override {
    TimePoint now = SteadyNow();
    if (t - now > kSpin) std::this_thread::sleep_until(t - kSpin);
    while (SteadyNow() < t) {
    }
  }
};

}  // namespace rkv::bench
