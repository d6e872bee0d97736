// librkv's cluster mode against a real in-process CoordinatorServer. The
// "servers" are joined straight into the coordinator's state and listen
// nowhere, so these tests cover the control plane: the first map, the
// watch, DOWN handling, errors that name the server, and life on the
// cached map while the coordinator is down. Data-plane routing against
// real servers is covered by the cross-process tests.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/hash.h"
#include "rkv/admin.h"
#include "rkv/client.h"
#include "tests/in_process_coordinator.h"

namespace rkv {
namespace {

using coordinator::CoordinatorServer;

constexpr char kToken[] = "cluster-test-token";
constexpr uint32_t kShards = 16;

class ClusterClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two servers; no fake server expires during a test (the options'
    // heartbeat timeout).
    testing::InProcessCoordinatorOptions options;
    options.servers = 2;
    options.shards = kShards;
    // Routing and errors, not replication: one copy, so that a server that
    // leaves keeps its shards (no failover moves them while a test looks).
    options.replicas = 1;
    // Calls go on with the cached map only while the lease runs once the
    // coordinator is gone (FollowsTheMapAndNamesTheServerInErrors' end):
    // a lease that a loaded sanitizer run cannot outlast.
    options.lease = std::chrono::seconds(30);
    auto server = testing::StartInProcessCoordinator(options, kToken);
    ASSERT_TRUE(server.ok()) << server.status();
    coord_ = std::move(server).value();
  }

  // Joins a fake server whose data and admin ports refuse connections.
  void JoinFake(const std::string& id, uint64_t epoch) {
    const Status j = testing::JoinFakeServer(*coord_->state(), id, epoch);
    ASSERT_TRUE(j.ok()) << j;
  }

  ClientOptions Options(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    ClientOptions o;
    o.coordinator = coord_->address();
    o.token = kToken;
    o.transport = "tcp";
    o.timeout = timeout;
    return o;
  }

  // A key whose shard `id` owns in `map`.
  static std::string KeyOwnedBy(const v1::ClusterMap& map, const std::string& id) {
    for (int i = 0; i < 100000; ++i) {
      const std::string key = "k" + std::to_string(i);
      if (map.shard_owner(static_cast<int>(ShardOf(key, map.shard_count()))) == id) return key;
    }
    ADD_FAILURE() << "no key found for " << id;
    return "";
  }

  std::unique_ptr<CoordinatorServer> coord_;
};

TEST_F(ClusterClientTest, OptionsNeedExactlyOneOfServerAndCoordinator) {
  ClientOptions both = Options();
  both.server = "127.0.0.1:7701";
  auto c = Client::Connect(both);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);

  ClientOptions none = Options();
  none.coordinator.clear();
  none.server.clear();
  EXPECT_EQ(Client::Connect(none).status().code(), StatusCode::kInvalidArgument);

  ClientOptions bad = Options();
  bad.coordinator = "no-port";
  EXPECT_EQ(Client::Connect(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ClusterClientTest, AnAdminOfItsOwnNeedsACoordinatorAndSeesTheClientsMap) {
  ClientOptions none = Options();
  none.coordinator.clear();
  auto refused = ClusterAdmin::Connect(none);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status();

  JoinFake("a", 1);
  JoinFake("b", 1);
  auto admin = ClusterAdmin::Connect(Options());
  ASSERT_TRUE(admin.ok()) << admin.status();
  auto members = (*admin)->Members();
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->size(), 2u);
  auto cluster = (*admin)->client().Cluster();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_EQ(cluster->members.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ((*members)[i].server_id, cluster->members[i].server_id);
  // The coordinator's answer, named: no such server.
  CallOptions quick;
  quick.timeout = std::chrono::milliseconds(2000);
  auto drain = (*admin)->Drain("zz", quick);
  ASSERT_FALSE(drain.ok());
  EXPECT_EQ(drain.status().code(), StatusCode::kNotFound) << drain.status();
}

TEST_F(ClusterClientTest, AnIncompleteClusterIsUnavailable) {
  JoinFake("a", 1);
  // Long enough for several answers on a loaded machine: the error is the
  // last one, the incomplete map's.
  auto c = Client::Connect(Options(std::chrono::milliseconds(3000)));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("cluster has 1 of 2 servers"), std::string::npos) << c.status();
}

TEST_F(ClusterClientTest, AWrongTokenIsRefused) {
  JoinFake("a", 1);
  JoinFake("b", 1);
  ClientOptions o = Options();
  o.token = "wrong";
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnauthenticated) << c.status();
}

TEST_F(ClusterClientTest, FollowsTheMapAndNamesTheServerInErrors) {
  JoinFake("a", 1);
  JoinFake("b", 1);
  auto connected = Client::Connect(Options());
  ASSERT_TRUE(connected.ok()) << connected.status();
  Client& client = **connected;
  const v1::ClusterMap map = coord_->state()->Map();
  EXPECT_TRUE(client.cluster_mode());
  EXPECT_EQ(client.cluster_map_version(), coord_->state()->version());
  EXPECT_EQ(client.max_key_bytes(), 1024u);
  EXPECT_EQ(client.max_value_bytes(), 4096u);

  ClusterAdmin admin(client);
  auto members = admin.Members();
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->size(), 2u);
  EXPECT_EQ((*members)[0].server_id, "a");
  EXPECT_EQ((*members)[0].state, "UP");
  EXPECT_EQ((*members)[0].data_address, "127.0.0.1:1");
  EXPECT_EQ((*members)[0].shards + (*members)[1].shards, kShards);

  // b leaves: the watch delivers the new map.
  v1::LeaveRequest leave;
  leave.set_server_id("b");
  leave.set_epoch(1);
  ASSERT_TRUE(coord_->state()->Leave(leave).ok());
  const uint64_t want = coord_->state()->version();
  EXPECT_TRUE(testing::WaitFor("the watch", [&] { return client.cluster_map_version() >= want; }));
  ASSERT_EQ(client.cluster_map_version(), want);
  members = admin.Members();
  ASSERT_TRUE(members.ok());
  EXPECT_EQ((*members)[1].state, "DOWN");

  CallOptions quick;
  quick.timeout = std::chrono::milliseconds(200);
  const std::string b_key = KeyOwnedBy(map, "b");
  auto put = client.Put(b_key, "v", quick);
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(put.status().message().find("server b (epoch 1, 127.0.0.1:1)"), std::string::npos) << put.status();
  EXPECT_NE(put.status().message().find("DOWN"), std::string::npos) << put.status();

  // a is UP but unreachable: its error names it too.
  const std::string a_key = KeyOwnedBy(map, "a");
  auto get = client.Get(a_key, quick);
  ASSERT_FALSE(get.ok());
  EXPECT_EQ(get.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(get.status().message().find("server a (epoch 1, 127.0.0.1:1)"), std::string::npos) << get.status();

  // MultiGet: each key answers with its own server's error.
  std::vector<std::string> keys = {a_key, b_key, ""};
  auto results = client.MultiGet(keys, quick);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_NE(results[0].status().message().find("server a"), std::string::npos) << results[0].status();
  EXPECT_NE(results[1].status().message().find("server b"), std::string::npos) << results[1].status();
  EXPECT_EQ(results[2].status().code(), StatusCode::kInvalidArgument);

  // MultiPut and MultiDelete route each key to its own server, and a bad
  // item fails alone.
  const KeyValueView items[] = {{a_key, "va"}, {b_key, "vb"}, {"", "no key"}};
  auto put_results = client.MultiPut(items, quick);
  ASSERT_EQ(put_results.size(), 3u);
  EXPECT_EQ(put_results[0].status().code(), StatusCode::kUnavailable);
  EXPECT_NE(put_results[0].status().message().find("server a"), std::string::npos) << put_results[0].status();
  EXPECT_NE(put_results[1].status().message().find("server b"), std::string::npos) << put_results[1].status();
  EXPECT_NE(put_results[1].status().message().find("DOWN"), std::string::npos) << put_results[1].status();
  EXPECT_EQ(put_results[2].status().code(), StatusCode::kInvalidArgument);
  auto deleted = client.MultiDelete(keys, quick);
  ASSERT_EQ(deleted.size(), 3u);
  EXPECT_NE(deleted[0].message().find("server a"), std::string::npos) << deleted[0];
  EXPECT_NE(deleted[1].message().find("server b"), std::string::npos) << deleted[1];
  EXPECT_EQ(deleted[2].code(), StatusCode::kInvalidArgument);

  // Stats: unknown ids are NOT_FOUND, an unreachable admin names the server.
  EXPECT_EQ(admin.ServerStats("zz", quick).status().code(), StatusCode::kNotFound);
  auto stats = admin.ServerStats("a", quick);
  ASSERT_FALSE(stats.ok());
  EXPECT_NE(stats.status().message().find("server a (epoch 1"), std::string::npos) << stats.status();

  // The coordinator goes away: the cached map stays in use, and calls
  // report the data plane's error, not the coordinator's.
  coord_->Shutdown();
  EXPECT_FALSE(client.RefreshClusterMap(quick).ok());
  EXPECT_EQ(client.cluster_map_version(), want);
  get = client.Get(a_key, quick);
  ASSERT_FALSE(get.ok());
  EXPECT_NE(get.status().message().find("server a (epoch 1, 127.0.0.1:1)"), std::string::npos) << get.status();
  EXPECT_EQ(get.status().message().find("coordinator"), std::string::npos) << get.status();
}

TEST_F(ClusterClientTest, ShardOfKeyRefusesTheKeysGetAndPutRefuse) {
  // `kvctl where ''` used to name a shard for a key that get and put refuse.
  JoinFake("a", 1);
  JoinFake("b", 1);
  auto connected = Client::Connect(Options());
  ASSERT_TRUE(connected.ok()) << connected.status();
  Client& client = **connected;
  CallOptions quick;
  quick.timeout = std::chrono::milliseconds(200);
  for (const std::string& key : {std::string(), std::string(client.max_key_bytes() + 1, 'k')}) {
    const StatusOr<uint32_t> shard = client.ShardOfKey(key);
    ASSERT_FALSE(shard.ok()) << key.size() << " bytes: shard " << *shard;
    EXPECT_EQ(shard.status().code(), StatusCode::kInvalidArgument) << shard.status();
    EXPECT_EQ(shard.status().message(), client.Get(key, quick).status().message()) << "the check of get";
    EXPECT_EQ(shard.status().message(), client.Put(key, "v", quick).status().message()) << "the check of put";
  }
  const StatusOr<uint32_t> longest = client.ShardOfKey(std::string(client.max_key_bytes(), 'k'));
  ASSERT_TRUE(longest.ok()) << longest.status();
  EXPECT_LT(*longest, kShards);
}

}  // namespace
}  // namespace rkv
