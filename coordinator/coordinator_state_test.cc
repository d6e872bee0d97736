#include "coordinator/coordinator_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "proto/validation.h"
#include "coordinator/test_util.h"

namespace rkv::coordinator {
namespace {

using testing::FakeClock;
using testing::MakeJoin;
using testing::MemoryStore;
using testing::MemoryStoreData;
using testing::TempDir;
using std::chrono::milliseconds;

CoordinatorConfig Config(uint32_t servers = 3, uint32_t shards = 10, uint32_t replicas = 0) {
  CoordinatorConfig c;
  c.expected_servers = servers;
  c.shard_count = shards;
  c.replicas = replicas;
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

TEST_F(CoordinatorStateTest, ANewIdInACompleteClusterJoinsWithoutRolesAndGrowsIt) {
  auto state = Open(Config(2, 4));
  ASSERT_TRUE(state->Join(MakeJoin("a", 1, 0)).ok());
  ASSERT_TRUE(state->Join(MakeJoin("b", 1, 1)).ok());
  const v1::ClusterMap before = state->Map();
  auto d = state->Join(MakeJoin("d", 1, 3));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->shards().empty());
  EXPECT_EQ(d->map_version(), before.version() + 1);
  const v1::ClusterMap map = state->Map();
  EXPECT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  EXPECT_EQ(map.expected_servers(), 3u);
  ASSERT_NE(Find(map, "d"), nullptr);
  EXPECT_EQ(Find(map, "d")->state(), v1::UP);
  for (uint32_t shard = 0; shard < 4; ++shard) {  // nothing moved yet
    EXPECT_EQ(map.shard_replicas(static_cast<int>(shard)).SerializeAsString(),
              before.shard_replicas(static_cast<int>(shard)).SerializeAsString());
  }
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

// ---- Replica sets.

std::vector<std::string> Replicas(const v1::ClusterMap& map, uint32_t shard) {
  const auto& ids = map.shard_replicas(static_cast<int>(shard)).server_ids();
  return std::vector<std::string>(ids.begin(), ids.end());
}

// Joins servers "s0".."s<N-1>" in that order, server i in zones[i].
v1::ClusterMap JoinAll(CoordinatorState& state, const std::vector<std::string>& zones) {
  for (size_t i = 0; i < zones.size(); ++i) {
    auto j = state.Join(MakeJoin("s" + std::to_string(i), 1, static_cast<uint32_t>(i), zones[i]));
    EXPECT_TRUE(j.ok()) << j.status();
  }
  return state.Map();
}

// Checks what every placement promises: R distinct servers per shard, the
// round-robin primary first, backup_shards matching, the map valid, and
// backups spread evenly (per-server counts differ by at most one). Returns
// the smallest number of distinct zones a shard's replicas cover.
size_t CheckPlacement(const v1::ClusterMap& map, uint32_t replicas) {
  EXPECT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  EXPECT_EQ(map.replication_factor(), replicas);
  EXPECT_EQ(static_cast<uint32_t>(map.shard_replicas_size()), map.shard_count());
  std::map<std::string, std::string> zone_of;
  std::map<std::string, uint32_t> backups;
  for (const auto& s : map.servers()) {
    zone_of[s.server_id()] = s.zone();
    backups[s.server_id()] = 0;
  }
  size_t min_zones = replicas;
  for (uint32_t shard = 0; shard < map.shard_count(); ++shard) {
    const std::vector<std::string> r = Replicas(map, shard);
    EXPECT_EQ(r.size(), replicas) << "shard " << shard;
    if (r.empty()) continue;
    EXPECT_EQ(r[0], map.servers(static_cast<int>(shard % map.servers_size())).server_id()) << "shard " << shard;
    EXPECT_EQ(r[0], map.shard_owner(static_cast<int>(shard)));
    EXPECT_EQ(std::set<std::string>(r.begin(), r.end()).size(), r.size()) << "shard " << shard;
    std::set<std::string> zones;
    for (size_t k = 0; k < r.size(); ++k) {
      zones.insert(zone_of[r[k]]);
      if (k > 0) ++backups[r[k]];
    }
    min_zones = std::min(min_zones, zones.size());
  }
  uint32_t lo = ~0u, hi = 0;
  for (const auto& s : map.servers()) {
    EXPECT_EQ(static_cast<uint32_t>(s.backup_shards_size()), backups[s.server_id()]) << s.server_id();
    lo = std::min(lo, backups[s.server_id()]);
    hi = std::max(hi, backups[s.server_id()]);
  }
  EXPECT_LE(hi - lo, 1u) << map.ShortDebugString();
  return min_zones;
}

TEST_F(CoordinatorStateTest, OneReplicaIsTheRoundRobinOwnerAlone) {
  auto state = Open(Config(3, 10, 1));
  const v1::ClusterMap map = JoinAll(*state, {"", "", ""});
  CheckPlacement(map, 1);
  for (uint32_t shard = 0; shard < 10; ++shard) {
    EXPECT_EQ(Replicas(map, shard), std::vector<std::string>{map.shard_owner(static_cast<int>(shard))});
  }
  for (const auto& s : map.servers()) EXPECT_EQ(s.backup_shards_size(), 0) << s.server_id();
}

TEST_F(CoordinatorStateTest, DefaultReplicasIsThreeOrTheClusterSize) {
  EXPECT_EQ(DefaultReplicas(1), 1u);
  EXPECT_EQ(DefaultReplicas(2), 2u);
  EXPECT_EQ(DefaultReplicas(3), 3u);
  EXPECT_EQ(DefaultReplicas(7), 3u);
  auto state = Open(Config(2, 4));
  EXPECT_EQ(state->replicas(), 2u);
  const v1::ClusterMap map = JoinAll(*state, {"", ""});
  CheckPlacement(map, 2);
  // Without zones the backups follow join order from the primary.
  EXPECT_EQ(Replicas(map, 0), (std::vector<std::string>{"s0", "s1"}));
  EXPECT_EQ(Replicas(map, 1), (std::vector<std::string>{"s1", "s0"}));
}

TEST_F(CoordinatorStateTest, ReplicasAreDistinctServersSpreadEvenlyWithoutZones) {
  for (uint32_t r : {2u, 3u}) {
    for (uint32_t n : {3u, 4u, 5u, 7u}) {
      data_ = std::make_shared<MemoryStoreData>();
      auto state = Open(Config(n, 64, r));
      ASSERT_NE(state, nullptr);
      SCOPED_TRACE("R=" + std::to_string(r) + " N=" + std::to_string(n));
      CheckPlacement(JoinAll(*state, std::vector<std::string>(n, "")), r);
    }
  }
}

TEST_F(CoordinatorStateTest, ReplicasGoToDistinctZonesWhenThereAreEnough) {
  const std::vector<std::vector<std::string>> layouts = {
      {"a", "a", "b", "b", "c", "c"},  // zones grouped in join order
      {"a", "b", "c", "a", "b", "c"},  // interleaved
      {"a", "a", "a", "b", "b", "c"},  // uneven
      {"a", "b", "c"},
      {"a", "a", "a", "b", "b", "b", "c", "c", "c", "d", "d", "d"},
  };
  for (const auto& zones : layouts) {
    for (uint32_t r : {2u, 3u}) {
      data_ = std::make_shared<MemoryStoreData>();
      auto state = Open(Config(static_cast<uint32_t>(zones.size()), 60, r));
      ASSERT_NE(state, nullptr);
      SCOPED_TRACE("R=" + std::to_string(r) + " zones " + ::testing::PrintToString(zones));
      const v1::ClusterMap map = JoinAll(*state, zones);
      if (zones == std::vector<std::string>{"a", "a", "a", "b", "b", "c"} && r == 3) {
        // Every shard needs the one server of zone c: distinct zones win
        // over an even spread.
        EXPECT_TRUE(control::ValidateClusterMap(map).ok());
        for (uint32_t shard = 0; shard < 60; ++shard) {
          std::set<std::string> seen;
          for (const std::string& id : Replicas(map, shard)) seen.insert(Find(map, id)->zone());
          EXPECT_EQ(seen.size(), 3u) << "shard " << shard;
        }
        continue;
      }
      EXPECT_EQ(CheckPlacement(map, r), r);
    }
  }
}

TEST_F(CoordinatorStateTest, FewerZonesThanReplicasSpreadOverAllOfThem) {
  for (uint32_t r : {2u, 3u}) {
    data_ = std::make_shared<MemoryStoreData>();
    auto state = Open(Config(4, 40, r));
    SCOPED_TRACE("R=" + std::to_string(r));
    EXPECT_EQ(CheckPlacement(JoinAll(*state, {"east", "east", "west", "west"}), r), 2u);
  }
  // Labelled and unlabelled servers: "" counts as a zone of its own.
  data_ = std::make_shared<MemoryStoreData>();
  auto state = Open(Config(3, 30, 3));
  EXPECT_EQ(CheckPlacement(JoinAll(*state, {"x", "", "x"}), 3), 2u);
}

TEST_F(CoordinatorStateTest, ReplicasAboveTheClusterSizeOrFiveAreRefused) {
  EXPECT_EQ(ValidateConfig(Config(3, 4, 4)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateConfig(Config(3, 4, 4)).message(),
            "--replicas 4 is above --servers 3: each copy of a shard needs its own server");
  EXPECT_EQ(ValidateConfig(Config(8, 4, 6)).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateConfig(Config(8, 4, 5)).ok());
  EXPECT_TRUE(ValidateConfig(Config(1, 4, 1)).ok());
  EXPECT_TRUE(ValidateConfig(Config(1, 4, 0)).ok());  // the default: 1 for one server
  EXPECT_EQ(CoordinatorState::Open(Config(2, 4, 3), std::make_unique<MemoryStore>(data_)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorStateTest, AServerKeepsItsZone) {
  auto state = Open(Config(2, 4, 2));
  JoinAll(*state, {"rack-1", "rack-2"});
  const uint64_t version = state->version();
  auto moved = state->Join(MakeJoin("s0", 2, 0, "rack-9"));
  EXPECT_EQ(moved.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(moved.status().message().find("'rack-1'"), std::string::npos) << moved.status();
  EXPECT_NE(moved.status().message().find("'rack-9'"), std::string::npos) << moved.status();
  EXPECT_EQ(state->version(), version);
  EXPECT_EQ(state->Join(MakeJoin("s0", 2, 0, "")).status().code(), StatusCode::kFailedPrecondition);
  // The same zone with a new epoch is a restart like any other.
  ASSERT_TRUE(state->Join(MakeJoin("s0", 2, 0, "rack-1")).ok());
  EXPECT_EQ(Find(state->Map(), "s0")->zone(), "rack-1");
  // A zone that is not printable ASCII, or too long, is malformed.
  EXPECT_EQ(state->Join(MakeJoin("s1", 3, 1, "tab\there")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state->Join(MakeJoin("s1", 3, 1, std::string(65, 'z'))).status().code(), StatusCode::kInvalidArgument);
}

v1::ReportReplicaFailureRequest Report(const std::string& reporter, uint64_t epoch, const std::string& backup,
                                       std::vector<uint32_t> shards, const std::string& reason = "timed out") {
  v1::ReportReplicaFailureRequest r;
  r.set_server_id(reporter);
  r.set_epoch(epoch);
  r.set_backup_id(backup);
  for (uint32_t s : shards) r.add_shards(s);
  r.set_reason(reason);
  return r;
}

TEST_F(CoordinatorStateTest, ReportReplicaFailureRemovesTheBackupOnceAndKeepsTheOrder) {
  auto state = Open(Config(4, 8, 4));
  JoinAll(*state, {"", "", "", ""});
  const v1::ClusterMap before = state->Map();
  EXPECT_EQ(Replicas(before, 0), (std::vector<std::string>{"s0", "s1", "s2", "s3"}));
  EXPECT_EQ(Replicas(before, 4), (std::vector<std::string>{"s0", "s1", "s2", "s3"}));
  EXPECT_EQ(Replicas(before, 1), (std::vector<std::string>{"s1", "s2", "s3", "s0"}));
  const uint64_t version = state->version();

  // s0 is the primary of 0 and 4, not of 1: only 0 and 4 change, in one
  // version.
  auto removed = state->ReportReplicaFailure(Report("s0", 1, "s2", {4, 1, 0, 4}));
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->map_version(), version + 1);
  EXPECT_EQ(state->version(), version + 1);
  const v1::ClusterMap after = state->Map();
  ASSERT_TRUE(control::ValidateClusterMap(after).ok()) << control::ValidateClusterMap(after);
  EXPECT_EQ(Replicas(after, 0), (std::vector<std::string>{"s0", "s1", "s3"}));
  EXPECT_EQ(Replicas(after, 4), (std::vector<std::string>{"s0", "s1", "s3"}));
  EXPECT_EQ(Replicas(after, 1), Replicas(before, 1));
  const v1::ServerInfo* s2 = Find(after, "s2");
  EXPECT_EQ(std::vector<uint32_t>(s2->backup_shards().begin(), s2->backup_shards().end()),
            (std::vector<uint32_t>{1, 3, 5, 7}));
  EXPECT_EQ(s2->shards_size(), 2);  // its own primaries are untouched

  // Idempotent: a retried report answers the current version, no change.
  auto again = state->ReportReplicaFailure(Report("s0", 1, "s2", {0, 4}));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->map_version(), version + 1);
  // Nor does a report for shards the reporter is not the primary of.
  auto other = state->ReportReplicaFailure(Report("s0", 1, "s3", {1, 2, 3}));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->map_version(), version + 1);
  EXPECT_EQ(state->version(), version + 1);
  EXPECT_EQ(state->Map().SerializeAsString(), after.SerializeAsString());
}

TEST_F(CoordinatorStateTest, ReportReplicaFailureRefusesWhatItCannotHonour) {
  auto state = Open(Config(3, 6, 3));
  ASSERT_TRUE(state->Join(MakeJoin("s0", 1, 0)).ok());
  ASSERT_TRUE(state->Join(MakeJoin("s1", 1, 1)).ok());
  EXPECT_EQ(state->ReportReplicaFailure(Report("s0", 1, "s1", {0})).status().code(),
            StatusCode::kFailedPrecondition);  // not assigned yet
  ASSERT_TRUE(state->Join(MakeJoin("s2", 1, 2)).ok());
  const uint64_t version = state->version();
  auto code = [&](const v1::ReportReplicaFailureRequest& r) { return state->ReportReplicaFailure(r).status().code(); };
  EXPECT_EQ(code(Report("nobody", 1, "s1", {0})), StatusCode::kNotFound);
  EXPECT_EQ(code(Report("s0", 1, "nobody", {0})), StatusCode::kNotFound);
  EXPECT_EQ(code(Report("s0", 2, "s1", {0})), StatusCode::kFailedPrecondition);  // not its epoch
  EXPECT_EQ(code(Report("s0", 1, "s0", {0})), StatusCode::kFailedPrecondition);  // the primary itself
  EXPECT_NE(state->ReportReplicaFailure(Report("s0", 1, "s0", {0})).status().message().find("never"),
            std::string::npos);
  EXPECT_EQ(code(Report("s0", 1, "s1", {6})), StatusCode::kInvalidArgument);  // shard out of range
  EXPECT_EQ(code(Report("s0", 1, "s1", {})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Report("s0", 0, "s1", {0})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Report("s0", 1, "bad id", {0})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Report("s0", 1, "s1", {0}, "bell\a")), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Report("s0", 1, "s1", {0}, std::string(201, 'r'))), StatusCode::kInvalidArgument);
  ASSERT_TRUE(state->Leave(LeaveReq("s0", 1)).ok());
  EXPECT_EQ(code(Report("s0", 1, "s1", {0})), StatusCode::kFailedPrecondition);  // DOWN
  EXPECT_EQ(state->version(), version + 1);  // the Leave only
  for (uint32_t shard = 0; shard < 6; ++shard) EXPECT_EQ(Replicas(state->Map(), shard).size(), 3u);
  // A failed commit changes nothing.
  data_->SetFailing(true);
  EXPECT_EQ(code(Report("s1", 1, "s2", {1})), StatusCode::kInternal);
  data_->SetFailing(false);
  EXPECT_EQ(Replicas(state->Map(), 1).size(), 3u);
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

// ---- Leases, fencing and promotion.

std::vector<std::string> Excluded(const CoordinatorState& state) { return state.Lease().excluded_servers; }

std::vector<uint32_t> Shards(const v1::ClusterMap& map, const std::string& id) {
  const v1::ServerInfo* s = Find(map, id);
  return s == nullptr ? std::vector<uint32_t>() : std::vector<uint32_t>(s->shards().begin(), s->shards().end());
}

TEST_F(CoordinatorStateTest, LeaseIsConfiguredAndAnsweredByJoinAndHeartbeat) {
  CoordinatorConfig c = Config(2, 4);
  c.lease = milliseconds(800);
  auto state = Open(c);
  auto a = state->Join(MakeJoin("a", 1, 0));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->lease_ms(), 800u);
  auto retried = state->Join(MakeJoin("a", 1, 0));
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->lease_ms(), 800u);
  auto hb = state->Heartbeat(Beat("a", 1));
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(hb->lease_ms(), 800u);
  EXPECT_EQ(state->Lease().map_version, state->version());
  EXPECT_TRUE(Excluded(*state).empty());

  for (int lease : {99, 60'001, 3001}) {
    CoordinatorConfig bad = Config();
    bad.lease = milliseconds(lease);
    const Status s = ValidateConfig(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << lease;
    EXPECT_NE(s.message().find("--lease_ms"), std::string::npos) << s;
  }
  CoordinatorConfig edge = Config();
  edge.lease = edge.heartbeat_timeout;
  EXPECT_TRUE(ValidateConfig(edge).ok());
  EXPECT_EQ(FenceWait(milliseconds(1000)), milliseconds(1060));
  EXPECT_EQ(FenceWait(milliseconds(100)), milliseconds(151));
}

TEST_F(CoordinatorStateTest, ASilentPrimaryIsFencedThenItsFirstUpBackupPromotedAfterTheWait) {
  auto state = Open(Config(3, 6, 3));
  const v1::ClusterMap start = JoinAll(*state, {"", "", ""});
  EXPECT_EQ(Replicas(start, 0), (std::vector<std::string>{"s0", "s1", "s2"}));
  EXPECT_EQ(Replicas(start, 2), (std::vector<std::string>{"s2", "s0", "s1"}));
  clock_.Advance(milliseconds(3001));
  ASSERT_TRUE(state->Heartbeat(Beat("s1", 1)).ok());
  ASSERT_TRUE(state->Heartbeat(Beat("s2", 1)).ok());
  ASSERT_EQ(*state->ExpireHeartbeats(), 1);
  const uint64_t down_version = state->version();
  EXPECT_EQ(Excluded(*state), (std::vector<std::string>{"s0"}));
  EXPECT_EQ(state->Lease().map_version, down_version);

  // Not before every lease that covered s0 has ended.
  EXPECT_EQ(*state->PromoteFenced(), 0);
  clock_.Advance(FenceWait(state->config().lease) - milliseconds(1));
  EXPECT_EQ(*state->PromoteFenced(), 0);
  EXPECT_EQ(state->version(), down_version);
  EXPECT_EQ(Excluded(*state), (std::vector<std::string>{"s0"}));

  clock_.Advance(milliseconds(1));
  EXPECT_EQ(*state->PromoteFenced(), 2);
  EXPECT_EQ(state->version(), down_version + 1);  // one version for the batch
  const v1::ClusterMap map = state->Map();
  EXPECT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  EXPECT_EQ(map.shard_owner(0), "s1");
  EXPECT_EQ(map.shard_owner(3), "s1");
  EXPECT_EQ(Replicas(map, 0), (std::vector<std::string>{"s1"}));  // the new primary alone
  EXPECT_EQ(Replicas(map, 3), (std::vector<std::string>{"s1"}));
  for (uint32_t shard : {1u, 2u, 4u, 5u}) {
    EXPECT_EQ(Replicas(map, shard), Replicas(start, shard)) << shard;  // other shards untouched
  }
  const v1::ServerInfo* s0 = Find(map, "s0");
  EXPECT_EQ(s0->state(), v1::DOWN);
  EXPECT_EQ(s0->epoch(), 1u);
  EXPECT_TRUE(s0->shards().empty());
  EXPECT_EQ(Shards(map, "s1"), (std::vector<uint32_t>{0, 1, 3, 4}));
  EXPECT_TRUE(Excluded(*state).empty());
  EXPECT_EQ(state->Lease().map_version, state->version());
  EXPECT_EQ(*state->PromoteFenced(), 0);  // done once
  EXPECT_EQ(state->version(), down_version + 1);
}

TEST_F(CoordinatorStateTest, PromotionSkipsDownBackupsAndLeavesShardsWithoutAnUpBackup) {
  auto state = Open(Config(3, 6, 3));
  JoinAll(*state, {"", "", ""});
  ASSERT_TRUE(state->Leave(LeaveReq("s1", 1)).ok());
  ASSERT_TRUE(state->Leave(LeaveReq("s0", 1)).ok());
  EXPECT_EQ(Excluded(*state), (std::vector<std::string>{"s0", "s1"}));
  clock_.Advance(FenceWait(state->config().lease));
  EXPECT_EQ(*state->PromoteFenced(), 4);
  const v1::ClusterMap map = state->Map();
  EXPECT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  // Shard 0 was [s0, s1, s2]: s1 is DOWN, so s2.
  EXPECT_EQ(Replicas(map, 0), (std::vector<std::string>{"s2"}));
  EXPECT_EQ(Replicas(map, 1), (std::vector<std::string>{"s2"}));
  EXPECT_EQ(Shards(map, "s2"), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(Excluded(*state).empty());
}

TEST_F(CoordinatorStateTest, APrimaryWithoutAnUpBackupKeepsItsShardsUntilABackupReturns) {
  auto state = Open(Config(2, 4, 2));
  JoinAll(*state, {"", ""});
  ASSERT_TRUE(state->Leave(LeaveReq("s0", 1)).ok());
  EXPECT_EQ(Excluded(*state), (std::vector<std::string>{"s0"}));
  ASSERT_TRUE(state->Leave(LeaveReq("s1", 1)).ok());  // its only backup, s0, is DOWN: not fenced
  EXPECT_EQ(Excluded(*state), (std::vector<std::string>{"s0"}));
  clock_.Advance(FenceWait(state->config().lease));
  const uint64_t version = state->version();
  EXPECT_EQ(*state->PromoteFenced(), 0);  // s0's backup went DOWN meanwhile
  EXPECT_EQ(state->version(), version);
  EXPECT_EQ(Shards(state->Map(), "s0"), (std::vector<uint32_t>{0, 2}));
  EXPECT_TRUE(Excluded(*state).empty());

  // s1 comes back with its epoch (a network blip): it is an UP backup of
  // s0's shards again, so s0 is fenced from now and its shards move later.
  ASSERT_TRUE(state->Join(MakeJoin("s1", 1, 1)).ok());
  EXPECT_EQ(*state->PromoteFenced(), 0);
  EXPECT_EQ(Excluded(*state), (std::vector<std::string>{"s0"}));
  clock_.Advance(FenceWait(state->config().lease));
  EXPECT_EQ(*state->PromoteFenced(), 2);
  EXPECT_EQ(Shards(state->Map(), "s1"), (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(control::ValidateClusterMap(state->Map()).ok());

  // With one replica per shard nobody is ever fenced.
  std::shared_ptr<MemoryStoreData> other = std::make_shared<MemoryStoreData>();
  auto single = CoordinatorState::Open(Config(2, 4, 1), std::make_unique<MemoryStore>(other), clock_.AsClock());
  ASSERT_TRUE(single.ok()) << single.status();
  JoinAll(**single, {"", ""});
  ASSERT_TRUE((*single)->Leave(LeaveReq("s0", 1)).ok());
  EXPECT_TRUE(Excluded(**single).empty());
  clock_.Advance(FenceWait((*single)->config().lease));
  EXPECT_EQ(*(*single)->PromoteFenced(), 0);
  EXPECT_EQ(Shards((*single)->Map(), "s0"), (std::vector<uint32_t>{0, 2}));
}

TEST_F(CoordinatorStateTest, AServerBackBeforeThePromotionIsNoLongerFencedAndKeepsEverything) {
  auto state = Open(Config(3, 6, 3));
  const v1::ClusterMap start = JoinAll(*state, {"", "", ""});
  ASSERT_TRUE(state->Leave(LeaveReq("s0", 1)).ok());
  EXPECT_EQ(Excluded(*state), (std::vector<std::string>{"s0"}));
  clock_.Advance(FenceWait(state->config().lease) - milliseconds(1));
  ASSERT_TRUE(state->Join(MakeJoin("s0", 1, 0)).ok());  // same epoch: SIGCONT, a blip
  EXPECT_TRUE(Excluded(*state).empty());
  clock_.Advance(milliseconds(10'000));
  ASSERT_TRUE(state->Heartbeat(Beat("s0", 1)).ok());
  EXPECT_EQ(*state->PromoteFenced(), 0);
  const v1::ClusterMap map = state->Map();
  for (uint32_t shard = 0; shard < 6; ++shard) EXPECT_EQ(Replicas(map, shard), Replicas(start, shard)) << shard;
  EXPECT_EQ(Find(map, "s0")->backup_shards_size(), Find(start, "s0")->backup_shards_size());
}

TEST_F(CoordinatorStateTest, ARestartedCoordinatorFencesDownPrimariesFromItsOwnStart) {
  {
    auto state = Open(Config(3, 6, 3));
    JoinAll(*state, {"", "", ""});
    ASSERT_TRUE(state->Leave(LeaveReq("s0", 1)).ok());
  }
  clock_.Advance(milliseconds(500));
  auto state = Open(Config(3, 6, 3));  // the same store
  EXPECT_EQ(Excluded(*state), (std::vector<std::string>{"s0"}));
  // The first coordinator's fence would be ripe by now; the new one's is not.
  clock_.Advance(FenceWait(state->config().lease) - milliseconds(1));
  EXPECT_EQ(*state->PromoteFenced(), 0);
  clock_.Advance(milliseconds(1));
  EXPECT_EQ(*state->PromoteFenced(), 2);
  EXPECT_EQ(Replicas(state->Map(), 0), (std::vector<std::string>{"s1"}));
  EXPECT_TRUE(Excluded(*state).empty());
}

std::vector<std::string> Syncing(const v1::ClusterMap& map, uint32_t shard) {
  const auto& ids = map.shard_replicas(static_cast<int>(shard)).syncing_ids();
  return std::vector<std::string>(ids.begin(), ids.end());
}

TEST_F(CoordinatorStateTest, ANewEpochTurnsItsBackupRolesIntoSyncingAndKeepsItsPrimaries) {
  auto state = Open(Config(3, 6, 3));
  JoinAll(*state, {"", "", ""});
  const uint64_t version = state->version();
  auto again = state->Join(MakeJoin("s0", 2, 7));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(state->version(), version + 1);  // one version for the rejoin
  EXPECT_EQ(std::vector<uint32_t>(again->shards().begin(), again->shards().end()), (std::vector<uint32_t>{0, 3}));
  const v1::ClusterMap map = state->Map();
  EXPECT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  EXPECT_TRUE(Find(map, "s0")->backup_shards().empty());
  EXPECT_EQ(std::vector<uint32_t>(Find(map, "s0")->syncing_shards().begin(), Find(map, "s0")->syncing_shards().end()),
            (std::vector<uint32_t>{1, 2, 4, 5}));
  EXPECT_EQ(Replicas(map, 0), (std::vector<std::string>{"s0", "s1", "s2"}));
  EXPECT_EQ(Replicas(map, 1), (std::vector<std::string>{"s1", "s2"}));
  EXPECT_EQ(Syncing(map, 1), (std::vector<std::string>{"s0"}));
  EXPECT_EQ(Replicas(map, 2), (std::vector<std::string>{"s2", "s1"}));
  EXPECT_EQ(Syncing(map, 2), (std::vector<std::string>{"s0"}));
  // A DOWN server rejoining with a new epoch: the same.
  ASSERT_TRUE(state->Leave(LeaveReq("s1", 1)).ok());
  ASSERT_TRUE(state->Join(MakeJoin("s1", 2, 8)).ok());
  EXPECT_TRUE(Excluded(*state).empty());
  EXPECT_EQ(Replicas(state->Map(), 0), (std::vector<std::string>{"s0", "s2"}));
  EXPECT_EQ(Syncing(state->Map(), 0), (std::vector<std::string>{"s1"}));
  EXPECT_EQ(Replicas(state->Map(), 1), (std::vector<std::string>{"s1", "s2"}));
  // Nothing to re-replicate: every shard has R replicas + syncing servers.
  EXPECT_EQ(*state->Rebalance(), 0);
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

// ---- Re-replication, catch-up, adding and draining servers.

CoordinatorConfig Replacing(uint32_t servers, uint32_t shards, uint32_t replicas,
                            milliseconds replace_after = milliseconds(10000)) {
  CoordinatorConfig c = Config(servers, shards, replicas);
  c.replace_after = replace_after;
  return c;
}

v1::ReportCaughtUpRequest CaughtUp(const std::string& id, uint64_t epoch,
                                   const std::vector<std::pair<uint32_t, std::string>>& shards) {
  v1::ReportCaughtUpRequest r;
  r.set_server_id(id);
  r.set_epoch(epoch);
  for (const auto& [shard, primary] : shards) {
    v1::CaughtUpShard* c = r.add_shards();
    c->set_shard(shard);
    c->set_primary_id(primary);
  }
  return r;
}

v1::DrainRequest DrainReq(const std::string& id) {
  v1::DrainRequest r;
  r.set_server_id(id);
  return r;
}

// Every UP server reports every shard it syncs as caught up from the
// shard's current primary; returns how many moved.
int CatchUpAll(CoordinatorState& state) {
  const v1::ClusterMap map = state.Map();
  int moved = 0;
  for (const v1::ServerInfo& s : map.servers()) {
    if (s.state() != v1::UP || s.syncing_shards().empty()) continue;
    std::vector<std::pair<uint32_t, std::string>> shards;
    for (uint32_t shard : s.syncing_shards()) shards.emplace_back(shard, map.shard_owner(static_cast<int>(shard)));
    auto r = state.ReportCaughtUp(CaughtUp(s.server_id(), s.epoch(), shards));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) continue;
    EXPECT_TRUE(r->refused_shards().empty()) << r->ShortDebugString();
    moved += s.syncing_shards_size() - r->refused_shards_size();
  }
  return moved;
}

bool AnyHandover(const v1::ClusterMap& map) {
  for (const auto& r : map.shard_replicas()) {
    if (!r.handover_from().empty()) return true;
  }
  return false;
}

// What every step of a move must keep: a server enters a shard's replicas
// only after syncing it (or as its old primary, kept as a backup during a
// handover), and a shard keeps at least min(R, what it had) replicas.
void CheckStep(const v1::ClusterMap& before, const v1::ClusterMap& after) {
  ASSERT_TRUE(control::ValidateClusterMap(after).ok()) << control::ValidateClusterMap(after);
  const uint32_t r_target = after.replication_factor();
  for (uint32_t shard = 0; shard < after.shard_count(); ++shard) {
    const auto& b = before.shard_replicas(static_cast<int>(shard));
    const auto& a = after.shard_replicas(static_cast<int>(shard));
    for (const std::string& id : a.server_ids()) {
      const bool was_replica = std::find(b.server_ids().begin(), b.server_ids().end(), id) != b.server_ids().end();
      const bool was_syncing = std::find(b.syncing_ids().begin(), b.syncing_ids().end(), id) != b.syncing_ids().end();
      EXPECT_TRUE(was_replica || was_syncing) << id << " became a replica of shard " << shard << " without syncing";
    }
    EXPECT_GE(static_cast<uint32_t>(a.server_ids_size()),
              std::min<uint32_t>(r_target, static_cast<uint32_t>(b.server_ids_size())))
        << "shard " << shard << " lost a replica before its replacement caught up";
  }
}

// Runs Rebalance, catch-up reports and the clock (past each handover's
// wait) until nothing changes any more, checking each step. Returns the
// number of passes.
int Settle(CoordinatorState& state, FakeClock& clock, bool check = true) {
  for (int pass = 1; pass <= 100; ++pass) {
    const v1::ClusterMap before = state.Map();
    auto changed = state.Rebalance();
    EXPECT_TRUE(changed.ok()) << changed.status();
    const v1::ClusterMap mid = state.Map();
    if (check) CheckStep(before, mid);
    const int caught_up = CatchUpAll(state);
    const v1::ClusterMap after = state.Map();
    if (check) CheckStep(mid, after);
    if (changed.ok() && *changed == 0 && caught_up == 0 && !AnyHandover(after)) return pass;
    if (AnyHandover(after)) clock.Advance(FenceWait(state.config().lease));
  }
  ADD_FAILURE() << "no stable map after 100 passes: " << state.Map().ShortDebugString();
  return 0;
}

size_t Roles(const v1::ServerInfo& s) {
  return static_cast<size_t>(s.shards_size() + s.backup_shards_size() + s.syncing_shards_size());
}

TEST_F(CoordinatorStateTest, ReportCaughtUpMovesASyncingServerIntoTheReplicas) {
  auto state = Open(Config(3, 6, 3));
  JoinAll(*state, {"", "", ""});
  ASSERT_TRUE(state->Join(MakeJoin("s0", 2, 7)).ok());  // syncing 1, 2, 4, 5
  const uint64_t version = state->version();
  // Shard 1: caught up from its primary s1. Shard 2: from s1, which is not
  // its primary (s2 is). Shard 0: s0 is its primary, not syncing it.
  auto r = state->ReportCaughtUp(CaughtUp("s0", 2, {{1, "s1"}, {2, "s1"}, {0, "s0"}, {1, "s1"}}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->map_version(), version + 1);
  EXPECT_EQ(std::vector<uint32_t>(r->refused_shards().begin(), r->refused_shards().end()),
            (std::vector<uint32_t>{0, 2}));
  const v1::ClusterMap map = state->Map();
  ASSERT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  EXPECT_EQ(Replicas(map, 1), (std::vector<std::string>{"s1", "s2", "s0"}));
  EXPECT_TRUE(Syncing(map, 1).empty());
  EXPECT_EQ(Syncing(map, 2), (std::vector<std::string>{"s0"}));
  EXPECT_EQ(std::vector<uint32_t>(Find(map, "s0")->backup_shards().begin(), Find(map, "s0")->backup_shards().end()),
            (std::vector<uint32_t>{1}));
  // A retry moves nothing more and commits nothing.
  auto again = state->ReportCaughtUp(CaughtUp("s0", 2, {{1, "s1"}}));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->map_version(), version + 1);
  EXPECT_EQ(std::vector<uint32_t>(again->refused_shards().begin(), again->refused_shards().end()),
            (std::vector<uint32_t>{1}));
  EXPECT_EQ(state->version(), version + 1);

  // Refused requests change nothing.
  EXPECT_EQ(state->ReportCaughtUp(CaughtUp("nobody", 1, {{2, "s2"}})).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(state->ReportCaughtUp(CaughtUp("s0", 1, {{2, "s2"}})).status().code(),
            StatusCode::kFailedPrecondition);  // the old epoch
  EXPECT_EQ(state->ReportCaughtUp(CaughtUp("s0", 2, {{6, "s2"}})).status().code(),
            StatusCode::kInvalidArgument);  // not below the shard count
  std::vector<std::pair<uint32_t, std::string>> too_many(7, {2, "s2"});
  EXPECT_EQ(state->ReportCaughtUp(CaughtUp("s0", 2, too_many)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state->ReportCaughtUp(CaughtUp("s0", 2, {{2, "bad id"}})).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(state->ReportCaughtUp(CaughtUp("s0", 2, {})).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(state->Leave(LeaveReq("s0", 2)).ok());
  EXPECT_EQ(state->ReportCaughtUp(CaughtUp("s0", 2, {{2, "s2"}})).status().code(),
            StatusCode::kFailedPrecondition);  // DOWN
  EXPECT_EQ(Syncing(state->Map(), 2), (std::vector<std::string>{"s0"}));
}

TEST_F(CoordinatorStateTest, ReportCaughtUpRefusesAFetchOlderThanTheSyncingRole) {
  auto state = Open(Config(3, 6, 3));
  JoinAll(*state, {"", "", ""});
  ASSERT_TRUE(state->Join(MakeJoin("s0", 2, 7)).ok());  // syncing 1, 2, 4, 5 from this version on
  const uint64_t role_version = state->version();
  // A fetch under the map before that one (the role was taken away and
  // given back since, as far as the coordinator can tell): refused.
  v1::ReportCaughtUpRequest old = CaughtUp("s0", 2, {{1, "s1"}});
  old.mutable_shards(0)->set_sync_map_version(role_version - 1);
  auto r = state->ReportCaughtUp(old);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(std::vector<uint32_t>(r->refused_shards().begin(), r->refused_shards().end()),
            (std::vector<uint32_t>{1}));
  EXPECT_EQ(state->version(), role_version);
  EXPECT_EQ(Syncing(state->Map(), 1), (std::vector<std::string>{"s0"}));
  // A fetch under the map that gave the role: accepted.
  v1::ReportCaughtUpRequest current = CaughtUp("s0", 2, {{1, "s1"}});
  current.mutable_shards(0)->set_sync_map_version(role_version);
  r = state->ReportCaughtUp(current);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->refused_shards().empty());
  EXPECT_TRUE(Syncing(state->Map(), 1).empty());
}

TEST_F(CoordinatorStateTest, ASyncingServerIsNeverPromotedAndAPromotionClearsSyncing) {
  auto state = Open(Config(3, 6, 3));
  JoinAll(*state, {"", "", ""});
  ASSERT_TRUE(state->Join(MakeJoin("s1", 2, 8)).ok());  // syncing 0, 2, 3, 5
  ASSERT_EQ(Replicas(state->Map(), 0), (std::vector<std::string>{"s0", "s2"}));
  ASSERT_EQ(Syncing(state->Map(), 0), (std::vector<std::string>{"s1"}));
  ASSERT_TRUE(state->Leave(LeaveReq("s0", 1)).ok());
  clock_.Advance(FenceWait(state->config().lease));
  EXPECT_EQ(*state->PromoteFenced(), 2);
  v1::ClusterMap map = state->Map();
  ASSERT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  // Shard 0's first UP backup is s2; s1 only syncs it and leaves with the
  // promotion (it would have fetched from s0).
  EXPECT_EQ(Replicas(map, 0), (std::vector<std::string>{"s2"}));
  EXPECT_TRUE(Syncing(map, 0).empty());
  EXPECT_EQ(Replicas(map, 3), (std::vector<std::string>{"s2"}));
  // A report from before the promotion (primary s0) is refused.
  auto late = state->ReportCaughtUp(CaughtUp("s1", 2, {{0, "s0"}}));
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->refused_shards_size(), 1);
  // Re-replication adds syncing servers again, which fetch from s2.
  EXPECT_GT(*state->Rebalance(), 0);
  map = state->Map();
  EXPECT_EQ(Syncing(map, 0), (std::vector<std::string>{"s1"}));  // the only UP server left to add

  // A shard whose only UP member syncs it is not promoted to it.
  auto two = std::make_shared<MemoryStoreData>();
  auto small = CoordinatorState::Open(Config(2, 2, 2), std::make_unique<MemoryStore>(two), clock_.AsClock());
  ASSERT_TRUE(small.ok()) << small.status();
  JoinAll(**small, {"", ""});
  ASSERT_TRUE((*small)->Join(MakeJoin("s1", 2, 9)).ok());  // syncing shard 0
  ASSERT_TRUE((*small)->Leave(LeaveReq("s0", 1)).ok());
  EXPECT_TRUE(Excluded(**small).empty());  // nothing to fence: no UP backup
  clock_.Advance(FenceWait((*small)->config().lease));
  EXPECT_EQ(*(*small)->PromoteFenced(), 0);
  EXPECT_EQ(Replicas((*small)->Map(), 0), (std::vector<std::string>{"s0"}));
  EXPECT_EQ(Syncing((*small)->Map(), 0), (std::vector<std::string>{"s1"}));
}

TEST_F(CoordinatorStateTest, ReportReplicaFailureTakesOutASyncingServerToo) {
  auto state = Open(Config(3, 6, 3));
  JoinAll(*state, {"", "", ""});
  ASSERT_TRUE(state->Join(MakeJoin("s0", 2, 7)).ok());  // syncing 1, 2, 4, 5
  const uint64_t version = state->version();
  auto r = state->ReportReplicaFailure(Report("s1", 1, "s0", {1, 4}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->map_version(), version + 1);
  const v1::ClusterMap map = state->Map();
  ASSERT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  EXPECT_TRUE(Syncing(map, 1).empty());
  EXPECT_TRUE(Syncing(map, 4).empty());
  EXPECT_EQ(Syncing(map, 2), (std::vector<std::string>{"s0"}));
  // s0 is not added back at once (a primary could not reach it); after a
  // heartbeat timeout it may be.
  EXPECT_EQ(*state->Rebalance(), 0);
  clock_.Advance(state->config().heartbeat_timeout);
  ASSERT_TRUE(state->Heartbeat(Beat("s0", 2)).ok());
  ASSERT_TRUE(state->Heartbeat(Beat("s1", 1)).ok());
  ASSERT_TRUE(state->Heartbeat(Beat("s2", 1)).ok());
  EXPECT_EQ(*state->Rebalance(), 2);
  EXPECT_EQ(Syncing(state->Map(), 1), (std::vector<std::string>{"s0"}));
}

TEST_F(CoordinatorStateTest, AServerDownForReplaceAfterIsReplacedZoneAware) {
  // Zones a, a, b, b: every shard has one replica in each.
  auto state = Open(Replacing(4, 8, 2));
  JoinAll(*state, {"a", "a", "b", "b"});
  ASSERT_TRUE(state->Leave(LeaveReq("s2", 1)).ok());
  clock_.Advance(FenceWait(state->config().lease));
  const int promoted = *state->PromoteFenced();
  EXPECT_EQ(promoted, 2);  // shards 2 and 6
  // The promoted shards have one replica: re-replicated at once, from
  // zone b (s3) first.
  const uint64_t before = state->version();
  EXPECT_EQ(*state->Rebalance(), 2);
  EXPECT_EQ(state->version(), before + 1);
  v1::ClusterMap map = state->Map();
  ASSERT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  for (uint32_t shard : {2u, 6u}) EXPECT_EQ(Syncing(map, shard), (std::vector<std::string>{"s3"})) << shard;
  EXPECT_EQ(CatchUpAll(*state), 2);
  // s2 still backs up shards: they keep it until replace_after (s0, with
  // 4 primaries, may hand one over to s3 meanwhile).
  ASSERT_TRUE(state->Rebalance().ok());
  clock_.Advance(milliseconds(10000) - FenceWait(state->config().lease) - milliseconds(1));
  ASSERT_TRUE(state->Rebalance().ok());
  const size_t lost = static_cast<size_t>(Find(state->Map(), "s2")->backup_shards_size());
  ASSERT_GT(lost, 0u);
  clock_.Advance(milliseconds(1));
  const uint64_t before_replacement = state->version();
  EXPECT_GE(*state->Rebalance(), static_cast<int>(2 * lost));  // removed, and as many added
  EXPECT_EQ(state->version(), before_replacement + 1);
  map = state->Map();
  ASSERT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  EXPECT_TRUE(Find(map, "s2")->backup_shards().empty());
  EXPECT_EQ(Find(map, "s3")->syncing_shards_size(), static_cast<int>(lost));  // zone b's other server
  Settle(*state, clock_);
  map = state->Map();
  for (uint32_t shard = 0; shard < 8; ++shard) {
    const std::vector<std::string> r = Replicas(map, shard);
    ASSERT_EQ(r.size(), 2u) << shard;
    EXPECT_NE(Find(map, r[0])->zone(), Find(map, r[1])->zone()) << shard;
    EXPECT_NE(r[0], "s2");
  }
}

TEST_F(CoordinatorStateTest, ReplaceAfterZeroNeverReplacesAndAnOnlyReplicaIsKept) {
  auto state = Open(Replacing(3, 6, 2, milliseconds(0)));
  JoinAll(*state, {"", "", ""});
  ASSERT_TRUE(state->Leave(LeaveReq("s1", 1)).ok());
  clock_.Advance(milliseconds(3600 * 1000));
  ASSERT_TRUE(state->Heartbeat(Beat("s0", 1)).ok());
  ASSERT_TRUE(state->Heartbeat(Beat("s2", 1)).ok());
  const size_t backups = static_cast<size_t>(Find(state->Map(), "s1")->backup_shards_size());
  ASSERT_GT(backups, 0u);
  EXPECT_EQ(*state->PromoteFenced(), 2);
  Settle(*state, clock_);
  EXPECT_EQ(static_cast<size_t>(Find(state->Map(), "s1")->backup_shards_size()), backups);

  // With replacement, a shard whose only replica is DOWN keeps it.
  auto data = std::make_shared<MemoryStoreData>();
  auto one = CoordinatorState::Open(Replacing(2, 2, 1), std::make_unique<MemoryStore>(data), clock_.AsClock());
  ASSERT_TRUE(one.ok());
  JoinAll(**one, {"", ""});
  ASSERT_TRUE((*one)->Leave(LeaveReq("s0", 1)).ok());
  clock_.Advance(milliseconds(20000));
  ASSERT_TRUE((*one)->Heartbeat(Beat("s1", 1)).ok());
  EXPECT_EQ(*(*one)->Rebalance(), 0);
  EXPECT_EQ(Replicas((*one)->Map(), 0), (std::vector<std::string>{"s0"}));
}

TEST_F(CoordinatorStateTest, ANewServerGetsAFairShareThroughCatchUpThenDonorsLeave) {
  auto state = Open(Config(3, 12, 3));
  JoinAll(*state, {"", "", ""});
  ASSERT_TRUE(state->Join(MakeJoin("s3", 1, 3)).ok());
  EXPECT_GT(Settle(*state, clock_), 1);
  const v1::ClusterMap map = state->Map();
  ASSERT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  EXPECT_EQ(map.expected_servers(), 4u);
  // 36 roles and 12 primaries over 4 servers: 9 and 3 each.
  for (const v1::ServerInfo& s : map.servers()) {
    EXPECT_EQ(Roles(s), 9u) << s.server_id();
    EXPECT_EQ(s.shards_size(), 3) << s.server_id();
    EXPECT_TRUE(s.syncing_shards().empty());
  }
  for (uint32_t shard = 0; shard < 12; ++shard) {
    EXPECT_EQ(Replicas(map, shard).size(), 3u) << shard;
    EXPECT_TRUE(map.shard_replicas(static_cast<int>(shard)).handover_from().empty());
  }
  // N grew for good: a reopen with the original --servers keeps 4.
  auto reopened = CoordinatorState::Open(Config(3, 12, 3), std::make_unique<MemoryStore>(data_), clock_.AsClock());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*reopened)->Map().SerializeAsString(), map.SerializeAsString());
  EXPECT_EQ(CoordinatorState::Open(Config(5, 12, 3), std::make_unique<MemoryStore>(data_)).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorStateTest, RebalancingMovesABoundedNumberOfShardsAtATime) {
  auto state = Open(Config(2, 200, 2));
  JoinAll(*state, {"", ""});
  ASSERT_TRUE(state->Join(MakeJoin("s2", 1, 2)).ok());
  EXPECT_EQ(*state->Rebalance(), static_cast<int>(kMaxMovesPerPass));
  EXPECT_EQ(static_cast<uint32_t>(Find(state->Map(), "s2")->syncing_shards_size()), kMaxMovesPerPass);
  // Nothing more starts until those finish.
  EXPECT_EQ(*state->Rebalance(), 0);
  Settle(*state, clock_);
  const v1::ClusterMap map = state->Map();
  // 200 primaries and 200 backups over 3 servers: 66 or 67 of each.
  for (const v1::ServerInfo& s : map.servers()) {
    EXPECT_GE(s.backup_shards_size(), 66) << s.server_id();
    EXPECT_LE(s.backup_shards_size(), 67) << s.server_id();
    EXPECT_GE(s.shards_size(), 66) << s.server_id();
    EXPECT_LE(s.shards_size(), 67) << s.server_id();
  }
}

TEST_F(CoordinatorStateTest, AHandoverRefusesWritesForAFenceWaitThenEnds) {
  auto state = Open(Config(3, 3, 2));
  JoinAll(*state, {"", "", ""});
  // s0 (primary of 0, backup of 2) drains.
  auto drain = state->Drain(DrainReq("s0"));
  ASSERT_TRUE(drain.ok()) << drain.status();
  EXPECT_EQ(drain->roles_to_move(), 2u);
  EXPECT_TRUE(Find(state->Map(), "s0")->draining());
  EXPECT_GT(*state->Rebalance(), 0);
  v1::ClusterMap map = state->Map();
  ASSERT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  // Shard 0 passes to its backup s1; s0 stays a backup.
  EXPECT_EQ(Replicas(map, 0), (std::vector<std::string>{"s1", "s0"}));
  EXPECT_EQ(map.shard_replicas(0).handover_from(), "s0");
  EXPECT_TRUE(Syncing(map, 0).empty());
  const uint64_t handover_version = state->version();
  // Survives a reopen, which restarts the wait.
  auto reopened = CoordinatorState::Open(Config(3, 3, 2), std::make_unique<MemoryStore>(data_), clock_.AsClock());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*reopened)->Map().shard_replicas(0).handover_from(), "s0");
  clock_.Advance(FenceWait(state->config().lease) - milliseconds(1));
  CatchUpAll(*state);  // shard 2's replacement for s0, if any
  EXPECT_EQ(state->Map().shard_replicas(0).handover_from(), "s0");
  while (*state->Rebalance() > 0 || CatchUpAll(*state) > 0) {
  }
  EXPECT_EQ(state->Map().shard_replicas(0).handover_from(), "s0");  // not before the wait
  EXPECT_GE(state->version(), handover_version);
  clock_.Advance(milliseconds(1));
  EXPECT_GT(*state->Rebalance(), 0);
  EXPECT_TRUE(state->Map().shard_replicas(0).handover_from().empty());
}

TEST_F(CoordinatorStateTest, DrainMovesEveryRoleAwayThenReportsNone) {
  auto state = Open(Config(4, 8, 2));
  JoinAll(*state, {"", "", "", ""});
  const size_t roles = Roles(*Find(state->Map(), "s1"));
  auto drain = state->Drain(DrainReq("s1"));
  ASSERT_TRUE(drain.ok()) << drain.status();
  EXPECT_EQ(drain->roles_to_move(), roles);
  EXPECT_EQ(drain->map_version(), state->version());
  auto again = state->Drain(DrainReq("s1"));  // idempotent
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->map_version(), drain->map_version());
  bool handed_over = false;
  for (int pass = 0; pass < 100 && Roles(*Find(state->Map(), "s1")) > 0; ++pass) {
    const v1::ClusterMap before = state->Map();
    ASSERT_TRUE(state->Rebalance().ok());
    CheckStep(before, state->Map());
    handed_over = handed_over || AnyHandover(state->Map());
    const v1::ClusterMap mid = state->Map();
    CatchUpAll(*state);
    CheckStep(mid, state->Map());
    clock_.Advance(FenceWait(state->config().lease));
  }
  EXPECT_TRUE(handed_over);
  const v1::ClusterMap map = state->Map();
  EXPECT_EQ(Roles(*Find(map, "s1")), 0u);
  for (uint32_t shard = 0; shard < 8; ++shard) EXPECT_EQ(Replicas(map, shard).size(), 2u) << shard;
  auto done = state->Drain(DrainReq("s1"));
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->roles_to_move(), 0u);
  // It takes no role when others rebalance.
  Settle(*state, clock_);
  EXPECT_EQ(Roles(*Find(state->Map(), "s1")), 0u);
  // A restart under a new epoch ends the drain.
  ASSERT_TRUE(state->Join(MakeJoin("s1", 2, 11)).ok());
  EXPECT_FALSE(Find(state->Map(), "s1")->draining());
}

TEST_F(CoordinatorStateTest, DrainOfTheLastServerThatCouldHoldItsShardsIsRefused) {
  auto state = Open(Config(2, 4, 2));
  JoinAll(*state, {"", ""});
  EXPECT_EQ(state->Drain(DrainReq("nobody")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(state->Drain(DrainReq("not an id")).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(state->Leave(LeaveReq("s0", 1)).ok());
  const uint64_t version = state->version();
  auto refused = state->Drain(DrainReq("s1"));
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("shards 0, 1, 2, 3"), std::string::npos) << refused.status();
  EXPECT_EQ(state->version(), version);
  EXPECT_FALSE(Find(state->Map(), "s1")->draining());
}

TEST_F(CoordinatorStateTest, AFreshPlacementIsLeftAlone) {
  // The pass runs every few milliseconds: on a placement it did not make
  // it must find nothing to do, zones of unequal sizes included.
  const std::vector<std::tuple<uint32_t, uint32_t, std::vector<std::string>>> layouts = {
      {16, 3, {"", "", ""}},
      {10, 3, {"", "", "", ""}},
      {64, 2, {"", "", "", "", ""}},
      {12, 3, {"a", "a", "b", "b", "c", "c"}},
      {32, 3, {"a", "a", "a", "a", "b"}},  // b's only server backs up every shard
      {7, 1, {"", ""}},
  };
  for (const auto& [shards, replicas, zones] : layouts) {
    SCOPED_TRACE(std::to_string(zones.size()) + " servers, " + std::to_string(shards) + " shards, R " +
                 std::to_string(replicas) + ", zones " + zones.front() + ".." + zones.back());
    data_ = std::make_shared<MemoryStoreData>();
    auto state = Open(Config(static_cast<uint32_t>(zones.size()), shards, replicas));
    JoinAll(*state, zones);
    const uint64_t version = state->version();
    EXPECT_EQ(*state->Rebalance(), 0);
    EXPECT_EQ(state->version(), version);
  }
}

TEST_F(CoordinatorStateTest, ANewPrimaryLostDuringAHandoverIsFailedOverAsUsual) {
  auto state = Open(Config(3, 3, 2));
  JoinAll(*state, {"", "", ""});
  ASSERT_TRUE(state->Drain(DrainReq("s0")).ok());
  ASSERT_GT(*state->Rebalance(), 0);
  ASSERT_EQ(Replicas(state->Map(), 0), (std::vector<std::string>{"s1", "s0"}));
  ASSERT_EQ(state->Map().shard_replicas(0).handover_from(), "s0");
  // The new primary has no write to report during the handover: the old
  // one stays its backup.
  auto report = state->ReportReplicaFailure(Report("s1", 1, "s0", {0}));
  EXPECT_EQ(report.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Replicas(state->Map(), 0), (std::vector<std::string>{"s1", "s0"}));
  // s1 dies: fenced, then its first UP backup (s0, still holding every
  // write) is promoted and the handover ends with it.
  ASSERT_TRUE(state->Leave(LeaveReq("s1", 1)).ok());
  EXPECT_EQ(Excluded(*state), (std::vector<std::string>{"s1"}));
  clock_.Advance(FenceWait(state->config().lease));
  EXPECT_GE(*state->PromoteFenced(), 1);
  const v1::ClusterMap map = state->Map();
  ASSERT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  EXPECT_EQ(Replicas(map, 0), (std::vector<std::string>{"s0"}));
  EXPECT_TRUE(map.shard_replicas(0).handover_from().empty());
}

TEST_F(CoordinatorStateTest, ReplaceAfterIsValidated) {
  CoordinatorConfig c = Config();
  c.replace_after = kMaxReplaceAfter + milliseconds(1);
  EXPECT_EQ(ValidateConfig(c).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ValidateConfig(c).message().find("--replace_after_ms"), std::string::npos);
  c.replace_after = milliseconds(-1);
  EXPECT_EQ(ValidateConfig(c).code(), StatusCode::kInvalidArgument);
  c.replace_after = milliseconds(0);
  EXPECT_TRUE(ValidateConfig(c).ok());
}

}  // namespace
}  // namespace rkv::coordinator
