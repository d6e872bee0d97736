// ConnectionPool: a client's connections to one server incarnation (one
// address, one epoch of the routing table), and SlotLease, a call's hold on
// one of them.
//
// A pool has a fixed number of slots; each slot holds at most one
// ServerConnection, opened on first use and reopened once it broke. A call
// leases a slot (locking it) for its whole run on the server, so a
// connection serves one call at a time, and up to size() calls run on the
// server at once.
//
// Thread safety: ConnectionPool is thread-safe. A SlotLease belongs to the
// thread that made it.
//
// Invariants: a slot's connection is touched only under the slot's mutex,
// which a SlotLease holds from construction to destruction.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "client/server_connection.h"
#include "common/mutex.h"
#include "common/protocol.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport/transport.h"

namespace rkv::client {

class ConnectionPool {
 public:
  // SlotLease's `slot` when any slot will do.
  static constexpr size_t kAnySlot = std::numeric_limits<size_t>::max();

  // `size` slots (>= 1) for connections to `address` over `transport`
  // (which must outlive the pool); `map_epoch` is the epoch the routing
  // table listed for the server when the pool was made.
  // `cache` (may be null; must outlive the pool) is the client's location
  // cache, in which `cache_server` names this server: every connection
  // the pool opens uses it.
  ConnectionPool(transport::Transport* transport, std::string address, uint64_t map_epoch, int size,
                 LocationCache* cache = nullptr, uint32_t cache_server = 0);

  transport::Transport* transport() const { return transport_; }
  transport::Kind kind() const { return kind_; }
  const std::string& address() const { return address_; }
  uint64_t map_epoch() const { return map_epoch_; }
  size_t size() const { return slots_.size(); }

  // Counts one attempt of a call on this server (ClientTestPeer::AttemptsOn).
  // Relaxed: a statistic, ordered with nothing.
  void NoteAttempt() { attempts_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t attempts() const { return attempts_.load(std::memory_order_relaxed); }

 private:
  friend class SlotLease;

  struct Slot {
    Mutex mu;
    std::unique_ptr<ServerConnection> conn GUARDED_BY(mu);
  };

  // The acquiring functions return with the slot's mutex held, for the
  // SlotLease to release: the analysis cannot follow a lock out of the
  // function that took it, and the lease asserts it where it uses the slot.

  // A free slot if any (the round-robin one, the common case, inline),
  // else waits for the round-robin one.
  Slot& Acquire() NO_THREAD_SAFETY_ANALYSIS {
    const size_t start = next_slot_.fetch_add(1, std::memory_order_relaxed);
    if (Slot& s = *slots_[start % slots_.size()]; s.mu.TryLock()) [[likely]] return s;
    return AcquireAny(start);
  }
  // Acquire's other cases: another free slot, else a wait for the
  // round-robin one.
  [[gnu::noinline]] Slot& AcquireAny(size_t start) NO_THREAD_SAFETY_ANALYSIS;
  // Slot `i` (< size()), waiting for it.
  Slot& AcquireSlot(size_t i) NO_THREAD_SAFETY_ANALYSIS;

  // Replaces the slot's connection (missing or broken) with a new one: one
  // attempt, whose failure is returned as ServerConnection::Open reports it.
  [[gnu::noinline]] Status Reconnect(Slot& slot, const protocol::ClientConnectParams& request, Deadline deadline)
      REQUIRES(slot.mu);

  transport::Transport* const transport_;
  const transport::Kind kind_;  // transport_->kind(), read without a virtual call
  const std::string address_;
  const uint64_t map_epoch_;
  LocationCache* const cache_;
  const uint32_t cache_server_;
  std::vector<std::unique_ptr<Slot>> slots_;  // filled by the constructor only
  std::atomic<size_t> next_slot_{0};  // round-robin start of Acquire
  std::atomic<uint64_t> attempts_{0};  // NoteAttempt
};

// A call's hold on one slot of a pool: locks it on construction, unlocks
// it on destruction.
class SlotLease {
 public:
  // Leases slot `slot` of `pool`, or any (ConnectionPool::Acquire) with
  // kAnySlot. Waits while the slot is in use.
  explicit SlotLease(ConnectionPool& pool, size_t slot = ConnectionPool::kAnySlot)
      : pool_(pool), slot_(slot == ConnectionPool::kAnySlot ? pool.Acquire() : pool.AcquireSlot(slot)) {}
  ~SlotLease() {
    slot_.mu.AssertHeld();
    slot_.mu.Unlock();
  }
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;

  // Makes the slot's connection live: keeps an intact one, else opens a
  // new one (one attempt; its failure as ServerConnection::Open reports
  // it). Sets *fresh when it opened one.
  Status EnsureConnected(const protocol::ClientConnectParams& request, Deadline deadline, bool* fresh) {
    slot_.mu.AssertHeld();
    *fresh = false;
    if (slot_.conn && !slot_.conn->broken()) [[likely]] return Status::Ok();
    Status s = pool_.Reconnect(slot_, request, deadline);
    *fresh = s.ok();
    return s;
  }
  // The slot's connection. Requires a successful EnsureConnected (and no
  // Drop since).
  ServerConnection& conn() {
    slot_.mu.AssertHeld();
    return *slot_.conn;
  }
  // Closes the slot's connection (it reached the wrong incarnation).
  void Drop() {
    slot_.mu.AssertHeld();
    slot_.conn.reset();
  }

 private:
  ConnectionPool& pool_;
  ConnectionPool::Slot& slot_;
};

}  // namespace rkv::client
