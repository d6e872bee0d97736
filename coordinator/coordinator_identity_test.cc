// Identity binding on the control plane (docs/design.md §10): with
// per-server credentials, a server id is bound to the credential it first
// joined with; a server credential for X cannot Join, Heartbeat, Leave or
// report as Y (PERMISSION_DENIED naming both, nothing changed), X's own
// calls work, and the binding outlives a coordinator restart (RocksDB data
// dir) and a new leader loading the shared store.
#include "coordinator/coordinator_service.h"

#include <gtest/gtest.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "proto/auth.h"
#include "coordinator/test_util.h"

// A namespace of its own: the sanitizer presets build the tests of this
// directory as unity files, where the other tests' helpers are visible.
namespace rkv::coordinator::identity_test {
namespace {

using testing::MakeJoin;
using testing::MemoryStore;
using testing::MemoryStoreData;
using testing::TempDir;

constexpr char kClientToken[] = "identity-test-client-token";
constexpr char kOperatorToken[] = "identity-test-operator-credential";
constexpr char kTokenA[] = "identity-test-server-a-credential";
constexpr char kTokenB[] = "identity-test-server-b-credential";
constexpr auto kCallDeadline = std::chrono::seconds(20);

std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token) { return testing::CallContext(token, kCallDeadline); }

std::shared_ptr<const ClientCredentials> ServerCredentials() {
  auto parsed = ClientCredentials::Parse(std::string("srv-a ") + kTokenA + "\nsrv-b " + kTokenB + "\n", "servers");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return std::make_shared<const ClientCredentials>(std::move(parsed).value());
}

CoordinatorConfig TwoServers() {
  CoordinatorConfig config;
  config.expected_servers = 2;
  config.shard_count = 8;
  config.heartbeat_timeout = std::chrono::seconds(600);
  config.lease = std::chrono::milliseconds(200);
  config.suspect_after = std::chrono::milliseconds(0);
  return config;
}

// "RPC refused: server credential srv-a cannot act as server b, which is
// bound to credential srv-b".
std::string Impersonation(const std::string& rpc) {
  return rpc + " refused: server credential srv-a cannot act as server b, which is bound to credential srv-b";
}

class CoordinatorIdentityTest : public ::testing::Test {
 protected:
  // Two servers, 8 shards, two copies each, per-server credentials srv-a
  // and srv-b; a joins with srv-a and b with srv-b.
  void SetUp() override {
    auto state = CoordinatorState::Open(TwoServers(), std::make_unique<MemoryStore>(data_));
    ASSERT_TRUE(state.ok()) << state.status();
    auto clients = std::make_shared<LiveClientCredentials>(ClientCredentials());
    ASSERT_TRUE(clients->Reload(kClientToken, "", {}).ok());
    auto server = CoordinatorServer::Start("127.0.0.1:0", kClientToken, std::move(state).value(), nullptr, "",
                                           kOperatorToken, clients, ServerCredentials());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    stub_ = v1::Coordinator::NewStub(grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    v1::JoinResponse join;
    grpc::Status a = stub_->Join(Ctx(kTokenA).get(), MakeJoin("a", 1, 0), &join);
    ASSERT_TRUE(a.ok()) << a.error_message();
    grpc::Status b = stub_->Join(Ctx(kTokenB).get(), MakeJoin("b", 1, 1), &join);
    ASSERT_TRUE(b.ok()) << b.error_message();
  }

  grpc::Status Heartbeat(const std::string& token, const std::string& id, uint64_t epoch) {
    v1::HeartbeatRequest request;
    request.set_server_id(id);
    request.set_epoch(epoch);
    v1::HeartbeatResponse response;
    return stub_->Heartbeat(Ctx(token).get(), request, &response);
  }

  std::shared_ptr<MemoryStoreData> data_ = std::make_shared<MemoryStoreData>();
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(CoordinatorIdentityTest, AServerCredentialForACannotActAsBAndNothingChanges) {
  const v1::ClusterMap before = server_->state()->Map();
  ASSERT_EQ(before.servers_size(), 2);
  ASSERT_EQ(before.shard_replicas(0).server_ids_size(), 2);
  const int commits = data_->commits();

  // A Join an epoch far ahead would lock the real b out.
  v1::JoinResponse join;
  grpc::Status s = stub_->Join(Ctx(kTokenA).get(), MakeJoin("b", 1'000'000, 1), &join);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), Impersonation("Join"));

  s = Heartbeat(kTokenA, "b", 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), Impersonation("Heartbeat"));

  v1::LeaveRequest leave;
  leave.set_server_id("b");
  leave.set_epoch(1);
  v1::LeaveResponse left;
  s = stub_->Leave(Ctx(kTokenA).get(), leave, &left);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), Impersonation("Leave"));

  // b reporting a as failing would cut the shards b leads to one copy.
  v1::ReportReplicaFailureRequest report;
  report.set_server_id("b");
  report.set_epoch(1);
  report.set_backup_id("a");
  for (uint32_t shard = 0; shard < 8; ++shard) report.add_shards(shard);
  v1::ReportReplicaFailureResponse reported;
  s = stub_->ReportReplicaFailure(Ctx(kTokenA).get(), report, &reported);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), Impersonation("ReportReplicaFailure"));

  v1::ReportCaughtUpRequest caught_up;
  caught_up.set_server_id("b");
  caught_up.set_epoch(1);
  v1::CaughtUpShard* shard = caught_up.add_shards();
  shard->set_shard(0);
  shard->set_primary_id(before.shard_owner(0));
  v1::ReportCaughtUpResponse caught_up_answer;
  s = stub_->ReportCaughtUp(Ctx(kTokenA).get(), caught_up, &caught_up_answer);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), Impersonation("ReportCaughtUp"));

  // Nothing changed: the same map, and nothing committed.
  EXPECT_EQ(server_->state()->Map().SerializeAsString(), before.SerializeAsString());
  EXPECT_EQ(data_->commits(), commits);
}

TEST_F(CoordinatorIdentityTest, EachServersOwnCallsWork) {
  EXPECT_TRUE(Heartbeat(kTokenA, "a", 1).ok());
  EXPECT_TRUE(Heartbeat(kTokenB, "b", 1).ok());
  // A retried Join and a restart under a new epoch, each with its own.
  v1::JoinResponse join;
  grpc::Status s = stub_->Join(Ctx(kTokenA).get(), MakeJoin("a", 1, 0), &join);
  EXPECT_TRUE(s.ok()) << s.error_message();
  s = stub_->Join(Ctx(kTokenB).get(), MakeJoin("b", 2, 1), &join);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // The servers read the map and renew leases with their credentials.
  v1::ClusterMap map;
  s = stub_->GetClusterMap(Ctx(kTokenA).get(), v1::GetClusterMapRequest(), &map);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // The map names each server's binding, which peers check
  // (ServerInfo.credential).
  for (const v1::ServerInfo& info : map.servers()) {
    EXPECT_EQ(info.credential(), info.server_id() == "a" ? "srv-a" : "srv-b") << info.server_id();
  }
  // a, primary of shard 0, reports b, its backup there: its own report
  // about another server is checked against a alone.
  const std::string owner = map.shard_owner(0);
  const std::string backup = owner == "a" ? "b" : "a";
  v1::ReportReplicaFailureRequest report;
  report.set_server_id(owner);
  report.set_epoch(owner == "a" ? 1 : 2);
  report.set_backup_id(backup);
  report.add_shards(0);
  v1::ReportReplicaFailureResponse reported;
  s = stub_->ReportReplicaFailure(Ctx(owner == "a" ? kTokenA : kTokenB).get(), report, &reported);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(server_->state()->Map().shard_replicas(0).server_ids_size(), 1);
  // b leaves with its own credential.
  v1::LeaveRequest leave;
  leave.set_server_id("b");
  leave.set_epoch(2);
  v1::LeaveResponse left;
  s = stub_->Leave(Ctx(kTokenB).get(), leave, &left);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(CoordinatorIdentityTest, AWipedServerJoinsUnderANewIdWithTheSameCredential) {
  v1::JoinResponse join;
  grpc::Status s = stub_->Join(Ctx(kTokenA).get(), MakeJoin("a2", 1, 2), &join);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(server_->state()->Map().servers_size(), 3);
  // And a2 is bound to srv-a: srv-b cannot heartbeat it.
  EXPECT_EQ(Heartbeat(kTokenB, "a2", 1).error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(CoordinatorIdentityTest, OtherRolesCannotMakeServerCalls) {
  const v1::ClusterMap before = server_->state()->Map();
  grpc::Status s = Heartbeat(kClientToken, "a", 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(),
            "Heartbeat needs a server credential (the servers' role); this credential is a client's");
  s = Heartbeat(kOperatorToken, "a", 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  s = Heartbeat("identity-test-unknown", "a", 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // A server credential is not the operator's.
  v1::DrainRequest drain;
  drain.set_server_id("b");
  v1::DrainResponse drained;
  s = stub_->Drain(Ctx(kTokenA).get(), drain, &drained);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(),
            "Drain needs the operator credential (the coordinator's --operator_token_file); this credential is "
            "server credential srv-a");
  EXPECT_EQ(server_->state()->Map().SerializeAsString(), before.SerializeAsString());
  // The operator still drains.
  s = stub_->Drain(Ctx(kOperatorToken).get(), drain, &drained);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST(CoordinatorIdentityStartTest, PerServerCredentialsMustBeTheirOwn) {
  const auto start = [](const std::string& client, const std::string& cluster, const std::string& op) {
    auto state =
        CoordinatorState::Open(TwoServers(), std::make_unique<MemoryStore>(std::make_shared<MemoryStoreData>()));
    EXPECT_TRUE(state.ok()) << state.status();
    return CoordinatorServer::Start("127.0.0.1:0", client, std::move(state).value(), nullptr, cluster, op, nullptr,
                                    ServerCredentials())
        .status();
  };
  EXPECT_TRUE(start(kClientToken, "", kOperatorToken).ok());
  const Status both = start(kClientToken, "identity-test-cluster", "");
  EXPECT_EQ(both.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(both.message().find("both a cluster credential and per-server credentials"), std::string::npos) << both;
  EXPECT_EQ(start(kTokenA, "", "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(start(kClientToken, "", kTokenB).code(), StatusCode::kInvalidArgument);
}

// The binding as the state keeps it: persisted with the record, checked
// under the state's lock.
TEST(CoordinatorIdentityStateTest, TheBindingSurvivesARestartOnTheDataDir) {
  TempDir dir;
  {
    auto store = OpenRocksDbStateStore(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    auto state = CoordinatorState::Open(TwoServers(), std::move(store).value());
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_TRUE((*state)->Join(MakeJoin("a", 1, 0), "srv-a").ok());
    ASSERT_TRUE((*state)->Join(MakeJoin("b", 1, 1), "srv-b").ok());
  }
  auto store = OpenRocksDbStateStore(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  auto state = CoordinatorState::Open(TwoServers(), std::move(store).value());
  ASSERT_TRUE(state.ok()) << state.status();
  const v1::ClusterMap before = (*state)->Map();
  v1::HeartbeatRequest beat;
  beat.set_server_id("b");
  beat.set_epoch(1);
  EXPECT_EQ((*state)->Heartbeat(beat, "srv-a").status().code(), StatusCode::kPermissionDenied);
  auto join = (*state)->Join(MakeJoin("b", 2, 1), "srv-a");
  EXPECT_EQ(join.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(join.status().message(), Impersonation("Join"));
  EXPECT_EQ((*state)->Map().SerializeAsString(), before.SerializeAsString());
  EXPECT_TRUE((*state)->Heartbeat(beat, "srv-b").ok());
  EXPECT_TRUE((*state)->Join(MakeJoin("b", 2, 1), "srv-b").ok());
}

TEST(CoordinatorIdentityStateTest, ANewLeaderLoadingTheSharedStoreKeepsTheBinding) {
  auto data = std::make_shared<MemoryStoreData>();
  auto leader = CoordinatorState::Open(TwoServers(), std::make_unique<MemoryStore>(data));
  ASSERT_TRUE(leader.ok()) << leader.status();
  ASSERT_TRUE((*leader)->Join(MakeJoin("a", 1, 0), "srv-a").ok());
  ASSERT_TRUE((*leader)->Join(MakeJoin("b", 1, 1), "srv-b").ok());
  // Another coordinator on the same store (a standby that becomes leader
  // loads it, as Reload does).
  auto next = CoordinatorState::Open(TwoServers(), std::make_unique<MemoryStore>(data));
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE((*next)->Reload(/*quiet=*/false).ok());
  v1::LeaveRequest leave;
  leave.set_server_id("a");
  leave.set_epoch(1);
  EXPECT_EQ((*next)->Leave(leave, "srv-b").code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE((*next)->Leave(leave, "srv-a").ok());
}

TEST(CoordinatorIdentityStateTest, ARecordStoredBeforeBindingBindsOnItsNextJoin) {
  auto data = std::make_shared<MemoryStoreData>();
  {
    auto state = CoordinatorState::Open(TwoServers(), std::make_unique<MemoryStore>(data));
    ASSERT_TRUE(state.ok()) << state.status();
    // Joined with the shared cluster credential: nothing bound.
    ASSERT_TRUE((*state)->Join(MakeJoin("a", 1, 0)).ok());
    ASSERT_TRUE((*state)->Join(MakeJoin("b", 1, 1)).ok());
  }
  auto state = CoordinatorState::Open(TwoServers(), std::make_unique<MemoryStore>(data));
  ASSERT_TRUE(state.ok()) << state.status();
  // Not bound yet: a server credential must join before anything else.
  v1::HeartbeatRequest beat;
  beat.set_server_id("a");
  beat.set_epoch(1);
  const auto refused = (*state)->Heartbeat(beat, "srv-a");
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("bound to no credential yet; join first"), std::string::npos)
      << refused.status();
  // The same incarnation joining again binds it (one commit) ...
  const int commits = data->commits();
  ASSERT_TRUE((*state)->Join(MakeJoin("a", 1, 0), "srv-a").ok());
  EXPECT_EQ(data->commits(), commits + 1);
  EXPECT_TRUE((*state)->Heartbeat(beat, "srv-a").ok());
  EXPECT_EQ((*state)->Heartbeat(beat, "srv-b").status().code(), StatusCode::kPermissionDenied);
  // ... and the shared credential (no name) still acts for it: only
  // per-server credentials bind.
  EXPECT_TRUE((*state)->Heartbeat(beat).ok());
}

TEST(CoordinatorIdentityStateTest, ForgetDropsTheBinding) {
  auto data = std::make_shared<MemoryStoreData>();
  CoordinatorConfig config = TwoServers();
  config.expected_servers = 1;
  config.replicas = 1;
  auto state = CoordinatorState::Open(config, std::make_unique<MemoryStore>(data));
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE((*state)->Join(MakeJoin("a", 1, 0), "srv-a").ok());
  ASSERT_TRUE((*state)->Join(MakeJoin("x", 1, 1), "srv-b").ok());  // added: no role yet
  v1::LeaveRequest leave;
  leave.set_server_id("x");
  leave.set_epoch(1);
  ASSERT_TRUE((*state)->Leave(leave, "srv-b").ok());
  v1::ForgetRequest forget;
  forget.set_server_id("x");
  ASSERT_TRUE((*state)->Forget(forget).ok()) << (*state)->Map().ShortDebugString();
  // A Join under the id is a new server's: bound to whoever joins now.
  EXPECT_TRUE((*state)->Join(MakeJoin("x", 1, 1), "srv-a").ok());
}

}  // namespace
}  // namespace rkv::coordinator::identity_test
