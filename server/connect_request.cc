#include "server/connect_request.h"

#include <cstring>
#include <optional>
#include <string>

#include "common/connect_proof.h"
#include "common/layout.h"

namespace rkv::server {
namespace {

// Checks a proof's nonce and finds the credential of `candidates` whose
// key made its MAC (`proves`); the nonce is consumed by the caller once
// the credential is found acceptable.
template <typename Proves>
StatusOr<ClientCredentials::Match> FindProver(const uint8_t* nonce, const ClientCredentials& candidates,
                                              const ConnectChallenges& challenges, Proves proves,
                                              const char* invalid) {
  RKV_RETURN_IF_ERROR(challenges.Check(nonce));
  std::optional<ClientCredentials::Match> match =
      candidates.FindByProof([&](const Sha256Digest& key) { return proves(key.data()); });
  if (!match) return Unauthenticated(invalid);
  return std::move(*match);
}

}  // namespace

StatusOr<ConnectRequest> ParseConnectRequest(std::span<const uint8_t> data, const Sha256Digest& client_digest,
                                             const Sha256Digest& cluster_digest, ConnectChallenges& challenges) {
  ClientCredentials clients;
  RKV_RETURN_IF_ERROR(clients.AddDigest(kTokenFileCredentialName, client_digest));
  return ParseConnectRequest(data, clients, cluster_digest, challenges);
}

StatusOr<ConnectRequest> ParseConnectRequest(std::span<const uint8_t> data, const ClientCredentials& clients,
                                             const Sha256Digest& cluster_digest, ConnectChallenges& challenges,
                                             std::string* refused_credential) {
  ClientCredentials peers;
  RKV_RETURN_IF_ERROR(peers.AddDigest("cluster", cluster_digest));
  return ParseConnectRequest(data, clients, peers, challenges, refused_credential);
}

StatusOr<ConnectRequest> ParseConnectRequest(std::span<const uint8_t> data, const ClientCredentials& clients,
                                             const ClientCredentials& peers, ConnectChallenges& challenges,
                                             std::string* refused_credential) {
  // Magic and versions sit at the same offsets in both kinds of request.
  struct Head {
    uint32_t magic;
    uint16_t protocol_version;
    uint16_t layout_version;
  } head{};
  static_assert(sizeof(Head) == 8 && offsetof(protocol::PeerConnectData, layout_version) == 6);
  if (data.size() < sizeof(head)) {
    return InvalidArgument("malformed connect request (" + std::to_string(data.size()) + " bytes)");
  }
  std::memcpy(&head, data.data(), sizeof(head));
  const bool peer = head.magic == protocol::kPeerConnectMagic;
  if (!peer && head.magic != protocol::kConnectMagic) {
    return InvalidArgument("malformed connect request (bad magic)");
  }
  // The version first: a request of another version has another size.
  if (head.protocol_version != protocol::kProtocolVersion || head.layout_version != layout::kLayoutVersion) {
    return FailedPrecondition("unsupported protocol/layout version " + std::to_string(head.protocol_version) + "/" +
                              std::to_string(head.layout_version) + " (server speaks " +
                              std::to_string(protocol::kProtocolVersion) + "/" +
                              std::to_string(layout::kLayoutVersion) + ")");
  }
  ConnectRequest out;
  if (peer) {
    protocol::PeerConnectData req{};
    if (data.size() < sizeof(req)) {
      return InvalidArgument("malformed replication connect request (" + std::to_string(data.size()) +
                             " bytes, expected " + std::to_string(sizeof(req)) + ")");
    }
    std::memcpy(&req, data.data(), sizeof(req));
    if (req.sender_epoch == 0) return InvalidArgument("malformed replication connect request (epoch 0)");
    out.role = ConnectRequest::Role::kPeer;
    out.peer_fingerprint = req.sender_fingerprint;
    out.peer_epoch = req.sender_epoch;
    if (protocol::IsHelloNonce(req.nonce)) {
      out.hello = true;
      return out;
    }
    RKV_ASSIGN_OR_RETURN(
        ClientCredentials::Match match,
        FindProver(req.nonce, peers, challenges,
                   [&](const uint8_t* key) { return protocol::PeerProofMatches(req, key); },
                   "invalid cluster credential (or server credential): replication connections are for servers"));
    RKV_RETURN_IF_ERROR(challenges.Consume(req.nonce));
    out.credential = std::move(match.name);
    return out;
  }
  protocol::ConnectRequestData req{};
  if (data.size() < sizeof(req)) {
    return InvalidArgument("malformed connect request (" + std::to_string(data.size()) + " bytes, expected " +
                           std::to_string(sizeof(req)) + ")");
  }
  std::memcpy(&req, data.data(), sizeof(req));
  out.client_id = req.client_id;
  if (protocol::IsHelloNonce(req.nonce)) {
    out.hello = true;
    return out;
  }
  RKV_ASSIGN_OR_RETURN(ClientCredentials::Match match,
                       FindProver(req.nonce, clients, challenges,
                                  [&](const uint8_t* key) { return protocol::ClientProofMatches(req, key); },
                                  "invalid token"));
  if (match.revoked) {
    if (refused_credential != nullptr) *refused_credential = match.name;
    return Unauthenticated("client credential " + match.name + " was revoked");
  }
  if (Status s = challenges.Consume(req.nonce); !s.ok()) {
    if (refused_credential != nullptr) *refused_credential = match.name;
    return s;
  }
  out.credential = std::move(match.name);
  out.credential_digest = match.digest;
  return out;
}

bool IsPeerConnectRequest(std::span<const uint8_t> data) {
  uint32_t magic = 0;
  if (data.size() < sizeof(magic)) return false;
  std::memcpy(&magic, data.data(), sizeof(magic));
  return magic == protocol::kPeerConnectMagic;
}

}  // namespace rkv::server
