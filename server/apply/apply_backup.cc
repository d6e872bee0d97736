// The Applier's third job (server/apply/apply.h, "Replication", Backup):
// a write a primary forwarded, judged by the policy and installed only
// when it is newer than what this server holds, so that resends and
// reordering are harmless.
#include <optional>

#include <glog/logging.h>

#include "server/apply/apply.h"

namespace rkv::server {

protocol::ReplyMsg Applier::ApplyReplica(std::string_view sender_id, std::span<const uint8_t> msg,
                                         std::span<const uint8_t> ring) {
  Request req;
  if (std::optional<protocol::ReplyMsg> refused = Validate(msg, ring, /*from_peer=*/true, &req)) {
    replica_refused_.fetch_add(1, std::memory_order_relaxed);
    return *refused;
  }
  if (replication_.policy == nullptr) {
    // Not reached: such a server refuses replication connections.
    replica_refused_.fetch_add(1, std::memory_order_relaxed);
    return Error(req.request_id, FailedPrecondition("this server is not in a cluster: it accepts no replicas"));
  }
  // Judged before table_mu_: the policy may wait for a newer map.
  if (Status s = replication_.policy->AcceptReplica(sender_id, req.key, req.map_version); !s.ok()) {
    replica_refused_.fetch_add(1, std::memory_order_relaxed);
    return Error(req.request_id, s);
  }
  MutexLock lock(table_mu_);
  return InstallReplica(req);
}

protocol::ReplyMsg Applier::InstallReplica(const Request& req) {
  const std::optional<Table::Entry> current = table_->Lookup(req.key);
  const uint64_t have = current ? current->version : 0;
  if (req.op == protocol::Op::kReplicatePut) {
    if (have >= req.version) {
      replica_stale_.fetch_add(1, std::memory_order_relaxed);
      return MakeReply(req.request_id, StatusCode::kOk, have, "");
    }
    if (Status room = PrepareSlot(req.key); !room.ok()) return Error(req.request_id, room);
    protocol::ReplyMsg reply = InstallPut(req.request_id, req.key, req.value, req.version, req.expires_at_ms);
    if (reply.status_code == static_cast<int32_t>(StatusCode::kOk)) {
      replica_writes_.fetch_add(1, std::memory_order_relaxed);
    }
    return reply;
  }
  // A shard being caught up on remembers the delete, also of a key it
  // does not hold yet: a snapshot record from before it must not bring the
  // key back.
  NoteSyncDelete(req.key, req.version);
  if (!current || have > req.version) {
    // Absent, or newer than what the primary deleted: nothing to do.
    replica_stale_.fetch_add(1, std::memory_order_relaxed);
    return MakeReply(req.request_id, StatusCode::kOk, have, "");
  }
  if (Status s = store_->Delete(req.key); !s.ok()) {
    LOG(ERROR) << "durable delete failed: " << s;
    return Error(req.request_id, s.WithContext("durable delete failed"));
  }
  StatusOr<uint64_t> removed = table_->Delete(req.key, Heap::Clock::now());
  if (!removed.ok()) return Error(req.request_id, removed.status());  // not reached: found above
  deletes_.fetch_add(1, std::memory_order_relaxed);
  replica_writes_.fetch_add(1, std::memory_order_relaxed);
  return MakeReply(req.request_id, StatusCode::kOk, 0, "");
}

}  // namespace rkv::server
