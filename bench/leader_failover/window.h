// What the clients of rkv-leader-failover-bench saw over a window of time,
// from their call logs (bench/failover/key_load.h): the longest stall
// (the longest time a client went without a call completing successfully)
// and the longest single call. Pure functions over the logs.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "bench/failover/key_load.h"

namespace rkv::bench {

struct WindowFigures {
  // The longest gap between two successful completions of one client (or,
  // for a client still waiting at the window's end, from its last one to
  // the end: `gap_open`) among the gaps that end inside the window. A gap
  // that began before the window counts whole: it is what the client saw.
  std::chrono::microseconds longest_gap{0};
  int gap_client = -1;
  bool gap_open = false;
  // The longest call that ended inside the window, of each kind and in all.
  std::chrono::microseconds longest_call{0};
  KeyCall::Op longest_call_op = KeyCall::Op::kGet;
  std::chrono::microseconds longest_get{0};
  std::chrono::microseconds longest_put{0};
  // Call latency percentiles over the calls that ended inside the window.
  std::chrono::microseconds p50{0};
  std::chrono::microseconds p99{0};
  long calls = 0;   // calls that ended inside the window
  long failed = 0;  // of which failed
};

// The figures over [from, to). `calls[c]` is client c's log in the order
// its calls ended; `last_ok[c]`, when not the epoch, is the end of client
// c's last successful call before the log starts (where its first gap
// begins; without one, a gap is counted from `from`). Calls that ended
// outside [from, to) only advance where the next gap begins.
WindowFigures Analyze(const std::vector<std::vector<KeyCall>>& calls,
                      const std::vector<Clock::time_point>& last_ok, Clock::time_point from, Clock::time_point to);

// The end of each client's last successful call in `calls`, or `last_ok`'s
// entry when its log has none (to carry from one log to the next).
std::vector<Clock::time_point> LastOk(const std::vector<std::vector<KeyCall>>& calls,
                                      std::vector<Clock::time_point> last_ok);

}  // namespace rkv::bench
