// The Replicator against real servers over tcp: connections are opened
// once and reused, replaced for a new incarnation, checked against the
// map's epoch, and every failure names the backup.
#include "server/replication/replicator.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/layout.h"
#include "common/record.h"
#include "common/transport/factory.h"
#include "server/replication/replication_test_util.h"
#include "server/server.h"
#include "tests/wait_for.h"

namespace rkv::server {
namespace {

using testing::FakePolicy;

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
  // for a queued request after the test's body returned.)
  auto release = std::make_shared<std::atomic<bool>>(false);
  policy_.SetAcceptHook([release](std::string_view) {
    while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::atomic<bool> down{false};
  std::atomic<int> asked{0};
  ReplicatorOptions o = Options();
  o.timeout = std::chrono::milliseconds(100);
  o.is_down = [&](const std::string& id, uint64_t epoch) {
    ++asked;
    EXPECT_EQ(id, "s-backup");
    EXPECT_EQ(epoch, backup_->epoch());
    return down.load();
  };
  auto r = Replicator::Create(transport_.get(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  // UP in the map all along: the forward waits out a second timeout.
  std::vector<Status> acks = (*r)->Forward({Backup()}, 7, protocol::Op::kReplicatePut, Record("k", "v", 1));
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
