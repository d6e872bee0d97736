#include "server/connect_request.h"

#include <cstring>
#include <optional>
#include <string>
#include <tuple>

#include "common/layout.h"

namespace rkv::server {

StatusOr<ConnectRequest> ParseConnectRequest(std::span<const uint8_t> data, const Sha256Digest& client_digest,
                                             const Sha256Digest& cluster_digest) {
  ClientCredentials clients;
  RKV_RETURN_IF_ERROR(clients.AddDigest(kTokenFileCredentialName, client_digest));
  return ParseConnectRequest(data, clients, cluster_digest);
}

StatusOr<ConnectRequest> ParseConnectRequest(std::span<const uint8_t> data, const ClientCredentials& clients,
                                             const Sha256Digest& cluster_digest, std::string* refused_credential) {
  ClientCredentials peers;
  RKV_RETURN_IF_ERROR(peers.AddDigest("cluster", cluster_digest));
  return ParseConnectRequest(data, clients, peers, refused_credential);
}

StatusOr<ConnectRequest> ParseConnectRequest(std::span<const uint8_t> data, const ClientCredentials& clients,
                                             const ClientCredentials& peers, std::string* refused_credential) {
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
    const std::optional<ClientCredentials::Match> match = peers.Find(req.token_digest);
    if (!match) {
      return Unauthenticated("invalid cluster credential (or server credential): replication connections are for "
                             "servers");
    }
    out.credential = match->name;
  } else {
    const std::optional<ClientCredentials::Match> match = clients.Find(req.token_digest);
    if (!match) return Unauthenticated("invalid token");
    if (match->revoked) {
      if (refused_credential != nullptr) *refused_credential = match->name;
      return Unauthenticated("client credential " + match->name + " was revoked");
    }
    out.credential = match->name;
    std::memcpy(out.credential_digest.data(), req.token_digest, out.credential_digest.size());
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
