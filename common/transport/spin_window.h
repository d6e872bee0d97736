// The adaptive spin window that every transport's waits share (a
// connection's Poll, a poll group's Wait; docs/design.md §7.3): before it
// sleeps, a wait busy-polls for up to its window, and the window adapts to
// the waits it sees, between 0 and the transport's poll_spin_us bound.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

#include "common/clock.h"

namespace rkv::transport {

// The smallest non-zero window.
inline constexpr std::chrono::nanoseconds kMinSpinWindow = std::chrono::microseconds(10);

// The window after a wait of `waited` that outlasted the spin: a wait that
// ended within `max_spin` (but after the window) doubles it, from at least
// kMinSpinWindow, since spinning a little longer would have caught it; one
// that outlasted `max_spin` halves it, to nothing below kMinSpinWindow, so
// an idle waiter stops spinning. A wait within the window, or a zero bound,
// leaves it as it is.
inline std::chrono::nanoseconds NextSpinWindow(std::chrono::nanoseconds window, std::chrono::nanoseconds waited,
                                               std::chrono::nanoseconds max_spin) {
  if (max_spin <= std::chrono::nanoseconds::zero() || waited <= window) return window;
  if (waited <= max_spin) return std::min(max_spin, std::max(2 * window, kMinSpinWindow));
  window /= 2;
  return window < kMinSpinWindow ? std::chrono::nanoseconds::zero() : window;
}

// Spinning pays only while the spinner keeps its CPU. Where more threads
// want to run than there are CPUs (a CPU-bound neighbour, or a client and a
// server spinning side by side on a small machine), the spinner is
// descheduled for a time slice, milliseconds, and so is the thread that
// would answer it, where a sleeper's wake-up would have preempted the
// neighbour at once. A spin round that sees the clock jump by more than
// kPreemptedGap between two of its rounds (each takes a microsecond or
// two) lost its CPU meanwhile: the wait stops spinning, and so do that
// waiter's next waits for kSpinCooldown (they sleep at once), after which
// the window grows back by NextSpinWindow's rule.
inline constexpr std::chrono::nanoseconds kPreemptedGap = std::chrono::microseconds(200);
inline constexpr std::chrono::nanoseconds kSpinCooldown = std::chrono::milliseconds(500);

// Whether this machine has had more runnable threads than CPUs lately:
// the running count of /proc/loadavg (the threads runnable at that
// instant, the caller included), sampled by whichever waiter asks first
// after kOversubscriptionSample, against the CPUs online; once it exceeded
// them in three samples in a row, the answer is yes for kSpinCooldown. There, every spinner takes a
// CPU that a sleeper's wake-up would have had at once (a spinning client
// starves the server thread it waits for until its window ends), so
// waiters sleep at once, as memcached's and Redis's threads do; where CPUs
// are free, spinning saves the wake-up. Thread-safe; reading the file
// costs a few microseconds, at most once per sample period per process.
inline constexpr std::chrono::nanoseconds kOversubscriptionSample = std::chrono::milliseconds(10);
bool MachineOversubscribed(std::chrono::steady_clock::time_point now);
// The running count of a /proc/loadavg line ("0.29 1.16 2.37 2/345
// 12345"), or -1 when the line does not have one.
int ParseLoadavgRunning(std::string_view text);

// A waiter's cooldown (thread-safe; relaxed: it only steers spinning).
class SpinCooldown {
 public:
  using Clock = std::chrono::steady_clock;
  // Whether waits starting at `now` must not spin: this waiter's cooldown
  // lasts, or the machine is oversubscribed.
  bool Active(Clock::time_point now) const {
    return SteadyNanos(now) < until_ns_.load(std::memory_order_relaxed) || MachineOversubscribed(now);
  }
  // A spin at `now` lost its CPU.
  void Start(Clock::time_point now) { until_ns_.store(SteadyNanos(now + kSpinCooldown), std::memory_order_relaxed); }
  // A spin's round at `now`, its previous one at `*last` (then set to
  // `now`): whether the spin lost its CPU in between, more than
  // kPreemptedGap, and so starts the cooldown.
  bool LostCpu(Clock::time_point now, Clock::time_point* last) {
    const bool lost = now - *last > kPreemptedGap;
    *last = now;
    if (lost) Start(now);
    return lost;
  }

 private:
  std::atomic<int64_t> until_ns_{0};
};

// One round of a busy-poll's wait: tells the CPU that this is a spin (it
// may save power, and lets a sibling hyper-thread run) without giving the
// CPU away. A spinner never calls sched_yield: on a CPU where another
// thread is runnable (a CPU-bound neighbour), yielding hands it a whole
// time slice, milliseconds, during which the completion the spinner waits
// for is not taken, and a spinner is runnable, so the completion's arrival
// does not preempt the neighbour the way it wakes a sleeper. A spinner that
// keeps losing that way stops spinning: its waits outlast the bound and the
// window shrinks to nothing (NextSpinWindow).
inline void SpinPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace rkv::transport
