// What rkv-leader-failover-bench watches during a leader change, besides
// its clients: etcd's leader key (who leads), the coordinators' answers to
// RenewLease (whether a leader answers), and the commits under the cluster's
// prefix (the new leader's first commit), each timed on this process's
// steady clock.
//
// Thread safety: every method may be called from any thread. The commit
// watch's callback runs on the etcd client's watch thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/failover/key_load.h"
#include "common/mutex.h"
#include "coordinator/etcd/etcd_client.h"
#include "rkv/status.h"

namespace rkv::bench {

class FailoverProbes {
 public:
  // `endpoints`: etcd's; `prefix`: the cluster's (--etcd_prefix), ending
  // in '/'. Starts watching the prefix for commits at once.
  static StatusOr<std::unique_ptr<FailoverProbes>> Create(const std::vector<std::string>& endpoints,
                                                          const std::string& prefix, const std::string& token);

  // The leader key (linearizable read): its value, the leader's address,
  // and its create revision; an empty value when no coordinator leads.
  StatusOr<etcd::KeyValue> ReadLeader(std::chrono::milliseconds timeout);

  // Reads the leader key every `poll` until it names a coordinator other
  // than `old_address` (any non-empty value), up to `timeout`; returns the
  // key and the time of the read that first saw it. DEADLINE_EXCEEDED when
  // none did.
  struct Seen {
    etcd::KeyValue key;
    Clock::time_point at;
  };
  StatusOr<Seen> WaitForLeaderOtherThan(const std::string& old_address, std::chrono::milliseconds poll,
                                        std::chrono::milliseconds timeout);

  // Sends RenewLease(map_version 0) to every address of `candidates` in
  // turn every `poll` (each call with a deadline of `poll` * 20 at least
  // 100 ms), on channels made for this wait, until one answers OK (only the
  // leader does: a standby refuses with "not the leader"), up to `timeout`.
  // Returns the index in `candidates` that answered and the time its answer
  // arrived.
  struct Answer {
    size_t candidate = 0;
    Clock::time_point at;
  };
  StatusOr<Answer> WaitForRenewLease(const std::vector<std::string>& candidates, std::chrono::milliseconds poll,
                                     std::chrono::milliseconds timeout);

  // The arrival time, at the commit watch, of the first write of the state's
  // meta key (one per commit: etcd_state_store.h) after `revision`, if any
  // has arrived.
  std::optional<Clock::time_point> FirstCommitAfter(int64_t revision) const;
  // Why the commit watch ended, when it did (then no later commit is seen).
  std::string watch_error() const;

 private:
  struct Commit {
    int64_t revision;
    Clock::time_point seen;
  };

  FailoverProbes() = default;

  std::string prefix_;
  std::string token_;
  std::unique_ptr<etcd::EtcdClient> etcd_;
  mutable Mutex mu_;
  std::vector<Commit> commits_ GUARDED_BY(mu_);
  std::string watch_error_ GUARDED_BY(mu_);
  // Declared last, so destroyed first: its destructor joins the thread
  // that calls back into commits_.
  std::unique_ptr<etcd::EtcdClient::Watch> watch_;
};

}  // namespace rkv::bench
