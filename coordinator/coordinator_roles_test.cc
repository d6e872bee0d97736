// Role separation on the control plane (docs/design.md §10): with a cluster
// credential, the calls only servers make (Join, Heartbeat, Leave,
// ReportReplicaFailure, ReportCaughtUp) refuse the client token and change
// nothing; the calls clients make take either credential; without one, the
// client token serves every role.
#include "coordinator/coordinator_service.h"

#include <gtest/gtest.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <thread>

#include "proto/auth.h"
#include "coordinator/test_util.h"

// A namespace of its own: the sanitizer presets build the tests of this
// directory as unity files, where the other tests' helpers are visible.
namespace rkv::coordinator::roles_test {
namespace {

using testing::MakeJoin;
using testing::MemoryStore;
using testing::MemoryStoreData;

constexpr char kClientToken[] = "roles-test-client-token";
constexpr char kClusterToken[] = "roles-test-cluster-credential";
constexpr char kOperatorToken[] = "roles-test-operator-credential";
constexpr auto kCallDeadline = std::chrono::seconds(20);

std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token) { return testing::CallContext(token, kCallDeadline); }

std::string Refusal(const std::string& rpc) {
  return rpc + " needs the cluster credential (the servers' role); this credential is a client's";
}

const v1::ServerInfo* FindServer(const v1::ClusterMap& map, const std::string& id) {
  for (const v1::ServerInfo& s : map.servers()) {
    if (s.server_id() == id) return &s;
  }
  return nullptr;
}

class CoordinatorRolesTest : public ::testing::Test {
 protected:
  // Two servers, 8 shards, two copies each; `cluster_token` "" for none.
  void Start(const std::string& cluster_token,
             std::chrono::milliseconds heartbeat_timeout = std::chrono::seconds(600),
             const std::string& operator_token = "",
             std::shared_ptr<LiveClientCredentials> clients = nullptr) {
    CoordinatorConfig config;
    config.expected_servers = 2;
    config.shard_count = 8;
    config.heartbeat_interval = std::min<std::chrono::milliseconds>(config.heartbeat_interval, heartbeat_timeout / 4);
    config.heartbeat_timeout = heartbeat_timeout;
    config.lease = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(200), heartbeat_timeout);
    config.suspect_after = std::chrono::milliseconds(0);
    auto state = CoordinatorState::Open(config, std::make_unique<MemoryStore>(std::make_shared<MemoryStoreData>()));
    ASSERT_TRUE(state.ok()) << state.status();
    auto server = CoordinatorServer::Start("127.0.0.1:0", kClientToken, std::move(state).value(), nullptr,
                                           cluster_token, operator_token, std::move(clients));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    stub_ = v1::Coordinator::NewStub(grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }

  // Joins servers a and b (epoch 1) presenting `token`.
  void JoinBoth(const std::string& token) {
    v1::JoinResponse join;
    grpc::Status a = stub_->Join(Ctx(token).get(), MakeJoin("a", 1, 0), &join);
    ASSERT_TRUE(a.ok()) << a.error_message();
    grpc::Status b = stub_->Join(Ctx(token).get(), MakeJoin("b", 1, 1), &join);
    ASSERT_TRUE(b.ok()) << b.error_message();
  }

  grpc::Status Heartbeat(const std::string& token, const std::string& id, uint64_t epoch) {
    v1::HeartbeatRequest request;
    request.set_server_id(id);
    request.set_epoch(epoch);
    v1::HeartbeatResponse response;
    return stub_->Heartbeat(Ctx(token).get(), request, &response);
  }

  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(CoordinatorRolesTest, ServerOnlyCallsRefuseTheClientTokenAndChangeNothing) {
  Start(kClusterToken);
  JoinBoth(kClusterToken);
  const v1::ClusterMap before = server_->state()->Map();
  ASSERT_EQ(before.servers_size(), 2);
  ASSERT_EQ(before.shard_replicas(0).server_ids_size(), 2);

  // A Join an epoch far ahead would lock the real server a out.
  v1::JoinResponse join;
  grpc::Status s = stub_->Join(Ctx(kClientToken).get(), MakeJoin("a", 1'000'000, 0), &join);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), Refusal("Join"));
  s = stub_->Join(Ctx(kClientToken).get(), MakeJoin("intruder", 1, 2), &join);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);

  s = Heartbeat(kClientToken, "a", 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), Refusal("Heartbeat"));

  v1::LeaveRequest leave;
  leave.set_server_id("a");
  leave.set_epoch(1);
  v1::LeaveResponse left;
  s = stub_->Leave(Ctx(kClientToken).get(), leave, &left);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), Refusal("Leave"));

  // Would cut shards 0 and 2 to one copy.
  v1::ReportReplicaFailureRequest report;
  report.set_server_id(before.shard_owner(0));
  report.set_epoch(1);
  report.set_backup_id(before.shard_owner(0) == "a" ? "b" : "a");
  report.add_shards(0);
  v1::ReportReplicaFailureResponse reported;
  s = stub_->ReportReplicaFailure(Ctx(kClientToken).get(), report, &reported);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), Refusal("ReportReplicaFailure"));

  v1::ReportCaughtUpRequest caught_up;
  caught_up.set_server_id("a");
  caught_up.set_epoch(1);
  v1::CaughtUpShard* shard = caught_up.add_shards();
  shard->set_shard(0);
  shard->set_primary_id(before.shard_owner(0));
  v1::ReportCaughtUpResponse caught_up_answer;
  s = stub_->ReportCaughtUp(Ctx(kClientToken).get(), caught_up, &caught_up_answer);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), Refusal("ReportCaughtUp"));

  // A digest of neither credential stays UNAUTHENTICATED.
  s = stub_->Join(Ctx("no-such-token").get(), MakeJoin("a", 2, 0), &join);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(s.error_message(), "missing or invalid token");

  // Nothing changed: the same map, both servers UP at epoch 1, two copies
  // of shard 0, and a still heartbeats at its own epoch.
  const v1::ClusterMap after = server_->state()->Map();
  EXPECT_EQ(after.version(), before.version());
  ASSERT_EQ(after.servers_size(), 2);
  for (const v1::ServerInfo& info : after.servers()) {
    EXPECT_EQ(info.state(), v1::UP) << info.server_id();
    EXPECT_EQ(info.epoch(), 1u) << info.server_id();
  }
  EXPECT_EQ(after.shard_replicas(0).server_ids_size(), 2);
  s = Heartbeat(kClusterToken, "a", 1);
  EXPECT_TRUE(s.ok()) << s.error_message();

  // The cluster credential does what the client token could not.
  s = stub_->ReportReplicaFailure(Ctx(kClusterToken).get(), report, &reported);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(server_->state()->Map().shard_replicas(0).server_ids_size(), 1);
  s = stub_->Leave(Ctx(kClusterToken).get(), leave, &left);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const v1::ClusterMap left_map = server_->state()->Map();  // FindServer points into it
  const v1::ServerInfo* a = FindServer(left_map, "a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->state(), v1::DOWN);
}

TEST_F(CoordinatorRolesTest, AClientHeartbeatDoesNotKeepASilentServerUp) {
  Start(kClusterToken, std::chrono::milliseconds(400));
  JoinBoth(kClusterToken);
  // b heartbeats as a server would; someone with the client token
  // heartbeats for a, whose process is gone.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool a_down = false;
  while (!a_down && std::chrono::steady_clock::now() < until) {
    EXPECT_EQ(Heartbeat(kClientToken, "a", 1).error_code(), grpc::StatusCode::PERMISSION_DENIED);
    grpc::Status b = Heartbeat(kClusterToken, "b", 1);
    EXPECT_TRUE(b.ok()) << b.error_message();
    const v1::ClusterMap now = server_->state()->Map();  // FindServer points into it
    const v1::ServerInfo* a = FindServer(now, "a");
    ASSERT_NE(a, nullptr);
    a_down = a->state() == v1::DOWN;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(a_down) << "forged heartbeats kept a UP: " << server_->state()->Map().ShortDebugString();
  const v1::ClusterMap last = server_->state()->Map();  // FindServer points into it
  const v1::ServerInfo* b = FindServer(last, "b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->state(), v1::UP);
}

TEST_F(CoordinatorRolesTest, ClientCallsTakeEitherCredential) {
  Start(kClusterToken);
  JoinBoth(kClusterToken);
  const uint64_t version = server_->state()->version();
  for (const std::string token : {kClientToken, kClusterToken}) {
    SCOPED_TRACE(token);
    v1::ClusterMap map;
    grpc::Status s = stub_->GetClusterMap(Ctx(token).get(), v1::GetClusterMapRequest(), &map);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(map.version(), version);
    v1::RenewLeaseResponse lease;
    s = stub_->RenewLease(Ctx(token).get(), v1::RenewLeaseRequest(), &lease);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(lease.map_version(), version);
    v1::CoordinatorStatus status;
    s = stub_->GetCoordinatorStatus(Ctx(token).get(), v1::CoordinatorStatusRequest(), &status);
    EXPECT_TRUE(s.ok()) << s.error_message();
    v1::ReportUnresponsiveRequest unresponsive;
    unresponsive.set_server_id("a");
    unresponsive.set_epoch(1);
    v1::ReportUnresponsiveResponse probing;
    s = stub_->ReportUnresponsive(Ctx(token).get(), unresponsive, &probing);
    EXPECT_TRUE(s.ok()) << s.error_message();
    {
      auto ctx = Ctx(token);
      auto reader = stub_->WatchClusterMap(ctx.get(), v1::WatchClusterMapRequest());
      ASSERT_TRUE(reader->Read(&map));
      EXPECT_EQ(map.version(), version);
      ctx->TryCancel();
      (void)reader->Finish();
    }
    {
      auto ctx = Ctx(token);
      auto stream = stub_->KeepLease(ctx.get());
      ASSERT_TRUE(stream->Write(v1::RenewLeaseRequest()));
      ASSERT_TRUE(stream->Read(&lease));
      EXPECT_EQ(lease.map_version(), version);
      stream->WritesDone();
      (void)stream->Finish();
    }
    // The operator's calls (no operator credential here): past the token
    // check to the state machine, which knows no such server.
    v1::DrainRequest drain;
    drain.set_server_id("nobody");
    v1::DrainResponse drained;
    EXPECT_EQ(stub_->Drain(Ctx(token).get(), drain, &drained).error_code(), grpc::StatusCode::NOT_FOUND);
    v1::ForgetRequest forget;
    forget.set_server_id("nobody");
    v1::ForgetResponse forgot;
    EXPECT_EQ(stub_->Forget(Ctx(token).get(), forget, &forgot).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // A wrong token is refused on the client calls as before.
  v1::ClusterMap map;
  EXPECT_EQ(stub_->GetClusterMap(Ctx("no-such-token").get(), v1::GetClusterMapRequest(), &map).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(server_->state()->version(), version);
}

TEST_F(CoordinatorRolesTest, WithoutAClusterCredentialTheClientTokenServesEveryRole) {
  Start("");
  JoinBoth(kClientToken);
  grpc::Status s = Heartbeat(kClientToken, "a", 1);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // The servers' credential is unknown to this coordinator.
  EXPECT_EQ(Heartbeat(kClusterToken, "a", 1).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  v1::ClusterMap map;
  EXPECT_EQ(stub_->GetClusterMap(Ctx(kClusterToken).get(), v1::GetClusterMapRequest(), &map).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  v1::LeaveRequest leave;
  leave.set_server_id("b");
  leave.set_epoch(1);
  v1::LeaveResponse left;
  s = stub_->Leave(Ctx(kClientToken).get(), leave, &left);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// Named client credentials (--client_credentials_file): each reads the map
// and its revocation refuses it from the next call on, naming it; unlike
// --token_file's ("token"), they never serve the servers' or the
// operator's role, not even without a cluster or operator credential.
TEST_F(CoordinatorRolesTest, NamedClientCredentialsAreClientsOnlyAndRevocable) {
  ClientCredentials initial;
  ASSERT_TRUE(initial.Add("token", kClientToken).ok());
  ASSERT_TRUE(initial.Add("alice", "alice-secret").ok());
  ASSERT_TRUE(initial.Add("bob", "bob-secret").ok());
  auto live = std::make_shared<LiveClientCredentials>(initial);
  Start("", std::chrono::seconds(600), "", live);
  v1::ClusterMap map;
  for (const char* token : {kClientToken, "alice-secret", "bob-secret"}) {
    grpc::Status s = stub_->GetClusterMap(Ctx(token).get(), v1::GetClusterMapRequest(), &map);
    EXPECT_TRUE(s.ok()) << token << ": " << s.error_message();
  }
  v1::JoinResponse join;
  grpc::Status named = stub_->Join(Ctx("alice-secret").get(), MakeJoin("a", 1, 0), &join);
  EXPECT_EQ(named.error_code(), grpc::StatusCode::PERMISSION_DENIED) << named.error_message();
  EXPECT_EQ(named.error_message(), Refusal("Join"));
  v1::DrainRequest drain;
  drain.set_server_id("a");
  v1::DrainResponse drained;
  grpc::Status drain_status = stub_->Drain(Ctx("alice-secret").get(), drain, &drained);
  EXPECT_EQ(drain_status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(drain_status.error_message(),
            "Drain needs the operator credential (the coordinator's --operator_token_file) or --token_file's; this "
            "credential is client credential alice");
  JoinBoth(kClientToken);  // --token_file's credential serves every role here

  // Streams bob opened before the reload end with it.
  auto watch_ctx = Ctx("bob-secret");
  auto watch = stub_->WatchClusterMap(watch_ctx.get(), v1::WatchClusterMapRequest());
  ASSERT_TRUE(watch->Read(&map));
  auto lease_ctx = Ctx("bob-secret");
  auto lease_stream = stub_->KeepLease(lease_ctx.get());
  v1::RenewLeaseResponse renewed;
  ASSERT_TRUE(lease_stream->Write(v1::RenewLeaseRequest()));
  ASSERT_TRUE(lease_stream->Read(&renewed));

  ClientCredentials without_bob;
  ASSERT_TRUE(without_bob.Add("token", kClientToken).ok());
  ASSERT_TRUE(without_bob.Add("alice", "alice-secret").ok());
  live->Replace(without_bob);
  // The watch ends within its poll (no new map needed), the lease stream
  // at its next renewal, each with the revocation.
  EXPECT_FALSE(watch->Read(&map));
  grpc::Status watch_end = watch->Finish();
  EXPECT_EQ(watch_end.error_code(), grpc::StatusCode::UNAUTHENTICATED) << watch_end.error_message();
  EXPECT_EQ(watch_end.error_message(), "client credential bob was revoked");
  (void)lease_stream->Write(v1::RenewLeaseRequest());
  EXPECT_FALSE(lease_stream->Read(&renewed));
  grpc::Status lease_end = lease_stream->Finish();
  EXPECT_EQ(lease_end.error_code(), grpc::StatusCode::UNAUTHENTICATED) << lease_end.error_message();
  EXPECT_EQ(lease_end.error_message(), "client credential bob was revoked");
  grpc::Status revoked = stub_->GetClusterMap(Ctx("bob-secret").get(), v1::GetClusterMapRequest(), &map);
  EXPECT_EQ(revoked.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(revoked.error_message(), "client credential bob was revoked");
  v1::RenewLeaseResponse lease;
  EXPECT_EQ(stub_->RenewLease(Ctx("bob-secret").get(), v1::RenewLeaseRequest(), &lease).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(stub_->GetClusterMap(Ctx("alice-secret").get(), v1::GetClusterMapRequest(), &map).ok());
}

// With an operator credential, Drain and Forget take it alone: the client
// token and the cluster credential are refused naming the role, and
// nothing changes; the operator credential also reads the map (kvctl works
// with it alone) but cannot act as a server.
TEST_F(CoordinatorRolesTest, DrainAndForgetTakeOnlyTheOperatorCredential) {
  Start(kClusterToken, std::chrono::seconds(600), kOperatorToken);
  JoinBoth(kClusterToken);
  const uint64_t version = server_->state()->version();
  for (const auto& [token, whose] : {std::pair<std::string, std::string>{kClientToken, "a client's"},
                                     std::pair<std::string, std::string>{kClusterToken, "the servers'"}}) {
    v1::DrainRequest drain;
    drain.set_server_id("a");
    v1::DrainResponse drained;
    grpc::Status s = stub_->Drain(Ctx(token).get(), drain, &drained);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << whose;
    EXPECT_EQ(s.error_message(),
              "Drain needs the operator credential (the coordinator's --operator_token_file); this credential is " +
                  whose);
    v1::ForgetRequest forget;
    forget.set_server_id("b");
    v1::ForgetResponse forgot;
    s = stub_->Forget(Ctx(token).get(), forget, &forgot);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << whose;
  }
  v1::DrainRequest drain;
  drain.set_server_id("a");
  v1::DrainResponse drained;
  EXPECT_EQ(stub_->Drain(Ctx("no-such-token").get(), drain, &drained).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(server_->state()->version(), version) << "nothing changed";
  const v1::ClusterMap after = server_->state()->Map();
  for (const v1::ServerInfo& s : after.servers()) EXPECT_FALSE(s.draining()) << s.server_id();

  // The operator's credential reads the map and drains.
  v1::ClusterMap map;
  grpc::Status s = stub_->GetClusterMap(Ctx(kOperatorToken).get(), v1::GetClusterMapRequest(), &map);
  EXPECT_TRUE(s.ok()) << s.error_message();
  v1::ForgetRequest forget;
  forget.set_server_id("nobody");
  v1::ForgetResponse forgot;
  EXPECT_EQ(stub_->Forget(Ctx(kOperatorToken).get(), forget, &forgot).error_code(), grpc::StatusCode::NOT_FOUND)
      << "past the credential check";
  s = stub_->Drain(Ctx(kOperatorToken).get(), drain, &drained);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // It is no server's.
  s = Heartbeat(kOperatorToken, "a", 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(),
            "Heartbeat needs the cluster credential (the servers' role); this credential is the operator's");
}

TEST(CoordinatorRolesStartTest, RefusesAnOperatorCredentialEqualToAnother) {
  for (const std::string& same : {std::string(kClientToken), std::string(kClusterToken)}) {
    CoordinatorConfig config;
    config.expected_servers = 1;
    config.shard_count = 8;
    auto state = CoordinatorState::Open(config, std::make_unique<MemoryStore>(std::make_shared<MemoryStoreData>()));
    ASSERT_TRUE(state.ok()) << state.status();
    auto server =
        CoordinatorServer::Start("127.0.0.1:0", kClientToken, std::move(state).value(), nullptr, kClusterToken, same);
    ASSERT_FALSE(server.ok()) << same;
    EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(CoordinatorRolesStartTest, RefusesAClusterCredentialEqualToTheClientToken) {
  CoordinatorConfig config;
  config.expected_servers = 1;
  config.shard_count = 8;
  auto state = CoordinatorState::Open(config, std::make_unique<MemoryStore>(std::make_shared<MemoryStoreData>()));
  ASSERT_TRUE(state.ok()) << state.status();
  auto server = CoordinatorServer::Start("127.0.0.1:0", kClientToken, std::move(state).value(), nullptr, kClientToken);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rkv::coordinator::roles_test
