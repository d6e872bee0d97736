// CoordinatorState: its configuration, opening, the roles read from and
// written to the servers' records, the map and its watchers. The other
// concerns: coordinator_persistence.cc, coordinator_membership.cc,
// coordinator_failover.cc, coordinator_rebalance.cc.
#include "coordinator/coordinator_state.h"

#include <algorithm>
#include <utility>

#include "proto/validation.h"

namespace rkv::coordinator {

using std::chrono::steady_clock;

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
  if (c.suspect_after.count() != 0 &&
      (c.suspect_after <= ServerHeartbeatPeriod(c) || c.suspect_after >= c.heartbeat_timeout)) {
    return InvalidArgument("--suspect_after_ms " + std::to_string(c.suspect_after.count()) +
                           " must be above the period servers heartbeat at (" +
                           std::to_string(ServerHeartbeatPeriod(c).count()) +
                           " ms: the shorter of --heartbeat_interval_ms and --lease_ms / 3) and below "
                           "--heartbeat_timeout_ms " +
                           std::to_string(c.heartbeat_timeout.count()) + ", or 0 (never suspect)");
  }
  if (c.probe_timeout.count() < 10 || c.probe_timeout.count() > 10'000) {
    return InvalidArgument("--probe_timeout_ms " + std::to_string(c.probe_timeout.count()) +
                           " is outside [10, 10000]");
  }
  return Status::Ok();
}

std::chrono::milliseconds ServerHeartbeatPeriod(const CoordinatorConfig& c) {
  return std::min(c.heartbeat_interval, c.lease / 3);
}

std::chrono::milliseconds FenceWait(std::chrono::milliseconds lease) {
  // lease * 1.01 rounded up, in integers.
  return std::chrono::milliseconds((lease.count() * 101 + 99) / 100 + 50);
}

uint32_t DefaultReplicas(uint32_t expected_servers) { return std::min<uint32_t>(3, expected_servers); }

uint32_t EffectiveReplicas(const CoordinatorConfig& config) {
  return config.replicas != 0 ? config.replicas : DefaultReplicas(config.expected_servers);
}

CoordinatorState::CoordinatorState(const CoordinatorConfig& config, std::unique_ptr<StateStore> store, Clock clock,
                                   WallClock wall_clock)
    : config_(config),
      replicas_(EffectiveReplicas(config)),
      clock_(std::move(clock)),
      wall_clock_(std::move(wall_clock)),
      store_(std::move(store)),
      expected_servers_(config.expected_servers) {}

StatusOr<std::unique_ptr<CoordinatorState>> CoordinatorState::Open(const CoordinatorConfig& config,
                                                                   std::unique_ptr<StateStore> store, Clock clock,
                                                                   WallClock wall_clock) {
  RKV_RETURN_IF_ERROR(ValidateConfig(config));
  if (store == nullptr) return InvalidArgument("no state store");
  std::unique_ptr<CoordinatorState> state(
      new CoordinatorState(config, std::move(store), std::move(clock), std::move(wall_clock)));
  RKV_RETURN_IF_ERROR(state->Load());
  return state;
}

std::string CoordinatorState::Describe(const v1::ServerInfo& info) {
  return "server " + info.server_id() + " (epoch " + std::to_string(info.epoch()) + ", " + info.data_address() + ")";
}

std::string CoordinatorState::Describe(const Server& s) {
  const v1::ServerInfo& info = s.info;
  return "server " + info.server_id() + " (epoch " + std::to_string(info.epoch()) + ", " + info.data_address() +
         (s.credential.empty() ? "" : ", credential " + s.credential) + ")";
}

Status CoordinatorState::CheckBound(const Server& s, std::string_view credential, std::string_view rpc) {
  if (credential.empty() || credential == s.credential) return Status::Ok();
  const std::string prefix = std::string(rpc) + " refused: server credential " + std::string(credential) +
                             " cannot act as server " + s.info.server_id();
  if (s.credential.empty()) return PermissionDenied(prefix + ", which is bound to no credential yet; join first");
  return PermissionDenied(prefix + ", which is bound to credential " + s.credential);
}

uint64_t CoordinatorState::WallMs() const {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(wall_clock_().time_since_epoch()).count();
  // A wall clock set before 1970 reads as "not known" (0), never as a
  // wrapped time.
  return ms > 0 ? static_cast<uint64_t>(ms) : 0;
}

int CoordinatorState::FindLocked(const std::string& id) const {
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (servers_[i].info.server_id() == id) return static_cast<int>(i);
  }
  return -1;
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
  for (const Server& s : servers_) {
    v1::ServerInfo* info = map.add_servers();
    *info = s.info;
    // The binding, for peers to check (ServerInfo.credential).
    if (s.credential.empty()) {
      info->clear_credential();
    } else {
      info->set_credential(s.credential);
    }
  }
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
