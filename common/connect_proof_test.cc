#include "common/connect_proof.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/layout.h"

namespace rkv::protocol {
namespace {

ClientConnectParams Client(std::string_view token) {
  ClientConnectParams p{};
  p.magic = kConnectMagic;
  p.protocol_version = kProtocolVersion;
  p.layout_version = layout::kLayoutVersion;
  p.client_id = 77;
  const Sha256Digest d = TokenDigest(token);
  std::memcpy(p.token_digest, d.data(), d.size());
  return p;
}

PeerConnectParams Peer(std::string_view token) {
  PeerConnectParams p{};
  p.sender_fingerprint = 0x1234;
  p.sender_epoch = 3;
  const Sha256Digest d = TokenDigest(token);
  std::memcpy(p.token_digest, d.data(), d.size());
  return p;
}

constexpr Nonce kNonce = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

TEST(ConnectProofTest, AHelloCarriesTheFieldsAndNoProof) {
  const ConnectRequestData hello = MakeClientRequest(Client("secret"), nullptr);
  EXPECT_EQ(hello.magic, kConnectMagic);
  EXPECT_EQ(hello.protocol_version, kProtocolVersion);
  EXPECT_EQ(hello.client_id, 77u);
  EXPECT_TRUE(IsHelloNonce(hello.nonce));
  EXPECT_EQ(std::vector<uint8_t>(hello.mac, hello.mac + sizeof hello.mac), std::vector<uint8_t>(sizeof hello.mac, 0));
  const PeerConnectData peer = MakePeerRequest(Peer("cluster"), nullptr);
  EXPECT_EQ(peer.magic, kPeerConnectMagic);
  EXPECT_EQ(peer.sender_epoch, 3u);
  EXPECT_TRUE(IsHelloNonce(peer.nonce));
}

TEST(ConnectProofTest, AProofMatchesItsKeyOnlyAndCoversEveryField) {
  const Sha256Digest key = TokenDigest("secret");
  const Sha256Digest other = TokenDigest("secret2");
  const ConnectRequestData proof = MakeClientRequest(Client("secret"), &kNonce);
  EXPECT_EQ(std::memcmp(proof.nonce, kNonce.data(), kNonceBytes), 0);
  EXPECT_TRUE(ClientProofMatches(proof, key.data()));
  EXPECT_FALSE(ClientProofMatches(proof, other.data()));
  // Every byte before the MAC is covered.
  for (size_t i = 0; i < offsetof(ConnectRequestData, mac); ++i) {
    ConnectRequestData changed = proof;
    reinterpret_cast<uint8_t*>(&changed)[i] ^= 0x01;
    EXPECT_FALSE(ClientProofMatches(changed, key.data())) << "byte " << i;
  }
  ConnectRequestData bad_mac = proof;
  bad_mac.mac[kClientMacBytes - 1] ^= 0x80;
  EXPECT_FALSE(ClientProofMatches(bad_mac, key.data()));

  const Sha256Digest cluster = TokenDigest("cluster");
  const PeerConnectData peer = MakePeerRequest(Peer("cluster"), &kNonce);
  EXPECT_TRUE(PeerProofMatches(peer, cluster.data()));
  EXPECT_FALSE(PeerProofMatches(peer, key.data()));
  for (size_t i = 0; i < offsetof(PeerConnectData, mac); ++i) {
    PeerConnectData changed = peer;
    reinterpret_cast<uint8_t*>(&changed)[i] ^= 0x01;
    EXPECT_FALSE(PeerProofMatches(changed, cluster.data())) << "byte " << i;
  }
}

// The MAC is the documented one: HMAC-SHA256(digest, domain || fields),
// truncated, so another implementation can compute it.
TEST(ConnectProofTest, TheMacIsTheDocumentedHmac) {
  const Sha256Digest key = TokenDigest("secret");
  const ConnectRequestData proof = MakeClientRequest(Client("secret"), &kNonce);
  std::vector<uint8_t> message(kProofDomain.begin(), kProofDomain.end());
  const auto* p = reinterpret_cast<const uint8_t*>(&proof);
  message.insert(message.end(), p, p + offsetof(ConnectRequestData, mac));
  const Sha256Digest mac = HmacSha256(key, message);
  EXPECT_EQ(std::memcmp(proof.mac, mac.data(), kClientMacBytes), 0);
}

TEST(ConnectProofTest, AChallengeIsAnUnauthenticatedRefusalsNonce) {
  Nonce got{};
  EXPECT_TRUE(ChallengeOf(true, kNonce, &got));
  EXPECT_EQ(got, kNonce);
  EXPECT_FALSE(ChallengeOf(false, kNonce, &got));
  EXPECT_FALSE(ChallengeOf(true, std::span<const uint8_t>(kNonce.data(), 15), &got));
  EXPECT_FALSE(ChallengeOf(true, {}, &got));
  const Nonce zero{};
  EXPECT_FALSE(ChallengeOf(true, zero, &got));
}

}  // namespace
}  // namespace rkv::protocol
