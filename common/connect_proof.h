// The connect proof of protocol version 6 (docs/design.md §7.2): the
// private data a client or a peer server sends, as a hello (asking for a
// challenge) or as a proof (a challenge's nonce and a MAC keyed by its
// TokenDigest), and the MAC both sides compute.
//
// The MAC is HMAC-SHA256(key = TokenDigest(token),
//                        kProofDomain || every byte of the request before
//                        its mac field), truncated to the mac field.
// Magic, versions, role, identity and nonce are all covered, so no field
// of a proof can be changed, and the nonce binds it to one challenge of
// one server.
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/protocol.h"
#include "common/token.h"

namespace rkv::protocol {

using Nonce = std::array<uint8_t, kNonceBytes>;

// The domain separator the MAC starts with: a proof's MAC can be no other
// HMAC made with the same key.
inline constexpr std::string_view kProofDomain = "rkv-connect-proof-v6";

// Whether `nonce` is all zero: the request is a hello.
bool IsHelloNonce(const uint8_t* nonce);

// HMAC-SHA256 keyed by `key` (a TokenDigest) over kProofDomain and
// `fields`, the request's bytes before its MAC.
Sha256Digest ProofMac(const uint8_t* key, std::span<const uint8_t> fields);

// The parameters of the client `client_id` holding `token` (this
// protocol and layout version), and of the server (fingerprint, epoch)
// holding the peer token `token`.
ClientConnectParams MakeClientParams(uint64_t client_id, std::string_view token);
PeerConnectParams MakePeerParams(uint64_t sender_fingerprint, uint64_t sender_epoch, std::string_view token);

// A client's request from `params`: a hello when `nonce` is null, else
// the proof for that challenge.
ConnectRequestData MakeClientRequest(const ClientConnectParams& params, const Nonce* nonce);
// A peer server's request, the same way.
PeerConnectData MakePeerRequest(const PeerConnectParams& params, const Nonce* nonce);

// Whether `request`'s MAC is the one `key` (a TokenDigest) makes, in
// constant time.
bool ClientProofMatches(const ConnectRequestData& request, const uint8_t* key);
bool PeerProofMatches(const PeerConnectData& request, const uint8_t* key);

// Whether a refused hello carried a challenge: a refusal UNAUTHENTICATED
// (`unauthenticated`) whose Rejection detail is kNonceBytes long and not
// all zero; then copies it to `*nonce`. False otherwise (a server of
// another version, or a refusal for another reason).
bool ChallengeOf(bool unauthenticated, std::span<const uint8_t> detail, Nonce* nonce);

}  // namespace rkv::protocol
