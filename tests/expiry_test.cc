// Expiry (docs/design.md §5.11) from outside: real rkv-server processes
// driven through librkv and kvctl. A key written with an expiry reads as
// absent on every read path once its deadline has passed, counts as absent
// for a conditional write, keeps its deadline across a restart, a failover
// and a catch-up, and is reclaimed (on every replica) by its primary.
//
// No test asserts a duration: short deadlines are waited for (WaitFor),
// and what must still be readable carries a deadline minutes away.
#include <chrono>
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "rkv/admin.h"
#include "rkv/client.h"
#include "tests/run_command.h"
#include "tests/test_cluster.h"

namespace rkv::testing {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kShortMs = 1500;            // waited for
constexpr int64_t kLongMs = 30LL * 60 * 1000;  // never reached during a test

int64_t In(int64_t ms) { return Client::NowUnixMs() + ms; }

::testing::AssertionResult Absent(Client& client, const std::string& key) {
  auto got = client.Get(key);
  if (got.ok()) return ::testing::AssertionFailure() << key << " still reads '" << *got << "'";
  if (got.status().code() != StatusCode::kNotFound) {
    return ::testing::AssertionFailure() << key << ": " << got.status();
  }
  return ::testing::AssertionSuccess();
}

// One server alone, WAL durability (a restart keeps every write).
class ExpiryTest : public TestClusterTest {
 protected:
  void SetUp() override {
    TestClusterOptions o;
    o.coordinator = false;
    o.servers = 1;
    o.durability = "wal";
    ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  }
  std::unique_ptr<Client> NewClient() { return cluster().DirectClient(0); }
};

TEST_F(ExpiryTest, AnExpiredKeyReadsAsAbsentOnEveryPath) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  const int64_t long_deadline = In(kLongMs);
  ASSERT_TRUE(client->Put("short", "soon gone", PutOptions{{}, In(kShortMs)}).ok());
  ASSERT_TRUE(client->Put("long", "stays", PutOptions{{}, long_deadline}).ok());
  ASSERT_TRUE(client->Put("plain", "forever").ok());
  // Read once before the deadline where the machine allows it, so that
  // this client's location cache holds the block (the cached path below).
  (void)client->Get("short");

  auto long_read = client->GetVersioned("long");
  ASSERT_TRUE(long_read.ok()) << long_read.status();
  EXPECT_EQ(long_read->value, "stays");
  EXPECT_EQ(long_read->expires_at_unix_ms, long_deadline);
  auto plain = client->GetVersioned("plain");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->expires_at_unix_ms, kNoExpiry);

  ASSERT_TRUE(WaitFor("'short' to expire", [&] { return Absent(*client, "short"); }));
  // Every read path, on the client that cached it and on a fresh one.
  auto fresh = NewClient();
  ASSERT_NE(fresh, nullptr);
  for (Client* c : {client.get(), fresh.get()}) {
    EXPECT_TRUE(Absent(*c, "short"));
    EXPECT_EQ(c->GetVersioned("short").status().code(), StatusCode::kNotFound);
    const std::vector<std::string> keys = {"short", "long", "plain"};
    auto many = c->MultiGet(keys);
    ASSERT_EQ(many.size(), 3u);
    EXPECT_EQ(many[0].status().code(), StatusCode::kNotFound);
    ASSERT_TRUE(many[1].ok()) << many[1].status();
    EXPECT_EQ(*many[1], "stays");
    ASSERT_TRUE(many[2].ok()) << many[2].status();
    std::vector<std::byte> out(4096);
    EXPECT_EQ(c->GetInto("short", out).status().code(), StatusCode::kNotFound);
    auto handle = c->RegisterBuffer(out);
    ASSERT_TRUE(handle.ok()) << handle.status();
    EXPECT_EQ(c->GetInto("short", out).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(*c->GetInto("long", out), 5u);
    ASSERT_TRUE(c->UnregisterBuffer(*handle).ok());
  }
  // A DELETE finds it absent too.
  EXPECT_EQ(client->Delete("short").code(), StatusCode::kNotFound);
}

TEST_F(ExpiryTest, ConditionsSeeAnExpiredKeyAsAbsent) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  auto held = client->Put("lock", "holder-1", PutOptions{PutCondition::Absent(), In(kLongMs)});
  ASSERT_TRUE(held.ok()) << held.status();
  // Held: a second taker is refused.
  auto refused = client->Put("lock", "holder-2", PutOptions{PutCondition::Absent(), In(kLongMs)});
  EXPECT_EQ(refused.status().reason(), Reason::kConditionFailed) << refused.status();
  // The holder shortens its hold, then lets it lapse.
  auto first = client->Put("lock", "holder-1", PutOptions{PutCondition::VersionIs(*held), In(kShortMs)});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(WaitFor("the lock to expire", [&] { return Absent(*client, "lock"); }));
  // Expired: the version it had no longer holds, and absent does.
  auto stale = client->Put("lock", "x", PutCondition::VersionIs(*first));
  EXPECT_EQ(stale.status().reason(), Reason::kConditionFailed) << stale.status();
  EXPECT_EQ(client->DeleteIfVersion("lock", *first).reason(), Reason::kConditionFailed);
  auto second = client->Put("lock", "holder-2", PutOptions{PutCondition::Absent(), In(kLongMs)});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(*second, *first);
  EXPECT_EQ(*client->Get("lock"), "holder-2");
}

TEST_F(ExpiryTest, SetExpiryChangesTheDeadlineAndKeepsTheValue) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  auto v1 = client->Put("k", "value");
  ASSERT_TRUE(v1.ok());
  const int64_t deadline = In(kLongMs);
  auto v2 = client->SetExpiry("k", deadline);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_GT(*v2, *v1);
  auto got = client->GetVersioned("k");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->value, "value");
  EXPECT_EQ(got->expires_at_unix_ms, deadline);
  EXPECT_EQ(got->version, *v2);
  // Persist.
  ASSERT_TRUE(client->SetExpiry("k", kNoExpiry).ok());
  EXPECT_EQ(client->GetVersioned("k")->expires_at_unix_ms, kNoExpiry);
  // A deadline already reached removes the key.
  auto removed = client->SetExpiry("k", Client::NowUnixMs() - 1000);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 0u);
  EXPECT_TRUE(Absent(*client, "k"));
  EXPECT_EQ(client->SetExpiry("k", deadline).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->SetExpiry("k", -5).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Put("k", "v", PutOptions{{}, -1}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ExpiryTest, DeadlinesSurviveARestart) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  const int64_t deadline = In(kLongMs);
  ASSERT_TRUE(client->Put("kept", "v", PutOptions{{}, deadline}).ok());
  ASSERT_TRUE(client->Put("goes", "v", PutOptions{{}, In(kShortMs)}).ok());
  client.reset();
  ASSERT_TRUE(cluster().server(0).Restart().ok()) << cluster().server(0).Log();
  client = NewClient();
  ASSERT_NE(client, nullptr);
  auto kept = client->GetVersioned("kept");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->expires_at_unix_ms, deadline);
  EXPECT_TRUE(WaitFor("'goes' to expire after the restart", [&] { return Absent(*client, "goes"); }));
}

TEST_F(ExpiryTest, KvctlSetsReadsAndClearsExpiry) {
  const auto kvctl = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {RKV_KVCTL_BIN, "--server=" + cluster().server(0).address(),
                                     "--token_file=" + cluster().token_file(), "--transport=" + TestTransport(),
                                     "--timeout=" + std::to_string(kCallTimeout.count())};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  };
  auto put = kvctl({"put", "--ttl=600", "session", "s1"});
  ASSERT_EQ(put.exit_code, 0) << put.err;
  auto ttl = kvctl({"ttl", "session"});
  ASSERT_EQ(ttl.exit_code, 0) << ttl.err;
  const int left = std::stoi(ttl.out);
  EXPECT_GT(left, 0);
  EXPECT_LE(left, 600);
  auto persist = kvctl({"persist", "session"});
  ASSERT_EQ(persist.exit_code, 0) << persist.err;
  ttl = kvctl({"ttl", "session"});
  EXPECT_EQ(ttl.out, "none\n");
  auto expire = kvctl({"expire", "session", "0"});
  ASSERT_EQ(expire.exit_code, 0) << expire.err;
  EXPECT_EQ(kvctl({"get", "session"}).exit_code, 1);
  EXPECT_EQ(kvctl({"ttl", "session"}).exit_code, 1);
  auto bad = kvctl({"expire", "session", "soon"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("not a whole number of seconds"), std::string::npos) << bad.err;
  auto misplaced = kvctl({"get", "--ttl=5", "session"});
  EXPECT_EQ(misplaced.exit_code, 2) << misplaced.err;
}

// Three servers, R = 2, quick failure detection.
class ReplicatedExpiryTest : public TestClusterTest {
 protected:
  void SetUp() override {
    TestClusterOptions o;
    o.servers = 3;
    o.shards = 32;
    o.replicas = 2;
    o.heartbeat_interval_ms = 100;
    o.heartbeat_timeout_ms = 600;
    o.lease_ms = 400;
    ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  }

  std::map<std::string, uint64_t> KeysPerServer(Client& client) {
    std::map<std::string, uint64_t> out;
    ClusterAdmin admin(client);
    auto members = admin.Members();
    if (!members.ok()) return out;
    for (const MemberInfo& m : *members) {
      if (m.state != "UP") continue;
      auto stats = admin.ServerStats(m.server_id);
      if (stats.ok()) out[m.server_id] = stats->Find("keys").value_or(0);
    }
    return out;
  }
};

// The primary reclaims expired records and its deletes reach the backups:
// every replica ends with no key.
TEST_F(ReplicatedExpiryTest, ThePrimaryReclaimsExpiredRecordsOnEveryReplica) {
  auto client = cluster().ClusterClient();
  ASSERT_NE(client, nullptr);
  const int64_t deadline = In(kShortMs);
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(client->Put("r" + std::to_string(i), "v", PutOptions{{}, deadline}).ok());
  }
  std::map<std::string, uint64_t> keys;
  EXPECT_TRUE(WaitFor("every replica to reclaim the expired records", [&] {
    keys = KeysPerServer(*client);
    uint64_t total = 0;
    for (const auto& [id, n] : keys) total += n;
    return keys.size() == 3 && total == 0;
  })) << [&] {
    std::string s;
    for (const auto& [id, n] : keys) s += id + ": " + std::to_string(n) + " keys\n";
    return s;
  }();
  EXPECT_TRUE(Absent(*client, "r0"));
}

// A key's deadline is the one its new primary and a re-replicated copy
// (caught up from the primary) hold after its primary is killed.
TEST_F(ReplicatedExpiryTest, DeadlinesSurviveAFailoverAndACatchUp) {
  auto client = cluster().ClusterClient();
  ASSERT_NE(client, nullptr);
  const std::string victim = cluster().IdOf(*client, 0);
  ASSERT_FALSE(victim.empty());
  // Keys whose primary is server 0.
  auto map = client->Cluster();
  ASSERT_TRUE(map.ok()) << map.status();
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < 20 && i < 10000; ++i) {
    const std::string key = "f" + std::to_string(i);
    auto shard = client->ShardOfKey(key);
    ASSERT_TRUE(shard.ok());
    if (map->shards[*shard].replicas.at(0) == victim) keys.push_back(key);
  }
  ASSERT_EQ(keys.size(), 20u);
  const int64_t deadline = In(kLongMs);
  for (const std::string& key : keys) ASSERT_TRUE(client->Put(key, "v-" + key, PutOptions{{}, deadline}).ok());
  ASSERT_TRUE(client->Put("short-" + keys[0], "v", PutOptions{{}, In(kShortMs)}).ok());

  cluster().server(0).Kill9();
  // Promoted, and each shard back at two UP copies (one caught up).
  std::map<std::string, std::string> state;
  ASSERT_TRUE(cluster().WaitForMap(*client, [&](const ClusterInfo& c) {
    state.clear();
    for (const MemberInfo& m : c.members) state[m.server_id] = m.state;
    for (const ShardInfo& s : c.shards) {
      if (s.replicas.size() != 2 || !s.syncing.empty()) return false;
      for (const std::string& r : s.replicas) {
        if (r == victim || state[r] != "UP") return false;
      }
    }
    return true;
  }));
  for (const std::string& key : keys) {
    auto got = client->GetVersioned(key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status();
    EXPECT_EQ(got->value, "v-" + key);
    EXPECT_EQ(got->expires_at_unix_ms, deadline) << key;
  }
  // Each surviving server's own table (the new primary's, and the copy
  // caught up) holds the deadline.
  for (int i = 1; i < 3; ++i) {
    auto direct = cluster().DirectClient(i);
    ASSERT_NE(direct, nullptr);
    for (const std::string& key : keys) {
      auto got = direct->GetVersioned(key);
      ASSERT_TRUE(got.ok()) << "server " << i << ", " << key << ": " << got.status();
      EXPECT_EQ(got->expires_at_unix_ms, deadline) << "server " << i << ", " << key;
    }
  }
  EXPECT_TRUE(WaitFor("the short key to expire", [&] { return Absent(*client, "short-" + keys[0]); }));
}

}  // namespace
}  // namespace rkv::testing
