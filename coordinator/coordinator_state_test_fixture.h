// The fixture and helpers of CoordinatorState's tests (coordinator_*_test.cc):
// a state over an in-memory store and a fake clock, configurations, request
// builders, and the map readers the tests check with.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/coordinator_state.h"
#include "coordinator/test_util.h"
#include "proto/validation.h"

namespace rkv::coordinator {

using std::chrono::milliseconds;
using testing::FakeClock;
using testing::MakeJoin;
using testing::MemoryStore;
using testing::MemoryStoreData;
using testing::TempDir;

inline CoordinatorConfig Config(uint32_t servers = 3, uint32_t shards = 10, uint32_t replicas = 0) {
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
    auto state =
        CoordinatorState::Open(config, std::make_unique<MemoryStore>(data_), clock_.AsClock(), clock_.AsWallClock());
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

inline const v1::ServerInfo* Find(const v1::ClusterMap& map, const std::string& id) {
  for (const auto& s : map.servers()) {
    if (s.server_id() == id) return &s;
  }
  return nullptr;
}

inline std::vector<std::string> Replicas(const v1::ClusterMap& map, uint32_t shard) {
  const auto& ids = map.shard_replicas(static_cast<int>(shard)).server_ids();
  return std::vector<std::string>(ids.begin(), ids.end());
}

// Joins servers "s0".."s<N-1>" in that order, server i in zones[i].
inline v1::ClusterMap JoinAll(CoordinatorState& state, const std::vector<std::string>& zones) {
  for (size_t i = 0; i < zones.size(); ++i) {
    auto j = state.Join(MakeJoin("s" + std::to_string(i), 1, static_cast<uint32_t>(i), zones[i]));
    EXPECT_TRUE(j.ok()) << j.status();
  }
  return state.Map();
}

inline v1::ReportReplicaFailureRequest Report(const std::string& reporter, uint64_t epoch, const std::string& backup,
                                       std::vector<uint32_t> shards, const std::string& reason = "timed out") {
  v1::ReportReplicaFailureRequest r;
  r.set_server_id(reporter);
  r.set_epoch(epoch);
  r.set_backup_id(backup);
  for (uint32_t s : shards) r.add_shards(s);
  r.set_reason(reason);
  return r;
}

inline std::vector<std::string> Excluded(const CoordinatorState& state) { return state.Lease().excluded_servers; }

inline std::vector<uint32_t> Shards(const v1::ClusterMap& map, const std::string& id) {
  const v1::ServerInfo* s = Find(map, id);
  return s == nullptr ? std::vector<uint32_t>() : std::vector<uint32_t>(s->shards().begin(), s->shards().end());
}

inline std::vector<std::string> Syncing(const v1::ClusterMap& map, uint32_t shard) {
  const auto& ids = map.shard_replicas(static_cast<int>(shard)).syncing_ids();
  return std::vector<std::string>(ids.begin(), ids.end());
}

inline CoordinatorConfig Replacing(uint32_t servers, uint32_t shards, uint32_t replicas,
                            milliseconds replace_after = milliseconds(10000)) {
  CoordinatorConfig c = Config(servers, shards, replicas);
  c.replace_after = replace_after;
  return c;
}

inline v1::ReportCaughtUpRequest CaughtUp(const std::string& id, uint64_t epoch,
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

inline v1::DrainRequest DrainReq(const std::string& id) {
  v1::DrainRequest r;
  r.set_server_id(id);
  return r;
}

inline v1::ForgetRequest ForgetReq(const std::string& id) {
  v1::ForgetRequest r;
  r.set_server_id(id);
  return r;
}

// Every UP server reports every shard it syncs as caught up from the
// shard's current primary; returns how many moved.
inline int CatchUpAll(CoordinatorState& state) {
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

inline bool AnyHandover(const v1::ClusterMap& map) {
  for (const auto& r : map.shard_replicas()) {
    if (!r.handover_from().empty()) return true;
  }
  return false;
}

// What every step of a move must keep: a server enters a shard's replicas
// only after syncing it (or as its old primary, kept as a backup during a
// handover), and a shard keeps at least min(R, what it had) replicas.
inline void CheckStep(const v1::ClusterMap& before, const v1::ClusterMap& after) {
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
inline int Settle(CoordinatorState& state, FakeClock& clock, bool check = true) {
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

inline size_t Roles(const v1::ServerInfo& s) {
  return static_cast<size_t>(s.shards_size() + s.backup_shards_size() + s.syncing_shards_size());
}

}  // namespace rkv::coordinator
