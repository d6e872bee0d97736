// Coordinators sharing one etcd (a real etcd process on loopback): the
// election, commits conditioned on the leadership, standbys following the
// state, and what is refused under the prefix.
#include "coordinator/etcd_coordinator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "coordinator/state_transfer.h"
#include "coordinator/test_util.h"
#include "tests/etcd_process.h"

namespace rkv::coordinator {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::MakeJoin;

// Bounds a wait; reached only when the behaviour is broken.
constexpr auto kWait = seconds(30);

bool WaitUntil(const std::function<bool()>& done) {
  const auto give_up = std::chrono::steady_clock::now() + kWait;
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return true;
}

class EtcdCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto etcd = rkv::testing::EtcdCluster::Start(1);
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(etcd).value();
    config_.expected_servers = 1;
    config_.shard_count = 8;
    config_.heartbeat_timeout = seconds(600);
    auto client = etcd::EtcdClient::Create(etcd_->endpoints());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(client).value();
  }

  EtcdCoordinatorOptions Options() const {
    EtcdCoordinatorOptions o;
    o.endpoints = etcd_->endpoints();
    o.prefix = "/rkv-test/";
    o.connect_wait = seconds(10);
    return o;
  }

  // An opened coordinator, campaigning as `name`, and the state it serves.
  // (The state outlives the coordinator that keeps reloading it.)
  struct Member {
    std::unique_ptr<CoordinatorState> state;
    std::unique_ptr<EtcdCoordinator> shared;
    std::string name;
    bool Leads() const {
      std::string leader;
      return shared->CheckLeading(&leader).ok();
    }
  };
  Member Open(const std::string& name) {
    Member m;
    auto opened = EtcdCoordinator::Open(config_, Options());
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return m;
    m.shared = std::move(opened).value();
    m.state = m.shared->TakeState();
    m.name = name;
    m.shared->StartCampaign(name);
    return m;
  }

  std::string Get(const std::string& key) {
    auto r = client_->Get(key, std::chrono::steady_clock::now() + kWait);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && r->kvs.size() == 1 ? r->kvs[0].value : std::string();
  }

  CoordinatorConfig config_;
  std::unique_ptr<rkv::testing::EtcdCluster> etcd_;
  std::unique_ptr<etcd::EtcdClient> client_;
};

TEST_F(EtcdCoordinatorTest, OneOfTwoLeadsTheOtherRedirectsAndFollows) {
  Member a = Open("127.0.0.1:1");
  ASSERT_NE(a.shared, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return a.Leads(); }));
  Member b = Open("127.0.0.1:2");
  ASSERT_NE(b.shared, nullptr);
  std::string leader;
  ASSERT_TRUE(WaitUntil([&] { return !b.shared->CheckLeading(&leader).ok() && leader == a.name; }));
  Status refused = b.shared->CheckLeading(&leader);
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable);
  EXPECT_EQ(refused.message(), "not the leader; the leader is 127.0.0.1:1");
  EXPECT_EQ(Get("/rkv-test/leader"), "127.0.0.1:1");

  // The leader commits; the standby's state follows.
  ASSERT_TRUE(a.state->Join(MakeJoin("s1", 1)).ok());
  EXPECT_EQ(a.state->version(), 1u);
  ASSERT_TRUE(WaitUntil([&] { return b.state->version() == 1u; }));
  EXPECT_EQ(b.state->Map().SerializeAsString(), a.state->Map().SerializeAsString());
  // A standby's state commits nothing, whoever asks it.
  auto standby_join = b.state->Join(MakeJoin("s2", 1, 1));
  EXPECT_EQ(standby_join.status().code(), StatusCode::kUnavailable) << standby_join.status();
  EXPECT_FALSE(b.Leads());

  // The leader stops (resigning): the standby leads at once, with the state.
  a.shared->Stop();
  EXPECT_FALSE(a.Leads());
  ASSERT_TRUE(WaitUntil([&] { return b.Leads(); }));
  EXPECT_EQ(b.state->version(), 1u);
  EXPECT_EQ(Get("/rkv-test/leader"), "127.0.0.1:2");
  // It commits the next version, on top of the old leader's.
  ASSERT_TRUE(b.state->Heartbeat([] {
    v1::HeartbeatRequest hb;
    hb.set_server_id("s1");
    hb.set_epoch(1);
    return hb;
  }()).ok());
  v1::LeaveRequest leave;
  leave.set_server_id("s1");
  leave.set_epoch(1);
  ASSERT_TRUE(b.state->Leave(leave).ok());
  EXPECT_EQ(b.state->version(), 2u);
}

// Forget through etcd: one transaction deletes the server's key and
// rewrites meta; a standby follows, and a coordinator opened later loads
// the same state. When the server went DOWN is in its record in etcd.
TEST_F(EtcdCoordinatorTest, AForgottenServerLeavesEtcdAndTheStandbysMap) {
  Member a = Open("127.0.0.1:1");
  ASSERT_NE(a.shared, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return a.Leads(); }));
  Member b = Open("127.0.0.1:2");
  ASSERT_NE(b.shared, nullptr);
  ASSERT_TRUE(a.state->Join(MakeJoin("s1", 1)).ok());     // the cluster of --servers 1
  ASSERT_TRUE(a.state->Join(MakeJoin("s2", 1, 1)).ok());  // added: no role yet
  v1::LeaveRequest leave;
  leave.set_server_id("s2");
  leave.set_epoch(1);
  ASSERT_TRUE(a.state->Leave(leave).ok());
  ASSERT_TRUE(WaitUntil([&] { return b.state->version() == 3u; }));
  ASSERT_EQ(b.state->Map().servers_size(), 2);
  EXPECT_GT(b.state->Map().servers(1).down_since_unix_ms(), 0u);
  EXPECT_EQ(b.state->Map().servers(1).down_since_unix_ms(), a.state->Map().servers(1).down_since_unix_ms());
  EXPECT_FALSE(Get("/rkv-test/server/s2").empty());

  v1::ForgetRequest forget;
  forget.set_server_id("s2");
  // A standby's state forgets nothing (its store commits nothing).
  EXPECT_EQ(b.state->Forget(forget).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(b.state->Map().servers_size(), 2);
  auto forgot = a.state->Forget(forget);
  ASSERT_TRUE(forgot.ok()) << forgot.status();
  EXPECT_EQ(forgot->map_version(), 4u);
  auto gone = client_->Get("/rkv-test/server/s2", std::chrono::steady_clock::now() + kWait);
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_TRUE(gone->kvs.empty());
  EXPECT_FALSE(Get("/rkv-test/server/s1").empty());
  ASSERT_TRUE(WaitUntil([&] { return b.state->version() == 4u; }));
  EXPECT_EQ(b.state->Map().SerializeAsString(), a.state->Map().SerializeAsString());
  EXPECT_EQ(b.state->Map().servers_size(), 1);
  EXPECT_EQ(b.state->Map().expected_servers(), 1u);
  b.shared->Stop();
  // The leader goes; whoever opens the prefix next finds s2 gone, and s2
  // may join again, as a new server.
  a.shared->Stop();
  Member c = Open("127.0.0.1:3");
  ASSERT_NE(c.shared, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return c.Leads(); }));
  EXPECT_EQ(c.state->version(), 4u);
  EXPECT_EQ(c.state->Map().servers_size(), 1);
  ASSERT_TRUE(c.state->Join(MakeJoin("s2", 1, 1)).ok());
  EXPECT_EQ(c.state->Map().servers_size(), 2);
}

TEST_F(EtcdCoordinatorTest, ADeposedLeaderCommitsNothing) {
  Member a = Open("127.0.0.1:1");
  ASSERT_NE(a.shared, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return a.Leads(); }));
  ASSERT_TRUE(a.state->Join(MakeJoin("s1", 1)).ok());
  const std::string meta_before = Get("/rkv-test/meta");

  // Another leader key replaces this one's (as after its lease expired
  // and another coordinator won): the next commit is refused by etcd.
  auto replaced = client_->Txn({}, {etcd::Op::Delete("/rkv-test/leader"), etcd::Op::Put("/rkv-test/x", "")}, {},
                               std::chrono::steady_clock::now() + kWait);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  auto deleted = client_->Txn({}, {etcd::Op::Delete("/rkv-test/x"), etcd::Op::Put("/rkv-test/leader", "10.0.0.9:1")},
                              {}, std::chrono::steady_clock::now() + kWait);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  v1::LeaveRequest leave;
  leave.set_server_id("s1");
  leave.set_epoch(1);
  Status s = a.state->Leave(leave);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("not the leader any more"), std::string::npos) << s;
  EXPECT_EQ(Get("/rkv-test/meta"), meta_before);
  // It stops leading, and names the key's holder as the leader.
  std::string leader;
  ASSERT_TRUE(WaitUntil([&] { return !a.shared->CheckLeading(&leader).ok() && leader == "10.0.0.9:1"; }));
}

TEST_F(EtcdCoordinatorTest, APrefixHoldingSomethingElseIsRefusedAndKeptAsIs) {
  const auto put = [&](const std::string& key, const std::string& value) {
    auto r = client_->Txn({}, {etcd::Op::Put(key, value)}, {}, std::chrono::steady_clock::now() + kWait);
    ASSERT_TRUE(r.ok()) << r.status();
  };
  put("/rkv-test/notes", "someone else's");
  auto foreign = EtcdCoordinator::Open(config_, Options());
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().code(), StatusCode::kFailedPrecondition) << foreign.status();
  EXPECT_NE(foreign.status().message().find("/rkv-test/notes"), std::string::npos) << foreign.status();
  EXPECT_EQ(Get("/rkv-test/notes"), "someone else's");

  put("/rkv-test/notes", "");
  auto del = client_->Txn({}, {etcd::Op::Delete("/rkv-test/notes")}, {}, std::chrono::steady_clock::now() + kWait);
  ASSERT_TRUE(del.ok());
  put("/rkv-test/format", "rkv-coordinator-state 99");
  auto newer = EtcdCoordinator::Open(config_, Options());
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition) << newer.status();
  EXPECT_EQ(Get("/rkv-test/format"), "rkv-coordinator-state 99");
}

TEST_F(EtcdCoordinatorTest, AnotherShapeOfClusterUnderThePrefixIsRefused) {
  Member a = Open("127.0.0.1:1");
  ASSERT_NE(a.shared, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return a.Leads(); }));
  ASSERT_TRUE(a.state->Join(MakeJoin("s1", 1)).ok());
  config_.shard_count = 16;
  auto other = EtcdCoordinator::Open(config_, Options());
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition) << other.status();
}

TEST_F(EtcdCoordinatorTest, StateMovesFromADataDirToEtcdAndBack) {
  testing::TempDir dir;
  std::string map_before;
  {
    auto store = OpenRocksDbStateStore(dir.path() + "/from");
    ASSERT_TRUE(store.ok()) << store.status();
    auto state = CoordinatorState::Open(config_, std::move(store).value());
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_TRUE((*state)->Join(MakeJoin("s1", 1)).ok());
    map_before = (*state)->Map().SerializeAsString();
  }
  const std::string file = dir.path() + "/state.bin";
  {
    auto from = OpenRocksDbStateStore(dir.path() + "/from");
    ASSERT_TRUE(from.ok());
    auto exported = ExportState(**from, file);
    ASSERT_TRUE(exported.ok()) << exported.status();
    EXPECT_EQ(exported->map_version, 1u);
    EXPECT_EQ(exported->servers, 1u);
  }
  {
    EtcdStateStore to(client_.get(), "/rkv-test/");
    to.SetImportOnly();
    auto imported = ImportState(config_, file, to);
    ASSERT_TRUE(imported.ok()) << imported.status();
    // Once there, a second import is refused and changes nothing.
    auto again = ImportState(config_, file, to);
    EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition) << again.status();
  }
  Member a = Open("127.0.0.1:1");
  ASSERT_NE(a.shared, nullptr);
  EXPECT_EQ(a.state->version(), 1u);
  EXPECT_EQ(a.state->Map().SerializeAsString(), map_before);
  a.shared->Stop();

  // And back into an empty data dir; another shape of cluster is refused.
  const std::string back = dir.path() + "/back.bin";
  {
    EtcdStateStore from(client_.get(), "/rkv-test/");
    ASSERT_TRUE(ExportState(from, back).ok());
  }
  auto to = OpenRocksDbStateStore(dir.path() + "/to");
  ASSERT_TRUE(to.ok());
  CoordinatorConfig other = config_;
  other.shard_count = 16;
  EXPECT_EQ(ImportState(other, back, **to).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(ImportState(config_, back, **to).ok());
  auto reopened = CoordinatorState::Open(config_, std::move(to).value());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*reopened)->Map().SerializeAsString(), map_before);
  {
    std::FILE* f = std::fopen((dir.path() + "/garbage").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("\x0a\xff\xff not a state", f);
    std::fclose(f);
  }
  auto empty = OpenRocksDbStateStore(dir.path() + "/empty");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(ImportState(config_, dir.path() + "/garbage", **empty).status().code(), StatusCode::kDataLoss);
}

TEST(EtcdCoordinatorStartTest, AnEtcdThatNeverAnswersIsNamedAfterTheWait) {
  CoordinatorConfig config;
  config.expected_servers = 1;
  config.shard_count = 8;
  EtcdCoordinatorOptions o;
  o.endpoints = {"127.0.0.1:1"};
  o.connect_wait = seconds(1);
  auto opened = EtcdCoordinator::Open(config, o);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kUnavailable) << opened.status();
  EXPECT_NE(opened.status().message().find("127.0.0.1:1"), std::string::npos) << opened.status();
  o.prefix = "no-slash";
  EXPECT_EQ(EtcdCoordinator::Open(config, o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rkv::coordinator
