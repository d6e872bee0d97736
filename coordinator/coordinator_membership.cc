// CoordinatorState: servers joining, beating, leaving, expiring, draining
// and being forgotten.
#include "coordinator/coordinator_state.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "coordinator/coordinator_state_util.h"
#include "proto/validation.h"

namespace rkv::coordinator {

using std::chrono::steady_clock;

namespace {

bool SameMessage(const google::protobuf::MessageLite& a, const google::protobuf::MessageLite& b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

// True when a rejoin with the same epoch describes the same process.
bool SameIncarnation(const v1::ServerInfo& known, const v1::JoinRequest& r) {
  return known.data_address() == r.data_address() && known.admin_address() == r.admin_address() &&
         known.transport() == r.transport() && SameMessage(known.index(), r.index()) &&
         SameMessage(known.heap(), r.heap()) && SameMessage(known.table(), r.table());
}

void CopyJoinFields(const v1::JoinRequest& r, v1::ServerInfo* info) {
  info->set_server_id(r.server_id());
  info->set_epoch(r.epoch());
  info->set_data_address(r.data_address());
  info->set_admin_address(r.admin_address());
  info->set_transport(r.transport());
  *info->mutable_index() = r.index();
  *info->mutable_heap() = r.heap();
  *info->mutable_table() = r.table();
  info->set_heap_bytes(r.table().heap_size());
  info->set_zone(r.zone());
}

// "0, 5, 9": `shards` ascending, at most 16 of them, then "and K more".
std::string ShardList(std::vector<uint32_t> shards) {
  std::sort(shards.begin(), shards.end());
  std::string list;
  for (size_t k = 0; k < shards.size() && k < 16; ++k) list += (k > 0 ? ", " : "") + std::to_string(shards[k]);
  if (shards.size() > 16) list += " and " + std::to_string(shards.size() - 16) + " more";
  return list;
}

}  // namespace

StatusOr<v1::JoinResponse> CoordinatorState::Join(const v1::JoinRequest& r, std::string_view credential) {
  RKV_RETURN_IF_ERROR(control::ValidateJoinRequest(r));
  MutexLock lock(mu_);
  const steady_clock::time_point now = clock_();
  const int found = FindLocked(r.server_id());
  std::vector<Server> next = servers_;
  size_t index = 0;
  bool next_assigned = assigned_;
  uint32_t next_expected = 0;  // unchanged
  std::string what;
  int left_backups = 0;  // backup roles a restarted server turns into syncing roles
  std::vector<uint32_t> ended_handovers;
  if (found >= 0) {
    index = static_cast<size_t>(found);
    Server& s = next[index];
    // An id bound to a credential joins only with it; one not bound yet
    // (stored before binding, or joined with the shared cluster
    // credential) is bound by this Join.
    if (!s.credential.empty()) RKV_RETURN_IF_ERROR(CheckBound(s, credential, "Join"));
    const bool binding = !credential.empty() && s.credential.empty();
    const uint64_t known_epoch = s.info.epoch();
    if (r.epoch() < known_epoch) {
      return FailedPrecondition("server " + r.server_id() + ": epoch " + std::to_string(r.epoch()) +
                                " is older than the known epoch " + std::to_string(known_epoch) + " (stale)");
    }
    if (r.zone() != s.info.zone()) {
      // Placement relied on the zone: a server may not move.
      return FailedPrecondition("server " + r.server_id() + " joined in zone '" + s.info.zone() +
                                "', not zone '" + r.zone() + "'; a server keeps its zone for the life of its id");
    }
    if (r.epoch() == known_epoch) {
      if (!SameIncarnation(s.info, r)) {
        return FailedPrecondition("server " + r.server_id() + ": epoch " + std::to_string(r.epoch()) +
                                  " already joined with other addresses or regions; a restart must use a new epoch");
      }
      if (s.info.state() == v1::UP && !binding) {
        // A retried Join (its reply was lost): nothing changes.
        servers_[index].last_heartbeat = now;
        EndSuspicionFenceLocked(r.server_id(), "it joined");
        return JoinReplyLocked(s.info);
      }
      what = s.info.state() == v1::UP ? "is UP (rejoined with the same epoch)"
                                      : "is UP again (rejoined with the same epoch)";
    } else {
      what = "is UP (restarted: epoch " + std::to_string(known_epoch) + " -> " + std::to_string(r.epoch()) + ")";
      // Its store may lack writes forwarded while it was away: it stays
      // primary of its shards (it holds all it acknowledged) and catches up
      // on the shards it backed up (a syncing server receives every write
      // from now on and fetches what it missed). A handover from it ends:
      // its old process, which may have held the primary role on an old
      // map, is gone.
      left_backups = s.info.backup_shards_size();
      std::vector<uint32_t> syncing(s.info.syncing_shards().begin(), s.info.syncing_shards().end());
      syncing.insert(syncing.end(), s.info.backup_shards().begin(), s.info.backup_shards().end());
      std::sort(syncing.begin(), syncing.end());
      s.info.mutable_syncing_shards()->Assign(syncing.begin(), syncing.end());
      s.info.clear_backup_shards();
      ended_handovers = std::move(s.handover_shards);
      s.handover_shards.clear();
      if (s.info.draining()) what += "; its drain ends";
      s.info.set_draining(false);
    }
    CopyJoinFields(r, &s.info);
    s.info.set_state(v1::UP);
    s.info.clear_down_since_unix_ms();
    s.info.clear_keys();
    s.info.clear_heap_bytes_used();
    s.last_heartbeat = now;
    if (binding) {
      s.credential = std::string(credential);
      what += "; bound to credential " + s.credential;
    }
  } else {
    if (assigned_) {
      // A server added to a complete cluster: N grows; Rebalance gives it
      // roles.
      if (expected_servers_ >= control::kMaxExpectedServers) {
        return FailedPrecondition("cluster is full: it has the maximum of " +
                                  std::to_string(control::kMaxExpectedServers) + " servers");
      }
      next_expected = expected_servers_ + 1;
    }
    index = next.size();
    Server& s = next.emplace_back();
    CopyJoinFields(r, &s.info);
    s.info.set_state(v1::UP);
    s.join_order = index;
    s.last_heartbeat = now;
    s.credential = std::string(credential);
    what = assigned_ ? "added to the cluster (now " + std::to_string(next_expected) + " servers; it gets roles as "
                           "the coordinator rebalances)"
                     : "joined (" + std::to_string(next.size()) + " of " + std::to_string(expected_servers_) +
                           " servers)";
  }
  std::vector<size_t> changed{index};
  if (!next_assigned && next.size() == expected_servers_) {
    // The N-th server: assign every shard. The whole assignment is one
    // commit, so it is never seen half-applied.
    AssignShards(&next);
    next_assigned = true;
    changed.clear();
    for (size_t i = 0; i < next.size(); ++i) changed.push_back(i);
  }
  const bool assigning = next_assigned && !assigned_;
  RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), changed, next_assigned, next_expected));
  const Server& s = servers_[index];
  UnfenceLocked(s.info.server_id());  // back before its shards moved: they stay
  down_since_.erase(s.info.server_id());
  for (uint32_t shard : ended_handovers) handover_since_.erase(shard);
  LOG(INFO) << Describe(s) << " " << what << "; map version " << version_;
  if (left_backups > 0 || !ended_handovers.empty()) {
    LOG(INFO) << Describe(s) << " catches up on the " << left_backups
              << " shards it was a backup of (restarted: now syncing them), " << ended_handovers.size()
              << " handovers from it ended; it stays primary of " << s.info.shards_size() << " shards; map version "
              << version_;
  }
  if (assigning) {
    LOG(INFO) << "assigned " << config_.shard_count << " shards round robin over " << servers_.size()
              << " servers, " << replicas_ << " replicas each; map version " << version_;
  }
  return JoinReplyLocked(s.info);
}

v1::JoinResponse CoordinatorState::JoinReplyLocked(const v1::ServerInfo& info) const {
  v1::JoinResponse resp;
  resp.set_map_version(version_);
  *resp.mutable_shards() = info.shards();
  resp.set_heartbeat_interval_ms(static_cast<uint32_t>(config_.heartbeat_interval.count()));
  resp.set_heartbeat_timeout_ms(static_cast<uint32_t>(config_.heartbeat_timeout.count()));
  resp.set_lease_ms(static_cast<uint32_t>(config_.lease.count()));
  return resp;
}

StatusOr<v1::HeartbeatResponse> CoordinatorState::Heartbeat(const v1::HeartbeatRequest& r,
                                                            std::string_view credential) {
  RKV_RETURN_IF_ERROR(control::ValidateServerAndEpoch(r.server_id(), r.epoch()));
  MutexLock lock(mu_);
  const int found = FindLocked(r.server_id());
  if (found < 0) return NotFound("unknown server " + r.server_id() + "; join first");
  Server& s = servers_[static_cast<size_t>(found)];
  RKV_RETURN_IF_ERROR(CheckBound(s, credential, "Heartbeat"));
  if (r.epoch() != s.info.epoch()) {
    return FailedPrecondition("server " + r.server_id() + ": epoch " + std::to_string(r.epoch()) +
                              " is not the joined epoch " + std::to_string(s.info.epoch()) + "; join again");
  }
  if (s.info.state() != v1::UP) {
    return FailedPrecondition("server " + r.server_id() + " is marked DOWN; join again");
  }
  s.last_heartbeat = clock_();
  EndSuspicionFenceLocked(r.server_id(), "it heartbeated");
  s.info.set_keys(r.keys());
  s.info.set_heap_bytes_used(r.heap_bytes_used());
  v1::HeartbeatResponse resp;
  resp.set_map_version(version_);
  resp.set_lease_ms(static_cast<uint32_t>(config_.lease.count()));
  return resp;
}

Status CoordinatorState::Leave(const v1::LeaveRequest& r, std::string_view credential) {
  RKV_RETURN_IF_ERROR(control::ValidateServerAndEpoch(r.server_id(), r.epoch()));
  MutexLock lock(mu_);
  const int found = FindLocked(r.server_id());
  if (found < 0) return NotFound("unknown server " + r.server_id());
  const size_t index = static_cast<size_t>(found);
  RKV_RETURN_IF_ERROR(CheckBound(servers_[index], credential, "Leave"));
  if (r.epoch() != servers_[index].info.epoch()) {
    return FailedPrecondition("server " + r.server_id() + ": epoch " + std::to_string(r.epoch()) +
                              " is not the joined epoch " + std::to_string(servers_[index].info.epoch()));
  }
  if (servers_[index].info.state() == v1::DOWN) return Status::Ok();
  std::vector<Server> next = servers_;
  next[index].info.set_state(v1::DOWN);
  next[index].info.set_down_since_unix_ms(WallMs());
  RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), {index}, assigned_));
  MarkDownLocked(index);
  LOG(INFO) << Describe(servers_[index]) << " is DOWN: it left; map version " << version_;
  FenceLocked(index, "it left");
  return Status::Ok();
}

StatusOr<int> CoordinatorState::ExpireHeartbeats() {
  MutexLock lock(mu_);
  const steady_clock::time_point now = clock_();
  int expired = 0;
  for (size_t i = 0; i < servers_.size(); ++i) {
    const Server& s = servers_[i];
    if (s.info.state() != v1::UP) continue;
    const steady_clock::duration silent = now - s.last_heartbeat;
    if (silent <= config_.heartbeat_timeout) continue;
    RKV_RETURN_IF_ERROR(MarkServerDownLocked(i, "no heartbeat for " + Seconds(silent)));
    ++expired;
  }
  return expired;
}

Status CoordinatorState::MarkServerDownLocked(size_t i, const std::string& why) {
  std::vector<Server> next = servers_;
  next[i].info.set_state(v1::DOWN);
  next[i].info.set_down_since_unix_ms(WallMs());
  RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), {i}, assigned_));
  MarkDownLocked(i);
  LOG(INFO) << Describe(servers_[i]) << " is DOWN: " << why << "; map version " << version_;
  FenceLocked(i, why);
  return Status::Ok();
}

std::vector<CoordinatorState::ProbeTarget> CoordinatorState::SilentServers(std::chrono::milliseconds silent) const {
  std::vector<ProbeTarget> out;
  if (silent.count() <= 0) return out;
  MutexLock lock(mu_);
  const steady_clock::time_point now = clock_();
  for (const Server& s : servers_) {
    if (now - s.last_heartbeat <= silent) continue;
    if (std::optional<ProbeTarget> t = ProbeTargetIn(s.info)) out.push_back(std::move(*t));
  }
  return out;
}

std::optional<CoordinatorState::ProbeTarget> CoordinatorState::ProbeTargetIn(const v1::ServerInfo& info) {
  if (info.state() != v1::UP || info.admin_address().empty()) return std::nullopt;
  return ProbeTarget{info.server_id(), info.epoch(), info.admin_address()};
}

std::optional<CoordinatorState::ProbeTarget> CoordinatorState::ProbeTargetOf(const std::string& server_id) const {
  MutexLock lock(mu_);
  const int found = FindLocked(server_id);
  if (found < 0) return std::nullopt;
  return ProbeTargetIn(servers_[static_cast<size_t>(found)].info);
}

StatusOr<bool> CoordinatorState::ConfirmSuspect(const std::string& server_id, uint64_t epoch,
                                                steady_clock::time_point probe_started, const std::string& why) {
  MutexLock lock(mu_);
  const int found = FindLocked(server_id);
  if (found < 0) return false;
  const size_t i = static_cast<size_t>(found);
  const Server& s = servers_[i];
  // Another incarnation, already DOWN, or heard from while the probe ran:
  // nothing to confirm.
  if (s.info.epoch() != epoch || s.info.state() != v1::UP || s.last_heartbeat >= probe_started) return false;
  RKV_RETURN_IF_ERROR(MarkServerDownLocked(
      i, why + " (no heartbeat for " + Seconds(clock_() - s.last_heartbeat) + ")"));
  return true;
}

void CoordinatorState::MarkDownLocked(size_t i) { down_since_[servers_[i].info.server_id()] = clock_(); }

StatusOr<v1::DrainResponse> CoordinatorState::Drain(const v1::DrainRequest& r) {
  RKV_RETURN_IF_ERROR(control::ValidateDrain(r));
  MutexLock lock(mu_);
  const int found = FindLocked(r.server_id());
  if (found < 0) return NotFound("unknown server " + r.server_id());
  const size_t index = static_cast<size_t>(found);
  v1::DrainResponse resp;
  if (!servers_[index].info.draining()) {
    const v1::ServerInfo& info = servers_[index].info;
    bool other = false;
    for (size_t i = 0; i < servers_.size(); ++i) {
      const v1::ServerInfo& o = servers_[i].info;
      other = other || (i != index && o.state() == v1::UP && !o.draining());
    }
    if (!other && RoleCount(info) > 0) {
      std::vector<uint32_t> shards(info.shards().begin(), info.shards().end());
      shards.insert(shards.end(), info.backup_shards().begin(), info.backup_shards().end());
      return FailedPrecondition("cannot drain server " + r.server_id() + ": no other server is UP and not draining "
                                "to take shards " + ShardList(std::move(shards)) + "; nothing changed");
    }
    std::vector<Server> next = servers_;
    next[index].info.set_draining(true);
    RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), {index}, assigned_));
    LOG(INFO) << Describe(servers_[index]) << " is draining: its " << RoleCount(servers_[index].info)
              << " roles move to other servers; map version " << version_;
  }
  resp.set_map_version(version_);
  resp.set_roles_to_move(static_cast<uint32_t>(RoleCount(servers_[index].info)));
  return resp;
}

StatusOr<v1::ForgetResponse> CoordinatorState::Forget(const v1::ForgetRequest& r) {
  RKV_RETURN_IF_ERROR(control::ValidateForget(r));
  MutexLock lock(mu_);
  const std::string& id = r.server_id();
  const int found = FindLocked(id);
  if (found < 0) return NotFound("unknown server " + id + " (never joined, or forgotten already)");
  const size_t index = static_cast<size_t>(found);
  const Server gone_server = servers_[index];  // servers_ changes below
  const v1::ServerInfo& gone = gone_server.info;
  if (gone.state() == v1::UP) {
    return FailedPrecondition("cannot forget server " + id + ": it is UP; only a DOWN server that holds no role "
                              "can be forgotten (drain it, then stop it); nothing changed");
  }
  if (RoleCount(gone) > 0) {
    // Each role is in one shard's list; a server holds one role per shard.
    std::vector<uint32_t> shards(gone.shards().begin(), gone.shards().end());
    shards.insert(shards.end(), gone.backup_shards().begin(), gone.backup_shards().end());
    shards.insert(shards.end(), gone.syncing_shards().begin(), gone.syncing_shards().end());
    return FailedPrecondition("cannot forget server " + id + ": it still holds roles in " +
                              std::to_string(shards.size()) + " shards (" + ShardList(shards) + "; " +
                              std::to_string(gone.shards_size()) + " as primary, " +
                              std::to_string(gone.backup_shards_size()) + " as backup, " +
                              std::to_string(gone.syncing_shards_size()) +
                              " syncing): wait for re-replication or drain it; nothing changed");
  }
  // Once shards are assigned the cluster is its servers: N shrinks with
  // them, but not below --servers, since a coordinator refuses a store
  // smaller than that (Load). So never below R either (R <= --servers).
  uint32_t next_expected = 0;  // unchanged while the cluster is forming
  if (assigned_) {
    if (expected_servers_ - 1 < config_.expected_servers) {
      return FailedPrecondition("cannot forget server " + id + ": the cluster would keep " +
                                std::to_string(expected_servers_ - 1) + " servers, fewer than --servers " +
                                std::to_string(config_.expected_servers) +
                                "; start its replacement first (or restart the coordinators with a smaller "
                                "--servers); nothing changed");
    }
    next_expected = expected_servers_ - 1;
  }
  // The servers after it move up one place in the join order, which stays
  // dense (Load checks it): their records are rewritten in the same commit.
  std::vector<Server> next = servers_;
  next.erase(next.begin() + static_cast<std::ptrdiff_t>(index));
  std::vector<size_t> changed;
  for (size_t i = index; i < next.size(); ++i) {
    next[i].join_order = i;
    changed.push_back(i);
  }
  RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), changed, assigned_, next_expected, {id}));
  std::string down_for;
  if (const auto d = down_since_.find(id); d != down_since_.end()) {
    down_for = " after " + Seconds(clock_() - d->second) + " DOWN (as this coordinator saw it)";
  }
  // What memory knew of it goes with it: a server joining under the id is
  // a new one. (A server without a role is not fenced; erased all the same.)
  down_since_.erase(id);
  reported_at_.erase(id);
  if (fenced_since_.erase(id) > 0) PublishLeaseLocked();
  LOG(INFO) << Describe(gone_server) << " forgotten" << down_for << ": it held no role; " << servers_.size() << " of "
            << expected_servers_ << " servers remain; map version " << version_;
  v1::ForgetResponse resp;
  resp.set_map_version(version_);
  return resp;
}

}  // namespace rkv::coordinator
