// The tcp transport's own behaviour. What transport.h promises of every
// transport is tested once, in ../transport_conformance_test.cc; here are
// its registration rules, private data that arrives unpadded, SENDs it
// queues at the target, large transfers through its framing, and how it
// treats a misbehaving peer.
#include "common/transport/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/factory.h"
#include "common/transport/tcp/stall_clock.h"
#include "common/transport/tcp/tcp_frame.h"
#include "common/transport/transport.h"
#include "common/transport/transport_test_util.h"

namespace rkv::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::Buffer;
using testing::kWait;
using testing::MakeBuffer;
using testing::PollOne;
using testing::PollUntilFailed;

// Sends raw bytes to a listener, as a misbehaving peer would.
class RawSocket {
 public:
  // `source`: the local IPv4 address to connect from (any 127.x.y.z works
  // on loopback), or empty.
  explicit RawSocket(const std::string& address, const std::string& source = "") {
    const uint16_t port = static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(fd_, 0);
    timeval tv{static_cast<time_t>(kWait.count()), 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (!source.empty()) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      EXPECT_EQ(::inet_pton(AF_INET, source.c_str(), &local.sin_addr), 1);
      EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof local), 0) << std::strerror(errno);
    }
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
  // The server transport's options; a test that needs others sets them
  // and calls SetUp again.
  Options server_options_;

  void SetUp() override {
    StatusOr<std::unique_ptr<Transport>> server = CreateTransport(Kind::kTcp, server_options_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    StatusOr<std::unique_ptr<Transport>> client = CreateTransport(Kind::kTcp, Options{});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    StatusOr<std::unique_ptr<Listener>> listener = server_->Listen("127.0.0.1:0");
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = std::move(*listener);
  }

  std::unique_ptr<Connection> NextPending() { return testing::NextPending(*listener_); }

  // Runs the listener (nothing must complete setup) until `done` or kWait.
  bool RunListenerUntil(const std::function<bool()>& done) {
    const auto deadline = Clock::now() + kWait;
    while (!done()) {
      if (Clock::now() >= deadline) return false;
      StatusOr<std::unique_ptr<Connection>> next = listener_->Next(20ms);
      EXPECT_TRUE(next.ok() && *next == nullptr);
    }
    return true;
  }

  // A raw socket that completed setup (CONNECT sent, ACCEPT read), with
  // the server's side of it accepted into `*conn`.
  std::unique_ptr<RawSocket> RawAccepted(std::unique_ptr<Connection>* conn) {
    auto raw = std::make_unique<RawSocket>(listener_->address());
    tcp::FrameHeader hello = tcp::MakeHeader(tcp::FrameType::kConnect, 0);
    hello.addr = tcp::kHelloMagic;
    raw->SendHeader(hello);
    *conn = NextPending();
    EXPECT_NE(*conn, nullptr);
    if (*conn == nullptr) return raw;
    EXPECT_TRUE((*conn)->Accept({}).ok());
    tcp::FrameHeader accept;
    EXPECT_TRUE(raw->ReadHeader(&accept));
    return raw;
  }

  struct Pair {
    std::unique_ptr<Connection> server;
    std::unique_ptr<Connection> client;
  };

  // Connects a client and accepts it (into `group`, when given); `setup`
  // runs on the pending server side before Accept (register private
  // memory, post receives).
  Pair ConnectPair(const std::function<void(Connection&)>& setup = {}, std::span<const uint8_t> hello = {},
                   std::span<const uint8_t> reply = {}, PollGroup* group = nullptr) {
    Pair pair;
    StatusOr<std::unique_ptr<Connection>> client = Internal("not connected");
    std::thread connector([&] { client = client_->Connect(listener_->address(), hello, kWait); });
    const auto deadline = Clock::now() + kWait;
    while (pair.server == nullptr && Clock::now() < deadline) {
      StatusOr<std::unique_ptr<Connection>> next = listener_->Next(100ms, JoinAll(group));
      EXPECT_TRUE(next.ok()) << next.status();
      if (!next.ok()) break;
      pair.server = std::move(*next);
    }
    EXPECT_NE(pair.server, nullptr) << "no connection request";
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

  // A chooser that puts every connection into `group` (none when null).
  static Listener::GroupChooser JoinAll(PollGroup* group) {
    if (group == nullptr) return {};
    return [group](std::span<const uint8_t>) { return group; };
  }

  // A poll group of the server transport. Tests declare it before the
  // connections that join it, which must be destroyed first.
  std::unique_ptr<PollGroup> NewGroup() {
    StatusOr<std::unique_ptr<PollGroup>> group = server_->NewPollGroup();
    EXPECT_TRUE(group.ok()) << group.status();
    return group.ok() ? std::move(*group) : nullptr;
  }

  // Serves `group` on this thread, Polling each member it reports, until
  // `member`'s Poll fails (returned) or kWait passes; what `member`
  // completed meanwhile goes to `seen`, what other members did to `others`.
  static Status ServeUntilFailed(PollGroup& group, Connection& member, std::vector<Completion>* seen,
                                 std::vector<Completion>* others = nullptr) {
    Connection* ready[8];
    Completion out[8];
    const auto deadline = Clock::now() + kWait;
    while (Clock::now() < deadline) {
      StatusOr<size_t> n = group.Wait(ready, 100ms);
      if (!n.ok()) return n.status();
      for (size_t r = 0; r < *n; ++r) {
        StatusOr<size_t> got = ready[r]->Poll(out, 0us);
        if (!got.ok()) {
          if (ready[r] == &member) return got.status();
          continue;
        }
        std::vector<Completion>* to = ready[r] == &member ? seen : others;
        if (to != nullptr) to->insert(to->end(), out, out + *got);
      }
    }
    return Internal("the member never failed");
  }

  std::unique_ptr<Transport> server_;
  std::unique_ptr<Transport> client_;
  std::unique_ptr<Listener> listener_;
};

TEST(TcpTransportOptionsTest, PollSpinBoundIsValidated) {
  for (const int spin : {-1, 1'000'001}) {
    Options o;
    o.poll_spin_us = spin;
    const StatusOr<std::unique_ptr<Transport>> t = CreateTcpTransport(o);
    ASSERT_FALSE(t.ok()) << spin;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("poll_spin_us"), std::string::npos) << t.status();
  }
  for (const int spin : {0, 1000, 1'000'000}) {
    Options o;
    o.poll_spin_us = spin;
    EXPECT_TRUE(CreateTcpTransport(o).ok()) << spin;
  }
}

TEST_F(TcpTransportTest, RegisterWantsLocalWriteWithRemoteWriteAndGivesNonzeroKeys) {
  std::vector<uint8_t> mem(4096);
  StatusOr<std::unique_ptr<MemoryRegion>> a = server_->Register(mem.data(), 1024, kRemoteRead);
  StatusOr<std::unique_ptr<MemoryRegion>> b = server_->Register(mem.data() + 1024, 1024, kRemoteRead);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->rkey(), 0u);
  EXPECT_NE((*b)->rkey(), 0u);
  // As ibv_reg_mr: remote writes need local write (verbs adds it instead).
  EXPECT_EQ(server_->Register(mem.data(), 64, kRemoteWrite).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(TcpTransportTest, PrivateDataArrivesUnpadded) {
  // IB/RoCE pad private data; tcp carries exactly what was sent.
  for (const size_t size : {size_t{0}, size_t{5}, size_t{tcp::kMaxConnectData}}) {
    const std::vector<uint8_t> hello(size, 0xab);
    const std::vector<uint8_t> reply(size == 0 ? 0 : tcp::kMaxAcceptData - size, 0xcd);
    std::vector<uint8_t> seen_by_server;
    Pair pair = ConnectPair(
        [&](Connection& c) { seen_by_server.assign(c.peer_private_data().begin(), c.peer_private_data().end()); },
        hello, reply);
    ASSERT_NE(pair.client, nullptr);
    EXPECT_EQ(seen_by_server, hello);
    EXPECT_EQ(std::vector<uint8_t>(pair.client->peer_private_data().begin(), pair.client->peer_private_data().end()),
              reply);
  }
}

TEST_F(TcpTransportTest, SendsAreQueuedAtTheTargetUntilAReceiveIsPosted) {
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer msg = MakeBuffer(*client_, 64, kLocalWrite);
  std::memcpy(msg.bytes.data(), "early message", 13);
  ASSERT_TRUE(pair.client->PostSend(msg.At(0, 13), 11).ok());
  // Completed at once: the server queued it (verbs would retry on RNR).
  const Completion sent = PollOne(*pair.client);
  EXPECT_TRUE(sent.status.ok()) << sent.status;
  EXPECT_EQ(sent.wr_id, 11u);
  ASSERT_TRUE(pair.server->PostRecv(recv.At(0, 32), 21).ok());
  const Completion received = PollOne(*pair.server);
  EXPECT_TRUE(received.status.ok()) << received.status;
  EXPECT_EQ(received.byte_len, 13u);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(recv.bytes.data()), 13), "early message");
}

// A thread that takes a received SEND in Poll leaves its acknowledgement
// for its next post to carry (one segment per exchange). The sender's
// completion must not depend on that post: here the receiver never posts,
// and in the second part it only polls again.
TEST_F(TcpTransportTest, ASendCompletesAtItsSenderWhetherTheReceiverPostsAgainOrNot) {
  constexpr int kMessages = 64;
  Buffer recv = MakeBuffer(*server_, 64 * kMessages, kLocalWrite);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  ASSERT_NE(pair.server, nullptr);
  Buffer msg = MakeBuffer(*client_, 64, kLocalWrite, 0x42);

  // The receiver polls its message and then does nothing at all.
  ASSERT_TRUE(pair.server->PostRecv(recv.At(0, 64), 100).ok());
  ASSERT_TRUE(pair.client->PostSend(msg.At(0, 16), 1).ok());
  const Completion received = PollOne(*pair.server);
  EXPECT_TRUE(received.status.ok() && received.wr_id == 100u) << received.status << ", wr_id " << received.wr_id;
  const Completion sent = PollOne(*pair.client);
  EXPECT_TRUE(sent.status.ok() && sent.wr_id == 1u) << sent.status << ", wr_id " << sent.wr_id;

  // A sender that waits for each SEND before the next, and a receiver that
  // only posts receives (which send nothing) and polls: every one arrives
  // and completes, in order.
  std::thread receiver([&] {
    for (int i = 1; i < kMessages; ++i) {
      ASSERT_TRUE(pair.server->PostRecv(recv.At(64 * i, 64), 100 + i).ok());
      const Completion c = PollOne(*pair.server);
      ASSERT_TRUE(c.status.ok()) << c.status;
      ASSERT_EQ(c.wr_id, static_cast<uint64_t>(100 + i));
    }
  });
  for (int i = 1; i < kMessages; ++i) {
    msg.bytes[0] = static_cast<uint8_t>(i);
    ASSERT_TRUE(pair.client->PostSend(msg.At(0, 16), i + 1).ok());
    const Completion c = PollOne(*pair.client);
    ASSERT_TRUE(c.status.ok()) << c.status;
    ASSERT_EQ(c.wr_id, static_cast<uint64_t>(i + 1));
  }
  receiver.join();
  for (int i = 1; i < kMessages; ++i) EXPECT_EQ(recv.bytes[64 * i], i) << "message " << i;
}

TEST_F(TcpTransportTest, BuffersThatAreWrittenNeedLocalWrite) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer readonly = MakeBuffer(*client_, 128, 0);
  Buffer local = MakeBuffer(*client_, 128, kLocalWrite);
  const ReadOp no_write{readonly.At(0, 64), table.Remote(), 1, true};
  EXPECT_EQ(pair.client->PostReads({&no_write, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pair.client->PostRecv(readonly.At(0, 64), 1).code(), StatusCode::kInvalidArgument);
  // Nothing was posted: the connection still works.
  const ReadOp good{local.At(0, 64), table.Remote(), 7, true};
  ASSERT_TRUE(pair.client->PostReads({&good, 1}).ok());
  EXPECT_TRUE(PollOne(*pair.client).status.ok());
}

// A peer whose READ or WRITE the target refused loses its connection at
// the target too (the target closes it once its answer is out): the
// target's side reports it failed, with its receives flushed.
class TcpRefusedAccessTest : public TcpTransportTest, public ::testing::WithParamInterface<bool> {};

TEST_P(TcpRefusedAccessTest, DropsThatConnectionAtTheTarget) {
  const bool write = GetParam();
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 0x5a);
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(recv.At(0, 64), 42).ok()); });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 256, kLocalWrite);
  if (write) {
    ASSERT_TRUE(pair.client->PostWriteSend(local.At(0, 128), table.Remote(64), local.At(128, 16), 7).ok());
  } else {
    const ReadOp op{local.At(0, 64), table.Remote(8192), 7, true};
    ASSERT_TRUE(pair.client->PostReads({&op, 1}).ok());
  }
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*pair.client, &seen).code(), StatusCode::kUnavailable);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen[0].status.code(), StatusCode::kPermissionDenied) << seen[0].status;

  std::vector<Completion> server_seen;
  EXPECT_EQ(PollUntilFailed(*pair.server, &server_seen).code(), StatusCode::kUnavailable);
  ASSERT_EQ(server_seen.size(), 1u);
  EXPECT_EQ(server_seen[0].wr_id, 42u);
  EXPECT_EQ(server_seen[0].status.code(), StatusCode::kUnavailable) << server_seen[0].status;
}

INSTANTIATE_TEST_SUITE_P(ReadAndWrite, TcpRefusedAccessTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Write" : "Read"; });

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

TEST_F(TcpTransportTest, SilentSocketsCannotLockAClientOut) {
  // Sockets that never speak, from many sources and many from one, far
  // beyond the setup table: the oldest make way and a client gets in.
  server_options_.max_pending_handshakes = 16;
  server_options_.max_handshakes_per_source = 4;
  server_options_.handshake_timeout = std::chrono::hours(1);  // only eviction frees slots here
  SetUp();
  std::vector<std::unique_ptr<RawSocket>> flood;
  for (int i = 0; i < 12; ++i) flood.push_back(std::make_unique<RawSocket>(listener_->address(), "127.0.0.2"));
  for (int i = 0; i < 40; ++i) {
    flood.push_back(std::make_unique<RawSocket>(listener_->address(), "127.0.1." + std::to_string(2 + i)));
  }
  // Every socket is taken in, so the first ones from 127.0.0.2 (beyond its
  // 4) and the oldest of the rest are closed.
  EXPECT_TRUE(RunListenerUntil([&] { return flood[0]->ClosedByPeer() && flood[12]->ClosedByPeer(); }));
  EXPECT_FALSE(flood.back()->ClosedByPeer());
  Buffer table = MakeBuffer(*server_, 64, kRemoteRead, 3);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 64, kLocalWrite);
  const ReadOp op{local.At(0, 64), table.Remote(), 1, true};
  ASSERT_TRUE(pair.client->PostReads({&op, 1}).ok());
  EXPECT_TRUE(PollOne(*pair.client).status.ok());
  EXPECT_EQ(local.bytes[0], 3);
}

TEST_F(TcpTransportTest, SetupHasADeadline) {
  server_options_.handshake_timeout = 100ms;
  SetUp();
  RawSocket silent(listener_->address());
  RawSocket slow(listener_->address());
  tcp::FrameHeader hello = tcp::MakeHeader(tcp::FrameType::kConnect, 0);
  hello.addr = tcp::kHelloMagic;
  slow.Send(&hello, 10);  // a byte now and then never makes a frame
  EXPECT_TRUE(RunListenerUntil([&] { return silent.ClosedByPeer() && slow.ClosedByPeer(); }));
}

TEST_F(TcpTransportTest, AConnectFrameWithNonzeroFieldsIsRefused) {
  RawSocket raw(listener_->address());
  tcp::FrameHeader hello = tcp::MakeHeader(tcp::FrameType::kConnect, 0);
  hello.addr = tcp::kHelloMagic;
  hello.op_len = 5;
  raw.SendHeader(hello);
  EXPECT_TRUE(RunListenerUntil([&] { return raw.ClosedByPeer(); }));
}

TEST_F(TcpTransportTest, AnIdleConnectionIsClosedByTheServerSide) {
  server_options_.idle_timeout = 200ms;
  SetUp();
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(recv.At(0, 64), 4).ok()); });
  ASSERT_NE(pair.client, nullptr);
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*pair.server, &seen).code(), StatusCode::kUnavailable);
  EXPECT_EQ(PollUntilFailed(*pair.client, &seen).code(), StatusCode::kUnavailable);
}

TEST_F(TcpTransportTest, AFrameLeftIncompleteClosesTheConnection) {
  server_options_.frame_timeout = 200ms;
  SetUp();
  std::unique_ptr<Connection> conn;
  std::unique_ptr<RawSocket> raw = RawAccepted(&conn);
  ASSERT_NE(conn, nullptr);
  tcp::FrameHeader send = tcp::MakeHeader(tcp::FrameType::kSend, 1);
  send.payload_len = 100;
  const Clock::time_point sent = Clock::now();
  raw->SendHeader(send);
  raw->Send("half", 4);
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*conn, &seen).code(), StatusCode::kUnavailable);
  // Never before the limit; how late is StallClockTest's (a loaded
  // machine may be late by any amount).
  EXPECT_GE(Clock::now() - sent, 200ms);
  EXPECT_TRUE(raw->WaitClosed());
}

// Resident set high-water mark of this process, in bytes (0 if unknown).
size_t PeakRss() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "VmHWM: %zu kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb << 10;
}

TEST_F(TcpTransportTest, UndrainedReadsPinABoundedAmountOfMemory) {
  // Eight 64 MiB READs from a peer that never reads its socket: the target
  // holds a few MiB of them, not 512 MiB, and closes the connection once
  // the peer has read nothing for frame_timeout.
  server_options_.frame_timeout = 300ms;
  SetUp();
  Buffer big = MakeBuffer(*server_, tcp::kMaxOpBytes, kRemoteRead, 0x77);  // touched: resident
  std::unique_ptr<Connection> conn;
  std::unique_ptr<RawSocket> raw = RawAccepted(&conn);
  ASSERT_NE(conn, nullptr);
  // Reset the high-water mark (Linux: "5" > clear_refs); without it the
  // peak also counts what ran before.
  FILE* clear = std::fopen("/proc/self/clear_refs", "w");
  const bool reset = clear != nullptr && std::fputs("5", clear) >= 0 && std::fclose(clear) == 0;
  const size_t before = PeakRss();
  const Clock::time_point sent = Clock::now();
  for (uint64_t seq = 1; seq <= 8; ++seq) {
    tcp::FrameHeader read = tcp::MakeHeader(tcp::FrameType::kReadReq, seq);
    read.addr = big.mr->remote_addr();
    read.rkey = big.mr->rkey();
    read.op_len = tcp::kMaxOpBytes;
    raw->SendHeader(read);
  }
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*conn, &seen).code(), StatusCode::kUnavailable);
  EXPECT_GE(Clock::now() - sent, 300ms) << "closed before the peer could have read for frame_timeout";
  const size_t grown = PeakRss() - before;
  std::printf("peak RSS grew by %zu KiB while 8 x 64 MiB READs went undrained%s\n", grown >> 10,
              reset ? "" : " (peak not reset: figure includes earlier use)");
  if (reset) {
    EXPECT_LT(grown, size_t{32} << 20);
  }
}

// ------------------------------------ the unread-responses clock (stall_clock.h)

// Looks at a peer whose acknowledged count stays `acked`, each when the
// clock asks for it, until the limit is reached: the time it is reached
// (max() if never). *looks counts them.
Clock::time_point RunUntilReached(tcp::StallClock& clock, uint64_t acked, int* looks) {
  for (*looks = 1; *looks <= 1000; ++*looks) {
    const Clock::time_point t = clock.next_check();
    if (clock.Check(t, acked)) return t;
  }
  return Clock::time_point::max();
}

TEST(StallClockTest, APeerThatTakesNothingReachesTheLimitAtItNotBefore) {
  // Whatever the local kernel takes meanwhile (it may grow the socket's
  // buffer with the peer reading nothing): only acknowledgements count.
  const Clock::time_point t0 = Clock::time_point() + 1h;
  tcp::StallClock clock(300ms);
  EXPECT_FALSE(clock.running());
  EXPECT_EQ(clock.next_check(), Clock::time_point::max());
  clock.Start(t0, 5000);
  EXPECT_FALSE(clock.Check(t0 + 300ms - 1ns, 5000));
  int looks = 0;
  EXPECT_EQ(RunUntilReached(clock, 5000, &looks), t0 + 300ms);
  EXPECT_LE(looks, tcp::StallClock::kChecksPerLimit + 1);
}

TEST(StallClockTest, TheLimitRunsFromTheLastAcknowledgementNotFromACheck) {
  // The peer takes bytes just after the clock starts, then nothing. The
  // limit is reached `limit` after the look that saw them (within one
  // look's period of the acknowledgement), not `limit` after a check at
  // the limit: the 2x of a clock restarted by its own check.
  const Clock::time_point t0 = Clock::time_point() + 1h;
  const auto period = 300ms / tcp::StallClock::kChecksPerLimit;
  tcp::StallClock clock(300ms);
  clock.Start(t0, 0);
  const Clock::time_point acked_at = t0 + 1ms;
  const Clock::time_point seen_at = clock.next_check();
  EXPECT_LE(seen_at, acked_at + period);
  EXPECT_FALSE(clock.Check(seen_at, 4096));
  EXPECT_EQ(clock.since(), seen_at);
  int looks = 0;
  const Clock::time_point reached = RunUntilReached(clock, 4096, &looks);
  EXPECT_GE(reached, acked_at + 300ms);
  EXPECT_LE(reached, acked_at + 300ms + period);
}

TEST(StallClockTest, StartsOnceStopsAndStartsAgain) {
  const Clock::time_point t0 = Clock::time_point() + 1h;
  tcp::StallClock clock(300ms);
  clock.Start(t0, 1);
  clock.Start(t0 + 200ms, 1);  // running: still from t0
  EXPECT_EQ(clock.since(), t0);
  clock.Stop();
  EXPECT_FALSE(clock.Check(t0 + 1s, 1)) << "a stopped clock never reaches the limit";
  EXPECT_EQ(clock.next_check(), Clock::time_point::max());
  clock.Start(t0 + 1s, 1);
  EXPECT_FALSE(clock.Check(t0 + 1s + 299ms, 1));
  EXPECT_TRUE(clock.Check(t0 + 1s + 300ms, 1));
}

TEST_F(TcpTransportTest, ReadsBeyondTheLimitWaitAndAllComplete) {
  // More READs than kMaxReadsInFlight, and one larger than the queued
  // response limit, in one chain: all complete, in order, with the data.
  constexpr size_t kBig = 3 * tcp::kMaxQueuedResponseBytes + 12345;
  Buffer remote = MakeBuffer(*server_, kBig, kRemoteRead);
  for (size_t i = 0; i < kBig; ++i) remote.bytes[i] = static_cast<uint8_t>(i * 7 + (i >> 13));
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  constexpr int kSmall = 3 * tcp::kMaxReadsInFlight;
  Buffer local = MakeBuffer(*client_, kBig + kSmall * 64, kLocalWrite);
  std::vector<ReadOp> ops;
  for (int i = 0; i < kSmall; ++i) {
    ops.push_back(ReadOp{local.At(kBig + i * 64, 64), remote.Remote(i * 64), static_cast<uint64_t>(i), false});
  }
  ops.push_back(ReadOp{local.At(0, kBig), remote.Remote(), 999, true});
  ASSERT_TRUE(pair.client->PostReads(ops).ok());
  const Completion done = PollOne(*pair.client);
  ASSERT_TRUE(done.status.ok()) << done.status;
  EXPECT_EQ(done.wr_id, 999u);
  EXPECT_TRUE(std::equal(remote.bytes.begin(), remote.bytes.begin() + kBig, local.bytes.begin()));
  for (int i = 0; i < kSmall; ++i) {
    EXPECT_EQ(std::memcmp(local.bytes.data() + kBig + i * 64, remote.bytes.data() + i * 64, 64), 0) << i;
  }
}

// ------------------------------------------------- poll groups (tcp's own)

TEST_F(TcpTransportTest, AGroupMemberServesReadsBeyondTheLimitsAndLargeWrites) {
  // What the reader thread does with a peer that outruns its limits (pause
  // at kMaxReadsInFlight, stream a READ larger than the queued response
  // limit, resume as the peer reads), the group does for a member.
  constexpr size_t kBig = 3 * tcp::kMaxQueuedResponseBytes + 12345;
  Buffer remote = MakeBuffer(*server_, kBig, kRemoteRead | kRemoteWrite | kLocalWrite);
  for (size_t i = 0; i < kBig; ++i) remote.bytes[i] = static_cast<uint8_t>(i * 7 + (i >> 13));
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  std::unique_ptr<PollGroup> group = NewGroup();
  ASSERT_NE(group, nullptr);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(recv.At(0, 64), 9).ok()); }, {}, {},
                          group.get());
  ASSERT_NE(pair.client, nullptr);
  constexpr int kSmall = 3 * tcp::kMaxReadsInFlight;
  Buffer local = MakeBuffer(*client_, kBig + kSmall * 64, kLocalWrite);
  std::vector<uint8_t> expected(remote.bytes.begin(), remote.bytes.begin() + kBig);
  std::atomic<bool> done{false};
  std::thread client([&] {
    std::vector<ReadOp> ops;
    for (int i = 0; i < kSmall; ++i) {
      ops.push_back(ReadOp{local.At(kBig + i * 64, 64), remote.Remote(i * 64), static_cast<uint64_t>(i), false});
    }
    ops.push_back(ReadOp{local.At(0, kBig), remote.Remote(), 999, true});
    ASSERT_TRUE(pair.client->PostReads(ops).ok());
    const Completion read = PollOne(*pair.client);
    ASSERT_TRUE(read.status.ok()) << read.status;
    EXPECT_EQ(read.wr_id, 999u);
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), local.bytes.begin()));
    for (int i = 0; i < kSmall; ++i) {
      EXPECT_EQ(std::memcmp(local.bytes.data() + kBig + i * 64, expected.data() + i * 64, 64), 0) << i;
    }
    // Then a large WRITE and the SEND after it.
    for (size_t i = 0; i < kBig; ++i) local.bytes[i] = static_cast<uint8_t>(i * 13);
    ASSERT_TRUE(pair.client->PostWriteSend(local.At(0, kBig), remote.Remote(), local.At(0, 16), 2).ok());
    EXPECT_TRUE(PollOne(*pair.client).status.ok());
    done.store(true);
  });
  Connection* ready[4];
  Completion out[4];
  bool received = false;
  const auto deadline = Clock::now() + kWait;
  while (!(done.load() && received) && Clock::now() < deadline) {
    StatusOr<size_t> n = group->Wait(ready, 10ms);
    ASSERT_TRUE(n.ok()) << n.status();
    for (size_t r = 0; r < *n; ++r) {
      StatusOr<size_t> got = ready[r]->Poll(out, 0us);
      ASSERT_TRUE(got.ok()) << got.status();
      for (size_t k = 0; k < *got; ++k) {
        EXPECT_EQ(out[k].wr_id, 9u);
        EXPECT_TRUE(out[k].status.ok()) << out[k].status;
        received = true;
      }
    }
  }
  if (!done.load()) pair.server->Disconnect();
  client.join();
  ASSERT_TRUE(received);
  EXPECT_TRUE(std::equal(remote.bytes.begin(), remote.bytes.end(), local.bytes.begin()));
}

TEST_F(TcpTransportTest, AGroupMembersPostReadsAndWaitIsRefusedAndPostsNothing) {
  std::unique_ptr<PollGroup> group = NewGroup();
  ASSERT_NE(group, nullptr);
  Pair pair = ConnectPair({}, {}, {}, group.get());
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*server_, 64, kLocalWrite);
  Buffer remote = MakeBuffer(*client_, 64, kRemoteRead);
  const ReadOp op{local.At(0, 64), remote.Remote(), 1, true};
  std::vector<Completion> others;
  EXPECT_EQ(pair.server->PostReadsAndWait({&op, 1}, 1s, &others).code(), StatusCode::kFailedPrecondition);
  Completion out[1];
  StatusOr<size_t> n = pair.server->Poll(out, 0us);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u) << "nothing was posted";
}

TEST_F(TcpTransportTest, AnIdleGroupMemberIsClosed) {
  server_options_.idle_timeout = 200ms;
  SetUp();
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  std::unique_ptr<PollGroup> group = NewGroup();
  ASSERT_NE(group, nullptr);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(recv.At(0, 64), 4).ok()); }, {}, {},
                          group.get());
  ASSERT_NE(pair.client, nullptr);
  // A busy member beside it is not closed.
  Pair busy = ConnectPair({}, {}, {}, group.get());
  ASSERT_NE(busy.client, nullptr);
  Buffer table = MakeBuffer(*server_, 64, kRemoteRead);
  Buffer local = MakeBuffer(*client_, 64, kLocalWrite);
  std::atomic<bool> stop{false};
  std::atomic<bool> reader_done{false};
  std::thread reader([&] {
    // READs keep the busy member's peer sending frames, paced by the
    // sleep: a frame every few ms, far inside the idle timeout.
    while (!stop.load()) {
      const ReadOp op{local.At(0, 64), table.Remote(), 1, true};
      if (!busy.client->PostReads({&op, 1}).ok() || !PollOne(*busy.client).status.ok()) break;
      std::this_thread::sleep_for(5ms);
    }
    reader_done.store(true);
  });
  std::vector<Completion> seen;
  const Status ended = ServeUntilFailed(*group, *pair.server, &seen);
  stop.store(true);
  // The group's members are served only inside Wait: keep serving until
  // the reader has its last READ back, however late it was posted.
  Connection* ready[4];
  const auto deadline = Clock::now() + kWait;
  while (!reader_done.load() && Clock::now() < deadline) {
    if (!group->Wait(ready, 10ms).ok()) break;
  }
  reader.join();
  EXPECT_EQ(ended.code(), StatusCode::kUnavailable) << ended;
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].status.code(), StatusCode::kUnavailable) << "the receive is flushed";
  EXPECT_EQ(PollUntilFailed(*pair.client, &seen).code(), StatusCode::kUnavailable);
  Completion out[1];
  EXPECT_TRUE(busy.server->Poll(out, 0us).ok()) << "the busy member is open";
}

TEST_F(TcpTransportTest, AFrameLeftIncompleteClosesTheGroupMember) {
  server_options_.frame_timeout = 200ms;
  SetUp();
  std::unique_ptr<PollGroup> group = NewGroup();
  ASSERT_NE(group, nullptr);
  auto raw = std::make_unique<RawSocket>(listener_->address());
  tcp::FrameHeader hello = tcp::MakeHeader(tcp::FrameType::kConnect, 0);
  hello.addr = tcp::kHelloMagic;
  raw->SendHeader(hello);
  std::unique_ptr<Connection> conn;
  const auto deadline = Clock::now() + kWait;
  while (conn == nullptr && Clock::now() < deadline) {
    StatusOr<std::unique_ptr<Connection>> next = listener_->Next(100ms, JoinAll(group.get()));
    ASSERT_TRUE(next.ok()) << next.status();
    conn = std::move(*next);
  }
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(conn->Accept({}).ok());
  tcp::FrameHeader accept;
  ASSERT_TRUE(raw->ReadHeader(&accept));
  tcp::FrameHeader send = tcp::MakeHeader(tcp::FrameType::kSend, 1);
  send.payload_len = 100;
  raw->SendHeader(send);
  raw->Send("half", 4);
  std::vector<Completion> seen;
  EXPECT_EQ(ServeUntilFailed(*group, *conn, &seen).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(raw->WaitClosed());
}

TEST_F(TcpTransportTest, AGroupMemberThatRefusedAnAccessIsDroppedAndItsPeerToldWhy) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 0x5a);
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  std::unique_ptr<PollGroup> group = NewGroup();
  ASSERT_NE(group, nullptr);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(recv.At(0, 64), 42).ok()); }, {}, {},
                          group.get());
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 256, kLocalWrite);
  const ReadOp op{local.At(0, 64), table.Remote(8192), 7, true};
  ASSERT_TRUE(pair.client->PostReads({&op, 1}).ok());
  std::vector<Completion> server_seen;
  EXPECT_EQ(ServeUntilFailed(*group, *pair.server, &server_seen).code(), StatusCode::kUnavailable);
  ASSERT_EQ(server_seen.size(), 1u);
  EXPECT_EQ(server_seen[0].wr_id, 42u);
  // The peer reads the refusal while the member is still there (its
  // socket is served by the group until the peer closes) or lingering.
  std::vector<Completion> seen;
  std::thread client([&] { EXPECT_EQ(PollUntilFailed(*pair.client, &seen).code(), StatusCode::kUnavailable); });
  pair.server.reset();
  client.join();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen[0].status.code(), StatusCode::kPermissionDenied) << seen[0].status;
  EXPECT_EQ(group->size(), 0u);
}

// HoldSends holds: a member's SENDs posted on the group's thread between
// HoldSends and ReleaseSends are not written before ReleaseSends (tcp
// writes them then, together). A post from another thread is not held; it
// writes what waits before it, in order.
TEST_F(TcpTransportTest, SendsHeldByTheGroupLeaveOnlyAtRelease) {
  Buffer msgs = MakeBuffer(*server_, 32, 0);
  std::memset(msgs.bytes.data(), 'a', 16);
  std::memset(msgs.bytes.data() + 16, 'b', 16);
  std::unique_ptr<PollGroup> group = NewGroup();
  ASSERT_NE(group, nullptr);
  Pair pair = ConnectPair({}, {}, {}, group.get());
  ASSERT_NE(pair.client, nullptr);
  Buffer inbox = MakeBuffer(*client_, 4 * 16, kLocalWrite);
  for (uint64_t k = 0; k < 4; ++k) ASSERT_TRUE(pair.client->PostRecv(inbox.At(k * 16, 16), k).ok());
  group->HoldSends();
  for (uint64_t k = 0; k < 3; ++k) ASSERT_TRUE(pair.server->PostSend(msgs.At(0, 16), 10 + k).ok());
  Completion out[4];
  // Nothing was written: the client, serving its socket, finds nothing.
  StatusOr<size_t> early = pair.client->Poll(out, 50ms);
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(*early, 0u) << "a held send reached the peer before ReleaseSends";
  std::thread other([&] { ASSERT_TRUE(pair.server->PostSend(msgs.At(16, 16), 20).ok()); });
  other.join();
  group->ReleaseSends();
  size_t got = 0;
  const auto deadline = Clock::now() + kWait;
  while (got < 4 && Clock::now() < deadline) {
    StatusOr<size_t> n = pair.client->Poll(out, 100ms);
    ASSERT_TRUE(n.ok()) << n.status();
    got += *n;
  }
  ASSERT_EQ(got, 4u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(inbox.bytes.data()), 64),
            std::string(48, 'a') + std::string(16, 'b'))
      << "the held SENDs first, in order, then the other thread's";
  Connection* ready[1];
  size_t sends = 0;
  while (sends < 4 && Clock::now() < deadline) {
    StatusOr<size_t> n = group->Wait(ready, 10ms);
    ASSERT_TRUE(n.ok()) << n.status();
    if (*n == 0) continue;
    StatusOr<size_t> polled = ready[0]->Poll(out, 0us);
    ASSERT_TRUE(polled.ok()) << polled.status();
    sends += *polled;
  }
  EXPECT_EQ(sends, 4u);
}

}  // namespace
}  // namespace rkv::transport
