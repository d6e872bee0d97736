// The Replicator against real servers over tcp: connections are opened
// once and reused, replaced for a new incarnation, checked against the
// map's epoch, and every failure names the backup. A backup whose replies
// are held back by the fault transport past one replication timeout is
// kept while the map shows it UP, and given up once the map shows it DOWN
// or after a second timeout (ReplicatorOptions::is_down).
#include "server/replication/replicator.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/layout.h"
#include "common/record.h"
#include "common/transport/factory.h"
#include "common/transport/fault/fault_transport.h"
#include "server/replication/replication_test_util.h"
#include "server/server.h"
#include "tests/wait_for.h"

namespace rkv::server {
namespace {

using testing::FakePolicy;
using testing::RawConnection;
using transport::fault::FaultTransport;
using SteadyClock = std::chrono::steady_clock;

constexpr char kReplicatorToken[] = "replicator-token";
constexpr char kSelf[] = "s-self";
constexpr uint64_t kSelfEpoch = 4;

class ReplicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("rkv_replicator_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    auto t = transport::CreateTransport(transport::Kind::kTcp, transport::Options());
    ASSERT_TRUE(t.ok()) << t.status();
    transport_ = std::move(t).value();
    options_.listen = "127.0.0.1:0";
    options_.data_dir = dir_.string();
    options_.memory_bytes = 8 << 20;
    options_.max_keys = 1000;
    options_.token = kReplicatorToken;
    policy_.AddPeer(kSelf, kSelfEpoch);
    StartBackup();
  }
  void TearDown() override {
    replicator_.reset();
    backup_.reset();
    std::filesystem::remove_all(dir_);
  }

  void StartBackup() {
    backup_.reset();
    auto s = Server::Start(options_, transport_.get(), &policy_, "s-backup");
    ASSERT_TRUE(s.ok()) << s.status();
    backup_ = std::move(s).value();
  }

  ReplicatorOptions Options() const {
    ReplicatorOptions o;
    o.self_id = kSelf;
    o.self_epoch = kSelfEpoch;
    o.token = kReplicatorToken;
    o.timeout = std::chrono::seconds(30);  // generous: never the point of a test
    o.max_record_bytes = 4096;
    return o;
  }
  void MakeReplicator() {
    auto r = Replicator::Create(transport_.get(), Options());
    ASSERT_TRUE(r.ok()) << r.status();
    replicator_ = std::move(r).value();
  }

  // A tcp transport of its own behind a FaultTransport, for the primary's
  // side only (the backup keeps the fixture's transport_): a rule on it
  // delays what the primary receives, the backup's replies.
  std::unique_ptr<FaultTransport> FaultyTransport() {
    auto t = transport::CreateTransport(transport::Kind::kTcp, transport::Options());
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::make_unique<FaultTransport>(std::move(t).value()) : nullptr;
  }

  // What the backup's table holds for `key`, read by a client of its own.
  std::optional<std::pair<std::string, uint64_t>> BackupHolds(std::string_view key) {
    auto c = RawConnection::Connect(transport_.get(), backup_->address(), kReplicatorToken);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return std::nullopt;
    auto got = (*c)->Get(key);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : std::nullopt;
  }

  ReplicaPeer Backup() const { return ReplicaPeer{"s-backup", backup_->epoch(), backup_->address()}; }

  std::vector<uint8_t> Record(std::string_view key, std::string_view value, uint64_t version) {
    std::vector<uint8_t> r(layout::BlockBytes(key.size(), value.size()));
    r.resize(EncodeRecord(r, key, value, version, 0));
    return r;
  }

  std::filesystem::path dir_;
  ServerOptions options_;
  FakePolicy policy_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<Server> backup_;
  std::unique_ptr<Replicator> replicator_;
};

TEST_F(ReplicatorTest, RefusesIncompleteOptions) {
  ReplicatorOptions o = Options();
  o.self_id.clear();
  EXPECT_EQ(Replicator::Create(transport_.get(), o).status().code(), StatusCode::kInvalidArgument);
  o = Options();
  o.self_epoch = 0;
  EXPECT_EQ(Replicator::Create(transport_.get(), o).status().code(), StatusCode::kInvalidArgument);
  o = Options();
  o.max_record_bytes = 0;
  EXPECT_EQ(Replicator::Create(transport_.get(), o).status().code(), StatusCode::kInvalidArgument);
  o = Options();
  o.lanes = 0;
  EXPECT_EQ(Replicator::Create(transport_.get(), o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ReplicatorTest, OneConnectionPerBackupIsKeptAndReplacedForANewIncarnation) {
  MakeReplicator();
  for (uint64_t v = 1; v <= 3; ++v) {
    const std::vector<Status> acks =
        replicator_->Forward({Backup()}, 7, protocol::Op::kReplicatePut, Record("k", "v" + std::to_string(v), v));
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_TRUE(acks[0].ok()) << acks[0];
  }
  EXPECT_EQ(replicator_->connections(), 1u);
  EXPECT_EQ(backup_->Stats().connections_accepted, 1u);
  EXPECT_EQ(backup_->Stats().replica_writes, 3u);

  // The backup restarts: a new epoch in the map means a new connection.
  StartBackup();
  const std::vector<Status> acks =
      replicator_->Forward({Backup()}, 8, protocol::Op::kReplicatePut, Record("k", "v4", 4));
  EXPECT_TRUE(acks[0].ok()) << acks[0];
  EXPECT_EQ(replicator_->connections(), 1u);
  EXPECT_EQ(backup_->Stats().replica_writes, 1u);
}

TEST_F(ReplicatorTest, ForwardsFromSeveralThreadsAreInFlightAtOnceOnTheirOwnConnections) {
  // The backup holds the first forward (of "first") until a second
  // connection from this server reaches its handshake: with one lane, the
  // other threads' forwards would wait for the first and none would come.
  constexpr int kThreads = 4;
  ReplicatorOptions o = Options();
  o.lanes = kThreads;
  auto made = Replicator::Create(transport_.get(), o);
  ASSERT_TRUE(made.ok()) << made.status();
  replicator_ = std::move(made).value();
  std::atomic<bool> second_connection_seen{false};
  policy_.SetAcceptHook([&](std::string_view key) {
    if (key != "first") return;
    // The deadline is a hang guard only: a second handshake comes at once
    // when it can.
    second_connection_seen = static_cast<bool>(rkv::testing::WaitFor(
        "a second handshake", [&] { return policy_.peers_looked_up() >= 2; }, std::chrono::seconds(30),
        std::chrono::milliseconds(1)));
  });
  std::vector<std::vector<Status>> acks(kThreads + 1);
  std::thread first([&] {
    acks[0] = replicator_->Forward({Backup()}, 7, protocol::Op::kReplicatePut, Record("first", "v", 1));
  });
  // The first forward's connection is open once its handshake was judged.
  ASSERT_TRUE(rkv::testing::WaitFor("the first forward's handshake", [&] { return policy_.peers_looked_up() >= 1; }))
      << "the first forward never connected";
  std::vector<std::thread> others;
  for (int t = 1; t <= kThreads; ++t) {
    others.emplace_back([&, t] {
      acks[t] = replicator_->Forward({Backup()}, 7, protocol::Op::kReplicatePut,
                                     Record("key-" + std::to_string(t), "v", 1));
    });
  }
  first.join();
  for (auto& th : others) th.join();
  EXPECT_TRUE(second_connection_seen) << "no second forward was in flight while the first one was";
  for (const auto& a : acks) {
    ASSERT_EQ(a.size(), 1u);
    EXPECT_TRUE(a[0].ok()) << a[0];
  }
  EXPECT_EQ(backup_->Stats().replica_writes, static_cast<uint64_t>(kThreads + 1));
  // Several connections to the one backup, at most one per lane.
  EXPECT_GE(replicator_->connections(), 2u);
  EXPECT_LE(replicator_->connections(), static_cast<size_t>(kThreads));
}

TEST_F(ReplicatorTest, EveryFailureNamesTheBackup) {
  MakeReplicator();
  ReplicaPeer wrong_epoch = Backup();
  wrong_epoch.epoch += 1;
  const ReplicaPeer nobody{"s-nobody", 1, "127.0.0.1:1"};
  const std::vector<Status> acks =
      replicator_->Forward({wrong_epoch, nobody}, 7, protocol::Op::kReplicatePut, Record("k", "v", 1));
  ASSERT_EQ(acks.size(), 2u);
  EXPECT_EQ(acks[0].code(), StatusCode::kFailedPrecondition) << acks[0];
  EXPECT_NE(acks[0].message().find("epoch"), std::string::npos) << acks[0];
  EXPECT_NE(acks[0].message().find("s-backup"), std::string::npos) << acks[0];
  EXPECT_FALSE(acks[1].ok());
  EXPECT_NE(acks[1].message().find("s-nobody"), std::string::npos) << acks[1];
  EXPECT_EQ(replicator_->connections(), 0u);
  // The epoch the map names gets through.
  const std::vector<Status> good = replicator_->Forward({Backup()}, 7, protocol::Op::kReplicatePut, Record("k", "v", 1));
  EXPECT_TRUE(good[0].ok()) << good[0];

  // A backup's refusal is its reply's status.
  policy_.SetAcceptStatus(FailedPrecondition("not a backup of shard 1 in map version 9"));
  const std::vector<Status> refused =
      replicator_->Forward({Backup()}, 7, protocol::Op::kReplicatePut, Record("k", "v", 2));
  EXPECT_EQ(refused[0].code(), StatusCode::kFailedPrecondition) << refused[0];
  EXPECT_NE(refused[0].message().find("map version 9"), std::string::npos) << refused[0];
}

TEST_F(ReplicatorTest, ABackupTheMapShowsUpGetsASecondTimeoutAndADownOneNone) {
  // The backup's peer poller is held in AcceptReplica until the end: no
  // reply comes, whatever the wait. (Shared: the backup may run the hook
  // for a queued request after the test's body returned.) Except for the
  // warm-up write, which opens the connection, so that a slow connect on
  // a loaded machine does not eat the timeouts before the map is asked.
  auto release = std::make_shared<std::atomic<bool>>(false);
  policy_.SetAcceptHook([release](std::string_view key) {
    if (key == "warm") return;
    while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::atomic<bool> down{false};
  std::atomic<int> asked{0};
  ReplicatorOptions o = Options();
  o.timeout = std::chrono::milliseconds(300);
  o.is_down = [&](const std::string& id, uint64_t epoch) {
    ++asked;
    EXPECT_EQ(id, "s-backup");
    EXPECT_EQ(epoch, backup_->epoch());
    return down.load();
  };
  auto r = Replicator::Create(transport_.get(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  // (Retried: the connect itself has only the short timeout.)
  std::vector<Status> acks;
  ASSERT_TRUE(rkv::testing::WaitFor("the warm-up write", [&] {
    acks = (*r)->Forward({Backup()}, 7, protocol::Op::kReplicatePut, Record("warm", "v", 1));
    return acks[0].ok();
  })) << acks[0];
  // UP in the map all along: the forward waits out a second timeout.
  acks = (*r)->Forward({Backup()}, 7, protocol::Op::kReplicatePut, Record("k", "v", 1));
  EXPECT_EQ(acks[0].code(), StatusCode::kDeadlineExceeded) << acks[0];
  EXPECT_NE(acks[0].message().find("no reply within twice the replication timeout"), std::string::npos) << acks[0];
  EXPECT_GT(asked.load(), 0);
  // DOWN in the map: the wait ends at the next look at the map, before
  // the timeout.
  down = true;
  acks = (*r)->Forward({Backup()}, 7, protocol::Op::kReplicatePut, Record("k", "v", 2));
  EXPECT_EQ(acks[0].code(), StatusCode::kDeadlineExceeded) << acks[0];
  EXPECT_NE(acks[0].message().find("the map shows it DOWN"), std::string::npos) << acks[0];
  // Let the backup go, and stop it while this body's flags still live.
  release->store(true);
  r->reset();
  backup_.reset();
}

// The slow-but-alive backup of docs/design.md §8.8: its reply is held back
// (recv:delay on the primary's transport) longer than one replication
// timeout but shorter than two. Its map shows it UP, so the forward waits
// on and the write is acknowledged, with the backup kept: an OK status
// (what the apply path reports a backup for is a failed one), its
// connection kept for the next write, the write applied there. The delay
// is a floor (a reply can come no sooner), so the first timeout surely
// passed; only the second must not, which the margin (half a timeout)
// keeps on a loaded machine.
TEST_F(ReplicatorTest, ASlowButAliveBackupUnderInjectedDelayIsKept) {
  constexpr auto kTimeout = std::chrono::milliseconds(1500);
  constexpr auto kDelay = std::chrono::milliseconds(2000);
  static_assert(kDelay > kTimeout && kDelay < 2 * kTimeout);
  std::unique_ptr<FaultTransport> faulty = FaultyTransport();
  ASSERT_NE(faulty, nullptr);
  std::atomic<int> asked{0};
  ReplicatorOptions o = Options();
  o.timeout = kTimeout;
  o.is_down = [&](const std::string&, uint64_t) {
    ++asked;
    return false;  // UP in the map all along
  };
  auto r = Replicator::Create(faulty.get(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(faulty->faults().AddSpec("recv:delay:ms=" + std::to_string(kDelay.count())).ok());

  const auto start = SteadyClock::now();
  std::vector<Status> acks = (*r)->Forward({Backup()}, 7, protocol::Op::kReplicatePut, Record("slow", "v1", 1));
  const auto took = SteadyClock::now() - start;
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_TRUE(acks[0].ok()) << acks[0];
  EXPECT_GE(took, kTimeout) << "the reply was not held back past the first timeout";
  EXPECT_GE(faulty->faults().count(transport::fault::FaultOp::kRecv), 1u);
  EXPECT_GT(asked.load(), 0);
  EXPECT_EQ(backup_->Stats().replica_writes, 1u);
  EXPECT_EQ(BackupHolds("slow"), std::optional(std::pair(std::string("v1"), uint64_t{1})));
  // Kept: the next writes go over the same connection (the backup accepts
  // no other; the reads above had clients of their own), also while slow.
  const uint64_t accepted = backup_->Stats().connections_accepted;
  acks = (*r)->Forward({Backup()}, 7, protocol::Op::kReplicatePut, Record("slow", "v2", 2));
  EXPECT_TRUE(acks[0].ok()) << acks[0];
  faulty->faults().ClearRules();
  acks = (*r)->Forward({Backup()}, 7, protocol::Op::kReplicatePut, Record("slow", "v3", 3));
  EXPECT_TRUE(acks[0].ok()) << acks[0];
  EXPECT_EQ((*r)->connections(), 1u);
  EXPECT_EQ(backup_->Stats().connections_accepted, accepted);
  EXPECT_EQ(backup_->Stats().replica_writes, 3u);
  EXPECT_EQ(BackupHolds("slow"), std::optional(std::pair(std::string("v3"), uint64_t{3})));
  r->reset();
}

// The counterpart: replies held back beyond both timeouts. UP in the map,
// the forward gives up after the second timeout; DOWN in the map (from the
// first timeout on, as when the coordinator's probe found it frozen), it
// gives up at the next look at the map. Either way the backup fails, which
// the apply path reports (ReportFailedBackup), and its connection is
// dropped.
TEST_F(ReplicatorTest, ABackupDelayedPastBothTimeoutsFailsAndOneTheMapShowsDownSooner) {
  constexpr auto kTimeout = std::chrono::milliseconds(1000);
  // Far past both timeouts: a forwarding thread kept off the CPU for a
  // while after the second one still finds no reply (the wait ends at the
  // timeouts, not at the delay, so the test takes no longer for it).
  constexpr auto kDelay = std::chrono::milliseconds(8000);
  static_assert(kDelay > 2 * kTimeout);
  std::unique_ptr<FaultTransport> faulty = FaultyTransport();
  ASSERT_NE(faulty, nullptr);
  std::atomic<bool> down_after_first_timeout{false};
  std::atomic<int64_t> forward_start_ns{0};
  ReplicatorOptions o = Options();
  o.timeout = kTimeout;
  o.is_down = [&](const std::string&, uint64_t) {
    const auto since = SteadyClock::now().time_since_epoch() - std::chrono::nanoseconds(forward_start_ns.load());
    return down_after_first_timeout.load() && since >= kTimeout;
  };
  auto r = Replicator::Create(faulty.get(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(faulty->faults().AddSpec("recv:delay:ms=" + std::to_string(kDelay.count())).ok());

  // UP all along: two timeouts, then it fails.
  forward_start_ns = SteadyClock::now().time_since_epoch().count();
  std::vector<Status> acks = (*r)->Forward({Backup()}, 7, protocol::Op::kReplicatePut, Record("late", "v1", 1));
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].code(), StatusCode::kDeadlineExceeded) << acks[0];
  EXPECT_NE(acks[0].message().find("no reply within twice the replication timeout"), std::string::npos) << acks[0];
  EXPECT_NE(acks[0].message().find("s-backup"), std::string::npos) << acks[0];
  EXPECT_EQ((*r)->connections(), 0u);

  // DOWN once the first timeout passed: the wait ends then, not at the
  // second timeout (a floor only is asserted: it waited out the first).
  down_after_first_timeout = true;
  forward_start_ns = SteadyClock::now().time_since_epoch().count();
  const auto start = SteadyClock::now();
  acks = (*r)->Forward({Backup()}, 7, protocol::Op::kReplicatePut, Record("late", "v2", 2));
  EXPECT_GE(SteadyClock::now() - start, kTimeout);
  EXPECT_EQ(acks[0].code(), StatusCode::kDeadlineExceeded) << acks[0];
  EXPECT_NE(acks[0].message().find("the map shows it DOWN"), std::string::npos) << acks[0];
  EXPECT_EQ((*r)->connections(), 0u);
  r->reset();
}

// The same slow-but-alive backup seen from the primary's apply path: a
// Server on the fault transport (which holds back the client's request and
// the backup's reply alike) acknowledges the client's PUT, reports no
// backup failed (ReportFailedBackup, which would take it out of the
// shard), and the backup holds the write with the primary's version.
TEST_F(ReplicatorTest, APrimaryDoesNotReportASlowButAliveBackup) {
  constexpr uint32_t kTimeoutMs = 1500;
  constexpr uint32_t kDelayMs = 2000;
  static_assert(kDelayMs > kTimeoutMs && kDelayMs < 2 * kTimeoutMs);
  std::unique_ptr<FaultTransport> faulty = FaultyTransport();
  ASSERT_NE(faulty, nullptr);
  ServerOptions po = options_;
  po.data_dir = (dir_ / "primary").string();
  po.replication_timeout_ms = kTimeoutMs;
  FakePolicy primary_policy;
  auto started = Server::Start(po, faulty.get(), &primary_policy, "s-primary");
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<Server> primary = std::move(started).value();
  policy_.AddPeer("s-primary", primary->epoch());
  WriteRoute route;
  route.map_version = 7;
  route.shard = 1;
  route.backups.push_back(Backup());
  primary_policy.SetRoute(route);

  auto client = RawConnection::Connect(transport_.get(), primary->address(), kReplicatorToken);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE(faulty->faults().AddSpec("recv:delay:ms=" + std::to_string(kDelayMs)).ok());
  auto put = (*client)->Send(protocol::Op::kPut, "slow", "value", 0, 1);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(static_cast<StatusCode>(put->status_code), StatusCode::kOk) << put->message;
  EXPECT_TRUE(primary_policy.reports().empty()) << primary_policy.reports().front().reason;
  EXPECT_EQ(primary->Stats().backup_failures, 0u);
  EXPECT_EQ(primary->Stats().forwarded_writes, 1u);
  EXPECT_EQ(BackupHolds("slow"), std::optional(std::pair(std::string("value"), put->version)));
  client->reset();
  primary.reset();
}

TEST_F(ReplicatorTest, ABackupThatDoesNotKnowThisServerRefusesItAtTheHandshake) {
  ReplicatorOptions o = Options();
  o.self_id = "s-unknown";
  auto r = Replicator::Create(transport_.get(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<Status> acks = (*r)->Forward({Backup()}, 7, protocol::Op::kReplicatePut, Record("k", "v", 1));
  EXPECT_EQ(acks[0].code(), StatusCode::kPermissionDenied) << acks[0];
  EXPECT_NE(acks[0].message().find("not a server of the current cluster map"), std::string::npos) << acks[0];
  EXPECT_EQ((*r)->connections(), 0u);
}

}  // namespace
}  // namespace rkv::server
