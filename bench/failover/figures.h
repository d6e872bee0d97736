// What the clients of rkv-failover-bench saw around a server's failure,
// from their call logs (bench/failover/key_load.h): gaps between
// successful calls (of one key, or of the whole load), the first success
// after the event, throughput per second and failures by status code.
// Pure functions over the logs; rkv_failover_bench.cc says which window
// each figure is taken over.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "bench/failover/key_load.h"

namespace rkv::bench {

using Calls = std::vector<std::vector<KeyCall>>;

struct Gap {
  std::chrono::microseconds length{0};
  // The gap runs to the window's end: no successful call ended after it
  // began, up to `to`.
  bool open = false;
};

// The ends of the successful calls in `calls` (of the records in
// `records`, or of every record when it is null), sorted.
std::vector<Clock::time_point> SuccessEnds(const Calls& calls, const std::set<uint32_t>* records);

// The longest gap between consecutive successful ends in `ends` (sorted)
// among the gaps that end inside [from, to): each runs from the previous
// end (before `from` when one is, so the gap that spans `from` counts
// whole; else from `from`) to the end in the window; and, when the last
// end in the window is before `to`, the open gap from it to `to`.
Gap LongestGap(const std::vector<Clock::time_point>& ends, Clock::time_point from, Clock::time_point to);

// Per record of `records`: the longest gap (LongestGap over the record's
// successful calls) in [from, to).
std::map<uint32_t, Gap> KeyGaps(const Calls& calls, const std::set<uint32_t>& records, Clock::time_point from,
                                Clock::time_point to);

// Per record of `records`: the time from `event` to the end of the first
// successful call of it that started at or after `event` and ended before
// `to`; absent when none did.
std::map<uint32_t, std::chrono::microseconds> FirstOkAfter(const Calls& calls, const std::set<uint32_t>& records,
                                                           Clock::time_point event, Clock::time_point to);

// Successful calls per whole second: bucket i counts the calls that ended
// in [from + i s, from + (i + 1) s), for the whole seconds of [from, to).
std::vector<long> OpsPerSecond(const Calls& calls, Clock::time_point from, Clock::time_point to);

struct CallCounts {
  long calls = 0;  // calls that ended in the window
  long ok_gets = 0;
  long ok_puts = 0;
  std::map<StatusCode, long> failed;  // of which failed, by code
  // Of those, the failures on keys that are not the victim's (their
  // primary did not fail): what the event cost clients it should not touch.
  std::map<StatusCode, long> failed_elsewhere;
  // The longest call that ended in the window (OK or not), and its kind.
  std::chrono::microseconds longest_call{0};
  KeyCall::Op longest_call_op = KeyCall::Op::kGet;
  long failed_total() const;
  long failed_elsewhere_total() const;
};
// `victim_keys`: the records whose failures are not counted in
// failed_elsewhere (null: every failure is).
CallCounts CountCalls(const Calls& calls, Clock::time_point from, Clock::time_point to,
                      const std::set<uint32_t>* victim_keys = nullptr);

// The nearest-rank p50 and the max of `v` (not empty).
std::pair<double, double> P50Max(std::vector<double> v);

}  // namespace rkv::bench
