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

// kNone: a control round, no fault at all (every DOWN in it is false).
enum class Event { kKill, kStop, kNone };
const char* EventName(Event e);

// One round: its victim and what the call logs and the map showed
// (rkv_failover_bench.cc's RunRound fills it). In a `none` round the
// "victim" is the server that would have been picked in turn, left alone:
// its keys are the keys measured.
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
  // The coordinator's probe counters just before the event and at the
  // window's end (absent when GetCoordinatorStatus failed).
  std::optional<ProbeCounts> probes_before;
  std::optional<ProbeCounts> probes_after;
  std::string probes_error;  // why one is absent
  // Refuted probes in the window by suspected server id, from the
  // coordinator's log ("server ID (epoch N) suspected (...) but not DOWN",
  // coordinator/prober.cc): which servers the refutations were of.
  std::map<std::string, int> refuted_of;
  double revived_s = 0;  // from the event (0 in a `none` round: nothing to revive)
  bool recovered = false;
};

// The servers the map showed DOWN in the window (first seen at most
// --window_s after the event) that are not the round's fault: every one in
// a `none` round, all but the victim otherwise. With their first time, ms.
std::vector<std::pair<std::string, double>> FalseDowns(const Round& r);
// The same seen after the window (while the cluster recovered).
std::vector<std::pair<std::string, double>> FalseDownsAfter(const Round& r);
// The probe counters' difference over the window, absent when a read failed.
std::optional<ProbeCounts> WindowProbes(const Round& r);
// Confirmed probes beyond the round's fault: all in a `none` round, all
// but one otherwise (the victim's own; it may also be marked DOWN by missed
// heartbeats, without a probe, so this can undercount by one).
std::optional<uint64_t> FalseConfirmed(const Round& r);
// Refuted probes (from the log) of servers other than the fault: all in a
// `none` round, all but the victim's otherwise (a probe of the victim that
// failed after it was already DOWN also counts as refuted).
int RefutedOfLive(const Round& r);
// "ID xN, ..." from refuted_of, or "none".
std::string RefutedList(const Round& r);

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
