// Starting a gRPC server the way every rkv control-plane service does.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/status.h"
#include "proto/tls.h"

namespace rkv::control {

struct StartedGrpcServer {
  std::unique_ptr<grpc::Server> server;
  // "HOST:PORT" actually bound: the port filled in when 0 was asked.
  std::string address;
};

// Builds and starts a server for `service` on `listen` ("HOST:PORT",
// "[v6]:PORT"; port 0 picks a free one). SO_REUSEPORT is off: gRPC turns
// it on by default, which would let a second process share the port and
// split the traffic. INVALID_ARGUMENT for a malformed address, UNAVAILABLE
// (its message prefixed with `what`) when it cannot listen.
StatusOr<StartedGrpcServer> StartGrpcServer(const std::string& listen, grpc::Service* service,
                                            const std::string& what);
// The same for several services on one port (each must outlive the
// server); `configure`, when set, is given the builder before it builds
// (an async method's completion queue).
StatusOr<StartedGrpcServer> StartGrpcServer(const std::string& listen, const std::vector<grpc::Service*>& services,
                                            const std::string& what,
                                            const std::function<void(grpc::ServerBuilder*)>& configure = {});
// The same with TLS: `tls` empty serves plain gRPC, else all three files
// (CheckServerTlsFiles; INVALID_ARGUMENT naming the flag and the file)
// and the server requests and verifies client certificates
// (MakeServerCredentials). A process that serves plain gRPC on an address
// other than loopback logs a WARNING, once.
StatusOr<StartedGrpcServer> StartGrpcServer(const std::string& listen, const std::vector<grpc::Service*>& services,
                                            const std::string& what, const TlsFiles& tls,
                                            const std::function<void(grpc::ServerBuilder*)>& configure = {});

}  // namespace rkv::control
