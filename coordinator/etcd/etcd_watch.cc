// EtcdClient::WatchPrefix: one Watch stream at a time on a thread of the
// watch's own, opened again on the next endpoint when it breaks, from the
// revision after the last event delivered (etcd_client.h states the
// contract).
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h>
#include <grpcpp/client_context.h>

#include "common/mutex.h"
#include "coordinator/etcd/etcd_call.h"
#include "coordinator/etcd/etcd_client.h"

namespace rkv::etcd {
namespace {

using EventsCallback = std::function<void(const std::vector<WatchEvent>&, int64_t revision)>;
using ErrorCallback = std::function<void(const Status&)>;

constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr std::chrono::milliseconds kMaxBackoff{1000};

// Stream failures that opening the stream again cannot cure: reported and
// the watch ends. Anything else (a lost connection, a member without a
// leader, a stream etcd closed) is retried.
bool IsFinal(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      return true;
    default:
      return false;
  }
}

// Thread safety: the constructor starts thread_, which alone runs Run and
// the callbacks and alone touches next_revision_; the destructor (any
// other thread) stops it through stop_ and context_ and joins.
class PrefixWatch final : public EtcdClient::Watch {
 public:
  PrefixWatch(std::shared_ptr<internal::Channels> channels, std::string prefix, int64_t start_revision,
              EventsCallback on_events, ErrorCallback on_error)
      : channels_(std::move(channels)),
        prefix_(std::move(prefix)),
        on_events_(std::move(on_events)),
        on_error_(std::move(on_error)),
        next_revision_(std::max<int64_t>(start_revision, 0)),
        thread_([this] { Run(); }) {}

  ~PrefixWatch() override {
    {
      MutexLock lock(mu_);
      stop_ = true;
      if (context_ != nullptr) context_->TryCancel();
      wake_.NotifyAll();
    }
    thread_.join();
  }

 private:
  // How one stream ended.
  enum class End {
    kStopped,  // the destructor cancelled it
    kRetry,    // lost: open another from next_revision_
    kFinal,    // on_error was called: the watch is over
  };

  void Run() {
    size_t endpoint = channels_->preferred();
    std::chrono::milliseconds backoff = kFirstBackoff;
    while (true) {
      bool created = false;
      if (Stream(endpoint, &created) != End::kRetry) return;
      if (created) backoff = kFirstBackoff;
      endpoint = (endpoint + 1) % channels_->size();
      MutexLock lock(mu_);
      if (wake_.WaitFor(mu_, backoff, [this] {
            mu_.AssertHeld();
            return stop_;
          })) {
        return;
      }
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }

  bool stopped() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return stop_;
  }

  End Fail(Status status) {
    if (!stopped()) on_error_(status);
    return End::kFinal;
  }

  // One stream on endpoint `i`, until it ends; `*created` tells whether
  // etcd accepted the watch on it.
  End Stream(size_t i, bool* created) {
    const std::string& endpoint = channels_->endpoints()[i];
    std::string why;
    std::shared_ptr<grpc::Channel> channel =
        channels_->Connected(i, std::chrono::steady_clock::now() + channels_->options().attempt_timeout, &why);
    if (channel == nullptr) return End::kRetry;
    grpc::ClientContext context;
    internal::RequireLeader(context);
    {
      MutexLock lock(mu_);
      if (stop_) return End::kStopped;
      context_ = &context;
    }
    const End end = Exchange(endpoint, channel, context, created);
    MutexLock lock(mu_);
    context_ = nullptr;
    return stop_ ? End::kStopped : end;
  }

  End Exchange(const std::string& endpoint, const std::shared_ptr<grpc::Channel>& channel,
               grpc::ClientContext& context, bool* created) {
    auto stream = etcdserverpb::Watch::NewStub(channel)->Watch(&context);
    etcdserverpb::WatchRequest request;
    etcdserverpb::WatchCreateRequest* create = request.mutable_create_request();
    create->set_key(internal::PrefixKey(prefix_));
    create->set_range_end(PrefixEnd(prefix_));
    create->set_start_revision(next_revision_);
    const int64_t asked_from = next_revision_;
    End end = End::kRetry;
    if (stream->Write(request)) {
      etcdserverpb::WatchResponse response;
      while (stream->Read(&response)) {
        end = Handle(endpoint, asked_from, response, created);
        if (end != End::kRetry) break;
      }
    }
    if (end != End::kRetry) {
      context.TryCancel();
      stream->Finish();
      return end;
    }
    const grpc::Status status = stream->Finish();
    if (IsFinal(status.error_code())) return Fail(internal::EndpointError(endpoint, status));
    return End::kRetry;
  }

  // One response of the stream. kRetry means "go on reading".
  End Handle(const std::string& endpoint, int64_t asked_from, const etcdserverpb::WatchResponse& response,
             bool* created) {
    const int64_t header_revision = response.header().revision();
    if (response.created()) {
      *created = true;
      // From now: the store's revision when the watch began is the last
      // one this watch need not see (a new stream resumes after it).
      if (next_revision_ == 0 && !response.canceled()) next_revision_ = header_revision + 1;
    }
    if (response.canceled()) {
      const std::string what = "watch of \"" + prefix_ + "\" from revision " + std::to_string(asked_from);
      if (response.compact_revision() > 0) {
        return Fail(internal::EndpointError(
            endpoint, StatusCode::kFailedPrecondition,
            what + ": compacted: history before revision " + std::to_string(response.compact_revision()) +
                " is gone (compact revision " + std::to_string(response.compact_revision()) +
                "); read again and watch from the revision read + 1"));
      }
      if (asked_from > header_revision + 1) {
        return Fail(internal::EndpointError(endpoint, StatusCode::kOutOfRange,
                                            what + ": past the store's revision " + std::to_string(header_revision) +
                                                " (" + response.cancel_reason() + ")"));
      }
      return Fail(internal::EndpointError(endpoint, StatusCode::kAborted,
                                          what + ": cancelled by etcd: " + response.cancel_reason()));
    }
    if (response.events_size() == 0) return End::kRetry;

    std::vector<WatchEvent> events;
    events.reserve(response.events_size());
    int64_t last = 0;
    for (const mvccpb::Event& event : response.events()) {
      const mvccpb::KeyValue& kv = event.kv();
      if (!std::string_view(kv.key()).starts_with(prefix_)) {
        return Fail(internal::EndpointError(endpoint, StatusCode::kInternal,
                                            "watch of \"" + prefix_ + "\" got an event of key \"" + kv.key() + "\""));
      }
      if (kv.mod_revision() < last || kv.mod_revision() <= 0 ||
          (header_revision > 0 && kv.mod_revision() > header_revision)) {
        return Fail(internal::EndpointError(endpoint, StatusCode::kInternal,
                                            "watch of \"" + prefix_ + "\" got revision " +
                                                std::to_string(kv.mod_revision()) + " out of order"));
      }
      last = kv.mod_revision();
      // A stream opened again may repeat what the last one delivered.
      if (kv.mod_revision() < next_revision_) continue;
      WatchEvent out;
      if (event.type() == mvccpb::Event::PUT) {
        out.type = WatchEvent::Type::kPut;
      } else if (event.type() == mvccpb::Event::DELETE) {
        out.type = WatchEvent::Type::kDelete;
      } else {
        return Fail(internal::EndpointError(endpoint, StatusCode::kInternal,
                                            "watch event of unknown type " + std::to_string(event.type())));
      }
      out.kv = internal::FromProto(kv);
      events.push_back(std::move(out));
    }
    if (events.empty()) return End::kRetry;
    next_revision_ = events.back().kv.mod_revision + 1;
    if (!stopped()) on_events_(events, header_revision);
    return End::kRetry;
  }

  const std::shared_ptr<internal::Channels> channels_;
  const std::string prefix_;
  const EventsCallback on_events_;
  const ErrorCallback on_error_;
  // The first revision not delivered yet (0: from the store's revision
  // when the first stream begins). Watch thread only.
  int64_t next_revision_;

  Mutex mu_;
  CondVar wake_;  // stop_ was set
  bool stop_ GUARDED_BY(mu_) = false;
  // The stream in flight, for the destructor to cancel.
  grpc::ClientContext* context_ GUARDED_BY(mu_) = nullptr;

  std::thread thread_;  // last: starts once every member above exists
};

}  // namespace

std::unique_ptr<EtcdClient::Watch> EtcdClient::WatchPrefix(const std::string& prefix, int64_t start_revision,
                                                           EventsCallback on_events, ErrorCallback on_error) {
  return std::make_unique<PrefixWatch>(channels_, prefix, start_revision, std::move(on_events), std::move(on_error));
}

}  // namespace rkv::etcd
