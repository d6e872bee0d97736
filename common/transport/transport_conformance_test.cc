// The transport contract, tested once for every transport: each test checks
// a promise of common/transport/transport.h, against each transport that
// $RKV_TRANSPORTS names (comma-separated; default "tcp,fault(tcp)"):
//   tcp          the tcp transport, on 127.0.0.1;
//   verbs        the verbs transport, on $RKV_RDMA_ADDR (an address of an
//                RDMA device: tests/verbs_suite.sh runs it in the SoftRoCE
//                guest);
//   fault(KIND)  a FaultTransport (fault/fault_transport.h) with no fault
//                set, around KIND: the wrapper must change nothing.
// A transport that cannot be made here (verbs without a device or without
// $RKV_RDMA_ADDR, a name that is none of these) fails every test of its
// instance; it is never skipped.
//
// What only one transport does (tcp's framing and limits, verbs' devices,
// GIDs, memory windows and CM) is tested beside it, in tcp/ and verbs/.
//
// Server and client are two transports in one process (two protection
// domains for verbs), as two processes would be. The client's send queue is
// small (16 work requests), so that the tests wrap it. No test asserts how
// long anything takes: kWait only bounds how long a broken transport can
// hang a test.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/net_address.h"
#include "common/transport/factory.h"
#include "common/transport/fault/fault_transport.h"
#include "common/transport/transport.h"
#include "common/transport/transport_test_util.h"
#include "common/transport/transports_under_test.h"
#include "common/transport/verbs/verbs_connection.h"

namespace rkv::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::BaseName;
using testing::Buffer;
using testing::kWait;
using testing::MakeBuffer;
using testing::MakeTransport;
using testing::NamePart;
using testing::PollOne;
using testing::PollUntilFailed;
using testing::TransportsUnderTest;

constexpr uint32_t kClientSendDepth = 16;

// ------------------------------------------------------------------ helpers

std::vector<uint8_t> Bytes(std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }

bool StartsWith(std::span<const uint8_t> data, std::span<const uint8_t> prefix) {
  return data.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), data.begin());
}

// Whether a connection-private region of `server_side` is closed to other
// connections. It always is, but on a verbs device without type 2 memory
// windows, where private regions are plain MRs (the weaker fallback that
// verbs/verbs_connection.h documents).
bool PrivateRegionsAreEnforced(Connection& server_side) {
  Connection* c = &server_side;
  while (Connection* inner = fault::WrappedConnection(*c)) c = inner;
  const auto* verbs_connection = dynamic_cast<const verbs::VerbsConnection*>(c);
  return verbs_connection == nullptr || verbs_connection->uses_memory_windows();
}

// A connection-private region (server side, before Accept).
struct Private {
  std::vector<uint8_t> bytes;
  MemoryRegion* mr = nullptr;
  RemoteBuf Remote(size_t offset = 0) const { return RemoteBuf{mr->remote_addr() + offset, mr->rkey()}; }
  void Register(Connection& c, uint32_t access) {
    StatusOr<MemoryRegion*> r = c.RegisterPrivate(bytes.data(), bytes.size(), access);
    ASSERT_TRUE(r.ok()) << r.status();
    mr = *r;
  }
};

// ------------------------------------------------------------------ fixture

class ConformanceTest : public ::testing::Test {
 protected:
  // Makes server and client transports of `name` and a listener.
  void Start(const std::string& name) {
    name_ = name;
    StatusOr<std::unique_ptr<Transport>> server = MakeTransport(name, Options{});
    ASSERT_TRUE(server.ok()) << name << ": " << server.status();
    server_ = std::move(*server);
    StatusOr<std::unique_ptr<Transport>> client = MakeTransport(name, ClientOptions());
    ASSERT_TRUE(client.ok()) << name << ": " << client.status();
    client_ = std::move(*client);
    if (BaseName(name) == "verbs") {
      const char* addr = std::getenv("RKV_RDMA_ADDR");
      ASSERT_NE(addr, nullptr) << "the verbs instance needs $RKV_RDMA_ADDR, an address of the RDMA device";
      host_ = addr;
      kind_ = Kind::kVerbs;
    } else {
      host_ = "127.0.0.1";
      kind_ = Kind::kTcp;
    }
    StatusOr<std::unique_ptr<Listener>> listener = server_->Listen(host_ + ":0");
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = std::move(*listener);
  }

  static Options ClientOptions() {
    Options options;
    options.max_send_wr = kClientSendDepth;
    return options;
  }

  std::unique_ptr<Connection> NextPending() { return testing::NextPending(*listener_); }

  struct Pair {
    std::unique_ptr<Connection> server;
    std::unique_ptr<Connection> client;
  };

  // Connects a client of `client` (client_ when null) and accepts it;
  // `setup` runs on the pending server side before Accept (private
  // memory, receives).
  Pair ConnectPair(const std::function<void(Connection&)>& setup = {}, std::span<const uint8_t> hello = {},
                   std::span<const uint8_t> reply = {}, Transport* client = nullptr) {
    Transport& from = client != nullptr ? *client : *client_;
    Pair pair;
    auto connecting = std::async(std::launch::async, [&] { return from.Connect(listener_->address(), hello, kWait); });
    pair.server = NextPending();
    if (pair.server != nullptr) {
      if (setup) setup(*pair.server);
      const Status accepted = pair.server->Accept(reply);
      EXPECT_TRUE(accepted.ok()) << accepted;
    }
    StatusOr<std::unique_ptr<Connection>> connected = connecting.get();
    EXPECT_TRUE(connected.ok()) << connected.status();
    if (connected.ok()) pair.client = std::move(*connected);
    return pair;
  }

  // Starts a Connect that the test answers (or not) itself.
  std::future<StatusOr<std::unique_ptr<Connection>>> ConnectAsync(std::vector<uint8_t> hello = {}) {
    return std::async(std::launch::async, [this, hello = std::move(hello)] {
      return client_->Connect(listener_->address(), hello, kWait);
    });
  }

  std::string name_;
  Kind kind_ = Kind::kTcp;
  std::string host_;
  std::unique_ptr<Transport> server_;
  std::unique_ptr<Transport> client_;
  std::unique_ptr<Listener> listener_;
};

class TransportTest : public ConformanceTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override { Start(GetParam()); }
};

std::string TransportTestName(const ::testing::TestParamInfo<std::string>& info) { return NamePart(info.param); }

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest, ::testing::ValuesIn(TransportsUnderTest()), TransportTestName);

// ---------------------------------------------------- transports, listeners

TEST_P(TransportTest, KindIsTheImplementations) {
  EXPECT_EQ(server_->kind(), kind_);
  EXPECT_EQ(client_->kind(), kind_);
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

// ---------------------------------------------------------------- data path

TEST_P(TransportTest, AReadListReportsOnlyItsSignaledReads) {
  Buffer table = MakeBuffer(*server_, 64 * 1024, kRemoteRead);
  for (size_t i = 0; i < table.bytes.size(); ++i) table.bytes[i] = static_cast<uint8_t>(i * 7 + i / 256);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 16 * 1024, kLocalWrite);
  // Eight READs of different sizes and offsets, up to the region's last
  // byte; only the last is signaled.
  const size_t sizes[] = {1, 63, 64, 100, 1000, 1024, 2048, 3000};
  const size_t offsets[] = {0, 7, 4096, 333, 60000, 12345, 20000, 64 * 1024 - 3000};
  std::vector<ReadOp> ops;
  size_t at = 0;
  for (size_t i = 0; i < 8; ++i) {
    ops.push_back(ReadOp{local.At(at, static_cast<uint32_t>(sizes[i])), table.Remote(offsets[i]), 100 + i, i == 7});
    at += sizes[i];
  }
  ASSERT_TRUE(pair.client->PostReads(ops).ok());
  const Completion done = PollOne(*pair.client);
  ASSERT_TRUE(done.status.ok()) << done.status;
  EXPECT_EQ(done.wr_id, 107u);
  EXPECT_EQ(done.op, OpType::kRead);
  at = 0;
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(std::memcmp(local.bytes.data() + at, table.bytes.data() + offsets[i], sizes[i]), 0) << "READ " << i;
    at += sizes[i];
  }
  Completion more[4];
  StatusOr<size_t> n = pair.client->Poll(more, 0us);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u) << "the unsignaled READs make no completion";
}

TEST_P(TransportTest, CompletionsComeInPostOrder) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 3);
  Buffer inbox = MakeBuffer(*server_, 256, kLocalWrite);
  Private ring{std::vector<uint8_t>(1024)};
  Pair pair = ConnectPair([&](Connection& c) {
    ring.Register(c, kLocalWrite | kRemoteWrite);
    ASSERT_TRUE(c.PostRecv(inbox.At(0, 64), 50).ok());
    ASSERT_TRUE(c.PostRecv(inbox.At(64, 64), 51).ok());
  });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 4096, kLocalWrite, 9);
  ASSERT_TRUE(pair.client->PostSend(local.At(0, 16), 1).ok());
  const ReadOp first{local.At(1024, 512), table.Remote(0), 2, true};
  ASSERT_TRUE(pair.client->PostReads({&first, 1}).ok());
  const ReadOp list[] = {{local.At(2048, 512), table.Remote(512), 3, false},
                         {local.At(2560, 512), table.Remote(1024), 4, true}};
  ASSERT_TRUE(pair.client->PostReads(list).ok());
  ASSERT_TRUE(pair.client->PostWriteSend(local.At(0, 256), ring.Remote(), local.At(256, 8), 5).ok());

  // Poll fills its span from the front and says how many it filled.
  std::vector<Completion> got;
  const auto deadline = Clock::now() + kWait;
  while (got.size() < 4 && Clock::now() < deadline) {
    Completion out[2];
    StatusOr<size_t> n = pair.client->Poll(out, 100ms);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_LE(*n, 2u);
    got.insert(got.end(), out, out + *n);
  }
  ASSERT_EQ(got.size(), 4u);
  const std::pair<uint64_t, OpType> want[] = {
      {1, OpType::kSend}, {2, OpType::kRead}, {4, OpType::kRead}, {5, OpType::kSend}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(got[i].status.ok()) << got[i].status;
    EXPECT_EQ(got[i].wr_id, want[i].first) << i;
    EXPECT_EQ(got[i].op, want[i].second) << i;
  }
}

TEST_P(TransportTest, PollWaitsAtMostItsTimeoutAndReportsNothingIdle) {
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  for (Connection* c : {pair.client.get(), pair.server.get()}) {
    Completion out[4];
    StatusOr<size_t> n = c->Poll(out, 0us);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, 0u);
    n = c->Poll(out, 20ms);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, 0u);
  }
}

TEST_P(TransportTest, AWriteIsVisibleWhenTheSendAfterItIsReceived) {
  // The PUT pattern: WRITE a record into the server's private ring and
  // SEND a message naming it, in one post; the server checks the ring when
  // the receive completes and replies, after which the client may reuse
  // that part of the ring. The WRITE itself reports nothing.
  constexpr uint32_t kSlots = 4;
  constexpr uint32_t kSlotBytes = 512;
  constexpr uint32_t kRounds = 300;
  Private ring{std::vector<uint8_t>(kSlots * kSlotBytes)};
  Buffer recv = MakeBuffer(*server_, kSlots * 64, kLocalWrite);
  Buffer reply = MakeBuffer(*server_, kSlots * 8, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) {
    ring.Register(c, kRemoteWrite | kLocalWrite);
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
      if (c.op == OpType::kSend) continue;  // a reply went out
      ++received;
      uint32_t round = 0;
      uint32_t slot = 0;
      std::memcpy(&round, recv.bytes.data() + c.wr_id * 64, 4);
      std::memcpy(&slot, recv.bytes.data() + c.wr_id * 64 + 4, 4);
      for (uint32_t i = 0; i < kSlotBytes; ++i) {
        if (slot >= kSlots || ring.bytes[slot * kSlotBytes + i] != static_cast<uint8_t>(round * 5 + slot + 1)) {
          ++mismatches;
          break;
        }
      }
      ASSERT_TRUE(pair.server->PostRecv(recv.At(c.wr_id * 64, 64), c.wr_id).ok());
      ASSERT_TRUE(pair.server->PostSend(reply.At(c.wr_id * 8, 8), 1000 + c.wr_id).ok());
    }
  });
  for (uint32_t round = 0; round < kRounds && !HasFailure(); ++round) {
    for (uint32_t slot = 0; slot < kSlots; ++slot) {
      std::memset(staging.bytes.data() + slot * kSlotBytes, static_cast<uint8_t>(round * 5 + slot + 1), kSlotBytes);
      uint8_t* msg = staging.bytes.data() + kSlots * kSlotBytes + slot * 8;
      std::memcpy(msg, &round, 4);
      std::memcpy(msg + 4, &slot, 4);
      ASSERT_TRUE(pair.client
                      ->PostWriteSend(staging.At(slot * kSlotBytes, kSlotBytes), ring.Remote(slot * kSlotBytes),
                                      staging.At(kSlots * kSlotBytes + slot * 8, 8), slot)
                      .ok());
    }
    // The ring is reused only once the server has replied to the round.
    uint32_t sends = 0;
    uint32_t replies_seen = 0;
    while (sends < kSlots || replies_seen < kSlots) {
      const Completion c = PollOne(*pair.client);
      ASSERT_TRUE(c.status.ok()) << c.status;
      if (c.op == OpType::kSend) {
        EXPECT_LT(c.wr_id, kSlots);
        ++sends;
      } else {
        ASSERT_EQ(c.op, OpType::kRecv) << "a WRITE reports no completion of its own";
        ++replies_seen;
        ASSERT_TRUE(pair.client->PostRecv(replies.At((c.wr_id - 100) * 8, 8), c.wr_id).ok());
      }
    }
  }
  // A client that stopped early leaves the server waiting: end its wait.
  if (HasFailure()) pair.client->Disconnect();
  server.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// ------------------------------------------------------------ PostWriteSends

TEST_P(TransportTest, AWriteSendListArrivesInOrderAndReportsOnlyItsSignaledSends) {
  // A client's batch of PUTs: kPairs records WRITTEN into the ring and
  // kPairs requests SENT, in one post; only the SENDs that ask for it
  // report a completion. Each record is in the ring when the SEND after
  // it is received. A client of the default send queue, which holds the
  // longest list.
  constexpr uint32_t kPairs = static_cast<uint32_t>(kMaxWriteSendsPerPost);
  constexpr uint32_t kSlotBytes = 128;
  StatusOr<std::unique_ptr<Transport>> deep = MakeTransport(GetParam(), Options{});
  ASSERT_TRUE(deep.ok()) << deep.status();
  Private ring{std::vector<uint8_t>(kPairs * kSlotBytes)};
  Buffer recv = MakeBuffer(*server_, kPairs * 64, kLocalWrite);
  Pair pair = ConnectPair(
      [&](Connection& c) {
        ring.Register(c, kRemoteWrite | kLocalWrite);
        for (uint32_t i = 0; i < kPairs; ++i) ASSERT_TRUE(c.PostRecv(recv.At(i * 64, 64), i).ok());
      },
      {}, {}, deep->get());
  ASSERT_NE(pair.client, nullptr);
  Buffer staging = MakeBuffer(**deep, kPairs * kSlotBytes + kPairs * 8, kLocalWrite);
  std::vector<WriteSendOp> ops;
  for (uint32_t i = 0; i < kPairs; ++i) {
    std::memset(staging.bytes.data() + i * kSlotBytes, static_cast<uint8_t>(i + 1), kSlotBytes);
    std::memcpy(staging.bytes.data() + kPairs * kSlotBytes + i * 8, &i, sizeof(i));
    ops.push_back(WriteSendOp{staging.At(i * kSlotBytes, kSlotBytes), ring.Remote(i * kSlotBytes),
                              staging.At(kPairs * kSlotBytes + i * 8, 8), 1000 + i,
                              /*signaled=*/i == 2 || i + 1 == kPairs});
  }
  ASSERT_TRUE(pair.client->PostWriteSends(ops).ok());

  for (uint32_t i = 0; i < kPairs; ++i) {
    const Completion c = PollOne(*pair.server);
    ASSERT_TRUE(c.status.ok()) << c.status;
    ASSERT_EQ(c.op, OpType::kRecv);
    EXPECT_EQ(c.wr_id, i) << "receives are consumed in order";
    uint32_t named = 0;
    std::memcpy(&named, recv.bytes.data() + c.wr_id * 64, sizeof(named));
    EXPECT_EQ(named, i) << "SENDs arrive in post order";
    for (uint32_t b = 0; b < kSlotBytes; ++b) {
      ASSERT_EQ(ring.bytes[named * kSlotBytes + b], static_cast<uint8_t>(named + 1))
          << "the WRITE of pair " << named << " is visible when its SEND is received";
    }
  }
  const Completion first = PollOne(*pair.client);
  const Completion last = PollOne(*pair.client);
  EXPECT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(first.op, OpType::kSend);
  EXPECT_EQ(first.wr_id, 1002u);
  EXPECT_TRUE(last.status.ok()) << last.status;
  EXPECT_EQ(last.op, OpType::kSend);
  EXPECT_EQ(last.wr_id, 1000u + kPairs - 1);
  Completion none[4];
  StatusOr<size_t> more = pair.client->Poll(none, 20ms);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(*more, 0u) << "unsignaled SENDs and WRITEs report nothing";
}

TEST_P(TransportTest, AWriteSendListThatCannotBePostedPostsNothing) {
  Private ring{std::vector<uint8_t>(4096)};
  Buffer recv = MakeBuffer(*server_, 256, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) {
    ring.Register(c, kRemoteWrite | kLocalWrite);
    for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(c.PostRecv(recv.At(i * 64, 64), i).ok());
  });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 256, kLocalWrite);
  std::memcpy(local.bytes.data() + 200, "good", 4);
  std::memcpy(local.bytes.data() + 208, "bad!", 4);
  const WriteSendOp good{local.At(0, 64), ring.Remote(0), local.At(200, 4), 1, true};
  const WriteSendOp bad_send{local.At(0, 64), ring.Remote(64), local.At(250, 8), 2, true};
  const WriteSendOp bad_write{local.At(200, 57), ring.Remote(128), local.At(208, 4), 3, true};
  EXPECT_TRUE(pair.client->PostWriteSends({}).ok()) << "an empty list posts nothing";
  const WriteSendOp mixed[] = {good, bad_send};
  EXPECT_EQ(pair.client->PostWriteSends(mixed).code(), StatusCode::kInvalidArgument);
  const WriteSendOp mixed2[] = {bad_write, good};
  EXPECT_EQ(pair.client->PostWriteSends(mixed2).code(), StatusCode::kInvalidArgument);
  // More pairs than this client's send queue (kClientSendDepth) holds.
  std::vector<WriteSendOp> too_many(kClientSendDepth / 2 + 1, good);
  const Status refused = pair.client->PostWriteSends(too_many);
  EXPECT_TRUE(refused.code() == StatusCode::kInvalidArgument || refused.code() == StatusCode::kResourceExhausted)
      << refused;
  // More than any list may hold.
  std::vector<WriteSendOp> over_limit(kMaxWriteSendsPerPost + 1, good);
  EXPECT_FALSE(pair.client->PostWriteSends(over_limit).ok());

  // None of it was posted: the server's first message is the good one.
  ASSERT_TRUE(pair.client->PostWriteSends({&good, 1}).ok());
  const Completion sent = PollOne(*pair.client);
  EXPECT_TRUE(sent.status.ok()) << sent.status;
  EXPECT_EQ(sent.wr_id, 1u);
  const Completion got = PollOne(*pair.server);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.wr_id, 0u);
  EXPECT_EQ(got.byte_len, 4u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(recv.bytes.data()), 4), "good");
}

TEST_P(TransportTest, SendsConsumeReceivesInOrderAndWaitForOne) {
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer msg = MakeBuffer(*client_, 64, 0);
  std::memcpy(msg.bytes.data(), "early message", 13);
  // No receive is posted yet: the SENDs wait for them.
  ASSERT_TRUE(pair.client->PostSend(msg.At(0, 13), 11).ok());
  ASSERT_TRUE(pair.client->PostSend(msg.At(0, 5), 12).ok());
  Completion none[1];
  StatusOr<size_t> n = pair.server->Poll(none, 0us);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);

  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  ASSERT_TRUE(pair.server->PostRecv(recv.At(0, 32), 21).ok());
  ASSERT_TRUE(pair.server->PostRecv(recv.At(32, 32), 22).ok());
  const Completion first = PollOne(*pair.server);
  ASSERT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(first.op, OpType::kRecv);
  EXPECT_EQ(first.wr_id, 21u);
  EXPECT_EQ(first.byte_len, 13u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(recv.bytes.data()), 13), "early message");
  const Completion second = PollOne(*pair.server);
  ASSERT_TRUE(second.status.ok()) << second.status;
  EXPECT_EQ(second.wr_id, 22u);
  EXPECT_EQ(second.byte_len, 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(recv.bytes.data() + 32), 5), "early");
  for (const uint64_t wr_id : {11u, 12u}) {
    const Completion sent = PollOne(*pair.client);
    EXPECT_TRUE(sent.status.ok()) << sent.status;
    EXPECT_EQ(sent.op, OpType::kSend);
    EXPECT_EQ(sent.wr_id, wr_id);
  }
}

TEST_P(TransportTest, ASendLargerThanItsReceiveBufferFailsBothSides) {
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(recv.At(0, 16), 1).ok()); });
  ASSERT_NE(pair.client, nullptr);
  Buffer msg = MakeBuffer(*client_, 64, 0);
  ASSERT_TRUE(pair.client->PostSend(msg.At(0, 64), 2).ok());
  const Completion sent = PollOne(*pair.client);
  EXPECT_EQ(sent.wr_id, 2u);
  EXPECT_FALSE(sent.status.ok());
  const Completion received = PollOne(*pair.server);
  EXPECT_EQ(received.wr_id, 1u);
  EXPECT_FALSE(received.status.ok());
}

TEST_P(TransportTest, LocalBuffersOutsideTheirRegionAreRefusedAndNothingIsPosted) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 6);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 128, kLocalWrite);
  const ReadOp outside{local.At(100, 64), table.Remote(), 1, true};
  const ReadOp no_region{LocalBuf{nullptr, 0, 8}, table.Remote(), 2, true};
  const ReadOp good{local.At(0, 64), table.Remote(), 3, true};
  EXPECT_EQ(pair.client->PostReads({&outside, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pair.client->PostReads({&no_region, 1}).code(), StatusCode::kInvalidArgument);
  const ReadOp mixed[] = {good, outside};
  EXPECT_EQ(pair.client->PostReads(mixed).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pair.client->PostSend(local.At(120, 16), 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pair.client->PostRecv(local.At(0, 129), 5).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pair.client->PostWriteSend(local.At(64, 65), table.Remote(), local.At(0, 8), 6).code(),
            StatusCode::kInvalidArgument);
  // Nothing was posted: the next completion is the good READ's.
  ASSERT_TRUE(pair.client->PostReads({&good, 1}).ok());
  const Completion done = PollOne(*pair.client);
  EXPECT_TRUE(done.status.ok()) << done.status;
  EXPECT_EQ(done.wr_id, 3u);
  EXPECT_EQ(local.bytes[63], 6);
}

// --------------------------------------------------------- PostReadsAndWait

TEST_P(TransportTest, PostReadsAndWaitReturnsWithTheDataAndHandsBackOtherCompletions) {
  Buffer table = MakeBuffer(*server_, 64 * 1024, kRemoteRead);
  for (size_t i = 0; i < table.bytes.size(); ++i) table.bytes[i] = static_cast<uint8_t>(i * 5 + 1);
  Buffer inbox = MakeBuffer(*server_, 64, kLocalWrite, 0x33);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(inbox.At(0, 32), 900).ok()); });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 4096, kLocalWrite);
  // A message from the server (its SEND completed: the client's receive
  // has its data), then a SEND of the client's, then the READs.
  ASSERT_TRUE(pair.client->PostRecv(local.At(3072, 64), 800).ok());
  ASSERT_TRUE(pair.server->PostSend(inbox.At(32, 16), 8).ok());
  const Completion server_sent = PollOne(*pair.server);
  ASSERT_TRUE(server_sent.status.ok()) << server_sent.status;
  ASSERT_TRUE(pair.client->PostSend(local.At(2048, 16), 7).ok());
  const ReadOp ops[] = {{local.At(0, 100), table.Remote(300), 1, false},
                        {local.At(100, 900), table.Remote(9000), 2, true}};
  std::vector<Completion> others;
  const Status waited = pair.client->PostReadsAndWait(ops, 10s, &others);
  ASSERT_TRUE(waited.ok()) << waited;
  EXPECT_EQ(std::memcmp(local.bytes.data(), table.bytes.data() + 300, 100), 0);
  EXPECT_EQ(std::memcmp(local.bytes.data() + 100, table.bytes.data() + 9000, 900), 0);

  // The SEND completed before the READs (in post order), so it is among
  // `others`; the receive is there or comes from the next Poll; nothing is
  // reported twice, and the waited-for READ not at all.
  size_t sends = 0;
  size_t recvs = 0;
  const auto count = [&](const Completion& c) {
    EXPECT_TRUE(c.status.ok()) << c.status;
    EXPECT_NE(c.op, OpType::kRead);
    if (c.op == OpType::kSend && c.wr_id == 7) ++sends;
    if (c.op == OpType::kRecv && c.wr_id == 800) ++recvs;
  };
  for (const Completion& c : others) count(c);
  EXPECT_EQ(sends, 1u);
  if (recvs == 0) count(PollOne(*pair.client));
  EXPECT_EQ(recvs, 1u);
  Completion more[4];
  StatusOr<size_t> n = pair.client->Poll(more, 0us);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
}

TEST_P(TransportTest, PostReadsAndWaitRefusesAListItCannotWaitFor) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 4);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 64, kLocalWrite);
  std::vector<Completion> others;
  EXPECT_EQ(pair.client->PostReadsAndWait({}, 1s, &others).code(), StatusCode::kInvalidArgument);
  const ReadOp unsignaled{local.At(0, 8), table.Remote(), 1, false};
  EXPECT_EQ(pair.client->PostReadsAndWait({&unsignaled, 1}, 1s, &others).code(), StatusCode::kInvalidArgument);
  // Nothing was posted.
  const ReadOp signaled{local.At(0, 8), table.Remote(), 2, true};
  EXPECT_TRUE(pair.client->PostReadsAndWait({&signaled, 1}, kWait, &others).ok());
  EXPECT_TRUE(others.empty());
  EXPECT_EQ(local.bytes[0], 4);
}

TEST_P(TransportTest, PostReadsAndWaitReturnsTheReadsError) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 64, kLocalWrite);
  const ReadOp bad{local.At(0, 64), RemoteBuf{table.mr->remote_addr(), table.mr->rkey() ^ 0x5a5a00u}, 3, true};
  std::vector<Completion> others;
  const Status refused = pair.client->PostReadsAndWait({&bad, 1}, kWait, &others);
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused;
}

TEST_P(TransportTest, PostReadsAndWaitGivesUpAtItsTimeout) {
  // No healthy transport leaves a READ uncompleted on demand: a
  // FaultTransport around this one drops it. The wait is the interface's
  // (transport.cc), which every implementation ends in.
  StatusOr<std::unique_ptr<Transport>> inner = MakeTransport(name_, ClientOptions());
  ASSERT_TRUE(inner.ok()) << inner.status();
  fault::FaultTransport lossy(std::move(*inner));
  ASSERT_TRUE(lossy.faults().AddSpec("read:drop").ok());
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 5);
  Pair pair = ConnectPair({}, {}, {}, &lossy);
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(lossy, 64, kLocalWrite);
  const ReadOp op{local.At(0, 64), table.Remote(), 1, true};
  std::vector<Completion> others;
  EXPECT_EQ(pair.client->PostReadsAndWait({&op, 1}, 50ms, &others).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(local.bytes[0], 0);
}

// -------------------------------------------------------- the error state

TEST_P(TransportTest, DisconnectIsIdempotentAndFailsLaterWork) {
  Buffer table = MakeBuffer(*server_, 64, kRemoteRead);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  pair.client->Disconnect();
  pair.client->Disconnect();
  Buffer local = MakeBuffer(*client_, 64, kLocalWrite);
  const ReadOp read{local.At(0, 8), table.Remote(), 1, true};
  EXPECT_EQ(pair.client->PostReads({&read, 1}).code(), StatusCode::kUnavailable);
  EXPECT_EQ(pair.client->PostSend(local.At(0, 8), 2).code(), StatusCode::kUnavailable);
  EXPECT_EQ(pair.client->PostWriteSend(local.At(0, 8), table.Remote(), local.At(8, 8), 3).code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(pair.client->PostRecv(local.At(0, 64), 4).code(), StatusCode::kUnavailable);
  Completion out[1];
  EXPECT_EQ(pair.client->Poll(out, kWait).status().code(), StatusCode::kUnavailable);
}

enum class PeerGone { kDisconnected, kDestroyed };

class PeerGoneTest : public ConformanceTest,
                     public ::testing::WithParamInterface<std::tuple<std::string, PeerGone>> {
 protected:
  void SetUp() override { Start(std::get<0>(GetParam())); }
};

TEST_P(PeerGoneTest, ThePeerFlushesItsReceivesAndFailsLaterWork) {
  constexpr int kRecvs = 4;
  Buffer msgs = MakeBuffer(*server_, kRecvs * 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) {
    for (int i = 0; i < kRecvs; ++i) ASSERT_TRUE(c.PostRecv(msgs.At(i * 64, 64), i).ok());
  });
  ASSERT_NE(pair.client, nullptr);
  if (std::get<1>(GetParam()) == PeerGone::kDestroyed) {
    pair.client.reset();
  } else {
    pair.client->Disconnect();
  }
  std::vector<Completion> seen;
  const Status end = PollUntilFailed(*pair.server, &seen);
  EXPECT_EQ(end.code(), StatusCode::kUnavailable) << end;
  // Every posted receive completes, flushed: none succeeds, none is lost.
  ASSERT_EQ(seen.size(), static_cast<size_t>(kRecvs));
  for (const Completion& c : seen) {
    EXPECT_EQ(c.op, OpType::kRecv);
    EXPECT_EQ(c.status.code(), StatusCode::kUnavailable) << c.status;
  }
  EXPECT_EQ(pair.server->PostSend(msgs.At(0, 8), 9).code(), StatusCode::kUnavailable);
  EXPECT_EQ(pair.server->PostRecv(msgs.At(0, 64), 10).code(), StatusCode::kUnavailable);
  if (pair.client != nullptr) {
    std::vector<Completion> client_seen;
    EXPECT_EQ(PollUntilFailed(*pair.client, &client_seen).code(), StatusCode::kUnavailable);
    EXPECT_TRUE(client_seen.empty());
  }
}

std::string PeerGoneTestName(const ::testing::TestParamInfo<std::tuple<std::string, PeerGone>>& info) {
  return NamePart(std::get<0>(info.param)) +
         (std::get<1>(info.param) == PeerGone::kDestroyed ? "_Destroyed" : "_Disconnected");
}

INSTANTIATE_TEST_SUITE_P(Transports, PeerGoneTest,
                         ::testing::Combine(::testing::ValuesIn(TransportsUnderTest()),
                                            ::testing::Values(PeerGone::kDisconnected, PeerGone::kDestroyed)),
                         PeerGoneTestName);

TEST_P(TransportTest, ADestroyedPeerFailsOutstandingWork) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  pair.server.reset();
  Buffer local = MakeBuffer(*client_, 64, kLocalWrite);
  // Posted before or after the client noticed: refused, or flushed.
  const ReadOp op{local.At(0, 64), table.Remote(), 1, true};
  const Status posted = pair.client->PostReads({&op, 1});
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*pair.client, &seen).code(), StatusCode::kUnavailable);
  if (posted.ok()) {
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].wr_id, 1u);
    EXPECT_EQ(seen[0].status.code(), StatusCode::kUnavailable) << seen[0].status;
  } else {
    EXPECT_EQ(posted.code(), StatusCode::kUnavailable) << posted;
    EXPECT_TRUE(seen.empty());
  }
}

// ------------------------------------------------------------ access rights

enum class BadRead { kOutOfBounds, kStraddlesTheEnd, kWrongRkey, kNoRemoteRead, kOtherConnectionsPrivate };

class BadRemoteReadTest : public ConformanceTest,
                          public ::testing::WithParamInterface<std::tuple<std::string, BadRead>> {
 protected:
  void SetUp() override { Start(std::get<0>(GetParam())); }
};

TEST_P(BadRemoteReadTest, FailsWithPermissionDeniedAndTheServerServesTheOthers) {
  const BadRead bad = std::get<1>(GetParam());
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 0x5a);
  Buffer hidden = MakeBuffer(*server_, 4096, kLocalWrite, 0x77);
  Private mine{std::vector<uint8_t>(1024, 0x33)};
  Pair other = ConnectPair([&](Connection& c) { mine.Register(c, kRemoteRead); });
  ASSERT_NE(other.client, nullptr);
  if (bad == BadRead::kOtherConnectionsPrivate && !PrivateRegionsAreEnforced(*other.server)) {
    GTEST_SKIP() << "this RDMA device has no type 2 memory windows: private regions are plain MRs";
  }
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(recv.At(0, 64), 42).ok()); });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 8192, kLocalWrite);

  RemoteBuf target = table.Remote();
  switch (bad) {
    case BadRead::kOutOfBounds: target.addr += 8192; break;
    case BadRead::kStraddlesTheEnd: target.addr += 4096 - 32; break;
    case BadRead::kWrongRkey: target.rkey ^= 0x5a5a00u; break;
    case BadRead::kNoRemoteRead: target = hidden.Remote(); break;
    case BadRead::kOtherConnectionsPrivate: target = mine.Remote(); break;
  }
  // The refused READ is unsignaled, between two others: it reports its
  // failure anyway, and the READ after it is flushed.
  const ReadOp ops[] = {
      {local.At(0, 64), table.Remote(), 1, false},
      {local.At(64, 64), target, 2, false},
      {local.At(128, 64), table.Remote(), 3, true},
  };
  ASSERT_TRUE(pair.client->PostReads(ops).ok());
  std::vector<Completion> seen;
  const Status end = PollUntilFailed(*pair.client, &seen);
  EXPECT_EQ(end.code(), StatusCode::kUnavailable) << end;
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].wr_id, 2u);
  EXPECT_EQ(seen[0].op, OpType::kRead);
  EXPECT_EQ(seen[0].status.code(), StatusCode::kPermissionDenied) << seen[0].status;
  EXPECT_EQ(seen[1].wr_id, 3u);
  EXPECT_EQ(seen[1].status.code(), StatusCode::kUnavailable) << seen[1].status;
  EXPECT_EQ(local.bytes[64], 0) << "nothing of the refused READ arrived";
  // A connection in the error state refuses later work.
  EXPECT_FALSE(pair.client->PostReads({&ops[0], 1}).ok());

  // The other connection, and new ones, are served as before.
  const ReadOp again{local.At(0, 64), mine.Remote(), 5, true};
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

std::string BadReadName(BadRead b) {
  switch (b) {
    case BadRead::kOutOfBounds: return "OutOfBounds";
    case BadRead::kStraddlesTheEnd: return "StraddlesTheEnd";
    case BadRead::kWrongRkey: return "WrongRkey";
    case BadRead::kNoRemoteRead: return "NoRemoteRead";
    case BadRead::kOtherConnectionsPrivate: return "OtherConnectionsPrivate";
  }
  return "Unknown";
}

INSTANTIATE_TEST_SUITE_P(
    Transports, BadRemoteReadTest,
    ::testing::Combine(::testing::ValuesIn(TransportsUnderTest()),
                       ::testing::Values(BadRead::kOutOfBounds, BadRead::kStraddlesTheEnd, BadRead::kWrongRkey,
                                         BadRead::kNoRemoteRead, BadRead::kOtherConnectionsPrivate)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, BadRead>>& info) {
      return NamePart(std::get<0>(info.param)) + "_" + BadReadName(std::get<1>(info.param));
    });

enum class BadWrite { kNoRemoteWrite, kOutOfBounds, kWrongRkey, kOtherConnectionsPrivate };

class BadRemoteWriteTest : public ConformanceTest,
                           public ::testing::WithParamInterface<std::tuple<std::string, BadWrite>> {
 protected:
  void SetUp() override { Start(std::get<0>(GetParam())); }
};

TEST_P(BadRemoteWriteTest, FailsWithPermissionDeniedAndChangesNothing) {
  const BadWrite bad = std::get<1>(GetParam());
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 0x5a);
  Private others_ring{std::vector<uint8_t>(1024, 0)};
  Pair other = ConnectPair([&](Connection& c) { others_ring.Register(c, kRemoteWrite | kLocalWrite); });
  ASSERT_NE(other.client, nullptr);
  if (bad == BadWrite::kOtherConnectionsPrivate && !PrivateRegionsAreEnforced(*other.server)) {
    GTEST_SKIP() << "this RDMA device has no type 2 memory windows: private regions are plain MRs";
  }
  Private ring{std::vector<uint8_t>(1024, 0)};
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) {
    ring.Register(c, kRemoteWrite | kLocalWrite);
    ASSERT_TRUE(c.PostRecv(recv.At(0, 64), 42).ok());
  });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 256, kLocalWrite, 0xee);

  RemoteBuf target;
  switch (bad) {
    case BadWrite::kNoRemoteWrite: target = table.Remote(64); break;
    case BadWrite::kOutOfBounds: target = ring.Remote(1024 - 64); break;
    case BadWrite::kWrongRkey: target = ring.Remote(); target.rkey ^= 0x5a5a00u; break;
    case BadWrite::kOtherConnectionsPrivate: target = others_ring.Remote(); break;
  }
  ASSERT_TRUE(pair.client->PostWriteSend(local.At(0, 128), target, local.At(128, 16), 7).ok());
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*pair.client, &seen).code(), StatusCode::kUnavailable);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen[0].op, OpType::kWrite);
  EXPECT_EQ(seen[0].wr_id, 7u);
  EXPECT_EQ(seen[0].status.code(), StatusCode::kPermissionDenied) << seen[0].status;
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_FALSE(seen[i].status.ok()) << "the SEND after it";
  EXPECT_EQ(table.bytes, std::vector<uint8_t>(4096, 0x5a));
  EXPECT_EQ(ring.bytes, std::vector<uint8_t>(1024, 0));
  EXPECT_EQ(others_ring.bytes, std::vector<uint8_t>(1024, 0));
  // The SEND behind the refused WRITE never reaches the server's receive.
  Completion out[4];
  StatusOr<size_t> n = pair.server->Poll(out, 0us);
  for (size_t i = 0; n.ok() && i < *n; ++i) EXPECT_FALSE(out[i].status.ok()) << "the receive completed";

  // The other connection writes its own ring, as new connections do theirs.
  Buffer other_recv = MakeBuffer(*server_, 64, kLocalWrite);
  ASSERT_TRUE(other.server->PostRecv(other_recv.At(0, 64), 1).ok());
  ASSERT_TRUE(other.client->PostWriteSend(local.At(0, 128), others_ring.Remote(), local.At(128, 16), 8).ok());
  const Completion arrived = PollOne(*other.server);
  EXPECT_TRUE(arrived.status.ok()) << arrived.status;
  EXPECT_EQ(others_ring.bytes[0], 0xee);
  EXPECT_EQ(others_ring.bytes[127], 0xee);
  EXPECT_EQ(others_ring.bytes[128], 0);
  EXPECT_TRUE(PollOne(*other.client).status.ok());
}

std::string BadWriteName(BadWrite b) {
  switch (b) {
    case BadWrite::kNoRemoteWrite: return "NoRemoteWrite";
    case BadWrite::kOutOfBounds: return "OutOfBounds";
    case BadWrite::kWrongRkey: return "WrongRkey";
    case BadWrite::kOtherConnectionsPrivate: return "OtherConnectionsPrivate";
  }
  return "Unknown";
}

INSTANTIATE_TEST_SUITE_P(
    Transports, BadRemoteWriteTest,
    ::testing::Combine(::testing::ValuesIn(TransportsUnderTest()),
                       ::testing::Values(BadWrite::kNoRemoteWrite, BadWrite::kOutOfBounds, BadWrite::kWrongRkey,
                                         BadWrite::kOtherConnectionsPrivate)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, BadWrite>>& info) {
      return NamePart(std::get<0>(info.param)) + "_" + BadWriteName(std::get<1>(info.param));
    });

// ------------------------------------------------------------ thread safety

TEST_P(TransportTest, OneTransportServesConnectionsOnManyThreads) {
  constexpr int kClients = 4;
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead);
  for (size_t i = 0; i < table.bytes.size(); ++i) table.bytes[i] = static_cast<uint8_t>(i / 16);
  std::vector<std::unique_ptr<Connection>> accepted;
  std::thread acceptor([&] {
    for (int i = 0; i < kClients; ++i) {
      std::unique_ptr<Connection> c = NextPending();
      if (c == nullptr) return;
      EXPECT_TRUE(c->Accept({}).ok());
      accepted.push_back(std::move(c));
    }
  });
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      // Each client thread registers and connects on the shared transport.
      Buffer local = MakeBuffer(*client_, 256, kLocalWrite);
      StatusOr<std::unique_ptr<Connection>> c = client_->Connect(listener_->address(), {}, kWait);
      ASSERT_TRUE(c.ok()) << c.status();
      const ReadOp op{local.At(0, 256), table.Remote(i * 256), static_cast<uint64_t>(i), true};
      ASSERT_TRUE((*c)->PostReads({&op, 1}).ok());
      const Completion done = PollOne(**c);
      EXPECT_TRUE(done.status.ok()) << done.status;
      EXPECT_EQ(std::memcmp(local.bytes.data(), table.bytes.data() + i * 256, 256), 0) << "client " << i;
    });
  }
  for (std::thread& t : clients) t.join();
  if (HasFailure()) listener_->Shutdown();
  acceptor.join();
}

}  // namespace
}  // namespace rkv::transport
