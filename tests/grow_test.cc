// The re-replication suite (docs/design.md §5.8 and §8.9): a real
// rkv-coordinator and rkv-servers whose replica sets change under load.
// A server gone for good is replaced and R is restored on the others; a
// server restarted on its data dir catches up fetching only what it
// missed; a fourth server joining a running cluster takes a share of the
// shards; a drained server ends up holding nothing and can be stopped. In
// every case no acknowledged write is lost: each is on every replica of its
// shard at the end. Runs over the transport named by $RKV_TEST_TRANSPORT.
//
// Each server is also read directly, by a client of that one server: GETs
// are one-sided reads of the server's own table, so they show exactly what
// that replica holds.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "rkv/admin.h"
#include "rkv/client.h"
#include "tests/test_cluster.h"

namespace rkv::testing {
namespace {

std::string ValueFor(const std::string& key, uint64_t generation) {
  return key + "#" + std::to_string(generation) + "#" + std::string(generation % 89, 'g');
}

// What writers learned: the last acknowledged value of each key, and the
// values of writes whose outcome is unknown since then (any may be there).
struct Ledger {
  std::mutex mu;
  std::map<std::string, std::string> acked;
  std::map<std::string, std::set<std::string>> unknown;
  int failures = 0;
  std::string first_failure;

  void Record(const std::string& key, const std::string& value, const Status& s) {
    std::lock_guard<std::mutex> l(mu);
    if (s.ok()) {
      acked[key] = value;
      unknown.erase(key);
      return;
    }
    unknown[key].insert(value);
    if (failures++ == 0) first_failure = key + ": " + s.ToString();
  }

  bool Allowed(const std::string& key, const std::string& got) {
    const auto a = acked.find(key);
    if (a != acked.end() && a->second == got) return true;
    const auto u = unknown.find(key);
    return u != unknown.end() && u->second.count(got) > 0;
  }
};

// A write refused as UNAVAILABLE may or may not have taken effect (for
// one, "map changed mid-write, outcome unknown: ..." when a balance
// move takes the shard's primary role during it). A lone writer learns the
// outcome by repeating the write, as a user would: a PUT of the same value
// leaves the same state either way, and a repeated DELETE that finds
// nothing found its own earlier effect.
// Between repeats the writer backs off (10 ms, doubling up to 200 ms), as a
// user's retry loop would, rather than spin while the move completes.
class RepeatBackoff {
 public:
  void Wait() {
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, std::chrono::milliseconds(200));
  }

 private:
  std::chrono::milliseconds delay_{10};
};

Status PutUntilKnown(Client& client, const std::string& key, const std::string& value) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  RepeatBackoff backoff;
  for (;;) {
    const Status s = client.Put(key, value).status();
    if (s.code() != StatusCode::kUnavailable || std::chrono::steady_clock::now() > deadline) return s;
    backoff.Wait();
  }
}

Status DeleteUntilKnown(Client& client, const std::string& key) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  RepeatBackoff backoff;
  for (bool repeated = false;; repeated = true) {
    const Status s = client.Delete(key);
    if (repeated && s.code() == StatusCode::kNotFound) return Status::Ok();
    if (s.code() != StatusCode::kUnavailable || std::chrono::steady_clock::now() > deadline) return s;
    backoff.Wait();
  }
}

class GrowTest : public TestClusterTest {
 protected:
  void StartCluster(int servers, int replicas, std::vector<std::string> extra_coordinator_flags = {}) {
    replicas_ = replicas;
    TestClusterOptions o;
    o.servers = servers;
    o.shards = 128;
    o.replicas = replicas;
    o.coordinator_flags = std::move(extra_coordinator_flags);
    o.zone_prefix = "zone-";
    ASSERT_NO_FATAL_FAILURE(TestClusterTest::StartCluster(o));
  }

  std::unique_ptr<Client> ClusterClient() { return cluster().ClusterClient(); }
  std::unique_ptr<Client> DirectClient(int i) { return cluster().DirectClient(i); }
  std::string IdOf(Client& client, int i) { return cluster().IdOf(client, i); }
  // Lets the writers get `n` writes acknowledged in all (up to
  // kConditionDeadline). Not a verdict: what the test checks afterwards is.
  static void WaitForAcks(const std::atomic<int>& acks, int n) {
    WaitFor("acknowledged writes", [&] { return acks.load() >= n; });
  }
  ::testing::AssertionResult WaitForMap(Client& client, const std::function<bool(const ClusterInfo&)>& done,
                                        ClusterInfo* last) {
    return cluster().WaitForMap(client, done, last);
  }

  // Every shard has exactly R replicas, none of them in `gone`.
  bool FullyReplicated(const ClusterInfo& c, const std::set<std::string>& gone = {}) const {
    for (const ShardInfo& s : c.shards) {
      if (s.replicas.size() != static_cast<size_t>(replicas_)) return false;
      for (const std::string& id : s.replicas) {
        if (gone.count(id) > 0) return false;
      }
    }
    return !c.shards.empty();
  }

  static std::string Describe(const ClusterInfo& c) {
    std::string out = "map version " + std::to_string(c.map_version) + ":";
    for (const MemberInfo& m : c.members) {
      out += "\n  " + m.server_id + " " + m.state + " primaries=" + std::to_string(m.shards) +
             " backups=" + std::to_string(m.backup_shards);
    }
    int short_shards = 0;
    for (const ShardInfo& s : c.shards) short_shards += s.replicas.size() < c.replication_factor ? 1 : 0;
    return out + "\n  shards below R: " + std::to_string(short_shards);
  }

  // Writers over `keys` keys per thread until `stop`.
  std::vector<std::thread> StartWriters(Client& client, Ledger& ledger, std::atomic<bool>& stop,
                                        std::atomic<int>& acks, const std::string& prefix, int threads = 2,
                                        int keys = 300) {
    std::vector<std::thread> writers;
    for (int t = 0; t < threads; ++t) {
      writers.emplace_back([&, t, prefix, keys] {
        for (uint64_t i = 0; !stop.load(); ++i) {
          const std::string key = prefix + std::to_string(t) + "-" + std::to_string(i % keys);
          const std::string value = ValueFor(key, i);
          const Status s = client.Put(key, value).status();
          ledger.Record(key, value, s);
          if (s.ok()) acks.fetch_add(1);
        }
      });
    }
    return writers;
  }

  // Every acknowledged write is readable through the cluster and held by
  // every replica of its shard in `map` (read directly from each server;
  // `alive` maps a server id to its process index).
  void ExpectEverywhere(Ledger& ledger, const ClusterInfo& map, const std::map<std::string, int>& alive) {
    auto reader = ClusterClient();
    ASSERT_NE(reader, nullptr);
    std::map<int, std::unique_ptr<Client>> direct;
    for (const auto& [id, i] : alive) {
      direct[i] = DirectClient(i);
      ASSERT_NE(direct[i], nullptr);
    }
    std::lock_guard<std::mutex> l(ledger.mu);
    for (const auto& [key, value] : ledger.acked) {
      auto got = reader->Get(key);
      ASSERT_TRUE(got.ok()) << key << " is not readable: " << got.status();
      EXPECT_TRUE(ledger.Allowed(key, *got)) << key << " lost its last acknowledged value";
      auto shard = reader->ShardOfKey(key);
      ASSERT_TRUE(shard.ok()) << shard.status();
      for (const std::string& id : map.shards[*shard].replicas) {
        const auto it = alive.find(id);
        ASSERT_NE(it, alive.end()) << "shard " << *shard << " lists " << id << ", which is not alive";
        auto held = direct[it->second]->Get(key);
        ASSERT_TRUE(held.ok()) << "replica " << id << " of shard " << *shard << " lacks " << key << ": "
                               << held.status();
        EXPECT_TRUE(ledger.Allowed(key, *held)) << "replica " << id << " holds an old value of " << key;
      }
    }
  }

  std::map<std::string, int> AliveIds(Client& client) {
    std::map<std::string, int> out;
    for (int i = 0; i < cluster().server_count(); ++i) {
      if (cluster().server(i).running()) out[IdOf(client, i)] = i;
    }
    return out;
  }

  int replicas_ = 0;
};

// Kill -9 a server and wipe its disk, under writes: once it has been DOWN
// for --replace_after_ms its roles go to the other servers, which catch up
// from the primaries, and every shard has R replicas again. The server
// then comes back on its wiped disk, under a new id, and `kvctl forget`
// removes the old id, which `kvctl members` showed DOWN for a while.
TEST_F(GrowTest, ServerGoneForGoodIsReplacedAndRIsRestored) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(3, 2, {"--replace_after_ms=1500"}));
  auto client = ClusterClient();
  ASSERT_NE(client, nullptr);
  const std::string victim = IdOf(*client, 2);
  ASSERT_FALSE(victim.empty());
  Ledger ledger;
  std::atomic<bool> stop{false};
  std::atomic<int> acks{0};
  auto writers = StartWriters(*client, ledger, stop, acks, "gone-");
  WaitForAcks(acks, 200);
  cluster().server(2).Kill9();
  cluster().server(2).Wipe();
  ClusterInfo map;
  const bool restored = WaitForMap(*client, [&](const ClusterInfo& c) { return FullyReplicated(c, {victim}); }, &map);
  const int acks_at_restore = acks.load();
  WaitForAcks(acks, acks_at_restore + 100);
  stop = true;
  for (auto& w : writers) w.join();
  ASSERT_TRUE(restored) << "R was not restored: " << Describe(map);
  ASSERT_TRUE(WaitForMap(*client, [&](const ClusterInfo& c) { return FullyReplicated(c, {victim}); }, &map));
  ExpectEverywhere(ledger, map, AliveIds(*client));
  std::printf("[ grow ] replaced %s: %d writes acknowledged, %d failed (outcome unknown), R=%d on every shard\n",
              victim.c_str(), acks.load(), ledger.failures, replicas_);

  const CommandResult members = cluster().Kvctl({"members"});
  ASSERT_EQ(members.exit_code, 0) << members.out << members.err;
  EXPECT_NE(members.out.find("DOWN for "), std::string::npos) << members.out;
  // A malformed id is refused before any call; forgetting the victim now
  // would leave fewer servers than --servers.
  const CommandResult malformed = cluster().Kvctl({"forget", std::string(65, 's')});
  EXPECT_EQ(malformed.exit_code, 2) << malformed.out << malformed.err;
  EXPECT_NE(malformed.err.find("longer than 64 bytes"), std::string::npos) << malformed.err;
  const CommandResult early = cluster().Kvctl({"forget", victim});
  EXPECT_EQ(early.exit_code, 2) << early.out << early.err;
  EXPECT_NE(early.err.find("fewer than --servers"), std::string::npos) << early.err;
  const Status back = cluster().server(2).Start();
  ASSERT_TRUE(back.ok()) << back;
  ASSERT_TRUE(WaitForMap(*client, [&](const ClusterInfo& c) { return c.members.size() == 4; }, &map)) << Describe(map);
  const CommandResult forgot = cluster().Kvctl({"forget", victim});
  ASSERT_EQ(forgot.exit_code, 0) << forgot.out << forgot.err;
  EXPECT_EQ(forgot.out.find("forgot " + victim + ": no longer listed"), 0u) << forgot.out;
  ASSERT_TRUE(WaitForMap(
      *client,
      [&](const ClusterInfo& c) {
        return c.members.size() == 3 && std::none_of(c.members.begin(), c.members.end(),
                                                     [&](const MemberInfo& m) { return m.server_id == victim; });
      },
      &map))
      << Describe(map);
}

// Stop a server, write while it is away (new keys, overwrites, deletes),
// restart it on its data dir: it catches up on every shard it held,
// fetching the values it missed and not the ones it has.
TEST_F(GrowTest, RestartedServerFetchesOnlyWhatItMissed) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(3, 3));
  auto client = ClusterClient();
  ASSERT_NE(client, nullptr);
  const std::string victim = IdOf(*client, 2);
  const int n = Scaled(3000, 400);
  for (int i = 0; i < n; ++i) {
    const std::string key = "rejoin-" + std::to_string(i);
    ASSERT_TRUE(client->Put(key, ValueFor(key, 1)).ok()) << key;
  }
  cluster().server(2).Kill9();
  // Wait until no shard's primary is the stopped server (failover), so
  // that writes while it is away succeed.
  ClusterInfo map;
  ASSERT_TRUE(WaitForMap(
      *client,
      [&](const ClusterInfo& c) {
        for (const ShardInfo& s : c.shards) {
          if (!s.replicas.empty() && s.replicas.front() == victim) return false;
        }
        return true;
      },
      &map))
      << Describe(map);
  const int missed = std::max(10, n / 10);
  std::map<std::string, std::string> expected;
  std::set<std::string> deleted;
  for (int i = 0; i < n; ++i) expected["rejoin-" + std::to_string(i)] = ValueFor("rejoin-" + std::to_string(i), 1);
  for (int i = 0; i < missed; ++i) {
    const std::string fresh = "rejoin-new-" + std::to_string(i);
    const Status put = PutUntilKnown(*client, fresh, ValueFor(fresh, 2));
    ASSERT_TRUE(put.ok()) << fresh << ": " << put << "\n" << Describe(map);
    expected[fresh] = ValueFor(fresh, 2);
    const std::string old = "rejoin-" + std::to_string(i);
    if (i % 2 == 0) {
      const Status overwrite = PutUntilKnown(*client, old, ValueFor(old, 3));
      ASSERT_TRUE(overwrite.ok()) << old << ": " << overwrite;
      expected[old] = ValueFor(old, 3);
    } else {
      const Status del = DeleteUntilKnown(*client, old);
      ASSERT_TRUE(del.ok()) << old << ": " << del;
      expected.erase(old);
      deleted.insert(old);
    }
  }
  const Status restarted = cluster().server(2).Start();
  ASSERT_TRUE(restarted.ok()) << restarted;
  ASSERT_TRUE(WaitForMap(
      *client,
      [&](const ClusterInfo& c) {
        if (!FullyReplicated(c)) return false;
        for (const ShardInfo& s : c.shards) {
          if (std::find(s.replicas.begin(), s.replicas.end(), victim) == s.replicas.end()) return false;
        }
        return true;
      },
      &map))
      << "the restarted server did not get back every shard: " << Describe(map);
  auto stats = ClusterAdmin(*client).ServerStats(victim);
  ASSERT_TRUE(stats.ok()) << stats.status();
  // It missed `missed` new keys and missed/2 overwrites; it fetched those
  // values (perhaps a few more, from shards a failover re-assigned) but not
  // the n it already held.
  const std::optional<uint64_t> fetched = stats->Find("catchup_values_fetched");
  ASSERT_TRUE(fetched.has_value());
  EXPECT_GE(*fetched, static_cast<uint64_t>(missed + missed / 2));
  EXPECT_LT(*fetched, static_cast<uint64_t>(n));
  auto direct = DirectClient(2);
  ASSERT_NE(direct, nullptr);
  for (const auto& [key, value] : expected) {
    auto got = direct->Get(key);
    ASSERT_TRUE(got.ok()) << "the restarted server lacks " << key << ": " << got.status();
    EXPECT_EQ(*got, value) << key;
  }
  for (const std::string& key : deleted) {
    EXPECT_EQ(direct->Get(key).status().code(), StatusCode::kNotFound) << "a key deleted while it was away: " << key;
  }
  std::printf("[ grow ] restarted server fetched %llu values (%d missed of %d held), listed %llu records\n",
              static_cast<unsigned long long>(*fetched), missed + missed / 2, n,
              static_cast<unsigned long long>(stats->Find("catchup_records_listed").value_or(0)));
}

// A fourth server joins a running three-server cluster under writes: it
// ends up a primary and a backup of a share of the shards, every shard has
// R replicas, and nothing acknowledged is lost.
TEST_F(GrowTest, FourthServerUnderLoadTakesAShareAndLosesNothing) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(3, 2));
  auto client = ClusterClient();
  ASSERT_NE(client, nullptr);
  Ledger ledger;
  std::atomic<bool> stop{false};
  std::atomic<int> acks{0};
  auto writers = StartWriters(*client, ledger, stop, acks, "grow-");
  WaitForAcks(acks, 200);
  const int fourth = cluster().AddServer();
  const Status started = cluster().server(fourth).Start();
  ClusterInfo map;
  std::string added;
  const bool spread = started.ok() && WaitForMap(
                                          *client,
                                          [&](const ClusterInfo& c) {
                                            if (c.members.size() != 4 || !FullyReplicated(c)) return false;
                                            for (const MemberInfo& m : c.members) {
                                              if (m.data_address != cluster().server(fourth).address()) continue;
                                              added = m.server_id;
                                              return m.shards > 0 && m.backup_shards > 0;
                                            }
                                            return false;
                                          },
                                          &map);
  const int acks_at_spread = acks.load();
  WaitForAcks(acks, acks_at_spread + 100);
  stop = true;
  for (auto& w : writers) w.join();
  ASSERT_TRUE(started.ok()) << started;
  ASSERT_TRUE(spread) << "the fourth server did not take a share: " << Describe(map);
  ASSERT_TRUE(WaitForMap(*client, [&](const ClusterInfo& c) { return FullyReplicated(c); }, &map));
  ExpectEverywhere(ledger, map, AliveIds(*client));
  for (const MemberInfo& m : map.members) {
    std::printf("[ grow ] %s: %u primaries, %u backups\n", m.server_id.c_str(), m.shards, m.backup_shards);
  }
  std::printf("[ grow ] %d writes acknowledged, %d failed (outcome unknown or refused) while %s joined\n",
              acks.load(), ledger.failures, added.c_str());
}

// `kvctl drain` moves every role off a server under writes; it then holds
// nothing, is stopped, and every acknowledged write is still on R replicas.
TEST_F(GrowTest, DrainedServerHoldsNothingAndCanBeStopped) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(3, 2));
  auto client = ClusterClient();
  ASSERT_NE(client, nullptr);
  const std::string drained = IdOf(*client, 0);
  ASSERT_FALSE(drained.empty());
  Ledger ledger;
  std::atomic<bool> stop{false};
  std::atomic<int> acks{0};
  auto writers = StartWriters(*client, ledger, stop, acks, "drain-");
  WaitForAcks(acks, 200);
  const CommandResult r = cluster().Kvctl({"drain", drained, "--timeout=300000"});
  stop = true;
  for (auto& w : writers) w.join();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("drained"), std::string::npos) << r.out;
  ClusterInfo map;
  ASSERT_TRUE(WaitForMap(*client, [&](const ClusterInfo& c) { return FullyReplicated(c, {drained}); }, &map))
      << Describe(map);
  cluster().server(0).Terminate();
  std::map<std::string, int> alive = AliveIds(*client);
  ExpectEverywhere(ledger, map, alive);
  std::printf("[ grow ] drained %s under load: %d writes acknowledged, %d failed\n", drained.c_str(), acks.load(),
              ledger.failures);
}

}  // namespace
}  // namespace rkv::testing
