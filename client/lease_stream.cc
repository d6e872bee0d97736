#include "client/lease_stream.h"

#include <chrono>

#include "common/clock.h"
#include "proto/grpc_status.h"

namespace rkv::client {

LeaseStream::LeaseStream(const control::CoordinatorSet& coordinators, const control::CoordinatorSet::Target& target)
    : address_(target.address) {
  coordinators.AttachToken(&context_);
  call_ = target.stub->PrepareAsyncKeepLease(&context_, &cq_);
  call_->StartCall(Tag(Op::kStart));
  in_flight_ = 1;
}

LeaseStream::~LeaseStream() {
  if (!finished_) (void)Break(/*cancel=*/true, Clock::now());
  cq_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq_.Next(&tag, &ok)) {
  }
}

bool LeaseStream::Next(Deadline deadline, Op* op, bool* ok) {
  void* tag = nullptr;
  if (cq_.AsyncNext(&tag, ok, SystemDeadline(deadline)) != grpc::CompletionQueue::GOT_EVENT) return false;
  --in_flight_;
  *op = static_cast<Op>(reinterpret_cast<uintptr_t>(tag));
  return true;
}

StatusOr<v1::RenewLeaseResponse> LeaseStream::Renew(const v1::RenewLeaseRequest& request, Deadline deadline) {
  if (broken_) return Unavailable("coordinator " + address_ + ": KeepLease: the stream is broken");
  // StartCall and Write share one operation set: the first Write waits
  // for the start to come back.
  while (!started_) {
    Op op{};
    bool ok = false;
    if (!Next(deadline, &op, &ok)) {
      (void)Break(/*cancel=*/true, deadline);
      return DeadlineExceeded("coordinator " + address_ + ": KeepLease: not started within the deadline");
    }
    if (!ok) return Break(/*cancel=*/false, deadline);
    if (op == Op::kStart) started_ = true;
  }
  call_->Write(request, Tag(Op::kWrite));
  call_->Read(&response_, Tag(Op::kRead));
  in_flight_ += 2;
  bool written = false;
  bool read = false;
  while (!(written && read)) {
    Op op{};
    bool ok = false;
    if (!Next(deadline, &op, &ok)) {
      (void)Break(/*cancel=*/true, deadline);  // its status would say CANCELLED
      return DeadlineExceeded("coordinator " + address_ + ": KeepLease: no answer within the deadline");
    }
    // A write, read or start that fails means the call has ended: its
    // status says why (the coordinator's refusal, or the connection's end).
    if (!ok) return Break(/*cancel=*/false, deadline);
    if (op == Op::kWrite) written = true;
    if (op == Op::kRead) read = true;
  }
  return response_;
}

Status LeaseStream::Break(bool cancel, Deadline deadline) {
  broken_ = true;
  if (cancel) context_.TryCancel();
  // Finish may be asked only once no read is pending: wait for every
  // operation in flight. Those of an ended call come back at once; after
  // the deadline the call is cancelled, which brings back the rest.
  bool cancelled = cancel;
  while (in_flight_ > 0) {
    Op op{};
    bool ok = false;
    if (!Next(cancelled ? Clock::time_point::max() : deadline, &op, &ok) && !cancelled) {
      context_.TryCancel();
      cancelled = true;
    }
  }
  call_->Finish(&end_, Tag(Op::kFinish));
  in_flight_ = 1;
  Op op{};
  bool ok = false;
  if (!Next(cancelled ? Clock::time_point::max() : deadline, &op, &ok)) {
    context_.TryCancel();
    Next(Clock::time_point::max(), &op, &ok);
  }
  finished_ = true;
  if (end_.ok()) return Unavailable("coordinator " + address_ + ": KeepLease: the coordinator ended the stream");
  return control::FromGrpc(end_).WithContext("coordinator " + address_ + ": KeepLease");
}

}  // namespace rkv::client
