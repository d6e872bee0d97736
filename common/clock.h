// The steady clock, read without a call into libstdc++.
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

// The wall clock as expiry reads it (docs/design.md §5.11): Unix time in
// milliseconds, CLOCK_REALTIME.
inline int64_t UnixNowMs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace rkv
