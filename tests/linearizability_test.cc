// The linearizability suite: several clients run short concurrent histories
// of Get/Put/Delete on a few keys against real servers, which are killed
// (SIGKILL) or stopped (SIGTERM) and restarted in the middle of every few
// histories; the checker of tests/lincheck must find each history
// linearizable. Runs over the transport named by $RKV_TEST_TRANSPORT.
//
// Each history starts from the values the previous one left (read back at
// its end, as part of it), so what a restart keeps or loses is checked too.
//
// $RKV_LIN_HISTORIES sets the number of histories of the single-server
// case (default 300, times $RKV_TEST_SCALE, at least 30); the cluster case
// runs a fifth of that (at least 10).
//
// One case runs a single long history instead, with clients that live
// through both failures of a primary (SIGSTOP past its failover, then
// kill -9 of another) under the coordinator's default timings.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rkv/client.h"
#include "tests/lincheck/lincheck.h"
#include "tests/test_cluster.h"

namespace rkv::testing {
namespace {

using lincheck::OpKind;
using lincheck::Outcome;
using Clock = std::chrono::steady_clock;

constexpr int kClients = 5;
constexpr int kOpsPerClient = 20;
// A restart in the middle of every kRestartEvery-th history.
constexpr int kRestartEvery = 5;
// A write is applied at most once (docs/design.md, "Retries and the replay
// cache"): a call that lost its reply resends it to the same server
// incarnation only, and one whose server restarted meanwhile ends with
// UNAVAILABLE, outcome unknown, which the history records as such.
// Calls have the default deadline (kCallTimeout), which only bounds a
// hang: a call in flight across a restart retries until the server is back.

struct Figures {
  int histories = 0;
  size_t ops = 0;
  int restarts = 0;
  int violations = 0;
  int unknown_writes = 0;
};

// Runs histories with `clients` (one thread each) and `verifier` (the end
// reads), checks each, and counts what happened.
class HistoryRunner {
 public:
  HistoryRunner(std::vector<std::unique_ptr<Client>> clients, std::unique_ptr<Client> verifier,
                std::vector<std::string> keys)
      : clients_(std::move(clients)), verifier_(std::move(verifier)), keys_(std::move(keys)) {}

  // Runs history number `h`. `disrupt`, when set, runs on its own thread
  // once a third of the operations completed, while the clients go on.
  void Run(int h, const std::function<void()>& disrupt) {
    lincheck::History history;
    history.initial = state_;
    const int total = static_cast<int>(clients_.size()) * kOpsPerClient;
    std::atomic<int> done{0};
    std::vector<std::vector<lincheck::Operation>> per_client(clients_.size());
    std::vector<std::thread> threads;
    for (size_t c = 0; c < clients_.size(); ++c) {
      threads.emplace_back([&, c] {
        std::mt19937_64 rng(static_cast<uint64_t>(h) * 1000 + c);
        for (int i = 0; i < kOpsPerClient; ++i) {
          RunOne(*clients_[c], static_cast<int>(c), h, i, rng, &per_client[c]);
          done.fetch_add(1, std::memory_order_relaxed);
        }
      });
    }
    std::thread disruptor;
    if (disrupt) {
      disruptor = std::thread([&] {
        WaitFor(
            "a third of the history", [&] { return done.load(std::memory_order_relaxed) >= total / 3; },
            kConditionDeadline, std::chrono::milliseconds(1));
        disrupt();
      });
    }
    for (auto& t : threads) t.join();
    if (disruptor.joinable()) disruptor.join();

    for (auto& ops : per_client) {
      for (auto& op : ops) {
        if (op.kind != OpKind::kGet && op.outcome == Outcome::kUnknown) ++figures_.unknown_writes;
        history.operations.push_back(std::move(op));
      }
    }
    // The values this history leaves, read as part of it: the next
    // history starts from them.
    state_.clear();
    for (const std::string& key : keys_) {
      lincheck::Operation op =
          Record(OpKind::kGet, static_cast<int>(clients_.size()), key, "", [&](lincheck::Operation& o) {
            const Status s = verifier_->Get(key, &o.value);
            o.outcome = s.ok()                              ? Outcome::kOk
                        : s.code() == StatusCode::kNotFound ? Outcome::kNotFound
                                                            : Outcome::kUnknown;
            if (o.outcome == Outcome::kUnknown)
              ADD_FAILURE() << "history " << h << ": end read of " << key << ": " << s;
          });
      if (op.outcome == Outcome::kOk) state_[key] = op.value;
      history.operations.push_back(std::move(op));
    }

    figures_.ops += history.operations.size();
    ++figures_.histories;
    const lincheck::CheckResult r = lincheck::Check(history);
    if (r.verdict != lincheck::Verdict::kLinearizable) {
      ++figures_.violations;
      ADD_FAILURE() << "history " << h << " is " << lincheck::VerdictName(r.verdict) << ":\n" << r.explanation;
    }
  }

  Figures& figures() { return figures_; }

  // The location caches of every client together (on by default).
  LocationCacheStatsInfo CacheStats() const {
    LocationCacheStatsInfo sum;
    for (const auto& c : clients_) {
      const LocationCacheStatsInfo s = c->LocationCacheStats();
      sum.hits += s.hits;
      sum.misses += s.misses;
      sum.fallbacks += s.fallbacks;
    }
    return sum;
  }

 private:
  // Times `call`, which fills the outcome (and a Get's value) of `op`.
  template <typename Fn>
  static lincheck::Operation Record(OpKind kind, int client, const std::string& key, std::string value, Fn&& call) {
    lincheck::Operation op;
    op.client = client;
    op.kind = kind;
    op.key = key;
    op.value = std::move(value);
    op.invoke = Clock::now();
    call(op);
    op.complete = Clock::now();
    return op;
  }

  // Runs one random operation of client `c` and appends it to `out`.
  void RunOne(Client& client, int c, int h, int i, std::mt19937_64& rng, std::vector<lincheck::Operation>* out) {
    const std::string& key = keys_[rng() % keys_.size()];
    const int pick = static_cast<int>(rng() % 100);
    if (pick < 45) {
      out->push_back(Record(OpKind::kGet, c, key, "", [&](lincheck::Operation& op) {
        const Status s = client.Get(key, &op.value);
        op.outcome = s.ok() ? Outcome::kOk : s.code() == StatusCode::kNotFound ? Outcome::kNotFound : Outcome::kUnknown;
      }));
      return;
    }
    if (pick < 85) {
      const std::string value = "c" + std::to_string(c) + "-h" + std::to_string(h) + "-" + std::to_string(i);
      out->push_back(Record(OpKind::kPut, c, key, value, [&](lincheck::Operation& op) {
        op.outcome = client.Put(key, value).ok() ? Outcome::kOk : Outcome::kUnknown;
      }));
    } else {
      out->push_back(Record(OpKind::kDelete, c, key, "", [&](lincheck::Operation& op) {
        const Status s = client.Delete(key);
        op.outcome = s.ok() ? Outcome::kOk : s.code() == StatusCode::kNotFound ? Outcome::kNotFound : Outcome::kUnknown;
      }));
    }
  }

  std::vector<std::unique_ptr<Client>> clients_;
  std::unique_ptr<Client> verifier_;
  std::vector<std::string> keys_;
  std::map<std::string, std::string> state_;  // present keys after the last history
  Figures figures_;
};

std::vector<std::string> Keys(const std::string& prefix, int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(prefix + std::to_string(i));
  return keys;
}

void Print(const char* what, const Figures& f, const LocationCacheStatsInfo& cache) {
  std::printf(
      "linearizability: %s histories=%d ops=%zu restarts=%d unknown_writes=%d violations=%d "
      "cache_hits=%llu cache_fallbacks=%llu cache_misses=%llu\n",
      what, f.histories, f.ops, f.restarts, f.unknown_writes, f.violations,
      static_cast<unsigned long long>(cache.hits), static_cast<unsigned long long>(cache.fallbacks),
      static_cast<unsigned long long>(cache.misses));
  std::fflush(stdout);
}

class LinearizabilityTest : public TestClusterTest {};

TEST_F(LinearizabilityTest, HistoriesAcrossRestartsOfOneServer) {
  const int histories = SuiteCount("RKV_LIN_HISTORIES", 300, 30);
  TestClusterOptions options;
  options.coordinator = false;
  options.servers = 1;
  options.max_keys = 1024;
  ASSERT_NO_FATAL_FAILURE(StartCluster(options));
  ServerProcess& server = cluster().server(0);
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(cluster().DirectClient(0));
    ASSERT_NE(clients.back(), nullptr);
  }
  auto verifier = cluster().DirectClient(0);
  ASSERT_NE(verifier, nullptr);
  HistoryRunner runner(std::move(clients), std::move(verifier), Keys("lin-", 4));

  for (int h = 0; h < histories && runner.figures().violations < 3; ++h) {
    std::function<void()> disrupt;
    if (h % kRestartEvery == kRestartEvery - 1) {
      // Alternately a crash and a clean stop.
      const bool crash = (h / kRestartEvery) % 2 == 0;
      disrupt = [&, crash] {
        if (crash) {
          server.Kill9();
        } else {
          server.Terminate();
        }
        const Status s = server.Start();
        EXPECT_TRUE(s.ok()) << s;
        ++runner.figures().restarts;
      };
    }
    runner.Run(h, disrupt);
    if (HasFatalFailure() || !server.running()) break;
  }
  Print("servers=1", runner.figures(), runner.CacheStats());
  EXPECT_EQ(runner.figures().histories, histories);
  EXPECT_EQ(runner.figures().violations, 0);
  // The histories exercised GETs answered from the location cache.
  EXPECT_GT(runner.CacheStats().hits, 0u);
}

TEST_F(LinearizabilityTest, HistoriesAcrossServerRestartsInACluster) {
  const int histories = std::max(10, SuiteCount("RKV_LIN_HISTORIES", 300, 30) / 5);
  constexpr int kServers = 3;
  TestClusterOptions options;
  options.servers = kServers;
  options.shards = 64;
  options.max_keys = 1024;
  ASSERT_NO_FATAL_FAILURE(StartCluster(options));
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(cluster().ClusterClient());
    ASSERT_NE(clients.back(), nullptr);
  }
  auto verifier = cluster().ClusterClient();
  ASSERT_NE(verifier, nullptr);
  // More keys than servers, so that most histories touch several servers.
  HistoryRunner runner(std::move(clients), std::move(verifier), Keys("lin-cluster-", 6));

  for (int h = 0; h < histories && runner.figures().violations < 3; ++h) {
    std::function<void()> disrupt;
    if (h % kRestartEvery == kRestartEvery - 1) {
      ServerProcess& victim = cluster().server((h / kRestartEvery) % kServers);
      disrupt = [&] {
        victim.Kill9();
        const Status s = victim.Start();
        EXPECT_TRUE(s.ok()) << s;
        ++runner.figures().restarts;
      };
    }
    runner.Run(h, disrupt);
    if (HasFatalFailure()) break;
  }
  Print("servers=3", runner.figures(), runner.CacheStats());
  EXPECT_EQ(runner.figures().histories, histories);
  EXPECT_EQ(runner.figures().violations, 0);
  EXPECT_GT(runner.CacheStats().hits, 0u);
}

// One long history across two failovers under the coordinator's default
// timings (heartbeats, lease, suspicion and probes; docs/design.md §8.8),
// with long-lived clients that run throughout, over a few keys of which
// some are led by the server that is stopped: SIGSTOP that primary until
// the map shows its shards promoted away, SIGCONT it, wait until the
// cluster has every copy back (R = 3), then kill -9 a server that leads
// some of the keys' shards now, wait for its shards to move, and restart
// it. The whole history, ended by a read of every key from a fresh
// client, must be linearizable: no stale read from the frozen primary, and
// no acknowledged write lost (a lost write makes a later read, at the
// latest the final one, non-linearizable). Every wait is on an eventual
// condition with kConditionDeadline; nothing about time is asserted, so
// that a loaded machine only makes it slower.
TEST_F(LinearizabilityTest, HistoriesAcrossAFrozenAndAKilledPrimary) {
  constexpr int kServers = 3;
  TestClusterOptions options;
  options.servers = kServers;
  options.replicas = 3;
  options.shards = 16;
  options.max_keys = 1024;
  // The coordinator's defaults, not the fixture's shorter ones.
  options.heartbeat_interval_ms = 0;
  options.heartbeat_timeout_ms = 0;
  options.lease_ms = 0;
  ASSERT_NO_FATAL_FAILURE(StartCluster(options));
  auto probe = cluster().ClusterClient();  // reads the map
  ASSERT_NE(probe, nullptr);
  std::vector<std::string> ids;
  for (int i = 0; i < kServers; ++i) {
    ids.push_back(cluster().IdOf(*probe, i));
    ASSERT_FALSE(ids.back().empty());
  }
  auto map = [&]() {
    EXPECT_TRUE(probe->RefreshClusterMap().ok());
    auto info = probe->Cluster();
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : ClusterInfo{};
  };
  // Shards `id` leads in `info`.
  auto led_by = [](const ClusterInfo& info, const std::string& id) {
    std::set<uint32_t> out;
    for (const ShardInfo& s : info.shards) {
      if (!s.replicas.empty() && s.replicas[0] == id) out.insert(s.shard);
    }
    return out;
  };
  // No shard of `shards` is led by `id`, and each is led by an UP server.
  auto moved_off = [](const ClusterInfo& info, const std::string& id, const std::set<uint32_t>& shards) {
    std::map<std::string, std::string> state;
    for (const MemberInfo& m : info.members) state[m.server_id] = m.state;
    for (uint32_t s : shards) {
      const std::vector<std::string>& r = info.shards.at(s).replicas;
      if (r.empty() || r[0] == id || state[r[0]] != "UP") return false;
    }
    return true;
  };
  // Every server UP and every shard back to R copies, none syncing or
  // handed over.
  auto whole = [&](const ClusterInfo& info) {
    for (const MemberInfo& m : info.members) {
      if (m.state != "UP") return false;
    }
    for (const ShardInfo& s : info.shards) {
      if (s.replicas.size() != static_cast<size_t>(options.replicas) || !s.syncing.empty() ||
          !s.handover_from.empty()) {
        return false;
      }
    }
    return true;
  };

  // Six keys: three on shards server 0 leads, three elsewhere.
  const std::set<uint32_t> frozen_shards = led_by(map(), ids[0]);
  ASSERT_FALSE(frozen_shards.empty());
  std::vector<std::string> keys, frozen_keys;
  std::map<std::string, uint32_t> shard_of;
  int elsewhere = 0;
  for (int i = 0; keys.size() < 6 && i < 10000; ++i) {
    const std::string key = "lin-frozen-" + std::to_string(i);
    auto shard = probe->ShardOfKey(key);
    ASSERT_TRUE(shard.ok()) << shard.status();
    const bool frozen = frozen_shards.count(*shard) > 0;
    if (frozen && frozen_keys.size() < 3) {
      frozen_keys.push_back(key);
    } else if (frozen || elsewhere == 3) {
      continue;
    } else {
      ++elsewhere;
    }
    keys.push_back(key);
    shard_of[key] = *shard;
  }
  ASSERT_EQ(keys.size(), 6u);

  // The history, and when each key last saw a successful call begin.
  std::mutex mu;
  lincheck::History history;
  std::map<std::string, Clock::time_point> last_ok_invoke;
  auto record = [&](lincheck::Operation op) {
    std::lock_guard<std::mutex> l(mu);
    if (op.outcome != Outcome::kUnknown) {
      Clock::time_point& t = last_ok_invoke[op.key];
      t = std::max(t, op.invoke);
    }
    history.operations.push_back(std::move(op));
  };
  // Every key of `of` had a call that succeeded and began after `since`.
  auto served_since = [&](const std::vector<std::string>& of, Clock::time_point since) {
    std::lock_guard<std::mutex> l(mu);
    for (const std::string& key : of) {
      const auto it = last_ok_invoke.find(key);
      if (it == last_ok_invoke.end() || it->second <= since) return false;
    }
    return true;
  };
  auto call = [&](Client& client, int c, OpKind kind, const std::string& key, const std::string& value) {
    lincheck::Operation op;
    op.client = c;
    op.kind = kind;
    op.key = key;
    op.value = value;
    op.invoke = Clock::now();
    if (kind == OpKind::kGet) {
      const Status s = client.Get(key, &op.value);
      op.outcome = s.ok() ? Outcome::kOk : s.code() == StatusCode::kNotFound ? Outcome::kNotFound : Outcome::kUnknown;
    } else if (kind == OpKind::kPut) {
      op.outcome = client.Put(key, value).ok() ? Outcome::kOk : Outcome::kUnknown;
    } else {
      const Status s = client.Delete(key);
      op.outcome = s.ok() ? Outcome::kOk : s.code() == StatusCode::kNotFound ? Outcome::kNotFound : Outcome::kUnknown;
    }
    op.complete = Clock::now();
    record(op);
    return op.outcome;
  };

  // The long-lived clients: made once, they follow both failovers.
  constexpr int kLongLived = 4;
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < kLongLived; ++c) {
    clients.push_back(cluster().ClusterClient());
    ASSERT_NE(clients.back(), nullptr);
  }
  for (const std::string& key : keys) {
    ASSERT_EQ(call(*clients[0], 0, OpKind::kPut, key, key + "-initial"), Outcome::kOk) << key;
  }
  std::atomic<bool> stop{false};
  std::atomic<int> ops{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kLongLived; ++c) {
    threads.emplace_back([&, c] {
      std::mt19937_64 rng(static_cast<uint64_t>(c) + 11);
      for (int i = 0; !stop.load(); ++i) {
        const std::string& key = keys[rng() % keys.size()];
        const int pick = static_cast<int>(rng() % 100);
        const OpKind kind = pick < 50 ? OpKind::kGet : pick < 90 ? OpKind::kPut : OpKind::kDelete;
        call(*clients[c], c, kind, key, "c" + std::to_string(c) + "-" + std::to_string(i));
        ++ops;
        // Paced, so that the history stays small enough to check.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  // Runs the events; a failed wait ends them early (the clients are then
  // stopped and the history checked all the same).
  auto events = [&]() -> ::testing::AssertionResult {
    if (auto r = WaitFor("the clients' first operations", [&] { return ops.load() >= 50; }); !r) return r;

    // 1. SIGSTOP server 0 until its shards are promoted away; each of its
    // keys is then served (by the new primary) while it is still frozen.
    ServerProcess& frozen = cluster().server(0);
    frozen.Freeze();
    ClusterInfo info;
    auto r = cluster().WaitForMap(*probe, [&](const ClusterInfo& i) { return moved_off(i, ids[0], frozen_shards); },
                                  &info);
    if (r) r = WaitFor("calls on the frozen primary's keys", [&, since = Clock::now()] {
      return served_since(frozen_keys, since);
    });
    frozen.Continue();
    if (!r) return r << " (while server 0 was frozen)";
    std::printf("linearizability: server 0 frozen, its shards promoted in map version %llu\n",
                static_cast<unsigned long long>(info.map_version));
    std::fflush(stdout);

    // 2. Once it is back and every shard has its copies again, kill -9 the
    // server (other than 0) that leads the most of the keys' shards, and
    // restart it once its shards have moved.
    if (r = cluster().WaitForMap(*probe, whole, &info); !r) return r << " (after SIGCONT)";
    int victim = -1;
    size_t most = 0;
    for (int i = 1; i < kServers; ++i) {
      const std::set<uint32_t> led = led_by(info, ids[i]);
      size_t n = 0;
      for (const std::string& key : keys) n += led.count(shard_of[key]);
      if (n > most) {
        most = n;
        victim = i;
      }
    }
    if (victim < 0) return ::testing::AssertionFailure() << "no server but 0 leads a shard of the keys";
    const std::set<uint32_t> killed_shards = led_by(info, ids[victim]);
    ServerProcess& killed = cluster().server(victim);
    killed.Kill9();
    r = cluster().WaitForMap(*probe, [&](const ClusterInfo& i) { return moved_off(i, ids[victim], killed_shards); },
                             &info);
    if (!r) return r << " (after kill -9 of server " << victim << ")";
    std::printf("linearizability: server %d killed, its shards promoted in map version %llu\n", victim,
                static_cast<unsigned long long>(info.map_version));
    std::fflush(stdout);
    if (const Status s = killed.Start(); !s.ok()) return ::testing::AssertionFailure() << "restart: " << s;
    // Every key served again after the restart, and the clients go on a
    // while (the restarted server catching up meanwhile).
    r = WaitFor("calls on every key after the restart", [&, since = Clock::now()] {
      return served_since(keys, since);
    });
    if (!r) return r;
    return WaitFor("more operations after the restart", [&, until = ops.load() + 200] { return ops.load() >= until; });
  };
  const ::testing::AssertionResult ran = events();
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_TRUE(ran);

  // The end of the history: every key read by a fresh client.
  auto reader = cluster().ClusterClient();
  ASSERT_NE(reader, nullptr);
  for (const std::string& key : keys) {
    EXPECT_NE(call(*reader, kLongLived, OpKind::kGet, key, ""), Outcome::kUnknown) << "final read of " << key;
  }
  int unknown_writes = 0;
  for (const lincheck::Operation& op : history.operations) {
    unknown_writes += op.kind != OpKind::kGet && op.outcome == Outcome::kUnknown ? 1 : 0;
  }
  const lincheck::CheckResult checked = lincheck::Check(history);
  std::printf("linearizability: frozen and killed primary: ops=%zu unknown_writes=%d verdict=%s\n",
              history.operations.size(), unknown_writes, lincheck::VerdictName(checked.verdict));
  std::fflush(stdout);
  EXPECT_EQ(checked.verdict, lincheck::Verdict::kLinearizable) << checked.explanation;
}

// Several coordinators on etcd (docs/design.md §8.11): the coordinator that
// leads is killed (SIGKILL) and restarted once another leads, in the middle
// of every few histories, ten times ($RKV_LIN_LEADER_ROUNDS; four at the
// sanitizers' and the guest's smaller scales), while the
// clients run (every other round a server restarts as well, so that leaders
// of different terms commit); the histories stay linearizable, and etcd's
// history shows every map version committed by the leader of its term.
TEST_F(LinearizabilityTest, HistoriesAcrossKillsOfTheLeadingCoordinator) {
  const int rounds = SuiteCount("RKV_LIN_LEADER_ROUNDS", 10, 4);
  TestClusterOptions options;
  options.etcd_members = 1;
  options.coordinators = 3;
  options.servers = 3;
  options.shards = 64;
  options.max_keys = 1024;
  ASSERT_NO_FATAL_FAILURE(StartCluster(options));
  ASSERT_TRUE(WaitFor("a leader", [&] { return cluster().LeaderIndex() >= 0; }, kConditionDeadline,
                      std::chrono::milliseconds(50)));
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(cluster().ClusterClient());
    ASSERT_NE(clients.back(), nullptr);
  }
  auto verifier = cluster().ClusterClient();
  ASSERT_NE(verifier, nullptr);
  HistoryRunner runner(std::move(clients), std::move(verifier), Keys("lin-leader-", 6));

  const int histories = rounds * kRestartEvery;
  for (int h = 0; h < histories && runner.figures().violations < 3; ++h) {
    std::function<void()> disrupt;
    if (h % kRestartEvery == kRestartEvery - 1) {
      // Every other round a server restarts too, once the new leader
      // leads, so that leaders of different terms commit map versions.
      const int round = h / kRestartEvery;
      disrupt = [&, round] {
        int leader = -1;
        ASSERT_TRUE(WaitFor("a leader", [&] { return (leader = cluster().LeaderIndex()) >= 0; },
                            kConditionDeadline, std::chrono::milliseconds(20)));
        ServerProcess& victim = cluster().coordinator(leader);
        victim.Kill9();
        // The dead leader's key lasts until its etcd lease expires; the
        // victim restarts (on its address) once another coordinator leads.
        int next = -1;
        EXPECT_TRUE(WaitFor("another leader",
                            [&] { return (next = cluster().LeaderIndex()) >= 0 && next != leader; },
                            kConditionDeadline, std::chrono::milliseconds(20)));
        const Status s = victim.Start();
        EXPECT_TRUE(s.ok()) << s;
        if (round % 2 == 1) {
          ServerProcess& server = cluster().server(round % cluster().server_count());
          server.Kill9();
          const Status started = server.Start();
          EXPECT_TRUE(started.ok()) << started;
        }
        ++runner.figures().restarts;
      };
    }
    runner.Run(h, disrupt);
    if (HasFatalFailure()) break;
  }
  Print("coordinators=3", runner.figures(), runner.CacheStats());
  EXPECT_EQ(runner.figures().histories, histories);
  EXPECT_EQ(runner.figures().violations, 0);
  EXPECT_EQ(runner.figures().restarts, rounds);
  EXPECT_TRUE(cluster().CheckLeaderHistory());
}

}  // namespace
}  // namespace rkv::testing
