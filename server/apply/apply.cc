// What the Applier's jobs share (server/apply/apply.h): the replies, the
// validation of a request and its record (see Validation there), the local
// durable write and publish of a PUT (InstallPut: a client's, a backup's
// and a fetched record's alike) and the counters. The jobs themselves:
// apply_client.cc, apply_replicate.cc, apply_backup.cc, apply_catchup.cc
// and apply_digest.cc.
#include "server/apply/apply.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <glog/logging.h>

#include "common/clock.h"
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
  // An empty view may have no data at all: nothing to copy.
  if (n > 0) std::memcpy(r.message, message.data(), n);
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

std::optional<protocol::ReplyMsg> Applier::ReadRequest(std::span<const uint8_t> msg, protocol::RequestMsg* req) {
  uint64_t request_id = 0;
  if (msg.size() >= offsetof(protocol::RequestMsg, request_id) + sizeof(uint64_t)) {
    std::memcpy(&request_id, msg.data() + offsetof(protocol::RequestMsg, request_id), sizeof(request_id));
  }
  if (msg.size() != sizeof(*req)) {
    return Error(request_id, InvalidArgument("request message of " + std::to_string(msg.size()) +
                                             " bytes, expected " + std::to_string(sizeof(*req))));
  }
  std::memcpy(req, msg.data(), sizeof(*req));
  return std::nullopt;
}

std::optional<protocol::ReplyMsg> Applier::Validate(std::span<const uint8_t> msg, std::span<const uint8_t> ring,
                                                    bool from_peer, Request* out, std::vector<uint8_t>* copy) {
  protocol::RequestMsg req{};
  if (std::optional<protocol::ReplyMsg> refused = ReadRequest(msg, &req)) return refused;
  const uint64_t request_id = req.request_id;
  const auto op = static_cast<protocol::Op>(req.op);
  const bool client_op = op == protocol::Op::kPut || op == protocol::Op::kDelete;
  if (op == protocol::Op::kGet) {
    // A client's lookup is answered by Locate; it is no write.
    return Error(request_id, from_peer ? PermissionDenied("op 5 (a lookup) is a client's: a replication connection "
                                                          "carries replica ops only")
                                       : InvalidArgument("op 5 (a lookup) is not a write"));
  }
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
  if (req.reserved != 0) {
    return Error(request_id, InvalidArgument("request reserved byte is not zero"));
  }
  if (req.condition > protocol::kConditionMax) {
    return Error(request_id, InvalidArgument("request condition " + std::to_string(req.condition) + " is not known"));
  }
  const auto condition = static_cast<protocol::Condition>(req.condition);
  if (condition != protocol::Condition::kNone && op != protocol::Op::kPut &&
      !(op == protocol::Op::kDelete && condition == protocol::Condition::kVersionIs)) {
    return Error(request_id, InvalidArgument("op " + std::to_string(req.op) +
                                             " carries a condition: only a client's PUT may, or a client's DELETE "
                                             "a version condition"));
  }
  if ((condition == protocol::Condition::kVersionIs) != (req.expected_version != 0)) {
    return Error(request_id, InvalidArgument(
                                 condition == protocol::Condition::kVersionIs
                                     ? std::string("a version condition names version 0 (versions start at 1)")
                                     : "expected_version " + std::to_string(req.expected_version) +
                                           " without a version condition"));
  }
  if ((req.flags & ~protocol::kRequestFlagsKnown) != 0 || (!client_op && req.flags != 0)) {
    return Error(request_id, InvalidArgument("request flags " + std::to_string(req.flags) + " are not known for op " +
                                             std::to_string(req.op)));
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
  // are checked must be the bytes that are stored. By default one buffer
  // per polling thread, grown to the largest record seen; *out points
  // into it.
  thread_local std::vector<uint8_t> thread_copy;
  if (copy == nullptr) copy = &thread_copy;
  copy->assign(ring.begin() + static_cast<ptrdiff_t>(req.ring_offset),
               ring.begin() + static_cast<ptrdiff_t>(req.ring_offset + req.length));
  StatusOr<RecordView> rec = DecodeRecord(*copy);
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
    if (r.expires_at_ms != 0) return Error(request_id, InvalidArgument("DELETE record carries an expiry"));
  } else if (tombstone) {
    return Error(request_id, InvalidArgument("PUT record carries the tombstone flag"));
  }
  *out = Request{request_id, op, r.key, r.value, r.version, req.map_version,
                 (req.flags & protocol::kRequestResent) != 0, condition, req.expected_version, r.expires_at_ms};
  return std::nullopt;
}

protocol::ReplyMsg Applier::InstallPut(uint64_t request_id, std::string_view key, std::string_view value,
                                       uint64_t version, int64_t expires_at_ms) {
  if (Status s = store_->Put(key, value, version, expires_at_ms); !s.ok()) {
    LOG(ERROR) << "durable write failed: " << s;
    return Error(request_id, s.WithContext("durable write failed"));
  }
  StatusOr<Table::Entry> placed = Publish(key, value, version, expires_at_ms);
  if (!placed.ok()) {
    // Undo the durable write so store and table agree: restore the value
    // the table still publishes, or remove the key.
    if (Status undo = UndoDurable(key); !undo.ok()) {
      LOG(ERROR) << "PUT of key '" << PrintableKey(key) << "' refused (" << placed.status()
                 << ") and its durable write could not be undone: " << undo
                 << "; the store holds a value the table does not";
      return Error(request_id, Internal("refused (" + placed.status().message() +
                                        ") and the durable write could not be undone"));
    }
    return Error(request_id, placed.status());
  }
  puts_.fetch_add(1, std::memory_order_relaxed);
  protocol::ReplyMsg reply = MakeReply(request_id, StatusCode::kOk, version, "");
  // Where the write now lives, for the writer's location cache (§4.4): the
  // block was published before this reply is sent.
  reply.block = placed->slot;
  return reply;
}

StatusOr<Table::Entry> Applier::Publish(std::string_view key, std::string_view value, uint64_t version,
                                        int64_t expires_at_ms) {
  StatusOr<Table::Entry> placed = table_->Upsert(key, value, version, Heap::Clock::now(), expires_at_ms);
  if (!placed.ok() && placed.status().code() == StatusCode::kResourceExhausted) {
    if (const auto at = heap_->ReclaimableAt()) {
      // The heap is full but quarantined blocks will come back within one
      // grace period: wait for the oldest, then retry once.
      std::this_thread::sleep_until(*at);
      placed = table_->Upsert(key, value, version, Heap::Clock::now(), expires_at_ms);
    }
  }
  return placed;
}

Status Applier::PrepareSlot(std::string_view key) {
  if (table_->PrepareInsert(key, Heap::Clock::now())) return Status::Ok();
  return ResourceExhausted("table full: no slot in the key's neighbourhood, even after moving keys (raise "
                           "--max_keys)");
}

Status Applier::UndoDurable(std::string_view key) {
  if (const std::optional<Table::Entry> prev = table_->Lookup(key)) {
    const Table::Record old = table_->RecordAt(prev->slot);
    return store_->Put(key, old.value, old.version, old.expires_at_ms);
  }
  return store_->Delete(key);
}

std::optional<Table::Entry> Applier::LiveEntry(std::string_view key, bool with_expired) const {
  std::optional<Table::Entry> e = table_->Lookup(key);
  if (e && !with_expired && Expired(table_->RecordAt(e->slot).expires_at_ms, UnixNowMs())) return std::nullopt;
  return e;
}

Applier::Snapshot Applier::snapshot() const {
  Snapshot s;
  s.puts = puts_.load(std::memory_order_relaxed);
  s.deletes = deletes_.load(std::memory_order_relaxed);
  s.conditions_failed = conditions_failed_.load(std::memory_order_relaxed);
  s.lookups = lookups_.load(std::memory_order_relaxed);
  s.replays = replays_.load(std::memory_order_relaxed);
  s.resent = resent_.load(std::memory_order_relaxed);
  s.request_errors = errors_.load(std::memory_order_relaxed);
  s.forwarded_writes = forwarded_.load(std::memory_order_relaxed);
  s.backup_failures = backup_failures_.load(std::memory_order_relaxed);
  s.replica_writes = replica_writes_.load(std::memory_order_relaxed);
  s.replica_stale = replica_stale_.load(std::memory_order_relaxed);
  s.replica_refused = replica_refused_.load(std::memory_order_relaxed);
  s.lease_refusals = lease_refusals_.load(std::memory_order_relaxed);
  s.expired_reclaimed = expired_reclaimed_.load(std::memory_order_relaxed);
  MutexLock lock(table_mu_);
  s.keys = table_->size();
  s.heap = heap_->stats();
  return s;
}

}  // namespace rkv::server
