// Real etcd processes on loopback for tests of what speaks to etcd
// (coordinator/etcd/, the coordinator's leadership and state in etcd).
//
// EtcdCluster::Start runs one member or an initial cluster of several
// (/usr/bin/etcd, Debian's etcd-server) in a fresh temp dir, each with
// client and peer URLs on 127.0.0.1 at free ports, and the limits rkv's
// coordinator runs etcd with (--max-txn-ops=10000,
// --max-request-bytes=16777216). It returns once every member answers a
// linearizable read (so the cluster has a leader), or fails within its
// timeout with each silent member's log tail. A member can be stopped
// (SIGSTOP: it keeps its sockets but answers nothing), continued, killed
// and restarted on the same data dir and ports. The destructor kills every
// member.
//
// Thread safety: none; one test thread drives it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "rkv/status.h"
#include "tests/temp_dir.h"

namespace rkv::testing {

class EtcdCluster {
 public:
  static constexpr std::chrono::seconds kStartTimeout{60};

  // Starts `members` (1 or more) members as one new cluster.
  static StatusOr<std::unique_ptr<EtcdCluster>> Start(int members, std::chrono::seconds timeout = kStartTimeout);
  ~EtcdCluster();  // SIGKILLs every member still running
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  // "127.0.0.1:PORT", the client endpoint of member `i`.
  const std::string& endpoint(int i) const { return members_[i].client; }
  // Every member's client endpoint, in member order.
  std::vector<std::string> endpoints() const;
  bool running(int i) const { return members_[i].pid > 0; }

  // SIGSTOP / SIGCONT of a running member.
  void Stop(int i);
  void Continue(int i);
  // SIGKILL, then reap.
  void Kill(int i);
  // Kill (when running), then start member `i` again on its data dir and
  // ports, and wait until it answers a linearizable read.
  Status Restart(int i, std::chrono::seconds timeout = kStartTimeout);
  // The last `lines` lines of member `i`'s log, for failure messages.
  std::string LogTail(int i, int lines = 30) const;

 private:
  struct Member {
    std::string name;
    std::string client;  // 127.0.0.1:PORT
    std::string peer;    // 127.0.0.1:PORT
    std::string data_dir;
    std::string log_path;
    pid_t pid = -1;
  };

  EtcdCluster() = default;
  Status Spawn(int i);
  // Waits until every member in `which` answers a linearizable read.
  Status WaitServing(const std::vector<int>& which, std::chrono::seconds timeout);

  TempDir dir_;
  std::string initial_cluster_;
  std::string cluster_token_;
  std::vector<Member> members_;
};

}  // namespace rkv::testing
