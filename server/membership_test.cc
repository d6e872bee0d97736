#include "server/membership.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "proto/region_descriptor.h"
#include "proto/table_params.h"
#include "server/coordinator/coordinator_service.h"
#include "server/coordinator/test_util.h"

namespace rkv::server {
namespace {

using coordinator::CoordinatorConfig;
using coordinator::CoordinatorServer;
using coordinator::CoordinatorState;
using coordinator::testing::MakeJoin;
using coordinator::testing::MemoryStore;
using coordinator::testing::MemoryStoreData;
using coordinator::testing::TempDir;

constexpr char kToken[] = "membership-test-token";
// Upper bound on waiting for something asynchronous that must happen; the
// tests never rely on it passing, only on it not hanging forever.
constexpr auto kPatience = std::chrono::seconds(30);

std::unique_ptr<CoordinatorServer> StartCoordinator(uint32_t servers, const std::string& listen = "127.0.0.1:0") {
  CoordinatorConfig config;
  config.expected_servers = servers;
  config.shard_count = 4;
  config.heartbeat_interval = std::chrono::milliseconds(10);
  config.heartbeat_timeout = std::chrono::milliseconds(60'000);  // no expiry during a test
  auto state = CoordinatorState::Open(config, std::make_unique<MemoryStore>(std::make_shared<MemoryStoreData>()));
  EXPECT_TRUE(state.ok()) << state.status();
  auto server = CoordinatorServer::Start(listen, kToken, std::move(state).value());
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(server).value() : nullptr;
}

// The value of `v`, which the test expects to hold one.
template <typename T>
T Valid(StatusOr<T> v) {
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? std::move(v).value() : T{};
}

MembershipOptions Options(const std::string& coordinator, const std::string& id = "s-00000001") {
  const v1::JoinRequest j = MakeJoin(id, 3, 1);
  MembershipOptions o;
  o.coordinator_address = coordinator;
  o.token = kToken;
  o.self.server_id = j.server_id();
  o.self.epoch = j.epoch();
  o.self.data_address = j.data_address();
  o.self.admin_address = j.admin_address();
  o.self.transport = j.transport();
  o.self.index = Valid(control::FromProto(j.index()));
  o.self.heap = Valid(control::FromProto(j.heap()));
  o.self.table = Valid(control::FromProto(j.table()));
  o.initial_backoff = std::chrono::milliseconds(5);
  o.max_backoff = std::chrono::milliseconds(50);
  return o;
}

const v1::ServerInfo* Find(const v1::ClusterMap& map, const std::string& id) {
  for (const auto& s : map.servers()) {
    if (s.server_id() == id) return &s;
  }
  return nullptr;
}

// Waits until `pred` holds; false if it never does within kPatience.
template <typename Pred>
bool Eventually(Pred pred) {
  const auto give_up = std::chrono::steady_clock::now() + kPatience;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// An address where nothing listens (a server was there a moment ago).
std::string ClosedAddress() {
  auto probe = StartCoordinator(1);
  const std::string address = probe->address();
  probe->Shutdown();
  return address;
}

TEST(MembershipTest, JoinsHeartbeatsWithStatsAndLeaves) {
  auto coordinator = StartCoordinator(1);
  std::atomic<uint64_t> keys{42};
  MembershipOptions options = Options(coordinator->address());
  options.stats = [&] { return MembershipStats{keys.load(), 640}; };
  options.self.zone = "rack 7";
  Membership membership(options);
  ASSERT_TRUE(membership.Start().ok());
  EXPECT_TRUE(membership.connected());
  EXPECT_EQ(membership.shards(), (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(membership.map_version(), 1u);

  const v1::ClusterMap map = coordinator->state()->Map();
  const v1::ServerInfo* me = Find(map, "s-00000001");
  ASSERT_NE(me, nullptr);
  EXPECT_EQ(me->state(), v1::UP);
  EXPECT_EQ(me->epoch(), 3u);
  EXPECT_EQ(me->zone(), "rack 7");
  EXPECT_EQ(me->index().rkey(), options.self.index.rkey);
  EXPECT_EQ(me->table().hash_seed(), options.self.table.hash_seed);

  ASSERT_TRUE(Eventually([&] {
    const v1::ClusterMap now = coordinator->state()->Map();
    const v1::ServerInfo* s = Find(now, "s-00000001");
    return s->keys() == 42 && s->heap_bytes_used() == 640;
  }));
  keys = 43;
  ASSERT_TRUE(Eventually([&] { return Find(coordinator->state()->Map(), "s-00000001")->keys() == 43; }));

  membership.Stop();
  EXPECT_FALSE(membership.connected());
  EXPECT_EQ(Find(coordinator->state()->Map(), "s-00000001")->state(), v1::DOWN);
  membership.Stop();  // idempotent
}

TEST(MembershipTest, WrongTokenIsFatalAtOnce) {
  auto coordinator = StartCoordinator(1);
  MembershipOptions options = Options(coordinator->address());
  options.token = "not-the-token";
  Membership membership(options);
  const Status s = membership.Start();
  EXPECT_EQ(s.code(), StatusCode::kUnauthenticated) << s;
  EXPECT_EQ(coordinator->state()->Map().servers_size(), 0);
}

TEST(MembershipTest, FullClusterIsFatalWithTheCoordinatorsReason) {
  auto coordinator = StartCoordinator(1);
  ASSERT_TRUE(coordinator->state()->Join(MakeJoin("someone-else", 1, 0)).ok());
  Membership membership(Options(coordinator->address()));
  const Status s = membership.Start();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("cluster is full: 1 of 1 servers joined"), std::string::npos) << s;
}

TEST(MembershipTest, InvalidSelfIsRefusedBeforeAnyCall) {
  MembershipOptions options = Options(ClosedAddress());
  options.self.transport = "smoke-signals";
  Membership membership(options);
  EXPECT_EQ(membership.Start().code(), StatusCode::kInvalidArgument);
  options = Options("not an address");
  Membership bad_address(options);
  EXPECT_EQ(bad_address.Start().code(), StatusCode::kInvalidArgument);
}

TEST(MembershipTest, RejoinsWhenTheCoordinatorMarkedItDown) {
  auto coordinator = StartCoordinator(2);
  Membership membership(Options(coordinator->address()));
  ASSERT_TRUE(membership.Start().ok());
  const uint64_t joined_version = coordinator->state()->version();
  // As if the coordinator had missed its heartbeats: DOWN; the next
  // heartbeat is refused and the server joins again by itself.
  v1::LeaveRequest down;
  down.set_server_id("s-00000001");
  down.set_epoch(3);
  ASSERT_TRUE(coordinator->state()->Leave(down).ok());
  ASSERT_TRUE(Eventually([&] { return Find(coordinator->state()->Map(), "s-00000001")->state() == v1::UP; }));
  EXPECT_EQ(coordinator->state()->version(), joined_version + 2);  // DOWN, then UP
  // A second server completes the cluster; the first learns its shards.
  ASSERT_TRUE(coordinator->state()->Join(MakeJoin("s-00000002", 1, 2)).ok());
  ASSERT_TRUE(Eventually([&] { return membership.shards() == std::vector<uint32_t>{0, 2}; }));
  EXPECT_EQ(membership.map_version(), coordinator->state()->version());
}

TEST(MembershipTest, RetriesTheJoinUntilTheCoordinatorIsUp) {
  const std::string address = ClosedAddress();
  Membership membership(Options(address));
  Status started = Internal("not returned");
  std::thread starter([&] { started = membership.Start(); });
  // The Join keeps failing (nothing listens) until the coordinator starts.
  auto coordinator = StartCoordinator(1, address);
  starter.join();
  ASSERT_TRUE(started.ok()) << started;
  EXPECT_EQ(Find(coordinator->state()->Map(), "s-00000001")->state(), v1::UP);
  membership.Stop();
  EXPECT_EQ(Find(coordinator->state()->Map(), "s-00000001")->state(), v1::DOWN);
}

TEST(MembershipTest, StopAbortsAStartThatIsStillRetrying) {
  Membership membership(Options(ClosedAddress()));
  Status started = Internal("not returned");
  std::thread starter([&] { started = membership.Start(); });
  membership.Stop();
  starter.join();
  EXPECT_EQ(started.code(), StatusCode::kCancelled) << started;
}

TEST(ServerIdentityTest, CreatedOnceThenKept) {
  TempDir dir;
  const std::string data_dir = dir.path() + "/data";  // created on demand
  auto first = ServerIdentity::LoadOrCreate(data_dir);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->server_id.size(), 10u);
  EXPECT_EQ(first->server_id.rfind("s-", 0), 0u);
  auto again = ServerIdentity::LoadOrCreate(data_dir);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->server_id, first->server_id);

  { std::ofstream(data_dir + "/server_id") << "node-7\n"; }  // an operator's choice is kept
  EXPECT_EQ(ServerIdentity::LoadOrCreate(data_dir)->server_id, "node-7");
  { std::ofstream(data_dir + "/server_id") << "bad id with spaces"; }
  EXPECT_EQ(ServerIdentity::LoadOrCreate(data_dir).status().code(), StatusCode::kDataLoss);
  { std::ofstream(data_dir + "/server_id") << ""; }
  EXPECT_EQ(ServerIdentity::LoadOrCreate(data_dir).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ServerIdentity::LoadOrCreate("").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rkv::server
