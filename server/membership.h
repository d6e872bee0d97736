// A server's membership in the cluster: its stable identity, its Join with
// the coordinator, the heartbeats that keep it UP, and the cluster map it
// follows (the MapSource of the replication policy, server/replication/map_policy.h).
//
// The data path never waits on the coordinator beyond the bounds it passes
// in: Start blocks only the caller (at startup), the heartbeat and watch
// threads run on their own, and map() only copies a pointer.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/protocol.h"
#include "common/status.h"
#include "proto/rkv.pb.h"
#include "proto/table_params.h"
#include "proto/tls.h"
#include "server/replication/map_source.h"

namespace grpc {
class ClientContext;
}

namespace rkv::server {

// The server id, kept in the file `server_id` of the data dir so that a
// restart keeps it (the epoch, not the id, tells restarts apart).
struct ServerIdentity {
  std::string server_id;

  // Reads `data_dir`/server_id, or, when it does not exist, creates the
  // dir if needed and the file (written durably: temp file, fsync, rename)
  // with a fresh random id "s-<8 hex digits>". DATA_LOSS when the file holds
  // something that is not a valid server id; file system errors as
  // PosixError.
  static StatusOr<ServerIdentity> LoadOrCreate(const std::string& data_dir);
};

// What this server announces in its Join (rkv.v1.JoinRequest).
struct JoinInfo {
  std::string server_id;
  uint64_t epoch = 0;
  std::string data_address;   // HOST:PORT clients connect to (not 0.0.0.0)
  std::string admin_address;  // HOST:PORT of the Admin service
  std::string transport;      // "tcp" or "verbs"
  protocol::RegionDescriptor index;  // TableHeader + buckets, REMOTE_READ
  protocol::RegionDescriptor heap;   // blocks, REMOTE_READ
  control::TableParams table;
  std::string zone;  // failure domain (--zone); may be empty
};

// Reported with every heartbeat.
struct MembershipStats {
  uint64_t keys = 0;
  uint64_t heap_bytes_used = 0;
};

struct MembershipOptions {
  // HOST:PORT of the coordinator, or a comma-separated list of the
  // cluster's coordinators (control::ParseCoordinatorList); Join,
  // Heartbeat, Leave and the reports go to the leader among them
  // (control::CoordinatorSet), map reads and the watch to any.
  std::string coordinator_address;
  // The raw credential (only its digest is sent): the cluster credential
  // (ClusterToken), which the coordinator may demand for Join, Heartbeat,
  // Leave and the reports.
  std::string token;
  // TLS to the coordinators (empty: plain gRPC): the server's certificate,
  // key and CA (rkv-server --tls_cert, --tls_key, --tls_ca).
  control::TlsFiles tls;
  JoinInfo self;
  // Called from the heartbeat thread before each heartbeat; must be cheap
  // and thread-safe. May be empty (zeros are reported).
  std::function<MembershipStats()> stats;
  std::chrono::milliseconds rpc_timeout{2000};      // per Join/Heartbeat call
  // Join retries, and restarts of a map watch stream that ended at once,
  // doubling.
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{2000};
};

// What the replication policy relies on in a map beyond ValidateClusterMap:
// replication_factor at most the number of servers (0 reads as 1);
// shard_replicas empty, or, only once shard_owner is set, exactly
// shard_count entries, each naming at least one replica, shard_owner[s]
// first, and at most 2 * max(R, 1) distinct listed servers in server_ids
// and syncing_ids together (R roles in flight), with handover_from, when
// set, one of its backups. INVALID_ARGUMENT naming the shard otherwise.
Status CheckReplicaLists(const v1::ClusterMap& map);

// Following the map: once joined, a watch thread holds a WatchClusterMap
// stream open on a connected coordinator, any of them (reopened, on
// another coordinator when there is one, when it breaks, e.g. across a
// coordinator restart: after initial_backoff when the stream had lived,
// with backoff up to max_backoff when it ended at once), and installs
// every map it receives that passes
// ValidateClusterMap and CheckReplicaLists and is newer than the one
// installed; a map that fails them is logged and ignored. When a heartbeat
// reports a version this server has not installed, a third thread, the
// fetch thread, gives the stream kFetchGrace (50 ms) to bring it and
// otherwise fetches the map (GetClusterMap), so a stalled stream delays a
// map by at most a heartbeat interval and a fetch. The heartbeat thread never
// fetches: a heartbeat is this server's liveness, and a map fetch that is
// slow (a coordinator busy with many map changes, a loaded machine) must
// not delay the next one, or the coordinator declares a live server DOWN,
// and each such false DOWN changes the map again.
//
// Leases: each successful Join or Heartbeat grants this server a lease
// (LeaseFrom: from the steady time the request was sent, with the
// response's lease_ms, for maps of at least the response's map version;
// lease_ms 0 turns the lease off), which replaces the previous one (grants
// are sent one at a time, in order). A refused or failed one grants
// nothing, so the lease runs out and the replication policy stops
// acknowledging writes (MapPolicy::CheckLease).
//
// Thread safety: Start and Stop from one thread (Stop may also be called
// from another thread to abort a Start that is still retrying); everything
// else from any thread.
//
// Invariants: the installed map's version never decreases; map_version()
// is at least the installed map's version.
class Membership final : public MapSource {
 public:
  // How long the fetch thread lets the watch stream bring a version a
  // heartbeat reported before fetching it.
  static constexpr std::chrono::milliseconds kFetchGrace{50};
  // How long the watch thread waits for a connected coordinator at a time
  // (at most max_backoff; then it checks whether it is stopping).
  static constexpr std::chrono::milliseconds kWatchConnectWait{250};

  explicit Membership(MembershipOptions options);
  ~Membership() override;  // Stop()
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Joins, retrying with backoff while the coordinator is unreachable
  // (UNAVAILABLE, DEADLINE_EXCEEDED, ...), then starts the heartbeat thread.
  // Returns at once with the coordinator's error when it is fatal:
  // UNAUTHENTICATED (wrong token), FAILED_PRECONDITION (cluster full, stale
  // epoch), INVALID_ARGUMENT (a field it refused; also checked here before
  // any call). CANCELLED when Stop is called meanwhile. Call once.
  Status Start() EXCLUDES(stop_mu_, mu_);

  // Stops the heartbeat, watch and fetch threads (cancelling the stream), wakes
  // every WaitForVersion, then sends Leave (bounded by 2 s; a failure is
  // only logged) if the server had joined. Afterwards map() keeps the last
  // map, and the calls that would reach the coordinator return CANCELLED at
  // once. Idempotent.
  void Stop() EXCLUDES(stop_mu_, mu_);

  // The last map version the coordinator reported (0 before the Join).
  uint64_t map_version() const EXCLUDES(mu_);
  // The shards this server owns per the last Join or installed map; empty
  // until the cluster is complete.
  std::vector<uint32_t> shards() const EXCLUDES(mu_);
  // True while the last Join/Heartbeat succeeded.
  bool connected() const EXCLUDES(mu_);

  // MapSource. RefreshNow and ReportReplicaFailure use the coordinators
  // and token of the Join and work before Start (but not after Stop).
  const std::string& server_id() const override { return options_.self.server_id; }
  uint64_t epoch() const override { return options_.self.epoch; }
  std::shared_ptr<const v1::ClusterMap> map() const override EXCLUDES(mu_);
  Status WaitForVersion(uint64_t version, std::chrono::milliseconds timeout) override EXCLUDES(mu_);
  Status RefreshNow(std::chrono::milliseconds timeout) override EXCLUDES(mu_);
  StatusOr<uint64_t> ReportReplicaFailure(std::string_view backup_id, const std::vector<uint32_t>& shards,
                                          std::string_view reason, std::chrono::milliseconds timeout) override
      EXCLUDES(mu_);
  ServerLease lease() const override EXCLUDES(mu_);

  // Tells the coordinator that this server caught up on `shard`, fetched
  // from `primary_id` under map version `sync_map_version`
  // (ReportCaughtUp), retrying within `timeout` while the coordinator is
  // unreachable. The coordinator's answer (the shard is in refused_shards
  // when it was not moved), or its error (DEADLINE_EXCEEDED when `timeout`
  // ran out, CANCELLED when stopping).
  StatusOr<v1::ReportCaughtUpResponse> ReportCaughtUp(uint32_t shard, std::string_view primary_id,
                                                      uint64_t sync_map_version, std::chrono::milliseconds timeout)
      EXCLUDES(mu_);
  // The same for several shards in one call (one map version for all the
  // coordinator moves); every primary id is validated first.
  StatusOr<v1::ReportCaughtUpResponse> ReportCaughtUp(const std::vector<v1::CaughtUpShard>& shards,
                                                      std::chrono::milliseconds timeout) EXCLUDES(mu_);

 private:
  struct Rpc;  // the channel, stub and token digest

  // One Join attempt; updates the state on success.
  Status JoinOnce() EXCLUDES(mu_);
  Status HeartbeatOnce() EXCLUDES(mu_);
  // One GetClusterMap bounded by `timeout`; installs the map if newer.
  Status FetchMap(std::chrono::milliseconds timeout) EXCLUDES(mu_);
  // Records the lease a Join or Heartbeat sent at `sent` was granted.
  void Grant(std::chrono::steady_clock::time_point sent, uint32_t lease_ms, uint64_t map_version) EXCLUDES(mu_);
  // Validates `map` and installs it if it is newer than the installed one
  // (true then). `from` names the call it came by, for errors and logs.
  StatusOr<bool> InstallMap(const v1::ClusterMap& map, std::string_view from) EXCLUDES(mu_);
  void HeartbeatLoop() EXCLUDES(mu_);
  void WatchLoop() EXCLUDES(mu_);
  // Fetches the map when a heartbeat reported a version the watch stream
  // has not brought within a heartbeat interval.
  void FetchLoop() EXCLUDES(mu_);
  // The fetch thread's work: the installed map is older than the version
  // a heartbeat reported.
  bool FetchWantedLocked() const REQUIRES(mu_);
  // Sleeps `d` unless Stop is called; false when stopping.
  bool SleepFor(std::chrono::milliseconds d) EXCLUDES(mu_);
  // One report to the leading coordinator: `call(stub, context,
  // response)` (CoordinatorSet::CallLeader, the call named `what`),
  // retried with backoff while it answers UNAVAILABLE, within `timeout`.
  // The response, or the last error, naming the coordinators and `what`:
  // DEADLINE_EXCEEDED when no leader answered, CANCELLED when stopping,
  // any other error at once.
  template <typename Response, typename Call>
  StatusOr<Response> CallWithRetry(const std::string& what, std::chrono::milliseconds timeout, Call call)
      EXCLUDES(mu_);
  void NoteReachable(bool reachable, const Status& why) EXCLUDES(mu_);
  // Logs when the coordinator set reached another leader than before.
  void NoteLeader() EXCLUDES(mu_);
  // Leave, bounded by 2 s; a failure is only logged. Called by Stop, or by
  // a Start that finds Stop already ran, so never twice.
  void SendLeave() REQUIRES(stop_mu_) EXCLUDES(mu_);

  const MembershipOptions options_;
  std::unique_ptr<Rpc> rpc_;

  mutable Mutex mu_;
  CondVar stop_cv_;  // signalled when stopping_ becomes true
  bool stopping_ GUARDED_BY(mu_) = false;
  bool joined_ GUARDED_BY(mu_) = false;         // a Join succeeded at least once
  bool connected_ GUARDED_BY(mu_) = false;
  bool reported_down_ GUARDED_BY(mu_) = false;  // logged that the coordinator is unreachable
  std::string leader_ GUARDED_BY(mu_);          // the leading coordinator last reached ("" before)
  uint64_t map_version_ GUARDED_BY(mu_) = 0;
  std::vector<uint32_t> shards_ GUARDED_BY(mu_);
  std::chrono::milliseconds heartbeat_interval_ GUARDED_BY(mu_) = std::chrono::milliseconds(500);
  std::shared_ptr<const v1::ClusterMap> map_ GUARDED_BY(mu_);  // the installed map
  ServerLease lease_ GUARDED_BY(mu_);  // expired until the first grant
  uint32_t lease_ms_ GUARDED_BY(mu_) = 0;  // the last grant's length (0: none)
  CondVar map_cv_;  // signalled when map_ changes or stopping_ becomes true
  // The newest map version a heartbeat reported; the fetch thread brings
  // the map up to it if the watch stream does not.
  uint64_t fetch_wanted_ GUARDED_BY(mu_) = 0;
  CondVar fetch_cv_;  // signalled when fetch_wanted_ grows or stopping_ becomes true
  // The open watch stream's context, for Stop to cancel; null between
  // streams.
  grpc::ClientContext* watch_context_ GUARDED_BY(mu_) = nullptr;

  // Serializes Stop against itself and against the end of Start, so that
  // the heartbeat and watch threads are either joined by Stop or never
  // started. Taken before mu_ when both are held.
  Mutex stop_mu_ ACQUIRED_BEFORE(mu_);
  std::thread heartbeat_thread_ GUARDED_BY(stop_mu_);
  std::thread watch_thread_ GUARDED_BY(stop_mu_);
  std::thread fetch_thread_ GUARDED_BY(stop_mu_);
  bool stopped_ GUARDED_BY(stop_mu_) = false;
};

}  // namespace rkv::server
