// The verify suite: `kvctl verify` against a real rkv-coordinator
// (--replicas=3) and three rkv-servers. Under a write load every shard's
// replicas agree (a shard caught between two replicas' answers is asked
// again); a replica whose store was changed behind the cluster's back (a
// record rewritten in a stopped primary's data directory, as a disk or
// operator error would) is found: exit status 1, naming the shard, its
// replicas' digests and, with --keys, the key. Runs over the transport
// named by $RKV_TEST_TRANSPORT, like the other cluster suites.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "rkv/admin.h"
#include "rkv/client.h"
#include "server/store/store.h"
#include "tests/test_cluster.h"

namespace rkv::testing {
namespace {

constexpr int kServers = 3;
constexpr uint32_t kShards = 64;

class VerifyTest : public TestClusterTest {
 protected:
  void SetUp() override {
    TestClusterOptions o;
    o.servers = kServers;
    o.shards = kShards;
    o.replicas = 3;
    // A stopped primary keeps its shards if it is back within a lease (no
    // promotion before): long leases.
    o.heartbeat_timeout_ms = 60000;
    o.lease_ms = 60000;
    ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  }

  CommandResult Kvctl(const std::vector<std::string>& args) { return cluster().Kvctl(args); }
};

TEST_F(VerifyTest, ReplicasAgreeUnderLoadAndADivergedReplicaIsNamed) {
  auto client = cluster().ClusterClient(TestClientOptions(std::chrono::milliseconds(5000)));
  ASSERT_NE(client, nullptr);

  // Writers keep every shard busy while verify runs.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> acked{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 2; ++t) {
    writers.emplace_back([&, t] {
      for (uint64_t i = 0; !stop.load(); ++i) {
        const std::string key = "verify-" + std::to_string(t) + "-" + std::to_string(i % 500);
        if (client->Put(key, key + "#" + std::to_string(i)).ok()) ++acked;
      }
    });
  }
  const bool loaded = WaitFor("1000 acknowledged writes", [&] { return acked.load() >= 1000; });
  if (!loaded) {
    stop = true;
    for (auto& w : writers) w.join();
  }
  ASSERT_TRUE(loaded);
  // Writes in flight make a shard's replicas differ for a moment; verify
  // asks such a shard again, so under load it still finds them equal.
  auto r = Kvctl({"verify", "--rounds=20"});
  stop = true;
  for (auto& w : writers) w.join();
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("verify: all 64 shards agree"), std::string::npos) << r.out;

  // At rest, one round suffices; JSON says the same.
  r = Kvctl({"--output=json", "verify", "--rounds=1"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\"shards_checked\":64,\"single_copy\":0,\"rounds\":1,\"agree\":true"), std::string::npos)
      << r.out;

  // A key, its shard, and the shard's primary.
  const std::string key = "verify-0-7";
  auto shard = client->ShardOfKey(key);
  ASSERT_TRUE(shard.ok()) << shard.status();
  ASSERT_TRUE(client->RefreshClusterMap().ok());
  auto map = client->Cluster();
  ASSERT_TRUE(map.ok()) << map.status();
  const std::vector<std::string>& replicas = map->shards[*shard].replicas;
  ASSERT_EQ(replicas.size(), 3u);
  const std::string primary_id = replicas[0];
  int primary = -1;
  for (const MemberInfo& m : map->members) {
    for (int i = 0; i < kServers; ++i) {
      if (m.server_id == primary_id && m.data_address == cluster().server(i).address()) primary = i;
    }
  }
  ASSERT_GE(primary, 0) << primary_id << " is not one of the test's servers";
  uint64_t old_epoch = 0;
  for (const MemberInfo& m : map->members) {
    if (m.server_id == primary_id) old_epoch = m.epoch;
  }

  // Stop the primary (it leaves cleanly; back before its lease-long fence
  // ends, it stays the shard's primary, design.md 8.8) and rewrite the key
  // in its store: a newer version with another value, which no write of
  // the cluster ever produced.
  cluster().server(primary).Terminate();
  uint64_t diverged_version = 0;
  {
    auto store = server::Store::Open(cluster().ServerDir(primary), server::Durability::kSync);
    ASSERT_TRUE(store.ok()) << store.status();
    auto value = (*store)->Get(key);
    ASSERT_TRUE(value.ok()) << value.status();
    ASSERT_TRUE(value->has_value()) << key << " is not in the primary's store";
    diverged_version = (*value)->version + 1;
    ASSERT_TRUE((*store)->Put(key, "not what the primary holds", diverged_version).ok());
  }
  const Status restarted = cluster().server(primary).Start();
  ASSERT_TRUE(restarted.ok()) << restarted;

  // Until the map lists it UP again (new epoch) as the shard's primary and
  // it answers for the shard: it needs the map first.
  ASSERT_TRUE(cluster().WaitForMap(*client, [&](const ClusterInfo& now) {
    bool up = false;
    for (const MemberInfo& m : now.members) {
      if (m.server_id == primary_id) up = m.state == "UP" && m.epoch != old_epoch;
    }
    const auto& ids = now.shards[*shard].replicas;
    const bool listed = !ids.empty() && ids[0] == primary_id;
    const uint32_t shards[] = {*shard};
    return up && listed && ClusterAdmin(*client).ShardChecksums(primary_id, shards).ok();
  })) << primary_id << " did not come back as the primary of shard " << *shard;

  // verify finds the shard, and only it (a restarted server leaves the
  // sets it was a backup of: those shards have two replicas, which agree).
  ASSERT_TRUE(client->RefreshClusterMap().ok());
  map = client->Cluster();
  ASSERT_TRUE(map.ok()) << map.status();
  const std::vector<std::string> now_replicas = map->shards[*shard].replicas;
  r = Kvctl({"verify", "--rounds=2"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("verify: 1 of 64 shards disagree"), std::string::npos) << r.out;
  // One table row per replica of the shard: SHARD SERVER MAP KEYS
  // MAX_VERSION CHECKSUM.
  std::set<std::string> rows;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::vector<std::string> cells;
    for (std::string cell; in >> cell;) cells.push_back(cell);
    if (cells.size() == 6 && cells[0] == std::to_string(*shard)) rows.insert(cells[1]);
  }
  EXPECT_EQ(rows, std::set<std::string>(now_replicas.begin(), now_replicas.end())) << r.out;
  EXPECT_GE(rows.size(), 2u) << r.out;

  // --keys names the key and its versions on each replica.
  r = Kvctl({"--output=json", "verify", "--keys", "--rounds=1", "--shards=" + std::to_string(*shard)});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("\"shards_checked\":1,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"disagreeing\":[{\"shard\":" + std::to_string(*shard) + ","), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("{\"key\":\"" + key + "\",\"versions\":["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::to_string(diverged_version)), std::string::npos) << r.out;

  // The other shards still agree.
  std::string others;
  for (uint32_t s = 0; s < kShards; ++s) {
    if (s == *shard) continue;
    others += (others.empty() ? "" : ",") + std::to_string(s);
  }
  r = Kvctl({"verify", "--rounds=1", "--shards=" + others});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("verify: all 63 shards agree"), std::string::npos) << r.out;

  // Usage errors: exit 2 without asking anyone.
  r = Kvctl({"verify", "--rounds=0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--rounds must be 1..100"), std::string::npos) << r.err;
  r = Kvctl({"verify", "--shards=3-1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("ends before it starts"), std::string::npos) << r.err;
  r = Kvctl({"verify", "--shards=64"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("shard 64 is not below the shard count 64"), std::string::npos) << r.err;
}

// Drain's argument handling and the coordinator's refusal of an unknown
// server (moving roles is the coordinator's, tested with it).
TEST_F(VerifyTest, DrainRefusesAnUnknownServerAndBadArguments) {
  auto r = Kvctl({"drain"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("drain: missing SERVER_ID"), std::string::npos) << r.err;
  r = Kvctl({"drain", "s-nobody"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("s-nobody"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace rkv::testing
