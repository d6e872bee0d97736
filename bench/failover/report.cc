#include "bench/failover/report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <tuple>

#include <gflags/gflags.h>

#include "tests/server_process.h"

// The bench's flags (rkv_failover_bench.cc), which the setup paragraphs and
// the throughput buckets read.
DECLARE_uint32(servers);
DECLARE_uint32(replicas);
DECLARE_uint32(shards);
DECLARE_uint32(clients);
DECLARE_uint64(records);
DECLARE_uint32(value_bytes);
DECLARE_uint32(read_percent);
DECLARE_string(distribution);
DECLARE_uint32(deadline_ms);
DECLARE_uint32(warmup_s);
DECLARE_uint32(steady_s);
DECLARE_uint32(window_s);
DECLARE_int32(revive_s);
DECLARE_uint32(poll_ms);
DECLARE_uint32(heartbeat_timeout_ms);
DECLARE_uint32(lease_ms);

namespace rkv::bench {

using std::chrono::duration_cast;
using std::chrono::microseconds;

const char* EventName(Event e) {
  switch (e) {
    case Event::kKill:
      return "kill";
    case Event::kStop:
      return "stop";
    case Event::kNone:
      return "none";
  }
  return "?";
}

namespace {

std::vector<std::pair<std::string, double>> NotTheFault(const Round& r, bool in_window) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [id, since] : r.map.downs) {
    if (r.event != Event::kNone && id == r.victim_id) continue;
    const double ms = Ms(since);
    if ((ms <= FLAGS_window_s * 1000.0) == in_window) out.emplace_back(id, ms);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  return out;
}

// "id at N ms, ..." or "none".
std::string DownList(const std::vector<std::pair<std::string, double>>& downs) {
  if (downs.empty()) return "none";
  std::string out;
  for (const auto& [id, ms] : downs) out += (out.empty() ? "" : ", ") + id + " at " + Fixed(ms) + " ms";
  return out;
}

}  // namespace

std::vector<std::pair<std::string, double>> FalseDowns(const Round& r) { return NotTheFault(r, true); }
std::vector<std::pair<std::string, double>> FalseDownsAfter(const Round& r) { return NotTheFault(r, false); }

std::optional<ProbeCounts> WindowProbes(const Round& r) {
  if (!r.probes_before || !r.probes_after) return std::nullopt;
  return *r.probes_after - *r.probes_before;
}

int RefutedOfLive(const Round& r) {
  int n = 0;
  for (const auto& [id, count] : r.refuted_of) {
    if (r.event == Event::kNone || id != r.victim_id) n += count;
  }
  return n;
}

std::string RefutedList(const Round& r) {
  std::string out;
  for (const auto& [id, count] : r.refuted_of) {
    out += (out.empty() ? "" : ", ") + id + (r.event != Event::kNone && id == r.victim_id ? " (the victim)" : "") +
           " x" + std::to_string(count);
  }
  return out.empty() ? "none" : out;
}

std::optional<uint64_t> FalseConfirmed(const Round& r) {
  const auto p = WindowProbes(r);
  if (!p) return std::nullopt;
  if (r.event == Event::kNone) return p->confirmed;
  return p->confirmed > 0 ? p->confirmed - 1 : 0;
}

namespace {

std::string Series(const std::vector<long>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + std::to_string(v[i]);
  return out;
}

// The R copies time in ms (-1 when none) and whether it fell in the window.
double RCopiesOrMinus(const Round& r, bool* within) {
  *within = r.map.replicated && Ms(*r.map.replicated) <= FLAGS_window_s * 1000.0;
  return r.map.replicated ? Ms(*r.map.replicated) : -1;
}

}  // namespace

double Ms(microseconds us) { return static_cast<double>(us.count()) / 1000.0; }
double Ms(Clock::duration d) { return Ms(duration_cast<microseconds>(d)); }

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

const char* OpName(KeyCall::Op op) { return op == KeyCall::Op::kGet ? "GET" : "PUT"; }

std::string OptMs(const std::optional<microseconds>& v) { return v ? Fixed(Ms(*v)) : "-"; }

KeyFigures Summarize(const std::map<uint32_t, Gap>& gaps) {
  KeyFigures f;
  std::vector<double> v;
  for (const auto& [record, g] : gaps) {
    v.push_back(Ms(g.length));
    if (g.open) ++f.open;
  }
  if (!v.empty()) std::tie(f.p50, f.max) = P50Max(v);
  return f;
}

FirstOkFigures SummarizeFirstOk(const Round& r) {
  FirstOkFigures f;
  std::vector<double> v;
  for (const auto& [record, us] : r.first_ok) v.push_back(Ms(us));
  f.missing = r.victim_keys.size() - v.size();
  if (!v.empty()) {
    const auto [p50, max] = P50Max(v);
    f.p50 = p50;
    f.max = max;
  }
  return f;
}

Throughput SummarizeThroughput(const Round& r) {
  Throughput t;
  const size_t steady = std::min<size_t>(FLAGS_steady_s, r.ops_per_s.size());
  long sum = 0;
  for (size_t i = 0; i < steady; ++i) sum += r.ops_per_s[i];
  t.steady_mean = steady == 0 ? 0 : static_cast<double>(sum) / static_cast<double>(steady);
  t.dip = -1;
  for (size_t i = steady; i < r.ops_per_s.size(); ++i) {
    if (t.dip < 0 || r.ops_per_s[i] < t.dip) {
      t.dip = r.ops_per_s[i];
      t.dip_second = static_cast<int>(i - steady);
    }
  }
  if (t.dip < 0) t.dip = 0;
  return t;
}

std::string Failures(const CallCounts& c) {
  if (c.failed.empty()) return "0";
  const auto by_code = [](const std::map<StatusCode, long>& counts) {
    std::string out;
    for (const auto& [code, n] : counts) {
      out += (out.empty() ? "" : ", ") + std::string(StatusCodeName(code)) + " " + std::to_string(n);
    }
    return out;
  };
  std::string out = std::to_string(c.failed_total()) + " (" + by_code(c.failed) + "); on other keys " +
                    std::to_string(c.failed_elsewhere_total());
  if (!c.failed_elsewhere.empty()) out += " (" + by_code(c.failed_elsewhere) + ")";
  return out;
}

void WriteCsv(const std::string& path, const std::vector<Round>& rounds) {
  std::ofstream out(path);
  out << "event,round,victim,victim_id,victim_shards,victim_keys,key_unavail_p50_ms,key_unavail_max_ms,"
         "key_unavail_open,key_first_ok_p50_ms,key_first_ok_max_ms,key_first_ok_missing,steady_key_gap_p50_ms,"
         "steady_key_gap_max_ms,stall_ms,stall_open,steady_stall_ms,steady_ops_per_s,dip_ops_per_s,dip_second,"
         "window_calls,window_ok_gets,window_ok_puts,longest_call_ms,longest_call_op,window_failed,window_failed_by_code,window_failed_other_keys,steady_calls,steady_failed,map_version_before,"
         "map_version_after,map_versions_committed,down_ms,promoted_ms,back_up_ms,r_copies_ms,"
         "r_copies_in_window,revived_s,down_servers,false_downs_in_window,false_downs_after_window,probes,"
         "probes_refuted,probes_confirmed,false_confirmed,refuted_of,refuted_of_live,ops_per_s\n";
  for (const Round& r : rounds) {
    const KeyFigures k = Summarize(r.key_gaps);
    const KeyFigures sk = Summarize(r.steady_key_gaps);
    const FirstOkFigures f = SummarizeFirstOk(r);
    const Throughput t = SummarizeThroughput(r);
    bool within = false;
    const double copies = RCopiesOrMinus(r, &within);
    std::string by_code;
    for (const auto& [code, n] : r.window.failed) {
      by_code += (by_code.empty() ? "" : ";") + std::string(StatusCodeName(code)) + "=" + std::to_string(n);
    }
    out << EventName(r.event) << ',' << r.number << ',' << r.victim << ',' << r.victim_id << ',' << r.victim_shards
        << ',' << r.victim_keys.size() << ',' << Fixed(k.p50, 1) << ',' << Fixed(k.max, 1) << ',' << k.open << ','
        << (f.p50 ? Fixed(*f.p50, 1) : "") << ',' << (f.max ? Fixed(*f.max, 1) : "") << ',' << f.missing << ','
        << Fixed(sk.p50, 1) << ',' << Fixed(sk.max, 1) << ',' << Fixed(Ms(r.stall.length), 1) << ','
        << (r.stall.open ? 1 : 0) << ',' << Fixed(Ms(r.steady_stall.length), 1) << ',' << Fixed(t.steady_mean, 1)
        << ',' << t.dip << ',' << t.dip_second << ',' << r.window.calls << ',' << r.window.ok_gets << ','
        << r.window.ok_puts << ',' << Fixed(Ms(r.window.longest_call), 1) << ',' << OpName(r.window.longest_call_op)
        << ',' << r.window.failed_total() << ','
        << by_code << ',' << r.window.failed_elsewhere_total() << ',' << r.steady.calls << ','
        << r.steady.failed_total() << ',' << r.version_before << ','
        << r.version_after << ',' << (r.version_after - r.version_before) << ','
        << (r.map.down ? Fixed(Ms(*r.map.down), 1) : "") << ','
        << (r.map.promoted ? Fixed(Ms(*r.map.promoted), 1) : "") << ','
        << (r.map.back_up ? Fixed(Ms(*r.map.back_up), 1) : "") << ',' << (copies >= 0 ? Fixed(copies, 1) : "")
        << ',' << (within ? 1 : 0) << ',' << Fixed(r.revived_s, 3) << ',';
    std::string downs;
    for (const auto& [id, since] : r.map.downs) {
      downs += (downs.empty() ? "" : ";") + id + "@" + Fixed(Ms(since), 1);
    }
    const auto probes = WindowProbes(r);
    const auto false_confirmed = FalseConfirmed(r);
    out << downs << ',' << FalseDowns(r).size() << ',' << FalseDownsAfter(r).size() << ','
        << (probes ? std::to_string(probes->probes) : "") << ',' << (probes ? std::to_string(probes->refuted) : "")
        << ',' << (probes ? std::to_string(probes->confirmed) : "") << ','
        << (false_confirmed ? std::to_string(*false_confirmed) : "") << ',';
    std::string refuted;
    for (const auto& [id, count] : r.refuted_of) {
      refuted += (refuted.empty() ? "" : ";") + id + "=" + std::to_string(count);
    }
    out << refuted << ',' << RefutedOfLive(r) << ',' << Series(r.ops_per_s, ";") << '\n';
  }
}

void WriteMarkdown(const std::string& path, const std::vector<Event>& events, const std::vector<Round>& rounds,
                   const std::string& first_failure, const std::string& outcome) {
  std::ofstream out(path);
  const std::string revive =
      FLAGS_revive_s < 0 ? "at the window's end" : std::to_string(FLAGS_revive_s) + " s after the event";
  out << "## Setup\n\n"
      << "All on this machine, "
      << (rkv::testing::TestTransport() == "verbs"
              ? "over the SoftRoCE device rxe0 of a QEMU guest (deploy/softroce/run-in-guest.sh)"
              : "over loopback")
      << ": one rkv-coordinator (its state in its data dir, no etcd), " << FLAGS_servers
      << " rkv-servers, --replicas=" << FLAGS_replicas << ", " << FLAGS_shards << " shards, the "
      << rkv::testing::TestTransport() << " transport; heartbeat timeout "
      << (FLAGS_heartbeat_timeout_ms ? std::to_string(FLAGS_heartbeat_timeout_ms) + " ms" : "at its default (3000 ms)")
      << ", lease " << (FLAGS_lease_ms ? std::to_string(FLAGS_lease_ms) + " ms" : "at its default (1000 ms)")
      << ", heartbeat interval at its default (500 ms). The processes are started by the cross-process suites' "
         "fixture (tests/test_cluster.h).\n\n"
      << "Load: " << FLAGS_clients << " client threads, each with its own long-lived rkv::Client and a "
      << FLAGS_deadline_ms << " ms deadline per call, closed loop; " << FLAGS_read_percent << "% GET, "
      << (100 - FLAGS_read_percent) << "% PUT of " << FLAGS_value_bytes << "-byte values, keys "
      << FLAGS_distribution << " over " << FLAGS_records
      << " preloaded records (YCSB-A-like); every call's start, end, key and status code recorded.\n\n"
      << "Each round: the cluster waited for until every server is UP and every shard has R UP replicas, with no "
         "new map version for 2 s; "
      << FLAGS_steady_s << " s of load (steady); the event on a server that is the primary of at least one shard "
         "(the servers taken in turn); "
      << FLAGS_window_s << " s of load measured from the event (the window); the victim revived " << revive
      << " (`kill`: restarted on its data dir and port, a new epoch; `stop`: SIGCONT, the same epoch); the map "
         "watched every "
      << FLAGS_poll_ms << " ms until every shard has R UP replicas again. Events: `kill` is `kill -9` (SIGKILL), "
      << "`stop` is SIGSTOP, `none` is no fault at all: a control round with the same steady period, window and "
         "figures, where the \"victim\" is the server that would have been picked in turn, left alone (its keys "
         "are the keys measured, and nothing is revived). The coordinator's suspicion settings are its defaults "
         "(`--suspect_after_ms` twice the heartbeat period plus 50 ms, `--probe_timeout_ms` 400; docs/design.md "
         "§8.8, \"Suspicion and probes\"). The first round follows "
      << FLAGS_warmup_s << " s of load not counted.\n\n"
      << "## What is measured\n\n"
      << "Times from the event (steady clock of the bench process). The **victim keys** are the records whose "
         "shard had the victim as primary in the map read just before the event.\n\n"
      << "- **key unavailability**: per victim key, the longest gap between two consecutive successful calls on "
         "that key (any client, GET or PUT, by their end times) among the gaps that end in the window; the gap "
         "that spans the event counts whole, from the last success before it; a key with no success from some "
         "point to the window's end counts up to the end (\"open\"). p50 (nearest rank) and max over the victim "
         "keys. **steady key gap**: the same over the steady period, the sampling baseline (with "
      << FLAGS_records << " keys a key is touched only every so often).\n"
      << "- **first OK**: per victim key, from the event to the end of the first successful call on it that "
         "started after the event; p50 and max, and how many keys had none in the window.\n"
      << "- **stall**: the longest gap between two consecutive successful calls of the whole load (all clients, "
         "all keys) ending in the window, the one spanning the event whole; steady: the same over the steady "
         "period.\n"
      << "- **ops/s**: successful calls per second in 1 s buckets aligned on the event; **steady** is the mean of "
         "the "
      << FLAGS_steady_s << " buckets before it, **dip** the smallest bucket of the window (and its second).\n"
      << "- **OK GET / PUT**: successful calls that ended in the window, by kind; **longest call**: the longest "
         "call (OK or not) that ended in the window.\n"
      << "- **failed**: calls that ended in the window with an error, by status code; **on other keys**: those "
         "of them on keys that are not the victim's (their primary did not fail), which the event should not "
         "touch.\n"
      << "- **map versions**: the coordinator's map version (GetClusterMap) just before the event and at the "
         "window's end; their difference is the versions committed in the window.\n"
      << "- **down**, **promoted**, **back up**, **R copies**: the first poll of the map at which the victim was "
         "DOWN; at which none of its shards had it as primary and each had an UP one; at which it was UP again "
         "after being DOWN; at which every shard had R UP replicas (none catching up) again after the map had "
         "fallen below that. R copies can only come back from the revived victim or a spare server (--servers > "
         "R); a time past the window is marked (after). In a `none` round they refer to the server left alone, "
         "and any of them is a false failover.\n"
      << "- **false DOWN**: every server the map showed `DOWN` (the same polls) in the window that is not the "
         "round's fault: in a `none` round every one, in a `kill` or `stop` round every one but the victim. Each "
         "is a live server marked `DOWN`: a false failover. Servers first seen `DOWN` only after the window, while "
         "the cluster recovered, are listed apart. A `DOWN` shorter than a poll can pass unseen; the map versions "
         "and the confirmed probes still count it.\n"
      << "- **probes sent / refuted / confirmed**: the coordinator's probes of suspected servers over the window "
         "(GetCoordinatorStatus's cumulative `probes`, `probes_refuted`, `probes_confirmed` read just before the "
         "event and at the window's end, their difference). A probe is sent when a server's heartbeats were "
         "silent for `--suspect_after_ms`, or a primary or a client reported it; refuted: a live server answered "
         "(or its heartbeat overtook the probe): a suspicion of a live server that cost no failover, though a "
         "primary is left out of the leases granted while it is probed (§8.8, \"The suspicion fence\"); confirmed: the server was marked `DOWN`. **false confirmed**: confirmed "
         "probes beyond the fault: all of them in a `none` round, all but one in a `kill` or `stop` round (the "
         "victim's; a victim marked `DOWN` by missed heartbeats without a probe makes this undercount by one). "
         "A probe that fails on a server already `DOWN` is counted refuted too (the prober counts every probe "
         "that marked nothing): **refuted, of** names the servers the refutations were of, from the "
         "coordinator's log lines (\"server ID (epoch N) suspected (...) but not DOWN\") written in the window; "
         "**refuted of a live server** counts those not of the victim.\n\n";
  for (Event e : events) {
    std::vector<const Round*> of;
    for (const Round& r : rounds) {
      if (r.event == e) of.push_back(&r);
    }
    if (of.empty()) continue;
    out << "## " << EventName(e) << ": rounds\n\n"
        << "| round | victim | shards | keys | key unavail p50 ms | key unavail max ms | first OK p50 / max ms | "
           "steady key gap p50 / max ms | stall ms | steady stall ms | steady ops/s | dip ops/s (s) | OK GET / PUT | "
           "longest call ms | failed | "
           "map versions | down ms | promoted ms | back up ms | R copies ms | false DOWN | "
           "probes sent / refuted / confirmed | false confirmed | refuted, of (log) |\n"
        << "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---|---:|"
           "---:|---|\n";
    for (const Round* r : of) {
      const KeyFigures k = Summarize(r->key_gaps);
      const KeyFigures sk = Summarize(r->steady_key_gaps);
      const FirstOkFigures f = SummarizeFirstOk(*r);
      const Throughput t = SummarizeThroughput(*r);
      bool within = false;
      const double copies = RCopiesOrMinus(*r, &within);
      const auto probes = WindowProbes(*r);
      const auto false_confirmed = FalseConfirmed(*r);
      const auto false_downs = FalseDowns(*r);
      const auto false_after = FalseDownsAfter(*r);
      out << "| " << r->number << " | " << (e == Event::kNone ? "none; keys of " : "") << r->victim << " (`"
          << r->victim_id << "`) | " << r->victim_shards
          << " | " << r->victim_keys.size() << " | " << Fixed(k.p50) << " | " << Fixed(k.max)
          << (k.open ? " (" + std::to_string(k.open) + " open)" : "") << " | "
          << (f.p50 ? Fixed(*f.p50) : "-") << " / " << (f.max ? Fixed(*f.max) : "-")
          << (f.missing ? " (" + std::to_string(f.missing) + " none)" : "") << " | " << Fixed(sk.p50) << " / "
          << Fixed(sk.max) << " | " << Fixed(Ms(r->stall.length)) << (r->stall.open ? " (open)" : "") << " | "
          << Fixed(Ms(r->steady_stall.length), 1) << " | " << Fixed(t.steady_mean) << " | " << t.dip << " ("
          << t.dip_second << ") | " << r->window.ok_gets << " / " << r->window.ok_puts << " | "
          << Fixed(Ms(r->window.longest_call)) << " (" << OpName(r->window.longest_call_op) << ") | "
          << Failures(r->window) << " | " << r->version_before << " → "
          << r->version_after << " (" << (r->version_after - r->version_before) << ") | " << OptMs(r->map.down)
          << " | " << OptMs(r->map.promoted) << " | " << OptMs(r->map.back_up) << " | "
          << (copies >= 0 ? Fixed(copies) + (within ? "" : " (after)") : "-") << " | "
          << (false_downs.empty() ? "0" : std::to_string(false_downs.size()) + ": " + DownList(false_downs))
          << (false_after.empty() ? "" : "; after the window: " + DownList(false_after)) << " | "
          << (probes ? std::to_string(probes->probes) + " / " + std::to_string(probes->refuted) + " / " +
                           std::to_string(probes->confirmed)
                     : "- (" + r->probes_error + ")")
          << " | " << (false_confirmed ? std::to_string(*false_confirmed) : "-") << " | " << RefutedList(*r)
          << " |\n";
    }
    out << "\nSuccessful calls per second, from " << FLAGS_steady_s << " s before the event (negative seconds) to "
        << FLAGS_window_s << " s after"
        << (e == Event::kNone ? " (no fault: second 0 is only where the window begins)"
                              : "; the victim revived at the time in brackets")
        << ":\n\n"
        << "| round | ops/s |\n|---:|---|\n";
    for (const Round* r : of) {
      out << "| " << r->number;
      if (e != Event::kNone) out << " (revived " << Fixed(r->revived_s, 1) << " s)";
      out << " | ";
      for (size_t i = 0; i < r->ops_per_s.size(); ++i) {
        const long second = static_cast<long>(i) - static_cast<long>(FLAGS_steady_s);
        out << (i ? ", " : "") << (second == 0 ? "**0:** " : "") << r->ops_per_s[i];
      }
      out << " |\n";
    }
    std::vector<double> p50s, maxes, stall, steady_stall, steady_ops, dip, failed, failed_other, versions, promoted,
        copies, first_max, false_downs, sent, refuted, confirmed, false_confirmed;
    for (const Round* r : of) {
      const KeyFigures k = Summarize(r->key_gaps);
      p50s.push_back(k.p50);
      maxes.push_back(k.max);
      const FirstOkFigures f = SummarizeFirstOk(*r);
      if (f.max) first_max.push_back(*f.max);
      stall.push_back(Ms(r->stall.length));
      steady_stall.push_back(Ms(r->steady_stall.length));
      const Throughput t = SummarizeThroughput(*r);
      steady_ops.push_back(t.steady_mean);
      dip.push_back(static_cast<double>(t.dip));
      failed.push_back(static_cast<double>(r->window.failed_total()));
      failed_other.push_back(static_cast<double>(r->window.failed_elsewhere_total()));
      versions.push_back(static_cast<double>(r->version_after - r->version_before));
      if (r->map.promoted) promoted.push_back(Ms(*r->map.promoted));
      if (r->map.replicated) copies.push_back(Ms(*r->map.replicated));
      false_downs.push_back(static_cast<double>(FalseDowns(*r).size()));
      if (const auto p = WindowProbes(*r)) {
        sent.push_back(static_cast<double>(p->probes));
        refuted.push_back(static_cast<double>(p->refuted));
        confirmed.push_back(static_cast<double>(p->confirmed));
        false_confirmed.push_back(static_cast<double>(*FalseConfirmed(*r)));
      }
    }
    const auto row = [&](const std::string& name, const std::vector<double>& v, int decimals) {
      if (v.empty()) {
        out << "| " << name << " | - | - |\n";
        return;
      }
      const auto [p50, max] = P50Max(v);
      out << "| " << name << " | " << Fixed(p50, decimals) << " | " << Fixed(max, decimals) << " |\n";
    };
    out << "\n### " << EventName(e) << ": over the " << of.size() << " rounds\n\n"
        << "p50 by nearest rank: value " << (of.size() + 1) / 2 << " of the " << of.size() << " sorted.\n\n"
        << "| figure | p50 | max |\n|---|---:|---:|\n";
    row("key unavailability p50 over the victim keys, ms", p50s, 0);
    row("key unavailability max over the victim keys, ms", maxes, 0);
    row("first OK max over the victim keys, ms (" + std::to_string(first_max.size()) + " rounds had one)",
        first_max, 0);
    row("longest stall of the whole load, ms", stall, 0);
    row("steady: longest stall of the whole load, ms", steady_stall, 1);
    row("steady ops/s", steady_ops, 0);
    row("dip: smallest 1 s bucket of the window, ops/s", dip, 0);
    row("failed calls in the window", failed, 0);
    row("of which on keys whose primary did not fail", failed_other, 0);
    row("map versions committed in the window", versions, 0);
    row("promoted (all the victim's shards moved), ms (" + std::to_string(promoted.size()) + " rounds)", promoted,
        0);
    row("R copies again, ms (" + std::to_string(copies.size()) + " rounds)", copies, 0);
    row("false DOWN: live servers the map showed DOWN in the window", false_downs, 0);
    const std::string read = " (" + std::to_string(sent.size()) + " rounds read)";
    row("probes sent in the window" + read, sent, 0);
    row("probes refuted in the window" + read, refuted, 0);
    row("probes confirmed in the window" + read, confirmed, 0);
    row("false confirmed probes in the window" + read, false_confirmed, 0);
    out << "\n";
  }
  // Totals over the rounds of each event: how often a live server was
  // suspected, and how often wrongly marked DOWN.
  out << "## False suspicion of live servers\n\n"
      << "Totals over the rounds of each event (window seconds: rounds x " << FLAGS_window_s
      << " s). In `kill` and `stop` rounds the victim's own DOWN and one confirmed probe are the fault, not "
         "counted as false.\n\n"
      << "| event | rounds | window s | false DOWN (rounds with one) | map versions | probes sent | refuted | "
         "refuted of a live server (log) | confirmed | false confirmed |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (Event e : events) {
    long n = 0, downs = 0, down_rounds = 0, read = 0, refuted_live = 0;
    uint64_t versions = 0, sent = 0, refuted = 0, confirmed = 0, false_confirmed = 0;
    for (const Round& r : rounds) {
      if (r.event != e) continue;
      ++n;
      const size_t d = FalseDowns(r).size();
      downs += static_cast<long>(d);
      down_rounds += d > 0 ? 1 : 0;
      versions += r.version_after - r.version_before;
      refuted_live += RefutedOfLive(r);
      if (const auto p = WindowProbes(r)) {
        ++read;
        sent += p->probes;
        refuted += p->refuted;
        confirmed += p->confirmed;
        false_confirmed += *FalseConfirmed(r);
      }
    }
    if (n == 0) continue;
    const std::string unread = read == n ? "" : " (" + std::to_string(read) + " of " + std::to_string(n) + " rounds read)";
    out << "| " << EventName(e) << " | " << n << " | " << n * FLAGS_window_s << " | " << downs << " ("
        << down_rounds << ") | " << versions << " | " << sent << unread << " | " << refuted << " | " << refuted_live
        << " | " << confirmed
        << " | " << false_confirmed << " |\n";
  }
  out << "\n";
  // The status message may hold backticks or newlines: shown as code, in one line.
  std::string failure = first_failure;
  std::replace(failure.begin(), failure.end(), '`', '\'');
  std::replace(failure.begin(), failure.end(), '\n', ' ');
  out << "First failed call of the run (in a window or not): "
      << (failure.empty() ? "none" : "`" + failure + "`") << ".\n\n"
      << "Outcome: " << outcome << "\n";
}

}  // namespace rkv::bench
