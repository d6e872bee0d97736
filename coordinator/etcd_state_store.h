// The coordinator's state in etcd (--etcd): the StateStore of a coordinator
// that shares its cluster with others, one of which leads
// (coordinator/leadership.h). Keys, all under the prefix P
// (--etcd_prefix, which ends in "/"):
//   P format        "rkv-coordinator-state <N>": the layout's version,
//                   written with the first commit; a prefix holding another
//                   layout is refused, never overwritten
//   P meta          StoredMeta (proto/coordinator_store.proto)
//   P server/<id>   StoredServer
//   P leader        the leading coordinator's address, under its etcd lease
//                   (written by Leadership, not by this store)
// Anything else under P is refused at Load: the prefix belongs to something
// else.
//
// Commits are one etcd transaction each, conditioned on the leader key still
// being the one this coordinator created (its create revision): a deposed
// leader's commit changes nothing and fails with UNAVAILABLE "not the
// leader". A store that has not been told a leadership (SetLeadership)
// refuses every commit the same way: it belongs to a standby.
//
// Thread safety: Load and Commit are serialized by the owning
// CoordinatorState; SetLeadership may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "coordinator/etcd/etcd_client.h"
#include "coordinator/state_store.h"

namespace rkv::coordinator {

// The layout version this coordinator writes and reads.
inline constexpr char kEtcdStateFormat[] = "rkv-coordinator-state 1";

// The key names under a prefix.
std::string EtcdFormatKey(const std::string& prefix);
std::string EtcdMetaKey(const std::string& prefix);
std::string EtcdServerKey(const std::string& prefix, const std::string& server_id);
std::string EtcdLeaderKey(const std::string& prefix);

// INVALID_ARGUMENT unless `prefix` starts and ends with "/", is at most 256
// bytes and holds only printable ASCII without spaces.
Status ValidateEtcdPrefix(const std::string& prefix);

class EtcdStateStore final : public StateStore {
 public:
  // Each etcd call gets `call_timeout`. `etcd` must outlive the store.
  EtcdStateStore(etcd::EtcdClient* etcd, std::string prefix,
                 std::chrono::milliseconds call_timeout = std::chrono::milliseconds(3000));

  // Reads every key under the prefix (one linearizable range). DATA_LOSS
  // for a record that does not parse or names another server;
  // FAILED_PRECONDITION for another layout's format key or a key this
  // store does not know; UNAVAILABLE (naming the endpoints) when etcd does
  // not answer.
  StatusOr<Snapshot> Load() override;
  // One transaction: the format key, meta, each server record and a delete
  // of each removed one (servers.size() + removed.size() + 2 operations).
  Status Commit(const v1::store::StoredMeta& meta, const std::vector<v1::store::StoredServer>& servers,
                const std::vector<std::string>& removed) override;

  // For an import (coordinator/state_transfer.h): the next commits are
  // conditioned on the prefix holding no cluster yet (no format and no
  // meta key) instead of on a leadership.
  void SetImportOnly() EXCLUDES(mu_);

  // From now on commits are conditioned on the leader key having
  // `leader_create_revision` as its create revision (0: commit nothing).
  void SetLeadership(int64_t leader_create_revision) EXCLUDES(mu_);

  // Whether commits are conditioned on a leadership (SetLeadership with a
  // revision, not undone since by a commit that found the key changed).
  bool Leads() const EXCLUDES(mu_);

  // The etcd revision of the last Load or Commit.
  int64_t revision() const EXCLUDES(mu_);

  // True once (then false) after a commit whose outcome could not be
  // learned: the store has dropped its leadership (commits nothing), and
  // the state in memory may be behind etcd's, so the owner must step down
  // and reload before it leads again.
  bool TakeUnresolved() EXCLUDES(mu_);

 private:
  // After a commit of `version` failed with `error`: OK when it was applied
  // after all, UNAVAILABLE when it was not, and when that cannot be learned
  // within twice the call timeout, UNAVAILABLE with the leadership dropped.
  Status ResolveUnknownCommit(uint64_t version, int64_t leader_revision, const Status& error) EXCLUDES(mu_);

  etcd::EtcdClient* const etcd_;
  const std::string prefix_;
  const std::chrono::milliseconds call_timeout_;
  mutable Mutex mu_;
  int64_t leader_create_revision_ GUARDED_BY(mu_) = 0;
  int64_t revision_ GUARDED_BY(mu_) = 0;
  bool unresolved_ GUARDED_BY(mu_) = false;
  bool import_only_ GUARDED_BY(mu_) = false;
};

}  // namespace rkv::coordinator
