#include "server/coordinator/coordinator_state.h"

#include <gtest/gtest.h>

#include <thread>

#include "proto/validation.h"
#include "server/coordinator/test_util.h"

namespace rkv::coordinator {
namespace {

using testing::FakeClock;
using testing::MakeJoin;
using testing::MemoryStore;
using testing::MemoryStoreData;
using testing::TempDir;
using std::chrono::milliseconds;

CoordinatorConfig Config(uint32_t servers = 3, uint32_t shards = 10) {
  CoordinatorConfig c;
  c.expected_servers = servers;
  c.shard_count = shards;
  c.heartbeat_interval = milliseconds(500);
  c.heartbeat_timeout = milliseconds(3000);
  return c;
}

class CoordinatorStateTest : public ::testing::Test {
 protected:
  std::unique_ptr<CoordinatorState> Open(const CoordinatorConfig& config = Config()) {
    auto state = CoordinatorState::Open(config, std::make_unique<MemoryStore>(data_), clock_.AsClock());
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? std::move(state).value() : nullptr;
  }

  v1::HeartbeatRequest Beat(const std::string& id, uint64_t epoch) {
    v1::HeartbeatRequest r;
    r.set_server_id(id);
    r.set_epoch(epoch);
    return r;
  }
  v1::LeaveRequest LeaveReq(const std::string& id, uint64_t epoch) {
    v1::LeaveRequest r;
    r.set_server_id(id);
    r.set_epoch(epoch);
    return r;
  }

  std::shared_ptr<MemoryStoreData> data_ = std::make_shared<MemoryStoreData>();
  FakeClock clock_;
};

const v1::ServerInfo* Find(const v1::ClusterMap& map, const std::string& id) {
  for (const auto& s : map.servers()) {
    if (s.server_id() == id) return &s;
  }
  return nullptr;
}

TEST_F(CoordinatorStateTest, AssignsEveryShardRoundRobinOnlyWhenTheNthServerJoins) {
  auto state = Open(Config(3, 10));
  auto a = state->Join(MakeJoin("a", 1, 0));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->shards().empty());
  auto b = state->Join(MakeJoin("b", 1, 1));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->shards().empty());
  v1::ClusterMap before = state->Map();
  EXPECT_EQ(before.shard_owner_size(), 0);
  EXPECT_EQ(before.servers_size(), 2);
  EXPECT_TRUE(control::ValidateClusterMap(before).ok());

  auto c = state->Join(MakeJoin("c", 1, 2));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(std::vector<uint32_t>(c->shards().begin(), c->shards().end()), (std::vector<uint32_t>{2, 5, 8}));
  EXPECT_EQ(c->heartbeat_interval_ms(), 500u);
  EXPECT_EQ(c->heartbeat_timeout_ms(), 3000u);

  const v1::ClusterMap map = state->Map();
  ASSERT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  ASSERT_EQ(map.shard_owner_size(), 10);
  const char* order[] = {"a", "b", "c"};
  for (int s = 0; s < 10; ++s) EXPECT_EQ(map.shard_owner(s), order[s % 3]) << "shard " << s;
  EXPECT_EQ(map.version(), 3u);
  EXPECT_EQ(map.expected_servers(), 3u);
  EXPECT_EQ(map.shard_count(), 10u);
  // The map carries what each server announced.
  const v1::ServerInfo* b_info = Find(map, "b");
  ASSERT_NE(b_info, nullptr);
  EXPECT_EQ(b_info->data_address(), "127.0.0.1:7701");
  EXPECT_EQ(b_info->index().rkey(), 11u);
  EXPECT_EQ(b_info->table().hash_seed(), 1235u);
  EXPECT_EQ(b_info->heap_bytes(), 1u << 20);
  EXPECT_EQ(b_info->state(), v1::UP);
}

TEST_F(CoordinatorStateTest, FullClusterIsRefusedWithTheReason) {
  auto state = Open(Config(2, 4));
  ASSERT_TRUE(state->Join(MakeJoin("a", 1, 0)).ok());
  ASSERT_TRUE(state->Join(MakeJoin("b", 1, 1)).ok());
  const uint64_t version = state->version();
  auto d = state->Join(MakeJoin("d", 1, 3));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(d.status().message(),
            "cluster is full: 2 of 2 servers joined; adding servers (rebalancing) is not supported yet");
  EXPECT_EQ(state->version(), version);
  EXPECT_EQ(Find(state->Map(), "d"), nullptr);
}

TEST_F(CoordinatorStateTest, RestartRejoinKeepsShardsWithTheNewEpochAndRegions) {
  auto state = Open(Config(2, 6));
  ASSERT_TRUE(state->Join(MakeJoin("a", 5, 0)).ok());
  ASSERT_TRUE(state->Join(MakeJoin("b", 5, 1)).ok());
  const v1::ClusterMap before = state->Map();
  ASSERT_TRUE(state->Leave(LeaveReq("a", 5)).ok());
  EXPECT_EQ(Find(state->Map(), "a")->state(), v1::DOWN);
  EXPECT_EQ(Find(state->Map(), "a")->shards_size(), 3);  // DOWN keeps its shards

  v1::JoinRequest restarted = MakeJoin("a", 6, 9);
  auto again = state->Join(restarted);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(std::vector<uint32_t>(again->shards().begin(), again->shards().end()),
            (std::vector<uint32_t>{0, 2, 4}));
  const v1::ClusterMap after = state->Map();
  const v1::ServerInfo* a = Find(after, "a");
  EXPECT_EQ(a->state(), v1::UP);
  EXPECT_EQ(a->epoch(), 6u);
  EXPECT_EQ(a->index().rkey(), restarted.index().rkey());
  EXPECT_EQ(a->heap().addr(), restarted.heap().addr());
  EXPECT_EQ(a->data_address(), restarted.data_address());
  // Same owners as before, for every shard; join order unchanged.
  EXPECT_EQ(std::vector<std::string>(after.shard_owner().begin(), after.shard_owner().end()),
            std::vector<std::string>(before.shard_owner().begin(), before.shard_owner().end()));
  EXPECT_EQ(after.servers(0).server_id(), "a");
  // An UP server restarting (no Leave, e.g. a crash) is also welcome.
  ASSERT_TRUE(state->Join(MakeJoin("b", 9, 1)).ok());
  EXPECT_EQ(Find(state->Map(), "b")->epoch(), 9u);
  EXPECT_EQ(Find(state->Map(), "b")->shards_size(), 3);
}

TEST_F(CoordinatorStateTest, StaleOrConflictingEpochsAreRefused) {
  auto state = Open(Config(2, 4));
  ASSERT_TRUE(state->Join(MakeJoin("a", 7, 0)).ok());
  const uint64_t version = state->version();

  auto older = state->Join(MakeJoin("a", 6, 0));
  EXPECT_EQ(older.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(older.status().message().find("stale"), std::string::npos) << older.status();
  // The same epoch must be the same process.
  EXPECT_EQ(state->Join(MakeJoin("a", 7, 3)).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(state->Heartbeat(Beat("a", 6)).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(state->Heartbeat(Beat("a", 8)).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(state->Leave(LeaveReq("a", 6)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(state->version(), version);
  EXPECT_EQ(Find(state->Map(), "a")->epoch(), 7u);

  // A retried Join (lost reply) is idempotent: no new version.
  auto retry = state->Join(MakeJoin("a", 7, 0));
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_EQ(retry->map_version(), version);
  EXPECT_EQ(state->version(), version);
}

TEST_F(CoordinatorStateTest, HeartbeatsFromUnknownOrDownServersAskForARejoin) {
  auto state = Open(Config(2, 4));
  EXPECT_EQ(state->Heartbeat(Beat("ghost", 1)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(state->Leave(LeaveReq("ghost", 1)).code(), StatusCode::kNotFound);
  ASSERT_TRUE(state->Join(MakeJoin("a", 1, 0)).ok());
  ASSERT_TRUE(state->Leave(LeaveReq("a", 1)).ok());
  EXPECT_TRUE(state->Leave(LeaveReq("a", 1)).ok());  // already DOWN: fine
  EXPECT_EQ(state->Heartbeat(Beat("a", 1)).status().code(), StatusCode::kFailedPrecondition);
  // Rejoining with the same epoch and content brings it back.
  ASSERT_TRUE(state->Join(MakeJoin("a", 1, 0)).ok());
  EXPECT_EQ(Find(state->Map(), "a")->state(), v1::UP);
  EXPECT_TRUE(state->Heartbeat(Beat("a", 1)).ok());
}

TEST_F(CoordinatorStateTest, MissedHeartbeatDeadlineMarksDown) {
  auto state = Open(Config(2, 4));
  ASSERT_TRUE(state->Join(MakeJoin("a", 1, 0)).ok());
  ASSERT_TRUE(state->Join(MakeJoin("b", 1, 1)).ok());
  const uint64_t v0 = state->version();

  clock_.Advance(milliseconds(2000));
  auto beat = Beat("b", 1);
  beat.set_keys(42);
  beat.set_heap_bytes_used(4096);
  auto hb = state->Heartbeat(beat);
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(hb->map_version(), v0);
  EXPECT_EQ(state->version(), v0);  // heartbeats never bump the version
  EXPECT_EQ(Find(state->Map(), "b")->keys(), 42u);
  EXPECT_EQ(Find(state->Map(), "b")->heap_bytes_used(), 4096u);

  clock_.Advance(milliseconds(1000));  // a: exactly at its deadline, still UP
  auto none = state->ExpireHeartbeats();
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);

  clock_.Advance(milliseconds(1));  // a: past it; b heard from 1001 ms ago
  auto one = state->ExpireHeartbeats();
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, 1);
  EXPECT_EQ(Find(state->Map(), "a")->state(), v1::DOWN);
  EXPECT_EQ(Find(state->Map(), "b")->state(), v1::UP);
  EXPECT_EQ(state->version(), v0 + 1);
  EXPECT_EQ(state->Heartbeat(Beat("a", 1)).status().code(), StatusCode::kFailedPrecondition);

  clock_.Advance(milliseconds(5000));
  EXPECT_EQ(*state->ExpireHeartbeats(), 1);  // b now; a is not counted twice
  EXPECT_EQ(state->version(), v0 + 2);
  EXPECT_EQ(*state->ExpireHeartbeats(), 0);
}

TEST_F(CoordinatorStateTest, VersionBumpsOncePerChange) {
  auto state = Open(Config(2, 4));
  EXPECT_EQ(state->version(), 0u);
  ASSERT_TRUE(state->Join(MakeJoin("a", 1, 0)).ok());
  EXPECT_EQ(state->version(), 1u);
  ASSERT_TRUE(state->Join(MakeJoin("b", 1, 1)).ok());  // join + assignment: one change
  EXPECT_EQ(state->version(), 2u);
  ASSERT_TRUE(state->Leave(LeaveReq("a", 1)).ok());
  EXPECT_EQ(state->version(), 3u);
  ASSERT_TRUE(state->Join(MakeJoin("a", 2, 0)).ok());
  EXPECT_EQ(state->version(), 4u);
  clock_.Advance(milliseconds(3001));
  EXPECT_EQ(*state->ExpireHeartbeats(), 2);
  EXPECT_EQ(state->version(), 6u);
  EXPECT_EQ(data_->commits(), 6);  // every change was committed
}

TEST_F(CoordinatorStateTest, AFailedCommitChangesNothing) {
  auto state = Open(Config(2, 4));
  ASSERT_TRUE(state->Join(MakeJoin("a", 1, 0)).ok());
  const v1::ClusterMap before = state->Map();

  data_->SetFailing(true);
  auto b = state->Join(MakeJoin("b", 1, 1));  // would assign every shard
  EXPECT_EQ(b.status().code(), StatusCode::kInternal);
  EXPECT_EQ(state->Leave(LeaveReq("a", 1)).code(), StatusCode::kInternal);
  clock_.Advance(milliseconds(5000));
  EXPECT_EQ(state->ExpireHeartbeats().status().code(), StatusCode::kInternal);
  EXPECT_EQ(state->Map().SerializeAsString(), before.SerializeAsString());

  data_->SetFailing(false);
  ASSERT_TRUE(state->Join(MakeJoin("b", 1, 1)).ok());
  EXPECT_EQ(state->Map().shard_owner_size(), 4);
  EXPECT_EQ(state->version(), before.version() + 1);
}

TEST_F(CoordinatorStateTest, BadRequestsAreRefused) {
  auto state = Open(Config(2, 4));
  v1::JoinRequest bad = MakeJoin("a", 1, 0);
  bad.set_data_address("no-port");
  EXPECT_EQ(state->Join(bad).status().code(), StatusCode::kInvalidArgument);
  bad = MakeJoin("a b", 1, 0);
  EXPECT_EQ(state->Join(bad).status().code(), StatusCode::kInvalidArgument);
  bad = MakeJoin("a", 1, 0);
  bad.mutable_heap()->set_length(0);
  EXPECT_EQ(state->Join(bad).status().code(), StatusCode::kInvalidArgument);
  bad = MakeJoin("a", 1, 0);
  bad.mutable_table()->set_heap_size(100);
  EXPECT_EQ(state->Join(bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state->Join(v1::JoinRequest()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state->Heartbeat(Beat("", 1)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state->Heartbeat(Beat("a", 0)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state->Leave(LeaveReq(std::string(100, 'x'), 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state->version(), 0u);
  EXPECT_EQ(state->Map().servers_size(), 0);
}

TEST_F(CoordinatorStateTest, ConfigIsValidated) {
  for (CoordinatorConfig c : {Config(0, 4), Config(2, 0), Config(2, 65537)}) {
    EXPECT_EQ(CoordinatorState::Open(c, std::make_unique<MemoryStore>(data_)).status().code(),
              StatusCode::kInvalidArgument);
  }
  CoordinatorConfig c = Config();
  c.heartbeat_timeout = c.heartbeat_interval;
  EXPECT_EQ(ValidateConfig(c).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateConfig(Config(1, 65536)).ok());
}

TEST_F(CoordinatorStateTest, WaitForChangeReturnsNewVersionsAndEndsOnClose) {
  auto state = Open(Config(2, 4));
  auto now = state->WaitForChange(/*known_version=*/99, milliseconds(0));
  ASSERT_TRUE(now.ok());
  ASSERT_TRUE(now->has_value());  // a version the caller does not know: at once
  EXPECT_EQ((*now)->version(), 0u);
  auto idle = state->WaitForChange(0, milliseconds(1));
  ASSERT_TRUE(idle.ok());
  EXPECT_FALSE(idle->has_value());

  std::thread joiner([&] { ASSERT_TRUE(state->Join(MakeJoin("a", 1, 0)).ok()); });
  // Waits as long as it takes for the join (the timeout only bounds a hang).
  StatusOr<std::optional<v1::ClusterMap>> got = std::optional<v1::ClusterMap>();
  while (got.ok() && !got->has_value()) got = state->WaitForChange(0, milliseconds(1000));
  joiner.join();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)->version(), 1u);
  EXPECT_EQ((*got)->servers(0).server_id(), "a");

  state->CloseWatchers();
  EXPECT_EQ(state->WaitForChange(1, milliseconds(1000)).status().code(), StatusCode::kCancelled);
}

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
  EXPECT_NE(other_size.status().message().find("rebalancing"), std::string::npos);
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

}  // namespace
}  // namespace rkv::coordinator
