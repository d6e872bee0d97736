#include "common/transport/transport.h"

#include <charconv>

#include "common/transport/tcp/tcp_transport.h"
#include "common/transport/verbs/verbs_transport.h"

namespace rkv::transport {

const char* KindName(Kind kind) { return kind == Kind::kTcp ? "tcp" : "verbs"; }

Status Connection::BadReadsToWaitFor(std::span<const ReadOp> ops) {
  if (ops.empty()) return InvalidArgument("PostReadsAndWait: no READs");
  if (!ops.back().signaled) return InvalidArgument("PostReadsAndWait: the last READ must be signaled");
  return Status::Ok();
}

Status Connection::PostReadsAndWait(std::span<const ReadOp> ops, std::chrono::microseconds timeout,
                                    std::vector<Completion>* others) {
  RKV_RETURN_IF_ERROR(CheckReadsToWaitFor(ops));
  RKV_RETURN_IF_ERROR(PostReads(ops));
  return WaitForRead(ops.back().wr_id, timeout, others);
}

Status Connection::WaitForRead(uint64_t wr_id, std::chrono::microseconds timeout,
                               std::vector<Completion>* others) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  Completion batch[8];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
    if (left.count() <= 0) return DeadlineExceeded("READ " + std::to_string(wr_id) + " did not complete in time");
    RKV_ASSIGN_OR_RETURN(const size_t n, Poll(batch, left));
    bool done = false;
    Status status;
    for (size_t i = 0; i < n; ++i) {
      if (!done && batch[i].op == OpType::kRead && batch[i].wr_id == wr_id) {
        done = true;
        status = std::move(batch[i].status);
      } else {
        others->push_back(std::move(batch[i]));
      }
    }
    if (done) return status;
  }
}

StatusOr<std::unique_ptr<Transport>> CreateTransport(Kind kind, const Options& options) {
  if (kind == Kind::kTcp) return CreateTcpTransport(options);
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

Status ParseHostPort(const std::string& address, std::string* host, uint16_t* port) {
  std::string h;
  std::string p;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return InvalidArgument("address '" + address + "' is not [HOST]:PORT");
    }
    h = address.substr(1, close - 1);
    p = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) return InvalidArgument("address '" + address + "' is not HOST:PORT");
    h = address.substr(0, colon);
    p = address.substr(colon + 1);
  }
  if (h.empty()) return InvalidArgument("address '" + address + "' has no host");
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (p.empty() || ec != std::errc() || end != p.data() + p.size() || value > 65535) {
    return InvalidArgument("address '" + address + "' has no valid port (0-65535)");
  }
  *host = h;
  *port = static_cast<uint16_t>(value);
  return Status::Ok();
}

}  // namespace rkv::transport
