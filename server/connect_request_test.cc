#include "server/connect_request.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/connect_proof.h"
#include "common/layout.h"

namespace rkv::server {
namespace {

using Clock = ConnectChallenges::Clock;

ConnectChallenges::Secret SecretOf(uint8_t seed) {
  ConnectChallenges::Secret s{};
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(seed + i);
  return s;
}

// A server's challenges on a clock the test turns.
class Challenger {
 public:
  explicit Challenger(uint8_t seed = 1)
      : challenges_(std::make_unique<ConnectChallenges>(SecretOf(seed), [this] { return now_; })) {}
  ConnectChallenges& operator*() { return *challenges_; }
  ConnectChallenges* operator->() { return challenges_.get(); }
  void Advance(std::chrono::seconds s) { now_ += s; }

 private:
  Clock::time_point now_ = Clock::time_point{} + std::chrono::hours(1);
  std::unique_ptr<ConnectChallenges> challenges_;
};

protocol::ClientConnectParams Client(std::string_view token) { return protocol::MakeClientParams(77, token); }

template <typename T>
std::vector<uint8_t> Bytes(const T& c, size_t size = sizeof(T)) {
  std::vector<uint8_t> out(size, 0);
  std::memcpy(out.data(), &c, std::min(size, sizeof(c)));
  return out;
}

// A proof of `params` for a fresh challenge of `ch`.
std::vector<uint8_t> Proof(const protocol::ClientConnectParams& params, ConnectChallenges& ch,
                           size_t size = sizeof(protocol::ConnectRequestData)) {
  const protocol::Nonce nonce = ch.Issue();
  return Bytes(protocol::MakeClientRequest(params, &nonce), size);
}

protocol::PeerConnectParams PeerParams(std::string_view token, uint64_t fingerprint, uint64_t epoch) {
  return protocol::MakePeerParams(fingerprint, epoch, token);
}

std::vector<uint8_t> PeerProof(const protocol::PeerConnectParams& params, ConnectChallenges& ch,
                               size_t size = sizeof(protocol::PeerConnectData)) {
  const protocol::Nonce nonce = ch.Issue();
  return Bytes(protocol::MakePeerRequest(params, &nonce), size);
}

TEST(ConnectRequestTest, AHelloIsAnsweredWithAChallengeAndNothingElse) {
  Challenger ch;
  const Sha256Digest digest = TokenDigest("secret");
  // A hello carries no proof; any token's hello is one (nothing is checked
  // beyond magic, size and versions).
  for (const char* token : {"secret", "not-the-token"}) {
    auto r = ParseConnectRequest(Bytes(protocol::MakeClientRequest(Client(token), nullptr)), digest, digest, *ch);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->hello);
    EXPECT_EQ(r->client_id, 77u);
    EXPECT_TRUE(r->credential.empty());
  }
  auto peer = ParseConnectRequest(Bytes(protocol::MakePeerRequest(PeerParams("x", 5, 2), nullptr)), digest, digest,
                                  *ch);
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_TRUE(peer->hello);
  EXPECT_EQ(peer->role, ConnectRequest::Role::kPeer);
  EXPECT_EQ(ch->used(), 0u);
  // Challenges differ and are never all zero.
  const protocol::Nonce a = ch->Issue();
  const protocol::Nonce b = ch->Issue();
  EXPECT_NE(a, b);
  EXPECT_FALSE(protocol::IsHelloNonce(a.data()));
  EXPECT_TRUE(ch->Check(a.data()).ok());
}

TEST(ConnectRequestTest, AcceptsAGoodProofOnceWithPadding) {
  Challenger ch;
  const Sha256Digest digest = TokenDigest("secret");
  auto r = ParseConnectRequest(Proof(Client("secret"), *ch), digest, digest, *ch);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->hello);
  EXPECT_EQ(r->client_id, 77u);
  EXPECT_EQ(r->role, ConnectRequest::Role::kClient);
  EXPECT_EQ(r->peer_epoch, 0u);
  EXPECT_EQ(r->credential, "token");
  EXPECT_EQ(r->credential_digest, digest);
  EXPECT_EQ(ch->used(), 1u);
  // rdma_cm may pad the private data.
  EXPECT_TRUE(ParseConnectRequest(Proof(Client("secret"), *ch, protocol::kMaxConnectPrivateData + 8), digest,
                                  digest, *ch)
                  .ok());
}

TEST(ConnectRequestTest, AReplayedProofIsRefused) {
  Challenger ch;
  const Sha256Digest digest = TokenDigest("secret");
  const std::vector<uint8_t> proof = Proof(Client("secret"), *ch);
  ASSERT_TRUE(ParseConnectRequest(proof, digest, digest, *ch).ok());
  for (int i = 0; i < 3; ++i) {
    auto again = ParseConnectRequest(proof, digest, digest, *ch);
    EXPECT_EQ(again.status().code(), StatusCode::kUnauthenticated) << again.status();
    EXPECT_NE(again.status().message().find("used before"), std::string::npos) << again.status();
  }
  // Once the lifetime has passed it is refused as expired (and the used
  // set has forgotten it: it holds the nonces of one lifetime only).
  ch.Advance(std::chrono::seconds(protocol::kChallengeLifetimeSeconds + 1));
  auto late = ParseConnectRequest(proof, digest, digest, *ch);
  EXPECT_NE(late.status().message().find("expired"), std::string::npos) << late.status();
  ASSERT_TRUE(ParseConnectRequest(Proof(Client("secret"), *ch), digest, digest, *ch).ok());
  EXPECT_EQ(ch->used(), 1u);
}

TEST(ConnectRequestTest, AnExpiredChallengeIsRefused) {
  Challenger ch;
  const Sha256Digest digest = TokenDigest("secret");
  const protocol::Nonce nonce = ch->Issue();
  const std::vector<uint8_t> proof = Bytes(protocol::MakeClientRequest(Client("secret"), &nonce));
  ch.Advance(std::chrono::seconds(protocol::kChallengeLifetimeSeconds));
  EXPECT_TRUE(ch->Check(nonce.data()).ok());  // the last second of its life
  ch.Advance(std::chrono::seconds(1));
  auto r = ParseConnectRequest(proof, digest, digest, *ch);
  EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated) << r.status();
  EXPECT_NE(r.status().message().find("expired"), std::string::npos) << r.status();
  EXPECT_EQ(ch->used(), 0u);
}

TEST(ConnectRequestTest, AnotherServersChallengeIsRefused) {
  Challenger a(1);
  Challenger b(2);
  const Sha256Digest digest = TokenDigest("secret");
  const std::vector<uint8_t> for_a = Proof(Client("secret"), *a);
  auto at_b = ParseConnectRequest(for_a, digest, digest, *b);
  EXPECT_EQ(at_b.status().code(), StatusCode::kUnauthenticated) << at_b.status();
  EXPECT_NE(at_b.status().message().find("not this server's"), std::string::npos) << at_b.status();
  EXPECT_TRUE(ParseConnectRequest(for_a, digest, digest, *a).ok());
  // A made-up nonce (any tag) is refused the same way.
  protocol::Nonce forged = a->Issue();
  forged[protocol::kNonceBytes - 1] ^= 1;
  auto made_up = ParseConnectRequest(Bytes(protocol::MakeClientRequest(Client("secret"), &forged)), digest, digest,
                                     *a);
  EXPECT_NE(made_up.status().message().find("not this server's"), std::string::npos) << made_up.status();
}

TEST(ConnectRequestTest, AWrongTokenOrATamperedFieldIsRefused) {
  Challenger ch;
  const Sha256Digest digest = TokenDigest("secret");
  auto wrong = ParseConnectRequest(Proof(Client("other"), *ch), digest, digest, *ch);
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong.status().message(), "invalid token");
  // A field of a good proof changed after it was made: the client id, the
  // nonce's counter (then no nonce of this server's), a MAC byte. None is
  // accepted, and no nonce is used.
  const size_t fields[] = {offsetof(protocol::ConnectRequestData, client_id),
                           offsetof(protocol::ConnectRequestData, client_id) + 7,
                           offsetof(protocol::ConnectRequestData, nonce) + 4,
                           offsetof(protocol::ConnectRequestData, mac),
                           offsetof(protocol::ConnectRequestData, mac) + protocol::kClientMacBytes - 1};
  for (const size_t at : fields) {
    std::vector<uint8_t> proof = Proof(Client("secret"), *ch);
    proof[at] ^= 0x10;
    auto r = ParseConnectRequest(proof, digest, digest, *ch);
    EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated) << "byte " << at << ": " << r.status();
  }
  EXPECT_EQ(ch->used(), 0u);
}

TEST(ConnectRequestTest, OnlyThePeerMagicClaimsAPeer) {
  protocol::ConnectRequestData c = protocol::MakeClientRequest(Client("secret"), nullptr);
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
  // would be refused one by one. Version 5 requests sent the token's
  // digest itself, which anyone who saw one could replay. Version 6
  // replies were 120 bytes, without the block word: such a client would
  // refuse every reply as malformed. Version 7 requests were 40 bytes,
  // without a lookup's landing slot: every PUT would be refused as
  // malformed. All are refused at once, whatever their size.
  static_assert(protocol::kProtocolVersion == 8);
  Challenger ch;
  const Sha256Digest digest = TokenDigest("secret");
  for (const uint16_t old : {uint16_t{2}, uint16_t{3}, uint16_t{4}, uint16_t{5}, uint16_t{6}, uint16_t{7}}) {
    protocol::ClientConnectParams p = Client("secret");
    p.protocol_version = old;
    // A version 5 request was 48 bytes: magic, versions, client id, digest;
    // versions 6 and 7 are a version 8 one's size.
    const protocol::ConnectRequestData request = protocol::MakeClientRequest(p, nullptr);
    const auto r = ParseConnectRequest(Bytes(request, old >= 6 ? sizeof(request) : 48), digest, digest, *ch);
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(r.status().message().find("unsupported protocol/layout version " + std::to_string(old) + "/"),
              std::string::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("server speaks 8/"), std::string::npos) << r.status();
  }
}

TEST(ConnectRequestTest, RefusesEachMalformation) {
  Challenger ch;
  const Sha256Digest digest = TokenDigest("secret");
  auto tiny = ParseConnectRequest(Proof(Client("secret"), *ch, 6), digest, digest, *ch);
  EXPECT_EQ(tiny.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tiny.status().message().find("6 bytes"), std::string::npos);
  auto short_data = ParseConnectRequest(Proof(Client("secret"), *ch, 40), digest, digest, *ch);
  EXPECT_EQ(short_data.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(short_data.status().message().find("40 bytes"), std::string::npos);

  protocol::ClientConnectParams p = Client("secret");
  p.magic ^= 1;
  EXPECT_EQ(ParseConnectRequest(Proof(p, *ch), digest, digest, *ch).status().code(), StatusCode::kInvalidArgument);
  p = Client("secret");
  p.layout_version += 1;
  EXPECT_EQ(ParseConnectRequest(Proof(p, *ch), digest, digest, *ch).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ch->used(), 0u);
}

TEST(ConnectRequestTest, APeerNamesItsFingerprintAndEpoch) {
  Challenger ch;
  const Sha256Digest digest = TokenDigest("secret");
  auto r = ParseConnectRequest(PeerProof(PeerParams("secret", 0xF1F2, 9), *ch), digest, digest, *ch);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->role, ConnectRequest::Role::kPeer);
  EXPECT_FALSE(r->hello);
  EXPECT_EQ(r->peer_fingerprint, 0xF1F2u);
  EXPECT_EQ(r->client_id, 0u);
  EXPECT_EQ(r->peer_epoch, 9u);
  EXPECT_EQ(r->credential, "cluster");
  EXPECT_EQ(ch->used(), 1u);
}

TEST(ConnectRequestTest, RefusesAMalformedTamperedOrReplayedPeerRequest) {
  Challenger ch;
  const Sha256Digest digest = TokenDigest("secret");
  // A peer request cut short lacks its proof.
  auto cut = ParseConnectRequest(PeerProof(PeerParams("secret", 1, 9), *ch, 40), digest, digest, *ch);
  EXPECT_EQ(cut.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cut.status().message().find("replication"), std::string::npos);
  EXPECT_EQ(ParseConnectRequest(PeerProof(PeerParams("secret", 1, 0), *ch), digest, digest, *ch).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseConnectRequest(PeerProof(PeerParams("other", 1, 9), *ch), digest, digest, *ch).status().code(),
            StatusCode::kUnauthenticated);
  // Another epoch or fingerprint than the proof was made for.
  std::vector<uint8_t> proof = PeerProof(PeerParams("secret", 1, 9), *ch);
  proof[offsetof(protocol::PeerConnectData, sender_epoch)] ^= 2;
  EXPECT_EQ(ParseConnectRequest(proof, digest, digest, *ch).status().code(), StatusCode::kUnauthenticated);
  proof = PeerProof(PeerParams("secret", 1, 9), *ch);
  proof[offsetof(protocol::PeerConnectData, sender_fingerprint)] ^= 2;
  EXPECT_EQ(ParseConnectRequest(proof, digest, digest, *ch).status().code(), StatusCode::kUnauthenticated);
  protocol::PeerConnectData p = protocol::MakePeerRequest(PeerParams("secret", 1, 9), nullptr);
  p.protocol_version += 1;
  EXPECT_EQ(ParseConnectRequest(Bytes(p), digest, digest, *ch).status().code(), StatusCode::kFailedPrecondition);
  // Replayed.
  proof = PeerProof(PeerParams("secret", 1, 9), *ch);
  ASSERT_TRUE(ParseConnectRequest(proof, digest, digest, *ch).ok());
  auto again = ParseConnectRequest(proof, digest, digest, *ch);
  EXPECT_NE(again.status().message().find("used before"), std::string::npos) << again.status();
}

TEST(ConnectRequestTest, OnlyTheClusterCredentialOpensAReplicationConnection) {
  Challenger ch;
  const Sha256Digest client = TokenDigest("client-secret");
  const Sha256Digest cluster = TokenDigest("cluster-secret");
  // A client's credential opens a client connection, not a peer's: its
  // holder cannot forge a primary's forward with a version of its choosing.
  auto forged = ParseConnectRequest(PeerProof(PeerParams("client-secret", 0xF1F2, 9), *ch), client, cluster, *ch);
  EXPECT_EQ(forged.status().code(), StatusCode::kUnauthenticated) << forged.status();
  EXPECT_NE(forged.status().message().find("cluster credential"), std::string::npos) << forged.status();
  auto peer = ParseConnectRequest(PeerProof(PeerParams("cluster-secret", 0xF1F2, 9), *ch), client, cluster, *ch);
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->role, ConnectRequest::Role::kPeer);
  // And the cluster credential is not a client's.
  EXPECT_EQ(ParseConnectRequest(Proof(Client("cluster-secret"), *ch), client, cluster, *ch).status().code(),
            StatusCode::kUnauthenticated);
  EXPECT_TRUE(ParseConnectRequest(Proof(Client("client-secret"), *ch), client, cluster, *ch).ok());
  // A client's proof with the peer magic put in is no peer's proof.
  std::vector<uint8_t> proof = Proof(Client("cluster-secret"), *ch);
  const uint32_t magic = protocol::kPeerConnectMagic;
  std::memcpy(proof.data(), &magic, sizeof magic);
  EXPECT_FALSE(ParseConnectRequest(proof, client, cluster, *ch).ok());
}

TEST(ConnectRequestTest, NamesTheClientCredentialAndRefusesARevokedOne) {
  Challenger ch;
  auto parsed = ClientCredentials::Parse("alice alice-secret\nbob bob-secret\n", "test");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  LiveClientCredentials live(*parsed);
  const Sha256Digest cluster = TokenDigest("cluster-secret");
  std::string refused;
  auto bob = ParseConnectRequest(Proof(Client("bob-secret"), *ch), *live.current(), cluster, *ch, &refused);
  ASSERT_TRUE(bob.ok()) << bob.status();
  EXPECT_EQ(bob->credential, "bob");
  EXPECT_EQ(bob->credential_digest, TokenDigest("bob-secret"));
  EXPECT_TRUE(refused.empty());

  auto only_alice = ClientCredentials::Parse("alice alice-secret\n", "test");
  ASSERT_TRUE(only_alice.ok());
  live.Replace(*only_alice);
  auto revoked = ParseConnectRequest(Proof(Client("bob-secret"), *ch), *live.current(), cluster, *ch, &refused);
  ASSERT_FALSE(revoked.ok());
  EXPECT_EQ(revoked.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(revoked.status().message(), "client credential bob was revoked");
  EXPECT_EQ(refused, "bob");
  auto unknown = ParseConnectRequest(Proof(Client("carol-secret"), *ch), *live.current(), cluster, *ch, &refused);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(), "invalid token");
  auto alice = ParseConnectRequest(Proof(Client("alice-secret"), *ch), *live.current(), cluster, *ch);
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->credential, "alice");
  // A client credential is no cluster credential.
  EXPECT_FALSE(
      ParseConnectRequest(PeerProof(PeerParams("alice-secret", 1, 9), *ch), *live.current(), cluster, *ch).ok());
}

TEST(ConnectRequestTest, WithPerServerCredentialsAPeerPresentsItsOwn) {
  Challenger ch;
  auto peers = ClientCredentials::Parse("srv-a server-a-secret\nsrv-b server-b-secret\n", "servers");
  ASSERT_TRUE(peers.ok()) << peers.status();
  ClientCredentials clients;
  ASSERT_TRUE(clients.Add("token", "client-secret").ok());
  // Each server's own credential opens a replication connection ...
  for (const char* own : {"server-a-secret", "server-b-secret"}) {
    auto peer = ParseConnectRequest(PeerProof(PeerParams(own, 0xF1F2, 9), *ch), clients, *peers, *ch);
    ASSERT_TRUE(peer.ok()) << peer.status();
    EXPECT_EQ(peer->role, ConnectRequest::Role::kPeer);
    // Named, for the check against the map's binding.
    EXPECT_EQ(peer->credential, std::string(own) == "server-a-secret" ? "srv-a" : "srv-b");
  }
  // ... a client's does not, and a server's is no client's.
  auto forged = ParseConnectRequest(PeerProof(PeerParams("client-secret", 0xF1F2, 9), *ch), clients, *peers, *ch);
  EXPECT_EQ(forged.status().code(), StatusCode::kUnauthenticated) << forged.status();
  EXPECT_EQ(ParseConnectRequest(Proof(Client("server-a-secret"), *ch), clients, *peers, *ch).status().code(),
            StatusCode::kUnauthenticated);
  EXPECT_TRUE(ParseConnectRequest(Proof(Client("client-secret"), *ch), clients, *peers, *ch).ok());
}

// The used set is bounded: beyond kMaxUsed nonces in one lifetime a good
// proof is refused UNAVAILABLE (retry later), and room comes back as the
// lifetime passes.
TEST(ConnectRequestTest, TheUsedChallengesAreBounded) {
  Challenger ch;
  for (size_t i = 0; i < ConnectChallenges::kMaxUsed; ++i) {
    const protocol::Nonce n = ch->Issue();
    ASSERT_TRUE(ch->Consume(n.data()).ok()) << i;
  }
  const Sha256Digest digest = TokenDigest("secret");
  auto full = ParseConnectRequest(Proof(Client("secret"), *ch), digest, digest, *ch);
  EXPECT_EQ(full.status().code(), StatusCode::kUnavailable) << full.status();
  ch.Advance(std::chrono::seconds(protocol::kChallengeLifetimeSeconds + 1));
  EXPECT_TRUE(ParseConnectRequest(Proof(Client("secret"), *ch), digest, digest, *ch).ok());
  EXPECT_EQ(ch->used(), 1u);
}

}  // namespace
}  // namespace rkv::server
