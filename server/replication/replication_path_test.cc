// The replication data path end to end, over the tcp transport: a primary
// and two backups in this process, each a Server with a FakePolicy, a
// client made by hand (RawConnection). What a write's acknowledgement
// promises: every backup of the route holds the write, with the primary's
// version, durably, before the client sees OK; or the coordinator was told
// that a backup failed; or the write fails and nothing is published.
#include <filesystem>
#include <memory>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/transport/factory.h"
#include "server/replication/replication_test_util.h"
#include "server/server.h"
#include "server/store/store.h"

namespace rkv::server {
namespace {

using testing::FakePolicy;
using testing::RawConnection;

constexpr char kClientToken[] = "replication-token";
// The servers' own credential: what a replication connection must present.
constexpr char kClusterToken[] = "replication-cluster-credential";
constexpr char kPrimary[] = "s-primary";
constexpr char kTester[] = "s-tester";  // a peer played by the test
constexpr uint64_t kTesterEpoch = 1;
constexpr uint64_t kMapVersion = 7;
constexpr uint32_t kShard = 3;

using GetResult = std::optional<std::pair<std::string, uint64_t>>;

class ReplicationPathTest : public ::testing::Test {
 protected:
  struct Node {
    std::string id;
    std::filesystem::path dir;
    FakePolicy policy;
    std::unique_ptr<Server> server;
  };

  void SetUp() override {
    base_ = std::filesystem::path(::testing::TempDir()) /
            ("rkv_replication_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(base_);
    std::filesystem::create_directories(base_);
    auto t = transport::CreateTransport(transport::Kind::kTcp, transport::Options());
    ASSERT_TRUE(t.ok()) << t.status();
    transport_ = std::move(t).value();
    primary_.id = kPrimary;
    backups_[0].id = "s-backup-a";
    backups_[1].id = "s-backup-b";
    for (Node* n : all()) {
      n->dir = base_ / n->id;
      Start(*n);
    }
    WireUp();
  }

  void TearDown() override {
    for (Node* n : all()) n->server.reset();
    std::filesystem::remove_all(base_);
  }

  std::vector<Node*> all() { return {&primary_, &backups_[0], &backups_[1]}; }

  ServerOptions Options(const Node& n) const {
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.data_dir = n.dir.string();
    o.memory_bytes = 8 << 20;
    o.max_keys = 1000;
    o.token = kClientToken;
    o.cluster_token = kClusterToken;
    o.ring_bytes = 4 << 20;
    // Generous: a test must never fail because the machine is slow.
    o.replication_timeout_ms = 30'000;
    if (threads_ != 0) o.threads = threads_;
    return o;
  }

  void Start(Node& n) {
    n.server.reset();
    auto s = Server::Start(Options(n), transport_.get(), &n.policy, n.id);
    ASSERT_TRUE(s.ok()) << s.status();
    n.server = std::move(s).value();
  }

  // The map: the primary routes to both backups; each backup knows the
  // primary (and the test's own peer) as servers of the map.
  void WireUp() {
    WriteRoute route;
    route.map_version = kMapVersion;
    route.shard = kShard;
    for (Node& b : backups_) {
      route.backups.push_back(ReplicaPeer{b.id, b.server->epoch(), b.server->address()});
      b.policy.AddPeer(kPrimary, primary_.server->epoch());
      b.policy.AddPeer(kTester, kTesterEpoch);
    }
    primary_.policy.SetRoute(route);
  }

  std::unique_ptr<RawConnection> Client(const Node& n) {
    auto c = RawConnection::Connect(transport_.get(), n.server->address(), kClientToken);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  std::unique_ptr<RawConnection> Peer(const Node& n) {
    auto c = RawConnection::ConnectAsPeer(transport_.get(), n.server->address(), kClusterToken, kTester, kTesterEpoch);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  GetResult Get(const Node& n, std::string_view key) {
    auto c = Client(n);
    if (c == nullptr) return std::nullopt;
    auto r = c->Get(key);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::nullopt;
  }

  std::filesystem::path base_;
  uint32_t threads_ = 0;  // polling threads of a server started from now on (0: the default)
  std::unique_ptr<transport::Transport> transport_;
  Node primary_;
  Node backups_[2];
};

StatusCode Code(const protocol::ReplyMsg& r) { return static_cast<StatusCode>(r.status_code); }

TEST_F(ReplicationPathTest, PutAndDeleteReachEveryBackupWithThePrimarysVersionBeforeTheReply) {
  auto client = Client(primary_);
  ASSERT_NE(client, nullptr);
  // Versions on the primary run ahead of anything the backups assigned.
  for (int i = 0; i < 3; ++i) {
    auto r = client->Send(protocol::Op::kPut, "warm-" + std::to_string(i), "w", 0, 100 + i);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  auto put = client->Send(protocol::Op::kPut, "k", "value-1", 0, 1);
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(Code(*put), StatusCode::kOk) << put->message;
  const uint64_t version = put->version;
  EXPECT_GE(version, 4u);
  for (Node& b : backups_) {
    EXPECT_EQ(Get(b, "k"), GetResult(std::pair(std::string("value-1"), version))) << b.id;
    const std::vector<std::pair<std::string, uint64_t>> accepted = b.policy.accepted();
    ASSERT_FALSE(accepted.empty());
    EXPECT_EQ(accepted.back(), std::pair(std::string(kPrimary), kMapVersion));  // sender and its map version
  }
  EXPECT_EQ(Get(primary_, "k"), GetResult(std::pair(std::string("value-1"), version)));

  auto del = client->Send(protocol::Op::kDelete, "k", "", 0, 2);
  ASSERT_TRUE(del.ok()) << del.status();
  ASSERT_EQ(Code(*del), StatusCode::kOk) << del->message;
  EXPECT_EQ(del->version, version);
  for (Node& b : backups_) EXPECT_EQ(Get(b, "k"), GetResult()) << b.id;
  EXPECT_EQ(Get(primary_, "k"), GetResult());

  // A DELETE of an absent key stays local.
  auto missing = client->Send(protocol::Op::kDelete, "absent", "", 0, 3);
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_EQ(Code(*missing), StatusCode::kNotFound);

  const ServerStats p = primary_.server->Stats();
  EXPECT_EQ(p.forwarded_writes, 5u);  // 4 PUTs and 1 DELETE
  EXPECT_EQ(p.backup_failures, 0u);
  for (Node& b : backups_) {
    const ServerStats s = b.server->Stats();
    EXPECT_EQ(s.replica_writes, 5u) << b.id;
    EXPECT_EQ(s.keys, 3u) << b.id;
  }
  EXPECT_TRUE(primary_.policy.reports().empty());

  // Durable, with the primary's versions: each backup's store, reopened,
  // holds the warm-up keys with their versions and a high-water mark at
  // least the primary's, so versions it hands out as a primary would
  // continue above every version it holds.
  for (Node& b : backups_) {
    b.server.reset();
    auto store = Store::Open(b.dir.string(), Durability::kWal);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_GE((*store)->version_high_water(), version) << b.id;
    auto k = (*store)->Get("k");
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_FALSE(k->has_value());
    auto warm = (*store)->Get("warm-2");
    ASSERT_TRUE(warm.ok()) << warm.status();
    ASSERT_TRUE(warm->has_value());
    EXPECT_EQ((*warm)->version, version - 1);
  }
}

TEST_F(ReplicationPathTest, AStoppedBackupIsReportedAndTheWriteGoesOnWhenTheCoordinatorAgrees) {
  auto client = Client(primary_);
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(Code(*client->Send(protocol::Op::kPut, "a", "1", 0, 1)), StatusCode::kOk);  // connections open
  backups_[1].server.reset();
  auto put = client->Send(protocol::Op::kPut, "b", "2", 0, 2);
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(Code(*put), StatusCode::kOk) << put->message;
  const std::vector<FakePolicy::Report> reports = primary_.policy.reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].shard, kShard);
  EXPECT_EQ(reports[0].backup.server_id, backups_[1].id);
  EXPECT_NE(reports[0].reason.find(backups_[1].id), std::string::npos) << reports[0].reason;
  EXPECT_EQ(Get(backups_[0], "b"), GetResult(std::pair(std::string("2"), put->version)));
  EXPECT_EQ(Get(primary_, "b"), GetResult(std::pair(std::string("2"), put->version)));
  EXPECT_EQ(primary_.server->Stats().backup_failures, 1u);
}

TEST_F(ReplicationPathTest, AFailedBackupTheCoordinatorCannotBeToldOfFailsTheWriteAndPublishesNothing) {
  auto client = Client(primary_);
  ASSERT_NE(client, nullptr);
  backups_[1].server.reset();
  primary_.policy.SetReportStatus(Unavailable("coordinator unreachable"));
  auto put = client->Send(protocol::Op::kPut, "k", "v", 0, 1);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(Code(*put), StatusCode::kUnavailable);
  EXPECT_NE(std::string(put->message).find("outcome unknown"), std::string::npos) << put->message;
  EXPECT_EQ(put->reason, static_cast<uint8_t>(Reason::kOutcomeUnknown));
  EXPECT_EQ(Get(primary_, "k"), GetResult());
  EXPECT_EQ(primary_.server->Stats().puts, 0u);

  // Not remembered as the request's answer: once the coordinator can be
  // told, a retry of the same request is applied.
  primary_.policy.SetReportStatus(Status::Ok());
  auto retry = client->Send(protocol::Op::kPut, "k", "v", 0, 1);
  ASSERT_TRUE(retry.ok()) << retry.status();
  ASSERT_EQ(Code(*retry), StatusCode::kOk) << retry->message;
  EXPECT_EQ(Get(primary_, "k"), GetResult(std::pair(std::string("v"), retry->version)));
  EXPECT_EQ(Get(backups_[0], "k"), GetResult(std::pair(std::string("v"), retry->version)));
}

TEST_F(ReplicationPathTest, NoRouteMeansAnErrorAndNothingWritten) {
  primary_.policy.SetRouteStatus(FailedPrecondition("not the primary of shard 3 in map version 7"));
  auto client = Client(primary_);
  ASSERT_NE(client, nullptr);
  auto put = client->Send(protocol::Op::kPut, "k", "v", 0, 1);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(Code(*put), StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(put->message).find("not the primary"), std::string::npos);
  EXPECT_EQ(Get(primary_, "k"), GetResult());
  for (Node& b : backups_) EXPECT_EQ(b.server->Stats().replica_writes, 0u);
}

TEST_F(ReplicationPathTest, AReplayedClientRequestIsNotForwardedAgain) {
  auto client = Client(primary_);
  ASSERT_NE(client, nullptr);
  auto first = client->Send(protocol::Op::kPut, "k", "v", 0, 42);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(Code(*first), StatusCode::kOk);
  auto again = client->Send(protocol::Op::kPut, "k", "v", 0, 42);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Code(*again), StatusCode::kOk);
  EXPECT_EQ(again->version, first->version);
  EXPECT_EQ(primary_.server->Stats().forwarded_writes, 1u);
  for (Node& b : backups_) {
    const ServerStats s = b.server->Stats();
    EXPECT_EQ(s.replica_writes, 1u);
    EXPECT_EQ(s.replica_stale, 0u);
    EXPECT_EQ(b.policy.accepted().size(), 1u);
  }
}

TEST_F(ReplicationPathTest, APeerNotInTheMapIsRefusedAtTheHandshake) {
  auto stranger =
      RawConnection::ConnectAsPeer(transport_.get(), backups_[0].server->address(), kClusterToken, "s-stranger", 1);
  ASSERT_FALSE(stranger.ok());
  EXPECT_EQ(stranger.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(stranger.status().message().find("not a server of the current cluster map"), std::string::npos)
      << stranger.status();
  // A known server id with another epoch is another incarnation.
  auto old = RawConnection::ConnectAsPeer(transport_.get(), backups_[0].server->address(), kClusterToken, kTester, 2);
  EXPECT_EQ(old.status().code(), StatusCode::kPermissionDenied);
}

TEST_F(ReplicationPathTest, AStandaloneServerRefusesEveryPeer) {
  Node standalone;
  standalone.id = "s-standalone";
  standalone.dir = base_ / standalone.id;
  auto s = Server::Start(Options(standalone), transport_.get());
  ASSERT_TRUE(s.ok()) << s.status();
  auto peer = RawConnection::ConnectAsPeer(transport_.get(), (*s)->address(), kClusterToken, kTester, kTesterEpoch);
  ASSERT_FALSE(peer.ok());
  EXPECT_EQ(peer.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(peer.status().message().find("not in a cluster"), std::string::npos) << peer.status();
}

// The forgery a client credential once allowed: a replication connection
// in a primary's name (its fingerprint and epoch are public in the map),
// then a forward with a version of the forger's choosing, which the
// backup would install and a later real write of the key would not
// replace. Only the cluster credential opens a replication connection.
TEST_F(ReplicationPathTest, AClientCredentialCannotForgeAPrimarysForward) {
  auto forger = RawConnection::ConnectAsPeer(transport_.get(), backups_[0].server->address(), kClientToken, kTester,
                                             kTesterEpoch);
  ASSERT_FALSE(forger.ok());
  // A refused connect is PERMISSION_DENIED, the server's reason in its text.
  EXPECT_EQ(forger.status().code(), StatusCode::kPermissionDenied) << forger.status();
  EXPECT_NE(forger.status().message().find("invalid cluster credential"), std::string::npos) << forger.status();
  EXPECT_EQ(Get(backups_[0], "k"), GetResult());
  EXPECT_EQ(backups_[0].server->Stats().replica_writes, 0u);
  // A real write of the key then reaches every replica with the primary's
  // version.
  auto client = Client(primary_);
  ASSERT_NE(client, nullptr);
  auto put = client->Send(protocol::Op::kPut, "k", "real", 0, 1);
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(Code(*put), StatusCode::kOk) << put->message;
  for (Node& b : backups_) EXPECT_EQ(Get(b, "k"), GetResult(std::make_pair(std::string("real"), put->version))) << b.id;
}

TEST_F(ReplicationPathTest, OpsOfTheOtherRoleAreRefused) {
  auto client = Client(backups_[0]);
  ASSERT_NE(client, nullptr);
  auto forged = client->Send(protocol::Op::kReplicatePut, "k", "v", 5, kMapVersion);
  ASSERT_TRUE(forged.ok()) << forged.status();
  EXPECT_EQ(Code(*forged), StatusCode::kPermissionDenied);
  auto peer = Peer(backups_[0]);
  ASSERT_NE(peer, nullptr);
  auto client_op = peer->Send(protocol::Op::kPut, "k", "v", 0, 1);
  ASSERT_TRUE(client_op.ok()) << client_op.status();
  EXPECT_EQ(Code(*client_op), StatusCode::kPermissionDenied);
  EXPECT_EQ(Get(backups_[0], "k"), GetResult());
  // The connections live on: a well-formed replica op still works.
  auto good = peer->Send(protocol::Op::kReplicatePut, "k", "v", 5, kMapVersion);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(Code(*good), StatusCode::kOk) << good->message;
  EXPECT_EQ(good->version, 5u);
}

TEST_F(ReplicationPathTest, AMalformedForwardIsRefusedAndCounted) {
  auto peer = Peer(backups_[0]);
  ASSERT_NE(peer, nullptr);
  auto torn = peer->Send(protocol::Op::kReplicatePut, "k", "v", 9, kMapVersion, /*corrupt=*/true);
  ASSERT_TRUE(torn.ok()) << torn.status();
  EXPECT_EQ(Code(*torn), StatusCode::kDataLoss);
  auto unversioned = peer->Send(protocol::Op::kReplicatePut, "k", "v", 0, kMapVersion);
  ASSERT_TRUE(unversioned.ok()) << unversioned.status();
  EXPECT_EQ(Code(*unversioned), StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(unversioned->message).find("version 0"), std::string::npos);
  EXPECT_EQ(backups_[0].server->Stats().replica_refused, 2u);
  EXPECT_EQ(Get(backups_[0], "k"), GetResult());

  // The policy's refusal is the reply.
  backups_[0].policy.SetAcceptStatus(FailedPrecondition("not a backup of shard 3 in map version 8"));
  auto refused = peer->Send(protocol::Op::kReplicatePut, "k", "v", 9, kMapVersion);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(Code(*refused), StatusCode::kFailedPrecondition);
  EXPECT_EQ(backups_[0].server->Stats().replica_refused, 3u);
  EXPECT_EQ(Get(backups_[0], "k"), GetResult());
}

TEST_F(ReplicationPathTest, AnOlderForwardAfterANewerOneChangesNothing) {
  auto peer = Peer(backups_[0]);
  ASSERT_NE(peer, nullptr);
  auto newer = peer->Send(protocol::Op::kReplicatePut, "k", "new", 10, kMapVersion);
  ASSERT_TRUE(newer.ok()) << newer.status();
  ASSERT_EQ(Code(*newer), StatusCode::kOk) << newer->message;
  EXPECT_EQ(newer->version, 10u);
  for (const uint64_t v : {7u, 10u}) {  // older, then a repeat
    auto stale = peer->Send(protocol::Op::kReplicatePut, "k", "old", v, kMapVersion);
    ASSERT_TRUE(stale.ok()) << stale.status();
    EXPECT_EQ(Code(*stale), StatusCode::kOk) << stale->message;
    EXPECT_EQ(stale->version, 10u);
  }
  auto old_delete = peer->Send(protocol::Op::kReplicateDelete, "k", "", 9, kMapVersion);
  ASSERT_TRUE(old_delete.ok()) << old_delete.status();
  EXPECT_EQ(Code(*old_delete), StatusCode::kOk);
  EXPECT_EQ(Get(backups_[0], "k"), GetResult(std::pair(std::string("new"), 10u)));
  EXPECT_EQ(backups_[0].server->Stats().replica_stale, 3u);

  auto del = peer->Send(protocol::Op::kReplicateDelete, "k", "", 10, kMapVersion);
  ASSERT_TRUE(del.ok()) << del.status();
  EXPECT_EQ(Code(*del), StatusCode::kOk);
  EXPECT_EQ(Get(backups_[0], "k"), GetResult());
  EXPECT_EQ(backups_[0].server->Stats().replica_writes, 2u);
}

// A primary whose lease ran out (it may have been frozen while its shards
// moved) must not acknowledge: the backups may hold the write, the primary
// publishes nothing, and the reply says the outcome is unknown.
TEST_F(ReplicationPathTest, AnExpiredLeaseRefusesToPublishWhatTheBackupsGot) {
  auto client = Client(primary_);
  ASSERT_NE(client, nullptr);
  // Valid when the write is routed, expired at its publish.
  primary_.policy.SetLeaseStatus(Unavailable("lease on the cluster map expired 5 ms ago"), 1);
  auto put = client->Send(protocol::Op::kPut, "k", "v1", 0, 1);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(Code(*put), StatusCode::kUnavailable);
  EXPECT_NE(std::string(put->message).find("lease expired: outcome unknown"), std::string::npos) << put->message;
  EXPECT_EQ(put->reason, static_cast<uint8_t>(Reason::kOutcomeUnknown));
  EXPECT_EQ(Get(primary_, "k"), GetResult());
  // Forwarded before the check: each backup holds the unacknowledged write.
  uint64_t forwarded_version = 0;
  for (Node& b : backups_) {
    const GetResult got = Get(b, "k");
    ASSERT_TRUE(got.has_value()) << b.id;
    EXPECT_EQ(got->first, "v1");
    forwarded_version = got->second;
  }
  ServerStats stats = primary_.server->Stats();
  EXPECT_EQ(stats.lease_refusals, 1u);
  EXPECT_EQ(stats.puts, 0u);
  EXPECT_EQ(stats.keys, 0u);

  // A DELETE is refused the same way, also when the key is absent here.
  primary_.policy.SetLeaseStatus(Unavailable("lease on the cluster map expired 5 ms ago"), 1);
  auto del = client->Send(protocol::Op::kDelete, "k", "", 0, 2);
  ASSERT_TRUE(del.ok()) << del.status();
  EXPECT_EQ(Code(*del), StatusCode::kUnavailable);
  EXPECT_NE(std::string(del->message).find("lease expired"), std::string::npos) << del->message;
  EXPECT_EQ(del->reason, static_cast<uint8_t>(Reason::kOutcomeUnknown));
  EXPECT_EQ(primary_.server->Stats().lease_refusals, 2u);

  // A lease already expired when the write arrives refuses it before
  // anything is forwarded, with Reason::kNoLease, which says nothing was
  // applied: the client resends it (client/refusal.h).
  primary_.policy.SetLeaseStatus(Unavailable("lease on the cluster map expired 5 ms ago"));
  const uint64_t forwarded_before = primary_.server->Stats().forwarded_writes;
  auto early = client->Send(protocol::Op::kPut, "k", "v0", 0, 4);
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(Code(*early), StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(early->message).find("not the primary of shard"), std::string::npos) << early->message;
  EXPECT_NE(std::string(early->message).find("no lease"), std::string::npos) << early->message;
  EXPECT_NE(std::string(early->message).find("nothing applied"), std::string::npos) << early->message;
  EXPECT_EQ(early->reason, static_cast<uint8_t>(Reason::kNoLease));
  EXPECT_NE(early->map_version, 0u);
  EXPECT_EQ(primary_.server->Stats().forwarded_writes, forwarded_before);
  EXPECT_EQ(primary_.server->Stats().lease_refusals, 3u);

  // Once the lease is renewed: the refusal was not remembered, so a retry
  // of request 1 is applied, and a new write of the key gets a version
  // above the refused one, so the backups take it.
  primary_.policy.SetLeaseStatus(Status::Ok());
  auto retry = client->Send(protocol::Op::kPut, "k", "v1", 0, 1);
  ASSERT_TRUE(retry.ok()) << retry.status();
  ASSERT_EQ(Code(*retry), StatusCode::kOk) << retry->message;
  EXPECT_GT(retry->version, forwarded_version);
  auto next = client->Send(protocol::Op::kPut, "k", "v2", 0, 3);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_EQ(Code(*next), StatusCode::kOk) << next->message;
  for (Node* n : all()) EXPECT_EQ(Get(*n, "k"), GetResult(std::pair(std::string("v2"), next->version))) << n->id;
}

// Without a backup (R = 1, or none left) the lease is checked all the same.
TEST_F(ReplicationPathTest, AnExpiredLeaseRefusesAWriteWithNoBackup) {
  primary_.policy.SetRoute(WriteRoute{kMapVersion, kShard, {}});
  primary_.policy.SetLeaseStatus(Unavailable("lease on the cluster map expired"), 1);
  auto client = Client(primary_);
  ASSERT_NE(client, nullptr);
  auto put = client->Send(protocol::Op::kPut, "k", "v", 0, 1);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(Code(*put), StatusCode::kUnavailable);
  EXPECT_EQ(Get(primary_, "k"), GetResult());
  primary_.policy.SetLeaseStatus(Status::Ok());
  auto again = client->Send(protocol::Op::kPut, "k", "v", 0, 1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Code(*again), StatusCode::kOk) << again->message;
  EXPECT_EQ(Get(primary_, "k"), GetResult(std::pair(std::string("v"), again->version)));
}

// The lease covers the map the primary holds at the check, which may be
// newer than the one its write was routed by: that map must still make it
// the primary, with no backup the write did not reach.
TEST_F(ReplicationPathTest, AMapChangedDuringTheWriteRefusesToPublishIt) {
  auto client = Client(primary_);
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(Code(*client->Send(protocol::Op::kPut, "warm", "w", 0, 1)), StatusCode::kOk);
  backups_[1].server.reset();  // its forward fails, and is reported mid-write
  WriteRoute added{kMapVersion + 1, kShard,
                   {ReplicaPeer{backups_[0].id, backups_[0].server->epoch(), backups_[0].server->address()},
                    ReplicaPeer{"s-newcomer", 1, "127.0.0.1:1"}}};
  primary_.policy.SetRouteAfterReport(added);
  auto put = client->Send(protocol::Op::kPut, "k", "v", 0, 2);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(Code(*put), StatusCode::kUnavailable);
  EXPECT_NE(std::string(put->message).find("map changed mid-write, outcome unknown: map version"), std::string::npos)
      << put->message;
  EXPECT_NE(std::string(put->message).find("s-newcomer"), std::string::npos) << put->message;
  EXPECT_EQ(put->reason, static_cast<uint8_t>(Reason::kOutcomeUnknown));
  EXPECT_EQ(Get(primary_, "k"), GetResult());

  // A map that only added a syncing server meanwhile (re-replication
  // starting): the write publishes. That server's catch-up cut waits for
  // this write (writes_gate_) and lists it.
  primary_.policy.SetRoute(WriteRoute{kMapVersion, kShard,
                                      {ReplicaPeer{backups_[0].id, backups_[0].server->epoch(),
                                                   backups_[0].server->address()},
                                       ReplicaPeer{backups_[1].id, 1, "127.0.0.1:1"}}});  // fails at once
  WriteRoute syncing_added{kMapVersion + 1, kShard,
                           {ReplicaPeer{backups_[0].id, backups_[0].server->epoch(), backups_[0].server->address()},
                            ReplicaPeer{"s-newcomer", 1, "127.0.0.1:1", /*syncing=*/true}}};
  primary_.policy.SetRouteAfterReport(syncing_added);
  auto kept = client->Send(protocol::Op::kPut, "s", "v", 0, 4);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(Code(*kept), StatusCode::kOk) << kept->message;
  EXPECT_EQ(Get(primary_, "s"), GetResult(std::pair(std::string("v"), kept->version)));

  // A map that moved the shard away meanwhile.
  primary_.policy.SetRoute(WriteRoute{kMapVersion, kShard,
                                      {ReplicaPeer{backups_[1].id, 1, "127.0.0.1:1"}}});  // fails at once
  primary_.policy.SetRouteAfterReport(FailedPrecondition("not the primary of shard 3 in map version 9"));
  auto moved = client->Send(protocol::Op::kPut, "j", "v", 0, 3);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(Code(*moved), StatusCode::kUnavailable);
  EXPECT_NE(std::string(moved->message).find("not the primary of shard 3"), std::string::npos) << moved->message;
  EXPECT_EQ(Get(primary_, "j"), GetResult());
  EXPECT_EQ(primary_.server->Stats().lease_refusals, 0u);
}

// A backup promoted to primary (the map now routes the shard's writes to
// it) assigns versions above every version it installed as a backup, even
// when those ran far ahead of its own writes.
TEST_F(ReplicationPathTest, APromotedBackupAssignsVersionsAboveWhatItReceived) {
  auto client = Client(primary_);
  ASSERT_NE(client, nullptr);
  uint64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    auto r = client->Send(protocol::Op::kPut, "k", "v" + std::to_string(i), 0, 10 + i);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(Code(*r), StatusCode::kOk) << r->message;
    last = r->version;
  }
  // A forward from another primary's map far ahead in versions.
  auto peer = Peer(backups_[0]);
  ASSERT_NE(peer, nullptr);
  auto far = peer->Send(protocol::Op::kReplicatePut, "other", "x", last + 1000, kMapVersion);
  ASSERT_TRUE(far.ok()) << far.status();
  ASSERT_EQ(Code(*far), StatusCode::kOk) << far->message;

  // The primary is gone; backup a is promoted with b as its only backup.
  primary_.server.reset();
  Node& promoted = backups_[0];
  promoted.policy.SetRoute(WriteRoute{kMapVersion + 1, kShard,
                                      {ReplicaPeer{backups_[1].id, backups_[1].server->epoch(),
                                                   backups_[1].server->address()}}});
  backups_[1].policy.AddPeer(promoted.id, promoted.server->epoch());
  auto new_client = Client(promoted);
  ASSERT_NE(new_client, nullptr);
  auto put = new_client->Send(protocol::Op::kPut, "k", "after", 0, 1);
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(Code(*put), StatusCode::kOk) << put->message;
  EXPECT_GT(put->version, last + 1000);
  EXPECT_EQ(Get(promoted, "k"), GetResult(std::pair(std::string("after"), put->version)));
  EXPECT_EQ(Get(backups_[1], "k"), GetResult(std::pair(std::string("after"), put->version)));
}

// Every server is a primary of some shards and a backup of others: two
// servers forwarding to each other at once must never wait for each other.
TEST_F(ReplicationPathTest, TwoServersThatAreEachOthersBackupsWriteConcurrently) {
  Node& a = backups_[0];
  Node& b = backups_[1];
  a.policy.AddPeer(b.id, b.server->epoch());
  b.policy.AddPeer(a.id, a.server->epoch());
  a.policy.SetRoute(WriteRoute{kMapVersion, 1, {ReplicaPeer{b.id, b.server->epoch(), b.server->address()}}});
  b.policy.SetRoute(WriteRoute{kMapVersion, 2, {ReplicaPeer{a.id, a.server->epoch(), a.server->address()}}});
  constexpr int kWrites = 40;
  std::vector<std::string> failures[2];
  const auto writer = [&](Node& n, std::vector<std::string>* failed) {
    auto c = RawConnection::Connect(transport_.get(), n.server->address(), kClientToken);
    if (!c.ok()) {
      failed->push_back(c.status().ToString());
      return;
    }
    for (int i = 0; i < kWrites; ++i) {
      auto r = (*c)->Send(protocol::Op::kPut, n.id + "-" + std::to_string(i), "v", 0, i + 1);
      if (!r.ok()) {
        failed->push_back(r.status().ToString());
      } else if (Code(*r) != StatusCode::kOk) {
        failed->push_back(r->message);
      }
    }
  };
  std::thread ta(writer, std::ref(a), &failures[0]);
  std::thread tb(writer, std::ref(b), &failures[1]);
  ta.join();
  tb.join();
  EXPECT_TRUE(failures[0].empty()) << failures[0].front();
  EXPECT_TRUE(failures[1].empty()) << failures[1].front();
  for (Node* n : {&a, &b}) {
    const ServerStats s = n->server->Stats();
    EXPECT_EQ(s.backup_failures, 0u) << n->id;
    EXPECT_EQ(s.forwarded_writes, uint64_t{kWrites}) << n->id;
    EXPECT_EQ(s.replica_writes, uint64_t{kWrites}) << n->id;
    EXPECT_EQ(s.keys, uint64_t{2 * kWrites}) << n->id;
    EXPECT_TRUE(n->policy.reports().empty()) << n->id;
  }
}

TEST_F(ReplicationPathTest, WritesOnSeveralPollersReachEveryBackupWithTheirVersions) {
  // A primary with three client pollers (and so three replication lanes):
  // clients on different pollers write their own keys and one shared key at
  // once; every acknowledged write is on both backups with the version the
  // primary gave it, and no version is given twice.
  threads_ = 4;
  Start(primary_);
  WireUp();
  constexpr int kClients = 3;
  constexpr int kWrites = 30;
  struct Acked {
    std::string key;
    std::string value;
    uint64_t version;
  };
  std::vector<Acked> acked[kClients];
  std::vector<std::string> failures[kClients];
  std::vector<std::thread> writers;
  for (int c = 0; c < kClients; ++c) {
    writers.emplace_back([&, c] {
      auto conn = RawConnection::Connect(transport_.get(), primary_.server->address(), kClientToken);
      if (!conn.ok()) {
        failures[c].push_back(conn.status().ToString());
        return;
      }
      for (int i = 0; i < kWrites; ++i) {
        const std::string key = i % 5 == 0 ? "shared" : "c" + std::to_string(c) + "-" + std::to_string(i);
        const std::string value = "v" + std::to_string(c) + "-" + std::to_string(i);
        auto r = (*conn)->Send(protocol::Op::kPut, key, value, 0, i + 1);
        if (!r.ok()) {
          failures[c].push_back(r.status().ToString());
        } else if (Code(*r) != StatusCode::kOk) {
          failures[c].push_back(r->message);
        } else {
          acked[c].push_back(Acked{key, value, r->version});
        }
      }
    });
  }
  for (auto& w : writers) w.join();
  std::set<uint64_t> versions;
  std::map<std::string, Acked> latest;  // per key, the acknowledged write with the highest version
  for (int c = 0; c < kClients; ++c) {
    EXPECT_TRUE(failures[c].empty()) << failures[c].front();
    for (const Acked& a : acked[c]) {
      EXPECT_TRUE(versions.insert(a.version).second) << "version " << a.version << " given twice";
      auto [it, fresh] = latest.emplace(a.key, a);
      if (!fresh && it->second.version < a.version) it->second = a;
    }
  }
  EXPECT_EQ(versions.size(), size_t{kClients * kWrites});
  for (const auto& [key, want] : latest) {
    for (Node* n : {&primary_, &backups_[0], &backups_[1]}) {
      EXPECT_EQ(Get(*n, key), GetResult(std::pair(want.value, want.version))) << key << " on " << n->id;
    }
  }
  EXPECT_EQ(primary_.server->Stats().backup_failures, 0u);
  EXPECT_TRUE(primary_.policy.reports().empty());
}

}  // namespace
}  // namespace rkv::server
