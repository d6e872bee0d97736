#include "proto/grpc_server.h"

#include "common/net_address.h"

namespace rkv::control {

StatusOr<StartedGrpcServer> StartGrpcServer(const std::string& listen, grpc::Service* service,
                                            const std::string& what) {
  return StartGrpcServer(listen, std::vector<grpc::Service*>{service}, what);
}

StatusOr<StartedGrpcServer> StartGrpcServer(const std::string& listen, const std::vector<grpc::Service*>& services,
                                            const std::string& what) {
  std::string host;
  uint16_t unused = 0;
  RKV_RETURN_IF_ERROR(ParseHostPort(listen, &host, &unused));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  StartedGrpcServer started;
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || port == 0) {
    return Unavailable(what + "cannot listen on " + listen + " (address in use or not local?)");
  }
  started.address = (listen.front() == '[' ? "[" + host + "]" : host) + ":" + std::to_string(port);
  return started;
}

}  // namespace rkv::control
