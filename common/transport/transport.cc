#include "common/transport/transport.h"

#include <algorithm>
#include <utility>

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

Status Connection::PostProbe(uint64_t /*wr_id*/) {
  return Status(StatusCode::kUnimplemented, "this transport has no probe");
}

StatusOr<std::unique_ptr<Connection>> Listener::Next(std::chrono::milliseconds timeout, const Screen& screen,
                                                     const GroupChooser& choose) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    RKV_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                         NextUnscreened(std::max(left, std::chrono::milliseconds(0)), choose));
    if (conn == nullptr || !screen) return conn;
    std::optional<Rejection> refused = screen(conn->peer_private_data(), conn->peer_address());
    if (!refused) return conn;
    conn->Reject(*refused);
    if (Clock::now() >= deadline) return std::unique_ptr<Connection>();
  }
}

StatusOr<std::unique_ptr<Connection>> Listener::NextUnscreened(std::chrono::milliseconds /*timeout*/,
                                                               const GroupChooser& /*choose*/) {
  return Status(StatusCode::kUnimplemented, "a listener must override one of the Next functions");
}

}  // namespace rkv::transport
