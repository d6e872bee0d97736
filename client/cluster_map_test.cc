#include "client/cluster_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/hash.h"
#include "common/layout.h"

namespace rkv::client {
namespace {

v1::ServerInfo* AddServer(v1::ClusterMap* map, const std::string& id, uint64_t epoch, int port) {
  v1::ServerInfo* s = map->add_servers();
  s->set_server_id(id);
  s->set_epoch(epoch);
  s->set_state(v1::UP);
  s->set_data_address("127.0.0.1:" + std::to_string(port));
  s->set_admin_address("127.0.0.1:" + std::to_string(port + 1000));
  s->set_transport("tcp");
  v1::TableParams* t = s->mutable_table();
  t->set_bucket_count_log2(4);
  t->set_hash_seed(7);
  t->set_heap_size(1 << 20);
  t->set_max_key_bytes(1024);
  t->set_max_value_bytes(4096);
  t->set_grace_period_us(100'000);
  s->mutable_index()->set_addr(0x100000);
  s->mutable_index()->set_length(layout::IndexBytes(16));
  s->mutable_index()->set_rkey(1);
  s->mutable_heap()->set_addr(0x40000000);
  s->mutable_heap()->set_length(1 << 20);
  s->mutable_heap()->set_rkey(2);
  s->set_heap_bytes(1 << 20);
  return s;
}

// A complete map: shard s owned by server s % 3 ("a", "b", "c").
v1::ClusterMap ThreeServerMap(uint64_t version, uint32_t shard_count = 12) {
  v1::ClusterMap map;
  map.set_version(version);
  map.set_shard_count(shard_count);
  map.set_expected_servers(3);
  const std::vector<std::string> ids = {"a", "b", "c"};
  std::vector<v1::ServerInfo*> servers;
  for (size_t i = 0; i < ids.size(); ++i) servers.push_back(AddServer(&map, ids[i], 10 + i, 7000 + static_cast<int>(i)));
  for (uint32_t s = 0; s < shard_count; ++s) {
    map.add_shard_owner(ids[s % 3]);
    servers[s % 3]->add_shards(s);
  }
  return map;
}

TEST(RoutingTableTest, RoutesEveryKeyToTheOwnerOfItsShard) {
  auto t = RoutingTable::Build(ThreeServerMap(5));
  ASSERT_TRUE(t.ok()) << t.status();
  const RoutingTable& table = **t;
  EXPECT_EQ(table.version(), 5u);
  EXPECT_EQ(table.shard_count(), 12u);
  ASSERT_EQ(table.servers().size(), 3u);
  std::set<std::string> owners_seen;
  for (int i = 0; i < 300; ++i) {
    const std::string key = "key-" + std::to_string(i);
    const uint32_t shard = ShardOf(key, 12);
    const std::string expected = std::string(1, static_cast<char>('a' + shard % 3));
    EXPECT_EQ(table.OwnerOf(key).server_id, expected) << key;
    EXPECT_EQ(table.servers()[table.OwnerIndexOf(key)].server_id, expected);
    owners_seen.insert(table.OwnerOf(key).server_id);
  }
  EXPECT_EQ(owners_seen.size(), 3u);
  EXPECT_EQ(table.OwnerOfShard(4).server_id, "b");
  EXPECT_EQ(table.OwnerOfShard(4).shards_owned, 4u);
  EXPECT_EQ(table.OwnerOfShard(4).data_address, "127.0.0.1:7001");
  EXPECT_EQ(table.OwnerOfShard(4).epoch, 11u);
}

// ThreeServerMap with R = 3 (shard s: s%3, then the next two in join
// order), zones, and shard 0's backup "c" taken out.
v1::ClusterMap ReplicatedMap(uint64_t version) {
  v1::ClusterMap map = ThreeServerMap(version);
  map.set_replication_factor(3);
  const std::vector<std::string> ids = {"a", "b", "c"};
  for (int i = 0; i < 3; ++i) map.mutable_servers(i)->set_zone("zone-" + std::to_string(i));
  for (uint32_t s = 0; s < 12; ++s) {
    v1::ShardReplicas* r = map.add_shard_replicas();
    for (uint32_t k = 0; k < 3; ++k) {
      const uint32_t server = (s + k) % 3;
      if (s == 0 && server == 2) continue;
      r->add_server_ids(ids[server]);
      if (k > 0) map.mutable_servers(static_cast<int>(server))->add_backup_shards(s);
    }
  }
  return map;
}

std::vector<std::string> Ids(const std::vector<ReplicaEntry>& replicas) {
  std::vector<std::string> out;
  for (const ReplicaEntry& r : replicas) out.push_back(r.server->server_id);
  return out;
}

TEST(RoutingTableTest, ExposesReplicaSetsPrimaryFirstAndRoutesToThePrimary) {
  auto t = RoutingTable::Build(ReplicatedMap(7));
  ASSERT_TRUE(t.ok()) << t.status();
  const RoutingTable& table = **t;
  EXPECT_EQ(table.replication_factor(), 3u);
  EXPECT_EQ(Ids(table.ReplicasOfShard(4)), (std::vector<std::string>{"b", "c", "a"}));
  EXPECT_EQ(Ids(table.ReplicasOfShard(0)), (std::vector<std::string>{"a", "b"}));  // one missing
  const auto replicas = table.ReplicasOfShard(5);
  ASSERT_EQ(replicas.size(), 3u);
  EXPECT_EQ(replicas[0].role, ReplicaRole::kPrimary);
  EXPECT_EQ(replicas[1].role, ReplicaRole::kBackup);
  EXPECT_EQ(replicas[2].role, ReplicaRole::kBackup);
  EXPECT_EQ(replicas[0].server, &table.OwnerOfShard(5));
  for (int i = 0; i < 100; ++i) {
    const std::string key = "key-" + std::to_string(i);
    const auto of_key = table.ReplicasOf(key);
    ASSERT_FALSE(of_key.empty());
    EXPECT_EQ(of_key[0].server, &table.OwnerOf(key)) << key;  // data calls still go to the primary
    EXPECT_EQ(Ids(of_key), Ids(table.ReplicasOfShard(ShardOf(key, 12))));
  }
  const ServerEntry* c = table.Find("c");
  EXPECT_EQ(c->zone, "zone-2");
  EXPECT_EQ(c->shards_owned, 4u);
  EXPECT_EQ(c->backup_shards, 7u);  // 8 shards as a backup, less shard 0
}

// The servers ReplicaIndexOf picks for `key` over `turns` consecutive turns,
// in order.
std::vector<std::string> ReadersOf(const RoutingTable& table, const std::string& key, uint64_t first,
                                   int turns) {
  std::vector<std::string> out;
  for (int i = 0; i < turns; ++i) {
    out.push_back(table.servers()[table.ReplicaIndexOf(key, first + static_cast<uint64_t>(i))].server_id);
  }
  return out;
}

// A key of shard `shard` of 12.
std::string KeyOfShard(uint32_t shard) {
  for (int i = 0;; ++i) {
    std::string key = "key-" + std::to_string(i);
    if (ShardOf(key, 12) == shard) return key;
  }
}

TEST(RoutingTableTest, AnyReplicaReadsTakeTheShardsReplicasInTurn) {
  auto t = RoutingTable::Build(ReplicatedMap(7));
  ASSERT_TRUE(t.ok()) << t.status();
  const RoutingTable& table = **t;
  // Shard 4 is b, c, a: consecutive turns visit each once, in that order.
  EXPECT_EQ(ReadersOf(table, KeyOfShard(4), 0, 6), (std::vector<std::string>{"b", "c", "a", "b", "c", "a"}));
  // Shard 0 lost its backup c: only a and b are read.
  EXPECT_EQ(ReadersOf(table, KeyOfShard(0), 0, 4), (std::vector<std::string>{"a", "b", "a", "b"}));
  // Every key: as many consecutive turns as its shard has replicas, from
  // any start, read each replica exactly once.
  for (int i = 0; i < 200; ++i) {
    const std::string key = "key-" + std::to_string(i);
    std::multiset<std::string> replicas;
    for (const ReplicaEntry& r : table.ReplicasOf(key)) replicas.insert(r.server->server_id);
    for (const uint64_t first : {uint64_t{0}, static_cast<uint64_t>(i), uint64_t{1} << 40}) {
      const std::vector<std::string> read = ReadersOf(table, key, first, static_cast<int>(replicas.size()));
      EXPECT_EQ(std::multiset<std::string>(read.begin(), read.end()), replicas) << key << " from turn " << first;
    }
  }
}

TEST(RoutingTableTest, AnyReplicaReadsNeverGoToAServerCatchingUp) {
  v1::ClusterMap map = ReplicatedMap(7);
  // c catches up on shard 0 (listed in syncing_ids, not server_ids).
  map.mutable_shard_replicas(0)->add_syncing_ids("c");
  map.mutable_servers(2)->add_syncing_shards(0);  // c
  auto t = RoutingTable::Build(map);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<std::string> read = ReadersOf(**t, KeyOfShard(0), 0, 50);
  EXPECT_EQ(std::set<std::string>(read.begin(), read.end()), (std::set<std::string>{"a", "b"}));
}

TEST(RoutingTableTest, AnyReplicaReadsSkipDownReplicasAndFallBackToThePrimary) {
  v1::ClusterMap map = ReplicatedMap(7);
  map.mutable_servers(2)->set_state(v1::DOWN);  // c
  auto t = RoutingTable::Build(map);
  ASSERT_TRUE(t.ok()) << t.status();
  // Shard 4 (b, c, a) reads b and a; shard 5 (c, a, b), whose primary is
  // DOWN, reads its backups a and b.
  EXPECT_EQ(ReadersOf(**t, KeyOfShard(4), 0, 4), (std::vector<std::string>{"b", "a", "b", "a"}));
  EXPECT_EQ(ReadersOf(**t, KeyOfShard(5), 0, 4), (std::vector<std::string>{"a", "b", "a", "b"}));
  // With every replica DOWN the primary is named, whose DOWN state the
  // call then meets like any call.
  for (int i = 0; i < 3; ++i) map.mutable_servers(i)->set_state(v1::DOWN);
  t = RoutingTable::Build(map);
  ASSERT_TRUE(t.ok()) << t.status();
  for (uint32_t shard = 0; shard < 12; ++shard) {
    const std::string key = KeyOfShard(shard);
    EXPECT_EQ(ReadersOf(**t, key, 0, 3), std::vector<std::string>(3, (*t)->OwnerOf(key).server_id)) << key;
  }
}

TEST(RoutingTableTest, AnyReplicaReadsWithoutBackupsGoToTheOwner) {
  auto t = RoutingTable::Build(ThreeServerMap(5));  // R = 1
  ASSERT_TRUE(t.ok()) << t.status();
  for (int i = 0; i < 100; ++i) {
    const std::string key = "key-" + std::to_string(i);
    EXPECT_EQ(ReadersOf(**t, key, static_cast<uint64_t>(i), 3),
              std::vector<std::string>(3, (*t)->OwnerOf(key).server_id))
        << key;
  }
  const auto single = RoutingTable::ForServer("127.0.0.1:7700", "tcp");
  EXPECT_EQ(ReadersOf(*single, "any", 5, 2), std::vector<std::string>(2, "127.0.0.1:7700"));
}

TEST(RoutingTableTest, AMapOlderThanReplicationHasTheOwnerAlone) {
  auto t = RoutingTable::Build(ThreeServerMap(5));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->replication_factor(), 1u);
  for (uint32_t s = 0; s < 12; ++s) {
    const auto r = (*t)->ReplicasOfShard(s);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].server, &(*t)->OwnerOfShard(s));
    EXPECT_EQ(r[0].role, ReplicaRole::kPrimary);
  }
  const auto single = RoutingTable::ForServer("127.0.0.1:7700", "tcp");
  EXPECT_EQ(single->replication_factor(), 1u);
  EXPECT_EQ(Ids(single->ReplicasOf("any")), std::vector<std::string>{"127.0.0.1:7700"});
}

TEST(RoutingTableTest, RejectsMalformedReplicaSets) {
  v1::ClusterMap map = ReplicatedMap(7);
  map.mutable_shard_replicas(3)->set_server_ids(1, "zz");
  EXPECT_EQ(RoutingTable::Build(map).status().code(), StatusCode::kInvalidArgument);
}

TEST(RoutingTableTest, FindsServersByIdAndDescribesThem) {
  auto t = RoutingTable::Build(ThreeServerMap(5));
  ASSERT_TRUE(t.ok()) << t.status();
  const ServerEntry* c = (*t)->Find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Describe(), "server c (epoch 12, 127.0.0.1:7002)");
  EXPECT_EQ(c->admin_address, "127.0.0.1:8002");
  EXPECT_TRUE(c->up);
  EXPECT_EQ(c->state, "UP");
  EXPECT_EQ((*t)->Find("d"), nullptr);
  EXPECT_EQ((*t)->min_max_key_bytes(), 1024u);
  EXPECT_EQ((*t)->min_max_value_bytes(), 4096u);
}

TEST(RoutingTableTest, LimitsAreTheSmallestOverTheServers) {
  v1::ClusterMap map = ThreeServerMap(5);
  map.mutable_servers(1)->mutable_table()->set_max_key_bytes(100);
  map.mutable_servers(2)->mutable_table()->set_max_value_bytes(200);
  auto t = RoutingTable::Build(map);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->min_max_key_bytes(), 100u);
  EXPECT_EQ((*t)->min_max_value_bytes(), 200u);
}

TEST(RoutingTableTest, DownServersKeepTheirShards) {
  v1::ClusterMap map = ThreeServerMap(6);
  map.mutable_servers(1)->set_state(v1::DOWN);
  map.mutable_servers(1)->set_down_since_unix_ms(1'764'000'000'000);
  auto t = RoutingTable::Build(map);
  ASSERT_TRUE(t.ok()) << t.status();
  const ServerEntry& owner = (*t)->OwnerOfShard(1);
  EXPECT_EQ(owner.server_id, "b");
  EXPECT_FALSE(owner.up);
  EXPECT_EQ(owner.state, "DOWN");
  EXPECT_EQ(owner.down_since_unix_ms, 1'764'000'000'000u);
  EXPECT_TRUE((*t)->OwnerOfShard(0).up);
  EXPECT_EQ((*t)->OwnerOfShard(0).down_since_unix_ms, 0u);
}

TEST(RoutingTableTest, AnIncompleteClusterIsUnavailableWithItsSize) {
  v1::ClusterMap map;
  map.set_version(2);
  map.set_shard_count(12);
  map.set_expected_servers(3);
  AddServer(&map, "a", 1, 7000);
  AddServer(&map, "b", 1, 7001);
  auto t = RoutingTable::Build(map);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(t.status().message().find("cluster has 2 of 3 servers"), std::string::npos) << t.status();
}

TEST(RoutingTableTest, RejectsMalformedMaps) {
  {
    v1::ClusterMap map = ThreeServerMap(5);
    map.set_shard_owner(3, "zz");  // not a listed server
    auto t = RoutingTable::Build(map);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  }
  {
    v1::ClusterMap map = ThreeServerMap(5);
    map.mutable_servers(0)->set_data_address("no port");
    EXPECT_EQ(RoutingTable::Build(map).status().code(), StatusCode::kInvalidArgument);
  }
  {
    v1::ClusterMap map = ThreeServerMap(5);
    map.mutable_servers(2)->set_server_id("a");  // duplicate id
    EXPECT_EQ(RoutingTable::Build(map).status().code(), StatusCode::kInvalidArgument);
  }
  {
    v1::ClusterMap map = ThreeServerMap(5);
    map.set_shard_count(0);
    EXPECT_EQ(RoutingTable::Build(map).status().code(), StatusCode::kInvalidArgument);
  }
  {
    v1::ClusterMap map = ThreeServerMap(5);
    map.mutable_servers(0)->set_state(v1::SERVER_STATE_UNSPECIFIED);
    EXPECT_EQ(RoutingTable::Build(map).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(RoutingTableTest, OneServerGivenByItsAddressOwnsEveryKey) {
  const auto table = RoutingTable::ForServer("10.0.0.5:7700", "verbs");
  EXPECT_EQ(table->version(), 0u);
  EXPECT_EQ(table->shard_count(), 1u);
  ASSERT_EQ(table->servers().size(), 1u);
  const ServerEntry& e = table->servers()[0];
  EXPECT_EQ(e.server_id, "10.0.0.5:7700");
  EXPECT_EQ(e.data_address, "10.0.0.5:7700");
  EXPECT_EQ(e.transport, "verbs");
  EXPECT_TRUE(e.up);
  EXPECT_EQ(e.state, "UP");
  // No incarnation is pinned: a restarted server is the same server.
  EXPECT_FALSE(e.pins_epoch());
  // Limits come from the connections, not from the table.
  EXPECT_EQ(table->min_max_key_bytes(), 0u);
  EXPECT_EQ(table->min_max_value_bytes(), 0u);
  for (const std::string& key : std::vector<std::string>{"a", "user:42", std::string(1024, 'k')}) {
    EXPECT_EQ(table->OwnerIndexOf(key), 0u) << key;
    EXPECT_EQ(&table->OwnerOf(key), &e) << key;
  }
  EXPECT_EQ(table->Find("10.0.0.5:7700"), &e);
  EXPECT_EQ(table->Find("10.0.0.5:7701"), nullptr);

  // A coordinator's map pins every server's incarnation.
  auto map = RoutingTable::Build(ThreeServerMap(5));
  ASSERT_TRUE(map.ok());
  for (const ServerEntry& s : (*map)->servers()) EXPECT_TRUE(s.pins_epoch()) << s.server_id;
}

TEST(EpochTest, ComparesTheServersEpochWithTheMaps) {
  EXPECT_EQ(CompareEpoch(5, 5), EpochRelation::kMatch);
  EXPECT_EQ(CompareEpoch(5, 6), EpochRelation::kServerNewer);
  EXPECT_EQ(CompareEpoch(5, 4), EpochRelation::kServerOlder);
  EXPECT_EQ(CompareEpoch(0, UINT64_MAX), EpochRelation::kServerNewer);
}

TEST(MapHolderTest, InstallsOnlyNewerVersionsAndSwapsWholeTables) {
  MapHolder holder;
  EXPECT_EQ(holder.Current(), nullptr);
  EXPECT_FALSE(holder.InstallIfNewer(nullptr));
  EXPECT_EQ(holder.generation(), 0u);

  auto v5 = RoutingTable::Build(ThreeServerMap(5));
  ASSERT_TRUE(v5.ok());
  EXPECT_TRUE(holder.InstallIfNewer(*v5));
  EXPECT_EQ(holder.generation(), 1u);
  const auto held = holder.Current();
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->version(), 5u);

  // Server b restarts: new epoch and address in version 7.
  v1::ClusterMap next = ThreeServerMap(7);
  next.mutable_servers(1)->set_epoch(99);
  next.mutable_servers(1)->set_data_address("127.0.0.1:7555");
  auto v7 = RoutingTable::Build(next);
  ASSERT_TRUE(v7.ok());
  auto v6 = RoutingTable::Build(ThreeServerMap(6));
  ASSERT_TRUE(v6.ok());
  auto v7_again = RoutingTable::Build(ThreeServerMap(7));
  ASSERT_TRUE(v7_again.ok());

  EXPECT_TRUE(holder.InstallIfNewer(*v7));
  EXPECT_FALSE(holder.InstallIfNewer(*v6));        // older
  EXPECT_FALSE(holder.InstallIfNewer(*v7_again));  // same version
  EXPECT_EQ(holder.generation(), 2u);              // only installs count
  const auto now = holder.Current();
  EXPECT_EQ(now->version(), 7u);
  EXPECT_EQ(now->Find("b")->epoch, 99u);
  EXPECT_EQ(now->Find("b")->data_address, "127.0.0.1:7555");
  // A reader that took the old table still sees it whole.
  EXPECT_EQ(held->version(), 5u);
  EXPECT_EQ(held->Find("b")->epoch, 11u);
  EXPECT_EQ(held->Find("b")->data_address, "127.0.0.1:7001");
}

}  // namespace
}  // namespace rkv::client
