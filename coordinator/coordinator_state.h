// The coordinator's state machine: membership, failover and leases, map
// versions, persisted through a StateStore. No networking here; the gRPC
// service (coordinator_service.h) is a thin shell over it. No placement
// either: which server gets which role is decided by the pure planners of
// placement.h, which this class calls with its records and commits.
//
// The class is split by concern across files: coordinator_state.cc
// (configuration, Open, roles to and from records, the map and its
// watchers), coordinator_persistence.cc (loading the store, commits),
// coordinator_membership.cc (Join, Heartbeat, Leave, expiry, Drain,
// Forget),
// coordinator_failover.cc (fencing, leases, promotion, replica failures),
// coordinator_rebalance.cc (the first assignment, catch-up, Rebalance).
//
// Rules:
//   - Servers join in some order; when the expected_servers-th distinct id
//     joins, every shard s is assigned to the (s mod N)-th server in join
//     order (its primary) and gets R - 1 backups (AssignShards and
//     PlaceBackups, placement.h): R servers in all, on as many distinct
//     zones as the cluster has, up to R. Roles change after that only
//     by failover, replica failure reports, restarts, catch-up reports and
//     Rebalance, each as its rule below says.
//   - A server's zone is part of its identity: a rejoin with another zone
//     is refused.
//   - ReportReplicaFailure takes a backup, or a syncing server, out of
//     the replica sets of its reporter's shards (never the primary).
//   - Roles of a shard: replicas (server_ids: the primary, then backups,
//     each holding every acknowledged write), syncing servers (catching
//     up: they receive every forwarded write and fetch the rest from the
//     primary; never read, never promoted) and, during a handover, the
//     old primary (handover_from, still a backup). ReportCaughtUp moves a
//     syncing server into the replicas (docs/design.md section 8.9).
//   - A known id rejoining with a newer epoch (a restart: new regions) gets
//     back the shards it is primary of and is UP; its backup roles become
//     syncing roles (it catches up on what it missed), in the same
//     version, and a drain it was under ends. The same epoch with the same
//     content is an idempotent retry (or, after DOWN, a return to UP
//     keeping every role it still has); the same epoch with other content,
//     or an older epoch, is refused (stale).
//   - A new id when the shards are assigned joins with no role; the
//     cluster size N grows by one (persisted). Rebalance gives it roles.
//   - Rebalance (run periodically) re-replicates: a server DOWN for
//     replace_after loses its backup and syncing roles; a shard with fewer
//     than R replicas + syncing servers gets syncing servers (UP, not
//     draining, distinct zones first, least loaded); a caught-up shard
//     with more than R replicas loses its most loaded backup (a draining
//     one first); a draining primary hands its shard over to a caught-up
//     backup; once every move has finished, roles and primaries are
//     balanced toward a fair share, a bounded number of moves at a time.
//     See PlanRebalance (placement.h) for the steps and their order.
//   - An UP server whose heartbeat deadline passes (ExpireHeartbeats) is
//     DOWN; so is one that Leaves. A DOWN server keeps its shards until
//     it is promoted away from them (failover, below). The wall-clock
//     time it went DOWN is part of its record
//     (ServerInfo.down_since_unix_ms, for people; timers use the steady
//     clock).
//   - Forget drops the record of a DOWN server that holds no role in any
//     shard, in one version; once shards are assigned the cluster size N
//     shrinks by one, never below --servers (a coordinator refuses such a
//     store). The id is then unknown: a Join under it is a new server's,
//     whatever its epoch.
//   - Failover (docs/design.md, "Failover and leases"): a server marked
//     DOWN while primary of a shard that has an UP backup is FENCED from
//     that moment F (memory only): LeaseView lists it as excluded, so no
//     lease granted from F on covers it. PromoteFenced, once the clock
//     passes F + FenceWait(lease), commits one version in which each such
//     shard's UP backup that leads the fewest shards (PlanPromotions,
//     placement.h) becomes its primary
//     and only replica; the DOWN server stays listed without those shards
//     and is no longer fenced. Shards with no UP backup stay its own. A
//     server that comes back UP before then is no longer fenced and keeps
//     its shards. A coordinator that opens a store with such DOWN primaries
//     fences them from the moment it opens. The promotion clears the
//     shard's syncing servers and handover (they restart from the new
//     primary through Rebalance).
//   - Every change bumps the map version by one and is committed to the
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
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "coordinator/placement.h"
#include "coordinator/state_store.h"
#include "proto/rkv.pb.h"

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
  // How long a server stays DOWN before its backup and syncing roles go
  // to other servers (`--replace_after_ms`): [0, kMaxReplaceAfter], 0 =
  // never. Counted from when this coordinator saw it go DOWN (or started).
  std::chrono::milliseconds replace_after{30000};
  // Fast suspicion (coordinator/prober.h): a server whose heartbeats have
  // been silent this long is probed (`--suspect_after_ms`); 0 = never
  // (only the heartbeat timeout marks it DOWN). When set: above the period
  // servers heartbeat at, ServerHeartbeatPeriod, and below heartbeat_timeout.
  std::chrono::milliseconds suspect_after{0};
  // How long a probe waits for the server's answer (`--probe_timeout_ms`):
  // [10, 10000].
  std::chrono::milliseconds probe_timeout{400};
};

// How often a server heartbeats: every heartbeat_interval or every lease / 3,
// whichever is shorter (docs/design.md §8.8, "Grants").
std::chrono::milliseconds ServerHeartbeatPeriod(const CoordinatorConfig& config);

inline constexpr std::chrono::milliseconds kMaxReplaceAfter{7LL * 24 * 3600 * 1000};

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

using Clock = std::function<std::chrono::steady_clock::time_point()>;
// The wall clock, read only for what people are shown (when a server went
// DOWN); never for a timer or a decision.
using WallClock = std::function<std::chrono::system_clock::time_point()>;

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
  // written with another shard count or replication factor (a store older
  // than replication has R = 1), or with a cluster size below --servers
  // (a larger one is a cluster grown by joins, and is kept); DATA_LOSS
  // when its records contradict each other (replica sets included).
  // Servers keep their stored state; UP ones get a fresh heartbeat
  // deadline counted from now, DOWN ones are counted DOWN (replace_after)
  // and handovers in progress wait FenceWait from now. `wall_clock`
  // stamps ServerInfo.down_since_unix_ms.
  static StatusOr<std::unique_ptr<CoordinatorState>> Open(const CoordinatorConfig& config,
                                                          std::unique_ptr<StateStore> store,
                                                          Clock clock = std::chrono::steady_clock::now,
                                                          WallClock wall_clock = std::chrono::system_clock::now);

  // Loads the state again from the store, as Open does (and with the same
  // errors), replacing everything held in memory: timers and fences start
  // again from now, as after a restart, and WaitForChange callers wake.
  // What a standby coordinator does when the shared store changes
  // (`quiet`: no log line per server, and no fence, since a standby grants
  // no lease and promotes nothing), and what a coordinator that has just
  // been elected leader does before it acts (not quiet: the fences of DOWN
  // primaries count from now, which covers every lease an earlier leader
  // granted; docs/design.md section 8.8). On an error the state in memory
  // is not to be used until a Reload succeeds.
  Status Reload(bool quiet) EXCLUDES(mu_, lease_mu_);

  CoordinatorState(const CoordinatorState&) = delete;
  CoordinatorState& operator=(const CoordinatorState&) = delete;

  // Identity binding (docs/design.md §10). `credential` is the name of
  // the server credential (rkv-coordinator --server_credentials_file) a
  // server call was made with, or "" when servers share the cluster
  // credential (then nothing is bound or checked). Join binds an id to the
  // credential it joins with when the id is new or not bound yet (a record
  // stored before binding existed, or joined with the shared credential);
  // the binding is persisted with the server's record and lasts until
  // Forget. Every server call for a bound id with another credential is
  // refused PERMISSION_DENIED, naming both, and changes nothing. With a
  // credential, Heartbeat, Leave and the reports of an id not bound yet
  // are refused the same way: the server must Join first. The reports are
  // checked against the reporter's id only (not the backup it names).

  // Errors: INVALID_ARGUMENT (malformed request), FAILED_PRECONDITION
  // (stale epoch, conflicting rejoin, another zone than the id joined
  // with, a new id in a cluster of control::kMaxExpectedServers),
  // PERMISSION_DENIED (the id is bound to another credential), or the
  // store's error when the change could not be committed.
  StatusOr<v1::JoinResponse> Join(const v1::JoinRequest& request, std::string_view credential = {})
      EXCLUDES(mu_, lease_mu_);

  // Takes request.backup_id out of the replica set of every listed shard
  // whose primary is the reporter and which lists the backup, keeping the
  // order of the others, in one new map version; returns that version, or
  // the current one when no set lists the backup any more (idempotent).
  // Shards the reporter is not the primary of are left alone. Errors:
  // INVALID_ARGUMENT (malformed, or a shard not below the shard count),
  // NOT_FOUND (unknown reporter or backup), FAILED_PRECONDITION (the
  // reporter's epoch is not its current one, it is DOWN, the backup is the
  // reporter itself, or shards are not assigned yet), or the store's error.
  StatusOr<v1::ReportReplicaFailureResponse> ReportReplicaFailure(const v1::ReportReplicaFailureRequest& request,
                                                                  std::string_view credential = {})
      EXCLUDES(mu_, lease_mu_);

  // Errors: INVALID_ARGUMENT, NOT_FOUND (unknown id), FAILED_PRECONDITION
  // (another epoch, or the server is DOWN): the server must Join again.
  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request, std::string_view credential = {})
      EXCLUDES(mu_);

  // Marks the server DOWN. OK as well when it already is. Errors as for
  // Heartbeat (a DOWN server excepted), or the store's.
  Status Leave(const v1::LeaveRequest& request, std::string_view credential = {}) EXCLUDES(mu_, lease_mu_);

  // Marks DOWN every UP server whose deadline has passed, one version
  // each. Returns how many; on a commit error the servers stay UP and the
  // error is returned (the next call retries).
  StatusOr<int> ExpireHeartbeats() EXCLUDES(mu_, lease_mu_);

  // Fast suspicion (docs/design.md §8.8, "Suspicion and probes"): a server
  // whose heartbeats stopped, or that a primary could not forward to, is
  // probed (its Admin Health, CoordinatorServer's Prober) before its
  // heartbeat timeout.
  struct ProbeTarget {
    std::string server_id;
    uint64_t epoch = 0;
    std::string admin_address;
  };
  // Every UP server with an admin address whose last heartbeat is older
  // than `silent` (none when `silent` is zero).
  std::vector<ProbeTarget> SilentServers(std::chrono::milliseconds silent) const EXCLUDES(mu_);
  // The UP server `server_id` with an admin address, if there is one.
  std::optional<ProbeTarget> ProbeTargetOf(const std::string& server_id) const EXCLUDES(mu_);
  // A probe of `server_id` at `epoch`, started at `probe_started` (this
  // state's clock), got no answer from that incarnation: marks it DOWN and
  // fences it, exactly as ExpireHeartbeats would, when it is still UP at
  // that epoch and no heartbeat of it arrived since the probe started (a
  // live server's heartbeat outweighs a lost probe). Returns whether it
  // marked it; the store's error on a failed commit (it stays UP).
  StatusOr<bool> ConfirmSuspect(const std::string& server_id, uint64_t epoch,
                                std::chrono::steady_clock::time_point probe_started, const std::string& why)
      EXCLUDES(mu_, lease_mu_);
  // A probe of `server_id` at `epoch` is about to be sent. When that
  // incarnation is UP and primary of a shard with an UP backup, it gets a
  // suspicion fence: every lease granted from now on excludes it, until
  // EndProbe, a heartbeat or a Join of it; if the probe then marks it DOWN
  // (ConfirmSuspect), its fence counts from this moment rather than from
  // the DOWN, so its shards may move FenceWait after the probe began
  // (docs/design.md §8.8, "Suspicion and probes"). Returns the moment
  // (this state's clock, after the lease view excludes it) that the probe
  // counts from: the `probe_started` of ConfirmSuspect.
  std::chrono::steady_clock::time_point BeginProbe(const std::string& server_id, uint64_t epoch)
      EXCLUDES(mu_, lease_mu_);
  // The probe of `server_id` ended: its suspicion fence, if it still has
  // one, ends (a fence of a server marked DOWN is not touched).
  void EndProbe(const std::string& server_id) EXCLUDES(mu_, lease_mu_);
  // Whether `server_id` has a suspicion fence now (tests, logs).
  bool SuspicionFenced(const std::string& server_id) const EXCLUDES(mu_);

  // Commits, in one new version, the promotion of every fenced server
  // whose FenceWait has passed (see the rules above); first fences any
  // DOWN primary with an UP backup that is not fenced yet (a backup that
  // came back with its epoch). Returns how many shards changed primary (0:
  // no new version). On a commit error nothing changes, the fences stay
  // and the error is returned (the next call retries).
  StatusOr<int> PromoteFenced() EXCLUDES(mu_, lease_mu_);

  // Moves request.server_id from syncing to the replicas of
  // each listed shard whose primary is still primary_id and whose syncing
  // servers still include it, in one new map version (none when nothing
  // moves). The others are answered in refused_shards. Errors:
  // INVALID_ARGUMENT (malformed, a shard not below the shard count, more
  // entries than shards), NOT_FOUND (unknown server), FAILED_PRECONDITION
  // (epoch not current, DOWN, or shards not assigned), or the store's.
  StatusOr<v1::ReportCaughtUpResponse> ReportCaughtUp(const v1::ReportCaughtUpRequest& request,
                                                      std::string_view credential = {}) EXCLUDES(mu_, lease_mu_);

  // Marks the server draining (persisted; idempotent): it gets no new
  // role and Rebalance moves each of its roles away. Answers the version
  // and how many roles it still holds. Errors: INVALID_ARGUMENT, NOT_FOUND
  // (unknown server), FAILED_PRECONDITION (it holds a role and no other
  // server is UP and not draining: the message names its shards; nothing
  // changes), or the store's.
  StatusOr<v1::DrainResponse> Drain(const v1::DrainRequest& request) EXCLUDES(mu_, lease_mu_);

  // Removes a server gone for good: its record is deleted and the map no
  // longer lists it, in one new version (answered); once shards are
  // assigned, N shrinks by one. What memory held about it (its DOWN time,
  // fence, reports) goes too, so a Join under its id is a new server's.
  // Errors: INVALID_ARGUMENT (malformed id), NOT_FOUND (unknown server),
  // FAILED_PRECONDITION naming why, nothing changed: it is UP, it still
  // holds a role in some shard (primary, backup or syncing; the message
  // names the shards), or shards are assigned and N - 1 would be below
  // --servers; or the store's error.
  StatusOr<v1::ForgetResponse> Forget(const v1::ForgetRequest& request) EXCLUDES(mu_, lease_mu_);

  // One pass of re-replication and rebalancing (PlanRebalance,
  // placement.h, whose steps say what moves), committed as one new map
  // version (none when nothing is to change). What it tells the planner:
  // a handover is done when it began FenceWait(lease) ago or more (or
  // before this coordinator started, counted from then); a server is to
  // be replaced when it has been DOWN for replace_after (not 0); a server
  // is reported when a primary reported it failing (ReportReplicaFailure)
  // in the last heartbeat_timeout.
  // Returns how many roles changed. On a commit error nothing changes and
  // the error is returned (the next call retries).
  StatusOr<int> Rebalance() EXCLUDES(mu_, lease_mu_);

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
    // Shards it hands over (handover_from), ascending; persisted.
    std::vector<uint32_t> handover_shards;
    // The server credential the id is bound to ("" for none); persisted.
    std::string credential;
  };

  // OK when a server call for `s` with `credential` may act for it (see
  // "Identity binding" above); PERMISSION_DENIED naming the call, the
  // credential, the id and its binding otherwise.
  static Status CheckBound(const Server& s, std::string_view credential, std::string_view rpc);

  // The roles of every shard in `servers` (assigned): the planners' input
  // (placement.h), read from the servers' records.
  std::vector<ShardRoles> RolesOf(const std::vector<Server>& servers) const;
  // Writes `roles` back into the servers' shards, backup_shards,
  // syncing_shards and handover_shards; appends to `changed` the index of
  // each server whose record changed.
  void ApplyRoles(const std::vector<ShardRoles>& roles, std::vector<Server>* servers,
                  std::vector<size_t>* changed) const;

  CoordinatorState(const CoordinatorConfig& config, std::unique_ptr<StateStore> store, Clock clock,
                   WallClock wall_clock);
  Status Load() EXCLUDES(mu_, lease_mu_);
  Status LoadLocked(bool quiet) REQUIRES(mu_) EXCLUDES(lease_mu_);
  // Commits `next` (servers in join order) with version_ + 1, writing the
  // records of `changed` (indices into next) and deleting those of
  // `removed` (server ids next no longer lists), then makes it current and
  // publishes the lease view.
  // `next_expected`, when not 0, is the new cluster size N.
  Status CommitLocked(std::vector<Server> next, const std::vector<size_t>& changed, bool next_assigned,
                      uint32_t next_expected = 0, const std::vector<std::string>& removed = {}) REQUIRES(mu_)
      EXCLUDES(lease_mu_);
  // `info` as a probe target: when it is UP and has an admin address.
  static std::optional<ProbeTarget> ProbeTargetIn(const v1::ServerInfo& info);
  // Commits servers_[i] as DOWN (one version), records when, and fences
  // it; `why` is for the log.
  Status MarkServerDownLocked(size_t i, const std::string& why) REQUIRES(mu_) EXCLUDES(lease_mu_);
  // Records servers_[i] as DOWN from now (for replace_after).
  void MarkDownLocked(size_t i) REQUIRES(mu_);
  // The wall clock now, in milliseconds since the Unix epoch (for
  // ServerInfo.down_since_unix_ms).
  uint64_t WallMs() const;
  // True when servers_[i] is DOWN and primary of a shard with an UP backup.
  bool FenceableLocked(size_t i) const REQUIRES(mu_);
  // True when servers_[i] is primary of a shard that another UP server
  // backs up (shards assigned).
  bool LeadsABackedShardLocked(size_t i) const REQUIRES(mu_);
  // Fences servers_[i] when FenceableLocked and not fenced yet: publishes
  // the lease view that excludes it, then records the clock as its fence
  // time (so no lease granted after that time covers it); `why` goes to
  // the log.
  void FenceLocked(size_t i, const std::string& why) REQUIRES(mu_) EXCLUDES(lease_mu_);
  // Ends the fence of `id`, if any (it came back UP), and its suspicion
  // fence (it was heard from).
  void UnfenceLocked(const std::string& id) REQUIRES(mu_) EXCLUDES(lease_mu_);
  // Ends the suspicion fence of `id`, if any; `why` goes to the log.
  void EndSuspicionFenceLocked(const std::string& id, const char* why) REQUIRES(mu_) EXCLUDES(lease_mu_);
  // Makes Lease() answer version_ and the fenced servers (suspicion
  // fences included).
  void PublishLeaseLocked() REQUIRES(mu_) EXCLUDES(lease_mu_);
  // Gives every shard its primary ((s mod N)-th server) and backups, as
  // placement's AssignShards places them.
  void AssignShards(std::vector<Server>* next) const;
  // The sizes of the roles a server holds: primaries, backups, syncing.
  static size_t RoleCount(const v1::ServerInfo& info) {
    return static_cast<size_t>(info.shards_size() + info.backup_shards_size() + info.syncing_shards_size());
  }
  v1::ClusterMap MapLocked() const REQUIRES(mu_);
  // What a joined server is told: the map version, its shards (`info`'s),
  // the heartbeat interval and timeout and the lease.
  v1::JoinResponse JoinReplyLocked(const v1::ServerInfo& info) const REQUIRES(mu_);
  int FindLocked(const std::string& id) const REQUIRES(mu_);
  static std::string Describe(const v1::ServerInfo& info);
  // Describe(s.info), with the credential it is bound to (for the audit
  // lines: join, leave, DOWN, promotion, drain, forget).
  static std::string Describe(const Server& s);

  const CoordinatorConfig config_;
  const uint32_t replicas_;  // EffectiveReplicas(config_)
  const Clock clock_;
  const WallClock wall_clock_;

  // Serializes every public method, the store's commits included (the
  // store need not be thread-safe).
  mutable Mutex mu_;
  const std::unique_ptr<StateStore> store_ PT_GUARDED_BY(mu_);
  CondVar changed_cv_;  // notified when version_ changes or closed_ is set
  std::vector<Server> servers_ GUARDED_BY(mu_);  // join order; at most expected_servers_
  uint64_t version_ GUARDED_BY(mu_) = 0;
  bool assigned_ GUARDED_BY(mu_) = false;  // shards assigned (once N servers joined)
  bool closed_ GUARDED_BY(mu_) = false;
  // Fenced servers and when they were fenced (coordinator clock).
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> fenced_since_ GUARDED_BY(mu_);
  // UP servers being probed with a suspicion fence (BeginProbe), and since
  // when leases exclude them (coordinator clock; memory only).
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> suspect_fenced_since_ GUARDED_BY(mu_);
  // N: config_.expected_servers, grown by each new id joining the
  // complete cluster; persisted.
  uint32_t expected_servers_ GUARDED_BY(mu_);
  // DOWN servers and since when (this coordinator's clock; memory only).
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> down_since_ GUARDED_BY(mu_);
  // (shard, server id) -> the map version that (last) made the server
  // syncing the shard; memory only: every syncing role loaded at start-up
  // counts from the loaded version. ReportCaughtUp refuses a report whose
  // fetch used an older map (CaughtUpShard.sync_map_version): the role was
  // taken away and given back since, and writes in between were not
  // forwarded to the server.
  std::map<std::pair<uint32_t, std::string>, uint64_t> syncing_since_ GUARDED_BY(mu_);
  // Records in syncing_since_ the syncing roles `next` has that servers_
  // has not (called by CommitLocked before it installs `next` as version_
  // + 1), and forgets the roles `next` no longer has.
  void NoteSyncingLocked(const std::vector<Server>& next) REQUIRES(mu_);
  // Servers a primary reported as failing to acknowledge (ReportReplica-
  // Failure) and when: for heartbeat_timeout after that, Rebalance gives
  // them no new role, so that a server the primaries cannot reach is not
  // added back at once, over and over; memory only.
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> reported_at_ GUARDED_BY(mu_);
  // Shards in handover and when the version that began it was committed
  // (or this coordinator started); memory only.
  std::unordered_map<uint32_t, std::chrono::steady_clock::time_point> handover_since_ GUARDED_BY(mu_);

  // Guards only the published lease view, so that RenewLease never waits
  // behind a store commit (which holds mu_). Taken after mu_.
  mutable Mutex lease_mu_ ACQUIRED_AFTER(mu_);
  LeaseView lease_view_ GUARDED_BY(lease_mu_);
};

}  // namespace rkv::coordinator
