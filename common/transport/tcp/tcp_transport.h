// The tcp transport: a software emulation of an RC queue pair over one TCP
// connection, for machines without an RDMA device. See
// common/transport/transport.h for the contract.
//
// One-sided READs and WRITEs are served by the target's transport side
// straight from (into) its registered regions, with the access rights of
// the verbs transport enforced there: by the connection's own reader
// thread, or, for a connection accepted into a PollGroup, by the thread in
// that group's Wait (so a server with a fixed set of polling threads runs
// no thread per connection). Connections made with Connect, and accepted
// ones handed out without a group, have a reader thread each.
#pragma once

#include <memory>

#include "common/transport/transport.h"

namespace rkv::transport {

StatusOr<std::unique_ptr<Transport>> CreateTcpTransport(const Options& options);

}  // namespace rkv::transport
