// The write path of Client (client_impl.h): PUT and DELETE, one request id
// per call kept by every resend, the rules of where a sent request may be
// resent (WriteAttempt, CheckResend), and MultiPut and MultiDelete as
// batches per server, grouped again when a failover spreads their keys.
#include <map>
#include <utility>
#include <vector>

#include "client/client_impl.h"
#include "client/refusal.h"

namespace rkv {

using client::Clock;
using client::ConnectionPool;
using client::Deadline;
using client::ServerConnection;
using std::to_string;

namespace {

// A PutCondition as the request carries it; INVALID_ARGUMENT for one no
// key can meet as asked.
Status SetCondition(const PutCondition& condition, protocol::Condition* wire, uint64_t* expected_version) {
  switch (condition.kind) {
    case PutCondition::Kind::kNone:
      return Status::Ok();
    case PutCondition::Kind::kAbsent:
      *wire = protocol::Condition::kAbsent;
      return Status::Ok();
    case PutCondition::Kind::kVersionIs:
      if (condition.version == 0) {
        return InvalidArgument(
            "PutCondition::VersionIs(0): versions start at 1 (PutCondition::Absent() for a new key)");
      }
      *wire = protocol::Condition::kVersionIs;
      *expected_version = condition.version;
      return Status::Ok();
  }
  return InvalidArgument("PutCondition of unknown kind " + to_string(static_cast<int>(condition.kind)));
}

}  // namespace

Status Client::Impl::WriteAttempt(ServerConnection& conn, PendingWrite& w, std::string_view key, uint64_t key_hash,
                                  std::string_view value, Deadline deadline, client::WriteResult* result) {
  const uint64_t epoch = conn.accept().epoch;
  RKV_RETURN_IF_ERROR(CheckResend(conn, w));
  if (w.request_id == 0) w.request_id = next_request_id_.fetch_add(1, std::memory_order_relaxed);
  bool posted = false;
  // Sent before means to this incarnation (CheckResend).
  auto r = conn.Write(client::WriteOp{w.op, key, value, w.request_id, /*resent=*/w.sent, w.condition,
                                      w.expected_version, w.expires_at_ms},
                      deadline, &posted, std::span<const uint64_t>(&key_hash, 1));
  if (posted && !w.sent) {
    w.sent = true;
    w.sent_epoch = epoch;
    w.sent_address = conn.address();
  }
  if (!r.ok()) return r.status();
  uint64_t named_version = 0;
  if (cluster() && MayResend(r->status, &named_version)) [[unlikely]] {
    w.sent = false;  // applied nowhere (see above)
    return r->status;  // WithServer refetches and retries
  }
  *result = std::move(*r);
  return Status::Ok();
}

Status Client::Impl::WriteFailed(const PendingWrite& w, Status s) {
  if (!w.sent || w.outcome_reported) return s;
  return Status(s.code(), s.message() + " (the request was sent and its reply lost: outcome unknown)",
                Reason::kOutcomeUnknown, s.map_version());
}

Status Client::Impl::CheckResend(const ServerConnection& conn, PendingWrite& w) {
  if (w.sent && conn.address() != w.sent_address) [[unlikely]] {
    w.outcome_reported = true;
    return Status(StatusCode::kUnavailable,
                  std::string(w.op == protocol::Op::kDelete ? "DELETE" : "PUT") + " outcome unknown: its reply from " +
                      w.sent_address + " was lost and its shard is now served elsewhere; not resent",
                  Reason::kOutcomeUnknown);
  }
  if (w.sent && conn.accept().epoch != w.sent_epoch) [[unlikely]] {
    w.outcome_reported = true;
    return Status(StatusCode::kUnavailable,
                  std::string(w.op == protocol::Op::kDelete ? "DELETE" : "PUT") +
                      " outcome unknown: its reply was lost and the server restarted (epoch " +
                      to_string(w.sent_epoch) + " -> " + to_string(conn.accept().epoch) +
                      "), so it cannot tell whether it applied the request; not resent",
                  Reason::kOutcomeUnknown);
  }
  return Status::Ok();
}

Status Client::Impl::BatchAttempt(ServerConnection& conn, std::span<BatchItem* const> items, Deadline deadline) {
  const uint64_t epoch = conn.accept().epoch;
  std::vector<client::WriteOp> ops;
  std::vector<uint64_t> hashes;
  std::vector<BatchItem*> sent_items;
  ops.reserve(items.size());
  hashes.reserve(items.size());
  sent_items.reserve(items.size());
  for (BatchItem* item : items) {
    if (item->done) continue;
    if (item->key.size() > conn.accept().max_key_bytes || item->value.size() > conn.accept().max_value_bytes) {
      item->done = true;
      item->error = InvalidArgument("key of " + to_string(item->key.size()) + " bytes or value of " +
                                    to_string(item->value.size()) + " bytes over the server's limits (" +
                                    to_string(conn.accept().max_key_bytes) + ", " +
                                    to_string(conn.accept().max_value_bytes) + ")");
      continue;
    }
    if (Status resend = CheckResend(conn, item->write); !resend.ok()) {
      item->done = true;
      item->error = std::move(resend);
      continue;
    }
    PendingWrite& w = item->write;
    if (w.request_id == 0) w.request_id = next_request_id_.fetch_add(1, std::memory_order_relaxed);
    ops.push_back(client::WriteOp{w.op, item->key, item->value, w.request_id, /*resent=*/w.sent, w.condition,
                                  w.expected_version, w.expires_at_ms});
    hashes.push_back(item->key_hash);
    sent_items.push_back(item);
  }
  if (ops.empty()) return Status::Ok();
  std::vector<client::WriteOutcome> outcomes(ops.size());
  const Status s = conn.WriteBatch(ops, outcomes, deadline, hashes);
  Status refused;
  for (size_t j = 0; j < ops.size(); ++j) {
    BatchItem& item = *sent_items[j];
    client::WriteOutcome& o = outcomes[j];
    if (o.sent && !item.write.sent) {
      item.write.sent = true;
      item.write.sent_epoch = epoch;
      item.write.sent_address = conn.address();
    }
    if (!o.replied) continue;
    uint64_t named_version = 0;
    if (cluster() && MayResend(o.result.status, &named_version)) [[unlikely]] {
      item.write.sent = false;  // applied nowhere (WriteAttempt)
      if (refused.ok()) refused = o.result.status;
      continue;
    }
    item.done = true;
    item.result = std::move(o.result);
  }
  if (!s.ok()) return s;
  return refused;
}

void Client::Impl::RunBatches(std::span<BatchItem> items, Deadline deadline) {
  std::vector<std::string_view> keys;
  std::vector<BatchItem*> group;
  // Each key hashed once: its route, and its name in the location cache.
  for (BatchItem& item : items) item.key_hash = ShardHash(item.key);
  bool regroup = true;
  while (regroup) {
    regroup = false;
    const auto routes = Routing();
    std::map<size_t, std::vector<size_t>> groups;  // owner -> item positions
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].done) groups[routes->table().OwnerIndexOfHash(items[i].key_hash)].push_back(i);
    }
    for (const auto& [owner, positions] : groups) {
      keys.clear();
      group.clear();
      for (size_t p : positions) {
        keys.push_back(items[p].key);
        group.push_back(&items[p]);
      }
      const Status s = WithServer(
          routes, owner, deadline, [&](ServerConnection& conn) { return BatchAttempt(conn, group, deadline); },
          ConnectionPool::kAnySlot, keys);
      if (client::KeysMoved(s) && Clock::now() < deadline) {
        regroup = true;  // its items stay to be grouped by the newest map
        continue;
      }
      for (BatchItem* item : group) {
        if (item->done) continue;
        item->done = true;
        item->error = WriteFailed(item->write, s.ok() ? Internal("write left unanswered") : s);
      }
    }
  }
}

StatusOr<uint64_t> Client::Put(std::string_view key, std::string_view value,
                               const CallOptions& call) {
  return Put(key, value, PutCondition{}, call);
}

StatusOr<uint64_t> Client::Put(std::string_view key, std::string_view value, const PutCondition& condition,
                               const CallOptions& call) {
  return Put(key, value, PutOptions{condition, kNoExpiry}, call);
}

StatusOr<uint64_t> Client::Put(std::string_view key, std::string_view value, const PutOptions& options,
                               const CallOptions& call) {
  const PutCondition& condition = options.condition;
  if (options.expires_at_unix_ms < 0) {
    return InvalidArgument("PutOptions::expires_at_unix_ms " + to_string(options.expires_at_unix_ms) +
                           " is negative (kNoExpiry, 0, for none)");
  }
  auto routes = impl_->Routing();
  RKV_RETURN_IF_ERROR(impl_->CheckKey(routes->table(), key));
  RKV_RETURN_IF_ERROR(impl_->CheckValue(routes->table(), value));
  const Deadline deadline = impl_->DeadlineOf(call);
  client::WriteResult result;
  Impl::PendingWrite write;
  write.op = protocol::Op::kPut;
  write.expires_at_ms = options.expires_at_unix_ms;
  RKV_RETURN_IF_ERROR(SetCondition(condition, &write.condition, &write.expected_version));
  const uint64_t key_hash = ShardHash(key);  // routes, and names the key in the location cache
  const Status s = impl_->WithKey(std::move(routes), key, key_hash, deadline, [&](ServerConnection& conn) -> Status {
    // The limits may differ on a restarted server; the check above used the
    // newest connection's (or the map's), this one uses this connection's.
    if (key.size() > conn.accept().max_key_bytes || value.size() > conn.accept().max_value_bytes) {
      return InvalidArgument("key of " + to_string(key.size()) + " bytes or value of " +
                             to_string(value.size()) + " bytes over the server's limits (" +
                             to_string(conn.accept().max_key_bytes) + ", " +
                             to_string(conn.accept().max_value_bytes) + ")");
    }
    return impl_->WriteAttempt(conn, write, key, key_hash, value, deadline, &result);
  });
  if (!s.ok()) return Impl::WriteFailed(write, s);
  if (!result.status.ok()) return result.status;
  return result.version;
}

Status Client::Delete(std::string_view key, const CallOptions& call) { return impl_->Delete(key, 0, call); }

StatusOr<uint64_t> Client::SetExpiry(std::string_view key, int64_t expires_at_unix_ms, const CallOptions& call) {
  if (expires_at_unix_ms < 0) {
    return InvalidArgument("SetExpiry: expiry " + to_string(expires_at_unix_ms) +
                           " is negative (kNoExpiry, 0, for none)");
  }
  // Every attempt shares the call's deadline; a write of the key between
  // the read and the conditional write sends the loop round again.
  const client::Deadline deadline = impl_->DeadlineOf(call);
  CallOptions each;  // always the primary: the version read is the one the condition names
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyNow());
    if (left.count() <= 0) {
      return Status(StatusCode::kDeadlineExceeded, "SetExpiry: the key kept changing until the deadline");
    }
    each.timeout = left;
    RKV_ASSIGN_OR_RETURN(VersionedValue current, GetVersioned(key, each));
    if (expires_at_unix_ms != kNoExpiry && expires_at_unix_ms <= NowUnixMs()) {
      const Status removed = DeleteIfVersion(key, current.version, each);
      if (removed.ok()) return uint64_t{0};
      if (removed.reason() == Reason::kConditionFailed) continue;
      return removed;
    }
    StatusOr<uint64_t> written =
        Put(key, current.value, PutOptions{PutCondition::VersionIs(current.version), expires_at_unix_ms}, each);
    if (written.ok() || written.status().reason() != Reason::kConditionFailed) return written;
  }
}

Status Client::DeleteIfVersion(std::string_view key, uint64_t version, const CallOptions& call) {
  if (version == 0) return InvalidArgument("DeleteIfVersion(0): versions start at 1");
  return impl_->Delete(key, version, call);
}

Status Client::Impl::Delete(std::string_view key, uint64_t if_version, const CallOptions& call) {
  auto routes = Routing();
  RKV_RETURN_IF_ERROR(CheckKey(routes->table(), key));
  const Deadline deadline = DeadlineOf(call);
  client::WriteResult result;
  PendingWrite write;
  write.op = protocol::Op::kDelete;
  if (if_version != 0) {
    write.condition = protocol::Condition::kVersionIs;
    write.expected_version = if_version;
  }
  const uint64_t key_hash = ShardHash(key);
  const Status s = WithKey(std::move(routes), key, key_hash, deadline, [&](ServerConnection& conn) -> Status {
    if (key.size() > conn.accept().max_key_bytes) {
      return InvalidArgument("key of " + to_string(key.size()) + " bytes: over the server's max_key_bytes " +
                             to_string(conn.accept().max_key_bytes));
    }
    return WriteAttempt(conn, write, key, key_hash, {}, deadline, &result);
  });
  if (!s.ok()) return WriteFailed(write, s);
  return result.status;
}

std::vector<StatusOr<uint64_t>> Client::MultiPut(std::span<const KeyValueView> items, const CallOptions& call) {
  const Deadline deadline = impl_->DeadlineOf(call);
  std::vector<Impl::BatchItem> batch(items.size());
  {
    const auto routes = impl_->Routing();
    for (size_t i = 0; i < items.size(); ++i) {
      Impl::BatchItem& b = batch[i];
      b.write.op = protocol::Op::kPut;
      b.key = items[i].key;
      b.value = items[i].value;
      b.error = SetCondition(items[i].condition, &b.write.condition, &b.write.expected_version);
      b.write.expires_at_ms = items[i].expires_at_unix_ms;
      if (b.error.ok() && b.write.expires_at_ms < 0) {
        b.error = InvalidArgument("KeyValueView::expires_at_unix_ms " + to_string(b.write.expires_at_ms) +
                                  " is negative (kNoExpiry, 0, for none)");
      }
      if (b.error.ok()) b.error = impl_->CheckKey(routes->table(), b.key);
      if (b.error.ok()) b.error = impl_->CheckValue(routes->table(), b.value);
      b.done = !b.error.ok();
    }
  }
  impl_->RunBatches(batch, deadline);
  std::vector<StatusOr<uint64_t>> out;
  out.reserve(items.size());
  for (Impl::BatchItem& b : batch) {
    if (!b.error.ok()) {
      out.emplace_back(std::move(b.error));
    } else if (!b.result.status.ok()) {
      out.emplace_back(std::move(b.result.status));
    } else {
      out.emplace_back(b.result.version);
    }
  }
  return out;
}

std::vector<Status> Client::MultiDelete(std::span<const std::string> keys, const CallOptions& call) {
  const Deadline deadline = impl_->DeadlineOf(call);
  std::vector<Impl::BatchItem> batch(keys.size());
  {
    const auto routes = impl_->Routing();
    for (size_t i = 0; i < keys.size(); ++i) {
      Impl::BatchItem& b = batch[i];
      b.write.op = protocol::Op::kDelete;
      b.key = keys[i];
      b.error = impl_->CheckKey(routes->table(), b.key);
      b.done = !b.error.ok();
    }
  }
  impl_->RunBatches(batch, deadline);
  std::vector<Status> out;
  out.reserve(keys.size());
  for (Impl::BatchItem& b : batch) out.push_back(!b.error.ok() ? std::move(b.error) : std::move(b.result.status));
  return out;
}

}  // namespace rkv
