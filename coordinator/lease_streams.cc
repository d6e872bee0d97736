#include "coordinator/lease_streams.h"

#include <glog/logging.h>

#include "coordinator/coordinator_service.h"

namespace rkv::coordinator {

// One KeepLease stream. Its tag on the queue is the Call itself: one
// operation is in flight at a time, and Proceed starts the next.
class LeaseStreams::Call {
 public:
  Call(LeaseStreams* owner, grpc::ServerCompletionQueue* cq) : owner_(owner), cq_(cq), stream_(&context_) {}

  // Asks for the next stream to arrive on cq_. Under owner_->mu_.
  void Accept() { owner_->service_->RequestKeepLease(&context_, &stream_, cq_, cq_, this); }

  // The operation in flight came back (`ok`: it succeeded); starts the
  // next one. False when the call is over and may be deleted.
  bool Proceed(bool ok) {
    switch (state_) {
      case State::kAccepting: {
        if (!ok) return false;  // the server is shutting down
        owner_->open_.fetch_add(1, std::memory_order_relaxed);
        counted_ = true;
        {
          MutexLock lock(owner_->mu_);
          owner_->AcceptLocked(cq_);
        }
        credentials_seen_ = owner_->service_->credentials_generation();
        grpc::Status s = owner_->service_->CheckCaller(&context_, "KeepLease");
        if (s.ok()) s = Closing();
        return s.ok() ? Read() : Finish(s);
      }
      case State::kReading: {
        // Not ok: the holder closed its side, or the call was cancelled.
        if (!ok) return Finish(grpc::Status::OK);
        response_.Clear();
        grpc::Status s = Closing();
        // A credential revoked by a reload since the stream opened ends it.
        if (s.ok()) s = owner_->service_->StillAllowed(&context_, "KeepLease", &credentials_seen_);
        if (s.ok()) s = owner_->service_->AnswerRenewal(&context_, &response_);
        return s.ok() ? Write() : Finish(s);
      }
      case State::kWriting:
        // Not ok: the call is gone; there is nobody left to finish to.
        return ok && Read();
      case State::kFinishing: return false;
    }
    return false;
  }

  ~Call() {
    if (counted_) owner_->open_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  enum class State { kAccepting, kReading, kWriting, kFinishing };

  grpc::Status Closing() const {
    if (!owner_->closing_.load(std::memory_order_acquire)) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down");
  }

  // Each starts its operation unless the queue is shut down (then the
  // call ends here: false).
  bool Read() {
    MutexLock lock(owner_->mu_);
    if (owner_->stopped_) return false;
    state_ = State::kReading;
    stream_.Read(&request_, this);
    return true;
  }
  bool Write() {
    MutexLock lock(owner_->mu_);
    if (owner_->stopped_) return false;
    state_ = State::kWriting;
    stream_.Write(response_, this);
    return true;
  }
  bool Finish(const grpc::Status& status) {
    MutexLock lock(owner_->mu_);
    if (owner_->stopped_) return false;
    state_ = State::kFinishing;
    stream_.Finish(status, this);
    return true;
  }

  LeaseStreams* const owner_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<v1::RenewLeaseResponse, v1::RenewLeaseRequest> stream_;
  v1::RenewLeaseRequest request_;
  v1::RenewLeaseResponse response_;
  State state_ = State::kAccepting;
  bool counted_ = false;
  uint64_t credentials_seen_ = 0;  // LiveClientCredentials' generation checked last
};

LeaseStreams::LeaseStreams(CoordinatorService* service) : service_(service) {}

LeaseStreams::~LeaseStreams() { Stop(); }

void LeaseStreams::AddQueue(grpc::ServerBuilder* builder) {
  // Not frequently polled: see the file comment.
  for (int i = 0; i < kQueues; ++i) cqs_.push_back(builder->AddCompletionQueue(/*is_frequently_polled=*/false));
}

void LeaseStreams::Start() {
  {
    MutexLock lock(mu_);
    for (auto& cq : cqs_) AcceptLocked(cq.get());
  }
  for (auto& cq : cqs_) threads_.emplace_back([cq = cq.get()] { Run(cq); });
}

void LeaseStreams::AcceptLocked(grpc::ServerCompletionQueue* cq) {
  if (stopped_ || closing_.load(std::memory_order_acquire)) return;
  (new Call(this, cq))->Accept();
}

void LeaseStreams::Close() { closing_.store(true, std::memory_order_release); }

void LeaseStreams::Stop() {
  {
    MutexLock lock(mu_);
    if (stopped_ || cqs_.empty()) return;
    stopped_ = true;
  }
  for (auto& cq : cqs_) cq->Shutdown();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  // Without threads (Start never ran) the queues are drained here.
  for (auto& cq : cqs_) Run(cq.get());
}

void LeaseStreams::Run(grpc::ServerCompletionQueue* cq) {
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) {
    auto* call = static_cast<Call*>(tag);
    if (!call->Proceed(ok)) delete call;
  }
}

}  // namespace rkv::coordinator
