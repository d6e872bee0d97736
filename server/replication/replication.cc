#include "server/replication/replication.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace rkv::server {

uint64_t PeerFingerprint(std::string_view server_id) {
  // A seed of its own, so that a fingerprint never equals a shard or table
  // hash of the same bytes.
  constexpr uint64_t kPeerFingerprintSeed = 0x726b762d70656572;  // "rkv-peer"
  return XXH3_64bits_withSeed(server_id.data(), server_id.size(), kPeerFingerprintSeed);
}

}  // namespace rkv::server
