// The server's reclaimer of expired records (docs/design.md §5.11): while
// the table holds records with an expiry, one slice of the index at a time,
// each expired record removed through the Applier on its key's primary.
#include <chrono>
#include <cstdint>

#include <glog/logging.h>

#include "common/clock.h"
#include "server/server.h"
#include "server/store/store.h"

namespace rkv::server {

void Server::ExpiryLoop() {
  // A slice is 1,024 buckets (8,192 slots): tens of microseconds under
  // table_mu_. 2 ms between slices bounds the reclaimer to a small share
  // of one CPU on a large table; a full pass ends with a second's rest.
  constexpr uint64_t kSliceBuckets = 1024;
  constexpr std::chrono::milliseconds kBetweenSlices{2};
  constexpr std::chrono::milliseconds kBetweenPasses{1000};
  uint64_t cursor = 0;
  std::chrono::milliseconds pause = kBetweenPasses;
  uint64_t reclaimed_logged = 0;
  for (;;) {
    {
      MutexLock lock(expiry_mu_);
      if (expiry_cv_.WaitFor(expiry_mu_, pause, [&] { return stopping_.load(std::memory_order_acquire); })) return;
    }
    if (applier_->expiring_records() == 0) {
      cursor = 0;
      pause = kBetweenPasses;
      continue;
    }
    for (const Applier::ExpiredKey& e : applier_->ExpiredKeys(&cursor, kSliceBuckets, UnixNowMs())) {
      if (stopping_.load(std::memory_order_acquire)) return;
      // Refusals are expected: a backup's records (the primary reclaims
      // them), a key written meanwhile, no lease for a moment.
      const Status s = applier_->ReclaimExpired(e.key, e.version);
      VLOG_IF(1, !s.ok()) << "expired key '" << PrintableKey(e.key) << "' not reclaimed here: " << s;
    }
    pause = cursor == 0 ? kBetweenPasses : kBetweenSlices;
    if (cursor == 0) {
      const uint64_t reclaimed = applier_->snapshot().expired_reclaimed;
      if (reclaimed != reclaimed_logged) {
        reclaimed_logged = reclaimed;
        VLOG(1) << reclaimed_logged << " expired records reclaimed since start";
      }
    }
  }
}

}  // namespace rkv::server
