// The clients of one process share one lease (LeaseShare, docs/design.md
// §8.8 "What renewals cost"): K clients of the same coordinators and token
// renew once per lease_ms / 3, not K times; the lease outlives any of them
// but the last; another token gets a lease of its own. Against a fake
// coordinator that counts the RenewLease calls it answers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "client/lease_keeper.h"
#include "common/mutex.h"
#include "proto/grpc_server.h"
#include "proto/rkv.grpc.pb.h"
#include "rkv/client.h"
#include "tests/in_process_coordinator.h"

namespace rkv {
namespace {

using std::chrono::milliseconds;

// Short, so that a test sees many renewal periods: one every 100 ms.
constexpr uint32_t kLeaseMs = 300;
constexpr milliseconds kPeriod{kLeaseMs / 3};

// Serves a fixed map and grants every RenewLease a lease of kLeaseMs on it,
// counting them.
class CountingCoordinator final : public v1::Coordinator::Service {
 public:
  explicit CountingCoordinator(v1::ClusterMap map) : map_(std::move(map)) {}

  int renewals() const { return renewals_.load(); }

  grpc::Status GetClusterMap(grpc::ServerContext*, const v1::GetClusterMapRequest*, v1::ClusterMap* out) override {
    *out = map_;
    return grpc::Status::OK;
  }
  grpc::Status WatchClusterMap(grpc::ServerContext* context, const v1::WatchClusterMapRequest*,
                               grpc::ServerWriter<v1::ClusterMap>*) override {
    while (!context->IsCancelled()) std::this_thread::sleep_for(milliseconds(10));
    return grpc::Status::CANCELLED;
  }
  grpc::Status RenewLease(grpc::ServerContext*, const v1::RenewLeaseRequest*, v1::RenewLeaseResponse* out) override {
    renewals_.fetch_add(1);
    out->set_map_version(map_.version());
    out->set_lease_ms(kLeaseMs);
    return grpc::Status::OK;
  }

 private:
  const v1::ClusterMap map_;
  std::atomic<int> renewals_{0};
};

class LeaseShareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto state = testing::OpenInProcessState(testing::InProcessCoordinatorOptions());
    ASSERT_TRUE(state.ok()) << state.status();
    for (const char* id : {"a", "b"}) {
      // Nothing connects to the servers here: any address will do.
      ASSERT_TRUE(testing::JoinFakeServer(**state, id, 1, "127.0.0.1:9").ok());
    }
    fake_ = std::make_unique<CountingCoordinator>((*state)->Map());
    auto started = control::StartGrpcServer("127.0.0.1:0", fake_.get(), "fake coordinator");
    ASSERT_TRUE(started.ok()) << started.status();
    grpc_ = std::move(started).value();
  }
  void TearDown() override {
    if (grpc_.server) grpc_.server->Shutdown(std::chrono::system_clock::now());
  }

  std::unique_ptr<Client> Connect(const std::string& token = "share-test-token") {
    ClientOptions o;
    o.coordinator = grpc_.address;
    o.token = token;
    o.transport = "tcp";
    o.timeout = std::chrono::seconds(20);
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // The renewals the coordinator answers over `window`.
  int RenewalsOver(milliseconds window) {
    const int before = fake_->renewals();
    std::this_thread::sleep_for(window);
    return fake_->renewals() - before;
  }

  std::unique_ptr<CountingCoordinator> fake_;
  control::StartedGrpcServer grpc_;
};

TEST_F(LeaseShareTest, KClientsRenewOncePerPeriodNotKTimes) {
  constexpr int kClients = 8;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(Connect());
    ASSERT_NE(clients.back(), nullptr);
  }
  // Connecting the other seven found the first one's lease valid.
  const milliseconds window = 10 * kPeriod;
  const int renewals = RenewalsOver(window);
  // One renewal per period (a little more while a renewal's time is added
  // to each period's; scheduling delays only make fewer).
  EXPECT_GE(renewals, 5);
  EXPECT_LE(renewals, 12) << "K clients renewing each would make about " << kClients * 10;
}

TEST_F(LeaseShareTest, TheLeaseOutlivesEveryClientButTheLast) {
  auto first = Connect();
  auto second = Connect();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  first.reset();
  // The renewals go on for the one left, still one per period.
  const int renewals = RenewalsOver(10 * kPeriod);
  EXPECT_GE(renewals, 5);
  EXPECT_LE(renewals, 12);
  second.reset();
  // No client left: the shared lease has stopped.
  std::this_thread::sleep_for(2 * kPeriod);
  EXPECT_EQ(RenewalsOver(5 * kPeriod), 0);
}

TEST_F(LeaseShareTest, AnotherTokenIsAnotherLease) {
  auto one = Connect("token-one");
  auto two = Connect("token-two");
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  // Two leases, each renewed once per period.
  const int renewals = RenewalsOver(10 * kPeriod);
  EXPECT_GE(renewals, 12);
  EXPECT_LE(renewals, 24);
}

TEST(LeaseShareJoinTest, SharesFollowTheKeyAndLeaveCleanly) {
  client::MapHolder a, b, c;
  auto sa = client::LeaseShare::Join("127.0.0.1:1", "t", &a);
  auto sb = client::LeaseShare::Join(" 127.0.0.1:1 ", "t", &b);  // the same list, normalized
  auto sc = client::LeaseShare::Join("127.0.0.1:1", "u", &c);
  ASSERT_TRUE(sa.ok() && sb.ok() && sc.ok());
  EXPECT_EQ(&(*sa)->keeper(), &(*sb)->keeper());
  EXPECT_NE(&(*sa)->keeper(), &(*sc)->keeper());
  EXPECT_EQ((*sa)->members(), 2u);
  sb->reset();
  EXPECT_EQ((*sa)->members(), 1u);
  EXPECT_EQ(client::LeaseShare::Join("", "t", &b).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rkv
