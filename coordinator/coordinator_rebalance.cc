// CoordinatorState: the first assignment, catch-up reports and Rebalance,
// each deciding through the planners of placement.h.
#include "coordinator/coordinator_state.h"

#include <algorithm>
#include <string>
#include <utility>

#include <glog/logging.h>

#include "coordinator/coordinator_state_util.h"
#include "proto/validation.h"

namespace rkv::coordinator {

using std::chrono::steady_clock;

void CoordinatorState::AssignShards(std::vector<Server>* next) const {
  std::vector<std::string> zones;
  zones.reserve(next->size());
  for (Server& s : *next) {
    s.info.clear_shards();
    s.info.clear_backup_shards();
    zones.push_back(s.info.zone());
  }
  const std::vector<ShardRoles> roles = coordinator::AssignShards(zones, config_.shard_count, replicas_);
  for (uint32_t shard = 0; shard < roles.size(); ++shard) {
    (*next)[roles[shard].primary].info.add_shards(shard);
    for (size_t b : roles[shard].backups) (*next)[b].info.add_backup_shards(shard);
  }
}

StatusOr<v1::ReportCaughtUpResponse> CoordinatorState::ReportCaughtUp(const v1::ReportCaughtUpRequest& r,
                                                                      std::string_view credential) {
  RKV_RETURN_IF_ERROR(control::ValidateReportCaughtUp(r));
  if (static_cast<uint32_t>(r.shards_size()) > config_.shard_count) {
    return InvalidArgument("shards lists " + std::to_string(r.shards_size()) + " entries, more than the " +
                           std::to_string(config_.shard_count) + " shards");
  }
  for (const v1::CaughtUpShard& c : r.shards()) {
    if (c.shard() >= config_.shard_count) {
      return InvalidArgument("shard " + std::to_string(c.shard()) + " is not below the shard count " +
                             std::to_string(config_.shard_count));
    }
  }
  MutexLock lock(mu_);
  const int found = FindLocked(r.server_id());
  if (found < 0) return NotFound("unknown server " + r.server_id() + "; join first");
  const size_t index = static_cast<size_t>(found);
  const Server& server = servers_[index];
  RKV_RETURN_IF_ERROR(CheckBound(server, credential, "ReportCaughtUp"));
  if (r.epoch() != server.info.epoch()) {
    return FailedPrecondition("server " + r.server_id() + ": epoch " + std::to_string(r.epoch()) +
                              " is not the joined epoch " + std::to_string(server.info.epoch()) + "; join again");
  }
  if (server.info.state() != v1::UP) {
    return FailedPrecondition("server " + r.server_id() + " is marked DOWN; join again");
  }
  if (!assigned_) return FailedPrecondition("shards are not assigned yet: nothing to catch up on");
  std::vector<ShardRoles> roles = RolesOf(servers_);
  std::vector<uint32_t> moved, refused;
  for (const v1::CaughtUpShard& c : r.shards()) {
    ShardRoles& shard = roles[c.shard()];
    const auto it = std::find(shard.syncing.begin(), shard.syncing.end(), index);
    const bool primary_kept = shard.primary != kNone && servers_[shard.primary].info.server_id() == c.primary_id();
    // A fetch under a map older than the one that (last) made it syncing:
    // writes may have gone unforwarded to it in between. 0: not said (a
    // server older than this check), taken as current.
    const auto since = syncing_since_.find({c.shard(), r.server_id()});
    const bool fetched_since = c.sync_map_version() == 0 || since == syncing_since_.end() ||
                               c.sync_map_version() >= since->second;
    if (it == shard.syncing.end() || !primary_kept || !fetched_since) {
      // Not syncing it (any more, or a duplicate entry already moved), the
      // primary it fetched from is no longer the primary, or the role is
      // newer than the fetch.
      if (std::find(moved.begin(), moved.end(), c.shard()) == moved.end()) refused.push_back(c.shard());
      continue;
    }
    shard.syncing.erase(it);
    shard.backups.push_back(index);
    moved.push_back(c.shard());
  }
  std::sort(refused.begin(), refused.end());
  refused.erase(std::unique(refused.begin(), refused.end()), refused.end());
  v1::ReportCaughtUpResponse resp;
  resp.mutable_refused_shards()->Assign(refused.begin(), refused.end());
  if (!moved.empty()) {
    std::vector<Server> next = servers_;
    std::vector<size_t> changed;
    ApplyRoles(roles, &next, &changed);
    RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), changed, assigned_));
    LOG(INFO) << Describe(servers_[index]) << " caught up on " << moved.size()
              << " shards and is now a replica of them (" << refused.size() << " refused); map version "
              << version_;
  } else if (!refused.empty()) {
    LOG(INFO) << Describe(servers_[index]) << " reported " << refused.size()
              << " shards caught up that it no longer syncs from that primary; map version " << version_;
  }
  resp.set_map_version(version_);
  return resp;
}

StatusOr<int> CoordinatorState::Rebalance() {
  MutexLock lock(mu_);
  if (!assigned_) return 0;
  const steady_clock::time_point now = clock_();
  const size_t n = servers_.size();
  for (auto it = reported_at_.begin(); it != reported_at_.end();) {
    it = now >= it->second + config_.heartbeat_timeout ? reported_at_.erase(it) : std::next(it);
  }
  RebalanceInput input;
  input.roles = RolesOf(servers_);
  input.replicas = replicas_;
  input.servers.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const v1::ServerInfo& info = servers_[i].info;
    PlacementServer& p = input.servers[i];
    p.zone = info.zone();
    p.up = info.state() == v1::UP;
    p.draining = info.draining();
    p.reported = reported_at_.count(info.server_id()) != 0;
    const auto d = down_since_.find(info.server_id());
    p.replace = config_.replace_after.count() > 0 && d != down_since_.end() && now >= d->second + config_.replace_after;
  }
  // A handover ends once every lease of the map before it has ended.
  input.handover_done.assign(input.roles.size(), false);
  for (uint32_t shard = 0; shard < input.roles.size(); ++shard) {
    if (input.roles[shard].handover_from == kNone) continue;
    const auto since = handover_since_.emplace(shard, now).first->second;
    input.handover_done[shard] = now >= since + FenceWait(config_.lease);
  }
  const RebalancePlan plan = PlanRebalance(input);

  std::vector<Server> next = servers_;
  std::vector<size_t> changed;
  ApplyRoles(plan.roles, &next, &changed);
  if (changed.empty()) return 0;
  RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), changed, assigned_));
  const steady_clock::time_point committed = clock_();
  for (uint32_t shard : plan.ended) handover_since_.erase(shard);
  for (uint32_t shard : plan.begun) handover_since_[shard] = committed;
  int replaced_total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (plan.replaced[i] == 0) continue;
    replaced_total += plan.replaced[i];
    LOG(INFO) << Describe(servers_[i]) << " DOWN for " << Seconds(now - down_since_[servers_[i].info.server_id()])
              << ": its " << plan.replaced[i] << " backup and syncing roles are replaced; map version " << version_;
  }
  LOG(INFO) << "rebalanced: " << plan.added << " syncing roles added to shards below " << replicas_ << " replicas, "
            << plan.moves << " backup roles and " << plan.balance_handovers << " primaries moving for balance, "
            << plan.drain_handovers << " handovers from draining servers, " << plan.handovers_ended
            << " handovers ended, " << plan.trimmed << " roles of draining or surplus servers removed, "
            << replaced_total << " roles of long-DOWN servers removed; map version " << version_;
  return plan.Total();
}

}  // namespace rkv::coordinator
