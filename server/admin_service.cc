#include "server/admin_service.h"

#include <chrono>

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "proto/auth.h"
#include "proto/grpc_server.h"
#include "proto/rkv.grpc.pb.h"
#include "proto/validation.h"

namespace rkv::server {

class AdminServer::Service final : public v1::Admin::Service {
 public:
  Service(std::string digest_hex, std::function<AdminStats()> stats)
      : digest_hex_(std::move(digest_hex)), stats_(std::move(stats)) {}

  grpc::Status Health(grpc::ServerContext* context, const v1::HealthRequest*, v1::HealthResponse* response) override {
    if (grpc::Status s = control::CheckToken(context, digest_hex_); !s.ok()) return s;
    const AdminStats st = stats_();
    response->set_server_id(st.server_id);
    response->set_epoch(st.epoch);
    response->set_serving(st.serving);
    return grpc::Status::OK;
  }

  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest*, v1::StatsResponse* response) override {
    if (grpc::Status s = control::CheckToken(context, digest_hex_); !s.ok()) return s;
    const AdminStats st = stats_();
    response->set_server_id(st.server_id);
    response->set_epoch(st.epoch);
    response->set_keys(st.keys);
    response->set_puts(st.puts);
    response->set_deletes(st.deletes);
    response->set_request_errors(st.request_errors);
    response->set_connections(st.connections);
    response->set_gets_served_by_cpu(st.gets_served_by_cpu);
    response->set_heap_bytes(st.heap_bytes);
    response->set_heap_bytes_used(st.heap_bytes_used);
    response->set_heap_bytes_quarantined(st.heap_bytes_quarantined);
    response->set_catchup_records_listed(st.catchup_records_listed);
    response->set_catchup_values_fetched(st.catchup_values_fetched);
    response->set_syncing_shards(st.syncing_shards);
    response->set_catchup_records_served(st.catchup_records_served);
    return grpc::Status::OK;
  }

 private:
  const std::string digest_hex_;
  const std::function<AdminStats()> stats_;
};

StatusOr<std::unique_ptr<AdminServer>> AdminServer::Start(const std::string& listen, const std::string& token,
                                                          std::function<AdminStats()> stats,
                                                          const std::vector<grpc::Service*>& also) {
  RKV_RETURN_IF_ERROR(control::ValidateHostPort(listen, /*allow_port_zero=*/true).WithContext("--admin_listen"));
  if (token.empty()) return InvalidArgument("the token is empty");
  if (!stats) return InvalidArgument("no stats function");
  std::unique_ptr<AdminServer> server(new AdminServer());
  server->service_ = std::make_unique<Service>(control::TokenDigestHex(token), std::move(stats));
  std::vector<grpc::Service*> services{server->service_.get()};
  services.insert(services.end(), also.begin(), also.end());
  RKV_ASSIGN_OR_RETURN(control::StartedGrpcServer started,
                       control::StartGrpcServer(listen, services, "--admin_listen: "));
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

}  // namespace rkv::server
