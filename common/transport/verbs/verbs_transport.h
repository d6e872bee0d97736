// The verbs transport: librdmacm for connection setup, ibverbs for the data
// path. See common/transport/transport.h for the contract.
//
// Completions: a client connection, and a server connection taken from
// Listener::Next without a group, has its own send and receive CQs and a
// completion channel, and its Poll spins on them then sleeps
// (verbs/verbs_connection.h). A server connection taken with a group from
// NewPollGroup completes into that group's shared CQs, and one thread
// collects them for every member in PollGroup::Wait
// (verbs/verbs_poll_group.h); Next fails with RESOURCE_EXHAUSTED (and the
// request is refused as transient) when the group's CQs cannot grow to hold
// one more connection's queues.
#pragma once

#include <memory>

#include "common/transport/transport.h"

namespace rkv::transport {

// Fails with UNAVAILABLE when no device (Options::device, or any) has an
// active port; INVALID_ARGUMENT for a gid_index outside the port's table.
// Logs the device, its limits and how private regions are protected.
StatusOr<std::unique_ptr<Transport>> CreateVerbsTransport(const Options& options);

// True when an RDMA device with an active port exists (what "auto" in
// ResolveKind, factory.h, picks verbs by).
bool VerbsDeviceAvailable();

namespace verbs {
// As CreateVerbsTransport, but connection-private regions are always plain
// MRs, as on a device without type 2 memory windows: lets tests run the
// fallback on any device.
StatusOr<std::unique_ptr<Transport>> CreateWithoutMemoryWindows(const Options& options);
}  // namespace verbs

}  // namespace rkv::transport
