// The connect private data a server receives (rdmacm's CONNECT, or the tcp
// transport's CONNECT frame) from anyone who reaches its port:
// server/connect_request.h ParseConnectRequest, with the challenges of
// server/connect_challenge.h under a fixed secret and a stopped clock (so
// that the corpus's proofs stay valid; corpus_gen.cc makes them with the
// same ones).
//
// Properties: only data at least sizeof(ConnectRequestData) long (a peer's:
// sizeof(PeerConnectData), with a non-zero epoch) with a known magic and
// this protocol's and layout's versions is accepted; the role, id and
// epoch are those of the bytes; a request accepted as a proof carries a
// nonce this server issued and a MAC made with the token's digest (client)
// or the cluster token's (peer), and its nonce is then used (a second
// parse of the same bytes is refused); one accepted as a hello has a zero
// nonce; every refusal has a code and a reason, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/connect_proof.h"
#include "common/layout.h"
#include "common/token.h"
#include "fuzz/connect_fuzz_keys.h"
#include "fuzz/fuzz_input.h"
#include "server/connect_challenge.h"
#include "server/connect_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rkv;
  static const Sha256Digest kDigest = TokenDigest(fuzz::kClientToken);
  static const Sha256Digest kClusterDigest = TokenDigest(fuzz::kClusterToken);
  server::ConnectChallenges challenges = fuzz::StoppedChallenges();
  const std::span<const uint8_t> bytes(data, size);
  const StatusOr<server::ConnectRequest> r = server::ParseConnectRequest(bytes, kDigest, kClusterDigest, challenges);
  if (!r.ok()) {
    const StatusCode code = r.status().code();
    RKV_FUZZ_CHECK(code == StatusCode::kInvalidArgument || code == StatusCode::kFailedPrecondition ||
                   code == StatusCode::kUnauthenticated);
    RKV_FUZZ_CHECK(!r.status().message().empty());
    RKV_FUZZ_CHECK(challenges.used() == 0);
    return 0;
  }
  uint32_t magic = 0;
  RKV_FUZZ_CHECK(size >= sizeof(magic));
  std::memcpy(&magic, data, sizeof(magic));
  const uint8_t* nonce = nullptr;
  if (r->role == server::ConnectRequest::Role::kPeer) {
    protocol::PeerConnectData peer{};
    RKV_FUZZ_CHECK(magic == protocol::kPeerConnectMagic);
    RKV_FUZZ_CHECK(size >= sizeof(peer));
    std::memcpy(&peer, data, sizeof(peer));
    RKV_FUZZ_CHECK(peer.protocol_version == protocol::kProtocolVersion);
    RKV_FUZZ_CHECK(peer.layout_version == layout::kLayoutVersion);
    RKV_FUZZ_CHECK(peer.sender_epoch != 0 && r->peer_epoch == peer.sender_epoch);
    RKV_FUZZ_CHECK(r->peer_fingerprint == peer.sender_fingerprint && r->client_id == 0);
    RKV_FUZZ_CHECK(r->hello == protocol::IsHelloNonce(peer.nonce));
    if (!r->hello) RKV_FUZZ_CHECK(protocol::PeerProofMatches(peer, kClusterDigest.data()));
    nonce = data + offsetof(protocol::PeerConnectData, nonce);
  } else {
    protocol::ConnectRequestData req{};
    RKV_FUZZ_CHECK(magic == protocol::kConnectMagic);
    RKV_FUZZ_CHECK(size >= sizeof(req));
    std::memcpy(&req, data, sizeof(req));
    RKV_FUZZ_CHECK(req.protocol_version == protocol::kProtocolVersion);
    RKV_FUZZ_CHECK(req.layout_version == layout::kLayoutVersion);
    RKV_FUZZ_CHECK(r->client_id == req.client_id);
    RKV_FUZZ_CHECK(r->peer_epoch == 0 && r->peer_fingerprint == 0);
    RKV_FUZZ_CHECK(r->hello == protocol::IsHelloNonce(req.nonce));
    if (!r->hello) {
      RKV_FUZZ_CHECK(protocol::ClientProofMatches(req, kDigest.data()));
      RKV_FUZZ_CHECK(r->credential_digest == kDigest);
    }
    nonce = data + offsetof(protocol::ConnectRequestData, nonce);
  }
  if (r->hello) {
    RKV_FUZZ_CHECK(challenges.used() == 0);
    return 0;
  }
  // A proof: its nonce was this server's and is now used.
  RKV_FUZZ_CHECK(challenges.Check(nonce).ok());
  RKV_FUZZ_CHECK(challenges.used() == 1);
  const StatusOr<server::ConnectRequest> again =
      server::ParseConnectRequest(bytes, kDigest, kClusterDigest, challenges);
  RKV_FUZZ_CHECK(!again.ok() && again.status().code() == StatusCode::kUnauthenticated);
  return 0;
}
