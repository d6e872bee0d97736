// EtcdCoordinator: what makes a coordinator one of several that share a
// cluster's state in etcd (--etcd; docs/design.md section 8.10). It owns
// the etcd client, the election (Leadership) and a watch of the prefix,
// and keeps the CoordinatorState that the gRPC service answers from in step
// with them:
//   - as a standby, the state is reloaded (quietly) whenever a key under
//     the prefix changes, so GetClusterMap and WatchClusterMap answer the
//     committed map; every other call is refused with "not the leader"
//     (the LeaderGate this class is);
//   - once elected, the store's commits are conditioned on the new leader
//     key and the state is reloaded as a restarted coordinator's is (every
//     timer and fence from now) before the first call is answered;
//   - once deposed, commits stop and the state follows etcd again.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/etcd/etcd_client.h"
#include "coordinator/etcd_state_store.h"
#include "coordinator/leadership.h"

namespace rkv::coordinator {

struct EtcdCoordinatorOptions {
  std::vector<std::string> endpoints;  // etcd's client endpoints, HOST:PORT
  std::string prefix = "/rkv/default/";
  int64_t election_ttl_s = 2;
  // How long Open waits for etcd to answer (a progress line every 5 s).
  std::chrono::seconds connect_wait{30};
};

class EtcdCoordinator final : public LeaderGate {
 public:
  // Connects to etcd and loads the state under the prefix (waiting up to
  // options.connect_wait for etcd). Errors: INVALID_ARGUMENT (endpoints,
  // prefix), UNAVAILABLE naming the endpoints when etcd did not answer in
  // time, and CoordinatorState::Open's (another cluster's or layout's
  // state under the prefix: FAILED_PRECONDITION, nothing written).
  static StatusOr<std::unique_ptr<EtcdCoordinator>> Open(const CoordinatorConfig& config,
                                                         EtcdCoordinatorOptions options);
  ~EtcdCoordinator() override;  // Stop()
  EtcdCoordinator(const EtcdCoordinator&) = delete;
  EtcdCoordinator& operator=(const EtcdCoordinator&) = delete;

  // The state, for the CoordinatorServer to own (once). This object keeps
  // using it until Stop: Stop it before the server is destroyed.
  std::unique_ptr<CoordinatorState> TakeState();

  // Starts following the prefix and campaigning, as `advertise` (the
  // HOST:PORT that servers and clients reach this coordinator at). Once.
  void StartCampaign(const std::string& advertise) EXCLUDES(mu_);

  // LeaderGate.
  Status CheckLeading(std::string* leader) const override EXCLUDES(mu_);
  void FillStatus(std::chrono::steady_clock::time_point deadline, v1::CoordinatorStatus* status) const override
      EXCLUDES(mu_);

  // Resigns the leadership (another coordinator takes over at once) and
  // stops the watch. Idempotent.
  void Stop() EXCLUDES(mu_);

  etcd::EtcdClient* etcd() const { return etcd_.get(); }

 private:
  EtcdCoordinator() = default;
  // Reloads the state while a standby, whenever asked to.
  void ReloadLoop() EXCLUDES(mu_);
  void RequestReload() EXCLUDES(mu_);
  // (Re)starts the watch of the prefix from the store's last revision + 1.
  void StartWatch() EXCLUDES(mu_);
  Status OnElected(int64_t create_revision) EXCLUDES(mu_);
  void OnDeposed() EXCLUDES(mu_);

  EtcdCoordinatorOptions options_;
  std::string advertise_;  // set once by StartCampaign, before the gate is read
  std::unique_ptr<etcd::EtcdClient> etcd_;
  EtcdStateStore* store_ = nullptr;  // owned by state
  std::unique_ptr<CoordinatorState> owned_state_;
  CoordinatorState* state_ = nullptr;

  // Serializes reloads with the leadership's changes.
  Mutex reload_mu_ ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool reload_wanted_ GUARDED_BY(mu_) = false;
  bool rewatch_wanted_ GUARDED_BY(mu_) = false;
  bool leading_ GUARDED_BY(mu_) = false;
  std::unique_ptr<etcd::EtcdClient::Watch> watch_ GUARDED_BY(mu_);
  // Set once by StartCampaign; read through leadership_ptr_ by the
  // service's threads and the watch's.
  std::unique_ptr<Leadership> leadership_;
  std::atomic<Leadership*> leadership_ptr_{nullptr};
  std::thread reload_thread_;
};

}  // namespace rkv::coordinator
