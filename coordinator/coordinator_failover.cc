// CoordinatorState: leases, fencing, promotion of backups, replica failure
// reports.
#include "coordinator/coordinator_state.h"

#include <algorithm>
#include <string>
#include <utility>

#include <glog/logging.h>

#include "coordinator/coordinator_state_util.h"
#include "proto/validation.h"

namespace rkv::coordinator {

using std::chrono::steady_clock;

void CoordinatorState::PublishLeaseLocked() {
  LeaseView view;
  view.map_version = version_;
  for (const Server& s : servers_) {
    const std::string& id = s.info.server_id();
    if (fenced_since_.count(id) != 0 || suspect_fenced_since_.count(id) != 0) view.excluded_servers.push_back(id);
  }
  MutexLock lock(lease_mu_);
  lease_view_ = std::move(view);
}

LeaseView CoordinatorState::Lease() const {
  MutexLock lock(lease_mu_);
  return lease_view_;
}

bool CoordinatorState::FenceableLocked(size_t i) const {
  return servers_[i].info.state() == v1::DOWN && LeadsABackedShardLocked(i);
}

bool CoordinatorState::LeadsABackedShardLocked(size_t i) const {
  const v1::ServerInfo& x = servers_[i].info;
  if (!assigned_ || x.shards().empty()) return false;
  for (size_t j = 0; j < servers_.size(); ++j) {
    const v1::ServerInfo& b = servers_[j].info;
    if (j == i || b.state() != v1::UP) continue;
    for (uint32_t shard : b.backup_shards()) {
      if (Contains(x.shards(), shard)) return true;
    }
  }
  return false;
}

void CoordinatorState::FenceLocked(size_t i, const std::string& why) {
  const std::string& id = servers_[i].info.server_id();
  if (fenced_since_.count(id) != 0 || !FenceableLocked(i)) return;
  fenced_since_[id] = clock_();  // provisional: the view must exclude it first
  PublishLeaseLocked();
  steady_clock::time_point since = clock_();
  // A suspicion fence (BeginProbe) has kept it out of every lease since
  // it began: the fence counts from then.
  if (const auto s = suspect_fenced_since_.find(id); s != suspect_fenced_since_.end()) {
    since = std::min(since, s->second);
    suspect_fenced_since_.erase(s);
  }
  fenced_since_[id] = since;
  LOG(INFO) << Describe(servers_[i]) << " is FENCED (" << why << "): primary of "
            << servers_[i].info.shards_size() << " shards, excluded from every lease from now; those with an UP "
            << "backup move in " << FenceWait(config_.lease).count() << " ms; map version " << version_;
}

steady_clock::time_point CoordinatorState::BeginProbe(const std::string& server_id, uint64_t epoch) {
  MutexLock lock(mu_);
  const int found = FindLocked(server_id);
  if (found < 0) return clock_();
  const size_t i = static_cast<size_t>(found);
  const v1::ServerInfo& info = servers_[i].info;
  if (info.epoch() != epoch || info.state() != v1::UP || !LeadsABackedShardLocked(i) ||
      suspect_fenced_since_.count(server_id) != 0) {
    return clock_();
  }
  // As FenceLocked: the view excludes it before the moment is taken.
  suspect_fenced_since_[server_id] = clock_();
  PublishLeaseLocked();
  const steady_clock::time_point since = clock_();
  suspect_fenced_since_[server_id] = since;
  LOG(INFO) << Describe(info) << " is suspected: excluded from every lease granted while it is probed; map version "
            << version_;
  return since;
}

void CoordinatorState::EndProbe(const std::string& server_id) {
  MutexLock lock(mu_);
  EndSuspicionFenceLocked(server_id, "its probe ended");
}

bool CoordinatorState::SuspicionFenced(const std::string& server_id) const {
  MutexLock lock(mu_);
  return suspect_fenced_since_.count(server_id) != 0;
}

void CoordinatorState::EndSuspicionFenceLocked(const std::string& id, const char* why) {
  if (suspect_fenced_since_.erase(id) == 0) return;
  PublishLeaseLocked();
  LOG(INFO) << "server " << id << " is no longer suspected (" << why << "): leases cover it again; map version "
            << version_;
}

void CoordinatorState::UnfenceLocked(const std::string& id) {
  EndSuspicionFenceLocked(id, "it joined");
  if (fenced_since_.erase(id) == 0) return;
  PublishLeaseLocked();
  LOG(INFO) << "server " << id << " is no longer fenced: UP again before its shards moved; map version "
            << version_;
}

StatusOr<int> CoordinatorState::PromoteFenced() {
  MutexLock lock(mu_);
  if (!assigned_) return 0;
  for (size_t i = 0; i < servers_.size(); ++i) FenceLocked(i, "a backup of its shards is UP");
  if (fenced_since_.empty()) return 0;
  const steady_clock::time_point now = clock_();
  const size_t n = servers_.size();
  std::vector<size_t> ripe_list;  // fenced for FenceWait at least
  for (size_t i = 0; i < n; ++i) {
    const auto f = fenced_since_.find(servers_[i].info.server_id());
    if (f != fenced_since_.end() && now >= f->second + FenceWait(config_.lease)) ripe_list.push_back(i);
  }
  if (ripe_list.empty()) return 0;

  // For each shard of a ripe server: the UP backup leading the fewest
  // shards (PlanPromotions).
  std::vector<bool> up(n);
  for (size_t i = 0; i < n; ++i) up[i] = servers_[i].info.state() == v1::UP;
  const PromotionPlan plan = PlanPromotions(RolesOf(servers_), up, ripe_list);
  const std::vector<size_t>& new_primary = plan.new_primary;
  const int promoted = plan.promoted;
  if (promoted > 0) {
    // The new primary is each moved shard's only replica: the other
    // backups may lack writes the old primary forwarded to it alone. The
    // shard's syncing servers were fetching from the old primary, and a
    // handover of it ends: Rebalance adds syncing servers again, which
    // fetch from the new primary.
    std::vector<Server> next = servers_;
    std::vector<size_t> changed;
    for (size_t i = 0; i < n; ++i) {
      v1::ServerInfo& info = next[i].info;
      std::vector<uint32_t> shards;
      for (uint32_t shard : info.shards()) {
        if (new_primary[shard] == kNone) shards.push_back(shard);
      }
      google::protobuf::RepeatedField<uint32_t> backups, syncing;
      for (uint32_t shard : info.backup_shards()) {
        if (new_primary[shard] == kNone) backups.Add(shard);
      }
      for (uint32_t shard : info.syncing_shards()) {
        if (new_primary[shard] == kNone) syncing.Add(shard);
      }
      std::vector<uint32_t> handover;
      for (uint32_t shard : next[i].handover_shards) {
        if (new_primary[shard] == kNone) handover.push_back(shard);
      }
      for (uint32_t shard = 0; shard < config_.shard_count; ++shard) {
        if (new_primary[shard] == i) shards.push_back(shard);
      }
      std::sort(shards.begin(), shards.end());
      if (shards.size() == static_cast<size_t>(info.shards_size()) && backups.size() == info.backup_shards_size() &&
          syncing.size() == info.syncing_shards_size() && handover.size() == next[i].handover_shards.size() &&
          std::equal(shards.begin(), shards.end(), info.shards().begin())) {
        continue;
      }
      info.mutable_shards()->Assign(shards.begin(), shards.end());
      *info.mutable_backup_shards() = std::move(backups);
      *info.mutable_syncing_shards() = std::move(syncing);
      next[i].handover_shards = std::move(handover);
      changed.push_back(i);
    }
    RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), changed, assigned_));
    for (uint32_t shard = 0; shard < config_.shard_count; ++shard) {
      if (new_primary[shard] != kNone) handover_since_.erase(shard);
    }
  }
  for (size_t x : ripe_list) {
    fenced_since_.erase(servers_[x].info.server_id());
    LOG(INFO) << Describe(servers_[x]) << " is no longer fenced: " << plan.moved[x]
              << " of its shards promoted to their UP backups, " << plan.kept[x]
              << " stay its own (no UP backup); map version " << version_;
  }
  for (size_t i = 0; i < n; ++i) {
    int gained = 0;
    for (uint32_t shard = 0; shard < config_.shard_count; ++shard) gained += new_primary[shard] == i ? 1 : 0;
    if (gained > 0) {
      LOG(INFO) << Describe(servers_[i]) << " promoted to primary (sole replica) of " << gained
                << " shards; map version " << version_;
    }
  }
  PublishLeaseLocked();
  return promoted;
}

StatusOr<v1::ReportReplicaFailureResponse> CoordinatorState::ReportReplicaFailure(
    const v1::ReportReplicaFailureRequest& r, std::string_view credential) {
  RKV_RETURN_IF_ERROR(control::ValidateReportReplicaFailure(r));
  MutexLock lock(mu_);
  const int reporter_index = FindLocked(r.server_id());
  if (reporter_index < 0) return NotFound("unknown server " + r.server_id() + "; join first");
  const Server& reporter = servers_[static_cast<size_t>(reporter_index)];
  RKV_RETURN_IF_ERROR(CheckBound(reporter, credential, "ReportReplicaFailure"));
  if (r.epoch() != reporter.info.epoch()) {
    return FailedPrecondition("server " + r.server_id() + ": epoch " + std::to_string(r.epoch()) +
                              " is not the joined epoch " + std::to_string(reporter.info.epoch()) + "; join again");
  }
  if (reporter.info.state() != v1::UP) {
    return FailedPrecondition("server " + r.server_id() + " is marked DOWN; join again");
  }
  if (r.backup_id() == r.server_id()) {
    return FailedPrecondition("server " + r.server_id() +
                              " reports itself: a primary is never taken out of a replica set");
  }
  const int backup_index = FindLocked(r.backup_id());
  if (backup_index < 0) return NotFound("unknown backup server " + r.backup_id());
  if (!assigned_) return FailedPrecondition("shards are not assigned yet: no replica sets to change");
  for (uint32_t shard : r.shards()) {
    if (shard >= config_.shard_count) {
      return InvalidArgument("shard " + std::to_string(shard) + " is not below the shard count " +
                             std::to_string(config_.shard_count));
    }
  }
  const size_t b = static_cast<size_t>(backup_index);
  const Server& backup = servers_[b];
  std::vector<uint32_t> removed;
  for (uint32_t shard : r.shards()) {
    if (!Contains(reporter.info.shards(), shard)) continue;
    if (std::binary_search(backup.handover_shards.begin(), backup.handover_shards.end(), shard)) {
      // The old primary stays a backup until the handover ends: a client
      // may still read it by a lease granted on a map that made it the
      // primary, so the new primary's writes must reach it (a write it
      // does not acknowledge fails rather than completing without it).
      return FailedPrecondition("server " + r.backup_id() + " is handing shard " + std::to_string(shard) +
                                " over to " + r.server_id() + "; it stays a backup until the handover ends");
    }
    if (Contains(backup.info.backup_shards(), shard) || Contains(backup.info.syncing_shards(), shard)) {
      removed.push_back(shard);
    }
  }
  std::sort(removed.begin(), removed.end());
  removed.erase(std::unique(removed.begin(), removed.end()), removed.end());
  v1::ReportReplicaFailureResponse resp;
  if (removed.empty()) {
    // Already out of every set it could leave (a retried report): no change.
    resp.set_map_version(version_);
    return resp;
  }
  std::vector<Server> next = servers_;
  const auto keep_others = [&](const google::protobuf::RepeatedField<uint32_t>& shards) {
    google::protobuf::RepeatedField<uint32_t> kept;
    for (uint32_t shard : shards) {
      if (!std::binary_search(removed.begin(), removed.end(), shard)) kept.Add(shard);
    }
    return kept;
  };
  *next[b].info.mutable_backup_shards() = keep_others(backup.info.backup_shards());
  *next[b].info.mutable_syncing_shards() = keep_others(backup.info.syncing_shards());
  RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), {b}, assigned_));
  reported_at_[r.backup_id()] = clock_();
  const std::string reason = control::Printable(r.reason(), control::kMaxReasonBytes);
  for (uint32_t shard : removed) {
    LOG(INFO) << Describe(servers_[b]) << " taken out of the replica set of shard " << shard << " on report of "
              << Describe(servers_[static_cast<size_t>(reporter_index)]) << ": " << reason << "; map version "
              << version_;
  }
  resp.set_map_version(version_);
  return resp;
}

}  // namespace rkv::coordinator
