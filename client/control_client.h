// ControlClient: librkv's side of the control plane. Fetches the cluster
// map from the coordinator (GetClusterMap), follows it with a watch thread
// (WatchClusterMap, reconnecting with backoff while the coordinator is
// down), renews leases for a LeaseKeeper (RenewLease) and calls a server's
// Admin service. Every RPC carries the token
// digest (proto/auth.h). Maps are validated and indexed (RoutingTable)
// before they are published to the MapHolder; a malformed or incomplete
// map is never installed.
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
#include "client/server_connection.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "proto/rkv.grpc.pb.h"

namespace rkv::client {

class ControlClient {
 public:
  // Refetches triggered by data-plane failures happen at most this often.
  static constexpr std::chrono::milliseconds kMinRefetchInterval{100};
  // Watch reconnect backoff bounds.
  static constexpr std::chrono::milliseconds kWatchBackoffMin{100};
  static constexpr std::chrono::milliseconds kWatchBackoffMax{2000};

  // `coordinator` is "HOST:PORT"; `holder` must outlive this object.
  ControlClient(std::string coordinator, const std::string& token, MapHolder* holder);
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  const std::string& coordinator() const { return coordinator_; }

  // One GetClusterMap; installs the map when it is newer. Returns the
  // routing table built from the fetched map. Errors: the RPC's status
  // with "coordinator HOST:PORT" prepended, INVALID_ARGUMENT for a
  // malformed map, UNAVAILABLE "cluster has K of N servers" for an
  // incomplete one.
  StatusOr<std::shared_ptr<const RoutingTable>> Fetch(Deadline deadline);

  // Fetch, unless one was attempted less than kMinRefetchInterval ago (or
  // is running in another thread). It takes at most half the time left
  // before `deadline` (and 500 ms). A failure is logged, not returned: the
  // cached map stays in use. Returns whether a newer map got installed.
  bool MaybeRefetch(Deadline deadline) EXCLUDES(refetch_mu_);

  // Starts the watch thread (once).
  void StartWatch() EXCLUDES(watch_mu_);

  // One RenewLease for `map_version` (LeaseKeeper): the coordinator's
  // answer, or the RPC's status with "coordinator HOST:PORT: RenewLease"
  // prepended (UNIMPLEMENTED from a coordinator older than leases).
  StatusOr<v1::RenewLeaseResponse> RenewLease(uint64_t map_version, Deadline deadline);

  // Admin.Stats of the server whose Admin service is at `admin_address`.
  StatusOr<v1::StatsResponse> Stats(const std::string& admin_address, Deadline deadline);

  // Admin.ShardChecksums of the server at `admin_address`.
  StatusOr<v1::ShardChecksumsResponse> ShardChecksums(const std::string& admin_address,
                                                      const std::vector<uint32_t>& shards, Deadline deadline);
  // Admin.ListShard of the server at `admin_address`: every chunk's
  // records in one chunk, with the last chunk's done and snapshot_version.
  // UNAVAILABLE when the stream ended without its done chunk.
  StatusOr<v1::ShardChunk> ListShard(const std::string& admin_address, uint32_t shard, Deadline deadline);
  // Coordinator.Drain of `server_id`; errors prefixed "coordinator
  // HOST:PORT: Drain SERVER_ID".
  StatusOr<v1::DrainResponse> Drain(const std::string& server_id, Deadline deadline);

 private:
  // MaybeRefetch once it holds refetch_mu_.
  bool RefetchLocked(Deadline deadline) REQUIRES(refetch_mu_);
  void WatchLoop() EXCLUDES(watch_mu_);

  const std::string coordinator_;
  const std::string digest_hex_;
  MapHolder* const holder_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;

  Mutex refetch_mu_;  // held by the one thread refetching
  Clock::time_point last_refetch_ GUARDED_BY(refetch_mu_){};

  Mutex watch_mu_;
  CondVar watch_cv_;  // signalled when stopping_ is set
  bool stopping_ GUARDED_BY(watch_mu_) = false;
  grpc::ClientContext* watch_context_ GUARDED_BY(watch_mu_) = nullptr;  // the running watch's, to cancel it
  // Started by StartWatch (under watch_mu_), joined by the destructor once
  // stopping_ is set (without the lock, which the thread takes).
  std::thread watch_thread_;
};

}  // namespace rkv::client
