// CoordinatorState tests: Joining, heartbeats, leaving and draining; versions, failed commits, bad
// requests and configuration; watching the map.
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
