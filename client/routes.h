// Routes: what a call of the client routes by. The routing table in use
// and, for each of its servers, the connection pool of the incarnation the
// table lists, attached on the server's first use.
//
// A call takes the Routes once (one shared_ptr copy) and finds its
// server's pool without a lock. A newer table gets new Routes, which
// attach the client's pools again as their servers are used (the client
// keeps one pool per server incarnation, so an unchanged server keeps its
// connections).
//
// Thread safety: thread-safe; the table is immutable.
//
// Invariants: pool(i), once not null, stays the same pool for the life of
// the Routes, and owned_ keeps it alive.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "client/cluster_map.h"
#include "client/connection_pool.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace rkv::client {

class Routes {
 public:
  // Routes for `table`, the `generation`-th table of its MapHolder
  // (MapHolder::generation), with no pool attached yet.
  Routes(std::shared_ptr<const RoutingTable> table, uint64_t generation);
  Routes(const Routes&) = delete;
  Routes& operator=(const Routes&) = delete;

  const RoutingTable& table() const { return *table_; }
  uint64_t generation() const { return generation_; }

  // The pool attached for server `index` (< table().servers().size()),
  // or nullptr before Attach.
  ConnectionPool* pool(size_t index) const { return pools_[index].load(std::memory_order_acquire); }
  // Attaches `pool` for server `index` unless one is attached already;
  // returns the one attached.
  ConnectionPool* Attach(size_t index, std::shared_ptr<ConnectionPool> pool) EXCLUDES(mu_);

 private:
  const std::shared_ptr<const RoutingTable> table_;
  const uint64_t generation_;
  // One per server of the table; set once (release) under mu_.
  const std::unique_ptr<std::atomic<ConnectionPool*>[]> pools_;
  Mutex mu_;
  std::vector<std::shared_ptr<ConnectionPool>> owned_ GUARDED_BY(mu_);
};

}  // namespace rkv::client
