#include "coordinator/coordinator_state.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <utility>

#include <glog/logging.h>

#include "proto/validation.h"

namespace rkv::coordinator {
namespace {

using std::chrono::steady_clock;

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

bool Contains(const google::protobuf::RepeatedField<uint32_t>& ascending, uint32_t value) {
  return std::binary_search(ascending.begin(), ascending.end(), value);
}

std::string Seconds(steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

Status ValidateConfig(const CoordinatorConfig& c) {
  if (c.shard_count < 1 || c.shard_count > control::kMaxShardCount) {
    return InvalidArgument("--shards " + std::to_string(c.shard_count) + " is outside [1, " +
                           std::to_string(control::kMaxShardCount) + "]");
  }
  if (c.expected_servers < 1 || c.expected_servers > control::kMaxExpectedServers) {
    return InvalidArgument("--servers " + std::to_string(c.expected_servers) + " is outside [1, " +
                           std::to_string(control::kMaxExpectedServers) + "]");
  }
  if (c.replicas > control::kMaxReplicationFactor) {
    return InvalidArgument("--replicas " + std::to_string(c.replicas) + " is outside [1, " +
                           std::to_string(control::kMaxReplicationFactor) + "]");
  }
  if (EffectiveReplicas(c) > c.expected_servers) {
    return InvalidArgument("--replicas " + std::to_string(c.replicas) + " is above --servers " +
                           std::to_string(c.expected_servers) + ": each copy of a shard needs its own server");
  }
  if (c.heartbeat_interval.count() < 1 || c.heartbeat_interval.count() > 60'000) {
    return InvalidArgument("--heartbeat_interval_ms " + std::to_string(c.heartbeat_interval.count()) +
                           " is outside [1, 60000]");
  }
  if (c.heartbeat_timeout <= c.heartbeat_interval || c.heartbeat_timeout.count() > 600'000) {
    return InvalidArgument("--heartbeat_timeout_ms " + std::to_string(c.heartbeat_timeout.count()) +
                           " must be above --heartbeat_interval_ms " + std::to_string(c.heartbeat_interval.count()) +
                           " and at most 600000");
  }
  if (c.lease.count() < 100 || c.lease.count() > 60'000) {
    return InvalidArgument("--lease_ms " + std::to_string(c.lease.count()) + " is outside [100, 60000]");
  }
  if (c.replace_after.count() < 0 || c.replace_after > kMaxReplaceAfter) {
    return InvalidArgument("--replace_after_ms " + std::to_string(c.replace_after.count()) + " is outside [0, " +
                           std::to_string(kMaxReplaceAfter.count()) + "] (0: never)");
  }
  if (c.lease > c.heartbeat_timeout) {
    return InvalidArgument("--lease_ms " + std::to_string(c.lease.count()) + " is above --heartbeat_timeout_ms " +
                           std::to_string(c.heartbeat_timeout.count()) +
                           ": a server marked DOWN must hold no valid lease any more");
  }
  return Status::Ok();
}

std::chrono::milliseconds FenceWait(std::chrono::milliseconds lease) {
  // lease * 1.01 rounded up, in integers.
  return std::chrono::milliseconds((lease.count() * 101 + 99) / 100 + 50);
}

uint32_t DefaultReplicas(uint32_t expected_servers) { return std::min<uint32_t>(3, expected_servers); }

uint32_t EffectiveReplicas(const CoordinatorConfig& config) {
  return config.replicas != 0 ? config.replicas : DefaultReplicas(config.expected_servers);
}

CoordinatorState::CoordinatorState(const CoordinatorConfig& config, std::unique_ptr<StateStore> store, Clock clock)
    : config_(config),
      replicas_(EffectiveReplicas(config)),
      clock_(std::move(clock)),
      store_(std::move(store)),
      expected_servers_(config.expected_servers) {}

StatusOr<std::unique_ptr<CoordinatorState>> CoordinatorState::Open(const CoordinatorConfig& config,
                                                                   std::unique_ptr<StateStore> store, Clock clock) {
  RKV_RETURN_IF_ERROR(ValidateConfig(config));
  if (store == nullptr) return InvalidArgument("no state store");
  std::unique_ptr<CoordinatorState> state(new CoordinatorState(config, std::move(store), std::move(clock)));
  RKV_RETURN_IF_ERROR(state->Load());
  return state;
}

Status CoordinatorState::Load() {
  MutexLock lock(mu_);
  RKV_ASSIGN_OR_RETURN(StateStore::Snapshot snap, store_->Load());
  if (!snap.meta.has_value()) {
    if (!snap.servers.empty()) return DataLoss("the store holds servers but no meta record");
    return Status::Ok();
  }
  const v1::store::StoredMeta& meta = *snap.meta;
  if (meta.shard_count() != config_.shard_count) {
    return FailedPrecondition("the data dir holds a cluster of " + std::to_string(meta.shard_count()) +
                              " shards, not --shards " + std::to_string(config_.shard_count) +
                              "; changing the shard count is not supported");
  }
  if (meta.expected_servers() < config_.expected_servers || meta.expected_servers() > control::kMaxExpectedServers) {
    return FailedPrecondition("the data dir holds a cluster of " + std::to_string(meta.expected_servers()) +
                              " servers, fewer than --servers " + std::to_string(config_.expected_servers) +
                              "; a cluster grows by servers joining it, not by a flag");
  }
  expected_servers_ = meta.expected_servers();
  // A store written before replication existed holds one copy per shard.
  const uint32_t stored_replicas = meta.replication_factor() == 0 ? 1 : meta.replication_factor();
  if (stored_replicas != replicas_) {
    return FailedPrecondition("the data dir holds a cluster of " + std::to_string(stored_replicas) +
                              " replicas per shard, not --replicas " + std::to_string(replicas_) +
                              "; changing the replication factor is not supported");
  }
  const size_t n = snap.servers.size();
  if (n > expected_servers_) return DataLoss("the store holds more servers than the cluster size");
  std::vector<Server> servers(n);
  std::vector<bool> seen(n, false);
  const steady_clock::time_point now = clock_();
  for (auto& stored : snap.servers) {
    const uint64_t order = stored.join_order();
    if (order >= n || seen[order]) {
      return DataLoss("server '" + control::Printable(stored.info().server_id()) + "' has join order " +
                      std::to_string(order) + ", not a distinct one below " + std::to_string(n));
    }
    seen[order] = true;
    Server& s = servers[order];
    s.info = std::move(*stored.mutable_info());
    s.join_order = order;
    s.last_heartbeat = now;  // a restarted coordinator gives every UP server a full timeout
    s.handover_shards.assign(stored.handover_shards().begin(), stored.handover_shards().end());
  }
  servers_ = std::move(servers);
  version_ = meta.map_version();
  assigned_ = meta.shards_assigned();
  if (assigned_ != (n == expected_servers_)) {
    return DataLoss("the store says shards are " + std::string(assigned_ ? "" : "not ") + "assigned with " +
                    std::to_string(n) + " of " + std::to_string(expected_servers_) + " servers");
  }
  // Handovers: each shard handed over by one server at most, which backs
  // it up (ValidateClusterMap checks that the map built from them agrees).
  std::vector<bool> handed(config_.shard_count, false);
  for (const Server& s : servers_) {
    for (uint32_t shard : s.handover_shards) {
      if (shard >= config_.shard_count || handed[shard] || !Contains(s.info.backup_shards(), shard)) {
        return DataLoss("server '" + control::Printable(s.info.server_id()) + "' hands over shard " +
                        std::to_string(shard) + ", which it does not back up, or another server hands over too");
      }
      handed[shard] = true;
      handover_since_[shard] = now;
    }
  }
  if (Status s = control::ValidateClusterMap(MapLocked()); !s.ok()) {
    return DataLoss("the stored cluster map is inconsistent: " + s.message());
  }
  LOG(INFO) << "loaded cluster map version " << version_ << ": " << n << " of " << expected_servers_
            << " servers, " << config_.shard_count << " shards" << (assigned_ ? " assigned" : " not assigned yet")
            << ", " << replicas_ << " replicas per shard";
  for (const Server& s : servers_) {
    LOG(INFO) << Describe(s.info) << " is " << v1::ServerState_Name(s.info.state()) << " (as stored)"
              << (s.info.draining() ? ", draining" : "");
    if (s.info.state() == v1::DOWN) down_since_[s.info.server_id()] = now;
    for (uint32_t shard : s.info.syncing_shards()) syncing_since_[{shard, s.info.server_id()}] = version_;
  }
  PublishLeaseLocked();
  // Whatever leases the previous coordinator granted, none outlives a
  // fence counted from now.
  for (size_t i = 0; i < servers_.size(); ++i) FenceLocked(i, "it is DOWN at the coordinator's start");
  return Status::Ok();
}

std::string CoordinatorState::Describe(const v1::ServerInfo& info) {
  return "server " + info.server_id() + " (epoch " + std::to_string(info.epoch()) + ", " + info.data_address() + ")";
}

int CoordinatorState::FindLocked(const std::string& id) const {
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (servers_[i].info.server_id() == id) return static_cast<int>(i);
  }
  return -1;
}

Status CoordinatorState::CommitLocked(std::vector<Server> next, const std::vector<size_t>& changed,
                                      bool next_assigned, uint32_t next_expected) {
  const uint32_t expected = next_expected != 0 ? next_expected : expected_servers_;
  v1::store::StoredMeta meta;
  meta.set_map_version(version_ + 1);
  meta.set_shard_count(config_.shard_count);
  meta.set_expected_servers(expected);
  meta.set_shards_assigned(next_assigned);
  meta.set_replication_factor(replicas_);
  std::vector<v1::store::StoredServer> records;
  records.reserve(changed.size());
  for (size_t i : changed) {
    v1::store::StoredServer& r = records.emplace_back();
    *r.mutable_info() = next[i].info;
    r.mutable_info()->clear_keys();
    r.mutable_info()->clear_heap_bytes_used();
    r.set_join_order(next[i].join_order);
    r.mutable_handover_shards()->Assign(next[i].handover_shards.begin(), next[i].handover_shards.end());
  }
  RKV_RETURN_IF_ERROR(store_->Commit(meta, records));
  NoteSyncingLocked(next);
  servers_ = std::move(next);
  assigned_ = next_assigned;
  expected_servers_ = expected;
  ++version_;
  PublishLeaseLocked();
  changed_cv_.NotifyAll();
  return Status::Ok();
}

void CoordinatorState::NoteSyncingLocked(const std::vector<Server>& next) {
  std::map<std::pair<uint32_t, std::string>, uint64_t> now;
  for (const Server& s : next) {
    for (uint32_t shard : s.info.syncing_shards()) {
      auto key = std::make_pair(shard, s.info.server_id());
      const auto was = syncing_since_.find(key);
      // Kept from the last version when it had the role, at the same epoch.
      const int found = FindLocked(s.info.server_id());
      const bool kept = was != syncing_since_.end() && found >= 0 &&
                        servers_[static_cast<size_t>(found)].info.epoch() == s.info.epoch() &&
                        Contains(servers_[static_cast<size_t>(found)].info.syncing_shards(), shard);
      now[key] = kept ? was->second : version_ + 1;
    }
  }
  syncing_since_ = std::move(now);
}

void CoordinatorState::MarkDownLocked(size_t i) { down_since_[servers_[i].info.server_id()] = clock_(); }

void CoordinatorState::PublishLeaseLocked() {
  LeaseView view;
  view.map_version = version_;
  for (const Server& s : servers_) {
    if (fenced_since_.count(s.info.server_id()) != 0) view.excluded_servers.push_back(s.info.server_id());
  }
  MutexLock lock(lease_mu_);
  lease_view_ = std::move(view);
}

LeaseView CoordinatorState::Lease() const {
  MutexLock lock(lease_mu_);
  return lease_view_;
}

bool CoordinatorState::FenceableLocked(size_t i) const {
  const v1::ServerInfo& x = servers_[i].info;
  if (!assigned_ || x.state() != v1::DOWN || x.shards().empty()) return false;
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
  const steady_clock::time_point since = clock_();
  fenced_since_[id] = since;
  LOG(INFO) << Describe(servers_[i].info) << " is FENCED (" << why << "): primary of "
            << servers_[i].info.shards_size() << " shards, excluded from every lease from now; those with an UP "
            << "backup move in " << FenceWait(config_.lease).count() << " ms; map version " << version_;
}

void CoordinatorState::UnfenceLocked(const std::string& id) {
  if (fenced_since_.erase(id) == 0) return;
  PublishLeaseLocked();
  LOG(INFO) << "server " << id << " is no longer fenced: UP again before its shards moved; map version "
            << version_;
}

StatusOr<v1::JoinResponse> CoordinatorState::Join(const v1::JoinRequest& r) {
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
      if (s.info.state() == v1::UP) {
        // A retried Join (its reply was lost): nothing changes.
        servers_[index].last_heartbeat = now;
        v1::JoinResponse resp;
        resp.set_map_version(version_);
        *resp.mutable_shards() = s.info.shards();
        resp.set_heartbeat_interval_ms(static_cast<uint32_t>(config_.heartbeat_interval.count()));
        resp.set_heartbeat_timeout_ms(static_cast<uint32_t>(config_.heartbeat_timeout.count()));
        resp.set_lease_ms(static_cast<uint32_t>(config_.lease.count()));
        return resp;
      }
      what = "is UP again (rejoined with the same epoch)";
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
    s.info.clear_keys();
    s.info.clear_heap_bytes_used();
    s.last_heartbeat = now;
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
  LOG(INFO) << Describe(s.info) << " " << what << "; map version " << version_;
  if (left_backups > 0 || !ended_handovers.empty()) {
    LOG(INFO) << Describe(s.info) << " catches up on the " << left_backups
              << " shards it was a backup of (restarted: now syncing them), " << ended_handovers.size()
              << " handovers from it ended; it stays primary of " << s.info.shards_size() << " shards; map version "
              << version_;
  }
  if (assigning) {
    LOG(INFO) << "assigned " << config_.shard_count << " shards round robin over " << servers_.size()
              << " servers, " << replicas_ << " replicas each; map version " << version_;
  }
  v1::JoinResponse resp;
  resp.set_map_version(version_);
  *resp.mutable_shards() = s.info.shards();
  resp.set_heartbeat_interval_ms(static_cast<uint32_t>(config_.heartbeat_interval.count()));
  resp.set_heartbeat_timeout_ms(static_cast<uint32_t>(config_.heartbeat_timeout.count()));
  resp.set_lease_ms(static_cast<uint32_t>(config_.lease.count()));
  return resp;
}

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

StatusOr<v1::ReportReplicaFailureResponse> CoordinatorState::ReportReplicaFailure(
    const v1::ReportReplicaFailureRequest& r) {
  RKV_RETURN_IF_ERROR(control::ValidateReportReplicaFailure(r));
  MutexLock lock(mu_);
  const int reporter_index = FindLocked(r.server_id());
  if (reporter_index < 0) return NotFound("unknown server " + r.server_id() + "; join first");
  const Server& reporter = servers_[static_cast<size_t>(reporter_index)];
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
      // The primary of a shard in handover accepts no write, so it has
      // none to report; taking the old primary out early would end the
      // wait that keeps it from accepting writes on an old map.
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
    LOG(INFO) << Describe(servers_[b].info) << " taken out of the replica set of shard " << shard << " on report of "
              << Describe(servers_[static_cast<size_t>(reporter_index)].info) << ": " << reason << "; map version "
              << version_;
  }
  resp.set_map_version(version_);
  return resp;
}

StatusOr<v1::ReportCaughtUpResponse> CoordinatorState::ReportCaughtUp(const v1::ReportCaughtUpRequest& r) {
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
    LOG(INFO) << Describe(servers_[index].info) << " caught up on " << moved.size()
              << " shards and is now a replica of them (" << refused.size() << " refused); map version "
              << version_;
  } else if (!refused.empty()) {
    LOG(INFO) << Describe(servers_[index].info) << " reported " << refused.size()
              << " shards caught up that it no longer syncs from that primary; map version " << version_;
  }
  resp.set_map_version(version_);
  return resp;
}

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
      std::sort(shards.begin(), shards.end());
      std::string list;
      for (size_t k = 0; k < shards.size() && k < 16; ++k) list += (k > 0 ? ", " : "") + std::to_string(shards[k]);
      if (shards.size() > 16) list += " and " + std::to_string(shards.size() - 16) + " more";
      return FailedPrecondition("cannot drain server " + r.server_id() + ": no other server is UP and not draining "
                                "to take shards " + list + "; nothing changed");
    }
    std::vector<Server> next = servers_;
    next[index].info.set_draining(true);
    RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), {index}, assigned_));
    LOG(INFO) << Describe(servers_[index].info) << " is draining: its " << RoleCount(servers_[index].info)
              << " roles move to other servers; map version " << version_;
  }
  resp.set_map_version(version_);
  resp.set_roles_to_move(static_cast<uint32_t>(RoleCount(servers_[index].info)));
  return resp;
}

StatusOr<v1::HeartbeatResponse> CoordinatorState::Heartbeat(const v1::HeartbeatRequest& r) {
  RKV_RETURN_IF_ERROR(control::ValidateServerAndEpoch(r.server_id(), r.epoch()));
  MutexLock lock(mu_);
  const int found = FindLocked(r.server_id());
  if (found < 0) return NotFound("unknown server " + r.server_id() + "; join first");
  Server& s = servers_[static_cast<size_t>(found)];
  if (r.epoch() != s.info.epoch()) {
    return FailedPrecondition("server " + r.server_id() + ": epoch " + std::to_string(r.epoch()) +
                              " is not the joined epoch " + std::to_string(s.info.epoch()) + "; join again");
  }
  if (s.info.state() != v1::UP) {
    return FailedPrecondition("server " + r.server_id() + " is marked DOWN; join again");
  }
  s.last_heartbeat = clock_();
  s.info.set_keys(r.keys());
  s.info.set_heap_bytes_used(r.heap_bytes_used());
  v1::HeartbeatResponse resp;
  resp.set_map_version(version_);
  resp.set_lease_ms(static_cast<uint32_t>(config_.lease.count()));
  return resp;
}

Status CoordinatorState::Leave(const v1::LeaveRequest& r) {
  RKV_RETURN_IF_ERROR(control::ValidateServerAndEpoch(r.server_id(), r.epoch()));
  MutexLock lock(mu_);
  const int found = FindLocked(r.server_id());
  if (found < 0) return NotFound("unknown server " + r.server_id());
  const size_t index = static_cast<size_t>(found);
  if (r.epoch() != servers_[index].info.epoch()) {
    return FailedPrecondition("server " + r.server_id() + ": epoch " + std::to_string(r.epoch()) +
                              " is not the joined epoch " + std::to_string(servers_[index].info.epoch()));
  }
  if (servers_[index].info.state() == v1::DOWN) return Status::Ok();
  std::vector<Server> next = servers_;
  next[index].info.set_state(v1::DOWN);
  RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), {index}, assigned_));
  MarkDownLocked(index);
  LOG(INFO) << Describe(servers_[index].info) << " is DOWN: it left; map version " << version_;
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
    std::vector<Server> next = servers_;
    next[i].info.set_state(v1::DOWN);
    RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), {i}, assigned_));
    MarkDownLocked(i);
    LOG(INFO) << Describe(servers_[i].info) << " is DOWN: no heartbeat for " << Seconds(silent) << "; map version "
              << version_;
    FenceLocked(i, "missed heartbeats");
    ++expired;
  }
  return expired;
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

  // For each shard of a ripe server: its first UP backup in list order.
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
    LOG(INFO) << Describe(servers_[x].info) << " is no longer fenced: " << plan.moved[x]
              << " of its shards promoted to their first UP backup, " << plan.kept[x]
              << " stay its own (no UP backup); map version " << version_;
  }
  for (size_t i = 0; i < n; ++i) {
    int gained = 0;
    for (uint32_t shard = 0; shard < config_.shard_count; ++shard) gained += new_primary[shard] == i ? 1 : 0;
    if (gained > 0) {
      LOG(INFO) << Describe(servers_[i].info) << " promoted to primary (sole replica) of " << gained
                << " shards; map version " << version_;
    }
  }
  PublishLeaseLocked();
  return promoted;
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
    LOG(INFO) << Describe(servers_[i].info) << " DOWN for " << Seconds(now - down_since_[servers_[i].info.server_id()])
              << ": its " << plan.replaced[i] << " backup and syncing roles are replaced; map version " << version_;
  }
  LOG(INFO) << "rebalanced: " << plan.added << " syncing roles added to shards below " << replicas_ << " replicas, "
            << plan.moves << " backup roles and " << plan.balance_handovers << " primaries moving for balance, "
            << plan.drain_handovers << " handovers from draining servers, " << plan.handovers_ended
            << " handovers ended, " << plan.trimmed << " roles of draining or surplus servers removed, "
            << replaced_total << " roles of long-DOWN servers removed; map version " << version_;
  return plan.Total();
}

std::vector<ShardRoles> CoordinatorState::RolesOf(const std::vector<Server>& servers) const {
  // Out-of-range or contradictory records are left out, for
  // ValidateClusterMap (on load) to catch as disagreements.
  std::vector<ShardRoles> roles(config_.shard_count);
  const size_t n = servers.size();
  for (size_t i = 0; i < n; ++i) {
    const Server& s = servers[i];
    for (uint32_t shard : s.info.shards()) {
      if (shard < roles.size()) roles[shard].primary = i;
    }
    for (uint32_t shard : s.info.backup_shards()) {
      if (shard < roles.size()) roles[shard].backups.push_back(i);
    }
    for (uint32_t shard : s.info.syncing_shards()) {
      if (shard < roles.size()) roles[shard].syncing.push_back(i);
    }
    for (uint32_t shard : s.handover_shards) {
      if (shard < roles.size()) roles[shard].handover_from = i;
    }
  }
  // Join order starting after the primary: the order PlaceBackups gives.
  for (ShardRoles& r : roles) {
    const size_t primary = r.primary == kNone ? 0 : r.primary;
    const auto after_primary = [&](size_t a, size_t b) { return (a + n - primary) % n < (b + n - primary) % n; };
    std::sort(r.backups.begin(), r.backups.end(), after_primary);
    std::sort(r.syncing.begin(), r.syncing.end(), after_primary);
  }
  return roles;
}

void CoordinatorState::ApplyRoles(const std::vector<ShardRoles>& roles, std::vector<Server>* servers,
                                  std::vector<size_t>* changed) const {
  const size_t n = servers->size();
  std::vector<std::vector<uint32_t>> primary(n), backup(n), syncing(n), handover(n);
  for (uint32_t shard = 0; shard < roles.size(); ++shard) {
    const ShardRoles& r = roles[shard];
    if (r.primary != kNone) primary[r.primary].push_back(shard);
    for (size_t i : r.backups) backup[i].push_back(shard);
    for (size_t i : r.syncing) syncing[i].push_back(shard);
    if (r.handover_from != kNone) handover[r.handover_from].push_back(shard);
  }
  const auto same = [](const google::protobuf::RepeatedField<uint32_t>& field, const std::vector<uint32_t>& v) {
    return static_cast<size_t>(field.size()) == v.size() && std::equal(v.begin(), v.end(), field.begin());
  };
  for (size_t i = 0; i < n; ++i) {
    Server& s = (*servers)[i];
    if (same(s.info.shards(), primary[i]) && same(s.info.backup_shards(), backup[i]) &&
        same(s.info.syncing_shards(), syncing[i]) && s.handover_shards == handover[i]) {
      continue;
    }
    s.info.mutable_shards()->Assign(primary[i].begin(), primary[i].end());
    s.info.mutable_backup_shards()->Assign(backup[i].begin(), backup[i].end());
    s.info.mutable_syncing_shards()->Assign(syncing[i].begin(), syncing[i].end());
    s.handover_shards = std::move(handover[i]);
    changed->push_back(i);
  }
}

v1::ClusterMap CoordinatorState::MapLocked() const {
  v1::ClusterMap map;
  map.set_version(version_);
  map.set_shard_count(config_.shard_count);
  map.set_expected_servers(expected_servers_);
  map.set_replication_factor(replicas_);
  if (assigned_) {
    const std::vector<ShardRoles> roles = RolesOf(servers_);
    static const std::string kNoServer;
    std::vector<const std::string*> names;  // the lambda reads these, not servers_
    for (const Server& s : servers_) names.push_back(&s.info.server_id());
    const auto id = [&](size_t i) -> const std::string& { return i == kNone ? kNoServer : *names[i]; };
    for (const ShardRoles& r : roles) map.add_shard_owner(id(r.primary));
    for (const ShardRoles& r : roles) {
      v1::ShardReplicas* replicas = map.add_shard_replicas();
      replicas->add_server_ids(id(r.primary));
      for (size_t i : r.backups) replicas->add_server_ids(id(i));
      for (size_t i : r.syncing) replicas->add_syncing_ids(id(i));
      if (r.handover_from != kNone) replicas->set_handover_from(id(r.handover_from));
    }
  }
  for (const Server& s : servers_) *map.add_servers() = s.info;
  return map;
}

v1::ClusterMap CoordinatorState::Map() const {
  MutexLock lock(mu_);
  return MapLocked();
}

uint64_t CoordinatorState::version() const {
  MutexLock lock(mu_);
  return version_;
}

StatusOr<std::optional<v1::ClusterMap>> CoordinatorState::WaitForChange(uint64_t known_version,
                                                                        std::chrono::milliseconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  MutexLock lock(mu_);
  while (!closed_ && version_ == known_version) {
    if (!changed_cv_.WaitUntil(mu_, deadline)) break;
  }
  if (closed_) return Status(StatusCode::kCancelled, "the coordinator is shutting down");
  if (version_ == known_version) return std::optional<v1::ClusterMap>();
  return std::optional<v1::ClusterMap>(MapLocked());
}

void CoordinatorState::CloseWatchers() {
  MutexLock lock(mu_);
  closed_ = true;
  changed_cv_.NotifyAll();
}

}  // namespace rkv::coordinator
