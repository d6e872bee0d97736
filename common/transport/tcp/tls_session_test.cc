// TLS on the tcp data plane (tls_session.h): what a user relies on beyond
// transport.h's promises, which the conformance suites check over TLS too
// (their "tls" instance). Bytes on the wire are not the plaintext; a
// client that does not trust the server's certificate, or whose dialled
// address the certificate does not name, is refused with a clear error;
// a plain client of a TLS server and a TLS client of a plain server each
// learn what is wrong; bad files are named; a rotated certificate is used
// by the next connections without a restart.
#include "common/transport/tcp/tls_session.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/factory.h"
#include "common/transport/transport.h"
#include "common/transport/transport_test_util.h"
#include "tests/test_pki.h"

namespace rkv::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::Buffer;
using testing::kWait;
using testing::MakeBuffer;
using testing::PollOne;

// Forwards one TCP connection to `target` and keeps every byte that
// passed, as someone on the network path would see them.
class RecordingProxy {
 public:
  explicit RecordingProxy(uint16_t target_port) : target_port_(target_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0) << std::strerror(errno);
    EXPECT_EQ(::listen(listen_fd_, 4), 0);
    socklen_t len = sizeof sa;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~RecordingProxy() {
    stop_.store(true);
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  void Run() {
    pollfd lp{listen_fd_, POLLIN, 0};
    while (!stop_.load() && ::poll(&lp, 1, 50) == 0) {
    }
    if (stop_.load()) return;
    const int a = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (a < 0) return;
    const int b = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(target_port_);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(b, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
      pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      char buf[65536];
      while (!stop_.load()) {
        if (::poll(fds, 2, 50) <= 0) continue;
        bool closed = false;
        for (int i = 0; i < 2; ++i) {
          if (fds[i].revents == 0) continue;
          const ssize_t r = ::recv(fds[i].fd, buf, sizeof buf, 0);
          if (r <= 0) {
            closed = true;
            break;
          }
          {
            std::lock_guard<std::mutex> lock(mu_);
            seen_.append(buf, static_cast<size_t>(r));
          }
          ::send(fds[1 - i].fd, buf, static_cast<size_t>(r), MSG_NOSIGNAL);
        }
        if (closed) break;
      }
    }
    ::close(a);
    ::close(b);
  }

  const uint16_t target_port_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string seen_;
  std::thread thread_;
};

uint16_t PortOf(const std::string& address) {
  return static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "rkv-tls-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    auto ca = rkv::testing::MakeTestCa(dir_, "one");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *ca;
    auto cert = rkv::testing::MakeTestCert(ca_, dir_, "server");
    ASSERT_TRUE(cert.ok()) << cert.status();
    cert_ = *cert;
    auto other_ca = rkv::testing::MakeTestCa(dir_, "two");
    ASSERT_TRUE(other_ca.ok()) << other_ca.status();
    other_ca_ = *other_ca;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  Options ServerOptions() const {
    Options o;
    o.tls = TcpTlsFiles{cert_.cert, cert_.key, ca_.cert};
    return o;
  }
  Options ClientOptions(const std::string& ca) const {
    Options o;
    o.tls.ca_file = ca;
    return o;
  }
  std::unique_ptr<Transport> Make(const Options& o) {
    StatusOr<std::unique_ptr<Transport>> t = CreateTransport(Kind::kTcp, o);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }

  // Connects `client` to `address` while the listener takes the request;
  // the client's result (and the server's side, accepted, in *server).
  StatusOr<std::unique_ptr<Connection>> ConnectThrough(Transport& client, Listener& listener,
                                                       const std::string& address,
                                                       std::unique_ptr<Connection>* server) {
    auto connecting = std::async(std::launch::async, [&] { return client.Connect(address, {}, 10s); });
    const auto deadline = Clock::now() + kWait;
    while (connecting.wait_for(0ms) != std::future_status::ready && Clock::now() < deadline) {
      StatusOr<std::unique_ptr<Connection>> next = listener.Next(20ms);
      if (next.ok() && *next != nullptr) {
        EXPECT_TRUE((*next)->Accept({}).ok());
        if (server != nullptr) *server = std::move(*next);
      }
    }
    return connecting.get();
  }

  std::string dir_;
  rkv::testing::TestCa ca_;
  rkv::testing::TestCert cert_;
  rkv::testing::TestCa other_ca_;
};

TEST_F(TlsTest, ReadsCrossTheWireEncryptedAndArriveWhole) {
  auto server = Make(ServerOptions());
  auto client = Make(ClientOptions(ca_.cert));
  ASSERT_TRUE(server && client);
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status();
  RecordingProxy proxy(PortOf((*listener)->address()));

  // 256 KiB of a text anyone would recognize, read in one READ (several
  // TLS records, several of the transport's chunks).
  std::string secret;
  while (secret.size() < (256u << 10)) secret += "rkv-plaintext-" + std::to_string(secret.size()) + ";";
  secret.resize(256u << 10);
  Buffer table = MakeBuffer(*server, secret.size(), kRemoteRead);
  std::memcpy(table.bytes.data(), secret.data(), secret.size());

  std::unique_ptr<Connection> server_side;
  // The certificate names 127.0.0.1, which the proxy's address is too.
  auto conn = ConnectThrough(*client, **listener, proxy.address(), &server_side);
  ASSERT_TRUE(conn.ok()) << conn.status();
  Buffer local = MakeBuffer(*client, secret.size(), kLocalWrite);
  ReadOp op{local.At(0, static_cast<uint32_t>(secret.size())), table.Remote(0), 7, true};
  ASSERT_TRUE((*conn)->PostReads({&op, 1}).ok());
  const Completion done = PollOne(**conn);
  ASSERT_TRUE(done.status.ok()) << done.status;
  EXPECT_EQ(std::memcmp(local.bytes.data(), secret.data(), secret.size()), 0);

  const std::string wire = proxy.seen();
  EXPECT_GT(wire.size(), secret.size()) << "the READ's bytes passed the proxy";
  EXPECT_EQ(wire.find("rkv-plaintext-"), std::string::npos) << "plaintext on the wire";
  // The transport's frames are not visible either: no frame magic "RK"
  // followed by a CONNECT frame's hello.
  EXPECT_EQ(wire.find("RKVTCP01"), std::string::npos) << "the plain hello on the wire";
}

TEST_F(TlsTest, AServerTheClientsCaDidNotSignIsRefused) {
  auto server = Make(ServerOptions());
  auto client = Make(ClientOptions(other_ca_.cert));
  ASSERT_TRUE(server && client);
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status();
  auto conn = ConnectThrough(*client, **listener, (*listener)->address(), nullptr);
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(conn.status().message().find("certificate does not verify"), std::string::npos) << conn.status();
}

TEST_F(TlsTest, ACertificateThatDoesNotNameTheDialledAddressIsRefused) {
  auto server = Make(ServerOptions());
  auto client = Make(ClientOptions(ca_.cert));
  ASSERT_TRUE(server && client);
  // The certificate names 127.0.0.1 and localhost; 127.0.0.2 is loopback
  // too, and not in it.
  auto listener = server->Listen("127.0.0.2:0");
  ASSERT_TRUE(listener.ok()) << listener.status();
  auto conn = ConnectThrough(*client, **listener, (*listener)->address(), nullptr);
  ASSERT_FALSE(conn.ok());
  EXPECT_NE(conn.status().message().find("certificate does not verify"), std::string::npos) << conn.status();
  EXPECT_NE(conn.status().message().find("mismatch"), std::string::npos) << conn.status();
}

TEST_F(TlsTest, APlainClientOfATlsServerIsToldWhy) {
  auto server = Make(ServerOptions());
  auto client = Make(Options{});
  ASSERT_TRUE(server && client);
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status();
  auto conn = ConnectThrough(*client, **listener, (*listener)->address(), nullptr);
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), StatusCode::kPermissionDenied) << conn.status();
  EXPECT_NE(conn.status().message().find("takes TLS only: connect with data_plane_tls"), std::string::npos)
      << conn.status();
  EXPECT_EQ((*listener)->counters().created, 0u) << "nothing was made for the refused request";
}

TEST_F(TlsTest, ATlsClientOfAPlainServerIsToldWhy) {
  auto server = Make(Options{});
  auto client = Make(ClientOptions(ca_.cert));
  ASSERT_TRUE(server && client);
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status();
  auto conn = ConnectThrough(*client, **listener, (*listener)->address(), nullptr);
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), StatusCode::kUnavailable) << conn.status();
  EXPECT_NE(conn.status().message().find("does it take TLS on its data plane"), std::string::npos)
      << conn.status();
}

TEST_F(TlsTest, BadFilesAreNamedWhenTheTransportIsMade) {
  Options o;
  o.tls = TcpTlsFiles{dir_ + "/missing.crt", cert_.key, ca_.cert};
  StatusOr<std::unique_ptr<Transport>> t = CreateTransport(Kind::kTcp, o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("missing.crt"), std::string::npos) << t.status();

  // A key that is not the certificate's.
  auto other = rkv::testing::MakeTestCert(ca_, dir_, "other");
  ASSERT_TRUE(other.ok()) << other.status();
  o.tls = TcpTlsFiles{cert_.cert, other->key, ca_.cert};
  t = CreateTransport(Kind::kTcp, o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("matches the certificate"), std::string::npos) << t.status();

  // A certificate without its key.
  o.tls = TcpTlsFiles{cert_.cert, "", ca_.cert};
  t = CreateTransport(Kind::kTcp, o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);

  // A CA bundle that holds no certificate.
  ASSERT_TRUE(rkv::testing::ReplaceFile(dir_ + "/empty.pem", "not a certificate\n").ok());
  o.tls = TcpTlsFiles{"", "", dir_ + "/empty.pem"};
  t = CreateTransport(Kind::kTcp, o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("empty.pem"), std::string::npos) << t.status();

  // verbs has no TLS: refused before any device is looked for.
  o.tls = TcpTlsFiles{"", "", ca_.cert};
  t = CreateTransport(Kind::kVerbs, o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(TlsTest, ARotatedCertificateServesTheNextConnectionsWithoutARestart) {
  // The server's files are copies that the test replaces, as an operator
  // would, by a rename.
  const std::string crt = dir_ + "/live.crt";
  const std::string key = dir_ + "/live.key";
  ASSERT_TRUE(rkv::testing::ReplaceFile(crt, rkv::testing::ReadTestFile(cert_.cert)).ok());
  ASSERT_TRUE(rkv::testing::ReplaceFile(key, rkv::testing::ReadTestFile(cert_.key)).ok());
  Options so;
  so.tls = TcpTlsFiles{crt, key, ""};
  auto server = Make(so);
  auto old_client = Make(ClientOptions(ca_.cert));
  auto new_client = Make(ClientOptions(other_ca_.cert));
  ASSERT_TRUE(server && old_client && new_client);
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status();

  std::unique_ptr<Connection> kept_server;
  auto kept = ConnectThrough(*old_client, **listener, (*listener)->address(), &kept_server);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_FALSE(ConnectThrough(*new_client, **listener, (*listener)->address(), nullptr).ok());

  // The new certificate and key, from the other CA: the key first, then
  // the certificate (a pair read while they disagree is not used).
  auto next = rkv::testing::MakeTestCert(other_ca_, dir_, "server-next");
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(rkv::testing::ReplaceFile(key, rkv::testing::ReadTestFile(next->key)).ok());
  ASSERT_TRUE(rkv::testing::ReplaceFile(crt, rkv::testing::ReadTestFile(next->cert)).ok());

  const auto deadline = Clock::now() + tcp::TlsContext::kRefreshInterval * 3;
  Status last = Internal("not tried");
  while (Clock::now() < deadline) {
    auto conn = ConnectThrough(*new_client, **listener, (*listener)->address(), nullptr);
    last = conn.status();
    if (conn.ok()) break;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_TRUE(last.ok()) << "a client of the new CA still refused: " << last;
  EXPECT_FALSE(ConnectThrough(*old_client, **listener, (*listener)->address(), nullptr).ok())
      << "the old certificate is no longer served";

  // The connection made before the rotation goes on.
  Buffer table = MakeBuffer(*server, 4096, kRemoteRead, 0x5a);
  Buffer local = MakeBuffer(*old_client, 4096, kLocalWrite);
  ReadOp op{local.At(0, 4096), table.Remote(0), 9, true};
  ASSERT_TRUE((*kept)->PostReads({&op, 1}).ok());
  const Completion done = PollOne(**kept);
  ASSERT_TRUE(done.status.ok()) << done.status;
  EXPECT_EQ(local.bytes[4095], 0x5a);
}

}  // namespace
}  // namespace rkv::transport
