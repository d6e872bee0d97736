// rkv-failover-bench: what the failure of a shard's primary costs the
// clients (docs/design.md §8.8, "The gap a client sees"), and how often a
// live server is falsely suspected or marked DOWN under the same load
// (§8.8, "Suspicion and probes").
//
// It starts, as real processes on this machine, one rkv-coordinator (its
// state in its own data dir, no etcd) and --servers rkv-servers (R =
// --replicas, --shards shards) over the tcp transport on loopback, through
// the cross-process suites' fixture (tests/test_cluster.h), with the
// coordinator's heartbeat and lease defaults unless --heartbeat_timeout_ms
// or --lease_ms say otherwise. Long-lived clients run a YCSB-A-like load
// (bench/failover/key_load.h) over a small preloaded key set, recording
// every call with its key and status code. Then, for each event of
// --events and --rounds times each:
//   - the cluster is waited for until every server is UP and every shard
//     has R UP replicas, with no new map version for 2 s;
//   - --steady_s of load (the steady baseline);
//   - the event on a server that is the primary of at least one shard (the
//     servers taken in turn): `kill` sends SIGKILL, `stop` sends SIGSTOP;
//     `none` does nothing at all (a control round: the server picked, in a
//     turn of its own, is left alone and only its keys are measured);
//   - --window_s of load from the event (the window);
//   - the victim revived --revive_s after the event (default: at the
//     window's end): a killed server restarted on its data dir and port, a
//     stopped one sent SIGCONT (nothing in a `none` round);
//   - the map watched (every --poll_ms, from the event) until every shard
//     has R UP replicas again, at most --recover_timeout_s after the
//     window.
// Figures of a round (times from the event, bench process's steady clock;
// "victim keys": the records whose shard had the victim as primary in the
// map read just before the event):
//   - key unavailability: per victim key, the longest gap between two
//     consecutive successful calls on that key (any client, GET or PUT,
//     by their end times) among the gaps that end inside the window; the
//     gap that spans the event counts whole, from the last success before
//     it. A key with no success from some point to the window's end counts
//     up to the end ("open"). p50 and max over the victim keys. The same
//     over the steady period is the sampling baseline (how often a key is
//     touched at all).
//   - key first OK: per victim key, the time from the event to the end of
//     the first successful call on it that started after the event; p50
//     and max, and the keys that had none in the window.
//   - stall: the longest gap between two consecutive successful calls of
//     the whole load (all clients, all keys) among the gaps that end in
//     the window, the one spanning the event whole; steady: the same over
//     the steady period.
//   - throughput: successful calls per second in 1 s buckets aligned on
//     the event, from --steady_s before it to --window_s after; the dip is
//     the smallest bucket after the event beside the steady buckets' mean.
//   - successful GETs and PUTs in the window, the longest call (OK or
//     not) that ended in it, failed calls by status code (and the same
//     counts over the steady period in the CSV).
//   - map versions: the coordinator's map version (GetClusterMap) just
//     before the event and at the window's end, and their difference: the
//     versions committed in the window.
//   - down / promoted / back up / R copies: the first poll of the map
//     at which the victim was DOWN; at which none of its shards had it as
//     primary and each an UP one; at which it was UP again after being
//     DOWN; at which every shard had R UP replicas (none catching up)
//     again after the map had fallen below that. R copies can come back
//     only from a revived victim or a spare server (--servers > R).
//   - false DOWN: every server the map polls showed DOWN in the window
//     that is not the round's fault (all of them in a `none` round, all
//     but the victim otherwise): a live server failed over.
//   - probes: the coordinator's probe counters (GetCoordinatorStatus:
//     probes sent, refuted, confirmed; cumulative) read just before the
//     event and at the window's end, and their difference; false
//     confirmed: all confirmed probes in a `none` round, all but one (the
//     victim's) otherwise. The refuted probes' servers are read from the
//     coordinator's log lines written in the window ("... suspected (...)
//     but not DOWN", coordinator/prober.cc): a probe that failed on a
//     server already DOWN counts as refuted too.
//
// Output: a progress line per round on stdout; with --csv a row per
// round; with --md the report's body (setup, what is measured, the rounds,
// the throughput series, p50 and max over the rounds per event), which
// bench/failover.sh puts under the command, commit and machine.
//
// Exit status: 0 when every round ran and the cluster had R copies again
// after each; 1 otherwise; 2 for bad usage.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "bench/failover/figures.h"
#include "bench/failover/key_load.h"
#include "bench/failover/map_watch.h"
#include "bench/failover/report.h"
#include "common/status.h"
#include "tests/test_cluster.h"

DEFINE_string(events, "kill,stop",
              "comma-separated events, each measured --rounds times in this order: kill (SIGKILL of a primary), "
              "stop (SIGSTOP, SIGCONT at --revive_s) and/or none (no fault: a control round, every DOWN in it "
              "false) (default kill,stop)");
DEFINE_string(event, "",
              "one event, kill, stop or none: the same as --events=EVENT (default: unset, --events decides)");
DEFINE_uint32(rounds, 3, "rounds per event (default 3)");
DEFINE_uint32(servers, 3, "rkv-servers (default 3)");
DEFINE_uint32(replicas, 3, "R, the copies of each shard, 2..--servers (default 3)");
DEFINE_uint32(shards, 64, "shards of the cluster (default 64)");
DEFINE_uint32(clients, 4, "client threads, one long-lived rkv::Client each (default 4)");
DEFINE_uint64(records, 300, "records preloaded and used by the load (default 300)");
DEFINE_uint32(value_bytes, 1024, "bytes per value (default 1024)");
DEFINE_uint32(read_percent, 50, "percent of calls that are GETs, the rest PUTs (default 50: YCSB-A)");
DEFINE_string(distribution, "uniform", "key distribution: uniform, zipfian (YCSB's scrambled zipfian) or latest (default uniform)");
DEFINE_uint32(deadline_ms, 5000, "deadline of each call of the load, ms (default 5000)");
DEFINE_uint32(warmup_s, 2, "seconds of load before the first round, not counted (default 2)");
DEFINE_uint32(steady_s, 3, "seconds of load before each event, the steady baseline, >= 1 (default 3)");
DEFINE_uint32(window_s, 20, "seconds measured from each event, >= 1 (default 20)");
DEFINE_int32(revive_s, -1,
             "seconds from the event to the victim's restart (kill) or SIGCONT (stop), 0..--window_s; -1: at "
             "the window's end (default -1)");
DEFINE_uint32(recover_timeout_s, 120,
              "seconds after the window to wait for R UP replicas of every shard before the next round "
              "(default 120)");
DEFINE_uint32(poll_ms, 20, "how often the map is read from the event on, ms (default 20)");
DEFINE_uint32(heartbeat_timeout_ms, 0,
              "the coordinator's --heartbeat_timeout_ms; 0: its default, 3000 (default 0)");
DEFINE_uint32(lease_ms, 0, "the coordinator's --lease_ms; 0: its default, 1000 (default 0)");
DEFINE_string(csv, "", "CSV file to write a row per round to (default: none)");
DEFINE_string(md, "", "file to write the report's body (markdown) to (default: none)");
DEFINE_uint64(seed, 1, "seed of the clients' key and operation choices (default 1)");

namespace rkv::bench {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::TestCluster;
using testing::TestClusterOptions;

constexpr char kProgram[] = "rkv-failover-bench";
constexpr seconds kSetupWait{120};

// ---- The cluster.

// The process index of the server with id `id` in `map`, -1 when none.
int IndexOf(TestCluster& cluster, const ClusterInfo& map, const std::string& id) {
  for (const MemberInfo& m : map.members) {
    if (m.server_id != id) continue;
    for (int i = 0; i < cluster.server_count(); ++i) {
      if (cluster.server(i).address() == m.data_address) return i;
    }
  }
  return -1;
}

// The map once every member is UP and every shard has R UP replicas, and
// no newer version was committed for kQuiet (a revived server's catch-up
// and the coordinator's moves after it end in a run of versions: a steady
// period must not overlap them).
constexpr milliseconds kQuiet{2000};
StatusOr<ClusterInfo> WaitHealthy(Client& monitor, std::chrono::seconds wait) {
  const auto deadline = Clock::now() + wait;
  std::string last = "no map read";
  uint64_t healthy_version = 0;
  Clock::time_point healthy_since;
  while (true) {
    CallOptions call;
    call.timeout = milliseconds(2000);
    const Status refreshed = monitor.RefreshClusterMap(call);
    auto map = monitor.Cluster();
    if (refreshed.ok() && map.ok()) {
      bool all_up = map->members.size() == FLAGS_servers;
      for (const MemberInfo& m : map->members) all_up = all_up && m.state == "UP";
      if (all_up && FullyReplicated(*map, FLAGS_replicas)) {
        if (map->map_version != healthy_version) {
          healthy_version = map->map_version;
          healthy_since = Clock::now();
        } else if (Clock::now() - healthy_since >= kQuiet) {
          return map;
        }
        last = "map version " + std::to_string(map->map_version) + " not yet unchanged for 2 s";
      } else {
        healthy_version = 0;
        last = "map version " + std::to_string(map->map_version) + " not fully replicated";
      }
    } else {
      last = (refreshed.ok() ? map.status() : refreshed).ToString();
    }
    if (Clock::now() >= deadline) return Unavailable("the cluster did not have R UP replicas of every shard: " + last);
    std::this_thread::sleep_for(milliseconds(100));
  }
}

// The coordinator's log file (its stderr: ServerProcess writes it to its
// data dir's name + ".log"; ServerProcess::Log keeps only the tail).
std::string CoordinatorLogPath(TestCluster& cluster) { return cluster.coordinator().data_dir() + ".log"; }

// The size of the file at `path`, 0 when it cannot be read.
size_t FileSize(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  return in ? static_cast<size_t>(in.tellg()) : 0;
}

// Refuted probes by server id in the coordinator's log from byte `from`:
// coordinator/prober.cc logs "server ID (epoch N) suspected (WHY) but not
// DOWN: ..." for each.
std::map<std::string, int> RefutedInLog(const std::string& path, size_t from) {
  std::map<std::string, int> out;
  std::ifstream lines(path, std::ios::binary);
  lines.seekg(static_cast<std::streamoff>(from));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find("but not DOWN") == std::string::npos) continue;
    const size_t server = line.find("server ");
    const size_t epoch = line.find(" (epoch ", server);
    if (server == std::string::npos || epoch == std::string::npos) continue;
    ++out[line.substr(server + 7, epoch - server - 7)];
  }
  return out;
}

// Runs one round; the error stops the bench (the cluster is not as a next
// round needs it).
Status RunRound(TestCluster& cluster, KeyLoad& load, Client& monitor, Round& r, int* next_victim) {
  auto healthy = WaitHealthy(monitor, seconds(FLAGS_recover_timeout_s));
  if (!healthy.ok()) return healthy.status();
  (void)load.Take();  // calls before the round
  const auto round_start = Clock::now();
  std::this_thread::sleep_for(seconds(FLAGS_steady_s));

  CallOptions call;
  call.timeout = milliseconds(2000);
  RKV_RETURN_IF_ERROR(monitor.RefreshClusterMap(call));
  auto map = monitor.Cluster();
  if (!map.ok()) return map.status();
  // The next server, in turn, that is the primary of some shard.
  std::map<std::string, size_t> primaries;
  for (const ShardInfo& s : map->shards) {
    if (!s.replicas.empty()) ++primaries[s.replicas[0]];
  }
  for (int k = 0; k < cluster.server_count() && r.victim < 0; ++k) {
    const int i = (*next_victim + k) % cluster.server_count();
    for (const auto& [id, count] : primaries) {
      if (IndexOf(cluster, *map, id) == i) {
        r.victim = i;
        r.victim_id = id;
        r.victim_shards = count;
      }
    }
  }
  if (r.victim < 0) return NotFound("no server is the primary of a shard");
  *next_victim = (r.victim + 1) % cluster.server_count();
  WatchSpec spec;
  spec.victim = r.victim_id;
  spec.replicas = FLAGS_replicas;
  spec.poll = milliseconds(FLAGS_poll_ms);
  for (const ShardInfo& s : map->shards) {
    if (!s.replicas.empty() && s.replicas[0] == r.victim_id) spec.shards.insert(s.shard);
  }
  for (uint64_t i = 0; i < FLAGS_records; ++i) {
    auto shard = monitor.ShardOfKey(RecordKey(i));
    if (!shard.ok()) return shard.status();
    if (spec.shards.count(*shard) != 0) r.victim_keys.insert(static_cast<uint32_t>(i));
  }
  r.version_before = map->map_version;
  // The probe counters before the event (a failed read leaves the round's
  // probe figures out, not the round).
  const auto read_probes = [&]() -> std::optional<ProbeCounts> {
    auto counts = ReadProbeCounts(cluster.coordinator_address(), cluster.token(), milliseconds(2000));
    if (counts.ok()) return *counts;
    if (r.probes_error.empty()) r.probes_error = counts.status().ToString();
    return std::nullopt;
  };
  r.probes_before = read_probes();
  const size_t log_from = FileSize(CoordinatorLogPath(cluster));

  const auto event = Clock::now();
  if (r.event == Event::kKill) {
    cluster.server(r.victim).Kill9();
  } else if (r.event == Event::kStop) {
    cluster.server(r.victim).Freeze();
  }
  const auto window_end = event + seconds(FLAGS_window_s);
  spec.event = event;
  spec.keep_until = window_end;
  spec.give_up = window_end + seconds(FLAGS_recover_timeout_s);
  std::atomic<bool> stop_watch{false};
  std::thread watcher([&] { r.map = Watch(monitor, spec, stop_watch); });

  const auto revive_at = FLAGS_revive_s < 0 ? window_end : event + seconds(FLAGS_revive_s);
  Status revived = Status::Ok();
  const auto revive = [&] {
    if (r.event == Event::kNone) return;
    std::this_thread::sleep_until(revive_at);
    r.revived_s = Ms(Clock::now() - event) / 1000.0;
    if (r.event == Event::kKill) {
      revived = cluster.server(r.victim).Start();
    } else {
      cluster.server(r.victim).Continue();
    }
  };
  if (revive_at < window_end) revive();
  std::this_thread::sleep_until(window_end);
  r.probes_after = read_probes();
  r.refuted_of = RefutedInLog(CoordinatorLogPath(cluster), log_from);
  if (monitor.RefreshClusterMap(call).ok()) r.version_after = monitor.cluster_map_version();
  if (revive_at >= window_end) revive();
  if (!revived.ok()) {
    stop_watch.store(true, std::memory_order_relaxed);
    watcher.join();
    return Status(revived.code(), "server " + std::to_string(r.victim) + " did not restart: " +
                                      std::string(revived.message()));
  }
  watcher.join();
  r.recovered = r.map.healthy_at_end;

  const Calls calls = load.Take();
  const auto steady_from = event - seconds(FLAGS_steady_s);
  r.key_gaps = KeyGaps(calls, r.victim_keys, event, window_end);
  r.steady_key_gaps = KeyGaps(calls, r.victim_keys, std::max(round_start, steady_from), event);
  r.first_ok = FirstOkAfter(calls, r.victim_keys, event, window_end);
  const auto all = SuccessEnds(calls, nullptr);
  r.stall = LongestGap(all, event, window_end);
  r.steady_stall = LongestGap(all, std::max(round_start, steady_from), event);
  r.ops_per_s = OpsPerSecond(calls, steady_from, window_end);
  r.window = CountCalls(calls, event, window_end, &r.victim_keys);
  r.steady = CountCalls(calls, steady_from, event, &r.victim_keys);
  if (!r.recovered) {
    return DeadlineExceeded("the map did not have R UP replicas of every shard " +
                            std::to_string(FLAGS_recover_timeout_s) + " s after the window (last poll error: " +
                            (r.map.last_error.empty() ? "none" : r.map.last_error) + ")");
  }
  return Status::Ok();
}

void PrintRound(const Round& r) {
  const KeyFigures k = Summarize(r.key_gaps);
  const Throughput t = SummarizeThroughput(r);
  std::printf("%s round %d/%u: %sserver %d (%s, primary of %zu shards, %zu keys); key unavailability p50 %.0f ms, "
              "max %.0f ms%s; stall %.0f ms (steady %.1f ms); ops/s steady %.0f, dip %ld at +%d s; window OK "
              "GET %ld, PUT %ld, longest call %.0f ms (%s); failed %s; "
              "map %llu -> %llu; down %s, promoted %s, back up %s, R copies %s ms (%s)\n",
              EventName(r.event), r.number, FLAGS_rounds, r.event == Event::kNone ? "no fault, keys of " : "",
              r.victim, r.victim_id.c_str(), r.victim_shards,
              r.victim_keys.size(), k.p50, k.max, k.open ? (" (" + std::to_string(k.open) + " open)").c_str() : "",
              Ms(r.stall.length), Ms(r.steady_stall.length), t.steady_mean, t.dip, t.dip_second, r.window.ok_gets,
              r.window.ok_puts, Ms(r.window.longest_call), OpName(r.window.longest_call_op),
              Failures(r.window).c_str(), static_cast<unsigned long long>(r.version_before),
              static_cast<unsigned long long>(r.version_after), OptMs(r.map.down).c_str(),
              OptMs(r.map.promoted).c_str(), OptMs(r.map.back_up).c_str(), OptMs(r.map.replicated).c_str(),
              r.event == Event::kNone ? "nothing to revive" : ("revived at " + Fixed(r.revived_s, 1) + " s").c_str());
  const auto probes = WindowProbes(r);
  const auto false_confirmed = FalseConfirmed(r);
  std::string downs;
  for (const auto& [id, ms] : FalseDowns(r)) downs += (downs.empty() ? "" : ", ") + id + " at " + Fixed(ms) + " ms";
  std::printf("  false DOWN in the window: %zu%s%s; probes sent %s, refuted %s (of %s), confirmed %s, false "
              "confirmed %s%s\n",
              FalseDowns(r).size(), downs.empty() ? "" : " (", downs.empty() ? "" : (downs + ")").c_str(),
              probes ? std::to_string(probes->probes).c_str() : "-",
              probes ? std::to_string(probes->refuted).c_str() : "-", RefutedList(r).c_str(),
              probes ? std::to_string(probes->confirmed).c_str() : "-",
              false_confirmed ? std::to_string(*false_confirmed).c_str() : "-",
              r.probes_error.empty() ? "" : (" (" + r.probes_error + ")").c_str());
  std::fflush(stdout);
}

// ---- Flags.

int Usage(const std::string& error) {
  std::cerr << kProgram << ": " << error << " (see --help)\n";
  return 2;
}

void PrintHelp() {
  std::printf("%s: what the failure of a shard's primary costs the clients, and how often live servers\n"
              "are falsely suspected or marked DOWN under the same load.\n\n",
              kProgram);
  // The file's header comment is the full definition; the flags follow.
  std::printf(
      "Starts one rkv-coordinator (no etcd) and --servers rkv-servers (R = --replicas) over tcp on loopback,\n"
      "runs a YCSB-A-like load of --clients long-lived clients over --records preloaded keys, and per round:\n"
      "--steady_s of load, then kill -9 (kill) or SIGSTOP (stop) of a server that is primary of some shard,\n"
      "or nothing at all (none: a control round, the server picked in turn left alone, its keys measured),\n"
      "--window_s of load measured from that event, the victim restarted or sent SIGCONT --revive_s after the\n"
      "event (default: at the window's end), and the map watched until every shard has R UP replicas again.\n\n"
      "Figures per round (times from the event; victim keys: records whose shard had the victim as primary):\n"
      "  key unavailability  per victim key, the longest gap between two consecutive successful calls on it\n"
      "                      (by end time, any client) among the gaps ending in the window; the gap spanning\n"
      "                      the event counts whole; one still open at the window's end counts to the end.\n"
      "                      p50 and max over the victim keys; the same over the steady period as baseline.\n"
      "  first OK            per victim key, from the event to the end of its first successful call that\n"
      "                      started after the event.\n"
      "  stall               the longest gap between successful calls of the whole load, likewise.\n"
      "  ops/s               successful calls per 1 s bucket aligned on the event, steady mean and dip.\n"
      "  failed              calls failed in the window, by status code, and those of them on keys whose\n"
      "                      primary did not fail (\"on other keys\").\n"
      "  map versions        GetClusterMap's version before the event and at the window's end.\n"
      "  down/promoted/back up/R copies  first map poll with the victim DOWN / its shards moved to UP\n"
      "                      primaries / the victim UP again / every shard with R UP replicas again.\n"
      "  false DOWN          servers the map polls showed DOWN in the window that are not the fault: all of\n"
      "                      them in a none round, all but the victim otherwise (live servers failed over).\n"
      "  probes              the coordinator's probes of suspected servers in the window (GetCoordinatorStatus\n"
      "                      probes / probes_refuted / probes_confirmed, read before the event and at the\n"
      "                      window's end); false confirmed: all confirmed in none, all but one otherwise;\n"
      "                      the refuted probes' servers from the coordinator's log (a probe that failed on\n"
      "                      a server already DOWN counts as refuted too).\n"
      "p50 (nearest rank) and max over the rounds of each event. Exit status 0 when every round ran and\n"
      "the cluster had R copies again after each, 1 otherwise, 2 for bad usage.\n\n"
      "Flags (--name=value):\n");
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);
  for (const auto& f : flags) {
    if (f.filename.find("rkv_failover_bench") == std::string::npos) continue;
    std::printf("  --%-22s %s\n", f.name.c_str(), f.description.c_str());
  }
}

// Parses --name=value arguments into gflags; 0 when parsed, -1 after
// --help, else the exit status of a usage error.
int ParseFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "-help") {
      PrintHelp();
      return -1;
    }
    if (arg.rfind("--", 0) != 0) return Usage("unexpected argument '" + arg + "'");
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) return Usage("flag '" + arg + "' needs a value (--name=value)");
    const std::string name = arg.substr(2, eq - 2);
    gflags::CommandLineFlagInfo info;
    if (!gflags::GetCommandLineFlagInfo(name.c_str(), &info)) return Usage("unknown flag '--" + name + "'");
    if (gflags::SetCommandLineOption(name.c_str(), arg.substr(eq + 1).c_str()).empty()) {
      return Usage("bad value for --" + name + ": '" + arg.substr(eq + 1) + "' (a " + info.type + ")");
    }
  }
  return 0;
}

StatusOr<std::vector<Event>> ParseEvents() {
  const std::string list = FLAGS_event.empty() ? FLAGS_events : FLAGS_event;
  if (!FLAGS_event.empty() && !gflags::GetCommandLineFlagInfoOrDie("events").is_default) {
    return InvalidArgument("give --event or --events, not both");
  }
  if (!FLAGS_event.empty() && FLAGS_event.find(',') != std::string::npos) {
    return InvalidArgument("--event takes one event (kill, stop or none); --events takes a list");
  }
  std::vector<Event> events;
  std::stringstream in(list);
  std::string name;
  while (std::getline(in, name, ',')) {
    Event e;
    if (name == "kill") {
      e = Event::kKill;
    } else if (name == "stop") {
      e = Event::kStop;
    } else if (name == "none") {
      e = Event::kNone;
    } else {
      return InvalidArgument("unknown event '" + name + "' (kill, stop or none)");
    }
    if (std::find(events.begin(), events.end(), e) != events.end()) {
      return InvalidArgument("event '" + name + "' given twice");
    }
    events.push_back(e);
  }
  if (events.empty()) return InvalidArgument("no event (--events=kill,stop,none)");
  return events;
}

Status ValidateFlags() {
  auto distribution = ParseKeyDistribution(FLAGS_distribution);
  if (!distribution.ok()) return distribution.status();
  const auto positive = [](const char* name, uint64_t v) -> Status {
    if (v == 0) return InvalidArgument(std::string("--") + name + " must be > 0");
    return Status::Ok();
  };
  RKV_RETURN_IF_ERROR(positive("rounds", FLAGS_rounds));
  RKV_RETURN_IF_ERROR(positive("servers", FLAGS_servers));
  RKV_RETURN_IF_ERROR(positive("shards", FLAGS_shards));
  RKV_RETURN_IF_ERROR(positive("clients", FLAGS_clients));
  RKV_RETURN_IF_ERROR(positive("records", FLAGS_records));
  RKV_RETURN_IF_ERROR(positive("value_bytes", FLAGS_value_bytes));
  RKV_RETURN_IF_ERROR(positive("deadline_ms", FLAGS_deadline_ms));
  RKV_RETURN_IF_ERROR(positive("steady_s", FLAGS_steady_s));
  RKV_RETURN_IF_ERROR(positive("window_s", FLAGS_window_s));
  RKV_RETURN_IF_ERROR(positive("poll_ms", FLAGS_poll_ms));
  RKV_RETURN_IF_ERROR(positive("recover_timeout_s", FLAGS_recover_timeout_s));
  if (FLAGS_replicas < 2 || FLAGS_replicas > FLAGS_servers) {
    return InvalidArgument("--replicas must be 2..--servers (" + std::to_string(FLAGS_servers) +
                           "): a failover needs a backup");
  }
  if (FLAGS_read_percent > 100) return InvalidArgument("--read_percent must be <= 100");
  if (FLAGS_records > UINT32_MAX) return InvalidArgument("--records must be < 2^32");
  if (FLAGS_revive_s < -1 || FLAGS_revive_s > static_cast<int32_t>(FLAGS_window_s)) {
    return InvalidArgument("--revive_s must be -1 (the window's end) or 0..--window_s");
  }
  return Status::Ok();
}

int Run(const std::vector<Event>& events) {
  TestClusterOptions o;
  o.servers = static_cast<int>(FLAGS_servers);
  o.replicas = static_cast<int>(FLAGS_replicas);
  o.shards = FLAGS_shards;
  // The defaults a user gets, unless the flags say otherwise.
  o.heartbeat_interval_ms = 0;
  o.heartbeat_timeout_ms = static_cast<int>(FLAGS_heartbeat_timeout_ms);
  o.lease_ms = static_cast<int>(FLAGS_lease_ms);
  // Room for every record a few times over (old values wait in quarantine).
  o.server_memory = std::max<uint64_t>(uint64_t{256} << 20, FLAGS_records * (FLAGS_value_bytes + 128) * 8);
  o.max_keys = std::max<uint64_t>(65536, FLAGS_records * 2);
  TestCluster cluster(o);
  std::printf("starting 1 coordinator, %u servers (R = %u) in %s\n", FLAGS_servers, FLAGS_replicas,
              cluster.dir().c_str());
  std::fflush(stdout);
  if (Status s = cluster.Start(); !s.ok()) {
    std::cerr << "the cluster did not start: " << s << "\n" << cluster.Logs() << "\n";
    return 1;
  }
  auto monitor = Client::Connect(cluster.ClusterClientOptions(testing::TestClientOptions(milliseconds(30000))));
  if (!monitor.ok()) {
    std::cerr << "monitor client: " << monitor.status() << "\n" << cluster.Logs() << "\n";
    return 1;
  }
  if (auto healthy = WaitHealthy(**monitor, kSetupWait); !healthy.ok()) {
    std::cerr << healthy.status() << "\n" << cluster.Logs() << "\n";
    return 1;
  }
  KeyLoadOptions lo;
  lo.clients = static_cast<int>(FLAGS_clients);
  lo.records = FLAGS_records;
  lo.value_bytes = FLAGS_value_bytes;
  lo.read_percent = static_cast<int>(FLAGS_read_percent);
  lo.distribution = *ParseKeyDistribution(FLAGS_distribution);
  lo.seed = FLAGS_seed;
  auto load = KeyLoad::Connect(
      cluster.ClusterClientOptions(testing::TestClientOptions(milliseconds(FLAGS_deadline_ms))), lo, kSetupWait);
  if (!load.ok()) {
    std::cerr << "clients: " << load.status() << "\n" << cluster.Logs() << "\n";
    return 1;
  }
  if (Status s = (*load)->Preload(kSetupWait); !s.ok()) {
    std::cerr << "preload: " << s << "\n" << cluster.Logs() << "\n";
    return 1;
  }
  std::printf("%llu records of %u bytes loaded; %u clients running\n",
              static_cast<unsigned long long>(FLAGS_records), FLAGS_value_bytes, FLAGS_clients);
  std::fflush(stdout);
  (*load)->Start();
  std::this_thread::sleep_for(seconds(FLAGS_warmup_s));

  std::vector<Round> rounds;
  std::string outcome = "every round ran, and every shard had R UP replicas again after each.";
  int rc = 0;
  // `none` rounds take the servers in a turn of their own, so that adding
  // them changes no kill or stop round's victim.
  int next_victim = 0;
  int next_untouched = 0;
  for (Event e : events) {
    for (uint32_t n = 1; n <= FLAGS_rounds && rc == 0; ++n) {
      Round r;
      r.event = e;
      r.number = static_cast<int>(n);
      const Status s = RunRound(cluster, **load, **monitor, r, e == Event::kNone ? &next_untouched : &next_victim);
      if (r.victim >= 0 && !r.ops_per_s.empty()) {
        rounds.push_back(r);
        PrintRound(r);
      }
      if (!s.ok()) {
        outcome = std::string("**stopped** in ") + EventName(e) + " round " + std::to_string(n) + ": " + s.ToString();
        std::cerr << kProgram << ": " << EventName(e) << " round " << n << ": " << s << "\n"
                  << cluster.Logs() << "\n";
        rc = 1;
      }
    }
  }
  (*load)->Stop();
  if (!FLAGS_csv.empty()) WriteCsv(FLAGS_csv, rounds);
  if (!FLAGS_md.empty()) WriteMarkdown(FLAGS_md, events, rounds, (*load)->first_failure(), outcome);
  return rc;
}

}  // namespace
}  // namespace rkv::bench

int main(int argc, char** argv) {
  if (const int rc = rkv::bench::ParseFlags(argc, argv); rc != 0) return rc < 0 ? 0 : rc;
  const rkv::Status valid = rkv::bench::ValidateFlags();
  if (!valid.ok()) return rkv::bench::Usage(std::string(valid.message()));
  auto events = rkv::bench::ParseEvents();
  if (!events.ok()) return rkv::bench::Usage(std::string(events.status().message()));
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  return rkv::bench::Run(*events);
}
