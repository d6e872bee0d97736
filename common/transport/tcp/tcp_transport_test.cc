#include "common/transport/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/factory.h"
#include "common/transport/tcp/tcp_frame.h"
#include "common/transport/transport.h"

namespace rkv::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Bounds only how long a broken build may hang a test; never a threshold.
constexpr auto kWait = std::chrono::seconds(30);

std::vector<uint8_t> Bytes(std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// Waits for one completion (or for Poll to fail, returned as the status of
// a completion with wr_id ~0).
Completion PollOne(Connection& conn) {
  Completion out[1];
  const auto deadline = Clock::now() + kWait;
  while (Clock::now() < deadline) {
    StatusOr<size_t> n = conn.Poll(out, 100ms);
    if (!n.ok()) return Completion{~uint64_t{0}, OpType::kRead, n.status(), 0};
    if (*n == 1) return out[0];
  }
  ADD_FAILURE() << "no completion";
  return Completion{~uint64_t{0}, OpType::kRead, Internal("test gave up waiting"), 0};
}

// Waits until Poll reports the connection unusable; returns that status.
Status PollUntilFailed(Connection& conn, std::vector<Completion>* seen) {
  Completion out[8];
  const auto deadline = Clock::now() + kWait;
  while (Clock::now() < deadline) {
    StatusOr<size_t> n = conn.Poll(out, 100ms);
    if (!n.ok()) return n.status();
    for (size_t i = 0; i < *n; ++i) seen->push_back(out[i]);
  }
  return Internal("connection never failed");
}

// A registered buffer.
struct Buffer {
  std::vector<uint8_t> bytes;
  std::unique_ptr<MemoryRegion> mr;
  LocalBuf At(size_t offset, uint32_t length) const { return LocalBuf{mr.get(), offset, length}; }
  RemoteBuf Remote(size_t offset = 0) const { return RemoteBuf{mr->remote_addr() + offset, mr->rkey()}; }
};

Buffer MakeBuffer(Transport& t, size_t size, uint32_t access, uint8_t fill = 0) {
  Buffer b;
  b.bytes.assign(size, fill);
  StatusOr<std::unique_ptr<MemoryRegion>> mr = t.Register(b.bytes.data(), b.bytes.size(), access);
  EXPECT_TRUE(mr.ok()) << mr.status();
  if (mr.ok()) b.mr = std::move(*mr);
  return b;
}

// Sends raw bytes to a listener, as a misbehaving peer would.
class RawSocket {
 public:
  explicit RawSocket(const std::string& address) {
    const uint16_t port = static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(fd_, 0);
    timeval tv{static_cast<time_t>(kWait.count()), 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0) << std::strerror(errno);
  }
  ~RawSocket() { ::close(fd_); }

  void Send(const void* p, size_t n) { ASSERT_EQ(::send(fd_, p, n, MSG_NOSIGNAL), static_cast<ssize_t>(n)); }
  void SendHeader(const tcp::FrameHeader& h) { Send(&h, sizeof h); }
  // Blocks for a whole frame header; false on EOF.
  bool ReadHeader(tcp::FrameHeader* h) {
    size_t got = 0;
    while (got < sizeof *h) {
      const ssize_t r = ::recv(fd_, reinterpret_cast<char*>(h) + got, sizeof *h - got, 0);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  }
  // True once the peer closed (EOF or reset), without blocking.
  bool ClosedByPeer() {
    char c;
    const ssize_t r = ::recv(fd_, &c, 1, MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }
  // Blocks until EOF (discarding data); false on timeout.
  bool WaitClosed() {
    char buf[256];
    for (;;) {
      const ssize_t r = ::recv(fd_, buf, sizeof buf, 0);
      if (r == 0) return true;
      if (r < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
    }
  }

 private:
  int fd_ = -1;
};

class TcpTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<Transport>> server = CreateTransport(Kind::kTcp, Options{});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    StatusOr<std::unique_ptr<Transport>> client = CreateTransport(Kind::kTcp, Options{});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    StatusOr<std::unique_ptr<Listener>> listener = server_->Listen("127.0.0.1:0");
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = std::move(*listener);
  }

  // The next pending connection (nullptr when none came).
  std::unique_ptr<Connection> NextPending() {
    const auto deadline = Clock::now() + kWait;
    while (Clock::now() < deadline) {
      StatusOr<std::unique_ptr<Connection>> next = listener_->Next(100ms);
      if (!next.ok()) {
        ADD_FAILURE() << next.status();
        return nullptr;
      }
      if (*next != nullptr) return std::move(*next);
    }
    ADD_FAILURE() << "no connection request";
    return nullptr;
  }

  struct Pair {
    std::unique_ptr<Connection> server;
    std::unique_ptr<Connection> client;
  };

  // Connects a client and accepts it; `setup` runs on the pending server
  // side before Accept (register private memory, post receives).
  Pair ConnectPair(const std::function<void(Connection&)>& setup = {}, std::span<const uint8_t> hello = {},
                   std::span<const uint8_t> reply = {}) {
    Pair pair;
    StatusOr<std::unique_ptr<Connection>> client = Internal("not connected");
    std::thread connector([&] { client = client_->Connect(listener_->address(), hello, kWait); });
    pair.server = NextPending();
    if (pair.server != nullptr) {
      if (setup) setup(*pair.server);
      const Status accepted = pair.server->Accept(reply);
      EXPECT_TRUE(accepted.ok()) << accepted;
    }
    connector.join();
    EXPECT_TRUE(client.ok()) << client.status();
    if (client.ok()) pair.client = std::move(*client);
    return pair;
  }

  std::unique_ptr<Transport> server_;
  std::unique_ptr<Transport> client_;
  std::unique_ptr<Listener> listener_;
};

TEST_F(TcpTransportTest, CreateTransportMakesATcpTransport) {
  EXPECT_EQ(server_->kind(), Kind::kTcp);
  EXPECT_STREQ(KindName(server_->kind()), "tcp");
}

TEST_F(TcpTransportTest, ListenerReportsTheBoundPort) {
  const std::string address = listener_->address();
  EXPECT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  EXPECT_NE(address, "127.0.0.1:0");
}

TEST_F(TcpTransportTest, RegisterValidatesAndGivesDistinctNonzeroKeys) {
  std::vector<uint8_t> mem(4096);
  StatusOr<std::unique_ptr<MemoryRegion>> a = server_->Register(mem.data(), 1024, kRemoteRead);
  StatusOr<std::unique_ptr<MemoryRegion>> b = server_->Register(mem.data() + 1024, 1024, kRemoteRead);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->rkey(), 0u);
  EXPECT_NE((*a)->rkey(), (*b)->rkey());
  EXPECT_EQ((*b)->remote_addr(), reinterpret_cast<uint64_t>(mem.data() + 1024));
  EXPECT_EQ(server_->Register(mem.data(), 64, kRemoteWrite).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(server_->Register(mem.data(), 0, kRemoteRead).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(server_->Register(nullptr, 64, kRemoteRead).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(server_->Register(mem.data(), 64, 1u << 9).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(TcpTransportTest, PrivateDataTravelsBothWays) {
  const std::vector<uint8_t> hello = Bytes("client hello with a token digest");
  const std::vector<uint8_t> reply = Bytes("server reply with region descriptors");
  std::string seen_by_server;
  Pair pair = ConnectPair(
      [&](Connection& c) {
        seen_by_server.assign(c.peer_private_data().begin(), c.peer_private_data().end());
        EXPECT_FALSE(c.peer_address().empty());
      },
      hello, reply);
  ASSERT_NE(pair.client, nullptr);
  EXPECT_EQ(seen_by_server, "client hello with a token digest");
  EXPECT_EQ(std::string(pair.client->peer_private_data().begin(), pair.client->peer_private_data().end()),
            "server reply with region descriptors");
  EXPECT_EQ(pair.client->peer_address(), listener_->address());
}

TEST_F(TcpTransportTest, MaximalPrivateDataIsAccepted) {
  const std::vector<uint8_t> hello(tcp::kMaxConnectData, 0xab);
  const std::vector<uint8_t> reply(tcp::kMaxAcceptData, 0xcd);
  Pair pair = ConnectPair(
      [&](Connection& c) { EXPECT_EQ(c.peer_private_data().size(), hello.size()); }, hello, reply);
  ASSERT_NE(pair.client, nullptr);
  EXPECT_EQ(std::vector<uint8_t>(pair.client->peer_private_data().begin(), pair.client->peer_private_data().end()),
            reply);
}

TEST_F(TcpTransportTest, OversizePrivateDataIsRefused) {
  const std::vector<uint8_t> hello(tcp::kMaxConnectData + 1, 1);
  StatusOr<std::unique_ptr<Connection>> c = client_->Connect(listener_->address(), hello, kWait);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status();

  StatusOr<std::unique_ptr<Connection>> client = Internal("not connected");
  std::thread connector([&] { client = client_->Connect(listener_->address(), {}, kWait); });
  std::unique_ptr<Connection> pending = NextPending();
  ASSERT_NE(pending, nullptr);
  const std::vector<uint8_t> too_long(tcp::kMaxAcceptData + 1, 2);
  EXPECT_EQ(pending->Accept(too_long).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(pending->Accept({}).ok());
  connector.join();
  EXPECT_TRUE(client.ok()) << client.status();
}

TEST_F(TcpTransportTest, RejectCarriesTheServersReason) {
  StatusOr<std::unique_ptr<Connection>> client = Internal("not connected");
  std::thread connector([&] { client = client_->Connect(listener_->address(), Bytes("hi"), kWait); });
  std::unique_ptr<Connection> pending = NextPending();
  ASSERT_NE(pending, nullptr);
  pending->Reject({StatusCode::kUnauthenticated, "token digest does not match"});
  connector.join();
  EXPECT_EQ(client.status().code(), StatusCode::kPermissionDenied) << client.status();
  EXPECT_NE(client.status().message().find("token digest does not match"), std::string::npos) << client.status();
  // A rejected connection is unusable.
  EXPECT_FALSE(pending->Accept({}).ok());

  // A transient refusal (UNAVAILABLE) reaches the client as UNAVAILABLE.
  std::thread connector2([&] { client = client_->Connect(listener_->address(), {}, kWait); });
  pending = NextPending();
  ASSERT_NE(pending, nullptr);
  pending->Reject({StatusCode::kUnavailable, "server is draining"});
  connector2.join();
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable) << client.status();
  EXPECT_NE(client.status().message().find("server is draining"), std::string::npos) << client.status();
}

TEST_F(TcpTransportTest, DroppingAPendingConnectionFailsConnect) {
  StatusOr<std::unique_ptr<Connection>> client = Internal("not connected");
  std::thread connector([&] { client = client_->Connect(listener_->address(), {}, kWait); });
  std::unique_ptr<Connection> pending = NextPending();
  pending.reset();
  connector.join();
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable) << client.status();
}

TEST_F(TcpTransportTest, ConnectToNothingIsUnavailable) {
  const std::string address = listener_->address();
  listener_.reset();
  StatusOr<std::unique_ptr<Connection>> c = client_->Connect(address, {}, kWait);
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status();
  EXPECT_EQ(client_->Connect("127.0.0.1", {}, kWait).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(TcpTransportTest, ConnectTimesOutWithoutAnAnswer) {
  // The listener is never asked for the next connection, so nobody accepts.
  StatusOr<std::unique_ptr<Connection>> c = client_->Connect(listener_->address(), {}, 200ms);
  EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded) << c.status();
}

TEST_F(TcpTransportTest, ShutdownWakesNext) {
  StatusOr<std::unique_ptr<Connection>> next = Internal("not run");
  std::thread waiter([&] { next = listener_->Next(std::chrono::hours(1)); });
  listener_->Shutdown();
  waiter.join();
  EXPECT_EQ(next.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(listener_->Next(0ms).status().code(), StatusCode::kCancelled);
}

TEST_F(TcpTransportTest, PendingConnectionRefusesDataPathPosts) {
  StatusOr<std::unique_ptr<Connection>> client = Internal("not connected");
  std::thread connector([&] { client = client_->Connect(listener_->address(), {}, kWait); });
  std::unique_ptr<Connection> pending = NextPending();
  ASSERT_NE(pending, nullptr);
  Buffer msg = MakeBuffer(*server_, 64, kLocalWrite);
  EXPECT_EQ(pending->PostSend(msg.At(0, 8), 1).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(pending->PostRecv(msg.At(0, 64), 2).ok());
  EXPECT_TRUE(pending->Accept({}).ok());
  connector.join();
  ASSERT_TRUE(client.ok());
  EXPECT_EQ(pending->RegisterPrivate(msg.bytes.data(), 64, kRemoteRead).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(TcpTransportTest, ReadChainWithOnlyTheLastSignaled) {
  Buffer table = MakeBuffer(*server_, 1 << 16, kRemoteRead);
  for (size_t i = 0; i < table.bytes.size(); ++i) table.bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 4096, kLocalWrite);

  const ReadOp ops[] = {
      {local.At(0, 64), table.Remote(0), 1, false},
      {local.At(64, 64), table.Remote(64 * 100), 2, false},
      {local.At(128, 1000), table.Remote(5), 3, true},
  };
  ASSERT_TRUE(pair.client->PostReads(ops).ok());
  const Completion c = PollOne(*pair.client);
  EXPECT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(c.wr_id, 3u);
  EXPECT_EQ(c.op, OpType::kRead);
  EXPECT_EQ(0, std::memcmp(local.bytes.data(), table.bytes.data(), 64));
  EXPECT_EQ(0, std::memcmp(local.bytes.data() + 64, table.bytes.data() + 6400, 64));
  EXPECT_EQ(0, std::memcmp(local.bytes.data() + 128, table.bytes.data() + 5, 1000));
  Completion more[1];
  StatusOr<size_t> n = pair.client->Poll(more, 0us);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);  // the unsignaled READs made no completion
}

// The default PostReadsAndWait (post, then Poll): the data is there when
// it returns; a SEND completion that came first is handed back in
// `others`; the waited-for READ is not reported again.
TEST_F(TcpTransportTest, PostReadsAndWaitHandsBackOtherCompletions) {
  Buffer table = MakeBuffer(*server_, 1 << 16, kRemoteRead);
  for (size_t i = 0; i < table.bytes.size(); ++i) table.bytes[i] = static_cast<uint8_t>(i * 5 + 1);
  Buffer inbox = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(inbox.At(0, 64), 900).ok()); });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 4096, kLocalWrite);
  ASSERT_TRUE(pair.client->PostSend(local.At(2048, 16), 7).ok());
  const ReadOp ops[] = {
      {local.At(0, 100), table.Remote(300), 1, false},
      {local.At(100, 900), table.Remote(9000), 2, true},
  };
  std::vector<Completion> others;
  ASSERT_TRUE(pair.client->PostReadsAndWait(ops, std::chrono::seconds(10), &others).ok());
  EXPECT_EQ(0, std::memcmp(local.bytes.data(), table.bytes.data() + 300, 100));
  EXPECT_EQ(0, std::memcmp(local.bytes.data() + 100, table.bytes.data() + 9000, 900));
  ASSERT_EQ(others.size(), 1u) << "the SEND completed before the READs (in order)";
  EXPECT_EQ(others[0].op, OpType::kSend);
  EXPECT_EQ(others[0].wr_id, 7u);
  Completion more[1];
  StatusOr<size_t> n = pair.client->Poll(more, 0us);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);

  const ReadOp unsignaled[] = {{local.At(0, 8), table.Remote(0), 3, false}};
  EXPECT_EQ(pair.client->PostReadsAndWait(unsignaled, std::chrono::seconds(1), &others).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(TcpTransportTest, LargeReadsAndWrites) {
  constexpr size_t kSize = 8 << 20;
  Buffer remote = MakeBuffer(*server_, kSize, kRemoteRead | kRemoteWrite | kLocalWrite);
  for (size_t i = 0; i < kSize; ++i) remote.bytes[i] = static_cast<uint8_t>(i ^ (i >> 11));
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(recv.At(0, 64), 9).ok()); });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, kSize, kLocalWrite);
  const ReadOp op{local.At(0, kSize), remote.Remote(), 1, true};
  ASSERT_TRUE(pair.client->PostReads({&op, 1}).ok());
  EXPECT_TRUE(PollOne(*pair.client).status.ok());
  EXPECT_EQ(local.bytes, remote.bytes);

  for (size_t i = 0; i < kSize; ++i) local.bytes[i] = static_cast<uint8_t>(i * 13);
  ASSERT_TRUE(pair.client->PostWriteSend(local.At(0, kSize), remote.Remote(), local.At(0, 16), 2).ok());
  const Completion recv_done = PollOne(*pair.server);
  EXPECT_TRUE(recv_done.status.ok()) << recv_done.status;
  EXPECT_EQ(recv_done.byte_len, 16u);
  EXPECT_EQ(remote.bytes, local.bytes);
  EXPECT_TRUE(PollOne(*pair.client).status.ok());
}

TEST_F(TcpTransportTest, SimultaneousLargeReadsInBothDirectionsComplete) {
  // Each side's reader must keep reading while its responses wait for the
  // other side: large READs both ways at once must not deadlock.
  constexpr size_t kSize = 16 << 20;
  Buffer server_mem = MakeBuffer(*server_, kSize, kRemoteRead | kLocalWrite, 0x11);
  Buffer client_mem = MakeBuffer(*client_, kSize, kRemoteRead | kLocalWrite, 0x22);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer server_dst = MakeBuffer(*server_, kSize, kLocalWrite);
  Buffer client_dst = MakeBuffer(*client_, kSize, kLocalWrite);
  const ReadOp from_server{client_dst.At(0, kSize), server_mem.Remote(), 1, true};
  const ReadOp from_client{server_dst.At(0, kSize), client_mem.Remote(), 2, true};
  ASSERT_TRUE(pair.client->PostReads({&from_server, 1}).ok());
  ASSERT_TRUE(pair.server->PostReads({&from_client, 1}).ok());
  EXPECT_TRUE(PollOne(*pair.client).status.ok());
  EXPECT_TRUE(PollOne(*pair.server).status.ok());
  EXPECT_EQ(client_dst.bytes, server_mem.bytes);
  EXPECT_EQ(server_dst.bytes, client_mem.bytes);
}

TEST_F(TcpTransportTest, LocalBuffersAreChecked) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer readonly = MakeBuffer(*client_, 128, 0);
  Buffer local = MakeBuffer(*client_, 128, kLocalWrite);
  const ReadOp no_write{readonly.At(0, 64), table.Remote(), 1, true};
  EXPECT_EQ(pair.client->PostReads({&no_write, 1}).code(), StatusCode::kInvalidArgument);
  const ReadOp outside{local.At(100, 64), table.Remote(), 1, true};
  EXPECT_EQ(pair.client->PostReads({&outside, 1}).code(), StatusCode::kInvalidArgument);
  const ReadOp no_region{LocalBuf{nullptr, 0, 8}, table.Remote(), 1, true};
  EXPECT_EQ(pair.client->PostReads({&no_region, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pair.client->PostRecv(readonly.At(0, 64), 1).code(), StatusCode::kInvalidArgument);
  // Nothing was posted: the connection still works.
  const ReadOp good{local.At(0, 64), table.Remote(), 7, true};
  ASSERT_TRUE(pair.client->PostReads({&good, 1}).ok());
  EXPECT_TRUE(PollOne(*pair.client).status.ok());
}

enum class BadRead { kOutOfBounds, kStraddlesEnd, kWrongRkey, kNoRemoteRead, kOtherConnectionsPrivate };

class TcpBadReadTest : public TcpTransportTest, public ::testing::WithParamInterface<BadRead> {};

TEST_P(TcpBadReadTest, FailsWithPermissionDeniedAndTheServerKeepsServing) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 0x5a);
  Buffer hidden = MakeBuffer(*server_, 4096, kLocalWrite, 0x77);
  std::vector<uint8_t> private_mem(1024, 0x33);
  RemoteBuf private_region;
  Pair other = ConnectPair([&](Connection& c) {
    StatusOr<MemoryRegion*> mr = c.RegisterPrivate(private_mem.data(), private_mem.size(), kRemoteRead);
    ASSERT_TRUE(mr.ok()) << mr.status();
    private_region = RemoteBuf{(*mr)->remote_addr(), (*mr)->rkey()};
  });
  ASSERT_NE(other.client, nullptr);
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(recv.At(0, 64), 42).ok()); });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 8192, kLocalWrite);

  RemoteBuf target = table.Remote();
  uint32_t length = 64;
  switch (GetParam()) {
    case BadRead::kOutOfBounds: target.addr += 8192; break;
    case BadRead::kStraddlesEnd:
      target.addr += 4096 - 32;
      break;
    case BadRead::kWrongRkey: target.rkey ^= 0x1000; break;
    case BadRead::kNoRemoteRead: target = hidden.Remote(); break;
    case BadRead::kOtherConnectionsPrivate: target = private_region; break;
  }
  const ReadOp ops[] = {
      {local.At(0, 64), table.Remote(), 1, false},
      {local.At(64, length), target, 2, false},
      {local.At(128, 64), table.Remote(), 3, true},
  };
  ASSERT_TRUE(pair.client->PostReads(ops).ok());
  std::vector<Completion> seen;
  const Status end = PollUntilFailed(*pair.client, &seen);
  EXPECT_EQ(end.code(), StatusCode::kUnavailable) << end;
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].wr_id, 2u);
  EXPECT_EQ(seen[0].status.code(), StatusCode::kPermissionDenied) << seen[0].status;
  EXPECT_EQ(seen[1].wr_id, 3u);
  EXPECT_EQ(seen[1].status.code(), StatusCode::kUnavailable) << seen[1].status;
  EXPECT_EQ(local.bytes[64], 0);  // nothing of the refused READ arrived
  // A QP in error refuses later work.
  EXPECT_FALSE(pair.client->PostReads({&ops[0], 1}).ok());

  // The server side of that connection reports it dead ...
  std::vector<Completion> server_seen;
  EXPECT_EQ(PollUntilFailed(*pair.server, &server_seen).code(), StatusCode::kUnavailable);
  ASSERT_EQ(server_seen.size(), 1u);
  EXPECT_EQ(server_seen[0].wr_id, 42u);
  EXPECT_FALSE(server_seen[0].status.ok());

  // ... while the other connection and new ones are served as before.
  const ReadOp again{local.At(0, 64), private_region, 5, true};
  ASSERT_TRUE(other.client->PostReads({&again, 1}).ok());
  EXPECT_TRUE(PollOne(*other.client).status.ok());
  EXPECT_EQ(local.bytes[0], 0x33);
  Pair fresh = ConnectPair();
  ASSERT_NE(fresh.client, nullptr);
  const ReadOp read{local.At(256, 64), table.Remote(), 6, true};
  ASSERT_TRUE(fresh.client->PostReads({&read, 1}).ok());
  EXPECT_TRUE(PollOne(*fresh.client).status.ok());
  EXPECT_EQ(local.bytes[256], 0x5a);
}

INSTANTIATE_TEST_SUITE_P(All, TcpBadReadTest,
                         ::testing::Values(BadRead::kOutOfBounds, BadRead::kStraddlesEnd, BadRead::kWrongRkey,
                                           BadRead::kNoRemoteRead, BadRead::kOtherConnectionsPrivate));

TEST_F(TcpTransportTest, WriteIntoAReadOnlyRegionFailsAndChangesNothing) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 0x5a);
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(recv.At(0, 64), 42).ok()); });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 256, kLocalWrite, 0xee);
  ASSERT_TRUE(pair.client->PostWriteSend(local.At(0, 128), table.Remote(64), local.At(128, 16), 7).ok());

  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*pair.client, &seen).code(), StatusCode::kUnavailable);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].op, OpType::kWrite);
  EXPECT_EQ(seen[0].wr_id, 7u);
  EXPECT_EQ(seen[0].status.code(), StatusCode::kPermissionDenied) << seen[0].status;
  EXPECT_EQ(seen[1].op, OpType::kSend);
  EXPECT_FALSE(seen[1].status.ok());
  EXPECT_EQ(table.bytes, std::vector<uint8_t>(4096, 0x5a));

  // The SEND behind the failed WRITE never reached the server's receive.
  std::vector<Completion> server_seen;
  EXPECT_EQ(PollUntilFailed(*pair.server, &server_seen).code(), StatusCode::kUnavailable);
  ASSERT_EQ(server_seen.size(), 1u);
  EXPECT_EQ(server_seen[0].status.code(), StatusCode::kUnavailable);
}

TEST_F(TcpTransportTest, WriteIntoAnotherConnectionsPrivateRegionFails) {
  std::vector<uint8_t> ring_a(1024, 0);
  std::vector<uint8_t> ring_b(1024, 0);
  RemoteBuf remote_a;
  RemoteBuf remote_b;
  Buffer recv = MakeBuffer(*server_, 256, kLocalWrite);
  auto setup = [&](std::vector<uint8_t>* ring, RemoteBuf* remote, uint32_t slot) {
    return [&, ring, remote, slot](Connection& c) {
      StatusOr<MemoryRegion*> mr = c.RegisterPrivate(ring->data(), ring->size(), kRemoteWrite | kLocalWrite);
      ASSERT_TRUE(mr.ok()) << mr.status();
      *remote = RemoteBuf{(*mr)->remote_addr(), (*mr)->rkey()};
      ASSERT_TRUE(c.PostRecv(recv.At(slot * 64, 64), slot).ok());
    };
  };
  Pair a = ConnectPair(setup(&ring_a, &remote_a, 0));
  Pair b = ConnectPair(setup(&ring_b, &remote_b, 1));
  ASSERT_NE(a.client, nullptr);
  ASSERT_NE(b.client, nullptr);
  Buffer local = MakeBuffer(*client_, 256, kLocalWrite, 0xab);

  // b may not write a's ring.
  ASSERT_TRUE(b.client->PostWriteSend(local.At(0, 64), remote_a, local.At(64, 8), 1).ok());
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*b.client, &seen).code(), StatusCode::kUnavailable);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen[0].status.code(), StatusCode::kPermissionDenied) << seen[0].status;
  EXPECT_EQ(ring_a, std::vector<uint8_t>(1024, 0));

  // a may.
  ASSERT_TRUE(a.client->PostWriteSend(local.At(0, 64), remote_a, local.At(64, 8), 2).ok());
  const Completion recv_done = PollOne(*a.server);
  EXPECT_TRUE(recv_done.status.ok()) << recv_done.status;
  EXPECT_EQ(ring_a[0], 0xab);
  EXPECT_EQ(ring_a[63], 0xab);
  EXPECT_EQ(ring_a[64], 0);
  EXPECT_TRUE(PollOne(*a.client).status.ok());
}

TEST_F(TcpTransportTest, WriteIsVisibleWhenTheFollowingSendIsReceived) {
  // The PUT pattern: WRITE a record into the server's ring, SEND a message
  // naming it; the server checks the ring when the receive completes and
  // replies, after which the client may reuse that part of the ring.
  constexpr uint32_t kSlots = 4;
  constexpr uint32_t kSlotBytes = 512;
  constexpr uint32_t kRounds = 300;
  std::vector<uint8_t> ring(kSlots * kSlotBytes, 0);
  RemoteBuf remote_ring;
  Buffer recv = MakeBuffer(*server_, kSlots * 64, kLocalWrite);
  Buffer reply = MakeBuffer(*server_, 8, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) {
    StatusOr<MemoryRegion*> mr = c.RegisterPrivate(ring.data(), ring.size(), kRemoteWrite | kLocalWrite);
    ASSERT_TRUE(mr.ok());
    remote_ring = RemoteBuf{(*mr)->remote_addr(), (*mr)->rkey()};
    for (uint32_t i = 0; i < kSlots; ++i) ASSERT_TRUE(c.PostRecv(recv.At(i * 64, 64), i).ok());
  });
  ASSERT_NE(pair.client, nullptr);
  Buffer staging = MakeBuffer(*client_, kSlots * kSlotBytes + kSlots * 8, kLocalWrite);
  Buffer replies = MakeBuffer(*client_, kSlots * 8, kLocalWrite);
  for (uint32_t i = 0; i < kSlots; ++i) ASSERT_TRUE(pair.client->PostRecv(replies.At(i * 8, 8), 100 + i).ok());

  std::atomic<int> mismatches{0};
  std::thread server([&] {
    uint32_t received = 0;
    while (received < kRounds * kSlots) {
      const Completion c = PollOne(*pair.server);
      if (!c.status.ok()) {
        ADD_FAILURE() << c.status;
        return;
      }
      if (c.op == OpType::kSend) continue;
      ++received;
      uint32_t round = 0;
      uint32_t slot = 0;
      std::memcpy(&round, recv.bytes.data() + c.wr_id * 64, 4);
      std::memcpy(&slot, recv.bytes.data() + c.wr_id * 64 + 4, 4);
      for (uint32_t i = 0; i < kSlotBytes; ++i) {
        if (slot >= kSlots || ring[slot * kSlotBytes + i] != static_cast<uint8_t>(round * 5 + slot + 1)) {
          ++mismatches;
          break;
        }
      }
      ASSERT_TRUE(pair.server->PostRecv(recv.At(c.wr_id * 64, 64), c.wr_id).ok());
      ASSERT_TRUE(pair.server->PostSend(reply.At(0, 8), 1000 + c.wr_id).ok());
    }
  });
  for (uint32_t round = 0; round < kRounds; ++round) {
    for (uint32_t slot = 0; slot < kSlots; ++slot) {
      uint8_t* record = staging.bytes.data() + slot * kSlotBytes;
      std::memset(record, static_cast<uint8_t>(round * 5 + slot + 1), kSlotBytes);
      uint8_t* msg = staging.bytes.data() + kSlots * kSlotBytes + slot * 8;
      std::memcpy(msg, &round, 4);
      std::memcpy(msg + 4, &slot, 4);
      ASSERT_TRUE(pair.client
                      ->PostWriteSend(staging.At(slot * kSlotBytes, kSlotBytes),
                                      RemoteBuf{remote_ring.addr + slot * kSlotBytes, remote_ring.rkey},
                                      staging.At(kSlots * kSlotBytes + slot * 8, 8), slot)
                      .ok());
    }
    // Reuse the ring only once the server has replied to the whole round.
    uint32_t sends = 0;
    uint32_t replies_seen = 0;
    while (sends < kSlots || replies_seen < kSlots) {
      const Completion c = PollOne(*pair.client);
      ASSERT_TRUE(c.status.ok()) << c.status;
      if (c.op == OpType::kSend) {
        ++sends;
      } else {
        ASSERT_EQ(c.op, OpType::kRecv);
        ++replies_seen;
        ASSERT_TRUE(pair.client->PostRecv(replies.At((c.wr_id - 100) * 8, 8), c.wr_id).ok());
      }
    }
  }
  server.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(TcpTransportTest, SendWithoutAReceiveWaitsForOne) {
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer msg = MakeBuffer(*client_, 64, kLocalWrite);
  std::memcpy(msg.bytes.data(), "early message", 13);
  ASSERT_TRUE(pair.client->PostSend(msg.At(0, 13), 11).ok());
  ASSERT_TRUE(pair.client->PostSend(msg.At(0, 5), 12).ok());
  // Completed: the server has both queued.
  EXPECT_EQ(PollOne(*pair.client).wr_id, 11u);
  EXPECT_EQ(PollOne(*pair.client).wr_id, 12u);
  Completion none[1];
  StatusOr<size_t> n = pair.server->Poll(none, 0us);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);

  ASSERT_TRUE(pair.server->PostRecv(recv.At(0, 32), 21).ok());
  ASSERT_TRUE(pair.server->PostRecv(recv.At(32, 32), 22).ok());
  const Completion first = PollOne(*pair.server);
  EXPECT_TRUE(first.status.ok());
  EXPECT_EQ(first.wr_id, 21u);
  EXPECT_EQ(first.op, OpType::kRecv);
  EXPECT_EQ(first.byte_len, 13u);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(recv.bytes.data()), 13), "early message");
  const Completion second = PollOne(*pair.server);
  EXPECT_EQ(second.wr_id, 22u);
  EXPECT_EQ(second.byte_len, 5u);
}

TEST_F(TcpTransportTest, SendLargerThanTheReceiveBufferFailsBothSides) {
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(recv.At(0, 16), 1).ok()); });
  ASSERT_NE(pair.client, nullptr);
  Buffer msg = MakeBuffer(*client_, 64, kLocalWrite);
  ASSERT_TRUE(pair.client->PostSend(msg.At(0, 64), 2).ok());
  const Completion sent = PollOne(*pair.client);
  EXPECT_EQ(sent.wr_id, 2u);
  EXPECT_FALSE(sent.status.ok());
  const Completion received = PollOne(*pair.server);
  EXPECT_EQ(received.wr_id, 1u);
  EXPECT_FALSE(received.status.ok());
}

TEST_F(TcpTransportTest, PeerDisconnectYieldsUnavailable) {
  Buffer recv = MakeBuffer(*server_, 128, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) {
    ASSERT_TRUE(c.PostRecv(recv.At(0, 64), 1).ok());
    ASSERT_TRUE(c.PostRecv(recv.At(64, 64), 2).ok());
  });
  ASSERT_NE(pair.client, nullptr);
  pair.client->Disconnect();
  pair.client->Disconnect();  // idempotent
  Buffer msg = MakeBuffer(*client_, 64, kLocalWrite);
  EXPECT_EQ(pair.client->PostSend(msg.At(0, 8), 3).code(), StatusCode::kUnavailable);
  Completion none[1];
  EXPECT_EQ(pair.client->Poll(none, 0us).status().code(), StatusCode::kUnavailable);

  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*pair.server, &seen).code(), StatusCode::kUnavailable);
  ASSERT_EQ(seen.size(), 2u);
  for (const Completion& c : seen) {
    EXPECT_EQ(c.op, OpType::kRecv);
    EXPECT_EQ(c.status.code(), StatusCode::kUnavailable);
  }
  EXPECT_EQ(pair.server->PostRecv(recv.At(0, 64), 4).code(), StatusCode::kUnavailable);
}

TEST_F(TcpTransportTest, DestroyedPeerFailsOutstandingReads) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  pair.server.reset();
  Buffer local = MakeBuffer(*client_, 64, kLocalWrite);
  // Posted before or after the reader noticed: either refused or flushed.
  const ReadOp op{local.At(0, 64), table.Remote(), 1, true};
  const Status posted = pair.client->PostReads({&op, 1});
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*pair.client, &seen).code(), StatusCode::kUnavailable);
  if (posted.ok()) {
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].status.code(), StatusCode::kUnavailable);
  } else {
    EXPECT_EQ(posted.code(), StatusCode::kUnavailable);
    EXPECT_TRUE(seen.empty());
  }
}

TEST_F(TcpTransportTest, ConcurrentSlotStoresAreNeverTorn) {
  // The server publishes 8-byte words with release stores while the client
  // READs them: every word read is one the server stored.
  constexpr size_t kWords = 512;
  std::vector<uint64_t> slots(kWords, 0);
  StatusOr<std::unique_ptr<MemoryRegion>> mr = server_->Register(slots.data(), kWords * 8, kRemoteRead);
  ASSERT_TRUE(mr.ok());
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (uint64_t v = 1; !done.load(std::memory_order_relaxed); ++v) {
      const uint64_t word = (v << 32) | (~v & 0xffffffffu);
      for (size_t i = 0; i < kWords; ++i) std::atomic_ref<uint64_t>(slots[i]).store(word, std::memory_order_release);
    }
  });
  Buffer local = MakeBuffer(*client_, kWords * 8, kLocalWrite);
  for (int round = 0; round < 300; ++round) {
    // Unaligned start too: bytewise head and tail.
    const ReadOp ops[] = {
        {local.At(0, kWords * 8 - 16), RemoteBuf{(*mr)->remote_addr() + 3, (*mr)->rkey()}, 1, false},
        {local.At(0, kWords * 8), RemoteBuf{(*mr)->remote_addr(), (*mr)->rkey()}, 2, true},
    };
    ASSERT_TRUE(pair.client->PostReads(ops).ok());
    const Completion c = PollOne(*pair.client);
    ASSERT_TRUE(c.status.ok()) << c.status;
    for (size_t i = 0; i < kWords; ++i) {
      uint64_t word;
      std::memcpy(&word, local.bytes.data() + i * 8, 8);
      if (word == 0) continue;
      ASSERT_EQ(word >> 32, ~word & 0xffffffffu) << "torn word " << word << " at " << i;
    }
  }
  done = true;
  writer.join();
}

TEST_F(TcpTransportTest, GarbageFromARawSocketDoesNotHurtTheListener) {
  {
    RawSocket raw(listener_->address());
    const char junk[] = "GET / HTTP/1.1\r\nHost: rkv\r\n\r\nmore junk to fill a whole frame header";
    raw.Send(junk, sizeof junk);
    const auto deadline = Clock::now() + kWait;
    while (!raw.ClosedByPeer() && Clock::now() < deadline) {
      StatusOr<std::unique_ptr<Connection>> next = listener_->Next(50ms);
      ASSERT_TRUE(next.ok());
      EXPECT_EQ(*next, nullptr);
    }
    EXPECT_TRUE(raw.ClosedByPeer());
  }
  {
    // A well-formed header of the wrong type with a huge claimed payload.
    RawSocket raw(listener_->address());
    tcp::FrameHeader h = tcp::MakeHeader(tcp::FrameType::kWrite, 1);
    h.payload_len = 0xffffffffu;
    raw.SendHeader(h);
    const auto deadline = Clock::now() + kWait;
    while (!raw.ClosedByPeer() && Clock::now() < deadline) {
      StatusOr<std::unique_ptr<Connection>> next = listener_->Next(50ms);
      ASSERT_TRUE(next.ok());
      EXPECT_EQ(*next, nullptr);
    }
    EXPECT_TRUE(raw.ClosedByPeer());
  }
  // A proper client is still served.
  Buffer table = MakeBuffer(*server_, 64, kRemoteRead, 9);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 64, kLocalWrite);
  const ReadOp op{local.At(0, 64), table.Remote(), 1, true};
  ASSERT_TRUE(pair.client->PostReads({&op, 1}).ok());
  EXPECT_TRUE(PollOne(*pair.client).status.ok());
  EXPECT_EQ(local.bytes[63], 9);
}

// After a valid handshake, each malformed frame drops only that connection.
class TcpMalformedFrameTest : public TcpTransportTest, public ::testing::WithParamInterface<int> {};

TEST_P(TcpMalformedFrameTest, DropsOnlyThatConnection) {
  Buffer table = MakeBuffer(*server_, 64, kRemoteRead, 9);
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  RawSocket raw(listener_->address());
  tcp::FrameHeader hello = tcp::MakeHeader(tcp::FrameType::kConnect, 0);
  hello.addr = tcp::kHelloMagic;
  raw.SendHeader(hello);
  std::unique_ptr<Connection> conn = NextPending();
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(conn->PostRecv(recv.At(0, 64), 5).ok());
  ASSERT_TRUE(conn->Accept({}).ok());
  tcp::FrameHeader accept;
  ASSERT_TRUE(raw.ReadHeader(&accept));
  EXPECT_EQ(accept.type, static_cast<uint8_t>(tcp::FrameType::kAccept));

  tcp::FrameHeader bad;
  switch (GetParam()) {
    case 0: bad = tcp::MakeHeader(static_cast<tcp::FrameType>(200), 1); break;
    case 1:
      bad = tcp::MakeHeader(tcp::FrameType::kReadReq, 1);
      bad.op_len = tcp::kMaxOpBytes + 1;
      break;
    case 2:
      bad = tcp::MakeHeader(tcp::FrameType::kSendAck, 99);  // answers nothing
      break;
    case 3:
      bad = tcp::MakeHeader(tcp::FrameType::kSend, 1);
      bad.magic = 0x1234;
      break;
    case 4:
      bad = tcp::MakeHeader(tcp::FrameType::kReadResp, 1);
      bad.status = 1000;
      break;
    default:
      bad = tcp::MakeHeader(tcp::FrameType::kConnect, 0);
      bad.addr = tcp::kHelloMagic;
      break;
  }
  raw.SendHeader(bad);
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*conn, &seen).code(), StatusCode::kUnavailable);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].wr_id, 5u);
  EXPECT_TRUE(raw.WaitClosed());

  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 64, kLocalWrite);
  const ReadOp op{local.At(0, 64), table.Remote(), 1, true};
  ASSERT_TRUE(pair.client->PostReads({&op, 1}).ok());
  EXPECT_TRUE(PollOne(*pair.client).status.ok());
}

INSTANTIATE_TEST_SUITE_P(All, TcpMalformedFrameTest, ::testing::Range(0, 6));

TEST_F(TcpTransportTest, RawReadRequestsAreCheckedLikeAnyOther) {
  // A peer that forges READs of memory nobody registered gets an error
  // response and loses its connection; nothing is read.
  Buffer table = MakeBuffer(*server_, 64, kRemoteRead, 9);
  RawSocket raw(listener_->address());
  tcp::FrameHeader hello = tcp::MakeHeader(tcp::FrameType::kConnect, 0);
  hello.addr = tcp::kHelloMagic;
  raw.SendHeader(hello);
  std::unique_ptr<Connection> conn = NextPending();
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(conn->Accept({}).ok());
  tcp::FrameHeader h;
  ASSERT_TRUE(raw.ReadHeader(&h));

  tcp::FrameHeader read = tcp::MakeHeader(tcp::FrameType::kReadReq, 1);
  read.addr = reinterpret_cast<uint64_t>(&h);  // a stack address of this process
  read.rkey = table.mr->rkey();
  read.op_len = 8;
  raw.SendHeader(read);
  ASSERT_TRUE(raw.ReadHeader(&h));
  EXPECT_EQ(h.type, static_cast<uint8_t>(tcp::FrameType::kReadResp));
  EXPECT_EQ(h.status, static_cast<int32_t>(StatusCode::kPermissionDenied));
  EXPECT_LE(h.payload_len, tcp::kMaxErrorText);
  EXPECT_TRUE(raw.WaitClosed());
}

}  // namespace
}  // namespace rkv::transport
