// CoordinatorState tests: Persistence: reopening the store, refusing another shape, and what
// contradictory records are.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "coordinator/coordinator_state.h"
#include "coordinator/coordinator_state_test_fixture.h"
#include "proto/validation.h"

namespace rkv::coordinator {
namespace {

TEST(CoordinatorPersistenceTest, ReopeningTheSameRocksDbGivesTheSameMap) {
  TempDir dir;
  FakeClock clock;
  v1::ClusterMap before;
  {
    auto store = OpenRocksDbStateStore(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    auto state = CoordinatorState::Open(Config(3, 16), std::move(store).value(), clock.AsClock());
    ASSERT_TRUE(state.ok()) << state.status();
    for (uint32_t i = 0; i < 3; ++i) {
      ASSERT_TRUE((*state)->Join(MakeJoin("s" + std::to_string(i), 3, i)).ok());
    }
    ASSERT_TRUE((*state)->Join(MakeJoin("s1", 4, 7)).ok());  // a restart
    v1::LeaveRequest leave;
    leave.set_server_id("s2");
    leave.set_epoch(3);
    ASSERT_TRUE((*state)->Leave(leave).ok());
    before = (*state)->Map();
    // A second coordinator on the same dir is refused while this one runs.
    EXPECT_EQ(OpenRocksDbStateStore(dir.path()).status().code(), StatusCode::kFailedPrecondition);
  }
  // The coordinator was down far longer than the heartbeat timeout.
  clock.Advance(milliseconds(60'000));
  auto store = OpenRocksDbStateStore(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  auto state = CoordinatorState::Open(Config(3, 16), std::move(store).value(), clock.AsClock());
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ((*state)->Map().SerializeAsString(), before.SerializeAsString())
      << (*state)->Map().ShortDebugString() << "\nvs\n" << before.ShortDebugString();
  EXPECT_EQ((*state)->version(), 5u);
  // Deadlines restart at load: nobody is DOWN merely because we were away.
  EXPECT_EQ(*(*state)->ExpireHeartbeats(), 0);
  clock.Advance(milliseconds(3001));
  EXPECT_EQ(*(*state)->ExpireHeartbeats(), 2);  // s0 and s1 (s2 already DOWN)
  // The reloaded state keeps working: a restart of s2 gets its shards back.
  auto s2 = (*state)->Join(MakeJoin("s2", 4, 2));
  ASSERT_TRUE(s2.ok()) << s2.status();
  EXPECT_EQ(s2->shards_size(), 5);  // 2, 5, 8, 11, 14
}

TEST(CoordinatorPersistenceTest, ReopeningWithAnotherShapeIsRefused) {
  TempDir dir;
  {
    auto state = CoordinatorState::Open(Config(2, 8), std::move(OpenRocksDbStateStore(dir.path())).value());
    ASSERT_TRUE(state.ok());
    ASSERT_TRUE((*state)->Join(MakeJoin("a", 1, 0)).ok());
  }
  auto other_shards = CoordinatorState::Open(Config(2, 16), std::move(OpenRocksDbStateStore(dir.path())).value());
  EXPECT_EQ(other_shards.status().code(), StatusCode::kFailedPrecondition);
  auto other_size = CoordinatorState::Open(Config(3, 8), std::move(OpenRocksDbStateStore(dir.path())).value());
  EXPECT_EQ(other_size.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other_size.status().message().find("fewer than --servers 3"), std::string::npos);
  auto same = CoordinatorState::Open(Config(2, 8), std::move(OpenRocksDbStateStore(dir.path())).value());
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ((*same)->Map().servers_size(), 1);
}

TEST(CoordinatorPersistenceTest, InconsistentRecordsAreDataLoss) {
  auto data = std::make_shared<MemoryStoreData>();
  {
    auto state = CoordinatorState::Open(Config(2, 4), std::make_unique<MemoryStore>(data));
    ASSERT_TRUE((*state)->Join(MakeJoin("a", 1, 0)).ok());
    ASSERT_TRUE((*state)->Join(MakeJoin("b", 1, 1)).ok());
  }
  data->EditServer("b", [](auto& b) { b.mutable_info()->add_shards(0); });  // shard 0 owned twice
  EXPECT_EQ(CoordinatorState::Open(Config(2, 4), std::make_unique<MemoryStore>(data)).status().code(),
            StatusCode::kDataLoss);
  data->EditServer("b", [](auto& b) {
    b.mutable_info()->mutable_shards()->RemoveLast();
    b.set_join_order(0);  // two servers first
  });
  EXPECT_EQ(CoordinatorState::Open(Config(2, 4), std::make_unique<MemoryStore>(data)).status().code(),
            StatusCode::kDataLoss);
  data->EditServer("b", [](auto& b) { b.set_join_order(1); });
  EXPECT_TRUE(CoordinatorState::Open(Config(2, 4), std::make_unique<MemoryStore>(data)).ok());
}

TEST(CoordinatorPersistenceTest, ReplicaSetsSurviveAReopen) {
  TempDir dir;
  v1::ClusterMap before;
  {
    auto state = CoordinatorState::Open(Config(3, 12, 3), std::move(OpenRocksDbStateStore(dir.path())).value());
    ASSERT_TRUE(state.ok()) << state.status();
    JoinAll(**state, {"z1", "z2", "z3"});
    ASSERT_TRUE((*state)->ReportReplicaFailure(Report("s1", 1, "s0", {1, 4})).ok());
    before = (*state)->Map();
    EXPECT_EQ(Replicas(before, 1), (std::vector<std::string>{"s1", "s2"}));
  }
  auto state = CoordinatorState::Open(Config(3, 12, 3), std::move(OpenRocksDbStateStore(dir.path())).value());
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ((*state)->Map().SerializeAsString(), before.SerializeAsString())
      << (*state)->Map().ShortDebugString() << "\nvs\n" << before.ShortDebugString();
}

TEST(CoordinatorPersistenceTest, ReopeningWithAnotherReplicationFactorIsRefused) {
  TempDir dir;
  {
    auto state = CoordinatorState::Open(Config(3, 8, 2), std::move(OpenRocksDbStateStore(dir.path())).value());
    ASSERT_TRUE(state.ok());
    ASSERT_TRUE((*state)->Join(MakeJoin("a", 1, 0)).ok());
  }
  auto other = CoordinatorState::Open(Config(3, 8, 3), std::move(OpenRocksDbStateStore(dir.path())).value());
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("2 replicas"), std::string::npos) << other.status();
  EXPECT_NE(other.status().message().find("--replicas 3"), std::string::npos) << other.status();
  // The default (3 for three servers) is another R as well.
  EXPECT_EQ(CoordinatorState::Open(Config(3, 8), std::move(OpenRocksDbStateStore(dir.path())).value()).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(CoordinatorState::Open(Config(3, 8, 2), std::move(OpenRocksDbStateStore(dir.path())).value()).ok());
}

TEST(CoordinatorPersistenceTest, AStoreOlderThanReplicationHasOneReplica) {
  auto data = std::make_shared<MemoryStoreData>();
  {
    auto state = CoordinatorState::Open(Config(2, 4, 1), std::make_unique<MemoryStore>(data));
    ASSERT_TRUE(state.ok());
    ASSERT_TRUE((*state)->Join(MakeJoin("a", 1, 0)).ok());
    ASSERT_TRUE((*state)->Join(MakeJoin("b", 1, 1)).ok());
  }
  data->EditMeta([](auto& meta) { meta.clear_replication_factor(); });
  auto two = CoordinatorState::Open(Config(2, 4), std::make_unique<MemoryStore>(data));
  EXPECT_EQ(two.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(two.status().message().find("1 replicas per shard, not --replicas 2"), std::string::npos) << two.status();
  auto one = CoordinatorState::Open(Config(2, 4, 1), std::make_unique<MemoryStore>(data));
  ASSERT_TRUE(one.ok()) << one.status();
  const v1::ClusterMap map = (*one)->Map();
  EXPECT_EQ(map.replication_factor(), 1u);
  EXPECT_EQ(Replicas(map, 3), std::vector<std::string>{"b"});
}

TEST(CoordinatorPersistenceTest, ContradictoryReplicaRecordsAreDataLoss) {
  auto data = std::make_shared<MemoryStoreData>();
  {
    auto state = CoordinatorState::Open(Config(3, 6, 2), std::make_unique<MemoryStore>(data));
    JoinAll(**state, {"", "", ""});
  }
  auto open = [&] { return CoordinatorState::Open(Config(3, 6, 2), std::make_unique<MemoryStore>(data)).status(); };
  ASSERT_TRUE(open().ok());
  // s0 backs up its own shard 0.
  data->EditServer("s0", [](auto& s) { s.mutable_info()->mutable_backup_shards()->Add(0); });
  EXPECT_EQ(open().code(), StatusCode::kDataLoss);
  data->EditServer("s0", [](auto& s) { s.mutable_info()->mutable_backup_shards()->RemoveLast(); });
  ASSERT_TRUE(open().ok());
  // s0 both backs up and syncs the same shard.
  data->EditServer("s0", [](auto& s) { s.mutable_info()->add_syncing_shards(s.info().backup_shards(0)); });
  EXPECT_EQ(open().code(), StatusCode::kDataLoss);
  data->EditServer("s0", [](auto& s) { s.mutable_info()->clear_syncing_shards(); });
  ASSERT_TRUE(open().ok());
  // s0 hands over shard 0, which it is the primary of (not a backup).
  data->EditServer("s0", [](auto& s) { s.add_handover_shards(0); });
  EXPECT_EQ(open().code(), StatusCode::kDataLoss);
  data->EditServer("s0", [](auto& s) { s.clear_handover_shards(); });
  ASSERT_TRUE(open().ok());
  // A backup shard past the shard count.
  data->EditServer("s0", [](auto& s) {
    s.mutable_info()->clear_backup_shards();
    s.mutable_info()->add_backup_shards(2);
    s.mutable_info()->add_backup_shards(99);
  });
  EXPECT_EQ(open().code(), StatusCode::kDataLoss);
}

TEST(CoordinatorPersistenceTest, APromotedMapSurvivesAReopen) {
  TempDir dir;
  FakeClock clock;
  v1::ClusterMap before;
  {
    auto state = CoordinatorState::Open(Config(3, 12, 3), std::move(OpenRocksDbStateStore(dir.path())).value(),
                                        clock.AsClock());
    ASSERT_TRUE(state.ok()) << state.status();
    JoinAll(**state, {"z1", "z2", "z3"});
    v1::LeaveRequest leave;
    leave.set_server_id("s2");
    leave.set_epoch(1);
    ASSERT_TRUE((*state)->Leave(leave).ok());
    clock.Advance(FenceWait((*state)->config().lease));
    EXPECT_EQ(*(*state)->PromoteFenced(), 4);
    before = (*state)->Map();
    EXPECT_TRUE(control::ValidateClusterMap(before).ok()) << control::ValidateClusterMap(before);
  }
  auto state = CoordinatorState::Open(Config(3, 12, 3), std::move(OpenRocksDbStateStore(dir.path())).value(),
                                      clock.AsClock());
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ((*state)->Map().SerializeAsString(), before.SerializeAsString())
      << (*state)->Map().ShortDebugString() << "\nvs\n" << before.ShortDebugString();
  EXPECT_TRUE(Excluded(**state).empty());  // s2 owns nothing a backup could take
}

TEST(CoordinatorPersistenceTest, AForgottenServerIsGoneFromTheDataDir) {
  TempDir dir;
  FakeClock clock;
  v1::ClusterMap before;
  {
    auto state = CoordinatorState::Open(Config(2, 4), std::move(OpenRocksDbStateStore(dir.path())).value(),
                                        clock.AsClock(), clock.AsWallClock());
    ASSERT_TRUE(state.ok()) << state.status();
    // s2 and s3 are added to the complete cluster, with no role yet.
    JoinAll(**state, {"", "", "", ""});
    v1::LeaveRequest leave;
    leave.set_server_id("s2");
    leave.set_epoch(1);
    ASSERT_TRUE((*state)->Leave(leave).ok());
    v1::ForgetRequest forget;
    forget.set_server_id("s2");
    auto forgot = (*state)->Forget(forget);
    ASSERT_TRUE(forgot.ok()) << forgot.status();
    EXPECT_EQ(forgot->map_version(), 6u);  // 4 joins (2 before the assignment), a leave, the forget
    before = (*state)->Map();
  }
  auto state = CoordinatorState::Open(Config(2, 4), std::move(OpenRocksDbStateStore(dir.path())).value(),
                                      clock.AsClock(), clock.AsWallClock());
  ASSERT_TRUE(state.ok()) << state.status();
  const v1::ClusterMap map = (*state)->Map();
  EXPECT_EQ(map.SerializeAsString(), before.SerializeAsString())
      << map.ShortDebugString() << "\nvs\n" << before.ShortDebugString();
  ASSERT_EQ(map.servers_size(), 3);
  EXPECT_EQ(map.servers(2).server_id(), "s3");  // moved up in the join order
  EXPECT_EQ(map.expected_servers(), 3u);
  EXPECT_EQ(Find(map, "s2"), nullptr);
  // s3 restarts as it would have; s2 comes back as a fourth server.
  ASSERT_TRUE((*state)->Join(MakeJoin("s3", 2, 3)).ok());
  ASSERT_TRUE((*state)->Join(MakeJoin("s2", 1, 2)).ok());
  EXPECT_EQ((*state)->Map().servers(3).server_id(), "s2");
  EXPECT_EQ((*state)->Map().expected_servers(), 4u);
}

}  // namespace
}  // namespace rkv::coordinator
