// The connect private data a server receives (rdmacm's CONNECT, or the tcp
// transport's CONNECT frame) from anyone who reaches its port:
// server/connect_request.h ParseConnectRequest.
//
// Properties: only data at least sizeof(ConnectRequestData) long (a peer's:
// sizeof(PeerConnectData), with a non-zero epoch) with a known magic, this
// protocol's and layout's versions and the token's digest is accepted, and
// the role, id and epoch are those of the bytes; every refusal has a code
// and a reason, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/layout.h"
#include "common/token.h"
#include "fuzz/fuzz_input.h"
#include "server/connect_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rkv;
  static const Sha256Digest kDigest = TokenDigest("fuzz-token");
  const StatusOr<server::ConnectRequest> r =
      server::ParseConnectRequest(std::span<const uint8_t>(data, size), kDigest);
  if (!r.ok()) {
    const StatusCode code = r.status().code();
    RKV_FUZZ_CHECK(code == StatusCode::kInvalidArgument || code == StatusCode::kFailedPrecondition ||
                   code == StatusCode::kUnauthenticated);
    RKV_FUZZ_CHECK(!r.status().message().empty());
    return 0;
  }
  protocol::ConnectRequestData req{};
  RKV_FUZZ_CHECK(size >= sizeof(req));
  std::memcpy(&req, data, sizeof(req));
  if (r->role == server::ConnectRequest::Role::kPeer) {
    protocol::PeerConnectData peer{};
    RKV_FUZZ_CHECK(req.magic == protocol::kPeerConnectMagic);
    RKV_FUZZ_CHECK(size >= sizeof(peer));
    std::memcpy(&peer, data, sizeof(peer));
    RKV_FUZZ_CHECK(peer.sender_epoch != 0 && r->peer_epoch == peer.sender_epoch);
    RKV_FUZZ_CHECK(r->peer_fingerprint == peer.sender_fingerprint && r->client_id == 0);
  } else {
    RKV_FUZZ_CHECK(req.magic == protocol::kConnectMagic);
    RKV_FUZZ_CHECK(r->client_id == req.client_id);
    RKV_FUZZ_CHECK(r->peer_epoch == 0 && r->peer_fingerprint == 0);
  }
  RKV_FUZZ_CHECK(req.protocol_version == protocol::kProtocolVersion);
  RKV_FUZZ_CHECK(req.layout_version == layout::kLayoutVersion);
  RKV_FUZZ_CHECK(std::memcmp(req.token_digest, kDigest.data(), kDigest.size()) == 0);
  return 0;
}
