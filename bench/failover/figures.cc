#include "bench/failover/figures.h"

#include <algorithm>

namespace rkv::bench {

namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::seconds;

bool Inside(Clock::time_point t, Clock::time_point from, Clock::time_point to) { return t >= from && t < to; }

}  // namespace

std::vector<Clock::time_point> SuccessEnds(const Calls& calls, const std::set<uint32_t>* records) {
  std::vector<Clock::time_point> ends;
  for (const auto& client : calls) {
    for (const KeyCall& call : client) {
      if (call.ok() && (records == nullptr || records->count(call.record) != 0)) ends.push_back(call.end);
    }
  }
  std::sort(ends.begin(), ends.end());
  return ends;
}

Gap LongestGap(const std::vector<Clock::time_point>& ends, Clock::time_point from, Clock::time_point to) {
  Gap g;
  const auto first_inside = std::lower_bound(ends.begin(), ends.end(), from);
  Clock::time_point prev = first_inside == ends.begin() ? from : *(first_inside - 1);
  for (auto it = first_inside; it != ends.end() && *it < to; ++it) {
    const auto length = duration_cast<microseconds>(*it - prev);
    if (length > g.length) g = Gap{length, false};
    prev = *it;
  }
  const auto tail = duration_cast<microseconds>(to - prev);
  if (tail > g.length) g = Gap{tail, true};
  return g;
}

std::map<uint32_t, Gap> KeyGaps(const Calls& calls, const std::set<uint32_t>& records, Clock::time_point from,
                                Clock::time_point to) {
  std::map<uint32_t, std::vector<Clock::time_point>> ends;
  for (uint32_t r : records) ends[r];
  for (const auto& client : calls) {
    for (const KeyCall& call : client) {
      if (!call.ok()) continue;
      auto it = ends.find(call.record);
      if (it != ends.end()) it->second.push_back(call.end);
    }
  }
  std::map<uint32_t, Gap> out;
  for (auto& [record, e] : ends) {
    std::sort(e.begin(), e.end());
    out[record] = LongestGap(e, from, to);
  }
  return out;
}

std::map<uint32_t, microseconds> FirstOkAfter(const Calls& calls, const std::set<uint32_t>& records,
                                              Clock::time_point event, Clock::time_point to) {
  std::map<uint32_t, microseconds> out;
  for (const auto& client : calls) {
    for (const KeyCall& call : client) {
      if (!call.ok() || call.start < event || call.end >= to || records.count(call.record) == 0) continue;
      const auto after = duration_cast<microseconds>(call.end - event);
      auto [it, inserted] = out.emplace(call.record, after);
      if (!inserted) it->second = std::min(it->second, after);
    }
  }
  return out;
}

std::vector<long> OpsPerSecond(const Calls& calls, Clock::time_point from, Clock::time_point to) {
  const auto whole = duration_cast<seconds>(to - from).count();
  std::vector<long> buckets(static_cast<size_t>(std::max<int64_t>(whole, 0)), 0);
  for (const auto& client : calls) {
    for (const KeyCall& call : client) {
      if (!call.ok() || call.end < from) continue;
      const auto i = duration_cast<seconds>(call.end - from).count();
      if (i < static_cast<int64_t>(buckets.size())) ++buckets[static_cast<size_t>(i)];
    }
  }
  return buckets;
}

long CallCounts::failed_total() const {
  long n = 0;
  for (const auto& [code, count] : failed) n += count;
  return n;
}

long CallCounts::failed_elsewhere_total() const {
  long n = 0;
  for (const auto& [code, count] : failed_elsewhere) n += count;
  return n;
}

CallCounts CountCalls(const Calls& calls, Clock::time_point from, Clock::time_point to,
                      const std::set<uint32_t>* victim_keys) {
  CallCounts c;
  for (const auto& client : calls) {
    for (const KeyCall& call : client) {
      if (!Inside(call.end, from, to)) continue;
      ++c.calls;
      if (!call.ok()) {
        ++c.failed[call.code];
        if (victim_keys == nullptr || victim_keys->count(call.record) == 0) ++c.failed_elsewhere[call.code];
      } else if (call.op == KeyCall::Op::kGet) {
        ++c.ok_gets;
      } else {
        ++c.ok_puts;
      }
      const auto took = duration_cast<microseconds>(call.end - call.start);
      if (took > c.longest_call) {
        c.longest_call = took;
        c.longest_call_op = call.op;
      }
    }
  }
  return c;
}

std::pair<double, double> P50Max(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[(v.size() + 1) / 2 - 1], v.back()};
}

}  // namespace rkv::bench
