#include "server/apply.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <glog/logging.h>

#include "common/record.h"

namespace rkv::server {

protocol::ReplyMsg MakeReply(uint64_t request_id, StatusCode code, uint64_t version, std::string_view message) {
  protocol::ReplyMsg r{};
  r.request_id = request_id;
  r.status_code = static_cast<int32_t>(code);
  r.credits = 1;
  r.version = version;
  const size_t n = std::min(message.size(), sizeof(r.message) - 1);
  std::memcpy(r.message, message.data(), n);
  r.message[n] = '\0';
  return r;
}

Applier::Applier(Store* store, Table* table, Heap* heap, ApplyLimits limits, RequestCacheLimits replies)
    : store_(store), table_(table), heap_(heap), cache_(replies), limits_(limits) {}

uint64_t Applier::max_block_bytes() const {
  return layout::BlockBytes(limits_.max_key_bytes, limits_.max_value_bytes);
}

protocol::ReplyMsg Applier::Error(uint64_t request_id, const Status& status) {
  if (status.code() != StatusCode::kNotFound) errors_.fetch_add(1, std::memory_order_relaxed);
  return MakeReply(request_id, status.code(), 0, status.message());
}

protocol::ReplyMsg Applier::Apply(uint64_t client_id, std::span<const uint8_t> msg, std::span<const uint8_t> ring) {
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
  if (op != protocol::Op::kPut && op != protocol::Op::kDelete) {
    return Error(request_id, InvalidArgument("unknown op " + std::to_string(req.op)));
  }
  if (req.reserved[0] != 0 || req.reserved[1] != 0 || req.reserved[2] != 0) {
    return Error(request_id, InvalidArgument("request reserved bytes are not zero"));
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
  // are checked must be the bytes that are stored. One buffer per worker
  // thread, grown to the largest record seen.
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
  if (r.version != 0) {
    return Error(request_id, InvalidArgument("staging record carries version " + std::to_string(r.version) +
                                             ", expected 0 (the server assigns versions)"));
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
  if (op == protocol::Op::kDelete) {
    if (!tombstone) return Error(request_id, InvalidArgument("DELETE record lacks the tombstone flag"));
    if (!r.value.empty()) return Error(request_id, InvalidArgument("DELETE record carries a value"));
  } else if (tombstone) {
    return Error(request_id, InvalidArgument("PUT record carries the tombstone flag"));
  }
  return ApplyOnce(client_id, request_id, op, r.key, r.value);
}

protocol::ReplyMsg Applier::ApplyOnce(uint64_t client_id, uint64_t request_id, protocol::Op op,
                                      std::string_view key, std::string_view value) {
  MutexLock lock(mu_);
  protocol::ReplyMsg reply{};
  switch (cache_.Check(client_id, request_id, &reply)) {
    case RequestCache::Verdict::kReplay:
      replays_.fetch_add(1, std::memory_order_relaxed);
      return reply;
    case RequestCache::Verdict::kForgotten:
      // Not remembered, so not applied again: it may be a retry of a
      // request applied long ago.
      return Error(request_id, Aborted("request " + std::to_string(request_id) +
                                       " is too old for the replay check: not applied; a retry's outcome is unknown"));
    case RequestCache::Verdict::kNew:
      break;
  }
  reply = op == protocol::Op::kDelete ? ApplyDelete(request_id, key) : ApplyPut(request_id, key, value);
  cache_.Insert(client_id, reply);
  return reply;
}

protocol::ReplyMsg Applier::ApplyPut(uint64_t request_id, std::string_view key, std::string_view value) {
  if (!table_->PrepareInsert(key, Heap::Clock::now())) {
    // Refused before anything is written.
    return Error(request_id, ResourceExhausted("table full: no slot in the key's neighbourhood, even after moving keys (raise --max_keys)"));
  }
  const uint64_t version = store_->NextVersion();
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

protocol::ReplyMsg Applier::ApplyDelete(uint64_t request_id, std::string_view key) {
  const std::optional<Table::Entry> e = table_->Lookup(key);
  if (!e) return Error(request_id, NotFound("key not found"));
  if (Status s = store_->Delete(key); !s.ok()) {
    LOG(ERROR) << "durable delete failed: " << s;
    return Error(request_id, s.WithContext("durable delete failed"));
  }
  StatusOr<uint64_t> removed = table_->Delete(key, Heap::Clock::now());
  if (!removed.ok()) return Error(request_id, removed.status());  // not reached: the key was found above
  deletes_.fetch_add(1, std::memory_order_relaxed);
  return MakeReply(request_id, StatusCode::kOk, *removed, "");
}

Applier::Snapshot Applier::snapshot() const {
  Snapshot s;
  s.puts = puts_.load(std::memory_order_relaxed);
  s.deletes = deletes_.load(std::memory_order_relaxed);
  s.replays = replays_.load(std::memory_order_relaxed);
  s.request_errors = errors_.load(std::memory_order_relaxed);
  MutexLock lock(mu_);
  s.keys = table_->size();
  s.heap = heap_->stats();
  return s;
}

}  // namespace rkv::server
