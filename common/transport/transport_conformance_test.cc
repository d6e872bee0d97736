// The transport contract (transport_conformance_test_fixture.h):
// transports, listeners and the handshake; and the instantiation of
// TransportTest over the transports under test, which runs the TEST_Ps of
// every file of the suite.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <atomic>
#include <future>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include "common/net_address.h"
#include "common/transport/transport_conformance_test_fixture.h"

namespace rkv::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::BaseName;
using testing::Buffer;
using testing::kWait;
using testing::MakeBuffer;
using testing::NamePart;
using testing::PollOne;
using testing::PollUntilFailed;
using testing::TransportsUnderTest;

std::string TransportTestName(const ::testing::TestParamInfo<std::string>& info) { return NamePart(info.param); }

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest, ::testing::ValuesIn(TransportsUnderTest()), TransportTestName);

// ---------------------------------------------------- transports, listeners

TEST_P(TransportTest, KindIsTheImplementations) {
  EXPECT_EQ(server_->kind(), kind_);
  EXPECT_EQ(client_->kind(), kind_);
  // Only the tcp emulation serves one-sided operations on the target's CPU.
  EXPECT_EQ(server_->one_sided_uses_target_cpu(), kind_ == Kind::kTcp);
  EXPECT_EQ(KindName(kind_), BaseName(name_));
}

TEST_P(TransportTest, ListenerReportsTheAddressItBound) {
  const std::string address = listener_->address();
  EXPECT_EQ(address.rfind(host_ + ":", 0), 0u) << address;
  std::string host;
  uint16_t port = 0;
  ASSERT_TRUE(ParseHostPort(address, &host, &port).ok()) << address;
  EXPECT_NE(port, 0) << "port 0 asked for, so the bound one is reported";
}

TEST_P(TransportTest, NextReturnsNothingWhenNoRequestCameInTime) {
  StatusOr<std::unique_ptr<Connection>> next = listener_->Next(10ms);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, nullptr);
}

TEST_P(TransportTest, ShutdownWakesNextAndLaterCallsAreCancelled) {
  auto waiting = std::async(std::launch::async, [&] { return listener_->Next(std::chrono::hours(1)); });
  listener_->Shutdown();
  EXPECT_EQ(waiting.get().status().code(), StatusCode::kCancelled);
  EXPECT_EQ(listener_->Next(0ms).status().code(), StatusCode::kCancelled);
  EXPECT_EQ(listener_->Next(1h).status().code(), StatusCode::kCancelled);
}

TEST_P(TransportTest, RegisterCoversTheCallersMemory) {
  std::vector<uint8_t> mem(8192);
  StatusOr<std::unique_ptr<MemoryRegion>> a = server_->Register(mem.data(), 4096, kRemoteRead);
  StatusOr<std::unique_ptr<MemoryRegion>> b =
      server_->Register(mem.data() + 4096, 4096, kLocalWrite | kRemoteRead | kRemoteWrite);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*a)->data(), mem.data());
  EXPECT_EQ((*a)->size(), 4096u);
  EXPECT_EQ((*a)->remote_addr(), reinterpret_cast<uint64_t>(mem.data()));
  EXPECT_EQ((*b)->remote_addr(), reinterpret_cast<uint64_t>(mem.data() + 4096));
  EXPECT_NE((*a)->rkey(), (*b)->rkey());
  // Empty ranges and unknown access bits are refused.
  EXPECT_EQ(server_->Register(nullptr, 64, kRemoteRead).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(server_->Register(mem.data(), 0, kRemoteRead).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(server_->Register(mem.data(), 64, 1u << 9).status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------- handshake

TEST_P(TransportTest, PrivateDataTravelsBothWays) {
  const std::vector<uint8_t> hello = Bytes("client hello with a token digest");
  const std::vector<uint8_t> reply = Bytes("server reply with region descriptors");
  std::vector<uint8_t> seen_by_server;
  std::string server_sees_peer;
  Pair pair = ConnectPair(
      [&](Connection& c) {
        seen_by_server.assign(c.peer_private_data().begin(), c.peer_private_data().end());
        server_sees_peer = c.peer_address();
      },
      hello, reply);
  ASSERT_NE(pair.client, nullptr);
  // IB/RoCE pad private data: at least what was sent arrives.
  EXPECT_TRUE(StartsWith(seen_by_server, hello));
  EXPECT_TRUE(StartsWith(pair.client->peer_private_data(), reply));
  EXPECT_FALSE(server_sees_peer.empty());
  EXPECT_EQ(pair.client->peer_address(), listener_->address());
}

TEST_P(TransportTest, PrivateDataUpToTheLimitsIsCarriedAndMoreIsRefused) {
  const std::vector<uint8_t> too_much(kMaxConnectPrivateData + 1, 1);
  EXPECT_EQ(client_->Connect(listener_->address(), too_much, kWait).status().code(), StatusCode::kInvalidArgument);

  std::vector<uint8_t> hello(kMaxConnectPrivateData);
  for (size_t i = 0; i < hello.size(); ++i) hello[i] = static_cast<uint8_t>(0xa0 + i);
  std::vector<uint8_t> reply(kMaxAcceptPrivateData);
  for (size_t i = 0; i < reply.size(); ++i) reply[i] = static_cast<uint8_t>(255 - i);
  bool hello_arrived = false;
  Pair pair = ConnectPair(
      [&](Connection& c) {
        hello_arrived = StartsWith(c.peer_private_data(), hello);
        // Too long a reply is refused, and the connection stays pending.
        const std::vector<uint8_t> too_long(kMaxAcceptPrivateData + 1, 2);
        EXPECT_EQ(c.Accept(too_long).code(), StatusCode::kInvalidArgument);
      },
      hello, reply);
  ASSERT_NE(pair.client, nullptr);
  EXPECT_TRUE(hello_arrived);
  EXPECT_TRUE(StartsWith(pair.client->peer_private_data(), reply));
}

TEST_P(TransportTest, RejectRefusesTheConnectionWithTheServersReason) {
  struct Case {
    StatusCode why;
    StatusCode connect_fails_with;
  };
  // UNAVAILABLE is transient (worth retrying); RESOURCE_EXHAUSTED (no
  // connection slot left) keeps its code; any other reason is a refusal.
  const Case cases[] = {{StatusCode::kUnauthenticated, StatusCode::kPermissionDenied},
                        {StatusCode::kPermissionDenied, StatusCode::kPermissionDenied},
                        {StatusCode::kResourceExhausted, StatusCode::kResourceExhausted},
                        {StatusCode::kUnavailable, StatusCode::kUnavailable}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(StatusCodeName(c.why)));
    auto connecting = ConnectAsync(Bytes("hi"));
    std::unique_ptr<Connection> pending = NextPending();
    ASSERT_NE(pending, nullptr);
    pending->Reject({c.why, "token digest does not match"});
    StatusOr<std::unique_ptr<Connection>> connected = connecting.get();
    EXPECT_EQ(connected.status().code(), c.connect_fails_with) << connected.status();
    EXPECT_NE(connected.status().message().find("token digest does not match"), std::string::npos)
        << connected.status();
    // A rejected connection is unusable.
    EXPECT_FALSE(pending->Accept({}).ok());
  }
  // No reason at all is not a transient one.
  {
    auto connecting = ConnectAsync();
    std::unique_ptr<Connection> pending = NextPending();
    ASSERT_NE(pending, nullptr);
    pending->Reject({});
    const Status refused = connecting.get().status();
    EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused;
  }
  // The reason's text is cut to kRejectionTextBytes - 1 bytes.
  const std::string kept(kRejectionTextBytes - 1, 'r');
  auto connecting = ConnectAsync();
  std::unique_ptr<Connection> pending = NextPending();
  ASSERT_NE(pending, nullptr);
  pending->Reject({StatusCode::kPermissionDenied, kept + "#cut#"});
  const Status refused = connecting.get().status();
  EXPECT_NE(refused.message().find(kept), std::string::npos) << refused;
  EXPECT_EQ(refused.message().find("#cut#"), std::string::npos) << refused;
}

TEST_P(TransportTest, ARejectionsCodeTextAndDetailReachTheConnectingSide) {
  const std::vector<uint8_t> detail = {0, 1, 2, 3, 0xfe, 0xff, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0};
  ASSERT_EQ(detail.size(), kMaxRejectionDetailBytes);
  Rejection got{StatusCode::kOk, "untouched", {}};
  auto connecting = std::async(std::launch::async, [&] {
    return client_->Connect(listener_->address(), Bytes("hello"), testing::kWait, &got);
  });
  std::unique_ptr<Connection> pending = NextPending();
  ASSERT_NE(pending, nullptr);
  pending->Reject({StatusCode::kUnauthenticated, "answer the challenge", detail});
  const Status refused = connecting.get().status();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused;
  EXPECT_EQ(got.code, StatusCode::kUnauthenticated);
  EXPECT_EQ(got.text, "answer the challenge");
  EXPECT_EQ(got.detail, detail);

  // Without a detail, none arrives; a refusal that is no Rejection (nothing
  // listens) leaves `rejected` as it was.
  got = {StatusCode::kOk, "untouched", {9}};
  auto again = std::async(std::launch::async, [&] {
    return client_->Connect(listener_->address(), Bytes("hello"), testing::kWait, &got);
  });
  pending = NextPending();
  ASSERT_NE(pending, nullptr);
  pending->Reject({StatusCode::kPermissionDenied, "no"});
  EXPECT_FALSE(again.get().ok());
  EXPECT_EQ(got.code, StatusCode::kPermissionDenied);
  EXPECT_EQ(got.text, "no");
  EXPECT_TRUE(got.detail.empty());

  const std::string address = listener_->address();
  listener_.reset();
  got = {StatusCode::kOk, "untouched", {9}};
  EXPECT_FALSE(client_->Connect(address, Bytes("hello"), testing::kWait, &got).ok());
  EXPECT_EQ(got.text, "untouched");
  EXPECT_EQ(got.detail, std::vector<uint8_t>{9});
}

// A request the Screen refuses gets the Screen's Rejection (code, text,
// detail) and nothing is made for it: Next hands nothing out and the
// listener counts it screened out, not created. A request the Screen lets
// on is placed and handed out as without one.
TEST_P(TransportTest, AScreenedOutRequestGetsItsRejectionAndCreatesNothing) {
  const std::vector<uint8_t> detail = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  std::vector<std::string> peers;
  const Listener::Screen screen = [&](std::span<const uint8_t> data,
                                      const std::string& peer) -> std::optional<Rejection> {
    peers.push_back(peer);
    const std::string text(data.begin(), std::find(data.begin(), data.end(), uint8_t{0}));
    if (text == "let me in") return std::nullopt;
    return Rejection{StatusCode::kUnauthenticated, "screened out", detail};
  };
  const ListenerCounters before = listener_->counters();
  Rejection got{StatusCode::kOk, "untouched", {}};
  auto refused = std::async(std::launch::async, [&] {
    return client_->Connect(listener_->address(), Bytes("not me"), testing::kWait, &got);
  });
  const auto deadline = Clock::now() + testing::kWait;
  while (refused.wait_for(0s) != std::future_status::ready && Clock::now() < deadline) {
    StatusOr<std::unique_ptr<Connection>> next = listener_->Next(100ms, screen, Listener::GroupChooser());
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(*next, nullptr) << "a screened-out request was handed out";
  }
  const Status status = refused.get().status();
  EXPECT_EQ(status.code(), StatusCode::kPermissionDenied) << status;
  EXPECT_EQ(got.code, StatusCode::kUnauthenticated);
  EXPECT_EQ(got.text, "screened out");
  EXPECT_EQ(got.detail, detail);
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers[0].rfind(host_ + ":", 0), 0u) << peers[0];
  const ListenerCounters after = listener_->counters();
  EXPECT_EQ(after.screened_out, before.screened_out + 1);
  EXPECT_EQ(after.created, before.created) << "the listener made a connection for a screened-out request";
  EXPECT_EQ(after.source_limited, before.source_limited);

  auto admitted = std::async(std::launch::async, [&] {
    return client_->Connect(listener_->address(), Bytes("let me in"), testing::kWait);
  });
  std::unique_ptr<Connection> pending;
  while (pending == nullptr && Clock::now() < deadline) {
    StatusOr<std::unique_ptr<Connection>> next = listener_->Next(100ms, screen, Listener::GroupChooser());
    ASSERT_TRUE(next.ok()) << next.status();
    pending = std::move(*next);
  }
  ASSERT_NE(pending, nullptr);
  ASSERT_TRUE(pending->Accept({}).ok());
  EXPECT_TRUE(admitted.get().ok());
  EXPECT_EQ(listener_->counters().created, after.created + 1);
}

// A source address over Options::max_refusals_per_source refusals within
// a second is refused UNAVAILABLE without being screened.
TEST_P(TransportTest, ASourceOverItsRefusalLimitIsRefusedUnscreened) {
  Options options;
  options.max_refusals_per_source = 2;
  StatusOr<std::unique_ptr<Transport>> limited = testing::MakeTransport(name_, options);
  ASSERT_TRUE(limited.ok()) << limited.status();
  StatusOr<std::unique_ptr<Listener>> listener = (*limited)->Listen(host_ + ":0");
  ASSERT_TRUE(listener.ok()) << listener.status();
  std::atomic<int> screened{0};
  std::atomic<bool> stop{false};
  std::thread accepting([&] {
    const Listener::Screen refuse_all = [&](std::span<const uint8_t>, const std::string&) {
      ++screened;
      return std::optional<Rejection>(Rejection{StatusCode::kPermissionDenied, "no"});
    };
    while (!stop) {
      StatusOr<std::unique_ptr<Connection>> next = (*listener)->Next(50ms, refuse_all, Listener::GroupChooser());
      if (!next.ok() || *next != nullptr) ADD_FAILURE() << "Next handed out a connection or failed";
    }
  });
  // Requests until one is refused for its source (within one second of
  // two refusals: the first three requests, unless a request takes a
  // second), at most 50.
  bool limited_seen = false;
  for (int i = 0; i < 50 && !limited_seen; ++i) {
    Rejection got;
    const Status s = client_->Connect((*listener)->address(), Bytes("x"), testing::kWait, &got).status();
    EXPECT_FALSE(s.ok());
    if (got.code == StatusCode::kUnavailable) {
      limited_seen = true;
      EXPECT_NE(got.text.find("too many refused connection requests from " + host_), std::string::npos) << got.text;
    }
  }
  stop = true;
  accepting.join();
  EXPECT_TRUE(limited_seen);
  const ListenerCounters c = (*listener)->counters();
  EXPECT_GE(c.source_limited, 1u);
  EXPECT_EQ(c.screened_out, static_cast<uint64_t>(screened.load()));
  EXPECT_EQ(c.created, 0u);
}

TEST_P(TransportTest, DroppingAPendingConnectionFailsItsConnectAsUnavailable) {
  auto connecting = ConnectAsync();
  std::unique_ptr<Connection> pending = NextPending();
  ASSERT_NE(pending, nullptr);
  pending.reset();
  EXPECT_EQ(connecting.get().status().code(), StatusCode::kUnavailable);
}

TEST_P(TransportTest, ConnectWhereNothingListensIsUnavailable) {
  StatusOr<std::unique_ptr<Listener>> other = server_->Listen(host_ + ":0");
  ASSERT_TRUE(other.ok()) << other.status();
  const std::string address = (*other)->address();
  other->reset();  // nothing listens there any more
  const Status refused = client_->Connect(address, {}, kWait).status();
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused;
  EXPECT_EQ(client_->Connect(host_, {}, kWait).status().code(), StatusCode::kInvalidArgument)
      << "an address without a port";
}

TEST_P(TransportTest, ConnectTimesOutWhenNobodyAnswers) {
  // The listener is never asked for the request, so nobody answers it.
  const Status unanswered = client_->Connect(listener_->address(), {}, 1s).status();
  EXPECT_EQ(unanswered.code(), StatusCode::kDeadlineExceeded) << unanswered;
}

TEST_P(TransportTest, APendingConnectionTakesReceivesButNoOtherWork) {
  Buffer msgs = MakeBuffer(*server_, 128, kLocalWrite);
  Buffer table = MakeBuffer(*client_, 64, kRemoteRead, 7);
  Private ring{std::vector<uint8_t>(64)};
  auto connecting = ConnectAsync();
  std::unique_ptr<Connection> pending = NextPending();
  ASSERT_NE(pending, nullptr);
  ring.Register(*pending, kLocalWrite | kRemoteWrite);
  const ReadOp read{msgs.At(0, 8), table.Remote(), 1, true};
  EXPECT_EQ(pending->PostReads({&read, 1}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pending->PostSend(msgs.At(64, 8), 2).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pending->PostWriteSend(msgs.At(64, 8), RemoteBuf{}, msgs.At(72, 8), 3).code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(pending->PostRecv(msgs.At(0, 64), 4).ok());
  ASSERT_TRUE(pending->Accept({}).ok());
  StatusOr<std::unique_ptr<Connection>> client = connecting.get();
  ASSERT_TRUE(client.ok()) << client.status();
  // Private memory only before Accept.
  std::vector<uint8_t> late(64);
  EXPECT_EQ(pending->RegisterPrivate(late.data(), late.size(), kRemoteRead).status().code(),
            StatusCode::kFailedPrecondition);
  // The receive posted before Accept takes the first message.
  Buffer out = MakeBuffer(*client_, 64, 0);
  std::memcpy(out.bytes.data(), "first", 5);
  ASSERT_TRUE((*client)->PostSend(out.At(0, 5), 9).ok());
  const Completion received = PollOne(*pending);
  ASSERT_TRUE(received.status.ok()) << received.status;
  EXPECT_EQ(received.op, OpType::kRecv);
  EXPECT_EQ(received.wr_id, 4u);
  EXPECT_EQ(received.byte_len, 5u);
  EXPECT_EQ(std::memcmp(msgs.bytes.data(), "first", 5), 0);
  EXPECT_TRUE(PollOne(**client).status.ok());
}

}  // namespace
}  // namespace rkv::transport
