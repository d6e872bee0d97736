#include "common/transport/factory.h"

#include "common/transport/tcp/tcp_transport.h"
#include "common/transport/verbs/verbs_transport.h"

namespace rkv::transport {

StatusOr<std::unique_ptr<Transport>> CreateTransport(Kind kind, const Options& options) {
  if (kind == Kind::kTcp) return CreateTcpTransport(options);
  if (!options.tls.empty()) {
    return InvalidArgument("TLS on the data plane is a tcp transport's: RDMA has no encryption (docs/design.md "
                           "§10 says what to do instead)");
  }
  return CreateVerbsTransport(options);
}

StatusOr<Kind> ResolveKind(const std::string& name, std::string* why) {
  if (name == "tcp") {
    if (why) *why = "transport tcp (asked for)";
    return Kind::kTcp;
  }
  if (name == "verbs") {
    if (why) *why = "transport verbs (asked for)";
    return Kind::kVerbs;
  }
  if (name == "auto") {
    if (VerbsDeviceAvailable()) {
      if (why) *why = "transport auto: picked verbs (an RDMA device has an active port)";
      return Kind::kVerbs;
    }
    if (why) *why = "transport auto: picked tcp (no RDMA device with an active port)";
    return Kind::kTcp;
  }
  return InvalidArgument("unknown transport '" + name + "': expected auto, tcp or verbs");
}

}  // namespace rkv::transport
