// The Coordinator gRPC service over a CoordinatorState, and
// CoordinatorServer, which runs it on a grpc::Server together with the
// thread that marks silent servers DOWN, promotes the backups of fenced
// primaries and re-replicates and rebalances shards
// (CoordinatorState::ExpireHeartbeats, PromoteFenced, Rebalance).
//
// Every handler first checks the caller's token digest (proto/auth.h)
// against the role the call needs, then maps the state machine's Status
// onto the RPC status unchanged. Roles (docs/design.md §10): with a cluster
// credential (rkv-coordinator --cluster_token_file) the calls only a server
// makes about itself (Join, Heartbeat, Leave, ReportReplicaFailure,
// ReportCaughtUp) take that credential alone: a client credential gets
// PERMISSION_DENIED, an unknown digest UNAUTHENTICATED. Every other call
// (the map, leases, status, ReportUnresponsive) takes either, or the
// operator credential. Without a cluster credential, --token_file's client
// credential (named "token") serves every role. Client credentials are
// the set in force in a LiveClientCredentials (rkv-coordinator reloads it
// on SIGHUP): each call checks the set in force when it starts, and a
// revoked credential is refused UNAUTHENTICATED naming it.
//
// Per-server credentials (rkv-coordinator --server_credentials_file, in
// place of the shared cluster credential): each server presents its own,
// named credential, which serves the servers' role as the cluster
// credential does, and binds identity: CoordinatorState binds a server id
// to the credential it first joined with, and refuses (PERMISSION_DENIED
// naming the credential, the id and its binding) every later server call
// for the id made with another one (coordinator_state.h, "Identity
// binding"). Drain and Forget are logged at INFO with the operator's
// credential; Join, Leave, DOWN and promotions by the state, with the
// server's bound credential.
//
// Thread safety: the service is called from gRPC's threads concurrently;
// CoordinatorServer::Shutdown may be called from any thread, also
// concurrently (the calls are serialized), and the destructor calls it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <grpcpp/server.h>

#include "common/client_credentials.h"
#include "common/metrics/exposition.h"
#include "common/log_throttle.h"
#include "common/mutex.h"
#include "common/status.h"
#include "proto/rkv.grpc.pb.h"
#include "proto/tls.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/lease_streams.h"
#include "coordinator/prober.h"

namespace rkv::coordinator {

// Whether this coordinator leads the cluster now (several coordinators
// sharing etcd, coordinator/leadership.h). Without a gate a coordinator
// always leads (the embedded store: it is the only one).
class LeaderGate {
 public:
  virtual ~LeaderGate() = default;
  // OK while this coordinator leads; otherwise UNAVAILABLE "not the
  // leader; the leader is HOST:PORT" (or why none is known), with
  // `*leader` set to the leader's address ("" when none is known).
  virtual Status CheckLeading(std::string* leader) const = 0;
  // Fills what GetCoordinatorStatus answers beyond the map version: the
  // address, and with etcd the state's revision, prefix and each
  // endpoint's health (asked within `deadline`). Role, leader and the
  // reason come from CheckLeading.
  virtual void FillStatus(std::chrono::steady_clock::time_point deadline, v1::CoordinatorStatus* status) const = 0;
};

// This coordinator's role now, as GetCoordinatorStatus and GET /metrics
// report it: SINGLE without a gate (the only coordinator), else LEADER
// while the gate's CheckLeading is OK and STANDBY when it is not, with
// that answer (`leading`) and the leader it names (`leader`; "" without a
// gate or when none is known).
struct CoordinatorRole {
  v1::CoordinatorStatus::Role role = v1::CoordinatorStatus::SINGLE;
  Status leading;
  std::string leader;
};
CoordinatorRole CoordinatorRoleOf(const LeaderGate* gate);

// The trailing metadata key that names the leader in a "not the leader"
// answer (absent when no leader is known).
inline constexpr char kLeaderMetadataKey[] = "rkv-leader";

// KeepLease is served on gRPC's async API by LeaseStreams
// (coordinator/lease_streams.h); every other call on the sync server's
// threads.
class CoordinatorService final : public v1::Coordinator::WithAsyncMethod_KeepLease<v1::Coordinator::Service> {
 public:
  // `state` (and `gate`, when not null) must outlive the service. Calls
  // that change or vouch for the cluster's state (Join, Heartbeat, Leave,
  // the reports, Drain, Forget, RenewLease) are answered only while `gate`
  // says this coordinator leads; the map is answered by every coordinator.
  // `cluster_digest_hex` is TokenDigestHex of the cluster credential, or ""
  // for none (--token_file's client credential then serves every role).
  // `servers` (null or empty: none) are the per-server credentials; with
  // them `cluster_digest_hex` must be "" (CoordinatorServer::Start checks).
  CoordinatorService(CoordinatorState* state, std::shared_ptr<LiveClientCredentials> clients,
                     const LeaderGate* gate = nullptr, std::string cluster_digest_hex = "",
                     std::string operator_digest_hex = "",
                     std::shared_ptr<const ClientCredentials> servers = nullptr);

  grpc::Status Join(grpc::ServerContext* context, const v1::JoinRequest* request, v1::JoinResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status Leave(grpc::ServerContext* context, const v1::LeaveRequest* request, v1::LeaveResponse* response) override;
  grpc::Status ReportReplicaFailure(grpc::ServerContext* context, const v1::ReportReplicaFailureRequest* request,
                                    v1::ReportReplicaFailureResponse* response) override;
  // Queues a probe of the named server (when this coordinator has a
  // prober, and the server is UP at that epoch); changes nothing itself.
  grpc::Status ReportUnresponsive(grpc::ServerContext* context, const v1::ReportUnresponsiveRequest* request,
                                  v1::ReportUnresponsiveResponse* response) override;
  grpc::Status ReportCaughtUp(grpc::ServerContext* context, const v1::ReportCaughtUpRequest* request,
                              v1::ReportCaughtUpResponse* response) override;
  grpc::Status Drain(grpc::ServerContext* context, const v1::DrainRequest* request,
                     v1::DrainResponse* response) override;
  grpc::Status Forget(grpc::ServerContext* context, const v1::ForgetRequest* request,
                      v1::ForgetResponse* response) override;
  // Cheap: reads the state's published lease view (no store access).
  grpc::Status RenewLease(grpc::ServerContext* context, const v1::RenewLeaseRequest* request,
                          v1::RenewLeaseResponse* response) override;
  grpc::Status GetClusterMap(grpc::ServerContext* context, const v1::GetClusterMapRequest* request,
                             v1::ClusterMap* response) override;
  // Polls for client cancellation every kWatchPoll while no version comes;
  // a client credential revoked meanwhile ends the stream within that
  // (StillAllowed).
  grpc::Status WatchClusterMap(grpc::ServerContext* context, const v1::WatchClusterMapRequest* request,
                               grpc::ServerWriter<v1::ClusterMap>* writer) override;
  // Answered by every coordinator; asks etcd's endpoints (within 1 s) for
  // their health.
  grpc::Status GetCoordinatorStatus(grpc::ServerContext* context, const v1::CoordinatorStatusRequest* request,
                                    v1::CoordinatorStatus* response) override;

  // The address this coordinator listens on, answered by
  // GetCoordinatorStatus without a gate (set once it is bound).
  void set_address(const std::string& address) EXCLUDES(address_mu_);

  // The token check of every call open to clients (a KeepLease stream's
  // when it opens): the client token, the cluster credential or the
  // operator credential.
  grpc::Status CheckCaller(const grpc::ServerContextBase* context, std::string_view rpc) const;
  // For a stream open since CheckCaller let it in: OK while the client
  // credentials are the set `*seen` (generation of LiveClientCredentials)
  // names; after a reload, CheckCaller again (a revoked client credential
  // is refused UNAUTHENTICATED, ending the stream), `*seen` updated. Cheap
  // while nothing was reloaded: one atomic read.
  grpc::Status StillAllowed(const grpc::ServerContextBase* context, std::string_view rpc, uint64_t* seen) const;
  uint64_t credentials_generation() const { return clients_->generation(); }
  // The token check of a call that changes membership on an operator's
  // word (Drain, Forget): the operator credential when there is one
  // (PERMISSION_DENIED naming the role for the client token or the cluster
  // credential, UNAUTHENTICATED for any other digest), else CheckCaller's.
  // `*credential` (when not null) gets the accepted caller's name:
  // "operator", "cluster" or the client credential's.
  grpc::Status CheckOperatorCaller(const grpc::ServerContextBase* context, std::string_view rpc,
                                   std::string* credential = nullptr) const;
  // Each refusal of either check is counted (refusals()) and logged as a
  // WARNING naming the RPC, the peer and why, at most once a second (the
  // line says how many refusals it stands for).
  //
  // The token check of a call only servers make (`rpc` names it in the
  // refusal): a per-server credential when there are some (`*credential`
  // gets its name, which the state checks the call's server id against),
  // else the cluster credential when there is one, else the client token
  // (`*credential` then gets "": a shared credential binds no identity).
  // PERMISSION_DENIED for a client's or the operator's credential where a
  // server credential or the cluster credential is needed,
  // UNAUTHENTICATED for any other digest.
  // With require_peer_certificate_, also the caller's certificate.
  grpc::Status CheckServerCaller(const grpc::ServerContextBase* context, std::string_view rpc,
                                 std::string* credential) const;
  // CheckServerCaller's credential part.
  grpc::Status CheckServerCredential(const grpc::ServerContextBase* context, std::string_view rpc,
                                     std::string* credential) const;
  // RenewLease's answer (and each KeepLease answer): the lease view,
  // granted only while this coordinator leads before and after it is read.
  grpc::Status AnswerRenewal(grpc::ServerContextBase* context, v1::RenewLeaseResponse* response) const;

  // Calls refused by CheckCaller or CheckServerCaller since start: no or a
  // wrong credential (UNAUTHENTICATED), or a client's credential on a
  // server's call (PERMISSION_DENIED).
  struct RefusalCounts {
    uint64_t unauthenticated = 0;
    uint64_t permission_denied = 0;
  };
  RefusalCounts refusals() const {
    return {refused_unauthenticated_.load(std::memory_order_relaxed),
            refused_permission_.load(std::memory_order_relaxed)};
  }

  // Renewals answered since start (RenewLease and each KeepLease answer):
  // granted, or refused (this coordinator did not lead).
  struct RenewalCounts {
    uint64_t granted = 0;
    uint64_t refused = 0;
  };
  RenewalCounts renewals() const {
    return {renewals_granted_.load(std::memory_order_relaxed), renewals_refused_.load(std::memory_order_relaxed)};
  }

  static constexpr std::chrono::milliseconds kWatchPoll{100};

  // Where a reported backup failure becomes a suspicion of the backup
  // (nullptr: none). Set before the service is served; `prober` must
  // outlive the service.
  void set_prober(Prober* prober) { prober_.store(prober, std::memory_order_release); }
  // Served with TLS: the servers' calls (CheckServerCaller) also need the
  // caller's certificate, verified against the CA (mutual TLS); a caller
  // with the right credential and no certificate gets PERMISSION_DENIED.
  // Set before the service is served.
  void set_require_peer_certificate(bool require) { require_peer_certificate_ = require; }

 private:
  // OK while this coordinator leads; otherwise the "not the leader"
  // answer, with the leader in the trailing metadata.
  grpc::Status CheckLeader(grpc::ServerContextBase* context) const;
  // `status` as returned; a refusal (not OK) counted and logged (above).
  // `credential`: the client credential's name when known ("" otherwise).
  grpc::Status Refused(const grpc::ServerContextBase* context, std::string_view rpc, grpc::Status status,
                       const std::string& credential = "") const;
  // AnswerRenewal without its count.
  grpc::Status AnswerRenewalUncounted(grpc::ServerContextBase* context, v1::RenewLeaseResponse* response) const;
  // The name of the per-server credential `context` presents; "" when
  // there are none or it presents another.
  std::string ServerCredentialOf(const grpc::ServerContextBase* context) const;

  CoordinatorState* const state_;
  const LeaderGate* const gate_;
  // Set before the server starts and cleared by Shutdown, read by RPC
  // handlers: atomic, since a handler may still be finishing then.
  std::atomic<Prober*> prober_{nullptr};
  mutable Mutex address_mu_;
  std::string address_ GUARDED_BY(address_mu_);
  const std::shared_ptr<LiveClientCredentials> clients_;
  const std::string cluster_digest_hex_;  // "" when there is no cluster credential
  const std::string operator_digest_hex_;  // "" when there is no operator credential
  bool require_peer_certificate_ = false;  // set before serving (set_require_peer_certificate)
  // The per-server credentials (empty: none; the cluster credential or the
  // client token then serves the servers' role).
  const std::shared_ptr<const ClientCredentials> servers_;
  mutable std::atomic<uint64_t> refused_unauthenticated_{0};
  mutable std::atomic<uint64_t> refused_permission_{0};
  mutable LogThrottle refusal_log_;
  mutable std::atomic<uint64_t> renewals_granted_{0};
  mutable std::atomic<uint64_t> renewals_refused_{0};
};

class CoordinatorServer {
 public:
  // Serves `state` on `listen` (HOST:PORT; port 0 picks a free one) for
  // clients presenting `token`, and for servers presenting `cluster_token`
  // ("" for none: `token` then serves every role; see CoordinatorService).
  // UNAVAILABLE when the address cannot be bound, INVALID_ARGUMENT for a
  // malformed address, an empty token or a cluster credential equal to the
  // client token. With a `gate` (which must outlive the server), the expiry
  // thread acts only while the gate says this coordinator leads. The prober
  // presents `token` to the servers' Admin service, which takes it.
  //
  // `operator_token` ("" for none: the client token may then Drain and
  // Forget, as before roles existed): the operator credential, the only
  // one Drain and Forget take when set; it also serves what a client may
  // do (the map, leases, status), so that kvctl works with it alone. It
  // must differ from the other two (INVALID_ARGUMENT).
  //
  // `clients` (null: `token` alone, named "token"): the client
  // credentials in force, reloaded by the caller; it must hold `token`'s
  // and neither the cluster nor the operator credential (INVALID_ARGUMENT).
  //
  // `tls` (empty: plain gRPC): the service's TLS files
  // (control::StartGrpcServer), also used by the prober's channels to the
  // servers' Admin services (the coordinator's certificate presented).
  //
  // `servers` (null: none): the per-server credentials, which take the
  // servers' role in place of `cluster_token` (INVALID_ARGUMENT when both
  // are given, or when one of them is `token`, `operator_token` or a
  // client credential).
  static StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const std::string& listen, const std::string& token, std::unique_ptr<CoordinatorState> state,
      const LeaderGate* gate = nullptr, const std::string& cluster_token = "", const std::string& operator_token = "",
      std::shared_ptr<LiveClientCredentials> clients = nullptr,
      std::shared_ptr<const ClientCredentials> servers = nullptr, const control::TlsFiles& tls = {});

  ~CoordinatorServer();
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  // The KeepLease streams open now (tests, reporting).
  int64_t lease_streams() const { return lease_streams_->open(); }

  // What GET /metrics answers (rkv-coordinator --metrics_listen;
  // coordinator_metrics.cc): the map version, members by state, shards
  // and their replicas, probes, KeepLease streams and this coordinator's
  // role, read now from the state's current map, the prober's counts and
  // the gate. Asks no store and no etcd. Thread-safe; not after Shutdown
  // (which ends the prober): stop the endpoint first.
  std::vector<metrics::MetricFamily> Metrics() const;

  // How often the expiry thread runs (ExpireHeartbeats, PromoteFenced,
  // then Rebalance): half the heartbeat interval, at most 50 ms (a
  // promotion is due at most that late), at least 5 ms.
  static std::chrono::milliseconds ExpiryPeriod(const CoordinatorConfig& config);

  // Ends watch streams, stops the expiry thread and the gRPC server
  // (in-flight unary calls get up to 2 s). Idempotent.
  void Shutdown() EXCLUDES(shutdown_mu_, mu_);

  // "HOST:PORT" actually bound (the real port when 0 was asked).
  const std::string& address() const { return address_; }
  CoordinatorState* state() const { return state_.get(); }

 private:
  CoordinatorServer() = default;
  void ExpiryLoop() EXCLUDES(mu_);

  std::unique_ptr<CoordinatorState> state_;
  const LeaderGate* gate_ = nullptr;
  // Probes suspected servers (coordinator/prober.h); after state_, before
  // the service that reports to it (so destroyed after it).
  std::unique_ptr<Prober> prober_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<LeaseStreams> lease_streams_;  // service_'s KeepLease
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  // Shards whose primary role ExpiryLoop's promotions moved to a backup,
  // and the promotions that moved any (failovers), since start.
  std::atomic<uint64_t> shards_promoted_{0};
  std::atomic<uint64_t> failovers_{0};

  Mutex mu_;
  CondVar expiry_cv_;  // signalled when stopping_ is set
  bool stopping_ GUARDED_BY(mu_) = false;
  // Started by Start before the server is shared; joined by Shutdown.
  std::thread expiry_thread_;
  // Serializes Shutdown; taken before mu_.
  Mutex shutdown_mu_ ACQUIRED_BEFORE(mu_);
  bool shut_down_ GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace rkv::coordinator
