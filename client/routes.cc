#include "client/routes.h"

#include <utility>

namespace rkv::client {

Routes::Routes(std::shared_ptr<const RoutingTable> table, uint64_t generation)
    : table_(std::move(table)),
      generation_(generation),
      pools_(new std::atomic<ConnectionPool*>[table_->servers().size()]) {
  for (size_t i = 0; i < table_->servers().size(); ++i) pools_[i].store(nullptr, std::memory_order_relaxed);
}

ConnectionPool* Routes::Attach(size_t index, std::shared_ptr<ConnectionPool> pool) {
  MutexLock lock(mu_);
  if (ConnectionPool* attached = pools_[index].load(std::memory_order_relaxed)) return attached;
  ConnectionPool* p = pool.get();
  owned_.push_back(std::move(pool));
  // Release: a call that loads the pointer (acquire) sees the pool whole.
  pools_[index].store(p, std::memory_order_release);
  return p;
}

}  // namespace rkv::client
