// The failover suite: a real rkv-coordinator with short timings and three
// rkv-servers. When a primary dies (kill -9) or freezes (SIGSTOP past its
// lease), the coordinator promotes a backup under a new map version and
// clients follow by themselves: no acknowledged write is lost, every key is
// readable again, and no client reads a stale value across the promotion,
// the frozen old primary included (on verbs its NIC still serves one-sided
// reads: leases are the fence). Runs over the transport named by
// $RKV_TEST_TRANSPORT, like the cluster suite.
//
// The time from the failure to the first successful call on the failed
// primary's shards is printed ("[ failover ] gap N ms"), never asserted:
// it depends on the machine's load.
//
// $RKV_FAILOVER_KEYS sets the keys of each load thread (default 200, times
// $RKV_TEST_SCALE, at least 40).
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "rkv/client.h"
#include "tests/lincheck/lincheck.h"
#include "tests/test_cluster.h"

namespace rkv::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kServers = 3;
// Only bounds a hang: a call retries (following the map) within it.
constexpr std::chrono::milliseconds kFailoverCallTimeout{10000};

int64_t Millis(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

// What a key may hold: its last acknowledged state (a value, or absent),
// or the state of any write that failed after it (its outcome is unknown).
struct KeyModel {
  std::optional<std::string> acked;                // nullopt: absent
  std::set<std::optional<std::string>> unknown;    // states of failed writes since

  bool Allows(const std::optional<std::string>& got) const { return got == acked || unknown.count(got) > 0; }
};

std::string Describe(const std::optional<std::string>& v) { return v ? "\"" + *v + "\"" : "absent"; }

// One call of the load, for the gap figure.
struct CallRecord {
  uint32_t shard = 0;
  bool ok = false;
  Clock::time_point invoke, complete;
};

// Load threads, one cluster client each, each owning its keys (so a key's
// calls are sequential and its model exact): PUT, GET and DELETE mixed.
// A GET must return a state the key may hold; every call is recorded.
class Load {
 public:
  Load(std::vector<std::unique_ptr<Client>> clients, int keys_per_thread, std::string prefix)
      : clients_(std::move(clients)), keys_per_thread_(keys_per_thread), prefix_(std::move(prefix)) {
    models_.resize(clients_.size());
  }
  ~Load() { Stop(); }

  // Keys whose shard is in `shards` only, when not empty.
  // Starts (or, after Stop, restarts) the threads.
  void Start(std::set<uint32_t> shards = {}) {
    only_shards_ = std::move(shards);
    stop_ = false;
    for (size_t t = 0; t < clients_.size(); ++t) {
      threads_.emplace_back([this, t] { Run(t); });
    }
  }

  void Stop() {
    stop_ = true;
    for (auto& th : threads_) th.join();
    threads_.clear();
  }

  // Calls on `shards` that succeeded and were invoked at or after `since`.
  int SucceededSince(const std::set<uint32_t>& shards, Clock::time_point since) {
    std::lock_guard<std::mutex> l(mu_);
    int n = 0;
    for (const CallRecord& r : calls_) n += (r.ok && r.invoke >= since && shards.count(r.shard) > 0) ? 1 : 0;
    return n;
  }

  // Waits (up to kConditionDeadline) until `n` calls on `shards` invoked
  // at or after `since` succeeded.
  ::testing::AssertionResult WaitForProgress(const std::set<uint32_t>& shards, Clock::time_point since, int n) {
    return WaitFor("successful calls on the shards", [&] { return SucceededSince(shards, since) >= n; });
  }

  // Prints the gap on `shards` after `failure`: from the first call there
  // that failed (or, when none failed, the failure itself) to the first
  // successful call invoked after it.
  void PrintGap(const char* what, const std::set<uint32_t>& shards, Clock::time_point failure) {
    std::lock_guard<std::mutex> l(mu_);
    Clock::time_point start = failure;
    int failed = 0;
    std::optional<Clock::time_point> first_failed;
    for (const CallRecord& r : calls_) {
      if (r.ok || shards.count(r.shard) == 0 || r.complete < failure) continue;
      ++failed;
      if (!first_failed || r.invoke < *first_failed) first_failed = r.invoke;
    }
    if (first_failed && *first_failed > start) start = *first_failed;
    std::optional<Clock::time_point> first_ok;
    for (const CallRecord& r : calls_) {
      if (!r.ok || shards.count(r.shard) == 0 || r.invoke < start) continue;
      if (!first_ok || r.complete < *first_ok) first_ok = r.complete;
    }
    if (!first_ok) {
      std::printf("[ failover ] %s: no successful call after the failure (%d failed)\n", what, failed);
    } else {
      std::printf("[ failover ] gap %lld ms (%s; %d calls on its shards failed)\n",
                  static_cast<long long>(Millis(*first_ok - start)), what, failed);
    }
    std::fflush(stdout);
  }

  // Every key the load touched, read through `client`, holds a state its
  // model allows (its last acknowledged one, or that of a later failed write).
  void ExpectNothingLost(Client& client, const std::string& when) {
    std::lock_guard<std::mutex> l(mu_);
    int checked = 0;
    for (const auto& per_thread : models_) {
      for (const auto& [key, model] : per_thread) {
        auto got = client.Get(key);
        ASSERT_TRUE(got.ok() || got.status().code() == StatusCode::kNotFound)
            << when << ": " << key << " is not readable: " << got.status();
        const std::optional<std::string> state = got.ok() ? std::optional<std::string>(*got) : std::nullopt;
        EXPECT_TRUE(model.Allows(state)) << when << ": " << key << " holds " << Describe(state)
                                         << ", its last acknowledged state is " << Describe(model.acked);
        ++checked;
      }
    }
    EXPECT_GT(checked, 0);
  }

  int stale_reads() const { return stale_reads_.load(); }
  std::string first_stale_read() {
    std::lock_guard<std::mutex> l(mu_);
    return first_stale_read_;
  }
  int acked_writes() const { return acked_writes_.load(); }

 private:
  void Run(size_t t) {
    Client& client = *clients_[t];
    std::mt19937_64 rng(t + 1);
    std::vector<std::string> keys;
    std::vector<uint32_t> shard_of;
    for (int i = 0; keys.size() < static_cast<size_t>(keys_per_thread_) && i < keys_per_thread_ * 1000; ++i) {
      const std::string key = prefix_ + std::to_string(t) + "-" + std::to_string(i);
      auto shard = client.ShardOfKey(key);
      if (!shard.ok()) {
        ADD_FAILURE() << key << ": " << shard.status();
        return;
      }
      if (!only_shards_.empty() && only_shards_.count(*shard) == 0) continue;
      keys.push_back(key);
      shard_of.push_back(*shard);
    }
    for (uint64_t i = 0; !stop_.load(); ++i) {
      const size_t k = rng() % keys.size();
      const std::string& key = keys[k];
      const int pick = static_cast<int>(rng() % 100);
      CallRecord rec;
      rec.shard = shard_of[k];
      rec.invoke = Clock::now();
      KeyModel model;
      {
        std::lock_guard<std::mutex> l(mu_);
        model = models_[t][key];
      }
      if (pick < 50) {
        const std::string value = key + "#" + std::to_string(i);
        auto v = client.Put(key, value);
        rec.ok = v.ok();
        if (v.ok()) {
          model.acked = value;
          model.unknown.clear();
          ++acked_writes_;
        } else {
          model.unknown.insert(value);
        }
      } else if (pick < 85) {
        auto got = client.Get(key);
        rec.ok = got.ok() || got.status().code() == StatusCode::kNotFound;
        if (rec.ok) {
          const std::optional<std::string> state = got.ok() ? std::optional<std::string>(*got) : std::nullopt;
          if (!model.Allows(state)) {
            ++stale_reads_;
            std::lock_guard<std::mutex> l(mu_);
            if (first_stale_read_.empty()) {
              first_stale_read_ = "GET " + key + " returned " + Describe(state) + ", its last acknowledged state is " +
                                  Describe(model.acked);
            }
          }
        }
      } else {
        const Status s = client.Delete(key);
        rec.ok = s.ok() || s.code() == StatusCode::kNotFound;
        if (rec.ok) {
          model.acked = std::nullopt;
          model.unknown.clear();
          ++acked_writes_;
        } else {
          model.unknown.insert(std::nullopt);
        }
      }
      rec.complete = Clock::now();
      std::lock_guard<std::mutex> l(mu_);
      models_[t][key] = std::move(model);
      calls_.push_back(rec);
    }
  }

  std::vector<std::unique_ptr<Client>> clients_;
  const int keys_per_thread_;
  const std::string prefix_;
  std::set<uint32_t> only_shards_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<int> stale_reads_{0};
  std::atomic<int> acked_writes_{0};
  std::mutex mu_;
  std::vector<std::map<std::string, KeyModel>> models_;  // per thread: its keys
  std::vector<CallRecord> calls_;
  std::string first_stale_read_;
};

class FailoverTest : public TestClusterTest {
 protected:
  void StartCluster(int replicas) {
    TestClusterOptions o;
    o.servers = kServers;
    o.shards = 64;
    o.replicas = replicas;
    o.heartbeat_interval_ms = 100;
    o.heartbeat_timeout_ms = 600;
    o.lease_ms = 400;
    o.zone_prefix = "zone ";
    ASSERT_NO_FATAL_FAILURE(TestClusterTest::StartCluster(o));
    probe_ = NewClient();
    ASSERT_NE(probe_, nullptr);
  }

  std::unique_ptr<Client> NewClient() { return cluster().ClusterClient(TestClientOptions(kFailoverCallTimeout)); }

  std::vector<std::unique_ptr<Client>> NewClients(int n) {
    std::vector<std::unique_ptr<Client>> out;
    for (int i = 0; i < n; ++i) {
      out.push_back(NewClient());
      if (out.back() == nullptr) return {};
    }
    return out;
  }

  // The server id of server i, from the map (matched by address).
  std::string IdOf(int i) { return cluster().IdOf(*probe_, i); }

  // Shards whose primary (replicas[0]) is, or is not, `id` in the probe's map.
  std::set<uint32_t> PrimaryShards(const std::string& id) {
    std::set<uint32_t> out;
    auto cluster = probe_->Cluster();
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    if (!cluster.ok()) return out;
    for (const ShardInfo& s : cluster->shards) {
      if (!s.replicas.empty() && s.replicas[0] == id) out.insert(s.shard);
    }
    return out;
  }
  std::set<uint32_t> BackupOnlyShards(const std::string& id) {
    std::set<uint32_t> out;
    auto cluster = probe_->Cluster();
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    if (!cluster.ok()) return out;
    for (const ShardInfo& s : cluster->shards) {
      for (size_t k = 1; k < s.replicas.size(); ++k) {
        if (s.replicas[k] == id && s.replicas[0] != id) out.insert(s.shard);
      }
    }
    return out;
  }

  // Waits (up to kConditionDeadline) until no shard of `shards` has `id`
  // as its primary in the coordinator's map, and each has an UP one.
  ::testing::AssertionResult WaitForPromotion(const std::string& id, const std::set<uint32_t>& shards) {
    return cluster().WaitForMap(*probe_, [&](const ClusterInfo& cluster) {
      std::map<std::string, std::string> state;
      for (const MemberInfo& m : cluster.members) state[m.server_id] = m.state;
      bool done = true;
      for (uint32_t s : shards) {
        const std::vector<std::string>& r = cluster.shards[s].replicas;
        done = done && !r.empty() && r[0] != id && state[r[0]] == "UP";
      }
      return done;
    });
  }

  std::unique_ptr<Client> probe_;  // reads the map
};

int KeysPerThread() { return SuiteCount("RKV_FAILOVER_KEYS", 200, 40); }
// Successful calls that show a shard set is served (scaled down in the guest).
int ProgressCalls() { return std::max(20, static_cast<int>(std::lround(200 * TestScale()))); }

class PrimaryKillTest : public FailoverTest, public ::testing::WithParamInterface<int> {};

// kill -9 the primary of a third of the shards under a mixed load: its
// shards get new primaries, no acknowledged write is lost, no GET returns
// a state its key cannot hold, and every key is readable again.
TEST_P(PrimaryKillTest, NoAcknowledgedWriteLostAndEveryKeyReadableAgain) {
  const int replicas = GetParam();
  ASSERT_NO_FATAL_FAILURE(StartCluster(replicas));
  const std::string victim = IdOf(0);
  ASSERT_FALSE(victim.empty());
  const std::set<uint32_t> affected = PrimaryShards(victim);
  ASSERT_FALSE(affected.empty());
  auto clients = NewClients(3);
  ASSERT_EQ(clients.size(), 3u);
  Load load(std::move(clients), KeysPerThread(), "kill-r" + std::to_string(replicas) + "-");
  load.Start();
  ASSERT_TRUE(load.WaitForProgress(affected, Clock::time_point{}, ProgressCalls()));

  const auto killed_at = Clock::now();
  cluster().server(0).Kill9();
  const bool promoted = WaitForPromotion(victim, affected);
  const bool progressed = promoted && load.WaitForProgress(affected, killed_at, ProgressCalls());
  load.Stop();
  ASSERT_TRUE(promoted) << "the coordinator did not promote a backup for the shards of " << victim;
  ASSERT_TRUE(progressed) << "calls on the shards of the killed primary did not succeed again";
  load.PrintGap(("R=" + std::to_string(replicas) + ", primary killed").c_str(), affected, killed_at);
  EXPECT_EQ(load.stale_reads(), 0) << load.first_stale_read();

  // Through the load's own clients' view and a fresh client.
  auto fresh = NewClient();
  ASSERT_NE(fresh, nullptr);
  load.ExpectNothingLost(*fresh, "after the primary died");
}

INSTANTIATE_TEST_SUITE_P(Replicas, PrimaryKillTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& p) { return "R" + std::to_string(p.param); });

// Compare-and-set increments of one counter by several clients across a
// kill -9 of the counter's primary (design §5.10): no acknowledged
// increment is lost and none is applied twice. An increment whose outcome
// a client could not learn (its reply lost with the primary, or refused
// as a resend to another server) may or may not count, so the final value
// lies between the acknowledged increments and those plus the unknown ones.
TEST_F(FailoverTest, CompareAndSetIncrementsSurviveAPrimaryKill) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(3));
  const std::string victim = IdOf(0);
  ASSERT_FALSE(victim.empty());
  const std::set<uint32_t> victims_shards = PrimaryShards(victim);
  std::string key;
  for (int i = 0; key.empty() && i < 10000; ++i) {
    const std::string candidate = "cas-counter-" + std::to_string(i);
    StatusOr<uint32_t> shard = probe_->ShardOfKey(candidate);
    ASSERT_TRUE(shard.ok()) << shard.status();
    if (victims_shards.contains(*shard)) key = candidate;
  }
  ASSERT_FALSE(key.empty()) << "no key on a shard of " << victim;
  const std::set<uint32_t> shard = {*probe_->ShardOfKey(key)};
  ASSERT_TRUE(probe_->Put(key, "0").ok());

  constexpr int kThreads = 3;
  auto clients = NewClients(kThreads);
  ASSERT_EQ(clients.size(), static_cast<size_t>(kThreads));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> acked{0};
  std::atomic<uint64_t> unknown{0};
  std::atomic<uint64_t> conflicts{0};
  std::mutex bad_mu;
  std::string bad;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, client = clients[t].get()] {
      while (!stop.load()) {
        StatusOr<VersionedValue> got = client->GetVersioned(key);
        if (!got.ok()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the failover: try again
          continue;
        }
        uint64_t n = 0;
        try {
          n = std::stoull(got->value);
        } catch (const std::exception&) {
          std::lock_guard<std::mutex> lock(bad_mu);
          bad = "the counter holds \"" + got->value + "\"";
          return;
        }
        const StatusOr<uint64_t> put =
            client->Put(key, std::to_string(n + 1), PutCondition::VersionIs(got->version));
        if (put.ok()) {
          acked.fetch_add(1);
        } else if (put.status().reason() == Reason::kConditionFailed) {
          conflicts.fetch_add(1);
        } else {
          unknown.fetch_add(1);  // sent or not, applied or not: not known here
        }
      }
    });
  }
  const auto stop_all = [&] {
    stop = true;
    for (std::thread& t : threads) t.join();
  };
  const uint64_t progress = static_cast<uint64_t>(ProgressCalls());
  if (!WaitFor("increments before the kill", [&] { return acked.load() >= progress; })) {
    stop_all();
    FAIL() << "the increments made no progress";
  }
  cluster().server(0).Kill9();
  const uint64_t at_kill = acked.load();
  const bool promoted = WaitForPromotion(victim, shard);
  const bool progressed =
      promoted && WaitFor("increments after the kill", [&] { return acked.load() >= at_kill + progress; });
  stop_all();
  ASSERT_TRUE(promoted) << "the counter's shard got no new primary";
  ASSERT_TRUE(progressed) << "no increment succeeded after the promotion";
  ASSERT_TRUE(bad.empty()) << bad;

  auto fresh = NewClient();
  ASSERT_NE(fresh, nullptr);
  StatusOr<std::string> final_value = fresh->Get(key);
  ASSERT_TRUE(final_value.ok()) << final_value.status();
  const uint64_t value = std::stoull(*final_value);
  std::printf("CAS across a primary kill: %llu acknowledged, %llu unknown, %llu conflicts, final %llu\n",
              static_cast<unsigned long long>(acked.load()), static_cast<unsigned long long>(unknown.load()),
              static_cast<unsigned long long>(conflicts.load()), static_cast<unsigned long long>(value));
  EXPECT_GE(value, acked.load()) << "an acknowledged increment was lost";
  EXPECT_LE(value, acked.load() + unknown.load()) << "an increment was applied twice";
}

// Records concurrent Get/Put/Delete calls on a few keys as a history for
// the checker of tests/lincheck.
class HistoryRecorder {
 public:
  void Add(lincheck::Operation op) {
    std::lock_guard<std::mutex> l(mu_);
    history_.operations.push_back(std::move(op));
  }

  // Runs `call` (which sets the outcome, and a Get's value) timed.
  template <typename Fn>
  lincheck::Operation Timed(int client, lincheck::OpKind kind, const std::string& key, std::string value, Fn&& call) {
    lincheck::Operation op;
    op.client = client;
    op.kind = kind;
    op.key = key;
    op.value = std::move(value);
    op.invoke = Clock::now();
    call(op);
    op.complete = Clock::now();
    Add(op);
    return op;
  }

  lincheck::Operation Get(Client& client, int c, const std::string& key) {
    return Timed(c, lincheck::OpKind::kGet, key, "", [&](lincheck::Operation& op) {
      const Status s = client.Get(key, &op.value);
      op.outcome = s.ok() ? lincheck::Outcome::kOk
                   : s.code() == StatusCode::kNotFound ? lincheck::Outcome::kNotFound
                                                       : lincheck::Outcome::kUnknown;
    });
  }
  lincheck::Operation Put(Client& client, int c, const std::string& key, const std::string& value) {
    return Timed(c, lincheck::OpKind::kPut, key, value, [&](lincheck::Operation& op) {
      op.outcome = client.Put(key, value).ok() ? lincheck::Outcome::kOk : lincheck::Outcome::kUnknown;
    });
  }
  lincheck::Operation Delete(Client& client, int c, const std::string& key) {
    return Timed(c, lincheck::OpKind::kDelete, key, "", [&](lincheck::Operation& op) {
      const Status s = client.Delete(key);
      op.outcome = s.ok() ? lincheck::Outcome::kOk
                   : s.code() == StatusCode::kNotFound ? lincheck::Outcome::kNotFound
                                                       : lincheck::Outcome::kUnknown;
    });
  }

  lincheck::History history() {
    std::lock_guard<std::mutex> l(mu_);
    return history_;
  }

 private:
  std::mutex mu_;
  lincheck::History history_;
};

// SIGSTOP a primary past its lease: the coordinator promotes a backup, new
// values are written through the new primary, then the old one resumes
// while clients go on reading and writing. The whole concurrent history
// must be linearizable (the old primary serves no stale GET and
// acknowledges no write after the promotion), and the checker must reject
// the same history with one stale read planted in it. Over tcp the frozen
// server answers nothing until SIGCONT; over verbs its NIC goes on serving
// one-sided reads, which only the client's lease keeps clients from.
TEST_F(FailoverTest, FrozenPrimaryNeverServesAStaleReadAfterThePromotion) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(3));
  const std::string victim = IdOf(0);
  ASSERT_FALSE(victim.empty());
  const std::set<uint32_t> affected = PrimaryShards(victim);
  ASSERT_FALSE(affected.empty());
  // Eight keys, half of them on the victim's shards.
  std::vector<std::string> keys, victim_keys;
  int on_victim = 0, elsewhere = 0;
  for (int i = 0; on_victim + elsewhere < 8 && i < 10000; ++i) {
    const std::string key = "frozen-" + std::to_string(i);
    auto shard = probe_->ShardOfKey(key);
    ASSERT_TRUE(shard.ok()) << shard.status();
    const bool mine = affected.count(*shard) > 0;
    if (mine && on_victim < 4) {
      ++on_victim;
      keys.push_back(key);
      victim_keys.push_back(key);
    } else if (!mine && elsewhere < 4) {
      ++elsewhere;
      keys.push_back(key);
    }
  }
  ASSERT_EQ(victim_keys.size(), 4u);

  constexpr int kClients = 4;
  auto clients = NewClients(kClients + 1);
  ASSERT_EQ(clients.size(), static_cast<size_t>(kClients + 1));
  HistoryRecorder recorder;
  // Every key starts with a value, written before the history's clients run.
  for (const std::string& key : keys) {
    auto op = recorder.Put(*clients[kClients], kClients, key, key + "-initial");
    ASSERT_EQ(op.outcome, lincheck::Outcome::kOk) << key;
  }

  std::atomic<bool> stop{false};
  std::atomic<int> ops{0};
  std::atomic<int> ops_after_continue{0};
  std::atomic<bool> continued{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      std::mt19937_64 rng(c + 7);
      for (int i = 0; !stop.load(); ++i) {
        const std::string& key = keys[rng() % keys.size()];
        const int pick = static_cast<int>(rng() % 100);
        if (pick < 55) {
          recorder.Get(*clients[c], c, key);
        } else if (pick < 90) {
          recorder.Put(*clients[c], c, key, "c" + std::to_string(c) + "-" + std::to_string(i));
        } else {
          recorder.Delete(*clients[c], c, key);
        }
        ++ops;
        if (continued.load()) ++ops_after_continue;
        // Paced, so that the history stays small enough to check.
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  // The history's clients are under way before the primary freezes.
  if (!WaitFor("the clients' first operations", [&] { return ops.load() >= 100; })) {
    stop = true;
    for (auto& th : threads) th.join();
    FAIL() << "the history's clients did not get going";
  }
  const auto frozen_at = Clock::now();
  cluster().server(0).Freeze();
  const bool promoted = WaitForPromotion(victim, affected);
  std::printf("[ failover ] promotion seen %lld ms after the primary froze\n",
              static_cast<long long>(Millis(Clock::now() - frozen_at)));
  std::fflush(stdout);
  // New values through the new primary, while the old one is still frozen.
  std::vector<lincheck::Operation> promoted_puts;
  if (promoted) {
    for (const std::string& key : victim_keys) {
      promoted_puts.push_back(recorder.Put(*clients[kClients], kClients, key, key + "-after-promotion"));
    }
  }
  cluster().server(0).Continue();
  continued = true;
  // Judged below, once the clients stopped.
  WaitFor("operations after the old primary resumed", [&] { return ops_after_continue.load() >= 400; });
  stop = true;
  for (auto& th : threads) th.join();
  ASSERT_TRUE(promoted) << "the coordinator did not promote a backup for the shards of " << victim;
  for (size_t k = 0; k < promoted_puts.size(); ++k) {
    EXPECT_EQ(promoted_puts[k].outcome, lincheck::Outcome::kOk) << "PUT of " << victim_keys[k]
                                                                << " through the new primary failed";
  }
  EXPECT_GE(ops_after_continue.load(), 400) << "calls did not go on after the old primary resumed";
  // The end of the history: every key read once more.
  for (const std::string& key : keys) recorder.Get(*clients[kClients], kClients, key);

  const lincheck::History history = recorder.history();
  const lincheck::CheckResult r = lincheck::Check(history);
  std::printf("[ failover ] frozen primary: %zu operations checked: %s\n", history.operations.size(),
              lincheck::VerdictName(r.verdict));
  std::fflush(stdout);
  EXPECT_EQ(r.verdict, lincheck::Verdict::kLinearizable) << r.explanation;

  // The same history with a stale read planted after the end: a GET of a
  // victim key, invoked after every other operation completed, that
  // returns the value the key had before the promotion.
  lincheck::History planted = history;
  Clock::time_point last = Clock::time_point{};
  for (const lincheck::Operation& op : planted.operations) last = std::max(last, op.complete);
  lincheck::Operation stale;
  stale.client = kClients + 1;
  stale.kind = lincheck::OpKind::kGet;
  stale.key = victim_keys[0];
  stale.value = victim_keys[0] + "-initial";
  stale.outcome = lincheck::Outcome::kOk;
  stale.invoke = last + std::chrono::milliseconds(1);
  stale.complete = last + std::chrono::milliseconds(2);
  // Unless the history's final read of the key returned that very value
  // (then it would not be stale), the checker must reject it.
  bool final_read_was_initial = false;
  for (auto it = planted.operations.rbegin(); it != planted.operations.rend(); ++it) {
    if (it->key == stale.key && it->kind == lincheck::OpKind::kGet && it->client == kClients) {
      final_read_was_initial = it->outcome == lincheck::Outcome::kOk && it->value == stale.value;
      break;
    }
  }
  ASSERT_FALSE(final_read_was_initial) << "the final read returned the value from before the promotion";
  planted.operations.push_back(stale);
  const lincheck::CheckResult p = lincheck::Check(planted);
  EXPECT_EQ(p.verdict, lincheck::Verdict::kNotLinearizable) << "a planted stale read was not caught";
}

// kill -9 a server under a load on the shards it backs up (and does not
// own): writes there go on without it and nothing acknowledged is lost;
// then it restarts (taken out of the replica sets it backed up: its store
// may lack writes) and the same server is killed again, with the same
// checks after each kill.
TEST_F(FailoverTest, BackupKilledTwiceUnderLoadLosesNothing) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(3));
  const std::string victim = IdOf(1);
  ASSERT_FALSE(victim.empty());
  const std::set<uint32_t> backed_up = BackupOnlyShards(victim);
  ASSERT_FALSE(backed_up.empty());
  auto clients = NewClients(2);
  ASSERT_EQ(clients.size(), 2u);
  Load load(std::move(clients), KeysPerThread(), "backup-");
  auto fresh = NewClient();
  ASSERT_NE(fresh, nullptr);
  for (int round = 1; round <= 2; ++round) {
    const std::string when = "after kill " + std::to_string(round) + " of the backup";
    const auto started = Clock::now();
    load.Start(backed_up);
    ASSERT_TRUE(load.WaitForProgress(backed_up, started, ProgressCalls()));
    const auto killed_at = Clock::now();
    cluster().server(1).Kill9();
    const bool progressed = load.WaitForProgress(backed_up, killed_at, ProgressCalls());
    load.Stop();
    ASSERT_TRUE(progressed) << "writes did not go on " << when;
    load.PrintGap(("backup killed, round " + std::to_string(round)).c_str(), backed_up, killed_at);
    EXPECT_EQ(load.stale_reads(), 0) << load.first_stale_read();
    load.ExpectNothingLost(*fresh, when);
    if (round == 1) {
      const Status s = cluster().server(1).Start();
      ASSERT_TRUE(s.ok()) << s;
    }
  }
}

}  // namespace
}  // namespace rkv::testing
