#include "proto/validation.h"

#include <gtest/gtest.h>

#include "common/layout.h"

namespace rkv::control {
namespace {

v1::JoinRequest GoodJoin(const std::string& id = "s-0001") {
  v1::JoinRequest r;
  r.set_server_id(id);
  r.set_epoch(7);
  r.set_data_address("127.0.0.1:7700");
  r.set_admin_address("localhost:7701");
  r.set_transport("tcp");
  r.mutable_table()->set_bucket_count_log2(4);
  r.mutable_table()->set_hash_seed(99);
  r.mutable_table()->set_heap_size(1 << 20);
  r.mutable_table()->set_max_key_bytes(1024);
  r.mutable_table()->set_max_value_bytes(4096);
  r.mutable_table()->set_grace_period_us(100'000);
  r.mutable_index()->set_addr(0x10000);
  r.mutable_index()->set_length(layout::IndexBytes(16));
  r.mutable_index()->set_rkey(1);
  r.mutable_heap()->set_addr(0x200000);
  r.mutable_heap()->set_length(1 << 20);
  r.mutable_heap()->set_rkey(2);
  return r;
}

TEST(ValidationTest, ServerIds) {
  EXPECT_TRUE(ValidateServerId("s-1a2b3c4d").ok());
  EXPECT_TRUE(ValidateServerId("node_7.rack-2").ok());
  EXPECT_FALSE(ValidateServerId("").ok());
  EXPECT_FALSE(ValidateServerId("-leading").ok());
  EXPECT_FALSE(ValidateServerId("has space").ok());
  EXPECT_FALSE(ValidateServerId("slash/inside").ok());
  EXPECT_FALSE(ValidateServerId(std::string("nul\0x", 5)).ok());
  EXPECT_TRUE(ValidateServerId(std::string(kMaxServerIdBytes, 'a')).ok());
  EXPECT_FALSE(ValidateServerId(std::string(kMaxServerIdBytes + 1, 'a')).ok());
}

TEST(ValidationTest, Addresses) {
  EXPECT_TRUE(ValidateHostPort("127.0.0.1:7600").ok());
  EXPECT_TRUE(ValidateHostPort("db-1.example:1").ok());
  EXPECT_TRUE(ValidateHostPort("[::1]:7600").ok());
  EXPECT_FALSE(ValidateHostPort("127.0.0.1:0").ok());
  EXPECT_TRUE(ValidateHostPort("127.0.0.1:0", /*allow_port_zero=*/true).ok());
  EXPECT_FALSE(ValidateHostPort("127.0.0.1").ok());
  EXPECT_FALSE(ValidateHostPort(":7600").ok());
  EXPECT_FALSE(ValidateHostPort("host:65536").ok());
  EXPECT_FALSE(ValidateHostPort("host:12x").ok());
  EXPECT_FALSE(ValidateHostPort("ho st:1").ok());
  EXPECT_FALSE(ValidateHostPort("[::1:1").ok());
  EXPECT_FALSE(ValidateHostPort("").ok());
  EXPECT_FALSE(ValidateHostPort(std::string(300, 'a') + ":1").ok());
}

TEST(ValidationTest, JoinRequestFields) {
  EXPECT_TRUE(ValidateJoinRequest(GoodJoin()).ok());
  auto refused = [](auto mutate) {
    v1::JoinRequest r = GoodJoin();
    mutate(r);
    const Status s = ValidateJoinRequest(r);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << r.ShortDebugString();
    return s.message();
  };
  refused([](auto& r) { r.set_server_id(""); });
  refused([](auto& r) { r.set_epoch(0); });
  EXPECT_NE(refused([](auto& r) { r.set_data_address("nowhere"); }).find("data_address"), std::string::npos);
  EXPECT_NE(refused([](auto& r) { r.set_admin_address("a:0"); }).find("admin_address"), std::string::npos);
  refused([](auto& r) { r.set_transport("udp"); });
  EXPECT_NE(refused([](auto& r) { r.mutable_index()->set_length(0); }).find("index.length"), std::string::npos);
  refused([](auto& r) { r.mutable_heap()->set_addr(~uint64_t{0}); });
  refused([](auto& r) { r.mutable_index()->set_length(layout::IndexBytes(16) - 1); });
  refused([](auto& r) { r.mutable_heap()->set_length((1 << 20) - 64); });
  refused([](auto& r) { r.mutable_table()->set_bucket_count_log2(kMaxBucketCountLog2 + 1); });
  refused([](auto& r) { r.mutable_table()->set_heap_size(0); });
  refused([](auto& r) { r.mutable_table()->set_heap_size(1000); });
  refused([](auto& r) { r.mutable_table()->set_max_key_bytes(0); });
  refused([](auto& r) { r.mutable_table()->set_max_key_bytes(70000); });
  refused([](auto& r) { r.mutable_table()->set_max_value_bytes(layout::kMaxValueBytesLimit + 1); });
  refused([](auto& r) { r.mutable_table()->set_grace_period_us(0); });
  refused([](auto& r) { r.mutable_table()->set_grace_period_us(kMaxGracePeriodUs + 1); });
}

v1::ClusterMap GoodMap() {
  v1::ClusterMap map;
  map.set_version(3);
  map.set_shard_count(4);
  map.set_expected_servers(2);
  for (const char* id : {"a", "b"}) {
    const v1::JoinRequest j = GoodJoin(id);
    v1::ServerInfo* s = map.add_servers();
    s->set_server_id(j.server_id());
    s->set_epoch(j.epoch());
    s->set_state(v1::UP);
    s->set_data_address(j.data_address());
    s->set_admin_address(j.admin_address());
    s->set_transport(j.transport());
    *s->mutable_index() = j.index();
    *s->mutable_heap() = j.heap();
    *s->mutable_table() = j.table();
  }
  for (uint32_t shard = 0; shard < 4; ++shard) {
    map.add_shard_owner(shard % 2 == 0 ? "a" : "b");
    map.mutable_servers(static_cast<int>(shard % 2))->add_shards(shard);
  }
  return map;
}

TEST(ValidationTest, ClusterMaps) {
  EXPECT_TRUE(ValidateClusterMap(GoodMap()).ok());
  v1::ClusterMap unassigned = GoodMap();
  unassigned.clear_shard_owner();
  for (auto& s : *unassigned.mutable_servers()) s.clear_shards();
  EXPECT_TRUE(ValidateClusterMap(unassigned).ok());

  auto refused = [](auto mutate) {
    v1::ClusterMap map = GoodMap();
    mutate(map);
    EXPECT_EQ(ValidateClusterMap(map).code(), StatusCode::kInvalidArgument) << map.ShortDebugString();
  };
  refused([](auto& m) { m.set_shard_count(0); });
  refused([](auto& m) { m.set_shard_count(kMaxShardCount + 1); });
  refused([](auto& m) { m.set_expected_servers(1); });                      // more servers than N
  refused([](auto& m) { m.mutable_servers(1)->set_server_id("a"); });      // duplicate id
  refused([](auto& m) { m.mutable_servers(0)->set_state(v1::SERVER_STATE_UNSPECIFIED); });
  refused([](auto& m) { m.set_shard_owner(1, "c"); });                     // unknown owner
  refused([](auto& m) { m.set_shard_owner(1, "a"); });                     // disagrees with b's shards
  refused([](auto& m) { m.mutable_shard_owner()->RemoveLast(); });         // too few owners
  refused([](auto& m) { m.mutable_servers(0)->add_shards(9); });           // owns a shard not named
  refused([](auto& m) { m.mutable_servers(0)->mutable_heap()->set_length(0); });
  refused([](auto& m) {  // shards without an assignment
    m.clear_shard_owner();
  });
}

// GoodMap with R = 2: shard s on its owner and the other server.
v1::ClusterMap ReplicatedMap() {
  v1::ClusterMap map = GoodMap();
  map.set_replication_factor(2);
  for (uint32_t shard = 0; shard < 4; ++shard) {
    v1::ShardReplicas* r = map.add_shard_replicas();
    r->add_server_ids(shard % 2 == 0 ? "a" : "b");
    r->add_server_ids(shard % 2 == 0 ? "b" : "a");
    map.mutable_servers(static_cast<int>((shard + 1) % 2))->add_backup_shards(shard);
  }
  return map;
}

TEST(ValidationTest, ReplicaSets) {
  EXPECT_TRUE(ValidateClusterMap(ReplicatedMap()).ok()) << ValidateClusterMap(ReplicatedMap());
  // A map from a coordinator older than replication: R 0, no lists.
  EXPECT_TRUE(ValidateClusterMap(GoodMap()).ok());
  EXPECT_EQ(EffectiveReplicationFactor(GoodMap()), 1u);
  EXPECT_EQ(EffectiveReplicationFactor(ReplicatedMap()), 2u);
  // Fewer replicas than R (a backup was taken out) is fine.
  v1::ClusterMap short_set = ReplicatedMap();
  short_set.mutable_shard_replicas(1)->mutable_server_ids()->RemoveLast();
  short_set.mutable_servers(0)->clear_backup_shards();
  short_set.mutable_servers(0)->add_backup_shards(3);
  EXPECT_TRUE(ValidateClusterMap(short_set).ok()) << ValidateClusterMap(short_set);
  // Unassigned, with R set: no lists yet.
  v1::ClusterMap unassigned = ReplicatedMap();
  unassigned.clear_shard_owner();
  unassigned.clear_shard_replicas();
  for (auto& s : *unassigned.mutable_servers()) {
    s.clear_shards();
    s.clear_backup_shards();
  }
  EXPECT_TRUE(ValidateClusterMap(unassigned).ok()) << ValidateClusterMap(unassigned);

  auto refused = [](auto mutate) {
    v1::ClusterMap map = ReplicatedMap();
    mutate(map);
    const Status s = ValidateClusterMap(map);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << map.ShortDebugString();
    return s.message();
  };
  refused([](auto& m) { m.set_replication_factor(6); });
  refused([](auto& m) { m.set_replication_factor(3); });  // above expected_servers 2
  EXPECT_NE(refused([](auto& m) { m.mutable_shard_replicas()->RemoveLast(); }).find("shard_replicas has 3"),
            std::string::npos);
  refused([](auto& m) { m.clear_shard_replicas(); });  // R 2 and assigned: lists required
  refused([](auto& m) { m.mutable_shard_replicas(0)->clear_server_ids(); });  // empty list
  EXPECT_NE(refused([](auto& m) {  // primary not first
              m.mutable_shard_replicas(0)->set_server_ids(0, "b");
              m.mutable_shard_replicas(0)->set_server_ids(1, "a");
            }).find("not the owner"),
            std::string::npos);
  EXPECT_NE(refused([](auto& m) { m.mutable_shard_replicas(0)->set_server_ids(1, "a"); }).find("twice"),
            std::string::npos);
  refused([](auto& m) { m.mutable_shard_replicas(0)->set_server_ids(1, "zz"); });  // unknown server
  refused([](auto& m) { m.mutable_shard_replicas(0)->add_server_ids("c"); });      // more than R
  refused([](auto& m) {  // 3 members with R 1: more than R plus R in flight
    m.set_replication_factor(1);
    m.mutable_shard_replicas(0)->add_syncing_ids("a");
  });
  refused([](auto& m) { m.mutable_servers(1)->clear_backup_shards(); });          // backup_shards disagree
  refused([](auto& m) { m.mutable_servers(1)->add_backup_shards(2); });           // a backup shard twice
  refused([](auto& m) {  // backup_shards out of order
    auto* b = m.mutable_servers(1)->mutable_backup_shards();
    std::swap(*b->Mutable(0), *b->Mutable(1));
  });
  refused([](auto& m) {  // R 0 with lists
    m.set_replication_factor(0);
  });
  refused([](auto& m) {  // R 0, no lists, but backup_shards
    m.set_replication_factor(0);
    m.clear_shard_replicas();
  });
  refused([](auto& m) {  // lists without an assignment
    m.clear_shard_owner();
    for (auto& s : *m.mutable_servers()) s.clear_shards();
  });
  refused([](auto& m) { m.mutable_servers(0)->set_zone(std::string(kMaxZoneBytes + 1, 'z')); });
  refused([](auto& m) { m.mutable_servers(0)->set_zone("new\nline"); });
}

// ReplicatedMap with a third server "c" catching up on shard 1 and "a"
// handing shard 2 over to "b" (the move of a primary, lists [b, a]).
v1::ClusterMap MapInFlight() {
  v1::ClusterMap map = ReplicatedMap();
  map.set_expected_servers(3);
  v1::JoinRequest c = GoodJoin("c");
  v1::ServerInfo* info = map.add_servers();
  info->set_server_id("c");
  info->set_epoch(c.epoch());
  info->set_state(v1::UP);
  info->set_data_address(c.data_address());
  info->set_admin_address(c.admin_address());
  info->set_transport(c.transport());
  *info->mutable_index() = c.index();
  *info->mutable_heap() = c.heap();
  *info->mutable_table() = c.table();
  info->add_syncing_shards(1);
  map.mutable_shard_replicas(1)->add_syncing_ids("c");
  // Shard 2: b primary, a handing over (a keeps it as a backup).
  map.set_shard_owner(2, "b");
  map.mutable_shard_replicas(2)->set_server_ids(0, "b");
  map.mutable_shard_replicas(2)->set_server_ids(1, "a");
  map.mutable_shard_replicas(2)->set_handover_from("a");
  auto set_shards = [](v1::ServerInfo* s, std::initializer_list<uint32_t> primary,
                       std::initializer_list<uint32_t> backup) {
    s->clear_shards();
    for (uint32_t x : primary) s->add_shards(x);
    s->clear_backup_shards();
    for (uint32_t x : backup) s->add_backup_shards(x);
  };
  set_shards(map.mutable_servers(0), {0}, {1, 2, 3});
  set_shards(map.mutable_servers(1), {1, 2, 3}, {0});
  return map;
}

TEST(ValidationTest, SyncingAndHandover) {
  EXPECT_TRUE(ValidateClusterMap(MapInFlight()).ok()) << ValidateClusterMap(MapInFlight());
  // Up to 2R members while roles are in flight.
  v1::ClusterMap full = MapInFlight();
  full.mutable_shard_replicas(1)->add_server_ids("c");
  full.mutable_shard_replicas(1)->clear_syncing_ids();
  full.mutable_servers(2)->clear_syncing_shards();
  full.mutable_servers(2)->add_backup_shards(1);
  full.mutable_shard_replicas(0)->add_syncing_ids("c");  // shard 0: a, b and c syncing
  full.mutable_servers(2)->add_syncing_shards(0);
  EXPECT_TRUE(ValidateClusterMap(full).ok()) << ValidateClusterMap(full);

  auto refused = [](auto mutate) {
    v1::ClusterMap map = MapInFlight();
    mutate(map);
    const Status s = ValidateClusterMap(map);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << map.ShortDebugString();
    return s.message();
  };
  EXPECT_NE(refused([](auto& m) { m.mutable_shard_replicas(1)->add_syncing_ids("b"); }).find("twice"),
            std::string::npos);  // a replica syncing as well
  EXPECT_NE(refused([](auto& m) { m.mutable_shard_replicas(1)->add_syncing_ids("c"); }).find("twice"),
            std::string::npos);
  refused([](auto& m) { m.mutable_shard_replicas(1)->set_syncing_ids(0, "zz"); });  // unknown server
  EXPECT_NE(refused([](auto& m) { m.mutable_servers(2)->clear_syncing_shards(); }).find("syncing_shards"),
            std::string::npos);
  refused([](auto& m) { m.mutable_servers(2)->add_syncing_shards(3); });  // not in shard 3's syncing_ids
  EXPECT_NE(refused([](auto& m) { m.set_replication_factor(1); }).find("in all"),
            std::string::npos);  // shard 1: 3 members, more than R + R in flight
  EXPECT_NE(refused([](auto& m) { m.mutable_shard_replicas(2)->set_handover_from("b"); }).find("handover_from"),
            std::string::npos);  // the new primary itself
  refused([](auto& m) { m.mutable_shard_replicas(2)->set_handover_from("c"); });  // not a replica
  refused([](auto& m) { m.mutable_shard_replicas(2)->set_handover_from("zz"); });
  refused([](auto& m) {  // syncing_shards in a map without replication
    m.set_replication_factor(0);
    m.clear_shard_replicas();
    for (auto& s : *m.mutable_servers()) s.clear_backup_shards();
  });
}

TEST(ValidationTest, ReportCaughtUpAndDrainRequests) {
  v1::ReportCaughtUpRequest good;
  good.set_server_id("a");
  good.set_epoch(3);
  v1::CaughtUpShard* c = good.add_shards();
  c->set_shard(kMaxShardCount - 1);
  c->set_primary_id("b");
  EXPECT_TRUE(ValidateReportCaughtUp(good).ok());
  auto refused = [&](auto mutate) {
    v1::ReportCaughtUpRequest r = good;
    mutate(r);
    EXPECT_EQ(ValidateReportCaughtUp(r).code(), StatusCode::kInvalidArgument) << r.ShortDebugString();
  };
  refused([](auto& r) { r.set_server_id("bad id"); });
  refused([](auto& r) { r.set_epoch(0); });
  refused([](auto& r) { r.clear_shards(); });
  refused([](auto& r) { r.mutable_shards(0)->set_shard(kMaxShardCount); });
  refused([](auto& r) { r.mutable_shards(0)->set_primary_id(""); });
  refused([](auto& r) { r.mutable_shards(0)->set_primary_id(std::string(kMaxServerIdBytes + 1, 'p')); });
  refused([](auto& r) {
    for (uint32_t i = 0; i < kMaxShardCount; ++i) *r.add_shards() = r.shards(0);
  });

  v1::DrainRequest drain;
  drain.set_server_id("s-1");
  EXPECT_TRUE(ValidateDrain(drain).ok());
  drain.set_server_id("");
  EXPECT_EQ(ValidateDrain(drain).code(), StatusCode::kInvalidArgument);
  drain.set_server_id("a\x01");
  EXPECT_EQ(ValidateDrain(drain).code(), StatusCode::kInvalidArgument);
}

TEST(ValidationTest, ForgetRequests) {
  v1::ForgetRequest forget;
  forget.set_server_id("s-1");
  EXPECT_TRUE(ValidateForget(forget).ok());
  forget.set_server_id(std::string(kMaxServerIdBytes, 'f'));
  EXPECT_TRUE(ValidateForget(forget).ok());
  for (const std::string& bad : {std::string(), std::string(kMaxServerIdBytes + 1, 'f'), std::string("a\x01"),
                                 std::string("-s"), std::string("s 1")}) {
    forget.set_server_id(bad);
    EXPECT_EQ(ValidateForget(forget).code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ValidationTest, Zones) {
  EXPECT_TRUE(ValidateZone("").ok());
  EXPECT_TRUE(ValidateZone("eu-west-1a / rack 7").ok());
  EXPECT_TRUE(ValidateZone(std::string(kMaxZoneBytes, '~')).ok());
  EXPECT_FALSE(ValidateZone(std::string(kMaxZoneBytes + 1, 'a')).ok());
  EXPECT_FALSE(ValidateZone("tab\there").ok());
  EXPECT_FALSE(ValidateZone("caf\xc3\xa9").ok());
  EXPECT_FALSE(ValidateZone(std::string("nul\0", 4)).ok());
  v1::JoinRequest j = GoodJoin();
  j.set_zone("z1");
  EXPECT_TRUE(ValidateJoinRequest(j).ok());
  j.set_zone("z\x7f");
  EXPECT_EQ(ValidateJoinRequest(j).code(), StatusCode::kInvalidArgument);
}

TEST(ValidationTest, ReportReplicaFailureRequests) {
  v1::ReportReplicaFailureRequest good;
  good.set_server_id("a");
  good.set_epoch(3);
  good.set_backup_id("b");
  good.add_shards(0);
  good.add_shards(kMaxShardCount - 1);
  good.set_reason(std::string(kMaxReasonBytes, 'r'));
  EXPECT_TRUE(ValidateReportReplicaFailure(good).ok());
  auto refused = [&](auto mutate) {
    v1::ReportReplicaFailureRequest r = good;
    mutate(r);
    EXPECT_EQ(ValidateReportReplicaFailure(r).code(), StatusCode::kInvalidArgument) << r.ShortDebugString();
  };
  refused([](auto& r) { r.set_server_id(""); });
  refused([](auto& r) { r.set_epoch(0); });
  refused([](auto& r) { r.set_backup_id(""); });
  refused([](auto& r) { r.set_backup_id("not/an/id"); });
  refused([](auto& r) { r.clear_shards(); });
  refused([](auto& r) { r.add_shards(kMaxShardCount); });
  refused([](auto& r) { r.set_reason(std::string(kMaxReasonBytes + 1, 'r')); });
  refused([](auto& r) { r.set_reason("line\nbreak"); });
}

}  // namespace
}  // namespace rkv::control
