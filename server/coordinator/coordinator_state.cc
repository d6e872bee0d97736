#include "server/coordinator/coordinator_state.h"

#include <algorithm>
#include <cstdio>
#include <tuple>
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

std::vector<size_t> PlaceBackups(const std::vector<uint32_t>& zones, uint32_t zone_count, size_t primary,
                                 size_t count, std::vector<uint32_t>* backup_load) {
  const size_t n = zones.size();
  std::vector<uint32_t> in_zone(zone_count, 0);  // the shard's replicas per zone so far
  ++in_zone[zones[primary]];
  std::vector<bool> chosen(n, false);
  chosen[primary] = true;
  std::vector<size_t> picks;
  picks.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    size_t best = n;
    std::tuple<uint32_t, uint32_t, size_t> best_key;
    for (size_t d = 1; d < n; ++d) {
      const size_t i = (primary + d) % n;
      if (chosen[i]) continue;
      const std::tuple<uint32_t, uint32_t, size_t> key(in_zone[zones[i]], (*backup_load)[i], d);
      if (best == n || key < best_key) {
        best = i;
        best_key = key;
      }
    }
    if (best == n) break;  // fewer servers than asked for; ValidateConfig prevents it
    chosen[best] = true;
    ++in_zone[zones[best]];
    ++(*backup_load)[best];
    picks.push_back(best);
  }
  const auto after_primary = [&](size_t i) { return (i + n - primary) % n; };
  std::sort(picks.begin(), picks.end(), [&](size_t a, size_t b) { return after_primary(a) < after_primary(b); });
  return picks;
}

CoordinatorState::CoordinatorState(const CoordinatorConfig& config, std::unique_ptr<StateStore> store, Clock clock)
    : config_(config), replicas_(EffectiveReplicas(config)), clock_(std::move(clock)), store_(std::move(store)) {}

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
  if (meta.expected_servers() != config_.expected_servers) {
    return FailedPrecondition("the data dir holds a cluster of " + std::to_string(meta.expected_servers()) +
                              " servers, not --servers " + std::to_string(config_.expected_servers) +
                              "; adding or removing servers (rebalancing) is not supported yet");
  }
  // A store written before replication existed holds one copy per shard.
  const uint32_t stored_replicas = meta.replication_factor() == 0 ? 1 : meta.replication_factor();
  if (stored_replicas != replicas_) {
    return FailedPrecondition("the data dir holds a cluster of " + std::to_string(stored_replicas) +
                              " replicas per shard, not --replicas " + std::to_string(replicas_) +
                              "; changing the replication factor is not supported");
  }
  const size_t n = snap.servers.size();
  if (n > config_.expected_servers) return DataLoss("the store holds more servers than the cluster size");
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
  }
  servers_ = std::move(servers);
  version_ = meta.map_version();
  assigned_ = meta.shards_assigned();
  if (assigned_ != (n == config_.expected_servers)) {
    return DataLoss("the store says shards are " + std::string(assigned_ ? "" : "not ") + "assigned with " +
                    std::to_string(n) + " of " + std::to_string(config_.expected_servers) + " servers");
  }
  if (Status s = control::ValidateClusterMap(MapLocked()); !s.ok()) {
    return DataLoss("the stored cluster map is inconsistent: " + s.message());
  }
  LOG(INFO) << "loaded cluster map version " << version_ << ": " << n << " of " << config_.expected_servers
            << " servers, " << config_.shard_count << " shards" << (assigned_ ? " assigned" : " not assigned yet")
            << ", " << replicas_ << " replicas per shard";
  for (const Server& s : servers_) {
    LOG(INFO) << Describe(s.info) << " is " << v1::ServerState_Name(s.info.state()) << " (as stored)";
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
                                      bool next_assigned) {
  v1::store::StoredMeta meta;
  meta.set_map_version(version_ + 1);
  meta.set_shard_count(config_.shard_count);
  meta.set_expected_servers(config_.expected_servers);
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
  }
  RKV_RETURN_IF_ERROR(store_->Commit(meta, records));
  servers_ = std::move(next);
  assigned_ = next_assigned;
  ++version_;
  PublishLeaseLocked();
  changed_cv_.NotifyAll();
  return Status::Ok();
}

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
  std::string what;
  int left_backups = 0;  // replica sets a restarted server leaves
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
      // primary of its shards (it holds all it acknowledged) but is no
      // longer a backup anywhere.
      left_backups = s.info.backup_shards_size();
      s.info.clear_backup_shards();
    }
    CopyJoinFields(r, &s.info);
    s.info.set_state(v1::UP);
    s.info.clear_keys();
    s.info.clear_heap_bytes_used();
    s.last_heartbeat = now;
  } else {
    if (servers_.size() >= config_.expected_servers) {
      const std::string n = std::to_string(config_.expected_servers);
      return FailedPrecondition("cluster is full: " + n + " of " + n +
                                " servers joined; adding servers (rebalancing) is not supported yet");
    }
    index = next.size();
    Server& s = next.emplace_back();
    CopyJoinFields(r, &s.info);
    s.info.set_state(v1::UP);
    s.join_order = index;
    s.last_heartbeat = now;
    what = "joined (" + std::to_string(next.size()) + " of " + std::to_string(config_.expected_servers) + " servers)";
  }
  std::vector<size_t> changed{index};
  if (!next_assigned && next.size() == config_.expected_servers) {
    // The N-th server: assign every shard. The whole assignment is one
    // commit, so it is never seen half-applied.
    AssignShards(&next);
    next_assigned = true;
    changed.clear();
    for (size_t i = 0; i < next.size(); ++i) changed.push_back(i);
  }
  const bool assigning = next_assigned && !assigned_;
  RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), changed, next_assigned));
  const Server& s = servers_[index];
  UnfenceLocked(s.info.server_id());  // back before its shards moved: they stay
  LOG(INFO) << Describe(s.info) << " " << what << "; map version " << version_;
  if (left_backups > 0) {
    LOG(INFO) << Describe(s.info) << " taken out of the replica sets of the " << left_backups
              << " shards it was a backup of (restarted); it stays primary of " << s.info.shards_size()
              << " shards; map version " << version_;
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
  std::unordered_map<std::string, uint32_t> zone_ids;
  std::vector<uint32_t> zones;
  zones.reserve(next->size());
  for (Server& s : *next) {
    s.info.clear_shards();
    s.info.clear_backup_shards();
    zones.push_back(zone_ids.emplace(s.info.zone(), static_cast<uint32_t>(zone_ids.size())).first->second);
  }
  const uint32_t zone_count = static_cast<uint32_t>(zone_ids.size());
  std::vector<uint32_t> load(next->size(), 0);
  for (uint32_t shard = 0; shard < config_.shard_count; ++shard) {
    const size_t primary = shard % next->size();
    (*next)[primary].info.add_shards(shard);
    for (size_t b : PlaceBackups(zones, zone_count, primary, replicas_ - 1, &load)) {
      (*next)[b].info.add_backup_shards(shard);
    }
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
  const v1::ServerInfo& backup = servers_[b].info;
  std::vector<uint32_t> removed;
  for (uint32_t shard : r.shards()) {
    if (Contains(reporter.info.shards(), shard) && Contains(backup.backup_shards(), shard)) removed.push_back(shard);
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
  google::protobuf::RepeatedField<uint32_t> kept;
  for (uint32_t shard : backup.backup_shards()) {
    if (!std::binary_search(removed.begin(), removed.end(), shard)) kept.Add(shard);
  }
  *next[b].info.mutable_backup_shards() = std::move(kept);
  RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), {b}, assigned_));
  const std::string reason = control::Printable(r.reason(), control::kMaxReasonBytes);
  for (uint32_t shard : removed) {
    LOG(INFO) << Describe(servers_[b].info) << " taken out of the replica set of shard " << shard << " on report of "
              << Describe(servers_[static_cast<size_t>(reporter_index)].info) << ": " << reason << "; map version "
              << version_;
  }
  resp.set_map_version(version_);
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
  const v1::ClusterMap map = MapLocked();
  std::unordered_map<std::string_view, size_t> index;
  for (size_t i = 0; i < n; ++i) index.emplace(servers_[i].info.server_id(), i);
  std::vector<size_t> new_primary(config_.shard_count, n);  // n: unchanged
  std::vector<int> moved(n, 0), kept(n, 0);
  int promoted = 0;
  for (size_t x : ripe_list) {
    for (uint32_t shard : servers_[x].info.shards()) {
      const v1::ShardReplicas& list = map.shard_replicas(static_cast<int>(shard));
      for (int k = 1; k < list.server_ids_size(); ++k) {
        const auto b = index.find(list.server_ids(k));
        if (b != index.end() && servers_[b->second].info.state() == v1::UP) {
          new_primary[shard] = b->second;
          break;
        }
      }
      if (new_primary[shard] == n) {
        ++kept[x];
      } else {
        ++moved[x];
        ++promoted;
      }
    }
  }
  if (promoted > 0) {
    // The new primary is each moved shard's only replica: the other
    // backups may lack writes the old primary forwarded to it alone.
    std::vector<Server> next = servers_;
    std::vector<size_t> changed;
    for (size_t i = 0; i < n; ++i) {
      v1::ServerInfo& info = next[i].info;
      std::vector<uint32_t> shards;
      for (uint32_t shard : info.shards()) {
        if (new_primary[shard] == n) shards.push_back(shard);
      }
      google::protobuf::RepeatedField<uint32_t> backups;
      for (uint32_t shard : info.backup_shards()) {
        if (new_primary[shard] == n) backups.Add(shard);
      }
      for (uint32_t shard = 0; shard < config_.shard_count; ++shard) {
        if (new_primary[shard] == i) shards.push_back(shard);
      }
      std::sort(shards.begin(), shards.end());
      if (shards.size() == static_cast<size_t>(info.shards_size()) && backups.size() == info.backup_shards_size() &&
          std::equal(shards.begin(), shards.end(), info.shards().begin())) {
        continue;
      }
      info.mutable_shards()->Assign(shards.begin(), shards.end());
      *info.mutable_backup_shards() = std::move(backups);
      changed.push_back(i);
    }
    RKV_RETURN_IF_ERROR(CommitLocked(std::move(next), changed, assigned_));
  }
  for (size_t x : ripe_list) {
    fenced_since_.erase(servers_[x].info.server_id());
    LOG(INFO) << Describe(servers_[x].info) << " is no longer fenced: " << moved[x]
              << " of its shards promoted to their first UP backup, " << kept[x]
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

v1::ClusterMap CoordinatorState::MapLocked() const {
  v1::ClusterMap map;
  map.set_version(version_);
  map.set_shard_count(config_.shard_count);
  map.set_expected_servers(config_.expected_servers);
  map.set_replication_factor(replicas_);
  if (assigned_) {
    std::vector<const std::string*> owner(config_.shard_count, nullptr);
    for (const Server& s : servers_) {
      for (uint32_t shard : s.info.shards()) {
        if (shard < owner.size()) owner[shard] = &s.info.server_id();
      }
    }
    static const std::string kNone;
    for (const std::string* id : owner) map.add_shard_owner(id != nullptr ? *id : kNone);
    // Replica lists: the owner, then the backups in join order starting
    // after the owner (the order PlaceBackups gives them). Out-of-range or
    // contradictory records are left for ValidateClusterMap to catch.
    const size_t n = servers_.size();
    std::unordered_map<std::string_view, size_t> order;
    for (size_t i = 0; i < n; ++i) order.emplace(servers_[i].info.server_id(), i);
    std::vector<std::vector<size_t>> backups(config_.shard_count);
    for (size_t i = 0; i < n; ++i) {
      for (uint32_t shard : servers_[i].info.backup_shards()) {
        if (shard < backups.size()) backups[shard].push_back(i);
      }
    }
    for (uint32_t shard = 0; shard < config_.shard_count; ++shard) {
      v1::ShardReplicas* replicas = map.add_shard_replicas();
      const std::string& primary_id = map.shard_owner(static_cast<int>(shard));
      replicas->add_server_ids(primary_id);
      const auto p = order.find(primary_id);
      const size_t primary = p == order.end() ? 0 : p->second;
      std::vector<size_t>& list = backups[shard];
      std::sort(list.begin(), list.end(),
                [&](size_t a, size_t b) { return (a + n - primary) % n < (b + n - primary) % n; });
      for (size_t i : list) replicas->add_server_ids(servers_[i].info.server_id());
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
