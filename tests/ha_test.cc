// Several coordinators sharing one etcd (docs/design.md §8.11): the
// leader dies, freezes or loses etcd while clients run, and the cluster
// goes on. Each test starts its own etcd on loopback (tests/etcd_process.h),
// three coordinators and three servers (R = 3), and drives a load of
// long-lived clients with 5 s deadlines: a call that starts during a leader
// change waits, it does not fail. How long the longest call took is
// printed, never asserted (the machine may be loaded).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/etcd/etcd_client.h"
#include "rkv/admin.h"
#include "rkv/client.h"
#include "tests/test_cluster.h"

namespace rkv::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// The deadline of every call of the load: what the users set.
constexpr milliseconds kOpDeadline{5000};

// Long-lived clients, one thread each, writing keys of their own and
// reading each back: a read that does not return the thread's last
// acknowledged value is stale. Counts failures, and the longest call.
class Load {
 public:
  Load(TestCluster& cluster, int clients) {
    for (int c = 0; c < clients; ++c) {
      clients_.push_back(cluster.ClusterClient(TestClientOptions(kOpDeadline)));
      EXPECT_NE(clients_.back(), nullptr);
    }
  }
  ~Load() { Stop(); }

  void Start() {
    for (size_t c = 0; c < clients_.size(); ++c) {
      if (clients_[c] == nullptr) continue;
      threads_.emplace_back([this, c] { Run(c); });
    }
  }
  void Stop() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  // Waits until `n` more calls completed than when it was called (bounded).
  ::testing::AssertionResult Progress(int n) {
    const long target = completed_.load() + n;
    return WaitFor(
        "calls of the load to complete", [&] { return completed_.load() >= target; }, seconds(60), milliseconds(10));
  }

  long completed() const { return completed_.load(); }
  int failures() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failures_;
  }
  std::string first_failure() const {
    std::lock_guard<std::mutex> lock(mu_);
    return first_failure_;
  }
  milliseconds longest() const { return milliseconds(longest_ms_.load()); }
  // Whether one of the (first 50) failed calls' errors holds `text`.
  bool AnyFailureSays(const std::string& text) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& m : messages_) {
      if (m.find(text) != std::string::npos) return true;
    }
    return false;
  }
  Client& client(size_t c) { return *clients_.at(c); }

 private:
  void Record(Clock::time_point start, const Status& s, const std::string& what) {
    const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
    long prev = longest_ms_.load();
    while (took > prev && !longest_ms_.compare_exchange_weak(prev, took)) {
    }
    if (s.ok()) {
      completed_.fetch_add(1);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (failures_++ == 0) first_failure_ = what + ": " + s.ToString();
    if (messages_.size() < 50) messages_.push_back(s.ToString());
  }

  void Run(size_t c) {
    Client& client = *clients_[c];
    std::map<std::string, std::string> acked;
    for (long i = 0; !stop_.load(); ++i) {
      const std::string key = "ha-" + std::to_string(c) + "-" + std::to_string(i % 32);
      const std::string value = "v" + std::to_string(i);
      auto start = Clock::now();
      const Status put = client.Put(key, value).status();
      Record(start, put, "PUT " + key);
      if (put.ok()) acked[key] = value;
      const auto it = acked.find(key);
      if (it == acked.end()) continue;
      start = Clock::now();
      auto got = client.Get(key);
      Record(start, got.status(), "GET " + key);
      if (got.ok() && *got != it->second && put.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        if (failures_++ == 0) first_failure_ = "stale GET " + key + ": '" + *got + "', not '" + it->second + "'";
      }
    }
  }

  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<long> completed_{0};
  std::atomic<long> longest_ms_{0};
  mutable std::mutex mu_;
  int failures_ = 0;
  std::string first_failure_;
  std::vector<std::string> messages_;
};

class HaTest : public TestClusterTest {
 protected:
  void StartHa(int etcd_members) {
    TestClusterOptions o;
    o.etcd_members = etcd_members;
    o.coordinators = 3;
    o.servers = 3;
    o.replicas = 3;
    o.shards = 64;
    // The defaults a user gets: leases, heartbeats, election.
    o.heartbeat_interval_ms = 0;
    o.heartbeat_timeout_ms = 0;
    ASSERT_NO_FATAL_FAILURE(StartCluster(o));
    ASSERT_TRUE(WaitFor("a leader", [&] { return cluster().LeaderIndex() >= 0; }, seconds(60), milliseconds(50)));
  }

  // Waits until a coordinator other than `old` leads; returns its index.
  int WaitForNewLeader(int old) {
    int leader = -1;
    EXPECT_TRUE(WaitFor(
        "another coordinator to lead",
        [&] {
          leader = cluster().LeaderIndex();
          return leader >= 0 && leader != old;
        },
        seconds(60), milliseconds(20)));
    return leader;
  }
};

TEST_F(HaTest, KillingTheLeaderFailsNoCallAndTheNewLeaderFailsOverAServer) {
  ASSERT_NO_FATAL_FAILURE(StartHa(1));
  Load load(cluster(), 4);
  load.Start();
  ASSERT_TRUE(load.Progress(200));

  const int old = cluster().LeaderIndex();
  const auto killed = Clock::now();
  cluster().coordinator(old).Kill9();
  const int leader = WaitForNewLeader(old);
  ASSERT_GE(leader, 0);
  const auto elected_ms = std::chrono::duration_cast<milliseconds>(Clock::now() - killed).count();
  ASSERT_TRUE(load.Progress(500));
  EXPECT_EQ(load.failures(), 0) << load.first_failure();
  std::printf("ha: leader %d killed; coordinator %d leads after %lld ms; longest call %lld ms; %ld calls\n", old,
              leader, static_cast<long long>(elected_ms), static_cast<long long>(load.longest().count()),
              load.completed());
  std::fflush(stdout);

  // The killed coordinator comes back as a standby; kvctl shows who leads.
  ASSERT_TRUE(cluster().coordinator(old).Start().ok());
  const std::string leader_address = cluster().coordinator(leader).address();
  CommandResult shown;
  EXPECT_TRUE(WaitFor(
      "kvctl coordinators to show one leader and two standbys",
      [&] {
        shown = cluster().Kvctl({"coordinators"});
        size_t standbys = 0;
        for (size_t at = shown.out.find(" standby "); at != std::string::npos; at = shown.out.find(" standby ", at + 1)) {
          ++standbys;
        }
        return shown.exit_code == 0 && shown.out.find(leader_address + "  leader") != std::string::npos &&
               standbys == 2;
      },
      seconds(30), milliseconds(200)))
      << shown.out << shown.err;
  EXPECT_NE(shown.out.find("healthy, etcd 3.4"), std::string::npos) << shown.out;
  const CommandResult members = cluster().Kvctl({"members"});
  EXPECT_EQ(members.exit_code, 0) << members.err;
  EXPECT_NE(members.out.find(leader_address + " leader"), std::string::npos) << members.out;

  // The new leader confirms servers and fails a dead one over: its shards
  // get a new primary, and the load goes on.
  Client& client = load.client(0);
  const std::string victim = cluster().IdOf(client, 2);
  ASSERT_FALSE(victim.empty());
  cluster().server(2).Kill9();
  ClusterInfo map;
  EXPECT_TRUE(cluster().WaitForMap(
      client,
      [&](const ClusterInfo& c) {
        for (const MemberInfo& m : c.members) {
          if (m.server_id == victim) return m.state == "DOWN" && m.shards == 0;
        }
        return false;
      },
      &map));
  ASSERT_TRUE(load.Progress(200));
  // Restarted, it rejoins through the new leader and is confirmed UP.
  ASSERT_TRUE(cluster().server(2).Start().ok());
  EXPECT_TRUE(cluster().WaitForMap(client, [&](const ClusterInfo& c) {
    for (const MemberInfo& m : c.members) {
      if (m.server_id == victim) return m.state == "UP";
    }
    return false;
  }));
  load.Stop();
  std::printf("ha: after the server's failover (calls of a killed server fail over: not counted): longest call "
              "%lld ms, %d failed calls\n",
              static_cast<long long>(load.longest().count()), load.failures());
  std::fflush(stdout);
  EXPECT_TRUE(cluster().CheckLeaderHistory());
}

TEST_F(HaTest, AFrozenLeaderComesBackToNothing) {
  ASSERT_NO_FATAL_FAILURE(StartHa(1));
  Load load(cluster(), 3);
  load.Start();
  ASSERT_TRUE(load.Progress(100));

  // Frozen for longer than its election lease: another coordinator leads.
  const int old = cluster().LeaderIndex();
  cluster().coordinator(old).Freeze();
  const int leader = WaitForNewLeader(old);
  ASSERT_GE(leader, 0);
  ASSERT_TRUE(load.Progress(200));

  // Not one call failed across the freeze and the election.
  EXPECT_EQ(load.failures(), 0) << load.first_failure();

  // A primary dies; the new leader promotes its backups. (Calls on its
  // keys may fail until they have: that is a server's failover.)
  Client& client = load.client(0);
  const std::string victim = cluster().IdOf(client, 1);
  ASSERT_FALSE(victim.empty());
  cluster().server(1).Kill9();
  EXPECT_TRUE(cluster().WaitForMap(client, [&](const ClusterInfo& c) {
    for (const MemberInfo& m : c.members) {
      if (m.server_id == victim) return m.state == "DOWN" && m.shards == 0;
    }
    return false;
  }));

  // The old leader wakes up: its leadership lapsed on its own clock, so it
  // grants no lease and commits nothing (each commit is conditioned on its
  // leader key, which is gone); it says so and stands by.
  cluster().coordinator(old).Continue();
  EXPECT_TRUE(WaitFor(
      "the old leader to stand down",
      [&] { return cluster().coordinator(old).Log().find("no longer leads") != std::string::npos; }, seconds(30),
      milliseconds(50)));
  EXPECT_EQ(cluster().LeaderIndex(), leader);
  ASSERT_TRUE(load.Progress(200));
  load.Stop();
  std::printf("ha: frozen leader %d, new leader %d; longest call %lld ms\n", old, leader,
              static_cast<long long>(load.longest().count()));
  std::fflush(stdout);
  EXPECT_TRUE(cluster().CheckLeaderHistory());
}

TEST_F(HaTest, AStoppedEtcdMemberChangesNothingAndAllOfEtcdStoppedIsSurvived) {
  ASSERT_NO_FATAL_FAILURE(StartHa(3));
  Load load(cluster(), 3);
  load.Start();
  ASSERT_TRUE(load.Progress(100));

  // The member that leads etcd frozen, then a follower (one at a time):
  // quorum holds, the load goes on.
  auto etcd_client = etcd::EtcdClient::Create(cluster().etcd()->endpoints());
  ASSERT_TRUE(etcd_client.ok()) << etcd_client.status();
  const auto member_leading = [&](bool leading) {
    for (int attempt = 0; attempt < 100; ++attempt) {
      const auto statuses = (*etcd_client)->EndpointStatuses(Clock::now() + seconds(2));
      for (size_t i = 0; i < statuses.size(); ++i) {
        const bool leads = statuses[i].health.ok() && statuses[i].member_id == statuses[i].leader_id;
        if (statuses[i].health.ok() && statuses[i].leader_id != 0 && leads == leading) return static_cast<int>(i);
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
    return -1;
  };
  for (bool leading : {true, false}) {
    const int m = member_leading(leading);
    ASSERT_GE(m, 0) << "no etcd member " << (leading ? "leads" : "follows");
    cluster().etcd()->Stop(m);
    ASSERT_TRUE(load.Progress(300)) << "etcd member " << m << (leading ? " (etcd's leader)" : " (a follower)")
                                    << " stopped";
    cluster().etcd()->Continue(m);
  }
  EXPECT_EQ(load.failures(), 0) << load.first_failure();

  // All of etcd stopped for 10 s: the leader steps down when its election
  // lease runs out, calls fail once leases do, saying why; all resume once
  // etcd is back.
  for (int m = 0; m < 3; ++m) cluster().etcd()->Stop(m);
  std::this_thread::sleep_for(seconds(10));
  EXPECT_EQ(cluster().LeaderIndex(), -1) << "etcd answered while stopped";
  // (The leader key cannot be read with etcd stopped: -1.)
  const int failed_before = load.failures();
  const std::string why = load.first_failure();
  for (int m = 0; m < 3; ++m) cluster().etcd()->Continue(m);
  const auto back = Clock::now();
  ASSERT_TRUE(load.Progress(300));
  const auto resumed_ms = std::chrono::duration_cast<milliseconds>(Clock::now() - back).count();
  load.Stop();
  EXPECT_GT(failed_before, 0) << "calls went on with etcd stopped for longer than every lease";
  // Calls that failed say why: no coordinator leads, etcd is unreachable.
  EXPECT_TRUE(load.AnyFailureSays("no coordinator leader") || load.AnyFailureSays("no leader elected yet")) << why;
  EXPECT_TRUE(load.AnyFailureSays("etcd unreachable")) << why;
  std::printf("ha: etcd stopped 10 s: %d calls failed (first: %s); resumed %lld ms after etcd came back\n",
              failed_before, why.c_str(), static_cast<long long>(resumed_ms));
  std::fflush(stdout);
  EXPECT_TRUE(cluster().CheckLeaderHistory());
}

}  // namespace
}  // namespace rkv::testing
