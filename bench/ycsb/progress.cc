#include "bench/ycsb/progress.h"

#include <cinttypes>
#include <cmath>

namespace rkv::bench {

void LiveCounters::AddTo(std::span<uint64_t> into) const {
  for (size_t i = 0; i < Buckets::kCount && i < into.size(); ++i) {
    into[i] += buckets_[i].load(std::memory_order_relaxed);
  }
}

uint64_t LiveCountsPercentile(std::span<const uint64_t> counts, double p) {
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  if (total == 0) return 0;
  const uint64_t rank = PercentileRank(p, total);
  uint64_t seen = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    seen += counts[i];
    if (seen >= rank) return LiveCounters::Buckets::Mid(i);
  }
  return 0;
}

std::string ProgressLine(uint64_t elapsed_s, uint64_t ops_total, uint64_t ops_interval, double interval_s,
                         uint64_t p99_interval_ns, uint64_t p99_total_ns) {
  char line[256];
  const double rate = interval_s > 0 ? static_cast<double>(ops_interval) / interval_s : 0.0;
  std::snprintf(line, sizeof(line),
                "rkv-ycsb: %4" PRIu64 " s: %" PRIu64 " ops, %.0f ops/s in the last second, p99 %.1f us "
                "(last second) %.1f us (so far)",
                elapsed_s, ops_total, rate, static_cast<double>(p99_interval_ns) / 1000.0,
                static_cast<double>(p99_total_ns) / 1000.0);
  return line;
}

ProgressReporter::ProgressReporter(std::span<const LiveCounters> counters, std::FILE* out, double quiet_s)
    : counters_(counters), out_(out), quiet_s_(quiet_s) {}

ProgressReporter::~ProgressReporter() { Stop(); }

void ProgressReporter::Start() {
  {
    MutexLock lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
}

void ProgressReporter::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void ProgressReporter::Loop() {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  std::vector<uint64_t> previous(LiveCounters::Buckets::kCount, 0);
  std::vector<uint64_t> now(LiveCounters::Buckets::kCount, 0);
  std::vector<uint64_t> interval(LiveCounters::Buckets::kCount, 0);
  uint64_t previous_ops = 0;
  Clock::time_point previous_time = start;
  for (uint64_t second = 1;; ++second) {
    const Clock::time_point wake = start + std::chrono::seconds(second);
    {
      MutexLock lock(mu_);
      // WaitUntil is true when woken before `wake` (by Stop, or spuriously).
      while (!stop_ && cv_.WaitUntil(mu_, wake)) {
      }
      if (stop_) return;
    }
    std::fill(now.begin(), now.end(), 0);
    uint64_t ops = 0;
    for (const LiveCounters& c : counters_) {
      ops += c.ops();
      c.AddTo(now);
    }
    const Clock::time_point t = Clock::now();
    for (size_t i = 0; i < now.size(); ++i) interval[i] = now[i] >= previous[i] ? now[i] - previous[i] : 0;
    if (static_cast<double>(second) >= quiet_s_) {
      const std::string line =
          ProgressLine(second, ops, ops - previous_ops, std::chrono::duration<double>(t - previous_time).count(),
                       LiveCountsPercentile(interval, 99), LiveCountsPercentile(now, 99));
      std::fprintf(out_, "%s\n", line.c_str());
      std::fflush(out_);
    }
    previous.swap(now);
    previous_ops = ops;
    previous_time = t;
  }
}

}  // namespace rkv::bench
