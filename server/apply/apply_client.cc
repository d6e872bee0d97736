// The Applier's first job (server/apply/apply.h, "Apply" and "Replays"): a
// client's PUT or DELETE, applied once. The replay cache answers a request
// seen before; writes_gate_ and the key's stripe order the writes; the
// route and the lease are checked before anything is written and again just
// before the publish, whose refusals are typed (Reason::kNoLease,
// Reason::kOutcomeUnknown, with the map version). Forwarding to the
// backups is apply_replicate.cc; the local write and publish, apply.cc.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include <glog/logging.h>

#include "common/hash.h"
#include "server/apply/apply.h"

namespace rkv::server {

protocol::ReplyMsg Applier::Apply(uint64_t client_id, std::span<const uint8_t> msg, std::span<const uint8_t> ring) {
  Request req;
  if (std::optional<protocol::ReplyMsg> refused = Validate(msg, ring, /*from_peer=*/false, &req)) return *refused;
  bool remember = true;
  return ApplyOnce(client_id, req, &remember);
}

void Applier::ClientConnected(uint64_t client_id) {
  MutexLock lock(cache_mu_);
  cache_.Pin(client_id);
}

void Applier::ClientDisconnected(uint64_t client_id) {
  MutexLock lock(cache_mu_);
  cache_.Unpin(client_id);
}

size_t Applier::KeyStripe(std::string_view key) {
  // The shard hash is as good as any here: stripes only need to spread
  // keys, and writes of one shard spread over all of them.
  return static_cast<size_t>(ShardHash(key) % kKeyStripes);
}

protocol::ReplyMsg Applier::ApplyOnce(uint64_t client_id, const Request& req, bool* remember) {
  const std::pair<uint64_t, uint64_t> name{client_id, req.request_id};
  if (req.resent) resent_.fetch_add(1, std::memory_order_relaxed);
  {
    MutexLock lock(cache_mu_);
    while (true) {
      if (std::optional<protocol::ReplyMsg> cached = CachedReply(client_id, req)) return *cached;
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

std::optional<protocol::ReplyMsg> Applier::CachedReply(uint64_t client_id, const Request& req) {
  protocol::ReplyMsg reply{};
  switch (cache_.Check(client_id, req.request_id, req.resent, &reply)) {
    case RequestCache::Verdict::kReplay:
      replays_.fetch_add(1, std::memory_order_relaxed);
      return reply;
    case RequestCache::Verdict::kForgotten:
      // Not remembered, so not applied again: it may be a retry of a
      // request applied long ago, or one applied under an entry of this
      // client that the cache's client bound forgot.
      return Error(req.request_id, Status(StatusCode::kAborted,
                                          "request " + std::to_string(req.request_id) +
                                              " is too old for the replay check: not applied; a retry's "
                                              "outcome is unknown",
                                          Reason::kOutcomeUnknown));
    case RequestCache::Verdict::kNew:
      break;
  }
  return std::nullopt;
}

protocol::ReplyMsg Applier::ApplyWrite(const Request& req, bool* remember) {
  {
    // A snapshot waiting for the gate holds the turnstile: this write
    // enters after it.
    MutexLock turnstile(gate_turnstile_);
  }
  ReaderLock gate(writes_gate_);
  MutexLock key_lock(key_stripes_[KeyStripe(req.key)]);
  Staged staged;
  if (std::optional<protocol::ReplyMsg> done = Stage(req, remember, &staged)) return *done;
  return FinishWrite(req, staged, Replicate(req, staged), remember);
}

std::optional<protocol::ReplyMsg> Applier::Stage(const Request& req, bool* remember, Staged* staged) {
  return req.op == protocol::Op::kDelete ? StageDelete(req, remember, staged) : StagePut(req, remember, staged);
}

std::optional<protocol::ReplyMsg> Applier::CheckCondition(const Request& req) {
  const protocol::Condition condition = req.condition;
  const uint64_t expected_version = req.expected_version;
  const uint64_t request_id = req.request_id;
  if (condition == protocol::Condition::kNone) return std::nullopt;
  // An expired record reads as absent (docs/design.md §5.11) by this
  // server's clock, but to its reclaim.
  const std::optional<Table::Entry> e = LiveEntry(req.key, /*with_expired=*/req.reclaim);
  const uint64_t current = e ? e->version : 0;
  if (condition == protocol::Condition::kAbsent && !e) return std::nullopt;
  if (condition == protocol::Condition::kVersionIs && current == expected_version) return std::nullopt;
  conditions_failed_.fetch_add(1, std::memory_order_relaxed);
  std::string message = condition == protocol::Condition::kAbsent
                            ? "the key exists (version " + std::to_string(current) + "): not written"
                        : e ? "the key's version is " + std::to_string(current) + ", not " +
                                  std::to_string(expected_version) + ": not written"
                            : "the key does not exist (version " + std::to_string(expected_version) +
                                  " expected): not written";
  return MakeReply(request_id, StatusCode::kFailedPrecondition, current, message, Reason::kConditionFailed, 0);
}

std::optional<protocol::ReplyMsg> Applier::StagePut(const Request& req, bool* remember, Staged* staged) {
  const uint64_t request_id = req.request_id;
  const std::string_view key = req.key;
  const std::string_view value = req.value;
  std::optional<WriteRoute> route;
  if (auto refused = RouteClientWrite(request_id, key, &route, remember)) return *refused;
  MutexLock lock(table_mu_);
  // The condition is read from the table under the key's stripe, which no
  // other client write of the key passes until this one ends: what it
  // found holds until the publish. A refusal reads the key like a GET,
  // so a primary answers it only under a valid lease (as a DELETE's
  // NOT_FOUND).
  if (std::optional<protocol::ReplyMsg> failed = CheckCondition(req)) {
    if (route) {
      if (std::optional<protocol::ReplyMsg> refused = RefuseWithoutLease(request_id, key, *route, remember)) {
        return *refused;
      }
    }
    return *failed;
  }
  // Refused before anything is written.
  if (Status room = PrepareSlot(key); !room.ok()) return Error(request_id, room);
  const uint64_t version = ReserveVersion();
  if (version == 0) {
    // Every version is taken (a replica arrived at the top of the
    // space): refused before anything is written.
    *remember = false;
    return Error(request_id, ResourceExhausted("no version left above " +
                                               std::to_string(store_->version_high_water()) +
                                               ": the key space's versions are exhausted"));
  }
  if (!route) return InstallPut(request_id, key, value, version, req.expires_at_ms);
  if (route->backups.empty()) {
    if (std::optional<protocol::ReplyMsg> refused = RefuseWithoutLease(request_id, key, *route, remember)) {
      return *refused;
    }
    return InstallPut(request_id, key, value, version, req.expires_at_ms);
  }
  // To be forwarded (FinishWrite then publishes it). table_mu_ is let go
  // while the backups are waited for: `version` is reserved (no other
  // write takes it) and the key's stripe is held (no other client write
  // of the key passes this one); writes of other keys may publish
  // meanwhile, with versions above or below this one.
  staged->route = std::move(route);
  staged->version = version;
  return std::nullopt;
}

std::optional<protocol::ReplyMsg> Applier::StageDelete(const Request& req, bool* remember, Staged* staged) {
  const uint64_t request_id = req.request_id;
  const std::string_view key = req.key;
  std::optional<WriteRoute> route;
  if (auto refused = RouteClientWrite(request_id, key, &route, remember)) return *refused;
  MutexLock lock(table_mu_);
  // A version condition (Validate allows no other on a DELETE) is checked
  // as a PUT's is, under the key's stripe, and refused under a valid
  // lease only.
  if (std::optional<protocol::ReplyMsg> failed = CheckCondition(req)) {
    if (route) {
      if (std::optional<protocol::ReplyMsg> refused = RefuseWithoutLease(request_id, key, *route, remember)) {
        return *refused;
      }
    }
    return *failed;
  }
  // A client's DELETE finds an expired record absent (NOT_FOUND, the
  // record left to its reclaim); the reclaim removes it.
  const std::optional<Table::Entry> e = LiveEntry(key, /*with_expired=*/req.reclaim);
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
  // To be forwarded with the version it deletes, which no other client
  // write of the key can change meanwhile (the key's stripe).
  staged->route = std::move(route);
  staged->version = e->version;
  return std::nullopt;
}

protocol::ReplyMsg Applier::FinishWrite(const Request& req, const Staged& staged, const Status& replicated,
                                        bool* remember) {
  const uint64_t request_id = req.request_id;
  if (!replicated.ok()) {
    *remember = false;
    return Error(request_id, replicated);
  }
  // A forward that outlasted the lease waits for the next grant (without
  // table_mu_) rather than end "outcome unknown" below.
  (void)replication_.policy->AwaitLease(kLeaseRenewalWait, kLeaseMargin);
  MutexLock lock(table_mu_);
  // The backups may hold it now; this server publishes and acknowledges it
  // only under a valid lease.
  if (std::optional<protocol::ReplyMsg> refused = RefuseWithoutLease(request_id, req.key, *staged.route, remember)) {
    return *refused;
  }
  if (req.op == protocol::Op::kDelete) return DeleteLocal(request_id, req.key);
  // Exactly the version the backups hold. A replica installed here
  // meanwhile (of another shard), or a client write of another key that
  // reserved a later version, may have raised the high-water mark; Put
  // keeps the larger one. The slot PrepareInsert found may have been taken
  // meanwhile by a write of another key: then Upsert refuses and the store
  // write is undone (InstallPut).
  return InstallPut(request_id, req.key, req.value, staged.version, req.expires_at_ms);
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
  // or cut off), or with less than kLeaseMargin of it left (so that a write
  // let through does not find it expired at its final check), refuses at
  // once, before anything is written or forwarded,
  // with Reason::kNoLease: the client then knows that nothing was applied
  // and may resend (docs/design.md §5.6) within its deadline, instead of
  // getting "outcome unknown" from the check before the publish
  // (RefuseWithoutLease).
  if (const Status lease = replication_.policy->CheckLeaseWithMargin(kLeaseMargin); !lease.ok()) {
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
  // route did not have (one that may lack the write). A server added as
  // syncing is no such backup: its catch-up cut on this server
  // (ListShards) takes writes_gate_ exclusively, so it waits for this
  // write, which holds it shared until it replies, and lists it if it is
  // published. Refusing here would fail a client write for every shard
  // that re-replication starts (docs/design.md §5.7, step 5).
  StatusOr<WriteRoute> now = replication_.policy->RouteWrite(key);
  Status changed = now.status();
  if (changed.ok()) {
    for (const ReplicaPeer& b : now->backups) {
      if (b.syncing) continue;
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

}  // namespace rkv::server
