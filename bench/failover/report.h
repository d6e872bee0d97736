// The figures of rkv-failover-bench's rounds as its report gives them:
// the summaries of a round (p50 and max over the victim keys, the
// throughput dip, failures by code) and the CSV and markdown files
// (bench/failover/rkv_failover_bench.cc defines each figure; this file
// prints them). The markdown's setup paragraphs read the bench's flags.
//
// Thread safety: plain functions of their arguments (and the flags, read
// only), called by the bench's controlling thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bench/failover/figures.h"
#include "bench/failover/map_watch.h"

namespace rkv::bench {

enum class Event { kKill, kStop };
const char* EventName(Event e);

// One round: its victim and what the call logs and the map showed
// (rkv_failover_bench.cc's RunRound fills it).
struct Round {
  Event event = Event::kKill;
  int number = 0;
  int victim = -1;  // server index
  std::string victim_id;
  size_t victim_shards = 0;
  std::set<uint32_t> victim_keys;
  // Key unavailability (window) and its steady baseline, per victim key.
  std::map<uint32_t, Gap> key_gaps;
  std::map<uint32_t, Gap> steady_key_gaps;
  std::map<uint32_t, std::chrono::microseconds> first_ok;
  Gap stall;
  Gap steady_stall;
  std::vector<long> ops_per_s;  // steady_s buckets, then window_s buckets
  CallCounts window;
  CallCounts steady;
  uint64_t version_before = 0;
  uint64_t version_after = 0;
  MapTimeline map;
  double revived_s = 0;  // from the event
  bool recovered = false;
};

double Ms(std::chrono::microseconds us);
double Ms(Clock::duration d);
// `v` with `decimals` decimals.
std::string Fixed(double v, int decimals = 0);
const char* OpName(KeyCall::Op op);
// Milliseconds with no decimals, "-" when absent.
std::string OptMs(const std::optional<std::chrono::microseconds>& v);

// p50 (nearest rank) and max of the gaps, and how many ran to the window's
// end; zeros when there are none.
struct KeyFigures {
  double p50 = 0, max = 0;
  int open = 0;
};
KeyFigures Summarize(const std::map<uint32_t, Gap>& gaps);

// p50 and max of the victim keys' first OK, and the keys that had none.
struct FirstOkFigures {
  std::optional<double> p50, max;
  size_t missing = 0;
};
FirstOkFigures SummarizeFirstOk(const Round& r);

// The mean of the steady buckets and the smallest bucket after the event
// (its second from the event).
struct Throughput {
  double steady_mean = 0;
  long dip = 0;
  int dip_second = 0;
};
Throughput SummarizeThroughput(const Round& r);

// "N (CODE n, ...)", or "0".
std::string Failures(const CallCounts& c);

// A row per round (columns named in the first line).
void WriteCsv(const std::string& path, const std::vector<Round>& rounds);
// The report's body: setup, what is measured, per event the rounds, the
// throughput series and p50/max over the rounds; then the run's first
// failed call and `outcome`.
void WriteMarkdown(const std::string& path, const std::vector<Event>& events, const std::vector<Round>& rounds,
                   const std::string& first_failure, const std::string& outcome);

}  // namespace rkv::bench
