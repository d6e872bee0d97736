#include "server/replication.h"

#include <chrono>
#include <thread>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace rkv::server {

uint64_t PeerFingerprint(std::string_view server_id) {
  // A seed of its own, so that a fingerprint never equals a shard or table
  // hash of the same bytes.
  constexpr uint64_t kPeerFingerprintSeed = 0x726b762d70656572;  // "rkv-peer"
  return XXH3_64bits_withSeed(server_id.data(), server_id.size(), kPeerFingerprintSeed);
}

Status ReplicationPolicy::AwaitLease(std::chrono::milliseconds max_wait) {
  const auto deadline = std::chrono::steady_clock::now() + max_wait;
  Status lease = CheckLease();
  while (!lease.ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    lease = CheckLease();
  }
  return lease;
}

}  // namespace rkv::server
