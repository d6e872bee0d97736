// CoordinatorState tests: Failover and leases: replica failure reports, fencing, promotion, a
// restart's syncing roles, a handover's new primary lost.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "coordinator/coordinator_state.h"
#include "coordinator/coordinator_state_test_fixture.h"
#include "proto/validation.h"

namespace rkv::coordinator {
namespace {

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

TEST_F(CoordinatorStateTest, AProbeConfirmsASilentServerDownOnlyWhenNoHeartbeatCameMeanwhile) {
  auto state = Open(Config(3, 6, 3));
  JoinAll(*state, {"", "", ""});
  clock_.Advance(milliseconds(700));
  ASSERT_TRUE(state->Heartbeat(Beat("s1", 1)).ok());
  ASSERT_TRUE(state->Heartbeat(Beat("s2", 1)).ok());
  // Only s0 has been silent for 600 ms; 800 ms is longer than anyone's.
  const auto silent = state->SilentServers(milliseconds(600));
  ASSERT_EQ(silent.size(), 1u);
  EXPECT_EQ(silent[0].server_id, "s0");
  EXPECT_EQ(silent[0].epoch, 1u);
  EXPECT_EQ(silent[0].admin_address, "127.0.0.1:8700");
  EXPECT_TRUE(state->SilentServers(milliseconds(800)).empty());
  EXPECT_TRUE(state->SilentServers(milliseconds(0)).empty());
  ASSERT_TRUE(state->ProbeTargetOf("s1").has_value());
  EXPECT_FALSE(state->ProbeTargetOf("nobody").has_value());

  // A heartbeat of s1 arrived after its probe started: alive.
  const uint64_t version = state->version();
  EXPECT_FALSE(*state->ConfirmSuspect("s1", 1, clock_.Now() - milliseconds(1), "test"));
  // Another incarnation than the one probed, or an unknown id: nothing.
  EXPECT_FALSE(*state->ConfirmSuspect("s0", 2, clock_.Now(), "test"));
  EXPECT_FALSE(*state->ConfirmSuspect("nobody", 1, clock_.Now(), "test"));
  EXPECT_EQ(state->version(), version);
  EXPECT_TRUE(Excluded(*state).empty());

  // s0 is silent since before the probe: DOWN and fenced long before the
  // 3 s heartbeat timeout, in one version.
  EXPECT_TRUE(*state->ConfirmSuspect("s0", 1, clock_.Now(), "test"));
  EXPECT_EQ(state->version(), version + 1);
  EXPECT_EQ(Find(state->Map(), "s0")->state(), v1::DOWN);
  EXPECT_EQ(Excluded(*state), (std::vector<std::string>{"s0"}));
  EXPECT_FALSE(state->ProbeTargetOf("s0").has_value());
  EXPECT_FALSE(*state->ConfirmSuspect("s0", 1, clock_.Now(), "again"));  // already DOWN
  EXPECT_EQ(state->version(), version + 1);

  // The fence is the same as for missed heartbeats: no promotion before
  // every lease that may cover s0 has ended.
  EXPECT_EQ(*state->PromoteFenced(), 0);
  clock_.Advance(FenceWait(state->config().lease));
  EXPECT_EQ(*state->PromoteFenced(), 2);
  EXPECT_EQ(Replicas(state->Map(), 0), (std::vector<std::string>{"s1"}));
  // A heartbeat of the suspect is refused: it must join again.
  EXPECT_EQ(state->Heartbeat(Beat("s0", 1)).status().code(), StatusCode::kFailedPrecondition);

  // A failed commit leaves the server UP.
  data_->SetFailing(true);
  EXPECT_EQ(state->ConfirmSuspect("s1", 1, clock_.Now() + milliseconds(1), "test").status().code(),
            StatusCode::kInternal);
  data_->SetFailing(false);
  EXPECT_EQ(Find(state->Map(), "s1")->state(), v1::UP);
}

TEST_F(CoordinatorStateTest, ASuspicionFenceKeepsTheSuspectOutOfLeasesWhileItIsProbed) {
  auto state = Open(Config(3, 6, 3));
  JoinAll(*state, {"", "", ""});
  const uint64_t version = state->version();
  // A probe of s1 begins: leases granted from now on do not cover it; the
  // map does not change.
  const auto begun = state->BeginProbe("s1", 1);
  EXPECT_EQ(begun, clock_.Now());
  EXPECT_TRUE(state->SuspicionFenced("s1"));
  EXPECT_EQ(Excluded(*state), (std::vector<std::string>{"s1"}));
  EXPECT_EQ(state->version(), version);
  // It answered: leases cover it again.
  state->EndProbe("s1");
  EXPECT_FALSE(state->SuspicionFenced("s1"));
  EXPECT_TRUE(Excluded(*state).empty());

  // A heartbeat during the probe ends the fence at once, and the lost
  // probe then marks nothing.
  const auto again = state->BeginProbe("s1", 1);
  clock_.Advance(milliseconds(10));
  ASSERT_TRUE(state->Heartbeat(Beat("s1", 1)).ok());
  EXPECT_TRUE(Excluded(*state).empty());
  EXPECT_FALSE(*state->ConfirmSuspect("s1", 1, again, "test"));
  state->EndProbe("s1");
  EXPECT_EQ(Find(state->Map(), "s1")->state(), v1::UP);

  // Another incarnation than the map's, or an unknown id: no fence.
  state->BeginProbe("s1", 2);
  state->BeginProbe("nobody", 1);
  EXPECT_TRUE(Excluded(*state).empty());
  EXPECT_EQ(state->version(), version);
}

TEST_F(CoordinatorStateTest, AConfirmedSuspectsFenceCountsFromItsProbe) {
  auto state = Open(Config(3, 6, 3));
  JoinAll(*state, {"", "", ""});
  clock_.Advance(milliseconds(700));
  ASSERT_TRUE(state->Heartbeat(Beat("s1", 1)).ok());
  ASSERT_TRUE(state->Heartbeat(Beat("s2", 1)).ok());
  const auto begun = state->BeginProbe("s0", 1);
  // The probe takes 300 ms and gets no answer: s0 is DOWN, and since no
  // lease granted after the probe began covers it, its shards may move
  // FenceWait after that moment, not after the DOWN.
  clock_.Advance(milliseconds(300));
  EXPECT_TRUE(*state->ConfirmSuspect("s0", 1, begun, "test"));
  state->EndProbe("s0");
  EXPECT_FALSE(state->SuspicionFenced("s0"));
  EXPECT_EQ(Excluded(*state), (std::vector<std::string>{"s0"}));  // the fence of a DOWN server stays
  clock_.Advance(FenceWait(state->config().lease) - milliseconds(301));
  EXPECT_EQ(*state->PromoteFenced(), 0);
  clock_.Advance(milliseconds(1));
  EXPECT_EQ(*state->PromoteFenced(), 2);
  EXPECT_EQ(Replicas(state->Map(), 0), (std::vector<std::string>{"s1"}));
  EXPECT_TRUE(Excluded(*state).empty());
}

TEST_F(CoordinatorStateTest, SuspectAfterMustLieBetweenTheHeartbeatPeriodAndTheTimeout) {
  CoordinatorConfig c = Config();  // heartbeat 500 ms, lease 1000: servers beat every 333 ms
  EXPECT_EQ(ServerHeartbeatPeriod(c), milliseconds(333));
  c.suspect_after = milliseconds(716);
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.suspect_after = milliseconds(0);
  EXPECT_TRUE(ValidateConfig(c).ok());
  for (int bad : {333, 100, 3000, 5000}) {
    c.suspect_after = milliseconds(bad);
    const Status s = ValidateConfig(c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--suspect_after_ms"), std::string::npos) << s;
  }
  c.suspect_after = milliseconds(716);
  for (int bad : {9, 10'001}) {
    c.probe_timeout = milliseconds(bad);
    EXPECT_NE(ValidateConfig(c).message().find("--probe_timeout_ms"), std::string::npos) << bad;
  }
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

TEST_F(CoordinatorStateTest, ASilentPrimaryIsFencedThenItsShardsPromotedOverItsUpBackupsAfterTheWait) {
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
  // s0's two shards spread over its backups: s1 and s2 led two shards
  // each, so shard 0 goes to its first backup, s1, and shard 3 to s2, which
  // then leads fewer (no balancing handover needed after the failover).
  EXPECT_EQ(map.shard_owner(0), "s1");
  EXPECT_EQ(map.shard_owner(3), "s2");
  EXPECT_EQ(Replicas(map, 0), (std::vector<std::string>{"s1"}));  // the new primary alone
  EXPECT_EQ(Replicas(map, 3), (std::vector<std::string>{"s2"}));
  for (uint32_t shard : {1u, 2u, 4u, 5u}) {
    EXPECT_EQ(Replicas(map, shard), Replicas(start, shard)) << shard;  // other shards untouched
  }
  const v1::ServerInfo* s0 = Find(map, "s0");
  EXPECT_EQ(s0->state(), v1::DOWN);
  EXPECT_EQ(s0->epoch(), 1u);
  EXPECT_TRUE(s0->shards().empty());
  EXPECT_EQ(Shards(map, "s1"), (std::vector<uint32_t>{0, 1, 4}));
  EXPECT_EQ(Shards(map, "s2"), (std::vector<uint32_t>{2, 3, 5}));
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

}  // namespace
}  // namespace rkv::coordinator
