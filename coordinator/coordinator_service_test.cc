#include "coordinator/coordinator_service.h"

#include <gtest/gtest.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <functional>
#include <thread>

#include "proto/auth.h"
#include "coordinator/test_util.h"

namespace rkv::coordinator {
namespace {

using testing::MakeJoin;
using testing::MemoryStore;
using testing::MemoryStoreData;

constexpr char kToken[] = "coordinator-test-token";
// Bounds a hang; never reached when the service works.
constexpr auto kCallDeadline = std::chrono::seconds(20);

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorConfig config;
    config.expected_servers = 2;
    config.shard_count = 8;
    // No server goes DOWN unless a test makes it leave; a short lease so
    // that a promotion comes soon.
    config.heartbeat_timeout = std::chrono::seconds(600);
    config.lease = std::chrono::milliseconds(200);
    auto state = CoordinatorState::Open(config, std::make_unique<MemoryStore>(std::make_shared<MemoryStoreData>()));
    ASSERT_TRUE(state.ok()) << state.status();
    auto server = CoordinatorServer::Start("127.0.0.1:0", kToken, std::move(state).value());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    ASSERT_NE(server_->address(), "127.0.0.1:0");
    stub_ = v1::Coordinator::NewStub(grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }

  // A context with the given token ("" for none) and a deadline.
  std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token = kToken) {
    return testing::CallContext(token, kCallDeadline);
  }

  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(CoordinatorServiceTest, EveryRpcRefusesAMissingOrWrongToken) {
  for (const std::string token : {"", "wrong-token"}) {
    SCOPED_TRACE("token '" + token + "'");
    v1::JoinResponse join;
    grpc::Status s = stub_->Join(Ctx(token).get(), MakeJoin("a", 1), &join);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(s.error_message(), "missing or invalid token");
    v1::HeartbeatRequest hb_req;
    hb_req.set_server_id("a");
    hb_req.set_epoch(1);
    v1::HeartbeatResponse hb;
    EXPECT_EQ(stub_->Heartbeat(Ctx(token).get(), hb_req, &hb).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::LeaveRequest leave_req;
    leave_req.set_server_id("a");
    leave_req.set_epoch(1);
    v1::LeaveResponse leave;
    EXPECT_EQ(stub_->Leave(Ctx(token).get(), leave_req, &leave).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::ClusterMap map;
    EXPECT_EQ(stub_->GetClusterMap(Ctx(token).get(), v1::GetClusterMapRequest(), &map).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    v1::ReportReplicaFailureRequest report;
    report.set_server_id("a");
    report.set_epoch(1);
    report.set_backup_id("b");
    report.add_shards(0);
    v1::ReportReplicaFailureResponse reported;
    EXPECT_EQ(stub_->ReportReplicaFailure(Ctx(token).get(), report, &reported).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    v1::RenewLeaseResponse lease;
    EXPECT_EQ(stub_->RenewLease(Ctx(token).get(), v1::RenewLeaseRequest(), &lease).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    v1::ReportCaughtUpRequest caught_up;
    caught_up.set_server_id("a");
    caught_up.set_epoch(1);
    caught_up.add_shards()->set_primary_id("b");
    v1::ReportCaughtUpResponse caught_up_answer;
    EXPECT_EQ(stub_->ReportCaughtUp(Ctx(token).get(), caught_up, &caught_up_answer).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    v1::ReportUnresponsiveRequest unresponsive;
    unresponsive.set_server_id("a");
    unresponsive.set_epoch(1);
    v1::ReportUnresponsiveResponse probing;
    EXPECT_EQ(stub_->ReportUnresponsive(Ctx(token).get(), unresponsive, &probing).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    v1::DrainRequest drain;
    drain.set_server_id("a");
    v1::DrainResponse drained;
    EXPECT_EQ(stub_->Drain(Ctx(token).get(), drain, &drained).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::ForgetRequest forget;
    forget.set_server_id("a");
    v1::ForgetResponse forgot;
    EXPECT_EQ(stub_->Forget(Ctx(token).get(), forget, &forgot).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    auto ctx = Ctx(token);
    auto reader = stub_->WatchClusterMap(ctx.get(), v1::WatchClusterMapRequest());
    EXPECT_FALSE(reader->Read(&map));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  // Nothing was let through.
  EXPECT_EQ(server_->state()->version(), 0u);
  EXPECT_EQ(server_->state()->Map().servers_size(), 0);
}

TEST_F(CoordinatorServiceTest, JoinHeartbeatAndGetClusterMap) {
  v1::JoinResponse join;
  ASSERT_TRUE(stub_->Join(Ctx().get(), MakeJoin("a", 1, 0), &join).ok());
  EXPECT_EQ(join.map_version(), 1u);
  ASSERT_TRUE(stub_->Join(Ctx().get(), MakeJoin("b", 1, 1), &join).ok());
  EXPECT_EQ(join.map_version(), 2u);
  EXPECT_EQ(join.shards_size(), 4);

  v1::ClusterMap map;
  ASSERT_TRUE(stub_->GetClusterMap(Ctx().get(), v1::GetClusterMapRequest(), &map).ok());
  EXPECT_EQ(map.version(), 2u);
  EXPECT_EQ(map.shard_owner_size(), 8);
  EXPECT_EQ(map.servers_size(), 2);

  v1::HeartbeatRequest hb_req;
  hb_req.set_server_id("a");
  hb_req.set_epoch(1);
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(stub_->Heartbeat(Ctx().get(), hb_req, &hb).ok());
  EXPECT_EQ(hb.map_version(), 2u);

  // State machine errors keep their codes and messages over the wire.
  hb_req.set_server_id("nobody");
  EXPECT_EQ(stub_->Heartbeat(Ctx().get(), hb_req, &hb).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::JoinRequest bad = MakeJoin("a", 1, 0);
  bad.set_transport("carrier-pigeon");
  EXPECT_EQ(stub_->Join(Ctx().get(), bad, &join).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  bad = MakeJoin("a", 1, 0, "another-zone");
  grpc::Status moved = stub_->Join(Ctx().get(), bad, &join);
  EXPECT_EQ(moved.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(moved.error_message().find("keeps its zone"), std::string::npos) << moved.error_message();

  // A third id joins the complete cluster, with no shard at first.
  ASSERT_TRUE(stub_->Join(Ctx().get(), MakeJoin("c", 1, 2), &join).ok());
  EXPECT_EQ(join.shards_size(), 0);
  ASSERT_TRUE(stub_->GetClusterMap(Ctx().get(), v1::GetClusterMapRequest(), &map).ok());
  EXPECT_EQ(map.expected_servers(), 3u);
  EXPECT_EQ(map.servers_size(), 3);
}

TEST_F(CoordinatorServiceTest, ReportReplicaFailureTakesTheBackupOut) {
  v1::JoinResponse join;
  ASSERT_TRUE(stub_->Join(Ctx().get(), MakeJoin("a", 1, 0), &join).ok());
  ASSERT_TRUE(stub_->Join(Ctx().get(), MakeJoin("b", 1, 1), &join).ok());
  v1::ClusterMap map;
  ASSERT_TRUE(stub_->GetClusterMap(Ctx().get(), v1::GetClusterMapRequest(), &map).ok());
  EXPECT_EQ(map.replication_factor(), 2u);  // the default with two servers
  ASSERT_EQ(map.shard_replicas_size(), 8);
  EXPECT_EQ(map.shard_replicas(0).server_ids_size(), 2);

  v1::ReportReplicaFailureRequest report;
  report.set_server_id("a");
  report.set_epoch(1);
  report.set_backup_id("b");
  report.add_shards(0);
  report.add_shards(2);
  report.set_reason("no acknowledgement within 1 s");
  v1::ReportReplicaFailureResponse reported;
  ASSERT_TRUE(stub_->ReportReplicaFailure(Ctx().get(), report, &reported).ok());
  EXPECT_EQ(reported.map_version(), 3u);
  ASSERT_TRUE(stub_->GetClusterMap(Ctx().get(), v1::GetClusterMapRequest(), &map).ok());
  EXPECT_EQ(map.version(), 3u);
  EXPECT_EQ(map.shard_replicas(0).server_ids_size(), 1);
  EXPECT_EQ(map.shard_replicas(2).server_ids_size(), 1);
  EXPECT_EQ(map.shard_replicas(4).server_ids_size(), 2);

  report.set_backup_id("a");
  grpc::Status self = stub_->ReportReplicaFailure(Ctx().get(), report, &reported);
  EXPECT_EQ(self.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  report.set_server_id("nobody");
  EXPECT_EQ(stub_->ReportReplicaFailure(Ctx().get(), report, &reported).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(CoordinatorServiceProbeTest, AReportedServerIsProbedAndMarkedDownOnlyWhenItDoesNotAnswer) {
  CoordinatorConfig config;
  config.expected_servers = 2;
  config.shard_count = 8;
  config.heartbeat_timeout = std::chrono::seconds(600);
  // Probes on, but no server is silent long enough within the test: only
  // reports start them.
  config.suspect_after = std::chrono::seconds(300);
  config.probe_timeout = std::chrono::milliseconds(300);
  auto state = CoordinatorState::Open(config, std::make_unique<MemoryStore>(std::make_shared<MemoryStoreData>()));
  ASSERT_TRUE(state.ok()) << state.status();
  auto server = CoordinatorServer::Start("127.0.0.1:0", kToken, std::move(state).value());
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  auto ctx = [] {
    auto c = std::make_unique<grpc::ClientContext>();
    control::AttachToken(c.get(), kToken);
    c->set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    return c;
  };
  v1::JoinRequest a = MakeJoin("a", 1, 0);
  a.set_admin_address(testing::ClosedAddress());
  v1::JoinResponse join;
  ASSERT_TRUE(stub->Join(ctx().get(), a, &join).ok());
  ASSERT_TRUE(stub->Join(ctx().get(), MakeJoin("b", 1, 1), &join).ok());

  v1::ReportUnresponsiveRequest report;
  v1::ReportUnresponsiveResponse answer;
  // Malformed: refused, nothing probed.
  report.set_server_id("a");
  EXPECT_EQ(stub->ReportUnresponsive(ctx().get(), report, &answer).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // no epoch
  report.set_epoch(1);
  report.set_reason("bell\a");
  EXPECT_EQ(stub->ReportUnresponsive(ctx().get(), report, &answer).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Another incarnation, or an unknown server: answered, no probe.
  report.set_reason("no answer for 300 ms");
  report.set_epoch(2);
  ASSERT_TRUE(stub->ReportUnresponsive(ctx().get(), report, &answer).ok());
  EXPECT_FALSE(answer.probing());
  report.set_server_id("nobody");
  report.set_epoch(1);
  ASSERT_TRUE(stub->ReportUnresponsive(ctx().get(), report, &answer).ok());
  EXPECT_FALSE(answer.probing());
  EXPECT_EQ((*server)->state()->version(), 2u);

  // The map's incarnation of a: probed; its admin address refuses, so it
  // is DOWN long before its heartbeat timeout.
  report.set_server_id("a");
  ASSERT_TRUE(stub->ReportUnresponsive(ctx().get(), report, &answer).ok());
  EXPECT_TRUE(answer.probing());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto state_of_a = [&] { return (*server)->state()->Map().servers(0).state(); };
  while (state_of_a() != v1::DOWN && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(state_of_a(), v1::DOWN);
  EXPECT_EQ((*server)->state()->Map().servers(1).state(), v1::UP);
  // The coordinator's status counts the probe and its outcome.
  v1::CoordinatorStatus status;
  while ((!stub->GetCoordinatorStatus(ctx().get(), v1::CoordinatorStatusRequest(), &status).ok() ||
          status.probes() == 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(status.probes(), 1u);
  EXPECT_EQ(status.probes_confirmed(), 1u);
  EXPECT_EQ(status.probes_refuted(), 0u);
}

TEST_F(CoordinatorServiceTest, WatchDeliversTheCurrentMapThenEachNewVersion) {
  v1::JoinResponse join;
  ASSERT_TRUE(stub_->Join(Ctx().get(), MakeJoin("a", 1, 0), &join).ok());

  auto ctx = Ctx();
  v1::WatchClusterMapRequest req;
  req.set_known_version(0);
  auto reader = stub_->WatchClusterMap(ctx.get(), req);
  v1::ClusterMap map;
  ASSERT_TRUE(reader->Read(&map));  // version 1 != 0: sent at once
  EXPECT_EQ(map.version(), 1u);
  EXPECT_EQ(map.shard_owner_size(), 0);

  ASSERT_TRUE(stub_->Join(Ctx().get(), MakeJoin("b", 1, 1), &join).ok());
  ASSERT_TRUE(reader->Read(&map));
  EXPECT_EQ(map.version(), 2u);
  EXPECT_EQ(map.shard_owner_size(), 8);

  v1::LeaveRequest leave;
  leave.set_server_id("b");
  leave.set_epoch(1);
  v1::LeaveResponse left;
  ASSERT_TRUE(stub_->Leave(Ctx().get(), leave, &left).ok());
  ASSERT_TRUE(reader->Read(&map));
  EXPECT_EQ(map.version(), 3u);
  EXPECT_EQ(map.servers(1).state(), v1::DOWN);

  ctx->TryCancel();
  while (reader->Read(&map)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(CoordinatorServiceTest, RenewLeaseExcludesAFencedPrimaryUntilItsBackupIsPromoted) {
  v1::JoinResponse join;
  ASSERT_TRUE(stub_->Join(Ctx().get(), MakeJoin("a", 1, 0), &join).ok());
  EXPECT_EQ(join.lease_ms(), 200u);
  ASSERT_TRUE(stub_->Join(Ctx().get(), MakeJoin("b", 1, 1), &join).ok());
  v1::HeartbeatRequest hb_req;
  hb_req.set_server_id("b");
  hb_req.set_epoch(1);
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(stub_->Heartbeat(Ctx().get(), hb_req, &hb).ok());
  EXPECT_EQ(hb.lease_ms(), 200u);

  v1::RenewLeaseRequest req;
  req.set_map_version(1);  // an older map: the answer still says the current version
  v1::RenewLeaseResponse lease;
  ASSERT_TRUE(stub_->RenewLease(Ctx().get(), req, &lease).ok());
  EXPECT_EQ(lease.map_version(), 2u);
  EXPECT_EQ(lease.lease_ms(), 200u);
  EXPECT_TRUE(lease.excluded_servers().empty());

  // Watch from version 2 to see the versions the leave brings.
  auto ctx = Ctx();
  v1::WatchClusterMapRequest watch;
  watch.set_known_version(2);
  auto reader = stub_->WatchClusterMap(ctx.get(), watch);
  v1::LeaveRequest leave;
  leave.set_server_id("a");
  leave.set_epoch(1);
  v1::LeaveResponse left;
  ASSERT_TRUE(stub_->Leave(Ctx().get(), leave, &left).ok());
  v1::ClusterMap map;
  ASSERT_TRUE(reader->Read(&map));
  ASSERT_EQ(map.version(), 3u);
  EXPECT_EQ(map.servers(0).state(), v1::DOWN);
  EXPECT_EQ(map.servers(0).shards_size(), 4);
  // The promotion cannot have happened before this lease was asked for
  // (it waits for the lease, and the map it brings is version 4): when the
  // answer is about version 3, a is excluded, and it is the only one.
  req.set_map_version(3);
  ASSERT_TRUE(stub_->RenewLease(Ctx().get(), req, &lease).ok());
  if (lease.map_version() == 3u) {
    EXPECT_EQ(std::vector<std::string>(lease.excluded_servers().begin(), lease.excluded_servers().end()),
              (std::vector<std::string>{"a"}));
  } else {
    EXPECT_EQ(lease.map_version(), 4u);
    EXPECT_TRUE(lease.excluded_servers().empty());
  }

  // The background thread promotes b (the wait bounded by the call deadline).
  ASSERT_TRUE(reader->Read(&map));
  EXPECT_EQ(map.version(), 4u);
  EXPECT_EQ(map.shard_owner_size(), 8);
  for (const std::string& owner : map.shard_owner()) EXPECT_EQ(owner, "b");
  for (int shard = 0; shard < 8; ++shard) {
    // a's shards (the even ones) have b alone; b's keep a, DOWN, as backup.
    const std::vector<std::string> want = shard % 2 == 0 ? std::vector<std::string>{"b"}
                                                         : std::vector<std::string>{"b", "a"};
    const auto& ids = map.shard_replicas(shard).server_ids();
    EXPECT_EQ(std::vector<std::string>(ids.begin(), ids.end()), want) << shard;
  }
  EXPECT_EQ(map.servers(0).state(), v1::DOWN);
  EXPECT_TRUE(map.servers(0).shards().empty());
  ASSERT_TRUE(stub_->RenewLease(Ctx().get(), req, &lease).ok());
  EXPECT_EQ(lease.map_version(), 4u);
  EXPECT_TRUE(lease.excluded_servers().empty());
  ctx->TryCancel();
  while (reader->Read(&map)) {
  }
  reader->Finish();
}

TEST_F(CoordinatorServiceTest, ShutdownEndsWatchStreamsCleanly) {
  v1::JoinResponse join;
  ASSERT_TRUE(stub_->Join(Ctx().get(), MakeJoin("a", 1, 0), &join).ok());
  auto ctx = Ctx();
  auto reader = stub_->WatchClusterMap(ctx.get(), v1::WatchClusterMapRequest());
  v1::ClusterMap map;
  ASSERT_TRUE(reader->Read(&map));  // the stream is being served
  EXPECT_EQ(map.version(), 1u);
  // The handler must end by itself (OK), not be cancelled by the server's
  // shutdown deadline (CANCELLED).
  std::thread stopper([&] { server_->Shutdown(); });
  EXPECT_FALSE(reader->Read(&map));
  const grpc::Status end = reader->Finish();
  stopper.join();
  EXPECT_TRUE(end.ok()) << end.error_code() << ": " << end.error_message();
}

// The map once `done` holds, read until a generous deadline (the
// background pass runs every few milliseconds).
v1::ClusterMap WaitForMap(CoordinatorState* state, const std::function<bool(const v1::ClusterMap&)>& done) {
  const auto deadline = std::chrono::steady_clock::now() + kCallDeadline;
  v1::ClusterMap map = state->Map();
  while (!done(map) && std::chrono::steady_clock::now() < deadline) {
    (void)state->WaitForChange(map.version(), std::chrono::milliseconds(100));
    map = state->Map();
  }
  return map;
}

TEST_F(CoordinatorServiceTest, ANewServerSyncsReportsCaughtUpDrainsAndIsForgotten) {
  v1::JoinResponse join;
  ASSERT_TRUE(stub_->Join(Ctx().get(), MakeJoin("a", 1, 0), &join).ok());
  ASSERT_TRUE(stub_->Join(Ctx().get(), MakeJoin("b", 1, 1), &join).ok());
  ASSERT_TRUE(stub_->Join(Ctx().get(), MakeJoin("c", 1, 2), &join).ok());
  // The background pass gives c syncing roles (8 shards x 2 replicas over
  // 3 servers: about 5 roles each).
  v1::ClusterMap map =
      WaitForMap(server_->state(), [](const v1::ClusterMap& m) { return m.servers(2).syncing_shards_size() > 0; });
  const v1::ServerInfo c = map.servers(2);
  ASSERT_GT(c.syncing_shards_size(), 0) << map.ShortDebugString();
  v1::ReportCaughtUpRequest report;
  report.set_server_id("c");
  report.set_epoch(1);
  for (uint32_t shard : c.syncing_shards()) {
    v1::CaughtUpShard* entry = report.add_shards();
    entry->set_shard(shard);
    entry->set_primary_id(map.shard_owner(static_cast<int>(shard)));
  }
  v1::ReportCaughtUpResponse caught_up;
  ASSERT_TRUE(stub_->ReportCaughtUp(Ctx().get(), report, &caught_up).ok());
  EXPECT_TRUE(caught_up.refused_shards().empty());
  EXPECT_GT(caught_up.map_version(), map.version());
  report.mutable_shards(0)->set_shard(8);
  EXPECT_EQ(stub_->ReportCaughtUp(Ctx().get(), report, &caught_up).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Then the donors leave: every shard is back to 2 replicas, c holds some.
  map = WaitForMap(server_->state(), [](const v1::ClusterMap& m) {
    for (const auto& r : m.shard_replicas()) {
      if (r.server_ids_size() != 2 || r.syncing_ids_size() != 0) return false;
    }
    return m.servers(2).backup_shards_size() > 0;
  });
  EXPECT_GT(map.servers(2).backup_shards_size(), 0) << map.ShortDebugString();

  // Drain: c's roles go back to a and b (they hold every shard already).
  v1::DrainRequest drain;
  drain.set_server_id("c");
  v1::DrainResponse drained;
  ASSERT_TRUE(stub_->Drain(Ctx().get(), drain, &drained).ok());
  EXPECT_GT(drained.roles_to_move(), 0u);
  drain.set_server_id("nobody");
  EXPECT_EQ(stub_->Drain(Ctx().get(), drain, &drained).error_code(), grpc::StatusCode::NOT_FOUND);

  // Drained, stopped, forgotten: the cluster is back to a and b.
  v1::ForgetRequest forget;
  forget.set_server_id("c");
  v1::ForgetResponse forgot;
  grpc::Status up = stub_->Forget(Ctx().get(), forget, &forgot);
  EXPECT_EQ(up.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(up.error_message().find("it is UP"), std::string::npos) << up.error_message();
  // a and b take c's backup roles back by catching up (reported here, as
  // their fetchers would), then c leaves them.
  const auto roles = [](const v1::ServerInfo& s) {
    return s.shards_size() + s.backup_shards_size() + s.syncing_shards_size();
  };
  const auto give_up = std::chrono::steady_clock::now() + kCallDeadline;
  for (map = server_->state()->Map(); roles(map.servers(2)) > 0 && std::chrono::steady_clock::now() < give_up;
       map = server_->state()->Map()) {
    for (const v1::ServerInfo& s : map.servers()) {
      if (s.server_id() == "c" || s.syncing_shards().empty()) continue;
      v1::ReportCaughtUpRequest r;
      r.set_server_id(s.server_id());
      r.set_epoch(s.epoch());
      for (uint32_t shard : s.syncing_shards()) {
        v1::CaughtUpShard* entry = r.add_shards();
        entry->set_shard(shard);
        entry->set_primary_id(map.shard_owner(static_cast<int>(shard)));
      }
      (void)stub_->ReportCaughtUp(Ctx().get(), r, &caught_up);
    }
    (void)server_->state()->WaitForChange(map.version(), std::chrono::milliseconds(100));
  }
  ASSERT_EQ(roles(map.servers(2)), 0) << map.ShortDebugString();
  v1::LeaveRequest leave;
  leave.set_server_id("c");
  leave.set_epoch(1);
  v1::LeaveResponse left;
  ASSERT_TRUE(stub_->Leave(Ctx().get(), leave, &left).ok());
  ASSERT_TRUE(stub_->Forget(Ctx().get(), forget, &forgot).ok());
  map = server_->state()->Map();
  EXPECT_EQ(forgot.map_version(), map.version());
  ASSERT_EQ(map.servers_size(), 2);
  EXPECT_EQ(map.expected_servers(), 2u);
  EXPECT_EQ(stub_->Forget(Ctx().get(), forget, &forgot).error_code(), grpc::StatusCode::NOT_FOUND);
  forget.set_server_id("");
  EXPECT_EQ(stub_->Forget(Ctx().get(), forget, &forgot).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}


// A gate that a test opens and shuts, naming a leader when shut.
class TestGate final : public LeaderGate {
 public:
  Status CheckLeading(std::string* leader) const override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    *leader = leader_;
    if (leading_) return Status::Ok();
    return Unavailable(leader_.empty() ? "not the leader; no leader elected yet (test)"
                                       : "not the leader; the leader is " + leader_);
  }
  void FillStatus(std::chrono::steady_clock::time_point, v1::CoordinatorStatus* status) const override {
    status->set_address("127.0.0.1:1");
    status->set_etcd_prefix("/test/");
  }
  void Set(bool leading, const std::string& leader) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    leading_ = leading;
    leader_ = leader;
  }

 private:
  mutable Mutex mu_;
  bool leading_ GUARDED_BY(mu_) = false;
  std::string leader_ GUARDED_BY(mu_);
};

// The configuration of the gate tests: one server, four shards, nobody
// marked DOWN while a test runs.
CoordinatorConfig GateConfig() {
  CoordinatorConfig config;
  config.expected_servers = 1;
  config.shard_count = 4;
  config.heartbeat_timeout = std::chrono::seconds(600);
  return config;
}

// A context carrying `token` and a deadline.
std::unique_ptr<grpc::ClientContext> TokenContext(const std::string& token = kToken) {
  auto c = std::make_unique<grpc::ClientContext>();
  control::AttachToken(c.get(), token);
  c->set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  return c;
}

// The leader a "not the leader" answer named in its trailer ("" for none).
std::string LeaderOf(const grpc::ClientContext& c) {
  const auto& md = c.GetServerTrailingMetadata();
  auto it = md.find(kLeaderMetadataKey);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

TEST(CoordinatorServiceGateTest, AStandbyServesTheMapAndSendsEverythingElseToTheLeader) {
  const CoordinatorConfig config = GateConfig();
  auto data = std::make_shared<MemoryStoreData>();
  auto state = CoordinatorState::Open(config, std::make_unique<MemoryStore>(data));
  ASSERT_TRUE(state.ok()) << state.status();
  TestGate gate;
  gate.Set(false, "10.0.0.9:7600");
  auto server = CoordinatorServer::Start("127.0.0.1:0", kToken, std::move(state).value(), &gate);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  const auto ctx = [] { return TokenContext(); };

  // Standby: the map is answered, every other call is redirected.
  v1::ClusterMap map;
  EXPECT_TRUE(stub->GetClusterMap(ctx().get(), v1::GetClusterMapRequest(), &map).ok());
  {
    auto c = ctx();
    v1::JoinResponse joined;
    grpc::Status s = stub->Join(c.get(), MakeJoin("a", 1), &joined);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(s.error_message(), "not the leader; the leader is 10.0.0.9:7600");
    EXPECT_EQ(LeaderOf(*c), "10.0.0.9:7600");
  }
  {
    auto c = ctx();
    v1::RenewLeaseResponse lease;
    EXPECT_EQ(stub->RenewLease(c.get(), v1::RenewLeaseRequest(), &lease).error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(LeaderOf(*c), "10.0.0.9:7600");
  }
  {
    auto c = ctx();
    v1::HeartbeatRequest hb;
    hb.set_server_id("a");
    hb.set_epoch(1);
    v1::HeartbeatResponse answer;
    EXPECT_EQ(stub->Heartbeat(c.get(), hb, &answer).error_code(), grpc::StatusCode::UNAVAILABLE);
    v1::DrainRequest drain;
    drain.set_server_id("a");
    v1::DrainResponse drained;
    EXPECT_EQ(stub->Drain(ctx().get(), drain, &drained).error_code(), grpc::StatusCode::UNAVAILABLE);
    v1::ForgetRequest forget;
    forget.set_server_id("a");
    v1::ForgetResponse forgot;
    EXPECT_EQ(stub->Forget(ctx().get(), forget, &forgot).error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  EXPECT_EQ(data->commits(), 0) << "a standby committed something";
  v1::CoordinatorStatus status;
  ASSERT_TRUE(stub->GetCoordinatorStatus(ctx().get(), v1::CoordinatorStatusRequest(), &status).ok());
  EXPECT_EQ(status.role(), v1::CoordinatorStatus::STANDBY);
  EXPECT_EQ(status.leader(), "10.0.0.9:7600");
  EXPECT_EQ(status.why_not_leader(), "not the leader; the leader is 10.0.0.9:7600");
  EXPECT_EQ(status.address(), "127.0.0.1:1");

  // No leader known: refused without the metadata.
  gate.Set(false, "");
  {
    auto c = ctx();
    v1::JoinResponse joined;
    grpc::Status s = stub->Join(c.get(), MakeJoin("a", 1), &joined);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(LeaderOf(*c), "");
  }

  // Leading: the same calls are answered.
  gate.Set(true, "");
  v1::JoinResponse joined;
  ASSERT_TRUE(stub->Join(ctx().get(), MakeJoin("a", 1), &joined).ok());
  v1::RenewLeaseResponse lease;
  EXPECT_TRUE(stub->RenewLease(ctx().get(), v1::RenewLeaseRequest(), &lease).ok());
  EXPECT_EQ(data->commits(), 1);
  ASSERT_TRUE(stub->GetCoordinatorStatus(ctx().get(), v1::CoordinatorStatusRequest(), &status).ok());
  EXPECT_EQ(status.role(), v1::CoordinatorStatus::LEADER);
  EXPECT_EQ(status.leader(), "127.0.0.1:1");
  EXPECT_EQ(status.map_version(), 1u);
}

// KeepLease (RenewLease on a stream): each request answered in order as
// RenewLease would be; a wrong token refused when the stream opens; once
// the coordinator stops leading, the next request ends the stream with
// "not the leader" and the leader in the trailer.
TEST(CoordinatorServiceGateTest, KeepLeaseAnswersEachRenewalUntilTheLeadershipEnds) {
  const CoordinatorConfig config = GateConfig();
  auto state = CoordinatorState::Open(config, std::make_unique<MemoryStore>(std::make_shared<MemoryStoreData>()));
  ASSERT_TRUE(state.ok()) << state.status();
  TestGate gate;
  gate.Set(true, "");
  auto server = CoordinatorServer::Start("127.0.0.1:0", kToken, std::move(state).value(), &gate);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  const auto ctx = [](const std::string& token) { return TokenContext(token); };

  {
    auto c = ctx("wrong-token");
    auto stream = stub->KeepLease(c.get());
    v1::RenewLeaseResponse answer;
    EXPECT_FALSE(stream->Read(&answer));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }

  auto c = ctx(kToken);
  auto stream = stub->KeepLease(c.get());
  for (int i = 0; i < 3; ++i) {
    v1::RenewLeaseRequest request;
    request.set_map_version(0);
    ASSERT_TRUE(stream->Write(request));
    v1::RenewLeaseResponse answer;
    ASSERT_TRUE(stream->Read(&answer)) << "renewal " << i;
    EXPECT_EQ(answer.lease_ms(), config.lease.count());
    EXPECT_EQ(answer.map_version(), 0u);
  }
  // The refused stream is gone once its end has been processed.
  const auto until = std::chrono::steady_clock::now() + kCallDeadline;
  while ((*server)->lease_streams() != 1 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ((*server)->lease_streams(), 1);

  gate.Set(false, "10.0.0.9:7600");
  ASSERT_TRUE(stream->Write(v1::RenewLeaseRequest()));
  v1::RenewLeaseResponse answer;
  EXPECT_FALSE(stream->Read(&answer)) << "a standby answered a renewal";
  const grpc::Status end = stream->Finish();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(end.error_message(), "not the leader; the leader is 10.0.0.9:7600");
  EXPECT_EQ(LeaderOf(*c), "10.0.0.9:7600");
}

TEST(CoordinatorServiceGateTest, AReloadFollowsTheStoreAndWakesWatchers) {
  const CoordinatorConfig config = GateConfig();
  auto data = std::make_shared<MemoryStoreData>();
  // The leader writes through its own state; the standby reads the same
  // records through another.
  auto leader = CoordinatorState::Open(config, std::make_unique<MemoryStore>(data));
  auto standby = CoordinatorState::Open(config, std::make_unique<MemoryStore>(data));
  ASSERT_TRUE(leader.ok() && standby.ok());
  ASSERT_TRUE((*leader)->Join(MakeJoin("a", 1)).ok());
  EXPECT_EQ((*standby)->version(), 0u);
  std::thread waiter([&] {
    auto next = (*standby)->WaitForChange(0, std::chrono::seconds(60));
    ASSERT_TRUE(next.ok());
    ASSERT_TRUE(next->has_value());
    EXPECT_EQ((*next)->version(), 1u);
  });
  ASSERT_TRUE((*standby)->Reload(/*quiet=*/true).ok());
  waiter.join();
  EXPECT_EQ((*standby)->Map().SerializeAsString(), (*leader)->Map().SerializeAsString());
}

}  // namespace
}  // namespace rkv::coordinator
