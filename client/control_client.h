// ControlClient: librkv's side of the control plane. Reaches the cluster's
// coordinators through a CoordinatorSet (proto/coordinator_set.h: one or
// several, the leader found and followed): fetches the cluster map from any
// of them (GetClusterMap), follows it with a watch thread (WatchClusterMap
// on a coordinator that is connected, moving to another when its stream
// breaks), renews leases for a LeaseKeeper (on a KeepLease stream to the
// leader, client/lease_stream.h; RenewLease when it has none) and
// calls a server's Admin service. Every RPC carries the token digest
// (proto/auth.h). Maps are validated and indexed (RoutingTable) before they
// are published to the MapHolder; a malformed or incomplete map is never
// installed.
//
// Thread safety: all methods are thread-safe. The destructor stops the
// watch thread (cancelling its stream) and joins it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include "client/cluster_map.h"
#include "client/lease_stream.h"
#include "client/server_connection.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "proto/coordinator_set.h"
#include "proto/rkv.grpc.pb.h"

namespace rkv::client {

class ControlClient {
 public:
  // Refetches triggered by data-plane failures happen at most this often.
  static constexpr std::chrono::milliseconds kMinRefetchInterval{100};
  // Watch reconnect backoff bounds: a stream that ends at once (refused)
  // is reopened after a backoff that doubles; one that had brought a map,
  // or had been open for kWatchBackoffMax, after kWatchBackoffMin.
  static constexpr std::chrono::milliseconds kWatchBackoffMin{100};
  static constexpr std::chrono::milliseconds kWatchBackoffMax{2000};
  // How long the watch thread waits for a connected coordinator at a time
  // (then it checks whether it is stopping, and waits again).
  static constexpr std::chrono::milliseconds kWatchConnectWait{250};

  // `coordinators` reaches the cluster's coordinators (with the token);
  // `holder` must outlive this object.
  ControlClient(std::unique_ptr<control::CoordinatorSet> coordinators, const std::string& token, MapHolder* holder);
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // The coordinators ("A,B,C"), for messages.
  const std::string& coordinators() const { return coordinators_->list(); }

  // One GetClusterMap from any coordinator; installs the map when it is
  // newer. Returns the routing table built from the fetched map. Errors:
  // the RPC's status naming the coordinators tried ("coordinator
  // HOST:PORT: GetClusterMap: ..."), INVALID_ARGUMENT for a malformed map,
  // UNAVAILABLE "cluster has K of N servers" for an incomplete one.
  StatusOr<std::shared_ptr<const RoutingTable>> Fetch(Deadline deadline);

  // Fetch, unless one was attempted less than kMinRefetchInterval ago (or
  // is running in another thread). It takes at most half the time left
  // before `deadline` (and 500 ms). A failure is logged, not returned: the
  // cached map stays in use. Returns whether a newer map got installed.
  bool MaybeRefetch(Deadline deadline) EXCLUDES(refetch_mu_);

  // Starts the watch thread (once).
  void StartWatch() EXCLUDES(watch_mu_);

  // One lease renewal for `map_version` (LeaseKeeper) from the leader: on
  // the KeepLease stream to it when one is open (within at most half the
  // time left, and kMinStreamWait, so that a silent coordinator leaves
  // time for the others); else, or when the stream breaks, with a unary
  // RenewLease, which finds and follows the leader, after which a stream
  // is opened on the coordinator that answered. Its answer, or the RPC's
  // status with "coordinator HOST:PORT: RenewLease" prepended
  // (UNIMPLEMENTED from a coordinator older than leases; one older than
  // KeepLease is renewed with RenewLease only).
  StatusOr<v1::RenewLeaseResponse> RenewLease(uint64_t map_version, Deadline deadline) EXCLUDES(lease_mu_);
  // The least time a renewal waits for its answer on a stream.
  static constexpr std::chrono::milliseconds kMinStreamWait{250};

  // Admin.Stats of the server whose Admin service is at `admin_address`.
  StatusOr<v1::StatsResponse> Stats(const std::string& admin_address, Deadline deadline);

  // Admin.ShardChecksums of the server at `admin_address`.
  StatusOr<v1::ShardChecksumsResponse> ShardChecksums(const std::string& admin_address,
                                                      const std::vector<uint32_t>& shards, Deadline deadline);
  // Admin.ListShard of the server at `admin_address`: every chunk's
  // records in one chunk, with the last chunk's done and snapshot_version.
  // UNAVAILABLE when the stream ended without its done chunk.
  StatusOr<v1::ShardChunk> ListShard(const std::string& admin_address, uint32_t shard, Deadline deadline);
  // Coordinator.Drain of `server_id` by the leader; errors prefixed
  // "coordinator HOST:PORT: Drain SERVER_ID".
  StatusOr<v1::DrainResponse> Drain(const std::string& server_id, Deadline deadline);
  // Coordinator.ReportUnresponsive by the leader (UnresponsiveReporter);
  // errors prefixed "coordinator HOST:PORT: ReportUnresponsive SERVER_ID".
  StatusOr<v1::ReportUnresponsiveResponse> ReportUnresponsive(const v1::ReportUnresponsiveRequest& request,
                                                              Deadline deadline);
  // Coordinator.Forget of `server_id` by the leader; errors prefixed
  // "coordinator HOST:PORT: Forget SERVER_ID".
  StatusOr<v1::ForgetResponse> Forget(const std::string& server_id, Deadline deadline);

  // GetCoordinatorStatus of every listed coordinator, in list order: each
  // answer, or that coordinator's error.
  std::vector<StatusOr<v1::CoordinatorStatus>> CoordinatorStatuses(Deadline deadline);
  // The listed coordinators' addresses.
  const std::vector<std::string>& coordinator_addresses() const;

 private:
  // MaybeRefetch once it holds refetch_mu_.
  bool RefetchLocked(Deadline deadline) REQUIRES(refetch_mu_);
  void WatchLoop() EXCLUDES(watch_mu_);
  // Opens the lease stream on `address` (the leader that just answered).
  void OpenLeaseStream(const std::string& address) REQUIRES(lease_mu_);

  const std::unique_ptr<control::CoordinatorSet> coordinators_;
  const std::string digest_hex_;
  MapHolder* const holder_;

  Mutex refetch_mu_;  // held by the one thread refetching
  Clock::time_point last_refetch_ GUARDED_BY(refetch_mu_){};

  Mutex lease_mu_;  // held by the one renewal running
  std::unique_ptr<LeaseStream> lease_stream_ GUARDED_BY(lease_mu_);
  // A coordinator answered KeepLease UNIMPLEMENTED: renew with RenewLease.
  bool streams_unsupported_ GUARDED_BY(lease_mu_) = false;

  Mutex watch_mu_;
  CondVar watch_cv_;  // signalled when stopping_ is set
  bool stopping_ GUARDED_BY(watch_mu_) = false;
  grpc::ClientContext* watch_context_ GUARDED_BY(watch_mu_) = nullptr;  // the running watch's, to cancel it
  // Started by StartWatch (under watch_mu_), joined by the destructor once
  // stopping_ is set (without the lock, which the thread takes).
  std::thread watch_thread_;
};

}  // namespace rkv::client
