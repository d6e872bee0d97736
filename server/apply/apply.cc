#include "server/apply/apply.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <glog/logging.h>

#include "common/hash.h"
#include "common/record.h"

namespace rkv::server {

protocol::ReplyMsg MakeReply(uint64_t request_id, StatusCode code, uint64_t version, std::string_view message,
                             Reason reason, uint64_t map_version) {
  protocol::ReplyMsg r{};
  r.request_id = request_id;
  r.status_code = static_cast<int32_t>(code);
  r.credits = 1;
  r.version = version;
  r.map_version = map_version;
  r.reason = static_cast<uint8_t>(reason);
  const size_t n = std::min(message.size(), sizeof(r.message) - 1);
  std::memcpy(r.message, message.data(), n);
  r.message[n] = '\0';
  return r;
}

namespace {

bool IsReplicaOp(protocol::Op op) {
  return op == protocol::Op::kReplicatePut || op == protocol::Op::kReplicateDelete;
}

bool IsDelete(protocol::Op op) { return op == protocol::Op::kDelete || op == protocol::Op::kReplicateDelete; }

}  // namespace

Applier::Applier(Store* store, Table* table, Heap* heap, ApplyLimits limits, RequestCacheLimits replies,
                 ApplyReplication replication)
    : cache_(replies), store_(store), syncer_(store), table_(table), heap_(heap), limits_(limits), replication_(replication) {
  CHECK_EQ(replication.policy == nullptr, replication.forwarder == nullptr)
      << "a replication policy and a forwarder go together";
}

uint64_t Applier::max_block_bytes() const {
  return layout::BlockBytes(limits_.max_key_bytes, limits_.max_value_bytes);
}

protocol::ReplyMsg Applier::Error(uint64_t request_id, const Status& status) {
  if (status.code() != StatusCode::kNotFound) errors_.fetch_add(1, std::memory_order_relaxed);
  return MakeReply(request_id, status.code(), 0, status.message(), status.reason(), status.map_version());
}

std::optional<protocol::ReplyMsg> Applier::Validate(std::span<const uint8_t> msg, std::span<const uint8_t> ring,
                                                    bool from_peer, Request* out) {
  protocol::RequestMsg req{};
  uint64_t request_id = 0;
  if (msg.size() >= offsetof(protocol::RequestMsg, request_id) + sizeof(uint64_t)) {
    std::memcpy(&request_id, msg.data() + offsetof(protocol::RequestMsg, request_id), sizeof(request_id));
  }
  if (msg.size() != sizeof(req)) {
    return Error(request_id, InvalidArgument("request message of " + std::to_string(msg.size()) +
                                             " bytes, expected " + std::to_string(sizeof(req))));
  }
  std::memcpy(&req, msg.data(), sizeof(req));
  const auto op = static_cast<protocol::Op>(req.op);
  const bool client_op = op == protocol::Op::kPut || op == protocol::Op::kDelete;
  if (!client_op && !IsReplicaOp(op)) {
    return Error(request_id, InvalidArgument("unknown op " + std::to_string(req.op)));
  }
  if (from_peer && client_op) {
    return Error(request_id, PermissionDenied("op " + std::to_string(req.op) +
                                              " is a client's: a replication connection carries replica ops only"));
  }
  if (!from_peer && !client_op) {
    return Error(request_id, PermissionDenied("op " + std::to_string(req.op) +
                                              " is a replica op: only a server of the cluster map, on a "
                                              "replication connection, may send it"));
  }
  if (req.reserved[0] != 0 || req.reserved[1] != 0 || req.reserved[2] != 0) {
    return Error(request_id, InvalidArgument("request reserved bytes are not zero"));
  }
  if (client_op && req.map_version != 0) {
    return Error(request_id, InvalidArgument("a client's request carries map version " +
                                             std::to_string(req.map_version) + ", expected 0"));
  }
  if (!client_op && req.map_version == 0) {
    return Error(request_id, InvalidArgument("a replica op carries map version 0 (the primary's expected)"));
  }
  if (req.ring_offset % layout::kBlockAlign != 0) {
    return Error(request_id, InvalidArgument("ring_offset " + std::to_string(req.ring_offset) +
                                             " is not 64-byte aligned"));
  }
  if (req.ring_offset > ring.size() || req.length > ring.size() - req.ring_offset) {
    return Error(request_id, InvalidArgument("record [" + std::to_string(req.ring_offset) + ", +" +
                                             std::to_string(req.length) + ") lies outside the " +
                                             std::to_string(ring.size()) + "-byte ring"));
  }
  if (req.length < layout::kBlockHeaderBytes || req.length > max_block_bytes()) {
    return Error(request_id, InvalidArgument("record length " + std::to_string(req.length) +
                                             " is outside [" + std::to_string(layout::kBlockHeaderBytes) +
                                             ", " + std::to_string(max_block_bytes()) + "]"));
  }

  // Copy first: the client can keep writing its ring, and the bytes that
  // are checked must be the bytes that are stored. One buffer per polling
  // thread, grown to the largest record seen; *out points into it.
  thread_local std::vector<uint8_t> copy;
  copy.assign(ring.begin() + static_cast<ptrdiff_t>(req.ring_offset),
              ring.begin() + static_cast<ptrdiff_t>(req.ring_offset + req.length));
  StatusOr<RecordView> rec = DecodeRecord(copy);
  if (!rec.ok()) {
    return Error(request_id, rec.status().WithContext("record at ring offset " + std::to_string(req.ring_offset)));
  }
  const RecordView& r = *rec;
  if (req.length > layout::BlockBytes(r.key.size(), r.value.size())) {
    return Error(request_id, InvalidArgument("request length " + std::to_string(req.length) +
                                             " exceeds the record's block of " +
                                             std::to_string(layout::BlockBytes(r.key.size(), r.value.size())) +
                                             " bytes"));
  }
  if (!from_peer && r.version != 0) {
    return Error(request_id, InvalidArgument("staging record carries version " + std::to_string(r.version) +
                                             ", expected 0 (the server assigns versions)"));
  }
  if (from_peer && r.version == 0) {
    return Error(request_id, InvalidArgument("replica record carries version 0 (the primary's version expected)"));
  }
  if (r.key.size() > limits_.max_key_bytes) {
    return Error(request_id, InvalidArgument("key of " + std::to_string(r.key.size()) +
                                             " bytes exceeds max_key_bytes " +
                                             std::to_string(limits_.max_key_bytes)));
  }
  if (r.value.size() > limits_.max_value_bytes) {
    return Error(request_id, InvalidArgument("value of " + std::to_string(r.value.size()) +
                                             " bytes exceeds max_value_bytes " +
                                             std::to_string(limits_.max_value_bytes)));
  }
  const bool tombstone = (r.flags & layout::kBlockFlagTombstone) != 0;
  if (IsDelete(op)) {
    if (!tombstone) return Error(request_id, InvalidArgument("DELETE record lacks the tombstone flag"));
    if (!r.value.empty()) return Error(request_id, InvalidArgument("DELETE record carries a value"));
  } else if (tombstone) {
    return Error(request_id, InvalidArgument("PUT record carries the tombstone flag"));
  }
  *out = Request{request_id, op, r.key, r.value, r.version, req.map_version};
  return std::nullopt;
}

protocol::ReplyMsg Applier::Apply(uint64_t client_id, std::span<const uint8_t> msg, std::span<const uint8_t> ring) {
  Request req;
  if (std::optional<protocol::ReplyMsg> refused = Validate(msg, ring, /*from_peer=*/false, &req)) return *refused;
  bool remember = true;
  return ApplyOnce(client_id, req, &remember);
}

size_t Applier::KeyStripe(std::string_view key) {
  // The shard hash is as good as any here: stripes only need to spread
  // keys, and writes of one shard spread over all of them.
  return static_cast<size_t>(ShardHash(key) % kKeyStripes);
}

protocol::ReplyMsg Applier::ApplyOnce(uint64_t client_id, const Request& req, bool* remember) {
  const std::pair<uint64_t, uint64_t> name{client_id, req.request_id};
  {
    MutexLock lock(cache_mu_);
    protocol::ReplyMsg reply{};
    while (true) {
      switch (cache_.Check(client_id, req.request_id, &reply)) {
        case RequestCache::Verdict::kReplay:
          replays_.fetch_add(1, std::memory_order_relaxed);
          return reply;
        case RequestCache::Verdict::kForgotten:
          // Not remembered, so not applied again: it may be a retry of a
          // request applied long ago.
          return Error(req.request_id, Status(StatusCode::kAborted,
                                              "request " + std::to_string(req.request_id) +
                                                  " is too old for the replay check: not applied; a retry's "
                                                  "outcome is unknown",
                                              Reason::kOutcomeUnknown));
        case RequestCache::Verdict::kNew:
          break;
      }
      if (in_flight_.count(name) == 0) break;
      // Its twin is being applied: wait for its end, then look again (its
      // reply, or nothing if it was not to be remembered).
      cache_done_.Wait(cache_mu_);
    }
    in_flight_.insert(name);
  }
  const protocol::ReplyMsg reply = ApplyWrite(req, remember);
  {
    MutexLock lock(cache_mu_);
    if (*remember) cache_.Insert(client_id, reply);
    in_flight_.erase(name);
  }
  cache_done_.NotifyAll();
  return reply;
}

protocol::ReplyMsg Applier::ApplyWrite(const Request& req, bool* remember) {
  {
    // A snapshot waiting for the gate holds the turnstile: this write
    // enters after it.
    MutexLock turnstile(gate_turnstile_);
  }
  ReaderLock gate(writes_gate_);
  MutexLock key_lock(key_stripes_[KeyStripe(req.key)]);
  return req.op == protocol::Op::kDelete ? ApplyDelete(req.request_id, req.key, remember)
                                         : ApplyPut(req.request_id, req.key, req.value, remember);
}

uint64_t Applier::ReserveVersion() {
  // The store's mark rises only when a write lands, so writes in flight
  // together would read the same NextVersion: reserved_version_ keeps
  // them apart, and above every version forwarded for a write that failed
  // (the backups may hold it, and would take a later write of the key
  // with the same version for a stale resend).
  // 0 when none is left: the store's mark or a reservation is at the top of
  // the space (NextVersion and the increment would wrap).
  constexpr uint64_t kTop = std::numeric_limits<uint64_t>::max();
  if (store_->version_high_water() == kTop || reserved_version_ == kTop) return 0;
  reserved_version_ = std::max(store_->NextVersion(), reserved_version_ + 1);
  return reserved_version_;
}

Status Applier::Replicate(const WriteRoute& route, protocol::Op op, std::string_view key, std::string_view value,
                          uint64_t version) {
  if (route.backups.empty()) return Status::Ok();
  const uint16_t flags = op == protocol::Op::kReplicateDelete ? layout::kBlockFlagTombstone : 0;
  thread_local std::vector<uint8_t> record;
  record.assign(layout::BlockBytes(key.size(), value.size()), 0);
  const uint64_t bytes = EncodeRecord(record, key, value, version, flags);
  const std::vector<Status> acks =
      replication_.forwarder->Forward(route.backups, route.map_version, op, std::span(record.data(), bytes));
  forwarded_.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < route.backups.size(); ++i) {
    const Status& ack = i < acks.size() ? acks[i] : Internal("the forwarder gave no answer for this backup");
    if (ack.ok()) continue;
    backup_failures_.fetch_add(1, std::memory_order_relaxed);
    const ReplicaPeer& backup = route.backups[i];
    LOG(WARNING) << "backup " << backup.server_id << " (epoch " << backup.epoch << ", " << backup.data_address
                 << ") of shard " << route.shard << " did not acknowledge a write: " << ack;
    if (Status reported = replication_.policy->ReportFailedBackup(route.shard, backup, ack.ToString());
        !reported.ok()) {
      LOG(ERROR) << "backup " << backup.server_id << " of shard " << route.shard
                 << " failed and the coordinator could not be told: " << reported;
      return Status(StatusCode::kUnavailable,
                    "outcome unknown: backup " + backup.server_id +
                        " failed and the coordinator could not be told (" + reported.message() + ")",
                    Reason::kOutcomeUnknown, route.map_version);
    }
  }
  return Status::Ok();
}

protocol::ReplyMsg Applier::ApplyPut(uint64_t request_id, std::string_view key, std::string_view value,
                                     bool* remember) {
  std::optional<WriteRoute> route;
  if (auto refused = RouteClientWrite(request_id, key, &route, remember)) return *refused;
  uint64_t version = 0;
  {
    MutexLock lock(mu_);
    if (!table_->PrepareInsert(key, Heap::Clock::now())) {
      // Refused before anything is written.
      return Error(request_id, ResourceExhausted("table full: no slot in the key's neighbourhood, even after "
                                                 "moving keys (raise --max_keys)"));
    }
    version = ReserveVersion();
    if (version == 0) {
      // Every version is taken (a replica arrived at the top of the
      // space): refused before anything is written.
      *remember = false;
      return Error(request_id, ResourceExhausted("no version left above " +
                                                 std::to_string(store_->version_high_water()) +
                                                 ": the key space's versions are exhausted"));
    }
    if (!route) return InstallPut(request_id, key, value, version);
    if (route->backups.empty()) {
      if (std::optional<protocol::ReplyMsg> refused = RefuseWithoutLease(request_id, key, *route, remember)) {
        return *refused;
      }
      return InstallPut(request_id, key, value, version);
    }
  }
  // The table mutex is free while the backups are waited for. `version`
  // is reserved (no other write takes it) and the key's lock is held (no
  // other client write of the key passes this one); writes of other keys
  // may publish meanwhile, with versions above or below this one.
  const Status replicated = Replicate(*route, protocol::Op::kReplicatePut, key, value, version);
  // A forward that outlasted the lease waits for the next grant (without
  // the table mutex) rather than end "outcome unknown" below.
  if (replicated.ok()) (void)replication_.policy->AwaitLease(kLeaseRenewalWait);
  MutexLock lock(mu_);
  if (!replicated.ok()) {
    *remember = false;
    return Error(request_id, replicated);
  }
  // The backups may hold it now; this server publishes and acknowledges it
  // only under a valid lease.
  if (std::optional<protocol::ReplyMsg> refused = RefuseWithoutLease(request_id, key, *route, remember)) {
    return *refused;
  }
  // Exactly the version the backups hold. A replica installed here
  // meanwhile (of another shard), or a client write of another key that
  // reserved a later version, may have raised the high-water mark; Put
  // keeps the larger one. The slot PrepareInsert found may have been taken
  // meanwhile by a write of another key: then Upsert refuses and the store
  // write is undone (InstallPut).
  return InstallPut(request_id, key, value, version);
}

protocol::ReplyMsg Applier::InstallPut(uint64_t request_id, std::string_view key, std::string_view value,
                                       uint64_t version) {
  if (Status s = store_->Put(key, value, version); !s.ok()) {
    LOG(ERROR) << "durable write failed: " << s;
    return Error(request_id, s.WithContext("durable write failed"));
  }
  StatusOr<Table::Entry> placed = table_->Upsert(key, value, version, Heap::Clock::now());
  if (!placed.ok() && placed.status().code() == StatusCode::kResourceExhausted) {
    if (const auto at = heap_->ReclaimableAt()) {
      // The heap is full but quarantined blocks will come back within one
      // grace period: wait for the oldest, then retry once.
      std::this_thread::sleep_until(*at);
      placed = table_->Upsert(key, value, version, Heap::Clock::now());
    }
  }
  if (!placed.ok()) {
    // Undo the durable write so store and table agree: restore the value
    // the table still publishes, or remove the key.
    Status undo;
    if (const std::optional<Table::Entry> prev = table_->Lookup(key)) {
      const Table::Record old = table_->RecordAt(prev->slot);
      undo = store_->Put(key, old.value, old.version);
    } else {
      undo = store_->Delete(key);
    }
    if (!undo.ok()) {
      LOG(ERROR) << "PUT of key '" << PrintableKey(key) << "' refused (" << placed.status()
                 << ") and its durable write could not be undone: " << undo
                 << "; the store holds a value the table does not";
      return Error(request_id, Internal("refused (" + placed.status().message() +
                                        ") and the durable write could not be undone"));
    }
    return Error(request_id, placed.status());
  }
  puts_.fetch_add(1, std::memory_order_relaxed);
  return MakeReply(request_id, StatusCode::kOk, version, "");
}

protocol::ReplyMsg Applier::ApplyDelete(uint64_t request_id, std::string_view key, bool* remember) {
  std::optional<WriteRoute> route;
  if (auto refused = RouteClientWrite(request_id, key, &route, remember)) return *refused;
  uint64_t version = 0;
  {
    MutexLock lock(mu_);
    const std::optional<Table::Entry> e = table_->Lookup(key);
    if (!route) return e ? DeleteLocal(request_id, key) : Error(request_id, NotFound("key not found"));
    // Even NOT_FOUND (local only: nothing to forward) is answered under a
    // valid lease: without one, the shard may have moved and the key may
    // exist on its new primary.
    if (!e || route->backups.empty()) {
      if (std::optional<protocol::ReplyMsg> refused = RefuseWithoutLease(request_id, key, *route, remember)) {
        return *refused;
      }
      return e ? DeleteLocal(request_id, key) : Error(request_id, NotFound("key not found"));
    }
    version = e->version;
  }
  if (Status s = Replicate(*route, protocol::Op::kReplicateDelete, key, {}, version); !s.ok()) {
    *remember = false;
    return Error(request_id, s);
  }
  (void)replication_.policy->AwaitLease(kLeaseRenewalWait);  // as in ApplyPut
  MutexLock lock(mu_);
  if (std::optional<protocol::ReplyMsg> refused = RefuseWithoutLease(request_id, key, *route, remember)) {
    return *refused;
  }
  return DeleteLocal(request_id, key);
}

std::optional<protocol::ReplyMsg> Applier::RouteClientWrite(uint64_t request_id, std::string_view key,
                                                            std::optional<WriteRoute>* route, bool* remember) {
  if (replication_.policy == nullptr) return std::nullopt;  // standalone: this server's alone
  StatusOr<WriteRoute> r = replication_.policy->RouteWrite(key);
  if (!r.ok()) {
    *remember = false;  // nothing written: a retry is judged afresh
    return Error(request_id, r.status());
  }
  // A server without a lease (its heartbeats fail: the coordinator is away
  // or cut off) refuses at once, before anything is written or forwarded,
  // with Reason::kNoLease: the client then knows that nothing was applied
  // and may resend (docs/design.md §5.6) within its deadline, instead of
  // getting "outcome unknown" from the check before the publish
  // (RefuseWithoutLease).
  if (const Status lease = replication_.policy->CheckLease(); !lease.ok()) {
    lease_refusals_.fetch_add(1, std::memory_order_relaxed);
    *remember = false;
    return Error(request_id, Status(StatusCode::kFailedPrecondition,
                                    "no lease on map version " + std::to_string(r->map_version) +
                                        ", nothing applied: not the primary of shard " + std::to_string(r->shard) +
                                        " (" + lease.message() + ")",
                                    Reason::kNoLease, r->map_version));
  }
  *route = std::move(*r);
  return std::nullopt;
}

std::optional<protocol::ReplyMsg> Applier::RefuseWithoutLease(uint64_t request_id, std::string_view key,
                                                              const WriteRoute& route, bool* remember) {
  if (const Status lease = replication_.policy->CheckLease(); !lease.ok()) {
    lease_refusals_.fetch_add(1, std::memory_order_relaxed);
    LOG_EVERY_N(WARNING, 1000) << "refusing to acknowledge a client write: " << lease;
    *remember = false;  // nothing published here: a retry is judged afresh
    return Error(request_id, Status(StatusCode::kUnavailable, "lease expired: outcome unknown (" + lease.message() + ")",
                                    Reason::kOutcomeUnknown, route.map_version));
  }
  // The lease covers the map this server holds now, which may be newer than
  // the route's (a freeze in the middle of this write, then a new grant):
  // that map must still make this server the primary, with no backup the
  // route did not have (one that may lack the write).
  StatusOr<WriteRoute> now = replication_.policy->RouteWrite(key);
  Status changed = now.status();
  if (changed.ok()) {
    for (const ReplicaPeer& b : now->backups) {
      const bool routed = std::any_of(route.backups.begin(), route.backups.end(), [&](const ReplicaPeer& r) {
        return r.server_id == b.server_id && r.epoch == b.epoch;
      });
      if (!routed) {
        changed = FailedPrecondition("map version " + std::to_string(now->map_version) + " added backup " +
                                     b.server_id + " to shard " + std::to_string(now->shard));
        break;
      }
    }
  }
  if (changed.ok()) return std::nullopt;
  *remember = false;
  return Error(request_id, Status(StatusCode::kUnavailable,
                                  "map changed mid-write, outcome unknown: " + changed.message(),
                                  Reason::kOutcomeUnknown, now.ok() ? now->map_version : route.map_version));
}

protocol::ReplyMsg Applier::DeleteLocal(uint64_t request_id, std::string_view key) {
  if (!table_->Lookup(key)) return Error(request_id, NotFound("key not found"));
  if (Status s = store_->Delete(key); !s.ok()) {
    LOG(ERROR) << "durable delete failed: " << s;
    return Error(request_id, s.WithContext("durable delete failed"));
  }
  StatusOr<uint64_t> removed = table_->Delete(key, Heap::Clock::now());
  if (!removed.ok()) return Error(request_id, removed.status());  // not reached: the key was found above
  deletes_.fetch_add(1, std::memory_order_relaxed);
  return MakeReply(request_id, StatusCode::kOk, *removed, "");
}

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
  // Judged before the table mutex: the policy may wait for a newer map.
  if (Status s = replication_.policy->AcceptReplica(sender_id, req.key, req.map_version); !s.ok()) {
    replica_refused_.fetch_add(1, std::memory_order_relaxed);
    return Error(req.request_id, s);
  }
  MutexLock lock(mu_);
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
    if (!table_->PrepareInsert(req.key, Heap::Clock::now())) {
      return Error(req.request_id, ResourceExhausted("table full: no slot in the key's neighbourhood, even after "
                                                     "moving keys (raise --max_keys)"));
    }
    protocol::ReplyMsg reply = InstallPut(req.request_id, req.key, req.value, req.version);
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

Applier::Snapshot Applier::snapshot() const {
  Snapshot s;
  s.puts = puts_.load(std::memory_order_relaxed);
  s.deletes = deletes_.load(std::memory_order_relaxed);
  s.replays = replays_.load(std::memory_order_relaxed);
  s.request_errors = errors_.load(std::memory_order_relaxed);
  s.forwarded_writes = forwarded_.load(std::memory_order_relaxed);
  s.backup_failures = backup_failures_.load(std::memory_order_relaxed);
  s.replica_writes = replica_writes_.load(std::memory_order_relaxed);
  s.replica_stale = replica_stale_.load(std::memory_order_relaxed);
  s.replica_refused = replica_refused_.load(std::memory_order_relaxed);
  s.lease_refusals = lease_refusals_.load(std::memory_order_relaxed);
  MutexLock lock(mu_);
  s.keys = table_->size();
  s.heap = heap_->stats();
  return s;
}

}  // namespace rkv::server
