// The server's challenges of protocol version 6's handshake
// (docs/design.md §7.2): the nonce a hello's refusal carries, and the
// check and one-time use of the nonce a proof answers with.
//
// A nonce is [u32 seconds since this instance was made][u32 counter]
// [8-byte tag], all little-endian, the tag the first 8 bytes of
// HMAC-SHA256(secret, "rkv-challenge-v6" || the first 8 bytes), under a
// secret drawn from the kernel's CSPRNG (getrandom) when the instance is
// made. Issuing one stores nothing, so a flood of hellos costs no memory;
// a nonce is valid for protocol::kChallengeLifetimeSeconds by this
// server's own clock, and only from this instance (another server, or
// this one after a restart, has another secret). A nonce is consumed by
// the one proof with a valid MAC that answers it: the set of used nonces
// holds only those (so only authenticated connects, at most kMaxUsed
// within a lifetime), each for one lifetime.
//
// Thread safety: every method may be called from any thread.
// Invariants: every entry of used_ is in used_order_, and the consume
// times in used_order_ never decrease.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_set>
#include <utility>

#include "common/connect_proof.h"
#include "common/mutex.h"
#include "common/status.h"

namespace rkv::server {

class ConnectChallenges {
 public:
  using Clock = std::chrono::steady_clock;
  // The most nonces used within one lifetime (authenticated connects in
  // kChallengeLifetimeSeconds); a proof beyond is refused UNAVAILABLE.
  static constexpr size_t kMaxUsed = size_t{1} << 16;
  static constexpr size_t kSecretBytes = 32;
  using Secret = std::array<uint8_t, kSecretBytes>;

  // With a secret from getrandom; INTERNAL with the errno when it fails.
  static StatusOr<std::unique_ptr<ConnectChallenges>> Create();
  // With `secret` and the clock `now` (tests turn it forward).
  ConnectChallenges(const Secret& secret, std::function<Clock::time_point()> now);

  ConnectChallenges(const ConnectChallenges&) = delete;
  ConnectChallenges& operator=(const ConnectChallenges&) = delete;

  // A new nonce (never all zero: the counter starts at 1).
  protocol::Nonce Issue() EXCLUDES(mu_);

  // Whether `nonce` (kNonceBytes) is one of this instance's, issued at most
  // kChallengeLifetimeSeconds ago. UNAUTHENTICATED otherwise, saying which.
  Status Check(const uint8_t* nonce) const;

  // Marks a checked nonce used. UNAUTHENTICATED when it was used before
  // (a replayed proof); UNAVAILABLE when kMaxUsed nonces are in use.
  Status Consume(const uint8_t* nonce) EXCLUDES(mu_);

  // Nonces in the used set now.
  size_t used() const EXCLUDES(mu_);

 private:
  uint32_t SecondsNow() const;
  uint64_t Tag(uint64_t head) const;
  void ForgetExpired(uint32_t now_s) REQUIRES(mu_);

  const Secret secret_;
  const std::function<Clock::time_point()> now_;
  const Clock::time_point start_;

  mutable Mutex mu_;
  uint32_t counter_ GUARDED_BY(mu_) = 0;
  // The first 8 bytes of each used nonce, and (consume second, those
  // bytes) in the order used.
  std::unordered_set<uint64_t> used_ GUARDED_BY(mu_);
  std::deque<std::pair<uint32_t, uint64_t>> used_order_ GUARDED_BY(mu_);
};

}  // namespace rkv::server
