// The server's check of a connection request: the connect private data a
// client or a peer server sends (protocol::ConnectRequestData or
// protocol::PeerConnectData, common/protocol.h), bytes from anyone who can
// reach the listening port, checked before anything is allocated for the
// connection.
//
// Thread safety: a function of its arguments; ConnectChallenges is
// thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/client_credentials.h"
#include "common/protocol.h"
#include "common/status.h"
#include "common/token.h"
#include "server/connect_challenge.h"

namespace rkv::server {

// A checked connection request.
struct ConnectRequest {
  enum class Role { kClient, kPeer };
  Role role = Role::kClient;
  // A hello: a request of a known magic and version that asks for a
  // challenge (a zero nonce); nothing else about it is checked or known to
  // be true. The server refuses it with a challenge (ConnectChallenges).
  bool hello = false;
  // A client: its random id (the replay cache's name for it); 0 for a peer.
  uint64_t client_id = 0;
  // A peer: PeerFingerprint of its server id (server/replication/replication.h), which
  // the server resolves against its cluster map before accepting; 0 for a
  // client.
  uint64_t peer_fingerprint = 0;
  uint64_t peer_epoch = 0;  // a peer's epoch (>= 1); 0 for a client
  // A client: the name of the client credential it proved, and that
  // credential's digest (what a reload's revocation is checked against).
  // A peer: the name of the peer credential it proved (the cluster
  // credential's, or its own server credential's), which the server
  // checks against the binding the map names (ServerInfo.credential).
  std::string credential;
  Sha256Digest credential_digest{};
};

// Parses the connect private data (which rdmacm may pad with zeros beyond
// the struct) and checks it: the magic (kConnectMagic for a client,
// kPeerConnectMagic for a peer server), a whole request of its kind,
// protocol and layout versions, for a peer a non-zero epoch. A request
// with a zero nonce is then a hello (ConnectRequest::hello), checked no
// further. Otherwise it is a proof: its nonce must pass
// `challenges`.Check (this server's, not expired), its MAC must be the one
// a credential of its role makes (compared in constant time with every
// client credential for a client, with every one of `peers` for a peer
// server: only a holder of a peer credential may open a replication
// connection, so a client credential cannot forge a primary's forward,
// docs/design.md §10), and then its nonce is consumed (`challenges`.Consume:
// a proof is accepted once). INVALID_ARGUMENT for data too short, a bad
// magic or a zero peer epoch, FAILED_PRECONDITION for another protocol or
// layout version, UNAUTHENTICATED for a wrong token or peer credential, a
// foreign, expired or used nonce, UNAVAILABLE when the used nonces are at
// their limit; each message is the reason the server sends back in its
// refusal. Whether a peer is a server of the cluster map is the caller's
// check.
//
// A client credential revoked by a reload is refused UNAUTHENTICATED
// "client credential NAME was revoked"; in every refusal for a client's
// credential, `*refused_credential` (when not null) gets the name when one
// is known, for the server's log.
StatusOr<ConnectRequest> ParseConnectRequest(std::span<const uint8_t> data, const ClientCredentials& clients,
                                             const ClientCredentials& peers, ConnectChallenges& challenges,
                                             std::string* refused_credential = nullptr);

// The same with one peer credential, named "cluster", of digest
// `cluster_digest`.
StatusOr<ConnectRequest> ParseConnectRequest(std::span<const uint8_t> data, const ClientCredentials& clients,
                                             const Sha256Digest& cluster_digest, ConnectChallenges& challenges,
                                             std::string* refused_credential = nullptr);

// The same with one client credential, named "token", of digest
// `client_digest`.
StatusOr<ConnectRequest> ParseConnectRequest(std::span<const uint8_t> data, const Sha256Digest& client_digest,
                                             const Sha256Digest& cluster_digest, ConnectChallenges& challenges);

// Whether `data` claims to be a peer server's request (its magic), checking
// nothing else: where a request is placed, before ParseConnectRequest
// decides whether it is accepted.
bool IsPeerConnectRequest(std::span<const uint8_t> data);

}  // namespace rkv::server
