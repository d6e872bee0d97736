// The steady clock, read without a call into libstdc++, and the steady
// clock's time in the forms other code needs: a deadline for gRPC, which
// takes the system clock (SystemDeadline), and a time kept in an atomic
// integer (SteadyNanos).
//
// std::chrono::steady_clock::now() is an out-of-line libstdc++ function
// that calls clock_gettime(CLOCK_MONOTONIC); SteadyNow() makes that call
// itself and returns the same clock's time_point, so the two mix freely.
// It is for the GET path, which reads the clock a few times per call:
// every call and return on that path costs time, and under emulation
// (QEMU TCG, where the verbs path is tested) also slows the kernel's READ
// path that follows (bench/results/README.md).
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace rkv {

inline std::chrono::steady_clock::time_point SteadyNow() {
  static_assert(std::chrono::steady_clock::is_steady);
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                                      std::chrono::nanoseconds(ts.tv_nsec)));
}

// A steady-clock deadline as the system_clock time_point that gRPC takes
// (ClientContext::set_deadline, a channel's WaitForStateChange, a
// completion queue's AsyncNext): the system clock's now plus what is left
// of `deadline`, and at least `at_least` from now (a deadline already past
// is then `at_least` from now). A deadline too far for the system clock
// (steady_clock::time_point::max(), wait for good) is
// system_clock::time_point::max(), not an overflow.
inline std::chrono::system_clock::time_point SystemDeadline(
    std::chrono::steady_clock::time_point deadline,
    std::chrono::steady_clock::duration at_least = std::chrono::steady_clock::duration::zero()) {
  const auto now = std::chrono::system_clock::now();
  const auto left = std::max(deadline - std::chrono::steady_clock::now(), at_least);
  if (left >= std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::system_clock::time_point::max() - now)) {
    return std::chrono::system_clock::time_point::max();
  }
  return now + std::chrono::duration_cast<std::chrono::system_clock::duration>(left);
}

// A steady-clock time as nanoseconds since the clock's epoch: the form of
// a time kept in a std::atomic<int64_t> that threads read without a lock.
inline int64_t SteadyNanos(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// The wall clock as expiry reads it (docs/design.md §5.11): Unix time in
// milliseconds, CLOCK_REALTIME.
inline int64_t UnixNowMs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace rkv
