#include "common/connect_proof.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/layout.h"

namespace rkv::protocol {
namespace {

template <typename Request>
std::span<const uint8_t> FieldsOf(const Request& r) {
  return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&r), offsetof(Request, mac));
}

template <typename Request>
void Sign(Request& r, const uint8_t* key) {
  const Sha256Digest mac = ProofMac(key, FieldsOf(r));
  static_assert(sizeof(r.mac) <= std::tuple_size_v<Sha256Digest>);
  std::memcpy(r.mac, mac.data(), sizeof(r.mac));
}

template <typename Request>
bool Matches(const Request& r, const uint8_t* key) {
  const Sha256Digest mac = ProofMac(key, FieldsOf(r));
  return DigestEqual(mac.data(), r.mac, sizeof(r.mac));
}

}  // namespace

bool IsHelloNonce(const uint8_t* nonce) {
  return std::all_of(nonce, nonce + kNonceBytes, [](uint8_t b) { return b == 0; });
}

Sha256Digest ProofMac(const uint8_t* key, std::span<const uint8_t> fields) {
  std::string message(kProofDomain);
  message.append(reinterpret_cast<const char*>(fields.data()), fields.size());
  return HmacSha256(std::span<const uint8_t>(key, kTokenDigestBytes),
                    std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(message.data()), message.size()));
}

ClientConnectParams MakeClientParams(uint64_t client_id, std::string_view token) {
  ClientConnectParams p;
  std::memset(&p, 0, sizeof p);
  p.magic = kConnectMagic;
  p.protocol_version = kProtocolVersion;
  p.layout_version = layout::kLayoutVersion;
  p.client_id = client_id;
  const Sha256Digest digest = TokenDigest(token);
  std::memcpy(p.token_digest, digest.data(), digest.size());
  return p;
}

PeerConnectParams MakePeerParams(uint64_t sender_fingerprint, uint64_t sender_epoch, std::string_view token) {
  PeerConnectParams p;
  std::memset(&p, 0, sizeof p);
  p.sender_fingerprint = sender_fingerprint;
  p.sender_epoch = sender_epoch;
  const Sha256Digest digest = TokenDigest(token);
  std::memcpy(p.token_digest, digest.data(), digest.size());
  return p;
}

ConnectRequestData MakeClientRequest(const ClientConnectParams& params, const Nonce* nonce) {
  ConnectRequestData r;
  std::memset(&r, 0, sizeof r);
  r.magic = params.magic;
  r.protocol_version = params.protocol_version;
  r.layout_version = params.layout_version;
  r.client_id = params.client_id;
  if (nonce != nullptr) {
    std::memcpy(r.nonce, nonce->data(), kNonceBytes);
    Sign(r, params.token_digest);
  }
  return r;
}

PeerConnectData MakePeerRequest(const PeerConnectParams& params, const Nonce* nonce) {
  PeerConnectData r;
  std::memset(&r, 0, sizeof r);
  r.magic = kPeerConnectMagic;
  r.protocol_version = kProtocolVersion;
  r.layout_version = layout::kLayoutVersion;
  r.sender_fingerprint = params.sender_fingerprint;
  r.sender_epoch = params.sender_epoch;
  if (nonce != nullptr) {
    std::memcpy(r.nonce, nonce->data(), kNonceBytes);
    Sign(r, params.token_digest);
  }
  return r;
}

bool ClientProofMatches(const ConnectRequestData& request, const uint8_t* key) { return Matches(request, key); }
bool PeerProofMatches(const PeerConnectData& request, const uint8_t* key) { return Matches(request, key); }

bool ChallengeOf(bool unauthenticated, std::span<const uint8_t> detail, Nonce* nonce) {
  if (!unauthenticated || detail.size() != kNonceBytes || IsHelloNonce(detail.data())) return false;
  std::memcpy(nonce->data(), detail.data(), kNonceBytes);
  return true;
}

}  // namespace rkv::protocol
