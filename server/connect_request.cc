#include "server/connect_request.h"

#include <cstring>
#include <string>
#include <tuple>

#include "common/layout.h"

namespace rkv::server {

StatusOr<ConnectRequest> ParseConnectRequest(std::span<const uint8_t> data, const Sha256Digest& client_digest,
                                             const Sha256Digest& cluster_digest) {
  protocol::ConnectRequestData req{};
  if (data.size() < sizeof(req)) {
    return InvalidArgument("malformed connect request (" + std::to_string(data.size()) + " bytes)");
  }
  std::memcpy(&req, data.data(), sizeof(req));
  ConnectRequest out;
  if (req.magic == protocol::kPeerConnectMagic) {
    protocol::PeerConnectData peer{};
    if (data.size() < sizeof(peer)) {
      return InvalidArgument("malformed replication connect request (" + std::to_string(data.size()) +
                             " bytes, expected " + std::to_string(sizeof(peer)) + ")");
    }
    std::memcpy(&peer, data.data(), sizeof(peer));
    if (peer.sender_epoch == 0) return InvalidArgument("malformed replication connect request (epoch 0)");
    out.role = ConnectRequest::Role::kPeer;
    out.peer_fingerprint = peer.sender_fingerprint;
    out.peer_epoch = peer.sender_epoch;
  } else if (req.magic != protocol::kConnectMagic) {
    return InvalidArgument("malformed connect request (bad magic)");
  } else {
    out.client_id = req.client_id;
  }
  if (req.protocol_version != protocol::kProtocolVersion || req.layout_version != layout::kLayoutVersion) {
    return FailedPrecondition("unsupported protocol/layout version " + std::to_string(req.protocol_version) + "/" +
                              std::to_string(req.layout_version) + " (server speaks " +
                              std::to_string(protocol::kProtocolVersion) + "/" +
                              std::to_string(layout::kLayoutVersion) + ")");
  }
  static_assert(sizeof(req.token_digest) == std::tuple_size_v<Sha256Digest>);
  if (out.role == ConnectRequest::Role::kPeer) {
    if (!DigestEqual(req.token_digest, cluster_digest.data(), cluster_digest.size())) {
      return Unauthenticated("invalid cluster credential: replication connections are for servers");
    }
  } else if (!DigestEqual(req.token_digest, client_digest.data(), client_digest.size())) {
    return Unauthenticated("invalid token");
  }
  return out;
}

bool IsPeerConnectRequest(std::span<const uint8_t> data) {
  uint32_t magic = 0;
  if (data.size() < sizeof(magic)) return false;
  std::memcpy(&magic, data.data(), sizeof(magic));
  return magic == protocol::kPeerConnectMagic;
}

}  // namespace rkv::server
