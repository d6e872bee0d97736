// The tcp transport: a software emulation of an RC queue pair over one TCP
// connection, for machines without an RDMA device. See
// common/transport/transport.h for the contract.
//
// One-sided READs and WRITEs are served by the target's transport thread
// straight from (into) its registered regions, with the access rights of
// the verbs transport enforced there: the target's application threads do
// no work for them.
#pragma once

#include <memory>

#include "common/transport/transport.h"

namespace rkv::transport {

StatusOr<std::unique_ptr<Transport>> CreateTcpTransport(const Options& options);

}  // namespace rkv::transport
