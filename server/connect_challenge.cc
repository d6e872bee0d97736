#include "server/connect_challenge.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

namespace rkv::server {
namespace {

constexpr std::string_view kTagDomain = "rkv-challenge-v6";
constexpr size_t kHeadBytes = 8;  // seconds + counter
constexpr size_t kTagBytes = protocol::kNonceBytes - kHeadBytes;
static_assert(kTagBytes == 8);

uint64_t Load64(const uint8_t* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void Store64(uint8_t* p, uint64_t v) {
  for (size_t i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

StatusOr<std::unique_ptr<ConnectChallenges>> ConnectChallenges::Create() {
  Secret secret{};
  size_t got = 0;
  while (got < secret.size()) {
    const ssize_t n = ::getrandom(secret.data() + got, secret.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PosixError("getrandom (the connect challenges' secret)", errno);
    got += static_cast<size_t>(n);
  }
  return std::make_unique<ConnectChallenges>(secret, [] { return Clock::now(); });
}

ConnectChallenges::ConnectChallenges(const Secret& secret, std::function<Clock::time_point()> now)
    : secret_(secret), now_(std::move(now)), start_(now_()) {}

uint32_t ConnectChallenges::SecondsNow() const {
  const auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(now_() - start_).count();
  return elapsed <= 0 ? 0 : static_cast<uint32_t>(elapsed);
}

uint64_t ConnectChallenges::Tag(uint64_t head) const {
  uint8_t message[kTagDomain.size() + kHeadBytes];
  std::memcpy(message, kTagDomain.data(), kTagDomain.size());
  Store64(message + kTagDomain.size(), head);
  const Sha256Digest mac = HmacSha256(secret_, message);
  return Load64(mac.data());
}

protocol::Nonce ConnectChallenges::Issue() {
  uint32_t counter = 0;
  {
    MutexLock lock(mu_);
    if (++counter_ == 0) ++counter_;  // never 0: a nonce is never all zero
    counter = counter_;
  }
  const uint64_t head = uint64_t{SecondsNow()} | (uint64_t{counter} << 32);
  protocol::Nonce nonce{};
  Store64(nonce.data(), head);
  Store64(nonce.data() + kHeadBytes, Tag(head));
  return nonce;
}

Status ConnectChallenges::Check(const uint8_t* nonce) const {
  const uint64_t head = Load64(nonce);
  const uint64_t tag = Tag(head);
  uint8_t expected[kTagBytes];
  Store64(expected, tag);
  if (!DigestEqual(expected, nonce + kHeadBytes, kTagBytes)) {
    return Unauthenticated("the challenge answered is not this server's (another server's, or from before a restart)");
  }
  const uint32_t issued = static_cast<uint32_t>(head);
  const uint32_t now = SecondsNow();
  if (issued > now || now - issued > protocol::kChallengeLifetimeSeconds) {
    return Unauthenticated("the challenge answered has expired (valid " +
                           std::to_string(protocol::kChallengeLifetimeSeconds) + " s)");
  }
  return Status::Ok();
}

void ConnectChallenges::ForgetExpired(uint32_t now_s) {
  // A nonce consumed at second c was issued at c - lifetime or later, so
  // after c + lifetime it fails Check whatever the set says.
  while (!used_order_.empty() && now_s - used_order_.front().first > protocol::kChallengeLifetimeSeconds) {
    used_.erase(used_order_.front().second);
    used_order_.pop_front();
  }
}

Status ConnectChallenges::Consume(const uint8_t* nonce) {
  const uint64_t head = Load64(nonce);
  const uint32_t now = SecondsNow();
  MutexLock lock(mu_);
  ForgetExpired(now);
  if (used_.count(head) != 0) return Unauthenticated("the challenge answered was used before (a replayed proof)");
  if (used_.size() >= kMaxUsed) {
    return Unavailable("too many connections set up in the last " +
                       std::to_string(protocol::kChallengeLifetimeSeconds) + " s; retry");
  }
  used_.insert(head);
  used_order_.emplace_back(now, head);
  return Status::Ok();
}

size_t ConnectChallenges::used() const {
  MutexLock lock(mu_);
  return used_.size();
}

}  // namespace rkv::server
