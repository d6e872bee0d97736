#include "proto/coordinator_set.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/mutex.h"
#include "proto/auth.h"
#include "proto/grpc_server.h"

namespace rkv::control {
namespace {

using std::chrono::milliseconds;

constexpr char kToken[] = "coordinator-set-test-token";
// Bounds a hang only: nothing here should take long.
constexpr auto kPatience = std::chrono::seconds(20);

CoordinatorSet::Deadline In(CoordinatorSet::Clock::duration d) { return CoordinatorSet::Clock::now() + d; }

TEST(ParseCoordinatorListTest, AcceptsOneOrManyAndDropsRepeats) {
  auto one = ParseCoordinatorList("127.0.0.1:7600");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, (std::vector<std::string>{"127.0.0.1:7600"}));
  auto many = ParseCoordinatorList("a:1, b.example:2 ,[::1]:3,a:1");
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_EQ(*many, (std::vector<std::string>{"a:1", "b.example:2", "[::1]:3"}));
}

TEST(ParseCoordinatorListTest, NamesTheBadEntry) {
  for (const char* bad : {"", " ", "a:1,,b:2", "a:1,"}) {
    const auto r = ParseCoordinatorList(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  auto r = ParseCoordinatorList("a:1,,b:2");
  EXPECT_NE(r.status().message().find("entry 2 is empty"), std::string::npos) << r.status();
  r = ParseCoordinatorList("a:1,b:2,no port");
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("entry 3"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("no port"), std::string::npos) << r.status();
  r = ParseCoordinatorList("a:1,b:0");
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("entry 2"), std::string::npos) << r.status();
  std::string too_many;
  for (size_t i = 0; i <= kMaxCoordinators; ++i) too_many += "h" + std::to_string(i) + ":1,";
  too_many.pop_back();
  EXPECT_EQ(ParseCoordinatorList(too_many).status().code(), StatusCode::kInvalidArgument);
}

// A coordinator of a group: the leader answers Heartbeat (map_version =
// its id) and Drain (FAILED_PRECONDITION when told to); a standby answers
// both as the wire contract says, naming the leader it knows (or none).
// Every coordinator serves GetClusterMap (version = its id).
class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  explicit FakeCoordinator(uint64_t id) : id_(id) {}

  // "" leads; otherwise a standby that names `leader` ("-": knows none).
  void Follow(std::string leader) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    leader_ = std::move(leader);
  }
  int calls() const { return calls_.load(); }

  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse* response) override {
    if (grpc::Status s = Check(context); !s.ok()) return s;
    response->set_map_version(id_);
    return grpc::Status::OK;
  }
  grpc::Status Drain(grpc::ServerContext* context, const v1::DrainRequest*, v1::DrainResponse*) override {
    if (grpc::Status s = Check(context); !s.ok()) return s;
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "refused by " + std::to_string(id_));
  }
  grpc::Status GetClusterMap(grpc::ServerContext* context, const v1::GetClusterMapRequest*,
                             v1::ClusterMap* response) override {
    calls_.fetch_add(1);
    if (grpc::Status s = CheckToken(context, TokenDigestHex(kToken)); !s.ok()) return s;
    response->set_version(id_);
    return grpc::Status::OK;
  }

 private:
  grpc::Status Check(grpc::ServerContext* context) EXCLUDES(mu_) {
    calls_.fetch_add(1);
    if (grpc::Status s = CheckToken(context, TokenDigestHex(kToken)); !s.ok()) return s;
    MutexLock lock(mu_);
    if (leader_.empty()) return grpc::Status::OK;
    if (leader_ == "-") {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the leader; no leader elected yet (test)");
    }
    context->AddTrailingMetadata(kLeaderMetadataKey, leader_);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the leader; the leader is " + leader_);
  }

  const uint64_t id_;
  Mutex mu_;
  std::string leader_ GUARDED_BY(mu_);
  std::atomic<int> calls_{0};
};

// A fake served on 127.0.0.1 (a free port, or `listen`).
struct Served {
  explicit Served(uint64_t id, const std::string& listen = "127.0.0.1:0") : service(id) {
    auto started = StartGrpcServer(listen, &service, "fake coordinator");
    EXPECT_TRUE(started.ok()) << started.status();
    if (started.ok()) {
      server = std::move(started->server);
      address = started->address;
    }
  }
  ~Served() { Stop(); }
  void Stop() {
    if (server != nullptr) server->Shutdown(std::chrono::system_clock::now());
    server.reset();
  }
  FakeCoordinator service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

// An address where nothing listens (a fake's, stopped).
std::string ClosedAddress() {
  Served probe(0);
  return probe.address;
}

std::unique_ptr<CoordinatorSet> SetOf(const std::vector<std::string>& addresses) {
  std::string list;
  for (const std::string& a : addresses) list += (list.empty() ? "" : ",") + a;
  auto set = CoordinatorSet::Create(list, kToken);
  EXPECT_TRUE(set.ok()) << set.status();
  return set.ok() ? std::move(set).value() : nullptr;
}

// One Heartbeat to the leader: the answering fake's id, or the error.
StatusOr<uint64_t> Heartbeat(CoordinatorSet& set, CoordinatorSet::Clock::duration timeout = kPatience,
                             std::string* by = nullptr) {
  v1::HeartbeatResponse response;
  const Status s = set.CallLeader(
      "Heartbeat", In(timeout),
      [&](v1::Coordinator::Stub& stub, grpc::ClientContext* context) {
        return stub.Heartbeat(context, v1::HeartbeatRequest(), &response);
      },
      by);
  if (!s.ok()) return s;
  return response.map_version();
}

StatusOr<uint64_t> MapVersion(CoordinatorSet& set) {
  v1::ClusterMap map;
  const Status s = set.CallAny("GetClusterMap", In(kPatience), [&](v1::Coordinator::Stub& stub,
                                                                  grpc::ClientContext* context) {
    return stub.GetClusterMap(context, v1::GetClusterMapRequest(), &map);
  });
  if (!s.ok()) return s;
  return map.version();
}

// The value, or 0 on an error.
uint64_t Or0(const StatusOr<uint64_t>& r) { return r.ok() ? *r : 0; }

TEST(CoordinatorSetTest, AStandbyRedirectsToTheLeaderAtOnceAndTheLeaderIsRemembered) {
  Served a(1), b(2), c(3);
  a.service.Follow(c.address);
  b.service.Follow(c.address);
  auto set = SetOf({a.address, b.address, c.address});
  ASSERT_NE(set, nullptr);
  EXPECT_EQ(set->leader(), a.address);
  std::string by;
  auto id = Heartbeat(*set, kPatience, &by);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, 3u);
  EXPECT_EQ(by, c.address);
  EXPECT_EQ(a.service.calls(), 1);
  EXPECT_EQ(b.service.calls(), 0);  // skipped: a named the leader
  EXPECT_EQ(set->leader(), c.address);
  // The next call goes straight to the leader.
  id = Heartbeat(*set);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, 3u);
  EXPECT_EQ(a.service.calls(), 1);
  EXPECT_EQ(c.service.calls(), 2);
}

TEST(CoordinatorSetTest, ALeaderChangeIsFollowed) {
  Served a(1), b(2);
  b.service.Follow(a.address);
  auto set = SetOf({a.address, b.address});
  ASSERT_NE(set, nullptr);
  ASSERT_EQ(Or0(Heartbeat(*set)), 1u);
  // a steps down, b leads.
  a.service.Follow(b.address);
  b.service.Follow("");
  auto id = Heartbeat(*set);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, 2u);
  EXPECT_EQ(set->leader(), b.address);
}

TEST(CoordinatorSetTest, WithoutALeaderNamedTheNextCoordinatorIsTried) {
  Served a(1), b(2);
  a.service.Follow("-");
  auto set = SetOf({a.address, b.address});
  ASSERT_NE(set, nullptr);
  auto id = Heartbeat(*set);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, 2u);
  EXPECT_EQ(set->leader(), b.address);
}

TEST(CoordinatorSetTest, ADeadCoordinatorIsSkippedAndNotTriedFirstAgain) {
  const std::string dead = ClosedAddress();
  Served b(2);
  auto set = SetOf({dead, b.address});
  ASSERT_NE(set, nullptr);
  auto id = Heartbeat(*set);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, 2u);
  EXPECT_EQ(set->leader(), b.address);
  auto version = MapVersion(*set);
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 2u);
  EXPECT_EQ(set->last_answered(), b.address);
}

TEST(CoordinatorSetTest, AnAnswerOtherThanUnavailableIsFinal) {
  Served a(1), b(2);
  auto set = SetOf({a.address, b.address});
  ASSERT_NE(set, nullptr);
  const Status s = set->CallLeader("Drain s-1", In(kPatience), [](v1::Coordinator::Stub& stub,
                                                                 grpc::ClientContext* context) {
    v1::DrainResponse response;
    return stub.Drain(context, v1::DrainRequest(), &response);
  });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(s.message(), "coordinator " + a.address + ": Drain s-1: refused by 1");
  EXPECT_EQ(b.service.calls(), 0);
}

TEST(CoordinatorSetTest, ErrorsNameEveryCoordinatorTried) {
  Served a(1), b(2);
  a.service.Follow("-");
  b.service.Follow("-");
  const std::string dead = ClosedAddress();
  auto set = SetOf({a.address, b.address, dead});
  ASSERT_NE(set, nullptr);
  // Time for a share each under a sanitizer (the dead one gets 1 s at most).
  const auto r = Heartbeat(*set, milliseconds(3000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  const std::string m(r.status().message());
  EXPECT_NE(m.find("coordinator " + dead + ": Heartbeat: "), std::string::npos) << m;
  EXPECT_NE(m.find("also tried " + a.address + ": UNAVAILABLE: not the leader; no leader elected yet"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(b.address + ": UNAVAILABLE: not the leader"), std::string::npos) << m;
}

TEST(CoordinatorSetTest, RedirectsNeverLoop) {
  Served a(1), b(2);
  a.service.Follow(b.address);
  b.service.Follow(a.address);
  auto set = SetOf({a.address, b.address});
  ASSERT_NE(set, nullptr);
  const auto r = Heartbeat(*set);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_EQ(a.service.calls(), 1);
  EXPECT_EQ(b.service.calls(), 1);
}

// A leader change: the leader died and a standby still names it, last of
// the coordinators to try. Waiting for the dead one's connection does not
// spend the caller's time (kMaxAttempt at most): the caller gets the
// answer in time to ask again.
TEST(CoordinatorSetTest, AStaleRedirectToADeadLeaderDoesNotSpendTheCallersTime) {
  const std::string dead = ClosedAddress();
  Served a(1), b(2);
  a.service.Follow(b.address);
  b.service.Follow(dead);
  auto set = SetOf({a.address, b.address, dead});
  ASSERT_NE(set, nullptr);
  const auto deadline = In(kPatience);
  const auto r = Heartbeat(*set, kPatience);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("coordinator " + dead + ": Heartbeat: not connected within"),
            std::string::npos)
      << r.status();
  // Far from its deadline (kMaxAttempt is 1 s of 20 s).
  EXPECT_LT(CoordinatorSet::Clock::now(), deadline - kPatience / 2) << r.status();
  // The next call finds the new leader at once.
  b.service.Follow("");
  const auto again = Heartbeat(*set);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, 2u);
}

TEST(CoordinatorSetTest, ALeaderOutsideTheListIsFollowed) {
  Served a(1), outside(9);
  a.service.Follow(outside.address);
  auto set = SetOf({a.address});
  ASSERT_NE(set, nullptr);
  auto id = Heartbeat(*set);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, 9u);
  EXPECT_EQ(set->leader(), outside.address);
  EXPECT_EQ(set->addresses(), (std::vector<std::string>{a.address}));
}

TEST(CoordinatorSetTest, MapReadsAskAnyCoordinatorStartingWithTheLastThatAnswered) {
  Served a(1), b(2);
  a.service.Follow("-");
  b.service.Follow("-");
  auto set = SetOf({a.address, b.address});
  ASSERT_NE(set, nullptr);
  ASSERT_EQ(Or0(MapVersion(*set)), 1u);  // a standby's map will do
  a.Stop();
  ASSERT_EQ(Or0(MapVersion(*set)), 2u);
  const int before = b.service.calls();
  ASSERT_EQ(Or0(MapVersion(*set)), 2u);  // b first now
  EXPECT_EQ(b.service.calls(), before + 1);
}

TEST(CoordinatorSetTest, AnUnreachableCoordinatorIsUnavailableWithinTheDeadline) {
  const std::string dead = ClosedAddress();
  auto set = SetOf({dead});
  ASSERT_NE(set, nullptr);
  const auto r = Heartbeat(*set, milliseconds(300));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("coordinator " + dead + ": Heartbeat: "), std::string::npos) << r.status();
  const auto connected = set->ConnectAny(In(milliseconds(200)));
  EXPECT_EQ(connected.status().code(), StatusCode::kUnavailable);
}

TEST(CoordinatorSetTest, ConnectAnyPrefersAConnectedCoordinator) {
  const std::string dead = ClosedAddress();
  Served b(2);
  auto set = SetOf({dead, b.address});
  ASSERT_NE(set, nullptr);
  auto target = set->ConnectAny(In(kPatience));
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->address, b.address);
  EXPECT_EQ(target->index, 1u);
  ASSERT_NE(target->stub, nullptr);
  set->NoteAnswered(target->index);
  EXPECT_EQ(set->last_answered(), b.address);
  set->NoteBroken(target->index);
  EXPECT_EQ(set->last_answered(), dead);
}

// A call that starts while the only coordinator is down completes once it
// is back on its address, within the call's deadline: the waiting call
// drives the reconnection (no caller retry, no backup poller).
TEST(CoordinatorSetTest, ACallWaitingForARestartedCoordinatorCompletesWhenItReturns) {
  auto first = std::make_unique<Served>(1);
  const std::string address = first->address;
  auto set = SetOf({address});
  ASSERT_NE(set, nullptr);
  ASSERT_EQ(Or0(Heartbeat(*set)), 1u);
  first.reset();
  StatusOr<uint64_t> result = Unavailable("not run");
  std::thread caller([&] { result = Heartbeat(*set); });
  // Down for a moment (the outage itself), then back on the same port.
  std::this_thread::sleep_for(milliseconds(500));
  Served second(2, address);
  ASSERT_FALSE(second.address.empty());
  caller.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(*result, 2u);
}

}  // namespace
}  // namespace rkv::control
