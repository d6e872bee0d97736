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
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gateway/listener.h"
#include "tests/server_process.h"
#include "tests/temp_dir.h"
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

using ::rkv::testing::ServerProcess;
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

// rkv-gateway as a child process; stdout and stderr go to files.
class GatewayProcess {
 public:
  GatewayProcess(std::string dir, std::vector<std::string> flags) : dir_(std::move(dir)), flags_(std::move(flags)) {}
  ~GatewayProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // Starts it; with `wait_listening`, waits for its "listening" line.
  bool Start(bool wait_listening = true) {
    out_path_ = dir_ + "/gateway.out";
    err_path_ = dir_ + "/gateway.err";
    pid_ = fork();
    if (pid_ == 0) {
      int out = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(err, 2);
      std::vector<char*> argv;
      std::string bin = RKV_GATEWAY_BIN;
      argv.push_back(bin.data());
      for (auto& f : flags_) argv.push_back(f.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      dprintf(2, "execv %s: %s\n", bin.c_str(), std::strerror(errno));
      _exit(127);
    }
    if (!wait_listening) return true;
    for (int i = 0; i < 12000; ++i) {
      std::string out = ReadFile(out_path_);
      size_t at = out.find("rkv-gateway redis listening on ");
      if (at != std::string::npos) {
        size_t end = out.find('\n', at);
        if (end != std::string::npos) {
          address_ = out.substr(at + 31, end - at - 31);
          return true;
        }
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // Waits for the exit; returns the exit code (or 128 + signal).
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void Signal(int sig) { kill(pid_, sig); }

  // Resident memory in KiB (VmRSS).
  long RssKiB() const {
    std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    }
    return -1;
  }

  const std::string& address() const { return address_; }
  std::string Err() const { return ReadFile(err_path_); }

 private:
  static std::string ReadFile(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::string dir_;
  std::vector<std::string> flags_;
  std::string out_path_;
  std::string err_path_;
  std::string address_;
  pid_t pid_ = -1;
};

class GatewayProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    token_file_ = dir_->path() + "/token";
    ::rkv::testing::WriteFile(token_file_, "gateway-token\n");
    server_ = new ServerProcess(dir_->path() + "/data", token_file_, {"--memory=268435456"});
    rkv::Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }

  std::vector<std::string> Flags(std::vector<std::string> extra = {}) const {
    std::vector<std::string> flags = {"--server=" + server_->address(), "--token_file=" + token_file_,
                                      "--transport=" + ::rkv::testing::TestTransport(), "--timeout=30000",
                                      "--redis_listen=127.0.0.1:0", "--memcached_listen=", "--threads=2"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    return flags;
  }

  static TempDir* dir_;
  static std::string token_file_;
  static ServerProcess* server_;
};

TempDir* GatewayProcessTest::dir_ = nullptr;
std::string GatewayProcessTest::token_file_;
ServerProcess* GatewayProcessTest::server_ = nullptr;

TEST_F(GatewayProcessTest, AClientThatNeverReadsCannotGrowTheGatewayAndOthersAreServed) {
  TempDir dir;
  GatewayProcess gateway(dir.path(), Flags({"--output_limit_bytes=1048576"}));
  ASSERT_TRUE(gateway.Start()) << gateway.Err();
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
  EXPECT_EQ(gateway.Wait(), 0) << gateway.Err();
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
  ASSERT_TRUE(gateway.Start()) << gateway.Err();
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
  ASSERT_TRUE(gateway.Start()) << gateway.Err();
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
  std::string err = gateway.Err();
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
  EXPECT_NE(gateway.Err().find("--threads"), std::string::npos) << gateway.Err();
}

TEST_F(GatewayProcessTest, SigtermStopsItCleanly) {
  TempDir dir;
  GatewayProcess gateway(dir.path(), Flags());
  ASSERT_TRUE(gateway.Start()) << gateway.Err();
  int fd = Connect(gateway.address());
  EXPECT_EQ(Call(fd, {"SET", "term:k", "v"}, 5), "+OK\r\n");
  gateway.Signal(SIGTERM);
  EXPECT_EQ(gateway.Wait(), 0) << gateway.Err();
  EXPECT_EQ(ReadBytes(fd, 1), "");
  close(fd);
}

}  // namespace
}  // namespace rkv::gateway
