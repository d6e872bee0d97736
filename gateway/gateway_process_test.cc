// The rkv-gateway process on a real rkv-server, over sockets: a hostile
// client that pipelines without reading (the gateway's memory stays
// bounded and others are served), 2,000 idle connections beside a working
// one, max clients, a listen port already taken, SIGTERM. No timing
// thresholds: every wait is for a condition, with a generous bound.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "gateway/listener.h"
#include "tests/gateway_process.h"
#include "tests/temp_dir.h"
#include "tests/wait_for.h"
#include "gateway/resp_test_util.h"

// A sanitizer build's allocator keeps freed memory aside (ASan's
// quarantine, 256 MiB) and adds its own: the bound on the gateway's growth
// allows for it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RKV_GATEWAY_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RKV_GATEWAY_TEST_SANITIZED 1
#endif
#endif

namespace rkv::gateway {
namespace {

#ifdef RKV_GATEWAY_TEST_SANITIZED
constexpr long kMostGrowthKiB = 2 * 1024 * 1024;
#else
constexpr long kMostGrowthKiB = 256 * 1024;
#endif

using ::rkv::testing::GatewayBackend;
using ::rkv::testing::GatewayProcess;
using ::rkv::testing::TempDir;

using testing::Multibulk;

int Connect(const std::string& address) {
  size_t colon = address.rfind(':');
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  timeval limit{60, 0};  // a hung gateway fails the test instead of hanging it
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  return fd;
}

void SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    ASSERT_GT(n, 0) << std::strerror(errno);
    data.remove_prefix(static_cast<size_t>(n));
  }
}

std::string ReadBytes(int fd, size_t want) {
  std::string got;
  char buf[65536];
  while (got.size() < want) {
    ssize_t n = recv(fd, buf, std::min(sizeof(buf), want - got.size()), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

std::string Call(int fd, const std::vector<std::string>& args, size_t reply_bytes) {
  SendAll(fd, Multibulk(args));
  return ReadBytes(fd, reply_bytes);
}

class GatewayProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    backend_ = new GatewayBackend("gateway-token");
    rkv::Status started = backend_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    delete backend_;
    backend_ = nullptr;
  }

  std::vector<std::string> Flags(const std::vector<std::string>& extra = {}) const { return backend_->Flags(extra); }

  static inline GatewayBackend* backend_ = nullptr;
};

TEST_F(GatewayProcessTest, AClientThatNeverReadsCannotGrowTheGatewayAndOthersAreServed) {
  TempDir dir;
  GatewayProcess gateway(dir.path(), Flags({"--output_limit_bytes=1048576"}));
  ASSERT_TRUE(gateway.Start());
  int setup = Connect(gateway.address());
  ASSERT_GE(setup, 0);
  std::string value(512 * 1024, 'v');
  ASSERT_EQ(Call(setup, {"SET", "hostile:big", value}, 5), "+OK\r\n");
  long rss_before = gateway.RssKiB();

  int hostile = Connect(gateway.address());
  ASSERT_GE(hostile, 0);
  fcntl(hostile, F_SETFL, fcntl(hostile, F_GETFL) | O_NONBLOCK);
  // GETs of a 512 KiB value: 1 MiB of requests asks for 20 GiB of replies.
  std::string chunk;
  std::string get = Multibulk({"GET", "hostile:big"});
  while (chunk.size() < (1u << 20)) chunk += get;
  const size_t most = size_t{64} << 20;
  size_t sent = 0;
  int stalls = 0;
  while (sent < most && stalls < 3) {
    size_t at = sent % chunk.size();
    ssize_t n = send(hostile, chunk.data() + at, chunk.size() - at, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      stalls = 0;
      continue;
    }
    ASSERT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << std::strerror(errno);
    pollfd p{hostile, POLLOUT, 0};
    if (poll(&p, 1, 2000) == 0) ++stalls;
  }
  EXPECT_LT(sent, most) << "the gateway kept reading a client that never reads";
  // Others are served meanwhile, on both threads.
  for (int i = 0; i < 4; ++i) {
    int good = Connect(gateway.address());
    ASSERT_GE(good, 0);
    EXPECT_EQ(Call(good, {"PING"}, 7), "+PONG\r\n");
    EXPECT_EQ(Call(good, {"SET", "hostile:k" + std::to_string(i), "x"}, 5), "+OK\r\n");
    EXPECT_EQ(Call(good, {"GET", "hostile:k" + std::to_string(i)}, 7), "$1\r\nx\r\n");
    close(good);
  }
  // The limit, one batch of replies and the buffers: far below what the
  // requests asked for (20 GiB), whatever the machine or the build.
  long rss_after = gateway.RssKiB();
  EXPECT_LT(rss_after - rss_before, kMostGrowthKiB) << "RSS went from " << rss_before << " KiB to " << rss_after;
  close(hostile);
  close(setup);
  gateway.Signal(SIGTERM);
  EXPECT_EQ(gateway.Wait(), 0) << gateway.Log();
}

TEST_F(GatewayProcessTest, TwoThousandIdleConnectionsAndAWorkingOne) {
  rlimit nofile{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &nofile), 0);
  if (nofile.rlim_cur < 4200 && nofile.rlim_max >= 4200) {
    nofile.rlim_cur = std::min<rlim_t>(nofile.rlim_max, 8192);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &nofile), 0);  // the gateway inherits it
  }
  ASSERT_GE(nofile.rlim_cur, 4200u) << "the test needs 4,200 descriptors (ulimit -n)";
  TempDir dir;
  GatewayProcess gateway(dir.path(), Flags());
  ASSERT_TRUE(gateway.Start());
  std::vector<int> idle;
  for (int i = 0; i < 2000; ++i) {
    int fd = Connect(gateway.address());
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    idle.push_back(fd);
  }
  int worker = Connect(gateway.address());
  ASSERT_GE(worker, 0);
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(Call(worker, {"INCR", "idle:counter"}, std::to_string(i + 1).size() + 3), ":" + std::to_string(i + 1) + "\r\n");
  }
  EXPECT_EQ(Call(idle.front(), {"GET", "idle:counter"}, 9), "$3\r\n200\r\n");
  EXPECT_EQ(Call(idle.back(), {"INFO", "clients"}, 1).substr(0, 1), "$");
  for (int fd : idle) close(fd);
  close(worker);
}

TEST_F(GatewayProcessTest, ClientsBeyondMaxClientsGetRedissError) {
  TempDir dir;
  GatewayProcess gateway(dir.path(), Flags({"--max_clients=2"}));
  ASSERT_TRUE(gateway.Start());
  int a = Connect(gateway.address());
  int b = Connect(gateway.address());
  EXPECT_EQ(Call(a, {"PING"}, 7), "+PONG\r\n");
  EXPECT_EQ(Call(b, {"PING"}, 7), "+PONG\r\n");
  int c = Connect(gateway.address());
  ASSERT_GE(c, 0);
  EXPECT_EQ(ReadBytes(c, 100), "-ERR max number of clients reached\r\n");
  close(a);
  close(b);
  close(c);
}

TEST_F(GatewayProcessTest, ATakenPortIsNamedAndExitsNonZero) {
  auto taken = Listen("127.0.0.1:0");
  ASSERT_TRUE(taken.ok());
  std::string address = BoundAddress(*taken);
  TempDir dir;
  auto flags = Flags();
  flags.push_back("--redis_listen=" + address);
  GatewayProcess gateway(dir.path(), flags);
  ASSERT_TRUE(gateway.Start(/*wait_listening=*/false));
  EXPECT_EQ(gateway.Wait(), 1);
  std::string err = gateway.Log();
  EXPECT_NE(err.find("--redis_listen"), std::string::npos) << err;
  EXPECT_NE(err.find(address), std::string::npos) << err;
  EXPECT_NE(err.find("Address already in use"), std::string::npos) << err;
  close(*taken);
}

TEST_F(GatewayProcessTest, BadFlagsExitTwoWithTheReason) {
  TempDir dir;
  GatewayProcess gateway(dir.path(), Flags({"--threads=-3"}));
  ASSERT_TRUE(gateway.Start(false));
  EXPECT_EQ(gateway.Wait(), 2);
  EXPECT_NE(gateway.Log().find("--threads"), std::string::npos) << gateway.Log();
}

TEST_F(GatewayProcessTest, SigtermStopsItCleanly) {
  TempDir dir;
  GatewayProcess gateway(dir.path(), Flags());
  ASSERT_TRUE(gateway.Start());
  int fd = Connect(gateway.address());
  EXPECT_EQ(Call(fd, {"SET", "term:k", "v"}, 5), "+OK\r\n");
  gateway.Signal(SIGTERM);
  EXPECT_EQ(gateway.Wait(), 0) << gateway.Log();
  EXPECT_EQ(ReadBytes(fd, 1), "");
  close(fd);
}

// SIGHUP reloads a server's or coordinator's credentials; the gateway has
// nothing to reload, and a SIGHUP sent to every rkv process (a reload of
// all units, a terminal's hang-up) must not end it and its clients'
// connections, however many come and however fast.
TEST_F(GatewayProcessTest, SighupsLeaveItServingItsConnections) {
  TempDir dir;
  GatewayProcess gateway(dir.path(), Flags());
  ASSERT_TRUE(gateway.Start());
  int fd = Connect(gateway.address());
  ASSERT_GE(fd, 0);
  EXPECT_EQ(Call(fd, {"SET", "hup:k", "v1"}, 5), "+OK\r\n");
  for (int i = 0; i < 500; ++i) gateway.Signal(SIGHUP);
  // The connection opened before the signals still works, and so does a
  // new one.
  EXPECT_EQ(Call(fd, {"GET", "hup:k"}, 8), "$2\r\nv1\r\n") << gateway.Log();
  int fresh = Connect(gateway.address());
  ASSERT_GE(fresh, 0) << gateway.Log();
  EXPECT_EQ(Call(fresh, {"SET", "hup:k", "v2"}, 5), "+OK\r\n");
  EXPECT_EQ(Call(fd, {"GET", "hup:k"}, 8), "$2\r\nv2\r\n");
  EXPECT_TRUE(::rkv::testing::WaitFor("the SIGHUP log line",
                                      [&] { return gateway.Log().find("SIGHUP: nothing to reload") != std::string::npos; }))
      << gateway.Log();
  gateway.Signal(SIGTERM);
  EXPECT_EQ(gateway.Wait(), 0) << gateway.Log();
  close(fd);
  close(fresh);
}

}  // namespace
}  // namespace rkv::gateway
