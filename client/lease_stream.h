// LeaseStream: one KeepLease stream (proto/rkv.proto) to one coordinator,
// on which a lease holder renews: one request, then its answer, at a time.
// A renewal on an open stream costs the coordinator one message each way
// instead of a call (docs/design.md §8.8, "What renewals cost").
//
// The stream is opened by the constructor (the call starts in the background: nothing
// waits) and is used until it fails in any way; then it is broken for good
// and its holder opens another (ControlClient::RenewLease renews with a
// unary RenewLease first, which finds and follows the leader, and opens
// the next stream on the coordinator that answered).
//
// Thread safety: one Renew at a time (the caller serializes them; the
// destructor must not run during one).
#pragma once

#include <memory>
#include <string>

#include <grpcpp/client_context.h>
#include <grpcpp/completion_queue.h>
#include <grpcpp/support/async_stream.h>

#include "client/server_connection.h"
#include "common/status.h"
#include "proto/coordinator_set.h"
#include "proto/rkv.grpc.pb.h"

namespace rkv::client {

class LeaseStream {
 public:
  // Starts a KeepLease call on `target` (its stub must outlive the
  // stream), carrying the token digest of `coordinators`.
  LeaseStream(const control::CoordinatorSet& coordinators, const control::CoordinatorSet::Target& target);
  // Cancels the call and waits for its operations to come back.
  ~LeaseStream();
  LeaseStream(const LeaseStream&) = delete;
  LeaseStream& operator=(const LeaseStream&) = delete;

  // Sends `request` and waits for its answer until `deadline`. Errors
  // (the stream is then broken): the status the coordinator ended the
  // stream with (UNAVAILABLE "not the leader ...", UNIMPLEMENTED from a
  // coordinator without KeepLease, ...), or DEADLINE_EXCEEDED when no
  // answer came in time; each prefixed "coordinator HOST:PORT: KeepLease".
  StatusOr<v1::RenewLeaseResponse> Renew(const v1::RenewLeaseRequest& request, Deadline deadline);

  bool broken() const { return broken_; }
  // The coordinator's address.
  const std::string& address() const { return address_; }

 private:
  // The operations a tag stands for on cq_.
  enum class Op : uintptr_t { kStart = 1, kWrite, kRead, kFinish };
  static void* Tag(Op op) { return reinterpret_cast<void*>(static_cast<uintptr_t>(op)); }

  // Waits for the next operation until `deadline`: false on timeout.
  bool Next(Deadline deadline, Op* op, bool* ok);
  // Marks the stream broken and collects its end: waits for the
  // operations in flight (cancelling the call when `cancel`, or when they
  // do not come back before `deadline`), then Finish. The coordinator's
  // status, with the address prefixed.
  Status Break(bool cancel, Deadline deadline);

  const std::string address_;
  grpc::ClientContext context_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::RenewLeaseRequest, v1::RenewLeaseResponse>> call_;
  v1::RenewLeaseResponse response_;
  grpc::Status end_;
  int in_flight_ = 0;  // operations started and not yet back from cq_
  bool started_ = false;  // StartCall came back
  bool broken_ = false;
  bool finished_ = false;  // Finish came back: end_ holds the status
};

}  // namespace rkv::client
