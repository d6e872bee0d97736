// Probes of suspected servers (docs/design.md §8.8, "Suspicion and
// probes"). A server is suspected when its heartbeats have been silent for
// CoordinatorConfig::suspect_after (the expiry thread looks every period)
// or when a primary reports that it could not forward a write to it
// (ReportReplicaFailure). The prober then asks the server's Admin Health
// within CoordinatorConfig::probe_timeout; when no answer comes from the
// incarnation the map lists, and no heartbeat arrived meanwhile, the
// server is marked DOWN and fenced at once
// (CoordinatorState::ConfirmSuspect), instead of after the heartbeat
// timeout. The fence and FenceWait before any promotion are unchanged: the
// probe only moves the moment the server is declared DOWN, and a server
// declared DOWN gets no lease after that moment.
//
// What counts as no answer: DEADLINE_EXCEEDED (a frozen process: its
// kernel accepts the connection, nothing answers), UNAVAILABLE (nobody
// listens: a killed process), or an answer from another id or epoch (a
// restarted server at that address). Any other answer comes from a live
// process and refutes the suspicion.
//
// Thread safety: Suspect and the counters may be called from any thread;
// probes run one at a time on the prober's own thread, so Suspect never
// waits on the network. The destructor stops that thread (a probe in
// flight ends within its timeout) and must run before the state is
// destroyed.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <thread>

#include <grpcpp/security/credentials.h>

#include "common/mutex.h"
#include "common/status.h"
#include "coordinator/coordinator_state.h"

namespace rkv::coordinator {

class Prober {
 public:
  // After a probe answered, the same server is not probed again for this
  // long (a slow but live server is not probed in a loop).
  static constexpr std::chrono::milliseconds kRefutedCooldown{1000};
  // At most this many probes wait; more suspicions are dropped (the
  // heartbeat timeout still catches every dead server).
  static constexpr size_t kMaxQueued = 64;

  // `state` must outlive the prober; `token_digest_hex` is presented to the
  // servers' Admin service over channels made with `credentials` (null:
  // plain gRPC; control::MakeChannelCredentials for TLS).
  Prober(CoordinatorState* state, std::string token_digest_hex,
         std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);
  ~Prober();
  Prober(const Prober&) = delete;
  Prober& operator=(const Prober&) = delete;

  // Queues a probe of `target` unless one of that server is queued or
  // running, or one answered less than kRefutedCooldown ago. `why` is
  // logged with the outcome. Returns whether it queued one.
  bool Suspect(CoordinatorState::ProbeTarget target, std::string why) EXCLUDES(mu_);
  // Suspect(the UP server `server_id`), when it has an admin address and,
  // unless `epoch` is 0, is at that epoch.
  bool SuspectId(const std::string& server_id, std::string why, uint64_t epoch = 0) EXCLUDES(mu_);

  struct Counts {
    uint64_t probes = 0;     // probes sent
    uint64_t confirmed = 0;  // servers marked DOWN on a probe
    uint64_t refuted = 0;    // the server answered, or a heartbeat came
  };
  Counts counts() const EXCLUDES(mu_);

  // One probe, without the queue: OK when the incarnation answered within
  // `timeout`; the failure otherwise (UNAVAILABLE, DEADLINE_EXCEEDED or
  // FAILED_PRECONDITION for another incarnation). Any other error of the
  // call comes back as OK with `*note` set: a live process answered.
  static Status Probe(const CoordinatorState::ProbeTarget& target, const std::string& token_digest_hex,
                      std::chrono::milliseconds timeout, std::string* note,
                      const std::shared_ptr<grpc::ChannelCredentials>& credentials = nullptr);

 private:
  struct Pending {
    CoordinatorState::ProbeTarget target;
    std::string why;
  };
  void Loop() EXCLUDES(mu_);
  void Run(const Pending& p) EXCLUDES(mu_);

  CoordinatorState* const state_;
  const std::string digest_hex_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const std::chrono::milliseconds timeout_;

  mutable Mutex mu_;
  CondVar cv_;  // signalled on a new suspicion and on stop
  bool stopping_ GUARDED_BY(mu_) = false;
  std::deque<Pending> queue_ GUARDED_BY(mu_);
  // Server ids queued or being probed.
  std::set<std::string> busy_ GUARDED_BY(mu_);
  // When a probe of a server last answered.
  std::map<std::string, std::chrono::steady_clock::time_point> refuted_at_ GUARDED_BY(mu_);
  Counts counts_ GUARDED_BY(mu_);
  std::thread thread_;  // started last by the constructor, joined by the destructor
};

}  // namespace rkv::coordinator
