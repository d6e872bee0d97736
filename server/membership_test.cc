#include "server/membership.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "proto/auth.h"
#include "proto/coordinator_set.h"
#include "proto/grpc_server.h"
#include "proto/region_descriptor.h"
#include "proto/table_params.h"
#include "proto/validation.h"
#include "server/replication/map_policy.h"
#include "tests/in_process_coordinator.h"
#include "tests/temp_dir.h"

namespace rkv::server {
namespace {

using coordinator::CoordinatorServer;
using coordinator::testing::MakeJoin;
using coordinator::testing::MemoryStoreData;
using rkv::testing::TempDir;
using rkv::testing::WaitFor;

constexpr char kToken[] = "membership-test-token";
// Upper bound on waiting for something asynchronous that must happen; the
// tests never rely on it passing, only on it not hanging forever.
constexpr auto kPatience = std::chrono::seconds(30);

// `heartbeat_interval` long: heartbeats then never bring a map during a
// test, so only the watch stream does. `data`: the store's records, to
// restart a coordinator on them.
std::unique_ptr<CoordinatorServer> StartCoordinator(
    uint32_t servers, const std::string& listen = "127.0.0.1:0",
    std::chrono::milliseconds heartbeat_interval = std::chrono::milliseconds(10),
    std::shared_ptr<MemoryStoreData> data = std::make_shared<MemoryStoreData>()) {
  rkv::testing::InProcessCoordinatorOptions options;
  options.servers = servers;
  options.shards = 4;
  options.heartbeat_interval = heartbeat_interval;
  options.heartbeat_timeout = std::chrono::milliseconds(120'000);  // no expiry during a test
  options.data = std::move(data);
  auto server = rkv::testing::StartInProcessCoordinator(options, kToken, listen);
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

  ASSERT_TRUE(WaitFor("the stats in the map", [&] {
    const v1::ClusterMap now = coordinator->state()->Map();
    const v1::ServerInfo* s = Find(now, "s-00000001");
    return s->keys() == 42 && s->heap_bytes_used() == 640;
  }));
  keys = 43;
  ASSERT_TRUE(
      WaitFor("the new key count", [&] { return Find(coordinator->state()->Map(), "s-00000001")->keys() == 43; }));

  membership.Stop();
  EXPECT_FALSE(membership.connected());
  EXPECT_EQ(Find(coordinator->state()->Map(), "s-00000001")->state(), v1::DOWN);
  membership.Stop();  // idempotent
}

// A coordinator that is not the leader, as the wire contract says: every
// call but the map's is refused naming `leader`; the map is not loaded
// yet (UNAVAILABLE), so map reads and watches go elsewhere.
class Standby final : public v1::Coordinator::Service {
 public:
  explicit Standby(std::string leader) : leader_(std::move(leader)) {}
  int refused() const { return refused_.load(); }

  grpc::Status Join(grpc::ServerContext* context, const v1::JoinRequest*, v1::JoinResponse*) override {
    return Refuse(context);
  }
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse*) override {
    return Refuse(context);
  }
  grpc::Status Leave(grpc::ServerContext* context, const v1::LeaveRequest*, v1::LeaveResponse*) override {
    return Refuse(context);
  }
  grpc::Status GetClusterMap(grpc::ServerContext*, const v1::GetClusterMapRequest*, v1::ClusterMap*) override {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no map loaded yet");
  }
  grpc::Status WatchClusterMap(grpc::ServerContext*, const v1::WatchClusterMapRequest*,
                               grpc::ServerWriter<v1::ClusterMap>*) override {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no map loaded yet");
  }

 private:
  grpc::Status Refuse(grpc::ServerContext* context) {
    refused_.fetch_add(1);
    context->AddTrailingMetadata(control::kLeaderMetadataKey, leader_);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the leader; the leader is " + leader_);
  }

  const std::string leader_;
  std::atomic<int> refused_{0};
};

TEST(MembershipTest, ACoordinatorListIsFollowedToItsLeaderAndAnyCoordinatorServesTheMap) {
  auto leader = StartCoordinator(1);
  Standby standby(leader->address());
  auto served = control::StartGrpcServer("127.0.0.1:0", &standby, "standby coordinator");
  ASSERT_TRUE(served.ok()) << served.status();
  // The standby first: the Join reaches the leader through its redirect.
  Membership membership(Options(served->address + "," + leader->address()));
  ASSERT_TRUE(membership.Start().ok());
  EXPECT_TRUE(membership.connected());
  EXPECT_EQ(standby.refused(), 1);
  EXPECT_EQ(Find(leader->state()->Map(), "s-00000001")->state(), v1::UP);
  // The watch finds the coordinator that serves the map.
  ASSERT_TRUE(WaitFor("the map from the leader", [&] { return membership.map() != nullptr; }));
  ASSERT_TRUE(membership.RefreshNow(kPatience).ok());
  membership.Stop();
  // Heartbeats (every 10 ms meanwhile) and the Leave went straight to the
  // leader it learned.
  EXPECT_EQ(standby.refused(), 1);
  EXPECT_EQ(Find(leader->state()->Map(), "s-00000001")->state(), v1::DOWN);
  served->server->Shutdown(std::chrono::system_clock::now());
}

TEST(MembershipTest, ABadCoordinatorListIsRefusedNamingTheEntry) {
  Membership membership(Options("127.0.0.1:7600,,127.0.0.1:7601"));
  const Status s = membership.Start();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("entry 2 is empty"), std::string::npos) << s;
  EXPECT_EQ(membership.RefreshNow(std::chrono::milliseconds(100)).code(), StatusCode::kInvalidArgument);
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

TEST(MembershipTest, AnotherZoneIsFatalWithTheCoordinatorsReason) {
  auto coordinator = StartCoordinator(1);
  // The id joined before in zone "east"; this restart says no zone.
  v1::JoinRequest before = MakeJoin("s-00000001", 2, 1);
  before.set_zone("east");
  ASSERT_TRUE(coordinator->state()->Join(before).ok());
  Membership membership(Options(coordinator->address()));
  const Status s = membership.Start();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("keeps its zone"), std::string::npos) << s;
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
  ASSERT_TRUE(
      WaitFor("the rejoin", [&] { return Find(coordinator->state()->Map(), "s-00000001")->state() == v1::UP; }));
  EXPECT_EQ(coordinator->state()->version(), joined_version + 2);  // DOWN, then UP
  // A second server completes the cluster; the first learns its shards.
  ASSERT_TRUE(coordinator->state()->Join(MakeJoin("s-00000002", 1, 2)).ok());
  ASSERT_TRUE(WaitFor("the shards", [&] { return membership.shards() == std::vector<uint32_t>{0, 2}; }));
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

// --- Following the map -------------------------------------------------------

constexpr auto kSilentHeartbeats = std::chrono::milliseconds(60'000);

TEST(MembershipMapTest, AMapVersionChangeReachesTheServerByTheWatch) {
  auto coordinator = StartCoordinator(2, "127.0.0.1:0", kSilentHeartbeats);
  Membership membership(Options(coordinator->address()));
  EXPECT_EQ(membership.map(), nullptr);
  ASSERT_TRUE(membership.Start().ok());
  const uint64_t joined = coordinator->state()->version();
  ASSERT_TRUE(membership.WaitForVersion(joined, kPatience).ok());
  EXPECT_TRUE(membership.map()->shard_owner().empty());  // 1 of 2 servers

  ASSERT_TRUE(coordinator->state()->Join(MakeJoin("s-00000002", 1, 2)).ok());
  const uint64_t complete = coordinator->state()->version();
  ASSERT_GT(complete, joined);
  const Status learned = membership.WaitForVersion(complete, kPatience);
  ASSERT_TRUE(learned.ok()) << learned;
  const std::shared_ptr<const v1::ClusterMap> map = membership.map();
  EXPECT_EQ(map->version(), complete);
  EXPECT_EQ(map->shard_owner_size(), 4);
  EXPECT_EQ(membership.shards(), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(membership.map_version(), complete);
}

TEST(MembershipMapTest, TheWatchIsReopenedAfterACoordinatorRestart) {
  auto data = std::make_shared<MemoryStoreData>();
  auto coordinator = StartCoordinator(2, "127.0.0.1:0", kSilentHeartbeats, data);
  const std::string address = coordinator->address();
  Membership membership(Options(address));
  ASSERT_TRUE(membership.Start().ok());
  ASSERT_TRUE(membership.WaitForVersion(coordinator->state()->version(), kPatience).ok());

  coordinator->Shutdown();
  coordinator.reset();
  coordinator = StartCoordinator(2, address, kSilentHeartbeats, data);
  ASSERT_NE(coordinator, nullptr);
  ASSERT_TRUE(coordinator->state()->Join(MakeJoin("s-00000002", 1, 2)).ok());
  const uint64_t after = coordinator->state()->version();
  const Status learned = membership.WaitForVersion(after, kPatience);
  ASSERT_TRUE(learned.ok()) << learned;
  EXPECT_EQ(membership.shards(), (std::vector<uint32_t>{0, 2}));
}

TEST(MembershipMapTest, StopEndsTheWatchAndWakesWaiters) {
  auto coordinator = StartCoordinator(1, "127.0.0.1:0", kSilentHeartbeats);
  Membership membership(Options(coordinator->address()));
  ASSERT_TRUE(membership.Start().ok());
  ASSERT_TRUE(membership.WaitForVersion(1, kPatience).ok());
  Status waited = Internal("not returned");
  std::thread waiter([&] { waited = membership.WaitForVersion(1000, std::chrono::hours(1)); });
  membership.Stop();
  waiter.join();
  EXPECT_EQ(waited.code(), StatusCode::kCancelled) << waited;
  EXPECT_EQ(membership.RefreshNow(kPatience).code(), StatusCode::kCancelled);
  EXPECT_EQ(membership.ReportReplicaFailure("s-00000002", {0}, "gone", kPatience).status().code(),
            StatusCode::kCancelled);
  ASSERT_NE(membership.map(), nullptr);  // the last map stays
  EXPECT_EQ(membership.map()->version(), 1u);
}

TEST(MembershipMapTest, WaitForVersionGivesUpNamingBothVersions) {
  auto coordinator = StartCoordinator(1, "127.0.0.1:0", kSilentHeartbeats);
  Membership membership(Options(coordinator->address()));
  ASSERT_TRUE(membership.Start().ok());
  ASSERT_TRUE(membership.WaitForVersion(1, kPatience).ok());
  const Status s = membership.WaitForVersion(9, std::chrono::milliseconds(1));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("map version 9 not learned"), std::string::npos) << s;
  EXPECT_NE(s.message().find("this server has version 1"), std::string::npos) << s;
}

TEST(MembershipMapTest, RefreshNowFromAnUnreachableCoordinatorFails) {
  Membership membership(Options(ClosedAddress()));
  const Status s = membership.RefreshNow(std::chrono::milliseconds(200));
  EXPECT_TRUE(s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(membership.map(), nullptr);
}

// A coordinator that serves GetClusterMap from a map the test sets and
// answers ReportReplicaFailure as told, recording what it receives.
class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  grpc::Status GetClusterMap(grpc::ServerContext* context, const v1::GetClusterMapRequest*,
                             v1::ClusterMap* response) override EXCLUDES(mu_) {
    if (grpc::Status s = control::CheckToken(context, control::TokenDigestHex(kToken)); !s.ok()) return s;
    MutexLock lock(mu_);
    *response = map_;
    return grpc::Status::OK;
  }
  grpc::Status ReportReplicaFailure(grpc::ServerContext* context, const v1::ReportReplicaFailureRequest* request,
                                    v1::ReportReplicaFailureResponse* response) override EXCLUDES(mu_) {
    if (grpc::Status s = control::CheckToken(context, control::TokenDigestHex(kToken)); !s.ok()) return s;
    MutexLock lock(mu_);
    requests_.push_back(*request);
    if (unavailable_left_ > 0) {
      --unavailable_left_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "store busy");
    }
    if (!answer_.ok()) return answer_;
    response->set_map_version(version_);
    return grpc::Status::OK;
  }

  // Answered like ReportReplicaFailure (the same scripted failures); a
  // shard above 100 is refused.
  grpc::Status ReportCaughtUp(grpc::ServerContext* context, const v1::ReportCaughtUpRequest* request,
                              v1::ReportCaughtUpResponse* response) override EXCLUDES(mu_) {
    if (grpc::Status s = control::CheckToken(context, control::TokenDigestHex(kToken)); !s.ok()) return s;
    MutexLock lock(mu_);
    caught_up_.push_back(*request);
    if (unavailable_left_ > 0) {
      --unavailable_left_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "store busy");
    }
    if (!answer_.ok()) return answer_;
    response->set_map_version(version_);
    for (const v1::CaughtUpShard& c : request->shards()) {
      if (c.shard() > 100) response->add_refused_shards(c.shard());
    }
    return grpc::Status::OK;
  }

  void SetMap(v1::ClusterMap map) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    map_ = std::move(map);
  }
  std::vector<v1::ReportCaughtUpRequest> caught_up() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return caught_up_;
  }
  // The next `unavailable` reports fail with UNAVAILABLE; later ones get
  // `answer`, or `version` when it is OK.
  void SetReports(int unavailable, grpc::Status answer, uint64_t version) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    unavailable_left_ = unavailable;
    answer_ = std::move(answer);
    version_ = version;
  }
  std::vector<v1::ReportReplicaFailureRequest> requests() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return requests_;
  }

 private:
  mutable Mutex mu_;
  v1::ClusterMap map_ GUARDED_BY(mu_);
  int unavailable_left_ GUARDED_BY(mu_) = 0;
  grpc::Status answer_ GUARDED_BY(mu_);
  uint64_t version_ GUARDED_BY(mu_) = 0;
  std::vector<v1::ReportReplicaFailureRequest> requests_ GUARDED_BY(mu_);
  std::vector<v1::ReportCaughtUpRequest> caught_up_ GUARDED_BY(mu_);
};

struct FakeCoordinatorServer {
  FakeCoordinatorServer() {
    auto started = control::StartGrpcServer("127.0.0.1:0", &service, "fake coordinator");
    EXPECT_TRUE(started.ok()) << started.status();
    if (started.ok()) {
      server = std::move(started->server);
      address = started->address;
    }
  }
  ~FakeCoordinatorServer() {
    if (server != nullptr) server->Shutdown(std::chrono::system_clock::now());
  }
  FakeCoordinator service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

TEST(MembershipMapTest, AReportIsRetriedWhileTheCoordinatorIsUnavailable) {
  FakeCoordinatorServer fake;
  fake.service.SetReports(2, grpc::Status::OK, 17);
  Membership membership(Options(fake.address));
  const std::string long_reason = std::string(300, 'x') + "\n";
  const StatusOr<uint64_t> version = membership.ReportReplicaFailure("s-00000002", {3, 1}, long_reason, kPatience);
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 17u);
  const std::vector<v1::ReportReplicaFailureRequest> requests = fake.service.requests();
  ASSERT_EQ(requests.size(), 3u);
  const v1::ReportReplicaFailureRequest& r = requests.back();
  EXPECT_EQ(r.server_id(), "s-00000001");
  EXPECT_EQ(r.epoch(), 3u);
  EXPECT_EQ(r.backup_id(), "s-00000002");
  EXPECT_EQ(std::vector<uint32_t>(r.shards().begin(), r.shards().end()), (std::vector<uint32_t>{3, 1}));
  EXPECT_LE(r.reason().size(), 200u);
  EXPECT_EQ(r.reason().find('\n'), std::string::npos);
}

TEST(MembershipMapTest, ACaughtUpReportIsRetriedWhileTheCoordinatorIsUnavailable) {
  FakeCoordinatorServer fake;
  fake.service.SetReports(2, grpc::Status::OK, 21);
  Membership membership(Options(fake.address));
  StatusOr<v1::ReportCaughtUpResponse> answer = membership.ReportCaughtUp(3, "s-00000002", 19, kPatience);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->map_version(), 21u);
  EXPECT_TRUE(answer->refused_shards().empty());
  const std::vector<v1::ReportCaughtUpRequest> requests = fake.service.caught_up();
  ASSERT_EQ(requests.size(), 3u);
  const v1::ReportCaughtUpRequest& r = requests.back();
  EXPECT_EQ(r.server_id(), "s-00000001");
  EXPECT_EQ(r.epoch(), 3u);
  ASSERT_EQ(r.shards_size(), 1);
  EXPECT_EQ(r.shards(0).shard(), 3u);
  EXPECT_EQ(r.shards(0).primary_id(), "s-00000002");
  EXPECT_EQ(r.shards(0).sync_map_version(), 19u);
  // A shard the coordinator did not move comes back in refused_shards.
  answer = membership.ReportCaughtUp(101, "s-00000002", 19, kPatience);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(std::vector<uint32_t>(answer->refused_shards().begin(), answer->refused_shards().end()),
            (std::vector<uint32_t>{101}));
  EXPECT_EQ(membership.ReportCaughtUp(3, "bad id", 19, kPatience).status().code(), StatusCode::kInvalidArgument);
}

TEST(MembershipMapTest, AReportRefusedByTheCoordinatorIsNotRetried) {
  FakeCoordinatorServer fake;
  fake.service.SetReports(0, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "epoch 3 is not current"), 0);
  Membership membership(Options(fake.address));
  const StatusOr<uint64_t> version = membership.ReportReplicaFailure("s-00000002", {0}, "timeout", kPatience);
  EXPECT_EQ(version.status().code(), StatusCode::kFailedPrecondition) << version.status();
  EXPECT_NE(version.status().message().find("epoch 3 is not current"), std::string::npos) << version.status();
  EXPECT_EQ(fake.service.requests().size(), 1u);
}

TEST(MembershipMapTest, AReportGivesUpWhenItsTimeRunsOut) {
  FakeCoordinatorServer fake;
  fake.service.SetReports(1'000'000, grpc::Status::OK, 1);
  Membership membership(Options(fake.address));
  const StatusOr<uint64_t> version =
      membership.ReportReplicaFailure("s-00000002", {0}, "timeout", std::chrono::milliseconds(50));
  EXPECT_TRUE(version.status().code() == StatusCode::kUnavailable ||
              version.status().code() == StatusCode::kDeadlineExceeded)
      << version.status();
}

TEST(MembershipMapTest, AMalformedReportIsRefusedBeforeAnyCall) {
  FakeCoordinatorServer fake;
  Membership membership(Options(fake.address));
  EXPECT_EQ(membership.ReportReplicaFailure("bad id", {0}, "x", kPatience).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(membership.ReportReplicaFailure("s-00000002", {}, "x", kPatience).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(fake.service.requests().empty());
}

// The map of one server s-00000001 (as Options announces it) owning all 4
// shards at `version`.
v1::ClusterMap OneServerMap(uint64_t version) {
  v1::ClusterMap m;
  m.set_version(version);
  m.set_shard_count(4);
  m.set_expected_servers(1);
  m.set_replication_factor(1);
  const v1::JoinRequest j = MakeJoin("s-00000001", 3, 1);
  v1::ServerInfo* s = m.add_servers();
  s->set_server_id(j.server_id());
  s->set_epoch(j.epoch());
  s->set_state(v1::UP);
  s->set_data_address(j.data_address());
  s->set_admin_address(j.admin_address());
  s->set_transport(j.transport());
  *s->mutable_index() = j.index();
  *s->mutable_heap() = j.heap();
  *s->mutable_table() = j.table();
  s->set_heap_bytes(j.table().heap_size());
  for (uint32_t shard = 0; shard < 4; ++shard) {
    m.add_shard_owner(j.server_id());
    s->add_shards(shard);
    m.add_shard_replicas()->add_server_ids(j.server_id());
  }
  return m;
}

TEST(MembershipMapTest, RefreshNowInstallsOnlyValidNewerMaps) {
  FakeCoordinatorServer fake;
  Membership membership(Options(fake.address));
  fake.service.SetMap(OneServerMap(5));
  ASSERT_TRUE(control::ValidateClusterMap(OneServerMap(5)).ok()) << control::ValidateClusterMap(OneServerMap(5));
  const Status first = membership.RefreshNow(kPatience);
  ASSERT_TRUE(first.ok()) << first;
  EXPECT_EQ(membership.map()->version(), 5u);
  EXPECT_EQ(membership.shards(), (std::vector<uint32_t>{0, 1, 2, 3}));

  fake.service.SetMap(OneServerMap(4));  // older: answered, not installed
  EXPECT_TRUE(membership.RefreshNow(kPatience).ok());
  EXPECT_EQ(membership.map()->version(), 5u);

  v1::ClusterMap bad = OneServerMap(6);
  bad.mutable_shard_replicas(2)->add_server_ids("s-00000009");  // not a listed server
  fake.service.SetMap(bad);
  const Status refused = membership.RefreshNow(kPatience);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("shard_replicas[2]"), std::string::npos) << refused;
  EXPECT_EQ(membership.map()->version(), 5u);
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

namespace rkv::server {
namespace {

// A coordinator that answers Join and Heartbeat only, with the lease the
// test sets; a Join can be held until the test releases it, to delay its
// answer. Map version 0 throughout, so no heartbeat fetches a map.
class LeaseCoordinator final : public v1::Coordinator::Service {
 public:
  grpc::Status Join(grpc::ServerContext* context, const v1::JoinRequest*, v1::JoinResponse* response) override
      EXCLUDES(mu_) {
    if (grpc::Status s = control::CheckToken(context, control::TokenDigestHex(kToken)); !s.ok()) return s;
    MutexLock lock(mu_);
    join_entered_ = std::chrono::steady_clock::now();
    ++joins_;
    cv_.NotifyAll();
    cv_.Wait(mu_, [&] {
      mu_.AssertHeld();
      return !hold_join_;
    });
    if (!join_answer_.ok()) return join_answer_;
    response->set_heartbeat_interval_ms(10);
    response->set_lease_ms(lease_ms_);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse* response) override EXCLUDES(mu_) {
    if (grpc::Status s = control::CheckToken(context, control::TokenDigestHex(kToken)); !s.ok()) return s;
    MutexLock lock(mu_);
    ++heartbeats_;
    if (!heartbeat_answer_.ok()) return heartbeat_answer_;
    response->set_lease_ms(lease_ms_);
    return grpc::Status::OK;
  }

  void SetLease(uint32_t lease_ms) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    lease_ms_ = lease_ms;
  }
  void SetAnswers(grpc::Status join, grpc::Status heartbeat) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    join_answer_ = std::move(join);
    heartbeat_answer_ = std::move(heartbeat);
  }
  void HoldJoins(bool hold) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      hold_join_ = hold;
    }
    cv_.NotifyAll();
  }
  // Waits until a Join has reached the coordinator.
  void WaitForJoin() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    cv_.Wait(mu_, [&] {
      mu_.AssertHeld();
      return joins_ > 0;
    });
  }
  // When the last Join reached the coordinator.
  std::chrono::steady_clock::time_point last_join() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return join_entered_;
  }
  int heartbeats() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return heartbeats_;
  }

 private:
  mutable Mutex mu_;
  CondVar cv_;
  uint32_t lease_ms_ GUARDED_BY(mu_) = 0;
  bool hold_join_ GUARDED_BY(mu_) = false;
  int joins_ GUARDED_BY(mu_) = 0;
  int heartbeats_ GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point join_entered_ GUARDED_BY(mu_);
  grpc::Status join_answer_ GUARDED_BY(mu_);
  grpc::Status heartbeat_answer_ GUARDED_BY(mu_);
};

struct LeaseCoordinatorServer {
  LeaseCoordinatorServer() {
    auto started = control::StartGrpcServer("127.0.0.1:0", &service, "lease coordinator");
    EXPECT_TRUE(started.ok()) << started.status();
    if (started.ok()) {
      server = std::move(started->server);
      address = started->address;
    }
  }
  ~LeaseCoordinatorServer() {
    service.HoldJoins(false);
    if (server != nullptr) server->Shutdown(std::chrono::system_clock::now());
  }
  LeaseCoordinator service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

TEST(MembershipLeaseTest, ALeaseCountsFromWhenTheJoinWasSentNotWhenItWasAnswered) {
  LeaseCoordinatorServer fake;
  constexpr uint32_t kLeaseMs = 600'000;  // never runs out during the test
  fake.service.SetLease(kLeaseMs);
  fake.service.SetAnswers(grpc::Status::OK, grpc::Status(grpc::StatusCode::UNAVAILABLE, "heartbeats are lost"));
  fake.service.HoldJoins(true);
  Membership membership(Options(fake.address));
  const auto before = std::chrono::steady_clock::now();
  Status started;
  std::thread start([&] { started = membership.Start(); });
  fake.service.WaitForJoin();
  // The answer is delayed: a lease counted from its arrival would end
  // after the Join reached the coordinator + the lease's length.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  fake.service.HoldJoins(false);
  start.join();
  ASSERT_TRUE(started.ok()) << started;
  const auto entered = fake.service.last_join();
  const ServerLease lease = membership.lease();
  EXPECT_TRUE(lease.enabled);
  const auto length = std::chrono::milliseconds(kLeaseMs * 99 / 100 - 10);
  EXPECT_GE(lease.until, before + length);
  EXPECT_LE(lease.until, entered + length);  // sent before the coordinator saw it
  MapPolicy policy(&membership);
  EXPECT_TRUE(policy.CheckLease().ok());
}

TEST(MembershipLeaseTest, FailedOrRefusedHeartbeatsLetTheLeaseRunOutAndAGrantRenewsIt) {
  LeaseCoordinatorServer fake;
  fake.service.SetLease(100);
  fake.service.SetAnswers(grpc::Status::OK, grpc::Status(grpc::StatusCode::UNAVAILABLE, "heartbeats are lost"));
  Membership membership(Options(fake.address));
  ASSERT_TRUE(membership.Start().ok());
  MapPolicy policy(&membership);
  // No heartbeat gets through: the Join's lease runs out.
  ASSERT_TRUE(WaitFor("the lease to run out", [&] { return !policy.CheckLease().ok(); }));
  Status s = policy.CheckLease();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("lease on the cluster map expired"), std::string::npos) << s;

  // Refused heartbeats (and the Joins they lead to) grant nothing.
  fake.service.SetAnswers(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "cluster full"),
                          grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown server"));
  fake.service.SetLease(600'000);
  const int seen = fake.service.heartbeats();
  ASSERT_TRUE(WaitFor("three more heartbeats", [&] { return fake.service.heartbeats() >= seen + 3; }));
  EXPECT_EQ(policy.CheckLease().code(), StatusCode::kUnavailable);

  // An answered heartbeat grants a lease again.
  fake.service.SetAnswers(grpc::Status::OK, grpc::Status::OK);
  ASSERT_TRUE(WaitFor("a renewed lease", [&] { return policy.CheckLease().ok(); }));
  EXPECT_TRUE(membership.lease().enabled);

  // A coordinator that grants none (lease_ms 0) turns the check off.
  fake.service.SetLease(0);
  ASSERT_TRUE(WaitFor("leases turned off", [&] { return !membership.lease().enabled; }));
  EXPECT_TRUE(policy.CheckLease().ok());
}

}  // namespace
}  // namespace rkv::server
