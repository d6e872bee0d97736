// LeaseStreams: the coordinator's side of KeepLease (proto/rkv.proto,
// docs/design.md §8.4 "Renewals on a stream"), on gRPC's async API.
//
// Each stream is a Call that runs one operation at a time, each started
// when the one before comes back: accept, check the token, then read a
// request, write its answer (CoordinatorService::AnswerRenewal), read
// the next; the first refusal finishes the stream with it. One stream
// waiting for its holder's next renewal holds no thread.
//
// Why the async API and not the callback API: a server with a callback
// method is a "hybrid" server to gRPC, whose sync methods' queues then
// stop polling the network, and every sync call (Join, Heartbeat,
// RenewLease, ...) waits on gRPC's callback threads instead (1-2% of
// calls took about 100 ms). The completion queue here is added as not
// frequently polled: the sync server's pollers do the I/O, and the
// threads here only take the completions. There are kQueues queues, each
// with a thread and a pending accept, and a stream stays on the queue
// that accepted it: Debian's gRPC checks each completion against every
// operation outstanding on its queue (a linear search), and each open
// stream always has a read outstanding, so a queue's cost per renewal
// grows with the streams on it.
//
// Thread safety: Close and open are thread-safe; AddQueue, Start and Stop
// are called once each, in that order, by the server's owner: AddQueue
// before the server is built, Start after, Stop after the server's
// Shutdown returned.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace rkv::coordinator {

class CoordinatorService;

class LeaseStreams {
 public:
  // Completion queues, one thread each.
  static constexpr int kQueues = 4;

  // `service` must outlive this object.
  explicit LeaseStreams(CoordinatorService* service);
  ~LeaseStreams();  // Stop()
  LeaseStreams(const LeaseStreams&) = delete;
  LeaseStreams& operator=(const LeaseStreams&) = delete;

  // Adds the completion queues to `builder`.
  void AddQueue(grpc::ServerBuilder* builder);
  // Starts the threads and accepts the first stream on each queue.
  void Start() EXCLUDES(mu_);
  // Accepts no more streams, and ends each open one at its next request
  // (UNAVAILABLE "the coordinator is shutting down"), so that the
  // server's Shutdown waits for a holder at most until its next renewal
  // (gRPC cancels what is left at the Shutdown's deadline).
  void Close();
  // Shuts the queues down, lets every call's last operation come back and
  // joins the threads. Idempotent.
  void Stop() EXCLUDES(mu_);

  // KeepLease streams open now (tests, reporting).
  int64_t open() const { return open_.load(std::memory_order_relaxed); }

 private:
  class Call;

  // Starts accepting one more stream on `cq`, unless closing or stopped.
  void AcceptLocked(grpc::ServerCompletionQueue* cq) REQUIRES(mu_);
  static void Run(grpc::ServerCompletionQueue* cq);

  CoordinatorService* const service_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs_;
  std::vector<std::thread> threads_;
  std::atomic<bool> closing_{false};
  std::atomic<int64_t> open_{0};
  // Held while an operation is started, so that none starts once the
  // queues are shut down (stopped_).
  Mutex mu_;
  bool stopped_ GUARDED_BY(mu_) = false;
};

}  // namespace rkv::coordinator
