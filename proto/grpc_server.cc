#include "proto/grpc_server.h"

#include <glog/logging.h>

#include <mutex>

#include "common/net_address.h"

namespace rkv::control {
namespace {

constexpr int kMinPollers = 2;
constexpr int kMaxPollers = 16;

}  // namespace

StatusOr<StartedGrpcServer> StartGrpcServer(const std::string& listen, grpc::Service* service,
                                            const std::string& what) {
  return StartGrpcServer(listen, std::vector<grpc::Service*>{service}, what);
}

StatusOr<StartedGrpcServer> StartGrpcServer(const std::string& listen, const std::vector<grpc::Service*>& services,
                                            const std::string& what,
                                            const std::function<void(grpc::ServerBuilder*)>& configure) {
  return StartGrpcServer(listen, services, what, TlsFiles{}, configure);
}

StatusOr<StartedGrpcServer> StartGrpcServer(const std::string& listen, const std::vector<grpc::Service*>& services,
                                            const std::string& what, const TlsFiles& tls,
                                            const std::function<void(grpc::ServerBuilder*)>& configure) {
  std::string host;
  uint16_t unused = 0;
  RKV_RETURN_IF_ERROR(ParseHostPort(listen, &host, &unused));
  RKV_ASSIGN_OR_RETURN(const std::shared_ptr<grpc::ServerCredentials> credentials, MakeServerCredentials(tls));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // gRPC's sync server keeps 1..2 idle polling threads by default: under a
  // steady stream of short calls (lease renewals, heartbeats) the last
  // idle poller to take a call starts a new thread, and a thread that
  // finds two idle pollers when it is done exits, so a thread is created
  // and destroyed for almost every call. With kMinPollers idle pollers
  // before a new thread starts, and room for kMaxPollers before one exits,
  // the threads stay (docs/design.md §8.8, "What renewals cost").
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, kMinPollers);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, kMaxPollers);
  builder.AddListeningPort(listen, credentials, &port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  if (configure) configure(&builder);
  StartedGrpcServer started;
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || port == 0) {
    return Unavailable(what + "cannot listen on " + listen + " (address in use or not local?)");
  }
  started.address = (listen.front() == '[' ? "[" + host + "]" : host) + ":" + std::to_string(port);
  if (tls.empty() && !IsLoopbackHost(host)) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      LOG(WARNING) << what << "gRPC on " << started.address
                   << " without TLS: tokens and cluster maps cross the network in the clear (pass --tls_cert, "
                      "--tls_key and --tls_ca; docs/design.md §10)";
    });
  }
  return started;
}

}  // namespace rkv::control
