// CoordinatorState tests: Joining, heartbeats, leaving, draining and forgetting; versions, failed
// commits, bad requests and configuration; watching the map.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <string>
#include <vector>

#include "coordinator/coordinator_state.h"
#include "coordinator/coordinator_state_test_fixture.h"
#include "proto/validation.h"

namespace rkv::coordinator {
namespace {

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

// Takes `id` out of a cluster as a server gone for good is taken out: it
// leaves, its primaries move to backups, and after replace_after its
// backup roles go to others. It is then DOWN and holds no role.
void LoseForGood(CoordinatorState& state, FakeClock& clock, const std::string& id, uint64_t epoch) {
  v1::LeaveRequest leave;
  leave.set_server_id(id);
  leave.set_epoch(epoch);
  ASSERT_TRUE(state.Leave(leave).ok());
  clock.Advance(FenceWait(state.config().lease));
  ASSERT_TRUE(state.PromoteFenced().ok());
  clock.Advance(state.config().replace_after);
  // Unchecked: a replacement takes a replica out before another catches up.
  Settle(state, clock, /*check=*/false);
  const v1::ClusterMap map = state.Map();  // Find points into it
  const v1::ServerInfo* gone = Find(map, id);
  ASSERT_NE(gone, nullptr);
  ASSERT_EQ(gone->state(), v1::DOWN);
  ASSERT_EQ(Roles(*gone), 0u) << gone->ShortDebugString();
}

TEST_F(CoordinatorStateTest, ForgetIsRefusedForUnknownUpOrRoleHoldingServers) {
  auto state = Open(Config(3, 6, 2));
  JoinAll(*state, {"", "", ""});
  EXPECT_EQ(state->Forget(ForgetReq("nobody")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(state->Forget(ForgetReq("")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state->Forget(ForgetReq("not an id")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state->Forget(ForgetReq(std::string(control::kMaxServerIdBytes + 1, 's'))).status().code(),
            StatusCode::kInvalidArgument);
  const uint64_t version = state->version();
  const int commits = data_->commits();

  auto up = state->Forget(ForgetReq("s2"));
  EXPECT_EQ(up.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(up.status().message().find("server s2: it is UP"), std::string::npos) << up.status();

  // DOWN, but still the primary of 2 shards and a backup of 2 others.
  ASSERT_TRUE(state->Leave(LeaveReq("s2", 1)).ok());
  const v1::ClusterMap after_leave = state->Map();  // Find points into it
  const v1::ServerInfo* s2 = Find(after_leave, "s2");
  ASSERT_EQ(s2->shards_size(), 2);
  ASSERT_EQ(s2->backup_shards_size(), 2);
  auto roles = state->Forget(ForgetReq("s2"));
  EXPECT_EQ(roles.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(roles.status().message().find("still holds roles in 4 shards (1, 2, 4, 5; 2 as primary, 2 as backup, "
                                          "0 syncing): wait for re-replication or drain it"),
            std::string::npos)
      << roles.status();
  // Nothing changed but the leave.
  EXPECT_EQ(state->version(), version + 1);
  EXPECT_EQ(data_->commits(), commits + 1);
  EXPECT_EQ(state->Map().servers_size(), 3);
}

TEST_F(CoordinatorStateTest, ForgettingADownServerWithoutRolesRemovesItInOneVersion) {
  auto state = Open(Replacing(3, 6, 2));
  JoinAll(*state, {"", "", ""});
  ASSERT_TRUE(state->Join(MakeJoin("s3", 1, 3)).ok());  // N = 4, one above --servers
  Settle(*state, clock_);
  ASSERT_NO_FATAL_FAILURE(LoseForGood(*state, clock_, "s1", 1));
  const uint64_t version = state->version();
  const int commits = data_->commits();

  // A failed commit changes nothing.
  data_->SetFailing(true);
  EXPECT_EQ(state->Forget(ForgetReq("s1")).status().code(), StatusCode::kInternal);
  data_->SetFailing(false);
  EXPECT_EQ(state->version(), version);
  ASSERT_NE(Find(state->Map(), "s1"), nullptr);

  auto forgot = state->Forget(ForgetReq("s1"));
  ASSERT_TRUE(forgot.ok()) << forgot.status();
  EXPECT_EQ(forgot->map_version(), version + 1);
  EXPECT_EQ(state->version(), version + 1);
  EXPECT_EQ(data_->commits(), commits + 1);
  const v1::ClusterMap map = state->Map();
  ASSERT_TRUE(control::ValidateClusterMap(map).ok()) << control::ValidateClusterMap(map);
  EXPECT_EQ(Find(map, "s1"), nullptr);
  ASSERT_EQ(map.servers_size(), 3);
  EXPECT_EQ(map.servers(0).server_id(), "s0");
  EXPECT_EQ(map.servers(1).server_id(), "s2");
  EXPECT_EQ(map.servers(2).server_id(), "s3");
  EXPECT_EQ(map.expected_servers(), 3u);  // N shrank with it
  for (uint32_t shard = 0; shard < 6; ++shard) EXPECT_EQ(Replicas(map, shard).size(), 2u) << shard;
  // Its record is gone from the store, and the join order stays dense.
  auto stored = data_->Load();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->servers.size(), 3u);
  for (const auto& s : stored->servers) {
    const std::string& id = s.info().server_id();
    EXPECT_EQ(s.join_order(), id == "s0" ? 0u : id == "s2" ? 1u : 2u) << id;
  }
  EXPECT_EQ(state->Forget(ForgetReq("s1")).status().code(), StatusCode::kNotFound);
  // Its old incarnation is unknown now: it must join again.
  EXPECT_EQ(state->Heartbeat(Beat("s1", 1)).status().code(), StatusCode::kNotFound);

  // A coordinator reopening the store finds the same map.
  auto reopened = Open(Replacing(3, 6, 2));
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->Map().SerializeAsString(), map.SerializeAsString());

  // N is --servers now: a second server may not be forgotten (a
  // coordinator would refuse the smaller store).
  ASSERT_NO_FATAL_FAILURE(LoseForGood(*state, clock_, "s2", 1));
  const uint64_t before = state->version();
  auto too_few = state->Forget(ForgetReq("s2"));
  EXPECT_EQ(too_few.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(too_few.status().message().find("would keep 2 servers, fewer than --servers 3"), std::string::npos)
      << too_few.status();
  EXPECT_NE(Find(state->Map(), "s2"), nullptr);
  EXPECT_EQ(state->version(), before);
}

TEST_F(CoordinatorStateTest, AForgottenIdJoinsAgainAsANewServer) {
  auto state = Open(Replacing(3, 6, 2));
  JoinAll(*state, {"a", "b", "c"});
  ASSERT_TRUE(state->Join(MakeJoin("s3", 1, 3, "d")).ok());
  Settle(*state, clock_);
  ASSERT_NO_FATAL_FAILURE(LoseForGood(*state, clock_, "s1", 1));
  ASSERT_TRUE(state->Forget(ForgetReq("s1")).ok());
  const uint64_t version = state->version();

  // Same epoch as before, another zone and addresses: none of that is
  // checked against the forgotten server.
  auto joined = state->Join(MakeJoin("s1", 1, 7, "e"));
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(state->version(), version + 1);
  EXPECT_TRUE(joined->shards().empty());
  v1::ClusterMap map = state->Map();
  ASSERT_EQ(map.servers_size(), 4);
  EXPECT_EQ(map.servers(3).server_id(), "s1");  // last in join order
  EXPECT_EQ(map.servers(3).state(), v1::UP);
  EXPECT_EQ(map.servers(3).zone(), "e");
  EXPECT_EQ(map.servers(3).down_since_unix_ms(), 0u);
  EXPECT_EQ(map.expected_servers(), 4u);
  ASSERT_TRUE(state->Heartbeat(Beat("s1", 1)).ok());
  // It gets its share of roles as any new server does.
  Settle(*state, clock_);
  map = state->Map();
  EXPECT_GT(Roles(*Find(map, "s1")), 0u);
  for (uint32_t shard = 0; shard < 6; ++shard) EXPECT_EQ(Replicas(map, shard).size(), 2u) << shard;
  // A forget before the cluster is complete leaves N as it is.
  auto data = std::make_shared<MemoryStoreData>();
  auto forming = CoordinatorState::Open(Config(3, 6), std::make_unique<MemoryStore>(data), clock_.AsClock());
  ASSERT_TRUE(forming.ok());
  ASSERT_TRUE((*forming)->Join(MakeJoin("a", 1, 0)).ok());
  ASSERT_TRUE((*forming)->Join(MakeJoin("b", 1, 1)).ok());
  ASSERT_TRUE((*forming)->Leave(LeaveReq("a", 1)).ok());
  ASSERT_TRUE((*forming)->Forget(ForgetReq("a")).ok());
  EXPECT_EQ((*forming)->Map().expected_servers(), 3u);
  ASSERT_TRUE((*forming)->Join(MakeJoin("c", 1, 2)).ok());
  ASSERT_TRUE((*forming)->Join(MakeJoin("a", 1, 0)).ok());  // the third: shards are assigned
  map = (*forming)->Map();
  EXPECT_EQ(map.shard_owner(0), "b");
  EXPECT_EQ(map.shard_owner(2), "a");
}

TEST_F(CoordinatorStateTest, WhenAServerWentDownIsRecordedOnItsRecord) {
  auto state = Open(Config(2, 4));
  ASSERT_TRUE(state->Join(MakeJoin("a", 1, 0)).ok());
  ASSERT_TRUE(state->Join(MakeJoin("b", 1, 1)).ok());
  EXPECT_EQ(Find(state->Map(), "a")->down_since_unix_ms(), 0u);
  // The fake wall clock reads 3,600,000 ms at first.
  clock_.Advance(milliseconds(1500));
  ASSERT_TRUE(state->Leave(LeaveReq("a", 1)).ok());
  EXPECT_EQ(Find(state->Map(), "a")->down_since_unix_ms(), 3'601'500u);
  ASSERT_TRUE(state->Heartbeat(Beat("b", 1)).ok());
  clock_.Advance(milliseconds(3001));
  EXPECT_EQ(*state->ExpireHeartbeats(), 1);
  EXPECT_EQ(Find(state->Map(), "b")->down_since_unix_ms(), 3'604'501u);
  EXPECT_EQ(Find(state->Map(), "a")->down_since_unix_ms(), 3'601'500u);  // not stamped again
  // Stored with the record: a reopened coordinator reports the same.
  auto reopened = Open(Config(2, 4));
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(Find(reopened->Map(), "a")->down_since_unix_ms(), 3'601'500u);
  // Back UP: cleared.
  ASSERT_TRUE(state->Join(MakeJoin("a", 1, 0)).ok());
  EXPECT_EQ(Find(state->Map(), "a")->down_since_unix_ms(), 0u);
  ASSERT_TRUE(state->Join(MakeJoin("b", 2, 1)).ok());
  EXPECT_EQ(Find(state->Map(), "b")->down_since_unix_ms(), 0u);
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
