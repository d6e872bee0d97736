// CoordinatorState tests: Placement as CoordinatorState applies it: the first assignment over
// zones, catch-up reports, replacement, rebalancing and handovers.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <map>
#include <tuple>
#include <string>
#include <vector>

#include "coordinator/coordinator_state.h"
#include "coordinator/coordinator_state_test_fixture.h"
#include "proto/validation.h"

namespace rkv::coordinator {
namespace {

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

}  // namespace
}  // namespace rkv::coordinator
