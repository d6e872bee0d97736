// rkv-leader-failover-bench: what a change of the leading coordinator costs
// (docs/design.md §8.8, "The cost of a leader change"; §8.11).
//
// It starts, as real processes on this machine, an etcd of three members,
// three rkv-coordinators sharing it (--etcd) and three rkv-servers (R = 3,
// 64 shards), all with the defaults a user gets (lease 1 s, heartbeats,
// election TTL 2 s), through the cross-process suites' fixture
// (tests/test_cluster.h). Long-lived clients run a YCSB-A-like load
// (bench/failover/key_load.h) with a deadline per call, recording every
// call. Then, --rounds times: --steady_s of load, kill -9 of the leading
// coordinator, and, timed from the kill:
//   - elected: the first read of etcd's leader key (every --poll_ms) that
//     names another coordinator;
//   - answers: the first OK answer to RenewLease from a surviving
//     coordinator (each asked every --poll_ms): the new leader has taken the
//     state over and grants leases;
//   - first commit: the first write of the state's meta key under the new
//     leader key, as a watch of etcd sees it, when the new leader commits
//     anything before the round ends (a leader change alone commits
//     nothing);
// the killed coordinator restarted (as a standby) once another answers,
// then --settle_s of load. From the call logs, over the time from the kill
// to the round's end: the longest stall (the longest a client went without
// a successful call), the longest call, failed calls; and the same over the
// --steady_s before the kill, for comparison.
//
// Output: a progress line per round on stdout; with --csv a row per round;
// with --md the report's body (setup, what is measured, the rounds, p50 and
// max over them), which bench/leader_failover.sh puts under the command,
// commit and machine.
//
// Exit status: 0 when every round ran and etcd's history shows every map
// version committed under its leader's key; 1 otherwise; 2 for bad flags.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "bench/failover/key_load.h"
#include "bench/leader_failover/probes.h"
#include "bench/leader_failover/window.h"
#include "common/program_help.h"
#include "tests/test_cluster.h"

DEFINE_uint32(rounds, 10, "leader changes to measure (default 10)");
DEFINE_uint32(clients, 6, "client threads, one long-lived rkv::Client each (default 6)");
DEFINE_uint64(records, 10000, "records preloaded and used by the load (default 10000)");
DEFINE_uint32(value_bytes, 1024, "bytes per value (default 1024)");
DEFINE_uint32(read_percent, 50, "percent of calls that are GETs, the rest PUTs (default 50: YCSB-A)");
DEFINE_string(distribution, "zipfian", "key distribution: zipfian (YCSB's scrambled zipfian), uniform or latest (default zipfian)");
DEFINE_uint32(deadline_ms, 5000, "deadline of each call of the load, ms (default 5000)");
DEFINE_uint32(warmup_s, 3, "seconds of load before the first round, not counted (default 3)");
DEFINE_uint32(steady_s, 3, "seconds of load before each kill, the steady baseline (default 3)");
DEFINE_uint32(settle_s, 3, "seconds of load after the killed coordinator restarted, per round (default 3)");
DEFINE_uint32(poll_ms, 5, "how often etcd's leader key is read and RenewLease asked during a change, ms (default 5)");
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

// etcd key prefix of the fixture's coordinators (tests/test_cluster.cc).
constexpr char kPrefix[] = "/rkv-test/";
constexpr milliseconds kChangeTimeout{60000};

struct Round {
  int number = 0;
  int killed = -1;
  int leader = -1;    // per the leader key
  int answered = -1;  // the coordinator that first answered RenewLease
  double elected_ms = 0;
  double answers_ms = 0;
  std::optional<double> commit_ms;
  double restart_ms = 0;  // the killed coordinator's restart, to its listening line
  WindowFigures steady;
  WindowFigures change;
};

double Ms(microseconds us) { return static_cast<double>(us.count()) / 1000.0; }
double Ms(Clock::duration d) { return Ms(duration_cast<microseconds>(d)); }

std::string Fixed(double v, int decimals = 0) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

const char* OpName(KeyCall::Op op) { return op == KeyCall::Op::kGet ? "GET" : "PUT"; }

// The nearest-rank p50 and the max of `v` (not empty).
std::pair<double, double> P50Max(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[(v.size() + 1) / 2 - 1], v.back()};
}

int IndexOf(TestCluster& cluster, const std::string& address) {
  for (int i = 0; i < cluster.coordinator_count(); ++i) {
    if (cluster.coordinator(i).address() == address) return i;
  }
  return -1;
}

void WriteCsv(const std::string& path, const std::vector<Round>& rounds) {
  std::ofstream out(path);
  out << "round,killed,leader,answered,elected_ms,answers_ms,first_commit_ms,restart_ms,stall_ms,stall_open,"
         "longest_call_ms,longest_call_op,longest_get_ms,longest_put_ms,p50_ms,p99_ms,calls,failed,"
         "steady_stall_ms,steady_longest_call_ms,steady_p99_ms,steady_calls,steady_failed\n";
  for (const Round& r : rounds) {
    out << r.number << ',' << r.killed << ',' << r.leader << ',' << r.answered << ',' << Fixed(r.elected_ms, 1) << ','
        << Fixed(r.answers_ms, 1) << ',' << (r.commit_ms ? Fixed(*r.commit_ms, 1) : "") << ','
        << Fixed(r.restart_ms, 1) << ',' << Fixed(Ms(r.change.longest_gap), 1) << ','
        << (r.change.gap_open ? 1 : 0) << ',' << Fixed(Ms(r.change.longest_call), 1) << ','
        << OpName(r.change.longest_call_op) << ',' << Fixed(Ms(r.change.longest_get), 1) << ','
        << Fixed(Ms(r.change.longest_put), 1) << ',' << Fixed(Ms(r.change.p50), 3) << ','
        << Fixed(Ms(r.change.p99), 3) << ',' << r.change.calls << ',' << r.change.failed << ','
        << Fixed(Ms(r.steady.longest_gap), 1) << ',' << Fixed(Ms(r.steady.longest_call), 1) << ','
        << Fixed(Ms(r.steady.p99), 3) << ',' << r.steady.calls << ',' << r.steady.failed << '\n';
  }
}

void WriteMarkdown(const std::string& path, const std::vector<Round>& rounds, const std::string& history,
                   const std::string& first_failure) {
  std::ofstream out(path);
  out << "## Setup\n\n"
      << "All on this machine, over loopback: an etcd of 3 members (Debian's etcd-server), 3 rkv-coordinators "
         "sharing it (--etcd), 3 rkv-servers, --replicas=3, 64 shards, the tcp transport; leases, heartbeats and "
         "the election at their defaults (lease 1000 ms, election TTL 2 s). The processes are started by the "
         "cross-process suites' fixture (tests/test_cluster.h).\n\n"
      << "Load: " << FLAGS_clients << " client threads, each with its own long-lived rkv::Client (every "
      << "coordinator listed) and a " << FLAGS_deadline_ms << " ms deadline per call, closed loop; "
      << FLAGS_read_percent << "% GET, " << (100 - FLAGS_read_percent) << "% PUT of " << FLAGS_value_bytes
      << "-byte values, keys " << FLAGS_distribution << " over " << FLAGS_records
      << " preloaded records (YCSB-A-like); every call's start and end recorded.\n\n"
      << "Each round: " << FLAGS_steady_s << " s of load, `kill -9` of the leading coordinator, the waits below, "
      << "the killed coordinator restarted (it comes back a standby), " << FLAGS_settle_s
      << " s of load. The first round follows " << FLAGS_warmup_s << " s of load not counted.\n\n"
      << "## What is measured\n\n"
      << "Times from the kill (steady clock of the bench process):\n\n"
      << "- **elected**: the first read of etcd's leader key (a linearizable read every " << FLAGS_poll_ms
      << " ms) that names another coordinator. The dead leader's key lasts until its etcd lease expires.\n"
      << "- **answers**: the first OK answer to `RenewLease` (map version 0) from a surviving coordinator, each "
         "asked every "
      << FLAGS_poll_ms
      << " ms (a standby refuses it): the new leader has reloaded the state and grants leases again. A leader "
         "change alone commits nothing, so this is the end of the change.\n"
      << "- **first commit**: the first write of the state's meta key (a new map version) after the new leader "
         "key's creation, as a watch of etcd saw it, when the new leader committed anything before the round "
         "ended; - when it had nothing to commit.\n\n"
      << "From the clients' call logs, over the time from the kill to the round's end:\n\n"
      << "- **stall**: the longest time one client thread went without a call completing successfully (a gap "
         "that began before the kill counts whole).\n"
      << "- **longest call**: the longest single call that ended in that time, and the longest GET and PUT.\n"
      << "- **failed**: calls that ended in that time with an error.\n"
      << "- **steady**: the stall and longest call over the " << FLAGS_steady_s << " s before the kill.\n\n"
      << "## Rounds\n\n"
      << "| round | killed | new leader | elected ms | answers ms | first commit ms | stall ms | longest call ms "
         "| longest GET ms | longest PUT ms | p99 call ms | calls | failed | steady stall ms | steady longest call "
         "ms |\n"
      << "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Round& r : rounds) {
    out << "| " << r.number << " | " << r.killed << " | " << r.leader
        << (r.answered != r.leader ? " (answered: " + std::to_string(r.answered) + ")" : "") << " | "
        << Fixed(r.elected_ms) << " | " << Fixed(r.answers_ms) << " | " << (r.commit_ms ? Fixed(*r.commit_ms) : "-")
        << " | " << Fixed(Ms(r.change.longest_gap)) << (r.change.gap_open ? " (open)" : "") << " | "
        << Fixed(Ms(r.change.longest_call)) << " (" << OpName(r.change.longest_call_op) << ") | "
        << Fixed(Ms(r.change.longest_get)) << " | " << Fixed(Ms(r.change.longest_put)) << " | "
        << Fixed(Ms(r.change.p99), 2) << " | " << r.change.calls << " | " << r.change.failed << " | "
        << Fixed(Ms(r.steady.longest_gap), 1) << " | " << Fixed(Ms(r.steady.longest_call), 1) << " |\n";
  }
  std::vector<double> elected, answers, commits, stall, longest, get, put, failed, steady_stall, steady_call;
  for (const Round& r : rounds) {
    elected.push_back(r.elected_ms);
    answers.push_back(r.answers_ms);
    if (r.commit_ms) commits.push_back(*r.commit_ms);
    stall.push_back(Ms(r.change.longest_gap));
    longest.push_back(Ms(r.change.longest_call));
    get.push_back(Ms(r.change.longest_get));
    put.push_back(Ms(r.change.longest_put));
    failed.push_back(static_cast<double>(r.change.failed));
    steady_stall.push_back(Ms(r.steady.longest_gap));
    steady_call.push_back(Ms(r.steady.longest_call));
  }
  const auto row = [&](const std::string& name, const std::vector<double>& v, int decimals) {
    if (v.empty()) {
      out << "| " << name << " | - | - |\n";
      return;
    }
    const auto [p50, max] = P50Max(v);
    out << "| " << name << " | " << Fixed(p50, decimals) << " | " << Fixed(max, decimals) << " |\n";
  };
  out << "\n## Over the " << rounds.size() << " rounds\n\n"
      << "p50 by nearest rank: value " << (rounds.size() + 1) / 2 << " of the " << rounds.size() << " sorted.\n\n"
      << "| figure | p50 | max |\n|---|---:|---:|\n";
  row("elected (kill to another leader key), ms", elected, 0);
  row("answers (kill to the new leader's first RenewLease), ms", answers, 0);
  row("first commit by the new leader, ms (" + std::to_string(commits.size()) + " rounds had one)", commits, 0);
  row("longest stall of a client, ms", stall, 0);
  row("longest call, ms", longest, 0);
  row("longest GET, ms", get, 0);
  row("longest PUT, ms", put, 0);
  row("failed calls per round", failed, 0);
  row("steady: longest stall, ms", steady_stall, 1);
  row("steady: longest call, ms", steady_call, 1);
  out << "\nFirst failed call: " << (first_failure.empty() ? "none" : "`" + first_failure + "`") << ".\n\n"
      << "etcd's history after the rounds: " << history << "\n";
}

int Run() {
  auto distribution = ParseKeyDistribution(FLAGS_distribution);
  if (!distribution.ok() || FLAGS_rounds == 0 || FLAGS_clients == 0 || FLAGS_records == 0 ||
      FLAGS_value_bytes == 0 || FLAGS_read_percent > 100 || FLAGS_deadline_ms == 0 || FLAGS_poll_ms == 0) {
    std::cerr << "rkv-leader-failover-bench: bad flags (--distribution zipfian|uniform; --rounds, --clients, "
                 "--records, --value_bytes, --deadline_ms, --poll_ms > 0; --read_percent <= 100)\n";
    return 2;
  }
  TestClusterOptions o;
  o.etcd_members = 3;
  o.coordinators = 3;
  o.servers = 3;
  o.replicas = 3;
  o.shards = 64;
  // The defaults a user gets: leases, heartbeats, election.
  o.heartbeat_interval_ms = 0;
  o.heartbeat_timeout_ms = 0;
  // Room for every record a few times over (old values wait in quarantine).
  o.server_memory = std::max<uint64_t>(uint64_t{256} << 20, FLAGS_records * (FLAGS_value_bytes + 128) * 8);
  o.max_keys = std::max<uint64_t>(65536, FLAGS_records * 2);
  TestCluster cluster(o);
  std::printf("starting etcd (3 members), 3 coordinators, 3 servers in %s\n", cluster.dir().c_str());
  std::fflush(stdout);
  if (Status s = cluster.Start(); !s.ok()) {
    std::cerr << "the cluster did not start: " << s << "\n" << cluster.Logs() << "\n";
    return 1;
  }
  auto probes = FailoverProbes::Create(cluster.etcd()->endpoints(), kPrefix, cluster.token());
  if (!probes.ok()) {
    std::cerr << "etcd client: " << probes.status() << "\n";
    return 1;
  }
  if (auto first = (*probes)->WaitForLeaderOtherThan("", milliseconds(50), kChangeTimeout); !first.ok()) {
    std::cerr << "no leader: " << first.status() << "\n" << cluster.Logs() << "\n";
    return 1;
  }

  KeyLoadOptions lo;
  lo.clients = static_cast<int>(FLAGS_clients);
  lo.records = FLAGS_records;
  lo.value_bytes = FLAGS_value_bytes;
  lo.read_percent = static_cast<int>(FLAGS_read_percent);
  lo.distribution = *distribution;
  lo.seed = FLAGS_seed;
  auto load = KeyLoad::Connect(cluster.ClusterClientOptions(testing::TestClientOptions(milliseconds(FLAGS_deadline_ms))),
                            lo, seconds(120));
  if (!load.ok()) {
    std::cerr << "clients: " << load.status() << "\n" << cluster.Logs() << "\n";
    return 1;
  }
  if (Status s = (*load)->Preload(seconds(120)); !s.ok()) {
    std::cerr << "preload: " << s << "\n" << cluster.Logs() << "\n";
    return 1;
  }
  std::printf("%u records of %u bytes loaded; %u clients running\n", static_cast<unsigned>(FLAGS_records),
              FLAGS_value_bytes, FLAGS_clients);
  std::fflush(stdout);
  (*load)->Start();
  std::this_thread::sleep_for(seconds(FLAGS_warmup_s));
  std::vector<Clock::time_point> last_ok = LastOk((*load)->Take(), {});

  std::vector<Round> rounds;
  for (uint32_t n = 1; n <= FLAGS_rounds; ++n) {
    Round r;
    r.number = static_cast<int>(n);
    const auto round_start = Clock::now();
    std::this_thread::sleep_for(seconds(FLAGS_steady_s));
    auto leader = (*probes)->ReadLeader(milliseconds(5000));
    if (!leader.ok() || leader->value.empty() || (r.killed = IndexOf(cluster, leader->value)) < 0) {
      std::cerr << "round " << n << ": no leader to kill ("
                << (leader.ok() ? "key '" + leader->value + "'" : leader.status().ToString()) << ")\n";
      return 1;
    }
    std::vector<std::string> survivors;
    std::vector<int> survivor_index;
    for (int i = 0; i < cluster.coordinator_count(); ++i) {
      if (i == r.killed) continue;
      survivors.push_back(cluster.coordinator(i).address());
      survivor_index.push_back(i);
    }

    const auto killed = Clock::now();
    cluster.coordinator(r.killed).Kill9();
    StatusOr<FailoverProbes::Answer> answer = Internal("not asked");
    std::thread asker([&] { answer = (*probes)->WaitForRenewLease(survivors, milliseconds(FLAGS_poll_ms), kChangeTimeout); });
    auto seen = (*probes)->WaitForLeaderOtherThan(leader->value, milliseconds(FLAGS_poll_ms), kChangeTimeout);
    asker.join();
    if (!seen.ok() || !answer.ok()) {
      std::cerr << "round " << n << ": " << (seen.ok() ? answer.status() : seen.status()) << "\n"
                << cluster.Logs() << "\n";
      return 1;
    }
    r.leader = IndexOf(cluster, seen->key.value);
    r.answered = survivor_index[answer->candidate];
    r.elected_ms = Ms(seen->at - killed);
    r.answers_ms = Ms(answer->at - killed);

    const auto restart = Clock::now();
    if (Status s = cluster.coordinator(r.killed).Start(); !s.ok()) {
      std::cerr << "round " << n << ": coordinator " << r.killed << " did not restart: " << s << "\n";
      return 1;
    }
    r.restart_ms = Ms(Clock::now() - restart);
    std::this_thread::sleep_for(seconds(FLAGS_settle_s));
    const auto round_end = Clock::now();
    const auto calls = (*load)->Take();
    if (auto commit = (*probes)->FirstCommitAfter(seen->key.create_revision)) r.commit_ms = Ms(*commit - killed);
    r.steady = Analyze(calls, last_ok, round_start, killed);
    r.change = Analyze(calls, last_ok, killed, round_end);
    last_ok = LastOk(calls, std::move(last_ok));
    rounds.push_back(r);

    std::printf("round %d/%u: coordinator %d killed; %d leads after %.0f ms, answers RenewLease after %.0f ms; "
                "first commit %s; longest stall %.0f ms, longest call %.0f ms (%s); %ld calls, %ld failed "
                "(steady: stall %.1f ms, call %.1f ms)\n",
                r.number, FLAGS_rounds, r.killed, r.leader, r.elected_ms, r.answers_ms,
                r.commit_ms ? (Fixed(*r.commit_ms) + " ms").c_str() : "none", Ms(r.change.longest_gap),
                Ms(r.change.longest_call), OpName(r.change.longest_call_op), r.change.calls, r.change.failed,
                Ms(r.steady.longest_gap), Ms(r.steady.longest_call));
    std::fflush(stdout);
  }
  (*load)->Stop();

  const std::string watch_error = (*probes)->watch_error();
  if (!watch_error.empty()) std::printf("the commit watch ended early: %s\n", watch_error.c_str());
  const ::testing::AssertionResult history = cluster.CheckLeaderHistory();
  const std::string history_text =
      history ? std::string("every map version was committed under the leader key of its revision, one version at "
                            "a time (`TestCluster::CheckLeaderHistory`).")
              : std::string("**CHECK FAILED**: ") + history.message();
  if (!history) std::printf("etcd's history: %s\n", history.message());
  if (!FLAGS_csv.empty()) WriteCsv(FLAGS_csv, rounds);
  if (!FLAGS_md.empty()) WriteMarkdown(FLAGS_md, rounds, history_text, (*load)->first_failure());
  return history ? 0 : 1;
}

}  // namespace
}  // namespace rkv::bench

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "rkv-leader-failover-bench [--rounds=N] [--clients=N] [--records=N] [--value_bytes=N] [--read_percent=P] "
      "[--distribution=zipfian|uniform] [--deadline_ms=MS] [--warmup_s=S] [--steady_s=S] [--settle_s=S] "
      "[--poll_ms=MS] [--csv=FILE] [--md=FILE] [--seed=N]");
  rkv::ParseProgramFlags(&argc, &argv, __FILE__);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  return rkv::bench::Run();
}
