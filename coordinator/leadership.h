// Leadership: which of the coordinators sharing one etcd prefix leads
// (docs/design.md section 8.10). Each campaigns with an etcd lease of
// `ttl` and one transaction: create the leader key (EtcdLeaderKey) under
// that lease, holding its own address, if no key exists. The one whose
// transaction created it leads until the key goes (its lease expired, it
// resigned) and keeps it alive every ttl / 3; the others read the leader's
// address from the key and campaign again when it goes.
//
// A leader counts its leadership from the send time of its last
// successful keepalive (or of the lease's grant): etcd expires the lease
// no earlier than `ttl` (as etcd answered it) after it received that
// message, so the leadership ends, on this coordinator's clock, at
// send + ttl * 0.99 - 50 ms (a clock running up to 1% off). Leading()
// turns false at that moment even when the keepalive thread is stuck, and
// the leader key's next holder is elected only after etcd removed this
// one's: two leaders never both count themselves leading at one instant.
//
// Thread safety: every public method may be called from any thread. The
// callbacks run on the campaign thread, one at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "coordinator/etcd/etcd_client.h"

namespace rkv::coordinator {

struct LeadershipOptions {
  std::string prefix;     // validated (ValidateEtcdPrefix)
  std::string advertise;  // HOST:PORT that clients and servers reach this coordinator at
  int64_t ttl_s = 2;      // the election lease, in seconds
};

class Leadership final {
 public:
  // Called once this coordinator's transaction created the leader key,
  // with the key's create revision; this coordinator leads once it
  // returns OK (an error gives the leadership up again at once).
  using OnElected = std::function<Status(int64_t leader_create_revision)>;
  // Called when the leadership ended (lost, given up, or resigned), after
  // Leading() turned false.
  using OnDeposed = std::function<void()>;
  // Asked at each keepalive: false ends the leadership (the store lost
  // track of a commit, or a commit found the key no longer this one's).
  using StillValid = std::function<bool()>;

  // Starts campaigning on a thread of its own. `etcd` must outlive this.
  Leadership(etcd::EtcdClient* etcd, LeadershipOptions options, OnElected on_elected, OnDeposed on_deposed,
             StillValid still_valid);
  ~Leadership();  // Stop()
  Leadership(const Leadership&) = delete;
  Leadership& operator=(const Leadership&) = delete;

  // OK while leading (see above); otherwise UNAVAILABLE "not the leader;
  // the leader is X", or "no leader elected yet (WHY)" (LeaderGate's
  // contract; EtcdCoordinator is the gate).
  Status CheckLeading(std::string* leader) const EXCLUDES(mu_);
  bool Leading() const EXCLUDES(mu_);

  // The leader's address as last seen ("" when none is known).
  std::string LeaderAddress() const EXCLUDES(mu_);

  // Wakes the campaign thread (the leader key changed): a standby
  // campaigns again at once rather than at its next poll.
  void Nudge() EXCLUDES(mu_);

  // Ends the leadership (revoking the lease, so that another coordinator
  // is elected at once) and the campaign. Idempotent.
  void Stop() EXCLUDES(mu_);

  // How often a standby looks at the leader key without being nudged.
  static constexpr std::chrono::milliseconds kStandbyPoll{250};

 private:
  using TimePoint = std::chrono::steady_clock::time_point;

  void Run() EXCLUDES(mu_);
  // One campaign: OK with true when this coordinator now leads.
  StatusOr<bool> Campaign() EXCLUDES(mu_);
  // Keeps the leadership alive until it is lost or Stop; then deposes.
  void Lead(int64_t create_revision) EXCLUDES(mu_);
  // One keepalive of the lease: the validity it earns, or an error.
  StatusOr<TimePoint> KeepAlive(TimePoint valid_until) EXCLUDES(mu_);
  // Waits `d`, or less when nudged or stopping; false once stopping.
  bool Sleep(std::chrono::milliseconds d) EXCLUDES(mu_);
  // The validity earned by a message sent at `sent` with `ttl_s` left.
  static TimePoint ValidUntil(TimePoint sent, int64_t ttl_s);
  void SetWhy(const std::string& why) EXCLUDES(mu_);

  etcd::EtcdClient* const etcd_;
  const LeadershipOptions options_;
  const OnElected on_elected_;
  const OnDeposed on_deposed_;
  const StillValid still_valid_;

  mutable Mutex mu_;
  CondVar cv_;  // Nudge and Stop
  bool stopping_ GUARDED_BY(mu_) = false;
  bool nudged_ GUARDED_BY(mu_) = false;
  bool leading_ GUARDED_BY(mu_) = false;
  TimePoint valid_until_ GUARDED_BY(mu_){};
  std::string leader_ GUARDED_BY(mu_);
  std::string why_ GUARDED_BY(mu_) = "the election has not run yet";
  // The campaign thread's own: the lease it campaigns with (0: none).
  int64_t lease_id_ = 0;
  TimePoint lease_valid_until_{};
  std::thread thread_;  // started by the constructor, joined by Stop
};

}  // namespace rkv::coordinator
