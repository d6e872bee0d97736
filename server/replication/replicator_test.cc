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
#include <functional>
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

  // A batch of `n` PUTs to the fixture's backup, of keys "<prefix>-<i>"
  // with value(i) at version(i). The items point into it: keep it whole
  // (it is never moved) while they are used.
  struct Writes {
    std::vector<ReplicaPeer> backups;
    std::vector<std::vector<uint8_t>> records;
    std::vector<Forwarder::Item> items;
  };
  std::unique_ptr<Writes> MakeWrites(std::string_view prefix, size_t n,
                                     const std::function<std::string(size_t)>& value,
                                     const std::function<uint64_t(size_t)>& version) {
    auto w = std::make_unique<Writes>();
    w->backups.push_back(Backup());
    for (size_t i = 0; i < n; ++i) {
      w->records.push_back(Record(std::string(prefix) + "-" + std::to_string(i), value(i), version(i)));
    }
    for (const auto& record : w->records) w->items.push_back({&w->backups, 7, protocol::Op::kReplicatePut, record});
    return w;
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

// A batch larger than a connection's window goes in chunks over one
// connection, every request of a chunk in flight at once: with every reply
// held back (recv:delay on the primary's transport), 40 writes take about
// one delay per chunk of at most kMaxInFlight (three), not one per write.
// The bounds are loose (a floor of three delays, a ceiling of half the
// forty a write at a time would take) for a loaded machine.
TEST_F(ReplicatorTest, ForwardManyPipelinesABatchOnOneConnectionPerBackup) {
  constexpr size_t kItems = 40;
  static_assert(kItems > 2 * Replicator::kMaxInFlight && kItems <= 3 * Replicator::kMaxInFlight);
  constexpr auto kDelay = std::chrono::milliseconds(200);
  std::unique_ptr<FaultTransport> faulty = FaultyTransport();
  ASSERT_NE(faulty, nullptr);
  auto r = Replicator::Create(faulty.get(), Options());
  ASSERT_TRUE(r.ok()) << r.status();
  const std::unique_ptr<Writes> writes = MakeWrites(
      "key", kItems, [](size_t i) { return "value-" + std::to_string(i); }, [](size_t i) { return i + 1; });
  const std::vector<Forwarder::Item>& items = writes->items;
  ASSERT_TRUE(faulty->faults().AddSpec("recv:delay:ms=" + std::to_string(kDelay.count())).ok());

  const auto start = SteadyClock::now();
  const std::vector<std::vector<Status>> acks = (*r)->ForwardMany(items);
  const auto took = SteadyClock::now() - start;
  ASSERT_EQ(acks.size(), kItems);
  for (size_t i = 0; i < kItems; ++i) {
    ASSERT_EQ(acks[i].size(), 1u);
    EXPECT_TRUE(acks[i][0].ok()) << "item " << i << ": " << acks[i][0];
  }
  EXPECT_GE(faulty->faults().count(transport::fault::FaultOp::kRecv), kItems);
  EXPECT_GE(took, 3 * kDelay);
  EXPECT_LT(took, kItems / 2 * kDelay) << "the writes went one round trip at a time";
  EXPECT_EQ((*r)->connections(), 1u);
  EXPECT_EQ(backup_->Stats().connections_accepted, 1u);
  EXPECT_EQ(backup_->Stats().replica_writes, kItems);
  faulty->faults().ClearRules();
  for (size_t i = 0; i < kItems; ++i) {
    EXPECT_EQ(BackupHolds("key-" + std::to_string(i)),
              std::optional(std::pair("value-" + std::to_string(i), uint64_t{i + 1})));
  }

  // The next batch reuses the connection.
  const std::vector<std::vector<Status>> again = (*r)->ForwardMany(std::span(items).first(3));
  ASSERT_EQ(again.size(), 3u);
  for (const auto& a : again) EXPECT_TRUE(a[0].ok()) << a[0];
  EXPECT_EQ((*r)->connections(), 1u);
  r->reset();
}

// The writes of a chunk are all on the wire before any reply is awaited:
// with every reply lost, one chunk of kMaxInFlight writes reaches the
// backup whole on one connection, and each write fails once that
// connection's one wait times out. (One at a time, each write would wait
// out its own timeout and drop its connection: kMaxInFlight connections.)
TEST_F(ReplicatorTest, ForwardManyPostsAWholeChunkBeforeItWaits) {
  constexpr size_t kItems = Replicator::kMaxInFlight;
  std::unique_ptr<FaultTransport> faulty = FaultyTransport();
  ASSERT_NE(faulty, nullptr);
  ReplicatorOptions o = Options();
  o.timeout = std::chrono::milliseconds(500);
  auto r = Replicator::Create(faulty.get(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::unique_ptr<Writes> writes =
      MakeWrites("lost", kItems, [](size_t) { return "v"; }, [](size_t i) { return i + 1; });
  const std::vector<Forwarder::Item>& items = writes->items;
  ASSERT_TRUE(faulty->faults().AddSpec("recv:drop").ok());
  const std::vector<std::vector<Status>> acks = (*r)->ForwardMany(items);
  ASSERT_EQ(acks.size(), kItems);
  for (size_t i = 0; i < kItems; ++i) {
    ASSERT_EQ(acks[i].size(), 1u);
    EXPECT_EQ(acks[i][0].code(), StatusCode::kDeadlineExceeded) << "item " << i << ": " << acks[i][0];
  }
  EXPECT_EQ(backup_->Stats().connections_accepted, 1u) << "the writes were forwarded one at a time";
  EXPECT_TRUE(rkv::testing::WaitFor("every write at the backup",
                                    [&] { return backup_->Stats().replica_writes == kItems; }))
      << backup_->Stats().replica_writes << " of " << kItems << " writes reached the backup";
  EXPECT_EQ((*r)->connections(), 0u) << "a connection whose replies were lost was kept";
  r->reset();
}

// Each item of a batch is answered for each of its backups: the good
// backup acknowledges, an unreachable one fails naming itself, and a
// backup listed twice answers once for both places. An item naming the
// backup's server with another epoch than its own fails alone (its
// connection is refused at the accept), and so does an item that cannot be
// forwarded (not a replica op, a record over max_record_bytes), for every
// backup of it; the other items are written.
TEST_F(ReplicatorTest, ForwardManyAnswersEachItemForEachBackup) {
  MakeReplicator();
  const ReplicaPeer nobody{"s-nobody", 1, "127.0.0.1:1"};
  ReplicaPeer wrong_epoch = Backup();
  wrong_epoch.epoch += 1;
  const std::vector<ReplicaPeer> backups{Backup(), nobody, Backup()};
  const std::vector<ReplicaPeer> stale{wrong_epoch};
  const std::vector<uint8_t> good0 = Record("good-0", "v0", 1);
  const std::vector<uint8_t> bad_op = Record("bad-op", "v", 1);
  const std::vector<uint8_t> good1 = Record("good-1", "v1", 1);
  const std::vector<uint8_t> stale_record = Record("stale", "v", 1);
  const std::vector<uint8_t> too_big = Record("too-big", std::string(5000, 'x'), 1);
  const std::vector<uint8_t> good2 = Record("good-2", "v2", 1);
  ASSERT_GT(too_big.size(), Options().max_record_bytes);
  const std::vector<Forwarder::Item> items{
      {&backups, 7, protocol::Op::kReplicatePut, good0}, {&backups, 7, protocol::Op::kPut, bad_op},
      {&backups, 7, protocol::Op::kReplicatePut, good1}, {&stale, 7, protocol::Op::kReplicatePut, stale_record},
      {&backups, 7, protocol::Op::kReplicatePut, too_big}, {&backups, 7, protocol::Op::kReplicatePut, good2},
  };
  const std::vector<std::vector<Status>> acks = replicator_->ForwardMany(items);
  ASSERT_EQ(acks.size(), items.size());
  for (const size_t i : {0u, 2u, 5u}) {
    ASSERT_EQ(acks[i].size(), 3u);
    EXPECT_TRUE(acks[i][0].ok()) << "item " << i << ": " << acks[i][0];
    EXPECT_FALSE(acks[i][1].ok()) << "item " << i;
    EXPECT_NE(acks[i][1].message().find("s-nobody"), std::string::npos) << acks[i][1];
    EXPECT_TRUE(acks[i][2].ok()) << "item " << i << ": " << acks[i][2];
  }
  for (const size_t i : {1u, 4u}) {
    ASSERT_EQ(acks[i].size(), 3u);
    for (const Status& s : acks[i]) EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "item " << i << ": " << s;
  }
  ASSERT_EQ(acks[3].size(), 1u);
  EXPECT_EQ(acks[3][0].code(), StatusCode::kFailedPrecondition) << acks[3][0];
  EXPECT_NE(acks[3][0].message().find("epoch"), std::string::npos) << acks[3][0];
  EXPECT_NE(acks[3][0].message().find("s-backup"), std::string::npos) << acks[3][0];

  EXPECT_EQ(backup_->Stats().replica_writes, 3u);
  EXPECT_EQ(replicator_->connections(), 1u);
  for (const std::string key : {"good-0", "good-1", "good-2"}) {
    EXPECT_EQ(BackupHolds(key), std::optional(std::pair("v" + key.substr(5), uint64_t{1}))) << key;
  }
  for (const std::string key : {"bad-op", "stale", "too-big"}) EXPECT_EQ(BackupHolds(key), std::nullopt) << key;
}

// Records of different sizes share a backup's staging ring, each at its
// own 64-byte aligned offset: a batch that mixes 10-byte and 3000-byte
// values goes in chunks bounded by the ring (16 KiB: five pairs of a large
// and a small record), then, from a backup that grants 4 credits, by the
// credits, and every value lands whole with its version.
TEST_F(ReplicatorTest, ForwardManyPacksRecordsOfDifferentSizesIntoTheRing) {
  options_.ring_bytes = 16 << 10;
  options_.max_value_bytes = 4000;
  StartBackup();
  MakeReplicator();
  constexpr size_t kItems = 24;
  const auto value = [](size_t i, uint64_t version) {
    return i % 2 == 0 ? std::string(3000, static_cast<char>('a' + i % 26)) + std::to_string(version)
                      : "small-" + std::to_string(i) + "-" + std::to_string(version);
  };
  const auto forward = [&](uint64_t version) {
    const std::unique_ptr<Writes> writes = MakeWrites(
        "mixed", kItems, [&](size_t i) { return value(i, version); }, [&](size_t) { return version; });
    ASSERT_LE(writes->records[0].size(), Options().max_record_bytes);
    const std::vector<Forwarder::Item>& items = writes->items;
    const std::vector<std::vector<Status>> acks = replicator_->ForwardMany(items);
    ASSERT_EQ(acks.size(), kItems);
    for (size_t i = 0; i < kItems; ++i) EXPECT_TRUE(acks[i][0].ok()) << "item " << i << ": " << acks[i][0];
    for (size_t i = 0; i < kItems; ++i) {
      EXPECT_EQ(BackupHolds("mixed-" + std::to_string(i)), std::optional(std::pair(value(i, version), version)))
          << "item " << i;
    }
  };
  ASSERT_NO_FATAL_FAILURE(forward(1));
  EXPECT_EQ(replicator_->connections(), 1u);

  options_.request_credits = 4;
  StartBackup();
  ASSERT_NO_FATAL_FAILURE(forward(2));
  EXPECT_EQ(replicator_->connections(), 1u);
  EXPECT_EQ(backup_->Stats().replica_writes, kItems);
}

// A primary whose own request credits are fewer than its backup grants
// keeps its connection's window to its own: its transport's queues are
// sized for those credits as rkv-server sizes them (ServerSendDepth,
// ServerRecvDepth), and a window of the backup's 16 would have the replies'
// receives refused and no write forwarded.
TEST_F(ReplicatorTest, ForwardManyKeepsToThisServersOwnCreditsBelowTheBackupsGrant) {
  ServerOptions primary;
  primary.request_credits = 4;
  ASSERT_LT(primary.request_credits, options_.request_credits);
  transport::Options topts;
  topts.max_send_wr = ServerSendDepth(primary);
  topts.max_recv_wr = ServerRecvDepth(primary);
  auto t = transport::CreateTransport(transport::Kind::kTcp, topts);
  ASSERT_TRUE(t.ok()) << t.status();
  ReplicatorOptions o = Options();
  o.request_credits = primary.request_credits;
  auto r = Replicator::Create(t->get(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  constexpr size_t kItems = 20;
  const std::unique_ptr<Writes> writes = MakeWrites(
      "credit", kItems, [](size_t i) { return "value-" + std::to_string(i); }, [](size_t i) { return i + 1; });
  const std::vector<std::vector<Status>> acks = (*r)->ForwardMany(writes->items);
  ASSERT_EQ(acks.size(), kItems);
  for (size_t i = 0; i < kItems; ++i) EXPECT_TRUE(acks[i][0].ok()) << "item " << i << ": " << acks[i][0];
  EXPECT_EQ((*r)->connections(), 1u);
  EXPECT_EQ(backup_->Stats().replica_writes, kItems);
  EXPECT_EQ(BackupHolds("credit-19"), std::optional(std::pair(std::string("value-19"), uint64_t{20})));
  r->reset();
}

// A chunk whose reused connection breaks before any of its replies came
// (an injected failure of its first SEND) is resent once on a new
// connection, and every write is acknowledged; on a connection opened for
// the chunk the same failure is the chunk's answer, naming the backup.
TEST_F(ReplicatorTest, ForwardManyResendsAChunkOnlyOnAReusedConnection) {
  std::unique_ptr<FaultTransport> faulty = FaultyTransport();
  ASSERT_NE(faulty, nullptr);
  auto r = Replicator::Create(faulty.get(), Options());
  ASSERT_TRUE(r.ok()) << r.status();
  const std::unique_ptr<Writes> writes = MakeWrites("key", 5, [](size_t) { return "v"; }, [](size_t) { return 1; });
  const std::vector<Forwarder::Item>& items = writes->items;

  // New connection: no resend.
  ASSERT_TRUE(faulty->faults().AddSpec("send:fail:nth=1").ok());
  std::vector<std::vector<Status>> acks = (*r)->ForwardMany(items);
  ASSERT_EQ(acks.size(), items.size());
  for (const auto& a : acks) {
    EXPECT_EQ(a[0].code(), StatusCode::kUnavailable) << a[0];
    EXPECT_NE(a[0].message().find("s-backup"), std::string::npos) << a[0];
  }
  EXPECT_EQ((*r)->connections(), 0u);
  EXPECT_EQ(backup_->Stats().replica_writes, 0u);

  // Reused connection: resent once, on a new one.
  faulty->faults().ClearRules();
  acks = (*r)->ForwardMany(std::span(items).first(1));
  ASSERT_TRUE(acks[0][0].ok()) << acks[0][0];
  const uint64_t accepted = backup_->Stats().connections_accepted;
  ASSERT_TRUE(faulty->faults().AddSpec("send:fail:nth=1").ok());
  acks = (*r)->ForwardMany(items);
  for (const auto& a : acks) EXPECT_TRUE(a[0].ok()) << a[0];
  EXPECT_EQ(backup_->Stats().connections_accepted, accepted + 1);
  EXPECT_EQ((*r)->connections(), 1u);
  r->reset();
}

// A malformed reply (its request id corrupted to one not in flight) drops
// the connection: the requests answered before it keep their replies' OK,
// the ones without a reply fail with the malformation, naming the backup,
// and the next batch opens a new connection.
TEST_F(ReplicatorTest, ForwardManyKeepsTheRepliesThatCameBeforeAMalformedOne) {
  std::unique_ptr<FaultTransport> faulty = FaultyTransport();
  ASSERT_NE(faulty, nullptr);
  auto r = Replicator::Create(faulty.get(), Options());
  ASSERT_TRUE(r.ok()) << r.status();
  const std::unique_ptr<Writes> writes = MakeWrites("key", 4, [](size_t) { return "v"; }, [](size_t) { return 1; });
  const std::vector<Forwarder::Item>& items = writes->items;
  // The second reply's low byte of request_id (2, flipped to 253): the
  // backup answers a connection's requests in order.
  ASSERT_TRUE(faulty->faults().AddSpec("recv:corrupt:nth=2,at=0,bytes=1").ok());
  std::vector<std::vector<Status>> acks = (*r)->ForwardMany(items);
  ASSERT_EQ(acks.size(), items.size());
  EXPECT_TRUE(acks[0][0].ok()) << acks[0][0];
  for (size_t i = 1; i < items.size(); ++i) {
    EXPECT_EQ(acks[i][0].code(), StatusCode::kInvalidArgument) << acks[i][0];
    EXPECT_NE(acks[i][0].message().find("reply to request 253, which is not in flight"), std::string::npos)
        << acks[i][0];
    EXPECT_NE(acks[i][0].message().find("s-backup"), std::string::npos) << acks[i][0];
  }
  EXPECT_EQ((*r)->connections(), 0u);

  faulty->faults().ClearRules();
  acks = (*r)->ForwardMany(items);
  for (const auto& a : acks) EXPECT_TRUE(a[0].ok()) << a[0];
  EXPECT_EQ((*r)->connections(), 1u);
  r->reset();
}

}  // namespace
}  // namespace rkv::server
