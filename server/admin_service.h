// The Admin gRPC service of an rkv-server (Health, Stats, and the replica
// verification reads ShardChecksums and ListShard), on its own
// grpc::Server bound to --admin_listen. Like every control-plane service it
// answers only callers presenting a credential's digest: a client
// credential in force (server/main.cc reloads them on SIGHUP) or the
// operator credential.
//
// ShardChecksums: for each requested shard (none: every shard the server's
// current map gives it a role in, as primary, backup or syncing server),
// the digest of the records its table holds (Applier::DigestShards: one
// consistent state, taken under Applier::table_mu_), with the version of the
// map it held. ListShard: the shard's (key, version) pairs, copied under
// Applier::table_mu_, then streamed in chunks (kListChunkRecords,
// kListChunkBytes), then a `done` chunk with the store's version high-water mark.
// Both: INVALID_ARGUMENT for a shard not below the map's shard_count,
// FAILED_PRECONDITION when the server holds no map yet (or was started
// without AdminShards).
//
// Thread safety: the stats and map functions are called from gRPC's
// threads, possibly concurrently; they must be thread-safe and cheap.
// Shutdown may be called from any thread, once at a time; the destructor
// calls it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/client_credentials.h"
#include "common/status.h"
#include "proto/rkv.pb.h"
#include "proto/tls.h"
#include "server/replication/catchup.h"
#include "server/server.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace rkv::server {

// One counter of the Admin Stats: a stable snake_case name (what kvctl
// and ClusterAdmin's users read it by), its value, and one line of help
// (what it counts, in which unit). Names and help are static strings.
struct AdminCounter {
  std::string_view name;
  uint64_t value = 0;
  std::string_view help;
};

// The replies counted by status code (ServerStats::error_replies): every
// code but OK, each as an Admin counter and a `code` label of
// rkv_server_error_replies_total.
struct ErrorReplyCounter {
  StatusCode code;
  std::string_view counter;    // AdminCounter::name
  std::string_view code_name;  // StatusCodeName(code)
};
const std::vector<ErrorReplyCounter>& ErrorReplyCounters();

struct AdminStats {
  std::string server_id;
  uint64_t epoch = 0;
  bool serving = false;  // Health: true once the data plane accepts clients
  std::vector<AdminCounter> counters;  // Stats, in this order
};

// What a server's counters are read from (ServerCounters).
struct CounterSources {
  ServerStats server;
  uint64_t heap_bytes = 0;
  CatchUp::Stats catch_up;  // zero until the fetcher runs
  uint64_t catchup_records_served = 0;  // ReplicaService::records_served
  uint64_t admin_auth_failures = 0;     // AdminServer::auth_failures
};

// The counters of a server's Admin Stats: the one list of their names,
// values and help, which the Admin service sends, ClusterAdmin returns
// and kvctl prints. A new counter is one line here; a name, once
// released, keeps its meaning.
std::vector<AdminCounter> ServerCounters(const CounterSources& s);

class Applier;

// What ShardChecksums and ListShard read: this server's id (its roles in
// the map), its current map, and the applier whose table holds its
// records. Left empty (no applier or no map function), both RPCs answer
// FAILED_PRECONDITION.
struct AdminShards {
  std::string server_id;
  // The latest map the server holds; null before the first.
  std::function<std::shared_ptr<const v1::ClusterMap>()> map;
  const Applier* applier = nullptr;  // must outlive the AdminServer
};

class AdminServer {
 public:
  // A ListShard chunk ends after this many records, or once its keys
  // reach kListChunkBytes (keys are at most 64 KiB: a chunk stays under
  // gRPC's default 4 MiB message limit).
  static constexpr size_t kListChunkRecords = 4096;
  static constexpr size_t kListChunkBytes = 1 << 20;

  // Serves Admin on `listen` (HOST:PORT; port 0 picks a free one) for
  // callers presenting `token`. INVALID_ARGUMENT for a bad address, an
  // empty token or no stats function; UNAVAILABLE when it cannot bind.
  // `also`: more services to serve on the same port (the Replica
  // service), each outliving the AdminServer. `operator_token` ("" for
  // none): the operator credential, then the only one ShardChecksums and
  // ListShard take (the client token gets PERMISSION_DENIED naming it);
  // Health and Stats take it as well as the client token. It must differ
  // from `token` (INVALID_ARGUMENT).
  static StatusOr<std::unique_ptr<AdminServer>> Start(const std::string& listen, const std::string& token,
                                                      std::function<AdminStats()> stats, AdminShards shards = {},
                                                      const std::vector<grpc::Service*>& also = {},
                                                      const std::string& operator_token = "");
  // The same for callers presenting a client credential in force in
  // `credentials` (a reload takes effect on the next call; a revoked
  // credential is refused UNAUTHENTICATED naming it). INVALID_ARGUMENT
  // for no credentials, or an operator credential that is a client's.
  // `tls` (empty: plain gRPC): the service's TLS files
  // (control::StartGrpcServer).
  static StatusOr<std::unique_ptr<AdminServer>> Start(const std::string& listen,
                                                      std::shared_ptr<LiveClientCredentials> credentials,
                                                      std::function<AdminStats()> stats, AdminShards shards = {},
                                                      const std::vector<grpc::Service*>& also = {},
                                                      const std::string& operator_token = "",
                                                      const control::TlsFiles& tls = {});

  // The shards `server_id` holds a role in (primary, backup or syncing) in
  // `map`, ascending. A map without replica lists gives the shards it owns.
  static std::vector<uint32_t> ShardsHeldBy(const v1::ClusterMap& map, std::string_view server_id);

  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Stops serving; in-flight calls get up to 1 s. Idempotent.
  void Shutdown();

  // "HOST:PORT" actually bound (the real port when 0 was asked).
  const std::string& address() const { return address_; }

  // Calls refused UNAUTHENTICATED since start (no, an unknown or a revoked
  // credential); each is logged at most once a second.
  uint64_t auth_failures() const;

 private:
  class Service;
  AdminServer() = default;

  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  bool shut_down_ = false;
};

}  // namespace rkv::server
