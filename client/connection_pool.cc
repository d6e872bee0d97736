#include "client/connection_pool.h"

#include <glog/logging.h>

#include <utility>

namespace rkv::client {

ConnectionPool::ConnectionPool(transport::Transport* transport, std::string address, uint64_t map_epoch, int size,
                               LocationCache* cache, uint32_t cache_server)
    : transport_(transport),
      kind_(transport->kind()),
      address_(std::move(address)),
      map_epoch_(map_epoch),
      cache_(cache),
      cache_server_(cache_server) {
  for (int i = 0; i < size; ++i) slots_.push_back(std::make_unique<Slot>());
}

ConnectionPool::Slot& ConnectionPool::AcquireAny(size_t start) {
  for (size_t i = 1; i < slots_.size(); ++i) {
    Slot& s = *slots_[(start + i) % slots_.size()];
    if (s.mu.TryLock()) return s;
  }
  Slot& s = *slots_[start % slots_.size()];
  s.mu.Lock();
  return s;
}

ConnectionPool::Slot& ConnectionPool::AcquireSlot(size_t i) {
  Slot& s = *slots_[i];
  s.mu.Lock();
  return s;
}

Status ConnectionPool::Reconnect(Slot& slot, const protocol::ClientConnectParams& request, Deadline deadline) {
  slot.conn.reset();
  RKV_ASSIGN_OR_RETURN(slot.conn, ServerConnection::Open(*transport_, address_, request, deadline));
  if (cache_ != nullptr) slot.conn->UseLocationCache(cache_, cache_server_);
  VLOG(1) << "rkv: connected to " << address_ << " epoch " << slot.conn->accept().epoch << " ("
          << transport::KindName(transport_->kind()) << ")";
  return Status::Ok();
}

}  // namespace rkv::client
