// The Admin gRPC service of an rkv-server (Health, Stats), on its own
// grpc::Server bound to --admin_listen. Like every control-plane service it
// answers only callers presenting the token digest.
//
// Thread safety: the stats function is called from gRPC's threads,
// possibly concurrently; it must be thread-safe and cheap. Shutdown may be
// called from any thread, once at a time; the destructor calls it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace rkv::server {

struct AdminStats {
  std::string server_id;
  uint64_t epoch = 0;
  bool serving = false;  // Health: true once the data plane accepts clients
  uint64_t keys = 0;
  uint64_t puts = 0;
  uint64_t deletes = 0;
  uint64_t request_errors = 0;
  uint64_t connections = 0;
  uint64_t gets_served_by_cpu = 0;
  uint64_t heap_bytes = 0;
  uint64_t heap_bytes_used = 0;
  uint64_t heap_bytes_quarantined = 0;
  // Catch-up (server/catchup.h, server/replica_service.h).
  uint64_t catchup_records_listed = 0;
  uint64_t catchup_values_fetched = 0;
  uint32_t syncing_shards = 0;
  uint64_t catchup_records_served = 0;
};

class AdminServer {
 public:
  // Serves Admin on `listen` (HOST:PORT; port 0 picks a free one) for
  // callers presenting `token`. INVALID_ARGUMENT for a bad address, an
  // empty token or no stats function; UNAVAILABLE when it cannot bind.
  // `also`: more services to serve on the same port (the Replica
  // service), each outliving the AdminServer.
  static StatusOr<std::unique_ptr<AdminServer>> Start(const std::string& listen, const std::string& token,
                                                      std::function<AdminStats()> stats,
                                                      const std::vector<grpc::Service*>& also = {});

  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Stops serving; in-flight calls get up to 1 s. Idempotent.
  void Shutdown();

  // "HOST:PORT" actually bound (the real port when 0 was asked).
  const std::string& address() const { return address_; }

 private:
  class Service;
  AdminServer() = default;

  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  bool shut_down_ = false;
};

}  // namespace rkv::server
