#include "server/connect_request.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/layout.h"

namespace rkv::server {
namespace {

protocol::ConnectRequestData Valid(std::string_view token) {
  protocol::ConnectRequestData c{};
  c.magic = protocol::kConnectMagic;
  c.protocol_version = protocol::kProtocolVersion;
  c.layout_version = layout::kLayoutVersion;
  c.client_id = 77;
  const Sha256Digest d = TokenDigest(token);
  std::memcpy(c.token_digest, d.data(), d.size());
  return c;
}

std::vector<uint8_t> Bytes(const protocol::ConnectRequestData& c, size_t size = sizeof(protocol::ConnectRequestData)) {
  std::vector<uint8_t> out(size, 0);
  std::memcpy(out.data(), &c, std::min(size, sizeof(c)));
  return out;
}

TEST(ConnectRequestTest, AcceptsTheRightTokenAndPadding) {
  const Sha256Digest digest = TokenDigest("secret");
  auto r = ParseConnectRequest(Bytes(Valid("secret")), digest);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->client_id, 77u);
  EXPECT_EQ(r->role, ConnectRequest::Role::kClient);
  EXPECT_EQ(r->peer_epoch, 0u);
  EXPECT_TRUE(ParseConnectRequest(Bytes(Valid("secret"), protocol::kMaxConnectPrivateData), digest).ok());
}

TEST(ConnectRequestTest, OnlyThePeerMagicClaimsAPeer) {
  protocol::ConnectRequestData c = Valid("secret");
  EXPECT_FALSE(IsPeerConnectRequest(Bytes(c)));
  c.magic = protocol::kPeerConnectMagic;
  EXPECT_TRUE(IsPeerConnectRequest(Bytes(c)));
  // Nothing else is checked: the claim only places the request.
  EXPECT_TRUE(IsPeerConnectRequest(Bytes(c, 4)));
  EXPECT_FALSE(IsPeerConnectRequest(Bytes(c, 3)));
  EXPECT_FALSE(IsPeerConnectRequest({}));
}

TEST(ConnectRequestTest, AClientOfAnEarlierVersionIsRefusedNamingBothVersions) {
  // Version 2 replies carried no reason: such a client would take a
  // resendable refusal for the call's answer. Version 3 requests carried no
  // kRequestResent: a server whose cache forgot such a client could apply
  // its retry twice. Version 4 requests had no condition: a 32-byte request
  // would be refused one by one. All are refused at once.
  static_assert(protocol::kProtocolVersion == 5);
  for (const uint16_t old : {uint16_t{2}, uint16_t{3}, uint16_t{4}}) {
    protocol::ConnectRequestData c = Valid("secret");
    c.protocol_version = old;
    const auto r = ParseConnectRequest(Bytes(c), TokenDigest("secret"));
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(r.status().message().find("unsupported protocol/layout version " + std::to_string(old) + "/"),
              std::string::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("server speaks 5/"), std::string::npos) << r.status();
  }
}

TEST(ConnectRequestTest, RefusesEachMalformation) {
  const Sha256Digest digest = TokenDigest("secret");
  auto short_data = ParseConnectRequest(Bytes(Valid("secret"), 20), digest);
  EXPECT_EQ(short_data.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(short_data.status().message().find("20 bytes"), std::string::npos);

  protocol::ConnectRequestData c = Valid("secret");
  c.magic ^= 1;
  EXPECT_EQ(ParseConnectRequest(Bytes(c), digest).status().code(), StatusCode::kInvalidArgument);

  c = Valid("secret");
  c.layout_version += 1;
  EXPECT_EQ(ParseConnectRequest(Bytes(c), digest).status().code(), StatusCode::kFailedPrecondition);

  auto wrong = ParseConnectRequest(Bytes(Valid("other")), digest);
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong.status().message(), "invalid token");
}

protocol::PeerConnectData Peer(std::string_view token, uint64_t fingerprint, uint64_t epoch) {
  const protocol::ConnectRequestData hello = Valid(token);
  protocol::PeerConnectData p{};
  p.magic = protocol::kPeerConnectMagic;
  p.protocol_version = hello.protocol_version;
  p.layout_version = hello.layout_version;
  p.sender_fingerprint = fingerprint;
  std::memcpy(p.token_digest, hello.token_digest, sizeof(p.token_digest));
  p.sender_epoch = epoch;
  return p;
}

std::vector<uint8_t> PeerBytes(const protocol::PeerConnectData& p, size_t size = sizeof(protocol::PeerConnectData)) {
  std::vector<uint8_t> out(size, 0);
  std::memcpy(out.data(), &p, std::min(size, sizeof(p)));
  return out;
}

TEST(ConnectRequestTest, APeerNamesItsFingerprintAndEpoch) {
  const Sha256Digest digest = TokenDigest("secret");
  auto r = ParseConnectRequest(PeerBytes(Peer("secret", 0xF1F2, 9)), digest);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->role, ConnectRequest::Role::kPeer);
  EXPECT_EQ(r->peer_fingerprint, 0xF1F2u);
  EXPECT_EQ(r->client_id, 0u);
  EXPECT_EQ(r->peer_epoch, 9u);
}

TEST(ConnectRequestTest, RefusesAMalformedPeerRequest) {
  const Sha256Digest digest = TokenDigest("secret");
  // A peer request cut to a client request's size lacks its epoch.
  auto cut = ParseConnectRequest(PeerBytes(Peer("secret", 1, 9), sizeof(protocol::ConnectRequestData)), digest);
  EXPECT_EQ(cut.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cut.status().message().find("replication"), std::string::npos);
  EXPECT_EQ(ParseConnectRequest(PeerBytes(Peer("secret", 1, 0)), digest).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseConnectRequest(PeerBytes(Peer("other", 1, 9)), digest).status().code(),
            StatusCode::kUnauthenticated);
  protocol::PeerConnectData p = Peer("secret", 1, 9);
  p.protocol_version += 1;
  EXPECT_EQ(ParseConnectRequest(PeerBytes(p), digest).status().code(), StatusCode::kFailedPrecondition);
}

TEST(ConnectRequestTest, OnlyTheClusterCredentialOpensAReplicationConnection) {
  const Sha256Digest client = TokenDigest("client-secret");
  const Sha256Digest cluster = TokenDigest("cluster-secret");
  // A client's credential opens a client connection, not a peer's: its
  // holder cannot forge a primary's forward with a version of its choosing.
  auto forged = ParseConnectRequest(PeerBytes(Peer("client-secret", 0xF1F2, 9)), client, cluster);
  EXPECT_EQ(forged.status().code(), StatusCode::kUnauthenticated) << forged.status();
  EXPECT_NE(forged.status().message().find("cluster credential"), std::string::npos) << forged.status();
  auto peer = ParseConnectRequest(PeerBytes(Peer("cluster-secret", 0xF1F2, 9)), client, cluster);
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->role, ConnectRequest::Role::kPeer);
  // And the cluster credential is not a client's.
  EXPECT_EQ(ParseConnectRequest(Bytes(Valid("cluster-secret")), client, cluster).status().code(),
            StatusCode::kUnauthenticated);
  EXPECT_TRUE(ParseConnectRequest(Bytes(Valid("client-secret")), client, cluster).ok());
}

TEST(ConnectRequestTest, NamesTheClientCredentialAndRefusesARevokedOne) {
  auto parsed = ClientCredentials::Parse("alice alice-secret\nbob bob-secret\n", "test");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  LiveClientCredentials live(*parsed);
  const Sha256Digest cluster = TokenDigest("cluster-secret");
  std::string refused;
  auto bob = ParseConnectRequest(Bytes(Valid("bob-secret")), *live.current(), cluster, &refused);
  ASSERT_TRUE(bob.ok()) << bob.status();
  EXPECT_EQ(bob->credential, "bob");
  EXPECT_EQ(bob->credential_digest, TokenDigest("bob-secret"));
  EXPECT_TRUE(refused.empty());

  auto only_alice = ClientCredentials::Parse("alice alice-secret\n", "test");
  ASSERT_TRUE(only_alice.ok());
  live.Replace(*only_alice);
  auto revoked = ParseConnectRequest(Bytes(Valid("bob-secret")), *live.current(), cluster, &refused);
  ASSERT_FALSE(revoked.ok());
  EXPECT_EQ(revoked.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(revoked.status().message(), "client credential bob was revoked");
  EXPECT_EQ(refused, "bob");
  auto unknown = ParseConnectRequest(Bytes(Valid("carol-secret")), *live.current(), cluster, &refused);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(), "invalid token");
  auto alice = ParseConnectRequest(Bytes(Valid("alice-secret")), *live.current(), cluster);
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->credential, "alice");
  // A client credential is no cluster credential.
  EXPECT_FALSE(ParseConnectRequest(PeerBytes(Peer("alice-secret", 1, 9)), *live.current(), cluster).ok());
}

TEST(ConnectRequestTest, WithPerServerCredentialsAPeerPresentsItsOwn) {
  auto peers = ClientCredentials::Parse("srv-a server-a-secret\nsrv-b server-b-secret\n", "servers");
  ASSERT_TRUE(peers.ok()) << peers.status();
  ClientCredentials clients;
  ASSERT_TRUE(clients.Add("token", "client-secret").ok());
  // Each server's own credential opens a replication connection ...
  for (const char* own : {"server-a-secret", "server-b-secret"}) {
    auto peer = ParseConnectRequest(PeerBytes(Peer(own, 0xF1F2, 9)), clients, *peers);
    ASSERT_TRUE(peer.ok()) << peer.status();
    EXPECT_EQ(peer->role, ConnectRequest::Role::kPeer);
    // Named, for the check against the map's binding.
    EXPECT_EQ(peer->credential, std::string(own) == "server-a-secret" ? "srv-a" : "srv-b");
  }
  // ... a client's does not, and a server's is no client's.
  auto forged = ParseConnectRequest(PeerBytes(Peer("client-secret", 0xF1F2, 9)), clients, *peers);
  EXPECT_EQ(forged.status().code(), StatusCode::kUnauthenticated) << forged.status();
  EXPECT_EQ(ParseConnectRequest(Bytes(Valid("server-a-secret")), clients, *peers).status().code(),
            StatusCode::kUnauthenticated);
  EXPECT_TRUE(ParseConnectRequest(Bytes(Valid("client-secret")), clients, *peers).ok());
}

}  // namespace
}  // namespace rkv::server
