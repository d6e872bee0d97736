// The per-source refusal limit of a listener (Options::max_refusals_per_source,
// transport.h's Listener): counts the refusals each source address caused
// within the current one-second window, less the requests of that address
// the screen let on, and says when a source is over its limit, so that its
// further requests are refused without being screened until the window
// ends. A client's connect is a hello (refused with a challenge) and then
// its proof (let on): it leaves its address's count where it was, so a host
// may open connections as fast as it likes; requests that fail the screen
// add up.
//
// Thread safety: none; a listener's Next owns one (its calls are serialized).
//
// Invariants: at most kMaxSources addresses are counted in a window; when
// a window holds that many and a new one is refused, the window restarts
// (every count to zero): a flood spread over many addresses cannot grow
// the table, and loses nothing it could not lose to a new second.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace rkv::transport {

class SourceRefusals {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxSources = 4096;
  static constexpr auto kWindow = std::chrono::seconds(1);

  // `limit` refusals per source and window; 0: no limit.
  explicit SourceRefusals(uint32_t limit) : limit_(limit) {}

  // Whether `source` (an address without its port) is over its limit in
  // the window that holds `now`.
  bool OverLimit(const std::string& source, Clock::time_point now) {
    if (limit_ == 0) return false;
    Roll(now);
    const auto it = counts_.find(source);
    return it != counts_.end() && it->second >= limit_;
  }

  // Counts a refusal of a request from `source` at `now`.
  void Refused(const std::string& source, Clock::time_point now) {
    if (limit_ == 0) return;
    Roll(now);
    if (counts_.size() >= kMaxSources && counts_.find(source) == counts_.end()) counts_.clear();
    ++counts_[source];
  }

  // Takes one refusal off `source`'s count (none below zero): the screen
  // let a request of it on at `now`.
  void Admitted(const std::string& source, Clock::time_point now) {
    if (limit_ == 0) return;
    Roll(now);
    const auto it = counts_.find(source);
    if (it == counts_.end()) return;
    if (--it->second == 0) counts_.erase(it);
  }

 private:
  void Roll(Clock::time_point now) {
    if (now - window_start_ < kWindow) return;
    window_start_ = now;
    counts_.clear();
  }

  const uint32_t limit_;
  Clock::time_point window_start_{};
  std::unordered_map<std::string, uint32_t> counts_;
};

}  // namespace rkv::transport
