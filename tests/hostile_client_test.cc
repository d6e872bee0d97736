// Hostile clients against one rkv-server while a well-behaved client keeps
// writing and reading its keys. Each class of hostile input runs in turn;
// after each, the server must still serve, the good client must have seen
// no error, and every key it wrote must read back its last acknowledged
// value. A table of the classes and their results is printed at the end.
//
// Classes that speak raw tcp frames run over tcp only; with
// $RKV_TEST_TRANSPORT=verbs they are listed as not applicable. The server
// runs with short setup, frame and idle limits so that the slow classes
// end quickly; no assertion depends on timing beyond generous bounds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/connect_handshake.h"
#include "common/connect_proof.h"
#include "common/layout.h"
#include "common/mutex.h"
#include "common/protocol.h"
#include "common/record.h"
#include "common/token.h"
#include "common/transport/factory.h"
#include "common/transport/rejection.h"
#include "common/transport/tcp/tcp_frame.h"
#include "common/transport/transport.h"
#include "common/transport/verbs/verbs_connection_test_peer.h"
#include "rkv/client.h"
#include "tests/server_process.h"
#include "tests/wait_for.h"

namespace rkv::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using transport::Completion;
using transport::LocalBuf;
using transport::RemoteBuf;
namespace tcp = transport::tcp;

constexpr char kToken[] = "hostile-suite-token";
constexpr auto kHang = 60s;  // bounds a hang, never a timing expectation
constexpr uint32_t kMaxConnections = 16;
constexpr int kGoodKeys = 16;

// ---- The well-behaved client.

// Writes and reads its keys in a loop on its own thread; remembers every
// key's last acknowledged value and every error it saw.
class GoodClient {
 public:
  explicit GoodClient(const std::string& address) {
    ClientOptions o;
    o.server = address;
    o.token = kToken;
    o.transport = TestTransport();
    o.timeout = 30s;
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    if (c.ok()) client_ = std::move(*c);
  }
  ~GoodClient() { Stop(); }

  bool ok() const { return client_ != nullptr; }
  void Start() { thread_ = std::thread([this] { Run(); }); }
  void Stop() {
    stop_ = true;
    Resume();
    if (thread_.joinable()) thread_.join();
  }
  // Waits until the loop is between two operations, and holds it there.
  void Pause() {
    MutexLock lock(mu_);
    paused_ = true;
    const auto deadline = Clock::now() + kHang;
    while (!idle_ && Clock::now() < deadline) cv_.WaitUntil(mu_, deadline);
  }
  void Resume() {
    MutexLock lock(mu_);
    paused_ = false;
    cv_.NotifyAll();
  }
  // Errors since the last call, and how many operations succeeded.
  std::vector<std::string> TakeErrors() {
    MutexLock lock(mu_);
    return std::exchange(errors_, {});
  }
  uint64_t ops() const { return ops_.load(); }
  std::map<std::string, std::string> acknowledged() {
    MutexLock lock(mu_);
    return acked_;
  }

 private:
  void Run() {
    for (uint64_t round = 0; !stop_; ++round) {
      {
        MutexLock lock(mu_);
        idle_ = true;
        cv_.NotifyAll();
        while (paused_ && !stop_) cv_.WaitUntil(mu_, Clock::now() + 1s);
        idle_ = false;
      }
      const std::string key = "good/" + std::to_string(round % kGoodKeys);
      const std::string value = "v" + std::to_string(round) + std::string(round % 300, 'x');
      auto put = client_->Put(key, value);
      if (!put.ok()) {
        Note("PUT " + key + ": " + put.status().ToString());
        continue;
      }
      {
        MutexLock lock(mu_);
        acked_[key] = value;
      }
      auto got = client_->Get(key);
      if (!got.ok() || *got != value) {
        Note("GET " + key + ": " + (got.ok() ? "stale value" : got.status().ToString()));
        continue;
      }
      ops_ += 2;
    }
  }
  void Note(std::string e) {
    MutexLock lock(mu_);
    errors_.push_back(std::move(e));
  }

  std::unique_ptr<Client> client_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> ops_{0};
  Mutex mu_;
  CondVar cv_;
  bool paused_ GUARDED_BY(mu_) = false;
  bool idle_ GUARDED_BY(mu_) = false;
  std::vector<std::string> errors_ GUARDED_BY(mu_);
  std::map<std::string, std::string> acked_ GUARDED_BY(mu_);
};

// ---- Raw tcp sockets.

class RawSocket {
 public:
  RawSocket(const std::string& address, const std::string& source = "") {
    const size_t colon = address.rfind(':');
    const std::string host = address.substr(0, colon);
    const uint16_t port = static_cast<uint16_t>(std::stoi(address.substr(colon + 1)));
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{static_cast<time_t>(std::chrono::seconds(kHang).count()), 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (!source.empty()) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      ::inet_pton(AF_INET, source.c_str(), &local.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) error_ = errno;
    }
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    ::inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
    if (error_ == 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) error_ = errno;
  }
  ~RawSocket() { ::close(fd_); }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  bool connected() const { return error_ == 0; }
  std::string error() const { return std::strerror(error_); }
  bool Send(const void* p, size_t n) { return ::send(fd_, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n); }
  bool SendHeader(const tcp::FrameHeader& h) { return Send(&h, sizeof h); }
  // Reads exactly n bytes; false on EOF, error or the hang bound.
  bool Read(void* p, size_t n) {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::recv(fd_, static_cast<char*>(p) + got, n - got, 0);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  }
  // True once the peer closed (EOF or reset) within the hang bound,
  // discarding whatever it sent before.
  bool WaitClosed() {
    char buf[4096];
    const auto deadline = Clock::now() + kHang;
    while (Clock::now() < deadline) {
      const ssize_t r = ::recv(fd_, buf, sizeof buf, 0);
      if (r == 0) return true;
      if (r < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    }
    return false;
  }
  bool ClosedByPeer() {
    char c;
    const ssize_t r = ::recv(fd_, &c, 1, MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

 private:
  int fd_ = -1;
  int error_ = 0;
};

// A client's connect parameters with `token`, as rkv::Client makes them.
protocol::ClientConnectParams Params(const std::string& token) {
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  return protocol::MakeClientParams(id, token);
}

template <typename T>
std::span<const uint8_t> BytesOf(const T& v) {
  return {reinterpret_cast<const uint8_t*>(&v), sizeof v};
}

tcp::FrameHeader Hello(uint32_t payload_len) {
  tcp::FrameHeader h = tcp::MakeHeader(tcp::FrameType::kConnect, 0);
  h.addr = tcp::kHelloMagic;
  h.payload_len = payload_len;
  return h;
}

// A raw tcp socket that completed the setup with the right token, its
// proof answering `nonce` (a challenge of the server's); fills *accept.
// Empty string on success.
std::string RawLogin(RawSocket& raw, const protocol::Nonce& nonce, protocol::AcceptData* accept) {
  if (!raw.connected()) return "connect: " + raw.error();
  const protocol::ConnectRequestData req = protocol::MakeClientRequest(Params(kToken), &nonce);
  if (!raw.SendHeader(Hello(sizeof req)) || !raw.Send(&req, sizeof req)) return "send failed";
  tcp::FrameHeader h;
  if (!raw.Read(&h, sizeof h)) return "no reply to CONNECT";
  if (h.type != static_cast<uint8_t>(tcp::FrameType::kAccept) || h.payload_len < sizeof *accept) {
    return std::string("setup answered with ") + tcp::FrameTypeName(h.type);
  }
  std::vector<uint8_t> payload(h.payload_len);
  if (!raw.Read(payload.data(), payload.size())) return "ACCEPT cut short";
  std::memcpy(accept, payload.data(), sizeof *accept);
  return "";
}


// The value of the metric line `name` (a name with its labels, as GET
// /metrics writes it) of the server whose log is `log`
// (--metrics_listen), or nullopt when it cannot be read.
std::optional<double> ServerMetric(const std::string& log, const std::string& name) {
  const std::string marker = "metrics on http://";
  const size_t start = log.rfind(marker);
  if (start == std::string::npos) return std::nullopt;
  const size_t from = start + marker.size();
  const size_t end = log.find("/metrics", from);
  if (end == std::string::npos) return std::nullopt;
  RawSocket http(log.substr(from, end - from));
  if (!http.connected()) return std::nullopt;
  const std::string get = "GET /metrics HTTP/1.0\r\nHost: rkv\r\nConnection: close\r\n\r\n";
  if (!http.Send(get.data(), get.size())) return std::nullopt;
  std::string body;
  char c;
  while (http.Read(&c, 1)) body.push_back(c);
  const size_t at = body.find("\n" + name + " ");
  if (at == std::string::npos) return std::nullopt;
  return std::strtod(body.c_str() + at + 1 + name.size() + 1, nullptr);
}

// ---- The suite.

class HostileClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token_file_ = dir_.path() + "/token";
    WriteFile(token_file_, std::string(kToken) + "\n");
    server_ = std::make_unique<ServerProcess>(
        dir_.path() + "/data", token_file_,
        std::vector<std::string>{"--max_connections=" + std::to_string(kMaxConnections), "--handshake_timeout_ms=300",
                                 "--frame_timeout_ms=500", "--idle_timeout_s=1", "--memory=160M",
                                 "--max_value_bytes=65536", "--ring_bytes=1M"});
    ASSERT_TRUE(server_->Start().ok()) << server_->Log();
    auto kind = transport::ResolveKind(TestTransport(), nullptr);
    ASSERT_TRUE(kind.ok());
    auto t = transport::CreateTransport(*kind, transport::Options{});
    ASSERT_TRUE(t.ok()) << t.status();
    transport_ = std::move(t).value();
    buffer_.assign(1 << 20, 0);
    auto mr = transport_->Register(buffer_.data(), buffer_.size(), transport::kLocalWrite);
    ASSERT_TRUE(mr.ok()) << mr.status();
    mr_ = std::move(mr).value();
  }

  bool tcp() const { return TestTransport() == "tcp"; }

  // Connects through the transport with `private_data`.
  StatusOr<std::unique_ptr<transport::Connection>> ConnectWith(std::span<const uint8_t> private_data) {
    return transport_->Connect(server_->address(), private_data, std::chrono::milliseconds(30000));
  }
  // A challenge of the server's, asked for with a hello.
  StatusOr<protocol::Nonce> Challenge() {
    const protocol::ConnectRequestData hello = protocol::MakeClientRequest(Params(kToken), nullptr);
    return protocol::RequestChallenge(*transport_, server_->address(), BytesOf(hello),
                                      std::chrono::milliseconds(30000));
  }
  StatusOr<std::unique_ptr<transport::Connection>> Login(protocol::AcceptData* accept) {
    RKV_ASSIGN_OR_RETURN(auto conn, protocol::ConnectAsClient(*transport_, server_->address(), Params(kToken),
                                                              std::chrono::milliseconds(30000)));
    const auto data = conn->peer_private_data();
    if (data.size() < sizeof *accept) return Internal("short accept data");
    std::memcpy(accept, data.data(), sizeof *accept);
    return conn;
  }

  // Collects completions until one with `wr_id` (or the connection fails,
  // or the hang bound).
  std::vector<Completion> WaitFor(transport::Connection& conn, uint64_t wr_id) {
    std::vector<Completion> all;
    const auto deadline = Clock::now() + kHang;
    while (Clock::now() < deadline) {
      Completion c[8];
      auto n = conn.Poll(c, 200ms);
      if (!n.ok()) break;
      all.insert(all.end(), c, c + *n);
      for (size_t i = 0; i < *n; ++i) {
        if (c[i].wr_id == wr_id) return all;
      }
    }
    return all;
  }

  // Sends one request whose record (`record`, may be empty) is written at
  // `ring_offset` of the connection's ring, and waits for the reply.
  // Returns the reply's status code, or the transport's failure.
  StatusOr<StatusCode> Request(transport::Connection& conn, const protocol::AcceptData& a,
                               const protocol::RequestMsg& msg, std::span<const uint8_t> record,
                               uint64_t write_at = 0) {
    RKV_RETURN_IF_ERROR(conn.PostRecv(LocalBuf{mr_.get(), 8192, protocol::kMaxMessageBytes}, 1));
    std::memcpy(buffer_.data() + 4096, &msg, sizeof msg);
    if (!record.empty()) {
      std::memcpy(buffer_.data() + 65536, record.data(), record.size());
      RKV_RETURN_IF_ERROR(conn.PostWriteSend(LocalBuf{mr_.get(), 65536, static_cast<uint32_t>(record.size())},
                                             RemoteBuf{a.ring.addr + write_at, a.ring.rkey},
                                             LocalBuf{mr_.get(), 4096, sizeof msg}, 2));
    } else {
      RKV_RETURN_IF_ERROR(conn.PostSend(LocalBuf{mr_.get(), 4096, sizeof msg}, 2));
    }
    for (const Completion& c : WaitFor(conn, 1)) {
      if (!c.status.ok()) return c.status;
      if (c.wr_id == 1) {
        protocol::ReplyMsg reply;
        std::memcpy(&reply, buffer_.data() + 8192, sizeof reply);
        return static_cast<StatusCode>(reply.status_code);
      }
    }
    return DeadlineExceeded("no reply");
  }

  // A malformed record on its own connection must be refused with an
  // error reply (or the connection dropped), never applied.
  std::string MalformedRecord(const std::function<void(std::vector<uint8_t>&)>& spoil, uint8_t op,
                              const std::string& key, const std::string& value) {
    protocol::AcceptData a{};
    auto conn = Login(&a);
    if (!conn.ok()) return "login: " + conn.status().ToString();
    std::vector<uint8_t> block(layout::BlockBytes(key.size(), value.size()));
    EncodeRecord(block, key, value, 0, op == static_cast<uint8_t>(protocol::Op::kDelete) ? layout::kBlockFlagTombstone : 0);
    spoil(block);
    protocol::RequestMsg msg{};
    msg.op = op;
    msg.length = static_cast<uint32_t>(block.size());
    msg.request_id = 77;
    auto code = Request(**conn, a, msg, block);
    if (code.ok() && *code == StatusCode::kOk) return "a malformed record was applied";
    return "";
  }

  // A READ that must be refused with PERMISSION_DENIED.
  std::string ForbiddenRead(const std::function<RemoteBuf(const protocol::AcceptData&)>& where, uint32_t len) {
    protocol::AcceptData a{};
    auto conn = Login(&a);
    if (!conn.ok()) return "login: " + conn.status().ToString();
    transport::ReadOp op{LocalBuf{mr_.get(), 0, len}, where(a), 5, true};
    if (Status s = (*conn)->PostReads({&op, 1}); !s.ok()) return "";  // refused locally: fine
    for (const Completion& c : WaitFor(**conn, 5)) {
      if (c.wr_id == 5) return c.status.code() == StatusCode::kPermissionDenied ? "" : "READ: " + c.status.ToString();
    }
    return "no completion for the READ";
  }

  // A WRITE (with a SEND) that must be refused with PERMISSION_DENIED.
  std::string ForbiddenWrite(const std::function<RemoteBuf(const protocol::AcceptData&)>& where, uint32_t len) {
    protocol::AcceptData a{};
    auto conn = Login(&a);
    if (!conn.ok()) return "login: " + conn.status().ToString();
    protocol::RequestMsg msg{};
    std::memcpy(buffer_.data() + 4096, &msg, sizeof msg);
    std::memset(buffer_.data(), 0x5a, len);
    if (!(*conn)->PostWriteSend(LocalBuf{mr_.get(), 0, len}, where(a), LocalBuf{mr_.get(), 4096, sizeof msg}, 9).ok()) {
      return "";
    }
    for (const Completion& c : WaitFor(**conn, 9)) {
      if (c.status.code() == StatusCode::kPermissionDenied) return "";
      if (c.wr_id == 9 && c.status.ok()) return "the forbidden WRITE completed";
    }
    return "";  // the connection failed: refused
  }

  // Sends `bytes` on a fresh raw socket (after a login when `login`) and
  // expects the server to close it.
  std::string RawExpectClosed(const std::vector<uint8_t>& bytes, bool login) {
    // The challenge first: the raw socket must send its proof within the
    // server's handshake timeout.
    StatusOr<protocol::Nonce> nonce = login ? Challenge() : StatusOr<protocol::Nonce>(protocol::Nonce{});
    if (!nonce.ok()) return "challenge: " + nonce.status().ToString();
    RawSocket raw(server_->address());
    if (!raw.connected()) return "connect: " + raw.error();
    if (login) {
      protocol::AcceptData a{};
      if (std::string e = RawLogin(raw, *nonce, &a); !e.empty()) return e;
    }
    raw.Send(bytes.data(), bytes.size());
    return raw.WaitClosed() ? "" : "the server kept the socket open";
  }

  static std::vector<uint8_t> Bytes(const tcp::FrameHeader& h, size_t keep = sizeof(tcp::FrameHeader)) {
    const auto* p = reinterpret_cast<const uint8_t*>(&h);
    return std::vector<uint8_t>(p, p + keep);
  }

  // Waits (up to the hang bound) for the server's log to contain `text`.
  bool WaitForLog(const std::string& text) const {
    return static_cast<bool>(::rkv::testing::WaitFor(
        "the server to log \"" + text + "\"",
        [&] {
          std::ifstream in(dir_.path() + "/data.log");
          std::stringstream log;
          log << in.rdbuf();
          return log.str().find(text) != std::string::npos;
        },
        kHang));
  }

  // The server process's resident set, in KiB ("VmRSS" or "VmHWM").
  uint64_t ServerMemoryKb(const char* field) const {
    FILE* f = std::fopen(("/proc/" + std::to_string(server_->pid()) + "/status").c_str(), "r");
    if (f == nullptr) return 0;
    char line[256];
    uint64_t kb = 0;
    const std::string prefix = std::string(field) + ": %lu kB";
    while (std::fgets(line, sizeof line, f) != nullptr) {
      unsigned long v = 0;
      if (std::sscanf(line, prefix.c_str(), &v) == 1) kb = v;
    }
    std::fclose(f);
    return kb;
  }

  TempDir dir_;
  std::string token_file_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<transport::Transport> transport_;
  std::vector<uint8_t> buffer_;
  std::unique_ptr<transport::MemoryRegion> mr_;
  std::string undrained_figure_;
};

TEST_F(HostileClientTest, TheServerAndAGoodClientSurviveEveryClass) {
  GoodClient good(server_->address());
  ASSERT_TRUE(good.ok());
  good.Start();

  struct Class {
    std::string name;
    bool tcp_only;
    std::function<std::string()> run;
  };
  const uint8_t kPut = static_cast<uint8_t>(protocol::Op::kPut);
  const std::vector<Class> classes = {
      {"random bytes before setup", true,
       [&] {
         std::vector<uint8_t> junk(4096);
         std::mt19937 rng(7);
         for (auto& b : junk) b = static_cast<uint8_t>(rng());
         return RawExpectClosed(junk, false);
       }},
      {"truncated handshake, then EOF", true,
       [&] {
         RawSocket raw(server_->address());
         const tcp::FrameHeader h = Hello(sizeof(protocol::ConnectRequestData));
         raw.Send(&h, 20);
         return std::string();  // closed here, half a header in: the server drops it
       }},
      {"absurd handshake length", true, [&] { return RawExpectClosed(Bytes(Hello(0xffffffffu)), false); }},
      {"CONNECT with nonzero op_len", true,
       [&] {
         tcp::FrameHeader h = Hello(0);
         h.op_len = 64;
         return RawExpectClosed(Bytes(h), false);
       }},
      {"wrong token", false,
       [&] {
         auto c = protocol::ConnectAsClient(*transport_, server_->address(), Params("not-the-token"),
                                            std::chrono::milliseconds(30000));
         return c.ok() ? std::string("accepted") : std::string();
       }},
      {"wrong magic and version", false,
       [&] {
         protocol::ClientConnectParams p = Params(kToken);
         p.magic ^= 1;
         const auto timeout = std::chrono::milliseconds(30000);
         if (protocol::ConnectAsClient(*transport_, server_->address(), p, timeout).ok()) {
           return std::string("bad magic accepted");
         }
         p = Params(kToken);
         p.protocol_version += 1;
         if (protocol::ConnectAsClient(*transport_, server_->address(), p, timeout).ok()) {
           return std::string("bad version accepted");
         }
         return std::string();
       }},
      {"truncated connect request", false,
       [&] {
         const protocol::ConnectRequestData req = protocol::MakeClientRequest(Params(kToken), nullptr);
         return ConnectWith({reinterpret_cast<const uint8_t*>(&req), 10}).ok() ? std::string("accepted") : std::string();
       }},
      {"unknown op", false,
       [&] {
         protocol::AcceptData a{};
         auto conn = Login(&a);
         if (!conn.ok()) return "login: " + conn.status().ToString();
         protocol::RequestMsg msg{};
         msg.op = 77;
         msg.length = 64;
         auto code = Request(**conn, a, msg, {});
         return code.ok() && *code == StatusCode::kOk ? std::string("an unknown op succeeded") : std::string();
       }},
      {"ring offsets and lengths out of range", false,
       [&] {
         protocol::AcceptData a{};
         auto conn = Login(&a);
         if (!conn.ok()) return "login: " + conn.status().ToString();
         const std::pair<uint64_t, uint32_t> bad[] = {
             {a.ring.length, 64}, {a.ring.length - 64, 128}, {7, 64}, {0, 0xffffffc0u}, {~uint64_t{0} - 63, 64}};
         for (const auto& [offset, length] : bad) {
           protocol::RequestMsg msg{};
           msg.op = kPut;
           msg.ring_offset = offset;
           msg.length = length;
           msg.request_id = offset;
           auto code = Request(**conn, a, msg, {});
           if (!code.ok()) return std::string();  // dropped: refused too
           if (*code == StatusCode::kOk) return "offset " + std::to_string(offset) + " accepted";
         }
         return std::string();
       }},
      {"record with a bad checksum", false,
       [&] { return MalformedRecord([](std::vector<uint8_t>& b) { b[0] ^= 0xff; }, kPut, "evil", "value"); }},
      {"tombstone flag on a PUT", false,
       [&] {
         return MalformedRecord(
             [](std::vector<uint8_t>& b) {
               layout::BlockHeader h;
               std::memcpy(&h, b.data(), sizeof h);
               h.flags = layout::kBlockFlagTombstone;
               std::memcpy(b.data(), &h, sizeof h);
               ResealRecord(b);
             },
             kPut, "evil", "value");
       }},
      {"nonzero version in a staged record", false,
       [&] {
         return MalformedRecord(
             [](std::vector<uint8_t>& b) {
               layout::BlockHeader h;
               std::memcpy(&h, b.data(), sizeof h);
               h.version = 12345;
               std::memcpy(b.data(), &h, sizeof h);
               ResealRecord(b);
             },
             kPut, "evil", "value");
       }},
      {"oversized key and value", false,
       [&] {
         std::string e = MalformedRecord([](std::vector<uint8_t>&) {}, kPut, std::string(2000, 'k'), "v");
         if (!e.empty()) return e;
         return MalformedRecord([](std::vector<uint8_t>&) {}, kPut, "k", std::string(100000, 'v'));
       }},
      {"SEND larger than a receive buffer", false,
       [&] {
         protocol::AcceptData a{};
         auto conn = Login(&a);
         if (!conn.ok()) return "login: " + conn.status().ToString();
         if (!(*conn)->PostSend(LocalBuf{mr_.get(), 0, 4096}, 3).ok()) return std::string();
         for (const Completion& c : WaitFor(**conn, 3)) {
           if (c.wr_id == 3 && c.status.ok() && tcp()) return std::string("the oversized SEND was taken");
         }
         return std::string();
       }},
      {"READ with another rkey", false,
       [&] { return ForbiddenRead([](const protocol::AcceptData& a) { return RemoteBuf{a.heap.addr, a.heap.rkey + 0x1234}; }, 64); }},
      {"READ outside the heap", false,
       [&] {
         return ForbiddenRead(
             [](const protocol::AcceptData& a) { return RemoteBuf{a.heap.addr + a.heap.length - 32, a.heap.rkey}; }, 64);
       }},
      {"WRITE into the index", false,
       [&] { return ForbiddenWrite([](const protocol::AcceptData& a) { return RemoteBuf{a.index.addr, a.index.rkey}; }, 64); }},
      {"WRITE past the end of its own ring", false,
       [&] {
         return ForbiddenWrite(
             [](const protocol::AcceptData& a) { return RemoteBuf{a.ring.addr + a.ring.length - 64, a.ring.rkey}; }, 128);
       }},
      {"WRITE into another connection's ring", false,
       [&] {
         protocol::AcceptData victim{};
         auto other = Login(&victim);
         if (!other.ok()) return "login: " + other.status().ToString();
         return ForbiddenWrite([&](const protocol::AcceptData&) { return RemoteBuf{victim.ring.addr, victim.ring.rkey}; }, 64);
       }},
      {"replayed request id", false,
       [&] {
         protocol::AcceptData a{};
         auto conn = Login(&a);
         if (!conn.ok()) return "login: " + conn.status().ToString();
         std::vector<uint8_t> block(layout::BlockBytes(6, 5));
         EncodeRecord(block, "replay", "value", 0, 0);
         protocol::RequestMsg msg{};
         msg.op = kPut;
         msg.length = static_cast<uint32_t>(block.size());
         msg.request_id = 4242;
         for (int i = 0; i < 3; ++i) {
           auto code = Request(**conn, a, msg, block);
           if (!code.ok()) return "replay " + std::to_string(i) + ": " + code.status().ToString();
         }
         return std::string();  // the reply's content is another suite's to check
       }},
      {"slowloris before setup", true,
       [&] {
         RawSocket raw(server_->address());
         const tcp::FrameHeader h = Hello(0);
         const auto* p = reinterpret_cast<const uint8_t*>(&h);
         const auto deadline = Clock::now() + kHang;
         for (size_t i = 0; i < sizeof h && !raw.ClosedByPeer() && Clock::now() < deadline; i = (i + 1) % sizeof h) {
           raw.Send(p + i, 1);
           std::this_thread::sleep_for(50ms);  // the attack: one byte at a time, slowly
         }
         return raw.ClosedByPeer() ? std::string() : std::string("never closed");
       }},
      {"slowloris mid-frame after setup", true,
       [&] {
         tcp::FrameHeader send = tcp::MakeHeader(tcp::FrameType::kSend, 1);
         send.payload_len = sizeof(protocol::RequestMsg);
         std::vector<uint8_t> bytes = Bytes(send);
         bytes.resize(bytes.size() + 5);
         return RawExpectClosed(bytes, true);
       }},
      {"unknown frame type after setup", true,
       [&] { return RawExpectClosed(Bytes(tcp::MakeHeader(static_cast<tcp::FrameType>(99), 1)), true); }},
      {"pre-auth flood of 300 idle sockets, reopened", true,
       [&] {
         std::vector<std::unique_ptr<RawSocket>> flood;
         for (int i = 0; i < 300; ++i) {
           flood.push_back(std::make_unique<RawSocket>(server_->address(), "127.0.0." + std::to_string(2 + i % 10)));
         }
         // Until the server has closed as many sockets as the attacker
         // first opened: every one is reopened at once.
         size_t reopened = 0;
         const auto deadline = Clock::now() + kHang;
         for (int round = 0; reopened < flood.size() && Clock::now() < deadline; ++round) {
           ClientOptions o;
           o.server = server_->address();
           o.token = kToken;
           o.transport = TestTransport();
           o.timeout = 30s;
           auto fresh = Client::Connect(o);
           if (!fresh.ok()) return "a new client was locked out: " + fresh.status().ToString();
           auto put = (*fresh)->Put("flood/" + std::to_string(round % 8), "in");
           if (!put.ok()) return "a new client's PUT failed: " + put.status().ToString();
           for (auto& s : flood) {
             if (!s->ClosedByPeer()) continue;
             s = std::make_unique<RawSocket>(server_->address(), "127.0.0." + std::to_string(2 + reopened % 3));
             ++reopened;
           }
         }
         return reopened >= flood.size() ? std::string() : std::string("the server did not close idle sockets");
       }},
      {"authenticated flood beyond max_connections", false,
       [&] {
         std::vector<std::unique_ptr<transport::Connection>> held;
         int refused = 0;
         for (uint32_t i = 0; i < kMaxConnections + 4; ++i) {
           protocol::AcceptData a{};
           auto conn = Login(&a);
           if (conn.ok()) {
             held.push_back(std::move(*conn));
           } else if (conn.status().message().find("too many connections") != std::string::npos) {
             ++refused;
           } else {
             return "unexpected refusal: " + conn.status().ToString();
           }
         }
         if (refused == 0) return std::string("no connection was refused beyond the limit");
         return std::string();
       }},
      {"8 pipelined 64 MiB READs never drained", true,
       [&] {
         StatusOr<protocol::Nonce> nonce = Challenge();
         if (!nonce.ok()) return "challenge: " + nonce.status().ToString();
         RawSocket raw(server_->address());
         protocol::AcceptData a{};
         if (std::string e = RawLogin(raw, *nonce, &a); !e.empty()) return e;
         // Peak from here on (Linux: "5" > clear_refs resets VmHWM).
         const bool reset = std::system(("echo 5 > /proc/" + std::to_string(server_->pid()) + "/clear_refs").c_str()) == 0;
         const uint64_t before = ServerMemoryKb("VmRSS");
         for (uint64_t seq = 1; seq <= 8; ++seq) {
           tcp::FrameHeader read = tcp::MakeHeader(tcp::FrameType::kReadReq, seq);
           read.addr = a.heap.addr;
           read.rkey = a.heap.rkey;
           read.op_len = tcp::kMaxOpBytes;
           raw.SendHeader(read);
         }
         // Nothing is read here, so the close cannot be seen on the socket
         // (its FIN waits behind the unread bytes): the server's log says it.
         if (!WaitForLog("bytes of responses waiting for it")) return std::string("never closed");
         undrained_figure_ = "server VmRSS " + std::to_string(before >> 10) + " MiB before, peak " +
                             std::to_string(ServerMemoryKb("VmHWM") >> 10) + " MiB " +
                             (reset ? "while they waited" : "since start (peak not resettable)");
         return std::string();
       }},
      {"idle pooled connection closed by the server", true,
       [&] {
         good.Pause();  // longer than --idle_timeout_s: the server closes its connection
         std::this_thread::sleep_for(2500ms);
         good.Resume();
         return std::string();  // the checks below show it reconnected without an error
       }},
  };

  std::vector<std::pair<std::string, std::string>> table;
  int failed = 0;
  for (const Class& c : classes) {
    if (c.tcp_only && !tcp()) {
      table.emplace_back(c.name, "not applicable on verbs");
      continue;
    }
    std::string result = c.run();
    // The server is alive and serves a new client.
    if (result.empty() && ::kill(server_->pid(), 0) != 0) result = "the server died";
    // The good client made progress without an error.
    const uint64_t ops = good.ops();
    if (result.empty() &&
        !::rkv::testing::WaitFor("the good client's progress", [&] { return good.ops() >= ops + 4; }, kHang)) {
      result = "the good client made no progress";
    }
    for (const std::string& e : good.TakeErrors()) {
      if (result.empty()) result = "good client error: " + e;
    }
    // Its data is intact, as a fresh client reads it.
    if (result.empty()) {
      good.Pause();
      ClientOptions o;
      o.server = server_->address();
      o.token = kToken;
      o.transport = TestTransport();
      o.timeout = 30s;
      auto probe = Client::Connect(o);
      if (!probe.ok()) {
        result = "a new client cannot connect: " + probe.status().ToString();
      } else {
        for (const auto& [key, value] : good.acknowledged()) {
          auto got = (*probe)->Get(key);
          if (!got.ok() || *got != value) {
            result = "key " + key + " lost its last value: " + (got.ok() ? "stale" : got.status().ToString());
            break;
          }
        }
      }
      good.Resume();
    }
    if (!result.empty()) ++failed;
    table.emplace_back(c.name, result.empty() ? "ok" : "FAILED: " + result);
  }
  good.Stop();

  std::printf("\n%-48s %s\n", "hostile class", "result");
  for (const auto& [name, result] : table) std::printf("%-48s %s\n", name.c_str(), result.c_str());
  std::printf("%zu classes, %d failed; good client: %lu operations\n", table.size(), failed,
              static_cast<unsigned long>(good.ops()));
  if (!undrained_figure_.empty()) std::printf("undrained READs: %s\n", undrained_figure_.c_str());
  EXPECT_GE(table.size(), 20u);
  EXPECT_EQ(failed, 0) << server_->Log().substr(0, 20000);
}

// An observer of the network who captured a client's whole handshake
// cannot connect with it: the proof's bytes (built by the code rkv::Client
// uses, for a challenge of this server's) are accepted once, and the same
// bytes sent again are refused, as is the captured hello's challenge
// answered with any other field changed.
TEST_F(HostileClientTest, ACapturedProofIsRefusedWhenReplayed) {
  const protocol::ClientConnectParams params = Params(kToken);
  const protocol::ConnectRequestData hello = protocol::MakeClientRequest(params, nullptr);
  // The hello carries nothing secret: no digest, no MAC.
  EXPECT_TRUE(protocol::IsHelloNonce(hello.nonce));
  StatusOr<protocol::Nonce> nonce =
      protocol::RequestChallenge(*transport_, server_->address(), BytesOf(hello), std::chrono::milliseconds(30000));
  ASSERT_TRUE(nonce.ok()) << nonce.status();
  const protocol::ConnectRequestData proof = protocol::MakeClientRequest(params, &*nonce);
  const std::vector<uint8_t> captured(BytesOf(proof).begin(), BytesOf(proof).end());
  // The digest is nowhere in what was sent.
  const Sha256Digest digest = TokenDigest(kToken);
  EXPECT_EQ(std::search(captured.begin(), captured.end(), digest.begin(), digest.begin() + 8), captured.end());

  auto first = ConnectWith(captured);
  ASSERT_TRUE(first.ok()) << first.status();
  (*first)->Disconnect();

  auto replayed = ConnectWith(captured);
  ASSERT_FALSE(replayed.ok()) << "a replayed proof was accepted";
  EXPECT_EQ(replayed.status().code(), StatusCode::kPermissionDenied) << replayed.status();
  EXPECT_NE(replayed.status().message().find("used before"), std::string::npos) << replayed.status();
  // Replayed again while the first connection is gone, and again later:
  // still refused.
  EXPECT_FALSE(ConnectWith(captured).ok());

  // With a fresh challenge, the captured MAC does not fit: the observer
  // cannot make a proof of its own without the token's digest.
  StatusOr<protocol::Nonce> fresh =
      protocol::RequestChallenge(*transport_, server_->address(), BytesOf(hello), std::chrono::milliseconds(30000));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  protocol::ConnectRequestData reused = proof;
  std::memcpy(reused.nonce, fresh->data(), fresh->size());
  auto refit = ConnectWith(BytesOf(reused));
  ASSERT_FALSE(refit.ok());
  EXPECT_NE(refit.status().message().find("invalid token"), std::string::npos) << refit.status();
  // Nor may it change a field of a proof it has not yet seen used (another
  // client id, say).
  protocol::ConnectRequestData other_id = protocol::MakeClientRequest(params, &*fresh);
  other_id.client_id ^= 1;
  auto changed = ConnectWith(BytesOf(other_id));
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(changed.status().message().find("invalid token"), std::string::npos) << changed.status();
  // The server still serves the real client.
  protocol::AcceptData a{};
  auto good = Login(&a);
  EXPECT_TRUE(good.ok()) << good.status();
}

// A proof made for one server's challenge is refused by another server
// that holds the same token: each server has its own secret, so the
// challenge is not its own.
TEST_F(HostileClientTest, AProofForOneServerIsRefusedByAnother) {
  ServerProcess other(dir_.path() + "/data-b", token_file_, std::vector<std::string>{"--memory=160M"});
  ASSERT_TRUE(other.Start().ok()) << other.Log();
  const protocol::ClientConnectParams params = Params(kToken);
  const protocol::ConnectRequestData hello = protocol::MakeClientRequest(params, nullptr);
  StatusOr<protocol::Nonce> nonce =
      protocol::RequestChallenge(*transport_, server_->address(), BytesOf(hello), std::chrono::milliseconds(30000));
  ASSERT_TRUE(nonce.ok()) << nonce.status();
  const protocol::ConnectRequestData proof = protocol::MakeClientRequest(params, &*nonce);

  auto at_b = transport_->Connect(other.address(), BytesOf(proof), std::chrono::milliseconds(30000));
  ASSERT_FALSE(at_b.ok()) << "server B accepted a proof made for server A";
  EXPECT_EQ(at_b.status().code(), StatusCode::kPermissionDenied) << at_b.status();
  EXPECT_NE(at_b.status().message().find("not this server's"), std::string::npos) << at_b.status();
  // The same proof is good where it was meant to go.
  auto at_a = ConnectWith(BytesOf(proof));
  EXPECT_TRUE(at_a.ok()) << at_a.status();
  // And B serves a client that asks it for its own challenge.
  auto own = protocol::ConnectAsClient(*transport_, other.address(), params, std::chrono::milliseconds(30000));
  EXPECT_TRUE(own.ok()) << own.status();
}

// A flood of 2,000 connection requests with bad tokens (proofs made with
// another token for a challenge that is not the server's) while a good
// client works: every request is refused before the server makes
// anything for it (the listener's screen), the good client sees no error
// and makes progress (the flood goes on past 2,000 until it has, so that
// a busy machine that runs the flood before the client's thread does not
// decide the result), and a new good client connects during the flood. On tcp the flood comes
// from another source address (127.0.0.2) than the good clients, so the
// per-source refusal limit keeps its cost to one counter per request and
// never touches them; on verbs (the guest's one rxe address for both) a
// good client refused for its source's rate would retry, and says so.
TEST_F(HostileClientTest, AFloodOfBadTokenConnectsDoesNotKeepAGoodClientOut) {
  GoodClient good(server_->address());
  ASSERT_TRUE(good.ok());
  good.Start();
  constexpr int kFlood = 2000;
  constexpr int kFlooders = 4;
  std::atomic<int> next{0};
  std::atomic<int> sent{0};
  std::atomic<int> refused{0};
  std::atomic<int> source_limited{0};
  std::atomic<int> other{0};
  Mutex odd_mu;
  std::string odd;
  const auto note = [&](const std::string& what) {
    ++other;
    MutexLock lock(odd_mu);
    if (odd.size() < 2000) odd += what + "\n";
  };
  const uint64_t ops_before = good.ops();
  const auto flood_limit = Clock::now() + kHang;
  const auto flood = [&] {
    std::mt19937_64 random(std::random_device{}());
    while (next.fetch_add(1) < kFlood || (good.ops() == ops_before && Clock::now() < flood_limit)) {
      ++sent;
      protocol::Nonce junk;
      for (uint8_t& b : junk) b = static_cast<uint8_t>(random());
      const protocol::ConnectRequestData bad = protocol::MakeClientRequest(Params("not-the-token"), &junk);
      transport::Rejection why{StatusCode::kOk, "", {}};
      if (tcp()) {
        RawSocket raw(server_->address(), "127.0.0.2");
        if (!raw.connected()) {
          note("connect: " + raw.error());
          continue;
        }
        if (!raw.SendHeader(Hello(sizeof bad)) || !raw.Send(&bad, sizeof bad)) {
          note("send failed");
          continue;
        }
        tcp::FrameHeader h;
        if (!raw.Read(&h, sizeof h) || h.type != static_cast<uint8_t>(tcp::FrameType::kReject) ||
            h.payload_len > 4096) {
          note("no REJECT frame");
          continue;
        }
        std::vector<uint8_t> payload(h.payload_len);
        if (!raw.Read(payload.data(), payload.size())) {
          note("REJECT cut short");
          continue;
        }
        why = transport::DecodeRejection(payload);
      } else {
        auto conn = transport_->Connect(server_->address(), BytesOf(bad), std::chrono::milliseconds(30000), &why);
        if (conn.ok()) {
          note("a bad proof was accepted");
          continue;
        }
      }
      if (why.code == StatusCode::kUnauthenticated) {
        ++refused;
      } else if (why.code == StatusCode::kUnavailable) {
        ++source_limited;
      } else {
        note("refused with " + std::string(StatusCodeName(why.code)) + ": " + why.text);
      }
    }
  };
  std::vector<std::thread> flooders;
  for (int i = 0; i < kFlooders; ++i) flooders.emplace_back(flood);
  // A new good client, in the middle of the flood.
  while (next.load() < kFlood / 4) std::this_thread::sleep_for(1ms);
  int retries = 0;
  std::unique_ptr<Client> late;
  const auto give_up = Clock::now() + kHang;
  while (late == nullptr && Clock::now() < give_up) {
    ClientOptions o;
    o.server = server_->address();
    o.token = kToken;
    o.transport = TestTransport();
    o.timeout = 30s;
    auto c = Client::Connect(o);
    if (c.ok()) {
      late = std::move(*c);
    } else {
      ASSERT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status();
      ++retries;
      std::this_thread::sleep_for(100ms);
    }
  }
  ASSERT_NE(late, nullptr);
  EXPECT_TRUE(late->Put("late/key", "during the flood").ok());
  for (std::thread& t : flooders) t.join();
  const uint64_t ops_during = good.ops() - ops_before;
  auto got = late->Get("late/key");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "during the flood");
  good.Stop();
  EXPECT_EQ(good.TakeErrors(), std::vector<std::string>{});
  EXPECT_GT(ops_during, 0u) << "the good client made no progress during the flood";
  EXPECT_EQ(other.load(), 0) << odd;
  EXPECT_GE(sent.load(), kFlood);
  EXPECT_EQ(refused.load() + source_limited.load(), sent.load());
  if (tcp()) {
    // Another source's flood cannot limit this one.
    EXPECT_EQ(retries, 0);
  }
  std::printf("flood of %d bad-token connects: %d refused by the screen, %d for their source's rate; the good "
              "client made %lu operations meanwhile; a new client connected after %d retries\n",
              sent.load(), refused.load(), source_limited.load(), static_cast<unsigned long>(ops_during), retries);
}

// A peer that vanishes without a disconnect (tcp: a socket that logged in
// and then answers nothing; verbs: a queue pair moved to RESET with no
// disconnect, which answers nothing as a destroyed one would) is released
// within --probe_idle_ms + --probe_timeout_ms (and a polling round): the
// server's connections gauge drops back and it counts one connection
// released dead. A live idle client is probed too, answers, and stays.
TEST_F(HostileClientTest, APeerThatVanishesIsReleasedWithinTheProbeBound) {
  const int idle_ms = SlowCpuMs(500);
  const int timeout_ms = SlowCpuMs(1500);
  ServerProcess probing(dir_.path() + "/data-probing", token_file_,
                        std::vector<std::string>{"--memory=160M", "--ring_bytes=1M", "--max_value_bytes=65536",
                                                 "--idle_timeout_s=0", "--probe_idle_ms=" + std::to_string(idle_ms),
                                                 "--probe_timeout_ms=" + std::to_string(timeout_ms),
                                                 "--metrics_listen=" + TestHost() + ":0"});
  ASSERT_TRUE(probing.Start().ok()) << probing.Log();
  const auto metric = [&](const std::string& name) { return ServerMetric(probing.Log(), name); };
  const auto wait_for_connections = [&](double n) {
    return static_cast<bool>(::rkv::testing::WaitFor(
        "the server to hold " + std::to_string(n) + " connections",
        [&] { return metric("rkv_server_connections") == std::optional<double>(n); }, kHang));
  };
  ASSERT_TRUE(wait_for_connections(0)) << probing.Log();

  // A live client that stays idle: probed, answers, kept.
  ClientOptions o;
  o.server = probing.address();
  o.token = kToken;
  o.transport = TestTransport();
  o.timeout = 30s;
  auto idle_client = Client::Connect(o);
  ASSERT_TRUE(idle_client.ok()) << idle_client.status();
  ASSERT_TRUE((*idle_client)->Put("idle/key", "v").ok());
  ASSERT_TRUE(wait_for_connections(1)) << probing.Log();

  // The peer that vanishes.
  std::unique_ptr<RawSocket> raw;
  std::unique_ptr<transport::Connection> conn;
  if (tcp()) {
    const protocol::ConnectRequestData hello = protocol::MakeClientRequest(Params(kToken), nullptr);
    StatusOr<protocol::Nonce> nonce = protocol::RequestChallenge(*transport_, probing.address(), BytesOf(hello),
                                                                 std::chrono::milliseconds(30000));
    ASSERT_TRUE(nonce.ok()) << nonce.status();
    raw = std::make_unique<RawSocket>(probing.address());
    protocol::AcceptData a{};
    ASSERT_EQ(RawLogin(*raw, *nonce, &a), "");
  } else {
    auto c = protocol::ConnectAsClient(*transport_, probing.address(), Params(kToken),
                                       std::chrono::milliseconds(30000));
    ASSERT_TRUE(c.ok()) << c.status();
    conn = std::move(*c);
  }
  ASSERT_TRUE(wait_for_connections(2)) << probing.Log();
  const auto vanished = Clock::now();
  if (!tcp()) {
    const Status s = transport::verbs::VerbsConnectionTestPeer::Vanish(*conn);
    ASSERT_TRUE(s.ok()) << s;
  }
  ASSERT_TRUE(wait_for_connections(1)) << probing.Log();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - vanished);
  // The bound: silent for idle_ms, then the probe's timeout, a sweep
  // (a quarter of the shorter, at most a second) and the scrape's period.
  const auto bound = std::chrono::milliseconds(idle_ms + timeout_ms + idle_ms / 4 + SlowCpuMs(2000));
  EXPECT_LE(took, bound) << "released after " << took.count() << " ms";
  EXPECT_EQ(metric("rkv_server_connections_released_dead_total"), std::optional<double>(1)) << probing.Log();
  std::printf("a vanished %s peer was released %ld ms after it vanished (bound %ld ms)\n", tcp() ? "tcp" : "verbs",
              static_cast<long>(took.count()), static_cast<long>(bound.count()));

  // The idle live client was probed (more than once by now) and kept.
  auto read = (*idle_client)->Get("idle/key");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "v");
  EXPECT_TRUE((*idle_client)->Put("idle/key", "w").ok());
  EXPECT_EQ(metric("rkv_server_connections"), std::optional<double>(1)) << probing.Log();
  EXPECT_EQ(metric("rkv_server_connections_released_dead_total"), std::optional<double>(1));
}

}  // namespace
}  // namespace rkv::testing
