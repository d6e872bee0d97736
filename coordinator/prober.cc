#include "coordinator/prober.h"

#include <utility>

#include <glog/logging.h>
#include <grpcpp/client_context.h>

#include "coordinator/coordinator_state_util.h"
#include "proto/auth.h"
#include "proto/coordinator_set.h"
#include "proto/grpc_status.h"
#include "proto/rkv.grpc.pb.h"

namespace rkv::coordinator {

using std::chrono::steady_clock;

Prober::Prober(CoordinatorState* state, std::string token_digest_hex,
               std::shared_ptr<grpc::ChannelCredentials> credentials)
    : state_(state),
      digest_hex_(std::move(token_digest_hex)),
      credentials_(std::move(credentials)),
      timeout_(state->config().probe_timeout) {
  thread_ = std::thread([this] { Loop(); });
}

Prober::~Prober() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  thread_.join();
}

bool Prober::Suspect(CoordinatorState::ProbeTarget target, std::string why) {
  {
    MutexLock lock(mu_);
    if (stopping_ || busy_.contains(target.server_id) || queue_.size() >= kMaxQueued) return false;
    const auto refuted = refuted_at_.find(target.server_id);
    if (refuted != refuted_at_.end() && steady_clock::now() - refuted->second < kRefutedCooldown) return false;
    busy_.insert(target.server_id);
    queue_.push_back({std::move(target), std::move(why)});
    // Under the lock: a reporter's thread may be the last to touch the
    // prober before it is destroyed.
    cv_.NotifyAll();
  }
  return true;
}

bool Prober::SuspectId(const std::string& server_id, std::string why, uint64_t epoch) {
  std::optional<CoordinatorState::ProbeTarget> target = state_->ProbeTargetOf(server_id);
  if (!target.has_value() || (epoch != 0 && target->epoch != epoch)) return false;
  return Suspect(std::move(*target), std::move(why));
}

Prober::Counts Prober::counts() const {
  MutexLock lock(mu_);
  return counts_;
}

void Prober::Loop() {
  for (;;) {
    Pending next;
    {
      MutexLock lock(mu_);
      while (!stopping_ && queue_.empty()) cv_.Wait(mu_);
      if (stopping_) return;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    Run(next);
  }
}

void Prober::Run(const Pending& p) {
  const steady_clock::time_point started = steady_clock::now();
  // From here on no lease covers the suspect (when it leads a shard with
  // an UP backup), so that a confirmed suspect's fence counts from now.
  const steady_clock::time_point fenced = state_->BeginProbe(p.target.server_id, p.target.epoch);
  std::string note;
  const Status probe = Probe(p.target, digest_hex_, timeout_, &note, credentials_);
  bool confirmed = false;
  if (!probe.ok()) {
    StatusOr<bool> marked =
        state_->ConfirmSuspect(p.target.server_id, p.target.epoch, fenced, p.why + "; probe: " + probe.message());
    if (!marked.ok()) {
      LOG(ERROR) << "server " << p.target.server_id << " did not answer a probe (" << probe
                 << ") and cannot be recorded as DOWN: " << marked.status()
                 << "; the heartbeat timeout will retry";
    }
    confirmed = marked.ok() && *marked;
  }
  state_->EndProbe(p.target.server_id);
  MutexLock lock(mu_);
  ++counts_.probes;
  busy_.erase(p.target.server_id);
  if (confirmed) {
    ++counts_.confirmed;
    refuted_at_.erase(p.target.server_id);
    return;
  }
  ++counts_.refuted;
  refuted_at_[p.target.server_id] = steady_clock::now();
  LOG(INFO) << "server " << p.target.server_id << " (epoch " << p.target.epoch << ") suspected (" << p.why
            << ") but not DOWN: "
            << (probe.ok() ? (note.empty() ? std::string("it answered a probe") : note)
                           : "a heartbeat came while the probe ran (" + probe.ToString() + ")")
            << " in " << Seconds(steady_clock::now() - started);
}

Status Prober::Probe(const CoordinatorState::ProbeTarget& target, const std::string& token_digest_hex,
                     std::chrono::milliseconds timeout, std::string* note,
                     const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  // A fresh channel: one left from an earlier probe would carry gRPC's
  // reconnect backoff, and probes are rare.
  auto stub = v1::Admin::NewStub(control::MakeControlChannel(target.admin_address, credentials));
  grpc::ClientContext context;
  control::AttachTokenDigest(&context, token_digest_hex);
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::HealthResponse health;
  const grpc::Status rpc = stub->Health(&context, v1::HealthRequest(), &health);
  if (rpc.ok()) {
    if (health.server_id() != target.server_id || health.epoch() != target.epoch) {
      return FailedPrecondition("admin " + target.admin_address + " answered as server " + health.server_id() +
                                " epoch " + std::to_string(health.epoch()) + ", not epoch " +
                                std::to_string(target.epoch));
    }
    return Status::Ok();
  }
  const Status s = control::FromGrpc(rpc);
  if (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded) {
    return s.WithContext("admin " + target.admin_address + ": Health");
  }
  *note = "admin " + target.admin_address + " answered a probe with " + s.ToString();
  return Status::Ok();
}

}  // namespace rkv::coordinator
