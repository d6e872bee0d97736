#include "server/admin_service.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include <glog/logging.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "common/log_throttle.h"
#include "proto/auth.h"
#include "proto/grpc_server.h"
#include "proto/rkv.grpc.pb.h"
#include "proto/validation.h"
#include "server/apply/apply.h"

namespace rkv::server {

class AdminServer::Service final : public v1::Admin::Service {
 public:
  Service(std::shared_ptr<LiveClientCredentials> credentials, std::string operator_digest_hex,
          std::function<AdminStats()> stats, AdminShards shards)
      : credentials_(std::move(credentials)),
        operator_digest_hex_(std::move(operator_digest_hex)),
        stats_(std::move(stats)),
        shards_(std::move(shards)) {}

  uint64_t auth_failures() const { return auth_failures_.load(std::memory_order_relaxed); }

  // Health and Stats: a client credential in force, or the operator
  // credential.
  grpc::Status CheckClient(const grpc::ServerContext* context, std::string_view rpc) const {
    if (!operator_digest_hex_.empty() && control::CheckToken(context, operator_digest_hex_).ok()) {
      return grpc::Status::OK;
    }
    std::string name;
    return Counted(context, rpc, control::CheckClientCredential(context, *credentials_->current(), &name), name);
  }

  // The replica verification and listings: the operator credential when
  // the server has one (a client credential is then PERMISSION_DENIED),
  // else --token_file's client credential (the credentials file's are
  // clients' only: PERMISSION_DENIED).
  grpc::Status CheckOperator(const grpc::ServerContext* context, std::string_view rpc) const {
    std::string name;
    if (operator_digest_hex_.empty()) {
      grpc::Status client = control::CheckClientCredential(context, *credentials_->current(), &name);
      if (!client.ok() || name == kTokenFileCredentialName) return Counted(context, rpc, client, name);
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          std::string(rpc) + " needs the operator credential (the server's --operator_token_file) "
                                             "or --token_file's; this credential is client credential " + name);
    }
    if (control::CheckToken(context, operator_digest_hex_).ok()) return grpc::Status::OK;
    const grpc::Status client = control::CheckClientCredential(context, *credentials_->current(), &name);
    if (!client.ok()) return Counted(context, rpc, control::CheckToken(context, operator_digest_hex_), name);
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        std::string(rpc) +
                            " needs the operator credential (the server's --operator_token_file); this credential "
                            "is a client's");
  }

  // `status` as returned; an UNAUTHENTICATED one counted and logged as a
  // WARNING naming the RPC, the peer and the credential when known, at
  // most once a second (the line says how many refusals it stands for).
  grpc::Status Counted(const grpc::ServerContext* context, std::string_view rpc, grpc::Status status,
                       const std::string& name) const {
    if (status.error_code() != grpc::StatusCode::UNAUTHENTICATED) return status;
    auth_failures_.fetch_add(1, std::memory_order_relaxed);
    if (const uint64_t unlogged = refusal_log_.Note(); unlogged > 0) {
      LOG(WARNING) << "Admin." << rpc << " from " << context->peer() << " refused (UNAUTHENTICATED"
                   << (name.empty() ? "" : ", credential " + name) << "): " << status.error_message() << " ["
                   << unlogged << " refused call(s) since the last such line, this one included]";
    }
    return status;
  }

  grpc::Status Health(grpc::ServerContext* context, const v1::HealthRequest*, v1::HealthResponse* response) override {
    if (grpc::Status s = CheckClient(context, "Health"); !s.ok()) return s;
    const AdminStats st = stats_();
    response->set_server_id(st.server_id);
    response->set_epoch(st.epoch);
    response->set_serving(st.serving);
    return grpc::Status::OK;
  }

  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest*, v1::StatsResponse* response) override {
    if (grpc::Status s = CheckClient(context, "Stats"); !s.ok()) return s;
    const AdminStats st = stats_();
    response->set_server_id(st.server_id);
    response->set_epoch(st.epoch);
    response->mutable_counters()->Reserve(static_cast<int>(st.counters.size()));
    for (const AdminCounter& c : st.counters) {
      v1::Counter* out = response->add_counters();
      out->set_name(std::string(c.name));
      out->set_value(c.value);
      out->set_help(std::string(c.help));
    }
    return grpc::Status::OK;
  }

  grpc::Status ShardChecksums(grpc::ServerContext* context, const v1::ShardChecksumsRequest* request,
                              v1::ShardChecksumsResponse* response) override {
    if (grpc::Status s = CheckOperator(context, "ShardChecksums"); !s.ok()) return s;
    std::shared_ptr<const v1::ClusterMap> map;
    if (grpc::Status s = CurrentMap(&map); !s.ok()) return s;
    std::vector<uint32_t> shards;
    if (request->shards().empty()) {
      shards = ShardsHeldBy(*map, shards_.server_id);
    } else {
      for (const uint32_t shard : request->shards()) {
        if (grpc::Status s = CheckShard(*map, shard); !s.ok()) return s;
        shards.push_back(shard);
      }
      std::sort(shards.begin(), shards.end());
      shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
    }
    response->set_map_version(map->version());
    for (const Applier::ShardDigest& d : shards_.applier->DigestShards(map->shard_count(), shards)) {
      v1::ShardChecksum* out = response->add_shards();
      out->set_shard(d.shard);
      out->set_keys(d.keys);
      out->set_checksum(d.checksum);
      out->set_max_version(d.max_version);
    }
    return grpc::Status::OK;
  }

  grpc::Status ListShard(grpc::ServerContext* context, const v1::ListShardRequest* request,
                         grpc::ServerWriter<v1::ShardChunk>* writer) override {
    if (grpc::Status s = CheckOperator(context, "ListShard"); !s.ok()) return s;
    std::shared_ptr<const v1::ClusterMap> map;
    if (grpc::Status s = CurrentMap(&map); !s.ok()) return s;
    if (grpc::Status s = CheckShard(*map, request->shard()); !s.ok()) return s;
    const Applier::ShardListing listing = shards_.applier->ListShard(map->shard_count(), request->shard());
    v1::ShardChunk chunk;
    size_t chunk_bytes = 0;
    for (const auto& [key, version] : listing.records) {
      v1::ShardRecord* r = chunk.add_records();
      r->set_key(key);
      r->set_version(version);
      chunk_bytes += key.size();
      if (static_cast<size_t>(chunk.records_size()) >= kListChunkRecords || chunk_bytes >= kListChunkBytes) {
        if (context->IsCancelled() || !writer->Write(chunk)) {
          return grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away");
        }
        chunk.Clear();
        chunk_bytes = 0;
      }
    }
    chunk.set_done(true);
    chunk.set_snapshot_version(listing.snapshot_version);
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away");
    return grpc::Status::OK;
  }

 private:
  // The server's current map, or FAILED_PRECONDITION.
  grpc::Status CurrentMap(std::shared_ptr<const v1::ClusterMap>* map) const {
    if (shards_.applier == nullptr || !shards_.map) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "this server follows no cluster map (it runs without a coordinator)");
    }
    *map = shards_.map();
    if (*map == nullptr || (*map)->shard_count() == 0) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "this server has no cluster map yet");
    }
    return grpc::Status::OK;
  }

  static grpc::Status CheckShard(const v1::ClusterMap& map, uint32_t shard) {
    if (shard >= map.shard_count()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "shard " + std::to_string(shard) + " is not below the shard count " +
                              std::to_string(map.shard_count()) + " of map version " +
                              std::to_string(map.version()));
    }
    return grpc::Status::OK;
  }

  const std::shared_ptr<LiveClientCredentials> credentials_;
  const std::string operator_digest_hex_;  // "" when the server has no operator credential
  const std::function<AdminStats()> stats_;
  const AdminShards shards_;
  mutable std::atomic<uint64_t> auth_failures_{0};
  mutable LogThrottle refusal_log_;
};

std::vector<uint32_t> AdminServer::ShardsHeldBy(const v1::ClusterMap& map, std::string_view server_id) {
  std::vector<uint32_t> out;
  if (map.shard_replicas().empty()) {
    for (int s = 0; s < map.shard_owner_size(); ++s) {
      if (map.shard_owner(s) == server_id) out.push_back(static_cast<uint32_t>(s));
    }
    return out;
  }
  for (int s = 0; s < map.shard_replicas_size(); ++s) {
    const v1::ShardReplicas& r = map.shard_replicas(s);
    const bool held = std::find(r.server_ids().begin(), r.server_ids().end(), server_id) != r.server_ids().end() ||
                      std::find(r.syncing_ids().begin(), r.syncing_ids().end(), server_id) != r.syncing_ids().end();
    if (held) out.push_back(static_cast<uint32_t>(s));
  }
  return out;
}

const std::vector<ErrorReplyCounter>& ErrorReplyCounters() {
  static const std::vector<ErrorReplyCounter> kCounters = {
      {StatusCode::kCancelled, "error_replies_cancelled", "CANCELLED"},
      {StatusCode::kUnknown, "error_replies_unknown", "UNKNOWN"},
      {StatusCode::kInvalidArgument, "error_replies_invalid_argument", "INVALID_ARGUMENT"},
      {StatusCode::kDeadlineExceeded, "error_replies_deadline_exceeded", "DEADLINE_EXCEEDED"},
      {StatusCode::kNotFound, "error_replies_not_found", "NOT_FOUND"},
      {StatusCode::kAlreadyExists, "error_replies_already_exists", "ALREADY_EXISTS"},
      {StatusCode::kPermissionDenied, "error_replies_permission_denied", "PERMISSION_DENIED"},
      {StatusCode::kResourceExhausted, "error_replies_resource_exhausted", "RESOURCE_EXHAUSTED"},
      {StatusCode::kFailedPrecondition, "error_replies_failed_precondition", "FAILED_PRECONDITION"},
      {StatusCode::kAborted, "error_replies_aborted", "ABORTED"},
      {StatusCode::kOutOfRange, "error_replies_out_of_range", "OUT_OF_RANGE"},
      {StatusCode::kUnimplemented, "error_replies_unimplemented", "UNIMPLEMENTED"},
      {StatusCode::kInternal, "error_replies_internal", "INTERNAL"},
      {StatusCode::kUnavailable, "error_replies_unavailable", "UNAVAILABLE"},
      {StatusCode::kDataLoss, "error_replies_data_loss", "DATA_LOSS"},
      {StatusCode::kUnauthenticated, "error_replies_unauthenticated", "UNAUTHENTICATED"},
  };
  return kCounters;
}

std::vector<AdminCounter> ServerCounters(const CounterSources& s) {
  const ServerStats& st = s.server;
  std::vector<AdminCounter> counters = {
      {"keys", st.keys, "records in the table"},
      {"puts", st.puts, "PUTs applied since start"},
      {"deletes", st.deletes, "DELETEs applied since start"},
      {"request_errors", st.request_errors, "error replies since start (NOT_FOUND excluded)"},
      {"connections", st.connections, "data-plane connections open now"},
      {"gets_served_by_cpu", st.gets_served_by_cpu,
       "GET lookups the server CPU answered: tcp clients' keys not in their location cache (0 on verbs: one-sided "
       "READs)"},
      {"heap_bytes_used", st.heap_bytes_used, "heap bytes holding records"},
      {"heap_bytes_quarantined", st.heap_bytes_quarantined, "heap bytes freed but not yet reusable (grace period)"},
      {"heap_bytes", s.heap_bytes, "heap size in bytes"},
      {"polling_threads", st.polling_threads, "data-plane polling threads (fixed, whatever the connections)"},
      {"bytes_per_connection", st.connection_cost.total(),
       "server memory one connection costs in bytes, beside the transport's"},
      {"store_unwritten_writes", st.store_unwritten_writes,
       "--durability=none: acknowledged writes not yet in RocksDB (a crash loses them)"},
      {"store_unwritten_bytes", st.store_unwritten_bytes, "--durability=none: their bytes"},
      {"store_write_stall_micros", st.store_write_stall_micros,
       "microseconds RocksDB delayed or stopped writes since start (write stalls)"},
      {"store_wal_bytes", st.store_wal_bytes, "bytes RocksDB appended to its write-ahead log since start"},
      {"catchup_records_listed", s.catch_up.records_listed, "catch-up: records received in FetchShard streams"},
      {"catchup_values_fetched", s.catch_up.values_fetched, "catch-up: values received and installed"},
      {"catchup_bytes_fetched", s.catch_up.bytes_fetched,
       "catch-up: bytes of keys and values received (what --catchup_rate_mb_per_s paces)"},
      {"syncing_shards", s.catch_up.syncing_shards, "shards this server is catching up on now"},
      {"catchup_syncs_completed", s.catch_up.syncs_completed, "catch-up: syncs reported caught up and accepted"},
      {"catchup_sync_failures", s.catch_up.sync_failures, "catch-up: sync attempts abandoned (then retried)"},
      {"catchup_records_served", s.catchup_records_served, "catch-up: records this server sent as a primary"},
      {"connections_accepted", st.connections_accepted, "data-plane connections accepted since start"},
      {"connections_rejected", st.connections_rejected, "data-plane connections refused since start"},
      {"connections_probing", st.connections_probing,
       "data-plane connections open now with a probe in flight (silent for --probe_idle_ms)"},
      {"connections_released_dead", st.connections_released_dead,
       "data-plane connections released since start because a probe failed or went unanswered (peer gone)"},
      {"connect_requests_screened_out", st.connect_requests_screened_out,
       "connection requests refused by the listener's check before anything was made for them (hellos answered "
       "with a challenge included) since start"},
      {"connect_requests_source_limited", st.connect_requests_source_limited,
       "connection requests refused unchecked since start: their source address was over "
       "--max_refusals_per_source"},
      {"auth_failures", st.auth_failures + s.admin_auth_failures,
       "failed authentications since start: data-plane connections and Admin calls refused for their credential"},
      {"forwarded_writes", st.forwarded_writes, "writes forwarded to backups as a primary"},
      {"backup_failures", st.backup_failures, "backups that did not acknowledge a forwarded write"},
      {"replica_writes", st.replica_writes, "forwarded writes installed as a backup"},
      {"replica_stale", st.replica_stale, "forwarded writes acknowledged without a change (not newer)"},
      {"replica_refused", st.replica_refused, "forwarded writes refused as a backup (validation or policy)"},
      {"lease_refusals", st.lease_refusals, "client writes refused because the lease had expired"},
      {"conditions_failed", st.conditions_failed, "conditional PUTs refused because the key was not as asked"},
      {"expired_reclaimed", st.expired_reclaimed, "expired records removed (as their primary, replicated)"},
  };
  for (const ErrorReplyCounter& e : ErrorReplyCounters()) {
    counters.push_back({e.counter, st.error_replies[static_cast<size_t>(e.code)],
                        "replies with this status code since start (clients' and forwarded writes)"});
  }
  return counters;
}

StatusOr<std::unique_ptr<AdminServer>> AdminServer::Start(const std::string& listen, const std::string& token,
                                                          std::function<AdminStats()> stats, AdminShards shards,
                                                          const std::vector<grpc::Service*>& also,
                                                          const std::string& operator_token) {
  if (token.empty()) return InvalidArgument("the token is empty");
  ClientCredentials credentials;
  RKV_RETURN_IF_ERROR(credentials.Add(kTokenFileCredentialName, token));
  return Start(listen, std::make_shared<LiveClientCredentials>(std::move(credentials)), std::move(stats),
               std::move(shards), also, operator_token);
}

StatusOr<std::unique_ptr<AdminServer>> AdminServer::Start(const std::string& listen,
                                                          std::shared_ptr<LiveClientCredentials> credentials,
                                                          std::function<AdminStats()> stats, AdminShards shards,
                                                          const std::vector<grpc::Service*>& also,
                                                          const std::string& operator_token,
                                                          const control::TlsFiles& tls) {
  RKV_RETURN_IF_ERROR(control::ValidateHostPort(listen, /*allow_port_zero=*/true).WithContext("--admin_listen"));
  if (credentials == nullptr || credentials->current()->size() == 0) return InvalidArgument("no client credential");
  if (!stats) return InvalidArgument("no stats function");
  if (!operator_token.empty() && credentials->current()->Holds(operator_token)) {
    return InvalidArgument("the operator credential is a client credential: it must be one of its own");
  }
  std::unique_ptr<AdminServer> server(new AdminServer());
  server->service_ = std::make_unique<Service>(std::move(credentials),
                                               operator_token.empty() ? "" : control::TokenDigestHex(operator_token),
                                               std::move(stats), std::move(shards));
  std::vector<grpc::Service*> services{server->service_.get()};
  services.insert(services.end(), also.begin(), also.end());
  RKV_ASSIGN_OR_RETURN(control::StartedGrpcServer started,
                       control::StartGrpcServer(listen, services, "--admin_listen: ", tls));
  server->server_ = std::move(started.server);
  server->address_ = std::move(started.address);
  return server;
}

void AdminServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
  }
}

AdminServer::~AdminServer() { Shutdown(); }

uint64_t AdminServer::auth_failures() const { return service_->auth_failures(); }

}  // namespace rkv::server
