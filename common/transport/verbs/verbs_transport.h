// The verbs transport: librdmacm for connection setup, ibverbs for the data
// path. See common/transport/transport.h for the contract.
#pragma once

#include <memory>

#include "common/transport/transport.h"

namespace rkv::transport {

StatusOr<std::unique_ptr<Transport>> CreateVerbsTransport(const Options& options);

}  // namespace rkv::transport
