// The event loop over fake sessions: pipelining across reads, back-pressure
// on a client that never reads, max clients, a session's close, thousands
// of idle connections beside a working one. No timing thresholds: every
// wait is for a condition.
#include "gateway/event_loop.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gateway/listener.h"

namespace rkv::gateway {
namespace {

// Lines in, replies out: "echo X\n" -> "X\n"; "big N\n" -> N bytes of 'b'
// then "\n"; "quit\n" -> "bye\n" and close. Output limit as session.h says.
class LineSession : public Session {
 public:
  ServeResult Serve(std::string_view in, std::string* out, size_t out_limit) override {
    ServeResult r;
    while (r.consumed < in.size() && out->size() < out_limit) {
      size_t nl = in.find('\n', r.consumed);
      if (nl == std::string_view::npos) break;
      std::string_view line = in.substr(r.consumed, nl - r.consumed);
      r.consumed = nl + 1;
      if (line.substr(0, 5) == "echo ") {
        out->append(line.substr(5));
        out->push_back('\n');
      } else if (line.substr(0, 4) == "big ") {
        out->append(std::stoul(std::string(line.substr(4))), 'b');
        out->push_back('\n');
      } else if (line == "quit") {
        out->append("bye\n");
        r.close = true;
        return r;
      }
    }
    return r;
  }
};

// A Round that answers each queued line with itself once executed; one
// per loop thread.
class EchoRound : public Round {
 public:
  bool pending() const override { return !queued_.empty(); }
  void Execute() override {
    done_ = std::move(queued_);
    queued_.clear();
    ++executed_;
  }
  size_t Add(std::string line) {
    queued_.push_back(std::move(line));
    return queued_.size() - 1;
  }
  // Executes so far: a session waits until this passes the count it saw
  // when it queued.
  uint64_t executed() const { return executed_; }
  const std::string& result(size_t i) const { return done_[i]; }

 private:
  std::vector<std::string> queued_;
  std::vector<std::string> done_;
  uint64_t executed_ = 0;
};

// Lines as LineSession's, but "defer X\n" is answered "X\n" through the
// thread's EchoRound, in runs of up to 8 consecutive lines, and "now X\n"
// at once; "quit\n" -> "bye\n" and close. The Session contract of
// session.h for a session with a round.
class DeferringSession : public Session {
 public:
  explicit DeferringSession(EchoRound* round) : round_(round) {}
  ServeResult Serve(std::string_view in, std::string* out, size_t out_limit) override {
    ServeResult r;
    if (count_ > 0) {
      if (round_->executed() == queued_at_) {
        r.deferred = true;
        return r;
      }
      for (size_t i = first_; i < first_ + count_; ++i) out->append(round_->result(i) + "\n");
      count_ = 0;
    }
    while (r.consumed < in.size() && out->size() < out_limit && count_ < 8) {
      size_t nl = in.find('\n', r.consumed);
      if (nl == std::string_view::npos) break;
      std::string_view line = in.substr(r.consumed, nl - r.consumed);
      if (line.substr(0, 6) == "defer ") {
        size_t at = round_->Add(std::string(line.substr(6)));
        if (count_++ == 0) first_ = at;
        r.consumed = nl + 1;
        continue;
      }
      if (count_ > 0) break;  // waits for the run before it
      r.consumed = nl + 1;
      if (line.substr(0, 4) == "now ") {
        out->append(line.substr(4));
        out->push_back('\n');
      } else if (line == "quit") {
        out->append("bye\n");
        r.close = true;
        return r;
      }
    }
    if (count_ > 0) {
      queued_at_ = round_->executed();
      r.deferred = true;
    }
    return r;
  }

 private:
  EchoRound* round_;
  uint64_t queued_at_ = 0;
  size_t first_ = 0;
  size_t count_ = 0;  // lines of the deferred run
};

int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    ASSERT_GT(n, 0) << std::strerror(errno);
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// Reads until `want` bytes arrived or the peer closed.
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

std::string ReadToClose(int fd) {
  std::string got;
  char buf[4096];
  while (true) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

class EventLoopTest : public ::testing::Test {
 protected:
  void StartLoop(LoopOptions options) {
    auto fd = Listen("127.0.0.1:0");
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    listen_fd_ = *fd;
    port_ = BoundPort(listen_fd_);
    ListenerSpec spec;
    spec.protocol = "line";
    spec.fd = listen_fd_;
    spec.make_session = make_session_;
    spec.refusal = "too many\n";
    std::vector<ListenerSpec> specs;
    specs.push_back(std::move(spec));
    auto loop = EventLoop::Start(std::move(specs), options);
    ASSERT_TRUE(loop.ok()) << loop.status().ToString();
    loop_ = std::move(*loop);
  }
  void TearDown() override {
    if (loop_) loop_->Stop();
    if (listen_fd_ >= 0) close(listen_fd_);
  }

  // The rounds of tests with DeferringSessions: outlive the loop, which
  // runs them until it stops.
  std::vector<EchoRound> rounds_ = std::vector<EchoRound>(2);
  std::function<std::unique_ptr<Session>(int)> make_session_ = [](int) {
    return std::make_unique<LineSession>();
  };
  std::unique_ptr<EventLoop> loop_;
  int listen_fd_ = -1;
  int port_ = 0;
};

TEST_F(EventLoopTest, PipelineSplitAcrossWritesIsServedInOrder) {
  StartLoop({});
  int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  std::string requests, expected;
  for (int i = 0; i < 5000; ++i) {
    requests += "echo " + std::to_string(i) + "\n";
    expected += std::to_string(i) + "\n";
  }
  // Sent in uneven pieces, each split inside a line.
  for (size_t pos = 0; pos < requests.size();) {
    size_t n = std::min<size_t>(requests.size() - pos, 1 + (pos * 7919) % 1000);
    SendAll(fd, std::string_view(requests).substr(pos, n));
    pos += n;
  }
  EXPECT_EQ(ReadBytes(fd, expected.size()), expected);
  SendAll(fd, "quit\n");
  EXPECT_EQ(ReadToClose(fd), "bye\n");
  close(fd);
}

TEST_F(EventLoopTest, AClientThatNeverReadsHoldsBoundedOutputAndOthersAreServed) {
  LoopOptions options;
  options.threads = 1;  // the hostile client and the good one share a thread
  options.output_limit_bytes = 256 * 1024;
  StartLoop(options);
  int hostile = Connect(port_);
  ASSERT_GE(hostile, 0);
  fcntl(hostile, F_SETFL, fcntl(hostile, F_GETFL) | O_NONBLOCK);
  // Requests of 64 KiB replies each, 1 MiB of them at a time, until the
  // socket takes no more (the loop stopped reading it) or 256 MiB went:
  // 1.6 TiB of replies if nothing pushed back.
  std::string chunk;
  while (chunk.size() < (1u << 20)) chunk += "big 65536\n";
  const size_t most = size_t{256} << 20;
  size_t sent = 0;
  int stalls = 0;
  while (sent < most && stalls < 3) {
    size_t at = sent % chunk.size();  // the chunk ends with a whole line
    ssize_t n = send(hostile, chunk.data() + at, chunk.size() - at, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      stalls = 0;
      continue;
    }
    ASSERT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << std::strerror(errno);
    pollfd p{hostile, POLLOUT, 0};
    if (poll(&p, 1, 1000) == 0) ++stalls;
  }
  EXPECT_LT(sent, most) << "the loop kept reading a client that never reads";
  // Another client is served meanwhile.
  int good = Connect(port_);
  ASSERT_GE(good, 0);
  SendAll(good, "echo hello\n");
  EXPECT_EQ(ReadBytes(good, 6), "hello\n");
  // One connection held at most the limit plus one reply.
  EXPECT_LE(loop_->Stats().peak_output_bytes, options.output_limit_bytes + 65537);
  close(good);
  close(hostile);
}

TEST_F(EventLoopTest, ClientsBeyondMaxClientsAreRefusedWithTheProtocolsText) {
  LoopOptions options;
  options.max_clients = 2;
  StartLoop(options);
  int a = Connect(port_);
  int b = Connect(port_);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  // Both are served (so both were accepted) before the third comes.
  SendAll(a, "echo a\n");
  SendAll(b, "echo b\n");
  EXPECT_EQ(ReadBytes(a, 2), "a\n");
  EXPECT_EQ(ReadBytes(b, 2), "b\n");
  int c = Connect(port_);
  ASSERT_GE(c, 0);
  EXPECT_EQ(ReadToClose(c), "too many\n");
  close(c);
  close(a);
  // Once one left, a new one is served (wait for the loop to see it).
  std::string got;
  for (int attempt = 0; attempt < 6000 && got != "d\n"; ++attempt) {
    int d = Connect(port_);
    ASSERT_GE(d, 0);
    SendAll(d, "echo d\n");
    got = ReadBytes(d, 2);
    close(d);
    if (got != "d\n") std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(got, "d\n");
  EXPECT_GE(loop_->Stats().refused, 1u);
  close(b);
}

TEST_F(EventLoopTest, TwoThousandIdleConnectionsAndAWorkingOne) {
  rlimit nofile{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &nofile), 0);
  if (nofile.rlim_cur < 4200 && nofile.rlim_max >= 4200) {
    nofile.rlim_cur = std::min<rlim_t>(nofile.rlim_max, 8192);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &nofile), 0);
  }
  ASSERT_GE(nofile.rlim_cur, 4200u) << "the test needs 4,200 descriptors (ulimit -n)";
  StartLoop({});
  std::vector<int> idle;
  for (int i = 0; i < 2000; ++i) {
    int fd = Connect(port_);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    idle.push_back(fd);
  }
  int worker = Connect(port_);
  ASSERT_GE(worker, 0);
  for (int i = 0; i < 100; ++i) {
    SendAll(worker, "echo " + std::to_string(i) + "\n");
    EXPECT_EQ(ReadBytes(worker, std::to_string(i).size() + 1), std::to_string(i) + "\n");
  }
  // Every idle connection is open and served too.
  SendAll(idle.back(), "echo last\n");
  EXPECT_EQ(ReadBytes(idle.back(), 5), "last\n");
  EXPECT_EQ(loop_->Stats().connections, 2001u);
  for (int fd : idle) close(fd);
  close(worker);
}

TEST_F(EventLoopTest, StopClosesConnections) {
  StartLoop({});
  int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  SendAll(fd, "echo x\n");
  EXPECT_EQ(ReadBytes(fd, 2), "x\n");
  loop_->Stop();
  EXPECT_EQ(ReadToClose(fd), "");
  close(fd);
}

TEST_F(EventLoopTest, DeferredRunsOfManyConnectionsAreServedInEachConnectionsOrder) {
  make_session_ = [this](int thread) {
    return std::make_unique<DeferringSession>(&rounds_[static_cast<size_t>(thread)]);
  };
  LoopOptions options;
  options.threads = 2;
  for (EchoRound& round : rounds_) options.rounds.push_back(&round);
  StartLoop(options);
  constexpr int kClients = 16;
  std::vector<int> fds;
  std::vector<std::string> expected(kClients);
  std::vector<std::string> requests(kClients);
  for (int c = 0; c < kClients; ++c) {
    fds.push_back(Connect(port_));
    ASSERT_GE(fds.back(), 0);
    // Runs of deferred lines (some longer than a run may be) between
    // lines answered at once.
    for (int i = 0; i < 400; ++i) {
      std::string word = std::to_string(c) + "." + std::to_string(i);
      requests[c] += (i % 13 == 12 ? "now " : "defer ") + word + "\n";
      expected[c] += word + "\n";
    }
  }
  // All clients' pipelines go out before any reply is read, so that the
  // loop finds many connections ready at once.
  for (int c = 0; c < kClients; ++c) SendAll(fds[c], requests[c]);
  for (int c = 0; c < kClients; ++c) EXPECT_EQ(ReadBytes(fds[c], expected[c].size()), expected[c]) << c;
  for (int fd : fds) {
    SendAll(fd, "defer last\nquit\n");
    EXPECT_EQ(ReadToClose(fd), "last\nbye\n");
    close(fd);
  }
}

TEST_F(EventLoopTest, AConnectionClosedByItsClientStillGetsItsDeferredReplies) {
  make_session_ = [this](int) { return std::make_unique<DeferringSession>(&rounds_[0]); };
  LoopOptions options;
  options.threads = 1;
  options.rounds = {&rounds_[0]};
  StartLoop(options);
  int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  std::string requests, expected;
  for (int i = 0; i < 100; ++i) {
    requests += "defer " + std::to_string(i) + "\n";
    expected += std::to_string(i) + "\n";
  }
  SendAll(fd, requests);
  shutdown(fd, SHUT_WR);
  EXPECT_EQ(ReadToClose(fd), expected);
  close(fd);
}

// Request, reply, request: one client waiting for each reply before it
// sends the next, so between two requests the loop thread has nothing to
// do and either spins or sleeps. Served alike both ways; with spinning off
// no wait ever spins.
TEST_F(EventLoopTest, OneRequestAtATimeIsServedWithSpinningOnAndOff) {
  for (const int64_t spin_us : {int64_t{0}, int64_t{1000}}) {
    SCOPED_TRACE("spin_us " + std::to_string(spin_us));
    LoopOptions options;
    options.threads = 1;
    options.spin_us = spin_us;
    StartLoop(options);
    int fd = Connect(port_);
    ASSERT_GE(fd, 0);
    for (int i = 0; i < 2000; ++i) {
      SendAll(fd, "echo " + std::to_string(i) + "\n");
      const std::string want = std::to_string(i) + "\n";
      ASSERT_EQ(ReadBytes(fd, want.size()), want);
    }
    SendAll(fd, "quit\n");
    EXPECT_EQ(ReadToClose(fd), "bye\n");
    close(fd);
    const LoopStats stats = loop_->Stats();
    // Every request was found by a wait of one kind or the other (a wait
    // may find several, or a hang-up, so no exact count).
    EXPECT_GT(stats.spun_waits + stats.slept_waits, 0u);
    if (spin_us == 0) {
      EXPECT_EQ(stats.spun_waits, 0u);
    }
    loop_->Stop();
    loop_.reset();
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

TEST(EventLoopOptionsTest, SpinIsZeroToOneSecond) {
  for (const int64_t spin_us : {int64_t{-1}, int64_t{1000001}}) {
    LoopOptions options;
    options.spin_us = spin_us;
    auto loop = EventLoop::Start({}, options);
    EXPECT_EQ(loop.status().code(), rkv::StatusCode::kInvalidArgument) << spin_us;
  }
}

TEST(EventLoopOptionsTest, RoundsAreNoneOrOnePerThread) {
  EchoRound round;
  LoopOptions options;
  options.threads = 2;
  options.rounds = {&round};
  auto loop = EventLoop::Start({}, options);
  EXPECT_EQ(loop.status().code(), rkv::StatusCode::kInvalidArgument);
}

TEST(ListenerTest, ErrorsNameTheAddress) {
  auto bad = Listen("nonsense");
  EXPECT_EQ(bad.status().code(), rkv::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("nonsense"), std::string::npos);
  auto first = Listen("127.0.0.1:0");
  ASSERT_TRUE(first.ok());
  std::string taken = "127.0.0.1:" + std::to_string(BoundPort(*first));
  auto second = Listen(taken);
  EXPECT_EQ(second.status().code(), rkv::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(taken), std::string::npos) << second.status().message();
  EXPECT_NE(second.status().message().find("in use"), std::string::npos) << second.status().message();
  close(*first);
}

}  // namespace
}  // namespace rkv::gateway
