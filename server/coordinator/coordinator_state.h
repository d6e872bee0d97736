// The coordinator's state machine: membership, shard assignment and map
// versions, persisted through a StateStore. No networking here; the gRPC
// service (coordinator_service.h) is a thin shell over it.
//
// Rules:
//   - Servers join in some order; when the expected_servers-th distinct id
//     joins, every shard s is assigned to the (s mod N)-th server in join
//     order (its primary), once and for all (no rebalancing), and gets R - 1
//     backups (PlaceBackups below): R servers in all, on as many distinct
//     zones as the cluster has, up to R.
//   - A server's zone is part of its identity: a rejoin with another zone
//     is refused.
//   - ReportReplicaFailure takes a backup out of replica sets of its
//     reporter's shards (never the primary); nothing puts it back yet.
//   - A known id rejoining with a newer epoch (a restart: new regions) gets
//     back the shards it is primary of and is UP; it leaves every replica
//     set it was a backup in (its store may lack writes forwarded while it
//     was away), in the same version. The same epoch with the same content
//     is an idempotent retry (or, after DOWN, a return to UP keeping every
//     role it still has); the same epoch with other content, or an older
//     epoch, is refused (stale).
//   - A new id when N are known is refused: the cluster is full.
//   - An UP server whose heartbeat deadline passes (ExpireHeartbeats) is
//     DOWN; so is one that Leaves. A DOWN server keeps its shards until
//     it is promoted away from them (failover, below).
//   - Failover (docs/design.md, "Failover and leases"): a server marked
//     DOWN while primary of a shard that has an UP backup is FENCED from
//     that moment F (memory only): LeaseView lists it as excluded, so no
//     lease granted from F on covers it. PromoteFenced, once the clock
//     passes F + FenceWait(lease), commits one version in which each such
//     shard's first UP backup (in replica-list order) becomes its primary
//     and only replica; the DOWN server stays listed without those shards
//     and is no longer fenced. Shards with no UP backup stay its own. A
//     server that comes back UP before then is no longer fenced and keeps
//     its shards. A coordinator that opens a store with such DOWN primaries
//     fences them from the moment it opens.//   - Every change bumps the map version by one and is committed to the
//     store (one atomic, synced write) before it becomes visible: a failed
//     commit leaves the state exactly as it was.
//   - Heartbeat statistics (keys, heap bytes used) are kept in memory only
//     and do not change the version.
//
// Thread safety: every public method may be called from any thread; one
// mutex serializes them (the store's commits included).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "proto/rkv.pb.h"
#include "server/coordinator/state_store.h"

namespace rkv::coordinator {

struct CoordinatorConfig {
  uint32_t shard_count = 1024;    // [1, control::kMaxShardCount]
  uint32_t expected_servers = 3;  // N, [1, control::kMaxExpectedServers]
  // R, the copies of each shard: [1, control::kMaxReplicationFactor] and at
  // most N; 0 means DefaultReplicas(N).
  uint32_t replicas = 0;
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds heartbeat_timeout{3000};  // > heartbeat_interval
  // The lease granted to servers (each heartbeat) and clients (RenewLease):
  // [100, 60000] and at most heartbeat_timeout, so that a server marked
  // DOWN for missed heartbeats holds no valid lease any more.
  std::chrono::milliseconds lease{1000};
};

// How long after fencing a server its shards may move: every lease that
// covered it, counted on a clock running up to 1% off, has ended by then.
// lease * 1.01 + 50 ms.
std::chrono::milliseconds FenceWait(std::chrono::milliseconds lease);

// INVALID_ARGUMENT naming the flag when a field is out of range.
Status ValidateConfig(const CoordinatorConfig& config);

// The R used when none is given: 3, or N when the cluster is smaller.
uint32_t DefaultReplicas(uint32_t expected_servers);

// config.replicas, or DefaultReplicas when it is 0.
uint32_t EffectiveReplicas(const CoordinatorConfig& config);

// The placement of one shard's backups, given its primary: `count` further
// distinct servers among `zones.size()` (servers in join order; zones[i] is
// server i's zone as a number below zone_count, equal for equal zone names,
// "" being a zone like any other). Each pick takes, among the
// servers not yet chosen, the one whose zone holds the fewest of the
// shard's replicas so far, then the one holding the fewest backups so far
// (`backup_load`, indexed like `zones`, incremented for each pick), then
// the first in join order after the primary. So the replicas cover
// min(R, zones) distinct zones, and backups spread evenly. Returns the
// picks in join order starting after the primary. Requires count <
// zones.size() and primary < zones.size(). O(count * zones.size()).
std::vector<size_t> PlaceBackups(const std::vector<uint32_t>& zones, uint32_t zone_count, size_t primary,
                                 size_t count, std::vector<uint32_t>* backup_load);

using Clock = std::function<std::chrono::steady_clock::time_point()>;

// What a lease is granted on: the current map version and the servers it
// does not cover (the fenced ones, in join order).
struct LeaseView {
  uint64_t map_version = 0;
  std::vector<std::string> excluded_servers;
};

class CoordinatorState {
 public:
  // Loads the state from `store` (a new store starts empty at version 0)
  // with `config` (validated). FAILED_PRECONDITION when the store was
  // written with another shard count, cluster size or replication factor
  // (a store older than replication has R = 1); DATA_LOSS when its
  // records contradict each other (replica sets included). Servers keep their stored state; UP
  // ones get a fresh heartbeat deadline counted from now.
  static StatusOr<std::unique_ptr<CoordinatorState>> Open(const CoordinatorConfig& config,
                                                          std::unique_ptr<StateStore> store,
                                                          Clock clock = std::chrono::steady_clock::now);

  CoordinatorState(const CoordinatorState&) = delete;
  CoordinatorState& operator=(const CoordinatorState&) = delete;

  // Errors: INVALID_ARGUMENT (malformed request), FAILED_PRECONDITION
  // (stale epoch, conflicting rejoin, another zone than the id joined
  // with, cluster full), or the store's error when the change could not be
  // committed.
  StatusOr<v1::JoinResponse> Join(const v1::JoinRequest& request) EXCLUDES(mu_, lease_mu_);

  // Takes request.backup_id out of the replica set of every listed shard
  // whose primary is the reporter and which lists the backup, keeping the
  // order of the others, in one new map version; returns that version, or
  // the current one when no set lists the backup any more (idempotent).
  // Shards the reporter is not the primary of are left alone. Errors:
  // INVALID_ARGUMENT (malformed, or a shard not below the shard count),
  // NOT_FOUND (unknown reporter or backup), FAILED_PRECONDITION (the
  // reporter's epoch is not its current one, it is DOWN, the backup is the
  // reporter itself, or shards are not assigned yet), or the store's error.
  StatusOr<v1::ReportReplicaFailureResponse> ReportReplicaFailure(const v1::ReportReplicaFailureRequest& request)
      EXCLUDES(mu_, lease_mu_);

  // Errors: INVALID_ARGUMENT, NOT_FOUND (unknown id), FAILED_PRECONDITION
  // (another epoch, or the server is DOWN): the server must Join again.
  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request) EXCLUDES(mu_);

  // Marks the server DOWN. OK as well when it already is. Errors as for
  // Heartbeat (a DOWN server excepted), or the store's.
  Status Leave(const v1::LeaveRequest& request) EXCLUDES(mu_, lease_mu_);

  // Marks DOWN every UP server whose deadline has passed, one version
  // each. Returns how many; on a commit error the servers stay UP and the
  // error is returned (the next call retries).
  StatusOr<int> ExpireHeartbeats() EXCLUDES(mu_, lease_mu_);

  // Commits, in one new version, the promotion of every fenced server
  // whose FenceWait has passed (see the rules above); first fences any
  // DOWN primary with an UP backup that is not fenced yet (a backup that
  // came back with its epoch). Returns how many shards changed primary (0:
  // no new version). On a commit error nothing changes, the fences stay
  // and the error is returned (the next call retries).
  StatusOr<int> PromoteFenced() EXCLUDES(mu_, lease_mu_);

  // The answer to RenewLease: never waits for a store commit.
  LeaseView Lease() const EXCLUDES(lease_mu_);

  v1::ClusterMap Map() const EXCLUDES(mu_);
  uint64_t version() const EXCLUDES(mu_);
  const CoordinatorConfig& config() const { return config_; }
  uint32_t replicas() const { return replicas_; }

  // Blocks until the version differs from `known_version` (returns the
  // map), `timeout` passes (returns nullopt) or CloseWatchers is called
  // (CANCELLED).
  StatusOr<std::optional<v1::ClusterMap>> WaitForChange(uint64_t known_version, std::chrono::milliseconds timeout)
      EXCLUDES(mu_);

  // Wakes every WaitForChange caller with CANCELLED, now and from now on.
  void CloseWatchers() EXCLUDES(mu_);

 private:
  struct Server {
    v1::ServerInfo info;  // state, shards and statistics included
    uint64_t join_order = 0;
    std::chrono::steady_clock::time_point last_heartbeat;
  };

  CoordinatorState(const CoordinatorConfig& config, std::unique_ptr<StateStore> store, Clock clock);
  Status Load() EXCLUDES(mu_, lease_mu_);
  // Commits `next` (servers in join order) with version_ + 1, writing the
  // records of `changed` (indices into next), then makes it current and
  // publishes the lease view.
  Status CommitLocked(std::vector<Server> next, const std::vector<size_t>& changed, bool next_assigned)
      REQUIRES(mu_) EXCLUDES(lease_mu_);
  // True when servers_[i] is DOWN and primary of a shard with an UP backup.
  bool FenceableLocked(size_t i) const REQUIRES(mu_);
  // Fences servers_[i] when FenceableLocked and not fenced yet: publishes
  // the lease view that excludes it, then records the clock as its fence
  // time (so no lease granted after that time covers it); `why` goes to
  // the log.
  void FenceLocked(size_t i, const std::string& why) REQUIRES(mu_) EXCLUDES(lease_mu_);
  // Ends the fence of `id`, if any (it came back UP).
  void UnfenceLocked(const std::string& id) REQUIRES(mu_) EXCLUDES(lease_mu_);
  // Makes Lease() answer version_ and the fenced servers.
  void PublishLeaseLocked() REQUIRES(mu_) EXCLUDES(lease_mu_);
  // Gives every shard its primary ((s mod N)-th server) and backups.
  void AssignShards(std::vector<Server>* next) const;
  v1::ClusterMap MapLocked() const REQUIRES(mu_);
  int FindLocked(const std::string& id) const REQUIRES(mu_);
  static std::string Describe(const v1::ServerInfo& info);

  const CoordinatorConfig config_;
  const uint32_t replicas_;  // EffectiveReplicas(config_)
  const Clock clock_;

  // Serializes every public method, the store's commits included (the
  // store need not be thread-safe).
  mutable Mutex mu_;
  const std::unique_ptr<StateStore> store_ PT_GUARDED_BY(mu_);
  CondVar changed_cv_;  // notified when version_ changes or closed_ is set
  std::vector<Server> servers_ GUARDED_BY(mu_);  // join order; at most expected_servers
  uint64_t version_ GUARDED_BY(mu_) = 0;
  bool assigned_ GUARDED_BY(mu_) = false;  // shards assigned (once N servers joined)
  bool closed_ GUARDED_BY(mu_) = false;
  // Fenced servers and when they were fenced (coordinator clock).
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> fenced_since_ GUARDED_BY(mu_);

  // Guards only the published lease view, so that RenewLease never waits
  // behind a store commit (which holds mu_). Taken after mu_.
  mutable Mutex lease_mu_ ACQUIRED_AFTER(mu_);
  LeaseView lease_view_ GUARDED_BY(lease_mu_);
};

}  // namespace rkv::coordinator
