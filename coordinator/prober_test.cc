// Prober: what a probe counts as an answer, and that a suspected server
// that does not answer is marked DOWN (with a heartbeat timeout far away,
// so that only the probe can have done it) while one that answers stays
// UP.
#include "coordinator/prober.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "coordinator/test_util.h"
#include "proto/auth.h"
#include "proto/grpc_server.h"
#include "proto/rkv.grpc.pb.h"

namespace rkv::coordinator {
namespace {

using std::chrono::milliseconds;
using testing::ClosedAddress;

constexpr char kProbeToken[] = "prober-test-token";

// An Admin service that answers Health as `id` at `epoch`, or refuses
// every call with `refuse` when that is not OK.
class FakeAdmin final : public v1::Admin::Service {
 public:
  FakeAdmin(std::string id, uint64_t epoch, grpc::Status refuse = grpc::Status::OK)
      : id_(std::move(id)), epoch_(epoch), refuse_(std::move(refuse)) {}
  grpc::Status Health(grpc::ServerContext* context, const v1::HealthRequest*, v1::HealthResponse* out) override {
    if (!refuse_.ok()) return refuse_;
    if (grpc::Status s = control::CheckToken(context, control::TokenDigestHex(kProbeToken)); !s.ok()) return s;
    out->set_server_id(id_);
    out->set_epoch(epoch_);
    out->set_serving(true);
    return grpc::Status::OK;
  }

 private:
  const std::string id_;
  const uint64_t epoch_;
  const grpc::Status refuse_;
};

// A listening socket that is never accepted from: the kernel completes
// the TCP handshake, nothing answers (a frozen process).
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    socklen_t len = sizeof a;
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    address_ = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  }
  ~SilentListener() { close(fd_); }
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
};

CoordinatorState::ProbeTarget ProbeTargetAt(std::string address, std::string id = "s0", uint64_t epoch = 1) {
  return {std::move(id), epoch, std::move(address)};
}

TEST(ProberTest, AProbeTellsALiveIncarnationFromAMissingOne) {
  const std::string digest = control::TokenDigestHex(kProbeToken);
  std::string note;
  // Nobody listening: UNAVAILABLE.
  Status s = Prober::Probe(ProbeTargetAt(ClosedAddress()), digest, milliseconds(2000), &note);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  // Accepted by the kernel, never answered: the deadline.
  SilentListener silent;
  s = Prober::Probe(ProbeTargetAt(silent.address()), digest, milliseconds(200), &note);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(note.empty());

  FakeAdmin live("s0", 1);
  auto started = control::StartGrpcServer("127.0.0.1:0", &live, "fake admin");
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_TRUE(Prober::Probe(ProbeTargetAt(started->address), digest, milliseconds(5000), &note).ok());
  EXPECT_TRUE(note.empty());
  // The same server id at another epoch is another incarnation.
  s = Prober::Probe(ProbeTargetAt(started->address, "s0", 2), digest, milliseconds(5000), &note);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  s = Prober::Probe(ProbeTargetAt(started->address, "s9", 1), digest, milliseconds(5000), &note);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  // A live process that refuses the call (here: the wrong token) answered.
  EXPECT_TRUE(Prober::Probe(ProbeTargetAt(started->address), control::TokenDigestHex("other"), milliseconds(5000), &note)
                  .ok());
  EXPECT_NE(note.find("UNAUTHENTICATED"), std::string::npos) << note;
  started->server->Shutdown();
}

class ProberStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorConfig c;
    c.expected_servers = 2;
    c.shard_count = 4;
    c.replicas = 2;
    c.heartbeat_interval = milliseconds(500);
    // Far away: only a probe can mark a server DOWN within the test.
    c.heartbeat_timeout = milliseconds(600'000);
    c.suspect_after = milliseconds(700);
    // Generous: a loaded sanitizer run may take hundreds of ms to answer a
    // live server's probe; the dead one refuses at once.
    c.probe_timeout = milliseconds(5000);
    auto state = CoordinatorState::Open(c, std::make_unique<testing::MemoryStore>(
                                               std::make_shared<testing::MemoryStoreData>()));
    ASSERT_TRUE(state.ok()) << state.status();
    state_ = std::move(state).value();
  }

  void Join(const std::string& id, const std::string& admin_address) {
    v1::JoinRequest r = testing::MakeJoin(id, 1, id == "a" ? 0 : 1);
    r.set_admin_address(admin_address);
    ASSERT_TRUE(state_->Join(r).ok());
  }

  v1::ServerState StateOf(const std::string& id) {
    const v1::ClusterMap map = state_->Map();
    for (const v1::ServerInfo& s : map.servers()) {
      if (s.server_id() == id) return s.state();
    }
    return v1::ServerState_INT_MIN_SENTINEL_DO_NOT_USE_;
  }

  std::unique_ptr<CoordinatorState> state_;
};

TEST_F(ProberStateTest, ASuspectThatDoesNotAnswerIsDownAndOneThatAnswersStaysUp) {
  FakeAdmin live("b", 1);
  auto started = control::StartGrpcServer("127.0.0.1:0", &live, "fake admin");
  ASSERT_TRUE(started.ok()) << started.status();
  Join("a", ClosedAddress());
  Join("b", started->address);
  {
    Prober prober(state_.get(), control::TokenDigestHex(kProbeToken));
    prober.SuspectId("a", "test");
    prober.SuspectId("b", "test");
    prober.SuspectId("nobody", "test");
    // Generous bound: the probes themselves end within 300 ms each.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (prober.counts().probes < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    const Prober::Counts counts = prober.counts();
    EXPECT_EQ(counts.probes, 2u);
    EXPECT_EQ(counts.confirmed, 1u);
    EXPECT_EQ(counts.refuted, 1u);
  }
  EXPECT_EQ(StateOf("a"), v1::DOWN);
  EXPECT_EQ(StateOf("b"), v1::UP);
  ASSERT_EQ(state_->Lease().excluded_servers.size(), 1u);
  EXPECT_EQ(state_->Lease().excluded_servers[0], "a");
  started->server->Shutdown();
}

}  // namespace
}  // namespace rkv::coordinator
