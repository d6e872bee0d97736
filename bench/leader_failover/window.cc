#include "bench/leader_failover/window.h"

#include <algorithm>

namespace rkv::bench {

namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;

// The q-quantile (0 < q <= 1) of `v` by nearest rank; 0 when empty.
microseconds Quantile(std::vector<microseconds>& v, double q) {
  if (v.empty()) return microseconds(0);
  size_t rank = static_cast<size_t>(q * static_cast<double>(v.size()) + 0.999999);
  rank = std::clamp<size_t>(rank, 1, v.size());
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(rank - 1), v.end());
  return v[rank - 1];
}

}  // namespace

WindowFigures Analyze(const std::vector<std::vector<KeyCall>>& calls,
                      const std::vector<Clock::time_point>& last_ok, Clock::time_point from, Clock::time_point to) {
  WindowFigures f;
  std::vector<microseconds> latencies;
  for (size_t c = 0; c < calls.size(); ++c) {
    Clock::time_point prev = c < last_ok.size() && last_ok[c] != Clock::time_point() ? last_ok[c] : from;
    const auto gap = [&](Clock::time_point end, bool open) {
      const auto g = duration_cast<microseconds>(end - prev);
      if (g > f.longest_gap) {
        f.longest_gap = g;
        f.gap_client = static_cast<int>(c);
        f.gap_open = open;
      }
    };
    for (const KeyCall& call : calls[c]) {
      const bool inside = call.end >= from && call.end < to;
      if (inside) {
        ++f.calls;
        const auto took = duration_cast<microseconds>(call.end - call.start);
        latencies.push_back(took);
        if (took > f.longest_call) {
          f.longest_call = took;
          f.longest_call_op = call.op;
        }
        auto& longest = call.op == KeyCall::Op::kGet ? f.longest_get : f.longest_put;
        longest = std::max(longest, took);
        if (!call.ok()) ++f.failed;
      }
      if (!call.ok()) continue;
      if (inside) gap(call.end, /*open=*/false);
      prev = call.end;
    }
    if (prev < to) gap(to, /*open=*/true);
  }
  f.p50 = Quantile(latencies, 0.50);
  f.p99 = Quantile(latencies, 0.99);
  return f;
}

std::vector<Clock::time_point> LastOk(const std::vector<std::vector<KeyCall>>& calls,
                                      std::vector<Clock::time_point> last_ok) {
  last_ok.resize(calls.size());
  for (size_t c = 0; c < calls.size(); ++c) {
    for (auto it = calls[c].rbegin(); it != calls[c].rend(); ++it) {
      if (it->ok()) {
        last_ok[c] = it->end;
        break;
      }
    }
  }
  return last_ok;
}

}  // namespace rkv::bench
