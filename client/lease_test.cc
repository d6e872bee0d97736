// Leases (LeaseKeeper, and the cluster client's data path under them)
// against fakes: RenewLease answers made up by the test, a fake
// coordinator serving maps of an in-process CoordinatorState, and a
// data "server" that only counts the connections it gets, so that a test
// can tell whether a call reached a server at all; and an in-process
// server whose replication policy refuses a write as "not the primary".
#include "client/lease_keeper.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "client/cluster_map.h"
#include "common/hash.h"
#include "common/mutex.h"
#include "common/transport/factory.h"
#include "proto/grpc_server.h"
#include "proto/rkv.grpc.pb.h"
#include "rkv/client.h"
#include "server/replication/replication.h"
#include "server/server.h"
#include "tests/in_process_coordinator.h"

namespace rkv {
namespace {

using client::Clock;
using client::Deadline;
using client::LeaseKeeper;
using coordinator::CoordinatorState;
using coordinator::testing::MakeJoin;
using std::chrono::milliseconds;
using testing::WaitFor;

constexpr char kToken[] = "lease-test-token";
// Generous: the deadline of calls made here; nothing assumes it is needed.
constexpr auto kPatience = std::chrono::seconds(30);

v1::RenewLeaseResponse Granted(uint64_t version, uint32_t lease_ms, std::vector<std::string> excluded = {}) {
  v1::RenewLeaseResponse r;
  r.set_map_version(version);
  r.set_lease_ms(lease_ms);
  for (auto& e : excluded) r.add_excluded_servers(std::move(e));
  return r;
}

// ---- LeaseKeeper alone.

TEST(LeaseKeeperTest, ALeaseCountsFromWhenTheRequestWasSent) {
  // The coordinator answers 300 ms late: the lease must end 300 ms earlier
  // than the same answer given at once would make it, i.e. it counts from
  // before the request left, not from the answer.
  Clock::time_point entered{};
  LeaseKeeper keeper(
      [&](uint64_t version, Deadline) -> StatusOr<v1::RenewLeaseResponse> {
        entered = Clock::now();
        std::this_thread::sleep_for(milliseconds(300));
        return Granted(version, 1000);
      },
      [](Deadline) { return Status::Ok(); }, [] { return uint64_t{7}; });
  const auto before = Clock::now();
  ASSERT_TRUE(keeper.Renew(before + kPatience).ok());
  const auto answered = Clock::now();
  const client::Lease lease = keeper.Current();
  EXPECT_EQ(lease.map_version, 7u);
  // until = sent + 1000 ms * 0.99 - 10 ms, with before <= sent <= entered.
  const auto length = milliseconds(980);
  EXPECT_GE(lease.until, before + length);
  EXPECT_LE(lease.until, entered + length);
  EXPECT_LE(lease.until, answered - milliseconds(300) + length);
  EXPECT_EQ(keeper.stats().renewals, 1u);
}

TEST(LeaseKeeperTest, AStaleMapIsRefetchedBeforeALeaseIsGranted) {
  std::atomic<uint64_t> version{4};
  std::atomic<int> fetches{0};
  LeaseKeeper keeper(
      [&](uint64_t v, Deadline) -> StatusOr<v1::RenewLeaseResponse> {
        // The coordinator is at version 5: no lease for 4.
        return Granted(5, 1000, v == 5 ? std::vector<std::string>{"b"} : std::vector<std::string>{});
      },
      [&](Deadline) {
        ++fetches;
        version = 5;
        return Status::Ok();
      },
      [&] { return version.load(); });
  const Deadline deadline = Clock::now() + kPatience;
  // A call routed by map 4 learns that its map is older than the lease.
  const Status old = keeper.Check(4, "a", deadline);
  EXPECT_EQ(old.code(), StatusCode::kUnavailable);
  EXPECT_NE(old.message().find("older than the leased version 5"), std::string::npos) << old;
  EXPECT_EQ(fetches.load(), 1);
  EXPECT_EQ(keeper.Current().map_version, 5u);
  EXPECT_TRUE(keeper.Check(5, "a", deadline).ok());
  const Status fenced = keeper.Check(5, "b", deadline);
  EXPECT_EQ(fenced.code(), StatusCode::kUnavailable);
  EXPECT_NE(fenced.message().find("server b is being failed over"), std::string::npos) << fenced;
}

TEST(LeaseKeeperTest, AnUnreachableCoordinatorGivesNoLease) {
  LeaseKeeper keeper([](uint64_t, Deadline) -> StatusOr<v1::RenewLeaseResponse> { return Unavailable("down"); },
                     [](Deadline) { return Status::Ok(); }, [] { return uint64_t{3}; });
  const Status s = keeper.Check(3, "a", Clock::now() + kPatience);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("no lease on cluster map version 3: coordinator unreachable"), std::string::npos) << s;
  EXPECT_FALSE(keeper.disabled());
  EXPECT_EQ(keeper.stats().lease_waits, 1u);
}

TEST(LeaseKeeperTest, AnOldCoordinatorOrLeaseMsZeroMeansNoLeases) {
  LeaseKeeper old([](uint64_t, Deadline) -> StatusOr<v1::RenewLeaseResponse> { return Unimplemented("RenewLease"); },
                  [](Deadline) { return Status::Ok(); }, [] { return uint64_t{3}; });
  EXPECT_TRUE(old.Check(3, "a", Clock::now() + kPatience).ok());
  EXPECT_TRUE(old.disabled());

  LeaseKeeper zero([](uint64_t v, Deadline) -> StatusOr<v1::RenewLeaseResponse> { return Granted(v, 0); },
                   [](Deadline) { return Status::Ok(); }, [] { return uint64_t{3}; });
  EXPECT_TRUE(zero.Check(3, "a", Clock::now() + kPatience).ok());
  EXPECT_TRUE(zero.disabled());
}

TEST(LeaseKeeperTest, AnOverlongLeaseIsRefused) {
  LeaseKeeper keeper([](uint64_t v, Deadline) -> StatusOr<v1::RenewLeaseResponse> { return Granted(v, 60001); },
                     [](Deadline) { return Status::Ok(); }, [] { return uint64_t{3}; });
  const Status s = keeper.Renew(Clock::now() + kPatience);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(keeper.Current().map_version, 0u);
}

TEST(LeaseKeeperTest, ConcurrentCallersShareOneRenewal) {
  Mutex mu;
  bool release = false;
  std::atomic<int> renewals{0};
  CondVar cv;
  LeaseKeeper keeper(
      [&](uint64_t v, Deadline) -> StatusOr<v1::RenewLeaseResponse> {
        ++renewals;
        MutexLock lock(mu);
        while (!release) cv.Wait(mu);
        return Granted(v, 60000);
      },
      [](Deadline) { return Status::Ok(); }, [] { return uint64_t{9}; });
  constexpr int kCallers = 6;
  std::vector<std::thread> callers;
  std::atomic<int> ok{0};
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&] {
      if (keeper.Check(9, "a", Clock::now() + kPatience).ok()) ++ok;
    });
  }
  ASSERT_TRUE(WaitFor("every caller waiting", [&] { return keeper.stats().lease_waits == kCallers; }));
  {
    MutexLock lock(mu);
    release = true;
  }
  cv.NotifyAll();
  for (auto& t : callers) t.join();
  EXPECT_EQ(ok.load(), kCallers);
  EXPECT_EQ(renewals.load(), 1);
}

TEST(LeaseKeeperTest, ACallThatOutwaitsTheRenewalInFlightNamesWhyTheOneBeforeFailed) {
  // The first renewal fails saying why; the second hangs until released.
  // A call whose deadline ends while it waits for that second one says
  // the coordinator is unreachable and repeats the first one's reason.
  Mutex mu;
  bool release = false;
  CondVar cv;
  std::atomic<int> renewals{0};
  LeaseKeeper keeper(
      [&](uint64_t v, Deadline) -> StatusOr<v1::RenewLeaseResponse> {
        if (renewals.fetch_add(1) == 0) return Unavailable("no leader elected yet (etcd unreachable: test)");
        MutexLock lock(mu);
        while (!release) cv.Wait(mu);
        return Granted(v, 60000);
      },
      [](Deadline) { return Status::Ok(); }, [] { return uint64_t{5}; });
  EXPECT_FALSE(keeper.Renew(Clock::now() + kPatience).ok());
  std::thread renewer([&] { EXPECT_TRUE(keeper.Renew(Clock::now() + kPatience).ok()); });
  ASSERT_TRUE(WaitFor("the second renewal in flight", [&] { return renewals.load() == 2; }));
  const Status s = keeper.Check(5, "a", Clock::now() + milliseconds(100));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("coordinator unreachable"), std::string::npos) << s;
  EXPECT_NE(s.message().find("the one before it failed: UNAVAILABLE: no leader elected yet (etcd unreachable: test)"),
            std::string::npos)
      << s;
  {
    MutexLock lock(mu);
    release = true;
  }
  cv.NotifyAll();
  renewer.join();
  EXPECT_TRUE(keeper.Check(5, "a", Clock::now() + kPatience).ok());
}

TEST(LeaseKeeperTest, TheBackgroundThreadRenewsBeforeCallsNeedIt) {
  std::atomic<int> renewals{0};
  {
    LeaseKeeper keeper(
        [&](uint64_t v, Deadline) -> StatusOr<v1::RenewLeaseResponse> {
          ++renewals;
          return Granted(v, 300);
        },
        [](Deadline) { return Status::Ok(); }, [] { return uint64_t{2}; });
    keeper.Start();
    ASSERT_TRUE(WaitFor("three renewals", [&] { return renewals.load() >= 3; }));
    EXPECT_EQ(keeper.stats().lease_waits, 0u);
  }  // the destructor stops and joins the thread
}

// ---- The cluster client under leases.

// A TCP listener that accepts and closes every connection, counting them:
// a data "server" that no call can use, but that tells whether one tried.
class CountingListener {
 public:
  CountingListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd_, 64) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen: " << errno;
      return;
    }
    address_ = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 20) <= 0) continue;
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c >= 0) {
          accepted_.fetch_add(1);
          ::close(c);
        }
      }
    });
  }
  ~CountingListener() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& address() const { return address_; }
  int accepted() const { return accepted_.load(); }

 private:
  int fd_ = -1;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

// A coordinator that serves a map the test sets and answers RenewLease as
// the test says (or not at all: UNIMPLEMENTED, as an older coordinator).
class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  enum class Renew { kGrant, kRefuse, kUnimplemented };

  void Set(v1::ClusterMap map, Renew renew, std::vector<std::string> excluded) {
    MutexLock lock(mu_);
    map_ = std::move(map);
    renew_ = renew;
    excluded_ = std::move(excluded);
  }
  int renewals() const { return renewals_.load(); }

  grpc::Status GetClusterMap(grpc::ServerContext*, const v1::GetClusterMapRequest*, v1::ClusterMap* out) override {
    MutexLock lock(mu_);
    *out = map_;
    return grpc::Status::OK;
  }
  grpc::Status WatchClusterMap(grpc::ServerContext* context, const v1::WatchClusterMapRequest*,
                               grpc::ServerWriter<v1::ClusterMap>*) override {
    // Sends nothing: the client's refetches find new maps.
    while (!context->IsCancelled()) std::this_thread::sleep_for(milliseconds(10));
    return grpc::Status::CANCELLED;
  }
  grpc::Status RenewLease(grpc::ServerContext*, const v1::RenewLeaseRequest* request,
                          v1::RenewLeaseResponse* out) override {
    renewals_.fetch_add(1);
    MutexLock lock(mu_);
    switch (renew_) {
      case Renew::kUnimplemented:
        return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "RenewLease");
      case Renew::kRefuse:
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not leasing now");
      case Renew::kGrant:
        break;
    }
    (void)request;
    *out = Granted(map_.version(), 1000, excluded_);
    return grpc::Status::OK;
  }

 private:
  mutable Mutex mu_;
  v1::ClusterMap map_ GUARDED_BY(mu_);
  Renew renew_ GUARDED_BY(mu_) = Renew::kGrant;
  std::vector<std::string> excluded_ GUARDED_BY(mu_);
  std::atomic<int> renewals_{0};
};

class LeasedClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two servers, a and b, on 16 shards (the options' default); both
    // "serve" on the listener.
    auto state = testing::OpenInProcessState(testing::InProcessCoordinatorOptions());
    ASSERT_TRUE(state.ok()) << state.status();
    state_ = std::move(state).value();
    for (const char* id : {"a", "b"}) {
      ASSERT_TRUE(testing::JoinFakeServer(*state_, id, 1, listener_.address()).ok());
    }
    auto started = control::StartGrpcServer("127.0.0.1:0", &fake_, "fake coordinator");
    ASSERT_TRUE(started.ok()) << started.status();
    grpc_ = std::move(started).value();
  }
  void TearDown() override {
    if (grpc_.server) grpc_.server->Shutdown(std::chrono::system_clock::now());
  }

  StatusOr<std::unique_ptr<Client>> Connect() {
    ClientOptions o;
    o.coordinator = grpc_.address;
    o.token = kToken;
    o.transport = "tcp";
    o.timeout = std::chrono::seconds(20);
    return Client::Connect(o);
  }

  // The map with its version raised by `by` (same assignment).
  v1::ClusterMap MapAt(uint64_t by) const {
    v1::ClusterMap m = state_->Map();
    m.set_version(m.version() + by);
    return m;
  }

  std::string KeyOf(const std::string& id) const {
    const v1::ClusterMap map = state_->Map();
    for (int i = 0; i < 100000; ++i) {
      const std::string key = "k" + std::to_string(i);
      if (map.shard_owner(static_cast<int>(ShardOf(key, map.shard_count()))) == id) return key;
    }
    ADD_FAILURE() << "no key for " << id;
    return "";
  }

  CountingListener listener_;
  std::unique_ptr<CoordinatorState> state_;
  FakeCoordinator fake_;
  control::StartedGrpcServer grpc_;
};

TEST_F(LeasedClientTest, NoCallReachesAServerWithoutALease) {
  fake_.Set(MapAt(0), FakeCoordinator::Renew::kRefuse, {});
  auto c = Connect();
  ASSERT_TRUE(c.ok()) << c.status();
  CallOptions quick;
  quick.timeout = milliseconds(300);
  const uint64_t v = state_->version();
  const std::string no_lease = "no lease on cluster map version " + std::to_string(v) + ": coordinator unreachable";
  auto get = (*c)->Get(KeyOf("a"), quick);
  EXPECT_EQ(get.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(get.status().message().find(no_lease), std::string::npos) << get.status();
  auto put = (*c)->Put(KeyOf("b"), "v", quick);
  EXPECT_EQ(put.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(put.status().message().find(no_lease), std::string::npos) << put.status();
  std::vector<std::string> keys = {KeyOf("a"), KeyOf("b")};
  for (const auto& r : (*c)->MultiGet(keys, quick)) {
    EXPECT_NE(r.status().message().find(no_lease), std::string::npos) << r.status();
  }
  EXPECT_EQ(listener_.accepted(), 0);
}

TEST_F(LeasedClientTest, AnOldCoordinatorMeansNoLeases) {
  fake_.Set(MapAt(0), FakeCoordinator::Renew::kUnimplemented, {});
  auto c = Connect();
  ASSERT_TRUE(c.ok()) << c.status();
  CallOptions quick;
  quick.timeout = milliseconds(300);
  auto get = (*c)->Get(KeyOf("a"), quick);
  ASSERT_FALSE(get.ok());  // the listener is no server
  EXPECT_EQ(get.status().message().find("lease"), std::string::npos) << get.status();
  EXPECT_GE(listener_.accepted(), 1);  // the call went to the server as before leases
}

TEST_F(LeasedClientTest, ACallWaitsWhileItsServerIsExcludedAndGoesOnWithTheNextMap) {
  fake_.Set(MapAt(0), FakeCoordinator::Renew::kGrant, {"a"});
  auto c = Connect();
  ASSERT_TRUE(c.ok()) << c.status();
  CallOptions call;
  // Time to see the call wait, then reach a; it then retries a (no
  // server there) until this deadline.
  call.timeout = std::chrono::seconds(10);
  Status result;
  std::thread getter([&] { result = (*c)->Get(KeyOf("a"), call).status(); });
  // The call keeps asking for a lease that covers a, and never connects.
  const int before = fake_.renewals();
  ASSERT_TRUE(WaitFor("three more renewals", [&] { return fake_.renewals() >= before + 3; }));
  EXPECT_EQ(listener_.accepted(), 0);
  // Failover done: the next map, in which a is no longer fenced.
  fake_.Set(MapAt(1), FakeCoordinator::Renew::kGrant, {});
  EXPECT_TRUE(WaitFor("a connection to the server", [&] { return listener_.accepted() >= 1; }));
  getter.join();
  EXPECT_EQ(result.code(), StatusCode::kUnavailable);  // the listener is no server
  EXPECT_EQ(result.message().find("failed over"), std::string::npos) << result;
  EXPECT_EQ((*c)->cluster_map_version(), state_->version() + 1);
}

TEST_F(LeasedClientTest, AnExcludedServersCallsFailNamingTheReason) {
  fake_.Set(MapAt(0), FakeCoordinator::Renew::kGrant, {"a"});
  auto c = Connect();
  ASSERT_TRUE(c.ok()) << c.status();
  CallOptions quick;
  quick.timeout = milliseconds(300);
  auto get = (*c)->Get(KeyOf("a"), quick);
  EXPECT_EQ(get.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(get.status().message().find("server a is being failed over"), std::string::npos) << get.status();
  EXPECT_EQ(listener_.accepted(), 0);
  // b is not fenced: its calls go to it.
  auto b = (*c)->Get(KeyOf("b"), quick);
  EXPECT_FALSE(b.ok());
  EXPECT_GE(listener_.accepted(), 1);
}

// A policy that refuses the first write as a server that lost the
// primaryship (the typed refusal MapPolicy::RouteWrite gives), naming a map
// version that the coordinator serves from that moment on; later writes
// are routed as a primary with no backups.
class NotPrimaryOnce final : public server::ReplicationPolicy {
 public:
  NotPrimaryOnce(uint64_t new_version, std::function<void()> on_refuse)
      : new_version_(new_version), on_refuse_(std::move(on_refuse)) {}
  int routed() const { return routed_.load(); }

  StatusOr<server::WriteRoute> RouteWrite(std::string_view) override {
    if (routed_.fetch_add(1) == 0) {
      on_refuse_();
      return Status(StatusCode::kFailedPrecondition, "refused for the test", Reason::kNotPrimary, new_version_);
    }
    server::WriteRoute route;
    route.map_version = new_version_;
    return route;
  }
  Status ReportFailedBackup(uint32_t, const server::ReplicaPeer&, std::string_view) override {
    return Status::Ok();
  }
  std::optional<std::string> FindPeer(uint64_t, uint64_t) override { return std::nullopt; }
  Status AcceptReplica(std::string_view, std::string_view, uint64_t) override {
    return FailedPrecondition("no replicas here");
  }
  // The server holds a lease throughout: only the refusal is under test.
  Status CheckLease() override { return Status::Ok(); }

 private:
  const uint64_t new_version_;
  const std::function<void()> on_refuse_;
  std::atomic<int> routed_{0};
};

TEST(NotPrimaryRetryTest, AWriteRefusedAsNotThePrimaryIsRetriedOnTheNamedMap) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("rkv_not_primary_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  FakeCoordinator fake;
  testing::InProcessCoordinatorOptions coordinator_options;
  coordinator_options.servers = 1;
  coordinator_options.shards = 1;
  auto state = testing::OpenInProcessState(coordinator_options);
  ASSERT_TRUE(state.ok()) << state.status();

  v1::ClusterMap newer;  // what the coordinator serves once the server refused
  auto tcp = transport::CreateTransport(transport::Kind::kTcp, transport::Options());
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.data_dir = dir.string();
  options.memory_bytes = 16 << 20;
  options.max_keys = 1000;
  options.token = kToken;
  // The policy needs the map version, known only once the server joined:
  // the server is started with a policy that forwards to `refusing`.
  std::unique_ptr<NotPrimaryOnce> refusing;
  class Forward final : public server::ReplicationPolicy {
   public:
    explicit Forward(std::unique_ptr<NotPrimaryOnce>* to) : to_(to) {}
    StatusOr<server::WriteRoute> RouteWrite(std::string_view key) override { return (*to_)->RouteWrite(key); }
    Status ReportFailedBackup(uint32_t s, const server::ReplicaPeer& b, std::string_view r) override {
      return (*to_)->ReportFailedBackup(s, b, r);
    }
    std::optional<std::string> FindPeer(uint64_t f, uint64_t e) override { return (*to_)->FindPeer(f, e); }
    Status AcceptReplica(std::string_view s, std::string_view k, uint64_t v) override {
      return (*to_)->AcceptReplica(s, k, v);
    }
    Status CheckLease() override { return (*to_)->CheckLease(); }

   private:
    std::unique_ptr<NotPrimaryOnce>* to_;
  } forward(&refusing);
  auto server = server::Server::Start(options, tcp->get(), &forward, "a");
  ASSERT_TRUE(server.ok()) << server.status();

  v1::JoinRequest join = MakeJoin("a", (*server)->epoch());
  join.set_data_address((*server)->address());
  ASSERT_TRUE((*state)->Join(join).ok());
  const v1::ClusterMap first = (*state)->Map();
  newer = first;
  newer.set_version(first.version() + 1);
  refusing = std::make_unique<NotPrimaryOnce>(newer.version(), [&] {
    fake.Set(newer, FakeCoordinator::Renew::kGrant, {});
  });
  fake.Set(first, FakeCoordinator::Renew::kGrant, {});
  auto started = control::StartGrpcServer("127.0.0.1:0", &fake, "fake coordinator");
  ASSERT_TRUE(started.ok()) << started.status();
  {
    ClientOptions o;
    o.coordinator = started->address;
    o.token = kToken;
    o.transport = "tcp";
    o.timeout = std::chrono::seconds(60);  // bounds a hang; nothing waits for it
    auto c = Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    auto put = (*c)->Put("k", "v");
    ASSERT_TRUE(put.ok()) << put.status();
    // Refused once, then applied: routed before forwarding and again after
    // the lease check that precedes the publish (server/apply/apply_client.cc).
    EXPECT_EQ(refusing->routed(), 3);
    EXPECT_EQ((*c)->cluster_map_version(), newer.version());
    auto get = (*c)->Get("k");
    ASSERT_TRUE(get.ok()) << get.status();
    EXPECT_EQ(*get, "v");
  }
  started->server->Shutdown(std::chrono::system_clock::now());
  (*server)->Shutdown();
  server->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rkv
