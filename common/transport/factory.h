// Creating a transport by kind: the one place that knows every
// implementation. Code that only moves bytes includes transport.h; code that
// chooses a transport (rkv-server, the client library, tools) includes this.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "common/transport/transport.h"

namespace rkv::transport {

// Creates a transport. kVerbs fails with UNAVAILABLE when no RDMA device
// with an active port exists.
StatusOr<std::unique_ptr<Transport>> CreateTransport(Kind kind, const Options& options);

// Parses "auto" | "tcp" | "verbs". "auto" picks verbs when
// VerbsDeviceAvailable() (verbs/verbs_transport.h), else tcp; `why`
// (optional) gets a sentence that says which was picked and why, for logs.
StatusOr<Kind> ResolveKind(const std::string& name, std::string* why);

}  // namespace rkv::transport
