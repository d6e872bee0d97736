#include "server/replication/map_policy.h"

#include <memory>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "common/hash.h"
#include "proto/rkv.pb.h"
#include "proto/validation.h"

namespace rkv::server {
namespace {

const v1::ServerInfo* FindServer(const v1::ClusterMap& map, std::string_view id) {
  for (const v1::ServerInfo& s : map.servers()) {
    if (s.server_id() == id) return &s;
  }
  return nullptr;
}

std::string VersionOf(const v1::ClusterMap& map) { return "map version " + std::to_string(map.version()); }

// The servers holding `shard`, primary first: its replica list, or its
// owner alone in a map without replica lists (R = 1). Requires a map that
// assigns shards and shard < shard_count; empty if the map breaks that.
std::vector<std::string_view> ReplicasOf(const v1::ClusterMap& map, uint32_t shard) {
  std::vector<std::string_view> ids;
  if (map.shard_replicas_size() > 0) {
    if (shard < static_cast<uint32_t>(map.shard_replicas_size())) {
      for (const std::string& id : map.shard_replicas(static_cast<int>(shard)).server_ids()) ids.push_back(id);
    }
  } else if (shard < static_cast<uint32_t>(map.shard_owner_size())) {
    ids.push_back(map.shard_owner(static_cast<int>(shard)));
  }
  return ids;
}

// The servers catching up on `shard` (syncing_ids); empty in a map
// without replica lists.
std::vector<std::string_view> SyncingOf(const v1::ClusterMap& map, uint32_t shard) {
  std::vector<std::string_view> ids;
  if (shard < static_cast<uint32_t>(map.shard_replicas_size())) {
    for (const std::string& id : map.shard_replicas(static_cast<int>(shard)).syncing_ids()) ids.push_back(id);
  }
  return ids;
}

// Why `map` cannot tell this server its role yet, or OK: it must assign
// the shards and list this server at its own epoch.
Status CheckAssigned(const v1::ClusterMap& map, const MapSource& self) {
  if (map.shard_count() == 0 || map.shard_owner().empty()) {
    return Status(StatusCode::kUnavailable, VersionOf(map) + " assigns no shards yet (" +
                                                std::to_string(map.servers_size()) + " of " +
                                                std::to_string(map.expected_servers()) + " servers joined)");
  }
  const v1::ServerInfo* me = FindServer(map, self.server_id());
  if (me == nullptr) {
    return Status(StatusCode::kUnavailable, VersionOf(map) + " does not list this server (" + self.server_id() + ")");
  }
  if (me->epoch() != self.epoch()) {
    return Status(StatusCode::kUnavailable, VersionOf(map) + " lists this server (" + self.server_id() +
                                                ") at epoch " + std::to_string(me->epoch()) + ", not its epoch " +
                                                std::to_string(self.epoch()));
  }
  return Status::Ok();
}

}  // namespace

ServerLease LeaseFrom(std::chrono::steady_clock::time_point sent, uint32_t lease_ms, uint64_t map_version) {
  if (lease_ms == 0) {
    return ServerLease{.enabled = false, .until = {}, .map_version = map_version, .why_not_renewed = {}};
  }
  const auto length = std::chrono::microseconds(static_cast<int64_t>(lease_ms) * 990) - std::chrono::milliseconds(10);
  return ServerLease{
      .enabled = true, .until = sent + length, .map_version = map_version, .why_not_renewed = {}, .length = length};
}

void MapPolicy::Attach(MapSource* source) {
  MapSource* expected = nullptr;
  source_.compare_exchange_strong(expected, source, std::memory_order_release, std::memory_order_relaxed);
}

StatusOr<WriteRoute> MapPolicy::RouteWrite(std::string_view key) {
  MapSource* const src = source();
  const std::shared_ptr<const v1::ClusterMap> map = src != nullptr ? src->map() : nullptr;
  // A server that has no role yet (no map, no assignment, or a map from
  // before its restart) refuses with Reason::kNotPrimary, so that the
  // client refetches and resends (nothing is applied: RouteWrite runs
  // before anything is written; docs/design.md §5.6) instead of failing the
  // call while the map is on its way.
  if (map == nullptr) {
    return Status(StatusCode::kFailedPrecondition,
                  "not the primary of shard (any) in map version 0: this server has no cluster map yet",
                  Reason::kNotPrimary, 0);
  }
  if (const Status s = CheckAssigned(*map, *src); !s.ok()) {
    return Status(StatusCode::kFailedPrecondition, "not the primary of shard (any) in " + VersionOf(*map) + ": " + s.message(),
                  Reason::kNotPrimary, map->version());
  }
  const uint32_t shard = ShardOf(key, map->shard_count());
  const std::vector<std::string_view> replicas = ReplicasOf(*map, shard);
  if (replicas.empty()) return Internal(VersionOf(*map) + " has no replica list for shard " + std::to_string(shard));
  if (replicas[0] != src->server_id()) {
    return Status(StatusCode::kFailedPrecondition,
                  "not the primary of shard " + std::to_string(shard) + " in " + VersionOf(*map) + " (its primary is " +
                      std::string(replicas[0]) + ")",
                  Reason::kNotPrimary, map->version());
  }
  // During a handover (handover_from set) the new primary takes writes
  // at once: the old one, still listed as a backup and never taken out
  // until the coordinator clears handover_from (every lease granted on a
  // map that made it the primary has ended by then), must acknowledge each
  // one first, so a client reading it by an old lease sees every
  // acknowledged write; and it takes none itself (it is not first in this
  // map, and its own forwards are refused by this server, which is).
  // docs/design.md §8.9, "Handover".
  WriteRoute route;
  route.map_version = map->version();
  route.shard = shard;
  // DOWN backups stay in the route: the forward to one fails and the
  // primary reports it, so that the coordinator, not this server, decides
  // that a write may be acknowledged without it. Syncing servers follow
  // the backups and are forwarded to (and reported) exactly like them.
  std::vector<std::string_view> targets(replicas.begin() + 1, replicas.end());
  const size_t backups = targets.size();
  for (std::string_view id : SyncingOf(*map, shard)) targets.push_back(id);
  for (size_t i = 0; i < targets.size(); ++i) {
    const v1::ServerInfo* backup = FindServer(*map, targets[i]);
    if (backup == nullptr) {
      return Internal(VersionOf(*map) + " names backup " + std::string(targets[i]) + " of shard " +
                      std::to_string(shard) + " but does not list it");
    }
    route.backups.push_back(ReplicaPeer{backup->server_id(), backup->epoch(), backup->data_address(), i >= backups});
  }
  return route;
}

Status MapPolicy::ReportFailedBackup(uint32_t shard, const ReplicaPeer& backup, std::string_view reason) {
  MapSource* const src = source();
  if (src == nullptr) return Unavailable("this server has not joined a cluster; no coordinator to report to");
  // One report for every shard this server leads that lists the backup: a
  // backup that failed one forward would fail the others' too, each after
  // its own timeout, and each with a map version of its own.
  std::vector<uint32_t> shards = SharedShards(*src, backup.server_id);
  if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
  StatusOr<uint64_t> version = src->ReportReplicaFailure(backup.server_id, shards, reason, kReportTimeout);
  if (!version.ok()) return version.status();
  // The watch stream normally brings the new map within moments; if it is
  // broken, one fetch gets it.
  Status learned = src->WaitForVersion(*version, kReportedMapWait / 2);
  if (learned.code() == StatusCode::kDeadlineExceeded) {
    const Status refreshed = src->RefreshNow(kReportedMapWait / 2);
    learned = src->WaitForVersion(*version, std::chrono::milliseconds(0));
    if (!learned.ok() && !refreshed.ok()) learned = refreshed;
  }
  return learned.WithContext("learning map version " + std::to_string(*version) + ", which took backup " +
                             backup.server_id + " out of shard " + std::to_string(shard) +
                             (shards.size() > 1 ? " and " + std::to_string(shards.size() - 1) + " more" : ""));
}

bool MapPolicy::IsDown(const std::string& server_id, uint64_t epoch) {
  MapSource* const src = source();
  const std::shared_ptr<const v1::ClusterMap> map = src != nullptr ? src->map() : nullptr;
  if (map == nullptr) return false;
  for (const v1::ServerInfo& s : map->servers()) {
    if (s.server_id() == server_id) return s.epoch() != epoch || s.state() != v1::UP;
  }
  return true;
}

std::vector<uint32_t> MapPolicy::SharedShards(MapSource& src, std::string_view backup_id) {
  std::vector<uint32_t> shards;
  const std::shared_ptr<const v1::ClusterMap> map = src.map();
  if (map == nullptr || !CheckAssigned(*map, src).ok()) return shards;
  for (uint32_t s = 0; s < map->shard_count(); ++s) {
    const std::vector<std::string_view> replicas = ReplicasOf(*map, s);
    if (replicas.empty() || replicas[0] != src.server_id()) continue;
    const std::vector<std::string_view> syncing = SyncingOf(*map, s);
    if (std::find(replicas.begin() + 1, replicas.end(), backup_id) != replicas.end() ||
        std::find(syncing.begin(), syncing.end(), backup_id) != syncing.end()) {
      shards.push_back(s);
    }
  }
  return shards;
}

std::optional<std::string> MapPolicy::FindPeer(uint64_t fingerprint, uint64_t epoch) {
  MapSource* const src = source();
  if (src == nullptr) return std::nullopt;
  const auto find = [&]() -> std::optional<std::string> {
    const std::shared_ptr<const v1::ClusterMap> map = src->map();
    if (map == nullptr) return std::nullopt;
    for (const v1::ServerInfo& s : map->servers()) {
      if (s.epoch() == epoch && PeerFingerprint(s.server_id()) == fingerprint) return s.server_id();
    }
    return std::nullopt;
  };
  if (std::optional<std::string> id = find()) return id;
  // A peer that restarted joins before it sends replication traffic, so a
  // newer map may name it.
  if (const Status s = src->RefreshNow(kPeerRefreshTimeout); !s.ok()) {
    VLOG(1) << "no peer with fingerprint " << fingerprint << " and epoch " << epoch
            << " in the map, and refreshing it failed: " << s;
    return std::nullopt;
  }
  return find();
}

std::string MapPolicy::BoundCredential(std::string_view id) {
  MapSource* const src = source();
  const std::shared_ptr<const v1::ClusterMap> map = src != nullptr ? src->map() : nullptr;
  if (map == nullptr) return {};
  for (const v1::ServerInfo& s : map->servers()) {
    if (s.server_id() == id) return s.credential();
  }
  return {};
}

Status MapPolicy::AcceptReplica(std::string_view sender_id, std::string_view key, uint64_t sender_map_version) {
  MapSource* const src = source();
  std::shared_ptr<const v1::ClusterMap> map = src != nullptr ? src->map() : nullptr;
  if (src != nullptr && (map == nullptr || map->version() < sender_map_version)) {
    // The primary may have learned a map change first; its forward is
    // judged by a map at least as new as the one it was sent under.
    (void)src->WaitForVersion(sender_map_version, kSenderMapWait);
    map = src->map();
  }
  if (map == nullptr) return FailedPrecondition("map version 0: this server has no cluster map yet");
  if (const Status s = CheckAssigned(*map, *src); !s.ok()) return FailedPrecondition(s.message());
  const uint32_t shard = ShardOf(key, map->shard_count());
  const std::vector<std::string_view> replicas = ReplicasOf(*map, shard);
  if (replicas.empty()) {
    return FailedPrecondition(VersionOf(*map) + " has no replica list for shard " + std::to_string(shard));
  }
  if (replicas[0] != sender_id) {
    return FailedPrecondition(VersionOf(*map) + ": " + control::Printable(sender_id) + " is not the primary of shard " +
                              std::to_string(shard) + " (its primary is " + std::string(replicas[0]) + ")");
  }
  for (size_t i = 1; i < replicas.size(); ++i) {
    if (replicas[i] == src->server_id()) return Status::Ok();
  }
  for (std::string_view id : SyncingOf(*map, shard)) {
    if (id == src->server_id()) return Status::Ok();
  }
  return FailedPrecondition(VersionOf(*map) + ": this server (" + src->server_id() +
                            ") is neither a backup of shard " + std::to_string(shard) + " nor syncing it");
}

Status MapPolicy::CheckLease() { return CheckLeaseWithMargin(std::chrono::nanoseconds::zero()); }

Status MapPolicy::CheckLeaseWithMargin(std::chrono::nanoseconds margin) {
  MapSource* const src = source();
  if (src == nullptr) return Unavailable("lease on the cluster map expired: this server has not joined a cluster");
  const ServerLease lease = src->lease();
  if (!lease.enabled) return Status::Ok();
  // A margin of at most a tenth of the grant: a lease renewed on time (the
  // heartbeat comes every lease / 3 at most) never has less than that left.
  margin = std::min(margin, lease.length / 10);
  auto now = std::chrono::steady_clock::now();
  if (now + margin < lease.until) {
    const auto held_version = [src] {
      const std::shared_ptr<const v1::ClusterMap> map = src->map();
      return map != nullptr ? map->version() : 0;
    };
    uint64_t held = held_version();
    if (held >= lease.map_version) return Status::Ok();
    // The grant named a map this server has not installed yet (the watch
    // delivers it within milliseconds, normally): wait for it rather than
    // refuse a write that is only early. The Applier re-checks the route
    // afterwards, against the newer map.
    (void)src->WaitForVersion(lease.map_version, kLeaseMapWait);
    held = held_version();
    now = std::chrono::steady_clock::now();
    if (held >= lease.map_version && now + margin < lease.until) return Status::Ok();
    if (now + margin >= lease.until) {
      return Unavailable("lease on the cluster map expired while waiting for map version " +
                         std::to_string(lease.map_version));
    }
    return Unavailable("lease on the cluster map expired for map version " + std::to_string(held) +
                       ": it was granted with version " + std::to_string(lease.map_version) +
                       ", which this server has not learned yet");
  }
  if (lease.until == std::chrono::steady_clock::time_point{}) {
    return Unavailable("lease on the cluster map expired: the coordinator has granted none yet");
  }
  if (now < lease.until) {
    // Within the margin: valid still, but not for long enough.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(lease.until - now);
    return Unavailable("lease on the cluster map runs out in " + std::to_string(left.count()) + " ms" +
                       (lease.why_not_renewed.empty() ? " (not renewed yet)" : " (" + lease.why_not_renewed + ")"));
  }
  const auto ago = std::chrono::duration_cast<std::chrono::milliseconds>(now - lease.until);
  // Why first: a client sees the start of this message only (a reply's
  // text is short, common/protocol.h).
  if (!lease.why_not_renewed.empty()) {
    return Unavailable(lease.why_not_renewed + ": lease on the cluster map expired " + std::to_string(ago.count()) +
                       " ms ago");
  }
  return Unavailable("lease on the cluster map expired " + std::to_string(ago.count()) +
                     " ms ago (no heartbeat answered since)");
}

}  // namespace rkv::server
