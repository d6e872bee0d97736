#include "coordinator/coordinator_service.h"

#include <algorithm>

#include <glog/logging.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "proto/auth.h"
#include "proto/grpc_server.h"
#include "proto/grpc_status.h"
#include "proto/validation.h"

namespace rkv::coordinator {

using control::CheckToken;
using control::ToGrpc;

namespace {

// A refusal of a server call by the state's identity binding (its only
// PERMISSION_DENIED): counted and logged as the role checks' refusals are.
bool IsIdentityRefusal(const Status& s) { return s.code() == StatusCode::kPermissionDenied; }

}  // namespace

CoordinatorRole CoordinatorRoleOf(const LeaderGate* gate) {
  CoordinatorRole role;
  if (gate == nullptr) return role;
  role.leading = gate->CheckLeading(&role.leader);
  role.role = role.leading.ok() ? v1::CoordinatorStatus::LEADER : v1::CoordinatorStatus::STANDBY;
  return role;
}

CoordinatorService::CoordinatorService(CoordinatorState* state, std::shared_ptr<LiveClientCredentials> clients,
                                       const LeaderGate* gate, std::string cluster_digest_hex,
                                       std::string operator_digest_hex,
                                       std::shared_ptr<const ClientCredentials> servers)
    : state_(state),
      gate_(gate),
      clients_(std::move(clients)),
      cluster_digest_hex_(std::move(cluster_digest_hex)),
      operator_digest_hex_(std::move(operator_digest_hex)),
      servers_(servers != nullptr ? std::move(servers) : std::make_shared<const ClientCredentials>()) {}

std::string CoordinatorService::ServerCredentialOf(const grpc::ServerContextBase* context) const {
  std::string name;
  if (servers_->size() == 0 || !control::CheckClientCredential(context, *servers_, &name).ok()) return "";
  return name;
}

grpc::Status CoordinatorService::CheckOperatorCaller(const grpc::ServerContextBase* context, std::string_view rpc,
                                                     std::string* credential) const {
  std::string name;
  std::string ignored;
  std::string& accepted = credential != nullptr ? *credential : ignored;
  if (const std::string server = ServerCredentialOf(context); !server.empty()) {
    return Refused(context, rpc,
                   grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                std::string(rpc) + " needs the operator credential (the coordinator's "
                                                   "--operator_token_file); this credential is server credential " +
                                    server),
                   server);
  }
  if (operator_digest_hex_.empty()) {
    // Without an operator credential, --token_file's credential and the
    // cluster credential serve the role, as before roles existed; the
    // credentials file's are clients' only.
    if (!cluster_digest_hex_.empty() && CheckToken(context, cluster_digest_hex_).ok()) {
      accepted = "cluster";
      return grpc::Status::OK;
    }
    grpc::Status client = control::CheckClientCredential(context, *clients_->current(), &name);
    if (client.ok() && name == kTokenFileCredentialName) accepted = name;
    if (!client.ok() || name == kTokenFileCredentialName) return Refused(context, rpc, client, name);
    return Refused(context, rpc,
                   grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                std::string(rpc) + " needs the operator credential (the coordinator's "
                                                   "--operator_token_file) or --token_file's; this credential is "
                                                   "client credential " + name),
                   name);
  }
  if (CheckToken(context, operator_digest_hex_).ok()) {
    accepted = "operator";
    return grpc::Status::OK;
  }
  std::string whose;
  if (control::CheckClientCredential(context, *clients_->current(), &name).ok()) whose = "a client's";
  if (!cluster_digest_hex_.empty() && CheckToken(context, cluster_digest_hex_).ok()) whose = "the servers'";
  if (whose.empty()) return Refused(context, rpc, CheckToken(context, operator_digest_hex_), name);
  return Refused(context, rpc,
                 grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                              std::string(rpc) + " needs the operator credential (the coordinator's "
                                                 "--operator_token_file); this credential is " +
                                  whose),
                 name);
}

grpc::Status CoordinatorService::CheckServerCaller(const grpc::ServerContextBase* context, std::string_view rpc,
                                                   std::string* credential) const {
  grpc::Status s = CheckServerCredential(context, rpc, credential);
  if (s.ok() && require_peer_certificate_ && !control::PeerHasCertificate(*context)) {
    return Refused(context, rpc,
                   grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                std::string(rpc) +
                                    " needs a server's certificate (mutual TLS): this coordinator serves TLS and the "
                                    "caller presented no certificate of its CA (rkv-server --tls_cert, --tls_key)"),
                   credential->empty() ? "cluster credential" : *credential);
  }
  return s;
}

grpc::Status CoordinatorService::CheckServerCredential(const grpc::ServerContextBase* context, std::string_view rpc,
                                                       std::string* credential) const {
  credential->clear();
  const char* const needed = servers_->size() > 0 ? " needs a server credential (the servers' role)"
                                                  : " needs the cluster credential (the servers' role)";
  if (!operator_digest_hex_.empty() && CheckToken(context, operator_digest_hex_).ok()) {
    return Refused(context, rpc,
                   grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                std::string(rpc) + needed + "; this credential is the operator's"),
                   "operator");
  }
  if (servers_->size() > 0) {
    *credential = ServerCredentialOf(context);
    if (!credential->empty()) return grpc::Status::OK;
  }
  if (!cluster_digest_hex_.empty() && CheckToken(context, cluster_digest_hex_).ok()) return grpc::Status::OK;
  std::string name;
  grpc::Status client = control::CheckClientCredential(context, *clients_->current(), &name);
  if (!client.ok()) return Refused(context, rpc, client, name);  // no credential of any role: UNAUTHENTICATED
  // Without a cluster credential, --token_file's serves the servers' role.
  if (cluster_digest_hex_.empty() && servers_->size() == 0 && name == kTokenFileCredentialName) {
    return grpc::Status::OK;
  }
  return Refused(context, rpc,
                 grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                              std::string(rpc) + needed + "; this credential is a client's"),
                 name);
}

grpc::Status CoordinatorService::Refused(const grpc::ServerContextBase* context, std::string_view rpc,
                                         grpc::Status status, const std::string& credential) const {
  if (status.ok()) return status;
  const bool denied = status.error_code() == grpc::StatusCode::PERMISSION_DENIED;
  (denied ? refused_permission_ : refused_unauthenticated_).fetch_add(1, std::memory_order_relaxed);
  // At most one line a second: a flood of bad calls cannot flood the log,
  // and the line says how many it stands for.
  if (const uint64_t unlogged = refusal_log_.Note(); unlogged > 0) {
    LOG(WARNING) << rpc << " from " << context->peer()
                 << (credential.empty() ? "" : " (credential " + credential + ")") << " refused ("
                 << (denied ? "PERMISSION_DENIED" : "UNAUTHENTICATED") << "): " << status.error_message() << " [" << unlogged
                 << " refused call(s) since the last such line, this one included]";
  }
  return status;
}

grpc::Status CoordinatorService::CheckLeader(grpc::ServerContextBase* context) const {
  if (gate_ == nullptr) return grpc::Status::OK;
  std::string leader;
  Status s = gate_->CheckLeading(&leader);
  if (s.ok()) return grpc::Status::OK;
  if (!leader.empty()) context->AddTrailingMetadata(kLeaderMetadataKey, leader);
  return ToGrpc(s);
}

grpc::Status CoordinatorService::Join(grpc::ServerContext* context, const v1::JoinRequest* request,
                                      v1::JoinResponse* response) {
  std::string credential;
  if (grpc::Status s = CheckServerCaller(context, "Join", &credential); !s.ok()) return s;
  if (grpc::Status s = CheckLeader(context); !s.ok()) return s;
  auto result = state_->Join(*request, credential);
  if (!result.ok()) {
    if (IsIdentityRefusal(result.status())) return Refused(context, "Join", ToGrpc(result.status()), credential);
    LOG(WARNING) << "Join from " << context->peer() << " refused: " << result.status();
    return ToGrpc(result.status());
  }
  *response = std::move(result).value();
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                                           v1::HeartbeatResponse* response) {
  std::string credential;
  if (grpc::Status s = CheckServerCaller(context, "Heartbeat", &credential); !s.ok()) return s;
  if (grpc::Status s = CheckLeader(context); !s.ok()) return s;
  auto result = state_->Heartbeat(*request, credential);
  if (!result.ok()) {
    if (IsIdentityRefusal(result.status())) {
      return Refused(context, "Heartbeat", ToGrpc(result.status()), credential);
    }
    return ToGrpc(result.status());
  }
  // The answer grants the server a lease: only a coordinator that still
  // leads once it has the answer may send it (docs/design.md section 8.8).
  if (grpc::Status s = CheckLeader(context); !s.ok()) return s;
  *response = std::move(result).value();
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Leave(grpc::ServerContext* context, const v1::LeaveRequest* request,
                                       v1::LeaveResponse*) {
  std::string credential;
  if (grpc::Status s = CheckServerCaller(context, "Leave", &credential); !s.ok()) return s;
  if (grpc::Status s = CheckLeader(context); !s.ok()) return s;
  const Status left = state_->Leave(*request, credential);
  if (IsIdentityRefusal(left)) return Refused(context, "Leave", ToGrpc(left), credential);
  return ToGrpc(left);
}

grpc::Status CoordinatorService::ReportReplicaFailure(grpc::ServerContext* context,
                                                      const v1::ReportReplicaFailureRequest* request,
                                                      v1::ReportReplicaFailureResponse* response) {
  std::string credential;
  if (grpc::Status s = CheckServerCaller(context, "ReportReplicaFailure", &credential); !s.ok()) return s;
  if (grpc::Status s = CheckLeader(context); !s.ok()) return s;
  auto result = state_->ReportReplicaFailure(*request, credential);
  if (!result.ok()) {
    if (IsIdentityRefusal(result.status())) {
      return Refused(context, "ReportReplicaFailure", ToGrpc(result.status()), credential);
    }
    LOG(WARNING) << "ReportReplicaFailure from " << context->peer() << " refused: " << result.status();
    return ToGrpc(result.status());
  }
  *response = std::move(result).value();
  // A backup a primary cannot reach may be down altogether: probe it now
  // rather than wait for its heartbeat timeout (coordinator/prober.h).
  if (Prober* prober = prober_.load(std::memory_order_acquire); prober != nullptr) {
    prober->SuspectId(request->backup_id(), "server " + request->server_id() + " could not forward to it");
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ReportUnresponsive(grpc::ServerContext* context,
                                                    const v1::ReportUnresponsiveRequest* request,
                                                    v1::ReportUnresponsiveResponse* response) {
  if (grpc::Status s = CheckCaller(context, "ReportUnresponsive"); !s.ok()) return s;
  if (grpc::Status s = CheckLeader(context); !s.ok()) return s;
  if (Status valid = control::ValidateReportUnresponsive(*request); !valid.ok()) return ToGrpc(valid);
  // Only a hint: the probe decides (coordinator/prober.h), and its
  // cooldown bounds how often any reporter can have a server probed.
  Prober* prober = prober_.load(std::memory_order_acquire);
  response->set_probing(prober != nullptr &&
                        prober->SuspectId(request->server_id(),
                                           "reported by " + context->peer() + ": " + request->reason(),
                                           request->epoch()));
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ReportCaughtUp(grpc::ServerContext* context, const v1::ReportCaughtUpRequest* request,
                                                v1::ReportCaughtUpResponse* response) {
  std::string credential;
  if (grpc::Status s = CheckServerCaller(context, "ReportCaughtUp", &credential); !s.ok()) return s;
  if (grpc::Status s = CheckLeader(context); !s.ok()) return s;
  auto result = state_->ReportCaughtUp(*request, credential);
  if (!result.ok()) {
    if (IsIdentityRefusal(result.status())) {
      return Refused(context, "ReportCaughtUp", ToGrpc(result.status()), credential);
    }
    LOG(WARNING) << "ReportCaughtUp from " << context->peer() << " refused: " << result.status();
    return ToGrpc(result.status());
  }
  *response = std::move(result).value();
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Drain(grpc::ServerContext* context, const v1::DrainRequest* request,
                                       v1::DrainResponse* response) {
  std::string credential;
  if (grpc::Status s = CheckOperatorCaller(context, "Drain", &credential); !s.ok()) return s;
  if (grpc::Status s = CheckLeader(context); !s.ok()) return s;
  auto result = state_->Drain(*request);
  if (!result.ok()) {
    LOG(WARNING) << "Drain from " << context->peer() << " (credential " << credential << ") refused: "
                 << result.status();
    return ToGrpc(result.status());
  }
  LOG(INFO) << "Drain of server " << request->server_id() << " by credential " << credential << " from "
            << context->peer() << ": map version " << result->map_version() << ", " << result->roles_to_move()
            << " roles to move";
  *response = std::move(result).value();
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Forget(grpc::ServerContext* context, const v1::ForgetRequest* request,
                                        v1::ForgetResponse* response) {
  std::string credential;
  if (grpc::Status s = CheckOperatorCaller(context, "Forget", &credential); !s.ok()) return s;
  if (grpc::Status s = CheckLeader(context); !s.ok()) return s;
  auto result = state_->Forget(*request);
  if (!result.ok()) {
    LOG(WARNING) << "Forget from " << context->peer() << " (credential " << credential << ") refused: "
                 << result.status();
    return ToGrpc(result.status());
  }
  LOG(INFO) << "Forget of server " << request->server_id() << " by credential " << credential << " from "
            << context->peer() << ": map version " << result->map_version();
  *response = std::move(result).value();
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CheckCaller(const grpc::ServerContextBase* context, std::string_view rpc) const {
  if (!cluster_digest_hex_.empty() && CheckToken(context, cluster_digest_hex_).ok()) return grpc::Status::OK;
  if (!ServerCredentialOf(context).empty()) return grpc::Status::OK;
  if (!operator_digest_hex_.empty() && CheckToken(context, operator_digest_hex_).ok()) return grpc::Status::OK;
  std::string name;
  grpc::Status client = control::CheckClientCredential(context, *clients_->current(), &name);
  return Refused(context, rpc, client, name);
}

grpc::Status CoordinatorService::StillAllowed(const grpc::ServerContextBase* context, std::string_view rpc,
                                              uint64_t* seen) const {
  const uint64_t now = credentials_generation();
  if (now == *seen) return grpc::Status::OK;
  *seen = now;
  return CheckCaller(context, rpc);
}

grpc::Status CoordinatorService::AnswerRenewal(grpc::ServerContextBase* context,
                                               v1::RenewLeaseResponse* response) const {
  grpc::Status answer = AnswerRenewalUncounted(context, response);
  (answer.ok() ? renewals_granted_ : renewals_refused_).fetch_add(1, std::memory_order_relaxed);
  return answer;
}

grpc::Status CoordinatorService::AnswerRenewalUncounted(grpc::ServerContextBase* context,
                                                        v1::RenewLeaseResponse* response) const {
  if (grpc::Status s = CheckLeader(context); !s.ok()) return s;
  LeaseView view = state_->Lease();
  response->set_map_version(view.map_version);
  response->set_lease_ms(static_cast<uint32_t>(state_->config().lease.count()));
  for (std::string& id : view.excluded_servers) response->add_excluded_servers(std::move(id));
  // As for Heartbeat: the lease is granted only by a coordinator that
  // still leads once the answer is made.
  return CheckLeader(context);
}

grpc::Status CoordinatorService::RenewLease(grpc::ServerContext* context, const v1::RenewLeaseRequest*,
                                            v1::RenewLeaseResponse* response) {
  if (grpc::Status s = CheckCaller(context, "RenewLease"); !s.ok()) return s;
  return AnswerRenewal(context, response);
}

grpc::Status CoordinatorService::GetClusterMap(grpc::ServerContext* context, const v1::GetClusterMapRequest*,
                                               v1::ClusterMap* response) {
  if (grpc::Status s = CheckCaller(context, "GetClusterMap"); !s.ok()) return s;
  *response = state_->Map();
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::WatchClusterMap(grpc::ServerContext* context,
                                                 const v1::WatchClusterMapRequest* request,
                                                 grpc::ServerWriter<v1::ClusterMap>* writer) {
  uint64_t seen = credentials_generation();
  if (grpc::Status s = CheckCaller(context, "WatchClusterMap"); !s.ok()) return s;
  uint64_t known = request->known_version();
  while (!context->IsCancelled()) {
    auto next = state_->WaitForChange(known, kWatchPoll);
    if (!next.ok()) return grpc::Status::OK;  // shutting down: the stream ends cleanly
    // A credential revoked by a reload ends its open streams too.
    if (grpc::Status s = StillAllowed(context, "WatchClusterMap", &seen); !s.ok()) return s;
    if (!next->has_value()) continue;
    const v1::ClusterMap& map = **next;
    if (!writer->Write(map)) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
    known = map.version();
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
}

void CoordinatorService::set_address(const std::string& address) {
  MutexLock lock(address_mu_);
  address_ = address;
}

grpc::Status CoordinatorService::GetCoordinatorStatus(grpc::ServerContext* context,
                                                      const v1::CoordinatorStatusRequest*,
                                                      v1::CoordinatorStatus* response) {
  if (grpc::Status s = CheckCaller(context, "GetCoordinatorStatus"); !s.ok()) return s;
  response->set_map_version(state_->version());
  if (Prober* prober = prober_.load(std::memory_order_acquire); prober != nullptr) {
    const Prober::Counts counts = prober->counts();
    response->set_probes(counts.probes);
    response->set_probes_refuted(counts.refuted);
    response->set_probes_confirmed(counts.confirmed);
  }
  const CoordinatorRole role = CoordinatorRoleOf(gate_);
  response->set_role(role.role);
  if (gate_ == nullptr) {
    MutexLock lock(address_mu_);
    response->set_address(address_);
    response->set_leader(address_);
    return grpc::Status::OK;
  }
  if (!role.leading.ok()) response->set_why_not_leader(role.leading.message());
  gate_->FillStatus(std::chrono::steady_clock::now() + std::chrono::seconds(1), response);
  response->set_leader(role.leading.ok() ? response->address() : role.leader);
  return grpc::Status::OK;
}

StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const std::string& listen, const std::string& token, std::unique_ptr<CoordinatorState> state,
    const LeaderGate* gate, const std::string& cluster_token, const std::string& operator_token,
    std::shared_ptr<LiveClientCredentials> clients, std::shared_ptr<const ClientCredentials> servers,
    const control::TlsFiles& tls) {
  RKV_RETURN_IF_ERROR(control::ValidateHostPort(listen, /*allow_port_zero=*/true).WithContext("--listen"));
  if (token.empty()) return InvalidArgument("the token is empty");
  if (clients == nullptr) {
    ClientCredentials one;
    RKV_RETURN_IF_ERROR(one.Add(kTokenFileCredentialName, token));
    clients = std::make_shared<LiveClientCredentials>(std::move(one));
  }
  for (const std::string* other : {&cluster_token, &operator_token}) {
    if (!other->empty() && token != *other && clients->current()->Holds(*other)) {
      return InvalidArgument("a client credential is the cluster or the operator credential: those must be ones no "
                             "client holds");
    }
  }
  if (!cluster_token.empty() && cluster_token == token) {
    return InvalidArgument("the cluster credential is the client token: it must be one no client holds");
  }
  if (!operator_token.empty() && (operator_token == token || operator_token == cluster_token)) {
    return InvalidArgument("the operator credential is the client token or the cluster credential: it must be "
                           "one of its own");
  }
  if (servers != nullptr && servers->size() > 0) {
    if (!cluster_token.empty()) {
      return InvalidArgument("both a cluster credential and per-server credentials: give one of the two");
    }
    for (const std::string* other : {&token, &operator_token}) {
      if (!other->empty() && servers->Holds(*other)) {
        return InvalidArgument("a server credential is the client token or the operator credential: each must be "
                               "one of its own");
      }
    }
    for (const ClientCredentials::Credential& c : clients->current()->credentials()) {
      if (const auto match = servers->Find(c.digest.data())) {
        return InvalidArgument("server credential " + match->name + " is client credential " + c.name +
                               ": a server's credential must be one no client holds");
      }
    }
  }
  if (state == nullptr) return InvalidArgument("no coordinator state");
  std::unique_ptr<CoordinatorServer> server(new CoordinatorServer());
  server->state_ = std::move(state);
  server->gate_ = gate;
  server->service_ =
      std::make_unique<CoordinatorService>(server->state_.get(), std::move(clients), gate,
                                           cluster_token.empty() ? "" : control::TokenDigestHex(cluster_token),
                                           operator_token.empty() ? "" : control::TokenDigestHex(operator_token),
                                           std::move(servers));
  if (server->state_->config().suspect_after.count() > 0) {
    RKV_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> probe_credentials,
                         control::MakeChannelCredentials(tls));
    server->prober_ =
        std::make_unique<Prober>(server->state_.get(), control::TokenDigestHex(token), std::move(probe_credentials));
    server->service_->set_prober(server->prober_.get());
  }

  server->service_->set_require_peer_certificate(!tls.empty());
  server->lease_streams_ = std::make_unique<LeaseStreams>(server->service_.get());
  RKV_ASSIGN_OR_RETURN(control::StartedGrpcServer started,
                       control::StartGrpcServer(listen, std::vector<grpc::Service*>{server->service_.get()}, "", tls,
                                                [&](grpc::ServerBuilder* b) { server->lease_streams_->AddQueue(b); }));
  server->server_ = std::move(started.server);
  server->lease_streams_->Start();
  server->address_ = std::move(started.address);
  server->service_->set_address(server->address_);
  server->expiry_thread_ = std::thread([s = server.get()] { s->ExpiryLoop(); });
  return server;
}

std::chrono::milliseconds CoordinatorServer::ExpiryPeriod(const CoordinatorConfig& config) {
  // Often enough that a deadline is noticed within a fraction of the
  // heartbeat interval, and a due promotion within 50 ms.
  return std::clamp<std::chrono::milliseconds>(config.heartbeat_interval / 2, std::chrono::milliseconds(5),
                                               std::chrono::milliseconds(50));
}

void CoordinatorServer::ExpiryLoop() {
  const auto period = ExpiryPeriod(state_->config());
  for (;;) {
    {
      const auto deadline = std::chrono::steady_clock::now() + period;
      MutexLock lock(mu_);
      while (!stopping_) {
        if (!expiry_cv_.WaitUntil(mu_, deadline)) break;
      }
      if (stopping_) return;
    }
    // A standby watches; the leader acts (and its commits are conditioned
    // on its leadership in etcd, so one that lost it commits nothing).
    std::string leader;
    if (gate_ != nullptr && !gate_->CheckLeading(&leader).ok()) continue;
    if (auto expired = state_->ExpireHeartbeats(); !expired.ok()) {
      LOG(ERROR) << "cannot record a server as DOWN: " << expired.status() << "; retrying";
    }
    if (prober_ != nullptr) {
      for (CoordinatorState::ProbeTarget& t : state_->SilentServers(state_->config().suspect_after)) {
        prober_->Suspect(std::move(t), "heartbeats silent for over " +
                                           std::to_string(state_->config().suspect_after.count()) + " ms");
      }
    }
    if (auto promoted = state_->PromoteFenced(); !promoted.ok()) {
      LOG(ERROR) << "cannot commit a promotion: " << promoted.status() << "; retrying";
    } else if (*promoted > 0) {
      shards_promoted_.fetch_add(static_cast<uint64_t>(*promoted), std::memory_order_relaxed);
      failovers_.fetch_add(1, std::memory_order_relaxed);
    }
    if (auto moved = state_->Rebalance(); !moved.ok()) {
      LOG(ERROR) << "cannot commit a re-replication or rebalancing step: " << moved.status() << "; retrying";
    }
  }
}

void CoordinatorServer::Shutdown() {
  MutexLock guard(shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  expiry_cv_.NotifyAll();
  if (expiry_thread_.joinable()) expiry_thread_.join();
  if (state_ != nullptr) state_->CloseWatchers();
  if (lease_streams_ != nullptr) lease_streams_->Close();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
  }
  if (lease_streams_ != nullptr) lease_streams_->Stop();
  // Nothing reports to it any more; a probe in flight ends within its
  // timeout.
  if (service_ != nullptr) service_->set_prober(nullptr);
  prober_.reset();
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

}  // namespace rkv::coordinator
