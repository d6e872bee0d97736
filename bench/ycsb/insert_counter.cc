#include "bench/ycsb/insert_counter.h"

#include <algorithm>

namespace rkv::bench {

InsertCounter::InsertCounter(uint64_t loaded)
    : next_(std::max<uint64_t>(loaded, 1)), limit_(std::max<uint64_t>(loaded, 1)) {}

void InsertCounter::Acknowledge(uint64_t index) {
  MutexLock lock(mu_);
  uint64_t limit = limit_.load(std::memory_order_relaxed);
  if (index < limit) return;
  pending_.insert(index);
  while (!pending_.empty() && *pending_.begin() == limit) {
    pending_.erase(pending_.begin());
    ++limit;
  }
  limit_.store(limit, std::memory_order_release);
}

}  // namespace rkv::bench
