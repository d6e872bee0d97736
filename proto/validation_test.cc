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

}  // namespace
}  // namespace rkv::control
