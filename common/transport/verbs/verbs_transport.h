// The verbs transport: librdmacm for connection setup, ibverbs for the data
// path. See common/transport/transport.h for the contract.
#pragma once

#include <memory>

#include "common/transport/transport.h"

namespace rkv::transport {

// Fails with UNAVAILABLE when no device (Options::device, or any) has an
// active port; INVALID_ARGUMENT for a gid_index outside the port's table.
// Logs the device, its limits and how private regions are protected.
StatusOr<std::unique_ptr<Transport>> CreateVerbsTransport(const Options& options);

// VerbsDeviceAvailable() (transport.h) is defined with this transport.

namespace verbs {
// As CreateVerbsTransport, but connection-private regions are always plain
// MRs, as on a device without type 2 memory windows: lets tests run the
// fallback on any device.
StatusOr<std::unique_ptr<Transport>> CreateWithoutMemoryWindows(const Options& options);
}  // namespace verbs

}  // namespace rkv::transport
